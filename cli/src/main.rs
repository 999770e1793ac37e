//! Stand-in main for the `bench` branch: only `nodewright bench ...`. The real CLI main
//! (plan, validate, ...) replaces this file at merge; it only needs to route a `bench`
//! subcommand to `bench::run(&args)`.

mod bench;

use clap::Parser;

#[derive(Parser)]
#[command(name = "nodewright", about = "nodewright command line")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Benchmarks of the planner: speed, peak memory and cost against a lower bound.
    Bench(bench::BenchArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Bench(args) => bench::run(args),
    };
    if let Err(message) = result {
        eprintln!("error: {message}");
        std::process::exit(1);
    }
}
