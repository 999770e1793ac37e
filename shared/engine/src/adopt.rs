//! Adopting the nodes Karpenter launched, after a migration from Karpenter (opt-in:
//! `NODEWRIGHT_ADOPT_KARPENTER_NODES`).
//!
//! Once Karpenter is gone, its nodes would otherwise run unmanaged forever: no
//! consolidation, drift, expiry or interruption handling would ever reach them, since
//! nodewright acts only on instances its store records. Adoption records each of them
//! as a claim, directly in state `Initialized` ([`NodeClaim::adopted`]), after which
//! they are ordinary claims.
//!
//! A node qualifies when all of these hold:
//! - it carries `karpenter.sh/nodepool`, naming a NodePool that exists;
//! - its providerID names an instance Karpenter launched *for this cluster* (the
//!   `karpenter_instances` listing: tagged for the cluster, with Karpenter's
//!   `karpenter.sh/nodepool` tag, not nodewright's marker) — a label alone proves
//!   nothing, anyone can write one;
//! - no claim in the store records that instance, in any state (a tombstone included:
//!   an instance nodewright already took away is not adopted again).
//!
//! The claim is named after the node's `karpenter.sh/nodeclaim` label (Karpenter's
//! NodeClaim), else after the node. Names are deterministic, so two adopters racing
//! for the same node write the same claim and one of them gets `Conflict`: the other
//! adopted it first. If the name is taken by a claim for a *different* instance (a
//! nodewright claim that happens to share Karpenter's generated name), the node's name
//! is used instead.

use std::collections::{HashMap, HashSet};

use tracing::{info, warn};

use nodewright_core::api::model::NodePool;
use nodewright_core::catalog::{CapacityType, Catalog};
use nodewright_core::cluster::Node;
use nodewright_core::nodeclaim::{AdoptedInstance, NodeClaim, instance_id_from_provider_id};
use nodewright_core::pricing::Pricing;
use nodewright_core::well_known::{
    LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_NODEPOOL, LABEL_ZONE,
};

use crate::context::Ports;
use crate::error::Result;
use crate::ports::{ClusterState, Decision, ErrorKind, Instance};
use nodewright_core::well_known::LABEL_NODECLAIM;

/// Nodes Karpenter launched for this cluster, recorded as claims (state Initialized) so
/// consolidation, drift, expiry and interruptions cover them.
///
/// `claims` is every claim in the store; `karpenter_instances` is
/// [`crate::ports::Cloud::cluster_instances_launched_by_karpenter`]. Returns the claims
/// written by this call (nodes someone else adopted first are skipped). Store errors
/// other than a lost race abort, leaving the rest for the next call.
pub async fn adopt_karpenter_nodes(
    ports: &Ports,
    state: &ClusterState,
    claims: &[NodeClaim],
    karpenter_instances: &[Instance],
    catalog: &Catalog,
    pricing: &Pricing,
    now: i64,
) -> Result<Vec<NodeClaim>> {
    let recorded: HashSet<&str> = claims
        .iter()
        .filter_map(|c| c.instance_id.as_deref())
        .collect();
    let instances: HashMap<&str, &Instance> = karpenter_instances
        .iter()
        .map(|i| (i.id.as_str(), i))
        .collect();
    let pools: HashMap<&str, &NodePool> = state
        .node_pools
        .iter()
        .map(|p| (p.name.as_str(), p))
        .collect();
    // An adopted claim's price: what the offering costs, whether or not it is in the
    // insufficient-capacity cache right now (the instance exists either way).
    let mut pricing = pricing.clone();
    pricing.unavailable.clear();

    let mut adopted = Vec::new();
    for node in &state.nodes {
        let Some(pool) = node
            .labels
            .get(LABEL_NODEPOOL)
            .and_then(|p| pools.get(p.as_str()).copied())
        else {
            continue;
        };
        let Some(instance) = node
            .provider_id
            .as_deref()
            .and_then(instance_id_from_provider_id)
            .and_then(|id| instances.get(id).copied())
        else {
            continue;
        };
        if recorded.contains(instance.id.as_str()) {
            continue;
        }
        let claim = NodeClaim::adopted(
            adopted_instance(node, instance, pool, catalog, &pricing),
            now,
        );
        if let Some(claim) = create(ports, claim, node).await? {
            info!(claim = %claim.name, node = %node.name, instance = %instance.id,
                nodepool = %pool.name, "adopted a node Karpenter launched");
            ports
                .record_decision(Decision {
                    at: now,
                    job: "adopt".into(),
                    action: format!(
                        "adopt node {} (instance {}, {} in {}) as {}",
                        node.name,
                        instance.id,
                        claim.instance_type.as_deref().unwrap_or("?"),
                        claim.zone.as_deref().unwrap_or("?"),
                        claim.name
                    ),
                    reason: format!(
                        "Karpenter launched it for this cluster (NodePool {}) and no claim records it",
                        pool.name
                    ),
                    price_per_hour: claim.price_per_hour,
                })
                .await;
            adopted.push(claim);
        }
    }
    Ok(adopted)
}

/// What the claim records, from the node's labels and the instance's description.
fn adopted_instance(
    node: &Node,
    instance: &Instance,
    pool: &NodePool,
    catalog: &Catalog,
    pricing: &Pricing,
) -> AdoptedInstance {
    let label = |key: &str| node.labels.get(key).filter(|v| !v.is_empty()).cloned();
    let instance_type = label(LABEL_INSTANCE_TYPE)
        .or_else(|| Some(instance.instance_type.clone()).filter(|t| !t.is_empty()))
        .unwrap_or_default();
    let zone = Some(instance.zone.clone())
        .filter(|z| !z.is_empty())
        .or_else(|| label(LABEL_ZONE))
        .unwrap_or_default();
    let capacity_type = label(LABEL_CAPACITY_TYPE)
        .and_then(|c| CapacityType::parse(&c))
        .unwrap_or(instance.capacity_type);
    let price_per_hour = catalog
        .get(&instance_type)
        .and_then(|it| pricing.running_price(it, &zone, capacity_type));
    AdoptedInstance {
        name: label(LABEL_NODECLAIM).unwrap_or_else(|| node.name.clone()),
        node_pool: pool.name.clone(),
        node_class: pool.node_class_ref.name.clone(),
        instance_id: instance.id.clone(),
        instance_type,
        zone,
        capacity_type,
        price_per_hour,
        node_name: node.name.clone(),
        launched_at: instance.launch_time,
    }
}

/// Writes the claim. `None` when the instance turned out to be recorded already (someone
/// adopted it first).
async fn create(ports: &Ports, claim: NodeClaim, node: &Node) -> Result<Option<NodeClaim>> {
    let mut claim = claim;
    loop {
        match ports.claims.create_claim(&claim).await {
            Ok(()) => return Ok(Some(claim)),
            Err(e) if e.kind == ErrorKind::Conflict => {
                let holder = ports.claims.get_claim(&claim.name).await?;
                let same_instance = holder
                    .as_ref()
                    .is_some_and(|h| h.instance_id == claim.instance_id);
                if same_instance || holder.is_none() || claim.name == node.name {
                    // Adopted by someone else first (or the name is lost for good: the
                    // next call sees the store as it is then).
                    info!(claim = %claim.name, node = %node.name, "adopted by someone else first; skipping");
                    return Ok(None);
                }
                warn!(claim = %claim.name, node = %node.name,
                    "claim name taken by another instance; adopting under the node's name");
                claim.name = node.name.clone();
            }
            Err(e) => return Err(e.into()),
        }
    }
}
