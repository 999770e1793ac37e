//! A CapacityBuffer (`autoscaling.x-k8s.io/v1beta1`) through the provisioner's real
//! handler: DynamoDB and EC2 are moto's (tests/moto.sh), Kubernetes is a real control
//! plane with Karpenter v1.15.1's CRDs, whose nodes join as their instances boot. With
//! no pod in the cluster, the buffer's two chunks get a node; its status says they
//! required new capacity, then, once the node is up, that they fit existing capacity;
//! nothing more is launched, and no event names a pod that does not exist.

use serde_json::{Value, json};

use nodewright_core::nodeclaim::ClaimState;
use nodewright_testkit::{ClusterBehaviour, EmulatedCluster, Timings};

use super::{SETTLE, claims, handler, instances, invoke, until_initialized, world};

fn chunk_template() -> Value {
    json!({
        "apiVersion": "v1", "kind": "PodTemplate",
        "metadata": {"name": "chunk", "namespace": "default"},
        "template": {"metadata": {"labels": {"app": "spare"}},
            "spec": {"containers": [{"name": "c", "image": "pause",
                "resources": {"requests": {"cpu": "1500m", "memory": "1Gi"}}}]}}
    })
}

fn spare_buffer() -> Value {
    json!({
        "apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
        "metadata": {"name": "spare", "namespace": "default"},
        "spec": {"podTemplateRef": {"name": "chunk"}, "replicas": 2}
    })
}

async fn buffer_status(world: &EmulatedCluster) -> Value {
    world
        .api
        .get("CapacityBuffer", Some("default"), "spare")
        .await
        .expect("the buffer")["status"]
        .clone()
}

fn condition(status: &Value, type_: &str) -> (String, String, String) {
    let c = status["conditions"]
        .as_array()
        .and_then(|all| all.iter().find(|c| c["type"] == type_))
        .unwrap_or_else(|| panic!("no {type_} condition: {status}"));
    let text = |f: &str| c[f].as_str().unwrap_or_default().to_string();
    (text("status"), text("reason"), text("message"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn a_buffer_gets_a_node_with_no_pod_pending_and_its_status_follows() {
    let world = world(0).await;
    let _cluster = ClusterBehaviour::start(&world, Timings::default()).await;
    world.api.put(chunk_template()).await;
    world.api.put(spare_buffer()).await;
    let h = handler(&world, "buffer").await;

    let first = invoke(&h).await;
    // Two chunks of 1.5 CPU: one m5.xlarge (3.92 allocatable).
    assert_eq!(
        first["launched"].as_array().map(Vec::len),
        Some(1),
        "{first}"
    );
    let status = buffer_status(&world).await;
    assert_eq!(status["replicas"], 2, "{status}");
    assert_eq!(status["podTemplateRef"]["name"], "chunk", "{status}");
    assert_eq!(
        condition(&status, "ReadyForProvisioning"),
        (
            "True".into(),
            "Resolved".into(),
            "Pod template resolved successfully".into()
        )
    );
    assert_eq!(
        condition(&status, "Provisioning"),
        (
            "False".into(),
            "RequiresNewCapacity".into(),
            "2/2 virtual pods required new capacity, 0 failed".into()
        )
    );

    // The node comes up: the chunks fit it, and nothing more is launched.
    until_initialized(&world, &h).await;
    let fits = nodewright_testkit::wait_until(SETTLE, || async {
        invoke(&h).await;
        condition(&buffer_status(&world).await, "Provisioning").1 == "FitsExistingCapacity"
    })
    .await;
    let status = buffer_status(&world).await;
    assert!(fits, "{status}");
    assert_eq!(
        condition(&status, "Provisioning"),
        (
            "True".into(),
            "FitsExistingCapacity".into(),
            "All 2 virtual pods fit on existing capacity".into()
        )
    );
    let stored = claims(&world).await;
    assert_eq!(stored.len(), 1, "{stored:#?}");
    assert_eq!(stored[0].state, ClaimState::Initialized);
    assert_eq!(instances(&world).await.len(), 1);
    // No event is about a pod that does not exist.
    for event in world.api.list("Event").await {
        let name = event["involvedObject"]["name"].as_str().unwrap_or_default();
        assert!(!name.starts_with("capacity-buffer-"), "{event}");
    }
}
