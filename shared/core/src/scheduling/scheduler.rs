//! The scheduling simulation: where would kube-scheduler put each pending pod, if
//! nodewright launched which NodeClaims?
//!
//! Pods are taken largest first (first-fit decreasing). Each pod tries, in order, the
//! existing nodes, the in-flight NodeClaims, and the NodeClaims opened so far in this
//! plan; if none can take it, a new NodeClaim is opened in the first NodePool (by
//! weight) that can. A new claim is sized by a *target* instance type chosen with the
//! dual prices of the cheapest fractional fleet for the remaining demand (see `lp`):
//! the type that buys the most of what is still needed per dollar, capped by what is
//! left to place so the tail does not get a huge node. When packing is done each claim
//! is offered every compatible type that fits its pods, cheapest first.
//!
//! Speed comes from pod *classes*: pods with identical scheduling constraints share one
//! compiled form and one candidate list of bins; a bin that can never take a class
//! again (taints, requirements, anti-affinity, full) is dropped from that list once.
//!
//! Preferences are treated as requirements first and relaxed one step at a time,
//! Karpenter's order: next required node-affinity term, preferred pod affinity,
//! preferred pod anti-affinity, preferred node affinity, ScheduleAnyway spread,
//! PreferNoSchedule taints.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::api::model::{Ec2NodeClass, NodePool, NodeRequirement, Taint, TaintEffect};
use crate::catalog::{
    CapacityType, Catalog, InstanceType, LABEL_CAPACITY_TYPE, LABEL_HOSTNAME, LABEL_NODEPOOL,
    LABEL_REGION, LABEL_ZONE, Pricing,
};
use crate::cluster::{DaemonSet, Node, Pod, Toleration, WhenUnsatisfiable};
use crate::resources::{CPU, MEMORY, PODS, Resources, WELL_KNOWN, format_milli};

use super::lp;
use super::requirements::{Requirements, ValueSet};
use super::topology::{DomainCounts, Group, GroupKind, GroupSpec, TopologyKey};

/// A NodeClaim that has been launched but whose node has not registered yet: pending
/// pods that fit it are counted against it instead of launching more.
#[derive(Debug, Clone, PartialEq)]
pub struct InFlightClaim {
    pub name: String,
    pub node_pool: String,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: CapacityType,
    /// Pods ("namespace/name") the claim was launched for. While still pending they are
    /// placed on it first (Karpenter's nomination): re-packing them in another order
    /// could leave some over and launch more capacity on every tick.
    pub pods: Vec<String>,
}

pub struct SchedulerInput<'a> {
    /// Every pod of the cluster: pending ones are placed, bound ones count against
    /// their node and in topology.
    pub pods: &'a [Pod],
    pub nodes: &'a [Node],
    pub daemonsets: &'a [DaemonSet],
    pub node_pools: &'a [NodePool],
    /// The EC2NodeClasses the pools name: their kubelet settings size new nodes. A pool
    /// whose class is not here plans with the catalog's allocatable.
    pub node_classes: &'a [Ec2NodeClass],
    pub catalog: &'a Catalog,
    pub pricing: &'a Pricing,
    pub in_flight: &'a [InFlightClaim],
}

/// One instance type a new claim may launch as, with its cheapest allowed offering.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimOption {
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: CapacityType,
    pub price: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NewClaim {
    pub node_pool: String,
    /// Indices into `SchedulerInput::pods`.
    pub pods: Vec<usize>,
    pub requests: Resources,
    /// The claim's requirements: the NodePool's, narrowed by its pods'.
    pub requirements: Requirements,
    /// Every compatible type that fits the pods, cheapest first; never empty.
    pub options: Vec<ClaimOption>,
    /// Zones and capacity types the claim may launch in.
    pub zones: Vec<String>,
    pub capacity_types: Vec<CapacityType>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Schedule {
    pub new_claims: Vec<NewClaim>,
    /// Pods that fit existing nodes: (node name, pod indices).
    pub existing_nodes: Vec<(String, Vec<usize>)>,
    /// Pods absorbed by in-flight claims: (claim name, pod indices).
    pub in_flight: Vec<(String, Vec<usize>)>,
    /// Pods that cannot be placed, with the constraint that stops them.
    pub unschedulable: Vec<(usize, String)>,
}

pub fn schedule(input: &SchedulerInput<'_>) -> Schedule {
    Scheduler::new(input).run()
}

// ---------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq)]
enum Origin {
    Existing(usize),
    InFlight(usize),
    New(usize),
}

struct Bin {
    origin: Origin,
    reqs: Requirements,
    /// Bumped whenever `reqs` narrows.
    version: u32,
    taints: Vec<Taint>,
    /// What pods may use in total (allocatable minus DaemonSets and bound pods).
    ceiling: Resources,
    used: Resources,
    /// New claims: the type whose size bounds the packing.
    target: Option<usize>,
    zone: Option<usize>,
    capacity_type: Option<CapacityType>,
    /// (pod index, effective class)
    pods: Vec<(usize, usize)>,
}

/// One relaxation state of a class.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Relax {
    term: usize,
    preferred_pod_affinity: bool,
    preferred_pod_anti_affinity: bool,
    preferred_node_terms: usize,
    schedule_anyway: bool,
    tolerate_prefer_no_schedule: bool,
}

/// Pods with the same scheduling constraints.
struct Class {
    representative: usize,
    ladder: Vec<Relax>,
    /// Groups selecting this class's pods.
    matched: Vec<usize>,
    /// Element-wise minimum of the members' requests.
    min_request: Resources,
    /// Requests of members not yet placed.
    remaining: Resources,
    /// NodePools that can take the class at its strictest level.
    pools_ok: Vec<bool>,
}

struct Candidate {
    bin: usize,
    /// The bin version at which a pod of this class last joined it: while unchanged,
    /// the bin's requirements already include the class's.
    absorbed: u32,
    dead: bool,
}

/// A class at one relaxation level, compiled.
struct EClass {
    class: usize,
    reqs: Requirements,
    tolerations: Vec<Toleration>,
    tolerate_prefer_no_schedule: bool,
    spreads: Vec<usize>,
    affinity: Vec<usize>,
    anti: Vec<usize>,
    /// A constraint this planner cannot evaluate (e.g. an unsupported topology key).
    unsupported: Option<String>,
    /// Per pool: Ok, or why the class cannot use it.
    pool_fit: Vec<Result<(), String>>,
    /// Per pool: types compatible with pool ∩ class requirements, cheapest first.
    pool_types: Vec<Vec<usize>>,
    candidates: Vec<Candidate>,
    dead: usize,
}

enum Fail {
    /// The bin can never take a pod of this class.
    Permanent,
    /// Not this pod, maybe a smaller one.
    Temporary,
}

struct Fit {
    merged: Option<Requirements>,
    zone: Option<usize>,
    capacity_type: Option<CapacityType>,
}

struct PoolInfo {
    reqs: Requirements,
    taints: Vec<Taint>,
    /// DaemonSet pods that would run on its nodes.
    overhead: Resources,
    /// Types compatible with the pool's requirements and offered in its zones.
    types: Vec<usize>,
    usage: Resources,
    has_min_values: bool,
    duals: Option<(Vec<usize>, Vec<f64>, Resources)>,
    /// Allocatable by catalog index under the pool's EC2NodeClass kubelet settings;
    /// `None` when they leave the catalog's as it is.
    allocatable: Option<Vec<Resources>>,
}

struct Scheduler<'a> {
    input: &'a SchedulerInput<'a>,
    zones: Vec<String>,
    well_known: HashSet<String>,
    type_keys: HashSet<String>,
    /// price[type][zone][capacity type]
    prices: Vec<Vec<[Option<f64>; 2]>>,
    pools: Vec<PoolInfo>,
    pool_order: Vec<usize>,
    bins: Vec<Bin>,
    groups: Vec<Group>,
    group_index: HashMap<GroupSpec, usize>,
    classes: Vec<Class>,
    pod_class: Vec<usize>,
    eclasses: Vec<EClass>,
    eclass_index: HashMap<(usize, usize), usize>,
    any_prefer_no_schedule: bool,
    zone_use: Vec<u32>,
}

