//! `plan --scheduler-config FILE`: the cluster's default topology spread constraints,
//! given to pods without their own with the selector kube-scheduler deduces from the
//! snapshot's Services and the pods' controller.

use serde_json::{Value, json};

use super::{general_purpose_nodepool, nodewright, plan_json, snapshot_file, stderr, temp_file};

/// Three pending pods of a ReplicaSet (3 CPUs each), the ReplicaSet and a Service.
fn replica_set_pending() -> String {
    let mut items: Vec<Value> = (0..3)
        .map(|i| {
            let requests = json!({"cpu": "3", "memory": "4Gi"});
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("web-abc-{i}"), "namespace": "default",
                    "labels": {"app": "web", "pod-template-hash": "abc"},
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                        "name": "web-abc", "uid": "u1", "controller": true}]},
                "spec": {"containers": [{"name": "c", "image": "pause",
                    "resources": {"requests": requests}}]},
                "status": {"phase": "Pending", "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
            })
        })
        .collect();
    items.push(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web-abc", "namespace": "default"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web", "pod-template-hash": "abc"}},
            "template": {"metadata": {"labels": {"app": "web", "pod-template-hash": "abc"}},
                "spec": {"containers": [{"name": "c", "image": "pause"}]}}}}));
    items.push(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}));
    snapshot_file(items)
}

fn distinct_zones(plan: &Value) -> Vec<String> {
    let mut zones: Vec<String> = plan["nodeClaims"]
        .as_array()
        .expect("nodeClaims")
        .iter()
        .map(|c| c["zone"].as_str().unwrap().to_string())
        .collect();
    zones.sort();
    zones.dedup();
    zones
}

#[test]
fn plan_spreads_a_replica_sets_pods_over_the_zones_the_scheduler_config_asks_for() {
    let pools = general_purpose_nodepool();
    let snapshot = replica_set_pending();
    let plain = plan_json(&["--nodepools", &pools, "--snapshot", &snapshot]);
    assert!(distinct_zones(&plain).len() < 3, "{plain:#}");

    let config = temp_file(
        "scheduler-config.yaml",
        "podTopologySpread:\n  defaultConstraints:\n    - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule}\n",
    );
    let spread = plan_json(&[
        "--nodepools",
        &pools,
        "--snapshot",
        &snapshot,
        "--scheduler-config",
        config.to_str().unwrap(),
    ]);
    assert_eq!(
        distinct_zones(&spread),
        ["us-east-1a", "us-east-1b", "us-east-1c"],
        "{spread:#}"
    );
    assert_eq!(spread["unschedulable"], json!([]), "{spread:#}");
}

#[test]
fn a_scheduler_config_kube_scheduler_would_refuse_exits_one_naming_the_field() {
    let config = temp_file(
        "bad-scheduler-config.yaml",
        "podTopologySpread:\n  defaultConstraints:\n    - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: web}}}\n",
    );
    let out = nodewright(&[
        "plan",
        "--nodepools",
        &general_purpose_nodepool(),
        "--snapshot",
        &replica_set_pending(),
        "--scheduler-config",
        config.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("bad-scheduler-config.yaml: podTopologySpread.defaultConstraints[0].labelSelector: not allowed"),
        "{err}"
    );
}

/// A 30-minute scenario on the general-purpose NodePool, `extra` appended at the top
/// level: three `web` pods (1 CPU) and three `batch` pods (2 CPU) with no constraints
/// of their own; `batch` scales to 0 at 6m, leaving the nodes underutilized.
fn spread_scenario(extra: &str) -> std::path::PathBuf {
    let deployment = |name: &str, cpu: u32, replicas: &str| {
        format!(
            "  - name: {name}\n    replicas: {replicas}\n    pod:\n      containers: [{{name: app, image: nginx, \
             resources: {{requests: {{cpu: \"{cpu}\", memory: {memory}Gi}}}}}}]\n",
            memory = cpu * 2,
        )
    };
    temp_file(
        "spread-scenario.yaml",
        &format!(
            "name: default spread\nduration: 30m\nseed: 5\nmanifestFiles: [{pools:?}]\ndeployments:\n{web}{batch}{extra}",
            pools = general_purpose_nodepool(),
            web = deployment("web", 1, "[{at: 0s, replicas: 3}]"),
            batch = deployment("batch", 2, "[{at: 0s, replicas: 3}, {at: 6m, replicas: 0}]"),
        ),
    )
}

/// The zones of the nodes a `simulate --output json` run launched, and of those still
/// running at its end.
fn simulated_zones(scenario: &std::path::Path) -> (Vec<String>, Vec<String>, Value) {
    let out = nodewright(&["simulate", scenario.to_str().unwrap(), "--output", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let zones = |running_only: bool| {
        let mut z: Vec<String> = doc["nodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .filter(|n| !running_only || n["ended"].is_null())
            .map(|n| n["zone"].as_str().unwrap().to_string())
            .collect();
        z.sort();
        z.dedup();
        z
    };
    (zones(false), zones(true), doc["summary"].clone())
}

#[test]
fn simulate_spreads_a_deployments_replicas_over_the_zones_a_scenarios_scheduler_config_asks_for() {
    let (plain, _, summary) = simulated_zones(&spread_scenario(""));
    assert!(plain.len() < 3, "launched into {plain:?}");
    assert_eq!(summary["podsLost"], 0, "{summary}");

    let (launched, running, summary) = simulated_zones(&spread_scenario(
        "schedulerConfig:\n  podTopologySpread:\n    defaultConstraints:\n      - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule}\n",
    ));
    let all = ["us-east-1a", "us-east-1b", "us-east-1c"];
    assert_eq!(launched, all, "{summary}");
    // When batch goes, the disruption function consolidates with the defaults too:
    // each node is replaced in its own zone, not packed into one (it is, without them
    // in the disruption function, the simulated kube-scheduler keeping the skew among
    // the zones left).
    assert_eq!(running, all, "{summary}");
    assert!(
        summary["consolidation"]["commands"].as_u64() > Some(0),
        "{summary}"
    );
    assert_eq!(summary["podsLost"], 0, "{summary}");
    assert_eq!(summary["podsPendingAtEnd"], 0, "{summary}");
}

#[test]
fn a_scenarios_scheduler_config_kube_scheduler_would_refuse_exits_one_naming_the_field() {
    let scenario = spread_scenario(
        "schedulerConfig:\n  podTopologySpread:\n    defaultConstraints:\n      - {maxSkew: 0, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule}\n",
    );
    let out = nodewright(&["simulate", scenario.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("schedulerConfig: podTopologySpread.defaultConstraints[0].maxSkew: 0 is not an integer greater than 0"),
        "{err}"
    );
}
