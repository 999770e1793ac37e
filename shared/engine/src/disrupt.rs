//! The disruption job, once per scheduled run: take the `disruption` lease, gather,
//! advance the commands in flight one step, and — only when none is left in flight —
//! ask core which nodes expiration, drift, emptiness and consolidation disrupt now,
//! record every command and every new rejection in the decision log, and start the
//! commands. The run then exits; the command machine ([`crate::command`]) carries each
//! command on from the provisioner's polls.

use std::collections::HashSet;
use std::time::Duration;

use tracing::{info, warn};

use nodewright_core::disruption::command::{Move, PriceBeforeAfter};
use nodewright_core::disruption::{Decision, RejectCode, RejectedNode};

use crate::command::{CommandMachine, advance_commands, command_in_flight, start_command};
use crate::context::Ports;
use crate::decide::{Decider, Remembered, decide_remembering, default_decider};
use crate::error::Result;
use crate::gather::{Gathered, Unresolved, gather};
use crate::launch::{LaunchConfig, Launcher};
use crate::lease::{Acquired, LeaseKeeper};
use crate::ports::{ClusterEvent, Decision as DecisionRecord, EventType, ObjectKind};

pub use crate::command::{CommandsReport, StartedCommand, VALIDATION_DELAY};

/// The lease every disruption invocation competes for.
pub const LEASE_NAME: &str = "disruption";
const JOB: &str = "disruption";

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
    /// Karpenter's `MIN_VALUES_POLICY` (`NODEWRIGHT_MIN_VALUES_POLICY`): replacements
    /// are planned as the provisioner plans.
    pub min_values_policy: nodewright_core::scheduling::requirements::MinValuesPolicy,
    /// The cluster's default topology spread constraints (`NODEWRIGHT_SCHEDULER_CONFIG`),
    /// as the provisioner reads them.
    pub scheduler_config: nodewright_core::default_spread::SchedulerConfig,
    /// How many kept nodes whose rejection is new or changed are told (an event on the
    /// node, a decision in the log) per run; the rest are told in the next runs. A
    /// cold start at 1,000 nodes has 1,000 to tell: one event request each, at the
    /// client's 20 a second, took the run past its 60 s timeout, and a timed-out
    /// Lambda starts cold again and would begin them all again.
    pub rejections_told_per_run: usize,
}

/// [`DisruptionConfig::rejections_told_per_run`] by default: 5 s of event requests at
/// the client's pace, and as many decision writes.
pub const REJECTIONS_TOLD_PER_RUN: usize = 100;

