//! `nodewright bench`: how fast the planner is, how much memory it takes, and how close
//! its fleets come to the cheapest possible one.
//!
//! Suites (`--suite`, default `all`):
//!
//! - `synthetic`: the shape of Karpenter's own scheduling benchmark
//!   (kubernetes-sigs/karpenter `pkg/controllers/provisioning/scheduling/scheduling_benchmark_test.go`):
//!   400 fake instance types (type i has i+1 vCPU, 2(i+1) GiB, 10(i+1) pods, priced
//!   0.1/vCPU + 0.1/GB as Karpenter's fake provider does) offered in 3 zones, spot and
//!   on-demand, one NodePool, and pods in equal groups with topology spread and pod
//!   (anti-)affinity. Only `plan_provisioning` is timed; every plan is checked with
//!   `testing::violations` outside the timing.
//! - `real`: the embedded AWS catalog behind a c/m/r, generation > 4 NodePool, with a
//!   mixed web / worker / cache / batch workload and two DaemonSets.
//! - `memory`: peak RSS of a fresh process that plans the 10,000-pod real workload once
//!   (this executable re-invoked as `bench --suite memory-child`).
//! - `cost`: plan cost divided by the cheapest *fractional* fleet (an LP lower bound) on
//!   workloads of plain resource requests.
//! - `command`: what a user sees: snapshot files written as kubectl prints them, and this
//!   executable's `plan` run on each as a child process; wall time, the child's peak RSS
//!   and the size of its JSON output (see `bench/command.rs`).
//! - `prepared`: the scheduler prepared once and solved many times, as consolidation
//!   uses it, on 1,000 nodes / 30,000 bound pods (see `bench/prepared.rs`).
//!
//! The table goes to stdout; with `--json` it goes to stderr and stdout carries one JSON
//! object per figure, so `nodewright bench --json > bench.jsonl` keeps both readable.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use nodewright_core::api::model::{NodePool, Operator};
use nodewright_core::catalog::{
    Catalog, LABEL_ARCH, LABEL_CAPACITY_TYPE, LABEL_HOSTNAME, LABEL_INSTANCE_CPU,
    LABEL_INSTANCE_MEMORY, LABEL_INSTANCE_TYPE, LABEL_NODEPOOL, LABEL_OS, LABEL_ZONE, Pricing,
};
use nodewright_core::cluster::{
    ClusterSnapshot, DaemonSet, LabelSelector, Pod, PodAffinityTerm, Toleration,
    TolerationOperator, TopologySpreadConstraint, WhenUnsatisfiable,
};
use nodewright_core::provisioning::{ProvisioningInput, ProvisioningPlan, plan_provisioning};
use nodewright_core::resources::Resources;
use nodewright_core::scheduling::Requirements;
use nodewright_core::scheduling::lp::cheapest_fractional_fleet;
use nodewright_core::testing::{node_pool, req, violations};
use serde_json::{Value, json};

mod command;
mod disrupt;
mod prepared;

/// Pods per second the planner must sustain on the synthetic suite at 5,000 and 20,000 pods.
pub const TARGET_PODS_PER_SEC: f64 = 20_000.0;
/// Peak RSS of a process planning 10,000 real-workload pods, in MB (10^6 bytes).
pub const TARGET_PEAK_RSS_MB: f64 = 128.0;
/// Worst plan cost ÷ fractional lower bound on the cost suite.
pub const TARGET_COST_RATIO: f64 = 1.05;
pub const STRETCH_COST_RATIO: f64 = 1.02;

