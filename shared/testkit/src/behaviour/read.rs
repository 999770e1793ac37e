//! Reading the fake API server's objects into core's typed domain (through
//! `k8s-openapi` and core's `snapshot` conversions, as the kube adapter reads them):
//! the behaviour decides on these, never on JSON. An object that does not decode is
//! left out and named in the behaviour's errors.

use serde::Deserialize;
use serde_json::Value;

use k8s_openapi::api::core::v1 as k8s;
use k8s_openapi::api::policy::v1 as policy;
use nodewright_core::api::{self, Document, NodePool};
use nodewright_core::cluster::{Node, Pod, PodDisruptionBudget};
use nodewright_core::snapshot::{node_from_k8s, pdb_from_k8s, pod_from_k8s};
use nodewright_kube::fake::Store;

/// A pod as the behaviour sees it: core's view of it (what scheduling and budgets
/// depend on), plus what the controllers need that core does not keep.
#[derive(Debug, Clone)]
pub(super) struct PodObject {
    /// `metadata.uid`: a pod recreated under an old name is still a new pod.
    pub uid: String,
    pub pod: Pod,
    /// `status.phase`, "" when unset.
    pub phase: String,
    /// The Ready condition is True.
    pub ready: bool,
    /// The spec as written: what the Deployment controller recreates the pod from.
    pub spec: k8s::PodSpec,
}

impl PodObject {
    pub fn decode(object: &Value) -> Result<PodObject, String> {
        let wire = k8s::Pod::deserialize(object).map_err(|e| format!("{}: {e}", named(object)))?;
        let pod = pod_from_k8s(&wire).map_err(|e| e.to_string())?;
        let status = wire.status.as_ref();
        Ok(PodObject {
            uid: wire.metadata.uid.clone().unwrap_or_default(),
            phase: status.and_then(|s| s.phase.clone()).unwrap_or_default(),
            ready: status
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True"),
            spec: wire.spec.unwrap_or_default(),
            pod,
        })
    }

    /// Counts towards a budget: bound, running, Ready, not being deleted (the
    /// disruption controller counts Ready pods; core's `is_healthy_for_budget`, bound
    /// and not going, is the part that needs no status).
    pub fn healthy(&self) -> bool {
        self.pod.is_healthy_for_budget() && self.phase == "Running" && self.ready
    }
}

/// Every pod in the store (namespace/name order).
pub(super) fn pods(store: &Store, errors: &mut Vec<String>) -> Vec<PodObject> {
    store
        .list("Pod", None)
        .into_iter()
        .filter_map(|object| noted(PodObject::decode(object), errors))
        .collect()
}

/// Every Node in the store (name order).
pub(super) fn nodes(store: &Store, errors: &mut Vec<String>) -> Vec<Node> {
    let decode = |object: &Value| {
        let wire = k8s::Node::deserialize(object).map_err(|e| format!("{}: {e}", named(object)))?;
        node_from_k8s(&wire).map_err(|e| e.to_string())
    };
    store
        .list("Node", None)
        .into_iter()
        .filter_map(|object| noted(decode(object), errors))
        .collect()
}

/// Every PodDisruptionBudget in the store.
pub(super) fn budgets(store: &Store, errors: &mut Vec<String>) -> Vec<PodDisruptionBudget> {
    let decode = |object: &Value| {
        let wire = policy::PodDisruptionBudget::deserialize(object)
            .map_err(|e| format!("{}: {e}", named(object)))?;
        pdb_from_k8s(&wire).map_err(|e| e.to_string())
    };
    store
        .list("PodDisruptionBudget", None)
        .into_iter()
        .filter_map(|object| noted(decode(object), errors))
        .collect()
}

/// The NodePool `name`, validated as the provisioner reads it: with the EC2NodeClasses
/// that are valid on their own (a pool whose class is invalid is invalid too). An
/// instance the provisioner launched from a pool had a valid one.
pub(super) fn node_pool(store: &Store, name: &str) -> Result<NodePool, String> {
    let document = |index: usize, value: &Value| Document {
        source: "the fake API server".to_string(),
        index,
        value: value.clone(),
    };
    let pool = store
        .get("NodePool", None, name)
        .ok_or_else(|| format!("NodePool {name:?}: not found"))?;
    let classes = store
        .list("EC2NodeClass", None)
        .into_iter()
        .enumerate()
        .map(|(i, class)| document(i + 1, class))
        .filter(|class| api::validate(std::slice::from_ref(class)).is_ok());
    let documents: Vec<Document> = std::iter::once(document(0, pool)).chain(classes).collect();
    let manifests = api::validate(&documents).map_err(|problems| {
        problems
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    })?;
    manifests
        .node_pools
        .into_iter()
        .next()
        .ok_or_else(|| format!("NodePool {name:?}: not a NodePool"))
}

/// The value, or `None` with its error noted (once: a round repeats every 100 ms).
pub(super) fn noted<T>(decoded: Result<T, String>, errors: &mut Vec<String>) -> Option<T> {
    match decoded {
        Ok(value) => Some(value),
        Err(e) => {
            let e = format!("left out of the behaviour: {e}");
            if !errors.contains(&e) {
                errors.push(e);
            }
            None
        }
    }
}

/// `Kind "namespace/name"` of an object that did not decode, for its error.
fn named(object: &Value) -> String {
    let field = |pointer: &str| object.pointer(pointer).and_then(Value::as_str);
    let name = match (field("/metadata/namespace"), field("/metadata/name")) {
        (Some(namespace), Some(name)) => format!("{namespace}/{name}"),
        (None, Some(name)) => name.to_string(),
        (_, None) => "(no name)".to_string(),
    };
    format!("{} {name:?}", field("/kind").unwrap_or("object"))
}
