//! [`FaultProxy`]: a thin HTTP proxy in front of a real API server, for the faults a
//! real server cannot be made to produce on cue — a 429, a 500, a watch cut in the
//! middle of its stream, a write landing between a client's read and its write — and
//! for counting what a client asks (lists, watches, bytes).
//!
//! It listens on plain HTTP on loopback and forwards every request, headers and body
//! as they came (the client's own `Authorization`, so RBAC sees the client's identity),
//! to the server over TLS. Everything it answers that it did not forward is said in
//! the method that sets it up; everything else is the real server's answer.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use kube::Client;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::ControlPlane;

/// One request the proxy received.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    /// The raw query string ("" when none).
    pub query: String,
    pub content_type: Option<String>,
    pub user_agent: Option<String>,
    /// The body, when it was JSON.
    pub body: Option<Value>,
    /// The status answered (a watch: when its stream started).
    pub status: u16,
    /// A GET with `watch=true` (or `1`): a WATCH rather than a LIST or a GET.
    pub watch: bool,
}

/// A hook run after a request was answered by the server and before the client sees
/// the answer.
pub type Hook = Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

struct Injected {
    method: Option<Method>,
    path: String,
    status: u16,
    /// `Some(true)`: watches only; `Some(false)`: anything but watches.
    watch: Option<bool>,
}

impl Injected {
    fn applies_to(&self, method: &Method, path: &str, watch: bool) -> bool {
        self.path == path
            && self.method.as_ref().is_none_or(|m| m == method)
            && self.watch.is_none_or(|w| w == watch)
    }
}

struct AfterHook {
    method: Method,
    path: String,
    hook: Hook,
}

#[derive(Default)]
struct State {
    failures: VecDeque<Injected>,
    hooks: Vec<AfterHook>,
    log: Vec<RecordedRequest>,
}

struct Shared {
    upstream: Client,
    state: Mutex<State>,
    bytes_served: AtomicU64,
    open_watches: AtomicUsize,
    /// Bumped by `drop_watches`: every watch streaming when it changes is cut.
    cut: watch::Sender<u64>,
    /// While true, no watch's events are passed on (`hold_watches`).
    held: watch::Sender<bool>,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A proxy on `http://127.0.0.1:<ephemeral port>` in front of a control plane, stopped
/// on drop (its open watches cut).
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.drop_watches();
    }
}

impl FaultProxy {
    /// Starts a proxy to `control_plane` on the current tokio runtime.
    pub async fn start(control_plane: &ControlPlane) -> FaultProxy {
        let upstream = upstream_client(control_plane.server(), control_plane.ca_pem());
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port for the proxy");
        let addr = listener.local_addr().expect("the proxy's address");
        let shared = Arc::new(Shared {
            upstream,
            state: Mutex::default(),
            bytes_served: AtomicU64::new(0),
            open_watches: AtomicUsize::new(0),
            cut: watch::channel(0).0,
            held: watch::channel(false).0,
        });
        let accept = tokio::spawn({
            let shared = shared.clone();
            async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    let shared = shared.clone();
                    tokio::spawn(async move {
                        let service = service_fn(move |request| {
                            let shared = shared.clone();
                            async move { Ok::<_, Infallible>(handle(shared, request).await) }
                        });
                        let _ = http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    });
                }
            }
        });
        FaultProxy {
            addr,
            shared,
            accept,
        }
    }

    /// `http://127.0.0.1:PORT`: the endpoint to give a client (no CA: plain HTTP).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The next request for `path` (exact, without query) with `method` ("*" for any)
    /// is answered `status` with a `metav1.Status` body (a 429 with `Retry-After: 1`)
    /// instead of being forwarded. Several calls queue several failures.
    ///
    /// A GET of a collection fails whether it is a list or a watch. A watch failing
    /// with 410 gets what a real server sends for a compacted resourceVersion — a 200
    /// with one ERROR event carrying a `410 Expired` Status, then the end of the
    /// stream — so that a client lists again.
    pub fn fail_next(&self, method: &str, path: &str, status: u16) {
        let method = (method != "*").then(|| method.parse().expect("an HTTP method"));
        self.inject(method, path, status, None);
    }

    /// [`FaultProxy::fail_next`] for the next LIST of the collection `path` only.
    pub fn fail_next_list(&self, path: &str, status: u16) {
        self.inject(Some(Method::GET), path, status, Some(false));
    }

    /// [`FaultProxy::fail_next`] for the next WATCH of the collection `path` only.
    pub fn fail_next_watch(&self, path: &str, status: u16) {
        self.inject(Some(Method::GET), path, status, Some(true));
    }

    fn inject(&self, method: Option<Method>, path: &str, status: u16, watch: Option<bool>) {
        self.shared.state().failures.push_back(Injected {
            method,
            path: path.into(),
            status,
            watch,
        });
    }

    /// Runs `hook` right after the next `method` request to `path` was answered by the
    /// server, before the client sees that answer: a concurrent writer between a
    /// client's read and its write.
    pub fn after_next<F, Fut>(&self, method: &str, path: &str, hook: F)
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.shared.state().hooks.push(AfterHook {
            method: method.parse().expect("an HTTP method"),
            path: path.into(),
            hook: Box::new(move || Box::pin(hook())),
        });
    }

    /// Every request so far, in order (a watch logged when its stream started).
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.state().log.clone()
    }

    /// How many `method` requests went to `path` (lists and watches alike for a GET).
    pub fn count(&self, method: &str, path: &str) -> usize {
        self.count_where(|r| r.method == method && r.path == path)
    }

    /// How many LISTs (GETs without `watch`) went to the collection `path`.
    pub fn count_lists(&self, path: &str) -> usize {
        self.count_where(|r| r.method == "GET" && r.path == path && !r.watch)
    }

    /// How many WATCHes went to the collection `path`, whatever they were answered.
    pub fn count_watches(&self, path: &str) -> usize {
        self.count_where(|r| r.method == "GET" && r.path == path && r.watch)
    }

    fn count_where(&self, counted: impl Fn(&RecordedRequest) -> bool) -> usize {
        self.shared
            .state()
            .log
            .iter()
            .filter(|r| counted(r))
            .count()
    }

    pub fn clear_requests(&self) {
        self.shared.state().log.clear();
    }

    /// Cuts every watch streaming now in the middle of its body (no last chunk), as a
    /// network failure would: the client reads a broken stream and resumes from the
    /// last resourceVersion it saw.
    pub fn drop_watches(&self) {
        self.shared.cut.send_modify(|generation| *generation += 1);
    }

    /// Holds back the events of every watch, streaming now or started later, until
    /// [`FaultProxy::release_watches`]: the server sends, the client reads nothing, as
    /// when a process is frozen or its network stalls. Requests other than watches
    /// pass.
    pub fn hold_watches(&self) {
        self.shared.held.send_replace(true);
    }

    /// Passes on what the watches held back, and everything after.
    pub fn release_watches(&self) {
        self.shared.held.send_replace(false);
    }

    /// How many watches are streaming through the proxy now.
    pub fn open_watches(&self) -> usize {
        self.shared.open_watches.load(Ordering::Relaxed)
    }

    /// Every response body byte sent so far (without HTTP framing): what a client cost
    /// the server.
    pub fn bytes_served(&self) -> u64 {
        self.shared.bytes_served.load(Ordering::Relaxed)
    }
}

