//! A fake Kubernetes API server for tests: real HTTP/1.1 on 127.0.0.1, so kube-rs talks
//! to it exactly as to a cluster (no kube-apiserver can be installed on the build
//! machines; see DESIGN "Testing").
//!
//! It serves, for the kinds in [`store::default_resource_types`]:
//! - list (`GET /api/v1/nodes`, `/api/v1/pods`, `/api/v1/namespaces/{ns}/pods`,
//!   `/apis/{group}/{version}/...`) with `limit`/`continue` and the list's
//!   `metadata.resourceVersion`; items of built-in kinds have no `apiVersion`/`kind`;
//! - get, create (`POST`, 409 AlreadyExists), replace (`PUT`, 409 Conflict when
//!   `metadata.resourceVersion` is stale), patch (merge, strategic merge, JSON patch;
//!   a `metadata.resourceVersion` in a merge or strategic patch is a precondition);
//! - `GET /version`; 404 with a `Status` body for anything else (an uninstalled CRD);
//! - one-shot injected errors per path ([`FakeApiServer::fail_next`]), hooks that run
//!   after a request ([`FakeApiServer::after_next`], e.g. a concurrent writer), and a
//!   log of every request.
//!
//! - delete (`DELETE`): the object goes at once — a pod's `gracePeriodSeconds` is
//!   recorded in the request log but not waited for (a real kubelet would take up to
//!   that long to stop the containers, and the pod would linger with a
//!   `deletionTimestamp`);
//! - eviction (`POST /api/v1/namespaces/{ns}/pods/{name}/eviction`) with the
//!   PodDisruptionBudget check of `nodewright_core::cluster::eviction_allowed` (the
//!   disruption controller's arithmetic over the pods stored now): 201 and the pod is
//!   gone, or 429 TooManyRequests with the real server's `Status` and a
//!   `DisruptionBudget` cause;
//! - list `fieldSelector`s of equality terms (`spec.nodeName=x`, `a!=b`, ANDed);
//! - the `/status` subresource (get, replace, patch) of the kinds that have one: a
//!   status write changes only `.status`, a write to the object itself leaves `.status`
//!   alone, and custom resources get `metadata.generation` (bumped by spec changes
//!   only), so `observedGeneration` can be tested.
//!
//! Requests are routed to [`Route`] (resource type, namespace, name, subresource) and
//! then to a handler by method.
//!
//! hyper 1 + hyper-util rather than axum: kube-rs already builds hyper and hyper-util,
//! so the server costs two features, not a framework; and the API paths are one regular
//! grammar that a 30-line parser routes more exactly than a table of axum routes.

mod patch;
pub mod store;

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

pub use store::{ResourceType, Store};

use store::{ObjectKey, key};

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
    /// The body, when it was JSON.
    pub body: Option<Value>,
    /// The status answered.
    pub status: u16,
}

type Hook = Box<dyn FnOnce(&mut Store) + Send>;

struct Injected {
    method: Option<Method>,
    path: String,
    status: u16,
}

struct AfterHook {
    method: Method,
    path: String,
    hook: Hook,
}

#[derive(Default)]
struct State {
    store: Store,
    version: Version,
    failures: VecDeque<Injected>,
    hooks: Vec<AfterHook>,
    log: Vec<RecordedRequest>,
}

