//! The cost of plans: the repack pass against the cheapest plan of whole nodes (an exact
//! cover) and a fractional lower bound, and the guarantees repacking must keep.

use super::*;

/// The on-demand types a pool allows, as (allocatable, price).
fn allowed_on_demand(pool: &NodePool) -> Vec<(crate::resources::Resources, f64)> {
    let reqs = crate::scheduling::Requirements::from_node_requirements(&pool.requirements);
    Catalog::embedded()
        .types
        .iter()
        .filter_map(|t| {
            let price = t.on_demand_price?;
            let mut l = t.labels.clone();
            l.insert(
                crate::well_known::LABEL_CAPACITY_TYPE.into(),
                "on-demand".into(),
            );
            l.insert(crate::well_known::LABEL_NODEPOOL.into(), pool.name.clone());
            Pricing::default()
                .zones
                .iter()
                .any(|z| {
                    l.insert(crate::well_known::LABEL_ZONE.into(), z.clone());
                    reqs.matches_labels(&l)
                })
                .then(|| (t.allocatable.clone(), price))
        })
        .collect()
}

/// The cheapest plan of whole nodes for `n` identical pods, exactly (cover DP).
fn cheapest_whole_node_plan(
    n: usize,
    request: &crate::resources::Resources,
    pool: &NodePool,
) -> f64 {
    let per_node: Vec<(usize, f64)> = allowed_on_demand(pool)
        .into_iter()
        .filter_map(|(alloc, price)| {
            let k = ["cpu", "memory", "pods"]
                .iter()
                .filter(|r| request.get_milli(r) > 0)
                .map(|r| alloc.get_milli(r) / request.get_milli(r))
                .min()?;
            (k > 0).then_some((k as usize, price))
        })
        .collect();
    let mut best = vec![0.0f64; n + 1];
    for i in 1..=n {
        best[i] = per_node
            .iter()
            .map(|(k, p)| p + best[i.saturating_sub(*k)])
            .fold(f64::INFINITY, f64::min);
    }
    best[n]
}

#[test]
fn ten_uniform_pods_get_the_cheapest_whole_node_plan_not_one_big_node() {
    let pods: Vec<Pod> = (0..10)
        .map(|i| pod(&format!("u-{i}"), "1", "2Gi"))
        .collect();
    let request = pods[0].requests.clone();
    let pool = general_purpose_pool();
    let plan = plan(&snapshot(pods), std::slice::from_ref(&pool));
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    let best = cheapest_whole_node_plan(10, &request, &pool);
    assert!(
        plan.total_price_per_hour <= best * 1.02 + 1e-9,
        "plan {} vs cheapest whole-node plan {best}: {:?}",
        plan.total_price_per_hour,
        plan.node_claims
            .iter()
            .map(|c| (c.instance_type.clone(), c.pods.len()))
            .collect::<Vec<_>>()
    );
}

#[test]
fn small_uniform_workloads_are_within_two_percent_of_the_cheapest_whole_node_plan() {
    let pool = general_purpose_pool();
    for (n, cpu, mem) in [
        (3, "500m", "1Gi"),
        (17, "1", "1Gi"),
        (30, "2", "4Gi"),
        (50, "250m", "3Gi"),
    ] {
        let pods: Vec<Pod> = (0..n).map(|i| pod(&format!("s-{i}"), cpu, mem)).collect();
        let request = pods[0].requests.clone();
        let plan = plan(&snapshot(pods), std::slice::from_ref(&pool));
        let best = cheapest_whole_node_plan(n, &request, &pool);
        assert!(
            plan.total_price_per_hour <= best * 1.02 + 1e-9,
            "{n} × {cpu}/{mem}: plan {} vs cheapest whole-node plan {best}",
            plan.total_price_per_hour
        );
    }
}

#[test]
fn a_mixed_workload_costs_within_five_percent_of_its_fractional_lower_bound() {
    let mut seed = 11u64;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n) as usize
    };
    let cpus = ["100m", "250m", "500m", "1", "2", "4"];
    let mems = [
        "128Mi", "256Mi", "512Mi", "1Gi", "2Gi", "4Gi", "8Gi", "16Gi",
    ];
    let pods: Vec<Pod> = (0..600)
        .map(|i| pod(&format!("m-{i}"), cpus[next(6)], mems[next(8)]))
        .collect();
    let pool = general_purpose_pool();
    let dims = |r: &crate::resources::Resources| {
        [
            r.get_milli("cpu") as f64 / 1000.0,
            r.get_milli("memory") as f64 / 1000.0 / (1u64 << 30) as f64,
            r.get_milli("pods") as f64 / 1000.0,
        ]
    };
    let mut demand = vec![0.0; 3];
    for p in &pods {
        for (d, v) in demand.iter_mut().zip(dims(&p.requests)) {
            *d += v;
        }
    }
    let types = allowed_on_demand(&pool);
    let caps: Vec<Vec<f64>> = types.iter().map(|(a, _)| dims(a).to_vec()).collect();
    let prices: Vec<f64> = types.iter().map(|(_, p)| *p).collect();
    let bound = crate::scheduling::lp::cheapest_fractional_fleet(&demand, &caps, &prices)
        .unwrap()
        .cost;
    let plan = plan(&snapshot(pods), std::slice::from_ref(&pool));
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    let ratio = plan.total_price_per_hour / bound;
    assert!(
        (1.0 - 1e-9..=1.05).contains(&ratio),
        "plan / bound = {ratio}"
    );
}

#[test]
fn repacking_unconstrained_pods_leaves_anti_affinity_and_spread_pods_their_guarantees() {
    let mut pods: Vec<Pod> = (0..40)
        .map(|i| pod(&format!("free-{i}"), "1", "3Gi"))
        .collect();
    for i in 0..4 {
        let mut p = pod(&format!("solo-{i}"), "500m", "512Mi");
        p.labels.insert("app".into(), "solo".into());
        p.pod_anti_affinity = vec![affinity_term("kubernetes.io/hostname", "solo")].into();
        pods.push(p);
    }
    for i in 0..6 {
        let mut p = pod(&format!("spread-{i}"), "1", "1Gi");
        p.labels.insert("app".into(), "web".into());
        p.topology_spread = vec![spread("topology.kubernetes.io/zone", "web")].into();
        pods.push(p);
    }
    // `plan` checks every constraint with `testing::violations`.
    let plan = plan(&snapshot(pods), &[general_purpose_pool()]);
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    let placed: usize = plan.node_claims.iter().map(|c| c.pods.len()).sum();
    assert_eq!(placed, 50);
    let solo_claims: std::collections::HashSet<String> = (0..4)
        .map(|i| claim_of(&plan, &format!("default/solo-{i}")).pods.join(","))
        .collect();
    assert_eq!(
        solo_claims.len(),
        4,
        "each anti-affinity pod on its own node"
    );
}
