//! Topology groups: pod counts per domain for topology spread, pod affinity and pod
//! anti-affinity, on any node label (zone, capacity type, hostname, or a label a
//! NodePool sets such as `capacity-spread`).
//!
//! Each distinct (kind, key, selector, namespaces, node filter) is one group. A group
//! counts the pods that *match* it per domain (`counts`), and for required
//! anti-affinity also where the pods that *own* the term are (`owners`), because
//! required anti-affinity is symmetric: a pod may not land next to a pod whose required
//! anti-affinity term selects it. (Preferred terms are not symmetric: kube-scheduler
//! only scores them, and Karpenter does not track them either.)

use std::collections::BTreeMap;
use std::fmt;

use crate::api::model::{NodeRequirement, Taint, TaintEffect};
use crate::cluster::{LabelSelector, Toleration};

use super::requirements::Requirements;

/// The label a topology constraint counts on. Hostname domains are the bins
/// themselves; every other key has a list of values (its domains), held by the
/// scheduler and referred to by index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TopologyKey {
    Hostname,
    Domain(usize),
}

// `topology.kubernetes.io/zone` is always domain key 0 and `karpenter.sh/capacity-type`
// key 1: the scheduler's offerings are indexed by both.

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupKind {
    Spread { max_skew: u32, min_domains: u32 },
    Affinity,
    AntiAffinity,
}

/// Which nodes a topology spread constraint counts (`nodeAffinityPolicy`,
/// `nodeTaintsPolicy`): with Honor (the default for affinity), only nodes matching the
/// pod's nodeSelector and required node affinity; with Honor for taints (default
/// Ignore), only nodes whose NoSchedule/NoExecute taints the pod tolerates.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct NodeFilter {
    pub node_selector: BTreeMap<String, String>,
    /// Terms are ORed; empty means any node.
    pub required_terms: Vec<Vec<NodeRequirement>>,
    /// `Some` when taints are honoured.
    pub tolerations: Option<Vec<Toleration>>,
}

impl NodeFilter {
    /// The filter's node-affinity terms as requirements (nodeSelector in each).
    pub fn terms(&self) -> Vec<Requirements> {
        let mut base = Requirements::new();
        for (k, v) in &self.node_selector {
            base.add(k, super::requirements::ValueSet::in_values([v.clone()]));
        }
        if self.required_terms.is_empty() {
            return vec![base];
        }
        self.required_terms
            .iter()
            .map(|t| base.intersect(&Requirements::from_node_requirements(t)))
            .collect()
    }

    pub fn tolerates(&self, taints: &[Taint]) -> bool {
        let Some(tolerations) = &self.tolerations else {
            return true;
        };
        taints
            .iter()
            .filter(|t| t.effect != TaintEffect::PreferNoSchedule)
            .all(|taint| tolerations.iter().any(|t| t.tolerates(taint)))
    }
}

/// A [`NodeFilter`] ready to apply: its terms built once, not per node asked about.
#[derive(Debug, Clone)]
pub struct CompiledFilter {
    filter: NodeFilter,
    terms: Vec<Requirements>,
}

impl CompiledFilter {
    pub fn new(filter: &NodeFilter) -> Self {
        Self {
            terms: filter.terms(),
            filter: filter.clone(),
        }
    }

    pub fn tolerates(&self, taints: &[Taint]) -> bool {
        self.filter.tolerates(taints)
    }

    /// Whether a node with these labels and taints counts.
    pub fn matches_node(&self, labels: &BTreeMap<String, String>, taints: &[Taint]) -> bool {
        self.tolerates(taints) && self.terms.iter().any(|t| t.matches_labels(labels))
    }

    /// Whether a node that will satisfy `reqs` (a claim being planned) counts.
    pub fn matches_requirements(
        &self,
        reqs: &Requirements,
        taints: &[Taint],
        well_known: &dyn Fn(&str) -> bool,
    ) -> bool {
        self.tolerates(taints)
            && self
                .terms
                .iter()
                .any(|t| reqs.is_compatible_with(t, well_known))
    }

    /// Whether a node whose `label` is `value` can match the filter's node affinity.
    pub fn allows_value(&self, label: &str, value: &str) -> bool {
        self.terms
            .iter()
            .any(|t| t.get(label).is_none_or(|s| s.has(value)))
    }

    /// With nodeAffinityPolicy Honor and a pod that constrains nodes at all.
    pub fn honours_affinity(&self) -> bool {
        !self.filter.node_selector.is_empty() || !self.filter.required_terms.is_empty()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GroupSpec {
    pub kind: GroupKind,
    pub key: TopologyKey,
    /// `None` selects no pod.
    pub selector: Option<LabelSelector>,
    pub namespaces: Vec<String>,
    /// Spread constraints only; `None` counts every node.
    pub filter: Option<NodeFilter>,
    /// Anti-affinity only: from a required term (then symmetric, see the module).
    pub required: bool,
}

impl GroupSpec {
    pub fn selects(
        &self,
        namespace: &str,
        labels: &std::collections::BTreeMap<String, String>,
    ) -> bool {
        self.namespaces.iter().any(|n| n == namespace)
            && self.selector.as_ref().is_some_and(|s| s.matches(labels))
    }

    /// The constraint as reasons name it; `label` is the key's label name.
    pub fn constraint(&self, label: &str) -> TopologyConstraint {
        TopologyConstraint {
            kind: self.kind,
            topology_key: label.to_string(),
        }
    }
}

/// A topology constraint as reasons name it: its kind and the label it counts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopologyConstraint {
    pub kind: GroupKind,
    pub topology_key: String,
}

impl fmt::Display for TopologyConstraint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = &self.topology_key;
        match self.kind {
            GroupKind::Spread { max_skew, .. } => {
                write!(f, "topology spread on {key} (maxSkew {max_skew})")
            }
            GroupKind::Affinity => write!(f, "pod affinity on {key}"),
            GroupKind::AntiAffinity => write!(f, "pod anti-affinity on {key}"),
        }
    }
}

