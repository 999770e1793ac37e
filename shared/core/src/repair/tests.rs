use super::*;
use crate::api::model::{DisruptionReason, NodePool};
use crate::catalog::CapacityType;
use crate::cluster::NodeCondition;
use crate::nodeclaim::{AdoptedInstance, Disruption};

const NOW: i64 = 1_800_000_000;

/// The v1.14 way (`LegacyNodeRepair`).
fn legacy(
    nodes: &[Node],
    claims: &[NodeClaim],
    impaired: &[ImpairedInstance],
    now: i64,
) -> RepairPlan {
    plan_repairs(&RepairInput {
        nodes,
        claims,
        pools: &[],
        impaired,
        reservations: &[],
        settings: &RepairSettings::legacy(),
        now,
    })
}

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
                reason: None,
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
    let plan = legacy(&nodes, &claims, &[], NOW);
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
    let plan = legacy(&nodes, &claims, &[], NOW);
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
        let plan = legacy(&nodes, &claims, &[], NOW);
        assert_eq!(plan.repairs.len(), 1, "{condition}");
        let early = legacy(&nodes, &claims, &[], NOW - 1);
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
    let plan = legacy(&nodes, &[claim("general", "node-00")], &[], NOW);
    assert!(plan.repairs.is_empty());
    assert_eq!(plan.next_due, None);
}

#[test]
fn five_of_ten_unhealthy_repairs_two_and_holds_three_with_the_reason() {
    let (nodes, claims) = pool_of(10, &[1, 3, 5, 7, 9], NOW - 31 * 60);
    let plan = legacy(&nodes, &claims, &[], NOW);
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
        drain_grace: None,
        event: None,
        command: None,
    });
    let plan = legacy(&nodes, &claims, &[], NOW);
    assert_eq!(plan.repairs.len(), 1, "one slot of two left");
    assert_eq!(plan.held.len(), 1);
}

#[test]
fn a_pool_of_three_may_repair_one_node_rounding_up() {
    let (nodes, claims) = pool_of(3, &[0], NOW - 31 * 60);
    assert_eq!(legacy(&nodes, &claims, &[], NOW).repairs.len(), 1);
}

#[test]
fn the_limit_is_per_nodepool() {
    let (mut nodes, mut claims) = pool_of(5, &[0], NOW - 31 * 60);
    nodes.push(node(
        "other-0",
        &[("Ready", ConditionStatus::False, NOW - 40 * 60)],
    ));
    claims.push(claim("gpu", "other-0"));
    let plan = legacy(&nodes, &claims, &[], NOW);
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
    let plan = legacy(&nodes, &claims, &impaired, NOW);
    let repaired: Vec<&str> = plan.repairs.iter().map(|r| r.node.as_str()).collect();
    assert_eq!(repaired.len(), 2, "{repaired:?}");
    assert!(repaired.contains(&"node-03"));
    let early = vec![ImpairedInstance {
        since: Some(NOW - 119),
        ..impaired[0].clone()
    }];
    let plan = legacy(&nodes, &claims, &early, NOW);
    assert!(plan.repairs.iter().all(|r| r.node != "node-03"));
}

#[test]
fn claims_already_going_or_without_a_node_are_not_repaired() {
    let (nodes, mut claims) = pool_of(2, &[0, 1], NOW - 31 * 60);
    claims[0].state = ClaimState::Disrupting;
    claims[1].node_name = Some("gone".into());
    let plan = legacy(&nodes, &claims, &[], NOW);
    assert!(plan.repairs.is_empty());
}

#[test]
fn symptoms_are_labelled_as_karpenter_labels_them() {
    let s = Symptom::Condition {
        condition: "AcceleratedHardwareReady".into(),
        status: ConditionStatus::False,
        reason: None,
        since: NOW,
        due_at: NOW + 600,
    };
    assert_eq!(s.label(), "accelerated_hardware_ready");
}

// ----- As Karpenter v1.15 repairs --------------------------------------------------

fn general_pool() -> NodePool {
    let mut pool = crate::testing::general_purpose_pool();
    pool.name = "general".into();
    pool
}

fn v115(
    nodes: &[Node],
    claims: &[NodeClaim],
    pools: &[NodePool],
    settings: &RepairSettings,
    now: i64,
) -> RepairPlan {
    plan_repairs(&RepairInput {
        nodes,
        claims,
        pools,
        impaired: &[],
        reservations: &[],
        settings,
        now,
    })
}