fn ct_index(ct: CapacityType) -> usize {
    match ct {
        CapacityType::Spot => 0,
        CapacityType::OnDemand => 1,
    }
}

fn tolerates_all(
    tolerations: &[Toleration],
    taints: &[Taint],
    prefer_ok: bool,
) -> Result<(), String> {
    for taint in taints {
        if taint.effect == TaintEffect::PreferNoSchedule && prefer_ok {
            continue;
        }
        if !tolerations.iter().any(|t| t.tolerates(taint)) {
            let value = taint
                .value
                .as_deref()
                .map(|v| format!("={v}"))
                .unwrap_or_default();
            return Err(format!(
                "taint {}{}:{} not tolerated",
                taint.key,
                value,
                taint.effect.as_str()
            ));
        }
    }
    Ok(())
}

impl<'a> Scheduler<'a> {
    fn new(input: &'a SchedulerInput<'a>) -> Self {
        let catalog = input.catalog;
        let mut zones = input.pricing.zones.clone();
        for node in input.nodes {
            if let Some(z) = node.labels.get(LABEL_ZONE) {
                if !zones.contains(z) {
                    zones.push(z.clone());
                }
            }
        }
        let offered_zones = input.pricing.zones.len();
        let prices: Vec<Vec<[Option<f64>; 2]>> = catalog
            .types
            .iter()
            .map(|t| {
                (0..zones.len())
                    .map(|z| {
                        if z >= offered_zones {
                            return [None, None];
                        }
                        CapacityType::ALL.map(|ct| input.pricing.price(t, &zones[z], ct))
                    })
                    .collect()
            })
            .collect();
        let type_keys = catalog.label_keys();
        let mut well_known = type_keys.clone();
        for k in [
            LABEL_ZONE,
            LABEL_REGION,
            LABEL_CAPACITY_TYPE,
            LABEL_NODEPOOL,
            LABEL_HOSTNAME,
        ] {
            well_known.insert(k.to_string());
        }
        let any_prefer_no_schedule = input
            .node_pools
            .iter()
            .flat_map(|p| p.taints.iter())
            .chain(input.nodes.iter().flat_map(|n| n.taints.iter()))
            .any(|t| t.effect == TaintEffect::PreferNoSchedule);
        let mut s = Scheduler {
            input,
            zones,
            well_known,
            type_keys,
            prices,
            pools: Vec::new(),
            pool_order: Vec::new(),
            bins: Vec::new(),
            groups: Vec::new(),
            group_index: HashMap::new(),
            classes: Vec::new(),
            pod_class: vec![usize::MAX; input.pods.len()],
            eclasses: Vec::new(),
            eclass_index: HashMap::new(),
            any_prefer_no_schedule,
            zone_use: Vec::new(),
        };
        s.zone_use = vec![0; s.zones.len()];
        s.build_pools();
        s.build_existing_bins();
        s.build_in_flight_bins();
        s
    }

    // ----- setup -----------------------------------------------------------------

    fn pool_requirements(pool: &NodePool) -> Requirements {
        let mut reqs = Requirements::from_node_requirements(&pool.requirements);
        for (k, v) in &pool.labels {
            reqs.add(k, ValueSet::in_values([v.clone()]));
        }
        reqs.add(LABEL_NODEPOOL, ValueSet::in_values([pool.name.clone()]));
        reqs
    }

    fn build_pools(&mut self) {
        let input = self.input;
        for pool in input.node_pools {
            let reqs = Self::pool_requirements(pool);
            let types: Vec<usize> = (0..input.catalog.types.len())
                .filter(|&t| {
                    self.type_satisfies(t, &reqs)
                        && self.cheapest_offering(t, &reqs, None, None).is_some()
                })
                .collect();
            let mut overhead = Resources::new();
            for ds in input.daemonsets {
                let tpl = &ds.template;
                let fits_taints = tolerates_all(&tpl.tolerations, &pool.taints, true).is_ok();
                let ds_reqs = Self::pod_base_requirements(tpl, 0);
                if fits_taints
                    && reqs
                        .compatible_with(&ds_reqs, &|k| self.well_known.contains(k))
                        .is_ok()
                {
                    overhead.add(&tpl.requests);
                }
            }
            let mut usage = Resources::new();
            for node in input.nodes {
                if node.labels.get(LABEL_NODEPOOL) == Some(&pool.name) {
                    usage.add(&node.capacity);
                    usage.set_milli("nodes", usage.get_milli("nodes") + 1000);
                }
            }
            for c in input.in_flight.iter().filter(|c| c.node_pool == pool.name) {
                if let Some(t) = input.catalog.get(&c.instance_type) {
                    usage.add(&t.capacity);
                    usage.set_milli("nodes", usage.get_milli("nodes") + 1000);
                }
            }
            let has_min_values = pool.requirements.iter().any(|r| r.min_values.is_some());
            let allocatable = input
                .node_classes
                .iter()
                .find(|c| c.name == pool.node_class_ref.name)
                .and_then(|class| crate::density::class_allocatable(input.catalog, class));
            self.pools.push(PoolInfo {
                reqs,
                taints: pool.taints.clone(),
                overhead,
                types,
                usage,
                has_min_values,
                duals: None,
                allocatable,
            });
        }
        let mut order: Vec<usize> = (0..input.node_pools.len()).collect();
        order.sort_by(|&a, &b| {
            let (pa, pb) = (&input.node_pools[a], &input.node_pools[b]);
            pb.weight
                .cmp(&pa.weight)
                .then_with(|| pa.name.cmp(&pb.name))
        });
        self.pool_order = order;
    }

    fn build_existing_bins(&mut self) {
        let input = self.input;
        let mut used_by_node: HashMap<&str, Resources> = HashMap::new();
        for pod in input.pods {
            if let (Some(node), false) = (&pod.node_name, pod.terminal) {
                used_by_node
                    .entry(node.as_str())
                    .or_default()
                    .add(&pod.requests);
            }
        }
        for (i, node) in input.nodes.iter().enumerate() {
            if !node.ready || node.unschedulable {
                continue;
            }
            let mut ceiling = node.allocatable.clone();
            if let Some(used) = used_by_node.get(node.name.as_str()) {
                ceiling.sub(used);
            }
            let mut labels = node.labels.clone();
            labels
                .entry(LABEL_HOSTNAME.to_string())
                .or_insert_with(|| node.name.clone());
            let zone = labels
                .get(LABEL_ZONE)
                .and_then(|z| self.zones.iter().position(|x| x == z));
            let capacity_type = labels
                .get(LABEL_CAPACITY_TYPE)
                .and_then(|c| CapacityType::parse(c));
            self.bins.push(Bin {
                origin: Origin::Existing(i),
                reqs: Requirements::from_labels(labels.iter()),
                version: 0,
                taints: node.taints.clone(),
                ceiling,
                used: Resources::new(),
                target: None,
                zone,
                capacity_type,
                pods: Vec::new(),
            });
        }
    }

    fn build_in_flight_bins(&mut self) {
        let input = self.input;
        for (i, claim) in input.in_flight.iter().enumerate() {
            let Some(pool_idx) = input
                .node_pools
                .iter()
                .position(|p| p.name == claim.node_pool)
            else {
                continue;
            };
            let Some(t) = input
                .catalog
                .types
                .iter()
                .position(|t| t.name == claim.instance_type)
            else {
                continue;
            };
            let it = &input.catalog.types[t];
            let mut labels = it.labels.clone();
            labels.insert(LABEL_ZONE.into(), claim.zone.clone());
            labels.insert(
                LABEL_CAPACITY_TYPE.into(),
                claim.capacity_type.as_str().into(),
            );
            let mut reqs = Requirements::from_labels(labels.iter());
            reqs = reqs.intersect(&self.pools[pool_idx].reqs);
            let mut ceiling = self.allocatable(pool_idx, t).clone();
            ceiling.sub(&self.pools[pool_idx].overhead);
            let zone = self.zones.iter().position(|z| *z == claim.zone);
            self.bins.push(Bin {
                origin: Origin::InFlight(i),
                reqs,
                version: 0,
                taints: self.pools[pool_idx].taints.clone(),
                ceiling,
                used: Resources::new(),
                target: Some(t),
                zone,
                capacity_type: Some(claim.capacity_type),
                pods: Vec::new(),
            });
        }
    }

