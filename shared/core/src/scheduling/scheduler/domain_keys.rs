//! Domain keys: the node labels topology constraints count on (zone and capacity type
//! always, then any other label a constraint names), with their values and which of
//! them each pool could give a node. Hostname is not a domain key: its domains are the
//! bins themselves.

use crate::catalog::{CapacityType, LABEL_CAPACITY_TYPE, LABEL_HOSTNAME, LABEL_ZONE};
use crate::scheduling::topology::TopologyKey;

use super::Scheduler;
use super::ids::{IdVec, PoolId};
use super::offerings::ct_index;

/// A label topology constraints count on, and its values (the domains).
#[derive(Clone)]
pub(crate) struct DomainKey {
    pub(crate) label: String,
    pub(crate) values: Vec<String>,
    /// A label instance types carry (arch, instance family…): a new claim's value is
    /// its type's.
    pub(crate) type_key: bool,
    /// Per pool: the values a node it launches could have.
    pub(crate) pool_values: IdVec<PoolId, Vec<bool>>,
}

impl DomainKey {
    pub(super) fn index(&self, value: &str) -> Option<usize> {
        self.values.iter().position(|v| v == value)
    }
}

impl Scheduler<'_> {
    /// Zone and capacity type are always domain keys; their values are the offered
    /// zones and the two capacity types, usable by a pool where one of its types has
    /// an offering there.
    pub(super) fn build_domain_keys(&mut self) {
        let zone_values: IdVec<PoolId, Vec<bool>> = self
            .pools
            .iter()
            .map(|pool| {
                (0..self.zones.len())
                    .map(|z| {
                        let mut mask = vec![false; self.zones.len()];
                        mask[z] = true;
                        pool.types.iter().any(|&t| {
                            self.cheapest_offering(t, &pool.reqs, Some(&mask), None)
                                .is_some()
                        })
                    })
                    .collect()
            })
            .collect();
        let ct_values: IdVec<PoolId, Vec<bool>> = self
            .pools
            .iter()
            .map(|pool| {
                CapacityType::ALL
                    .iter()
                    .map(|&ct| {
                        let mut mask = [false; 2];
                        mask[ct_index(ct)] = true;
                        pool.types.iter().any(|&t| {
                            self.cheapest_offering(t, &pool.reqs, None, Some(mask))
                                .is_some()
                        })
                    })
                    .collect()
            })
            .collect();
        self.keys.push(DomainKey {
            label: LABEL_ZONE.to_string(),
            values: self.zones.clone(),
            type_key: false,
            pool_values: zone_values,
        });
        self.keys.push(DomainKey {
            label: LABEL_CAPACITY_TYPE.to_string(),
            values: CapacityType::ALL
                .iter()
                .map(|ct| ct.as_str().to_string())
                .collect(),
            type_key: false,
            pool_values: ct_values,
        });
    }

    /// The topology key for a label, registering a new domain key on first use: its
    /// values are those the NodePools can give a node (their requirements and labels,
    /// or their types' labels for a label types carry) and those existing nodes have.
    pub(super) fn topology_key(&mut self, label: &str) -> TopologyKey {
        if label == LABEL_HOSTNAME {
            return TopologyKey::Hostname;
        }
        if let Some(k) = self.keys.iter().position(|k| k.label == label) {
            return TopologyKey::Domain(k);
        }
        let type_key = self.type_keys.contains(label);
        let mut values: Vec<String> = Vec::new();
        let mut push = |v: &String| {
            if !values.contains(v) {
                values.push(v.clone());
            }
        };
        for pool in &self.pools {
            if type_key {
                for &t in &pool.types {
                    if let Some(v) = self.instance_type(t).labels.get(label) {
                        push(v);
                    }
                }
            } else if let Some(vs) = pool.reqs.get(label).and_then(|s| s.finite_values()) {
                vs.iter().for_each(&mut push);
            }
        }
        for node in self.input.nodes {
            if let Some(v) = node.labels.get(label) {
                push(v);
            }
        }
        for claim in self.input.in_flight {
            if let Some(v) = claim.labels.get(label) {
                push(v);
            }
        }
        let pool_values = self
            .pools
            .iter()
            .map(|pool| {
                values
                    .iter()
                    .map(|v| {
                        if type_key {
                            pool.types
                                .iter()
                                .any(|&t| self.instance_type(t).labels.get(label) == Some(v))
                        } else {
                            pool.reqs.get(label).is_some_and(|s| s.has(v))
                        }
                    })
                    .collect()
            })
            .collect();
        let k = self.keys.len();
        self.keys.push(DomainKey {
            label: label.to_string(),
            values,
            type_key,
            pool_values,
        });
        for bin in &mut self.bins {
            let d = bin
                .reqs
                .get(label)
                .and_then(|s| s.single_value())
                .and_then(|v| self.keys[k].index(v));
            if bin.domains.len() <= k {
                bin.domains.resize(k + 1, None);
            }
            bin.domains[k] = d;
        }
        TopologyKey::Domain(k)
    }

    pub(super) fn key_label(&self, key: TopologyKey) -> &str {
        match key {
            TopologyKey::Hostname => LABEL_HOSTNAME,
            TopologyKey::Domain(k) => &self.keys[k].label,
        }
    }
}
