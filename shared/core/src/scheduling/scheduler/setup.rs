//! Building the scheduler for one cluster: prices by type, zone and capacity type (and
//! per NodePool where its NodeOverlays change them), the
//! keys a node gets from its type, the pools, domain keys and bins — and, in
//! [`Scheduler::prepare`], the pending pods in placement order with their classes.
//! Everything here depends on the cluster alone, so it is done once and then cloned or
//! shared by every solve.

use std::sync::Arc;

use crate::api::model::{NodePool, TaintEffect};
use crate::catalog::CapacityType;
use crate::cluster::Pod;
use crate::resources::{CPU, MEMORY};
use crate::scheduling::fast_hash::FastMap;
use crate::well_known::{
    LABEL_CAPACITY_TYPE, LABEL_HOSTNAME, LABEL_NODEPOOL, LABEL_REGION, LABEL_ZONE,
};

use super::ids::{DomainId, IdVec, InstanceTypeId, PodId};
use super::offerings::ct_index;
use super::{Scheduler, SchedulerInput};

/// Prices by type, zone and capacity type (by `ct_index`); `None` where not offered.
pub(crate) type PoolPrices =
    IdVec<InstanceTypeId, IdVec<DomainId, [Option<f64>; CapacityType::ALL.len()]>>;

/// Placement order: real pods before CapacityBuffers' virtual pods (the lowest
/// priority: a pod that exists takes the room a buffer keeps), then most CPU first,
/// then most memory, then input order.
pub(crate) fn largest_first(pods: &[Pod], a: PodId, b: PodId) -> std::cmp::Ordering {
    let (pa, pb) = (&pods[a.index()], &pods[b.index()]);
    let (ra, rb) = (&pa.requests, &pb.requests);
    (pa.capacity_buffer.is_some())
        .cmp(&pb.capacity_buffer.is_some())
        .then(rb.slot_milli(CPU).cmp(&ra.slot_milli(CPU)))
        .then(rb.slot_milli(MEMORY).cmp(&ra.slot_milli(MEMORY)))
        .then(a.cmp(&b))
}

impl<'a> Scheduler<'a> {
    pub(super) fn new(input: &'a SchedulerInput<'a>) -> Self {
        let catalog = input.catalog;
        let mut zones: IdVec<DomainId, String> = IdVec::from(input.pricing.zones.clone());
        for node in input.nodes {
            if let Some(z) = node.labels.get(LABEL_ZONE)
                && !zones.iter().any(|x| x == z)
            {
                zones.push(z.clone());
            }
        }
        let offered_zones = input.pricing.zones.len();
        let prices: PoolPrices = catalog
            .types
            .iter()
            .map(|t| {
                zones
                    .enumerate()
                    .map(|(z, zone)| {
                        if z.index() >= offered_zones {
                            return [None; CapacityType::ALL.len()];
                        }
                        CapacityType::ALL.map(|ct| input.pricing.price(t, zone, ct))
                    })
                    .collect()
            })
            .collect();
        let type_keys = catalog.label_keys();
        let mut well_known = type_keys.clone();
        for k in [
            LABEL_ZONE,
            LABEL_REGION,
            LABEL_CAPACITY_TYPE,
            LABEL_NODEPOOL,
            LABEL_HOSTNAME,
        ]
        .into_iter()
        .chain(crate::catalog::RESERVATION_LABELS)
        {
            well_known.insert(k);
        }
        let any_prefer_no_schedule = input
            .node_pools
            .iter()
            .flat_map(|p| p.taints.iter())
            .chain(input.nodes.iter().flat_map(|n| n.taints.iter()))
            .any(|t| t.effect == TaintEffect::PreferNoSchedule);
        let mut s = Scheduler {
            input,
            zones,
            well_known,
            type_keys,
            prices,
            keys: IdVec::new(),
            pools: IdVec::new(),
            pool_order: Vec::new(),
            bins: IdVec::new(),
            groups: IdVec::new(),
            group_index: FastMap::default(),
            classes: IdVec::new(),
            pod_class: IdVec::filled(None, input.pods.len()),
            eclasses: IdVec::new(),
            eclass_index: FastMap::default(),
            any_prefer_no_schedule,
            zone_use: IdVec::new(),
            pending: Vec::new(),
            node_bin: vec![None; input.nodes.len()],
            node_index: input
                .nodes
                .iter()
                .enumerate()
                .map(|(i, n)| (n.name.as_str(), i))
                .collect(),
            select_index: FastMap::default(),
            select_scan: Vec::new(),
            owner_index: FastMap::default(),
            shapes: Vec::new(),
            shape_index: FastMap::default(),
            undo: None,
            blocked: IdVec::new(),
            bin_stamp: IdVec::new(),
            stamp: 0,
            reserved: Default::default(),
            universe_cache: FastMap::default(),
            meeting_cache: IdVec::new(),
        };
        s.zone_use = IdVec::filled(0, s.zones.len());
        s.build_pools();
        s.build_domain_keys();
        s.build_existing_bins();
        s.build_in_flight_bins();
        s
    }

    /// Everything but placement: setup, the pending pods in order, their classes, and
    /// the bound pods counted in topology.
    pub(crate) fn prepare(input: &'a SchedulerInput<'a>) -> Self {
        let mut s = Scheduler::new(input);
        // Pods kube-scheduler may still bind, or that are not ours (another scheduler,
        // a preemption nomination, a claim not ready), get no capacity.
        let mut pending: Vec<PodId> = s
            .pod_ids()
            .filter(|&p| s.pod(p).is_pending() && s.pod(p).is_provisionable())
            .collect();
        pending.sort_by(|&a, &b| largest_first(input.pods, a, b));
        s.build_classes(&pending);
        s.pending = pending;
        s
    }
}

impl<'a> Scheduler<'a> {
    /// The price table of `pool` when its NodeOverlays change prices: the cluster's,
    /// with each overlaid offering's price changed. `None` when they change none.
    pub(super) fn overlaid_prices(&self, pool: &NodePool) -> Option<Arc<PoolPrices>> {
        let overlays = &self.input.pricing.overlays;
        if !overlays.prices_in(&pool.name) {
            return None;
        }
        let ids: FastMap<&str, InstanceTypeId> = self
            .input
            .catalog
            .types
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.as_str(), InstanceTypeId::from_index(i)))
            .collect();
        let mut table = self.prices.clone();
        for (name, overlaid) in overlays.types_in(&pool.name) {
            let Some(&t) = ids.get(name).filter(|_| overlaid.has_prices()) else {
                continue;
            };
            for (z, zone) in self.zones.enumerate() {
                for ct in CapacityType::ALL {
                    let slot = &mut table[t][z][ct_index(ct)];
                    if let (Some(base), Some(change)) = (*slot, overlaid.price_change(zone, ct)) {
                        *slot = Some(change.apply(base));
                    }
                }
            }
        }
        Some(Arc::new(table))
    }

    /// Input pod `p`.
    pub(crate) fn pod(&self, p: PodId) -> &'a Pod {
        &self.input.pods[p.index()]
    }

    /// Every input pod's id, in input order.
    pub(crate) fn pod_ids(&self) -> impl Iterator<Item = PodId> + use<> {
        (0..self.input.pods.len()).map(PodId::from_index)
    }
}
