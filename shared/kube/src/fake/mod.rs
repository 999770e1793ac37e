//! A fake Kubernetes API server for tests: real HTTP/1.1 on 127.0.0.1, so kube-rs talks
//! to it exactly as to a cluster (no kube-apiserver can be installed on the build
//! machines; see DESIGN "Testing").
//!
//! It serves, for the kinds in [`store::default_resource_types`] (built-in kinds and
//! CRDs alike):
//! - list (`GET /api/v1/nodes`, `/api/v1/pods`, `/api/v1/namespaces/{ns}/pods`,
//!   `/apis/{group}/{version}/...`) with `limit`/`continue` and the list's
//!   `metadata.resourceVersion`; items of built-in kinds have no `apiVersion`/`kind`.
//!   Always from the current state: `resourceVersion=0` and `NotOlderThan` as a real
//!   server's watch cache would (and `limit` pages even with `resourceVersion=0`), an
//!   `Exact` resourceVersion too — but one older than the history reaches (compacted)
//!   is answered 410 Expired, as etcd's compaction makes a real server answer;
//! - list and watch selectors: `fieldSelector` of equality terms (`spec.nodeName=x`,
//!   `a!=b`, ANDed) and `labelSelector` (`a=b`, `a!=b`, `a in (x,y)`, `a notin (x)`,
//!   `a`, `!a`, ANDed; 400 when it does not parse) — see `selector`;
//! - watch (`GET <any list path>?watch=true`, or `watch=1`), as a real server streams it
//!   (see `watch`): a 200 `application/json` chunked body, one event per line,
//!   `{"type":"ADDED"|"MODIFIED"|"DELETED"|"BOOKMARK"|"ERROR","object":{...}}`, whose
//!   objects carry `apiVersion` and `kind`. `resourceVersion` "" or "0" (or absent)
//!   starts with an ADDED event per current object; `resourceVersion=R` replays the
//!   changes after R from the history, then streams the new ones; an R older than the
//!   history is answered one ERROR event (`410 Expired`, "too old resource version:
//!   R (S)") in a 200, and the stream ends. A DELETED event carries the object as last
//!   stored with the deletion's resourceVersion; with a selector, an object that stops
//!   matching is DELETED and one that starts is ADDED, as the watch cache sends them.
//!   `allowWatchBookmarks=true` gets a BOOKMARK at the current revision every
//!   [`FakeApiServer::set_bookmark_interval`] (1 s by default; a real server: ~1 min)
//!   and on [`FakeApiServer::bookmark_now`]; `timeoutSeconds` ends the stream cleanly
//!   after that long (no timeout without it). `sendInitialEvents=true` sends the
//!   current objects then a BOOKMARK annotated `k8s.io/initial-events-end` (kube-rs's
//!   streaming list); a resourceVersion newer than the store's is not refused (the
//!   watch waits for it), where a real server would answer "too large resource
//!   version" after a few seconds;
//! - the history: every change to the store (every write a request makes, and a test's
//!   `put`/`modify`/`remove`, hooks, `with_store`) has its revision and is kept, the
//!   last [`DEFAULT_HISTORY_LIMIT`] of them ([`FakeApiServer::set_history_limit`]);
//!   [`FakeApiServer::compact`] forgets all of it, as an etcd compaction does, so any
//!   older resourceVersion gets 410. Writers never wait for a watch: each has an
//!   unbounded queue of shared events;
//! - get, create (`POST`, 409 AlreadyExists), replace (`PUT`, 409 Conflict when
//!   `metadata.resourceVersion` is stale), patch (merge, strategic merge, JSON patch;
//!   a `metadata.resourceVersion` in a merge or strategic patch is a precondition);
//! - delete (`DELETE`): the object goes at once — a pod's `gracePeriodSeconds` is
//!   recorded in the request log but not waited for (a real kubelet would take up to
//!   that long to stop the containers, and the pod would linger with a
//!   `deletionTimestamp`);
//! - eviction (`POST /api/v1/namespaces/{ns}/pods/{name}/eviction`) with the
//!   PodDisruptionBudget check of `nodewright_core::cluster::eviction_allowed` (the
//!   disruption controller's arithmetic over the pods stored now): 201 and the pod is
//!   gone, or 429 TooManyRequests with the real server's `Status` and a
//!   `DisruptionBudget` cause;
//! - the `/status` subresource (get, replace, patch) of the kinds that have one: a
//!   status write changes only `.status`, a write to the object itself leaves `.status`
//!   alone, and custom resources get `metadata.generation` (bumped by spec changes
//!   only), so `observedGeneration` can be tested;
//! - `GET /version`; 404 with a `Status` body for anything else (an uninstalled CRD:
//!   uninstalling deletes its objects, DELETED events and all, and ends its watches).
//!
//! And for tests:
//! - one-shot injected errors per path ([`FakeApiServer::fail_next`], which fails
//!   watches too: 410 as the real ERROR event, to force a re-list;
//!   [`FakeApiServer::fail_next_list`] and [`FakeApiServer::fail_next_watch`] for
//!   one of the two, as a client's background watch would take the failure meant for
//!   its list), hooks that run
//!   after a request ([`FakeApiServer::after_next`], e.g. a concurrent writer; after a
//!   watch request, the hook's writes are streamed to it), and a log of every request
//!   ([`RecordedRequest::watch`] tells watches; logged when they start);
//! - watch controls: [`FakeApiServer::drop_watches`] (breaks every stream mid-body, as
//!   a network failure would), [`FakeApiServer::open_watches`],
//!   [`FakeApiServer::count_lists`], [`FakeApiServer::count_watches`];
//! - [`FakeApiServer::bytes_served`]: every response body byte sent, for benchmarks.
//!
//! Requests are routed to [`Route`] (resource type, namespace, name, subresource) and
//! then to a handler by method. The state is behind one std mutex, held only while a
//! request is handled — never while a watch streams.
//!
//! hyper 1 + hyper-util rather than axum: kube-rs already builds hyper and hyper-util,
//! so the server costs two features, not a framework; and the API paths are one regular
//! grammar that a 30-line parser routes more exactly than a table of axum routes.

