//! The interruption job over the ports, given already-decided inputs (the event is
//! parsed and classified in `core::interruption`; this module never reads an event's
//! text). [`input_for`] maps a parsed event and its action to those inputs: one
//! mapping for the Lambda handler and the simulator alike.
//!
//! For one message: check its event id was not handled already; then for each
//! instance id it names, find the claim the store records for it — none means the
//! instance is not ours, and nothing at all is called for it (no cloud, no cluster) —
//! mark its spot offering unavailable, put the claim in `Disrupting`, and drive the
//! termination machine ([`crate::terminate`]) as far as it goes now.
//!
//! ## Event de-duplication: the key is recorded only after success
//! The event id is looked up first (`IdempotencyKeys::idempotency_key_exists`, a read) and
//! recorded (`claim_idempotency_key`, 24 h) only once every instance was handled. A
//! failed attempt (throttled, a lost connection, a crash) therefore never blocks its
//! own retry: SQS delivers it again and it is processed again. That is safe because
//! the work itself is idempotent: every claim step is a conditional write, and the
//! disruption records the event that started it (`Disruption::event`), so the retry
//! *resumes* that claim's termination instead of being turned away as "already
//! disrupting". Recording first ("in progress") would need a release on failure that a
//! crash or a Lambda timeout never runs, losing the event for 24 h.
//! The cost: two deliveries of one event running at the very same time both work on
//! the claim; the conditional writes still let one of them make each step, evicting a
//! pod twice answers NotFound (success), and at worst TerminateInstances is sent twice
//! for the same id, which EC2 answers as a success. No other instance is ever touched.
//!
//! ## Two events for one instance
//! A spot warning and a state change for the same instance (or two different
//! events, in any order) race on the claim's conditional write to `Disrupting`. The
//! winner drains; the loser re-reads the claim, sees it disrupted by another event and
//! stops: one drain, one replacement, one termination. An event arriving after the
//! claim is Terminated (the tombstone) is a no-op.
//!
//! ## Modes
//! - `Drain` (spot warning, scheduled change without lead time): Disrupting with the
//!   deadline, taint and evict now.
//! - `ReplaceThenDrain` (rebalance = replace, scheduled changes): Disrupting, cordoned
//!   now, drained when a replacement is up (a claim Initialized since, made for one of
//!   the node's pods) or at `deadline − replace_lead` (no deadline: after
//!   `replace_wait`). See [`crate::terminate::ready_to_drain`].
//! - `Cordon` (rebalance = cordon): the node is tainted; the claim is not disrupted.
//! - `CleanUp` (stopping/stopped/shutting-down/terminated): Disrupting with the given
//!   cause (InstanceStopped/InstanceTerminated): no evictions and no budgets — the
//!   instance is gone or going — pods bound to the node are deleted, the node deleted;
//!   a stopped instance is also terminated (a stopped node is useless and still costs
//!   its volumes), a terminated one is not.

//!
//! ## Events
//! Each instance of ours a message names gets the event Karpenter's AWS provider posts
//! for it on its node ([`interruption_event`]): `SpotInterrupted`,
//! `SpotRebalanceRecommendation`, `InstanceUnhealthy` (a scheduled change),
//! `InstanceStopping`, `InstanceTerminating`; the drain then tells its own steps
//! ([`crate::terminate`]).

use std::time::Duration;

use tracing::{info, warn};

use nodewright_core::catalog::CapacityType;
use nodewright_core::interruption::{Action, EventKind, ParsedEvent, format_rfc3339};
use nodewright_core::nodeclaim::{ClaimState, Disruption, DisruptionCause, NodeClaim};

use crate::context::Ports;
use crate::error::{EngineError, Result};
use crate::ports::{ClusterEvent, Decision, ErrorKind, EventType, Offering};
use crate::terminate::{self, Progress};

/// How the interruption job behaves; defaults as Karpenter's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterruptionConfig {
    /// How long an interrupted spot offering stays out of launches (Karpenter: 3 min).
    pub ice_ttl: Duration,
    /// How long an event id is remembered (docs/architecture.md: 24 h).
    pub dedup_ttl: Duration,
    /// ReplaceThenDrain: the drain starts this long before the deadline at the latest.
    pub replace_lead: Duration,
    /// ReplaceThenDrain without a deadline (rebalance = replace): the drain starts after
    /// this long at the latest.
    pub replace_wait: Duration,
    /// While an invocation keeps a drain going: how often refused evictions and
    /// transient failures are tried again.
    pub retry_every: Duration,
}

