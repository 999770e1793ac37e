//! `nodewright-bench lambda`: what a Lambda user pays for. The real release binary of
//! a function runs as Lambda runs it — one process per execution environment, its
//! events handed over by a Runtime API ([`runtime_api`]), frozen between scheduled
//! invocations ([`process`]) — against moto and a real Kubernetes control plane
//! (etcd and kube-apiserver) holding a steady cluster written through its API
//! ([`world`], [`cluster`], [`load`]), with counting proxies in front of both
//! ([`proxy`]). Each invocation's CPU-seconds are read from /proc and turned into the
//! wall time they take at Lambda's CPU share for each memory size ([`report`]); the
//! control plane's own CPU time and memory are read beside them ([`server`]).
//!
//! Nothing inside the function is faked: it reads its configuration from the
//! environment, describes the EKS cluster, lists, watches and patches through kube-rs
//! as the `nodewright` user (RBAC from infra/rbac.yaml applies), reads and writes
//! DynamoDB and calls EC2 through the SDK, exactly as deployed. What differs from AWS:
//! moto answers at its own speed (slower than AWS at large DescribeInstances, so wall
//! times here are not Lambda's; CPU time is the function's own), the API server shares
//! the machine's cores with the function, and the CPU share is computed, not
//! enforced.
//!
//! ```sh
//! cargo build --release -p nodewright-provisioner -p nodewright-disruption
//! bash tests/moto.sh cargo run --release -p nodewright-bench -- lambda \
//!     --function provisioner --nodes 100,1000 --scenario quiet --invocations 3
//! ```
//!
//! `--function provisioner,disruption` runs both, in that order, on each world: at
//! 10,000 nodes building the world takes most of an hour. `--binary` runs another
//! build (say, one kept from before a change; one path per function); `--json` prints
//! every figure as one JSON document; the functions' logs are kept in `--dir`.

mod cluster;
mod dynamo_units;
mod load;
mod process;
mod proxy;
mod report;
mod runtime_api;
mod server;
mod world;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::ValueEnum;
use serde_json::Value;

use process::FunctionProcess;
use proxy::{Proxy, Upstream};
use report::{Measured, Run, WorldFigures};
use runtime_api::{Invocation, Outcome, RuntimeApi, Signal};
use world::World;

/// The functions' `Timeout` in template.yaml: the deadline each invocation is given.
const PROVISIONER_TIMEOUT: Duration = Duration::from_secs(70);
const DISRUPTION_TIMEOUT: Duration = Duration::from_secs(60);
/// How often a long invocation is reported on stderr while the bench waits.
const PROGRESS_EVERY: Duration = Duration::from_secs(60);
/// A cold start that has not asked for its first event by then has failed.
const INIT_TIMEOUT: Duration = Duration::from_secs(600);
/// A scheduled event as EventBridge delivers it (the functions do not read it).
const SCHEDULED_EVENT: &str =
    include_str!("../../shared/core/tests/fixtures/events/scheduled-tick.json");

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Function {
    Provisioner,
    Disruption,
}

