//! `infra/rbac.yaml` as the API server's RBAC enforces it: every request the adapter
//! makes as the functions' user is allowed (from the API server's audit log: no 401,
//! no 403), and the writes it must never make are refused to that user.

use std::collections::BTreeSet;

use nodewright_core::nodeclaim::ClaimState;
use nodewright_engine::ports::{
    Cluster, ClusterEvent, Condition, EventType, NodePatch, ObjectKind, StatusUpdate,
};
use nodewright_kube::testing::objects;
use serde_json::{Value, json};

use super::mirror::initialized_claim;
use super::{
    T0, api_server, default_node_class, node, node_pool, not_ready_class, pod, registration_patch,
};

/// (verb, resource, subresource) of an audit event.
fn request_of(event: &Value) -> (String, String, String) {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    (
        text(&event["verb"]),
        text(&event["objectRef"]["resource"]),
        text(&event["objectRef"]["subresource"]),
    )
}

#[tokio::test]
async fn every_request_the_adapter_makes_is_allowed_by_infra_rbac() {
    let t = api_server().await;
    t.cp.put(default_node_class()).await;
    t.cp.put(node_pool("general-purpose")).await;
    t.cp.put(
        json!({"apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
        "metadata": {"name": "savings"},
        "spec": {"requirements": [], "priceAdjustment": "-10%"}}),
    )
    .await;
    // A CapacityBuffer of each source: the PodTemplate is watched, the Deployment read
    // by name.
    t.cp.put(json!({"apiVersion": "v1", "kind": "PodTemplate",
        "metadata": {"name": "chunk", "namespace": "default"},
        "template": {"spec": {"containers": [{"name": "c", "image": "pause"}]}}}))
        .await;
    t.cp.put(
        json!({"apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
        "metadata": {"name": "spare", "namespace": "default"},
        "spec": {"podTemplateRef": {"name": "chunk"}, "replicas": 1}}),
    )
    .await;
    t.cp.put(
        json!({"apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
        "metadata": {"name": "surge", "namespace": "default"},
        "spec": {"scalableRef": {"kind": "Deployment", "name": "web"}, "percentage": 10}}),
    )
    .await;
    t.cp.put(node("node-a")).await;
    t.cp.put(node("node-b")).await;
    let mut running = pod("default", "web-0", "100m");
    running["spec"]["nodeName"] = json!("node-a");
    t.cp.put(running).await;
    let mut other = pod("default", "web-1", "100m");
    other["spec"]["nodeName"] = json!("node-a");
    t.cp.put(other).await;

    // Reads: every kind a tick reads (lists, then watches), a drain's fresh list, the
    // version.
    t.cluster.state().await.expect("state");
    // With default topology spread: Services and controllers, listed and watched.
    t.another_process()
        .with_default_spread(true)
        .state()
        .await
        .expect("state with default spread");
    t.cluster
        .pods_on_node("node-a")
        .await
        .expect("pods on node");
    t.cluster.kubernetes_version().await.expect("version");
    // Nodes: labels alone, then taints (read, then patch), then deletion.
    let labels = NodePatch {
        set_labels: [("team".to_string(), "web".to_string())].into(),
        ..NodePatch::default()
    };
    t.cluster
        .patch_node("node-a", &labels)
        .await
        .expect("labels");
    t.cluster
        .patch_node("node-a", &registration_patch())
        .await
        .expect("taints");
    t.cluster.delete_node("node-b").await.expect("node deleted");
    // Pods: an eviction and a deletion.
    t.cluster
        .evict_pod("default", "web-0")
        .await
        .expect("evicted");
    t.cluster
        .delete_pod("default", "web-1", 30)
        .await
        .expect("deleted");
    // Events, about a node and about a NodePool not yet seen (its uid read).
    t.cluster
        .record_event(&ClusterEvent {
            kind: "Node".into(),
            namespace: None,
            name: "node-a".into(),
            event_type: EventType::Normal,
            reason: "Registered".into(),
            message: "joined".into(),
        })
        .await
        .expect("node event");
    t.cp.put(node_pool("later")).await;
    t.cluster
        .record_event(&ClusterEvent::about_object(
            ObjectKind::NodePool,
            "later",
            EventType::Normal,
            "Seen",
            "seen",
        ))
        .await
        .expect("pool event");
    // Status of each Karpenter kind (with a field the CRD refuses: the dry runs).
    let mut pool_status = StatusUpdate {
        conditions: vec![Condition::met("Ready")],
        fields: Default::default(),
    };
    pool_status.fields.insert("nodes".into(), json!(1));
    pool_status.fields.insert("notAField".into(), json!(1));
    t.cluster
        .update_status(ObjectKind::NodePool, "general-purpose", &pool_status, T0)
        .await
        .expect("pool status");
    t.cluster
        .update_status(ObjectKind::Ec2NodeClass, "default", &not_ready_class(), T0)
        .await
        .expect("class status");
    t.cluster
        .update_status(ObjectKind::NodeOverlay, "savings", &not_ready_class(), T0)
        .await
        .expect("overlay status");
    t.cluster
        .update_status(
            ObjectKind::CapacityBuffer,
            "default/spare",
            &StatusUpdate {
                conditions: vec![Condition::met("ReadyForProvisioning")],
                fields: Default::default(),
            },
            T0,
        )
        .await
        .expect("buffer status");
    // NodeClaim mirrors: created with their status, relabelled, replaced (a changed
    // spec is a delete and a create), deleted.
    let claim = initialized_claim("general-purpose-abcde");
    t.cluster
        .mirror_claims(std::slice::from_ref(&claim))
        .await
        .expect("created");
    let mut relabelled = claim.clone();
    relabelled.labels.insert("team".into(), "web".into());
    t.cluster
        .mirror_claims(std::slice::from_ref(&relabelled))
        .await
        .expect("patched");
    let mut respecified = relabelled.clone();
    respecified.zones.push("us-east-1b".into());
    t.cluster
        .mirror_claims(std::slice::from_ref(&respecified))
        .await
        .expect("replaced");
    let mut gone = respecified.clone();
    gone.state = ClaimState::Terminated;
    t.cluster.mirror_claims(&[gone]).await.expect("deleted");

    let events = t.cp.audit_events();
    let refused: Vec<&Value> = events
        .iter()
        .filter(|e| matches!(e["responseStatus"]["code"].as_u64(), Some(401 | 403)))
        .collect();
    assert!(refused.is_empty(), "refused: {refused:#?}");
    let made: BTreeSet<(String, String, String)> = events.iter().map(request_of).collect();
    let wanted = [
        ("list", "nodepools", ""),
        ("watch", "nodepools", ""),
        ("list", "ec2nodeclasses", ""),
        ("list", "nodeoverlays", ""),
        ("list", "capacitybuffers", ""),
        ("list", "podtemplates", ""),
        ("get", "deployments", ""),
        ("get", "capacitybuffers", ""),
        ("patch", "capacitybuffers", "status"),
        ("list", "nodes", ""),
        ("watch", "nodes", ""),
        ("list", "pods", ""),
        ("watch", "pods", ""),
        ("list", "daemonsets", ""),
        ("list", "poddisruptionbudgets", ""),
        ("list", "persistentvolumeclaims", ""),
        ("list", "persistentvolumes", ""),
        ("list", "storageclasses", ""),
        ("list", "csinodes", ""),
        ("list", "nodeclaims", ""),
        ("watch", "nodeclaims", ""),
        ("get", "nodes", ""),
        ("patch", "nodes", ""),
        ("delete", "nodes", ""),
        ("create", "pods", "eviction"),
        ("delete", "pods", ""),
        ("create", "events", ""),
        ("get", "nodepools", ""),
        ("get", "ec2nodeclasses", ""),
        ("get", "nodeoverlays", ""),
        ("patch", "nodepools", "status"),
        ("patch", "ec2nodeclasses", "status"),
        ("patch", "nodeoverlays", "status"),
        ("create", "nodeclaims", ""),
        ("patch", "nodeclaims", ""),
        ("patch", "nodeclaims", "status"),
        ("delete", "nodeclaims", ""),
    ];
    for (verb, resource, subresource) in wanted {
        assert!(
            made.contains(&(verb.into(), resource.into(), subresource.into())),
            "the test never made {verb} {resource}/{subresource}: {made:#?}"
        );
    }
    assert!(
        events.iter().any(|e| e["requestURI"]
            .as_str()
            .is_some_and(|u| u.starts_with("/version"))),
        "the version was read"
    );
}

