//! The ports: what the engine needs from the world, in domain types only. Adapters
//! (`nodewright-aws`, `nodewright-kube`) implement them against AWS and Kubernetes;
//! `nodewright-sim`'s `fakes` implement them in memory, faithfully enough that the
//! simulator and the tests can rely on them.
//!
//! Errors are classified by kind so callers branch on *what happened* (throttled,
//! not found, conflict, insufficient capacity) and never on message text; the
//! underlying SDK or HTTP error is kept as the source.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use nodewright_core::api::model::{CapacityReservationSelectorTerm, Ec2NodeClass, NodePool, Taint};
use nodewright_core::api::{
    NODE_CLASS_API_VERSION, NODE_CLASS_KIND, NODE_POOL_API_VERSION, NODE_POOL_KIND,
};
use nodewright_core::catalog::{CapacityType, Catalog, Reservation};
use nodewright_core::cluster::{DaemonSet, Node, Pod, PodDisruptionBudget};
use nodewright_core::nodeclaim::{ClaimState, NodeClaim};

pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What kind of failure an adapter saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Rate limited: back off and retry.
    Throttled,
    NotFound,
    /// A conditional write lost (someone else changed it first), or the object exists.
    Conflict,
    /// The offerings tried have no capacity (InsufficientInstanceCapacity and friends).
    InsufficientCapacity,
    /// Credentials or permissions.
    Unauthorized,
    /// The request itself is wrong (bad parameter, invalid template...).
    Invalid,
    /// A timeout or connection failure: retryable.
    Unavailable,
    /// An eviction refused because it would violate a PodDisruptionBudget (HTTP 429
    /// from the `pods/eviction` subresource). Not throttling: retrying sooner does not
    /// help; the drain tries again on its next step, until its deadline.
    DisruptionBudget,
    Other,
}

impl ErrorKind {
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            ErrorKind::Throttled | ErrorKind::Unavailable | ErrorKind::Conflict
        )
    }
}

macro_rules! port_error {
    ($name:ident, $what:literal) => {
        #[derive(Debug, thiserror::Error)]
        #[error("{} {}: {message}", $what, kind_str(*kind))]
        pub struct $name {
            pub kind: ErrorKind,
            /// What was being done, for people ("CreateFleet for claim default-x7k2p").
            pub message: String,
            #[source]
            pub source: Option<BoxError>,
        }

        impl $name {
            pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
                Self {
                    kind,
                    message: message.into(),
                    source: None,
                }
            }
            pub fn with_source(
                kind: ErrorKind,
                message: impl Into<String>,
                source: impl Into<BoxError>,
            ) -> Self {
                Self {
                    kind,
                    message: message.into(),
                    source: Some(source.into()),
                }
            }
            pub fn kind(&self) -> ErrorKind {
                self.kind
            }
        }
    };
}

fn kind_str(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Throttled => "throttled",
        ErrorKind::NotFound => "not found",
        ErrorKind::Conflict => "conflict",
        ErrorKind::InsufficientCapacity => "insufficient capacity",
        ErrorKind::Unauthorized => "unauthorized",
        ErrorKind::Invalid => "invalid request",
        ErrorKind::Unavailable => "unavailable",
        ErrorKind::DisruptionBudget => "refused by a disruption budget",
        ErrorKind::Other => "failed",
    }
}

port_error!(CloudError, "cloud");
port_error!(ClusterError, "cluster");
port_error!(StoreError, "store");

// ----- Cloud -------------------------------------------------------------------------

/// A subnet an EC2NodeClass selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subnet {
    pub id: String,
    pub zone: String,
    /// The Availability Zone ID (`use1-az1`): the same physical zone in every account,
    /// while zone names are mapped per account. ARC names shifted zones by ID.
    pub zone_id: String,
    pub available_ips: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    pub id: String,
    /// "amd64" or "arm64" (Kubernetes arch names).
    pub arch: String,
}

