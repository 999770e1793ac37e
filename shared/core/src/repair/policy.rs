//! Repair policies as Karpenter v1.15 reads them: which node condition (type, status and
//! reason) makes a node unhealthy, after how long, how long its drain may take, how
//! urgent it is, and what to do — replace the node, or reboot it in place.
//!
//! A node condition is matched against the policies of its (type, status): every
//! policy whose reason pattern matches the condition's reason (unanchored, Go regexp
//! syntax) applies; when none does, the one policy without a pattern — the global
//! fallback, which must replace — applies instead, to any (type, status) some policy
//! names. The toleration counts from the condition's transition (never before the node
//! was created, nor before the node's last reboot ended). Of the policies whose
//! toleration has passed, the most disruptive action wins (replace over reboot; then
//! the higher priority, the earlier due, the smaller condition type), the drain is
//! bounded by the shortest grace period among them, and the node's urgency is the
//! highest `rank(priority) + minutes past due / 30`.

use std::collections::{BTreeMap, BTreeSet};

use regex_lite::Regex;

use crate::cluster::{ConditionStatus, Node};

/// What repair does to a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RepairAction {
    /// Reboot the instance in place (EC2 RebootInstances); the node keeps its pods'
    /// room and comes back.
    Reboot,
    /// Replace the node: a replacement first, then a drain bounded by the grace period.
    Replace,
}

impl RepairAction {
    /// Karpenter's names: `RebootNode`, `ReplaceNode`.
    pub fn as_str(self) -> &'static str {
        match self {
            RepairAction::Reboot => "RebootNode",
            RepairAction::Replace => "ReplaceNode",
        }
    }
}

/// One repair policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairPolicy {
    pub condition: String,
    pub status: ConditionStatus,
    /// A pattern over the condition's reason; empty for the global fallback.
    pub reason_pattern: String,
    pub toleration_secs: i64,
    /// How long the drain may take before the pods left are deleted; `None` inherits
    /// the NodePool's `terminationGracePeriod`.
    pub grace_secs: Option<i64>,
    /// 0..=100; higher is repaired first.
    pub priority: u8,
    pub action: RepairAction,
}

const MINUTE: i64 = 60;
/// Minutes past due a rank of urgency is worth (Karpenter's aging constant).
const AGING_SECS: f64 = 30.0 * 60.0;

/// The GPU faults a reboot clears (the node monitoring agent puts the XID in the
/// condition's reason).
pub const REBOOT_CLEARABLE_XIDS: &str =
    ".*XID(46|48|54|62|63|95|109|110|136|140|143|155|156|158).*";
/// The GPU faults only a new instance clears.
pub const FATAL_XIDS: &str = ".*XID(64|74|79|119|120).*";

fn policy(
    condition: &str,
    status: ConditionStatus,
    reason_pattern: &str,
    toleration_minutes: i64,
    grace_minutes: Option<i64>,
    action: RepairAction,
) -> RepairPolicy {
    RepairPolicy {
        condition: condition.into(),
        status,
        reason_pattern: reason_pattern.into(),
        toleration_secs: toleration_minutes * MINUTE,
        grace_secs: grace_minutes.map(|m| m * MINUTE),
        priority: 0,
        action,
    }
}

/// The AWS provider's policies (v1.15): kubelet `Ready` and the EKS node monitoring
/// agent's conditions, every one with a bounded drain. `reboot_for_repair` makes the
/// reboot-clearable GPU faults reboot the node (`RebootForRepair`); otherwise they
/// replace it, on the same timing.
pub fn aws_policies(reboot_for_repair: bool) -> Vec<RepairPolicy> {
    use ConditionStatus::{False, Unknown};
    use RepairAction::{Reboot, Replace};
    let gpu_reboot = if reboot_for_repair { Reboot } else { Replace };
    vec![
        policy("Ready", False, ".*", 30, Some(10), Replace),
        policy("Ready", Unknown, ".*", 30, Some(10), Replace),
        policy(
            "AcceleratedHardwareReady",
            False,
            REBOOT_CLEARABLE_XIDS,
            10,
            Some(5),
            gpu_reboot,
        ),
        policy(
            "AcceleratedHardwareReady",
            False,
            FATAL_XIDS,
            10,
            Some(5),
            Replace,
        ),
        // The global fallback: a GPU fault of no known family waits longer.
        policy("AcceleratedHardwareReady", False, "", 30, Some(10), Replace),
        policy("StorageReady", False, ".*", 30, Some(10), Replace),
        policy("NetworkingReady", False, ".*", 30, Some(10), Replace),
        policy("KernelReady", False, ".*", 30, Some(10), Replace),
        policy("ContainerRuntimeReady", False, ".*", 30, Some(10), Replace),
    ]
}

