//! Finishing a new claim: every compatible type that fits its pods, cheapest first and
//! capped at [`MAX_INSTANCE_TYPE_OPTIONS`] (keeping what minValues needs), the zones and
//! capacity types it may launch in, and the custom labels its node must carry.

use std::collections::HashSet;

use crate::catalog::{
    CapacityType, LABEL_CAPACITY_TYPE, LABEL_HOSTNAME, LABEL_NODEPOOL, LABEL_REGION, LABEL_ZONE,
};
use crate::cluster::HostPort;
use crate::resources::Resources;
use crate::scheduling::requirements::Requirements;

use super::{ClaimOption, MAX_INSTANCE_TYPE_OPTIONS, NewClaim, Scheduler};

impl Scheduler<'_> {
    pub(crate) fn finalize_claim(&mut self, b: usize, pool: usize, pods: Vec<usize>) -> NewClaim {
        let bin = &self.bins[b];
        let reqs = bin.reqs.clone();
        let used = bin.used.clone();
        let target = bin.target;
        let mut reserved = Resources::new();
        if let Some(t) = target {
            reserved = self.input.catalog.types[t].capacity.clone();
        }
        // Limits are checked against usage without this claim's own reservation.
        self.pools[pool].usage.sub(&reserved);
        let nodes = self.pools[pool].usage.get_milli("nodes");
        self.pools[pool].usage.set_milli("nodes", nodes - 1000);
        let pod_ports: Vec<&HostPort> = pods
            .iter()
            .flat_map(|&p| self.input.pods[p].host_ports.iter())
            .collect();
        let mut options: Vec<(f64, usize, usize, CapacityType)> = Vec::new();
        for &t in &self.pools[pool].types {
            if !used.fits_in(&self.usable(t, pool)) || !self.type_satisfies(t, &reqs) {
                continue;
            }
            let daemon_ports = self.daemon_ports(pool, t);
            if pod_ports
                .iter()
                .any(|mine| daemon_ports.iter().any(|p| p.conflicts_with(mine)))
            {
                continue;
            }
            if Some(t) != target
                && self
                    .within_limits(pool, &self.input.catalog.types[t])
                    .is_err()
            {
                continue;
            }
            if let Some((z, ct, price)) = self.cheapest_offering(t, &reqs, None, None) {
                options.push((price, t, z, ct));
            }
        }
        options.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let compatible_types = options.len();
        if options.len() > MAX_INSTANCE_TYPE_OPTIONS {
            options = self.cap_options(options, &reqs);
        }
        let chosen = options.first().map(|o| o.1).or(target).unwrap_or(0);
        let chosen_capacity = self.input.catalog.types[chosen].capacity.clone();
        self.pools[pool].usage.add(&chosen_capacity);
        self.pools[pool].usage.set_milli("nodes", nodes);
        if let Some(&(_, _, z, _)) = options.first() {
            self.zone_use[z] += 1;
        }
        let zones = self
            .zones
            .iter()
            .take(self.input.pricing.zones.len())
            .filter(|z| reqs.get(LABEL_ZONE).is_none_or(|s| s.has(z)))
            .cloned()
            .collect();
        let capacity_types = CapacityType::ALL
            .into_iter()
            .filter(|ct| {
                reqs.get(LABEL_CAPACITY_TYPE)
                    .is_none_or(|s| s.has(ct.as_str()))
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
            .collect();
        NewClaim {
            node_pool: self.input.node_pools[pool].name.clone(),
            labels,
            pods,
            requests: used,
            requirements: reqs,
            options: options
                .into_iter()
                .map(|(price, t, z, ct)| ClaimOption {
                    instance_type: self.input.catalog.types[t].name.clone(),
                    zone: self.zones[z].clone(),
                    capacity_type: ct,
                    price,
                })
                .collect(),
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
    pub(super) fn cap_options(
        &self,
        options: Vec<(f64, usize, usize, CapacityType)>,
        reqs: &Requirements,
    ) -> Vec<(f64, usize, usize, CapacityType)> {
        let mut keep = vec![false; options.len()];
        // The cheapest is the claim's instance type: always kept.
        keep[0] = true;
        let mut kept = 1;
        for (key, set) in reqs.iter() {
            let Some(min) = set.min_values else { continue };
            let mut seen: HashSet<&str> = HashSet::new();
            for (i, &(_, t, _, _)) in options.iter().enumerate() {
                if seen.len() >= min as usize {
                    break;
                }
                let Some(value) = self.input.catalog.types[t].labels.get(key) else {
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
