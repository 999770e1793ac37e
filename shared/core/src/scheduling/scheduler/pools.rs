//! NodePools as the scheduler sees them: their requirements and taints, the DaemonSets
//! their nodes would run (and what those take from each type), the types they may
//! launch (with their NodeOverlays' prices and extended resources), the capacity they
//! already use, and the limits and minValues a new claim must respect.
//!
//! Limits count a type's capacity as the pool's NodeOverlays leave it (Karpenter
//! overlays an instance type's capacity before its scheduler sees it): a new claim
//! adds its type's overlaid capacity, and so does an in-flight claim until its node
//! reports its own.

use crate::well_known::LABEL_NODECLAIM;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::api::model::{NodePool, Taint, TaintEffect};
use crate::cluster::{HostPort, Toleration};
use crate::resources::Resources;
use crate::scheduling::requirements::{Requirements, ValueSet};
use crate::scheduling::unschedulable::Refusal;
use crate::well_known::LABEL_NODEPOOL;

use super::duals::DualPrices;
use super::ids::{IdVec, InstanceTypeId, PoolId};
use super::setup::PoolPrices;
use super::{InFlightClaim, Scheduler};

/// A DaemonSet that would run on a pool's nodes (taints and pool requirements allow
/// it); whether it runs on a given type depends on that type's labels.
#[derive(Clone)]
pub(crate) struct PoolDaemon {
    pub(crate) reqs: Requirements,
    pub(crate) requests: Resources,
    pub(crate) ports: Vec<HostPort>,
    pub(crate) name: String,
}

#[derive(Clone)]
pub(crate) struct PoolInfo {
    pub(crate) reqs: Requirements,
    pub(crate) taints: Vec<Taint>,
    pub(crate) daemons: Vec<PoolDaemon>,
    /// Per catalog type: what a node of that type leaves pods, its allocatable (the
    /// catalog's, or the one the pool's EC2NodeClass kubelet settings give) less the
    /// requests of the DaemonSet pods that would run there.
    pub(crate) usable: IdVec<InstanceTypeId, Resources>,
    /// Per catalog type: indices into `daemons` that would run there and bind host ports.
    pub(crate) port_daemons: IdVec<InstanceTypeId, Vec<usize>>,
    /// Types compatible with the pool's requirements and offered in its zones.
    pub(crate) types: Vec<InstanceTypeId>,
    /// Per catalog type: its capacity as the pool's limits count it, when the pool's
    /// NodeOverlays set resources on some type (the catalog's capacity otherwise).
    pub(crate) capacity: Option<Arc<IdVec<InstanceTypeId, Resources>>>,
    pub(crate) usage: Resources,
    pub(crate) has_min_values: bool,
    pub(crate) duals: Option<DualPrices>,
    /// The pool's prices when NodeOverlays change some of them (`Scheduler::prices`
    /// otherwise): offerings of claims in this pool are priced from here.
    pub(crate) prices: Option<Arc<PoolPrices>>,
}

/// The first of `taints` that `tolerations` do not tolerate (PreferNoSchedule ones are
/// skipped when `prefer_ok`).
pub(super) fn untolerated_taint<'t>(
    tolerations: &[Toleration],
    taints: &'t [Taint],
    prefer_ok: bool,
) -> Option<&'t Taint> {
    taints.iter().find(|taint| {
        (taint.effect != TaintEffect::PreferNoSchedule || !prefer_ok)
            && !tolerations.iter().any(|t| t.tolerates(taint))
    })
}

