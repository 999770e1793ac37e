//! Which managed nodes may be disrupted, and what stops the others.
//!
//! A managed node is one labelled `karpenter.sh/nodepool` with a NodePool in the input;
//! other nodes are capacity pods may move to, never candidates. A candidate is Ready,
//! initialized (`karpenter.sh/initialized=true`) and not being deleted; voluntary
//! disruption is blocked by `karpenter.sh/do-not-disrupt` on the node or on a pod that
//! would move, and by a PodDisruptionBudget that allows no disruption for such a pod.
//! Expiration is forceful: an expired node goes whatever blocks it (its drain still
//! honours the blockers, up to terminationGracePeriod).

use std::collections::HashMap;

use crate::api::model::NodePool;
use crate::catalog::LABEL_NODEPOOL;
use crate::cluster::{ClusterSnapshot, Node, Pod};

use super::rules::{expired, moving_pods, requirements_drift};
use super::{RejectCode, Rejection};

pub const LABEL_INITIALIZED: &str = "karpenter.sh/initialized";
/// The taint on a node being taken away (Karpenter's).
const TAINT_DISRUPTED: &str = "karpenter.sh/disrupted";

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
        let moving: Vec<&Pod> = moving_pods(on_node).collect();
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
            None => blocker(node, &moving, snapshot),
        };
        out.push(NodeVerdict {
            node,
            pool,
            expired: node.created_at.is_some_and(|c| expired(pool, c, now)),
            drifted: requirements_drift(pool, &node.labels, well_known),
            blocked,
            moving,
            last_change,
        });
    }
    out
}

fn blocker(node: &Node, moving: &[&Pod], snapshot: &ClusterSnapshot) -> Option<Rejection> {
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
    if let Some(pod) = moving.iter().find(|p| p.do_not_disrupt) {
        return Some(Rejection::new(
            RejectCode::DoNotDisrupt,
            format!("pod {} has karpenter.sh/do-not-disrupt", pod.key()),
        ));
    }
    for pod in moving {
        for pdb in snapshot.pdbs.iter().filter(|b| b.selects(pod)) {
            let allowed = pdb
                .status_disruptions_allowed
                .unwrap_or_else(|| pdb.disruptions_allowed(&snapshot.pods));
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
