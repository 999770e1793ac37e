//! `decide`: the disruption commands that can run now, together, within budgets, and
//! why every other managed node stays.
//!
//! Methods run in this order, each on the cluster the commands before it leave:
//! 1. expiration — forceful: no budget, no consolidateAfter, no blocker (the drain
//!    still honours them, up to terminationGracePeriod); each expired node is one
//!    command, its pods placed on what remains plus replacements;
//! 2. emptiness — every empty candidate whose consolidateAfter has elapsed, one
//!    command, within the Empty budget;
//! 3. drift — each drifted candidate, replaced at any price, within the Drifted budget;
//! 4. multi-node consolidation — the longest prefix of the candidates (cheapest to
//!    disrupt first) whose pods fit on the remaining nodes plus any number of new
//!    claims costing strictly less (Karpenter allows at most one; M → N here), every
//!    length tried, longest first (Karpenter's binary search misses merges);
//! 5. single-node consolidation — every remaining candidate, one by one, with no time
//!    limit: deleted when its pods fit elsewhere, replaced when a cheaper set of claims
//!    takes them.
//!
//! Spot candidates are only replaced by spot capacity with `spot_to_spot`, one node at
//! a time, and when at least 15 cheaper spot types fit (the launch keeps the 15
//! cheapest), as Karpenter's SpotToSpotConsolidation.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::api::model::NodePool;
use crate::catalog::{CapacityType, Catalog, InstanceType};
use crate::cluster::Pod;
use crate::scheduling::SchedulerInput;
use crate::scheduling::fast_hash::FastMap;
use crate::well_known::{LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_ZONE};

use super::balanced::{self, PoolTotals, Source};
use super::budget::allowance;
use super::candidates::{NodeVerdict, evaluate};
use super::command::{Command, Decision, DisruptionInput, DriftedNode, Method, RejectedNode};
use super::kube_fit::KubeRoom;
use super::rules::consolidatable;
use super::speculate::{Limits, Placement, Speculator, Stop};
use super::{Reason, RejectCode, Rejection};

mod replacements;
use replacements::{cheaper_options_only, no_type_of_their_own, pin_reserved, spot_replacement};

/// Spot-to-spot needs this many cheaper spot types, and launches with this many.
pub const SPOT_TO_SPOT_MIN_TYPES: usize = 15;
/// Multi-node consolidation considers at most this many candidates at once, as
/// Karpenter: larger sets are rarely valid and each try costs a solve.
pub const MULTI_NODE_MAX_CANDIDATES: usize = 100;

/// The catalog's instance types by name. `Catalog::get` searches the list, and every
/// solve prices each option of each replacement by name (some 60 per claim).
struct Types<'a>(FastMap<&'a str, &'a InstanceType>);

impl<'a> Types<'a> {
    fn new(catalog: &'a Catalog) -> Self {
        let mut by_name = FastMap::default();
        for it in &catalog.types {
            // The first of a name, as `Catalog::get` finds it.
            by_name.entry(it.name.as_str()).or_insert(it);
        }
        Types(by_name)
    }

    fn get(&self, name: &str) -> Option<&'a InstanceType> {
        self.0.get(name).copied()
    }
}

struct Candidate<'a> {
    verdict: NodeVerdict<'a>,
    price: f64,
    spot: bool,
}

impl Candidate<'_> {
    fn name(&self) -> &str {
        &self.verdict.node.name
    }
    fn pool(&self) -> &NodePool {
        self.verdict.pool
    }
}

/// Budget use per NodePool: managed nodes and nodes disrupted so far.
struct Budgets<'a> {
    now: i64,
    pools: HashMap<&'a str, (&'a NodePool, usize, usize)>,
}

impl<'a> Budgets<'a> {
    /// Room left in `pool` for `reason`, and a sentence when there is none.
    fn room(&self, pool: &str, reason: Reason) -> Result<usize, Rejection> {
        let Some(&(np, nodes, disrupting)) = self.pools.get(pool) else {
            return Ok(usize::MAX);
        };
        let a = allowance(np, reason.budget_reason(), self.now, nodes, disrupting);
        if a.allowed > 0 {
            return Ok(a.allowed);
        }
        let budget = a
            .limited_by
            .and_then(|i| np.disruption.budgets.get(i))
            .map(|b| match b.nodes {
                crate::api::model::BudgetNodes::Count(n) => n.to_string(),
                crate::api::model::BudgetNodes::Percent(p) => format!("{p}%"),
            })
            .unwrap_or_default();
        Err(Rejection::new(
            RejectCode::DisruptionBudget,
            format!(
                "NodePool \"{pool}\" allows no more {reason:?} disruptions now (budget nodes {budget}; {disrupting} of {nodes} nodes already disrupting)"
            ),
        ))
    }

