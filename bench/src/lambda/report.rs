//! The figures: one table per function and cluster size with every invocation's
//! measurements, then what the measured (warm) invocations' CPU time comes to at each
//! memory size. Lambda gives a function CPU in proportion to its memory, 1 vCPU at
//! 1,769 MB; the functions run one thread (tokio's current-thread runtime), so more
//! than one vCPU does not make them faster: wall ≈ CPU-s ÷ min(M / 1769, 1).

use serde_json::{Value, json};

use super::load::Loaded;
use super::proxy::{Tally, Traffic};

/// Lambda's memory size that gives one full vCPU.
pub const MB_PER_VCPU: f64 = 1769.0;
/// The schedule fires once a minute: the CPU a minute's invocation may use at a share.
const MINUTE_S: f64 = 60.0;

/// One invocation (or the cold start's init phase, label `init`).
#[derive(Debug, Clone, Default)]
pub struct Measured {
    /// `init`, `cold`, then `1`, `2`... for the measured ones.
    pub label: String,
    pub cpu_s: f64,
    /// Event handed over → response posted (init: exec → first `next`).
    pub wall_s: f64,
    /// The process's peak resident set during this invocation (init: since exec).
    pub peak_rss_bytes: u64,
    pub kube: Traffic,
    /// CPU seconds kube-apiserver and etcd spent meanwhile (the function's requests,
    /// and whatever else the server does: it is otherwise idle).
    pub server_cpu_s: f64,
    /// The peak of kube-apiserver's and etcd's resident sets together meanwhile.
    pub server_peak_rss_bytes: u64,
    pub aws: Traffic,
    /// What the function returned.
    pub response: Option<Value>,
    /// Its error body, when it failed.
    pub error: Option<String>,
    /// Event handed over → first CreateFleet request, when there was one.
    pub first_launch_s: Option<f64>,
    /// Pending pods created just before this invocation.
    pub burst_pods: usize,
    /// The machine's 1-minute load average when the invocation started.
    pub load_average: f64,
}

impl Measured {
    fn measured(&self) -> bool {
        self.label.parse::<usize>().is_ok()
    }

    /// An invocation (not the init phase).
    fn measured_or_cold(&self) -> bool {
        self.label != "init"
    }

    fn kube_group(&self, group: &str) -> Tally {
        self.kube.total(|verb, _| kube_group(verb) == group)
    }

    /// Lists of every pod begun: one per tick's gather, one per poll of the
    /// provisioner's loop (as long as it re-lists).
    fn pod_lists(&self) -> u64 {
        self.kube
            .total(|verb, resource| verb == "LIST" && resource == "pods")
            .lists
    }

    fn kube_all(&self) -> Tally {
        self.kube.total(|_, _| true)
    }

    fn service(&self, service: &str) -> Tally {
        self.aws.total(|s, _| s == service)
    }

    fn other_aws(&self) -> Tally {
        self.aws.total(|s, _| s != "dynamodb" && s != "ec2")
    }

    /// What the function said it did, in a few words.
    fn result(&self) -> String {
        if let Some(error) = &self.error {
            let error_type = serde_json::from_str::<Value>(error)
                .ok()
                .and_then(|e| e["errorType"].as_str().map(str::to_string))
                .unwrap_or_else(|| "error".into());
            return format!("FAILED {error_type}");
        }
        let Some(r) = &self.response else {
            return String::new();
        };
        let count = |field: &str| r[field].as_array().map_or(0, Vec::len);
        if r.get("ticks").is_some() {
            // The provisioner's summary.
            format!(
                "{} ticks, {} launched, {}",
                r["ticks"].as_u64().unwrap_or(0),
                count("launched"),
                r["outcome"].as_str().unwrap_or("?")
            )
        } else if r.get("started").is_some() {
            // The disruption function's.
            match r["skipped"].as_str() {
                Some(why) => format!("skipped: {why}"),
                None => format!(
                    "{} started, {} rejected",
                    count("started"),
                    r["rejected"].as_u64().unwrap_or(0)
                ),
            }
        } else {
            "responded".into()
        }
    }
}

