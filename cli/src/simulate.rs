//! `nodewright simulate [SCENARIO.yaml]`: the whole autoscaler on a virtual clock. The
//! provisioner and interruption jobs run as their Lambdas run them, against a
//! simulated EKS cluster and EC2 (`nodewright_sim`); a scenario says what
//! happens to them. Prints a timeline and a summary (or JSON), optionally an SVG chart.
//!
//! Exit codes: 0 the run finished with every end-state invariant held; 1 it finished
//! but one broke (pods lost, a PodDisruptionBudget violated, instances ≠ live claims),
//! each printed on stderr; 2 the scenario could not be read (one line naming the file
//! and the field).

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use clap::ValueEnum;
use nodewright_core::api::duration::parse_duration;
use nodewright_core::nodeclaim::DisruptionCause;
use nodewright_engine::DisruptionConfig;
use nodewright_engine::ports::ObjectKind;
use nodewright_sim::report::{DrainRecord, TimelineRow, clock_time, is_interruption};
use nodewright_sim::{NodeRecord, Report, Scenario};
use serde_json::{Value, json};

use crate::failure::Failure;
use crate::from_cluster::ClusterSource;
use crate::{chart, observed, scenario};

#[derive(clap::Args)]
#[command(group = clap::ArgGroup::new("start").args(["cluster", "kubeconfig"]))]
pub struct SimulateArgs {
    /// A scenario file (YAML); without one, the bundled scenario runs. With
    /// `--cluster` or `--kubeconfig`, only its events, faults and settings are taken.
    pub scenario: Option<PathBuf>,
    /// Start from this cluster instead of a scenario: the output of `kubectl get
    /// nodes,pods,deployments,replicasets,statefulsets,daemonsets,poddisruptionbudgets
    /// -A -o json`. Its nodes run on (those Karpenter launched for a NodePool of
    /// `--nodepools` adopted by nodewright, the others left alone), its pods stay
    /// where they are, and their ReplicaSets and StatefulSets hold their replicas.
    /// A day unless `--until` says.
    #[arg(long, requires = "nodepools")]
    pub cluster: Option<PathBuf>,
    /// Start from the cluster of this kubeconfig as it is now: the objects `--cluster`
    /// takes from a file, listed once (both runs of `--compare` start from the same
    /// read) with the kubeconfig's identity, which needs only `list` on them. Nothing
    /// is written to the cluster. Needs the `stack` feature.
    #[arg(long, requires = "nodepools", conflicts_with = "cluster")]
    pub kubeconfig: Option<PathBuf>,
    /// With `--cluster` or `--kubeconfig`: the NodePools, EC2NodeClasses, NodeOverlays
    /// and CapacityBuffers to run the cluster under (repeatable).
    #[arg(long = "nodepools", requires = "start")]
    pub nodepools: Vec<PathBuf>,
    /// With `--cluster` or `--kubeconfig`: run the same start and the same day again
    /// under these NodePools (and the rest) instead, and print both side by side
    /// (repeatable). `--output json` prints `{"runs": [A, B]}`, each run as a plain
    /// run prints it.
    #[arg(long, requires = "start", conflicts_with = "save")]
    pub compare: Vec<PathBuf>,
    /// With `--cluster` or `--kubeconfig`: spot interruptions a month (730 hours) per
    /// 100 running spot instances, each warned at random at that rate. The default,
    /// 5, is the Spot Instance Advisor's lowest "frequency of interruption" bucket
    /// ("<5%"), where most instance types sit; 0 turns it off.
    #[arg(long, requires = "start", value_parser = percent_a_month)]
    pub spot_interruptions: Option<f64>,
    /// Virtual time to simulate (overrides the scenario's `duration`), e.g. 2h, 90m.
    #[arg(long, alias = "duration", value_parser = duration)]
    pub until: Option<Duration>,
    /// Seed of every random choice (overrides the scenario's `seed`).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Writes an SVG chart of nodes, pending pods and $/h over time (with `--compare`:
    /// both runs' nodes and $/h, a line each).
    #[arg(long)]
    pub chart: Option<PathBuf>,
    /// table, json or yaml.
    #[arg(long, short = 'o', value_enum, default_value = "table")]
    pub output: Format,
    #[command(flatten)]
    pub strict: crate::manifests::StrictArgs,
    /// Writes the end state as JSON (claims, decision log, the cluster as core sees it,
    /// the dead-letter queue's depth), for `status --from` and `explain --from`.
    #[arg(long)]
    pub save: Option<PathBuf>,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Format {
    Table,
    Json,
    Yaml,
}

/// `--spot-interruptions`: per 100 instances a month, as a rate per instance.
fn percent_a_month(text: &str) -> Result<f64, String> {
    let value: f64 = text
        .trim_end_matches('%')
        .parse()
        .map_err(|_| format!("{text:?} is not a percentage like 5 or 12.5"))?;
    if !(value.is_finite() && value >= 0.0) {
        return Err(format!(
            "{text:?} is not a number of interruptions per 100 instances a month (0 or more)"
        ));
    }
    Ok(value / 100.0)
}

fn duration(text: &str) -> Result<Duration, String> {
    parse_duration(text).ok_or_else(|| format!("{text:?} is not a duration like 2h, 90m or 1h30m"))
}

/// What the disruption function did, in one sentence.
fn consolidation(s: &nodewright_sim::report::Summary) -> String {
    if s.disruption_invocations == 0 {
        return "not simulated (the scenario turns the disruption function off)".into();
    }
    if s.disruption_commands == 0 {
        return format!(
            "nothing to remove: {} disruption invocation(s) found no command that held",
            s.disruption_invocations
        );
    }
    format!(
        "{} node(s) removed by {} command(s) ({} replacement(s) launched), saving ${}/h (${:.2}/month)",
        s.nodes_disrupted,
        s.disruption_commands,
        s.replacements_launched,
        crate::output::dollars(s.savings_per_hour),
        s.savings_per_hour * 730.0
    )
}

pub fn run(args: &SimulateArgs) -> Result<(), Failure> {
    let cluster = match (&args.cluster, &args.kubeconfig) {
        (Some(file), _) => Some(ClusterSource::File(file.clone())),
        (None, Some(kubeconfig)) => {
            let (kubeconfig, list) = crate::stack::cluster_list(Some(kubeconfig.as_path()))?;
            Some(ClusterSource::Listed { kubeconfig, list })
        }
        (None, None) => None,
    };
    let mut scenario = match &cluster {
        Some(cluster) => from_cluster(args, cluster, &args.nodepools)?,
        None => scenario::load_with(args.scenario.as_deref(), args.strict.strictness())
            .map_err(Failure::from)?,
    };
    if let Some(until) = args.until {
        scenario.duration = until;
    }
    if let Some(seed) = args.seed {
        scenario.seed = seed;
    }
    if let (Some(cluster), false) = (&cluster, args.compare.is_empty()) {
        let other = from_cluster(args, cluster, &args.compare)?;
        return compare(args, &scenario, &other);
    }
    let wall = Instant::now();
    let report = simulate(&scenario)?;
    let elapsed = wall.elapsed();
    if let Some(path) = &args.chart {
        chart::write(path, &report).map_err(|e| {
            Failure::Unusable(format!("{}: cannot write the chart: {e}", path.display()))
        })?;
    }
    if let Some(path) = &args.save {
        let saved = save(&scenario, &report);
        let text = serde_json::to_string_pretty(&saved)
            .map_err(|e| Failure::Unusable(format!("cannot encode the end state: {e}")))?;
        std::fs::write(path, text + "\n").map_err(|e| {
            Failure::Unusable(format!(
                "{}: cannot write the end state: {e}",
                path.display()
            ))
        })?;
    }
    match args.output {
        // Through serde_json's Value: numbers rounded for people (`crate::output`).
        Format::Json | Format::Yaml => {
            let doc: Value = serde_json::from_str(&render_json(&report))
                .map_err(|e| Failure::Unusable(format!("cannot encode the report: {e}")))?;
            match args.output {
                Format::Yaml => crate::output::write_yaml(&doc)?,
                _ => crate::output::write_json(&doc)?,
            }
        }
        Format::Table => print!("{}", render_table(&report, elapsed)),
    }
    if report.problems.is_empty() {
        Ok(())
    } else {
        Err(Failure::Invalid(
            report
                .problems
                .iter()
                .map(|p| format!("nodewright simulate: invariant broken: {p}"))
                .collect(),
        ))
    }
}

/// A run from `cluster` under the manifests of `nodepools`, with the scenario file's
/// events and settings if one was given.
fn from_cluster(
    args: &SimulateArgs,
    cluster: &ClusterSource,
    nodepools: &[PathBuf],
) -> Result<Scenario, Failure> {
    let overlay = args
        .scenario
        .as_deref()
        .map(scenario::overlay)
        .transpose()
        .map_err(Failure::from)?;
    let (mut scenario, autoscalers) =
        crate::from_cluster::scenario(cluster, nodepools, args.strict)?;
    if let Some(overlay) = overlay {
        overlay.apply(&mut scenario).map_err(Failure::from)?;
    }
    if let Some(until) = args.until {
        scenario.duration = until;
    }
    if let Some(seed) = args.seed {
        scenario.seed = seed;
    }
    if let Some(rate) = args.spot_interruptions {
        scenario.spot_interruption_rate = rate;
    }
    crate::from_cluster::follow_autoscalers(&mut scenario, &autoscalers);
    Ok(scenario)
}

/// `--compare`: both configurations from the same start, printed side by side; exit 1
/// if either broke an invariant.
fn compare(args: &SimulateArgs, scenario: &Scenario, other: &Scenario) -> Result<(), Failure> {
    let names = [files_named(&args.nodepools), files_named(&args.compare)];
    let reports = [simulate(scenario)?, simulate(other)?];
    let runs = [
        (names[0].as_str(), &reports[0]),
        (names[1].as_str(), &reports[1]),
    ];
    if let Some(path) = &args.chart {
        chart::write_compare(path, &runs).map_err(|e| {
            Failure::Unusable(format!("{}: cannot write the chart: {e}", path.display()))
        })?;
    }
    match args.output {
        Format::Json | Format::Yaml => {
            let mut runs = Vec::new();
            for report in &reports {
                runs.push(
                    serde_json::from_str::<Value>(&render_json(report))
                        .map_err(|e| Failure::Unusable(format!("cannot encode the report: {e}")))?,
                );
            }
            let doc = json!({ "runs": runs });
            match args.output {
                Format::Yaml => crate::output::write_yaml(&doc)?,
                _ => crate::output::write_json(&doc)?,
            }
        }
        Format::Table => print!("{}", crate::compare::render(&runs)),
    }
    let problems: Vec<String> = names
        .iter()
        .zip(&reports)
        .flat_map(|(name, report)| {
            report
                .problems
                .iter()
                .map(move |p| format!("nodewright simulate: {name}: invariant broken: {p}"))
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(Failure::Invalid(problems))
    }
}

/// A run's name: its manifests' file names.
fn files_named(files: &[PathBuf]) -> String {
    files
        .iter()
        .map(|f| {
            f.file_name().map_or_else(
                || f.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            )
        })
        .collect::<Vec<_>>()
        .join(" + ")
}

/// Runs the scenario on a current-thread runtime started paused: virtual time, in time
/// order, as fast as the machine goes. A progress bar goes to stderr once a run has
/// taken a second, if stderr is a terminal.
fn simulate(scenario: &Scenario) -> Result<Report, Failure> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(|e| Failure::Unusable(format!("cannot start the runtime: {e}")))?;
    let started = Instant::now();
    let bar: Mutex<Option<indicatif::ProgressBar>> = Mutex::new(None);
    let show = std::io::stderr().is_terminal();
    let progress = |elapsed: i64, total: i64| {
        if !show || started.elapsed() < Duration::from_secs(1) {
            return;
        }
        let mut bar = bar.lock().unwrap_or_else(|e| e.into_inner());
        let bar = bar.get_or_insert_with(|| {
            let b = indicatif::ProgressBar::with_draw_target(
                Some(total.max(1) as u64),
                indicatif::ProgressDrawTarget::stderr(),
            );
            if let Ok(style) = indicatif::ProgressStyle::with_template(
                "{bar:40} {msg} of virtual time, {elapsed} real",
            ) {
                b.set_style(style);
            }
            b
        });
        bar.set_position(elapsed.max(0) as u64);
        bar.set_message(clock_time(elapsed));
    };
    let report = runtime.block_on(scenario.run(&progress));
    if let Some(bar) = bar.lock().unwrap_or_else(|e| e.into_inner()).take() {
        bar.finish_and_clear();
    }
    Ok(report)
}

/// The world as the run left it, as `status` and `explain` read a deployed stack: the
/// store's claims and decision log, the simulated cluster observed as the functions
/// see it, the dead-letter queue's depth.
fn save(scenario: &Scenario, report: &Report) -> observed::StatusInput {
    let w = &report.world;
    let state = w.cluster.snapshot();
    let claims = w.store.claims();
    // The run's end: its clock reads tokio's, and the paused runtime is gone by now.
    let now = w.started_at() + report.summary.duration_seconds;
    let mut cluster = observed::observe(
        &state,
        &claims,
        &scenario.catalog,
        scenario.zones.clone(),
        now,
        DisruptionConfig::new("simulated", "status").spot_to_spot,
    );
    for pool in &state.node_pools {
        let conditions = w
            .cluster
            .status(ObjectKind::NodePool, &pool.name)
            .map(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .map(|c| observed::ObservedCondition {
                type_: c.condition.type_,
                status: c.condition.status.as_str().into(),
                reason: c.condition.reason,
                message: c.condition.message,
            })
            .collect();
        cluster.set_conditions(&pool.name, conditions);
    }
    observed::StatusInput {
        now,
        source: format!(
            "simulation {} (seed {}) after {} of virtual time",
            report.scenario,
            report.seed,
            clock_time(report.summary.duration_seconds)
        ),
        claims,
        decisions: w
            .store
            .all_decisions()
            .into_iter()
            .map(observed::LoggedDecision::from)
            .collect(),
        cluster,
        dead_letter_queue: Some(w.queue.dead_letters().len() as u64),
    }
}

fn drain_json(d: &DrainRecord) -> Value {
    json!({
        "t": clock_time(d.since),
        "claim": d.claim,
        "instance": d.instance,
        "cause": format!("{:?}", d.cause),
        "drainSeconds": d.drain_seconds,
        "terminatedAfterSeconds": d.terminated_after,
        "secondsBeforeDeadline": d.margin_to_deadline.map(|m| -m),
    })
}

fn node_json(n: &NodeRecord) -> Value {
    json!({
        "name": n.name,
        "instance": n.instance,
        "node": n.node,
        "nodePool": n.node_pool,
        "instanceType": n.instance_type,
        "zone": n.zone,
        "capacityType": n.capacity_type.as_str(),
        "pricePerHour": round(n.price_per_hour),
        "launched": clock_time(n.launched),
        "runningAtStart": n.launched < 0,
        "ended": n.ended.map(clock_time),
        "cause": n.cause.map(|c| format!("{c:?}")),
    })
}

/// The stable JSON document (docs/simulator.md, "JSON").
pub fn render_json(report: &Report) -> String {
    let s = &report.summary;
    let mut doc = json!({
        "scenario": report.scenario,
        "seed": report.seed,
        "summary": {
            "virtualSeconds": s.duration_seconds,
            "podsLost": s.pods_lost,
            "podsKilledWithoutNotice": s.pods_killed_without_notice,
            "pdbViolations": s.pdb_violations,
            "podsEvicted": {
                "voluntary": s.pods_evicted,
                "byInterruption": s.pods_evicted_by_interruption,
            },
            "drainsBlockedByBudgets": s.drains_blocked_by_budgets,
            "pendingSeconds": {
                "p50": s.pending_seconds.p50,
                "p95": s.pending_seconds.p95,
                "max": s.pending_seconds.max,
            },
            "podsBound": s.pods_bound,
            "podsPendingAtEnd": s.pods_pending_at_end,
            "instancesLaunched": s.instances_launched,
            "instancesNeeded": s.instances_needed,
            "peakNodes": s.peak_nodes,
            "nodesAtEnd": s.nodes_at_end,
            "pricePerHourAtEnd": round(s.price_per_hour_at_end),
            "nodeHours": round(s.node_hours),
            "cost": round(s.cost),
            "interruptions": s.interruptions,
            "repairs": s.repairs,
            "reboots": s.reboots,
            "drainSeconds": {"max": s.drain_seconds_max},
            "eventsSent": s.events_sent,
            "duplicateDeliveries": s.duplicate_deliveries,
            "deadLettered": s.dead_lettered,
            "provisionerInvocations": s.provisioner_invocations,
            "interruptionInvocations": s.interruption_invocations,
            "disruptionInvocations": s.disruption_invocations,
            "consolidation": {
                "commands": s.disruption_commands,
                "nodesRemoved": s.nodes_disrupted,
                "replacementsLaunched": s.replacements_launched,
                "savingsPerHour": round(s.savings_per_hour),
                "summary": consolidation(s),
            },
        },
        "interruptions": report
            .drains
            .iter()
            .filter(|d| is_interruption(d.cause))
            .map(drain_json)
            .collect::<Vec<_>>(),
        "disruptions": report
            .drains
            .iter()
            .filter(|d| !is_interruption(d.cause))
            .map(drain_json)
            .collect::<Vec<_>>(),
        "nodes": report.nodes.iter().map(node_json).collect::<Vec<_>>(),
        "timeline": report.timeline.iter().map(|r| json!({
            "t": clock_time(r.t),
            "event": r.event,
            "decision": r.decision,
            "nodes": r.nodes,
            "pricePerHour": round(r.price_per_hour),
        })).collect::<Vec<_>>(),
        "problems": report.problems,
    });
    if let Some(f) = &s.faults {
        doc["summary"]["faults"] = json!({
            "ec2": {"throttled": f.ec2_throttled, "unavailable": f.ec2_unavailable,
                    "capacityStorms": f.capacity_storms, "stormOfferings": f.storm_offerings},
            "dynamodb": {"throttled": f.dynamodb_throttled, "unavailable": f.dynamodb_unavailable,
                         "conflicts": f.dynamodb_conflicts},
            "kubernetes": {"throttled": f.kubernetes_throttled,
                           "unavailable": f.kubernetes_unavailable,
                           "slowEvictions": f.slow_evictions, "watchDrops": f.watch_drops},
            "stalls": f.stalls,
            "crashes": f.crashes,
            "lateEvents": f.late_events,
            "freezes": f.freezes,
        });
    }
    serde_json::to_string_pretty(&doc).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

/// Four decimals: prices and hours without float noise.
fn round(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

/// One name per node: its claim's. Events name instances (EC2's view) and decisions
/// name Kubernetes nodes; a reader follows one node through the run by one name, and
/// finds its instance and node once, in the table of nodes.
struct Names<'r> {
    /// Instance id or node name → the claim's name.
    aliases: HashMap<&'r str, &'r str>,
    names: HashSet<&'r str>,
}

impl<'r> Names<'r> {
    fn of(nodes: &'r [NodeRecord]) -> Self {
        let mut aliases = HashMap::new();
        for n in nodes {
            aliases.insert(n.instance.as_str(), n.name.as_str());
            if let Some(node) = &n.node {
                aliases.insert(node.as_str(), n.name.as_str());
            }
        }
        aliases.retain(|alias, name| alias != name);
        Names {
            aliases,
            names: nodes.iter().map(|n| n.name.as_str()).collect(),
        }
    }

    /// `text` with every instance id and node name replaced by its node's name. Where
    /// that would say a name twice in a row ("drain spot-a (spot-a)", "(spot,
    /// spot-a)"), the repeat goes.
    fn rename(&self, text: &str) -> String {
        let is_name = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_');
        let mut out = String::with_capacity(text.len());
        let mut said: HashSet<&str> = HashSet::new();
        let mut rest = text;
        while let Some(start) = rest.find(is_name) {
            out.push_str(&rest[..start]);
            rest = &rest[start..];
            let end = rest.find(|c: char| !is_name(c)).unwrap_or(rest.len());
            // A name may end a sentence.
            let token = rest[..end].trim_end_matches('.');
            let after = &rest[token.len()..];
            rest = after;
            let Some(&name) = self.aliases.get(token) else {
                if let Some(&name) = self.names.get(token) {
                    said.insert(name);
                }
                out.push_str(token);
                continue;
            };
            if !said.insert(name) {
                if out.ends_with(" (") && after.starts_with(')') {
                    out.truncate(out.len() - 2);
                    rest = &after[1..];
                    continue;
                }
                if out.ends_with(", ") && (after.starts_with(')') || after.starts_with(',')) {
                    out.truncate(out.len() - 2);
                    continue;
                }
                if out.ends_with('(') && after.starts_with(", ") {
                    rest = &after[2..];
                    continue;
                }
            }
            out.push_str(name);
        }
        out.push_str(rest);
        out
    }
}

/// The timeline rows people read, one per change, every node by its one name. The
/// disruption function logs a keep for every node it leaves, every minute its sentence
/// changes (a budget's counts): the nodes kept at one instant share one row, which
/// names a node only when its typed reason changed since it was last shown, and
/// there is no row when none did. A node disrupted and kept again later is news
/// again. `--output json` keeps every row as logged.
fn changes(timeline: &[TimelineRow], names: &Names<'_>) -> Vec<TimelineRow> {
    let mut kept: HashMap<String, String> = HashMap::new();
    let mut out: Vec<TimelineRow> = Vec::with_capacity(timeline.len());
    let mut rows = timeline.iter().peekable();
    while let Some(row) = rows.next() {
        let decision = names.rename(&row.decision);
        let Some(first) = kept_node(&decision).map(|(n, c)| (n.to_string(), c.to_string())) else {
            // "disruption: disrupt a, b (Method, Reason), ...": these nodes' next keep
            // is news.
            if let Some(nodes) = decision.strip_prefix("disruption: disrupt ") {
                let nodes = nodes.split(" (").next().unwrap_or_default();
                for node in nodes.split(", ") {
                    kept.remove(node);
                }
            }
            out.push(TimelineRow {
                event: names.rename(&row.event),
                decision,
                ..row.clone()
            });
            continue;
        };
        let mut keeps = vec![first];
        while let Some(next) = rows.peek() {
            if next.t != row.t {
                break;
            }
            let Some((node, code)) = kept_node(&names.rename(&next.decision))
                .map(|(n, c)| (n.to_string(), c.to_string()))
            else {
                break;
            };
            keeps.push((node, code));
            rows.next();
        }
        // Reason → the nodes newly kept for it, in the order logged.
        let mut groups: Vec<(String, Vec<String>)> = Vec::new();
        for (node, code) in keeps {
            if kept.insert(node.clone(), code.clone()).as_ref() == Some(&code) {
                continue;
            }
            match groups.iter_mut().find(|(c, _)| *c == code) {
                Some((_, nodes)) => nodes.push(node),
                None => groups.push((code, vec![node])),
            }
        }
        if groups.is_empty() {
            continue;
        }
        let groups: Vec<String> = groups
            .iter()
            .map(|(code, nodes)| format!("{} ({code})", nodes.join(", ")))
            .collect();
        out.push(TimelineRow {
            decision: format!("disruption: keep {}", groups.join("; ")),
            ..row.clone()
        });
    }
    out
}

/// (node, reason code) of a timeline decision "disruption: keep NODE (Code)", as the
/// disruption job words its decision-log entry.
fn kept_node(decision: &str) -> Option<(&str, &str)> {
    let rest = decision.strip_prefix("disruption: keep ")?;
    let (node, rest) = rest.split_once(" (")?;
    let (code, _) = rest.split_once(')')?;
    Some((node, code))
}

/// Which line of the summary lists a node taken away, by why.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Removal {
    /// An interruption event: spot, rebalance, retirement, stop, reservation.
    Interruption,
    /// Node repair.
    Repair,
    /// The disruption function's commands: emptiness, consolidation, drift, expiry.
    Command,
    /// The rest: static pools scaled down, claims never registered, Capacity Blocks
    /// ending.
    Other,
}

impl Removal {
    fn of(cause: DisruptionCause) -> Removal {
        if is_interruption(cause) {
            return Removal::Interruption;
        }
        match cause {
            DisruptionCause::Unhealthy => Removal::Repair,
            DisruptionCause::Empty
            | DisruptionCause::Underutilized
            | DisruptionCause::Drifted
            | DisruptionCause::Expired => Removal::Command,
            _ => Removal::Other,
        }
    }
}

/// "spot-a SpotInterrupted at 00:08:01: drained in 35 s, terminated 36 s after the
/// event, 83 s before its deadline".
fn drain_line(d: &DrainRecord) -> String {
    let mut line = format!(
        "{} {:?} at {}: drained in {}",
        d.claim,
        d.cause,
        clock_time(d.since),
        d.drain_seconds
            .map(|x| format!("{x} s"))
            .unwrap_or_else(|| "(not yet)".into()),
    );
    if let Some(t) = d.terminated_after {
        let _ = write!(line, ", terminated {t} s after the event");
    }
    if let Some(m) = d.margin_to_deadline {
        let _ = write!(line, ", {} s before its deadline", -m);
    }
    line
}

/// "; 1 not finished" when some of `drains` were not terminated by the end.
fn unfinished(drains: &[&DrainRecord]) -> String {
    match drains
        .iter()
        .filter(|d| d.terminated_after.is_none())
        .count()
    {
        0 => String::new(),
        n => format!("; {n} not finished"),
    }
}

/// Every node launched: its one name, then what it was and when, its instance and its
/// Kubernetes node.
fn nodes_table(out: &mut String, nodes: &[NodeRecord]) {
    let _ = writeln!(
        out,
        "Nodes ({} launched; the timeline names each by its NodeClaim)",
        nodes.len()
    );
    let rows: Vec<[String; 9]> = nodes
        .iter()
        .map(|n| {
            [
                n.name.clone(),
                n.instance_type.clone(),
                n.capacity_type.as_str().to_string(),
                n.zone.clone(),
                format!("{:.3}", n.price_per_hour),
                n.instance.clone(),
                n.node.clone().unwrap_or_else(|| "-".into()),
                clock_time(n.launched),
                match (n.ended, n.cause) {
                    (Some(t), Some(c)) => format!("{} {c:?}", clock_time(t)),
                    (Some(t), None) => clock_time(t),
                    (None, _) => "-".into(),
                },
            ]
        })
        .collect();
    let header = [
        "NAME", "TYPE", "CAPACITY", "ZONE", "$/H", "INSTANCE", "NODE", "LAUNCHED", "GONE",
    ];
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut line = |cells: [&str; 9]| {
        let mut text = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            // $/H is a number: right-aligned.
            if i == 4 {
                let _ = write!(text, "{cell:>w$}  ");
            } else {
                let _ = write!(text, "{cell:<w$}  ");
            }
        }
        let _ = writeln!(out, "{}", text.trim_end());
    };
    line(header);
    for row in &rows {
        line(row.each_ref().map(String::as_str));
    }
}

/// The timeline and the summary, for people.
pub fn render_table(report: &Report, wall: Duration) -> String {
    let s = &report.summary;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "nodewright simulate: {} (seed {}): {} of virtual time in {:.2} s",
        report.scenario,
        report.seed,
        clock_time(s.duration_seconds),
        wall.as_secs_f64()
    );
    let _ = writeln!(out);
    let names = Names::of(&report.nodes);
    let timeline = changes(&report.timeline, &names);
    let event_width = timeline
        .iter()
        .map(|r| r.event.chars().count())
        .max()
        .unwrap_or(0)
        .clamp(5, 72);
    let _ = writeln!(
        out,
        "{:<8}  {:>5}  {:>7}  {:<event_width$}  DECISION",
        "TIME", "NODES", "$/H", "EVENT"
    );
    for r in &timeline {
        let line = format!(
            "{:<8}  {:>5}  {:>7.3}  {:<event_width$}  {}",
            clock_time(r.t),
            r.nodes,
            r.price_per_hour,
            r.event,
            r.decision
        );
        let _ = writeln!(out, "{}", line.trim_end());
    }
    if !report.nodes.is_empty() {
        let _ = writeln!(out);
        nodes_table(&mut out, &report.nodes);
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "Summary");
    let row = |out: &mut String, label: &str, value: String| {
        let _ = writeln!(out, "  {label:<18}{value}");
    };
    row(
        &mut out,
        "pod pending time",
        format!(
            "p50 {} s, p95 {} s, max {} s ({} pods bound, {} still pending)",
            s.pending_seconds.p50,
            s.pending_seconds.p95,
            s.pending_seconds.max,
            s.pods_bound,
            s.pods_pending_at_end
        ),
    );
    row(
        &mut out,
        "instances",
        format!(
            "{} launched, {} needed; peak {} at once, {} at the end (${:.3}/h)",
            s.instances_launched,
            s.instances_needed,
            s.peak_nodes,
            s.nodes_at_end,
            s.price_per_hour_at_end
        ),
    );
    row(
        &mut out,
        "node-hours, cost",
        format!("{:.2} node-hours, ${:.2}", s.node_hours, s.cost),
    );
    // Every node taken away is listed once, under the line that counts it.
    let removed = |kind: Removal| -> Vec<&DrainRecord> {
        report
            .drains
            .iter()
            .filter(|d| Removal::of(d.cause) == kind)
            .collect()
    };
    let list = |out: &mut String, drains: &[&DrainRecord]| {
        for d in drains {
            row(out, "", drain_line(d));
        }
    };
    let repairs = removed(Removal::Repair);
    if s.repairs > 0 || !repairs.is_empty() {
        row(
            &mut out,
            "node repairs",
            format!(
                "{} unhealthy node(s) replaced{}",
                s.repairs,
                unfinished(&repairs)
            ),
        );
        list(&mut out, &repairs);
    }
    if s.reboots > 0 {
        row(
            &mut out,
            "node reboots",
            format!("{} instance(s) rebooted in place for repair", s.reboots),
        );
    }
    let interruptions = removed(Removal::Interruption);
    let longest = interruptions
        .iter()
        .filter_map(|d| d.drain_seconds)
        .max()
        .unwrap_or(0);
    row(
        &mut out,
        "interruptions",
        format!(
            "{} handled{}; longest drain {longest} s",
            s.interruptions,
            unfinished(&interruptions)
        ),
    );
    list(&mut out, &interruptions);
    row(
        &mut out,
        "events",
        format!(
            "{} sent to the queue, {} delivered twice, {} dead-lettered; {} provisioner and {} interruption invocations",
            s.events_sent,
            s.duplicate_deliveries,
            s.dead_lettered,
            s.provisioner_invocations,
            s.interruption_invocations
        ),
    );
    row(&mut out, "pods lost", s.pods_lost.to_string());
    if s.pods_killed_without_notice > 0 {
        row(
            &mut out,
            "pods killed",
            format!(
                "{} with instances stopped without notice",
                s.pods_killed_without_notice
            ),
        );
    }
    row(&mut out, "PDB violations", s.pdb_violations.to_string());
    row(
        &mut out,
        "evictions",
        format!(
            "{} pod(s) by nodewright's drains, {} by interruptions' drains; {} drain(s) held up by a PodDisruptionBudget",
            s.pods_evicted, s.pods_evicted_by_interruption, s.drains_blocked_by_budgets
        ),
    );
    let commands = removed(Removal::Command);
    row(
        &mut out,
        "consolidation",
        format!("{}{}", consolidation(s), unfinished(&commands)),
    );
    list(&mut out, &commands);
    let others = removed(Removal::Other);
    if !others.is_empty() {
        let finished = others
            .iter()
            .filter(|d| d.terminated_after.is_some())
            .count();
        row(
            &mut out,
            "other removals",
            format!("{finished} node(s) taken away{}", unfinished(&others)),
        );
        list(&mut out, &others);
    }
    if let Some(f) = &s.faults {
        row(
            &mut out,
            "faults",
            format!(
                "EC2 {} throttled, {} 5xx, {} capacity storm(s) ({} offerings); DynamoDB {} throttled, {} 5xx, {} conflict(s)",
                f.ec2_throttled,
                f.ec2_unavailable,
                f.capacity_storms,
                f.storm_offerings,
                f.dynamodb_throttled,
                f.dynamodb_unavailable,
                f.dynamodb_conflicts
            ),
        );
        row(
            &mut out,
            "",
            format!(
                "Kubernetes {} throttled, {} 5xx/timeouts, {} slow eviction(s), {} dropped watch(es); {} stall(s)",
                f.kubernetes_throttled,
                f.kubernetes_unavailable,
                f.slow_evictions,
                f.watch_drops,
                f.stalls
            ),
        );
        let crashes: Vec<String> = f
            .crashes
            .iter()
            .map(|(job, n)| format!("{n} {job}"))
            .collect();
        row(
            &mut out,
            "",
            format!(
                "{} crash(es) ({}); {} late event(s); {} frozen function(s)",
                f.crashes_total(),
                if crashes.is_empty() {
                    "none".into()
                } else {
                    crashes.join(", ")
                },
                f.late_events,
                f.freezes
            ),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_sim::faults::FaultConfig;
    use std::sync::OnceLock;

    /// The bundled scenario's run and its table, made once for the tests that read them.
    fn bundled() -> &'static (Report, String) {
        static RUN: OnceLock<(Report, String)> = OnceLock::new();
        RUN.get_or_init(|| {
            let scenario = crate::scenario::load(None).expect("the bundled scenario");
            let Ok(report) = simulate(&scenario) else {
                panic!("the bundled scenario did not start")
            };
            let table = render_table(&report, Duration::ZERO);
            (report, table)
        })
    }

    /// The value on the summary's line `label`, and the rows listed under it.
    fn summary_line<'t>(table: &'t str, label: &str) -> (&'t str, Vec<&'t str>) {
        let summary = table.split("\nSummary\n").nth(1).expect("a summary");
        let mut lines = summary.lines().peekable();
        let value = lines
            .by_ref()
            .find_map(|l| l.strip_prefix("  ")?.strip_prefix(label))
            .unwrap_or_else(|| panic!("no {label:?} line: {summary}"))
            .trim_start();
        let mut rows = Vec::new();
        while let Some(row) = lines.next_if(|l| l.starts_with(&" ".repeat(20))) {
            rows.push(row.trim());
        }
        (value, rows)
    }

