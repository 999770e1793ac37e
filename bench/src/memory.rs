//! `nodewright-bench memory`: the peak RSS of a fresh process that plans the real
//! workload once (this executable re-invoked as `nodewright-bench memory-child`, which
//! runs on the same allocator as `nodewright`).

use std::collections::HashMap;

use nodewright_core::catalog::Catalog;
use nodewright_core::pricing::Pricing;
use nodewright_core::provisioning::{ProvisioningInput, plan_provisioning};
use serde_json::json;

use crate::report::{Report, thousands};
use crate::workload::{real_pool, real_snapshot};

/// Peak RSS of a process planning 10,000 real-workload pods, in MB (10^6 bytes).
pub const TARGET_PEAK_RSS_MB: f64 = 128.0;
pub const DEFAULT_PODS: usize = 10_000;

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
pub fn child(pods: usize) -> Result<(), String> {
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

pub fn suite(out: &mut Report, pods: usize) {
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
            .args(["memory-child", "--pods", &pods.to_string()])
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