const DEFAULT_SYNTHETIC_SIZES: [usize; 6] = [1, 100, 1_000, 5_000, 10_000, 20_000];
const REAL_SIZES: [usize; 3] = [500, 3_000, 10_000];
const MEMORY_PODS: usize = 10_000;
const SEED: u64 = 42;
const SYNTHETIC_TYPES: usize = 400;
const SYNTHETIC_ZONES: [&str; 3] = ["test-zone-1", "test-zone-2", "test-zone-3"];
const GIB: f64 = (1u64 << 30) as f64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Suite {
    Synthetic,
    Real,
    Cost,
    Memory,
    /// Whole-command figures: `nodewright plan` run as a user runs it, on snapshot files.
    Command,
    /// Whole-command figures of `nodewright disrupt` on fragmented clusters.
    Disrupt,
    /// The scheduler prepared once and solved many times (consolidation's speculative
    /// solves) on 1,000 nodes / 30,000 bound pods.
    Prepared,
    All,
    /// Internal: plan the real workload once and print VmRSS/VmHWM (used by `memory`).
    #[value(hide = true)]
    MemoryChild,
    /// Internal: run the command after `--` and print its wall time and peak RSS (used
    /// by `command`, so the measured child is spawned by a small process).
    #[value(hide = true)]
    RunChild,
}

/// Pod mix of the synthetic suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Shape {
    /// Karpenter's benchmark as written: six equal groups (generic, zone spread, hostname
    /// spread, hostname pod affinity, zone pod affinity, hostname anti-affinity), labels
    /// and selectors drawn at random from a..g, memory from {100,256,512,1024,2048,4096}Mi.
    Karpenter,
    /// Five equal groups (generic, zone spread, hostname spread, zonal self-affinity,
    /// hostname self anti-affinity); selectors select the pod's own label, memory is
    /// uniform in 100..4096Mi.
    Five,
    /// Both shapes, one after the other.
    Both,
}

#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Which benchmarks to run.
    #[arg(long, value_enum, default_value = "all")]
    pub suite: Suite,
    /// Pod counts for the synthetic suite (comma separated).
    #[arg(long, value_delimiter = ',', default_values_t = DEFAULT_SYNTHETIC_SIZES)]
    pub sizes: Vec<usize>,
    /// Pod mix of the synthetic suite.
    #[arg(long, value_enum, default_value = "both")]
    pub shape: Shape,
    /// Also print one JSON object per figure on stdout (the table then goes to stderr).
    #[arg(long)]
    pub json: bool,
    /// Runs of each whole-command case (`--suite command`): best wall, highest peak RSS.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// `--suite command` and `--suite disrupt`: write the snapshot, NodePool, catalog and
    /// decision files here and keep them (default: a temporary directory, removed
    /// afterwards).
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
    /// Cluster sizes in nodes for `--suite disrupt` (comma separated; default
    /// 100,1000,5000; 10000 writes a 1.9 GB snapshot).
    #[arg(long, value_delimiter = ',')]
    pub nodes: Option<Vec<usize>>,
    /// Internal: the command `run-child` runs.
    #[arg(last = true, hide = true)]
    pub command: Vec<String>,
    /// Pod count for the memory child process.
    #[arg(long, hide = true, default_value_t = MEMORY_PODS)]
    pub pods: usize,
}

pub fn run(args: &BenchArgs) -> Result<(), String> {
    if args.suite == Suite::MemoryChild {
        return memory_child(args.pods);
    }
    if args.suite == Suite::RunChild {
        return command::run_child(&args.command);
    }
    let mut out = Report {
        json: args.json,
        failures: Vec::new(),
    };
    let all = args.suite == Suite::All;
    let started = Instant::now();
    if all || args.suite == Suite::Synthetic {
        let shapes: &[Shape] = match args.shape {
            Shape::Both => &[Shape::Karpenter, Shape::Five],
            Shape::Karpenter => &[Shape::Karpenter],
            Shape::Five => &[Shape::Five],
        };
        for &shape in shapes {
            synthetic_suite(&mut out, shape, &args.sizes);
        }
    }
    if all || args.suite == Suite::Real {
        real_suite(&mut out);
    }
    if all || args.suite == Suite::Memory {
        memory_suite(&mut out, args.pods);
    }
    if all || args.suite == Suite::Cost {
        cost_suite(&mut out);
    }
    if all || args.suite == Suite::Command {
        command::command_suite(&mut out, args.runs, args.dir.as_deref());
    }
    // Not in `all`: at 5,000 nodes it writes and decides a 150,000-pod cluster.
    if args.suite == Suite::Disrupt {
        disrupt::disrupt_suite(&mut out, args.nodes.as_deref(), args.dir.as_deref());
    }
    if all || args.suite == Suite::Prepared {
        prepared::prepared_suite(&mut out);
    }
    out.line(&format!(
        "\nbench finished in {:.1} s",
        started.elapsed().as_secs_f64()
    ));
    if out.failures.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "benchmark found {} problem(s):\n  {}",
            out.failures.len(),
            out.failures.join("\n  ")
        ))
    }
}

