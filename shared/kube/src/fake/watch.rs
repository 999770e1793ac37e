//! WATCH: `GET <collection>?watch=true`, streamed as a real API server streams it — a
//! 200 whose chunked body is one JSON watch event per line,
//! `{"type":"ADDED"|"MODIFIED"|"DELETED"|"BOOKMARK"|"ERROR","object":{...}}`.
//!
//! A watch is opened under the server's lock (its start is read from the store and it
//! is subscribed to the changes that follow in one critical section, so it misses
//! none), then streamed by a [`WatchBody`] that takes the lock only to ask for a
//! bookmark and to unsubscribe: writers never wait for a watcher, and a watcher never
//! blocks the server.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Response};
use hyper::body::Frame;
use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::{Instant, Interval, MissedTickBehavior, Sleep};

use super::events::{Event, EventType, Feed};
use super::selector::Selectors;
use super::store::{ResourceType, Store};
use super::{Answer, Route, Served, Shared, query_param, status_answer};

/// A watch body sends at most about this much per frame (the replay of a big list is
/// many events).
const FRAME_BYTES: usize = 64 * 1024;

/// The bookmark a real server sends as the last of the initial events when asked for
/// them with `sendInitialEvents=true`.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// Whether a request asks for a watch: a GET with `watch` true, as the API server
/// parses a boolean (`true`, `1`, `t`...).
pub(crate) fn requested(method: &Method, query: &str) -> bool {
    method == Method::GET && query_param(query, "watch").is_some_and(|w| parse_bool(&w))
}

/// Go's `strconv.ParseBool`, true side.
fn parse_bool(value: &str) -> bool {
    matches!(value, "1" | "t" | "T" | "true" | "TRUE" | "True")
}

/// Where a watch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    /// `resourceVersion` "" or "0" (or `sendInitialEvents=true`): an ADDED event for
    /// every object that exists now, then the changes that follow.
    Current,
    /// `resourceVersion=R`: the changes after R, from the history.
    After(u64),
}

/// The parameters of a watch request.
#[derive(Debug)]
struct Params {
    start: Start,
    bookmarks: bool,
    timeout: Option<Duration>,
    selectors: Selectors,
    /// `sendInitialEvents=true`: the current objects, then a bookmark marking their end.
    initial_events: bool,
}

impl Params {
    fn parse(query: &str) -> Result<Params, String> {
        let flag = |name| query_param(query, name).is_some_and(|v| parse_bool(&v));
        let initial_events = flag("sendInitialEvents");
        let start = match query_param(query, "resourceVersion").as_deref() {
            _ if initial_events => Start::Current,
            None | Some("" | "0") => Start::Current,
            Some(rv) => Start::After(
                rv.parse()
                    .map_err(|_| format!("invalid resource version {rv:?}"))?,
            ),
        };
        let timeout = match query_param(query, "timeoutSeconds") {
            None => None,
            Some(t) => {
                let seconds: u64 = t
                    .parse()
                    .map_err(|_| format!("invalid timeoutSeconds {t:?}"))?;
                // 0, like no value, leaves the timeout to the server: none here.
                (seconds > 0).then(|| Duration::from_secs(seconds))
            }
        };
        Ok(Params {
            start,
            bookmarks: flag("allowWatchBookmarks"),
            timeout,
            selectors: Selectors::parse(
                query_param(query, "fieldSelector"),
                query_param(query, "labelSelector"),
            )?,
            initial_events,
        })
    }
}

/// What a watch sends before its feed.
#[derive(Debug)]
enum Line {
    /// A change from the history.
    Change(Arc<Event>),
    /// A synthetic ADDED event for an object that exists when the watch opens.
    Existing(Arc<Value>),
    Bookmark {
        revision: u64,
        initial_events_end: bool,
    },
}

/// A watch opened under the server's lock, to become a [`WatchBody`] once it is
/// released.
#[derive(Debug)]
pub(crate) struct Opened {
    resource: ResourceType,
    selectors: Selectors,
    initial: VecDeque<Line>,
    /// The revision the initial lines bring the client to: a change in the feed at or
    /// before it is not sent (only possible for a start ahead of the store).
    after: u64,
    id: u64,
    feed: UnboundedReceiver<Feed>,
    dropped: Arc<AtomicBool>,
    bookmark_every: Option<Duration>,
    timeout: Option<Duration>,
}

/// Opens a watch on `route`'s collection — or answers instead: 400 for bad
/// parameters, or a 200 with one ERROR event `410 Expired` for a compacted
/// resourceVersion, which ends there.
pub(crate) fn open(
    store: &mut Store,
    route: &Route,
    query: &str,
    bookmark_interval: Duration,
) -> Served {
    let params = match Params::parse(query) {
        Ok(params) => params,
        Err(why) => return Served::Answer(status_answer(400, "BadRequest", &why, None)),
    };
    let kind = route.resource.kind;
    let namespace = route.namespace.as_deref();
    let revision = store.revision();
    let mut initial = VecDeque::new();
    let after = match params.start {
        Start::Current => {
            initial.extend(store.shared(kind, namespace).cloned().map(Line::Existing));
            if params.initial_events {
                initial.push_back(Line::Bookmark {
                    revision,
                    initial_events_end: true,
                });
            }
            revision
        }
        Start::After(rv) => match store.history.since(rv) {
            Ok(changes) => {
                initial.extend(
                    changes
                        .filter(|e| e.concerns(kind, namespace))
                        .cloned()
                        .map(Line::Change),
                );
                rv
            }
            Err(compacted) => {
                return Served::Answer(expired(&format!(
                    "too old resource version: {rv} ({compacted})"
                )));
            }
        },
    };
    let subscription = store.watchers.subscribe(kind, namespace, params.bookmarks);
    Served::Watch(Opened {
        resource: route.resource.clone(),
        selectors: params.selectors,
        initial,
        after,
        id: subscription.id,
        feed: subscription.feed,
        dropped: subscription.dropped,
        bookmark_every: Some(bookmark_interval).filter(|i| params.bookmarks && !i.is_zero()),
        timeout: params.timeout,
    })
}

