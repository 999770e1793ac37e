//! The provisioner Lambda: configuration and ports are built once per cold start; each
//! scheduled invocation runs `Handler::handle`. A failed cold start is logged and
//! reported to Lambda on one line with its `errorType` (`Config.Malformed`...).

use std::process::ExitCode;

use lambda_runtime::service_fn;
use nodewright_engine::{Provisioner, ProvisionerConfig};
use nodewright_lambda::{
    Config, StartupError, build_ports, heap, holder_id, init_tracing, run_or_report_init_error,
};
use nodewright_provisioner::Handler;

/// Counted, so each invocation's summary says what the process holds between
/// invocations and what the invocation needed on top ([`heap`]).
#[global_allocator]
static ALLOCATOR: heap::CountingAllocator = heap::CountingAllocator;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    init_tracing();
    run_or_report_init_error(handler(), |handler| async move {
        heap::mark_baseline();
        lambda_runtime::run(service_fn(|event| handler.handle(event))).await
    })
    .await
}

async fn handler() -> Result<Handler, StartupError> {
    let config = Config::from_env()?;
    let (ports, _cluster) = build_ports(&config).await?;
    let mut settings = ProvisionerConfig::new(config.cluster_name.clone(), holder_id());
    settings.dry_run = config.dry_run;
    settings.adopt_karpenter_nodes = config.adopt_karpenter_nodes;
    settings.spot_to_spot = config.spot_to_spot;
    settings.node_repair = config.node_repair;
    settings.repair = config.repair;
    settings.min_values_policy = config.min_values_policy;
    settings.scheduler_config = config.scheduler_config.clone();
    Ok(Handler {
        provisioner: Provisioner::new(ports, settings),
        poll_interval: config.poll_interval,
    })
}
