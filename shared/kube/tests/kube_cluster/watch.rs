//! The watched view (`watch`): one LIST per kind, then WATCH with bookmarks; a stream
//! that breaks resumes from its resourceVersion; a version the server no longer has
//! (etcd compacted it) costs one LIST; a watch the server refuses to restart makes the
//! next read list afresh; a process whose watches go unread for a long while (a frozen
//! Lambda) catches up without listing.

use std::time::Duration;

use nodewright_engine::ports::Cluster;
use nodewright_kube::KubeCluster;
use nodewright_kube::testing::{FaultProxy, Options, RecordedRequest};
use serde_json::{Value, json};

use super::{api_server, eventually, narrow_role, node, pod, setup};

/// NodePools, EC2NodeClasses, NodeOverlays, CapacityBuffers, nodes, pods, DaemonSets,
/// PDBs, PVCs, PVs, StorageClasses, CSINodes (PodTemplates only once a buffer exists).
const KINDS: usize = 12;
const PODS: &str = "/api/v1/pods";
/// How long a read may take to see what the server has: generous, so that a slow,
/// busy machine does not fail a correct implementation.
const SEEN_WITHIN: Duration = Duration::from_secs(30);

/// LISTs and WATCHes of `path`.
fn lists_and_watches(proxy: &FaultProxy, path: &str) -> (usize, usize) {
    (proxy.count_lists(path), proxy.count_watches(path))
}

/// Every LIST the proxy saw (GETs of a collection or object that are not watches).
/// Waits until every kind the view reads is watched (the watches start in the
/// background after their lists).
async fn watching(proxy: &FaultProxy) {
    eventually("every kind is watched", SEEN_WITHIN, || async {
        proxy.open_watches() == KINDS
    })
    .await;
}

/// Reads unbound pods until `name` is there.
async fn sees_pod(cluster: &KubeCluster, name: &str) {
    eventually(&format!("the view has pod {name}"), SEEN_WITHIN, || async {
        let pods = cluster.unbound_pods().await.expect("pods");
        pods.iter().any(|p| p.name == name)
    })
    .await;
}

/// The `resourceVersion` a request asked for.
fn resource_version(request: &RecordedRequest) -> Option<u64> {
    request
        .query
        .split('&')
        .find_map(|p| p.strip_prefix("resourceVersion="))
        .and_then(|v| v.parse().ok())
}

fn config_map(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"},
        "data": {"k": "v"}})
}

#[tokio::test]
async fn a_pod_created_after_the_first_list_arrives_by_the_watch_without_a_second_list() {
    let t = api_server().await;
    t.cp.put(pod("default", "web-1", "500m")).await;
    assert_eq!(t.cluster.pods().await.expect("pods").len(), 1);

    t.cp.put(pod("default", "web-2", "500m")).await;

    sees_pod(&t.cluster, "web-2").await;
    let (lists, watches) = lists_and_watches(&t.proxy, PODS);
    assert_eq!(lists, 1, "one LIST, then the watch");
    assert!(watches >= 1);
    let state = t.cluster.state().await.expect("state");
    assert_eq!(state.pods.len(), 2);
    assert_eq!(
        lists_and_watches(&t.proxy, PODS).0,
        1,
        "a tick's read lists nothing"
    );
    let watch = t
        .proxy
        .requests()
        .into_iter()
        .find(|r| r.path == PODS && r.watch)
        .expect("a watch of pods");
    assert!(
        watch.query.contains("allowWatchBookmarks=true"),
        "{}",
        watch.query
    );
}

/// The ERROR event a real server streams for a version it no longer has, injected;
/// `a_compacted_resource_version_costs_one_list` has etcd compact for real.
#[tokio::test]
async fn a_watch_that_expired_lists_again_once() {
    let t = api_server().await;
    t.cp.put(pod("default", "web-1", "500m")).await;
    t.cluster.state().await.expect("state");
    t.cp.put(pod("default", "web-2", "500m")).await;
    sees_pod(&t.cluster, "web-2").await;

    // The stream breaks, and resuming it answers 410 Gone (the server forgot the
    // version): the watcher lists again.
    watching(&t.proxy).await;
    t.proxy.fail_next_watch(PODS, 410);
    t.proxy.drop_watches();
    t.cp.put(pod("default", "web-3", "500m")).await;

    sees_pod(&t.cluster, "web-3").await;
    let (lists, _) = lists_and_watches(&t.proxy, PODS);
    assert_eq!(lists, 2, "one list at the start, one after 410 Gone");
}

