//! The disruption job: decide once per scheduled run, and execute each command as a
//! state machine persisted on its claims, advanced by every poll of the provisioner.
//!
//! ```text
//! decide (core, on the provisioner's view of the cluster)        ── only when no command is in flight
//!   │  record every command and every rejection in the decision log
//!   ▼
//! mark: each candidate claim Initialized → Disrupting{cause, command}   (the whole command rides
//!   │   on every candidate, so any one of them resumes it), then taint   on each candidate)
//!   │   karpenter.sh/disrupted:NoSchedule
//!   ▼
//! replace: a Launching claim per replacement (name fixed in the command, so a retry finds
//!   │   it), launched through the provisioner's launch path; its `pods` nominate the
//!   │   moving pods to it, so the provisioner never launches for them again
//!   ▼
//! wait until every replacement is Initialized, then 15 s more (Karpenter's validation delay)
//!   ▼
//! validate: re-decide on fresh state, as if the replacements were not there yet; every
//!   │   candidate must still be in a command. If not (a pod arrived, a budget closed,
//!   │   prices moved), or a replacement failed to launch, or a candidate was taken by
//!   │   someone else: abandon — untaint, claims back to Initialized, reason recorded.
//!   │   Replacements stay: they are ordinary capacity, and an empty one is consolidated.
//!   ▼
//! validated: the candidates drain through `crate::terminate` (PDB-respecting
//!     evictions, deadlines), then TerminateInstances for the recorded instance only
//! ```
//!
//! Every step is a conditional write of one claim after (or, for the taint, before
//! the next) idempotent side effect: a crash anywhere leaves claims that the next poll
//! resumes from. While a command is unvalidated its candidates count as capacity for
//! planning ([`planning_claims`]): their pods still run there, so nothing is launched
//! for them except the command's own replacements.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};

use nodewright_core::catalog::{LABEL_ARCH, LABEL_NODEPOOL};
use nodewright_core::cluster::{ClusterSnapshot, Node, Pod};
use nodewright_core::disruption::Reason;
use nodewright_core::disruption::command::{
    Command, Decision as CoreDecision, DisruptionInput, PriceBeforeAfter, RejectedNode,
};
use nodewright_core::disruption::drift::{LaunchedWith, SelectedImage, Selection, external_drift};
use nodewright_core::nodeclaim::{
    ClaimState, Disruption, DisruptionCause, DisruptionCommand, NodeClaim,
    instance_id_from_provider_id,
};
use nodewright_core::planning_view::{ClusterView, in_flight_claims, planning_snapshot};

use crate::context::Ports;
use crate::error::{EngineError, Result};
use crate::lease::{Acquired, LeaseKeeper};
use crate::ports::{Decision, ErrorKind, Instance, NodePatch};
use crate::provision::{
    Provisioner, ProvisionerConfig, TickReport, Unresolved, World, claim_spec, replace,
};
use crate::terminate::{self, TAINT_DISRUPTED, save};

/// The lease every disruption invocation competes for.
pub const LEASE_NAME: &str = "disruption";
/// After the last replacement is Initialized (or the candidates were marked, when
/// there is none), how long before the command is re-checked: Karpenter's 15 s.
pub const VALIDATION_DELAY: Duration = Duration::from_secs(15);
const JOB: &str = "disruption";

