//! Reading the cluster: `kubectl get pods,nodes,daemonsets,poddisruptionbudgets -A -o json`
//! into a [`ClusterSnapshot`], and the conversions from Kubernetes API objects
//! (`k8s_openapi` types) into the scheduling view of [`crate::cluster`].
//!
//! The conversions are public so the engine can apply them to objects it lists from the
//! API server: one reduction, one set of rules, whichever way the objects arrive.
//!
//! What is accepted:
//! - the top level must be a JSON object of kind `List` (what kubectl prints for any
//!   `get ... -o json` that can return several objects, even `kubectl get pods`), or one
//!   of the typed lists the API server itself returns for our kinds (`PodList`,
//!   `NodeList`, `DaemonSetList`, `PodDisruptionBudgetList`, e.g. from
//!   `kubectl get --raw /api/v1/pods`). A single object, or a list of another kind
//!   (`DeploymentList`), is an error naming what was found: silently reading nothing
//!   from it would plan for an empty cluster.
//! - items of other kinds (Deployment, ReplicaSet, Service, ...) are skipped, not errors:
//!   `kubectl get all,...` output contains them and they do not affect scheduling.
//! - a real API server omits `apiVersion`/`kind` on the items of built-in lists. An item
//!   without `kind` takes it from a typed list (`PodList` → Pod), and otherwise from its
//!   shape (see `infer_kind`); an item whose kind cannot be told is an error naming its
//!   index rather than a guess.
//!
//! Nothing here panics on input: this parser reads whatever a user pipes into the CLI.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::policy::v1 as policy;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::api::model::{NodeRequirement, Operator, Taint, TaintEffect};
use crate::cluster::{
    ClusterSnapshot, DaemonSet, IntOrPercent, LabelSelector, LabelSelectorOperator,
    LabelSelectorRequirement, Node, Pod, PodAffinityTerm, PodDisruptionBudget,
    PreferredNodeTerm, Toleration, TolerationOperator, TopologySpreadConstraint,
    WeightedPodAffinityTerm, WhenUnsatisfiable,
};
use crate::resources::{QuantityError, Resources, parse_milli};

/// The label a `matchFields` requirement on `metadata.name` is translated to.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// Operators Kubernetes accepts in node selector requirements (Karpenter's Gte/Lte are
/// NodePool-only; a pod using them would have been rejected by the API server).
const NODE_OPERATORS: &str = "In, NotIn, Exists, DoesNotExist, Gt, Lt";
const LABEL_SELECTOR_OPERATORS: &str = "In, NotIn, Exists, DoesNotExist";
const TOLERATION_OPERATORS: &str = "Equal, Exists";
const TAINT_EFFECTS: &str = "NoSchedule, PreferNoSchedule, NoExecute";

/// Which container of a pod a quantity belongs to, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerRef {
    pub name: String,
    /// An entry of `initContainers` (sidecars included).
    pub init: bool,
}

impl fmt::Display for ContainerRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.init {
            write!(f, "init container {:?}", self.name)
        } else {
            write!(f, "container {:?}", self.name)
        }
    }
}

/// Renders `container "app": ` or nothing, so messages read
/// `pod "default/web-1": container "app": resources.requests.memory: ...`.
struct InContainer<'a>(&'a Option<ContainerRef>);

impl fmt::Display for InContainer<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(c) => write!(f, "{c}: "),
            None => Ok(()),
        }
    }
}

/// Renders ` "ns/name"` when an item's name could be read.
struct MaybeName<'a>(&'a Option<String>);

impl fmt::Display for MaybeName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(n) => write!(f, " {n:?}"),
            None => Ok(()),
        }
    }
}

/// Why a snapshot (or one object of it) cannot be read. Objects are named as
/// `pod "ns/name"`, `node "name"`, `DaemonSet "ns/name"`, `PodDisruptionBudget "ns/name"`;
/// paths are Kubernetes field paths (relative to the container for container fields).
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error(
        "the snapshot is not JSON: {source} (expected the output of `kubectl get pods,nodes,daemonsets,poddisruptionbudgets -A -o json`)"
    )]
    NotJson {
        #[source]
        source: serde_json::Error,
    },

    #[error(
        "the snapshot is {found}, not a List (expected the output of `kubectl get pods,nodes,daemonsets,poddisruptionbudgets -A -o json`: an object with kind \"List\" and an items array)"
    )]
    NotAList { found: String },

    #[error(
        "items[{index}]: cannot tell what kind of object this is: {found} (expected a Pod, Node, DaemonSet or PodDisruptionBudget; give the item a \"kind\")"
    )]
    UnknownItemKind { index: usize, found: String },

    #[error("items[{index}] ({kind}{}): {path}: {source}", MaybeName(.object))]
    Item {
        index: usize,
        kind: &'static str,
        /// `ns/name` (or `name`) when it could be read from the item.
        object: Option<String>,
        /// Field path inside the item, `.` for the item itself.
        path: String,
        #[source]
        source: serde_json::Error,
    },

    #[error("{object}: {}{path}: {source}", InContainer(.container))]
    Quantity {
        object: String,
        container: Option<ContainerRef>,
        path: String,
        #[source]
        source: QuantityError,
    },

    #[error(
        "{object}: {}{path}: quantity {quantity:?} is negative (expected zero or more)",
        InContainer(.container)
    )]
    NegativeQuantity {
        object: String,
        container: Option<ContainerRef>,
        path: String,
        quantity: String,
    },

    #[error("{object}: resource {resource:?} adds up to more than can be represented")]
    TooLarge { object: String, resource: String },

    #[error("{object}: {path}: unknown operator {operator:?} (expected one of {expected})")]
    UnknownOperator {
        object: String,
        path: String,
        operator: String,
        expected: &'static str,
    },

    #[error("{object}: {path}: {value:?} is not valid (expected {expected})")]
    InvalidValue {
        object: String,
        path: String,
        value: String,
        expected: String,
    },
}

