//! `nodewright-bench cost`: how close the planner's fleets come to the cheapest
//! possible one. Plan cost divided by the cheapest *fractional* fleet (an LP lower
//! bound) on workloads of plain resource requests; small uniform workloads against the
//! exact cheapest whole-node plan.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use nodewright_core::api::model::{NodePool, Operator};
use nodewright_core::catalog::Catalog;
use nodewright_core::cluster::{ClusterSnapshot, Pod};
use nodewright_core::pricing::Pricing;
use nodewright_core::provisioning::{ProvisioningInput, ProvisioningPlan, plan_provisioning};
use nodewright_core::resources::Resources;
use nodewright_core::scheduling::Requirements;
use nodewright_core::scheduling::lp::cheapest_fractional_fleet;
use nodewright_core::testing::req;
use nodewright_core::well_known::{LABEL_ARCH, LABEL_CAPACITY_TYPE, LABEL_NODEPOOL, LABEL_ZONE};
use nodewright_sim::rng::Rng;
use serde_json::json;

use crate::report::Report;
use crate::workload::{GIB, labels, pending_pod, real_pool};

/// Worst plan cost ÷ fractional lower bound on the cost suite.
pub const TARGET_COST_RATIO: f64 = 1.05;
pub const STRETCH_COST_RATIO: f64 = 1.02;

/// One cost workload: plain resource requests, no topology, no selectors.
pub struct CostWorkload {
    pub name: String,
    pub pods: Vec<Pod>,
    /// The NodePool it plans against (`real_pool`, or its arm64 twin).
    pub pool: NodePool,
}

/// Workloads of at most this many pods are held to the cheapest whole-node plan.
pub const SMALL_WORKLOAD_PODS: usize = 50;
/// Small workloads: plan ÷ cheapest whole-node plan.
pub const TARGET_SMALL_RATIO: f64 = 1.02;

/// `real_pool` with arm64 (Graviton) types instead of amd64.
pub fn real_arm_pool() -> NodePool {
    let mut pool = real_pool();
    pool.name = "arm".into();
    pool.requirements[0] = req(LABEL_ARCH, Operator::In, &["arm64"]);
    pool
}

fn plain_pods(name: &str, n: usize, seed: u64) -> Vec<Pod> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|i| {
            let cpu = rng.one_of([100, 250, 500, 1000, 2000, 4000]);
            let mem = rng.one_of([128, 256, 512, 1024, 2048, 4096, 8192, 16384]);
            pending_pod(format!("{name}-{i}"), cpu, mem, labels("app", name))
        })
        .collect()
}

/// The cost workloads: uniform (10, 100, 500 pods), mixed random (500, three seeds of
/// 1,000, 3,000), memory-heavy, cpu-heavy, and mixed on arm64.
pub fn cost_workloads() -> Vec<CostWorkload> {
    let uniform = |name: &str, n: usize, cpu: i64, mem: i64| CostWorkload {
        name: name.into(),
        pods: (0..n)
            .map(|i| pending_pod(format!("{name}-{i}"), cpu, mem, labels("app", name)))
            .collect(),
        pool: real_pool(),
    };
    let mixed = |name: String, n: usize, seed: u64, pool: NodePool| CostWorkload {
        pods: plain_pods("mixed", n, seed),
        name,
        pool,
    };
    let mut out = vec![
        uniform("uniform 1/2Gi ×10", 10, 1000, 2048),
        uniform("uniform 1/1Gi ×100", 100, 1000, 1024),
        uniform("small 250m/512Mi ×500", 500, 250, 512),
        mixed("mixed seed 4 ×500".into(), 500, 4, real_pool()),
    ];
    for seed in [1, 2, 3] {
        out.push(mixed(
            format!("mixed seed {seed} ×1000"),
            1000,
            seed,
            real_pool(),
        ));
    }
    out.push(mixed("mixed seed 5 ×3000".into(), 3000, 5, real_pool()));
    out.push(uniform("memory-heavy 500m/8Gi ×300", 300, 500, 8192));
    out.push(uniform("cpu-heavy 4/2Gi ×300", 300, 4000, 2048));
    out.push(mixed(
        "arm64 mixed seed 6 ×1000".into(),
        1000,
        6,
        real_arm_pool(),
    ));
    out
}

