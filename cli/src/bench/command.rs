//! `bench --suite command`: the figures a user sees. Each case is written to files as a
//! user would have them (a snapshot as `kubectl get ... -o json` prints it, NodePools as
//! YAML, a catalog file), then this executable's `plan --output json` runs on them as a
//! child process with its output going to a file. Reported per case: wall time from
//! spawn to exit (best of `--runs`), the child's peak RSS (`ru_maxrss` from `wait4`,
//! the highest of the runs), and the size of the JSON it wrote.
//!
//! Cases:
//! - Karpenter's benchmark shape (five groups, see [`super::Shape::Five`]) at 10,000 and
//!   20,000 pending pods, marked Unschedulable by kube-scheduler, against the 400
//!   synthetic types given as `--catalog`;
//! - a cluster of 1,000 nodes running 25,000 pods, and one of 5,000 nodes running 125,000
//!   (2 DaemonSet pods and 23 workload pods per node, nothing pending), on the embedded
//!   catalog: what the provisioner holds on every tick of a cluster that size.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nodewright_core::catalog::{
    Catalog, LABEL_ARCH, LABEL_CAPACITY_TYPE, LABEL_HOSTNAME, LABEL_INSTANCE_TYPE, LABEL_NODEPOOL,
    LABEL_OS, LABEL_ZONE,
};
use nodewright_core::cluster::{LabelSelector, Pod, PodAffinityTerm, TopologySpreadConstraint};
use serde::Serialize;
use serde_json::{Map, Value, json};

use super::{
    Report, SEED, SYNTHETIC_TYPES, SYNTHETIC_ZONES, Shape, TARGET_PODS_PER_SEC, real_daemonsets,
    real_pods, synthetic_catalog_json, synthetic_pods, thousands,
};

/// Peak RSS targets of `plan` on Karpenter's shape, in MB (10^6 bytes).
pub const TARGET_RSS_10K_MB: f64 = 128.0;
pub const TARGET_RSS_20K_MB: f64 = 256.0;
/// The provisioner function's default memory in template.yaml (`ProvisionerMemorySize`),
/// in MB as Lambda counts them (MiB): a cluster of 1,000 nodes must plan well inside it
/// (at most half, leaving room for the listed API objects, the SDK clients and the
/// engine's state). A test keeps it equal to the template's default.
pub const PROVISIONER_MEMORY_MIB: f64 = 256.0;

const CLUSTER_ZONES: [&str; 3] = ["us-east-1a", "us-east-1b", "us-east-1c"];
/// Workload and DaemonSet pods per node in the cluster cases.
const WORKLOAD_PODS_PER_NODE: usize = 23;
/// Node types of the cluster cases: room for 23 of the real workload's pods.
const CLUSTER_NODE_TYPES: [&str; 3] = ["m5.8xlarge", "m6i.8xlarge", "r5.8xlarge"];

struct Case {
    name: String,
    /// Pods in the snapshot (pending and bound).
    pods: usize,
    /// Pending pods: what the pods/s figure divides.
    pending: usize,
    nodepools: PathBuf,
    snapshot: PathBuf,
    catalog: Option<PathBuf>,
    zones: String,
}

struct Measured {
    best_wall: Duration,
    peak_rss_mb: f64,
    output_bytes: u64,
    claims: usize,
    unschedulable: usize,
    most_options: usize,
}

