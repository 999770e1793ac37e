//! `nodewright event FILE.json`: how nodewright reads one EventBridge event — its kind,
//! the instances it names and the action it calls for, or why it is ignored.
//!
//! Exit codes: 0 the event was read (ignored events included); 2 it could not be used
//! (unreadable file, invalid JSON, a field of the wrong type, an invalid instance id).

use std::fmt;
use std::path::PathBuf;

use clap::ValueEnum;
use nodewright_core::interruption::{
    Action, EventError, ParsedEvent, RebalanceAction, action_for, format_rfc3339, parse_event,
};
use serde::Serialize;

#[derive(clap::Args)]
pub struct EventArgs {
    /// An EventBridge event as delivered (the body of the SQS message).
    pub file: PathBuf,
    /// What a Rebalance Recommendation leads to (the `rebalance` setting).
    #[arg(long, value_enum, default_value = "replace")]
    pub rebalance: Rebalance,
    /// table, json (one line) or yaml.
    #[arg(long, short = 'o', value_enum, default_value = "table")]
    pub output: Format,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Rebalance {
    /// Do nothing (Karpenter's behaviour).
    Ignore,
    /// Mark the node unschedulable.
    Cordon,
    /// Launch a replacement, then drain within budgets.
    Replace,
}

impl From<Rebalance> for RebalanceAction {
    fn from(r: Rebalance) -> Self {
        match r {
            Rebalance::Ignore => RebalanceAction::Ignore,
            Rebalance::Cordon => RebalanceAction::Cordon,
            Rebalance::Replace => RebalanceAction::Replace,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Format {
    Table,
    Json,
    Yaml,
}

/// Why the event could not be used; always exit 2.
#[derive(Debug)]
pub enum EventFailure {
    Unreadable {
        file: PathBuf,
        source: std::io::Error,
    },
    Invalid {
        file: PathBuf,
        source: EventError,
    },
}

impl fmt::Display for EventFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EventFailure::Unreadable { file, source } => {
                write!(f, "{}: cannot read: {source}", file.display())
            }
            EventFailure::Invalid { file, source } => write!(f, "{}: {source}", file.display()),
        }
    }
}

impl std::error::Error for EventFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            EventFailure::Unreadable { source, .. } => Some(source),
            EventFailure::Invalid { source, .. } => Some(source),
        }
    }
}

/// The `--output json` shape.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Reading<'a> {
    id: &'a str,
    kind: &'static str,
    instance_ids: Vec<&'a str>,
    state: Option<&'a str>,
    action: &'static str,
    reason: Option<&'a str>,
}

pub fn run(args: &EventArgs) -> Result<(), EventFailure> {
    let text = std::fs::read_to_string(&args.file).map_err(|source| EventFailure::Unreadable {
        file: args.file.clone(),
        source,
    })?;
    let event = parse_event(&text).map_err(|source| EventFailure::Invalid {
        file: args.file.clone(),
        source,
    })?;
    let action = action_for(&event, args.rebalance.into());
    let reading = Reading {
        id: &event.id,
        kind: event.kind.as_str(),
        instance_ids: event.instance_ids.iter().map(|i| i.as_str()).collect(),
        state: event.state.as_deref(),
        action: action.as_str(),
        reason: action.reason(),
    };
    match args.output {
        Format::Json => println!(
            "{}",
            serde_json::to_string(&reading).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
        ),
        Format::Yaml => print!(
            "{}",
            serde_yaml_ng::to_string(&reading).unwrap_or_else(|e| format!("error: {e}\n"))
        ),
        Format::Table => print!("{}", table(&event, &action)),
    }
    Ok(())
}

fn table(event: &ParsedEvent, action: &Action) -> String {
    let mut rows: Vec<(&str, String)> = vec![
        ("event", event.id.clone()),
        (
            "detail-type",
            format!("{} ({})", event.detail_type, event.source),
        ),
        ("time", format_rfc3339(event.time)),
        ("kind", event.kind.to_string()),
    ];
    if !event.instance_ids.is_empty() {
        let ids: Vec<&str> = event.instance_ids.iter().map(|i| i.as_str()).collect();
        rows.push(("instances", ids.join(", ")));
    }
    if let Some(state) = &event.state {
        rows.push(("state", state.clone()));
    }
    if let Some(code) = &event.health_event_type {
        rows.push(("health event", code.clone()));
    }
    let detail = match action {
        Action::DrainNow {
            deadline,
            mark_offering_unavailable,
            replace,
        } => {
            let mut parts = vec![format!(
                "taint and evict now; instance gone by {}",
                format_rfc3339(*deadline)
            )];
            if *mark_offering_unavailable {
                parts.push("mark the offering unavailable".into());
            }
            if *replace {
                parts.push("provision a replacement now".into());
            }
            parts.join("; ")
        }
        Action::ReplaceThenDrain { deadline: Some(d) } => {
            format!(
                "launch a replacement, then drain within budgets, before {}",
                format_rfc3339(*d)
            )
        }
        Action::ReplaceThenDrain { deadline: None } => {
            "launch a replacement, then drain within budgets".into()
        }
        Action::Cordon => "mark the node unschedulable; pods stay".into(),
        Action::CleanUp => "clean up the node and its NodeClaim".into(),
        Action::None { reason } => {
            rows.push(("action", action.to_string()));
            rows.push(("reason", reason.clone()));
            return render(&rows);
        }
    };
    rows.push(("action", format!("{action}: {detail}")));
    render(&rows)
}

fn render(rows: &[(&str, String)]) -> String {
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    rows.iter()
        .map(|(k, v)| format!("{k:<width$}  {v}\n"))
        .collect()
}
