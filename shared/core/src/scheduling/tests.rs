//! Behaviour of the packer through `plan_provisioning`, its real entry point.

use std::collections::{BTreeMap, HashMap};

use crate::api::model::*;
use crate::catalog::Catalog;
use crate::cluster::*;
use crate::pricing::Pricing;
use crate::provisioning::{ProvisioningInput, ProvisioningPlan, plan_provisioning};
use crate::scheduling::{
    InFlightClaim, PreparedScheduler, Removal, SchedulerInput, SolveLimits, schedule,
};
use crate::testing::*;

mod cost;
mod overlay_limits;
mod scheduler_gaps;
mod volume_limits;

fn plan(snapshot: &ClusterSnapshot, pools: &[NodePool]) -> ProvisioningPlan {
    plan_with(snapshot, pools, &[])
}

fn plan_with(
    snapshot: &ClusterSnapshot,
    pools: &[NodePool],
    in_flight: &[InFlightClaim],
) -> ProvisioningPlan {
    let catalog = Catalog::embedded();
    let pricing = Pricing::default();
    let plan = plan_provisioning(&ProvisioningInput {
        snapshot,
        node_pools: pools,
        node_classes: &[],
        catalog,
        pricing: &pricing,
        in_flight,
    });
    let broken = violations(&plan, snapshot, pools, catalog);
    assert!(broken.is_empty(), "plan breaks constraints: {broken:#?}");
    provision_is_schedule(snapshot, pools, in_flight, &pricing);
    plan
}

/// Every test input doubles as a check that the prepared scheduler's provisioning gives
/// what `schedule` gives, also after speculative solves (which must leave it untouched).
fn provision_is_schedule(
    snapshot: &ClusterSnapshot,
    pools: &[NodePool],
    in_flight: &[InFlightClaim],
    pricing: &Pricing,
) {
    let input = SchedulerInput {
        pods: &snapshot.pods,
        nodes: &snapshot.nodes,
        daemonsets: &snapshot.daemonsets,
        node_pools: pools,
        node_classes: &[],
        catalog: Catalog::embedded(),
        pricing,
        in_flight,
    };
    let expected = schedule(&input);
    let prepared = PreparedScheduler::new(&input);
    assert_eq!(prepared.provision(), expected);
    for n in 0..snapshot.nodes.len().min(8) {
        let _ = prepared.solve(
            &Removal {
                nodes: &[n],
                not_destinations: &[],
            },
            &SolveLimits::default(),
        );
    }
    assert_eq!(prepared.provision(), expected, "after solves");
}

fn snapshot(pods: Vec<Pod>) -> ClusterSnapshot {
    ClusterSnapshot {
        pods,
        ..Default::default()
    }
}

fn claim_of<'p>(
    plan: &'p ProvisioningPlan,
    pod: &str,
) -> &'p crate::provisioning::PlannedNodeClaim {
    plan.node_claims
        .iter()
        .find(|c| c.pods.iter().any(|p| p == pod))
        .expect("pod is in a claim")
}

#[test]
fn a_plan_that_launches_nothing_costs_positive_zero() {
    let plan = plan(&snapshot(vec![]), &[general_purpose_pool()]);
    assert!(plan.node_claims.is_empty());
    assert!(
        plan.total_price_per_hour == 0.0 && plan.total_price_per_hour.is_sign_positive(),
        "{:?} (a sum of nothing printed as -0.0)",
        plan.total_price_per_hour
    );
}

