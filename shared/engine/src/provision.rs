//! One provisioning tick (DESIGN.md, "Data flow of one provisioning tick"):
//!
//! 1. take the `provisioner` lease (someone else holds it → skip, launch nothing);
//! 2. gather: cluster state, claims, ICE cache, catalog, spot prices, owned instances,
//!    resolved node classes — read concurrently;
//! 3. recover claims left `Launching` by a crash: adopt the instance tagged with the
//!    claim's name, or launch again with the same ClientToken (never twice);
//! 4. lifecycle (`crate::lifecycle`);
//! 5. plan with `core::plan_provisioning`, pods counted against in-flight claims;
//! 6. act: write each claim `Launching` *before* CreateFleet, fall back across
//!    offerings on insufficient capacity (recording them in the ICE cache), back off on
//!    throttling, write `Launched` or `LaunchFailed`; renew the lease between launches;
//!    record a decision per launch and per failure.
//!
//! `run_for` keeps a Lambda invocation alive for most of its minute, re-reading pods
//! every few seconds and ticking again when new pending pods appear.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tracing::{info, warn};

use nodewright_core::api::model::{Ec2NodeClass, NodePool};
use nodewright_core::catalog::{CapacityType, Catalog, LABEL_NODEPOOL, Pricing};
use nodewright_core::cluster::NotProvisionable;
use nodewright_core::nodeclaim::{ClaimSpec, ClaimState, NodeClaim};
use nodewright_core::planning_view::{ClusterView, in_flight_claims, in_motion, planning_snapshot};
use nodewright_core::provisioning::{
    NotProvisionedPod, PlannedNodeClaim, ProvisioningInput, UnschedulablePod, plan_provisioning,
};

use nodewright_core::disruption::hash;

use crate::adopt::adopt_karpenter_nodes;
use crate::context::Ports;
use crate::disrupt::{self, CommandsReport, Decider, default_decider};
use crate::error::{EngineError, Result};
use crate::lease::{Acquired, LeaseKeeper};
use crate::lifecycle::{self, LABEL_NODECLAIM, LifecycleConfig, LifecycleReport};
use crate::ports::{
    ClusterEvent, ClusterState, Decision, ErrorKind, EventType, Instance, LaunchError,
    LaunchRequest, Launched, ObjectKind, Offering, ResolvedNodeClass,
};
use crate::reasons::{ClaimPods, Problem, Reasons, ReasonsInput, StatusFields};
use crate::terminate::save;

/// The lease every provisioner invocation competes for.
pub const LEASE_NAME: &str = "provisioner";

/// While pods stay pending, the poll plans them again at most this often.
const RECOUNT_AFTER_SECS: i64 = 15;

/// CreateFleet accepts at most this many overrides per request.
pub const MAX_OFFERINGS: usize = 60;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProvisionerConfig {
    pub cluster_name: String,
    /// Plan and record decisions; write no claim, launch nothing, patch nothing.
    pub dry_run: bool,
    /// A launched claim whose node has not registered after this long is terminated.
    pub registration_ttl: Duration,
    /// Leaked instances are terminated once older than this.
    pub orphan_grace: Duration,
    /// How long an offering that reported insufficient capacity is avoided.
    pub ice_ttl: Duration,
    /// Short, and renewed at every checkpoint of a tick (see [`crate::lease`]): a dead
    /// holder frees it within this long.
    pub lease_ttl: Duration,
    /// Who holds the lease (the Lambda's request id, a hostname...).
    pub holder: String,
    /// CreateFleet attempts on throttling/unavailability before the claim is left
    /// `Launching` for the next tick.
    pub launch_attempts: u32,
    /// First backoff delay; doubled on each retry.
    pub backoff: Duration,
    /// Record the nodes Karpenter launched for this cluster as claims
    /// (`NODEWRIGHT_ADOPT_KARPENTER_NODES`; see [`crate::adopt`]).
    pub adopt_karpenter_nodes: bool,
    /// Spot-to-spot consolidation (`NODEWRIGHT_SPOT_TO_SPOT`): the provisioner's polls
    /// validate disruption commands, and must re-decide them as they were decided.
    pub spot_to_spot: bool,
}

impl ProvisionerConfig {
    pub fn new(cluster_name: impl Into<String>, holder: impl Into<String>) -> Self {
        Self {
            cluster_name: cluster_name.into(),
            dry_run: false,
            registration_ttl: Duration::from_secs(15 * 60),
            orphan_grace: Duration::from_secs(5 * 60),
            ice_ttl: Duration::from_secs(3 * 60),
            lease_ttl: Duration::from_secs(15),
            holder: holder.into(),
            launch_attempts: 4,
            backoff: Duration::from_millis(500),
            adopt_karpenter_nodes: false,
            spot_to_spot: false,
        }
    }

