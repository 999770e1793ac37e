//! `nodewright simulate [SCENARIO.yaml]`: the whole autoscaler on a virtual clock. The
//! provisioner and interruption jobs run as their Lambdas run them, against a
//! simulated EKS cluster and EC2 (`nodewright_engine::sim`); a scenario says what
//! happens to them. Prints a timeline and a summary (or JSON), optionally an SVG chart.
//!
//! Exit codes: 0 the run finished with every end-state invariant held; 1 it finished
//! but one broke (pods lost, a PodDisruptionBudget violated, instances ≠ live claims),
//! each printed on stderr; 2 the scenario could not be read (one line naming the file
//! and the field).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use clap::ValueEnum;
use nodewright_core::api::duration::parse_duration;
use nodewright_engine::DisruptionConfig;
use nodewright_engine::ports::ObjectKind;
use nodewright_engine::sim::report::{DrainRecord, TimelineRow, clock_time};
use nodewright_engine::sim::{Report, Scenario};
use serde_json::{Value, json};

use crate::Failure;
use crate::{chart, scenario, status};

#[derive(clap::Args)]
pub struct SimulateArgs {
    /// A scenario file (YAML); without one, the bundled scenario runs.
    pub scenario: Option<PathBuf>,
    /// Virtual time to simulate (overrides the scenario's `duration`), e.g. 2h, 90m.
    #[arg(long, value_parser = duration)]
    pub until: Option<Duration>,
    /// Seed of every random choice (overrides the scenario's `seed`).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Writes an SVG chart of nodes, pending pods and $/h over time.
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

fn duration(text: &str) -> Result<Duration, String> {
    parse_duration(text).ok_or_else(|| format!("{text:?} is not a duration like 2h, 90m or 1h30m"))
}

/// What the disruption function did, in one sentence.
fn consolidation(s: &nodewright_engine::sim::report::Summary) -> String {
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
    let mut scenario = scenario::load_with(args.scenario.as_deref(), args.strict.strictness())
        .map_err(Failure::from)?;
    if let Some(until) = args.until {
        scenario.duration = until;
    }
    if let Some(seed) = args.seed {
        scenario.seed = seed;
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
fn save(scenario: &Scenario, report: &Report) -> status::StatusInput {
    let w = &report.world;
    let state = w.cluster.snapshot();
    let claims = w.store.claims();
    // The run's end: its clock reads tokio's, and the paused runtime is gone by now.
    let now = w.started_at() + report.summary.duration_seconds;
    let mut cluster = status::observe(
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
            .map(|c| status::ObservedCondition {
                type_: c.condition.type_,
                status: c.condition.status.as_str().into(),
                reason: c.condition.reason,
                message: c.condition.message,
            })
            .collect();
        cluster.set_conditions(&pool.name, conditions);
    }
    status::StatusInput {
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
            .map(status::LoggedDecision::from)
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
        "interruptions": report.drains.iter().map(drain_json).collect::<Vec<_>>(),
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

/// The timeline rows people read: a node the disruption function keeps appears when
/// it is first kept and again only when the typed reason changes (the decision log
/// records a keep whenever its sentence changes, e.g. a budget's counts, once a
/// minute). A node disrupted, or gone, and kept again later is news again. `--output
/// json` keeps every row.
fn changes(timeline: &[TimelineRow]) -> Vec<&TimelineRow> {
    let mut kept: HashMap<&str, &str> = HashMap::new();
    timeline
        .iter()
        .filter(|r| match kept_node(&r.decision) {
            Some((node, code)) => kept.insert(node, code) != Some(code),
            None => {
                // "disruption: disrupt a, b (Method, Reason), ...": these nodes'
                // next keep is news.
                if let Some(nodes) = r.decision.strip_prefix("disruption: disrupt ") {
                    let nodes = nodes.split(" (").next().unwrap_or_default();
                    for node in nodes.split(", ") {
                        kept.remove(node);
                    }
                }
                true
            }
        })
        .collect()
}

/// (node, reason code) of a timeline decision "disruption: keep NODE (Code)", as the
/// disruption job words its decision-log entry.
fn kept_node(decision: &str) -> Option<(&str, &str)> {
    let rest = decision.strip_prefix("disruption: keep ")?;
    let (node, rest) = rest.split_once(" (")?;
    let (code, _) = rest.split_once(')')?;
    Some((node, code))
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
    let timeline = changes(&report.timeline);
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
    for r in timeline {
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
    if s.repairs > 0 {
        row(
            &mut out,
            "node repairs",
            format!("{} unhealthy node(s) replaced", s.repairs),
        );
    }
    row(
        &mut out,
        "interruptions",
        format!(
            "{} handled; longest drain {} s",
            s.interruptions, s.drain_seconds_max
        ),
    );
    for d in &report.drains {
        let mut line = format!(
            "{} {:?} at {}: drained in {}",
            d.instance.as_deref().unwrap_or(&d.claim),
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
        row(&mut out, "", line);
    }
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
    row(&mut out, "consolidation", consolidation(s));
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
    use nodewright_engine::sim::faults::FaultConfig;

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
