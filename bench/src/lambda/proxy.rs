//! Counting HTTP/1.1 proxies on 127.0.0.1 between the function and its servers, so
//! the figures are what crossed the wire, whatever the function does:
//!
//! - [`Upstream::Kubernetes`]: requests by verb (LIST, WATCH, GET, POST, PUT, PATCH,
//!   DELETE) and resource, and the response bytes. The function speaks plain HTTP to
//!   the proxy, which forwards every request as it came (the function's own token, so
//!   RBAC sees its identity) to the API server over TLS. Bodies are streamed through
//!   (a WATCH stays open for minutes), and bytes are counted as they pass.
//! - [`Upstream::Aws`]: requests by service and operation (`X-Amz-Target`, or the
//!   query protocol's `Action`), request and response bytes, DynamoDB read and write
//!   units ([`super::dynamo_units`]), and when each CreateFleet arrived. moto answers
//!   whole, so bodies are read whole and inspected. One request is changed on its way:
//!   a DescribeInstances that EC2 would answer in one page gets moto to do the same
//!   ([`as_ec2_pages`]); without it, moto's paging (not the function) set the pace of
//!   every tick from a few hundred instances up. And unless told not to, a
//!   DescribeInstances moto already answered is answered again from that answer while
//!   no EC2 write has happened since ([`Replay`]): the function reads the same bytes,
//!   without moto's minutes at 5,000 instances. Such requests are counted as
//!   `replayed`.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode, Uri};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::Value;
use tokio::net::TcpListener;

use super::dynamo_units;

/// What one kind of call added up to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    pub requests: u64,
    /// Answers other than 2xx.
    pub errors: u64,
    /// LIST only: lists begun (first pages); `requests` counts every page.
    pub lists: u64,
    pub request_bytes: u64,
    pub response_bytes: u64,
    pub read_units: f64,
    pub write_units: f64,
    /// Answered by the proxy from moto's earlier identical answer ([`Replay`]).
    pub replayed: u64,
}

impl Tally {
    fn add(&mut self, other: &Tally) {
        self.requests += other.requests;
        self.errors += other.errors;
        self.lists += other.lists;
        self.request_bytes += other.request_bytes;
        self.response_bytes += other.response_bytes;
        self.read_units += other.read_units;
        self.write_units += other.write_units;
        self.replayed += other.replayed;
    }
}

/// The traffic since the last [`Proxy::take`]: (verb or service, resource or
/// operation) → tally.
#[derive(Debug, Clone, Default)]
pub struct Traffic {
    pub calls: BTreeMap<(String, String), Tally>,
    /// When each EC2 CreateFleet request arrived.
    pub create_fleet_at: Vec<Instant>,
}

impl Traffic {
    /// The sum of the calls `keep` selects by (verb or service, resource or operation).
    pub fn total(&self, keep: impl Fn(&str, &str) -> bool) -> Tally {
        let mut sum = Tally::default();
        for ((group, name), tally) in &self.calls {
            if keep(group, name) {
                sum.add(tally);
            }
        }
        sum
    }
}

pub enum Upstream {
    /// An API server, through a client that adds nothing to what it forwards
    /// (`ControlPlane::forwarding_client`: the server's CA, no token of its own).
    Kubernetes(kube::Client),
    /// moto at `url` (`http://127.0.0.1:port`). `replay`: answer a DescribeInstances
    /// moto answered before, while no EC2 write happened since ([`Replay`]).
    Aws { url: String, replay: bool },
}