/// A client to the server that adds nothing: no token (the client's own is forwarded),
/// no pacing, no retries, no timeout on a response (watches stream for minutes).
fn upstream_client(server: &str, ca_pem: &[u8]) -> Client {
    crate::client::install_crypto_provider();
    let mut config = kube::Config::new(server.parse().expect("the server's URL"));
    config.root_cert = Some(crate::client::parse_ca(ca_pem).expect("the server's CA"));
    config.default_retry = false;
    config.read_timeout = None;
    Client::try_from(config).expect("a client to the control plane")
}

fn is_watch(query: &str) -> bool {
    query
        .split('&')
        .any(|pair| pair == "watch=true" || pair == "watch=1")
}

async fn handle(shared: Arc<Shared>, request: Request<Incoming>) -> Response<ProxyBody> {
    let (parts, body) = request.into_parts();
    let path = parts.uri.path().to_string();
    let query = parts.uri.query().unwrap_or("").to_string();
    let watch = parts.method == Method::GET && is_watch(&query);
    let header = |name: http::header::HeaderName| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let mut record = RecordedRequest {
        method: parts.method.to_string(),
        path: path.clone(),
        query: query.clone(),
        content_type: header(http::header::CONTENT_TYPE),
        user_agent: header(http::header::USER_AGENT),
        body: serde_json::from_slice(&body).ok(),
        status: 0,
        watch,
    };

    let injected = {
        let mut state = shared.state();
        let at = state
            .failures
            .iter()
            .position(|f| f.applies_to(&parts.method, &path, watch));
        at.and_then(|i| state.failures.remove(i))
    };
    if let Some(injected) = injected {
        let response = injected_answer(injected.status, watch);
        record.status = response.status().as_u16();
        shared.state().log.push(record);
        return response.map(|bytes| ProxyBody::whole(&shared, bytes));
    }

    let mut forwarded = Request::builder().method(parts.method.clone()).uri(
        parts
            .uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/"),
    );
    for (name, value) in &parts.headers {
        if name != http::header::HOST {
            forwarded = forwarded.header(name, value);
        }
    }
    let forwarded = forwarded
        .body(kube::client::Body::from(body))
        .expect("a forwarded request");
    let answer = shared.upstream.send(forwarded).await;
    let hook = {
        let mut state = shared.state();
        let at = state
            .hooks
            .iter()
            .position(|h| h.method == parts.method && h.path == path);
        at.map(|i| state.hooks.remove(i))
    };
    if let Some(hook) = hook {
        (hook.hook)().await;
    }
    match answer {
        Ok(response) => {
            record.status = response.status().as_u16();
            shared.state().log.push(record);
            let (parts, body) = response.into_parts();
            let body = if watch && parts.status.is_success() {
                ProxyBody::watch(&shared, body)
            } else {
                ProxyBody::stream(&shared, body)
            };
            Response::from_parts(parts, body)
        }
        Err(error) => {
            record.status = 502;
            shared.state().log.push(record);
            let status = status_body(502, "BadGateway", &format!("proxy: {error}"));
            json_response(502, &status).map(|bytes| ProxyBody::whole(&shared, bytes))
        }
    }
}

