//! The undo log of a speculative solve: the bins it changed (as they were), the count
//! changes it made and the candidate caches it touched, so that the prepared state can
//! be restored in time proportional to what the solve did, not to the cluster.

use crate::resources::Resources;
use crate::scheduling::topology::TopologyKey;

use super::Scheduler;
use super::bins::Bin;

/// One topology count change, to be reversed.
#[derive(Clone, Copy)]
pub(crate) struct CountChange {
    pub(crate) group: usize,
    pub(crate) owners: bool,
    pub(crate) key: TopologyKey,
    /// `None`: a hostname count on a node that is not a bin (`other_hosts`).
    pub(crate) domain: Option<usize>,
    pub(crate) delta: i32,
}

/// What a speculative solve changed, so it can be undone: it touches a few bins and
/// counts, never the whole cluster.
#[derive(Default)]
pub(crate) struct Undo {
    /// Bins at or past this index were opened by the solve.
    pub(crate) base_bins: usize,
    /// Bins as they were before the solve first changed them.
    pub(crate) bins: Vec<(usize, Bin)>,
    pub(crate) counts: Vec<CountChange>,
    /// (eclass, candidate position) marked dead.
    pub(crate) dead: Vec<(usize, usize)>,
    /// (eclass, candidate position, previous `absorbed`).
    pub(crate) absorbed: Vec<(usize, usize, u32)>,
    /// Eclasses that were given candidates for bins the solve opened.
    pub(crate) pushed: Vec<usize>,
    pub(crate) pools: Vec<(Resources, Option<(Vec<usize>, Vec<f64>, Resources)>)>,
    pub(crate) zone_use: Vec<u32>,
    pub(crate) blocked: Vec<usize>,
    /// The pods being re-placed, and whether each is placed yet (for the remaining
    /// demand new claims are sized against).
    pub(crate) moving: Vec<(usize, bool)>,
}

impl Clone for Undo {
    fn clone(&self) -> Self {
        // A scheduler is only cloned between solves.
        Undo::default()
    }
}

impl Scheduler<'_> {
    /// Saves bin `b` in the undo log the first time a solve changes it.
    pub(super) fn save_bin(&mut self, b: usize) {
        let Some(u) = &mut self.undo else { return };
        if b >= u.base_bins || self.bin_stamp[b] == self.stamp {
            return;
        }
        self.bin_stamp[b] = self.stamp;
        u.bins.push((b, self.bins[b].clone()));
    }
}