    pub fn lifecycle(&self) -> LifecycleConfig {
        LifecycleConfig {
            registration_ttl: self.registration_ttl,
            orphan_grace: self.orphan_grace,
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

/// What one tick did. Unschedulable pods are data, not errors.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TickReport {
    /// Set when the tick did nothing on purpose ("lease held by ...").
    pub skipped: Option<String>,
    pub dry_run: bool,
    /// Pending pods the plan launched capacity for or counted elsewhere ("namespace/name"):
    /// pods that are not ours to provision for are in `not_provisioned` instead.
    pub pending: Vec<String>,
    /// Pending pods no capacity is launched for, and why (another scheduler's, nominated
    /// by preemption, not yet marked Unschedulable, waiting on a volume claim).
    pub not_provisioned: Vec<NotProvisionedPod>,
    /// The plan's new claims (in a dry run: what would have been launched).
    pub planned: Vec<PlannedNodeClaim>,
    pub launched: Vec<LaunchedClaim>,
    /// Claims left `Launching` by a crash whose instance was found and recorded.
    pub adopted: Vec<String>,
    /// Nodes Karpenter launched, recorded as claims this tick.
    pub adopted_karpenter_nodes: Vec<String>,
    /// (claim, why) for claims that became `LaunchFailed`.
    pub failed: Vec<(String, String)>,
    /// Claims left `Launching` after retryable errors; the next tick retries them.
    pub deferred: Vec<String>,
    pub unschedulable: Vec<UnschedulablePod>,
    /// Pending pods counted against claims already launching: (claim, pods).
    pub nominated: Vec<(String, Vec<String>)>,
    /// Pending pods (pods of nodes being taken away among them) that fit free room on
    /// Ready nodes: kube-scheduler will place them.
    pub absorbed: HashSet<String>,
    pub lifecycle: LifecycleReport,
    /// Disruption commands advanced on this poll (see [`crate::disrupt`]).
    pub commands: CommandsReport,
    /// NodePools or node classes that could not be used, with the reason.
    pub invalid: Vec<String>,
}

/// What one invocation's ticks did, and whether it could do its work.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RunReport {
    /// Ticks that ran (under the lease).
    pub ticks: Vec<TickReport>,
    /// Ticks not run because another invocation held the lease: who held it.
    pub lease_busy: Vec<String>,
    /// Ticks that failed, with the error (the invocation went on polling).
    pub failed_ticks: Vec<String>,
    /// Polls of pods and claims that failed.
    pub failed_polls: usize,
}

impl RunReport {
    /// Why the invocation did not do all its work, if it did not: no tick ran (the
    /// lease was held throughout), a tick failed, a poll failed. Empty: all done.
    pub fn shortfalls(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.ticks.is_empty() && !self.lease_busy.is_empty() {
            out.push(format!(
                "no tick ran: the provisioner lease was held by {}",
                self.lease_busy
                    .last()
                    .map(String::as_str)
                    .unwrap_or("another invocation")
            ));
        }
        if !self.failed_ticks.is_empty() {
            out.push(format!(
                "{} tick(s) failed, last: {}",
                self.failed_ticks.len(),
                self.failed_ticks
                    .last()
                    .map(String::as_str)
                    .unwrap_or_default()
            ));
        }
        if self.failed_polls > 0 {
            out.push(format!(
                "{} poll(s) of pods and claims failed",
                self.failed_polls
            ));
        }
        out
    }
}

/// Everything a tick reads before deciding: the provisioner's and the disruption
/// job's (one gathering, so both see the cluster the same way).
pub(crate) struct World {
    pub(crate) state: ClusterState,
    pub(crate) claims: Vec<NodeClaim>,
    pub(crate) catalog: Catalog,
    pub(crate) pricing: Pricing,
    pub(crate) owned: Vec<Instance>,
    /// Instances Karpenter launched for this cluster: listed when adopting, or while
    /// adopted claims live (to tell whether their instances still exist).
    pub(crate) karpenter_instances: Vec<Instance>,
    pub(crate) kubernetes_version: String,
    pub(crate) classes: HashMap<String, (Ec2NodeClass, ResolvedNodeClass)>,
    /// Pools whose node class resolved.
    pub(crate) pools: Vec<NodePool>,
    pub(crate) invalid: Vec<String>,
    /// Why NodePools or EC2NodeClasses cannot be used, for `Reasons::publish`.
    problems: Vec<Problem>,
    /// EC2NodeClasses that resolved, and the instance profile each uses.
    healthy_classes: Vec<(String, Option<String>)>,
}

/// What [`Provisioner::gather_with`] does when an EC2NodeClass fails to resolve for a
/// transient reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unresolved {
    /// The gather fails (the tick is retried).
    Fail,
    /// The class and its NodePools are left out, logged with the error.
    Skip,
}

enum LaunchOutcome {
    Launched(NodeClaim, Launched),
    Failed(String),
    Deferred(String),
}