mod events;
mod patch;
mod selector;
pub mod store;
mod watch;

use std::collections::VecDeque;
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

pub use events::DEFAULT_HISTORY_LIMIT;
pub use store::{ResourceType, Store};

use selector::Selectors;
use store::{ObjectKey, key};
use watch::WatchBody;

/// What the fake answers on `/version`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    pub major: String,
    pub minor: String,
    pub git_version: String,
}

impl Default for Version {
    fn default() -> Self {
        // What EKS answers.
        Version {
            major: "1".into(),
            minor: "33+".into(),
            git_version: "v1.33.5-eks-3025e55".into(),
        }
    }
}

/// One request the fake received.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    /// The raw query string ("" when none).
    pub query: String,
    pub content_type: Option<String>,
    pub authorization: Option<String>,
    /// The `User-Agent` header.
    pub user_agent: Option<String>,
    /// The body, when it was JSON.
    pub body: Option<Value>,
    /// The status answered (200 for a watch that started streaming, logged when it
    /// started).
    pub status: u16,
    /// A GET with `watch=true` (or `1`): a WATCH rather than a LIST or a GET.
    pub watch: bool,
}

type Hook = Box<dyn FnOnce(&mut Store) + Send>;

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

/// How often a watch that allows bookmarks gets one unless told otherwise. A real
/// server sends one about every minute; a second keeps tests short.
pub const DEFAULT_BOOKMARK_INTERVAL: Duration = Duration::from_secs(1);

struct State {
    store: Store,
    version: Version,
    failures: VecDeque<Injected>,
    hooks: Vec<AfterHook>,
    log: Vec<RecordedRequest>,
    bookmark_interval: Duration,
}

impl Default for State {
    fn default() -> Self {
        State {
            store: Store::default(),
            version: Version::default(),
            failures: VecDeque::new(),
            hooks: Vec::new(),
            log: Vec::new(),
            bookmark_interval: DEFAULT_BOOKMARK_INTERVAL,
        }
    }
}

/// What the server's tasks share: the state behind one lock (only ever held briefly,
/// never across an await or while a watch streams), and the byte count outside it.
#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    bytes_served: AtomicU64,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A fake Kubernetes API server on `127.0.0.1:<ephemeral port>`, stopped on drop.
pub struct FakeApiServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

impl Drop for FakeApiServer {
    /// Stops accepting, and breaks the open watches as a server going away would
    /// (their connections would otherwise outlive the server).
    fn drop(&mut self) {
        self.accept.abort();
        self.drop_watches();
    }
}

