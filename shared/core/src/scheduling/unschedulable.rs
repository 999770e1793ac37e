//! Why a pod fits nowhere, as data: callers branch on the kind of refusal (a limit, a
//! taint, a pod too large for any type…) instead of on text, and people read the
//! sentence [`std::fmt::Display`] makes of it.
//!
//! A pod that no bin takes is offered to every NodePool in weight order; each refuses
//! it for one reason, and the pod's reason is the list of them.

use std::fmt;

use crate::api::model::Taint;
use crate::cluster::HostPort;
use crate::resources::format_milli;
use crate::well_known::LABEL_HOSTNAME;

use super::requirements::{Conflict, ValueSet};
use super::topology::TopologyConstraint;

/// Why a pending pod cannot be placed.
#[derive(Debug, Clone, PartialEq)]
pub enum Unschedulable {
    /// There is no NodePool to launch a node in.
    NoNodePool,
    /// Every NodePool refused the pod; in the order they were tried (by weight).
    Refused(Vec<PoolRefusal>),
}

/// One NodePool's reason for not launching a node for the pod.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolRefusal {
    pub node_pool: String,
    pub reason: Refusal,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// The pool's nodes carry a taint the pod does not tolerate.
    TaintNotTolerated(Taint),
    /// The pod's node requirements cannot hold on the pool's nodes.
    Incompatible(Conflict),
    /// A pod affinity term no pod in the cluster (or in the batch) satisfies.
    NoAffinityMatch(TopologyConstraint),
    /// A hostname pod affinity term: the nodes with a matching pod are full, and a new
    /// node would have none.
    NoRoomNextToAffinityMatch(TopologyConstraint),
    /// The pod requires these hostnames: only an existing node has them, and it is full.
    HostnameFull(ValueSet),
    /// The pod's topology constraints on zone or capacity type leave no domain at all.
    /// Empty constraints: the required anti-affinity of pods already placed does.
    TopologyUnsatisfiable(Vec<TopologyConstraint>),
    /// The pod's topology constraints leave domains, but none this pool can launch in.
    TopologyUnsatisfiableInPool(Vec<TopologyConstraint>),
    /// A new node would take the pool past its limit on a resource (milli-units).
    LimitReached {
        resource: String,
        would_reach: i64,
        limit: i64,
    },
    /// No type that could hold the pod is offered in a zone and capacity type it allows.
    NoOffering,
    /// Every zone the pod may run in (these) is under an ARC zonal shift: nothing
    /// launches there until it ends.
    ZonalShift(Vec<String>),
    /// Every type that could hold the pod runs a DaemonSet binding one of its host ports.
    HostPortHeldByDaemonSet { port: HostPort, daemonset: String },
    /// The pod needs more of a resource than any of the pool's types offers pods
    /// (milli-units; `largest` after the DaemonSets' share).
    TooLarge {
        resource: String,
        requested: i64,
        largest: i64,
    },
    /// No type of the pool meets the pod's requirements.
    NoMatchingType,
    /// Too few distinct values of a key with minValues fit the pod.
    MinValues {
        key: String,
        min: u32,
        distinct: usize,
    },
}

impl fmt::Display for Unschedulable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unschedulable::NoNodePool => write!(f, "no NodePool is defined"),
            Unschedulable::Refused(refusals) => {
                for (i, refusal) in refusals.iter().enumerate() {
                    if i > 0 {
                        write!(f, "; ")?;
                    }
                    write!(f, "{refusal}")?;
                }
                Ok(())
            }
        }
    }
}