/// An EC2NodeClass resolved against the account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedNodeClass {
    pub subnets: Vec<Subnet>,
    pub security_group_ids: Vec<String>,
    pub images: Vec<Image>,
    /// The instance profile nodes launch with: `spec.instanceProfile` as written, or
    /// the profile managed for `spec.role` (created or adopted while resolving, named
    /// as Karpenter names it). What the EC2NodeClass status records as
    /// `instanceProfile`. `None` only where nothing resolved one (hand-built requests).
    pub instance_profile: Option<String>,
    /// The active capacity reservations its `capacityReservationSelectorTerms` select
    /// (filled by the gather from [`Cloud::capacity_reservations`], with the counts
    /// this tick's launches left): where a `reserved` offering launches.
    pub reservations: Vec<Reservation>,
}

impl ResolvedNodeClass {
    /// What the class named `node_class` selects now, as resource drift compares a
    /// node's instance with it.
    pub fn selection<'a>(
        &'a self,
        node_class: &'a str,
    ) -> nodewright_core::disruption::drift::Selection<'a> {
        use nodewright_core::disruption::drift::{SelectedImage, Selection};
        Selection {
            node_class,
            images: self
                .images
                .iter()
                .map(|i| SelectedImage {
                    id: &i.id,
                    arch: &i.arch,
                })
                .collect(),
            subnets: self.subnets.iter().map(|s| s.id.as_str()).collect(),
            security_groups: self.security_group_ids.iter().map(String::as_str).collect(),
            reservations: self.reservations.iter().map(|r| r.id.as_str()).collect(),
        }
    }
}

/// One (instance type, zone, capacity type) a launch may use, with its price.
#[derive(Debug, Clone, PartialEq)]
pub struct Offering {
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: CapacityType,
    pub price: f64,
}

/// Everything needed to launch one NodeClaim as one instance.
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchRequest {
    /// Also the idempotency token (CreateFleet ClientToken): a retry never launches twice.
    pub claim_name: String,
    pub node_pool: String,
    pub node_class: Ec2NodeClass,
    pub resolved: ResolvedNodeClass,
    /// Candidate offerings, cheapest first (at most 60 reach CreateFleet).
    pub offerings: Vec<Offering>,
    /// A NodeOverlay changed the price of some of `offerings`: their order, not EC2's
    /// list prices, decides which on-demand type launches (CreateFleet's `prioritized`
    /// strategy, as Karpenter launches claims with a price overlay applied).
    pub prices_overlaid: bool,
    /// Node labels the kubelet registers with (NodePool template labels, nodepool,
    /// capacity type, nodeclaim).
    pub labels: BTreeMap<String, String>,
    /// Taints the kubelet registers with: NodePool taints, startup taints and the
    /// unregistered taint.
    pub taints: Vec<Taint>,
    /// Kubernetes version of the cluster (for the AMI alias).
    pub kubernetes_version: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Launched {
    pub instance_id: String,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: CapacityType,
    pub price: f64,
    /// The capacity reservation the instance launched into (`reserved` only).
    pub reservation_id: Option<String>,
    /// Offerings the fleet tried first and found out of capacity (CreateFleet
    /// returns these errors alongside the instance); the engine records them in the
    /// ICE cache. Empty when the first choice had capacity.
    pub unavailable: Vec<Offering>,
}

/// Why a launch did not produce an instance.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// These offerings have no capacity now; the others may.
    #[error("insufficient capacity for {} offering(s): {message}", offerings.len())]
    InsufficientCapacity {
        offerings: Vec<Offering>,
        message: String,
    },
    /// Throttled, timeouts, other cloud errors.
    #[error(transparent)]
    Cloud(#[from] CloudError),
}

/// An instance this cluster owns (tagged for it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    pub id: String,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: CapacityType,
    /// pending, running, shutting-down, terminated, stopping, stopped
    pub state: String,
    /// The `karpenter.sh/nodeclaim` tag.
    pub claim_name: Option<String>,
    pub launch_time: i64,
    /// The AMI it runs (`ImageId`); `None` when not known. With the subnet and the
    /// security groups, compared against what its EC2NodeClass selects now (drift).
    pub image_id: Option<String>,
    /// `SubnetId`; `None` when not known.
    pub subnet_id: Option<String>,
    /// `SecurityGroups[].GroupId`; empty when not known.
    pub security_group_ids: Vec<String>,
    /// `CapacityReservationId`: the capacity reservation it runs in, as EC2 says (an
    /// on-demand instance may also run in an open one it was not launched into: only
    /// a `Reserved` instance was launched into its reservation); `None` when in none.
    pub capacity_reservation_id: Option<String>,
}

