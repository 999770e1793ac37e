//! When a node is worth disrupting: `consolidationPolicy: Balanced` scores each move
//! (savings against disruption cost, k = 2), pod priority and
//! `controller.kubernetes.io/pod-deletion-cost` enter the disruption cost,
//! `karpenter.sh/do-not-disrupt` takes a duration and blocks from DaemonSet pods too,
//! and a node that just received pods is no consolidation destination.

use serde_json::{Value, json};

use super::{EARLIER, check_contract, commands, decide, node, pod_on, pools, rejected};

/// m5 only, on-demand only: prices are exact steps (each size twice the one below).
const M5_ON_DEMAND: &str = "        - key: karpenter.k8s.aws/instance-family\n          operator: In\n          values: [\"m5\"]\n        - key: karpenter.sh/capacity-type\n          operator: NotIn\n          values: [\"spot\"]\n";

fn disruption(policy: &str, consolidate_after: &str) -> String {
    format!(
        "    consolidationPolicy: {policy}\n    consolidateAfter: {consolidate_after}\n    budgets:\n      - nodes: \"100%\"\n"
    )
}

/// Three m5.xlarge nearly full, each with one 3.8-CPU pod that costs as much to
/// disrupt as four (pod-deletion-cost 3 × 2^27: eviction cost 4, the node's 5), and
/// "busy", an m5.xlarge whose `pods` fit an m5.large: replacing it saves $0.096 of the
/// pool's $0.768.
fn three_full_and(pods: &[(&str, &str)]) -> Vec<Value> {
    let mut items = Vec::new();
    for n in ["full-1", "full-2", "full-3"] {
        items.push(node(n, "m5.xlarge", "on-demand"));
        let mut p = pod_on(&format!("{n}-0"), n, "3800m");
        p["metadata"]["annotations"] =
            json!({"controller.kubernetes.io/pod-deletion-cost": "402653184"});
        items.push(p);
    }
    items.push(node("busy", "m5.xlarge", "on-demand"));
    for (name, cpu) in pods {
        items.push(pod_on(name, "busy", cpu));
    }
    items
}

fn replaced_by_m5_large(d: &Value) -> bool {
    commands(d) == [("single-node".to_string(), vec!["busy".to_string()])]
        && d["commands"][0]["replacements"][0]["instanceType"] == "m5.large"
}

#[test]
fn balanced_replaces_a_node_whose_savings_outweigh_its_disruption_and_shows_the_score() {
    // Two pods: disruption 3 of the pool's 18 (1 per node, 1 per pod), savings 12.5%
    // of its cost: 0.125 / 0.1667 = 0.75 >= 0.5.
    let items = three_full_and(&[("a", "800m"), ("b", "800m")]);
    let d = decide(
        &pools(&disruption("Balanced", "30s"), M5_ON_DEMAND),
        items,
        &[],
    );
    assert!(replaced_by_m5_large(&d), "{d:#}");
    assert_eq!(
        d["commands"][0]["scores"],
        json!([{"nodePool": "default", "score": 0.75, "threshold": 0.5, "k": 2,
                "savingsFraction": 0.125, "disruptionFraction": 0.1667, "approved": true}]),
        "{d:#}"
    );
}

#[test]
fn balanced_keeps_a_node_whose_disruption_outweighs_the_savings_that_underutilized_replaces() {
    // Eight pods: disruption 9 of 24, the same 12.5% savings: 0.125 / 0.375 = 0.33.
    let eight: Vec<(String, &str)> = (0..8).map(|i| (format!("p{i}"), "200m")).collect();
    let eight: Vec<(&str, &str)> = eight.iter().map(|(n, c)| (n.as_str(), *c)).collect();
    let underutilized = decide(
        &pools(&disruption("WhenEmptyOrUnderutilized", "30s"), M5_ON_DEMAND),
        three_full_and(&eight),
        &[],
    );
    assert!(replaced_by_m5_large(&underutilized), "{underutilized:#}");
    assert!(
        underutilized["commands"][0].get("scores").is_none(),
        "no score outside Balanced: {underutilized:#}"
    );

    let d = decide(
        &pools(&disruption("Balanced", "30s"), M5_ON_DEMAND),
        three_full_and(&eight),
        &[],
    );
    assert!(commands(&d).is_empty(), "{d:#}");
    let busy = d["rejected"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["node"] == "busy")
        .unwrap();
    assert_eq!(busy["code"], "Balanced", "{d:#}");
    assert_eq!(
        busy["reason"],
        "consolidation score 0.33 < threshold 0.50 (k: 2, savings 12.5%, disruption 37.5% of NodePool \"default\")"
    );
}

