//! Bins: the places a pod can go. Existing nodes (Ready and schedulable) and in-flight
//! claims are built once from the cluster; new claims are opened while placing (see
//! `new_claims`). A bin knows its requirements, taints, room, host ports and the
//! topology domains it is in.

use crate::api::model::Taint;
use crate::catalog::CapacityType;
use crate::cluster::HostPort;
use crate::resources::Resources;
use crate::scheduling::fast_hash::FastMap;
use crate::scheduling::requirements::Requirements;
use crate::well_known::{LABEL_CAPACITY_TYPE, LABEL_HOSTNAME, LABEL_ZONE};

use super::Scheduler;
use super::ids::{DomainId, DomainKeyId, EClassId, IdVec, InstanceTypeId, PodId, PoolId};
use super::offerings::ct_domain;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Origin {
    Existing(usize),
    InFlight(usize),
    New(PoolId),
}

#[derive(Clone)]
pub(crate) struct Bin {
    pub(crate) origin: Origin,
    pub(crate) reqs: Requirements,
    /// Bumped whenever `reqs` narrows.
    pub(crate) version: u32,
    pub(crate) taints: Vec<Taint>,
    /// What pods may use in total (allocatable minus DaemonSets and bound pods).
    pub(crate) ceiling: Resources,
    pub(crate) used: Resources,
    /// New claims: the type whose size bounds the packing.
    pub(crate) target: Option<InstanceTypeId>,
    /// Per domain key (zone, capacity type, then the others in `Scheduler::keys`): the
    /// domain the node is in, once known.
    pub(crate) domains: IdVec<DomainKeyId, Option<DomainId>>,
    /// Host ports bound on the node, by its pods and the DaemonSet pods it runs.
    pub(crate) ports: Vec<HostPort>,
    /// Its pods, in the order they were placed.
    pub(crate) pods: Vec<BinPod>,
}

/// A pod placed on a bin, and the compiled class it was placed as.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BinPod {
    pub(crate) pod: PodId,
    pub(crate) eclass: EClassId,
}

impl Bin {
    pub(super) fn domain(&self, key: DomainKeyId) -> Option<DomainId> {
        self.domains.get(key).copied().flatten()
    }

    /// Its pods from the `first`-th placed on, as indices into `SchedulerInput::pods`,
    /// ascending: as the placements of a [`super::Schedule`] list them.
    pub(crate) fn placed_pods(&self, first: usize) -> Vec<usize> {
        let mut pods: Vec<usize> = self.pods[first..].iter().map(|m| m.pod.index()).collect();
        pods.sort_unstable();
        pods
    }
}

impl Scheduler<'_> {
    pub(super) fn build_existing_bins(&mut self) {
        let input = self.input;
        let mut used_by_node: FastMap<&str, Resources> = FastMap::default();
        let mut ports_by_node: FastMap<&str, Vec<HostPort>> = FastMap::default();
        for pod in input.pods {
            if let (Some(node), false) = (&pod.node_name, pod.terminal) {
                used_by_node
                    .entry(node.as_str())
                    .or_default()
                    .add(&pod.requests);
                if !pod.host_ports.is_empty() {
                    ports_by_node
                        .entry(node.as_str())
                        .or_default()
                        .extend(pod.host_ports.iter().cloned());
                }
            }
        }
        for (i, node) in input.nodes.iter().enumerate() {
            if !node.ready || node.unschedulable {
                continue;
            }
            let mut ceiling = node.allocatable.clone();
            if let Some(used) = used_by_node.get(node.name.as_str()) {
                ceiling.sub(used);
            }
            let mut labels = node.labels.clone();
            labels
                .entry(LABEL_HOSTNAME.to_string())
                .or_insert_with(|| node.name.clone());
            let zone = labels
                .get(LABEL_ZONE)
                .and_then(|z| self.zones.position(|x| x == z));
            let capacity_type = labels
                .get(LABEL_CAPACITY_TYPE)
                .and_then(|c| CapacityType::parse(c));
            self.node_bin[i] = Some(self.bins.next_id());
            self.bins.push(Bin {
                origin: Origin::Existing(i),
                reqs: Requirements::from_labels(labels.iter()),
                version: 0,
                taints: node.taints.clone(),
                ceiling,
                used: Resources::new(),
                target: None,
                domains: IdVec::from(vec![zone, capacity_type.map(ct_domain)]),
                ports: ports_by_node.remove(node.name.as_str()).unwrap_or_default(),
                pods: Vec::new(),
            });
        }
    }

    pub(super) fn build_in_flight_bins(&mut self) {
        let input = self.input;
        for (i, claim) in input.in_flight.iter().enumerate() {
            let Some(pool) = self.pool_named(&claim.node_pool) else {
                continue;
            };
            let Some(t) = self.instance_type_named(&claim.instance_type) else {
                continue;
            };
            let it = self.instance_type(t);
            let mut labels = it.labels.clone();
            labels.extend(claim.labels.clone());
            labels.insert(LABEL_ZONE.into(), claim.zone.clone());
            labels.insert(
                LABEL_CAPACITY_TYPE.into(),
                claim.capacity_type.as_str().into(),
            );
            let mut reqs = Requirements::from_labels(labels.iter());
            reqs = reqs.intersect(&self.pools[pool].reqs);
            let ceiling = self.usable(pool, t).clone();
            let zone = self.zones.position(|z| *z == claim.zone);
            let ports = self.daemon_ports(pool, t);
            self.bins.push(Bin {
                origin: Origin::InFlight(i),
                reqs,
                version: 0,
                taints: self.pools[pool].taints.clone(),
                ceiling,
                used: Resources::new(),
                target: Some(t),
                domains: IdVec::from(vec![zone, Some(ct_domain(claim.capacity_type))]),
                ports,
                pods: Vec::new(),
            });
        }
    }
}