/// A zonal shift or zonal autoshift ARC holds on the cluster (GetManagedResource).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZonalShift {
    /// The Availability Zone ID traffic is shifted away from (`awayFrom`, `use1-az1`).
    pub zone_id: String,
    /// ARC applies it now (`appliedStatus: APPLIED`; an autoshift may be held back
    /// while a practice run or another shift is in force).
    pub applied: bool,
    /// When it ends (Unix seconds); `None` for an autoshift, which lasts until ARC
    /// ends it.
    pub expires: Option<i64>,
    /// `ZONAL_SHIFT`, `ZONAL_AUTOSHIFT`, `PRACTICE_RUN` or `FIS_EXPERIMENT`: for the log.
    pub kind: String,
}

impl ZonalShift {
    /// Whether it is in force at `now`.
    pub fn active(&self, now: i64) -> bool {
        self.applied && self.expires.is_none_or(|end| end > now)
    }
}

#[async_trait]
pub trait Cloud: Send + Sync {
    /// Instance types with on-demand prices and allowed zones (cached per warm Lambda,
    /// and shared: a copy of 1,363 types' labels per tick was a quiet tick's chore).
    async fn catalog(&self) -> Result<Arc<Catalog>, CloudError>;
    /// Known spot prices per (instance type, zone).
    async fn spot_prices(&self) -> Result<BTreeMap<(String, String), f64>, CloudError>;
    /// Subnets, security groups and images an EC2NodeClass selects.
    async fn resolve_node_class(
        &self,
        node_class: &Ec2NodeClass,
        kubernetes_version: &str,
    ) -> Result<ResolvedNodeClass, CloudError>;
    /// The capacity reservations any of `terms` selects (ORed; every field of a term
    /// must match), active ones only, with the instances each can still take
    /// (DescribeCapacityReservations). Their `node_classes` are left empty.
    async fn capacity_reservations(
        &self,
        terms: &[CapacityReservationSelectorTerm],
    ) -> Result<Vec<Reservation>, CloudError>;
    /// Launches one instance for one claim (CreateFleet instant, ClientToken = claim name).
    /// A `reserved` offering launches into one of `resolved.reservations` of its type
    /// and zone with instances left.
    async fn launch(&self, request: &LaunchRequest) -> Result<Launched, LaunchError>;
    /// Terminates instances. Callers pass only ids the store records as ours.
    async fn terminate(&self, instance_ids: &[String]) -> Result<(), CloudError>;
    /// Reboots an instance in place (RebootInstances): node repair's reboot action.
    /// Callers pass only an id the store records as ours. `NotFound` when EC2 has no
    /// such instance.
    async fn reboot(&self, instance_id: &str) -> Result<(), CloudError>;
    /// Instances tagged as owned by this cluster, in any state but terminated.
    async fn owned_instances(&self) -> Result<Vec<Instance>, CloudError>;
    /// Instances Karpenter launched for this cluster (tagged for it, with Karpenter's
    /// `karpenter.sh/nodepool` tag and without nodewright's own marker), pending,
    /// running, stopping or stopped: what may be adopted after a migration
    /// ([`crate::adopt`]). Listing them touches nothing.
    async fn cluster_instances_launched_by_karpenter(&self) -> Result<Vec<Instance>, CloudError>;
    /// Instances whose EC2 status checks fail (`impaired`), with the failing checks and
    /// since when: node repair's faster signal. Listing them touches nothing.
    async fn impaired_instances(
        &self,
    ) -> Result<Vec<nodewright_core::repair::ImpairedInstance>, CloudError>;
    /// The zonal shifts and autoshifts ARC holds on the cluster, in force or not
    /// ([`ZonalShift::active`] says). Empty, and nothing called, unless the stack opts
    /// in (`ZonalShift`).
    async fn zonal_shifts(&self) -> Result<Vec<ZonalShift>, CloudError>;
}

// ----- Cluster -----------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

/// A Kubernetes Event about a node, a pod, a NodePool or an EC2NodeClass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterEvent {
    /// "Node", "Pod", "NodePool" or "EC2NodeClass" ([`ObjectKind::as_str`]).
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
    pub event_type: EventType,
    /// CamelCase reason: Launched, Registered, SpotInterrupted, Draining...
    pub reason: String,
    pub message: String,
}

