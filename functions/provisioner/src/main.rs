//! The provisioner Lambda: configuration and ports are built once per cold start; each
//! scheduled invocation runs `Handler::handle`.

use lambda_runtime::{Error, service_fn};
use nodewright_engine::{Provisioner, ProvisionerConfig};
use nodewright_lambda::{Config, build_ports, holder_id, init_tracing};
use nodewright_provisioner::Handler;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    init_tracing();
    let config = Config::from_env()?;
    let (ports, _cluster) = build_ports(&config).await?;
    let mut settings = ProvisionerConfig::new(config.cluster_name.clone(), holder_id());
    settings.dry_run = config.dry_run;
    settings.adopt_karpenter_nodes = config.adopt_karpenter_nodes;
    let handler = Handler {
        provisioner: Provisioner::new(ports, settings),
        poll_interval: config.poll_interval,
    };
    lambda_runtime::run(service_fn(|event| handler.handle(event))).await
}
