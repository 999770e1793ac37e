//! The cluster as the planner sees it: pods, nodes, DaemonSets and PDBs reduced to the
//! fields scheduling depends on. `snapshot` builds these from `kubectl ... -o json`
//! output; the engine will build them from the Kubernetes API.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use crate::api::model::{NodeRequirement, Taint, TaintEffect};
use crate::resources::Resources;
use crate::share::Shared;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TolerationOperator {
    Equal,
    Exists,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Toleration {
    /// Empty key with `Exists` tolerates everything.
    pub key: String,
    pub operator: TolerationOperator,
    pub value: String,
    /// `None` matches every effect.
    pub effect: Option<TaintEffect>,
}

impl Toleration {
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if let Some(effect) = self.effect
            && effect != taint.effect
        {
            return false;
        }
        if self.key.is_empty() {
            return self.operator == TolerationOperator::Exists;
        }
        if self.key != taint.key {
            return false;
        }
        match self.operator {
            TolerationOperator::Exists => true,
            TolerationOperator::Equal => self.value == taint.value.as_deref().unwrap_or(""),
        }
    }
}

/// `metav1.LabelSelector`. An empty selector matches everything (as in topology spread);
/// a missing selector is represented by `None` at the use site and matches nothing.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct LabelSelector {
    pub match_labels: BTreeMap<String, String>,
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LabelSelectorOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LabelSelectorRequirement {
    pub key: String,
    pub operator: LabelSelectorOperator,
    pub values: Vec<String>,
}

impl LabelSelector {
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|e| {
                let got = labels.get(&e.key);
                match e.operator {
                    LabelSelectorOperator::In => got.is_some_and(|v| e.values.contains(v)),
                    LabelSelectorOperator::NotIn => !got.is_some_and(|v| e.values.contains(v)),
                    LabelSelectorOperator::Exists => got.is_some(),
                    LabelSelectorOperator::DoesNotExist => got.is_none(),
                }
            })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WhenUnsatisfiable {
    DoNotSchedule,
    ScheduleAnyway,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TopologySpreadConstraint {
    pub max_skew: u32,
    pub topology_key: String,
    pub when_unsatisfiable: WhenUnsatisfiable,
    /// `None` when the constraint has no selector: it then counts no pods.
    pub label_selector: Option<LabelSelector>,
    pub min_domains: Option<u32>,
    /// `nodeAffinityPolicy: Honor` (the default): only nodes matching the pod's
    /// nodeSelector and required node affinity are domains and count pods.
    pub honor_node_affinity: bool,
    /// `nodeTaintsPolicy: Honor` (default Ignore): nodes with taints the pod does not
    /// tolerate are not domains and do not count.
    pub honor_node_taints: bool,
}

/// A required pod (anti-)affinity term.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PodAffinityTerm {
    pub label_selector: Option<LabelSelector>,
    pub topology_key: String,
    /// Empty means the pod's own namespace (namespaceSelector is not supported and is
    /// treated as the pod's namespace; documented).
    pub namespaces: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WeightedPodAffinityTerm {
    pub weight: i32,
    pub term: PodAffinityTerm,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PreferredNodeTerm {
    pub weight: i32,
    pub requirements: Vec<NodeRequirement>,
}

/// A Service, as the default topology spread reads it ([`crate::default_spread`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    pub namespace: String,
    pub name: String,
    /// `spec.selector`; `None` when unset (a Service without a selector selects no pod).
    pub selector: Option<BTreeMap<String, String>>,
}

/// A pod's controller (`metadata.ownerReferences[]` with `controller: true`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ControllerRef {
    /// `apps/v1`, `v1`, ...
    pub api_version: String,
    pub kind: String,
    pub name: String,
}

