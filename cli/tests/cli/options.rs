//! The plan JSON's instance type options, through `nodewright plan`: at most what one
//! launch uses (60, CreateFleet's limit), cheapest first, with the count of every
//! compatible type next to them, and NodePool minValues still met by the kept list.

use std::path::PathBuf;

use serde_json::{Value, json};

/// A scratch directory for one test's files, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("nodewright-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create scratch dir");
        Scratch(dir)
    }

    fn write(&self, name: &str, text: &str) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, text).expect("write test file");
        path.display().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `count` types: `t-000` has 1 vCPU, `t-001` 2, ...; price grows with size, so the
/// cheapest types are the first ones. Type i is in family `f{i / 10}`.
fn catalog(count: usize) -> String {
    let types: Vec<Value> = (0..count)
        .map(|i| {
            let n = i + 1;
            json!({
                "name": format!("t-{i:03}"),
                "labels": {
                    "kubernetes.io/arch": "amd64",
                    "kubernetes.io/os": "linux",
                    "karpenter.k8s.aws/instance-family": format!("f{}", i / 10),
                },
                "allocatable": {"cpu": n.to_string(), "memory": format!("{}Gi", 2 * n), "pods": "110"},
                "onDemandPricePerHour": 0.01 * n as f64,
            })
        })
        .collect();
    json!({ "instanceTypes": types }).to_string()
}

fn nodepool(extra_requirement: &str) -> String {
    format!(
        "apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  template:
    spec:
      requirements:
        - key: karpenter.sh/capacity-type
          operator: In
          values: [on-demand]
{extra_requirement}      nodeClassRef:
        group: karpenter.k8s.aws
        kind: EC2NodeClass
        name: default
---
{class}",
        class = crate::manifests::node_class()
    )
}

/// One pending pod requesting `cpu`, marked Unschedulable by kube-scheduler.
fn snapshot(cpu: &str) -> String {
    json!({
        "apiVersion": "v1", "kind": "List", "items": [{
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-0", "namespace": "default"},
            "spec": {"containers": [{"name": "app", "image": "nginx", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]},
        }]
    })
    .to_string()
}

/// The one claim `plan --output json` prints for these files.
fn the_claim(test: &str, types: usize, requirement: &str, cpu: &str) -> Value {
    let dir = Scratch::new(test);
    let plan = super::plan_json(&[
        "--zones",
        "us-east-1a",
        "--nodepools",
        &dir.write("pools.yaml", &nodepool(requirement)),
        "--snapshot",
        &dir.write("snapshot.json", &snapshot(cpu)),
        "--catalog",
        &dir.write("catalog.json", &catalog(types)),
    ]);
    let claims = plan["nodeClaims"].as_array().expect("nodeClaims");
    assert_eq!(claims.len(), 1, "{plan:#}");
    claims[0].clone()
}

fn options(claim: &Value) -> Vec<String> {
    claim["instanceTypeOptions"]
        .as_array()
        .expect("instanceTypeOptions")
        .iter()
        .map(|t| t.as_str().expect("a type name").to_string())
        .collect()
}

#[test]
fn a_claim_lists_the_60_cheapest_of_its_compatible_types_and_counts_them_all() {
    let claim = the_claim("cap", 100, "", "500m");
    let listed = options(&claim);
    let cheapest_60: Vec<String> = (0..60).map(|i| format!("t-{i:03}")).collect();
    assert_eq!(listed, cheapest_60);
    assert_eq!(claim["instanceType"], "t-000");
    assert_eq!(claim["compatibleInstanceTypes"], 100);
}

#[test]
fn a_claim_with_fewer_compatible_types_than_the_cap_lists_them_all() {
    // 45 vCPU: types t-044 (45 vCPU) to t-099 fit, 56 of them.
    let claim = the_claim("under-cap", 100, "", "45");
    let listed = options(&claim);
    assert_eq!(listed.len(), 56);
    assert_eq!(listed.first().map(String::as_str), Some("t-044"));
    assert_eq!(claim["compatibleInstanceTypes"], 56);
}

#[test]
fn min_values_beyond_the_cheapest_60_are_kept_under_the_cap() {
    // The 60 cheapest types are in families f0..f5; minValues 8 needs f6 and f7 too.
    let requirement = "        - key: karpenter.k8s.aws/instance-family
          operator: Exists
          minValues: 8
";
    let claim = the_claim("min-values", 100, requirement, "500m");
    let listed = options(&claim);
    assert_eq!(listed.len(), 60, "{listed:?}");
    assert_eq!(claim["compatibleInstanceTypes"], 100);
    let families: std::collections::BTreeSet<String> = listed
        .iter()
        .map(|t| format!("f{}", t[2..].parse::<usize>().expect("t-NNN") / 10))
        .collect();
    assert_eq!(families.len(), 8, "{families:?}");
    // The cheapest of each missing family replaces the most expensive of the rest, and
    // the list stays cheapest first.
    assert!(listed.contains(&"t-060".to_string()) && listed.contains(&"t-070".to_string()));
    assert!(!listed.contains(&"t-058".to_string()) && !listed.contains(&"t-059".to_string()));
    let mut sorted = listed.clone();
    sorted.sort();
    assert_eq!(listed, sorted, "cheapest first");
    assert_eq!(claim["instanceType"], "t-000");
}
