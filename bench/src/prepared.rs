//! `nodewright-bench prepared`: the scheduler prepared once per tick and solved many
//! times, as consolidation uses it, timed in this process (inner-loop timings, not a
//! whole command). A cluster of 1,000 nodes (`--nodes`; embedded catalog, 3 zones)
//! runs 30,000 workload pods — the real workload's deployments (web with zone spread, cache
//! with hostname anti-affinity, workers, batch), 30 per node, replicas on consecutive
//! nodes so every constraint holds — plus the two DaemonSets' pods on every node. Each
//! node gets the cheapest of a few general-purpose and memory types that holds its pods
//! with 15% to spare (the bound cluster of `sim::workload`). Figures: the time to prepare, and speculative solves removing one
//! node (each node once) and ten consecutive nodes (100 sets), median and p90.

use std::time::{Duration, Instant};

use nodewright_core::catalog::Catalog;
use nodewright_core::pricing::Pricing;
use nodewright_core::scheduling::{
    PreparedScheduler, Removal, SchedulerInput, Solve, SolveLimits, Stop,
};
use serde_json::json;

use crate::report::{Report, thousands};
use crate::workload::{real_cluster, real_daemonsets, real_pool};

/// Preparing the scheduler for 1,000 nodes / 30,000 pods, in ms.
pub const TARGET_PREPARE_MS: f64 = 300.0;
/// Median single-node removal solve, in ms.
pub const TARGET_SOLVE_MS: f64 = 1.0;

pub const DEFAULT_NODES: usize = 1_000;
const PODS_PER_NODE: usize = 30;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// (median, p90) of durations, in ms.
fn median_p90(mut times: Vec<Duration>) -> (f64, f64) {
    times.sort();
    let at = |q: f64| ms(times[((times.len() - 1) as f64 * q).round() as usize]);
    (at(0.5), at(0.9))
}

/// Outcomes of a batch of solves: placed (new claims in total), and stops by kind.
#[derive(Default)]
struct Outcomes {
    placed: usize,
    new_claims: usize,
    moved: usize,
    no_fit: usize,
    too_many: usize,
    too_expensive: usize,
}

impl Outcomes {
    fn add(&mut self, solve: &Solve) {
        match solve {
            Solve::Placed(p) => {
                self.placed += 1;
                self.new_claims += p.new_claims.len();
                self.moved += p.existing_nodes.iter().map(|a| a.pods.len()).sum::<usize>()
                    + p.in_flight.iter().map(|a| a.pods.len()).sum::<usize>()
                    + p.new_claims.iter().map(|c| c.pods.len()).sum::<usize>();
            }
            Solve::Stopped(Stop::PodDoesNotFit { .. }) => self.no_fit += 1,
            Solve::Stopped(Stop::TooManyClaims) => self.too_many += 1,
            Solve::Stopped(Stop::TooExpensive) => self.too_expensive += 1,
        }
    }

    fn describe(&self) -> String {
        format!(
            "{} placed ({} pods moved, {} new claims), stopped: {} pod fits nowhere, {} too many claims, {} too expensive",
            self.placed,
            self.moved,
            self.new_claims,
            self.no_fit,
            self.too_many,
            self.too_expensive
        )
    }
}