#[test]
fn ten_inflate_pods_get_claims_that_hold_them_at_the_cheapest_price() {
    let pods = (0..10)
        .map(|i| pod(&format!("inflate-{i}"), "1", "256M"))
        .collect();
    let plan = plan(&snapshot(pods), &[general_purpose_pool()]);
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    let placed: usize = plan.node_claims.iter().map(|c| c.pods.len()).sum();
    assert_eq!(placed, 10);
    for c in &plan.node_claims {
        assert_eq!(c.node_pool, "general-purpose");
        assert_eq!(c.capacity_type, "on-demand");
        assert!(!c.instance_type_options.is_empty());
        let catalog = Catalog::embedded();
        let prices: Vec<f64> = c
            .instance_type_options
            .iter()
            .map(|t| catalog.get(t).unwrap().on_demand_price.unwrap())
            .collect();
        assert!(
            prices.windows(2).all(|w| w[0] <= w[1]),
            "options are cheapest first"
        );
        assert_eq!(c.price_per_hour, prices[0]);
    }
    let total: f64 = plan.node_claims.iter().map(|c| c.price_per_hour).sum();
    assert!((plan.total_price_per_hour - total).abs() < 1e-9);
    // 10 vCPU of requests: a sensible plan costs about what 10-12 vCPU of c-family costs.
    assert!(
        plan.total_price_per_hour < 0.7,
        "too expensive: {}",
        plan.total_price_per_hour
    );
}

#[test]
fn a_pod_without_requests_still_takes_a_pod_slot() {
    let mut pool = general_purpose_pool();
    pool.requirements.push(req(
        "node.kubernetes.io/instance-type",
        Operator::In,
        &["c5.large"],
    ));
    let pods = (0..40)
        .map(|i| {
            let mut p = pod(&format!("tiny-{i}"), "0", "0");
            p.requests = crate::resources::Resources::one_pod();
            p
        })
        .collect();
    let plan = plan(&snapshot(pods), &[pool]);
    // c5.large allows 29 pods.
    assert_eq!(
        plan.node_claims.len(),
        2,
        "{:?}",
        plan.node_claims
            .iter()
            .map(|c| c.pods.len())
            .collect::<Vec<_>>()
    );
}

#[test]
fn a_pod_no_type_can_hold_is_unschedulable_naming_the_resource() {
    let mut p = pod("gpu-1", "1", "1Gi");
    p.requests.set_quantity("nvidia.com/gpu", "64").unwrap();
    let mut big = pod("huge-1", "1000", "1Gi");
    big.labels.insert("app".into(), "huge".into());
    let plan = plan(&snapshot(vec![p, big]), &[general_purpose_pool()]);
    assert_eq!(plan.unschedulable.len(), 2);
    let reasons: HashMap<_, _> = plan
        .unschedulable
        .iter()
        .map(|u| (u.pod.as_str(), u.reason.as_str()))
        .collect();
    assert!(
        reasons["default/gpu-1"].contains("nvidia.com/gpu"),
        "{}",
        reasons["default/gpu-1"]
    );
    assert!(
        reasons["default/huge-1"].contains("enough cpu (requested 1000"),
        "{}",
        reasons["default/huge-1"]
    );
}

#[test]
fn a_gpu_pod_lands_on_a_gpu_type_when_the_pool_allows_it() {
    let mut pool = node_pool(
        "gpu",
        vec![req(
            "karpenter.k8s.aws/instance-category",
            Operator::In,
            &["g", "p"],
        )],
    );
    pool.taints.push(Taint {
        key: "nvidia.com/gpu".into(),
        value: Some("true".into()),
        effect: TaintEffect::NoSchedule,
    });
    let mut p = pod("trainer-1", "2", "8Gi");
    p.requests.set_quantity("nvidia.com/gpu", "1").unwrap();
    p.tolerations.push(Toleration {
        key: "nvidia.com/gpu".into(),
        operator: TolerationOperator::Exists,
        value: String::new(),
        effect: None,
    });
    let plain = pod("web-1", "1", "1Gi");
    let plan = plan(&snapshot(vec![p, plain]), &[pool, general_purpose_pool()]);
    assert_eq!(claim_of(&plan, "default/trainer-1").node_pool, "gpu");
    assert_eq!(
        claim_of(&plan, "default/web-1").node_pool,
        "general-purpose"
    );
    let gpu_type = &claim_of(&plan, "default/trainer-1").instance_type;
    let it = Catalog::embedded().get(gpu_type).unwrap();
    assert!(it.allocatable.get_milli("nvidia.com/gpu") >= 1000);
}

