//! The interruption Lambda: configuration and ports are built once per cold start;
//! each SQS batch of EventBridge events runs `Handler::handle`. A failed cold start is
//! logged and reported to Lambda on one line with its `errorType` (`Config.Malformed`...).

use std::process::ExitCode;
use std::sync::Arc;

use lambda_runtime::service_fn;
use nodewright_aws::AwsContext;
use nodewright_engine::InterruptionConfig;
use nodewright_interruption::{Handler, LambdaInvokeTrigger, NoTrigger, ProvisionerTrigger};
use nodewright_lambda::{
    Config, StartupError, build_ports, init_tracing, run_or_report_init_error,
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
    let trigger: Arc<dyn ProvisionerTrigger> = match &config.provisioner_function {
        Some(function) => Arc::new(LambdaInvokeTrigger::new(
            AwsContext::from_env().await,
            function.clone(),
        )),
        None => Arc::new(NoTrigger),
    };
    Ok(Handler {
        cluster_name: config.cluster_name.clone(),
        ports,
        config: InterruptionConfig::default(),
        rebalance: config.rebalance_action,
        trigger,
        dry_run: config.dry_run,
    })
}
