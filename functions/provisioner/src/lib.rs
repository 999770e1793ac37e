//! The provisioner's handler: one scheduled invocation runs provisioning ticks for
//! most of its minute (polling pending pods every `NODEWRIGHT_POLL_INTERVAL`), so a
//! pending pod is acted on within seconds rather than at the next schedule.

#[cfg(feature = "test-support")]
pub mod testing;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lambda_runtime::LambdaEvent;
use nodewright_engine::{Provisioner, TickReport};
use nodewright_lambda::HandlerError;
use serde_json::{Value, json};
use tracing::info;

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
    pub async fn handle(&self, event: LambdaEvent<Value>) -> Result<Value, HandlerError> {
        let budget = budget_until(event.context.deadline, SystemTime::now());
        info!(request_id = %event.context.request_id, budget_secs = budget.as_secs(), "provisioning");
        let reports = self.provisioner.run_for(budget, self.poll_interval).await?;
        Ok(summary(&reports))
    }
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
pub fn summary(reports: &[TickReport]) -> Value {
    let launched: Vec<Value> = reports
        .iter()
        .flat_map(|r| &r.launched)
        .map(|l| json!({"nodeClaim": l.name, "instanceId": l.instance_id, "instanceType": l.instance_type, "zone": l.zone}))
        .collect();
    json!({
        "ticks": reports.len(),
        "skipped": reports.iter().filter_map(|r| r.skipped.clone()).collect::<Vec<_>>(),
        "launched": launched,
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