/// The real server's answer to a watch from a forgotten resourceVersion: 200, one
/// ERROR event carrying a `410 Expired` Status, and the end of the stream.
pub(crate) fn expired(message: &str) -> Answer {
    let status = super::status_value(410, "Expired", message, None);
    let mut line = json!({ "type": "ERROR", "object": status }).to_string();
    line.push('\n');
    let mut answer = Response::new(Bytes::from(line));
    answer.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    answer
}

/// The body of an open watch: the initial lines, then the feed, with bookmarks and the
/// timeout interleaved. Ends cleanly at the timeout or when the kind is uninstalled,
/// abruptly (an error, so hyper cuts the connection mid-stream) when the watch is
/// dropped by [`FakeApiServer::drop_watches`](super::FakeApiServer::drop_watches).
pub(crate) struct WatchBody {
    shared: Arc<Shared>,
    resource: ResourceType,
    selectors: Selectors,
    initial: VecDeque<Line>,
    after: u64,
    id: u64,
    feed: UnboundedReceiver<Feed>,
    dropped: Arc<AtomicBool>,
    bookmarks: Option<Interval>,
    deadline: Option<Pin<Box<Sleep>>>,
    /// The feed closed while a frame was still to go: end after that frame.
    closing: bool,
    finished: bool,
}

impl WatchBody {
    /// Must run in the server's runtime (the timers are tokio's).
    pub(crate) fn new(opened: Opened, shared: Arc<Shared>) -> WatchBody {
        let bookmarks = opened.bookmark_every.map(|every| {
            let mut ticks = tokio::time::interval_at(Instant::now() + every, every);
            ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
            ticks
        });
        WatchBody {
            shared,
            resource: opened.resource,
            selectors: opened.selectors,
            initial: opened.initial,
            after: opened.after,
            id: opened.id,
            feed: opened.feed,
            dropped: opened.dropped,
            bookmarks,
            deadline: opened.timeout.map(|t| Box::pin(tokio::time::sleep(t))),
            closing: false,
            finished: false,
        }
    }

    /// Unsubscribes, once.
    fn finish(&mut self) {
        if !self.finished {
            self.finished = true;
            self.shared.state().store.watchers.unsubscribe(self.id);
        }
    }

    /// The abrupt end: hyper closes the connection without the chunked body's last
    /// chunk, and the client reads a broken stream.
    fn abort(&mut self) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        self.finish();
        Poll::Ready(Some(Err(io::Error::new(
            io::ErrorKind::ConnectionAborted,
            "the fake API server dropped the watch",
        ))))
    }

    /// Queues a bookmark at the current revision behind the changes already queued
    /// (under the lock, so none can slip in between).
    fn queue_bookmark(&self) {
        let mut state = self.shared.state();
        let revision = state.store.revision();
        state.store.watchers.bookmark(self.id, revision);
    }

    fn render_line(&self, line: &Line, out: &mut Vec<u8>) {
        match line {
            Line::Change(event) => self.render_change(event, out),
            Line::Existing(object) => {
                if self.selectors.matches(object) {
                    write_event(out, EventType::Added.as_str(), object);
                }
            }
            Line::Bookmark {
                revision,
                initial_events_end,
            } => self.render_bookmark(*revision, *initial_events_end, out),
        }
    }

    fn render_feed(&self, feed: &Feed, out: &mut Vec<u8>) {
        match feed {
            Feed::Event(event) => self.render_change(event, out),
            Feed::Bookmark(revision) => {
                self.render_bookmark((*revision).max(self.after), false, out)
            }
        }
    }

    /// A change as this watch's selectors see it, as the API server's watch cache
    /// sends it: an object entering the selection is ADDED, one leaving it is DELETED
    /// (as it was before, with the change's resourceVersion), one outside it is not
    /// sent.
    fn render_change(&self, event: &Event, out: &mut Vec<u8>) {
        if event.revision <= self.after {
            return;
        }
        if self.selectors.is_empty() {
            write_event(out, event.event_type.as_str(), &event.object);
            return;
        }
        let now = event.event_type != EventType::Deleted && self.selectors.matches(&event.object);
        let before = event
            .previous
            .as_ref()
            .is_some_and(|p| self.selectors.matches(p));
        match (before, now) {
            (false, true) => write_event(out, EventType::Added.as_str(), &event.object),
            (true, true) => write_event(out, EventType::Modified.as_str(), &event.object),
            (true, false) => {
                let mut last = event.previous.as_deref().cloned().unwrap_or_default();
                last["metadata"]["resourceVersion"] = event.revision.to_string().into();
                write_event(out, EventType::Deleted.as_str(), &last);
            }
            (false, false) => {}
        }
    }

    fn render_bookmark(&self, revision: u64, initial_events_end: bool, out: &mut Vec<u8>) {
        let mut metadata = json!({ "resourceVersion": revision.to_string() });
        if initial_events_end {
            metadata["annotations"] = json!({ INITIAL_EVENTS_END: "true" });
        }
        let object = json!({
            "kind": self.resource.kind,
            "apiVersion": self.resource.api_version(),
            "metadata": metadata,
        });
        write_event(out, "BOOKMARK", &object);
    }

    /// The next frame: the initial lines first, then whatever the feed holds; `None`
    /// when there is nothing to send yet (the timers and the feed will wake the body).
    fn next_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let mut out = Vec::new();
        while out.len() < FRAME_BYTES
            && let Some(line) = self.initial.pop_front()
        {
            self.render_line(&line, &mut out);
        }
        if !out.is_empty() {
            return frame(out);
        }
        if let Some(deadline) = &mut self.deadline
            && deadline.as_mut().poll(cx).is_ready()
        {
            self.finish();
            return Poll::Ready(None);
        }
        let mut bookmark_due = false;
        if let Some(ticks) = &mut self.bookmarks {
            while ticks.poll_tick(cx).is_ready() {
                bookmark_due = true;
            }
        }
        if bookmark_due {
            self.queue_bookmark();
        }
        while out.len() < FRAME_BYTES {
            match self.feed.poll_recv(cx) {
                Poll::Ready(Some(feed)) => self.render_feed(&feed, &mut out),
                Poll::Ready(None) if self.dropped.load(Ordering::SeqCst) => return self.abort(),
                Poll::Ready(None) if out.is_empty() => {
                    self.finish();
                    return Poll::Ready(None);
                }
                Poll::Ready(None) => {
                    self.closing = true;
                    break;
                }
                Poll::Pending => break,
            }
        }
        if out.is_empty() {
            Poll::Pending
        } else {
            frame(out)
        }
    }
}

