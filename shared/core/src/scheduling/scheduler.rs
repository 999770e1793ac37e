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
use std::sync::Arc;

use crate::api::model::{Ec2NodeClass, NodePool, NodeRequirement, Taint, TaintEffect};
use crate::catalog::{
    CapacityType, Catalog, InstanceType, LABEL_CAPACITY_TYPE, LABEL_HOSTNAME, LABEL_NODEPOOL,
    LABEL_REGION, LABEL_ZONE, Pricing,
};
use crate::cluster::{
    DaemonSet, HostPort, LabelSelector, Node, Pod, Toleration, WhenUnsatisfiable,
};
use crate::resources::{CPU, MEMORY, PODS, Resources, WELL_KNOWN, format_milli};

use super::fast_hash::FastMap;
use super::lp;
use super::prepared::PreparedScheduler;
use super::repack;
use super::requirements::{Requirements, ValueSet};
use super::topology::{
    CompiledFilter, DomainCounts, Group, GroupKind, GroupSpec, NodeFilter, TopologyKey,
};

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
    /// Labels the claim's node will carry beyond its type's, zone and capacity type
    /// (NodePool labels, and values a topology constraint pinned it to).
    pub labels: BTreeMap<String, String>,
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

/// At most this many instance types are kept as a new claim's options: what one launch
/// can use (CreateFleet takes at most 60 overrides), as Karpenter truncates its NodeClaims'
/// instance types to 60. More are kept only when a NodePool's minValues needs them.
pub const MAX_INSTANCE_TYPE_OPTIONS: usize = 60;

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
    /// The cheapest compatible types that fit the pods, cheapest first; never empty. At
    /// most [`MAX_INSTANCE_TYPE_OPTIONS`], unless minValues needs more; the kept types
    /// still satisfy every minValues of the claim's requirements.
    pub options: Vec<ClaimOption>,
    /// How many compatible types fit the pods before the cap (`options.len()` or more).
    pub compatible_types: usize,
    /// Zones and capacity types the claim may launch in.
    pub zones: Vec<String>,
    pub capacity_types: Vec<CapacityType>,
    /// Labels the node must carry beyond its NodePool's and its type's (see
    /// `InFlightClaim::labels`).
    pub labels: BTreeMap<String, String>,
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

/// Plans the pending pods: [`PreparedScheduler::provision`] on a scheduler prepared for
/// this one call (without the state speculative solves need).
pub fn schedule(input: &SchedulerInput<'_>) -> Schedule {
    PreparedScheduler::for_provisioning(input).provision_once()
}

// ---------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Origin {
    Existing(usize),
    InFlight(usize),
    New(usize),
}

#[derive(Clone)]
pub(super) struct Bin {
    pub(super) origin: Origin,
    pub(super) reqs: Requirements,
    /// Bumped whenever `reqs` narrows.
    pub(super) version: u32,
    pub(super) taints: Vec<Taint>,
    /// What pods may use in total (allocatable minus DaemonSets and bound pods).
    pub(super) ceiling: Resources,
    pub(super) used: Resources,
    /// New claims: the type whose size bounds the packing.
    pub(super) target: Option<usize>,
    /// Per domain key (zone, capacity type, then the others in `Scheduler::keys`): the
    /// domain the node is in, once known.
    pub(super) domains: Vec<Option<usize>>,
    /// Host ports bound on the node, by its pods and the DaemonSet pods it runs.
    pub(super) ports: Vec<HostPort>,
    /// (pod index, effective class)
    pub(super) pods: Vec<(usize, usize)>,
}

impl Bin {
    fn domain(&self, key: usize) -> Option<usize> {
        self.domains.get(key).copied().flatten()
    }
}

/// A label topology constraints count on, and its values (the domains).
#[derive(Clone)]
pub(super) struct DomainKey {
    pub(super) label: String,
    pub(super) values: Vec<String>,
    /// A label instance types carry (arch, instance family…): a new claim's value is
    /// its type's.
    pub(super) type_key: bool,
    /// Per pool: the values a node it launches could have.
    pub(super) pool_values: Vec<Vec<bool>>,
}

impl DomainKey {
    fn index(&self, value: &str) -> Option<usize> {
        self.values.iter().position(|v| v == value)
    }
}

/// One relaxation state of a class.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct Relax {
    term: usize,
    preferred_pod_affinity: bool,
    preferred_pod_anti_affinity: bool,
    preferred_node_terms: usize,
    schedule_anyway: bool,
    tolerate_prefer_no_schedule: bool,
}

/// Pods with the same scheduling constraints.
#[derive(Clone)]
pub(super) struct Class {
    pub(super) representative: usize,
    pub(super) ladder: Vec<Relax>,
    /// Groups selecting this class's pods.
    pub(super) matched: Vec<usize>,
    /// Element-wise minimum of the members' requests.
    pub(super) min_request: Resources,
    /// Requests of members not yet placed.
    pub(super) remaining: Resources,
    /// NodePools that can take the class at its strictest level.
    pub(super) pools_ok: Vec<bool>,
    /// Required anti-affinity groups the members own (filled for solves).
    pub(super) owned: Vec<usize>,
}

#[derive(Clone)]
pub(super) struct Candidate {
    pub(super) bin: usize,
    /// The bin version at which a pod of this class last joined it: while unchanged,
    /// the bin's requirements already include the class's.
    pub(super) absorbed: u32,
    pub(super) dead: bool,
}

/// A class at one relaxation level, compiled.
#[derive(Clone)]
pub(super) struct EClass {
    pub(super) class: usize,
    pub(super) reqs: Requirements,
    pub(super) tolerations: Vec<Toleration>,
    pub(super) tolerate_prefer_no_schedule: bool,
    pub(super) spreads: Vec<usize>,
    pub(super) affinity: Vec<usize>,
    pub(super) anti: Vec<usize>,
    /// Per pool: Ok, or why the class cannot use it.
    pub(super) pool_fit: Arc<Vec<Result<(), String>>>,
    /// Per pool: types compatible with pool ∩ class requirements, cheapest first.
    pub(super) pool_types: Arc<Vec<Vec<usize>>>,
    pub(super) candidates: Vec<Candidate>,
    pub(super) dead: usize,
}

pub(super) enum Fail {
    /// The bin can never take a pod of this class.
    Permanent,
    /// Not this pod, maybe a smaller one.
    Temporary,
}

pub(super) struct Fit {
    pub(super) merged: Option<Requirements>,
    /// (domain key, domain) to pin the bin to.
    pub(super) pins: Vec<(usize, usize)>,
}

/// A DaemonSet that would run on a pool's nodes (taints and pool requirements allow
/// it); whether it runs on a given type depends on that type's labels.
#[derive(Clone)]
pub(super) struct PoolDaemon {
    pub(super) reqs: Requirements,
    pub(super) requests: Resources,
    pub(super) ports: Vec<HostPort>,
    pub(super) name: String,
}

#[derive(Clone)]
pub(super) struct PoolInfo {
    pub(super) reqs: Requirements,
    pub(super) taints: Vec<Taint>,
    pub(super) daemons: Vec<PoolDaemon>,
    /// Per catalog type (filled for `types`): requests of the DaemonSet pods that would
    /// run on a node of that type.
    pub(super) overhead: Vec<Resources>,
    /// Per catalog type: indices into `daemons` that would run there and bind host ports.
    pub(super) port_daemons: Vec<Vec<usize>>,
    /// Types compatible with the pool's requirements and offered in its zones.
    pub(super) types: Vec<usize>,
    pub(super) usage: Resources,
    pub(super) has_min_values: bool,
    pub(super) duals: Option<(Vec<usize>, Vec<f64>, Resources)>,
    /// Allocatable by catalog index under the pool's EC2NodeClass kubelet settings;
    /// `None` when they leave the catalog's as it is.
    pub(super) allocatable: Option<Vec<Resources>>,
}

