//! Which managed nodes may be disrupted, and what stops the others.
//!
//! A managed node is one labelled `karpenter.sh/nodepool` with a NodePool in the input;
//! other nodes are capacity pods may move to, never candidates. A candidate is Ready,
//! initialized (`karpenter.sh/initialized=true`) and not being deleted; voluntary
//! disruption is blocked by `karpenter.sh/do-not-disrupt` on the node or on any active
//! pod on it — DaemonSet and mirror pods included, as Karpenter's
//! `ValidatePodsDisruptable` — (`"true"`, or a duration not yet passed since the pod
//! started: [`PodFields::do_not_disrupt_at`]), and by a PodDisruptionBudget that allows no
//! disruption for a pod that would move.
//! Expiration is forceful: an expired node goes whatever blocks it (its drain still
//! honours the blockers, up to terminationGracePeriod).

use crate::well_known::{LABEL_INITIALIZED, TAINT_DISRUPTED};
use std::collections::HashMap;

use crate::api::model::NodePool;
use crate::cluster::{ClusterSnapshot, Node, Pod, PodDisruptionBudget};
use crate::well_known::LABEL_NODEPOOL;

use super::rules::{expired, moving_pods, requirements_drift};
use super::{RejectCode, Rejection};

/// What disruption knows about one managed node.
#[derive(Debug, Clone)]
pub struct NodeVerdict<'a> {
    pub node: &'a Node,
    pub pool: &'a NodePool,
    /// The pods that would move off it (see [`moving_pods`]).
    pub moving: Vec<&'a Pod>,
    /// `expireAfter` has passed since its creation.
    pub expired: bool,
    /// Why it no longer matches its NodePool, if it does not.
    pub drifted: Option<String>,
    /// What stops voluntary disruption (everything but expiration), if anything.
    pub blocked: Option<Rejection>,
    /// When it last changed, for consolidateAfter: the later of its Ready transition
    /// and the newest creation or start of a pod that would move.
    pub last_change: i64,
    /// Karpenter's `RescheduleDisruptionCost`, what the candidate order and Balanced
    /// scoring count: 1 for the node itself plus each moving pod's eviction cost
    /// ([`PodFields::eviction_cost`]), negatives as 0.
    pub reschedule_cost: f64,
}

impl NodeVerdict<'_> {
    pub fn empty(&self) -> bool {
        self.moving.is_empty()
    }
}

/// Every managed node of `snapshot`, with what disruption may do to it at `now`.
/// `well_known` names labels a node may lack without drifting (those the cloud sets).
pub fn evaluate<'a>(
    snapshot: &'a ClusterSnapshot,
    pools: &'a [NodePool],
    now: i64,
    well_known: &dyn Fn(&str) -> bool,
) -> Vec<NodeVerdict<'a>> {
    let pools_by_name: HashMap<&str, &NodePool> =
        pools.iter().map(|p| (p.name.as_str(), p)).collect();
    let mut pods_by_node: HashMap<&str, Vec<&Pod>> = HashMap::new();
    for pod in &snapshot.pods {
        if let Some(node) = pod.node_name.as_deref() {
            pods_by_node.entry(node).or_default().push(pod);
        }
    }
    // Static pools' nodes staying (not deleted, not cordoned for disruption): a pool
    // above its replicas is scaled down before any of its nodes drifts.
    let mut staying: HashMap<&str, u32> = HashMap::new();
    for node in &snapshot.nodes {
        if let Some(p) = node.labels.get(LABEL_NODEPOOL)
            && !node.deleting
            && !node.taints.iter().any(|t| t.key == TAINT_DISRUPTED)
        {
            *staying.entry(p.as_str()).or_default() += 1;
        }
    }
    let allowances = Allowances::new(snapshot);
    let mut out = Vec::new();
    for node in &snapshot.nodes {
        let Some(pool) = node
            .labels
            .get(LABEL_NODEPOOL)
            .and_then(|p| pools_by_name.get(p.as_str()).copied())
        else {
            continue;
        };
        let on_node = pods_by_node.remove(node.name.as_str()).unwrap_or_default();
        let moving: Vec<&Pod> = moving_pods(on_node.iter().copied()).collect();
        let reschedule_cost = reschedule_cost(&moving);
        let last_change = moving
            .iter()
            .flat_map(|p| [p.created_at, p.started_at])
            .flatten()
            .chain(node.ready_since)
            .chain(node.created_at)
            .max()
            .unwrap_or(now);
        let over_replicas = pool
            .replicas
            .filter(|&r| staying.get(pool.name.as_str()).copied().unwrap_or(0) > r);
        let blocked = match over_replicas {
            Some(replicas) => Some(Rejection::new(
                RejectCode::DisruptionBudget,
                format!(
                    "static NodePool \"{}\" is above its replicas ({replicas}): it scales down before its nodes are disrupted",
                    pool.name
                ),
            )),
            None => blocker(node, &on_node, &moving, &allowances, now),
        };
        out.push(NodeVerdict {
            node,
            pool,
            expired: node.created_at.is_some_and(|c| expired(pool, c, now)),
            drifted: requirements_drift(pool, &node.labels, well_known),
            blocked,
            moving,
            last_change,
            reschedule_cost,
        });
    }
    out
}

