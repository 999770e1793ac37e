//! EKS access: the cluster's endpoint, CA and version (DescribeCluster), and the
//! bearer token the Kubernetes API accepts from an IAM principal.
//!
//! The token is what `aws eks get-token` / aws-iam-authenticator produce:
//! `k8s-aws-v1.` + base64url (no padding) of a SigV4 query-presigned STS
//! `GetCallerIdentity` URL whose signed headers include `x-k8s-aws-id: <cluster>`.
//! The API server accepts it for 15 minutes after signing; [`TokenSource`] renews
//! it when less than 2 minutes remain.

use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_sigv4::http_request::{
    SignableBody, SignableRequest, SignatureLocation, SigningSettings, sign,
};
use aws_sigv4::sign::v4;
use base64::Engine;

use nodewright_engine::ports::{ClusterError, ErrorKind};

use crate::config::AwsContext;
use crate::error::eks_error;

pub const TOKEN_PREFIX: &str = "k8s-aws-v1.";
/// How long EKS accepts a token after it was signed.
pub const TOKEN_VALIDITY: Duration = Duration::from_secs(15 * 60);
/// Renew when less than this is left.
pub const TOKEN_RENEW_BEFORE: Duration = Duration::from_secs(2 * 60);

/// What the Kubernetes client and the launch templates need to know about the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterInfo {
    pub name: String,
    /// `arn:aws:eks:REGION:ACCOUNT:cluster/NAME`: what ARC knows the cluster by (zonal
    /// shifts). `None` where DescribeCluster gave none.
    pub arn: Option<String>,
    /// `https://...eks.amazonaws.com`
    pub endpoint: String,
    /// The cluster CA bundle (PEM), decoded from `certificateAuthority.data`.
    pub ca_pem: Vec<u8>,
    /// Kubernetes version, "1.33".
    pub version: String,
    /// The Kubernetes service CIDR (`kubernetesNetworkConfig.serviceIpv4Cidr`).
    pub service_cidr: Option<String>,
}

impl ClusterInfo {
    /// DescribeCluster.
    pub async fn describe(ctx: &AwsContext, name: &str) -> Result<ClusterInfo, ClusterError> {
        let out = ctx
            .eks
            .describe_cluster()
            .name(name)
            .send()
            .await
            .map_err(|e| eks_error(name, ctx.region().as_deref(), "DescribeCluster", e))?;
        let cluster = out.cluster.ok_or_else(|| {
            ClusterError::new(
                ErrorKind::NotFound,
                format!("DescribeCluster {name}: no cluster"),
            )
        })?;
        let missing = |what: &str| {
            ClusterError::new(
                ErrorKind::Invalid,
                format!("cluster {name} has no {what} yet"),
            )
        };
        let endpoint = cluster.endpoint.ok_or_else(|| missing("endpoint"))?;
        let ca_data = cluster
            .certificate_authority
            .and_then(|c| c.data)
            .ok_or_else(|| missing("certificate authority"))?;
        let ca_pem = base64::engine::general_purpose::STANDARD
            .decode(ca_data.trim())
            .map_err(|e| {
                ClusterError::with_source(
                    ErrorKind::Invalid,
                    format!("cluster {name}: certificateAuthority.data is not base64"),
                    e,
                )
            })?;
        Ok(ClusterInfo {
            arn: cluster.arn,
            name: cluster.name.unwrap_or_else(|| name.to_string()),
            endpoint,
            ca_pem,
            version: cluster.version.ok_or_else(|| missing("version"))?,
            service_cidr: cluster
                .kubernetes_network_config
                .and_then(|n| n.service_ipv4_cidr),
        })
    }
}

/// Produces (and caches) the bearer token for one cluster.
pub struct TokenSource {
    cluster: String,
    region: String,
    credentials: SharedCredentialsProvider,
    cached: Mutex<Option<(String, SystemTime)>>,
}

impl std::fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenSource")
            .field("cluster", &self.cluster)
            .field("region", &self.region)
            .finish()
    }
}

impl TokenSource {
    pub fn new(ctx: &AwsContext, cluster: &str) -> Result<TokenSource, ClusterError> {
        let region = ctx.region().ok_or_else(|| {
            ClusterError::new(
                ErrorKind::Invalid,
                "no AWS region configured (set AWS_REGION)",
            )
        })?;
        let credentials = ctx.config.credentials_provider().ok_or_else(|| {
            ClusterError::new(
                ErrorKind::Unauthorized,
                "no AWS credentials provider configured",
            )
        })?;
        Ok(TokenSource {
            cluster: cluster.to_string(),
            region,
            credentials,
            cached: Mutex::new(None),
        })
    }

