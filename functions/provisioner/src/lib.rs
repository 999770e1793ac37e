//! The provisioner's handler: one scheduled invocation runs provisioning ticks for
//! most of its minute (polling pending pods every `NODEWRIGHT_POLL_INTERVAL`), so a
//! pending pod is acted on within seconds rather than at the next schedule.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lambda_runtime::LambdaEvent;
use nodewright_engine::{Provisioner, RunReport};
use nodewright_lambda::metrics::{provisioner_metrics, unix_now_ms};
use nodewright_lambda::{HandlerError, heap};
use serde_json::{Value, json};
use tracing::{info, warn};

/// Time kept free before the Lambda deadline for the last tick to finish.
pub const DEADLINE_MARGIN: Duration = Duration::from_secs(10);
/// The longest an invocation keeps ticking (the schedule fires every minute).
pub const MAX_BUDGET: Duration = Duration::from_secs(55);

pub struct Handler {
    pub provisioner: Provisioner,
    pub poll_interval: Duration,
}

impl Handler {
    /// Handles one invocation. The payload (an EventBridge scheduled event, or any JSON
    /// for a manual "run now") is not needed: the cluster is the input.
    ///
    /// An invocation that could not do its work says so: a warning naming why, a
    /// `provisioner_shortfall` metric of 1, and `"outcome": "incomplete"` in the summary.
    /// It fails (an invocation error, so the function's Errors metric and alarms see
    /// it) only when no tick ran and ticks failed: nothing was done at all.
    pub async fn handle(&self, event: LambdaEvent<Value>) -> Result<Value, HandlerError> {
        let started = Instant::now();
        let heap_at_start = heap::begin_invocation();
        let budget = budget_until(event.context.deadline, SystemTime::now());
        info!(request_id = %event.context.request_id, budget_secs = budget.as_secs(), "provisioning");
        let run = self.provisioner.run_for(budget, self.poll_interval).await;
        let shortfalls = run.shortfalls();
        emit_metrics(&self.provisioner.config().cluster_name, &run, started);
        if !shortfalls.is_empty() {
            warn!(request_id = %event.context.request_id, shortfalls = ?shortfalls, ticks = run.ticks.len(),
                "the invocation could not do all its work");
        }
        if run.ticks.is_empty() && !run.failed_ticks.is_empty() {
            let nothing_done = std::io::Error::other(shortfalls.join("; "));
            return Err(HandlerError::new(
                "Provisioner.NoTickCompleted",
                &nothing_done,
            ));
        }
        let mut summary = summary(&run);
        if let Some(heap) = heap::invocation_ended(heap_at_start) {
            summary["heap"] = heap.to_json();
        }
        Ok(summary)
    }
}

/// CloudWatch metrics in the Embedded Metric Format, printed on stdout (see
/// [`nodewright_lambda::metrics::provisioner_metrics`] for what is published).
fn emit_metrics(cluster: &str, run: &RunReport, started: Instant) {
    provisioner_metrics(cluster, run, started.elapsed().as_secs_f64(), unix_now_ms()).emit();
}

/// How long to keep ticking given the invocation deadline (Unix milliseconds; 0 when
/// unknown, which gives a single tick).
pub fn budget_until(deadline_ms: u64, now: SystemTime) -> Duration {
    let now_ms = now
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    Duration::from_millis(deadline_ms.saturating_sub(now_ms))
        .saturating_sub(DEADLINE_MARGIN)
        .min(MAX_BUDGET)
}

/// What the invocation did, returned to Lambda (and so visible in the console).
pub fn summary(run: &RunReport) -> Value {
    let reports = &run.ticks;
    let launched: Vec<Value> = reports
        .iter()
        .flat_map(|r| &r.launched)
        .map(|l| json!({"nodeClaim": l.name, "instanceId": l.instance_id, "instanceType": l.instance_type, "zone": l.zone}))
        .collect();
    let shortfalls = run.shortfalls();
    json!({
        "outcome": if shortfalls.is_empty() { "ok" } else { "incomplete" },
        "shortfalls": shortfalls,
        "ticks": reports.len(),
        "leaseBusy": run.lease_busy.len(),
        "failedTicks": run.failed_ticks,
        "failedPolls": run.failed_polls,
        "launched": launched,
        "registered": reports.iter().flat_map(|r| &r.lifecycle.registered).collect::<Vec<_>>(),
        "initialized": reports.iter().flat_map(|r| &r.lifecycle.initialized).collect::<Vec<_>>(),
        "terminated": reports.iter().flat_map(|r| &r.lifecycle.terminated).collect::<Vec<_>>(),
        "failed": reports.iter().flat_map(|r| &r.failed).map(|(c, why)| json!({"nodeClaim": c, "reason": why})).collect::<Vec<_>>(),
        "unschedulable": reports.last().map(|r| r.unschedulable.len()).unwrap_or(0),
        "invalid": reports.last().map(|r| r.invalid.clone()).unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_leaves_a_margin_before_the_deadline_and_caps_at_the_schedule() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000);
        assert_eq!(budget_until(1_000_000 + 70_000, now), MAX_BUDGET);
        assert_eq!(
            budget_until(1_000_000 + 30_000, now),
            Duration::from_secs(20)
        );
        assert_eq!(budget_until(1_000_000 + 5_000, now), Duration::ZERO);
        assert_eq!(
            budget_until(0, now),
            Duration::ZERO,
            "unknown deadline: one tick"
        );
    }
}
