//! `nodewright`: simulate the whole autoscaler on a virtual clock, plan provisioning
//! and decide disruption offline, validate manifests, read interruption events. (The
//! benchmarks are the dev-only `nodewright-bench`, not shipped.)
//!
//! Exit codes: 0 success; 1 the input was read but is invalid (one line per problem),
//! or a simulation broke an end-state invariant (one line each); 2 an input could not
//! be used at all (unreadable, not YAML/JSON, wrong kind, bad flags), with one line
//! naming the file and the problem.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use nodewright_core::api::overlay::VALIDATION_SUCCEEDED;
use nodewright_core::api::{Manifests, ReadOverlay};
use nodewright_core::capacity_buffer::buffer_statuses;
use nodewright_core::catalog::{Catalog, Pricing};
use nodewright_core::cluster::ClusterSnapshot;
use nodewright_core::density;
use nodewright_core::overlay::{self, Resolution};
use nodewright_core::provisioning::{ProvisioningInput, plan_provisioning};
use nodewright_core::snapshot::parse_snapshot_reader;

// Planning a big snapshot allocates and frees millions of small strings and vectors;
// glibc's allocator was a fifth of `plan`'s time at 20,000 pods (consolidating and
// unlinking free chunks). mimalloc's thread-local free lists are cheaper. Its v2: v3
// returns freed pages only after a second, so a sub-second command peaked higher.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod buffers;
mod chart;
mod disrupt;
mod event;
mod explain;
#[cfg(feature = "stack")]
mod hints;
mod manifests;
mod output;
mod region;
mod reservations;
mod scenario;
mod scheduler_config;
mod simulate;
mod stack;
mod status;
mod table;

#[derive(Parser)]
#[command(
    name = "nodewright",
    version,
    about = "Serverless node autoscaler for EKS: simulator, offline planner and tools"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the whole autoscaler on a virtual clock against a simulated cluster: a
    /// timeline and a summary (pending times, cost, drains, invariants).
    Simulate(simulate::SimulateArgs),
    /// Plan the NodeClaims for a cluster snapshot's pending pods.
    Plan(PlanArgs),
    /// Decide, dry run, which managed nodes expiration, drift, emptiness and
    /// consolidation would disrupt now, and why every other one stays.
    Disrupt(disrupt::DisruptArgs),
    /// Validate NodePool, EC2NodeClass and NodeOverlay manifests as the API server
    /// does with Karpenter's CRDs (unknown and missing required fields are errors).
    Validate(ValidateArgs),
    /// Show how nodewright reads an EventBridge interruption event: kind, instances, action.
    Event(event::EventArgs),
    /// The live NodeClaims and totals (nodes by pool, $/h, claims in motion, commands
    /// in flight, each job's last decision, dead-letter queue), from a deployed stack
    /// (--table, --kubeconfig; read-only) or a saved simulation (--from).
    Status(status::StatusArgs),
    /// Why a pod is pending or got its instance type, why a node stays or goes, how a
    /// NodePool stands: from the decision log and the cluster (same sources as status).
    Explain(explain::ExplainArgs),
}

pub(crate) use output::Output;

#[derive(clap::Args)]
struct ValidateArgs {
    /// YAML or JSON files holding karpenter.sh/v1 NodePools, karpenter.k8s.aws/v1
    /// EC2NodeClasses and karpenter.sh/v1alpha1 NodeOverlays.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// List every Karpenter field present with what nodewright does with it, the
    /// honoured ones too (by default only those not fully honoured are listed).
    #[arg(long)]
    fields: bool,
    #[command(flatten)]
    strict: manifests::StrictArgs,
    /// table, wide (every field, as --fields), json or yaml.
    #[arg(long, short = 'o', value_enum, default_value = "table")]
    output: Output,
}