#[test]
fn a_taint_the_pod_does_not_tolerate_is_named_in_the_reason() {
    let mut pool = general_purpose_pool();
    pool.taints.push(Taint {
        key: "dedicated".into(),
        value: Some("batch".into()),
        effect: TaintEffect::NoSchedule,
    });
    let plan = plan(&snapshot(vec![pod("web-1", "1", "1Gi")]), &[pool]);
    assert_eq!(plan.unschedulable.len(), 1);
    assert!(
        plan.unschedulable[0]
            .reason
            .contains("taint dedicated=batch:NoSchedule not tolerated"),
        "{}",
        plan.unschedulable[0].reason
    );
}

#[test]
fn startup_taints_do_not_block_scheduling() {
    let mut pool = general_purpose_pool();
    pool.startup_taints.push(Taint {
        key: "node.cilium.io/agent-not-ready".into(),
        value: None,
        effect: TaintEffect::NoExecute,
    });
    let plan = plan(&snapshot(vec![pod("web-1", "1", "1Gi")]), &[pool]);
    assert!(plan.unschedulable.is_empty());
}

#[test]
fn an_arm64_node_selector_on_an_amd64_pool_is_unschedulable_with_the_conflict() {
    let mut p = pod("arm64-1", "1", "256M");
    p.node_selector
        .insert("kubernetes.io/arch".into(), "arm64".into());
    let plan = plan(&snapshot(vec![p]), &[general_purpose_pool()]);
    let reason = &plan.unschedulable[0].reason;
    assert!(
        reason.contains("NodePool \"general-purpose\"") && reason.contains("kubernetes.io/arch"),
        "{reason}"
    );
}

#[test]
fn zone_spread_with_max_skew_one_puts_two_pods_in_each_of_three_zones() {
    let pods = (0..6)
        .map(|i| {
            let mut p = pod(&format!("zs-{i}"), "1", "256M");
            p.topology_spread
                .push(spread("topology.kubernetes.io/zone", "zs"));
            p
        })
        .collect();
    let plan = plan(&snapshot(pods), &[general_purpose_pool()]);
    let mut per_zone: BTreeMap<&str, usize> = BTreeMap::new();
    for c in &plan.node_claims {
        *per_zone.entry(c.zone.as_str()).or_default() += c.pods.len();
    }
    assert_eq!(
        per_zone.values().copied().collect::<Vec<_>>(),
        vec![2, 2, 2],
        "{per_zone:?}"
    );
}

#[test]
fn zone_spread_counts_pods_already_running_in_a_zone() {
    let catalog = Catalog::embedded();
    let mut snap = snapshot(vec![]);
    snap.nodes.push(node(
        "n1",
        "m5.large",
        "us-east-1a",
        "general-purpose",
        catalog,
    ));
    for i in 0..2 {
        let mut running = pod(&format!("zs-run-{i}"), "100m", "100M");
        running.labels.insert("app".into(), "zs".into());
        running.node_name = Some("n1".into());
        snap.pods.push(running);
    }
    for i in 0..4 {
        let mut p = pod(&format!("zs-{i}"), "1", "256M");
        p.topology_spread
            .push(spread("topology.kubernetes.io/zone", "zs"));
        snap.pods.push(p);
    }
    let plan = plan(&snap, &[general_purpose_pool()]);
    let mut per_zone: BTreeMap<&str, usize> = BTreeMap::new();
    for c in &plan.node_claims {
        *per_zone.entry(c.zone.as_str()).or_default() += c.pods.len();
    }
    // 2 already in 1a: the 4 new ones go 2 to 1b and 2 to 1c.
    assert_eq!(per_zone.get("us-east-1a"), None, "{per_zone:?}");
    assert_eq!(per_zone.values().sum::<usize>(), 4);
}

#[test]
fn hostname_anti_affinity_gives_each_pod_its_own_node() {
    let pods = (0..3)
        .map(|i| {
            let mut p = pod(&format!("cache-{i}"), "500m", "1Gi");
            p.pod_anti_affinity
                .push(affinity_term("kubernetes.io/hostname", "cache"));
            p
        })
        .collect();
    let plan = plan(&snapshot(pods), &[general_purpose_pool()]);
    assert_eq!(plan.node_claims.len(), 3);
}