/// Everything about a pod that decides where it may run: the fields of a [`Pod`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodFields {
    pub namespace: String,
    pub name: String,
    pub labels: Shared<BTreeMap<String, String>>,
    /// Effective requests: max(sum of containers, largest init container) + overhead,
    /// plus one pod slot. Always has `pods` = 1.
    pub requests: Resources,
    pub node_selector: Shared<BTreeMap<String, String>>,
    /// Required node affinity: the pod fits a node matching ANY of these terms.
    /// Empty means no required node affinity.
    pub required_node_terms: Shared<Vec<Vec<NodeRequirement>>>,
    pub preferred_node_terms: Shared<Vec<PreferredNodeTerm>>,
    pub tolerations: Shared<Vec<Toleration>>,
    pub topology_spread: Shared<Vec<TopologySpreadConstraint>>,
    pub pod_affinity: Shared<Vec<PodAffinityTerm>>,
    pub pod_anti_affinity: Shared<Vec<PodAffinityTerm>>,
    pub preferred_pod_affinity: Shared<Vec<WeightedPodAffinityTerm>>,
    pub preferred_pod_anti_affinity: Shared<Vec<WeightedPodAffinityTerm>>,
    /// `spec.nodeName`, set once bound.
    pub node_name: Option<String>,
    /// `Succeeded` or `Failed`: holds no resources.
    pub terminal: bool,
    /// Owned by a DaemonSet (its requests are counted as DaemonSet overhead instead).
    pub daemonset_owned: bool,
    /// priorityClassName system-cluster-critical / system-node-critical.
    pub critical: bool,
    /// `spec.terminationGracePeriodSeconds` (`None`: Kubernetes' default, 30 s).
    pub termination_grace_period_seconds: Option<i64>,
    /// `metadata.deletionTimestamp` is set: the pod is already going away.
    pub terminating: bool,
    /// `metadata.deletionTimestamp` (Unix seconds): when the grace period its deletion
    /// gave it ends.
    pub deletion_at: Option<i64>,
    /// Host ports its containers bind (kube-scheduler's NodePorts filter): two pods
    /// binding the same port never share a node.
    pub host_ports: Shared<Vec<HostPort>>,
    /// The owning DaemonSet's name, when `daemonset_owned`.
    pub owner_daemonset: Option<String>,
    /// Its controller (the owner reference with `controller: true`): where the default
    /// topology spread's selector comes from ([`crate::default_spread`]).
    /// Shared: every replica of a workload names the same one.
    pub controller: Option<std::sync::Arc<ControllerRef>>,
    /// `spec.schedulerName` when it is not `default-scheduler` (e.g. `fargate-scheduler`).
    pub scheduler_name: Option<String>,
    /// `status.nominatedNodeName`: preemption chose a node for it.
    pub nominated_node_name: Option<String>,
    /// `PodScheduled=False` with reason `Unschedulable`: kube-scheduler tried every node
    /// and found none.
    pub marked_unschedulable: bool,
    /// A static pod's mirror (`kubernetes.io/config.mirror`): it stays with its node.
    pub mirror: bool,
    /// `karpenter.sh/do-not-disrupt: "true"`: voluntary disruption must leave its node.
    pub do_not_disrupt: bool,
    /// `karpenter.sh/do-not-disrupt` holding a positive Go duration (`"30m"`,
    /// `"1h30m"`, Karpenter v1.12), in whole seconds rounded up: the pod is protected
    /// for that long from its start ([`PodFields::do_not_disrupt_at`]).
    pub do_not_disrupt_for: Option<i64>,
    /// `karpenter.sh/do-not-disrupt` holding anything else: ignored, as Karpenter does,
    /// with a warning event on the pod; the value and why it is not one.
    pub do_not_disrupt_invalid: Option<(String, String)>,
    /// `spec.priority`: the priority the admission controller resolved from
    /// `priorityClassName` (the class name alone says nothing about the value).
    pub priority: Option<i32>,
    /// `controller.kubernetes.io/pod-deletion-cost` (an int32, as the API server
    /// validates it; a value that is none is ignored).
    pub deletion_cost: Option<i32>,
    /// `metadata.creationTimestamp` and `status.startTime` (Unix seconds), when known.
    pub created_at: Option<i64>,
    pub started_at: Option<i64>,
    /// The PersistentVolumeClaims its volumes use (`persistentVolumeClaim` and generic
    /// `ephemeral` volumes), for [`crate::volumes::apply_volume_topology`].
    pub claims: Shared<Vec<PodClaim>>,
    /// Set by [`crate::volumes::apply_volume_topology`] when a claim keeps the pod from
    /// being planned for (a missing claim, an Immediate claim not yet bound, ...).
    pub volume_problem: Option<VolumeProblem>,
    /// The pod's own required node terms, kept by
    /// [`crate::volumes::apply_volume_topology`] when it added the volumes' topology to
    /// `required_node_terms` (`None`: the volumes added nothing). A topology spread that
    /// honours node affinity counts nodes by these, as kube-scheduler and Karpenter do:
    /// a volume limits where its pod may go, not the domains the pod's spread counts.
    pub own_node_terms: Option<Vec<Vec<NodeRequirement>>>,
    /// A CapacityBuffer's virtual pod (`namespace/name` of the buffer): room kept for
    /// pods not created yet, never in the cluster, never counted by a
    /// PodDisruptionBudget.
    pub capacity_buffer: Option<String>,
}