#[derive(clap::Args)]
struct PlanArgs {
    /// NodePool and EC2NodeClass manifests (repeatable).
    #[arg(long = "nodepools", required = true)]
    nodepools: Vec<PathBuf>,
    /// Output of `kubectl get pods,nodes,daemonsets,poddisruptionbudgets -A -o json`.
    #[arg(long)]
    snapshot: PathBuf,
    /// Instance catalog in the format of the embedded one (default: embedded AWS catalog).
    #[arg(long)]
    catalog: Option<PathBuf>,
    /// Zones to offer capacity in.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "us-east-1a,us-east-1b,us-east-1c"
    )]
    zones: Vec<String>,
    #[command(flatten)]
    capacity: reservations::CapacityArgs,
    #[command(flatten)]
    scheduler: scheduler_config::SchedulerConfigArgs,
    #[command(flatten)]
    strict: manifests::StrictArgs,
    /// table, wide (with the cheapest options of each claim), json or yaml.
    #[arg(long, short = 'o', value_enum, default_value = "table")]
    output: Output,
}

/// Why the command failed, and with which exit code.
pub(crate) enum Failure {
    /// Input read but invalid: one line per problem, exit 1.
    Invalid(Vec<String>),
    /// Input unusable: one line, exit 2.
    Unusable(String),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Simulate(args) => simulate::run(&args),
        Command::Plan(args) => plan(&args),
        Command::Disrupt(args) => disrupt::run(&args),
        Command::Validate(args) => validate(&args),
        Command::Event(args) => event::run(&args).map_err(|e| Failure::Unusable(e.to_string())),
        Command::Status(args) => status::run(&args),
        Command::Explain(args) => explain::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Invalid(lines)) => {
            for line in lines {
                eprintln!("{line}");
            }
            ExitCode::from(1)
        }
        Err(Failure::Unusable(line)) => {
            eprintln!("nodewright: {line}");
            ExitCode::from(2)
        }
    }
}

pub(crate) fn read(path: &Path) -> Result<String, Failure> {
    std::fs::read_to_string(path)
        .map_err(|e| Failure::Unusable(format!("{}: cannot read: {e}", path.display())))
}

/// Reads and validates `--nodepools` files (see [`manifests`]).
pub(crate) fn load_manifests(
    files: &[PathBuf],
    strict: manifests::StrictArgs,
) -> Result<Manifests, Failure> {
    manifests::load(files, strict)
}

/// `validate -o json|yaml`.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Validated {
    node_pools: Vec<String>,
    #[serde(rename = "ec2NodeClasses")]
    node_classes: Vec<String>,
    node_overlays: Vec<OverlayVerdict>,
    /// `namespace/name` of each CapacityBuffer and PodTemplate.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    capacity_buffers: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pod_templates: Vec<String>,
    /// The fields not fully honoured (every field with --fields).
    fields: Vec<manifests::FieldRow>,
}

#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct OverlayVerdict {
    name: String,
    applied: bool,
    reason: String,
    message: String,
}

