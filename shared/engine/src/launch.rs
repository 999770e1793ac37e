//! The launch path, shared by the provisioner (claims for pending pods) and the
//! disruption command machine (replacements): a claim is written `Launching` *before*
//! CreateFleet, launched across its cheapest offerings with the ICE fallback
//! (offerings EC2 reports out of capacity are recorded for `ice_ttl` and dropped from
//! the request), backed off on throttling, and recorded `Launched` or `LaunchFailed` —
//! in the store, the decision log and an Event on the claim's first pod. A claim left
//! `Launching` by a crash is adopted (its instance is found by tag) or launched again
//! with the same ClientToken ([`Launcher::recover_launching`]): never twice. A claim
//! another invocation wrote moments ago (the disruption function launching a
//! replacement) is left to it for [`LAUNCH_IN_FLIGHT`]: its CreateFleet may be under
//! way, and a second request would at best repeat it.

use std::collections::{BTreeMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tracing::{info, warn};

use nodewright_core::api::model::NodePool;
use nodewright_core::catalog::{CapacityType, Reservation};
use nodewright_core::disruption::hash;
use nodewright_core::nodeclaim::{ClaimSpec, ClaimState, NodeClaim};
use nodewright_core::provisioning::PlannedNodeClaim;
use nodewright_core::well_known::LABEL_NODEPOOL;

use crate::context::Ports;
use crate::error::{EngineError, Result};
use crate::gather::Gathered;
use crate::lifecycle::{self};
use crate::ports::{
    ClusterEvent, Decision, ErrorKind, EventType, LaunchError, LaunchRequest, Launched, Offering,
};
use nodewright_core::well_known::LABEL_NODECLAIM;

/// One instance of reservation `id` taken by a launch: this tick's later launches and
/// plans see one fewer (an empty one is no longer offered). The reservation as it was,
/// for the node's labels; `None` when the launch was not into a known reservation.
fn take_reservation(gathered: &mut Gathered, id: Option<&str>) -> Option<Reservation> {
    let id = id?;
    let r = gathered
        .pricing
        .reservations
        .iter_mut()
        .find(|r| r.id == id)?;
    let taken = r.clone();
    r.available = r.available.saturating_sub(1);
    Some(taken)
}

/// How long a `Launching` claim another invocation wrote is presumed to be launching
/// there: CreateFleet with its ICE fallback and throttling backoff (4 attempts from
/// 500 ms) takes seconds, so a claim still `Launching` after this was left by a crash.
pub const LAUNCH_IN_FLIGHT: Duration = Duration::from_secs(30);

/// CreateFleet accepts at most this many overrides per request.
pub const MAX_OFFERINGS: usize = 60;

/// How launches are named, retried and how long an offering out of capacity is avoided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Who launches (the Lambda's request id): part of the hash claim names come from.
    pub holder: String,
    /// How long an offering that reported insufficient capacity is avoided.
    pub ice_ttl: Duration,
    /// CreateFleet attempts on throttling/unavailability before the claim is left
    /// `Launching` for the next tick.
    pub launch_attempts: u32,
    /// First backoff delay; doubled on each retry.
    pub backoff: Duration,
}

impl LaunchConfig {
    /// The defaults: offerings out of capacity avoided 3 minutes (Karpenter's ICE
    /// cache TTL), 4 attempts on throttling from a 500-ms backoff.
    pub fn new(holder: impl Into<String>) -> Self {
        Self {
            holder: holder.into(),
            ice_ttl: Duration::from_secs(3 * 60),
            launch_attempts: 4,
            backoff: Duration::from_millis(500),
        }
    }
}

/// One claim launched (or adopted) this tick.
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchedClaim {
    pub name: String,
    pub node_pool: String,
    pub instance_id: String,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: CapacityType,
    pub price_per_hour: f64,
    pub pods: usize,
}

/// What the launches of one pass did, for the caller's report.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct LaunchLog {
    pub(crate) launched: Vec<LaunchedClaim>,
    /// Claims left `Launching` by a crash whose instance was found and recorded.
    pub(crate) adopted: Vec<String>,
    /// (claim, why) for claims that became `LaunchFailed`.
    pub(crate) failed: Vec<(String, String)>,
    /// Claims left `Launching` after retryable errors; the next tick retries them.
    pub(crate) deferred: Vec<String>,
}

