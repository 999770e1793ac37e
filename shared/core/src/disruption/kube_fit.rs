//! Whether kube-scheduler, not the planner, finds room for the pods a deletion moves.
//!
//! A consolidation that deletes a node counts its pods onto the room other nodes have
//! left, packed as the planner packs. kube-scheduler does not pack: it binds the evicted
//! pods one at a time, each to the least allocated node that takes it (its default
//! NodeResourcesFit scoring). Small pods then take the large holes a large pod needed,
//! the large pod stays pending, the provisioner launches a node for it, and the next
//! minute that node is consolidated the same way: a node launched and deleted a minute,
//! hour after hour. So a deletion also has to hold as kube-scheduler would place its
//! pods, smallest first (the order that leaves large pods worst off: the pods'
//! replacements come in whatever order the evictions ran).
//!
//! Resources, taints and node selection are modelled; inter-pod constraints are left to
//! the planner's solve, which has already placed the pods under them.

use std::collections::HashMap;

use crate::api::model::TaintEffect;
use crate::cluster::{ClusterSnapshot, Node, Pod};
use crate::resources::{CPU, MEMORY, Resources};
use crate::scheduling::requirements::Requirements;

use super::command::Move;

/// The room each schedulable node has left, as the decision's commands change it.
pub(super) struct KubeRoom<'a> {
    nodes: Vec<&'a Node>,
    free: Vec<Resources>,
    /// Gone or closed: never a destination.
    shut: Vec<bool>,
    index: HashMap<&'a str, usize>,
    pods: HashMap<String, &'a Pod>,
}

impl<'a> KubeRoom<'a> {
    /// The room of `snapshot`'s Ready, schedulable nodes not being deleted; `closed`
    /// nodes (being disrupted) take nothing.
    pub(super) fn new<'c>(
        snapshot: &'a ClusterSnapshot,
        closed: impl IntoIterator<Item = &'c str>,
    ) -> Self {
        let nodes: Vec<&Node> = snapshot.nodes.iter().collect();
        let index: HashMap<&str, usize> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.as_str(), i))
            .collect();
        let mut free: Vec<Resources> = nodes.iter().map(|n| n.allocatable.clone()).collect();
        for p in snapshot.pods.iter().filter(|p| !p.terminal) {
            if let Some(&i) = p.node_name.as_deref().and_then(|n| index.get(n)) {
                free[i].sub(&p.requests);
            }
        }
        let mut shut: Vec<bool> = nodes
            .iter()
            .map(|n| !n.ready || n.unschedulable || n.deleting)
            .collect();
        for name in closed {
            if let Some(&i) = index.get(name) {
                shut[i] = true;
            }
        }
        let pods = snapshot.pods.iter().map(|p| (p.key(), p)).collect();
        Self {
            nodes,
            free,
            shut,
            index,
            pods,
        }
    }

    /// A command is taken: its nodes are gone, and the pods it moves to nodes take
    /// their room there.
    pub(super) fn take<'n>(&mut self, nodes: impl IntoIterator<Item = &'n str>, moves: &[Move]) {
        for n in nodes {
            if let Some(&i) = self.index.get(n) {
                self.shut[i] = true;
            }
        }
        for m in moves {
            let Some(&i) = self.index.get(m.target.as_str()) else {
                continue;
            };
            for key in &m.pods {
                if let Some(p) = self.pods.get(key) {
                    self.free[i].sub(&p.requests);
                }
            }
        }
    }

    /// The first of `moving` (the pods of deleted nodes `leaving`) that kube-scheduler,
    /// binding them smallest first each to the least allocated node that takes it,
    /// finds no room for; `None` when every one is placed.
    pub(super) fn first_left_pending<'p>(
        &self,
        leaving: &[&str],
        moving: &[&'p Pod],
    ) -> Option<&'p Pod> {
        self.bind(leaving, moving).err()
    }

    /// Where kube-scheduler binds `moving` (the pods of deleted nodes `leaving`), as
    /// [`Self::first_left_pending`] places them: a move per node, in the nodes' order;
    /// `None` when one is left pending. What a deletion's pods take, in later commands'
    /// room and in the decision's record.
    pub(super) fn moves(&self, leaving: &[&str], moving: &[&Pod]) -> Option<Vec<Move>> {
        let bound = self.bind(leaving, moving).ok()?;
        let mut pods: Vec<Vec<String>> = vec![Vec::new(); self.nodes.len()];
        for (i, pod) in bound {
            pods[i].push(pod.key());
        }
        Some(
            pods.into_iter()
                .enumerate()
                .filter(|(_, pods)| !pods.is_empty())
                .map(|(i, pods)| Move {
                    target: self.nodes[i].name.clone(),
                    pods,
                })
                .collect(),
        )
    }

    /// Each of `moving`, smallest first, bound to the least allocated node that takes
    /// it (its index); the first pod that finds no room.
    fn bind<'p>(
        &self,
        leaving: &[&str],
        moving: &[&'p Pod],
    ) -> Result<Vec<(usize, &'p Pod)>, &'p Pod> {
        let mut shut = self.shut.clone();
        for n in leaving {
            if let Some(&i) = self.index.get(n) {
                shut[i] = true;
            }
        }
        let mut free = self.free.clone();
        let mut order: Vec<&Pod> = moving.to_vec();
        order.sort_by(|a, b| {
            let key = |p: &Pod| (p.requests.slot_milli(CPU), p.requests.slot_milli(MEMORY));
            key(a).cmp(&key(b)).then_with(|| a.key().cmp(&b.key()))
        });
        let mut bound = Vec::with_capacity(order.len());
        for pod in order {
            let mut best: Option<(usize, f64)> = None;
            for (i, node) in self.nodes.iter().enumerate() {
                if shut[i] || !pod.requests.fits_in(&free[i]) || !admits(node, pod) {
                    continue;
                }
                let score = least_allocated(node, &free[i]);
                if best.is_none_or(|(_, s)| score > s) {
                    best = Some((i, score));
                }
            }
            match best {
                Some((i, _)) => {
                    free[i].sub(&pod.requests);
                    bound.push((i, pod));
                }
                None => return Err(pod),
            }
        }
        Ok(bound)
    }
}

