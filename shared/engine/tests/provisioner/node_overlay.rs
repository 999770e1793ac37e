//! NodeOverlays through the provisioner's tick, over the in-memory fakes: the plan
//! prices with them, and every overlay's `ValidationSucceeded` is written — True, or
//! False with reason `Conflict` or `RuntimeValidation`.

use std::collections::BTreeMap;

use nodewright_core::api::model::{NodeRequirement, Operator};
use nodewright_core::api::{InvalidOverlay, NodeOverlay, PriceChange, ReadOverlay};
use nodewright_core::testing::req;
use nodewright_engine::ports::{ConditionStatus, ObjectKind};
use nodewright_sim::fakes::FakeCluster;

use super::Env;

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

/// The parent's fakes, the NodePool limited to c5.large and m5.large on demand, one
/// pending pod, and `overlays`.
fn env_with(overlays: Vec<ReadOverlay>) -> Env {
    let env = Env::new();
    env.require([
        req(
            "node.kubernetes.io/instance-type",
            Operator::In,
            &["c5.large", "m5.large"],
        ),
        req("karpenter.sh/capacity-type", Operator::In, &["on-demand"]),
    ]);
    env.cluster.set_node_overlays(overlays);
    env.add_pods("web", 1);
    env
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
    let report = env_with(Vec::new()).provisioner().tick().await.unwrap();
    assert_eq!(report.planned[0].instance_type, "c5.large", "{report:?}");
}

#[tokio::test]
async fn a_discount_overlay_plans_m5_and_every_overlay_gets_its_validation_status() {
    let env = env_with(vec![
        overlay("savings", 10, "m5", PriceChange::Percent(-30.0)),
        // Equal weights: "y" is taken first (later in the alphabet), "x" conflicts.
        overlay("x", 1, "c5", PriceChange::Price(0.01)),
        overlay("y", 1, "c5", PriceChange::Price(0.2)),
        Err(InvalidOverlay {
            name: "broken".into(),
            message: "spec.capacity.cpu: resource \"cpu\" is restricted".into(),
        }),
    ]);
    let report = env.provisioner().tick().await.unwrap();
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
        validation(&env.cluster, "savings"),
        (
            ConditionStatus::True,
            "ValidationSucceeded".into(),
            String::new()
        )
    );
    assert_eq!(validation(&env.cluster, "y").0, ConditionStatus::True);
    assert_eq!(
        validation(&env.cluster, "x"),
        (
            ConditionStatus::False,
            "Conflict".into(),
            "conflict with another overlay".into()
        )
    );
    let (status, reason, message) = validation(&env.cluster, "broken");
    assert_eq!(
        (status, reason.as_str()),
        (ConditionStatus::False, "RuntimeValidation")
    );
    assert!(message.contains("\"cpu\" is restricted"), "{message}");
    let ready = env
        .cluster
        .condition(ObjectKind::NodeOverlay, "x", "Ready")
        .expect("Ready")
        .condition;
    assert_eq!(
        (ready.status, ready.reason.as_str()),
        (ConditionStatus::False, "Conflict")
    );
}
