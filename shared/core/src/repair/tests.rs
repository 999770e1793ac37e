use super::*;
use crate::catalog::CapacityType;
use crate::cluster::NodeCondition;
use crate::nodeclaim::{AdoptedInstance, Disruption};

const NOW: i64 = 1_800_000_000;

fn node(name: &str, conditions: &[(&str, ConditionStatus, i64)]) -> Node {
    Node {
        name: name.into(),
        ready: !conditions
            .iter()
            .any(|(k, s, _)| *k == "Ready" && *s != ConditionStatus::True),
        created_at: Some(NOW - 86_400),
        conditions: conditions
            .iter()
            .map(|(k, s, since)| NodeCondition {
                kind: (*k).into(),
                status: *s,
                since: Some(*since),
            })
            .collect(),
        ..Node::default()
    }
}

fn healthy(name: &str) -> Node {
    node(name, &[("Ready", ConditionStatus::True, NOW - 86_000)])
}

fn claim(pool: &str, node: &str) -> NodeClaim {
    NodeClaim::adopted(
        AdoptedInstance {
            name: format!("claim-{node}"),
            node_pool: pool.into(),
            node_class: "default".into(),
            instance_id: format!("i-{node}"),
            instance_type: "m5.large".into(),
            zone: "us-east-1a".into(),
            capacity_type: CapacityType::OnDemand,
            price_per_hour: Some(0.096),
            node_name: node.into(),
            launched_at: NOW - 86_400,
        },
        NOW - 86_400,
    )
}

fn pool_of(n: usize, unhealthy: &[usize], since: i64) -> (Vec<Node>, Vec<NodeClaim>) {
    let mut nodes = Vec::new();
    let mut claims = Vec::new();
    for i in 0..n {
        let name = format!("node-{i:02}");
        nodes.push(if unhealthy.contains(&i) {
            node(&name, &[("Ready", ConditionStatus::Unknown, since)])
        } else {
            healthy(&name)
        });
        claims.push(claim("general", &name));
    }
    (nodes, claims)
}

#[test]
fn a_node_not_ready_for_thirty_minutes_is_repaired() {
    let (nodes, claims) = pool_of(5, &[2], NOW - 30 * 60);
    let plan = plan_repairs(&nodes, &claims, &[], NOW);
    assert_eq!(plan.repairs.len(), 1);
    assert_eq!(plan.repairs[0].node, "node-02");
    assert!(
        plan.repairs[0].reason.contains("Ready=Unknown for 30m0s"),
        "{}",
        plan.repairs[0].reason
    );
    assert!(plan.held.is_empty());
}

#[test]
fn a_node_not_ready_for_less_than_its_toleration_waits_and_says_when() {
    let (nodes, claims) = pool_of(5, &[2], NOW - 29 * 60);
    let plan = plan_repairs(&nodes, &claims, &[], NOW);
    assert!(plan.repairs.is_empty());
    assert_eq!(plan.next_due, Some(NOW + 60));
}

#[test]
fn ready_false_and_every_node_monitoring_agent_condition_are_repaired_after_their_toleration() {
    for (condition, status, toleration) in [
        ("Ready", ConditionStatus::False, 30),
        ("AcceleratedHardwareReady", ConditionStatus::False, 10),
        ("StorageReady", ConditionStatus::False, 30),
        ("NetworkingReady", ConditionStatus::False, 30),
        ("KernelReady", ConditionStatus::False, 30),
        ("ContainerRuntimeReady", ConditionStatus::False, 30),
    ] {
        let mut conditions = vec![(condition, status, NOW - toleration * 60)];
        if condition != "Ready" {
            conditions.push(("Ready", ConditionStatus::True, NOW - 86_000));
        }
        let sick = node("node-00", &conditions);
        let nodes = vec![sick.clone()];
        let claims = vec![claim("general", "node-00")];
        let plan = plan_repairs(&nodes, &claims, &[], NOW);
        assert_eq!(plan.repairs.len(), 1, "{condition}");
        let early = plan_repairs(&nodes, &claims, &[], NOW - 1);
        assert!(
            early.repairs.is_empty(),
            "{condition} repaired before its toleration"
        );
    }
}

