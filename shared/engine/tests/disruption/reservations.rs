//! Capacity reservations in disruption commands: a replacement that takes the last
//! instance of a reservation is validated against the reservation as it was before it
//! launched, not abandoned because EC2 now counts it as full.

use nodewright_core::api::model::{
    BudgetNodes, CapacityReservationSelectorTerm, NodePool, NodeRequirement, Operator,
};
use nodewright_core::catalog::CapacityType;
use nodewright_core::testing::{node_pool, pod};
use nodewright_core::well_known::{LABEL_CAPACITY_RESERVATION_ID, LABEL_CAPACITY_TYPE};
use nodewright_sim::fakes::FakeReservation;

use super::System;

/// m5.xlarge only, reserved or on-demand, every node free to go at once.
fn reserved_or_on_demand_pool() -> NodePool {
    let req = |key: &str, values: &[&str]| NodeRequirement {
        key: key.into(),
        operator: Operator::In,
        values: values.iter().map(|v| v.to_string()).collect(),
        min_values: None,
    };
    let mut pool = node_pool(
        "general-purpose",
        vec![
            req("node.kubernetes.io/instance-type", &["m5.xlarge"]),
            req(LABEL_CAPACITY_TYPE, &["reserved", "on-demand"]),
        ],
    );
    pool.disruption.budgets[0].nodes = BudgetNodes::Percent(100);
    pool
}

#[tokio::test(start_paused = true)]
async fn a_replacement_taking_a_reservations_last_instance_is_validated_and_its_node_goes() {
    let sys = System::deciding_with_core(reserved_or_on_demand_pool());
    sys.world.cluster.with_state(|s| {
        s.node_classes[0].capacity_reservation_selector_terms =
            vec![CapacityReservationSelectorTerm {
                id: Some("cr-0aaaa".into()),
                ..Default::default()
            }];
    });
    // No reservation yet: the pod's node is on-demand.
    sys.world.cluster.add_pod(pod("train-0", "3", "4Gi"));
    sys.provision(2).await;
    let nodes = sys.live_nodes();
    assert_eq!(nodes.len(), 1, "{:#?}", sys.claims());
    let old = nodes[0].clone();
    assert_eq!(
        sys.instance_of(&old).instance.capacity_type,
        CapacityType::OnDemand
    );

    // A reservation of one appears: the node moves into it. Once the replacement runs
    // there, EC2 has none left; validation must not read that as "the pod would need
    // on-demand again".
    sys.world.cloud.add_reservation(FakeReservation::new(
        "cr-0aaaa",
        "m5.xlarge",
        "us-east-1a",
        1,
    ));
    sys.run(5).await;
    let log: Vec<String> = sys
        .world
        .store
        .all_decisions()
        .into_iter()
        .map(|d| format!("{}: {}", d.action, d.reason))
        .collect();
    assert!(!log.iter().any(|d| d.starts_with("abandoned")), "{log:#?}");
    assert!(log.iter().any(|d| d.starts_with("validated ")), "{log:#?}");
    let nodes = sys.live_nodes();
    assert_eq!(nodes.len(), 1, "{log:#?}");
    assert_ne!(nodes[0], old, "{log:#?}");
    let replacement = sys.instance_of(&nodes[0]);
    assert_eq!(replacement.instance.capacity_type, CapacityType::Reserved);
    let claim = sys.claim_of(&nodes[0]);
    // Pinned to the reservation: had it been full at launch, the launch would have
    // failed rather than fall back to an on-demand node priced as reserved.
    assert_eq!(claim.capacity_types, vec![CapacityType::Reserved]);
    assert_eq!(
        claim
            .labels
            .get(LABEL_CAPACITY_RESERVATION_ID)
            .map(String::as_str),
        Some("cr-0aaaa")
    );
    assert_eq!(sys.pods_on(&nodes[0]), 1);
    sys.assert_settled();
}

#[tokio::test(start_paused = true)]
async fn a_node_in_a_reservation_its_class_no_longer_selects_is_replaced_as_drifted() {
    let sys = System::deciding_with_core(reserved_or_on_demand_pool());
    let select = |ids: &[&str]| {
        sys.world.cluster.with_state(|s| {
            s.node_classes[0].capacity_reservation_selector_terms = ids
                .iter()
                .map(|id| CapacityReservationSelectorTerm {
                    id: Some(id.to_string()),
                    ..Default::default()
                })
                .collect();
        });
    };
    select(&["cr-0aaaa"]);
    sys.world.cloud.add_reservation(FakeReservation::new(
        "cr-0aaaa",
        "m5.xlarge",
        "us-east-1a",
        1,
    ));
    sys.world.cluster.add_pod(pod("train-0", "3", "4Gi"));
    sys.provision(2).await;
    let old = sys.live_nodes();
    assert_eq!(old.len(), 1, "{:#?}", sys.claims());
    assert_eq!(
        sys.instance_of(&old[0]).instance.capacity_type,
        CapacityType::Reserved
    );
    // Settled: a minute of both jobs disrupts nothing.
    sys.run(1).await;
    assert_eq!(sys.live_nodes(), old);

    // The class now selects another reservation (Karpenter's CapacityReservationDrift).
    sys.world.cloud.add_reservation(FakeReservation::new(
        "cr-0bbbb",
        "m5.xlarge",
        "us-east-1a",
        1,
    ));
    select(&["cr-0bbbb"]);
    sys.run(5).await;
    let nodes = sys.live_nodes();
    let log = sys.decisions("disruption");
    assert_eq!(nodes.len(), 1, "{log:#?}");
    assert_ne!(nodes, old, "replaced: {log:#?}");
    let gone = sys.claim_of(&old[0]);
    assert_eq!(
        gone.disruption.map(|d| d.cause),
        Some(nodewright_core::nodeclaim::DisruptionCause::Drifted)
    );
    let replacement = sys.instance_of(&nodes[0]).instance;
    assert_eq!(
        replacement.capacity_reservation_id.as_deref(),
        Some("cr-0bbbb"),
        "{log:#?}"
    );
    assert!(
        log.iter().any(|d| d.contains("(Drift, Drifted: ")
            && d.contains("capacity reservation")
            && d.contains("no longer")),
        "{log:#?}"
    );
    assert_eq!(sys.pods_on(&nodes[0]), 1);
    sys.assert_settled();
}