// ----- output ----------------------------------------------------------------------

struct Report {
    json: bool,
    /// Broken plans and failed measurements: the run exits non-zero when any.
    failures: Vec<String>,
}

impl Report {
    fn line(&self, text: &str) {
        if self.json {
            eprintln!("{text}");
        } else {
            println!("{text}");
        }
    }

    fn record(&self, value: Value) {
        if self.json {
            println!("{value}");
        }
    }

    fn header(&self, title: &str, target: &str) {
        self.line(&format!("\n== {title} =="));
        self.line(&format!("target: {target}"));
    }

    fn target(&self, suite: &str, what: &str, value: f64, met: bool, shown: String) {
        self.line(&format!(
            "  {what}: {shown} — {}",
            if met { "MET" } else { "NOT MET" }
        ));
        self.record(json!({"suite": suite, "target": what, "value": value, "met": met}));
    }

    fn check_plan(
        &mut self,
        what: &str,
        plan: &ProvisioningPlan,
        snapshot: &ClusterSnapshot,
        pools: &[NodePool],
        catalog: &Catalog,
    ) {
        let broken = violations(plan, snapshot, pools, catalog);
        if !broken.is_empty() {
            let shown: Vec<&str> = broken.iter().take(5).map(String::as_str).collect();
            let message = format!(
                "{what}: plan breaks {} constraint(s), e.g. {shown:?}",
                broken.len()
            );
            self.line(&format!("  !! {message}"));
            self.failures.push(message);
        }
    }

    fn unschedulable_summary(&self, plan: &ProvisioningPlan) {
        if plan.unschedulable.is_empty() {
            return;
        }
        let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
        for u in &plan.unschedulable {
            *reasons.entry(u.reason.as_str()).or_default() += 1;
        }
        let mut reasons: Vec<_> = reasons.into_iter().collect();
        reasons.sort_by_key(|r| std::cmp::Reverse(r.1));
        for (reason, n) in reasons.iter().take(3) {
            self.line(&format!("      {n} unschedulable: {reason}"));
        }
    }
}

fn thousands(n: f64) -> String {
    let s = format!("{:.0}", n);
    let (sign, digits) = s.split_at(if s.starts_with('-') { 1 } else { 0 });
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    format!("{sign}{out}")
}

// ----- deterministic randomness ----------------------------------------------------

/// xorshift64*: tiny, fast and the same on every machine, so workloads are reproducible.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        // Zero is the one state xorshift cannot leave.
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (n > 0; the modulo bias is negligible for small n).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next_u64() % (hi - lo + 1) as u64) as i64
    }

    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

// ----- building blocks -------------------------------------------------------------

const MIB_MILLI: i64 = (1 << 20) * 1000;

/// A pending pod in `default` requesting `cpu_milli` millicores and `mem_mib` MiB, which
/// kube-scheduler has marked Unschedulable.
fn pending_pod(
    name: String,
    cpu_milli: i64,
    mem_mib: i64,
    labels: BTreeMap<String, String>,
) -> Pod {
    let mut requests = Resources::one_pod();
    requests.set_milli("cpu", cpu_milli);
    requests.set_milli("memory", mem_mib * MIB_MILLI);
    Pod {
        namespace: "default".into(),
        name,
        labels,
        requests,
        marked_unschedulable: true,
        ..Pod::default()
    }
}

fn labels(key: &str, value: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(key.to_string(), value.to_string())])
}

fn selects(key: &str, value: &str) -> LabelSelector {
    LabelSelector {
        match_labels: labels(key, value),
        match_expressions: vec![],
    }
}

fn spread_on(topology_key: &str, selector: LabelSelector) -> TopologySpreadConstraint {
    TopologySpreadConstraint {
        max_skew: 1,
        topology_key: topology_key.into(),
        when_unsatisfiable: WhenUnsatisfiable::DoNotSchedule,
        label_selector: Some(selector),
        min_domains: None,
        honor_node_affinity: true,
        honor_node_taints: false,
    }
}

