//! Lifecycle: bring claims in line with the nodes and instances that exist.
//!
//! - Nodes are matched to claims by the instance id in their providerID.
//! - `Launched` → `Registered` when the claim's node appears: the node gets the
//!   NodePool's labels, `karpenter.sh/nodepool`, `karpenter.sh/nodeclaim`,
//!   `karpenter.sh/registered=true`, the instance type's labels, the pool's taints, and
//!   loses the `karpenter.sh/unregistered` taint. The node is patched *before* the
//!   claim is written, and a Registered claim whose node lacks the registered label
//!   is patched again, so a crash between the two heals.
//! - `Registered` → `Initialized` when the node is Ready and none of the pool's
//!   startup taints remain (`karpenter.sh/initialized=true`).
//! - A claim launched into a capacity reservation whose instance EC2 now lists outside
//!   it (the reservation expired or was cancelled; the instance runs on as on-demand)
//!   becomes on-demand: capacity type, price and labels, and its node's labels
//!   (Karpenter's capacity-type sync, reserved → on-demand only).
//! - `Launched` and not registered within the registration TTL → terminated
//!   (`Disrupting(Unregistered)` and the steps of [`crate::terminate`]).
//! - `Disrupting`, `Draining` and `Terminating` claims, whoever disrupted them
//!   (interruption, registration timeout, the disruption job), advance one step of
//!   [`crate::terminate::drive`] on every pass: a refused eviction is tried again, a
//!   drain that was waiting for its replacement starts, a crash or a Lambda timeout in
//!   the middle of a termination never strands a claim.
//! - Owned instances whose `karpenter.sh/nodeclaim` tag names a claim that does not
//!   own them (terminal, or recording another instance) are leaks and are terminated
//!   after a grace period. Instances whose tag names no claim in the store are not
//!   ours as far as the store knows: they are never touched.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use tracing::{info, warn};

use nodewright_core::api::model::NodePool;
use nodewright_core::catalog::{CapacityType, Catalog};
use nodewright_core::cluster::Node;
use nodewright_core::disruption::hash;
use nodewright_core::nodeclaim::{
    ClaimState, DisruptionCause, NodeClaim, instance_id_from_provider_id,
};
use nodewright_core::resources::Resources;
use nodewright_core::well_known::{
    LABEL_CAPACITY_RESERVATION_ID, LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE,
    LABEL_CAPACITY_RESERVATION_TYPE, LABEL_CAPACITY_TYPE, LABEL_INITIALIZED, LABEL_NODECLAIM,
    LABEL_NODEPOOL, LABEL_REGISTERED, TAINT_UNREGISTERED,
};

use crate::context::Ports;
use crate::error::{EngineError, Result};
use crate::lease::LeaseKeeper;
use crate::ports::{
    ClusterEvent, ClusterState, Decision, ErrorKind, EventType, Instance, NodePatch,
};
use crate::terminate::{self, Disrupted};

use nodewright_core::planning_view::is_known_ephemeral_taint;
pub use nodewright_core::planning_view::unregistered_taint;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LifecycleConfig {
    /// A launched claim whose node has not registered after this long is terminated.
    pub registration_ttl: Duration,
    /// A leaked instance is terminated only once it is older than this (its claim's
    /// write may still be in flight).
    pub orphan_grace: Duration,
}

impl Default for LifecycleConfig {
    fn default() -> Self {
        Self {
            registration_ttl: Duration::from_secs(15 * 60),
            orphan_grace: Duration::from_secs(5 * 60),
        }
    }
}

