//! CapacityBuffers (`autoscaling.x-k8s.io/v1beta1`) through KubeCluster, as the
//! functions' user: listed and watched with the PodTemplates they name, the Deployment
//! a `scalableRef` names read by name; a cluster without the CRD has none; their status
//! (conditions, replicas) written on `/status` of the namespaced object.

use std::time::Duration;

use nodewright_core::api::buffer::BufferSource;
use nodewright_engine::ports::{Cluster, Condition, ConditionStatus, ObjectKind, StatusUpdate};
use serde_json::{Value, json};

use super::{T0, api_server, condition_of, eventually};

fn template() -> Value {
    json!({
        "apiVersion": "v1", "kind": "PodTemplate",
        "metadata": {"name": "chunk", "namespace": "default"},
        "template": {"metadata": {"labels": {"app": "spare"}},
            "spec": {"containers": [{"name": "c", "image": "pause",
                "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}
    })
}

fn buffer(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    })
}

fn deployment() -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx",
                    "resources": {"requests": {"cpu": "250m"}}}]}}}
    })
}

#[tokio::test]
async fn buffers_are_read_with_the_template_and_the_workload_they_name() {
    let t = api_server().await;
    t.cp.put(template()).await;
    t.cp.put(deployment()).await;
    t.cp.put(buffer(
        "spare",
        json!({"podTemplateRef": {"name": "chunk"}, "replicas": 2}),
    ))
    .await;
    t.cp.put(buffer(
        "surge",
        json!({"scalableRef": {"apiGroup": "apps", "kind": "Deployment", "name": "web"}, "percentage": 75}),
    ))
    .await;
    let state = t.cluster.state().await.expect("the state");
    assert!(state.unreadable.is_empty(), "{:?}", state.unreadable);
    let mut keys: Vec<String> = state.capacity_buffers.iter().map(|b| b.key()).collect();
    keys.sort();
    assert_eq!(keys, ["default/spare", "default/surge"]);
    let spare = state
        .capacity_buffers
        .iter()
        .find(|b| b.name == "spare")
        .expect("spare");
    assert_eq!(
        spare.source,
        Some(BufferSource::PodTemplate {
            name: "chunk".into()
        })
    );
    assert_eq!(state.pod_templates.len(), 1);
    assert_eq!(
        state.pod_templates[0].template.requests.get_milli("cpu"),
        1000
    );
    assert_eq!(state.workloads.len(), 1, "{:?}", state.workloads);
    assert_eq!(state.workloads[0].replicas, Some(4));
    let resolved = nodewright_core::capacity_buffer::resolve_buffers(
        &state.capacity_buffers,
        &state.pod_templates,
        &state.workloads,
    );
    let mut replicas: Vec<(String, Option<i32>)> = resolved
        .iter()
        .map(|r| {
            (
                r.buffer.clone(),
                r.outcome.as_ref().ok().map(|r| r.replicas),
            )
        })
        .collect();
    replicas.sort();
    assert_eq!(
        replicas,
        [
            ("default/spare".to_string(), Some(2)),
            ("default/surge".to_string(), Some(3))
        ],
        "75% of the Deployment's 4 replicas, rounded up"
    );

    // A change arrives through the watch.
    t.cp.remove("CapacityBuffer", Some("default"), "spare")
        .await;
    eventually(
        "the deletion arrives by the watch",
        Duration::from_secs(30),
        || async {
            let state = t.cluster.state().await.expect("the state");
            state.capacity_buffers.len() == 1
        },
    )
    .await;
}

#[tokio::test]
async fn a_cluster_without_the_capacity_buffer_crd_has_no_buffers_and_no_error() {
    let t = api_server().await;
    t.cp.uninstall("capacitybuffers.autoscaling.x-k8s.io").await;
    let state = t.cluster.state().await.expect("no CRD is not an error");
    assert!(state.capacity_buffers.is_empty());
    assert!(state.unreadable.is_empty(), "{:?}", state.unreadable);
    assert!(state.invalid.is_empty(), "{:?}", state.invalid);
}

#[tokio::test]
async fn a_buffer_status_write_sets_its_conditions_and_replicas_on_the_namespaced_object() {
    let t = api_server().await;
    t.cp.put(template()).await;
    t.cp.put(buffer(
        "spare",
        json!({"podTemplateRef": {"name": "chunk"}, "replicas": 2}),
    ))
    .await;
    let mut fields = serde_json::Map::new();
    fields.insert("replicas".into(), json!(2));
    fields.insert("podTemplateRef".into(), json!({"name": "chunk"}));
    fields.insert("podTemplateGeneration".into(), json!(1));
    fields.insert(
        "provisioningStrategy".into(),
        json!("buffer.x-k8s.io/active-capacity"),
    );
    let update = StatusUpdate {
        conditions: vec![
            Condition {
                type_: "ReadyForProvisioning".into(),
                status: ConditionStatus::True,
                reason: "Resolved".into(),
                message: "Pod template resolved successfully".into(),
            },
            Condition::failed(
                "Provisioning",
                "RequiresNewCapacity",
                "2/2 virtual pods required new capacity, 0 failed",
            ),
        ],
        fields,
    };
    let changed = t
        .cluster
        .update_status(ObjectKind::CapacityBuffer, "default/spare", &update, T0)
        .await
        .expect("status written");
    assert!(changed);
    let again = t
        .cluster
        .update_status(
            ObjectKind::CapacityBuffer,
            "default/spare",
            &update,
            T0 + 60,
        )
        .await
        .expect("status read");
    assert!(!again, "an unchanged status is not written");
    let object =
        t.cp.get("CapacityBuffer", Some("default"), "spare")
            .await
            .expect("the buffer");
    assert_eq!(object["status"]["replicas"], 2);
    assert_eq!(object["status"]["podTemplateRef"]["name"], "chunk");
    let provisioning = condition_of(&object, "Provisioning");
    assert_eq!(provisioning["status"], "False");
    assert_eq!(provisioning["reason"], "RequiresNewCapacity");
    assert_eq!(
        condition_of(&object, "ReadyForProvisioning")["reason"],
        "Resolved"
    );
}
