//! Node repair: which nodes to replace because they are unhealthy, decided as data.
//!
//! Karpenter (`node/health`, with the AWS provider's repair policies) replaces a node
//! whose `Ready` condition has been `False` or `Unknown` for 30 minutes, or whose node
//! monitoring agent condition (`StorageReady`, `NetworkingReady`, `KernelReady`,
//! `ContainerRuntimeReady`: 30 minutes; `AcceleratedHardwareReady`: 10 minutes) has
//! been `False` that long. The AWS provider also acts on EC2's own status checks: an
//! instance whose instance or system status check has been `impaired` for two minutes
//! is terminated at once. Both are forceful: the pods on such a node are not running
//! anyway, so neither disruption budgets nor PodDisruptionBudgets hold the repair.
//!
//! A NodePool's nodes are repaired at most 20% at a time (rounded up, as a PDB rounds a
//! percentage): a node past its toleration beyond that is held, with a reason for the
//! `NodeRepairBlocked` event, until a repair in progress finishes. Karpenter instead
//! stops repairing a pool altogether while more than 20% of its nodes are unhealthy;
//! nodewright keeps replacing them a fifth at a time, so a pool recovers from a wave of
//! failures without anyone stepping in, and a systemic fault (a bad image, a broken
//! network) still never takes down more than a fifth of a pool at once. EC2 status
//! check failures are not held, as in Karpenter (the instance is broken either way).

use std::collections::BTreeMap;

use crate::cluster::{ConditionStatus, Node};
use crate::nodeclaim::{ClaimState, DisruptionCause, NodeClaim};

/// One condition that makes a node unhealthy once it has held for `toleration_secs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepairPolicy {
    pub condition: &'static str,
    pub status: ConditionStatus,
    pub toleration_secs: i64,
}

const MINUTE: i64 = 60;

/// The AWS provider's repair policies (kubelet `Ready`, and the EKS node monitoring
/// agent's conditions).
pub const REPAIR_POLICIES: [RepairPolicy; 7] = [
    RepairPolicy {
        condition: "Ready",
        status: ConditionStatus::False,
        toleration_secs: 30 * MINUTE,
    },
    RepairPolicy {
        condition: "Ready",
        status: ConditionStatus::Unknown,
        toleration_secs: 30 * MINUTE,
    },
    RepairPolicy {
        condition: "AcceleratedHardwareReady",
        status: ConditionStatus::False,
        toleration_secs: 10 * MINUTE,
    },
    RepairPolicy {
        condition: "StorageReady",
        status: ConditionStatus::False,
        toleration_secs: 30 * MINUTE,
    },
    RepairPolicy {
        condition: "NetworkingReady",
        status: ConditionStatus::False,
        toleration_secs: 30 * MINUTE,
    },
    RepairPolicy {
        condition: "KernelReady",
        status: ConditionStatus::False,
        toleration_secs: 30 * MINUTE,
    },
    RepairPolicy {
        condition: "ContainerRuntimeReady",
        status: ConditionStatus::False,
        toleration_secs: 30 * MINUTE,
    },
];

/// The condition types the policies read: what a node keeps of its conditions.
pub const WATCHED_CONDITIONS: [&str; 6] = [
    "Ready",
    "AcceleratedHardwareReady",
    "StorageReady",
    "NetworkingReady",
    "KernelReady",
    "ContainerRuntimeReady",
];

/// How long an EC2 status check must have failed before the instance is replaced.
pub const IMPAIRED_TOLERATION_SECS: i64 = 2 * MINUTE;

/// At most this share of a NodePool's nodes is repaired at once.
pub const MAX_UNHEALTHY_PERCENT: u64 = 20;

/// An instance whose EC2 status checks fail (`DescribeInstanceStatus`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImpairedInstance {
    pub instance_id: String,
    /// The failing checks: `instance`, `system`.
    pub checks: Vec<String>,
    /// The earliest `ImpairedSince` of the failing checks (Unix seconds), when EC2 says.
    pub since: Option<i64>,
}

/// Why a node is unhealthy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Symptom {
    /// A node condition matched a policy.
    Condition {
        condition: String,
        status: ConditionStatus,
        /// When the condition took that status.
        since: i64,
        toleration_secs: i64,
    },
    /// EC2's status checks fail.
    Impaired { checks: Vec<String>, since: i64 },
}

impl Symptom {
    /// When the symptom has lasted long enough to act on.
    pub fn due_at(&self) -> i64 {
        match self {
            Symptom::Condition {
                since,
                toleration_secs,
                ..
            } => since + toleration_secs,
            Symptom::Impaired { since, .. } => since + IMPAIRED_TOLERATION_SECS,
        }
    }

    /// `Ready=Unknown for 30m0s`, `EC2 status checks impaired (instance, system)`.
    pub fn describe(&self, now: i64) -> String {
        match self {
            Symptom::Condition {
                condition,
                status,
                since,
                ..
            } => format!(
                "{condition}={} for {}",
                status.as_str(),
                minutes(now - since)
            ),
            Symptom::Impaired { checks, since } => format!(
                "EC2 status checks impaired ({}) for {}",
                checks.join(", "),
                minutes(now - since)
            ),
        }
    }

    /// The metric label Karpenter uses for the condition (`ready`, `kernel_ready`, ...),
    /// or `instance_status` for EC2's checks.
    pub fn label(&self) -> String {
        match self {
            Symptom::Condition { condition, .. } => snake_case(condition),
            Symptom::Impaired { .. } => "instance_status".into(),
        }
    }
}