/// A proxy serving in the background on the current tokio runtime.
pub struct Proxy {
    addr: SocketAddr,
    traffic: Arc<Mutex<Traffic>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Body = UnsyncBoxBody<Bytes, BoxError>;

/// Where a [`Forwarder`] sends what it receives.
enum Target {
    Kubernetes(kube::Client),
    Aws {
        upstream: Uri,
        client: Box<Client<HttpConnector, Full<Bytes>>>,
    },
}

struct Forwarder {
    target: Target,
    traffic: Arc<Mutex<Traffic>>,
    replay: Option<Replay>,
}

impl Proxy {
    /// Listens on a free 127.0.0.1 port and forwards every request to `upstream`.
    pub async fn start(upstream: Upstream) -> std::io::Result<Proxy> {
        let (target, replay) = match upstream {
            Upstream::Kubernetes(client) => (Target::Kubernetes(client), None),
            Upstream::Aws { url, replay } => {
                let upstream: Uri = url
                    .parse()
                    .map_err(|e| std::io::Error::other(format!("upstream {url:?}: {e}")))?;
                let client = Box::new(Client::builder(TokioExecutor::new()).build_http());
                (
                    Target::Aws { upstream, client },
                    replay.then(Replay::default),
                )
            }
        };
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let traffic = Arc::new(Mutex::new(Traffic::default()));
        let forwarder = Arc::new(Forwarder {
            target,
            traffic: traffic.clone(),
            replay,
        });
        let accept = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let forwarder = forwarder.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request| {
                        let forwarder = forwarder.clone();
                        async move { Ok::<_, Infallible>(forwarder.forward(request).await) }
                    });
                    // The function hanging up (or being killed) is not the proxy's problem.
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(Proxy {
            addr,
            traffic,
            accept,
        })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The traffic since the last call, and start counting afresh.
    pub fn take(&self) -> Traffic {
        std::mem::take(&mut *self.traffic.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl Forwarder {
    async fn forward(&self, request: Request<Incoming>) -> Response<Body> {
        let (parts, body) = request.into_parts();
        let body = match body.collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(e) => return failure(StatusCode::BAD_REQUEST, &format!("reading the body: {e}")),
        };
        let arrived = Instant::now();
        let key = match self.target {
            Target::Kubernetes(_) => kube_call(&parts.method, parts.uri.path(), parts.uri.query()),
            Target::Aws { .. } => aws_call(&parts.headers, parts.uri.path(), &parts.method, &body),
        };
        let first_page = !parts
            .uri
            .query()
            .is_some_and(|q| q.split('&').any(|p| p.starts_with("continue=")));
        let begun = self.replay.as_ref().map(|r| r.begin(&key, &body));
        let writes_then = match begun {
            Some(Begun::Replayed(answer)) => {
                self.count_request(&key, answer.status, body.len(), first_page, arrived, true);
                self.count_answer(&key, answer.status, &body, &answer.body);
                return answer.response();
            }
            Some(Begun::Forward { writes }) => writes,
            None => 0,
        };
        let response = match &self.target {
            Target::Kubernetes(client) => match forward_request(&parts, body.clone()) {
                Ok(request) => client
                    .send(request)
                    .await
                    .map(|response| response.map(|b| b.map_err(BoxError::from).boxed_unsync()))
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e),
            },
            Target::Aws { upstream, client } => self
                .send_aws(upstream, client, &parts, &key, &body)
                .await
                .map(|response| response.map(|b| b.map_err(BoxError::from).boxed_unsync())),
        };
        let response = match response {
            Ok(response) => response,
            Err(e) => return failure(StatusCode::BAD_GATEWAY, &format!("upstream: {e}")),
        };
        let status = response.status();
        self.count_request(&key, status, body.len(), first_page, arrived, false);
        match self.target {
            Target::Kubernetes(_) => {
                let traffic = self.traffic.clone();
                response.map(move |body| {
                    body.map_frame(move |frame: Frame<Bytes>| {
                        if let Some(data) = frame.data_ref() {
                            let mut traffic = traffic.lock().unwrap_or_else(|e| e.into_inner());
                            traffic.calls.entry(key.clone()).or_default().response_bytes +=
                                data.len() as u64;
                        }
                        frame
                    })
                    .boxed_unsync()
                })
            }
            Target::Aws { .. } => {
                let (head, answer) = response.into_parts();
                let answer = match answer.collect().await {
                    Ok(collected) => collected.to_bytes(),
                    Err(e) => {
                        return failure(StatusCode::BAD_GATEWAY, &format!("upstream body: {e}"));
                    }
                };
                self.count_answer(&key, status, &body, &answer);
                if let Some(replay) = &self.replay {
                    replay.end(&key, &body, writes_then, &head, &answer);
                }
                Response::from_parts(head, whole(answer))
            }
        }
    }

    /// The request as moto gets it: same method, path, headers and body, but for
    /// [`as_ec2_pages`].
    async fn send_aws(
        &self,
        upstream: &Uri,
        client: &Client<HttpConnector, Full<Bytes>>,
        parts: &http::request::Parts,
        key: &(String, String),
        body: &Bytes,
    ) -> Result<Response<Incoming>, String> {
        let path_and_query = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let uri = Uri::builder()
            .scheme("http")
            .authority(upstream.authority().map_or("127.0.0.1", |a| a.as_str()))
            .path_and_query(path_and_query)
            .build()
            .map_err(|e| format!("the path: {e}"))?;
        let changed = as_ec2_pages(key, body);
        let mut upstream = Request::builder().method(parts.method.clone()).uri(uri);
        for (name, value) in &parts.headers {
            // The client sets Host for the upstream it connects to, and the length
            // of a body the proxy changed.
            let changed_length = changed.is_some() && name == http::header::CONTENT_LENGTH;
            if name != http::header::HOST && !changed_length {
                upstream = upstream.header(name, value);
            }
        }
        let upstream = upstream
            .body(Full::new(changed.unwrap_or_else(|| body.clone())))
            .map_err(|e| e.to_string())?;
        client.request(upstream).await.map_err(|e| e.to_string())
    }

    fn count_request(
        &self,
        key: &(String, String),
        status: StatusCode,
        request_bytes: usize,
        first_page: bool,
        arrived: Instant,
        replayed: bool,
    ) {
        let mut traffic = self.traffic();
        let tally = traffic.calls.entry(key.clone()).or_default();
        tally.requests += 1;
        tally.replayed += u64::from(replayed);
        tally.errors += u64::from(!status.is_success());
        tally.request_bytes += request_bytes as u64;
        if key.0 == "LIST" && first_page {
            tally.lists += 1;
        }
        if key.0 == "ec2" && key.1 == "CreateFleet" {
            traffic.create_fleet_at.push(arrived);
        }
    }

    fn traffic(&self) -> std::sync::MutexGuard<'_, Traffic> {
        self.traffic.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn count_answer(
        &self,
        key: &(String, String),
        status: StatusCode,
        request: &[u8],
        answer: &[u8],
    ) {
        let units = (key.0 == "dynamodb").then(|| {
            let request: Value = serde_json::from_slice(request).unwrap_or(Value::Null);
            let response: Option<Value> = status
                .is_success()
                .then(|| serde_json::from_slice(answer).ok())
                .flatten();
            let is_write = matches!(
                key.1.as_str(),
                "PutItem" | "UpdateItem" | "DeleteItem" | "BatchWriteItem" | "TransactWriteItems"
            );
            // A failed conditional write still consumes write units; a failed read
            // returned nothing.
            if status.is_success() || is_write {
                dynamo_units::estimate(&key.1, &request, response.as_ref())
            } else {
                dynamo_units::Units::default()
            }
        });
        let mut traffic = self.traffic();
        let tally = traffic.calls.entry(key.clone()).or_default();
        tally.response_bytes += answer.len() as u64;
        if let Some(units) = units {
            tally.read_units += units.read;
            tally.write_units += units.write;
        }
    }
}

/// moto's answers to DescribeInstances, kept by request body and given again while
/// no EC2 write (any action but Describe*/Get*) has happened since: the same bytes
/// moto would send, without the wait. moto filters instances by tag in time that
/// grows with the square of their number (7 s for 1,000 instances, minutes for
/// 5,000 on the 2-core machine) where EC2 answers in seconds; without this, moto set
/// the pace of every tick at those sizes. The first answer of each request is
/// always moto's own.
#[derive(Default)]
struct Replay {
    kept: Mutex<Kept>,
}

/// The answers, and a count of EC2 writes begun or ended: an answer is kept only if
/// no write began or ended while it was asked (it could be from before the write).
#[derive(Default)]
struct Kept {
    answers: std::collections::HashMap<Bytes, Answer>,
    writes: u64,
}

#[derive(Clone)]
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Answer {
    fn response(self) -> Response<Body> {
        let mut response = Response::new(whole(self.body));
        *response.status_mut() = self.status;
        *response.headers_mut() = self.headers;
        response
    }
}

/// What the proxy does with a request, as far as [`Replay`] is concerned.
enum Begun {
    Replayed(Answer),
    /// Ask moto; `writes` is the count when the request arrived.
    Forward {
        writes: u64,
    },
}

fn is_ec2_write(key: &(String, String)) -> bool {
    key.0 == "ec2" && !(key.1.starts_with("Describe") || key.1.starts_with("Get"))
}

fn is_describe_instances(key: &(String, String)) -> bool {
    key.0 == "ec2" && key.1 == "DescribeInstances"
}

impl Replay {
    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn begin(&self, key: &(String, String), body: &Bytes) -> Begun {
        let mut kept = self.kept();
        if is_ec2_write(key) {
            kept.answers.clear();
            kept.writes += 1;
        } else if is_describe_instances(key)
            && let Some(answer) = kept.answers.get(body)
        {
            return Begun::Replayed(answer.clone());
        }
        Begun::Forward {
            writes: kept.writes,
        }
    }

