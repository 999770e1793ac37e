//! The cluster as planning sees it while NodeClaims are in motion: which taints go
//! away on their own, which capacity is going and which is coming. The provisioner
//! plans on this view; the disruption decisions need the same one.

use crate::well_known::TAINT_UNREGISTERED;
use std::collections::{HashMap, HashSet};

use crate::api::model::{NodePool, Taint, TaintEffect};
use crate::catalog::CapacityType;
use crate::cluster::{ClusterSnapshot, DaemonSet, Node, Pod, PodDisruptionBudget, PodFields};
use crate::nodeclaim::{ClaimState, NodeClaim, instance_id_from_provider_id};
use crate::scheduling::InFlightClaim;
use crate::well_known::TAINT_REBOOTING;

/// The taint every launch registers with and registration removes.
pub fn unregistered_taint() -> Taint {
    Taint {
        key: TAINT_UNREGISTERED.into(),
        value: None,
        effect: TaintEffect::NoExecute,
    }
}

/// Whether a node carries `taint` only while it starts, and loses it on its own: the
/// node lifecycle controller's not-ready and unreachable taints (it removes them once
/// the kubelet reports Ready, a node-monitor period later), the cloud controller's
/// uninitialized taint, the unregistered taint, and the Node Readiness Controller's
/// `readiness.k8s.io/` family. Karpenter's known ephemeral taints: a claim is not
/// initialized while its node has one, and planning counts an uninitialized node's room
/// without them — or a node Ready a moment before the controller untainted it reads as
/// no room, and the provisioner launches a second node for the same pods.
pub fn is_known_ephemeral_taint(taint: &Taint) -> bool {
    let [not_ready, unreachable] = NODE_LIFECYCLE_TAINTS;
    let ephemeral: [(&str, TaintEffect); 5] = [
        (not_ready, TaintEffect::NoSchedule),
        (not_ready, TaintEffect::NoExecute),
        (unreachable, TaintEffect::NoSchedule),
        (
            "node.cloudprovider.kubernetes.io/uninitialized",
            TaintEffect::NoSchedule,
        ),
        (TAINT_UNREGISTERED, TaintEffect::NoExecute),
    ];
    // Key and effect, as Kubernetes matches a taint; the value does not count.
    ephemeral
        .iter()
        .any(|(key, effect)| taint.key == *key && taint.effect == *effect)
        || taint.key.starts_with("readiness.k8s.io/")
}

/// The cluster as read, before planning's adjustments.
#[derive(Debug, Clone, Copy)]
pub struct ClusterView<'a> {
    pub nodes: &'a [Node],
    pub pods: &'a [Pod],
    pub daemonsets: &'a [DaemonSet],
    pub pdbs: &'a [PodDisruptionBudget],
}

/// A claim between its launch and a steady state, or on its way out: while one exists
/// the provisioner keeps ticking every poll, so every step follows within a poll.
pub fn in_motion(state: ClaimState) -> bool {
    matches!(
        state,
        ClaimState::Launching | ClaimState::Launched | ClaimState::Registered
    ) || state.is_being_taken_away()
}

/// The claims as planning sees them: a candidate of an unvalidated disruption command
/// is still Initialized capacity (cordoned, its pods running), not capacity going away —
/// or the provisioner would launch for its pods beside the command's own replacements.
pub fn planning_claims(claims: &[NodeClaim]) -> Vec<NodeClaim> {
    claims
        .iter()
        .map(|c| {
            let mut c = c.clone();
            if c.held_by_unvalidated_command() {
                c.state = ClaimState::Initialized;
            }
            c
        })
        .collect()
}

