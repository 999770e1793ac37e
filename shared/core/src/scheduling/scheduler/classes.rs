//! Pod classes: pods with identical scheduling constraints share one class, compiled
//! once per relaxation level (an `EClass`) with its groups, the pools it may use and
//! their types cheapest first, and its candidate bins. A bin that can never take the
//! class again is marked dead in that list once, so later pods skip it. The node-side
//! part of a compiled class (a `NodeShape`) is shared by every class with the same node
//! constraints.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::api::model::NodeRequirement;
use crate::cluster::{HostPort, Pod, Toleration, WhenUnsatisfiable};
use crate::resources::{Resources, WELL_KNOWN};
use crate::scheduling::fast_hash::FastMap;
use crate::scheduling::requirements::{Requirements, ValueSet};
use crate::scheduling::topology::{GroupKind, GroupSpec};
use crate::scheduling::unschedulable::Refusal;

use super::Scheduler;
use super::bins::Origin;
use super::ids::{BinId, ClassId, EClassId, GroupId, IdVec, InstanceTypeId, PodId, PoolId};
use super::pools::untolerated_taint;
use super::preferences::Relax;

/// Pods with the same scheduling constraints.
#[derive(Clone)]
pub(crate) struct Class {
    pub(crate) representative: PodId,
    pub(crate) ladder: Vec<Relax>,
    /// Groups selecting this class's pods.
    pub(crate) matched: Vec<GroupId>,
    /// Element-wise minimum of the members' requests.
    pub(crate) min_request: Resources,
    /// Requests of members not yet placed.
    pub(crate) remaining: Resources,
    /// NodePools that can take the class at its strictest level.
    pub(crate) pools_ok: IdVec<PoolId, bool>,
    /// Required anti-affinity groups the members own (filled for solves).
    pub(crate) owned: Vec<GroupId>,
}

impl Class {
    /// A class of one pod so far, `representative`.
    pub(crate) fn of(representative: PodId, pod: &Pod) -> Self {
        Class {
            representative,
            ladder: Vec::new(),
            matched: Vec::new(),
            min_request: pod.requests.clone(),
            remaining: Resources::new(),
            pools_ok: IdVec::new(),
            owned: Vec::new(),
        }
    }
}

/// A bin a compiled class may use. Eight bytes: a class's list is as long as the
/// cluster has nodes, and a consolidation decision compiles thousands of classes
/// (with a separate `dead` flag, twelve bytes, those lists were a third of a decision's
/// memory at 10,000 nodes).
#[derive(Clone, Copy)]
pub(crate) struct Candidate {
    pub(crate) bin: BinId,
    /// The bin version at which a pod of this class last joined it (while unchanged,
    /// the bin's requirements already include the class's), in the low 31 bits;
    /// [`Candidate::NEVER`] when none did or the version does not fit. The top bit:
    /// the bin can never take the class.
    state: u32,
}

/// A compiled class's candidates, in bin order: the bins that outlive a solve, then
/// those the solve in progress opened. Kept apart so that a solve's few new claims
/// never grow a list as long as the cluster has nodes (growing one doubled it: a
/// fifth of a consolidation decision's memory at 3,000 nodes), and rollback only
/// clears the short list. Positions run over both, `kept` first.
#[derive(Clone, Default)]
pub(crate) struct Candidates {
    kept: Vec<Candidate>,
    opened: Vec<Candidate>,
}