/// One function at one cluster size.
#[derive(Debug, Clone, Default)]
pub struct Run {
    pub function: String,
    pub nodes: usize,
    pub pods: usize,
    pub scenario: String,
    pub poll_interval: String,
    /// The function's timeout (template.yaml): Lambda stops an invocation then.
    pub timeout_s: f64,
    pub gap_s: f64,
    pub binary: String,
    /// `AWS_LAMBDA_FUNCTION_MEMORY_SIZE` given to the process (nothing reads it for
    /// sizing; the CPU share is computed).
    pub function_memory_mb: u32,
    pub log: String,
    pub invocations: Vec<Measured>,
    pub world: WorldFigures,
}

/// The world's loading, and the control plane and machine around the run.
#[derive(Debug, Clone, Default)]
pub struct WorldFigures {
    /// Writing the Kubernetes objects through the API.
    pub load: Loaded,
    /// kube-apiserver's and etcd's peak resident sets since they started (`VmHWM`,
    /// the loading included), read at the end.
    pub server_peaks: Vec<(String, u64)>,
    /// The machine's load average (1, 5, 15 minutes) before the cold start and after
    /// the last invocation.
    pub load_average_before: [f64; 3],
    pub load_average_after: [f64; 3],
}

impl Run {
    fn measured(&self) -> impl Iterator<Item = &Measured> {
        self.invocations.iter().filter(|m| m.measured())
    }

    fn mean_cpu_s(&self) -> f64 {
        mean(self.measured().map(|m| m.cpu_s))
    }

    fn max_cpu_s(&self) -> f64 {
        self.measured().map(|m| m.cpu_s).fold(0.0, f64::max)
    }

    fn peak_rss_bytes(&self) -> u64 {
        self.invocations
            .iter()
            .map(|m| m.peak_rss_bytes)
            .max()
            .unwrap_or(0)
    }

    /// kube-apiserver's and etcd's resident sets together at their peak during the
    /// invocations (the cold start's included).
    fn server_peak_rss_bytes(&self) -> u64 {
        self.invocations
            .iter()
            .map(|m| m.server_peak_rss_bytes)
            .max()
            .unwrap_or(0)
    }

    /// The invocation's wall budget: the provisioner keeps polling for 55 s of its
    /// minute (`MAX_BUDGET`); the disruption function has its 60 s timeout.
    fn wall_budget_s(&self) -> f64 {
        if self.function == "provisioner" {
            55.0
        } else {
            60.0
        }
    }
}

fn kube_group(verb: &str) -> &'static str {
    match verb {
        "LIST" => "LIST",
        "WATCH" => "WATCH",
        _ => "other",
    }
}

fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = values.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    if n == 0 { 0.0 } else { sum / n as f64 }
}

fn vcpu(memory_mb: u32) -> f64 {
    f64::from(memory_mb) / MB_PER_VCPU
}

/// Wall seconds `cpu_s` takes at `memory_mb` (one thread: at most one vCPU counts).
pub fn wall_at(cpu_s: f64, memory_mb: u32) -> f64 {
    cpu_s / vcpu(memory_mb).min(1.0)
}