impl ClusterEvent {
    /// An event about a NodePool or EC2NodeClass (cluster-scoped: no namespace).
    pub fn about_object(
        kind: ObjectKind,
        name: &str,
        event_type: EventType,
        reason: &str,
        message: impl Into<String>,
    ) -> Self {
        ClusterEvent {
            kind: kind.as_str().into(),
            namespace: None,
            name: name.into(),
            event_type,
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// An event about the pod `namespace/name`; `None` if `pod_key` has no '/'.
    pub fn about_pod(
        pod_key: &str,
        event_type: EventType,
        reason: &str,
        message: impl Into<String>,
    ) -> Option<Self> {
        let (namespace, name) = pod_key.split_once('/')?;
        Some(ClusterEvent {
            kind: "Pod".into(),
            namespace: Some(namespace.into()),
            name: name.into(),
            event_type,
            reason: reason.into(),
            message: message.into(),
        })
    }
}

/// The Karpenter objects nodewright reports on: events and status conditions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ObjectKind {
    /// `karpenter.sh/v1` NodePool.
    NodePool,
    /// `karpenter.k8s.aws/v1` EC2NodeClass.
    Ec2NodeClass,
    /// `karpenter.sh/v1alpha1` NodeOverlay.
    NodeOverlay,
    /// `autoscaling.x-k8s.io/v1beta1` CapacityBuffer (namespaced: named `namespace/name`).
    CapacityBuffer,
}

impl ObjectKind {
    /// The Kubernetes kind: "NodePool", "EC2NodeClass" (also [`ClusterEvent::kind`]).
    pub fn as_str(self) -> &'static str {
        match self {
            ObjectKind::NodePool => NODE_POOL_KIND,
            ObjectKind::Ec2NodeClass => NODE_CLASS_KIND,
            ObjectKind::NodeOverlay => nodewright_core::api::overlay::NODE_OVERLAY_KIND,
            ObjectKind::CapacityBuffer => nodewright_core::api::buffer::CAPACITY_BUFFER_KIND,
        }
    }

    /// "karpenter.sh/v1", "karpenter.k8s.aws/v1".
    pub fn api_version(self) -> &'static str {
        match self {
            ObjectKind::NodePool => NODE_POOL_API_VERSION,
            ObjectKind::Ec2NodeClass => NODE_CLASS_API_VERSION,
            ObjectKind::NodeOverlay => nodewright_core::api::overlay::NODE_OVERLAY_API_VERSION,
            ObjectKind::CapacityBuffer => nodewright_core::api::buffer::CAPACITY_BUFFER_API_VERSION,
        }
    }

    /// The kind named by a [`ClusterEvent::kind`] string, if it is one of these.
    pub fn from_kind(kind: &str) -> Option<Self> {
        match kind {
            NODE_POOL_KIND => Some(ObjectKind::NodePool),
            NODE_CLASS_KIND => Some(ObjectKind::Ec2NodeClass),
            nodewright_core::api::overlay::NODE_OVERLAY_KIND => Some(ObjectKind::NodeOverlay),
            nodewright_core::api::buffer::CAPACITY_BUFFER_KIND => Some(ObjectKind::CapacityBuffer),
            _ => None,
        }
    }
}

impl std::fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `status` of a condition, as Kubernetes spells it ("True", "False", "Unknown").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

impl ConditionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }
}

/// One status condition as the engine decides it. The adapter adds what depends on
/// the stored object: `lastTransitionTime` (kept unless `status` changes) and
/// `observedGeneration` (the object's `metadata.generation`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Condition {
    /// "Ready", "SubnetsReady", "NodeClassReady"...
    pub type_: String,
    pub status: ConditionStatus,
    /// CamelCase, never empty (the Karpenter CRDs require one): "SubnetsNotFound"; for
    /// a True condition, its type, as Karpenter writes it.
    pub reason: String,
    /// For people; may be empty.
    pub message: String,
}

impl Condition {
    /// `type_` is True (reason = type, empty message, as Karpenter's conditions read).
    pub fn met(type_: &str) -> Self {
        Condition {
            type_: type_.into(),
            status: ConditionStatus::True,
            reason: type_.into(),
            message: String::new(),
        }
    }