    /// nodeSelector ∧ the chosen required node-affinity term.
    fn pod_base_requirements(pod: &Pod, term: usize) -> Requirements {
        let mut reqs = Requirements::new();
        for (k, v) in &pod.node_selector {
            reqs.add(k, ValueSet::in_values([v.clone()]));
        }
        if let Some(t) = pod.required_node_terms.get(term) {
            reqs = reqs.intersect(&Requirements::from_node_requirements(t));
        }
        reqs
    }

    fn group(&mut self, spec: GroupSpec) -> usize {
        if let Some(&g) = self.group_index.get(&spec) {
            return g;
        }
        let g = self.groups.len();
        self.groups.push(Group {
            spec: spec.clone(),
            counts: DomainCounts::new(self.zones.len()),
            owners: DomainCounts::new(self.zones.len()),
        });
        self.group_index.insert(spec, g);
        g
    }

    /// Groups every pod class could use, and counts of the bound pods in them.
    fn build_classes(&mut self, pending: &[usize]) {
        let pods = self.input.pods;
        let mut index: HashMap<ClassKey<'_>, usize> = HashMap::new();
        for &p in pending {
            let key = ClassKey::of(&pods[p]);
            let c = match index.get(&key) {
                Some(&c) => c,
                None => {
                    let c = self.classes.len();
                    index.insert(key, c);
                    self.classes.push(Class {
                        representative: p,
                        ladder: Vec::new(),
                        matched: Vec::new(),
                        min_request: pods[p].requests.clone(),
                        remaining: Resources::new(),
                        pools_ok: Vec::new(),
                    });
                    c
                }
            };
            self.pod_class[p] = c;
            let class = &mut self.classes[c];
            class.remaining.add(&pods[p].requests);
            let mut min = class.min_request.clone();
            for (i, name) in WELL_KNOWN.iter().enumerate() {
                let v = pods[p]
                    .requests
                    .slot_milli(i)
                    .min(class.min_request.slot_milli(i));
                min.set_milli(name, v);
            }
            class.min_request = min;
        }
        // Every group any class may use, so counts exist before placement starts.
        for c in 0..self.classes.len() {
            let pod = &pods[self.classes[c].representative];
            for spec in Self::group_specs(pod, true).into_iter().flatten() {
                self.group(spec);
            }
            let ladder = self.ladder(pod);
            self.classes[c].ladder = ladder;
        }
        // Anti-affinity of bound pods constrains pending ones too.
        let bound: Vec<usize> = (0..pods.len())
            .filter(|&p| pods[p].node_name.is_some() && !pods[p].terminal)
            .collect();
        for &p in &bound {
            for term in &pods[p].pod_anti_affinity {
                if let Some(key) = TopologyKey::parse(&term.topology_key) {
                    self.group(GroupSpec {
                        kind: GroupKind::AntiAffinity,
                        key,
                        selector: term.label_selector.clone(),
                        namespaces: Self::term_namespaces(&pods[p], &term.namespaces),
                    });
                }
            }
        }
        for c in 0..self.classes.len() {
            let pod = &pods[self.classes[c].representative];
            let matched: Vec<usize> = (0..self.groups.len())
                .filter(|&g| self.groups[g].spec.selects(&pod.namespace, &pod.labels))
                .collect();
            self.classes[c].matched = matched;
        }
        // Count bound pods where they run.
        let node_bins: HashMap<&str, usize> = self
            .bins
            .iter()
            .enumerate()
            .filter_map(|(b, bin)| match bin.origin {
                Origin::Existing(n) => Some((self.input.nodes[n].name.as_str(), b)),
                _ => None,
            })
            .collect();
        let node_by_name: HashMap<&str, &Node> = self
            .input
            .nodes
            .iter()
            .map(|n| (n.name.as_str(), n))
            .collect();
        for &p in &bound {
            let pod = &pods[p];
            let Some(node) = pod.node_name.as_deref().and_then(|n| node_by_name.get(n)) else {
                continue;
            };
            let zone = node
                .labels
                .get(LABEL_ZONE)
                .and_then(|z| self.zones.iter().position(|x| x == z));
            let ct = node
                .labels
                .get(LABEL_CAPACITY_TYPE)
                .and_then(|c| CapacityType::parse(c));
            // Host counts for nodes that are not bins (not ready) use a private index
            // past every bin; they can never be chosen, so only their zone counts matter.
            let host = node_bins.get(node.name.as_str()).copied();
            for g in 0..self.groups.len() {
                let selects = self.groups[g].spec.selects(&pod.namespace, &pod.labels);
                let owns = self.groups[g].spec.kind == GroupKind::AntiAffinity
                    && pod.pod_anti_affinity.iter().any(|t| {
                        TopologyKey::parse(&t.topology_key) == Some(self.groups[g].spec.key)
                            && t.label_selector == self.groups[g].spec.selector
                    });
                for (hit, counts) in [(selects, 0), (owns, 1)] {
                    if !hit {
                        continue;
                    }
                    let group = &mut self.groups[g];
                    let dc = if counts == 0 {
                        &mut group.counts
                    } else {
                        &mut group.owners
                    };
                    if let Some(z) = zone {
                        dc.zone[z] += 1;
                    }
                    if let Some(ct) = ct {
                        dc.capacity_type[ct_index(ct)] += 1;
                    }
                    if let Some(h) = host {
                        dc.add_host(h);
                    }
                }
            }
        }
        for c in 0..self.classes.len() {
            let e = self.eclass(c, 0);
            let ok: Vec<bool> = self.eclasses[e]
                .pool_fit
                .iter()
                .map(|r| r.is_ok())
                .collect();
            self.classes[c].pools_ok = ok;
        }
    }

    fn term_namespaces(pod: &Pod, namespaces: &[String]) -> Vec<String> {
        if namespaces.is_empty() {
            vec![pod.namespace.clone()]
        } else {
            namespaces.to_vec()
        }
    }

    /// The groups of a pod's constraints: [spreads, affinity, anti-affinity]; with
    /// `all`, preferred terms and ScheduleAnyway spreads included.
    fn group_specs(pod: &Pod, all: bool) -> [Vec<GroupSpec>; 3] {
        let mut spreads = Vec::new();
        for c in &pod.topology_spread {
            if c.when_unsatisfiable == WhenUnsatisfiable::ScheduleAnyway && !all {
                continue;
            }
            if let Some(key) = TopologyKey::parse(&c.topology_key) {
                spreads.push(GroupSpec {
                    kind: GroupKind::Spread {
                        max_skew: c.max_skew.max(1),
                        min_domains: c.min_domains.unwrap_or(1),
                    },
                    key,
                    selector: c.label_selector.clone(),
                    namespaces: vec![pod.namespace.clone()],
                });
            }
        }
        let terms = |required: &[crate::cluster::PodAffinityTerm],
                     preferred: &[crate::cluster::WeightedPodAffinityTerm],
                     kind: GroupKind| {
            required
                .iter()
                .chain(preferred.iter().filter(|_| all).map(|w| &w.term))
                .filter_map(|t| {
                    TopologyKey::parse(&t.topology_key).map(|key| GroupSpec {
                        kind,
                        key,
                        selector: t.label_selector.clone(),
                        namespaces: Self::term_namespaces(pod, &t.namespaces),
                    })
                })
                .collect::<Vec<_>>()
        };
        let affinity = terms(
            &pod.pod_affinity,
            &pod.preferred_pod_affinity,
            GroupKind::Affinity,
        );
        let anti = terms(
            &pod.pod_anti_affinity,
            &pod.preferred_pod_anti_affinity,
            GroupKind::AntiAffinity,
        );
        [spreads, affinity, anti]
    }

