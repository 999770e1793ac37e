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

#[derive(Clone)]
pub(crate) struct Candidate {
    pub(crate) bin: BinId,
    /// The bin version at which a pod of this class last joined it: while unchanged,
    /// the bin's requirements already include the class's.
    pub(crate) absorbed: u32,
    pub(crate) dead: bool,
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
    pub(crate) candidates: Vec<Candidate>,
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
        let candidates = self.shapes[shape]
            .admitted
            .iter()
            .map(|&bin| Candidate {
                bin,
                absorbed: u32::MAX,
                dead: false,
            })
            .collect();
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
                let mut ts: Vec<(f64, InstanceTypeId)> = pool
                    .types
                    .iter()
                    .copied()
                    .filter(|&t| self.type_satisfies(t, &merged))
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
            self.eclasses[e].candidates.push(Candidate {
                bin: b,
                absorbed: u32::MAX,
                dead: false,
            });
            if let Some(u) = &mut self.undo
                && b >= u.base_bins
            {
                u.pushed.push(e);
            }
        }
    }
}