#[test]
fn pod_deletion_cost_makes_an_otherwise_equal_node_not_worth_disrupting_under_balanced() {
    // The same two pods, one of them declaring it is expensive to restart (pod
    // deletion cost 2^30: eviction cost 1 + 8 = 9): disruption 11 of 26, 0.125 / 0.42.
    let mut items = three_full_and(&[("a", "800m"), ("b", "800m")]);
    let costly = items.last_mut().unwrap();
    costly["metadata"]["annotations"] =
        json!({"controller.kubernetes.io/pod-deletion-cost": "1073741824"});
    let d = decide(
        &pools(&disruption("Balanced", "30s"), M5_ON_DEMAND),
        items,
        &[],
    );
    assert!(commands(&d).is_empty(), "{d:#}");
    assert!(
        rejected(&d).contains(&("busy".to_string(), "Balanced".to_string())),
        "{d:#}"
    );
}

#[test]
fn balanced_skips_a_node_that_even_deleted_would_not_be_worth_it() {
    // busy is an m5.large among m5.2xlarge (four times its price): with six pods its
    // best move, deleting it, saves 1/13 of the pool's cost for 7/16 of its
    // disruption: 0.077 / 0.4375 = 0.18.
    let mut items = Vec::new();
    for n in ["big-1", "big-2", "big-3"] {
        items.push(node(n, "m5.2xlarge", "on-demand"));
        items.push(pod_on(&format!("{n}-0"), n, "4"));
        items.push(pod_on(&format!("{n}-1"), n, "3500m"));
    }
    items.push(node("busy", "m5.large", "on-demand"));
    for i in 0..6 {
        items.push(pod_on(&format!("p{i}"), "busy", "100m"));
    }
    let d = decide(
        &pools(&disruption("Balanced", "30s"), M5_ON_DEMAND),
        items,
        &[],
    );
    let busy = d["rejected"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["node"] == "busy")
        .unwrap()
        .clone();
    assert_eq!(busy["code"], "Balanced", "{d:#}");
    assert!(
        busy["reason"]
            .as_str()
            .unwrap()
            .starts_with("even deleting it: consolidation score 0.18 < threshold 0.50"),
        "{busy:#}"
    );
}