#[tokio::test]
async fn what_the_functions_must_never_do_is_forbidden_to_them() {
    let t = api_server().await;
    t.cp.put(default_node_class()).await;
    t.cp.put(node_pool("general-purpose")).await;
    t.cp.put(node("node-a")).await;
    t.cp.put(json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "token", "namespace": "team-a"}, "stringData": {"k": "v"}}))
        .await;
    let claim = initialized_claim("general-purpose-abcde");
    t.cluster
        .mirror_claims(std::slice::from_ref(&claim))
        .await
        .expect("a mirror");
    let mirror = t.cp.get("NodeClaim", None, &claim.name).await.unwrap();
    let stored_node = t.cp.get("Node", None, "node-a").await.unwrap();

    let nodewright = t.cp.cluster();
    let client = nodewright.client();
    let json = "application/json";
    let merge = "application/merge-patch+json";
    let attempts: Vec<(&str, http::Method, String, &str, Option<Value>)> = vec![
        (
            "read another namespace's secret",
            http::Method::GET,
            "/api/v1/namespaces/team-a/secrets/token".into(),
            json,
            None,
        ),
        (
            "list secrets",
            http::Method::GET,
            "/api/v1/secrets".into(),
            json,
            None,
        ),
        (
            "delete a NodePool",
            http::Method::DELETE,
            "/apis/karpenter.sh/v1/nodepools/general-purpose".into(),
            json,
            None,
        ),
        (
            "change a NodePool's spec",
            http::Method::PATCH,
            "/apis/karpenter.sh/v1/nodepools/general-purpose".into(),
            merge,
            Some(json!({"spec": {"weight": 1}})),
        ),
        (
            "change an EC2NodeClass's spec",
            http::Method::PATCH,
            "/apis/karpenter.k8s.aws/v1/ec2nodeclasses/default".into(),
            merge,
            Some(json!({"spec": {"role": "admin"}})),
        ),
        (
            "patch a Deployment",
            http::Method::PATCH,
            "/apis/apps/v1/namespaces/default/deployments/web".into(),
            merge,
            Some(json!({"spec": {"replicas": 0}})),
        ),
        (
            "update a NodeClaim with PUT",
            http::Method::PUT,
            format!("/apis/karpenter.sh/v1/nodeclaims/{}", claim.name),
            json,
            Some(mirror),
        ),
        (
            "update a Node with PUT",
            http::Method::PUT,
            "/api/v1/nodes/node-a".into(),
            json,
            Some(stored_node),
        ),
        (
            "create a pod",
            http::Method::POST,
            "/api/v1/namespaces/default/pods".into(),
            json,
            Some(pod("default", "intruder", "1")),
        ),
        (
            "patch an event",
            http::Method::PATCH,
            "/api/v1/namespaces/default/events/any".into(),
            merge,
            Some(json!({"count": 2})),
        ),
        (
            "bind a ClusterRole",
            http::Method::POST,
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings".into(),
            json,
            Some(
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": "escalate"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "nodewright"}]}),
            ),
        ),
    ];
    for (what, method, path, content_type, body) in attempts {
        let answer =
            objects::send(client, method.clone(), &path, content_type, body.as_ref()).await;
        match answer {
            Err(refused) => assert_eq!(refused.code, 403, "{what}: {refused}"),
            Ok(answer) => panic!("{what} ({method} {path}) was allowed: {answer:#}"),
        }
    }
    assert!(
        t.cp.get("NodePool", None, "general-purpose")
            .await
            .is_some(),
        "the pool is still there"
    );
}
