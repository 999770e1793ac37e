//! A scheduler prepared once per tick and solved many times: provisioning places the
//! pending pods; consolidation asks, for many candidate sets of nodes, "take these away —
//! where do their pods go, with how many new claims, at what price?".
//!
//! Preparing does everything that depends on the cluster alone, once: prices, pool type
//! lists, DaemonSet overhead, node ceilings, the bound pods counted in topology, and pod
//! classes for the bound pods (their compiled forms are built on first use and cached;
//! classes with the same node constraints share their pool types and candidate nodes).
//! A solve then changes only what its moved pods touch — the bins they land on, the
//! counts they leave and join, the claims they open — and logs each change so it can be
//! undone when the solve returns. Its cost grows with the pods moved, not the cluster.
//!
//! Deviations from the API first sketched for consolidation:
//! - `Solve::Placed` carries a [`Placed`] (the schedule and a private commit token)
//!   rather than a bare `Schedule`; `Placed` derefs to its `Schedule`.
//! - [`PreparedScheduler::commit`] takes that `Placed`, and returns `Err(stop)` if the
//!   removal no longer places on the current state (only possible when another solve was
//!   committed after this one was made: commits re-run the solve, which is deterministic).
//! - Claims made permanent by `commit` count in later solves (their pods in topology,
//!   their capacity in pool limits) but take none of their pods: each disruption command
//!   stands on its own, its pods going to nodes that exist or to its own new claims, as
//!   the function validates it later with the other commands' claims not there.
//! - A solve does not run provisioning's re-packing pass over its new claims, nor its
//!   retry of failed pods after other placements: it stops at the first pod that fits
//!   nowhere.
//! - Pending pods nominated to in-flight claims are counted on those claims (capacity and
//!   topology) for every solve: that room is taken.
//! - A removed node's capacity leaves its NodePool's usage for the solve (limits).

use std::cell::RefCell;
use std::collections::HashMap;
use std::ops::Deref;

use crate::disruption::rules::moving_pods;
use crate::resources::{Resources, WELL_KNOWN};
use crate::well_known::{LABEL_INSTANCE_TYPE, LABEL_NODEPOOL};

use super::fast_hash::FastMap;
use super::requirements::ValueSet;
use super::scheduler::{
    AbsorbedBefore, BinId, CandidateRef, Class, ClassId, ClassKey, DomainKeyId, EClassId, GroupId,
    IdVec, InFlightPlacement, MovingPod, Origin, PodId, PoolId, PoolState, Schedule, Scheduler,
    SchedulerInput, Undo, ct_domain, largest_first,
};
use super::unschedulable::Unschedulable;

/// Nodes a speculative solve takes away (indices into `SchedulerInput::nodes`), and nodes
/// it must not place pods on (they stay, but are not destinations: e.g. other candidates).
#[derive(Debug, Clone, Copy, Default)]
pub struct Removal<'r> {
    pub nodes: &'r [usize],
    pub not_destinations: &'r [usize],
}

/// When a solve stops early. `None`: no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SolveLimits {
    /// At most this many new claims.
    pub max_new_claims: Option<usize>,
    /// The new claims' cheapest options must cost strictly less than this, per hour.
    pub max_price: Option<f64>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Solve {
    Placed(Placed),
    Stopped(Stop),
}

/// Why a solve stopped.
#[derive(Debug, Clone, PartialEq)]
pub enum Stop {
    /// A moving pod (index into `SchedulerInput::pods`) fits nowhere, for `reason`.
    PodDoesNotFit { pod: usize, reason: Unschedulable },
    /// More new claims than `SolveLimits::max_new_claims` would be needed.
    TooManyClaims,
    /// The new claims would cost `SolveLimits::max_price` or more.
    TooExpensive,
}

/// A solve that placed every moving pod: where they go (`existing_nodes`, `in_flight`,
/// `new_claims`; `unschedulable` is empty), and what [`PreparedScheduler::commit`] needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Placed {
    pub schedule: Schedule,
    token: CommitToken,
}

impl Deref for Placed {
    type Target = Schedule;
    fn deref(&self) -> &Schedule {
        &self.schedule
    }
}

#[derive(Debug, Clone, PartialEq)]
struct CommitToken {
    nodes: Vec<usize>,
    not_destinations: Vec<usize>,
    generation: u64,
}

