//! Static NodePools (`spec.replicas`, Karpenter v1.8's static capacity): how many
//! nodes to launch or take away so the pool keeps exactly `replicas`, and which.
//!
//! The counts come from the store's claims, as Karpenter's come from its NodePool
//! state: *running* claims (launching, launched, registered, initialized),
//! claims *pending disruption* (a disruption command's candidates, whose replacements
//! are on their way) and claims *leaving* (being drained or terminated).
//!
//! - Scale up: `replicas − (running + pending disruption)` new claims, at most what
//!   `limits.nodes` leaves (every claim of the pool counts against it, leaving ones
//!   too), each from the pool's requirements alone — no pods — with its cheapest
//!   compatible offerings first, as any claim ([`static_claims`]). Pending pods never
//!   open a claim in a static pool (the scheduler leaves such pools out), but pods may
//!   run on its nodes, and planning counts them as existing capacity.
//! - Scale down: `running − replicas` claims (pending disruption left out, so a
//!   replacement being launched is not taken for a surplus), chosen as Karpenter's
//!   static deprovisioning does: claims whose node has not registered yet, then empty
//!   nodes, then the lowest disruption cost, nodes with a do-not-disrupt pod last.
//!   They are taken away through the ordinary drain (PodDisruptionBudgets respected,
//!   `terminationGracePeriod` bounding it), outside disruption budgets.
//!
//! Pure: the caller passes the claims, the cluster and `now`.

use std::collections::HashMap;

use serde::Serialize;

use crate::api::model::{Ec2NodeClass, NodePool};
use crate::catalog::Catalog;
use crate::cluster::{ClusterSnapshot, Node, Pod};
use crate::disruption::rules::moving_pods;
use crate::nodeclaim::{ClaimState, NodeClaim};
use crate::pricing::Pricing;
use crate::provisioning::{PlannedNodeClaim, planned_claim_unnamed};
use crate::scheduling::scheduler::static_claims;
use crate::scheduling::{InFlightClaim, SchedulerInput};

/// A static pool's claims by where they stand.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StaticCounts {
    pub replicas: u32,
    /// Launching, Launched, Registered or Initialized, and not a disruption candidate.
    pub running: u32,
    /// Candidates of a disruption command (drift, expiration): their replacements
    /// come through the command.
    pub pending_disruption: u32,
    /// Being drained or terminated.
    pub leaving: u32,
}

impl StaticCounts {
    /// Every claim of the pool `limits.nodes` counts.
    pub fn total(&self) -> u32 {
        self.running + self.pending_disruption + self.leaving
    }
}

/// Why a claim was chosen to go when a static pool scales down, in the order chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum ScaleDownOrder {
    /// Launched, its node not registered yet.
    NotRegistered,
    /// Its node runs no pod that would move (DaemonSet and mirror pods aside).
    Empty,
    /// Its pods would move; the lowest disruption cost goes first.
    Busy,
    /// A pod on it (or the node) has `karpenter.sh/do-not-disrupt`: chosen last, and
    /// its drain waits for those pods up to `terminationGracePeriod`.
    DoNotDisrupt,
}

/// A claim a static pool's scale-down takes away.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScaleDownCandidate {
    pub claim: String,
    pub node: Option<String>,
    pub order: ScaleDownOrder,
    /// The eviction costs of the node's pods (Karpenter's ReschedulingCost), scaled by
    /// the lifetime the node has left.
    pub cost: f64,
    pub reason: String,
}

/// What a static pool needs now.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StaticPlan {
    pub node_pool: String,
    pub counts: StaticCounts,
    /// Claims to launch (no pods), cheapest offerings first.
    pub launch: Vec<PlannedNodeClaim>,
    /// Claims to take away, in the order chosen.
    pub remove: Vec<ScaleDownCandidate>,
    /// Why fewer claims launch than the pool is short of, if so.
    pub held: Option<String>,
    /// One sentence: the counts and what follows from them.
    pub reason: String,
}

impl StaticPlan {
    pub fn is_steady(&self) -> bool {
        self.launch.is_empty() && self.remove.is_empty() && self.held.is_none()
    }
}