impl FakeApiServer {
    /// Binds an ephemeral port and serves in the background (on the current tokio
    /// runtime).
    pub async fn start() -> std::io::Result<FakeApiServer> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        let accepting = shared.clone();
        let accept = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let shared = accepting.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request| {
                        let shared = shared.clone();
                        async move { Ok::<_, Infallible>(serve(&shared, request).await) }
                    });
                    // A client hanging up mid-request is not the fake's problem.
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(FakeApiServer {
            addr,
            shared,
            accept,
        })
    }

    /// `http://127.0.0.1:<port>`, the cluster URL for a kube Config.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.shared.state()
    }

    /// Runs `f` on the objects (for anything the methods below do not cover).
    pub fn with_store<T>(&self, f: impl FnOnce(&mut Store) -> T) -> T {
        f(&mut self.state().store)
    }

    /// Creates or replaces an object (given with `apiVersion`, `kind`, `metadata.name`;
    /// namespaced kinds default to namespace "default"). Returns it as stored, with
    /// resourceVersion, uid and creationTimestamp.
    pub fn put(&self, object: Value) -> Value {
        self.state().store.put(object)
    }

    /// An object as stored (with `apiVersion` and `kind`).
    pub fn get(&self, kind: &str, namespace: Option<&str>, name: &str) -> Option<Value> {
        self.state().store.get(kind, namespace, name).cloned()
    }

    /// Every object of a kind, in (namespace, name) order.
    pub fn list(&self, kind: &str) -> Vec<Value> {
        self.state()
            .store
            .list(kind, None)
            .into_iter()
            .cloned()
            .collect()
    }

    /// Changes an object as a concurrent writer would (its resourceVersion moves on).
    pub fn modify(
        &self,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
        change: impl FnOnce(&mut Value),
    ) -> Option<Value> {
        self.state().store.modify(kind, namespace, name, change)
    }

    pub fn remove(&self, kind: &str, namespace: Option<&str>, name: &str) -> Option<Value> {
        self.state().store.remove(kind, namespace, name)
    }

    /// Stops serving a kind, as if its CRD were not installed: lists answer 404.
    pub fn uninstall(&self, kind: &str) {
        self.state().store.uninstall(kind);
    }

    pub fn set_version(&self, version: Version) {
        self.state().version = version;
    }

    /// The next request for `path` (exact, without query) with `method` ("*" for any)
    /// answers `status` (429 with `Retry-After: 1`, 409, 500...) instead of being served.
    /// Several calls queue several failures.
    ///
    /// A GET to a collection fails whether it is a list or a watch. A watch fails with
    /// the status as its HTTP answer, except 410: a watch that fails with 410 gets what a
    /// real server sends for a compacted resourceVersion — a 200 with one ERROR event
    /// carrying a `410 Expired` Status, then the end of the stream — which is how a
    /// test makes a client list again. (A list that fails with 410 gets an HTTP 410.)
    pub fn fail_next(&self, method: &str, path: &str, status: u16) {
        let method = (method != "*").then(|| method.parse().expect("an HTTP method"));
        self.inject(method, path, status, None);
    }

    /// Like [`FakeApiServer::fail_next`] for the next LIST of the collection `path`
    /// only: a watch a client opens in the background does not take the failure.
    pub fn fail_next_list(&self, path: &str, status: u16) {
        self.inject(Some(Method::GET), path, status, Some(false));
    }

    /// Like [`FakeApiServer::fail_next`] for the next WATCH of the collection `path`
    /// only (410: the ERROR event a compacted resourceVersion gets).
    pub fn fail_next_watch(&self, path: &str, status: u16) {
        self.inject(Some(Method::GET), path, status, Some(true));
    }

    fn inject(&self, method: Option<Method>, path: &str, status: u16, watch: Option<bool>) {
        self.state().failures.push_back(Injected {
            method,
            path: path.into(),
            status,
            watch,
        });
    }

    /// Runs `hook` on the objects right after the next `method` request to `path` is
    /// served (before the client sees the answer): a concurrent writer between a
    /// client's read and its write.
    pub fn after_next(
        &self,
        method: &str,
        path: &str,
        hook: impl FnOnce(&mut Store) + Send + 'static,
    ) {
        self.state().hooks.push(AfterHook {
            method: method.parse().expect("an HTTP method"),
            path: path.into(),
            hook: Box::new(hook),
        });
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state().log.clone()
    }

    /// How many `method` requests went to `path` (lists and watches alike for a GET).
    pub fn count(&self, method: &str, path: &str) -> usize {
        self.count_where(|r| r.method == method && r.path == path)
    }

    /// How many LISTs (GETs without `watch`) went to the collection `path`.
    pub fn count_lists(&self, path: &str) -> usize {
        self.count_where(|r| r.method == "GET" && r.path == path && !r.watch)
    }

    /// How many WATCHes (GETs with `watch=true`) went to the collection `path`,
    /// whatever they were answered.
    pub fn count_watches(&self, path: &str) -> usize {
        self.count_where(|r| r.method == "GET" && r.path == path && r.watch)
    }

    fn count_where(&self, counted: impl Fn(&RecordedRequest) -> bool) -> usize {
        self.state().log.iter().filter(|r| counted(r)).count()
    }

    pub fn clear_requests(&self) {
        self.state().log.clear();
    }

    /// The store's revision: the resourceVersion a list would answer now.
    pub fn revision(&self) -> u64 {
        self.state().store.revision()
    }

    /// Forgets the history up to the current revision, as an etcd compaction does: a
    /// watch from an older resourceVersion gets a 410 Expired ERROR event, and a list
    /// with `resourceVersionMatch=Exact` at an older one an HTTP 410.
    pub fn compact(&self) {
        self.state().store.compact();
    }

    /// Keeps only the last `limit` changes ([`DEFAULT_HISTORY_LIMIT`] unless set); the
    /// older ones are forgotten as by [`FakeApiServer::compact`].
    pub fn set_history_limit(&self, limit: usize) {
        self.state().store.set_history_limit(limit);
    }

    /// How often a watch that allows bookmarks gets one (watches opened from now on;
    /// [`DEFAULT_BOOKMARK_INTERVAL`] unless set). `Duration::ZERO`: only on
    /// [`FakeApiServer::bookmark_now`].
    pub fn set_bookmark_interval(&self, interval: Duration) {
        self.state().bookmark_interval = interval;
    }

    /// Sends every open watch that allows bookmarks a bookmark at the current revision
    /// now (behind the changes it has yet to send).
    pub fn bookmark_now(&self) {
        let mut state = self.state();
        let revision = state.store.revision();
        state.store.watchers.bookmark_all(revision);
    }

    /// Ends every open watch abruptly: its connection is cut mid-stream (no last chunk),
    /// what it had queued is not sent, and the client reads a broken stream — so it
    /// resumes from the last resourceVersion it saw, as after a network failure.
    pub fn drop_watches(&self) {
        self.state().store.watchers.drop_all();
    }

    /// How many watches are streaming now.
    pub fn open_watches(&self) -> usize {
        self.state().store.watchers.len()
    }

    /// Every response body byte sent so far (lists, watches, everything; without HTTP
    /// headers and chunk framing): what a client costs the API server, for benchmarks.
    pub fn bytes_served(&self) -> u64 {
        self.shared.bytes_served.load(Ordering::Relaxed)
    }
}

/// A whole answer (anything but a watch stream).
type Answer = Response<Bytes>;