/// Prints the fields not fully honoured (every field with `--fields` or `-o wide`),
/// then validates: unknown and missing required fields are problems unless
/// `--lenient`; the field report never changes the exit code.
fn validate(args: &ValidateArgs) -> Result<(), Failure> {
    let read = manifests::read_documents(&args.files)?;
    let all = args.fields || args.output == Output::Wide;
    let fields = manifests::field_lines(&read.documents, all);
    let table = matches!(args.output, Output::Table | Output::Wide);
    if table {
        for row in &fields {
            println!("{row}");
        }
    }
    let manifests = manifests::validate(&read, args.strict)?;
    expression_warnings(&manifests);
    // Conflicts are Karpenter's runtime verdict, over the embedded catalog's types in
    // the default zones: an overlay in conflict is valid, and applied nowhere.
    let zones = Pricing::default().zones;
    let statuses = if manifests.node_overlays.is_empty() {
        Vec::new()
    } else {
        overlay_resolution(&manifests, Catalog::embedded(), &zones).statuses
    };
    if !table {
        let report = Validated {
            node_pools: manifests
                .node_pools
                .iter()
                .map(|p| p.name.clone())
                .collect(),
            node_classes: manifests
                .node_classes
                .iter()
                .map(|c| c.name.clone())
                .collect(),
            node_overlays: statuses
                .iter()
                .map(|s| OverlayVerdict {
                    name: s.name.clone(),
                    applied: s.succeeded(),
                    reason: s.reason().to_string(),
                    message: s.message().to_string(),
                })
                .collect(),
            capacity_buffers: manifests.capacity_buffers.iter().map(|b| b.key()).collect(),
            pod_templates: manifests
                .pod_templates
                .iter()
                .map(|t| format!("{}/{}", t.namespace, t.name))
                .collect(),
            fields,
        };
        output::emit(&report, args.output)?;
        return Ok(());
    }
    let mut counts = vec![
        format!("{} NodePool(s)", manifests.node_pools.len()),
        format!("{} EC2NodeClass(es)", manifests.node_classes.len()),
    ];
    for (n, kind) in [
        (manifests.node_overlays.len(), "NodeOverlay(s)"),
        (manifests.capacity_buffers.len(), "CapacityBuffer(s)"),
        (manifests.pod_templates.len(), "PodTemplate(s)"),
    ] {
        if n > 0 {
            counts.push(format!("{n} {kind}"));
        }
    }
    println!("valid: {}", counts.join(", "));
    for status in &statuses {
        if status.succeeded() {
            println!("NodeOverlay {:?}: {VALIDATION_SUCCEEDED}", status.name);
        } else {
            println!(
                "NodeOverlay {:?}: not applied: {}: {}",
                status.name,
                status.reason(),
                status.message()
            );
        }
    }
    Ok(())
}

/// On stderr, each kubelet expression without a value on some of the embedded
/// catalog's types: valid, but those types are never chosen (`maxPods`) or keep the
/// default (a reservation).
fn expression_warnings(manifests: &Manifests) {
    for class in &manifests.node_classes {
        for gap in density::expression_gaps(Catalog::embedded(), class) {
            let effect = if gap.field.ends_with(".maxPods") {
                "they get no pods and are never chosen"
            } else {
                "the default reservation applies on them"
            };
            let shown: Vec<&str> = gap
                .instance_types
                .iter()
                .take(5)
                .map(String::as_str)
                .collect();
            let more = gap.instance_types.len() - shown.len();
            eprintln!(
                "warning: EC2NodeClass {:?}: {}: no value on {} instance type(s) ({}{}); {effect}: {}",
                class.name,
                gap.field,
                gap.instance_types.len(),
                shown.join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                },
                gap.first
            );
        }
    }
}

fn overlay_resolution(manifests: &Manifests, catalog: &Catalog, zones: &[String]) -> Resolution {
    let overlays: Vec<ReadOverlay> = manifests.node_overlays.iter().cloned().map(Ok).collect();
    overlay::resolve(&overlays, &manifests.node_pools, catalog, zones)
}

/// Prices in `zones`, with the manifests' NodeOverlays (those in conflict are named on
/// stderr and left out, as Karpenter leaves them out).
pub(crate) fn pricing(zones: Vec<String>, manifests: &Manifests, catalog: &Catalog) -> Pricing {
    let mut pricing = Pricing::for_zones(zones);
    if manifests.node_overlays.is_empty() {
        return pricing;
    }
    let resolution = overlay_resolution(manifests, catalog, &pricing.zones);
    for status in resolution.statuses.iter().filter(|s| !s.succeeded()) {
        eprintln!(
            "warning: NodeOverlay {:?} not applied: {}: {}",
            status.name,
            status.reason(),
            status.message()
        );
    }
    pricing.overlays = std::sync::Arc::new(resolution.table);
    pricing
}

/// Reads a snapshot as a stream: the text is never held whole (a large cluster's is
/// hundreds of megabytes, more than what planning keeps from it).
pub(crate) fn load_snapshot(path: &Path) -> Result<ClusterSnapshot, Failure> {
    let file = std::fs::File::open(path)
        .map_err(|e| Failure::Unusable(format!("{}: cannot read: {e}", path.display())))?;
    parse_snapshot_reader(std::io::BufReader::with_capacity(256 * 1024, file))
        .map_err(|e| Failure::Unusable(format!("{}: {e}", path.display())))
}

