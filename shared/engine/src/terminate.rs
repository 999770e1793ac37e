//! Taking a claim away, one function per step of
//! `Disrupting → Draining → Terminating → Terminated`, shared by every job that
//! disrupts (interruption, lifecycle, the coming disruption job).
//!
//! ```text
//! Disrupting{cause, deadline, drain_after}
//!   │  cordon: taint karpenter.sh/disrupted:NoSchedule (also while a drain waits)
//!   ▼  start_draining (Event "Draining")                    ── waits while drain_after > now,
//! Draining                                                      unless a replacement is up
//!   │  drain: evict non-critical pods, then critical ones; DaemonSet pods stay, and
//!   │  so do pods tolerating the disrupted taint (they would come straight back);
//!   │  do-not-disrupt pods are never evicted: the drain waits for them.
//!   │  A budget's refusal is retried on the next step; from `deadline − grace` the pod
//!   │  is deleted instead (grace = min(time left, its own)). Instance gone/going
//!   │  (InstanceStopped/Terminated): pods are deleted at once, nothing waited for. A
//!   │  pod already terminating is never evicted or deleted again; it is not waited
//!   │  for past the deadline, off a gone instance, or a minute past its grace period.
//!   ▼  finish_draining when no evictable pod is left (Event "Terminating")
//! Terminating
//!   │  terminate_instance: TerminateInstances for the id the store records on this
//!   │  claim (skipped when the instance already terminated), delete the Node object
//!   ▼
//! Terminated (tombstone: kept until `expires_at`, TOMBSTONE_TTL later)
//! ```
//!
//! Karpenter's events on the way: `Evicted` on each pod evicted, `Disrupted` on each
//! pod deleted at the deadline or off a dead instance, `FailedDraining` (Warning) on the
//! node when a budget refuses an eviction (once per pod per [`FAILED_DRAINING_WINDOW`],
//! however often the drain retries), `TerminationGracePeriodExpiring` (Warning) on the
//! node when a drain with a deadline starts or its deadline is brought forward.
//!
//! Each step is one conditional store write (`NodeClaim::transition` +
//! `ClaimStore::update_claim`) after its side effect, and every side effect is idempotent
//! (tainting twice, evicting or deleting a pod already gone, terminating an instance
//! already terminated, deleting a node already gone): a crash between any two leaves
//! a state that whoever sees the claim next resumes with [`advance`]. Two callers
//! advancing the same claim at once are kept apart by the conditional writes: the loser
//! gets `Conflict` and stops.

use nodewright_core::well_known::TAINT_DISRUPTED;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, LazyLock, Mutex as StdMutex, Weak};
use std::time::Duration;

use tracing::{debug, info, warn};

use nodewright_core::api::model::{Taint, TaintEffect};
use nodewright_core::cluster::Pod;
use nodewright_core::interruption::format_rfc3339;
use nodewright_core::nodeclaim::{ClaimState, Disruption, DisruptionCause, NodeClaim};

use crate::context::Ports;
use crate::error::{EngineError, Result};
use crate::ports::{Cluster, ClusterEvent, ErrorKind, EventType, NodePatch, StoreError};

/// How long a Terminated claim stays in the store (late events for its instance are
/// then still recognised as ours, and ignored).
pub const TOMBSTONE_TTL: Duration = Duration::from_secs(24 * 3600);
/// Karpenter's event reasons for a drain.
pub const EVICTED: &str = "Evicted";
pub const DISRUPTED: &str = "Disrupted";
pub const FAILED_DRAINING: &str = "FailedDraining";
pub const TERMINATION_GRACE_PERIOD_EXPIRING: &str = "TerminationGracePeriodExpiring";
/// How long a refused eviction of one pod is not reported again on its node.
pub const FAILED_DRAINING_WINDOW: Duration = Duration::from_secs(5 * 60);
/// Rounds of list-and-evict per step: non-critical pods, critical pods, a last look.
const DRAIN_ROUNDS: usize = 3;

