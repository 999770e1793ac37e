//! One provisioning tick at scale over the in-memory fakes: 10,000 pending pods of
//! mixed shapes, 1,000 Ready nodes, 3 general-purpose-like NodePools, the embedded
//! catalog. Prints the time of the decision (plan) alone and of a full tick, and the
//! Store and Cloud calls per launched claim from the fakes' call logs.
//!
//! cargo run --release -p nodewright-engine --example tick_bench

use std::sync::Arc;
use std::time::Instant;

use nodewright_core::api::model::Operator;
use nodewright_core::catalog::{CapacityType, Catalog};
use nodewright_core::cluster::ClusterSnapshot;
use nodewright_core::pricing::Pricing;
use nodewright_core::provisioning::{ProvisioningInput, plan_provisioning};
use nodewright_core::testing::{general_purpose_pool, node, node_pool, pod, req};
use nodewright_core::well_known::LABEL_CAPACITY_TYPE;
use nodewright_engine::{Ports, Provisioner, ProvisionerConfig};
use nodewright_sim::fakes::{FakeCloud, FakeCluster, ManualClock, MemoryStore, node_class};

const ZONES: [&str; 3] = ["us-east-1a", "us-east-1b", "us-east-1c"];

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let catalog = Catalog::embedded().clone();
    let clock = Arc::new(ManualClock::default());
    let cloud = Arc::new(FakeCloud::new(catalog.clone(), &ZONES, clock.clone()));
    let cluster = Arc::new(FakeCluster::new(Arc::new(catalog.clone())));
    let store = Arc::new(MemoryStore::new());

    let mut gp = general_purpose_pool();
    gp.weight = 10;
    let mut spot = general_purpose_pool();
    spot.name = "spot".into();
    spot.requirements.retain(|r| r.key != LABEL_CAPACITY_TYPE);
    spot.requirements.push(req(
        LABEL_CAPACITY_TYPE,
        Operator::In,
        &["spot", "on-demand"],
    ));
    spot.weight = 5;
    let compute = node_pool(
        "compute",
        vec![
            req("kubernetes.io/arch", Operator::In, &["amd64"]),
            req("karpenter.k8s.aws/instance-category", Operator::In, &["c"]),
            req(
                "karpenter.k8s.aws/instance-generation",
                Operator::Gt,
                &["4"],
            ),
        ],
    );
    let pools = vec![gp, spot, compute];

    let shapes = [
        ("250m", "512Mi"),
        ("500m", "1Gi"),
        ("1", "2Gi"),
        ("2", "4Gi"),
        ("1", "8Gi"),
        ("4", "8Gi"),
        ("100m", "128Mi"),
    ];
    let types = ["m5.2xlarge", "c5.2xlarge", "r5.xlarge", "m6i.4xlarge"];
    cluster.with_state(|s| {
        s.node_pools = pools.clone();
        s.node_classes.push(node_class("default"));
        for i in 0..1000 {
            let pool = &pools[i % 3].name;
            let mut n = node(
                &format!("node-{i}"),
                types[i % types.len()],
                ZONES[i % 3],
                pool,
                &catalog,
            );
            n.provider_id = Some(format!(
                "aws:///{}/i-{:017x}",
                ZONES[i % 3],
                0xa000_0000_0000u64 + i as u64
            ));
            // Two running pods per node, so existing capacity is partly used.
            for j in 0..2 {
                let mut p = pod(&format!("running-{i}-{j}"), "1", "2Gi");
                p.node_name = Some(n.name.clone());
                s.pods.push(p);
            }
            s.nodes.push(n);
        }
        for i in 0..10_000 {
            let (cpu, mem) = shapes[i % shapes.len()];
            s.pods.push(pod(&format!("app{}-{i}", i % 40), cpu, mem));
        }
    });

    // The decision alone: the planner on the same inputs the tick builds.
    let state = cluster.snapshot();
    let snapshot = ClusterSnapshot {
        pods: state.pods.clone(),
        nodes: state.nodes.clone(),
        daemonsets: vec![],
        pdbs: vec![],
        workloads: Vec::new(),
        services: Vec::new(),
        controllers: Vec::new(),
        autoscalers: Vec::new(),
    };
    let pricing = Pricing::for_zones(ZONES.map(String::from).to_vec());
    let t = Instant::now();
    let plan = plan_provisioning(&ProvisioningInput {
        snapshot: &snapshot,
        node_pools: &pools,
        node_classes: &state.node_classes,
        catalog: &catalog,
        pricing: &pricing,
        in_flight: &[],
    });
    let plan_time = t.elapsed();
    let absorbed: usize = plan.existing_nodes.iter().map(|a| a.pods.len()).sum();
    println!(
        "plan:        {:>8.1} ms  ({} new claims, {} pods onto existing nodes, {} unschedulable, ${:.2}/h)",
        plan_time.as_secs_f64() * 1e3,
        plan.node_claims.len(),
        absorbed,
        plan.unschedulable.len(),
        plan.total_price_per_hour
    );

    let ports = Ports::new(cloud.clone(), cluster.clone(), store.clone(), clock.clone());
    let mut dry = ProvisionerConfig::new("bench", "bench-dry");
    dry.dry_run = true;
    let t = Instant::now();
    let report = Provisioner::new(ports.clone(), dry)
        .tick()
        .await
        .expect("dry-run tick");
    println!(
        "dry-run tick:{:>8.1} ms  ({} claims planned)",
        t.elapsed().as_secs_f64() * 1e3,
        report.planned.len()
    );

    store.clear_calls();
    cloud.clear_calls();
    cluster.clear_calls();
    let prov = Provisioner::new(ports, ProvisionerConfig::new("bench", "bench"));
    let t = Instant::now();
    let report = prov.tick().await.expect("tick");
    let tick_time = t.elapsed();
    let launched = report.launched.len().max(1) as f64;
    let spot_claims = report
        .launched
        .iter()
        .filter(|l| l.capacity_type == CapacityType::Spot)
        .count();
    println!(
        "full tick:   {:>8.1} ms  ({} claims launched, {} spot, {} failed, {} pending pods seen)",
        tick_time.as_secs_f64() * 1e3,
        report.launched.len(),
        spot_claims,
        report.failed.len(),
        report.pending.len()
    );
    let store_calls = store.call_counts();
    let cloud_calls = cloud.call_counts();
    let cluster_calls = cluster.call_counts();
    println!(
        "store calls per launched claim:   {:.2}  {:?}",
        store_calls.values().sum::<usize>() as f64 / launched,
        store_calls
    );
    println!(
        "cloud calls per launched claim:   {:.2}  {:?}",
        cloud_calls.values().sum::<usize>() as f64 / launched,
        cloud_calls
    );
    println!(
        "cluster calls per launched claim: {:.2}  {:?}",
        cluster_calls.values().sum::<usize>() as f64 / launched,
        cluster_calls
    );

    let t = Instant::now();
    let again = prov.tick().await.expect("second tick");
    println!(
        "second tick: {:>8.1} ms  ({} launched: every pending pod is counted against in-flight claims)",
        t.elapsed().as_secs_f64() * 1e3,
        again.launched.len()
    );
}