fn gpu_fault(name: &str, reason: &str, since: i64) -> Node {
    let mut n = healthy(name);
    n.conditions.push(NodeCondition {
        kind: "AcceleratedHardwareReady".into(),
        status: ConditionStatus::False,
        since: Some(since),
        reason: Some(reason.into()),
    });
    n
}

#[test]
fn a_node_not_ready_for_thirty_minutes_is_replaced_with_a_drain_of_ten_minutes_at_most() {
    let (nodes, claims) = pool_of(5, &[2], NOW - 30 * 60);
    let mut pool = general_pool();
    let plan = v115(
        &nodes,
        &claims,
        &[pool.clone()],
        &RepairSettings::default(),
        NOW,
    );
    assert_eq!(plan.repairs.len(), 1);
    let r = &plan.repairs[0];
    assert_eq!(
        (r.node.as_str(), r.step, r.grace_secs),
        ("node-02", RepairStep::Replace, Some(600))
    );
    assert!(
        r.reason.contains("policy ReplaceNode for Ready=Unknown"),
        "{}",
        r.reason
    );
    pool.termination_grace_period = Some(std::time::Duration::from_secs(120));
    let plan = v115(&nodes, &claims, &[pool], &RepairSettings::default(), NOW);
    assert_eq!(
        plan.repairs[0].grace_secs,
        Some(120),
        "never longer than the NodePool's"
    );
    let early = v115(
        &nodes,
        &claims,
        &[general_pool()],
        &RepairSettings::default(),
        NOW - 1,
    );
    assert!(early.repairs.is_empty());
    assert_eq!(early.next_due, Some(NOW));
}

#[test]
fn a_reboot_clearable_gpu_fault_reboots_the_node_with_the_gate_and_replaces_it_without() {
    let nodes = vec![gpu_fault("gpu-0", "NVIDIAXID48Error", NOW - 10 * 60)];
    let claims = vec![claim("general", "gpu-0")];
    let pools = [general_pool()];
    let on = v115(
        &nodes,
        &claims,
        &pools,
        &RepairSettings::aws(true, false),
        NOW,
    );
    assert_eq!(on.repairs[0].step, RepairStep::Reboot);
    assert_eq!(on.repairs[0].grace_secs, Some(300));
    let off = v115(
        &nodes,
        &claims,
        &pools,
        &RepairSettings::aws(false, false),
        NOW,
    );
    assert_eq!(off.repairs[0].step, RepairStep::Replace);
}

#[test]
fn a_node_rebooted_twice_in_a_day_is_replaced_and_a_reboot_restarts_the_toleration() {
    let nodes = vec![gpu_fault("gpu-0", "NVIDIAXID48Error", NOW - 60 * 60)];
    let mut claims = vec![claim("general", "gpu-0")];
    let pools = [general_pool()];
    let settings = RepairSettings::aws(true, false);
    claims[0].reboots = vec![NOW - 20 * 3600, NOW - 3 * 3600];
    let plan = v115(&nodes, &claims, &pools, &settings, NOW);
    assert_eq!(plan.repairs[0].step, RepairStep::Replace);
    assert!(
        plan.repairs[0]
            .reason
            .contains("rebooted 2 times in 24 hours"),
        "{}",
        plan.repairs[0].reason
    );
    claims[0].reboots = vec![NOW - 25 * 3600, NOW - 3 * 3600];
    assert_eq!(
        v115(&nodes, &claims, &pools, &settings, NOW).repairs[0].step,
        RepairStep::Reboot
    );
    claims[0].rebooted_at = Some(NOW - 5 * 60);
    let plan = v115(&nodes, &claims, &pools, &settings, NOW);
    assert!(
        plan.repairs.is_empty(),
        "the fault is counted from the reboot's end"
    );
    assert_eq!(plan.next_due, Some(NOW + 5 * 60));
}

#[test]
fn do_not_repair_holds_the_node_once_it_is_due_and_says_why() {
    let (mut nodes, claims) = pool_of(5, &[2], NOW - 30 * 60);
    nodes[2].do_not_repair = true;
    let plan = v115(
        &nodes,
        &claims,
        &[general_pool()],
        &RepairSettings::default(),
        NOW,
    );
    assert!(plan.repairs.is_empty());
    assert_eq!(plan.held.len(), 1);
    assert!(
        plan.held[0].reason.contains("karpenter.sh/do-not-repair"),
        "{}",
        plan.held[0].reason
    );
    let early = v115(
        &nodes,
        &claims,
        &[general_pool()],
        &RepairSettings::default(),
        NOW - 60,
    );
    assert!(early.held.is_empty(), "not said before its toleration ends");
}

