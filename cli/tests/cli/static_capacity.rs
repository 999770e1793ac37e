//! Static NodePools (`spec.replicas`) through `nodewright simulate`: the example
//! scenario keeps its replicas through a spot interruption and `kubectl scale`, and
//! `scaleNodePool` events are checked as scenarios are.

use std::process::{Command, Output};

use serde_json::Value;

fn nodewright(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nodewright"))
        .args(args)
        .output()
        .expect("nodewright runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Seconds from the start of a timeline time ("00:20:05").
fn seconds(t: &Value) -> u64 {
    t.as_str()
        .expect("a time")
        .split(':')
        .map(|p| p.parse::<u64>().expect("a number"))
        .fold(0, |total, part| total * 60 + part)
}

/// The node count of the last timeline row at or before `at` seconds.
pub(super) fn nodes_at(timeline: &[Value], at: u64) -> u64 {
    timeline
        .iter()
        .take_while(|row| seconds(&row["t"]) <= at)
        .last()
        .map(|row| row["nodes"].as_u64().expect("a count"))
        .unwrap_or(0)
}

#[test]
fn replicas_three_comes_up_without_pods_survives_an_interruption_and_scales_to_five_and_back_to_two()
 {
    let scenario = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/static-capacity.yaml");
    let out = nodewright(&["simulate", scenario, "--output", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("simulate prints JSON");
    let timeline = doc["timeline"].as_array().expect("a timeline");

    // Three nodes before any pod exists (the deployment starts at 5m).
    assert_eq!(nodes_at(timeline, 4 * 60), 3);
    // The interruption at 10m is replaced: three again well before the scale.
    assert_eq!(nodes_at(timeline, 19 * 60), 3);
    // Scaled to 5 at 20m, to 2 at 35m.
    assert_eq!(nodes_at(timeline, 34 * 60), 5);
    let summary = &doc["summary"];
    assert_eq!(summary["nodesAtEnd"], 2, "{summary}");
    assert_eq!(summary["peakNodes"], 5);
    assert_eq!(summary["interruptions"], 1);
    assert_eq!(summary["podsLost"], 0);
    assert_eq!(
        summary["pdbViolations"], 0,
        "the scale-down drains through the budget"
    );
    assert_eq!(summary["podsPendingAtEnd"], 0);
    // Consolidation never takes a static pool's nodes, empty as most of them are.
    assert_eq!(summary["consolidation"]["nodesRemoved"], 0);
    let causes = |key: &str| -> Vec<String> {
        doc[key]
            .as_array()
            .unwrap_or_else(|| panic!("{key}: drains"))
            .iter()
            .map(|d| d["cause"].as_str().expect("a cause").to_string())
            .collect()
    };
    assert_eq!(
        causes("disruptions"),
        ["Overprovisioned", "Overprovisioned", "Overprovisioned"],
        "the scale from 5 to 2 takes 3 nodes away"
    );
    assert_eq!(causes("interruptions"), ["SpotInterrupted"]);

    let text = nodewright(&["simulate", scenario]);
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(
        stdout.contains("kubectl scale nodepool fixed --replicas=5 (was 3)"),
        "{stdout}"
    );
    assert!(stdout.contains("to keep its replicas"), "{stdout}");
    assert!(
        stdout.contains("away: NodePool fixed is above its replicas"),
        "{stdout}"
    );
}

#[test]
fn scaling_a_missing_or_dynamic_nodepool_is_refused_with_the_field_path() {
    let dir = std::env::temp_dir().join(format!("nodewright-static-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let base = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/static-capacity.yaml"
    ))
    .expect("the example");
    for (pool, replicas_line, want) in [
        (
            "ghost",
            "      replicas: 3\n",
            "is not in the scenario's manifests",
        ),
        (
            "fixed",
            "",
            "has no spec.replicas: only a static NodePool scales",
        ),
    ] {
        let text = base
            .replace("      replicas: 3\n", replicas_line)
            .replace("limits: {nodes: 6}", "limits: {}")
            .replace(
                "{nodepool: fixed, replicas: 5}",
                &format!("{{nodepool: {pool}, replicas: 5}}"),
            );
        let path = dir.join(format!("{pool}.yaml"));
        std::fs::write(&path, text).expect("written");
        let out = nodewright(&["simulate", path.to_str().expect("utf-8")]);
        assert!(!out.status.success());
        let err = stderr(&out);
        assert!(err.contains("events[1].scaleNodePool.nodepool"), "{err}");
        assert!(err.contains(want), "{err}");
    }
}