    /// `type_` is False, with why.
    pub fn failed(type_: &str, reason: &str, message: impl Into<String>) -> Self {
        Condition {
            type_: type_.into(),
            status: ConditionStatus::False,
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// `type_` is Unknown, with why.
    pub fn unknown(type_: &str, reason: &str, message: impl Into<String>) -> Self {
        Condition {
            type_: type_.into(),
            status: ConditionStatus::Unknown,
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// What to write into a NodePool's or EC2NodeClass's `status` (through the `/status`
/// subresource).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StatusUpdate {
    /// Merged by type into `status.conditions`: a condition of the same type is
    /// replaced (its `lastTransitionTime` kept when `status` is unchanged); conditions
    /// of other types (another controller's) are left alone.
    pub conditions: Vec<Condition>,
    /// Other top-level `status` fields, each replaced whole (`null` removes it), e.g.
    /// `{"instanceProfile": "nodewright_..."}` on an EC2NodeClass.
    pub fields: serde_json::Map<String, serde_json::Value>,
}

/// A NodePool or EC2NodeClass in the cluster that failed validation, so it is not in
/// [`ClusterState::node_pools`] / [`ClusterState::node_classes`]; the engine reports it
/// (events, conditions) by kind and name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidObject {
    pub kind: ObjectKind,
    pub name: String,
    pub why: Invalidity,
}

/// Why an object is in [`ClusterState::invalid_objects`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invalidity {
    /// The spec itself is wrong: every problem, "path: message; path: message".
    Spec { message: String },
    /// A NodePool, valid but for its `nodeClassRef`: no EC2NodeClass of that name exists.
    NodeClassNotFound { node_class: String },
    /// A NodePool, valid but for its `nodeClassRef`: the EC2NodeClass exists and is
    /// itself invalid.
    NodeClassInvalid { node_class: String },
}

/// Label and taint changes for one node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodePatch {
    pub set_labels: BTreeMap<String, String>,
    /// Label keys to remove (a reservation's labels once its instance left it).
    pub remove_labels: Vec<String>,
    /// Annotations to set (the drift hashes and their version, at registration).
    pub set_annotations: BTreeMap<String, String>,
    pub add_taints: Vec<Taint>,
    /// Taint keys to remove (all effects).
    pub remove_taints: Vec<String>,
}

/// Everything the engine reads from the cluster in one go.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ClusterState {
    /// Services, and the ReplicaSets, StatefulSets and ReplicationControllers by their
    /// selectors: read only when a scheduler configuration gives pods default topology
    /// spread constraints ([`nodewright_core::default_spread`]).
    pub services: Vec<nodewright_core::cluster::Service>,
    pub controllers: Vec<nodewright_core::cluster::ControllerSelector>,
    pub node_pools: Vec<NodePool>,
    pub node_classes: Vec<Ec2NodeClass>,
    pub nodes: Vec<Node>,
    pub pods: Vec<Pod>,
    pub daemonsets: Vec<DaemonSet>,
    pub pdbs: Vec<PodDisruptionBudget>,
    /// Objects that failed validation: "NodePool \"x\": spec...: message".
    pub invalid: Vec<String>,
    /// The NodePools and EC2NodeClasses behind `invalid`, by kind and name.
    pub invalid_objects: Vec<InvalidObject>,
    /// NodePools and EC2NodeClasses carrying fields nodewright ignores, only partly
    /// honours or does not know (walked once per object version by the adapter).
    pub fields_not_honoured: Vec<nodewright_core::api::fields::ObjectFields>,
    /// Kinds that could not be read at all (forbidden by RBAC, not served), each with
    /// why: the state goes on without them (see [`UnreadableKind`]).
    pub unreadable: Vec<UnreadableKind>,
    /// `karpenter.sh/v1alpha1` NodeOverlays, each valid or with why not (an invalid
    /// one applies nowhere and its status says why); none when the CRD is not
    /// installed.
    pub node_overlays: Vec<nodewright_core::api::ReadOverlay>,
    /// `autoscaling.x-k8s.io/v1beta1` CapacityBuffers (valid ones; an invalid one is in
    /// `invalid`); none when the CRD is not installed.
    pub capacity_buffers: Vec<nodewright_core::api::buffer::CapacityBuffer>,
    /// The PodTemplates and the Deployments, StatefulSets and ReplicaSets the buffers
    /// name (only those: the adapter reads them by name).
    pub pod_templates: Vec<nodewright_core::api::buffer::PodTemplate>,
    pub workloads: Vec<nodewright_core::cluster::ScalableWorkload>,
}

