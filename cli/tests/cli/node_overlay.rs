//! NodeOverlays (`karpenter.sh/v1alpha1`) read from the manifest files by `validate`,
//! `plan`, `disrupt` and `simulate`: a 30% discount on the m5 family flips the type
//! chosen for new capacity and for a consolidation replacement, a capacity overlay lets
//! a pod requesting huge pages be planned, two overlays of equal weight that price
//! the same offering are reported as a conflict, a NodePool limit counts the capacity an
//! overlay adds, and `plan`'s JSON says which claims an overlay reached.

use std::process::Output;

use serde_json::{Value, json};

use super::{example, nodewright, plan_json, snapshot_file, stderr, temp_file};

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The example's documents: (the NodePool and EC2NodeClass alone, all of them).
fn example_manifests() -> (String, String) {
    let all = std::fs::read_to_string(example("node-overlay.yaml")).expect("the example");
    let first_overlay = all
        .find("---\napiVersion: karpenter.sh/v1alpha1")
        .expect("the example has NodeOverlays after the pool");
    (all[..first_overlay].to_string(), all)
}

fn pending_pod(name: &str, requests: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "pause",
            "resources": {"requests": requests, "limits": requests}}]},
        "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    })
}

fn plan_types(manifests: &str, items: Vec<Value>) -> Value {
    let pools = temp_file("pools.yaml", manifests);
    plan_json(&[
        "--nodepools",
        &pools.display().to_string(),
        "--snapshot",
        &snapshot_file(items),
    ])
}

fn one_cpu() -> Value {
    json!({"cpu": "1", "memory": "1Gi"})
}