/// What a request is answered: a whole answer, or a watch to stream.
enum Served {
    Answer(Answer),
    Watch(watch::Opened),
}

impl Served {
    fn status(&self) -> u16 {
        match self {
            Served::Answer(answer) => answer.status().as_u16(),
            Served::Watch(_) => 200,
        }
    }

    fn into_response(self, shared: &Arc<Shared>) -> Response<Body> {
        match self {
            Served::Answer(answer) => {
                answer.map(|bytes| Body::new(shared, Content::Whole(Some(bytes))))
            }
            Served::Watch(opened) => {
                let stream = Box::new(WatchBody::new(opened, shared.clone()));
                let mut response = Response::new(Body::new(shared, Content::Stream(stream)));
                response.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("application/json"),
                );
                response
            }
        }
    }
}

/// Every response body: counts what it sends for [`FakeApiServer::bytes_served`].
struct Body {
    shared: Arc<Shared>,
    content: Content,
}

enum Content {
    /// Sent in one frame, with a Content-Length.
    Whole(Option<Bytes>),
    /// Chunked, as long as the watch lasts.
    Stream(Box<WatchBody>),
}

impl Body {
    fn new(shared: &Arc<Shared>, content: Content) -> Body {
        Body {
            shared: shared.clone(),
            content,
        }
    }
}

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = self.get_mut();
        let polled = match &mut this.content {
            Content::Whole(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Content::Stream(stream) => Pin::new(stream.as_mut()).poll_frame(cx),
        };
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(data) = frame.data_ref()
        {
            this.shared
                .bytes_served
                .fetch_add(data.len() as u64, Ordering::Relaxed);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        match &self.content {
            Content::Whole(bytes) => bytes.is_none(),
            Content::Stream(stream) => stream.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.content {
            Content::Whole(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            Content::Stream(_) => SizeHint::default(),
        }
    }
}

async fn serve(shared: &Arc<Shared>, request: Request<Incoming>) -> Response<Body> {
    let (parts, body) = request.into_parts();
    let bytes = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => {
            let answer = status_answer(400, "BadRequest", &format!("reading the body: {e}"), None);
            return Served::Answer(answer).into_response(shared);
        }
    };
    let header = |name: http::header::HeaderName| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let path = parts.uri.path().to_string();
    let query = parts.uri.query().unwrap_or("").to_string();
    let body: Option<Value> = serde_json::from_slice(&bytes).ok();
    let content_type = header(http::header::CONTENT_TYPE);
    let watch = watch::requested(&parts.method, &query);

    // The lock is released before the answer is sent: a watch streams without it.
    let mut state = shared.state();
    let injected = state
        .failures
        .iter()
        .position(|f| f.applies_to(&parts.method, &path, watch))
        .and_then(|i| state.failures.remove(i));
    let served = match injected {
        Some(failure) if watch && failure.status == 410 => {
            Served::Answer(watch::expired("injected 410 (Expired)"))
        }
        Some(failure) => Served::Answer(injected_answer(failure.status)),
        None => {
            let call = Call {
                method: &parts.method,
                path: &path,
                query: &query,
                content_type: content_type.as_deref(),
                body: body.as_ref(),
                watch,
            };
            handle(&mut state, &call)
        }
    };
    if let Some(i) = state
        .hooks
        .iter()
        .position(|h| h.path == path && h.method == parts.method)
    {
        let hook = state.hooks.remove(i);
        (hook.hook)(&mut state.store);
    }
    state.log.push(RecordedRequest {
        method: parts.method.to_string(),
        path,
        query,
        content_type,
        authorization: header(http::header::AUTHORIZATION),
        user_agent: header(http::header::USER_AGENT),
        body,
        status: served.status(),
        watch,
    });
    drop(state);
    served.into_response(shared)
}

/// A request as the handlers see it.
struct Call<'a> {
    method: &'a Method,
    path: &'a str,
    query: &'a str,
    content_type: Option<&'a str>,
    body: Option<&'a Value>,
    /// A GET with `watch=true`.
    watch: bool,
}

/// Where a request goes: `/api/v1/[namespaces/{ns}/]{plural}[/{name}[/{subresource}]]`
/// or `/apis/{group}/{version}/...` likewise.
#[derive(Debug, Clone)]
pub struct Route {
    pub resource: ResourceType,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

enum Routed {
    Version,
    Resource(Route),
    NotFound,
}

fn route(store: &Store, path: &str) -> Routed {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segments.as_slice() {
        ["version"] => return Routed::Version,
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return Routed::NotFound,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, plural, rest @ ..] => {
            (Some(ns.to_string()), [&[*plural], rest].concat())
        }
        rest => (None, rest.to_vec()),
    };
    let (plural, name, subresource) = match rest.as_slice() {
        [plural] => (*plural, None, None),
        [plural, name] => (*plural, Some(name.to_string()), None),
        [plural, name, sub] => (*plural, Some(name.to_string()), Some(sub.to_string())),
        _ => return Routed::NotFound,
    };
    let Some(resource) = store.resource_type(group, version, plural) else {
        return Routed::NotFound;
    };
    // A namespace on a cluster-scoped kind is not a path the server has.
    if namespace.is_some() && !resource.namespaced {
        return Routed::NotFound;
    }
    Routed::Resource(Route {
        resource: resource.clone(),
        namespace,
        name,
        subresource,
    })
}