/// What one lifecycle pass did (claim names, instance ids for instances).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LifecycleReport {
    pub registered: Vec<String>,
    pub initialized: Vec<String>,
    /// Claims whose node never registered, now terminated (or on their way).
    pub unregistered: Vec<String>,
    /// Leaked instances terminated.
    pub orphans_terminated: Vec<String>,
    /// Instances tagged with a claim name the store does not know: left alone.
    pub foreign_ignored: Vec<String>,
    /// Claims another writer changed first; retried next tick.
    pub conflicts: Vec<String>,
    /// Claims being taken away that moved this pass: (claim, state now).
    pub advanced: Vec<(String, ClaimState)>,
    /// Terminations that finished this pass (claim names).
    pub terminated: Vec<String>,
    /// The same, counted per NodePool.
    pub terminated_by_pool: BTreeMap<String, usize>,
    /// Claims whose instance left its capacity reservation, now on-demand.
    pub left_reservation: Vec<String>,
    /// Claims this pass put in `Disrupting` (registration timeouts, vanished instances).
    pub disrupted: Vec<Disrupted>,
    /// Pods a disruption budget kept on a draining node this pass.
    pub blocked: Vec<String>,
    /// Pods evicted or deleted this pass (they are pending again).
    pub displaced: Vec<String>,
    /// (claim, error) for claims that could not be advanced this pass; retried on the
    /// next one. One claim's failure never stops the others.
    pub errors: Vec<(String, String)>,
    /// The claims, NodePools and pending pods as the pass left them: the gauges the
    /// provisioner publishes as metrics.
    pub census: Census,
}

/// The cluster as one lifecycle pass left it, counted.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Census {
    /// (NodePool, state) → claims in that state; terminal claims left out.
    pub claims: BTreeMap<(String, ClaimState), usize>,
    /// The hourly price of every claim holding an instance (launched, not terminated).
    pub price_per_hour: f64,
    /// Every NodePool's use (its claims' instance types' capacity) and limits.
    pub pools: Vec<PoolUsage>,
    /// Claims in a state past its deadline ([`stuck_deadline`]).
    pub stuck: Vec<StuckClaim>,
    /// Seconds the oldest pod waiting for capacity has been pending; `None` if none is.
    pub oldest_pending_pod_secs: Option<i64>,
}

/// A NodePool's resources in use and its `spec.limits` (milli-units, as `Resources`).
#[derive(Debug, Clone, PartialEq)]
pub struct PoolUsage {
    pub node_pool: String,
    pub usage: Resources,
    pub limits: Option<Resources>,
}

/// A claim that has been in its state longer than that state should last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StuckClaim {
    pub name: String,
    pub state: ClaimState,
    /// When it should have left the state (Unix seconds).
    pub deadline: i64,
}

/// How long a claim may stay `Launching` (CreateFleet and its retries take seconds).
pub const LAUNCH_TIMEOUT: Duration = Duration::from_secs(10 * 60);
/// How long past its registration TTL a `Launched` claim may wait for the pass that
/// terminates it, and past its drain deadline a `Draining` one may wait for its last
/// pods' deletion.
pub const STUCK_SLACK: Duration = Duration::from_secs(5 * 60);
/// How long a `Terminating` claim may wait for its instance and node to go, and a
/// `Disrupting` one without a deadline for its drain to start.
pub const TERMINATION_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// When a claim in its state is overdue (Unix seconds), if its state has a deadline:
/// `Launching` [`LAUNCH_TIMEOUT`] after its creation; `Launched` the registration TTL
/// (and [`STUCK_SLACK`]) after its launch; `Registered` the registration TTL after its
/// registration (the node never became Ready or kept a startup taint); `Disrupting`
/// at its disruption's deadline, or [`TERMINATION_TIMEOUT`] after it began; `Draining`
/// [`STUCK_SLACK`] after its deadline (none: a drain may wait for a PodDisruptionBudget
/// for as long as it takes, as Karpenter's does); `Terminating` [`TERMINATION_TIMEOUT`]
/// after it began.
pub fn stuck_deadline(claim: &NodeClaim, config: &LifecycleConfig) -> Option<i64> {
    let ttl = secs(config.registration_ttl);
    let deadline = claim.disruption.as_ref().and_then(|d| d.deadline);
    let since = claim.disruption.as_ref().map(|d| d.since);
    match claim.state {
        ClaimState::Launching => Some(claim.created_at + secs(LAUNCH_TIMEOUT)),
        ClaimState::Launched => {
            Some(claim.launched_at.unwrap_or(claim.updated_at) + ttl + secs(STUCK_SLACK))
        }
        ClaimState::Registered => Some(claim.registered_at.unwrap_or(claim.updated_at) + ttl),
        ClaimState::Disrupting => {
            deadline.or_else(|| Some(since.unwrap_or(claim.updated_at) + secs(TERMINATION_TIMEOUT)))
        }
        ClaimState::Draining => deadline.map(|d| d + secs(STUCK_SLACK)),
        ClaimState::Terminating => Some(claim.updated_at + secs(TERMINATION_TIMEOUT)),
        _ => None,
    }
}