    fn ladder(&self, pod: &Pod) -> Vec<Relax> {
        let mut state = Relax {
            term: 0,
            preferred_pod_affinity: !pod.preferred_pod_affinity.is_empty(),
            preferred_pod_anti_affinity: !pod.preferred_pod_anti_affinity.is_empty(),
            preferred_node_terms: pod.preferred_node_terms.len(),
            schedule_anyway: pod
                .topology_spread
                .iter()
                .any(|c| c.when_unsatisfiable == WhenUnsatisfiable::ScheduleAnyway),
            tolerate_prefer_no_schedule: false,
        };
        let mut ladder = vec![state];
        while state.term + 1 < pod.required_node_terms.len() {
            state.term += 1;
            ladder.push(state);
        }
        if state.preferred_pod_affinity {
            state.preferred_pod_affinity = false;
            ladder.push(state);
        }
        if state.preferred_pod_anti_affinity {
            state.preferred_pod_anti_affinity = false;
            ladder.push(state);
        }
        while state.preferred_node_terms > 0 {
            state.preferred_node_terms -= 1;
            ladder.push(state);
        }
        if state.schedule_anyway {
            state.schedule_anyway = false;
            ladder.push(state);
        }
        if self.any_prefer_no_schedule {
            state.tolerate_prefer_no_schedule = true;
            ladder.push(state);
        }
        ladder
    }