/// What one [`drive`] did, for reports and for deciding to run the provisioner.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// The claim as last written (or as given, when nothing could be done yet).
    pub claim: NodeClaim,
    /// Pods evicted (namespace/name).
    pub evicted: Vec<String>,
    /// Pods deleted: past their deadline, or on an instance that is gone.
    pub deleted: Vec<String>,
    /// Pods a disruption budget kept this time; tried again on the next step.
    pub blocked: Vec<String>,
    /// `karpenter.sh/do-not-disrupt` pods the drain waits for (never evicted; deleted
    /// once the deadline is near, when there is one).
    pub do_not_disrupt: Vec<String>,
    /// The drain is waiting (replace-then-drain) until this time.
    pub waiting_until: Option<i64>,
    /// This call terminated the instance (sent TerminateInstances).
    pub terminated_instance: bool,
    /// Pods whose eviction or deletion failed with a transient error (throttled, a
    /// timeout, a 5xx); tried again on the next step. The rest of the pass went on.
    pub retry: Vec<String>,
}

impl Progress {
    pub fn new(claim: NodeClaim) -> Self {
        Progress {
            claim,
            evicted: Vec::new(),
            deleted: Vec::new(),
            blocked: Vec::new(),
            do_not_disrupt: Vec::new(),
            waiting_until: None,
            terminated_instance: false,
            retry: Vec::new(),
        }
    }
}

/// A claim put in `Disrupting`, and why: what `nodeclaims_disrupted` counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disrupted {
    pub claim: String,
    pub node_pool: String,
    pub cause: DisruptionCause,
}

impl Disrupted {
    pub fn new(claim: &NodeClaim, cause: DisruptionCause) -> Self {
        Disrupted {
            claim: claim.name.clone(),
            node_pool: claim.node_pool.clone(),
            cause,
        }
    }
}

fn disrupted_taint() -> Taint {
    Taint {
        key: TAINT_DISRUPTED.into(),
        value: None,
        effect: TaintEffect::NoSchedule,
    }
}

/// Step 1: the claim is to be taken away, for `cause`.
pub async fn disrupt(
    ports: &Ports,
    claim: &NodeClaim,
    cause: DisruptionCause,
    deadline: Option<i64>,
) -> Result<NodeClaim> {
    let now = ports.clock.now();
    disrupt_with(
        ports,
        claim,
        Disruption {
            cause,
            deadline,
            since: now,
            drain_after: None,
            drain_grace: None,
            event: None,
            command: None,
        },
    )
    .await
}

/// Step 1 with every detail of the disruption (drain delay, originating event).
/// `Conflict` when another caller changed the claim first: it decides, not this one.
pub async fn disrupt_with(
    ports: &Ports,
    claim: &NodeClaim,
    disruption: Disruption,
) -> Result<NodeClaim> {
    let cause = disruption.cause;
    let next = claim.transition(ClaimState::Disrupting, ports.clock.now(), |c| {
        c.disruption = Some(disruption)
    })?;
    let next = ports.save_claim(claim, next).await?;
    info!(claim = %claim.name, cause = ?cause, "disrupting");
    Ok(next)
}

/// A later event for a claim already being taken away: the disruption becomes the
/// more urgent of the two (see `Disruption::escalated_by`): an earlier deadline, a drain
/// that no longer waits, a cause that says the instance is gone. `Ok(None)`: nothing
/// more urgent, or the claim is already terminating (nothing left to hurry). `Conflict`
/// when another writer changed the claim first (re-read and try again).
pub async fn escalate(
    ports: &Ports,
    claim: &NodeClaim,
    incoming: &Disruption,
) -> Result<Option<NodeClaim>> {
    if !matches!(claim.state, ClaimState::Disrupting | ClaimState::Draining) {
        return Ok(None);
    }
    let Some(current) = &claim.disruption else {
        return Ok(None);
    };
    let Some(escalated) = current.escalated_by(incoming) else {
        return Ok(None);
    };
    let cause = escalated.cause;
    let earlier = escalated.deadline.filter(|d| current.deadline != Some(*d));
    let next = claim.amend(ports.clock.now(), |c| c.disruption = Some(escalated))?;
    let next = ports.save_claim(claim, next).await?;
    info!(claim = %claim.name, cause = ?cause, deadline = ?next.disruption.as_ref().and_then(|d| d.deadline), "disruption escalated");
    if let (Some(deadline), ClaimState::Draining) = (earlier, next.state) {
        // A drain already under way learns of its (new) deadline here; one not yet
        // started is told when it starts.
        grace_period_expiring(ports, &next, deadline).await;
    }
    Ok(Some(next))
}

