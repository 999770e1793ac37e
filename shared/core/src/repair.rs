//! Node repair: which nodes to repair because they are unhealthy, and how, decided as
//! data.
//!
//! **As Karpenter v1.15 does it** (the default): the AWS provider's repair policies
//! ([`policy`]) say, per node condition and reason, how long it is tolerated, how long
//! the drain may take, and the action — replace the node (a replacement first, then a
//! drain bounded by the policy's grace period, which PodDisruptionBudgets are honoured
//! within), or reboot it in place (a GPU fault a reboot clears, with
//! `RebootForRepair`). A node annotated `karpenter.sh/do-not-repair: "true"` is left
//! alone (said once it is due). Repairs are paced by the NodePool's disruption budgets
//! for the reason `Unhealthy` (nodes not yet initialized are not counted against them)
//! and ordered by urgency. A node that reboots a third time within 24 hours is replaced
//! instead. A NodePool that cannot stage a replacement (`limits.nodes` reached) holds
//! the repair, or with `TerminateFirstRepair` drains and terminates the node first.
//!
//! **As v1.14 did it** (`LegacyNodeRepair`): `Ready` `False`/`Unknown` for 30 minutes, or
//! a node monitoring agent condition `False` (`AcceleratedHardwareReady`: 10 minutes, the
//! others 30), any reason, and the repair is forceful: pods deleted at once, no budgets.
//!
//! Either way the AWS provider also acts on EC2's own status checks: an instance whose
//! instance or system status check has been `impaired` for two minutes is terminated at
//! once, held by nothing (the instance is broken either way).
//!
//! A NodePool's nodes are repaired at most 20% at a time (rounded up, as a PDB rounds a
//! percentage): a node past its toleration beyond that is held, with a reason for the
//! `NodeRepairBlocked` event, until a repair in progress finishes. Karpenter instead
//! stops repairing a pool altogether while more than 20% of its nodes are unhealthy;
//! nodewright keeps repairing them a fifth at a time, so a pool recovers from a wave of
//! failures without anyone stepping in, and a systemic fault (a bad image, a broken
//! network) still never takes down more than a fifth of a pool at once.

pub mod policy;

use crate::well_known::ANNOTATION_DO_NOT_REPAIR;
use std::collections::BTreeMap;

use crate::api::model::{DisruptionReason, NodePool};
use crate::cluster::{ConditionStatus, Node};
use crate::disruption::budget::allowance;
use crate::nodeclaim::{ClaimState, DisruptionCause, NodeClaim};
use crate::resources::{Resources, format_milli};
pub use policy::{RepairAction, RepairPolicies, RepairPolicy, Resolved, legacy_policies};

/// A node rebooted this many times for repair within [`REBOOT_WINDOW_SECS`] is
/// replaced instead of rebooted again.
pub const MAX_REBOOTS: usize = 2;
pub const REBOOT_WINDOW_SECS: i64 = 24 * 3600;

const MINUTE: i64 = 60;

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
        /// The condition's reason, when reported.
        reason: Option<String>,
        /// When the condition took that status.
        since: i64,
        /// When it became due for repair.
        due_at: i64,
    },
    /// EC2's status checks fail.
    Impaired { checks: Vec<String>, since: i64 },
}

impl Symptom {
    /// When the symptom has lasted long enough to act on.
    pub fn due_at(&self) -> i64 {
        match self {
            Symptom::Condition { due_at, .. } => *due_at,
            Symptom::Impaired { since, .. } => since + IMPAIRED_TOLERATION_SECS,
        }
    }

