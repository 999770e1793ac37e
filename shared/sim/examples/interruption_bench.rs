//! The interruption job at Karpenter's interruption-benchmark size, over the in-memory
//! fakes: 15,000 owned spot instances, each with a Ready node, 3 pods and a DaemonSet
//! pod, and one spot-interruption message per instance. Every message runs the whole
//! decision path: de-duplication, claim lookup, ICE entry, Disrupting, taint, evictions
//! (non-critical then critical), TerminateInstances, node deletion, tombstone.
//!
//! Measures messages per second and the latency per message (p50, p99, max), first one
//! message at a time, then ten at a time (an SQS batch) on one thread, as one Lambda
//! instance would run them. The fakes answer at once: this is the engine's own cost, the
//! floor under the real one (a real run adds the API round trips).
//!
//! cargo run --release -p nodewright-engine --example interruption_bench

use std::sync::Arc;
use std::time::{Duration, Instant};

use nodewright_core::catalog::{CapacityType, Catalog};
use nodewright_core::cluster::{Node, Pod, PodFields};
use nodewright_core::nodeclaim::{ClaimState, DisruptionCause, NodeClaim};
use nodewright_engine::ports::{ClaimStore, Clock};
use nodewright_engine::{
    InstanceAction, InterruptionConfig, InterruptionInput, InterruptionMode, InterruptionOutcome,
    Ports, handle_interruption,
};
use nodewright_sim::fakes::{FakeCloud, FakeCluster, ManualClock, MemoryStore};

const MESSAGES: usize = 15_000;
const ZONES: [&str; 3] = ["us-east-1a", "us-east-1b", "us-east-1c"];
const BATCH: usize = 10;

struct Fleet {
    ports: Ports,
    cloud: Arc<FakeCloud>,
    instances: Vec<String>,
}

async fn fleet() -> Fleet {
    let clock = Arc::new(ManualClock::default());
    let catalog = Catalog::embedded().clone();
    let cloud = Arc::new(FakeCloud::new(catalog.clone(), &ZONES, clock.clone()));
    let cluster = Arc::new(FakeCluster::new(Arc::new(catalog)));
    let store = Arc::new(MemoryStore::new());
    let now = clock.now();
    let mut instances = Vec::with_capacity(MESSAGES);
    for i in 0..MESSAGES {
        let zone = ZONES[i % ZONES.len()];
        let name = format!("spot-{i:05}");
        let instance = cloud.insert_instance("m5.large", zone, Some(&name), now - 3600);
        let node = format!(
            "ip-10-{}-{}-{}.ec2.internal",
            i / 65536,
            (i / 256) % 256,
            i % 256
        );
        cluster.add_node(Node {
            name: node.clone(),
            provider_id: Some(format!("aws:///{zone}/{}", instance.id)),
            ready: true,
            ..Node::default()
        });
        for (j, (critical, daemonset)) in
            [(false, false), (false, false), (true, false), (false, true)]
                .into_iter()
                .enumerate()
        {
            cluster.add_pod(Pod::from(PodFields {
                namespace: if critical || daemonset {
                    "kube-system".into()
                } else {
                    "default".into()
                },
                name: format!("p{i:05}-{j}"),
                node_name: Some(node.clone()),
                critical,
                daemonset_owned: daemonset,
                ..PodFields::default()
            }));
        }
        let claim = NodeClaim {
            name: name.clone(),
            node_pool: "spot".into(),
            node_class: "default".into(),
            state: ClaimState::Initialized,
            version: 4,
            instance_type_options: vec!["m5.large".into()].into(),
            zones: vec![zone.into()],
            capacity_types: vec![CapacityType::Spot],
            pods: Default::default(),
            labels: Default::default(),
            created_at: now - 3600,
            updated_at: now - 3500,
            instance_id: Some(instance.id.clone()),
            instance_type: Some("m5.large".into()),
            zone: Some(zone.into()),
            capacity_type: Some(CapacityType::Spot),
            price_per_hour: Some(0.035),
            node_name: Some(node),
            launched_at: Some(now - 3600),
            registered_at: Some(now - 3550),
            initialized_at: Some(now - 3500),
            disruption: None,
            failure: None,
            expires_at: None,
            adopted: false,
            nodepool_hash: None,
            nodeclass_hash: None,
            terminate_requested_at: None,
            overlays_applied: Default::default(),
            reboot: None,
            reboots: Vec::new(),
            rebooted_at: None,
        };
        store.create_claim(&claim).await.expect("claim");
        instances.push(instance.id);
    }
    let ports = Ports::new(cloud.clone(), cluster, store, clock);
    Fleet {
        ports,
        cloud,
        instances,
    }
}

