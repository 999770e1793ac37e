//! The `nodewright` binary, driven as a user drives it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn data(name: &str) -> String {
    root().join("tests/data").join(name).display().to_string()
}

fn example(name: &str) -> String {
    root().join("examples").join(name).display().to_string()
}

fn fixture_nodepools() -> Vec<PathBuf> {
    let dir = root().join("../shared/core/tests/fixtures/nodepools");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("fixture dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 5, "the five Karpenter example NodePools");
    files
}

fn nodewright(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nodewright"))
        .args(args)
        .output()
        .expect("run nodewright")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn plan_json(args: &[&str]) -> Value {
    let mut all = vec!["plan", "--output", "json"];
    all.extend_from_slice(args);
    let out = nodewright(&all);
    assert!(out.status.success(), "plan failed: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("plan prints JSON")
}

/// A one-line error, exit 2, no panic or backtrace.
fn assert_unusable(out: &Output, mentions: &[&str]) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(
        !err.contains("panicked") && !err.contains("backtrace"),
        "{err}"
    );
    for m in mentions {
        assert!(err.contains(m), "{err:?} should mention {m:?}");
    }
}

#[test]
fn the_example_plan_places_every_pending_pod_exactly_once_in_the_documented_shape() {
    let plan = plan_json(&[
        "--nodepools",
        &example("nodepools.yaml"),
        "--snapshot",
        &example("snapshot.json"),
    ]);
    let keys: Vec<&str> = plan
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    for k in [
        "nodeClaims",
        "unschedulable",
        "totalPricePerHour",
        "existingNodes",
        "inFlight",
    ] {
        assert!(keys.contains(&k), "{k} in {keys:?}");
    }
    let claims = plan["nodeClaims"].as_array().unwrap();
    assert!(!claims.is_empty());
    let mut total = 0.0;
    let mut pods = Vec::new();
    for c in claims {
        let obj = c.as_object().unwrap();
        let mut fields: Vec<&str> = obj.keys().map(String::as_str).collect();
        fields.sort();
        assert_eq!(
            fields,
            [
                "capacityType",
                "compatibleInstanceTypes",
                "instanceType",
                "instanceTypeOptions",
                "nodePool",
                "pods",
                "pricePerHour",
                "zone"
            ]
        );
        assert_eq!(c["instanceTypeOptions"][0], c["instanceType"]);
        let listed = c["instanceTypeOptions"].as_array().unwrap().len() as u64;
        assert!(listed <= 60, "{listed} options");
        assert!(c["compatibleInstanceTypes"].as_u64().unwrap() >= listed);
        total += c["pricePerHour"].as_f64().unwrap();
        pods.extend(
            c["pods"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p.as_str().unwrap().to_string()),
        );
    }
    assert!((plan["totalPricePerHour"].as_f64().unwrap() - total).abs() < 1e-9);
    for a in plan["existingNodes"].as_array().unwrap() {
        pods.extend(
            a["pods"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p.as_str().unwrap().to_string()),
        );
    }
    for u in plan["unschedulable"].as_array().unwrap() {
        pods.push(u["pod"].as_str().unwrap().to_string());
    }
    let mut unique = pods.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), pods.len(), "no pod placed twice");
    assert_eq!(pods.len(), 25, "the example has 25 pending pods");
    // The GPU pod lands on the tainted GPU pool, the arm64 pods on arm64.
    let pool_of = |needle: &str| {
        claims
            .iter()
            .find(|c| {
                c["pods"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|p| p.as_str().unwrap().contains(needle))
            })
            .map(|c| c["nodePool"].as_str().unwrap().to_string())
    };
    assert_eq!(pool_of("gpu-inference").as_deref(), Some("gpu"));
    assert_eq!(pool_of("arm64-app").as_deref(), Some("arm64"));
}

