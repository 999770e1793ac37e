//! `nodewright-bench`: nodewright's development benchmarks, kept out of the shipped
//! `nodewright` binary. A dev tool: not shipped, not run by `cargo test` (its tests run
//! each suite at a tiny size).
//!
//! - `synthetic`, `real`: planning speed, `plan_provisioning` timed in this process on
//!   Karpenter's benchmark shape and on the embedded catalog (`speed`).
//! - `memory`: peak RSS of a fresh process planning 10,000 pods (`memory`).
//! - `cost`: plan cost against the cheapest fractional fleet (`cost`).
//! - `command`, `disrupt`: the whole `nodewright plan` / `nodewright disrupt` command
//!   as a user runs it, on files, as a child process: wall, peak RSS, CPU-seconds.
//! - `prepared`: the scheduler prepared once and solved many times, as consolidation
//!   uses it (`prepared`).
//! - `all`: every suite above but `disrupt`.
//! - `lambda`: CPU-seconds, wall time at each Lambda memory size, peak RSS and API
//!   traffic per invocation of the real provisioner or disruption binary, against moto
//!   and a real Kubernetes control plane (etcd and kube-apiserver).
//!
//! Workloads come from the simulator's generator and RNG (`nodewright_sim`);
//! `workload` holds what only the benchmarks use.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Args, Parser, Subcommand};

mod child;
mod command;
mod cost;
mod disrupt;
mod kube_json;
mod lambda;
mod memory;
mod prepared;
mod report;
mod speed;
mod workload;

use report::Report;
use workload::Shape;

// The allocator `nodewright` runs on: the in-process suites (planning speed, memory)
// measure the planner as the command runs it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "nodewright-bench",
    about = "nodewright's development benchmarks"
)]
struct Cli {
    #[command(subcommand)]
    action: Action,
}

