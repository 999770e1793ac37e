//! Static NodePools (`spec.replicas`), run by the provisioner on every tick after the
//! reconciler and the disruption commands: core's [`plan_static_pools`] says how many
//! claims each static pool is short of or has too many, and this step acts.
//!
//! - Short: the claims to launch join the tick's planned claims and are launched by
//!   the same path as any (`crate::launch`: written `Launching` before CreateFleet,
//!   cheapest offerings first, ICE fallback, crash recovery).
//! - Too many: each chosen claim is put in `Disrupting(Overprovisioned)` with the
//!   pool's `terminationGracePeriod` as its deadline; the termination machine
//!   ([`crate::terminate`]) drains it on the next polls — evictions a
//!   PodDisruptionBudget refuses are retried, do-not-disrupt pods waited for, up to the
//!   deadline. Disruption budgets do not apply, as Karpenter documents.
//!
//! Every action is a decision-log entry and an Event with its reason; a pool that
//! cannot reach its replicas (`limits.nodes`, no offering) says so once per window.
//! `status.nodes` of every NodePool (what `kubectl scale` reads through the scale
//! subresource) is published with the NodePools' conditions.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::{Map, Value};
use tracing::{info, warn};

use nodewright_core::nodeclaim::{DisruptionCause, NodeClaim};
use nodewright_core::planning_view::{
    ClusterView, in_flight_claims, planning_claims, planning_snapshot,
};
use nodewright_core::provisioning::PlannedNodeClaim;
use nodewright_core::static_capacity::{StaticInput, StaticPlan, count_claims, plan_static_pools};

use crate::context::Ports;
use crate::error::{EngineError, Result};
use crate::gather::Gathered;
use crate::ports::{ClusterEvent, Decision, ErrorKind, EventType, ObjectKind};
use crate::reasons::StatusFields;
use crate::terminate::{self, Disrupted};

/// The Event reason on a static NodePool launching toward its replicas.
pub const SCALING_UP: &str = "ScalingUp";
/// The Event reason on a static NodePool, and on each node it takes away.
pub const OVERPROVISIONED: &str = "Overprovisioned";
/// The Event reason when a static NodePool cannot reach its replicas.
pub const REPLICAS_HELD: &str = "ReplicasNotReached";
/// A held pool's warning is not repeated within this window unless its reason changes.
const HELD_EVENT_WINDOW_SECS: i64 = 15 * 60;

/// What one pass did.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StaticReport {
    /// Each static pool's plan on this pass.
    pub plans: Vec<StaticPlan>,
    /// Claims put in `Disrupting(Overprovisioned)`.
    pub scaled_down: Vec<Disrupted>,
}

/// What static capacity remembers while the Lambda is warm: the held warnings
/// already announced.
#[derive(Default)]
pub struct StaticCapacity {
    announced: Mutex<HashMap<String, (String, i64)>>,
}

impl StaticCapacity {
    /// One pass: claims to launch are appended to `planned`; surplus claims are put on
    /// their way out.
    pub(crate) async fn reconcile(
        &self,
        ports: &Ports,
        gathered: &mut Gathered,
        planned: &mut Vec<PlannedNodeClaim>,
    ) -> Result<StaticReport> {
        let now = ports.clock.now();
        let mut report = StaticReport::default();
        if !gathered.pools.iter().any(|p| p.is_static()) {
            return Ok(report);
        }
        let view = ClusterView {
            nodes: &gathered.state.nodes,
            pods: &gathered.state.pods,
            daemonsets: &gathered.state.daemonsets,
            pdbs: &gathered.state.pdbs,
        };
        let claims = planning_claims(&gathered.claims);
        let snapshot = planning_snapshot(view, &claims, &gathered.pools);
        // Dynamic pools' planned claims are no concern of a static pool's limits.
        let in_flight = in_flight_claims(&claims, &snapshot);
        report.plans = plan_static_pools(&StaticInput {
            claims: &gathered.claims,
            snapshot: &snapshot,
            node_pools: &gathered.pools,
            node_classes: &gathered.state.node_classes,
            catalog: &gathered.catalog,
            pricing: &gathered.pricing,
            in_flight: &in_flight,
            now,
        });
        for plan in &report.plans {
            if plan.is_steady() {
                continue;
            }
            info!(nodepool = %plan.node_pool, replicas = plan.counts.replicas, running = plan.counts.running,
                pending_disruption = plan.counts.pending_disruption, leaving = plan.counts.leaving,
                launch = plan.launch.len(), remove = plan.remove.len(), reason = %plan.reason, "static NodePool off its replicas");
            if !plan.launch.is_empty() {
                self.scale_up(ports, plan, now).await;
                planned.extend(plan.launch.iter().cloned());
            }
            if let Some(why) = &plan.held {
                self.announce_held(ports, plan, why, now).await;
            }
            for candidate in &plan.remove {
                let Some(claim) = gathered
                    .claims
                    .iter()
                    .find(|c| c.name == candidate.claim)
                    .cloned()
                else {
                    continue;
                };
                let Some(next) = scale_down(ports, gathered, &claim, plan, now).await? else {
                    continue;
                };
                ports
                    .record_decision(Decision {
                        at: now,
                        job: "provision".into(),
                        action: format!(
                            "take {} ({}) away: NodePool {} is above its replicas",
                            candidate.node.as_deref().unwrap_or("no node yet"),
                            claim.name,
                            plan.node_pool
                        ),
                        reason: format!("{}; chosen because {}", plan.reason, candidate.reason),
                        price_per_hour: claim.price_per_hour,
                    })
                    .await;
                if let Some(node) = &candidate.node {
                    ports
                        .emit(ClusterEvent {
                            kind: "Node".into(),
                            namespace: None,
                            name: node.clone(),
                            event_type: EventType::Normal,
                            reason: OVERPROVISIONED.into(),
                            message: format!(
                                "Taking the node away: NodePool {} has more nodes than its {} replicas ({})",
                                plan.node_pool, plan.counts.replicas, candidate.reason
                            ),
                        })
                        .await;
                }
                report
                    .scaled_down
                    .push(Disrupted::new(&claim, DisruptionCause::Overprovisioned));
                gathered.put_claim(next);
            }
            if !plan.remove.is_empty() {
                ports
                    .emit(nodepool_event(
                        &plan.node_pool,
                        EventType::Normal,
                        OVERPROVISIONED,
                        plan.reason.clone(),
                    ))
                    .await;
            }
        }
        Ok(report)
    }