#[test]
fn the_table_shows_one_row_per_claim_and_monthly_totals() {
    let out = nodewright(&[
        "plan",
        "--nodepools",
        &example("nodepools.yaml"),
        "--snapshot",
        &example("snapshot.json"),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("NODEPOOL"), "{text}");
    assert!(text.contains("/month (730 h)"), "{text}");
    let json = plan_json(&[
        "--nodepools",
        &example("nodepools.yaml"),
        "--snapshot",
        &example("snapshot.json"),
    ]);
    let rows = text.lines().skip(1).take_while(|l| !l.is_empty()).count();
    assert_eq!(rows, json["nodeClaims"].as_array().unwrap().len());
}

#[test]
fn a_snapshot_with_nothing_pending_costs_zero_not_minus_zero() {
    let args = [
        "--nodepools",
        &example("nodepools.yaml"),
        "--snapshot",
        &data("nothing-pending.json"),
    ];
    let out = nodewright(&[&["plan"], &args[..]].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("Total: $0.0000/hour, $0.00/month"), "{text}");
    assert!(!text.contains("-0.0"), "{text}");
    let json = plan_json(&args);
    assert_eq!(json["nodeClaims"], serde_json::json!([]));
    assert_eq!(json["totalPricePerHour"].to_string(), "0.0", "{json}");
}

#[test]
fn every_karpenter_example_nodepool_validates_and_plans_unchanged() {
    for file in fixture_nodepools() {
        let f = file.display().to_string();
        let out = nodewright(&["validate", &f]);
        assert!(out.status.success(), "{f}: {}", stderr(&out));
        let plan = plan_json(&["--nodepools", &f, "--snapshot", &example("snapshot.json")]);
        assert!(
            !plan["nodeClaims"].as_array().unwrap().is_empty(),
            "{f} plans claims"
        );
    }
}

#[test]
fn validate_prints_one_line_per_problem_and_exits_one() {
    let out = nodewright(&["validate", &data("broken.yaml")]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    let lines: Vec<&str> = err.lines().collect();
    assert!(lines.contains(
        &"NodePool \"broken\": spec.template.spec.requirements[0].operator: unknown operator \"GreaterThan\" (expected one of In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte, Lte)"
    ), "{err}");
    for needle in [
        "requirements[1]",
        "expireAfter",
        "budgets[0]",
        "nodeClassRef",
    ] {
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("NodePool \"broken\"") && l.contains(needle)),
            "{needle}: {err}"
        );
    }
    assert!(!err.contains("panicked"));
}

#[test]
fn unusable_inputs_are_one_line_naming_the_file_with_exit_two() {
    let missing = data("does-not-exist.yaml");
    assert_unusable(
        &nodewright(&["validate", &missing]),
        &["does-not-exist.yaml", "cannot read"],
    );
    assert_unusable(
        &nodewright(&["validate", &data("not-yaml.yaml")]),
        &["not-yaml.yaml"],
    );
    assert_unusable(
        &nodewright(&["validate", &data("deployment.yaml")]),
        &["deployment.yaml", "Deployment"],
    );
    let pools = example("nodepools.yaml");
    assert_unusable(
        &nodewright(&[
            "plan",
            "--nodepools",
            &pools,
            "--snapshot",
            &data("not-a-list.json"),
        ]),
        &["not-a-list.json", "List"],
    );
    assert_unusable(
        &nodewright(&[
            "plan",
            "--nodepools",
            &pools,
            "--snapshot",
            &data("bad-quantity.json"),
        ]),
        &[
            "bad-quantity.json",
            "pod \"default/web-1\"",
            "container \"app\"",
            "1.5.3Gi",
        ],
    );
    assert_unusable(
        &nodewright(&[
            "plan",
            "--nodepools",
            &pools,
            "--snapshot",
            &example("nodepools.yaml"),
        ]),
        &["nodepools.yaml"],
    );
    assert_unusable(
        &nodewright(&[
            "plan",
            "--nodepools",
            &pools,
            "--snapshot",
            &example("snapshot.json"),
            "--catalog",
            &data("broken.yaml"),
        ]),
        &["broken.yaml", "catalog"],
    );
}

