//! Builds the engine's ports from the real adapters, once per cold start.

use std::sync::Arc;

use async_trait::async_trait;
use nodewright_aws::{AwsContext, ClusterInfo, DynamoStore, Ec2Cloud, Ec2CloudConfig, TokenSource};
use nodewright_engine::ClaimCache;
use nodewright_engine::context::{Ports, SystemClock};
use nodewright_engine::ports::{BoxError, ClusterError};
use nodewright_kube::{KubeCluster, TokenProvider};

use crate::{Config, ConfigError};

/// Why the function could not start; the cold start fails with this message
/// (see [`crate::run_or_report_init_error`]).
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("reading EKS cluster {cluster:?}")]
    Eks {
        cluster: String,
        #[source]
        source: ClusterError,
    },
    #[error("connecting to the Kubernetes API")]
    Kubernetes(#[source] ClusterError),
}

impl StartupError {
    /// The `errorType` Lambda records for a failed cold start: stable, for alarms and
    /// searches (`Config.Missing`, `Config.Malformed`, `Startup.Eks`, `Startup.Kubernetes`).
    pub fn error_type(&self) -> &'static str {
        match self {
            StartupError::Config(ConfigError::Missing(_)) => "Config.Missing",
            StartupError::Config(ConfigError::Malformed { .. } | ConfigError::Invalid { .. }) => {
                "Config.Malformed"
            }
            StartupError::Eks { .. } => "Startup.Eks",
            StartupError::Kubernetes(_) => "Startup.Kubernetes",
        }
    }
}

/// The IAM bearer token for the Kubernetes API, renewed by `TokenSource` before it expires.
struct EksToken(TokenSource);

#[async_trait]
impl TokenProvider for EksToken {
    async fn token(&self) -> Result<String, BoxError> {
        self.0.token().await.map_err(|e| Box::new(e) as BoxError)
    }
}

/// Ports over DynamoDB, EC2 and the cluster's API server, plus the cluster's EKS facts.
pub async fn build_ports(config: &Config) -> Result<(Ports, ClusterInfo), StartupError> {
    let aws = AwsContext::from_env().await;
    let info = ClusterInfo::describe(&aws, &config.cluster_name)
        .await
        .map_err(|source| StartupError::Eks {
            cluster: config.cluster_name.clone(),
            source,
        })?;
    let cluster = match &config.kubeconfig {
        Some(path) => KubeCluster::from_kubeconfig(path, config.api_rate)
            .await
            .map_err(StartupError::Kubernetes)?,
        None => {
            let tokens = TokenSource::new(&aws, &config.cluster_name).map_err(|source| {
                StartupError::Eks {
                    cluster: config.cluster_name.clone(),
                    source,
                }
            })?;
            KubeCluster::from_endpoint(
                &info.endpoint,
                Some(&info.ca_pem),
                Arc::new(EksToken(tokens)),
                config.api_rate,
            )
            .map_err(StartupError::Kubernetes)?
        }
    };
    let cluster = cluster.with_default_spread(!config.scheduler_config.is_empty());
    let cloud = Ec2Cloud::new(
        &aws,
        Ec2CloudConfig {
            ssm_public_prefix: config.ssm_public_prefix.clone(),
            // A dry run touches nothing: not even IAM.
            manage_instance_profiles: !config.dry_run,
            zonal_shift: config.zonal_shift,
            ..Ec2CloudConfig::default()
        },
        info.clone(),
    );
    let clock: Arc<SystemClock> = Arc::new(SystemClock);
    let table = Arc::new(DynamoStore::new(&aws, config.table_name.clone()));
    // Claims are read once a minute and kept by the function's own writes; the table's
    // claims generation says when another function wrote (see `ClaimCache`). The other
    // concerns go to the table as they are.
    let claims = ClaimCache::new(table.clone(), clock.clone());
    let ports =
        Ports::new(Arc::new(cloud), Arc::new(cluster), table, clock).with_claims(Arc::new(claims));
    Ok((ports, info))
}