/// Why a pending pod gets no new capacity: it is not nodewright's to provision for.
/// Karpenter's `pod.IsProvisionable` and its PersistentVolumeClaim validation, with the
/// scheduler name made explicit (Karpenter relies on other schedulers never marking a
/// pod Unschedulable the way kube-scheduler does).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotProvisionable {
    /// `spec.schedulerName` names another scheduler (e.g. `fargate-scheduler`): that
    /// scheduler provides its capacity, and kube-scheduler would not bind it to ours.
    OtherScheduler { scheduler: String },
    /// Preemption nominated it to a node: kube-scheduler binds it there once the pods
    /// it preempts are gone, so new capacity would sit empty.
    Nominated { node: String },
    /// A claim it uses cannot be planned for yet (see [`VolumeProblem`]).
    Volume(VolumeProblem),
    /// kube-scheduler has not marked it Unschedulable: it has not tried every node yet,
    /// and may still bind it to one that has room.
    NotMarkedUnschedulable,
}

impl fmt::Display for NotProvisionable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotProvisionable::OtherScheduler { scheduler } => write!(
                f,
                "it is for scheduler {scheduler:?}, not kube-scheduler; that scheduler provides its capacity"
            ),
            NotProvisionable::Nominated { node } => write!(
                f,
                "preemption nominated it to node {node:?}; kube-scheduler binds it there once the pods it preempts are gone"
            ),
            NotProvisionable::Volume(problem) => write!(f, "{problem}"),
            NotProvisionable::NotMarkedUnschedulable => write!(
                f,
                "kube-scheduler has not marked it Unschedulable yet; it may still fit a node that exists"
            ),
        }
    }
}

/// One `hostPort` binding. An empty or `0.0.0.0` host IP binds every address.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct HostPort {
    pub port: u16,
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
    pub host_ip: String,
}

impl HostPort {
    fn binds_every_address(&self) -> bool {
        self.host_ip.is_empty() || self.host_ip == "0.0.0.0" || self.host_ip == "::"
    }

    /// Whether two bindings cannot both hold on one node: same port and protocol, and
    /// the same address or either binding every address (kube-scheduler's rule).
    pub fn conflicts_with(&self, other: &HostPort) -> bool {
        self.port == other.port
            && self.protocol == other.protocol
            && (self.host_ip == other.host_ip
                || self.binds_every_address()
                || other.binds_every_address())
    }
}

/// A pod as the decisions read it: its [`PodFields`] behind a reference count.
///
/// A tick copies the whole cluster's pods more than once (the watched view's read, the
/// planning snapshot, the disruption's simulated cluster), and at 25 pods a node those
/// copies were most of an invocation's memory. Copying a `Pod` copies a pointer. Code
/// reads a pod's fields as before (`Deref`), and a write (`DerefMut`) first copies the
/// fields when another holder shares them, so no copy ever sees another's change.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Pod(Arc<PodFields>);

impl Pod {
    /// The fields, copied only when another holder shares them.
    pub fn into_fields(self) -> PodFields {
        Arc::unwrap_or_clone(self.0)
    }