/// Taints the claim's node `karpenter.sh/disrupted:NoSchedule` (no new pods land on
/// it). No node, or a node already gone: nothing to do.
pub async fn cordon(ports: &Ports, claim: &NodeClaim) -> Result<()> {
    let Some(node) = &claim.node_name else {
        return Ok(());
    };
    let patch = NodePatch {
        add_taints: vec![disrupted_taint()],
        ..NodePatch::default()
    };
    match ports.cluster.patch_node(node, &patch).await {
        Err(e) if e.kind != ErrorKind::NotFound => Err(e.into()),
        _ => Ok(()),
    }
}

/// Step 2: cordon the node (unless the instance is gone: nothing will schedule there)
/// and start draining it.
pub async fn start_draining(ports: &Ports, claim: &NodeClaim) -> Result<NodeClaim> {
    let gone = claim
        .disruption
        .as_ref()
        .is_some_and(|d| d.cause.instance_gone());
    if !gone {
        cordon(ports, claim).await?;
    }
    let now = ports.clock.now();
    let next = claim.transition(ClaimState::Draining, now, |c| {
        // A bounded drain (node repair) learns its deadline as it starts.
        if let Some(d) = c.disruption.as_mut()
            && let Some(grace) = d.drain_grace
        {
            let bound = now.saturating_add(grace);
            d.deadline = Some(d.deadline.map_or(bound, |t| t.min(bound)));
        }
    })?;
    let next = ports.save_claim(claim, next).await?;
    if let Some(node) = &claim.node_name {
        ports
            .emit(node_event(
                node,
                "Draining",
                format!("Draining NodeClaim {} ({})", claim.name, cause_of(claim)),
            ))
            .await;
    }
    if let Some(deadline) = next.disruption.as_ref().and_then(|d| d.deadline) {
        grace_period_expiring(ports, &next, deadline).await;
    }
    Ok(next)
}

/// Karpenter's `TerminationGracePeriodExpiring` (Warning, on the node): from `deadline`
/// on, the pods left are deleted whatever protects them. Posted when a drain with a
/// deadline starts, and again when a later event brings the deadline forward.
async fn grace_period_expiring(ports: &Ports, claim: &NodeClaim, deadline: i64) {
    let Some(node) = &claim.node_name else {
        return;
    };
    ports
        .emit(ClusterEvent {
            event_type: EventType::Warning,
            ..node_event(
                node,
                TERMINATION_GRACE_PERIOD_EXPIRING,
                format!("All pods will be deleted by {}", format_rfc3339(deadline)),
            )
        })
        .await;
}