/// The AWS provider's policies before v1.15 (`LegacyNodeRepair`): one per condition,
/// any reason, replace, no bound of their own (the repair is forceful).
pub fn legacy_policies() -> Vec<RepairPolicy> {
    use ConditionStatus::{False, Unknown};
    use RepairAction::Replace;
    vec![
        policy("Ready", False, "", 30, None, Replace),
        policy("Ready", Unknown, "", 30, None, Replace),
        policy("AcceleratedHardwareReady", False, "", 10, None, Replace),
        policy("StorageReady", False, "", 30, None, Replace),
        policy("NetworkingReady", False, "", 30, None, Replace),
        policy("KernelReady", False, "", 30, None, Replace),
        policy("ContainerRuntimeReady", False, "", 30, None, Replace),
    ]
}

impl PartialEq for RepairPolicies {
    /// The same policies (their patterns compiled alike).
    fn eq(&self, other: &Self) -> bool {
        self.policies
            .iter()
            .map(|(p, _)| p)
            .eq(other.policies.iter().map(|(p, _)| p))
    }
}

impl Eq for RepairPolicies {}

/// A checked set of policies, ready to match nodes.
#[derive(Debug, Clone)]
pub struct RepairPolicies {
    policies: Vec<(RepairPolicy, Option<Regex>)>,
    /// Index of the global fallback.
    fallback: usize,
    /// Dense rank of each priority (0 for the lowest).
    ranks: BTreeMap<u8, usize>,
}

impl RepairPolicies {
    /// Checks the set as Karpenter does at start-up: every policy names a condition
    /// type, has a non-negative toleration and grace period, a priority of at most
    /// 100 and a pattern that compiles; exactly one policy has no pattern (the global
    /// fallback), and it replaces. The error names the policy at fault.
    pub fn new(policies: Vec<RepairPolicy>) -> Result<Self, String> {
        let mut compiled = Vec::with_capacity(policies.len());
        let mut fallback = None;
        for (i, p) in policies.into_iter().enumerate() {
            let at = format!("repair policy {i} ({}={})", p.condition, p.status.as_str());
            if p.condition.is_empty() {
                return Err(format!("repair policy {i}: the condition type is empty"));
            }
            if p.toleration_secs < 0 || p.grace_secs.is_some_and(|g| g < 0) {
                return Err(format!(
                    "{at}: the toleration and grace period must not be negative"
                ));
            }
            if p.priority > 100 {
                return Err(format!("{at}: priority {} is over 100", p.priority));
            }
            let regex = if p.reason_pattern.is_empty() {
                if let Some(other) = fallback {
                    return Err(format!(
                        "{at}: a second default fallback (no reason pattern); policy {other} is one already"
                    ));
                }
                fallback = Some(i);
                None
            } else {
                Some(
                    Regex::new(&p.reason_pattern)
                        .map_err(|e| format!("{at}: reason pattern {:?}: {e}", p.reason_pattern))?,
                )
            };
            compiled.push((p, regex));
        }
        let Some(fallback) = fallback else {
            return Err(
                "the repair policies need one default fallback (a policy with no reason pattern)"
                    .into(),
            );
        };
        if compiled[fallback].0.action != RepairAction::Replace {
            return Err(format!(
                "repair policy {fallback}: the default fallback must replace the node"
            ));
        }
        let ranks = compiled
            .iter()
            .map(|(p, _)| p.priority)
            .collect::<BTreeSet<u8>>()
            .into_iter()
            .enumerate()
            .map(|(rank, priority)| (priority, rank))
            .collect();
        Ok(RepairPolicies {
            policies: compiled,
            fallback,
            ranks,
        })
    }