impl Default for InterruptionConfig {
    fn default() -> Self {
        InterruptionConfig {
            ice_ttl: Duration::from_secs(180),
            dedup_ttl: Duration::from_secs(24 * 3600),
            replace_lead: Duration::from_secs(120),
            replace_wait: Duration::from_secs(300),
            retry_every: Duration::from_secs(3),
        }
    }
}

/// What to do with the affected instances (decided by `core::interruption`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InterruptionMode {
    Drain,
    ReplaceThenDrain,
    Cordon,
    CleanUp,
}

/// One message's decided inputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterruptionInput {
    /// The event's id (EventBridge `id`): the de-duplication key.
    pub event_id: String,
    pub instance_ids: Vec<String>,
    pub cause: DisruptionCause,
    /// When the instance goes regardless (spot: warning time + 2 min; health: start).
    pub deadline: Option<i64>,
    /// Mark the claim's offering unavailable (spot interruption: it has no capacity).
    /// Applied only to spot claims.
    pub mark_unavailable: bool,
    pub mode: InterruptionMode,
}

/// What happened to one instance.
#[derive(Debug, Clone, PartialEq)]
pub enum InstanceAction {
    /// The store records no claim for it: not this cluster's. Nothing was called.
    NotOurs,
    /// Its claim is already Terminated (or never launched): nothing to do.
    AlreadyGone,
    /// Another event (or job) is already taking the claim away; left to it.
    AlreadyDisrupting { state: ClaimState },
    /// Cordon mode: tainted, not disrupted.
    Cordoned,
    /// This message disrupted (or resumed) the claim; it is now in `state`.
    Disrupted { state: ClaimState },
    /// Another event was taking the claim away; this more urgent one hurried it (an
    /// earlier deadline, drain now, or the instance is gone). It is now in `state`.
    Escalated { state: ClaimState },
}

#[derive(Debug, Clone, PartialEq)]
pub struct InstanceOutcome {
    pub instance_id: String,
    pub claim: Option<String>,
    /// The claim's NodePool (metrics label by it).
    pub node_pool: Option<String>,
    pub action: InstanceAction,
    pub marked_unavailable: bool,
    pub evicted: Vec<String>,
    pub deleted: Vec<String>,
    /// Pods a disruption budget kept for now.
    pub blocked: Vec<String>,
    /// The drain waits (ReplaceThenDrain) until then.
    pub drain_after: Option<i64>,
}

impl InstanceOutcome {
    fn claim_state(&self) -> ClaimState {
        match self.action {
            InstanceAction::Disrupted { state }
            | InstanceAction::Escalated { state }
            | InstanceAction::AlreadyDisrupting { state } => state,
            _ => ClaimState::Terminated,
        }
    }