    fn end(
        &self,
        key: &(String, String),
        body: &Bytes,
        writes_then: u64,
        head: &http::response::Parts,
        answer: &Bytes,
    ) {
        let mut kept = self.kept();
        if is_ec2_write(key) {
            kept.answers.clear();
            kept.writes += 1;
        } else if is_describe_instances(key)
            && head.status.is_success()
            && kept.writes == writes_then
        {
            kept.answers.insert(
                body.clone(),
                Answer {
                    status: head.status,
                    headers: head.headers.clone(),
                    body: answer.clone(),
                },
            );
        }
    }
}

/// What EC2 would page, asked of moto so that it pages the same: a DescribeInstances
/// without `MaxResults` is answered whole by EC2, but moto pages it by 100 and filters
/// every instance again for each page (27 s for 1,000 instances on the 2-core
/// machine, where one page takes 7 s). The function reads the same instances either
/// way. `None`: forward the body as it is.
fn as_ec2_pages(key: &(String, String), body: &[u8]) -> Option<Bytes> {
    if key.0 != "ec2" || key.1 != "DescribeInstances" {
        return None;
    }
    let form = std::str::from_utf8(body).ok()?;
    let paged = form
        .split('&')
        .any(|p| p.starts_with("MaxResults=") || p.starts_with("NextToken="));
    (!paged).then(|| Bytes::from(format!("{form}&MaxResults={WHOLE}")))
}

/// A page size no cluster reaches: the whole answer.
const WHOLE: u32 = 1_000_000;

/// A request to the API server: the path and query, headers (but `Host`: the client
/// sets the server's) and body as the function sent them. The client's base URL gives
/// the scheme and address.
fn forward_request(
    parts: &http::request::Parts,
    body: Bytes,
) -> Result<Request<kube::client::Body>, String> {
    let path_and_query = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut request = Request::builder()
        .method(parts.method.clone())
        .uri(path_and_query);
    for (name, value) in &parts.headers {
        if name != http::header::HOST {
            request = request.header(name, value);
        }
    }
    request
        .body(kube::client::Body::from(body))
        .map_err(|e| e.to_string())
}

/// A body answered whole.
fn whole(bytes: Bytes) -> Body {
    Full::new(bytes)
        .map_err(|never| match never {})
        .boxed_unsync()
}

fn failure(status: StatusCode, message: &str) -> Response<Body> {
    let mut response = Response::new(whole(Bytes::from(format!(
        "nodewright-bench proxy: {message}"
    ))));
    *response.status_mut() = status;
    response
}

/// (verb, resource) of a Kubernetes API request: `("LIST", "pods")`,
/// `("PATCH", "nodes/status")`, `("GET", "version")`.
pub fn kube_call(method: &http::Method, path: &str, query: Option<&str>) -> (String, String) {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match segments.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => return (method.to_string(), path.trim_matches('/').to_string()),
    };
    let rest = match rest {
        ["namespaces", _ns, rest @ ..] if !rest.is_empty() => rest,
        rest => rest,
    };
    let (resource, named, subresource) = match rest {
        [plural] => (*plural, false, None),
        [plural, _name] => (*plural, true, None),
        [plural, _name, sub, ..] => (*plural, true, Some(*sub)),
        [] => ("", false, None),
    };
    let resource = match subresource {
        Some(sub) => format!("{resource}/{sub}"),
        None => resource.to_string(),
    };
    let watching =
        query.is_some_and(|q| q.split('&').any(|p| matches!(p, "watch=true" | "watch=1")));
    let verb = match (method.as_str(), named) {
        ("GET", false) if watching => "WATCH",
        ("GET", false) => "LIST",
        (m, _) => m,
    };
    (verb.to_string(), resource)
}

/// (service, operation) of an AWS request: the service from SigV4's credential scope,
/// the operation from `X-Amz-Target` (JSON protocols), `Action` (query protocol), or
/// the method and first path segment (REST, as EKS).
pub fn aws_call(
    headers: &HeaderMap,
    path: &str,
    method: &http::Method,
    body: &[u8],
) -> (String, String) {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let service = header("authorization")
        .and_then(|auth| auth.split("Credential=").nth(1))
        .and_then(|scope| scope.split('/').nth(3))
        .unwrap_or("unknown")
        .to_string();
    if let Some(target) = header("x-amz-target") {
        let operation = target.rsplit('.').next().unwrap_or(target);
        return (service, operation.to_string());
    }
    let form = std::str::from_utf8(body).unwrap_or("");
    if let Some(action) = form
        .split('&')
        .find_map(|pair| pair.strip_prefix("Action="))
    {
        return (service, action.to_string());
    }
    let first = path.trim_matches('/').split('/').next().unwrap_or("");
    (service, format!("{method} /{first}"))
}

#[cfg(test)]
mod tests {
    use http::Method;

