//! Node repair, run by the provisioner's reconciler on every poll: nodes core's
//! [`plan_repairs`] finds unhealthy past their toleration are put in
//! `Disrupting(Unhealthy)` with a deadline of now, so the termination machine
//! ([`crate::terminate`]) deletes their pods at once (no budget, no PDB waits: the
//! pods cannot run there anyway), terminates the instance and deletes the node. Their
//! pods' controllers recreate the pods and the same tick's plan launches capacity for
//! them. Because the repair is a claim state, a crash after the write is resumed by the
//! next poll's reconciler, like any other disruption.
//!
//! EC2's status checks are read once a minute (`DescribeInstanceStatus`, what the AWS
//! provider polls); a role without the permission degrades to node conditions only,
//! with one warning per process.

use std::collections::HashMap;
use std::sync::Mutex;

use tracing::{info, warn};

use nodewright_core::cluster::Node;
use nodewright_core::nodeclaim::{DisruptionCause, NodeClaim};
use nodewright_core::repair::{ImpairedInstance, plan_repairs};

use crate::context::Ports;
use crate::error::{EngineError, Result};
use crate::ports::{ClusterEvent, Decision, ErrorKind, EventType};
use crate::terminate::{self, Disrupted};

/// The Event reason when a repair is held by the 20% limit (Karpenter's).
pub const NODE_REPAIR_BLOCKED: &str = "NodeRepairBlocked";
/// The Event reason on a node being repaired.
pub const UNHEALTHY: &str = "Unhealthy";
/// How often EC2's status checks are read.
const STATUS_INTERVAL_SECS: i64 = 60;
/// A held repair's event is not repeated within this window (Karpenter's dedupe).
const BLOCKED_EVENT_WINDOW_SECS: i64 = 15 * 60;

/// What one repair pass did.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RepairReport {
    /// Claims put in `Disrupting(Unhealthy)` on this pass.
    pub repaired: Vec<String>,
    /// Claims past their toleration held by the 20% limit.
    pub held: Vec<String>,
}

/// The memory repair keeps while the Lambda is warm: the last status-check read, and
/// when each held repair was last announced.
#[derive(Default)]
pub struct Repairer {
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

impl Repairer {
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

    /// One repair pass over `claims` (updated in place with the claims it disrupted).
    pub async fn repair(
        &self,
        ports: &Ports,
        nodes: &[Node],
        claims: &mut [NodeClaim],
        disrupted: &mut Vec<Disrupted>,
        now: i64,
    ) -> Result<RepairReport> {
        let impaired = self.impaired(ports, now).await;
        let plan = plan_repairs(nodes, claims, &impaired, now);
        *lock(&self.next_due) = plan.next_due;
        let mut report = RepairReport::default();
        for repair in &plan.repairs {
            let Some(slot) = claims.iter_mut().find(|c| c.name == repair.claim) else {
                continue;
            };
            let next = match terminate::disrupt(ports, slot, DisruptionCause::Unhealthy, Some(now))
                .await
            {
                Ok(next) => next,
                // Someone else took the claim first (an interruption, a command): it
                // is on its way out already.
                Err(EngineError::Store(e)) if e.kind == ErrorKind::Conflict => continue,
                Err(e) => return Err(e),
            };
            info!(claim = %repair.claim, node = %repair.node, nodepool = %repair.node_pool, symptom = %repair.symptom.label(), "repairing unhealthy node");
            disrupted.push(Disrupted::new(slot, DisruptionCause::Unhealthy));
            *slot = next;
            report.repaired.push(repair.claim.clone());
            ports
                .emit(ClusterEvent {
                    kind: "Node".into(),
                    namespace: None,
                    name: repair.node.clone(),
                    event_type: EventType::Warning,
                    reason: UNHEALTHY.into(),
                    message: format!("Repairing the node: {}", repair.reason),
                })
                .await;
            ports
                .record_decision(Decision {
                    at: now,
                    job: "repair".into(),
                    action: format!(
                        "repair {} ({}): delete its pods and terminate the instance",
                        repair.node, repair.claim
                    ),
                    reason: repair.reason.clone(),
                    price_per_hour: None,
                })
                .await;
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
            ports
                .record_decision(Decision {
                    at: now,
                    job: "repair".into(),
                    action: format!("hold the repair of {} ({})", held.node, held.claim),
                    reason: held.reason.clone(),
                    price_per_hour: None,
                })
                .await;
        }
        Ok(report)
    }
}