type Result<T, E = SnapshotError> = std::result::Result<T, E>;

// ---------------------------------------------------------------------------------------
// The List
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ItemKind {
    Pod,
    Node,
    DaemonSet,
    Pdb,
}

impl ItemKind {
    fn from_kind(kind: &str) -> Option<ItemKind> {
        match kind {
            "Pod" => Some(ItemKind::Pod),
            "Node" => Some(ItemKind::Node),
            "DaemonSet" => Some(ItemKind::DaemonSet),
            "PodDisruptionBudget" => Some(ItemKind::Pdb),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            ItemKind::Pod => "Pod",
            ItemKind::Node => "Node",
            ItemKind::DaemonSet => "DaemonSet",
            ItemKind::Pdb => "PodDisruptionBudget",
        }
    }
}

/// Parses `kubectl get pods,nodes,daemonsets,poddisruptionbudgets -A -o json`.
///
/// Accepts a `List` (or a `PodList`/`NodeList`/`DaemonSetList`/`PodDisruptionBudgetList`);
/// items of kinds other than Pod, Node, DaemonSet and PodDisruptionBudget are skipped.
/// Objects keep the order of the items.
pub fn parse_snapshot(text: &str) -> Result<ClusterSnapshot> {
    let value: Value =
        serde_json::from_str(text).map_err(|source| SnapshotError::NotJson { source })?;
    let Value::Object(mut top) = value else {
        return Err(SnapshotError::NotAList {
            found: describe_value(&value),
        });
    };
    let not_a_list = |top: &serde_json::Map<String, Value>| SnapshotError::NotAList {
        found: describe_object(top),
    };
    // The kind every item has when the list is a typed one (the API server's own lists).
    let list_item_kind = match top.get("kind").and_then(Value::as_str) {
        Some("List") => {
            match top.get("apiVersion") {
                None => {}
                Some(Value::String(v)) if v == "v1" => {}
                Some(other) => {
                    return Err(SnapshotError::NotAList {
                        found: format!("a List with apiVersion {other} (expected \"v1\")"),
                    });
                }
            }
            None
        }
        Some(kind) => match kind.strip_suffix("List").and_then(ItemKind::from_kind) {
            Some(item_kind) => Some(item_kind),
            None => return Err(not_a_list(&top)),
        },
        None => return Err(not_a_list(&top)),
    };
    let items = match top.remove("items") {
        Some(Value::Array(items)) => items,
        // Go marshals an empty slice that was never allocated as null.
        Some(Value::Null) => Vec::new(),
        Some(other) => {
            return Err(SnapshotError::NotAList {
                found: format!("a List whose items is {}", describe_value(&other)),
            });
        }
        None => {
            return Err(SnapshotError::NotAList {
                found: "a List without an items array".to_string(),
            });
        }
    };

    let mut snapshot = ClusterSnapshot::default();
    for (index, item) in items.into_iter().enumerate() {
        let Some(kind) = classify(index, &item, list_item_kind)? else {
            continue;
        };
        match kind {
            ItemKind::Pod => {
                let pod: core::Pod = decode(index, kind, item)?;
                snapshot.pods.push(pod_from_k8s(&pod)?);
            }
            ItemKind::Node => {
                let node: core::Node = decode(index, kind, item)?;
                snapshot.nodes.push(node_from_k8s(&node)?);
            }
            ItemKind::DaemonSet => {
                let ds: apps::DaemonSet = decode(index, kind, item)?;
                snapshot.daemonsets.push(daemonset_from_k8s(&ds)?);
            }
            ItemKind::Pdb => {
                let pdb: policy::PodDisruptionBudget = decode(index, kind, item)?;
                snapshot.pdbs.push(pdb_from_k8s(&pdb)?);
            }
        }
    }
    Ok(snapshot)
}