fn term_on(topology_key: &str, selector: LabelSelector) -> PodAffinityTerm {
    PodAffinityTerm {
        label_selector: Some(selector),
        topology_key: topology_key.into(),
        namespaces: vec!["default".into()],
    }
}

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

// ----- synthetic: Karpenter's benchmark shape --------------------------------------

/// Karpenter's `fake.InstanceTypes(400)`: type i has i+1 vCPU, 2(i+1) GiB and 10(i+1)
/// pods; its price is Karpenter's `PriceFromResources`: 0.1 per vCPU + 0.1 per 10^9 bytes.
pub fn synthetic_catalog(types: usize) -> Catalog {
    let text = synthetic_catalog_json(types).to_string();
    Catalog::from_json(&text).expect("the synthetic catalog is well formed")
}

/// [`synthetic_catalog`] in the `--catalog` file format.
pub fn synthetic_catalog_json(types: usize) -> Value {
    let instance_types: Vec<Value> = (0..types)
        .map(|i| {
            let n = (i + 1) as u64;
            let price = 0.1 * n as f64 + 0.1 * (2 * n) as f64 * GIB / 1e9;
            json!({
                "name": format!("fake-it-{i}"),
                "labels": {
                    LABEL_INSTANCE_TYPE: format!("fake-it-{i}"),
                    LABEL_ARCH: "amd64",
                    LABEL_OS: "linux",
                    LABEL_INSTANCE_CPU: n.to_string(),
                    LABEL_INSTANCE_MEMORY: (2 * n * 1024).to_string(),
                },
                "allocatable": {"cpu": n.to_string(), "memory": format!("{}Gi", 2 * n), "pods": (10 * n).to_string()},
                "onDemandPricePerHour": price,
            })
        })
        .collect();
    json!({ "instanceTypes": instance_types })
}

/// Karpenter's fake offerings: every type in every zone, spot and on-demand at one price.
pub fn synthetic_pricing() -> Pricing {
    let mut pricing = Pricing::for_zones(SYNTHETIC_ZONES.map(String::from).to_vec());
    pricing.spot_fraction = 1.0;
    pricing
}

/// `test.NodePool()`: no requirements of its own; both capacity types allowed.
pub fn synthetic_pool() -> NodePool {
    node_pool(
        "default",
        vec![req(
            LABEL_CAPACITY_TYPE,
            Operator::In,
            &["spot", "on-demand"],
        )],
    )
}

/// Sets a synthetic pod's labels and constraints.
type PodShaper = Box<dyn FnMut(&mut Rng, &mut Pod)>;

