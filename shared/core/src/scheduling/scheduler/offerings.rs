//! Instance types and their offerings: whether a type's labels meet requirements, its
//! cheapest allowed (zone, capacity type, price), and what a node of the type leaves
//! pods once a pool's kubelet settings and DaemonSets have taken their share.

use std::sync::Arc;

use crate::catalog::{CapacityType, InstanceType, RESERVATION_LABELS, Reservation};
use crate::cluster::{HostPort, Pod};
use crate::resources::Resources;
use crate::scheduling::fast_hash::FastMap;
use crate::scheduling::requirements::{Requirements, ValueSet};
use crate::scheduling::unschedulable::Refusal;
use crate::well_known::{LABEL_CAPACITY_TYPE, LABEL_NODEPOOL, LABEL_ZONE};

use super::Scheduler;
use super::ids::{DomainId, IdVec, InstanceTypeId, PoolId};

/// The zones (`Scheduler::zones`) and capacity types (by [`ct_index`]) an offering may
/// be in, and the pool whose prices (NodeOverlays) count, when the requirements name
/// one and its prices differ.
pub(crate) struct OfferingFilter {
    zones: IdVec<DomainId, bool>,
    capacity_types: [bool; CT_COUNT],
    pool: Option<PoolId>,
    reservation: Option<ReservationRequirements>,
}

/// Requirements on the labels of a reserved node ([`RESERVATION_LABELS`]): a pod or
/// pool pinned to a reservation (`capacity-reservation-id`), a kind of reservation
/// (`-type`), or away from interruptible ones (`-interruptible: "false"`). As in
/// Karpenter, a reserved offering carries its reservation's values and every other
/// offering none: on-demand and spot stay open only when each set allows the label to
/// be absent.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ReservationRequirements(Vec<(&'static str, ValueSet)>);

impl ReservationRequirements {
    /// The requirements `reqs` puts on reservation labels; `None` when it puts none.
    pub(crate) fn of(reqs: &Requirements) -> Option<Self> {
        let sets: Vec<(&'static str, ValueSet)> = RESERVATION_LABELS
            .into_iter()
            .filter_map(|k| reqs.get(k).map(|set| (k, set.clone())))
            .collect();
        (!sets.is_empty()).then_some(ReservationRequirements(sets))
    }

    /// Whether reservation `r`'s labels meet them.
    pub(crate) fn met_by(&self, r: &Reservation) -> bool {
        self.0
            .iter()
            .all(|(k, set)| r.label(k).is_some_and(|v| set.has(&v)))
    }

    /// Whether a node outside any reservation (on-demand, spot) meets them.
    pub(crate) fn allow_unreserved(&self) -> bool {
        self.0.iter().all(|(_, set)| set.allows_absent())
    }

    /// The labels a claim made under them carries, so that its launch picks a
    /// reservation they allow: each key pinned to a single value.
    pub(crate) fn pinned_labels(&self) -> impl Iterator<Item = (String, String)> + '_ {
        self.0
            .iter()
            .filter_map(|(k, set)| Some((k.to_string(), set.single_value()?.to_string())))
    }
}

/// Requirements on keys instance types carry (see [`Scheduler::type_requirements`]).
pub(super) struct TypeRequirements<'r>(Vec<(&'r str, &'r ValueSet)>);

fn type_label_meets(it: &InstanceType, key: &str, set: &ValueSet) -> bool {
    match it.labels.get(key) {
        Some(v) => set.has(v),
        None => set.allows_absent(),
    }
}

/// Where and how a type can be launched, at what price.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Offering {
    /// Its zone, one of `Scheduler::zones`.
    pub(crate) zone: DomainId,
    pub(crate) capacity_type: CapacityType,
    pub(crate) price: f64,
}

pub(crate) fn ct_index(ct: CapacityType) -> usize {
    match ct {
        CapacityType::Spot => 0,
        CapacityType::OnDemand => 1,
        CapacityType::Reserved => 2,
    }
}

/// How many capacity types there are (the length of arrays indexed by [`ct_index`]).
pub(crate) const CT_COUNT: usize = CapacityType::ALL.len();