    /// The count a summary line starts with, plus the "; N not finished" it may add.
    fn stated(value: &str) -> usize {
        let first: usize = value
            .split(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no count: {value}"));
        let unfinished: usize = value
            .split("; ")
            .find_map(|part| part.strip_suffix(" not finished")?.parse().ok())
            .unwrap_or(0);
        first + unfinished
    }

    #[test]
    fn the_summary_lists_exactly_the_nodes_each_of_its_lines_counts() {
        let (_, table) = bundled();
        let (value, rows) = summary_line(table, "interruptions");
        assert!(value.starts_with("2 handled"), "{value}");
        assert_eq!(rows.len(), stated(value), "{table}");
        assert!(
            rows.iter()
                .all(|r| r.contains("SpotInterrupted") || r.contains("Rebalance")),
            "{rows:?}"
        );
        let (value, rows) = summary_line(table, "consolidation");
        assert!(value.starts_with("5 node(s) removed"), "{value}");
        assert_eq!(rows.len(), stated(value), "{table}");
    }

    #[test]
    fn the_nodes_kept_at_one_instant_share_one_row_naming_only_changed_reasons() {
        let (report, table) = bundled();
        let mut instants = HashSet::new();
        let mut shown: HashMap<String, String> = HashMap::new();
        for line in table.lines() {
            let Some(kept) = line.split("disruption: keep ").nth(1) else {
                continue;
            };
            assert!(
                instants.insert(&line[..8]),
                "two keep rows at {}: {table}",
                &line[..8]
            );
            for group in kept.split("; ") {
                let (nodes, code) = group.rsplit_once(" (").expect("NODES (Code)");
                for node in nodes.split(", ") {
                    assert_ne!(
                        shown.insert(node.to_string(), code.to_string()).as_deref(),
                        Some(code),
                        "{node} shown twice as kept for {code}: {table}"
                    );
                }
            }
        }
        let logged = report
            .timeline
            .iter()
            .filter(|r| r.decision.starts_with("disruption: keep "))
            .count();
        assert!(
            !instants.is_empty() && instants.len() * 3 < logged,
            "{} keep rows for {logged} keeps logged",
            instants.len()
        );
    }

    #[test]
    fn each_node_goes_by_its_claim_name_with_its_instance_and_node_given_once() {
        let (report, table) = bundled();
        assert_eq!(report.nodes.len(), report.summary.instances_launched);
        for n in &report.nodes {
            assert_eq!(
                table.matches(&n.instance).count(),
                1,
                "{}: {table}",
                n.instance
            );
            let node = n.node.as_deref().expect("every node registered");
            assert_eq!(table.matches(node).count(), 1, "{node}: {table}");
            assert!(table.matches(&n.name).count() > 1, "{}: {table}", n.name);
        }
        // The launch row says what was launched without the instance id.
        assert!(
            table
                .lines()
                .any(|l| l.ends_with("in us-east-1a (spot)") && l.contains("provision: launch ")),
            "{table}"
        );
    }

    /// A DNS-1123 label: what Kubernetes requires of a pod's name.
    fn is_dns_label(name: &str) -> bool {
        nodewright_core::api::labels::is_dns_label(name, 63)
    }

    #[test]
    fn every_pod_of_the_bundled_run_has_a_name_kubernetes_accepts() {
        let (report, _) = bundled();
        let mut pods: Vec<String> = report.waits.iter().map(|w| w.pod.clone()).collect();
        pods.extend(report.world.cluster.snapshot().pods.iter().map(|p| p.key()));
        assert!(pods.len() > 60, "{pods:?}");
        assert!(
            pods.iter()
                .any(|p| p.starts_with("default/api-") && p.len() > "default/api-xxxxx".len()),
            "some pods were replaced after a drain: {pods:?}"
        );
        for key in &pods {
            let (namespace, name) = key.split_once('/').expect("namespace/name");
            assert!(is_dns_label(namespace) && is_dns_label(name), "{key}");
        }
    }

    #[test]
    fn the_chart_gives_each_series_its_own_axis_and_marks_what_happened() {
        let (report, _) = bundled();
        let path =
            std::env::temp_dir().join(format!("nodewright-chart-{}.svg", std::process::id()));
        chart::write(&path, report).expect("chart written");
        let svg = std::fs::read_to_string(&path).expect("chart read");
        let _ = std::fs::remove_file(&path);
        let text = |t: &str| svg.matches(&format!(">\n{t}\n</text>")).count();
        for axis in ["nodes", "pending pods", "$ per hour"] {
            assert_eq!(text(axis), 1, "one axis titled {axis}");
        }
        assert_eq!(text("virtual time (minutes)"), 1, "one time axis");
        for mark in [
            "web → 30",
            "spot interruption",
            "rebalance recommendation",
            "short: c6i.2xlarge spot",
            "web → 40",
            "web → 6",
        ] {
            assert_eq!(text(mark), 1, "{mark} marked");
        }
    }

    #[test]
    fn faults_are_summarised_only_when_the_scenario_sets_them() {
        let mut scenario = crate::scenario::load(None).expect("the bundled scenario");
        scenario.duration = Duration::from_secs(20 * 60);
        let Ok(calm) = simulate(&scenario) else {
            panic!("the calm run did not start")
        };
        assert!(calm.summary.faults.is_none());
        assert!(!render_json(&calm).contains("\"faults\""));
        assert!(!render_table(&calm, Duration::ZERO).contains("faults"));

        scenario.faults = Some(FaultConfig {
            rate: 0.2,
            crash_every: Some(Duration::from_secs(120)),
            seed: 3,
            ..FaultConfig::default()
        });
        let Ok(stormy) = simulate(&scenario) else {
            panic!("the faulty run did not start")
        };
        let faults = stormy.summary.faults.clone().expect("counted");
        assert!(
            faults.crashes_total() > 0 && faults.stalls > 0,
            "{faults:?}"
        );
        let json: Value = serde_json::from_str(&render_json(&stormy)).unwrap();
        assert_eq!(
            json["summary"]["faults"]["stalls"].as_u64(),
            Some(faults.stalls as u64)
        );
        let table = render_table(&stormy, Duration::ZERO);
        assert!(table.contains("crash(es)"), "{table}");
    }
}