#[derive(Clone)]
pub(super) struct Scheduler<'a> {
    pub(super) input: &'a SchedulerInput<'a>,
    pub(super) zones: Vec<String>,
    /// Zone (0), capacity type (1), then every other key a constraint counts on.
    pub(super) keys: Vec<DomainKey>,
    pub(super) well_known: HashSet<String>,
    pub(super) type_keys: HashSet<String>,
    /// price[type][zone][capacity type]
    pub(super) prices: Vec<Vec<[Option<f64>; 2]>>,
    pub(super) pools: Vec<PoolInfo>,
    pub(super) pool_order: Vec<usize>,
    pub(super) bins: Vec<Bin>,
    pub(super) groups: Vec<Group>,
    pub(super) group_index: FastMap<GroupSpec, usize>,
    pub(super) classes: Vec<Class>,
    pub(super) pod_class: Vec<usize>,
    pub(super) eclasses: Vec<EClass>,
    pub(super) eclass_index: FastMap<(usize, usize), usize>,
    pub(super) any_prefer_no_schedule: bool,
    pub(super) zone_use: Vec<u32>,
    /// The pods provisioning places, largest first (set by `prepare`).
    pub(super) pending: Vec<usize>,
    /// Per input node: its bin, when it is one (Ready and schedulable).
    pub(super) node_bin: Vec<Option<usize>>,
    pub(super) node_index: FastMap<&'a str, usize>,
    /// Groups by the first `matchLabels` entry of their selector (label, value), so
    /// counting a pod looks at the groups that could select it, not at all of them.
    pub(super) select_index: FastMap<String, FastMap<String, Vec<usize>>>,
    /// Groups whose selector has only expressions: checked against every pod.
    pub(super) select_scan: Vec<usize>,
    /// Required anti-affinity groups by (topology key label, selector): the groups a pod
    /// owns through its own required terms.
    pub(super) owner_index: FastMap<(String, Option<LabelSelector>), Vec<usize>>,
    /// Compiled node-side constraints shared by every class with the same ones.
    pub(super) shapes: Vec<NodeShape>,
    pub(super) shape_index: FastMap<(Requirements, Vec<Toleration>, bool), usize>,
    /// Present while a speculative solve runs: how to put everything back.
    pub(super) undo: Option<Undo>,
    /// Bins no pod may be placed on (nodes a solve removes, or keeps out of reach).
    pub(super) blocked: Vec<bool>,
    /// Per bin: the stamp of the solve that last saved it in `undo`.
    pub(super) bin_stamp: Vec<u32>,
    pub(super) stamp: u32,
    /// `universe` by node filter and key: many groups share one (a deployment's spread
    /// each), and computing it looks at every node.
    pub(super) universe_cache: FastMap<(Option<NodeFilter>, usize), Vec<bool>>,
}

/// The node-side part of a compiled class (requirements at one relaxation level,
/// tolerations): which pools it may use, their types cheapest first, and which of the
/// permanent bins it may use. Many classes share one.
#[derive(Clone)]
pub(super) struct NodeShape {
    pub(super) pool_fit: Arc<Vec<Result<(), String>>>,
    pub(super) pool_types: Arc<Vec<Vec<usize>>>,
    /// Bins below `admitted_upto` that pass `admit`.
    pub(super) admitted: Vec<usize>,
    pub(super) admitted_upto: usize,
}

/// One topology count change, to be reversed.
#[derive(Clone, Copy)]
pub(super) struct CountChange {
    pub(super) group: usize,
    pub(super) owners: bool,
    pub(super) key: TopologyKey,
    /// `None`: a hostname count on a node that is not a bin (`other_hosts`).
    pub(super) domain: Option<usize>,
    pub(super) delta: i32,
}

/// What a speculative solve changed, so it can be undone: it touches a few bins and
/// counts, never the whole cluster.
#[derive(Default)]
pub(super) struct Undo {
    /// Bins at or past this index were opened by the solve.
    pub(super) base_bins: usize,
    /// Bins as they were before the solve first changed them.
    pub(super) bins: Vec<(usize, Bin)>,
    pub(super) counts: Vec<CountChange>,
    /// (eclass, candidate position) marked dead.
    pub(super) dead: Vec<(usize, usize)>,
    /// (eclass, candidate position, previous `absorbed`).
    pub(super) absorbed: Vec<(usize, usize, u32)>,
    /// Eclasses that were given candidates for bins the solve opened.
    pub(super) pushed: Vec<usize>,
    pub(super) pools: Vec<(Resources, Option<(Vec<usize>, Vec<f64>, Resources)>)>,
    pub(super) zone_use: Vec<u32>,
    pub(super) blocked: Vec<usize>,
    /// The pods being re-placed, and whether each is placed yet (for the remaining
    /// demand new claims are sized against).
    pub(super) moving: Vec<(usize, bool)>,
}

impl Clone for Undo {
    fn clone(&self) -> Self {
        // A scheduler is only cloned between solves.
        Undo::default()
    }
}

