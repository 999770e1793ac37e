//! `nodewright-bench disrupt`: `nodewright disrupt --output json` (the release build,
//! or `--binary`) on fragmented clusters, as a child process (wall, CPU time and peak RSS, as a user sees them, with the
//! command's own `--timings` of each step), and the consolidation quality: the
//! cluster's price once every command has run, against the cheapest fractional fleet
//! for the pods that remain.
//!
//! The cluster: m5.2xlarge nodes each running the two DaemonSets' pods and 30 small
//! pods (20–40% used, what a scale-in leaves behind), all on-demand, consolidateAfter
//! elapsed, budgets at 100%: nothing blocks, so every node is a candidate.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use nodewright_core::catalog::Catalog;
use nodewright_core::cluster::Pod;
use nodewright_sim::rng::Rng;
use nodewright_sim::workload::bound_cluster;
use serde_json::Value;

use crate::child::{children_cpu, parse_run_child, under_run_child};
use crate::cost::cost_lower_bound;
use crate::kube_json::{
    daemonset_object, node_object, nodepools_yaml, pod_object, write_list, write_text,
};
use crate::report::{Report, thousands};
use crate::workload::{ZONES, labels, pending_pod, real_daemonsets, real_pool};

/// Decision time at 1,000 nodes / 30,000 pods, all candidates evaluated.
pub const TARGET_DECISION_SECS: f64 = 10.0;
/// Price after all commands ÷ the fractional lower bound, nothing blocking.
pub const TARGET_QUALITY: f64 = 1.05;
/// Peak RSS at 1,000 nodes / 30,000 pods.
pub const TARGET_RSS_MB: f64 = 256.0;
/// CPU time (user + system) of the whole command at 5,000 nodes / 150,000 pods.
pub const TARGET_CPU_SECS_5000: f64 = 10.0;

const PODS_PER_NODE: usize = 30;
const NODE_TYPE: &str = "m5.2xlarge";
const NOW: &str = "2026-11-23T10:00:00Z";
/// `--nodes` takes any sizes. 10,000 (300,000 pods) is left out of the default run: its
/// snapshot takes 1.9 GB of disk, and the run about twice the time of all three others.
pub const DEFAULT_SIZES: [usize; 3] = [100, 1_000, 5_000];

/// `keep_in`: write the files there and keep them (the snapshot and the decision of each
/// size, as `fragmented-N.json` and `decision-N.json`); else a temporary directory.
pub fn suite(out: &mut Report, binary: &Path, sizes: &[usize], keep_in: Option<&Path>) {
    out.header(
        "disrupt: `nodewright disrupt --output json` on a fragmented cluster, as a child process",
        &format!(
            "≤ {TARGET_DECISION_SECS:.0} s and ≤ {TARGET_RSS_MB:.0} MB at 1,000 nodes / 30,000 pods, every candidate evaluated; ≤ {TARGET_CPU_SECS_5000:.0} CPU-s at 5,000 nodes; price after ≤ {TARGET_QUALITY}× the lower bound"
        ),
    );
    out.line("bound: cheapest fractional fleet of allowed types for the remaining pods' requests (DaemonSets not in it)");
    out.line(
        "cpu s: user + system time of the command (and of the small run-child process around it)",
    );
    out.line(&format!(
        "{:<10} {:>8} {:>9} {:>8} {:>8} {:>10} {:>12} {:>10} {:>8} {:>36}",
        "nodes",
        "pods",
        "wall s",
        "cpu s",
        "peak MB",
        "$/h before",
        "$/h after",
        "bound $/h",
        "÷bound",
        "nodes removed by method"
    ));
    let dir = keep_in.map(Path::to_path_buf).unwrap_or_else(|| {
        std::env::temp_dir().join(format!("nodewright-bench-disrupt-{}", std::process::id()))
    });
    let result = (|| -> Result<(), String> {
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let pools = dir.join("nodepools.yaml");
        write_text(&pools, &fragmented_pools())?;
        for &nodes in sizes {
            let snapshot = dir.join(format!("fragmented-{nodes}.json"));
            let pods = write_fragmented(&snapshot, nodes)?;
            let output = dir.join(format!("decision-{nodes}.json"));
            let Measured {
                wall,
                cpu,
                kib,
                steps,
            } = measure(binary, &pools, &snapshot, &output)?;
            let text = std::fs::read(&output).map_err(|e| e.to_string())?;
            let decision: Value = serde_json::from_slice(&text)
                .map_err(|e| format!("disrupt printed no JSON: {e}"))?;
            let before = decision["pricePerHour"]["before"].as_f64().unwrap_or(0.0);
            let after = decision["pricePerHour"]["after"].as_f64().unwrap_or(0.0);
            let bound = cost_lower_bound(&pods, &real_pool(), Catalog::embedded());
            let ratio = bound.map(|b| after / b);
            let mut by_method: std::collections::BTreeMap<String, usize> = Default::default();
            for c in decision["commands"].as_array().into_iter().flatten() {
                *by_method
                    .entry(c["method"].as_str().unwrap_or("?").to_string())
                    .or_default() += c["nodes"].as_array().map_or(0, Vec::len);
            }
            let methods = by_method
                .iter()
                .map(|(m, n)| format!("{m} {n}"))
                .collect::<Vec<_>>()
                .join(", ");
            let secs = wall.as_secs_f64();
            let cpu_secs = cpu.as_secs_f64();
            let rss = kib as f64 * 1024.0 / 1e6;
            out.line(&format!(
                "{:<10} {:>8} {:>9.2} {:>8.2} {:>8.1} {:>10.2} {:>12.2} {:>10} {:>8} {:>36}",
                thousands(nodes as f64),
                thousands((nodes * PODS_PER_NODE) as f64),
                secs,
                cpu_secs,
                rss,
                before,
                after,
                bound.map_or("-".into(), |b| format!("{b:.2}")),
                ratio.map_or("-".into(), |r| format!("{r:.3}")),
                methods,
            ));
            for step in steps.lines() {
                out.line(&format!("    {step}"));
            }
            out.record(serde_json::json!({
                "suite": "disrupt", "nodes": nodes, "pods": nodes * PODS_PER_NODE, "wall_s": secs,
                "cpu_s": cpu_secs, "peak_rss_mb": rss, "before_per_hour": before, "after_per_hour": after,
                "bound_per_hour": bound, "removed_by_method": by_method,
            }));
            if nodes == 1_000 {
                out.target(
                    "disrupt",
                    "decision ≤ 10 s at 1,000 nodes / 30,000 pods",
                    secs,
                    secs <= TARGET_DECISION_SECS,
                    format!("{secs:.2} s"),
                );
                out.target(
                    "disrupt",
                    "peak RSS ≤ 256 MB at 1,000 nodes / 30,000 pods",
                    rss,
                    rss <= TARGET_RSS_MB,
                    format!("{rss:.1} MB"),
                );
            }
            if nodes == 5_000 {
                out.target(
                    "disrupt",
                    "whole command ≤ 10 CPU-s at 5,000 nodes / 150,000 pods",
                    cpu_secs,
                    cpu_secs <= TARGET_CPU_SECS_5000,
                    format!("{cpu_secs:.2} s"),
                );
            }
            if let Some(r) = ratio {
                out.target(
                    "disrupt",
                    &format!(
                        "price after ≤ {TARGET_QUALITY}× bound at {} nodes",
                        thousands(nodes as f64)
                    ),
                    r,
                    r <= TARGET_QUALITY,
                    format!("{r:.3}×"),
                );
            }
        }
        Ok(())
    })();
    if keep_in.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    if let Err(e) = result {
        out.line(&format!("  !! disrupt suite failed: {e}"));
        out.failures.push(format!("disrupt: {e}"));
    }
}