/// Whether a Disrupting claim may start draining now: never while a disruption
/// command holds it unvalidated; otherwise no `drain_after`, its time has
/// come, or a replacement is up — a claim Initialized since the disruption began that
/// was made for one of the pods on this node (`NodeClaim::pods`).
pub async fn ready_to_drain(ports: &Ports, claim: &NodeClaim) -> Result<bool> {
    let Some(d) = &claim.disruption else {
        return Ok(true);
    };
    if d.command.as_ref().is_some_and(|c| !c.validated) {
        // A disruption command's candidate drains only once the command is validated
        // (its replacements up, the decision re-checked): until then it may be
        // abandoned and the node given back (`crate::command`).
        return Ok(false);
    }
    let Some(after) = d.drain_after else {
        return Ok(true);
    };
    if ports.clock.now() >= after {
        return Ok(true);
    }
    let Some(node) = &claim.node_name else {
        return Ok(true);
    };
    let pods: HashSet<String> = ports
        .cluster
        .pods_on_node(node)
        .await?
        .iter()
        .map(|p| p.key())
        .collect();
    if pods.is_empty() {
        return Ok(true);
    }
    let claims = ports.claims.list_claims().await?;
    Ok(claims.iter().any(|c| {
        c.name != claim.name
            && c.state == ClaimState::Initialized
            && c.created_at >= d.since
            && c.pods.iter().any(|p| pods.contains(p))
    }))
}

/// One pass of the drain: evicts (or, past the deadline or on a dead instance, deletes)
/// what can go now. `true` when no evictable pod is left on the node.
pub async fn drain(ports: &Ports, claim: &NodeClaim, progress: &mut Progress) -> Result<bool> {
    let Some(node) = &claim.node_name else {
        return Ok(true);
    };
    let lock = pass_lock(&claim.name);
    let _one_pass_at_a_time = lock.lock().await;
    let (gone, deadline) = match &claim.disruption {
        Some(d) => (d.cause.instance_gone(), d.deadline),
        None => (false, None),
    };
    for _ in 0..DRAIN_ROUNDS {
        let now = ports.clock.now();
        let past_deadline = deadline.is_some_and(|d| now >= d);
        let pods = ports.cluster.pods_on_node(node).await?;
        let remaining: Vec<&Pod> = pods
            .iter()
            .filter(|p| !p.daemonset_owned && !p.terminal)
            .filter(|p| gone || !tolerates_disruption(p))
            // Still terminating a minute past its grace period: nothing will confirm
            // its deletion (a kubelet that stopped); waiting for it would hold the
            // drain for good.
            .filter(|p| !p.stuck_terminating_at(now))
            // Already going (deleted by the drain near its deadline, or by the taint
            // eviction controller off a node whose kubelet stopped) once the instance is
            // gone or the deadline passed: nothing is gained by waiting for it.
            .filter(|p| !(p.terminating && (gone || past_deadline)))
            .collect();
        if remaining.is_empty() {
            return Ok(true);
        }
        // Non-critical pods first; critical ones (system-*-critical) once those are gone.
        let any_ordinary = remaining.iter().any(|p| !p.critical);
        let group = remaining.iter().filter(|p| p.critical != any_ordinary);
        let mut done = true;
        let mut failure: Option<EngineError> = None;
        for pod in group {
            if pod.terminating {
                // Already going (its grace period runs): waited for, never evicted or
                // deleted again.
                done = false;
                continue;
            }
            let grace = pod.grace_period_seconds();
            let delete_with = if gone {
                Some(0)
            } else {
                deadline
                    .filter(|d| now >= d - grace)
                    .map(|d| (d - now).clamp(0, grace))
            };
            if pod.do_not_disrupt_at(now) && delete_with.is_none() {
                // As Karpenter: a do-not-disrupt pod is never evicted. The drain waits
                // until it ends by itself, or until the deadline (the NodePool's
                // terminationGracePeriod, a spot notice) has it deleted.
                progress.do_not_disrupt.push(pod.key());
                done = false;
                continue;
            }
            let result = match delete_with {
                Some(grace) => {
                    ports
                        .cluster
                        .delete_pod(&pod.namespace, &pod.name, grace)
                        .await
                }
                None => ports.cluster.evict_pod(&pod.namespace, &pod.name).await,
            };
            match result {
                Ok(()) => {
                    let deadline = if gone { None } else { deadline };
                    ports
                        .emit(pod_event(claim, pod, delete_with, deadline))
                        .await;
                    match delete_with {
                        Some(_) => progress.deleted.push(pod.key()),
                        None => progress.evicted.push(pod.key()),
                    }
                }
                Err(e) if e.kind == ErrorKind::NotFound => {}
                Err(e) if e.kind == ErrorKind::DisruptionBudget => {
                    debug!(claim = %claim.name, pod = %pod.key(), "eviction refused by a disruption budget; retried next step");
                    if first_in_window(&ports.cluster, &format!("{node}/{}", pod.key()), now) {
                        ports
                            .emit(ClusterEvent {
                                event_type: EventType::Warning,
                                ..node_event(
                                    node,
                                    FAILED_DRAINING,
                                    format!(
                                        "Failed to drain node, evicting pod {} violates a PDB",
                                        pod.key()
                                    ),
                                )
                            })
                            .await;
                    }
                    progress.blocked.push(pod.key());
                    done = false;
                }
                Err(e) if e.kind.is_retryable() || e.kind == ErrorKind::Other => {
                    // One pod's failure does not abandon the others.
                    warn!(claim = %claim.name, pod = %pod.key(), error = %e, "eviction failed; tried again next step");
                    progress.retry.push(pod.key());
                    done = false;
                }
                Err(e) => {
                    done = false;
                    failure.get_or_insert(e.into());
                }
            }
        }
        if let Some(e) = failure {
            return Err(e);
        }
        if !done {
            return Ok(false);
        }
    }
    Ok(false)
}