    /// Whether both are the very same allocation (not merely equal).
    pub fn same_as(&self, other: &Pod) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl From<PodFields> for Pod {
    fn from(fields: PodFields) -> Self {
        Pod(Arc::new(fields))
    }
}

impl Deref for Pod {
    type Target = PodFields;
    fn deref(&self) -> &PodFields {
        &self.0
    }
}

impl DerefMut for Pod {
    fn deref_mut(&mut self) -> &mut PodFields {
        Arc::make_mut(&mut self.0)
    }
}

impl fmt::Debug for Pod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl PodFields {
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The grace period a delete without an explicit one would give (Kubernetes' default
    /// is 30 s).
    pub fn grace_period_seconds(&self) -> i64 {
        self.termination_grace_period_seconds
            .unwrap_or(DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS)
            .max(0)
    }

    /// Counts towards a PodDisruptionBudget's healthy pods: bound, not finished, not
    /// being deleted. (The disruption controller counts Ready pods; bound is the
    /// nearest thing this model has.)
    pub fn is_healthy_for_budget(&self) -> bool {
        self.node_name.is_some() && !self.terminal && !self.terminating
    }

    /// Whether `karpenter.sh/do-not-disrupt` protects the pod at `now`: `"true"`
    /// always; a duration from the pod's start (`status.startTime`) until it has
    /// passed, and always while the pod has not started (Karpenter fails safe there);
    /// anything else never. A finished or terminating pod is never protected
    /// (Karpenter's `IsDisruptable`: only active pods block).
    pub fn do_not_disrupt_at(&self, now: i64) -> bool {
        if self.terminal || self.terminating {
            return false;
        }
        self.do_not_disrupt || self.do_not_disrupt_until().is_some_and(|until| now < until)
    }

    /// When a duration-valued `karpenter.sh/do-not-disrupt` stops protecting the pod
    /// (`i64::MAX` while it has not started); `None` without a duration.
    pub fn do_not_disrupt_until(&self) -> Option<i64> {
        let duration = self.do_not_disrupt_for?;
        Some(match self.started_at {
            Some(start) => start.saturating_add(duration),
            None => i64::MAX,
        })
    }

    /// Karpenter's `EvictionCost`: 1, plus the pod-deletion-cost over 2^27, plus the
    /// priority over 2^25, clamped to [-10, 10]. A pod nothing is said about costs 1;
    /// `pod-deletion-cost: 2147483647` makes it ~17 (clamped to 10), the lowest ~-15.
    pub fn eviction_cost(&self) -> f64 {
        let mut cost = 1.0;
        if let Some(deletion) = self.deletion_cost {
            cost += f64::from(deletion) / 2f64.powi(27);
        }
        if let Some(priority) = self.priority {
            cost += f64::from(priority) / 2f64.powi(25);
        }
        cost.clamp(-10.0, 10.0)
    }

    /// Still terminating a minute past the end of its grace period: nothing confirms its
    /// deletion (its kubelet stopped, or its node is gone). A drain no longer waits for
    /// it, as Karpenter's `IsStuckTerminating`.
    pub fn stuck_terminating_at(&self, now: i64) -> bool {
        self.terminating && self.deletion_at.is_some_and(|at| now > at + 60)
    }

    /// Pending for provisioning: not bound and not finished.
    pub fn is_pending(&self) -> bool {
        self.node_name.is_none() && !self.terminal && !self.daemonset_owned
    }

    /// Why this pod, if pending, is not one to launch capacity for; `None` when it is.
    /// Checked in order of what a user can act on: the scheduler, a nomination, its
    /// volumes, and last kube-scheduler's verdict (a pod with a missing claim is often
    /// also not marked yet, and the claim is the news).
    pub fn not_provisionable(&self) -> Option<NotProvisionable> {
        if let Some(scheduler) = &self.scheduler_name {
            return Some(NotProvisionable::OtherScheduler {
                scheduler: scheduler.clone(),
            });
        }
        if let Some(node) = &self.nominated_node_name {
            return Some(NotProvisionable::Nominated { node: node.clone() });
        }
        if let Some(problem) = &self.volume_problem {
            return Some(NotProvisionable::Volume(problem.clone()));
        }
        if !self.marked_unschedulable {
            return Some(NotProvisionable::NotMarkedUnschedulable);
        }
        None
    }

    /// Whether capacity may be launched for this pod when it is pending.
    pub fn is_provisionable(&self) -> bool {
        self.not_provisionable().is_none()
    }

    /// Pending and ours to provision for: what a provisioning run plans and waits on.
    pub fn wants_capacity(&self) -> bool {
        self.is_pending() && self.is_provisionable()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Node {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub allocatable: Resources,
    pub capacity: Resources,
    pub provider_id: Option<String>,
    pub unschedulable: bool,
    /// The Ready condition is True.
    pub ready: bool,
    /// `metadata.creationTimestamp` (Unix seconds), when known.
    pub created_at: Option<i64>,
    /// When the Ready condition last turned True, while it is True.
    pub ready_since: Option<i64>,
    /// The conditions node repair watches (`Ready` and the node monitoring agent's,
    /// [`crate::repair::WATCHED_CONDITIONS`]), as the kubelet and the agent report them.
    pub conditions: Vec<NodeCondition>,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// `karpenter.sh/do-not-disrupt: "true"` on the node.
    pub do_not_disrupt: bool,
    /// `karpenter.sh/do-not-repair: "true"` on the node: node repair leaves it alone.
    pub do_not_repair: bool,
    /// `status.nodeInfo.bootID`: changes when the machine reboots (how a reboot for
    /// repair is seen to have happened).
    pub boot_id: Option<String>,
    /// The NodePool and EC2NodeClass hashes nodewright launched the node with
    /// (`karpenter.sh/nodepool-hash`, `karpenter.k8s.aws/ec2nodeclass-hash`), for drift;
    /// only when their `*-hash-version` annotation is nodewright's (`hash::HASH_VERSION`).
    pub nodepool_hash: Option<String>,
    pub nodeclass_hash: Option<String>,
}

/// A node condition as reported (`status.conditions[]`), for node repair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeCondition {
    /// `Ready`, `KernelReady`, `AcceleratedHardwareReady`, ...
    pub kind: String,
    pub status: ConditionStatus,
    /// `lastTransitionTime`, Unix seconds, when reported.
    pub since: Option<i64>,
    /// `reason` (the node monitoring agent puts a GPU fault's XID there), when reported.
    pub reason: Option<String>,
}

/// A condition's `status`: `True`, `False` or `Unknown` (anything else reads as Unknown,
/// as the API server defines no other value).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

impl ConditionStatus {
    pub fn parse(s: &str) -> Self {
        match s {
            "True" => ConditionStatus::True,
            "False" => ConditionStatus::False,
            _ => ConditionStatus::Unknown,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }
}

impl Node {
    /// The condition `kind`, when the node reports it.
    pub fn condition(&self, kind: &str) -> Option<&NodeCondition> {
        self.conditions.iter().find(|c| c.kind == kind)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DaemonSet {
    pub namespace: String,
    pub name: String,
    /// The pod template as a pod (name = the DaemonSet's), requests computed as for pods.
    pub template: Pod,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IntOrPercent {
    Int(i32),
    Percent(u32),
}

/// `spec.terminationGracePeriodSeconds` when a pod does not say.
pub const DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS: i64 = 30;

impl IntOrPercent {
    /// The value scaled against `total`, rounding a percentage up (as Kubernetes'
    /// `GetScaledValueFromIntOrPercent(.., roundUp=true)` does for both minAvailable
    /// and maxUnavailable in the disruption controller).
    pub fn scaled_up(&self, total: i64) -> i64 {
        match self {
            IntOrPercent::Int(n) => i64::from(*n),
            IntOrPercent::Percent(p) => (i64::from(*p) * total + 99) / 100,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodDisruptionBudget {
    pub namespace: String,
    pub name: String,
    pub selector: Option<LabelSelector>,
    pub min_available: Option<IntOrPercent>,
    pub max_unavailable: Option<IntOrPercent>,
    /// `status.disruptionsAllowed` as the disruption controller last wrote it.
    pub status_disruptions_allowed: Option<i64>,
}

impl PodDisruptionBudget {
    /// Whether the budget covers `pod`: same namespace and the selector matches. A PDB
    /// without a selector (or with an empty one, in policy/v1) — Kubernetes: a nil
    /// selector selects nothing, an empty one everything.
    pub fn selects(&self, pod: &Pod) -> bool {
        pod.capacity_buffer.is_none()
            && pod.namespace == self.namespace
            && self
                .selector
                .as_ref()
                .is_some_and(|s| s.matches(&pod.labels))
    }

    /// `status.disruptionsAllowed` computed as the disruption controller does, over
    /// `pods` (any pods; the budget picks its own): expected = the non-finished pods it
    /// selects (the controller uses the owners' scale; equal in steady state), healthy =
    /// those bound and not being deleted; desired healthy = minAvailable (a percentage
    /// of expected, rounded up) or expected − maxUnavailable (a percentage rounded up);
    /// allowed = max(0, healthy − desired). With neither field set (the API accepts it)
    /// every selected pod must stay: none may go.
    pub fn disruptions_allowed<'a>(&self, pods: impl IntoIterator<Item = &'a Pod>) -> i64 {
        let mut expected = 0i64;
        let mut healthy = 0i64;
        for p in pods.into_iter().filter(|p| self.selects(p) && !p.terminal) {
            expected += 1;
            if p.is_healthy_for_budget() {
                healthy += 1;
            }
        }
        let desired = match (&self.min_available, &self.max_unavailable) {
            (Some(min), _) => min.scaled_up(expected),
            (None, Some(max)) => expected - max.scaled_up(expected),
            (None, None) => expected,
        };
        (healthy - desired.max(0)).max(0)
    }
}

/// Whether evicting `pod` is allowed by every budget in `pdbs` that selects it, given
/// the cluster's `pods`. Pods that are not running (unbound, finished or already being
/// deleted) may always be evicted, as the eviction subresource does for pending and
/// finished pods. Kubernetes refuses (500) a pod selected by more than one budget; we
/// require all of them to allow it instead (documented deviation).
pub fn eviction_allowed(pod: &Pod, pods: &[Pod], pdbs: &[PodDisruptionBudget]) -> bool {
    if !pod.is_healthy_for_budget() {
        return true;
    }
    pdbs.iter()
        .filter(|b| b.selects(pod))
        .all(|b| b.disruptions_allowed(pods) > 0)
}

/// A Deployment, StatefulSet or ReplicaSet a `scalableRef` may name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScalableWorkload {
    /// `Deployment`, `StatefulSet` or `ReplicaSet` (all `apps/v1`).
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// `spec.replicas` (`None`: the API server's default, 1).
    pub replicas: Option<i32>,
    /// Its pod template as a buffer chunk, or why it cannot be one.
    pub template: Result<Pod, String>,
}

/// A ReplicaSet, StatefulSet or ReplicationController by its selector: what the
/// default topology spread deduces for the pods it controls ([`crate::default_spread`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerSelector {
    /// `ReplicaSet`, `StatefulSet` or `ReplicationController`.
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// `spec.selector` (a ReplicationController's labels as `match_labels`); `None`
    /// when unset or not one the API server would have accepted.
    pub selector: Option<LabelSelector>,
}

/// A HorizontalPodAutoscaler (`autoscaling/v2`) as a simulation reads it: the workload
/// it scales and the bounds it scales it between (its metrics are not read: a
/// simulation has no load to measure).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Autoscaler {
    pub namespace: String,
    pub name: String,
    /// `spec.scaleTargetRef.kind`: `Deployment`, `StatefulSet`, `ReplicaSet`, ...
    pub target_kind: String,
    /// `spec.scaleTargetRef.name`, in the autoscaler's namespace.
    pub target_name: String,
    /// `spec.minReplicas` (the API server's default, 1, when unset).
    pub min_replicas: u32,
    /// `spec.maxReplicas`, at least `min_replicas`.
    pub max_replicas: u32,
}

/// The parsed `kubectl get pods,nodes,daemonsets,poddisruptionbudgets -A -o json`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterSnapshot {
    pub pods: Vec<Pod>,
    pub nodes: Vec<Node>,
    pub daemonsets: Vec<DaemonSet>,
    pub pdbs: Vec<PodDisruptionBudget>,
    /// Deployments, StatefulSets and ReplicaSets, for the CapacityBuffers that name
    /// one (`scalableRef`).
    pub workloads: Vec<ScalableWorkload>,
    /// Services, and the ReplicaSets, StatefulSets and ReplicationControllers by their
    /// selectors: what the default topology spread deduces its selectors from.
    pub services: Vec<Service>,
    pub controllers: Vec<ControllerSelector>,
    /// HorizontalPodAutoscalers: what `simulate --cluster` scales the workloads by.
    pub autoscalers: Vec<Autoscaler>,
}

impl ClusterSnapshot {
    pub fn pending_pods(&self) -> impl Iterator<Item = &Pod> {
        self.pods.iter().filter(|p| p.is_pending())
    }

    /// The pending pods capacity may be launched for ([`PodFields::wants_capacity`]).
    pub fn provisionable_pods(&self) -> impl Iterator<Item = &Pod> {
        self.pods.iter().filter(|p| p.wants_capacity())
    }
}

/// One volume of a pod and the claim it uses (generic ephemeral volumes use the claim
/// named `<pod>-<volume>`, which the ephemeral volume controller creates).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PodClaim {
    /// The volume's name in the pod spec.
    pub volume: String,
    /// The claim's name, in the pod's namespace.
    pub claim: String,
}

/// Why a pod's claim keeps it from being planned for. Claims are named `ns/name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VolumeProblem {
    ClaimMissing {
        volume: String,
        claim: String,
    },
    ClaimDeleting {
        claim: String,
    },
    ClaimLost {
        claim: String,
        volume: String,
    },
    /// `volumeName` set, the PV controller not done binding.
    BindNotCompleted {
        claim: String,
        volume: String,
    },
    VolumeMissing {
        claim: String,
        volume: String,
    },
    VolumeDeleting {
        claim: String,
        volume: String,
    },
    /// Unbound and no StorageClass: nothing will provision a volume for it.
    NoStorageClass {
        claim: String,
    },
    StorageClassMissing {
        claim: String,
        class: String,
    },
    /// Unbound, and its class binds `Immediate`ly.
    ImmediateUnbound {
        claim: String,
        class: String,
    },
    /// The storage objects cannot be read at all (`kind`, e.g. `persistentvolumeclaims`:
    /// forbidden by RBAC, or not served): the pod's volume zone is unknown, so it waits
    /// rather than being placed where its volume may not be.
    StorageUnreadable {
        kind: String,
        why: String,
    },
}

impl fmt::Display for VolumeProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VolumeProblem::ClaimMissing { volume, claim } => write!(
                f,
                "its volume {volume:?} uses PersistentVolumeClaim {claim:?}, which does not exist"
            ),
            VolumeProblem::ClaimDeleting { claim } => {
                write!(f, "its PersistentVolumeClaim {claim:?} is being deleted")
            }
            VolumeProblem::ClaimLost { claim, volume } => write!(
                f,
                "its PersistentVolumeClaim {claim:?} is Lost: PersistentVolume {volume:?} is gone"
            ),
            VolumeProblem::BindNotCompleted { claim, volume } => write!(
                f,
                "its PersistentVolumeClaim {claim:?} names PersistentVolume {volume:?} but is not bound yet (no pv.kubernetes.io/bind-completed annotation)"
            ),
            VolumeProblem::VolumeMissing { claim, volume } => write!(
                f,
                "its PersistentVolumeClaim {claim:?} is bound to PersistentVolume {volume:?}, which does not exist"
            ),
            VolumeProblem::VolumeDeleting { claim, volume } => write!(
                f,
                "its PersistentVolumeClaim {claim:?} is bound to PersistentVolume {volume:?}, which is being deleted"
            ),
            VolumeProblem::NoStorageClass { claim } => write!(
                f,
                "its PersistentVolumeClaim {claim:?} is not bound and names no StorageClass, so no volume will be provisioned for it"
            ),
            VolumeProblem::StorageClassMissing { claim, class } => write!(
                f,
                "its PersistentVolumeClaim {claim:?} names StorageClass {class:?}, which does not exist"
            ),
            VolumeProblem::StorageUnreadable { kind, why } => write!(
                f,
                "nodewright cannot read {kind} ({why}), so where its volumes can be used is unknown; pods without volumes are provisioned meanwhile (grant list and watch on {kind} to nodewright's cluster role)"
            ),
            VolumeProblem::ImmediateUnbound { claim, class } => write!(
                f,
                "its PersistentVolumeClaim {claim:?} is not bound yet and StorageClass {class:?} binds Immediately: the volume's zone is chosen before the pod is placed, so it waits for the claim to bind"
            ),
        }
    }
}