impl Drop for WatchBody {
    /// The client hung up (hyper drops the body), or the stream ended.
    fn drop(&mut self) {
        self.finish();
    }
}

impl hyper::body::Body for WatchBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = self.get_mut();
        if this.finished {
            return Poll::Ready(None);
        }
        // Checked first: a dropped watch sends nothing more, not even what is queued.
        if this.dropped.load(Ordering::SeqCst) {
            return this.abort();
        }
        if this.closing {
            this.finish();
            return Poll::Ready(None);
        }
        this.next_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.finished
    }
}

fn frame(out: Vec<u8>) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
    Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))))
}

/// One watch event, as a line.
fn write_event(out: &mut Vec<u8>, event_type: &str, object: &Value) {
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(event_type.as_bytes());
    out.extend_from_slice(b"\",\"object\":");
    out.extend_from_slice(object.to_string().as_bytes());
    out.extend_from_slice(b"}\n");
}

#[cfg(test)]
mod tests {
    //! Watches over real HTTP, read by a minimal HTTP/1.1 client that tells a clean end
    //! of the chunked body (its last chunk) from a broken one, and checks every line
    //! parses as kube-rs's `WatchEvent`, as kube-rs reads it.

    use std::time::Duration;

    use k8s_openapi::api::core::v1::{Node, Pod};
    use kube::core::WatchEvent;
    use serde_json::{Value, json};
    use tokio::net::TcpStream;
    use tokio::time::timeout;

    use crate::fake::FakeApiServer;

    /// How long a test waits for something the server should send at once.
    const PATIENCE: Duration = Duration::from_secs(5);

    /// How a response body ended.
    #[derive(Debug, PartialEq, Eq)]
    enum End {
        /// Its last chunk (or all its Content-Length) arrived.
        Clean,
        /// The connection closed before.
        Broken,
    }

    /// One HTTP/1.1 GET, its body read line by line as it streams.
    struct Client {
        stream: TcpStream,
        raw: Vec<u8>,
        body: Vec<u8>,
        status: u16,
        headers: String,
        /// `None`: chunked; `Some(n)`: n bytes of Content-Length still to come.
        remaining: Option<usize>,
        complete: bool,
    }

    impl Client {
        async fn get(server: &FakeApiServer, target: &str) -> Client {
            let address = server.url().trim_start_matches("http://").to_string();
            let stream = TcpStream::connect(address).await.expect("the fake accepts");
            let request =
                format!("GET {target} HTTP/1.1\r\nHost: fake\r\nAccept: application/json\r\n\r\n");
            let mut sent = 0;
            while sent < request.len() {
                stream.writable().await.expect("writable");
                match stream.try_write(&request.as_bytes()[sent..]) {
                    Ok(n) => sent += n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => panic!("sending the request: {e}"),
                }
            }
            let mut client = Client {
                stream,
                raw: Vec::new(),
                body: Vec::new(),
                status: 0,
                headers: String::new(),
                remaining: None,
                complete: false,
            };
            client.read_head().await;
            client
        }