/// Core's decision function, as the engine calls it (injected by tests).
pub type Decider = Arc<dyn Fn(&DisruptionInput<'_>) -> CoreDecision + Send + Sync>;

/// Core's `decide`.
pub fn default_decider() -> Decider {
    Arc::new(|input: &DisruptionInput<'_>| nodewright_core::disruption::decide(input))
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DisruptionConfig {
    pub cluster_name: String,
    /// Who holds the lease (the Lambda's request id).
    pub holder: String,
    /// Decide and record; mark, launch and taint nothing.
    pub dry_run: bool,
    /// Karpenter's SpotToSpotConsolidation (`NODEWRIGHT_SPOT_TO_SPOT`).
    pub spot_to_spot: bool,
    pub lease_ttl: Duration,
}

impl DisruptionConfig {
    pub fn new(cluster_name: impl Into<String>, holder: impl Into<String>) -> Self {
        Self {
            cluster_name: cluster_name.into(),
            holder: holder.into(),
            dry_run: false,
            spot_to_spot: false,
            lease_ttl: Duration::from_secs(15),
        }
    }
}

/// A command this run started.
#[derive(Debug, Clone, PartialEq)]
pub struct StartedCommand {
    pub id: String,
    pub method: String,
    pub reason: Reason,
    pub nodes: Vec<String>,
    /// Replacement claim names.
    pub replacements: Vec<String>,
    pub savings_per_hour: f64,
}

/// What one pass over the commands in flight did.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CommandsReport {
    /// Candidate claims marked Disrupting (and cordoned).
    pub marked: Vec<String>,
    /// Replacement claims launched.
    pub launched: Vec<String>,
    /// Commands validated: their candidates drain now.
    pub validated: Vec<String>,
    /// (command id, why) for commands given up; their candidates are back.
    pub abandoned: Vec<(String, String)>,
    /// Commands waiting for replacements or for the validation delay.
    pub waiting: Vec<String>,
    /// (command id, error) for commands that could not advance; retried next poll.
    pub errors: Vec<(String, String)>,
}

impl CommandsReport {
    /// Nodes were tainted or untainted: a view read before is stale.
    pub fn changed_cluster(&self) -> bool {
        !(self.marked.is_empty() && self.abandoned.is_empty())
    }
}

/// What one disruption run did.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DisruptionReport {
    /// Set when the run did nothing on purpose ("lease held by ...").
    pub skipped: Option<String>,
    pub dry_run: bool,
    /// Whether core was asked: not while a command is still in flight (its
    /// replacements would look empty and its candidates would be counted twice).
    pub decided: bool,
    pub started: Vec<StartedCommand>,
    pub rejected: Vec<RejectedNode>,
    pub price_per_hour: PriceBeforeAfter,
    /// The commands in flight, advanced one step first.
    pub progress: CommandsReport,
}

/// The disruption job over the ports; shares the provisioner's gathering and launch
/// path (it holds one).
pub struct Disrupter {
    provisioner: Provisioner,
    config: DisruptionConfig,
    /// The rejection last recorded per node (code and reason), for as long as the warm
    /// Lambda lives: a node kept for the same reason minute after minute is recorded
    /// once, not 1,440 times a day (a DynamoDB write each).
    recorded: std::sync::Mutex<std::collections::HashMap<String, String>>,
}

impl Disrupter {
    pub fn new(ports: Ports, config: DisruptionConfig) -> Self {
        let mut pc = ProvisionerConfig::new(config.cluster_name.clone(), config.holder.clone());
        pc.spot_to_spot = config.spot_to_spot;
        pc.dry_run = config.dry_run;
        Self {
            provisioner: Provisioner::new(ports, pc),
            config,
            recorded: Default::default(),
        }
    }

    pub fn with_decider(mut self, decider: Decider) -> Self {
        self.provisioner = self.provisioner.with_decider(decider);
        self
    }

    fn ports(&self) -> &Ports {
        self.provisioner.ports()
    }

    /// One scheduled run: lease, gather, advance the commands in flight, decide (when
    /// none is), start the commands decided. Exits; the provisioner's polls carry the
    /// commands on.
    pub async fn tick(&self) -> Result<DisruptionReport> {
        let ports = self.ports().clone();
        if self.config.dry_run {
            return self.dry_run().await;
        }
        let keeper = match LeaseKeeper::acquire(
            &ports,
            LEASE_NAME,
            &self.config.holder,
            self.config.lease_ttl,
        )
        .await?
        {
            Acquired::Held(k) => k,
            Acquired::Busy { holder, .. } => {
                let holder = holder.unwrap_or_else(|| "another invocation".into());
                info!(lease_holder = %holder, "disruption lease held; skipping this run");
                return Ok(DisruptionReport {
                    skipped: Some(format!("lease held by {holder}")),
                    ..DisruptionReport::default()
                });
            }
        };
        let result = self.tick_with_lease(&keeper).await;
        keeper.release(&ports).await;
        result
    }

    async fn tick_with_lease(&self, lease: &LeaseKeeper) -> Result<DisruptionReport> {
        let p = &self.provisioner;
        let now = self.ports().clock.now();
        let mut world = p.gather_with(now, Unresolved::Skip).await?;
        let mut report = DisruptionReport {
            progress: advance_commands(p, &mut world, Some(lease)).await?,
            ..DisruptionReport::default()
        };
        if command_in_flight(&world.claims) {
            info!("a disruption command is in flight; deciding on the next run");
            return Ok(report);
        }
        if report.progress.changed_cluster() {
            world.state = self.ports().cluster.state().await?;
        }
        let decision = decide(p, &world, now, None);
        report.decided = true;
        self.record(&decision, now, false).await;
        for command in &decision.commands {
            lease.keep(self.ports()).await?;
            match start_command(p, &mut world, command, Some(lease), &mut report.progress).await {
                Ok(Some(started)) => report.started.push(started),
                Ok(None) => {}
                Err(e) => {
                    warn!(nodes = ?command.nodes, error = %e, "could not start the command; the next run decides again");
                    report
                        .progress
                        .errors
                        .push((command.nodes.join(","), e.to_string()));
                }
            }
        }
        report.rejected = decision.rejected;
        report.price_per_hour = decision.price_per_hour;
        Ok(report)
    }

    async fn dry_run(&self) -> Result<DisruptionReport> {
        let now = self.ports().clock.now();
        let world = self.provisioner.gather_with(now, Unresolved::Skip).await?;
        let decision = decide(&self.provisioner, &world, now, None);
        self.record(&decision, now, true).await;
        Ok(DisruptionReport {
            dry_run: true,
            decided: true,
            rejected: decision.rejected,
            price_per_hour: decision.price_per_hour,
            ..DisruptionReport::default()
        })
    }

    /// Every command, and every rejection that is new or changed since this warm
    /// Lambda last recorded the node's, in the decision log.
    async fn record(&self, decision: &CoreDecision, now: i64, dry_run: bool) {
        let suffix = if dry_run { " [dry run]" } else { "" };
        for problem in &decision.problems {
            warn!(problem = %problem, "a managed node could not be considered for disruption");
        }
        for c in &decision.commands {
            info!(method = ?c.method, reason = ?c.reason, nodes = ?c.nodes, replacements = c.replacements.len(),
                savings_per_hour = c.savings_per_hour, dry_run, "disruption decided");
            self.ports()
                .decide(Decision {
                    at: now,
                    job: JOB.into(),
                    action: format!(
                        "disrupt {} ({:?}, {:?}), {} replacement(s){suffix}",
                        c.nodes.join(", "),
                        c.method,
                        c.reason,
                        c.replacements.len()
                    ),
                    reason: format!(
                        "{:.4}/h → {:.4}/h, saves {:.4}/h",
                        c.price_per_hour_before, c.price_per_hour_after, c.savings_per_hour
                    ),
                    price_per_hour: Some(c.price_per_hour_after),
                })
                .await;
        }
        let fresh: Vec<&RejectedNode> = {
            let mut recorded = self.recorded.lock().unwrap_or_else(|e| e.into_inner());
            let fresh = decision
                .rejected
                .iter()
                .filter(|r| {
                    let key = format!("{:?}: {}", r.code, r.reason);
                    recorded.insert(r.node.clone(), key.clone()) != Some(key)
                })
                .collect();
            // Nodes gone or now in a command: a later rejection is news again.
            let kept: HashSet<&str> = decision.rejected.iter().map(|r| r.node.as_str()).collect();
            recorded.retain(|n, _| kept.contains(n.as_str()));
            fresh
        };
        for r in &decision.rejected {
            tracing::debug!(node = %r.node, code = ?r.code, reason = %r.reason, "kept");
        }
        for r in fresh {
            self.ports()
                .decide(Decision {
                    at: now,
                    job: JOB.into(),
                    action: format!("keep {} ({:?}){suffix}", r.node, r.code),
                    reason: r.reason.clone(),
                    price_per_hour: None,
                })
                .await;
        }
    }
}

/// The claims as planning sees them: a candidate of an unvalidated command is still
/// Initialized capacity (cordoned, its pods running), not capacity going away — or the
/// provisioner would launch for its pods beside the command's own replacements.
pub fn planning_claims(claims: &[NodeClaim]) -> Vec<NodeClaim> {
    claims
        .iter()
        .map(|c| {
            let mut c = c.clone();
            if held(&c) {
                c.state = ClaimState::Initialized;
            }
            c
        })
        .collect()
}

/// A candidate of a command not yet validated.
fn held(c: &NodeClaim) -> bool {
    c.state == ClaimState::Disrupting && command_of(c).is_some_and(|cmd| !cmd.validated)
}

fn command_of(c: &NodeClaim) -> Option<&DisruptionCommand> {
    c.disruption.as_ref()?.command.as_ref()
}

fn command_in_flight(claims: &[NodeClaim]) -> bool {
    claims
        .iter()
        .any(|c| !c.state.is_terminal() && command_of(c).is_some())
}

fn cause_of(reason: Reason) -> DisruptionCause {
    match reason {
        Reason::Empty => DisruptionCause::Empty,
        Reason::Drifted => DisruptionCause::Drifted,
        Reason::Underutilized => DisruptionCause::Underutilized,
        Reason::Expired => DisruptionCause::Expired,
    }
}

/// Asks core on the provisioner's view of the cluster. At validation, `revalidate` is
/// the command being checked: its replacements' nodes are left out (their pods, if
/// any, are pending in the view), its own candidates are not "already disrupting", and
/// core decides on those candidates alone (a fresh decision over the whole cluster may
/// pick another set of nodes, and would abandon a command that still holds).
fn decide(
    p: &Provisioner,
    world: &World,
    now: i64,
    revalidate: Option<&DisruptionCommand>,
) -> CoreDecision {
    let hide: HashSet<&str> = revalidate
        .iter()
        .flat_map(|c| c.replacements.iter().map(|r| r.name.as_str()))
        .collect();
    let own: HashSet<&str> = revalidate
        .iter()
        .flat_map(|c| c.candidates.iter().map(String::as_str))
        .collect();
    let claims: Vec<NodeClaim> = planning_claims(&world.claims)
        .into_iter()
        .filter(|c| !hide.contains(c.name.as_str()))
        .collect();
    let hidden_nodes: HashSet<&str> = world
        .claims
        .iter()
        .filter(|c| hide.contains(c.name.as_str()))
        .filter_map(|c| c.node_name.as_deref())
        .collect();
    let nodes: Vec<_> = world
        .state
        .nodes
        .iter()
        .filter(|n| !hidden_nodes.contains(n.name.as_str()))
        .cloned()
        .collect();
    let pods: Vec<Pod> = world
        .state
        .pods
        .iter()
        .filter(|p| {
            !(p.daemonset_owned
                && p.node_name
                    .as_deref()
                    .is_some_and(|n| hidden_nodes.contains(n)))
        })
        .map(|p| match p.node_name.as_deref() {
            Some(n) if hidden_nodes.contains(n) => Pod {
                node_name: None,
                marked_unschedulable: true,
                ..p.clone()
            },
            _ => p.clone(),
        })
        .collect();
    let view = ClusterView {
        nodes: &nodes,
        pods: &pods,
        daemonsets: &world.state.daemonsets,
        pdbs: &world.state.pdbs,
    };
    let snapshot: ClusterSnapshot = planning_snapshot(view, &claims, &world.pools);
    let in_flight = in_flight_claims(&claims, &snapshot);
    let external_drift = resource_drift(world, &nodes);
    // Nodes already on their way out, and candidates of other commands: budgets count
    // them, and they are neither candidates nor destinations.
    let disrupting: Vec<String> = world
        .claims
        .iter()
        .filter(|c| c.state.is_being_taken_away() && !own.contains(c.name.as_str()))
        .filter_map(|c| c.node_name.clone())
        .collect();
    let validating: Option<Vec<String>> = revalidate.map(|_| {
        world
            .claims
            .iter()
            .filter(|c| own.contains(c.name.as_str()))
            .filter_map(|c| c.node_name.clone())
            .collect()
    });
    let input = DisruptionInput {
        snapshot: &snapshot,
        node_pools: &world.pools,
        node_classes: &world.state.node_classes,
        catalog: &world.catalog,
        pricing: &world.pricing,
        in_flight: &in_flight,
        now,
        spot_to_spot: p.config().spot_to_spot,
        external_drift: &external_drift,
        disrupting: &disrupting,
        validating: validating.as_deref(),
    };
    (p.decider())(&input)
}

/// (node, why) for each managed node whose instance runs an AMI, sits in a subnet or
/// has security groups its NodePool's EC2NodeClass no longer selects, as resolved by
/// this tick's gather. A node whose class did not resolve, or whose instance is not
/// listed (or EC2 did not say), is not drifted this way.
fn resource_drift(world: &World, nodes: &[Node]) -> Vec<(String, String)> {
    let selections: HashMap<&str, Selection<'_>> = world
        .classes
        .iter()
        .map(|(name, (_, resolved))| {
            let selection = Selection {
                node_class: name.as_str(),
                images: resolved
                    .images
                    .iter()
                    .map(|i| SelectedImage {
                        id: &i.id,
                        arch: &i.arch,
                    })
                    .collect(),
                subnets: resolved.subnets.iter().map(|s| s.id.as_str()).collect(),
                security_groups: resolved
                    .security_group_ids
                    .iter()
                    .map(String::as_str)
                    .collect(),
            };
            (name.as_str(), selection)
        })
        .collect();
    let instances: HashMap<&str, &Instance> = world
        .owned
        .iter()
        .chain(&world.karpenter_instances)
        .map(|i| (i.id.as_str(), i))
        .collect();
    let launched = nodes.iter().filter_map(|node| {
        let pool = node.labels.get(LABEL_NODEPOOL)?;
        let pool = world.pools.iter().find(|p| &p.name == pool)?;
        let class = selections.get(pool.node_class_ref.name.as_str())?;
        let id = node
            .provider_id
            .as_deref()
            .and_then(instance_id_from_provider_id)?;
        let instance = instances.get(id)?;
        let arch = node.labels.get(LABEL_ARCH).or_else(|| {
            world
                .catalog
                .get(&instance.instance_type)
                .and_then(|t| t.labels.get(LABEL_ARCH))
        });
        let with = LaunchedWith {
            node: &node.name,
            arch: arch.map(String::as_str),
            image: instance.image_id.as_deref(),
            subnet: instance.subnet_id.as_deref(),
            security_groups: &instance.security_group_ids,
        };
        Some((with, class))
    });
    let drifted = external_drift(launched);
    for (node, why) in &drifted {
        tracing::debug!(node = %node, reason = %why, "drifted from what its EC2NodeClass selects");
    }
    drifted
}

/// A short stable id for a command: FNV-1a over its nodes and the time it was decided.
fn command_id(nodes: &[String], now: i64) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in nodes.join("\n").bytes().chain(now.to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// `<pool>-<5 lowercase alphanumerics>` derived from the command id: the same on
/// every retry of the same command.
fn replacement_name(pool: &str, id: &str, index: usize) -> String {
    const ALPHABET: &[u8; 36] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.bytes().chain((index as u64).to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let mut suffix = String::with_capacity(5);
    for _ in 0..5 {
        suffix.push(char::from(ALPHABET[(h % 36) as usize]));
        h /= 36;
    }
    format!("{pool}-{suffix}")
}

/// Turns a decided command into a persisted one and takes its first steps. `None`
/// when it cannot be executed (a node without a claim of ours: never disrupted).
async fn start_command(
    p: &Provisioner,
    world: &mut World,
    command: &Command,
    lease: Option<&LeaseKeeper>,
    report: &mut CommandsReport,
) -> Result<Option<StartedCommand>> {
    let now = p.ports().clock.now();
    let mut candidates = Vec::new();
    for node in &command.nodes {
        let claim = world.claims.iter().find(|c| {
            c.node_name.as_deref() == Some(node.as_str()) && c.state == ClaimState::Initialized
        });
        let Some(claim) = claim else {
            warn!(node = %node, "decided to disrupt a node with no Initialized claim of ours; skipped");
            return Ok(None);
        };
        candidates.push(claim.name.clone());
    }
    let id = command_id(&command.nodes, now);
    let mut replacements = Vec::new();
    for (i, planned) in command.replacements.iter().enumerate() {
        let Some(pool) = world.pools.iter().find(|p| p.name == planned.node_pool) else {
            warn!(nodepool = %planned.node_pool, "replacement for an unusable NodePool; command skipped");
            return Ok(None);
        };
        replacements.push(claim_spec(
            planned,
            pool,
            replacement_name(&pool.name, &id, i),
        ));
    }
    let persisted = DisruptionCommand {
        id: id.clone(),
        candidates,
        replacements,
        validated: false,
    };
    let cause = cause_of(command.reason);
    info!(command = %id, method = ?command.method, reason = ?command.reason, nodes = ?command.nodes,
        replacements = persisted.replacements.len(), "starting disruption command");
    advance_command(p, world, &persisted, Some(cause), lease, report).await?;
    Ok(Some(StartedCommand {
        id,
        method: format!("{:?}", command.method),
        reason: command.reason,
        nodes: command.nodes.clone(),
        replacements: persisted
            .replacements
            .iter()
            .map(|r| r.name.clone())
            .collect(),
        savings_per_hour: command.savings_per_hour,
    }))
}

/// Every command found on the claims, advanced one step. One command's failure never
/// stops the others.
pub(crate) async fn advance_commands(
    p: &Provisioner,
    world: &mut World,
    lease: Option<&LeaseKeeper>,
) -> Result<CommandsReport> {
    let mut report = CommandsReport::default();
    // By id; a command validated on any candidate is validated (the write reached
    // some candidates before a crash).
    let mut commands: BTreeMap<String, DisruptionCommand> = BTreeMap::new();
    for c in world
        .claims
        .iter()
        .filter(|c| c.state.is_being_taken_away())
    {
        if let Some(cmd) = command_of(c) {
            let entry = commands
                .entry(cmd.id.clone())
                .or_insert_with(|| cmd.clone());
            entry.validated |= cmd.validated;
        }
    }
    for (id, cmd) in commands {
        if let Some(lease) = lease {
            lease.keep(p.ports()).await?;
        }
        match advance_command(p, world, &cmd, None, lease, &mut report).await {
            Ok(()) => {}
            Err(EngineError::LeaseLost { name, source }) => {
                return Err(EngineError::LeaseLost { name, source });
            }
            Err(e) => {
                warn!(command = %id, error = %e, kind = ?e.kind(), "could not advance the command; next poll");
                report.errors.push((id.clone(), e.to_string()));
                if e.kind() == Some(ErrorKind::Conflict) {
                    world.claims = p.ports().store.list_claims().await?;
                }
            }
        }
    }
    Ok(report)
}

/// One step of one command. `cause` is given when the command starts (afterwards it
/// is read from the candidates).
async fn advance_command(
    p: &Provisioner,
    world: &mut World,
    cmd: &DisruptionCommand,
    cause: Option<DisruptionCause>,
    lease: Option<&LeaseKeeper>,
    report: &mut CommandsReport,
) -> Result<()> {
    let ports = p.ports().clone();
    let now = ports.clock.now();
    let find = |world: &World, name: &str| world.claims.iter().find(|c| c.name == name).cloned();
    let ours = |c: &NodeClaim| command_of(c).is_some_and(|x| x.id == cmd.id);

    if cmd.validated {
        // A crash may have stopped half way: finish telling every candidate.
        return mark_validated(&ports, world, cmd).await;
    }

    // 1. Mark every candidate (a crash may have marked only some).
    let cause = cause.or_else(|| {
        cmd.candidates
            .iter()
            .filter_map(|n| find(world, n))
            .find(|c| ours(c))
            .and_then(|c| c.disruption.map(|d| d.cause))
    });
    let Some(cause) = cause else {
        return Ok(());
    };
    for name in &cmd.candidates {
        match find(world, name) {
            Some(c) if ours(&c) && c.state == ClaimState::Disrupting => {}
            Some(c) if c.state == ClaimState::Initialized && c.disruption.is_none() => {
                let marked = c.transition(ClaimState::Disrupting, now, |n| {
                    n.disruption = Some(Disruption {
                        cause,
                        deadline: None,
                        since: now,
                        drain_after: None,
                        event: None,
                        command: Some(cmd.clone()),
                    })
                })?;
                let marked = save(&ports, &c, marked).await?;
                // After the write, so the command is never lost with the taint set:
                // the reconciler also re-cordons a held candidate on every poll.
                terminate::cordon(&ports, &marked).await?;
                info!(command = %cmd.id, claim = %c.name, node = ?c.node_name, cause = ?cause, "candidate marked");
                replace(&mut world.claims, marked);
                report.marked.push(c.name.clone());
            }
            other => {
                let why = match other {
                    None => format!("candidate {name} is gone"),
                    Some(c) => format!("candidate {name} is {} elsewhere", c.state.as_str()),
                };
                return abandon(p, world, cmd, &why, report).await;
            }
        }
    }

    // 2. Replacements: create and launch what is missing, wait for the rest.
    let since = cmd
        .candidates
        .iter()
        .filter_map(|n| find(world, n))
        .filter_map(|c| c.disruption.map(|d| d.since))
        .max()
        .unwrap_or(now);
    let mut ready_at = since;
    let mut all_up = true;
    for spec in &cmd.replacements {
        if let Some(lease) = lease {
            lease.keep(&ports).await?;
        }
        let claim = match find(world, &spec.name) {
            Some(c) => c,
            None => match ports.store.get_claim(&spec.name).await? {
                Some(c) => c,
                None => {
                    let Some(pool) = world
                        .pools
                        .iter()
                        .find(|x| x.name == spec.node_pool)
                        .cloned()
                    else {
                        let why = format!(
                            "NodePool {:?} of replacement {} cannot be used",
                            spec.node_pool, spec.name
                        );
                        return abandon(p, world, cmd, &why, report).await;
                    };
                    let claim = p.new_claim(spec.clone(), &pool, world, now);
                    match ports.store.create_claim(&claim).await {
                        Ok(()) => {}
                        Err(e) if e.kind == ErrorKind::Conflict => {}
                        Err(e) => return Err(e.into()),
                    }
                    world.claims.push(claim.clone());
                    let mut scratch = TickReport::default();
                    p.launch_and_record(claim, &pool, world, &mut scratch)
                        .await?;
                    report
                        .launched
                        .extend(scratch.launched.into_iter().map(|l| l.name));
                    match find(world, &spec.name) {
                        Some(c) => c,
                        None => {
                            all_up = false;
                            continue;
                        }
                    }
                }
            },
        };
        match claim.state {
            ClaimState::Initialized => {
                ready_at = ready_at.max(claim.initialized_at.unwrap_or(claim.updated_at));
            }
            ClaimState::LaunchFailed => {
                let why = format!(
                    "replacement {} failed to launch: {}",
                    claim.name,
                    claim.failure.as_deref().unwrap_or("unknown")
                );
                return abandon(p, world, cmd, &why, report).await;
            }
            s if s.is_terminal() || s.is_being_taken_away() => {
                let why = format!("replacement {} is {}", claim.name, s.as_str());
                return abandon(p, world, cmd, &why, report).await;
            }
            // Launching (the provisioner's poll relaunches it with the same token),
            // Launched, Registered: coming.
            _ => all_up = false,
        }
    }
    let delay = i64::try_from(VALIDATION_DELAY.as_secs()).unwrap_or(15);
    if !all_up || now < ready_at + delay {
        report.waiting.push(cmd.id.clone());
        return Ok(());
    }

    // 3. Validate on the state of now.
    let decision = decide(p, world, now, Some(cmd));
    let chosen: HashSet<&str> = decision
        .commands
        .iter()
        .flat_map(|c| c.nodes.iter().map(String::as_str))
        .collect();
    for name in &cmd.candidates {
        let node = find(world, name).and_then(|c| c.node_name);
        let Some(node) = node else { continue };
        if !chosen.contains(node.as_str()) {
            let why = decision
                .rejected
                .iter()
                .find(|r| r.node == node)
                .map(|r| {
                    format!(
                        "validation: {node} no longer qualifies ({:?}: {})",
                        r.code, r.reason
                    )
                })
                .unwrap_or_else(|| format!("validation: {node} is no longer chosen"));
            return abandon(p, world, cmd, &why, report).await;
        }
    }
    mark_validated(&ports, world, cmd).await?;
    info!(command = %cmd.id, candidates = ?cmd.candidates, "command validated; draining");
    ports
        .decide(Decision {
            at: now,
            job: JOB.into(),
            action: format!(
                "validated command {}: draining {}",
                cmd.id,
                cmd.candidates.join(", ")
            ),
            reason: format!("still holds {}s after its replacements were up", delay),
            price_per_hour: None,
        })
        .await;
    report.validated.push(cmd.id.clone());
    Ok(())
}

/// Every candidate still held by `cmd` is told the command is validated: the
/// reconciler drains it from the next step on, within its NodePool's
/// terminationGracePeriod.
async fn mark_validated(ports: &Ports, world: &mut World, cmd: &DisruptionCommand) -> Result<()> {
    let now = ports.clock.now();
    for name in &cmd.candidates {
        let Some(c) = world.claims.iter().find(|c| &c.name == name).cloned() else {
            continue;
        };
        if !(held(&c) && command_of(&c).is_some_and(|x| x.id == cmd.id)) {
            continue;
        }
        // The drain starts now: the NodePool's terminationGracePeriod bounds it (pods a
        // PDB still protects are deleted from `deadline − their grace` on).
        let grace = world
            .pools
            .iter()
            .find(|p| p.name == c.node_pool)
            .and_then(|p| p.termination_grace_period)
            .map(|d| now.saturating_add(i64::try_from(d.as_secs()).unwrap_or(i64::MAX)));
        let next = c.amend(now, |n| {
            if let Some(d) = n.disruption.as_mut() {
                d.deadline = d.deadline.or(grace);
                if let Some(x) = d.command.as_mut() {
                    x.validated = true;
                }
            }
        })?;
        replace(&mut world.claims, save(ports, &c, next).await?);
    }
    Ok(())
}

/// Gives the command up: every candidate still held by it is untainted and goes back
/// to Initialized. The taint goes first: a crash after it leaves the claim held, and
/// the next poll abandons again; the other order could leave a node cordoned forever.
async fn abandon(
    p: &Provisioner,
    world: &mut World,
    cmd: &DisruptionCommand,
    why: &str,
    report: &mut CommandsReport,
) -> Result<()> {
    let ports = p.ports().clone();
    let now = ports.clock.now();
    warn!(command = %cmd.id, reason = %why, "abandoning disruption command");
    for name in &cmd.candidates {
        let Some(c) = world.claims.iter().find(|c| &c.name == name).cloned() else {
            continue;
        };
        if !(held(&c) && command_of(&c).is_some_and(|x| x.id == cmd.id)) {
            continue;
        }
        if let Some(node) = &c.node_name {
            let patch = NodePatch {
                remove_taints: vec![TAINT_DISRUPTED.into()],
                ..NodePatch::default()
            };
            match ports.cluster.patch_node(node, &patch).await {
                Err(e) if e.kind != ErrorKind::NotFound => return Err(e.into()),
                _ => {}
            }
        }
        let next = c.transition(ClaimState::Initialized, now, |n| n.disruption = None)?;
        replace(&mut world.claims, save(&ports, &c, next).await?);
    }
    ports
        .decide(Decision {
            at: now,
            job: JOB.into(),
            action: format!(
                "abandoned command {} ({})",
                cmd.id,
                cmd.candidates.join(", ")
            ),
            reason: why.to_string(),
            price_per_hour: None,
        })
        .await;
    report.abandoned.push((cmd.id.clone(), why.to_string()));
    Ok(())
}
