//! Volume topology keys, volume zones under a minDomains spread, and hostname selectors,
//! through `nodewright plan` on snapshots written as `kubectl get -o json` would.

use serde_json::{Value, json};

use super::{general_purpose_nodepool, nodewright, plan_json, snapshot_file, temp_file};

/// `nodewright plan` of `items` on the general-purpose NodePool, as JSON.
fn planned(items: Vec<Value>) -> Value {
    plan_json(&[
        "--nodepools",
        &general_purpose_nodepool(),
        "--snapshot",
        &snapshot_file(items),
    ])
}

/// A pending pod kube-scheduler marked Unschedulable, labelled `app`, with `spec`
/// merged over a one-container spec requesting `cpu` and 1Gi.
fn pending_pod(name: &str, app: &str, cpu: &str, spec: Value) -> Value {
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": app}},
        "spec": {
            "schedulerName": "default-scheduler",
            "containers": [{"name": "app", "image": "nginx",
                "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]
        },
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled",
            "status": "False", "reason": "Unschedulable",
            "message": "0/3 nodes are available: 3 Insufficient cpu."}]}
    });
    for (k, v) in spec.as_object().into_iter().flatten() {
        pod["spec"][k] = v.clone();
    }
    pod
}

/// A running pod labelled `app` on node `node`.
fn running_pod(name: &str, app: &str, node: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": app}},
        "spec": {"nodeName": node, "schedulerName": "default-scheduler",
            "containers": [{"name": "app", "image": "nginx",
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]},
        "status": {"phase": "Running"}
    })
}

/// A Ready m5.large of the general-purpose NodePool in `zone`.
fn node(name: &str, zone: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name,
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/os": "linux",
            "node.kubernetes.io/instance-type": "m5.large",
            "topology.kubernetes.io/zone": zone,
            "topology.kubernetes.io/region": "us-east-1",
            "karpenter.sh/capacity-type": "on-demand",
            "karpenter.sh/nodepool": "general-purpose",
            "karpenter.sh/registered": "true",
            "karpenter.sh/initialized": "true"
        }},
        "spec": {"providerID": format!("aws:///{zone}/i-0{:0>16}", name.len())},
        "status": {
            "allocatable": {"cpu": "1930m", "memory": "7220Mi", "pods": "29"},
            "capacity": {"cpu": "2", "memory": "7936Mi", "pods": "29"},
            "conditions": [{"type": "Ready", "status": "True"}]
        }
    })
}

/// A claim bound to a PersistentVolume whose node affinity is `key In [zone]`.
fn bound_volume(claim: &str, key: &str, zone: &str) -> Vec<Value> {
    let pv = format!("pv-{claim}");
    vec![
        json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim, "namespace": "default",
                "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "gp3",
                "resources": {"requests": {"storage": "20Gi"}}, "volumeName": pv},
            "status": {"phase": "Bound"}
        }),
        json!({
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": pv},
            "spec": {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "20Gi"},
                "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-0a1b2c3d4e5f60718"},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": key, "operator": "In", "values": [zone]}]}]}},
                "storageClassName": "gp3"},
            "status": {"phase": "Bound"}
        }),
    ]
}

fn uses_claim(claim: &str) -> Value {
    json!([{"name": "data", "persistentVolumeClaim": {"claimName": claim}}])
}

const EBS_ZONE: &str = "topology.ebs.csi.aws.com/zone";

#[test]
fn volumes_whose_zone_is_keyed_by_the_ebs_csi_driver_put_their_pods_claims_in_that_zone() {
    // A bound volume in us-east-1c (not the first zone, which a free pod would get).
    let mut items = vec![pending_pod(
        "db-0",
        "db",
        "1",
        json!({"volumes": uses_claim("data-db-0")}),
    )];
    items.extend(bound_volume("data-db-0", EBS_ZONE, "us-east-1c"));
    let plan = planned(items);
    let claims = plan["nodeClaims"].as_array().unwrap();
    assert_eq!(plan["unschedulable"], json!([]), "{plan}");
    assert_eq!(claims.len(), 1, "{plan}");
    assert_eq!(claims[0]["zone"], "us-east-1c", "{plan}");

    // A WaitForFirstConsumer class whose allowedTopologies name the EBS key.
    let items = vec![
        pending_pod(
            "cache-0",
            "cache",
            "1",
            json!({"volumes": uses_claim("cache-0")}),
        ),
        json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "cache-0", "namespace": "default"},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "ebs-1b",
                "resources": {"requests": {"storage": "20Gi"}}},
            "status": {"phase": "Pending"}
        }),
        json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": "ebs-1b"}, "provisioner": "ebs.csi.aws.com",
            "volumeBindingMode": "WaitForFirstConsumer",
            "allowedTopologies": [{"matchLabelExpressions": [
                {"key": EBS_ZONE, "values": ["us-east-1b"]}]}]
        }),
    ];
    let plan = planned(items);
    let claims = plan["nodeClaims"].as_array().unwrap();
    assert_eq!(plan["unschedulable"], json!([]), "{plan}");
    assert_eq!(claims.len(), 1, "{plan}");
    assert_eq!(claims[0]["zone"], "us-east-1b", "{plan}");
}