    use super::*;

    #[test]
    fn kubernetes_requests_are_named_by_verb_and_resource() {
        let call = |m: Method, p: &str, q: Option<&str>| kube_call(&m, p, q);
        let named = |v: &str, r: &str| (v.to_string(), r.to_string());
        assert_eq!(
            call(Method::GET, "/api/v1/pods", Some("limit=500")),
            named("LIST", "pods")
        );
        assert_eq!(
            call(
                Method::GET,
                "/api/v1/pods",
                Some("watch=true&resourceVersion=7&allowWatchBookmarks=true")
            ),
            named("WATCH", "pods")
        );
        assert_eq!(
            call(Method::GET, "/apis/karpenter.sh/v1/nodepools", None),
            named("LIST", "nodepools")
        );
        assert_eq!(
            call(
                Method::PATCH,
                "/apis/karpenter.k8s.aws/v1/ec2nodeclasses/default/status",
                None
            ),
            named("PATCH", "ec2nodeclasses/status")
        );
        assert_eq!(
            call(Method::POST, "/api/v1/namespaces/default/events", None),
            named("POST", "events")
        );
        assert_eq!(
            call(Method::GET, "/api/v1/namespaces/default/pods/web-1", None),
            named("GET", "pods")
        );
        assert_eq!(
            call(Method::GET, "/api/v1/namespaces/default", None),
            named("GET", "namespaces")
        );
        assert_eq!(call(Method::GET, "/version", None), named("GET", "version"));
    }