/// The scheduling simulation, prepared once for a cluster (see the module).
pub struct PreparedScheduler<'a> {
    input: &'a SchedulerInput<'a>,
    /// As provisioning starts: cloned by each `provision`. `None` when prepared for
    /// solves only ([`PreparedScheduler::for_solves`]).
    base: Option<Scheduler<'a>>,
    /// The solve state; `None` when prepared for provisioning only.
    solver: Option<RefCell<Solver<'a>>>,
}

struct Solver<'a> {
    s: Scheduler<'a>,
    /// Per input node: the pods on it now, whose topology counts leave with it (bound
    /// there, or moved there by a commit; not terminal).
    node_pods: Vec<Vec<PodId>>,
    /// Nodes a commit took away.
    removed: Vec<bool>,
    /// Bins of claims made permanent by commits, by name.
    committed: HashMap<BinId, String>,
    generation: u64,
}

impl<'a> PreparedScheduler<'a> {
    /// Prepares provisioning and speculative solves for the cluster in `input`.
    pub fn new(input: &'a SchedulerInput<'a>) -> Self {
        let base = Scheduler::prepare(input);
        let solver = Solver::new(base.clone());
        Self {
            input,
            base: Some(base),
            solver: Some(RefCell::new(solver)),
        }
    }

    /// Prepared for speculative solves only: [`PreparedScheduler::provision`] is not
    /// available. What disruption uses: provisioning's copy of the prepared state is
    /// as large as the solve state (every node's bin, every topology count), a fifth of
    /// a decision's memory at 3,000 nodes, and a decision never provisions.
    pub fn for_solves(input: &'a SchedulerInput<'a>) -> Self {
        Self {
            input,
            base: None,
            solver: Some(RefCell::new(Solver::new(Scheduler::prepare(input)))),
        }
    }

    /// Prepared for one provisioning run only (what [`super::schedule`] uses).
    pub(super) fn for_provisioning(input: &'a SchedulerInput<'a>) -> Self {
        Self {
            input,
            base: Some(Scheduler::prepare(input)),
            solver: None,
        }
    }

    /// Provisioning, consuming the prepared state instead of copying it.
    pub(super) fn provision_once(self) -> Schedule {
        self.base.expect("prepared for provisioning").run()
    }

    /// Provisioning: places the pending pods, exactly as [`super::schedule`] does. It
    /// starts from the cluster as prepared; commits do not change it.
    pub fn provision(&self) -> Schedule {
        self.base_state().clone().run()
    }

    fn base_state(&self) -> &Scheduler<'a> {
        self.base
            .as_ref()
            .expect("prepared with PreparedScheduler::new or for provisioning")
    }

    /// A speculative solve: the nodes `removal.nodes` go away and their moving pods
    /// (bound there, not DaemonSet-owned, mirror or terminal) are placed on what remains
    /// (never on a removed node or one of `removal.not_destinations`) and on new claims,
    /// under every constraint provisioning honours; the removed nodes' pods leave the
    /// topology counts. Stops at the first pod that fits nowhere, or as soon as a limit
    /// is crossed. The prepared state is left as it was.
    pub fn solve(&self, removal: &Removal<'_>, limits: &SolveLimits) -> Solve {
        let mut solver = self.solver().borrow_mut();
        let generation = solver.generation;
        match solver.solve(self.input, removal, limits, false) {
            Ok(schedule) => Solve::Placed(Placed {
                schedule,
                token: CommitToken {
                    nodes: removal.nodes.to_vec(),
                    not_destinations: removal.not_destinations.to_vec(),
                    generation,
                },
            }),
            Err(stop) => Solve::Stopped(stop),
        }
    }

    /// Makes a placed solve permanent (its command will run): its removed nodes are
    /// gone, its moved pods count where they went, and its new claims become bins later
    /// solves may use (as `committed-N`, at their cheapest option's type, zone and
    /// capacity type). Re-runs the solve on the current state, which gives the same
    /// placements unless another solve was committed since this one was made.
    pub fn commit(&mut self, placed: &Placed) -> Result<(), Stop> {
        let input = self.input;
        let solver = self
            .solver
            .as_mut()
            .expect("prepared with PreparedScheduler::new or for_solves")
            .get_mut();
        let removal = Removal {
            nodes: &placed.token.nodes,
            not_destinations: &placed.token.not_destinations,
        };
        solver
            .solve(input, &removal, &SolveLimits::default(), true)
            .map(|_| ())
    }

    fn solver(&self) -> &RefCell<Solver<'a>> {
        self.solver
            .as_ref()
            .expect("prepared with PreparedScheduler::new or for_solves")
    }
}