#[test]
fn validate_reads_node_overlays_from_the_manifest_files_and_prints_each_verdict() {
    let out = nodewright(&["validate", &example("node-overlay.yaml")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("valid: 1 NodePool(s), 1 EC2NodeClass(es), 2 NodeOverlay(s)"),
        "{text}"
    );
    assert!(
        text.contains("NodeOverlay \"savings-plan\": ValidationSucceeded"),
        "{text}"
    );
    assert!(
        text.contains("NodeOverlay \"hugepages\": ValidationSucceeded"),
        "{text}"
    );
}

#[test]
fn validate_with_fields_lists_the_overlay_fields_and_refuses_unknown_ones_unless_lenient() {
    let all = nodewright(&["validate", "--fields", &example("node-overlay.yaml")]);
    assert!(all.status.success(), "{}", stderr(&all));
    let printed = stdout(&all);
    for line in [
        "NodeOverlay \"savings-plan\": spec.priceAdjustment: honoured",
        "NodeOverlay \"savings-plan\": spec.requirements[1].key: honoured",
        "NodeOverlay \"hugepages\": spec.capacity.hugepages-2Mi: honoured",
    ] {
        assert!(printed.lines().any(|l| l == line), "{line:?} in\n{printed}");
    }
    let (pools, _) = example_manifests();
    let file = std::env::temp_dir().join(format!("overlay-typo-{}.yaml", std::process::id()));
    std::fs::write(
        &file,
        format!(
            "{pools}---\napiVersion: karpenter.sh/v1alpha1\nkind: NodeOverlay\nmetadata: {{name: typo}}\nspec:\n  requirements: []\n  prize: \"1\"\n"
        ),
    )
    .unwrap();
    let file = file.display().to_string();
    let unknown = format!("{file}: NodeOverlay \"typo\": spec.prize: unknown field");
    let out = nodewright(&["validate", &file]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains(&unknown), "{}", stderr(&out));
    let out = nodewright(&["validate", "--lenient", &file]);
    assert!(
        stderr(&out).contains(&format!("warning: {unknown}")),
        "{}",
        stderr(&out)
    );
}

#[test]
fn two_overlays_of_equal_weight_pricing_the_same_offering_conflict_and_the_later_is_not_applied() {
    let (pools, _) = example_manifests();
    let overlay = |name: &str, price: &str| {
        format!(
            "---\napiVersion: karpenter.sh/v1alpha1\nkind: NodeOverlay\nmetadata: {{name: {name}}}\nspec:\n  requirements: [{{key: karpenter.k8s.aws/instance-family, operator: In, values: [m5]}}]\n  price: \"{price}\"\n"
        )
    };
    let manifests = format!("{pools}{}{}", overlay("a", "0.01"), overlay("b", "0.5"));
    let file = temp_file("conflict.yaml", &manifests);
    let out = nodewright(&["validate", &file.display().to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    // Equal weights go by name, later in the alphabet first: "b" applies, "a" conflicts.
    assert!(
        text.contains("NodeOverlay \"b\": ValidationSucceeded"),
        "{text}"
    );
    assert!(
        text.contains("NodeOverlay \"a\": not applied: Conflict: conflict with another overlay"),
        "{text}"
    );
    // Planning leaves "a" out, says so, and prices m5 with "b" (0.5 $/h: c5 wins).
    let pools_file = temp_file("pools.yaml", &manifests);
    let out = nodewright(&[
        "plan",
        "--output",
        "json",
        "--nodepools",
        &pools_file.display().to_string(),
        "--snapshot",
        &snapshot_file(vec![pending_pod("web", one_cpu())]),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("warning: NodeOverlay \"a\" not applied: Conflict"),
        "{}",
        stderr(&out)
    );
    let plan: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        plan["nodeClaims"][0]["instanceType"], "c5.large",
        "{plan:#}"
    );
}

#[test]
fn an_overlay_that_breaks_a_rule_fails_validate_naming_its_field() {
    let (pools, _) = example_manifests();
    let manifests = format!(
        "{pools}---\napiVersion: karpenter.sh/v1alpha1\nkind: NodeOverlay\nmetadata: {{name: bad}}\nspec:\n  requirements: []\n  priceAdjustment: \"-130%\"\n  capacity: {{memory: 1Gi}}\n"
    );
    let file = temp_file("bad.yaml", &manifests);
    let out = nodewright(&["validate", &file.display().to_string()]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(
            "NodeOverlay \"bad\": spec.priceAdjustment: \"-130%\" is not a price adjustment"
        ),
        "{err}"
    );
    assert!(
        err.contains(
            "NodeOverlay \"bad\": spec.capacity.memory: resource \"memory\" is restricted"
        ),
        "{err}"
    );
}

#[test]
fn a_thirty_percent_discount_on_m5_flips_the_planned_type_from_c5_to_m5() {
    let (pools, all) = example_manifests();
    let without = plan_types(&pools, vec![pending_pod("web", one_cpu())]);
    assert_eq!(
        without["nodeClaims"][0]["instanceType"], "c5.large",
        "{without:#}"
    );
    let with = plan_types(&all, vec![pending_pod("web", one_cpu())]);
    let claim = &with["nodeClaims"][0];
    assert_eq!(claim["instanceType"], "m5.large", "{with:#}");
    let price = claim["pricePerHour"].as_f64().expect("a price");
    assert!((price - 0.096 * 0.7).abs() < 1e-6, "{price}");
}

#[test]
fn a_discount_scoped_to_another_pool_changes_nothing_in_this_one() {
    let (_, all) = example_manifests();
    let elsewhere = all.replace("values: [default]", "values: [other]");
    assert_ne!(elsewhere, all);
    let plan = plan_types(&elsewhere, vec![pending_pod("web", one_cpu())]);
    assert_eq!(
        plan["nodeClaims"][0]["instanceType"], "c5.large",
        "{plan:#}"
    );
}

#[test]
fn a_hugepages_capacity_overlay_lets_a_pod_requesting_hugepages_be_planned() {
    let (pools, all) = example_manifests();
    let requests = json!({"cpu": "500m", "memory": "1Gi", "hugepages-2Mi": "512Mi"});
    let without = plan_types(&pools, vec![pending_pod("db", requests.clone())]);
    assert!(
        without["nodeClaims"].as_array().is_none_or(Vec::is_empty),
        "{without:#}"
    );
    assert_eq!(
        without["unschedulable"].as_array().map(Vec::len),
        Some(1),
        "{without:#}"
    );
    let with = plan_types(&all, vec![pending_pod("db", requests)]);
    let claim = &with["nodeClaims"][0];
    assert_eq!(claim["pods"], json!(["default/db"]), "{with:#}");
    let options: Vec<&str> = claim["instanceTypeOptions"]
        .as_array()
        .expect("options")
        .iter()
        .map(|o| o.as_str().expect("a type"))
        .collect();
    assert!(
        options.iter().all(|o| o.starts_with("m5.")),
        "only the overlaid family has huge pages: {options:?}"
    );
}

// ----- disrupt: the replacement consolidation picks ------------------------------------

const NOW: &str = "2026-11-23T10:00:00Z";
const EARLIER: &str = "2026-11-23T08:00:00Z";

fn node(name: &str, instance_type: &str) -> Value {
    let family = instance_type.split('.').next().expect("a family");
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "creationTimestamp": EARLIER, "labels": {
            "kubernetes.io/hostname": name,
            "topology.kubernetes.io/zone": "us-east-1a",
            "node.kubernetes.io/instance-type": instance_type,
            "kubernetes.io/arch": "amd64",
            "karpenter.sh/capacity-type": "on-demand",
            "karpenter.sh/nodepool": "default",
            "karpenter.sh/initialized": "true",
            "karpenter.k8s.aws/instance-family": family}},
        "spec": {"providerID": format!("aws:///us-east-1a/i-{name}")},
        "status": {
            "allocatable": {"cpu": "3920m", "memory": "6584Mi", "pods": "58"},
            "capacity": {"cpu": "4", "memory": "7Gi", "pods": "58"},
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": EARLIER}]}
    })
}

fn pod_on(name: &str, node: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "creationTimestamp": EARLIER},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "pause",
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
        "status": {"phase": "Running", "startTime": EARLIER}
    })
}

