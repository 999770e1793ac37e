//! Files held to Karpenter's CRDs as the API server holds them: an unknown field, a
//! missing required field, an empty file, a zone outside the region or a kind the
//! command needs and did not get is exit 1 naming it; `--lenient` warns and goes on.

use std::process::Output;

use super::{data, example, nodewright, stderr, temp_file};

/// A NodePool `default` meant for spot, with its EC2NodeClass, in one file.
fn pool_file(name: &str, requirements_key: &str) -> String {
    let text = format!(
        r#"apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  template:
    spec:
      {requirements_key}:
        - key: karpenter.sh/capacity-type
          operator: In
          values: ["spot"]
      nodeClassRef:
        group: karpenter.k8s.aws
        kind: EC2NodeClass
        name: default
---
{}"#,
        super::manifests::node_class()
    );
    temp_file(name, &text).display().to_string()
}

fn plan(pools: &str, extra: &[&str]) -> Output {
    let snapshot = data("pending.json");
    let mut args = vec!["plan", "--nodepools", pools, "--snapshot", &snapshot];
    args.extend_from_slice(extra);
    nodewright(&args)
}

fn disrupt(pools: &str, extra: &[&str]) -> Output {
    let snapshot = example("snapshot.json");
    let mut args = vec![
        "disrupt",
        "--nodepools",
        pools,
        "--snapshot",
        &snapshot,
        "--now",
        "2026-11-23T10:00:00Z",
    ];
    args.extend_from_slice(extra);
    nodewright(&args)
}

fn simulate(pools: &str, extra: &[&str]) -> Output {
    simulate_in(pools, "us-east-1a", extra)
}

fn simulate_in(pools: &str, zone: &str, extra: &[&str]) -> Output {
    let scenario = temp_file(
        "scenario.yaml",
        &format!(
            "duration: 5m\nzones: [{zone}]\nmanifestFiles: [{pools}]\ndeployments:\n  - name: web\n    replicas: [{{at: 0s, replicas: 1}}]\n    pod:\n      containers: [{{name: app, resources: {{requests: {{cpu: 100m}}}}}}]\n"
        ),
    );
    let scenario = scenario.display().to_string();
    let mut args = vec!["simulate", &scenario];
    args.extend_from_slice(extra);
    nodewright(&args)
}

/// Exit 1, stderr holding each of `lines` as a line of its own, no panic.
fn assert_invalid(out: &Output, lines: &[&str]) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    for line in lines {
        assert!(err.lines().any(|l| l.contains(line)), "{line:?} in\n{err}");
    }
}