enum LaunchOutcome {
    Launched(Box<NodeClaim>, Launched),
    Failed(String),
    Deferred(String),
}

/// Writes and launches claims over the ports.
pub(crate) struct Launcher {
    ports: Ports,
    config: LaunchConfig,
    /// Feeds claim names; with the lease token and time it makes them unique.
    seq: AtomicU64,
    /// Claims this launcher began to launch and did not see through (deferred, or the
    /// tick aborted): no CreateFleet of theirs is under way, so they are recovered at
    /// once rather than after [`LAUNCH_IN_FLIGHT`].
    attempted: Mutex<HashSet<String>>,
}

impl Launcher {
    pub(crate) fn new(ports: Ports, config: LaunchConfig) -> Self {
        Self {
            ports,
            config,
            seq: AtomicU64::new(0),
            attempted: Mutex::new(HashSet::new()),
        }
    }

    pub(crate) fn ports(&self) -> &Ports {
        &self.ports
    }

    fn attempted(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        // A panic while holding it leaves only names in it: still usable.
        self.attempted.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn attempted_here(&self, claim: &str) -> bool {
        self.attempted().contains(claim)
    }

    /// Claims found `Launching` at tick start: a previous tick wrote them and then
    /// crashed, or left them after retryable errors. Each is adopted (its instance,
    /// tagged with its name, exists) or launched again with the same ClientToken,
    /// unless another invocation wrote it less than [`LAUNCH_IN_FLIGHT`] ago.
    pub(crate) async fn recover_launching(
        &self,
        gathered: &mut Gathered,
        log: &mut LaunchLog,
    ) -> Result<()> {
        let launching: Vec<NodeClaim> = gathered
            .claims
            .iter()
            .filter(|c| c.state == ClaimState::Launching)
            .cloned()
            .collect();
        let now = self.ports.clock.now();
        let in_flight = i64::try_from(LAUNCH_IN_FLIGHT.as_secs()).unwrap_or(30);
        for claim in launching {
            let found = gathered
                .owned
                .iter()
                .find(|i| {
                    i.claim_name.as_deref() == Some(claim.name.as_str()) && i.state != "terminated"
                })
                .cloned();
            if let Some(mut inst) = found {
                // EC2 names the reservation a reserved instance runs in: its node gets
                // the reservation's labels, from the reservations gathered (where the
                // instance already counts); from one no longer listed, the id alone.
                let reservation_id = inst
                    .capacity_reservation_id
                    .take()
                    .filter(|_| inst.capacity_type == CapacityType::Reserved);
                let reservation = reservation_id.as_deref().and_then(|id| {
                    gathered
                        .pricing
                        .reservations
                        .iter()
                        .chain(&gathered.expiring_reservations)
                        .find(|r| r.id == id)
                        .cloned()
                });
                let mut claim = claim;
                if let (Some(id), None) = (&reservation_id, &reservation) {
                    // The store checks the claim's state and version, not its labels.
                    claim.labels.insert(
                        nodewright_core::well_known::LABEL_CAPACITY_RESERVATION_ID.to_string(),
                        id.clone(),
                    );
                }
                let on_demand = gathered
                    .catalog
                    .get(&inst.instance_type)
                    .and_then(|it| it.on_demand_price);
                let price = match inst.capacity_type {
                    // Paid for already, though the reservation may be full with it.
                    CapacityType::Reserved => {
                        on_demand.map(|p| p / nodewright_core::catalog::RESERVED_PRICE_DIVISOR)
                    }
                    ct => gathered
                        .catalog
                        .get(&inst.instance_type)
                        .and_then(|it| gathered.pricing.running_price(it, &inst.zone, ct))
                        .or(on_demand),
                }
                .unwrap_or(0.0);
                let launched = Launched {
                    instance_id: inst.id.clone(),
                    instance_type: inst.instance_type.clone(),
                    zone: inst.zone.clone(),
                    capacity_type: inst.capacity_type,
                    price,
                    reservation_id,
                    unavailable: vec![],
                };
                match self
                    .mark_launched(&claim, &launched, reservation.as_ref(), inst.launch_time)
                    .await
                {
                    Ok(next) => {
                        info!(claim = %claim.name, instance = %inst.id, "adopted the instance of a claim left Launching");
                        gathered.put_claim(next);
                        log.adopted.push(claim.name.clone());
                    }
                    Err(EngineError::Store(e)) if e.kind == ErrorKind::Conflict => {
                        warn!(claim = %claim.name, error = %e, "claim changed while adopting; next tick");
                    }
                    Err(e) => return Err(e),
                }
                continue;
            }
            if now - claim.updated_at < in_flight && !self.attempted_here(&claim.name) {
                info!(claim = %claim.name, "claim Launching for moments, maybe in another invocation's CreateFleet; left to it");
                continue;
            }
            let Some(pool) = gathered
                .pools
                .iter()
                .find(|p| p.name == claim.node_pool)
                .cloned()
            else {
                let why = format!(
                    "NodePool {:?} no longer exists or its EC2NodeClass cannot be used",
                    claim.node_pool
                );
                self.fail(&claim, &why, gathered, log).await?;
                continue;
            };
            info!(claim = %claim.name, "claim left Launching with no instance; launching again with the same client token");
            self.launch_and_record(claim, &pool, gathered, log).await?;
        }
        Ok(())
    }

    /// Writes a new `Launching` claim under a fresh name (retrying on a name clash).
    pub(crate) async fn create_claim(
        &self,
        planned: &PlannedNodeClaim,
        pool: &NodePool,
        gathered: &Gathered,
        token: u64,
        names: &mut HashSet<String>,
    ) -> Result<NodeClaim> {
        const ATTEMPTS: u32 = 16;
        let now = self.ports.clock.now();
        for _ in 0..ATTEMPTS {
            let name = self.claim_name(&pool.name, token, now);
            if !names.insert(name.clone()) {
                continue;
            }
            let claim = self.new_claim(claim_spec(planned, pool, name), pool, gathered, now);
            match self.ports.claims.create_claim(&claim).await {
                Ok(()) => return Ok(claim),
                Err(e) if e.kind == ErrorKind::Conflict => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(EngineError::NoFreeName {
            pool: pool.name.clone(),
            attempts: ATTEMPTS,
        })
    }

    /// A `Launching` claim for `spec`, carrying the drift hashes of its NodePool and
    /// EC2NodeClass as they are now (written on its node at registration), and whether
    /// the pool's NodeOverlays priced or sized any of its options (as the plan found
    /// with the same overlays; a disruption command's replacement is checked against
    /// the overlays of the tick that launches it, as Karpenter checks at creation).
    pub(crate) fn new_claim(
        &self,
        spec: ClaimSpec,
        pool: &NodePool,
        gathered: &Gathered,
        now: i64,
    ) -> NodeClaim {
        let overlays_applied = gathered
            .pricing
            .overlays
            .applied_to_claim(pool, spec.instance_type_options.iter().map(String::as_str));
        let mut claim = NodeClaim::launching(spec, now);
        claim.overlays_applied = overlays_applied;
        claim.nodepool_hash = Some(hash::nodepool_hash(pool));
        claim.nodeclass_hash = gathered
            .classes
            .get(&pool.node_class_ref.name)
            .map(|(class, _)| hash::nodeclass_hash(class));
        claim
    }

    /// `<pool>-<5 lowercase alphanumerics>` from a hash of (pool, holder, lease token,
    /// time, sequence number): no two invocations share a token, no two calls a number.
    fn claim_name(&self, pool: &str, token: u64, now: i64) -> String {
        const ALPHABET: &[u8; 36] = b"abcdefghijklmnopqrstuvwxyz0123456789";
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        let mut h = DefaultHasher::new();
        (pool, &self.config.holder, token, now, n).hash(&mut h);
        let mut x = h.finish();
        let mut suffix = String::with_capacity(5);
        for _ in 0..5 {
            suffix.push(char::from(ALPHABET[(x % 36) as usize]));
            x /= 36;
        }
        format!("{pool}-{suffix}")
    }

    fn launch_request(
        &self,
        claim: &NodeClaim,
        pool: &NodePool,
        gathered: &Gathered,
    ) -> Option<LaunchRequest> {
        let (node_class, resolved) = gathered.classes.get(&claim.node_class)?;
        let mut resolved = resolved.clone();
        // The counts this tick's launches left (the gather's, less what launched since),
        // of the reservations the claim's requirements allow.
        resolved.reservations = gathered
            .pricing
            .reservations
            .iter()
            .filter(|r| {
                r.available > 0 && r.selected_by(&claim.node_class) && r.agrees_with(&claim.labels)
            })
            .cloned()
            .collect();
        let subnet_zones: HashSet<&str> =
            resolved.subnets.iter().map(|s| s.zone.as_str()).collect();
        let mut offerings = Vec::new();
        let mut prices_overlaid = false;
        for t in claim.instance_type_options.iter() {
            let Some(it) = gathered.catalog.get(t) else {
                continue;
            };
            for zone in claim
                .zones
                .iter()
                .filter(|z| subnet_zones.contains(z.as_str()))
            {
                for &ct in &claim.capacity_types {
                    // A reserved offering only where a reservation the claim's class
                    // selects and its requirements allow has room left.
                    if ct == CapacityType::Reserved
                        && !gathered
                            .pricing
                            .reservations_for(Some(&claim.node_class), t, zone)
                            .any(|r| r.agrees_with(&claim.labels))
                    {
                        continue;
                    }
                    // The pool's NodeOverlays order the offerings, as they ordered
                    // the plan's options.
                    if let Some(price) = gathered.pricing.price_in(&pool.name, it, zone, ct) {
                        prices_overlaid |= gathered
                            .pricing
                            .price(it, zone, ct)
                            .is_some_and(|base| (base - price).abs() > 1e-12);
                        offerings.push(Offering {
                            instance_type: t.clone(),
                            zone: zone.clone(),
                            capacity_type: ct,
                            price,
                        });
                    }
                }
            }
        }
        // Stable: equal prices keep the planner's order.
        offerings.sort_by(|a, b| a.price.total_cmp(&b.price));
        offerings.truncate(MAX_OFFERINGS);
        let mut labels: BTreeMap<String, String> = pool.labels.clone();
        labels.extend(claim.labels.clone());
        labels.insert(LABEL_NODEPOOL.into(), pool.name.clone());
        labels.insert(LABEL_NODECLAIM.into(), claim.name.clone());
        let mut taints = pool.taints.clone();
        taints.extend(pool.startup_taints.iter().cloned());
        taints.push(lifecycle::unregistered_taint());
        Some(LaunchRequest {
            claim_name: claim.name.clone(),
            node_pool: pool.name.clone(),
            node_class: node_class.clone(),
            resolved,
            offerings,
            prices_overlaid,
            labels,
            taints,
            kubernetes_version: gathered.kubernetes_version.clone(),
        })
    }

    /// Launches one claim and records the outcome in the store, the report, the
    /// decision log and the cluster's events.
    pub(crate) async fn launch_and_record(
        &self,
        claim: NodeClaim,
        pool: &NodePool,
        gathered: &mut Gathered,
        log: &mut LaunchLog,
    ) -> Result<()> {
        let Some(request) = self.launch_request(&claim, pool, gathered) else {
            let why = format!("EC2NodeClass {:?} cannot be used", claim.node_class);
            return self.fail(&claim, &why, gathered, log).await;
        };
        self.attempted().insert(claim.name.clone());
        let outcome = self.launch(&claim, request, gathered).await?;
        if !matches!(outcome, LaunchOutcome::Deferred(_)) {
            self.attempted().remove(&claim.name);
        }
        match outcome {
            LaunchOutcome::Launched(next, l) => {
                info!(
                    claim = %next.name,
                    instance = %l.instance_id,
                    instance_type = %l.instance_type,
                    zone = %l.zone,
                    capacity_type = %l.capacity_type,
                    price_per_hour = l.price,
                    pods = next.pods.len(),
                    "launched"
                );
                let now = self.ports.clock.now();
                self.ports
                    .record_decision(Decision {
                        at: now,
                        job: "provision".into(),
                        action: format!(
                            "launch {} as {} in {} ({}, {})",
                            next.name, l.instance_type, l.zone, l.capacity_type, l.instance_id
                        ),
                        reason: pods_reason(&next.pods),
                        price_per_hour: Some(l.price),
                    })
                    .await;
                log.launched.push(LaunchedClaim {
                    name: next.name.clone(),
                    node_pool: next.node_pool.clone(),
                    instance_id: l.instance_id,
                    instance_type: l.instance_type,
                    zone: l.zone,
                    capacity_type: l.capacity_type,
                    price_per_hour: l.price,
                    pods: next.pods.len(),
                });
                gathered.put_claim(*next);
            }
            LaunchOutcome::Failed(why) => self.fail(&claim, &why, gathered, log).await?,
            LaunchOutcome::Deferred(why) => {
                warn!(claim = %claim.name, reason = %why, "launch deferred to the next tick");
                gathered.put_claim(claim.clone());
                log.deferred.push(claim.name.clone());
            }
        }
        Ok(())
    }

    /// CreateFleet with fallback and backoff. Store errors other than a lost
    /// conditional write abort the tick (the claim stays `Launching`; the next tick
    /// adopts or relaunches it).
    async fn launch(
        &self,
        claim: &NodeClaim,
        mut request: LaunchRequest,
        gathered: &mut Gathered,
    ) -> Result<LaunchOutcome> {
        let mut retries = 0u32;
        let mut last_ice = String::new();
        loop {
            if request.offerings.is_empty() {
                let why = if last_ice.is_empty() {
                    format!(
                        "no offering available for {} in zones {:?} ({})",
                        claim.instance_type_options.join(", "),
                        claim.zones,
                        "all known to be out of capacity or not offered"
                    )
                } else {
                    last_ice
                };
                return Ok(LaunchOutcome::Failed(why));
            }
            match self.ports.cloud.launch(&request).await {
                Ok(l) => {
                    self.remember_unavailable(claim, &l.unavailable, gathered)
                        .await?;
                    let reservation = take_reservation(gathered, l.reservation_id.as_deref());
                    let now = self.ports.clock.now();
                    return match self
                        .mark_launched(claim, &l, reservation.as_ref(), now)
                        .await
                    {
                        Ok(next) => Ok(LaunchOutcome::Launched(Box::new(next), l)),
                        Err(EngineError::Store(e)) if e.kind == ErrorKind::Conflict => Ok(
                            LaunchOutcome::Deferred(format!("claim changed while launching: {e}")),
                        ),
                        Err(e) => Err(e),
                    };
                }
                Err(LaunchError::InsufficientCapacity { offerings, message }) => {
                    let refused = self
                        .remember_unavailable(claim, &offerings, gathered)
                        .await?;
                    request.offerings.retain(|o| {
                        !refused.contains(&(
                            o.instance_type.clone(),
                            o.zone.clone(),
                            o.capacity_type,
                        ))
                    });
                    if offerings.is_empty() {
                        // Nothing named: do not loop forever on the same request.
                        return Ok(LaunchOutcome::Failed(message));
                    }
                    last_ice = message;
                }
                Err(LaunchError::Cloud(e))
                    if matches!(e.kind, ErrorKind::Throttled | ErrorKind::Unavailable) =>
                {
                    retries += 1;
                    if retries >= self.config.launch_attempts {
                        return Ok(LaunchOutcome::Deferred(e.to_string()));
                    }
                    let delay = self
                        .config
                        .backoff
                        .saturating_mul(1 << (retries - 1).min(16));
                    warn!(claim = %claim.name, error = %e, delay_ms = delay.as_millis() as u64, "launch throttled; backing off");
                    self.ports.clock.sleep(delay).await;
                }
                Err(LaunchError::Cloud(e)) => return Ok(LaunchOutcome::Failed(e.to_string())),
            }
        }
    }

    /// Records offerings found out of capacity for `ice_ttl`, in the store and in this
    /// tick's pricing. Returns them as keys.
    async fn remember_unavailable(
        &self,
        claim: &NodeClaim,
        offerings: &[Offering],
        gathered: &mut Gathered,
    ) -> Result<HashSet<(String, String, CapacityType)>> {
        let until = self.ports.clock.now()
            + i64::try_from(self.config.ice_ttl.as_secs()).unwrap_or(i64::MAX);
        let mut refused = HashSet::new();
        for o in offerings {
            self.ports.backoff.mark_unavailable(o, until).await?;
            warn!(
                claim = %claim.name,
                instance_type = %o.instance_type,
                zone = %o.zone,
                capacity_type = %o.capacity_type,
                "insufficient capacity; offering marked unavailable"
            );
            refused.insert((o.instance_type.clone(), o.zone.clone(), o.capacity_type));
        }
        gathered.pricing.unavailable.extend(refused.iter().cloned());
        Ok(refused)
    }

    async fn mark_launched(
        &self,
        claim: &NodeClaim,
        l: &Launched,
        reservation: Option<&Reservation>,
        launched_at: i64,
    ) -> Result<NodeClaim> {
        let now = self.ports.clock.now();
        let next = claim.transition(ClaimState::Launched, now, |c| {
            // The node carries its reservation's id and type (Karpenter's labels),
            // applied with the claim's other labels when it registers.
            if let Some(r) = reservation {
                c.labels.extend(r.node_labels());
            }
            c.instance_id = Some(l.instance_id.clone());
            c.instance_type = Some(l.instance_type.clone());
            c.zone = Some(l.zone.clone());
            c.capacity_type = Some(l.capacity_type);
            c.price_per_hour = Some(l.price);
            c.launched_at = Some(launched_at);
        })?;
        self.ports.save_claim(claim, next).await
    }

    async fn fail(
        &self,
        claim: &NodeClaim,
        why: &str,
        gathered: &mut Gathered,
        log: &mut LaunchLog,
    ) -> Result<()> {
        let now = self.ports.clock.now();
        let next = claim.transition(ClaimState::LaunchFailed, now, |c| {
            c.failure = Some(why.to_string())
        })?;
        match self.ports.save_claim(claim, next).await {
            Ok(next) => gathered.put_claim(next),
            Err(EngineError::Store(e)) if e.kind == ErrorKind::Conflict => {
                warn!(claim = %claim.name, error = %e, "claim changed while recording its failure");
                return Ok(());
            }
            Err(e) => return Err(e),
        }
        warn!(claim = %claim.name, reason = %why, "launch failed");
        self.ports
            .record_decision(Decision {
                at: now,
                job: "provision".into(),
                action: format!("launch of {} failed", claim.name),
                reason: format!("{why}; {}", pods_reason(&claim.pods)),
                price_per_hour: None,
            })
            .await;
        self.ports
            .emit(pod_event(
                claim,
                EventType::Warning,
                "LaunchFailed",
                format!("NodeClaim {}: {why}", claim.name),
            ))
            .await;
        log.failed.push((claim.name.clone(), why.to_string()));
        Ok(())
    }
}

/// What a planned claim becomes in the store (the plan's options, zones and capacity
/// types; a single zone or capacity type when the plan narrowed it to one).
pub(crate) fn claim_spec(planned: &PlannedNodeClaim, pool: &NodePool, name: String) -> ClaimSpec {
    let mut capacity_types: Vec<CapacityType> = planned
        .capacity_types
        .iter()
        .filter_map(|c| CapacityType::parse(c))
        .collect();
    if capacity_types.is_empty() {
        capacity_types = CapacityType::parse(&planned.capacity_type)
            .into_iter()
            .collect();
    }
    let mut zones = planned.zones.clone();
    if zones.is_empty() {
        zones.push(planned.zone.clone());
    }
    ClaimSpec {
        name,
        node_pool: pool.name.clone(),
        node_class: pool.node_class_ref.name.clone(),
        instance_type_options: planned.instance_type_options.clone(),
        zones,
        capacity_types,
        pods: planned.pods.clone(),
        labels: planned.labels.clone(),
    }
}

/// Events about a claim go to the first pod it was made for (Karpenter's
/// "Nominated"): claims are not Kubernetes objects here.
fn pod_event(
    claim: &NodeClaim,
    event_type: EventType,
    reason: &str,
    message: String,
) -> ClusterEvent {
    let (namespace, name) = claim
        .pods
        .first()
        .and_then(|k| k.split_once('/'))
        .map(|(ns, n)| (Some(ns.to_string()), n.to_string()))
        .unwrap_or((None, claim.name.clone()));
    ClusterEvent {
        kind: if namespace.is_some() {
            "Pod".into()
        } else {
            "Node".into()
        },
        namespace,
        name,
        event_type,
        reason: reason.into(),
        message,
    }
}

pub(crate) fn pods_reason(pods: &[String]) -> String {
    const SHOWN: usize = 5;
    if pods.is_empty() {
        return "no pending pods: a static NodePool's replicas".into();
    }
    let mut s = format!(
        "{} pending pod(s): {}",
        pods.len(),
        pods.iter()
            .take(SHOWN)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ")
    );
    if pods.len() > SHOWN {
        s.push_str(&format!(", +{} more", pods.len() - SHOWN));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claims_reason_names_the_first_pods_and_counts_the_rest() {
        let pods: Vec<String> = (0..7).map(|i| format!("default/web-{i}")).collect();
        let r = pods_reason(&pods);
        assert!(r.starts_with("7 pending pod(s): default/web-0, "), "{r}");
        assert!(r.ends_with("+2 more"), "{r}");
    }
}