impl Function {
    pub fn binary_name(self) -> &'static str {
        match self {
            Function::Provisioner => "provisioner",
            Function::Disruption => "disruption",
        }
    }

    fn timeout(self) -> Duration {
        match self {
            Function::Provisioner => PROVISIONER_TIMEOUT,
            Function::Disruption => DISRUPTION_TIMEOUT,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    /// Nothing pending, nothing changing: what every minute of an idle cluster costs.
    Quiet,
    /// The first measured invocation starts with a burst of pending pods; the later
    /// ones are the minutes after it.
    Burst,
}

#[derive(clap::Args, Debug)]
pub struct LambdaArgs {
    /// Which functions' release binaries to run, comma-separated: each in turn, cold
    /// then warm, on the same world (a quiet world stays as loaded for the next one
    /// unless the disruption function consolidated it, so give it last).
    #[arg(long, value_enum, value_delimiter = ',', required = true)]
    pub function: Vec<Function>,
    /// Cluster sizes in nodes (25 pods each), comma-separated; one world per size.
    #[arg(long, value_delimiter = ',', default_value = "100")]
    pub nodes: Vec<usize>,
    #[arg(long, value_enum, default_value = "quiet")]
    pub scenario: Scenario,
    /// Measured (warm) invocations after the cold one.
    #[arg(long, default_value_t = 3)]
    pub invocations: usize,
    /// Lambda memory sizes in MB to convert CPU time to wall time for.
    #[arg(long, value_delimiter = ',', default_value = "256,512,1024,1769")]
    pub memory: Vec<u32>,
    /// Seconds the process stays frozen between invocations, standing in for the
    /// rest of the scheduled minute (its clock jumps by this, not by a minute).
    #[arg(long, default_value_t = 3.0)]
    pub gap: f64,
    /// Pending pods created at the start of the first measured invocation (burst).
    #[arg(long, default_value_t = 200)]
    pub burst_pods: usize,
    /// Seconds to wait for an invocation to end before giving up (Lambda would have
    /// stopped it at its timeout; the table marks an invocation that ran past it).
    #[arg(long, default_value_t = 900.0)]
    pub max_wait: f64,
    /// Ask moto every DescribeInstances, however slow, instead of giving its earlier
    /// identical answer again while no EC2 write happened (see the AWS proxy).
    #[arg(long)]
    pub no_replay: bool,
    /// `NODEWRIGHT_POLL_INTERVAL` (template.yaml's default).
    #[arg(long, default_value = "5s")]
    pub poll_interval: String,
    /// The functions' binaries, one per `--function` in its order; default:
    /// target/release/<function> of this workspace.
    #[arg(long, value_delimiter = ',')]
    pub binary: Vec<PathBuf>,
    /// Print one JSON document (every figure) instead of the tables (it is written to
    /// `--dir` either way).
    #[arg(long)]
    pub json: bool,
    /// Where the figures (JSON), the function's logs and the kubeconfig go (default: a
    /// new directory under the system's temporary directory). Kept after the run.
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

pub fn run(args: &LambdaArgs) -> Result<(), String> {
    if args.memory.is_empty() || args.memory.contains(&0) {
        return Err("--memory: give one or more sizes in MB, like 256,512".into());
    }
    let functions = functions_and_binaries(args)?;
    let moto = std::env::var("NODEWRIGHT_MOTO_URL")
        .ok()
        .filter(|u| !u.trim().is_empty())
        .ok_or("NODEWRIGHT_MOTO_URL is not set: run through tests/moto.sh, e.g. bash tests/moto.sh cargo run --release -p nodewright-bench -- lambda ...")?;
    let dir = args.dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("nodewright-bench-{}", std::process::id()))
    });
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    let names: Vec<&str> = functions.iter().map(|(f, _)| f.binary_name()).collect();
    let mut runs = Vec::new();
    for &nodes in &args.nodes {
        eprintln!(
            "nodewright-bench lambda: {} at {nodes} nodes, {:?}",
            names.join(" then "),
            args.scenario
        );
        let world = runtime.block_on(async {
            reset_moto(&moto).await?;
            let consolidating = functions.iter().any(|(f, _)| *f == Function::Disruption);
            World::build(&moto, nodes, consolidating).await
        })?;
        for (function, binary) in &functions {
            let run = runtime.block_on(measure_function(
                args, *function, binary, &moto, &dir, &world,
            ))?;
            if !args.json {
                print!("{}", report::tables(&run, &args.memory));
            }
            runs.push(run);
        }
    }
    let figures = report::json(&runs, &args.memory);
    if args.json {
        println!("{figures}");
    }
    let saved = dir.join(format!(
        "{}-{}.json",
        names.join("-"),
        format!("{:?}", args.scenario).to_lowercase()
    ));
    std::fs::write(&saved, format!("{figures:#}\n"))
        .map_err(|e| format!("cannot write {}: {e}", saved.display()))?;
    eprintln!(
        "figures: {}; logs and kubeconfigs: {}",
        saved.display(),
        dir.display()
    );
    Ok(())
}

/// Each `--function` with the binary it runs, checked to exist.
fn functions_and_binaries(args: &LambdaArgs) -> Result<Vec<(Function, PathBuf)>, String> {
    if !args.binary.is_empty() && args.binary.len() != args.function.len() {
        return Err(format!(
            "--binary: give one path per --function ({} functions, {} binaries)",
            args.function.len(),
            args.binary.len()
        ));
    }
    let mut seen = Vec::new();
    args.function
        .iter()
        .enumerate()
        .map(|(i, &function)| {
            if seen.contains(&function) {
                return Err(format!(
                    "--function: {} is given twice",
                    function.binary_name()
                ));
            }
            seen.push(function);
            let binary = args
                .binary
                .get(i)
                .cloned()
                .unwrap_or_else(|| default_binary(function));
            if !binary.is_file() {
                return Err(format!(
                    "{} does not exist: build it first (cargo build --release -p nodewright-{})",
                    binary.display(),
                    function.binary_name()
                ));
            }
            Ok((function, binary))
        })
        .collect()
}