    /// A valid token: the cached one if it has more than 2 minutes left, else a new one.
    pub async fn token(&self) -> Result<String, ClusterError> {
        let now = SystemTime::now();
        if let Some((token, valid_until)) = self.cached.lock().expect("token cache lock").as_ref()
            && *valid_until > now + TOKEN_RENEW_BEFORE
        {
            return Ok(token.clone());
        }
        let credentials = self.credentials.provide_credentials().await.map_err(|e| {
            ClusterError::with_source(
                ErrorKind::Unauthorized,
                "loading AWS credentials for the EKS token",
                e,
            )
        })?;
        let mut valid_until = now + TOKEN_VALIDITY;
        if let Some(expiry) = credentials.expiry() {
            valid_until = valid_until.min(expiry);
        }
        let token = presigned_token(&self.cluster, &self.region, &credentials, now)?;
        *self.cached.lock().expect("token cache lock") = Some((token.clone(), valid_until));
        Ok(token)
    }
}

/// The token for `cluster`, signed with `credentials` at `time`. Pure (no clock, no I/O).
pub(crate) fn presigned_token(
    cluster: &str,
    region: &str,
    credentials: &Credentials,
    time: SystemTime,
) -> Result<String, ClusterError> {
    let fail = |what: &str, e: Box<dyn std::error::Error + Send + Sync>| {
        ClusterError::with_source(
            ErrorKind::Other,
            format!("presigning the EKS token: {what}"),
            e,
        )
    };
    let url =
        format!("https://sts.{region}.amazonaws.com/?Action=GetCallerIdentity&Version=2011-06-15");
    let mut settings = SigningSettings::default();
    settings.signature_location = SignatureLocation::QueryParams;
    settings.expires_in = Some(Duration::from_secs(60));
    let identity = credentials.clone().into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name("sts")
        .time(time)
        .settings(settings)
        .build()
        .map_err(|e| fail("signing parameters", e.into()))?
        .into();
    let signable = SignableRequest::new(
        "GET",
        &url,
        std::iter::once(("x-k8s-aws-id", cluster)),
        SignableBody::Bytes(&[]),
    )
    .map_err(|e| fail("request", e.into()))?;
    let (instructions, _signature) = sign(signable, &params)
        .map_err(|e| fail("signing", e.into()))?
        .into_parts();
    let mut request = http::Request::builder()
        .method("GET")
        .uri(&url)
        .header("x-k8s-aws-id", cluster)
        .body(())
        .map_err(|e| fail("request", e.into()))?;
    instructions.apply_to_request_http1x(&mut request);
    let signed_url = request.uri().to_string();
    Ok(format!(
        "{TOKEN_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(signed_url)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_is_a_presigned_sts_get_caller_identity_url_bound_to_the_cluster() {
        let creds = Credentials::new(
            "AKIDEXAMPLE",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            None,
            None,
            "test",
        );
        let time = SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600); // 2026-01-01T00:00:00Z
        let token = presigned_token("prod-cluster", "eu-west-1", &creds, time).unwrap();

        let encoded = token.strip_prefix("k8s-aws-v1.").expect("prefix");
        assert!(!encoded.contains('='), "no padding");
        assert!(
            !encoded.contains('+') && !encoded.contains('/'),
            "url-safe alphabet"
        );
        let url = String::from_utf8(
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(encoded)
                .unwrap(),
        )
        .unwrap();

        assert!(
            url.starts_with("https://sts.eu-west-1.amazonaws.com/?"),
            "{url}"
        );
        assert!(url.contains("Action=GetCallerIdentity"), "{url}");
        assert!(url.contains("Version=2011-06-15"), "{url}");
        assert!(url.contains("X-Amz-Algorithm=AWS4-HMAC-SHA256"), "{url}");
        assert!(
            url.contains(
                "X-Amz-Credential=AKIDEXAMPLE%2F20260101%2Feu-west-1%2Fsts%2Faws4_request"
            ),
            "{url}"
        );
        assert!(url.contains("X-Amz-Date=20260101T000000Z"), "{url}");
        assert!(url.contains("X-Amz-Expires=60"), "{url}");
        let signed = url
            .split("X-Amz-SignedHeaders=")
            .nth(1)
            .unwrap()
            .split('&')
            .next()
            .unwrap();
        assert!(
            signed.split("%3B").any(|h| h == "x-k8s-aws-id"),
            "signed headers {signed}"
        );
        assert!(
            signed.split("%3B").any(|h| h == "host"),
            "signed headers {signed}"
        );
        assert!(url.contains("X-Amz-Signature="), "{url}");

        // Deterministic for fixed inputs; bound to the cluster name.
        assert_eq!(
            token,
            presigned_token("prod-cluster", "eu-west-1", &creds, time).unwrap()
        );
        assert_ne!(
            token,
            presigned_token("other", "eu-west-1", &creds, time).unwrap()
        );
    }
}