/// A fake Kubernetes API server on `127.0.0.1:<ephemeral port>`, stopped on drop.
pub struct FakeApiServer {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    accept: JoinHandle<()>,
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl FakeApiServer {
    /// Binds an ephemeral port and serves in the background (on the current tokio
    /// runtime).
    pub async fn start() -> std::io::Result<FakeApiServer> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        let accept = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let state = shared.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request| {
                        let state = state.clone();
                        async move { Ok::<_, Infallible>(serve(&state, request).await) }
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
            state,
            accept,
        })
    }

    /// `http://127.0.0.1:<port>`, the cluster URL for a kube Config.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
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
    pub fn fail_next(&self, method: &str, path: &str, status: u16) {
        let method = (method != "*").then(|| method.parse().expect("an HTTP method"));
        self.state().failures.push_back(Injected {
            method,
            path: path.into(),
            status,
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

    /// How many `method` requests went to `path`.
    pub fn count(&self, method: &str, path: &str) -> usize {
        self.state()
            .log
            .iter()
            .filter(|r| r.method == method && r.path == path)
            .count()
    }

    pub fn clear_requests(&self) {
        self.state().log.clear();
    }
}

type Answer = Response<Full<Bytes>>;

async fn serve(state: &Mutex<State>, request: Request<Incoming>) -> Answer {
    let (parts, body) = request.into_parts();
    let bytes = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => return status_answer(400, "BadRequest", &format!("reading the body: {e}"), None),
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

    let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
    let injected = state
        .failures
        .iter()
        .position(|f| f.path == path && f.method.as_ref().is_none_or(|m| *m == parts.method))
        .and_then(|i| state.failures.remove(i));
    let answer = match injected {
        Some(failure) => injected_answer(failure.status),
        None => {
            let call = Call {
                method: &parts.method,
                path: &path,
                query: &query,
                content_type: content_type.as_deref(),
                body: body.as_ref(),
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
        body,
        status: answer.status().as_u16(),
    });
    answer
}

/// A request as the handlers see it.
struct Call<'a> {
    method: &'a Method,
    path: &'a str,
    query: &'a str,
    content_type: Option<&'a str>,
    body: Option<&'a Value>,
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

fn handle(state: &mut State, call: &Call) -> Answer {
    let route = match route(&state.store, call.path) {
        Routed::Version if call.method == Method::GET => return version_answer(&state.version),
        Routed::Resource(route) => route,
        Routed::Version | Routed::NotFound => {
            return status_answer(
                404,
                "NotFound",
                "the server could not find the requested resource",
                None,
            );
        }
    };
    let store = &mut state.store;
    match (call.method, &route.name, route.subresource.as_deref()) {
        (&Method::GET, None, None) => list(store, &route, call.query),
        (&Method::GET, Some(name), None) => get(store, &route, name),
        (&Method::POST, None, None) => create(store, &route, call.body),
        (&Method::PUT, Some(name), None) => replace(store, &route, name, call.body),
        (&Method::PATCH, Some(name), None) => patch(
            store,
            &route,
            name,
            call.content_type,
            call.body,
            Part::Object,
        ),
        (&Method::GET, Some(name), Some("status")) if route.resource.status_subresource => {
            get(store, &route, name)
        }
        (&Method::PUT, Some(name), Some("status")) if route.resource.status_subresource => {
            replace_status(store, &route, name, call.body)
        }
        (&Method::PATCH, Some(name), Some("status")) if route.resource.status_subresource => patch(
            store,
            &route,
            name,
            call.content_type,
            call.body,
            Part::Status,
        ),
        (&Method::DELETE, Some(name), None) => delete(store, &route, name),
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
            _ => evict(store, &route, name),
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

/// Continue tokens are opaque to clients; here, the last key served, hex-encoded.
fn encode_continue(key: &ObjectKey) -> String {
    let raw = format!("{}\u{0}{}\u{0}{}", key.0, key.1, key.2);
    raw.bytes().map(|b| format!("{b:02x}")).collect()
}

fn decode_continue(token: &str) -> Option<ObjectKey> {
    if !token.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..token.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(token.get(i..i + 2)?, 16).ok())
        .collect();
    let raw = String::from_utf8(bytes?).ok()?;
    let mut parts = raw.split('\u{0}');
    Some((
        parts.next()?.into(),
        parts.next()?.into(),
        parts.next()?.into(),
    ))
}

fn list(store: &Store, route: &Route, query: &str) -> Answer {
    let resource = &route.resource;
    let after = match query_param(query, "continue").filter(|t| !t.is_empty()) {
        Some(token) => match decode_continue(&token) {
            Some(key) => Some(key),
            None => return status_answer(400, "BadRequest", "continue key is not valid", None),
        },
        None => None,
    };
    let limit = query_param(query, "limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0);
    let fields = query_param(query, "fieldSelector").unwrap_or_default();
    let candidates: Vec<_> = store
        .page(resource.kind, route.namespace.as_deref(), after.as_ref())
        .into_iter()
        .filter(|(_, item)| field_selector_matches(&fields, item))
        .collect();
    let take = limit.unwrap_or(candidates.len()).min(candidates.len());
    let remaining = candidates.len() - take;
    let mut metadata = json!({ "resourceVersion": store.revision().to_string() });
    if remaining > 0 {
        metadata["continue"] = encode_continue(&candidates[take - 1].0).into();
        metadata["remainingItemCount"] = remaining.into();
    }
    let items: Vec<Value> = candidates
        .into_iter()
        .take(take)
        .map(|(_, mut item)| {
            if resource.builtin
                && let Value::Object(map) = &mut item
            {
                map.remove("apiVersion");
                map.remove("kind");
            }
            item
        })
        .collect();
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

/// `spec.nodeName=x,metadata.namespace!=y`: every term must hold; a missing field is "".
fn field_selector_matches(selector: &str, object: &Value) -> bool {
    selector.split(',').filter(|t| !t.is_empty()).all(|term| {
        let (path, want, equal) = match term.split_once("!=") {
            Some((p, v)) => (p, v, false),
            None => match term.split_once("==").or_else(|| term.split_once('=')) {
                Some((p, v)) => (p, v, true),
                None => return false,
            },
        };
        let pointer = format!("/{}", path.replace('.', "/"));
        let got = object
            .pointer(&pointer)
            .and_then(Value::as_str)
            .unwrap_or("");
        (got == want) == equal
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
    json_answer(code, &status)
}

fn json_answer(code: u16, body: &Value) -> Answer {
    let mut answer = Response::new(Full::new(Bytes::from(body.to_string())));
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
        assert_eq!(decode_continue(&encode_continue(&key)), Some(key));
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
