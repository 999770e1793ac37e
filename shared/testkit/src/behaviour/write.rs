//! Writing the behaviour's decisions to the fake API server as the components it plays
//! write them: the wire's JSON is built here and only here.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use k8s_openapi::api::core::v1 as k8s;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use nodewright_core::api::model::Taint;
use nodewright_core::cluster::Pod;
use nodewright_core::resources::Resources;
use nodewright_kube::fake::Store;

use super::TAINT_NOT_READY;

/// A Node as its kubelet registers it.
pub(super) struct Registration<'a> {
    pub name: String,
    pub provider_id: String,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    /// Of its instance type, from the catalog (`None`: a type the catalog lacks).
    pub allocatable: Option<&'a Resources>,
    pub capacity: Option<&'a Resources>,
}

/// The kubelet's registration: the Node, Ready=False.
pub(super) fn register_node(store: &mut Store, node: Registration<'_>) {
    let resources = |r: Option<&Resources>| -> Value {
        r.map(|r| {
            r.iter()
                .map(|(k, milli)| (k.to_string(), Value::String(quantity(k, milli))))
                .collect::<serde_json::Map<_, _>>()
                .into()
        })
        .unwrap_or_else(|| json!({}))
    };
    store.put(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": node.name, "labels": node.labels},
        "spec": {
            "providerID": node.provider_id,
            "taints": node.taints.iter().map(taint).collect::<Vec<_>>(),
        },
        "status": {
            "allocatable": resources(node.allocatable),
            "capacity": resources(node.capacity),
            "conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady",
                            "message": "container runtime network not ready"}],
        }
    }));
}

fn taint(t: &Taint) -> Value {
    let mut wire = json!({"key": t.key, "effect": t.effect.as_str()});
    if let Some(value) = &t.value {
        wire["value"] = json!(value);
    }
    wire
}

/// A quantity as the kubelet writes it, exactly: cpu in millicores, bytes in Mi when
/// whole, counts as integers.
pub(super) fn quantity(name: &str, milli: i64) -> String {
    match name {
        "cpu" => format!("{milli}m"),
        "memory" | "ephemeral-storage" => {
            let bytes = milli / 1000;
            if bytes % (1 << 20) == 0 {
                format!("{}Mi", bytes >> 20)
            } else {
                bytes.to_string()
            }
        }
        _ => (milli / 1000).to_string(),
    }
}

/// The Ready condition turns True and the not-ready taint goes. A Node deleted in the
/// meantime stays deleted.
pub(super) fn set_ready(store: &mut Store, node: &str) {
    store.modify("Node", None, node, |n| {
        n["status"]["conditions"] =
            json!([{"type": "Ready", "status": "True", "reason": "KubeletReady"}]);
        if let Some(taints) = n.pointer_mut("/spec/taints").and_then(Value::as_array_mut) {
            taints.retain(|t| t["key"] != TAINT_NOT_READY);
        }
    });
}

/// The node lifecycle controller on a node whose kubelet stopped posting: Ready=Unknown
/// and `unreachable`.
pub(super) fn set_unreachable(store: &mut Store, node: &str, unreachable: &Taint) {
    store.modify("Node", None, node, |n| {
        n["status"]["conditions"] = json!([{
            "type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
            "message": "Kubelet stopped posting node status."
        }]);
        if !n["spec"]["taints"].is_array() {
            n["spec"]["taints"] = json!([]);
        }
        let taints = n["spec"]["taints"].as_array_mut().expect("an array");
        let effect = unreachable.effect.as_str();
        if !taints
            .iter()
            .any(|t| t["key"] == unreachable.key.as_str() && t["effect"] == effect)
        {
            taints.push(taint(unreachable));
        }
    });
}

/// kube-scheduler's binding, and the pod running at once.
pub(super) fn bind(store: &mut Store, pod: &Pod, node: &str) {
    store.modify("Pod", Some(&pod.namespace), &pod.name, |p| {
        p["spec"]["nodeName"] = json!(node);
        p["status"] = json!({
            "phase": "Running",
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "True"}
            ]
        });
    });
}

/// What kube-scheduler writes on a pod it found no node for: PodScheduled=False, reason
/// Unschedulable.
pub(super) fn mark_unschedulable(store: &mut Store, pod: &Pod) {
    store.modify("Pod", Some(&pod.namespace), &pod.name, |p| {
        let condition = json!({
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/0 nodes are available: no node fits the pod."
        });
        if !p["status"].is_object() {
            p["status"] = json!({"phase": "Pending"});
        }
        match p["status"]["conditions"].as_array_mut() {
            Some(conditions) => {
                conditions.retain(|c| c["type"] != "PodScheduled");
                conditions.push(condition);
            }
            None => p["status"]["conditions"] = json!([condition]),
        }
    });
}

/// A pod the Deployment controller creates: pending, unbound. Returns it as stored.
pub(super) fn create_pod(
    store: &mut Store,
    name: &str,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    mut spec: k8s::PodSpec,
) -> Value {
    spec.node_name = None;
    let pod = k8s::Pod {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            labels: (!labels.is_empty()).then(|| labels.clone()),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: Some(k8s::PodStatus {
            phase: Some("Pending".to_string()),
            ..k8s::PodStatus::default()
        }),
    };
    store.put(serde_json::to_value(&pod).expect("a Pod encodes"))
}

/// Deletes a pod; returns it as it was stored (`None`: already gone).
pub(super) fn remove_pod(store: &mut Store, pod: &Pod) -> Option<Value> {
    store.remove("Pod", Some(&pod.namespace), &pod.name)
}
