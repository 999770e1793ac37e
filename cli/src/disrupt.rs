//! `nodewright disrupt`: the disruption decisions for a cluster snapshot, dry run.
//! Which managed nodes expiration, drift, emptiness and consolidation would take now,
//! within budgets, where their pods would go, what it saves; and for every other
//! managed node, the typed reason it stays.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use nodewright_core::capacity_buffer::buffer_room;
use nodewright_core::catalog::Catalog;
use nodewright_core::disruption::{Decision, DisruptionInput, RejectCode, decide_observed};
use nodewright_core::provisioning::ProvisioningInput;

use crate::failure::Failure;
use crate::inputs::{load_catalog, load_snapshot, zones};
use crate::manifests;
use crate::output::Output;
use crate::output::{self, dollars};

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
    // `--min-values-policy` and `--reservations`, as `plan` has them: replacements are
    // planned as the disruption function plans them.
    #[command(flatten)]
    capacity: crate::reservations::CapacityArgs,
    #[command(flatten)]
    scheduler: crate::scheduler_config::SchedulerConfigArgs,
    #[command(flatten)]
    strict: manifests::StrictArgs,
    /// table, wide (with the pods each command moves and the replacements' options),
    /// json or yaml.
    #[arg(long, short = 'o', value_enum, default_value = "table")]
    output: Output,
    /// Print to stderr how long each step took, wall and CPU time, with the peak RSS
    /// so far: reading the snapshot, each phase of the decision, writing the output.
    #[arg(long)]
    timings: bool,
}

pub fn run(args: &DisruptArgs) -> Result<(), Failure> {
    let now = match &args.now {
        Some(text) => parse_now(text)?,
        None => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or_default(),
    };
    let mut timings = Timings::start();
    let manifests = manifests::load(&args.nodepools, args.strict)?;
    manifests::need_node_pools("disrupt", &args.nodepools, &manifests, args.strict)?;
    let mut snapshot = load_snapshot(&args.snapshot)?;
    crate::inputs::need_in_snapshot(
        "disrupt",
        &args.snapshot.display(),
        &snapshot,
        true,
        args.strict,
    )?;
    args.scheduler.apply(&mut snapshot)?;
    let custom = load_catalog(args.catalog.as_deref())?;
    let catalog = custom.as_ref().unwrap_or_else(|| Catalog::embedded());
    let zones = zones(&args.zones, custom.is_some(), args.strict)?;
    let mut pricing = crate::inputs::pricing(zones, &manifests, catalog);
    args.capacity.apply(&mut pricing)?;
    timings.step("read snapshot and manifests");
    let buffers = crate::buffers::Buffers::of(&manifests, &snapshot);
    let room = buffer_room(
        &ProvisioningInput {
            snapshot: &snapshot,
            node_pools: &manifests.node_pools,
            node_classes: &manifests.node_classes,
            catalog,
            pricing: &pricing,
            in_flight: &[],
        },
        &buffers.virtual_pods,
    );
    snapshot.pods.extend(room);
    let input = DisruptionInput {
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
        nominated: &[],
        validating: None,
    };
    let decision = decide_observed(&input, &mut |phase| timings.step(phase.as_str()));
    timings.step("rest of the decision");
    if !decision.problems.is_empty() {
        return Err(Failure::Invalid(
            decision
                .problems
                .iter()
                .map(|p| format!("{}: {p}", args.snapshot.display()))
                .collect(),
        ));
    }
    if !output::emit(&decision, args.output)? {
        let view = View {
            wide: args.output == Output::Wide,
            spot_to_spot: args.spot_to_spot,
        };
        print!("{}", render(&decision, view));
    }
    if args.timings {
        timings.step("write output");
        eprint!("{}", timings.render());
    }
    Ok(())
}

/// `--timings`: each step's wall and CPU time (user + system, from `getrusage`), and
/// the process's peak RSS when it ended.
struct Timings {
    started: Instant,
    last: (Instant, Duration),
    steps: Vec<(String, Duration, Duration, u64)>,
}

impl Timings {
    fn start() -> Self {
        let now = Instant::now();
        Timings {
            started: now,
            last: (now, usage().0),
            steps: Vec::new(),
        }
    }

    /// The step `name` ended now.
    fn step(&mut self, name: &str) {
        let now = Instant::now();
        let (cpu, peak_kib) = usage();
        self.steps.push((
            name.to_string(),
            now - self.last.0,
            cpu.saturating_sub(self.last.1),
            peak_kib,
        ));
        self.last = (now, cpu);
    }