#[tokio::test]
async fn a_dropped_stream_resumes_from_its_resource_version_without_listing() {
    let t = api_server().await;
    t.cp.put(pod("default", "web-1", "500m")).await;
    t.cluster.state().await.expect("state");
    watching(&t.proxy).await;
    let listed_at = t.proxy.requests().len();

    t.proxy.drop_watches();
    t.cp.put(pod("default", "web-2", "500m")).await;

    sees_pod(&t.cluster, "web-2").await;
    let (lists, watches) = lists_and_watches(&t.proxy, PODS);
    assert_eq!(lists, 1, "no second list");
    assert!(watches >= 2, "the watch was made again");
    let resumed = t.proxy.requests()[listed_at..]
        .iter()
        .filter(|r| r.path == PODS && r.watch)
        .any(|r| resource_version(r).is_some_and(|v| v > 0));
    assert!(
        resumed,
        "it resumed from a resourceVersion: {:?}",
        t.proxy.requests()
    );
}

/// RBAC that grants list but not watch (the role `infra/rbac.yaml` warns about): the
/// watch cannot be restarted, and the next read cannot vouch for the view and lists.
#[tokio::test]
async fn a_watch_that_cannot_be_restarted_is_read_afresh_at_the_next_read() {
    let t = api_server().await;
    t.cp.put(pod("default", "web-1", "500m")).await;
    t.cluster.state().await.expect("state");
    watching(&t.proxy).await;

    narrow_role(
        &t.cp,
        |role| {
            for rule in role["rules"].as_array_mut().unwrap() {
                if rule["resources"] == json!(["pods"]) {
                    rule["verbs"] = json!(["get", "list", "delete"]);
                }
            }
        },
        ("watch", "", "pods"),
    )
    .await;
    t.proxy.drop_watches();
    t.cp.put(pod("default", "web-2", "500m")).await;
    eventually("the watch of pods was refused", SEEN_WITHIN, || async {
        t.proxy
            .requests()
            .iter()
            .any(|r| r.path == PODS && r.watch && r.status == 403)
    })
    .await;

    let pods = t.cluster.pods().await.expect("pods");
    assert_eq!(pods.len(), 2, "read afresh: {pods:?}");
    let (lists, _) = lists_and_watches(&t.proxy, PODS);
    assert_eq!(
        lists, 2,
        "one list at the start, one after the refused watch"
    );
}

/// A warm Lambda is frozen between invocations, its sockets unread; meanwhile the
/// server ends each watch (after its 25-s timeout) and the client's own idle timeout
/// (30 s) passes. Here the proxy holds every watch's events for 40 s — longer than
/// both — and cuts the streams open at the start, while pods and nodes change. On
/// release the view catches up from its resourceVersions: correct reads, no LIST.
#[tokio::test]
async fn a_process_whose_watches_go_unread_resumes_from_its_resource_versions_without_listing() {
    let t = api_server().await;
    t.cp.put(pod("default", "web-1", "500m")).await;
    t.cp.put(pod("default", "web-2", "500m")).await;
    t.cp.put(node("node-a")).await;
    t.cluster.state().await.expect("state");
    watching(&t.proxy).await;
    let before = t.proxy.requests().len();

    t.proxy.hold_watches();
    t.proxy.drop_watches();
    t.cp.put(pod("default", "web-3", "500m")).await;
    t.cp.remove("Pod", Some("default"), "web-1").await;
    t.cp.modify("Node", None, "node-a", |n| {
        n["metadata"]["labels"]["karpenter.sh/registered"] = json!("true");
    })
    .await;
    t.cp.put(node("node-b")).await;
    tokio::time::sleep(Duration::from_secs(40)).await;
    t.proxy.release_watches();

    eventually("the view caught up", SEEN_WITHIN, || async {
        let state = t.cluster.state().await.expect("state");
        let mut pods: Vec<&str> = state.pods.iter().map(|p| p.name.as_str()).collect();
        pods.sort();
        let registered = state
            .nodes
            .iter()
            .find(|n| n.name == "node-a")
            .is_some_and(|n| n.labels.contains_key("karpenter.sh/registered"));
        pods == ["web-2", "web-3"] && state.nodes.len() == 2 && registered
    })
    .await;
    // A loaded API server may refuse a watch's start with 429 (priority and fairness):
    // that kind is then read afresh once, by design. The freeze itself lists nothing.
    let requests = t.proxy.requests();
    let throttled: Vec<&str> = requests
        .iter()
        .filter(|r| r.watch && r.status == 429)
        .map(|r| r.path.as_str())
        .collect();
    let lists: Vec<&str> = requests[before..]
        .iter()
        .filter(|r| r.method == "GET" && !r.watch && !throttled.contains(&r.path.as_str()))
        .map(|r| r.path.as_str())
        .collect();
    assert!(lists.is_empty(), "no LIST: {lists:?} in {requests:#?}");
    let resumed: Vec<Option<u64>> = t
        .proxy
        .requests()
        .iter()
        .filter(|r| r.path == PODS && r.watch)
        .map(resource_version)
        .collect();
    assert!(
        resumed.iter().skip(1).all(|v| v.is_some_and(|v| v > 0)),
        "every watch after the first resumed from a resourceVersion: {resumed:?}"
    );
}

