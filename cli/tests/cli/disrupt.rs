//! `nodewright disrupt`: the dry-run disruption contract, through the binary. Snapshots
//! are built as `kubectl get pods,nodes,daemonsets,poddisruptionbudgets -A -o json`
//! prints them for a cluster Karpenter manages; NodePools as users write them.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::temp_file;

#[path = "disrupt/merges.rs"]
mod merges;
#[path = "disrupt/reservations.rs"]
mod reservations;
#[path = "disrupt/worth.rs"]
mod worth;
#[path = "disrupt/zonal_shift.rs"]
mod zonal_shift;

pub(super) const NOW: &str = "2026-11-23T10:00:00Z";
/// Two hours before NOW: nodes and pods are this old unless a test says otherwise.
pub(super) const EARLIER: &str = "2026-11-23T08:00:00Z";

/// `disruption` is inserted under `spec:` (YAML, 2-space indent, already indented by 4).
fn pools(disruption: &str, extra_requirement: &str) -> String {
    format!(
        r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  template:
    spec:
      expireAfter: 720h
      requirements:
        - key: kubernetes.io/arch
          operator: In
          values: ["amd64"]
        - key: karpenter.sh/capacity-type
          operator: In
          values: ["on-demand", "spot"]
        - key: karpenter.k8s.aws/instance-category
          operator: In
          values: ["c", "m", "r"]
{extra_requirement}      nodeClassRef:
        group: karpenter.k8s.aws
        kind: EC2NodeClass
        name: default
  disruption:
{disruption}
---
{class}"#,
        class = crate::manifests::node_class()
    )
}

const UNDERUTILIZED: &str =
    "    consolidationPolicy: WhenEmptyOrUnderutilized\n    consolidateAfter: 30s\n";
/// As UNDERUTILIZED, with a budget that lets every node go at once.
const ALL_AT_ONCE: &str = "    consolidationPolicy: WhenEmptyOrUnderutilized\n    consolidateAfter: 30s\n    budgets:\n      - nodes: \"100%\"\n";

/// Runs `disrupt` and returns (exit code, stdout, stderr).
fn run(pools: &str, items: Vec<Value>, extra: &[&str]) -> (i32, String, String) {
    let pools = temp_file("pools.yaml", pools).display().to_string();
    let snapshot = super::snapshot_file(items);
    let mut args = vec!["disrupt", "--nodepools", &pools, "--snapshot", &snapshot];
    if !extra.contains(&"--now") {
        args.extend(["--now", NOW]);
    }
    args.extend_from_slice(extra);
    let out = super::nodewright(&args);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn decide(pools: &str, items: Vec<Value>, extra: &[&str]) -> Value {
    let mut args = vec!["--output", "json"];
    args.extend_from_slice(extra);
    let (code, stdout, stderr) = run(pools, items, &args);
    assert_eq!(code, 0, "stderr: {stderr}");
    let decision: Value = serde_json::from_str(&stdout).unwrap();
    check_contract(&decision);
    decision
}

/// What every decision must hold: each command's moves and replacements hold distinct
/// pods; no node is in two commands or both in a command and rejected.
fn check_contract(d: &Value) {
    let mut seen = BTreeSet::new();
    let mut moved_ever = BTreeSet::new();
    let mut targets = BTreeSet::new();
    for c in d["commands"].as_array().unwrap() {
        for n in c["nodes"].as_array().unwrap() {
            assert!(
                !targets.contains(n.as_str().unwrap()),
                "{n} received pods earlier, then is disrupted: {d:#}"
            );
        }
        for m in c["moves"].as_array().unwrap() {
            targets.insert(m["target"].as_str().unwrap().to_string());
        }
        for n in c["nodes"].as_array().unwrap() {
            assert!(
                seen.insert(n.as_str().unwrap().to_string()),
                "{n} twice: {d:#}"
            );
        }
        let mut pods = BTreeSet::new();
        for m in c["moves"].as_array().unwrap() {
            for p in m["pods"].as_array().unwrap() {
                assert!(pods.insert(p.to_string()), "{p} moves twice");
                assert!(
                    moved_ever.insert(p.to_string()),
                    "{p} moves in two commands"
                );
            }
        }
        for r in c["replacements"].as_array().unwrap() {
            for p in r["pods"].as_array().unwrap() {
                assert!(pods.insert(p.to_string()), "{p} moves twice");
            }
        }
    }
    for r in d["rejected"].as_array().unwrap() {
        assert!(
            seen.insert(r["node"].as_str().unwrap().to_string()),
            "{r} twice"
        );
    }
}

pub(super) fn node(name: &str, instance_type: &str, capacity_type: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "creationTimestamp": EARLIER, "labels": {
            "kubernetes.io/hostname": name,
            "topology.kubernetes.io/zone": "us-east-1a",
            "node.kubernetes.io/instance-type": instance_type,
            "kubernetes.io/arch": "amd64",
            "karpenter.sh/capacity-type": capacity_type,
            "karpenter.sh/nodepool": "default",
            "karpenter.sh/initialized": "true",
            "karpenter.k8s.aws/instance-category": &instance_type[..1],
            "karpenter.k8s.aws/instance-family": instance_type.split('.').next().unwrap()}},
        "spec": {"providerID": format!("aws:///us-east-1a/i-{name}")},
        "status": {
            "allocatable": allocatable(instance_type),
            "capacity": allocatable(instance_type),
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": EARLIER}]}
    })
}