        /// Reads more bytes; false at the end of the connection.
        async fn fill(&mut self) -> bool {
            let mut buffer = [0u8; 16 * 1024];
            loop {
                if self.stream.readable().await.is_err() {
                    return false;
                }
                match self.stream.try_read(&mut buffer) {
                    Ok(0) => return false,
                    Ok(n) => {
                        self.raw.extend_from_slice(&buffer[..n]);
                        return true;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(_) => return false,
                }
            }
        }

        async fn read_head(&mut self) {
            let end = loop {
                if let Some(i) = self.raw.windows(4).position(|w| w == b"\r\n\r\n") {
                    break i;
                }
                assert!(
                    self.fill().await,
                    "the connection closed before the headers"
                );
            };
            let head = String::from_utf8_lossy(&self.raw[..end]).to_string();
            self.raw.drain(..end + 4);
            self.status = head
                .split(' ')
                .nth(1)
                .and_then(|s| s.parse().ok())
                .expect("a status line");
            self.headers = head.to_ascii_lowercase();
            self.remaining = self
                .headers
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map(|n| n.trim().parse().expect("a length"));
        }

        fn header(&self, name: &str) -> Option<String> {
            self.headers
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{name}:")))
                .map(|v| v.trim().to_string())
        }

        /// Moves what `raw` holds of the body into `body`; false when more is needed.
        fn decode(&mut self) -> bool {
            match &mut self.remaining {
                Some(remaining) => {
                    let n = (*remaining).min(self.raw.len());
                    self.body.extend(self.raw.drain(..n));
                    *remaining -= n;
                    self.complete = *remaining == 0;
                    n > 0 || self.complete
                }
                None => {
                    let Some(eol) = self.raw.windows(2).position(|w| w == b"\r\n") else {
                        return false;
                    };
                    let size =
                        usize::from_str_radix(String::from_utf8_lossy(&self.raw[..eol]).trim(), 16)
                            .expect("a chunk size");
                    if self.raw.len() < eol + 2 + size + 2 {
                        return false;
                    }
                    self.body
                        .extend_from_slice(&self.raw[eol + 2..eol + 2 + size]);
                    self.raw.drain(..eol + 2 + size + 2);
                    self.complete = size == 0;
                    true
                }
            }
        }

        /// The next line of the body, or how the body ended.
        async fn line(&mut self) -> Result<String, End> {
            loop {
                if let Some(i) = self.body.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = self.body.drain(..=i).collect();
                    return Ok(String::from_utf8(line)
                        .expect("UTF-8")
                        .trim_end()
                        .to_string());
                }
                if self.complete {
                    return Err(End::Clean);
                }
                if !self.decode() && !self.fill().await {
                    return Err(End::Broken);
                }
            }
        }

        /// The next watch event as (type, object), checked to parse as kube-rs parses it.
        async fn event(&mut self) -> Result<(String, Value), End> {
            let line = timeout(PATIENCE, self.line())
                .await
                .expect("an event or the end of the stream in time")?;
            let event: Value = serde_json::from_str(&line).expect("a JSON line");
            let kind = event["object"]["kind"].as_str().unwrap_or_default();
            let parsed = match kind {
                "Pod" => serde_json::from_str::<WatchEvent<Pod>>(&line).map(|_| ()),
                "Node" => serde_json::from_str::<WatchEvent<Node>>(&line).map(|_| ()),
                _ => serde_json::from_str::<WatchEvent<Value>>(&line).map(|_| ()),
            };
            assert!(parsed.is_ok(), "kube-rs cannot read {line}: {parsed:?}");
            let event_type = event["type"].as_str().expect("a type").to_string();
            Ok((event_type, event["object"].clone()))
        }

        /// How the stream ends, failing if it sends anything more.
        async fn end(&mut self) -> End {
            match timeout(PATIENCE, self.line())
                .await
                .expect("the stream ends in time")
            {
                Ok(line) => panic!("expected the end of the stream, got {line}"),
                Err(end) => end,
            }
        }

        /// The whole body, for an answer that is not a watch.
        async fn json(&mut self) -> Value {
            let line = timeout(PATIENCE, self.line())
                .await
                .expect("an answer in time")
                .or_else(|_| Ok::<_, End>(String::from_utf8_lossy(&self.body).to_string()))
                .expect("a body");
            serde_json::from_str(&line).expect("a JSON answer")
        }
    }

    fn node(name: &str) -> Value {
        json!({ "apiVersion": "v1", "kind": "Node", "metadata": { "name": name } })
    }

