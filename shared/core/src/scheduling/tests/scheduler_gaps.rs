//! Volume zones under topology spread, hostname requirements and new claims.

use super::*;
use crate::volumes::{PersistentVolume, PodClaim, Storage, VolumeClaim, apply_volume_topology};

const ZONE: &str = "topology.kubernetes.io/zone";
const HOST: &str = "kubernetes.io/hostname";

/// `pod` using claim `data-<pod>`, bound to a volume in `zone`.
fn with_zonal_volume(pod: &mut Pod, zone: &str, storage: &mut Storage) {
    let claim = format!("data-{}", pod.name);
    let volume = format!("pv-{}", pod.name);
    pod.claims.push(PodClaim {
        volume: "data".into(),
        claim: claim.clone(),
    });
    storage.claims.push(VolumeClaim {
        namespace: "default".into(),
        name: claim,
        volume_name: Some(volume.clone()),
        storage_class: Some("gp3".into()),
        bind_completed: true,
        ..VolumeClaim::default()
    });
    storage.volumes.push(PersistentVolume {
        name: volume,
        required_terms: vec![vec![req(ZONE, Operator::In, &[zone])]],
        ..PersistentVolume::default()
    });
}

/// Three m5.large nodes, one per zone, each running one `web` pod, and a pending `web`
/// pod too large for them with a zone spread (maxSkew 1, `min_domains`) and a volume
/// in `volume_zone`.
fn spread_cluster_with_a_volume(volume_zone: &str, min_domains: u32) -> ClusterSnapshot {
    let catalog = Catalog::embedded();
    let mut snap = snapshot(vec![]);
    for (n, z) in [
        ("n-a", "us-east-1a"),
        ("n-b", "us-east-1b"),
        ("n-c", "us-east-1c"),
    ] {
        snap.nodes
            .push(node(n, "m5.large", z, "general-purpose", catalog));
        let mut running = pod(&format!("web-{n}"), "100m", "128Mi");
        running.node_name = Some(n.into());
        snap.pods.push(running);
    }
    let mut storage = Storage::default();
    let mut p = pod("web-db", "3", "1Gi");
    let mut s = spread(ZONE, "web");
    s.min_domains = Some(min_domains);
    p.topology_spread.push(s);
    with_zonal_volume(&mut p, volume_zone, &mut storage);
    snap.pods.push(p);
    apply_volume_topology(&mut snap.pods, &storage);
    snap
}

#[test]
fn a_volume_in_one_zone_does_not_shrink_the_zones_a_min_domains_spread_counts() {
    for min_domains in [1, 3] {
        let snap = spread_cluster_with_a_volume("us-east-1a", min_domains);
        let plan = plan(&snap, &[general_purpose_pool()]);
        assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
        assert_eq!(plan.node_claims.len(), 1);
        assert_eq!(plan.node_claims[0].zone, "us-east-1a");
    }
}

#[test]
fn a_volume_zone_still_binds_its_pod_when_the_spread_would_rather_go_elsewhere() {
    // Two web pods in us-east-1a already: a third there would be skew 2 over 1b and 1c.
    let mut snap = spread_cluster_with_a_volume("us-east-1a", 3);
    let mut second = pod("web-extra", "100m", "128Mi");
    second.node_name = Some("n-a".into());
    snap.pods.push(second);
    let plan = plan(&snap, &[general_purpose_pool()]);
    assert!(plan.node_claims.is_empty(), "{:?}", plan.node_claims);
    assert_eq!(plan.unschedulable.len(), 1);
    assert_eq!(plan.unschedulable[0].pod, "default/web-db");
}

#[test]
fn a_pods_own_terms_are_kept_apart_from_its_volumes() {
    let snap = spread_cluster_with_a_volume("us-east-1b", 3);
    let p = snap.pods.last().unwrap();
    assert_eq!(p.own_node_terms, Some(vec![]));
    assert_eq!(
        p.required_node_terms,
        vec![vec![req(ZONE, Operator::In, &["us-east-1b"])]]
    );
}

/// A one-CPU pod with `node_selector` and required terms.
fn host_pod(name: &str, node_selector: &[(&str, &str)], terms: Vec<Vec<NodeRequirement>>) -> Pod {
    let mut p = pod(name, "1", "1Gi");
    for (k, v) in node_selector {
        p.node_selector.insert(k.to_string(), v.to_string());
    }
    p.required_node_terms = terms.into();
    p
}

#[test]
fn hostname_requirements_never_open_a_claim_whatever_they_are_combined_with() {
    let cases = [
        host_pod("sel", &[(HOST, "ip-gone")], vec![]),
        host_pod(
            "sel-zone",
            &[(HOST, "ip-gone"), (ZONE, "us-east-1a")],
            vec![],
        ),
        // Hostnames that do not intersect leave none at all: still no new node.
        host_pod(
            "conflict",
            &[(HOST, "ip-gone")],
            vec![vec![req(HOST, Operator::In, &["ip-other"])]],
        ),
        host_pod(
            "ored",
            &[],
            vec![
                vec![req(HOST, Operator::In, &["ip-1"])],
                vec![
                    req(HOST, Operator::In, &["ip-2"]),
                    req(ZONE, Operator::In, &["us-east-1b"]),
                ],
            ],
        ),
        host_pod(
            "does-not-exist",
            &[],
            vec![vec![req(HOST, Operator::DoesNotExist, &[])]],
        ),
        host_pod("gt", &[], vec![vec![req(HOST, Operator::Gt, &["5"])]]),
    ];
    for p in cases {
        let name = p.name.clone();
        let mut with_preference = p.clone();
        with_preference.name = format!("{name}-preferring");
        with_preference
            .preferred_node_terms
            .push(PreferredNodeTerm {
                weight: 10,
                requirements: vec![req(HOST, Operator::In, &["ip-3"])],
            });
        let plan = plan(
            &snapshot(vec![p, with_preference]),
            &[general_purpose_pool()],
        );
        assert!(
            plan.node_claims.is_empty(),
            "{name}: {:?}",
            plan.node_claims
        );
        assert_eq!(plan.unschedulable.len(), 2, "{name}");
    }
}