    /// `Ready=Unknown for 30m0s`, `AcceleratedHardwareReady=False (NVIDIAXID48Error)
    /// for 10m0s`, `EC2 status checks impaired (instance, system) for 2m0s`.
    pub fn describe(&self, now: i64) -> String {
        match self {
            Symptom::Condition {
                condition,
                status,
                reason,
                since,
                ..
            } => {
                let reason = reason
                    .as_deref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default();
                format!(
                    "{condition}={}{reason} for {}",
                    status.as_str(),
                    minutes(now - since)
                )
            }
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

    fn of(r: &Resolved) -> Symptom {
        Symptom::Condition {
            condition: r.condition.clone(),
            status: r.status,
            reason: (!r.reason.is_empty()).then(|| r.reason.clone()),
            since: r.since,
            due_at: r.due_at,
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

/// How a node is repaired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepairStep {
    /// Its pods deleted at once and the instance terminated: EC2's status checks
    /// failed, or the v1.14 way (`LegacyNodeRepair`).
    Forceful,
    /// Replaced: cordoned, a replacement launched for its pods, then drained within the
    /// grace period and terminated.
    Replace,
    /// Drained within the grace period and terminated before any replacement: its
    /// NodePool cannot stage one (`TerminateFirstRepair`).
    TerminateFirst,
    /// Rebooted in place (`RebootForRepair`).
    Reboot,
}

impl RepairStep {
    /// For the decision log: what is done to the node.
    pub fn describe(self) -> &'static str {
        match self {
            RepairStep::Forceful => "delete its pods and terminate the instance",
            RepairStep::Replace => "launch a replacement, then drain and terminate it",
            RepairStep::TerminateFirst => {
                "drain and terminate it first (its NodePool cannot stage a replacement)"
            }
            RepairStep::Reboot => "drain it and reboot the instance",
        }
    }
}

/// A claim to repair now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repair {
    pub claim: String,
    pub node: String,
    pub node_pool: String,
    pub symptom: Symptom,
    pub step: RepairStep,
    /// How long the drain may take (seconds): the policy's grace period, never longer
    /// than the NodePool's `terminationGracePeriod`; `None`: the NodePool's.
    pub grace_secs: Option<i64>,
    /// For the decision log and the events: the symptom, and the pool's share.
    pub reason: String,
}

/// A claim past its toleration that repair holds: the 20% limit, the NodePool's budget,
/// `do-not-repair`, or no way to stage a replacement.
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

/// How repair runs (the stack's `LegacyNodeRepair`, `RebootForRepair`,
/// `TerminateFirstRepair`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairSettings {
    /// The v1.14 way: legacy policies, forceful, no budgets.
    pub legacy: bool,
    pub policies: RepairPolicies,
    pub terminate_first: bool,
}

impl RepairSettings {
    /// The AWS provider's v1.15 policies.
    pub fn aws(reboot_for_repair: bool, terminate_first: bool) -> Self {
        RepairSettings {
            legacy: false,
            policies: RepairPolicies::aws(reboot_for_repair),
            terminate_first,
        }
    }

    /// The v1.14 way.
    pub fn legacy() -> Self {
        RepairSettings {
            legacy: true,
            ..Self::aws(false, false)
        }
    }
}

impl Default for RepairSettings {
    fn default() -> Self {
        Self::aws(false, false)
    }
}

/// What repair reads.
pub struct RepairInput<'a> {
    pub nodes: &'a [Node],
    /// Every claim the store holds.
    pub claims: &'a [NodeClaim],
    pub pools: &'a [NodePool],
    /// What `DescribeInstanceStatus` reports failing.
    pub impaired: &'a [ImpairedInstance],
    /// The capacity reservations the EC2NodeClasses select, with the instances each can
    /// still take: where a NodePool that allows only `reserved` capacity can stage a
    /// replacement.
    pub reservations: &'a [crate::catalog::Reservation],
    pub settings: &'a RepairSettings,
    pub now: i64,
}

/// The symptom a node shows the v1.14 way (`policies`: [`legacy_policies`]), if any:
/// the policy whose toleration ends first.
fn legacy_symptom(node: &Node, policies: &[RepairPolicy], now: i64) -> Option<Symptom> {
    policies
        .iter()
        .filter_map(|p| {
            let c = node.condition(&p.condition)?;
            // A condition without a transition time counts from the node's creation
            // (or from now): never earlier than what the object says.
            let since = c.since.or(node.created_at).unwrap_or(now);
            (c.status == p.status).then(|| Symptom::Condition {
                condition: p.condition.clone(),
                status: p.status,
                reason: c.reason.clone(),
                since,
                due_at: since + p.toleration_secs,
            })
        })
        .min_by_key(Symptom::due_at)
}

/// What a node shows: a symptom due now (with the v1.15 policies' decision), or one
/// that becomes due later.
enum Found {
    Due(Symptom, Option<Resolved>),
    Later(i64),
}

impl Found {
    fn of(symptom: Symptom, now: i64) -> Found {
        if symptom.due_at() > now {
            Found::Later(symptom.due_at())
        } else {
            Found::Due(symptom, None)
        }
    }
}

