//! Capacity reservations through the provisioner's tick, over the in-memory fakes: the
//! EC2NodeClass's `capacityReservationSelectorTerms` read through the `Cloud` port,
//! reserved offerings preferred while a reservation has room, the fallback to
//! on-demand once it is used up, the node labels, `CapacityReservationsReady`, and a
//! Capacity Block's nodes drained before it ends.

use std::time::Duration;

use nodewright_core::api::model::{CapacityReservationSelectorTerm, NodePool, Operator};
use nodewright_core::catalog::{CapacityType, ReservationType};
use nodewright_core::nodeclaim::{ClaimState, DisruptionCause, NodeClaim};
use nodewright_core::testing::{general_purpose_pool, pod};
use nodewright_core::well_known::{
    LABEL_CAPACITY_RESERVATION_ID, LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE,
    LABEL_CAPACITY_RESERVATION_TYPE, LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE,
};
use nodewright_engine::ports::{Clock, ConditionStatus, ErrorKind, ObjectKind, StoreError};
use nodewright_sim::fakes::{FakeReservation, ManualClock, StoreOp, node_class};

use super::Env;

/// The general-purpose pool limited to m5.xlarge, allowing reserved and on-demand.
fn reserved_pool() -> NodePool {
    let mut p = general_purpose_pool();
    for r in &mut p.requirements {
        if r.key == LABEL_CAPACITY_TYPE {
            r.values = vec!["reserved".into(), "on-demand".into()];
        }
    }
    let mut it = p.requirements[0].clone();
    it.key = LABEL_INSTANCE_TYPE.into();
    it.operator = Operator::In;
    it.values = vec!["m5.xlarge".into()];
    p.requirements.push(it);
    p
}

/// The parent's fakes, with `reservation` in EC2, the class selecting it and the pool
/// allowing reserved capacity.
fn env_with(reservation: FakeReservation) -> Env {
    env_with_all(vec![reservation])
}

/// [`env_with`] for several reservations, each selected by its id.
fn env_with_all(reservations: Vec<FakeReservation>) -> Env {
    let env = Env::new();
    let mut class = node_class("default");
    for r in reservations {
        class
            .capacity_reservation_selector_terms
            .push(CapacityReservationSelectorTerm {
                id: Some(r.id.clone()),
                ..Default::default()
            });
        env.cloud.add_reservation(r);
    }
    env.cluster.with_state(|s| {
        s.node_pools = vec![reserved_pool()];
        s.node_classes = vec![class];
    });
    env
}

/// Claim `name` as the store has it now.
fn stored(env: &Env, name: &str) -> NodeClaim {
    env.store
        .claims()
        .into_iter()
        .find(|c| c.name == name)
        .expect("the claim is stored")
}

fn live_claims(env: &Env) -> Vec<NodeClaim> {
    env.store
        .claims()
        .into_iter()
        .filter(|c| !c.state.is_terminal())
        .collect()
}

/// Pods of 3 CPUs: one per m5.xlarge (3.92 allocatable).
fn add_pods(env: &Env, n: usize) {
    for i in 0..n {
        env.cluster.add_pod(pod(&format!("train-{i}"), "3", "4Gi"));
    }
}

