//! Node repair, run by the provisioner's reconciler on every poll: core's
//! [`plan_repairs`] says which unhealthy nodes to repair now and how, and this acts:
//!
//! - **Replace** (Karpenter v1.15's default): the claim goes `Disrupting(Unhealthy)`,
//!   cordoned, with its drain waiting for a replacement (the same tick's plan launches
//!   one for its pods, as for any node being taken away) for at most
//!   [`REPLACEMENT_WAIT_SECS`]; the drain then honours PodDisruptionBudgets until the
//!   policy's grace period has passed, and the instance is terminated.
//! - **Terminate first** (`TerminateFirstRepair`, a NodePool that cannot stage a
//!   replacement): the same drain, at once.
//! - **Forceful** (EC2's failing status checks; `LegacyNodeRepair`): a deadline of now, so
//!   the termination machine ([`crate::terminate`]) deletes the pods at once.
//! - **Reboot** (`RebootForRepair`, a GPU fault a reboot clears): the claim records the
//!   reboot (it stays live capacity), the node is tainted `karpenter.sh/rebooting`,
//!   drained within the grace period (pods a PodDisruptionBudget keeps ride the reboot),
//!   `RebootInstances` is sent, and the reboot is over when the node's boot id changed
//!   and it is Ready (`RebootObserved`). A reboot that cannot be sent, or a node not
//!   back within [`REBOOT_RECOVERY_SECS`], fails (`RebootFailed`): the node is drained
//!   and terminated, and its pods get new capacity.
//!
//! Every step is a conditional claim write: a crash after one is resumed by the next
//! poll's reconciler, like any other disruption.
//!
//! EC2's status checks are read once a minute (`DescribeInstanceStatus`, what the AWS
//! provider polls); a role without the permission degrades to node conditions only,
//! with one warning per process.

use std::collections::HashMap;
use std::sync::Mutex;

use tracing::{info, warn};

use nodewright_core::api::model::{NodePool, Taint, TaintEffect};
use nodewright_core::cluster::Node;
use nodewright_core::nodeclaim::{Disruption, DisruptionCause, NodeClaim, Reboot};
use nodewright_core::repair::{
    ImpairedInstance, REBOOT_WINDOW_SECS, RepairInput, RepairSettings, RepairStep, plan_repairs,
};
use nodewright_core::well_known::TAINT_REBOOTING;

use crate::context::Ports;
use crate::error::{EngineError, Result};
use crate::ports::{ClusterEvent, Decision, ErrorKind, EventType, NodePatch};
use crate::terminate::{self, Disrupted, Progress};

/// The Event reason when a repair is held (Karpenter's).
pub const NODE_REPAIR_BLOCKED: &str = "NodeRepairBlocked";
/// The Event reason on a node being repaired.
pub const UNHEALTHY: &str = "Unhealthy";
/// A reboot for repair is over: the node came back with a new boot id (Karpenter's).
pub const REBOOT_OBSERVED: &str = "RebootObserved";
/// A reboot for repair failed: the node is replaced (Karpenter's).
pub const REBOOT_FAILED: &str = "RebootFailed";
/// How long a node being replaced waits for its replacement before it drains anyway.
pub const REPLACEMENT_WAIT_SECS: i64 = 15 * 60;
/// The drain before a reboot lasts at least this long (Karpenter's).
const REBOOT_MIN_DRAIN_SECS: i64 = 5;
/// RebootInstances must have gone out within this after the drain.
const REBOOT_ISSUE_TIMEOUT_SECS: i64 = 5 * 60;
/// The node must be back (new boot id, Ready) within this after RebootInstances.
pub const REBOOT_RECOVERY_SECS: i64 = 20 * 60;
/// How often EC2's status checks are read.
const STATUS_INTERVAL_SECS: i64 = 60;
/// A held repair's event is not repeated within this window (Karpenter's dedupe).
const BLOCKED_EVENT_WINDOW_SECS: i64 = 15 * 60;