#[test]
fn an_unhealthy_budget_of_zero_holds_initialized_nodes_but_not_uninitialized_ones() {
    let (nodes, mut claims) = pool_of(10, &[1, 2], NOW - 31 * 60);
    claims[1].state = ClaimState::Registered;
    let mut pool = general_pool();
    pool.disruption.budgets = vec![crate::api::model::Budget {
        nodes: crate::api::model::BudgetNodes::Count(0),
        schedule: None,
        duration: None,
        reasons: vec![DisruptionReason::Unhealthy],
    }];
    let plan = v115(&nodes, &claims, &[pool], &RepairSettings::default(), NOW);
    let repaired: Vec<&str> = plan.repairs.iter().map(|r| r.node.as_str()).collect();
    assert_eq!(
        repaired,
        ["node-01"],
        "the registered node skips the budget"
    );
    assert!(
        plan.held[0].reason.contains("budgets[0]"),
        "{}",
        plan.held[0].reason
    );
}

#[test]
fn a_pool_at_its_node_limit_holds_the_repair_or_terminates_first_with_the_gate() {
    let (nodes, claims) = pool_of(3, &[0], NOW - 31 * 60);
    let mut pool = general_pool();
    pool.node_limit = Some(3);
    let pools = [pool];
    let held = v115(
        &nodes,
        &claims,
        &pools,
        &RepairSettings::aws(false, false),
        NOW,
    );
    assert!(held.repairs.is_empty());
    assert!(
        held.held[0].reason.contains("cannot stage a replacement"),
        "{}",
        held.held[0].reason
    );
    let first = v115(
        &nodes,
        &claims,
        &pools,
        &RepairSettings::aws(false, true),
        NOW,
    );
    assert_eq!(first.repairs[0].step, RepairStep::TerminateFirst);
    assert_eq!(first.repairs[0].grace_secs, Some(600));
}

#[test]
fn a_pool_whose_cpu_limit_leaves_no_room_for_a_replacement_terminates_first_with_the_gate() {
    // Three 4-cpu nodes, one unhealthy: a replacement of its size needs 16 cpu in all.
    let (mut nodes, claims) = pool_of(3, &[0], NOW - 31 * 60);
    for n in &mut nodes {
        n.capacity = crate::testing::resources(&[("cpu", "4"), ("memory", "16Gi")]);
    }
    let plan_with_cpu_limit = |cpu: &str, settings: &RepairSettings| {
        let mut pool = general_pool();
        pool.limits = Some(crate::testing::resources(&[("cpu", cpu)]));
        v115(&nodes, &claims, &[pool], settings, NOW)
    };
    let roomy = plan_with_cpu_limit("16", &RepairSettings::aws(false, true));
    assert_eq!(roomy.repairs[0].step, RepairStep::Replace, "{roomy:#?}");

    let held = plan_with_cpu_limit("14", &RepairSettings::aws(false, false));
    assert!(held.repairs.is_empty(), "{held:#?}");
    assert!(
        held.held[0]
            .reason
            .contains("is at limits.cpu 14 and cannot stage a replacement"),
        "{}",
        held.held[0].reason
    );
    let first = plan_with_cpu_limit("14", &RepairSettings::aws(false, true));
    assert_eq!(
        first.repairs[0].step,
        RepairStep::TerminateFirst,
        "{first:#?}"
    );
    assert!(
        first.repairs[0].reason.contains("limits.cpu 14"),
        "{}",
        first.repairs[0].reason
    );
}

#[test]
fn reboots_in_flight_count_against_the_twenty_percent_and_the_most_overdue_goes_first() {
    let (mut nodes, mut claims) = pool_of(10, &[1, 3], NOW - 31 * 60);
    nodes[3] = node(
        "node-03",
        &[("Ready", ConditionStatus::Unknown, NOW - 50 * 60)],
    );
    claims[5].reboot = Some(crate::nodeclaim::Reboot {
        requested_at: NOW - 60,
        reason: "XID48".into(),
        grace_secs: Some(300),
        pre_boot_id: None,
        issued_at: None,
    });
    let mut unbudgeted = general_pool();
    unbudgeted.disruption.budgets.clear();
    let plan = v115(
        &nodes,
        &claims,
        &[unbudgeted],
        &RepairSettings::default(),
        NOW,
    );
    let repaired: Vec<&str> = plan.repairs.iter().map(|r| r.node.as_str()).collect();
    assert_eq!(
        repaired,
        ["node-03"],
        "two slots, one taken by the reboot; the older fault first"
    );
    assert_eq!(plan.held.len(), 1);
}