/// Counts the claims, pools and pending pods as of `now`.
pub fn census(
    config: &LifecycleConfig,
    state: &ClusterState,
    catalog: &Catalog,
    claims: &[NodeClaim],
    now: i64,
) -> Census {
    let mut out = Census::default();
    let mut usage: HashMap<&str, Resources> = HashMap::new();
    for claim in claims.iter().filter(|c| !c.state.is_terminal()) {
        *out.claims
            .entry((claim.node_pool.clone(), claim.state))
            .or_default() += 1;
        if claim.instance_id.is_some() {
            out.price_per_hour += claim.price_per_hour.unwrap_or_default();
        }
        if let Some(it) = claim.instance_type.as_deref().and_then(|t| catalog.get(t)) {
            usage
                .entry(claim.node_pool.as_str())
                .or_default()
                .add(&it.capacity);
        }
        if let Some(deadline) = stuck_deadline(claim, config).filter(|d| now > *d) {
            out.stuck.push(StuckClaim {
                name: claim.name.clone(),
                state: claim.state,
                deadline,
            });
        }
    }
    out.pools = state
        .node_pools
        .iter()
        .map(|p| PoolUsage {
            node_pool: p.name.clone(),
            usage: usage.remove(p.name.as_str()).unwrap_or_default(),
            limits: p.limits.clone(),
        })
        .collect();
    out.oldest_pending_pod_secs = state
        .pods
        .iter()
        .filter(|p| p.wants_capacity())
        .filter_map(|p| p.created_at)
        .min()
        .map(|created| (now - created).max(0));
    out
}

impl LifecycleReport {
    /// The pass changed nodes or pods: what the cluster looked like before it is stale.
    pub fn changed_cluster(&self) -> bool {
        !(self.registered.is_empty()
            && self.initialized.is_empty()
            && self.unregistered.is_empty()
            && self.advanced.is_empty()
            && self.displaced.is_empty())
    }
}

fn secs(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}

