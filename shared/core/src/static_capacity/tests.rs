//! Static NodePools through `plan_static_pools`, their real entry point.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::*;
use crate::api::model::Operator;
use crate::cluster::Node;
use crate::nodeclaim::{ClaimSpec, Disruption, DisruptionCause, DisruptionCommand};
use crate::provisioning::{ProvisioningInput, plan_provisioning};
use crate::testing::{general_purpose_pool, node, pod, req};
use crate::well_known::LABEL_INSTANCE_TYPE;

const NOW: i64 = 2_000_000_000;

fn static_pool(replicas: u32) -> NodePool {
    let mut p = general_purpose_pool();
    p.name = "fixed".into();
    p.replicas = Some(replicas);
    p
}

fn claim(name: &str, state: ClaimState) -> NodeClaim {
    let mut c = NodeClaim::launching(
        ClaimSpec {
            name: name.into(),
            node_pool: "fixed".into(),
            node_class: "default".into(),
            instance_type_options: vec!["m5.large".into()],
            zones: vec!["us-east-1a".into()],
            capacity_types: vec![],
            pods: vec![],
            labels: BTreeMap::new(),
        },
        NOW - 3600,
    );
    c.state = state;
    if state != ClaimState::Launching {
        c.instance_id = Some(format!("i-{name}"));
    }
    if matches!(state, ClaimState::Registered | ClaimState::Initialized) {
        c.node_name = Some(format!("node-{name}"));
    }
    c
}

fn node_of(c: &NodeClaim) -> Node {
    let mut n = node(
        c.node_name.as_deref().expect("registered"),
        "m5.large",
        "us-east-1a",
        "fixed",
        Catalog::embedded(),
    );
    n.created_at = Some(NOW - 3600);
    n
}

fn on(node: &str, name: &str) -> Pod {
    let mut p = pod(name, "100m", "128Mi");
    p.node_name = Some(node.into());
    p.marked_unschedulable = false;
    p
}

fn plans(pools: &[NodePool], claims: &[NodeClaim], snapshot: &ClusterSnapshot) -> Vec<StaticPlan> {
    plan_static_pools(&StaticInput {
        claims,
        snapshot,
        node_pools: pools,
        node_classes: &[],
        catalog: Catalog::embedded(),
        pricing: &Pricing::default(),
        in_flight: &[],
        now: NOW,
    })
}

#[test]
fn a_static_pool_with_no_claims_launches_its_replicas_without_pods_cheapest_first() {
    let plans = plans(&[static_pool(3)], &[], &ClusterSnapshot::default());
    assert_eq!(plans.len(), 1);
    let plan = &plans[0];
    assert_eq!(plan.launch.len(), 3);
    assert!(plan.remove.is_empty() && plan.held.is_none());
    for c in &plan.launch {
        assert_eq!(c.node_pool, "fixed");
        assert!(c.pods.is_empty());
        assert!(c.instance_type_options.len() > 1);
        let prices: Vec<f64> = c
            .instance_type_options
            .iter()
            .map(|t| {
                Catalog::embedded()
                    .get(t)
                    .expect("type")
                    .on_demand_price
                    .unwrap_or(0.0)
            })
            .collect();
        assert_eq!(c.instance_type, c.instance_type_options[0]);
        assert!(prices.windows(2).all(|w| w[0] <= w[1]), "{prices:?}");
    }
    assert!(plan.reason.contains("launching 3"), "{}", plan.reason);
}

#[test]
fn the_pools_requirements_bound_the_options_of_a_static_claim() {
    let mut pool = static_pool(1);
    pool.requirements.push(req(
        LABEL_INSTANCE_TYPE,
        Operator::In,
        &["m5.xlarge", "c5.xlarge"],
    ));
    let plan = &plans(&[pool], &[], &ClusterSnapshot::default())[0];
    let mut options = plan.launch[0].instance_type_options.clone();
    options.sort();
    assert_eq!(options, ["c5.xlarge", "m5.xlarge"]);
}

#[test]
fn a_pool_at_its_replicas_is_steady_and_dynamic_pools_get_no_static_plan() {
    let claims = [
        claim("a", ClaimState::Initialized),
        claim("b", ClaimState::Registered),
        claim("c", ClaimState::Launched),
    ];
    let plans = plans(
        &[static_pool(3), general_purpose_pool()],
        &claims,
        &ClusterSnapshot::default(),
    );
    assert_eq!(plans.len(), 1);
    assert!(plans[0].is_steady(), "{plans:?}");
    assert_eq!(plans[0].counts.running, 3);
}