/// The share of a minute's CPU at `memory_mb` that `cpu_s` uses, in percent.
pub fn minute_budget_pct(cpu_s: f64, memory_mb: u32) -> f64 {
    100.0 * cpu_s / (MINUTE_S * vcpu(memory_mb).min(1.0))
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

fn load_average(l: &[f64; 3]) -> String {
    format!("{:.2} {:.2} {:.2}", l[0], l[1], l[2])
}

/// One line per invocation while the bench runs (stderr).
pub fn progress_line(m: &Measured) -> String {
    format!(
        "invocation {}: {:.2} CPU-s, {:.1} s wall, {:.0} MB peak; server {:.2} CPU-s; load {:.2}; {}",
        m.label,
        m.cpu_s,
        m.wall_s,
        mb(m.peak_rss_bytes),
        m.server_cpu_s,
        m.load_average,
        m.result()
    )
}

/// The tables for one run.
pub fn tables(run: &Run, memory: &[u32]) -> String {
    let mut out = String::new();
    let line = |out: &mut String, s: String| {
        out.push_str(&s);
        out.push('\n');
    };
    line(
        &mut out,
        format!(
            "\n{} — {} nodes, {} pods, scenario {}, poll {}, frozen {:.0} s between invocations",
            run.function, run.nodes, run.pods, run.scenario, run.poll_interval, run.gap_s
        ),
    );
    line(&mut out, format!("binary {} (log {})", run.binary, run.log));
    let w = &run.world;
    line(
        &mut out,
        format!(
            "Kubernetes world loaded through the API in {:.1} s: {} objects ({} pods), {} requests, {:.0} a second; CPU-s meanwhile: kube-apiserver and etcd {:.1}, the bench {:.1}",
            w.load.seconds,
            w.load.objects,
            w.load.pods,
            w.load.requests,
            w.load.requests as f64 / w.load.seconds.max(1e-9),
            w.load.server_cpu_s,
            w.load.bench_cpu_s
        ),
    );
    let peaks: Vec<String> = w
        .server_peaks
        .iter()
        .map(|(name, bytes)| format!("{name} {:.0} MB", mb(*bytes)))
        .collect();
    line(
        &mut out,
        format!(
            "control plane peak RSS: {} since it started (loading included); {:.0} MB together during the invocations",
            peaks.join(", "),
            mb(run.server_peak_rss_bytes())
        ),
    );
    line(
        &mut out,
        format!(
            "load average (1, 5, 15 min): {} before the cold start, {} after the last invocation",
            load_average(&w.load_average_before),
            load_average(&w.load_average_after)
        ),
    );
    line(
        &mut out,
        format!(
            "{:<5} {:>7} {:>7} {:>7} {:>9} {:>13} {:>5} {:>5} {:>8} {:>7} {:>6} {:>6} {:>6} {:>7} {:>7} {:>5} {:>5} {:>7}  {}",
            "inv",
            "CPU-s",
            "wall s",
            "RSS MB",
            "pod lists",
            "k8s LIST/lists",
            "WATCH",
            "other",
            "k8s MB",
            "srv CPU",
            "srv GB",
            "load",
            "DDB",
            "RCU",
            "WCU",
            "EC2",
            "AWS+",
            "launch",
            "result"
        ),
    );
    for m in &run.invocations {
        let list = m.kube_group("LIST");
        let ddb = m.service("dynamodb");
        line(
            &mut out,
            format!(
                "{:<5} {:>7.2} {:>7.1} {:>7.0} {:>9} {:>13} {:>5} {:>5} {:>8.2} {:>7.2} {:>6.2} {:>6} {:>6} {:>7.1} {:>7.1} {:>5} {:>5} {:>7}  {}",
                m.label,
                m.cpu_s,
                m.wall_s,
                mb(m.peak_rss_bytes),
                m.pod_lists(),
                format!("{}/{}", list.requests, list.lists),
                m.kube_group("WATCH").requests,
                m.kube_group("other").requests,
                mb(m.kube_all().response_bytes),
                m.server_cpu_s,
                mb(m.server_peak_rss_bytes) / 1000.0,
                if m.measured_or_cold() {
                    format!("{:.2}", m.load_average)
                } else {
                    "-".to_string()
                },
                ddb.requests,
                ddb.read_units,
                ddb.write_units,
                m.service("ec2").requests,
                m.other_aws().requests,
                m.first_launch_s
                    .map_or("-".to_string(), |s| format!("{s:.1}s")),
                if m.measured_or_cold() && m.wall_s > run.timeout_s {
                    format!(
                        "{} — ran past the {:.0} s timeout: Lambda would have stopped it",
                        m.result(),
                        run.timeout_s
                    )
                } else {
                    m.result()
                }
            ),
        );
    }
    for l in heap_lines(run) {
        line(&mut out, l);
    }
    if let Some(targets) = target_line(run) {
        line(&mut out, targets);
    }
    let mean_cpu = run.mean_cpu_s();
    line(
        &mut out,
        format!(
            "measured invocations: mean {mean_cpu:.2} CPU-s, max {:.2}; one invocation per scheduled minute, so CPU-s per minute = CPU-s per invocation",
            run.max_cpu_s()
        ),
    );
    line(
        &mut out,
        format!(
            "{:>8} {:>6} {:>13} {:>13} {:>16} {:>14}",
            "memory", "vCPU", "wall (mean)", "wall (max)", "% of minute CPU", "peak RSS fits"
        ),
    );
    let budget = run.wall_budget_s();
    for &m in memory {
        let wall = wall_at(mean_cpu, m);
        let rss_fits = run.peak_rss_bytes() as f64 <= f64::from(m) * LAMBDA_MB;
        line(
            &mut out,
            format!(
                "{:>5} MB {:>6.3} {:>12.1}s {:>12.1}s {:>15.1}% {:>14}{}",
                m,
                vcpu(m),
                wall,
                wall_at(run.max_cpu_s(), m),
                minute_budget_pct(mean_cpu, m),
                if rss_fits { "yes" } else { "NO" },
                if wall > budget {
                    format!("  (over the {budget:.0} s the invocation has)")
                } else {
                    String::new()
                }
            ),
        );
    }
    let aws: Vec<String> = calls_by_count(&run.measured().collect::<Vec<_>>(), Side::Aws)
        .into_iter()
        .take(12)
        .collect();
    line(
        &mut out,
        format!(
            "AWS calls in the measured invocations (total): {}",
            aws.join(", ")
        ),
    );
    let kube: Vec<String> = calls_by_count(&run.measured().collect::<Vec<_>>(), Side::Kube)
        .into_iter()
        .take(12)
        .collect();
    line(
        &mut out,
        format!(
            "Kubernetes requests in the measured invocations (total): {}",
            kube.join(", ")
        ),
    );
    out
}

/// One invocation's heap as the function counted it (its summary's `heap`).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Heap {
    baseline: f64,
    at_start: f64,
    peak: f64,
}