/// A kind the cluster would not list, and what goes on without it: pods with volumes
/// wait when storage objects are unreadable; voluntary disruption stops while
/// PodDisruptionBudgets are; DaemonSet overhead is not counted while DaemonSets are.
/// NodePools, EC2NodeClasses, nodes and pods are never optional: their failure fails
/// the read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnreadableKind {
    /// The resource, as RBAC names it: `persistentvolumeclaims`, `poddisruptionbudgets`.
    pub kind: String,
    pub error_kind: ErrorKind,
    pub message: String,
}

impl UnreadableKind {
    /// The kinds whose absence the jobs can work around.
    pub const OPTIONAL: [&'static str; 6] = [
        "persistentvolumeclaims",
        "persistentvolumes",
        "storageclasses",
        "poddisruptionbudgets",
        "daemonsets",
        "csinodes",
    ];

    /// Whether an error reading an optional kind means "go on without it": forbidden or
    /// not served. Anything else (throttled, unavailable) fails the read as before.
    pub fn degrades(kind: ErrorKind) -> bool {
        matches!(kind, ErrorKind::Unauthorized | ErrorKind::NotFound)
    }

    /// `persistentvolumeclaims (forbidden: ...)` for logs and events.
    pub fn why(&self) -> String {
        let what = match self.error_kind {
            ErrorKind::Unauthorized => "forbidden",
            ErrorKind::NotFound => "not served by the API server",
            _ => "unreadable",
        };
        format!("{what}: {}", self.message)
    }
}

impl ClusterState {
    /// Whether `kind` could not be read.
    pub fn cannot_read(&self, kind: &str) -> bool {
        self.unreadable.iter().any(|u| u.kind == kind)
    }
}

#[async_trait]
pub trait Cluster: Send + Sync {
    /// NodePools, EC2NodeClasses (validated with core::api; invalid ones are reported,
    /// not fatal), nodes, pods, DaemonSets and PDBs.
    async fn state(&self) -> Result<ClusterState, ClusterError>;
    /// Pods only.
    async fn pods(&self) -> Result<Vec<Pod>, ClusterError>;
    /// Pods not bound to a node: the provisioner's poll, every few seconds. The default
    /// filters `pods()`; an adapter that keeps a watched view answers from memory
    /// without copying the cluster's bound pods.
    async fn unbound_pods(&self) -> Result<Vec<Pod>, ClusterError> {
        Ok(self
            .pods()
            .await?
            .into_iter()
            .filter(|p| p.node_name.is_none())
            .collect())
    }
    async fn patch_node(&self, name: &str, patch: &NodePatch) -> Result<(), ClusterError>;
    async fn record_event(&self, event: &ClusterEvent) -> Result<(), ClusterError>;
    /// Writes status conditions and fields of a NodePool or EC2NodeClass through its
    /// `/status` subresource (see [`StatusUpdate`] for the merge). A condition whose
    /// `status` changes (or is new) gets `lastTransitionTime` = `now` (Unix seconds);
    /// every written condition gets `observedGeneration` = the object's generation.
    /// Nothing is written when the object already reads so: `Ok(false)`; `Ok(true)`
    /// when it changed. `NotFound` if the object is gone.
    async fn update_status(
        &self,
        kind: ObjectKind,
        name: &str,
        update: &StatusUpdate,
        now: i64,
    ) -> Result<bool, ClusterError>;
    /// Endpoint, CA and version come from EKS; this is the version string ("1.33").
    async fn kubernetes_version(&self) -> Result<String, ClusterError>;