#[test]
fn hostname_spread_with_max_skew_one_gives_each_pod_its_own_node() {
    let pods = (0..4)
        .map(|i| {
            let mut p = pod(&format!("hs-{i}"), "250m", "256M");
            p.topology_spread
                .push(spread("kubernetes.io/hostname", "hs"));
            p
        })
        .collect();
    let plan = plan(&snapshot(pods), &[general_purpose_pool()]);
    assert_eq!(plan.node_claims.len(), 4);
}

#[test]
fn zonal_self_affinity_keeps_a_group_in_one_zone() {
    let pods = (0..8)
        .map(|i| {
            let mut p = pod(&format!("za-{i}"), "1", "2Gi");
            p.pod_affinity
                .push(affinity_term("topology.kubernetes.io/zone", "za"));
            p
        })
        .collect();
    let plan = plan(&snapshot(pods), &[general_purpose_pool()]);
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    let zones: std::collections::BTreeSet<&str> =
        plan.node_claims.iter().map(|c| c.zone.as_str()).collect();
    assert_eq!(zones.len(), 1, "{zones:?}");
}

#[test]
fn capacity_type_spread_splits_between_spot_and_on_demand() {
    let pool = node_pool(
        "mixed",
        vec![
            req(
                "karpenter.sh/capacity-type",
                Operator::In,
                &["spot", "on-demand"],
            ),
            req("karpenter.k8s.aws/instance-category", Operator::In, &["m"]),
        ],
    );
    let pods = (0..4)
        .map(|i| {
            let mut p = pod(&format!("ct-{i}"), "1", "1Gi");
            p.topology_spread
                .push(spread("karpenter.sh/capacity-type", "ct"));
            p
        })
        .collect();
    let plan = plan(&snapshot(pods), &[pool]);
    let mut per_ct: BTreeMap<&str, usize> = BTreeMap::new();
    for c in &plan.node_claims {
        *per_ct.entry(c.capacity_type.as_str()).or_default() += c.pods.len();
    }
    assert_eq!(per_ct.get("spot"), Some(&2), "{per_ct:?}");
    assert_eq!(per_ct.get("on-demand"), Some(&2), "{per_ct:?}");
}

#[test]
fn preferred_node_affinity_is_honoured_when_possible_and_relaxed_when_not() {
    let pool = general_purpose_pool();
    let mut likes_m = pod("likes-1", "1", "1Gi");
    likes_m.preferred_node_terms.push(PreferredNodeTerm {
        weight: 50,
        requirements: vec![req(
            "karpenter.k8s.aws/instance-family",
            Operator::In,
            &["m6i"],
        )],
    });
    let mut likes_gpu = pod("dreams-1", "1", "1Gi");
    likes_gpu.preferred_node_terms.push(PreferredNodeTerm {
        weight: 50,
        requirements: vec![req(
            "karpenter.k8s.aws/instance-category",
            Operator::In,
            &["p"],
        )],
    });
    let plan = plan(&snapshot(vec![likes_m, likes_gpu]), &[pool]);
    assert!(plan.unschedulable.is_empty());
    assert!(
        claim_of(&plan, "default/likes-1")
            .instance_type
            .starts_with("m6i.")
    );
}

#[test]
fn schedule_anyway_spread_is_a_preference_not_a_wall() {
    let mut pool = general_purpose_pool();
    pool.requirements.push(req(
        "topology.kubernetes.io/zone",
        Operator::In,
        &["us-east-1a"],
    ));
    let pods = (0..3)
        .map(|i| {
            let mut p = pod(&format!("sa-{i}"), "1", "1Gi");
            let mut s = spread("topology.kubernetes.io/zone", "sa");
            s.when_unsatisfiable = WhenUnsatisfiable::ScheduleAnyway;
            p.topology_spread.push(s);
            p
        })
        .collect();
    let plan = plan(&snapshot(pods), &[pool]);
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
}

