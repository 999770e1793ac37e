//! The behaviour's rounds over a bare store (no moto, no HTTP): what each part decides.

use std::time::Instant;

use serde_json::{Value, json};

use super::*;
use crate::emulated::web_pod;
use nodewright_kube::fake::Store;

fn node(name: &str, taints: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {"taints": taints},
        "status": {
            "allocatable": {"cpu": "3920m", "memory": "14162Mi", "pods": "58"},
            "conditions": [{"type": "Ready", "status": "True"}]
        }
    })
}

fn placement(store: &Store, pod: &str) -> (Option<String>, Value) {
    let p = store.get("Pod", Some("default"), pod).expect("the pod");
    (
        p["spec"]["nodeName"].as_str().map(str::to_string),
        p["status"].clone(),
    )
}

/// A store and a record that has seen its pods, as a round leaves them.
fn observed(objects: Vec<Value>) -> (Store, Record) {
    let mut store = Store::default();
    for object in objects {
        store.put(object);
    }
    let mut record = Record::default();
    controllers::observe_pods(&store, &mut record, Instant::now());
    (store, record)
}

#[test]
fn a_pod_is_bound_to_the_least_allocated_node_it_tolerates_and_fits() {
    let mut busy = web_pod("busy", "2", "1Gi");
    busy["spec"]["nodeName"] = json!("a");
    busy["status"] = json!({"phase": "Running"});
    let (mut store, mut record) = observed(vec![
        node("a", json!([])),
        node("b", json!([])),
        // First by name among equals: only its taint keeps the pod off.
        node(
            "a-gpu",
            json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]),
        ),
        busy,
        web_pod("web-0", "1", "1Gi"),
        web_pod("huge", "8", "1Gi"),
    ]);
    scheduler::schedule(&mut store, &mut record, Instant::now());
    let (node, status) = placement(&store, "web-0");
    assert_eq!(
        node.as_deref(),
        Some("b"),
        "the untainted node with most room"
    );
    assert_eq!(status["phase"], "Running");
    let (node, status) = placement(&store, "huge");
    assert_eq!(node, None);
    assert_eq!(status["conditions"][0]["reason"], "Unschedulable");
    let bound = record.pods.values().find(|l| l.key == "default/web-0");
    assert_eq!(bound.and_then(|l| l.node.as_deref()), Some("b"));
}

#[test]
fn a_toleration_opens_a_tainted_node_and_a_node_selector_closes_the_others() {
    let mut pod = web_pod("gpu-0", "1", "1Gi");
    pod["spec"]["tolerations"] = json!([{"key": "dedicated", "operator": "Exists"}]);
    pod["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": "gpu"});
    let (mut store, mut record) = observed(vec![
        node("a", json!([])),
        node(
            "gpu",
            json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]),
        ),
        pod,
    ]);
    scheduler::schedule(&mut store, &mut record, Instant::now());
    assert_eq!(placement(&store, "gpu-0").0.as_deref(), Some("gpu"));
}

#[test]
fn a_pod_that_went_is_recreated_and_a_budget_it_broke_is_a_violation() {
    let mut running: Vec<Value> = (0..2)
        .map(|i| {
            let mut p = web_pod(&format!("web-{i}"), "1", "1Gi");
            p["spec"]["nodeName"] = json!("a");
            p["status"] =
                json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]});
            p
        })
        .collect();
    running.push(node("a", json!([])));
    running.push(json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"minAvailable": "100%", "selector": {"matchLabels": {"app": "web"}}}
    }));
    let (mut store, mut record) = observed(running);
    let now = Instant::now();
    store.remove("Pod", Some("default"), "web-0");
    let gone = controllers::observe_pods(&store, &mut record, now);
    assert_eq!(gone.len(), 1);
    controllers::recreate(&mut store, &mut record, &gone, now);
    budgets::check_budgets(&store, &mut record, &gone);
    assert_eq!(
        record.recreated,
        vec![("default/web-0".to_string(), "default/web-r0001".to_string())]
    );
    let (node, status) = placement(&store, "web-r0001");
    assert_eq!((node, status["phase"].clone()), (None, json!("Pending")));
    assert_eq!(
        record.violations,
        vec![
            "PodDisruptionBudget default/web: 1 healthy of 2, 2 required, after default/web-0 (evicted or deleted)"
                .to_string()
        ]
    );
}

#[test]
fn a_registered_node_carries_its_pools_taints_until_ready() {
    let catalog = Catalog::embedded();
    let mut pool = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "gpu"},
        "spec": {"template": {"spec": {
            "requirements": [],
            "taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
        }}}
    });
    pool["spec"]["template"]["spec"]["requirements"] =
        json!([{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]);
    let class = json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
        "spec": {
            "role": "role",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}]
        }
    });
    let (mut store, mut record) = observed(vec![pool, class]);
    let instance = Ec2Instance {
        id: "i-0abc".into(),
        state: "running".into(),
        instance_type: "m5.xlarge".into(),
        zone: "us-east-1a".into(),
        private_dns: "ip-10-0-0-1.ec2.internal".into(),
        tags: [("karpenter.sh/nodepool".to_string(), "gpu".to_string())].into(),
    };
    let timings = Timings {
        register_after: Duration::ZERO,
        ready_after: Duration::ZERO,
        ..Timings::default()
    };
    let now = Instant::now();
    let taints = |store: &Store| -> Vec<String> {
        let n = store
            .get("Node", None, "ip-10-0-0-1.ec2.internal")
            .expect("registered");
        n["spec"]["taints"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| t["key"].as_str().unwrap_or("").to_string())
            .collect()
    };
    kubelet::kubelets(
        &mut store,
        &mut record,
        std::slice::from_ref(&instance),
        catalog,
        timings,
        now,
    );
    assert_eq!(record.errors, Vec::<String>::new());
    assert_eq!(
        taints(&store),
        ["karpenter.sh/unregistered", "dedicated", TAINT_NOT_READY]
    );
    let node = store.get("Node", None, "ip-10-0-0-1.ec2.internal").unwrap();
    assert_eq!(node["status"]["allocatable"]["cpu"], "3920m");
    assert_eq!(node["metadata"]["labels"]["karpenter.sh/nodepool"], "gpu");
    kubelet::kubelets(&mut store, &mut record, &[instance], catalog, timings, now);
    assert_eq!(taints(&store), ["karpenter.sh/unregistered", "dedicated"]);
    let mut errors = Vec::new();
    let nodes = read::nodes(&store, &mut errors);
    assert_eq!(errors, Vec::<String>::new(), "the registered Node decodes");
    assert!(nodes[0].ready);
}

#[test]
fn quantities_are_written_exactly() {
    assert_eq!(write::quantity("cpu", 3920), "3920m");
    assert_eq!(
        write::quantity("memory", 14162 * (1 << 20) * 1000),
        "14162Mi"
    );
    assert_eq!(write::quantity("pods", 58_000), "58");
}