#[test]
fn a_high_priority_pod_makes_its_node_the_last_to_consolidate() {
    // Two m5.xlarge alike but for the priority of their one pod, and a budget of one
    // node: the node whose pod matters less goes first (priority 10^8 costs ~4, so its
    // node saves less per disruption). `room` is not managed: it only takes pods.
    let mut room = node("room", "m5.2xlarge", "on-demand");
    room["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove("karpenter.sh/nodepool");
    let mut items = vec![
        node("a", "m5.xlarge", "on-demand"),
        pod_on("a-pod", "a", "500m"),
        node("b", "m5.xlarge", "on-demand"),
        pod_on("b-pod", "b", "500m"),
        room,
        pod_on("room-0", "room", "3"),
        pod_on("room-1", "room", "3"),
    ];
    items[1]["spec"]["priority"] = json!(100_000_000);
    items[1]["spec"]["priorityClassName"] = json!("important");
    let one_at_a_time = "    consolidationPolicy: WhenEmptyOrUnderutilized\n    consolidateAfter: 30s\n    budgets:\n      - nodes: \"1\"\n";
    let d = decide(&pools(one_at_a_time, M5_ON_DEMAND), items, &[]);
    assert_eq!(
        commands(&d),
        [("single-node".to_string(), vec!["b".to_string()])],
        "{d:#}"
    );
}

#[test]
fn the_node_with_the_best_savings_ratio_goes_first_whatever_its_age() {
    // Karpenter v1.15's order (price over disruption): two m5.xlarge alike, "aged"
    // 29 days into its 30-day expireAfter with two pods, "young" two hours old with
    // one; a budget of one node. The young node's one pod costs less to move, so it
    // goes first; an order by lifetime left would have taken the aged one.
    let mut aged = node("aged", "m5.xlarge", "on-demand");
    aged["metadata"]["creationTimestamp"] = json!("2026-10-25T10:00:00Z");
    let items = vec![
        aged,
        pod_on("aged-0", "aged", "1"),
        pod_on("aged-1", "aged", "1"),
        node("young", "m5.xlarge", "on-demand"),
        pod_on("young-0", "young", "1"),
    ];
    let one_at_a_time = "    consolidationPolicy: WhenEmptyOrUnderutilized\n    consolidateAfter: 30s\n    budgets:\n      - nodes: \"1\"\n";
    let d = decide(&pools(one_at_a_time, M5_ON_DEMAND), items, &[]);
    assert_eq!(
        commands(&d),
        [("single-node".to_string(), vec!["young".to_string()])],
        "{d:#}"
    );
}

/// A node in a 10-minute consolidateAfter pool, with one 500m pod.
fn source_and_destination(destination_pod_started: &str) -> Vec<Value> {
    let mut items = vec![
        node("source", "m5.xlarge", "on-demand"),
        pod_on("source-pod", "source", "500m"),
        // Six of its eight CPUs used: room for the source's pod, and not worth
        // consolidating itself.
        node("destination", "m5.2xlarge", "on-demand"),
    ];
    for i in 0..6 {
        items.push(pod_on(&format!("dest-{i}"), "destination", "1"));
    }
    let newest = items.last_mut().unwrap();
    newest["metadata"]["creationTimestamp"] = json!(destination_pod_started);
    newest["status"]["startTime"] = json!(destination_pod_started);
    items
}

#[test]
fn a_node_that_just_received_a_pod_is_no_destination_until_its_consolidate_after_passes() {
    let pools = pools(&disruption("WhenEmptyOrUnderutilized", "10m"), M5_ON_DEMAND);
    // Its last pod arrived 20 minutes ago: the source's pod moves onto it.
    let settled = decide(&pools, source_and_destination("2026-11-23T09:40:00Z"), &[]);
    assert_eq!(
        settled["commands"][0]["moves"],
        json!([{"target": "destination", "pods": ["default/source-pod"]}]),
        "{settled:#}"
    );
    assert_eq!(settled["commands"][0]["replacements"], json!([]));

    // Two minutes ago: it takes nothing until 10:08; the source is replaced instead.
    let d = decide(&pools, source_and_destination("2026-11-23T09:58:00Z"), &[]);
    check_contract(&d);
    let c = &d["commands"][0];
    assert_eq!(c["nodes"], json!(["source"]), "{d:#}");
    assert_eq!(c["moves"], json!([]), "{d:#}");
    assert_eq!(c["replacements"][0]["instanceType"], "m5.large", "{d:#}");
    assert!(
        rejected(&d).contains(&("destination".to_string(), "ConsolidateAfter".to_string())),
        "{d:#}"
    );
}

/// `n` empty-but-for-one-pod m5.xlarge nodes "n-<i>" whose pod has the annotation.
fn annotated(values: &[(&str, &str)]) -> Vec<Value> {
    let mut items = vec![node("room", "m5.2xlarge", "on-demand")];
    for (i, (value, started)) in values.iter().enumerate() {
        let n = format!("n-{i}");
        items.push(node(&n, "m5.xlarge", "on-demand"));
        let mut p = pod_on(&format!("batch-{i}"), &n, "100m");
        p["metadata"]["annotations"] = json!({"karpenter.sh/do-not-disrupt": value});
        p["status"]["startTime"] = json!(started);
        items.push(p);
    }
    items
}

fn code_of(d: &Value, node: &str) -> Option<String> {
    rejected(d)
        .into_iter()
        .find(|(n, _)| n == node)
        .map(|(_, c)| c)
}

#[test]
fn a_do_not_disrupt_duration_protects_a_pod_from_its_start_until_it_passes() {
    let d = decide(
        &pools(&disruption("WhenEmptyOrUnderutilized", "30s"), M5_ON_DEMAND),
        annotated(&[
            // Started 10 minutes ago, 30 minutes of protection: 20 left.
            ("30m", "2026-11-23T09:50:00Z"),
            // Started two hours ago: 1h30m has passed.
            ("1h30m", EARLIER),
            // Not a duration: ignored.
            ("forever", EARLIER),
            ("true", EARLIER),
        ]),
        &[],
    );
    assert_eq!(code_of(&d, "n-0").as_deref(), Some("DoNotDisrupt"), "{d:#}");
    let reason = d["rejected"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["node"] == "n-0")
        .unwrap()["reason"]
        .clone();
    assert_eq!(
        reason,
        "pod default/batch-0 has karpenter.sh/do-not-disrupt for 1800s from its start, until 2026-11-23T10:20:00Z"
    );
    assert_eq!(code_of(&d, "n-3").as_deref(), Some("DoNotDisrupt"), "{d:#}");
    let taken: Vec<String> = commands(&d).into_iter().flat_map(|(_, n)| n).collect();
    assert!(
        taken.contains(&"n-1".to_string()) && taken.contains(&"n-2".to_string()),
        "{d:#}"
    );
}

#[test]
fn a_daemonset_pod_with_do_not_disrupt_keeps_its_otherwise_empty_node() {
    let mut items = vec![
        node("a", "m5.xlarge", "on-demand"),
        node("b", "m5.xlarge", "on-demand"),
    ];
    for n in ["a", "b"] {
        let mut agent = pod_on(&format!("agent-{n}"), n, "100m");
        agent["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1",
            "kind": "DaemonSet", "name": "agent", "uid": "u-agent", "controller": true}]);
        if n == "a" {
            agent["metadata"]["annotations"] = json!({"karpenter.sh/do-not-disrupt": "true"});
        }
        items.push(agent);
    }
    let d = decide(
        &pools(&disruption("WhenEmptyOrUnderutilized", "30s"), ""),
        items,
        &[],
    );
    assert_eq!(
        commands(&d),
        [("emptiness".to_string(), vec!["b".to_string()])],
        "{d:#}"
    );
    assert_eq!(code_of(&d, "a").as_deref(), Some("DoNotDisrupt"), "{d:#}");
    assert!(
        d.to_string()
            .contains("DaemonSet pod default/agent-a has karpenter.sh/do-not-disrupt"),
        "{d:#}"
    );
}
