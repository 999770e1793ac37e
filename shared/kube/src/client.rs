//! Building the kube-rs [`Client`] nodewright talks through.
//!
//! Two things differ from `kube::Client::try_default()`:
//!
//! - **No retry layer.** kube-rs retries 429/503/504 by default, up to 15 times with a
//!   backoff that grows to minutes (docs/architecture.md, "Known pitfalls"). A Lambda tick has a
//!   minute; it must learn it is throttled at once and decide itself (the engine backs
//!   off to its next tick). So `Config::default_retry` is off, every request is sent
//!   once, and a 429 comes back as [`ErrorKind::Throttled`] on the first answer. Reads
//!   and writes also get a response timeout, so a hung API server cannot hold a Lambda
//!   until its own timeout.
//! - **A bearer token that changes.** The EKS token is a presigned STS URL valid for
//!   15 minutes, renewed every ~14. kube-rs' own refreshable tokens (exec plugin, token
//!   file, OIDC) cannot be built from outside the crate, so the client carries a small
//!   tower layer that asks a [`TokenProvider`] for the current token on every request
//!   and sets `Authorization`. One client, one connection pool, for the life of the
//!   Lambda; the provider caches and renews (a lookup per request is a read of a
//!   cached string). Rebuilding the client whenever the token changes would also work,
//!   but drops the connection pool every 14 minutes and needs a lock around the client.
//! - **A rate it keeps.** API Priority and Fairness gives each flow (here: the
//!   functions' Kubernetes group) a share of the server's seats; a client that bursts
//!   past it is queued and then refused with 429 for everyone in its priority level.
//!   Requests leave at most [`ApiRate::qps`] per second on average with bursts of
//!   [`ApiRate::burst`] (a token bucket, as client-go's; a watch counts once, when it
//!   starts), so a drain of a hundred pods or a tick's node patches queue here, in
//!   the function, rather than at the API server.
//! - **Who it is.** Every request says `User-Agent: nodewright/<version>`, so audit logs
//!   and a FlowSchema can tell it apart (see `infra/flowschema.yaml`).

use std::future::{Future, poll_fn};
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex as StdMutex};
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use http::header::AUTHORIZATION;
use http::{HeaderValue, Request};
use kube::client::ClientBuilder;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use nodewright_engine::ports::{BoxError, ClusterError, ErrorKind};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use tokio::sync::Mutex;
use tower::{Layer, Service};

/// How long to wait for the API server to answer one request. A page of 500 pods is
/// well under a second on a healthy server; this only bounds a hung one.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long to wait for a TCP (and TLS) connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// `User-Agent` of every request.
pub const USER_AGENT: &str = concat!("nodewright/", env!("CARGO_PKG_VERSION"));

/// How fast the client may send requests: a token bucket of `burst` tokens refilled at
/// `qps` per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ApiRate {
    pub qps: f64,
    pub burst: u32,
}

impl Default for ApiRate {
    /// 20 requests per second, bursts of 40: a quiet minute sends a handful (the view
    /// is watched), a tick's patches and events fit a burst, and a drain's evictions
    /// go out at a pace the API server's default priority levels grant one flow.
    fn default() -> Self {
        ApiRate {
            qps: 20.0,
            burst: 40,
        }
    }
}

/// Where the bearer token for the Kubernetes API comes from. Called before every
/// request: implementations cache the token and renew it before it expires (the EKS
/// token provider in `nodewright-aws` renews at ~14 minutes).
#[async_trait]
pub trait TokenProvider: Send + Sync {
    async fn token(&self) -> Result<String, BoxError>;
}

/// A token that never changes (tests, `kubectl proxy`, service account tokens read once).
#[derive(Debug, Clone)]
pub struct StaticToken(pub String);

#[async_trait]
impl TokenProvider for StaticToken {
    async fn token(&self) -> Result<String, BoxError> {
        Ok(self.0.clone())
    }
}

