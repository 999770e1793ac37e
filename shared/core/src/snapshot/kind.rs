//! What kind of object a List item is: its own `kind`, else its typed list's, else its
//! shape (a real API server leaves `kind` off the items of built-in lists); and how an
//! object is described in messages (`a Pod "default/web-1"`).

use serde_json::Value;

use super::error::{Result, SnapshotError};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ItemKind {
    Pod,
    Node,
    DaemonSet,
    Pdb,
    Pvc,
    Pv,
    StorageClass,
    /// What the CSI drivers published on a node: how many volumes it attaches.
    CsiNode,
    /// A Deployment, StatefulSet or ReplicaSet (read only with its `kind`: a
    /// CapacityBuffer's `scalableRef` names one).
    Deployment,
    StatefulSet,
    ReplicaSet,
    /// Read only with its `kind`, as the workloads: its selector is what a default
    /// topology spread deduces.
    ReplicationController,
    /// Read only with its `kind`: the default topology spread's selectors.
    Service,
    /// Read only with its `kind`: what `simulate --cluster` scales workloads by.
    Hpa,
}

impl ItemKind {
    pub(super) fn from_kind(kind: &str) -> Option<ItemKind> {
        match kind {
            "Pod" => Some(ItemKind::Pod),
            "Node" => Some(ItemKind::Node),
            "DaemonSet" => Some(ItemKind::DaemonSet),
            "PodDisruptionBudget" => Some(ItemKind::Pdb),
            "PersistentVolumeClaim" => Some(ItemKind::Pvc),
            "PersistentVolume" => Some(ItemKind::Pv),
            "StorageClass" => Some(ItemKind::StorageClass),
            "CSINode" => Some(ItemKind::CsiNode),
            "Deployment" => Some(ItemKind::Deployment),
            "StatefulSet" => Some(ItemKind::StatefulSet),
            "ReplicaSet" => Some(ItemKind::ReplicaSet),
            "ReplicationController" => Some(ItemKind::ReplicationController),
            "Service" => Some(ItemKind::Service),
            "HorizontalPodAutoscaler" => Some(ItemKind::Hpa),
            _ => None,
        }
    }

    /// A Deployment, StatefulSet or ReplicaSet: read from a `List` beside the other
    /// kinds, never a snapshot's own list type (`DeploymentList` is not a snapshot).
    pub(super) fn is_workload(self) -> bool {
        matches!(
            self,
            ItemKind::Deployment
                | ItemKind::StatefulSet
                | ItemKind::ReplicaSet
                | ItemKind::ReplicationController
                | ItemKind::Service
                | ItemKind::Hpa
        )
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            ItemKind::Pod => "Pod",
            ItemKind::Node => "Node",
            ItemKind::DaemonSet => "DaemonSet",
            ItemKind::Pdb => "PodDisruptionBudget",
            ItemKind::Pvc => "PersistentVolumeClaim",
            ItemKind::Pv => "PersistentVolume",
            ItemKind::StorageClass => "StorageClass",
            ItemKind::CsiNode => "CSINode",
            ItemKind::Deployment => "Deployment",
            ItemKind::StatefulSet => "StatefulSet",
            ItemKind::ReplicaSet => "ReplicaSet",
            ItemKind::ReplicationController => "ReplicationController",
            ItemKind::Service => "Service",
            ItemKind::Hpa => "HorizontalPodAutoscaler",
        }
    }
}

/// `Some(kind)` for an item to read, `None` for one to skip.
pub(super) fn classify(
    index: usize,
    item: &Value,
    list_item_kind: Option<ItemKind>,
) -> Result<Option<ItemKind>> {
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
    let status = obj
        .get("status")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
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
    if obj.contains_key("provisioner") {
        return Inferred::Kind(ItemKind::StorageClass);
    }
    if spec.contains_key("drivers") {
        return Inferred::Kind(ItemKind::CsiNode);
    }
    if spec_has(&["accessModes", "volumeMode"]) {
        // Both claims and volumes have these; only a volume has a capacity or a
        // reclaim policy, only a claim a namespace.
        if spec_has(&["capacity", "persistentVolumeReclaimPolicy", "claimRef"]) {
            return Inferred::Kind(ItemKind::Pv);
        }
        if has_namespace {
            return Inferred::Kind(ItemKind::Pvc);
        }
        return Inferred::Unknown;
    }
    if spec.contains_key("jobTemplate") || spec_has(&["ports", "clusterIP", "externalName"]) {
        // CronJob, Service.
        return Inferred::Other;
    }
    if spec_has(&[
        "minAvailable",
        "maxUnavailable",
        "unhealthyPodEvictionPolicy",
    ]) || status_has(&["disruptionsAllowed", "expectedPods", "desiredHealthy"])
    {
        return Inferred::Kind(ItemKind::Pdb);
    }
    if !has_namespace
        && (status_has(&["nodeInfo", "allocatable", "daemonEndpoints"])
            || spec_has(&[
                "providerID",
                "podCIDR",
                "podCIDRs",
                "taints",
                "unschedulable",
            ]))
    {
        return Inferred::Kind(ItemKind::Node);
    }
    // A PDB with only a selector: a metav1.LabelSelector (unlike a Service's plain map).
    let only_selector = !spec.is_empty() && spec.keys().all(|k| k == "selector");
    let label_selector = spec
        .get("selector")
        .and_then(Value::as_object)
        .is_some_and(|s| {
            s.keys()
                .all(|k| k == "matchLabels" || k == "matchExpressions")
        });
    if has_namespace && only_selector && label_selector {
        return Inferred::Kind(ItemKind::Pdb);
    }
    Inferred::Unknown
}

/// `ns/name` or `name` of an item, when readable.
pub(super) fn item_name(item: &Value) -> Option<String> {
    let meta = item.get("metadata")?;
    let name = meta.get("name")?.as_str()?;
    match meta.get("namespace").and_then(Value::as_str) {
        Some(ns) if !ns.is_empty() => Some(format!("{ns}/{name}")),
        _ => Some(name.to_string()),
    }
}

pub(super) fn describe_value(value: &Value) -> String {
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
pub(super) fn describe_object(obj: &serde_json::Map<String, Value>) -> String {
    match obj.get("kind") {
        Some(Value::String(kind)) if !kind.is_empty() => {
            let article = if kind.starts_with(['A', 'E', 'I', 'O', 'U']) {
                "an"
            } else {
                "a"
            };
            match item_name(&Value::Object(obj.clone())) {
                Some(name) => format!("{article} {kind} {name:?}"),
                None => format!("{article} {kind}"),
            }
        }
        _ => "a JSON object without kind".to_string(),
    }
}