/// `Some(kind)` for an item to read, `None` for one to skip.
fn classify(index: usize, item: &Value, list_item_kind: Option<ItemKind>) -> Result<Option<ItemKind>> {
    let Value::Object(obj) = item else {
        return Err(SnapshotError::UnknownItemKind {
            index,
            found: format!("it is {}, not an object", describe_value(item)),
        });
    };
    match obj.get("kind") {
        Some(Value::String(kind)) if !kind.is_empty() => return Ok(ItemKind::from_kind(kind)),
        None | Some(Value::Null) | Some(Value::String(_)) => {}
        Some(other) => {
            return Err(SnapshotError::UnknownItemKind {
                index,
                found: format!("its kind is {other}, not a string"),
            });
        }
    }
    if let Some(kind) = list_item_kind {
        return Ok(Some(kind));
    }
    match infer_kind(obj) {
        Inferred::Kind(kind) => Ok(Some(kind)),
        Inferred::Other => Ok(None),
        Inferred::Unknown => Err(SnapshotError::UnknownItemKind {
            index,
            found: "it has no kind and its shape matches none of them".to_string(),
        }),
    }
}

enum Inferred {
    Kind(ItemKind),
    /// Recognisably another kind (a Deployment, a Service, ...): skipped like a kinded one.
    Other,
    Unknown,
}

/// Guesses the kind of an item that has none, from fields only that kind has.
/// Workloads with a pod template are told apart by fields a DaemonSet never has.
fn infer_kind(obj: &serde_json::Map<String, Value>) -> Inferred {
    let empty = serde_json::Map::new();
    let spec = obj.get("spec").and_then(Value::as_object).unwrap_or(&empty);
    let status = obj.get("status").and_then(Value::as_object).unwrap_or(&empty);
    let has_namespace = obj
        .get("metadata")
        .and_then(|m| m.get("namespace"))
        .and_then(Value::as_str)
        .is_some_and(|ns| !ns.is_empty());
    let spec_has = |keys: &[&str]| keys.iter().any(|k| spec.contains_key(*k));
    let status_has = |keys: &[&str]| keys.iter().any(|k| status.contains_key(*k));

    if spec.contains_key("containers") {
        return Inferred::Kind(ItemKind::Pod);
    }
    if spec.contains_key("template") {
        // Deployment, ReplicaSet, StatefulSet, Job, ReplicationController.
        let other_workload = spec_has(&[
            "replicas",
            "strategy",
            "serviceName",
            "podManagementPolicy",
            "completions",
            "parallelism",
            "backoffLimit",
            "paused",
            "progressDeadlineSeconds",
        ]) || status_has(&["replicas", "succeeded", "active"]);
        if other_workload {
            return Inferred::Other;
        }
        if spec.contains_key("selector") || status_has(&["desiredNumberScheduled", "numberReady"]) {
            return Inferred::Kind(ItemKind::DaemonSet);
        }
        return Inferred::Unknown;
    }
    if spec.contains_key("jobTemplate") || spec_has(&["ports", "clusterIP", "externalName"]) {
        // CronJob, Service.
        return Inferred::Other;
    }
    if spec_has(&["minAvailable", "maxUnavailable", "unhealthyPodEvictionPolicy"])
        || status_has(&["disruptionsAllowed", "expectedPods", "desiredHealthy"])
    {
        return Inferred::Kind(ItemKind::Pdb);
    }
    if !has_namespace
        && (status_has(&["nodeInfo", "allocatable", "daemonEndpoints"])
            || spec_has(&["providerID", "podCIDR", "podCIDRs", "taints", "unschedulable"]))
    {
        return Inferred::Kind(ItemKind::Node);
    }
    // A PDB with only a selector: a metav1.LabelSelector (unlike a Service's plain map).
    let only_selector = !spec.is_empty() && spec.keys().all(|k| k == "selector");
    let label_selector = spec
        .get("selector")
        .and_then(Value::as_object)
        .is_some_and(|s| s.keys().all(|k| k == "matchLabels" || k == "matchExpressions"));
    if has_namespace && only_selector && label_selector {
        return Inferred::Kind(ItemKind::Pdb);
    }
    Inferred::Unknown
}

fn decode<T: DeserializeOwned>(index: usize, kind: ItemKind, item: Value) -> Result<T> {
    let object = item_name(&item);
    serde_path_to_error::deserialize(item).map_err(|e| SnapshotError::Item {
        index,
        kind: kind.name(),
        object,
        path: e.path().to_string(),
        source: e.into_inner(),
    })
}

/// `ns/name` or `name` of an item, when readable.
fn item_name(item: &Value) -> Option<String> {
    let meta = item.get("metadata")?;
    let name = meta.get("name")?.as_str()?;
    match meta.get("namespace").and_then(Value::as_str) {
        Some(ns) if !ns.is_empty() => Some(format!("{ns}/{name}")),
        _ => Some(name.to_string()),
    }
}

fn describe_value(value: &Value) -> String {
    match value {
        Value::Null => "null".to_string(),
        Value::Bool(_) => "a JSON boolean".to_string(),
        Value::Number(_) => "a JSON number".to_string(),
        Value::String(_) => "a JSON string".to_string(),
        Value::Array(_) => "a JSON array".to_string(),
        Value::Object(obj) => describe_object(obj),
    }
}

/// `a Pod "default/web-1"`, `a DeploymentList`, `a JSON object without kind`.
fn describe_object(obj: &serde_json::Map<String, Value>) -> String {
    match obj.get("kind") {
        Some(Value::String(kind)) if !kind.is_empty() => {
            let article = if kind.starts_with(['A', 'E', 'I', 'O', 'U']) { "an" } else { "a" };
            match item_name(&Value::Object(obj.clone())) {
                Some(name) => format!("{article} {kind} {name:?}"),
                None => format!("{article} {kind}"),
            }
        }
        _ => "a JSON object without kind".to_string(),
    }
}