#[test]
fn required_zone_spread_that_the_pool_cannot_meet_is_unschedulable_with_the_constraint() {
    let mut pool = general_purpose_pool();
    pool.requirements.push(req(
        "topology.kubernetes.io/zone",
        Operator::In,
        &["us-east-1a"],
    ));
    let catalog = Catalog::embedded();
    let mut snap = snapshot(vec![]);
    snap.nodes
        .push(node("n-b", "m5.large", "us-east-1b", "other", catalog));
    let mut running = pod("dz-run", "100m", "100M");
    running.labels.insert("app".into(), "dz".into());
    running.node_name = Some("n-b".into());
    snap.pods.push(running);
    // The domains are 1a (the pool's) and 1b (the node's); 1c counts for nothing, as
    // no node could be there. n-b has no room for these pods. 1a has 0, 1b has 1: two
    // pods in 1a give skew 1 (fine), a third skew 2.
    for i in 0..3 {
        let mut p = pod(&format!("dz-{i}"), "2", "1Gi");
        p.topology_spread
            .push(spread("topology.kubernetes.io/zone", "dz"));
        snap.pods.push(p);
    }
    let plan = plan(&snap, &[pool]);
    assert_eq!(plan.unschedulable.len(), 1, "{:?}", plan.unschedulable);
    assert_eq!(
        plan.node_claims.iter().map(|c| c.pods.len()).sum::<usize>(),
        2
    );
    assert!(
        plan.unschedulable.iter().all(|u| u
            .reason
            .contains("topology spread on topology.kubernetes.io/zone")),
        "{:?}",
        plan.unschedulable
    );
}

#[test]
fn node_pool_weight_decides_which_pool_is_tried_first() {
    let mut heavy = node_pool(
        "preferred",
        vec![req(
            "karpenter.k8s.aws/instance-category",
            Operator::In,
            &["r"],
        )],
    );
    heavy.weight = 50;
    let light = general_purpose_pool();
    let plan = plan(&snapshot(vec![pod("web-1", "1", "1Gi")]), &[light, heavy]);
    assert_eq!(plan.node_claims[0].node_pool, "preferred");
}

#[test]
fn node_pool_limits_count_existing_nodes_and_stop_new_claims() {
    let catalog = Catalog::embedded();
    let mut pool = general_purpose_pool();
    pool.limits = Some(resources(&[("cpu", "10")]));
    let mut snap = snapshot(
        (0..12)
            .map(|i| pod(&format!("w-{i}"), "1", "1Gi"))
            .collect(),
    );
    // Existing nodes already use 8 of 10 cpu, and have no room left.
    for n in 0..2 {
        let mut nd = node(
            &format!("n{n}"),
            "m5.xlarge",
            "us-east-1a",
            "general-purpose",
            catalog,
        );
        nd.allocatable = resources(&[("cpu", "0"), ("memory", "0"), ("pods", "0")]);
        snap.nodes.push(nd);
    }
    let plan = plan(&snap, &[pool]);
    let new_cpu: i64 = plan
        .node_claims
        .iter()
        .map(|c| {
            catalog
                .get(&c.instance_type)
                .unwrap()
                .capacity
                .get_milli("cpu")
        })
        .sum();
    assert!(
        new_cpu <= 2000,
        "new claims add {new_cpu}m cpu over a 2 cpu headroom"
    );
    assert!(!plan.unschedulable.is_empty());
    assert!(
        plan.unschedulable
            .iter()
            .any(|u| u.reason.contains("limits: cpu")),
        "{:?}",
        plan.unschedulable
    );
}

#[test]
fn in_flight_claims_absorb_pending_pods_before_new_claims_are_made() {
    let pods = (0..3).map(|i| pod(&format!("w-{i}"), "1", "1Gi")).collect();
    let in_flight = [InFlightClaim {
        labels: Default::default(),
        name: "general-purpose-abc12".into(),
        node_pool: "general-purpose".into(),
        instance_type: "m5.2xlarge".into(),
        zone: "us-east-1a".into(),
        capacity_type: crate::catalog::CapacityType::OnDemand,
        pods: vec![],
    }];
    let plan = plan_with(&snapshot(pods), &[general_purpose_pool()], &in_flight);
    assert!(plan.node_claims.is_empty(), "{:?}", plan.node_claims);
    assert_eq!(plan.in_flight[0].target, "general-purpose-abc12");
    assert_eq!(plan.in_flight[0].pods.len(), 3);
}

