//! CapacityBuffers (`autoscaling.x-k8s.io/v1beta1`) read from the manifest files by
//! `validate`, `plan` and `disrupt`: the CRD's rules with the API server's messages,
//! virtual pods planned after the real ones with each buffer's conditions as Karpenter
//! writes them, a `scalableRef` resolved against the snapshot's Deployment, and the room
//! a buffer holds keeping its node through disruption.

use std::process::Output;

use serde_json::{Value, json};

use super::disrupt::{NOW, node, pod_on};
use super::static_capacity::nodes_at;
use super::{example, nodewright, plan_json, snapshot_file, stderr, temp_file};

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn example_text() -> String {
    std::fs::read_to_string(example("capacity-buffer.yaml")).expect("the example")
}

fn pending_pod(name: &str, cpu: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "pause",
            "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]},
        "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    })
}

fn deployment(replicas: i64) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "generation": 3},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx",
                    "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}}}],
                    "volumes": [{"name": "cache", "ephemeral": {"volumeClaimTemplate":
                        {"spec": {"accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": "1Gi"}}}}}}]}}}
    })
}

fn condition(buffer: &Value, kind: &str) -> (String, String, String) {
    let c = buffer["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == kind))
        .unwrap_or_else(|| panic!("no {kind} condition in {buffer:#}"));
    let s = |f: &str| c[f].as_str().unwrap_or_default().to_string();
    (s("status"), s("reason"), s("message"))
}

fn buffer<'a>(plan: &'a Value, key: &str) -> &'a Value {
    plan["capacityBuffers"]
        .as_array()
        .and_then(|bs| bs.iter().find(|b| b["buffer"] == key))
        .unwrap_or_else(|| panic!("no buffer {key} in {plan:#}"))
}