// ---------------------------------------------------------------------------------------
// Pods
// ---------------------------------------------------------------------------------------

/// Where a pod spec lives, for messages: a pod's own, or a DaemonSet's template.
struct PodCtx<'a> {
    /// `pod "default/web-1"` or `DaemonSet "kube-system/aws-node"`.
    object: String,
    /// `spec` or `spec.template.spec`.
    spec_path: &'static str,
    namespace: &'a str,
    labels: &'a BTreeMap<String, String>,
}

/// Converts a Kubernetes pod to the scheduling view.
///
/// Requests follow kube-scheduler (`k8s.io/component-helpers/resource.PodRequests`):
/// the sum of the regular containers and of the sidecars (init containers with
/// `restartPolicy: Always`), at least the largest of each classic init container plus
/// the sidecars started before it, then pod-level `spec.resources` (cpu, memory,
/// hugepages) override the aggregate where set, then `spec.overhead` is added, then one
/// pod slot. A container with limits but no request for a resource requests its limit,
/// as the API server's defaulting does. Not modelled: in-place resize (the scheduler
/// uses max(spec, allocated) while a resize is pending; we use the spec) and ephemeral
/// containers (they request nothing).
///
/// Required node affinity `matchFields` on `metadata.name` (how DaemonSet pods are pinned)
/// become requirements on [`HOSTNAME_LABEL`]: on EKS a node's hostname label is its name,
/// and a new node can never satisfy it, which is right for a pod pinned to one node.
/// Pod (anti-)affinity terms with no `namespaces` get the pod's namespace filled in;
/// `namespaceSelector` is not supported and is ignored (see [`PodAffinityTerm`]).
/// `matchLabelKeys`/`mismatchLabelKeys` are merged into the selectors from the pod's
/// labels, as the scheduler does. `nodeAffinityPolicy`/`nodeTaintsPolicy` of spread
/// constraints are not represented (Kubernetes' defaults, Honor/Ignore, are assumed).
pub fn pod_from_k8s(pod: &core::Pod) -> Result<Pod> {
    let namespace = namespace_or_default(&pod.metadata);
    let name = pod.metadata.name.clone().unwrap_or_default();
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let ctx = PodCtx {
        object: format!("pod \"{namespace}/{name}\""),
        spec_path: "spec",
        namespace: &namespace,
        labels: &labels,
    };
    let default_spec = core::PodSpec::default();
    let spec = pod.spec.as_ref().unwrap_or(&default_spec);
    let mut out = convert_pod_spec(&ctx, spec)?;
    out.daemonset_owned = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "DaemonSet");
    out.terminal = matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    );
    out.node_name = spec.node_name.clone().filter(|n| !n.is_empty());
    out.namespace = namespace;
    out.name = name;
    out.labels = labels;
    Ok(out)
}

fn namespace_or_default(meta: &meta::ObjectMeta) -> String {
    match meta.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => ns.to_string(),
        _ => "default".to_string(),
    }
}

/// Everything that comes from the pod spec (shared by pods and DaemonSet templates).
fn convert_pod_spec(ctx: &PodCtx<'_>, spec: &core::PodSpec) -> Result<Pod> {
    let sp = ctx.spec_path;
    let mut pod = Pod {
        requests: pod_requests(ctx, spec)?,
        node_selector: spec.node_selector.clone().unwrap_or_default(),
        critical: matches!(
            spec.priority_class_name.as_deref(),
            Some("system-cluster-critical" | "system-node-critical")
        ),
        ..Pod::default()
    };

    for (i, t) in spec.tolerations.iter().flatten().enumerate() {
        pod.tolerations.push(toleration(ctx, &format!("{sp}.tolerations[{i}]"), t)?);
    }

    for (i, c) in spec.topology_spread_constraints.iter().flatten().enumerate() {
        let path = format!("{sp}.topologySpreadConstraints[{i}]");
        pod.topology_spread.push(spread_constraint(ctx, &path, c)?);
    }

    let Some(affinity) = &spec.affinity else {
        return Ok(pod);
    };
    if let Some(na) = &affinity.node_affinity {
        let base = format!("{sp}.affinity.nodeAffinity");
        if let Some(required) = &na.required_during_scheduling_ignored_during_execution {
            let mut any_term = false;
            for (i, term) in required.node_selector_terms.iter().enumerate() {
                any_term = true;
                let path = format!(
                    "{base}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}]"
                );
                let reqs = node_selector_term(ctx, &path, term)?;
                // An empty term matches no node; as one of ORed terms it adds nothing.
                if !reqs.is_empty() {
                    pod.required_node_terms.push(reqs);
                }
            }
            if any_term && pod.required_node_terms.is_empty() {
                // Only empty terms: the pod fits no node. `In` with no values is a
                // requirement no node satisfies, so consumers need no special case.
                pod.required_node_terms.push(vec![NodeRequirement {
                    key: HOSTNAME_LABEL.to_string(),
                    operator: Operator::In,
                    values: Vec::new(),
                    min_values: None,
                }]);
            }
        }
        for (i, pref) in na
            .preferred_during_scheduling_ignored_during_execution
            .iter()
            .flatten()
            .enumerate()
        {
            let path = format!("{base}.preferredDuringSchedulingIgnoredDuringExecution[{i}]");
            let requirements =
                node_selector_term(ctx, &format!("{path}.preference"), &pref.preference)?;
            // An empty preference matches no node and so never adds to a score.
            if !requirements.is_empty() {
                pod.preferred_node_terms.push(PreferredNodeTerm {
                    weight: pref.weight,
                    requirements,
                });
            }
        }
    }
    if let Some(pa) = &affinity.pod_affinity {
        let base = format!("{sp}.affinity.podAffinity");
        (pod.pod_affinity, pod.preferred_pod_affinity) = pod_affinity_terms(
            ctx,
            &base,
            pa.required_during_scheduling_ignored_during_execution.as_deref(),
            pa.preferred_during_scheduling_ignored_during_execution.as_deref(),
        )?;
    }
    if let Some(paa) = &affinity.pod_anti_affinity {
        let base = format!("{sp}.affinity.podAntiAffinity");
        (pod.pod_anti_affinity, pod.preferred_pod_anti_affinity) = pod_affinity_terms(
            ctx,
            &base,
            paa.required_during_scheduling_ignored_during_execution.as_deref(),
            paa.preferred_during_scheduling_ignored_during_execution.as_deref(),
        )?;
    }
    Ok(pod)
}

