//! The disruption command machine: a command decided by the disruption job
//! ([`crate::disrupt`]) executed as a state machine persisted on its claims, advanced
//! by every poll of the provisioner and every run of the disruption job (both call
//! [`advance_commands`]; neither job is imported here).
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
//!   │   it), launched through the launch path (`crate::launch`); its `pods` nominate the
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
//! Each candidate's node is told as the command advances, under Karpenter's reasons:
//! `DisruptionLaunching` and `DisruptionWaitingReadiness` when a replacement is
//! launched, `DisruptionTerminating` when the command is validated.
//!
//! Every step is a conditional write of one claim after (or, for the taint, before
//! the next) idempotent side effect: a crash anywhere leaves claims that the next poll
//! resumes from. While a command is unvalidated its candidates count as capacity for
//! planning ([`nodewright_core::planning_view::planning_claims`]): their pods still run
//! there, so nothing is launched for them except the command's own replacements.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};

use nodewright_core::disruption::command::Command;
use nodewright_core::disruption::{Decision as Decided, Reason};
use nodewright_core::nodeclaim::{
    ClaimSpec, ClaimState, Disruption, DisruptionCause, DisruptionCommand, NodeClaim,
};

use crate::context::Ports;
use crate::decide::{Decider, decide};
use crate::error::{EngineError, Result};
use crate::gather::Gathered;
use crate::launch::{LaunchLog, LaunchedClaim, Launcher, claim_spec};
use crate::lease::LeaseKeeper;
use crate::ports::{ClusterEvent, Decision, ErrorKind, EventType, NodePatch};
use crate::terminate::{self, Disrupted};
use nodewright_core::well_known::TAINT_DISRUPTED;

/// After the last replacement is Initialized (or the candidates were marked, when
/// there is none), how long before the command is re-checked: Karpenter's 15 s.
pub const VALIDATION_DELAY: Duration = Duration::from_secs(15);
/// The decision log's job name for what the machine does.
const JOB: &str = "disruption";

/// Karpenter's events as a command advances, on each candidate's node: a replacement
/// launched, the wait for it, the candidates' drain.
pub const DISRUPTION_LAUNCHING: &str = "DisruptionLaunching";
pub const DISRUPTION_WAITING_READINESS: &str = "DisruptionWaitingReadiness";
pub const DISRUPTION_TERMINATING: &str = "DisruptionTerminating";

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
    /// The same claims with their NodePool and the command's reason.
    pub disrupted: Vec<Disrupted>,
    /// Replacement claims launched.
    pub launched: Vec<String>,
    /// The same, as launched, with the reason of the command they replace for.
    pub replacements: Vec<(LaunchedClaim, DisruptionCause)>,
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

/// What the machine runs with: the launch path for replacements, and core's
/// decision (as the disruption job decided it) for validation.
pub(crate) struct CommandMachine<'a> {
    pub(crate) launcher: &'a Launcher,
    pub(crate) decider: &'a Decider,
    pub(crate) spot_to_spot: bool,
}

impl CommandMachine<'_> {
    fn ports(&self) -> &Ports {
        self.launcher.ports()
    }

    fn decide(&self, gathered: &Gathered, now: i64, revalidate: &[&DisruptionCommand]) -> Decided {
        decide(self.decider, self.spot_to_spot, gathered, now, revalidate)
    }
}

pub(crate) fn command_in_flight(claims: &[NodeClaim]) -> bool {
    claims
        .iter()
        .any(|c| !c.state.is_terminal() && c.command().is_some())
}