impl DisruptionConfig {
    pub fn new(cluster_name: impl Into<String>, holder: impl Into<String>) -> Self {
        Self {
            cluster_name: cluster_name.into(),
            holder: holder.into(),
            dry_run: false,
            spot_to_spot: false,
            lease_ttl: Duration::from_secs(15),
            min_values_policy: Default::default(),
            scheduler_config: Default::default(),
            rejections_told_per_run: REJECTIONS_TOLD_PER_RUN,
        }
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

/// The disruption job over the ports; replacements go through the launch path.
pub struct Disrupter {
    launcher: Launcher,
    config: DisruptionConfig,
    decider: Decider,
    /// The rejection last recorded per node (code and reason), for as long as the warm
    /// Lambda lives: a node kept for the same reason minute after minute is recorded
    /// once, not 1,440 times a day (a DynamoDB write each).
    recorded: std::sync::Mutex<std::collections::HashMap<String, String>>,
    /// The budget message last posted per NodePool (`DisruptionBlocked`), the same way.
    pools_blocked: std::sync::Mutex<std::collections::HashMap<String, String>>,
    /// The invalid `karpenter.sh/do-not-disrupt` value last warned about per pod, the
    /// same way.
    invalid_annotations: std::sync::Mutex<std::collections::HashMap<String, String>>,
    /// The last decision that started nothing and what it was made on: a run whose
    /// view is the same is answered with it instead of searching the cluster again.
    remembered: Remembered,
}

/// How many pod names a decision record lists per destination.
const MOVES_LISTED: usize = 10;

/// Where a command counted room for the pods it moves to nodes that stay:
/// `; default/a, default/b to ip-10-0-1-5.ec2.internal` per destination (the pods going
/// to its replacements are the replacements' own). What to compare with where
/// kube-scheduler binds their replacements.
fn moves_text(moves: &[Move]) -> String {
    moves
        .iter()
        .map(|m| {
            let mut pods = m
                .pods
                .iter()
                .take(MOVES_LISTED)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ");
            if m.pods.len() > MOVES_LISTED {
                pods.push_str(&format!(" (and {} more)", m.pods.len() - MOVES_LISTED));
            }
            format!("; {pods} to {}", m.target)
        })
        .collect()
}

/// Karpenter's reasons for a node the disruption job keeps: blocked (the node or its
/// pods forbid it, or the NodePool's budget is used up) or not worth consolidating.
pub const DISRUPTION_BLOCKED: &str = "DisruptionBlocked";
pub const UNCONSOLIDATABLE: &str = "Unconsolidatable";
/// Karpenter's reason for a pod whose `karpenter.sh/do-not-disrupt` is ignored.
pub const INVALID_DO_NOT_DISRUPT: &str = "InvalidDoNotDisruptAnnotation";

/// The event reason a rejection is published under (Karpenter's split: what forbids
/// disrupting the node is `DisruptionBlocked`; what makes consolidating it pointless
/// or premature is `Unconsolidatable`).
pub fn rejection_reason(code: RejectCode) -> &'static str {
    match code {
        RejectCode::DoNotDisrupt
        | RejectCode::PodDisruptionBudget
        | RejectCode::DisruptionBudget
        | RejectCode::NotReady
        | RejectCode::ZonalShift => DISRUPTION_BLOCKED,
        RejectCode::ConsolidateAfter
        | RejectCode::ConsolidationPolicy
        | RejectCode::PodsDoNotFit
        | RejectCode::NotCheaper
        | RejectCode::SpotToSpot
        | RejectCode::Balanced
        | RejectCode::CapacityBuffer => UNCONSOLIDATABLE,
    }
}

impl Disrupter {
    pub fn new(ports: Ports, config: DisruptionConfig) -> Self {
        Self {
            launcher: Launcher::new(ports, LaunchConfig::new(config.holder.clone())),
            decider: default_decider(),
            config,
            recorded: Default::default(),
            pools_blocked: Default::default(),
            invalid_annotations: Default::default(),
            remembered: Default::default(),
        }
    }

    pub fn config(&self) -> &DisruptionConfig {
        &self.config
    }

    pub fn with_decider(mut self, decider: Decider) -> Self {
        self.decider = decider;
        self
    }

    fn ports(&self) -> &Ports {
        self.launcher.ports()
    }

    fn commands(&self) -> CommandMachine<'_> {
        CommandMachine {
            launcher: &self.launcher,
            decider: &self.decider,
            spot_to_spot: self.config.spot_to_spot,
        }
    }

