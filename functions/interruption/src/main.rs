//! The interruption Lambda: configuration and ports are built once per cold start;
//! each SQS batch of EventBridge events runs `Handler::handle`.

use std::sync::Arc;

use lambda_runtime::{Error, service_fn};
use nodewright_aws::AwsContext;
use nodewright_engine::InterruptionConfig;
use nodewright_interruption::{Handler, LambdaInvokeTrigger, NoTrigger, ProvisionerTrigger};
use nodewright_lambda::{Config, build_ports, init_tracing};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    init_tracing();
    let config = Config::from_env()?;
    let (ports, _cluster) = build_ports(&config).await?;
    let trigger: Arc<dyn ProvisionerTrigger> = match &config.provisioner_function {
        Some(function) => Arc::new(LambdaInvokeTrigger::new(
            AwsContext::from_env().await,
            function.clone(),
        )),
        None => Arc::new(NoTrigger),
    };
    let handler = Handler {
        ports,
        config: InterruptionConfig::default(),
        rebalance: config.rebalance_action,
        trigger,
        dry_run: config.dry_run,
    };
    lambda_runtime::run(service_fn(|event| handler.handle(event))).await
}
