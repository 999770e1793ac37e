//! A drain's calls: evictions through the Eviction API (the API server checks the
//! PodDisruptionBudget and answers its refusal with 429, once, never retried), deletions
//! with a grace period, and the fresh field-selected LIST of a node's pods.
//!
//! No controller runs: a budget's status (how many pods it may lose) is written by the
//! test as the disruption controller would, and the API server's eviction decrements it.

use nodewright_engine::ports::{Cluster, ErrorKind};
use serde_json::{Value, json};

use super::{Setup, api_server, node, pdb, pod};

/// A running, ready `app: web` pod bound to `node`.
fn web_pod(name: &str, node: &str) -> Value {
    let mut p = pod("default", name, "100m");
    p["metadata"]["labels"] = json!({"app": "web"});
    p["spec"]["nodeName"] = node.into();
    p["status"] = json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]});
    p
}

/// The `web` budget (`minAvailable: 1`) with the status the disruption controller
/// would give it over `healthy` ready pods of `expected`.
async fn web_budget(t: &Setup, healthy: i64, expected: i64) {
    let mut budget = pdb("default", "web");
    budget["status"] = json!({
        "observedGeneration": 1,
        "disruptionsAllowed": (healthy - 1).max(0),
        "currentHealthy": healthy,
        "desiredHealthy": 1,
        "expectedPods": expected,
    });
    t.cp.put(budget).await;
}

const EVICTION_WEB_0: &str = "/api/v1/namespaces/default/pods/web-0/eviction";

#[tokio::test]
async fn eviction_succeeds_when_the_budget_allows_it_and_the_pod_is_going() {
    let t = api_server().await;
    t.cp.put(web_pod("web-0", "n1")).await;
    t.cp.put(web_pod("web-1", "n2")).await;
    web_budget(&t, 2, 2).await; // minAvailable 1 of 2 healthy: one may go

    t.cluster
        .evict_pod("default", "web-0")
        .await
        .expect("evicted");

    // Bound to a node: it terminates there (no kubelet runs here to finish it).
    let evicted =
        t.cp.get("Pod", Some("default"), "web-0")
            .await
            .expect("terminating");
    assert!(
        evicted["metadata"]["deletionTimestamp"].is_string(),
        "{evicted:#}"
    );
    let request = &t.proxy.requests()[0];
    assert_eq!(
        (
            request.method.as_str(),
            request.path.as_str(),
            request.status
        ),
        ("POST", EVICTION_WEB_0, 201)
    );
    assert!(
        request.query.contains("fieldValidation=Strict"),
        "{request:?}"
    );
    assert_eq!(
        request.body.as_ref().map(|b| b["kind"].clone()),
        Some(json!("Eviction"))
    );
    let budget =
        t.cp.get("PodDisruptionBudget", Some("default"), "web")
            .await
            .unwrap();
    assert_eq!(
        budget["status"]["disruptionsAllowed"], 0,
        "the API server counted it against the budget"
    );
}

#[tokio::test]
async fn a_budget_refusal_is_disruption_budget_at_once_with_one_request() {
    let t = api_server().await;
    t.cp.put(web_pod("web-0", "n1")).await;
    t.cp.put(web_pod("web-1", "n2")).await;
    web_budget(&t, 2, 2).await;
    t.cluster
        .evict_pod("default", "web-0")
        .await
        .expect("the first may go");

    let error = t
        .cluster
        .evict_pod("default", "web-1")
        .await
        .expect_err("refused");

    assert_eq!(error.kind(), ErrorKind::DisruptionBudget);
    let path = "/api/v1/namespaces/default/pods/web-1/eviction";
    assert_eq!(t.proxy.count("POST", path), 1, "no retry of the 429");
    let web_1 = t.cp.get("Pod", Some("default"), "web-1").await;
    assert!(
        web_1.is_some_and(|p| p["metadata"].get("deletionTimestamp").is_none()),
        "the pod stays"
    );
    let status = t.proxy.requests().last().map(|r| r.status);
    assert_eq!(status, Some(429));
}

#[tokio::test]
async fn the_refusal_carries_the_real_servers_status_body() {
    let t = api_server().await;
    t.cp.put(web_pod("web-0", "n1")).await;
    web_budget(&t, 1, 1).await;
    let error = t
        .cluster
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
    let t = api_server().await;
    let mut pending = pod("default", "web-9", "100m");
    pending["metadata"]["labels"] = json!({"app": "web"});
    t.cp.put(pending).await;
    web_budget(&t, 0, 0).await;
    t.cluster
        .evict_pod("default", "web-9")
        .await
        .expect("a pending pod is not protected");
    // Never scheduled: the API server deletes it at once.
    assert!(t.cp.get("Pod", Some("default"), "web-9").await.is_none());
    let error = t
        .cluster
        .evict_pod("default", "web-9")
        .await
        .expect_err("gone");
    assert_eq!(error.kind(), ErrorKind::NotFound);
}

#[tokio::test]
async fn delete_pod_sends_the_grace_period_and_delete_node_removes_the_node() {
    let t = api_server().await;
    t.cp.put(web_pod("web-0", "n1")).await;
    t.cp.put(node("n1")).await;

    t.cluster
        .delete_pod("default", "web-0", 17)
        .await
        .expect("deleted");
    t.cluster.delete_node("n1").await.expect("deleted");

    let terminating =
        t.cp.get("Pod", Some("default"), "web-0")
            .await
            .expect("bound to a node: it terminates there");
    assert_eq!(
        terminating["metadata"]["deletionGracePeriodSeconds"], 17,
        "{terminating:#}"
    );
    assert!(t.cp.get("Node", None, "n1").await.is_none());
}

#[tokio::test]
async fn deleting_what_is_already_gone_is_not_found() {
    let t = api_server().await;
    assert_eq!(
        t.cluster
            .delete_pod("default", "nope", 0)
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        t.cluster.delete_node("nope").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        t.cluster
            .evict_pod("default", "nope")
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );
}

#[tokio::test]
async fn pods_on_node_lists_with_a_field_selector() {
    let t = api_server().await;
    t.cp.put(web_pod("web-0", "n1")).await;
    t.cp.put(web_pod("web-1", "n2")).await;
    t.cp.put(pod("default", "pending", "100m")).await;

    let pods = t.cluster.pods_on_node("n1").await.expect("listed");

    assert_eq!(
        pods.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        ["web-0"]
    );
    let request = t
        .proxy
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