#[test]
fn free_capacity_on_existing_nodes_is_used_first() {
    let catalog = Catalog::embedded();
    let mut snap = snapshot(vec![pod("w-1", "1", "1Gi")]);
    snap.nodes.push(node(
        "n1",
        "m5.xlarge",
        "us-east-1a",
        "general-purpose",
        catalog,
    ));
    let plan = plan(&snap, &[general_purpose_pool()]);
    assert!(plan.node_claims.is_empty());
    assert_eq!(plan.existing_nodes[0].target, "n1");
}

#[test]
fn daemonset_overhead_counts_only_daemonsets_that_would_land_on_the_node() {
    let mut pool = general_purpose_pool();
    pool.requirements.push(req(
        "node.kubernetes.io/instance-type",
        Operator::In,
        &["m5.large"],
    ));
    // m5.large: 1930m allocatable cpu. A 1500m pod fits only if the 500m arm64-only
    // DaemonSet is not counted; the 300m amd64 one must be.
    let ds = |name: &str, cpu: &str, arch: &str| {
        let mut t = pod(name, cpu, "10Mi");
        t.node_selector
            .insert("kubernetes.io/arch".into(), arch.into());
        DaemonSet {
            namespace: "kube-system".into(),
            name: name.into(),
            template: t,
        }
    };
    let mut snap = snapshot(vec![pod("w-1", "1500m", "1Gi")]);
    snap.daemonsets = vec![
        ds("arm-agent", "500m", "arm64"),
        ds("amd-agent", "300m", "amd64"),
    ];
    let plan1 = plan(&snap, &[pool.clone()]);
    assert!(plan1.unschedulable.is_empty(), "{:?}", plan1.unschedulable);
    snap.daemonsets.push(ds("amd-agent-2", "300m", "amd64"));
    let plan2 = plan(&snap, &[pool]);
    assert_eq!(
        plan2.unschedulable.len(),
        1,
        "600m of amd64 DaemonSets leave no room for 1500m"
    );
}

#[test]
fn min_values_keep_enough_instance_families_in_the_options() {
    let mut pool = general_purpose_pool();
    pool.requirements.push(NodeRequirement {
        key: "karpenter.k8s.aws/instance-family".into(),
        operator: Operator::Exists,
        values: vec![],
        min_values: Some(5),
    });
    let pods = (0..30)
        .map(|i| pod(&format!("w-{i}"), "1", "2Gi"))
        .collect();
    let plan = plan(&snapshot(pods), &[pool]);
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    let catalog = Catalog::embedded();
    for c in &plan.node_claims {
        let families: std::collections::BTreeSet<&str> = c
            .instance_type_options
            .iter()
            .map(|t| catalog.get(t).unwrap().labels["karpenter.k8s.aws/instance-family"].as_str())
            .collect();
        assert!(families.len() >= 5, "{families:?}");
    }
}

#[test]
fn pods_of_one_deployment_fill_few_nodes_rather_than_one_each() {
    let pods = (0..100)
        .map(|i| pod(&format!("w-{i}"), "250m", "512Mi"))
        .collect();
    let plan = plan(&snapshot(pods), &[general_purpose_pool()]);
    assert!(
        plan.node_claims.len() <= 3,
        "{} claims: {:?}",
        plan.node_claims.len(),
        plan.node_claims
            .iter()
            .map(|c| (c.instance_type.clone(), c.pods.len(), c.price_per_hour))
            .collect::<Vec<_>>()
    );
}