pub struct Provisioner {
    ports: Ports,
    config: ProvisionerConfig,
    /// Re-decides disruption commands at validation (core's `decide` by default).
    decider: Decider,
    /// What could not be done, published once per finding per window (the memory
    /// lives as long as the warm Lambda).
    reasons: Reasons,
    /// Feeds claim names; with the lease token and time it makes them unique.
    seq: AtomicU64,
}

impl Provisioner {
    pub fn new(ports: Ports, config: ProvisionerConfig) -> Self {
        Self {
            ports,
            config,
            decider: default_decider(),
            reasons: Reasons::new(),
            seq: AtomicU64::new(0),
        }
    }

    /// The same provisioner validating disruption commands with `decider` (tests and
    /// the simulator inject decisions; production uses core's).
    pub fn with_decider(mut self, decider: Decider) -> Self {
        self.decider = decider;
        self
    }

    pub(crate) fn decider(&self) -> &Decider {
        &self.decider
    }

    pub fn config(&self) -> &ProvisionerConfig {
        &self.config
    }

    pub fn ports(&self) -> &Ports {
        &self.ports
    }

    /// One provisioning tick: lease, gather, reconcile every claim, plan, launch.
    pub async fn tick(&self) -> Result<TickReport> {
        if self.config.dry_run {
            return self.dry_run().await;
        }
        let keeper = match LeaseKeeper::acquire(
            &self.ports,
            LEASE_NAME,
            &self.config.holder,
            self.config.lease_ttl,
        )
        .await?
        {
            Acquired::Held(keeper) => keeper,
            Acquired::Busy { holder, expires_at } => {
                let holder = holder.unwrap_or_else(|| "another invocation".into());
                info!(lease_holder = %holder, lease_expires_at = ?expires_at, this_invocation = %self.config.holder,
                    "provisioner lease held by another invocation; skipping this tick");
                return Ok(TickReport {
                    skipped: Some(format!("lease held by {holder}")),
                    ..TickReport::default()
                });
            }
        };
        let result = self.tick_with_lease(&keeper).await;
        keeper.release(&self.ports).await;
        result
    }

    /// Ticks, then every `poll_interval` reads pods and claims and ticks again while
    /// there is work: a pending pod no tick has counted yet, or a claim on its way
    /// somewhere (launching, registering, initializing, being taken away) — so a node
    /// is initialized and a drain advances within one poll, not at the next schedule.
    /// A tick that was skipped (lease held) or failed is tried again on the next poll.
    /// Runs until `budget` is spent; never fails as a whole: what went wrong is in the
    /// report ([`RunReport::shortfalls`]).
    pub async fn run_for(&self, budget: Duration, poll_interval: Duration) -> RunReport {
        let clock = &self.ports.clock;
        let start = clock.now();
        let budget_secs = i64::try_from(budget.as_secs()).unwrap_or(i64::MAX);
        let poll_secs = i64::try_from(poll_interval.as_secs().max(1)).unwrap_or(i64::MAX);
        let mut run = RunReport::default();
        let mut counted: HashSet<String> = HashSet::new();
        let mut retry = true;
        let mut last_tick = start;
        loop {
            let poll_started = clock.now();
            let recount_due = clock.now() - last_tick >= RECOUNT_AFTER_SECS;
            if retry || self.work_waiting(&counted, recount_due, &mut run).await {
                last_tick = clock.now();
                retry = match self.tick().await {
                    Ok(report) => match &report.skipped {
                        Some(why) => {
                            run.lease_busy
                                .push(why.trim_start_matches("lease held by ").to_string());
                            true
                        }
                        None => {
                            counted.extend(report.pending.iter().cloned());
                            // The fast poll reads pods without their claims, so a pod
                            // waiting on a volume looks provisionable there: counted, it
                            // waits for the recount instead of a tick every poll.
                            counted.extend(
                                report
                                    .not_provisioned
                                    .iter()
                                    .filter(|n| matches!(n.why, NotProvisionable::Volume(_)))
                                    .map(|n| n.pod.clone()),
                            );
                            run.ticks.push(report);
                            false
                        }
                    },
                    Err(e) => {
                        warn!(error = %e, kind = ?e.kind(), "provisioning tick failed; trying again at the next poll");
                        run.failed_ticks.push(e.to_string());
                        true
                    }
                };
            }
            if clock.now() - start + poll_secs > budget_secs {
                break;
            }
            // Polls start every interval, not an interval after the work: a tick that
            // took 3 s of a 5-s interval is followed by the next poll 2 s later.
            let spent = u64::try_from(clock.now() - poll_started).unwrap_or(0);
            let rest = poll_interval.saturating_sub(Duration::from_secs(spent));
            if !rest.is_zero() {
                clock.sleep(rest).await;
            }
        }
        run
    }