pub(super) fn command_suite(out: &mut Report, runs: usize, keep_in: Option<&Path>) {
    out.header(
        "command: `nodewright plan --output json > plan.json` on snapshot files, as a child process",
        &format!(
            "Karpenter's shape (five groups): peak RSS ≤ {TARGET_RSS_10K_MB:.0} MB at 10,000 pods, ≤ {TARGET_RSS_20K_MB:.0} MB and ≥ {} pods/s at 20,000; a 1,000-node cluster well under the provisioner's {PROVISIONER_MEMORY_MIB:.0} MiB (≤ half)",
            thousands(TARGET_PODS_PER_SEC)
        ),
    );
    out.line(&format!(
        "wall: spawn to exit, best of {runs}; peak RSS: the child's ru_maxrss (wait4), highest of the runs; output: bytes of JSON written"
    ));
    let dir = keep_in.map_or_else(
        || std::env::temp_dir().join(format!("nodewright-bench-{}", std::process::id())),
        Path::to_path_buf,
    );
    let result = (|| -> Result<(), String> {
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let exe =
            std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
        let idle = Command::new(&exe)
            .args(["bench", "--suite", "run-child", "--"])
            .arg(&exe)
            .arg("--version")
            .stdout(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
        if let Some((_, kib)) = parse_run_child(&String::from_utf8_lossy(&idle.stderr)) {
            out.line(&format!(
                "for scale: `nodewright --version` measured the same way peaks at {:.1} MB",
                kib as f64 * 1024.0 / 1e6
            ));
        }
        out.line(&format!(
            "{:<44} {:>8} {:>10} {:>8} {:>10} {:>8} {:>9} {:>12}",
            "case", "pods", "snapshot", "wall ms", "pods/s", "peak MB", "output", "claims"
        ));
        for case in cases(&dir)? {
            let snapshot_mb = file_mb(&case.snapshot);
            let m = measure(&case, &dir, runs)?;
            let secs = m.best_wall.as_secs_f64();
            let rate = case.pending as f64 / secs.max(1e-9);
            out.line(&format!(
                "{:<44} {:>8} {:>8.1}MB {:>8.0} {:>10} {:>8.1} {:>7.1}MB {:>12}",
                case.name,
                thousands(case.pods as f64),
                snapshot_mb,
                secs * 1e3,
                if case.pending > 0 {
                    thousands(rate)
                } else {
                    "-".into()
                },
                m.peak_rss_mb,
                m.output_bytes as f64 / 1e6,
                format!("{} ({} unsched)", m.claims, m.unschedulable),
            ));
            if m.claims > 0 {
                out.line(&format!(
                    "{:<44} most instanceTypeOptions on one claim: {}",
                    "", m.most_options
                ));
            }
            out.record(json!({
                "suite": "command", "case": case.name, "pods": case.pods, "pending": case.pending,
                "snapshot_mb": snapshot_mb, "wall_ms": secs * 1e3, "pods_per_sec": rate,
                "peak_rss_mb": m.peak_rss_mb, "output_bytes": m.output_bytes, "claims": m.claims,
                "unschedulable": m.unschedulable, "runs": runs,
            }));
            match (case.pending, case.pods) {
                (10_000, _) => out.target(
                    "command",
                    "peak RSS ≤ 128 MB at 10,000 pods",
                    m.peak_rss_mb,
                    m.peak_rss_mb <= TARGET_RSS_10K_MB,
                    format!("{:.1} MB", m.peak_rss_mb),
                ),
                (20_000, _) => {
                    out.target(
                        "command",
                        "peak RSS ≤ 256 MB at 20,000 pods",
                        m.peak_rss_mb,
                        m.peak_rss_mb <= TARGET_RSS_20K_MB,
                        format!("{:.1} MB", m.peak_rss_mb),
                    );
                    out.target(
                        "command",
                        &format!("{} pods/s at 20,000 pods", thousands(TARGET_PODS_PER_SEC)),
                        rate,
                        rate >= TARGET_PODS_PER_SEC,
                        format!("{} pods/s", thousands(rate)),
                    );
                }
                (0, 25_000) => {
                    let limit = PROVISIONER_MEMORY_MIB * 1.048_576 / 2.0;
                    out.target(
                        "command",
                        &format!(
                            "1,000 nodes / 25,000 pods: peak RSS ≤ half the provisioner's {PROVISIONER_MEMORY_MIB:.0} MiB ({limit:.0} MB)"
                        ),
                        m.peak_rss_mb,
                        m.peak_rss_mb <= limit,
                        format!("{:.1} MB", m.peak_rss_mb),
                    );
                }
                _ => {}
            }
        }
        Ok(())
    })();
    if keep_in.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    if let Err(e) = result {
        out.line(&format!("  !! command suite failed: {e}"));
        out.failures.push(format!("command: {e}"));
    }
}

fn file_mb(path: &Path) -> f64 {
    std::fs::metadata(path).map_or(0.0, |m| m.len() as f64 / 1e6)
}

fn cases(dir: &Path) -> Result<Vec<Case>, String> {
    let mut cases = Vec::new();
    let synthetic_pools = dir.join("synthetic-nodepools.yaml");
    write_text(
        &synthetic_pools,
        &nodepools_yaml(&[(LABEL_CAPACITY_TYPE, "In", &["spot", "on-demand"])]),
    )?;
    let catalog = dir.join("synthetic-catalog.json");
    write_json(&catalog, &synthetic_catalog_json(SYNTHETIC_TYPES))?;
    for pending in [10_000, 20_000] {
        let snapshot = dir.join(format!("karpenter-{pending}.json"));
        let pods = synthetic_pods(pending, Shape::Five, SEED);
        write_list(&snapshot, |w| {
            for (i, p) in pods.iter().enumerate() {
                w.item(&pod_object(p, i))?;
            }
            Ok(())
        })?;
        cases.push(Case {
            name: format!(
                "Karpenter's shape, {} pending, {SYNTHETIC_TYPES} types",
                thousands(pending as f64)
            ),
            pods: pending,
            pending,
            nodepools: synthetic_pools.clone(),
            snapshot,
            catalog: Some(catalog.clone()),
            zones: SYNTHETIC_ZONES.join(","),
        });
    }
    let real_pools = dir.join("real-nodepools.yaml");
    write_text(
        &real_pools,
        &nodepools_yaml(&[
            (LABEL_ARCH, "In", &["amd64"]),
            (LABEL_OS, "In", &["linux"]),
            (LABEL_CAPACITY_TYPE, "In", &["on-demand"]),
            (
                "karpenter.k8s.aws/instance-category",
                "In",
                &["c", "m", "r"],
            ),
            ("karpenter.k8s.aws/instance-generation", "Gt", &["4"]),
        ]),
    )?;
    for nodes in [1_000, 5_000] {
        let snapshot = dir.join(format!("cluster-{nodes}.json"));
        let pods = write_cluster(&snapshot, nodes)?;
        cases.push(Case {
            name: format!(
                "cluster: {} nodes, {} pods bound",
                thousands(nodes as f64),
                thousands(pods as f64)
            ),
            pods,
            pending: 0,
            nodepools: real_pools.clone(),
            snapshot,
            catalog: None,
            zones: CLUSTER_ZONES.join(","),
        });
    }
    Ok(cases)
}

/// Runs `plan` on a case `runs` times, each through `bench --suite run-child`.
///
/// Why the extra process: Linux counts the memory of the process that spawns a child in
/// the child's `ru_maxrss` (at exec, the high-water mark of the address space it leaves
/// is kept), and this process holds the generated workloads. `run-child` is a fresh,
/// small process, so what it reports is the plan's own peak.
fn measure(case: &Case, dir: &Path, runs: usize) -> Result<Measured, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let output = dir.join("plan.json");
    let mut best_wall = Duration::MAX;
    let mut peak_kib = 0;
    for _ in 0..runs.max(1) {
        let mut command = Command::new(&exe);
        command
            .args(["bench", "--suite", "run-child", "--"])
            .arg(&exe)
            .arg("plan")
            .arg("--nodepools")
            .arg(&case.nodepools)
            .arg("--snapshot")
            .arg(&case.snapshot)
            .args(["--zones", &case.zones, "--output", "json"]);
        if let Some(catalog) = &case.catalog {
            command.arg("--catalog").arg(catalog);
        }
        let stdout = File::create(&output)
            .map_err(|e| format!("cannot create {}: {e}", output.display()))?;
        let result = command
            .stdout(Stdio::from(stdout))
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
        let stderr = String::from_utf8_lossy(&result.stderr);
        if !result.status.success() {
            return Err(format!("{}: plan failed: {}", case.name, stderr.trim()));
        }
        let (wall, kib) = parse_run_child(&stderr)
            .ok_or_else(|| format!("{}: run-child printed no figures: {stderr}", case.name))?;
        best_wall = best_wall.min(wall);
        peak_kib = peak_kib.max(kib);
    }
    let text =
        std::fs::read(&output).map_err(|e| format!("cannot read {}: {e}", output.display()))?;
    let plan: Value = serde_json::from_slice(&text)
        .map_err(|e| format!("{}: plan printed no JSON: {e}", case.name))?;
    let claims = plan["nodeClaims"].as_array().map_or(&[][..], Vec::as_slice);
    Ok(Measured {
        best_wall,
        peak_rss_mb: peak_kib as f64 * 1024.0 / 1e6,
        output_bytes: text.len() as u64,
        claims: claims.len(),
        unschedulable: plan["unschedulable"].as_array().map_or(0, Vec::len),
        most_options: claims
            .iter()
            .filter_map(|c| c["instanceTypeOptions"].as_array().map(Vec::len))
            .max()
            .unwrap_or(0),
    })
}