fn reason_of(status: u16) -> &'static str {
    match status {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        410 => "Expired",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "Unknown",
    }
}

fn status_body(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code})
}

fn json_response(code: u16, body: &Value) -> Response<Bytes> {
    let mut response = Response::new(Bytes::from(body.to_string()));
    *response.status_mut() = StatusCode::from_u16(code).expect("a status code");
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

/// What an injected failure answers: a `metav1.Status`, or for a watch failing with
/// 410 the ERROR event a real server streams for a compacted resourceVersion.
fn injected_answer(code: u16, watch: bool) -> Response<Bytes> {
    let reason = reason_of(code);
    let status = status_body(code, reason, &format!("injected {code} ({reason})"));
    if watch && code == 410 {
        let event = json!({"type": "ERROR", "object": status});
        return json_response(200, &event);
    }
    let mut response = json_response(code, &status);
    if code == 429 {
        response.headers_mut().insert(
            http::header::RETRY_AFTER,
            http::HeaderValue::from_static("1"),
        );
    }
    response
}

/// Every body the proxy answers: counted, and a watch's cut on `drop_watches`.
pub struct ProxyBody {
    shared: Arc<Shared>,
    content: Content,
}

enum Content {
    Whole(Option<Bytes>),
    Stream(kube::client::Body),
    Watch {
        body: kube::client::Body,
        /// Ready once `drop_watches` was called after the watch started.
        cut: Pin<Box<dyn Future<Output = ()> + Send>>,
        _open: OpenWatch,
        /// Whether events are held back (`hold_watches`), and the wait for their release.
        held: watch::Receiver<bool>,
        release: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    },
}

/// Counts a watch as open while its body lives.
struct OpenWatch(Arc<Shared>);

impl Drop for OpenWatch {
    fn drop(&mut self) {
        self.0.open_watches.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The error a cut watch ends with: hyper drops the connection mid-body.
#[derive(Debug)]
struct Cut;

impl std::fmt::Display for Cut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("watch cut by the proxy")
    }
}

impl std::error::Error for Cut {}

impl ProxyBody {
    fn whole(shared: &Arc<Shared>, bytes: Bytes) -> Self {
        ProxyBody {
            shared: shared.clone(),
            content: Content::Whole(Some(bytes)),
        }
    }

    fn stream(shared: &Arc<Shared>, body: kube::client::Body) -> Self {
        ProxyBody {
            shared: shared.clone(),
            content: Content::Stream(body),
        }
    }

    fn watch(shared: &Arc<Shared>, body: kube::client::Body) -> Self {
        shared.open_watches.fetch_add(1, Ordering::Relaxed);
        let mut receiver = shared.cut.subscribe();
        receiver.mark_unchanged();
        let cut = Box::pin(async move {
            // An error: the proxy is gone, which cuts the watch too.
            let _ = receiver.changed().await;
        });
        ProxyBody {
            shared: shared.clone(),
            content: Content::Watch {
                body,
                cut,
                _open: OpenWatch(shared.clone()),
                held: shared.held.subscribe(),
                release: None,
            },
        }
    }

    fn count(&self, frame: &Frame<Bytes>) {
        if let Some(data) = frame.data_ref() {
            self.shared
                .bytes_served
                .fetch_add(data.len() as u64, Ordering::Relaxed);
        }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl HttpBody for ProxyBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let polled = match &mut this.content {
            Content::Whole(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Content::Stream(body) => Pin::new(body)
                .poll_frame(cx)
                .map(|f| f.map(|r| r.map_err(|e| Box::new(e) as BoxError))),
            Content::Watch {
                body,
                cut,
                held,
                release,
                ..
            } => {
                // Woken when a cut comes, as well as when the server sends.
                if cut.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Some(Err(Box::new(Cut))));
                }
                // Held: the server's events wait (in the connection's buffers) until
                // the release wakes this body.
                if *held.borrow() {
                    let mut receiver = held.clone();
                    let waiting = release.get_or_insert_with(|| {
                        Box::pin(async move {
                            let _ = receiver.wait_for(|held| !*held).await;
                        })
                    });
                    if waiting.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                }
                *release = None;
                Pin::new(body)
                    .poll_frame(cx)
                    .map(|f| f.map(|r| r.map_err(|e| Box::new(e) as BoxError)))
            }
        };
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            this.count(frame);
        }
        polled
    }

    fn size_hint(&self) -> SizeHint {
        match &self.content {
            Content::Whole(Some(bytes)) => SizeHint::with_exact(bytes.len() as u64),
            Content::Whole(None) => SizeHint::with_exact(0),
            _ => SizeHint::default(),
        }
    }
}
