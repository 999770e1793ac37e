//! Domain keys: the node labels topology constraints count on (zone and capacity type
//! always, then any other label a constraint names), with their values and which of
//! them each pool could give a node. Hostname is not a domain key: its domains are the
//! bins themselves.

use crate::catalog::CapacityType;
use crate::scheduling::topology::TopologyKey;
use crate::well_known::{LABEL_CAPACITY_TYPE, LABEL_HOSTNAME, LABEL_ZONE};

use super::Scheduler;
use super::ids::{DomainId, DomainKeyId, IdVec, PoolId};
use super::offerings::{CT_COUNT, ct_index};

/// A label topology constraints count on, and its values (the domains).
#[derive(Clone)]
pub(crate) struct DomainKey {
    pub(crate) label: String,
    pub(crate) values: IdVec<DomainId, String>,
    /// A label instance types carry (arch, instance family…): a new claim's value is
    /// its type's.
    pub(crate) type_key: bool,
    /// Per pool: the values a node it launches could have.
    pub(crate) pool_values: IdVec<PoolId, IdVec<DomainId, bool>>,
}

impl DomainKey {
    /// The domain of `value`, if it is one of the key's values.
    pub(super) fn domain(&self, value: &str) -> Option<DomainId> {
        self.values.position(|v| v == value)
    }
}

/// The domain key a topology key counts on (`None`: hostname, whose domains are bins).
/// [`TopologyKey`] is public and names its key by plain index.
pub(crate) fn domain_key(key: TopologyKey) -> Option<DomainKeyId> {
    match key {
        TopologyKey::Hostname => None,
        TopologyKey::Domain(k) => Some(DomainKeyId::from_index(k)),
    }
}

impl DomainKeyId {
    /// The topology key counting on this domain key.
    pub(crate) fn topology(self) -> TopologyKey {
        TopologyKey::Domain(self.index())
    }
}

impl Scheduler<'_> {
    /// Zone and capacity type are always domain keys; their values are the offered
    /// zones and the two capacity types, usable by a pool where one of its types has
    /// an offering there.
    pub(super) fn build_domain_keys(&mut self) {
        let zone_values: IdVec<PoolId, IdVec<DomainId, bool>> = self
            .pools
            .iter()
            .map(|pool| {
                self.zones
                    .ids()
                    .map(|z| {
                        let mut mask = IdVec::filled(false, self.zones.len());
                        mask[z] = true;
                        pool.types.iter().any(|&t| {
                            self.cheapest_offering(t, &pool.reqs, Some(&mask), None)
                                .is_some()
                        })
                    })
                    .collect()
            })
            .collect();
        let ct_values: IdVec<PoolId, IdVec<DomainId, bool>> = self
            .pools
            .iter()
            .map(|pool| {
                CapacityType::ALL
                    .iter()
                    .map(|&ct| {
                        let mut mask = [false; CT_COUNT];
                        mask[ct_index(ct)] = true;
                        pool.types.iter().any(|&t| {
                            self.cheapest_offering(t, &pool.reqs, None, Some(mask))
                                .is_some()
                        })
                    })
                    .collect()
            })
            .collect();
        let zone = self.keys.push(DomainKey {
            label: LABEL_ZONE.to_string(),
            values: self.zones.clone(),
            type_key: false,
            pool_values: zone_values,
        });
        let capacity_type = self.keys.push(DomainKey {
            label: LABEL_CAPACITY_TYPE.to_string(),
            values: CapacityType::ALL
                .iter()
                .map(|ct| ct.as_str().to_string())
                .collect(),
            type_key: false,
            pool_values: ct_values,
        });
        debug_assert_eq!(
            (zone, capacity_type),
            (DomainKeyId::ZONE, DomainKeyId::CAPACITY_TYPE)
        );
    }

    /// The topology key for a label, registering a new domain key on first use: its
    /// values are those the NodePools can give a node (their requirements and labels,
    /// or their types' labels for a label types carry) and those existing nodes have.
    pub(super) fn topology_key(&mut self, label: &str) -> TopologyKey {
        if label == LABEL_HOSTNAME {
            return TopologyKey::Hostname;
        }
        if let Some(k) = self.keys.position(|k| k.label == label) {
            return k.topology();
        }
        let type_key = self.type_keys.contains(label);
        let mut values: IdVec<DomainId, String> = IdVec::new();
        let mut push = |v: &String| {
            if !values.iter().any(|x| x == v) {
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
        let k = self.keys.push(DomainKey {
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
                .and_then(|v| self.keys[k].domain(v));
            if bin.domains.len() <= k.index() {
                bin.domains.resize(k.index() + 1, None);
            }
            bin.domains[k] = d;
        }
        k.topology()
    }

    pub(super) fn key_label(&self, key: TopologyKey) -> &str {
        match domain_key(key) {
            None => LABEL_HOSTNAME,
            Some(k) => &self.keys[k].label,
        }
    }
}