fn allocatable(instance_type: &str) -> Value {
    let (cpu, memory) = match instance_type {
        "m5.large" => ("1930m", "6903Mi"),
        "m5.xlarge" => ("3920m", "14162Mi"),
        "m5.2xlarge" => ("7910m", "29317Mi"),
        "m5.4xlarge" => ("15890m", "57632Mi"),
        other => panic!("no allocatable for {other} in this test"),
    };
    json!({"cpu": cpu, "memory": memory, "pods": "58"})
}

pub(super) fn pod_on(name: &str, node: &str, cpu: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": name},
            "creationTimestamp": EARLIER},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "pause",
            "resources": {"requests": {"cpu": cpu, "memory": "512Mi"}}}]},
        "status": {"phase": "Running", "startTime": EARLIER}
    })
}

fn commands(d: &Value) -> Vec<(String, Vec<String>)> {
    d["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["method"].as_str().unwrap().to_string(),
                c["nodes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|n| n.as_str().unwrap().to_string())
                    .collect(),
            )
        })
        .collect()
}

fn rejected(d: &Value) -> Vec<(String, String)> {
    d["rejected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["node"].as_str().unwrap().to_string(),
                r["code"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Three m5.xlarge at about 12% each, and one holding a pod with do-not-disrupt.
fn fragmented() -> Vec<Value> {
    let mut items = Vec::new();
    for i in 1..=3 {
        let n = format!("node-{i}");
        items.push(node(&n, "m5.xlarge", "on-demand"));
        items.push(pod_on(&format!("web-{i}"), &n, "500m"));
    }
    items
}

#[test]
fn a_fragmented_cluster_consolidates_onto_fewer_nodes_and_says_what_it_saves() {
    // Three m5.xlarge at about 12% each: one cheap node takes all three pods (M -> 1),
    // cheaper than keeping any of the three.
    let d = decide(&pools(ALL_AT_ONCE, ""), fragmented(), &[]);
    let removed: usize = commands(&d).iter().map(|(_, n)| n.len()).sum();
    assert_eq!(removed, 3, "{d:#}");
    assert!(rejected(&d).is_empty());
    let before = d["pricePerHour"]["before"].as_f64().unwrap();
    let after = d["pricePerHour"]["after"].as_f64().unwrap();
    assert!((before - 3.0 * 0.192).abs() < 1e-6, "{before}");
    assert!(after < 0.192, "{d:#}");
    let mut moved = BTreeSet::new();
    for c in d["commands"].as_array().unwrap() {
        assert_eq!(c["reason"], "Underutilized");
        let saved =
            c["pricePerHourBefore"].as_f64().unwrap() - c["pricePerHourAfter"].as_f64().unwrap();
        assert!((c["savingsPerHour"].as_f64().unwrap() - saved).abs() < 1e-6);
        for group in c["moves"]
            .as_array()
            .unwrap()
            .iter()
            .chain(c["replacements"].as_array().unwrap())
        {
            moved.extend(
                group["pods"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| p.to_string()),
            );
        }
    }
    assert_eq!(moved.len(), 3, "every pod has a place: {d:#}");
}

#[test]
fn the_table_names_each_command_and_every_node_that_stays() {
    let (code, stdout, stderr) = run(&pools(ALL_AT_ONCE, ""), fragmented(), &[]);
    assert!(stdout.contains("new default"), "{stdout}");
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("Underutilized"), "{stdout}");
    assert!(stdout.contains("nodes: node-1, node-2, node-3"), "{stdout}");
    assert!(stdout.contains("price: $0.5760/hour before"), "{stdout}");
}

#[test]
fn the_default_budget_of_ten_percent_lets_one_of_three_nodes_go() {
    let d = decide(&pools(UNDERUTILIZED, ""), fragmented(), &[]);
    let removed: usize = commands(&d).iter().map(|(_, n)| n.len()).sum();
    assert_eq!(removed, 1, "{d:#}");
    let reasons = d["rejected"].to_string();
    assert!(reasons.contains("budget nodes 10%"), "{reasons}");
    let (_, table, _) = run(&pools(UNDERUTILIZED, ""), fragmented(), &[]);
    assert!(
        table.contains("staying (2)") && table.contains("DisruptionBudget"),
        "{table}"
    );
}

#[test]
fn an_empty_node_goes_by_emptiness_with_nothing_to_move() {
    let mut items = fragmented();
    items.push(node("empty", "m5.large", "on-demand"));
    let d = decide(&pools(UNDERUTILIZED, ""), items, &[]);
    let c = &d["commands"][0];
    assert_eq!(c["method"], "emptiness", "{d:#}");
    assert_eq!(c["reason"], "Empty");
    assert_eq!(c["nodes"], json!(["empty"]));
    assert_eq!(c["moves"], json!([]));
}

#[test]
fn do_not_disrupt_pods_and_exhausted_pdbs_keep_their_nodes_with_their_codes() {
    let mut items = fragmented();
    items[1]["metadata"]["annotations"] = json!({"karpenter.sh/do-not-disrupt": "true"});
    items.push(json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "web-2", "namespace": "default"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web-2"}}},
        "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1,
            "expectedPods": 1}
    }));
    let d = decide(&pools(UNDERUTILIZED, ""), items, &[]);
    let r = rejected(&d);
    assert!(
        r.contains(&("node-1".into(), "DoNotDisrupt".into())),
        "{d:#}"
    );
    assert!(
        r.contains(&("node-2".into(), "PodDisruptionBudget".into())),
        "{d:#}"
    );
    let reasons = d["rejected"].to_string();
    assert!(
        reasons.contains("pod default/web-1 has karpenter.sh/do-not-disrupt"),
        "{reasons}"
    );
    assert!(
        reasons.contains("PodDisruptionBudget default/web-2"),
        "{reasons}"
    );
}