impl Heap {
    fn of(m: &Measured) -> Option<Heap> {
        let heap = m.response.as_ref()?.get("heap")?;
        let bytes = |key: &str| heap.get(key).and_then(Value::as_f64);
        Some(Heap {
            baseline: bytes("baselineBytes")?,
            at_start: bytes("atStartBytes")?,
            peak: bytes("peakBytes")?,
        })
    }
}

/// Where the function's bytes go, from its own count of its heap: the cold start's
/// baseline (the runtime, the SDK clients, configuration and catalog); what the process
/// holds between invocations on top of it (the watched view, the claim cache, the other
/// caches), also per pod and per node; what the invocation needed on top of that (a
/// tick's copy of the view, the decision's inputs and working set); and the resident
/// set beyond the heap's peak (code, stacks, pages the allocator keeps).
fn heap_lines(run: &Run) -> Vec<String> {
    let rows: Vec<(&Measured, Heap)> = run
        .invocations
        .iter()
        .filter_map(|m| Some((m, Heap::of(m)?)))
        .collect();
    if rows.is_empty() {
        return vec!["where the bytes go: the function reported no heap (not built with its counting allocator?)".to_string()];
    }
    let per = |bytes: f64, of: usize| {
        if of == 0 {
            "-".to_string()
        } else {
            format!("{:.0}", bytes / of as f64)
        }
    };
    let mut out = vec![
        "where the bytes go (the function's own heap count, MB; held: at the invocation's start, beyond the cold start's baseline, also per pod and per node with its pods; invocation: its peak beyond held):".to_string(),
        format!(
            "{:<5} {:>9} {:>8} {:>10} {:>11} {:>10} {:>10} {:>7} {:>11}",
            "inv",
            "baseline",
            "held",
            "B a pod",
            "B a node",
            "invocation",
            "heap peak",
            "RSS",
            "RSS-heap"
        ),
    ];
    for (m, h) in rows {
        let held = h.at_start - h.baseline;
        out.push(format!(
            "{:<5} {:>9.1} {:>8.1} {:>10} {:>11} {:>10.1} {:>10.1} {:>7.0} {:>11.1}",
            m.label,
            h.baseline / 1e6,
            held / 1e6,
            per(held, run.pods),
            per(held, run.nodes),
            (h.peak - h.at_start) / 1e6,
            h.peak / 1e6,
            mb(m.peak_rss_bytes),
            mb(m.peak_rss_bytes) - h.peak / 1e6,
        ));
    }
    out
}

/// Bytes in a MB as Lambda counts a function's memory size (MiB).
const LAMBDA_MB: f64 = 1_048_576.0;

/// One of the figures a function is to stay within at this cluster size, beside what
/// the warm invocations measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub what: &'static str,
    pub limit: f64,
    pub measured: f64,
    pub unit: &'static str,
}

impl Target {
    pub fn met(&self) -> bool {
        self.measured <= self.limit
    }
}

/// The value at `nodes` on the line from `at_1k` (1,000 nodes) to `at_10k` (10,000
/// nodes); a smaller cluster is held to the 1,000-node figure.
fn on_the_line(nodes: usize, at_1k: f64, at_10k: f64) -> f64 {
    let from_1k = nodes.max(1_000) as f64 - 1_000.0;
    at_1k + (at_10k - at_1k) * from_1k / 9_000.0
}