impl fmt::Display for PoolRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pool = &self.node_pool;
        match &self.reason {
            Refusal::TaintNotTolerated(taint) => {
                write!(f, "NodePool \"{pool}\": taint {}", taint.key)?;
                if let Some(value) = &taint.value {
                    write!(f, "={value}")?;
                }
                write!(f, ":{} not tolerated", taint.effect.as_str())
            }
            Refusal::Incompatible(conflict) => write!(f, "NodePool \"{pool}\": {conflict}"),
            Refusal::NoAffinityMatch(term) => write!(f, "{term}: no pod matches its selector"),
            Refusal::NoRoomNextToAffinityMatch(term) => {
                write!(f, "{term}: no node with a matching pod has room")
            }
            Refusal::HostnameFull(hostnames)
                if !hostnames.is_complement() && !hostnames.is_empty_list() =>
            {
                write!(
                    f,
                    "{LABEL_HOSTNAME} {hostnames}: only that existing node can take the pod, and it has no room"
                )
            }
            Refusal::HostnameFull(hostnames) => write!(
                f,
                "{LABEL_HOSTNAME} {hostnames}: a new node cannot satisfy it, and no existing node that does can take the pod"
            ),
            Refusal::TopologyUnsatisfiable(constraints) => {
                write_constraints(f, constraints)?;
                write!(f, " cannot be satisfied")
            }
            Refusal::TopologyUnsatisfiableInPool(constraints) => {
                write_constraints(f, constraints)?;
                write!(f, " cannot be satisfied in NodePool \"{pool}\"")
            }
            Refusal::LimitReached {
                resource,
                would_reach,
                limit,
            } => write!(
                f,
                "NodePool \"{pool}\" limits: {resource} would reach {} of {}",
                format_milli(resource, *would_reach),
                format_milli(resource, *limit)
            ),
            Refusal::NoOffering => write!(
                f,
                "NodePool \"{pool}\": no offering in an allowed zone and capacity type"
            ),
            Refusal::ZonalShift(zones) => write!(
                f,
                "NodePool \"{pool}\": {} under an ARC zonal shift: nothing launches there until it ends",
                if zones.len() == 1 {
                    format!("zone {} is", zones[0])
                } else {
                    format!("zones {} are", zones.join(", "))
                }
            ),
            Refusal::HostPortHeldByDaemonSet { port, daemonset } => write!(
                f,
                "NodePool \"{pool}\": host port {}/{} is held by DaemonSet {daemonset} on every instance type that could take the pod",
                port.port, port.protocol
            ),
            Refusal::TooLarge {
                resource,
                requested,
                largest,
            } => write!(
                f,
                "NodePool \"{pool}\": no instance type has enough {resource} (requested {}, largest allocatable after DaemonSets {})",
                format_milli(resource, *requested),
                format_milli(resource, *largest)
            ),
            Refusal::NoMatchingType => write!(
                f,
                "NodePool \"{pool}\": no instance type matches the pod's requirements"
            ),
            Refusal::MinValues { key, min, distinct } => write!(
                f,
                "NodePool \"{pool}\": minValues {min} for {key} cannot be met (only {distinct} distinct values fit)"
            ),
        }
    }
}