/// `--catalog`: `None` means the embedded one.
pub(crate) fn load_catalog(path: Option<&Path>) -> Result<Option<Catalog>, Failure> {
    path.map(|path| {
        Catalog::from_json(&read(path)?)
            .map_err(|e| Failure::Unusable(format!("{}: {e}", path.display())))
    })
    .transpose()
}

/// `--zones`, trimmed; at least one; all availability zones of the catalog's region
/// (the embedded catalog's, us-east-1, unless `custom_catalog`), else exit 1 (a
/// warning with `--lenient`).
pub(crate) fn zones(
    args: &[String],
    custom_catalog: bool,
    strict: manifests::StrictArgs,
) -> Result<Vec<String>, Failure> {
    let zones: Vec<String> = args
        .iter()
        .map(|z| z.trim().to_string())
        .filter(|z| !z.is_empty())
        .collect();
    if zones.is_empty() {
        return Err(Failure::Unusable(
            "--zones: at least one zone is required".into(),
        ));
    }
    let region = (!custom_catalog).then_some(region::EMBEDDED_REGION);
    let problems = region::zone_problems(&zones, region);
    strict.check(
        problems
            .into_iter()
            .map(|p| format!("--zones: {p}"))
            .collect(),
    )?;
    Ok(zones)
}

/// A snapshot holding none of the kinds `command` reads (`kubectl get` of other
/// kinds, or an empty list): exit 1 naming the file (a warning with `--lenient`).
pub(crate) fn need_in_snapshot(
    command: &str,
    path: &Path,
    snapshot: &ClusterSnapshot,
    nodes_needed: bool,
    strict: manifests::StrictArgs,
) -> Result<(), Failure> {
    let what = if nodes_needed {
        snapshot.nodes.is_empty().then_some("no Node")
    } else {
        (snapshot.nodes.is_empty() && snapshot.pods.is_empty()).then_some("no Pod and no Node")
    };
    let Some(what) = what else { return Ok(()) };
    strict.check(vec![format!(
        "{}: {what} in the list: {command} reads the output of `kubectl get pods,nodes,daemonsets,poddisruptionbudgets,pvc,pv,storageclasses,csinodes -A -o json`",
        path.display()
    )])
}

fn plan(args: &PlanArgs) -> Result<(), Failure> {
    let manifests = load_manifests(&args.nodepools, args.strict)?;
    manifests::need_node_pools("plan", &args.nodepools, &manifests, args.strict)?;
    let mut snapshot = load_snapshot(&args.snapshot)?;
    need_in_snapshot("plan", &args.snapshot, &snapshot, false, args.strict)?;
    args.scheduler.apply(&mut snapshot)?;
    let custom = load_catalog(args.catalog.as_deref())?;
    let catalog = custom.as_ref().unwrap_or_else(|| Catalog::embedded());
    let zones = zones(&args.zones, custom.is_some(), args.strict)?;
    let mut pricing = pricing(zones, &manifests, catalog);
    args.capacity.apply(&mut pricing)?;
    let buffers = buffers::Buffers::of(&manifests, &snapshot);
    snapshot.pods.extend(buffers.virtual_pods.iter().cloned());
    let plan = plan_provisioning(&ProvisioningInput {
        snapshot: &snapshot,
        node_pools: &manifests.node_pools,
        node_classes: &manifests.node_classes,
        catalog,
        pricing: &pricing,
        in_flight: &[],
    });
    let statuses = buffer_statuses(&buffers.resolutions, &buffers.virtual_pods, &plan);
    let out = buffers::PlanOutput {
        plan: &plan,
        capacity_buffers: &statuses,
    };
    if !output::emit(&out, args.output)? {
        print!("{}", table::render(&plan, args.output == Output::Wide));
        print!("{}", buffers::render(&statuses));
    }
    Ok(())
}