/// kube-scheduler's NodeResourcesFit LeastAllocated score (cpu and memory weighted
/// alike): the free share of each, summed.
fn least_allocated(node: &Node, free: &Resources) -> f64 {
    [CPU, MEMORY]
        .iter()
        .map(|&r| {
            let total = node.allocatable.slot_milli(r);
            if total <= 0 {
                0.0
            } else {
                free.slot_milli(r) as f64 / total as f64
            }
        })
        .sum()
}

/// kube-scheduler's filters but resources and other pods: NoSchedule and NoExecute
/// taints tolerated, node selector and required node affinity met.
fn admits(node: &Node, pod: &Pod) -> bool {
    let tolerated = node
        .taints
        .iter()
        .filter(|t| matches!(t.effect, TaintEffect::NoSchedule | TaintEffect::NoExecute))
        .all(|t| pod.tolerations.iter().any(|tol| tol.tolerates(t)));
    tolerated
        && pod
            .node_selector
            .iter()
            .all(|(k, v)| node.labels.get(k) == Some(v))
        && (pod.required_node_terms.is_empty()
            || pod.required_node_terms.iter().any(|term| {
                Requirements::from_node_requirements(term).matches_labels(&node.labels)
            }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;
    use crate::cluster::PodFields;
    use crate::testing::{node, pod};

    fn m5_large(name: &str) -> Node {
        node(
            name,
            "m5.large",
            "us-east-1a",
            "default",
            Catalog::embedded(),
        )
    }

    fn bound(name: &str, cpu: &str, memory: &str, on: &str) -> Pod {
        Pod::from(PodFields {
            node_name: Some(on.into()),
            marked_unschedulable: false,
            ..pod(name, cpu, memory).into_fields()
        })
    }

    fn snapshot(nodes: Vec<Node>, pods: Vec<Pod>) -> ClusterSnapshot {
        ClusterSnapshot {
            nodes,
            pods,
            ..ClusterSnapshot::default()
        }
    }

    #[test]
    fn small_pods_taking_the_large_hole_leave_the_large_pod_pending() {
        // y has 1.2 CPU left, z 1 CPU. Packed, the 1-CPU pod goes to z and the two
        // half-CPU pods to y. kube-scheduler, smallest first to the least allocated: a
        // half to y (0.7 left), the other to z (0.5 left), and the 1-CPU pod finds no
        // room.
        let snap = snapshot(
            vec![m5_large("x"), m5_large("y"), m5_large("z")],
            vec![
                bound("y-fill", "730m", "1Gi", "y"),
                bound("z-fill", "930m", "1Gi", "z"),
                bound("half-1", "500m", "256Mi", "x"),
                bound("half-2", "500m", "256Mi", "x"),
                bound("one", "1", "256Mi", "x"),
            ],
        );
        let room = KubeRoom::new(&snap, []);
        let moving: Vec<&Pod> = snap.pods[2..].iter().collect();
        let left = room.first_left_pending(&["x"], &moving);
        assert_eq!(left.map(|p| p.name.as_str()), Some("one"));
    }

    #[test]
    fn a_deletions_pods_are_bound_each_to_the_least_allocated_node_not_packed() {
        // m5.xlarge (3.92 CPU): y has 2 CPU left, z 1.2. Packed, both pods of x go to
        // y. kube-scheduler binds the first to y (the least allocated), the second to z
        // (1.2 left against y's 1).
        let xlarge = |name: &str| {
            node(
                name,
                "m5.xlarge",
                "us-east-1a",
                "default",
                Catalog::embedded(),
            )
        };
        let snap = snapshot(
            vec![xlarge("x"), xlarge("y"), xlarge("z")],
            vec![
                bound("a", "1", "128Mi", "x"),
                bound("b", "1", "128Mi", "x"),
                bound("y-fill", "1920m", "128Mi", "y"),
                bound("z-fill", "2720m", "128Mi", "z"),
            ],
        );
        let room = KubeRoom::new(&snap, []);
        let moving: Vec<&Pod> = snap.pods[..2].iter().collect();
        let moves = room.moves(&["x"], &moving).expect("both placed");
        assert_eq!(
            moves,
            vec![
                Move {
                    target: "y".into(),
                    pods: vec!["default/a".into()]
                },
                Move {
                    target: "z".into(),
                    pods: vec!["default/b".into()]
                },
            ]
        );
        let pending = bound("c", "1100m", "128Mi", "x");
        assert_eq!(
            room.moves(&["x"], &[moving[0], moving[1], &pending]),
            None,
            "the third finds no room: y and z have 1 and 0.2 left"
        );
    }

    #[test]
    fn pods_that_fit_in_any_order_are_all_placed_and_closed_nodes_take_none() {
        let snap = snapshot(
            vec![m5_large("x"), m5_large("y")],
            vec![
                bound("a", "500m", "256Mi", "x"),
                bound("b", "500m", "256Mi", "x"),
            ],
        );
        let moving: Vec<&Pod> = snap.pods.iter().collect();
        let room = KubeRoom::new(&snap, []);
        assert!(room.first_left_pending(&["x"], &moving).is_none());
        let room = KubeRoom::new(&snap, ["y"]);
        assert!(room.first_left_pending(&["x"], &moving).is_some());
    }

    #[test]
    fn a_pod_goes_only_where_its_node_selector_and_the_taints_let_it() {
        let mut y = m5_large("y");
        y.taints.push(crate::api::model::Taint {
            key: "dedicated".into(),
            value: Some("gpu".into()),
            effect: TaintEffect::NoSchedule,
        });
        let snap = snapshot(
            vec![m5_large("x"), y, m5_large("z")],
            vec![bound("a", "500m", "256Mi", "x")],
        );
        let moving: Vec<&Pod> = snap.pods.iter().collect();
        let room = KubeRoom::new(&snap, []);
        assert!(room.first_left_pending(&["x"], &moving).is_none());
        assert!(room.first_left_pending(&["x", "z"], &moving).is_some());
        let mut picky = snap.pods[0].clone();
        picky
            .node_selector
            .insert("kubernetes.io/hostname".into(), "nowhere".into());
        assert!(room.first_left_pending(&["x"], &[&picky]).is_some());
    }
}
