//! `nodewright`: simulate the whole autoscaler on a virtual clock, plan provisioning
//! and decide disruption offline, validate manifests, read interruption events. (The
//! benchmarks are the dev-only `nodewright-bench`, not shipped.)
//!
//! Exit codes: 0 success; 1 the input was read but is invalid (one line per problem),
//! or a simulation broke an end-state invariant (one line each); 2 an input could not
//! be used at all (unreadable, not YAML/JSON, wrong kind, bad flags), with one line
//! naming the file and the problem.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use failure::Failure;

// Planning a big snapshot allocates and frees millions of small strings and vectors;
// glibc's allocator was a fifth of `plan`'s time at 20,000 pods (consolidating and
// unlinking free chunks). mimalloc's thread-local free lists are cheaper. Its v2: v3
// returns freed pages only after a second, so a sub-second command peaked higher.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod buffers;
mod chart;
mod compare;
mod disrupt;
mod event;
mod explain;
mod failure;
mod from_cluster;
#[cfg(feature = "stack")]
mod hints;
mod inputs;
mod manifests;
mod observed;
mod output;
mod plan;
mod region;
mod reservations;
mod scenario;
mod scheduler_config;
mod simulate;
mod stack;
mod status;
mod table;
mod validate;

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
    Plan(plan::PlanArgs),
    /// Decide, dry run, which managed nodes expiration, drift, emptiness and
    /// consolidation would disrupt now, and why every other one stays.
    Disrupt(disrupt::DisruptArgs),
    /// Validate NodePool, EC2NodeClass and NodeOverlay manifests as the API server
    /// does with Karpenter's CRDs (unknown and missing required fields are errors).
    Validate(validate::ValidateArgs),
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Simulate(args) => simulate::run(&args),
        Command::Plan(args) => plan::run(&args),
        Command::Disrupt(args) => disrupt::run(&args),
        Command::Validate(args) => validate::run(&args),
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