    fn render(&self) -> String {
        use std::fmt::Write as _;
        let mut out = format!(
            "{:<30} {:>9} {:>9} {:>9}\n",
            "step", "wall s", "cpu s", "peak MB"
        );
        let mb = |kib: u64| kib as f64 * 1024.0 / 1e6;
        for (name, wall, cpu, peak) in &self.steps {
            let _ = writeln!(
                out,
                "{name:<30} {:>9.3} {:>9.3} {:>9.1}",
                wall.as_secs_f64(),
                cpu.as_secs_f64(),
                mb(*peak)
            );
        }
        let (cpu, peak) = usage();
        let _ = writeln!(
            out,
            "{:<30} {:>9.3} {:>9.3} {:>9.1}",
            "total",
            self.started.elapsed().as_secs_f64(),
            cpu.as_secs_f64(),
            mb(peak)
        );
        out
    }
}

/// This process's CPU time so far (user + system) and its peak RSS in KiB.
fn usage() -> (Duration, u64) {
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is valid for writes for the duration of the call.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return (Duration::ZERO, 0);
    }
    let time = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    (
        time(u.ru_utime) + time(u.ru_stime),
        u.ru_maxrss.max(0) as u64,
    )
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

/// How the table is drawn.
#[derive(Clone, Copy, Default)]
struct View {
    /// `-o wide`: the pods each command moves and each replacement's options.
    wide: bool,
    /// `--spot-to-spot` was given (else a node kept for spot-to-spot says how to ask).
    spot_to_spot: bool,
}

/// Names, at most `n` of them, then how many more.
fn some_of(names: &[String], n: usize) -> String {
    let mut shown = names.iter().take(n).cloned().collect::<Vec<_>>().join(", ");
    if names.len() > n {
        use std::fmt::Write as _;
        let _ = write!(shown, " and {} more", names.len() - n);
    }
    shown
}

fn render(d: &Decision, view: View) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    if d.commands.is_empty() {
        out.push_str("no disruption now\n");
    }
    for (i, c) in d.commands.iter().enumerate() {
        // An expiration's replacements may cost more than the nodes they replace.
        let change = if output::round4(c.savings_per_hour) < 0.0 {
            format!("costs ${}/h more", dollars(-c.savings_per_hour))
        } else {
            format!("saves ${}/h", dollars(c.savings_per_hour))
        };
        let _ = writeln!(
            out,
            "{}. {} ({:?}): {} node(s), ${}/h -> ${}/h, {change}",
            i + 1,
            serde_json::to_value(c.method)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
            c.reason,
            c.nodes.len(),
            dollars(c.price_per_hour_before),
            dollars(c.price_per_hour_after),
        );
        let _ = writeln!(out, "   nodes: {}", c.nodes.join(", "));
        for d in &c.drifted {
            let _ = writeln!(out, "   drifted: {}: {}", d.node, d.reason);
        }
        for m in &c.moves {
            let _ = writeln!(out, "   {} pod(s) -> {}", m.pods.len(), m.target);
            if view.wide {
                let _ = writeln!(out, "      {}", m.pods.join(", "));
            }
        }
        for r in &c.replacements {
            let _ = writeln!(
                out,
                "   {} pod(s) -> new {} {} {} in {} (${}/h, {} option(s))",
                r.pods.len(),
                r.node_pool,
                r.instance_type,
                r.capacity_type,
                r.zone,
                dollars(r.price_per_hour),
                r.instance_type_options.len()
            );
            if view.wide {
                let _ = writeln!(out, "      {}", r.pods.join(", "));
                let _ = writeln!(
                    out,
                    "      options: {}",
                    some_of(&r.instance_type_options, 10)
                );
            }
        }
    }
    if !d.rejected.is_empty() {
        let _ = writeln!(out, "\nstaying ({}):", d.rejected.len());
        for r in &d.rejected {
            let hint = if r.code == RejectCode::SpotToSpot && !view.spot_to_spot {
                " (--spot-to-spot turns it on)"
            } else {
                ""
            };
            let _ = writeln!(out, "  {:<40} {:?}: {}{hint}", r.node, r.code, r.reason);
        }
    }
    let _ = writeln!(
        out,
        "\nprice: ${}/hour before, ${}/hour after",
        dollars(d.price_per_hour.before),
        dollars(d.price_per_hour.after)
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn some_of_names_the_first_and_counts_the_rest() {
        let names: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        assert_eq!(some_of(&names, 2), "a, b and 1 more");
        assert_eq!(some_of(&names, 3), "a, b, c");
    }
}