/// The instance types a NodePool allows (on-demand, any zone) that have a price.
fn allowed_types<'c>(
    pool: &NodePool,
    catalog: &'c Catalog,
) -> Vec<&'c nodewright_core::catalog::InstanceType> {
    let reqs = Requirements::from_node_requirements(&pool.requirements);
    catalog
        .types
        .iter()
        .filter(|t| t.on_demand_price.is_some())
        .filter(|t| {
            let mut l = t.labels.clone();
            l.insert(LABEL_CAPACITY_TYPE.into(), "on-demand".into());
            l.insert(LABEL_NODEPOOL.into(), pool.name.clone());
            l.extend(pool.labels.clone());
            Pricing::default().zones.iter().any(|z| {
                l.insert(LABEL_ZONE.into(), z.clone());
                reqs.matches_labels(&l)
            })
        })
        .collect()
}

/// Cheapest fractional on-demand fleet covering the pods' total cpu (cores), memory
/// (GiB) and pod slots, over the types the pool allows. DaemonSet overhead is not in
/// the demand (the cost workloads have no DaemonSets).
pub fn cost_lower_bound(pods: &[Pod], pool: &NodePool, catalog: &Catalog) -> Option<f64> {
    let dims = |r: &Resources| {
        [
            r.get_milli("cpu") as f64 / 1000.0,
            r.get_milli("memory") as f64 / 1000.0 / GIB,
            r.get_milli("pods") as f64 / 1000.0,
        ]
    };
    let mut demand = [0.0; 3];
    for p in pods {
        for (d, v) in demand.iter_mut().zip(dims(&p.requests)) {
            *d += v;
        }
    }
    let types = allowed_types(pool, catalog);
    let capacities: Vec<Vec<f64>> = types
        .iter()
        .map(|t| dims(&t.allocatable).to_vec())
        .collect();
    let prices: Vec<f64> = types
        .iter()
        .map(|t| t.on_demand_price.unwrap_or(f64::INFINITY))
        .collect();
    cheapest_fractional_fleet(&demand, &capacities, &prices).map(|s| s.cost)
}

/// When every pod requests the same, the cheapest plan of whole nodes (any mix of
/// types), exactly: with `k_t` pods per node of type `t`, cost(n) = min over t of
/// price_t + cost(n − k_t). An achievable cost, so plan > this shows room the packer left.
pub fn best_whole_node_plan(
    pods: &[Pod],
    pool: &NodePool,
    catalog: &Catalog,
) -> Option<(f64, String)> {
    let first = &pods.first()?.requests;
    if pods.iter().any(|p| &p.requests != first) {
        return None;
    }
    let types: Vec<(usize, f64, &str)> = allowed_types(pool, catalog)
        .into_iter()
        .filter_map(|t| {
            let per_node = ["cpu", "memory", "pods"]
                .iter()
                .filter(|r| first.get_milli(r) > 0)
                .map(|r| t.allocatable.get_milli(r) / first.get_milli(r))
                .min()?;
            (per_node > 0).then_some((per_node as usize, t.on_demand_price?, t.name.as_str()))
        })
        .collect();
    let n = pods.len();
    // best[i]: (cost, type used last) to hold i pods.
    let mut best: Vec<(f64, usize)> = vec![(0.0, usize::MAX); n + 1];
    for i in 1..=n {
        best[i] = (f64::INFINITY, usize::MAX);
        for (ti, (k, price, _)) in types.iter().enumerate() {
            let c = price + best[i.saturating_sub(*k)].0;
            if c < best[i].0 {
                best[i] = (c, ti);
            }
        }
    }
    if !best[n].0.is_finite() {
        return None;
    }
    let mut used: BTreeMap<&str, usize> = BTreeMap::new();
    let mut i = n;
    while i > 0 {
        let (k, _, name) = types[best[i].1];
        *used.entry(name).or_default() += 1;
        i = i.saturating_sub(k);
    }
    let fleet: Vec<String> = used.iter().map(|(t, k)| format!("{k}×{t}")).collect();
    Some((best[n].0, fleet.join("+")))
}