fn cause_of(reason: Reason) -> DisruptionCause {
    match reason {
        Reason::Empty => DisruptionCause::Empty,
        Reason::Drifted => DisruptionCause::Drifted,
        Reason::Underutilized => DisruptionCause::Underutilized,
        Reason::Expired => DisruptionCause::Expired,
    }
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
/// every retry of the same command (the name is recorded in the command before the
/// claim is created). The suffix has 36⁵ values, so at 10,000 claims about one
/// replacement of 5,000 would be given a name a claim already has, and that claim
/// would be read as the replacement: `taken` names are passed over for the next
/// `attempt`.
fn replacement_name(pool: &str, id: &str, index: usize, taken: &dyn Fn(&str) -> bool) -> String {
    (0u64..)
        .map(|attempt| replacement_name_at(pool, id, index, attempt))
        .find(|name| !taken(name))
        .unwrap_or_default()
}

fn replacement_name_at(pool: &str, id: &str, index: usize, attempt: u64) -> String {
    const ALPHABET: &[u8; 36] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let attempt = (attempt > 0).then_some(attempt.to_le_bytes());
    for b in id
        .bytes()
        .chain((index as u64).to_le_bytes())
        .chain(attempt.into_iter().flatten())
    {
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
pub(crate) async fn start_command(
    m: &CommandMachine<'_>,
    gathered: &mut Gathered,
    command: &Command,
    lease: Option<&LeaseKeeper>,
    report: &mut CommandsReport,
) -> Result<Option<StartedCommand>> {
    let now = m.ports().clock.now();
    let mut candidates = Vec::new();
    for node in &command.nodes {
        let claim = gathered.claims.iter().find(|c| {
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
        let Some(pool) = gathered.pools.iter().find(|p| p.name == planned.node_pool) else {
            warn!(nodepool = %planned.node_pool, "replacement for an unusable NodePool; command skipped");
            return Ok(None);
        };
        let taken = |name: &str| {
            gathered.claims.iter().any(|c| c.name == name)
                || replacements.iter().any(|r: &ClaimSpec| r.name == name)
        };
        let name = replacement_name(&pool.name, &id, i, &taken);
        replacements.push(claim_spec(planned, pool, name));
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
    advance_command(m, gathered, &persisted, cause, lease, report).await?;
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

/// Every command found on the claims, advanced one step: first each one's marking and
/// replacements, then one decision that validates every command due now (see
/// [`decide`]). One command's failure never stops the others.
pub(crate) async fn advance_commands(
    m: &CommandMachine<'_>,
    gathered: &mut Gathered,
    lease: Option<&LeaseKeeper>,
) -> Result<CommandsReport> {
    let mut report = CommandsReport::default();
    // By id; a command validated on any candidate is validated (the write reached
    // some candidates before a crash).
    let mut commands: BTreeMap<String, DisruptionCommand> = BTreeMap::new();
    for c in gathered
        .claims
        .iter()
        .filter(|c| c.state.is_being_taken_away())
    {
        if let Some(cmd) = c.command() {
            let entry = commands
                .entry(cmd.id.clone())
                .or_insert_with(|| cmd.clone());
            entry.validated |= cmd.validated;
        }
    }
    let mut due = Vec::new();
    for cmd in commands.into_values() {
        if let Some(lease) = lease {
            lease.keep(m.ports()).await?;
        }
        let step = prepare_command(m, gathered, &cmd, None, lease, &mut report).await;
        match step {
            Ok(Step::Next) => due.push(cmd),
            Ok(Step::Wait) => {}
            Ok(Step::Abandon(why)) => {
                let abandoned = abandon(m, gathered, &cmd, &why, &mut report).await;
                settle(m, gathered, &cmd, abandoned, &mut report).await?;
            }
            Err(e) => settle(m, gathered, &cmd, Err(e), &mut report).await?,
        }
    }
    if due.is_empty() {
        return Ok(report);
    }
    if let Some(lease) = lease {
        lease.keep(m.ports()).await?;
    }
    let now = m.ports().clock.now();
    let decision = m.decide(gathered, now, &due.iter().collect::<Vec<_>>());
    for cmd in &due {
        let concluded = conclude(m, gathered, cmd, &decision, &mut report).await;
        settle(m, gathered, cmd, concluded, &mut report).await?;
    }
    Ok(report)
}

/// What a command's failed step leaves: a lost lease stops the pass, any other error
/// is reported and the command retried next poll (after a conflict, on claims read
/// again).
async fn settle(
    m: &CommandMachine<'_>,
    gathered: &mut Gathered,
    cmd: &DisruptionCommand,
    result: Result<()>,
    report: &mut CommandsReport,
) -> Result<()> {
    match result {
        Ok(()) => Ok(()),
        Err(EngineError::LeaseLost { name, source }) => {
            Err(EngineError::LeaseLost { name, source })
        }
        Err(e) => {
            warn!(command = %cmd.id, error = %e, kind = ?e.kind(), "could not advance the command; next poll");
            report.errors.push((cmd.id.clone(), e.to_string()));
            if e.kind() == Some(ErrorKind::Conflict) {
                gathered.claims = m.ports().claims.list_claims().await?;
            }
            Ok(())
        }
    }
}

/// Where a step of a command leaves it.
enum Step {
    /// Done with this step: go on to the next.
    Next,
    /// Not yet (replacements coming, the validation delay running): the next poll.
    Wait,
    /// The command cannot go on, and why.
    Abandon(String),
}

/// One step of one command just started: mark its candidates, then launch its
/// replacements, and validate it if it is due already.
async fn advance_command(
    m: &CommandMachine<'_>,
    gathered: &mut Gathered,
    cmd: &DisruptionCommand,
    cause: DisruptionCause,
    lease: Option<&LeaseKeeper>,
    report: &mut CommandsReport,
) -> Result<()> {
    match prepare_command(m, gathered, cmd, Some(cause), lease, report).await? {
        Step::Next => {
            let now = m.ports().clock.now();
            let decision = m.decide(gathered, now, &[cmd]);
            conclude(m, gathered, cmd, &decision, report).await
        }
        Step::Abandon(why) => abandon(m, gathered, cmd, &why, report).await,
        Step::Wait => Ok(()),
    }
}

/// A command's steps up to its validation: its candidates marked, its replacements
/// launched and up for the validation delay (`Next`: due for validation). A command
/// validated already finishes telling its candidates (a crash may have stopped half
/// way) and waits for nothing more here. `cause` is given when the command starts
/// (afterwards it is read from the candidates).
async fn prepare_command(
    m: &CommandMachine<'_>,
    gathered: &mut Gathered,
    cmd: &DisruptionCommand,
    cause: Option<DisruptionCause>,
    lease: Option<&LeaseKeeper>,
    report: &mut CommandsReport,
) -> Result<Step> {
    if cmd.validated {
        mark_validated(m.ports(), gathered, cmd).await?;
        return Ok(Step::Wait);
    }
    match mark_candidates(m, gathered, cmd, cause, report).await? {
        Step::Next => replacements_up(m, gathered, cmd, lease, report).await,
        other => Ok(other),
    }
}

/// A command due for validation, judged by `decision` (core asked on its
/// candidates, with any others due in the same poll): validated, or abandoned.
async fn conclude(
    m: &CommandMachine<'_>,
    gathered: &mut Gathered,
    cmd: &DisruptionCommand,
    decision: &Decided,
    report: &mut CommandsReport,
) -> Result<()> {
    match validate(m, gathered, cmd, decision, report).await? {
        Step::Abandon(why) => abandon(m, gathered, cmd, &why, report).await,
        Step::Wait | Step::Next => Ok(()),
    }
}

fn find(gathered: &Gathered, name: &str) -> Option<NodeClaim> {
    gathered.claims.iter().find(|c| c.name == name).cloned()
}

/// Step 1: every candidate marked Disrupting with the command, then cordoned (a crash
/// may have marked only some). `Wait` when the cause cannot be known yet: no candidate
/// carries the command (it was never started here).
async fn mark_candidates(
    m: &CommandMachine<'_>,
    gathered: &mut Gathered,
    cmd: &DisruptionCommand,
    cause: Option<DisruptionCause>,
    report: &mut CommandsReport,
) -> Result<Step> {
    let ports = m.ports();
    let now = ports.clock.now();
    let ours = |c: &NodeClaim| c.command().is_some_and(|x| x.id == cmd.id);
    let cause = cause.or_else(|| {
        cmd.candidates
            .iter()
            .filter_map(|n| find(gathered, n))
            .find(|c| ours(c))
            .and_then(|c| c.disruption.map(|d| d.cause))
    });
    let Some(cause) = cause else {
        return Ok(Step::Wait);
    };
    let shared = Arc::new(cmd.clone());
    for name in &cmd.candidates {
        match find(gathered, name) {
            Some(c) if ours(&c) && c.state == ClaimState::Disrupting => {}
            Some(c) if c.state == ClaimState::Initialized && c.disruption.is_none() => {
                let marked = c.transition(ClaimState::Disrupting, now, |n| {
                    n.disruption = Some(Disruption {
                        cause,
                        deadline: None,
                        since: now,
                        drain_after: None,
                        drain_grace: None,
                        event: None,
                        command: Some(shared.clone()),
                    })
                })?;
                let marked = ports.save_claim(&c, marked).await?;
                // After the write, so the command is never lost with the taint set:
                // the reconciler also re-cordons a held candidate on every poll.
                terminate::cordon(ports, &marked).await?;
                info!(command = %cmd.id, claim = %c.name, node = ?c.node_name, cause = ?cause, "candidate marked");
                gathered.put_claim(marked);
                report.marked.push(c.name.clone());
                report.disrupted.push(Disrupted::new(&c, cause));
            }
            None => return Ok(Step::Abandon(format!("candidate {name} is gone"))),
            Some(c) => {
                return Ok(Step::Abandon(format!(
                    "candidate {name} is {} elsewhere",
                    c.state.as_str()
                )));
            }
        }
    }
    Ok(Step::Next)
}

/// Step 2: each replacement created and launched if missing; `Next` once every one
/// is Initialized and the validation delay has passed since the last of them (or since
/// the candidates were marked, when there is none).
async fn replacements_up(
    m: &CommandMachine<'_>,
    gathered: &mut Gathered,
    cmd: &DisruptionCommand,
    lease: Option<&LeaseKeeper>,
    report: &mut CommandsReport,
) -> Result<Step> {
    let ports = m.ports();
    let now = ports.clock.now();
    let since = cmd
        .candidates
        .iter()
        .filter_map(|n| find(gathered, n))
        .filter_map(|c| c.disruption.map(|d| d.since))
        .max()
        .unwrap_or(now);
    let mut ready_at = since;
    let mut all_up = true;
    for spec in &cmd.replacements {
        if let Some(lease) = lease {
            lease.keep(ports).await?;
        }
        let claim = match find(gathered, &spec.name) {
            Some(c) => c,
            None => match ports.claims.get_claim(&spec.name).await? {
                Some(c) => c,
                None => {
                    let Some(pool) = gathered
                        .pools
                        .iter()
                        .find(|x| x.name == spec.node_pool)
                        .cloned()
                    else {
                        return Ok(Step::Abandon(format!(
                            "NodePool {:?} of replacement {} cannot be used",
                            spec.node_pool, spec.name
                        )));
                    };
                    let claim = m.launcher.new_claim(spec.clone(), &pool, gathered, now);
                    match ports.claims.create_claim(&claim).await {
                        Ok(()) => {}
                        Err(e) if e.kind == ErrorKind::Conflict => {}
                        Err(e) => return Err(e.into()),
                    }
                    gathered.claims.push(claim.clone());
                    let mut launches = LaunchLog::default();
                    m.launcher
                        .launch_and_record(claim, &pool, gathered, &mut launches)
                        .await?;
                    for launched in &launches.launched {
                        tell_candidates(
                            ports,
                            gathered,
                            cmd,
                            DISRUPTION_LAUNCHING,
                            &format!(
                                "Launching NodeClaim {} ({}, {}): {}",
                                launched.name,
                                launched.instance_type,
                                launched.zone,
                                reason_of(gathered, cmd)
                            ),
                        )
                        .await;
                        tell_candidates(
                            ports,
                            gathered,
                            cmd,
                            DISRUPTION_WAITING_READINESS,
                            &format!(
                                "Waiting on readiness of NodeClaim {} to continue disruption",
                                launched.name
                            ),
                        )
                        .await;
                    }
                    if let Some(cause) = cause_of_command(gathered, cmd) {
                        report
                            .replacements
                            .extend(launches.launched.iter().map(|l| (l.clone(), cause)));
                    }
                    report
                        .launched
                        .extend(launches.launched.into_iter().map(|l| l.name));
                    match find(gathered, &spec.name) {
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
                return Ok(Step::Abandon(format!(
                    "replacement {} failed to launch: {}",
                    claim.name,
                    claim.failure.as_deref().unwrap_or("unknown")
                )));
            }
            s if s.is_terminal() || s.is_being_taken_away() => {
                return Ok(Step::Abandon(format!(
                    "replacement {} is {}",
                    claim.name,
                    s.as_str()
                )));
            }
            // Launching (the provisioner's poll relaunches it with the same token),
            // Launched, Registered: coming.
            _ => all_up = false,
        }
    }
    if !all_up || now < ready_at + validation_delay_secs() {
        report.waiting.push(cmd.id.clone());
        return Ok(Step::Wait);
    }
    Ok(Step::Next)
}

fn validation_delay_secs() -> i64 {
    i64::try_from(VALIDATION_DELAY.as_secs()).unwrap_or(15)
}

/// Why a command was validated, for the decision log: the delay runs from its
/// replacements' readiness, or from the marking of its candidates when it has none.
fn validated_reason(delay_secs: i64, has_replacements: bool) -> String {
    if has_replacements {
        format!("still holds {delay_secs}s after its replacements were up")
    } else {
        format!("still holds {delay_secs}s after its nodes were marked (no replacement)")
    }
}

/// Step 3: core asked again on the state of now, on the command's own candidates
/// (`decision`); every candidate still chosen → validated (the candidates drain from
/// the next step on), recorded in the decision log.
async fn validate(
    m: &CommandMachine<'_>,
    gathered: &mut Gathered,
    cmd: &DisruptionCommand,
    decision: &Decided,
    report: &mut CommandsReport,
) -> Result<Step> {
    let ports = m.ports();
    let now = ports.clock.now();
    let chosen: HashSet<&str> = decision
        .commands
        .iter()
        .flat_map(|c| c.nodes.iter().map(String::as_str))
        .collect();
    for name in &cmd.candidates {
        let node = find(gathered, name).and_then(|c| c.node_name);
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
            return Ok(Step::Abandon(why));
        }
    }
    mark_validated(ports, gathered, cmd).await?;
    info!(command = %cmd.id, candidates = ?cmd.candidates, "command validated; draining");
    let message = format!("Disrupting Node: {}", reason_of(gathered, cmd));
    tell_candidates(ports, gathered, cmd, DISRUPTION_TERMINATING, &message).await;
    ports
        .record_decision(Decision {
            at: now,
            job: JOB.into(),
            action: format!(
                "validated command {}: draining {}",
                cmd.id,
                cmd.candidates.join(", ")
            ),
            reason: validated_reason(validation_delay_secs(), !cmd.replacements.is_empty()),
            price_per_hour: None,
        })
        .await;
    report.validated.push(cmd.id.clone());
    Ok(Step::Next)
}

/// The command's disruption reason as Karpenter titles it ("Underutilized",
/// "Drifted"...), read from its candidates.
fn reason_of(gathered: &Gathered, cmd: &DisruptionCommand) -> String {
    cause_of_command(gathered, cmd)
        .map(|c| format!("{c:?}"))
        .unwrap_or_else(|| "Disrupted".into())
}

fn cause_of_command(gathered: &Gathered, cmd: &DisruptionCommand) -> Option<DisruptionCause> {
    cmd.candidates
        .iter()
        .filter_map(|n| find(gathered, n))
        .find_map(|c| c.disruption.map(|d| d.cause))
}

/// A Normal event on every candidate's node (best effort). Each is posted once per
/// step of the command: the steps that post them happen once.
async fn tell_candidates(
    ports: &Ports,
    gathered: &Gathered,
    cmd: &DisruptionCommand,
    reason: &str,
    message: &str,
) {
    for name in &cmd.candidates {
        let Some(node) = find(gathered, name).and_then(|c| c.node_name) else {
            continue;
        };
        ports
            .emit(ClusterEvent {
                kind: "Node".into(),
                namespace: None,
                name: node,
                event_type: EventType::Normal,
                reason: reason.into(),
                message: message.to_string(),
            })
            .await;
    }
}

/// Every candidate still held by `cmd` is told the command is validated: the
/// reconciler drains it from the next step on, within its NodePool's
/// terminationGracePeriod.
async fn mark_validated(
    ports: &Ports,
    gathered: &mut Gathered,
    cmd: &DisruptionCommand,
) -> Result<()> {
    let now = ports.clock.now();
    for name in &cmd.candidates {
        let Some(c) = gathered.claims.iter().find(|c| &c.name == name).cloned() else {
            continue;
        };
        if !(c.held_by_unvalidated_command() && c.command().is_some_and(|x| x.id == cmd.id)) {
            continue;
        }
        // The drain starts now: the NodePool's terminationGracePeriod bounds it (pods a
        // PDB still protects are deleted from `deadline − their grace` on).
        let grace = gathered
            .pools
            .iter()
            .find(|p| p.name == c.node_pool)
            .and_then(|p| p.termination_grace_period)
            .map(|d| now.saturating_add(i64::try_from(d.as_secs()).unwrap_or(i64::MAX)));
        let next = c.amend(now, |n| {
            if let Some(d) = n.disruption.as_mut() {
                d.deadline = d.deadline.or(grace);
                if let Some(x) = d.command.as_mut() {
                    Arc::make_mut(x).validated = true;
                }
            }
        })?;
        gathered.put_claim(ports.save_claim(&c, next).await?);
    }
    Ok(())
}

/// Gives the command up: every candidate still held by it is untainted and goes back
/// to Initialized. The taint goes first: a crash after it leaves the claim held, and
/// the next poll abandons again; the other order could leave a node cordoned forever.
async fn abandon(
    m: &CommandMachine<'_>,
    gathered: &mut Gathered,
    cmd: &DisruptionCommand,
    why: &str,
    report: &mut CommandsReport,
) -> Result<()> {
    let ports = m.ports().clone();
    let now = ports.clock.now();
    warn!(command = %cmd.id, reason = %why, "abandoning disruption command");
    for name in &cmd.candidates {
        let Some(c) = gathered.claims.iter().find(|c| &c.name == name).cloned() else {
            continue;
        };
        if !(c.held_by_unvalidated_command() && c.command().is_some_and(|x| x.id == cmd.id)) {
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
        gathered.put_claim(ports.save_claim(&c, next).await?);
    }
    ports
        .record_decision(Decision {
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

#[cfg(test)]
mod tests {
    use super::{replacement_name, replacement_name_at, validated_reason};

    #[test]
    fn a_replacement_never_takes_the_name_of_a_claim_that_exists() {
        let free = replacement_name("default", "0123456789abcdef", 0, &|_| false);
        assert_eq!(
            free,
            replacement_name_at("default", "0123456789abcdef", 0, 0)
        );
        assert!(free.starts_with("default-") && free.len() == "default-".len() + 5);
        // The first choice belongs to a claim (of the provisioner's, or an earlier
        // command's): the next one is taken, the same on every retry.
        let taken = |name: &str| name == free;
        let other = replacement_name("default", "0123456789abcdef", 0, &taken);
        assert_ne!(other, free);
        assert_eq!(
            other,
            replacement_name("default", "0123456789abcdef", 0, &taken)
        );
    }

    #[test]
    fn a_command_without_replacements_is_not_said_to_wait_for_them() {
        assert_eq!(
            validated_reason(15, false),
            "still holds 15s after its nodes were marked (no replacement)"
        );
        assert_eq!(
            validated_reason(15, true),
            "still holds 15s after its replacements were up"
        );
    }
}