/// Karpenter's per-node disruption cost (`RescheduleDisruptionCost`), for the candidate
/// order and Balanced scoring:
/// 1 (draining a node costs something even when it is empty) plus, for each pod that
/// would move, its eviction cost with negatives counted as 0.
pub fn reschedule_cost(moving: &[&Pod]) -> f64 {
    1.0 + moving
        .iter()
        .map(|p| p.eviction_cost().max(0.0))
        .sum::<f64>()
}

/// Each PodDisruptionBudget's allowed disruptions, counted over the snapshot's pods
/// once per evaluation (not once per node that has a pod it selects: that is every
/// pod of the cluster for every node, quadratic in its size).
struct Allowances<'a> {
    snapshot: &'a ClusterSnapshot,
    counted: Vec<std::cell::OnceCell<i64>>,
    /// The budgets that may select a pod, found from the pod's labels instead of by
    /// trying every budget on every pod (also quadratic: at 10,000 nodes 250,000
    /// pods against 5,000 budgets). Each budget with `matchLabels` is filed under its
    /// namespace and one of them, which every pod it selects carries.
    by_label: HashMap<(&'a str, &'a str, &'a str), Vec<usize>>,
    /// Budgets with a selector but no `matchLabels`: tried on every pod.
    unfiled: Vec<usize>,
}

impl<'a> Allowances<'a> {
    fn new(snapshot: &'a ClusterSnapshot) -> Self {
        let mut by_label: HashMap<(&str, &str, &str), Vec<usize>> = HashMap::new();
        let mut unfiled = Vec::new();
        for (i, budget) in snapshot.pdbs.iter().enumerate() {
            // A budget without a selector selects nothing.
            let Some(selector) = &budget.selector else {
                continue;
            };
            match selector.match_labels.iter().next() {
                Some((key, value)) => by_label
                    .entry((budget.namespace.as_str(), key.as_str(), value.as_str()))
                    .or_default()
                    .push(i),
                None => unfiled.push(i),
            }
        }
        Allowances {
            snapshot,
            counted: vec![std::cell::OnceCell::new(); snapshot.pdbs.len()],
            by_label,
            unfiled,
        }
    }