fn minutes(secs: i64) -> String {
    let secs = secs.max(0);
    format!("{}m{}s", secs / 60, secs % 60)
}

fn snake_case(s: &str) -> String {
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// A claim to replace now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repair {
    pub claim: String,
    pub node: String,
    pub node_pool: String,
    pub symptom: Symptom,
    /// For the decision log and the events: the symptom, and the pool's share.
    pub reason: String,
}

/// A claim past its toleration that is held back by the 20% limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldRepair {
    pub claim: String,
    pub node: String,
    pub node_pool: String,
    pub symptom: Symptom,
    /// The `NodeRepairBlocked` message.
    pub reason: String,
}

/// What repair decided on one view of the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RepairPlan {
    pub repairs: Vec<Repair>,
    pub held: Vec<HeldRepair>,
    /// The earliest time an unhealthy node not yet due becomes due.
    pub next_due: Option<i64>,
}

/// The symptom a node shows, if any: EC2's failing checks first (they are the faster
/// signal), else the policy whose toleration ends first.
pub fn symptom(node: &Node, impaired: Option<&ImpairedInstance>, now: i64) -> Option<Symptom> {
    if let Some(i) = impaired {
        return Some(Symptom::Impaired {
            checks: i.checks.clone(),
            since: i.since.unwrap_or(now),
        });
    }
    REPAIR_POLICIES
        .iter()
        .filter_map(|p| {
            let c = node.condition(p.condition)?;
            (c.status == p.status).then(|| Symptom::Condition {
                condition: p.condition.to_string(),
                status: p.status,
                // A condition without a transition time counts from the node's creation
                // (or from now): never earlier than what the object says.
                since: c.since.or(node.created_at).unwrap_or(now),
                toleration_secs: p.toleration_secs,
            })
        })
        .min_by_key(Symptom::due_at)
}

/// The claims to repair now. `claims` is every claim the store holds; `nodes` the
/// cluster's nodes; `impaired` what `DescribeInstanceStatus` reports failing.
pub fn plan_repairs(
    nodes: &[Node],
    claims: &[NodeClaim],
    impaired: &[ImpairedInstance],
    now: i64,
) -> RepairPlan {
    let by_name: BTreeMap<&str, &Node> = nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    let impaired_by_id: BTreeMap<&str, &ImpairedInstance> = impaired
        .iter()
        .map(|i| (i.instance_id.as_str(), i))
        .collect();

    #[derive(Default)]
    struct Pool<'a> {
        nodes: u64,
        repairing: u64,
        unhealthy: u64,
        due: Vec<(&'a NodeClaim, &'a Node, Symptom)>,
    }
    let mut pools: BTreeMap<&str, Pool<'_>> = BTreeMap::new();
    let mut plan = RepairPlan::default();
    for claim in claims {
        let Some(node) = claim
            .node_name
            .as_deref()
            .and_then(|n| by_name.get(n).copied())
        else {
            continue;
        };
        if claim.state.is_terminal() {
            continue;
        }
        let pool = pools.entry(claim.node_pool.as_str()).or_default();
        pool.nodes += 1;
        if claim.state.is_being_taken_away() {
            if claim
                .disruption
                .as_ref()
                .is_some_and(|d| d.cause == DisruptionCause::Unhealthy)
            {
                pool.repairing += 1;
            }
            continue;
        }
        if !matches!(
            claim.state,
            ClaimState::Registered | ClaimState::Initialized
        ) || node.deleting
        {
            continue;
        }
        let impaired = claim
            .instance_id
            .as_deref()
            .and_then(|id| impaired_by_id.get(id).copied());
        let Some(symptom) = symptom(node, impaired, now) else {
            continue;
        };
        pool.unhealthy += 1;
        if symptom.due_at() > now {
            plan.next_due = Some(
                plan.next_due
                    .map_or(symptom.due_at(), |t| t.min(symptom.due_at())),
            );
            continue;
        }
        pool.due.push((claim, node, symptom));
    }

    for (pool_name, mut pool) in pools {
        pool.due
            .sort_by(|a, b| (a.2.due_at(), &a.0.name).cmp(&(b.2.due_at(), &b.0.name)));
        // Rounded up: one node of a pool of three may be repaired.
        let allowed = (pool.nodes * MAX_UNHEALTHY_PERCENT).div_ceil(100);
        let mut room = allowed.saturating_sub(pool.repairing);
        for (claim, node, symptom) in pool.due {
            let forced = matches!(symptom, Symptom::Impaired { .. });
            let share = format!(
                "{} of NodePool {pool_name:?}'s {} nodes unhealthy, {} being repaired",
                pool.unhealthy + pool.repairing,
                pool.nodes,
                pool.repairing
            );
            if forced || room > 0 {
                if !forced {
                    room -= 1;
                }
                plan.repairs.push(Repair {
                    claim: claim.name.clone(),
                    node: node.name.clone(),
                    node_pool: pool_name.to_string(),
                    reason: format!(
                        "node {} is unhealthy: {} ({share})",
                        node.name,
                        symptom.describe(now)
                    ),
                    symptom,
                });
            } else {
                plan.held.push(HeldRepair {
                    claim: claim.name.clone(),
                    node: node.name.clone(),
                    node_pool: pool_name.to_string(),
                    reason: format!(
                        "more than {MAX_UNHEALTHY_PERCENT}% of the nodes are unhealthy in the nodepool: {} is held until a repair in progress ends (at most {allowed} at once; {share})",
                        symptom.describe(now)
                    ),
                    symptom,
                });
            }
        }
    }
    plan
}

#[cfg(test)]
mod tests;
