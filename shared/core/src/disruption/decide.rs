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
//!    claims costing strictly less (Karpenter allows at most one; M → N here);
//! 5. single-node consolidation — every remaining candidate, one by one, with no time
//!    limit: deleted when its pods fit elsewhere, replaced when a cheaper set of claims
//!    takes them.
//!
//! Spot candidates are only replaced by spot capacity with `spot_to_spot`, one node at
//! a time, and when at least 15 cheaper spot types fit (the launch keeps the 15
//! cheapest), as Karpenter's SpotToSpotConsolidation.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::api::model::NodePool;
use crate::catalog::{
    CapacityType, Catalog, InstanceType, LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_ZONE,
};
use crate::provisioning::PlannedNodeClaim;
use crate::scheduling::SchedulerInput;
use crate::scheduling::fast_hash::FastMap;

use super::budget::allowance;
use super::candidates::{NodeVerdict, evaluate};
use super::command::{Command, Decision, DisruptionInput, Method, RejectedNode};
use super::rules::consolidatable;
use super::speculate::{Limits, Placement, Speculator, Stop};
use super::{Reason, RejectCode, Rejection};

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
            .get(super::candidates::LABEL_INITIALIZED)
            .is_some_and(|v| v == "true");
        if let Some(entry) = budgets.pools.get_mut(verdict.pool.name.as_str())
            && initialized
        {
            entry.1 += 1;
            if already.contains(node.name.as_str()) || node.deleting || !node.ready {
                entry.2 += 1;
            }
        }
        if already.contains(node.name.as_str()) {
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
        let spot = node.labels.get(LABEL_CAPACITY_TYPE).map(String::as_str) == Some("spot");
        candidates.push(Candidate {
            verdict,
            price,
            spot,
        });
    }

    if let Some(only) = input.validating {
        // Budgets and prices above counted every node; only the command's are decided.
        candidates.retain(|c| only.iter().any(|n| n == c.name()));
    }

    let closed = input.disrupting.iter().cloned().chain(
        candidates
            .iter()
            .filter(|c| c.verdict.node.deleting)
            .map(|c| c.name().to_string()),
    );
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
    let mut world = Speculator::new(&scheduler_input, closed);
    ended(Phase::Prepare);
    let mut run = Run {
        input,
        types,
        decision,
        budgets,
        taken: HashSet::new(),
        receiving: HashSet::new(),
        rejected: BTreeMap::new(),
    };

    run.expiration(&candidates, &mut world);
    ended(Phase::Expiration);
    run.emptiness(&candidates, &mut world);
    ended(Phase::Emptiness);
    run.drift(&candidates, &mut world);
    ended(Phase::Drift);
    run.multi_node(&candidates, &mut world);
    ended(Phase::MultiNode);
    run.single_node(&candidates, &mut world);
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
}

impl Run<'_, '_> {
    fn reject(&mut self, node: &str, why: Rejection) {
        self.rejected.insert(node.to_string(), why);
    }