/// The pod tolerates `karpenter.sh/disrupted:NoSchedule`: evicted, it would be put
/// straight back on the node being drained (kube-scheduler lets it; the node is soon
/// the least allocated). As Karpenter (`IsDrainable`), the drain neither evicts nor
/// waits for it: it goes with its node. (Off an instance already gone it is deleted
/// with the rest: nothing runs there any more.)
fn tolerates_disruption(pod: &Pod) -> bool {
    let taint = disrupted_taint();
    pod.tolerations.iter().any(|t| t.tolerates(&taint))
}

/// The lock of one claim's drain passes in this process. Two records of one batch (a
/// spot warning and a state change for the same instance) may both drive the claim; a
/// pass that listed the pods before the other's evictions went through would delete
/// the pods just evicted. One pass at a time, the second sees them terminating.
fn pass_lock(claim: &str) -> Arc<tokio::sync::Mutex<()>> {
    static PASSES: LazyLock<StdMutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>> =
        LazyLock::new(StdMutex::default);
    let mut passes = PASSES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(lock) = passes.get(claim).and_then(Weak::upgrade) {
        return lock;
    }
    passes.retain(|_, l| l.strong_count() > 0);
    let lock = Arc::new(tokio::sync::Mutex::new(()));
    passes.insert(claim.to_string(), Arc::downgrade(&lock));
    lock
}

/// Step 3: the node is empty (or never existed): the instance may go.
pub async fn finish_draining(ports: &Ports, claim: &NodeClaim) -> Result<NodeClaim> {
    let next = claim.transition(ClaimState::Terminating, ports.clock.now(), |_| {})?;
    let next = ports.save_claim(claim, next).await?;
    let name = claim
        .node_name
        .clone()
        .unwrap_or_else(|| claim.name.clone());
    ports
        .emit(node_event(
            &name,
            "Terminating",
            format!("Terminating NodeClaim {} ({})", claim.name, cause_of(claim)),
        ))
        .await;
    Ok(next)
}

/// How long a driver's recorded intent to send TerminateInstances keeps others from
/// sending it: far longer than one API call takes between the write and the call. A
/// driver that died in between (or before recording the claim Terminated) is taken
/// over once it has passed: a crash delays that termination by this much at most.
pub const TERMINATE_INTENT_WINDOW_SECS: i64 = 30;

/// Step 4: terminate the instance the store records for this claim, delete the Node
/// object, and tombstone the claim. An instance already gone (NotFound) counts as
/// terminated; an instance whose own state change said it terminated is not sent
/// TerminateInstances at all (a stopped one is: a stopped node is useless capacity
/// that still costs its volumes).
pub async fn terminate_instance(ports: &Ports, claim: &NodeClaim) -> Result<NodeClaim> {
    terminate_step(ports, claim, &mut Progress::new(claim.clone())).await
}