    /// The budgets selecting `pod`, in the snapshot's order, each with the disruptions
    /// it allows now (its status when the API server wrote one, else counted as its
    /// controller does).
    fn selecting(&self, pod: &Pod) -> impl Iterator<Item = (&'a PodDisruptionBudget, i64)> + '_ {
        let by_label: &HashMap<(&str, &str, &str), Vec<usize>> = &self.by_label;
        let mut filed: Vec<usize> = self.unfiled.clone();
        for (key, value) in &pod.labels {
            if let Some(budgets) =
                by_label.get(&(pod.namespace.as_str(), key.as_str(), value.as_str()))
            {
                filed.extend_from_slice(budgets);
            }
        }
        // Each budget is filed once, so it is found once; sorted, they come in the
        // order every verdict names them.
        filed.sort_unstable();
        let pdbs = &self.snapshot.pdbs;
        let selected: Vec<usize> = filed
            .into_iter()
            .filter(|&i| pdbs[i].selects(pod))
            .collect();
        selected.into_iter().map(move |i| {
            let budget = &self.snapshot.pdbs[i];
            let allowed = budget.status_disruptions_allowed.unwrap_or_else(|| {
                *self.counted[i].get_or_init(|| budget.disruptions_allowed(&self.snapshot.pods))
            });
            (budget, allowed)
        })
    }
}

fn blocker(
    node: &Node,
    on_node: &[&Pod],
    moving: &[&Pod],
    allowances: &Allowances<'_>,
    now: i64,
) -> Option<Rejection> {
    let initialized = node
        .labels
        .get(LABEL_INITIALIZED)
        .is_some_and(|v| v == "true");
    if !node.ready || node.deleting || !initialized {
        let why = if node.deleting {
            "the node is being deleted"
        } else if !node.ready {
            "the node is not Ready"
        } else {
            "the node is not initialized (karpenter.sh/initialized)"
        };
        return Some(Rejection::new(RejectCode::NotReady, why));
    }
    if node.do_not_disrupt {
        return Some(Rejection::new(
            RejectCode::DoNotDisrupt,
            "the node has karpenter.sh/do-not-disrupt",
        ));
    }
    if let Some(pod) = on_node.iter().find(|p| p.do_not_disrupt_at(now)) {
        let kind = if pod.daemonset_owned {
            "DaemonSet pod"
        } else {
            "pod"
        };
        let until = match pod.do_not_disrupt_until() {
            Some(i64::MAX) if !pod.do_not_disrupt => " (a duration, and it has not started)",
            _ => "",
        };
        let reason = match pod.do_not_disrupt_until() {
            // The end as a time, not a countdown: the reason stays the same from run to
            // run, so the node is told once.
            Some(until) if !pod.do_not_disrupt && until != i64::MAX => format!(
                "{kind} {} has karpenter.sh/do-not-disrupt for {}s from its start, until {}",
                pod.key(),
                pod.do_not_disrupt_for.unwrap_or_default(),
                crate::interruption::format_rfc3339(until)
            ),
            _ => format!(
                "{kind} {} has karpenter.sh/do-not-disrupt{until}",
                pod.key()
            ),
        };
        return Some(Rejection::new(RejectCode::DoNotDisrupt, reason));
    }
    for pod in moving {
        for (pdb, allowed) in allowances.selecting(pod) {
            if allowed <= 0 {
                return Some(Rejection::new(
                    RejectCode::PodDisruptionBudget,
                    format!(
                        "PodDisruptionBudget {}/{} allows no disruption of pod {}",
                        pdb.namespace,
                        pdb.name,
                        pod.key()
                    ),
                ));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;
    use crate::cluster::{IntOrPercent, PodDisruptionBudget};
    use crate::testing::{general_purpose_pool, node, pod, selector};
    use std::collections::BTreeMap;

    const NOW: i64 = 2_000_000_000;

    fn managed(name: &str) -> Node {
        let mut n = node(
            name,
            "m5.large",
            "us-east-1a",
            "general-purpose",
            Catalog::embedded(),
        );
        n.labels.insert(LABEL_INITIALIZED.into(), "true".into());
        n.created_at = Some(NOW - 3600);
        n.ready_since = Some(NOW - 3500);
        n
    }

    fn on(node: &str, name: &str) -> Pod {
        let mut p = pod(name, "500m", "512Mi");
        p.node_name = Some(node.into());
        p.marked_unschedulable = false;
        p.created_at = Some(NOW - 600);
        p
    }

    fn verdicts(snapshot: &ClusterSnapshot) -> Vec<(String, Option<RejectCode>)> {
        let catalog = Catalog::embedded();
        let keys = catalog.label_keys();
        let pools = [general_purpose_pool()];
        evaluate(snapshot, &pools, NOW, &|k| keys.contains(k))
            .into_iter()
            .map(|v| (v.node.name.clone(), v.blocked.map(|b| b.code)))
            .collect()
    }

    /// The budgets found through the label index are exactly those `selects` picks
    /// when every budget is tried, in the snapshot's order.
    #[test]
    fn the_budgets_found_from_a_pods_labels_are_those_that_select_it() {
        use crate::cluster::{LabelSelector, LabelSelectorOperator, LabelSelectorRequirement};
        let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let budget =
            |name: &str, namespace: &str, selector: Option<LabelSelector>| PodDisruptionBudget {
                namespace: namespace.into(),
                name: name.into(),
                selector,
                min_available: Some(IntOrPercent::Int(1)),
                max_unavailable: None,
                status_disruptions_allowed: Some(1),
            };
        let two_labels = LabelSelector {
            match_labels: labels(&[("app", "web"), ("tier", "front")]),
            match_expressions: vec![],
        };
        let expression_only = LabelSelector {
            match_labels: BTreeMap::new(),
            match_expressions: vec![LabelSelectorRequirement {
                key: "tier".into(),
                operator: LabelSelectorOperator::In,
                values: vec!["back".into()],
            }],
        };
        let mixed = LabelSelector {
            match_labels: labels(&[("app", "api")]),
            match_expressions: vec![LabelSelectorRequirement {
                key: "tier".into(),
                operator: LabelSelectorOperator::NotIn,
                values: vec!["front".into()],
            }],
        };
        let snapshot = ClusterSnapshot {
            pdbs: vec![
                budget("web", "default", Some(selector("web"))),
                budget("web-front", "default", Some(two_labels)),
                budget("web-elsewhere", "other", Some(selector("web"))),
                budget("back", "default", Some(expression_only)),
                budget("everything", "default", Some(LabelSelector::default())),
                budget("nothing", "default", None),
                budget("api", "default", Some(mixed)),
                budget("web-again", "default", Some(selector("web"))),
            ],
            ..Default::default()
        };
        let allowances = Allowances::new(&snapshot);
        let shapes: [(&str, &[(&str, &str)]); 6] = [
            ("default", &[("app", "web"), ("tier", "front")]),
            ("default", &[("app", "web")]),
            ("other", &[("app", "web"), ("tier", "front")]),
            ("default", &[("app", "api"), ("tier", "back")]),
            ("default", &[("app", "api"), ("tier", "front")]),
            ("default", &[]),
        ];
        for (namespace, pairs) in shapes {
            let mut p = pod("p", "100m", "64Mi");
            p.namespace = namespace.into();
            p.labels = labels(pairs).into();
            let found: Vec<&str> = allowances
                .selecting(&p)
                .map(|(b, _)| b.name.as_str())
                .collect();
            let tried: Vec<&str> = snapshot
                .pdbs
                .iter()
                .filter(|b| b.selects(&p))
                .map(|b| b.name.as_str())
                .collect();
            assert_eq!(found, tried, "{namespace} {pairs:?}");
            assert!(!found.contains(&"nothing"));
        }
    }

    #[test]
    fn only_nodes_of_a_known_node_pool_are_candidates() {
        let mut foreign = managed("foreign");
        foreign
            .labels
            .insert(LABEL_NODEPOOL.into(), "someone-else".into());
        let mut unmanaged = managed("unmanaged");
        unmanaged.labels.remove(LABEL_NODEPOOL);
        let snapshot = ClusterSnapshot {
            nodes: vec![managed("n1"), foreign, unmanaged],
            ..Default::default()
        };
        assert_eq!(verdicts(&snapshot), [("n1".to_string(), None)]);
    }

    #[test]
    fn each_blocker_is_named_with_its_code() {
        let mut not_ready = managed("not-ready");
        not_ready.ready = false;
        let mut deleting = managed("deleting");
        deleting.deleting = true;
        let mut uninitialized = managed("uninitialized");
        uninitialized.labels.remove(LABEL_INITIALIZED);
        let mut annotated = managed("annotated");
        annotated.do_not_disrupt = true;
        let mut precious = on("with-pod", "batch-7");
        precious.do_not_disrupt = true;
        let mut guarded = on("guarded", "web-0");
        guarded.labels.insert("app".into(), "web".into());
        let snapshot = ClusterSnapshot {
            nodes: vec![
                not_ready,
                deleting,
                uninitialized,
                annotated,
                managed("with-pod"),
                managed("guarded"),
                managed("free"),
            ],
            pods: vec![precious, guarded, on("free", "idle-0")],
            pdbs: vec![PodDisruptionBudget {
                namespace: "default".into(),
                name: "web".into(),
                selector: Some(selector("web")),
                min_available: Some(IntOrPercent::Int(1)),
                max_unavailable: None,
                status_disruptions_allowed: None,
            }],
            ..Default::default()
        };
        assert_eq!(
            verdicts(&snapshot),
            [
                ("not-ready".to_string(), Some(RejectCode::NotReady)),
                ("deleting".to_string(), Some(RejectCode::NotReady)),
                ("uninitialized".to_string(), Some(RejectCode::NotReady)),
                ("annotated".to_string(), Some(RejectCode::DoNotDisrupt)),
                ("with-pod".to_string(), Some(RejectCode::DoNotDisrupt)),
                ("guarded".to_string(), Some(RejectCode::PodDisruptionBudget)),
                ("free".to_string(), None),
            ]
        );
    }

    #[test]
    fn daemonset_pods_leave_a_node_empty_and_the_last_change_is_the_newest_pod() {
        let mut agent = on("n1", "agent-x");
        agent.daemonset_owned = true;
        agent.created_at = Some(NOW - 10);
        let mut web = on("n2", "web-0");
        web.started_at = Some(NOW - 120);
        let snapshot = ClusterSnapshot {
            nodes: vec![managed("n1"), managed("n2")],
            pods: vec![agent, web],
            ..Default::default()
        };
        let catalog = Catalog::embedded();
        let keys = catalog.label_keys();
        let pools = [general_purpose_pool()];
        let v = evaluate(&snapshot, &pools, NOW, &|k| keys.contains(k));
        assert!(v[0].empty(), "a DaemonSet pod does not move");
        assert_eq!(v[0].last_change, NOW - 3500, "the Ready transition");
        assert!(!v[1].empty());
        assert_eq!(v[1].last_change, NOW - 120, "the pod's start");
    }

    #[test]
    fn a_daemonset_or_mirror_pod_with_do_not_disrupt_blocks_its_node() {
        let mut agent = on("n1", "agent-x");
        agent.daemonset_owned = true;
        agent.owner_daemonset = Some("agent".into());
        agent.do_not_disrupt = true;
        let mut proxy = on("n2", "kube-proxy-n2");
        proxy.mirror = true;
        proxy.do_not_disrupt = true;
        let mut finished = on("n3", "job-done");
        finished.terminal = true;
        finished.do_not_disrupt = true;
        let snapshot = ClusterSnapshot {
            nodes: vec![managed("n1"), managed("n2"), managed("n3")],
            pods: vec![agent, proxy, finished],
            ..Default::default()
        };
        assert_eq!(
            verdicts(&snapshot),
            [
                ("n1".to_string(), Some(RejectCode::DoNotDisrupt)),
                ("n2".to_string(), Some(RejectCode::DoNotDisrupt)),
                ("n3".to_string(), None),
            ]
        );
        let catalog = Catalog::embedded();
        let keys = catalog.label_keys();
        let pools = [general_purpose_pool()];
        let v = evaluate(&snapshot, &pools, NOW, &|k| keys.contains(k));
        let why = v[0].blocked.as_ref().unwrap().reason.clone();
        assert_eq!(
            why,
            "DaemonSet pod default/agent-x has karpenter.sh/do-not-disrupt"
        );
        assert!(v[0].empty(), "the DaemonSet pod still does not move");
    }

    #[test]
    fn a_do_not_disrupt_duration_protects_from_the_pods_start_until_it_passes() {
        let pod_for = |node: &str, secs: i64, started: Option<i64>| {
            let mut p = on(node, &format!("batch-{node}"));
            p.do_not_disrupt_for = Some(secs);
            p.started_at = started;
            p
        };
        let mut ignored = on("invalid", "batch-invalid");
        ignored.do_not_disrupt_invalid = Some(("yes".into(), "not a duration".into()));
        let snapshot = ClusterSnapshot {
            nodes: vec![
                managed("young"),
                managed("old"),
                managed("boundary"),
                managed("unstarted"),
                managed("invalid"),
            ],
            pods: vec![
                pod_for("young", 1800, Some(NOW - 600)),
                pod_for("old", 1800, Some(NOW - 3600)),
                pod_for("boundary", 1800, Some(NOW - 1800)),
                pod_for("unstarted", 1800, None),
                ignored,
            ],
            ..Default::default()
        };
        assert_eq!(
            verdicts(&snapshot),
            [
                ("young".to_string(), Some(RejectCode::DoNotDisrupt)),
                ("old".to_string(), None),
                ("boundary".to_string(), None),
                ("unstarted".to_string(), Some(RejectCode::DoNotDisrupt)),
                ("invalid".to_string(), None),
            ]
        );
        let catalog = Catalog::embedded();
        let keys = catalog.label_keys();
        let pools = [general_purpose_pool()];
        let v = evaluate(&snapshot, &pools, NOW, &|k| keys.contains(k));
        assert_eq!(
            v[0].blocked.as_ref().unwrap().reason,
            "pod default/batch-young has karpenter.sh/do-not-disrupt for 1800s from its start, until 2033-05-18T03:53:20Z"
        );
    }

    #[test]
    fn disruption_costs_count_priority_and_pod_deletion_cost() {
        let mut vip = on("n1", "vip");
        vip.deletion_cost = Some(i32::MAX);
        let mut low = on("n1", "low");
        low.priority = Some(-(1 << 26)); // 1 - 2 = -1: counts as 0 for Balanced
        let mut agent = on("n1", "agent");
        agent.daemonset_owned = true;
        agent.priority = Some(1 << 25); // 2
        let snapshot = ClusterSnapshot {
            nodes: vec![managed("n1")],
            pods: vec![vip, low, agent],
            ..Default::default()
        };
        let catalog = Catalog::embedded();
        let keys = catalog.label_keys();
        let pools = [general_purpose_pool()];
        let v = evaluate(&snapshot, &pools, NOW, &|k| keys.contains(k));
        assert_eq!(
            v[0].reschedule_cost,
            1.0 + 10.0 + 0.0,
            "the node, then moving pods at no less than 0"
        );
    }

    #[test]
    fn an_expired_node_is_expired_even_when_something_blocks_voluntary_disruption() {
        let mut old = managed("old");
        old.created_at = Some(NOW - 800 * 3600);
        old.do_not_disrupt = true;
        let snapshot = ClusterSnapshot {
            nodes: vec![old, managed("young")],
            ..Default::default()
        };
        let catalog = Catalog::embedded();
        let keys = catalog.label_keys();
        let pools = [general_purpose_pool()];
        let v = evaluate(&snapshot, &pools, NOW, &|k| keys.contains(k));
        assert!(v[0].expired, "720h default expireAfter");
        assert_eq!(
            v[0].blocked.as_ref().map(|b| b.code),
            Some(RejectCode::DoNotDisrupt)
        );
        assert!(!v[1].expired);
    }

    #[test]
    fn a_static_pool_above_its_replicas_blocks_disruption_until_it_has_scaled_down() {
        let mut pool = general_purpose_pool();
        pool.replicas = Some(1);
        let mut leaving = managed("leaving");
        leaving.taints.push(crate::api::model::Taint {
            key: TAINT_DISRUPTED.into(),
            value: None,
            effect: crate::api::model::TaintEffect::NoSchedule,
        });
        let catalog = Catalog::embedded();
        let keys = catalog.label_keys();
        let codes = |nodes: Vec<Node>| -> Vec<Option<RejectCode>> {
            let snapshot = ClusterSnapshot {
                nodes,
                ..Default::default()
            };
            evaluate(&snapshot, std::slice::from_ref(&pool), NOW, &|k| {
                keys.contains(k)
            })
            .into_iter()
            .map(|v| v.blocked.map(|b| b.code))
            .collect()
        };
        assert_eq!(
            codes(vec![managed("a"), managed("b")]),
            [Some(RejectCode::DisruptionBudget); 2]
        );
        // The second node is on its way out: the pool is at its replicas.
        assert_eq!(codes(vec![managed("a"), leaving])[0], None);
    }
}
