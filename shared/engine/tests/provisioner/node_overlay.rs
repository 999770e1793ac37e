//! NodeOverlays through the provisioner's tick, over the in-memory fakes: the plan
//! prices with them, and every overlay's `ValidationSucceeded` is written — True, or
//! False with reason `Conflict` or `RuntimeValidation`.

use std::collections::BTreeMap;
use std::sync::Arc;

use nodewright_core::api::model::{NodeRequirement, Operator};
use nodewright_core::api::{InvalidOverlay, NodeOverlay, PriceChange, ReadOverlay};
use nodewright_core::catalog::Catalog;
use nodewright_core::testing::{general_purpose_pool, pod, req};
use nodewright_engine::fakes::{FakeCloud, FakeCluster, ManualClock, MemoryStore, node_class};
use nodewright_engine::ports::{ConditionStatus, ObjectKind};
use nodewright_engine::{Ports, Provisioner, ProvisionerConfig};

const FAMILY: &str = "karpenter.k8s.aws/instance-family";

fn family(name: &str) -> NodeRequirement {
    req(FAMILY, Operator::In, &[name])
}

fn overlay(name: &str, weight: i32, on: &str, price: PriceChange) -> ReadOverlay {
    Ok(NodeOverlay {
        name: name.into(),
        weight,
        requirements: vec![family(on)],
        price: Some(price),
        capacity: BTreeMap::new(),
    })
}

/// One pool of c5.large and m5.large on demand, one pending pod, and `overlays`.
fn cluster_with(overlays: Vec<ReadOverlay>) -> (Provisioner, Arc<FakeCluster>) {
    let clock = Arc::new(ManualClock::default());
    let catalog = Catalog::embedded().clone();
    let cloud = Arc::new(FakeCloud::new(
        catalog.clone(),
        &["us-east-1a", "us-east-1b", "us-east-1c"],
        clock.clone(),
    ));
    let cluster = Arc::new(FakeCluster::new(Arc::new(catalog)));
    let mut pool = general_purpose_pool();
    pool.requirements.push(req(
        "node.kubernetes.io/instance-type",
        Operator::In,
        &["c5.large", "m5.large"],
    ));
    pool.requirements.push(req(
        "karpenter.sh/capacity-type",
        Operator::In,
        &["on-demand"],
    ));
    cluster.with_state(|s| {
        s.node_pools.push(pool);
        s.node_classes.push(node_class("default"));
    });
    cluster.set_node_overlays(overlays);
    cluster.add_pod(pod("web-0", "1", "2Gi"));
    let ports = Ports {
        cloud,
        cluster: cluster.clone(),
        store: Arc::new(MemoryStore::new()),
        clock,
    };
    let config = ProvisionerConfig::new("test-cluster", "holder-a");
    (Provisioner::new(ports, config), cluster)
}

fn validation(cluster: &FakeCluster, name: &str) -> (ConditionStatus, String, String) {
    let c = cluster
        .condition(ObjectKind::NodeOverlay, name, "ValidationSucceeded")
        .unwrap_or_else(|| panic!("no ValidationSucceeded on {name}"))
        .condition;
    (c.status, c.reason, c.message)
}

#[tokio::test]
async fn without_overlays_the_cheaper_c5_is_planned() {
    let (provisioner, _) = cluster_with(Vec::new());
    let report = provisioner.tick().await.unwrap();
    assert_eq!(report.planned[0].instance_type, "c5.large", "{report:?}");
}

#[tokio::test]
async fn a_discount_overlay_plans_m5_and_every_overlay_gets_its_validation_status() {
    let (provisioner, cluster) = cluster_with(vec![
        overlay("savings", 10, "m5", PriceChange::Percent(-30.0)),
        // Equal weights: "y" is taken first (later in the alphabet), "x" conflicts.
        overlay("x", 1, "c5", PriceChange::Price(0.01)),
        overlay("y", 1, "c5", PriceChange::Price(0.2)),
        Err(InvalidOverlay {
            name: "broken".into(),
            message: "spec.capacity.cpu: resource \"cpu\" is restricted".into(),
        }),
    ]);
    let report = provisioner.tick().await.unwrap();
    let planned = &report.planned[0];
    // m5.large at 0.096 × 0.7 beats c5.large at "y"'s 0.2; "x"'s 0.01 is not applied.
    assert_eq!(planned.instance_type, "m5.large", "{report:?}");
    assert!((planned.price_per_hour - 0.0672).abs() < 1e-9);
    assert_eq!(
        planned.instance_type_options,
        ["m5.large", "c5.large"],
        "options cheapest first at their overlaid prices"
    );
    // EC2 would launch the c5.large, cheaper at its list price, from a lowest-price
    // fleet: the launch asks for the overlaid order instead (prioritized).
    assert_eq!(report.launched[0].instance_type, "m5.large", "{report:?}");

    assert_eq!(
        validation(&cluster, "savings"),
        (
            ConditionStatus::True,
            "ValidationSucceeded".into(),
            String::new()
        )
    );
    assert_eq!(validation(&cluster, "y").0, ConditionStatus::True);
    assert_eq!(
        validation(&cluster, "x"),
        (
            ConditionStatus::False,
            "Conflict".into(),
            "conflict with another overlay".into()
        )
    );
    let (status, reason, message) = validation(&cluster, "broken");
    assert_eq!(
        (status, reason.as_str()),
        (ConditionStatus::False, "RuntimeValidation")
    );
    assert!(message.contains("\"cpu\" is restricted"), "{message}");
    let ready = cluster
        .condition(ObjectKind::NodeOverlay, "x", "Ready")
        .expect("Ready")
        .condition;
    assert_eq!(
        (ready.status, ready.reason.as_str()),
        (ConditionStatus::False, "Conflict")
    );
}
