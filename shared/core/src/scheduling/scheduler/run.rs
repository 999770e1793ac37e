//! The provisioning run: pods nominated to in-flight claims go there first, then every
//! pending pod in order, relaxing its preferences as needed; pods that fit nowhere are
//! retried while others still get placed (a pod with affinity to a later one can follow
//! it). The result lists each bin's pods and the finished new claims.

use std::collections::HashMap;

use super::bins::Origin;
use super::ids::BinId;
use super::placement::Fit;
use super::{InFlightPlacement, NodePlacement, Schedule, Scheduler, UnplacedPod};

impl Scheduler<'_> {
    pub(crate) fn run(mut self) -> Schedule {
        let pods = self.input.pods;
        let pending = std::mem::take(&mut self.pending);
        let mut queue = self.place_nominated(pending);
        let mut level = vec![0usize; pods.len()];
        // As Karpenter does, pods that fail are retried while placements still happen:
        // a pod with affinity to pods placed later in the same batch can then follow them.
        loop {
            let mut failed: Vec<UnplacedPod> = Vec::new();
            let mut placed_any = false;
            loop {
                let mut retry = Vec::new();
                for &p in &queue {
                    let c = self.class_of(p);
                    let e = self.eclass(c, level[p]);
                    match self.place(e, p) {
                        Ok(()) => placed_any = true,
                        Err(reason) => {
                            if level[p] + 1 < self.classes[c].ladder.len() {
                                level[p] += 1;
                                retry.push(p);
                            } else {
                                failed.push(UnplacedPod { pod: p, reason });
                            }
                        }
                    }
                }
                if retry.is_empty() {
                    break;
                }
                queue = retry;
            }
            if failed.is_empty() || !placed_any {
                return self.finish(failed);
            }
            // Retry the failures from their strictest level again.
            queue = failed.iter().map(|u| u.pod).collect();
            for &p in &queue {
                level[p] = 0;
            }
        }
    }

    /// Puts each in-flight claim's still-pending pods on it, and returns the others.
    /// They were packed onto it when it was planned; its capacity is the type's, so
    /// they are placed without a fresh fit check that a different order might fail.
    pub(crate) fn place_nominated(&mut self, pending: Vec<usize>) -> Vec<usize> {
        let pods = self.input.pods;
        let mut nominated: HashMap<String, BinId> = HashMap::new();
        for b in self.bins.ids() {
            if let Origin::InFlight(i) = self.bins[b].origin {
                for key in &self.input.in_flight[i].pods {
                    nominated.insert(key.clone(), b);
                }
            }
        }
        if nominated.is_empty() {
            return pending;
        }
        let mut rest = Vec::with_capacity(pending.len());
        for p in pending {
            match nominated.get(&pods[p].key()) {
                Some(&b) => {
                    let e = self.eclass(self.class_of(p), 0);
                    self.commit(
                        e,
                        p,
                        b,
                        Fit {
                            merged: None,
                            pins: Vec::new(),
                        },
                    );
                }
                None => rest.push(p),
            }
        }
        rest
    }

    pub(super) fn finish(mut self, mut unschedulable: Vec<UnplacedPod>) -> Schedule {
        self.repack_free_claims();
        let input = self.input;
        let mut out = Schedule::default();
        unschedulable.sort_by_key(|u| u.pod);
        out.unschedulable = unschedulable;
        for b in self.bins.ids() {
            if self.bins[b].pods.is_empty() {
                continue;
            }
            let mut pods: Vec<usize> = self.bins[b].pods.iter().map(|m| m.pod).collect();
            pods.sort();
            match self.bins[b].origin {
                Origin::Existing(n) => out.existing_nodes.push(NodePlacement {
                    node: input.nodes[n].name.clone(),
                    pods,
                }),
                Origin::InFlight(i) => out.in_flight.push(InFlightPlacement {
                    claim: input.in_flight[i].name.clone(),
                    pods,
                }),
                Origin::New(pool) => {
                    let claim = self.finalize_claim(b, pool, pods);
                    out.new_claims.push(claim);
                }
            }
        }
        out
    }
}