/// What one repair pass did.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RepairReport {
    /// Claims put in `Disrupting(Unhealthy)` on this pass (a failed reboot among them).
    pub repaired: Vec<String>,
    /// Claims whose reboot for repair was committed on this pass.
    pub rebooting: Vec<String>,
    /// Claims whose reboot for repair ended well on this pass.
    pub rebooted: Vec<String>,
    /// Claims past their toleration that repair holds.
    pub held: Vec<String>,
}

/// The memory repair keeps while the Lambda is warm: the last status-check read, and
/// when each held repair was last announced.
#[derive(Default)]
pub struct Repairer {
    settings: RepairSettings,
    status: Mutex<StatusRead>,
    announced: Mutex<HashMap<String, i64>>,
    /// When the next unhealthy node's toleration ends (from the last pass).
    next_due: Mutex<Option<i64>>,
}

#[derive(Default)]
struct StatusRead {
    at: Option<i64>,
    impaired: Vec<ImpairedInstance>,
    forbidden_warned: bool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a repair pass reads of the gathered cluster besides the claims.
#[derive(Clone, Copy)]
pub struct RepairView<'a> {
    pub nodes: &'a [Node],
    pub pools: &'a [NodePool],
    /// The capacity reservations the EC2NodeClasses select, with instances left.
    pub reservations: &'a [nodewright_core::catalog::Reservation],
}

impl Repairer {
    pub fn new(settings: RepairSettings) -> Self {
        Repairer {
            settings,
            ..Repairer::default()
        }
    }

    /// Whether an unhealthy node seen by the last pass has become due: the polling loop
    /// ticks for it rather than waiting for other work.
    pub fn due(&self, now: i64) -> bool {
        lock(&self.next_due).is_some_and(|at| at <= now)
    }

    /// EC2's failing status checks, read at most once a minute. A failed read keeps
    /// the last answer: repair by node conditions goes on either way.
    async fn impaired(&self, ports: &Ports, now: i64) -> Vec<ImpairedInstance> {
        {
            let read = lock(&self.status);
            if read.at.is_some_and(|at| now - at < STATUS_INTERVAL_SECS) {
                return read.impaired.clone();
            }
        }
        let answer = ports.cloud.impaired_instances().await;
        let mut read = lock(&self.status);
        read.at = Some(now);
        match answer {
            Ok(impaired) => read.impaired = impaired,
            Err(e) if e.kind == ErrorKind::Unauthorized => {
                if !read.forbidden_warned {
                    read.forbidden_warned = true;
                    warn!(error = %e, "ec2:DescribeInstanceStatus is not allowed: node repair uses node conditions only; grant it to repair on EC2 status checks");
                }
                read.impaired.clear();
            }
            Err(e) => {
                warn!(error = %e, kind = ?e.kind, "could not read EC2 instance status checks; using the last answer")
            }
        }
        read.impaired.clone()
    }