/// Plans a cost workload on the real catalog; returns the snapshot, plan and lower bound.
pub fn cost_of(workload: &CostWorkload) -> (ClusterSnapshot, ProvisioningPlan, Option<f64>) {
    let catalog = Catalog::embedded();
    let pools = [workload.pool.clone()];
    let snapshot = ClusterSnapshot {
        pods: workload.pods.clone(),
        ..Default::default()
    };
    let plan = plan_provisioning(&ProvisioningInput {
        snapshot: &snapshot,
        node_pools: &pools,
        node_classes: &[],
        catalog,
        pricing: &Pricing::default(),
        in_flight: &[],
    });
    let bound = cost_lower_bound(&workload.pods, &pools[0], catalog);
    (snapshot, plan, bound)
}

pub fn suite(out: &mut Report) {
    out.header(
        "cost: plan $/h ÷ cheapest fractional fleet (LP lower bound), real catalog, c/m/r gen > 4 on-demand",
        &format!(
            "≥ 100 pods: ratio ≤ {TARGET_COST_RATIO} (stretch ≤ {STRETCH_COST_RATIO}); ≤ {SMALL_WORKLOAD_PODS} pods: plan ≤ {TARGET_SMALL_RATIO} × the cheapest whole-node plan"
        ),
    );
    out.line("bound: Σ cpu cores, memory GiB, pod slots of the pods over allocatable of allowed types; no DaemonSets (their per-node overhead is not in the bound)");
    out.line("whole-node: the cheapest plan of whole nodes, exact (uniform workloads only); when it is itself above the target × bound, no plan can meet the bound target");
    out.line(&format!(
        "{:<28} {:>6} {:>7} {:>10} {:>10} {:>7}  {:<34} {:<8} {}",
        "workload",
        "pods",
        "claims",
        "plan $/h",
        "bound $/h",
        "ratio",
        "whole-node $/h (÷bound) fleet",
        "target",
        "types used"
    ));
    let catalog = Catalog::embedded();
    let mut ratios = Vec::new();
    let mut met_all = true;
    for w in cost_workloads() {
        let pools = [w.pool.clone()];
        let (snapshot, plan, bound) = cost_of(&w);
        let ratio = bound.map(|b| plan.total_price_per_hour / b);
        let whole = best_whole_node_plan(&w.pods, &pools[0], catalog);
        let whole_shown = match (&whole, bound) {
            (Some((cost, fleet)), Some(b)) => format!("{cost:.3} ({:.3}) {fleet}", cost / b),
            _ => "-".into(),
        };
        let small = w.pods.len() <= SMALL_WORKLOAD_PODS;
        // Small: against the whole-node optimum; large: against the bound.
        let (met, target_shown) = match (small, &whole, ratio) {
            (true, Some((best, _)), _) => {
                let r = plan.total_price_per_hour / best;
                (r <= TARGET_SMALL_RATIO + 1e-9, format!("{r:.3}×wn"))
            }
            (false, _, Some(r)) => (r <= TARGET_COST_RATIO + 1e-9, format!("{r:.3}×lb")),
            _ => (false, "-".into()),
        };
        let unattainable = !small
            && matches!((&whole, bound), (Some((c, _)), Some(b)) if *c > TARGET_COST_RATIO * b);
        let verdict = if met {
            "met"
        } else if unattainable {
            "n/a"
        } else {
            met_all = false;
            "NOT MET"
        };
        let mut types: BTreeMap<&str, usize> = BTreeMap::new();
        for c in &plan.node_claims {
            *types.entry(c.instance_type.as_str()).or_default() += 1;
        }
        let mut types: Vec<_> = types.into_iter().collect();
        types.sort_by_key(|t| std::cmp::Reverse(t.1));
        let mut used = String::new();
        for (t, n) in types.iter().take(4) {
            let _ = write!(used, "{n}×{t} ");
        }
        out.line(&format!(
            "{:<28} {:>6} {:>7} {:>10.3} {:>10} {:>7}  {:<34} {:<8} {}",
            w.name,
            w.pods.len(),
            plan.node_claims.len(),
            plan.total_price_per_hour,
            bound.map_or("none".into(), |b| format!("{b:.3}")),
            ratio.map_or("-".into(), |r| format!("{r:.4}")),
            whole_shown,
            format!("{verdict} {target_shown}"),
            used.trim_end()
        ));
        out.record(json!({
            "suite": "cost", "workload": w.name, "pods": w.pods.len(), "claims": plan.node_claims.len(),
            "unschedulable": plan.unschedulable.len(), "plan_per_hour": plan.total_price_per_hour,
            "bound_per_hour": bound, "ratio": ratio, "whole_node_per_hour": whole.as_ref().map(|o| o.0),
            "target_met": met, "target_unattainable": unattainable,
        }));
        out.unschedulable_summary(&plan);
        out.check_plan(
            &format!("cost {}", w.name),
            &plan,
            &snapshot,
            &pools,
            catalog,
        );
        match ratio {
            Some(r) if r < 1.0 - 1e-9 => {
                let m = format!(
                    "cost {}: ratio {r:.4} < 1: the plan beats its lower bound (bug in plan or bound)",
                    w.name
                );
                out.line(&format!("  !! {m}"));
                out.failures.push(m);
            }
            Some(r) => {
                if !small {
                    ratios.push(r)
                }
            }
            None => out.failures.push(format!(
                "cost {}: no lower bound (LP found no covering fleet)",
                w.name
            )),
        }
        if let Some((best, _)) = &whole
            && plan.total_price_per_hour < best - 1e-9
        {
            let m = format!(
                "cost {}: plan {:.4} beats the exact whole-node optimum {best:.4} (bug)",
                w.name, plan.total_price_per_hour
            );
            out.line(&format!("  !! {m}"));
            out.failures.push(m);
        }
    }
    if ratios.is_empty() {
        return;
    }
    let worst = ratios.iter().cloned().fold(f64::MIN, f64::max);
    let mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
    out.line(&format!(
        "  ≥ 100 pods: worst ratio {worst:.4}, mean {mean:.4}"
    ));
    out.target(
        "cost",
        "every workload meets its target (n/a: the whole-node optimum itself is above it)",
        worst,
        met_all,
        format!("worst ratio {worst:.4}"),
    );
    out.target(
        "cost",
        &format!("stretch: worst ratio ≤ {STRETCH_COST_RATIO}"),
        worst,
        worst <= STRETCH_COST_RATIO,
        format!("{worst:.4}"),
    );
}

#[cfg(test)]
mod tests {
    use nodewright_core::testing::violations;

    use super::*;

    #[test]
    fn a_tiny_cost_workload_costs_at_least_its_lower_bound() {
        let w = CostWorkload {
            pool: real_pool(),
            name: "tiny".into(),
            pods: (0..20)
                .map(|i| pending_pod(format!("tiny-{i}"), 500, 1024, labels("app", "tiny")))
                .collect(),
        };
        let (snapshot, plan, bound) = cost_of(&w);
        let broken = violations(&plan, &snapshot, &[real_pool()], Catalog::embedded());
        assert!(broken.is_empty(), "{broken:#?}");
        assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
        let bound = bound.expect("the c/m/r pool covers cpu, memory and pods");
        assert!(bound > 0.0);
        let ratio = plan.total_price_per_hour / bound;
        assert!(
            ratio >= 1.0 - 1e-9,
            "plan {} beats its lower bound {bound}",
            plan.total_price_per_hour
        );
    }
}