/// One lifecycle pass. `claims` is updated in place with what was written, so the
/// caller plans against the current states.
// The gathered pieces a pass reads are passed one by one: the interruption job calls
// it on what it read itself, with no gather of its own.
#[allow(clippy::too_many_arguments)]
pub async fn reconcile(
    ports: &Ports,
    config: &LifecycleConfig,
    state: &ClusterState,
    catalog: &Catalog,
    claims: &mut [NodeClaim],
    owned: &[Instance],
    adopted_instances: &[Instance],
    lease: Option<&LeaseKeeper>,
) -> Result<LifecycleReport> {
    let mut report = LifecycleReport::default();
    let nodes: HashMap<&str, &Node> = state
        .nodes
        .iter()
        .filter_map(|n| Some((instance_id_from_provider_id(n.provider_id.as_deref()?)?, n)))
        .collect();
    let pools: HashMap<&str, &NodePool> = state
        .node_pools
        .iter()
        .map(|p| (p.name.as_str(), p))
        .collect();

    // Instances that still exist: ours, and Karpenter's that adopted claims record
    // (never candidates for leak collection: only `owned` is).
    let alive: HashSet<&str> = owned
        .iter()
        .chain(adopted_instances)
        .filter(|i| i.state != "terminated")
        .map(|i| i.id.as_str())
        .collect();
    let instances: HashMap<&str, &Instance> = owned.iter().map(|i| (i.id.as_str(), i)).collect();
    for claim in claims.iter_mut() {
        if let Some(lease) = lease {
            // A long pass (many drains) must not outlive the lease it acts under.
            lease.keep(ports).await?;
        }
        let node = claim
            .instance_id
            .as_deref()
            .and_then(|id| nodes.get(id).copied());
        let pool = pools.get(claim.node_pool.as_str()).copied();
        let instance = claim
            .instance_id
            .as_deref()
            .and_then(|id| instances.get(id).copied());
        let outcome = match vanished(ports, claim, &alive) {
            true => clean_up_vanished(ports, claim, &mut report).await,
            false => {
                match left_reservation(ports, claim, instance, node, catalog, &mut report).await {
                    Ok(Some(on_demand)) => {
                        *claim = on_demand;
                        match step(ports, config, claim, node, pool, catalog, &mut report).await {
                            Ok(None) => Ok(Some(claim.clone())),
                            other => other,
                        }
                    }
                    Ok(None) => step(ports, config, claim, node, pool, catalog, &mut report).await,
                    Err(e) => Err(e),
                }
            }
        };
        match outcome {
            Ok(Some(next)) => *claim = next,
            Ok(None) => {}
            Err(EngineError::Store(e)) if e.kind == ErrorKind::Conflict => {
                warn!(claim = %claim.name, error = %e, "claim changed under us; retrying next tick");
                report.conflicts.push(claim.name.clone());
                if let Ok(Some(current)) = ports.claims.get_claim(&claim.name).await {
                    *claim = current;
                }
            }
            Err(e) => {
                warn!(claim = %claim.name, state = claim.state.as_str(), error = %e, kind = ?e.kind(),
                    "could not advance the claim; trying again on the next pass");
                report.errors.push((claim.name.clone(), e.to_string()));
            }
        }
    }

    collect_leaks(ports, config, claims, owned, &mut report).await?;
    for name in &report.terminated {
        if let Some(c) = claims.iter().find(|c| &c.name == name) {
            *report
                .terminated_by_pool
                .entry(c.node_pool.clone())
                .or_default() += 1;
        }
    }
    report.census = census(config, state, catalog, claims, ports.clock.now());
    Ok(report)
}

/// The labels a node in a capacity reservation carries (Karpenter's
/// `ReservedCapacityLabels`).
const RESERVATION_LABELS: [&str; 3] = [
    LABEL_CAPACITY_RESERVATION_ID,
    LABEL_CAPACITY_RESERVATION_TYPE,
    LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE,
];

/// Karpenter's capacity-type sync. A claim launched into a capacity reservation whose
/// instance EC2 now lists as on-demand (the reservation expired or was cancelled; the
/// instance runs on outside it) becomes an on-demand claim: capacity type, on-demand
/// price, no reservation labels; and its registered node is relabelled the same way,
/// so consolidation prices it at what it now costs. The claim and the node are each
/// checked on every pass, so a node patch that failed is done on the next one. Only
/// reserved → on-demand (nothing joins a reservation by itself); claims being taken
/// away are left as they are. `Some` when the claim was rewritten.
async fn left_reservation(
    ports: &Ports,
    claim: &NodeClaim,
    instance: Option<&Instance>,
    node: Option<&Node>,
    catalog: &Catalog,
    report: &mut LifecycleReport,
) -> Result<Option<NodeClaim>> {
    let Some(instance) = instance else {
        return Ok(None);
    };
    let in_service = matches!(
        claim.state,
        ClaimState::Launched | ClaimState::Registered | ClaimState::Initialized
    );
    if !in_service || instance.capacity_type != CapacityType::OnDemand {
        return Ok(None);
    }
    let now = ports.clock.now();
    let mut rewritten = None;
    if claim.capacity_type == Some(CapacityType::Reserved) {
        let reservation = claim
            .labels
            .get(LABEL_CAPACITY_RESERVATION_ID)
            .cloned()
            .unwrap_or_else(|| "?".to_string());
        let on_demand = catalog
            .get(&instance.instance_type)
            .and_then(|it| it.on_demand_price);
        let next = claim.amend(now, |c| {
            c.capacity_type = Some(CapacityType::OnDemand);
            if on_demand.is_some() {
                c.price_per_hour = on_demand;
            }
            for key in RESERVATION_LABELS {
                c.labels.remove(key);
            }
        })?;
        let next = ports.save_claim(claim, next).await?;
        info!(claim = %claim.name, instance = %instance.id, reservation = %reservation, "instance left its capacity reservation; the claim is on-demand now");
        ports
            .record_decision(Decision {
                at: now,
                job: "lifecycle".into(),
                action: format!(
                    "relabel {} ({}) on-demand",
                    claim.name, instance.id
                ),
                reason: format!(
                    "its instance left capacity reservation {reservation} (expired or cancelled) and runs on as on-demand"
                ),
                price_per_hour: next.price_per_hour,
            })
            .await;
        report.left_reservation.push(claim.name.clone());
        rewritten = Some(next);
    }
    let labelled_reserved = node.is_some_and(|n| {
        n.labels.get(LABEL_REGISTERED).map(String::as_str) == Some("true")
            && n.labels.get(LABEL_CAPACITY_TYPE).map(String::as_str)
                == Some(CapacityType::Reserved.as_str())
    });
    if let (Some(node), true) = (node, labelled_reserved) {
        let patch = NodePatch {
            set_labels: [(
                LABEL_CAPACITY_TYPE.to_string(),
                CapacityType::OnDemand.as_str().to_string(),
            )]
            .into(),
            remove_labels: RESERVATION_LABELS.iter().map(|k| k.to_string()).collect(),
            ..NodePatch::default()
        };
        match ports.cluster.patch_node(&node.name, &patch).await {
            Err(e) if e.kind != ErrorKind::NotFound => return Err(e.into()),
            _ => {}
        }
    }
    Ok(rewritten)
}