    /// The fast poll: is there anything for a tick to do? A pending pod no tick has
    /// counted (only pods capacity may be launched for: another scheduler's pod, or one
    /// kube-scheduler has not marked Unschedulable yet, is no work until it changes), a
    /// claim in motion, or — once `recount_due` — any such pod still pending: a pod
    /// counted against room on a node can lose that room to another pod the scheduler
    /// put there first, and must not wait for the next invocation to be planned again.
    async fn work_waiting(
        &self,
        counted: &HashSet<String>,
        recount_due: bool,
        run: &mut RunReport,
    ) -> bool {
        let (pods, claims) = tokio::join!(
            self.ports.cluster.unbound_pods(),
            self.ports.store.list_claims()
        );
        let (pods, claims) = match (pods, claims) {
            (Ok(p), Ok(c)) => (p, c),
            (Err(e), _) => {
                warn!(error = %e, "could not poll pods; trying again next interval");
                run.failed_polls += 1;
                return false;
            }
            (_, Err(e)) => {
                warn!(error = %e, "could not poll claims; trying again next interval");
                run.failed_polls += 1;
                return false;
            }
        };
        claims.iter().any(|c| in_motion(c.state))
            || pods
                .iter()
                .any(|p| p.wants_capacity() && (recount_due || !counted.contains(&p.key())))
    }

    async fn dry_run(&self) -> Result<TickReport> {
        let now = self.ports.clock.now();
        let world = self.gather(now).await?;
        let mut report = TickReport {
            dry_run: true,
            invalid: world.invalid.clone(),
            ..TickReport::default()
        };
        self.plan_into(&world, &mut report);
        for c in &report.planned {
            self.ports
                .decide(Decision {
                    at: now,
                    job: "provision".into(),
                    action: format!(
                        "would launch a {} NodeClaim as {} in {} ({}) [dry run]",
                        c.node_pool, c.instance_type, c.zone, c.capacity_type
                    ),
                    reason: pods_reason(&c.pods),
                    price_per_hour: Some(c.price_per_hour),
                })
                .await;
        }
        Ok(report)
    }

    async fn tick_with_lease(&self, lease: &LeaseKeeper) -> Result<TickReport> {
        let now = self.ports.clock.now();
        let mut world = self.gather(now).await?;
        let mut report = TickReport {
            invalid: world.invalid.clone(),
            ..TickReport::default()
        };
        lease.keep(&self.ports).await?;

        self.recover(&mut world, &mut report).await?;
        if self.config.adopt_karpenter_nodes {
            let adopted = adopt_karpenter_nodes(
                &self.ports,
                &world.state,
                &world.claims,
                &world.karpenter_instances,
                &world.catalog,
                &world.pricing,
                now,
            )
            .await?;
            report
                .adopted_karpenter_nodes
                .extend(adopted.iter().map(|c| c.name.clone()));
            world.claims.extend(adopted);
        }
        lease.keep(&self.ports).await?;
        let World {
            state,
            claims,
            catalog,
            owned,
            karpenter_instances,
            ..
        } = &mut world;
        report.lifecycle = lifecycle::reconcile(
            &self.ports,
            &self.config.lifecycle(),
            state,
            catalog,
            claims,
            owned,
            karpenter_instances,
            Some(lease),
        )
        .await?;
        if report.lifecycle.changed_cluster() {
            // Plan on the cluster as the reconciler left it: taints removed, nodes
            // initialized, pods evicted. A stale view launched a second node for pods
            // that had one.
            let fresh = self.ports.cluster.state().await?;
            world.state.nodes = fresh.nodes;
            world.state.pods = fresh.pods;
            world.state.pdbs = fresh.pdbs;
            world.state.daemonsets = fresh.daemonsets;
        }
        // Commands advance on every poll: a replacement initialized, a validation due.
        report.commands = disrupt::advance_commands(self, &mut world, Some(lease)).await?;
        if report.commands.changed_cluster() {
            let fresh = self.ports.cluster.state().await?;
            world.state.nodes = fresh.nodes;
            world.state.pods = fresh.pods;
        }

        self.plan_into(&world, &mut report);
        self.drain_now_where_pods_have_room(&mut world, &report)
            .await;
        let mut names: HashSet<String> = world.claims.iter().map(|c| c.name.clone()).collect();
        for planned in report.planned.clone() {
            lease.keep(&self.ports).await?;
            let Some(pool) = world
                .pools
                .iter()
                .find(|p| p.name == planned.node_pool)
                .cloned()
            else {
                continue;
            };
            let claim = self
                .create_claim(&planned, &pool, &world, lease.lease().token, &mut names)
                .await?;
            info!(claim = %claim.name, nodepool = %pool.name, pods = claim.pods.len(), "claim written; launching");
            self.launch_and_record(claim, &pool, &mut world, &mut report)
                .await?;
        }
        self.publish_reasons(&world, &report).await;
        Ok(report)
    }

