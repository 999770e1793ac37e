//! The behaviour's decisions without a cluster: what a kubelet registers, and a
//! budget's arithmetic. (`tests/behaviour.rs` runs it against moto and a control plane.)

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use super::ec2::Ec2Instance;
use super::{kubelet, observer};
use nodewright_core::catalog::{CapacityType, Catalog};

fn instance() -> Ec2Instance {
    Ec2Instance {
        id: "i-0abc".into(),
        state: "running".into(),
        instance_type: "m5.xlarge".into(),
        zone: "us-east-1a".into(),
        private_dns: "ip-10-0-0-1.ec2.internal".into(),
        private_ip: "10.0.0.1".into(),
        capacity_type: CapacityType::Spot,
        tags: [
            ("karpenter.sh/nodepool".to_string(), "gpu".to_string()),
            ("karpenter.sh/nodeclaim".to_string(), "gpu-x1".to_string()),
        ]
        .into(),
    }
}

#[test]
fn a_registered_node_carries_its_pools_taints_its_labels_and_its_types_resources() {
    let pool = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "gpu"},
        "spec": {"template": {"spec": {
            "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
            "taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}],
            "startupTaints": [{"key": "cni", "effect": "NoSchedule"}],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
        }}}
    });
    let class = json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
        "spec": {
            "role": "role",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}]
        }
    });
    let pool = kubelet::node_pool(&pool, &[class]).expect("a valid pool");
    let node = kubelet::registration(
        &instance(),
        Some(&pool),
        Catalog::embedded(),
        ("kwok.x-k8s.io/node", "fake"),
    );
    let taints: Vec<&str> = node["spec"]["taints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["key"].as_str().unwrap())
        .collect();
    assert_eq!(taints, ["karpenter.sh/unregistered", "dedicated", "cni"]);
    assert_eq!(node["spec"]["providerID"], "aws:///us-east-1a/i-0abc");
    let labels = &node["metadata"]["labels"];
    assert_eq!(labels["karpenter.sh/nodepool"], "gpu");
    assert_eq!(labels["karpenter.sh/nodeclaim"], "gpu-x1");
    assert_eq!(labels["topology.kubernetes.io/region"], "us-east-1");
    assert_eq!(labels["kubernetes.io/arch"], "amd64");
    assert_eq!(labels["karpenter.sh/capacity-type"], "spot");
    assert_eq!(
        node["metadata"]["annotations"]["kwok.x-k8s.io/node"],
        "fake"
    );
    assert_eq!(node["status"]["allocatable"]["cpu"], "3920m");
    assert_eq!(node["status"]["conditions"][0]["status"], "False");
}

#[test]
fn quantities_and_lease_times_are_written_exactly() {
    assert_eq!(kubelet::quantity("cpu", 3920), "3920m");
    assert_eq!(
        kubelet::quantity("memory", 14162 * (1 << 20) * 1000),
        "14162Mi"
    );
    assert_eq!(kubelet::quantity("pods", 58_000), "58");
    let at = SystemTime::UNIX_EPOCH + Duration::from_micros(1_780_000_000_000_042);
    assert_eq!(
        kubelet::micro_time_for_tests(at),
        "2026-05-28T20:26:40.000042Z"
    );
}

fn pod(name: &str, owner: Option<&str>, ready: bool, deleting: bool) -> Value {
    let mut pod = json!({
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
        "spec": {"nodeName": "n"},
        "status": {"phase": "Running",
            "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}
    });
    if let Some(owner) = owner {
        pod["metadata"]["ownerReferences"] =
            json!([{"kind": "ReplicaSet", "name": owner, "controller": true}]);
    }
    if deleting {
        pod["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    }
    pod
}

fn budget(spec: Value) -> Value {
    let mut spec = spec;
    spec["selector"] = json!({"matchLabels": {"app": "web"}});
    json!({"metadata": {"name": "web", "namespace": "default"}, "spec": spec})
}

#[test]
fn a_budget_counts_its_controllers_scale_and_the_pods_ready_and_not_going() {
    let sets = vec![
        json!({"metadata": {"name": "web-1", "namespace": "default"}, "spec": {"replicas": 4}}),
    ];
    // One of four evicted, its replacement not Ready yet.
    let pods = vec![
        pod("a", Some("web-1"), true, false),
        pod("b", Some("web-1"), true, false),
        pod("c", Some("web-1"), true, true),
        pod("d", Some("web-1"), true, false),
        pod("e", Some("web-1"), false, false),
    ];
    let count = observer::count(&budget(json!({"maxUnavailable": 1})), &pods, &sets);
    assert_eq!(
        count,
        observer::Count {
            healthy: 3,
            expected: 4,
            desired: 3
        }
    );
    let count = observer::count(&budget(json!({"minAvailable": "100%"})), &pods, &sets);
    assert_eq!((count.healthy, count.desired), (3, 4));
    // Pods without a controller count one each while they are not going.
    let bare = vec![pod("a", None, true, false), pod("b", None, true, true)];
    let count = observer::count(&budget(json!({"minAvailable": 1})), &bare, &[]);
    assert_eq!((count.healthy, count.expected, count.desired), (1, 1, 1));
}

#[test]
fn a_label_selector_matches_as_kubernetes_matches() {
    let labels: BTreeMap<String, String> = [("app".to_string(), "web".to_string())]
        .into_iter()
        .collect();
    assert!(observer::selects(&json!({}), &labels), "empty: every pod");
    assert!(!observer::selects(&Value::Null, &labels), "missing: none");
    assert!(observer::selects(
        &json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "db"]},
                                     {"key": "tier", "operator": "DoesNotExist"}]}),
        &labels
    ));
    assert!(!observer::selects(
        &json!({"matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]}),
        &labels
    ));
}