#[tokio::test]
async fn reserved_capacity_is_used_up_first_then_on_demand_and_the_count_comes_back_on_termination()
{
    let env = env_with(FakeReservation::new(
        "cr-0aaaa",
        "m5.xlarge",
        "us-east-1a",
        2,
    ));
    add_pods(&env, 3);
    let prov = env.provisioner();
    let report = prov.tick().await.unwrap();
    assert_eq!(report.launched.len(), 3, "{report:#?}");
    let reserved: Vec<_> = report
        .launched
        .iter()
        .filter(|l| l.capacity_type == CapacityType::Reserved)
        .collect();
    assert_eq!(reserved.len(), 2, "{report:#?}");
    assert!(reserved.iter().all(|l| l.zone == "us-east-1a"));
    // Priced as Karpenter prices a reservation: as good as free.
    assert!(reserved.iter().all(|l| l.price_per_hour < 1e-6));
    assert_eq!(
        report
            .launched
            .iter()
            .filter(|l| l.capacity_type == CapacityType::OnDemand)
            .count(),
        1,
        "the third falls back to on-demand: {report:#?}"
    );
    assert_eq!(env.cloud.reservation_available("cr-0aaaa"), Some(0));
    // The nodes carry the reservation's labels once registered.
    let claims = live_claims(&env);
    let in_reservation: Vec<&NodeClaim> = claims
        .iter()
        .filter(|c| c.capacity_type == Some(CapacityType::Reserved))
        .collect();
    assert!(in_reservation.iter().all(|c| {
        c.labels
            .get(LABEL_CAPACITY_RESERVATION_ID)
            .map(String::as_str)
            == Some("cr-0aaaa")
            && c.labels
                .get(LABEL_CAPACITY_RESERVATION_TYPE)
                .map(String::as_str)
                == Some("default")
    }));
    let nodes = env.cluster.register_from(&env.cloud);
    for n in &nodes {
        env.cluster.set_ready(n);
    }
    prov.tick().await.unwrap();
    let labelled: Vec<_> = env
        .cluster
        .nodes()
        .into_iter()
        .filter(|n| n.labels.get(LABEL_CAPACITY_TYPE).map(String::as_str) == Some("reserved"))
        .collect();
    assert_eq!(labelled.len(), 2);
    assert!(labelled.iter().all(|n| {
        n.labels
            .get(LABEL_CAPACITY_RESERVATION_ID)
            .map(String::as_str)
            == Some("cr-0aaaa")
    }));
    let class = env
        .cluster
        .status(ObjectKind::Ec2NodeClass, "default")
        .expect("the class's status");
    let ready = class
        .condition("CapacityReservationsReady")
        .expect("CapacityReservationsReady");
    assert_eq!(ready.condition.status, ConditionStatus::True);

    // An instance leaving the reservation gives its place back.
    let id = in_reservation[0].instance_id.clone().unwrap();
    env.ports.cloud.terminate(&[id]).await.unwrap();
    assert_eq!(env.cloud.reservation_available("cr-0aaaa"), Some(1));
}

#[tokio::test]
async fn a_capacity_blocks_nodes_are_drained_before_it_ends_and_nothing_new_launches_into_it() {
    let clock_start = ManualClock::default().now();
    let end = clock_start + 3 * 3600;
    let mut block = FakeReservation::new("cr-0aaaa", "m5.xlarge", "us-east-1b", 2);
    block.reservation_type = ReservationType::CapacityBlock;
    block.end_time = Some(end);
    let env = env_with(block);
    add_pods(&env, 1);
    let prov = env.provisioner();
    let report = prov.tick().await.unwrap();
    assert_eq!(report.launched.len(), 1);
    assert_eq!(report.launched[0].capacity_type, CapacityType::Reserved);
    let claim = live_claims(&env).remove(0);
    assert_eq!(
        claim
            .labels
            .get(LABEL_CAPACITY_RESERVATION_TYPE)
            .map(String::as_str),
        Some("capacity-block")
    );
    let nodes = env.cluster.register_from(&env.cloud);
    env.cluster.set_ready(&nodes[0]);
    env.cluster.bind_pod("default/train-0", &nodes[0]);
    prov.tick().await.unwrap();

    // 39 minutes before its end the block is expiring: its node is taken away with a
    // deadline of 30 minutes before the end.
    env.clock
        .advance(Duration::from_secs((end - clock_start - 39 * 60) as u64));
    let report = prov.tick().await.unwrap();
    let claim = stored(&env, &claim.name);
    // Drained within the poll: its one pod went to a new node.
    assert!(
        claim.state.is_being_taken_away() || claim.state == ClaimState::Terminated,
        "{claim:#?}"
    );
    let disruption = claim.disruption.as_ref().unwrap();
    assert_eq!(
        disruption.cause,
        DisruptionCause::CapacityReservationExpiring
    );
    assert_eq!(disruption.deadline, Some(end - 30 * 60));
    assert!(
        report
            .lifecycle
            .disrupted
            .iter()
            .any(|d| d.claim == claim.name
                && d.cause == DisruptionCause::CapacityReservationExpiring),
        "{report:#?}"
    );
    assert!(
        env.store
            .all_decisions()
            .iter()
            .any(|d| d.action.contains("before its capacity block ends")),
    );
    // The block still has room, but nothing new launches into an expiring one.
    assert_eq!(env.cloud.reservation_available("cr-0aaaa"), Some(2));
    env.cluster.add_pod(pod("train-9", "3", "4Gi"));
    let report = prov.tick().await.unwrap();
    assert_eq!(report.launched.len(), 1, "{report:#?}");
    assert_eq!(report.launched[0].capacity_type, CapacityType::OnDemand);
}