/// A pool for each of a pod's shared fields: what the reader of a cluster interns
/// every pod it reads through.
#[derive(Default)]
pub struct PodParts {
    labels: crate::share::Pool<BTreeMap<String, String>>,
    node_selector: crate::share::Pool<BTreeMap<String, String>>,
    required_node_terms: crate::share::Pool<Vec<Vec<NodeRequirement>>>,
    preferred_node_terms: crate::share::Pool<Vec<PreferredNodeTerm>>,
    tolerations: crate::share::Pool<Vec<Toleration>>,
    topology_spread: crate::share::Pool<Vec<TopologySpreadConstraint>>,
    pod_affinity: crate::share::Pool<Vec<PodAffinityTerm>>,
    preferred_pod_affinity: crate::share::Pool<Vec<WeightedPodAffinityTerm>>,
    host_ports: crate::share::Pool<Vec<HostPort>>,
    claims: crate::share::Pool<Vec<PodClaim>>,
    controllers: crate::share::Pool<ControllerRef>,
}

impl PodParts {
    /// Makes each of `pod`'s shared fields share the allocation of an equal value
    /// interned before.
    pub fn intern(&mut self, pod: &mut Pod) {
        // One write access for all the fields (it copies the fields once if the pod is
        // shared, not once per field).
        let pod: &mut PodFields = pod;
        self.labels.intern(&mut pod.labels);
        self.node_selector.intern(&mut pod.node_selector);
        self.required_node_terms
            .intern(&mut pod.required_node_terms);
        self.preferred_node_terms
            .intern(&mut pod.preferred_node_terms);
        self.tolerations.intern(&mut pod.tolerations);
        self.topology_spread.intern(&mut pod.topology_spread);
        // Required affinity and anti-affinity terms are the same type; one pool.
        self.pod_affinity.intern(&mut pod.pod_affinity);
        self.pod_affinity.intern(&mut pod.pod_anti_affinity);
        self.preferred_pod_affinity
            .intern(&mut pod.preferred_pod_affinity);
        self.preferred_pod_affinity
            .intern(&mut pod.preferred_pod_anti_affinity);
        self.host_ports.intern(&mut pod.host_ports);
        self.claims.intern(&mut pod.claims);
        self.controllers.intern_arc(&mut pod.controller);
    }

