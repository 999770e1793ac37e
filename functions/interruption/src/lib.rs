//! The interruption function's handler: one SQS batch of EventBridge events (Spot
//! warnings, rebalance recommendations, state changes, AWS Health scheduled changes).
//!
//! Each record is read (`core::interruption::parse_event`), classified
//! (`action_for`), turned into an [`InterruptionInput`] ([`input_for`]) and handed to
//! the engine (`handle_interruption`), every record in its own span and all records of
//! the batch concurrently (the engine keeps two events for one instance apart).
//!
//! ## Acknowledged or retried
//! Only a failure that a retry can fix is reported in `batchItemFailures` (SQS then
//! redelivers that message alone; after the queue's maxReceiveCount it goes to the
//! DLQ). Everything else is acknowledged with a logged reason:
//! - unreadable (not JSON, wrong types, a bad instance id): no retry can fix it;
//! - ignored or needing no action (other event types, `rebalance: ignore`, instance
//!   `running`...), not ours, a duplicate delivery;
//! - an engine error of a non-retryable kind (Unauthorized, Invalid, NotFound, a
//!   refused transition...): logged at error. A redelivery would redo the same work
//!   and fail the same way, and by the time someone redrives a DLQ copy the 2-minute
//!   Spot notice is long over; the error log is where the alarm belongs.
//!
//! After the batch, if any message evicted or deleted pods, the provisioner is woken
//! once ([`ProvisionerTrigger::run_now`], best effort).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use lambda_runtime::LambdaEvent;
use tracing::{Instrument, error, info, info_span, warn};

use nodewright_aws::AwsContext;
use nodewright_core::interruption::{EventKind, RebalanceAction, action_for, parse_event};
use nodewright_core::nodeclaim::{ClaimState, DisruptionCause};
use nodewright_engine::ports::BoxError;
use nodewright_engine::{InstanceAction, InterruptionConfig, InterruptionOutcome, Ports};
use nodewright_lambda::HandlerError;
use nodewright_lambda::metrics::{Metrics, Unit, disrupted, unix_now_ms};

/// The event-to-input mapping lives in the engine, where the simulator uses it too.
pub use nodewright_engine::interrupt::input_for;

pub struct Handler {
    /// The EKS cluster's name (`NODEWRIGHT_CLUSTER_NAME`), on every metric.
    pub cluster_name: String,
    pub ports: Ports,
    pub config: InterruptionConfig,
    pub rebalance: RebalanceAction,
    pub trigger: Arc<dyn ProvisionerTrigger>,
    /// `NODEWRIGHT_DRY_RUN`: read and decide, log what would be done, touch nothing
    /// (no taint, eviction or termination), as the stack's DryRun promises.
    pub dry_run: bool,
}

/// Wakes the provisioner now, so evicted pods do not wait for its next minute.
#[async_trait]
pub trait ProvisionerTrigger: Send + Sync {
    async fn run_now(&self) -> Result<(), BoxError>;
}

/// An asynchronous Invoke of the provisioner function (`NODEWRIGHT_PROVISIONER_FUNCTION`).
pub struct LambdaInvokeTrigger {
    aws: AwsContext,
    function: String,
}

impl LambdaInvokeTrigger {
    pub fn new(aws: AwsContext, function: String) -> Self {
        LambdaInvokeTrigger { aws, function }
    }
}

#[async_trait]
impl ProvisionerTrigger for LambdaInvokeTrigger {
    async fn run_now(&self) -> Result<(), BoxError> {
        nodewright_aws::invoke_async(&self.aws, &self.function).await?;
        info!(function = %self.function, "provisioner invoked");
        Ok(())
    }
}

/// No provisioner function configured: the provisioner's schedule picks the pods up.
pub struct NoTrigger;

#[async_trait]
impl ProvisionerTrigger for NoTrigger {
    async fn run_now(&self) -> Result<(), BoxError> {
        info!(
            "pods are pending; NODEWRIGHT_PROVISIONER_FUNCTION is not set, the provisioner's schedule will run"
        );
        Ok(())
    }
}

