//! The test control plane itself: it starts with Karpenter's CRDs and the functions'
//! RBAC, the product reads it as the functions' user, the fault proxy forwards, counts,
//! injects and cuts, and the fixtures are written strictly.

use std::time::Duration;

use nodewright_engine::ports::{Cluster, ErrorKind};
use nodewright_kube::testing::{ControlPlane, FaultProxy, Options};

#[tokio::test]
async fn the_control_plane_serves_karpenters_crds_and_the_functions_read_it() {
    let cp = ControlPlane::start_with(Options::api_server_only()).await;
    assert!(
        cp.info().ready_seconds > 0.0,
        "the start is timed and reported"
    );
    assert_eq!(cp.info().kubernetes_version, "v1.36.3");
    assert!(
        cp.info()
            .crds
            .contains(&"nodeoverlays.karpenter.sh".to_string())
    );

    cp.put(super::default_node_class()).await;
    cp.put(super::node_pool("general-purpose")).await;
    let state = cp
        .cluster()
        .state()
        .await
        .expect("state as the functions' user");
    assert_eq!(state.node_pools.len(), 1);
    assert_eq!(state.node_classes.len(), 1);
}

#[tokio::test]
async fn the_proxy_forwards_counts_injects_and_cuts_watches() {
    let cp = ControlPlane::start_with(Options::api_server_only()).await;
    let proxy = FaultProxy::start(&cp).await;
    let cluster = cp.cluster_at(&proxy.url(), None, &cp.nodewright().token);

    proxy.fail_next_list("/api/v1/nodes", 500);
    let error = cluster.state().await.expect_err("the injected 500");
    assert_eq!(error.kind(), ErrorKind::Unavailable);

    // The view's watcher lists again after its backoff. The deadline only bounds a
    // hang: CI runs suites side by side on two cores.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let state = loop {
        match cluster.state().await {
            Ok(state) => break state,
            Err(e) if tokio::time::Instant::now() < deadline => {
                assert_eq!(e.kind(), ErrorKind::Unavailable);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("no state through the proxy: {e}"),
        }
    };
    assert!(state.nodes.is_empty());
    assert_eq!(proxy.count_lists("/api/v1/nodes"), 2);
    assert!(proxy.bytes_served() > 0);

    // The view watches: a node put now arrives by its watch. Wait for the nodes'
    // watch itself (another kind's may open first): cutting before it streams would
    // cut nothing of it, and the node would arrive by its first watch.
    let nodes_watching = || proxy.count_watches("/api/v1/nodes") == 1 && proxy.open_watches() > 0;
    while !nodes_watching() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        nodes_watching(),
        "the view's watch of nodes streams through the proxy"
    );
    proxy.drop_watches();
    cp.put(super::node("node-a")).await;
    loop {
        let state = cluster.state().await.expect("state");
        if !state.nodes.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the node never arrived"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        proxy.count_watches("/api/v1/nodes") >= 2,
        "the cut watch was resumed"
    );
}

/// What the tests' fixtures rest on: a write the schema does not know is refused, not
/// pruned (strict field validation), and a fixture's status is written through
/// `/status`, as a controller would.
#[tokio::test]
async fn fixtures_are_written_strictly_and_with_their_status() {
    let cp = ControlPlane::start_with(Options::api_server_only()).await;
    let mut pool = super::node_pool("general-purpose");
    pool["status"] = serde_json::json!({"nodes": 1});
    let stored = cp.put(pool).await;
    assert_eq!(stored["status"]["nodes"], 1);
    assert_eq!(stored["metadata"]["generation"], 1);

    let mut typo = super::node_pool("typo");
    typo["spec"]["wieght"] = serde_json::json!(1);
    let refused = cp.try_put(typo).await.expect_err("strict field validation");
    assert!(matches!(refused.code, 400 | 422), "{refused}");
    assert!(cp.get("NodePool", None, "typo").await.is_none());
}