    fn take(&mut self, pool: &str, n: usize) {
        if let Some(entry) = self.pools.get_mut(pool) {
            entry.2 += n;
        }
    }
}

/// The steps of [`decide`], in the order they run: what [`decide_observed`] reports as
/// each one ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Which nodes are candidates, their blockers, prices and drift.
    Candidates,
    /// The scheduler prepared for speculative solves (prices, pools, bins, classes,
    /// topology counts).
    Prepare,
    Expiration,
    Emptiness,
    Drift,
    MultiNode,
    SingleNode,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Candidates => "candidates",
            Phase::Prepare => "prepare",
            Phase::Expiration => "expiration",
            Phase::Emptiness => "emptiness",
            Phase::Drift => "drift",
            Phase::MultiNode => "multi-node",
            Phase::SingleNode => "single-node",
        }
    }
}

pub fn decide(input: &DisruptionInput<'_>) -> Decision {
    decide_observed(input, &mut |_| {})
}

/// [`decide`], calling `ended` as each [`Phase`] ends (the caller may time them: this
/// code reads no clock).
pub fn decide_observed(input: &DisruptionInput<'_>, ended: &mut dyn FnMut(Phase)) -> Decision {
    let snapshot = input.snapshot;
    let well_known = input.catalog.label_keys();
    let types = Types::new(input.catalog);
    let verdicts = evaluate(snapshot, input.node_pools, input.now, &|k| {
        well_known.contains(k)
    });
    let already: HashSet<&str> = input.disrupting.iter().map(String::as_str).collect();
    let nominated: HashSet<&str> = input.nominated.iter().map(String::as_str).collect();
    let external: HashMap<&str, &str> = input
        .external_drift
        .iter()
        .map(|(n, r)| (n.as_str(), r.as_str()))
        .collect();

    let mut decision = Decision::default();
    let mut budgets = Budgets {
        now: input.now,
        pools: input
            .node_pools
            .iter()
            .map(|p| (p.name.as_str(), (p, 0, 0)))
            .collect(),
    };
    let mut candidates: Vec<Candidate<'_>> = Vec::new();
    for mut verdict in verdicts {
        let node = verdict.node;
        // As Karpenter: only initialized nodes count towards a pool's total (a
        // replacement still starting must not raise a percentage), and those NotReady
        // or being deleted use budget.
        let initialized = node
            .labels
            .get(crate::well_known::LABEL_INITIALIZED)
            .is_some_and(|v| v == "true");
        if let Some(entry) = budgets.pools.get_mut(verdict.pool.name.as_str())
            && initialized
        {
            entry.1 += 1;
            if already.contains(node.name.as_str()) || node.deleting || !node.ready {
                entry.2 += 1;
            }
        }
        if already.contains(node.name.as_str()) || nominated.contains(node.name.as_str()) {
            continue;
        }
        let price = match node_price(input, &types, node) {
            Ok(price) => price,
            Err(problem) => {
                decision.problems.push(problem);
                continue;
            }
        };
        decision.price_per_hour.before += price;
        if verdict.drifted.is_none() {
            let class = input
                .node_classes
                .iter()
                .find(|c| c.name == verdict.pool.node_class_ref.name);
            let ours = Some(super::hash::HASH_VERSION);
            verdict.drifted = super::hash::hash_drift(verdict.pool, class, node, ours, ours)
                .or_else(|| external.get(node.name.as_str()).map(|why| why.to_string()));
        }
        if let Some(why) = zonal_shift(input, node) {
            verdict.blocked = Some(why);
        }
        let spot = node.labels.get(LABEL_CAPACITY_TYPE).map(String::as_str) == Some("spot");
        candidates.push(Candidate {
            verdict,
            price,
            spot,
        });
    }

    // Balanced scores against every priced node of a pool (validation too: the
    // fractions do not change with the nodes being validated).
    let totals = balanced::pool_totals(
        candidates
            .iter()
            .map(|c| (c.pool().name.as_str(), c.price, c.verdict.reschedule_cost)),
    );
    // consolidateAfter on destinations (Karpenter v1.14): a node whose pods changed
    // within its pool's consolidateAfter takes none of consolidation's pods.
    let cooling: Vec<String> = candidates
        .iter()
        .filter(|c| super::rules::cooling_down(c.pool(), c.verdict.last_change, input.now))
        .map(|c| c.name().to_string())
        .collect();
    if let Some(only) = input.validating {
        // Budgets and prices above counted every node; only the commands' are decided.
        let only: HashSet<&str> = only.iter().map(String::as_str).collect();
        candidates.retain(|c| only.contains(c.name()));
    }

    // Nodes being validated are leaving together if they still hold: one command's
    // pods never land on another's node, as when each is validated alone (the others'
    // nodes are then `disrupting`).
    let closed: Vec<String> = input
        .disrupting
        .iter()
        .chain(input.validating.unwrap_or_default())
        .cloned()
        .chain(
            candidates
                .iter()
                .filter(|c| c.verdict.node.deleting)
                .map(|c| c.name().to_string()),
        )
        .chain(in_shifted_zones(input))
        .collect();
    let room = KubeRoom::new(snapshot, closed.iter().map(String::as_str));
    let scheduler_input = SchedulerInput {
        pods: &snapshot.pods,
        nodes: &snapshot.nodes,
        daemonsets: &snapshot.daemonsets,
        node_pools: input.node_pools,
        node_classes: input.node_classes,
        catalog: input.catalog,
        pricing: input.pricing,
        in_flight: input.in_flight,
    };
    ended(Phase::Candidates);
    let mut speculator = Speculator::new(&scheduler_input, closed);
    ended(Phase::Prepare);
    let mut run = Run {
        input,
        types,
        decision,
        budgets,
        taken: HashSet::new(),
        receiving: HashSet::new(),
        totals,
        cooling,
        rejected: BTreeMap::new(),
        room,
    };

    run.expiration(&candidates, &mut speculator);
    ended(Phase::Expiration);
    run.emptiness(&candidates, &mut speculator);
    ended(Phase::Emptiness);
    run.drift(&candidates, &mut speculator);
    ended(Phase::Drift);
    run.multi_node(&candidates, &mut speculator);
    ended(Phase::MultiNode);
    run.single_node(&candidates, &mut speculator);
    ended(Phase::SingleNode);

    let Run {
        mut decision,
        taken,
        mut rejected,
        ..
    } = run;
    for c in &candidates {
        if taken.contains(c.name()) {
            continue;
        }
        let why = c
            .verdict
            .blocked
            .clone()
            .or_else(|| rejected.remove(c.name()));
        let why = why.unwrap_or_else(|| {
            Rejection::new(
                RejectCode::NotCheaper,
                "no cheaper placement of its pods was found",
            )
        });
        decision.rejected.push(RejectedNode {
            node: c.name().to_string(),
            code: why.code,
            reason: why.reason,
        });
    }
    let savings = decision
        .commands
        .iter()
        .fold(0.0, |total, c| total + c.savings_per_hour);
    decision.price_per_hour.after = round(decision.price_per_hour.before - savings);
    decision.price_per_hour.before = round(decision.price_per_hour.before);
    decision
}