/// What became of one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Disposition {
    /// Unreadable: acknowledged.
    Malformed,
    /// Read, but nothing to do (ignored kind, `Action::None`): acknowledged.
    Ignored,
    /// The event id was handled before: acknowledged.
    Duplicate,
    /// Handed to the engine, which finished: acknowledged.
    Handled,
    /// Dry run: what would be done was logged; acknowledged, nothing touched.
    DryRun,
    /// A retryable engine error: reported in `batchItemFailures`.
    Retry,
    /// A non-retryable engine error: acknowledged, logged at error.
    Failed,
}

impl Disposition {
    pub fn as_str(self) -> &'static str {
        match self {
            Disposition::Malformed => "malformed",
            Disposition::Ignored => "ignored",
            Disposition::Duplicate => "duplicate",
            Disposition::Handled => "handled",
            Disposition::DryRun => "dry-run",
            Disposition::Retry => "retry",
            Disposition::Failed => "failed",
        }
    }
}

/// One record's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordResult {
    /// The event's kind, when it could be read.
    pub kind: Option<EventKind>,
    /// The cause the event was given (tells a stop from a termination).
    pub cause: Option<DisruptionCause>,
    pub disposition: Disposition,
    pub provisioner_needed: bool,
    /// NodePools of the claims this message put in Disrupting.
    pub disrupted: Vec<String>,
    /// NodePools of the claims this message saw terminated.
    pub terminated: Vec<String>,
}

impl RecordResult {
    fn new(kind: Option<EventKind>, disposition: Disposition) -> Self {
        RecordResult {
            kind,
            cause: None,
            disposition,
            provisioner_needed: false,
            disrupted: Vec::new(),
            terminated: Vec::new(),
        }
    }

    /// Karpenter's `message_type` for the record: `spot_interrupted`,
    /// `rebalance_recommendation`, `scheduled_change`, `instance_stopped`,
    /// `instance_terminated`, `state_change` (a state needing no action),
    /// `capacity_reservation_interrupted`, `no_op`, or `unreadable`.
    pub fn message_type(&self) -> &'static str {
        match (self.kind, self.cause) {
            (None, _) => "unreadable",
            (Some(EventKind::SpotInterruption), _) => "spot_interrupted",
            (Some(EventKind::RebalanceRecommendation), _) => "rebalance_recommendation",
            (Some(EventKind::ScheduledChange), _) => "scheduled_change",
            (Some(EventKind::StateChange), Some(DisruptionCause::InstanceStopped)) => {
                "instance_stopped"
            }
            (Some(EventKind::StateChange), Some(DisruptionCause::InstanceTerminated)) => {
                "instance_terminated"
            }
            (Some(EventKind::StateChange), _) => "state_change",
            (Some(EventKind::CapacityReservationInterruption), _) => {
                "capacity_reservation_interrupted"
            }
            (Some(EventKind::Ignored), _) => "no_op",
        }
    }
}

/// The batch's metrics: `interruption_received_messages_total` by `message_type` and
/// `action` (what became of the message: handled, duplicate, ignored, retry...),
/// `nodeclaims_disrupted_total` and `nodeclaims_terminated_total` by nodepool, and the
/// invocation's duration.
pub fn batch_metrics(
    cluster: &str,
    results: &[RecordResult],
    duration_secs: f64,
    timestamp_ms: u64,
) -> Metrics {
    let mut m = Metrics::new(cluster, timestamp_ms);
    m.function_gauge(
        "interruption",
        "invocation_duration_seconds",
        Unit::Seconds,
        duration_secs,
    );
    for r in results {
        m.count(
            "interruption_received_messages_total",
            &[
                ("message_type", r.message_type()),
                ("action", r.disposition.as_str()),
            ],
            1.0,
        );
        if let Some(cause) = r.cause {
            for pool in &r.disrupted {
                disrupted(&mut m, pool, cause);
            }
        }
        for pool in &r.terminated {
            m.count("nodeclaims_terminated_total", &[("nodepool", pool)], 1.0);
        }
    }
    m
}