#[test]
fn random_workloads_never_break_a_constraint() {
    let mut seed = 7u64;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for round in 0..12 {
        let mut pods = Vec::new();
        for i in 0..(20 + next(80)) {
            let cpu = ["100m", "250m", "500m", "1", "1500m", "3"][next(6) as usize];
            let mem = format!("{}Mi", 100 + next(4000));
            let mut p = pod(&format!("g{}-{i}", next(4)), cpu, &mem);
            match next(7) {
                5 => p.host_ports.push(HostPort {
                    port: 8080 + next(2) as u16,
                    protocol: "TCP".into(),
                    host_ip: String::new(),
                }),
                6 => {
                    p.node_selector.insert("team".into(), "blue".into());
                }
                0 => {
                    let term = spread("topology.kubernetes.io/zone", p.labels["app"].as_str());
                    p.topology_spread.push(term)
                }
                1 => {
                    let term = affinity_term("kubernetes.io/hostname", p.labels["app"].as_str());
                    p.pod_anti_affinity.push(term)
                }
                2 => {
                    p.node_selector
                        .insert("kubernetes.io/arch".into(), "arm64".into());
                }
                _ => {}
            }
            pods.push(p);
        }
        let arm = node_pool(
            "arm",
            vec![
                req("kubernetes.io/arch", Operator::In, &["arm64"]),
                req("team", Operator::In, &["blue", "red"]),
            ],
        );
        let mut snap = snapshot(pods);
        let mut agent = pod("agent", "200m", "128Mi");
        agent.name = "agent".into();
        agent.host_ports.push(HostPort {
            port: 9100,
            protocol: "TCP".into(),
            host_ip: String::new(),
        });
        snap.daemonsets.push(DaemonSet {
            namespace: "kube-system".into(),
            name: "agent".into(),
            template: agent,
        });
        let plan = plan(&snap, &[general_purpose_pool(), arm]);
        assert!(
            plan.unschedulable.iter().all(|u| !u.reason.is_empty()),
            "round {round}"
        );
    }
}

#[test]
fn pods_nominated_to_an_in_flight_claim_stay_on_it_even_when_repacking_would_differ() {
    // Sized for exactly these pods: an m5.large holds 1500m + 300m of requests.
    let pods = vec![
        pod("a-1", "300m", "256Mi"),
        pod("b-1", "1500m", "256Mi"),
        pod("c-1", "1", "256Mi"),
    ];
    let in_flight = [InFlightClaim {
        labels: Default::default(),
        name: "gp-nomin".into(),
        node_pool: "general-purpose".into(),
        instance_type: "m5.large".into(),
        zone: "us-east-1a".into(),
        capacity_type: crate::catalog::CapacityType::OnDemand,
        pods: vec!["default/a-1".into(), "default/b-1".into()],
    }];
    let plan = plan_with(&snapshot(pods), &[general_purpose_pool()], &in_flight);
    assert_eq!(
        plan.in_flight[0].pods,
        vec!["default/a-1".to_string(), "default/b-1".to_string()]
    );
    // Largest-first re-packing would have put b (1500m) and c (1) elsewhere; only c needs a claim.
    assert_eq!(plan.node_claims.len(), 1);
    assert_eq!(plan.node_claims[0].pods, vec!["default/c-1".to_string()]);
}

#[test]
fn a_pod_follows_its_hostname_affinity_target_to_the_in_flight_claim_that_holds_it() {
    let mut db = pod("db", "1", "1Gi");
    db.labels.insert("app".into(), "db".into());
    let mut web = pod("web", "500m", "512Mi");
    web.pod_affinity
        .push(affinity_term("kubernetes.io/hostname", "db"));
    let in_flight = [InFlightClaim {
        labels: Default::default(),
        name: "general-purpose-abc12".into(),
        node_pool: "general-purpose".into(),
        instance_type: "m5.2xlarge".into(),
        zone: "us-east-1a".into(),
        capacity_type: crate::catalog::CapacityType::OnDemand,
        pods: vec!["default/db".into()],
    }];
    let plan = plan_with(
        &snapshot(vec![web, db]),
        &[general_purpose_pool()],
        &in_flight,
    );
    assert!(plan.node_claims.is_empty(), "{:?}", plan.node_claims);
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    assert_eq!(plan.in_flight.len(), 1);
    let mut pods = plan.in_flight[0].pods.clone();
    pods.sort();
    assert_eq!(pods, ["default/db", "default/web"]);
}