#[test]
fn a_condition_with_another_status_or_an_unwatched_type_is_not_a_symptom() {
    let nodes = vec![node(
        "node-00",
        &[
            ("Ready", ConditionStatus::True, NOW - 86_000),
            ("KernelReady", ConditionStatus::Unknown, NOW - 86_000),
            ("BadNode", ConditionStatus::False, NOW - 86_000),
        ],
    )];
    let plan = plan_repairs(&nodes, &[claim("general", "node-00")], &[], NOW);
    assert!(plan.repairs.is_empty());
    assert_eq!(plan.next_due, None);
}

#[test]
fn five_of_ten_unhealthy_repairs_two_and_holds_three_with_the_reason() {
    let (nodes, claims) = pool_of(10, &[1, 3, 5, 7, 9], NOW - 31 * 60);
    let plan = plan_repairs(&nodes, &claims, &[], NOW);
    assert_eq!(plan.repairs.len(), 2);
    assert_eq!(plan.held.len(), 3);
    assert!(
        plan.held[0]
            .reason
            .contains("more than 20% of the nodes are unhealthy"),
        "{}",
        plan.held[0].reason
    );
}

#[test]
fn repairs_in_progress_count_against_the_twenty_percent() {
    let (nodes, mut claims) = pool_of(10, &[1, 3, 5], NOW - 31 * 60);
    let c = &mut claims[1];
    c.state = ClaimState::Draining;
    c.disruption = Some(Disruption {
        cause: DisruptionCause::Unhealthy,
        deadline: Some(NOW - 60),
        since: NOW - 60,
        drain_after: None,
        event: None,
        command: None,
    });
    let plan = plan_repairs(&nodes, &claims, &[], NOW);
    assert_eq!(plan.repairs.len(), 1, "one slot of two left");
    assert_eq!(plan.held.len(), 1);
}

#[test]
fn a_pool_of_three_may_repair_one_node_rounding_up() {
    let (nodes, claims) = pool_of(3, &[0], NOW - 31 * 60);
    assert_eq!(plan_repairs(&nodes, &claims, &[], NOW).repairs.len(), 1);
}

#[test]
fn the_limit_is_per_nodepool() {
    let (mut nodes, mut claims) = pool_of(5, &[0], NOW - 31 * 60);
    nodes.push(node(
        "other-0",
        &[("Ready", ConditionStatus::False, NOW - 40 * 60)],
    ));
    claims.push(claim("gpu", "other-0"));
    let plan = plan_repairs(&nodes, &claims, &[], NOW);
    assert_eq!(plan.repairs.len(), 2);
}

#[test]
fn an_instance_impaired_for_two_minutes_is_repaired_past_the_limit() {
    let (nodes, claims) = pool_of(5, &[0], NOW - 31 * 60);
    let impaired = vec![ImpairedInstance {
        instance_id: "i-node-03".into(),
        checks: vec!["instance".into()],
        since: Some(NOW - 120),
    }];
    let plan = plan_repairs(&nodes, &claims, &impaired, NOW);
    let repaired: Vec<&str> = plan.repairs.iter().map(|r| r.node.as_str()).collect();
    assert_eq!(repaired.len(), 2, "{repaired:?}");
    assert!(repaired.contains(&"node-03"));
    let early = vec![ImpairedInstance {
        since: Some(NOW - 119),
        ..impaired[0].clone()
    }];
    let plan = plan_repairs(&nodes, &claims, &early, NOW);
    assert!(plan.repairs.iter().all(|r| r.node != "node-03"));
}

#[test]
fn claims_already_going_or_without_a_node_are_not_repaired() {
    let (nodes, mut claims) = pool_of(2, &[0, 1], NOW - 31 * 60);
    claims[0].state = ClaimState::Disrupting;
    claims[1].node_name = Some("gone".into());
    let plan = plan_repairs(&nodes, &claims, &[], NOW);
    assert!(plan.repairs.is_empty());
}

#[test]
fn symptoms_are_labelled_as_karpenter_labels_them() {
    let s = Symptom::Condition {
        condition: "AcceleratedHardwareReady".into(),
        status: ConditionStatus::False,
        since: NOW,
        toleration_secs: 600,
    };
    assert_eq!(s.label(), "accelerated_hardware_ready");
}