/// The cluster a static pool is planned in.
pub struct StaticInput<'a> {
    /// Every claim the store records.
    pub claims: &'a [NodeClaim],
    /// The cluster as planning sees it (nodes of live claims, their pods).
    pub snapshot: &'a ClusterSnapshot,
    /// Every NodePool (static ones are planned; the rest only size DaemonSets).
    pub node_pools: &'a [NodePool],
    pub node_classes: &'a [Ec2NodeClass],
    pub catalog: &'a Catalog,
    pub pricing: &'a Pricing,
    /// Claims in flight, as the provisioning plan gets them.
    pub in_flight: &'a [InFlightClaim],
    pub now: i64,
}

/// A plan for every static pool of the input, in pool order.
pub fn plan_static_pools(input: &StaticInput<'_>) -> Vec<StaticPlan> {
    input
        .node_pools
        .iter()
        .filter(|p| p.is_static())
        .map(|p| plan_static_pool(p, input))
        .collect()
}

/// Where `pool`'s claims stand.
pub fn count_claims(pool: &NodePool, claims: &[NodeClaim]) -> StaticCounts {
    let mut counts = StaticCounts {
        replicas: pool.replicas.unwrap_or(0),
        ..StaticCounts::default()
    };
    for c in claims.iter().filter(|c| c.node_pool == pool.name) {
        if c.state.is_live_capacity() {
            counts.running += 1;
        } else if c.state == ClaimState::Disrupting
            && c.disruption.as_ref().is_some_and(|d| d.command.is_some())
        {
            counts.pending_disruption += 1;
        } else if c.state.is_being_taken_away() {
            counts.leaving += 1;
        }
    }
    counts
}

/// What `pool` (static) needs: claims to launch or to take away.
pub fn plan_static_pool(pool: &NodePool, input: &StaticInput<'_>) -> StaticPlan {
    let counts = count_claims(pool, input.claims);
    let replicas = counts.replicas;
    let active = counts.running + counts.pending_disruption;
    let summary = format!(
        "NodePool {:?} keeps {replicas} node(s) (spec.replicas); {} running, {} pending disruption, {} leaving",
        pool.name, counts.running, counts.pending_disruption, counts.leaving
    );
    let mut plan = StaticPlan {
        node_pool: pool.name.clone(),
        counts,
        launch: Vec::new(),
        remove: Vec::new(),
        held: None,
        reason: summary.clone(),
    };
    if active < replicas {
        let short = replicas - active;
        let room = pool
            .node_limit
            .map(|max| max.saturating_sub(u64::from(counts.total())));
        let wanted = room.map_or(short, |r| short.min(u32::try_from(r).unwrap_or(u32::MAX)));
        let scheduler = SchedulerInput {
            pods: &input.snapshot.pods,
            nodes: &input.snapshot.nodes,
            daemonsets: &input.snapshot.daemonsets,
            node_pools: input.node_pools,
            node_classes: input.node_classes,
            catalog: input.catalog,
            pricing: input.pricing,
            in_flight: input.in_flight,
        };
        plan.launch = if wanted == 0 {
            Vec::new()
        } else {
            static_claims(&scheduler, &pool.name, wanted as usize)
                .iter()
                .map(planned_claim_unnamed)
                .collect()
        };
        let launched = plan.launch.len() as u32;
        if launched < short {
            plan.held = Some(match room {
                Some(r) if u64::from(launched) >= r => format!(
                    "limits.nodes {} reached: {} claim(s) of the pool exist, {} more wanted",
                    pool.node_limit.unwrap_or(0),
                    counts.total() + launched,
                    short - launched
                ),
                _ => format!(
                    "no instance type the NodePool allows can be launched for {} more node(s) (offerings, limits or the EC2NodeClass rule them out)",
                    short - launched
                ),
            });
        }
        plan.reason = format!("{summary}: launching {launched}");
        if let Some(why) = &plan.held {
            plan.reason = format!("{}; {why}", plan.reason);
        }
    } else if counts.running > replicas {
        let excess = (counts.running - replicas) as usize;
        plan.remove = scale_down_candidates(pool, input, excess);
        plan.reason = format!("{summary}: taking {} away", plan.remove.len());
    }
    plan
}

