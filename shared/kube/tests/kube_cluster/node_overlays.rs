//! NodeOverlays (`karpenter.sh/v1alpha1`) through KubeCluster: listed and watched, each
//! valid or with why not; a cluster without the CRD has none (and is not asked about it
//! again for minutes); one RBAC forbids is unreadable, not fatal; their status written
//! on `/status`.

use std::time::Duration;

use nodewright_core::api::PriceChange;
use nodewright_engine::ports::{Cluster, Condition, ErrorKind, ObjectKind, StatusUpdate};
use serde_json::{Value, json};

use super::{T0, api_server, condition_of, eventually, narrow_role, without_resource};

const NODE_OVERLAYS_PATH: &str = "/apis/karpenter.sh/v1alpha1/nodeoverlays";

fn overlay(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": name},
        "spec": spec,
    })
}

fn savings() -> Value {
    overlay(
        "savings",
        json!({
            "requirements": [{"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5"]}],
            "priceAdjustment": "-30%",
            "weight": 10,
        }),
    )
}

#[tokio::test]
async fn node_overlays_are_read_valid_or_with_why_not() {
    let t = api_server().await;
    t.cp.put(savings()).await;
    // The CRD takes a negative quantity; Karpenter's runtime validation does not.
    t.cp.put(overlay(
        "broken",
        json!({"requirements": [], "capacity": {"example.com/gpu": "-1"}}),
    ))
    .await;
    let state = t.cluster.state().await.expect("the state");
    let mut overlays = state.node_overlays.clone();
    overlays.sort_by_key(|o| match o {
        Ok(o) => o.name.clone(),
        Err(i) => i.name.clone(),
    });
    assert_eq!(overlays.len(), 2, "{overlays:?}");
    let broken = overlays[0].as_ref().expect_err("a negative capacity");
    assert_eq!(broken.name, "broken");
    assert!(
        broken
            .message
            .contains("spec.capacity.example.com/gpu: must not be negative"),
        "{}",
        broken.message
    );
    let valid = overlays[1].as_ref().expect("valid");
    assert_eq!(valid.weight, 10);
    assert_eq!(valid.price, Some(PriceChange::Percent(-30.0)));

    // A change arrives through the watch.
    t.cp.remove("NodeOverlay", None, "broken").await;
    eventually(
        "the deletion arrives by the watch",
        Duration::from_secs(30),
        || async {
            let state = t.cluster.state().await.expect("the state");
            state.node_overlays.len() == 1 && state.node_overlays[0].is_ok()
        },
    )
    .await;
}

#[tokio::test]
async fn a_cluster_without_the_node_overlay_crd_has_no_overlays_and_no_error() {
    let t = api_server().await;
    t.cp.uninstall("nodeoverlays.karpenter.sh").await;
    let state = t.cluster.state().await.expect("no CRD is not an error");
    assert!(state.node_overlays.is_empty());
    assert!(state.unreadable.is_empty(), "{:?}", state.unreadable);
    assert!(state.invalid.is_empty(), "{:?}", state.invalid);
    // Long enough for a watcher retrying at its backoff (0.8 s, then 1.6 s...) to
    // have listed again; a missing kind waits minutes.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for _ in 0..3 {
        t.cluster.state().await.expect("later reads too");
    }
    assert_eq!(
        t.proxy.count_lists(NODE_OVERLAYS_PATH),
        1,
        "a missing kind is asked about again in minutes, not at every read"
    );
}

#[tokio::test]
async fn node_overlays_forbidden_by_rbac_are_unreadable_not_fatal() {
    let t = api_server().await;
    narrow_role(
        &t.cp,
        without_resource("nodeoverlays"),
        ("list", "karpenter.sh", "nodeoverlays"),
    )
    .await;
    let state = t.cluster.state().await.expect("the rest is served");
    let kinds: Vec<(&str, ErrorKind)> = state
        .unreadable
        .iter()
        .map(|u| (u.kind.as_str(), u.error_kind))
        .collect();
    assert_eq!(kinds, [("nodeoverlays", ErrorKind::Unauthorized)]);
}

#[tokio::test]
async fn a_node_overlay_status_write_sets_validation_succeeded() {
    let t = api_server().await;
    t.cp.put(savings()).await;
    let update = StatusUpdate {
        conditions: vec![
            Condition::failed(
                "ValidationSucceeded",
                "Conflict",
                "conflict with another overlay",
            ),
            Condition::failed("Ready", "Conflict", "conflict with another overlay"),
        ],
        fields: Default::default(),
    };
    let changed = t
        .cluster
        .update_status(ObjectKind::NodeOverlay, "savings", &update, T0)
        .await
        .expect("status written");
    assert!(changed);
    let object =
        t.cp.get("NodeOverlay", None, "savings")
            .await
            .expect("the overlay");
    let condition = condition_of(&object, "ValidationSucceeded");
    assert_eq!(condition["status"], "False");
    assert_eq!(condition["reason"], "Conflict");
    assert_eq!(object["spec"]["priceAdjustment"], "-30%", "spec untouched");
}