    /// A replace-then-drain waits for its replacement; but when the plan finds room on
    /// Ready nodes for every pod of the node being replaced, no replacement comes, and
    /// waiting out the full delay only keeps a node that is going. Its drain starts now
    /// (the next poll drives it).
    async fn drain_now_where_pods_have_room(&self, world: &mut World, report: &TickReport) {
        let now = self.ports.clock.now();
        let waiting: Vec<NodeClaim> = world
            .claims
            .iter()
            .filter(|c| {
                c.state == ClaimState::Disrupting
                    && c.disruption
                        .as_ref()
                        .is_some_and(|d| d.drain_after.is_some_and(|t| t > now))
            })
            .cloned()
            .collect();
        for claim in waiting {
            let Some(node) = claim.node_name.as_deref() else {
                continue;
            };
            let pods: Vec<String> = world
                .state
                .pods
                .iter()
                .filter(|p| {
                    p.node_name.as_deref() == Some(node)
                        && !p.daemonset_owned
                        && !p.terminal
                        && !p.terminating
                })
                .map(|p| p.key())
                .collect();
            if !pods.iter().all(|p| report.absorbed.contains(p)) {
                continue;
            }
            let next = claim.amend(now, |c| {
                if let Some(d) = c.disruption.as_mut() {
                    d.drain_after = Some(now);
                }
            });
            let Ok(next) = next else { continue };
            match save(&self.ports, &claim, next).await {
                Ok(next) => {
                    info!(claim = %claim.name, pods = pods.len(), "the node's pods fit on Ready nodes: draining without a replacement");
                    replace(&mut world.claims, next);
                }
                Err(e) => {
                    warn!(claim = %claim.name, error = %e, "could not start the drain early; it starts at its set time")
                }
            }
        }
    }

    /// Makes what this tick could not do reach people (see [`crate::reasons`]), and
    /// tells the pods of each launch and nomination where they will run. Best effort.
    async fn publish_reasons(&self, world: &World, report: &TickReport) {
        let invalid_pools: HashSet<&str> = world
            .problems
            .iter()
            .filter(|p| p.kind == ObjectKind::NodePool)
            .map(|p| p.name.as_str())
            .collect();
        let healthy_node_pools: Vec<String> = world
            .pools
            .iter()
            .filter(|p| !invalid_pools.contains(p.name.as_str()))
            .map(|p| p.name.clone())
            .collect();
        let healthy_node_classes: Vec<String> = world
            .healthy_classes
            .iter()
            .map(|(n, _)| n.clone())
            .collect();
        let status_fields: Vec<StatusFields> = world
            .healthy_classes
            .iter()
            .filter_map(|(n, profile)| Some(StatusFields::instance_profile(n, profile.as_deref()?)))
            .collect();
        let mut claims: Vec<ClaimPods> = report
            .launched
            .iter()
            .filter_map(|l| {
                let claim = world.claims.iter().find(|c| c.name == l.name)?;
                Some(ClaimPods::launched(
                    &l.name,
                    &claim.pods,
                    &l.instance_type,
                    &l.zone,
                ))
            })
            .collect();
        claims.extend(report.nominated.iter().map(|(claim, pods)| {
            let node = world
                .claims
                .iter()
                .find(|c| &c.name == claim)
                .and_then(|c| c.node_name.as_deref());
            ClaimPods::nominated(claim, pods, node)
        }));
        let now = self.ports.clock.now();
        self.reasons
            .publish(
                &self.ports,
                now,
                &ReasonsInput {
                    unschedulable: &report.unschedulable,
                    problems: &world.problems,
                    healthy_node_classes: &healthy_node_classes,
                    healthy_node_pools: &healthy_node_pools,
                    status_fields: &status_fields,
                    claims: &claims,
                },
            )
            .await;
    }

    pub(crate) async fn gather(&self, now: i64) -> Result<World> {
        self.gather_with(now, Unresolved::Fail).await
    }