    /// The AWS provider's set (see [`aws_policies`]).
    pub fn aws(reboot_for_repair: bool) -> Self {
        Self::new(aws_policies(reboot_for_repair)).expect("the AWS repair policies are valid")
    }

    /// Whether some policy names the condition's (type, status): what makes a node
    /// count as unhealthy for the 20% limit, whatever its reason or age.
    pub fn covers(&self, condition: &str, status: ConditionStatus) -> bool {
        self.policies
            .iter()
            .any(|(p, _)| p.condition == condition && p.status == status)
    }

    /// Every policy that applies to one of the node's conditions, due or not.
    pub fn matches(&self, node: &Node) -> Vec<PolicyMatch> {
        let created = node.created_at.unwrap_or(i64::MIN);
        let mut out = Vec::new();
        for c in &node.conditions {
            let group: Vec<usize> = (0..self.policies.len())
                .filter(|&i| {
                    let p = &self.policies[i].0;
                    p.condition == c.kind && p.status == c.status
                })
                .collect();
            if group.is_empty() {
                continue;
            }
            let reason = c.reason.as_deref().unwrap_or("");
            // A condition cannot predate its node; a missing time counts from it.
            let since = c.since.unwrap_or(created).max(created);
            let mut matched = false;
            for &i in &group {
                if self.policies[i]
                    .1
                    .as_ref()
                    .is_some_and(|re| re.is_match(reason))
                {
                    matched = true;
                    out.push(self.matched(i, c.kind.clone(), c.status, reason, since));
                }
            }
            if !matched {
                out.push(self.matched(self.fallback, c.kind.clone(), c.status, reason, since));
            }
        }
        out
    }

    fn matched(
        &self,
        i: usize,
        condition: String,
        status: ConditionStatus,
        reason: &str,
        since: i64,
    ) -> PolicyMatch {
        let p = &self.policies[i].0;
        PolicyMatch {
            condition,
            status,
            reason: reason.to_string(),
            since,
            toleration_secs: p.toleration_secs,
            grace_secs: p.grace_secs,
            priority: p.priority,
            rank: self.ranks[&p.priority],
            action: p.action,
            fallback: i == self.fallback,
        }
    }
}

/// One policy applied to one of a node's conditions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyMatch {
    pub condition: String,
    pub status: ConditionStatus,
    pub reason: String,
    /// When the condition took its status (Unix seconds).
    pub since: i64,
    pub toleration_secs: i64,
    pub grace_secs: Option<i64>,
    pub priority: u8,
    rank: usize,
    pub action: RepairAction,
    /// The global fallback applied (no specific policy matched the reason).
    pub fallback: bool,
}

impl PolicyMatch {
    /// When the toleration ends, counted from no earlier than `not_before` (the end of
    /// the node's last reboot).
    pub fn due_at(&self, not_before: Option<i64>) -> i64 {
        let start = not_before.map_or(self.since, |t| t.max(self.since));
        start.saturating_add(self.toleration_secs)
    }
}

/// What the due policies of one node decide.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    pub action: RepairAction,
    /// The condition behind the action, its status and reason.
    pub condition: String,
    pub status: ConditionStatus,
    pub reason: String,
    pub fallback: bool,
    /// When the deciding condition's policy became due.
    pub due_at: i64,
    /// When the deciding condition took its status.
    pub since: i64,
    /// The shortest grace period among the due policies.
    pub grace_secs: Option<i64>,
    /// Higher is repaired first.
    pub score: f64,
}

