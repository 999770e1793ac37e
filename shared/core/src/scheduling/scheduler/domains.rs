//! Topology at placement time: which domains of a key a pod may go to given its spread,
//! affinity and anti-affinity (and the anti-affinity of pods already placed), which one
//! to choose, whether a bin's hostname domain admits it, and pinning a bin to a domain
//! (which counts its pods there).

use crate::scheduling::requirements::{Requirements, ValueSet};
use crate::scheduling::topology::{GroupKind, TopologyConstraint, TopologyKey};

use super::Scheduler;
use super::bins::Origin;
use super::ids::{BinId, DomainId, DomainKeyId, EClassId, IdVec, InstanceTypeId, PodId};
use super::placement::Fail;

impl Scheduler<'_> {
    /// Domains of key `k` where the pod may go given its constraints on that key, as a
    /// mask; `None` when it has no constraint on it.
    pub(super) fn allowed_domains(
        &self,
        e: EClassId,
        pod: PodId,
        k: DomainKeyId,
    ) -> Option<IdVec<DomainId, bool>> {
        let ec = &self.eclasses[e];
        let p = self.pod(pod);
        let key = k.topology();
        let dk = &self.keys[k];
        let domains = || dk.values.ids();
        let pod_set = ec.reqs.get(&dk.label);
        let pod_allows = |d: DomainId| pod_set.is_none_or(|s| s.has(&dk.values[d]));
        let mut allowed: Option<IdVec<DomainId, bool>> = None;
        let mut restrict = |mask: IdVec<DomainId, bool>| {
            allowed = Some(match allowed.take() {
                None => mask,
                Some(a) => a.iter().zip(mask.iter()).map(|(x, y)| *x && *y).collect(),
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
            // with nodeAffinityPolicy Honor, those the pod's own affinity allows (its
            // volumes' zones left out: they decide where it goes, not what is counted).
            let filter = group.filter.as_ref().filter(|f| f.honours_affinity());
            let affinity_allows = |d: DomainId| match filter {
                None => true,
                Some(f) if p.own_node_terms.is_some() => f.allows_value(&dk.label, &dk.values[d]),
                Some(_) => pod_allows(d),
            };
            let eligible: IdVec<DomainId, bool> = domains()
                .map(|d| group.universe[d.index()] && affinity_allows(d))
                .collect();
            let count = |d: DomainId| group.counts.get(key, d.index());
            let eligible_count = eligible.iter().filter(|e| **e).count() as u32;
            let min = if eligible_count < min_domains {
                0
            } else {
                domains()
                    .filter(|&d| eligible[d])
                    .map(count)
                    .min()
                    .unwrap_or(0)
            };
            let selects = group.spec.selects(&p.namespace, &p.labels) as u32;
            restrict(
                domains()
                    .map(|d| eligible[d] && count(d) + selects <= min + max_skew)
                    .collect(),
            );
        }
        for &g in &ec.affinity {
            let group = &self.groups[g];
            if group.spec.key != key {
                continue;
            }
            let with_pods: IdVec<DomainId, bool> = domains()
                .map(|d| pod_allows(d) && group.counts.get(key, d.index()) > 0)
                .collect();
            if with_pods.iter().any(|x| *x) {
                restrict(with_pods);
            } else if group.spec.selects(&p.namespace, &p.labels) {
                // The first of a group with affinity to itself: anywhere it may go.
                restrict(domains().map(pod_allows).collect());
            } else {
                restrict(IdVec::filled(false, dk.values.len()));
            }
        }
        for &g in &ec.anti {
            let group = &self.groups[g];
            if group.spec.key == key {
                restrict(
                    domains()
                        .map(|d| group.counts.get(key, d.index()) == 0)
                        .collect(),
                );
            }
        }
        for &g in &self.classes[ec.class].matched {
            let group = &self.groups[g];
            if group.spec.key == key
                && group.spec.kind == GroupKind::AntiAffinity
                && group.spec.required
            {
                restrict(
                    domains()
                        .map(|d| group.owners.get(key, d.index()) == 0)
                        .collect(),
                );
            }
        }
        allowed
    }

    /// Among allowed domains, the one to pin: the least populated for the first
    /// constraint that counts on this key (keeps spread even), else the first allowed.
    pub(super) fn choose_domain(
        &self,
        e: EClassId,
        k: DomainKeyId,
        allowed: &IdVec<DomainId, bool>,
        usable: &IdVec<DomainId, bool>,
    ) -> Option<DomainId> {
        let ec = &self.eclasses[e];
        let key = k.topology();
        let g = ec
            .spreads
            .iter()
            .chain(ec.affinity.iter())
            .find(|&&g| self.groups[g].spec.key == key);
        let count = |d: DomainId| g.map_or(0, |&g| self.groups[g].counts.get(key, d.index()));
        let zone_use = |d: DomainId| {
            if k == DomainKeyId::ZONE {
                self.zone_use[d]
            } else {
                0
            }
        };
        allowed
            .ids()
            .filter(|&d| allowed[d] && usable[d])
            .min_by_key(|&d| (count(d), zone_use(d), d))
    }

    pub(super) fn hostname_ok(&self, e: EClassId, pod: PodId, b: BinId) -> Result<(), Fail> {
        let ec = &self.eclasses[e];
        let p = self.pod(pod);
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
        k: DomainKeyId,
        d: DomainId,
    ) -> bool {
        let key = &self.keys[k];
        match (k, target) {
            (DomainKeyId::ZONE, Some(t)) => {
                let mut m = IdVec::filled(false, self.zones.len());
                m[d] = true;
                self.cheapest_offering(t, reqs, Some(&m), None).is_some()
            }
            (DomainKeyId::CAPACITY_TYPE, Some(t)) => {
                let mut m = [false; super::offerings::CT_COUNT];
                m[d.index()] = true;
                self.cheapest_offering(t, reqs, None, Some(m)).is_some()
            }
            (DomainKeyId::ZONE | DomainKeyId::CAPACITY_TYPE, None) => {
                reqs.get(&key.label).is_none_or(|s| s.has(&key.values[d]))
            }
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
        pod: PodId,
        b: BinId,
        reqs: &Requirements,
        k: DomainKeyId,
    ) -> Result<Option<DomainId>, Fail> {
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
        let usable: IdVec<DomainId, bool> = allowed
            .ids()
            .map(|d| self.claim_can_be_in(bin.target, reqs, k, d))
            .collect();
        match self.choose_domain(e, k, &allowed, &usable) {
            Some(d) => Ok(Some(d)),
            None => Err(Fail::Temporary),
        }
    }

    pub(crate) fn pin_bin(&mut self, b: BinId, k: DomainKeyId, domain: DomainId) {
        let label = self.keys[k].label.clone();
        let value = self.keys[k].values[domain].clone();
        let bin = &mut self.bins[b];
        if bin.domain(k).is_some() {
            return;
        }
        if bin.domains.len() <= k.index() {
            bin.domains.resize(k.index() + 1, None);
        }
        bin.domains[k] = Some(domain);
        bin.reqs.add(&label, ValueSet::in_values([value]));
        bin.version += 1;
        let members = bin.pods.clone();
        for member in members {
            self.count_pod(member.eclass, b, k.topology(), domain.index());
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
