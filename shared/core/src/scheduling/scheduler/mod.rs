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

//!
//! One file per concept, each an `impl Scheduler` block over the state below:
//!
//! - `ids`: typed indices (`BinId`, `PoolId`, `InstanceTypeId`, `ClassId`, `EClassId`,
//!   `GroupId`, `DomainKeyId`, `DomainId`, `PodId`) and the `IdVec` tables they index;
//! - `setup`: the state built once per cluster (prices, well-known keys) and the
//!   pending pods in placement order;
//! - `pools`: NodePools as the scheduler sees them — requirements, taints, the
//!   DaemonSets their nodes run, their types, usage and limits;
//! - `bins`: the places a pod can go — existing nodes, in-flight claims, new claims;
//! - `offerings`: instance types, their cheapest offering, and what a node of a type
//!   leaves for pods;
//! - `domain_keys`: the labels topology constraints count on, and their values;
//! - `groups`: topology groups — registering them and counting pods in them;
//! - `preferences`: the order in which a class's preferences are relaxed;
//! - `classes`: pod classes, compiled per relaxation level, with their candidate bins;
//! - `domains`: which domains a pod may go to, and pinning a bin to one;
//! - `placement`: trying a pod on the candidate bins, and committing it to one;
//! - `new_claims`: opening a new claim when no bin takes a pod, sized by a target type;
//! - `duals`: the dual prices of the remaining demand that choose that target;
//! - `undo`: the log a speculative solve keeps to put everything back;
//! - `run`: the provisioning loop and its result;
//! - `repacking`: re-packing the claims of unconstrained pods into a cheaper fleet;
//! - `claim_options`: the instance types a finished claim may launch as.

mod bins;
mod claim_options;
mod classes;
mod domain_keys;
mod domains;
mod duals;
mod groups;
mod ids;
mod new_claims;
mod offerings;
mod placement;
mod pools;
mod preferences;
mod repacking;
mod run;
pub(crate) use run::no_offering;
mod setup;
mod static_claims;
mod undo;

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::api::model::{Ec2NodeClass, NodePool};
use crate::catalog::{CapacityType, Catalog};
use crate::cluster::{DaemonSet, LabelSelector, Node, Pod, Toleration};
use crate::overlay::OverlaysApplied;
use crate::pricing::Pricing;
use crate::resources::Resources;

pub use static_claims::static_claims;

use super::fast_hash::{FastMap, FastSet};
use super::requirements::Requirements;
use super::topology::{Group, GroupSpec, NodeFilter};
use super::unschedulable::Unschedulable;

pub(super) use bins::{Bin, Origin};
pub(super) use classes::{Class, ClassKey, EClass, NodeShape};
pub(super) use domain_keys::DomainKey;
pub(super) use ids::{
    BinId, ClassId, DomainId, DomainKeyId, EClassId, GroupId, IdVec, InstanceTypeId, PodId, PoolId,
};
pub(super) use offerings::ct_domain;
pub(super) use pools::PoolInfo;
pub(super) use setup::largest_first;
pub(super) use undo::{AbsorbedBefore, CandidateRef, MovingPod, PoolState, Undo};

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
    /// Whether the pool's NodeOverlays priced or sized any of `options`.
    pub overlays_applied: OverlaysApplied,
}

/// Pods placed on the free capacity of an existing node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodePlacement {
    /// The node's name.
    pub node: String,
    /// Indices into `SchedulerInput::pods`, ascending.
    pub pods: Vec<usize>,
}

/// Pods counted against a claim already launching, whose node has not registered yet.
#[derive(Debug, Clone, PartialEq)]
pub struct InFlightPlacement {
    /// The NodeClaim's name; `committed-N` for a claim an earlier speculative solve's
    /// commit made (see the prepared scheduler's `commit`).
    pub claim: String,
    /// Indices into `SchedulerInput::pods`, ascending.
    pub pods: Vec<usize>,
}