    /// One repair pass over `claims` (updated in place with the claims it changed).
    pub async fn repair(
        &self,
        ports: &Ports,
        view: RepairView<'_>,
        claims: &mut [NodeClaim],
        disrupted: &mut Vec<Disrupted>,
        now: i64,
    ) -> Result<RepairReport> {
        let impaired = self.impaired(ports, now).await;
        let RepairView {
            nodes,
            pools,
            reservations,
        } = view;
        let plan = plan_repairs(&RepairInput {
            nodes,
            claims,
            pools,
            impaired: &impaired,
            reservations,
            settings: &self.settings,
            now,
        });
        *lock(&self.next_due) = plan.next_due;
        let mut report = RepairReport::default();
        for repair in &plan.repairs {
            let Some(slot) = claims.iter_mut().find(|c| c.name == repair.claim) else {
                continue;
            };
            let next = match repair.step {
                RepairStep::Reboot => commit_reboot(ports, slot, repair, now).await,
                step => {
                    let disruption = Disruption {
                        cause: DisruptionCause::Unhealthy,
                        // Forceful: the pods are deleted at once.
                        deadline: (step == RepairStep::Forceful).then_some(now),
                        since: now,
                        drain_after: (step == RepairStep::Replace)
                            .then_some(now + REPLACEMENT_WAIT_SECS),
                        drain_grace: repair.grace_secs,
                        event: None,
                        command: None,
                    };
                    terminate::disrupt_with(ports, slot, disruption).await
                }
            };
            let next = match next {
                Ok(next) => next,
                // Someone else took the claim first (an interruption, a command): it
                // is on its way out already.
                Err(EngineError::Store(e)) if e.kind == ErrorKind::Conflict => continue,
                Err(e) => return Err(e),
            };
            info!(claim = %repair.claim, node = %repair.node, nodepool = %repair.node_pool, symptom = %repair.symptom.label(), step = ?repair.step, grace_secs = ?repair.grace_secs, "repairing unhealthy node");
            if repair.step == RepairStep::Reboot {
                report.rebooting.push(repair.claim.clone());
            } else {
                disrupted.push(Disrupted::new(slot, DisruptionCause::Unhealthy));
                report.repaired.push(repair.claim.clone());
            }
            *slot = next;
            let grace = repair
                .grace_secs
                .map(|g| format!(" (drain within {}m{}s)", g / 60, g % 60))
                .unwrap_or_default();
            ports
                .emit(warning(
                    &repair.node,
                    UNHEALTHY,
                    format!("Repairing the node: {}", repair.reason),
                ))
                .await;
            let action = format!(
                "repair {} ({}): {}{grace}",
                repair.node,
                repair.claim,
                repair.step.describe()
            );
            record(ports, now, action, repair.reason.clone()).await;
        }
        for slot in claims.iter_mut() {
            if slot.reboot.is_none() || !slot.state.is_live_capacity() {
                continue;
            }
            match advance_reboot(ports, nodes, slot, now).await {
                Ok(Rebooted::Waiting) => {}
                Ok(Rebooted::Progressed(next)) => *slot = next,
                Ok(Rebooted::Done(next)) => {
                    report.rebooted.push(next.name.clone());
                    *slot = next;
                }
                Ok(Rebooted::Failed(next)) => {
                    disrupted.push(Disrupted::new(&next, DisruptionCause::Unhealthy));
                    report.repaired.push(next.name.clone());
                    *slot = next;
                }
                Err(EngineError::Store(e)) if e.kind == ErrorKind::Conflict => {}
                Err(e) => return Err(e),
            }
        }
        for held in &plan.held {
            report.held.push(held.claim.clone());
            let first = {
                let mut announced = lock(&self.announced);
                announced.retain(|_, at| now - *at < BLOCKED_EVENT_WINDOW_SECS);
                match announced.get(&held.claim) {
                    Some(_) => false,
                    None => {
                        announced.insert(held.claim.clone(), now);
                        true
                    }
                }
            };
            if !first {
                continue;
            }
            warn!(claim = %held.claim, node = %held.node, nodepool = %held.node_pool, "node repair held: {}", held.reason);
            for (kind, name) in [("Node", &held.node), ("NodePool", &held.node_pool)] {
                ports
                    .emit(ClusterEvent {
                        kind: kind.into(),
                        namespace: None,
                        name: name.clone(),
                        event_type: EventType::Warning,
                        reason: NODE_REPAIR_BLOCKED.into(),
                        message: format!("{}: {}", held.node, held.reason),
                    })
                    .await;
            }
            let action = format!("hold the repair of {} ({})", held.node, held.claim);
            record(ports, now, action, held.reason.clone()).await;
        }
        Ok(report)
    }
}

/// Where a reboot for repair stands after one step.
enum Rebooted {
    /// Nothing changed (the drain or the node is still going).
    Waiting,
    /// The claim moved on (the reboot was sent).
    Progressed(NodeClaim),
    /// The node is back: the claim no longer reboots.
    Done(NodeClaim),
    /// The reboot failed: the claim is `Disrupting(Unhealthy)`.
    Failed(NodeClaim),
}