pub fn suite(out: &mut Report, nodes: usize) {
    let catalog = Catalog::embedded();
    let pricing = Pricing::default();
    let pools = [real_pool()];
    out.header(
        "prepared: one prepare per tick, many speculative solves (consolidation)",
        &format!(
            "1,000 nodes / 30,000 bound pods: prepare ≤ {TARGET_PREPARE_MS:.0} ms, single-node removal solve ≤ {TARGET_SOLVE_MS} ms median"
        ),
    );
    let cluster = match real_cluster(nodes, PODS_PER_NODE) {
        Ok(cluster) => cluster,
        Err(e) => {
            out.fail(format!("prepared: {e}"));
            return;
        }
    };
    let daemonsets = real_daemonsets();
    let input = SchedulerInput {
        pods: &cluster.pods,
        nodes: &cluster.nodes,
        daemonsets: &daemonsets,
        node_pools: &pools,
        node_classes: &[],
        catalog,
        pricing: &pricing,
        in_flight: &[],
    };
    out.line(&format!(
        "cluster: {} nodes, {} pods ({} workload, the rest DaemonSet pods), NodePool c/m/r gen > 4, limits none",
        thousands(cluster.nodes.len() as f64),
        thousands(cluster.pods.len() as f64),
        thousands((nodes * PODS_PER_NODE) as f64),
    ));

    // Prepare: best of three is noise-free enough; the median is what is reported.
    let mut prepare_times = Vec::new();
    let mut prepared = None;
    for _ in 0..3 {
        let started = Instant::now();
        let p = PreparedScheduler::new(&input);
        prepare_times.push(started.elapsed());
        prepared = Some(p);
    }
    let prepared = prepared.expect("prepared three times");
    let (prepare_ms, _) = median_p90(prepare_times);

    let limits = SolveLimits::default();
    // Single-node removals: every node once (first use of each pod shape included), then
    // every node again (shapes compiled).
    let mut passes = Vec::new();
    for _ in 0..2 {
        let mut times = Vec::with_capacity(nodes);
        let mut outcomes = Outcomes::default();
        for n in 0..nodes {
            let nodes = [n];
            let removal = Removal {
                nodes: &nodes,
                not_destinations: &[],
            };
            let started = Instant::now();
            let solve = prepared.solve(&removal, &limits);
            times.push(started.elapsed());
            outcomes.add(&solve);
        }
        passes.push((median_p90(times), outcomes));
    }
    // Ten consecutive nodes at a time.
    let mut times = Vec::new();
    let mut ten = Outcomes::default();
    let sets = (nodes / 10).clamp(1, 100);
    for set in 0..sets {
        let nodes: Vec<usize> = (set * 10..(set * 10 + 10).min(nodes)).collect();
        let removal = Removal {
            nodes: &nodes,
            not_destinations: &[],
        };
        let started = Instant::now();
        let solve = prepared.solve(&removal, &limits);
        times.push(started.elapsed());
        ten.add(&solve);
    }
    let (ten_median, ten_p90) = median_p90(times);

    let ((first_median, first_p90), first) = &passes[0];
    let ((warm_median, warm_p90), warm) = &passes[1];
    out.line(&format!("  prepare: {prepare_ms:.1} ms (median of 3)"));
    out.line(&format!(
        "  1-node removal, each node once:  median {first_median:.3} ms, p90 {first_p90:.3} ms — {}",
        first.describe()
    ));
    out.line(&format!(
        "  1-node removal, again (warm):    median {warm_median:.3} ms, p90 {warm_p90:.3} ms — {}",
        warm.describe()
    ));
    out.line(&format!(
        "  10-node removal ({sets} sets):      median {ten_median:.3} ms, p90 {ten_p90:.3} ms — {}",
        ten.describe()
    ));
    out.record(json!({
        "suite": "prepared", "nodes": nodes, "pods": cluster.pods.len(),
        "prepare_ms": prepare_ms,
        "solve_1_median_ms": first_median, "solve_1_p90_ms": first_p90,
        "solve_1_warm_median_ms": warm_median, "solve_1_warm_p90_ms": warm_p90,
        "solve_10_median_ms": ten_median, "solve_10_p90_ms": ten_p90,
    }));
    out.target(
        "prepared",
        "prepare at 1,000 nodes / 30,000 pods",
        prepare_ms,
        prepare_ms <= TARGET_PREPARE_MS,
        format!("{prepare_ms:.1} ms (target ≤ {TARGET_PREPARE_MS:.0} ms)"),
    );
    out.target(
        "prepared",
        "single-node removal solve, median (first solve of each node)",
        *first_median,
        *first_median <= TARGET_SOLVE_MS,
        format!("{first_median:.3} ms (target ≤ {TARGET_SOLVE_MS} ms)"),
    );
}