/// Karpenter's reservation manager for one solve: how many instances each capacity
/// reservation ([`crate::pricing::Pricing::reservations`], by index) has left once the
/// claims finished so far in the solve took theirs. A `reserved` offering is offered
/// only while a reservation its pool's EC2NodeClass selects has one left; once used up
/// the claims fall back to the pool's other capacity types. A speculative solve
/// (`Scheduler::stamp`) starts again from the counts the cloud reported, less what the
/// solves kept before it took: the disruption commands taken earlier in the same
/// decision launch their replacements too.
#[derive(Debug, Default, Clone)]
pub(crate) struct ReservedLedger {
    /// The solve whose claims `used` counts.
    stamp: u32,
    /// Per reservation: instances the solve's claims took.
    used: Vec<u32>,
    /// Per reservation: instances the claims of kept solves took.
    kept: Vec<u32>,
}

/// A capacity type as a domain of `DomainKeyId::CAPACITY_TYPE`.
pub(crate) fn ct_domain(ct: CapacityType) -> DomainId {
    DomainId::from_index(ct_index(ct))
}

impl<'a> Scheduler<'a> {
    pub(super) fn instance_type(&self, t: InstanceTypeId) -> &'a InstanceType {
        &self.input.catalog.types[t.index()]
    }

    pub(crate) fn instance_type_named(&self, name: &str) -> Option<InstanceTypeId> {
        let types = &self.input.catalog.types;
        types
            .iter()
            .position(|t| t.name == name)
            .map(InstanceTypeId::from_index)
    }

    /// Whether type `t`'s labels satisfy every requirement on a key instance types carry.
    pub(super) fn type_satisfies(&self, t: InstanceTypeId, reqs: &Requirements) -> bool {
        let it = self.instance_type(t);
        reqs.iter().all(|(k, set)| {
            if !self.type_keys.contains(k.as_str()) {
                return true;
            }
            type_label_meets(it, k, set)
        })
    }

    /// The types of `pool` whose labels satisfy `reqs` ([`Self::type_satisfies`]), in the
    /// pool's order. Cached: every finished claim and every re-packed group asks, in
    /// solves by the thousand, and their requirements are few (a pool's, narrowed by
    /// the pods' and pinned to a zone); asking each of hundreds of types by its labels
    /// was most of finishing a claim.
    pub(super) fn types_meeting(
        &mut self,
        pool: PoolId,
        reqs: &Requirements,
    ) -> Arc<[InstanceTypeId]> {
        if self.meeting_cache.len() <= pool.index() {
            self.meeting_cache
                .resize(pool.index() + 1, FastMap::default());
        }
        if let Some(types) = self.meeting_cache[pool].get(reqs) {
            return Arc::clone(types);
        }
        let type_reqs = self.type_requirements(reqs);
        let types: Arc<[InstanceTypeId]> = self.pools[pool]
            .types
            .iter()
            .copied()
            .filter(|&t| self.type_meets(t, &type_reqs))
            .collect();
        // A bound on a cache that unusual clusters (requirements unlike from claim to
        // claim) could otherwise grow without end.
        let cache = &mut self.meeting_cache[pool];
        if cache.len() >= 4096 {
            cache.clear();
        }
        cache.insert(reqs.clone(), Arc::clone(&types));
        types
    }

    /// The requirements of `reqs` on keys instance types carry, picked out once for a
    /// loop over many types (see [`Self::type_meets`]).
    pub(super) fn type_requirements<'r>(&self, reqs: &'r Requirements) -> TypeRequirements<'r> {
        TypeRequirements(
            reqs.iter()
                .filter(|(k, _)| self.type_keys.contains(k.as_str()))
                .map(|(k, set)| (k.as_str(), set))
                .collect(),
        )
    }

    /// [`Self::type_satisfies`] with the type keys' requirements picked out already.
    pub(super) fn type_meets(&self, t: InstanceTypeId, reqs: &TypeRequirements) -> bool {
        let it = self.instance_type(t);
        reqs.0.iter().all(|(k, set)| type_label_meets(it, k, set))
    }

    /// The cheapest offering of type `t` allowed by `reqs` (the least used zone among
    /// equal prices), optionally restricted further to zone set `zones` / capacity
    /// types `cts` (bit masks). Loops over many types build the [`OfferingFilter`] once
    /// and call [`Self::cheapest_allowed`].
    pub(crate) fn cheapest_offering(
        &self,
        t: InstanceTypeId,
        reqs: &Requirements,
        zones: Option<&IdVec<DomainId, bool>>,
        cts: Option<[bool; CT_COUNT]>,
    ) -> Option<Offering> {
        self.cheapest_allowed(t, &self.offering_filter(reqs, zones, cts))
    }

    /// The zones and capacity types `reqs` (and the optional masks) allow, read from
    /// the requirements once rather than once per type.
    pub(crate) fn offering_filter(
        &self,
        reqs: &Requirements,
        zones: Option<&IdVec<DomainId, bool>>,
        cts: Option<[bool; CT_COUNT]>,
    ) -> OfferingFilter {
        let zone_set = reqs.get(LABEL_ZONE);
        let ct_set = reqs.get(LABEL_CAPACITY_TYPE);
        let pool = if self.input.pricing.overlays.is_empty()
            && self.input.pricing.reservations.is_empty()
        {
            None
        } else {
            reqs.get(LABEL_NODEPOOL)
                .and_then(ValueSet::single_value)
                .and_then(|name| self.pool_named(name))
        };
        let reservation = ReservationRequirements::of(reqs);
        let unreserved = reservation
            .as_ref()
            .is_none_or(ReservationRequirements::allow_unreserved);
        OfferingFilter {
            pool,
            zones: self
                .zones
                .enumerate()
                .map(|(z, name)| zones.is_none_or(|m| m[z]) && zone_set.is_none_or(|s| s.has(name)))
                .collect(),
            capacity_types: CapacityType::ALL.map(|ct| {
                cts.is_none_or(|m| m[ct_index(ct)])
                    && ct_set.is_none_or(|s| s.has(ct.as_str()))
                    && (unreserved || ct == CapacityType::Reserved)
            }),
            reservation,
        }
    }

    /// The zones `filter` allows when every one of them is under a zonal shift (so
    /// nothing can launch for the pod while the shift lasts); `None` otherwise.
    pub(crate) fn only_shifted_zones(&self, filter: &OfferingFilter) -> Option<Vec<String>> {
        let pricing = self.input.pricing;
        if pricing.shifted_zones.is_empty() {
            return None;
        }
        let allowed: Vec<&String> = self
            .zones
            .enumerate()
            .filter(|(z, _)| filter.zones[*z])
            .map(|(_, name)| name)
            .collect();
        (!allowed.is_empty() && allowed.iter().all(|z| pricing.is_shifted(z)))
            .then(|| allowed.into_iter().cloned().collect())
    }

    /// The cheapest offering of type `t` that `filter` allows (the least used zone
    /// among equal prices).
    pub(crate) fn cheapest_allowed(
        &self,
        t: InstanceTypeId,
        filter: &OfferingFilter,
    ) -> Option<Offering> {
        let mut best: Option<Offering> = None;
        let prices = filter
            .pool
            .and_then(|p| self.pools.get(p))
            .and_then(|p| p.prices.as_deref())
            .unwrap_or(&self.prices);
        for (z, by_ct) in prices[t].enumerate() {
            if !filter.zones[z] {
                continue;
            }
            for ct in CapacityType::ALL {
                if !filter.capacity_types[ct_index(ct)] {
                    continue;
                }
                if let Some(p) = by_ct[ct_index(ct)] {
                    if ct == CapacityType::Reserved
                        && self
                            .reservation_left(filter.pool, t, z, filter.reservation.as_ref())
                            .is_none()
                    {
                        continue;
                    }
                    let better = match best {
                        None => true,
                        Some(b) => {
                            p < b.price - 1e-12
                                || (p <= b.price + 1e-12
                                    && self.zone_use[z] < self.zone_use[b.zone])
                        }
                    };
                    if better {
                        best = Some(Offering {
                            zone: z,
                            capacity_type: ct,
                            price: p,
                        });
                    }
                }
            }
        }
        best
    }

    /// A reservation (index into the pricing's) for a node of type `t` in zone `z` of
    /// `pool` (any pool when `None`) with an instance left in this solve, that
    /// `wanted` (requirements on reservation labels) allows.
    pub(crate) fn reservation_left(
        &self,
        pool: Option<PoolId>,
        t: InstanceTypeId,
        z: DomainId,
        wanted: Option<&ReservationRequirements>,
    ) -> Option<usize> {
        let class = pool.map(|p| self.node_pool(p).node_class_ref.name.as_str());
        let it = self.instance_type(t);
        let zone = self.zones[z].as_str();
        let ledger = &self.reserved;
        let current = ledger.stamp == self.stamp;
        self.input
            .pricing
            .reservations
            .iter()
            .enumerate()
            .find(|(i, r)| {
                let mut used = ledger.kept.get(*i).copied().unwrap_or(0);
                if current {
                    used += ledger.used.get(*i).copied().unwrap_or(0);
                }
                r.instance_type == it.name
                    && r.zone == zone
                    && r.available > used
                    && class.is_none_or(|c| r.selected_by(c))
                    && wanted.is_none_or(|w| w.met_by(r))
            })
            .map(|(i, _)| i)
    }

    /// Takes one instance of a reservation for a claim finished as type `t` in zone
    /// `z` of `pool`: the next claims see one fewer. `false` when none is left.
    pub(crate) fn take_reservation(
        &mut self,
        pool: PoolId,
        t: InstanceTypeId,
        z: DomainId,
        wanted: Option<&ReservationRequirements>,
    ) -> bool {
        let Some(i) = self.reservation_left(Some(pool), t, z, wanted) else {
            return false;
        };
        let n = self.input.pricing.reservations.len();
        let ledger = &mut self.reserved;
        if ledger.stamp != self.stamp || ledger.used.len() != n {
            ledger.stamp = self.stamp;
            ledger.used = vec![0; n];
        }
        ledger.used[i] += 1;
        true
    }

    /// The solve just run is kept (a disruption command is taken): the instances its
    /// claims took stay taken for every later solve.
    pub(crate) fn keep_reservations(&mut self) {
        let stamp = self.stamp;
        let ledger = &mut self.reserved;
        if ledger.stamp != stamp {
            return;
        }
        if ledger.kept.len() < ledger.used.len() {
            ledger.kept.resize(ledger.used.len(), 0);
        }
        for (kept, used) in ledger.kept.iter_mut().zip(&mut ledger.used) {
            *kept += std::mem::take(used);
        }
    }

    /// What a node of type `t` in `pool` leaves pods: its allocatable (under the pool's
    /// EC2NodeClass kubelet settings) less the DaemonSet pods that would run there.
    pub(crate) fn usable(&self, pool: PoolId, t: InstanceTypeId) -> &Resources {
        &self.pools[pool].usable[t]
    }

    /// Host ports the DaemonSet pods on a node of type `t` in `pool` bind.
    pub(crate) fn daemon_ports(&self, pool: PoolId, t: InstanceTypeId) -> Vec<HostPort> {
        let pool = &self.pools[pool];
        pool.port_daemons[t]
            .iter()
            .flat_map(|&d| pool.daemons[d].ports.iter().cloned())
            .collect()
    }

    /// Whether a DaemonSet on type `t` in `pool` already binds one of `pod`'s host ports
    /// (the first such port).
    pub(super) fn port_held_by_daemon(
        &self,
        pool: PoolId,
        t: InstanceTypeId,
        pod: &Pod,
    ) -> Option<Refusal> {
        let info = &self.pools[pool];
        for &d in &info.port_daemons[t] {
            let daemon = &info.daemons[d];
            for mine in &pod.host_ports {
                if daemon.ports.iter().any(|p| p.conflicts_with(mine)) {
                    return Some(Refusal::HostPortHeldByDaemonSet {
                        port: mine.clone(),
                        daemonset: daemon.name.clone(),
                    });
                }
            }
        }
        None
    }
}