fn rebooting_taint() -> Taint {
    Taint {
        key: TAINT_REBOOTING.into(),
        value: None,
        effect: TaintEffect::NoSchedule,
    }
}

async fn patch_rebooting_taint(ports: &Ports, node: &str, add: bool) -> Result<()> {
    let patch = if add {
        NodePatch {
            add_taints: vec![rebooting_taint()],
            ..NodePatch::default()
        }
    } else {
        NodePatch {
            remove_taints: vec![TAINT_REBOOTING.into()],
            ..NodePatch::default()
        }
    };
    match ports.cluster.patch_node(node, &patch).await {
        Err(e) if e.kind != ErrorKind::NotFound => Err(e.into()),
        _ => Ok(()),
    }
}

/// Records the reboot on the claim (and in its 24-hour history), then taints the node.
async fn commit_reboot(
    ports: &Ports,
    claim: &NodeClaim,
    repair: &nodewright_core::repair::Repair,
    now: i64,
) -> Result<NodeClaim> {
    let next = claim.amend(now, |c| {
        c.reboot = Some(Reboot {
            requested_at: now,
            reason: repair.symptom.describe(now),
            grace_secs: repair.grace_secs,
            pre_boot_id: None,
            issued_at: None,
        });
        c.reboots.retain(|t| now - t < REBOOT_WINDOW_SECS);
        c.reboots.push(now);
    })?;
    let next = ports.save_claim(claim, next).await?;
    patch_rebooting_taint(ports, &repair.node, true).await?;
    Ok(next)
}

/// One step of a claim's reboot for repair: drain, send, watch the node come back.
async fn advance_reboot(
    ports: &Ports,
    nodes: &[Node],
    claim: &NodeClaim,
    now: i64,
) -> Result<Rebooted> {
    let Some(reboot) = claim.reboot.clone() else {
        return Ok(Rebooted::Waiting);
    };
    let node = claim
        .node_name
        .as_deref()
        .and_then(|n| nodes.iter().find(|x| x.name == n));
    let Some(issued_at) = reboot.issued_at else {
        let drain_until = reboot.requested_at
            + reboot
                .grace_secs
                .map_or(i64::MAX / 2, |g| g.max(REBOOT_MIN_DRAIN_SECS));
        if let Some(node) = node
            && !node.taints.iter().any(|t| t.key == TAINT_REBOOTING)
        {
            // Tainted at commit; a crash in between leaves it to here.
            patch_rebooting_taint(ports, &node.name, true).await?;
        }
        if reboot.grace_secs != Some(0) {
            // Evictions only: what a PodDisruptionBudget keeps rides the reboot.
            let mut progress = Progress::new(claim.clone());
            let plain = NodeClaim {
                disruption: None,
                ..claim.clone()
            };
            let drained = terminate::drain(ports, &plain, &mut progress).await?;
            if now < reboot.requested_at + REBOOT_MIN_DRAIN_SECS || (!drained && now < drain_until)
            {
                return Ok(Rebooted::Waiting);
            }
        }
        let Some(instance) = claim.instance_id.as_deref() else {
            return fail_reboot(ports, claim, &reboot, "the claim records no instance", now)
                .await
                .map(Rebooted::Failed);
        };
        return match ports.cloud.reboot(instance).await {
            Ok(()) => {
                let pre_boot_id = node.and_then(|n| n.boot_id.clone());
                let next = claim.amend(now, |c| {
                    if let Some(r) = c.reboot.as_mut() {
                        r.pre_boot_id = pre_boot_id;
                        r.issued_at = Some(now);
                    }
                })?;
                let next = ports.save_claim(claim, next).await?;
                info!(claim = %claim.name, instance = %instance, "rebooting the instance for repair");
                Ok(Rebooted::Progressed(next))
            }
            Err(e)
                if matches!(
                    e.kind,
                    ErrorKind::NotFound | ErrorKind::Unauthorized | ErrorKind::Invalid
                ) || now >= drain_until.saturating_add(REBOOT_ISSUE_TIMEOUT_SECS) =>
            {
                let why = format!("RebootInstances failed: {e}");
                fail_reboot(ports, claim, &reboot, &why, now)
                    .await
                    .map(Rebooted::Failed)
            }
            Err(e) => {
                warn!(claim = %claim.name, error = %e, kind = ?e.kind, "could not send RebootInstances; trying again next poll");
                Ok(Rebooted::Waiting)
            }
        };
    };
    let back =
        node.is_some_and(|n| n.ready && n.boot_id.is_some() && n.boot_id != reboot.pre_boot_id);
    if back {
        if let Some(node) = node {
            patch_rebooting_taint(ports, &node.name, false).await?;
        }
        let next = claim.amend(now, |c| {
            c.reboot = None;
            c.rebooted_at = Some(now);
        })?;
        let next = ports.save_claim(claim, next).await?;
        info!(claim = %claim.name, seconds = now - issued_at, "the node is back from its reboot for repair");
        if let Some(node) = &claim.node_name {
            let message = format!(
                "Rebooted for repair ({}); back and Ready after {}s",
                reboot.reason,
                now - issued_at
            );
            ports
                .emit(terminate::node_event(node, REBOOT_OBSERVED, message))
                .await;
        }
        let action = format!(
            "reboot of {} ({}) done",
            claim.node_name.as_deref().unwrap_or("-"),
            claim.name
        );
        let why = format!(
            "the node came back with a new boot id and is Ready, {}s after RebootInstances",
            now - issued_at
        );
        record(ports, now, action, why).await;
        return Ok(Rebooted::Done(next));
    }
    if now - issued_at >= REBOOT_RECOVERY_SECS {
        let why = format!(
            "the node was not back (new boot id, Ready) {}m after RebootInstances",
            REBOOT_RECOVERY_SECS / 60
        );
        return fail_reboot(ports, claim, &reboot, &why, now)
            .await
            .map(Rebooted::Failed);
    }
    Ok(Rebooted::Waiting)
}