/// The synthetic pods, deterministic for a seed.
pub fn synthetic_pods(count: usize, shape: Shape, seed: u64) -> Vec<Pod> {
    let mut rng = Rng::new(seed);
    let mut pods = Vec::with_capacity(count);
    let value = |rng: &mut Rng| rng.pick(&["a", "b", "c", "d", "e", "f", "g"]);
    let cpu = |rng: &mut Rng| rng.pick(&[100, 250, 500, 1000, 1500]);
    let karpenter_memory = |rng: &mut Rng| rng.pick(&[100, 256, 512, 1024, 2048, 4096]);
    let push = |pods: &mut Vec<Pod>, rng: &mut Rng, group: &str, mut make: PodShaper| {
        let (c, m) = match shape {
            Shape::Five => (cpu(rng), rng.range(100, 4096)),
            _ => (cpu(rng), karpenter_memory(rng)),
        };
        let mut p = pending_pod(format!("{group}-{}", pods.len()), c, m, BTreeMap::new());
        make(rng, &mut p);
        pods.push(p);
    };
    match shape {
        Shape::Five => {
            let per = count / 5;
            for _ in 0..per {
                push(
                    &mut pods,
                    &mut rng,
                    "generic",
                    Box::new(move |rng, p| p.labels = labels("my-label", value(rng))),
                );
            }
            for (group, key) in [("zone-spread", LABEL_ZONE), ("host-spread", LABEL_HOSTNAME)] {
                for _ in 0..per {
                    push(
                        &mut pods,
                        &mut rng,
                        group,
                        Box::new(move |rng, p| {
                            let v = value(rng);
                            p.labels = labels("my-label", v);
                            p.topology_spread = vec![spread_on(key, selects("my-label", v))];
                        }),
                    );
                }
            }
            for _ in 0..per {
                push(
                    &mut pods,
                    &mut rng,
                    "zone-affinity",
                    Box::new(move |rng, p| {
                        let v = value(rng);
                        p.labels = labels("my-affinity", v);
                        p.pod_affinity = vec![term_on(LABEL_ZONE, selects("my-affinity", v))];
                    }),
                );
            }
            for _ in 0..per {
                push(
                    &mut pods,
                    &mut rng,
                    "host-anti",
                    Box::new(|_, p| {
                        p.labels = labels("app", "nginx");
                        p.pod_anti_affinity =
                            vec![term_on(LABEL_HOSTNAME, selects("app", "nginx"))];
                    }),
                );
            }
        }
        _ => {
            // makeDiversePods: count/6 of each, the remainder generic.
            let per = count / 6;
            for _ in 0..per {
                push(
                    &mut pods,
                    &mut rng,
                    "generic",
                    Box::new(move |rng, p| p.labels = labels("my-label", value(rng))),
                );
            }
            for (group, key) in [("zone-spread", LABEL_ZONE), ("host-spread", LABEL_HOSTNAME)] {
                for _ in 0..per {
                    push(
                        &mut pods,
                        &mut rng,
                        group,
                        Box::new(move |rng, p| {
                            p.labels = labels("my-label", value(rng));
                            p.topology_spread =
                                vec![spread_on(key, selects("my-label", value(rng)))];
                        }),
                    );
                }
            }
            for (group, key) in [
                ("host-affinity", LABEL_HOSTNAME),
                ("zone-affinity", LABEL_ZONE),
            ] {
                for _ in 0..per {
                    push(
                        &mut pods,
                        &mut rng,
                        group,
                        Box::new(move |rng, p| {
                            p.labels = labels("my-affininity", value(rng));
                            p.pod_affinity =
                                vec![term_on(key, selects("my-affininity", value(rng)))];
                        }),
                    );
                }
            }
            for _ in 0..per {
                push(
                    &mut pods,
                    &mut rng,
                    "host-anti",
                    Box::new(|_, p| {
                        p.labels = labels("app", "nginx");
                        p.pod_anti_affinity =
                            vec![term_on(LABEL_HOSTNAME, selects("app", "nginx"))];
                    }),
                );
            }
        }
    }
    while pods.len() < count {
        push(
            &mut pods,
            &mut rng,
            "generic",
            Box::new(move |rng, p| p.labels = labels("my-label", value(rng))),
        );
    }
    pods
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

// ----- real: the AWS catalog and a mixed workload -----------------------------------

/// amd64 linux on-demand c/m/r, generation > 4.
pub fn real_pool() -> NodePool {
    node_pool(
        "default",
        vec![
            req(LABEL_ARCH, Operator::In, &["amd64"]),
            req(LABEL_OS, Operator::In, &["linux"]),
            req(LABEL_CAPACITY_TYPE, Operator::In, &["on-demand"]),
            req(
                "karpenter.k8s.aws/instance-category",
                Operator::In,
                &["c", "m", "r"],
            ),
            req(
                "karpenter.k8s.aws/instance-generation",
                Operator::Gt,
                &["4"],
            ),
        ],
    )
}

/// aws-node (25m, 40Mi) and kube-proxy (100m, 50Mi), tolerating every taint.
pub fn real_daemonsets() -> Vec<DaemonSet> {
    [("aws-node", 25, 40), ("kube-proxy", 100, 50)]
        .into_iter()
        .map(|(name, cpu, mem)| {
            let mut template = pending_pod(name.to_string(), cpu, mem, labels("k8s-app", name));
            template.namespace = "kube-system".into();
            template.daemonset_owned = true;
            template.tolerations = vec![Toleration {
                key: String::new(),
                operator: TolerationOperator::Exists,
                value: String::new(),
                effect: None,
            }];
            DaemonSet {
                namespace: "kube-system".into(),
                name: name.into(),
                template,
            }
        })
        .collect()
}

/// A mixed workload of `count` pods in deployments (identical replicas, own app label):
/// web 40% (250m–1, 256Mi–1Gi, zone spread), worker 25% (1–2, 2–4Gi), cache 15% (500m,
/// 4–8Gi, hostname anti-affinity within its 3 replicas), batch 20% (2–4, 1–2Gi).
pub fn real_pods(count: usize, seed: u64) -> Vec<Pod> {
    let mut rng = Rng::new(seed);
    let mut pods = Vec::with_capacity(count);
    let mut deployment = 0;
    while pods.len() < count {
        deployment += 1;
        let roll = rng.below(100);
        let (kind, replicas, cpu, mem) = match roll {
            0..40 => (
                "web",
                rng.range(6, 20),
                rng.pick(&[250, 500, 750, 1000]),
                rng.pick(&[256, 512, 768, 1024]),
            ),
            40..65 => (
                "worker",
                rng.range(4, 12),
                rng.pick(&[1000, 1500, 2000]),
                rng.pick(&[2048, 3072, 4096]),
            ),
            65..80 => ("cache", 3, 500, rng.pick(&[4096, 6144, 8192])),
            _ => (
                "batch",
                rng.range(5, 15),
                rng.pick(&[2000, 3000, 4000]),
                rng.pick(&[1024, 1536, 2048]),
            ),
        };
        let app = format!("{kind}-{deployment}");
        for r in 0..replicas {
            if pods.len() == count {
                break;
            }
            let mut p = pending_pod(format!("{app}-{r}"), cpu, mem, labels("app", &app));
            match kind {
                "web" => p.topology_spread = vec![spread_on(LABEL_ZONE, selects("app", &app))],
                "cache" => {
                    p.pod_anti_affinity = vec![term_on(LABEL_HOSTNAME, selects("app", &app))]
                }
                _ => {}
            }
            pods.push(p);
        }
    }
    pods
}

fn real_snapshot(count: usize) -> ClusterSnapshot {
    ClusterSnapshot {
        pods: real_pods(count, SEED),
        daemonsets: real_daemonsets(),
        ..Default::default()
    }
}

fn real_suite(out: &mut Report) {
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
    for size in REAL_SIZES {
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

// ----- memory: peak RSS of a fresh process -----------------------------------------

/// A `/proc/self/status` field in KiB (`VmRSS`, `VmHWM`), `None` off Linux.
fn proc_status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
}

const CHILD_PREFIX: &str = "memory-child:";

/// Runs in the child: load the catalog, build the workload, read RSS, plan once, read
/// the high-water mark. Prints one `memory-child:` line of key=value pairs.
fn memory_child(pods: usize) -> Result<(), String> {
    let catalog = Catalog::embedded();
    let pricing = Pricing::default();
    let pools = [real_pool()];
    let snapshot = real_snapshot(pods);
    let rss_before =
        proc_status_kib("VmRSS").ok_or("no VmRSS in /proc/self/status (not Linux?)")?;
    let hwm_before = proc_status_kib("VmHWM").ok_or("no VmHWM in /proc/self/status")?;
    let plan = plan_provisioning(&ProvisioningInput {
        snapshot: &snapshot,
        node_pools: &pools,
        node_classes: &[],
        catalog,
        pricing: &pricing,
        in_flight: &[],
    });
    let hwm_after = proc_status_kib("VmHWM").ok_or("no VmHWM in /proc/self/status")?;
    println!(
        "{CHILD_PREFIX} pods={pods} claims={} rss_before_kib={rss_before} hwm_before_kib={hwm_before} hwm_after_kib={hwm_after}",
        plan.node_claims.len()
    );
    Ok(())
}

fn memory_suite(out: &mut Report, pods: usize) {
    out.header(
        &format!(
            "memory: peak RSS of a fresh process planning the real workload at {} pods",
            thousands(pods as f64)
        ),
        &format!("peak RSS (VmHWM) ≤ {TARGET_PEAK_RSS_MB:.0} MB"),
    );
    let measured = (|| -> Result<HashMap<String, u64>, String> {
        let exe =
            std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
        let output = std::process::Command::new(&exe)
            .args([
                "bench",
                "--suite",
                "memory-child",
                "--pods",
                &pods.to_string(),
            ])
            .output()
            .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() {
            return Err(format!(
                "child exited with {}: {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        let line = stdout
            .lines()
            .find_map(|l| l.strip_prefix(CHILD_PREFIX))
            .ok_or_else(|| format!("child printed no {CHILD_PREFIX} line: {stdout}"))?;
        Ok(line
            .split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
            .collect())
    })();
    let figures = match measured {
        Ok(f) => f,
        Err(e) => {
            out.line(&format!("  !! memory measurement failed: {e}"));
            out.failures.push(format!("memory: {e}"));
            return;
        }
    };
    let mb = |k: &str| figures.get(k).copied().unwrap_or(0) as f64 * 1024.0 / 1e6;
    let (before, hwm_before, peak) = (
        mb("rss_before_kib"),
        mb("hwm_before_kib"),
        mb("hwm_after_kib"),
    );
    out.line(&format!("  RSS before planning (catalog parsed, pods built): {before:.1} MB (high-water so far {hwm_before:.1} MB)"));
    out.line(&format!(
        "  peak RSS after planning:                          {peak:.1} MB"
    ));
    out.line(&format!(
        "  planner's own share (peak − RSS before):          {:.1} MB",
        peak - before
    ));
    out.line(&format!(
        "  claims: {}",
        figures.get("claims").copied().unwrap_or(0)
    ));
    out.record(json!({
        "suite": "memory", "pods": pods, "rss_before_mb": before, "hwm_before_mb": hwm_before,
        "peak_rss_mb": peak, "planner_mb": peak - before,
    }));
    out.target(
        "memory",
        &format!("peak RSS ≤ {TARGET_PEAK_RSS_MB:.0} MB"),
        peak,
        peak <= TARGET_PEAK_RSS_MB,
        format!("{peak:.1} MB"),
    );
}

// ----- cost: plan cost against the fractional lower bound ---------------------------

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

fn mixed_pods(name: &str, n: usize, seed: u64) -> Vec<Pod> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|i| {
            let cpu = rng.pick(&[100, 250, 500, 1000, 2000, 4000]);
            let mem = rng.pick(&[128, 256, 512, 1024, 2048, 4096, 8192, 16384]);
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
        pods: mixed_pods("mixed", n, seed),
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

fn cost_suite(out: &mut Report) {
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
    use super::*;

    #[test]
    fn the_synthetic_workload_at_100_pods_plans_without_breaking_a_constraint() {
        let catalog = synthetic_catalog(SYNTHETIC_TYPES);
        let pricing = synthetic_pricing();
        let pools = [synthetic_pool()];
        for shape in [Shape::Karpenter, Shape::Five] {
            let snapshot = ClusterSnapshot {
                pods: synthetic_pods(100, shape, SEED),
                ..Default::default()
            };
            assert_eq!(snapshot.pods.len(), 100);
            let plan = plan_provisioning(&ProvisioningInput {
                snapshot: &snapshot,
                node_pools: &pools,
                node_classes: &[],
                catalog: &catalog,
                pricing: &pricing,
                in_flight: &[],
            });
            let broken = violations(&plan, &snapshot, &pools, &catalog);
            assert!(broken.is_empty(), "{shape:?}: {broken:#?}");
            assert!(!plan.node_claims.is_empty());
        }
    }

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

    #[test]
    fn the_generators_are_deterministic_and_fill_the_requested_count() {
        let a = synthetic_pods(1_003, Shape::Karpenter, 7);
        let b = synthetic_pods(1_003, Shape::Karpenter, 7);
        assert_eq!(a, b);
        assert_eq!(a.len(), 1_003);
        assert_eq!(real_pods(501, 1).len(), 501);
        let catalog = synthetic_catalog(3);
        assert_eq!(catalog.types[2].allocatable.get_milli("pods"), 30_000);
        assert_eq!(catalog.types[2].labels[LABEL_INSTANCE_MEMORY], "6144");
    }
}