#[test]
fn a_custom_catalog_and_zone_list_are_what_the_plan_uses() {
    let pools = fixture_nodepools()
        .into_iter()
        .find(|p| p.ends_with("general-purpose.yaml"))
        .unwrap();
    let plan = plan_json(&[
        "--nodepools",
        &pools.display().to_string(),
        "--snapshot",
        &data("pending.json"),
        "--catalog",
        &data("tiny-catalog.json"),
        "--zones",
        "eu-west-1a,eu-west-1b",
    ]);
    let claims = plan["nodeClaims"].as_array().unwrap();
    assert_eq!(claims.len(), 1, "{plan}");
    // "a" (1 cpu) and "b" (no requests, still a pod slot) fit the cheap type.
    assert_eq!(claims[0]["instanceType"], "small.x");
    assert_eq!(
        claims[0]["instanceTypeOptions"],
        serde_json::json!(["small.x", "big.x"])
    );
    assert!(claims[0]["zone"].as_str().unwrap().starts_with("eu-west-1"));
    assert_eq!(
        claims[0]["pods"],
        serde_json::json!(["default/a", "default/b"])
    );
    // The finished pod is not pending; the giant one names the resource.
    let unschedulable = plan["unschedulable"].as_array().unwrap();
    assert_eq!(unschedulable.len(), 1);
    assert_eq!(unschedulable[0]["pod"], "default/giant");
    assert!(
        unschedulable[0]["reason"]
            .as_str()
            .unwrap()
            .contains("enough cpu"),
        "{plan}"
    );
}

fn claims_of(plan: &Value) -> Vec<(String, usize)> {
    plan["nodeClaims"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["instanceType"].as_str().unwrap().to_string(),
                c["pods"].as_array().unwrap().len(),
            )
        })
        .collect()
}

#[test]
fn limits_written_as_ten_million_gibibytes_validate_and_plan_as_no_limit() {
    let pools = data("density-unlimited.yaml");
    let out = nodewright(&["validate", &pools]);
    assert!(out.status.success(), "{}", stderr(&out));
    let plan = plan_json(&[
        "--nodepools",
        &pools,
        "--snapshot",
        &data("density-tiny-pods.json"),
    ]);
    assert_eq!(
        claims_of(&plan),
        vec![("m5.large".to_string(), 20)],
        "{plan}"
    );
    assert_eq!(plan["unschedulable"], serde_json::json!([]));
}

#[test]
fn a_pod_requesting_ten_million_gibibytes_is_unschedulable_with_a_reason_not_an_error() {
    let plan = plan_json(&[
        "--nodepools",
        &data("density-unlimited.yaml"),
        "--snapshot",
        &data("density-huge-pod.json"),
    ]);
    assert_eq!(
        claims_of(&plan),
        vec![("m5.large".to_string(), 1)],
        "{plan}"
    );
    let unschedulable = plan["unschedulable"].as_array().unwrap();
    assert_eq!(unschedulable.len(), 1, "{plan}");
    assert_eq!(unschedulable[0]["pod"], "default/huge");
    let reason = unschedulable[0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("no instance type has enough memory (requested at least 8.19Pi"),
        "{reason}"
    );
}