impl Candidates {
    fn new(kept: Vec<Candidate>) -> Self {
        Candidates {
            kept,
            opened: Vec::new(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.kept.len() + self.opened.len()
    }

    pub(crate) fn get(&self, i: usize) -> Option<&Candidate> {
        match i.checked_sub(self.kept.len()) {
            None => self.kept.get(i),
            Some(j) => self.opened.get(j),
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Candidate> {
        self.kept.iter().chain(&self.opened)
    }

    pub(crate) fn last(&self) -> Option<&Candidate> {
        self.opened.last().or_else(|| self.kept.last())
    }

    /// The first position whose candidate fails `pred` (both lists are in bin order).
    pub(crate) fn partition_point(&self, pred: impl Fn(&Candidate) -> bool) -> usize {
        let in_kept = self.kept.partition_point(&pred);
        if in_kept < self.kept.len() {
            in_kept
        } else {
            in_kept + self.opened.partition_point(pred)
        }
    }

    /// Adds a candidate after every other: to the solve's list when a solve opened its
    /// bin. A kept list grows by a sixteenth at a time, not by doubling.
    pub(crate) fn push(&mut self, candidate: Candidate, opened_by_solve: bool) {
        if opened_by_solve {
            self.opened.push(candidate);
            return;
        }
        debug_assert!(self.opened.is_empty(), "kept bins come before a solve's");
        if self.kept.len() == self.kept.capacity() {
            self.kept.reserve_exact((self.kept.len() / 16).max(16));
        }
        self.kept.push(candidate);
    }

    /// The solve is undone: its bins are gone.
    pub(crate) fn drop_opened(&mut self) {
        self.opened.clear();
    }

    /// The solve is kept: its bins stay, after the others.
    pub(crate) fn keep_opened(&mut self) {
        if self.opened.is_empty() {
            return;
        }
        let free = self.kept.capacity() - self.kept.len();
        if free < self.opened.len() {
            self.kept
                .reserve_exact(self.opened.len().max(self.kept.len() / 16));
        }
        self.kept.append(&mut self.opened);
    }

    pub(crate) fn retain(&mut self, keep: impl Fn(&Candidate) -> bool) {
        self.kept.retain(&keep);
        self.opened.retain(keep);
    }
}

impl std::ops::Index<usize> for Candidates {
    type Output = Candidate;
    fn index(&self, i: usize) -> &Candidate {
        match i.checked_sub(self.kept.len()) {
            None => &self.kept[i],
            Some(j) => &self.opened[j],
        }
    }
}

impl std::ops::IndexMut<usize> for Candidates {
    fn index_mut(&mut self, i: usize) -> &mut Candidate {
        match i.checked_sub(self.kept.len()) {
            None => &mut self.kept[i],
            Some(j) => &mut self.opened[j],
        }
    }
}

impl Candidate {
    const DEAD: u32 = 1 << 31;
    /// No version recorded: the bin's requirements are checked again.
    pub(crate) const NEVER: u32 = Self::DEAD - 1;

    pub(crate) fn new(bin: BinId) -> Self {
        Candidate {
            bin,
            state: Self::NEVER,
        }
    }

    pub(crate) fn dead(&self) -> bool {
        self.state & Self::DEAD != 0
    }

    pub(crate) fn set_dead(&mut self, dead: bool) {
        self.state = if dead {
            self.state | Self::DEAD
        } else {
            self.state & !Self::DEAD
        };
    }

    pub(crate) fn absorbed(&self) -> u32 {
        self.state & !Self::DEAD
    }

    /// Records `version`; one too large to hold is recorded as [`Candidate::NEVER`],
    /// which only costs a check of the requirements again.
    pub(crate) fn set_absorbed(&mut self, version: u32) {
        let version = if version < Self::NEVER {
            version
        } else {
            Self::NEVER
        };
        self.state = (self.state & Self::DEAD) | version;
    }
}

/// A class at one relaxation level, compiled.
#[derive(Clone)]
pub(crate) struct EClass {
    pub(crate) class: ClassId,
    pub(crate) reqs: Requirements,
    pub(crate) tolerations: Vec<Toleration>,
    pub(crate) tolerate_prefer_no_schedule: bool,
    pub(crate) spreads: Vec<GroupId>,
    pub(crate) affinity: Vec<GroupId>,
    pub(crate) anti: Vec<GroupId>,
    /// Per pool: Ok, or why the class cannot use it.
    pub(crate) pool_fit: Arc<IdVec<PoolId, Result<(), Refusal>>>,
    /// Per pool: types compatible with pool ∩ class requirements, cheapest first.
    pub(crate) pool_types: Arc<IdVec<PoolId, Vec<InstanceTypeId>>>,
    pub(crate) candidates: Candidates,
    pub(crate) dead: usize,
}

/// The node-side part of a compiled class (requirements at one relaxation level,
/// tolerations): which pools it may use, their types cheapest first, and which of the
/// permanent bins it may use. Many classes share one.
#[derive(Clone)]
pub(crate) struct NodeShape {
    pub(crate) pool_fit: Arc<IdVec<PoolId, Result<(), Refusal>>>,
    pub(crate) pool_types: Arc<IdVec<PoolId, Vec<InstanceTypeId>>>,
    /// Bins below `admitted_upto` that pass `admit`.
    pub(crate) admitted: Vec<BinId>,
    pub(crate) admitted_upto: BinId,
}

/// What makes two pods interchangeable for scheduling (requests aside).
#[derive(PartialEq, Eq, Hash)]
pub(crate) struct ClassKey<'p> {
    namespace: &'p str,
    /// `None` in a key of the constraints alone ([`ClassKey::constraints_of`]).
    labels: Option<&'p BTreeMap<String, String>>,
    node_selector: &'p BTreeMap<String, String>,
    required_node_terms: &'p [Vec<NodeRequirement>],
    /// Topology spread counts by these (see `PodFields::own_node_terms`).
    own_node_terms: Option<&'p [Vec<NodeRequirement>]>,
    preferred_node_terms: &'p [crate::cluster::PreferredNodeTerm],
    tolerations: &'p [Toleration],
    topology_spread: &'p [crate::cluster::TopologySpreadConstraint],
    pod_affinity: &'p [crate::cluster::PodAffinityTerm],
    pod_anti_affinity: &'p [crate::cluster::PodAffinityTerm],
    preferred_pod_affinity: &'p [crate::cluster::WeightedPodAffinityTerm],
    preferred_pod_anti_affinity: &'p [crate::cluster::WeightedPodAffinityTerm],
    host_ports: &'p [HostPort],
}

impl<'p> ClassKey<'p> {
    pub(crate) fn of(pod: &'p Pod) -> Self {
        ClassKey {
            labels: Some(&pod.labels),
            ..Self::constraints_of(pod)
        }
    }

    /// The pod's own constraints, its labels left out: pods with equal keys make the
    /// same topology groups, and their labels matter only through the groups that
    /// select them.
    pub(crate) fn constraints_of(pod: &'p Pod) -> Self {
        ClassKey {
            namespace: &pod.namespace,
            labels: None,
            node_selector: &pod.node_selector,
            required_node_terms: &pod.required_node_terms,
            own_node_terms: pod.own_node_terms.as_deref(),
            preferred_node_terms: &pod.preferred_node_terms,
            tolerations: &pod.tolerations,
            topology_spread: &pod.topology_spread,
            pod_affinity: &pod.pod_affinity,
            pod_anti_affinity: &pod.pod_anti_affinity,
            preferred_pod_affinity: &pod.preferred_pod_affinity,
            preferred_pod_anti_affinity: &pod.preferred_pod_anti_affinity,
            host_ports: &pod.host_ports,
        }
    }
}

impl Scheduler<'_> {
    /// nodeSelector ∧ the chosen required node-affinity term.
    pub(super) fn pod_base_requirements(pod: &Pod, term: usize) -> Requirements {
        let mut reqs = Requirements::new();
        for (k, v) in &pod.node_selector {
            reqs.add(k, ValueSet::in_values([v.clone()]));
        }
        if let Some(t) = pod.required_node_terms.get(term) {
            reqs = reqs.intersect(&Requirements::from_node_requirements(t));
        }
        reqs
    }

    /// Groups every pod class could use, and counts of the bound pods in them.
    pub(super) fn build_classes(&mut self, pending: &[PodId]) {
        let mut index: FastMap<ClassKey<'_>, ClassId> = FastMap::default();
        for &p in pending {
            let pod = self.pod(p);
            let key = ClassKey::of(pod);
            let c = match index.get(&key) {
                Some(&c) => c,
                None => {
                    let c = self.classes.push(Class::of(p, pod));
                    index.insert(key, c);
                    c
                }
            };
            self.pod_class[p] = Some(c);
            let class = &mut self.classes[c];
            class.remaining.add(&pod.requests);
            let mut min = class.min_request.clone();
            for (i, name) in WELL_KNOWN.iter().enumerate() {
                let v = pod
                    .requests
                    .slot_milli(i)
                    .min(class.min_request.slot_milli(i));
                min.set_milli(name, v);
            }
            class.min_request = min;
        }
        // Every group any class may use, so counts exist before placement starts.
        for c in self.classes.ids() {
            let pod = self.pod(self.classes[c].representative);
            for spec in self.group_specs(pod, true).into_iter().flatten() {
                self.group(spec);
            }
            let ladder = self.ladder(pod);
            self.classes[c].ladder = ladder;
        }
        // Required anti-affinity of bound pods constrains pending ones too.
        let bound: Vec<PodId> = self
            .pod_ids()
            .filter(|&p| self.pod(p).node_name.is_some() && !self.pod(p).terminal)
            .collect();
        for &p in &bound {
            let pod = self.pod(p);
            for term in &pod.pod_anti_affinity {
                let key = self.topology_key(&term.topology_key);
                self.group(GroupSpec {
                    kind: GroupKind::AntiAffinity,
                    key,
                    selector: term.label_selector.clone(),
                    namespaces: Self::term_namespaces(pod, &term.namespaces),
                    filter: None,
                    required: true,
                });
            }
        }
        for c in self.classes.ids() {
            let pod = self.pod(self.classes[c].representative);
            self.classes[c].matched = self.groups_selecting(pod);
        }
        // Count bound pods where they run.
        for &p in &bound {
            let node = self.pod(p).node_name.as_deref();
            if let Some(&n) = node.and_then(|n| self.node_index.get(n)) {
                self.count_on_node(p, n, 1, GroupId::from_index(0));
            }
        }
        for c in self.classes.ids() {
            let e = self.eclass(c, 0);
            let ok = self.eclasses[e]
                .pool_fit
                .iter()
                .map(|r| r.is_ok())
                .collect();
            self.classes[c].pools_ok = ok;
        }
    }

    /// The class of pod `p`, which is placed (pending, or moved by a solve).
    pub(crate) fn class_of(&self, p: PodId) -> ClassId {
        self.pod_class[p].expect("a pod being placed has a class")
    }

    /// The compiled class `c` at relaxation `level`, built on first use.
    pub(crate) fn eclass(&mut self, c: ClassId, level: usize) -> EClassId {
        if let Some(&e) = self.eclass_index.get(&(c, level)) {
            return e;
        }
        let pod = self.pod(self.classes[c].representative);
        let relax = self.classes[c].ladder[level];
        let mut reqs = Self::pod_base_requirements(pod, relax.term);
        let mut preferred = pod.preferred_node_terms.clone();
        preferred.sort_by_key(|term| std::cmp::Reverse(term.weight));
        for term in preferred.iter().take(relax.preferred_node_terms) {
            reqs = reqs.intersect(&Requirements::from_node_requirements(&term.requirements));
        }
        let mut strict = pod.clone();
        if !relax.schedule_anyway {
            strict
                .topology_spread
                .retain(|c| c.when_unsatisfiable == WhenUnsatisfiable::DoNotSchedule);
        }
        if !relax.preferred_pod_affinity {
            strict.preferred_pod_affinity = Default::default();
        }
        if !relax.preferred_pod_anti_affinity {
            strict.preferred_pod_anti_affinity = Default::default();
        }
        let [spreads, affinity, anti] = self.group_specs(&strict, true);
        let spreads = spreads.into_iter().map(|s| self.group(s)).collect();
        let affinity = affinity.into_iter().map(|s| self.group(s)).collect();
        let anti = anti.into_iter().map(|s| self.group(s)).collect();

        let shape = self.node_shape(&reqs, &pod.tolerations, relax.tolerate_prefer_no_schedule);
        let candidates = Candidates::new(
            self.shapes[shape]
                .admitted
                .iter()
                .map(|&bin| Candidate::new(bin))
                .collect(),
        );
        let e = self.eclasses.push(EClass {
            class: c,
            reqs,
            tolerations: (*pod.tolerations).clone(),
            tolerate_prefer_no_schedule: relax.tolerate_prefer_no_schedule,
            spreads,
            affinity,
            anti,
            pool_fit: Arc::clone(&self.shapes[shape].pool_fit),
            pool_types: Arc::clone(&self.shapes[shape].pool_types),
            candidates,
            dead: 0,
        });
        self.eclass_index.insert((c, level), e);
        let upto = self.shapes[shape].admitted_upto;
        for b in self.bins.ids_from(upto) {
            self.admit(e, b);
        }
        // Bins a solve opened are not kept: the shape remembers the permanent ones.
        let permanent = self
            .undo
            .as_ref()
            .map_or(self.bins.next_id(), |u| u.base_bins);
        if permanent > upto {
            let newly: Vec<BinId> = self.eclasses[e]
                .candidates
                .iter()
                .map(|c| c.bin)
                .filter(|&b| b >= upto && b < permanent)
                .collect();
            let shape = &mut self.shapes[shape];
            shape.admitted.extend(newly);
            shape.admitted_upto = permanent;
        }
        e
    }

    /// The shared node-side compilation of requirements `reqs` with `tolerations`.
    pub(super) fn node_shape(
        &mut self,
        reqs: &Requirements,
        tolerations: &[Toleration],
        prefer_ok: bool,
    ) -> usize {
        let key = (reqs.clone(), tolerations.to_vec(), prefer_ok);
        if let Some(&s) = self.shape_index.get(&key) {
            return s;
        }
        let mut pool_fit = IdVec::new();
        let mut pool_types = IdVec::new();
        for pool in &self.pools {
            let fit = match untolerated_taint(tolerations, &pool.taints, prefer_ok) {
                Some(taint) => Err(Refusal::TaintNotTolerated(taint.clone())),
                None => pool
                    .reqs
                    .compatible_with(reqs, &|k| self.well_known.contains(k))
                    .map_err(Refusal::Incompatible),
            };
            let types = if fit.is_ok() {
                let merged = pool.reqs.intersect(reqs);
                let type_reqs = self.type_requirements(&merged);
                let mut ts: Vec<(f64, InstanceTypeId)> = pool
                    .types
                    .iter()
                    .copied()
                    .filter(|&t| self.type_meets(t, &type_reqs))
                    .filter_map(|t| {
                        self.cheapest_offering(t, &merged, None, None)
                            .map(|o| (o.price, t))
                    })
                    .collect();
                ts.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                ts.into_iter().map(|(_, t)| t).collect()
            } else {
                Vec::new()
            };
            pool_fit.push(fit);
            pool_types.push(types);
        }
        let s = self.shapes.len();
        self.shapes.push(NodeShape {
            pool_fit: Arc::new(pool_fit),
            pool_types: Arc::new(pool_types),
            admitted: Vec::new(),
            admitted_upto: BinId::from_index(0),
        });
        self.shape_index.insert(key, s);
        s
    }

    /// Adds bin `b` to class `e`'s candidates if nothing static rules it out.
    pub(super) fn admit(&mut self, e: EClassId, b: BinId) {
        let ec = &self.eclasses[e];
        let bin = &self.bins[b];
        if untolerated_taint(&ec.tolerations, &bin.taints, ec.tolerate_prefer_no_schedule).is_some()
        {
            return;
        }
        let ok = match bin.origin {
            Origin::Existing(_) | Origin::InFlight(_) => {
                // A node's labels are final: every requirement must hold on them.
                bin.reqs.is_compatible_with(&ec.reqs, &|_| false)
            }
            Origin::New(pool) => ec.pool_fit[pool].is_ok(),
        };
        if ok {
            // Bins are admitted in the order they are made, so candidates stay in bin
            // order (`commit` looks them up by binary search).
            debug_assert!(
                self.eclasses[e].candidates.last().is_none_or(|c| c.bin < b),
                "candidates in bin order"
            );
            let opened_by_solve = self.undo.as_ref().is_some_and(|u| b >= u.base_bins);
            self.eclasses[e]
                .candidates
                .push(Candidate::new(b), opened_by_solve);
            if let Some(u) = &mut self.undo
                && opened_by_solve
            {
                u.pushed.push(e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bins(candidates: &Candidates) -> Vec<usize> {
        candidates.iter().map(|c| c.bin.index()).collect()
    }

    #[test]
    fn a_candidate_keeps_its_dead_mark_and_absorbed_version_apart_in_eight_bytes() {
        assert_eq!(std::mem::size_of::<Candidate>(), 8);
        let mut c = Candidate::new(BinId::from_index(3));
        assert!(!c.dead());
        assert_eq!(c.absorbed(), Candidate::NEVER);
        c.set_absorbed(41);
        c.set_dead(true);
        assert!(c.dead());
        assert_eq!(c.absorbed(), 41);
        c.set_dead(false);
        assert_eq!((c.dead(), c.absorbed()), (false, 41));
        c.set_dead(true);
        c.set_absorbed(u32::MAX);
        assert!(c.dead(), "a version too large leaves the mark");
        assert_eq!(
            c.absorbed(),
            Candidate::NEVER,
            "and is recorded as none, so the bin is checked again"
        );
    }

    #[test]
    fn a_solves_candidates_follow_the_kept_ones_and_go_or_stay_with_the_solve() {
        let mut list = Candidates::new(
            (0..4)
                .map(|b| Candidate::new(BinId::from_index(b)))
                .collect(),
        );
        list.push(Candidate::new(BinId::from_index(6)), true);
        list.push(Candidate::new(BinId::from_index(9)), true);
        assert_eq!(bins(&list), [0, 1, 2, 3, 6, 9]);
        assert_eq!(list.len(), 6);
        assert_eq!(list[4].bin.index(), 6);
        assert_eq!(list.get(6).map(|c| c.bin), None);
        assert_eq!(list.partition_point(|c| c.bin.index() < 2), 2);
        assert_eq!(list.partition_point(|c| c.bin.index() < 7), 5);
        assert_eq!(list.last().map(|c| c.bin.index()), Some(9));
        list[5].set_dead(true);

        list.drop_opened();
        assert_eq!(bins(&list), [0, 1, 2, 3], "rolled back");
        list.push(Candidate::new(BinId::from_index(4)), true);
        list.keep_opened();
        list.push(Candidate::new(BinId::from_index(5)), false);
        assert_eq!(bins(&list), [0, 1, 2, 3, 4, 5], "kept");
        list.drop_opened();
        assert_eq!(
            list.len(),
            6,
            "a kept solve's candidates outlive the next rollback"
        );
        list[1].set_dead(true);
        list.retain(|c| !c.dead());
        assert_eq!(bins(&list), [0, 2, 3, 4, 5]);
    }
}