/// How long after its launch an instance missing from EC2's listing counts as gone
/// (DescribeInstances is eventually consistent for new instances).
const VANISHED_GRACE_SECS: i64 = 120;

/// A live claim whose instance EC2 no longer lists: it was terminated without any event
/// reaching us (a lost message, a manual termination).
fn vanished(ports: &Ports, claim: &NodeClaim, alive: &HashSet<&str>) -> bool {
    let Some(id) = claim.instance_id.as_deref() else {
        return false;
    };
    let since = claim.launched_at.unwrap_or(claim.created_at);
    matches!(
        claim.state,
        ClaimState::Launched | ClaimState::Registered | ClaimState::Initialized
    ) && !alive.contains(id)
        && ports.clock.now() - since >= VANISHED_GRACE_SECS
}

/// Cleans up a claim whose instance is gone, as a `terminated` state change would.
async fn clean_up_vanished(
    ports: &Ports,
    claim: &NodeClaim,
    report: &mut LifecycleReport,
) -> Result<Option<NodeClaim>> {
    warn!(claim = %claim.name, instance = ?claim.instance_id, "the claim's instance is gone; cleaning up");
    let disrupted =
        terminate::disrupt(ports, claim, DisruptionCause::InstanceTerminated, None).await?;
    report
        .disrupted
        .push(Disrupted::new(claim, DisruptionCause::InstanceTerminated));
    ports
        .record_decision(Decision {
            at: ports.clock.now(),
            job: "lifecycle".into(),
            action: format!("clean up {}", claim.name),
            reason: format!(
                "instance {} no longer exists in EC2",
                claim.instance_id.as_deref().unwrap_or("?")
            ),
            price_per_hour: claim.price_per_hour,
        })
        .await;
    let progress = terminate::drive(ports, &disrupted).await?;
    report
        .advanced
        .push((claim.name.clone(), progress.claim.state));
    report.displaced.extend(progress.deleted);
    if progress.claim.state == ClaimState::Terminated {
        report.terminated.push(claim.name.clone());
    }
    Ok(Some(progress.claim))
}

