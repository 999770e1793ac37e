//! NodeOverlays (`karpenter.sh/v1alpha1`) through KubeCluster and the fake API server:
//! listed and watched, each valid or with why not; a cluster without the CRD has none;
//! their status written on `/status`.

use nodewright_core::api::PriceChange;
use nodewright_engine::ports::{Cluster, Condition, ErrorKind, ObjectKind, StatusUpdate};
use serde_json::{Value, json};

use super::{T0, condition_of, fake};

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
    let (server, cluster) = fake().await;
    server.put(savings());
    server.put(overlay(
        "broken",
        json!({"requirements": [], "capacity": {"cpu": "1"}}),
    ));
    let state = cluster.state().await.expect("the state");
    let mut overlays = state.node_overlays.clone();
    overlays.sort_by_key(|o| match o {
        Ok(o) => o.name.clone(),
        Err(i) => i.name.clone(),
    });
    assert_eq!(overlays.len(), 2, "{overlays:?}");
    let broken = overlays[0].as_ref().expect_err("cpu is restricted");
    assert_eq!(broken.name, "broken");
    assert!(
        broken
            .message
            .contains("spec.capacity.cpu: resource \"cpu\" is restricted"),
        "{}",
        broken.message
    );
    let valid = overlays[1].as_ref().expect("valid");
    assert_eq!(valid.weight, 10);
    assert_eq!(valid.price, Some(PriceChange::Percent(-30.0)));

    // A change arrives through the watch.
    server.remove("NodeOverlay", None, "broken");
    let mut state = cluster.state().await.expect("the state");
    for _ in 0..100 {
        if state.node_overlays.len() == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        state = cluster.state().await.expect("the state");
    }
    assert_eq!(state.node_overlays.len(), 1, "{:?}", state.node_overlays);
    assert!(state.node_overlays[0].is_ok());
}

#[tokio::test]
async fn a_cluster_without_the_node_overlay_crd_has_no_overlays_and_no_error() {
    let (server, cluster) = fake().await;
    server.uninstall("NodeOverlay");
    let state = cluster.state().await.expect("no CRD is not an error");
    assert!(state.node_overlays.is_empty());
    assert!(state.unreadable.is_empty(), "{:?}", state.unreadable);
}

#[tokio::test]
async fn node_overlays_forbidden_by_rbac_are_unreadable_not_fatal() {
    let (server, cluster) = fake().await;
    server.forbid("/apis/karpenter.sh/v1alpha1/nodeoverlays");
    let state = cluster.state().await.expect("the rest is served");
    let kinds: Vec<(&str, ErrorKind)> = state
        .unreadable
        .iter()
        .map(|u| (u.kind.as_str(), u.error_kind))
        .collect();
    assert_eq!(kinds, [("nodeoverlays", ErrorKind::Unauthorized)]);
}

#[tokio::test]
async fn a_node_overlay_status_write_sets_validation_succeeded() {
    let (server, cluster) = fake().await;
    server.put(savings());
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
    let changed = cluster
        .update_status(ObjectKind::NodeOverlay, "savings", &update, T0)
        .await
        .expect("status written");
    assert!(changed);
    let object = server
        .get("NodeOverlay", None, "savings")
        .expect("the overlay");
    let condition = condition_of(&object, "ValidationSucceeded");
    assert_eq!(condition["status"], "False");
    assert_eq!(condition["reason"], "Conflict");
    assert_eq!(object["spec"]["priceAdjustment"], "-30%", "spec untouched");
}