fn input(i: usize, instance: &str, now: i64) -> InterruptionInput {
    InterruptionInput {
        event_id: format!("spot-warning-{i:05}"),
        instance_ids: vec![instance.to_string()],
        cause: DisruptionCause::SpotInterrupted,
        deadline: Some(now + 120),
        mark_unavailable: true,
        mode: InterruptionMode::Drain,
    }
}

fn check(outcome: &InterruptionOutcome) {
    assert!(
        matches!(
            outcome.instances()[0].action,
            InstanceAction::Disrupted {
                state: ClaimState::Terminated
            }
        ),
        "{outcome:?}"
    );
}

fn report(label: &str, total: Duration, mut latencies: Vec<Duration>) {
    latencies.sort();
    let pct = |p: f64| latencies[((latencies.len() as f64 * p).ceil() as usize).saturating_sub(1)];
    println!(
        "{label:<28} {:>7} msgs in {:>7.3}s = {:>9.0} msgs/s   p50 {:>7.1}µs   p99 {:>7.1}µs   max {:>8.1}µs",
        latencies.len(),
        total.as_secs_f64(),
        latencies.len() as f64 / total.as_secs_f64(),
        pct(0.50).as_secs_f64() * 1e6,
        pct(0.99).as_secs_f64() * 1e6,
        latencies.last().copied().unwrap_or_default().as_secs_f64() * 1e6,
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let config = InterruptionConfig::default();

    let started = Instant::now();
    let f = fleet().await;
    println!(
        "fleet: {MESSAGES} spot instances, {MESSAGES} nodes, {} pods, built in {:.2}s",
        MESSAGES * 4,
        started.elapsed().as_secs_f64()
    );

    // One message at a time.
    let now = f.ports.clock.now();
    let mut latencies = Vec::with_capacity(MESSAGES);
    let started = Instant::now();
    for (i, id) in f.instances.iter().enumerate() {
        let t = Instant::now();
        let outcome = handle_interruption(&f.ports, &config, input(i, id, now))
            .await
            .expect("handled");
        latencies.push(t.elapsed());
        check(&outcome);
    }
    report("sequential", started.elapsed(), latencies);
    let terminated = f.cloud.running().len();
    assert_eq!(terminated, 0, "every instance terminated");
    let ice = f
        .ports
        .backoff
        .unavailable_offerings(now)
        .await
        .expect("ice");
    println!(
        "  instances left running: {terminated}; ICE entries: {} (type × zone)",
        ice.len()
    );

    // Ten at a time on one thread (an SQS batch handled concurrently), fresh fleet.
    let f = fleet().await;
    let now = f.ports.clock.now();
    let mut latencies = Vec::with_capacity(MESSAGES);
    let started = Instant::now();
    for (b, chunk) in f.instances.chunks(BATCH).enumerate() {
        let mut set = tokio::task::JoinSet::new();
        for (j, id) in chunk.iter().enumerate() {
            let ports = f.ports.clone();
            let config = config.clone();
            let input = input(b * BATCH + j, id, now);
            set.spawn(async move {
                let t = Instant::now();
                let outcome = handle_interruption(&ports, &config, input)
                    .await
                    .expect("handled");
                (t.elapsed(), outcome)
            });
        }
        while let Some(done) = set.join_next().await {
            let (latency, outcome) = done.expect("no panic");
            check(&outcome);
            latencies.push(latency);
        }
    }
    report(
        &format!("batches of {BATCH}, one thread"),
        started.elapsed(),
        latencies,
    );

    // Redelivery of every message: all duplicates.
    let started = Instant::now();
    let mut latencies = Vec::with_capacity(MESSAGES);
    for (i, id) in f.instances.iter().enumerate() {
        let t = Instant::now();
        let outcome = handle_interruption(&f.ports, &config, input(i, id, now))
            .await
            .expect("handled");
        latencies.push(t.elapsed());
        assert_eq!(outcome, InterruptionOutcome::Duplicate);
    }
    report("redelivered (duplicates)", started.elapsed(), latencies);
}
