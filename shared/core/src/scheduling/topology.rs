//! Topology groups: pod counts per domain for topology spread, pod affinity and pod
//! anti-affinity, on zone, capacity type and hostname.
//!
//! Each distinct (kind, key, selector, namespaces) is one group. A group counts the
//! pods that *match* it per domain (`counts`), and for anti-affinity also where the
//! pods that *own* the term are (`owners`), because anti-affinity is symmetric: a pod
//! may not land next to a pod whose anti-affinity term selects it.

use crate::catalog::{LABEL_CAPACITY_TYPE, LABEL_HOSTNAME, LABEL_ZONE};
use crate::cluster::LabelSelector;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TopologyKey {
    Zone,
    CapacityType,
    Hostname,
}

impl TopologyKey {
    pub fn parse(key: &str) -> Option<Self> {
        match key {
            LABEL_ZONE => Some(TopologyKey::Zone),
            LABEL_CAPACITY_TYPE => Some(TopologyKey::CapacityType),
            LABEL_HOSTNAME => Some(TopologyKey::Hostname),
            _ => None,
        }
    }
    pub fn label(self) -> &'static str {
        match self {
            TopologyKey::Zone => LABEL_ZONE,
            TopologyKey::CapacityType => LABEL_CAPACITY_TYPE,
            TopologyKey::Hostname => LABEL_HOSTNAME,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupKind {
    Spread { max_skew: u32, min_domains: u32 },
    Affinity,
    AntiAffinity,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GroupSpec {
    pub kind: GroupKind,
    pub key: TopologyKey,
    /// `None` selects no pod.
    pub selector: Option<LabelSelector>,
    pub namespaces: Vec<String>,
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

    pub fn describe(&self) -> String {
        match self.kind {
            GroupKind::Spread { max_skew, .. } => {
                format!(
                    "topology spread on {} (maxSkew {max_skew})",
                    self.key.label()
                )
            }
            GroupKind::Affinity => format!("pod affinity on {}", self.key.label()),
            GroupKind::AntiAffinity => format!("pod anti-affinity on {}", self.key.label()),
        }
    }
}

/// Counts per domain: zones and capacity types by index, hosts by bin index.
#[derive(Debug, Clone, Default)]
pub struct DomainCounts {
    pub zone: Vec<u32>,
    pub capacity_type: [u32; 2],
    pub host: Vec<u32>,
}

impl DomainCounts {
    pub fn new(zones: usize) -> Self {
        Self {
            zone: vec![0; zones],
            capacity_type: [0; 2],
            host: Vec::new(),
        }
    }
    pub fn host(&self, bin: usize) -> u32 {
        self.host.get(bin).copied().unwrap_or(0)
    }
    pub fn add_host(&mut self, bin: usize) {
        if self.host.len() <= bin {
            self.host.resize(bin + 1, 0);
        }
        self.host[bin] += 1;
    }
    pub fn total(&self, key: TopologyKey) -> u32 {
        match key {
            TopologyKey::Zone => self.zone.iter().sum(),
            TopologyKey::CapacityType => self.capacity_type.iter().sum(),
            TopologyKey::Hostname => self.host.iter().sum(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Group {
    pub spec: GroupSpec,
    pub counts: DomainCounts,
    pub owners: DomainCounts,
}