    /// How many distinct values the pools hold, all fields together (what a test of
    /// the interning counts).
    #[cfg(test)]
    fn distinct(&self) -> usize {
        self.labels.len()
            + self.node_selector.len()
            + self.required_node_terms.len()
            + self.preferred_node_terms.len()
            + self.tolerations.len()
            + self.topology_spread.len()
            + self.pod_affinity.len()
            + self.preferred_pod_affinity.len()
            + self.host_ports.len()
            + self.claims.len()
            + self.controllers.len()
    }
}

#[cfg(test)]
mod budget_tests {
    use super::*;

    fn pod(name: &str, app: &str, bound: bool) -> Pod {
        Pod::from(PodFields {
            namespace: "default".into(),
            name: name.into(),
            labels: BTreeMap::from([("app".to_string(), app.to_string())]).into(),
            node_name: bound.then(|| "n1".to_string()),
            ..PodFields::default()
        })
    }

    fn budget(min: Option<IntOrPercent>, max: Option<IntOrPercent>) -> PodDisruptionBudget {
        PodDisruptionBudget {
            namespace: "default".into(),
            name: "web".into(),
            selector: Some(LabelSelector {
                match_labels: BTreeMap::from([("app".to_string(), "web".to_string())]),
                match_expressions: vec![],
            }),
            min_available: min,
            max_unavailable: max,
            status_disruptions_allowed: None,
        }
    }