#[test]
fn validate_reads_capacity_buffers_and_refuses_what_their_crd_refuses_naming_the_field() {
    let out = nodewright(&["validate", &example("capacity-buffer.yaml")]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(
            "valid: 1 NodePool(s), 1 EC2NodeClass(es), 2 CapacityBuffer(s), 1 PodTemplate(s)"
        ),
        "{}",
        stdout(&out)
    );
    let without_count = example_text().replace("  replicas: 3\n", "");
    let file = temp_file("buffers.yaml", &without_count);
    let out = nodewright(&["validate", &file.display().to_string()]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let expected = format!(
        "{}: CapacityBuffer \"batch/batch-headroom\": spec: If podTemplateRef is set, replicas or limits must also be set",
        file.display()
    );
    assert!(stderr(&out).contains(&expected), "{}", stderr(&out));
    let typo = example_text().replace("  replicas: 3\n", "  replicas: 3\n  replica: 3\n");
    let file = temp_file("buffers.yaml", &typo);
    let out = nodewright(&["validate", &file.display().to_string()]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stderr(&out).contains(
            "CapacityBuffer \"batch/batch-headroom\": spec.replica: unknown field \"replica\""
        ),
        "{}",
        stderr(&out)
    );
}

#[test]
fn plan_launches_room_for_buffers_after_the_real_pods_and_reports_each_buffers_conditions() {
    let snapshot = snapshot_file(vec![pending_pod("late-1", "1"), deployment(10)]);
    let args = [
        "--nodepools",
        &example("capacity-buffer.yaml"),
        "--snapshot",
        &snapshot,
    ];
    let plan = plan_json(&args);
    let mut planned: Vec<String> = plan["nodeClaims"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["pods"].as_array().unwrap().iter())
        .map(|p| p.as_str().unwrap().to_string())
        .collect();
    planned.sort();
    assert_eq!(
        planned,
        [
            "batch/capacity-buffer-batch-headroom-1",
            "batch/capacity-buffer-batch-headroom-2",
            "batch/capacity-buffer-batch-headroom-3",
            "default/capacity-buffer-web-surge-1",
            "default/capacity-buffer-web-surge-2",
            "default/late-1",
        ],
        "20% of the Deployment's 10 replicas is 2 chunks; {plan:#}"
    );
    let batch = buffer(&plan, "batch/batch-headroom");
    assert_eq!(batch["replicas"], 3);
    assert_eq!(
        condition(batch, "ReadyForProvisioning"),
        (
            "True".into(),
            "Resolved".into(),
            "Pod template resolved successfully".into()
        )
    );
    assert_eq!(
        condition(batch, "Provisioning"),
        (
            "False".into(),
            "RequiresNewCapacity".into(),
            "3/3 virtual pods required new capacity, 0 failed".into()
        )
    );
    assert_eq!(buffer(&plan, "default/web-surge")["replicas"], 2);

    // Without the Deployment in the snapshot, the buffer that names it is not ready.
    let plan = plan_json(&[
        "--nodepools",
        &example("capacity-buffer.yaml"),
        "--snapshot",
        &snapshot_file(vec![pending_pod("late-1", "1")]),
    ]);
    let surge = buffer(&plan, "default/web-surge");
    assert_eq!(
        condition(surge, "ReadyForProvisioning"),
        (
            "False".into(),
            "ScalableRefNotFound".into(),
            "deployments.apps \"web\" not found".into()
        )
    );
    assert_eq!(
        condition(surge, "Provisioning").1,
        "NotReadyForProvisioning"
    );

    let out = nodewright(&[&["plan"], &args[..]].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    let table = stdout(&out);
    assert!(
        table.contains(
            "batch/batch-headroom: 3 virtual pods (0 on existing capacity, 3 new, 0 failed)"
        ),
        "{table}"
    );
    assert!(
        table.contains("Provisioning=False RequiresNewCapacity: 3/3 virtual pods required new capacity, 0 failed"),
        "{table}"
    );
}

fn disrupt(manifests: &str, items: Vec<Value>) -> Value {
    let pools = temp_file("pools.yaml", manifests);
    let out = nodewright(&[
        "disrupt",
        "--nodepools",
        &pools.display().to_string(),
        "--snapshot",
        &snapshot_file(items),
        "--now",
        NOW,
        "--output",
        "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("disrupt prints JSON")
}

#[test]
fn a_node_holding_a_buffers_room_is_kept_by_disrupt_and_goes_once_the_buffer_does() {
    // busy holds a 3-CPU pod (0.9 CPU free); one 1-CPU chunk of batch-headroom fits
    // only on the empty m5.large.
    let one_chunk = example_text()
        .replace("  replicas: 3\n", "  replicas: 1\n")
        .replace("  percentage: 20\n", "  replicas: 0\n");
    let items = vec![
        node("busy", "m5.xlarge", "on-demand"),
        node("spare", "m5.large", "on-demand"),
        pod_on("web-1", "busy", "3"),
    ];
    let d = disrupt(&one_chunk, items.clone());
    let spare = d["rejected"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["node"] == "spare"))
        .unwrap_or_else(|| panic!("spare is not rejected: {d:#}"));
    assert_eq!(spare["code"], "CapacityBuffer", "{d:#}");
    assert!(
        spare["reason"]
            .as_str()
            .is_some_and(|r| r.contains("CapacityBuffer batch/batch-headroom")),
        "{spare}"
    );
    let without = example_text();
    let cut = without
        .find("---\napiVersion: v1\nkind: PodTemplate")
        .expect("the example's buffers follow its NodePool and class");
    let d = disrupt(&without[..cut], items);
    let emptiness: Vec<&Value> = d["commands"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["method"] == "emptiness")
        .collect();
    assert_eq!(emptiness.len(), 1, "{d:#}");
    assert_eq!(emptiness[0]["nodes"], json!(["spare"]));
}

fn simulate(scenario: &str) -> Value {
    let file = temp_file("scenario.yaml", scenario);
    let out = nodewright(&["simulate", &file.display().to_string(), "--output", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("simulate prints JSON")
}

#[test]
fn simulate_keeps_a_buffers_room_through_a_surge_and_after_the_pods_go() {
    let text =
        std::fs::read_to_string(example("capacity-buffer-scenario.yaml")).expect("the example");
    let with = simulate(&text);
    let cut = text
        .find("  - apiVersion: autoscaling.x-k8s.io/v1beta1")
        .expect("the buffer");
    let end = text[cut..]
        .find("\ndeployments:")
        .expect("deployments follow")
        + cut;
    let without = simulate(&format!("{}{}", &text[..cut], &text[end + 1..]));
    for doc in [&with, &without] {
        let summary = &doc["summary"];
        assert_eq!(summary["podsLost"], 0, "{summary}");
        assert_eq!(summary["pdbViolations"], 0, "{summary}");
        assert_eq!(doc["problems"], json!([]), "{doc:#}");
    }
    let (with_timeline, without_timeline) = (
        with["timeline"].as_array().expect("a timeline"),
        without["timeline"].as_array().expect("a timeline"),
    );
    // Before any pod exists, one node holds the buffer's 2 chunks; without it, none.
    assert_eq!(nodes_at(with_timeline, 9 * 60), 1, "{with:#}");
    assert_eq!(nodes_at(without_timeline, 9 * 60), 0, "{without:#}");
    // Most pods bind at once into the room kept for them; without it each waits for
    // a node.
    let p50 = |doc: &Value| {
        doc["summary"]["pendingSeconds"]["p50"]
            .as_f64()
            .unwrap_or(-1.0)
    };
    assert_eq!(p50(&with), 0.0, "{with:#}");
    assert!(p50(&without) >= 20.0, "{without:#}");
    // Once the pods are gone, the buffer's room stays; without it nothing does.
    assert_eq!(with["summary"]["nodesAtEnd"], 1, "{with:#}");
    assert_eq!(without["summary"]["nodesAtEnd"], 0, "{without:#}");
}