    /// The compiled class `c` at relaxation `level`, built on first use.
    fn eclass(&mut self, c: usize, level: usize) -> usize {
        if let Some(&e) = self.eclass_index.get(&(c, level)) {
            return e;
        }
        let pod = &self.input.pods[self.classes[c].representative];
        let relax = self.classes[c].ladder[level];
        let mut reqs = Self::pod_base_requirements(pod, relax.term);
        let mut preferred = pod.preferred_node_terms.clone();
        preferred.sort_by(|a, b| b.weight.cmp(&a.weight));
        for term in preferred.iter().take(relax.preferred_node_terms) {
            reqs = reqs.intersect(&Requirements::from_node_requirements(&term.requirements));
        }
        let mut unsupported = None;
        for c in &pod.topology_spread {
            if TopologyKey::parse(&c.topology_key).is_none()
                && (c.when_unsatisfiable == WhenUnsatisfiable::DoNotSchedule
                    || relax.schedule_anyway)
            {
                unsupported = Some(format!(
                    "topology spread on {} is not supported (zone, capacity type and hostname are)",
                    c.topology_key
                ));
            }
        }
        for t in pod.pod_affinity.iter().chain(pod.pod_anti_affinity.iter()) {
            if TopologyKey::parse(&t.topology_key).is_none() {
                unsupported = Some(format!(
                    "pod (anti-)affinity on {} is not supported (zone, capacity type and hostname are)",
                    t.topology_key
                ));
            }
        }
        let mut strict = pod.clone();
        if !relax.schedule_anyway {
            strict
                .topology_spread
                .retain(|c| c.when_unsatisfiable == WhenUnsatisfiable::DoNotSchedule);
        }
        if !relax.preferred_pod_affinity {
            strict.preferred_pod_affinity.clear();
        }
        if !relax.preferred_pod_anti_affinity {
            strict.preferred_pod_anti_affinity.clear();
        }
        let [spreads, affinity, anti] = Self::group_specs(&strict, true);
        let spreads = spreads.into_iter().map(|s| self.group(s)).collect();
        let affinity = affinity.into_iter().map(|s| self.group(s)).collect();
        let anti = anti.into_iter().map(|s| self.group(s)).collect();

        let mut pool_fit = Vec::with_capacity(self.pools.len());
        let mut pool_types = Vec::with_capacity(self.pools.len());
        for (pi, pool) in self.pools.iter().enumerate() {
            let fit = tolerates_all(
                &pod.tolerations,
                &pool.taints,
                relax.tolerate_prefer_no_schedule,
            )
            .and_then(|_| {
                pool.reqs
                    .compatible_with(&reqs, &|k| self.well_known.contains(k))
            })
            .map_err(|e| format!("NodePool \"{}\": {e}", self.input.node_pools[pi].name));
            let types = if fit.is_ok() {
                let merged = pool.reqs.intersect(&reqs);
                let mut ts: Vec<(f64, usize)> = pool
                    .types
                    .iter()
                    .copied()
                    .filter(|&t| self.type_satisfies(t, &merged))
                    .filter_map(|t| {
                        self.cheapest_offering(t, &merged, None, None)
                            .map(|(_, _, p)| (p, t))
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
        let e = self.eclasses.len();
        self.eclasses.push(EClass {
            class: c,
            reqs,
            tolerations: pod.tolerations.clone(),
            tolerate_prefer_no_schedule: relax.tolerate_prefer_no_schedule,
            spreads,
            affinity,
            anti,
            unsupported,
            pool_fit,
            pool_types,
            candidates: Vec::new(),
            dead: 0,
        });
        self.eclass_index.insert((c, level), e);
        for b in 0..self.bins.len() {
            self.admit(e, b);
        }
        e
    }

    /// Adds bin `b` to class `e`'s candidates if nothing static rules it out.
    fn admit(&mut self, e: usize, b: usize) {
        let ec = &self.eclasses[e];
        let bin = &self.bins[b];
        if tolerates_all(&ec.tolerations, &bin.taints, ec.tolerate_prefer_no_schedule).is_err() {
            return;
        }
        let ok = match bin.origin {
            Origin::Existing(_) | Origin::InFlight(_) => {
                // A node's labels are final: every requirement must hold on them.
                bin.reqs.compatible_with(&ec.reqs, &|_| false).is_ok()
            }
            Origin::New(pool) => ec.pool_fit[pool].is_ok(),
        };
        if ok {
            self.eclasses[e].candidates.push(Candidate {
                bin: b,
                absorbed: u32::MAX,
                dead: false,
            });
        }
    }

    // ----- instance types and offerings -------------------------------------------

    /// Whether type `t`'s labels satisfy every requirement on a key instance types carry.
    fn type_satisfies(&self, t: usize, reqs: &Requirements) -> bool {
        let it = &self.input.catalog.types[t];
        reqs.iter().all(|(k, set)| {
            if !self.type_keys.contains(k) {
                return true;
            }
            match it.labels.get(k) {
                Some(v) => set.has(v),
                None => set.allows_absent(),
            }
        })
    }

    /// Cheapest (zone, capacity type, price) of type `t` allowed by `reqs`, optionally
    /// restricted further to zone set `zones` / capacity types `cts` (bit masks).
    fn cheapest_offering(
        &self,
        t: usize,
        reqs: &Requirements,
        zones: Option<&[bool]>,
        cts: Option<[bool; 2]>,
    ) -> Option<(usize, CapacityType, f64)> {
        let zone_set = reqs.get(LABEL_ZONE);
        let ct_set = reqs.get(LABEL_CAPACITY_TYPE);
        let mut best: Option<(usize, CapacityType, f64)> = None;
        for (z, by_ct) in self.prices[t].iter().enumerate() {
            if zones.is_some_and(|m| !m[z]) || zone_set.is_some_and(|s| !s.has(&self.zones[z])) {
                continue;
            }
            for ct in CapacityType::ALL {
                if cts.is_some_and(|m| !m[ct_index(ct)])
                    || ct_set.is_some_and(|s| !s.has(ct.as_str()))
                {
                    continue;
                }
                if let Some(p) = by_ct[ct_index(ct)] {
                    let better = match best {
                        None => true,
                        Some((bz, _, bp)) => {
                            p < bp - 1e-12
                                || (p <= bp + 1e-12 && self.zone_use[z] < self.zone_use[bz])
                        }
                    };
                    if better {
                        best = Some((z, ct, p));
                    }
                }
            }
        }
        best
    }

    /// What type `t` offers pods in `pool`: the catalog's allocatable, or the one the
    /// pool's EC2NodeClass kubelet settings give.
    fn allocatable(&self, pool: usize, t: usize) -> &Resources {
        match &self.pools[pool].allocatable {
            Some(per_type) => &per_type[t],
            None => &self.input.catalog.types[t].allocatable,
        }
    }

    fn usable(&self, t: usize, pool: usize) -> Resources {
        let mut r = self.allocatable(pool, t).clone();
        r.sub(&self.pools[pool].overhead);
        r
    }

    fn within_limits(&self, pool: usize, it: &InstanceType) -> Result<(), String> {
        let Some(limits) = &self.input.node_pools[pool].limits else {
            return Ok(());
        };
        for (name, limit) in limits.iter() {
            let add = if name == "nodes" {
                1000
            } else {
                it.capacity.get_milli(name)
            };
            // Saturating: a limit written as "no limit" sits at the quantity ceiling.
            let used = self.pools[pool].usage.get_milli(name).saturating_add(add);
            if used > limit {
                return Err(format!(
                    "NodePool \"{}\" limits: {name} would reach {} of {}",
                    self.input.node_pools[pool].name,
                    format_milli(name, used),
                    format_milli(name, limit)
                ));
            }
        }
        Ok(())
    }

    /// Distinct values of each minValues key among types fitting `requests` under `reqs`.
    fn min_values_ok(
        &self,
        pool: usize,
        reqs: &Requirements,
        requests: &Resources,
    ) -> Result<(), String> {
        for (key, set) in reqs.iter() {
            let Some(min) = set.min_values else { continue };
            let mut seen: HashSet<&str> = HashSet::new();
            for &t in &self.pools[pool].types {
                if !requests.fits_in(&self.usable(t, pool)) || !self.type_satisfies(t, reqs) {
                    continue;
                }
                if self.cheapest_offering(t, reqs, None, None).is_none() {
                    continue;
                }
                if let Some(v) = self.input.catalog.types[t].labels.get(key) {
                    seen.insert(v);
                }
                if seen.len() >= min as usize {
                    break;
                }
            }
            if seen.len() < min as usize {
                return Err(format!(
                    "NodePool \"{}\": minValues {min} for {key} cannot be met (only {} distinct values fit)",
                    self.input.node_pools[pool].name,
                    seen.len()
                ));
            }
        }
        Ok(())
    }

    // ----- topology ------------------------------------------------------------------

    /// Zones (or capacity types) where the pod may go given its constraints on `key`,
    /// as a mask; `None` when it has no constraint on that key.
    fn allowed_domains(
        &self,
        e: usize,
        pod: usize,
        key: TopologyKey,
        domain_mask: &[bool],
    ) -> Option<Vec<bool>> {
        let ec = &self.eclasses[e];
        let p = &self.input.pods[pod];
        let n = domain_mask.len();
        let count = |dc: &DomainCounts, d: usize| -> u32 {
            match key {
                TopologyKey::Zone => dc.zone[d],
                TopologyKey::CapacityType => dc.capacity_type[d],
                TopologyKey::Hostname => 0,
            }
        };
        let mut allowed: Option<Vec<bool>> = None;
        let mut restrict = |mask: Vec<bool>| {
            allowed = Some(match allowed.take() {
                None => mask,
                Some(a) => a.iter().zip(mask).map(|(x, y)| *x && y).collect(),
            });
        };
        for &g in &ec.spreads {
            let group = &self.groups[g];
            if group.spec.key != key {
                continue;
            }
            let GroupKind::Spread {
                max_skew,
                min_domains,
            } = group.spec.kind
            else {
                continue;
            };
            let selects = group.spec.selects(&p.namespace, &p.labels) as u32;
            let eligible: Vec<usize> = (0..n).filter(|&d| domain_mask[d]).collect();
            let min = if (eligible.len() as u32) < min_domains {
                0
            } else {
                eligible
                    .iter()
                    .map(|&d| count(&group.counts, d))
                    .min()
                    .unwrap_or(0)
            };
            restrict(
                (0..n)
                    .map(|d| domain_mask[d] && count(&group.counts, d) + selects <= min + max_skew)
                    .collect(),
            );
        }
        for &g in &ec.affinity {
            let group = &self.groups[g];
            if group.spec.key != key {
                continue;
            }
            let any = (0..n).any(|d| count(&group.counts, d) > 0);
            if !any && group.spec.selects(&p.namespace, &p.labels) {
                restrict(domain_mask.to_vec());
            } else {
                restrict(
                    (0..n)
                        .map(|d| domain_mask[d] && count(&group.counts, d) > 0)
                        .collect(),
                );
            }
        }
        for &g in &ec.anti {
            let group = &self.groups[g];
            if group.spec.key == key {
                restrict(
                    (0..n)
                        .map(|d| domain_mask[d] && count(&group.counts, d) == 0)
                        .collect(),
                );
            }
        }
        for &g in &self.classes[ec.class].matched {
            let group = &self.groups[g];
            if group.spec.key == key && group.spec.kind == GroupKind::AntiAffinity {
                restrict(
                    (0..n)
                        .map(|d| domain_mask[d] && count(&group.owners, d) == 0)
                        .collect(),
                );
            }
        }
        allowed
    }

    /// Among allowed domains, the one to pin: the least populated for the first
    /// constraint that counts on this key (keeps spread even), else the first allowed.
    fn choose_domain(
        &self,
        e: usize,
        key: TopologyKey,
        allowed: &[bool],
        usable: &[bool],
    ) -> Option<usize> {
        let ec = &self.eclasses[e];
        let g = ec
            .spreads
            .iter()
            .chain(ec.affinity.iter())
            .find(|&&g| self.groups[g].spec.key == key);
        let count = |d: usize| match (g, key) {
            (Some(&g), TopologyKey::Zone) => self.groups[g].counts.zone[d],
            (Some(&g), TopologyKey::CapacityType) => self.groups[g].counts.capacity_type[d],
            _ => 0,
        };
        (0..allowed.len())
            .filter(|&d| allowed[d] && usable[d])
            .min_by_key(|&d| {
                (
                    count(d),
                    if key == TopologyKey::Zone {
                        self.zone_use[d]
                    } else {
                        0
                    },
                    d,
                )
            })
    }

    fn hostname_ok(&self, e: usize, pod: usize, b: usize) -> Result<(), Fail> {
        let ec = &self.eclasses[e];
        let p = &self.input.pods[pod];
        for &g in &ec.spreads {
            let group = &self.groups[g];
            if group.spec.key != TopologyKey::Hostname {
                continue;
            }
            if let GroupKind::Spread { max_skew, .. } = group.spec.kind {
                // A new node could always be launched, so the global minimum is 0.
                let selects = group.spec.selects(&p.namespace, &p.labels) as u32;
                if group.counts.host(b) + selects > max_skew {
                    return Err(Fail::Permanent);
                }
            }
        }
        for &g in &ec.anti {
            let group = &self.groups[g];
            if group.spec.key == TopologyKey::Hostname && group.counts.host(b) > 0 {
                return Err(Fail::Permanent);
            }
        }
        for &g in &self.classes[ec.class].matched {
            let group = &self.groups[g];
            if group.spec.key == TopologyKey::Hostname
                && group.spec.kind == GroupKind::AntiAffinity
                && group.owners.host(b) > 0
            {
                return Err(Fail::Permanent);
            }
        }
        for &g in &ec.affinity {
            let group = &self.groups[g];
            if group.spec.key != TopologyKey::Hostname || group.counts.host(b) > 0 {
                continue;
            }
            let first = group.counts.total(TopologyKey::Hostname) == 0
                && group.spec.selects(&p.namespace, &p.labels);
            if !first {
                return Err(Fail::Temporary);
            }
        }
        Ok(())
    }

    // ----- placement -----------------------------------------------------------------

    fn try_bin(&self, e: usize, pod: usize, cand: &Candidate) -> Result<Fit, Fail> {
        let ec = &self.eclasses[e];
        let bin = &self.bins[cand.bin];
        let p = &self.input.pods[pod];
        // Capacity.
        let mut total = bin.used.clone();
        total.add(&p.requests);
        if !total.fits_in(&bin.ceiling) {
            let mut smallest = bin.used.clone();
            smallest.add(&self.classes[ec.class].min_request);
            return Err(if smallest.fits_in(&bin.ceiling) {
                Fail::Temporary
            } else {
                Fail::Permanent
            });
        }
        self.hostname_ok(e, pod, cand.bin)?;
        // Requirements: only new claims narrow; nodes were checked on admission.
        let mut merged = None;
        if let Origin::New(pool) = bin.origin {
            if cand.absorbed != bin.version {
                if bin
                    .reqs
                    .compatible_with(&ec.reqs, &|k| self.well_known.contains(k))
                    .is_err()
                {
                    return Err(Fail::Permanent);
                }
                let m = bin.reqs.intersect(&ec.reqs);
                if let Some(t) = bin.target {
                    if !self.type_satisfies(t, &m)
                        || self.cheapest_offering(t, &m, None, None).is_none()
                    {
                        return Err(Fail::Permanent);
                    }
                }
                merged = Some(m);
            }
            if self.pools[pool].has_min_values {
                let reqs = merged.as_ref().unwrap_or(&bin.reqs);
                if self.min_values_ok(pool, reqs, &total).is_err() {
                    return Err(Fail::Temporary);
                }
            }
        }
        // Zone and capacity type constraints.
        let reqs = merged.as_ref().unwrap_or(&bin.reqs);
        let zone = self.pin(e, pod, cand.bin, reqs, TopologyKey::Zone)?;
        let capacity_type = self.pin(e, pod, cand.bin, reqs, TopologyKey::CapacityType)?;
        Ok(Fit {
            merged,
            zone,
            capacity_type: capacity_type.map(|i| CapacityType::ALL[i]),
        })
    }

    /// For a pod with constraints on `key`: the domain to pin the bin to (or keep).
    fn pin(
        &self,
        e: usize,
        pod: usize,
        b: usize,
        reqs: &Requirements,
        key: TopologyKey,
    ) -> Result<Option<usize>, Fail> {
        let bin = &self.bins[b];
        let n = if key == TopologyKey::Zone {
            self.zones.len()
        } else {
            2
        };
        let all = vec![true; n];
        let Some(allowed) = self.allowed_domains(e, pod, key, &all) else {
            return Ok(None);
        };
        let current = if key == TopologyKey::Zone {
            bin.zone
        } else {
            bin.capacity_type.map(ct_index)
        };
        if let Some(d) = current {
            return if allowed[d] {
                Ok(None)
            } else {
                Err(Fail::Temporary)
            };
        }
        // Domains the bin could still be in.
        let usable: Vec<bool> = (0..n)
            .map(|d| match (key, bin.target) {
                (TopologyKey::Zone, Some(t)) => {
                    let mut m = vec![false; n];
                    m[d] = true;
                    self.cheapest_offering(t, reqs, Some(&m), None).is_some()
                }
                (TopologyKey::Zone, None) => {
                    reqs.get(LABEL_ZONE).is_none_or(|s| s.has(&self.zones[d]))
                }
                (_, Some(t)) => {
                    let mut m = [false; 2];
                    m[d] = true;
                    self.cheapest_offering(t, reqs, None, Some(m)).is_some()
                }
                (_, None) => reqs
                    .get(LABEL_CAPACITY_TYPE)
                    .is_none_or(|s| s.has(CapacityType::ALL[d].as_str())),
            })
            .collect();
        match self.choose_domain(e, key, &allowed, &usable) {
            Some(d) => Ok(Some(d)),
            None => Err(Fail::Temporary),
        }
    }

    fn commit(&mut self, e: usize, pod: usize, b: usize, fit: Fit) {
        let p = &self.input.pods[pod];
        let class = self.eclasses[e].class;
        let bin = &mut self.bins[b];
        bin.used.add(&p.requests);
        if let Some(m) = fit.merged {
            if m != bin.reqs {
                bin.reqs = m;
                bin.version += 1;
            }
        }
        bin.pods.push((pod, e));
        self.classes[class].remaining.sub(&p.requests);
        // Count this pod in its domains, then pin (which counts earlier pods too).
        self.count_pod(e, TopologyKey::Hostname, b);
        if let Some(z) = self.bins[b].zone {
            self.count_pod(e, TopologyKey::Zone, z);
        }
        if let Some(ct) = self.bins[b].capacity_type {
            self.count_pod(e, TopologyKey::CapacityType, ct_index(ct));
        }
        if let Some(z) = fit.zone {
            self.pin_bin(b, TopologyKey::Zone, z);
        }
        if let Some(ct) = fit.capacity_type {
            self.pin_bin(b, TopologyKey::CapacityType, ct_index(ct));
        }
        let version = self.bins[b].version;
        if let Some(c) = self.eclasses[e].candidates.iter_mut().find(|c| c.bin == b) {
            c.absorbed = version;
        }
    }

    /// Counts a pod of class `e` in `domain`: in every group that selects it, and as an
    /// owner in its own anti-affinity groups.
    fn count_pod(&mut self, e: usize, key: TopologyKey, domain: usize) {
        let class = self.eclasses[e].class;
        for i in 0..self.classes[class].matched.len() {
            let g = self.classes[class].matched[i];
            if self.groups[g].spec.key == key {
                bump(&mut self.groups[g].counts, key, domain);
            }
        }
        for i in 0..self.eclasses[e].anti.len() {
            let g = self.eclasses[e].anti[i];
            if self.groups[g].spec.key == key {
                bump(&mut self.groups[g].owners, key, domain);
            }
        }
    }

    fn pin_bin(&mut self, b: usize, key: TopologyKey, domain: usize) {
        let label = key.label();
        let value = match key {
            TopologyKey::Zone => self.zones[domain].clone(),
            _ => CapacityType::ALL[domain].as_str().to_string(),
        };
        let bin = &mut self.bins[b];
        match key {
            TopologyKey::Zone => {
                if bin.zone.is_some() {
                    return;
                }
                bin.zone = Some(domain);
            }
            _ => {
                if bin.capacity_type.is_some() {
                    return;
                }
                bin.capacity_type = Some(CapacityType::ALL[domain]);
            }
        }
        bin.reqs.add(label, ValueSet::in_values([value]));
        bin.version += 1;
        let members = bin.pods.clone();
        for (_, e) in members {
            self.count_pod(e, key, domain);
        }
    }

    fn place(&mut self, e: usize, pod: usize) -> Result<(), String> {
        if let Some(reason) = &self.eclasses[e].unsupported {
            return Err(reason.clone());
        }
        let mut i = 0;
        while i < self.eclasses[e].candidates.len() {
            if self.eclasses[e].candidates[i].dead {
                i += 1;
                continue;
            }
            let cand = &self.eclasses[e].candidates[i];
            match self.try_bin(e, pod, cand) {
                Ok(fit) => {
                    let b = cand.bin;
                    self.commit(e, pod, b, fit);
                    return Ok(());
                }
                Err(Fail::Permanent) => {
                    let ec = &mut self.eclasses[e];
                    ec.candidates[i].dead = true;
                    ec.dead += 1;
                }
                Err(Fail::Temporary) => {}
            }
            i += 1;
        }
        let ec = &mut self.eclasses[e];
        if ec.dead > 64 && ec.dead * 2 > ec.candidates.len() {
            ec.candidates.retain(|c| !c.dead);
            ec.dead = 0;
        }
        self.open_claim(e, pod)
    }

    fn open_claim(&mut self, e: usize, pod: usize) -> Result<(), String> {
        let mut reasons: Vec<String> = Vec::new();
        for oi in 0..self.pool_order.len() {
            let pool = self.pool_order[oi];
            if let Err(r) = &self.eclasses[e].pool_fit[pool] {
                reasons.push(r.clone());
                continue;
            }
            match self.open_in_pool(e, pod, pool) {
                Ok(()) => return Ok(()),
                Err(r) => reasons.push(r),
            }
        }
        if reasons.is_empty() {
            reasons.push("no NodePool is defined".into());
        }
        Err(reasons.join("; "))
    }

    fn open_in_pool(&mut self, e: usize, pod: usize, pool: usize) -> Result<(), String> {
        let p = &self.input.pods[pod];
        let pool_name = &self.input.node_pools[pool].name;
        // Hostname affinity to pods that already run somewhere: a new node cannot help.
        for &g in &self.eclasses[e].affinity {
            let group = &self.groups[g];
            if group.spec.key == TopologyKey::Hostname
                && group.counts.total(TopologyKey::Hostname) > 0
            {
                return Err(format!(
                    "{}: no node with a matching pod has room",
                    group.spec.describe()
                ));
            }
        }
        let reqs = self.pools[pool].reqs.intersect(&self.eclasses[e].reqs);
        let zmask = self.allowed_domains(e, pod, TopologyKey::Zone, &vec![true; self.zones.len()]);
        let cmask = self.allowed_domains(e, pod, TopologyKey::CapacityType, &[true, true]);
        let cmask_arr = cmask.as_ref().map(|m| [m[0], m[1]]);
        if zmask.as_ref().is_some_and(|m| !m.iter().any(|x| *x))
            || cmask_arr.is_some_and(|m| !m[0] && !m[1])
        {
            return Err(format!(
                "{} cannot be satisfied",
                self.topology_description(e)
            ));
        }
        self.refresh_duals(pool);
        let mut need = p.requests.clone();
        need.add(&self.pools[pool].overhead);
        let remaining = self.compatible_remaining(pool);
        let mut best: Option<(f64, f64, usize, usize, CapacityType, f64)> = None;
        // The cheapest single node that could hold everything still to place.
        let mut whole_best: Option<(f64, usize, usize, CapacityType)> = None;
        let mut whole = remaining.clone();
        whole.add(&self.pools[pool].overhead);
        let mut shortfall: Option<(String, i64, i64)> = None;
        let mut limit_reason = None;
        let mut offering_missing = false;
        let types = std::mem::take(&mut self.eclasses[e].pool_types[pool]);
        for &t in &types {
            let it = &self.input.catalog.types[t];
            if !need.fits_in(self.allocatable(pool, t)) {
                if let Some(s) = p.requests.first_shortfall(&self.usable(t, pool)) {
                    if shortfall.as_ref().is_none_or(|b| s.2 > b.2 || b.0 != s.0) {
                        shortfall = Some(s);
                    }
                }
                continue;
            }
            let Some((z, ct, price)) =
                self.cheapest_offering(t, &reqs, zmask.as_deref(), cmask_arr)
            else {
                offering_missing = true;
                continue;
            };
            if let Err(r) = self.within_limits(pool, it) {
                limit_reason = Some(r);
                continue;
            }
            let (value, size) = self.value(pool, t, &remaining, &p.requests);
            if whole.fits_in(self.allocatable(pool, t)) && whole_best.is_none_or(|w| price < w.0) {
                whole_best = Some((price, t, z, ct));
            }
            let score = if price > 0.0 {
                value / price
            } else {
                f64::INFINITY
            };
            let better = match best {
                None => true,
                Some((bs, bsize, ..)) => {
                    score > bs * (1.0 + 1e-9) || (score >= bs * (1.0 - 1e-9) && size > bsize)
                }
            };
            if better {
                best = Some((score, size, t, z, ct, price));
            }
        }
        self.eclasses[e].pool_types[pool] = types;
        // The tail: one node for everything that remains, when that is cheaper than
        // the whole nodes of the most efficient type it would otherwise take.
        if let (Some((whole_price, wt, wz, wct)), Some((_, _, bt, _, _, bprice))) =
            (whole_best, best)
        {
            let usable = self.usable(bt, pool);
            let nodes = (0..WELL_KNOWN.len())
                .filter(|&d| remaining.slot_milli(d) > 0)
                .map(|d| remaining.slot_milli(d) as f64 / usable.slot_milli(d).max(1) as f64)
                .fold(1.0f64, f64::max)
                .ceil();
            if whole_price <= nodes * bprice {
                best = Some((0.0, 0.0, wt, wz, wct, whole_price));
            }
        }
        let Some((_, _, t, z, ct, _)) = best else {
            if let Some(r) = limit_reason {
                return Err(r);
            }
            if offering_missing {
                if zmask.is_some() || cmask.is_some() {
                    return Err(format!(
                        "{} cannot be satisfied in NodePool \"{pool_name}\"",
                        self.topology_description(e)
                    ));
                }
                return Err(format!(
                    "NodePool \"{pool_name}\": no offering in an allowed zone and capacity type"
                ));
            }
            if let Some((name, want, have)) = shortfall {
                return Err(format!(
                    "NodePool \"{pool_name}\": no instance type has enough {name} (requested {}, largest allocatable after DaemonSets {})",
                    format_milli(&name, want),
                    format_milli(&name, have.max(0))
                ));
            }
            return Err(format!(
                "NodePool \"{pool_name}\": no instance type matches the pod's requirements"
            ));
        };
        if self.pools[pool].has_min_values {
            self.min_values_ok(pool, &reqs, &p.requests)?;
        }
        let it = &self.input.catalog.types[t];
        let mut ceiling = self.allocatable(pool, t).clone();
        ceiling.sub(&self.pools[pool].overhead);
        let capacity = it.capacity.clone();
        self.pools[pool].usage.add(&capacity);
        let nodes = self.pools[pool].usage.get_milli("nodes");
        self.pools[pool].usage.set_milli("nodes", nodes + 1000);
        let b = self.bins.len();
        self.bins.push(Bin {
            origin: Origin::New(pool),
            reqs: reqs.clone(),
            version: 0,
            taints: self.pools[pool].taints.clone(),
            ceiling,
            used: Resources::new(),
            target: Some(t),
            zone: None,
            capacity_type: None,
            pods: Vec::new(),
        });
        for other in 0..self.eclasses.len() {
            self.admit(other, b);
        }
        let fit = Fit {
            merged: None,
            zone: zmask.map(|_| z),
            capacity_type: cmask.map(|_| ct),
        };
        self.commit(e, pod, b, fit);
        Ok(())
    }

    /// The pod's zone / capacity-type constraints, for reasons.
    fn topology_description(&self, e: usize) -> String {
        let ec = &self.eclasses[e];
        let own: Vec<String> = ec
            .spreads
            .iter()
            .chain(&ec.affinity)
            .chain(&ec.anti)
            .filter(|&&g| self.groups[g].spec.key != TopologyKey::Hostname)
            .map(|&g| self.groups[g].spec.describe())
            .collect();
        if own.is_empty() {
            "pod anti-affinity of pods already placed".into()
        } else {
            own.join(", ")
        }
    }

    /// Remaining requests of unplaced pods that could use this pool.
    fn compatible_remaining(&self, pool: usize) -> Resources {
        let mut r = Resources::new();
        for c in &self.classes {
            if c.pools_ok.get(pool).copied().unwrap_or(false) {
                r.add(&c.remaining);
            }
        }
        r
    }

    /// Dual value of what type `t` would hold for the remaining demand, and its raw size.
    fn value(&self, pool: usize, t: usize, remaining: &Resources, pod: &Resources) -> (f64, f64) {
        let usable = self.usable(t, pool);
        let Some((dims, duals, _)) = &self.pools[pool].duals else {
            return (1.0, 0.0);
        };
        let mut value = 0.0;
        let mut size = 0.0;
        for (i, &d) in dims.iter().enumerate() {
            let cap = usable.slot_milli(d).max(0) as f64;
            let want = (remaining.slot_milli(d).max(pod.slot_milli(d))) as f64;
            value += duals[i] * cap.min(want);
            size += duals[i] * cap;
        }
        (value, size)
    }

    /// Recomputes the pool's dual prices when the remaining demand moved by >10%.
    fn refresh_duals(&mut self, pool: usize) {
        let remaining = self.compatible_remaining(pool);
        if let Some((_, _, at)) = &self.pools[pool].duals {
            let drift = [CPU, MEMORY, PODS].iter().any(|&d| {
                let (a, b) = (at.slot_milli(d) as f64, remaining.slot_milli(d) as f64);
                (a - b).abs() > 0.1 * a.max(1.0)
            });
            if !drift {
                return;
            }
        }
        let dims: Vec<usize> = (0..WELL_KNOWN.len())
            .filter(|&d| remaining.slot_milli(d) > 0 && d != crate::resources::EPHEMERAL_STORAGE)
            .collect();
        let scale = |d: usize| {
            if d == MEMORY {
                (1u64 << 30) as f64 * 1000.0
            } else {
                1000.0
            }
        };
        let demand: Vec<f64> = dims
            .iter()
            .map(|&d| remaining.slot_milli(d) as f64 / scale(d))
            .collect();
        let reqs = self.pools[pool].reqs.clone();
        let mut caps = Vec::new();
        let mut prices = Vec::new();
        for &t in &self.pools[pool].types {
            let Some((_, _, price)) = self.cheapest_offering(t, &reqs, None, None) else {
                continue;
            };
            let usable = self.usable(t, pool);
            caps.push(
                dims.iter()
                    .map(|&d| usable.slot_milli(d).max(0) as f64 / scale(d))
                    .collect(),
            );
            prices.push(price);
        }
        let duals = lp::cheapest_fractional_fleet(&demand, &caps, &prices).map(|s| {
            s.duals
                .iter()
                .zip(&dims)
                .map(|(y, &d)| y / scale(d))
                .collect()
        });
        self.pools[pool].duals = duals.map(|y| (dims, y, remaining));
    }

    // ----- the run ---------------------------------------------------------------------

    fn run(mut self) -> Schedule {
        let pods = self.input.pods;
        let mut pending: Vec<usize> = (0..pods.len()).filter(|&p| pods[p].is_pending()).collect();
        pending.sort_by(|&a, &b| {
            let (ra, rb) = (&pods[a].requests, &pods[b].requests);
            rb.slot_milli(CPU)
                .cmp(&ra.slot_milli(CPU))
                .then(rb.slot_milli(MEMORY).cmp(&ra.slot_milli(MEMORY)))
                .then(a.cmp(&b))
        });
        self.build_classes(&pending);
        let mut queue = self.place_nominated(pending);
        let mut level = vec![0usize; pods.len()];
        // As Karpenter does, pods that fail are retried while placements still happen:
        // a pod with affinity to pods placed later in the same batch can then follow them.
        loop {
            let mut failed: Vec<(usize, String)> = Vec::new();
            let mut placed_any = false;
            loop {
                let mut retry = Vec::new();
                for &p in &queue {
                    let c = self.pod_class[p];
                    let e = self.eclass(c, level[p]);
                    match self.place(e, p) {
                        Ok(()) => placed_any = true,
                        Err(reason) => {
                            if level[p] + 1 < self.classes[c].ladder.len() {
                                level[p] += 1;
                                retry.push(p);
                            } else {
                                failed.push((p, reason));
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
            queue = failed.iter().map(|(p, _)| *p).collect();
            for &p in &queue {
                level[p] = 0;
            }
        }
    }

    /// Puts each in-flight claim's still-pending pods on it, and returns the others.
    /// They were packed onto it when it was planned; its capacity is the type's, so
    /// they are placed without a fresh fit check that a different order might fail.
    fn place_nominated(&mut self, pending: Vec<usize>) -> Vec<usize> {
        let pods = self.input.pods;
        let mut nominated: HashMap<String, usize> = HashMap::new();
        for b in 0..self.bins.len() {
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
                    let e = self.eclass(self.pod_class[p], 0);
                    self.commit(
                        e,
                        p,
                        b,
                        Fit {
                            merged: None,
                            zone: None,
                            capacity_type: None,
                        },
                    );
                }
                None => rest.push(p),
            }
        }
        rest
    }

    fn finish(mut self, mut unschedulable: Vec<(usize, String)>) -> Schedule {
        let input = self.input;
        let mut out = Schedule::default();
        unschedulable.sort_by_key(|(p, _)| *p);
        out.unschedulable = unschedulable;
        for b in 0..self.bins.len() {
            if self.bins[b].pods.is_empty() {
                continue;
            }
            let mut pods: Vec<usize> = self.bins[b].pods.iter().map(|(p, _)| *p).collect();
            pods.sort();
            match self.bins[b].origin {
                Origin::Existing(n) => out.existing_nodes.push((input.nodes[n].name.clone(), pods)),
                Origin::InFlight(i) => out.in_flight.push((input.in_flight[i].name.clone(), pods)),
                Origin::New(pool) => {
                    let claim = self.finalize_claim(b, pool, pods);
                    out.new_claims.push(claim);
                }
            }
        }
        out
    }

    fn finalize_claim(&mut self, b: usize, pool: usize, pods: Vec<usize>) -> NewClaim {
        let bin = &self.bins[b];
        let reqs = bin.reqs.clone();
        let used = bin.used.clone();
        let target = bin.target;
        let mut reserved = Resources::new();
        if let Some(t) = target {
            reserved = self.input.catalog.types[t].capacity.clone();
        }
        // Limits are checked against usage without this claim's own reservation.
        self.pools[pool].usage.sub(&reserved);
        let nodes = self.pools[pool].usage.get_milli("nodes");
        self.pools[pool].usage.set_milli("nodes", nodes - 1000);
        let mut options: Vec<(f64, usize, usize, CapacityType)> = Vec::new();
        for &t in &self.pools[pool].types {
            if !used.fits_in(&self.usable(t, pool)) || !self.type_satisfies(t, &reqs) {
                continue;
            }
            if Some(t) != target
                && self
                    .within_limits(pool, &self.input.catalog.types[t])
                    .is_err()
            {
                continue;
            }
            if let Some((z, ct, price)) = self.cheapest_offering(t, &reqs, None, None) {
                options.push((price, t, z, ct));
            }
        }
        options.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let chosen = options.first().map(|o| o.1).or(target).unwrap_or(0);
        let chosen_capacity = self.input.catalog.types[chosen].capacity.clone();
        self.pools[pool].usage.add(&chosen_capacity);
        self.pools[pool].usage.set_milli("nodes", nodes);
        if let Some(&(_, _, z, _)) = options.first() {
            self.zone_use[z] += 1;
        }
        let zones = self
            .zones
            .iter()
            .take(self.input.pricing.zones.len())
            .filter(|z| reqs.get(LABEL_ZONE).is_none_or(|s| s.has(z)))
            .cloned()
            .collect();
        let capacity_types = CapacityType::ALL
            .into_iter()
            .filter(|ct| {
                reqs.get(LABEL_CAPACITY_TYPE)
                    .is_none_or(|s| s.has(ct.as_str()))
            })
            .collect();
        NewClaim {
            node_pool: self.input.node_pools[pool].name.clone(),
            pods,
            requests: used,
            requirements: reqs,
            options: options
                .into_iter()
                .map(|(price, t, z, ct)| ClaimOption {
                    instance_type: self.input.catalog.types[t].name.clone(),
                    zone: self.zones[z].clone(),
                    capacity_type: ct,
                    price,
                })
                .collect(),
            zones,
            capacity_types,
        }
    }
}

fn bump(dc: &mut DomainCounts, key: TopologyKey, domain: usize) {
    match key {
        TopologyKey::Zone => dc.zone[domain] += 1,
        TopologyKey::CapacityType => dc.capacity_type[domain] += 1,
        TopologyKey::Hostname => dc.add_host(domain),
    }
}

/// What makes two pods interchangeable for scheduling (requests aside).
#[derive(PartialEq, Eq, Hash)]
struct ClassKey<'p> {
    namespace: &'p str,
    labels: &'p BTreeMap<String, String>,
    node_selector: &'p BTreeMap<String, String>,
    required_node_terms: &'p [Vec<NodeRequirement>],
    preferred_node_terms: &'p [crate::cluster::PreferredNodeTerm],
    tolerations: &'p [Toleration],
    topology_spread: &'p [crate::cluster::TopologySpreadConstraint],
    pod_affinity: &'p [crate::cluster::PodAffinityTerm],
    pod_anti_affinity: &'p [crate::cluster::PodAffinityTerm],
    preferred_pod_affinity: &'p [crate::cluster::WeightedPodAffinityTerm],
    preferred_pod_anti_affinity: &'p [crate::cluster::WeightedPodAffinityTerm],
}

impl<'p> ClassKey<'p> {
    fn of(pod: &'p Pod) -> Self {
        ClassKey {
            namespace: &pod.namespace,
            labels: &pod.labels,
            node_selector: &pod.node_selector,
            required_node_terms: &pod.required_node_terms,
            preferred_node_terms: &pod.preferred_node_terms,
            tolerations: &pod.tolerations,
            topology_spread: &pod.topology_spread,
            pod_affinity: &pod.pod_affinity,
            pod_anti_affinity: &pod.pod_anti_affinity,
            preferred_pod_affinity: &pod.preferred_pod_affinity,
            preferred_pod_anti_affinity: &pod.preferred_pod_anti_affinity,
        }
    }
}