/// The effective requests of a pod; see [`pod_from_k8s`] for the rule.
fn pod_requests(ctx: &PodCtx<'_>, spec: &core::PodSpec) -> Result<Resources> {
    let object = &ctx.object;
    let mut total = Resources::new();
    for c in &spec.containers {
        let r = container_requests(object, c, false)?;
        checked_add(object, &mut total, &r)?;
    }
    // Sidecars run for the pod's whole life, so they add to the sum; a classic init
    // container runs alone except for the sidecars started before it.
    let mut sidecars = Resources::new();
    let mut init_peak = Resources::new();
    for c in spec.init_containers.iter().flatten() {
        let r = container_requests(object, c, true)?;
        if c.restart_policy.as_deref() == Some("Always") {
            checked_add(object, &mut total, &r)?;
            checked_add(object, &mut sidecars, &r)?;
            init_peak.max_with(&sidecars);
        } else {
            let mut running = r;
            checked_add(object, &mut running, &sidecars)?;
            init_peak.max_with(&running);
        }
    }
    total.max_with(&init_peak);

    // Pod-level resources (PodLevelResources): cpu, memory and hugepages only; they
    // replace the container aggregate. Limits without requests default the requests.
    if let Some(pod_resources) = &spec.resources {
        let requests = pod_resources.requests.as_ref();
        let limits = pod_resources.limits.as_ref();
        let names = requests.into_iter().flatten().chain(limits.into_iter().flatten());
        let mut pod_level = BTreeMap::new();
        for (name, _) in names {
            if !(name == "cpu" || name == "memory" || name.starts_with("hugepages-")) {
                continue;
            }
            if pod_level.contains_key(name) {
                continue;
            }
            let (field, q) = match requests.and_then(|m| m.get(name)) {
                Some(q) => ("requests", q),
                None => match limits.and_then(|m| m.get(name)) {
                    Some(q) => ("limits", q),
                    None => continue,
                },
            };
            let path = format!("{}.resources.{field}.{name}", ctx.spec_path);
            pod_level.insert(name.clone(), quantity(object, None, path, q)?);
        }
        for (name, milli) in pod_level {
            total.set_milli(&name, milli);
        }
    }

    let mut overhead = Resources::new();
    for (name, q) in spec.overhead.iter().flatten() {
        let path = format!("{}.overhead.{name}", ctx.spec_path);
        overhead.set_milli(name, quantity(object, None, path, q)?);
    }
    checked_add(object, &mut total, &overhead)?;
    checked_add(object, &mut total, &Resources::one_pod())?;
    Ok(total)
}

/// A container's requests, with limits standing in for missing requests.
fn container_requests(object: &str, c: &core::Container, init: bool) -> Result<Resources> {
    let cref = ContainerRef { name: c.name.clone(), init };
    let mut out = Resources::new();
    let Some(res) = &c.resources else {
        return Ok(out);
    };
    let requests = res.requests.as_ref();
    for (name, q) in requests.into_iter().flatten() {
        let path = format!("resources.requests.{name}");
        out.set_milli(name, quantity(object, Some(&cref), path, q)?);
    }
    for (name, q) in res.limits.iter().flatten() {
        // Every limit is checked, even one shadowed by a request: the API server would
        // not have admitted the pod with a malformed one.
        let path = format!("resources.limits.{name}");
        let milli = quantity(object, Some(&cref), path, q)?;
        if !requests.is_some_and(|r| r.contains_key(name)) {
            out.set_milli(name, milli);
        }
    }
    Ok(out)
}