/// The token provider failed, or gave a token that cannot be sent in a header.
/// Classified as [`ErrorKind::Unauthorized`].
#[derive(Debug, thiserror::Error)]
#[error("no bearer token for the Kubernetes API: {0}")]
pub struct TokenError(#[source] pub BoxError);

/// A client for an API server at `endpoint` (`https://...eks.amazonaws.com`, or
/// `http://127.0.0.1:port` for a test's fault proxy), trusting `ca_pem` (PEM, one or more
/// certificates; the system roots when `None`), authenticating with `tokens`.
pub fn client_for_endpoint(
    endpoint: &str,
    ca_pem: Option<&[u8]>,
    tokens: Arc<dyn TokenProvider>,
    rate: ApiRate,
) -> Result<Client, ClusterError> {
    let url: http::Uri = endpoint.parse().map_err(|e| {
        ClusterError::with_source(
            ErrorKind::Invalid,
            format!("Kubernetes API endpoint {endpoint:?} is not a URL"),
            e,
        )
    })?;
    let mut config = Config::new(url);
    if let Some(pem) = ca_pem {
        config.root_cert = Some(parse_ca(pem)?);
    }
    build(config, Some(tokens), rate)
}

/// A client configured from a kubeconfig file (its current context), for local runs.
/// Exec credential plugins (`aws eks get-token`) are supported by kube-rs itself.
pub async fn client_for_kubeconfig(path: &Path, rate: ApiRate) -> Result<Client, ClusterError> {
    let invalid = |e: kube::config::KubeconfigError| {
        ClusterError::with_source(
            ErrorKind::Invalid,
            format!("reading kubeconfig {}", path.display()),
            e,
        )
    };
    let kubeconfig = Kubeconfig::read_from(path).map_err(invalid)?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(invalid)?;
    build(config, None, rate)
}

pub(crate) fn parse_ca(pem: &[u8]) -> Result<Vec<Vec<u8>>, ClusterError> {
    let invalid = |message: String| ClusterError::new(ErrorKind::Invalid, message);
    let certs = CertificateDer::pem_slice_iter(pem)
        .map(|c| c.map(|der| der.to_vec()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(format!("the cluster CA is not PEM: {e}")))?;
    if certs.is_empty() {
        return Err(invalid("the cluster CA holds no PEM certificate".into()));
    }
    Ok(certs)
}

fn build(
    mut config: Config,
    tokens: Option<Arc<dyn TokenProvider>>,
    rate: ApiRate,
) -> Result<Client, ClusterError> {
    config.default_retry = false;
    config.headers.push((
        http::header::USER_AGENT,
        HeaderValue::from_static(USER_AGENT),
    ));
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    config.read_timeout = Some(RESPONSE_TIMEOUT);
    // Count the read timeout from when a request is written, not from when its pooled
    // connection went idle.
    config.reset_reader_on_write = true;
    install_crypto_provider();
    let builder = ClientBuilder::try_from(config).map_err(|e| {
        ClusterError::with_source(ErrorKind::Invalid, "building the Kubernetes client", e)
    })?;
    Ok(builder
        .with_layer(&BearerLayer {
            tokens,
            bucket: Arc::new(StdMutex::new(Bucket::new(rate))),
        })
        .build())
}

/// client-go's token bucket: `burst` tokens, refilled at `qps` per second. A request
/// takes a token, or reserves the next one and waits for it (tokens go negative, so
/// waiters leave in order, each 1/qps after the one before).
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: tokio::time::Instant,
    rate: ApiRate,
}

impl Bucket {
    fn new(rate: ApiRate) -> Self {
        let rate = ApiRate {
            qps: if rate.qps > 0.0 { rate.qps } else { f64::MAX },
            burst: rate.burst.max(1),
        };
        Bucket {
            tokens: f64::from(rate.burst),
            at: tokio::time::Instant::now(),
            rate,
        }
    }

    /// Takes a token at `now`: how long to wait before sending.
    fn take(&mut self, now: tokio::time::Instant) -> Duration {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.at = now;
        self.tokens = (self.tokens + elapsed * self.rate.qps).min(f64::from(self.rate.burst));
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.rate.qps)
        }
    }
}

/// rustls needs a process-wide crypto provider when more than one is compiled in
/// (the AWS SDK may bring aws-lc-rs next to kube's ring); installing ring when none is
/// set keeps `ClientConfig::builder()` from panicking. Another crate's choice wins.
pub(crate) fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Fails only if another thread installed one in between, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// Paces every request through the token bucket, then sets `Authorization: Bearer
/// <token>` from a [`TokenProvider`] when there is one (a kubeconfig's own auth
/// otherwise).
#[derive(Clone)]
struct BearerLayer {
    tokens: Option<Arc<dyn TokenProvider>>,
    bucket: Arc<StdMutex<Bucket>>,
}

impl<S> Layer<S> for BearerLayer {
    type Service = Bearer<S>;

    fn layer(&self, inner: S) -> Bearer<S> {
        Bearer {
            // kube's stack is a boxed, non-Clone service; the lock is held only while
            // the request is dispatched, never while its response is awaited.
            inner: Arc::new(Mutex::new(inner)),
            tokens: self.tokens.clone(),
            bucket: self.bucket.clone(),
        }
    }
}

struct Bearer<S> {
    inner: Arc<Mutex<S>>,
    tokens: Option<Arc<dyn TokenProvider>>,
    bucket: Arc<StdMutex<Bucket>>,
}

impl<S, B> Service<Request<B>> for Bearer<S>
where
    S: Service<Request<B>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // The inner service's readiness is awaited in `call`, under the lock.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        let inner = self.inner.clone();
        let tokens = self.tokens.clone();
        let wait = self
            .bucket
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take(tokio::time::Instant::now());
        Box::pin(async move {
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            if let Some(tokens) = tokens {
                let token = tokens.token().await.map_err(TokenError)?;
                let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
                    .map_err(|e| TokenError(Box::new(e)))?;
                value.set_sensitive(true);
                request.headers_mut().insert(AUTHORIZATION, value);
            }
            let response = {
                let mut service = inner.lock().await;
                poll_fn(|cx| service.poll_ready(cx))
                    .await
                    .map_err(Into::into)?;
                service.call(request)
            };
            response.await.map_err(Into::into)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_goes_at_once_and_the_rest_at_the_configured_rate() {
        let start = tokio::time::Instant::now();
        let mut bucket = Bucket::new(ApiRate {
            qps: 10.0,
            burst: 3,
        });
        let waits: Vec<Duration> = (0..6).map(|_| bucket.take(start)).collect();
        let ms: Vec<u128> = waits.iter().map(Duration::as_millis).collect();
        assert_eq!(ms, [0, 0, 0, 100, 200, 300]);
        // A second later the bucket has refilled (3 owed, 10 earned, capped at 3).
        let later = start + Duration::from_secs(1);
        let ms: Vec<u128> = (0..4).map(|_| bucket.take(later).as_millis()).collect();
        assert_eq!(ms, [0, 0, 0, 100]);
    }

    #[test]
    fn a_ca_that_is_not_pem_is_invalid() {
        let error = parse_ca(b"not a certificate").unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Invalid);
    }

    #[test]
    fn an_endpoint_that_is_not_a_url_is_invalid() {
        let error = client_for_endpoint(
            "not a url",
            None,
            Arc::new(StaticToken("t".into())),
            ApiRate::default(),
        )
        .err()
        .expect("an error");
        assert_eq!(error.kind(), ErrorKind::Invalid);
    }
}
