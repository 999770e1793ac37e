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

use super::Shared;
use super::answer::{Answer, status_answer, status_value};
use super::events::{Event, EventType, Feed};
use super::selector::Selectors;
use super::serve::{Route, Served, query_param};
use super::store::{ResourceType, Store};

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
    let status = status_value(410, "Expired", message, None);
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
mod tests;