#[test]
fn a_hostname_term_ored_with_one_without_a_hostname_opens_a_claim_by_the_other() {
    let p = host_pod(
        "either",
        &[],
        vec![
            vec![req(HOST, Operator::In, &["ip-gone"])],
            vec![req(ZONE, Operator::In, &["us-east-1c"])],
        ],
    );
    let plan = plan(&snapshot(vec![p]), &[general_purpose_pool()]);
    assert_eq!(plan.node_claims.len(), 1);
    assert_eq!(plan.node_claims[0].zone, "us-east-1c");
}

#[test]
fn not_in_and_exists_on_the_hostname_admit_a_new_node() {
    let p = host_pod(
        "roaming",
        &[],
        vec![vec![
            req(HOST, Operator::NotIn, &["ip-gone"]),
            req(HOST, Operator::Exists, &[]),
        ]],
    );
    let plan = plan(&snapshot(vec![p]), &[general_purpose_pool()]);
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    assert_eq!(plan.node_claims.len(), 1);
}

const FAMILY: &str = "karpenter.k8s.aws/instance-family";

/// The general-purpose pool limited to three types of two families, `instance-family`
/// minValues 3: no claim can keep it.
fn pool_with_unkeepable_min_values() -> NodePool {
    let mut pool = general_purpose_pool();
    pool.requirements.push(req(
        "node.kubernetes.io/instance-type",
        Operator::In,
        &["m5.large", "m5.xlarge", "c5.xlarge"],
    ));
    pool.requirements.push(NodeRequirement {
        key: FAMILY.into(),
        operator: Operator::Exists,
        values: vec![],
        min_values: Some(3),
    });
    pool
}

fn plan_under(policy: crate::scheduling::requirements::MinValuesPolicy) -> ProvisioningPlan {
    let pods = (0..3).map(|i| pod(&format!("w-{i}"), "1", "2Gi")).collect();
    let snap = snapshot(pods);
    let pools = [pool_with_unkeepable_min_values()];
    let pricing = Pricing {
        min_values_policy: policy,
        ..Pricing::default()
    };
    let input = ProvisioningInput {
        snapshot: &snap,
        node_pools: &pools,
        node_classes: &[],
        catalog: Catalog::embedded(),
        pricing: &pricing,
        in_flight: &[],
    };
    let plan = plan_provisioning(&input);
    let scheduled = SchedulerInput {
        pods: &snap.pods,
        nodes: &snap.nodes,
        daemonsets: &snap.daemonsets,
        node_pools: &pools,
        node_classes: &[],
        catalog: Catalog::embedded(),
        pricing: &pricing,
        in_flight: &[],
    };
    assert_eq!(
        PreparedScheduler::new(&scheduled).provision(),
        schedule(&scheduled),
        "consolidation's prepared scheduler plans under the same policy"
    );
    plan
}

#[test]
fn an_unkeepable_min_values_leaves_pods_pending_under_strict() {
    use crate::scheduling::requirements::MinValuesPolicy;
    let plan = plan_under(MinValuesPolicy::Strict);
    assert!(plan.node_claims.is_empty(), "{:?}", plan.node_claims);
    assert_eq!(plan.unschedulable.len(), 3);
    assert_eq!(
        plan.unschedulable[0].reason,
        "NodePool \"general-purpose\": minValues 3 for karpenter.k8s.aws/instance-family cannot be met (only 2 distinct values fit)"
    );
}

#[test]
fn best_effort_lowers_an_unkeepable_min_values_to_the_families_that_fit_and_launches() {
    use crate::scheduling::requirements::MinValuesPolicy;
    let plan = plan_under(MinValuesPolicy::BestEffort);
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    assert!(!plan.node_claims.is_empty());
    let pool = crate::scheduling::Requirements::from_node_requirements(
        &pool_with_unkeepable_min_values().requirements,
    );
    for c in &plan.node_claims {
        assert_eq!(c.requirements.get(FAMILY).unwrap().min_values, Some(2));
        assert_eq!(
            c.requirements.min_values_lowered_from(&pool),
            vec![(FAMILY.to_string(), 3, 2)]
        );
    }
    let placed: usize = plan.node_claims.iter().map(|c| c.pods.len()).sum();
    assert_eq!(placed, 3);
}

#[test]
fn best_effort_leaves_a_keepable_min_values_as_written() {
    use crate::scheduling::requirements::MinValuesPolicy;
    let mut pool = general_purpose_pool();
    pool.requirements.push(NodeRequirement {
        key: FAMILY.into(),
        operator: Operator::Exists,
        values: vec![],
        min_values: Some(5),
    });
    let snap = snapshot(vec![pod("w-0", "1", "2Gi")]);
    let pricing = Pricing {
        min_values_policy: MinValuesPolicy::BestEffort,
        ..Pricing::default()
    };
    let plan = plan_provisioning(&ProvisioningInput {
        snapshot: &snap,
        node_pools: std::slice::from_ref(&pool),
        node_classes: &[],
        catalog: Catalog::embedded(),
        pricing: &pricing,
        in_flight: &[],
    });
    assert_eq!(plan.node_claims.len(), 1);
    assert_eq!(
        plan.node_claims[0]
            .requirements
            .get(FAMILY)
            .unwrap()
            .min_values,
        Some(5)
    );
}
