//! The undo log of a speculative solve: the bins it changed (as they were), the count
//! changes it made and the candidate caches it touched, so that the prepared state can
//! be restored in time proportional to what the solve did, not to the cluster.

use crate::resources::Resources;
use crate::scheduling::topology::TopologyKey;

use super::Scheduler;
use super::bins::Bin;
use super::classes::Candidates;
use super::duals::DualPrices;
use super::ids::{BinId, DomainId, EClassId, GroupId, IdVec, PodId, PoolId};

/// One topology count change, to be reversed.
#[derive(Clone, Copy)]
pub(crate) struct CountChange {
    pub(crate) group: GroupId,
    pub(crate) owners: bool,
    pub(crate) key: TopologyKey,
    /// The domain of `key` (a bin's index for hostname, as `DomainCounts` takes it);
    /// `None`: a hostname count on a node that is not a bin (`other_hosts`).
    pub(crate) domain: Option<usize>,
    pub(crate) delta: i32,
}

/// What a speculative solve changed, so it can be undone: it touches a few bins and
/// counts, never the whole cluster.
#[derive(Default)]
pub(crate) struct Undo {
    /// Bins at or past this index were opened by the solve.
    pub(crate) base_bins: BinId,
    /// Bins as they were before the solve first changed them.
    pub(crate) bins: Vec<SavedBin>,
    pub(crate) counts: Vec<CountChange>,
    /// Candidates marked dead.
    pub(crate) dead: Vec<CandidateRef>,
    /// Candidates whose `absorbed` version changed, with the one before.
    pub(crate) absorbed: Vec<AbsorbedBefore>,
    /// Eclasses that were given candidates for bins the solve opened.
    pub(crate) pushed: Vec<EClassId>,
    /// Each pool's usage and dual prices before the solve.
    pub(crate) pools: Vec<PoolState>,
    pub(crate) zone_use: IdVec<DomainId, u32>,
    pub(crate) blocked: Vec<BinId>,
    /// The pods being re-placed (for the remaining demand new claims are sized against).
    pub(crate) moving: Vec<MovingPod>,
    /// How many of `moving` are placed.
    pub(crate) placed: usize,
    /// Per pool: the requests of the moving pods not placed yet whose class may use the
    /// pool (what new claims are sized against). Kept as pods are placed: summed over
    /// `moving` for each claim opened, it was 15% of a profile of a 1,000-node hour
    /// under a 20% budget.
    pub(crate) remaining: IdVec<PoolId, Resources>,
    /// Per compiled class placed in the solve (by index): the candidates still worth
    /// trying (see `Scheduler::place`).
    pub(crate) scans: Vec<Option<Scan>>,
}

/// The candidates of a compiled class that a solve's pods may still be tried on:
/// positions in `EClass::candidates`, ascending, without the bins the solve blocks, and
/// without those found dead once a pod has walked past them. The solve fixes which
/// bins are blocked and only ever marks candidates dead, so what a scan leaves out
/// would be skipped anyway: the order candidates are tried in is the list's.
#[derive(Default)]
pub(crate) struct Scan {
    pub(crate) positions: Vec<u32>,
    /// The list is `positions[start..]`: what is before it was dropped.
    pub(crate) start: usize,
    /// Candidates below this position are listed (or left out).
    pub(crate) upto: usize,
}

impl Scan {
    /// Drops the dead among `positions[start..end]` (those a pod just walked past),
    /// keeping the others in order.
    pub(crate) fn drop_dead(&mut self, end: usize, candidates: &Candidates) {
        let mut kept = end;
        for k in (self.start..end).rev() {
            let i = self.positions[k];
            if !candidates[i as usize].dead() {
                kept -= 1;
                self.positions[kept] = i;
            }
        }
        self.start = kept;
    }
}

/// A class's candidate, by its position in the list (a solve does not compact it).
#[derive(Clone, Copy)]
pub(crate) struct CandidateRef {
    pub(crate) eclass: EClassId,
    pub(crate) position: usize,
}

/// A bin as it was before a solve first changed it.
pub(crate) struct SavedBin {
    pub(crate) id: BinId,
    pub(crate) bin: Bin,
}

/// A candidate's `absorbed` version before a solve changed it.
#[derive(Clone, Copy)]
pub(crate) struct AbsorbedBefore {
    pub(crate) candidate: CandidateRef,
    pub(crate) version: u32,
}

/// What a solve changes in a pool.
pub(crate) struct PoolState {
    pub(crate) usage: Resources,
    pub(crate) duals: Option<DualPrices>,
}

/// A pod a solve re-places, and whether it is placed yet.
pub(crate) struct MovingPod {
    pub(crate) pod: PodId,
    pub(crate) placed: bool,
}

impl Clone for Undo {
    fn clone(&self) -> Self {
        // A scheduler is only cloned between solves.
        Undo::default()
    }
}

impl Undo {
    /// Records that the moving pod `pod` (which requests `requests`, and whose class
    /// may use the pools `pools_ok` says) is placed, and takes it out of `remaining`
    /// the first time. Pods are placed in the order `moving` lists them, so it is
    /// nearly always the next one: no search then.
    pub(crate) fn mark_placed(
        &mut self,
        pod: PodId,
        requests: &Resources,
        pools_ok: Option<&IdVec<PoolId, bool>>,
    ) {
        let next = self
            .moving
            .get(self.placed)
            .filter(|m| m.pod == pod)
            .map(|_| self.placed);
        let at = next.or_else(|| self.moving.iter().position(|m| m.pod == pod));
        if let Some(m) = at.map(|i| &mut self.moving[i])
            && !m.placed
        {
            m.placed = true;
            self.placed += 1;
            let ok = |pool| {
                pools_ok
                    .and_then(|ok| ok.get(pool))
                    .copied()
                    .unwrap_or(false)
            };
            for (pool, left) in self.remaining.enumerate_mut() {
                if ok(pool) {
                    left.sub(requests);
                }
            }
        }
    }
}

impl Scheduler<'_> {
    /// Saves bin `b` in the undo log the first time a solve changes it.
    pub(super) fn save_bin(&mut self, b: BinId) {
        let Some(u) = &mut self.undo else { return };
        if b >= u.base_bins || self.bin_stamp[b] == self.stamp {
            return;
        }
        self.bin_stamp[b] = self.stamp;
        u.bins.push(SavedBin {
            id: b,
            bin: self.bins[b].clone(),
        });
    }
}