/// The `excess` claims of `pool` to take away, Karpenter's order.
fn scale_down_candidates(
    pool: &NodePool,
    input: &StaticInput<'_>,
    excess: usize,
) -> Vec<ScaleDownCandidate> {
    let nodes: HashMap<&str, &Node> = input
        .snapshot
        .nodes
        .iter()
        .map(|n| (n.name.as_str(), n))
        .collect();
    let mut pods_by_node: HashMap<&str, Vec<&Pod>> = HashMap::new();
    for p in &input.snapshot.pods {
        if let Some(node) = p.node_name.as_deref() {
            pods_by_node.entry(node).or_default().push(p);
        }
    }
    let mut out: Vec<ScaleDownCandidate> = input
        .claims
        .iter()
        .filter(|c| c.node_pool == pool.name)
        // A claim being written before its launch cannot be taken away mid-call; the
        // next poll sees it launched.
        .filter(|c| {
            matches!(
                c.state,
                ClaimState::Launched | ClaimState::Registered | ClaimState::Initialized
            )
        })
        .map(|c| candidate(pool, c, &nodes, &pods_by_node, input.now))
        .collect();
    out.sort_by(|a, b| {
        a.order
            .cmp(&b.order)
            .then(a.cost.total_cmp(&b.cost))
            .then_with(|| a.claim.cmp(&b.claim))
    });
    out.truncate(excess);
    out
}

fn candidate(
    pool: &NodePool,
    claim: &NodeClaim,
    nodes: &HashMap<&str, &Node>,
    pods_by_node: &HashMap<&str, Vec<&Pod>>,
    now: i64,
) -> ScaleDownCandidate {
    let node = claim
        .node_name
        .as_deref()
        .and_then(|n| nodes.get(n).copied());
    let Some(node) = node.filter(|_| claim.state != ClaimState::Launched) else {
        return ScaleDownCandidate {
            claim: claim.name.clone(),
            node: claim.node_name.clone(),
            order: ScaleDownOrder::NotRegistered,
            cost: 0.0,
            reason: "its node has not registered yet".into(),
        };
    };
    let on_node = pods_by_node
        .get(node.name.as_str())
        .map(Vec::as_slice)
        .unwrap_or_default();
    let moving: Vec<&Pod> = moving_pods(on_node.iter().copied()).collect();
    let blocker = on_node
        .iter()
        .find(|p| p.do_not_disrupt_at(now))
        .map(|p| format!("pod {} has karpenter.sh/do-not-disrupt", p.key()))
        .or_else(|| {
            node.do_not_disrupt
                .then(|| "the node has karpenter.sh/do-not-disrupt".to_string())
        });
    let lifetime = match (pool.expire_after, node.created_at) {
        (Some(after), Some(created)) if after.as_secs() > 0 => {
            let total = after.as_secs_f64();
            ((total - (now - created) as f64) / total).clamp(0.0, 1.0)
        }
        _ => 1.0,
    };
    // Karpenter's ReschedulingCost: every pod bound to the node, at its eviction cost
    // (priority and pod-deletion-cost move it).
    let rescheduling: f64 = on_node
        .iter()
        .filter(|p| !p.terminal)
        .map(|p| p.eviction_cost())
        .sum();
    let cost = rescheduling * lifetime;
    let (order, reason) = match blocker {
        Some(why) => (
            ScaleDownOrder::DoNotDisrupt,
            format!("chosen last: {why}; its drain waits for it"),
        ),
        None if moving.is_empty() => (ScaleDownOrder::Empty, "the node is empty".to_string()),
        None => (
            ScaleDownOrder::Busy,
            format!(
                "{} pod(s) would move (disruption cost {:.2})",
                moving.len(),
                cost
            ),
        ),
    };
    ScaleDownCandidate {
        claim: claim.name.clone(),
        node: Some(node.name.clone()),
        order,
        cost,
        reason,
    }
}

#[cfg(test)]
mod tests;
