//! The provisioning run: pods nominated to in-flight claims go there first, then every
//! pending pod in order, relaxing its preferences as needed; pods that fit nowhere are
//! retried while others still get placed (a pod with affinity to a later one can follow
//! it). The result lists each bin's pods and the finished new claims.

use std::collections::HashMap;

use crate::scheduling::unschedulable::{PoolRefusal, Refusal, Unschedulable};

use super::bins::Origin;
use super::ids::{BinId, IdVec, PodId};
use super::placement::Fit;
use super::{InFlightPlacement, NodePlacement, Schedule, Scheduler, SchedulerInput, UnplacedPod};

/// A pod that fits nowhere (yet), and why.
struct Failed {
    pod: PodId,
    reason: Unschedulable,
}

impl Scheduler<'_> {
    pub(crate) fn run(mut self) -> Schedule {
        let pending = std::mem::take(&mut self.pending);
        let mut queue = self.place_nominated(pending);
        let mut level: IdVec<PodId, usize> = IdVec::filled(0, self.input.pods.len());
        // As Karpenter does, pods that fail are retried while placements still happen:
        // a pod with affinity to pods placed later in the same batch can then follow them.
        loop {
            let mut failed: Vec<Failed> = Vec::new();
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
                                failed.push(Failed { pod: p, reason });
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
    pub(crate) fn place_nominated(&mut self, pending: Vec<PodId>) -> Vec<PodId> {
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
            match nominated.get(&self.pod(p).key()) {
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

    fn finish(mut self, failed: Vec<Failed>) -> Schedule {
        self.repack_free_claims();
        let input = self.input;
        let mut unschedulable: Vec<UnplacedPod> = failed
            .into_iter()
            .map(|f| UnplacedPod {
                pod: f.pod.index(),
                reason: f.reason,
            })
            .collect();
        unschedulable.sort_by_key(|u| u.pod);
        let mut out = Schedule {
            unschedulable,
            ..Schedule::default()
        };
        for b in self.bins.ids() {
            if self.bins[b].pods.is_empty() {
                continue;
            }
            let origin = self.bins[b].origin;
            let pods = self.bins[b].placed_pods(0);
            if let (Some(pods), Origin::New(pool)) = (out.place_on(input, origin, pods), origin) {
                let claim = self.finalize_claim(b, pool, pods);
                if claim.options.is_empty() {
                    // Only reserved offerings were allowed (a pod pinned to a
                    // reservation), and the claims finished before it took what was
                    // left: its pods wait for room, as in Karpenter.
                    out.unschedulable
                        .extend(claim.pods.iter().map(|&pod| UnplacedPod {
                            pod,
                            reason: no_offering(&claim.node_pool),
                        }));
                    continue;
                }
                out.new_claims.push(claim);
            }
        }
        out.unschedulable.sort_by_key(|u| u.pod);
        out
    }
}

impl Schedule {
    /// Lists `pods` (indices into `SchedulerInput::pods`, ascending) as placed on the
    /// existing node or in-flight claim of `origin`. A new claim's pods are handed back:
    /// what the claim becomes is the caller's to say (a finished claim for provisioning,
    /// a claim launching for a solve over a commit's claims).
    pub(crate) fn place_on(
        &mut self,
        input: &SchedulerInput<'_>,
        origin: Origin,
        pods: Vec<usize>,
    ) -> Option<Vec<usize>> {
        match origin {
            Origin::Existing(n) => self.existing_nodes.push(NodePlacement {
                node: input.nodes[n].name.clone(),
                pods,
            }),
            Origin::InFlight(i) => self.in_flight.push(InFlightPlacement {
                claim: input.in_flight[i].name.clone(),
                pods,
            }),
            Origin::New(_) => return Some(pods),
        }
        None
    }
}

/// Why the pods of a claim left without an offering wait: pool `node_pool` offers none.
pub(crate) fn no_offering(node_pool: &str) -> Unschedulable {
    Unschedulable::Refused(vec![PoolRefusal {
        node_pool: node_pool.to_string(),
        reason: Refusal::NoOffering,
    }])
}
