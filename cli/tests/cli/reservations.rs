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
    snapshot_selecting(n, json!({}))
}

/// [`snapshot`] with `node_selector` as each pod's `spec.nodeSelector`.
fn snapshot_selecting(n: usize, node_selector: Value) -> String {
    let items: Vec<Value> = (0..n)
        .map(|i| {
            let requests = json!({"cpu": "3", "memory": "4Gi"});
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("train-{i}"), "namespace": "default"},
                "spec": {"nodeSelector": node_selector,
                    "containers": [{"name": "c", "image": "pause",
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

/// `plan` over the example with `reservations` as its `--reservations` file exits 1,
/// naming `field`.
fn assert_refused_naming(reservations: &str, field: &str) {
    let bad = temp_file("reservations.yaml", reservations);
    let out = nodewright(&[
        "plan",
        "--nodepools",
        &example("capacity-reservations.yaml"),
        "--snapshot",
        &snapshot(1),
        "--reservations",
        &bad,
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains(field), "{}", stderr(&out));
}

#[test]
fn a_reservations_file_of_the_wrong_shape_names_the_field() {
    assert_refused_naming(
        "reservations:\n  - {id: cr-0aaaa, instanceType: m5.xlarge, zone: us-east-1b, available: lots}\n",
        "reservations[0].available",
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

/// An ODCR and an interruptible ODCR of one instance each, both of m5.xlarge in
/// us-east-1b.
const ODCR_AND_INTERRUPTIBLE: &str = "reservations:\n  - {id: cr-0aaaa, instanceType: m5.xlarge, zone: us-east-1b, available: 1, interruptible: true}\n  - {id: cr-0bbbb, instanceType: m5.xlarge, zone: us-east-1b, available: 1}\n";

/// The example's pool with one more requirement (a YAML flow mapping).
fn pool_requiring(requirement: &str) -> String {
    let example = std::fs::read_to_string(example("capacity-reservations.yaml")).unwrap();
    let anchor = "values: [m5.xlarge]}\n";
    assert!(example.contains(anchor), "the example changed: {example}");
    temp_file(
        "pool.yaml",
        &example.replacen(anchor, &format!("{anchor}        - {requirement}\n"), 1),
    )
}

/// The values the plan's claims carry for label `key`, where they carry it.
fn claim_labels(plan: &Value, key: &str) -> Vec<String> {
    plan["nodeClaims"]
        .as_array()
        .expect("nodeClaims")
        .iter()
        .filter_map(|c| c["labels"][key].as_str())
        .map(str::to_string)
        .collect()
}

#[test]
fn a_pod_pinned_to_a_reservation_launches_only_into_it_and_waits_once_it_is_full() {
    let reservations = temp_file("reservations.yaml", ODCR_AND_INTERRUPTIBLE);
    let plan = plan_json(&[
        "--nodepools",
        &example("capacity-reservations.yaml"),
        "--snapshot",
        &snapshot_selecting(
            2,
            json!({"karpenter.k8s.aws/capacity-reservation-id": "cr-0bbbb"}),
        ),
        "--reservations",
        &reservations,
    ]);
    // One instance left in cr-0bbbb: one claim into it; the other pod neither goes
    // to the interruptible reservation nor on-demand (neither carries the id).
    assert_eq!(
        capacity_types(&plan),
        [("reserved".to_string(), "us-east-1b".to_string())],
        "{plan:#}"
    );
    assert_eq!(
        claim_labels(&plan, "karpenter.k8s.aws/capacity-reservation-id"),
        ["cr-0bbbb"],
        "{plan:#}"
    );
    assert_eq!(
        plan["unschedulable"].as_array().map(Vec::len),
        Some(1),
        "{plan:#}"
    );
}

#[test]
fn a_pool_refusing_interruptible_reservations_takes_the_odcr_then_on_demand() {
    let reservations = temp_file("reservations.yaml", ODCR_AND_INTERRUPTIBLE);
    let run = |pool: &str| {
        let plan = plan_json(&[
            "--nodepools",
            pool,
            "--snapshot",
            &snapshot(3),
            "--reservations",
            &reservations,
        ]);
        let mut reserved: Vec<String> = capacity_types(&plan)
            .into_iter()
            .map(|(ct, _)| ct)
            .collect();
        reserved.sort();
        (reserved, plan)
    };
    // Both reservations are open to the example's pool.
    let (both, plan) = run(&example("capacity-reservations.yaml"));
    assert_eq!(both, ["on-demand", "reserved", "reserved"], "{plan:#}");
    // NotIn [true]: the ODCR, then on-demand (a node outside reservations has no
    // such label, which NotIn allows).
    let (odcr_only, plan) = run(&pool_requiring(
        r#"{key: karpenter.k8s.aws/capacity-reservation-interruptible, operator: NotIn, values: ["true"]}"#,
    ));
    assert_eq!(
        odcr_only,
        ["on-demand", "on-demand", "reserved"],
        "{plan:#}"
    );
    // In [false]: the ODCR only, as in Karpenter (on-demand offerings carry no such
    // label): the two other pods wait.
    let (strict, plan) = run(&pool_requiring(
        r#"{key: karpenter.k8s.aws/capacity-reservation-interruptible, operator: In, values: ["false"]}"#,
    ));
    assert_eq!(strict, ["reserved"], "{plan:#}");
    assert_eq!(
        claim_labels(
            &plan,
            "karpenter.k8s.aws/capacity-reservation-interruptible"
        ),
        ["false"],
        "{plan:#}"
    );
    assert_eq!(
        plan["unschedulable"].as_array().map(Vec::len),
        Some(2),
        "{plan:#}"
    );
}

#[test]
fn an_interruptible_capacity_block_is_refused_naming_the_field() {
    assert_refused_naming(
        "reservations:\n  - {id: cr-0aaaa, instanceType: m5.xlarge, zone: us-east-1b, available: 1}\n  - {id: cr-0bbbb, instanceType: p5.48xlarge, zone: us-east-1b, available: 1, reservationType: capacity-block, interruptible: true}\n",
        "reservations[1].interruptible",
    );
}

#[test]
fn a_reservation_interruption_drains_its_node_and_the_pod_moves_to_on_demand() {
    // The example's class selects cr-0aaaa: an interruptible reservation holding both
    // pods' nodes until its owner takes one back.
    let scenario = scenario(
        "reservations:\n  - {id: cr-0aaaa, instanceType: m5.xlarge, zone: us-east-1b, available: 2, interruptible: true}\nevents:\n  - at: 4m\n    reservationInterruption: {target: oldest}\n",
    );
    let scenario = std::fs::read_to_string(&scenario)
        .unwrap()
        .replace("replicas: 3}", "replicas: 2}");
    let scenario = temp_file("interrupted.yaml", &scenario);
    let out = nodewright(&["simulate", &scenario, "--output", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("simulate prints JSON");
    assert_eq!(doc["summary"]["podsPendingAtEnd"], 0, "{doc:#}");
    let interruptions = doc["interruptions"].as_array().expect("interruptions");
    assert_eq!(interruptions.len(), 1, "{doc:#}");
    assert_eq!(
        interruptions[0]["cause"], "CapacityReservationInterrupted",
        "{doc:#}"
    );
    // Both nodes reserved (as good as free) until the owner took one back; its pod
    // went to an on-demand node, not back into the reservation.
    let price = doc["summary"]["pricePerHourAtEnd"]
        .as_f64()
        .expect("a price");
    assert!((price - 0.192).abs() < 1e-3, "{price}: {doc:#}");
    assert!(
        doc.to_string()
            .contains("capacity reservation interruption warning for"),
        "{doc:#}"
    );
}
