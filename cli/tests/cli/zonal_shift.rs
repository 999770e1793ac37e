//! `plan --zonal-shift ZONE`: nothing launches in a zone under an ARC zonal shift; a pod
//! that can only run there stays pending, saying why.

use serde_json::{Value, json};

use super::{general_purpose_nodepool, nodewright, plan_json, snapshot_file, stderr};

/// Pending pods of 3 CPUs (one per m5.xlarge), the first `pinned` of them selecting
/// us-east-1a.
fn pending(n: usize, pinned: usize) -> String {
    let items: Vec<Value> = (0..n)
        .map(|i| {
            let requests = json!({"cpu": "3", "memory": "4Gi"});
            let selector = if i < pinned {
                json!({"topology.kubernetes.io/zone": "us-east-1a"})
            } else {
                json!({})
            };
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("web-{i}"), "namespace": "default"},
                "spec": {"nodeSelector": selector,
                    "containers": [{"name": "c", "image": "pause",
                    "resources": {"requests": requests}}]},
                "status": {"phase": "Pending", "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
            })
        })
        .collect();
    snapshot_file(items)
}

fn zones(plan: &Value) -> Vec<String> {
    plan["nodeClaims"]
        .as_array()
        .expect("nodeClaims")
        .iter()
        .map(|c| c["zone"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn plan_launches_nothing_in_a_shifted_zone_and_a_pod_pinned_there_stays_pending_saying_why() {
    let pools = general_purpose_nodepool();
    let snapshot = pending(4, 1);
    let before = plan_json(&["--nodepools", &pools, "--snapshot", &snapshot]);
    assert!(
        zones(&before).iter().any(|z| z == "us-east-1a"),
        "{before:#}"
    );

    let plan = plan_json(&[
        "--nodepools",
        &pools,
        "--snapshot",
        &snapshot,
        "--zonal-shift",
        "us-east-1a",
    ]);
    let launched = zones(&plan);
    assert!(!launched.is_empty(), "{plan:#}");
    assert!(launched.iter().all(|z| z != "us-east-1a"), "{plan:#}");
    let pending = plan["unschedulable"].as_array().expect("unschedulable");
    assert_eq!(pending.len(), 1, "{plan:#}");
    assert_eq!(pending[0]["pod"], "default/web-0", "{plan:#}");
    let why = pending[0]["reason"].as_str().unwrap();
    assert_eq!(
        why,
        "NodePool \"general-purpose\": zone us-east-1a is under an ARC zonal shift: nothing launches there until it ends"
    );
}

#[test]
fn a_shifted_zone_that_is_not_offered_is_refused_naming_the_flag() {
    let out = nodewright(&[
        "plan",
        "--nodepools",
        &general_purpose_nodepool(),
        "--snapshot",
        &pending(1, 0),
        "--zonal-shift",
        "us-west-2a",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--zonal-shift: \"us-west-2a\" is not one of --zones"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn simulate_launches_nothing_in_a_zone_while_a_zonal_shift_lasts_and_loses_no_pod() {
    // The bundled scenario, with ARC shifting away from us-east-1a from 1m to 41m: both
    // bursts of pods come while it lasts.
    let bundled = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/scenario.yaml"
    ))
    .unwrap();
    let scenario = super::temp_file(
        "zonal-shift.yaml",
        &format!("{bundled}  - at: 1m\n    zonalShift: {{zone: us-east-1a, duration: 40m}}\n"),
    );
    let out = nodewright(&["simulate", scenario.to_str().unwrap(), "--output", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["summary"]["podsLost"], 0, "{}", doc["summary"]);
    let launched: Vec<(String, String)> = doc["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["launched"].as_str().unwrap().to_string(),
                n["zone"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let during = |t: &str| ("00:01:00".."00:41:00").contains(&t);
    assert!(
        launched.iter().any(|(t, _)| during(t)),
        "nothing launched during the shift: {launched:?}"
    );
    assert!(
        launched
            .iter()
            .all(|(t, z)| !during(t) || z != "us-east-1a"),
        "a launch in the shifted zone: {launched:?}"
    );
}
