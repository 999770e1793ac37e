//! Opening a new claim for a pod no bin can take: the first NodePool (by weight) that
//! can launch a node for it, at a target type chosen by the dual prices of the
//! remaining demand (see `duals`) and pinned to the domains its topology needs. When no
//! pool can, the reasons of each are what the pod reports as unschedulable.

use std::sync::Arc;

use crate::catalog::CapacityType;
use crate::resources::{Resources, WELL_KNOWN};
use crate::scheduling::topology::TopologyKey;
use crate::scheduling::unschedulable::{PoolRefusal, Refusal, Unschedulable};
use crate::well_known::LABEL_HOSTNAME;

use super::Scheduler;
use super::bins::{Bin, Origin};
use super::ids::{DomainId, DomainKeyId, EClassId, IdVec, InstanceTypeId, PodId, PoolId};
use super::offerings::{Offering, ct_domain};
use super::placement::{Fit, Pin};

/// The type a new claim is sized by, with its offering: the one worth most per dollar
/// for what is still to place (`score`), larger `size` breaking ties.
struct Target {
    score: f64,
    size: f64,
    instance_type: InstanceTypeId,
    offering: Offering,
}

/// A domain key other than zone and capacity type that a pod constrains, and the
/// domains of it a new claim for the pod may be pinned to.
struct OtherKey {
    key: DomainKeyId,
    ok: IdVec<DomainId, bool>,
}