pub(super) fn ct_index(ct: CapacityType) -> usize {
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
    pub(super) fn new(input: &'a SchedulerInput<'a>) -> Self {
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
            keys: Vec::new(),
            pools: Vec::new(),
            pool_order: Vec::new(),
            bins: Vec::new(),
            groups: Vec::new(),
            group_index: FastMap::default(),
            classes: Vec::new(),
            pod_class: vec![usize::MAX; input.pods.len()],
            eclasses: Vec::new(),
            eclass_index: FastMap::default(),
            any_prefer_no_schedule,
            zone_use: Vec::new(),
            pending: Vec::new(),
            node_bin: vec![None; input.nodes.len()],
            node_index: input
                .nodes
                .iter()
                .enumerate()
                .map(|(i, n)| (n.name.as_str(), i))
                .collect(),
            select_index: FastMap::default(),
            select_scan: Vec::new(),
            owner_index: FastMap::default(),
            shapes: Vec::new(),
            shape_index: FastMap::default(),
            undo: None,
            blocked: Vec::new(),
            bin_stamp: Vec::new(),
            stamp: 0,
            universe_cache: FastMap::default(),
        };
        s.zone_use = vec![0; s.zones.len()];
        s.build_pools();
        s.build_domain_keys();
        s.build_existing_bins();
        s.build_in_flight_bins();
        s
    }

    // ----- setup -----------------------------------------------------------------

    pub(super) fn pool_requirements(pool: &NodePool) -> Requirements {
        let mut reqs = Requirements::from_node_requirements(&pool.requirements);
        for (k, v) in &pool.labels {
            reqs.add(k, ValueSet::in_values([v.clone()]));
        }
        reqs.add(LABEL_NODEPOOL, ValueSet::in_values([pool.name.clone()]));
        reqs
    }

    pub(super) fn build_pools(&mut self) {
        let input = self.input;
        for pool in input.node_pools {
            let reqs = Self::pool_requirements(pool);
            let types: Vec<usize> = (0..input.catalog.types.len())
                .filter(|&t| {
                    self.type_satisfies(t, &reqs)
                        && self.cheapest_offering(t, &reqs, None, None).is_some()
                })
                .collect();
            let daemons = self.pool_daemons(pool, &reqs);
            let mut overhead = vec![Resources::new(); input.catalog.types.len()];
            let mut port_daemons = vec![Vec::new(); input.catalog.types.len()];
            for (t, (overhead, ports)) in overhead.iter_mut().zip(&mut port_daemons).enumerate() {
                for (d, daemon) in daemons.iter().enumerate() {
                    if self.type_satisfies(t, &daemon.reqs) {
                        overhead.add(&daemon.requests);
                        if !daemon.ports.is_empty() {
                            ports.push(d);
                        }
                    }
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
                daemons,
                overhead,
                port_daemons,
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

    /// The DaemonSets whose pods would run on this pool's nodes: they tolerate its
    /// taints and one of their node-affinity terms is compatible with its requirements.
    /// Each keeps that term (narrowed by the pool), to be checked against each type's
    /// labels. A DaemonSet that already runs pods is sized from one of them: their
    /// requests reflect LimitRange defaults and VPA changes the template does not.
    pub(super) fn pool_daemons(
        &self,
        pool: &NodePool,
        pool_reqs: &Requirements,
    ) -> Vec<PoolDaemon> {
        let input = self.input;
        let mut out = Vec::new();
        for ds in input.daemonsets {
            let tpl = &ds.template;
            if tolerates_all(&tpl.tolerations, &pool.taints, true).is_err() {
                continue;
            }
            let terms = tpl.required_node_terms.len().max(1);
            let Some(reqs) = (0..terms)
                .map(|term| Self::pod_base_requirements(tpl, term))
                .find(|r| {
                    pool_reqs
                        .compatible_with(r, &|k| self.well_known.contains(k))
                        .is_ok()
                })
            else {
                continue;
            };
            let running = input.pods.iter().find(|p| {
                p.owner_daemonset.as_deref() == Some(ds.name.as_str())
                    && p.namespace == ds.namespace
                    && p.node_name.is_some()
                    && !p.terminal
            });
            let source = running.unwrap_or(tpl);
            out.push(PoolDaemon {
                reqs,
                requests: source.requests.clone(),
                ports: source.host_ports.clone(),
                name: format!("{}/{}", ds.namespace, ds.name),
            });
        }
        out
    }

    /// Zone and capacity type are always domain keys; their values are the offered
    /// zones and the two capacity types, usable by a pool where one of its types has
    /// an offering there.
    pub(super) fn build_domain_keys(&mut self) {
        let zone_values: Vec<Vec<bool>> = self
            .pools
            .iter()
            .map(|pool| {
                (0..self.zones.len())
                    .map(|z| {
                        let mut mask = vec![false; self.zones.len()];
                        mask[z] = true;
                        pool.types.iter().any(|&t| {
                            self.cheapest_offering(t, &pool.reqs, Some(&mask), None)
                                .is_some()
                        })
                    })
                    .collect()
            })
            .collect();
        let ct_values: Vec<Vec<bool>> = self
            .pools
            .iter()
            .map(|pool| {
                CapacityType::ALL
                    .iter()
                    .map(|&ct| {
                        let mut mask = [false; 2];
                        mask[ct_index(ct)] = true;
                        pool.types.iter().any(|&t| {
                            self.cheapest_offering(t, &pool.reqs, None, Some(mask))
                                .is_some()
                        })
                    })
                    .collect()
            })
            .collect();
        self.keys.push(DomainKey {
            label: LABEL_ZONE.to_string(),
            values: self.zones.clone(),
            type_key: false,
            pool_values: zone_values,
        });
        self.keys.push(DomainKey {
            label: LABEL_CAPACITY_TYPE.to_string(),
            values: CapacityType::ALL
                .iter()
                .map(|ct| ct.as_str().to_string())
                .collect(),
            type_key: false,
            pool_values: ct_values,
        });
    }

    /// The topology key for a label, registering a new domain key on first use: its
    /// values are those the NodePools can give a node (their requirements and labels,
    /// or their types' labels for a label types carry) and those existing nodes have.
    pub(super) fn topology_key(&mut self, label: &str) -> TopologyKey {
        if label == LABEL_HOSTNAME {
            return TopologyKey::Hostname;
        }
        if let Some(k) = self.keys.iter().position(|k| k.label == label) {
            return TopologyKey::Domain(k);
        }
        let catalog = self.input.catalog;
        let type_key = self.type_keys.contains(label);
        let mut values: Vec<String> = Vec::new();
        let mut push = |v: &String| {
            if !values.contains(v) {
                values.push(v.clone());
            }
        };
        for pool in &self.pools {
            if type_key {
                for &t in &pool.types {
                    if let Some(v) = catalog.types[t].labels.get(label) {
                        push(v);
                    }
                }
            } else if let Some(vs) = pool.reqs.get(label).and_then(|s| s.finite_values()) {
                vs.iter().for_each(&mut push);
            }
        }
        for node in self.input.nodes {
            if let Some(v) = node.labels.get(label) {
                push(v);
            }
        }
        for claim in self.input.in_flight {
            if let Some(v) = claim.labels.get(label) {
                push(v);
            }
        }
        let pool_values = self
            .pools
            .iter()
            .map(|pool| {
                values
                    .iter()
                    .map(|v| {
                        if type_key {
                            pool.types
                                .iter()
                                .any(|&t| catalog.types[t].labels.get(label) == Some(v))
                        } else {
                            pool.reqs.get(label).is_some_and(|s| s.has(v))
                        }
                    })
                    .collect()
            })
            .collect();
        let k = self.keys.len();
        self.keys.push(DomainKey {
            label: label.to_string(),
            values,
            type_key,
            pool_values,
        });
        for bin in &mut self.bins {
            let d = bin
                .reqs
                .get(label)
                .and_then(|s| s.single_value())
                .and_then(|v| self.keys[k].index(v));
            if bin.domains.len() <= k {
                bin.domains.resize(k + 1, None);
            }
            bin.domains[k] = d;
        }
        TopologyKey::Domain(k)
    }

    pub(super) fn build_existing_bins(&mut self) {
        let input = self.input;
        let mut used_by_node: FastMap<&str, Resources> = FastMap::default();
        let mut ports_by_node: FastMap<&str, Vec<HostPort>> = FastMap::default();
        for pod in input.pods {
            if let (Some(node), false) = (&pod.node_name, pod.terminal) {
                used_by_node
                    .entry(node.as_str())
                    .or_default()
                    .add(&pod.requests);
                if !pod.host_ports.is_empty() {
                    ports_by_node
                        .entry(node.as_str())
                        .or_default()
                        .extend(pod.host_ports.iter().cloned());
                }
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
            self.node_bin[i] = Some(self.bins.len());
            self.bins.push(Bin {
                origin: Origin::Existing(i),
                reqs: Requirements::from_labels(labels.iter()),
                version: 0,
                taints: node.taints.clone(),
                ceiling,
                used: Resources::new(),
                target: None,
                domains: vec![zone, capacity_type.map(ct_index)],
                ports: ports_by_node.remove(node.name.as_str()).unwrap_or_default(),
                pods: Vec::new(),
            });
        }
    }

    pub(super) fn build_in_flight_bins(&mut self) {
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
            labels.extend(claim.labels.clone());
            labels.insert(LABEL_ZONE.into(), claim.zone.clone());
            labels.insert(
                LABEL_CAPACITY_TYPE.into(),
                claim.capacity_type.as_str().into(),
            );
            let mut reqs = Requirements::from_labels(labels.iter());
            reqs = reqs.intersect(&self.pools[pool_idx].reqs);
            let ceiling = self.usable(t, pool_idx);
            let zone = self.zones.iter().position(|z| *z == claim.zone);
            let ports = self.daemon_ports(pool_idx, t);
            self.bins.push(Bin {
                origin: Origin::InFlight(i),
                reqs,
                version: 0,
                taints: self.pools[pool_idx].taints.clone(),
                ceiling,
                used: Resources::new(),
                target: Some(t),
                domains: vec![zone, Some(ct_index(claim.capacity_type))],
                ports,
                pods: Vec::new(),
            });
        }
    }

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

    pub(super) fn group(&mut self, spec: GroupSpec) -> usize {
        if let Some(&g) = self.group_index.get(&spec) {
            return g;
        }
        let filter = spec.filter.as_ref().map(CompiledFilter::new);
        let (domains, universe) = match spec.key {
            TopologyKey::Hostname => (0, Vec::new()),
            TopologyKey::Domain(k) => {
                let cache_key = (spec.filter.clone(), k);
                let universe = match self.universe_cache.get(&cache_key) {
                    Some(u) => u.clone(),
                    None => {
                        let u = self.universe(filter.as_ref(), k);
                        self.universe_cache.insert(cache_key, u.clone());
                        u
                    }
                };
                (self.keys[k].values.len(), universe)
            }
        };
        let g = self.groups.len();
        self.groups.push(Group {
            filter,
            spec: spec.clone(),
            counts: DomainCounts::new(domains),
            owners: DomainCounts::new(domains),
            universe,
        });
        self.group_index.insert(spec, g);
        self.index_group(g);
        g
    }

    /// Files group `g` in the selection and ownership indexes.
    pub(super) fn index_group(&mut self, g: usize) {
        let spec = &self.groups[g].spec;
        if let Some(selector) = &spec.selector {
            match selector.match_labels.iter().next() {
                Some((k, v)) => self
                    .select_index
                    .entry(k.clone())
                    .or_default()
                    .entry(v.clone())
                    .or_default()
                    .push(g),
                None => self.select_scan.push(g),
            }
        }
        if spec.kind == GroupKind::AntiAffinity && spec.required {
            let key = (self.key_label(spec.key).to_string(), spec.selector.clone());
            self.owner_index.entry(key).or_default().push(g);
        }
    }

    /// The groups that select `pod`, in index order.
    pub(super) fn groups_selecting(&self, pod: &Pod) -> Vec<usize> {
        let mut gs: Vec<usize> = self.select_scan.clone();
        for (k, v) in &pod.labels {
            if let Some(list) = self
                .select_index
                .get(k.as_str())
                .and_then(|m| m.get(v.as_str()))
            {
                gs.extend_from_slice(list);
            }
        }
        gs.retain(|&g| self.groups[g].spec.selects(&pod.namespace, &pod.labels));
        gs.sort_unstable();
        gs.dedup();
        gs
    }

    /// The required anti-affinity groups `pod` owns through its own terms (same key and
    /// selector), in index order.
    pub(super) fn groups_owned(&self, pod: &Pod) -> Vec<usize> {
        let mut gs: Vec<usize> = Vec::new();
        for t in &pod.pod_anti_affinity {
            if let Some(list) = self
                .owner_index
                .get(&(t.topology_key.clone(), t.label_selector.clone()))
            {
                gs.extend_from_slice(list);
            }
        }
        gs.sort_unstable();
        gs.dedup();
        gs
    }

    /// Counts pod `p`, bound to input node `n`, in the groups from `from_group` on that
    /// select it or that it owns (`delta` -1 takes it out again). Pods on nodes that are
    /// not bins (not Ready yet) count as "elsewhere" for hostname: nothing can be placed
    /// next to them now.
    pub(super) fn count_on_node(&mut self, p: usize, n: usize, delta: i32, from_group: usize) {
        let pod = &self.input.pods[p];
        let selecting = self.groups_selecting(pod);
        let owned = self.groups_owned(pod);
        self.count_listed(n, delta, &selecting, &owned, from_group);
    }

    /// `count_on_node` for a pod whose selecting and owned groups are known (sorted).
    pub(super) fn count_listed(
        &mut self,
        n: usize,
        delta: i32,
        selecting: &[usize],
        owned: &[usize],
        from_group: usize,
    ) {
        let node = &self.input.nodes[n];
        let host = self.node_bin[n];
        let mut gs: Vec<usize> = selecting
            .iter()
            .chain(owned)
            .copied()
            .filter(|&g| g >= from_group)
            .collect();
        gs.sort_unstable();
        gs.dedup();
        for g in gs {
            if self.groups[g]
                .filter
                .as_ref()
                .is_some_and(|f| !f.matches_node(&node.labels, &node.taints))
            {
                continue;
            }
            let key = self.groups[g].spec.key;
            let domain = match key {
                TopologyKey::Hostname => host,
                TopologyKey::Domain(k) => node
                    .labels
                    .get(&self.keys[k].label)
                    .and_then(|v| self.keys[k].index(v)),
            };
            let selects = selecting.binary_search(&g).is_ok();
            let owns = owned.binary_search(&g).is_ok();
            for (hit, owners) in [(selects, false), (owns, true)] {
                if !hit {
                    continue;
                }
                match domain {
                    Some(d) => self.add_count(g, owners, key, Some(d), delta),
                    None if key == TopologyKey::Hostname => {
                        self.add_count(g, owners, key, None, delta)
                    }
                    None => {}
                }
            }
        }
    }

    /// Changes one count (logged while a solve runs, so it can be undone).
    pub(super) fn add_count(
        &mut self,
        group: usize,
        owners: bool,
        key: TopologyKey,
        domain: Option<usize>,
        delta: i32,
    ) {
        let group_ref = &mut self.groups[group];
        let dc = if owners {
            &mut group_ref.owners
        } else {
            &mut group_ref.counts
        };
        match domain {
            Some(d) => dc.add(key, d, delta),
            None => {
                debug_assert!(delta > 0 || dc.other_hosts > 0);
                dc.other_hosts = dc.other_hosts.saturating_add_signed(delta);
            }
        }
        if let Some(u) = &mut self.undo {
            u.counts.push(CountChange {
                group,
                owners,
                key,
                domain,
                delta,
            });
        }
    }

    /// The domains of key `k` a node counted by the group could be in: what the
    /// NodePools can launch (those whose taints the filter admits) and what existing
    /// nodes it matches are in.
    pub(super) fn universe(&self, filter: Option<&CompiledFilter>, k: usize) -> Vec<bool> {
        let key = &self.keys[k];
        let mut universe = vec![false; key.values.len()];
        for (p, pool) in self.pools.iter().enumerate() {
            if filter.is_some_and(|f| !f.tolerates(&pool.taints)) {
                continue;
            }
            for (d, ok) in key.pool_values[p].iter().enumerate() {
                universe[d] |= *ok;
            }
        }
        for node in self.input.nodes {
            if filter.is_some_and(|f| !f.matches_node(&node.labels, &node.taints)) {
                continue;
            }
            if let Some(d) = node.labels.get(&key.label).and_then(|v| key.index(v)) {
                universe[d] = true;
            }
        }
        universe
    }

    /// Groups every pod class could use, and counts of the bound pods in them.
    pub(super) fn build_classes(&mut self, pending: &[usize]) {
        let pods = self.input.pods;
        let mut index: FastMap<ClassKey<'_>, usize> = FastMap::default();
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
                        owned: Vec::new(),
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
            for spec in self.group_specs(pod, true).into_iter().flatten() {
                self.group(spec);
            }
            let ladder = self.ladder(pod);
            self.classes[c].ladder = ladder;
        }
        // Required anti-affinity of bound pods constrains pending ones too.
        let bound: Vec<usize> = (0..pods.len())
            .filter(|&p| pods[p].node_name.is_some() && !pods[p].terminal)
            .collect();
        for &p in &bound {
            for term in &pods[p].pod_anti_affinity {
                let key = self.topology_key(&term.topology_key);
                self.group(GroupSpec {
                    kind: GroupKind::AntiAffinity,
                    key,
                    selector: term.label_selector.clone(),
                    namespaces: Self::term_namespaces(&pods[p], &term.namespaces),
                    filter: None,
                    required: true,
                });
            }
        }
        for c in 0..self.classes.len() {
            let pod = &pods[self.classes[c].representative];
            self.classes[c].matched = self.groups_selecting(pod);
        }
        // Count bound pods where they run.
        for &p in &bound {
            let node = pods[p].node_name.as_deref();
            if let Some(&n) = node.and_then(|n| self.node_index.get(n)) {
                self.count_on_node(p, n, 1, 0);
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

    pub(super) fn key_label(&self, key: TopologyKey) -> &str {
        match key {
            TopologyKey::Hostname => LABEL_HOSTNAME,
            TopologyKey::Domain(k) => &self.keys[k].label,
        }
    }

    pub(super) fn describe_group(&self, g: usize) -> String {
        let spec = &self.groups[g].spec;
        spec.describe(self.key_label(spec.key))
    }

    pub(super) fn term_namespaces(pod: &Pod, namespaces: &[String]) -> Vec<String> {
        if namespaces.is_empty() {
            vec![pod.namespace.clone()]
        } else {
            namespaces.to_vec()
        }
    }

    /// Which nodes a spread constraint of `pod` counts; `None` when every node does.
    pub(super) fn spread_filter(
        pod: &Pod,
        c: &crate::cluster::TopologySpreadConstraint,
    ) -> Option<NodeFilter> {
        let mut filter = NodeFilter::default();
        if c.honor_node_affinity {
            filter.node_selector = pod.node_selector.clone();
            filter.required_terms = pod.required_node_terms.clone();
        }
        if c.honor_node_taints {
            filter.tolerations = Some(pod.tolerations.clone());
        }
        (filter != NodeFilter::default()).then_some(filter)
    }

    /// The groups of a pod's constraints: [spreads, affinity, anti-affinity]; with
    /// `all`, preferred terms and ScheduleAnyway spreads included.
    pub(super) fn group_specs(&mut self, pod: &Pod, all: bool) -> [Vec<GroupSpec>; 3] {
        let mut spreads = Vec::new();
        for c in &pod.topology_spread {
            if c.when_unsatisfiable == WhenUnsatisfiable::ScheduleAnyway && !all {
                continue;
            }
            spreads.push(GroupSpec {
                kind: GroupKind::Spread {
                    max_skew: c.max_skew.max(1),
                    min_domains: c.min_domains.unwrap_or(1),
                },
                key: self.topology_key(&c.topology_key),
                selector: c.label_selector.clone(),
                namespaces: vec![pod.namespace.clone()],
                filter: Self::spread_filter(pod, c),
                required: false,
            });
        }
        let mut terms = |required: &[crate::cluster::PodAffinityTerm],
                         preferred: &[crate::cluster::WeightedPodAffinityTerm],
                         kind: GroupKind| {
            let preferred = preferred.iter().filter(|_| all).map(|w| (&w.term, false));
            required
                .iter()
                .map(|t| (t, true))
                .chain(preferred)
                .map(|(t, required)| GroupSpec {
                    kind,
                    key: self.topology_key(&t.topology_key),
                    selector: t.label_selector.clone(),
                    namespaces: Self::term_namespaces(pod, &t.namespaces),
                    filter: None,
                    // Only anti-affinity tells required from preferred (symmetry);
                    // affinity groups count the same pods either way.
                    required: required && kind == GroupKind::AntiAffinity,
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

    pub(super) fn ladder(&self, pod: &Pod) -> Vec<Relax> {
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
    pub(super) fn eclass(&mut self, c: usize, level: usize) -> usize {
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
        let [spreads, affinity, anti] = self.group_specs(&strict, true);
        let spreads = spreads.into_iter().map(|s| self.group(s)).collect();
        let affinity = affinity.into_iter().map(|s| self.group(s)).collect();
        let anti = anti.into_iter().map(|s| self.group(s)).collect();

        let shape = self.node_shape(&reqs, &pod.tolerations, relax.tolerate_prefer_no_schedule);
        let e = self.eclasses.len();
        let candidates = self.shapes[shape]
            .admitted
            .iter()
            .map(|&bin| Candidate {
                bin,
                absorbed: u32::MAX,
                dead: false,
            })
            .collect();
        self.eclasses.push(EClass {
            class: c,
            reqs,
            tolerations: pod.tolerations.clone(),
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
        for b in upto..self.bins.len() {
            self.admit(e, b);
        }
        // Bins a solve opened are not kept: the shape remembers the permanent ones.
        let permanent = self.undo.as_ref().map_or(self.bins.len(), |u| u.base_bins);
        if permanent > upto {
            let newly: Vec<usize> = self.eclasses[e]
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
        let mut pool_fit = Vec::with_capacity(self.pools.len());
        let mut pool_types = Vec::with_capacity(self.pools.len());
        for (pi, pool) in self.pools.iter().enumerate() {
            let fit = tolerates_all(tolerations, &pool.taints, prefer_ok)
                .and_then(|_| {
                    pool.reqs
                        .compatible_with(reqs, &|k| self.well_known.contains(k))
                })
                .map_err(|e| format!("NodePool \"{}\": {e}", self.input.node_pools[pi].name));
            let types = if fit.is_ok() {
                let merged = pool.reqs.intersect(reqs);
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
        let s = self.shapes.len();
        self.shapes.push(NodeShape {
            pool_fit: Arc::new(pool_fit),
            pool_types: Arc::new(pool_types),
            admitted: Vec::new(),
            admitted_upto: 0,
        });
        self.shape_index.insert(key, s);
        s
    }

    /// Adds bin `b` to class `e`'s candidates if nothing static rules it out.
    pub(super) fn admit(&mut self, e: usize, b: usize) {
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
            if let Some(u) = &mut self.undo {
                if b >= u.base_bins {
                    u.pushed.push(e);
                }
            }
        }
    }

    // ----- instance types and offerings -------------------------------------------

    /// Whether type `t`'s labels satisfy every requirement on a key instance types carry.
    pub(super) fn type_satisfies(&self, t: usize, reqs: &Requirements) -> bool {
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
    pub(super) fn cheapest_offering(
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
    pub(super) fn allocatable(&self, pool: usize, t: usize) -> &Resources {
        match &self.pools[pool].allocatable {
            Some(per_type) => &per_type[t],
            None => &self.input.catalog.types[t].allocatable,
        }
    }

    pub(super) fn usable(&self, t: usize, pool: usize) -> Resources {
        let mut r = self.allocatable(pool, t).clone();
        r.sub(&self.pools[pool].overhead[t]);
        r
    }

    /// Host ports the DaemonSet pods on a node of type `t` in `pool` bind.
    pub(super) fn daemon_ports(&self, pool: usize, t: usize) -> Vec<HostPort> {
        let pool = &self.pools[pool];
        pool.port_daemons[t]
            .iter()
            .flat_map(|&d| pool.daemons[d].ports.iter().cloned())
            .collect()
    }

    /// The first of `pod`'s host ports a DaemonSet on type `t` in `pool` already binds.
    pub(super) fn port_held_by_daemon(
        &self,
        pool: usize,
        t: usize,
        pod: &Pod,
    ) -> Option<(HostPort, String)> {
        let info = &self.pools[pool];
        for &d in &info.port_daemons[t] {
            let daemon = &info.daemons[d];
            for mine in &pod.host_ports {
                if daemon.ports.iter().any(|p| p.conflicts_with(mine)) {
                    return Some((mine.clone(), daemon.name.clone()));
                }
            }
        }
        None
    }

    pub(super) fn within_limits(&self, pool: usize, it: &InstanceType) -> Result<(), String> {
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
    pub(super) fn min_values_ok(
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

    /// Domains of key `k` where the pod may go given its constraints on that key, as a
    /// mask; `None` when it has no constraint on it.
    pub(super) fn allowed_domains(&self, e: usize, pod: usize, k: usize) -> Option<Vec<bool>> {
        let ec = &self.eclasses[e];
        let p = &self.input.pods[pod];
        let key = TopologyKey::Domain(k);
        let dk = &self.keys[k];
        let n = dk.values.len();
        let pod_set = ec.reqs.get(&dk.label);
        let pod_allows = |d: usize| pod_set.is_none_or(|s| s.has(&dk.values[d]));
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
            // The domains skew is measured over: those a counted node could be in and,
            // with nodeAffinityPolicy Honor, those the pod's own affinity allows.
            let honor_affinity = group.filter.as_ref().is_some_and(|f| f.honours_affinity());
            let eligible: Vec<bool> = (0..n)
                .map(|d| group.universe[d] && (!honor_affinity || pod_allows(d)))
                .collect();
            let count = |d: usize| group.counts.get(key, d);
            let eligible_count = eligible.iter().filter(|e| **e).count() as u32;
            let min = if eligible_count < min_domains {
                0
            } else {
                (0..n)
                    .filter(|&d| eligible[d])
                    .map(count)
                    .min()
                    .unwrap_or(0)
            };
            let selects = group.spec.selects(&p.namespace, &p.labels) as u32;
            restrict(
                (0..n)
                    .map(|d| eligible[d] && count(d) + selects <= min + max_skew)
                    .collect(),
            );
        }
        for &g in &ec.affinity {
            let group = &self.groups[g];
            if group.spec.key != key {
                continue;
            }
            let with_pods: Vec<bool> = (0..n)
                .map(|d| pod_allows(d) && group.counts.get(key, d) > 0)
                .collect();
            if with_pods.iter().any(|x| *x) {
                restrict(with_pods);
            } else if group.spec.selects(&p.namespace, &p.labels) {
                // The first of a group with affinity to itself: anywhere it may go.
                restrict((0..n).map(pod_allows).collect());
            } else {
                restrict(vec![false; n]);
            }
        }
        for &g in &ec.anti {
            let group = &self.groups[g];
            if group.spec.key == key {
                restrict((0..n).map(|d| group.counts.get(key, d) == 0).collect());
            }
        }
        for &g in &self.classes[ec.class].matched {
            let group = &self.groups[g];
            if group.spec.key == key
                && group.spec.kind == GroupKind::AntiAffinity
                && group.spec.required
            {
                restrict((0..n).map(|d| group.owners.get(key, d) == 0).collect());
            }
        }
        allowed
    }

    /// Among allowed domains, the one to pin: the least populated for the first
    /// constraint that counts on this key (keeps spread even), else the first allowed.
    pub(super) fn choose_domain(
        &self,
        e: usize,
        k: usize,
        allowed: &[bool],
        usable: &[bool],
    ) -> Option<usize> {
        let ec = &self.eclasses[e];
        let key = TopologyKey::Domain(k);
        let g = ec
            .spreads
            .iter()
            .chain(ec.affinity.iter())
            .find(|&&g| self.groups[g].spec.key == key);
        let count = |d: usize| g.map_or(0, |&g| self.groups[g].counts.get(key, d));
        (0..allowed.len())
            .filter(|&d| allowed[d] && usable[d])
            .min_by_key(|&d| (count(d), if k == 0 { self.zone_use[d] } else { 0 }, d))
    }

    pub(super) fn hostname_ok(&self, e: usize, pod: usize, b: usize) -> Result<(), Fail> {
        let ec = &self.eclasses[e];
        let p = &self.input.pods[pod];
        let host = TopologyKey::Hostname;
        for &g in &ec.spreads {
            let group = &self.groups[g];
            if group.spec.key != host {
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
            if group.spec.key == host && group.counts.host(b) > 0 {
                return Err(Fail::Permanent);
            }
        }
        for &g in &self.classes[ec.class].matched {
            let group = &self.groups[g];
            if group.spec.key == host
                && group.spec.kind == GroupKind::AntiAffinity
                && group.spec.required
                && group.owners.host(b) > 0
            {
                return Err(Fail::Permanent);
            }
        }
        for &g in &ec.affinity {
            let group = &self.groups[g];
            if group.spec.key != host || group.counts.host(b) > 0 {
                continue;
            }
            let first =
                group.counts.total(host) == 0 && group.spec.selects(&p.namespace, &p.labels);
            if !first {
                return Err(Fail::Temporary);
            }
        }
        Ok(())
    }

    // ----- placement -----------------------------------------------------------------

    pub(super) fn try_bin(&self, e: usize, pod: usize, cand: &Candidate) -> Result<Fit, Fail> {
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
        // Host ports: every pod of the class binds the same ones.
        if p.host_ports
            .iter()
            .any(|mine| bin.ports.iter().any(|p| p.conflicts_with(mine)))
        {
            return Err(Fail::Permanent);
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
        // Domain constraints (zone, capacity type, any other label).
        let reqs = merged.as_ref().unwrap_or(&bin.reqs);
        let mut pins = Vec::new();
        for k in 0..self.keys.len() {
            if let Some(d) = self.pin(e, pod, cand.bin, reqs, k)? {
                pins.push((k, d));
            }
        }
        Ok(Fit { merged, pins })
    }

    /// Whether a new claim with requirements `reqs` (and its target type) can be in
    /// domain `d` of key `k`.
    pub(super) fn claim_can_be_in(
        &self,
        target: Option<usize>,
        reqs: &Requirements,
        k: usize,
        d: usize,
    ) -> bool {
        let key = &self.keys[k];
        match (k, target) {
            (0, Some(t)) => {
                let mut m = vec![false; self.zones.len()];
                m[d] = true;
                self.cheapest_offering(t, reqs, Some(&m), None).is_some()
            }
            (1, Some(t)) => {
                let mut m = [false; 2];
                m[d] = true;
                self.cheapest_offering(t, reqs, None, Some(m)).is_some()
            }
            (0 | 1, None) => reqs.get(&key.label).is_none_or(|s| s.has(&key.values[d])),
            (_, Some(t)) if key.type_key => {
                self.input.catalog.types[t].labels.get(&key.label) == Some(&key.values[d])
            }
            // The node carries the label only when its requirements define it.
            _ => reqs.get(&key.label).is_some_and(|s| s.has(&key.values[d])),
        }
    }

    /// For a pod with constraints on key `k`: the domain to pin the bin to (or keep).
    pub(super) fn pin(
        &self,
        e: usize,
        pod: usize,
        b: usize,
        reqs: &Requirements,
        k: usize,
    ) -> Result<Option<usize>, Fail> {
        let bin = &self.bins[b];
        let Some(allowed) = self.allowed_domains(e, pod, k) else {
            return Ok(None);
        };
        if let Some(d) = bin.domain(k) {
            return if allowed[d] {
                Ok(None)
            } else {
                Err(Fail::Temporary)
            };
        }
        if !matches!(bin.origin, Origin::New(_)) {
            // A node without the label is in no domain of it.
            return Err(Fail::Permanent);
        }
        let usable: Vec<bool> = (0..allowed.len())
            .map(|d| self.claim_can_be_in(bin.target, reqs, k, d))
            .collect();
        match self.choose_domain(e, k, &allowed, &usable) {
            Some(d) => Ok(Some(d)),
            None => Err(Fail::Temporary),
        }
    }

    pub(super) fn commit(&mut self, e: usize, pod: usize, b: usize, fit: Fit) {
        self.save_bin(b);
        let p = &self.input.pods[pod];
        let class = self.eclasses[e].class;
        let bin = &mut self.bins[b];
        bin.used.add(&p.requests);
        bin.ports.extend(p.host_ports.iter().cloned());
        if let Some(m) = fit.merged {
            if m != bin.reqs {
                bin.reqs = m;
                bin.version += 1;
            }
        }
        bin.pods.push((pod, e));
        match &mut self.undo {
            None => self.classes[class].remaining.sub(&p.requests),
            Some(u) => {
                if let Some(m) = u.moving.iter_mut().find(|m| m.0 == pod) {
                    m.1 = true;
                }
            }
        }
        // Count this pod in its domains, then pin (which counts earlier pods too).
        self.count_pod(e, b, TopologyKey::Hostname, b);
        for k in 0..self.keys.len() {
            if let Some(d) = self.bins[b].domain(k) {
                self.count_pod(e, b, TopologyKey::Domain(k), d);
            }
        }
        for (k, d) in fit.pins {
            self.pin_bin(b, k, d);
        }
        let version = self.bins[b].version;
        let candidates = &mut self.eclasses[e].candidates;
        if let Some(i) = candidates.iter().position(|c| c.bin == b) {
            if let Some(u) = &mut self.undo {
                u.absorbed.push((e, i, candidates[i].absorbed));
            }
            candidates[i].absorbed = version;
        }
    }

    /// Counts a pod of class `e` on bin `b` in `domain`: in every group that selects it
    /// (and whose node filter admits the bin), and as an owner in its own required
    /// anti-affinity groups.
    pub(super) fn count_pod(&mut self, e: usize, b: usize, key: TopologyKey, domain: usize) {
        let class = self.eclasses[e].class;
        for i in 0..self.classes[class].matched.len() {
            let g = self.classes[class].matched[i];
            if self.groups[g].spec.key != key {
                continue;
            }
            if let Some(filter) = &self.groups[g].filter {
                let bin = &self.bins[b];
                let admitted = match bin.origin {
                    Origin::New(_) => filter.matches_requirements(&bin.reqs, &bin.taints, &|k| {
                        self.well_known.contains(k)
                    }),
                    _ => filter.matches_requirements(&bin.reqs, &bin.taints, &|_| false),
                };
                if !admitted {
                    continue;
                }
            }
            self.add_count(g, false, key, Some(domain), 1);
        }
        for i in 0..self.eclasses[e].anti.len() {
            let g = self.eclasses[e].anti[i];
            if self.groups[g].spec.key == key && self.groups[g].spec.required {
                self.add_count(g, true, key, Some(domain), 1);
            }
        }
    }

    /// Saves bin `b` in the undo log the first time a solve changes it.
    pub(super) fn save_bin(&mut self, b: usize) {
        let Some(u) = &mut self.undo else { return };
        if b >= u.base_bins || self.bin_stamp[b] == self.stamp {
            return;
        }
        self.bin_stamp[b] = self.stamp;
        u.bins.push((b, self.bins[b].clone()));
    }

    pub(super) fn pin_bin(&mut self, b: usize, k: usize, domain: usize) {
        let label = self.keys[k].label.clone();
        let value = self.keys[k].values[domain].clone();
        let bin = &mut self.bins[b];
        if bin.domain(k).is_some() {
            return;
        }
        if bin.domains.len() <= k {
            bin.domains.resize(k + 1, None);
        }
        bin.domains[k] = Some(domain);
        bin.reqs.add(&label, ValueSet::in_values([value]));
        bin.version += 1;
        let members = bin.pods.clone();
        for (_, e) in members {
            self.count_pod(e, b, TopologyKey::Domain(k), domain);
        }
    }

    pub(super) fn place(&mut self, e: usize, pod: usize) -> Result<(), String> {
        let mut i = 0;
        while i < self.eclasses[e].candidates.len() {
            if self.eclasses[e].candidates[i].dead {
                i += 1;
                continue;
            }
            let cand = &self.eclasses[e].candidates[i];
            if self.blocked.get(cand.bin).copied().unwrap_or(false) {
                i += 1;
                continue;
            }
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
                    if let Some(u) = &mut self.undo {
                        u.dead.push((e, i));
                    }
                }
                Err(Fail::Temporary) => {}
            }
            i += 1;
        }
        let ec = &mut self.eclasses[e];
        // A solve's undo log refers to candidates by position: no compaction then.
        if self.undo.is_none() && ec.dead > 64 && ec.dead * 2 > ec.candidates.len() {
            ec.candidates.retain(|c| !c.dead);
            ec.dead = 0;
        }
        self.open_claim(e, pod)
    }

    pub(super) fn open_claim(&mut self, e: usize, pod: usize) -> Result<(), String> {
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

    /// Why no new claim can satisfy the pod's pod-affinity, if that is so: a required
    /// (or not yet relaxed preferred) term that only pods already running elsewhere, or
    /// no pod at all, can satisfy.
    pub(super) fn affinity_blocks_new_claims(&self, e: usize, pod: usize) -> Option<String> {
        let p = &self.input.pods[pod];
        for &g in &self.eclasses[e].affinity {
            let group = &self.groups[g];
            let total = group.counts.total(group.spec.key);
            let selects_itself = group.spec.selects(&p.namespace, &p.labels);
            if total == 0 && !selects_itself {
                return Some(format!(
                    "{}: no pod matches its selector",
                    self.describe_group(g)
                ));
            }
            if group.spec.key == TopologyKey::Hostname && total > 0 {
                return Some(format!(
                    "{}: no node with a matching pod has room",
                    self.describe_group(g)
                ));
            }
        }
        None
    }

    pub(super) fn open_in_pool(&mut self, e: usize, pod: usize, pool: usize) -> Result<(), String> {
        let p = &self.input.pods[pod];
        let pool_name = &self.input.node_pools[pool].name;
        if let Some(reason) = self.affinity_blocks_new_claims(e, pod) {
            return Err(reason);
        }
        // A hostname requirement names an existing node: a new one never has it.
        if let Some(set) = self.eclasses[e].reqs.get(LABEL_HOSTNAME) {
            if !set.allows_absent() {
                return Err(format!(
                    "{LABEL_HOSTNAME} {set}: only that existing node can take the pod, and it has no room"
                ));
            }
        }
        let reqs = self.pools[pool].reqs.intersect(&self.eclasses[e].reqs);
        let zmask = self.allowed_domains(e, pod, 0);
        let cmask = self.allowed_domains(e, pod, 1);
        let cmask_arr = cmask.as_ref().map(|m| [m[0], m[1]]);
        if zmask.as_ref().is_some_and(|m| !m.iter().any(|x| *x))
            || cmask_arr.is_some_and(|m| !m[0] && !m[1])
        {
            return Err(format!(
                "{} cannot be satisfied",
                self.topology_description(e)
            ));
        }
        // Other keys: the domains the pod may go to that this pool can give a node.
        let mut other_keys: Vec<(usize, Vec<bool>)> = Vec::new();
        for k in 2..self.keys.len() {
            let Some(allowed) = self.allowed_domains(e, pod, k) else {
                continue;
            };
            let key = &self.keys[k];
            let ok: Vec<bool> = (0..allowed.len())
                .map(|d| {
                    allowed[d]
                        && key.pool_values[pool][d]
                        && reqs.get(&key.label).is_none_or(|s| s.has(&key.values[d]))
                })
                .collect();
            if !ok.iter().any(|x| *x) {
                return Err(format!(
                    "{} cannot be satisfied in NodePool \"{pool_name}\"",
                    self.topology_description(e)
                ));
            }
            other_keys.push((k, ok));
        }
        self.refresh_duals(pool);
        let remaining = self.compatible_remaining(pool);
        let mut best: Option<(f64, f64, usize, usize, CapacityType, f64)> = None;
        // The cheapest single node that could hold everything still to place.
        let mut whole_best: Option<(f64, usize, usize, CapacityType)> = None;
        let mut shortfall: Option<(String, i64, i64)> = None;
        let mut limit_reason = None;
        let mut offering_missing = false;
        let mut port_held: Option<(HostPort, String)> = None;
        let mut other_key_missing = false;
        let types = Arc::clone(&self.eclasses[e].pool_types);
        for &t in &types[pool] {
            let it = &self.input.catalog.types[t];
            let usable = self.usable(t, pool);
            if !p.requests.fits_in(&usable) {
                if let Some(s) = p.requests.first_shortfall(&usable) {
                    if shortfall.as_ref().is_none_or(|b| s.2 > b.2 || b.0 != s.0) {
                        shortfall = Some(s);
                    }
                }
                continue;
            }
            if let Some(held) = self.port_held_by_daemon(pool, t, p) {
                port_held = Some(held);
                continue;
            }
            if other_keys.iter().any(|(k, ok)| {
                self.keys[*k].type_key
                    && !(0..ok.len()).any(|d| ok[d] && self.claim_can_be_in(Some(t), &reqs, *k, d))
            }) {
                other_key_missing = true;
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
            if remaining.fits_in(&usable) && whole_best.is_none_or(|w| price < w.0) {
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
            if offering_missing || other_key_missing {
                if zmask.is_some() || cmask.is_some() || other_key_missing {
                    return Err(format!(
                        "{} cannot be satisfied in NodePool \"{pool_name}\"",
                        self.topology_description(e)
                    ));
                }
                return Err(format!(
                    "NodePool \"{pool_name}\": no offering in an allowed zone and capacity type"
                ));
            }
            if let Some((port, daemon)) = port_held {
                return Err(format!(
                    "NodePool \"{pool_name}\": host port {}/{} is held by DaemonSet {daemon} on every instance type that could take the pod",
                    port.port, port.protocol
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
        let ceiling = self.usable(t, pool);
        let capacity = it.capacity.clone();
        self.pools[pool].usage.add(&capacity);
        let nodes = self.pools[pool].usage.get_milli("nodes");
        self.pools[pool].usage.set_milli("nodes", nodes + 1000);
        let b = self.bins.len();
        let domains = (0..self.keys.len())
            .map(|k| {
                reqs.get(&self.keys[k].label)
                    .and_then(|s| s.single_value())
                    .and_then(|v| self.keys[k].index(v))
            })
            .collect();
        let ports = self.daemon_ports(pool, t);
        let mut pins = Vec::new();
        if zmask.is_some() {
            pins.push((0, z));
        }
        if cmask.is_some() {
            pins.push((1, ct_index(ct)));
        }
        for (k, ok) in &other_keys {
            let usable: Vec<bool> = (0..ok.len())
                .map(|d| self.claim_can_be_in(Some(t), &reqs, *k, d))
                .collect();
            if let Some(d) = self.choose_domain(e, *k, ok, &usable) {
                pins.push((*k, d));
            }
        }
        self.bins.push(Bin {
            origin: Origin::New(pool),
            reqs: reqs.clone(),
            version: 0,
            taints: self.pools[pool].taints.clone(),
            ceiling,
            used: Resources::new(),
            target: Some(t),
            domains,
            ports,
            pods: Vec::new(),
        });
        for other in 0..self.eclasses.len() {
            self.admit(other, b);
        }
        let fit = Fit { merged: None, pins };
        self.commit(e, pod, b, fit);
        Ok(())
    }

    /// The pod's topology constraints on labels other than hostname, for reasons.
    pub(super) fn topology_description(&self, e: usize) -> String {
        let ec = &self.eclasses[e];
        let own: Vec<String> = ec
            .spreads
            .iter()
            .chain(&ec.affinity)
            .chain(&ec.anti)
            .filter(|&&g| self.groups[g].spec.key != TopologyKey::Hostname)
            .map(|&g| self.describe_group(g))
            .collect();
        if own.is_empty() {
            "pod anti-affinity of pods already placed".into()
        } else {
            own.join(", ")
        }
    }

    /// Remaining requests of unplaced pods that could use this pool.
    pub(super) fn compatible_remaining(&self, pool: usize) -> Resources {
        let mut r = Resources::new();
        if let Some(u) = &self.undo {
            // A solve places only the pods it moves.
            for &(p, placed) in &u.moving {
                let class = &self.classes[self.pod_class[p]];
                if !placed && class.pools_ok.get(pool).copied().unwrap_or(false) {
                    r.add(&self.input.pods[p].requests);
                }
            }
            return r;
        }
        for c in &self.classes {
            if c.pools_ok.get(pool).copied().unwrap_or(false) {
                r.add(&c.remaining);
            }
        }
        r
    }

    /// Dual value of what type `t` would hold for the remaining demand, and its raw size.
    pub(super) fn value(
        &self,
        pool: usize,
        t: usize,
        remaining: &Resources,
        pod: &Resources,
    ) -> (f64, f64) {
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
    pub(super) fn refresh_duals(&mut self, pool: usize) {
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

    /// Everything but placement: setup, the pending pods in order, their classes, and
    /// the bound pods counted in topology.
    pub(super) fn prepare(input: &'a SchedulerInput<'a>) -> Self {
        let mut s = Scheduler::new(input);
        let pods = input.pods;
        // Pods kube-scheduler may still bind, or that are not ours (another scheduler,
        // a preemption nomination, a claim not ready), get no capacity.
        let mut pending: Vec<usize> = (0..pods.len())
            .filter(|&p| pods[p].is_pending() && pods[p].is_provisionable())
            .collect();
        pending.sort_by(|&a, &b| largest_first(pods, a, b));
        s.build_classes(&pending);
        s.pending = pending;
        s
    }

    pub(super) fn run(mut self) -> Schedule {
        let pods = self.input.pods;
        let pending = std::mem::take(&mut self.pending);
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
    pub(super) fn place_nominated(&mut self, pending: Vec<usize>) -> Vec<usize> {
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
                            pins: Vec::new(),
                        },
                    );
                }
                None => rest.push(p),
            }
        }
        rest
    }

    pub(super) fn finish(mut self, mut unschedulable: Vec<(usize, String)>) -> Schedule {
        self.repack_free_claims();
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

    // ----- cheaper fleets: re-packing claims of unconstrained pods ------------------

    /// A pod the repack pass may move between new claims: no topology spread, no pod
    /// (anti-)affinity, required or preferred, no group of another pod counts it, no
    /// host ports, and only well-known resources.
    pub(super) fn movable(&self, pod: usize) -> bool {
        let p = &self.input.pods[pod];
        p.topology_spread.is_empty()
            && p.pod_affinity.is_empty()
            && p.pod_anti_affinity.is_empty()
            && p.preferred_pod_affinity.is_empty()
            && p.preferred_pod_anti_affinity.is_empty()
            && p.host_ports.is_empty()
            && self.classes[self.pod_class[pod]].matched.is_empty()
            && p.requests
                .iter()
                .all(|(name, _)| WELL_KNOWN.contains(&name))
    }

    /// Re-packs, per NodePool and set of requirements, the new claims that hold only
    /// movable pods (see `repack`), and keeps the result when it costs less. The
    /// claims keep their requirements, so every pod's node constraints still hold;
    /// no topology group counts these pods, so moving them changes no count. Pools
    /// with limits or minValues are left as packed (the pass does not track them).
    pub(super) fn repack_free_claims(&mut self) {
        self.repack_free_claims_from(0);
    }

    /// As [`Self::repack_free_claims`], over the new claims from bin `first` on only (a
    /// speculative solve's own claims, not those committed before it).
    pub(super) fn repack_free_claims_from(&mut self, first: usize) {
        let mut groups: Vec<(usize, Requirements, Vec<usize>)> = Vec::new();
        for b in first..self.bins.len() {
            let Origin::New(pool) = self.bins[b].origin else {
                continue;
            };
            let bin = &self.bins[b];
            if bin.pods.is_empty()
                || self.pools[pool].has_min_values
                || self.input.node_pools[pool].limits.is_some()
                || !bin.pods.iter().all(|&(p, _)| self.movable(p))
            {
                continue;
            }
            match groups
                .iter_mut()
                .find(|(gp, reqs, _)| *gp == pool && *reqs == bin.reqs)
            {
                Some(g) => g.2.push(b),
                None => groups.push((pool, bin.reqs.clone(), vec![b])),
            }
        }
        for (pool, reqs, bins) in groups {
            self.repack_group(pool, &reqs, &bins);
        }
    }

    pub(super) fn repack_group(&mut self, pool: usize, reqs: &Requirements, bins: &[usize]) {
        // Types the claims could launch as, with their price and room for pods.
        let mut types: Vec<usize> = Vec::new();
        let mut node_types: Vec<repack::NodeType> = Vec::new();
        for &t in &self.pools[pool].types {
            if !self.type_satisfies(t, reqs) {
                continue;
            }
            let Some((_, _, price)) = self.cheapest_offering(t, reqs, None, None) else {
                continue;
            };
            let usable = self.usable(t, pool);
            types.push(t);
            node_types.push(repack::NodeType {
                cap: (0..WELL_KNOWN.len())
                    .map(|d| usable.slot_milli(d))
                    .collect(),
                price,
            });
        }
        // What the claims cost now: each at the cheapest type that holds its pods.
        let mut current = 0.0;
        for &b in bins {
            let used = &self.bins[b].used;
            let price = types
                .iter()
                .zip(&node_types)
                .filter(|(_, nt)| (0..WELL_KNOWN.len()).all(|d| used.slot_milli(d) <= nt.cap[d]))
                .map(|(_, nt)| nt.price)
                .fold(f64::INFINITY, f64::min);
            current += price;
        }
        // Shapes: pods with identical requests.
        let mut shape_of: HashMap<Vec<i64>, usize> = HashMap::new();
        let mut demands: Vec<Vec<i64>> = Vec::new();
        let mut members: Vec<Vec<(usize, usize)>> = Vec::new();
        for &b in bins {
            for &(p, e) in &self.bins[b].pods {
                let r = &self.input.pods[p].requests;
                let v: Vec<i64> = (0..WELL_KNOWN.len()).map(|d| r.slot_milli(d)).collect();
                let s = *shape_of.entry(v.clone()).or_insert_with(|| {
                    demands.push(v);
                    members.push(Vec::new());
                    demands.len() - 1
                });
                members[s].push((p, e));
            }
        }
        let counts: Vec<usize> = members.iter().map(|m| m.len()).collect();
        let pods: usize = counts.iter().sum();
        // Shape scans: enough for thousands of pods of dozens of shapes.
        let budget = 4_000_000u64.max(pods as u64 * 64);
        let Some((cost, nodes)) = repack::pack(&demands, &counts, &node_types, budget) else {
            return;
        };
        if cost >= current * (1.0 - 1e-9) {
            return;
        }
        // Apply: reuse the group's bins in order, push more if needed, empty the rest.
        for m in &mut members {
            m.reverse(); // pop() then hands pods out in their original order
        }
        let template = bins[0];
        let mut slots: Vec<usize> = bins.to_vec();
        for (i, node) in nodes.iter().enumerate() {
            let t = types[node.ty];
            let b = if i < slots.len() {
                slots[i]
            } else {
                let base = &self.bins[template];
                let bin = Bin {
                    origin: base.origin,
                    reqs: base.reqs.clone(),
                    version: base.version,
                    taints: base.taints.clone(),
                    ceiling: Resources::new(),
                    used: Resources::new(),
                    target: None,
                    domains: base.domains.clone(),
                    ports: Vec::new(),
                    pods: Vec::new(),
                };
                self.bins.push(bin);
                slots.push(self.bins.len() - 1);
                self.bins.len() - 1
            };
            let mut pods = Vec::new();
            let mut used = Resources::new();
            for &(s, n) in &node.take {
                for _ in 0..n {
                    let (p, e) = members[s].pop().expect("the packing places each pod once");
                    used.add(&self.input.pods[p].requests);
                    pods.push((p, e));
                }
            }
            self.retarget(pool, b, Some(t));
            let bin = &mut self.bins[b];
            bin.pods = pods;
            bin.used = used;
        }
        for &b in bins.iter().skip(nodes.len()) {
            self.retarget(pool, b, None);
            let bin = &mut self.bins[b];
            bin.pods.clear();
            bin.used = Resources::new();
        }
        debug_assert!(members.iter().all(|m| m.is_empty()));
    }

    /// Moves a new claim's reservation in its pool's usage from its old target type to
    /// `t` (none: the claim is gone), and sizes it for `t`.
    pub(super) fn retarget(&mut self, pool: usize, b: usize, t: Option<usize>) {
        let catalog = self.input.catalog;
        let usage = &mut self.pools[pool].usage;
        if let Some(old) = self.bins[b].target {
            usage.sub(&catalog.types[old].capacity);
            let n = usage.get_milli("nodes");
            usage.set_milli("nodes", n - 1000);
        }
        if let Some(new) = t {
            usage.add(&catalog.types[new].capacity);
            let n = usage.get_milli("nodes");
            usage.set_milli("nodes", n + 1000);
        }
        let (ceiling, ports) = match t {
            Some(t) => (self.usable(t, pool), self.daemon_ports(pool, t)),
            None => (Resources::new(), Vec::new()),
        };
        let bin = &mut self.bins[b];
        bin.target = t;
        bin.ceiling = ceiling;
        bin.ports = ports;
    }

    pub(super) fn finalize_claim(&mut self, b: usize, pool: usize, pods: Vec<usize>) -> NewClaim {
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
        let pod_ports: Vec<&HostPort> = pods
            .iter()
            .flat_map(|&p| self.input.pods[p].host_ports.iter())
            .collect();
        let mut options: Vec<(f64, usize, usize, CapacityType)> = Vec::new();
        for &t in &self.pools[pool].types {
            if !used.fits_in(&self.usable(t, pool)) || !self.type_satisfies(t, &reqs) {
                continue;
            }
            let daemon_ports = self.daemon_ports(pool, t);
            if pod_ports
                .iter()
                .any(|mine| daemon_ports.iter().any(|p| p.conflicts_with(mine)))
            {
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
        let compatible_types = options.len();
        if options.len() > MAX_INSTANCE_TYPE_OPTIONS {
            options = self.cap_options(options, &reqs);
        }
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
        // Custom labels (keys neither the instance nor Karpenter sets): the value the
        // requirements settled on (a pod's selector, a topology pin), else any value
        // they allow, as Karpenter labels its nodes. Without them a pod selecting the
        // label, or spread over it, would never bind.
        let labels = reqs
            .iter()
            .filter(|(k, _)| {
                !self.type_keys.contains(k.as_str())
                    && ![
                        LABEL_ZONE,
                        LABEL_REGION,
                        LABEL_CAPACITY_TYPE,
                        LABEL_NODEPOOL,
                        LABEL_HOSTNAME,
                    ]
                    .contains(&k.as_str())
                    && !k.starts_with("karpenter.sh/")
                    && !k.starts_with("karpenter.k8s.aws/")
            })
            .filter_map(|(k, set)| set.any_value().map(|v| (k.clone(), v)))
            .collect();
        NewClaim {
            node_pool: self.input.node_pools[pool].name.clone(),
            labels,
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
            compatible_types,
            zones,
            capacity_types,
        }
    }

    /// The options a launch would use, from `options` sorted cheapest first: for each
    /// minValues key of `reqs`, the cheapest type of each distinct value until the minimum
    /// is reached (so the kept list satisfies minValues, as Karpenter's truncation
    /// requires), then the cheapest of the rest up to [`MAX_INSTANCE_TYPE_OPTIONS`].
    /// Price order is kept.
    pub(super) fn cap_options(
        &self,
        options: Vec<(f64, usize, usize, CapacityType)>,
        reqs: &Requirements,
    ) -> Vec<(f64, usize, usize, CapacityType)> {
        let mut keep = vec![false; options.len()];
        // The cheapest is the claim's instance type: always kept.
        keep[0] = true;
        let mut kept = 1;
        for (key, set) in reqs.iter() {
            let Some(min) = set.min_values else { continue };
            let mut seen: HashSet<&str> = HashSet::new();
            for (i, &(_, t, _, _)) in options.iter().enumerate() {
                if seen.len() >= min as usize {
                    break;
                }
                let Some(value) = self.input.catalog.types[t].labels.get(key) else {
                    continue;
                };
                if seen.insert(value) && !keep[i] {
                    keep[i] = true;
                    kept += 1;
                }
            }
        }
        for k in keep.iter_mut() {
            if kept >= MAX_INSTANCE_TYPE_OPTIONS {
                break;
            }
            if !*k {
                *k = true;
                kept += 1;
            }
        }
        options
            .into_iter()
            .zip(keep)
            .filter_map(|(o, k)| k.then_some(o))
            .collect()
    }
}

/// Placement order: most CPU first, then most memory, then input order.
pub(super) fn largest_first(pods: &[Pod], a: usize, b: usize) -> std::cmp::Ordering {
    let (ra, rb) = (&pods[a].requests, &pods[b].requests);
    rb.slot_milli(CPU)
        .cmp(&ra.slot_milli(CPU))
        .then(rb.slot_milli(MEMORY).cmp(&ra.slot_milli(MEMORY)))
        .then(a.cmp(&b))
}

/// What makes two pods interchangeable for scheduling (requests aside).
#[derive(PartialEq, Eq, Hash)]
pub(super) struct ClassKey<'p> {
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
    host_ports: &'p [HostPort],
}

impl<'p> ClassKey<'p> {
    pub(super) fn of(pod: &'p Pod) -> Self {
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
            host_ports: &pod.host_ports,
        }
    }
}