#[test]
fn a_leaving_claim_is_replaced_and_a_command_candidate_is_not() {
    let mut interrupted = claim("gone", ClaimState::Draining);
    interrupted.disruption = Some(Disruption {
        cause: DisruptionCause::SpotInterrupted,
        deadline: Some(NOW + 120),
        since: NOW,
        drain_after: None,
        drain_grace: None,
        event: None,
        command: None,
    });
    let claims = [claim("a", ClaimState::Initialized), interrupted.clone()];
    let plan = &plans(&[static_pool(2)], &claims, &ClusterSnapshot::default())[0];
    assert_eq!(plan.counts.leaving, 1);
    assert_eq!(plan.launch.len(), 1);

    let mut drifting = claim("drifting", ClaimState::Disrupting);
    drifting.disruption = Some(Disruption {
        cause: DisruptionCause::Drifted,
        command: Some(Arc::new(DisruptionCommand {
            id: "cmd".into(),
            candidates: vec!["drifting".into()],
            replacements: vec![],
            validated: false,
        })),
        ..interrupted.disruption.clone().expect("set")
    });
    let claims = [claim("a", ClaimState::Initialized), drifting];
    let plan = &plans(&[static_pool(2)], &claims, &ClusterSnapshot::default())[0];
    assert_eq!(plan.counts.pending_disruption, 1);
    assert!(plan.is_steady(), "{plan:?}");
}

#[test]
fn limits_nodes_caps_a_scale_up_counting_every_claim_of_the_pool() {
    let mut pool = static_pool(5);
    pool.node_limit = Some(3);
    let mut leaving = claim("leaving", ClaimState::Terminating);
    leaving.disruption = None;
    let claims = [claim("a", ClaimState::Initialized), leaving];
    let plan = &plans(&[pool.clone()], &claims, &ClusterSnapshot::default())[0];
    assert_eq!(plan.launch.len(), 1);
    let held = plan.held.as_deref().expect("held");
    assert!(held.contains("limits.nodes 3 reached"), "{held}");

    pool.node_limit = Some(0);
    let plan = &plans(&[pool], &[], &ClusterSnapshot::default())[0];
    assert!(plan.launch.is_empty());
    assert!(
        plan.held
            .as_deref()
            .is_some_and(|h| h.contains("limits.nodes 0"))
    );
}

#[test]
fn scale_down_takes_unregistered_then_empty_then_cheapest_and_do_not_disrupt_last() {
    let launched = claim("e-launched", ClaimState::Launched);
    let empty = claim("d-empty", ClaimState::Initialized);
    let one = claim("c-one-pod", ClaimState::Initialized);
    let two = claim("b-two-pods", ClaimState::Initialized);
    let held = claim("a-held", ClaimState::Initialized);
    let claims = [
        launched,
        empty.clone(),
        one.clone(),
        two.clone(),
        held.clone(),
    ];
    let mut pods = vec![
        on("node-c-one-pod", "p1"),
        on("node-b-two-pods", "p2"),
        on("node-b-two-pods", "p3"),
    ];
    let mut precious = on("node-a-held", "precious");
    precious.do_not_disrupt = true;
    pods.push(precious);
    let mut ds = on("node-d-empty", "agent");
    ds.daemonset_owned = true;
    pods.push(ds);
    let snapshot = ClusterSnapshot {
        nodes: [&empty, &one, &two, &held].map(node_of).to_vec(),
        pods,
        ..Default::default()
    };
    let order = |replicas: u32| -> Vec<(String, ScaleDownOrder)> {
        plans(&[static_pool(replicas)], &claims, &snapshot)[0]
            .remove
            .iter()
            .map(|c| (c.claim.clone(), c.order))
            .collect()
    };
    assert_eq!(
        order(0),
        [
            ("e-launched".to_string(), ScaleDownOrder::NotRegistered),
            ("d-empty".to_string(), ScaleDownOrder::Empty),
            ("c-one-pod".to_string(), ScaleDownOrder::Busy),
            ("b-two-pods".to_string(), ScaleDownOrder::Busy),
            ("a-held".to_string(), ScaleDownOrder::DoNotDisrupt),
        ]
    );
    assert_eq!(
        order(3).into_iter().map(|(c, _)| c).collect::<Vec<_>>(),
        ["e-launched", "d-empty"]
    );
    assert!(order(5).is_empty());
}