const RUN_CHILD_PREFIX: &str = "run-child:";

pub(super) fn parse_run_child(stderr: &str) -> Option<(Duration, u64)> {
    let line = stderr
        .lines()
        .find_map(|l| l.strip_prefix(RUN_CHILD_PREFIX))?;
    let mut wall = None;
    let mut kib = None;
    for (k, v) in line.split_whitespace().filter_map(|kv| kv.split_once('=')) {
        match k {
            "wall_ns" => wall = v.parse().ok().map(Duration::from_nanos),
            "maxrss_kib" => kib = v.parse().ok(),
            _ => {}
        }
    }
    Some((wall?, kib?))
}

/// `bench --suite run-child -- PROGRAM ARGS...`: runs the program with this process's
/// stdin/stdout, its stderr passed through, and prints one `run-child:` line to stderr
/// with its wall time and peak RSS. Fails when the program does.
pub(super) fn run_child(command: &[String]) -> Result<(), String> {
    let (program, args) = command
        .split_first()
        .ok_or("run-child: no command given after --")?;
    let started = Instant::now();
    let child = Command::new(program)
        .args(args)
        .spawn()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    let (status, maxrss_kib) = wait_with_rusage(child.id())?;
    let wall = started.elapsed();
    eprintln!(
        "{RUN_CHILD_PREFIX} status={status} wall_ns={} maxrss_kib={maxrss_kib}",
        wall.as_nanos()
    );
    if status == 0 {
        Ok(())
    } else {
        Err(format!("{program} exited with status {status}"))
    }
}