#[test]
fn a_budget_of_zero_stops_consolidation_inside_its_window_only() {
    // Every day 09:00 UTC for two hours: NOW (10:00) is inside, 12:00 is not.
    let budget = format!(
        "{UNDERUTILIZED}    budgets:\n      - nodes: \"0\"\n        schedule: \"0 9 * * *\"\n        duration: 2h\n"
    );
    let d = decide(&pools(&budget, ""), fragmented(), &[]);
    assert!(commands(&d).is_empty(), "{d:#}");
    let codes: BTreeSet<String> = rejected(&d).into_iter().map(|(_, c)| c).collect();
    assert_eq!(codes, BTreeSet::from(["DisruptionBudget".to_string()]));
    let d = decide(
        &pools(&budget, ""),
        fragmented(),
        &["--now", "2026-11-23T12:00:00Z"],
    );
    assert!(!commands(&d).is_empty(), "{d:#}");
}

#[test]
fn a_percentage_budget_rounds_up_and_limits_how_many_nodes_go_at_once() {
    // 10% of 4 nodes rounds up to 1.
    let budget = format!("{UNDERUTILIZED}    budgets:\n      - nodes: \"10%\"\n");
    let mut items = fragmented();
    items.push(node("node-4", "m5.xlarge", "on-demand"));
    items.push(pod_on("web-4", "node-4", "500m"));
    let d = decide(&pools(&budget, ""), items, &[]);
    let removed: usize = commands(&d).iter().map(|(_, n)| n.len()).sum();
    assert_eq!(removed, 1, "{d:#}");
    assert!(
        rejected(&d).iter().any(|(_, c)| c == "DisruptionBudget"),
        "{d:#}"
    );
}

