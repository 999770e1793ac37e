//! The workload controllers of the simulated cluster: Deployments whose replica count
//! changes over time (creating pending pods, deleting surplus ones as a ReplicaSet
//! does), and DaemonSets that put one pod on every eligible node.
//!
//! Both edit the cluster directly, as controllers with their own API access do: pods
//! they delete are not recreated (scaling down), unlike pods evicted by a drain, which
//! `FakeCluster`'s recreation brings back pending.

use std::collections::{BTreeMap, HashMap, HashSet};

use nodewright_core::api::model::TaintEffect;
use nodewright_core::cluster::{
    DaemonSet, Node, Pod, PodDisruptionBudget, Toleration, TolerationOperator,
};
use nodewright_core::resources::Resources;

use crate::ports::ClusterState;

use super::binder::fits;

/// A Deployment: every replica is `template` (its labels select the replicas), and the
/// replica count follows `replicas` over time.
#[derive(Debug, Clone, PartialEq)]
pub struct Deployment {
    pub name: String,
    pub namespace: String,
    pub template: Pod,
    /// (seconds since the simulation started, replicas from then on), in time order.
    pub replicas: Vec<(i64, u32)>,
    pub budget: Option<PodDisruptionBudget>,
}

impl Deployment {
    /// The replica count wanted `elapsed` seconds into the simulation (0 before the
    /// first entry).
    pub fn replicas_at(&self, elapsed: i64) -> u32 {
        self.replicas
            .iter()
            .take_while(|(at, _)| *at <= elapsed)
            .last()
            .map(|(_, n)| *n)
            .unwrap_or(0)
    }

    /// Whether `pod` is one of this Deployment's replicas.
    pub fn selects(&self, pod: &Pod) -> bool {
        !pod.daemonset_owned
            && pod.namespace == self.namespace
            && self
                .template
                .labels
                .iter()
                .all(|(k, v)| pod.labels.get(k) == Some(v))
    }
}

/// What one reconciliation of a Deployment changes.
#[derive(Debug, Default, PartialEq)]
pub struct Scaling {
    pub created: Vec<Pod>,
    /// Keys (namespace/name) of pods to delete.
    pub deleted: Vec<String>,
}

/// Brings the Deployment's live replicas (not finished, not being deleted) to the count
/// wanted now. New pods are named `<deployment>-<suffix>` from `next_suffix`. Surplus
/// pods go in the ReplicaSet controller's order: pending before bound, then those on
/// the nodes with the most replicas of this Deployment, then the newest.
pub fn scale(
    deployment: &Deployment,
    state: &ClusterState,
    elapsed: i64,
    mut next_suffix: impl FnMut() -> String,
) -> Scaling {
    let wanted = deployment.replicas_at(elapsed) as usize;
    let live: Vec<(usize, &Pod)> = state
        .pods
        .iter()
        .enumerate()
        .filter(|(_, p)| deployment.selects(p) && !p.terminal && !p.terminating)
        .collect();
    let mut out = Scaling::default();
    if live.len() < wanted {
        for _ in live.len()..wanted {
            out.created.push(Pod {
                namespace: deployment.namespace.clone(),
                name: format!("{}-{}", deployment.name, next_suffix()),
                node_name: None,
                ..deployment.template.clone()
            });
        }
    } else if live.len() > wanted {
        let mut per_node: HashMap<&str, usize> = HashMap::new();
        for (_, p) in &live {
            if let Some(n) = &p.node_name {
                *per_node.entry(n.as_str()).or_default() += 1;
            }
        }
        let mut ranked = live;
        // Later in the list = created later (pods are appended).
        ranked.sort_by_key(|(i, p)| {
            (
                p.node_name.is_some(),
                std::cmp::Reverse(
                    p.node_name
                        .as_deref()
                        .and_then(|n| per_node.get(n))
                        .copied()
                        .unwrap_or(0),
                ),
                std::cmp::Reverse(*i),
            )
        });
        let surplus = ranked.len() - wanted;
        out.deleted = ranked
            .into_iter()
            .take(surplus)
            .map(|(_, p)| p.key())
            .collect();
    }
    out
}

/// The tolerations the DaemonSet controller adds to every DaemonSet pod.
fn daemonset_tolerations() -> Vec<Toleration> {
    let tolerate = |key: &str, effect: TaintEffect| Toleration {
        key: key.into(),
        operator: TolerationOperator::Exists,
        value: String::new(),
        effect: Some(effect),
    };
    vec![
        tolerate("node.kubernetes.io/not-ready", TaintEffect::NoExecute),
        tolerate("node.kubernetes.io/unreachable", TaintEffect::NoExecute),
        tolerate("node.kubernetes.io/disk-pressure", TaintEffect::NoSchedule),
        tolerate(
            "node.kubernetes.io/memory-pressure",
            TaintEffect::NoSchedule,
        ),
        tolerate("node.kubernetes.io/pid-pressure", TaintEffect::NoSchedule),
        tolerate("node.kubernetes.io/unschedulable", TaintEffect::NoSchedule),
        tolerate(
            "node.kubernetes.io/network-unavailable",
            TaintEffect::NoSchedule,
        ),
    ]
}