/// The fakes with cr-0aaaa (2 m5.xlarge in us-east-1a) after a provisioner tick that
/// died once CreateFleet launched into it, before the claim was recorded `Launched`:
/// the claim is left `Launching`, its instance running in cr-0aaaa.
async fn crashed_after_launching_into_the_reservation() -> Env {
    let env = env_with(FakeReservation::new(
        "cr-0aaaa",
        "m5.xlarge",
        "us-east-1a",
        2,
    ));
    add_pods(&env, 1);
    env.store.fail_next(
        StoreOp::UpdateClaim,
        StoreError::new(ErrorKind::Unavailable, "DynamoDB timed out"),
    );
    assert!(env.provisioner().tick().await.is_err());
    let instances = env.cloud.instances();
    assert_eq!(instances.len(), 1);
    assert_eq!(instances[0].instance.capacity_type, CapacityType::Reserved);
    assert_eq!(
        instances[0].instance.capacity_reservation_id.as_deref(),
        Some("cr-0aaaa")
    );
    assert_eq!(env.claims_in(ClaimState::Launching).len(), 1);
    env
}

fn label<'c>(claim: &'c NodeClaim, key: &str) -> Option<&'c str> {
    claim.labels.get(key).map(String::as_str)
}

#[tokio::test]
async fn a_claim_adopted_after_a_crash_past_create_fleet_keeps_its_reservation() {
    let env = crashed_after_launching_into_the_reservation().await;
    let prov = env.provisioner();
    let report = prov.tick().await.unwrap();
    assert_eq!(report.adopted.len(), 1, "{report:#?}");
    assert!(report.launched.is_empty(), "{report:#?}");
    let claim = &env.claims_in(ClaimState::Launched)[0];
    assert_eq!(claim.capacity_type, Some(CapacityType::Reserved));
    assert_eq!(
        label(claim, LABEL_CAPACITY_RESERVATION_ID),
        Some("cr-0aaaa")
    );
    assert_eq!(
        label(claim, LABEL_CAPACITY_RESERVATION_TYPE),
        Some("default")
    );
    // Priced as reserved, though the reservation it fills may have no room left.
    assert!(claim.price_per_hour.is_some_and(|p| p < 1e-6), "{claim:?}");
    // Adopting counts nothing twice: EC2's count already holds the instance.
    assert_eq!(env.cloud.reservation_available("cr-0aaaa"), Some(1));

    for n in env.cluster.register_from(&env.cloud) {
        env.cluster.set_ready(&n);
    }
    prov.tick().await.unwrap();
    let node = env.cluster.nodes().pop().expect("the adopted claim's node");
    assert_eq!(
        node.labels.get(LABEL_CAPACITY_TYPE).map(String::as_str),
        Some("reserved")
    );
    assert_eq!(
        node.labels
            .get(LABEL_CAPACITY_RESERVATION_ID)
            .map(String::as_str),
        Some("cr-0aaaa")
    );
}