    #[test]
    fn percentages_round_up_for_min_available_and_max_unavailable() {
        let pods: Vec<Pod> = (0..3)
            .map(|i| pod(&format!("web-{i}"), "web", true))
            .collect();
        // minAvailable 50% of 3 = 1.5 → 2 must stay: one may go.
        assert_eq!(
            budget(Some(IntOrPercent::Percent(50)), None).disruptions_allowed(&pods),
            1
        );
        // maxUnavailable 50% of 3 = 1.5 → 2 may be unavailable.
        assert_eq!(
            budget(None, Some(IntOrPercent::Percent(50))).disruptions_allowed(&pods),
            2
        );
        assert_eq!(
            budget(Some(IntOrPercent::Int(3)), None).disruptions_allowed(&pods),
            0
        );
        assert_eq!(
            budget(None, Some(IntOrPercent::Int(0))).disruptions_allowed(&pods),
            0
        );
    }

    #[test]
    fn unhealthy_pods_count_as_expected_but_not_healthy() {
        let mut pods: Vec<Pod> = (0..2)
            .map(|i| pod(&format!("web-{i}"), "web", true))
            .collect();
        pods.push(pod("web-new", "web", false));
        let b = budget(None, Some(IntOrPercent::Int(1)));
        assert_eq!(
            b.disruptions_allowed(&pods),
            0,
            "a pending replacement uses up the budget"
        );
        assert!(
            eviction_allowed(&pods[2], &pods, std::slice::from_ref(&b)),
            "a pending pod may always go"
        );
        assert!(!eviction_allowed(&pods[0], &pods, std::slice::from_ref(&b)));
        assert!(
            eviction_allowed(&pod("db-0", "db", true), &pods, &[b]),
            "not selected"
        );
    }
}