fn impaired_symptom(i: &ImpairedInstance, now: i64) -> Symptom {
    Symptom::Impaired {
        checks: i.checks.clone(),
        since: i.since.unwrap_or(now),
    }
}

/// One pool's claims as repair counts them.
#[derive(Default)]
struct Pool<'a> {
    /// Live claims with a node.
    nodes: u64,
    /// Their nodes' capacity, against `spec.limits` (a claim still launching is not
    /// counted: its capacity is known once its node registers).
    capacity: Resources,
    /// Of them, initialized (what budgets are a share of).
    initialized: usize,
    /// Claims being taken away for repair.
    repairing: u64,
    /// Claims rebooting for repair.
    rebooting: u64,
    /// Claims being taken away for any reason, or rebooting (against the budget).
    disrupting: usize,
    /// Claims of the pool in any state but terminal (against `limits.nodes`).
    claims: u64,
    /// Nodes showing a symptom, due or not.
    unhealthy: u64,
    due: Vec<Due<'a>>,
}

struct Due<'a> {
    claim: &'a NodeClaim,
    node: &'a Node,
    symptom: Symptom,
    /// `None`: EC2's status checks (forceful).
    resolved: Option<Resolved>,
}

/// The claims to repair now, and how.
pub fn plan_repairs(input: &RepairInput<'_>) -> RepairPlan {
    let by_name: BTreeMap<&str, &Node> = input.nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    let impaired_by_id: BTreeMap<&str, &ImpairedInstance> = input
        .impaired
        .iter()
        .map(|i| (i.instance_id.as_str(), i))
        .collect();
    let now = input.now;
    let settings = input.settings;
    let legacy = if settings.legacy {
        legacy_policies()
    } else {
        Vec::new()
    };
    let mut pools: BTreeMap<&str, Pool<'_>> = BTreeMap::new();
    let mut plan = RepairPlan::default();
    for claim in input.claims {
        if claim.state.is_terminal() {
            continue;
        }
        let pool = pools.entry(claim.node_pool.as_str()).or_default();
        pool.claims += 1;
        let Some(node) = claim
            .node_name
            .as_deref()
            .and_then(|n| by_name.get(n).copied())
        else {
            continue;
        };
        pool.nodes += 1;
        pool.capacity.add(&node.capacity);
        if claim.state.is_being_taken_away() {
            pool.disrupting += 1;
            if claim
                .disruption
                .as_ref()
                .is_some_and(|d| d.cause == DisruptionCause::Unhealthy)
            {
                pool.repairing += 1;
            }
            continue;
        }
        if claim.state == ClaimState::Initialized {
            pool.initialized += 1;
        }
        if claim.reboot.is_some() {
            pool.rebooting += 1;
            pool.disrupting += 1;
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
        let found = if let Some(i) = impaired {
            Some(Found::of(impaired_symptom(i, now), now))
        } else if settings.legacy {
            legacy_symptom(node, &legacy, now).map(|s| Found::of(s, now))
        } else {
            let matches = settings.policies.matches(node);
            match policy::resolve(&matches, now, claim.rebooted_at) {
                (Some(r), _) => Some(Found::Due(Symptom::of(&r), Some(r))),
                (None, next) => next.map(Found::Later),
            }
        };
        let Some(found) = found else { continue };
        pool.unhealthy += 1;
        let (symptom, resolved) = match found {
            Found::Due(symptom, resolved) => (symptom, resolved),
            Found::Later(at) => {
                plan.next_due = Some(plan.next_due.map_or(at, |t| t.min(at)));
                continue;
            }
        };
        pool.due.push(Due {
            claim,
            node,
            symptom,
            resolved,
        });
    }

    for (pool_name, mut pool) in pools {
        let node_pool = input.pools.iter().find(|p| p.name == pool_name);
        // Most urgent first: EC2's checks, then by score, then by name.
        let score = |d: &Due<'_>| d.resolved.as_ref().map_or(f64::INFINITY, |r| r.score);
        pool.due.sort_by(|a, b| {
            score(b)
                .total_cmp(&score(a))
                .then_with(|| a.symptom.due_at().cmp(&b.symptom.due_at()))
                .then_with(|| a.claim.name.cmp(&b.claim.name))
        });
        // Rounded up: one node of a pool of three may be repaired.
        let allowed = (pool.nodes * MAX_UNHEALTHY_PERCENT).div_ceil(100);
        let mut room = allowed.saturating_sub(pool.repairing + pool.rebooting);
        let mut budget = node_pool.map(|p| {
            allowance(
                p,
                Some(DisruptionReason::Unhealthy),
                now,
                pool.initialized,
                pool.disrupting,
            )
        });
        let share = format!(
            "{} of NodePool {pool_name:?}'s {} nodes unhealthy, {} being repaired",
            pool.unhealthy + pool.repairing + pool.rebooting,
            pool.nodes,
            pool.repairing + pool.rebooting
        );
        let mut staged = 0u64;
        let mut usage = pool.capacity.clone();
        // Instances of each reservation the replacements staged so far take.
        let mut reserved_by_staged = vec![0u32; input.reservations.len()];
        for due in pool.due {
            let Due {
                claim,
                node,
                symptom,
                resolved,
            } = due;
            let hold = |reason: String| HeldRepair {
                claim: claim.name.clone(),
                node: node.name.clone(),
                node_pool: pool_name.to_string(),
                symptom: symptom.clone(),
                reason,
            };
            let Some(resolved) = resolved else {
                // EC2's checks, or the v1.14 way.
                let forced = matches!(symptom, Symptom::Impaired { .. });
                if !forced && room == 0 {
                    plan.held
                        .push(hold(twenty_percent(&symptom, allowed, &share, now)));
                    continue;
                }
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
                    step: RepairStep::Forceful,
                    grace_secs: None,
                });
                continue;
            };
            let Some(node_pool) = node_pool else {
                plan.held.push(hold(format!(
                    "{}: repair requires the NodePool {pool_name:?} to construct and budget a safe replacement, and it does not exist",
                    symptom.describe(now)
                )));
                continue;
            };
            if node.do_not_repair {
                plan.held.push(hold(format!(
                    "{}: repair is blocked through the \"{ANNOTATION_DO_NOT_REPAIR}\" annotation",
                    symptom.describe(now)
                )));
                continue;
            }
            if room == 0 {
                plan.held
                    .push(hold(twenty_percent(&symptom, allowed, &share, now)));
                continue;
            }
            let initialized = claim.state == ClaimState::Initialized;
            if initialized
                && let Some(b) = budget.as_mut()
                && b.allowed == 0
            {
                plan.held.push(hold(format!(
                    "{}: the NodePool's disruption budget{} allows no more Unhealthy disruptions now",
                    symptom.describe(now),
                    b.limited_by
                        .map(|i| format!(" (spec.disruption.budgets[{i}])"))
                        .unwrap_or_default()
                )));
                continue;
            }
            let recent_reboots = claim
                .reboots
                .iter()
                .filter(|&&t| now - t < REBOOT_WINDOW_SECS)
                .count();
            let mut why = format!("node {} is unhealthy: {}", node.name, symptom.describe(now));
            let step = match resolved.action {
                RepairAction::Reboot if recent_reboots < MAX_REBOOTS => RepairStep::Reboot,
                action => {
                    if action == RepairAction::Reboot {
                        why.push_str(&format!(
                            "; rebooted {recent_reboots} times in 24 hours, so replaced"
                        ));
                    }
                    let blocked = limit_reached(node_pool, pool.claims + staged, &usage, node)
                        .map(Err)
                        .unwrap_or_else(|| {
                            reservation_for_replacement(
                                node_pool,
                                input.reservations,
                                &reserved_by_staged,
                            )
                        });
                    match blocked {
                        Ok(reservation) => {
                            staged += 1;
                            usage.add(&node.capacity);
                            if let Some(i) = reservation {
                                reserved_by_staged[i] += 1;
                            }
                            RepairStep::Replace
                        }
                        Err(limit) if settings.terminate_first => {
                            why.push_str(&format!(
                                "; NodePool {pool_name:?} {limit} and cannot stage a replacement"
                            ));
                            RepairStep::TerminateFirst
                        }
                        Err(limit) => {
                            plan.held.push(hold(format!(
                                "{}: NodePool {pool_name:?} {limit} and cannot stage a replacement (TerminateFirstRepair would drain and terminate the node first)",
                                symptom.describe(now)
                            )));
                            continue;
                        }
                    }
                }
            };
            room -= 1;
            if initialized && let Some(b) = budget.as_mut() {
                b.allowed = b.allowed.saturating_sub(1);
            }
            let pool_grace = node_pool
                .termination_grace_period
                .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
            let grace_secs = match (resolved.grace_secs, pool_grace) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            plan.repairs.push(Repair {
                claim: claim.name.clone(),
                node: node.name.clone(),
                node_pool: pool_name.to_string(),
                reason: format!(
                    "{why} (policy {} for {}={}{}; {share})",
                    resolved.action.as_str(),
                    resolved.condition,
                    resolved.status.as_str(),
                    if resolved.fallback {
                        ", the default fallback"
                    } else {
                        ""
                    },
                ),
                symptom,
                step,
                grace_secs,
            });
        }
    }
    plan
}