    /// [`Self::gather`], saying what a transient failure to resolve an EC2NodeClass
    /// (throttled, unavailable) does: fail the tick (the provisioner: planning without
    /// a NodePool would call its pods unschedulable), or leave the class's NodePools
    /// out of this tick (the disruption job: their nodes sit one run out).
    pub(crate) async fn gather_with(&self, now: i64, unresolved: Unresolved) -> Result<World> {
        let p = &self.ports;
        let (state, claims, unavailable, catalog, spot, owned, kubernetes_version) = tokio::try_join!(
            async { p.cluster.state().await.map_err(EngineError::from) },
            async { p.store.list_claims().await.map_err(EngineError::from) },
            async {
                p.store
                    .unavailable_offerings(now)
                    .await
                    .map_err(EngineError::from)
            },
            async { p.cloud.catalog().await.map_err(EngineError::from) },
            async { p.cloud.spot_prices().await.map_err(EngineError::from) },
            async { p.cloud.owned_instances().await.map_err(EngineError::from) },
            async {
                p.cluster
                    .kubernetes_version()
                    .await
                    .map_err(EngineError::from)
            },
        )?;
        let adopted_live = claims.iter().any(|c| c.adopted && !c.state.is_terminal());
        let karpenter_instances = if self.config.adopt_karpenter_nodes || adopted_live {
            p.cloud.cluster_instances_launched_by_karpenter().await?
        } else {
            Vec::new()
        };
        let mut invalid = state.invalid.clone();
        let mut problems: Vec<Problem> = state
            .invalid_objects
            .iter()
            .map(Problem::from_invalid)
            .collect();
        let mut classes = HashMap::new();
        let wanted: HashSet<&str> = state
            .node_pools
            .iter()
            .map(|p| p.node_class_ref.name.as_str())
            .collect();
        let mut unusable: HashMap<String, Problem> = HashMap::new();
        for class in state
            .node_classes
            .iter()
            .filter(|c| wanted.contains(c.name.as_str()))
        {
            let problem = match p.cloud.resolve_node_class(class, &kubernetes_version).await {
                Ok(r) if r.subnets.is_empty() => Some(Problem::no_subnets(
                    &class.name,
                    &terms_summary(&class.subnet_selector_terms),
                )),
                Ok(r) if r.security_group_ids.is_empty() => Some(Problem::no_security_groups(
                    &class.name,
                    &terms_summary(&class.security_group_selector_terms),
                )),
                Ok(r) if r.images.is_empty() => Some(Problem::no_images(
                    &class.name,
                    &format!("{} term(s)", class.ami_selector_terms.len()),
                )),
                Ok(r) => {
                    classes.insert(class.name.clone(), (class.clone(), r));
                    None
                }
                Err(e) if matches!(e.kind, ErrorKind::Invalid | ErrorKind::NotFound) => {
                    Some(Problem::unresolved(&class.name, e.to_string()))
                }
                Err(e) if unresolved == Unresolved::Skip => {
                    warn!(node_class = %class.name, error = %e, kind = ?e.kind,
                        "could not resolve the EC2NodeClass; its NodePools sit this run out (no drift, no disruption)");
                    None
                }
                Err(e) => return Err(e.into()),
            };
            if let Some(problem) = problem {
                invalid.push(format!(
                    "EC2NodeClass {:?}: {}",
                    class.name, problem.message
                ));
                unusable.insert(class.name.clone(), problem.clone());
                problems.push(problem);
            }
        }
        let mut pools = Vec::new();
        for pool in &state.node_pools {
            let class = &pool.node_class_ref.name;
            if classes.contains_key(class) {
                pools.push(pool.clone());
            } else if let Some(why) = unusable.get(class) {
                problems.push(Problem::node_class_not_ready(
                    &pool.name,
                    class,
                    &why.reason,
                    &why.message,
                ));
            } else if !state.node_classes.iter().any(|c| &c.name == class) {
                invalid.push(format!(
                    "NodePool {:?}: EC2NodeClass {:?} does not exist",
                    pool.name, class
                ));
                if !problems
                    .iter()
                    .any(|p| p.kind == ObjectKind::NodePool && p.name == pool.name)
                {
                    problems.push(Problem::node_class_missing(&pool.name, class));
                }
            }
        }
        let healthy_classes = classes
            .iter()
            .map(|(name, (_, r))| (name.clone(), r.instance_profile.clone()))
            .collect();
        let mut zones: Vec<String> = classes
            .values()
            .flat_map(|(_, r)| r.subnets.iter().map(|s| s.zone.clone()))
            .collect();
        zones.sort();
        zones.dedup();
        let mut pricing = Pricing::for_zones(zones);
        pricing.spot_prices = spot.into_iter().collect();
        pricing.unavailable = unavailable.into_iter().collect();
        Ok(World {
            state,
            claims,
            catalog,
            pricing,
            owned,
            karpenter_instances,
            kubernetes_version,
            classes,
            pools,
            invalid,
            problems,
            healthy_classes,
        })
    }

