//! Building the SDK clients once per cold start.
//!
//! Everything comes from aws-config's standard chain: region and credentials from the
//! Lambda environment, and `AWS_ENDPOINT_URL` (or `AWS_ENDPOINT_URL_<SERVICE>`)
//! redirecting every client to an emulator such as moto, as the SDKs specify.

use aws_config::{BehaviorVersion, SdkConfig};

/// Shared AWS configuration and one client per service nodewright calls (those of the
/// crate's features).
/// SDK types stay inside this crate: pass the context to the adapters' constructors.
#[derive(Clone, Debug)]
pub struct AwsContext {
    pub(crate) config: SdkConfig,
    pub(crate) dynamodb: aws_sdk_dynamodb::Client,
    #[cfg(feature = "ec2")]
    pub(crate) ec2: aws_sdk_ec2::Client,
    #[cfg(feature = "ec2")]
    pub(crate) ssm: aws_sdk_ssm::Client,
    #[cfg(feature = "eks")]
    pub(crate) eks: aws_sdk_eks::Client,
    #[cfg(feature = "lambda")]
    pub(crate) lambda: aws_sdk_lambda::Client,
    #[cfg(feature = "ec2")]
    pub(crate) iam: aws_sdk_iam::Client,
    #[cfg(feature = "ec2")]
    pub(crate) arc: aws_sdk_arczonalshift::Client,
}

impl AwsContext {
    /// Reads the environment (region, credentials, endpoint overrides) the way every
    /// AWS SDK does.
    pub async fn from_env() -> Self {
        let config = aws_config::defaults(BehaviorVersion::latest()).load().await;
        Self::from_sdk_config(config)
    }

    /// Clients for a local emulator (moto): explicit endpoint and region, static
    /// dummy credentials, nothing read from the environment.
    pub async fn for_emulator(endpoint_url: &str, region: &str) -> Self {
        let credentials =
            aws_credential_types::Credentials::new("test", "test", None, None, "emulator");
        let config = aws_config::defaults(BehaviorVersion::latest())
            .endpoint_url(endpoint_url)
            .region(aws_config::Region::new(region.to_string()))
            .credentials_provider(credentials)
            .load()
            .await;
        Self::from_sdk_config(config)
    }

    fn from_sdk_config(config: SdkConfig) -> Self {
        Self {
            dynamodb: aws_sdk_dynamodb::Client::new(&config),
            #[cfg(feature = "ec2")]
            ec2: aws_sdk_ec2::Client::new(&config),
            #[cfg(feature = "ec2")]
            ssm: aws_sdk_ssm::Client::new(&config),
            #[cfg(feature = "eks")]
            eks: aws_sdk_eks::Client::new(&config),
            #[cfg(feature = "lambda")]
            lambda: aws_sdk_lambda::Client::new(&config),
            #[cfg(feature = "ec2")]
            iam: aws_sdk_iam::Client::new(&config),
            #[cfg(feature = "ec2")]
            arc: aws_sdk_arczonalshift::Client::new(&config),
            config,
        }
    }

    /// The region the clients talk to ("us-east-1"), if one is configured.
    pub fn region(&self) -> Option<String> {
        self.config.region().map(|r| r.to_string())
    }
}
