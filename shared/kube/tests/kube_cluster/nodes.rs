//! `patch_node`: labels and annotations by merge patch, taints read-modify-written under
//! the read resourceVersion (a concurrent change is a 409 from the server, then read
//! again), and the view holding the server's answer at once.

use nodewright_core::api::model::TaintEffect;
use nodewright_engine::ports::{Cluster, ErrorKind, NodePatch};
use nodewright_kube::TAINT_ATTEMPTS;
use nodewright_kube::testing::objects;
use serde_json::json;

use super::{UNREGISTERED, api_server, node, registration_patch, taint, taint_keys};

#[tokio::test]
async fn patch_node_sets_labels_removes_the_unregistered_taint_and_adds_a_taint() {
    let t = api_server().await;
    t.cp.put(node("node-a")).await;

    t.cluster
        .patch_node("node-a", &registration_patch())
        .await
        .expect("patched");

    let node = t.cp.get("Node", None, "node-a").await.expect("the node");
    assert_eq!(
        node["metadata"]["labels"]["karpenter.sh/registered"],
        "true"
    );
    assert_eq!(
        node["metadata"]["labels"]["kubernetes.io/hostname"], "node-a",
        "other labels kept"
    );
    assert_eq!(
        node["metadata"]["annotations"]["karpenter.sh/nodepool-hash"], "7271df6171be70a1",
        "the drift hash is written with the labels"
    );
    assert_eq!(
        taint_keys(&node),
        ["node.kubernetes.io/not-ready", "dedicated"]
    );
    assert_eq!(
        node["spec"]["taints"][1],
        json!({"key": "dedicated", "value": "gpu", "effect": "NoSchedule"})
    );
    let patch = t
        .proxy
        .requests()
        .into_iter()
        .find(|r| r.method == "PATCH")
        .expect("a patch");
    assert_eq!(
        patch.content_type.as_deref(),
        Some("application/merge-patch+json")
    );
    assert!(patch.query.contains("fieldValidation=Strict"), "{patch:?}");
    assert!(
        patch.body.expect("a body")["metadata"]["resourceVersion"].is_string(),
        "the read version is a precondition"
    );

    // Once applied, the same patch has nothing left to do: no write.
    t.proxy.clear_requests();
    t.cluster
        .patch_node("node-a", &registration_patch())
        .await
        .expect("no-op");
    assert_eq!(t.proxy.count("PATCH", "/api/v1/nodes/node-a"), 0);
}

#[tokio::test]
async fn patch_node_with_labels_only_sends_one_merge_patch() {
    let t = api_server().await;
    t.cp.put(node("node-a")).await;
    let patch = NodePatch {
        set_labels: [("team".to_string(), "web".to_string())].into(),
        ..NodePatch::default()
    };

    t.cluster
        .patch_node("node-a", &patch)
        .await
        .expect("patched");

    let stored = t.cp.get("Node", None, "node-a").await.unwrap();
    assert_eq!(stored["metadata"]["labels"]["team"], "web");
    let requests = t.proxy.requests();
    assert_eq!(requests.len(), 1, "{requests:#?}");
    assert_eq!(requests[0].method, "PATCH");
    assert_eq!(taint_keys(&stored).len(), 2, "taints untouched");
}

#[tokio::test]
async fn patch_node_removes_the_labels_it_names_alone_or_beside_a_taint() {
    let t = api_server().await;
    t.cp.put(node("node-a")).await;
    t.cp.modify("Node", None, "node-a", |n| {
        n["metadata"]["labels"]["karpenter.k8s.aws/capacity-reservation-id"] = json!("cr-1");
        n["metadata"]["labels"]["karpenter.k8s.aws/capacity-reservation-type"] = json!("default");
    })
    .await;
    let demote = NodePatch {
        set_labels: [(
            "karpenter.sh/capacity-type".to_string(),
            "on-demand".to_string(),
        )]
        .into(),
        remove_labels: vec!["karpenter.k8s.aws/capacity-reservation-id".to_string()],
        ..NodePatch::default()
    };
    t.cluster
        .patch_node("node-a", &demote)
        .await
        .expect("patched");
    let labels = t.cp.get("Node", None, "node-a").await.unwrap()["metadata"]["labels"].clone();
    assert_eq!(labels["karpenter.sh/capacity-type"], "on-demand");
    assert!(
        labels
            .get("karpenter.k8s.aws/capacity-reservation-id")
            .is_none(),
        "{labels}"
    );
    assert_eq!(
        labels["karpenter.k8s.aws/capacity-reservation-type"],
        "default"
    );

    // Beside a taint: the read-modify-write path removes it too.
    let with_taint = NodePatch {
        remove_labels: vec!["karpenter.k8s.aws/capacity-reservation-type".to_string()],
        add_taints: vec![taint("example.com/draining", None, TaintEffect::NoSchedule)],
        ..NodePatch::default()
    };
    t.cluster
        .patch_node("node-a", &with_taint)
        .await
        .expect("patched");
    let node = t.cp.get("Node", None, "node-a").await.unwrap();
    assert!(
        node["metadata"]["labels"]
            .get("karpenter.k8s.aws/capacity-reservation-type")
            .is_none(),
        "{node}"
    );
    assert!(taint_keys(&node).contains(&"example.com/draining".to_string()));
}

