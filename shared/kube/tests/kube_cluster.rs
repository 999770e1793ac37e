//! KubeCluster against the fake API server (real HTTP, real kube-rs client). The
//! read-only test at the end reads a real cluster: it is `#[ignore]`d, tests/run.sh runs
//! it when KUBECONFIG is set (and says it skipped it otherwise), and run by hand
//! without KUBECONFIG it fails rather than pass having read nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use nodewright_core::api::model::{Taint, TaintEffect};
use nodewright_engine::ports::{
    BoxError, Cluster, ClusterEvent, Condition, ErrorKind, EventType, Invalidity, NodePatch,
    ObjectKind, StatusUpdate,
};
use nodewright_kube::fake::{FakeApiServer, Version};
use nodewright_kube::{
    ApiRate, KubeCluster, STATUS_ATTEMPTS, StaticToken, TAINT_ATTEMPTS, TokenProvider,
};
use serde_json::{Value, json};

const EXAMPLES: [(&str, &str); 5] = [
    (
        "100-cpu-limit.yaml",
        include_str!("../../core/tests/fixtures/nodepools/100-cpu-limit.yaml"),
    ),
    (
        "general-purpose.yaml",
        include_str!("../../core/tests/fixtures/nodepools/general-purpose.yaml"),
    ),
    (
        "min-values-family.yaml",
        include_str!("../../core/tests/fixtures/nodepools/min-values-family.yaml"),
    ),
    (
        "multiple-arch.yaml",
        include_str!("../../core/tests/fixtures/nodepools/multiple-arch.yaml"),
    ),
    (
        "spot.yaml",
        include_str!("../../core/tests/fixtures/nodepools/spot.yaml"),
    ),
];

const UNREGISTERED: &str = "karpenter.sh/unregistered";

// ----- fixtures ------------------------------------------------------------------------

async fn fake() -> (FakeApiServer, KubeCluster) {
    let server = FakeApiServer::start()
        .await
        .expect("the fake API server starts");
    let cluster = KubeCluster::from_endpoint(
        &server.url(),
        None,
        Arc::new(StaticToken("test-token".into())),
        ApiRate::default(),
    )
    .expect("a client for the fake");
    (server, cluster)
}

/// Every document of a Karpenter example manifest, as JSON.
fn example_objects(text: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|doc| serde::Deserialize::deserialize(doc).expect("the example is YAML"))
        .filter(|v: &Value| !v.is_null())
        .collect()
}

fn default_node_class() -> Value {
    example_objects(EXAMPLES[1].1)
        .into_iter()
        .find(|o| o["kind"] == "EC2NodeClass")
        .expect("general-purpose.yaml has an EC2NodeClass")
}

fn node_pool(name: &str) -> Value {
    let mut pool = example_objects(EXAMPLES[1].1)
        .into_iter()
        .find(|o| o["kind"] == "NodePool")
        .expect("general-purpose.yaml has a NodePool");
    pool["metadata"]["name"] = name.into();
    pool
}

fn node(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "karpenter.sh/nodepool": "general-purpose"},
        },
        "spec": {
            "providerID": format!("aws:///us-east-1a/i-{name}"),
            "taints": [
                {"key": UNREGISTERED, "effect": "NoExecute"},
                {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
            ],
        },
        "status": {
            "allocatable": {"cpu": "3920m", "memory": "15Gi", "pods": "58"},
            "capacity": {"cpu": "4", "memory": "16Gi", "pods": "58"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    })
}

fn pod(namespace: &str, name: &str, cpu: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {"containers": [{"name": "app", "image": "nginx", "resources": {"requests": {"cpu": cpu, "memory": "128Mi"}}}]},
        "status": {"phase": "Pending"},
    })
}

fn daemonset(namespace: &str, name: &str) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "agent", "image": "agent", "resources": {"requests": {"cpu": "100m"}}}]},
            },
        },
    })
}

fn pdb(namespace: &str, name: &str) -> Value {
    json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "minAvailable": 1},
    })
}

fn taint(key: &str, value: Option<&str>, effect: TaintEffect) -> Taint {
    Taint {
        key: key.into(),
        value: value.map(Into::into),
        effect,
    }
}