    /// Pods bound to `node` (a drain's working set). The default filters `pods()`;
    /// adapters list with `fieldSelector=spec.nodeName=<node>`.
    async fn pods_on_node(&self, node: &str) -> Result<Vec<Pod>, ClusterError> {
        Ok(self
            .pods()
            .await?
            .into_iter()
            .filter(|p| p.node_name.as_deref() == Some(node))
            .collect())
    }
    /// Evicts a pod through the `pods/eviction` subresource (policy/v1 Eviction), which
    /// honours PodDisruptionBudgets. A budget's refusal is
    /// [`ErrorKind::DisruptionBudget`] (never `Throttled`), returned on the first answer:
    /// no retry layer may hide it. `NotFound` means the pod is already gone; callers
    /// draining a node treat it as success (this port reports it so a caller can tell).
    async fn evict_pod(&self, namespace: &str, name: &str) -> Result<(), ClusterError>;
    /// Deletes a pod with `grace_period_seconds` (bypassing budgets: for deadlines and
    /// dead instances). `NotFound`: already gone (success for a drain).
    async fn delete_pod(
        &self,
        namespace: &str,
        name: &str,
        grace_period_seconds: i64,
    ) -> Result<(), ClusterError>;
    /// Deletes a Node object. `NotFound`: already gone (success for a termination).
    async fn delete_node(&self, name: &str) -> Result<(), ClusterError>;

    /// Mirrors the claims (the store stays the source of truth) as objects people and
    /// tools list in the cluster — `karpenter.sh/v1` NodeClaims for the Kubernetes
    /// adapter: one per claim that is not terminal, created when missing (or deleted by
    /// someone), rewritten when the claim changed, deleted once its claim is terminal or
    /// no longer given. Writes nothing when every mirror already reads as wanted (a quiet
    /// tick). Informational only: nothing reads a mirror back to decide. An adapter may
    /// write only so many objects a pass and leave the rest to the next
    /// ([`MirrorReport::deferred`]). The default mirrors nothing.
    async fn mirror_claims(&self, _claims: &[NodeClaim]) -> Result<MirrorReport, ClusterError> {
        Ok(MirrorReport::default())
    }
}

/// What one [`Cluster::mirror_claims`] wrote (claim names).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MirrorReport {
    pub created: Vec<String>,
    pub updated: Vec<String>,
    pub deleted: Vec<String>,
    /// Claims whose mirror was not written: an object of that name exists that
    /// nodewright does not manage (a NodeClaim Karpenter made): it is left alone.
    pub foreign: Vec<String>,
    /// Why nothing was mirrored (the NodeClaim CRD is not installed), when so.
    pub skipped: Option<String>,
    /// Mirrors left for the next pass (to write or delete): this one wrote as many
    /// objects as a pass may (a backlog, such as 1,000 claims adopted at once, is
    /// written over several ticks rather than past the invocation's deadline).
    pub deferred: usize,
}

impl MirrorReport {
    /// Objects created, updated or deleted.
    pub fn writes(&self) -> usize {
        self.created.len() + self.updated.len() + self.deleted.len()
    }
}

// ----- Store -------------------------------------------------------------------------

/// A held lease. `token` increases with every acquisition (a fencing token): writes
/// made under a stale token can be refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub name: String,
    pub holder: String,
    pub token: u64,
    pub expires_at: i64,
}

/// One decision, for `nodewright explain` and audits.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub at: i64,
    /// "provision", "lifecycle", "interrupt", ...
    pub job: String,
    /// What was decided ("launch general-purpose-x7k2p as m6a.2xlarge in us-east-1b").
    pub action: String,
    /// Why ("12 pending pods: default/web-1, ...").
    pub reason: String,
    pub price_per_hour: Option<f64>,
}

// The store, one trait per concern: one DynamoDB table holds them all (`Store`), but a
// job's code names the concern it uses, and a wrapper (the claim cache) wraps only its
// own.

