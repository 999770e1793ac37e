//! `nodewright status`: the live NodeClaims as `kubectl get nodeclaims -o wide` would
//! list them, then totals — nodes by pool, $/h, claims in motion, disruption commands
//! in flight, each job's last decision, the dead-letter queue's depth.
//!
//! `status` and `explain` read one [`StatusInput`] ([`crate::observed`]) from either
//! source ([`load`]), then answer with pure functions of it:
//! - a deployed stack, read-only: the table (`--table`, the stack's `StateTableName`
//!   output) through `DynamoStore` (claims, decisions), the cluster through
//!   `KubeCluster` (`--kubeconfig` or `KUBECONFIG`), and optionally the dead-letter
//!   queue's depth (`--dead-letter-queue-url`, SQS GetQueueAttributes);
//! - a saved simulation (`--from run.json`, written by `simulate --save`).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use nodewright_core::nodeclaim::{ClaimState, NodeClaim};
use serde::Serialize;

use crate::failure::Failure;
use crate::observed::{SourceArgs, StatusInput};
use crate::output::dollars;
use crate::output::{self, Output};
use crate::table;

#[derive(clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// table, wide (with each claim's instance id and creation time), json or yaml.
    #[arg(long, short = 'o', value_enum, default_value = "table")]
    pub output: Output,
}

