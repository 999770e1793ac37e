//! The disruption function at 1,000 nodes, in the simulated world, with core's decisions:
//! 30,000 pods of 250m / 1 GiB are provisioned onto ~1,000 m5.2xlarge nodes, then a third
//! of them are deleted at random (a scale-down leaves every node fragmented). Prints:
//!
//! - the wall time of one disruption run (gather, decide over every candidate, start the
//!   commands within the budgets) and of the next run, which finds commands in flight;
//! - the calls one command costs from its decision to its instance's termination, by
//!   operation: the counts while the commands run, less what the provisioner's polls
//!   make anyway (measured over the same number of polls with nothing to do), divided
//!   by the commands.
//!
//! cargo run --release -p nodewright-engine --example disruption_bench

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::{Duration, Instant};

use nodewright_core::api::model::Operator;
use nodewright_core::catalog::Catalog;
use nodewright_core::nodeclaim::ClaimState;
use nodewright_core::testing::{node_pool, pod, req};
use nodewright_core::well_known::LABEL_INSTANCE_TYPE;
use nodewright_engine::{Disrupter, DisruptionConfig, Provisioner, ProvisionerConfig};
use nodewright_sim::fakes::{Call, node_class};
use nodewright_sim::{World, WorldConfig};

const ZONES: [&str; 3] = ["us-east-1a", "us-east-1b", "us-east-1c"];
/// 2025-01-01T00:00:00Z.
const START: i64 = 1_735_689_600;
const POLL: Duration = Duration::from_secs(5);
const PODS: usize = 30_000;

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() {
    let world = World::new(
        Catalog::embedded().clone(),
        &ZONES,
        START,
        // The world acts every 5 s, not every second: at 30,000 pods its own steps
        // (binder, budget observer) would be most of the bench's time.
        WorldConfig {
            step: Duration::from_secs(5),
            ..WorldConfig::default()
        },
    );
    world.cluster.with_state(|s| {
        s.node_pools.push(node_pool(
            "default",
            vec![
                req("kubernetes.io/arch", Operator::In, &["amd64"]),
                req(LABEL_INSTANCE_TYPE, Operator::In, &["m5.2xlarge"]),
            ],
        ));
        s.node_classes.push(node_class("default"));
    });
    for i in 0..PODS {
        let mut p = pod(&format!("web-{i}"), "250m", "1Gi");
        p.labels.insert("app".into(), format!("web-{}", i % 50));
        world.cluster.add_pod(p);
    }
    let provisioner = Provisioner::new(
        world.ports(),
        ProvisionerConfig::new("bench-cluster", "provisioner-1"),
    );
    let disrupter = Disrupter::new(
        world.ports(),
        DisruptionConfig::new("bench-cluster", "disruption-1"),
    );

    let setup = Instant::now();
    let mut minutes = 0;
    while (unbound(&world) > 0 || !all_initialized(&world)) && minutes < 15 {
        provision_for_a_minute(&world, &provisioner).await;
        minutes += 1;
    }
    let nodes = world.cluster.nodes().len();
    println!(
        "cluster: {nodes} nodes, {} pods bound, {} unbound, after {minutes} virtual minutes ({:.1} s)",
        PODS - unbound(&world),
        unbound(&world),
        setup.elapsed().as_secs_f64()
    );

    // A scale-down: a third of the pods go, at random (a fixed seed).
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    world.cluster.with_state(|s| {
        s.pods.retain(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            !seed.is_multiple_of(3)
        })
    });
    let pods_left = world.cluster.snapshot().pods.len();

    // What the provisioner's polls cost with nothing to do: the baseline.
    let before = Counts::now(&world);
    provision_for_a_minute(&world, &provisioner).await;
    let quiet = Counts::now(&world).since(&before);
    let quiet_polls = 60 / POLL.as_secs();

    let t = Instant::now();
    let report = disrupter.tick().await.expect("disruption run");
    let first = t.elapsed();
    let candidates: usize = report.started.iter().map(|c| c.nodes.len()).sum();
    println!(
        "disruption run over {nodes} nodes / {pods_left} pods: {:.2} s wall — {} command(s) started ({candidates} node(s), {} replacement(s)), {} node(s) rejected, ${:.4}/h → ${:.4}/h",
        first.as_secs_f64(),
        report.started.len(),
        report
            .started
            .iter()
            .map(|c| c.replacements.len())
            .sum::<usize>(),
        report.rejected.len(),
        report.price_per_hour.before,
        report.price_per_hour.after,
    );
    let t = Instant::now();
    let next = disrupter.tick().await.expect("disruption run");
    println!(
        "next run (commands in flight, advanced a step, nothing decided): {:.2} s wall, decided={}",
        t.elapsed().as_secs_f64(),
        next.decided
    );

    // The commands run to their end on the provisioner's polls.
    let during = Counts::now(&world);
    let mut polls = 0;
    for _ in 0..20 {
        provision_for_a_minute(&world, &provisioner).await;
        polls += quiet_polls;
        let open = world
            .store
            .claims()
            .into_iter()
            .filter(|c| c.disruption.is_some() && c.state != ClaimState::Terminated)
            .count();
        if open == 0 {
            break;
        }
    }
    let spent = Counts::now(&world).since(&during);
    for d in world
        .store
        .all_decisions()
        .into_iter()
        .filter(|d| d.job == "disruption")
    {
        println!("  decision: {}: {}", d.action, d.reason);
    }
    let commands = report.started.len().max(1) as f64;
    println!(
        "calls per command ({} command(s), {polls} provisioner polls, {} node(s) left, {} pod(s) pending, {} PDB violation(s)):",
        report.started.len(),
        world.cluster.nodes().len(),
        unbound(&world),
        world.budget_violations().len(),
    );
    let scale = polls as f64 / quiet_polls as f64;
    for (op, n) in &spent.0 {
        let base = quiet.0.get(op).copied().unwrap_or(0) as f64 * scale;
        let extra = (*n as f64 - base) / commands;
        if extra >= 0.05 {
            println!("  {op:<24} {extra:>7.1}");
        }
    }
    println!(
        "  (baseline per provisioner poll, made with or without commands: {})",
        quiet
            .0
            .iter()
            .map(|(op, n)| format!("{op} {:.1}", *n as f64 / quiet_polls as f64))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

/// One scheduled provisioner invocation (55 s of polls) while the world runs a minute.
async fn provision_for_a_minute(world: &World, provisioner: &Provisioner) {
    let until = world.now() + 60;
    tokio::join!(world.run(until), async {
        provisioner.run_for(Duration::from_secs(55), POLL).await;
        let wait = (until - world.now()).max(0);
        tokio::time::sleep(Duration::from_secs(wait as u64)).await;
    });
}

/// Pods in the API server not bound to a node.
fn unbound(world: &World) -> usize {
    world
        .cluster
        .snapshot()
        .pods
        .iter()
        .filter(|p| p.node_name.is_none())
        .count()
}

fn all_initialized(world: &World) -> bool {
    world
        .store
        .claims()
        .iter()
        .all(|c| c.state.is_terminal() || c.state == ClaimState::Initialized)
}

/// Calls per port operation ("Cloud.Launch", "Store.UpdateClaim"...) in the fakes' logs.
struct Counts(BTreeMap<String, usize>);

impl Counts {
    fn now(world: &World) -> Counts {
        let mut counts = BTreeMap::new();
        add(&mut counts, "Cloud", &world.cloud.calls());
        add(&mut counts, "Cluster", &world.cluster.calls());
        add(&mut counts, "Store", &world.store.calls());
        Counts(counts)
    }

    fn since(&self, earlier: &Counts) -> Counts {
        Counts(
            self.0
                .iter()
                .map(|(op, n)| (op.clone(), n - earlier.0.get(op).copied().unwrap_or(0)))
                .collect(),
        )
    }
}

fn add<Op: Debug>(counts: &mut BTreeMap<String, usize>, port: &str, calls: &[Call<Op>]) {
    for c in calls {
        *counts.entry(format!("{port}.{:?}", c.op)).or_default() += 1;
    }
}
