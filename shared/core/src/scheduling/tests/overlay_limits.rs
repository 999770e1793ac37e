//! NodePool limits count a type's capacity as the pool's NodeOverlays leave it: new
//! claims and in-flight claims add the overlaid resources, and a registered node whose
//! claim is still in flight counts once.

use super::*;
use crate::overlay::OverlaysApplied;

const DEVICE: &str = "example.com/device";

/// The pool `default`, limited to `limits`, and overlays giving every type of it
/// `example.com/device: 4` (`device_overlay`) and m5 a 30% discount (`discount`).
fn pool_and_pricing(limits: &str, device_overlay: bool, discount: bool) -> (NodePool, Pricing) {
    let mut text = format!(
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: default}}\nspec:\n  limits: {{{limits}}}\n  template:\n    spec:\n      requirements:\n        - {{key: karpenter.k8s.aws/instance-family, operator: In, values: [m5, c5]}}\n        - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}\n      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n---\napiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {{name: default}}\nspec:\n  role: r\n  amiSelectorTerms: [{{alias: al2023@latest}}]\n  subnetSelectorTerms: [{{tags: {{a: b}}}}]\n  securityGroupSelectorTerms: [{{tags: {{a: b}}}}]\n"
    );
    if device_overlay {
        text.push_str("---\napiVersion: karpenter.sh/v1alpha1\nkind: NodeOverlay\nmetadata: {name: devices}\nspec:\n  requirements: []\n  capacity: {example.com/device: \"4\"}\n");
    }
    if discount {
        text.push_str("---\napiVersion: karpenter.sh/v1alpha1\nkind: NodeOverlay\nmetadata: {name: savings}\nspec:\n  requirements: [{key: karpenter.k8s.aws/instance-family, operator: In, values: [m5]}]\n  priceAdjustment: \"-30%\"\n");
    }
    let manifests = crate::api::load(&[("m.yaml".into(), text)]).unwrap_or_else(|e| panic!("{e}"));
    let mut pricing = Pricing::default();
    let overlays: Vec<_> = manifests.node_overlays.iter().cloned().map(Ok).collect();
    let resolution = crate::overlay::resolve(
        &overlays,
        &manifests.node_pools,
        Catalog::embedded(),
        &pricing.zones,
    );
    assert!(resolution.statuses.iter().all(|s| s.succeeded()));
    pricing.overlays = std::sync::Arc::new(resolution.table);
    let pool = manifests.node_pools.into_iter().next().expect("the pool");
    (pool, pricing)
}

fn plan_priced(
    snapshot: &ClusterSnapshot,
    pool: &NodePool,
    pricing: &Pricing,
    in_flight: &[InFlightClaim],
) -> ProvisioningPlan {
    let pools = std::slice::from_ref(pool);
    let plan = plan_provisioning(&ProvisioningInput {
        snapshot,
        node_pools: pools,
        node_classes: &[],
        catalog: Catalog::embedded(),
        pricing,
        in_flight,
    });
    provision_is_schedule(snapshot, pools, in_flight, pricing);
    plan
}

fn device_pod(name: &str) -> Pod {
    let mut p = pod(name, "1", "1Gi");
    p.requests.set_milli(DEVICE, 4000);
    p
}

fn in_flight_claim(name: &str, zone: &str) -> InFlightClaim {
    InFlightClaim {
        labels: Default::default(),
        name: name.into(),
        node_pool: "default".into(),
        instance_type: "m5.xlarge".into(),
        zone: zone.into(),
        capacity_type: crate::catalog::CapacityType::OnDemand,
        pods: vec![],
    }
}

#[test]
fn a_limit_on_a_resource_only_an_overlay_adds_stops_new_claims_at_the_limit() {
    let (pool, pricing) = pool_and_pricing("example.com/device: \"8\"", true, false);
    let pods = (0..3).map(|i| device_pod(&format!("gpu-{i}"))).collect();
    let plan = plan_priced(&snapshot(pods), &pool, &pricing, &[]);
    // Each node has 4 devices (the overlay) and each pod takes 4: two nodes reach 8.
    assert_eq!(plan.node_claims.len(), 2, "{:#?}", plan.node_claims);
    assert_eq!(plan.unschedulable.len(), 1, "{:#?}", plan.unschedulable);
    assert!(
        plan.unschedulable[0]
            .reason
            .contains("NodePool \"default\" limits: example.com/device would reach 12 of 8"),
        "{}",
        plan.unschedulable[0].reason
    );
    for claim in &plan.node_claims {
        assert_eq!(
            claim.overlays_applied,
            OverlaysApplied {
                price: false,
                capacity: true
            }
        );
    }
}

