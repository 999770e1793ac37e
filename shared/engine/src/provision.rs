//! The provisioner job: one provisioning tick (docs/architecture.md, "Data flow of one
//! provisioning tick"):
//!
//! 1. take the `provisioner` lease (someone else holds it → skip, launch nothing);
//! 2. gather: cluster state, claims, ICE cache, catalog, spot prices, owned instances,
//!    resolved node classes — read concurrently;
//! 3. recover claims left `Launching` by a crash ([`crate::launch`]): adopt the
//!    instance tagged with the claim's name, or launch again with the same ClientToken;
//! 4. lifecycle (`crate::lifecycle`);
//! 5. plan with `core::plan_provisioning`, pods counted against in-flight claims;
//! 6. advance the disruption commands in flight ([`crate::command`]);
//! 7. act: launch each planned claim through the launch path ([`crate::launch`]),
//!    renewing the lease between launches; publish what could not be done
//!    ([`crate::reasons`]).
//!
//! `run_for` keeps a Lambda invocation alive for most of its minute, re-reading pods
//! every few seconds and ticking again when new pending pods appear.

use std::collections::HashSet;
use std::time::Duration;

use tracing::{info, warn};

use nodewright_core::api::model::NodePool;
use nodewright_core::capacity_buffer::buffer_statuses;
use nodewright_core::cluster::NotProvisionable;
use nodewright_core::nodeclaim::{ClaimState, NodeClaim};
use nodewright_core::planning_view::{
    ClusterView, in_flight_claims, in_motion, planning_claims, planning_snapshot,
};
use nodewright_core::provisioning::{
    NotProvisionedPod, PlannedNodeClaim, ProvisioningInput, UnschedulablePod, plan_provisioning,
};
use nodewright_core::scheduling::requirements::{MinValuesPolicy, Requirements};
use nodewright_core::volumes::VolumeProblem;

use crate::adopt::adopt_karpenter_nodes;
use crate::command::{CommandMachine, CommandsReport, advance_commands};
use crate::context::Ports;
use crate::decide::{Decider, default_decider};
use crate::error::Result;
use crate::gather::{Gathered, Unresolved, gather};
use crate::launch::{LaunchConfig, LaunchLog, Launcher, pods_reason};
use crate::lease::{Acquired, LeaseKeeper};
use crate::lifecycle::{self, LifecycleConfig, LifecycleReport};
use crate::ports::{ClusterEvent, Decision, EventType, ObjectKind, UnreadableKind};
use crate::reasons::{ClaimPods, Reasons, ReasonsInput, StatusFields};
use crate::repair::{RepairReport, RepairView, Repairer};
use crate::static_capacity::{StaticCapacity, StaticReport};
use crate::zonal_shift::ZonalShiftNotices;
use nodewright_core::repair::RepairSettings;

pub use crate::launch::LaunchedClaim;

/// The lease every provisioner invocation competes for.
pub const LEASE_NAME: &str = "provisioner";

/// While pods stay pending, the poll plans them again at most this often.
const RECOUNT_AFTER_SECS: i64 = 15;

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
    /// Node repair (`NODEWRIGHT_NODE_REPAIR`, see [`crate::repair`]).
    pub node_repair: bool,
    /// How repair runs: Karpenter v1.15's policies (the default; `RebootForRepair`,
    /// `TerminateFirstRepair`) or v1.14's (`LegacyNodeRepair`).
    pub repair: RepairSettings,
    /// Karpenter's `MIN_VALUES_POLICY` (`NODEWRIGHT_MIN_VALUES_POLICY`): planning, and
    /// the disruption commands this provisioner validates, decide under it.
    pub min_values_policy: MinValuesPolicy,
    /// The cluster's default topology spread constraints (`NODEWRIGHT_SCHEDULER_CONFIG`):
    /// given to pods without their own before planning and validation.
    pub scheduler_config: nodewright_core::default_spread::SchedulerConfig,
}