#[test]
fn an_expired_node_is_replaced_despite_a_budget_of_zero_and_blockers() {
    let budget = format!("{UNDERUTILIZED}    budgets:\n      - nodes: \"0\"\n");
    let mut items = vec![
        node("old", "m5.xlarge", "on-demand"),
        pod_on("web", "old", "3"),
    ];
    items[0]["metadata"]["creationTimestamp"] = json!("2026-10-01T00:00:00Z");
    items[1]["metadata"]["annotations"] = json!({"karpenter.sh/do-not-disrupt": "true"});
    let d = decide(&pools(&budget, ""), items, &[]);
    let c = &d["commands"][0];
    assert_eq!(c["method"], "expiration", "{d:#}");
    assert_eq!(c["reason"], "Expired");
    assert_eq!(c["replacements"][0]["pods"], json!(["default/web"]));
}

#[test]
fn an_expired_spot_node_replaced_on_demand_says_what_it_costs_more_not_a_negative_saving() {
    // The pool now takes on-demand only: the expired spot node's replacement costs more.
    let on_demand = "        - key: karpenter.sh/capacity-type\n          operator: In\n          values: [\"on-demand\"]\n";
    let mut items = vec![node("old", "m5.xlarge", "spot"), pod_on("web", "old", "3")];
    items[0]["metadata"]["creationTimestamp"] = json!("2026-10-01T00:00:00Z");
    let d = decide(&pools(UNDERUTILIZED, on_demand), items.clone(), &[]);
    let c = &d["commands"][0];
    assert_eq!(c["method"], "expiration", "{d:#}");
    let more = -c["savingsPerHour"].as_f64().unwrap();
    assert!(more > 0.0, "{d:#}");
    let (code, table, stderr) = run(&pools(UNDERUTILIZED, on_demand), items, &[]);
    assert_eq!(code, 0, "{stderr}");
    let first = table.lines().next().unwrap();
    assert!(
        first.ends_with(&format!("costs ${more:.4}/h more")),
        "{table}"
    );
    assert!(!table.contains("$-"), "{table}");
}

#[test]
fn a_node_whose_type_the_node_pool_no_longer_allows_is_drifted_and_replaced() {
    // The pool now takes c and r only: the m5 node drifted.
    let requirement = "        - key: karpenter.k8s.aws/instance-family\n          operator: NotIn\n          values: [\"m5\"]\n";
    let items = vec![
        node("m5-node", "m5.xlarge", "on-demand"),
        pod_on("web", "m5-node", "3"),
    ];
    let d = decide(&pools(UNDERUTILIZED, requirement), items.clone(), &[]);
    let c = &d["commands"][0];
    assert_eq!(c["method"], "drift", "{d:#}");
    assert_eq!(c["reason"], "Drifted");
    // Which drift, not only that it drifted: here the pool's instance-family requirement.
    assert_eq!(c["drifted"][0]["node"], "m5-node", "{d:#}");
    let why = c["drifted"][0]["reason"].as_str().unwrap_or_default();
    assert!(why.contains("karpenter.k8s.aws/instance-family"), "{d:#}");
    let (code, table, stderr) = run(&pools(UNDERUTILIZED, requirement), items, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        table.contains(&format!("   drifted: m5-node: {why}\n")),
        "{table}"
    );
    let replacement = &c["replacements"][0];
    assert!(
        !replacement["instanceType"]
            .as_str()
            .unwrap()
            .starts_with("m5."),
        "{d:#}"
    );
    assert_eq!(replacement["pods"], json!(["default/web"]));
}