    /// Claims found `Launching` at tick start: a previous tick wrote them and then
    /// crashed, or left them after retryable errors.
    async fn recover(&self, world: &mut World, report: &mut TickReport) -> Result<()> {
        let launching: Vec<NodeClaim> = world
            .claims
            .iter()
            .filter(|c| c.state == ClaimState::Launching)
            .cloned()
            .collect();
        for claim in launching {
            let found = world
                .owned
                .iter()
                .find(|i| {
                    i.claim_name.as_deref() == Some(claim.name.as_str()) && i.state != "terminated"
                })
                .cloned();
            if let Some(inst) = found {
                let price = world
                    .catalog
                    .get(&inst.instance_type)
                    .and_then(|it| world.pricing.price(it, &inst.zone, inst.capacity_type))
                    .or_else(|| {
                        world
                            .catalog
                            .get(&inst.instance_type)
                            .and_then(|it| it.on_demand_price)
                    })
                    .unwrap_or(0.0);
                let launched = Launched {
                    instance_id: inst.id.clone(),
                    instance_type: inst.instance_type.clone(),
                    zone: inst.zone.clone(),
                    capacity_type: inst.capacity_type,
                    price,
                    unavailable: vec![],
                };
                match self
                    .mark_launched(&claim, &launched, inst.launch_time)
                    .await
                {
                    Ok(next) => {
                        info!(claim = %claim.name, instance = %inst.id, "adopted the instance of a claim left Launching");
                        replace(&mut world.claims, next);
                        report.adopted.push(claim.name.clone());
                    }
                    Err(EngineError::Store(e)) if e.kind == ErrorKind::Conflict => {
                        warn!(claim = %claim.name, error = %e, "claim changed while adopting; next tick");
                    }
                    Err(e) => return Err(e),
                }
                continue;
            }
            let Some(pool) = world
                .pools
                .iter()
                .find(|p| p.name == claim.node_pool)
                .cloned()
            else {
                let why = format!(
                    "NodePool {:?} no longer exists or its EC2NodeClass cannot be used",
                    claim.node_pool
                );
                self.fail(&claim, &why, world, report).await?;
                continue;
            };
            info!(claim = %claim.name, "claim left Launching with no instance; launching again with the same client token");
            self.launch_and_record(claim, &pool, world, report).await?;
        }
        Ok(())
    }

    fn plan_into(&self, world: &World, report: &mut TickReport) {
        let view = ClusterView {
            nodes: &world.state.nodes,
            pods: &world.state.pods,
            daemonsets: &world.state.daemonsets,
            pdbs: &world.state.pdbs,
        };
        // A disruption command's candidates stay capacity (cordoned, pods still there)
        // until the command is validated; only then are their pods planned elsewhere.
        let claims = disrupt::planning_claims(&world.claims);
        let snapshot = planning_snapshot(view, &claims, &world.pools);
        report.pending = snapshot.provisionable_pods().map(|p| p.key()).collect();
        let in_flight = in_flight_claims(&claims, &snapshot);
        let plan = plan_provisioning(&ProvisioningInput {
            snapshot: &snapshot,
            node_pools: &world.pools,
            node_classes: &world.state.node_classes,
            catalog: &world.catalog,
            pricing: &world.pricing,
            in_flight: &in_flight,
        });
        info!(
            pending = report.pending.len(),
            new_claims = plan.node_claims.len(),
            in_flight = in_flight.len(),
            unschedulable = plan.unschedulable.len(),
            not_provisioned = plan.not_provisioned.len(),
            price_per_hour = plan.total_price_per_hour,
            "planned"
        );
        report.not_provisioned = plan.not_provisioned;
        report.planned = plan.node_claims;
        report.unschedulable = plan.unschedulable;
        report.absorbed = plan
            .existing_nodes
            .iter()
            .flat_map(|a| a.pods.iter().cloned())
            .collect();
        report.nominated = plan
            .in_flight
            .into_iter()
            .map(|a| (a.target, a.pods))
            .collect();
    }

