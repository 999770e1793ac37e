//! A fake Kubernetes API server for tests: real HTTP/1.1 on 127.0.0.1, so kube-rs talks
//! to it exactly as to a cluster (no kube-apiserver can be installed on the build
//! machines; see docs/architecture.md, "Testing").
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
//! - the `/scale` subresource of a NodePool (get, replace, patch; `autoscaling/v1`
//!   Scale over `.spec.replicas` and `.status.nodes`, as Karpenter's CRD declares it),
//!   what `kubectl scale nodepool` uses (see `scale`);
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
//! The files: `serve` (one request from start to end, and its [`Route`]), `resource`
//! (the handlers of everything but watches), `watch` (the streams), `answer` (JSON and
//! `metav1.Status` answers), `store` and `events` (the objects and their history),
//! `selector` and `patch`.
//!
//! hyper 1 + hyper-util rather than axum: kube-rs already builds hyper and hyper-util,
//! so the server costs two features, not a framework; and the API paths are one regular
//! grammar that a 30-line parser routes more exactly than a table of axum routes.

mod answer;
mod events;
mod patch;
mod resource;
mod scale;
mod selector;
mod serve;
pub mod store;
mod watch;

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use http::Method;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

pub use events::DEFAULT_HISTORY_LIMIT;
pub use serve::Route;
pub use store::{ResourceType, Store};

use serve::serve;

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
    /// Collections every request to is refused with 403 (`forbid`).
    forbidden: Vec<String>,
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
            forbidden: Vec::new(),
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

    /// Every request to the collection `path` (exact, e.g.
    /// `/api/v1/persistentvolumeclaims`) answers 403 Forbidden from now on, lists and
    /// watches alike: RBAC that does not grant the kind.
    pub fn forbid(&self, path: &str) {
        self.state().forbidden.push(path.to_string());
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