/// Whether pod `p` is re-placed when its node goes (see `disruption::rules`).
fn is_moving(input: &SchedulerInput<'_>, p: PodId) -> bool {
    moving_pods(std::iter::once(&input.pods[p.index()]))
        .next()
        .is_some()
}

impl Scheduler<'_> {
    /// `count_on_node`, with the groups of the pod's class when it has one.
    fn count_pod_on_node(&mut self, p: PodId, n: usize, delta: i32, from_group: GroupId) {
        let Some(c) = self.pod_class[p] else {
            return self.count_on_node(p, n, delta, from_group);
        };
        // Lent out and back: counting changes groups, never classes.
        let selecting = std::mem::take(&mut self.classes[c].matched);
        let owned = std::mem::take(&mut self.classes[c].owned);
        self.count_listed(n, delta, &selecting, &owned, from_group);
        self.classes[c].matched = selecting;
        self.classes[c].owned = owned;
    }
}

impl<'a> Solver<'a> {
    /// The solve state, from the prepared provisioning state: classes and topology
    /// groups for the bound pods that may move, the nominated pods on their in-flight
    /// claims, and no pending demand (solves place only what they move).
    fn new(base: Scheduler<'a>) -> Self {
        let mut s = base;
        let input = s.input;
        let mut node_pods: Vec<Vec<PodId>> = vec![Vec::new(); input.nodes.len()];
        let first_class = s.classes.next_id();
        let first_group = s.groups.next_id();
        let mut moving: Vec<PodId> = Vec::new();
        let mut constrained_alike: FastMap<ClassKey<'_>, PodId> = FastMap::default();
        for p in s.pod_ids() {
            let pod = s.pod(p);
            if pod.terminal {
                continue;
            }
            let Some(&n) = pod.node_name.as_deref().and_then(|n| s.node_index.get(n)) else {
                continue;
            };
            node_pods[n].push(p);
            if !is_moving(input, p) {
                continue;
            }
            moving.push(p);
            constrained_alike
                .entry(ClassKey::constraints_of(pod))
                .or_insert(p);
        }
        // The groups of the moving pods' constraints, made from the first pod of each
        // set of constraints (so in the order the pods come).
        let mut makers: Vec<PodId> = constrained_alike.into_values().collect();
        makers.sort_unstable();
        for p in makers {
            for spec in s.group_specs(s.pod(p), true).into_iter().flatten() {
                s.group(spec);
            }
        }
        // Classes: the same constraints and selected by the same groups. Keyed by
        // labels instead, every app would be a class of its own, each with a candidate
        // list as long as the cluster has nodes (classes × nodes was most of the memory
        // at 5,000 nodes), while pods no group tells apart are placed alike.
        let mut index: FastMap<(ClassKey<'_>, Vec<GroupId>), ClassId> = FastMap::default();
        for p in moving {
            let pod = s.pod(p);
            let key = (ClassKey::constraints_of(pod), s.groups_selecting(pod));
            let c = *index
                .entry(key)
                .or_insert_with(|| s.classes.push(Class::of(p, pod)));
            s.pod_class[p] = Some(c);
            let class = &mut s.classes[c];
            let mut min = class.min_request.clone();
            for (i, name) in WELL_KNOWN.iter().enumerate() {
                min.set_milli(name, pod.requests.slot_milli(i).min(min.slot_milli(i)));
            }
            class.min_request = min;
        }
        for c in s.classes.ids_from(first_class) {
            let ladder = s.ladder(s.pod(s.classes[c].representative));
            s.classes[c].ladder = ladder;
        }
        for c in s.classes.ids() {
            let pod = s.pod(s.classes[c].representative);
            s.classes[c].matched = s.groups_selecting(pod);
            s.classes[c].owned = s.groups_owned(pod);
        }
        if s.groups.next_id() > first_group {
            for (n, on_node) in node_pods.iter().enumerate() {
                for &p in on_node {
                    s.count_pod_on_node(p, n, 1, first_group);
                }
            }
        }
        let pending = s.pending.clone();
        s.place_nominated(pending);
        for class in &mut s.classes {
            class.remaining = Resources::new();
        }
        s.blocked = IdVec::filled(false, s.bins.len());
        s.bin_stamp = IdVec::filled(0, s.bins.len());
        Solver {
            s,
            node_pods,
            removed: vec![false; input.nodes.len()],
            committed: HashMap::new(),
            generation: 0,
        }
    }

    fn solve(
        &mut self,
        input: &SchedulerInput<'_>,
        removal: &Removal<'_>,
        limits: &SolveLimits,
        keep: bool,
    ) -> Result<Schedule, Stop> {
        let s = &mut self.s;
        s.stamp += 1;
        let base_bins = s.bins.next_id();
        s.blocked.resize(s.bins.len(), false);
        s.bin_stamp.resize(s.bins.len(), 0);
        s.undo = Some(Undo {
            base_bins,
            pools: s
                .pools
                .iter()
                .map(|p| PoolState {
                    usage: p.usage.clone(),
                    duals: p.duals.clone(),
                })
                .collect(),
            zone_use: s.zone_use.clone(),
            ..Undo::default()
        });
        let mut removed: Vec<usize> = removal
            .nodes
            .iter()
            .copied()
            .filter(|&n| n < input.nodes.len() && !self.removed[n])
            .collect();
        removed.sort_unstable();
        removed.dedup();
        for &n in removed.iter().chain(removal.not_destinations) {
            if let Some(b) = s.node_bin.get(n).copied().flatten()
                && !s.blocked[b]
            {
                s.blocked[b] = true;
                s.undo.as_mut().expect("solving").blocked.push(b);
            }
        }
        // The removed nodes' pods leave the topology counts, their capacity the pools.
        let mut moving = Vec::new();
        for &n in &removed {
            for &p in &self.node_pods[n] {
                s.count_pod_on_node(p, n, -1, GroupId::from_index(0));
                if is_moving(input, p) {
                    moving.push(p);
                }
            }
            let node = &input.nodes[n];
            let pool = node
                .labels
                .get(LABEL_NODEPOOL)
                .and_then(|name| s.pool_named(name));
            if let Some(pool) = pool {
                let usage = &mut s.pools[pool].usage;
                usage.sub(&node.capacity);
                let nodes = usage.get_milli("nodes");
                usage.set_milli("nodes", nodes - 1000);
            }
        }
        moving.sort_by(|&a, &b| largest_first(input.pods, a, b));
        for &p in &moving {
            let c = s.class_of(p);
            if s.classes[c].pools_ok.is_empty() {
                let e = s.eclass(c, 0);
                s.classes[c].pools_ok = s.eclasses[e].pool_fit.iter().map(|r| r.is_ok()).collect();
            }
        }
        s.undo.as_mut().expect("solving").moving = moving
            .iter()
            .map(|&pod| MovingPod { pod, placed: false })
            .collect();
        let remaining: IdVec<PoolId, Resources> = s
            .pools
            .ids()
            .map(|pool| s.unplaced_moving_requests(pool))
            .collect();
        s.undo.as_mut().expect("solving").remaining = remaining;

        let result = Self::place_moving(s, &moving, limits, base_bins)
            .and_then(|()| self.schedule(input, base_bins, limits));
        match (&result, keep) {
            (Ok(schedule), true) => self.keep(schedule, &removed, base_bins),
            _ => self.rollback(),
        }
        result
    }

    fn place_moving(
        s: &mut Scheduler<'_>,
        moving: &[PodId],
        limits: &SolveLimits,
        base_bins: BinId,
    ) -> Result<(), Stop> {
        let mut price_floor = 0.0;
        for &p in moving {
            let c = s.class_of(p);
            let mut level = 0;
            loop {
                let e = s.eclass(c, level);
                let before = s.bins.next_id();
                match s.place(e, p) {
                    Ok(()) => {
                        if s.bins.next_id() > before {
                            let claims = s.bins.len() - base_bins.index();
                            if limits.max_new_claims.is_some_and(|k| claims > k) {
                                return Err(Stop::TooManyClaims);
                            }
                            price_floor += Self::price_floor(s, e, p, before);
                            if limits.max_price.is_some_and(|m| price_floor >= m) {
                                return Err(Stop::TooExpensive);
                            }
                        }
                        break;
                    }
                    Err(reason) => {
                        if level + 1 < s.classes[c].ladder.len() {
                            level += 1;
                        } else {
                            return Err(Stop::PodDoesNotFit {
                                pod: p.index(),
                                reason,
                            });
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// A lower bound on the price of the claim `b` just opened for pod `p`: its pool's
    /// cheapest type that takes the pod under the class's requirements. More pods and
    /// narrower requirements only raise it.
    fn price_floor(s: &Scheduler<'_>, e: EClassId, p: PodId, b: BinId) -> f64 {
        let Origin::New(pool) = s.bins[b].origin else {
            return 0.0;
        };
        let ec = &s.eclasses[e];
        let merged = s.pools[pool].reqs.intersect(&ec.reqs);
        let requests = &s.pod(p).requests;
        ec.pool_types[pool]
            .iter()
            .find(|&&t| requests.fits_in(s.usable(pool, t)))
            .and_then(|&t| s.cheapest_offering(t, &merged, None, None))
            .map_or(0.0, |o| o.price)
    }

    /// The solve's placements: the bins it changed, with the pods it added, and its new
    /// claims with their options.
    fn schedule(
        &mut self,
        input: &SchedulerInput<'_>,
        base_bins: BinId,
        limits: &SolveLimits,
    ) -> Result<Schedule, Stop> {
        let s = &mut self.s;
        let mut out = Schedule::default();
        let undo = s.undo.as_ref().expect("solving");
        // The bins the solve changed, with how many pods each had before it.
        let mut touched: Vec<(BinId, usize)> = undo
            .bins
            .iter()
            .map(|saved| (saved.id, saved.bin.pods.len()))
            .collect();
        touched.sort_unstable();
        for (b, before) in touched {
            let pods = s.bins[b].placed_pods(before);
            if pods.is_empty() {
                continue;
            }
            // A new claim here is one an earlier commit made: it is launching, as far as
            // later solves know.
            if let Some(pods) = out.place_on(input, s.bins[b].origin, pods) {
                let claim = self.committed.get(&b).cloned().unwrap_or_default();
                out.in_flight.push(InFlightPlacement { claim, pods });
            }
        }
        // Provisioning's re-packing pass over the solve's own claims (those of pods
        // without topology constraints): replacements as cheap as a plan's.
        s.repack_free_claims_from(base_bins);
        let mut price = 0.0;
        for b in s.bins.ids_from(base_bins) {
            let Origin::New(pool) = s.bins[b].origin else {
                continue;
            };
            if s.bins[b].pods.is_empty() {
                continue;
            }
            let pods = s.bins[b].placed_pods(0);
            let claim = s.finalize_claim(b, pool, pods);
            if let (None, Some(&pod)) = (claim.options.first(), claim.pods.first()) {
                // Its only offerings were reservations the solve's other claims took.
                return Err(Stop::PodDoesNotFit {
                    pod,
                    reason: super::scheduler::no_offering(&claim.node_pool),
                });
            }
            price += claim.options.first().map_or(0.0, |o| o.price);
            out.new_claims.push(claim);
        }
        if limits.max_price.is_some_and(|m| price >= m) {
            return Err(Stop::TooExpensive);
        }
        Ok(out)
    }

    /// Puts everything the solve changed back.
    fn rollback(&mut self) {
        let s = &mut self.s;
        let u = s.undo.take().expect("solving");
        for c in u.counts.iter().rev() {
            s.add_count(c.group, c.owners, c.key, c.domain, -c.delta);
        }
        for saved in u.bins.into_iter().rev() {
            s.bins[saved.id] = saved.bin;
        }
        s.bins.truncate(u.base_bins);
        Self::restore_caches(s, &u.dead, &u.absorbed);
        for &e in &u.pushed {
            s.eclasses[e].candidates.drop_opened();
        }
        for (pool, before) in s.pools.iter_mut().zip(u.pools) {
            pool.usage = before.usage;
            pool.duals = before.duals;
        }
        s.zone_use = u.zone_use;
        for b in u.blocked {
            s.blocked[b] = false;
        }
    }

    /// Dead marks and absorbed versions are caches that depend on counts later removals
    /// change: they go back as they were even when a solve is kept.
    fn restore_caches(s: &mut Scheduler<'_>, dead: &[CandidateRef], absorbed: &[AbsorbedBefore]) {
        for c in dead {
            let ec = &mut s.eclasses[c.eclass];
            ec.candidates[c.position].set_dead(false);
            ec.dead -= 1;
        }
        for a in absorbed.iter().rev() {
            let c = a.candidate;
            s.eclasses[c.eclass].candidates[c.position].set_absorbed(a.version);
        }
    }

    /// Makes the solve just run permanent (see `PreparedScheduler::commit`).
    fn keep(&mut self, schedule: &Schedule, removed: &[usize], base_bins: BinId) {
        let s = &mut self.s;
        let u = s.undo.take().expect("solving");
        s.keep_reservations();
        Self::restore_caches(s, &u.dead, &u.absorbed);
        for &e in &u.pushed {
            s.eclasses[e].candidates.keep_opened();
        }
        for (pool, before) in s.pools.iter_mut().zip(u.pools) {
            pool.duals = before.duals;
        }
        for b in u.blocked {
            s.blocked[b] = false;
        }
        for &n in removed {
            self.removed[n] = true;
            self.node_pods[n].clear();
            if let Some(b) = s.node_bin[n] {
                s.blocked[b] = true;
            }
        }
        for placement in &schedule.existing_nodes {
            if let Some(&n) = s.node_index.get(placement.node.as_str()) {
                self.node_pods[n].extend(placement.pods.iter().map(|&p| PodId::from_index(p)));
            }
        }
        // A committed claim takes no pods in later solves (see the module), nor does a
        // claim the re-packing pass emptied, which is no claim.
        s.blocked.resize(s.bins.len(), false);
        for b in s.bins.ids_from(base_bins) {
            if matches!(s.bins[b].origin, Origin::New(_)) {
                s.blocked[b] = true;
            }
        }
        // New claims become bins of their cheapest option.
        let new_bins = s
            .bins
            .ids_from(base_bins)
            .filter(|&b| matches!(s.bins[b].origin, Origin::New(_)) && !s.bins[b].pods.is_empty());
        for (b, claim) in new_bins
            .collect::<Vec<_>>()
            .into_iter()
            .zip(&schedule.new_claims)
        {
            let Origin::New(pool) = s.bins[b].origin else {
                continue;
            };
            let Some(option) = claim.options.first() else {
                continue;
            };
            let Some(t) = s.instance_type_named(&option.instance_type) else {
                continue;
            };
            let ceiling = s.usable(pool, t).clone();
            let mut ports = s.daemon_ports(pool, t);
            ports.extend(
                s.bins[b]
                    .pods
                    .iter()
                    .flat_map(|m| s.pod(m.pod).host_ports.iter().cloned()),
            );
            let bin = &mut s.bins[b];
            bin.target = Some(t);
            bin.ceiling = ceiling;
            bin.ports = ports;
            bin.reqs.add(
                LABEL_INSTANCE_TYPE,
                ValueSet::in_values([option.instance_type.clone()]),
            );
            bin.version += 1;
            if let Some(z) = s.zones.position(|z| *z == option.zone) {
                s.pin_bin(b, DomainKeyId::ZONE, z);
            }
            s.pin_bin(
                b,
                DomainKeyId::CAPACITY_TYPE,
                ct_domain(option.capacity_type),
            );
            let name = format!("committed-{}", self.committed.len());
            self.committed.insert(b, name);
        }
        self.generation += 1;
    }
}

/// Plans the pending pods: [`PreparedScheduler::provision`] on a scheduler prepared for
/// this one call (without the state speculative solves need).
///
/// With no pod to place the schedule is empty, and the cluster is not prepared: its
/// bins, topology counts and pod classes are most of a quiet tick's work (a tick
/// with nothing pending, at 1,000 nodes about a sixth of the minute's CPU).
pub fn schedule(input: &SchedulerInput<'_>) -> Schedule {
    if !input.pods.iter().any(|p| p.wants_capacity()) {
        return Schedule::default();
    }
    PreparedScheduler::for_provisioning(input).provision_once()
}