    /// Records a command for `nodes`, and makes its placement permanent.
    fn take(
        &mut self,
        world: &mut Speculator<'_>,
        method: Method,
        reason: Reason,
        nodes: &[&Candidate<'_>],
        mut placement: Placement,
    ) {
        let names: Vec<&str> = nodes.iter().map(|c| c.name()).collect();
        world.name_pods(&mut placement);
        world.commit(&names, &placement, self.decision.commands.len() + 1);
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
        let before = nodes.iter().fold(0.0, |t, c| t + c.price);
        let after = placement.new_claims_price();
        self.decision.commands.push(Command {
            method,
            reason,
            nodes: names.iter().map(|n| n.to_string()).collect(),
            moves: placement.moves,
            replacements: placement.new_claims,
            price_per_hour_before: round(before),
            price_per_hour_after: round(after),
            savings_per_hour: round(before - after),
        });
    }

    fn open(&self, c: &Candidate<'_>) -> bool {
        !self.taken.contains(c.name()) && !self.receiving.contains(c.name())
    }

    fn expiration(&mut self, candidates: &[Candidate<'_>], world: &mut Speculator<'_>) {
        // Every expired node goes: none is a destination for another's pods.
        world.close(
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
            let placement = world
                .solve(&[c.name()], &[], Limits::default())
                .unwrap_or_default();
            self.take(world, Method::Expiration, Reason::Expired, &[c], placement);
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

    fn emptiness(&mut self, candidates: &[Candidate<'_>], world: &mut Speculator<'_>) {
        let mut empty: Vec<&Candidate<'_>> = Vec::new();
        let mut room: HashMap<&str, usize> = HashMap::new();
        for c in candidates {
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
            let placement = world
                .solve(&names, &[], Limits::default())
                .unwrap_or_default();
            self.take(world, Method::Emptiness, Reason::Empty, &empty, placement);
        }
    }

    fn drift(&mut self, candidates: &[Candidate<'_>], world: &mut Speculator<'_>) {
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
            match world.solve(&[c.name()], &[], Limits::default()) {
                Ok(placement) => self.take(world, Method::Drift, Reason::Drifted, &[c], placement),
                Err(stop) => {
                    let why = stop_rejection(&stop, c);
                    self.reject(c.name(), why);
                }
            }
        }
    }

    /// Candidates consolidation may take, cheapest to disrupt first (fewest pods,
    /// then the most expensive: Karpenter's disruption cost order, simplified).
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
        let now = self.input.now;
        out.sort_by(|a, b| {
            disruption_cost(a, now)
                .total_cmp(&disruption_cost(b, now))
                .then(b.price.total_cmp(&a.price))
                .then(a.name().cmp(b.name()))
        });
        out
    }

    /// Tries to consolidate `set` away; the command's placement if it holds.
    fn try_consolidate(
        &self,
        set: &[&Candidate<'_>],
        excluded: &[&str],
        world: &Speculator<'_>,
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
        let mut placement = world.solve(&names, excluded, limits).map_err(|stop| match stop {
            Stop::TooManyClaims if all_spot => Rejection::new(
                RejectCode::SpotToSpot,
                if self.input.spot_to_spot {
                    "spot-to-spot consolidation replaces one node at a time; these pods need new capacity".to_string()
                } else {
                    "its pods need new capacity and spot-to-spot consolidation is off (--spot-to-spot)".to_string()
                },
            ),
            other => stop_rejection(&other, set[0]),
        })?;
        if spot_to_spot && !placement.new_claims.is_empty() {
            spot_replacement(&mut placement, price, self.input, &self.types)?;
        } else {
            cheaper_options_only(&mut placement.new_claims, price, self.input, &self.types);
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
        Ok(placement)
    }

    /// Multi-node consolidation in windows of at most [`MULTI_NODE_MAX_CANDIDATES`]:
    /// the longest valid prefix of the window is taken, then the next window of the
    /// candidates left, until a window has no valid prefix of two or more.
    fn multi_node(&mut self, candidates: &[Candidate<'_>], world: &mut Speculator<'_>) {
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
            // The longest valid prefix, by binary search as Karpenter (validity is not
            // strictly monotone in the prefix, so this finds a good one, not always
            // the longest).
            //
            // The other candidates take none of the prefix's pods: a node that
            // received pods could not go in this decision (they would move twice), so
            // the prefix's pods go to new claims and nodes that are no candidates, and
            // the next window still has every other candidate to work with.
            let (mut lo, mut hi) = (2usize, set.len());
            let mut best: Option<(usize, Placement)> = None;
            if self.input.validating.is_some() {
                // A command under validation holds as the set it was decided as, or
                // not at all: try that set before any prefix of it.
                let excluded = all_but(&all, &at);
                if let Ok(placement) = self.try_consolidate(&set, &excluded, world) {
                    lo = hi + 1;
                    best = Some((set.len(), placement));
                }
            }
            while lo <= hi {
                let mid = (lo + hi) / 2;
                let excluded = all_but(&all, &at[..mid]);
                match self.try_consolidate(&set[..mid], &excluded, world) {
                    Ok(placement) => {
                        best = Some((mid, placement));
                        lo = mid + 1;
                    }
                    Err(_) => hi = mid - 1,
                }
            }
            let Some((n, placement)) = best else {
                return;
            };
            let nodes: Vec<&Candidate<'_>> = set[..n].to_vec();
            self.take(
                world,
                Method::MultiNode,
                Reason::Underutilized,
                &nodes,
                placement,
            );
        }
    }

    fn single_node(&mut self, candidates: &[Candidate<'_>], world: &mut Speculator<'_>) {
        for c in self.consolidation_candidates(candidates) {
            if !self.within_budget(c, Reason::Underutilized) {
                continue;
            }
            match self.try_consolidate(&[c], &[], world) {
                Ok(placement) => self.take(
                    world,
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

/// Karpenter's disruption cost, without pod priority and deletion cost (not read from
/// the snapshot): each pod that would move costs 1, scaled by the fraction of the
/// node's lifetime left before it expires (a node near expiry is cheap to disrupt).
fn disruption_cost(c: &Candidate<'_>, now: i64) -> f64 {
    let pods = c.verdict.moving.len() as f64;
    let lifetime = match (c.pool().expire_after, c.verdict.node.created_at) {
        (Some(after), Some(created)) if after.as_secs() > 0 => {
            let total = after.as_secs_f64();
            ((total - (now - created) as f64) / total).clamp(0.0, 1.0)
        }
        _ => 1.0,
    };
    pods * lifetime
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

/// Keeps, for each replacement, only the options that still make the command cheaper
/// with the other replacements at their cheapest (Karpenter filters the replacement's
/// types to those cheaper than the candidates).
fn cheaper_options_only(
    claims: &mut [PlannedNodeClaim],
    cap: f64,
    input: &DisruptionInput<'_>,
    types: &Types<'_>,
) {
    let total = claims.iter().fold(0.0, |t, c| t + c.price_per_hour);
    for claim in claims.iter_mut() {
        let room = cap - (total - claim.price_per_hour);
        let kept: Vec<String> = claim
            .instance_type_options
            .iter()
            .filter(|name| cheapest_offering(input, types, name, claim).is_some_and(|p| p < room))
            .cloned()
            .collect();
        claim.instance_type_options = kept;
        if claim.instance_type_options.is_empty() {
            claim
                .instance_type_options
                .push(claim.instance_type.clone());
        }
    }
}

/// Several nodes replaced by a claim that may launch as one of their own types, at no
/// less than that node costs, are no better than keeping that node and deleting the
/// others (which moves fewer pods): such options go (Karpenter's
/// `filterOutSameInstanceType`), and a claim left with none rejects the command —
/// single-node consolidation then deletes nodes instead. Two m5.xlarge with a pod each
/// become one of them, not a new m5.xlarge.
fn no_type_of_their_own(
    claims: &mut [PlannedNodeClaim],
    set: &[&Candidate<'_>],
    input: &DisruptionInput<'_>,
    types: &Types<'_>,
) -> Result<(), Rejection> {
    let mut own: HashMap<&str, f64> = HashMap::new();
    for c in set {
        if let Some(t) = c.verdict.node.labels.get(LABEL_INSTANCE_TYPE) {
            let p = own.entry(t.as_str()).or_insert(c.price);
            *p = p.min(c.price);
        }
    }
    for claim in claims.iter_mut() {
        let cap = claim
            .instance_type_options
            .iter()
            .filter_map(|t| own.get(t.as_str()).copied())
            .fold(f64::INFINITY, f64::min);
        if cap.is_infinite() {
            continue;
        }
        let kept: Vec<(String, f64)> = claim
            .instance_type_options
            .iter()
            .filter_map(|name| {
                let p = cheapest_offering(input, types, name, claim)?;
                (p < cap).then(|| (name.clone(), p))
            })
            .collect();
        let Some(cheapest) = kept.iter().min_by(|a, b| a.1.total_cmp(&b.1)).cloned() else {
            return Err(Rejection::new(
                RejectCode::NotCheaper,
                format!(
                    "their pods need a {}, which one of them already is: keeping it costs no more",
                    claim.instance_type
                ),
            ));
        };
        claim.instance_type_options = kept.into_iter().map(|(name, _)| name).collect();
        if !claim.instance_type_options.contains(&claim.instance_type) {
            (claim.instance_type, claim.price_per_hour) = cheapest;
        }
    }
    Ok(())
}

/// The price the claim's offerings give type `name` (its cheapest allowed zone and
/// capacity type).
fn cheapest_offering(
    input: &DisruptionInput<'_>,
    types: &Types<'_>,
    name: &str,
    claim: &PlannedNodeClaim,
) -> Option<f64> {
    let it = types.get(name)?;
    let mut best: Option<f64> = None;
    for zone in &claim.zones {
        for ct in &claim.capacity_types {
            let Some(ct) = CapacityType::parse(ct) else {
                continue;
            };
            if let Some(p) = input.pricing.price(it, zone, ct) {
                best = Some(best.map_or(p, |b: f64| b.min(p)));
            }
        }
    }
    best
}

/// Spot-to-spot: the one replacement must be spot, with at least 15 spot types
/// cheaper than the node; it launches with the 15 cheapest.
fn spot_replacement(
    placement: &mut Placement,
    price: f64,
    input: &DisruptionInput<'_>,
    types: &Types<'_>,
) -> Result<(), Rejection> {
    let [claim] = placement.new_claims.as_mut_slice() else {
        return Err(Rejection::new(
            RejectCode::SpotToSpot,
            "spot-to-spot consolidation replaces a node by one node",
        ));
    };
    if !claim.capacity_types.iter().any(|c| c == "spot") {
        return Err(Rejection::new(
            RejectCode::SpotToSpot,
            "the replacement cannot be spot",
        ));
    }
    // Options are cheapest first at their cheapest offering; the replacement's spot
    // price is what counts, so keep those whose spot offering is cheaper.
    let mut cheaper: Vec<(f64, String)> = claim
        .instance_type_options
        .iter()
        .filter_map(|name| {
            let it = types.get(name)?;
            let spot = claim
                .zones
                .iter()
                .filter_map(|z| input.pricing.price(it, z, CapacityType::Spot))
                .min_by(f64::total_cmp)?;
            (spot < price).then(|| (spot, name.clone()))
        })
        .collect();
    cheaper.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    if cheaper.len() < SPOT_TO_SPOT_MIN_TYPES {
        return Err(Rejection::new(
            RejectCode::SpotToSpot,
            format!(
                "spot-to-spot needs {SPOT_TO_SPOT_MIN_TYPES} cheaper spot instance types, {} fit",
                cheaper.len()
            ),
        ));
    }
    claim.price_per_hour = cheaper[0].0;
    claim.instance_type_options = cheaper
        .into_iter()
        .take(SPOT_TO_SPOT_MIN_TYPES)
        .map(|(_, name)| name)
        .collect();
    claim.instance_type = claim.instance_type_options[0].clone();
    claim.capacity_type = "spot".into();
    claim.capacity_types = vec!["spot".into()];
    Ok(())
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
                "node {}: metadata.labels[{LABEL_CAPACITY_TYPE}]: \"{v}\" is neither on-demand nor spot",
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
    // A node runs whether or not its offering is still sold: price it as sold.
    Ok(input.pricing.price(it, zone, capacity).unwrap_or(od))
}

fn round(v: f64) -> f64 {
    (v * 1e6).round() / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::model::{Budget, BudgetNodes};
    use crate::catalog::{Catalog, Pricing};
    use crate::cluster::{ClusterSnapshot, Node, Pod};
    use crate::disruption::candidates::LABEL_INITIALIZED;
    use crate::testing::{general_purpose_pool, node, pod};

    const NOW: i64 = 2_000_000_000;

    fn managed(name: &str, instance_type: &str) -> Node {
        let mut n = node(
            name,
            instance_type,
            "us-east-1a",
            "general-purpose",
            Catalog::embedded(),
        );
        n.labels.insert(LABEL_INITIALIZED.into(), "true".into());
        n.created_at = Some(NOW - 3600);
        n.ready_since = Some(NOW - 3500);
        n
    }

    fn on(node: &str, name: &str, cpu: &str) -> Pod {
        let mut p = pod(name, cpu, "512Mi");
        p.node_name = Some(node.into());
        p.marked_unschedulable = false;
        p.created_at = Some(NOW - 600);
        p
    }

    fn pool(budget_percent: u32) -> NodePool {
        let mut pool = general_purpose_pool();
        pool.disruption.budgets = vec![Budget {
            nodes: BudgetNodes::Percent(budget_percent),
            schedule: None,
            duration: None,
            reasons: vec![],
        }];
        pool
    }

    struct Case {
        snapshot: ClusterSnapshot,
        pools: Vec<NodePool>,
        disrupting: Vec<String>,
        external_drift: Vec<(String, String)>,
        validating: Option<Vec<String>>,
    }

    impl Case {
        fn new(nodes: Vec<Node>, pods: Vec<Pod>) -> Self {
            Self {
                snapshot: ClusterSnapshot {
                    nodes,
                    pods,
                    ..Default::default()
                },
                pools: vec![pool(100)],
                disrupting: vec![],
                external_drift: vec![],
                validating: None,
            }
        }

        fn decide(&self) -> Decision {
            let pricing = Pricing::for_zones(vec!["us-east-1a".into()]);
            decide(&DisruptionInput {
                snapshot: &self.snapshot,
                node_pools: &self.pools,
                node_classes: &[],
                catalog: Catalog::embedded(),
                pricing: &pricing,
                in_flight: &[],
                now: NOW,
                spot_to_spot: false,
                external_drift: &self.external_drift,
                disrupting: &self.disrupting,
                validating: self.validating.as_deref(),
            })
        }
    }

    fn methods(d: &Decision) -> Vec<(Method, Vec<String>)> {
        d.commands
            .iter()
            .map(|c| (c.method, c.nodes.clone()))
            .collect()
    }

    fn codes(d: &Decision) -> Vec<(String, RejectCode)> {
        d.rejected
            .iter()
            .map(|r| (r.node.clone(), r.code))
            .collect()
    }

    #[test]
    fn methods_run_in_order_expiration_emptiness_drift_then_consolidation() {
        // The expired node's pod fits on no other node, so nothing moves onto "empty".
        let mut old = managed("old", "m5.xlarge");
        old.created_at = Some(NOW - 800 * 3600);
        let empty = managed("empty", "m5.large");
        let drifted = managed("drifted", "m5.large");
        let busy = managed("busy", "m5.xlarge");
        let mut case = Case::new(
            vec![old, empty, drifted, busy],
            vec![
                on("old", "a", "3"),
                on("drifted", "b", "1"),
                on("busy", "c", "3"),
            ],
        );
        case.external_drift = vec![("drifted".into(), "AMI ami-old is no longer selected".into())];
        let d = case.decide();
        let order: Vec<Method> = d.commands.iter().map(|c| c.method).collect();
        assert_eq!(
            &order[..3],
            [Method::Expiration, Method::Emptiness, Method::Drift],
            "{d:#?}"
        );
        assert_eq!(d.commands[2].nodes, ["drifted"]);
        assert_eq!(d.commands[2].reason, Reason::Drifted);
    }

    #[test]
    fn nodes_already_disrupting_count_against_the_budget_and_are_not_candidates() {
        // 50% of 4 nodes is 2; one is already being disrupted, so one more may go.
        let nodes: Vec<Node> = (1..=4)
            .map(|i| managed(&format!("n{i}"), "m5.large"))
            .collect();
        let mut case = Case::new(nodes, vec![]);
        case.pools = vec![pool(50)];
        case.disrupting = vec!["n1".into()];
        let d = case.decide();
        let taken: usize = d.commands.iter().map(|c| c.nodes.len()).sum();
        assert_eq!(taken, 1, "{d:#?}");
        assert!(!d.rejected.iter().any(|r| r.node == "n1"));
        assert!(
            !d.commands
                .iter()
                .any(|c| c.nodes.contains(&"n1".to_string()))
        );
        assert_eq!(
            codes(&d)
                .iter()
                .filter(|(_, c)| *c == RejectCode::DisruptionBudget)
                .count(),
            2
        );
    }

    #[test]
    fn candidates_are_never_destinations_of_their_own_command() {
        // Two half-full m5.large: either may take the other's pod, never both go with
        // their pods on each other.
        let case = Case::new(
            vec![managed("a", "m5.large"), managed("b", "m5.large")],
            vec![on("a", "p1", "700m"), on("b", "p2", "700m")],
        );
        let d = case.decide();
        for c in &d.commands {
            for m in &c.moves {
                assert!(!c.nodes.contains(&m.target), "{d:#?}");
            }
        }
        assert!(d.price_per_hour.after < d.price_per_hour.before, "{d:#?}");
    }

    #[test]
    fn a_command_is_computed_on_the_cluster_the_commands_before_it_leave() {
        // Three m5.xlarge with one 1.5-CPU pod each: a node has room for one more pod
        // (3.92 CPU allocatable), so commands move pods onto the others. A later
        // command must not count the space an earlier one's moves used.
        let case = xlarges_with_one_pod_each(3, "1500m");
        let d = case.decide();
        let mut load: HashMap<String, usize> = HashMap::new();
        for c in &d.commands {
            for m in &c.moves {
                *load.entry(m.target.clone()).or_default() += m.pods.len();
            }
        }
        // An m5.xlarge (3.92 CPU) holds at most two 1.5-CPU pods: its own and one more.
        assert!(load.values().all(|&n| n <= 1), "{d:#?}");
        assert!(d.price_per_hour.after < d.price_per_hour.before);
    }

    /// Nodes `n1..=count`, each an m5.xlarge running one pod `pI` of `cpu`.
    fn xlarges_with_one_pod_each(count: usize, cpu: &str) -> Case {
        let nodes = (1..=count)
            .map(|i| managed(&format!("n{i}"), "m5.xlarge"))
            .collect();
        let pods = (1..=count)
            .map(|i| on(&format!("n{i}"), &format!("p{i}"), cpu))
            .collect();
        Case::new(nodes, pods)
    }

    fn pool_of_types(types: &[&str]) -> NodePool {
        let mut pool = pool(100);
        pool.requirements.retain(|r| {
            r.key != LABEL_INSTANCE_TYPE && r.key != "karpenter.k8s.aws/instance-category"
        });
        pool.requirements.push(crate::api::model::NodeRequirement {
            key: LABEL_INSTANCE_TYPE.into(),
            operator: crate::api::model::Operator::In,
            values: types.iter().map(|t| t.to_string()).collect(),
            min_values: None,
        });
        pool
    }

    #[test]
    fn several_nodes_are_replaced_by_one_cheaper_node() {
        let mut case = xlarges_with_one_pod_each(3, "500m");
        case.pools = vec![pool_of_types(&["m5.large", "m5.xlarge"])];
        let d = case.decide();
        assert_eq!(
            methods(&d),
            [(
                Method::MultiNode,
                vec!["n1".to_string(), "n2".into(), "n3".into()]
            )],
            "{d:#?}"
        );
        let replacements = &d.commands[0].replacements;
        assert_eq!(replacements.len(), 1, "{d:#?}");
        assert_eq!(replacements[0].instance_type_options, ["m5.large"]);
    }

    #[test]
    fn a_command_under_validation_is_decided_as_its_own_set_not_the_first_the_budget_allows() {
        // Four alike half-empty nodes and room for two: a fresh decision takes n1 and n2
        // (name order); the command being validated took n3 and n4 and still holds.
        let mut case = xlarges_with_one_pod_each(4, "500m");
        let mut pool = pool_of_types(&["m5.large", "m5.xlarge"]);
        pool.disruption.budgets[0].nodes = BudgetNodes::Count(2);
        case.pools = vec![pool];
        let fresh = case.decide();
        assert_eq!(
            methods(&fresh),
            [(Method::MultiNode, vec!["n1".to_string(), "n2".to_string()])],
            "{fresh:#?}"
        );
        assert!(
            codes(&fresh).contains(&("n3".to_string(), RejectCode::DisruptionBudget)),
            "{fresh:#?}"
        );

        case.validating = Some(vec!["n3".into(), "n4".into()]);
        let validated = case.decide();
        assert_eq!(
            methods(&validated),
            [(Method::MultiNode, vec!["n3".to_string(), "n4".to_string()])],
            "{validated:#?}"
        );
        assert!(validated.rejected.is_empty(), "{validated:#?}");
    }

    #[test]
    fn several_nodes_are_never_replaced_by_one_of_their_own_type() {
        // One m5.xlarge takes both pods: a new one is no better than keeping either,
        // so one node goes and its pod moves to the other; nothing is launched.
        let mut case = Case::new(
            vec![managed("n1", "m5.xlarge"), managed("n2", "m5.xlarge")],
            vec![on("n1", "p1", "1"), on("n2", "p2", "1")],
        );
        case.pools = vec![pool_of_types(&["m5.xlarge"])];
        let d = case.decide();
        assert_eq!(d.commands.len(), 1, "{d:#?}");
        assert_eq!(d.commands[0].method, Method::SingleNode, "{d:#?}");
        assert_eq!(d.commands[0].replacements, vec![], "{d:#?}");
        assert_eq!(d.commands[0].moves.len(), 1, "{d:#?}");
    }

    #[test]
    fn a_pod_that_fits_nowhere_keeps_its_node_with_pods_do_not_fit_naming_it() {
        let mut big = on("n1", "big", "3");
        big.node_selector
            .insert("example.com/special".into(), "yes".into());
        let case = Case::new(vec![managed("n1", "m5.xlarge")], vec![big]);
        let d = case.decide();
        assert_eq!(codes(&d), [("n1".to_string(), RejectCode::PodsDoNotFit)]);
        assert!(
            d.rejected[0].reason.contains("default/big"),
            "{}",
            d.rejected[0].reason
        );
    }

    #[test]
    fn a_node_already_the_cheapest_for_its_pods_is_not_cheaper_to_replace() {
        // 1.5 CPU and 6 GiB: nothing allowed is cheaper than an m5a.large.
        let mut p = on("n1", "p", "1500m");
        p.requests
            .add(&crate::testing::resources(&[("memory", "5632Mi")]));
        let case = Case::new(vec![managed("n1", "m5a.large")], vec![p]);
        let d = case.decide();
        assert!(d.commands.is_empty(), "{:#?}", d.commands);
        assert_eq!(codes(&d), [("n1".to_string(), RejectCode::NotCheaper)]);
    }

    #[test]
    fn daemonset_and_mirror_pods_do_not_keep_a_node_from_being_empty() {
        let mut ds = on("n1", "agent", "100m");
        ds.daemonset_owned = true;
        let mut mirror = on("n1", "static", "100m");
        mirror.mirror = true;
        let case = Case::new(vec![managed("n1", "m5.large")], vec![ds, mirror]);
        let d = case.decide();
        assert_eq!(methods(&d), [(Method::Emptiness, vec!["n1".to_string()])]);
    }

    #[test]
    fn prices_before_and_after_cover_every_managed_node() {
        let case = Case::new(
            vec![managed("n1", "m5.large"), managed("n2", "m5.large")],
            vec![on("n1", "p", "500m")],
        );
        let d = case.decide();
        assert!((d.price_per_hour.before - 0.192).abs() < 1e-9, "{d:#?}");
        let saved: f64 = d.commands.iter().map(|c| c.savings_per_hour).sum();
        assert!(saved >= 0.096, "the empty node at least: {d:#?}");
        assert!(
            (d.price_per_hour.after - (0.192 - saved)).abs() < 1e-6,
            "{d:#?}"
        );
    }

    #[test]
    fn a_pod_blocker_stops_drift_unless_the_pool_bounds_the_drain_with_a_grace_period() {
        let mut blocker = on("n1", "batch", "3");
        blocker.do_not_disrupt = true;
        let mut case = Case::new(vec![managed("n1", "m5.xlarge")], vec![blocker]);
        case.external_drift = vec![("n1".into(), "AMI no longer selected".into())];
        let d = case.decide();
        assert_eq!(codes(&d), [("n1".to_string(), RejectCode::DoNotDisrupt)]);
        case.pools[0].termination_grace_period = Some(std::time::Duration::from_secs(3600));
        let d = case.decide();
        assert_eq!(methods(&d), [(Method::Drift, vec!["n1".to_string()])]);
        // The node's own do-not-disrupt still blocks.
        case.snapshot.nodes[0].do_not_disrupt = true;
        let d = case.decide();
        assert_eq!(codes(&d), [("n1".to_string(), RejectCode::DoNotDisrupt)]);
    }

    #[test]
    fn nodes_nearer_expiry_are_consolidated_first() {
        let mut young = managed("a-young", "m5.xlarge");
        young.created_at = Some(NOW - 3600);
        let mut aged = managed("z-aged", "m5.xlarge");
        aged.created_at = Some(NOW - 700 * 3600);
        let mut case = Case::new(
            vec![young, aged],
            vec![on("a-young", "a", "1"), on("z-aged", "b", "1")],
        );
        case.pools = vec![pool(50)];
        let d = case.decide();
        assert_eq!(d.commands.len(), 1, "{d:#?}");
        assert_eq!(d.commands[0].nodes, ["z-aged"]);
    }

    /// Random fragmented clusters: whatever the decision, applying every command leaves
    /// each pod on a node (or replacement) its requests fit, no two pods of an
    /// anti-affine app on one node, every managed node accounted for once, and every
    /// consolidation cheaper.
    #[test]
    fn applying_any_decision_leaves_every_pod_fitting_and_every_node_accounted_for() {
        use crate::testing::affinity_term;
        let catalog = Catalog::embedded();
        let types = [
            "m5.large",
            "m5.xlarge",
            "m5.2xlarge",
            "c5.xlarge",
            "r5.large",
        ];
        let mut seed: u64 = 0x5eed;
        let mut next = |n: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        for round in 0..15 {
            let mut nodes = Vec::new();
            let mut pods = Vec::new();
            for i in 0..(2 + next(9)) {
                let name = format!("n{i}");
                let it = types[next(types.len() as u64) as usize];
                let node = managed(&name, it);
                let mut free = node.allocatable.get_milli("cpu");
                for k in 0..next(6) {
                    let cpu = 100 * (1 + next(12)) as i64;
                    if cpu > free {
                        break;
                    }
                    free -= cpu;
                    let mut p = on(&name, &format!("p{i}x{k}"), &format!("{cpu}m"));
                    if next(4) == 0 {
                        p.labels.insert("app".into(), "solo".into());
                        p.pod_anti_affinity =
                            vec![affinity_term(crate::catalog::LABEL_HOSTNAME, "solo")];
                        if pods.iter().any(|q: &Pod| {
                            q.node_name == p.node_name
                                && q.labels.get("app").map(String::as_str) == Some("solo")
                        }) {
                            continue;
                        }
                    }
                    pods.push(p);
                }
                nodes.push(node);
            }
            let case = Case::new(nodes, pods);
            let d = case.decide();
            let by_key: HashMap<String, &Pod> =
                case.snapshot.pods.iter().map(|p| (p.key(), p)).collect();
            // Every managed node once.
            let mut seen: HashSet<&str> = HashSet::new();
            for n in d
                .commands
                .iter()
                .flat_map(|c| &c.nodes)
                .chain(d.rejected.iter().map(|r| &r.node))
            {
                assert!(seen.insert(n), "round {round}: {n} twice: {d:#?}");
            }
            assert_eq!(seen.len(), case.snapshot.nodes.len(), "round {round}");
            // Where every pod ends up.
            let mut home: HashMap<String, String> = case
                .snapshot
                .pods
                .iter()
                .map(|p| (p.key(), p.node_name.clone().unwrap()))
                .collect();
            let mut capacity: HashMap<String, i64> = case
                .snapshot
                .nodes
                .iter()
                .map(|n| (n.name.clone(), n.allocatable.get_milli("cpu")))
                .collect();
            for (ci, c) in d.commands.iter().enumerate() {
                let mut moved: Vec<&String> = c.moves.iter().flat_map(|m| &m.pods).collect();
                for m in &c.moves {
                    for p in &m.pods {
                        home.insert(p.clone(), m.target.clone());
                    }
                }
                for (k, r) in c.replacements.iter().enumerate() {
                    let name = format!("command-{}-replacement-{}", ci + 1, k + 1);
                    let cpu = catalog
                        .get(&r.instance_type)
                        .unwrap()
                        .allocatable
                        .get_milli("cpu");
                    capacity.insert(name.clone(), cpu);
                    for p in &r.pods {
                        home.insert(p.clone(), name.clone());
                        moved.push(p);
                    }
                }
                let mut expected: Vec<String> = case
                    .snapshot
                    .pods
                    .iter()
                    .filter(|p| c.nodes.contains(p.node_name.as_ref().unwrap()))
                    .map(Pod::key)
                    .collect();
                expected.sort();
                let mut moved: Vec<String> = moved.into_iter().cloned().collect();
                moved.sort();
                assert_eq!(
                    moved,
                    expected,
                    "round {round}: command {} moves exactly its nodes' pods",
                    ci + 1
                );
                if c.reason == Reason::Underutilized || c.reason == Reason::Empty {
                    assert!(c.savings_per_hour > 0.0, "round {round}: {c:#?}");
                }
                for n in &c.nodes {
                    capacity.remove(n);
                }
            }
            let mut used: HashMap<&str, i64> = HashMap::new();
            let mut solo: HashSet<&str> = HashSet::new();
            for (key, node) in &home {
                let Some(cap) = capacity.get(node) else {
                    panic!("round {round}: {key} is left on removed node {node}: {d:#?}");
                };
                let pod = by_key[key];
                let u = used.entry(node).or_default();
                *u += pod.requests.get_milli("cpu");
                assert!(*u <= *cap, "round {round}: {node} over its cpu: {d:#?}");
                if pod.labels.get("app").map(String::as_str) == Some("solo") {
                    assert!(
                        solo.insert(node),
                        "round {round}: two solo pods on {node}: {d:#?}"
                    );
                }
            }
        }
    }
}
