//! Finishing a new claim: every compatible type that fits its pods, cheapest first and
//! capped at [`MAX_INSTANCE_TYPE_OPTIONS`] (keeping what minValues needs), the zones and
//! capacity types it may launch in, and the custom labels its node must carry.

use std::collections::HashSet;

use crate::catalog::CapacityType;
use crate::cluster::HostPort;
use crate::resources::Resources;
use crate::scheduling::requirements::Requirements;
use crate::well_known::{
    LABEL_CAPACITY_TYPE, LABEL_HOSTNAME, LABEL_NODEPOOL, LABEL_REGION, LABEL_ZONE,
};

use super::ids::{BinId, InstanceTypeId, PoolId};
use super::offerings::{Offering, ReservationRequirements};
use super::{ClaimOption, MAX_INSTANCE_TYPE_OPTIONS, NewClaim, Scheduler};

/// A type a finished claim could launch as, with its cheapest offering.
struct LaunchOption {
    instance_type: InstanceTypeId,
    offering: Offering,
}

impl Scheduler<'_> {
    pub(crate) fn finalize_claim(&mut self, b: BinId, pool: PoolId, pods: Vec<usize>) -> NewClaim {
        let bin = &self.bins[b];
        let reqs = bin.reqs.clone();
        let used = bin.used.clone();
        let target = bin.target;
        let mut reserved = Resources::new();
        if let Some(t) = target {
            reserved = self.capacity(pool, t).clone();
        }
        // Limits are checked against usage without this claim's own reservation.
        self.pools[pool].usage.sub(&reserved);
        let nodes = self.pools[pool].usage.get_milli("nodes");
        self.pools[pool].usage.set_milli("nodes", nodes - 1000);
        let pod_ports: Vec<&HostPort> = pods
            .iter()
            .flat_map(|&p| self.input.pods[p].host_ports.iter())
            .collect();
        let mut options: Vec<LaunchOption> = Vec::new();
        let offerings = self.offering_filter(&reqs, None, None);
        for &t in self.types_meeting(pool, &reqs).iter() {
            if !used.fits_in(self.usable(pool, t)) {
                continue;
            }
            let daemon_ports = self.daemon_ports(pool, t);
            if pod_ports
                .iter()
                .any(|mine| daemon_ports.iter().any(|p| p.conflicts_with(mine)))
            {
                continue;
            }
            if Some(t) != target && self.within_limits(pool, t).is_err() {
                continue;
            }
            if let Some(offering) = self.cheapest_allowed(t, &offerings) {
                options.push(LaunchOption {
                    instance_type: t,
                    offering,
                });
            }
        }
        options.sort_by(|a, b| {
            (a.offering.price)
                .total_cmp(&b.offering.price)
                .then(a.instance_type.cmp(&b.instance_type))
        });
        let compatible_types = options.len();
        if options.len() > MAX_INSTANCE_TYPE_OPTIONS {
            options = self.cap_options(options, &reqs);
        }
        let chosen = options
            .first()
            .map(|o| o.instance_type)
            .or(target)
            .unwrap_or(InstanceTypeId::from_index(0));
        let chosen_capacity = self.capacity(pool, chosen).clone();
        self.pools[pool].usage.add(&chosen_capacity);
        self.pools[pool].usage.set_milli("nodes", nodes);
        if let Some(o) = options.first() {
            self.zone_use[o.offering.zone] += 1;
            // The claim takes an instance of the reservation it will launch into, so
            // the next claims of this solve see the count it leaves.
            if o.offering.capacity_type == CapacityType::Reserved {
                let wanted = ReservationRequirements::of(&reqs);
                self.take_reservation(pool, o.instance_type, o.offering.zone, wanted.as_ref());
            }
        }
        let zones = self
            .zones
            .iter()
            .take(self.input.pricing.zones.len())
            .filter(|z| reqs.get(LABEL_ZONE).is_none_or(|s| s.has(z)))
            .cloned()
            .collect();
        let reservation = ReservationRequirements::of(&reqs);
        let unreserved = reservation
            .as_ref()
            .is_none_or(ReservationRequirements::allow_unreserved);
        let capacity_types = CapacityType::ALL
            .into_iter()
            .filter(|ct| {
                reqs.get(LABEL_CAPACITY_TYPE)
                    .is_none_or(|s| s.has(ct.as_str()))
                    && (unreserved || *ct == CapacityType::Reserved)
            })
            .collect();
        // Custom labels (keys neither the instance nor Karpenter sets): the value the
        // requirements settled on (a pod's selector, a topology pin), else any value
        // they allow, as Karpenter labels its nodes. Without them a pod selecting the
        // label, or spread over it, would never bind.
        let labels = reqs
            .iter()
            .filter(|(k, _)| {
                !self.type_keys.contains(k.as_str())
                    && ![
                        LABEL_ZONE,
                        LABEL_REGION,
                        LABEL_CAPACITY_TYPE,
                        LABEL_NODEPOOL,
                        LABEL_HOSTNAME,
                    ]
                    .contains(&k.as_str())
                    && !k.starts_with("karpenter.sh/")
                    && !k.starts_with("karpenter.k8s.aws/")
            })
            .filter_map(|(k, set)| set.any_value().map(|v| (k.clone(), v)))
            // A reservation label pinned to one value: the launch picks a reservation
            // with it (they are the reservation's labels, set when it launches).
            .chain(
                reservation
                    .iter()
                    .flat_map(ReservationRequirements::pinned_labels),
            )
            .collect();
        let options: Vec<ClaimOption> = options
            .into_iter()
            .map(|o| ClaimOption {
                instance_type: self.instance_type(o.instance_type).name.clone(),
                zone: self.zones[o.offering.zone].clone(),
                capacity_type: o.offering.capacity_type,
                price: o.offering.price,
            })
            .collect();
        let overlays_applied = self.input.pricing.overlays.applied_to_claim(
            self.node_pool(pool),
            options.iter().map(|o| o.instance_type.as_str()),
        );
        NewClaim {
            node_pool: self.node_pool(pool).name.clone(),
            labels,
            pods,
            requests: used,
            requirements: reqs,
            options,
            overlays_applied,
            compatible_types,
            zones,
            capacity_types,
        }
    }

    /// The options a launch would use, from `options` sorted cheapest first: for each
    /// minValues key of `reqs`, the cheapest type of each distinct value until the minimum
    /// is reached (so the kept list satisfies minValues, as Karpenter's truncation
    /// requires), then the cheapest of the rest up to [`MAX_INSTANCE_TYPE_OPTIONS`].
    /// Price order is kept.
    fn cap_options(&self, options: Vec<LaunchOption>, reqs: &Requirements) -> Vec<LaunchOption> {
        let mut keep = vec![false; options.len()];
        // The cheapest is the claim's instance type: always kept.
        keep[0] = true;
        let mut kept = 1;
        for (key, set) in reqs.iter() {
            let Some(min) = set.min_values else { continue };
            let mut seen: HashSet<&str> = HashSet::new();
            for (i, option) in options.iter().enumerate() {
                if seen.len() >= min as usize {
                    break;
                }
                let Some(value) = self.instance_type(option.instance_type).labels.get(key) else {
                    continue;
                };
                if seen.insert(value) && !keep[i] {
                    keep[i] = true;
                    kept += 1;
                }
            }
        }
        for k in keep.iter_mut() {
            if kept >= MAX_INSTANCE_TYPE_OPTIONS {
                break;
            }
            if !*k {
                *k = true;
                kept += 1;
            }
        }
        options
            .into_iter()
            .zip(keep)
            .filter_map(|(o, k)| k.then_some(o))
            .collect()
    }
}