/// The decision of the matches due at `now`, or `None` when none is; and the earliest
/// time one not yet due becomes due.
pub fn resolve(
    matches: &[PolicyMatch],
    now: i64,
    not_before: Option<i64>,
) -> (Option<Resolved>, Option<i64>) {
    let mut out: Option<(Resolved, u8)> = None;
    let mut next_due: Option<i64> = None;
    for m in matches {
        let due = m.due_at(not_before);
        if due > now {
            next_due = Some(next_due.map_or(due, |t| t.min(due)));
            continue;
        }
        let score = m.rank as f64 + (now - due) as f64 / AGING_SECS;
        let Some((r, priority)) = out.as_mut() else {
            out = Some((
                Resolved {
                    action: m.action,
                    condition: m.condition.clone(),
                    status: m.status,
                    reason: m.reason.clone(),
                    fallback: m.fallback,
                    due_at: due,
                    since: m.since,
                    grace_secs: m.grace_secs,
                    score,
                },
                m.priority,
            ));
            continue;
        };
        r.score = r.score.max(score);
        r.grace_secs = match (r.grace_secs, m.grace_secs) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let selected = if m.action != r.action {
            m.action > r.action
        } else if m.priority != *priority {
            m.priority > *priority
        } else if due != r.due_at {
            due < r.due_at
        } else {
            m.condition < r.condition
        };
        if selected {
            r.action = m.action;
            r.condition = m.condition.clone();
            r.status = m.status;
            r.reason = m.reason.clone();
            r.fallback = m.fallback;
            r.due_at = due;
            r.since = m.since;
            *priority = m.priority;
        }
    }
    (out.map(|(r, _)| r), next_due)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::NodeCondition;

    const NOW: i64 = 1_800_000_000;

    fn gpu_node(reason: &str, since: i64) -> Node {
        Node {
            name: "gpu-0".into(),
            created_at: Some(NOW - 86_400),
            conditions: vec![NodeCondition {
                kind: "AcceleratedHardwareReady".into(),
                status: ConditionStatus::False,
                since: Some(since),
                reason: Some(reason.into()),
            }],
            ..Node::default()
        }
    }

    fn decide(policies: &RepairPolicies, node: &Node, now: i64) -> Option<Resolved> {
        resolve(&policies.matches(node), now, None).0
    }

    #[test]
    fn the_aws_policies_and_the_legacy_ones_are_what_the_provider_ships() {
        for reboot in [false, true] {
            let set = aws_policies(reboot);
            assert_eq!(set.len(), 9);
            assert!(
                set.iter().all(|p| p.grace_secs.is_some()),
                "every policy bounds its drain"
            );
            RepairPolicies::new(set).unwrap();
        }
        let legacy = legacy_policies();
        assert_eq!(legacy.len(), 7);
        assert!(
            RepairPolicies::new(legacy).is_err(),
            "the legacy set has a fallback per condition: only the legacy path reads it"
        );
    }

    #[test]
    fn a_reboot_clearable_gpu_fault_reboots_at_ten_minutes_only_with_the_gate() {
        let node = gpu_node("NVIDIAXID48Error", NOW - 10 * MINUTE);
        let on = RepairPolicies::aws(true);
        let r = decide(&on, &node, NOW).unwrap();
        assert_eq!(r.action, RepairAction::Reboot);
        assert_eq!(r.grace_secs, Some(5 * MINUTE));
        assert!(!r.fallback);
        assert_eq!(decide(&on, &node, NOW - 1), None, "at 9m59s nothing is due");
        let off = RepairPolicies::aws(false);
        assert_eq!(
            decide(&off, &node, NOW).unwrap().action,
            RepairAction::Replace
        );
    }

    #[test]
    fn a_reboot_clearable_fault_still_reboots_after_thirty_minutes_and_a_fatal_one_replaces() {
        let set = RepairPolicies::aws(true);
        let late = gpu_node("NVIDIAXID158Error", NOW - 31 * MINUTE);
        assert_eq!(
            decide(&set, &late, NOW).unwrap().action,
            RepairAction::Reboot
        );
        let fatal = gpu_node("NVIDIAXID79Error", NOW - 10 * MINUTE);
        let r = decide(&set, &fatal, NOW).unwrap();
        assert_eq!(
            (r.action, r.grace_secs),
            (RepairAction::Replace, Some(5 * MINUTE))
        );
    }

    #[test]
    fn an_unknown_gpu_fault_takes_the_fallback_at_thirty_minutes_with_ten_to_drain() {
        let set = RepairPolicies::aws(true);
        for reason in ["NVIDIAXID142Error", "DCGMHealthFailure"] {
            let node = gpu_node(reason, NOW - 30 * MINUTE);
            let r = decide(&set, &node, NOW).unwrap();
            assert!(r.fallback, "{reason}");
            assert_eq!(
                (r.action, r.grace_secs),
                (RepairAction::Replace, Some(10 * MINUTE))
            );
            assert_eq!(decide(&set, &node, NOW - 1), None, "{reason}");
        }
    }

    #[test]
    fn replace_beats_reboot_and_the_shortest_grace_period_wins() {
        let set = RepairPolicies::aws(true);
        let mut node = gpu_node("NVIDIAXID48Error", NOW - 40 * MINUTE);
        node.conditions.push(NodeCondition {
            kind: "Ready".into(),
            status: ConditionStatus::False,
            since: Some(NOW - 35 * MINUTE),
            reason: Some("KubeletNotReady".into()),
        });
        let r = decide(&set, &node, NOW).unwrap();
        assert_eq!(r.action, RepairAction::Replace);
        assert_eq!(r.condition, "Ready");
        assert_eq!(
            r.grace_secs,
            Some(5 * MINUTE),
            "the GPU policy's 5m bounds the drain"
        );
        // Score: rank 0 + the oldest due policy's age over 30 minutes (XID48: due 30m ago).
        assert!((r.score - 1.0).abs() < 1e-9, "{}", r.score);
    }

    #[test]
    fn tolerations_restart_when_a_reboot_ends_and_a_condition_never_predates_its_node() {
        let set = RepairPolicies::aws(true);
        let node = gpu_node("NVIDIAXID48Error", NOW - 60 * MINUTE);
        let matches = set.matches(&node);
        assert!(resolve(&matches, NOW, Some(NOW - 5 * MINUTE)).0.is_none());
        assert_eq!(
            resolve(&matches, NOW, Some(NOW - 5 * MINUTE)).1,
            Some(NOW + 5 * MINUTE)
        );
        let mut young = gpu_node("NVIDIAXID48Error", NOW - 60 * MINUTE);
        young.created_at = Some(NOW - 5 * MINUTE);
        assert!(
            decide(&set, &young, NOW).is_none(),
            "counted from the node's creation"
        );
    }

    #[test]
    fn conditions_no_policy_names_are_not_matched() {
        let set = RepairPolicies::aws(false);
        let mut node = gpu_node("x", NOW - 86_000);
        node.conditions[0].kind = "BadNode".into();
        assert!(set.matches(&node).is_empty());
        assert!(set.covers("Ready", ConditionStatus::Unknown));
        assert!(!set.covers("KernelReady", ConditionStatus::Unknown));
    }

    #[test]
    fn an_invalid_policy_set_is_refused_naming_the_policy() {
        let mut two_fallbacks = aws_policies(false);
        two_fallbacks[0].reason_pattern.clear();
        assert!(
            RepairPolicies::new(two_fallbacks)
                .unwrap_err()
                .contains("second default fallback")
        );
        let mut rebooting_fallback = aws_policies(false);
        rebooting_fallback[4].action = RepairAction::Reboot;
        assert!(
            RepairPolicies::new(rebooting_fallback)
                .unwrap_err()
                .contains("must replace")
        );
        let mut bad_pattern = aws_policies(false);
        bad_pattern[2].reason_pattern = "XID(".into();
        assert!(
            RepairPolicies::new(bad_pattern)
                .unwrap_err()
                .starts_with("repair policy 2")
        );
        let mut no_fallback = aws_policies(false);
        no_fallback.remove(4);
        assert!(
            RepairPolicies::new(no_fallback)
                .unwrap_err()
                .contains("one default fallback")
        );
        let mut priority = aws_policies(false);
        priority[1].priority = 101;
        assert!(
            RepairPolicies::new(priority)
                .unwrap_err()
                .contains("over 100")
        );
    }

    #[test]
    fn higher_priority_ranks_first_and_ages_at_one_rank_per_thirty_minutes() {
        let mut set = aws_policies(false);
        set[5].priority = 50; // StorageReady
        let set = RepairPolicies::new(set).unwrap();
        let node = |kind: &str| Node {
            created_at: Some(NOW - 86_400),
            conditions: vec![NodeCondition {
                kind: kind.into(),
                status: ConditionStatus::False,
                since: Some(NOW - 30 * MINUTE),
                reason: None,
            }],
            ..Node::default()
        };
        let storage = decide(&set, &node("StorageReady"), NOW).unwrap();
        let kernel = decide(&set, &node("KernelReady"), NOW + 30 * MINUTE).unwrap();
        assert_eq!(storage.score, 1.0);
        assert_eq!(kernel.score, 1.0, "30 minutes of age is worth one rank");
    }
}
