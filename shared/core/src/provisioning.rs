//! `plan_provisioning`: from a cluster snapshot, NodePools, a catalog and the claims
//! already in flight, the NodeClaims to launch. Planning never fails: pods that cannot
//! be placed come back as data with the constraint that stops them.

use serde::Serialize;

use crate::api::model::{Ec2NodeClass, NodePool};
use crate::catalog::Catalog;
use crate::cluster::{ClusterSnapshot, NotProvisionable, Pod};
use crate::overlay::OverlaysApplied;
use crate::pricing::Pricing;
use crate::scheduling::{InFlightClaim, NewClaim, Requirements, SchedulerInput, schedule};

/// One NodeClaim to launch.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedNodeClaim {
    pub node_pool: String,
    /// The cheapest type that fits all the claim's pods.
    pub instance_type: String,
    /// The cheapest compatible types that fit, cheapest first (the fleet request's
    /// overrides): at most [`MAX_INSTANCE_TYPE_OPTIONS`](crate::scheduling::MAX_INSTANCE_TYPE_OPTIONS) (60, what one CreateFleet takes),
    /// more only when the NodePool's minValues needs them; they satisfy its minValues.
    pub instance_type_options: Vec<String>,
    /// How many compatible types fit in all: more than `instance_type_options` lists
    /// when the list was capped.
    pub compatible_instance_types: usize,
    pub capacity_type: String,
    pub zone: String,
    pub price_per_hour: f64,
    /// "namespace/name"
    pub pods: Vec<String>,
    /// Labels the node must carry beyond its NodePool's and its type's: values the
    /// plan settled on for a multi-valued key (a pod's selector, a topology pin).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: std::collections::BTreeMap<String, String>,
    /// Whether NodeOverlays priced or sized any of `instance_type_options`: the
    /// NodeClaim's `karpenter.sh/price-overlay-applied` / `capacity-overlay-applied`.
    #[serde(skip_serializing_if = "OverlaysApplied::is_none")]
    pub overlays_applied: OverlaysApplied,
    /// Zones and capacity types the claim may launch in (the fleet may pick another
    /// offering than the cheapest when capacity is short).
    #[serde(skip)]
    pub zones: Vec<String>,
    #[serde(skip)]
    pub capacity_types: Vec<String>,
    #[serde(skip)]
    pub requirements: Requirements,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UnschedulablePod {
    pub pod: String,
    pub reason: String,
}

/// A pending pod no capacity is launched for, and why (see [`NotProvisionable`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NotProvisionedPod {
    pub pod: String,
    pub reason: String,
    /// The reason as data, for callers that branch on it.
    #[serde(skip)]
    pub why: NotProvisionable,
}

/// Pending pods that already fit somewhere: an existing node or an in-flight claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Absorbed {
    /// Node name, or NodeClaim name for in-flight claims.
    pub target: String,
    pub pods: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProvisioningPlan {
    pub node_claims: Vec<PlannedNodeClaim>,
    pub unschedulable: Vec<UnschedulablePod>,
    pub total_price_per_hour: f64,
    /// Pending pods that fit free capacity on existing nodes (kube-scheduler will bind them).
    pub existing_nodes: Vec<Absorbed>,
    /// Pending pods counted against NodeClaims already launching.
    pub in_flight: Vec<Absorbed>,
    /// Pending pods that are not nodewright's to launch capacity for: another
    /// scheduler's, nominated by preemption, not yet marked Unschedulable by
    /// kube-scheduler, or waiting on a volume claim.
    pub not_provisioned: Vec<NotProvisionedPod>,
}

pub struct ProvisioningInput<'a> {
    pub snapshot: &'a ClusterSnapshot,
    pub node_pools: &'a [NodePool],
    /// The EC2NodeClasses the pools name (their kubelet settings size nodes).
    pub node_classes: &'a [Ec2NodeClass],
    pub catalog: &'a Catalog,
    pub pricing: &'a Pricing,
    pub in_flight: &'a [InFlightClaim],
}

/// A new claim of the scheduler as the NodeClaim to launch (`pods` is the input the
/// claim's pod indices refer to): its cheapest option is the type it names.
pub fn planned_claim(c: &NewClaim, pods: &[Pod]) -> PlannedNodeClaim {
    PlannedNodeClaim {
        pods: c.pods.iter().map(|&p| pods[p].key()).collect(),
        ..planned_claim_unnamed(c)
    }
}

/// [`planned_claim`] with `pods` left empty, for callers that name them later or not
/// at all (a speculative solve that is only priced).
pub fn planned_claim_unnamed(c: &NewClaim) -> PlannedNodeClaim {
    let cheapest = &c.options[0];
    PlannedNodeClaim {
        node_pool: c.node_pool.clone(),
        instance_type: cheapest.instance_type.clone(),
        instance_type_options: c.options.iter().map(|o| o.instance_type.clone()).collect(),
        compatible_instance_types: c.compatible_types,
        capacity_type: cheapest.capacity_type.as_str().to_string(),
        zone: cheapest.zone.clone(),
        price_per_hour: cheapest.price,
        pods: Vec::new(),
        labels: c.labels.clone(),
        overlays_applied: c.overlays_applied,
        zones: c.zones.clone(),
        capacity_types: c
            .capacity_types
            .iter()
            .map(|ct| ct.as_str().to_string())
            .collect(),
        requirements: c.requirements.clone(),
    }
}

pub fn plan_provisioning(input: &ProvisioningInput<'_>) -> ProvisioningPlan {
    let pods = &input.snapshot.pods;
    let result = schedule(&SchedulerInput {
        pods,
        nodes: &input.snapshot.nodes,
        daemonsets: &input.snapshot.daemonsets,
        node_pools: input.node_pools,
        node_classes: input.node_classes,
        catalog: input.catalog,
        pricing: input.pricing,
        in_flight: input.in_flight,
    });
    let keys = |idx: &[usize]| idx.iter().map(|&p| pods[p].key()).collect::<Vec<_>>();
    let node_claims: Vec<PlannedNodeClaim> = result
        .new_claims
        .iter()
        .map(|c| planned_claim(c, pods))
        .collect();
    // Not `.sum()`: `Sum for f64` starts at -0.0 (the IEEE identity of addition), so a
    // plan that launches nothing would cost "-0.0" in logs and `$-0.0000/hour` in `plan`.
    let total_price_per_hour = node_claims
        .iter()
        .fold(0.0, |total, c| total + c.price_per_hour);
    let not_provisioned = pods
        .iter()
        .filter(|p| p.is_pending())
        .filter_map(|p| {
            let why = p.not_provisionable()?;
            Some(NotProvisionedPod {
                pod: p.key(),
                reason: why.to_string(),
                why,
            })
        })
        .collect();
    ProvisioningPlan {
        not_provisioned,
        node_claims,
        unschedulable: result
            .unschedulable
            .iter()
            .map(|u| UnschedulablePod {
                pod: pods[u.pod].key(),
                reason: u.reason.to_string(),
            })
            .collect(),
        total_price_per_hour,
        existing_nodes: result
            .existing_nodes
            .iter()
            .map(|a| Absorbed {
                target: a.node.clone(),
                pods: keys(&a.pods),
            })
            .collect(),
        in_flight: result
            .in_flight
            .iter()
            .map(|a| Absorbed {
                target: a.claim.clone(),
                pods: keys(&a.pods),
            })
            .collect(),
    }
}