fn taint_keys(node: &Value) -> Vec<String> {
    node["spec"]["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| t["key"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn registration_patch() -> NodePatch {
    NodePatch {
        set_labels: [("karpenter.sh/registered".to_string(), "true".to_string())].into(),
        set_annotations: [(
            "karpenter.sh/nodepool-hash".to_string(),
            "7271df6171be70a1".to_string(),
        )]
        .into(),
        add_taints: vec![taint("dedicated", Some("gpu"), TaintEffect::NoSchedule)],
        remove_taints: vec![UNREGISTERED.into()],
        ..NodePatch::default()
    }
}

// ----- state() -------------------------------------------------------------------------

#[tokio::test]
async fn state_reads_the_karpenter_example_node_pools_and_node_classes() {
    let (server, cluster) = fake().await;
    for (_, text) in EXAMPLES {
        for object in example_objects(text) {
            server.put(object);
        }
    }

    let state = cluster.state().await.expect("state");

    assert_eq!(state.invalid, Vec::<String>::new());
    let mut pools: Vec<&str> = state.node_pools.iter().map(|p| p.name.as_str()).collect();
    pools.sort();
    // min-values-family.yaml and spot.yaml both name their NodePool "spot": one object.
    assert_eq!(
        pools,
        ["amd64", "arm64", "general-purpose", "limitcpu100", "spot"]
    );
    let classes: Vec<&str> = state.node_classes.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(classes, ["default"]);
}

#[tokio::test]
async fn state_reads_nodes_pods_daemonsets_and_pdbs_page_by_page() {
    let (server, cluster) = fake().await;
    let cluster = cluster.with_page_size(2);
    for name in ["node-a", "node-b", "node-c"] {
        server.put(node(name));
    }
    server.put(pod("default", "web-1", "500m"));
    server.put(pod("default", "web-2", "500m"));
    server.put(pod("team-a", "batch-1", "2"));
    server.put(pod("team-b", "batch-2", "1"));
    server.put(pod("team-b", "batch-3", "1"));
    server.put(daemonset("kube-system", "aws-node"));
    server.put(pdb("default", "web"));

    let state = cluster.state().await.expect("state");

    assert_eq!(state.invalid, Vec::<String>::new());
    let nodes: Vec<&str> = state.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(nodes, ["node-a", "node-b", "node-c"]);
    assert!(state.nodes[0].ready);
    assert_eq!(
        state.nodes[0].provider_id.as_deref(),
        Some("aws:///us-east-1a/i-node-a")
    );
    assert_eq!(state.nodes[0].taints.len(), 2);
    let pods: Vec<String> = state
        .pods
        .iter()
        .map(|p| format!("{}/{}", p.namespace, p.name))
        .collect();
    assert_eq!(
        pods,
        [
            "default/web-1",
            "default/web-2",
            "team-a/batch-1",
            "team-b/batch-2",
            "team-b/batch-3"
        ]
    );
    assert_eq!(state.daemonsets.len(), 1);
    assert_eq!(state.daemonsets[0].name, "aws-node");
    assert_eq!(state.pdbs.len(), 1);
    assert_eq!(state.pdbs[0].namespace, "default");

    let pod_pages: Vec<String> = server
        .requests()
        .into_iter()
        .filter(|r| r.path == "/api/v1/pods" && !r.watch)
        .map(|r| r.query)
        .collect();
    assert_eq!(pod_pages.len(), 3, "5 pods in pages of 2: {pod_pages:?}");
    assert!(pod_pages.iter().all(|q| q.contains("limit=2")));
    assert!(pod_pages[1..].iter().all(|q| q.contains("continue=")));
}

#[tokio::test]
async fn an_invalid_node_pool_is_reported_and_the_valid_ones_are_still_returned() {
    let (server, cluster) = fake().await;
    server.put(default_node_class());
    server.put(node_pool("good"));
    let mut broken = node_pool("broken");
    broken["spec"]["template"]["spec"]["requirements"][0]["operator"] = "GreaterThan".into();
    server.put(broken);
    let mut orphan = node_pool("orphan");
    orphan["spec"]["template"]["spec"]["nodeClassRef"]["name"] = "missing".into();
    server.put(orphan);

    let state = cluster.state().await.expect("state");

    let pools: Vec<&str> = state.node_pools.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(pools, ["good"]);
    assert_eq!(state.node_classes.len(), 1);
    assert_eq!(state.invalid.len(), 2, "{:#?}", state.invalid);
    assert!(
        state.invalid[0]
            .starts_with("NodePool \"broken\": spec.template.spec.requirements[0].operator:"),
        "{}",
        state.invalid[0]
    );
    assert!(
        state.invalid[1].starts_with("NodePool \"orphan\":"),
        "{}",
        state.invalid[1]
    );
}

#[tokio::test]
async fn an_invalid_node_class_is_reported_and_its_node_pools_are_not_returned() {
    let (server, cluster) = fake().await;
    let mut class = default_node_class();
    class["spec"]["amiSelectorTerms"] = json!([]);
    server.put(class);
    server.put(node_pool("uses-broken-class"));

    let state = cluster.state().await.expect("state");

    assert!(state.node_pools.is_empty());
    assert!(state.node_classes.is_empty());
    assert!(
        state
            .invalid
            .iter()
            .any(|p| p.starts_with("EC2NodeClass \"default\":")),
        "{:#?}",
        state.invalid
    );
    assert!(
        state
            .invalid
            .iter()
            .any(|p| p.starts_with("NodePool \"uses-broken-class\":")),
        "{:#?}",
        state.invalid
    );
}

#[tokio::test]
async fn a_missing_crd_is_reported_and_the_rest_of_the_state_is_read() {
    let (server, cluster) = fake().await;
    server.uninstall("NodePool");
    server.put(default_node_class());
    server.put(node("node-a"));

    let state = cluster.state().await.expect("state");

    assert!(state.node_pools.is_empty());
    assert_eq!(state.node_classes.len(), 1);
    assert_eq!(state.nodes.len(), 1);
    assert_eq!(state.invalid.len(), 1, "{:#?}", state.invalid);
    assert!(
        state.invalid[0].contains("nodepools.karpenter.sh"),
        "{}",
        state.invalid[0]
    );
    assert!(
        state.invalid[0].contains("not installed"),
        "{}",
        state.invalid[0]
    );
}

#[tokio::test]
async fn an_object_that_cannot_be_converted_is_reported_and_skipped() {
    let (server, cluster) = fake().await;
    server.put(pod("default", "good", "250m"));
    server.put(pod("default", "bad", "lots"));

    let state = cluster.state().await.expect("state");

    let pods: Vec<&str> = state.pods.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(pods, ["good"]);
    assert_eq!(state.invalid.len(), 1, "{:#?}", state.invalid);
    assert!(
        state.invalid[0].contains("default/bad"),
        "{}",
        state.invalid[0]
    );

    let pods = cluster.pods().await.expect("pods");
    assert_eq!(pods.len(), 1, "pods() skips it too");
}

#[tokio::test]
async fn pods_lists_pods_in_every_namespace() {
    let (server, cluster) = fake().await;
    server.put(pod("default", "web-1", "500m"));
    server.put(pod("kube-system", "coredns", "100m"));

    let pods = cluster.pods().await.expect("pods");

    let names: Vec<String> = pods
        .iter()
        .map(|p| format!("{}/{}", p.namespace, p.name))
        .collect();
    assert_eq!(names, ["default/web-1", "kube-system/coredns"]);
    assert_eq!(server.count_lists("/api/v1/pods"), 1);
}

// ----- errors --------------------------------------------------------------------------

#[tokio::test]
async fn throttling_comes_back_as_throttled_at_once_without_retries() {
    let (server, cluster) = fake().await;
    server.fail_next("GET", "/api/v1/pods", 429);

    let started = Instant::now();
    let error = cluster.pods().await.expect_err("throttled");

    assert_eq!(error.kind(), ErrorKind::Throttled);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(server.count_lists("/api/v1/pods"), 1, "no retry of the 429");
    assert!(
        std::error::Error::source(&error).is_some(),
        "the kube error is kept"
    );
}

#[tokio::test]
async fn a_server_error_is_unavailable_and_forbidden_is_unauthorized() {
    let (server, cluster) = fake().await;
    server.fail_next_list("/api/v1/nodes", 500);
    assert_eq!(
        cluster.state().await.expect_err("500").kind(),
        ErrorKind::Unavailable
    );
    let (server, other) = fake().await;
    server.fail_next_list("/api/v1/pods", 403);
    assert_eq!(
        other.state().await.expect_err("403").kind(),
        ErrorKind::Unauthorized
    );
    // The failures were one-shot: the watcher lists again (after its backoff), and the
    // next reads are served.
    let until = Instant::now() + Duration::from_secs(10);
    while other.state().await.is_err() && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(other.state().await.is_ok(), "the failures were one-shot");
}

#[tokio::test]
async fn a_forbidden_optional_kind_is_read_as_unreadable_and_the_rest_is_served() {
    let (server, cluster) = fake().await;
    server.forbid("/apis/policy/v1/poddisruptionbudgets");
    server.forbid("/api/v1/persistentvolumeclaims");
    server.put(node("node-a"));
    let state = cluster
        .state()
        .await
        .expect("the indispensable kinds are served");
    assert_eq!(state.nodes.len(), 1);
    let mut kinds: Vec<(&str, ErrorKind)> = state
        .unreadable
        .iter()
        .map(|u| (u.kind.as_str(), u.error_kind))
        .collect();
    kinds.sort_by_key(|k| k.0);
    assert_eq!(
        kinds,
        [
            ("persistentvolumeclaims", ErrorKind::Unauthorized),
            ("poddisruptionbudgets", ErrorKind::Unauthorized)
        ]
    );
}

#[tokio::test]
async fn a_server_that_is_gone_is_unavailable() {
    let (server, cluster) = fake().await;
    drop(server);
    tokio::task::yield_now().await;
    let error = cluster
        .kubernetes_version()
        .await
        .expect_err("nobody listens");
    assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
}

// ----- patch_node ----------------------------------------------------------------------

#[tokio::test]
async fn patch_node_sets_labels_removes_the_unregistered_taint_and_adds_a_taint() {
    let (server, cluster) = fake().await;
    server.put(node("node-a"));

    cluster
        .patch_node("node-a", &registration_patch())
        .await
        .expect("patched");

    let node = server.get("Node", None, "node-a").expect("the node");
    assert_eq!(
        node["metadata"]["labels"]["karpenter.sh/registered"],
        "true"
    );
    assert_eq!(
        node["metadata"]["labels"]["kubernetes.io/hostname"], "node-a",
        "other labels kept"
    );
    assert_eq!(
        node["metadata"]["annotations"]["karpenter.sh/nodepool-hash"], "7271df6171be70a1",
        "the drift hash is written with the labels"
    );
    assert_eq!(
        taint_keys(&node),
        ["node.kubernetes.io/not-ready", "dedicated"]
    );
    assert_eq!(
        node["spec"]["taints"][1],
        json!({"key": "dedicated", "value": "gpu", "effect": "NoSchedule"})
    );
    let patch = server
        .requests()
        .into_iter()
        .find(|r| r.method == "PATCH")
        .expect("a patch");
    assert_eq!(
        patch.content_type.as_deref(),
        Some("application/merge-patch+json")
    );
    assert!(
        patch.body.expect("a body")["metadata"]["resourceVersion"].is_string(),
        "the read version is a precondition"
    );

    // Once applied, the same patch has nothing left to do: no write.
    server.clear_requests();
    cluster
        .patch_node("node-a", &registration_patch())
        .await
        .expect("no-op");
    assert_eq!(server.count("PATCH", "/api/v1/nodes/node-a"), 0);
}

#[tokio::test]
async fn patch_node_with_labels_only_sends_one_merge_patch() {
    let (server, cluster) = fake().await;
    server.put(node("node-a"));
    let patch = NodePatch {
        set_labels: [("team".to_string(), "web".to_string())].into(),
        ..NodePatch::default()
    };

    cluster.patch_node("node-a", &patch).await.expect("patched");

    assert_eq!(
        server.get("Node", None, "node-a").unwrap()["metadata"]["labels"]["team"],
        "web"
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 1, "{requests:#?}");
    assert_eq!(requests[0].method, "PATCH");
    assert_eq!(
        taint_keys(&server.get("Node", None, "node-a").unwrap()).len(),
        2,
        "taints untouched"
    );
}

#[tokio::test]
async fn patch_node_removes_the_labels_it_names_alone_or_beside_a_taint() {
    let (server, cluster) = fake().await;
    server.put(node("node-a"));
    server.modify("Node", None, "node-a", |n| {
        n["metadata"]["labels"]["karpenter.k8s.aws/capacity-reservation-id"] = json!("cr-1");
        n["metadata"]["labels"]["karpenter.k8s.aws/capacity-reservation-type"] = json!("default");
    });
    let demote = NodePatch {
        set_labels: [(
            "karpenter.sh/capacity-type".to_string(),
            "on-demand".to_string(),
        )]
        .into(),
        remove_labels: vec!["karpenter.k8s.aws/capacity-reservation-id".to_string()],
        ..NodePatch::default()
    };
    cluster
        .patch_node("node-a", &demote)
        .await
        .expect("patched");
    let labels = server.get("Node", None, "node-a").unwrap()["metadata"]["labels"].clone();
    assert_eq!(labels["karpenter.sh/capacity-type"], "on-demand");
    assert!(
        labels
            .get("karpenter.k8s.aws/capacity-reservation-id")
            .is_none(),
        "{labels}"
    );
    assert_eq!(
        labels["karpenter.k8s.aws/capacity-reservation-type"],
        "default"
    );

    // Beside a taint: the read-modify-write path removes it too.
    let with_taint = NodePatch {
        remove_labels: vec!["karpenter.k8s.aws/capacity-reservation-type".to_string()],
        add_taints: vec![taint("example.com/draining", None, TaintEffect::NoSchedule)],
        ..NodePatch::default()
    };
    cluster
        .patch_node("node-a", &with_taint)
        .await
        .expect("patched");
    let node = server.get("Node", None, "node-a").unwrap();
    assert!(
        node["metadata"]["labels"]
            .get("karpenter.k8s.aws/capacity-reservation-type")
            .is_none(),
        "{node}"
    );
    assert!(taint_keys(&node).contains(&"example.com/draining".to_string()));
}

#[tokio::test]
async fn a_concurrent_change_to_the_node_is_retried_and_both_changes_are_kept() {
    let (server, cluster) = fake().await;
    server.put(node("node-a"));
    // Between nodewright's read and its write, the node lifecycle controller adds a taint.
    server.after_next("GET", "/api/v1/nodes/node-a", |store| {
        store.modify("Node", None, "node-a", |node| {
            node["spec"]["taints"]
                .as_array_mut()
                .unwrap()
                .push(json!({"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}));
        });
    });

    cluster
        .patch_node("node-a", &registration_patch())
        .await
        .expect("patched after a retry");

    assert_eq!(server.count("GET", "/api/v1/nodes/node-a"), 2);
    let patches: Vec<u16> = server
        .requests()
        .iter()
        .filter(|r| r.method == "PATCH")
        .map(|r| r.status)
        .collect();
    assert_eq!(patches, [409, 200]);
    let node = server.get("Node", None, "node-a").unwrap();
    assert_eq!(
        taint_keys(&node),
        [
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable",
            "dedicated"
        ]
    );
}

#[tokio::test]
async fn a_node_that_keeps_changing_gives_up_with_conflict() {
    let (server, cluster) = fake().await;
    server.put(node("node-a"));
    for _ in 0..TAINT_ATTEMPTS {
        server.after_next("GET", "/api/v1/nodes/node-a", |store| {
            store.modify("Node", None, "node-a", |node| {
                node["metadata"]["labels"]["churn"] = "1".into()
            });
        });
    }

    let error = cluster
        .patch_node("node-a", &registration_patch())
        .await
        .expect_err("conflict");

    assert_eq!(error.kind(), ErrorKind::Conflict);
    assert_eq!(
        server.count("PATCH", "/api/v1/nodes/node-a"),
        TAINT_ATTEMPTS as usize
    );
}

#[tokio::test]
async fn patching_a_missing_node_is_not_found() {
    let (_server, cluster) = fake().await;
    let taints = cluster
        .patch_node("gone", &registration_patch())
        .await
        .expect_err("404");
    assert_eq!(taints.kind(), ErrorKind::NotFound);
    let labels = NodePatch {
        set_labels: [("a".to_string(), "b".to_string())].into(),
        ..NodePatch::default()
    };
    let labels = cluster.patch_node("gone", &labels).await.expect_err("404");
    assert_eq!(labels.kind(), ErrorKind::NotFound);
}

// ----- events, version, token ----------------------------------------------------------

#[tokio::test]
async fn events_are_recorded_with_the_right_fields() {
    let (server, cluster) = fake().await;
    let node_uid = server.put(node("node-a"))["metadata"]["uid"].clone();
    cluster.state().await.expect("state (learns uids)");

    cluster
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
    cluster
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

    let events = server.list("Event");
    assert_eq!(events.len(), 2);
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
}

#[tokio::test]
async fn the_kubernetes_version_drops_the_eks_suffix() {
    let (server, cluster) = fake().await;
    assert_eq!(cluster.kubernetes_version().await.expect("version"), "1.33");
    server.set_version(Version {
        major: "1".into(),
        minor: "31".into(),
        git_version: "v1.31.2".into(),
    });
    assert_eq!(cluster.kubernetes_version().await.expect("version"), "1.31");
}

/// A provider whose token changes on every call, as the EKS one does every 14 minutes.
struct RotatingToken(AtomicUsize);

#[async_trait]
impl TokenProvider for RotatingToken {
    async fn token(&self) -> Result<String, BoxError> {
        Ok(format!(
            "k8s-aws-v1.token-{}",
            self.0.fetch_add(1, Ordering::SeqCst)
        ))
    }
}

#[tokio::test]
async fn every_request_carries_the_token_the_provider_gives_now() {
    let server = FakeApiServer::start().await.unwrap();
    let cluster = KubeCluster::from_endpoint(
        &server.url(),
        None,
        Arc::new(RotatingToken(AtomicUsize::new(0))),
        ApiRate::default(),
    )
    .unwrap();

    cluster.kubernetes_version().await.unwrap();
    cluster.kubernetes_version().await.unwrap();

    let tokens: Vec<Option<String>> = server
        .requests()
        .into_iter()
        .map(|r| r.authorization)
        .collect();
    assert_eq!(
        tokens,
        [
            Some("Bearer k8s-aws-v1.token-0".to_string()),
            Some("Bearer k8s-aws-v1.token-1".to_string())
        ]
    );
}

struct NoCredentials;

#[async_trait]
impl TokenProvider for NoCredentials {
    async fn token(&self) -> Result<String, BoxError> {
        Err("no AWS credentials".into())
    }
}

#[tokio::test]
async fn a_token_provider_that_fails_is_unauthorized_and_sends_nothing() {
    let server = FakeApiServer::start().await.unwrap();
    let cluster = KubeCluster::from_endpoint(
        &server.url(),
        None,
        Arc::new(NoCredentials),
        ApiRate::default(),
    )
    .unwrap();

    let error = cluster.pods().await.expect_err("no token");

    assert_eq!(error.kind(), ErrorKind::Unauthorized, "{error}");
    assert!(server.requests().is_empty());
}

// ----- a real cluster ------------------------------------------------------------------

/// Read-only: the same reads against the cluster KUBECONFIG names.
#[tokio::test]
#[ignore = "needs a real cluster: set KUBECONFIG"]
async fn state_and_version_read_a_real_cluster_when_kubeconfig_is_set() {
    let path = std::env::var_os("KUBECONFIG")
        .filter(|p| !p.is_empty())
        .expect("KUBECONFIG is not set: this test reads a real cluster");
    let cluster = KubeCluster::from_kubeconfig(&path, ApiRate::default())
        .await
        .expect("a client from KUBECONFIG");
    let version = cluster.kubernetes_version().await.expect("version");
    assert!(
        version.split('.').all(|n| n.parse::<u32>().is_ok()),
        "{version}"
    );
    let state = cluster.state().await.expect("state");
    assert!(!state.nodes.is_empty(), "a cluster has nodes");
    for problem in &state.invalid {
        eprintln!("invalid: {problem}");
    }
    let pods = cluster.pods().await.expect("pods");
    assert_eq!(pods.len(), state.pods.len());
}

// ----- the fake itself, through kube-rs ------------------------------------------------

/// What later end-to-end tests rely on beyond KubeCluster's own calls.
#[tokio::test]
async fn the_fake_serves_namespaced_reads_strategic_patches_and_conditional_replaces() {
    use k8s_openapi::api::core::v1::{Node, Pod};
    use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};

    let (server, cluster) = fake().await;
    server.put(pod("team-a", "batch-1", "1"));
    server.put(pod("team-b", "batch-2", "1"));
    server.put(node("node-a"));
    let client = cluster.client().clone();

    let team_a: Api<Pod> = Api::namespaced(client.clone(), "team-a");
    let listed = team_a
        .list(&ListParams::default())
        .await
        .expect("namespaced list");
    assert_eq!(listed.items.len(), 1);
    assert!(listed.metadata.resource_version.is_some());
    assert_eq!(
        team_a
            .get("batch-1")
            .await
            .expect("get")
            .metadata
            .namespace
            .as_deref(),
        Some("team-a")
    );
    let missing = team_a
        .get("batch-2")
        .await
        .expect_err("in another namespace");
    assert!(
        matches!(missing, kube::Error::Api(ref s) if s.code == 404 && s.reason == "NotFound"),
        "{missing:?}"
    );

    let nodes: Api<Node> = Api::all(client);
    let cordon = json!({"spec": {"unschedulable": true, "taints": [{"key": "cordoned", "effect": "NoSchedule"}]}});
    nodes
        .patch(
            "node-a",
            &PatchParams::default(),
            &Patch::Strategic(&cordon),
        )
        .await
        .expect("strategic patch");
    let node = server.get("Node", None, "node-a").unwrap();
    assert_eq!(node["spec"]["unschedulable"], true);
    assert_eq!(
        taint_keys(&node),
        [UNREGISTERED, "node.kubernetes.io/not-ready", "cordoned"],
        "taints merge by key"
    );

    let mut stale = nodes.get("node-a").await.expect("get");
    server.modify("Node", None, "node-a", |n| {
        n["metadata"]["labels"]["x"] = "y".into()
    });
    stale
        .metadata
        .labels
        .get_or_insert_default()
        .insert("mine".into(), "1".into());
    let conflict = nodes
        .replace("node-a", &PostParams::default(), &stale)
        .await
        .expect_err("stale");
    assert!(
        matches!(conflict, kube::Error::Api(ref s) if s.code == 409),
        "{conflict:?}"
    );
    let fresh = nodes.get("node-a").await.expect("get");
    nodes
        .replace("node-a", &PostParams::default(), &fresh)
        .await
        .expect("replace at the current version");
}

// ----- eviction, deletion ----------------------------------------------------------------

/// A running `app: web` pod bound to `node`.
fn web_pod(name: &str, node: &str) -> Value {
    let mut p = pod("default", name, "100m");
    p["metadata"]["labels"] = json!({"app": "web"});
    p["spec"]["nodeName"] = node.into();
    p["status"] = json!({"phase": "Running"});
    p
}

const EVICTION_WEB_0: &str = "/api/v1/namespaces/default/pods/web-0/eviction";

#[tokio::test]
async fn eviction_succeeds_when_the_budget_allows_it_and_the_pod_is_gone() {
    let (server, cluster) = fake().await;
    server.put(web_pod("web-0", "n1"));
    server.put(web_pod("web-1", "n2"));
    server.put(pdb("default", "web")); // minAvailable 1 of 2 healthy: one may go

    cluster
        .evict_pod("default", "web-0")
        .await
        .expect("evicted");

    assert!(server.get("Pod", Some("default"), "web-0").is_none());
    let request = &server.requests()[0];
    assert_eq!(
        (
            request.method.as_str(),
            request.path.as_str(),
            request.status
        ),
        ("POST", EVICTION_WEB_0, 201)
    );
    assert_eq!(
        request.body.as_ref().map(|b| b["kind"].clone()),
        Some(json!("Eviction"))
    );
}

#[tokio::test]
async fn a_budget_refusal_is_disruption_budget_at_once_with_one_request() {
    let (server, cluster) = fake().await;
    server.put(web_pod("web-0", "n1"));
    server.put(web_pod("web-1", "n2"));
    server.put(pdb("default", "web"));
    cluster
        .evict_pod("default", "web-0")
        .await
        .expect("the first may go");

    let started = Instant::now();
    let error = cluster
        .evict_pod("default", "web-1")
        .await
        .expect_err("refused");

    assert_eq!(error.kind(), ErrorKind::DisruptionBudget);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
    let path = "/api/v1/namespaces/default/pods/web-1/eviction";
    assert_eq!(server.count("POST", path), 1, "no retry of the 429");
    assert!(
        server.get("Pod", Some("default"), "web-1").is_some(),
        "the pod stays"
    );
    let status = server.requests().last().map(|r| r.status);
    assert_eq!(status, Some(429));
}

#[tokio::test]
async fn the_refusal_carries_the_real_servers_status_body() {
    let (server, cluster) = fake().await;
    server.put(web_pod("web-0", "n1"));
    server.put(pdb("default", "web"));
    let error = cluster
        .evict_pod("default", "web-0")
        .await
        .expect_err("refused");
    let source = std::error::Error::source(&error).expect("the kube error is kept");
    let kube_error = source.downcast_ref::<kube::Error>().expect("a kube error");
    let kube::Error::Api(status) = kube_error else {
        panic!("{kube_error:?}")
    };
    assert_eq!(status.code, 429);
    assert_eq!(status.reason, "TooManyRequests");
    assert_eq!(
        status.message,
        "Cannot evict pod as it would violate the pod's disruption budget."
    );
}

#[tokio::test]
async fn pending_pods_may_always_be_evicted_and_missing_ones_are_not_found() {
    let (server, cluster) = fake().await;
    let mut pending = pod("default", "web-9", "100m");
    pending["metadata"]["labels"] = json!({"app": "web"});
    server.put(pending);
    server.put(pdb("default", "web"));
    cluster
        .evict_pod("default", "web-9")
        .await
        .expect("a pending pod is not protected");
    let error = cluster
        .evict_pod("default", "web-9")
        .await
        .expect_err("gone");
    assert_eq!(error.kind(), ErrorKind::NotFound);
}

#[tokio::test]
async fn delete_pod_sends_the_grace_period_and_delete_node_removes_the_node() {
    let (server, cluster) = fake().await;
    server.put(web_pod("web-0", "n1"));
    server.put(node("n1"));

    cluster
        .delete_pod("default", "web-0", 17)
        .await
        .expect("deleted");
    cluster.delete_node("n1").await.expect("deleted");

    assert!(server.get("Pod", Some("default"), "web-0").is_none());
    assert!(server.get("Node", None, "n1").is_none());
    let delete = server
        .requests()
        .into_iter()
        .find(|r| r.method == "DELETE")
        .expect("a DELETE");
    let grace = delete
        .body
        .as_ref()
        .and_then(|b| b.get("gracePeriodSeconds").cloned())
        .or_else(|| {
            delete
                .query
                .contains("gracePeriodSeconds=17")
                .then(|| json!(17))
        });
    assert_eq!(grace, Some(json!(17)), "{delete:?}");
}

#[tokio::test]
async fn deleting_what_is_already_gone_is_not_found() {
    let (_server, cluster) = fake().await;
    assert_eq!(
        cluster
            .delete_pod("default", "nope", 0)
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        cluster.delete_node("nope").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        cluster
            .evict_pod("default", "nope")
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );
}

#[tokio::test]
async fn pods_on_node_lists_with_a_field_selector() {
    let (server, cluster) = fake().await;
    server.put(web_pod("web-0", "n1"));
    server.put(web_pod("web-1", "n2"));
    server.put(pod("default", "pending", "100m"));

    let pods = cluster.pods_on_node("n1").await.expect("listed");

    assert_eq!(
        pods.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        ["web-0"]
    );
    let request = server
        .requests()
        .into_iter()
        .find(|r| r.path == "/api/v1/pods")
        .expect("a list");
    assert!(
        request.query.contains("fieldSelector=spec.nodeName%3Dn1"),
        "{}",
        request.query
    );
}

// ----- NodePool and EC2NodeClass status, events, invalid objects --------------------------

const CLASS_STATUS_PATH: &str = "/apis/karpenter.k8s.aws/v1/ec2nodeclasses/default/status";
const CLASS_PATH: &str = "/apis/karpenter.k8s.aws/v1/ec2nodeclasses/default";
/// 2025-01-01T00:00:00Z
const T0: i64 = 1_735_689_600;

fn not_ready_class() -> StatusUpdate {
    StatusUpdate {
        conditions: vec![
            Condition::failed(
                "SubnetsReady",
                "SubnetsNotFound",
                "subnetSelectorTerms select no subnet",
            ),
            Condition::met("SecurityGroupsReady"),
            Condition::failed(
                "Ready",
                "SubnetsNotFound",
                "subnetSelectorTerms select no subnet",
            ),
        ],
        fields: Default::default(),
    }
}

fn conditions_of(object: &Value) -> Vec<Value> {
    object["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn condition_of(object: &Value, type_: &str) -> Value {
    conditions_of(object)
        .into_iter()
        .find(|c| c["type"] == type_)
        .unwrap_or_else(|| panic!("no {type_} condition in {object:#}"))
}

#[tokio::test]
async fn a_status_write_sets_conditions_with_their_transition_time_and_observed_generation() {
    let (server, cluster) = fake().await;
    let put = server.put(default_node_class());
    let spec = put["spec"].clone();

    let changed = cluster
        .update_status(ObjectKind::Ec2NodeClass, "default", &not_ready_class(), T0)
        .await
        .expect("status written");

    assert!(changed);
    let class = server.get("EC2NodeClass", None, "default").unwrap();
    assert_eq!(
        condition_of(&class, "Ready"),
        json!({
            "type": "Ready",
            "status": "False",
            "reason": "SubnetsNotFound",
            "message": "subnetSelectorTerms select no subnet",
            "lastTransitionTime": "2025-01-01T00:00:00Z",
            "observedGeneration": 1,
        })
    );
    assert_eq!(
        condition_of(&class, "SecurityGroupsReady")["reason"],
        "SecurityGroupsReady"
    );
    let types: Vec<Value> = conditions_of(&class)
        .iter()
        .map(|c| c["type"].clone())
        .collect();
    assert_eq!(
        types,
        ["Ready", "SecurityGroupsReady", "SubnetsReady"],
        "sorted by type"
    );
    assert_eq!(class["spec"], spec, "the spec is untouched");
    let patch = server
        .requests()
        .into_iter()
        .find(|r| r.method == "PATCH")
        .expect("a patch");
    assert_eq!(patch.path, CLASS_STATUS_PATH);
    assert_eq!(
        patch.content_type.as_deref(),
        Some("application/merge-patch+json")
    );
    let body = patch.body.expect("a JSON body");
    assert_eq!(
        body["metadata"]["resourceVersion"], put["metadata"]["resourceVersion"],
        "written under the read version"
    );
}

#[tokio::test]
async fn an_unchanged_status_is_read_and_not_written() {
    let (server, cluster) = fake().await;
    server.put(default_node_class());
    cluster
        .update_status(ObjectKind::Ec2NodeClass, "default", &not_ready_class(), T0)
        .await
        .expect("first write");
    server.clear_requests();

    let changed = cluster
        .update_status(
            ObjectKind::Ec2NodeClass,
            "default",
            &not_ready_class(),
            T0 + 60,
        )
        .await
        .expect("second call");

    assert!(!changed);
    assert_eq!(server.count("GET", CLASS_PATH), 1);
    assert_eq!(server.count("PATCH", CLASS_STATUS_PATH), 0);
    let class = server.get("EC2NodeClass", None, "default").unwrap();
    assert_eq!(
        condition_of(&class, "Ready")["lastTransitionTime"],
        "2025-01-01T00:00:00Z"
    );
}

#[tokio::test]
async fn a_flipped_condition_gets_a_new_transition_time_and_the_others_keep_theirs() {
    let (server, cluster) = fake().await;
    server.put(default_node_class());
    cluster
        .update_status(ObjectKind::Ec2NodeClass, "default", &not_ready_class(), T0)
        .await
        .expect("not ready");

    let healthy = StatusUpdate {
        conditions: vec![
            Condition::met("SubnetsReady"),
            Condition::met("SecurityGroupsReady"),
            Condition::met("Ready"),
        ],
        fields: Default::default(),
    };
    let changed = cluster
        .update_status(ObjectKind::Ec2NodeClass, "default", &healthy, T0 + 90)
        .await
        .expect("ready");

    assert!(changed);
    let class = server.get("EC2NodeClass", None, "default").unwrap();
    let ready = condition_of(&class, "Ready");
    assert_eq!(ready["status"], "True");
    assert_eq!(ready["reason"], "Ready");
    assert_eq!(ready["message"], "");
    assert_eq!(ready["lastTransitionTime"], "2025-01-01T00:01:30Z");
    assert_eq!(
        condition_of(&class, "SecurityGroupsReady")["lastTransitionTime"],
        "2025-01-01T00:00:00Z",
        "stayed True: its transition time stays"
    );
}

#[tokio::test]
async fn conditions_set_by_another_controller_are_kept() {
    let (server, cluster) = fake().await;
    let mut pool = node_pool("general-purpose");
    pool["status"] = json!({
        "conditions": [{
            "type": "NodeRegistrationHealthy",
            "status": "Unknown",
            "reason": "AwaitingReconciliation",
            "message": "",
            "lastTransitionTime": "2024-12-01T00:00:00Z",
        }],
        "nodes": 3,
    });
    server.put(default_node_class());
    server.put(pool);

    cluster
        .update_status(
            ObjectKind::NodePool,
            "general-purpose",
            &StatusUpdate {
                conditions: vec![
                    Condition::met("NodeClassReady"),
                    Condition::met("ValidationSucceeded"),
                    Condition::met("Ready"),
                ],
                fields: Default::default(),
            },
            T0,
        )
        .await
        .expect("written");

    let pool = server.get("NodePool", None, "general-purpose").unwrap();
    let types: Vec<Value> = conditions_of(&pool)
        .iter()
        .map(|c| c["type"].clone())
        .collect();
    assert_eq!(
        types,
        [
            "NodeClassReady",
            "NodeRegistrationHealthy",
            "Ready",
            "ValidationSucceeded"
        ]
    );
    assert_eq!(
        condition_of(&pool, "NodeRegistrationHealthy")["lastTransitionTime"],
        "2024-12-01T00:00:00Z"
    );
    assert_eq!(pool["status"]["nodes"], 3, "other status fields are kept");
}

#[tokio::test]
async fn a_concurrent_status_change_is_retried_and_both_changes_are_kept() {
    let (server, cluster) = fake().await;
    server.put(default_node_class());
    // Between nodewright's read and its write, Karpenter (mid-migration) sets a condition.
    server.after_next("GET", CLASS_PATH, |store| {
        store.modify("EC2NodeClass", None, "default", |class| {
            class["status"] = json!({"conditions": [{
                "type": "AMIsReady", "status": "True", "reason": "AMIsReady", "message": "",
                "lastTransitionTime": "2024-12-01T00:00:00Z",
            }]});
        });
    });

    cluster
        .update_status(ObjectKind::Ec2NodeClass, "default", &not_ready_class(), T0)
        .await
        .expect("written after a retry");

    let statuses: Vec<u16> = server
        .requests()
        .iter()
        .filter(|r| r.method == "PATCH")
        .map(|r| r.status)
        .collect();
    assert_eq!(statuses, [409, 200]);
    let class = server.get("EC2NodeClass", None, "default").unwrap();
    assert_eq!(condition_of(&class, "AMIsReady")["status"], "True");
    assert_eq!(condition_of(&class, "SubnetsReady")["status"], "False");
}

#[tokio::test]
async fn an_object_whose_status_keeps_changing_gives_up_with_conflict() {
    let (server, cluster) = fake().await;
    server.put(default_node_class());
    for i in 0..STATUS_ATTEMPTS {
        server.after_next("GET", CLASS_PATH, move |store| {
            store.modify("EC2NodeClass", None, "default", |class| {
                class["status"]["churn"] = i.into();
            });
        });
    }

    let error = cluster
        .update_status(ObjectKind::Ec2NodeClass, "default", &not_ready_class(), T0)
        .await
        .expect_err("conflict");

    assert_eq!(error.kind(), ErrorKind::Conflict);
    assert_eq!(
        server.count("PATCH", CLASS_STATUS_PATH),
        STATUS_ATTEMPTS as usize
    );
}

#[tokio::test]
async fn the_observed_generation_follows_spec_changes_and_keeps_the_transition_time() {
    let (server, cluster) = fake().await;
    server.put(default_node_class());
    cluster
        .update_status(ObjectKind::Ec2NodeClass, "default", &not_ready_class(), T0)
        .await
        .expect("first");
    // Someone edits the subnet selector: a new generation.
    let client = cluster.client().clone();
    let gvk = kube::api::GroupVersionKind::gvk("karpenter.k8s.aws", "v1", "EC2NodeClass");
    let resource = kube::api::ApiResource::from_gvk_with_plural(&gvk, "ec2nodeclasses");
    let api: kube::Api<kube::api::DynamicObject> = kube::Api::all_with(client, &resource);
    let edit = json!({"spec": {"subnetSelectorTerms": [{"tags": {"Name": "private-*"}}]}});
    api.patch(
        "default",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&edit),
    )
    .await
    .expect("spec edit");
    assert_eq!(
        server.get("EC2NodeClass", None, "default").unwrap()["metadata"]["generation"],
        2
    );

    let changed = cluster
        .update_status(
            ObjectKind::Ec2NodeClass,
            "default",
            &not_ready_class(),
            T0 + 60,
        )
        .await
        .expect("second");

    assert!(changed, "the observed generation moved");
    let class = server.get("EC2NodeClass", None, "default").unwrap();
    let ready = condition_of(&class, "Ready");
    assert_eq!(ready["observedGeneration"], 2);
    assert_eq!(ready["lastTransitionTime"], "2025-01-01T00:00:00Z");
}

#[tokio::test]
async fn status_fields_are_written_beside_the_conditions_and_null_removes_one() {
    let (server, cluster) = fake().await;
    server.put(default_node_class());
    let mut update = not_ready_class();
    update
        .fields
        .insert("instanceProfile".into(), "test-cluster_123".into());

    cluster
        .update_status(ObjectKind::Ec2NodeClass, "default", &update, T0)
        .await
        .expect("written");
    let class = server.get("EC2NodeClass", None, "default").unwrap();
    assert_eq!(class["status"]["instanceProfile"], "test-cluster_123");
    assert_eq!(
        server.count("PATCH", CLASS_STATUS_PATH),
        1,
        "one write for both"
    );

    let mut removal = StatusUpdate::default();
    removal.fields.insert("instanceProfile".into(), Value::Null);
    assert!(
        cluster
            .update_status(ObjectKind::Ec2NodeClass, "default", &removal, T0)
            .await
            .expect("removed")
    );
    let class = server.get("EC2NodeClass", None, "default").unwrap();
    assert!(class["status"].get("instanceProfile").is_none());
    assert_eq!(conditions_of(&class).len(), 3, "conditions untouched");
}

#[tokio::test]
async fn a_status_write_for_a_missing_object_is_not_found() {
    let (_server, cluster) = fake().await;

    let error = cluster
        .update_status(ObjectKind::NodePool, "ghost", &not_ready_class(), T0)
        .await
        .expect_err("no such pool");

    assert_eq!(error.kind(), ErrorKind::NotFound);
}

#[tokio::test]
async fn the_fake_keeps_status_and_spec_apart_as_a_real_server_does() {
    use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};

    let (server, cluster) = fake().await;
    let mut pool = node_pool("general-purpose");
    pool["status"] = json!({"nodes": 1});
    server.put(pool);
    let gvk = GroupVersionKind::gvk("karpenter.sh", "v1", "NodePool");
    let api: Api<DynamicObject> = Api::all_with(
        cluster.client().clone(),
        &ApiResource::from_gvk_with_plural(&gvk, "nodepools"),
    );
    let params = PatchParams::default();

    // The object itself: status changes are ignored, spec changes bump the generation.
    api.patch(
        "general-purpose",
        &params,
        &Patch::Merge(json!({"spec": {"weight": 7}, "status": {"nodes": 99}})),
    )
    .await
    .expect("object patch");
    let stored = server.get("NodePool", None, "general-purpose").unwrap();
    assert_eq!(stored["spec"]["weight"], 7);
    assert_eq!(stored["status"]["nodes"], 1);
    assert_eq!(stored["metadata"]["generation"], 2);

    // The status subresource: only status changes; the generation stays.
    api.patch_status(
        "general-purpose",
        &params,
        &Patch::Merge(json!({"spec": {"weight": 1}, "status": {"nodes": 5}})),
    )
    .await
    .expect("status patch");
    let stored = server.get("NodePool", None, "general-purpose").unwrap();
    assert_eq!(stored["spec"]["weight"], 7);
    assert_eq!(stored["status"]["nodes"], 5);
    assert_eq!(stored["metadata"]["generation"], 2);

    // A stale resourceVersion on /status is a conflict.
    let stale = json!({"metadata": {"resourceVersion": "1"}, "status": {"nodes": 6}});
    let error = api
        .patch_status("general-purpose", &params, &Patch::Merge(&stale))
        .await
        .expect_err("stale");
    assert!(
        matches!(error, kube::Error::Api(ref s) if s.code == 409),
        "{error:?}"
    );
    let status = api
        .get_status("general-purpose")
        .await
        .expect("GET /status");
    assert_eq!(status.data["status"]["nodes"], 5);

    // Create drops a custom resource's status and starts at generation 1.
    let mut fresh = node_pool("fresh");
    fresh["status"] = json!({"nodes": 42});
    let fresh: DynamicObject = serde_json::from_value(fresh).unwrap();
    let created = api
        .create(&kube::api::PostParams::default(), &fresh)
        .await
        .expect("create");
    assert!(created.data.get("status").is_none());
    assert_eq!(created.metadata.generation, Some(1));

    // Events have no status subresource.
    assert_eq!(
        server.with_store(|s| s.type_of_kind("Event").map(|t| t.status_subresource)),
        Some(false)
    );
}

#[tokio::test]
async fn events_about_node_pools_and_node_classes_name_the_object_in_default() {
    let (server, cluster) = fake().await;
    let pool_uid = server.put(node_pool("general-purpose"))["metadata"]["uid"].clone();
    cluster.state().await.expect("state (learns uids)");
    // A class created after the listing: its uid is read when the event is recorded.
    let class_uid = server.put(default_node_class())["metadata"]["uid"].clone();

    cluster
        .record_event(&ClusterEvent::about_object(
            ObjectKind::NodePool,
            "general-purpose",
            EventType::Warning,
            "NodeClassNotFound",
            "EC2NodeClass \"default\" does not exist",
        ))
        .await
        .expect("pool event");
    cluster
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

    let events = server.list("Event");
    assert_eq!(events.len(), 2);
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

#[tokio::test]
async fn invalid_objects_are_named_by_kind_and_say_how_a_pool_is_wrong() {
    let (server, cluster) = fake().await;
    let mut broken_class = default_node_class();
    broken_class["metadata"]["name"] = "broken".into();
    broken_class["spec"]["amiSelectorTerms"] = json!([]);
    server.put(broken_class);
    server.put(default_node_class());
    server.put(node_pool("good"));
    let mut bad_spec = node_pool("bad-spec");
    bad_spec["spec"]["template"]["spec"]["requirements"][0]["operator"] = "GreaterThan".into();
    server.put(bad_spec);
    let mut orphan = node_pool("orphan");
    orphan["spec"]["template"]["spec"]["nodeClassRef"]["name"] = "missing".into();
    server.put(orphan);
    let mut uses_broken = node_pool("uses-broken");
    uses_broken["spec"]["template"]["spec"]["nodeClassRef"]["name"] = "broken".into();
    server.put(uses_broken);

    let state = cluster.state().await.expect("state");

    let by_name = |name: &str| {
        state
            .invalid_objects
            .iter()
            .find(|o| o.name == name)
            .unwrap_or_else(|| panic!("{name} not reported: {:#?}", state.invalid_objects))
    };
    assert_eq!(
        state.invalid_objects.len(),
        4,
        "{:#?}",
        state.invalid_objects
    );
    let class = by_name("broken");
    assert_eq!(class.kind, ObjectKind::Ec2NodeClass);
    assert!(
        matches!(&class.why, Invalidity::Spec { message } if message.starts_with("spec.amiSelectorTerms")),
        "{class:?}"
    );
    let spec = by_name("bad-spec");
    assert_eq!(spec.kind, ObjectKind::NodePool);
    assert!(
        matches!(&spec.why, Invalidity::Spec { message } if message.starts_with("spec.template.spec.requirements[0].operator: ")),
        "{spec:?}"
    );
    assert_eq!(
        by_name("orphan").why,
        Invalidity::NodeClassNotFound {
            node_class: "missing".into()
        }
    );
    assert_eq!(
        by_name("uses-broken").why,
        Invalidity::NodeClassInvalid {
            node_class: "broken".into()
        }
    );
    assert_eq!(state.invalid.len(), 4, "the messages are still there too");
}

// ----- volume topology ------------------------------------------------------------------

#[tokio::test]
async fn state_limits_a_pod_bound_to_a_zonal_volume_to_its_zone_and_names_a_missing_claim() {
    let (server, cluster) = fake().await;
    let mut db = pod("default", "db-0", "1");
    db["spec"]["volumes"] =
        json!([{"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}}]);
    db["status"]["conditions"] =
        json!([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]);
    server.put(db);
    let mut orphan = pod("default", "orphan-0", "1");
    orphan["spec"]["volumes"] =
        json!([{"name": "data", "persistentVolumeClaim": {"claimName": "never-created"}}]);
    server.put(orphan);
    server.put(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data-db-0", "namespace": "default",
            "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "gp3", "volumeName": "pv-1"},
    }));
    server.put(json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": "pv-1"},
        "spec": {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "20Gi"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1b"]}]}]}}},
    }));
    server.put(json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "gp3"}, "provisioner": "ebs.csi.aws.com",
        "volumeBindingMode": "WaitForFirstConsumer",
    }));

    let state = cluster.state().await.expect("state");

    assert_eq!(state.invalid, Vec::<String>::new());
    for path in [
        "/api/v1/persistentvolumeclaims",
        "/api/v1/persistentvolumes",
        "/apis/storage.k8s.io/v1/storageclasses",
    ] {
        assert_eq!(server.count_lists(path), 1, "{path} listed once");
    }
    let db = state.pods.iter().find(|p| p.name == "db-0").unwrap();
    let zones: Vec<(&str, &[String])> = db
        .required_node_terms
        .iter()
        .flatten()
        .map(|r| (r.key.as_str(), r.values.as_slice()))
        .collect();
    assert_eq!(
        zones,
        [(
            "topology.kubernetes.io/zone",
            &["us-east-1b".to_string()][..]
        )]
    );
    assert_eq!(db.not_provisionable(), None);
    let orphan = state.pods.iter().find(|p| p.name == "orphan-0").unwrap();
    assert_eq!(
        orphan.not_provisionable().map(|r| r.to_string()).as_deref(),
        Some(
            "its volume \"data\" uses PersistentVolumeClaim \"default/never-created\", which does not exist"
        )
    );
}