/// Karpenter's static scale-down orders busy nodes by ReschedulingCost (each pod's
/// eviction cost, which priority and pod-deletion-cost move) times the lifetime left:
/// one pod that matters more than two ordinary ones keeps its node longer.
#[test]
fn a_busy_node_whose_one_pod_matters_more_is_taken_after_one_with_two_ordinary_pods() {
    let vip = claim("a-vip", ClaimState::Initialized);
    let two = claim("b-two-pods", ClaimState::Initialized);
    let claims = [vip.clone(), two.clone()];
    let mut important = on("node-a-vip", "important");
    important.priority = Some(100_000_000); // eviction cost 1 + 10^8 / 2^25 ≈ 3.98
    let snapshot = ClusterSnapshot {
        nodes: [&vip, &two].map(node_of).to_vec(),
        pods: vec![
            important,
            on("node-b-two-pods", "p1"),
            on("node-b-two-pods", "p2"),
        ],
        ..Default::default()
    };
    let removed: Vec<String> = plans(&[static_pool(1)], &claims, &snapshot)[0]
        .remove
        .iter()
        .map(|c| c.claim.clone())
        .collect();
    assert_eq!(removed, ["b-two-pods"]);
}

#[test]
fn pending_pods_never_open_a_claim_in_a_static_pool_but_run_on_its_nodes() {
    let mut pending = pod("web", "500m", "512Mi");
    pending.marked_unschedulable = true;
    let static_only = ClusterSnapshot {
        pods: vec![pending.clone()],
        ..Default::default()
    };
    let pricing = Pricing::default();
    let plan_with = |snapshot: &ClusterSnapshot, pools: &[NodePool]| {
        plan_provisioning(&ProvisioningInput {
            snapshot,
            node_pools: pools,
            node_classes: &[],
            catalog: Catalog::embedded(),
            pricing: &pricing,
            in_flight: &[],
        })
    };
    let plan = plan_with(&static_only, &[static_pool(1)]);
    assert!(plan.node_claims.is_empty(), "{plan:?}");
    assert_eq!(plan.unschedulable.len(), 1);

    // A static node with room holds the pod: no claim anywhere.
    let c = claim("a", ClaimState::Initialized);
    let with_node = ClusterSnapshot {
        pods: vec![pending],
        nodes: vec![node_of(&c)],
        ..Default::default()
    };
    let plan = plan_with(&with_node, &[static_pool(1), general_purpose_pool()]);
    assert!(plan.node_claims.is_empty(), "{plan:?}");
    assert_eq!(plan.existing_nodes.len(), 1);
}

// ----- limits.nodes in disruption replacements ------------------------------------------

/// A dynamic pool's node with pods that fit nowhere else drifts: its replacement is a
/// new node of the pool, and `limits.nodes` counts it with the drifted node already
/// gone (as Karpenter's disruption simulation leaves its candidates out).
fn drift_with_node_limit(limit: u64) -> crate::disruption::Decision {
    use crate::disruption::{DisruptionInput, decide};
    let mut pool = general_purpose_pool();
    pool.node_limit = Some(limit);
    let nodes: Vec<Node> = ["a", "b"]
        .iter()
        .map(|name| crate::testing::initialized_node(name, "m5.large", NOW))
        .collect();
    let mut big_a = on("a", "big-a");
    big_a.requests = crate::testing::resources(&[("cpu", "1500m"), ("memory", "1Gi")]);
    let mut big_b = on("b", "big-b");
    big_b.requests = big_a.requests.clone();
    let snapshot = ClusterSnapshot {
        nodes,
        pods: vec![big_a, big_b],
        ..Default::default()
    };
    let pricing = Pricing::for_zones(vec!["us-east-1a".into()]);
    decide(&DisruptionInput {
        snapshot: &snapshot,
        node_pools: std::slice::from_ref(&pool),
        node_classes: &[],
        catalog: Catalog::embedded(),
        pricing: &pricing,
        in_flight: &[],
        now: NOW,
        spot_to_spot: false,
        external_drift: &[("a".into(), "AMI ami-old is no longer selected".into())],
        disrupting: &[],
        nominated: &[],
        validating: None,
    })
}

#[test]
fn limits_nodes_holds_for_disruption_replacements() {
    use crate::disruption::{Method, RejectCode};
    let within = drift_with_node_limit(2);
    let drift: Vec<_> = within
        .commands
        .iter()
        .filter(|c| c.method == Method::Drift)
        .collect();
    assert_eq!(drift.len(), 1, "{within:#?}");
    assert_eq!(drift[0].replacements.len(), 1);

    // One node allowed, one staying: no room for a replacement, the node stays.
    let over = drift_with_node_limit(1);
    assert!(
        over.commands.iter().all(|c| c.method != Method::Drift),
        "{over:#?}"
    );
    let kept = over
        .rejected
        .iter()
        .find(|r| r.node == "a")
        .expect("a reason for the drifted node");
    assert_eq!(kept.code, RejectCode::PodsDoNotFit, "{kept:?}");
    assert!(kept.reason.contains("nodes"), "{}", kept.reason);
}