/// What the warm invocations of `run` are to stay within (the sizing targets):
/// - the provisioner: a peak resident set of 240 MB at 1,000 nodes (the default 256 MB
///   function serves it) and 1,024 MB at 10,000, and a quiet minute of 0.5 CPU-s at
///   1,000 nodes and 3 at 10,000, on the line between for other sizes;
/// - the disruption function: its decision within 60 s at its memory's CPU share, and
///   1.5 GB, at every size.
///
/// Memory limits are in Lambda's MB, which are MiB (the tables' MB are 10^6 bytes). No
/// targets without warm invocations.
pub fn targets(run: &Run) -> Vec<Target> {
    let warm: Vec<&Measured> = run.measured().collect();
    if warm.is_empty() {
        return Vec::new();
    }
    let peak_rss = warm.iter().map(|m| m.peak_rss_bytes).max().unwrap_or(0) as f64 / LAMBDA_MB;
    let rss = |limit: f64| Target {
        what: "peak RSS, warm",
        limit,
        measured: peak_rss,
        unit: "MiB",
    };
    match run.function.as_str() {
        "provisioner" => {
            let mut out = vec![rss(on_the_line(run.nodes, 240.0, 1_024.0))];
            if run.scenario == "quiet" {
                out.push(Target {
                    what: "CPU-s a quiet minute",
                    limit: on_the_line(run.nodes, 0.5, 3.0),
                    measured: run.mean_cpu_s(),
                    unit: "CPU-s",
                });
            }
            out
        }
        "disruption" => vec![
            rss(1_536.0),
            Target {
                what: "decision wall at its memory's share",
                limit: 60.0,
                measured: wall_at(run.max_cpu_s(), run.function_memory_mb),
                unit: "s",
            },
        ],
        _ => Vec::new(),
    }
}

fn target_line(run: &Run) -> Option<String> {
    let targets = targets(run);
    if targets.is_empty() {
        return None;
    }
    let each: Vec<String> = targets
        .iter()
        .map(|t| {
            format!(
                "{} {:.2} {} (at most {:.2}): {}",
                t.what,
                t.measured,
                t.unit,
                t.limit,
                if t.met() { "met" } else { "NOT met" }
            )
        })
        .collect();
    Some(format!(
        "targets at {} nodes ({} MB function): {}",
        run.nodes,
        run.function_memory_mb,
        each.join("; ")
    ))
}

#[derive(Clone, Copy)]
enum Side {
    Kube,
    Aws,
}

/// `"dynamodb Query 12 (4.5 RCU)"`... summed over `invocations`, most requests first.
fn calls_by_count(invocations: &[&Measured], side: Side) -> Vec<String> {
    let mut sums: std::collections::BTreeMap<(String, String), Tally> = Default::default();
    for m in invocations {
        let traffic = match side {
            Side::Kube => &m.kube,
            Side::Aws => &m.aws,
        };
        for (key, tally) in &traffic.calls {
            let sum = sums.entry(key.clone()).or_default();
            sum.requests += tally.requests;
            sum.response_bytes += tally.response_bytes;
            sum.read_units += tally.read_units;
            sum.write_units += tally.write_units;
            sum.replayed += tally.replayed;
        }
    }
    let mut sums: Vec<_> = sums.into_iter().collect();
    sums.sort_by(|a, b| b.1.requests.cmp(&a.1.requests).then(a.0.cmp(&b.0)));
    sums.into_iter()
        .map(|((group, name), t)| {
            let units = if t.read_units + t.write_units > 0.0 {
                format!(" ({:.1} RCU, {:.1} WCU)", t.read_units, t.write_units)
            } else {
                String::new()
            };
            let replayed = if t.replayed > 0 {
                format!(" ({} replayed)", t.replayed)
            } else {
                String::new()
            };
            format!(
                "{group} {name} {} [{:.2} MB]{units}{replayed}",
                t.requests,
                mb(t.response_bytes)
            )
        })
        .collect()
}

fn tally_json(t: &Tally) -> Value {
    json!({
        "requests": t.requests,
        "errors": t.errors,
        "lists": t.lists,
        "request_bytes": t.request_bytes,
        "response_bytes": t.response_bytes,
        "read_units": t.read_units,
        "write_units": t.write_units,
        "replayed": t.replayed,
    })
}

