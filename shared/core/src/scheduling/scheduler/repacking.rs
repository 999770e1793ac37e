//! Re-packing the new claims that hold only unconstrained pods into a cheaper fleet
//! (see `scheduling::repack`): first-fit decreasing never looks back, so its last nodes
//! are too big and its nodes' shapes do not match their pods.

use std::collections::HashMap;

use crate::resources::{Resources, WELL_KNOWN};
use crate::scheduling::repack;
use crate::scheduling::requirements::Requirements;

use super::Scheduler;
use super::bins::{Bin, BinPod, Origin};
use super::ids::{BinId, InstanceTypeId, PodId, PoolId};
use super::offerings::Offering;

/// New claims of one pool with the same requirements: their pods can trade places.
struct ClaimGroup {
    pool: PoolId,
    reqs: Requirements,
    bins: Vec<BinId>,
}

impl Scheduler<'_> {
    /// A pod the repack pass may move between new claims: no topology spread, no pod
    /// (anti-)affinity, required or preferred, no group of another pod counts it, no
    /// host ports, and only well-known resources.
    pub(super) fn movable(&self, pod: PodId) -> bool {
        let p = self.pod(pod);
        p.topology_spread.is_empty()
            && p.pod_affinity.is_empty()
            && p.pod_anti_affinity.is_empty()
            && p.preferred_pod_affinity.is_empty()
            && p.preferred_pod_anti_affinity.is_empty()
            && p.host_ports.is_empty()
            && self.classes[self.class_of(pod)].matched.is_empty()
            && p.requests.only_well_known()
    }

    /// Re-packs, per NodePool and set of requirements, the new claims that hold only
    /// movable pods (see `repack`), and keeps the result when it costs less. The
    /// claims keep their requirements, so every pod's node constraints still hold;
    /// no topology group counts these pods, so moving them changes no count. Pools
    /// with limits or minValues are left as packed (the pass does not track them).
    pub(super) fn repack_free_claims(&mut self) {
        self.repack_free_claims_from(BinId::from_index(0));
    }

    /// As [`Self::repack_free_claims`], over the new claims from bin `first` on only (a
    /// speculative solve's own claims, not those committed before it).
    pub(crate) fn repack_free_claims_from(&mut self, first: BinId) {
        let mut groups: Vec<ClaimGroup> = Vec::new();
        for b in self.bins.ids_from(first) {
            let Origin::New(pool) = self.bins[b].origin else {
                continue;
            };
            let bin = &self.bins[b];
            if bin.pods.is_empty()
                || self.pools[pool].has_min_values
                || self.node_pool(pool).limits.is_some()
                || !bin.pods.iter().all(|m| self.movable(m.pod))
            {
                continue;
            }
            match groups
                .iter_mut()
                .find(|g| g.pool == pool && g.reqs == bin.reqs)
            {
                Some(g) => g.bins.push(b),
                None => groups.push(ClaimGroup {
                    pool,
                    reqs: bin.reqs.clone(),
                    bins: vec![b],
                }),
            }
        }
        for g in groups {
            self.repack_group(g.pool, &g.reqs, &g.bins);
        }
    }

    pub(super) fn repack_group(&mut self, pool: PoolId, reqs: &Requirements, bins: &[BinId]) {
        // Types the claims could launch as, with their price and room for pods.
        let mut types: Vec<InstanceTypeId> = Vec::new();
        let mut node_types: Vec<repack::NodeType> = Vec::new();
        let offerings = self.offering_filter(reqs, None, None);
        for &t in self.types_meeting(pool, reqs).iter() {
            let Some(Offering { price, .. }) = self.cheapest_allowed(t, &offerings) else {
                continue;
            };
            let usable = self.usable(pool, t);
            types.push(t);
            node_types.push(repack::NodeType {
                cap: (0..WELL_KNOWN.len())
                    .map(|d| usable.slot_milli(d))
                    .collect(),
                price,
            });
        }
        // What the claims cost now: each at the cheapest type that holds its pods.
        let mut current = 0.0;
        for &b in bins {
            let used = &self.bins[b].used;
            let price = types
                .iter()
                .zip(&node_types)
                .filter(|(_, nt)| (0..WELL_KNOWN.len()).all(|d| used.slot_milli(d) <= nt.cap[d]))
                .map(|(_, nt)| nt.price)
                .fold(f64::INFINITY, f64::min);
            current += price;
        }
        // Shapes: pods with identical requests.
        let mut shape_of: HashMap<Vec<i64>, usize> = HashMap::new();
        let mut demands: Vec<Vec<i64>> = Vec::new();
        let mut members: Vec<Vec<BinPod>> = Vec::new();
        for &b in bins {
            for &member in &self.bins[b].pods {
                let r = &self.pod(member.pod).requests;
                let v: Vec<i64> = (0..WELL_KNOWN.len()).map(|d| r.slot_milli(d)).collect();
                let s = *shape_of.entry(v.clone()).or_insert_with(|| {
                    demands.push(v);
                    members.push(Vec::new());
                    demands.len() - 1
                });
                members[s].push(member);
            }
        }
        let counts: Vec<usize> = members.iter().map(|m| m.len()).collect();
        let pods: usize = counts.iter().sum();
        // Shape scans: enough for thousands of pods of dozens of shapes.
        let budget = 4_000_000u64.max(pods as u64 * 64);
        let Some((cost, nodes)) = repack::pack(&demands, &counts, &node_types, budget) else {
            return;
        };
        if cost >= current * (1.0 - 1e-9) {
            return;
        }
        // Apply: reuse the group's bins in order, push more if needed, empty the rest.
        for m in &mut members {
            m.reverse(); // pop() then hands pods out in their original order
        }
        let template = bins[0];
        let mut slots: Vec<BinId> = bins.to_vec();
        for (i, node) in nodes.iter().enumerate() {
            let t = types[node.ty];
            let b = if i < slots.len() {
                slots[i]
            } else {
                let base = &self.bins[template];
                let bin = Bin {
                    origin: base.origin,
                    reqs: base.reqs.clone(),
                    version: base.version,
                    taints: base.taints.clone(),
                    ceiling: Resources::new(),
                    used: Resources::new(),
                    target: None,
                    domains: base.domains.clone(),
                    ports: Vec::new(),
                    pods: Vec::new(),
                };
                let b = self.bins.push(bin);
                // Classes compiled before see it too (a speculative solve's claims may be
                // kept, and later solves place pods on them); only the classes compiled
                // after would, otherwise.
                for e in self.eclasses.ids() {
                    self.admit(e, b);
                }
                slots.push(b);
                b
            };
            let mut pods = Vec::new();
            let mut used = Resources::new();
            for &(s, n) in &node.take {
                for _ in 0..n {
                    let member = members[s].pop().expect("the packing places each pod once");
                    used.add(&self.pod(member.pod).requests);
                    pods.push(member);
                }
            }
            self.retarget(pool, b, Some(t));
            let bin = &mut self.bins[b];
            bin.pods = pods;
            bin.used = used;
        }
        for &b in bins.iter().skip(nodes.len()) {
            self.retarget(pool, b, None);
            let bin = &mut self.bins[b];
            bin.pods.clear();
            bin.used = Resources::new();
        }
        debug_assert!(members.iter().all(|m| m.is_empty()));
    }

    /// Moves a new claim's reservation in its pool's usage from its old target type to
    /// `t` (none: the claim is gone), and sizes it for `t`.
    pub(super) fn retarget(&mut self, pool: PoolId, b: BinId, t: Option<InstanceTypeId>) {
        // Capacity as the pool's limits count it (with its overlays).
        let per_type = self.pools[pool].capacity.clone();
        let types = &self.input.catalog.types;
        let capacity = |t: InstanceTypeId| match &per_type {
            Some(per_type) => &per_type[t],
            None => &types[t.index()].capacity,
        };
        let old = self.bins[b].target;
        let usage = &mut self.pools[pool].usage;
        if let Some(old) = old {
            usage.sub(capacity(old));
            let n = usage.get_milli("nodes");
            usage.set_milli("nodes", n - 1000);
        }
        if let Some(new) = t {
            usage.add(capacity(new));
            let n = usage.get_milli("nodes");
            usage.set_milli("nodes", n + 1000);
        }
        let (ceiling, ports) = match t {
            Some(t) => (self.usable(pool, t).clone(), self.daemon_ports(pool, t)),
            None => (Resources::new(), Vec::new()),
        };
        let bin = &mut self.bins[b];
        bin.target = t;
        bin.ceiling = ceiling;
        bin.ports = ports;
    }
}