fn consolidating(manifests: &str) -> String {
    manifests.replace(
        "      nodeClassRef:\n        group: karpenter.k8s.aws\n        kind: EC2NodeClass\n        name: default\n",
        "      nodeClassRef:\n        group: karpenter.k8s.aws\n        kind: EC2NodeClass\n        name: default\n  disruption:\n    consolidationPolicy: WhenEmptyOrUnderutilized\n    consolidateAfter: 30s\n",
    )
}

fn replacement_of(manifests: &str) -> Value {
    let manifests = consolidating(manifests);
    assert!(manifests.contains("consolidateAfter"), "{manifests}");
    let pools = temp_file("pools.yaml", &manifests);
    let items = vec![node("big", "c5.xlarge"), pod_on("web", "big")];
    let out = nodewright(&[
        "disrupt",
        "--output",
        "json",
        "--now",
        NOW,
        "--nodepools",
        &pools.display().to_string(),
        "--snapshot",
        &snapshot_file(items),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let decision: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let command = &decision["commands"][0];
    assert_eq!(command["nodes"], json!(["big"]), "{decision:#}");
    command["replacements"][0].clone()
}

#[test]
fn disrupt_replaces_a_node_with_the_type_the_overlay_makes_cheapest() {
    let (pools, all) = example_manifests();
    // A c5.xlarge (0.17 $/h) holding one 1-CPU pod is replaced by one cheaper node:
    // c5.large (0.085) without the overlay, m5.large (0.0672) with it.
    let without = replacement_of(&pools);
    assert_eq!(without["instanceType"], "c5.large", "{without:#}");
    let with = replacement_of(&all);
    assert_eq!(with["instanceType"], "m5.large", "{with:#}");
    let price = with["pricePerHour"].as_f64().expect("a price");
    assert!((price - 0.0672).abs() < 1e-6, "{price}");
}

// ----- simulate ----------------------------------------------------------------------------

fn simulated_types(manifest_file: &str) -> Vec<String> {
    let scenario = format!(
        "name: overlay\nduration: 10m\nseed: 1\nmanifestFiles: [{manifest_file:?}]\ndeployments:\n  - name: web\n    replicas:\n      - {{at: 1m, replicas: 1}}\n    pod:\n      containers:\n        - name: app\n          image: nginx\n          resources: {{requests: {{cpu: \"1\", memory: 1Gi}}}}\n"
    );
    let file = temp_file("scenario.yaml", &scenario);
    let save = file.with_file_name("end.json");
    let out = nodewright(&[
        "simulate",
        &file.display().to_string(),
        "--output",
        "json",
        "--save",
        &save.display().to_string(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let end: Value =
        serde_json::from_str(&std::fs::read_to_string(&save).expect("saved")).expect("JSON");
    let claims = end["claims"].as_array().expect("claims");
    claims
        .iter()
        .map(|c| c["instanceType"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn simulate_reads_node_overlays_from_its_manifest_files_and_launches_the_overlaid_type() {
    let (pools, _) = example_manifests();
    let plain = temp_file("pools.yaml", &pools);
    assert_eq!(simulated_types(&plain.display().to_string()), ["c5.large"]);
    assert_eq!(simulated_types(&example("node-overlay.yaml")), ["m5.large"]);
}

// ----- limits count overlaid capacity ----------------------------------------------------

#[test]
fn a_pool_limit_on_a_device_only_an_overlay_adds_plans_two_nodes_and_names_the_limit() {
    let (pools, _) = example_manifests();
    let limited = pools.replacen(
        "kind: NodePool\nmetadata:\n  name: default\nspec:\n",
        "kind: NodePool\nmetadata:\n  name: default\nspec:\n  limits:\n    example.com/device: \"8\"\n",
        1,
    );
    assert_ne!(limited, pools);
    let manifests = format!(
        "{limited}---\napiVersion: karpenter.sh/v1alpha1\nkind: NodeOverlay\nmetadata: {{name: devices}}\nspec:\n  requirements: []\n  capacity:\n    example.com/device: \"4\"\n"
    );
    let requests = json!({"cpu": "1", "memory": "1Gi", "example.com/device": "4"});
    let pods = (0..3)
        .map(|i| pending_pod(&format!("dev-{i}"), requests.clone()))
        .collect();
    let plan = plan_types(&manifests, pods);
    // Each node has 4 devices (the overlay), each pod takes 4: the limit of 8 holds two.
    let claims = plan["nodeClaims"].as_array().expect("claims");
    assert_eq!(claims.len(), 2, "{plan:#}");
    for claim in claims {
        assert_eq!(
            claim["overlaysApplied"],
            json!({"capacity": true}),
            "{plan:#}"
        );
    }
    let unschedulable = plan["unschedulable"].as_array().expect("unschedulable");
    assert_eq!(unschedulable.len(), 1, "{plan:#}");
    let reason = unschedulable[0]["reason"].as_str().expect("a reason");
    assert!(
        reason.contains("NodePool \"default\" limits: example.com/device would reach 12 of 8"),
        "{reason}"
    );
}

#[test]
fn plan_json_says_which_claims_a_price_overlay_reached() {
    let (pools, all) = example_manifests();
    let with = plan_types(&all, vec![pending_pod("web", one_cpu())]);
    // m5 is discounted (savings-plan) and has huge pages (hugepages).
    assert_eq!(
        with["nodeClaims"][0]["overlaysApplied"],
        json!({"price": true, "capacity": true}),
        "{with:#}"
    );
    let without = plan_types(&pools, vec![pending_pod("web", one_cpu())]);
    assert!(
        without["nodeClaims"][0].get("overlaysApplied").is_none(),
        "{without:#}"
    );
}

#[test]
fn a_consolidation_replacement_counts_the_capacity_an_overlay_adds_against_the_limit() {
    let (pools, _) = example_manifests();
    let decision = |limit: &str| {
        let limited = pools.replacen(
            "kind: NodePool\nmetadata:\n  name: default\nspec:\n",
            &format!(
                "kind: NodePool\nmetadata:\n  name: default\nspec:\n  limits:\n    example.com/device: \"{limit}\"\n"
            ),
            1,
        );
        let manifests = consolidating(&format!(
            "{limited}---\napiVersion: karpenter.sh/v1alpha1\nkind: NodeOverlay\nmetadata: {{name: devices}}\nspec:\n  requirements: []\n  capacity:\n    example.com/device: \"4\"\n"
        ));
        let file = temp_file("pools.yaml", &manifests);
        let out = nodewright(&[
            "disrupt",
            "--output",
            "json",
            "--now",
            NOW,
            "--nodepools",
            &file.display().to_string(),
            "--snapshot",
            &snapshot_file(vec![node("big", "c5.xlarge"), pod_on("web", "big")]),
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_slice::<Value>(&out.stdout).expect("JSON")
    };
    // The node reports no devices; its replacement would have 4 (the overlay).
    let fits = decision("4");
    let replacement = &fits["commands"][0]["replacements"][0];
    assert_eq!(replacement["instanceType"], "c5.large", "{fits:#}");
    assert_eq!(
        replacement["overlaysApplied"],
        json!({"capacity": true}),
        "{fits:#}"
    );
    let over = decision("3");
    assert!(
        over["commands"].as_array().is_none_or(Vec::is_empty),
        "a replacement would reach 4 devices of 3: {over:#}"
    );
}
