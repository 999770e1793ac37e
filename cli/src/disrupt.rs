//! `nodewright disrupt`: the disruption decisions for a cluster snapshot, dry run.
//! Which managed nodes expiration, drift, emptiness and consolidation would take now,
//! within budgets, where their pods would go, what it saves; and for every other
//! managed node, the typed reason it stays.

use std::path::PathBuf;

use nodewright_core::catalog::{Catalog, Pricing};
use nodewright_core::disruption::{Decision, DisruptionInput, decide};

use crate::{Failure, Output, load_catalog, load_manifests, load_snapshot, zones};

#[derive(clap::Args)]
pub struct DisruptArgs {
    /// NodePool and EC2NodeClass manifests (repeatable).
    #[arg(long = "nodepools", required = true)]
    nodepools: Vec<PathBuf>,
    /// Output of `kubectl get pods,nodes,daemonsets,poddisruptionbudgets -A -o json`
    /// (NodeClaims in the list are tolerated).
    #[arg(long)]
    snapshot: PathBuf,
    /// Instance catalog in the format of the embedded one (default: embedded AWS catalog).
    #[arg(long)]
    catalog: Option<PathBuf>,
    /// Zones to offer replacement capacity in.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "us-east-1a,us-east-1b,us-east-1c"
    )]
    zones: Vec<String>,
    /// The clock for consolidateAfter, expireAfter and budget schedules (RFC 3339,
    /// e.g. 2026-11-23T10:00:00Z). Default: now.
    #[arg(long)]
    now: Option<String>,
    /// Allow replacing spot nodes by cheaper spot nodes (needs 15 cheaper spot types).
    #[arg(long)]
    spot_to_spot: bool,
    #[arg(long, value_enum, default_value = "table")]
    output: Output,
}

pub fn run(args: &DisruptArgs) -> Result<(), Failure> {
    let now = match &args.now {
        Some(text) => parse_now(text)?,
        None => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or_default(),
    };
    let manifests = load_manifests(&args.nodepools)?;
    let snapshot = load_snapshot(&args.snapshot)?;
    let custom = load_catalog(args.catalog.as_deref())?;
    let catalog = custom.as_ref().unwrap_or_else(|| Catalog::embedded());
    let pricing = Pricing::for_zones(zones(&args.zones)?);
    let decision = decide(&DisruptionInput {
        snapshot: &snapshot,
        node_pools: &manifests.node_pools,
        node_classes: &manifests.node_classes,
        catalog,
        pricing: &pricing,
        in_flight: &[],
        now,
        spot_to_spot: args.spot_to_spot,
        external_drift: &[],
        disrupting: &[],
        validating: None,
    });
    if !decision.problems.is_empty() {
        return Err(Failure::Invalid(
            decision
                .problems
                .iter()
                .map(|p| format!("{}: {p}", args.snapshot.display()))
                .collect(),
        ));
    }
    match args.output {
        Output::Json => crate::write_json(&decision),
        Output::Table => {
            print!("{}", render(&decision));
            Ok(())
        }
    }
}

/// `--now`: an RFC 3339 time.
fn parse_now(text: &str) -> Result<i64, Failure> {
    text.trim()
        .parse::<k8s_openapi::jiff::Timestamp>()
        .map(|t| t.as_second())
        .map_err(|e| {
            Failure::Unusable(format!(
                "--now: \"{text}\" is not an RFC 3339 time such as 2026-11-23T10:00:00Z ({e})"
            ))
        })
}

fn render(d: &Decision) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    if d.commands.is_empty() {
        out.push_str("no disruption now\n");
    }
    for (i, c) in d.commands.iter().enumerate() {
        let _ = writeln!(
            out,
            "{}. {} ({:?}): {} node(s), ${:.4}/h -> ${:.4}/h, saves ${:.4}/h",
            i + 1,
            serde_json::to_value(c.method)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
            c.reason,
            c.nodes.len(),
            c.price_per_hour_before,
            c.price_per_hour_after,
            c.savings_per_hour
        );
        let _ = writeln!(out, "   nodes: {}", c.nodes.join(", "));
        for m in &c.moves {
            let _ = writeln!(out, "   {} pod(s) -> {}", m.pods.len(), m.target);
        }
        for r in &c.replacements {
            let _ = writeln!(
                out,
                "   {} pod(s) -> new {} {} {} in {} (${:.4}/h, {} option(s))",
                r.pods.len(),
                r.node_pool,
                r.instance_type,
                r.capacity_type,
                r.zone,
                r.price_per_hour,
                r.instance_type_options.len()
            );
        }
    }
    if !d.rejected.is_empty() {
        let _ = writeln!(out, "\nstaying ({}):", d.rejected.len());
        for r in &d.rejected {
            let _ = writeln!(out, "  {:<40} {:?}: {}", r.node, r.code, r.reason);
        }
    }
    let _ = writeln!(
        out,
        "\nprice: ${:.4}/hour before, ${:.4}/hour after",
        d.price_per_hour.before, d.price_per_hour.after
    );
    out
}
