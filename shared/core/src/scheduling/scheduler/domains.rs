//! Topology at placement time: which domains of a key a pod may go to given its spread,
//! affinity and anti-affinity (and the anti-affinity of pods already placed), which one
//! to choose, whether a bin's hostname domain admits it, and pinning a bin to a domain
//! (which counts its pods there).

use crate::scheduling::requirements::{Requirements, ValueSet};
use crate::scheduling::topology::{GroupKind, TopologyConstraint, TopologyKey};

use super::Scheduler;
use super::bins::Origin;
use super::ids::{BinId, EClassId, InstanceTypeId};
use super::placement::Fail;

impl Scheduler<'_> {
    /// Domains of key `k` where the pod may go given its constraints on that key, as a
    /// mask; `None` when it has no constraint on it.
    pub(super) fn allowed_domains(&self, e: EClassId, pod: usize, k: usize) -> Option<Vec<bool>> {
        let ec = &self.eclasses[e];
        let p = &self.input.pods[pod];
        let key = TopologyKey::Domain(k);
        let dk = &self.keys[k];
        let n = dk.values.len();
        let pod_set = ec.reqs.get(&dk.label);
        let pod_allows = |d: usize| pod_set.is_none_or(|s| s.has(&dk.values[d]));
        let mut allowed: Option<Vec<bool>> = None;
        let mut restrict = |mask: Vec<bool>| {
            allowed = Some(match allowed.take() {
                None => mask,
                Some(a) => a.iter().zip(mask).map(|(x, y)| *x && y).collect(),
            });
        };
        for &g in &ec.spreads {
            let group = &self.groups[g];
            if group.spec.key != key {
                continue;
            }
            let GroupKind::Spread {
                max_skew,
                min_domains,
            } = group.spec.kind
            else {
                continue;
            };
            // The domains skew is measured over: those a counted node could be in and,
            // with nodeAffinityPolicy Honor, those the pod's own affinity allows.
            let honor_affinity = group.filter.as_ref().is_some_and(|f| f.honours_affinity());
            let eligible: Vec<bool> = (0..n)
                .map(|d| group.universe[d] && (!honor_affinity || pod_allows(d)))
                .collect();
            let count = |d: usize| group.counts.get(key, d);
            let eligible_count = eligible.iter().filter(|e| **e).count() as u32;
            let min = if eligible_count < min_domains {
                0
            } else {
                (0..n)
                    .filter(|&d| eligible[d])
                    .map(count)
                    .min()
                    .unwrap_or(0)
            };
            let selects = group.spec.selects(&p.namespace, &p.labels) as u32;
            restrict(
                (0..n)
                    .map(|d| eligible[d] && count(d) + selects <= min + max_skew)
                    .collect(),
            );
        }
        for &g in &ec.affinity {
            let group = &self.groups[g];
            if group.spec.key != key {
                continue;
            }
            let with_pods: Vec<bool> = (0..n)
                .map(|d| pod_allows(d) && group.counts.get(key, d) > 0)
                .collect();
            if with_pods.iter().any(|x| *x) {
                restrict(with_pods);
            } else if group.spec.selects(&p.namespace, &p.labels) {
                // The first of a group with affinity to itself: anywhere it may go.
                restrict((0..n).map(pod_allows).collect());
            } else {
                restrict(vec![false; n]);
            }
        }
        for &g in &ec.anti {
            let group = &self.groups[g];
            if group.spec.key == key {
                restrict((0..n).map(|d| group.counts.get(key, d) == 0).collect());
            }
        }
        for &g in &self.classes[ec.class].matched {
            let group = &self.groups[g];
            if group.spec.key == key
                && group.spec.kind == GroupKind::AntiAffinity
                && group.spec.required
            {
                restrict((0..n).map(|d| group.owners.get(key, d) == 0).collect());
            }
        }
        allowed
    }

    /// Among allowed domains, the one to pin: the least populated for the first
    /// constraint that counts on this key (keeps spread even), else the first allowed.
    pub(super) fn choose_domain(
        &self,
        e: EClassId,
        k: usize,
        allowed: &[bool],
        usable: &[bool],
    ) -> Option<usize> {
        let ec = &self.eclasses[e];
        let key = TopologyKey::Domain(k);
        let g = ec
            .spreads
            .iter()
            .chain(ec.affinity.iter())
            .find(|&&g| self.groups[g].spec.key == key);
        let count = |d: usize| g.map_or(0, |&g| self.groups[g].counts.get(key, d));
        (0..allowed.len())
            .filter(|&d| allowed[d] && usable[d])
            .min_by_key(|&d| (count(d), if k == 0 { self.zone_use[d] } else { 0 }, d))
    }

    pub(super) fn hostname_ok(&self, e: EClassId, pod: usize, b: BinId) -> Result<(), Fail> {
        let ec = &self.eclasses[e];
        let p = &self.input.pods[pod];
        let host = TopologyKey::Hostname;
        for &g in &ec.spreads {
            let group = &self.groups[g];
            if group.spec.key != host {
                continue;
            }
            if let GroupKind::Spread { max_skew, .. } = group.spec.kind {
                // A new node could always be launched, so the global minimum is 0.
                let selects = group.spec.selects(&p.namespace, &p.labels) as u32;
                if group.counts.host(b.index()) + selects > max_skew {
                    return Err(Fail::Permanent);
                }
            }
        }
        for &g in &ec.anti {
            let group = &self.groups[g];
            if group.spec.key == host && group.counts.host(b.index()) > 0 {
                return Err(Fail::Permanent);
            }
        }
        for &g in &self.classes[ec.class].matched {
            let group = &self.groups[g];
            if group.spec.key == host
                && group.spec.kind == GroupKind::AntiAffinity
                && group.spec.required
                && group.owners.host(b.index()) > 0
            {
                return Err(Fail::Permanent);
            }
        }
        for &g in &ec.affinity {
            let group = &self.groups[g];
            if group.spec.key != host || group.counts.host(b.index()) > 0 {
                continue;
            }
            let first =
                group.counts.total(host) == 0 && group.spec.selects(&p.namespace, &p.labels);
            if !first {
                return Err(Fail::Temporary);
            }
        }
        Ok(())
    }

    /// Whether a new claim with requirements `reqs` (and its target type) can be in
    /// domain `d` of key `k`.
    pub(super) fn claim_can_be_in(
        &self,
        target: Option<InstanceTypeId>,
        reqs: &Requirements,
        k: usize,
        d: usize,
    ) -> bool {
        let key = &self.keys[k];
        match (k, target) {
            (0, Some(t)) => {
                let mut m = vec![false; self.zones.len()];
                m[d] = true;
                self.cheapest_offering(t, reqs, Some(&m), None).is_some()
            }
            (1, Some(t)) => {
                let mut m = [false; 2];
                m[d] = true;
                self.cheapest_offering(t, reqs, None, Some(m)).is_some()
            }
            (0 | 1, None) => reqs.get(&key.label).is_none_or(|s| s.has(&key.values[d])),
            (_, Some(t)) if key.type_key => {
                self.instance_type(t).labels.get(&key.label) == Some(&key.values[d])
            }
            // The node carries the label only when its requirements define it.
            _ => reqs.get(&key.label).is_some_and(|s| s.has(&key.values[d])),
        }
    }

    /// For a pod with constraints on key `k`: the domain to pin the bin to (or keep).
    pub(super) fn pin(
        &self,
        e: EClassId,
        pod: usize,
        b: BinId,
        reqs: &Requirements,
        k: usize,
    ) -> Result<Option<usize>, Fail> {
        let bin = &self.bins[b];
        let Some(allowed) = self.allowed_domains(e, pod, k) else {
            return Ok(None);
        };
        if let Some(d) = bin.domain(k) {
            return if allowed[d] {
                Ok(None)
            } else {
                Err(Fail::Temporary)
            };
        }
        if !matches!(bin.origin, Origin::New(_)) {
            // A node without the label is in no domain of it.
            return Err(Fail::Permanent);
        }
        let usable: Vec<bool> = (0..allowed.len())
            .map(|d| self.claim_can_be_in(bin.target, reqs, k, d))
            .collect();
        match self.choose_domain(e, k, &allowed, &usable) {
            Some(d) => Ok(Some(d)),
            None => Err(Fail::Temporary),
        }
    }

    pub(crate) fn pin_bin(&mut self, b: BinId, k: usize, domain: usize) {
        let label = self.keys[k].label.clone();
        let value = self.keys[k].values[domain].clone();
        let bin = &mut self.bins[b];
        if bin.domain(k).is_some() {
            return;
        }
        if bin.domains.len() <= k {
            bin.domains.resize(k + 1, None);
        }
        bin.domains[k] = Some(domain);
        bin.reqs.add(&label, ValueSet::in_values([value]));
        bin.version += 1;
        let members = bin.pods.clone();
        for member in members {
            self.count_pod(member.eclass, b, TopologyKey::Domain(k), domain);
        }
    }

    /// The pod's topology constraints on labels other than hostname, for reasons (none:
    /// only the anti-affinity of pods already placed constrains it there).
    pub(super) fn topology_constraints(&self, e: EClassId) -> Vec<TopologyConstraint> {
        let ec = &self.eclasses[e];
        ec.spreads
            .iter()
            .chain(&ec.affinity)
            .chain(&ec.anti)
            .filter(|&&g| self.groups[g].spec.key != TopologyKey::Hostname)
            .map(|&g| self.group_constraint(g))
            .collect()
    }
}
