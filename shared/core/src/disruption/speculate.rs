//! Speculative scheduling for disruption: "take these nodes away: where do their pods
//! go, with how many new claims, at what price?", and making an answer permanent once
//! its command is taken, so the next question sees the cluster the commands before it
//! leave. Over the scheduler prepared once per decision ([`PreparedScheduler`]): a
//! solve costs what its moved pods cost, not the cluster.

use std::collections::HashSet;

use crate::provisioning::{PlannedNodeClaim, planned_claim_unnamed};
use crate::scheduling::fast_hash::FastMap;
use crate::scheduling::{
    Placed, PreparedScheduler, Removal, SchedulerInput, Solve, SolveLimits, Stop as SolveStop,
};

use super::command::Move;

/// When a speculative solve gives up.
#[derive(Debug, Clone, PartialEq)]
pub enum Stop {
    /// This pod ("namespace/name") fits nowhere; why.
    PodDoesNotFit { pod: String, reason: String },
    /// More new claims than allowed were needed.
    TooManyClaims,
    /// The new claims cost at least the cap.
    TooExpensive,
}

/// Where a removal's pods go. A solve leaves `moves` empty and the new claims' `pods`
/// unnamed: most solves are only priced, and naming their pods ("namespace/name", for
/// thousands of pods per solve) was a tenth of a decision. [`Speculator::name_pods`]
/// fills both in for the placement a command takes.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Placement {
    pub moves: Vec<Move>,
    pub new_claims: Vec<PlannedNodeClaim>,
    /// What makes the placement permanent; `None` for a placement not solved (an
    /// expired node whose pods fit nowhere).
    placed: Option<Placed>,
}

impl Placement {
    pub fn new_claims_price(&self) -> f64 {
        self.new_claims
            .iter()
            .fold(0.0, |total, c| total + c.price_per_hour)
    }
}

#[derive(Debug, Clone, Copy, Default)]
pub struct Limits {
    pub max_new_claims: Option<usize>,
    /// The new claims' cheapest prices must sum strictly below this.
    pub max_price: Option<f64>,
}

/// The cluster as the commands taken so far leave it.
pub struct Speculator<'a> {
    input: &'a SchedulerInput<'a>,
    prepared: PreparedScheduler<'a>,
    index: FastMap<&'a str, usize>,
    /// Nodes that are never destinations (being disrupted).
    closed: HashSet<usize>,
}

impl<'a> Speculator<'a> {
    /// `input.pods` are all the cluster's pods (pending ones are the provisioner's and
    /// are not placed by a solve); `closed` nodes take no pods.
    pub fn new(input: &'a SchedulerInput<'a>, closed: impl IntoIterator<Item = String>) -> Self {
        let index: FastMap<&str, usize> = input
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.as_str(), i))
            .collect();
        let closed = closed
            .into_iter()
            .filter_map(|n| index.get(n.as_str()).copied())
            .collect();
        Self {
            input,
            prepared: PreparedScheduler::for_solves(input),
            index,
            closed,
        }
    }

    /// These nodes stay but take no pods (they are being disrupted).
    pub fn close(&mut self, nodes: impl IntoIterator<Item = String>) {
        for n in nodes {
            if let Some(&i) = self.index.get(n.as_str()) {
                self.closed.insert(i);
            }
        }
    }

    fn indices(&self, names: &[&str]) -> Vec<usize> {
        names
            .iter()
            .filter_map(|n| self.index.get(n).copied())
            .collect()
    }

    /// Where the moving pods of `removed` (node names) would go; `excluded` nodes stay
    /// but take none of them.
    pub fn solve(
        &self,
        removed: &[&str],
        excluded: &[&str],
        limits: Limits,
    ) -> Result<Placement, Stop> {
        let nodes = self.indices(removed);
        let mut not_destinations: Vec<usize> = self.closed.iter().copied().collect();
        not_destinations.extend(self.indices(excluded));
        not_destinations.sort_unstable();
        not_destinations.dedup();
        let solve = self.prepared.solve(
            &Removal {
                nodes: &nodes,
                not_destinations: &not_destinations,
            },
            &SolveLimits {
                max_new_claims: limits.max_new_claims,
                max_price: limits.max_price,
            },
        );
        let placed = match solve {
            Solve::Placed(placed) => placed,
            Solve::Stopped(SolveStop::PodDoesNotFit { pod, reason }) => {
                return Err(Stop::PodDoesNotFit {
                    pod: self.input.pods[pod].key(),
                    reason: reason.to_string(),
                });
            }
            Solve::Stopped(SolveStop::TooManyClaims) => return Err(Stop::TooManyClaims),
            Solve::Stopped(SolveStop::TooExpensive) => return Err(Stop::TooExpensive),
        };
        let new_claims: Vec<PlannedNodeClaim> = placed
            .new_claims
            .iter()
            .map(planned_claim_unnamed)
            .collect();
        Ok(Placement {
            moves: Vec::new(),
            new_claims,
            placed: Some(placed),
        })
    }

    /// Names the placement's pods: its moves to nodes and claims already launching, and
    /// the pods of each new claim (see [`Placement`]).
    pub fn name_pods(&self, placement: &mut Placement) {
        let Some(placed) = &placement.placed else {
            return;
        };
        let pods = self.input.pods;
        let move_to = |target: &str, idx: &[usize]| {
            (!idx.is_empty()).then(|| Move {
                target: target.to_string(),
                pods: idx.iter().map(|&p| pods[p].key()).collect(),
            })
        };
        placement.moves = placed
            .existing_nodes
            .iter()
            .filter_map(|a| move_to(&a.node, &a.pods))
            .chain(
                placed
                    .in_flight
                    .iter()
                    .filter_map(|a| move_to(&a.claim, &a.pods)),
            )
            .collect();
        for (claim, solved) in placement.new_claims.iter_mut().zip(&placed.new_claims) {
            claim.pods = solved.pods.iter().map(|&p| pods[p].key()).collect();
        }
    }

    /// The command is taken: `removed` is gone, its pods are where `placement` put
    /// them, and its new claims count in later solves (topology, limits) but take none
    /// of their pods: each command stands on its own, as the function validates it.
    pub fn commit(&mut self, removed: &[&str], placement: &Placement) {
        let committed = placement
            .placed
            .as_ref()
            .is_some_and(|placed| self.prepared.commit(placed).is_ok());
        if !committed {
            // Not solved (pods that fit nowhere go pending): the nodes still go, so at
            // least nothing may move onto them.
            let names: Vec<String> = removed.iter().map(|n| n.to_string()).collect();
            self.close(names);
        }
    }
}