impl Handler {
    /// Handles one SQS batch; the response names the messages SQS must deliver again.
    pub async fn handle(
        &self,
        event: LambdaEvent<SqsEvent>,
    ) -> Result<SqsBatchResponse, HandlerError> {
        let started = Instant::now();
        let records = event.payload.records;
        let until = work_until(event.context.deadline, self.ports.clock.now());
        // A second copy of one event in the same batch (SQS delivers at least once) is
        // acknowledged as a duplicate: the first copy does the work.
        let mut seen = std::collections::HashSet::new();
        let results = futures_util::future::join_all(records.iter().map(|r| {
            let span = info_span!(
                "record",
                message_id = r.message_id.as_deref().unwrap_or(""),
                event_id = tracing::field::Empty
            );
            let first = event_id_of(r).is_none_or(|id| seen.insert(id));
            async move {
                if first {
                    self.record(r, until).await
                } else {
                    info!("a second copy of an event in this batch; acknowledged");
                    RecordResult::new(None, Disposition::Duplicate)
                }
            }
            .instrument(span)
        }))
        .await;

        let mut response = SqsBatchResponse::default();
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for (record, result) in records.iter().zip(&results) {
            if result.disposition == Disposition::Retry {
                response.add_failure(record.message_id.clone().unwrap_or_default());
            }
            let kind = result.kind.map(EventKind::as_str).unwrap_or("unreadable");
            *counts
                .entry(format!("{kind}.{}", result.disposition.as_str()))
                .or_default() += 1;
        }
        batch_metrics(
            &self.cluster_name,
            &results,
            started.elapsed().as_secs_f64(),
            unix_now_ms(),
        )
        .emit();
        if results.iter().any(|r| r.provisioner_needed)
            && let Err(e) = self.trigger.run_now().await
        {
            warn!(error = %e, "could not wake the provisioner; its schedule will pick the pods up");
        }
        info!(
            request_id = %event.context.request_id,
            records = records.len(),
            retried = response.batch_item_failures.len(),
            counts = ?counts,
            "batch done"
        );
        Ok(response)
    }

    /// One record, in its span; its drains are kept going until `until`.
    async fn record(&self, record: &SqsMessage, until: i64) -> RecordResult {
        let body = record.body.as_deref().unwrap_or("");
        let event = match parse_event(body) {
            Ok(event) => event,
            Err(e) => {
                warn!(reason = %e, field = e.field().unwrap_or(""), "unreadable event acknowledged (a retry cannot fix it)");
                return RecordResult::new(None, Disposition::Malformed);
            }
        };
        tracing::Span::current().record("event_id", event.id.as_str());
        let kind = Some(event.kind);
        let action = action_for(&event, self.rebalance);
        let Some(input) = input_for(&event, &action) else {
            info!(kind = %event.kind, reason = action.reason().unwrap_or("no action"), "acknowledged without action");
            return RecordResult::new(kind, Disposition::Ignored);
        };
        let (mode, cause) = (input.mode, input.cause);
        if self.dry_run {
            info!(kind = %event.kind, instances = ?input.instance_ids, ?mode, ?cause, deadline = ?input.deadline,
                "dry run: would handle this interruption; nothing touched");
            return RecordResult {
                cause: Some(cause),
                ..RecordResult::new(kind, Disposition::DryRun)
            };
        }
        let result = |disposition| RecordResult {
            cause: Some(cause),
            ..RecordResult::new(kind, disposition)
        };
        match nodewright_engine::handle_interruption_until(&self.ports, &self.config, input, until)
            .await
        {
            Ok(InterruptionOutcome::Duplicate) => result(Disposition::Duplicate),
            Ok(outcome) => {
                for o in outcome.instances() {
                    info!(instance = %o.instance_id, claim = o.claim.as_deref().unwrap_or(""), action = ?o.action,
                        evicted = o.evicted.len(), deleted = o.deleted.len(), blocked = o.blocked.len(),
                        marked_unavailable = o.marked_unavailable, "instance handled");
                }
                let pools = |keep: fn(&InstanceAction) -> bool| -> Vec<String> {
                    outcome
                        .instances()
                        .iter()
                        .filter(|o| keep(&o.action))
                        .filter_map(|o| o.node_pool.clone())
                        .collect()
                };
                RecordResult {
                    provisioner_needed: outcome.provisioner_needed(),
                    disrupted: pools(|a| matches!(a, InstanceAction::Disrupted { .. })),
                    terminated: pools(|a| {
                        matches!(
                            a,
                            InstanceAction::Disrupted {
                                state: ClaimState::Terminated
                            } | InstanceAction::Escalated {
                                state: ClaimState::Terminated
                            }
                        )
                    }),
                    ..result(Disposition::Handled)
                }
            }
            Err(e) if e.kind().is_some_and(|k| k.is_retryable()) => {
                warn!(error = %e, kind = ?e.kind(), ?mode, ?cause, "retryable failure; SQS will deliver the message again");
                result(Disposition::Retry)
            }
            Err(e) => {
                error!(error = %e, kind = ?e.kind(), ?mode, ?cause, instances = ?event.instance_ids,
                    "interruption failed and a retry cannot fix it; acknowledged");
                result(Disposition::Failed)
            }
        }
    }
}