async fn terminate_step(
    ports: &Ports,
    claim: &NodeClaim,
    progress: &mut Progress,
) -> Result<NodeClaim> {
    if let Some(id) = &claim.instance_id {
        // Only ever an id the store records on this claim, in this very state: a claim
        // built or changed by the caller cannot name another instance.
        let stored = ports.claims.get_claim(&claim.name).await?;
        match &stored {
            Some(s) if s.instance_id.as_deref() == Some(id.as_str()) => {
                if s.state != claim.state || s.version != claim.version {
                    return Err(EngineError::Store(StoreError::new(
                        ErrorKind::Conflict,
                        format!(
                            "claim {} moved on to {:?} v{} before its termination",
                            claim.name, s.state, s.version
                        ),
                    )));
                }
            }
            _ => {
                return Err(EngineError::NotOwned {
                    claim: claim.name.clone(),
                    instance: id.clone(),
                });
            }
        }
        let already_terminated = claim
            .disruption
            .as_ref()
            .is_some_and(|d| d.cause == DisruptionCause::InstanceTerminated);
        if !already_terminated {
            // The intent first, as a conditional write: of two drivers that reach this
            // step at once (the interruption function and the reconciler, or after an
            // escalation) only the one whose write wins sends TerminateInstances; the
            // other gets Conflict and finds the claim done on its next pass. An intent
            // left by a driver that died is taken over once it is old enough.
            let now = ports.clock.now();
            if let Some(at) = claim.terminate_requested_at
                && now - at < TERMINATE_INTENT_WINDOW_SECS
            {
                return Err(EngineError::Store(StoreError::new(
                    ErrorKind::Conflict,
                    format!(
                        "claim {}: another driver is terminating instance {id} (since {at})",
                        claim.name
                    ),
                )));
            }
            // An older intent: its driver died, or failed after the call, which may
            // have been sent. EC2 says whether it must be sent again.
            if claim.terminate_requested_at.is_some() && !still_running(ports, claim, id).await? {
                info!(claim = %claim.name, instance = %id, "instance already terminating");
                return finish_terminating_without_call(ports, claim).await;
            }
            let intent = claim.amend(now, |c| c.terminate_requested_at = Some(now))?;
            let intent = ports.save_claim(claim, intent).await?;
            progress.claim = intent.clone();
            return finish_terminating(ports, &intent, id, progress).await;
        }
    }
    finish_terminating_without_call(ports, claim).await
}

/// Whether EC2 still lists `id` neither shutting down nor terminated (an adopted claim's
/// instance carries Karpenter's tags and is listed with those).
async fn still_running(ports: &Ports, claim: &NodeClaim, id: &str) -> Result<bool> {
    let listed = if claim.adopted {
        ports
            .cloud
            .cluster_instances_launched_by_karpenter()
            .await?
    } else {
        ports.cloud.owned_instances().await?
    };
    Ok(listed
        .iter()
        .any(|i| i.id == id && !matches!(i.state.as_str(), "shutting-down" | "terminated")))
}

/// The instance's TerminateInstances, sent by the driver whose intent was written. A
/// call EC2 refused clears the intent again, so the next pass retries at once.
async fn finish_terminating(
    ports: &Ports,
    claim: &NodeClaim,
    id: &str,
    progress: &mut Progress,
) -> Result<NodeClaim> {
    match ports.cloud.terminate(&[id.to_string()]).await {
        Ok(()) => {
            progress.terminated_instance = true;
            info!(claim = %claim.name, instance = %id, "terminated instance");
        }
        Err(e) if e.kind == ErrorKind::NotFound => {
            info!(claim = %claim.name, instance = %id, "instance already gone")
        }
        Err(e) => {
            if let Ok(cleared) = claim.amend(ports.clock.now(), |c| c.terminate_requested_at = None)
                && let Ok(cleared) = ports.save_claim(claim, cleared).await
            {
                progress.claim = cleared;
            }
            return Err(EngineError::Cloud(e));
        }
    }
    finish_terminating_without_call(ports, claim).await
}