/// Advances one claim by what its node says. `Ok(None)`: nothing to do.
async fn step(
    ports: &Ports,
    config: &LifecycleConfig,
    claim: &NodeClaim,
    node: Option<&Node>,
    pool: Option<&NodePool>,
    catalog: &Catalog,
    report: &mut LifecycleReport,
) -> Result<Option<NodeClaim>> {
    let now = ports.clock.now();
    match (claim.state, node) {
        (ClaimState::Launched, Some(node)) => {
            let registered = register(ports, claim, node, pool, catalog).await?;
            report.registered.push(claim.name.clone());
            // The node may already be Ready with no startup taints left.
            let node_after = patched_view(node, claim, pool, catalog);
            match initialize_if_ready(ports, &registered, &node_after, pool).await? {
                Some(init) => {
                    report.initialized.push(claim.name.clone());
                    Ok(Some(init))
                }
                None => Ok(Some(registered)),
            }
        }
        (ClaimState::Launched, None) => {
            let since = claim.launched_at.unwrap_or(claim.updated_at);
            if now - since < secs(config.registration_ttl) {
                return Ok(None);
            }
            warn!(claim = %claim.name, instance = ?claim.instance_id, launched_at = since, "node never registered; terminating");
            let disrupted =
                terminate::disrupt(ports, claim, DisruptionCause::Unregistered, None).await?;
            report
                .disrupted
                .push(Disrupted::new(claim, DisruptionCause::Unregistered));
            ports
                .emit(ClusterEvent {
                    kind: "Node".into(),
                    namespace: None,
                    name: claim.name.clone(),
                    event_type: EventType::Warning,
                    reason: "Unregistered".into(),
                    message: format!(
                        "NodeClaim {} (instance {}) did not register within {}s",
                        claim.name,
                        claim.instance_id.as_deref().unwrap_or("?"),
                        config.registration_ttl.as_secs()
                    ),
                })
                .await;
            ports
                .record_decision(Decision {
                    at: now,
                    job: "lifecycle".into(),
                    action: format!(
                        "terminate {} ({})",
                        claim.name,
                        claim.instance_id.as_deref().unwrap_or("no instance")
                    ),
                    reason: format!(
                        "node did not register within {}s of launch",
                        config.registration_ttl.as_secs()
                    ),
                    price_per_hour: claim.price_per_hour,
                })
                .await;
            report.unregistered.push(claim.name.clone());
            Ok(Some(terminate::advance(ports, &disrupted).await?))
        }
        (ClaimState::Registered, Some(node)) => {
            let mut view = node.clone();
            if node.labels.get(LABEL_REGISTERED).map(String::as_str) != Some("true") {
                // The registration patch was lost (crash after the claim write): redo it.
                ports
                    .cluster
                    .patch_node(&node.name, &registration_patch(claim, node, pool, catalog))
                    .await?;
                view = patched_view(node, claim, pool, catalog);
            }
            let init = initialize_if_ready(ports, claim, &view, pool).await?;
            if init.is_some() {
                report.initialized.push(claim.name.clone());
            }
            Ok(init)
        }
        (ClaimState::Disrupting | ClaimState::Draining | ClaimState::Terminating, _) => {
            // Whoever started it: finish what is started.
            let progress = terminate::drive(ports, claim).await?;
            let next = progress.claim;
            if next.version != claim.version {
                report.advanced.push((next.name.clone(), next.state));
            }
            if next.state == ClaimState::Terminated {
                report.terminated.push(next.name.clone());
            }
            report.blocked.extend(progress.blocked);
            report.displaced.extend(progress.evicted);
            report.displaced.extend(progress.deleted);
            Ok((next.version != claim.version).then_some(next))
        }
        _ => Ok(None),
    }
}