/// The snapshot the planner sees:
/// - nodes of live claims lose the unregistered taint, and until Initialized their
///   startup taints and [known ephemeral taints](is_known_ephemeral_taint): those go
///   away on their own (Karpenter drops them when scheduling), and a view read before
///   the reconciler or the node lifecycle controller removed them must not make a
///   Ready node look unusable;
/// - nodes of claims being taken away are gone, and their pods (not DaemonSet pods, not
///   pods already terminating, whose replacements come as new pods) are pending again,
///   planned as if kube-scheduler had already found no node for them: the replacement
///   capacity is launched now, nominated for them, while the old node drains
///   (Karpenter's reschedulable pods).
pub fn planning_snapshot(
    view: ClusterView<'_>,
    claims: &[NodeClaim],
    pools: &[NodePool],
) -> ClusterSnapshot {
    let by_instance: HashMap<&str, &NodeClaim> = claims
        .iter()
        .filter(|c| !c.state.is_terminal())
        .filter_map(|c| Some((c.instance_id.as_deref()?, c)))
        .collect();
    let claim_of = |n: &Node| {
        n.provider_id
            .as_deref()
            .and_then(instance_id_from_provider_id)
            .and_then(|id| by_instance.get(id).copied())
    };
    let mut going: HashSet<&str> = HashSet::new();
    let mut nodes = Vec::with_capacity(view.nodes.len());
    for n in view.nodes {
        match claim_of(n) {
            Some(c) if c.state.is_being_taken_away() => {
                going.insert(n.name.as_str());
            }
            Some(c) if c.state.is_live_capacity() => {
                let startup: HashSet<&str> = pools
                    .iter()
                    .find(|p| p.name == c.node_pool)
                    .map(|p| p.startup_taints.iter().map(|t| t.key.as_str()).collect())
                    .unwrap_or_default();
                let mut n = n.clone();
                if c.state != ClaimState::Initialized {
                    n.taints.retain(|t| {
                        !startup.contains(t.key.as_str()) && !is_known_ephemeral_taint(t)
                    });
                }
                // A node rebooting for repair comes back: its room is planned as there.
                n.taints
                    .retain(|t| t.key != TAINT_UNREGISTERED && t.key != TAINT_REBOOTING);
                nodes.push(n);
            }
            _ => nodes.push(n.clone()),
        }
    }
    let pods = view
        .pods
        .iter()
        .filter_map(|p| match p.node_name.as_deref() {
            Some(node) if going.contains(node) => {
                (!p.daemonset_owned && !p.terminal && !p.terminating).then(|| {
                    Pod::from(PodFields {
                        node_name: None,
                        marked_unschedulable: true,
                        ..PodFields::clone(p)
                    })
                })
            }
            _ => Some(p.clone()),
        })
        .collect();
    ClusterSnapshot {
        pods,
        nodes,
        daemonsets: view.daemonsets.to_vec(),
        pdbs: view.pdbs.to_vec(),
        workloads: Vec::new(),
        services: Vec::new(),
        controllers: Vec::new(),
        autoscalers: Vec::new(),
    }
}

/// The taints the node lifecycle controller puts on a node it found not ready or
/// unreachable (kubelet stopped reporting): kube-scheduler binds nothing there that does
/// not tolerate them.
pub const NODE_LIFECYCLE_TAINTS: [&str; 2] = [
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
];