/// The NodeClaims: every write conditional on the claim's state and version.
#[async_trait]
pub trait ClaimStore: Send + Sync {
    /// Creates a claim; `Conflict` if the name exists.
    async fn create_claim(&self, claim: &NodeClaim) -> Result<(), StoreError>;
    /// Replaces a claim if it is still in `expected_state` at `expected_version`
    /// (`Conflict` otherwise). `claim.version` must be `expected_version + 1`.
    async fn update_claim(
        &self,
        claim: &NodeClaim,
        expected_state: ClaimState,
        expected_version: u64,
    ) -> Result<(), StoreError>;
    async fn get_claim(&self, name: &str) -> Result<Option<NodeClaim>, StoreError>;
    /// Every claim not yet expired from the store (terminal ones included).
    async fn list_claims(&self) -> Result<Vec<NodeClaim>, StoreError>;
    /// Whether any claim `list_claims` would give satisfies `wanted`: what the
    /// provisioner's poll asks every few seconds. A store that keeps the claims in
    /// memory answers without copying them ([`crate::claim_cache`]).
    async fn any_claim(
        &self,
        wanted: &(dyn for<'c> Fn(&'c NodeClaim) -> bool + Send + Sync),
    ) -> Result<bool, StoreError> {
        Ok(self.list_claims().await?.iter().any(wanted))
    }
    /// A counter that every successful `create_claim`/`update_claim` moves on by one
    /// (read consistently), so a reader can tell whether the claims changed since it
    /// last listed them without listing them ([`crate::claim_cache`]). `None`: this
    /// store keeps none, and a reader must list.
    async fn claims_generation(&self) -> Result<Option<u64>, StoreError> {
        Ok(None)
    }
    /// The claim recorded for an instance id (GSI), if any.
    async fn claim_by_instance(&self, instance_id: &str) -> Result<Option<NodeClaim>, StoreError>;
}

/// The jobs' leases (one holder each; short, renewed at checkpoints).
#[async_trait]
pub trait LeaseStore: Send + Sync {
    /// Takes the lease if free or expired at `now`; `None` if someone else holds it.
    async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        now: i64,
        ttl: Duration,
    ) -> Result<Option<Lease>, StoreError>;
    /// Extends a held lease; `Conflict` if it was lost.
    async fn renew_lease(
        &self,
        lease: &Lease,
        now: i64,
        ttl: Duration,
    ) -> Result<Lease, StoreError>;
    async fn release_lease(&self, lease: &Lease) -> Result<(), StoreError>;
    /// The lease record as stored (held or expired), to say who holds it. Stores that
    /// cannot tell answer `None`.
    async fn lease(&self, _name: &str) -> Result<Option<Lease>, StoreError> {
        Ok(None)
    }
}

/// The offerings EC2 had no capacity for, avoided until a time (the ICE cache).
#[async_trait]
pub trait OfferingBackoff: Send + Sync {
    /// Records an offering as unavailable until `until` (the ICE cache).
    async fn mark_unavailable(&self, offering: &Offering, until: i64) -> Result<(), StoreError>;
    /// Offerings still unavailable at `now`: (instance type, zone, capacity type).
    async fn unavailable_offerings(
        &self,
        now: i64,
    ) -> Result<Vec<(String, String, CapacityType)>, StoreError>;
}

/// Keys recorded once, for a while (event de-duplication).
#[async_trait]
pub trait IdempotencyKeys: Send + Sync {
    /// Records a key once; `true` if this call recorded it, `false` if it existed and
    /// has not expired at `now` (event de-duplication).
    async fn claim_idempotency_key(
        &self,
        key: &str,
        now: i64,
        ttl: Duration,
    ) -> Result<bool, StoreError>;
    /// Whether `key` is recorded and not expired at `now` (a consistent read; records
    /// nothing). Lets a job check for a duplicate first and record the key only once its
    /// work succeeded, so a failed attempt never blocks the retry.
    async fn idempotency_key_exists(&self, key: &str, now: i64) -> Result<bool, StoreError>;
}

/// The decision log: what each job decided and why.
#[async_trait]
pub trait DecisionLog: Send + Sync {
    /// Appends `decision`.
    async fn record_decision(&self, decision: &Decision) -> Result<(), StoreError>;
    /// The decisions recorded at or after `since`, oldest first.
    async fn decisions(&self, since: i64) -> Result<Vec<Decision>, StoreError>;
}

/// Every concern of the one table: what an adapter (`DynamoStore`) or a fake
/// (`MemoryStore`) implements whole, and [`crate::Ports::new`] hands out by concern.
pub trait Store: ClaimStore + LeaseStore + OfferingBackoff + IdempotencyKeys + DecisionLog {}

impl<T: ClaimStore + LeaseStore + OfferingBackoff + IdempotencyKeys + DecisionLog + ?Sized> Store
    for T
{
}

// ----- Clock -------------------------------------------------------------------------

#[async_trait]
pub trait Clock: Send + Sync {
    /// Unix seconds.
    fn now(&self) -> i64;
    async fn sleep(&self, duration: Duration);
}
