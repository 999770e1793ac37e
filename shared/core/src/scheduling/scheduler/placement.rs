//! Placing one pod: trying its class's candidate bins in order (room, host ports,
//! hostname topology, requirements, other domains) and committing it to the first that
//! takes it; when none does, a new claim is opened (`new_claims`). A failure is either
//! permanent for the class (the bin is dropped from its candidates) or temporary.

use crate::scheduling::requirements::Requirements;
use crate::scheduling::topology::TopologyKey;
use crate::scheduling::unschedulable::Unschedulable;

use super::Scheduler;
use super::bins::{BinPod, Origin};
use super::classes::Candidate;
use super::ids::{BinId, DomainId, DomainKeyId, EClassId, PodId};
use super::undo::{AbsorbedBefore, CandidateRef};

pub(crate) enum Fail {
    /// The bin can never take a pod of this class.
    Permanent,
    /// Not this pod, maybe a smaller one.
    Temporary,
}

/// How a pod fits a bin: the bin's requirements narrowed by the pod's (new claims,
/// when they narrow), and the domains to pin it to.
pub(crate) struct Fit {
    pub(crate) merged: Option<Requirements>,
    pub(crate) pins: Vec<Pin>,
}

/// A domain of a domain key a bin is to be pinned to.
pub(crate) struct Pin {
    pub(crate) key: DomainKeyId,
    pub(crate) domain: DomainId,
}

impl Scheduler<'_> {
    pub(crate) fn place(&mut self, e: EClassId, pod: PodId) -> Result<(), Unschedulable> {
        let mut i = 0;
        while i < self.eclasses[e].candidates.len() {
            if self.eclasses[e].candidates[i].dead {
                i += 1;
                continue;
            }
            let cand = &self.eclasses[e].candidates[i];
            if self.blocked.get(cand.bin).copied().unwrap_or(false) {
                i += 1;
                continue;
            }
            match self.try_bin(e, pod, cand) {
                Ok(fit) => {
                    let b = cand.bin;
                    self.commit(e, pod, b, fit);
                    return Ok(());
                }
                Err(Fail::Permanent) => {
                    let ec = &mut self.eclasses[e];
                    ec.candidates[i].dead = true;
                    ec.dead += 1;
                    if let Some(u) = &mut self.undo {
                        u.dead.push(CandidateRef {
                            eclass: e,
                            position: i,
                        });
                    }
                }
                Err(Fail::Temporary) => {}
            }
            i += 1;
        }
        let ec = &mut self.eclasses[e];
        // A solve's undo log refers to candidates by position: no compaction then.
        if self.undo.is_none() && ec.dead > 64 && ec.dead * 2 > ec.candidates.len() {
            ec.candidates.retain(|c| !c.dead);
            ec.dead = 0;
        }
        self.open_claim(e, pod)
    }

    pub(super) fn try_bin(&self, e: EClassId, pod: PodId, cand: &Candidate) -> Result<Fit, Fail> {
        let ec = &self.eclasses[e];
        let bin = &self.bins[cand.bin];
        let p = self.pod(pod);
        // Capacity.
        let mut total = bin.used.clone();
        total.add(&p.requests);
        if !total.fits_in(&bin.ceiling) {
            let mut smallest = bin.used.clone();
            smallest.add(&self.classes[ec.class].min_request);
            return Err(if smallest.fits_in(&bin.ceiling) {
                Fail::Temporary
            } else {
                Fail::Permanent
            });
        }
        // Host ports: every pod of the class binds the same ones.
        if p.host_ports
            .iter()
            .any(|mine| bin.ports.iter().any(|p| p.conflicts_with(mine)))
        {
            return Err(Fail::Permanent);
        }
        self.hostname_ok(e, pod, cand.bin)?;
        // Requirements: only new claims narrow; nodes were checked on admission.
        let mut merged = None;
        if let Origin::New(pool) = bin.origin {
            if cand.absorbed != bin.version {
                if !bin
                    .reqs
                    .is_compatible_with(&ec.reqs, &|k| self.well_known.contains(k))
                {
                    return Err(Fail::Permanent);
                }
                let m = bin.reqs.intersect(&ec.reqs);
                if let Some(t) = bin.target
                    && (!self.type_satisfies(t, &m)
                        || self.cheapest_offering(t, &m, None, None).is_none())
                {
                    return Err(Fail::Permanent);
                }
                merged = Some(m);
            }
            if self.pools[pool].has_min_values {
                let reqs = merged.as_ref().unwrap_or(&bin.reqs);
                if self.min_values_ok(pool, reqs, &total).is_err() {
                    return Err(Fail::Temporary);
                }
            }
        }
        // Domain constraints (zone, capacity type, any other label).
        let reqs = merged.as_ref().unwrap_or(&bin.reqs);
        let mut pins = Vec::new();
        for k in self.keys.ids() {
            if let Some(domain) = self.pin(e, pod, cand.bin, reqs, k)? {
                pins.push(Pin { key: k, domain });
            }
        }
        Ok(Fit { merged, pins })
    }

    pub(super) fn commit(&mut self, e: EClassId, pod: PodId, b: BinId, fit: Fit) {
        self.save_bin(b);
        let p = self.pod(pod);
        let class = self.eclasses[e].class;
        let bin = &mut self.bins[b];
        bin.used.add(&p.requests);
        bin.ports.extend(p.host_ports.iter().cloned());
        if let Some(m) = fit.merged
            && m != bin.reqs
        {
            bin.reqs = m;
            bin.version += 1;
        }
        bin.pods.push(BinPod { pod, eclass: e });
        match &mut self.undo {
            None => self.classes[class].remaining.sub(&p.requests),
            Some(u) => {
                if let Some(m) = u.moving.iter_mut().find(|m| m.pod == pod) {
                    m.placed = true;
                }
            }
        }
        // Count this pod in its domains, then pin (which counts earlier pods too).
        self.count_pod(e, b, TopologyKey::Hostname, b.index());
        for k in self.keys.ids() {
            if let Some(d) = self.bins[b].domain(k) {
                self.count_pod(e, b, k.topology(), d.index());
            }
        }
        for pin in fit.pins {
            self.pin_bin(b, pin.key, pin.domain);
        }
        let version = self.bins[b].version;
        let candidates = &mut self.eclasses[e].candidates;
        if let Some(i) = candidates.iter().position(|c| c.bin == b) {
            if let Some(u) = &mut self.undo {
                let candidate = CandidateRef {
                    eclass: e,
                    position: i,
                };
                u.absorbed.push(AbsorbedBefore {
                    candidate,
                    version: candidates[i].absorbed,
                });
            }
            candidates[i].absorbed = version;
        }
    }
}