#[test]
fn a_claim_pinned_to_one_value_of_a_multi_valued_node_pool_label_carries_it() {
    let mut pool = general_purpose_pool();
    pool.requirements
        .push(req("team", Operator::In, &["red", "blue"]));
    let mut p = pod("red-app", "1", "1Gi");
    p.node_selector.insert("team".into(), "red".into());
    let plan = plan(&snapshot(vec![p]), &[pool]);
    assert_eq!(plan.node_claims.len(), 1);
    assert_eq!(
        plan.node_claims[0].labels,
        BTreeMap::from([("team".to_string(), "red".to_string())]),
        "kube-scheduler binds the pod only if the node has team=red"
    );
}

/// Karpenter's "should balance pods across a label" cases: the NodePool labels its nodes
/// `fake-label: baz`, two existing nodes hold domains foo and bar, and five 1-cpu pods
/// spread over the label with maxSkew 1. Returns how many pods get new claims.
fn pods_placed_over_fake_label(
    pool: NodePool,
    edit_node: impl Fn(&mut Node),
    edit_pod: impl Fn(&mut Pod),
) -> usize {
    let catalog = Catalog::embedded();
    let mut snap = snapshot(vec![]);
    for (name, value) in [("n-foo", "foo"), ("n-bar", "bar")] {
        let mut n = node(name, "m5.large", "us-east-1a", "other", catalog);
        n.labels.insert("fake-label".into(), value.into());
        edit_node(&mut n);
        snap.nodes.push(n);
    }
    for i in 0..5 {
        let mut p = pod(&format!("s-{i}"), "1", "256Mi");
        p.labels.insert("app".into(), "s".into());
        p.topology_spread.push(spread("fake-label", "s"));
        edit_pod(&mut p);
        snap.pods.push(p);
    }
    let plan = plan(&snap, &[pool]);
    plan.node_claims.iter().map(|c| c.pods.len()).sum()
}

/// NodeTaintsPolicy=ignore|honor: the nodes in foo and bar carry a taint the pods do
/// not tolerate.
fn spread_over_tainted_domains(honor_taints: bool) -> usize {
    let mut pool = general_purpose_pool();
    pool.labels.insert("fake-label".into(), "baz".into());
    pods_placed_over_fake_label(
        pool,
        |n| {
            n.taints.push(Taint {
                key: "taintname".into(),
                value: Some("taintvalue".into()),
                effect: TaintEffect::NoSchedule,
            })
        },
        |p| p.topology_spread[0].honor_node_taints = honor_taints,
    )
}

#[test]
fn tainted_nodes_are_spread_domains_unless_the_taints_policy_honours_them() {
    assert_eq!(
        spread_over_tainted_domains(false),
        1,
        "foo and bar count at zero: one pod in baz"
    );
    assert_eq!(
        spread_over_tainted_domains(true),
        5,
        "the tainted nodes are no domains: all in baz"
    );
}

/// NodeAffinityPolicy=ignore|honor: the nodes in foo and bar do not match the pods'
/// nodeSelector.
fn spread_over_unselected_domains(honor_affinity: bool) -> usize {
    let mut pool = general_purpose_pool();
    pool.labels.insert("fake-label".into(), "baz".into());
    pool.labels.insert("selector".into(), "value".into());
    pods_placed_over_fake_label(
        pool,
        |n| {
            n.labels.insert("selector".into(), "mismatch".into());
        },
        |p| {
            p.node_selector.insert("selector".into(), "value".into());
            p.topology_spread[0].honor_node_affinity = honor_affinity;
        },
    )
}

#[test]
fn nodes_the_pod_cannot_select_are_spread_domains_only_when_the_affinity_policy_ignores_it() {
    assert_eq!(spread_over_unselected_domains(false), 1);
    assert_eq!(spread_over_unselected_domains(true), 5);
}