fn handle(state: &mut State, call: &Call) -> Served {
    let route = match route(&state.store, call.path) {
        Routed::Version if call.method == Method::GET => {
            return Served::Answer(version_answer(&state.version));
        }
        Routed::Resource(route) => route,
        Routed::Version | Routed::NotFound => {
            return Served::Answer(status_answer(
                404,
                "NotFound",
                "the server could not find the requested resource",
                None,
            ));
        }
    };
    // `watch` on one object's path is not a watch: the server answers a GET.
    if call.watch && route.name.is_none() {
        return watch::open(
            &mut state.store,
            &route,
            call.query,
            state.bookmark_interval,
        );
    }
    Served::Answer(handle_resource(&mut state.store, &route, call))
}

/// A request to a resource, but a watch.
fn handle_resource(store: &mut Store, route: &Route, call: &Call) -> Answer {
    match (call.method, &route.name, route.subresource.as_deref()) {
        (&Method::GET, None, None) => list(store, route, call.query),
        (&Method::GET, Some(name), None) => get(store, route, name),
        (&Method::POST, None, None) => create(store, route, call.body),
        (&Method::PUT, Some(name), None) => replace(store, route, name, call.body),
        (&Method::PATCH, Some(name), None) => patch(
            store,
            route,
            name,
            call.content_type,
            call.body,
            Part::Object,
        ),
        (&Method::GET, Some(name), Some("status")) if route.resource.status_subresource => {
            get(store, route, name)
        }
        (&Method::PUT, Some(name), Some("status")) if route.resource.status_subresource => {
            replace_status(store, route, name, call.body)
        }
        (&Method::PATCH, Some(name), Some("status")) if route.resource.status_subresource => patch(
            store,
            route,
            name,
            call.content_type,
            call.body,
            Part::Status,
        ),
        (&Method::DELETE, Some(name), None) => delete(store, route, name),
        (&Method::POST, Some(name), Some("eviction")) if route.resource.kind == "Pod" => match call
            .body
            .and_then(|b| b.pointer("/metadata/name"))
            .and_then(Value::as_str)
        {
            Some(named) if named != name => status_answer(
                400,
                "BadRequest",
                "name in URL does not match name in Eviction object",
                None,
            ),
            _ => evict(store, route, name),
        },
        _ => status_answer(
            405,
            "MethodNotAllowed",
            &format!(
                "{} {} is not implemented by the fake API server",
                call.method, call.path
            ),
            None,
        ),
    }
}

fn version_answer(version: &Version) -> Answer {
    json_answer(
        200,
        &json!({
            "major": version.major,
            "minor": version.minor,
            "gitVersion": version.git_version,
            "gitCommit": "0000000000000000000000000000000000000000",
            "gitTreeState": "clean",
            "buildDate": "2025-01-01T00:00:00Z",
            "goVersion": "go1.24.0",
            "compiler": "gc",
            "platform": "linux/amd64",
        }),
    )
}

/// The query parameter `name`, percent-decoded.
fn query_param(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == name).then(|| percent_decode(v))
    })
}

fn percent_decode(s: &str) -> String {
    let hex = |b: u8| (b as char).to_digit(16);
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| Some(hex(*bytes.get(i + 1)?)? * 16 + hex(*bytes.get(i + 2)?)?))
            .flatten();
        match (escaped, bytes[i]) {
            (Some(b), _) => {
                out.push(b as u8);
                i += 3;
            }
            (None, b'+') => {
                out.push(b' ');
                i += 1;
            }
            (None, b) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Continue tokens are opaque to clients; here, the revision of the list's first page
/// (every page answers it, as a real server's pages are one snapshot) and the last key
/// served, hex-encoded.
fn encode_continue(revision: u64, key: &ObjectKey) -> String {
    let raw = format!("{revision}\u{0}{}\u{0}{}\u{0}{}", key.0, key.1, key.2);
    raw.bytes().map(|b| format!("{b:02x}")).collect()
}

fn decode_continue(token: &str) -> Option<(u64, ObjectKey)> {
    if !token.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..token.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(token.get(i..i + 2)?, 16).ok())
        .collect();
    let raw = String::from_utf8(bytes?).ok()?;
    let mut parts = raw.split('\u{0}');
    let revision = parts.next()?.parse().ok()?;
    let key = (
        parts.next()?.into(),
        parts.next()?.into(),
        parts.next()?.into(),
    );
    Some((revision, key))
}