fn default_binary(function: Function) -> PathBuf {
    crate::child::release_binary(function.binary_name())
}

/// One function on one world (built fresh for each size, moto reset first so earlier
/// sizes' instances do not slow it down): started cold, then invoked as its schedule
/// would.
async fn measure_function(
    args: &LambdaArgs,
    function: Function,
    binary: &Path,
    moto: &str,
    dir: &Path,
    world: &World,
) -> Result<Run, String> {
    let nodes = world.nodes;
    let processes = &world.server;
    let kube = Proxy::start(Upstream::Kubernetes(
        world.control_plane.forwarding_client(),
    ))
    .await
    .map_err(|e| format!("Kubernetes proxy: {e}"))?;
    let aws = Proxy::start(Upstream::Aws {
        url: moto.to_string(),
        replay: !args.no_replay,
    })
    .await
    .map_err(|e| format!("AWS proxy: {e}"))?;
    let mut api = RuntimeApi::start()
        .await
        .map_err(|e| format!("Runtime API: {e}"))?;
    let kubeconfig = world.write_kubeconfig(dir, &kube.url())?;
    let kind = function;
    let function = kind.binary_name();
    let memory = *args.memory.iter().max().unwrap_or(&1769);
    let vars = environment(
        args,
        kind,
        world,
        &kubeconfig,
        &aws.url(),
        api.address(),
        memory,
    );
    let log = dir.join(format!("{function}-{nodes}.log"));
    let mut child = FunctionProcess::start(binary, &vars, &log)?;
    let function_arn =
        format!("arn:aws:lambda:us-east-1:123456789012:function:nodewright-bench-{function}");

    // The cold start: from exec to the first `next`.
    let load_average_before = server::load_average();
    let started = Instant::now();
    let mut server_cpu = processes.cpu_seconds()?;
    let mut server_cpu_since = || -> Result<f64, String> {
        let before = std::mem::replace(&mut server_cpu, processes.cpu_seconds()?);
        Ok(server_cpu - before)
    };
    processes.take_peak_rss();
    let init = match wait_idle(&mut api, &mut child, INIT_TIMEOUT).await? {
        Idle::Waiting(at) => Measured {
            label: "init".into(),
            cpu_s: child.cpu_seconds()?,
            wall_s: (at - started).as_secs_f64(),
            peak_rss_bytes: child.peak_rss_bytes()?,
            kube: kube.take(),
            server_cpu_s: server_cpu_since()?,
            server_peak_rss_bytes: processes.take_peak_rss(),
            aws: aws.take(),
            ..Measured::default()
        },
        Idle::InitError(why) => {
            return Err(format!(
                "{function} failed its cold start: {why} (log: {})",
                log.display()
            ));
        }
    };
    let mut invocations = vec![init];
    for i in 0..=args.invocations {
        // The burst arrives while the environment is frozen before the first measured
        // invocation, which starts with it; the later ones are the minutes after it
        // (with no kubelet here, the launched nodes never register, so their claims
        // stay in motion and every poll ticks).
        let burst = args.scenario == Scenario::Burst && i == 1;
        if i > 0 {
            // The rest of the scheduled minute: Lambda freezes the environment.
            child.freeze()?;
            let frozen = Instant::now();
            if burst {
                world
                    .put(cluster::pending_pods(args.burst_pods))
                    .await
                    .map_err(|e| format!("the burst: {e}"))?;
            }
            let gap = Duration::from_secs_f64(args.gap.max(0.0));
            tokio::time::sleep(gap.saturating_sub(frozen.elapsed())).await;
            child.thaw()?;
        }
        child.reset_peak_rss()?;
        server_cpu_since()?;
        processes.take_peak_rss();
        let cpu_before = child.cpu_seconds()?;
        let load_average = server::load_average()[0];
        let released = Instant::now();
        let request_id = format!("bench-{nodes}-{i}");
        api.release(Invocation {
            request_id: request_id.clone(),
            payload: SCHEDULED_EVENT.trim().to_string(),
            timeout: kind.timeout(),
            function_arn: function_arn.clone(),
        });
        // Lambda would stop an invocation at its timeout; the bench lets it run on, so
        // that what a tick costs is measured even where the emulators are too slow
        // for it (the report marks it).
        let max_wait = Duration::from_secs_f64(args.max_wait.max(1.0));
        let (ended, response, error) =
            wait_outcome(&mut api, &mut child, max_wait, &request_id).await?;
        match wait_idle(&mut api, &mut child, Duration::from_secs(60)).await? {
            Idle::Waiting(_) => {}
            Idle::InitError(why) => return Err(why),
        }
        let cpu_s = child.cpu_seconds()? - cpu_before;
        let aws_traffic = aws.take();
        let first_launch_s = aws_traffic
            .create_fleet_at
            .first()
            .map(|at| at.saturating_duration_since(released).as_secs_f64());
        let measured = Measured {
            label: if i == 0 { "cold".into() } else { i.to_string() },
            cpu_s,
            wall_s: ended.saturating_duration_since(released).as_secs_f64(),
            peak_rss_bytes: child.peak_rss_bytes()?,
            kube: kube.take(),
            server_cpu_s: server_cpu_since()?,
            server_peak_rss_bytes: processes.take_peak_rss(),
            aws: aws_traffic,
            response,
            error,
            first_launch_s,
            burst_pods: if burst { args.burst_pods } else { 0 },
            load_average,
        };
        eprintln!("  {}", report::progress_line(&measured));
        invocations.push(measured);
    }
    child.stop();
    let world_figures = WorldFigures {
        load: world.loaded,
        server_peaks: processes.lifetime_peaks(),
        load_average_before,
        load_average_after: server::load_average(),
    };
    Ok(Run {
        function: function.into(),
        nodes: world.nodes,
        pods: world.pods,
        scenario: format!("{:?}", args.scenario).to_lowercase(),
        poll_interval: args.poll_interval.clone(),
        timeout_s: kind.timeout().as_secs_f64(),
        gap_s: args.gap,
        binary: binary.display().to_string(),
        function_memory_mb: memory,
        log: log.display().to_string(),
        invocations,
        world: world_figures,
    })
}