#[tokio::test]
async fn a_claim_adopted_after_its_reservation_is_no_longer_listed_still_names_it() {
    let env = crashed_after_launching_into_the_reservation().await;
    let mut cancelled = FakeReservation::new("cr-0aaaa", "m5.xlarge", "us-east-1a", 2);
    cancelled.state = "cancelled".into();
    env.cloud.add_reservation(cancelled);
    let report = env.provisioner().tick().await.unwrap();
    assert_eq!(report.adopted.len(), 1, "{report:#?}");
    let claim = &env.claims_in(ClaimState::Launched)[0];
    assert_eq!(
        label(claim, LABEL_CAPACITY_RESERVATION_ID),
        Some("cr-0aaaa")
    );
    // Its type is no longer known: no guess.
    assert_eq!(label(claim, LABEL_CAPACITY_RESERVATION_TYPE), None);
}

/// Karpenter's capacity-type sync: an ODCR expires under its running instances, which
/// EC2 keeps running as on-demand. The claims and their nodes become on-demand (no
/// reservation labels, the on-demand price), so consolidation no longer takes them for
/// free capacity; the on-demand node launched beside them is untouched.
#[tokio::test]
async fn nodes_whose_reservation_expired_are_relabelled_on_demand_and_priced_so() {
    let env = env_with(FakeReservation::new(
        "cr-0aaaa",
        "m5.xlarge",
        "us-east-1a",
        2,
    ));
    add_pods(&env, 3);
    let prov = env.provisioner();
    prov.tick().await.unwrap();
    for n in env.cluster.register_from(&env.cloud) {
        env.cluster.set_ready(&n);
    }
    prov.tick().await.unwrap();
    let reserved_nodes = |env: &Env| {
        env.cluster
            .nodes()
            .into_iter()
            .filter(|n| n.labels.get(LABEL_CAPACITY_TYPE).map(String::as_str) == Some("reserved"))
            .count()
    };
    assert_eq!(reserved_nodes(&env), 2);

    env.cloud.end_reservation("cr-0aaaa", "expired");
    let report = prov.tick().await.unwrap();

    assert_eq!(report.lifecycle.left_reservation.len(), 2, "{report:#?}");
    assert_eq!(reserved_nodes(&env), 0);
    let on_demand_price = 0.192;
    for claim in live_claims(&env) {
        assert_eq!(
            claim.capacity_type,
            Some(CapacityType::OnDemand),
            "{claim:#?}"
        );
        assert_eq!(claim.price_per_hour, Some(on_demand_price), "{claim:#?}");
        assert!(
            label(&claim, LABEL_CAPACITY_RESERVATION_ID).is_none(),
            "{claim:#?}"
        );
    }
    for node in env.cluster.nodes() {
        assert_eq!(
            node.labels.get(LABEL_CAPACITY_TYPE).map(String::as_str),
            Some("on-demand"),
            "{node:#?}"
        );
        assert!(
            !node.labels.contains_key(LABEL_CAPACITY_RESERVATION_ID)
                && !node.labels.contains_key(LABEL_CAPACITY_RESERVATION_TYPE),
            "{node:#?}"
        );
    }
    // Nothing more to do on the next pass.
    let again = prov.tick().await.unwrap();
    assert!(again.lifecycle.left_reservation.is_empty(), "{again:#?}");
}

/// An interruptible reservation of `total` m5.xlarge in us-east-1a.
fn interruptible(id: &str, total: u32) -> FakeReservation {
    let mut r = FakeReservation::new(id, "m5.xlarge", "us-east-1a", total);
    r.interruptible = true;
    r
}