#[test]
fn a_misspelt_requirements_makes_validate_plan_disrupt_and_simulate_exit_one_naming_the_field() {
    let pools = pool_file("nodepools.yaml", "requirments");
    let unknown = format!(
        "{pools}: NodePool \"default\": spec.template.spec.requirments: unknown field: not in Karpenter v1.15's CRD (did you mean \"requirements\"?)"
    );
    let required =
        format!("{pools}: NodePool \"default\": spec.template.spec.requirements: required");
    for out in [
        nodewright(&["validate", &pools]),
        plan(&pools, &[]),
        disrupt(&pools, &[]),
    ] {
        assert_invalid(&out, &[&unknown, &required]);
        assert!(
            out.stdout.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    assert_invalid(
        &simulate(&pools, &[]),
        &["spec.template.spec.requirments: unknown field"],
    );
}

#[test]
fn lenient_keeps_a_misspelt_field_as_a_warning_and_goes_on() {
    let pools = pool_file("nodepools.yaml", "requirments");
    let out = nodewright(&["validate", "--lenient", &pools]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).lines().any(|l| l.starts_with("warning: ")
            && l.contains("spec.template.spec.requirments: unknown field")),
        "{}",
        stderr(&out)
    );
    let out = plan(&pools, &["--lenient", "-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("warning: "), "{}", stderr(&out));
    let out = simulate(&pools, &["--lenient", "--until", "2m"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn a_node_pool_without_a_node_class_ref_or_a_taint_without_effect_is_refused_as_the_crd_refuses_it()
{
    let pools = pool_file("nodepools.yaml", "requirements");
    let text = std::fs::read_to_string(&pools).unwrap();
    let no_ref = text.replace(
        "      nodeClassRef:\n        group: karpenter.k8s.aws\n        kind: EC2NodeClass\n        name: default\n",
        "      taints: [{key: dedicated}]\n",
    );
    let file = temp_file("no-ref.yaml", &no_ref).display().to_string();
    assert_invalid(
        &nodewright(&["validate", &file]),
        &[
            "NodePool \"default\": spec.template.spec.nodeClassRef: required",
            "NodePool \"default\": spec.template.spec.taints[0].effect: required",
        ],
    );
}

#[test]
fn an_empty_manifest_file_is_an_error_naming_it_unless_lenient() {
    let empty = temp_file("empty.yaml", "# nothing yet\n")
        .display()
        .to_string();
    let line = format!("{empty}: holds no object");
    assert_invalid(&nodewright(&["validate", &empty]), &[&line]);
    let pools = example("nodepools.yaml");
    assert_invalid(
        &nodewright(&[
            "plan",
            "--nodepools",
            &pools,
            "--nodepools",
            &empty,
            "--snapshot",
            &example("snapshot.json"),
        ]),
        &[&line],
    );
    let out = nodewright(&["validate", "--lenient", &empty]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("warning: {line}")),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_zone_the_region_does_not_have_is_an_error_unless_lenient() {
    let pools = example("nodepools.yaml");
    assert_invalid(
        &plan(&pools, &["--zones", "us-east-1a,us-east-1z"]),
        &["--zones: us-east-1 has no zone \"us-east-1z\""],
    );
    assert_invalid(
        &plan(&pools, &["--zones", "eu-west-1a"]),
        &["--zones: \"eu-west-1a\" is a zone of eu-west-1, not of us-east-1"],
    );
    assert_invalid(
        &disrupt(&pools, &["--zones", "eu-west-1a"]),
        &["\"eu-west-1a\" is a zone of eu-west-1"],
    );
    let good = pool_file("nodepools.yaml", "requirements");
    assert_invalid(
        &simulate_in(&good, "eu-west-1a", &[]),
        &["zones: \"eu-west-1a\" is a zone of eu-west-1, not of us-east-1"],
    );
    let out = plan(&pools, &["--zones", "us-east-1z", "--lenient"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("warning: --zones"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn plan_and_disrupt_need_a_node_pool_and_disrupt_needs_nodes() {
    let class_only = temp_file("class.yaml", &super::manifests::node_class())
        .display()
        .to_string();
    assert_invalid(
        &plan(&class_only, &[]),
        &["no NodePool: plan needs at least one karpenter.sh/v1 NodePool"],
    );
    // pending.json holds pods only: nothing for disrupt to decide about.
    let out = nodewright(&[
        "disrupt",
        "--nodepools",
        &example("nodepools.yaml"),
        "--snapshot",
        &data("pending.json"),
    ]);
    assert_invalid(&out, &["pending.json: no Node in the list"]);
}

#[test]
fn the_examples_and_test_manifests_are_accepted_strictly() {
    let mut files: Vec<String> = [
        "nodepools.yaml",
        "node-overlay.yaml",
        "capacity-reservations.yaml",
    ]
    .map(example)
    .to_vec();
    for entry in std::fs::read_dir(super::root().join("tests/data")).unwrap() {
        let name = entry.unwrap().path().display().to_string();
        // The manifests meant to be valid (density-bad-limits.yaml is not).
        if name.contains("/density-") && name.ends_with(".yaml") && !name.contains("bad-") {
            files.push(name);
        }
    }
    assert!(files.len() > 5, "{files:?}");
    for f in &files {
        let out = nodewright(&["validate", f]);
        assert_eq!(out.status.code(), Some(0), "{f}: {}", stderr(&out));
        assert_eq!(stderr(&out), "", "{f}");
    }
}

#[test]
fn what_kubectl_get_prints_for_node_pools_and_classes_validates_and_plans() {
    // `kubectl get nodepools,ec2nodeclasses -o json`: one v1 List, the server's fields
    // (uid, managedFields, status...) on every item.
    let manifests = std::fs::read_to_string(pool_file("p.yaml", "requirements")).unwrap();
    let mut items = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(&manifests) {
        let mut item: serde_json::Value = serde::Deserialize::deserialize(doc).unwrap();
        item["metadata"]["uid"] = "0b5d3c2e-1111-2222-3333-444455556666".into();
        item["metadata"]["generation"] = 1.into();
        item["metadata"]["managedFields"] = serde_json::json!([{"manager": "kubectl"}]);
        item["status"] = serde_json::json!({"conditions": []});
        items.push(item);
    }
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items});
    let file = temp_file("got.json", &list.to_string())
        .display()
        .to_string();
    let out = nodewright(&["validate", &file]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim_end(),
        "valid: 1 NodePool(s), 1 EC2NodeClass(es)"
    );
    let out = plan(&file, &["-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}