impl ProvisionerConfig {
    pub fn new(cluster_name: impl Into<String>, holder: impl Into<String>) -> Self {
        let launch = LaunchConfig::new(holder);
        Self {
            cluster_name: cluster_name.into(),
            dry_run: false,
            registration_ttl: Duration::from_secs(15 * 60),
            orphan_grace: Duration::from_secs(5 * 60),
            ice_ttl: launch.ice_ttl,
            lease_ttl: Duration::from_secs(15),
            holder: launch.holder,
            launch_attempts: launch.launch_attempts,
            backoff: launch.backoff,
            adopt_karpenter_nodes: false,
            spot_to_spot: false,
            node_repair: true,
            repair: RepairSettings::default(),
            min_values_policy: MinValuesPolicy::Strict,
            scheduler_config: Default::default(),
        }
    }

    pub fn launch(&self) -> LaunchConfig {
        LaunchConfig {
            holder: self.holder.clone(),
            ice_ttl: self.ice_ttl,
            launch_attempts: self.launch_attempts,
            backoff: self.backoff,
        }
    }

    pub fn lifecycle(&self) -> LifecycleConfig {
        LifecycleConfig {
            registration_ttl: self.registration_ttl,
            orphan_grace: self.orphan_grace,
        }
    }
}

/// What one tick did. Unschedulable pods are data, not errors.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TickReport {
    /// Set when the tick did nothing on purpose ("lease held by ...").
    pub skipped: Option<String>,
    /// When the lease another invocation holds runs out (Unix seconds), when skipped
    /// for it: a holder that died frees it then, and the next try is then, not a poll
    /// later.
    pub lease_free_at: Option<i64>,
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
    /// Unhealthy nodes repaired or held on this poll (see [`crate::repair`]).
    pub repair: RepairReport,
    /// Disruption commands advanced on this poll (see [`crate::command`]).
    pub commands: CommandsReport,
    /// Static NodePools scaled on this poll (see [`crate::static_capacity`]).
    pub static_capacity: StaticReport,
    /// NodePools or node classes that could not be used, with the reason.
    pub invalid: Vec<String>,
    /// Kinds the cluster would not list this tick (the tick went on without them).
    pub unreadable: Vec<UnreadableKind>,
    /// Claims launched with a NodePool's minValues lowered (`BestEffort`), each with
    /// what was lowered.
    pub min_values_relaxed: Vec<MinValuesRelaxed>,
    /// Each CapacityBuffer after this tick's plan: how many of its virtual pods fit
    /// existing capacity, open claims or fit nowhere, and its conditions.
    pub buffers: Vec<nodewright_core::capacity_buffer::BufferStatus>,
}

/// A claim launched with minValues lowered under `MIN_VALUES_POLICY=BestEffort`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MinValuesRelaxed {
    pub claim: String,
    pub node_pool: String,
    /// (label key, the NodePool's minValues, the claim's).
    pub keys: Vec<(String, u32, u32)>,
}

impl MinValuesRelaxed {
    /// What `planned` lowered from `pool`'s minValues; `None` when nothing.
    fn of(claim: &str, planned: &PlannedNodeClaim, pool: &NodePool) -> Option<Self> {
        let keys = planned
            .requirements
            .min_values_lowered_from(&Requirements::from_node_requirements(&pool.requirements));
        (!keys.is_empty()).then(|| MinValuesRelaxed {
            claim: claim.to_string(),
            node_pool: pool.name.clone(),
            keys,
        })
    }

    fn message(&self) -> String {
        let lowered: Vec<String> = self
            .keys
            .iter()
            .map(|(key, from, to)| format!("{key} from {from} to {to}"))
            .collect();
        format!(
            "NodeClaim {} launched with minValues relaxed ({}): the instance types that fit its pods cannot keep the NodePool's minimum (MIN_VALUES_POLICY=BestEffort)",
            self.claim,
            lowered.join(", ")
        )
    }
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

pub struct Provisioner {
    ports: Ports,
    config: ProvisionerConfig,
    /// The launch path, for this job's claims.
    launcher: Launcher,
    /// Re-decides disruption commands at validation (core's `decide` by default).
    decider: Decider,
    /// What could not be done, published once per finding per window (the memory
    /// lives as long as the warm Lambda).
    reasons: Reasons,
    /// Node repair's memory (EC2 status checks read once a minute).
    repairer: Repairer,
    /// Static NodePools' memory (warnings already given).
    statics: StaticCapacity,
    /// The zonal shifts the NodePools were told of.
    zonal_shifts: ZonalShiftNotices,
}

impl Provisioner {
    pub fn new(ports: Ports, config: ProvisionerConfig) -> Self {
        Self {
            launcher: Launcher::new(ports.clone(), config.launch()),
            repairer: Repairer::new(config.repair.clone()),
            ports,
            config,
            decider: default_decider(),
            reasons: Reasons::new(),
            statics: StaticCapacity::default(),
            zonal_shifts: ZonalShiftNotices::default(),
        }
    }