struct Run<'i, 'a> {
    input: &'i DisruptionInput<'a>,
    types: Types<'a>,
    decision: Decision,
    budgets: Budgets<'a>,
    /// Nodes in a command.
    taken: HashSet<String>,
    /// Nodes a command moves pods to.
    receiving: HashSet<String>,
    /// The latest reason a method left each node alone.
    rejected: BTreeMap<String, Rejection>,
    /// Room on the nodes as kube-scheduler will find it once the commands so far ran.
    room: KubeRoom<'a>,
    /// Each NodePool's cost and disruption cost, for Balanced scoring.
    totals: HashMap<String, PoolTotals>,
    /// Nodes within their pool's consolidateAfter of their last pod change: no
    /// consolidation moves pods onto them ([`super::rules::cooling_down`]).
    cooling: Vec<String>,
}

impl Run<'_, '_> {
    fn reject(&mut self, node: &str, why: Rejection) {
        self.rejected.insert(node.to_string(), why);
    }

    /// The Balanced scores of a move taking `set` and saving `savings` per hour: whether
    /// every Balanced pool approves it, and their scores.
    fn balanced_scores(
        &self,
        set: &[&Candidate<'_>],
        savings: f64,
    ) -> (bool, Vec<balanced::Score>) {
        let sources: Vec<Source<'_>> = set.iter().map(|c| source(c)).collect();
        balanced::evaluate(&sources, savings, &self.totals)
    }

    /// Records a command for `nodes`, and makes its placement permanent.
    fn take(
        &mut self,
        speculator: &mut Speculator<'_>,
        method: Method,
        reason: Reason,
        nodes: &[&Candidate<'_>],
        mut placement: Placement,
    ) {
        let names: Vec<&str> = nodes.iter().map(|c| c.name()).collect();
        speculator.name_pods(&mut placement);
        speculator.commit(&names, &placement);
        if matches!(method, Method::MultiNode | Method::SingleNode)
            && placement.new_claims.is_empty()
        {
            // A consolidation's deletion was taken because its pods find room as
            // kube-scheduler binds them: they count there — in the room later commands
            // of this decision see, and in the command's record — not where they were
            // packed, or a later command counts on room kube-scheduler has already given
            // away and its pods go pending.
            let moving: Vec<&Pod> = nodes
                .iter()
                .flat_map(|c| c.verdict.moving.iter().copied())
                .collect();
            if let Some(moves) = self.room.moves(&names, &moving) {
                placement.moves = moves;
            }
        }
        // A node that receives pods is not disrupted in the same decision: those pods
        // would move twice, and the node has just changed (consolidateAfter restarts).
        for m in &placement.moves {
            if self.receiving.insert(m.target.clone()) {
                self.reject(
                    &m.target,
                    Rejection::new(
                        RejectCode::ConsolidateAfter,
                        format!(
                            "it receives pods from {} in this decision (command {})",
                            names.join(", "),
                            self.decision.commands.len() + 1
                        ),
                    ),
                );
            }
        }
        let mut per_pool: HashMap<&str, usize> = HashMap::new();
        for c in nodes {
            *per_pool.entry(c.pool().name.as_str()).or_default() += 1;
            self.taken.insert(c.name().to_string());
            self.rejected.remove(c.name());
        }
        for (pool, n) in per_pool {
            self.budgets.take(pool, n);
        }
        self.room.take(names.iter().copied(), &placement.moves);
        let before = nodes.iter().fold(0.0, |t, c| t + c.price);
        let after = placement.new_claims_price();
        let scores = if matches!(method, Method::MultiNode | Method::SingleNode) {
            self.balanced_scores(nodes, before - after).1
        } else {
            Vec::new()
        };
        let drifted = if reason == Reason::Drifted {
            nodes
                .iter()
                .filter_map(|c| {
                    Some(DriftedNode {
                        node: c.name().to_string(),
                        reason: c.verdict.drifted.clone()?,
                    })
                })
                .collect()
        } else {
            Vec::new()
        };
        self.decision.commands.push(Command {
            method,
            reason,
            drifted,
            nodes: names.iter().map(|n| n.to_string()).collect(),
            moves: placement.moves,
            replacements: placement.new_claims,
            price_per_hour_before: round(before),
            price_per_hour_after: round(after),
            savings_per_hour: round(before - after),
            scores,
        });
    }

    fn open(&self, c: &Candidate<'_>) -> bool {
        !self.taken.contains(c.name()) && !self.receiving.contains(c.name())
    }

    fn expiration(&mut self, candidates: &[Candidate<'_>], speculator: &mut Speculator<'_>) {
        // Every expired node goes: none is a destination for another's pods.
        speculator.close(
            candidates
                .iter()
                .filter(|c| c.verdict.expired)
                .map(|c| c.name().to_string()),
        );
        for c in candidates
            .iter()
            .filter(|c| c.verdict.expired && !c.verdict.node.deleting)
        {
            // Forceful: pods that fit nowhere go pending; the node goes anyway.
            let placement = speculator
                .solve(&[c.name()], &[], Limits::default())
                .unwrap_or_default();
            self.take(
                speculator,
                Method::Expiration,
                Reason::Expired,
                &[c],
                placement,
            );
        }
    }

    /// Budget room for `reason` in the candidate's pool, or records why not.
    fn within_budget(&mut self, c: &Candidate<'_>, reason: Reason) -> bool {
        match self.budgets.room(&c.pool().name, reason) {
            Ok(_) => true,
            Err(why) => {
                self.reject(c.name(), why);
                false
            }
        }
    }

    fn emptiness(&mut self, candidates: &[Candidate<'_>], speculator: &mut Speculator<'_>) {
        let mut empty: Vec<&Candidate<'_>> = Vec::new();
        let mut room: HashMap<&str, usize> = HashMap::new();
        // Where a budget lets only some go, the most expensive go first (Karpenter's
        // savings ratio: an empty node's price over the base disruption cost of 1).
        let mut in_order: Vec<&Candidate<'_>> = candidates.iter().collect();
        in_order.sort_by(|a, b| by_savings_ratio(a, b));
        for c in in_order {
            if !self.open(c) {
                continue;
            }
            if c.verdict.blocked.is_some() || !c.verdict.empty() {
                continue;
            }
            if let Err(why) = consolidatable(c.pool(), true, c.verdict.last_change, self.input.now)
            {
                self.reject(c.name(), why);
                continue;
            }
            let pool = c.pool().name.as_str();
            let left = match room.get(pool) {
                Some(&left) => left,
                None => match self.budgets.room(pool, Reason::Empty) {
                    Ok(left) => left,
                    Err(why) => {
                        self.reject(c.name(), why);
                        room.insert(pool, 0);
                        continue;
                    }
                },
            };
            if left == 0 {
                let why = self.budgets.room(pool, Reason::Empty).err().unwrap_or_else(|| {
                    Rejection::new(
                        RejectCode::DisruptionBudget,
                        format!("NodePool \"{pool}\" budget for Empty is used by this run's other empty nodes"),
                    )
                });
                self.reject(c.name(), why);
                continue;
            }
            room.insert(pool, left - 1);
            empty.push(c);
        }
        if !empty.is_empty() {
            // Nothing moves; the solve only takes the nodes out of later solves.
            let names: Vec<&str> = empty.iter().map(|c| c.name()).collect();
            let placement = speculator
                .solve(&names, &[], Limits::default())
                .unwrap_or_default();
            self.take(
                speculator,
                Method::Emptiness,
                Reason::Empty,
                &empty,
                placement,
            );
        }
    }

    fn drift(&mut self, candidates: &[Candidate<'_>], speculator: &mut Speculator<'_>) {
        for c in candidates {
            if !self.open(c) {
                continue;
            }
            if c.verdict.drifted.is_none() || !drift_may_take(c) {
                continue;
            }
            if !self.within_budget(c, Reason::Drifted) {
                continue;
            }
            match speculator.solve(&[c.name()], &[], Limits::default()) {
                Ok(placement) => {
                    self.take(speculator, Method::Drift, Reason::Drifted, &[c], placement)
                }
                Err(stop) => {
                    let why = stop_rejection(&stop, c);
                    self.reject(c.name(), why);
                }
            }
        }
    }

    /// Candidates consolidation may take, the best savings per unit of disruption
    /// first ([`by_savings_ratio`]).
    fn consolidation_candidates<'c, 'a>(
        &mut self,
        candidates: &'c [Candidate<'a>],
    ) -> Vec<&'c Candidate<'a>> {
        let mut out = Vec::new();
        for c in candidates {
            if !self.open(c) {
                continue;
            }
            if c.verdict.blocked.is_some() {
                continue;
            }
            if let Some(why) = buffer_room_only(c) {
                self.reject(c.name(), why);
                continue;
            }
            if let Err(why) = consolidatable(
                c.pool(),
                c.verdict.empty(),
                c.verdict.last_change,
                self.input.now,
            ) {
                let keep_drift = self
                    .rejected
                    .get(c.name())
                    .is_some_and(|r| c.verdict.drifted.is_some() && r.code != why.code);
                if !keep_drift {
                    self.reject(c.name(), why);
                }
                continue;
            }
            out.push(c);
        }
        out.sort_by(|a, b| by_savings_ratio(a, b));
        out
    }

    /// Tries to consolidate `set` away; the command's placement if it holds.
    fn try_consolidate(
        &self,
        set: &[&Candidate<'_>],
        excluded: &[&str],
        speculator: &Speculator<'_>,
    ) -> Result<Placement, Rejection> {
        let names: Vec<&str> = set.iter().map(|c| c.name()).collect();
        let price: f64 = set.iter().fold(0.0, |t, c| t + c.price);
        let all_spot = set.iter().all(|c| c.spot);
        let spot_to_spot = all_spot && self.input.spot_to_spot && set.len() == 1;
        let limits = Limits {
            // Without spot-to-spot, spot nodes only go when their pods fit elsewhere:
            // an on-demand replacement never costs less than the spot node.
            max_new_claims: if all_spot && !spot_to_spot {
                Some(0)
            } else {
                None
            },
            max_price: Some(price),
        };
        let mut not_destinations = excluded.to_vec();
        not_destinations.extend(self.cooling.iter().map(String::as_str));
        let excluded = not_destinations.as_slice();
        let mut placement = speculator.solve(&names, excluded, limits).map_err(|stop| match stop {
            Stop::TooManyClaims if all_spot => Rejection::new(
                RejectCode::SpotToSpot,
                if self.input.spot_to_spot {
                    "spot-to-spot consolidation replaces one node at a time; these pods need new capacity".to_string()
                } else {
                    // Neutral: the functions log it (the stack's `SpotToSpot`), the CLI
                    // prints it (`--spot-to-spot`); each names its own switch.
                    "its pods need new capacity and spot-to-spot consolidation is off".to_string()
                },
            ),
            other => stop_rejection(&other, set[0]),
        })?;
        if spot_to_spot && !placement.new_claims.is_empty() {
            spot_replacement(&mut placement, price, self.input, &self.types)?;
        } else {
            pin_reserved(&mut placement.new_claims);
            cheaper_options_only(&mut placement.new_claims, price, self.input, &self.types)?;
        }
        if set.len() > 1 {
            no_type_of_their_own(&mut placement.new_claims, set, self.input, &self.types)?;
        }
        if placement.new_claims_price() >= price {
            return Err(Rejection::new(
                RejectCode::NotCheaper,
                format!(
                    "its pods need ${:.4}/hour of new capacity, not less than its ${price:.4}/hour",
                    placement.new_claims_price()
                ),
            ));
        }
        if placement.new_claims.is_empty() {
            // A deletion: its pods must also find room as kube-scheduler binds them,
            // or one goes pending and is launched for, again and again (see kube_fit).
            let moving: Vec<&Pod> = set
                .iter()
                .flat_map(|c| c.verdict.moving.iter().copied())
                .collect();
            if let Some(pod) = self.room.first_left_pending(&names, &moving) {
                return Err(Rejection::new(
                    RejectCode::PodsDoNotFit,
                    format!(
                        "pod {} fits only as packed: kube-scheduler, binding the moving pods to the least allocated nodes, would leave it pending",
                        pod.key()
                    ),
                ));
            }
        }
        let (approved, scores) = self.balanced_scores(set, price - placement.new_claims_price());
        if !approved {
            let why = scores
                .iter()
                .filter(|s| !s.approved)
                .map(balanced::Score::sentence)
                .collect::<Vec<_>>()
                .join("; ");
            return Err(Rejection::new(RejectCode::Balanced, why));
        }
        Ok(placement)
    }

    /// Multi-node consolidation in windows of at most [`MULTI_NODE_MAX_CANDIDATES`]:
    /// the longest valid prefix of the window is taken, then the next window of the
    /// candidates left, until a window has no valid prefix of two or more.
    fn multi_node(&mut self, candidates: &[Candidate<'_>], speculator: &mut Speculator<'_>) {
        loop {
            let mut room: HashMap<&str, usize> = HashMap::new();
            let mut set: Vec<&Candidate<'_>> = Vec::new();
            // Where each of `set` is in `all`.
            let mut at: Vec<usize> = Vec::new();
            let all = self.consolidation_candidates(candidates);
            for (i, &c) in all.iter().enumerate() {
                let pool = c.pool().name.as_str();
                let left = *room
                    .entry(pool)
                    .or_insert_with(|| self.budgets.room(pool, Reason::Underutilized).unwrap_or(0));
                if left == 0 {
                    let why = self
                        .budgets
                        .room(pool, Reason::Underutilized)
                        .err()
                        .unwrap_or_else(|| {
                            Rejection::new(
                                RejectCode::DisruptionBudget,
                                format!("NodePool \"{pool}\" budget for Underutilized is used by this window's other nodes"),
                            )
                        });
                    self.reject(c.name(), why);
                    continue;
                }
                room.insert(pool, left - 1);
                set.push(c);
                at.push(i);
                if set.len() == MULTI_NODE_MAX_CANDIDATES {
                    break;
                }
            }
            if set.len() < 2 {
                return;
            }
            // The longest valid prefix, longest first. Not by binary search, as
            // Karpenter: validity is not monotone in the prefix (prices are steps, so
            // three nodes can be worth merging onto one larger type when no two of them
            // are), and a binary search stops at the first invalid midpoint it meets.
            // The usual window is valid whole, so this is one solve, not seven.
            //
            // The other candidates take none of the prefix's pods: a node that
            // received pods could not go in this decision (they would move twice), so
            // the prefix's pods go to new claims and nodes that are no candidates, and
            // the next window still has every other candidate to work with.
            let mut best: Option<(usize, Placement)> = None;
            for n in (2..=set.len()).rev() {
                let excluded = all_but(&all, &at[..n]);
                if let Ok(placement) = self.try_consolidate(&set[..n], &excluded, speculator) {
                    best = Some((n, placement));
                    break;
                }
            }
            let Some((n, placement)) = best else {
                return;
            };
            let nodes: Vec<&Candidate<'_>> = set[..n].to_vec();
            self.take(
                speculator,
                Method::MultiNode,
                Reason::Underutilized,
                &nodes,
                placement,
            );
        }
    }

    fn single_node(&mut self, candidates: &[Candidate<'_>], speculator: &mut Speculator<'_>) {
        for c in self.consolidation_candidates(candidates) {
            if !self.within_budget(c, Reason::Underutilized) {
                continue;
            }
            // Balanced: when even deleting the node outright would score too low, no
            // move of it can pass (Karpenter's CanPassThreshold).
            if let Err(best) = balanced::can_pass(source(c), &self.totals) {
                let why = format!("even deleting it: {}", best.sentence());
                self.reject(c.name(), Rejection::new(RejectCode::Balanced, why));
                continue;
            }
            match self.try_consolidate(&[c], &[], speculator) {
                Ok(placement) => self.take(
                    speculator,
                    Method::SingleNode,
                    Reason::Underutilized,
                    &[c],
                    placement,
                ),
                Err(why) => self.reject(c.name(), why),
            }
        }
    }
}

/// The names of `all` but those at positions `taken`: with thousands of candidates and
/// a window of 100, matching names against the window for each solve was measurable.
fn all_but<'c>(all: &[&'c Candidate<'_>], taken: &[usize]) -> Vec<&'c str> {
    let mut out = vec![true; all.len()];
    for &i in taken {
        out[i] = false;
    }
    all.iter()
        .zip(out)
        .filter(|&(_, keep)| keep)
        .map(|(c, _)| c.name())
        .collect()
}

/// Why a node in a zone under an ARC zonal shift is in no voluntary command (Karpenter's
/// zonal shift design: no voluntary disruption in the impaired zone while the shift
/// lasts; expiration, which is forceful, still replaces it elsewhere).
fn zonal_shift(input: &DisruptionInput<'_>, node: &crate::cluster::Node) -> Option<Rejection> {
    if input.pricing.shifted_zones.is_empty() {
        return None;
    }
    let zone = node.labels.get(LABEL_ZONE)?;
    input.pricing.is_shifted(zone).then(|| {
        Rejection::new(
            RejectCode::ZonalShift,
            format!(
                "zone {zone} is under an ARC zonal shift: its nodes are not disrupted voluntarily, and take no moved pods, until the shift ends"
            ),
        )
    })
}

/// The nodes in zones under a zonal shift: no destination for moved pods, as the zone
/// gets no launch either.
fn in_shifted_zones<'i>(input: &'i DisruptionInput<'_>) -> impl Iterator<Item = String> + 'i {
    input
        .snapshot
        .nodes
        .iter()
        .filter(|n| {
            !input.pricing.shifted_zones.is_empty()
                && n.labels
                    .get(LABEL_ZONE)
                    .is_some_and(|z| input.pricing.is_shifted(z))
        })
        .map(|n| n.name.clone())
}

/// Drift is eventual disruption: with a terminationGracePeriod on the NodePool the
/// drain ends by then anyway, so a pod's do-not-disrupt or PodDisruptionBudget does not
/// keep the node from being a drift candidate (Karpenter's
/// `IgnorePodBlockEvictionError` for the eventual class). The node's own blockers do.
fn drift_may_take(c: &Candidate<'_>) -> bool {
    let Some(blocked) = &c.verdict.blocked else {
        return true;
    };
    let pod_level = match blocked.code {
        RejectCode::PodDisruptionBudget => true,
        RejectCode::DoNotDisrupt => !c.verdict.node.do_not_disrupt,
        _ => false,
    };
    pod_level && c.pool().termination_grace_period.is_some()
}

/// Karpenter's candidate order (v1.15 `sortCandidates`): the highest savings ratio
/// first, the node's price over its reschedule disruption cost (1 for the node, plus
/// each moving pod's eviction cost as `controller.kubernetes.io/pod-deletion-cost` and
/// priority set it, [`super::candidates::reschedule_cost`]). A node's age no longer
/// counts. Ties go by name, so a decision is the same on every run.
/// Why a node that holds only CapacityBuffers' room is no consolidation candidate (as
/// Karpenter: it has no pod to reschedule, and it is not empty); `None` for any other.
fn buffer_room_only(c: &Candidate<'_>) -> Option<Rejection> {
    let moving = &c.verdict.moving;
    let first = moving.first()?.capacity_buffer.as_deref()?;
    if !moving.iter().all(|p| p.capacity_buffer.is_some()) {
        return None;
    }
    let mut buffers: Vec<&str> = moving
        .iter()
        .filter_map(|p| p.capacity_buffer.as_deref())
        .collect();
    buffers.sort_unstable();
    buffers.dedup();
    let named = if buffers.len() == 1 {
        format!("CapacityBuffer {first}")
    } else {
        format!("CapacityBuffers {}", buffers.join(", "))
    };
    Some(Rejection::new(
        RejectCode::CapacityBuffer,
        format!(
            "the node holds only {named}'s room ({} virtual pods): it is kept for pods not created yet",
            moving.len()
        ),
    ))
}

fn by_savings_ratio(a: &Candidate<'_>, b: &Candidate<'_>) -> std::cmp::Ordering {
    savings_ratio(b)
        .total_cmp(&savings_ratio(a))
        .then(a.name().cmp(b.name()))
}

fn savings_ratio(c: &Candidate<'_>) -> f64 {
    c.price / c.verdict.reschedule_cost.max(1.0)
}

/// A candidate as Balanced scoring sees it.
fn source<'c>(c: &'c Candidate<'_>) -> Source<'c> {
    Source {
        pool: c.pool(),
        price: c.price,
        disruption_cost: c.verdict.reschedule_cost,
    }
}

fn stop_rejection(stop: &Stop, c: &Candidate<'_>) -> Rejection {
    match stop {
        Stop::PodDoesNotFit { pod, reason } => Rejection::new(
            RejectCode::PodsDoNotFit,
            format!("pod {pod} fits nowhere else: {reason}"),
        ),
        Stop::TooManyClaims => Rejection::new(
            RejectCode::PodsDoNotFit,
            "its pods need more new capacity than allowed",
        ),
        Stop::TooExpensive => Rejection::new(
            RejectCode::NotCheaper,
            format!(
                "no placement of its pods costs less than its ${:.4}/hour",
                c.price
            ),
        ),
    }
}

/// The node's hourly price: its type, zone and capacity type from its labels.
fn node_price(
    input: &DisruptionInput<'_>,
    types: &Types<'_>,
    node: &crate::cluster::Node,
) -> Result<f64, String> {
    let label = |key: &str| node.labels.get(key).map(String::as_str);
    let Some(type_name) = label(LABEL_INSTANCE_TYPE) else {
        return Err(format!(
            "node {}: metadata.labels[{LABEL_INSTANCE_TYPE}] is missing: cannot price it",
            node.name
        ));
    };
    let Some(it) = types.get(type_name) else {
        return Err(format!(
            "node {}: metadata.labels[{LABEL_INSTANCE_TYPE}]: instance type \"{type_name}\" is not in the catalog",
            node.name
        ));
    };
    let capacity = match label(LABEL_CAPACITY_TYPE) {
        None => CapacityType::OnDemand,
        Some(v) => CapacityType::parse(v).ok_or_else(|| {
            format!(
                "node {}: metadata.labels[{LABEL_CAPACITY_TYPE}]: \"{v}\" is not on-demand, spot or reserved",
                node.name
            )
        })?,
    };
    let zone = label(LABEL_ZONE).unwrap_or_default();
    let od = it.on_demand_price.ok_or_else(|| {
        format!(
            "node {}: instance type \"{type_name}\" has no price in the catalog",
            node.name
        )
    })?;
    // A node runs whether or not its offering is still sold (out of capacity, or its
    // zone shifted away from): price it as it runs, with its pool's NodeOverlays. A
    // node in a capacity reservation is already paid for: the reserved price, whether
    // or not the reservation has room left (it may be full because of this very node).
    let base = match capacity {
        CapacityType::Reserved => od / crate::catalog::RESERVED_PRICE_DIVISOR,
        _ => input
            .pricing
            .running_price(it, zone, capacity)
            .unwrap_or(od),
    };
    let pool = label(crate::well_known::LABEL_NODEPOOL).unwrap_or_default();
    Ok(input
        .pricing
        .overlays
        .price(pool, type_name, zone, capacity, base))
}

fn round(v: f64) -> f64 {
    (v * 1e6).round() / 1e6
}

#[cfg(test)]
mod tests;
