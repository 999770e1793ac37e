//! Kubernetes Events (core/v1) about nodes, pods, NodePools and EC2NodeClasses, as
//! `kubectl describe` finds them: in the object's namespace ("default" for a
//! cluster-scoped one), naming the object with its uid.

use nodewright_engine::ports::{Cluster, ClusterEvent, EventType, ObjectKind};
use serde_json::json;

use nodewright_kube::testing::ControlPlane;
use serde_json::Value;

use super::{api_server, default_node_class, node, node_pool};

/// The events nodewright reported (the API server reports some of its own).
async fn nodewrights_events(cp: &ControlPlane) -> Vec<Value> {
    let mut events = cp.list("Event").await;
    events.retain(|e| e["reportingComponent"] == "nodewright");
    events
}

#[tokio::test]
async fn events_are_recorded_with_the_right_fields() {
    let t = api_server().await;
    let node_uid = t.cp.put(node("node-a")).await["metadata"]["uid"].clone();
    t.cluster.state().await.expect("state (learns uids)");

    t.cluster
        .record_event(&ClusterEvent {
            kind: "Node".into(),
            namespace: None,
            name: "node-a".into(),
            event_type: EventType::Normal,
            reason: "Registered".into(),
            message: "node-a joined the cluster".into(),
        })
        .await
        .expect("node event");
    t.cluster
        .record_event(&ClusterEvent {
            kind: "Pod".into(),
            namespace: Some("team-a".into()),
            name: "batch-1".into(),
            event_type: EventType::Warning,
            reason: "FailedScheduling".into(),
            message: "no NodePool fits".into(),
        })
        .await
        .expect("pod event");

    let events = nodewrights_events(&t.cp).await;
    assert_eq!(events.len(), 2, "{events:#?}");
    let node_event = events
        .iter()
        .find(|e| e["reason"] == "Registered")
        .expect("the node event");
    assert_eq!(node_event["metadata"]["namespace"], "default");
    assert!(
        node_event["metadata"]["name"]
            .as_str()
            .unwrap()
            .starts_with("node-a.")
    );
    assert_eq!(
        node_event["involvedObject"],
        json!({"apiVersion": "v1", "kind": "Node", "name": "node-a", "uid": node_uid})
    );
    assert_eq!(node_event["type"], "Normal");
    assert_eq!(node_event["message"], "node-a joined the cluster");
    assert_eq!(node_event["source"], json!({"component": "nodewright"}));
    assert_eq!(node_event["reportingComponent"], "nodewright");
    assert_eq!(node_event["count"], 1);
    assert!(node_event["firstTimestamp"].is_string());
    assert_eq!(node_event["firstTimestamp"], node_event["lastTimestamp"]);

    let pod_event = events
        .iter()
        .find(|e| e["reason"] == "FailedScheduling")
        .expect("the pod event");
    assert_eq!(pod_event["metadata"]["namespace"], "team-a");
    assert_eq!(pod_event["type"], "Warning");
    assert_eq!(
        pod_event["involvedObject"],
        json!({"apiVersion": "v1", "kind": "Pod", "name": "batch-1", "namespace": "team-a"})
    );
    // Created strictly: a field the server does not know would have been refused.
    let creates: Vec<String> = t
        .proxy
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST")
        .map(|r| r.query)
        .collect();
    assert_eq!(creates.len(), 2);
    assert!(
        creates.iter().all(|q| q.contains("fieldValidation=Strict")),
        "{creates:?}"
    );
}

#[tokio::test]
async fn events_about_node_pools_and_node_classes_name_the_object_in_default() {
    let t = api_server().await;
    let pool_uid = t.cp.put(node_pool("general-purpose")).await["metadata"]["uid"].clone();
    t.cluster.state().await.expect("state (learns uids)");
    // A class created after the listing: its uid is read when the event is recorded.
    let class_uid = t.cp.put(default_node_class()).await["metadata"]["uid"].clone();

    t.cluster
        .record_event(&ClusterEvent::about_object(
            ObjectKind::NodePool,
            "general-purpose",
            EventType::Warning,
            "NodeClassNotFound",
            "EC2NodeClass \"default\" does not exist",
        ))
        .await
        .expect("pool event");
    t.cluster
        .record_event(&ClusterEvent {
            // A namespace given for a cluster-scoped object is not used.
            namespace: Some("team-a".into()),
            ..ClusterEvent::about_object(
                ObjectKind::Ec2NodeClass,
                "default",
                EventType::Warning,
                "SubnetsNotFound",
                "subnetSelectorTerms select no subnet",
            )
        })
        .await
        .expect("class event");

    let events = nodewrights_events(&t.cp).await;
    assert_eq!(events.len(), 2, "{events:#?}");
    let pool_event = events
        .iter()
        .find(|e| e["reason"] == "NodeClassNotFound")
        .expect("the pool event");
    assert_eq!(pool_event["metadata"]["namespace"], "default");
    assert_eq!(pool_event["type"], "Warning");
    assert_eq!(
        pool_event["involvedObject"],
        json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "name": "general-purpose", "uid": pool_uid})
    );
    let class_event = events
        .iter()
        .find(|e| e["reason"] == "SubnetsNotFound")
        .expect("the class event");
    assert_eq!(class_event["metadata"]["namespace"], "default");
    assert_eq!(
        class_event["involvedObject"],
        json!({"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "name": "default", "uid": class_uid})
    );
}