/// Waits for the child `pid` and returns its exit status and peak RSS in KiB (Linux
/// reports `ru_maxrss` in KiB). `wait4` gives the rusage of this one child, where
/// `getrusage(RUSAGE_CHILDREN)` would give the largest of all children so far.
fn wait_with_rusage(pid: u32) -> Result<(i32, u64), String> {
    let mut status: libc::c_int = 0;
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `status` and `usage` are valid for writes for the duration of the call.
        let r = unsafe { libc::wait4(pid as libc::pid_t, &mut status, 0, &mut usage) };
        if r == pid as libc::pid_t {
            break;
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(format!("wait4: {err}"));
        }
    }
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    };
    Ok((code, usage.ru_maxrss.max(0) as u64))
}

// ----- writing files ---------------------------------------------------------------

pub(super) fn write_text(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn write_json(path: &Path, value: &Value) -> Result<(), String> {
    write_text(path, &value.to_string())
}

/// One NodePool `default` with these requirements, and its EC2NodeClass.
pub(super) fn nodepools_yaml(requirements: &[(&str, &str, &[&str])]) -> String {
    let mut reqs = String::new();
    for (key, op, values) in requirements {
        let values: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
        reqs.push_str(&format!(
            "        - key: {key}\n          operator: {op}\n          values: [{}]\n",
            values.join(", ")
        ));
    }
    format!(
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata:\n  name: default\nspec:\n  template:\n    spec:\n      requirements:\n{reqs}      nodeClassRef:\n        group: karpenter.k8s.aws\n        kind: EC2NodeClass\n        name: default\n---\napiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata:\n  name: default\nspec:\n  role: KarpenterNodeRole-bench\n  amiSelectorTerms:\n    - alias: al2023@latest\n  subnetSelectorTerms:\n    - tags:\n        karpenter.sh/discovery: bench\n  securityGroupSelectorTerms:\n    - tags:\n        karpenter.sh/discovery: bench\n"
    )
}

/// A `List` written item by item, indented as kubectl indents (4 spaces).
pub(super) struct ListWriter {
    out: BufWriter<File>,
    first: bool,
}

impl ListWriter {
    pub(super) fn item(&mut self, value: &Value) -> Result<(), String> {
        let sep: &[u8] = if self.first { b"\n" } else { b",\n" };
        self.first = false;
        self.out.write_all(sep).map_err(|e| e.to_string())?;
        let formatter = serde_json::ser::PrettyFormatter::with_indent(b"    ");
        let mut ser = serde_json::Serializer::with_formatter(&mut self.out, formatter);
        value.serialize(&mut ser).map_err(|e| e.to_string())
    }
}

pub(super) fn write_list(
    path: &Path,
    items: impl FnOnce(&mut ListWriter) -> Result<(), String>,
) -> Result<(), String> {
    let file = File::create(path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    let mut w = ListWriter {
        out: BufWriter::new(file),
        first: true,
    };
    w.out
        .write_all(b"{\n    \"apiVersion\": \"v1\",\n    \"items\": [")
        .map_err(|e| e.to_string())?;
    items(&mut w)?;
    w.out
        .write_all(b"\n    ],\n    \"kind\": \"List\",\n    \"metadata\": {\n        \"resourceVersion\": \"\"\n    }\n}\n")
        .and_then(|_| w.out.flush())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// A cluster of `nodes` Ready nodes, each running the two DaemonSets' pods and
/// [`WORKLOAD_PODS_PER_NODE`] pods of the real workload; returns the number of pods.
fn write_cluster(path: &Path, nodes: usize) -> Result<usize, String> {
    let catalog = Catalog::embedded();
    let daemonsets = real_daemonsets();
    let workload = real_pods(nodes * WORKLOAD_PODS_PER_NODE, SEED);
    let mut pods = 0;
    write_list(path, |w| {
        for ds in &daemonsets {
            w.item(&daemonset_object(&ds.name, &ds.template))?;
        }
        for n in 0..nodes {
            let it = catalog
                .get(CLUSTER_NODE_TYPES[n % CLUSTER_NODE_TYPES.len()])
                .ok_or("a cluster node type is missing from the embedded catalog")?;
            let zone = CLUSTER_ZONES[n % CLUSTER_ZONES.len()];
            let name = format!(
                "ip-10-{}-{}-{}.ec2.internal",
                n / 65_536,
                n / 256 % 256,
                n % 256
            );
            w.item(&node_object(&name, it, zone, n))?;
            for ds in &daemonsets {
                let mut p = ds.template.clone();
                p.name = format!("{}-{n:05x}", ds.name);
                p.node_name = Some(name.clone());
                w.item(&pod_object(&p, pods))?;
                pods += 1;
            }
            for p in &workload[n * WORKLOAD_PODS_PER_NODE..(n + 1) * WORKLOAD_PODS_PER_NODE] {
                let mut p = p.clone();
                p.node_name = Some(name.clone());
                w.item(&pod_object(&p, pods))?;
                pods += 1;
            }
        }
        Ok(())
    })?;
    Ok(pods)
}

fn uid(kind: u8, i: usize) -> String {
    format!("{kind:02x}5f0c3a-{:04x}-4e1b-9c2d-{i:012x}", i % 65_536)
}

fn string_map(map: &BTreeMap<String, String>) -> Value {
    Value::Object(map.iter().map(|(k, v)| (k.clone(), json!(v))).collect())
}

fn selector(s: &Option<LabelSelector>) -> Value {
    match s {
        Some(s) => json!({ "matchLabels": string_map(&s.match_labels) }),
        None => json!({}),
    }
}

fn spread(c: &TopologySpreadConstraint) -> Value {
    json!({
        "maxSkew": c.max_skew,
        "topologyKey": c.topology_key,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": selector(&c.label_selector),
    })
}

fn affinity_term(t: &PodAffinityTerm) -> Value {
    json!({ "labelSelector": selector(&t.label_selector), "topologyKey": t.topology_key })
}

fn quantity_mi(milli_bytes: i64) -> String {
    format!("{}Mi", milli_bytes / 1000 / (1 << 20))
}

/// A pod as the API server returns it: the generated pod's labels, requests, spread and
/// affinity, plus the fields every pod carries (defaults, the service account volume,
/// the default tolerations). Pending pods carry kube-scheduler's `PodScheduled=False`
/// (`Unschedulable`) mark; bound ones are Running.
pub(super) fn pod_object(p: &Pod, i: usize) -> Value {
    let mut affinity = Map::new();
    if !p.pod_affinity.is_empty() {
        affinity.insert(
            "podAffinity".into(),
            json!({"requiredDuringSchedulingIgnoredDuringExecution": p.pod_affinity.iter().map(affinity_term).collect::<Vec<_>>()}),
        );
    }
    if !p.pod_anti_affinity.is_empty() {
        affinity.insert(
            "podAntiAffinity".into(),
            json!({"requiredDuringSchedulingIgnoredDuringExecution": p.pod_anti_affinity.iter().map(affinity_term).collect::<Vec<_>>()}),
        );
    }
    let mut tolerations: Vec<Value> = p
        .tolerations
        .iter()
        .map(|_| json!({"operator": "Exists"}))
        .collect();
    for key in [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ] {
        tolerations.push(json!({"effect": "NoExecute", "key": key, "operator": "Exists", "tolerationSeconds": 300}));
    }
    let (owner_kind, owner) = match (&p.owner_daemonset, p.daemonset_owned) {
        (_, true) => (
            "DaemonSet",
            p.name
                .rsplit_once('-')
                .map_or(&*p.name, |(d, _)| d)
                .to_string(),
        ),
        _ => (
            "ReplicaSet",
            format!(
                "{}-7d9c8b6f5",
                p.labels.values().next().map_or("app", String::as_str)
            ),
        ),
    };
    let mut spec = json!({
        "containers": [{
            "image": "public.ecr.aws/docker/library/nginx:1.27",
            "imagePullPolicy": "IfNotPresent",
            "name": "app",
            "resources": {"requests": {
                "cpu": format!("{}m", p.requests.get_milli("cpu")),
                "memory": quantity_mi(p.requests.get_milli("memory")),
            }},
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File",
            "volumeMounts": [{"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "name": "kube-api-access", "readOnly": true}],
        }],
        "dnsPolicy": "ClusterFirst",
        "enableServiceLinks": true,
        "preemptionPolicy": "PreemptLowerPriority",
        "priority": 0,
        "restartPolicy": "Always",
        "schedulerName": "default-scheduler",
        "securityContext": {},
        "serviceAccount": "default",
        "serviceAccountName": "default",
        "terminationGracePeriodSeconds": 30,
        "tolerations": tolerations,
        "volumes": [{"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"items": [{"key": "ca.crt", "path": "ca.crt"}], "name": "kube-root-ca.crt"}},
            {"downwardAPI": {"items": [{"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}, "path": "namespace"}]}},
        ]}}],
    });
    if !affinity.is_empty() {
        spec["affinity"] = Value::Object(affinity);
    }
    if !p.topology_spread.is_empty() {
        spec["topologySpreadConstraints"] = p.topology_spread.iter().map(spread).collect();
    }
    let status = match &p.node_name {
        Some(node) => {
            spec["nodeName"] = json!(node);
            let conditions: Vec<Value> = ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"]
                .map(|t| json!({"lastProbeTime": null, "lastTransitionTime": "2026-11-20T08:15:02Z", "status": "True", "type": t}))
                .into();
            json!({
                "conditions": conditions,
                "containerStatuses": [{
                    "containerID": format!("containerd://{:064x}", i),
                    "image": "public.ecr.aws/docker/library/nginx:1.27",
                    "imageID": "public.ecr.aws/docker/library/nginx@sha256:5f0c3a1e4b9c2d7e8f6a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e",
                    "lastState": {}, "name": "app", "ready": true, "restartCount": 0, "started": true,
                    "state": {"running": {"startedAt": "2026-11-20T08:15:01Z"}},
                }],
                "hostIP": "10.0.0.1",
                "phase": "Running",
                "podIP": format!("10.1.{}.{}", i / 256 % 256, i % 256),
                "qosClass": "Burstable",
                "startTime": "2026-11-20T08:14:58Z",
            })
        }
        None => json!({
            "conditions": [{
                "lastProbeTime": null,
                "lastTransitionTime": "2026-11-20T08:14:58Z",
                "message": "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.",
                "reason": "Unschedulable",
                "status": "False",
                "type": "PodScheduled",
            }],
            "phase": "Pending",
            "qosClass": "Burstable",
        }),
    };
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "creationTimestamp": "2026-11-20T08:14:58Z",
            "generateName": format!("{owner}-"),
            "labels": string_map(&p.labels),
            "name": p.name,
            "namespace": p.namespace,
            "ownerReferences": [{"apiVersion": "apps/v1", "blockOwnerDeletion": true, "controller": true, "kind": owner_kind, "name": owner, "uid": uid(1, i / 10)}],
            "resourceVersion": (4_100_000 + i).to_string(),
            "uid": uid(2, i),
        },
        "spec": spec,
        "status": status,
    })
}

pub(super) fn daemonset_object(name: &str, template: &Pod) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "kube-system", "uid": uid(3, 0)},
        "spec": {
            "selector": {"matchLabels": string_map(&template.labels)},
            "template": {
                "metadata": {"labels": string_map(&template.labels)},
                "spec": {
                    "containers": [{"name": name, "image": "public.ecr.aws/eks/agent:v1", "resources": {"requests": {
                        "cpu": format!("{}m", template.requests.get_milli("cpu")),
                        "memory": quantity_mi(template.requests.get_milli("memory")),
                    }}}],
                    "tolerations": [{"operator": "Exists"}],
                },
            },
        },
        "status": {"desiredNumberScheduled": 0, "numberReady": 0},
    })
}