    fn pod(namespace: &str, name: &str, node: &str) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": { "name": name, "namespace": namespace, "labels": { "app": name } },
            "spec": { "nodeName": node, "containers": [] },
        })
    }

    fn rv(object: &Value) -> u64 {
        object["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|rv| rv.parse().ok())
            .expect("a numeric resourceVersion")
    }

    fn name(object: &Value) -> &str {
        object["metadata"]["name"].as_str().unwrap_or_default()
    }

    async fn server() -> FakeApiServer {
        FakeApiServer::start().await.expect("the fake starts")
    }

    async fn open_watch(server: &FakeApiServer, target: &str) -> Client {
        let client = Client::get(server, target).await;
        assert_eq!(client.status, 200, "{target}");
        client
    }

    #[tokio::test]
    async fn a_watch_streams_added_modified_and_deleted_in_order_with_increasing_versions() {
        let server = server().await;
        let start = server.revision();
        let mut watch = open_watch(
            &server,
            &format!("/api/v1/nodes?watch=true&resourceVersion={start}"),
        )
        .await;
        assert_eq!(
            watch.header("content-type").as_deref(),
            Some("application/json")
        );
        assert_eq!(
            watch.header("transfer-encoding").as_deref(),
            Some("chunked")
        );

        server.put(node("n1"));
        server.modify("Node", None, "n1", |n| {
            n["metadata"]["labels"] = json!({ "a": "b" })
        });
        let last_stored = server.get("Node", None, "n1").expect("stored");
        server.remove("Node", None, "n1");

        let (added, a) = watch.event().await.expect("ADDED");
        let (modified, m) = watch.event().await.expect("MODIFIED");
        let (deleted, d) = watch.event().await.expect("DELETED");
        assert_eq!(
            (added.as_str(), modified.as_str(), deleted.as_str()),
            ("ADDED", "MODIFIED", "DELETED")
        );
        assert!(start < rv(&a) && rv(&a) < rv(&m) && rv(&m) < rv(&d));
        // Built-in kinds carry apiVersion and kind in events (not in list items).
        assert_eq!(
            (a["apiVersion"].as_str(), a["kind"].as_str()),
            (Some("v1"), Some("Node"))
        );
        assert_eq!(m["metadata"]["labels"]["a"], "b");
        // DELETED: the object as last stored, at the deletion's revision.
        assert_eq!(rv(&d), server.revision());
        let mut expected = last_stored;
        expected["metadata"]["resourceVersion"] = server.revision().to_string().into();
        assert_eq!(d, expected);
    }

    #[tokio::test]
    async fn a_watch_from_version_zero_or_none_starts_with_the_current_objects() {
        let server = server().await;
        server.put(node("a"));
        server.put(node("b"));
        for target in [
            "/api/v1/nodes?watch=1&resourceVersion=0",
            "/api/v1/nodes?watch=true",
        ] {
            let mut watch = open_watch(&server, target).await;
            let first = watch.event().await.expect("an event");
            let second = watch.event().await.expect("an event");
            assert_eq!(
                [
                    (first.0.as_str(), name(&first.1)),
                    (second.0.as_str(), name(&second.1))
                ],
                [("ADDED", "a"), ("ADDED", "b")],
                "{target}"
            );
            server.put(node(&format!("c{}", server.revision())));
            let (live, _) = watch.event().await.expect("a live event");
            assert_eq!(live, "ADDED");
        }
    }

    #[tokio::test]
    async fn a_watch_from_an_old_version_replays_the_changes_since_then_streams_live_ones() {
        let server = server().await;
        server.put(node("before"));
        let from = server.revision();
        server.put(node("after"));
        server.modify("Node", None, "before", |n| {
            n["spec"] = json!({ "unschedulable": true })
        });
        server.remove("Node", None, "after");

        let mut watch = open_watch(
            &server,
            &format!("/api/v1/nodes?watch=true&resourceVersion={from}"),
        )
        .await;
        let mut replayed = Vec::new();
        for _ in 0..3 {
            let (t, o) = watch.event().await.expect("a replayed event");
            replayed.push((t, name(&o).to_string()));
        }
        assert_eq!(
            replayed,
            [
                ("ADDED", "after"),
                ("MODIFIED", "before"),
                ("DELETED", "after")
            ]
            .map(|(t, n)| (t.to_string(), n.to_string()))
        );
        server.put(node("live"));
        let (t, o) = watch.event().await.expect("a live event");
        assert_eq!((t.as_str(), name(&o)), ("ADDED", "live"));
    }

    #[tokio::test]
    async fn a_watch_from_a_compacted_version_answers_410_gone() {
        let server = server().await;
        server.put(node("a"));
        let old = server.revision();
        server.put(node("b"));
        server.compact();

        let mut watch = open_watch(
            &server,
            &format!("/api/v1/nodes?watch=true&resourceVersion={old}"),
        )
        .await;
        let (t, status) = watch.event().await.expect("an ERROR event");
        assert_eq!(t, "ERROR");
        assert_eq!(status["kind"], "Status");
        assert_eq!(status["code"], 410);
        assert_eq!(status["reason"], "Expired");
        let now = server.revision();
        assert_eq!(
            status["message"],
            format!("too old resource version: {old} ({now})")
        );
        assert_eq!(watch.end().await, End::Clean);

        // From the compacted revision itself, nothing is missing.
        let mut current = open_watch(
            &server,
            &format!("/api/v1/nodes?watch=true&resourceVersion={now}"),
        )
        .await;
        server.put(node("c"));
        assert_eq!(current.event().await.expect("live").0, "ADDED");
    }

    #[tokio::test]
    async fn a_bounded_history_forgets_its_oldest_changes() {
        let server = server().await;
        server.set_history_limit(2);
        let start = server.revision();
        for n in ["a", "b", "c"] {
            server.put(node(n));
        }
        let mut gone = open_watch(
            &server,
            &format!("/api/v1/nodes?watch=true&resourceVersion={start}"),
        )
        .await;
        assert_eq!(gone.event().await.expect("an event").1["code"], 410);
        let mut kept = open_watch(
            &server,
            &format!("/api/v1/nodes?watch=true&resourceVersion={}", start + 1),
        )
        .await;
        assert_eq!(name(&kept.event().await.expect("b").1), "b");
        assert_eq!(name(&kept.event().await.expect("c").1), "c");
    }

    #[tokio::test]
    async fn a_list_at_an_exact_compacted_version_answers_410_gone() {
        let server = server().await;
        server.put(node("a"));
        let old = server.revision();
        server.put(node("b"));
        server.compact();

        let mut exact = Client::get(
            &server,
            &format!("/api/v1/nodes?resourceVersion={old}&resourceVersionMatch=Exact"),
        )
        .await;
        assert_eq!(exact.status, 410);
        let status = exact.json().await;
        assert_eq!(
            (status["reason"].as_str(), status["code"].as_u64()),
            (Some("Expired"), Some(410))
        );

        let mut any = Client::get(
            &server,
            &format!(
                "/api/v1/nodes?resourceVersion={old}&resourceVersionMatch=NotOlderThan&limit=1"
            ),
        )
        .await;
        assert_eq!(any.status, 200);
        let list = any.json().await;
        assert_eq!(
            list["items"].as_array().map(Vec::len),
            Some(1),
            "limit still pages"
        );
        assert!(list["metadata"]["continue"].is_string());
        let now = server.revision();
        let current = Client::get(
            &server,
            &format!("/api/v1/nodes?resourceVersion={now}&resourceVersionMatch=Exact"),
        )
        .await;
        assert_eq!(current.status, 200);
    }

    #[tokio::test]
    async fn a_list_paged_across_writes_then_watched_from_its_version_misses_nothing() {
        let server = server().await;
        for n in ["a", "b", "c"] {
            server.put(node(n));
        }
        let mut first = Client::get(&server, "/api/v1/nodes?limit=2").await;
        let first = first.json().await;
        let listed_at = first["metadata"]["resourceVersion"].clone();
        // Written between the pages: "a" was served already, "d" comes after "c".
        server.modify("Node", None, "a", |n| {
            n["metadata"]["labels"] = json!({ "x": "y" })
        });
        server.put(node("d"));
        let token = first["metadata"]["continue"]
            .as_str()
            .expect("more to come");
        let mut second =
            Client::get(&server, &format!("/api/v1/nodes?limit=2&continue={token}")).await;
        let second = second.json().await;
        assert_eq!(
            second["metadata"]["resourceVersion"], listed_at,
            "one snapshot's version"
        );
        assert_eq!(
            second["items"]
                .as_array()
                .map(|i| i.iter().map(name).collect::<Vec<_>>()),
            Some(vec!["c", "d"])
        );

        let listed_at = listed_at.as_str().expect("a string");
        let mut watch = open_watch(
            &server,
            &format!("/api/v1/nodes?watch=true&resourceVersion={listed_at}"),
        )
        .await;
        let (t, o) = watch.event().await.expect("the change to a");
        assert_eq!(
            (t.as_str(), name(&o), &o["metadata"]["labels"]["x"]),
            ("MODIFIED", "a", &json!("y"))
        );
        assert_eq!(name(&watch.event().await.expect("d").1), "d");
    }

    #[tokio::test]
    async fn a_continue_token_older_than_a_compaction_answers_410_gone() {
        let server = server().await;
        for n in ["a", "b"] {
            server.put(node(n));
        }
        let mut first = Client::get(&server, "/api/v1/nodes?limit=1").await;
        let first = first.json().await;
        server.put(node("c"));
        server.compact();
        let token = first["metadata"]["continue"]
            .as_str()
            .expect("more to come");
        let mut next =
            Client::get(&server, &format!("/api/v1/nodes?limit=1&continue={token}")).await;
        assert_eq!(next.status, 410);
        assert_eq!(next.json().await["reason"], "Expired");
    }

    #[tokio::test]
    async fn bookmarks_arrive_on_the_interval_and_on_demand_at_the_current_version() {
        let server = server().await;
        server.set_bookmark_interval(Duration::from_millis(50));
        let start = server.revision();
        // A change of another kind moves the revision, and the bookmark with it.
        server.put(pod("default", "p", "n1"));
        let mut ticking = open_watch(
            &server,
            &format!("/api/v1/nodes?watch=true&allowWatchBookmarks=true&resourceVersion={start}"),
        )
        .await;
        let (t, bookmark) = ticking.event().await.expect("a bookmark");
        assert_eq!(t, "BOOKMARK");
        assert_eq!(bookmark["kind"], "Node");
        assert_eq!(bookmark["apiVersion"], "v1");
        assert_eq!(rv(&bookmark), server.revision());

        server.set_bookmark_interval(Duration::ZERO);
        let mut on_demand = open_watch(
            &server,
            "/api/v1/pods?watch=true&allowWatchBookmarks=true&resourceVersion=0",
        )
        .await;
        let mut without = open_watch(
            &server,
            &format!(
                "/api/v1/pods?watch=true&resourceVersion={}",
                server.revision()
            ),
        )
        .await;
        assert_eq!(
            on_demand.event().await.expect("the existing pod").0,
            "ADDED"
        );
        server.put(pod("default", "q", "n1"));
        server.bookmark_now();
        // Queued behind the change before it.
        assert_eq!(on_demand.event().await.expect("the change").0, "ADDED");
        let (t, bookmark) = on_demand.event().await.expect("a bookmark");
        assert_eq!((t.as_str(), rv(&bookmark)), ("BOOKMARK", server.revision()));
        // A watch that did not allow bookmarks gets none.
        server.put(pod("default", "r", "n1"));
        assert_eq!(name(&without.event().await.expect("q").1), "q");
        assert_eq!(name(&without.event().await.expect("r").1), "r");
    }

    #[tokio::test]
    async fn timeout_seconds_ends_the_stream_cleanly() {
        let server = server().await;
        let mut watch = open_watch(
            &server,
            "/api/v1/nodes?watch=true&timeoutSeconds=1&resourceVersion=0",
        )
        .await;
        assert_eq!(server.open_watches(), 1);
        assert_eq!(watch.end().await, End::Clean);
        assert_eq!(server.open_watches(), 0);
    }

    #[tokio::test]
    async fn drop_watches_breaks_every_open_stream() {
        let server = server().await;
        let start = server.revision();
        let mut nodes = open_watch(
            &server,
            &format!("/api/v1/nodes?watch=true&resourceVersion={start}"),
        )
        .await;
        let mut pods =
            open_watch(&server, "/api/v1/pods?watch=true&allowWatchBookmarks=true").await;
        server.put(node("a"));
        assert_eq!(nodes.event().await.expect("ADDED").0, "ADDED");
        assert_eq!(server.open_watches(), 2);

        server.drop_watches();

        assert_eq!(server.open_watches(), 0);
        assert_eq!(nodes.end().await, End::Broken);
        assert_eq!(pods.end().await, End::Broken);
        // The client resumes from the last version it saw, and misses nothing.
        let seen = server.get("Node", None, "a").map(|n| rv(&n)).expect("a");
        server.put(node("b"));
        let mut resumed = open_watch(
            &server,
            &format!("/api/v1/nodes?watch=true&resourceVersion={seen}"),
        )
        .await;
        assert_eq!(name(&resumed.event().await.expect("b").1), "b");
    }

    #[tokio::test]
    async fn a_client_that_hangs_up_closes_its_watch() {
        let server = server().await;
        let watch = open_watch(&server, "/api/v1/nodes?watch=true").await;
        assert_eq!(server.open_watches(), 1);
        drop(watch);
        let closed = timeout(PATIENCE, async {
            while server.open_watches() > 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        assert!(closed.is_ok(), "the watch is still open");
    }

    #[tokio::test]
    async fn a_namespaced_watch_sees_only_its_namespace() {
        let server = server().await;
        server.put(pod("a", "old", "n1"));
        server.put(pod("b", "other", "n1"));
        let mut watch = open_watch(
            &server,
            "/api/v1/namespaces/a/pods?watch=true&resourceVersion=0",
        )
        .await;
        assert_eq!(name(&watch.event().await.expect("old").1), "old");
        server.put(pod("b", "elsewhere", "n1"));
        server.put(pod("a", "here", "n1"));
        let (t, o) = watch.event().await.expect("here");
        assert_eq!(
            (t.as_str(), name(&o), o["metadata"]["namespace"].as_str()),
            ("ADDED", "here", Some("a"))
        );
    }

    #[tokio::test]
    async fn a_field_selector_filters_and_an_object_leaving_it_is_deleted() {
        let server = server().await;
        let start = server.revision();
        let mut watch = open_watch(
            &server,
            &format!(
                "/api/v1/pods?watch=true&fieldSelector=spec.nodeName%3Dn1&resourceVersion={start}"
            ),
        )
        .await;
        server.put(pod("default", "elsewhere", "n2"));
        server.put(pod("default", "here", "n1"));
        let (t, o) = watch.event().await.expect("here");
        assert_eq!((t.as_str(), name(&o)), ("ADDED", "here"));

        server.modify("Pod", Some("default"), "here", |p| {
            p["spec"]["nodeName"] = "n2".into()
        });
        let (t, o) = watch.event().await.expect("leaves");
        assert_eq!(
            (t.as_str(), name(&o), o["spec"]["nodeName"].as_str()),
            ("DELETED", "here", Some("n1"))
        );
        assert_eq!(rv(&o), server.revision(), "at the change's version");

        server.modify("Pod", Some("default"), "elsewhere", |p| {
            p["spec"]["nodeName"] = "n1".into()
        });
        let (t, o) = watch.event().await.expect("enters");
        assert_eq!((t.as_str(), name(&o)), ("ADDED", "elsewhere"));
    }

    #[tokio::test]
    async fn a_label_selector_filters_lists_and_watches() {
        let server = server().await;
        server.put(pod("default", "web", "n1"));
        server.put(pod("default", "db", "n1"));
        let mut list = Client::get(&server, "/api/v1/pods?labelSelector=app%3Dweb").await;
        let items = list.json().await["items"].clone();
        assert_eq!(
            items
                .as_array()
                .map(|i| i.iter().map(name).collect::<Vec<_>>()),
            Some(vec!["web"])
        );

        let mut watch = open_watch(
            &server,
            "/api/v1/pods?watch=true&labelSelector=app%21%3Dweb",
        )
        .await;
        assert_eq!(name(&watch.event().await.expect("db").1), "db");

        let mut refused =
            Client::get(&server, "/api/v1/pods?watch=true&labelSelector=app%3E1").await;
        assert_eq!(refused.status, 400);
        assert_eq!(refused.json().await["reason"], "BadRequest");
    }

    #[tokio::test]
    async fn an_injected_failure_fails_the_next_watch_and_410_is_an_expired_event() {
        let server = server().await;
        server.fail_next("GET", "/api/v1/pods", 500);
        let failed = Client::get(&server, "/api/v1/pods?watch=true").await;
        assert_eq!(failed.status, 500);

        server.fail_next("GET", "/api/v1/pods", 410);
        let mut expired = open_watch(&server, "/api/v1/pods?watch=true&resourceVersion=1").await;
        let (t, status) = expired.event().await.expect("an ERROR event");
        assert_eq!(
            (
                t.as_str(),
                status["code"].as_u64(),
                status["reason"].as_str()
            ),
            ("ERROR", Some(410), Some("Expired"))
        );
        assert_eq!(expired.end().await, End::Clean);

        // Lists keep failing with the status itself.
        server.fail_next("GET", "/api/v1/pods", 410);
        assert_eq!(Client::get(&server, "/api/v1/pods").await.status, 410);
        assert_eq!(server.count_watches("/api/v1/pods"), 2);
        assert_eq!(server.count_lists("/api/v1/pods"), 1);
    }

    #[tokio::test]
    async fn a_failure_for_lists_only_or_watches_only_leaves_the_other_alone() {
        let server = server().await;
        server.fail_next_list("/api/v1/pods", 500);
        server.fail_next_watch("/api/v1/nodes", 410);
        let _untouched = open_watch(&server, "/api/v1/pods?watch=true").await;
        assert_eq!(Client::get(&server, "/api/v1/nodes").await.status, 200);
        assert_eq!(Client::get(&server, "/api/v1/pods").await.status, 500);
        let mut expired = open_watch(&server, "/api/v1/nodes?watch=true").await;
        assert_eq!(
            expired.event().await.expect("an ERROR event").1["code"],
            410
        );
    }

    #[tokio::test]
    async fn custom_resources_can_be_watched_too() {
        let server = server().await;
        let mut watch = open_watch(
            &server,
            "/apis/karpenter.sh/v1/nodepools?watch=true&allowWatchBookmarks=true",
        )
        .await;
        server.put(json!({ "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": { "name": "default" }, "spec": {} }));
        let (t, o) = watch.event().await.expect("ADDED");
        assert_eq!(
            (t.as_str(), o["kind"].as_str(), o["apiVersion"].as_str()),
            ("ADDED", Some("NodePool"), Some("karpenter.sh/v1"))
        );
        server.bookmark_now();
        let (t, o) = watch.event().await.expect("a bookmark");
        assert_eq!(
            (t.as_str(), o["apiVersion"].as_str()),
            ("BOOKMARK", Some("karpenter.sh/v1"))
        );
    }

    #[tokio::test]
    async fn uninstalling_a_kind_deletes_its_objects_and_ends_its_watches() {
        let server = server().await;
        server.put(json!({ "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": { "name": "default" }, "spec": {} }));
        let mut watch = open_watch(
            &server,
            &format!(
                "/apis/karpenter.sh/v1/nodepools?watch=true&resourceVersion={}",
                server.revision()
            ),
        )
        .await;
        server.uninstall("NodePool");
        let (t, o) = watch.event().await.expect("DELETED");
        assert_eq!((t.as_str(), name(&o)), ("DELETED", "default"));
        assert_eq!(watch.end().await, End::Clean);
        assert_eq!(
            Client::get(&server, "/apis/karpenter.sh/v1/nodepools?watch=true")
                .await
                .status,
            404
        );
    }

    #[tokio::test]
    async fn send_initial_events_ends_the_current_objects_with_a_marked_bookmark() {
        let server = server().await;
        server.put(node("a"));
        let mut watch = open_watch(&server, "/api/v1/nodes?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&resourceVersion=").await;
        assert_eq!(watch.event().await.expect("a").0, "ADDED");
        let (t, bookmark) = watch.event().await.expect("the end of the initial events");
        assert_eq!(t, "BOOKMARK");
        assert_eq!(
            bookmark["metadata"]["annotations"]["k8s.io/initial-events-end"],
            "true"
        );
        assert_eq!(rv(&bookmark), server.revision());
    }

    #[tokio::test]
    async fn watches_are_logged_when_they_start_and_counted_apart_from_lists() {
        let server = server().await;
        let _list = Client::get(&server, "/api/v1/nodes").await.json().await;
        let _watch = open_watch(&server, "/api/v1/nodes?watch=true").await;
        let logged = server.requests();
        assert_eq!(
            logged
                .iter()
                .map(|r| (r.path.as_str(), r.status, r.watch))
                .collect::<Vec<_>>(),
            [("/api/v1/nodes", 200, false), ("/api/v1/nodes", 200, true)]
        );
        assert_eq!(
            (
                server.count_lists("/api/v1/nodes"),
                server.count_watches("/api/v1/nodes")
            ),
            (1, 1)
        );
        assert_eq!(server.count("GET", "/api/v1/nodes"), 2);
    }

    #[tokio::test]
    async fn bytes_served_counts_every_body_byte() {
        let server = server().await;
        server.put(node("a"));
        let mut list = Client::get(&server, "/api/v1/nodes").await;
        let answer = list.json().await;
        assert_eq!(server.bytes_served(), answer.to_string().len() as u64);

        let before = server.bytes_served();
        let mut watch = open_watch(&server, "/api/v1/nodes?watch=true").await;
        let line = timeout(PATIENCE, watch.line())
            .await
            .expect("in time")
            .expect("a line");
        assert_eq!(server.bytes_served() - before, line.len() as u64 + 1);
    }

    #[tokio::test]
    async fn a_writer_never_waits_for_a_watcher_that_does_not_read() {
        let server = server().await;
        let start = server.revision();
        let mut idle = open_watch(
            &server,
            &format!("/api/v1/pods?watch=true&resourceVersion={start}"),
        )
        .await;
        let padding = "x".repeat(4096);
        let began = std::time::Instant::now();
        for i in 0..3000 {
            let mut p = pod("default", &format!("p{i}"), "n1");
            p["metadata"]["annotations"] = json!({ "padding": padding });
            server.put(p);
        }
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "writes waited for the watcher"
        );
        let (t, o) = idle.event().await.expect("the first change");
        assert_eq!((t.as_str(), name(&o)), ("ADDED", "p0"));
    }
}