    fn decide(&self, gathered: &Gathered, now: i64) -> Decision {
        decide_remembering(
            &self.decider,
            self.config.spot_to_spot,
            gathered,
            now,
            &[],
            Some(&self.remembered),
        )
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
        let now = self.ports().clock.now();
        let mut gathered = gather(self.ports(), now, Unresolved::Skip, false).await?;
        gathered.pricing.min_values_policy = self.config.min_values_policy;
        crate::gather::apply_default_spread(&mut gathered, &self.config.scheduler_config);
        let commands = self.commands();
        let mut report = DisruptionReport {
            progress: advance_commands(&commands, &mut gathered, Some(lease)).await?,
            ..DisruptionReport::default()
        };
        if command_in_flight(&gathered.claims) {
            info!("a disruption command is in flight; deciding on the next run");
            return Ok(report);
        }
        if report.progress.changed_cluster() {
            gathered.state = self.ports().cluster.state().await?;
        }
        let decision = self.decide(&gathered, now);
        report.decided = true;
        self.record(&decision, &gathered, now, false).await;
        for command in &decision.commands {
            lease.keep(self.ports()).await?;
            match start_command(
                &commands,
                &mut gathered,
                command,
                Some(lease),
                &mut report.progress,
            )
            .await
            {
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
        let mut gathered = gather(self.ports(), now, Unresolved::Skip, false).await?;
        gathered.pricing.min_values_policy = self.config.min_values_policy;
        crate::gather::apply_default_spread(&mut gathered, &self.config.scheduler_config);
        let decision = self.decide(&gathered, now);
        self.record(&decision, &gathered, now, true).await;
        Ok(DisruptionReport {
            dry_run: true,
            decided: true,
            rejected: decision.rejected,
            price_per_hour: decision.price_per_hour,
            ..DisruptionReport::default()
        })
    }

    /// Every command, and every rejection that is new or changed since this warm
    /// Lambda last recorded the node's, in the decision log — and, outside a dry run,
    /// as an event on the node (`DisruptionBlocked` or `Unconsolidatable`), and on the
    /// NodePool when its budget is what blocks (`DisruptionBlocked`). A node kept for
    /// the same reason minute after minute gets one event, not one a minute.
    async fn record(&self, decision: &Decision, gathered: &Gathered, now: i64, dry_run: bool) {
        let suffix = if dry_run { " [dry run]" } else { "" };
        for problem in &decision.problems {
            warn!(problem = %problem, "a managed node could not be considered for disruption");
        }
        for c in &decision.commands {
            info!(method = ?c.method, reason = ?c.reason, nodes = ?c.nodes, drifted = %c.drift_summary(),
                replacements = c.replacements.len(), savings_per_hour = c.savings_per_hour, dry_run,
                "disruption decided");
            for s in &c.scores {
                info!(node_pool = %s.node_pool, score = s.score, threshold = s.threshold, k = s.k,
                    savings_fraction = s.savings_fraction, disruption_fraction = s.disruption_fraction,
                    "consolidation score");
            }
            self.ports()
                .record_decision(DecisionRecord {
                    at: now,
                    job: JOB.into(),
                    action: format!(
                        "disrupt {} ({:?}, {:?}{}), {} replacement(s){}{suffix}",
                        c.nodes.join(", "),
                        c.method,
                        c.reason,
                        match c.drift_summary() {
                            why if why.is_empty() => why,
                            why => format!(": {why}"),
                        },
                        c.replacements.len(),
                        moves_text(&c.moves)
                    ),
                    reason: format!(
                        "{:.4}/h → {:.4}/h, saves {:.4}/h{}",
                        c.price_per_hour_before,
                        c.price_per_hour_after,
                        c.savings_per_hour,
                        c.scores
                            .iter()
                            .map(|s| format!("; {}", s.sentence()))
                            .collect::<String>()
                    ),
                    price_per_hour: Some(c.price_per_hour_after),
                })
                .await;
        }
        let fresh: Vec<&RejectedNode> = {
            let mut recorded = self.recorded.lock().unwrap_or_else(|e| e.into_inner());
            let mut fresh = Vec::new();
            let mut left = 0usize;
            for r in &decision.rejected {
                let key = format!("{:?}: {}", r.code, r.reason);
                if recorded.get(&r.node) == Some(&key) {
                    continue;
                }
                if fresh.len() == self.config.rejections_told_per_run {
                    // Not remembered as told: still news on the next run.
                    left += 1;
                    continue;
                }
                recorded.insert(r.node.clone(), key);
                fresh.push(r);
            }
            if left > 0 {
                info!(
                    told = fresh.len(),
                    left, "kept nodes told this run; the rest on the next runs"
                );
            }
            // Nodes gone or now in a command: a later rejection is news again.
            let kept: HashSet<&str> = decision.rejected.iter().map(|r| r.node.as_str()).collect();
            recorded.retain(|n, _| kept.contains(n.as_str()));
            fresh
        };
        for r in &decision.rejected {
            tracing::debug!(node = %r.node, code = ?r.code, reason = %r.reason, "kept");
        }
        if !dry_run {
            self.post_rejections(&fresh, &decision.rejected, gathered)
                .await;
            self.warn_invalid_do_not_disrupt(gathered).await;
        }
        for r in fresh {
            self.ports()
                .record_decision(DecisionRecord {
                    at: now,
                    job: JOB.into(),
                    action: format!("keep {} ({:?}){suffix}", r.node, r.code),
                    reason: r.reason.clone(),
                    price_per_hour: None,
                })
                .await;
        }
    }

    /// A warning event on each running pod whose `karpenter.sh/do-not-disrupt` is
    /// neither `"true"` nor a positive duration (Karpenter's
    /// `InvalidDoNotDisruptAnnotation`): the annotation is ignored, and its owner should
    /// know. Once per pod and value for as long as the warm Lambda lives.
    async fn warn_invalid_do_not_disrupt(&self, gathered: &Gathered) {
        let news: Vec<(String, String, String)> = {
            let mut warned = self
                .invalid_annotations
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let mut news = Vec::new();
            let mut seen = HashSet::new();
            for pod in &gathered.state.pods {
                let Some((value, why)) = &pod.do_not_disrupt_invalid else {
                    continue;
                };
                // Remembered while the pod has the value, bound or not (an evicted
                // pod waiting for its next node is not news again once it lands).
                let key = pod.key();
                seen.insert(key.clone());
                if pod.node_name.is_none() || pod.terminal {
                    continue;
                }
                if warned.insert(key, value.clone()).as_ref() != Some(value) {
                    news.push((pod.namespace.clone(), pod.name.clone(), why.clone()));
                }
            }
            warned.retain(|k, _| seen.contains(k));
            news
        };
        for (namespace, name, why) in news {
            warn!(pod = %format!("{namespace}/{name}"), problem = %why, "karpenter.sh/do-not-disrupt ignored");
            self.ports()
                .emit(ClusterEvent {
                    kind: "Pod".into(),
                    namespace: Some(namespace),
                    name,
                    event_type: EventType::Warning,
                    reason: INVALID_DO_NOT_DISRUPT.into(),
                    message: format!(
                        "Invalid karpenter.sh/do-not-disrupt annotation: {why}, ignoring annotation"
                    ),
                })
                .await;
        }
    }

    /// The events for rejections new or changed this run; a NodePool's budget event
    /// when its message is new or changed (a pool no longer blocked is forgotten, so
    /// blocking again is news).
    async fn post_rejections(
        &self,
        fresh: &[&RejectedNode],
        all: &[RejectedNode],
        gathered: &Gathered,
    ) {
        for r in fresh {
            let event = ClusterEvent {
                kind: "Node".into(),
                namespace: None,
                name: r.node.clone(),
                event_type: EventType::Normal,
                reason: rejection_reason(r.code).into(),
                message: r.reason.clone(),
            };
            self.ports().emit(event).await;
        }
        let mut budgets: Vec<(String, String)> = Vec::new();
        for r in all
            .iter()
            .filter(|r| r.code == RejectCode::DisruptionBudget)
        {
            let pool = gathered
                .claims
                .iter()
                .find(|c| c.node_name.as_deref() == Some(r.node.as_str()))
                .map(|c| c.node_pool.clone());
            if let Some(pool) = pool
                && !budgets.iter().any(|(p, _)| *p == pool)
            {
                budgets.push((pool, r.reason.clone()));
            }
        }
        let news: Vec<(String, String)> = {
            let mut posted = self.pools_blocked.lock().unwrap_or_else(|e| e.into_inner());
            posted.retain(|pool, _| budgets.iter().any(|(p, _)| p == pool));
            budgets
                .into_iter()
                .filter(|(pool, message)| {
                    posted.insert(pool.clone(), message.clone()).as_ref() != Some(message)
                })
                .collect()
        };
        for (pool, message) in news {
            self.ports()
                .emit(ClusterEvent::about_object(
                    ObjectKind::NodePool,
                    &pool,
                    EventType::Normal,
                    DISRUPTION_BLOCKED,
                    message,
                ))
                .await;
        }
    }
}