#[tokio::test]
async fn an_odcr_is_launched_into_before_an_interruptible_one_and_the_nodes_say_which() {
    // The interruptible one sorts first by id: the order is Karpenter's, not the ids'.
    let env = env_with_all(vec![
        interruptible("cr-0aaaa", 1),
        FakeReservation::new("cr-0bbbb", "m5.xlarge", "us-east-1a", 1),
    ]);
    add_pods(&env, 1);
    let prov = env.provisioner();
    prov.tick().await.unwrap();
    let in_reservation = |claim: &NodeClaim| {
        (
            label(claim, LABEL_CAPACITY_RESERVATION_ID).map(str::to_string),
            label(claim, LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE).map(str::to_string),
        )
    };
    let first = live_claims(&env).remove(0);
    assert_eq!(
        in_reservation(&first),
        (Some("cr-0bbbb".into()), Some("false".into()))
    );

    env.cluster.add_pod(pod("train-1", "3", "4Gi"));
    prov.tick().await.unwrap();
    let second = live_claims(&env)
        .into_iter()
        .find(|c| c.name != first.name)
        .expect("a second claim");
    assert_eq!(second.capacity_type, Some(CapacityType::Reserved));
    assert_eq!(
        in_reservation(&second),
        (Some("cr-0aaaa".into()), Some("true".into()))
    );
    let nodes = env.cluster.register_from(&env.cloud);
    for n in &nodes {
        env.cluster.set_ready(n);
    }
    prov.tick().await.unwrap();
    let interruptible_nodes = env
        .cluster
        .nodes()
        .into_iter()
        .filter(|n| {
            n.labels
                .get(LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE)
                .map(String::as_str)
                == Some("true")
        })
        .count();
    assert_eq!(interruptible_nodes, 1);
}

#[tokio::test]
async fn a_reservation_whose_owner_takes_an_instance_back_is_not_launched_into_for_three_minutes() {
    let env = env_with(interruptible("cr-0aaaa", 3));
    add_pods(&env, 1);
    let prov = env.provisioner();
    prov.tick().await.unwrap();
    let claim = live_claims(&env).remove(0);
    let instance = claim.instance_id.clone().expect("launched");
    assert_eq!(claim.capacity_type, Some(CapacityType::Reserved));

    // The owner's warning, as EventBridge delivers it, through the interruption job.
    let now = env.clock.now();
    let envelope = nodewright_sim::eventbridge::Envelope {
        id: "6a7e8feb-b491-4cf7-a9f1-bf3703467718".into(),
        time: now,
        region: "us-east-1".into(),
    };
    let json = nodewright_sim::eventbridge::capacity_reservation_interruption(
        &envelope,
        &instance,
        "use1-az1",
        now + 120,
    );
    let event = nodewright_core::interruption::parse_event(&json).unwrap();
    let action = nodewright_core::interruption::action_for(&event, Default::default());
    let input = nodewright_engine::interrupt::input_for(&event, &action).expect("an input");
    assert_eq!(input.cause, DisruptionCause::CapacityReservationInterrupted);
    nodewright_engine::handle_interruption(&env.ports, &Default::default(), input)
        .await
        .unwrap();
    let claim = stored(&env, &claim.name);
    assert_eq!(
        claim.disruption.as_ref().map(|d| d.cause),
        Some(DisruptionCause::CapacityReservationInterrupted)
    );

    // The instance is gone (it had no node to drain) and the reservation lists room
    // for three, but new claims go on-demand...
    assert_eq!(env.cloud.reservation_available("cr-0aaaa"), Some(3));
    env.cluster.add_pod(pod("train-8", "3", "4Gi"));
    let report = prov.tick().await.unwrap();
    assert!(!report.launched.is_empty(), "{report:#?}");
    assert!(
        report
            .launched
            .iter()
            .all(|l| l.capacity_type == CapacityType::OnDemand),
        "{report:#?}"
    );

    // ... and after three minutes the reservation is used again.
    env.clock.advance(Duration::from_secs(181));
    env.cluster.add_pod(pod("train-9", "3", "4Gi"));
    let report = prov.tick().await.unwrap();
    assert_eq!(report.launched.len(), 1, "{report:#?}");
    assert_eq!(
        report.launched[0].capacity_type,
        CapacityType::Reserved,
        "{report:#?}"
    );
}
