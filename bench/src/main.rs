//! `nodewright-bench`: nodewright's development benchmarks that need the emulators
//! (moto, the fake Kubernetes API server) and the release function binaries. A dev
//! tool: not shipped, not run by `cargo test`.
//!
//! - `lambda`: CPU-seconds, wall time at each Lambda memory size, peak RSS and API
//!   traffic per invocation of the real provisioner or disruption binary.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod lambda;

#[derive(Parser)]
#[command(
    name = "nodewright-bench",
    about = "nodewright's development benchmarks"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a function's release binary as Lambda does, against moto and the fake API
    /// server, and measure each invocation (needs moto: run through tests/moto.sh).
    Lambda(lambda::LambdaArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Lambda(args) => lambda::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nodewright-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
