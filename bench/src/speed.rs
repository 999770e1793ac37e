//! `nodewright-bench synthetic` and `real`: how fast `plan_provisioning` is, timed in
//! this process (best of N runs of the call alone, an inner-loop timing, not a whole
//! command); every plan is checked with `testing::violations` outside the timing.
//!
//! - `synthetic`: the shape of Karpenter's own scheduling benchmark
//!   (kubernetes-sigs/karpenter `pkg/controllers/provisioning/scheduling/scheduling_benchmark_test.go`):
//!   400 fake instance types (type i has i+1 vCPU, 2(i+1) GiB, 10(i+1) pods, priced
//!   0.1/vCPU + 0.1/GB as Karpenter's fake provider does) offered in 3 zones, spot and
//!   on-demand, one NodePool, and pods in equal groups with topology spread and pod
//!   (anti-)affinity.
//! - `real`: the embedded AWS catalog behind a c/m/r, generation > 4 NodePool, with the
//!   mixed web / worker / cache / batch workload and two DaemonSets.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use nodewright_core::catalog::Catalog;
use nodewright_core::cluster::ClusterSnapshot;
use nodewright_core::pricing::Pricing;
use nodewright_core::provisioning::{ProvisioningInput, ProvisioningPlan, plan_provisioning};
use serde_json::json;

use crate::cost::cost_lower_bound;
use crate::report::{Report, thousands};
use crate::workload::{
    SEED, SYNTHETIC_TYPES, Shape, real_pool, real_snapshot, synthetic_catalog, synthetic_pods,
    synthetic_pool, synthetic_pricing,
};

/// Pods per second the planner must sustain on the synthetic suite at 5,000 and 20,000 pods.
pub const TARGET_PODS_PER_SEC: f64 = 20_000.0;
pub const DEFAULT_SYNTHETIC_SIZES: [usize; 6] = [1, 100, 1_000, 5_000, 10_000, 20_000];
pub const DEFAULT_REAL_SIZES: [usize; 3] = [500, 3_000, 10_000];

/// Plans `runs` times and returns the last plan with the fastest run's duration.
fn time_plan(input: &ProvisioningInput<'_>, runs: usize) -> (ProvisioningPlan, Duration) {
    let mut best = Duration::MAX;
    let mut plan = None;
    for _ in 0..runs.max(1) {
        let start = Instant::now();
        let p = plan_provisioning(input);
        best = best.min(start.elapsed());
        plan = Some(p);
    }
    (plan.expect("at least one run"), best)
}

fn runs_for(pods: usize) -> usize {
    match pods {
        0..=1_000 => 5,
        1_001..=5_000 => 5,
        _ => 3,
    }
}

/// The synthetic suite for each shape `shape` stands for.
pub fn synthetic(out: &mut Report, shape: Shape, sizes: &[usize]) {
    let shapes: &[Shape] = match shape {
        Shape::Both => &[Shape::Karpenter, Shape::Five],
        Shape::Karpenter => &[Shape::Karpenter],
        Shape::Five => &[Shape::Five],
    };
    for &shape in shapes {
        synthetic_suite(out, shape, sizes);
    }
}