/// Parses a quantity that must not be negative.
fn quantity(object: &str, container: Option<&ContainerRef>, path: String, q: &Quantity) -> Result<i64> {
    match parse_milli(&q.0) {
        Ok(milli) if milli < 0 => Err(SnapshotError::NegativeQuantity {
            object: object.to_string(),
            container: container.cloned(),
            path,
            quantity: q.0.clone(),
        }),
        Ok(milli) => Ok(milli),
        Err(source) => Err(SnapshotError::Quantity {
            object: object.to_string(),
            container: container.cloned(),
            path,
            source,
        }),
    }
}

/// `total += other`, refusing to overflow (quantities up to i64::MAX each are parseable,
/// and `Resources::add` would wrap or panic on their sum).
fn checked_add(object: &str, total: &mut Resources, other: &Resources) -> Result<()> {
    for (name, milli) in other.iter() {
        let sum = total
            .get_milli(name)
            .checked_add(milli)
            .ok_or_else(|| SnapshotError::TooLarge {
                object: object.to_string(),
                resource: name.to_string(),
            })?;
        total.set_milli(name, sum);
    }
    Ok(())
}

fn node_selector_term(ctx: &PodCtx<'_>, path: &str, term: &core::NodeSelectorTerm) -> Result<Vec<NodeRequirement>> {
    let mut out = Vec::new();
    for (i, r) in term.match_expressions.iter().flatten().enumerate() {
        out.push(node_requirement(ctx, &format!("{path}.matchExpressions[{i}]"), r, &r.key)?);
    }
    for (i, r) in term.match_fields.iter().flatten().enumerate() {
        let p = format!("{path}.matchFields[{i}]");
        if r.key != "metadata.name" {
            return Err(SnapshotError::InvalidValue {
                object: ctx.object.clone(),
                path: format!("{p}.key"),
                value: r.key.clone(),
                expected: "\"metadata.name\", the only field node selectors support".to_string(),
            });
        }
        out.push(node_requirement(ctx, &p, r, HOSTNAME_LABEL)?);
    }
    Ok(out)
}

fn node_requirement(
    ctx: &PodCtx<'_>,
    path: &str,
    r: &core::NodeSelectorRequirement,
    key: &str,
) -> Result<NodeRequirement> {
    let operator = match r.operator.as_str() {
        "In" => Operator::In,
        "NotIn" => Operator::NotIn,
        "Exists" => Operator::Exists,
        "DoesNotExist" => Operator::DoesNotExist,
        "Gt" => Operator::Gt,
        "Lt" => Operator::Lt,
        other => {
            return Err(SnapshotError::UnknownOperator {
                object: ctx.object.clone(),
                path: format!("{path}.operator"),
                operator: other.to_string(),
                expected: NODE_OPERATORS,
            });
        }
    };
    let values = r.values.clone().unwrap_or_default();
    if matches!(operator, Operator::Gt | Operator::Lt) {
        // The requirements algebra relies on exactly one integer here.
        let ok = matches!(values.as_slice(), [v] if v.parse::<i64>().is_ok());
        if !ok {
            return Err(SnapshotError::InvalidValue {
                object: ctx.object.clone(),
                path: format!("{path}.values"),
                value: format!("{values:?}"),
                expected: format!("exactly one integer for operator {}", r.operator),
            });
        }
    }
    Ok(NodeRequirement {
        key: key.to_string(),
        operator,
        values,
        min_values: None,
    })
}

fn toleration(ctx: &PodCtx<'_>, path: &str, t: &core::Toleration) -> Result<Toleration> {
    let operator = match t.operator.as_deref() {
        None | Some("") | Some("Equal") => TolerationOperator::Equal,
        Some("Exists") => TolerationOperator::Exists,
        Some(other) => {
            return Err(SnapshotError::UnknownOperator {
                object: ctx.object.clone(),
                path: format!("{path}.operator"),
                operator: other.to_string(),
                expected: TOLERATION_OPERATORS,
            });
        }
    };
    let effect = match t.effect.as_deref() {
        None | Some("") => None,
        Some(e) => Some(taint_effect(&ctx.object, &format!("{path}.effect"), e)?),
    };
    Ok(Toleration {
        key: t.key.clone().unwrap_or_default(),
        operator,
        value: t.value.clone().unwrap_or_default(),
        effect,
    })
}

fn taint_effect(object: &str, path: &str, effect: &str) -> Result<TaintEffect> {
    TaintEffect::parse(effect).ok_or_else(|| SnapshotError::InvalidValue {
        object: object.to_string(),
        path: path.to_string(),
        value: effect.to_string(),
        expected: format!("one of {TAINT_EFFECTS}"),
    })
}

