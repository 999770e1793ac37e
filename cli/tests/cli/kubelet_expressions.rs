//! EC2NodeClass kubelet expressions through `validate` and `plan`: a string `maxPods`
//! sizes each instance type's pods from its own vCPUs, so the planner needs more nodes
//! than the ENI limit would give it; a bad expression is refused naming its field.

use serde_json::{Value, json};

use super::{nodewright, plan_json, snapshot_file, stderr, temp_file};

fn manifests(kubelet: &str) -> String {
    format!(
        "apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: default}}
spec:
  template:
    spec:
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
      requirements:
        - {{key: node.kubernetes.io/instance-type, operator: In, values: [c5.large, c5.2xlarge]}}
        - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {{name: default}}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{{alias: al2023@latest}}]
  subnetSelectorTerms: [{{tags: {{karpenter.sh/discovery: demo}}}}]
  securityGroupSelectorTerms: [{{tags: {{karpenter.sh/discovery: demo}}}}]
{kubelet}"
    )
}

fn small_pods(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| {
            let requests = json!({"cpu": "50m", "memory": "64Mi"});
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("p{i}"), "namespace": "default"},
                "spec": {"containers": [{"name": "c", "image": "pause",
                    "resources": {"requests": requests, "limits": requests}}]},
                "status": {"phase": "Pending", "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
            })
        })
        .collect()
}

/// (instance type, pods placed) of each claim `plan` makes for 12 small pods.
fn claims(kubelet: &str) -> Vec<(String, usize)> {
    let pools = temp_file("pools.yaml", &manifests(kubelet));
    let plan = plan_json(&[
        "--nodepools",
        &pools.display().to_string(),
        "--snapshot",
        &snapshot_file(small_pods(12)),
    ]);
    let mut out: Vec<(String, usize)> = plan["nodeClaims"]
        .as_array()
        .unwrap_or_else(|| panic!("{plan:#}"))
        .iter()
        .map(|c| {
            (
                c["instanceType"].as_str().unwrap().to_string(),
                c["pods"].as_array().unwrap().len(),
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn a_max_pods_expression_gives_each_type_its_own_pod_count() {
    // The ENI limit: 29 pods on a c5.large, room for all 12.
    assert_eq!(claims(""), vec![("c5.large".to_string(), 12)]);
    // 4 pods per vCPU: a c5.large runs 8, so two of them are cheaper than a c5.2xlarge.
    let per_vcpu = "  kubelet:\n    maxPods: \"min(110, vcpus * 4)\"\n";
    let placed = claims(per_vcpu);
    assert_eq!(placed.len(), 2, "{placed:?}");
    assert!(
        placed.iter().all(|(t, n)| t == "c5.large" && *n <= 8),
        "{placed:?}"
    );
    // A type the expression has no value for is never planned.
    let none_on_large =
        "  kubelet:\n    maxPods: \"instance_type == 'c5.large' ? 1 / (vcpus - 2) : 110\"\n";
    assert_eq!(claims(none_on_large), vec![("c5.2xlarge".to_string(), 12)]);
}

#[test]
fn validate_refuses_an_expression_naming_its_field() {
    let bad = temp_file(
        "pools.yaml",
        &manifests("  kubelet:\n    kubeReserved: {memory: \"max_pods * 11 +\"}\n"),
    );
    let out = nodewright(&["validate", &bad.display().to_string()]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let printed = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert!(
        printed.contains(
            "spec.kubelet.kubeReserved.memory: \"max_pods * 11 +\" is neither a quantity"
        ),
        "{printed}"
    );
    let good = temp_file(
        "pools.yaml",
        &manifests(
            "  kubelet:\n    maxPods: \"min(110, vcpus * 8)\"\n    kubeReserved: {memory: \"max_pods * 11 + 255\"}\n",
        ),
    );
    let out = nodewright(&["validate", &good.display().to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
}

#[test]
fn validate_warns_of_the_types_an_expression_has_no_value_on() {
    let class = temp_file(
        "pools.yaml",
        &manifests(
            "  kubelet:\n    maxPods: \"instance_type == 'c5.large' ? 1 / (vcpus - 2) : 110\"\n",
        ),
    );
    let out = nodewright(&["validate", &class.display().to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let warned = stderr(&out);
    assert!(
        warned.contains("warning: EC2NodeClass \"default\": spec.kubelet.maxPods: no value on 1 instance type(s) (c5.large); they get no pods and are never chosen: failed on c5.large:"),
        "{warned}"
    );
}