fn registration_patch(
    claim: &NodeClaim,
    node: &Node,
    pool: Option<&NodePool>,
    catalog: &Catalog,
) -> NodePatch {
    let mut set_labels = BTreeMap::new();
    if let Some(it) = claim.instance_type.as_deref().and_then(|t| catalog.get(t)) {
        // Karpenter puts the instance type's well-known labels on the node; the
        // kubelet may not set the karpenter.k8s.aws ones itself.
        for (k, v) in &it.labels {
            if !node.labels.contains_key(k) {
                set_labels.insert(k.clone(), v.clone());
            }
        }
    }
    if let Some(pool) = pool {
        set_labels.extend(pool.labels.clone());
    }
    set_labels.extend(claim.labels.clone());
    if let Some(ct) = claim.capacity_type {
        set_labels.insert(LABEL_CAPACITY_TYPE.into(), ct.as_str().into());
    }
    set_labels.insert(LABEL_NODEPOOL.into(), claim.node_pool.clone());
    set_labels.insert(LABEL_NODECLAIM.into(), claim.name.clone());
    set_labels.insert(LABEL_REGISTERED.into(), "true".into());
    let add_taints = pool
        .map(|p| {
            p.taints
                .iter()
                .filter(|t| {
                    !node
                        .taints
                        .iter()
                        .any(|x| x.key == t.key && x.effect == t.effect)
                })
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    // The drift hashes the claim was launched with, under nodewright's scheme version
    // (a node Karpenter launched carries its own version and is never compared).
    let mut set_annotations = BTreeMap::new();
    if let Some(h) = &claim.nodepool_hash {
        set_annotations.insert(
            nodewright_core::well_known::ANNOTATION_NODEPOOL_HASH.to_string(),
            h.clone(),
        );
        set_annotations.insert(
            nodewright_core::well_known::ANNOTATION_NODEPOOL_HASH_VERSION.to_string(),
            hash::HASH_VERSION.to_string(),
        );
    }
    if let Some(h) = &claim.nodeclass_hash {
        set_annotations.insert(
            nodewright_core::well_known::ANNOTATION_NODECLASS_HASH.to_string(),
            h.clone(),
        );
        set_annotations.insert(
            nodewright_core::well_known::ANNOTATION_NODECLASS_HASH_VERSION.to_string(),
            hash::HASH_VERSION.to_string(),
        );
    }
    NodePatch {
        set_labels,
        remove_labels: Vec::new(),
        set_annotations,
        add_taints,
        remove_taints: vec![TAINT_UNREGISTERED.into()],
    }
}

/// The node as it is after the registration patch (saves a re-read).
fn patched_view(
    node: &Node,
    claim: &NodeClaim,
    pool: Option<&NodePool>,
    catalog: &Catalog,
) -> Node {
    let patch = registration_patch(claim, node, pool, catalog);
    let mut n = node.clone();
    n.labels.extend(patch.set_labels);
    n.taints.retain(|t| !patch.remove_taints.contains(&t.key));
    n.taints.extend(patch.add_taints);
    n
}

async fn register(
    ports: &Ports,
    claim: &NodeClaim,
    node: &Node,
    pool: Option<&NodePool>,
    catalog: &Catalog,
) -> Result<NodeClaim> {
    ports
        .cluster
        .patch_node(&node.name, &registration_patch(claim, node, pool, catalog))
        .await?;
    let now = ports.clock.now();
    let next = claim.transition(ClaimState::Registered, now, |c| {
        c.node_name = Some(node.name.clone());
        c.registered_at = Some(now);
    })?;
    let next = ports.save_claim(claim, next).await?;
    info!(claim = %claim.name, node = %node.name, "registered");
    ports
        .emit(ClusterEvent {
            kind: "Node".into(),
            namespace: None,
            name: node.name.clone(),
            event_type: EventType::Normal,
            reason: "Registered".into(),
            message: format!("Node registered for NodeClaim {}", claim.name),
        })
        .await;
    Ok(next)
}

/// `Registered → Initialized` if the node is Ready and neither a startup taint nor a
/// known ephemeral taint remains (as Karpenter initializes: kube-scheduler binds nothing
/// to a node still tainted not-ready, however Ready the kubelet says it is).
async fn initialize_if_ready(
    ports: &Ports,
    claim: &NodeClaim,
    node: &Node,
    pool: Option<&NodePool>,
) -> Result<Option<NodeClaim>> {
    let startup: HashSet<&str> = pool
        .map(|p| p.startup_taints.iter().map(|t| t.key.as_str()).collect())
        .unwrap_or_default();
    let blocked = node
        .taints
        .iter()
        .any(|t| is_known_ephemeral_taint(t) || startup.contains(t.key.as_str()));
    if !node.ready || blocked {
        return Ok(None);
    }
    let patch = NodePatch {
        set_labels: BTreeMap::from([(LABEL_INITIALIZED.to_string(), "true".to_string())]),
        ..NodePatch::default()
    };
    ports.cluster.patch_node(&node.name, &patch).await?;
    let now = ports.clock.now();
    let next = claim.transition(ClaimState::Initialized, now, |c| {
        c.initialized_at = Some(now);
        c.node_name.get_or_insert_with(|| node.name.clone());
    })?;
    let next = ports.save_claim(claim, next).await?;
    info!(claim = %claim.name, node = %node.name, "initialized");
    ports
        .emit(ClusterEvent {
            kind: "Node".into(),
            namespace: None,
            name: node.name.clone(),
            event_type: EventType::Normal,
            reason: "Initialized".into(),
            message: format!("Node initialized for NodeClaim {}", claim.name),
        })
        .await;
    Ok(Some(next))
}

async fn collect_leaks(
    ports: &Ports,
    config: &LifecycleConfig,
    claims: &[NodeClaim],
    owned: &[Instance],
    report: &mut LifecycleReport,
) -> Result<()> {
    let now = ports.clock.now();
    let by_name: HashMap<&str, &NodeClaim> = claims.iter().map(|c| (c.name.as_str(), c)).collect();
    // `owned` was listed before this pass: an instance a termination of this very pass
    // just took away still reads running there. It is not a leak.
    let just_terminated: HashSet<&str> = report.terminated.iter().map(String::as_str).collect();
    // Nor is one another driver terminated since (its claim re-read Terminated after a
    // conflict): a claim Terminated within the grace still holds its instance, and an
    // instance that outlives that is collected then.
    let held: HashSet<&str> = claims
        .iter()
        .filter(|c| {
            !c.state.is_terminal()
                || just_terminated.contains(c.name.as_str())
                || (c.state == ClaimState::Terminated
                    && now - c.updated_at < secs(config.orphan_grace))
        })
        .filter_map(|c| c.instance_id.as_deref())
        .collect();
    for inst in owned
        .iter()
        .filter(|i| i.state != "terminated" && i.state != "shutting-down")
    {
        if held.contains(inst.id.as_str()) {
            continue;
        }
        let claim = inst
            .claim_name
            .as_deref()
            .and_then(|n| by_name.get(n).copied());
        let Some(claim) = claim else {
            info!(instance = %inst.id, tag = ?inst.claim_name, "ignored foreign instance: no claim in the store");
            ports
                .record_decision(Decision {
                    at: now,
                    job: "lifecycle".into(),
                    action: format!("ignored foreign instance {}", inst.id),
                    reason: format!(
                        "its karpenter.sh/nodeclaim tag ({}) names no claim in the store",
                        inst.claim_name.as_deref().unwrap_or("none")
                    ),
                    price_per_hour: None,
                })
                .await;
            report.foreign_ignored.push(inst.id.clone());
            continue;
        };
        if claim.state == ClaimState::Launching && claim.instance_id.is_none() {
            // The provisioner adopts it (crash between CreateFleet and the claim write).
            continue;
        }
        if now - inst.launch_time < secs(config.orphan_grace) {
            continue;
        }
        warn!(instance = %inst.id, claim = %claim.name, state = claim.state.as_str(), "terminating leaked instance");
        match ports.cloud.terminate(std::slice::from_ref(&inst.id)).await {
            Ok(()) => {}
            Err(e) if e.kind == ErrorKind::NotFound => continue,
            Err(e) => return Err(e.into()),
        }
        ports
            .record_decision(Decision {
                at: now,
                job: "lifecycle".into(),
                action: format!("terminate leaked instance {}", inst.id),
                reason: format!(
                    "tagged for claim {} which is {} and records instance {}",
                    claim.name,
                    claim.state.as_str(),
                    claim.instance_id.as_deref().unwrap_or("none")
                ),
                price_per_hour: None,
            })
            .await;
        report.orphans_terminated.push(inst.id.clone());
    }
    Ok(())
}