/// The Node deleted and the claim tombstoned, once the instance is gone or going.
async fn finish_terminating_without_call(ports: &Ports, claim: &NodeClaim) -> Result<NodeClaim> {
    if let Some(node) = &claim.node_name {
        match ports.cluster.delete_node(node).await {
            Err(e) if e.kind != ErrorKind::NotFound => return Err(e.into()),
            _ => {}
        }
    }
    let now = ports.clock.now();
    let ttl = i64::try_from(TOMBSTONE_TTL.as_secs()).unwrap_or(i64::MAX);
    let next = claim.transition(ClaimState::Terminated, now, |c| {
        c.expires_at = Some(now.saturating_add(ttl))
    })?;
    let next = ports.save_claim(claim, next).await?;
    let name = claim
        .node_name
        .clone()
        .unwrap_or_else(|| claim.name.clone());
    ports
        .emit(node_event(
            &name,
            "Terminated",
            format!("NodeClaim {} terminated ({})", claim.name, cause_of(claim)),
        ))
        .await;
    Ok(next)
}

/// Drives a claim from whichever step it is at as far as it can go now, without
/// waiting: a drain held by a budget or a replace-then-drain delay stops it where it is,
/// for the next caller to resume. Returns the claim as last written.
pub async fn advance(ports: &Ports, claim: &NodeClaim) -> Result<NodeClaim> {
    Ok(drive(ports, claim).await?.claim)
}

/// [`advance`], saying what it did.
pub async fn drive(ports: &Ports, claim: &NodeClaim) -> Result<Progress> {
    let mut progress = Progress::new(claim.clone());
    loop {
        let c = progress.claim.clone();
        progress.claim = match c.state {
            ClaimState::Disrupting => {
                if !ready_to_drain(ports, &c).await? {
                    // Keep it cordoned while it waits (the cordon may have been lost to
                    // a crash right after the Disrupting write).
                    cordon(ports, &c).await?;
                    progress.waiting_until = c.disruption.as_ref().and_then(|d| d.drain_after);
                    return Ok(progress);
                }
                start_draining(ports, &c).await?
            }
            ClaimState::Draining => {
                if !drain(ports, &c, &mut progress).await? {
                    return Ok(progress);
                }
                finish_draining(ports, &c).await?
            }
            ClaimState::Terminating => terminate_step(ports, &c, &mut progress).await?,
            _ => return Ok(progress),
        };
    }
}

/// [`drive`] again and again until the claim is Terminated or `until` (Unix seconds)
/// is near: refused evictions and transient API errors are retried every
/// `retry_every`, a lost conditional write re-reads the claim. Returns when the drain
/// waits for a replacement (the reconciler starts it later), when another writer took
/// the claim somewhere this call does not drive, or when time is up; what is left is
/// finished by the reconciler on its next poll. `Err` only for a failure a retry
/// cannot fix.
pub async fn drive_until(
    ports: &Ports,
    claim: &NodeClaim,
    until: i64,
    retry_every: Duration,
) -> Result<Progress> {
    let step_secs = i64::try_from(retry_every.as_secs().max(1)).unwrap_or(i64::MAX);
    let mut total = Progress::new(claim.clone());
    loop {
        match drive(ports, &total.claim).await {
            Ok(p) => {
                let waiting = p.waiting_until.is_some();
                total.absorb(p);
                if waiting || !total.claim.state.is_being_taken_away() {
                    return Ok(total);
                }
            }
            Err(e) if e.kind() == Some(ErrorKind::Conflict) => {
                match ports.claims.get_claim(&total.claim.name).await? {
                    Some(current) if current.state.is_being_taken_away() => total.claim = current,
                    Some(current) => {
                        total.claim = current;
                        return Ok(total);
                    }
                    None => return Ok(total),
                }
                continue;
            }
            Err(e) if e.kind().is_some_and(ErrorKind::is_retryable) => {
                warn!(claim = %total.claim.name, error = %e, "transient failure while taking the claim away; retrying");
            }
            Err(e) => return Err(e),
        }
        if ports.clock.now() + step_secs > until {
            return Ok(total);
        }
        ports.clock.sleep(retry_every).await;
    }
}

