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
        &format!("/api/v1/nodes?resourceVersion={old}&resourceVersionMatch=NotOlderThan&limit=1"),
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
    let mut second = Client::get(&server, &format!("/api/v1/nodes?limit=2&continue={token}")).await;
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
    let mut next = Client::get(&server, &format!("/api/v1/nodes?limit=1&continue={token}")).await;
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
    let mut pods = open_watch(&server, "/api/v1/pods?watch=true&allowWatchBookmarks=true").await;
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

    let mut refused = Client::get(&server, "/api/v1/pods?watch=true&labelSelector=app%3E1").await;
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