    #[test]
    fn moto_is_asked_for_describe_instances_whole_unless_the_caller_pages() {
        let describe = ("ec2".to_string(), "DescribeInstances".to_string());
        assert_eq!(
            as_ec2_pages(&describe, b"Action=DescribeInstances&Version=2016-11-15").as_deref(),
            Some(&b"Action=DescribeInstances&Version=2016-11-15&MaxResults=1000000"[..])
        );
        assert_eq!(
            as_ec2_pages(&describe, b"Action=DescribeInstances&MaxResults=5"),
            None
        );
        assert_eq!(
            as_ec2_pages(&describe, b"Action=DescribeInstances&NextToken=abc"),
            None
        );
        let other = ("ec2".to_string(), "DescribeSubnets".to_string());
        assert_eq!(as_ec2_pages(&other, b"Action=DescribeSubnets"), None);
    }

    #[test]
    fn describe_instances_is_replayed_only_while_nothing_was_written() {
        let describe = ("ec2".to_string(), "DescribeInstances".to_string());
        let fleet = ("ec2".to_string(), "CreateFleet".to_string());
        let body = Bytes::from_static(b"Action=DescribeInstances&Filter.1.Name=tag-key");
        let head = Response::new(()).into_parts().0;
        let answer = Bytes::from_static(b"<DescribeInstancesResponse/>");
        let replay = Replay::default();
        let writes = match replay.begin(&describe, &body) {
            Begun::Forward { writes } => writes,
            Begun::Replayed(_) => panic!("nothing kept yet"),
        };
        replay.end(&describe, &body, writes, &head, &answer);
        assert!(matches!(replay.begin(&describe, &body), Begun::Replayed(a) if a.body == answer));

        // A write forgets the answers, and one asked while a write was under way is
        // not kept (moto may have answered from before it).
        let Begun::Forward { writes } = replay.begin(&describe, &Bytes::from_static(b"other"))
        else {
            panic!("not kept")
        };
        replay.begin(&fleet, &Bytes::new());
        assert!(matches!(
            replay.begin(&describe, &body),
            Begun::Forward { .. }
        ));
        replay.end(
            &describe,
            &Bytes::from_static(b"other"),
            writes,
            &head,
            &answer,
        );
        assert!(matches!(
            replay.begin(&describe, &Bytes::from_static(b"other")),
            Begun::Forward { .. }
        ));
    }

    #[test]
    fn aws_requests_are_named_by_service_and_operation() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "authorization",
            "AWS4-HMAC-SHA256 Credential=test/20261120/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=0"
                .parse()
                .unwrap(),
        );
        headers.insert("x-amz-target", "DynamoDB_20120810.Query".parse().unwrap());
        assert_eq!(
            aws_call(&headers, "/", &Method::POST, b"{}"),
            ("dynamodb".to_string(), "Query".to_string())
        );
        headers.remove("x-amz-target");
        headers.insert(
            "authorization",
            "AWS4-HMAC-SHA256 Credential=test/20261120/us-east-1/ec2/aws4_request"
                .parse()
                .unwrap(),
        );
        assert_eq!(
            aws_call(
                &headers,
                "/",
                &Method::POST,
                b"Action=DescribeInstances&Version=2016-11-15"
            ),
            ("ec2".to_string(), "DescribeInstances".to_string())
        );
        assert_eq!(
            aws_call(&headers, "/clusters/prod", &Method::GET, b""),
            ("ec2".to_string(), "GET /clusters".to_string())
        );
    }
}