impl Progress {
    /// Adds what a later step did; the claim is the later one's.
    fn absorb(&mut self, later: Progress) {
        self.claim = later.claim;
        self.evicted.extend(later.evicted);
        self.deleted.extend(later.deleted);
        self.blocked = later.blocked;
        self.do_not_disrupt = later.do_not_disrupt;
        self.retry = later.retry;
        self.waiting_until = later.waiting_until;
        self.terminated_instance |= later.terminated_instance;
    }
}

fn cause_of(claim: &NodeClaim) -> String {
    claim
        .disruption
        .as_ref()
        .map(|d| format!("{:?}", d.cause))
        .unwrap_or_default()
}

/// The pod's `Evicted` (Normal) or, when it was deleted, `Disrupted` (Normal) event.
fn pod_event(
    claim: &NodeClaim,
    pod: &Pod,
    deleted_with: Option<i64>,
    deadline: Option<i64>,
) -> ClusterEvent {
    let (reason, message) = match (deleted_with, deadline) {
        (None, _) => (EVICTED, format!("Evicted pod: {}", cause_of(claim))),
        (Some(grace), Some(deadline)) => (
            DISRUPTED,
            format!(
                "Deleting the pod to meet the node's termination time {} ({}); granted {grace}s of grace, past its PodDisruptionBudget and do-not-disrupt",
                format_rfc3339(deadline),
                cause_of(claim)
            ),
        ),
        (Some(_), None) => (
            DISRUPTED,
            format!(
                "Deleting the pod: its instance is gone ({})",
                cause_of(claim)
            ),
        ),
    };
    ClusterEvent {
        kind: "Pod".into(),
        namespace: Some(pod.namespace.clone()),
        name: pod.name.clone(),
        event_type: EventType::Normal,
        reason: reason.into(),
        message,
    }
}

/// Whether `key` was not reported on this cluster within [`FAILED_DRAINING_WINDOW`]
/// (and records it now). Drains are driven by stateless calls from every poll, so the
/// memory lives here, per cluster port: an entry holds a weak reference to the port it
/// was made for, which keeps two ports (two tests, two simulated worlds) apart and
/// lets a dropped port's entries go.
fn first_in_window(cluster: &Arc<dyn Cluster>, key: &str, now: i64) -> bool {
    type Seen = Vec<(Weak<dyn Cluster>, String, i64)>;
    static SEEN: LazyLock<StdMutex<Seen>> = LazyLock::new(StdMutex::default);
    let window = i64::try_from(FAILED_DRAINING_WINDOW.as_secs()).unwrap_or(i64::MAX);
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    let this = Arc::downgrade(cluster);
    seen.retain(|(port, _, at)| {
        port.strong_count() > 0 && !(Weak::ptr_eq(port, &this) && now - *at >= window)
    });
    if seen
        .iter()
        .any(|(port, k, _)| Weak::ptr_eq(port, &this) && k == key)
    {
        return false;
    }
    seen.push((this, key.to_string(), now));
    true
}

/// A Normal Event on Node `node` (a Warning: `ClusterEvent { event_type: Warning, ..node_event(..) }`).
pub(crate) fn node_event(node: &str, reason: &str, message: String) -> ClusterEvent {
    ClusterEvent {
        kind: "Node".into(),
        namespace: None,
        name: node.to_string(),
        event_type: EventType::Normal,
        reason: reason.into(),
        message,
    }
}