/// kube-apiserver's watch cache answers a resumed watch from its own window; without
/// it (`--watch-cache=false`) the resume reaches etcd, which has compacted the version
/// away: an ERROR event (410 Expired), and the watcher lists once more — per kind,
/// exactly once.
#[tokio::test]
async fn a_compacted_resource_version_costs_one_list() {
    let t = setup(Options::api_server_only().with_apiserver_arg("--watch-cache=false")).await;
    t.cp.put(pod("default", "web-1", "500m")).await;
    t.cluster.state().await.expect("state");
    watching(&t.proxy).await;

    for i in 0..3 {
        t.cp.put(config_map(&format!("unwatched-{i}"))).await;
    }
    t.cp.compact().await;
    t.proxy.drop_watches();
    t.cp.put(pod("default", "web-2", "500m")).await;

    sees_pod(&t.cluster, "web-2").await;
    eventually("every kind is watched again", SEEN_WITHIN, || async {
        t.proxy.open_watches() == KINDS
    })
    .await;
    let expired = t
        .proxy
        .requests()
        .iter()
        .filter(|r| r.path == PODS && r.watch)
        .count();
    assert!(expired >= 2, "the resumed watch reached etcd");
    for path in [
        PODS,
        "/api/v1/nodes",
        "/apis/karpenter.sh/v1/nodepools",
        "/apis/storage.k8s.io/v1/storageclasses",
    ] {
        assert_eq!(
            t.proxy.count_lists(path),
            2,
            "{path}: the first list and one after the compaction"
        );
    }
    let state = t.cluster.state().await.expect("state");
    assert_eq!(state.pods.len(), 2);
}

/// The watches ask for bookmarks, and a bookmark's resourceVersion is where the next
/// watch resumes from — not the last event's, which for a quiet kind falls behind
/// etcd's revision until the server's watch cache no longer has it. kube-apiserver
/// sends a watch its bookmark shortly before the watch's timeout (25 s here).
#[tokio::test]
async fn a_resumed_watch_starts_from_the_last_bookmark() {
    let t = api_server().await;
    t.cp.put(pod("default", "web-1", "500m")).await;
    t.cluster.state().await.expect("state");
    watching(&t.proxy).await;
    let first = t
        .proxy
        .requests()
        .into_iter()
        .find(|r| r.path == PODS && r.watch)
        .expect("the first watch of pods");
    let listed_at = resource_version(&first).expect("a watch from the list's version");

    // Other kinds change; pods do not.
    for i in 0..3 {
        t.cp.put(config_map(&format!("unwatched-{i}"))).await;
    }
    let revision = t.cp.revision().await;
    assert!(revision > listed_at);
    // A consistent read of pods makes the watch cache catch up with etcd's revision,
    // which its next bookmarks then carry.
    t.cp.list("Pod").await;

    eventually(
        "a watch of pods resumed past the list's version",
        Duration::from_secs(90),
        || async {
            t.proxy
                .requests()
                .iter()
                .filter(|r| r.path == PODS && r.watch)
                .any(|r| resource_version(r).is_some_and(|v| v >= revision))
        },
    )
    .await;
    let watches: Vec<RecordedRequest> = t
        .proxy
        .requests()
        .into_iter()
        .filter(|r| r.path == PODS && r.watch)
        .collect();
    assert!(
        watches
            .iter()
            .all(|w| w.query.contains("allowWatchBookmarks=true")),
        "{watches:#?}"
    );
    assert_eq!(
        t.proxy.count_lists(PODS),
        1,
        "no list: resumed, not relisted"
    );
    // The view still reads the same pods.
    assert_eq!(t.cluster.pods().await.expect("pods").len(), 1);
}
