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
//!   whole, so bodies are read whole and inspected. DescribeInstances is changed on
//!   its way: one that EC2 would answer in one page gets moto to do the same
//!   ([`as_ec2_pages`]), and one the function pages (`MaxResults`) is asked of moto
//!   whole and paged by the proxy ([`Pages`]). moto filters every instance again for
//!   each page it hands out, so without these its paging (not the function) set the
//!   pace of every tick from a few hundred instances up. And unless told not to, a
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
    /// Answered by the proxy from moto's earlier answer: an identical request
    /// ([`Replay`]), or a later page of a DescribeInstances ([`Pages`]).
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
    pages: Pages,
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
            pages: Pages::default(),
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
        let client = match &self.target {
            Target::Kubernetes(client) => client,
            Target::Aws { upstream, client } => {
                let key = aws_call(&parts.headers, parts.uri.path(), &parts.method, &body);
                return self
                    .forward_aws(upstream, client, &parts, key, body, arrived)
                    .await;
            }
        };
        let key = kube_call(&parts.method, parts.uri.path(), parts.uri.query());
        let first_page = !parts
            .uri
            .query()
            .is_some_and(|q| q.split('&').any(|p| p.starts_with("continue=")));
        let response = match forward_request(&parts, body.clone()) {
            Ok(request) => client.send(request).await.map_err(|e| e.to_string()),
            Err(e) => Err(e),
        };
        let response = match response {
            Ok(response) => response,
            Err(e) => return failure(StatusCode::BAD_GATEWAY, &format!("upstream: {e}")),
        };
        self.count_request(
            &key,
            response.status(),
            body.len(),
            first_page,
            arrived,
            false,
        );
        let traffic = self.traffic.clone();
        response.map(move |body| {
            body.map_err(BoxError::from)
                .map_frame(move |frame: Frame<Bytes>| {
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

    /// An AWS request, answered by moto, or by the proxy from moto's earlier answer
    /// ([`Replay`], [`Pages`]).
    async fn forward_aws(
        &self,
        upstream: &Uri,
        client: &Client<HttpConnector, Full<Bytes>>,
        parts: &http::request::Parts,
        key: (String, String),
        body: Bytes,
        arrived: Instant,
    ) -> Response<Body> {
        let paged = PageRequest::of(&key, &body);
        if let Some(PageRequest {
            next_token: Some(token),
            max_results,
            ..
        }) = &paged
        {
            let Some(page) = self.pages.later_page(token, *max_results) else {
                return failure(
                    StatusCode::BAD_REQUEST,
                    &format!(
                        "DescribeInstances NextToken {token:?} names no listing the proxy keeps"
                    ),
                );
            };
            return self.answered(&key, &body, arrived, page, true);
        }
        let changed = match &paged {
            Some(paged) => Some(paged.whole.clone()),
            None => as_ec2_pages(&key, &body),
        };
        let asked = changed.clone().unwrap_or_else(|| body.clone());
        let begun = self.replay.as_ref().map(|r| r.begin(&key, &asked));
        let (answer, replayed) = match begun {
            Some(Begun::Replayed(answer)) => (answer, true),
            begun => {
                let answer = match self
                    .ask_moto(upstream, client, parts, &asked, changed.is_some())
                    .await
                {
                    Ok(answer) => answer,
                    Err(e) => return failure(StatusCode::BAD_GATEWAY, &e),
                };
                if let (Some(replay), Some(Begun::Forward { writes })) = (&self.replay, begun) {
                    replay.end(&key, &asked, writes, &answer);
                }
                (answer, false)
            }
        };
        let answer = match &paged {
            Some(paged) => self.pages.first_page(answer, paged.max_results),
            None => answer,
        };
        self.answered(&key, &body, arrived, answer, replayed)
    }

    /// Counts the request and its answer, and answers.
    fn answered(
        &self,
        key: &(String, String),
        body: &Bytes,
        arrived: Instant,
        answer: Answer,
        replayed: bool,
    ) -> Response<Body> {
        self.count_request(key, answer.status, body.len(), true, arrived, replayed);
        self.count_answer(key, answer.status, body, &answer.body);
        answer.response()
    }

    /// moto's whole answer to `body`, sent with the method, path and headers the
    /// function sent (`body_changed`: the proxy changed the body, so not its length).
    async fn ask_moto(
        &self,
        upstream: &Uri,
        client: &Client<HttpConnector, Full<Bytes>>,
        parts: &http::request::Parts,
        body: &Bytes,
        body_changed: bool,
    ) -> Result<Answer, String> {
        let path_and_query = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let uri = Uri::builder()
            .scheme("http")
            .authority(upstream.authority().map_or("127.0.0.1", |a| a.as_str()))
            .path_and_query(path_and_query)
            .build()
            .map_err(|e| format!("the path: {e}"))?;
        let mut request = Request::builder().method(parts.method.clone()).uri(uri);
        for (name, value) in &parts.headers {
            // The client sets Host for the upstream it connects to, and the length
            // of a body the proxy changed.
            let changed_length = body_changed && name == http::header::CONTENT_LENGTH;
            if name != http::header::HOST && !changed_length {
                request = request.header(name, value);
            }
        }
        let request = request
            .body(Full::new(body.clone()))
            .map_err(|e| e.to_string())?;
        let response = client
            .request(request)
            .await
            .map_err(|e| format!("upstream: {e}"))?;
        let (head, answer) = response.into_parts();
        let body = answer
            .collect()
            .await
            .map_err(|e| format!("upstream body: {e}"))?
            .to_bytes();
        Ok(Answer {
            status: head.status,
            headers: head.headers,
            body,
        })
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

    fn end(&self, key: &(String, String), body: &Bytes, writes_then: u64, answer: &Answer) {
        let mut kept = self.kept();
        if is_ec2_write(key) {
            kept.answers.clear();
            kept.writes += 1;
        } else if is_describe_instances(key)
            && answer.status.is_success()
            && kept.writes == writes_then
        {
            kept.answers.insert(body.clone(), answer.clone());
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

/// A DescribeInstances the function pages: what moto is asked for instead (the same
/// filters, whole), the page size, and the proxy's `NextToken` on later pages.
struct PageRequest {
    whole: Bytes,
    max_results: usize,
    next_token: Option<String>,
}

impl PageRequest {
    fn of(key: &(String, String), body: &[u8]) -> Option<PageRequest> {
        if !is_describe_instances(key) {
            return None;
        }
        let form = std::str::from_utf8(body).ok()?;
        let mut max_results = None;
        let mut next_token = None;
        let mut kept = Vec::new();
        for pair in form.split('&') {
            if let Some(max) = pair.strip_prefix("MaxResults=") {
                max_results = max.parse::<usize>().ok().filter(|&m| m > 0);
            } else if let Some(token) = pair.strip_prefix("NextToken=") {
                next_token = Some(token.to_string());
            } else {
                kept.push(pair);
            }
        }
        let max_results = max_results?;
        kept.push("");
        let whole = format!("{}MaxResults={WHOLE}", kept.join("&"));
        Some(PageRequest {
            whole: Bytes::from(whole),
            max_results,
            next_token,
        })
    }
}

/// DescribeInstances paged by the proxy as EC2 pages it: moto is asked once for
/// every reservation, and the function is handed `MaxResults` reservations at a
/// time with the proxy's own `NextToken`. moto itself filters every instance (and
/// looks up every tag of the account for each) again for each page: a page of
/// 1,000 of 10,000 instances took it 12–16 minutes on the 2-core machine, where the
/// whole answer takes one such pass. A listing is kept until [`KEPT_LISTINGS`]
/// later ones have begun.
#[derive(Default)]
struct Pages {
    listings: Mutex<Listings>,
}

#[derive(Default)]
struct Listings {
    begun: u64,
    kept: std::collections::VecDeque<(u64, Arc<Listing>)>,
}

const KEPT_LISTINGS: usize = 8;

/// moto's whole answer, cut at its reservations: `head` ends with
/// `<reservationSet>`, `tail` follows `</reservationSet>`.
struct Listing {
    status: StatusCode,
    headers: HeaderMap,
    head: Bytes,
    reservations: Vec<Bytes>,
    tail: Bytes,
}

impl Listing {
    fn cut(answer: &Answer) -> Option<Listing> {
        if !answer.status.is_success() {
            return None;
        }
        let (head, reservations, tail) = cut_reservations(&answer.body)?;
        let mut headers = answer.headers.clone();
        headers.remove(http::header::CONTENT_LENGTH);
        Some(Listing {
            status: answer.status,
            headers,
            head,
            reservations,
            tail,
        })
    }

    /// The reservations from `from`, at most `max`, and the token of what follows.
    fn page(&self, listing: u64, from: usize, max: usize) -> Answer {
        let to = from.saturating_add(max).min(self.reservations.len());
        let from = from.min(to);
        let mut body = Vec::with_capacity(
            self.head.len()
                + self.reservations[from..to]
                    .iter()
                    .map(Bytes::len)
                    .sum::<usize>()
                + self.tail.len()
                + 64,
        );
        body.extend_from_slice(&self.head);
        for reservation in &self.reservations[from..to] {
            body.extend_from_slice(reservation);
        }
        body.extend_from_slice(b"</reservationSet>");
        if to < self.reservations.len() {
            body.extend_from_slice(
                format!("<nextToken>{}</nextToken>", token(listing, to)).as_bytes(),
            );
        }
        body.extend_from_slice(&self.tail);
        Answer {
            status: self.status,
            headers: self.headers.clone(),
            body: Bytes::from(body),
        }
    }
}

const TOKEN_PREFIX: &str = "nodewright-bench-";

fn token(listing: u64, from: usize) -> String {
    format!("{TOKEN_PREFIX}{listing}-{from}")
}

impl Pages {
    fn listings(&self) -> std::sync::MutexGuard<'_, Listings> {
        self.listings.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The first page of moto's whole answer, or the answer as it is when it is not
    /// a list of reservations (an error, or none at all).
    fn first_page(&self, answer: Answer, max_results: usize) -> Answer {
        let Some(listing) = Listing::cut(&answer) else {
            return answer;
        };
        let listing = Arc::new(listing);
        let id = {
            let mut listings = self.listings();
            listings.begun += 1;
            let id = listings.begun;
            listings.kept.push_back((id, listing.clone()));
            while listings.kept.len() > KEPT_LISTINGS {
                listings.kept.pop_front();
            }
            id
        };
        listing.page(id, 0, max_results)
    }

    /// The page `token` names, while its listing is kept.
    fn later_page(&self, token: &str, max_results: usize) -> Option<Answer> {
        let (id, from) = token.strip_prefix(TOKEN_PREFIX)?.split_once('-')?;
        let (id, from) = (id.parse::<u64>().ok()?, from.parse::<usize>().ok()?);
        let listing = self
            .listings()
            .kept
            .iter()
            .find(|(kept, _)| *kept == id)
            .map(|(_, listing)| listing.clone())?;
        Some(listing.page(id, from, max_results))
    }
}

/// An EC2 DescribeInstances answer cut into what precedes its reservations (through
/// `<reservationSet>`), each reservation's `<item>`, and what follows
/// `</reservationSet>` (less any `nextToken`). `None` when it has no such set.
fn cut_reservations(xml: &Bytes) -> Option<(Bytes, Vec<Bytes>, Bytes)> {
    const OPEN: &[u8] = b"<reservationSet>";
    let text = xml.as_ref();
    let open = find(text, OPEN, 0)? + OPEN.len();
    let mut reservations = Vec::new();
    let mut depth = 0usize;
    let mut item_start = 0;
    let mut at = open;
    loop {
        let lt = at + text[at..].iter().position(|&b| b == b'<')?;
        let gt = lt + text[lt..].iter().position(|&b| b == b'>')?;
        match &text[lt + 1..gt] {
            b"item" => {
                if depth == 0 {
                    item_start = lt;
                }
                depth += 1;
            }
            b"/item" => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    reservations.push(xml.slice(item_start..gt + 1));
                }
            }
            b"item/" if depth == 0 => reservations.push(xml.slice(lt..gt + 1)),
            b"/reservationSet" if depth == 0 => {
                let tail = without_next_token(xml.slice(gt + 1..));
                return Some((xml.slice(..open), reservations, tail));
            }
            _ => {}
        }
        at = gt + 1;
    }
}

fn without_next_token(tail: Bytes) -> Bytes {
    let text = tail.as_ref();
    let Some(start) = find(text, b"<nextToken>", 0) else {
        return tail;
    };
    let Some(end) = find(text, b"</nextToken>", start) else {
        return tail;
    };
    let mut kept = text[..start].to_vec();
    kept.extend_from_slice(&text[end + b"</nextToken>".len()..]);
    Bytes::from(kept)
}

fn find(haystack: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    haystack
        .get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + from)
}

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
        let answer = Bytes::from_static(b"<DescribeInstancesResponse/>");
        let whole = Answer {
            status: StatusCode::OK,
            headers: HeaderMap::new(),
            body: answer.clone(),
        };
        let replay = Replay::default();
        let writes = match replay.begin(&describe, &body) {
            Begun::Forward { writes } => writes,
            Begun::Replayed(_) => panic!("nothing kept yet"),
        };
        replay.end(&describe, &body, writes, &whole);
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
        replay.end(&describe, &Bytes::from_static(b"other"), writes, &whole);
        assert!(matches!(
            replay.begin(&describe, &Bytes::from_static(b"other")),
            Begun::Forward { .. }
        ));
    }

    /// Three reservations (the second of two instances, with tags: nested items),
    /// as moto serializes DescribeInstances.
    fn three_reservations() -> Answer {
        let reservation = |id: &str, instances: &[&str]| {
            let instances: String = instances
                .iter()
                .map(|i| {
                    format!(
                        "<item><instanceId>{i}</instanceId><tagSet><item><key>k</key>\
                         <value>v</value></item></tagSet></item>"
                    )
                })
                .collect();
            format!(
                "<item><reservationId>{id}</reservationId><instancesSet>{instances}</instancesSet></item>"
            )
        };
        let body = format!(
            "<?xml version=\"1.0\"?><DescribeInstancesResponse><requestId>r</requestId>\
             <reservationSet>{}{}{}</reservationSet></DescribeInstancesResponse>",
            reservation("r-1", &["i-1"]),
            reservation("r-2", &["i-2", "i-3"]),
            reservation("r-3", &["i-4"]),
        );
        let mut headers = HeaderMap::new();
        headers.insert(http::header::CONTENT_LENGTH, body.len().into());
        Answer {
            status: StatusCode::OK,
            headers,
            body: Bytes::from(body),
        }
    }

    fn next_token(page: &Answer) -> Option<String> {
        let text = std::str::from_utf8(&page.body).unwrap();
        let start = text.find("<nextToken>")? + "<nextToken>".len();
        Some(text[start..text.find("</nextToken>")?].to_string())
    }

    fn instances(page: &Answer) -> Vec<String> {
        let text = std::str::from_utf8(&page.body).unwrap();
        text.split("<instanceId>")
            .skip(1)
            .map(|rest| rest[..rest.find('<').unwrap()].to_string())
            .collect()
    }

    #[test]
    fn a_paged_describe_instances_is_asked_of_moto_whole_and_paged_by_reservation() {
        let describe = ("ec2".to_string(), "DescribeInstances".to_string());
        let first = PageRequest::of(
            &describe,
            b"Action=DescribeInstances&Filter.1.Name=tag-key&MaxResults=2&Version=2016-11-15",
        )
        .unwrap();
        assert_eq!(
            &first.whole[..],
            b"Action=DescribeInstances&Filter.1.Name=tag-key&Version=2016-11-15&MaxResults=1000000"
        );
        assert_eq!((first.max_results, first.next_token.as_deref()), (2, None));
        assert!(PageRequest::of(&describe, b"Action=DescribeInstances").is_none());
        let subnets = ("ec2".to_string(), "DescribeSubnets".to_string());
        assert!(PageRequest::of(&subnets, b"Action=DescribeSubnets&MaxResults=5").is_none());

        let pages = Pages::default();
        let page = pages.first_page(three_reservations(), first.max_results);
        assert_eq!(instances(&page), ["i-1", "i-2", "i-3"]);
        assert!(page.headers.get(http::header::CONTENT_LENGTH).is_none());
        let token = next_token(&page).expect("a second page");
        let later = PageRequest::of(
            &describe,
            format!("Action=DescribeInstances&MaxResults=2&NextToken={token}").as_bytes(),
        )
        .unwrap();
        assert_eq!(later.next_token.as_deref(), Some(token.as_str()));
        let last = pages.later_page(&token, later.max_results).unwrap();
        assert_eq!(instances(&last), ["i-4"]);
        assert_eq!(next_token(&last), None);
        let text = std::str::from_utf8(&last.body).unwrap();
        assert!(
            text.ends_with("</reservationSet></DescribeInstancesResponse>"),
            "{text}"
        );
        assert!(text.starts_with("<?xml version=\"1.0\"?><DescribeInstancesResponse>"));

        assert!(
            pages.later_page("i-123", 2).is_none(),
            "moto's own tokens are not ours"
        );
        for _ in 0..KEPT_LISTINGS {
            pages.first_page(three_reservations(), 2);
        }
        assert!(
            pages.later_page(&token, 2).is_none(),
            "an old listing is let go"
        );
    }

    #[test]
    fn an_answer_without_reservations_is_handed_on_as_it_is() {
        let pages = Pages::default();
        let empty = Answer {
            status: StatusCode::OK,
            headers: HeaderMap::new(),
            body: Bytes::from_static(
                b"<DescribeInstancesResponse><reservationSet/></DescribeInstancesResponse>",
            ),
        };
        assert_eq!(pages.first_page(empty.clone(), 5).body, empty.body);
        let error = Answer {
            status: StatusCode::BAD_REQUEST,
            headers: HeaderMap::new(),
            body: Bytes::from_static(b"<Response><Errors/></Response>"),
        };
        assert_eq!(pages.first_page(error.clone(), 5).body, error.body);
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