// ----- the watched view ------------------------------------------------------------------

/// LISTs and WATCHes of `path`.
fn lists_and_watches(server: &FakeApiServer, path: &str) -> (usize, usize) {
    (server.count_lists(path), server.count_watches(path))
}

/// Waits until every kind the view reads is watched (the watches start in the
/// background after their lists), or 5 s.
async fn watching(server: &FakeApiServer) {
    // NodePools, EC2NodeClasses, NodeOverlays, nodes, pods, DaemonSets, PDBs, PVCs,
    // PVs, StorageClasses.
    const KINDS: usize = 10;
    let until = Instant::now() + Duration::from_secs(5);
    while server.open_watches() < KINDS && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(server.open_watches(), KINDS, "every kind is watched");
}

/// Reads pods until `name` is there (or 5 s, one provisioner poll, have passed).
async fn sees_pod(cluster: &KubeCluster, name: &str) -> bool {
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        let pods = cluster.unbound_pods().await.expect("pods");
        if pods.iter().any(|p| p.name == name) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

#[tokio::test]
async fn a_pod_created_after_the_first_list_is_seen_within_a_poll_without_a_second_list() {
    let (server, cluster) = fake().await;
    server.put(pod("default", "web-1", "500m"));
    assert_eq!(cluster.pods().await.expect("pods").len(), 1);

    server.put(pod("default", "web-2", "500m"));

    assert!(sees_pod(&cluster, "web-2").await, "the new pod is seen");
    let (lists, watches) = lists_and_watches(&server, "/api/v1/pods");
    assert_eq!(lists, 1, "one LIST, then the watch");
    assert!(watches >= 1);
    let state = cluster.state().await.expect("state");
    assert_eq!(state.pods.len(), 2);
    assert_eq!(
        lists_and_watches(&server, "/api/v1/pods").0,
        1,
        "a tick's read lists nothing"
    );
}

#[tokio::test]
async fn a_watch_that_expired_lists_again_once() {
    let (server, cluster) = fake().await;
    server.put(pod("default", "web-1", "500m"));
    cluster.state().await.expect("state");
    server.put(pod("default", "web-2", "500m"));
    assert!(sees_pod(&cluster, "web-2").await);

    // The stream breaks, and resuming it answers 410 Gone (the server forgot the
    // version): the watcher lists again.
    watching(&server).await;
    server.fail_next_watch("/api/v1/pods", 410);
    server.drop_watches();
    server.put(pod("default", "web-3", "500m"));

    assert!(sees_pod(&cluster, "web-3").await, "seen after the new list");
    let (lists, _) = lists_and_watches(&server, "/api/v1/pods");
    assert_eq!(lists, 2, "one list at the start, one after 410 Gone");
}

#[tokio::test]
async fn a_dropped_stream_resumes_from_its_resource_version_without_listing() {
    let (server, cluster) = fake().await;
    server.put(pod("default", "web-1", "500m"));
    cluster.state().await.expect("state");
    watching(&server).await;
    let listed_at = server.requests().len();

    server.drop_watches();
    server.put(pod("default", "web-2", "500m"));

    assert!(
        sees_pod(&cluster, "web-2").await,
        "the change made while it was down is seen"
    );
    let (lists, watches) = lists_and_watches(&server, "/api/v1/pods");
    assert_eq!(lists, 1, "no second list");
    assert!(watches >= 2, "the watch was made again");
    let resumed = server.requests()[listed_at..]
        .iter()
        .filter(|r| r.path == "/api/v1/pods" && r.watch)
        .any(|r| {
            r.query
                .split('&')
                .any(|p| p.starts_with("resourceVersion=") && p != "resourceVersion=0")
        });
    assert!(
        resumed,
        "it resumed from a resourceVersion: {:?}",
        server.requests()
    );
}

#[tokio::test]
async fn a_watch_that_cannot_be_restarted_is_read_afresh_at_the_next_read() {
    let (server, cluster) = fake().await;
    server.put(pod("default", "web-1", "500m"));
    cluster.state().await.expect("state");

    // The watch breaks and the server refuses to restart it (RBAC without "watch"):
    // the next read cannot vouch for the view, and lists.
    watching(&server).await;
    server.fail_next_watch("/api/v1/pods", 403);
    server.drop_watches();
    server.put(pod("default", "web-2", "500m"));
    let until = Instant::now() + Duration::from_secs(5);
    while lists_and_watches(&server, "/api/v1/pods").1 < 2 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let pods = cluster.pods().await.expect("pods");
    assert_eq!(pods.len(), 2, "read afresh: {pods:?}");
    let (lists, _) = lists_and_watches(&server, "/api/v1/pods");
    assert_eq!(
        lists, 2,
        "one list at the start, one after the refused watch"
    );
}

#[tokio::test]
async fn a_node_this_process_patched_reads_patched_in_the_same_tick() {
    let (server, cluster) = fake().await;
    server.put(node("node-a"));
    cluster.state().await.expect("state");

    cluster
        .patch_node("node-a", &registration_patch())
        .await
        .expect("patched");
    // Read at once, before the watch could deliver the change: the view holds the
    // API server's answer to the patch.
    let state = cluster.state().await.expect("state");

    let node = state.nodes.iter().find(|n| n.name == "node-a").unwrap();
    assert!(
        node.taints
            .iter()
            .all(|t| t.key != "karpenter.sh/unregistered"),
        "{:?}",
        node.taints
    );
    assert_eq!(
        node.labels
            .get("karpenter.sh/registered")
            .map(String::as_str),
        Some("true")
    );
}

#[tokio::test]
async fn requests_say_who_sends_them() {
    let (server, cluster) = fake().await;
    cluster.kubernetes_version().await.expect("version");
    let requests = server.requests();
    assert_eq!(
        requests[0].user_agent.as_deref(),
        Some(concat!("nodewright/", env!("CARGO_PKG_VERSION")))
    );
}

// ----- NodeClaim mirrors ---------------------------------------------------------------

const NODE_CLAIMS_PATH: &str = "/apis/karpenter.sh/v1/nodeclaims";

fn initialized_claim(name: &str) -> nodewright_core::nodeclaim::NodeClaim {
    use nodewright_core::catalog::CapacityType;
    use nodewright_core::nodeclaim::{ClaimSpec, ClaimState, NodeClaim};
    let claim = NodeClaim::launching(
        ClaimSpec {
            name: name.into(),
            node_pool: "general-purpose".into(),
            node_class: "default".into(),
            instance_type_options: vec!["m5.xlarge".into()],
            zones: vec!["us-east-1a".into()],
            capacity_types: vec![CapacityType::OnDemand],
            pods: vec!["default/web-0".into()],
            labels: Default::default(),
        },
        1_000,
    );
    claim
        .transition(ClaimState::Launched, 1_010, |c| {
            c.instance_id = Some("i-0123456789abcdef0".into());
            c.instance_type = Some("m5.xlarge".into());
            c.zone = Some("us-east-1a".into());
            c.capacity_type = Some(CapacityType::OnDemand);
            c.price_per_hour = Some(0.192);
            c.launched_at = Some(1_010);
        })
        .and_then(|c| {
            c.transition(ClaimState::Registered, 1_050, |c| {
                c.node_name = Some("ip-10-0-0-1.ec2.internal".into());
                c.registered_at = Some(1_050);
            })
        })
        .and_then(|c| {
            c.transition(ClaimState::Initialized, 1_080, |c| {
                c.initialized_at = Some(1_080)
            })
        })
        .expect("allowed transitions")
}

/// Writes (anything but GET) sent to NodeClaims.
fn node_claim_writes(server: &FakeApiServer) -> Vec<String> {
    server
        .requests()
        .into_iter()
        .filter(|r| r.path.starts_with(NODE_CLAIMS_PATH) && r.method != "GET")
        .map(|r| format!("{} {}", r.method, r.path))
        .collect()
}

#[tokio::test]
async fn a_claim_is_mirrored_as_a_node_claim_and_a_quiet_pass_writes_nothing() {
    let (server, cluster) = fake().await;
    let claim = initialized_claim("general-purpose-abcde");
    let report = cluster
        .mirror_claims(std::slice::from_ref(&claim))
        .await
        .unwrap();
    assert_eq!(report.created, vec![claim.name.clone()]);

    let object = server
        .get("NodeClaim", None, &claim.name)
        .expect("the mirror exists");
    let labels = &object["metadata"]["labels"];
    assert_eq!(labels["karpenter.sh/nodepool"], "general-purpose");
    assert_eq!(labels["node.kubernetes.io/instance-type"], "m5.xlarge");
    assert_eq!(labels["topology.kubernetes.io/zone"], "us-east-1a");
    assert_eq!(labels["karpenter.sh/capacity-type"], "on-demand");
    assert_eq!(labels["app.kubernetes.io/managed-by"], "nodewright");
    assert_eq!(
        object["metadata"]["annotations"]["nodewright.dev/price-per-hour"],
        "0.192"
    );
    assert_eq!(object["spec"]["nodeClassRef"]["group"], "nodewright.dev");
    assert_eq!(object["spec"]["nodeClassRef"]["name"], "default");
    assert_eq!(
        object["status"]["providerID"],
        "aws:///us-east-1a/i-0123456789abcdef0"
    );
    assert_eq!(object["status"]["nodeName"], "ip-10-0-0-1.ec2.internal");
    for t in ["Launched", "Registered", "Initialized", "Ready"] {
        assert_eq!(condition_of(&object, t)["status"], "True", "{t}: {object}");
    }
    // Status through /status (the CRD's subresource), spec and metadata through the
    // object.
    assert_eq!(
        node_claim_writes(&server),
        vec![
            format!("POST {NODE_CLAIMS_PATH}"),
            format!("PATCH {NODE_CLAIMS_PATH}/{}/status", claim.name),
        ]
    );

    server.clear_requests();
    let quiet = cluster
        .mirror_claims(std::slice::from_ref(&claim))
        .await
        .unwrap();
    assert_eq!(quiet.writes(), 0, "{quiet:?}");
    assert!(node_claim_writes(&server).is_empty());
    assert_eq!(
        server.count_lists(NODE_CLAIMS_PATH),
        0,
        "read from the watch"
    );

    // A new process over the same mirrors (a cold start) finds them as wanted.
    let fresh = KubeCluster::from_endpoint(
        &server.url(),
        None,
        Arc::new(StaticToken("test-token".into())),
        ApiRate::default(),
    )
    .unwrap();
    let cold = fresh.mirror_claims(&[claim]).await.unwrap();
    assert_eq!(cold.writes(), 0, "{cold:?}");
    assert!(node_claim_writes(&server).is_empty());
}

#[tokio::test]
async fn a_changed_claim_is_written_a_deleted_mirror_rewritten_and_a_terminated_claims_removed() {
    use nodewright_core::nodeclaim::{ClaimState, Disruption, DisruptionCause};
    let (server, cluster) = fake().await;
    let claim = initialized_claim("general-purpose-fghij");
    cluster
        .mirror_claims(std::slice::from_ref(&claim))
        .await
        .unwrap();

    let disrupted = claim
        .transition(ClaimState::Disrupting, 2_000, |c| {
            c.disruption = Some(Disruption {
                cause: DisruptionCause::Underutilized,
                deadline: None,
                since: 2_000,
                drain_after: None,
                event: None,
                command: None,
            })
        })
        .unwrap();
    let report = cluster
        .mirror_claims(std::slice::from_ref(&disrupted))
        .await
        .unwrap();
    assert_eq!(report.updated, vec![claim.name.clone()]);
    let object = server.get("NodeClaim", None, &claim.name).unwrap();
    assert_eq!(
        condition_of(&object, "DisruptionReason")["reason"],
        "Underutilized"
    );
    assert_eq!(condition_of(&object, "Ready")["status"], "False");
    assert_eq!(
        object["metadata"]["annotations"]["nodewright.dev/state"],
        "Disrupting"
    );

    // Someone deletes it: the watch says so, and the next pass writes it again.
    server.remove("NodeClaim", None, &claim.name);
    let mut rewritten = false;
    for _ in 0..100 {
        let report = cluster
            .mirror_claims(std::slice::from_ref(&disrupted))
            .await
            .unwrap();
        if report.created == vec![claim.name.clone()] {
            rewritten = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(rewritten, "the deleted mirror was never written again");
    assert!(server.get("NodeClaim", None, &claim.name).is_some());

    let mut done = disrupted.clone();
    done.state = ClaimState::Terminated;
    let report = cluster.mirror_claims(&[done]).await.unwrap();
    assert_eq!(report.deleted, vec![claim.name.clone()]);
    assert!(server.get("NodeClaim", None, &claim.name).is_none());
    // A claim the store no longer has: its mirror goes too.
    cluster
        .mirror_claims(std::slice::from_ref(&claim))
        .await
        .unwrap();
    let report = cluster.mirror_claims(&[]).await.unwrap();
    assert_eq!(report.deleted, vec![claim.name.clone()]);
}

#[tokio::test]
async fn a_node_claim_nodewright_does_not_manage_is_never_touched() {
    let (server, cluster) = fake().await;
    let karpenters = server.put(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "general-purpose-klmno", "labels": {"karpenter.sh/nodepool": "general-purpose"}},
        "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}, "requirements": []},
    }));
    let claim = initialized_claim("general-purpose-klmno");
    let report = cluster.mirror_claims(&[claim]).await.unwrap();
    assert_eq!(report.foreign, vec!["general-purpose-klmno".to_string()]);
    let report = cluster.mirror_claims(&[]).await.unwrap();
    assert!(report.deleted.is_empty(), "{report:?}");
    assert!(node_claim_writes(&server).is_empty());
    assert_eq!(
        server.get("NodeClaim", None, "general-purpose-klmno"),
        Some(karpenters)
    );
}