#[test]
fn an_impaired_instance_is_still_terminated_at_once_past_every_limit() {
    let (nodes, claims) = pool_of(5, &[], NOW);
    let impaired = vec![ImpairedInstance {
        instance_id: "i-node-01".into(),
        checks: vec!["system".into()],
        since: Some(NOW - 120),
    }];
    let mut pool = general_pool();
    pool.node_limit = Some(5);
    let plan = plan_repairs(&RepairInput {
        nodes: &nodes,
        claims: &claims,
        pools: &[pool],
        impaired: &impaired,
        reservations: &[],
        settings: &RepairSettings::default(),
        now: NOW,
    });
    assert_eq!(plan.repairs.len(), 1);
    assert_eq!(plan.repairs[0].step, RepairStep::Forceful);
}

#[test]
fn a_reserved_only_pool_whose_reservations_are_full_terminates_first_with_the_gate() {
    use crate::api::model::{NodeRequirement, Operator};
    use crate::catalog::{Reservation, ReservationType};
    use crate::well_known::LABEL_CAPACITY_TYPE;
    // Ten nodes, two unhealthy; the pool launches only into capacity reservations.
    let (nodes, claims) = pool_of(10, &[0, 1], NOW - 31 * 60);
    let mut pool = general_pool();
    pool.disruption.budgets.clear();
    pool.requirements.retain(|r| r.key != LABEL_CAPACITY_TYPE);
    pool.requirements.push(NodeRequirement {
        key: LABEL_CAPACITY_TYPE.into(),
        operator: Operator::In,
        values: vec!["reserved".into()],
        min_values: None,
    });
    let reservation = |available: u32| Reservation {
        id: "cr-0aaaa".into(),
        instance_type: "m5.large".into(),
        zone: "us-east-1a".into(),
        reservation_type: ReservationType::Default,
        available,
        end_time: None,
        interruptible: false,
        node_classes: vec![],
    };
    let plan_in = |pool: &NodePool, reservations: &[Reservation], terminate_first: bool| {
        plan_repairs(&RepairInput {
            nodes: &nodes,
            claims: &claims,
            pools: std::slice::from_ref(pool),
            impaired: &[],
            reservations,
            settings: &RepairSettings::aws(false, terminate_first),
            now: NOW,
        })
    };
    let plan = |reservations: &[Reservation], terminate_first: bool| {
        plan_in(&pool, reservations, terminate_first)
    };
    let steps = |p: &RepairPlan| -> Vec<RepairStep> { p.repairs.iter().map(|r| r.step).collect() };

    // Room for one replacement: the first is replaced, the second terminated first.
    let one = plan(&[reservation(1)], true);
    assert_eq!(
        steps(&one),
        [RepairStep::Replace, RepairStep::TerminateFirst],
        "{one:#?}"
    );
    assert!(
        one.repairs[1].reason.contains(
            "allows only reserved capacity, every capacity reservation it can use is full"
        ),
        "{}",
        one.repairs[1].reason
    );
    // Without the gate the second waits.
    let held = plan(&[reservation(1)], false);
    assert_eq!(steps(&held), [RepairStep::Replace], "{held:#?}");
    assert_eq!(held.held.len(), 1, "{held:#?}");
    assert!(
        held.held[0].reason.contains("TerminateFirstRepair would"),
        "{}",
        held.held[0].reason
    );
    // Room for both: both replaced.
    let roomy = plan(&[reservation(2)], true);
    assert_eq!(
        steps(&roomy),
        [RepairStep::Replace, RepairStep::Replace],
        "{roomy:#?}"
    );
    // A pool that may also launch on-demand stages its replacements whatever the
    // reservations hold.
    let mut open_pool = pool.clone();
    let capacity_types = open_pool.requirements.last_mut().unwrap();
    capacity_types.values.push("on-demand".into());
    let open = plan_in(&open_pool, &[reservation(0)], true);
    assert_eq!(
        steps(&open),
        [RepairStep::Replace, RepairStep::Replace],
        "{open:#?}"
    );
}
