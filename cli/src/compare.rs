//! `simulate --cluster FILE --nodepools A.yaml --compare B.yaml`: the same start and
//! the same day under two configurations, side by side, and what each does to the
//! cluster as it stands in its first minutes.

use std::fmt::Write as _;

use nodewright_sim::Report;
use nodewright_sim::report::clock_time;

use crate::output::dollars;
use crate::table::columns;

/// How long "the start" is: the rollout a configuration begins with.
pub(crate) const START_WINDOW_SECS: i64 = 30 * 60;

/// Hours in a month, as AWS bills (and `plan` prints).
const HOURS_PER_MONTH: f64 = 730.0;

/// The run's cost scaled to a day and a month.
fn per_day(report: &Report) -> f64 {
    let hours = report.summary.duration_seconds as f64 / 3600.0;
    if hours <= 0.0 {
        return 0.0;
    }
    report.summary.cost / hours * 24.0
}

/// Nodes billed at the first instant: those running when the run began.
fn nodes_at_start(report: &Report) -> usize {
    report.samples.first().map_or(0, |s| s.nodes)
}

/// The side-by-side table of `runs` (each named), then each run's start.
pub(crate) fn render(runs: &[(&str, &Report)]) -> String {
    let mut headers = vec![""];
    headers.extend(runs.iter().map(|(name, _)| *name));
    let right: Vec<usize> = (1..=runs.len()).collect();
    let row = |what: &str, value: &dyn Fn(&Report) -> String| {
        let mut cells = vec![what.to_string()];
        cells.extend(runs.iter().map(|(_, r)| value(r)));
        cells
    };
    let s = |r: &Report| r.summary.clone();
    let rows = vec![
        row("$ a day", &|r| format!("${}", dollars(per_day(r)))),
        row("$ a month", &|r| {
            format!("${:.2}", per_day(r) / 24.0 * HOURS_PER_MONTH)
        }),
        row("node-hours", &|r| format!("{:.1}", s(r).node_hours)),
        row("nodes at start / peak / end", &|r| {
            format!(
                "{} / {} / {}",
                nodes_at_start(r),
                s(r).peak_nodes,
                s(r).nodes_at_end
            )
        }),
        row("launches", &|r| s(r).instances_launched.to_string()),
        row("nodes consolidated away", &|r| {
            s(r).nodes_disrupted.to_string()
        }),
        row("interruptions handled", &|r| s(r).interruptions.to_string()),
        row("pods evicted: voluntary / interruption", &|r| {
            format!(
                "{} / {}",
                s(r).pods_evicted,
                s(r).pods_evicted_by_interruption
            )
        }),
        row("drains held up by a PDB", &|r| {
            s(r).drains_blocked_by_budgets.to_string()
        }),
        row("pod pending p50 / p95 / max (s)", &|r| {
            let p = &s(r).pending_seconds;
            format!("{:.0} / {:.0} / {:.0}", p.p50, p.p95, p.max)
        }),
        row("pods pending at the end", &|r| {
            s(r).pods_pending_at_end.to_string()
        }),
        row("PDB violations (must be 0)", &|r| {
            s(r).pdb_violations.to_string()
        }),
        row("pods lost (must be 0)", &|r| s(r).pods_lost.to_string()),
        row("invariants", &|r| {
            if r.problems.is_empty() {
                "held".to_string()
            } else {
                format!("{} broken", r.problems.len())
            }
        }),
    ];
    let mut out = columns(&headers, &right, &rows);
    for (name, report) in runs {
        let _ = write!(out, "\n{}", start_of(name, report));
    }
    out
}

/// What `report`'s configuration did to the nodes it started with, in its first
/// [`START_WINDOW_SECS`]: each node it began to take away, why, and when it went.
fn start_of(name: &str, report: &Report) -> String {
    let started_with: Vec<&nodewright_sim::NodeRecord> =
        report.nodes.iter().filter(|n| n.launched < 0).collect();
    let mut out = format!(
        "{name}: the first {} minutes, on the {} node(s) it started with\n",
        START_WINDOW_SECS / 60,
        started_with.len()
    );
    let mut rows = Vec::new();
    for drain in report.drains.iter().filter(|d| d.since < START_WINDOW_SECS) {
        let Some(node) = started_with.iter().find(|n| n.name == drain.claim) else {
            continue;
        };
        rows.push(vec![
            node.node.clone().unwrap_or_else(|| node.instance.clone()),
            format!("{} {}", node.instance_type, node.capacity_type.as_str()),
            format!("{:?}", drain.cause),
            clock_time(drain.since),
            node.ended.map_or_else(|| "running".to_string(), clock_time),
        ]);
    }
    if rows.is_empty() {
        out += "  none of them disrupted\n";
        return out;
    }
    let table = columns(&["node", "type", "why", "from", "gone at"], &[], &rows);
    for line in table.lines() {
        let _ = writeln!(out, "  {line}");
    }
    out
}