/// A reboot that failed: the rebooting taint goes, and the claim is drained (within the
/// reboot's bound) and terminated; its pods get new capacity.
async fn fail_reboot(
    ports: &Ports,
    claim: &NodeClaim,
    reboot: &Reboot,
    why: &str,
    now: i64,
) -> Result<NodeClaim> {
    if let Some(node) = &claim.node_name {
        patch_rebooting_taint(ports, node, false).await?;
    }
    let next = claim.transition(
        nodewright_core::nodeclaim::ClaimState::Disrupting,
        now,
        |c| {
            c.reboot = None;
            c.disruption = Some(Disruption {
                cause: DisruptionCause::Unhealthy,
                deadline: None,
                since: now,
                drain_after: None,
                drain_grace: reboot.grace_secs,
                event: None,
                command: None,
            });
        },
    )?;
    let next = ports.save_claim(claim, next).await?;
    warn!(claim = %claim.name, reason = %why, "reboot for repair failed; replacing the node");
    if let Some(node) = &claim.node_name {
        let message = format!(
            "Reboot for repair ({}) failed: {why}; replacing the node",
            reboot.reason
        );
        ports.emit(warning(node, REBOOT_FAILED, message)).await;
    }
    let action = format!(
        "repair {} ({}): the reboot failed; drain and terminate it",
        claim.node_name.as_deref().unwrap_or("-"),
        claim.name
    );
    record(ports, now, action, why.to_string()).await;
    Ok(next)
}

/// A Warning Event on Node `node`.
fn warning(node: &str, reason: &str, message: String) -> ClusterEvent {
    ClusterEvent {
        event_type: EventType::Warning,
        ..terminate::node_event(node, reason, message)
    }
}

/// A repair decision in the decision log.
async fn record(ports: &Ports, now: i64, action: String, reason: String) {
    ports
        .record_decision(Decision {
            at: now,
            job: "repair".into(),
            action,
            reason,
            price_per_hour: None,
        })
        .await;
}