/// Claims whose capacity is coming, each counted once: as a node when its node is in
/// the planning snapshot, Ready and schedulable, otherwise as in flight — `Launching`
/// and `Launched` ones, `Registered` ones whose node is not Ready yet, and `Initialized`
/// ones whose node is briefly NotReady (a claim is never counted neither as a node nor
/// in flight: that launched a second node for the same pods). An `Initialized` claim
/// whose node the node lifecycle controller has tainted not ready or unreachable is
/// neither: kube-scheduler will not bind there, and a node whose kubelet stopped may stay
/// so until it is repaired 30 minutes later, while the pods the taint eviction controller
/// took off it wait for capacity (Karpenter counts an initialized node's taints, those
/// included).
pub fn in_flight_claims(claims: &[NodeClaim], snapshot: &ClusterSnapshot) -> Vec<InFlightClaim> {
    let nodes: HashMap<&str, &Node> = snapshot
        .nodes
        .iter()
        .filter_map(|n| Some((instance_id_from_provider_id(n.provider_id.as_deref()?)?, n)))
        .collect();
    claims
        .iter()
        .filter(|c| {
            let node = c.instance_id.as_deref().and_then(|id| nodes.get(id));
            let usable = node.is_some_and(|n| n.ready && !n.unschedulable);
            match c.state {
                ClaimState::Launching | ClaimState::Launched | ClaimState::Registered => !usable,
                // Gone from the cluster, cordoned by someone, or found lost by the node
                // lifecycle controller: not capacity.
                ClaimState::Initialized => node.is_some_and(|n| {
                    !n.ready
                        && !n.unschedulable
                        && !n
                            .taints
                            .iter()
                            .any(|t| NODE_LIFECYCLE_TAINTS.contains(&t.key.as_str()))
                }),
                _ => false,
            }
        })
        .filter_map(|c| {
            Some(InFlightClaim {
                name: c.name.clone(),
                node_pool: c.node_pool.clone(),
                instance_type: c
                    .instance_type
                    .clone()
                    .or_else(|| c.instance_type_options.first().cloned())?,
                zone: c.zone.clone().or_else(|| c.zones.first().cloned())?,
                capacity_type: c
                    .capacity_type
                    .or_else(|| c.capacity_types.first().copied())
                    .unwrap_or(CapacityType::OnDemand),
                pods: c.pods.to_vec(),
                labels: c.labels.clone(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodeclaim::{ClaimSpec, Disruption, DisruptionCause, DisruptionCommand};
    use std::sync::Arc;

    fn launching(name: &str) -> NodeClaim {
        NodeClaim::launching(
            ClaimSpec {
                name: name.into(),
                node_pool: "gp".into(),
                node_class: "default".into(),
                instance_type_options: vec!["m5.large".into(), "m5.xlarge".into()],
                zones: vec!["us-east-1b".into(), "us-east-1a".into()],
                capacity_types: vec![CapacityType::Spot],
                pods: vec![],
                labels: Default::default(),
            },
            0,
        )
    }

    /// A claim being taken away by `cause`, as a candidate of command `validated` or
    /// of none.
    fn disrupting(name: &str, cause: DisruptionCause, validated: Option<bool>) -> NodeClaim {
        let mut claim = launching(name);
        claim.state = ClaimState::Disrupting;
        claim.disruption = Some(Disruption {
            cause,
            deadline: None,
            since: 0,
            drain_after: None,
            drain_grace: None,
            event: None,
            command: validated.map(|validated| {
                Arc::new(DisruptionCommand {
                    id: "cmd-1".into(),
                    candidates: vec![name.into()],
                    replacements: vec![],
                    validated,
                })
            }),
        });
        claim
    }

    #[test]
    fn only_a_candidate_of_an_unvalidated_command_plans_as_capacity_still_there() {
        let claims = [
            disrupting("held", DisruptionCause::Underutilized, Some(false)),
            disrupting("validated", DisruptionCause::Underutilized, Some(true)),
            disrupting("interrupted", DisruptionCause::SpotInterrupted, None),
            launching("new"),
        ];
        let states: Vec<ClaimState> = planning_claims(&claims).iter().map(|c| c.state).collect();
        assert_eq!(
            states,
            [
                ClaimState::Initialized,
                ClaimState::Disrupting,
                ClaimState::Disrupting,
                ClaimState::Launching
            ]
        );
    }

    #[test]
    fn the_planning_snapshot_shares_every_pod_it_does_not_change() {
        let mut going = disrupting("going", DisruptionCause::Underutilized, Some(true));
        going.instance_id = Some("i-0123456789abcdef0".into());
        let nodes = [
            node_of_instance(),
            m5_large_node("ip-10-0-1-5.ec2.internal", "i-0fedcba9876543210"),
        ];
        let pods = [
            crate::testing::bound_pod(&nodes[0].name, "moving", "100m", 0),
            crate::testing::bound_pod(&nodes[1].name, "staying", "100m", 0),
            crate::testing::pod("pending", "100m", "64Mi"),
        ];
        let view = ClusterView {
            nodes: &nodes,
            pods: &pods,
            daemonsets: &[],
            pdbs: &[],
        };
        let snapshot = planning_snapshot(view, std::slice::from_ref(&going), &[]);
        let shared: Vec<bool> = snapshot
            .pods
            .iter()
            .map(|p| pods.iter().any(|q| q.same_as(p)))
            .collect();
        assert_eq!(shared, [false, true, true], "{:?}", snapshot.pods);
        assert_eq!(
            snapshot.pods[0].node_name, None,
            "the going node's pod plans anew"
        );
        assert_eq!(pods[0].node_name.as_deref(), Some(nodes[0].name.as_str()));
    }

    /// The m5.large node of instance `i-0123456789abcdef0`.
    fn node_of_instance() -> Node {
        m5_large_node("ip-10-0-1-4.ec2.internal", "i-0123456789abcdef0")
    }

    /// An m5.large node `name` of NodePool `gp` in us-east-1b, of instance `instance`.
    fn m5_large_node(name: &str, instance: &str) -> Node {
        let mut node = crate::testing::node(
            name,
            "m5.large",
            "us-east-1b",
            "gp",
            crate::catalog::Catalog::embedded(),
        );
        node.provider_id = Some(format!("aws:///us-east-1b/{instance}"));
        node
    }

    #[test]
    fn an_initialized_claim_whose_node_the_node_lifecycle_controller_tainted_is_not_in_flight() {
        let mut claim = launching("gp-lost");
        claim.state = ClaimState::Initialized;
        claim.instance_id = Some("i-0123456789abcdef0".into());
        let mut node = node_of_instance();
        node.ready = false;
        let in_flight = |node: &Node| {
            let snapshot = ClusterSnapshot {
                nodes: vec![node.clone()],
                ..ClusterSnapshot::default()
            };
            in_flight_claims(std::slice::from_ref(&claim), &snapshot).len()
        };
        // Briefly NotReady, before the node lifecycle controller acted: still coming back.
        assert_eq!(in_flight(&node), 1);
        for key in NODE_LIFECYCLE_TAINTS {
            let mut tainted = node.clone();
            tainted.taints.push(Taint {
                key: key.into(),
                value: None,
                effect: TaintEffect::NoSchedule,
            });
            assert_eq!(in_flight(&tainted), 0, "{key}");
        }
    }

    #[test]
    fn an_uninitialized_nodes_ephemeral_taints_are_not_planned_and_an_initialized_ones_are() {
        let taint = |key: &str, effect| Taint {
            key: key.into(),
            value: Some("true".into()),
            effect,
        };
        let ephemeral = [
            taint("node.kubernetes.io/not-ready", TaintEffect::NoSchedule),
            taint("node.kubernetes.io/not-ready", TaintEffect::NoExecute),
            taint("node.kubernetes.io/unreachable", TaintEffect::NoSchedule),
            taint(
                "node.cloudprovider.kubernetes.io/uninitialized",
                TaintEffect::NoSchedule,
            ),
            taint(TAINT_UNREGISTERED, TaintEffect::NoExecute),
            taint("readiness.k8s.io/network", TaintEffect::NoSchedule),
        ];
        let lasting = [
            // Unreachable for long enough to evict: the node is lost, not starting.
            taint("node.kubernetes.io/unreachable", TaintEffect::NoExecute),
            taint("dedicated", TaintEffect::NoSchedule),
        ];
        for t in &ephemeral {
            assert!(is_known_ephemeral_taint(t), "{t:?}");
        }
        for t in &lasting {
            assert!(!is_known_ephemeral_taint(t), "{t:?}");
        }

        let mut claim = launching("gp-new");
        claim.instance_id = Some("i-0123456789abcdef0".into());
        let mut node = node_of_instance();
        node.taints = ephemeral.iter().chain(&lasting).cloned().collect();
        let planned_taints = |state| {
            let claim = NodeClaim {
                state,
                ..claim.clone()
            };
            let view = ClusterView {
                nodes: std::slice::from_ref(&node),
                pods: &[],
                daemonsets: &[],
                pdbs: &[],
            };
            let snapshot = planning_snapshot(view, &[claim], &[]);
            let keys: Vec<(String, TaintEffect)> = snapshot.nodes[0]
                .taints
                .iter()
                .map(|t| (t.key.clone(), t.effect))
                .collect();
            keys
        };
        let keys = |taints: &[Taint]| -> Vec<(String, TaintEffect)> {
            taints.iter().map(|t| (t.key.clone(), t.effect)).collect()
        };
        // Ready a moment before the node lifecycle controller untaints it: its room is
        // there for the pods it was launched for.
        assert_eq!(planned_taints(ClaimState::Registered), keys(&lasting));
        // Initialized, a not-ready taint is news: the node stopped reporting. Only the
        // unregistered taint is never planned (registration removes it).
        let initialized: Vec<(String, TaintEffect)> = keys(&node.taints)
            .into_iter()
            .filter(|(key, _)| key != TAINT_UNREGISTERED)
            .collect();
        assert_eq!(planned_taints(ClaimState::Initialized), initialized);
    }

    #[test]
    fn a_launching_claim_without_an_instance_counts_as_its_first_option() {
        let claim = launching("gp-abcde");
        let f = in_flight_claims(&[claim], &ClusterSnapshot::default());
        assert_eq!(f.len(), 1);
        assert_eq!(
            (f[0].instance_type.as_str(), f[0].zone.as_str()),
            ("m5.large", "us-east-1b")
        );
        assert_eq!(f[0].capacity_type, CapacityType::Spot);
    }
}