fn traffic_json(traffic: &Traffic) -> Value {
    traffic
        .calls
        .iter()
        .map(|((group, name), t)| {
            let mut v = tally_json(t);
            v["group"] = json!(group);
            v["name"] = json!(name);
            v
        })
        .collect()
}

/// Every figure of every run, for pasting into tables.
pub fn json(runs: &[Run], memory: &[u32]) -> Value {
    let runs: Vec<Value> = runs
        .iter()
        .map(|run| {
            let invocations: Vec<Value> = run
                .invocations
                .iter()
                .map(|m| {
                    json!({
                        "label": m.label,
                        "measured": m.measured(),
                        "cpu_s": m.cpu_s,
                        "wall_s": m.wall_s,
                        "past_timeout": m.measured_or_cold() && m.wall_s > run.timeout_s,
                        "peak_rss_mb": mb(m.peak_rss_bytes),
                        "burst_pods": m.burst_pods,
                        "first_create_fleet_s": m.first_launch_s,
                        "kubernetes": {
                            "pod_lists": m.pod_lists(),
                            "list": tally_json(&m.kube_group("LIST")),
                            "watch": tally_json(&m.kube_group("WATCH")),
                            "other": tally_json(&m.kube_group("other")),
                            "calls": traffic_json(&m.kube),
                        },
                        "control_plane": {
                            "cpu_s": m.server_cpu_s,
                            "peak_rss_mb": mb(m.server_peak_rss_bytes),
                        },
                        "load_average_1m": m.measured_or_cold().then_some(m.load_average),
                        "dynamodb": tally_json(&m.service("dynamodb")),
                        "ec2": tally_json(&m.service("ec2")),
                        "other_aws": tally_json(&m.other_aws()),
                        "aws_calls": traffic_json(&m.aws),
                        "result": m.result(),
                        "response": m.response,
                        "error": m.error,
                    })
                })
                .collect();
            let mean_cpu = run.mean_cpu_s();
            let at_memory: Vec<Value> = memory
                .iter()
                .map(|&m| {
                    json!({
                        "memory_mb": m,
                        "vcpu": vcpu(m),
                        "wall_s_mean": wall_at(mean_cpu, m),
                        "wall_s_max": wall_at(run.max_cpu_s(), m),
                        "minute_cpu_pct": minute_budget_pct(mean_cpu, m),
                        "peak_rss_fits": run.peak_rss_bytes() as f64 <= f64::from(m) * LAMBDA_MB,
                    })
                })
                .collect();
            json!({
                "function": run.function,
                "nodes": run.nodes,
                "pods": run.pods,
                "scenario": run.scenario,
                "poll_interval": run.poll_interval,
                "timeout_s": run.timeout_s,
                "frozen_gap_s": run.gap_s,
                "binary": run.binary,
                "function_memory_mb": run.function_memory_mb,
                "log": run.log,
                "cpu_s_mean": mean_cpu,
                "cpu_s_max": run.max_cpu_s(),
                "peak_rss_mb": mb(run.peak_rss_bytes()),
                "world": {
                    "load_s": run.world.load.seconds,
                    "objects": run.world.load.objects,
                    "pods": run.world.load.pods,
                    "requests": run.world.load.requests,
                    "server_cpu_s": run.world.load.server_cpu_s,
                    "bench_cpu_s": run.world.load.bench_cpu_s,
                },
                "control_plane": {
                    "lifetime_peak_rss_mb": run.world.server_peaks.iter()
                        .map(|(name, bytes)| (name.clone(), json!(mb(*bytes))))
                        .collect::<serde_json::Map<String, Value>>(),
                    "peak_rss_mb_during_invocations": mb(run.server_peak_rss_bytes()),
                },
                "load_average_before": run.world.load_average_before,
                "load_average_after": run.world.load_average_after,
                "invocations": invocations,
                "at_memory": at_memory,
                "targets": targets(run).iter().map(|t| json!({
                    "what": t.what,
                    "limit": t.limit,
                    "measured": t.measured,
                    "unit": t.unit,
                    "met": t.met(),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "mb_per_vcpu": MB_PER_VCPU,
        "dynamodb_units": "estimated from request and response JSON with DynamoDB's item-size rules",
        "runs": runs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_becomes_wall_time_at_lambdas_share() {
        assert!((wall_at(1.0, 1769) - 1.0).abs() < 1e-9);
        assert!((wall_at(1.0, 256) - 1769.0 / 256.0).abs() < 1e-9);
        assert_eq!(
            wall_at(2.0, 3538),
            2.0,
            "one thread: no faster past one vCPU"
        );
        // 256 MB: 0.1447 vCPU → 8.68 CPU-s a minute.
        assert!((minute_budget_pct(8.68, 256) - 100.0).abs() < 0.1);
    }

    #[test]
    fn the_heap_a_function_reports_is_split_into_baseline_held_and_the_invocations_own() {
        let warm = Measured {
            label: "1".into(),
            peak_rss_bytes: 300_000_000,
            response: Some(
                json!({"heap": {"baselineBytes": 20_000_000, "atStartBytes": 120_000_000,
                "peakBytes": 200_000_000, "atEndBytes": 121_000_000}}),
            ),
            ..Measured::default()
        };
        let run = Run {
            nodes: 1_000,
            pods: 25_000,
            invocations: vec![
                Measured {
                    label: "init".into(),
                    ..Measured::default()
                },
                warm,
            ],
            ..Run::default()
        };
        let lines = heap_lines(&run);
        assert_eq!(lines.len(), 3, "{lines:#?}");
        let figures: Vec<&str> = lines[2].split_whitespace().collect();
        // baseline 20 MB; held 100 MB = 4,000 B a pod, 100,000 B a node; the invocation
        // 80 MB on top; heap peak 200 MB; 100 MB of the resident set beyond the heap.
        assert_eq!(
            figures,
            [
                "1", "20.0", "100.0", "4000", "100000", "80.0", "200.0", "300", "100.0"
            ]
        );
        let silent = Run {
            invocations: vec![Measured::default()],
            ..Run::default()
        };
        assert!(heap_lines(&silent)[0].contains("reported no heap"));
    }

    #[test]
    fn the_targets_run_on_the_line_from_1000_to_10000_nodes_and_judge_the_warm_invocations() {
        let warm = |rss_mib: u64, cpu_s: f64| Measured {
            label: "1".into(),
            peak_rss_bytes: rss_mib * 1_048_576,
            cpu_s,
            ..Measured::default()
        };
        let cold = Measured {
            label: "cold".into(),
            peak_rss_bytes: 4_000 * 1_048_576,
            cpu_s: 30.0,
            ..Measured::default()
        };
        let provisioner = |nodes: usize, rss_mib: u64, cpu_s: f64| Run {
            function: "provisioner".into(),
            scenario: "quiet".into(),
            nodes,
            invocations: vec![cold.clone(), warm(rss_mib, cpu_s)],
            ..Run::default()
        };
        let judged = |run: &Run| -> Vec<(f64, bool)> {
            targets(run).iter().map(|t| (t.limit, t.met())).collect()
        };
        assert_eq!(
            judged(&provisioner(1_000, 240, 0.5)),
            [(240.0, true), (0.5, true)]
        );
        assert_eq!(
            judged(&provisioner(500, 241, 0.4)),
            [(240.0, false), (0.5, true)]
        );
        assert_eq!(
            judged(&provisioner(10_000, 1_000, 3.5)),
            [(1_024.0, true), (3.0, false)]
        );
        // 5,000 nodes: four ninths of the way.
        let mid = targets(&provisioner(5_000, 500, 1.0));
        assert!((mid[0].limit - (240.0 + 784.0 * 4.0 / 9.0)).abs() < 1e-9);
        let disruption = Run {
            function: "disruption".into(),
            scenario: "quiet".into(),
            nodes: 10_000,
            function_memory_mb: 885,
            invocations: vec![cold.clone(), warm(1_400, 30.0)],
            ..Run::default()
        };
        // 30 CPU-s at 885 MB (half a vCPU) is 60 s: just within.
        let t = targets(&disruption);
        assert_eq!(t.iter().map(Target::met).collect::<Vec<_>>(), [true, true]);
        assert!((t[1].measured - 30.0 * 1769.0 / 885.0).abs() < 1e-9);
        let without_warm = Run {
            invocations: vec![cold],
            ..disruption
        };
        assert!(targets(&without_warm).is_empty());
    }
}