#[test]
fn consolidate_after_and_when_empty_are_named_when_they_hold_a_node() {
    let mut items = fragmented();
    items[1]["metadata"]["creationTimestamp"] = json!("2026-11-23T09:59:50Z");
    let d = decide(
        &pools(
            "    consolidationPolicy: WhenEmptyOrUnderutilized\n    consolidateAfter: 1m\n",
            "",
        ),
        items.clone(),
        &[],
    );
    assert!(
        rejected(&d).contains(&("node-1".into(), "ConsolidateAfter".into())),
        "{d:#}"
    );
    let d = decide(
        &pools(
            "    consolidationPolicy: WhenEmpty\n    consolidateAfter: 30s\n",
            "",
        ),
        items,
        &[],
    );
    let codes: BTreeSet<String> = rejected(&d).into_iter().map(|(_, c)| c).collect();
    assert!(codes.contains("ConsolidationPolicy"), "{d:#}");
    assert!(commands(&d).is_empty());
}

#[test]
fn a_big_node_is_replaced_by_two_smaller_ones_when_that_is_cheaper() {
    // Two 3-CPU pods that may not share a node, on an m5.4xlarge ($0.768/h): Karpenter
    // can replace a node by one node only (kubernetes-sigs/karpenter#1442); two
    // m5.xlarge cost $0.384/h.
    let mut items = vec![node("big", "m5.4xlarge", "on-demand")];
    for name in ["a", "b"] {
        let mut p = pod_on(name, "big", "3");
        p["metadata"]["labels"]["app"] = json!("pair");
        p["spec"]["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "pair"}}, "topologyKey": "kubernetes.io/hostname"}]}});
        items.push(p);
    }
    // Two bound pods on one node with hostname anti-affinity is what a snapshot can
    // hold after a label change; the planner must still place them apart.
    let d = decide(&pools(UNDERUTILIZED, ""), items, &[]);
    let c = &d["commands"][0];
    assert_eq!(c["method"], "single-node", "{d:#}");
    assert_eq!(c["replacements"].as_array().unwrap().len(), 2, "{d:#}");
    assert!(c["pricePerHourAfter"].as_f64().unwrap() < 0.768);
}

#[test]
fn a_spot_node_is_only_replaced_by_spot_with_the_setting_and_fifteen_cheaper_types() {
    let items = vec![
        node("spot-node", "m5.4xlarge", "spot"),
        pod_on("web", "spot-node", "3"),
    ];
    let d = decide(&pools(UNDERUTILIZED, ""), items.clone(), &[]);
    assert_eq!(
        rejected(&d),
        [("spot-node".to_string(), "SpotToSpot".to_string())],
        "{d:#}"
    );
    let d = decide(&pools(UNDERUTILIZED, ""), items, &["--spot-to-spot"]);
    let c = &d["commands"][0];
    assert_eq!(c["method"], "single-node", "{d:#}");
    let r = &c["replacements"][0];
    assert_eq!(r["capacityType"], "spot");
    assert_eq!(r["instanceTypeOptions"].as_array().unwrap().len(), 15);
}

#[test]
fn a_spot_node_kept_for_spot_to_spot_names_the_flag_in_the_table_only() {
    let items = vec![
        node("spot-node", "m5.4xlarge", "spot"),
        pod_on("web", "spot-node", "3"),
    ];
    // The JSON reason is core's, the one the disruption function logs: it names no
    // CLI flag (the stack has a `SpotToSpot` parameter instead).
    let d = decide(&pools(UNDERUTILIZED, ""), items.clone(), &[]);
    let reason = d["rejected"][0]["reason"].as_str().unwrap();
    assert!(!reason.contains("--"), "{reason}");
    assert!(
        reason.contains("spot-to-spot consolidation is off"),
        "{reason}"
    );
    let (code, table, stderr) = run(&pools(UNDERUTILIZED, ""), items, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        table
            .lines()
            .any(|l| l.contains("SpotToSpot:") && l.ends_with("(--spot-to-spot turns it on)")),
        "{table}"
    );
}

#[test]
fn yaml_and_wide_output_show_the_same_decision_and_prices_never_read_minus_zero() {
    let items = vec![
        node("big", "m5.4xlarge", "on-demand"),
        pod_on("web", "big", "1"),
    ];
    let json = decide(&pools(UNDERUTILIZED, ""), items.clone(), &[]);
    let (code, yaml, stderr) = run(&pools(UNDERUTILIZED, ""), items.clone(), &["-o", "yaml"]);
    assert_eq!(code, 0, "{stderr}");
    let from_yaml: Value = serde_yaml_ng::from_str(&yaml).unwrap();
    assert_eq!(from_yaml, json);
    let (code, wide, stderr) = run(&pools(UNDERUTILIZED, ""), items.clone(), &["-o", "wide"]);
    assert_eq!(code, 0, "{stderr}");
    let (_, table, _) = run(&pools(UNDERUTILIZED, ""), items, &[]);
    assert!(wide.contains("options: "), "{wide}");
    assert!(wide.contains("default/web"), "{wide}");
    for text in [&wide, &table, &yaml] {
        assert!(!text.contains("-0.0"), "{text}");
    }
}

#[test]
fn a_node_without_an_instance_type_label_is_an_error_naming_the_node_and_field() {
    let mut items = fragmented();
    items[0]["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove("node.kubernetes.io/instance-type");
    let (code, _, stderr) = run(&pools(UNDERUTILIZED, ""), items, &[]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr
            .contains("node node-1: metadata.labels[node.kubernetes.io/instance-type] is missing"),
        "{stderr}"
    );
}

#[test]
fn a_node_of_a_type_the_catalog_lacks_is_an_error_naming_the_type() {
    let mut items = fragmented();
    items[0]["metadata"]["labels"]["node.kubernetes.io/instance-type"] = json!("m99.huge");
    let (code, _, stderr) = run(&pools(UNDERUTILIZED, ""), items, &[]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("instance type \"m99.huge\" is not in the catalog"),
        "{stderr}"
    );
}

#[test]
fn a_malformed_now_is_refused_naming_the_flag() {
    let (code, _, stderr) = run(
        &pools(UNDERUTILIZED, ""),
        fragmented(),
        &["--now", "yesterday"],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("--now: \"yesterday\" is not an RFC 3339 time"),
        "{stderr}"
    );
}

#[test]
fn a_budget_schedule_that_never_fires_never_limits() {
    // February 30th never comes: the budget is never active, so it never limits.
    let budget = format!(
        "{UNDERUTILIZED}    budgets:\n      - nodes: \"0\"\n        schedule: \"0 0 30 2 *\"\n        duration: 1h\n"
    );
    let (code, stdout, stderr) = run(&pools(&budget, ""), fragmented(), &["--output", "json"]);
    match code {
        0 => {
            let d: Value = serde_json::from_str(&stdout).unwrap();
            assert!(!commands(&d).is_empty(), "{d:#}");
        }
        1 => assert!(stderr.contains("schedule"), "{stderr}"),
        other => panic!("exit {other}: {stderr}"),
    }
}

#[test]
fn nodes_of_other_node_pools_and_unmanaged_nodes_are_never_candidates() {
    let mut items = fragmented();
    let mut foreign = node("foreign", "m5.xlarge", "on-demand");
    foreign["metadata"]["labels"]["karpenter.sh/nodepool"] = json!("someone-else");
    items.push(foreign);
    let d = decide(&pools(UNDERUTILIZED, ""), items, &[]);
    // Never disrupted nor reported on (a destination it may be: kube-scheduler binds
    // pods to any node that takes them).
    assert!(
        commands(&d)
            .iter()
            .all(|(_, nodes)| !nodes.iter().any(|n| n == "foreign")),
        "{d:#}"
    );
    assert!(
        d["rejected"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["node"] != "foreign"),
        "{d:#}"
    );
}

#[test]
fn a_node_whose_node_pool_hash_nodewright_wrote_differs_is_drifted_and_karpenters_is_not_compared()
{
    let mut items = vec![
        node("hashed", "m5.xlarge", "on-demand"),
        pod_on("web", "hashed", "3"),
    ];
    items[0]["metadata"]["annotations"] = json!({
        "karpenter.sh/nodepool-hash": "0",
        "karpenter.sh/nodepool-hash-version": "nodewright-v1"});
    let d = decide(&pools(UNDERUTILIZED, ""), items.clone(), &[]);
    assert_eq!(d["commands"][0]["method"], "drift", "{d:#}");
    let drifted = &d["commands"][0]["drifted"][0];
    assert_eq!(drifted["node"], "hashed", "{d:#}");
    assert!(
        drifted["reason"]
            .as_str()
            .unwrap_or_default()
            .starts_with("NodePool \"default\" changed since the node was launched"),
        "{d:#}"
    );
    items[0]["metadata"]["annotations"]["karpenter.sh/nodepool-hash-version"] = json!("v3");
    let d = decide(&pools(UNDERUTILIZED, ""), items, &[]);
    assert!(
        d["commands"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["method"] != "drift"),
        "{d:#}"
    );
}

#[test]
fn timings_go_to_stderr_and_leave_the_decision_as_it_is() {
    let pools = pools(ALL_AT_ONCE, "");
    let (code, plain, _) = run(&pools, fragmented(), &["--output", "json"]);
    assert_eq!(code, 0);
    let (code, timed, stderr) = run(&pools, fragmented(), &["--output", "json", "--timings"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(timed, plain, "--timings changes nothing on stdout");
    // One line per step, in the order they run (the figures are the machine's).
    let steps: Vec<&str> = stderr
        .lines()
        .skip(1)
        .filter_map(|l| l.split("  ").next())
        .collect();
    assert_eq!(
        steps,
        [
            "read snapshot and manifests",
            "candidates",
            "prepare",
            "expiration",
            "emptiness",
            "drift",
            "multi-node",
            "single-node",
            "rest of the decision",
            "write output",
            "total",
        ],
        "{stderr}"
    );
}

#[test]
fn spot_to_spot_launches_with_as_many_cheaper_types_as_the_pools_min_values_need() {
    let items = vec![
        node("spot-node", "m5.4xlarge", "spot"),
        pod_on("web", "spot-node", "3"),
    ];
    let families = |d: &Value| -> (usize, usize) {
        let options = d["commands"][0]["replacements"][0]["instanceTypeOptions"]
            .as_array()
            .unwrap_or_else(|| panic!("a replacement: {d:#}"));
        let distinct: BTreeSet<&str> = options
            .iter()
            .filter_map(|o| o.as_str()?.split('.').next())
            .collect();
        (options.len(), distinct.len())
    };
    // minValues 20 on the family: the 15 cheapest do not cover 20 families, so the
    // replacement keeps as many of the cheapest as it takes (Karpenter caps at
    // max(15, what minValues needs)).
    let family = |min: u32| {
        format!(
            "        - key: karpenter.k8s.aws/instance-family\n          operator: Exists\n          minValues: {min}\n"
        )
    };
    let d = decide(
        &pools(UNDERUTILIZED, &family(20)),
        items,
        &["--spot-to-spot"],
    );
    let (options, distinct) = families(&d);
    assert!(
        options > 15 && distinct >= 20,
        "{options} types, {distinct} families: {d:#}"
    );
    // An m5.xlarge has 12 cheaper spot types of 12 families: minValues 13 cannot be
    // kept by them, and that is why the node stays (checked before the count of 15).
    let small = vec![
        node("spot-node", "m5.xlarge", "spot"),
        pod_on("web", "spot-node", "3"),
    ];
    let d = decide(
        &pools(UNDERUTILIZED, &family(13)),
        small,
        &["--spot-to-spot"],
    );
    assert!(commands(&d).is_empty(), "{d:#}");
    let why = &d["rejected"][0];
    assert_eq!(why["code"], "NotCheaper", "{d:#}");
    assert!(
        why["reason"]
            .as_str()
            .is_some_and(|r| r.ends_with("below the NodePool's minValues 13")),
        "{d:#}"
    );
}
