//! The disruption Lambda: configuration and ports are built once per cold start; each
//! scheduled invocation decides once (`Handler::handle`) and exits. A failed cold
//! start is reported to Lambda on one line with its `errorType`.

use std::process::ExitCode;

use lambda_runtime::service_fn;
use nodewright_disruption::Handler;
use nodewright_engine::{Disrupter, DisruptionConfig};
use nodewright_lambda::{
    Config, StartupError, build_ports, holder_id, init_tracing, run_or_report_init_error,
};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    init_tracing();
    run_or_report_init_error(handler(), |handler| async move {
        lambda_runtime::run(service_fn(|event| handler.handle(event))).await
    })
    .await
}

async fn handler() -> Result<Handler, StartupError> {
    let config = Config::from_env()?;
    let (ports, _cluster) = build_ports(&config).await?;
    let mut settings = DisruptionConfig::new(config.cluster_name.clone(), holder_id());
    settings.dry_run = config.dry_run;
    settings.spot_to_spot = config.spot_to_spot;
    Ok(Handler {
        disrupter: Disrupter::new(ports, settings),
    })
}
