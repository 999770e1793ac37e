//! Instance types and their offerings: whether a type's labels meet requirements, its
//! cheapest allowed (zone, capacity type, price), and what a node of the type leaves
//! pods once a pool's kubelet settings and DaemonSets have taken their share.

use crate::catalog::{CapacityType, InstanceType, LABEL_CAPACITY_TYPE, LABEL_ZONE};
use crate::cluster::{HostPort, Pod};
use crate::resources::Resources;
use crate::scheduling::requirements::Requirements;
use crate::scheduling::unschedulable::Refusal;

use super::Scheduler;
use super::ids::{InstanceTypeId, PoolId};

/// Where and how a type can be launched, at what price.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Offering {
    /// Index into `Scheduler::zones`.
    pub(crate) zone: usize,
    pub(crate) capacity_type: CapacityType,
    pub(crate) price: f64,
}

pub(crate) fn ct_index(ct: CapacityType) -> usize {
    match ct {
        CapacityType::Spot => 0,
        CapacityType::OnDemand => 1,
    }
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
            if !self.type_keys.contains(k) {
                return true;
            }
            match it.labels.get(k) {
                Some(v) => set.has(v),
                None => set.allows_absent(),
            }
        })
    }

    /// The cheapest offering of type `t` allowed by `reqs` (the least used zone among
    /// equal prices), optionally
    /// restricted further to zone set `zones` / capacity types `cts` (bit masks).
    pub(crate) fn cheapest_offering(
        &self,
        t: InstanceTypeId,
        reqs: &Requirements,
        zones: Option<&[bool]>,
        cts: Option<[bool; 2]>,
    ) -> Option<Offering> {
        let zone_set = reqs.get(LABEL_ZONE);
        let ct_set = reqs.get(LABEL_CAPACITY_TYPE);
        let mut best: Option<Offering> = None;
        for (z, by_ct) in self.prices[t].iter().enumerate() {
            if zones.is_some_and(|m| !m[z]) || zone_set.is_some_and(|s| !s.has(&self.zones[z])) {
                continue;
            }
            for ct in CapacityType::ALL {
                if cts.is_some_and(|m| !m[ct_index(ct)])
                    || ct_set.is_some_and(|s| !s.has(ct.as_str()))
                {
                    continue;
                }
                if let Some(p) = by_ct[ct_index(ct)] {
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

    /// What type `t` offers pods in `pool`: the catalog's allocatable, or the one the
    /// pool's EC2NodeClass kubelet settings give.
    pub(super) fn allocatable(&self, pool: PoolId, t: InstanceTypeId) -> &Resources {
        match &self.pools[pool].allocatable {
            Some(per_type) => &per_type[t],
            None => &self.instance_type(t).allocatable,
        }
    }

    pub(crate) fn usable(&self, pool: PoolId, t: InstanceTypeId) -> Resources {
        let mut r = self.allocatable(pool, t).clone();
        r.sub(&self.pools[pool].overhead[t]);
        r
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
