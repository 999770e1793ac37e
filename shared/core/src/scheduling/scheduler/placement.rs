//! Placing one pod: trying its class's candidate bins in order (room, host ports,
//! hostname topology, requirements, other domains) and committing it to the first that
//! takes it; when none does, a new claim is opened (`new_claims`). A failure is either
//! permanent for the class (the bin is dropped from its candidates) or temporary.

use crate::resources::Resources;
use crate::scheduling::requirements::{MinValuesPolicy, Requirements};
use crate::scheduling::topology::TopologyKey;
use crate::scheduling::unschedulable::{Refusal, Unschedulable};

use super::Scheduler;
use super::bins::{BinPod, Origin};
use super::classes::Candidate;
use super::ids::{BinId, DomainId, DomainKeyId, EClassId, PodId};
use super::undo::{AbsorbedBefore, CandidateRef, Scan};

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
        if self.undo.is_some() {
            return match self.place_in_solve(e, pod) {
                true => Ok(()),
                false => self.open_claim(e, pod),
            };
        }
        let mut i = 0;
        while i < self.eclasses[e].candidates.len() {
            let cand = &self.eclasses[e].candidates[i];
            let skip = cand.dead() || self.blocked.get(cand.bin).copied().unwrap_or(false);
            if !skip && self.try_candidate(e, pod, i) {
                return Ok(());
            }
            i += 1;
        }
        // Compacted only outside solves: a solve's undo log refers to candidates by
        // position.
        let ec = &mut self.eclasses[e];
        if ec.dead > 64 && ec.dead * 2 > ec.candidates.len() {
            ec.candidates.retain(|c| !c.dead());
            ec.dead = 0;
        }
        self.open_claim(e, pod)
    }

    /// `place` during a speculative solve, up to opening a claim: whether a candidate
    /// took the pod. The class's candidates are tried through its [`Scan`], which leaves
    /// out what the solve blocks and what it found dead: with every other candidate
    /// of a consolidation window kept out of reach, nearly all of a class's candidates
    /// are blocked, and walking past them was most of a solve's time.
    fn place_in_solve(&mut self, e: EClassId, pod: PodId) -> bool {
        let mut scan = self.take_scan(e);
        let mut k = scan.start;
        let mut placed = false;
        while k < scan.positions.len() {
            let i = scan.positions[k] as usize;
            if !self.eclasses[e].candidates[i].dead() && self.try_candidate(e, pod, i) {
                placed = true;
                break;
            }
            k += 1;
        }
        scan.drop_dead(k, &self.eclasses[e].candidates);
        self.undo.as_mut().expect("solving").scans[e.index()] = Some(scan);
        placed
    }

    /// Class `e`'s scan for this solve, taken out of the undo log (put it back): built
    /// on first use, and extended with the candidates admitted since.
    fn take_scan(&mut self, e: EClassId) -> Scan {
        let u = self.undo.as_mut().expect("solving");
        if u.scans.len() <= e.index() {
            u.scans.resize_with(e.index() + 1, || None);
        }
        let mut scan = u.scans[e.index()].take().unwrap_or_default();
        let candidates = &self.eclasses[e].candidates;
        for (i, c) in candidates.iter().enumerate().skip(scan.upto) {
            if !c.dead() && !self.blocked.get(c.bin).copied().unwrap_or(false) {
                scan.positions.push(i as u32);
            }
        }
        scan.upto = candidates.len();
        scan
    }

    /// Tries candidate `i` of class `e` for the pod: placed there (true), or marked
    /// dead when it can never take the class.
    fn try_candidate(&mut self, e: EClassId, pod: PodId, i: usize) -> bool {
        let cand = &self.eclasses[e].candidates[i];
        match self.try_bin(e, pod, cand) {
            Ok(fit) => {
                let b = cand.bin;
                self.commit(e, pod, b, fit);
                true
            }
            Err(Fail::Permanent) => {
                let ec = &mut self.eclasses[e];
                ec.candidates[i].set_dead(true);
                ec.dead += 1;
                if let Some(u) = &mut self.undo {
                    u.dead.push(CandidateRef {
                        eclass: e,
                        position: i,
                    });
                }
                false
            }
            Err(Fail::Temporary) => false,
        }
    }

    pub(super) fn try_bin(&self, e: EClassId, pod: PodId, cand: &Candidate) -> Result<Fit, Fail> {
        let ec = &self.eclasses[e];
        let bin = &self.bins[cand.bin];
        let p = self.pod(pod);
        // Capacity.
        if !bin.used.fits_in_with(&p.requests, &bin.ceiling) {
            let smallest = &self.classes[ec.class].min_request;
            return Err(if bin.used.fits_in_with(smallest, &bin.ceiling) {
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
            if cand.absorbed() != bin.version {
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
                let mut total = bin.used.clone();
                total.add(&p.requests);
                match self.min_values_within_policy(pool, reqs, &total) {
                    Err(_) => return Err(Fail::Temporary),
                    Ok(None) => {}
                    Ok(Some(relaxed)) => merged = Some(relaxed),
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

    /// A new claim's requirements `reqs` holding `requests` in `pool` under the
    /// minValues policy: `Ok(None)` when the fitting types keep every minValues; under
    /// `BestEffort`, the requirements with each minimum they cannot keep lowered to the
    /// distinct values they have (Karpenter's relaxation); under `Strict`, why not.
    pub(super) fn min_values_within_policy(
        &self,
        pool: super::ids::PoolId,
        reqs: &Requirements,
        requests: &Resources,
    ) -> Result<Option<Requirements>, Refusal> {
        let Err(refusal) = self.min_values_ok(pool, reqs, requests) else {
            return Ok(None);
        };
        if self.input.pricing.min_values_policy == MinValuesPolicy::Strict {
            return Err(refusal);
        }
        let mut relaxed = reqs.clone();
        let mut refusal = refusal;
        // Each round lowers one key to what the types have; the keys are finite.
        loop {
            let Refusal::MinValues { key, distinct, .. } = &refusal else {
                return Err(refusal);
            };
            relaxed.lower_min_values(key, *distinct as u32);
            match self.min_values_ok(pool, &relaxed, requests) {
                Ok(()) => return Ok(Some(relaxed)),
                Err(next) => refusal = next,
            }
        }
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
                let pools_ok = self.pod_class[pod].map(|c| &self.classes[c].pools_ok);
                u.mark_placed(pod, &p.requests, pools_ok);
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
        // Candidates are in bin order (see `admit`).
        let i = candidates.partition_point(|c| c.bin < b);
        if candidates.get(i).is_some_and(|c| c.bin == b) {
            if let Some(u) = &mut self.undo {
                let candidate = CandidateRef {
                    eclass: e,
                    position: i,
                };
                u.absorbed.push(AbsorbedBefore {
                    candidate,
                    version: candidates[i].absorbed(),
                });
            }
            candidates[i].set_absorbed(version);
        }
    }
}