#[test]
fn a_pod_whose_volume_is_in_one_zone_is_placed_there_under_a_min_domains_three_zone_spread() {
    // One web pod per zone already; a fourth with a volume in us-east-1a and the same
    // spread (maxSkew 1, minDomains 3). Counted over all three zones the minimum is 1,
    // so us-east-1a may take a second pod (Karpenter's "should schedule pod with PVC and
    // TSC minDomains=3 when pods are spread across 3 zones"). It asks for more CPU than
    // an m5.large has, so it needs a new claim.
    let spread = json!([{
        "maxSkew": 1, "minDomains": 3, "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "web"}}
    }]);
    let mut items = Vec::new();
    for (n, zone) in [
        ("n-a", "us-east-1a"),
        ("n-b", "us-east-1b"),
        ("n-c", "us-east-1c"),
    ] {
        items.push(node(n, zone));
        items.push(running_pod(&format!("web-{n}"), "web", n));
    }
    items.push(pending_pod(
        "web-db",
        "web",
        "3",
        json!({"volumes": uses_claim("data-web"), "topologySpreadConstraints": spread}),
    ));
    items.extend(bound_volume(
        "data-web",
        "topology.kubernetes.io/zone",
        "us-east-1a",
    ));
    let plan = planned(items);
    assert_eq!(plan["unschedulable"], json!([]), "{plan}");
    let claims = plan["nodeClaims"].as_array().unwrap();
    assert_eq!(claims.len(), 1, "{plan}");
    assert_eq!(claims[0]["zone"], "us-east-1a", "{plan}");
    assert_eq!(claims[0]["pods"], json!(["default/web-db"]), "{plan}");
}

fn term(exprs: Value) -> Value {
    json!({"matchExpressions": exprs})
}

fn required(terms: Vec<Value>) -> Value {
    json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": terms}}})
}

const HOST: &str = "kubernetes.io/hostname";

