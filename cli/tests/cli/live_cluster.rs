//! `simulate --kubeconfig`: a simulation that starts from a real API server's objects,
//! read with the kubeconfig's identity, only listed, never written.

use std::path::Path;

use nodewright_kube::testing::{ControlPlane, Options};
use serde_json::Value;

use super::{example, nodewright, stderr};

/// Writes the bundled snapshot's objects to `api` as a user's cluster has them: their
/// namespaces first, each object without what only the server sets.
async fn put_the_bundled_snapshot(api: &ControlPlane) {
    let text = std::fs::read_to_string(example("snapshot.json")).expect("the bundled snapshot");
    let list: Value = serde_json::from_str(&text).expect("JSON");
    let items = list["items"].as_array().expect("items");
    let mut namespaces: Vec<&str> = items
        .iter()
        .filter_map(|i| i["metadata"]["namespace"].as_str())
        .filter(|ns| !["default", "kube-system"].contains(ns))
        .collect();
    namespaces.sort();
    namespaces.dedup();
    for ns in namespaces {
        api.put(
            serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        )
        .await;
    }
    for item in items {
        let mut item = item.clone();
        let metadata = item["metadata"].as_object_mut().expect("metadata");
        for set_by_the_server in ["resourceVersion", "uid", "creationTimestamp", "generation"] {
            metadata.remove(set_by_the_server);
        }
        api.put(item).await;
    }
}

/// Half an hour from `start` (`--cluster FILE` or `--kubeconfig FILE`) under the
/// bundled NodePools, as JSON.
fn simulate_from(start: &str, path: &Path) -> std::process::Output {
    nodewright(&[
        "simulate",
        start,
        &path.display().to_string(),
        "--nodepools",
        &example("nodepools.yaml"),
        "--until",
        "30m",
        "--output",
        "json",
    ])
}

/// The runs' nodes that ran from the start: (node, NodePool, instance type).
fn nodes_at_start(doc: &Value) -> Vec<(String, String, String)> {
    let mut nodes: Vec<_> = doc["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .filter(|n| n["runningAtStart"] == true)
        .map(|n| {
            let text = |key: &str| n[key].as_str().unwrap_or_default().to_string();
            (text("node"), text("nodePool"), text("instanceType"))
        })
        .collect();
    nodes.sort();
    nodes
}

#[test]
#[ignore = "starts a real control plane (tests/kube/up.sh): run through tests/run.sh"]
fn simulate_from_a_live_cluster_starts_as_its_objects_stand_and_only_lists_them() {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let api = runtime.block_on(ControlPlane::start_with(Options::api_server_only()));

    // No node yet: nothing to start from, said of the cluster read, not of a file.
    let out = simulate_from("--kubeconfig", api.kubeconfig());
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let no_node = format!(
        "the cluster of kubeconfig {}: no Node: simulate --kubeconfig starts from the cluster's nodes, and listing them found none",
        api.kubeconfig().display()
    );
    assert!(err.contains(&no_node), "{err}");
    assert!(!err.contains("kubectl get"), "{err}");

    runtime.block_on(put_the_bundled_snapshot(&api));

    // As cluster-admin: the run starts as the same objects read from a file start it.
    let out = simulate_from("--kubeconfig", api.kubeconfig());
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("3 node(s) taken over as nodewright's (Karpenter's, adopted): 3 of general-purpose; 0 left unmanaged"),
        "{err}"
    );
    let live: Value = serde_json::from_slice(&out.stdout).expect("simulate prints JSON");
    assert_eq!(live["problems"], Value::Array(vec![]), "{live}");
    let summary = &live["summary"];
    assert_eq!(summary["podsLost"], 0, "{summary}");
    assert_eq!(summary["pdbViolations"], 0, "{summary}");
    assert_eq!(summary["podsPendingAtEnd"], 0, "{summary}");
    assert!(
        summary["instancesLaunched"].as_u64() > Some(0),
        "the cluster's pending pods need nodes: {summary}"
    );
    let out = simulate_from("--cluster", Path::new(&example("snapshot.json")));
    assert!(out.status.success(), "{}", stderr(&out));
    let from_file: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let started = nodes_at_start(&live);
    assert_eq!(started.len(), 3, "{started:?}");
    assert_eq!(started, nodes_at_start(&from_file));

    // As the functions' identity, which may list nodes, pods and DaemonSets but not
    // Deployments: the read stops at the first refusal, names it, and was lists only.
    let out = simulate_from("--kubeconfig", &api.nodewright().kubeconfig);
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("refused listing its deployments"), "{err}");
    assert!(out.stdout.is_empty(), "nothing simulated: {err}");
    let events = api.audit_events();
    let requests: Vec<(&str, &str, i64)> = events
        .iter()
        .filter(|e| e["objectRef"]["resource"].is_string())
        .map(|e| {
            (
                e["verb"].as_str().unwrap_or_default(),
                e["objectRef"]["resource"].as_str().unwrap_or_default(),
                e["responseStatus"]["code"].as_i64().unwrap_or_default(),
            )
        })
        .collect();
    assert!(
        requests.iter().all(|(verb, _, _)| *verb == "list"),
        "{requests:?}"
    );
    for listed in ["nodes", "pods", "daemonsets"] {
        assert!(
            requests.contains(&("list", listed, 200)),
            "{listed}: {requests:?}"
        );
    }
    assert!(
        requests.contains(&("list", "deployments", 403)),
        "{requests:?}"
    );
}