fn spread_constraint(
    ctx: &PodCtx<'_>,
    path: &str,
    c: &core::TopologySpreadConstraint,
) -> Result<TopologySpreadConstraint> {
    let invalid = |field: &str, value: String, expected: &str| SnapshotError::InvalidValue {
        object: ctx.object.clone(),
        path: format!("{path}.{field}"),
        value,
        expected: expected.to_string(),
    };
    let max_skew = u32::try_from(c.max_skew)
        .ok()
        .filter(|s| *s > 0)
        .ok_or_else(|| invalid("maxSkew", c.max_skew.to_string(), "an integer greater than 0"))?;
    let when_unsatisfiable = match c.when_unsatisfiable.as_str() {
        "DoNotSchedule" => WhenUnsatisfiable::DoNotSchedule,
        "ScheduleAnyway" => WhenUnsatisfiable::ScheduleAnyway,
        other => {
            return Err(invalid(
                "whenUnsatisfiable",
                other.to_string(),
                "one of DoNotSchedule, ScheduleAnyway",
            ));
        }
    };
    let min_domains = match c.min_domains {
        None => None,
        Some(m) => Some(
            u32::try_from(m)
                .ok()
                .filter(|m| *m > 0)
                .ok_or_else(|| invalid("minDomains", m.to_string(), "an integer greater than 0"))?,
        ),
    };
    let mut label_selector = match &c.label_selector {
        Some(s) => Some(label_selector(&ctx.object, &format!("{path}.labelSelector"), s)?),
        None => None,
    };
    // matchLabelKeys: the pod's values for these keys narrow the selector to its own
    // revision (the scheduler merges them; from 1.34 the API server does it on create).
    if let Some(sel) = &mut label_selector {
        for key in c.match_label_keys.iter().flatten() {
            if let Some(v) = ctx.labels.get(key) {
                sel.match_expressions.push(LabelSelectorRequirement {
                    key: key.clone(),
                    operator: LabelSelectorOperator::In,
                    values: vec![v.clone()],
                });
            }
        }
    }
    Ok(TopologySpreadConstraint {
        max_skew,
        topology_key: c.topology_key.clone(),
        when_unsatisfiable,
        label_selector,
        min_domains,
    })
}

type AffinityTerms = (Vec<PodAffinityTerm>, Vec<WeightedPodAffinityTerm>);

fn pod_affinity_terms(
    ctx: &PodCtx<'_>,
    base: &str,
    required: Option<&[core::PodAffinityTerm]>,
    preferred: Option<&[core::WeightedPodAffinityTerm]>,
) -> Result<AffinityTerms> {
    let mut req = Vec::new();
    for (i, t) in required.into_iter().flatten().enumerate() {
        let path = format!("{base}.requiredDuringSchedulingIgnoredDuringExecution[{i}]");
        req.push(pod_affinity_term(ctx, &path, t)?);
    }
    let mut pref = Vec::new();
    for (i, w) in preferred.into_iter().flatten().enumerate() {
        let path =
            format!("{base}.preferredDuringSchedulingIgnoredDuringExecution[{i}].podAffinityTerm");
        pref.push(WeightedPodAffinityTerm {
            weight: w.weight,
            term: pod_affinity_term(ctx, &path, &w.pod_affinity_term)?,
        });
    }
    Ok((req, pref))
}

fn pod_affinity_term(ctx: &PodCtx<'_>, path: &str, t: &core::PodAffinityTerm) -> Result<PodAffinityTerm> {
    let mut selector = match &t.label_selector {
        Some(s) => Some(label_selector(&ctx.object, &format!("{path}.labelSelector"), s)?),
        None => None,
    };
    if let Some(sel) = &mut selector {
        for key in t.match_label_keys.iter().flatten() {
            if let Some(v) = ctx.labels.get(key) {
                sel.match_expressions.push(LabelSelectorRequirement {
                    key: key.clone(),
                    operator: LabelSelectorOperator::In,
                    values: vec![v.clone()],
                });
            }
        }
        for key in t.mismatch_label_keys.iter().flatten() {
            if let Some(v) = ctx.labels.get(key) {
                sel.match_expressions.push(LabelSelectorRequirement {
                    key: key.clone(),
                    operator: LabelSelectorOperator::NotIn,
                    values: vec![v.clone()],
                });
            }
        }
    }
    let mut namespaces = t.namespaces.clone().unwrap_or_default();
    if namespaces.is_empty() {
        // Kubernetes reads "no namespaces" as the pod's own; filling it in here means no
        // consumer can forget to.
        namespaces.push(ctx.namespace.to_string());
    }
    Ok(PodAffinityTerm {
        label_selector: selector,
        topology_key: t.topology_key.clone(),
        namespaces,
    })
}