#[test]
fn an_in_flight_claim_counts_the_overlaid_capacity_it_was_planned_with() {
    let (pool, pricing) = pool_and_pricing("example.com/device: \"8\"", true, false);
    let pods = (0..3).map(|i| device_pod(&format!("gpu-{i}"))).collect();
    let in_flight = [in_flight_claim("default-abcde", "us-east-1a")];
    let plan = plan_priced(&snapshot(pods), &pool, &pricing, &in_flight);
    // The claim in flight takes one pod and 4 of the 8 devices; one new claim takes
    // the other 4 (counted as the catalog's 0, two would be made).
    assert_eq!(plan.in_flight[0].pods.len(), 1, "{:#?}", plan.in_flight);
    assert_eq!(plan.node_claims.len(), 1, "{:#?}", plan.node_claims);
    assert_eq!(plan.unschedulable.len(), 1, "{:#?}", plan.unschedulable);
    assert!(
        plan.unschedulable[0]
            .reason
            .contains("limits: example.com/device"),
        "{}",
        plan.unschedulable[0].reason
    );
}

#[test]
fn a_registered_node_whose_claim_is_in_flight_counts_once_against_limits() {
    let catalog = Catalog::embedded();
    let (pool, pricing) = pool_and_pricing("cpu: \"8\"", false, false);
    // The claim's node registered (4 cpu, not Ready yet): with the claim that is 4
    // cpu used, not 8, so a 2-cpu node for a pod the claim cannot take still fits.
    let mut registered = node("n1", "m5.xlarge", "us-east-1a", "default", catalog);
    registered.ready = false;
    registered
        .labels
        .insert("karpenter.sh/nodeclaim".into(), "default-abcde".into());
    let mut elsewhere = pod("web", "1", "1Gi");
    elsewhere
        .node_selector
        .insert("topology.kubernetes.io/zone".into(), "us-east-1b".into());
    let mut snap = snapshot(vec![elsewhere]);
    snap.nodes.push(registered);
    let in_flight = [in_flight_claim("default-abcde", "us-east-1a")];
    let plan = plan_priced(&snap, &pool, &pricing, &in_flight);
    assert!(plan.unschedulable.is_empty(), "{:#?}", plan.unschedulable);
    assert_eq!(plan.node_claims.len(), 1, "{:#?}", plan.node_claims);
    let cpu = catalog
        .get(&plan.node_claims[0].instance_type)
        .expect("a catalog type")
        .capacity
        .get_milli("cpu");
    assert!(cpu <= 4000, "{cpu}m over the 4 cpu left");
}

#[test]
fn a_planned_claim_says_whether_overlays_priced_or_sized_its_options() {
    let (pool, pricing) = pool_and_pricing("cpu: \"100\"", false, true);
    let plan = plan_priced(
        &snapshot(vec![pod("web", "1", "1Gi")]),
        &pool,
        &pricing,
        &[],
    );
    let claim = &plan.node_claims[0];
    assert!(
        claim
            .instance_type_options
            .iter()
            .any(|t| t.starts_with("m5.")),
        "{claim:#?}"
    );
    assert_eq!(
        claim.overlays_applied,
        OverlaysApplied {
            price: true,
            capacity: false
        }
    );
    // Only c5 among the options: no overlay reached the claim.
    let mut c5_only = pool.clone();
    c5_only.requirements.push(req(
        "karpenter.k8s.aws/instance-family",
        Operator::In,
        &["c5"],
    ));
    let plan = plan_priced(
        &snapshot(vec![pod("web", "1", "1Gi")]),
        &c5_only,
        &pricing,
        &[],
    );
    assert!(plan.node_claims[0].overlays_applied.is_none());
    let json = serde_json::to_value(&plan.node_claims[0]).expect("JSON");
    assert!(json.get("overlaysApplied").is_none(), "{json:#}");
}
