//! The cluster as the planner sees it: pods, nodes, DaemonSets and PDBs reduced to the
//! fields scheduling depends on. `snapshot` builds these from `kubectl ... -o json`
//! output; the engine will build them from the Kubernetes API.

use std::collections::BTreeMap;

use crate::api::model::{NodeRequirement, Taint, TaintEffect};
use crate::resources::Resources;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TolerationOperator {
    Equal,
    Exists,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Toleration {
    /// Empty key with `Exists` tolerates everything.
    pub key: String,
    pub operator: TolerationOperator,
    pub value: String,
    /// `None` matches every effect.
    pub effect: Option<TaintEffect>,
}

impl Toleration {
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if let Some(effect) = self.effect {
            if effect != taint.effect {
                return false;
            }
        }
        if self.key.is_empty() {
            return self.operator == TolerationOperator::Exists;
        }
        if self.key != taint.key {
            return false;
        }
        match self.operator {
            TolerationOperator::Exists => true,
            TolerationOperator::Equal => self.value == taint.value.as_deref().unwrap_or(""),
        }
    }
}

/// `metav1.LabelSelector`. An empty selector matches everything (as in topology spread);
/// a missing selector is represented by `None` at the use site and matches nothing.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct LabelSelector {
    pub match_labels: BTreeMap<String, String>,
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LabelSelectorOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LabelSelectorRequirement {
    pub key: String,
    pub operator: LabelSelectorOperator,
    pub values: Vec<String>,
}

impl LabelSelector {
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|e| {
                let got = labels.get(&e.key);
                match e.operator {
                    LabelSelectorOperator::In => got.is_some_and(|v| e.values.contains(v)),
                    LabelSelectorOperator::NotIn => !got.is_some_and(|v| e.values.contains(v)),
                    LabelSelectorOperator::Exists => got.is_some(),
                    LabelSelectorOperator::DoesNotExist => got.is_none(),
                }
            })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WhenUnsatisfiable {
    DoNotSchedule,
    ScheduleAnyway,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TopologySpreadConstraint {
    pub max_skew: u32,
    pub topology_key: String,
    pub when_unsatisfiable: WhenUnsatisfiable,
    /// `None` when the constraint has no selector: it then counts no pods.
    pub label_selector: Option<LabelSelector>,
    pub min_domains: Option<u32>,
}

/// A required pod (anti-)affinity term.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PodAffinityTerm {
    pub label_selector: Option<LabelSelector>,
    pub topology_key: String,
    /// Empty means the pod's own namespace (namespaceSelector is not supported and is
    /// treated as the pod's namespace; documented).
    pub namespaces: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WeightedPodAffinityTerm {
    pub weight: i32,
    pub term: PodAffinityTerm,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PreferredNodeTerm {
    pub weight: i32,
    pub requirements: Vec<NodeRequirement>,
}

/// Everything about a pod that decides where it may run.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// Effective requests: max(sum of containers, largest init container) + overhead,
    /// plus one pod slot. Always has `pods` = 1.
    pub requests: Resources,
    pub node_selector: BTreeMap<String, String>,
    /// Required node affinity: the pod fits a node matching ANY of these terms.
    /// Empty means no required node affinity.
    pub required_node_terms: Vec<Vec<NodeRequirement>>,
    pub preferred_node_terms: Vec<PreferredNodeTerm>,
    pub tolerations: Vec<Toleration>,
    pub topology_spread: Vec<TopologySpreadConstraint>,
    pub pod_affinity: Vec<PodAffinityTerm>,
    pub pod_anti_affinity: Vec<PodAffinityTerm>,
    pub preferred_pod_affinity: Vec<WeightedPodAffinityTerm>,
    pub preferred_pod_anti_affinity: Vec<WeightedPodAffinityTerm>,
    /// `spec.nodeName`, set once bound.
    pub node_name: Option<String>,
    /// `Succeeded` or `Failed`: holds no resources.
    pub terminal: bool,
    /// Owned by a DaemonSet (its requests are counted as DaemonSet overhead instead).
    pub daemonset_owned: bool,
    /// priorityClassName system-cluster-critical / system-node-critical.
    pub critical: bool,
}

impl Pod {
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Pending for provisioning: not bound and not finished.
    pub fn is_pending(&self) -> bool {
        self.node_name.is_none() && !self.terminal && !self.daemonset_owned
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Node {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub allocatable: Resources,
    pub capacity: Resources,
    pub provider_id: Option<String>,
    pub unschedulable: bool,
    /// The Ready condition is True.
    pub ready: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DaemonSet {
    pub namespace: String,
    pub name: String,
    /// The pod template as a pod (name = the DaemonSet's), requests computed as for pods.
    pub template: Pod,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IntOrPercent {
    Int(i32),
    Percent(u32),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodDisruptionBudget {
    pub namespace: String,
    pub name: String,
    pub selector: Option<LabelSelector>,
    pub min_available: Option<IntOrPercent>,
    pub max_unavailable: Option<IntOrPercent>,
}

/// The parsed `kubectl get pods,nodes,daemonsets,poddisruptionbudgets -A -o json`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterSnapshot {
    pub pods: Vec<Pod>,
    pub nodes: Vec<Node>,
    pub daemonsets: Vec<DaemonSet>,
    pub pdbs: Vec<PodDisruptionBudget>,
}

impl ClusterSnapshot {
    pub fn pending_pods(&self) -> impl Iterator<Item = &Pod> {
        self.pods.iter().filter(|p| p.is_pending())
    }
}