#[test]
fn hostname_selectors_never_open_a_claim_alone_combined_or_under_ored_terms() {
    let host_in = |h: &str| json!({"key": HOST, "operator": "In", "values": [h]});
    let zone_in =
        |z: &str| json!({"key": "topology.kubernetes.io/zone", "operator": "In", "values": [z]});
    let cases = [
        ("selector", json!({"nodeSelector": {HOST: "ip-gone"}})),
        (
            "selector-and-zone",
            json!({"nodeSelector": {HOST: "ip-gone", "topology.kubernetes.io/zone": "us-east-1a"}}),
        ),
        (
            "selector-and-other-host-term",
            json!({"nodeSelector": {HOST: "ip-gone"}, "affinity": required(vec![term(json!([host_in("ip-other")]))])}),
        ),
        (
            "selector-and-preferred-other-host",
            json!({"nodeSelector": {HOST: "ip-gone"}, "affinity": {"nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 10, "preference": term(json!([host_in("ip-other")]))}]}}}),
        ),
        (
            "term-with-zone",
            json!({"affinity": required(vec![term(json!([host_in("ip-gone"), zone_in("us-east-1b")]))])}),
        ),
        (
            "ored-terms",
            json!({"affinity": required(vec![
                term(json!([host_in("ip-gone")])),
                term(json!([host_in("ip-other"), zone_in("us-east-1c")])),
            ])}),
        ),
        (
            "host-exists-and-not-the-host",
            json!({"nodeSelector": {HOST: "ip-gone"}, "affinity": required(vec![term(json!([
                {"key": HOST, "operator": "NotIn", "values": ["ip-gone"]}]))])}),
        ),
    ];
    for (name, spec) in cases {
        let plan = planned(vec![pending_pod(name, name, "1", spec)]);
        assert_eq!(plan["nodeClaims"], json!([]), "{name}: {plan}");
        assert_eq!(
            plan["unschedulable"].as_array().map(Vec::len),
            Some(1),
            "{name}: {plan}"
        );
    }

    // The node it names exists and has room: the pod goes there, still without a claim.
    let plan = planned(vec![
        node("ip-here", "us-east-1a"),
        pending_pod(
            "pinned",
            "pinned",
            "1",
            json!({"nodeSelector": {HOST: "ip-here"}, "affinity": {"nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 10, "preference": term(json!([host_in("ip-other")]))}]}}}),
        ),
    ]);
    assert_eq!(plan["nodeClaims"], json!([]), "{plan}");
    assert_eq!(
        plan["existingNodes"],
        json!([{"target": "ip-here", "pods": ["default/pinned"]}]),
        "{plan}"
    );

    // NotIn and Exists on the hostname leave every new node possible.
    let plan = planned(vec![pending_pod(
        "roaming",
        "roaming",
        "1",
        json!({"affinity": required(vec![term(json!([
            {"key": HOST, "operator": "NotIn", "values": ["ip-gone"]},
            {"key": HOST, "operator": "Exists"}]))])}),
    )]);
    assert_eq!(
        plan["nodeClaims"].as_array().map(Vec::len),
        Some(1),
        "{plan}"
    );
}

/// The general-purpose NodePool limited to three types of two families, with
/// `instance-family` minValues 3: no claim can keep it.
fn pool_with_unkeepable_min_values() -> String {
    let written = std::fs::read_to_string(general_purpose_nodepool()).unwrap();
    let limited = written.replace(
        "      requirements:\n",
        concat!(
            "      requirements:\n",
            "        - key: node.kubernetes.io/instance-type\n",
            "          operator: In\n",
            "          values: [\"m5.large\", \"m5.xlarge\", \"c5.xlarge\"]\n",
            "        - key: karpenter.k8s.aws/instance-family\n",
            "          operator: Exists\n",
            "          minValues: 3\n",
        ),
    );
    assert_ne!(written, limited);
    temp_file("min-values-pool.yaml", &limited)
        .display()
        .to_string()
}

fn plan_min_values(policy: Option<&str>) -> Value {
    let snapshot = snapshot_file(vec![pending_pod("web-0", "web", "1", json!({}))]);
    let pool = pool_with_unkeepable_min_values();
    let mut args = vec!["--nodepools", &pool, "--snapshot", &snapshot];
    if let Some(p) = policy {
        args.extend(["--min-values-policy", p]);
    }
    plan_json(&args)
}

#[test]
fn an_unkeepable_min_values_leaves_the_pod_pending_when_strict_and_launches_when_best_effort() {
    for strict in [plan_min_values(None), plan_min_values(Some("strict"))] {
        assert_eq!(strict["nodeClaims"], json!([]), "{strict}");
        assert_eq!(
            strict["unschedulable"][0]["reason"],
            "NodePool \"general-purpose\": minValues 3 for karpenter.k8s.aws/instance-family cannot be met (only 2 distinct values fit)",
            "{strict}"
        );
    }
    let relaxed = plan_min_values(Some("best-effort"));
    assert_eq!(relaxed["unschedulable"], json!([]), "{relaxed}");
    let claims = relaxed["nodeClaims"].as_array().unwrap();
    assert_eq!(claims.len(), 1, "{relaxed}");
    assert_eq!(claims[0]["pods"], json!(["default/web-0"]), "{relaxed}");
    // Both families stay among the options: the minimum fell to what exists, not to one.
    let options: Vec<&str> = claims[0]["instanceTypeOptions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(options.contains(&"c5.xlarge"), "{relaxed}");
    assert!(options.iter().any(|t| t.starts_with("m5.")), "{relaxed}");

    let bad = nodewright(&[
        "plan",
        "--nodepools",
        &general_purpose_nodepool(),
        "--snapshot",
        "unused.json",
        "--min-values-policy",
        "loose",
    ]);
    assert_eq!(bad.status.code(), Some(2), "clap refuses an unknown policy");
}