/// LIST, from the current state whatever `resourceVersion` asks (a real server serves
/// `resourceVersion=0` and `NotOlderThan` from its watch cache, as current as the fake;
/// an `Exact` one it reads from etcd at that revision — which the fake does not keep —
/// or answers 410 Expired when etcd compacted it, as the fake does). `limit` pages
/// whatever the resourceVersion (an older server ignores it with `resourceVersion=0`).
///
/// Every page of a list answers the first page's resourceVersion, as a real server's
/// do: a client that watches from it is replayed whatever changed while it paged (a
/// later page may already show some of those changes — the fake does not keep old
/// versions to serve a snapshot — which the replay repeats, harmlessly). A continue
/// token whose revision was compacted since is answered 410 Expired, as a real
/// server's is.
fn list(store: &Store, route: &Route, query: &str) -> Answer {
    if let Some(answer) = compacted_list(store, query) {
        return answer;
    }
    let selectors = match Selectors::parse(
        query_param(query, "fieldSelector"),
        query_param(query, "labelSelector"),
    ) {
        Ok(selectors) => selectors,
        Err(why) => return status_answer(400, "BadRequest", &why, None),
    };
    let resource = &route.resource;
    let (revision, after) = match query_param(query, "continue").filter(|t| !t.is_empty()) {
        Some(token) => match decode_continue(&token) {
            Some((revision, _)) if revision < store.compacted_revision() => {
                return expired_continue();
            }
            Some((revision, key)) => (revision, Some(key)),
            None => return status_answer(400, "BadRequest", "continue key is not valid", None),
        },
        None => (store.revision(), None),
    };
    let limit = query_param(query, "limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0)
        .unwrap_or(usize::MAX);
    let mut matching = store
        .page(resource.kind, route.namespace.as_deref(), after.as_ref())
        .filter(|(_, item)| selectors.matches(item));
    let mut items = Vec::new();
    let mut last = None;
    for (key, item) in matching.by_ref().take(limit) {
        let mut item = item.clone();
        if resource.builtin
            && let Value::Object(map) = &mut item
        {
            map.remove("apiVersion");
            map.remove("kind");
        }
        items.push(item);
        last = Some(key);
    }
    let remaining = matching.count();
    let mut metadata = json!({ "resourceVersion": revision.to_string() });
    if remaining > 0
        && let Some(last) = last
    {
        metadata["continue"] = encode_continue(revision, last).into();
        metadata["remainingItemCount"] = remaining.into();
    }
    json_answer(
        200,
        &json!({
            "kind": format!("{}List", resource.kind),
            "apiVersion": resource.api_version(),
            "metadata": metadata,
            "items": items,
        }),
    )
}

/// The real server's answer to a continue token older than its compaction.
fn expired_continue() -> Answer {
    status_answer(
        410,
        "Expired",
        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
        None,
    )
}

/// A LIST at an `Exact` resourceVersion the history no longer reaches: the real
/// server's 410 (etcd compacted that revision).
fn compacted_list(store: &Store, query: &str) -> Option<Answer> {
    if query_param(query, "resourceVersionMatch").as_deref() != Some("Exact") {
        return None;
    }
    let rv = query_param(query, "resourceVersion")?.parse::<u64>().ok()?;
    (rv < store.compacted_revision()).then(|| {
        status_answer(
            410,
            "Expired",
            "The resourceVersion for the provided list is too old.",
            None,
        )
    })
}

fn delete(store: &mut Store, route: &Route, name: &str) -> Answer {
    match store.remove(route.resource.kind, route.namespace.as_deref(), name) {
        Some(object) => json_answer(200, &object),
        None => not_found(route, name),
    }
}

/// The eviction subresource: the budget check, then the pod is deleted.
fn evict(store: &mut Store, route: &Route, name: &str) -> Answer {
    let namespace = route.namespace.as_deref();
    let Some(object) = store.get("Pod", namespace, name).cloned() else {
        return not_found(route, name);
    };
    let pods: Vec<nodewright_core::cluster::Pod> = store
        .list("Pod", namespace)
        .into_iter()
        .filter_map(|v| serde_json::from_value(v.clone()).ok())
        .filter_map(|p| nodewright_core::snapshot::pod_from_k8s(&p).ok())
        .collect();
    let pdbs: Vec<nodewright_core::cluster::PodDisruptionBudget> = store
        .list("PodDisruptionBudget", namespace)
        .into_iter()
        .filter_map(|v| serde_json::from_value(v.clone()).ok())
        .filter_map(|b| nodewright_core::snapshot::pdb_from_k8s(&b).ok())
        .collect();
    let pod = serde_json::from_value(object)
        .ok()
        .and_then(|p| nodewright_core::snapshot::pod_from_k8s(&p).ok());
    if let Some(pod) = pod
        && !nodewright_core::cluster::eviction_allowed(&pod, &pods, &pdbs)
    {
        let blocking = pdbs
            .iter()
            .find(|b| b.selects(&pod) && b.disruptions_allowed(&pods) == 0)
            .map(|b| b.name.clone())
            .unwrap_or_default();
        return status_answer(
            429,
            "TooManyRequests",
            "Cannot evict pod as it would violate the pod's disruption budget.",
            Some(json!({
                "causes": [{
                    "reason": "DisruptionBudget",
                    "message": format!("The disruption budget {blocking} does not allow a disruption now"),
                }],
            })),
        );
    }
    store.remove("Pod", namespace, name);
    json_answer(
        201,
        &json!({ "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201 }),
    )
}

fn not_found(route: &Route, name: &str) -> Answer {
    status_answer(
        404,
        "NotFound",
        &format!("{} {name:?} not found", qualified(&route.resource)),
        Some(json!({ "name": name, "group": route.resource.group, "kind": route.resource.plural })),
    )
}

/// `nodes`, `daemonsets.apps`, `nodepools.karpenter.sh`, as messages name resources.
fn qualified(resource: &ResourceType) -> String {
    if resource.group.is_empty() {
        resource.plural.to_string()
    } else {
        format!("{}.{}", resource.plural, resource.group)
    }
}

fn conflict(route: &Route, name: &str) -> Answer {
    status_answer(
        409,
        "Conflict",
        &format!(
            "Operation cannot be fulfilled on {} {name:?}: the object has been modified; please apply your changes to the latest version and try again",
            qualified(&route.resource)
        ),
        Some(json!({ "name": name, "group": route.resource.group, "kind": route.resource.plural })),
    )
}

fn get(store: &Store, route: &Route, name: &str) -> Answer {
    match store.get(route.resource.kind, route.namespace.as_deref(), name) {
        Some(object) => json_answer(200, object),
        None => not_found(route, name),
    }
}

/// The object's namespace must match the path's (namespaced kinds); fills it in.
/// `Some` is the refusal.
fn check_namespace(route: &Route, object: &mut Value) -> Option<Answer> {
    let namespace = route.namespace.as_ref()?;
    match object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
    {
        Some(ns) if ns != namespace => Some(status_answer(
            400,
            "BadRequest",
            "the namespace of the provided object does not match the namespace sent on the request",
            None,
        )),
        _ => {
            object["metadata"]["namespace"] = namespace.as_str().into();
            None
        }
    }
}

fn create(store: &mut Store, route: &Route, body: Option<&Value>) -> Answer {
    let Some(mut object) = body.filter(|b| b.is_object()).cloned() else {
        return status_answer(400, "BadRequest", "the body is not a JSON object", None);
    };
    if route.resource.namespaced && route.namespace.is_none() {
        return status_answer(
            405,
            "MethodNotAllowed",
            "create a namespaced object under /namespaces/{ns}/",
            None,
        );
    }
    if !object.get("metadata").is_some_and(Value::is_object) {
        object["metadata"] = json!({});
    }
    if let Some(answer) = check_namespace(route, &mut object) {
        return answer;
    }
    let name = match object.pointer("/metadata/name").and_then(Value::as_str) {
        Some(name) if !name.is_empty() => name.to_string(),
        _ => match object
            .pointer("/metadata/generateName")
            .and_then(Value::as_str)
        {
            Some(prefix) => format!("{prefix}{:05x}", store.revision() & 0xfffff),
            None => {
                return status_answer(
                    422,
                    "Invalid",
                    "metadata.name: Required value: name or generateName is required",
                    None,
                );
            }
        },
    };
    let key = key(route.resource.kind, route.namespace.as_deref(), &name);
    if store
        .get(&key.0, route.namespace.as_deref(), &name)
        .is_some()
    {
        return status_answer(
            409,
            "AlreadyExists",
            &format!("{} {name:?} already exists", qualified(&route.resource)),
            Some(
                json!({ "name": name, "group": route.resource.group, "kind": route.resource.plural }),
            ),
        );
    }
    if let Some(meta) = object["metadata"].as_object_mut() {
        // Set by the server, never by the client.
        meta.remove("resourceVersion");
        meta.remove("uid");
        meta.remove("generation");
    }
    // A custom resource with a status subresource starts without one (built-in kinds
    // each reset it their own way; not modelled).
    if route.resource.status_subresource
        && !route.resource.builtin
        && let Value::Object(map) = &mut object
    {
        map.remove("status");
    }
    let stored = store.write(key, object, None);
    json_answer(201, &stored)
}

fn resource_version(object: &Value) -> Option<&str> {
    object
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .filter(|rv| !rv.is_empty())
}

fn replace(store: &mut Store, route: &Route, name: &str, body: Option<&Value>) -> Answer {
    let Some(mut object) = body.filter(|b| b.is_object()).cloned() else {
        return status_answer(400, "BadRequest", "the body is not a JSON object", None);
    };
    if object.pointer("/metadata/name").and_then(Value::as_str) != Some(name) {
        return status_answer(
            400,
            "BadRequest",
            "the name of the object does not match the name on the URL",
            None,
        );
    }
    if let Some(answer) = check_namespace(route, &mut object) {
        return answer;
    }
    let Some(current) = store
        .get(route.resource.kind, route.namespace.as_deref(), name)
        .cloned()
    else {
        return not_found(route, name);
    };
    if let Some(rv) = resource_version(&object)
        && Some(rv) != resource_version(&current)
    {
        return conflict(route, name);
    }
    let object = Part::Object.written(&route.resource, &current, object);
    let stored = store.write(
        key(route.resource.kind, route.namespace.as_deref(), name),
        object,
        Some(&current),
    );
    json_answer(200, &stored)
}

/// `PUT .../{name}/status`: the body's `.status` replaces the stored one; nothing
/// else of the body counts (a stale `metadata.resourceVersion` is still a conflict).
fn replace_status(store: &mut Store, route: &Route, name: &str, body: Option<&Value>) -> Answer {
    let Some(object) = body.filter(|b| b.is_object()) else {
        return status_answer(400, "BadRequest", "the body is not a JSON object", None);
    };
    if object.pointer("/metadata/name").and_then(Value::as_str) != Some(name) {
        return status_answer(
            400,
            "BadRequest",
            "the name of the object does not match the name on the URL",
            None,
        );
    }
    let Some(current) = store
        .get(route.resource.kind, route.namespace.as_deref(), name)
        .cloned()
    else {
        return not_found(route, name);
    };
    if let Some(rv) = resource_version(object)
        && Some(rv) != resource_version(&current)
    {
        return conflict(route, name);
    }
    let updated = Part::Status.written(&route.resource, &current, object.clone());
    let stored = store.write(
        key(route.resource.kind, route.namespace.as_deref(), name),
        updated,
        Some(&current),
    );
    json_answer(200, &stored)
}

/// Which part of an object a write may change.
#[derive(Clone, Copy)]
enum Part {
    /// The object itself: everything but `.status` when the kind has a status
    /// subresource.
    Object,
    /// The `/status` subresource: `.status` only.
    Status,
}

impl Part {
    /// What is stored when `wanted` is written over `current` through this part.
    fn written(self, resource: &ResourceType, current: &Value, wanted: Value) -> Value {
        let (mut base, from) = match self {
            Part::Object if !resource.status_subresource => return wanted,
            Part::Object => (wanted, current),
            Part::Status => (current.clone(), &wanted),
        };
        match from.get("status") {
            Some(status) => base["status"] = status.clone(),
            None => {
                if let Value::Object(map) = &mut base {
                    map.remove("status");
                }
            }
        }
        base
    }
}

fn patch(
    store: &mut Store,
    route: &Route,
    name: &str,
    content_type: Option<&str>,
    body: Option<&Value>,
    part: Part,
) -> Answer {
    let Some(body) = body else {
        return status_answer(400, "BadRequest", "the patch is not JSON", None);
    };
    let Some(current) = store
        .get(route.resource.kind, route.namespace.as_deref(), name)
        .cloned()
    else {
        return not_found(route, name);
    };
    let media_type = content_type
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim();
    let mut patched = current.clone();
    match media_type {
        "application/merge-patch+json" => patch::merge(&mut patched, body),
        "application/strategic-merge-patch+json" => {
            if !route.resource.builtin {
                return status_answer(
                    415,
                    "UnsupportedMediaType",
                    "strategic merge patch is not supported for custom resources",
                    None,
                );
            }
            patch::strategic(&mut patched, body)
        }
        "application/json-patch+json" => {
            if let Err(why) = patch::json_patch(&mut patched, body) {
                return status_answer(422, "Invalid", &why, None);
            }
        }
        other => {
            return status_answer(
                415,
                "UnsupportedMediaType",
                &format!("the fake does not apply {other:?} patches"),
                None,
            );
        }
    }
    // A resourceVersion the patch sets is a precondition (JSON patch: only if changed).
    if let Some(rv) = resource_version(&patched)
        && Some(rv) != resource_version(&current)
    {
        return conflict(route, name);
    }
    if patched.pointer("/metadata/name").and_then(Value::as_str) != Some(name) {
        return status_answer(
            422,
            "Invalid",
            "metadata.name: Invalid value: field is immutable",
            None,
        );
    }
    let patched = part.written(&route.resource, &current, patched);
    let stored = store.write(
        key(route.resource.kind, route.namespace.as_deref(), name),
        patched,
        Some(&current),
    );
    json_answer(200, &stored)
}

fn injected_answer(status: u16) -> Answer {
    let reason = match status {
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
    };
    let mut answer = status_answer(
        status,
        reason,
        &format!("injected {status} ({reason})"),
        None,
    );
    if status == 429 {
        answer.headers_mut().insert(
            http::header::RETRY_AFTER,
            http::HeaderValue::from_static("1"),
        );
    }
    answer
}

/// A `metav1.Status` failure, as the API server answers errors.
fn status_answer(code: u16, reason: &str, message: &str, details: Option<Value>) -> Answer {
    json_answer(code, &status_value(code, reason, message, details))
}

/// A `metav1.Status` failure: the body of an error answer, or the object of a watch's
/// ERROR event.
fn status_value(code: u16, reason: &str, message: &str, details: Option<Value>) -> Value {
    let mut status = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    });
    if let Some(details) = details {
        status["details"] = details;
    }
    status
}

fn json_answer(code: u16, body: &Value) -> Answer {
    let mut answer = Response::new(Bytes::from(body.to_string()));
    *answer.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    answer.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip() {
        let key = (
            "Pod".to_string(),
            "kube-system".to_string(),
            "coredns-1".to_string(),
        );
        assert_eq!(decode_continue(&encode_continue(42, &key)), Some((42, key)));
        assert_eq!(decode_continue("zz"), None);
    }

    #[test]
    fn query_parameters_are_percent_decoded() {
        assert_eq!(
            query_param("limit=2&continue=a%2Fb", "continue").as_deref(),
            Some("a/b")
        );
        assert_eq!(query_param("limit=2", "continue"), None);
        assert_eq!(percent_decode("100%"), "100%");
    }

    #[test]
    fn paths_route_to_resources() {
        let store = Store::default();
        let Routed::Resource(r) = route(
            &store,
            "/api/v1/namespaces/kube-system/pods/coredns/eviction",
        ) else {
            panic!("not routed");
        };
        assert_eq!(
            (
                r.resource.kind,
                r.namespace.as_deref(),
                r.name.as_deref(),
                r.subresource.as_deref()
            ),
            (
                "Pod",
                Some("kube-system"),
                Some("coredns"),
                Some("eviction")
            )
        );
        assert!(matches!(
            route(&store, "/apis/karpenter.sh/v1/nodepools"),
            Routed::Resource(_)
        ));
        assert!(matches!(
            route(&store, "/apis/karpenter.sh/v1beta1/nodepools"),
            Routed::NotFound
        ));
        assert!(matches!(
            route(&store, "/api/v1/namespaces/x/nodes"),
            Routed::NotFound
        ));
        assert!(matches!(route(&store, "/version"), Routed::Version));
    }
}