impl Scheduler<'_> {
    pub(super) fn open_claim(&mut self, e: EClassId, pod: PodId) -> Result<(), Unschedulable> {
        let mut refusals: Vec<PoolRefusal> = Vec::new();
        for oi in 0..self.pool_order.len() {
            let pool = self.pool_order[oi];
            let refused = match &self.eclasses[e].pool_fit[pool] {
                Err(reason) => reason.clone(),
                Ok(()) => match self.open_in_pool(e, pod, pool) {
                    Ok(()) => return Ok(()),
                    Err(reason) => reason,
                },
            };
            refusals.push(PoolRefusal {
                node_pool: self.node_pool(pool).name.clone(),
                reason: refused,
            });
        }
        if refusals.is_empty() {
            return Err(Unschedulable::NoNodePool);
        }
        Err(Unschedulable::Refused(refusals))
    }

    /// Why no new claim can satisfy the pod's pod-affinity, if that is so: a required
    /// (or not yet relaxed preferred) term that only pods already running elsewhere, or
    /// no pod at all, can satisfy.
    pub(super) fn affinity_blocks_new_claims(&self, e: EClassId, pod: PodId) -> Option<Refusal> {
        let p = self.pod(pod);
        for &g in &self.eclasses[e].affinity {
            let group = &self.groups[g];
            let total = group.counts.total(group.spec.key);
            let selects_itself = group.spec.selects(&p.namespace, &p.labels);
            if total == 0 && !selects_itself {
                return Some(Refusal::NoAffinityMatch(self.group_constraint(g)));
            }
            if group.spec.key == TopologyKey::Hostname && total > 0 {
                return Some(Refusal::NoRoomNextToAffinityMatch(self.group_constraint(g)));
            }
        }
        None
    }

    pub(super) fn open_in_pool(
        &mut self,
        e: EClassId,
        pod: PodId,
        pool: PoolId,
    ) -> Result<(), Refusal> {
        let p = self.pod(pod);
        if let Some(reason) = self.affinity_blocks_new_claims(e, pod) {
            return Err(reason);
        }
        // A hostname requirement names existing nodes: a new one is never among them
        // (also when selectors and terms left no hostname at all).
        if let Some(set) = self.eclasses[e].reqs.get(LABEL_HOSTNAME)
            && !set.admits_unknown_value()
        {
            return Err(Refusal::HostnameFull(set.clone()));
        }
        let reqs = self.pools[pool].reqs.intersect(&self.eclasses[e].reqs);
        let zmask = self.allowed_domains(e, pod, DomainKeyId::ZONE);
        let cmask = self.allowed_domains(e, pod, DomainKeyId::CAPACITY_TYPE);
        let cmask_arr = cmask
            .as_ref()
            .map(|m| CapacityType::ALL.map(|ct| m[ct_domain(ct)]));
        if zmask.as_ref().is_some_and(|m| !m.iter().any(|x| *x))
            || cmask_arr.is_some_and(|m| !m.iter().any(|x| *x))
        {
            return Err(Refusal::TopologyUnsatisfiable(self.topology_constraints(e)));
        }
        // Other keys: the domains the pod may go to that this pool can give a node.
        let mut other_keys: Vec<OtherKey> = Vec::new();
        for k in self.keys.ids_from(DomainKeyId::FIRST_OTHER) {
            let Some(allowed) = self.allowed_domains(e, pod, k) else {
                continue;
            };
            let key = &self.keys[k];
            let ok: IdVec<DomainId, bool> = allowed
                .ids()
                .map(|d| {
                    allowed[d]
                        && key.pool_values[pool][d]
                        && reqs.get(&key.label).is_none_or(|s| s.has(&key.values[d]))
                })
                .collect();
            if !ok.iter().any(|x| *x) {
                return Err(Refusal::TopologyUnsatisfiableInPool(
                    self.topology_constraints(e),
                ));
            }
            other_keys.push(OtherKey { key: k, ok });
        }
        self.refresh_duals(pool);
        let remaining = self.compatible_remaining(pool);
        let mut best: Option<Target> = None;
        // The cheapest single node that could hold everything still to place (as a
        // target it has no score or size: see the tail below).
        let mut whole_best: Option<Target> = None;
        let mut shortfall: Option<(String, i64, i64)> = None;
        let mut limit_reason = None;
        let mut offering_missing = false;
        let mut port_held: Option<Refusal> = None;
        let mut other_key_missing = false;
        let types = Arc::clone(&self.eclasses[e].pool_types);
        let offerings = self.offering_filter(&reqs, zmask.as_ref(), cmask_arr);
        for &t in &types[pool] {
            let usable = self.usable(pool, t);
            if !p.requests.fits_in(usable) {
                if let Some(s) = p.requests.first_shortfall(usable)
                    && shortfall.as_ref().is_none_or(|b| s.2 > b.2 || b.0 != s.0)
                {
                    shortfall = Some(s);
                }
                continue;
            }
            if let Some(held) = self.port_held_by_daemon(pool, t, p) {
                port_held = Some(held);
                continue;
            }
            if other_keys.iter().any(|other| {
                self.keys[other.key].type_key
                    && !other
                        .ok
                        .ids()
                        .any(|d| other.ok[d] && self.claim_can_be_in(Some(t), &reqs, other.key, d))
            }) {
                other_key_missing = true;
                continue;
            }
            let Some(offering) = self.cheapest_allowed(t, &offerings) else {
                offering_missing = true;
                continue;
            };
            if let Err(r) = self.within_limits(pool, t) {
                limit_reason = Some(r);
                continue;
            }
            let price = offering.price;
            let worth = self.value(pool, t, &remaining, &p.requests);
            if remaining.fits_in(usable)
                && whole_best.as_ref().is_none_or(|w| price < w.offering.price)
            {
                whole_best = Some(Target {
                    score: 0.0,
                    size: 0.0,
                    instance_type: t,
                    offering,
                });
            }
            let score = if price > 0.0 {
                worth.value / price
            } else {
                f64::INFINITY
            };
            let better = match &best {
                None => true,
                Some(b) => {
                    score > b.score * (1.0 + 1e-9)
                        || (score >= b.score * (1.0 - 1e-9) && worth.size > b.size)
                }
            };
            if better {
                best = Some(Target {
                    score,
                    size: worth.size,
                    instance_type: t,
                    offering,
                });
            }
        }
        // The tail: one node for everything that remains, when that is cheaper than
        // the whole nodes of the most efficient type it would otherwise take.
        if let (Some(whole), Some(b)) = (whole_best, &best) {
            let usable = self.usable(pool, b.instance_type);
            let nodes = (0..WELL_KNOWN.len())
                .filter(|&d| remaining.slot_milli(d) > 0)
                .map(|d| remaining.slot_milli(d) as f64 / usable.slot_milli(d).max(1) as f64)
                .fold(1.0f64, f64::max)
                .ceil();
            if whole.offering.price <= nodes * b.offering.price {
                best = Some(whole);
            }
        }
        let Some(Target {
            instance_type: t,
            offering,
            ..
        }) = best
        else {
            if let Some(r) = limit_reason {
                return Err(r);
            }
            if let Some(zones) = self.only_shifted_zones(&offerings) {
                return Err(Refusal::ZonalShift(zones));
            }
            if offering_missing || other_key_missing {
                if zmask.is_some() || cmask.is_some() || other_key_missing {
                    return Err(Refusal::TopologyUnsatisfiableInPool(
                        self.topology_constraints(e),
                    ));
                }
                return Err(Refusal::NoOffering);
            }
            if let Some(refusal) = port_held {
                return Err(refusal);
            }
            if let Some((resource, requested, largest)) = shortfall {
                return Err(Refusal::TooLarge {
                    resource,
                    requested,
                    largest: largest.max(0),
                });
            }
            return Err(Refusal::NoMatchingType);
        };
        let reqs = if self.pools[pool].has_min_values {
            self.min_values_within_policy(pool, &reqs, &p.requests)?
                .unwrap_or(reqs)
        } else {
            reqs
        };
        let ceiling = self.usable(pool, t).clone();
        let capacity = self.capacity(pool, t).clone();
        self.pools[pool].usage.add(&capacity);
        let nodes = self.pools[pool].usage.get_milli("nodes");
        self.pools[pool].usage.set_milli("nodes", nodes + 1000);
        let domains = self
            .keys
            .iter()
            .map(|key| {
                reqs.get(&key.label)
                    .and_then(|s| s.single_value())
                    .and_then(|v| key.domain(v))
            })
            .collect();
        let ports = self.daemon_ports(pool, t);
        let mut pins = Vec::new();
        if zmask.is_some() {
            pins.push(Pin {
                key: DomainKeyId::ZONE,
                domain: offering.zone,
            });
        }
        if cmask.is_some() {
            pins.push(Pin {
                key: DomainKeyId::CAPACITY_TYPE,
                domain: ct_domain(offering.capacity_type),
            });
        }
        for other in &other_keys {
            let usable: IdVec<DomainId, bool> = other
                .ok
                .ids()
                .map(|d| self.claim_can_be_in(Some(t), &reqs, other.key, d))
                .collect();
            if let Some(domain) = self.choose_domain(e, other.key, &other.ok, &usable) {
                pins.push(Pin {
                    key: other.key,
                    domain,
                });
            }
        }
        let b = self.bins.push(Bin {
            origin: Origin::New(pool),
            reqs: reqs.clone(),
            version: 0,
            taints: self.pools[pool].taints.clone(),
            ceiling,
            used: Resources::new(),
            target: Some(t),
            domains,
            ports,
            pods: Vec::new(),
        });
        for other in self.eclasses.ids() {
            self.admit(other, b);
        }
        let fit = Fit { merged: None, pins };
        self.commit(e, pod, b, fit);
        Ok(())
    }
}