impl<'a> Scheduler<'a> {
    pub(super) fn node_pool(&self, pool: PoolId) -> &'a NodePool {
        &self.input.node_pools[pool.index()]
    }

    pub(crate) fn pool_named(&self, name: &str) -> Option<PoolId> {
        let pools = self.input.node_pools;
        pools
            .iter()
            .position(|p| p.name == name)
            .map(PoolId::from_index)
    }

    pub(super) fn pool_requirements(pool: &NodePool) -> Requirements {
        let mut reqs = Requirements::from_node_requirements(&pool.requirements);
        for (k, v) in &pool.labels {
            reqs.add(k, ValueSet::in_values([v.clone()]));
        }
        reqs.add(LABEL_NODEPOOL, ValueSet::in_values([pool.name.clone()]));
        reqs
    }

    pub(super) fn build_pools(&mut self) {
        let input = self.input;
        for pool in input.node_pools {
            let reqs = Self::pool_requirements(pool);
            // The requirements on type labels picked out once, not per type asked.
            let type_reqs = self.type_requirements(&reqs);
            let types: Vec<InstanceTypeId> = self
                .prices
                .ids()
                .filter(|&t| {
                    self.type_meets(t, &type_reqs)
                        && self.cheapest_offering(t, &reqs, None, None).is_some()
                })
                .collect();
            let daemons = self.pool_daemons(pool, &reqs);
            let daemon_type_reqs: Vec<_> = daemons
                .iter()
                .map(|daemon| self.type_requirements(&daemon.reqs))
                .collect();
            let mut overhead = IdVec::filled(Resources::new(), self.prices.len());
            let mut port_daemons = IdVec::filled(Vec::new(), self.prices.len());
            for t in self.prices.ids() {
                for (d, daemon) in daemons.iter().enumerate() {
                    if self.type_meets(t, &daemon_type_reqs[d]) {
                        overhead[t].add(&daemon.requests);
                        if !daemon.ports.is_empty() {
                            port_daemons[t].push(d);
                        }
                    }
                }
            }
            let overlays = &input.pricing.overlays;
            let capacity = overlays
                .types_in(&pool.name)
                .any(|(_, t)| t.capacity().next().is_some())
                .then(|| {
                    Arc::new(
                        self.prices
                            .ids()
                            .map(|t| overlays.capacity(&pool.name, self.instance_type(t)))
                            .collect::<IdVec<InstanceTypeId, Resources>>(),
                    )
                });
            let usage = self.pool_usage(pool, capacity.as_deref());
            let has_min_values = pool.requirements.iter().any(|r| r.min_values.is_some());
            // Allocatable by catalog index under the pool's EC2NodeClass kubelet
            // settings; `None` when they leave the catalog's as it is.
            let class_allocatable = input
                .node_classes
                .iter()
                .find(|c| c.name == pool.node_class_ref.name)
                .and_then(|class| crate::density::class_allocatable(input.catalog, class));
            let usable = self
                .prices
                .ids()
                .map(|t| {
                    let mut r = match &class_allocatable {
                        Some(per_type) => per_type[t.index()].clone(),
                        None => self.instance_type(t).allocatable.clone(),
                    };
                    // NodeOverlays' extended resources (hugepages, a device), set
                    // before the DaemonSets that use them take their share.
                    if let Some(overlaid) = overlays.get(&pool.name, &self.instance_type(t).name) {
                        overlaid.apply_capacity(&mut r);
                    }
                    r.sub(&overhead[t]);
                    r
                })
                .collect();
            let prices = self.overlaid_prices(pool);
            self.pools.push(PoolInfo {
                reqs,
                taints: pool.taints.clone(),
                daemons,
                usable,
                port_daemons,
                types,
                capacity,
                usage,
                has_min_values,
                duals: None,
                prices,
            });
        }
        // Static pools (`replicas`) never take new claims for pods: their nodes are
        // launched to a count (`crate::static_capacity`), though pods run on them once
        // there, and their in-flight claims may still hold pods.
        let mut order: Vec<PoolId> = self
            .pools
            .ids()
            .filter(|&p| !self.node_pool(p).is_static())
            .collect();
        order.sort_by(|&a, &b| {
            let (pa, pb) = (self.node_pool(a), self.node_pool(b));
            pb.weight
                .cmp(&pa.weight)
                .then_with(|| pa.name.cmp(&pb.name))
        });
        self.pool_order = order;
    }

    /// What `pool`'s nodes and in-flight claims already count against its limits, one
    /// node each (Karpenter's StateNode): a node counts the capacity it reports; an
    /// in-flight claim its type's capacity under the pool's overlays (`capacity`), the
    /// capacity it was planned with; a registered node whose claim is still in flight
    /// (not Ready yet) counts once, with what it does not report yet (a zero, a
    /// device plugin not started) taken from its claim.
    fn pool_usage(
        &self,
        pool: &NodePool,
        capacity: Option<&IdVec<InstanceTypeId, Resources>>,
    ) -> Resources {
        let input = self.input;
        let claim_capacity = |c: &InFlightClaim| -> Option<Resources> {
            let t = self.instance_type_named(&c.instance_type)?;
            Some(match capacity {
                Some(per_type) => per_type[t].clone(),
                None => self.instance_type(t).capacity.clone(),
            })
        };
        let mut in_flight: HashMap<&str, &InFlightClaim> = input
            .in_flight
            .iter()
            .filter(|c| c.node_pool == pool.name)
            .map(|c| (c.name.as_str(), c))
            .collect();
        let mut usage = Resources::new();
        let mut nodes: i64 = 0;
        for node in input.nodes {
            if node.labels.get(LABEL_NODEPOOL) != Some(&pool.name) {
                continue;
            }
            let claim = node
                .labels
                .get(LABEL_NODECLAIM)
                .and_then(|name| in_flight.remove(name.as_str()));
            match claim.and_then(claim_capacity) {
                Some(mut counted) => {
                    for (name, milli) in node.capacity.iter() {
                        if milli != 0 {
                            counted.set_milli(name, milli);
                        }
                    }
                    usage.add(&counted);
                }
                None => usage.add(&node.capacity),
            }
            nodes += 1000;
        }
        // In input order, not the map's: sums are order-free, but keep it plain.
        for c in input.in_flight.iter().filter(|c| c.node_pool == pool.name) {
            if !in_flight.contains_key(c.name.as_str()) {
                continue;
            }
            if let Some(counted) = claim_capacity(c) {
                usage.add(&counted);
                nodes += 1000;
            }
        }
        usage.set_milli("nodes", usage.get_milli("nodes") + nodes);
        usage
    }

    /// The capacity a node of type `t` adds to `pool`'s usage, as its limits count it:
    /// with the pool's overlaid resources.
    pub(super) fn capacity(&self, pool: PoolId, t: InstanceTypeId) -> &Resources {
        match &self.pools[pool].capacity {
            Some(per_type) => &per_type[t],
            None => &self.instance_type(t).capacity,
        }
    }

    /// The DaemonSets whose pods would run on this pool's nodes: they tolerate its
    /// taints and one of their node-affinity terms is compatible with its requirements.
    /// Each keeps that term (narrowed by the pool), to be checked against each type's
    /// labels. A DaemonSet that already runs pods is sized from one of them: their
    /// requests reflect LimitRange defaults and VPA changes the template does not.
    pub(super) fn pool_daemons(
        &self,
        pool: &NodePool,
        pool_reqs: &Requirements,
    ) -> Vec<PoolDaemon> {
        let input = self.input;
        let mut out = Vec::new();
        for ds in input.daemonsets {
            let tpl = &ds.template;
            if untolerated_taint(&tpl.tolerations, &pool.taints, true).is_some() {
                continue;
            }
            let terms = tpl.required_node_terms.len().max(1);
            let Some(reqs) = (0..terms)
                .map(|term| Self::pod_base_requirements(tpl, term))
                .find(|r| pool_reqs.is_compatible_with(r, &|k| self.well_known.contains(k)))
            else {
                continue;
            };
            let running = input.pods.iter().find(|p| {
                p.owner_daemonset.as_deref() == Some(ds.name.as_str())
                    && p.namespace == ds.namespace
                    && p.node_name.is_some()
                    && !p.terminal
            });
            let source = running.unwrap_or(tpl);
            out.push(PoolDaemon {
                reqs,
                requests: source.requests.clone(),
                ports: (*source.host_ports).clone(),
                name: format!("{}/{}", ds.namespace, ds.name),
            });
        }
        out
    }

    /// Whether a new node of type `t` keeps `pool` within its limits, counting the
    /// type's capacity with the pool's overlays (see [`Self::capacity`]).
    pub(super) fn within_limits(&self, pool: PoolId, t: InstanceTypeId) -> Result<(), Refusal> {
        let usage = &self.pools[pool].usage;
        let nodes_after = usage.get_milli("nodes").saturating_add(1000);
        let add = self.capacity(pool, t);
        match self.node_pool(pool).limit_passed(nodes_after, |name| {
            usage.get_milli(name).saturating_add(add.get_milli(name))
        }) {
            Some((resource, would_reach, limit)) => Err(Refusal::LimitReached {
                resource,
                would_reach,
                limit,
            }),
            None => Ok(()),
        }
    }

    /// Distinct values of each minValues key among types fitting `requests` under `reqs`.
    pub(super) fn min_values_ok(
        &self,
        pool: PoolId,
        reqs: &Requirements,
        requests: &Resources,
    ) -> Result<(), Refusal> {
        let type_reqs = self.type_requirements(reqs);
        for (key, set) in reqs.iter() {
            let Some(min) = set.min_values else { continue };
            let mut seen: HashSet<&str> = HashSet::new();
            for &t in &self.pools[pool].types {
                if !requests.fits_in(self.usable(pool, t)) || !self.type_meets(t, &type_reqs) {
                    continue;
                }
                if self.cheapest_offering(t, reqs, None, None).is_none() {
                    continue;
                }
                if let Some(v) = self.instance_type(t).labels.get(key) {
                    seen.insert(v);
                }
                if seen.len() >= min as usize {
                    break;
                }
            }
            if seen.len() < min as usize {
                return Err(Refusal::MinValues {
                    key: key.clone(),
                    min,
                    distinct: seen.len(),
                });
            }
        }
        Ok(())
    }
}