/// The limit of `pool` a replacement for `node` would pass, as written
/// (`limits.nodes 3`, `limits.cpu 100`), given its `claims` and the `usage` of its
/// nodes with the replacements staged so far. The replacement is counted at the
/// capacity of the node it replaces: it runs the same pods, and the type provisioning
/// picks is not known here.
fn limit_reached(pool: &NodePool, claims: u64, usage: &Resources, node: &Node) -> Option<String> {
    let nodes_after = i64::try_from(claims)
        .unwrap_or(i64::MAX)
        .saturating_add(1)
        .saturating_mul(1000);
    let (name, _, limit) = pool.limit_passed(nodes_after, |name| {
        usage
            .get_milli(name)
            .saturating_add(node.capacity.get_milli(name))
    })?;
    Some(if name == "nodes" {
        format!("is at limits.nodes {}", limit / 1000)
    } else {
        format!("is at limits.{name} {}", format_milli(&name, limit))
    })
}

/// Where a replacement in `pool` would launch when the pool allows only `reserved`
/// capacity: `Ok(Some(i))`, the first of `reservations` its EC2NodeClass selects, of a
/// type and zone its requirements allow, with an instance left after `taken` (what
/// replacements staged before it use); `Ok(None)` when the pool may launch on-demand
/// or spot; `Err` saying why not when every such reservation is full (Karpenter's
/// full-reservation case of TerminateFirstRepair). The pool's other requirements are
/// not checked against the reservation's type: a reservation they exclude still counts
/// as room, and the repair then waits on the replacement as any other.
fn reservation_for_replacement(
    pool: &NodePool,
    reservations: &[crate::catalog::Reservation],
    taken: &[u32],
) -> Result<Option<usize>, String> {
    use crate::catalog::CapacityType;
    use crate::scheduling::requirements::node_pool_allows;
    use crate::well_known::{LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_ZONE};
    let allows = |key: &str, value: &str| node_pool_allows(pool, key, value);
    // Without a capacity-type requirement a NodePool launches on-demand.
    let reserved_only = pool
        .requirements
        .iter()
        .any(|r| r.key == LABEL_CAPACITY_TYPE)
        && allows(LABEL_CAPACITY_TYPE, CapacityType::Reserved.as_str())
        && !allows(LABEL_CAPACITY_TYPE, CapacityType::OnDemand.as_str())
        && !allows(LABEL_CAPACITY_TYPE, CapacityType::Spot.as_str());
    if !reserved_only {
        return Ok(None);
    }
    let class = pool.node_class_ref.name.as_str();
    reservations
        .iter()
        .enumerate()
        .position(|(i, r)| {
            r.available > taken.get(i).copied().unwrap_or(0)
                && r.selected_by(class)
                && allows(LABEL_INSTANCE_TYPE, &r.instance_type)
                && allows(LABEL_ZONE, &r.zone)
        })
        .map(Some)
        .ok_or_else(|| {
            "allows only reserved capacity, every capacity reservation it can use is full,"
                .to_string()
        })
}

fn twenty_percent(symptom: &Symptom, allowed: u64, share: &str, now: i64) -> String {
    format!(
        "more than {MAX_UNHEALTHY_PERCENT}% of the nodes are unhealthy in the nodepool: {} is held until a repair in progress ends (at most {allowed} at once; {share})",
        symptom.describe(now)
    )
}

#[cfg(test)]
mod tests;