fn synthetic_suite(out: &mut Report, shape: Shape, sizes: &[usize]) {
    let (title, groups) = match shape {
        Shape::Five => (
            "five-group variant",
            "generic, zone spread, hostname spread, zonal self-affinity, hostname self anti-affinity; memory uniform 100..4096Mi",
        ),
        _ => (
            "Karpenter's makeDiversePods",
            "generic, zone spread, hostname spread, hostname affinity, zone affinity, hostname anti-affinity; random labels a..g",
        ),
    };
    let shape_name = if shape == Shape::Five {
        "five"
    } else {
        "karpenter"
    };
    out.header(
        &format!("synthetic ({title}): {SYNTHETIC_TYPES} fake instance types × 3 zones × spot/on-demand, 1 NodePool"),
        &format!(
            "≥ {} pods/s at 5,000 and 20,000 pods (Karpenter's own benchmark: ~1,200–1,700 pods/s)",
            thousands(TARGET_PODS_PER_SEC)
        ),
    );
    out.line(&format!("pods: {groups}; only plan_provisioning is timed (best of N); plans checked by testing::violations"));
    out.line(&format!(
        "{:>8} {:>8} {:>8} {:>10} {:>12} {:>5}",
        "pods", "claims", "unsched", "best ms", "pods/s", "runs"
    ));
    let catalog = synthetic_catalog(SYNTHETIC_TYPES);
    let pricing = synthetic_pricing();
    let pools = [synthetic_pool()];
    let mut at: HashMap<usize, f64> = HashMap::new();
    for &size in sizes {
        let snapshot = ClusterSnapshot {
            pods: synthetic_pods(size, shape, SEED),
            ..Default::default()
        };
        let input = ProvisioningInput {
            snapshot: &snapshot,
            node_pools: &pools,
            node_classes: &[],
            catalog: &catalog,
            pricing: &pricing,
            in_flight: &[],
        };
        let runs = runs_for(size);
        let (plan, best) = time_plan(&input, runs);
        let secs = best.as_secs_f64();
        let rate = size as f64 / secs.max(1e-9);
        at.insert(size, rate);
        out.line(&format!(
            "{:>8} {:>8} {:>8} {:>10.2} {:>12} {:>5}",
            thousands(size as f64),
            plan.node_claims.len(),
            plan.unschedulable.len(),
            secs * 1e3,
            thousands(rate),
            runs
        ));
        out.record(json!({
            "suite": "synthetic", "shape": shape_name, "pods": size, "claims": plan.node_claims.len(),
            "unschedulable": plan.unschedulable.len(), "best_ms": secs * 1e3, "pods_per_sec": rate, "runs": runs,
            "price_per_hour": plan.total_price_per_hour,
        }));
        out.unschedulable_summary(&plan);
        out.check_plan(
            &format!("synthetic {shape_name} {size} pods"),
            &plan,
            &snapshot,
            &pools,
            &catalog,
        );
    }
    for size in [5_000, 20_000] {
        if let Some(&rate) = at.get(&size) {
            out.target(
                &format!("synthetic-{shape_name}"),
                &format!(
                    "{} pods/s at {} pods",
                    thousands(TARGET_PODS_PER_SEC),
                    thousands(size as f64)
                ),
                rate,
                rate >= TARGET_PODS_PER_SEC,
                format!("{} pods/s", thousands(rate)),
            );
        }
    }
}

pub fn real(out: &mut Report, sizes: &[usize]) {
    out.header(
        "real: embedded AWS catalog (1,363 types), NodePool c/m/r gen > 4 amd64 linux on-demand, 3 zones",
        "none set; for reference the synthetic target is ≥ 20,000 pods/s",
    );
    out.line("pods: web 40% (zone spread), worker 25%, cache 15% (hostname anti-affinity per 3 replicas), batch 20%; DaemonSets aws-node, kube-proxy");
    out.line("bound: cheapest fractional fleet for the pods' requests alone (DaemonSets and topology ignored), for scale only");
    out.line(&format!(
        "{:>8} {:>8} {:>8} {:>10} {:>12} {:>10} {:>10} {:>7} {:>5}",
        "pods", "claims", "unsched", "best ms", "pods/s", "$/h", "bound $/h", "ratio", "runs"
    ));
    let catalog = Catalog::embedded();
    let pricing = Pricing::default();
    let pools = [real_pool()];
    for &size in sizes {
        let snapshot = real_snapshot(size);
        let input = ProvisioningInput {
            snapshot: &snapshot,
            node_pools: &pools,
            node_classes: &[],
            catalog,
            pricing: &pricing,
            in_flight: &[],
        };
        let runs = runs_for(size);
        let (plan, best) = time_plan(&input, runs);
        let secs = best.as_secs_f64();
        let rate = size as f64 / secs.max(1e-9);
        let bound = cost_lower_bound(&snapshot.pods, &pools[0], catalog);
        out.line(&format!(
            "{:>8} {:>8} {:>8} {:>10.2} {:>12} {:>10.2} {:>10} {:>7} {:>5}",
            thousands(size as f64),
            plan.node_claims.len(),
            plan.unschedulable.len(),
            secs * 1e3,
            thousands(rate),
            plan.total_price_per_hour,
            bound.map_or("none".into(), |b| format!("{b:.2}")),
            bound.map_or("-".into(), |b| format!(
                "{:.3}",
                plan.total_price_per_hour / b
            )),
            runs
        ));
        out.record(json!({
            "suite": "real", "pods": size, "claims": plan.node_claims.len(), "unschedulable": plan.unschedulable.len(),
            "best_ms": secs * 1e3, "pods_per_sec": rate, "price_per_hour": plan.total_price_per_hour, "runs": runs,
            "bound_per_hour": bound,
        }));
        out.unschedulable_summary(&plan);
        out.check_plan(
            &format!("real {size} pods"),
            &plan,
            &snapshot,
            &pools,
            catalog,
        );
    }
}