#[tokio::test]
async fn without_the_node_claim_crd_nothing_is_mirrored_and_nothing_fails() {
    let (server, cluster) = fake().await;
    server.uninstall("NodeClaim");
    let claim = initialized_claim("general-purpose-pqrst");
    let report = cluster
        .mirror_claims(std::slice::from_ref(&claim))
        .await
        .unwrap();
    assert!(report.skipped.is_some(), "{report:?}");
    assert_eq!(report.writes(), 0);
    let again = cluster.mirror_claims(&[claim]).await.unwrap();
    assert!(again.skipped.is_some());
    assert!(node_claim_writes(&server).is_empty());
}

/// `kubectl scale nodepool` through the scale subresource.
#[path = "kube_cluster/control_plane.rs"]
mod control_plane;

#[path = "kube_cluster/fake_scale.rs"]
mod fake_scale;

/// NodeOverlays read, watched and given a status.
#[path = "kube_cluster/node_overlays.rs"]
mod node_overlays;

#[tokio::test]
async fn a_mirror_backlog_is_written_a_few_objects_a_pass_until_it_is_done() {
    let (server, cluster) = fake().await;
    let cluster = cluster.with_mirror_writes_per_pass(2);
    let claims: Vec<nodewright_core::nodeclaim::NodeClaim> = ["a", "b", "c", "d", "e"]
        .iter()
        .map(|s| initialized_claim(&format!("general-purpose-{s}aaaa")))
        .collect();
    let first = cluster.mirror_claims(&claims).await.unwrap();
    assert_eq!((first.created.len(), first.deferred), (2, 3), "{first:?}");
    let second = cluster.mirror_claims(&claims).await.unwrap();
    assert_eq!(
        (second.created.len(), second.deferred),
        (2, 1),
        "{second:?}"
    );
    let third = cluster.mirror_claims(&claims).await.unwrap();
    assert_eq!((third.created.len(), third.deferred), (1, 0), "{third:?}");
    for c in &claims {
        assert!(
            server.get("NodeClaim", None, &c.name).is_some(),
            "{}",
            c.name
        );
    }
    // Deletes count too: four gone, two a pass.
    let kept = &claims[..1];
    let report = cluster.mirror_claims(kept).await.unwrap();
    assert_eq!(
        (report.deleted.len(), report.deferred),
        (2, 2),
        "{report:?}"
    );
    let report = cluster.mirror_claims(kept).await.unwrap();
    assert_eq!(
        (report.deleted.len(), report.deferred),
        (2, 0),
        "{report:?}"
    );
    let quiet = cluster.mirror_claims(kept).await.unwrap();
    assert_eq!((quiet.writes(), quiet.deferred), (0, 0), "{quiet:?}");
}
