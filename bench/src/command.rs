//! `nodewright-bench command`: the figures a user sees. Each case is written to files
//! as a user would have them (a snapshot as `kubectl get ... -o json` prints it,
//! NodePools as YAML, a catalog file), then `nodewright plan --output json` (the release
//! build, or `--binary`) runs on them as a child process with its output going to a
//! file. Reported per case: wall time from spawn to exit (best of `--runs`), the
//! child's peak RSS (`ru_maxrss` from `wait4`, the highest of the runs), and the size
//! of the JSON it wrote.
//!
//! Cases:
//! - Karpenter's benchmark shape (five groups, see [`Shape::Five`]) at 10,000 and
//!   20,000 pending pods (`--pending`), marked Unschedulable by kube-scheduler, against
//!   the 400 synthetic types given as `--catalog`;
//! - a cluster of 1,000 nodes running 25,000 pods, and one of 5,000 nodes running
//!   125,000 (`--nodes`; 2 DaemonSet pods and 23 workload pods per node, nothing
//!   pending), on the embedded catalog: what the provisioner holds on every tick of a
//!   cluster that size.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use nodewright_core::well_known::{LABEL_ARCH, LABEL_CAPACITY_TYPE, LABEL_OS};
use serde_json::{Value, json};

use crate::child::{parse_run_child, under_run_child};
use crate::kube_json::{
    daemonset_object, node_object, nodepools_yaml, pod_object, write_json, write_list, write_text,
};
use crate::report::{Report, thousands};
use crate::speed::TARGET_PODS_PER_SEC;
use crate::workload::{
    SEED, SYNTHETIC_TYPES, SYNTHETIC_ZONES, Shape, ZONES, real_cluster, real_daemonsets,
    synthetic_catalog_json, synthetic_pods,
};

/// Peak RSS targets of `plan` on Karpenter's shape, in MB (10^6 bytes).
pub const TARGET_RSS_10K_MB: f64 = 128.0;
pub const TARGET_RSS_20K_MB: f64 = 256.0;
/// The provisioner function's default memory in template.yaml (`ProvisionerMemorySize`),
/// in MB as Lambda counts them (MiB): a cluster of 1,000 nodes must plan well inside it
/// (at most half, leaving room for the listed API objects, the SDK clients and the
/// engine's state). A test keeps it equal to the template's default.
pub const PROVISIONER_MEMORY_MIB: f64 = 256.0;

pub const DEFAULT_PENDING: [usize; 2] = [10_000, 20_000];
pub const DEFAULT_NODES: [usize; 2] = [1_000, 5_000];
/// Workload pods per node in the cluster cases (with the 2 DaemonSet pods, 25).
const WORKLOAD_PODS_PER_NODE: usize = 23;

/// What to measure: the `nodewright` binary, the sizes, where the files go.
pub struct Options<'a> {
    pub binary: &'a Path,
    pub runs: usize,
    /// Write the files here and keep them; else a temporary directory, removed after.
    pub keep_in: Option<&'a Path>,
    /// Pending pods of each Karpenter-shape case.
    pub pending: &'a [usize],
    /// Nodes of each cluster case.
    pub nodes: &'a [usize],
}

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

pub fn suite(out: &mut Report, options: &Options) {
    let Options {
        binary,
        runs,
        keep_in,
        ..
    } = *options;
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
        let idle = under_run_child(binary)?
            .arg("--version")
            .stdout(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", binary.display()))?;
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
        for case in cases(&dir, options)? {
            let snapshot_mb = file_mb(&case.snapshot);
            let m = measure(&case, &dir, binary, runs)?;
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

fn cases(dir: &Path, options: &Options) -> Result<Vec<Case>, String> {
    let mut cases = Vec::new();
    let synthetic_pools = dir.join("synthetic-nodepools.yaml");
    write_text(
        &synthetic_pools,
        &nodepools_yaml(&[(LABEL_CAPACITY_TYPE, "In", &["spot", "on-demand"])]),
    )?;
    let catalog = dir.join("synthetic-catalog.json");
    write_json(&catalog, &synthetic_catalog_json(SYNTHETIC_TYPES))?;
    for &pending in options.pending {
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
    for &nodes in options.nodes {
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
            zones: ZONES.join(","),
        });
    }
    Ok(cases)
}

/// Runs `plan` on a case `runs` times, each under `run-child` (see [`crate::child`]).
fn measure(case: &Case, dir: &Path, binary: &Path, runs: usize) -> Result<Measured, String> {
    let output = dir.join("plan.json");
    let mut best_wall = Duration::MAX;
    let mut peak_kib = 0;
    for _ in 0..runs.max(1) {
        let mut command = under_run_child(binary)?;
        command
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
            .map_err(|e| format!("cannot run {}: {e}", binary.display()))?;
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

/// A steady cluster of `nodes` nodes, each running the two DaemonSets' pods and
/// [`WORKLOAD_PODS_PER_NODE`] pods of the real workload; returns the number of pods.
fn write_cluster(path: &Path, nodes: usize) -> Result<usize, String> {
    let cluster = real_cluster(nodes, WORKLOAD_PODS_PER_NODE)?;
    write_list(path, |w| {
        for ds in &real_daemonsets() {
            w.item(&daemonset_object(&ds.name, &ds.template))?;
        }
        for (n, node) in cluster.nodes.iter().enumerate() {
            w.item(&node_object(node, n))?;
        }
        for (i, p) in cluster.pods.iter().enumerate() {
            w.item(&pod_object(p, i))?;
        }
        Ok(())
    })?;
    Ok(cluster.pods.len())
}

#[cfg(test)]
mod tests {
    use nodewright_core::snapshot::parse_snapshot;

    use super::*;

    #[test]
    fn the_provisioner_memory_constant_is_the_templates_default() {
        let template = include_str!("../../template.yaml");
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