#[test]
fn limits_kubernetes_refuses_are_errors_naming_the_field() {
    let out = nodewright(&["validate", &data("density-bad-limits.yaml")]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    for line in [
        r#"NodePool "bad-limits": spec.limits.cpu: quantity "1e1.5" is not a Kubernetes quantity"#,
        r#"NodePool "bad-limits": spec.limits.memory: quantity "Gi" is not a Kubernetes quantity"#,
    ] {
        assert!(err.lines().any(|l| l.starts_with(line)), "{line} in {err}");
    }
}

#[test]
fn with_max_pods_8_twenty_tiny_pods_on_one_large_type_need_three_nodes_not_one() {
    let snapshot = data("density-tiny-pods.json");
    let default = plan_json(&[
        "--nodepools",
        &data("density-one-large-type.yaml"),
        "--snapshot",
        &snapshot,
    ]);
    assert_eq!(claims_of(&default), vec![("m5.4xlarge".to_string(), 20)]);
    let capped = plan_json(&[
        "--nodepools",
        &data("density-max-pods.yaml"),
        "--snapshot",
        &snapshot,
    ]);
    let claims = claims_of(&capped);
    assert_eq!(claims.len(), 3, "{capped}");
    assert!(
        claims
            .iter()
            .all(|(t, pods)| t == "m5.4xlarge" && *pods <= 8),
        "{claims:?}"
    );
    assert_eq!(claims.iter().map(|(_, n)| n).sum::<usize>(), 20);
}

#[test]
fn reserved_memory_that_leaves_less_than_the_pod_requests_moves_the_plan_to_the_next_type() {
    let snapshot = data("density-6gi-pod.json");
    let default = plan_json(&[
        "--nodepools",
        &data("density-unreserved.yaml"),
        "--snapshot",
        &snapshot,
    ]);
    // 6903Mi on m5.large holds 6Gi.
    assert_eq!(claims_of(&default), vec![("m5.large".to_string(), 1)]);
    let reserved = plan_json(&[
        "--nodepools",
        &data("density-reserved.yaml"),
        "--snapshot",
        &snapshot,
    ]);
    // 7577Mi − 1Gi kube − 512Mi system − 100Mi eviction = 5941Mi does not.
    assert_eq!(
        claims_of(&reserved),
        vec![("m5.xlarge".to_string(), 1)],
        "{reserved}"
    );
    assert_eq!(
        reserved["nodeClaims"][0]["instanceTypeOptions"],
        serde_json::json!(["m5.xlarge"])
    );
}

#[test]
fn pods_per_core_limits_the_pods_each_node_takes() {
    let plan = plan_json(&[
        "--nodepools",
        &data("density-pods-per-core.yaml"),
        "--snapshot",
        &data("density-tiny-pods.json"),
    ]);
    // m5.large: 2 vCPUs × 2 pods per core = 4 pods, not its 29.
    let claims = claims_of(&plan);
    assert_eq!(claims.len(), 5, "{plan}");
    assert!(
        claims.iter().all(|(t, pods)| t == "m5.large" && *pods == 4),
        "{claims:?}"
    );
}

fn event_fixture(name: &str) -> String {
    root()
        .join("../shared/core/tests/fixtures/events")
        .join(name)
        .display()
        .to_string()
}

fn event_json(args: &[&str]) -> Value {
    let mut all = vec!["event", "--output", "json"];
    all.extend_from_slice(args);
    let out = nodewright(&all);
    assert!(out.status.success(), "event failed: {}", stderr(&out));
    assert!(out.stderr.is_empty(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("event prints JSON")
}

#[test]
fn every_event_fixture_reads_as_the_documented_json_shape_and_values() {
    let dir = root().join("../shared/core/tests/fixtures/events");
    let count = std::fs::read_dir(&dir).expect("event fixtures").count();
    let cases = [
        (
            "spot-interruption.json",
            "spotInterruption",
            &["i-1234567890abcdef0"][..],
            None,
            "drain-now",
        ),
        (
            "rebalance-recommendation.json",
            "rebalanceRecommendation",
            &["i-1234567890abcdef0"],
            None,
            "replace-then-drain",
        ),
        (
            "state-change-terminated.json",
            "stateChange",
            &["i-1234567890abcdef0"],
            Some("terminated"),
            "clean-up",
        ),
        (
            "health-scheduled-change.json",
            "scheduledChange",
            &["i-0abcd1111abcd1111"],
            None,
            "replace-then-drain",
        ),
        ("scheduled-tick.json", "ignored", &[], None, "none"),
    ];
    assert_eq!(cases.len(), count, "every fixture has a case");
    for (file, kind, ids, state, action) in cases {
        let v = event_json(&[&event_fixture(file)]);
        let mut fields: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        fields.sort();
        assert_eq!(
            fields,
            ["action", "id", "instanceIds", "kind", "reason", "state"],
            "{file}"
        );
        let raw: Value =
            serde_json::from_str(&std::fs::read_to_string(event_fixture(file)).unwrap()).unwrap();
        assert_eq!(v["id"], raw["id"], "{file}");
        assert_eq!(v["kind"], kind, "{file}");
        assert_eq!(v["instanceIds"], serde_json::json!(ids), "{file}");
        assert_eq!(v["state"], serde_json::json!(state), "{file}");
        assert_eq!(v["action"], action, "{file}");
        if kind == "ignored" {
            assert!(
                v["reason"].as_str().unwrap().contains("Scheduled Event"),
                "{v}"
            );
        } else {
            assert_eq!(v["reason"], Value::Null, "{file}");
        }
    }
}

#[test]
fn the_rebalance_flag_changes_what_a_rebalance_recommendation_leads_to() {
    let file = event_fixture("rebalance-recommendation.json");
    let ignore = event_json(&[&file, "--rebalance", "ignore"]);
    assert_eq!(ignore["action"], "none");
    assert!(
        ignore["reason"].as_str().unwrap().contains("ignore"),
        "{ignore}"
    );
    assert_eq!(
        event_json(&[&file, "--rebalance", "cordon"])["action"],
        "cordon"
    );
    assert_eq!(
        event_json(&[&file, "--rebalance", "replace"])["action"],
        "replace-then-drain"
    );
    assert_eq!(
        event_json(&[
            "--rebalance",
            "cordon",
            &event_fixture("spot-interruption.json")
        ])["action"],
        "drain-now"
    );
    assert_eq!(
        nodewright(&["event", &file, "--rebalance", "later"])
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn the_event_table_shows_kind_instances_and_action_or_the_reason_it_is_ignored() {
    let out = nodewright(&["event", &event_fixture("spot-interruption.json")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    for want in [
        "spotInterruption",
        "i-1234567890abcdef0",
        "drain-now",
        "2026-11-20T10:02:00Z",
    ] {
        assert!(text.contains(want), "{want} in\n{text}");
    }
    let out = nodewright(&["event", &event_fixture("scheduled-tick.json")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("ignored") && text.contains("reason") && text.contains("Scheduled Event"),
        "{text}"
    );
}

#[test]
fn a_forged_event_with_a_bad_instance_id_exits_two_with_one_line_naming_the_field() {
    for output in ["table", "json"] {
        let out = nodewright(&[
            "event",
            &data("event-bad-instance-id.json"),
            "--output",
            output,
        ]);
        assert_unusable(
            &out,
            &[
                "event-bad-instance-id.json",
                "detail.instance-id",
                "\"i-XYZ\"",
                "not an EC2 instance id",
            ],
        );
        assert!(out.stdout.is_empty(), "no action printed for a bad id");
    }
}

#[test]
fn an_event_with_a_field_of_the_wrong_type_or_invalid_json_exits_two_naming_the_problem() {
    let out = nodewright(&["event", &data("event-wrong-type.json")]);
    assert_unusable(
        &out,
        &[
            "event-wrong-type.json",
            "detail.instance-id",
            "expected a string, found 42",
        ],
    );
    let out = nodewright(&["event", &data("event-not-json.json"), "--output", "json"]);
    assert_unusable(&out, &["event-not-json.json", "not valid JSON"]);
}

#[test]
fn an_unreadable_event_file_exits_two_naming_it() {
    let out = nodewright(&["event", &data("no-such-event.json")]);
    assert_unusable(&out, &["no-such-event.json", "cannot read"]);
    let out = nodewright(&["event", &root().join("tests/data").display().to_string()]);
    assert_unusable(&out, &["cannot read"]);
}

// ----- simulate --------------------------------------------------------------------

#[test]
fn simulate_runs_the_bundled_scenario_to_exit_zero_in_the_documented_json_shape_with_a_chart() {
    let chart = std::env::temp_dir().join(format!("nodewright-sim-{}.svg", std::process::id()));
    let out = nodewright(&[
        "simulate",
        "--output",
        "json",
        "--chart",
        &chart.display().to_string(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("simulate prints JSON");
    let summary = &doc["summary"];
    assert_eq!(summary["podsLost"], 0);
    assert_eq!(summary["pdbViolations"], 0);
    for p in ["p50", "p95", "max"] {
        assert!(summary["pendingSeconds"][p].is_f64(), "{p}: {summary}");
    }
    assert!(summary["instancesLaunched"].as_u64().unwrap() > 0);
    assert!(
        summary["instancesNeeded"].as_u64().unwrap()
            <= summary["instancesLaunched"].as_u64().unwrap()
    );
    assert!(summary["nodeHours"].as_f64().unwrap() > 0.0);
    assert!(summary["cost"].as_f64().unwrap() > 0.0);
    assert_eq!(
        summary["interruptions"], 2,
        "the spot warning and the rebalance"
    );
    assert!(summary["drainSeconds"]["max"].is_f64());
    assert_eq!(summary["virtualSeconds"], 45 * 60);
    // The scale-down at 30m is consolidated by the disruption function, and says so.
    let consolidation = &summary["consolidation"];
    assert!(
        consolidation["nodesRemoved"].as_u64().unwrap() > 0,
        "{consolidation}"
    );
    assert!(
        consolidation["savingsPerHour"].as_f64().unwrap() > 0.0,
        "{consolidation}"
    );
    assert!(
        consolidation["summary"]
            .as_str()
            .is_some_and(|s| s.contains("saving $")),
        "{consolidation}"
    );
    let timeline = doc["timeline"].as_array().expect("timeline");
    assert!(!timeline.is_empty());
    for row in timeline {
        let t = row["t"].as_str().expect("t");
        assert_eq!(t.len(), 8, "HH:MM:SS: {t}");
        assert!(
            row["event"].is_string() && row["decision"].is_string(),
            "{row}"
        );
        assert!(
            row["nodes"].is_u64() && row["pricePerHour"].is_f64(),
            "{row}"
        );
    }
    let decisions: Vec<&str> = timeline
        .iter()
        .filter_map(|r| r["decision"].as_str())
        .collect();
    assert!(decisions.iter().any(|d| d.starts_with("provision: launch")));
    assert!(
        decisions
            .iter()
            .any(|d| d.starts_with("interrupt: drain and terminate"))
    );
    assert_eq!(doc["problems"], Value::Array(vec![]));
    let svg = std::fs::read_to_string(&chart).expect("chart written");
    let _ = std::fs::remove_file(&chart);
    assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(80)]);
    assert!(
        svg.contains("pending pods") && svg.contains("<polyline"),
        "three series and a legend"
    );
}

#[test]
fn simulate_prints_the_timeline_and_summary_and_honours_until_and_seed() {
    // Until 3m: the stop at 2m happens, the retirement without notice at 4m does not.
    let out = nodewright(&[
        "simulate",
        &data("lossy-scenario.yaml"),
        "--until",
        "3m",
        "--seed",
        "3",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("(seed 3): 00:03:00 of virtual time"),
        "{text}"
    );
    assert!(text.contains("TIME") && text.contains("DECISION"), "{text}");
    assert!(text.contains("stopped without notice"), "{text}");
    for label in [
        "pod pending time",
        "instances",
        "node-hours, cost",
        "interruptions",
        "pods lost",
        "PDB violations",
        "consolidation",
    ] {
        assert!(text.contains(label), "{label}: {text}");
    }
    assert!(
        text.contains("pods killed"),
        "the stop killed its pods: {text}"
    );
}

#[test]
fn a_broken_scenario_exits_two_with_one_line_naming_the_file_and_the_field() {
    let out = nodewright(&["simulate", &data("broken-scenario.yaml")]);
    assert_unusable(
        &out,
        &[
            "broken-scenario.yaml",
            "deployments[0].replicas[1].at",
            "1h30m",
        ],
    );
    let out = nodewright(&["simulate", &data("does-not-exist.yaml")]);
    assert_unusable(&out, &["does-not-exist.yaml", "cannot read"]);
    let out = nodewright(&["simulate", "--until", "a while"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[test]
fn a_run_that_loses_pods_exits_one_naming_the_broken_invariant() {
    // The retirement at 4m comes with no notice: its pods die with the instance.
    let out = nodewright(&["simulate", &data("lossy-scenario.yaml"), "--output", "json"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON even so");
    assert!(doc["summary"]["podsLost"].as_u64().unwrap() > 0);
    let err = stderr(&out);
    assert!(
        err.contains("invariant broken") && err.contains("pod(s) lost"),
        "{err}"
    );
    assert_eq!(
        doc["problems"].as_array().map(Vec::len),
        Some(err.lines().count())
    );
}

// ----- pods that are not ours to provision for, and volume topology --------------------

fn general_purpose_nodepool() -> String {
    fixture_nodepools()
        .into_iter()
        .find(|p| p.ends_with("general-purpose.yaml"))
        .unwrap()
        .display()
        .to_string()
}

/// The plan for a `pods-*.json` snapshot on the general-purpose NodePool, as JSON and as
/// the table.
fn plan_pods(snapshot: &str) -> (Value, String) {
    let args = [
        "--nodepools",
        &general_purpose_nodepool(),
        "--snapshot",
        &data(snapshot),
    ];
    let json = plan_json(&args);
    let out = nodewright(&[&["plan"], &args[..]].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    (json, String::from_utf8(out.stdout).unwrap())
}

/// Nothing launched, nothing unschedulable, and exactly `pod` listed apart with `reason`
/// in the JSON and in the table's own section.
fn assert_listed_apart(plan: &(Value, String), pod: &str, reason: &str) {
    let (json, text) = plan;
    assert_eq!(json["nodeClaims"], serde_json::json!([]), "{json}");
    assert_eq!(json["unschedulable"], serde_json::json!([]), "{json}");
    assert_eq!(
        json["notProvisioned"],
        serde_json::json!([{"pod": pod, "reason": reason}]),
        "{json}"
    );
    assert!(text.contains("No new NodeClaims needed."), "{text}");
    assert!(
        text.contains("0 unschedulable; 1 not provisioned"),
        "{text}"
    );
    let section = text
        .split("\nNot provisioned (pending, but no capacity is launched for them):\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no section for pods not provisioned: {text}"));
    assert_eq!(section, format!("  {pod}: {reason}\n"), "{text}");
}

#[test]
fn a_pod_for_the_fargate_scheduler_launches_nothing_and_is_listed_apart_with_why() {
    assert_listed_apart(
        &plan_pods("pods-fargate.json"),
        "default/batch-fargate",
        "it is for scheduler \"fargate-scheduler\", not kube-scheduler; that scheduler provides its capacity",
    );
}

#[test]
fn a_pod_nominated_to_a_node_by_preemption_launches_nothing_and_is_listed_apart_with_why() {
    assert_listed_apart(
        &plan_pods("pods-nominated.json"),
        "default/critical-web",
        "preemption nominated it to node \"ip-192-168-12-34.ec2.internal\"; kube-scheduler binds it there once the pods it preempts are gone",
    );
}

#[test]
fn a_pending_pod_kube_scheduler_has_not_marked_unschedulable_launches_nothing_and_is_listed_apart()
{
    assert_listed_apart(
        &plan_pods("pods-not-yet-marked.json"),
        "default/fresh-web",
        "kube-scheduler has not marked it Unschedulable yet; it may still fit a node that exists",
    );
}

#[test]
fn a_pod_kube_scheduler_marked_unschedulable_gets_a_claim() {
    let (json, text) = plan_pods("pods-marked-unschedulable.json");
    let claims = json["nodeClaims"].as_array().unwrap();
    assert_eq!(claims.len(), 1, "{json}");
    assert_eq!(
        claims[0]["pods"],
        serde_json::json!(["default/waiting-web"])
    );
    assert_eq!(json["notProvisioned"], serde_json::json!([]), "{json}");
    assert!(!text.contains("Not provisioned"), "{text}");
    assert!(!text.contains("not provisioned"), "{text}");
}

#[test]
fn a_pod_bound_to_a_volume_in_us_east_1b_gets_a_claim_in_us_east_1b() {
    let (json, _) = plan_pods("pods-bound-zonal-volume.json");
    let claims = json["nodeClaims"].as_array().unwrap();
    assert_eq!(claims.len(), 1, "{json}");
    assert_eq!(claims[0]["pods"], serde_json::json!(["default/db-0"]));
    assert_eq!(claims[0]["zone"], "us-east-1b", "{json}");
    // Zones cost the same here, and the same pod without a volume goes to the first
    // one: the volume moved it. (That the claim may launch in us-east-1b only, and that
    // a cheaper zone does not win, is checked in core's volumes tests, which can price
    // zones apart.)
    let (free, _) = plan_pods("pods-marked-unschedulable.json");
    assert_eq!(free["nodeClaims"][0]["zone"], "us-east-1a", "{free}");
}

#[test]
fn a_wait_for_first_consumer_class_allowing_only_us_east_1c_puts_the_claim_in_us_east_1c() {
    let (json, _) = plan_pods("pods-wait-for-first-consumer.json");
    let claims = json["nodeClaims"].as_array().unwrap();
    assert_eq!(claims.len(), 1, "{json}");
    assert_eq!(claims[0]["pods"], serde_json::json!(["default/cache-0"]));
    assert_eq!(claims[0]["zone"], "us-east-1c", "{json}");
}

#[test]
fn pods_whose_claim_is_missing_or_waits_for_immediate_binding_are_listed_apart_with_why() {
    let (json, text) = plan_pods("pods-claims-not-ready.json");
    assert_eq!(json["nodeClaims"], serde_json::json!([]), "{json}");
    assert_eq!(
        json["notProvisioned"],
        serde_json::json!([
            {"pod": "default/logs-0", "reason": "its PersistentVolumeClaim \"default/logs-0\" is not bound yet and StorageClass \"gp2\" binds Immediately: the volume's zone is chosen before the pod is placed, so it waits for the claim to bind"},
            {"pod": "default/orphan-0", "reason": "its volume \"data\" uses PersistentVolumeClaim \"default/never-created\", which does not exist"},
        ]),
        "{json}"
    );
    assert!(text.contains("2 not provisioned"), "{text}");
}