/// The function's whole environment: what Lambda sets, what template.yaml sets, and
/// where the emulators are (AWS through the counting proxy, Kubernetes through a
/// kubeconfig that names the other proxy).
fn environment(
    args: &LambdaArgs,
    function: Function,
    world: &World,
    kubeconfig: &Path,
    aws_url: &str,
    runtime_api: &str,
    memory: u32,
) -> Vec<(String, String)> {
    let function = function.binary_name();
    [
        ("AWS_LAMBDA_RUNTIME_API", runtime_api.to_string()),
        (
            "AWS_LAMBDA_FUNCTION_NAME",
            format!("nodewright-bench-{function}"),
        ),
        ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", memory.to_string()),
        ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST".into()),
        (
            "AWS_LAMBDA_LOG_GROUP_NAME",
            format!("/aws/lambda/nodewright-bench/{function}"),
        ),
        (
            "AWS_LAMBDA_LOG_STREAM_NAME",
            format!("bench/{}", std::process::id()),
        ),
        ("AWS_REGION", cluster::REGION.into()),
        ("AWS_DEFAULT_REGION", cluster::REGION.into()),
        ("AWS_ACCESS_KEY_ID", "test".into()),
        ("AWS_SECRET_ACCESS_KEY", "test".into()),
        ("AWS_EC2_METADATA_DISABLED", "true".into()),
        ("AWS_ENDPOINT_URL", aws_url.to_string()),
        ("NODEWRIGHT_CLUSTER_NAME", world.cluster.clone()),
        ("NODEWRIGHT_TABLE_NAME", world.table.clone()),
        ("NODEWRIGHT_KUBECONFIG", kubeconfig.display().to_string()),
        ("NODEWRIGHT_SSM_PUBLIC_PREFIX", world.ssm_prefix.clone()),
        ("NODEWRIGHT_POLL_INTERVAL", args.poll_interval.clone()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    // The bench's own `RUST_LOG`, when set, is the function's too (a run's debug log).
    .chain(
        std::env::var("RUST_LOG")
            .ok()
            .map(|v| ("RUST_LOG".into(), v)),
    )
    .collect()
}

async fn reset_moto(moto: &str) -> Result<(), String> {
    // moto keeps state for the server's life; its reset endpoint wipes it.
    let uri: http::Uri = format!("{moto}/moto-api/reset")
        .parse()
        .map_err(|e| format!("moto URL {moto:?}: {e}"))?;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let request = http::Request::post(uri)
        .body(http_body_util::Full::default())
        .map_err(|e| e.to_string())?;
    let response = client
        .request(request)
        .await
        .map_err(|e| format!("resetting moto: {e}"))?;
    if !response.status().is_success() {
        return Err(format!("resetting moto: {}", response.status()));
    }
    Ok(())
}

enum Idle {
    /// The function asked for its next event at this time.
    Waiting(Instant),
    InitError(String),
}

/// Waits until the function asks for its next event (it is idle from then on).
async fn wait_idle(
    api: &mut RuntimeApi,
    child: &mut FunctionProcess,
    timeout: Duration,
) -> Result<Idle, String> {
    let end = Instant::now() + timeout;
    loop {
        let signal = tokio::time::timeout(Duration::from_millis(250), api.signal()).await;
        match signal {
            Ok(Some(Signal::Waiting(at))) => return Ok(Idle::Waiting(at)),
            Ok(Some(Signal::Ended(Outcome::InitError { error_type, body }))) => {
                return Ok(Idle::InitError(format!("{error_type}: {body}")));
            }
            Ok(Some(Signal::Ended(other))) => {
                return Err(format!("unexpected {other:?} while waiting for `next`"));
            }
            Ok(None) => return Err("the Runtime API stopped".into()),
            Err(_) => {}
        }
        if let Some(status) = child.exited() {
            return Err(format!("the function exited ({status})"));
        }
        if Instant::now() > end {
            return Err(format!(
                "the function did not ask for an event within {timeout:?}"
            ));
        }
    }
}

/// Waits for the invocation's response or error: (when, response body, error body).
async fn wait_outcome(
    api: &mut RuntimeApi,
    child: &mut FunctionProcess,
    timeout: Duration,
    request_id: &str,
) -> Result<(Instant, Option<Value>, Option<String>), String> {
    let started = Instant::now();
    let end = started + timeout;
    let mut next_note = started + PROGRESS_EVERY;
    loop {
        let signal = tokio::time::timeout(Duration::from_millis(250), api.signal()).await;
        match signal {
            Ok(Some(Signal::Ended(Outcome::Response {
                request_id: id,
                body,
                at,
            }))) if id == request_id => {
                return Ok((at, serde_json::from_str(&body).ok(), None));
            }
            Ok(Some(Signal::Ended(Outcome::Error {
                request_id: id,
                body,
                at,
            }))) if id == request_id => {
                return Ok((at, None, Some(body)));
            }
            Ok(Some(other)) => {
                return Err(format!(
                    "unexpected {other:?} during invocation {request_id}"
                ));
            }
            Ok(None) => return Err("the Runtime API stopped".into()),
            Err(_) => {}
        }
        if let Some(status) = child.exited() {
            return Err(format!(
                "the function exited during invocation {request_id} ({status})"
            ));
        }
        if Instant::now() > next_note {
            next_note += PROGRESS_EVERY;
            eprintln!(
                "  invocation {request_id} still running after {:.0} s ({:.1} CPU-s so far in the process)",
                started.elapsed().as_secs_f64(),
                child.cpu_seconds().unwrap_or(0.0)
            );
        }
        if Instant::now() > end {
            return Err(format!(
                "invocation {request_id} did not end within {timeout:?}"
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadlines_are_the_templates_timeouts() {
        let template = include_str!("../../template.yaml");
        let timeout_of = |function: &str| {
            template
                .split(&format!("\n  {function}:\n"))
                .nth(1)
                .and_then(|rest| {
                    rest.lines()
                        .find_map(|l| l.trim().strip_prefix("Timeout:"))
                        .and_then(|t| t.trim().parse::<u64>().ok())
                })
        };
        assert_eq!(
            timeout_of("ProvisionerFunction"),
            Some(PROVISIONER_TIMEOUT.as_secs())
        );
        assert_eq!(
            timeout_of("DisruptionFunction"),
            Some(DISRUPTION_TIMEOUT.as_secs())
        );
    }
}