    async fn scale_up(&self, ports: &Ports, plan: &StaticPlan, now: i64) {
        for c in &plan.launch {
            ports
                .record_decision(Decision {
                    at: now,
                    job: "provision".into(),
                    action: format!(
                        "launch a {} NodeClaim as {} in {} ({}) to keep its replicas",
                        c.node_pool, c.instance_type, c.zone, c.capacity_type
                    ),
                    reason: plan.reason.clone(),
                    price_per_hour: Some(c.price_per_hour),
                })
                .await;
        }
        ports
            .emit(nodepool_event(
                &plan.node_pool,
                EventType::Normal,
                SCALING_UP,
                plan.reason.clone(),
            ))
            .await;
    }

    /// A pool short of its replicas that cannot launch them: a warning, a decision and
    /// an Event, once per reason per window.
    async fn announce_held(&self, ports: &Ports, plan: &StaticPlan, why: &str, now: i64) {
        {
            let mut announced = self.announced.lock().unwrap_or_else(|e| e.into_inner());
            let repeat = announced
                .get(&plan.node_pool)
                .is_some_and(|(said, at)| said == why && now - at < HELD_EVENT_WINDOW_SECS);
            if repeat {
                return;
            }
            announced.insert(plan.node_pool.clone(), (why.to_string(), now));
        }
        warn!(nodepool = %plan.node_pool, replicas = plan.counts.replicas, reason = %why, "static NodePool cannot reach its replicas");
        ports
            .record_decision(Decision {
                at: now,
                job: "provision".into(),
                action: format!(
                    "hold launches of NodePool {} below its replicas",
                    plan.node_pool
                ),
                reason: plan.reason.clone(),
                price_per_hour: None,
            })
            .await;
        ports
            .emit(nodepool_event(
                &plan.node_pool,
                EventType::Warning,
                REPLICAS_HELD,
                plan.reason.clone(),
            ))
            .await;
    }
}

/// Puts `claim` in `Disrupting(Overprovisioned)`, its drain bounded by the pool's
/// terminationGracePeriod. `None` when another writer took the claim first.
async fn scale_down(
    ports: &Ports,
    gathered: &Gathered,
    claim: &NodeClaim,
    plan: &StaticPlan,
    now: i64,
) -> Result<Option<NodeClaim>> {
    let deadline = gathered
        .pools
        .iter()
        .find(|p| p.name == plan.node_pool)
        .and_then(|p| p.termination_grace_period)
        .map(|d| now.saturating_add(i64::try_from(d.as_secs()).unwrap_or(i64::MAX)));
    match terminate::disrupt(ports, claim, DisruptionCause::Overprovisioned, deadline).await {
        Ok(next) => {
            info!(claim = %claim.name, nodepool = %plan.node_pool, "static NodePool above its replicas: taking the claim away");
            Ok(Some(next))
        }
        // An interruption or a command took it first: it is on its way out already.
        Err(EngineError::Store(e)) if e.kind == ErrorKind::Conflict => Ok(None),
        Err(e) => Err(e),
    }
}

/// `status.nodes` of every NodePool: its claims that are not gone (launching,
/// running, or on their way out), as Karpenter counts the pool's nodes. Published
/// with the NodePools' conditions at the end of a tick.
pub(crate) fn node_counts(gathered: &Gathered) -> Vec<StatusFields> {
    gathered
        .state
        .node_pools
        .iter()
        .map(|pool| {
            let nodes = count_claims(pool, &gathered.claims).total();
            let mut fields = Map::new();
            fields.insert("nodes".into(), Value::from(nodes));
            StatusFields {
                kind: ObjectKind::NodePool,
                name: pool.name.clone(),
                fields,
            }
        })
        .collect()
}

fn nodepool_event(
    pool: &str,
    event_type: EventType,
    reason: &str,
    message: String,
) -> ClusterEvent {
    ClusterEvent {
        kind: "NodePool".into(),
        namespace: None,
        name: pool.to_string(),
        event_type,
        reason: reason.into(),
        message,
    }
}