// ----- The report --------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusReport {
    pub source: String,
    pub at: String,
    pub node_claims: Vec<ClaimRow>,
    pub totals: Totals,
    pub commands: Vec<CommandRow>,
    /// The latest entry of each job in the decision log.
    pub last_decisions: BTreeMap<String, DecisionRow>,
    pub dead_letter_queue: Option<DeadLetters>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimRow {
    pub name: String,
    pub node_pool: String,
    pub state: String,
    pub node: Option<String>,
    pub instance_type: Option<String>,
    pub zone: Option<String>,
    pub capacity_type: Option<String>,
    pub price_per_hour: Option<f64>,
    pub instance_id: Option<String>,
    pub age_seconds: i64,
    /// When the claim was created (RFC 3339).
    pub created: String,
    /// Why it is being taken away (`DisruptionCause`), if it is.
    pub disruption: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Totals {
    pub claims: usize,
    /// Live claims with a node, by NodePool.
    pub nodes_by_pool: BTreeMap<String, usize>,
    pub price_per_hour: f64,
    /// Claims on their way in (Launching, Launched, Registered) or out (Disrupting,
    /// Draining, Terminating), by state.
    pub in_motion: BTreeMap<String, usize>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CommandRow {
    pub id: String,
    pub cause: String,
    pub candidates: Vec<String>,
    pub replacements: Vec<String>,
    pub validated: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DecisionRow {
    pub at: String,
    pub action: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeadLetters {
    pub depth: u64,
}

/// RFC 3339 of Unix seconds.
pub fn rfc3339(at: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(at)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| at.to_string())
}

/// `5m`, `2h13m`, `3d4h`: an age as kubectl prints it.
pub fn age(seconds: i64) -> String {
    let s = seconds.max(0);
    match s {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{}s", s / 60, s % 60),
        s if s < 86_400 => format!("{}h{}m", s / 3600, s % 3600 / 60),
        s => format!("{}d{}h", s / 86_400, s % 86_400 / 3600),
    }
}

pub fn report(input: &StatusInput) -> StatusReport {
    let mut live: Vec<&NodeClaim> = input
        .claims
        .iter()
        .filter(|c| !c.state.is_terminal())
        .collect();
    live.sort_by(|a, b| (&a.node_pool, &a.name).cmp(&(&b.node_pool, &b.name)));
    let node_claims = live
        .iter()
        .map(|c| ClaimRow {
            name: c.name.clone(),
            node_pool: c.node_pool.clone(),
            state: c.state.as_str().to_string(),
            node: c.node_name.clone(),
            instance_type: c.instance_type.clone(),
            zone: c.zone.clone(),
            capacity_type: c.capacity_type.map(|t| t.as_str().to_string()),
            price_per_hour: c.price_per_hour,
            instance_id: c.instance_id.clone(),
            age_seconds: input.now - c.created_at,
            created: rfc3339(c.created_at),
            disruption: c.disruption.as_ref().map(|d| format!("{:?}", d.cause)),
        })
        .collect();
    let mut nodes_by_pool = BTreeMap::new();
    let mut in_motion = BTreeMap::new();
    for c in &live {
        if c.node_name.is_some() {
            *nodes_by_pool.entry(c.node_pool.clone()).or_insert(0) += 1;
        }
        if c.state != ClaimState::Initialized {
            *in_motion.entry(c.state.as_str().to_string()).or_insert(0) += 1;
        }
    }
    let mut commands: BTreeMap<String, CommandRow> = BTreeMap::new();
    for c in &live {
        let Some(d) = &c.disruption else { continue };
        let Some(cmd) = &d.command else { continue };
        commands
            .entry(cmd.id.clone())
            .or_insert_with(|| CommandRow {
                id: cmd.id.clone(),
                cause: format!("{:?}", d.cause),
                candidates: cmd.candidates.clone(),
                replacements: cmd.replacements.iter().map(|r| r.name.clone()).collect(),
                validated: cmd.validated,
            });
    }
    let mut last_decisions = BTreeMap::new();
    for d in &input.decisions {
        last_decisions.insert(
            d.job.clone(),
            DecisionRow {
                at: rfc3339(d.at),
                action: d.action.clone(),
                reason: d.reason.clone(),
            },
        );
    }
    StatusReport {
        source: input.source.clone(),
        at: rfc3339(input.now),
        totals: Totals {
            claims: live.len(),
            nodes_by_pool,
            price_per_hour: live.iter().filter_map(|c| c.price_per_hour).sum(),
            in_motion,
        },
        node_claims,
        commands: commands.into_values().collect(),
        last_decisions,
        dead_letter_queue: input.dead_letter_queue.map(|depth| DeadLetters { depth }),
    }
}

/// The report for people; `wide` adds each claim's instance id and creation time.
pub fn render(r: &StatusReport, wide: bool) -> String {
    let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    let rows: Vec<Vec<String>> = r
        .node_claims
        .iter()
        .map(|c| {
            let mut row = vec![
                c.name.clone(),
                c.node_pool.clone(),
                c.state.clone(),
                dash(&c.node),
                dash(&c.instance_type),
                dash(&c.zone),
                dash(&c.capacity_type),
                c.price_per_hour.map(dollars).unwrap_or_else(|| "-".into()),
                age(c.age_seconds),
                dash(&c.disruption),
            ];
            if wide {
                row.push(dash(&c.instance_id));
                row.push(c.created.clone());
            }
            row
        })
        .collect();
    let mut out = format!("{}, {}\n\n", r.source, r.at);
    if rows.is_empty() {
        out.push_str("No live NodeClaims.\n");
    } else {
        let mut headers = vec![
            "NAME",
            "NODEPOOL",
            "STATE",
            "NODE",
            "TYPE",
            "ZONE",
            "CAPACITY",
            "$/H",
            "AGE",
            "DISRUPTION",
        ];
        if wide {
            headers.extend(["INSTANCE ID", "CREATED"]);
        }
        out.push_str(&table::columns(&headers, &[7], &rows));
    }
    let t = &r.totals;
    let pools: Vec<String> = t
        .nodes_by_pool
        .iter()
        .map(|(p, n)| format!("{p} {n}"))
        .collect();
    let _ = writeln!(
        out,
        "\n{} live claim(s); nodes by pool: {}; ${}/hour",
        t.claims,
        if pools.is_empty() {
            "none".into()
        } else {
            pools.join(", ")
        },
        dollars(t.price_per_hour)
    );
    let motion: Vec<String> = t
        .in_motion
        .iter()
        .map(|(s, n)| format!("{n} {s}"))
        .collect();
    let _ = writeln!(
        out,
        "In motion: {}",
        if motion.is_empty() {
            "none".into()
        } else {
            motion.join(", ")
        }
    );
    if r.commands.is_empty() {
        let _ = writeln!(out, "Disruption commands in flight: none");
    } else {
        let _ = writeln!(out, "Disruption commands in flight:");
        for c in &r.commands {
            let _ = writeln!(
                out,
                "  {} ({}): candidates {}; replacements {}; {}",
                c.id,
                c.cause,
                c.candidates.join(", "),
                if c.replacements.is_empty() {
                    "none".into()
                } else {
                    c.replacements.join(", ")
                },
                if c.validated {
                    "validated"
                } else {
                    "not validated yet"
                }
            );
        }
    }
    let _ = writeln!(out, "Last decisions:");
    if r.last_decisions.is_empty() {
        let _ = writeln!(out, "  none in the log read");
    }
    for (job, d) in &r.last_decisions {
        let _ = writeln!(out, "  {job:<12} {}  {} — {}", d.at, d.action, d.reason);
    }
    let _ = writeln!(
        out,
        "Dead-letter queue: {}",
        match &r.dead_letter_queue {
            Some(d) => format!("{} message(s)", d.depth),
            None => "not read (--dead-letter-queue-url)".into(),
        }
    );
    out
}

pub fn run(args: &StatusArgs) -> Result<(), Failure> {
    let input = load(&args.source)?;
    let r = report(&input);
    if !output::emit(&r, args.output)? {
        print!("{}", render(&r, args.output == Output::Wide));
    }
    Ok(())
}

// ----- Sources -----------------------------------------------------------------------

/// The input from `--from` or from the deployed stack.
pub fn load(args: &SourceArgs) -> Result<StatusInput, Failure> {
    if let Some(path) = &args.from {
        let text = crate::failure::read(path)?;
        let de = &mut serde_json::Deserializer::from_str(&text);
        return serde_path_to_error::deserialize(de).map_err(|e| {
            Failure::Unusable(format!(
                "{}: not a run saved by `nodewright simulate --save` ({e})",
                path.display()
            ))
        });
    }
    let Some(table) = &args.table else {
        return Err(Failure::Unusable(
            "say where to read from: --from RUN.json (a saved simulation) or --table NAME (a deployed stack's StateTableName) with --kubeconfig".into(),
        ));
    };
    crate::stack::read(args, table)
}