#[cfg(test)]
mod parts_tests {
    use super::*;

    #[test]
    fn a_copied_pod_shares_its_fields_until_one_copy_is_written() {
        let original = crate::testing::bound_pod("node-a", "web-0", "100m", 0);
        let mut copy = original.clone();
        assert!(copy.same_as(&original), "a copy is a pointer");
        copy.node_name = None;
        assert!(!copy.same_as(&original), "a write copies the fields first");
        assert_eq!(original.node_name.as_deref(), Some("node-a"));
        assert_eq!(copy.node_name, None);
        assert_eq!(copy.into_fields().name, "web-0");
    }

    #[test]
    fn the_replicas_of_one_workload_share_their_parts_once_interned() {
        let replica = |name: &str| {
            let mut pod = crate::testing::pod(name, "100m", "64Mi");
            pod.labels = BTreeMap::from([
                ("app".to_string(), "web".to_string()),
                ("pod-template-hash".to_string(), "7d9c8b6f5".to_string()),
            ])
            .into();
            pod.tolerations.push(Toleration {
                key: "node.kubernetes.io/not-ready".into(),
                operator: TolerationOperator::Exists,
                value: String::new(),
                effect: None,
            });
            pod
        };
        let mut parts = PodParts::default();
        let (mut a, mut b) = (replica("web-1"), replica("web-2"));
        parts.intern(&mut a);
        parts.intern(&mut b);
        assert!(a.labels.same_as(&b.labels));
        assert!(a.tolerations.same_as(&b.tolerations));
        assert_eq!(parts.distinct(), 2);
        assert_eq!(
            a,
            Pod::from(PodFields {
                name: "web-1".into(),
                ..PodFields::clone(&b)
            })
        );
    }
}