pub(super) fn node_object(
    name: &str,
    it: &nodewright_core::catalog::InstanceType,
    zone: &str,
    n: usize,
) -> Value {
    let mut labels = it.labels.clone();
    labels.insert(LABEL_ZONE.into(), zone.into());
    labels.insert("topology.kubernetes.io/region".into(), "us-east-1".into());
    labels.insert(LABEL_CAPACITY_TYPE.into(), "on-demand".into());
    labels.insert(LABEL_NODEPOOL.into(), "default".into());
    labels.insert(LABEL_HOSTNAME.into(), name.into());
    labels.insert("karpenter.sh/registered".into(), "true".into());
    labels.insert("karpenter.sh/initialized".into(), "true".into());
    labels.insert(
        "beta.kubernetes.io/instance-type".into(),
        labels[LABEL_INSTANCE_TYPE].clone(),
    );
    let resources = |r: &nodewright_core::resources::Resources| {
        json!({
            "cpu": format!("{}m", r.get_milli("cpu")),
            "memory": format!("{}Ki", r.get_milli("memory") / 1000 / 1024),
            "pods": (r.get_milli("pods") / 1000).to_string(),
            "ephemeral-storage": "18242267924",
        })
    };
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true"},
            "creationTimestamp": "2026-11-20T08:14:20Z",
            "labels": string_map(&labels),
            "name": name,
            "resourceVersion": (4_000_000 + n).to_string(),
            "uid": uid(4, n),
        },
        "spec": {"providerID": format!("aws:///{zone}/i-0{n:016x}")},
        "status": {
            "addresses": [{"address": name, "type": "InternalDNS"}, {"address": name, "type": "Hostname"}],
            "allocatable": resources(&it.allocatable),
            "capacity": resources(&it.capacity),
            "conditions": [
                {"lastHeartbeatTime": "2026-11-21T08:00:00Z", "lastTransitionTime": "2026-11-20T08:15:00Z", "message": "kubelet is posting ready status", "reason": "KubeletReady", "status": "True", "type": "Ready"},
                {"lastHeartbeatTime": "2026-11-21T08:00:00Z", "lastTransitionTime": "2026-11-20T08:15:00Z", "message": "kubelet has sufficient memory available", "reason": "KubeletHasSufficientMemory", "status": "False", "type": "MemoryPressure"},
            ],
            "nodeInfo": {"architecture": "amd64", "containerRuntimeVersion": "containerd://1.7.27", "kernelVersion": "6.1.134", "kubeProxyVersion": "v1.33.0", "kubeletVersion": "v1.33.0", "operatingSystem": "linux", "osImage": "Amazon Linux 2023"},
        },
    })
}