    /// The same provisioner validating disruption commands with `decider` (tests and
    /// the simulator inject decisions; production uses core's).
    pub fn with_decider(mut self, decider: Decider) -> Self {
        self.decider = decider;
        self
    }

    pub fn config(&self) -> &ProvisionerConfig {
        &self.config
    }

    pub fn ports(&self) -> &Ports {
        &self.ports
    }

    fn commands(&self) -> CommandMachine<'_> {
        CommandMachine {
            launcher: &self.launcher,
            decider: &self.decider,
            spot_to_spot: self.config.spot_to_spot,
        }
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
                    lease_free_at: expires_at,
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
            // When the lease frees before the next poll, try again the moment it does.
            let mut lease_free_at: Option<i64> = None;
            let recount_due = clock.now() - last_tick >= RECOUNT_AFTER_SECS;
            if retry || self.work_waiting(&counted, recount_due, &mut run).await {
                last_tick = clock.now();
                retry = match self.tick().await {
                    Ok(report) => match &report.skipped {
                        Some(why) => {
                            run.lease_busy
                                .push(why.trim_start_matches("lease held by ").to_string());
                            lease_free_at = report.lease_free_at;
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
            let mut rest = poll_interval.saturating_sub(Duration::from_secs(spent));
            if let Some(free) = lease_free_at {
                // At least a second: a lease found expired yet not taken (renewed in
                // between) is not tried again in a tight loop.
                let until_free = u64::try_from(free - clock.now()).unwrap_or(0).max(1);
                rest = rest.min(Duration::from_secs(until_free));
            }
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
        let (pods, claims_in_motion) = tokio::join!(
            self.ports.cluster.unbound_pods(),
            self.ports
                .claims
                .any_claim(&|c| in_motion(c.state) || c.reboot.is_some())
        );
        let (pods, claims_in_motion) = match (pods, claims_in_motion) {
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
        claims_in_motion
            || (self.config.node_repair && self.repairer.due(self.ports.clock.now()))
            || pods
                .iter()
                .any(|p| p.wants_capacity() && (recount_due || !counted.contains(&p.key())))
    }

    async fn dry_run(&self) -> Result<TickReport> {
        let now = self.ports.clock.now();
        let gathered = self.gather(now).await?;
        let mut report = TickReport {
            dry_run: true,
            invalid: gathered.invalid.clone(),
            ..TickReport::default()
        };
        self.plan_into(&gathered, &mut report);
        for c in &report.planned {
            self.ports
                .record_decision(Decision {
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
        let mut gathered = self.gather(now).await?;
        let mut report = TickReport {
            invalid: gathered.invalid.clone(),
            unreadable: gathered.state.unreadable.clone(),
            ..TickReport::default()
        };
        lease.keep(&self.ports).await?;

        let mut launches = LaunchLog::default();
        self.launcher
            .recover_launching(&mut gathered, &mut launches)
            .await?;
        if self.config.adopt_karpenter_nodes {
            let adopted = adopt_karpenter_nodes(
                &self.ports,
                &gathered.state,
                &gathered.claims,
                &gathered.karpenter_instances,
                &gathered.catalog,
                &gathered.pricing,
                now,
            )
            .await?;
            report
                .adopted_karpenter_nodes
                .extend(adopted.iter().map(|c| c.name.clone()));
            gathered.claims.extend(adopted);
        }
        lease.keep(&self.ports).await?;
        // Repair first: the claims it disrupts are driven by this very reconcile.
        let mut repaired = Vec::new();
        if self.config.node_repair {
            report.repair = self
                .repairer
                .repair(
                    &self.ports,
                    RepairView {
                        nodes: &gathered.state.nodes,
                        pools: &gathered.pools,
                        reservations: &gathered.pricing.reservations,
                    },
                    &mut gathered.claims,
                    &mut repaired,
                    now,
                )
                .await?;
        }
        // Nodes in Capacity Blocks about to end are drained, as repairs are.
        crate::reservations::drain_expiring(
            &self.ports,
            &gathered.expiring_reservations,
            &mut gathered.claims,
            &mut repaired,
            now,
        )
        .await?;
        let Gathered {
            state,
            claims,
            catalog,
            owned,
            karpenter_instances,
            ..
        } = &mut gathered;
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
        report.lifecycle.disrupted.splice(0..0, repaired);
        if report.lifecycle.changed_cluster() {
            // Plan on the cluster as the reconciler left it: taints removed, nodes
            // initialized, pods evicted. A stale view launched a second node for pods
            // that had one.
            let fresh = self.ports.cluster.state().await?;
            gathered.state.nodes = fresh.nodes;
            gathered.state.pods = fresh.pods;
            gathered.state.pdbs = fresh.pdbs;
            gathered.state.daemonsets = fresh.daemonsets;
        }
        // Commands advance on every poll: a replacement initialized, a validation due.
        report.commands = advance_commands(&self.commands(), &mut gathered, Some(lease)).await?;
        if report.commands.changed_cluster() {
            let fresh = self.ports.cluster.state().await?;
            gathered.state.nodes = fresh.nodes;
            gathered.state.pods = fresh.pods;
        }

        // The ICE cache once more, read after the pods the plan sees: an interruption
        // marks its offering before it evicts, so a pod evicted by it comes with the
        // mark (the gather read both at once, in no order).
        match self.ports.backoff.unavailable_offerings(now).await {
            Ok(fresh) => gathered.pricing.unavailable.extend(fresh),
            Err(e) => {
                warn!(error = %e, kind = ?e.kind, "could not read the ICE cache again; planning with the one read at the start of the tick")
            }
        }
        self.plan_into(&gathered, &mut report);
        report.static_capacity = self
            .statics
            .reconcile(&self.ports, &mut gathered, &mut report.planned)
            .await?;
        let scaled_down = report.static_capacity.scaled_down.iter().cloned();
        report.lifecycle.disrupted.extend(scaled_down);
        self.drain_now_where_pods_have_room(&mut gathered, &report)
            .await;
        let mut names: HashSet<String> = gathered.claims.iter().map(|c| c.name.clone()).collect();
        for planned in report.planned.clone() {
            lease.keep(&self.ports).await?;
            let Some(pool) = gathered
                .pools
                .iter()
                .find(|p| p.name == planned.node_pool)
                .cloned()
            else {
                continue;
            };
            let claim = self
                .launcher
                .create_claim(&planned, &pool, &gathered, lease.lease().token, &mut names)
                .await?;
            info!(claim = %claim.name, nodepool = %pool.name, pods = claim.pods.len(), "claim written; launching");
            if let Some(relaxed) = MinValuesRelaxed::of(&claim.name, &planned, &pool) {
                self.tell_min_values_relaxed(&relaxed, &planned).await;
                report.min_values_relaxed.push(relaxed);
            }
            self.launcher
                .launch_and_record(claim, &pool, &mut gathered, &mut launches)
                .await?;
        }
        report.adopted = launches.adopted;
        report.launched = launches.launched;
        report.failed = launches.failed;
        report.deferred = launches.deferred;
        self.publish_reasons(&gathered, &report).await;
        // The claims as NodeClaim objects (`kubectl get nodeclaims`): best effort, never
        // fails the tick; a mirror not written now is written by the next tick.
        match self.ports.cluster.mirror_claims(&gathered.claims).await {
            Ok(mirror) if mirror.writes() > 0 => {
                info!(
                    created = mirror.created.len(),
                    updated = mirror.updated.len(),
                    deleted = mirror.deleted.len(),
                    deferred = mirror.deferred,
                    "claims mirrored as NodeClaims"
                )
            }
            Ok(_) => {}
            Err(e) => warn!(error = %e, kind = ?e.kind(), source = ?std::error::Error::source(&e),
                "could not mirror the claims as NodeClaims; trying again next tick"),
        }
        Ok(report)
    }

    /// A replace-then-drain waits for its replacement; but when the plan finds room on
    /// Ready nodes for every pod of the node being replaced, no replacement comes, and
    /// waiting out the full delay only keeps a node that is going. Its drain starts now
    /// (the next poll drives it).
    async fn drain_now_where_pods_have_room(&self, gathered: &mut Gathered, report: &TickReport) {
        let now = self.ports.clock.now();
        let waiting: Vec<NodeClaim> = gathered
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
            let pods: Vec<String> = gathered
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
            match self.ports.save_claim(&claim, next).await {
                Ok(next) => {
                    info!(claim = %claim.name, pods = pods.len(), "the node's pods fit on Ready nodes: draining without a replacement");
                    gathered.put_claim(next);
                }
                Err(e) => {
                    warn!(claim = %claim.name, error = %e, "could not start the drain early; it starts at its set time")
                }
            }
        }
    }

    /// Makes what this tick could not do reach people (see [`crate::reasons`]), and
    /// tells the pods of each launch and nomination where they will run. Best effort.
    async fn publish_reasons(&self, gathered: &Gathered, report: &TickReport) {
        let invalid_pools: HashSet<&str> = gathered
            .problems
            .iter()
            .filter(|p| p.kind == ObjectKind::NodePool)
            .map(|p| p.name.as_str())
            .collect();
        let healthy_node_pools: Vec<String> = gathered
            .pools
            .iter()
            .filter(|p| !invalid_pools.contains(p.name.as_str()))
            .map(|p| p.name.clone())
            .collect();
        let healthy_node_classes: Vec<String> = gathered
            .healthy_classes
            .iter()
            .map(|(n, _)| n.clone())
            .collect();
        let status_fields: Vec<StatusFields> = gathered
            .healthy_classes
            .iter()
            .filter_map(|(n, profile)| Some(StatusFields::instance_profile(n, profile.as_deref()?)))
            .chain(crate::static_capacity::node_counts(gathered))
            .collect();
        let is_virtual = virtual_keys(gathered);
        let mut claims: Vec<ClaimPods> = report
            .launched
            .iter()
            .filter_map(|l| {
                let claim = gathered.claims.iter().find(|c| c.name == l.name)?;
                let real: Vec<String> = claim
                    .pods
                    .iter()
                    .filter(|p| !is_virtual.contains(*p))
                    .cloned()
                    .collect();
                Some(ClaimPods::launched(
                    &l.name,
                    &real,
                    &l.instance_type,
                    &l.zone,
                ))
            })
            .collect();
        claims.extend(report.nominated.iter().map(|(claim, pods)| {
            let node = gathered
                .claims
                .iter()
                .find(|c| &c.name == claim)
                .and_then(|c| c.node_name.as_deref());
            ClaimPods::nominated(claim, pods, node)
        }));
        // Pods held because a kind they depend on cannot be read are told so, with the
        // permission to grant, as pods nothing can hold are.
        let mut unschedulable = report.unschedulable.clone();
        unschedulable.extend(
            report
                .not_provisioned
                .iter()
                .filter(|n| {
                    matches!(
                        &n.why,
                        NotProvisionable::Volume(VolumeProblem::StorageUnreadable { .. })
                    )
                })
                .map(|n| UnschedulablePod {
                    pod: n.pod.clone(),
                    reason: n.reason.clone(),
                }),
        );
        let now = self.ports.clock.now();
        self.zonal_shifts
            .publish(
                &self.ports,
                &gathered.shifted_zones,
                &gathered.pools,
                &|name| gathered.classes.get(name).map(|(_, r)| r),
            )
            .await;
        self.reasons
            .publish_overlays(&self.ports, now, &gathered.overlay_statuses)
            .await;
        if !report.buffers.is_empty() {
            self.reasons
                .publish_buffers(
                    &self.ports,
                    now,
                    &gathered.state.capacity_buffers,
                    &gathered.buffers,
                    &report.buffers,
                )
                .await;
        }
        self.reasons
            .publish(
                &self.ports,
                now,
                &ReasonsInput {
                    unschedulable: &unschedulable,
                    problems: &gathered.problems,
                    healthy_node_classes: &healthy_node_classes,
                    healthy_node_pools: &healthy_node_pools,
                    status_fields: &status_fields,
                    claims: &claims,
                },
            )
            .await;
    }

    /// A claim launched with minValues lowered: Karpenter only annotates its NodeClaim
    /// (`karpenter.sh/nodeclaim-min-values-relaxed`); here a Normal `MinValuesRelaxed`
    /// event on the NodePool, a log line and a decision say so.
    async fn tell_min_values_relaxed(
        &self,
        relaxed: &MinValuesRelaxed,
        planned: &PlannedNodeClaim,
    ) {
        let message = relaxed.message();
        info!(claim = %relaxed.claim, nodepool = %relaxed.node_pool, keys = ?relaxed.keys,
            "minValues relaxed (MIN_VALUES_POLICY=BestEffort)");
        self.ports
            .emit(ClusterEvent::about_object(
                ObjectKind::NodePool,
                &relaxed.node_pool,
                EventType::Normal,
                "MinValuesRelaxed",
                message.clone(),
            ))
            .await;
        self.ports
            .record_decision(Decision {
                at: self.ports.clock.now(),
                job: "provision".into(),
                action: message,
                reason: pods_reason(&planned.pods),
                price_per_hour: Some(planned.price_per_hour),
            })
            .await;
    }

    /// The gather of a provisioning tick: a class that cannot be resolved for now
    /// fails the tick (see [`Unresolved::Fail`]). Planning's settings ride on the
    /// pricing, so the commands validated on this view decide as planning does.
    async fn gather(&self, now: i64) -> Result<Gathered> {
        let mut gathered = gather(
            &self.ports,
            now,
            Unresolved::Fail,
            self.config.adopt_karpenter_nodes,
        )
        .await?;
        gathered.pricing.min_values_policy = self.config.min_values_policy;
        crate::gather::apply_default_spread(&mut gathered, &self.config.scheduler_config);
        Ok(gathered)
    }
    fn plan_into(&self, gathered: &Gathered, report: &mut TickReport) {
        let view = ClusterView {
            nodes: &gathered.state.nodes,
            pods: &gathered.state.pods,
            daemonsets: &gathered.state.daemonsets,
            pdbs: &gathered.state.pdbs,
        };
        // A disruption command's candidates stay capacity (cordoned, pods still there)
        // until the command is validated; only then are their pods planned elsewhere.
        let claims = planning_claims(&gathered.claims);
        let mut snapshot = planning_snapshot(view, &claims, &gathered.pools);
        report.pending = snapshot.provisionable_pods().map(|p| p.key()).collect();
        let in_flight = in_flight_claims(&claims, &snapshot);
        // CapacityBuffers' virtual pods: planned after the real ones, never told about
        // (no event names a pod that does not exist), never waited on.
        snapshot.pods.extend(gathered.virtual_pods.iter().cloned());
        let is_virtual = virtual_keys(gathered);
        let plan = plan_provisioning(&ProvisioningInput {
            snapshot: &snapshot,
            node_pools: &gathered.pools,
            node_classes: &gathered.state.node_classes,
            catalog: &gathered.catalog,
            pricing: &gathered.pricing,
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
        report.buffers = buffer_statuses(&gathered.buffers, &gathered.virtual_pods, &plan);
        report.not_provisioned = plan.not_provisioned;
        report.planned = plan.node_claims;
        report.unschedulable = plan.unschedulable;
        report
            .unschedulable
            .retain(|u| !is_virtual.contains(&u.pod));
        report.absorbed = plan
            .existing_nodes
            .iter()
            .flat_map(|a| a.pods.iter().cloned())
            .filter(|p| !is_virtual.contains(p))
            .collect();
        report.nominated = plan
            .in_flight
            .into_iter()
            .map(|a| {
                let pods = a.pods.into_iter().filter(|p| !is_virtual.contains(p));
                (a.target, pods.collect::<Vec<_>>())
            })
            .filter(|(_, pods)| !pods.is_empty())
            .collect();
    }
}

/// The keys (`namespace/name`) of the tick's CapacityBuffer virtual pods.
fn virtual_keys(gathered: &Gathered) -> HashSet<String> {
    gathered.virtual_pods.iter().map(|p| p.key()).collect()
}