    fn new(instance_id: &str, claim: Option<&NodeClaim>, action: InstanceAction) -> Self {
        InstanceOutcome {
            instance_id: instance_id.to_string(),
            claim: claim.map(|c| c.name.clone()),
            node_pool: claim.map(|c| c.node_pool.clone()),
            action,
            marked_unavailable: false,
            evicted: Vec::new(),
            deleted: Vec::new(),
            blocked: Vec::new(),
            drain_after: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum InterruptionOutcome {
    /// The event id was handled before: nothing done.
    Duplicate,
    Handled {
        instances: Vec<InstanceOutcome>,
        /// Pods were evicted or deleted: they are pending now, the provisioner should
        /// run at once rather than at its next minute.
        provisioner_needed: bool,
    },
}

impl InterruptionOutcome {
    pub fn instances(&self) -> &[InstanceOutcome] {
        match self {
            InterruptionOutcome::Duplicate => &[],
            InterruptionOutcome::Handled { instances, .. } => instances,
        }
    }
    pub fn provisioner_needed(&self) -> bool {
        matches!(
            self,
            InterruptionOutcome::Handled {
                provisioner_needed: true,
                ..
            }
        )
    }
}

fn secs(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}

/// Handles one interruption message with one pass of each drain (see
/// [`handle_interruption_until`] to keep draining).
pub async fn handle_interruption(
    ports: &Ports,
    config: &InterruptionConfig,
    input: InterruptionInput,
) -> Result<InterruptionOutcome> {
    let now = ports.clock.now();
    handle_interruption_until(ports, config, input, now).await
}

/// Handles one interruption message, keeping each drain going — refused evictions and
/// transient API errors tried again every `retry_every` — until it completes or `until`
/// (Unix seconds; the invocation's own deadline less a margin) is near. What is left
/// then (a budget that still refuses, a replace-then-drain that waits for its
/// replacement) is finished by the reconciler on the provisioner's next poll.
///
/// An error is retryable as a whole (the event id is then not recorded, so the
/// redelivery is processed again and resumes where this one stopped); instances already
/// handled are handled idempotently the second time. Transient errors are first retried
/// here, within `until`, so a short API hiccup never costs a redelivery (which would land
/// after a spot deadline).
pub async fn handle_interruption_until(
    ports: &Ports,
    config: &InterruptionConfig,
    input: InterruptionInput,
    until: i64,
) -> Result<InterruptionOutcome> {
    let now = ports.clock.now();
    if retrying(ports, config, until, || {
        ports.keys.idempotency_key_exists(&input.event_id, now)
    })
    .await?
    {
        info!(event = %input.event_id, "event already handled");
        return Ok(InterruptionOutcome::Duplicate);
    }
    // The instances of one event (a health event may name many) are independent. Each
    // is handled again as a whole after a transient failure of any step (the
    // conditional write to Disrupting, a read after a lost race): handling resumes
    // what an earlier attempt started, and a redelivery would land after the deadline.
    let results = futures_util::future::join_all(input.instance_ids.iter().map(|id| {
        retrying(ports, config, until, || {
            handle_instance(ports, config, &input, id, until)
        })
    }))
    .await;
    let mut instances = Vec::with_capacity(results.len());
    let mut first_error: Option<EngineError> = None;
    for (id, result) in input.instance_ids.iter().zip(results) {
        match result {
            Ok(outcome) => instances.push(outcome),
            Err(e) => {
                warn!(event = %input.event_id, instance = %id, error = %e, "interruption not fully handled; the message will be retried");
                first_error.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    // Recorded last: see the module documentation.
    let recorded = retrying(ports, config, until, || {
        ports
            .keys
            .claim_idempotency_key(&input.event_id, ports.clock.now(), config.dedup_ttl)
    })
    .await?;
    if !recorded {
        info!(event = %input.event_id, "a concurrent delivery of the same event finished first");
    }
    let provisioner_needed = instances
        .iter()
        .any(|o| !o.evicted.is_empty() || !o.deleted.is_empty() || o.drain_after.is_some());
    Ok(InterruptionOutcome::Handled {
        instances,
        provisioner_needed,
    })
}

/// Runs `op` again after a transient failure (throttled, unavailable, a lost
/// conditional write), backing off from `retry_every / 4`, while `until` allows.
async fn retrying<T, E, F, Fut>(
    ports: &Ports,
    config: &InterruptionConfig,
    until: i64,
    mut op: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<T, E>>,
    E: Into<EngineError>,
{
    let mut delay = (config.retry_every / 4).max(Duration::from_millis(100));
    loop {
        match op().await.map_err(Into::into) {
            Ok(v) => return Ok(v),
            Err(e)
                if e.kind().is_some_and(ErrorKind::is_retryable)
                    && ports.clock.now() + secs(delay).max(1) <= until =>
            {
                warn!(error = %e, delay_ms = delay.as_millis() as u64, "transient failure; retrying");
                ports.clock.sleep(delay).await;
                delay = (delay * 2).min(config.retry_every);
            }
            Err(e) => return Err(e),
        }
    }
}

async fn handle_instance(
    ports: &Ports,
    config: &InterruptionConfig,
    input: &InterruptionInput,
    instance_id: &str,
    until: i64,
) -> Result<InstanceOutcome> {
    let Some(claim) = retrying(ports, config, until, || {
        ports.claims.claim_by_instance(instance_id)
    })
    .await?
    else {
        info!(event = %input.event_id, instance = %instance_id, "not an instance of this cluster; ignored");
        return Ok(InstanceOutcome::new(
            instance_id,
            None,
            InstanceAction::NotOurs,
        ));
    };
    // The GSI is eventually consistent: trust only a record that names this instance.
    if claim.instance_id.as_deref() != Some(instance_id) {
        return Ok(InstanceOutcome::new(
            instance_id,
            None,
            InstanceAction::NotOurs,
        ));
    }
    if claim.state.is_terminal() {
        return Ok(InstanceOutcome::new(
            instance_id,
            Some(&claim),
            InstanceAction::AlreadyGone,
        ));
    }
    let now = ports.clock.now();
    let offering = (input.mark_unavailable && claim.capacity_type == Some(CapacityType::Spot))
        .then(|| Some((claim.instance_type.clone()?, claim.zone.clone()?)))
        .flatten()
        .map(|(instance_type, zone)| Offering {
            instance_type,
            zone,
            capacity_type: CapacityType::Spot,
            price: claim.price_per_hour.unwrap_or_default(),
        });
    // The cordon first, and beside the offering mark: nothing new may land on a node
    // that is going, whatever else is slow. Tainting a node whose disruption another
    // event wins is harmless: it is going anyway.
    let cordon_now = input.mode != InterruptionMode::CleanUp;
    let (cordoned, marked) = tokio::join!(
        async {
            if cordon_now {
                retrying(ports, config, until, || terminate::cordon(ports, &claim)).await
            } else {
                Ok(())
            }
        },
        async {
            match &offering {
                Some(o) => retrying(ports, config, until, || {
                    ports
                        .backoff
                        .mark_unavailable(o, now + secs(config.ice_ttl))
                })
                .await
                .map(|()| true),
                None => Ok(false),
            }
        }
    );
    cordoned?;
    let marked = marked?;

    let outcome = match input.mode {
        InterruptionMode::Cordon => {
            if claim.state.is_live_capacity() {
                emit_interrupted(ports, input, &claim).await;
                InstanceOutcome::new(instance_id, Some(&claim), InstanceAction::Cordoned)
            } else {
                already_disrupting(instance_id, &claim)
            }
        }
        _ if claim.state.can_become(ClaimState::Disrupting) => {
            match start(ports, config, input, &claim).await? {
                Started::Won(disrupted) => {
                    let (_, progress) = tokio::join!(
                        emit_interrupted(ports, input, &disrupted),
                        terminate::drive_until(ports, &disrupted, until, config.retry_every)
                    );
                    disrupted_outcome(instance_id, progress?)
                }
                Started::Lost(current) => {
                    resume_or_escalate(ports, config, input, instance_id, current, until).await?
                }
            }
        }
        _ => resume_or_escalate(ports, config, input, instance_id, claim, until).await?,
    };
    Ok(InstanceOutcome {
        marked_unavailable: marked,
        ..outcome
    })
}

enum Started {
    Won(NodeClaim),
    /// Someone else took the claim out of service first: it is as read again.
    Lost(NodeClaim),
}

/// The conditional write to Disrupting: it decides which of two racing events drains.
async fn start(
    ports: &Ports,
    config: &InterruptionConfig,
    input: &InterruptionInput,
    claim: &NodeClaim,
) -> Result<Started> {
    let now = ports.clock.now();
    let disruption = disruption_for(config, input, now);
    match terminate::disrupt_with(ports, claim, disruption).await {
        Ok(disrupted) => {
            ports
                .record_decision(Decision {
                    at: now,
                    job: "interrupt".into(),
                    action: format!(
                        "{} {} ({})",
                        if input.mode == InterruptionMode::CleanUp {
                            "clean up"
                        } else {
                            "drain and terminate"
                        },
                        claim.name,
                        claim.instance_id.as_deref().unwrap_or("?")
                    ),
                    reason: format!("{:?} (event {})", input.cause, input.event_id),
                    price_per_hour: claim.price_per_hour,
                })
                .await;
            Ok(Started::Won(disrupted))
        }
        Err(EngineError::Store(e)) if e.kind == ErrorKind::Conflict => {
            let current = ports.claims.get_claim(&claim.name).await?;
            match current {
                // Another write came first but left the claim in service (an update
                // of its record, a command given up): the race is still to run.
                // The conflict goes up, and the instance is handled again as a whole.
                Some(c) if c.state.can_become(ClaimState::Disrupting) => Err(EngineError::Store(e)),
                current => Ok(Started::Lost(current.unwrap_or_else(|| claim.clone()))),
            }
        }
        Err(e) => Err(e),
    }
}

/// A claim already on its way out. This very event started it (a retry after a
/// failure): resume it. Another event did: this one still counts when it is more
/// urgent — an earlier deadline, a drain that must not wait any more, an instance that
/// is gone — and escalates the disruption in progress, then drives it. Otherwise it is
/// left to whoever started it (the reconciler finishes it in any case).
async fn resume_or_escalate(
    ports: &Ports,
    config: &InterruptionConfig,
    input: &InterruptionInput,
    instance_id: &str,
    mut claim: NodeClaim,
    until: i64,
) -> Result<InstanceOutcome> {
    if input.mode == InterruptionMode::Cordon {
        return Ok(already_disrupting(instance_id, &claim));
    }
    let incoming = disruption_for(config, input, ports.clock.now());
    for _ in 0..3 {
        if claim.state.is_terminal() {
            return Ok(InstanceOutcome::new(
                instance_id,
                Some(&claim),
                InstanceAction::AlreadyGone,
            ));
        }
        let ours = claim.disruption.as_ref().and_then(|d| d.event.as_deref())
            == Some(input.event_id.as_str());
        if ours {
            info!(event = %input.event_id, claim = %claim.name, state = ?claim.state, "resuming the termination this event started");
            let progress = terminate::drive_until(ports, &claim, until, config.retry_every).await?;
            return Ok(disrupted_outcome(instance_id, progress));
        }
        match terminate::escalate(ports, &claim, &incoming).await {
            Ok(Some(escalated)) => {
                ports
                    .record_decision(Decision {
                        at: ports.clock.now(),
                        job: "interrupt".into(),
                        action: format!(
                            "escalate the disruption of {} ({})",
                            claim.name,
                            claim.instance_id.as_deref().unwrap_or("?")
                        ),
                        reason: format!(
                            "{:?} (event {}) is more urgent than {:?}",
                            input.cause,
                            input.event_id,
                            claim.disruption.as_ref().map(|d| d.cause)
                        ),
                        price_per_hour: claim.price_per_hour,
                    })
                    .await;
                let (_, progress) = tokio::join!(
                    emit_interrupted(ports, input, &escalated),
                    terminate::drive_until(ports, &escalated, until, config.retry_every)
                );
                let mut out = disrupted_outcome(instance_id, progress?);
                out.action = InstanceAction::Escalated {
                    state: out.claim_state(),
                };
                return Ok(out);
            }
            Ok(None) => return Ok(already_disrupting(instance_id, &claim)),
            Err(e) if e.kind() == Some(ErrorKind::Conflict) => {
                match ports.claims.get_claim(&claim.name).await? {
                    Some(current) => claim = current,
                    None => return Ok(already_disrupting(instance_id, &claim)),
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(already_disrupting(instance_id, &claim))
}

/// The disruption an event asks for, as of `now`.
fn disruption_for(config: &InterruptionConfig, input: &InterruptionInput, now: i64) -> Disruption {
    let drain_after =
        (input.mode == InterruptionMode::ReplaceThenDrain).then(|| match input.deadline {
            Some(deadline) => (deadline - secs(config.replace_lead)).max(now),
            None => now + secs(config.replace_wait),
        });
    Disruption {
        cause: input.cause,
        deadline: input.deadline,
        since: now,
        drain_after,
        drain_grace: None,
        event: Some(input.event_id.clone()),
        command: None,
    }
}

fn already_disrupting(instance_id: &str, claim: &NodeClaim) -> InstanceOutcome {
    info!(claim = %claim.name, state = ?claim.state, "already being taken away; left to its owner");
    InstanceOutcome::new(
        instance_id,
        Some(claim),
        InstanceAction::AlreadyDisrupting { state: claim.state },
    )
}

fn disrupted_outcome(instance_id: &str, progress: Progress) -> InstanceOutcome {
    let mut out = InstanceOutcome::new(
        instance_id,
        Some(&progress.claim),
        InstanceAction::Disrupted {
            state: progress.claim.state,
        },
    );
    out.evicted = progress.evicted;
    out.deleted = progress.deleted;
    out.blocked = progress.blocked;
    out.drain_after = progress.waiting_until;
    out
}

/// The node's event for an interruption, under the reason Karpenter's AWS provider
/// posts for the message: `SpotInterrupted`, `CapacityReservationInstanceInterrupted`,
/// `SpotRebalanceRecommendation`, `InstanceUnhealthy` (an AWS Health scheduled change), `InstanceStopping`,
/// `InstanceTerminating`. Posted once per message (messages are de-duplicated by
/// event id) for every instance of ours it names.
pub fn interruption_event(input: &InterruptionInput, claim: &NodeClaim) -> Option<ClusterEvent> {
    let node = claim.node_name.as_ref()?;
    let (event_type, reason, what) = match input.cause {
        DisruptionCause::SpotInterrupted => (
            EventType::Warning,
            "SpotInterrupted",
            "Spot interruption warning was triggered",
        ),
        DisruptionCause::CapacityReservationInterrupted => (
            EventType::Warning,
            "CapacityReservationInstanceInterrupted",
            "Capacity Reservation interruption warning was triggered",
        ),
        DisruptionCause::RebalanceRecommended => (
            EventType::Normal,
            "SpotRebalanceRecommendation",
            "Spot rebalance recommendation was triggered",
        ),
        DisruptionCause::ScheduledChange => (
            EventType::Warning,
            "InstanceUnhealthy",
            "An AWS Health scheduled change was announced for the instance",
        ),
        DisruptionCause::InstanceStopped => (
            EventType::Warning,
            "InstanceStopping",
            "Instance is stopping",
        ),
        DisruptionCause::InstanceTerminated => (
            EventType::Warning,
            "InstanceTerminating",
            "Instance is terminating",
        ),
        // Not an interruption's cause; never given by `input_for`.
        _ => (
            EventType::Warning,
            "Interrupted",
            "The instance is being interrupted",
        ),
    };
    let then = match input.mode {
        InterruptionMode::Drain => "draining now",
        InterruptionMode::ReplaceThenDrain => "replacing, then draining",
        InterruptionMode::Cordon => "cordoned",
        InterruptionMode::CleanUp => "cleaning up",
    };
    Some(ClusterEvent {
        kind: "Node".into(),
        namespace: None,
        name: node.clone(),
        event_type,
        reason: reason.into(),
        message: format!(
            "{what} (instance {}, event {}{}); {then}",
            claim.instance_id.as_deref().unwrap_or("?"),
            input.event_id,
            input
                .deadline
                .map(|d| format!(", gone at {}", format_rfc3339(d)))
                .unwrap_or_default()
        ),
    })
}

async fn emit_interrupted(ports: &Ports, input: &InterruptionInput, claim: &NodeClaim) {
    if let Some(event) = interruption_event(input, claim) {
        ports.emit(event).await;
    }
}

/// The engine's input for an event and its action; `None` when there is nothing to do.
///
/// A capacity-reservation warning is given `SpotInterrupted`: like a Spot reclaim it is
/// EC2 taking capacity back with a two-minute notice, the drain is the same (now, with
/// that deadline), and `InstanceStopped`/`Terminated` would skip evictions and budgets.
/// The offering mark only applies to spot claims in the engine, so an on-demand
/// reservation instance is drained but no offering is marked.
pub fn input_for(event: &ParsedEvent, action: &Action) -> Option<InterruptionInput> {
    let instance_ids: Vec<String> = event
        .instance_ids
        .iter()
        .map(|i| i.as_str().to_string())
        .collect();
    if instance_ids.is_empty() {
        return None;
    }
    let (cause, mode, deadline, mark_unavailable) = match action {
        Action::None { .. } => return None,
        Action::DrainNow {
            deadline,
            mark_offering_unavailable,
            ..
        } => (
            match event.kind {
                EventKind::CapacityReservationInterruption => {
                    DisruptionCause::CapacityReservationInterrupted
                }
                _ => DisruptionCause::SpotInterrupted,
            },
            InterruptionMode::Drain,
            Some(*deadline),
            *mark_offering_unavailable,
        ),
        Action::ReplaceThenDrain { deadline } => {
            let cause = match event.kind {
                EventKind::RebalanceRecommendation => DisruptionCause::RebalanceRecommended,
                _ => DisruptionCause::ScheduledChange,
            };
            (cause, InterruptionMode::ReplaceThenDrain, *deadline, false)
        }
        Action::Cordon => (
            DisruptionCause::RebalanceRecommended,
            InterruptionMode::Cordon,
            None,
            false,
        ),
        Action::CleanUp => {
            let cause = match event.state.as_deref() {
                Some("stopping" | "stopped") => DisruptionCause::InstanceStopped,
                _ => DisruptionCause::InstanceTerminated,
            };
            (cause, InterruptionMode::CleanUp, None, false)
        }
    };
    Some(InterruptionInput {
        event_id: event.id.clone(),
        instance_ids,
        cause,
        deadline,
        mark_unavailable,
        mode,
    })
}