#[tokio::test]
async fn a_concurrent_change_to_the_node_is_retried_and_both_changes_are_kept() {
    let t = api_server().await;
    t.cp.put(node("node-a")).await;
    // Between nodewright's read and its write, the node lifecycle controller adds a taint.
    let admin = t.cp.admin().clone();
    t.proxy
        .after_next("GET", "/api/v1/nodes/node-a", move || async move {
            objects::modify(&admin, "Node", None, "node-a", |node| {
                node["spec"]["taints"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}));
            })
            .await
            .expect("the concurrent write");
        });

    t.cluster
        .patch_node("node-a", &registration_patch())
        .await
        .expect("patched after a retry");

    assert_eq!(t.proxy.count("GET", "/api/v1/nodes/node-a"), 2);
    let patches: Vec<u16> = t
        .proxy
        .requests()
        .iter()
        .filter(|r| r.method == "PATCH")
        .map(|r| r.status)
        .collect();
    assert_eq!(patches, [409, 200]);
    let node = t.cp.get("Node", None, "node-a").await.unwrap();
    assert_eq!(
        taint_keys(&node),
        [
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable",
            "dedicated"
        ]
    );
}

#[tokio::test]
async fn a_node_that_keeps_changing_gives_up_with_conflict() {
    let t = api_server().await;
    t.cp.put(node("node-a")).await;
    for i in 0..TAINT_ATTEMPTS {
        let admin = t.cp.admin().clone();
        t.proxy
            .after_next("GET", "/api/v1/nodes/node-a", move || async move {
                objects::modify(&admin, "Node", None, "node-a", |node| {
                    node["metadata"]["labels"]["churn"] = i.to_string().into()
                })
                .await
                .expect("the concurrent write");
            });
    }

    let error = t
        .cluster
        .patch_node("node-a", &registration_patch())
        .await
        .expect_err("conflict");

    assert_eq!(error.kind(), ErrorKind::Conflict);
    assert_eq!(
        t.proxy.count("PATCH", "/api/v1/nodes/node-a"),
        TAINT_ATTEMPTS as usize
    );
}

#[tokio::test]
async fn patching_a_missing_node_is_not_found() {
    let t = api_server().await;
    let taints = t
        .cluster
        .patch_node("gone", &registration_patch())
        .await
        .expect_err("404");
    assert_eq!(taints.kind(), ErrorKind::NotFound);
    let labels = NodePatch {
        set_labels: [("a".to_string(), "b".to_string())].into(),
        ..NodePatch::default()
    };
    let labels = t
        .cluster
        .patch_node("gone", &labels)
        .await
        .expect_err("404");
    assert_eq!(labels.kind(), ErrorKind::NotFound);
}

#[tokio::test]
async fn a_node_this_process_patched_reads_patched_in_the_same_tick() {
    let t = api_server().await;
    t.cp.put(node("node-a")).await;
    t.cluster.state().await.expect("state");
    // The watches deliver nothing from now on: what the view knows of the patch, it
    // knows from the API server's answer to it.
    t.proxy.hold_watches();

    t.cluster
        .patch_node("node-a", &registration_patch())
        .await
        .expect("patched");
    let state = t.cluster.state().await.expect("state");
    t.proxy.release_watches();

    let node = state.nodes.iter().find(|n| n.name == "node-a").unwrap();
    assert!(
        node.taints.iter().all(|t| t.key != UNREGISTERED),
        "{:?}",
        node.taints
    );
    assert_eq!(
        node.labels
            .get("karpenter.sh/registered")
            .map(String::as_str),
        Some("true")
    );
}

/// Node repair reads a condition's reason, the node's boot id and its do-not-repair
/// annotation from the view, and puts the rebooting taint on and off.
#[tokio::test]
async fn the_view_reads_what_node_repair_needs_and_the_rebooting_taint_comes_and_goes() {
    let t = api_server().await;
    let mut gpu = node("gpu-a");
    gpu["metadata"]["annotations"] = json!({"karpenter.sh/do-not-repair": "true"});
    gpu["status"]["conditions"] = json!([
        {"type": "Ready", "status": "True"},
        {"type": "AcceleratedHardwareReady", "status": "False", "reason": "NVIDIAXID48Error",
         "lastTransitionTime": "2026-11-29T10:00:00Z"},
    ]);
    gpu["status"]["nodeInfo"] = json!({
        "machineID": "m", "systemUUID": "u", "bootID": "boot-1", "kernelVersion": "6.1",
        "osImage": "Amazon Linux 2023", "containerRuntimeVersion": "containerd://1.7",
        "kubeletVersion": "v1.33.0", "kubeProxyVersion": "", "operatingSystem": "linux",
        "architecture": "amd64",
    });
    t.cp.put(gpu).await;

    let state = t.cluster.state().await.expect("state");
    let seen = state
        .nodes
        .iter()
        .find(|n| n.name == "gpu-a")
        .expect("the node");
    assert_eq!(seen.boot_id.as_deref(), Some("boot-1"));
    assert!(seen.do_not_repair);
    let fault = seen
        .condition("AcceleratedHardwareReady")
        .expect("the condition");
    assert_eq!(fault.reason.as_deref(), Some("NVIDIAXID48Error"));
    assert!(fault.since.is_some());

    let rebooting = nodewright_core::api::model::Taint {
        key: nodewright_core::well_known::TAINT_REBOOTING.into(),
        value: None,
        effect: TaintEffect::NoSchedule,
    };
    let add = NodePatch {
        add_taints: vec![rebooting],
        ..NodePatch::default()
    };
    t.cluster.patch_node("gpu-a", &add).await.expect("tainted");
    let stored = t.cp.get("Node", None, "gpu-a").await.expect("the node");
    assert!(taint_keys(&stored).contains(&"karpenter.sh/rebooting".to_string()));
    let remove = NodePatch {
        remove_taints: vec![nodewright_core::well_known::TAINT_REBOOTING.into()],
        ..NodePatch::default()
    };
    t.cluster
        .patch_node("gpu-a", &remove)
        .await
        .expect("untainted");
    let stored = t.cp.get("Node", None, "gpu-a").await.expect("the node");
    assert!(!taint_keys(&stored).contains(&"karpenter.sh/rebooting".to_string()));
}