#[derive(Subcommand)]
enum Action {
    /// Planning speed on Karpenter's scheduling-benchmark shape (400 fake types).
    Synthetic(SyntheticArgs),
    /// Planning speed and cost on the embedded AWS catalog with a mixed workload.
    Real(RealArgs),
    /// Peak RSS of a fresh process planning the real workload once.
    Memory(MemoryArgs),
    /// Plan cost ÷ the cheapest fractional fleet (LP lower bound).
    Cost(Output),
    /// Whole-command figures: `nodewright plan` run as a user runs it, on snapshot files.
    Command(CommandArgs),
    /// Whole-command figures of `nodewright disrupt` on fragmented clusters.
    Disrupt(DisruptArgs),
    /// The scheduler prepared once and solved many times (consolidation's speculative
    /// solves) on 1,000 nodes / 30,000 bound pods.
    Prepared(PreparedArgs),
    /// Every suite but `disrupt` and `lambda`, at their default sizes.
    All(AllArgs),
    /// Run a function's release binary as Lambda does, against moto and a real
    /// Kubernetes control plane, and measure each invocation (needs a moto of its own,
    /// which it resets before each size: run through tests/moto.sh; the control plane
    /// is built with Go by tests/kube/build.sh).
    Lambda(lambda::LambdaArgs),
    /// Internal: plan the real workload once and print VmRSS/VmHWM (used by `memory`).
    #[command(hide = true)]
    MemoryChild {
        #[arg(long, default_value_t = memory::DEFAULT_PODS)]
        pods: usize,
    },
    /// Internal: run the command after `--` and print its wall time and peak RSS (used
    /// by `command` and `disrupt`, so the measured child is spawned by a small process).
    #[command(hide = true)]
    RunChild {
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
}

#[derive(Args, Clone, Copy)]
struct Output {
    /// Also print one JSON object per figure on stdout (the table then goes to stderr).
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct SyntheticArgs {
    /// Pod counts (comma separated).
    #[arg(long, value_delimiter = ',', default_values_t = speed::DEFAULT_SYNTHETIC_SIZES)]
    sizes: Vec<usize>,
    /// Pod mix.
    #[arg(long, value_enum, default_value = "both")]
    shape: Shape,
    #[command(flatten)]
    output: Output,
}

#[derive(Args)]
struct RealArgs {
    /// Pod counts (comma separated).
    #[arg(long, value_delimiter = ',', default_values_t = speed::DEFAULT_REAL_SIZES)]
    sizes: Vec<usize>,
    #[command(flatten)]
    output: Output,
}

#[derive(Args)]
struct MemoryArgs {
    /// Pods the child process plans.
    #[arg(long, default_value_t = memory::DEFAULT_PODS)]
    pods: usize,
    #[command(flatten)]
    output: Output,
}

/// The `nodewright` binary the whole-command suites run.
#[derive(Args)]
struct Binary {
    /// The `nodewright` binary to measure; default: target/release/nodewright of this
    /// workspace (`cargo build --release -p nodewright-cli`).
    #[arg(long)]
    binary: Option<PathBuf>,
}

#[derive(Args)]
struct CommandArgs {
    /// Runs of each case: best wall, highest peak RSS.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Pending pods of the Karpenter-shape cases (comma separated).
    #[arg(long, value_delimiter = ',', default_values_t = command::DEFAULT_PENDING)]
    pending: Vec<usize>,
    /// Nodes of the cluster cases, 25 pods each (comma separated).
    #[arg(long, value_delimiter = ',', default_values_t = command::DEFAULT_NODES)]
    nodes: Vec<usize>,
    /// Write the snapshot, NodePool and catalog files here and keep them (default: a
    /// temporary directory, removed afterwards).
    #[arg(long)]
    dir: Option<PathBuf>,
    #[command(flatten)]
    binary: Binary,
    #[command(flatten)]
    output: Output,
}

#[derive(Args)]
struct DisruptArgs {
    /// Cluster sizes in nodes (comma separated; 10000 writes a 1.9 GB snapshot).
    #[arg(long, value_delimiter = ',', default_values_t = disrupt::DEFAULT_SIZES)]
    nodes: Vec<usize>,
    /// Write the snapshot, NodePool and decision files here and keep them (default: a
    /// temporary directory, removed afterwards).
    #[arg(long)]
    dir: Option<PathBuf>,
    #[command(flatten)]
    binary: Binary,
    #[command(flatten)]
    output: Output,
}

#[derive(Args)]
struct PreparedArgs {
    /// Nodes of the cluster (30 workload pods each).
    #[arg(long, default_value_t = prepared::DEFAULT_NODES)]
    nodes: usize,
    #[command(flatten)]
    output: Output,
}

#[derive(Args)]
struct AllArgs {
    /// Runs of each whole-command case.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    #[command(flatten)]
    binary: Binary,
    #[command(flatten)]
    output: Output,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.action {
        Action::Lambda(args) => lambda::run(args),
        Action::MemoryChild { pods } => memory::child(*pods),
        Action::RunChild { command } => child::run_child(command),
        suite => run_suite(suite),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nodewright-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// One planner suite (or `all`): its table, then the time it took; fails on a broken
/// plan or a failed measurement, not on a target missed.
fn run_suite(suite: &Action) -> Result<(), String> {
    let started = Instant::now();
    let mut out = Report::new(match suite {
        Action::Synthetic(a) => a.output.json,
        Action::Real(a) => a.output.json,
        Action::Memory(a) => a.output.json,
        Action::Cost(o) => o.json,
        Action::Command(a) => a.output.json,
        Action::Disrupt(a) => a.output.json,
        Action::Prepared(a) => a.output.json,
        Action::All(a) => a.output.json,
        _ => false,
    });
    match suite {
        Action::Synthetic(a) => speed::synthetic(&mut out, a.shape, &a.sizes),
        Action::Real(a) => speed::real(&mut out, &a.sizes),
        Action::Memory(a) => memory::suite(&mut out, a.pods),
        Action::Cost(_) => cost::suite(&mut out),
        Action::Command(a) => command::suite(
            &mut out,
            &command::Options {
                binary: &child::nodewright_binary(a.binary.binary.as_deref())?,
                runs: a.runs,
                keep_in: a.dir.as_deref(),
                pending: &a.pending,
                nodes: &a.nodes,
            },
        ),
        Action::Disrupt(a) => disrupt::suite(
            &mut out,
            &child::nodewright_binary(a.binary.binary.as_deref())?,
            &a.nodes,
            a.dir.as_deref(),
        ),
        Action::Prepared(a) => prepared::suite(&mut out, a.nodes),
        Action::All(a) => {
            speed::synthetic(&mut out, Shape::Both, &speed::DEFAULT_SYNTHETIC_SIZES);
            speed::real(&mut out, &speed::DEFAULT_REAL_SIZES);
            memory::suite(&mut out, memory::DEFAULT_PODS);
            cost::suite(&mut out);
            match child::nodewright_binary(a.binary.binary.as_deref()) {
                Ok(binary) => command::suite(
                    &mut out,
                    &command::Options {
                        binary: &binary,
                        runs: a.runs,
                        keep_in: None,
                        pending: &command::DEFAULT_PENDING,
                        nodes: &command::DEFAULT_NODES,
                    },
                ),
                Err(e) => out.fail(format!("command: {e}")),
            }
            prepared::suite(&mut out, prepared::DEFAULT_NODES);
        }
        Action::Lambda(_) | Action::MemoryChild { .. } | Action::RunChild { .. } => {}
    }
    out.line(&format!(
        "\nbench finished in {:.1} s",
        started.elapsed().as_secs_f64()
    ));
    out.finish()
}