fn label_selector(object: &str, path: &str, s: &meta::LabelSelector) -> Result<LabelSelector> {
    let mut out = LabelSelector {
        match_labels: s.match_labels.clone().unwrap_or_default(),
        match_expressions: Vec::new(),
    };
    for (i, e) in s.match_expressions.iter().flatten().enumerate() {
        let operator = match e.operator.as_str() {
            "In" => LabelSelectorOperator::In,
            "NotIn" => LabelSelectorOperator::NotIn,
            "Exists" => LabelSelectorOperator::Exists,
            "DoesNotExist" => LabelSelectorOperator::DoesNotExist,
            other => {
                return Err(SnapshotError::UnknownOperator {
                    object: object.to_string(),
                    path: format!("{path}.matchExpressions[{i}].operator"),
                    operator: other.to_string(),
                    expected: LABEL_SELECTOR_OPERATORS,
                });
            }
        };
        out.match_expressions.push(LabelSelectorRequirement {
            key: e.key.clone(),
            operator,
            values: e.values.clone().unwrap_or_default(),
        });
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// Nodes, DaemonSets, PDBs
// ---------------------------------------------------------------------------------------

/// Converts a Kubernetes node. `ready` is the Ready condition being "True"; allocatable
/// and capacity are parsed exactly and must not be negative.
pub fn node_from_k8s(node: &core::Node) -> Result<Node> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let object = format!("node {name:?}");
    let mut out = Node {
        labels: node.metadata.labels.clone().unwrap_or_default(),
        ..Node::default()
    };
    if let Some(spec) = &node.spec {
        out.provider_id = spec.provider_id.clone().filter(|p| !p.is_empty());
        out.unschedulable = spec.unschedulable.unwrap_or(false);
        for (i, t) in spec.taints.iter().flatten().enumerate() {
            out.taints.push(Taint {
                key: t.key.clone(),
                value: t.value.clone().filter(|v| !v.is_empty()),
                effect: taint_effect(&object, &format!("spec.taints[{i}].effect"), &t.effect)?,
            });
        }
    }
    if let Some(status) = &node.status {
        out.allocatable = resource_list(&object, "status.allocatable", status.allocatable.as_ref())?;
        out.capacity = resource_list(&object, "status.capacity", status.capacity.as_ref())?;
        out.ready = status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
    }
    out.name = name;
    Ok(out)
}

fn resource_list(object: &str, path: &str, list: Option<&BTreeMap<String, Quantity>>) -> Result<Resources> {
    let mut out = Resources::new();
    for (name, q) in list.into_iter().flatten() {
        out.set_milli(name, quantity(object, None, format!("{path}.{name}"), q)?);
    }
    Ok(out)
}

/// Converts a DaemonSet: its pod template as a pod named and namespaced as the
/// DaemonSet, with `daemonset_owned` set (the pods it creates are), so it is never
/// pending itself. Errors name the DaemonSet and paths under `spec.template.spec`.
pub fn daemonset_from_k8s(ds: &apps::DaemonSet) -> Result<DaemonSet> {
    let namespace = namespace_or_default(&ds.metadata);
    let name = ds.metadata.name.clone().unwrap_or_default();
    let default_spec = core::PodSpec::default();
    let template = ds.spec.as_ref().map(|s| &s.template);
    let spec = template.and_then(|t| t.spec.as_ref()).unwrap_or(&default_spec);
    let labels = template
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let ctx = PodCtx {
        object: format!("DaemonSet \"{namespace}/{name}\""),
        spec_path: "spec.template.spec",
        namespace: &namespace,
        labels: &labels,
    };
    let mut pod = convert_pod_spec(&ctx, spec)?;
    pod.namespace = namespace.clone();
    pod.name = name.clone();
    pod.labels = labels;
    pod.daemonset_owned = true;
    Ok(DaemonSet {
        namespace,
        name,
        template: pod,
    })
}

/// Converts a PodDisruptionBudget. `minAvailable`/`maxUnavailable` are an integer (≥ 0)
/// or a percentage string "0%".."100%"; a plain numeric string such as "3" is rejected,
/// as Kubernetes does when it evaluates the budget.
pub fn pdb_from_k8s(pdb: &policy::PodDisruptionBudget) -> Result<PodDisruptionBudget> {
    let namespace = namespace_or_default(&pdb.metadata);
    let name = pdb.metadata.name.clone().unwrap_or_default();
    let object = format!("PodDisruptionBudget \"{namespace}/{name}\"");
    let mut out = PodDisruptionBudget {
        namespace,
        name,
        selector: None,
        min_available: None,
        max_unavailable: None,
    };
    if let Some(spec) = &pdb.spec {
        if let Some(s) = &spec.selector {
            out.selector = Some(label_selector(&object, "spec.selector", s)?);
        }
        if let Some(v) = &spec.min_available {
            out.min_available = Some(int_or_percent(&object, "spec.minAvailable", v)?);
        }
        if let Some(v) = &spec.max_unavailable {
            out.max_unavailable = Some(int_or_percent(&object, "spec.maxUnavailable", v)?);
        }
    }
    Ok(out)
}

fn int_or_percent(object: &str, path: &str, v: &IntOrString) -> Result<IntOrPercent> {
    let invalid = |value: String| SnapshotError::InvalidValue {
        object: object.to_string(),
        path: path.to_string(),
        value,
        expected: "an integer of at least 0 or a percentage such as \"50%\"".to_string(),
    };
    match v {
        IntOrString::Int(i) if *i >= 0 => Ok(IntOrPercent::Int(*i)),
        IntOrString::Int(i) => Err(invalid(i.to_string())),
        IntOrString::String(s) => s
            .strip_suffix('%')
            .filter(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|digits| digits.parse::<u32>().ok())
            .filter(|p| *p <= 100)
            .map(IntOrPercent::Percent)
            .ok_or_else(|| invalid(s.clone())),
    }
}