#[cfg(test)]
mod tests {
    use nodewright_core::snapshot::parse_snapshot;

    use super::*;

    #[test]
    fn the_provisioner_memory_constant_is_the_templates_default() {
        let template = include_str!("../../../template.yaml");
        let parameter = template
            .split("\n  ProvisionerMemorySize:")
            .nth(1)
            .expect("template.yaml has a ProvisionerMemorySize parameter");
        let default = parameter
            .lines()
            .find_map(|l| l.trim().strip_prefix("Default:"))
            .expect("the parameter has a Default");
        assert_eq!(
            default.trim().parse::<f64>().ok(),
            Some(PROVISIONER_MEMORY_MIB)
        );
        assert!(template.contains("MemorySize: !Ref ProvisionerMemorySize"));
    }

    #[test]
    fn written_snapshots_read_back_as_the_generated_cluster() {
        let dir =
            std::env::temp_dir().join(format!("nodewright-bench-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("pending.json");
        let pods = synthetic_pods(50, Shape::Five, SEED);
        write_list(&path, |w| {
            for (i, p) in pods.iter().enumerate() {
                w.item(&pod_object(p, i))?;
            }
            Ok(())
        })
        .unwrap();
        let read = parse_snapshot(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(read.pods.len(), 50);
        for (mine, theirs) in pods.iter().zip(&read.pods) {
            assert!(
                theirs.wants_capacity(),
                "{} is not provisionable",
                theirs.key()
            );
            assert_eq!(mine.requests, theirs.requests, "{}", mine.key());
            assert_eq!(mine.labels, theirs.labels);
            assert_eq!(mine.topology_spread, theirs.topology_spread);
            assert_eq!(mine.pod_affinity, theirs.pod_affinity);
            assert_eq!(mine.pod_anti_affinity, theirs.pod_anti_affinity);
        }
        let cluster = dir.join("cluster.json");
        let count = write_cluster(&cluster, 3).unwrap();
        let read = parse_snapshot(&std::fs::read_to_string(&cluster).unwrap()).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(count, 3 * (2 + WORKLOAD_PODS_PER_NODE));
        assert_eq!(read.pods.len(), count);
        assert_eq!(read.nodes.len(), 3);
        assert_eq!(read.daemonsets.len(), 2);
        assert!(read.nodes.iter().all(|n| n.ready));
        assert!(read.pods.iter().all(|p| !p.is_pending()));
        assert_eq!(read.pods.iter().filter(|p| p.daemonset_owned).count(), 6);
    }
}
