//! How failures come back (classified by status code, the kube error kept, no retries),
//! a kind RBAC forbids, the bearer token asked of its provider on every request, the
//! server's version, and who the requests say they are from.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use nodewright_engine::ports::{BoxError, Cluster, ErrorKind};
use nodewright_kube::testing::{ControlPlane, Options};
use nodewright_kube::{ApiRate, KubeCluster, TokenProvider};

use super::{api_server, eventually, narrow_role, node, nodewright_may, without_resource};

#[tokio::test]
async fn throttling_comes_back_as_throttled_at_once_without_retries() {
    let t = api_server().await;
    t.proxy.fail_next("GET", "/api/v1/pods", 429);

    let error = t.cluster.pods().await.expect_err("throttled");

    assert_eq!(error.kind(), ErrorKind::Throttled);
    assert_eq!(
        t.proxy.count_lists("/api/v1/pods"),
        1,
        "no retry of the 429"
    );
    assert!(
        std::error::Error::source(&error).is_some(),
        "the kube error is kept"
    );
}

/// A 500 is injected (a real server gives one only when it is broken); the 403 is the
/// real RBAC's, for a role that lacks the pods, and goes when the role has them again.
#[tokio::test]
async fn a_server_error_is_unavailable_and_forbidden_is_unauthorized() {
    let t = api_server().await;
    t.proxy.fail_next_list("/api/v1/nodes", 500);
    assert_eq!(
        t.cluster.state().await.expect_err("500").kind(),
        ErrorKind::Unavailable
    );

    let role =
        t.cp.get("ClusterRole", None, "nodewright")
            .await
            .expect("the functions' ClusterRole");
    narrow_role(&t.cp, without_resource("pods"), ("list", "", "pods")).await;
    let other = t.another_process();
    let error = other.state().await.expect_err("403");
    assert_eq!(error.kind(), ErrorKind::Unauthorized, "{error}");

    // The role is whole again: the watcher lists again (after its backoff), and the
    // next reads are served.
    t.cp.modify("ClusterRole", None, "nodewright", |now| {
        now["rules"] = role["rules"].clone();
    })
    .await;
    eventually(
        "RBAC allows listing pods again",
        Duration::from_secs(30),
        || async { nodewright_may(&t.cp, "list", "", "pods").await },
    )
    .await;
    eventually(
        "a state read once the role is whole",
        Duration::from_secs(60),
        || async { other.state().await.is_ok() },
    )
    .await;
}

#[tokio::test]
async fn a_forbidden_optional_kind_is_read_as_unreadable_and_the_rest_is_served() {
    let t = api_server().await;
    narrow_role(
        &t.cp,
        without_resource("poddisruptionbudgets"),
        ("list", "policy", "poddisruptionbudgets"),
    )
    .await;
    narrow_role(
        &t.cp,
        without_resource("persistentvolumeclaims"),
        ("list", "", "persistentvolumeclaims"),
    )
    .await;
    t.cp.put(node("node-a")).await;

    let state = t
        .cluster
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
    let cp = ControlPlane::start_with(Options::api_server_only()).await;
    let cluster = cp.cluster();
    drop(cp);
    let error = cluster
        .kubernetes_version()
        .await
        .expect_err("nobody listens");
    assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
}

/// The EKS suffixes (`v1.33.4-eks-…`, minor `33+`) are the unit tests' (`cluster.rs`);
/// here, what a real server answers.
#[tokio::test]
async fn the_kubernetes_version_is_major_dot_minor() {
    let t = api_server().await;
    assert_eq!(
        t.cluster.kubernetes_version().await.expect("version"),
        "1.36"
    );
}

/// A provider whose tokens are given in turn, as the EKS one renews its token every
/// 14 minutes.
struct Tokens {
    tokens: Vec<String>,
    next: AtomicUsize,
}

#[async_trait]
impl TokenProvider for Tokens {
    async fn token(&self) -> Result<String, BoxError> {
        let i = self.next.fetch_add(1, Ordering::SeqCst);
        Ok(self.tokens[i % self.tokens.len()].clone())
    }
}

#[tokio::test]
async fn every_request_carries_the_token_the_provider_gives_now() {
    let t = api_server().await;
    let valid = t.cp.nodewright().token.clone();
    let cluster = KubeCluster::from_endpoint(
        &t.proxy.url(),
        None,
        Arc::new(Tokens {
            tokens: vec![valid, "expired-token".into()],
            next: AtomicUsize::new(0),
        }),
        ApiRate::default(),
    )
    .unwrap();

    cluster.kubernetes_version().await.expect("the first token");
    let refused = cluster
        .kubernetes_version()
        .await
        .expect_err("the second token is not one the server knows");
    assert_eq!(refused.kind(), ErrorKind::Unauthorized, "{refused}");
    cluster
        .kubernetes_version()
        .await
        .expect("the first token again");

    let statuses: Vec<u16> = t.proxy.requests().iter().map(|r| r.status).collect();
    assert_eq!(statuses, [200, 401, 200]);
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
    let t = api_server().await;
    let cluster = KubeCluster::from_endpoint(
        &t.proxy.url(),
        None,
        Arc::new(NoCredentials),
        ApiRate::default(),
    )
    .unwrap();

    let error = cluster.pods().await.expect_err("no token");

    assert_eq!(error.kind(), ErrorKind::Unauthorized, "{error}");
    assert!(t.proxy.requests().is_empty());
}

/// The API server's audit log (what a FlowSchema and an operator see) names the
/// functions' user and their User-Agent.
#[tokio::test]
async fn requests_say_who_sends_them() {
    let t = api_server().await;
    t.cluster.pods().await.expect("pods");
    let events = t.cp.audit_events();
    let list = events
        .iter()
        .find(|e| e["verb"] == "list" && e["objectRef"]["resource"] == "pods")
        .unwrap_or_else(|| panic!("no list of pods in the audit log: {events:#?}"));
    assert_eq!(list["user"]["username"], "nodewright");
    assert_eq!(
        list["userAgent"],
        concat!("nodewright/", env!("CARGO_PKG_VERSION"))
    );
}

/// The CLI's local runs: the cluster and the credentials a kubeconfig names.
#[tokio::test]
async fn a_kubeconfig_names_the_cluster_and_its_credentials() {
    let t = api_server().await;
    t.cp.put(node("node-a")).await;
    let cluster = KubeCluster::from_kubeconfig(&t.cp.nodewright().kubeconfig, ApiRate::default())
        .await
        .expect("a client from the functions' kubeconfig");
    assert_eq!(cluster.kubernetes_version().await.expect("version"), "1.36");
    assert_eq!(cluster.state().await.expect("state").nodes.len(), 1);
    assert!(
        t.cp.audit_events()
            .iter()
            .any(|e| e["verb"] == "list" && e["objectRef"]["resource"] == "nodes"),
        "read as the functions' user"
    );
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
