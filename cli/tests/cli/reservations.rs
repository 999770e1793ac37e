//! Capacity reservations through `nodewright plan --reservations`: reserved offerings
//! are preferred while a reservation has instances left, and the claims after it is
//! used up fall back to on-demand.

use serde_json::{Value, json};

use super::{example, nodewright, plan_json, snapshot_file, stderr};

/// `contents` in a file of its own; its path.
fn temp_file(name: &str, contents: &str) -> String {
    super::temp_file(name, contents).display().to_string()
}

/// `n` pending pods of 3 CPUs: one per m5.xlarge.
fn snapshot(n: usize) -> String {
    let items: Vec<Value> = (0..n)
        .map(|i| {
            let requests = json!({"cpu": "3", "memory": "4Gi"});
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("train-{i}"), "namespace": "default"},
                "spec": {"containers": [{"name": "c", "image": "pause",
                    "resources": {"requests": requests, "limits": requests}}]},
                "status": {"phase": "Pending", "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
            })
        })
        .collect();
    snapshot_file(items)
}

fn capacity_types(plan: &Value) -> Vec<(String, String)> {
    plan["nodeClaims"]
        .as_array()
        .expect("nodeClaims")
        .iter()
        .map(|c| {
            (
                c["capacityType"].as_str().unwrap().to_string(),
                c["zone"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn plan_prefers_the_reservation_and_falls_back_to_on_demand_once_it_is_used_up() {
    let manifests = example("capacity-reservations.yaml");
    let reservations = temp_file(
        "reservations.yaml",
        "reservations:\n  - {id: cr-0aaaa, instanceType: m5.xlarge, zone: us-east-1b, available: 2}\n",
    );
    let plan = plan_json(&[
        "--nodepools",
        &manifests,
        "--snapshot",
        &snapshot(3),
        "--reservations",
        &reservations,
    ]);
    let mut got = capacity_types(&plan);
    got.sort();
    assert_eq!(got.len(), 3, "{plan:#}");
    assert_eq!(
        got.iter().filter(|(ct, _)| ct == "reserved").count(),
        2,
        "{plan:#}"
    );
    assert!(
        got.iter()
            .filter(|(ct, _)| ct == "reserved")
            .all(|(_, z)| z == "us-east-1b")
    );
    assert_eq!(
        got.iter().filter(|(ct, _)| ct == "on-demand").count(),
        1,
        "the third pod falls back to on-demand: {plan:#}"
    );

    // Without the reservations file: all on-demand, nothing reserved.
    let plain = plan_json(&["--nodepools", &manifests, "--snapshot", &snapshot(3)]);
    assert!(
        capacity_types(&plain)
            .iter()
            .all(|(ct, _)| ct == "on-demand"),
        "{plain:#}"
    );
}

#[test]
fn a_reservations_file_of_the_wrong_shape_names_the_field() {
    let manifests = example("capacity-reservations.yaml");
    let bad = temp_file(
        "reservations.yaml",
        "reservations:\n  - {id: cr-0aaaa, instanceType: m5.xlarge, zone: us-east-1b, available: lots}\n",
    );
    let out = nodewright(&[
        "plan",
        "--nodepools",
        &manifests,
        "--snapshot",
        &snapshot(1),
        "--reservations",
        &bad,
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("reservations[0].available"),
        "{}",
        stderr(&out)
    );
}

/// A scenario over the example's manifests: three pods of 3 CPUs from the start.
fn scenario(reservations: &str) -> String {
    let manifests = example("capacity-reservations.yaml");
    temp_file(
        "scenario.yaml",
        &format!(
            "name: reservations\nduration: 10m\nmanifestFiles: [{manifests:?}]\n{reservations}deployments:\n  - name: train\n    replicas: [{{at: 0s, replicas: 3}}]\n    pod:\n      containers:\n        - name: c\n          image: pause\n          resources: {{requests: {{cpu: \"3\", memory: 4Gi}}}}\n"
        ),
    )
}

fn price_at_end(scenario: &str) -> f64 {
    let out = nodewright(&["simulate", scenario, "--output", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("simulate prints JSON");
    assert_eq!(doc["summary"]["podsPendingAtEnd"], 0, "{doc:#}");
    doc["summary"]["pricePerHourAtEnd"]
        .as_f64()
        .expect("a price")
}

#[test]
fn a_simulated_reservation_takes_two_of_three_nodes_and_the_third_is_on_demand() {
    let plain = price_at_end(&scenario(""));
    let reserved = price_at_end(&scenario(
        "reservations:\n  - {id: cr-0aaaa, instanceType: m5.xlarge, zone: us-east-1b, available: 2}\n",
    ));
    // Three on-demand m5.xlarge without it; one (the reserved two are as good as free)
    // with it.
    assert!((plain - 3.0 * 0.192).abs() < 1e-3, "{plain}");
    assert!((reserved - 0.192).abs() < 1e-3, "{reserved}");
}