/// The DaemonSet pod for `node`: the template, bound to the node.
fn daemonset_pod(ds: &DaemonSet, node: &Node) -> Pod {
    let mut pod = ds.template.clone();
    pod.name = daemonset_pod_name(ds, node);
    pod.namespace = ds.namespace.clone();
    pod.node_name = Some(node.name.clone());
    pod.daemonset_owned = true;
    pod.tolerations.extend(daemonset_tolerations());
    pod
}

/// `<daemonset>-<node name's first label>`: one pod per DaemonSet and node.
pub fn daemonset_pod_name(ds: &DaemonSet, node: &Node) -> String {
    let host = node.name.split('.').next().unwrap_or(&node.name);
    format!("{}-{host}", ds.name)
}

/// DaemonSet pods to create: one for every DaemonSet on every Ready node it may run on
/// (its selector, affinity and tolerations, plus the controller's own tolerations) and
/// that has room for it, where it has none yet. A node still carrying taints the pod
/// does not tolerate (Karpenter's unregistered taint until the node is initialized)
/// gets its pod once they are gone.
pub fn daemonset_pods(state: &ClusterState) -> Vec<Pod> {
    if state.daemonsets.is_empty() {
        return Vec::new();
    }
    let existing: HashSet<(&str, &str)> = state
        .pods
        .iter()
        .filter(|p| p.daemonset_owned)
        .map(|p| (p.namespace.as_str(), p.name.as_str()))
        .collect();
    let mut used: BTreeMap<&str, Resources> = BTreeMap::new();
    for p in state.pods.iter().filter(|p| !p.terminal) {
        if let Some(n) = &p.node_name {
            used.entry(n.as_str()).or_default().add(&p.requests);
        }
    }
    let mut out = Vec::new();
    for node in state.nodes.iter().filter(|n| n.ready) {
        let mut left = node.allocatable.clone();
        if let Some(u) = used.get(node.name.as_str()) {
            left.sub(u);
        }
        for ds in &state.daemonsets {
            let name = daemonset_pod_name(ds, node);
            if existing.contains(&(ds.namespace.as_str(), name.as_str())) {
                continue;
            }
            let pod = daemonset_pod(ds, node);
            if fits(&pod, node) && pod.requests.fits_in(&left) {
                left.sub(&pod.requests);
                out.push(pod);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_core::api::model::Taint;
    use nodewright_core::catalog::Catalog;
    use nodewright_core::testing::{node, pod};

    fn web(replicas: Vec<(i64, u32)>) -> Deployment {
        let mut template = pod("web", "1", "1Gi");
        template.labels = BTreeMap::from([("app".to_string(), "web".to_string())]);
        Deployment {
            name: "web".into(),
            namespace: "default".into(),
            template,
            replicas,
            budget: None,
        }
    }

    fn suffixes() -> impl FnMut() -> String {
        let mut n = 0;
        move || {
            n += 1;
            format!("{n:05}")
        }
    }

    #[test]
    fn the_replica_count_follows_the_schedule() {
        let d = web(vec![(0, 10), (1800, 2)]);
        assert_eq!(d.replicas_at(0), 10);
        assert_eq!(d.replicas_at(1799), 10);
        assert_eq!(d.replicas_at(1800), 2);
        assert_eq!(web(vec![(60, 3)]).replicas_at(0), 0);
    }

    #[test]
    fn scaling_up_creates_pending_replicas_and_down_deletes_pending_ones_first() {
        let d = web(vec![(0, 3), (60, 1)]);
        let mut state = ClusterState::default();
        let up = scale(&d, &state, 0, suffixes());
        assert_eq!(up.created.len(), 3);
        assert!(up.created.iter().all(|p| p.is_pending() && d.selects(p)));
        state.pods = up.created;
        state.pods[0].node_name = Some("n1".into());
        state.pods[1].node_name = Some("n1".into());
        let down = scale(&d, &state, 60, suffixes());
        assert_eq!(
            down.deleted,
            vec![state.pods[2].key(), state.pods[1].key()],
            "the pending one, then the newest bound one"
        );
    }

    #[test]
    fn a_daemonset_pod_lands_on_every_ready_node_it_tolerates_once() {
        let catalog = Catalog::embedded();
        let mut ready = node("n1", "m5.large", "us-east-1a", "default", catalog);
        ready.ready = true;
        let mut tainted = node("n2", "m5.large", "us-east-1a", "default", catalog);
        tainted.ready = true;
        tainted.taints.push(Taint {
            key: "karpenter.sh/unregistered".into(),
            value: None,
            effect: TaintEffect::NoExecute,
        });
        let mut template = pod("agent", "100m", "128Mi");
        template.daemonset_owned = true;
        let mut state = ClusterState {
            nodes: vec![ready, tainted],
            daemonsets: vec![DaemonSet {
                namespace: "kube-system".into(),
                name: "agent".into(),
                template,
            }],
            ..ClusterState::default()
        };
        let pods = daemonset_pods(&state);
        assert_eq!(pods.len(), 1);
        assert_eq!(pods[0].node_name.as_deref(), Some("n1"));
        assert!(pods[0].daemonset_owned && !pods[0].is_pending());
        state.pods = pods;
        assert!(daemonset_pods(&state).is_empty(), "one per node");
    }
}