    /// Writes a new `Launching` claim under a fresh name (retrying on a name clash).
    async fn create_claim(
        &self,
        planned: &PlannedNodeClaim,
        pool: &NodePool,
        world: &World,
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
            let claim = self.new_claim(claim_spec(planned, pool, name), pool, world, now);
            match self.ports.store.create_claim(&claim).await {
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
    /// EC2NodeClass as they are now (written on its node at registration).
    pub(crate) fn new_claim(
        &self,
        spec: ClaimSpec,
        pool: &NodePool,
        world: &World,
        now: i64,
    ) -> NodeClaim {
        let mut claim = NodeClaim::launching(spec, now);
        claim.nodepool_hash = Some(hash::nodepool_hash(pool));
        claim.nodeclass_hash = world
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
        world: &World,
    ) -> Option<LaunchRequest> {
        let (node_class, resolved) = world.classes.get(&claim.node_class)?;
        let subnet_zones: HashSet<&str> =
            resolved.subnets.iter().map(|s| s.zone.as_str()).collect();
        let mut offerings = Vec::new();
        for t in &claim.instance_type_options {
            let Some(it) = world.catalog.get(t) else {
                continue;
            };
            for zone in claim
                .zones
                .iter()
                .filter(|z| subnet_zones.contains(z.as_str()))
            {
                for &ct in &claim.capacity_types {
                    if let Some(price) = world.pricing.price(it, zone, ct) {
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
            resolved: resolved.clone(),
            offerings,
            labels,
            taints,
            kubernetes_version: world.kubernetes_version.clone(),
        })
    }

    /// Launches one claim and records the outcome in the store, the report, the
    /// decision log and the cluster's events.
    pub(crate) async fn launch_and_record(
        &self,
        claim: NodeClaim,
        pool: &NodePool,
        world: &mut World,
        report: &mut TickReport,
    ) -> Result<()> {
        let Some(request) = self.launch_request(&claim, pool, world) else {
            let why = format!("EC2NodeClass {:?} cannot be used", claim.node_class);
            return self.fail(&claim, &why, world, report).await;
        };
        match self.launch(&claim, request, world).await? {
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
                    .decide(Decision {
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
                report.launched.push(LaunchedClaim {
                    name: next.name.clone(),
                    node_pool: next.node_pool.clone(),
                    instance_id: l.instance_id,
                    instance_type: l.instance_type,
                    zone: l.zone,
                    capacity_type: l.capacity_type,
                    price_per_hour: l.price,
                    pods: next.pods.len(),
                });
                replace(&mut world.claims, next);
            }
            LaunchOutcome::Failed(why) => self.fail(&claim, &why, world, report).await?,
            LaunchOutcome::Deferred(why) => {
                warn!(claim = %claim.name, reason = %why, "launch deferred to the next tick");
                replace(&mut world.claims, claim.clone());
                report.deferred.push(claim.name.clone());
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
        world: &mut World,
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
                    self.remember_unavailable(claim, &l.unavailable, world)
                        .await?;
                    let now = self.ports.clock.now();
                    return match self.mark_launched(claim, &l, now).await {
                        Ok(next) => Ok(LaunchOutcome::Launched(next, l)),
                        Err(EngineError::Store(e)) if e.kind == ErrorKind::Conflict => Ok(
                            LaunchOutcome::Deferred(format!("claim changed while launching: {e}")),
                        ),
                        Err(e) => Err(e),
                    };
                }
                Err(LaunchError::InsufficientCapacity { offerings, message }) => {
                    let refused = self.remember_unavailable(claim, &offerings, world).await?;
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
        world: &mut World,
    ) -> Result<HashSet<(String, String, CapacityType)>> {
        let until = self.ports.clock.now()
            + i64::try_from(self.config.ice_ttl.as_secs()).unwrap_or(i64::MAX);
        let mut refused = HashSet::new();
        for o in offerings {
            self.ports.store.mark_unavailable(o, until).await?;
            warn!(
                claim = %claim.name,
                instance_type = %o.instance_type,
                zone = %o.zone,
                capacity_type = %o.capacity_type,
                "insufficient capacity; offering marked unavailable"
            );
            refused.insert((o.instance_type.clone(), o.zone.clone(), o.capacity_type));
        }
        world.pricing.unavailable.extend(refused.iter().cloned());
        Ok(refused)
    }

    async fn mark_launched(
        &self,
        claim: &NodeClaim,
        l: &Launched,
        launched_at: i64,
    ) -> Result<NodeClaim> {
        let now = self.ports.clock.now();
        let next = claim.transition(ClaimState::Launched, now, |c| {
            c.instance_id = Some(l.instance_id.clone());
            c.instance_type = Some(l.instance_type.clone());
            c.zone = Some(l.zone.clone());
            c.capacity_type = Some(l.capacity_type);
            c.price_per_hour = Some(l.price);
            c.launched_at = Some(launched_at);
        })?;
        save(&self.ports, claim, next).await
    }

    async fn fail(
        &self,
        claim: &NodeClaim,
        why: &str,
        world: &mut World,
        report: &mut TickReport,
    ) -> Result<()> {
        let now = self.ports.clock.now();
        let next = claim.transition(ClaimState::LaunchFailed, now, |c| {
            c.failure = Some(why.to_string())
        })?;
        match save(&self.ports, claim, next).await {
            Ok(next) => replace(&mut world.claims, next),
            Err(EngineError::Store(e)) if e.kind == ErrorKind::Conflict => {
                warn!(claim = %claim.name, error = %e, "claim changed while recording its failure");
                return Ok(());
            }
            Err(e) => return Err(e),
        }
        warn!(claim = %claim.name, reason = %why, "launch failed");
        self.ports
            .decide(Decision {
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
        report.failed.push((claim.name.clone(), why.to_string()));
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

pub(crate) fn replace(claims: &mut Vec<NodeClaim>, next: NodeClaim) {
    match claims.iter_mut().find(|c| c.name == next.name) {
        Some(c) => *c = next,
        None => claims.push(next),
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

fn pods_reason(pods: &[String]) -> String {
    const SHOWN: usize = 5;
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

/// A selector's terms for people: `tags karpenter.sh/discovery=prod; id subnet-0abc`.
fn terms_summary(terms: &[nodewright_core::api::model::SelectorTerm]) -> String {
    use nodewright_core::api::model::SelectorTerm;
    if terms.is_empty() {
        return "no terms".into();
    }
    terms
        .iter()
        .map(|t| match t {
            SelectorTerm::Id(id) => format!("id {id}"),
            SelectorTerm::Name(name) => format!("name {name}"),
            SelectorTerm::Tags(tags) => format!(
                "tags {}",
                tags.iter()
                    .map(|(k, v)| if v == "*" || v.is_empty() {
                        k.clone()
                    } else {
                        format!("{k}={v}")
                    })
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        })
        .collect::<Vec<_>>()
        .join("; ")
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