/// Time kept free before the invocation's deadline: the last pass of a drain, the
/// idempotency write and the batch response must fit in it.
pub const DEADLINE_MARGIN_SECS: i64 = 10;

/// Until when (Unix seconds) drains are kept going, given the invocation deadline
/// (Unix milliseconds; 0 when unknown, which gives one pass).
pub fn work_until(deadline_ms: u64, now: i64) -> i64 {
    if deadline_ms == 0 {
        return now;
    }
    (i64::try_from(deadline_ms / 1000).unwrap_or(i64::MAX) - DEADLINE_MARGIN_SECS).max(now)
}

/// The EventBridge `id` of a record's body, read cheaply (no full parse), to spot a
/// second copy of one event within a batch.
fn event_id_of(record: &SqsMessage) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Id {
        id: String,
    }
    serde_json::from_str::<Id>(record.body.as_deref()?)
        .ok()
        .map(|i| i.id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_engine::{InterruptionInput, InterruptionMode};

    const SPOT: &str =
        include_str!("../../../shared/core/tests/fixtures/events/spot-interruption.json");
    const REBALANCE: &str =
        include_str!("../../../shared/core/tests/fixtures/events/rebalance-recommendation.json");
    const TERMINATED: &str =
        include_str!("../../../shared/core/tests/fixtures/events/state-change-terminated.json");
    const HEALTH: &str =
        include_str!("../../../shared/core/tests/fixtures/events/health-scheduled-change.json");

    fn input(json: &str, rebalance: RebalanceAction) -> Option<InterruptionInput> {
        let event = parse_event(json).unwrap();
        input_for(&event, &action_for(&event, rebalance))
    }

    #[test]
    fn drains_are_kept_going_until_ten_seconds_before_the_deadline_or_one_pass_without_one() {
        assert_eq!(work_until(1_000_000 + 150_000, 1_000), 1_140);
        assert_eq!(work_until(1_000_000 + 5_000, 1_000), 1_000);
        assert_eq!(work_until(0, 1_000), 1_000);
    }

    #[test]
    fn a_spot_warning_drains_now_marks_the_offering_and_has_a_two_minute_deadline() {
        let i = input(SPOT, RebalanceAction::Replace).unwrap();
        assert_eq!(
            (i.cause, i.mode, i.mark_unavailable),
            (
                DisruptionCause::SpotInterrupted,
                InterruptionMode::Drain,
                true
            )
        );
        let event = parse_event(SPOT).unwrap();
        assert_eq!(i.deadline, Some(event.time + 120));
        assert_eq!(i.event_id, event.id);
        assert_eq!(i.instance_ids, vec!["i-1234567890abcdef0".to_string()]);
    }

    #[test]
    fn a_rebalance_recommendation_follows_the_setting() {
        let replace = input(REBALANCE, RebalanceAction::Replace).unwrap();
        assert_eq!(
            (replace.cause, replace.mode),
            (
                DisruptionCause::RebalanceRecommended,
                InterruptionMode::ReplaceThenDrain
            )
        );
        assert_eq!(replace.deadline, None);
        let cordon = input(REBALANCE, RebalanceAction::Cordon).unwrap();
        assert_eq!(cordon.mode, InterruptionMode::Cordon);
        assert_eq!(input(REBALANCE, RebalanceAction::Ignore), None);
    }

    #[test]
    fn a_terminated_instance_is_cleaned_up_and_a_stopped_one_is_stopped() {
        let i = input(TERMINATED, RebalanceAction::Replace).unwrap();
        assert_eq!(
            (i.cause, i.mode),
            (
                DisruptionCause::InstanceTerminated,
                InterruptionMode::CleanUp
            )
        );
        let stopped = TERMINATED.replace("\"state\":\"terminated\"", "\"state\":\"stopped\"");
        assert_eq!(
            input(&stopped, RebalanceAction::Replace).unwrap().cause,
            DisruptionCause::InstanceStopped
        );
        let running = TERMINATED.replace("\"state\":\"terminated\"", "\"state\":\"running\"");
        assert_eq!(input(&running, RebalanceAction::Replace), None);
    }

    #[test]
    fn a_scheduled_change_replaces_then_drains_before_its_start() {
        let event = parse_event(HEALTH).unwrap();
        let i = input(HEALTH, RebalanceAction::Ignore).unwrap();
        assert_eq!(
            (i.cause, i.mode),
            (
                DisruptionCause::ScheduledChange,
                InterruptionMode::ReplaceThenDrain
            )
        );
        assert_eq!(i.deadline, event.start_time);
        assert!(!i.instance_ids.is_empty());
    }

    #[test]
    fn each_message_is_counted_by_karpenters_message_type_and_what_became_of_it() {
        let handled = RecordResult {
            cause: Some(DisruptionCause::SpotInterrupted),
            disrupted: vec!["web".into()],
            terminated: vec!["web".into()],
            ..RecordResult::new(Some(EventKind::SpotInterruption), Disposition::Handled)
        };
        let stopped = RecordResult {
            cause: Some(DisruptionCause::InstanceStopped),
            ..RecordResult::new(Some(EventKind::StateChange), Disposition::Duplicate)
        };
        let unreadable = RecordResult::new(None, Disposition::Malformed);
        let results = [handled.clone(), handled, stopped, unreadable];

        let m = batch_metrics("prod", &results, 3.5, 7);

        let docs = m.documents();
        for d in &docs {
            nodewright_lambda::metrics::validate(d).unwrap();
        }
        let count = |message_type: &str, action: &str| {
            docs.iter()
                .find(|d| d["message_type"] == message_type && d["action"] == action)
                .map(|d| d["interruption_received_messages_total"].clone())
        };
        assert_eq!(count("spot_interrupted", "handled"), Some(2.0.into()));
        assert_eq!(count("instance_stopped", "duplicate"), Some(1.0.into()));
        assert_eq!(count("unreadable", "malformed"), Some(1.0.into()));
        let disrupted = docs
            .iter()
            .find(|d| d.get("nodeclaims_disrupted_total").is_some())
            .expect("disrupted");
        assert_eq!(
            (
                &disrupted["nodepool"],
                &disrupted["reason"],
                &disrupted["nodeclaims_disrupted_total"]
            ),
            (&"web".into(), &"spot_interrupted".into(), &2.0.into())
        );
        let terminated = docs
            .iter()
            .find(|d| d.get("nodeclaims_terminated_total").is_some())
            .expect("terminated");
        assert_eq!(terminated["nodeclaims_terminated_total"], 2.0);
        assert!(docs.iter().any(|d| d["Function"] == "interruption"
            && d["invocation_duration_seconds"] == 3.5));
        assert!(docs.iter().all(|d| d["ClusterName"] == "prod"));
    }
}
