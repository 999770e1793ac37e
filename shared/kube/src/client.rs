//! Building the kube-rs [`Client`] nodewright talks through.
//!
//! Two things differ from `kube::Client::try_default()`:
//!
//! - **No retry layer.** kube-rs retries 429/503/504 by default, up to 15 times with a
//!   backoff that grows to minutes (see DESIGN "Known pitfalls"). A Lambda tick has a
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

use std::future::{Future, poll_fn};
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
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
/// `http://127.0.0.1:port` for the fake), trusting `ca_pem` (PEM, one or more
/// certificates; the system roots when `None`), authenticating with `tokens`.
pub fn client_for_endpoint(
    endpoint: &str,
    ca_pem: Option<&[u8]>,
    tokens: Arc<dyn TokenProvider>,
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
    build(config, Some(tokens))
}

/// A client configured from a kubeconfig file (its current context), for local runs.
/// Exec credential plugins (`aws eks get-token`) are supported by kube-rs itself.
pub async fn client_for_kubeconfig(path: &Path) -> Result<Client, ClusterError> {
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
    build(config, None)
}

fn parse_ca(pem: &[u8]) -> Result<Vec<Vec<u8>>, ClusterError> {
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
) -> Result<Client, ClusterError> {
    config.default_retry = false;
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    config.read_timeout = Some(RESPONSE_TIMEOUT);
    // Count the read timeout from when a request is written, not from when its pooled
    // connection went idle.
    config.reset_reader_on_write = true;
    install_crypto_provider();
    let builder = ClientBuilder::try_from(config).map_err(|e| {
        ClusterError::with_source(ErrorKind::Invalid, "building the Kubernetes client", e)
    })?;
    Ok(match tokens {
        Some(tokens) => builder.with_layer(&BearerLayer { tokens }).build(),
        None => builder.build(),
    })
}

/// rustls needs a process-wide crypto provider when more than one is compiled in
/// (the AWS SDK may bring aws-lc-rs next to kube's ring); installing ring when none is
/// set keeps `ClientConfig::builder()` from panicking. Another crate's choice wins.
fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Fails only if another thread installed one in between, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// Sets `Authorization: Bearer <token>` from a [`TokenProvider`] on every request.
#[derive(Clone)]
struct BearerLayer {
    tokens: Arc<dyn TokenProvider>,
}

impl<S> Layer<S> for BearerLayer {
    type Service = Bearer<S>;

    fn layer(&self, inner: S) -> Bearer<S> {
        Bearer {
            // kube's stack is a boxed, non-Clone service; the lock is held only while
            // the request is dispatched, never while its response is awaited.
            inner: Arc::new(Mutex::new(inner)),
            tokens: self.tokens.clone(),
        }
    }
}

struct Bearer<S> {
    inner: Arc<Mutex<S>>,
    tokens: Arc<dyn TokenProvider>,
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
        Box::pin(async move {
            let token = tokens.token().await.map_err(TokenError)?;
            let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
                .map_err(|e| TokenError(Box::new(e)))?;
            value.set_sensitive(true);
            request.headers_mut().insert(AUTHORIZATION, value);
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
    fn a_ca_that_is_not_pem_is_invalid() {
        let error = parse_ca(b"not a certificate").unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Invalid);
    }

    #[test]
    fn an_endpoint_that_is_not_a_url_is_invalid() {
        let error = client_for_endpoint("not a url", None, Arc::new(StaticToken("t".into())))
            .err()
            .expect("an error");
        assert_eq!(error.kind(), ErrorKind::Invalid);
    }
}