/// The constraints, comma-separated; none: the anti-affinity of pods already placed.
fn write_constraints(
    f: &mut fmt::Formatter<'_>,
    constraints: &[TopologyConstraint],
) -> fmt::Result {
    if constraints.is_empty() {
        return write!(f, "pod anti-affinity of pods already placed");
    }
    for (i, c) in constraints.iter().enumerate() {
        if i > 0 {
            write!(f, ", ")?;
        }
        write!(f, "{c}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::model::TaintEffect;
    use crate::scheduling::topology::GroupKind;

    fn refused(node_pool: &str, reason: Refusal) -> PoolRefusal {
        PoolRefusal {
            node_pool: node_pool.into(),
            reason,
        }
    }

    fn zone(kind: GroupKind) -> TopologyConstraint {
        TopologyConstraint {
            kind,
            topology_key: "topology.kubernetes.io/zone".into(),
        }
    }

    #[test]
    fn each_pool_refusal_reads_as_the_sentence_people_see() {
        let spread = GroupKind::Spread {
            max_skew: 1,
            min_domains: 1,
        };
        let cases = [
            (
                Refusal::TaintNotTolerated(Taint {
                    key: "dedicated".into(),
                    value: Some("batch".into()),
                    effect: TaintEffect::NoSchedule,
                }),
                r#"NodePool "p": taint dedicated=batch:NoSchedule not tolerated"#,
            ),
            (
                Refusal::TaintNotTolerated(Taint {
                    key: "gpu".into(),
                    value: None,
                    effect: TaintEffect::NoExecute,
                }),
                r#"NodePool "p": taint gpu:NoExecute not tolerated"#,
            ),
            (
                Refusal::Incompatible(Conflict::MissingLabel {
                    key: "team".into(),
                    wanted: Box::new(ValueSet::in_values(["blue"])),
                }),
                r#"NodePool "p": team In [blue] is not a label this node would have"#,
            ),
            (
                Refusal::NoAffinityMatch(zone(GroupKind::Affinity)),
                "pod affinity on topology.kubernetes.io/zone: no pod matches its selector",
            ),
            (
                Refusal::NoRoomNextToAffinityMatch(TopologyConstraint {
                    kind: GroupKind::Affinity,
                    topology_key: LABEL_HOSTNAME.into(),
                }),
                "pod affinity on kubernetes.io/hostname: no node with a matching pod has room",
            ),
            (
                Refusal::HostnameFull(ValueSet::in_values(["n1"])),
                "kubernetes.io/hostname In [n1]: only that existing node can take the pod, and it has no room",
            ),
            (
                Refusal::TopologyUnsatisfiable(vec![zone(spread), zone(GroupKind::AntiAffinity)]),
                "topology spread on topology.kubernetes.io/zone (maxSkew 1), pod anti-affinity on topology.kubernetes.io/zone cannot be satisfied",
            ),
            (
                Refusal::TopologyUnsatisfiable(vec![]),
                "pod anti-affinity of pods already placed cannot be satisfied",
            ),
            (
                Refusal::TopologyUnsatisfiableInPool(vec![zone(spread)]),
                r#"topology spread on topology.kubernetes.io/zone (maxSkew 1) cannot be satisfied in NodePool "p""#,
            ),
            (
                Refusal::LimitReached {
                    resource: "cpu".into(),
                    would_reach: 12_000,
                    limit: 10_000,
                },
                r#"NodePool "p" limits: cpu would reach 12 of 10"#,
            ),
            (
                Refusal::NoOffering,
                r#"NodePool "p": no offering in an allowed zone and capacity type"#,
            ),
            (
                Refusal::HostPortHeldByDaemonSet {
                    port: HostPort {
                        port: 9100,
                        protocol: "TCP".into(),
                        host_ip: String::new(),
                    },
                    daemonset: "kube-system/agent".into(),
                },
                r#"NodePool "p": host port 9100/TCP is held by DaemonSet kube-system/agent on every instance type that could take the pod"#,
            ),
            (
                Refusal::TooLarge {
                    resource: "memory".into(),
                    requested: (64i64 << 30) * 1000,
                    largest: (32i64 << 30) * 1000,
                },
                r#"NodePool "p": no instance type has enough memory (requested 64Gi, largest allocatable after DaemonSets 32Gi)"#,
            ),
            (
                Refusal::NoMatchingType,
                r#"NodePool "p": no instance type matches the pod's requirements"#,
            ),
            (
                Refusal::MinValues {
                    key: "karpenter.k8s.aws/instance-family".into(),
                    min: 5,
                    distinct: 2,
                },
                r#"NodePool "p": minValues 5 for karpenter.k8s.aws/instance-family cannot be met (only 2 distinct values fit)"#,
            ),
        ];
        for (reason, sentence) in cases {
            assert_eq!(refused("p", reason).to_string(), sentence);
        }
    }

    #[test]
    fn a_pod_lists_every_pools_refusal_in_order_or_says_there_is_no_pool() {
        let pod = Unschedulable::Refused(vec![
            refused("a", Refusal::NoMatchingType),
            refused("b", Refusal::NoOffering),
        ]);
        assert_eq!(
            pod.to_string(),
            r#"NodePool "a": no instance type matches the pod's requirements; NodePool "b": no offering in an allowed zone and capacity type"#
        );
        assert_eq!(
            Unschedulable::NoNodePool.to_string(),
            "no NodePool is defined"
        );
    }
}