/// Counts per domain: domain keys by value index, hosts by bin index. Pods on nodes
/// that are not bins (not Ready yet) count in `other_hosts`: no pod can be placed
/// there now, but their existence matters (a self-affinity group is not "first").
#[derive(Debug, Clone, Default)]
pub struct DomainCounts {
    pub domain: Vec<u32>,
    /// The hosts with a count, as (bin index, count) in bin order, none of them zero:
    /// a group's pods are on a few of the cluster's nodes, and a list as long as the
    /// bins for each group grew with groups × nodes (a quarter of a consolidation
    /// decision's memory at 10,000 nodes).
    host: Vec<(u32, u32)>,
    pub other_hosts: u32,
}

impl DomainCounts {
    pub fn new(domains: usize) -> Self {
        Self {
            domain: vec![0; domains],
            host: Vec::new(),
            other_hosts: 0,
        }
    }
    pub fn host(&self, bin: usize) -> u32 {
        match self.host.binary_search_by_key(&bin, |&(b, _)| b as usize) {
            Ok(i) => self.host[i].1,
            Err(_) => 0,
        }
    }
    pub fn get(&self, key: TopologyKey, domain: usize) -> u32 {
        match key {
            TopologyKey::Hostname => self.host(domain),
            TopologyKey::Domain(_) => self.domain.get(domain).copied().unwrap_or(0),
        }
    }
    pub fn bump(&mut self, key: TopologyKey, domain: usize) {
        self.add(key, domain, 1);
    }
    /// Adds `delta` (negative: a pod leaves) to a domain's count.
    pub fn add(&mut self, key: TopologyKey, domain: usize, delta: i32) {
        match key {
            TopologyKey::Hostname => self.add_host(domain, delta),
            TopologyKey::Domain(_) => {
                let counts = &mut self.domain;
                if counts.len() <= domain {
                    counts.resize(domain + 1, 0);
                }
                debug_assert!(delta > 0 || counts[domain] > 0, "a count below zero");
                counts[domain] = counts[domain].saturating_add_signed(delta);
            }
        }
    }
    fn add_host(&mut self, bin: usize, delta: i32) {
        let bin = u32::try_from(bin).expect("fewer than 2^32 bins");
        match self.host.binary_search_by_key(&bin, |&(b, _)| b) {
            Ok(i) => {
                let count = &mut self.host[i].1;
                debug_assert!(delta > 0 || *count > 0, "a count below zero");
                *count = count.saturating_add_signed(delta);
                if *count == 0 {
                    self.host.remove(i);
                }
            }
            Err(i) => {
                debug_assert!(delta >= 0, "a count below zero");
                let count = 0u32.saturating_add_signed(delta);
                if count > 0 {
                    self.host.insert(i, (bin, count));
                }
            }
        }
    }
    pub fn total(&self, key: TopologyKey) -> u32 {
        match key {
            TopologyKey::Domain(_) => self.domain.iter().sum(),
            TopologyKey::Hostname => {
                self.host.iter().map(|&(_, c)| c).sum::<u32>() + self.other_hosts
            }
        }
    }
}

#[derive(Debug, Clone)]
pub struct Group {
    pub spec: GroupSpec,
    pub counts: DomainCounts,
    pub owners: DomainCounts,
    /// Domain keys: the values a node the group counts could have (from the NodePools
    /// whose taints the filter admits, and the existing nodes it matches). Spread skew
    /// is measured over these only, so a zone no pod could ever use does not hold the
    /// minimum at zero.
    pub universe: Vec<bool>,
    /// `spec.filter`, compiled.
    pub filter: Option<CompiledFilter>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_counts_are_kept_only_for_hosts_with_pods_and_read_zero_elsewhere() {
        let mut counts = DomainCounts::new(3);
        counts.add(TopologyKey::Hostname, 9_000, 2);
        counts.add(TopologyKey::Hostname, 7, 1);
        counts.add(TopologyKey::Hostname, 9_000, -1);
        assert_eq!(counts.host(9_000), 1);
        assert_eq!(counts.host(7), 1);
        assert_eq!(counts.host(8), 0);
        assert_eq!(counts.host, vec![(7, 1), (9_000, 1)], "in bin order");
        counts.add(TopologyKey::Hostname, 7, -1);
        assert_eq!(counts.host(7), 0);
        assert_eq!(
            counts.host,
            vec![(9_000, 1)],
            "a host back at zero is dropped"
        );
        counts.other_hosts = 4;
        assert_eq!(counts.total(TopologyKey::Hostname), 5);
        counts.add(TopologyKey::Domain(0), 2, 3);
        assert_eq!(counts.get(TopologyKey::Domain(0), 2), 3);
        assert_eq!(counts.total(TopologyKey::Domain(0)), 3);
    }
}