/// A pending pod that fits nowhere.
#[derive(Debug, Clone, PartialEq)]
pub struct UnplacedPod {
    /// Index into `SchedulerInput::pods`.
    pub pod: usize,
    /// The constraint that stops it, with its preferences relaxed as far as they go.
    pub reason: Unschedulable,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Schedule {
    pub new_claims: Vec<NewClaim>,
    /// Pods that fit existing nodes.
    pub existing_nodes: Vec<NodePlacement>,
    /// Pods absorbed by in-flight claims.
    pub in_flight: Vec<InFlightPlacement>,
    /// Pods that cannot be placed, by pod index.
    pub unschedulable: Vec<UnplacedPod>,
}

/// The scheduling state of one cluster: its pools, bins, topology groups and pod classes.
/// Built once (`setup`), cloned for each provisioning run, and changed in place (and
/// undone) by speculative solves.
#[derive(Clone)]
pub(super) struct Scheduler<'a> {
    pub(super) input: &'a SchedulerInput<'a>,
    /// The zone key's domains (`DomainKeyId::ZONE`).
    pub(super) zones: IdVec<DomainId, String>,
    /// Zone, capacity type, then every other key a constraint counts on.
    pub(super) keys: IdVec<DomainKeyId, DomainKey>,
    /// Label keys a NodePool need not mention for a pod to require them: every key
    /// an instance type carries and the keys every node gets. Borrowed from the catalog:
    /// a scheduler is built per decision, and a set of owned strings cost a copy of
    /// every type's label keys each time.
    pub(super) well_known: FastSet<&'a str>,
    /// Every label key some instance type carries.
    pub(super) type_keys: FastSet<&'a str>,
    /// price[type][zone][capacity type]
    pub(super) prices: setup::PoolPrices,
    pub(super) pools: IdVec<PoolId, PoolInfo>,
    /// The pools in the order new claims try them: by weight, then name.
    pub(super) pool_order: Vec<PoolId>,
    pub(super) bins: IdVec<BinId, Bin>,
    pub(super) groups: IdVec<GroupId, Group>,
    pub(super) group_index: FastMap<GroupSpec, GroupId>,
    pub(super) classes: IdVec<ClassId, Class>,
    /// Per input pod: its class, when it is placed (pending, or moved by a solve).
    pub(super) pod_class: IdVec<PodId, Option<ClassId>>,
    pub(super) eclasses: IdVec<EClassId, EClass>,
    /// (class, relaxation level) → its compiled form.
    pub(super) eclass_index: FastMap<(ClassId, usize), EClassId>,
    pub(super) any_prefer_no_schedule: bool,
    /// Per zone: how many finished new claims have their cheapest option there (equal
    /// prices go to the least used zone).
    pub(super) zone_use: IdVec<DomainId, u32>,
    /// The pods provisioning places, largest first (set by `prepare`).
    pub(super) pending: Vec<PodId>,
    /// Per input node: its bin, when it is one (Ready and schedulable).
    pub(super) node_bin: Vec<Option<BinId>>,
    pub(super) node_index: FastMap<&'a str, usize>,
    /// Groups by the first `matchLabels` entry of their selector (label, value), so
    /// counting a pod looks at the groups that could select it, not at all of them.
    pub(super) select_index: FastMap<String, FastMap<String, Vec<GroupId>>>,
    /// Groups whose selector has only expressions: checked against every pod.
    pub(super) select_scan: Vec<GroupId>,
    /// Required anti-affinity groups by (topology key label, selector): the groups a pod
    /// owns through its own required terms.
    pub(super) owner_index: FastMap<(String, Option<LabelSelector>), Vec<GroupId>>,
    /// Compiled node-side constraints shared by every class with the same ones.
    pub(super) shapes: Vec<NodeShape>,
    pub(super) shape_index: FastMap<(Requirements, Vec<Toleration>, bool), usize>,
    /// Present while a speculative solve runs: how to put everything back.
    pub(super) undo: Option<Undo>,
    /// Bins no pod may be placed on (nodes a solve removes, or keeps out of reach).
    pub(super) blocked: IdVec<BinId, bool>,
    /// Per bin: the stamp of the solve that last saved it in `undo`.
    pub(super) bin_stamp: IdVec<BinId, u32>,
    pub(super) stamp: u32,
    /// Capacity reservations' instances taken by this solve's claims.
    pub(super) reserved: offerings::ReservedLedger,
    /// `universe` by node filter and key: many groups share one (a deployment's spread
    /// each), and computing it looks at every node.
    pub(super) universe_cache: FastMap<(Option<NodeFilter>, DomainKeyId), Vec<bool>>,
    /// Per pool: its types whose labels meet a set of requirements, by the
    /// requirements (see `types_meeting`).
    pub(super) meeting_cache: IdVec<PoolId, FastMap<Requirements, Arc<[InstanceTypeId]>>>,
}