fn fragmented_pools() -> String {
    nodepools_yaml(&[
        ("kubernetes.io/arch", "In", &["amd64"]),
        ("kubernetes.io/os", "In", &["linux"]),
        ("karpenter.sh/capacity-type", "In", &["on-demand"]),
        ("karpenter.k8s.aws/instance-category", "In", &["c", "m", "r"]),
        ("karpenter.k8s.aws/instance-generation", "Gt", &["4"]),
    ])
    .replacen(
        "  template:\n",
        "  disruption:\n    consolidationPolicy: WhenEmptyOrUnderutilized\n    consolidateAfter: 30s\n    budgets:\n      - nodes: \"100%\"\n  template:\n",
        1,
    )
}

/// Writes the cluster: [`PODS_PER_NODE`] small pods of apps of 10 replicas on each
/// node, spread round robin; returns its non-DaemonSet pods (what the bound covers).
fn write_fragmented(path: &Path, nodes: usize) -> Result<Vec<Pod>, String> {
    let it = Catalog::embedded()
        .get(NODE_TYPE)
        .ok_or("m5.2xlarge is not in the embedded catalog")?;
    let daemonsets = real_daemonsets();
    let mut rng = Rng::new(7);
    let workload = (0..nodes * PODS_PER_NODE)
        .map(|i| {
            let app = format!("svc-{}", i / 10);
            pending_pod(
                format!("{app}-{i}"),
                rng.one_of([50, 75, 100, 125]),
                rng.one_of([128, 256, 384]),
                labels("app", &app),
            )
        })
        .collect();
    let cluster = bound_cluster(workload, &daemonsets, nodes, &[it], &ZONES, "default", 0.0);
    write_list(path, |w| {
        for ds in &daemonsets {
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
    Ok(cluster
        .pods
        .into_iter()
        .filter(|p| !p.daemonset_owned)
        .collect())
}

struct Measured {
    wall: Duration,
    /// User + system time of the command (and of `run-child`, a few milliseconds).
    cpu: Duration,
    kib: u64,
    /// The command's `--timings` table.
    steps: String,
}

fn measure(
    binary: &Path,
    pools: &Path,
    snapshot: &Path,
    output: &Path,
) -> Result<Measured, String> {
    let stdout = std::fs::File::create(output).map_err(|e| e.to_string())?;
    // Children's CPU time: that of `run-child` and of the command it waited for, once
    // this process has waited for `run-child` (nothing else runs meanwhile).
    let cpu_before = children_cpu();
    let result = under_run_child(binary)?
        .arg("disrupt")
        .arg("--nodepools")
        .arg(pools)
        .arg("--snapshot")
        .arg(snapshot)
        .args([
            "--zones",
            &ZONES.join(","),
            "--now",
            NOW,
            "--output",
            "json",
            "--timings",
        ])
        .stdout(Stdio::from(stdout))
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", binary.display()))?;
    let cpu = children_cpu().saturating_sub(cpu_before);
    let stderr = String::from_utf8_lossy(&result.stderr);
    if !result.status.success() {
        return Err(format!("disrupt failed: {}", stderr.trim()));
    }
    let (wall, kib) = parse_run_child(&stderr)
        .ok_or_else(|| format!("run-child printed no figures: {stderr}"))?;
    let steps = stderr
        .lines()
        .filter(|l| !l.starts_with("run-child:"))
        .collect::<Vec<_>>()
        .join("\n");
    Ok(Measured {
        wall,
        cpu,
        kib,
        steps,
    })
}
