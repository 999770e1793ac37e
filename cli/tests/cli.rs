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

/// Writes `contents` to `name` in a directory of its own under the temp dir.
fn temp_file(name: &str, contents: &str) -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "nodewright-cli-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let path = dir.join(name);
    std::fs::write(&path, contents).expect("a temp file");
    path
}

/// `items` written as a `kubectl get -o json` List; the file's path.
fn snapshot_file(items: Vec<Value>) -> String {
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
    temp_file("snapshot.json", &list.to_string())
        .display()
        .to_string()
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
    let file = data("broken.yaml");
    let out = nodewright(&["validate", &file]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    let lines: Vec<&str> = err.lines().collect();
    let first = format!(
        "{file}: NodePool \"broken\": spec.template.spec.requirements[0].operator: unknown operator \"GreaterThan\" (expected one of In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte, Lte)"
    );
    assert!(lines.contains(&first.as_str()), "{err}");
    let object = format!("{file}: NodePool \"broken\"");
    for needle in [
        "requirements[1]",
        "expireAfter",
        "budgets[0]",
        "nodeClassRef",
    ] {
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(&object) && l.contains(needle)),
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
    let file = data("density-bad-limits.yaml");
    let out = nodewright(&["validate", &file]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    for line in [
        r#"NodePool "bad-limits": spec.limits.cpu: quantity "1e1.5" is not a Kubernetes quantity"#,
        r#"NodePool "bad-limits": spec.limits.memory: quantity "Gi" is not a Kubernetes quantity"#,
    ] {
        let line = format!("{file}: {line}");
        assert!(err.lines().any(|l| l.starts_with(&line)), "{line} in {err}");
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
fn simulate_starts_from_a_cluster_with_karpenters_nodes_adopted_and_its_pods_where_they_run() {
    let out = nodewright(&[
        "simulate",
        "--cluster",
        &example("snapshot.json"),
        "--nodepools",
        &example("nodepools.yaml"),
        "--until",
        "30m",
        "--output",
        "json",
    ]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("3 node(s) taken over as nodewright's (Karpenter's, adopted): 3 of general-purpose; 0 left unmanaged"),
        "{err}"
    );
    let doc: Value = serde_json::from_slice(&out.stdout).expect("simulate prints JSON");
    assert_eq!(doc["problems"], Value::Array(vec![]));
    let summary = &doc["summary"];
    assert_eq!(summary["virtualSeconds"], 30 * 60);
    assert_eq!(summary["podsLost"], 0);
    assert_eq!(summary["pdbViolations"], 0);
    // The snapshot's nodes run from the first instant, each adopted as a claim of its
    // NodePool; what was launched was launched for the pods pending in the snapshot.
    let nodes = doc["nodes"].as_array().expect("nodes");
    for name in [
        "ip-192-168-12-34.ec2.internal",
        "ip-192-168-45-67.ec2.internal",
        "ip-192-168-23-89.ec2.internal",
    ] {
        let node = nodes
            .iter()
            .find(|n| n["node"] == name)
            .unwrap_or_else(|| panic!("{name} in {nodes:?}"));
        assert_eq!(node["runningAtStart"], true, "{node}");
        assert_eq!(node["nodePool"], "general-purpose", "adopted: {node}");
        assert!(node["pricePerHour"].as_f64().unwrap() > 0.0, "{node}");
    }
    let launched = summary["instancesLaunched"].as_u64().unwrap();
    assert_eq!(nodes.len() as u64, 3 + launched, "{nodes:?}");
    assert!(launched > 0, "the snapshot's pending pods need nodes");
    assert_eq!(summary["podsPendingAtEnd"], 0, "{summary}");
}

#[test]
fn simulate_from_a_cluster_leaves_another_tools_node_alone_and_names_a_node_it_cannot_read() {
    let node = |name: &str, labels: Value| {
        serde_json::json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels,
                         "creationTimestamp": "2026-11-01T00:00:00Z"},
            "spec": {"providerID": "aws:///us-east-1a/i-0123456789abcdef0"},
            "status": {
                "allocatable": {"cpu": "1930m", "memory": "7000Mi", "pods": "29"},
                "capacity": {"cpu": "2", "memory": "8000Mi", "pods": "29"},
                "conditions": [{"type": "Ready", "status": "True"}]
            }
        })
    };
    let pod = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "default", "labels": {"app": "web"},
                     "creationTimestamp": "2026-11-02T00:00:00Z",
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet",
                                          "name": "web", "controller": true}]},
        "spec": {"nodeName": "ip-10-0-0-1.ec2.internal",
                 "containers": [{"name": "web", "resources": {"requests": {"cpu": "500m"}}}]},
        "status": {"phase": "Running"}
    });
    let group = serde_json::json!({
        "node.kubernetes.io/instance-type": "m5.large",
        "topology.kubernetes.io/zone": "us-east-1a",
        "eks.amazonaws.com/nodegroup": "system",
        "eks.amazonaws.com/capacityType": "ON_DEMAND"
    });
    let cluster = snapshot_file(vec![node("ip-10-0-0-1.ec2.internal", group), pod.clone()]);
    let out = nodewright(&[
        "simulate",
        "--cluster",
        &cluster,
        "--nodepools",
        &example("nodepools.yaml"),
        "--until",
        "20m",
        "--output",
        "json",
    ]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("0 node(s) taken over"), "{err}");
    assert!(
        err.contains("1 left unmanaged (no karpenter.sh/nodepool label"),
        "{err}"
    );
    let doc: Value = serde_json::from_slice(&out.stdout).expect("simulate prints JSON");
    assert_eq!(doc["problems"], Value::Array(vec![]));
    let summary = &doc["summary"];
    assert_eq!(
        summary["instancesLaunched"], 0,
        "its pod runs where it is: {summary}"
    );
    assert_eq!(summary["consolidation"]["nodesRemoved"], 0, "{summary}");
    assert_eq!(summary["podsLost"], 0);

    let unreadable = snapshot_file(vec![
        node(
            "ip-10-0-0-2.ec2.internal",
            serde_json::json!({"topology.kubernetes.io/zone": "us-east-1a"}),
        ),
        pod,
    ]);
    let out = nodewright(&[
        "simulate",
        "--cluster",
        &unreadable,
        "--nodepools",
        &example("nodepools.yaml"),
    ]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("Node ip-10-0-0-2.ec2.internal: no node.kubernetes.io/instance-type label"),
        "{err}"
    );
}

#[test]
fn simulate_compares_two_configurations_from_the_same_cluster_side_by_side() {
    let nodepools = std::fs::read_to_string(example("nodepools.yaml")).expect("nodepools");
    let on_demand = "- key: karpenter.sh/capacity-type\n          operator: In\n          values: [\"on-demand\"]";
    assert!(nodepools.contains(on_demand));
    let spot_allowed = temp_file(
        "spot-allowed.yaml",
        &nodepools.replacen(
            on_demand,
            "- key: karpenter.sh/capacity-type\n          operator: In\n          values: [\"spot\", \"on-demand\"]",
            1,
        ),
    );
    let args = |output: &'static str| {
        vec![
            "simulate".to_string(),
            "--cluster".into(),
            example("snapshot.json"),
            "--nodepools".into(),
            example("nodepools.yaml"),
            "--compare".into(),
            spot_allowed.display().to_string(),
            "--until".into(),
            "40m".into(),
            "--output".into(),
            output.into(),
        ]
    };
    let json_args = args("json");
    let out = nodewright(&json_args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("simulate prints JSON");
    let runs = doc["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 2);
    for run in runs {
        assert_eq!(run["problems"], Value::Array(vec![]), "{run}");
        assert_eq!(run["summary"]["virtualSeconds"], 40 * 60);
        assert!(run["timeline"].as_array().is_some_and(|t| !t.is_empty()));
    }
    // The snapshot's two spot nodes of general-purpose drift where the pool allows
    // on-demand only, and do not where it allows spot.
    let drifted = |run: &Value| {
        run["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| n["runningAtStart"] == true && n["cause"] == "Drifted")
            .map(|n| n["capacityType"].as_str().unwrap_or_default().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(drifted(&runs[0]), ["spot", "spot"], "{}", runs[0]["nodes"]);
    assert_eq!(
        drifted(&runs[1]),
        Vec::<String>::new(),
        "{}",
        runs[1]["nodes"]
    );

    let chart = temp_file("compare.svg", "");
    let mut table_args = args("table");
    table_args.extend(["--chart".into(), chart.display().to_string()]);
    let out = nodewright(&table_args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(out.status.success(), "{}", stderr(&out));
    let svg = std::fs::read_to_string(&chart).expect("chart written");
    assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(80)]);
    assert!(
        svg.contains("nodepools.yaml") && svg.contains("spot-allowed.yaml"),
        "a legend naming both runs"
    );
    // A line for each run: the first in blue, the second in orange.
    for color in ["#1F77B4", "#FF7F0E"] {
        assert!(
            svg.contains(&format!(
                "<polyline fill=\"none\" opacity=\"1\" stroke=\"{color}\""
            )),
            "a line in {color}"
        );
    }
    let table = String::from_utf8_lossy(&out.stdout);
    let header = table.lines().next().unwrap_or_default();
    assert!(
        header.contains("nodepools.yaml") && header.contains("spot-allowed.yaml"),
        "{table}"
    );
    for row in [
        "$ a day",
        "$ a month",
        "node-hours",
        "nodes at start / peak / end",
        "pods evicted: voluntary / interruption",
        "drains held up by a PDB",
        "pods lost (must be 0)",
    ] {
        assert!(table.lines().any(|l| l.starts_with(row)), "{row}: {table}");
    }
    assert!(
        table.contains("spot-allowed.yaml: the first 30 minutes, on the 3 node(s) it started with"),
        "{table}"
    );
    let drift_rows = table.lines().filter(|l| l.contains(" Drifted ")).count();
    assert_eq!(drift_rows, 2, "the rollout named per node: {table}");
}

/// The bundled snapshot with `extra` items appended.
fn bundled_snapshot_with(extra: Vec<Value>) -> String {
    let text = std::fs::read_to_string(example("snapshot.json")).expect("snapshot");
    let mut list: Value = serde_json::from_str(&text).expect("snapshot JSON");
    list["items"].as_array_mut().expect("items").extend(extra);
    temp_file("snapshot.json", &list.to_string())
        .display()
        .to_string()
}

#[test]
fn simulate_from_a_cluster_follows_each_hpa_through_a_day_between_its_bounds() {
    let hpa = serde_json::json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "storefront", "namespace": "shop"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "storefront"},
                 "minReplicas": 3, "maxReplicas": 12}
    });
    let cluster = bundled_snapshot_with(vec![hpa]);
    // From 5 replicas the curve rises first. The end state counts the storefront's pods.
    let storefront_pods_at = |until: &str| {
        let saved = temp_file("end.json", "");
        let out = nodewright(&[
            "simulate",
            "--cluster",
            &cluster,
            "--nodepools",
            &example("nodepools.yaml"),
            "--until",
            until,
            "--save",
            &saved.display().to_string(),
            "--output",
            "json",
        ]);
        let err = stderr(&out);
        assert!(out.status.success(), "{err}");
        assert!(
            err.contains("1 workload(s) follow a day between their HorizontalPodAutoscaler's minReplicas and maxReplicas: shop/storefront 3–12"),
            "{err}"
        );
        let doc: Value = serde_json::from_slice(&out.stdout).expect("simulate prints JSON");
        assert_eq!(doc["problems"], Value::Array(vec![]), "{}", doc["problems"]);
        assert_eq!(doc["summary"]["podsLost"], 0);
        let end: Value =
            serde_json::from_str(&std::fs::read_to_string(&saved).expect("saved")).expect("JSON");
        end["cluster"]["pods"]
            .as_array()
            .expect("pods")
            .iter()
            .filter(|p| {
                p["pod"]
                    .as_str()
                    .is_some_and(|k| k.starts_with("shop/storefront-"))
            })
            .count()
    };
    // 5 of 3–12 is the curve's height 8 h 15 min before its peak, 12 (the fall to the
    // minimum is `diurnal`'s unit test).
    assert_eq!(storefront_pods_at("8h20m"), 12, "its max at the peak");
    assert_eq!(storefront_pods_at("1h5m"), 6, "on its way up after an hour");

    // An autoscaler of a workload the snapshot has no pods of is named, not fatal.
    let stray = serde_json::json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "ghost", "namespace": "shop"},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "ghost"}, "maxReplicas": 4}
    });
    let out = nodewright(&[
        "simulate",
        "--cluster",
        &bundled_snapshot_with(vec![stray]),
        "--nodepools",
        &example("nodepools.yaml"),
        "--until",
        "10m",
    ]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("HorizontalPodAutoscaler shop/ghost scales Deployment ghost, which has no pods in the snapshot"),
        "{err}"
    );
}

#[test]
fn simulate_from_a_cluster_takes_a_scenarios_events_and_interrupts_spot_at_the_rate_given() {
    let nodepools = std::fs::read_to_string(example("nodepools.yaml")).expect("nodepools");
    let on_demand = "- key: karpenter.sh/capacity-type\n          operator: In\n          values: [\"on-demand\"]";
    let spot_allowed = temp_file(
        "spot-allowed.yaml",
        &nodepools.replacen(
            on_demand,
            "- key: karpenter.sh/capacity-type\n          operator: In\n          values: [\"spot\", \"on-demand\"]",
            1,
        ),
    );
    let events = temp_file(
        "events.yaml",
        "seed: 4\nevents:\n  - at: 20m\n    imageRelease: {}\n",
    );
    let run = |rate: &str| {
        let out = nodewright(&[
            "simulate",
            &events.display().to_string(),
            "--cluster",
            &example("snapshot.json"),
            "--nodepools",
            &spot_allowed.display().to_string(),
            "--spot-interruptions",
            rate,
            "--until",
            "2h",
            "--output",
            "json",
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_slice::<Value>(&out.stdout).expect("simulate prints JSON")
    };
    // 100,000 a month per 100 instances: each spot instance warned about hourly.
    let stormy = run("100000");
    assert_eq!(stormy["seed"], 4, "the scenario's seed");
    assert_eq!(
        stormy["problems"],
        Value::Array(vec![]),
        "{}",
        stormy["problems"]
    );
    let timeline: Vec<&str> = stormy["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["event"].as_str())
        .collect();
    assert!(
        timeline.iter().any(|e| e.contains("image")),
        "the scenario's image release: {timeline:?}"
    );
    let summary = &stormy["summary"];
    assert!(summary["interruptions"].as_u64().unwrap() > 0, "{summary}");
    assert!(
        summary["podsEvicted"]["byInterruption"].as_u64().unwrap() > 0,
        "{summary}"
    );
    assert_eq!(summary["podsLost"], 0, "{summary}");
    let calm = run("0");
    assert_eq!(calm["summary"]["interruptions"], 0, "{}", calm["summary"]);

    // A scenario that sets what the cluster gives is refused, naming the field.
    let workloads = temp_file(
        "workloads.yaml",
        "deployments:\n  - name: web\n    replicas: [{at: 0s, replicas: 2}]\n    pod: {containers: [{name: app, image: nginx}]}\n",
    );
    let out = nodewright(&[
        "simulate",
        &workloads.display().to_string(),
        "--cluster",
        &example("snapshot.json"),
        "--nodepools",
        &example("nodepools.yaml"),
    ]);
    assert_unusable(&out, &["workloads.yaml", "deployments: with --cluster"]);
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

// ----- status and explain on a saved simulation; the timeline --------------------------

/// `simulate --save` of `scenario` (the bundled one when `None`), run once per test
/// binary: (the saved end state, the file's path).
fn saved_run(scenario: Option<&str>) -> (Value, String) {
    use std::sync::{Mutex, OnceLock};
    static RUNS: OnceLock<Mutex<std::collections::HashMap<String, (Value, String)>>> =
        OnceLock::new();
    let key = scenario.unwrap_or("bundled").to_string();
    let mut runs = RUNS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    runs.entry(key.clone())
        .or_insert_with(|| {
            let path = std::env::temp_dir().join(format!(
                "nodewright-saved-{}-{}.json",
                std::process::id(),
                key.replace(['/', '.'], "-")
            ));
            let path = path.display().to_string();
            let mut args = vec!["simulate"];
            if let Some(s) = scenario {
                args.push(s);
            }
            args.extend(["--save", &path]);
            let out = nodewright(&args);
            assert!(out.status.success(), "{}", stderr(&out));
            let text = std::fs::read_to_string(&path).expect("--save wrote the file");
            (
                serde_json::from_str(&text).expect("the saved run is JSON"),
                path,
            )
        })
        .clone()
}

fn json_of(args: &[&str]) -> Value {
    let out = nodewright(args);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("prints JSON")
}

fn text_of(args: &[&str]) -> String {
    let out = nodewright(args);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn live_claims(saved: &Value) -> Vec<&Value> {
    saved["claims"]
        .as_array()
        .expect("claims")
        .iter()
        .filter(|c| !matches!(c["state"].as_str(), Some("Terminated" | "LaunchFailed")))
        .collect()
}

#[test]
fn status_from_a_saved_run_lists_every_live_claim_of_the_store_with_totals() {
    let (saved, path) = saved_run(None);
    let status = json_of(&["status", "--from", &path, "-o", "json"]);
    for key in [
        "nodeClaims",
        "totals",
        "commands",
        "lastDecisions",
        "deadLetterQueue",
    ] {
        assert!(status.get(key).is_some(), "{key} in {status}");
    }
    let live = live_claims(&saved);
    assert!(!live.is_empty(), "the bundled run ends with nodes");
    let rows = status["nodeClaims"].as_array().expect("nodeClaims");
    assert_eq!(rows.len(), live.len(), "one row per live claim: {rows:?}");
    for claim in &live {
        let row = rows
            .iter()
            .find(|r| r["name"] == claim["name"])
            .unwrap_or_else(|| panic!("a row for {}", claim["name"]));
        assert_eq!(row["nodePool"], claim["nodePool"]);
        assert_eq!(row["state"], claim["state"]);
        assert_eq!(row["node"], claim["nodeName"]);
        assert_eq!(row["instanceType"], claim["instanceType"]);
        assert_eq!(row["zone"], claim["zone"]);
        assert_eq!(row["capacityType"], claim["capacityType"]);
        assert_eq!(row["pricePerHour"], claim["pricePerHour"]);
    }
    let price: f64 = live.iter().filter_map(|c| c["pricePerHour"].as_f64()).sum();
    let total = status["totals"]["pricePerHour"].as_f64().expect("$/h");
    assert!((total - price).abs() < 1e-9, "{total} vs {price}");
    assert_eq!(
        status["totals"]["nodesByPool"]["spot"].as_u64(),
        Some(live.len() as u64)
    );
    for job in ["provision", "disruption", "interrupt"] {
        assert!(
            status["lastDecisions"][job]["action"].is_string(),
            "{job}: {}",
            status["lastDecisions"]
        );
    }
    assert_eq!(status["deadLetterQueue"]["depth"], 0);

    let table = text_of(&["status", "--from", &path]);
    assert!(
        table.contains("NAME") && table.contains("NODEPOOL") && table.contains("DISRUPTION"),
        "{table}"
    );
    for claim in &live {
        let name = claim["name"].as_str().unwrap();
        let line = table
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name} in {table}"));
        assert!(line.contains(claim["nodeName"].as_str().unwrap()), "{line}");
    }
    assert!(table.contains("Dead-letter queue: 0 message(s)"), "{table}");
    assert!(table.contains("Last decisions:"), "{table}");
}

#[test]
fn explain_node_from_a_saved_run_names_the_typed_reason_it_stays_and_what_would_change_it() {
    let (saved, path) = saved_run(None);
    let live = live_claims(&saved);
    let node = live[0]["nodeName"]
        .as_str()
        .expect("a live claim with a node");
    let e = json_of(&["explain", "node", node, "--from", &path, "-o", "json"]);
    assert_eq!(e["kind"], "node");
    // Spot nodes whose pods would need new spot capacity: spot-to-spot is off.
    assert_eq!(e["rejection"]["code"], "SpotToSpot", "{e}");
    assert!(
        e["rejection"]["wouldChange"]
            .as_str()
            .is_some_and(|w| w.contains("spot-to-spot")),
        "{e}"
    );
    let decisions = e["decisions"].as_array().expect("decisions");
    assert!(
        decisions.iter().any(|d| d["action"]
            .as_str()
            .is_some_and(|a| a.starts_with("launch "))),
        "its launch is in the log: {decisions:?}"
    );
    let table = text_of(&["explain", "node", node, "--from", &path]);
    assert!(table.contains("stays: SpotToSpot"), "{table}");
    assert!(table.contains("what would change it"), "{table}");
    assert!(
        table.contains(live[0]["name"].as_str().unwrap()),
        "names its claim: {table}"
    );

    let out = nodewright(&["explain", "node", "no-such-node", "--from", &path]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("no-such-node"), "{}", stderr(&out));
}

#[test]
fn explain_pod_names_the_constraint_of_an_unschedulable_pod_and_why_a_bound_one_got_its_type() {
    let (saved, path) = saved_run(Some(&data("status-scenario.yaml")));
    let pods = saved["cluster"]["pods"].as_array().expect("pods");
    let batch = pods
        .iter()
        .find(|p| {
            p["pod"]
                .as_str()
                .is_some_and(|p| p.starts_with("default/batch-"))
        })
        .expect("the batch pod");
    assert!(batch["node"].is_null(), "the batch pod stays pending");
    let batch = batch["pod"].as_str().unwrap();
    let e = json_of(&["explain", "pod", batch, "--from", &path, "-o", "json"]);
    let constraint = e["constraint"].as_str().expect("a constraint");
    assert!(
        constraint.contains("NodePool \"spot\"") && constraint.contains("enough cpu"),
        "{constraint}"
    );
    assert!(
        e["summary"]
            .as_str()
            .is_some_and(|s| s.starts_with("pending: no NodePool can take it")),
        "{e}"
    );
    let text = text_of(&["explain", "pod", batch, "--from", &path]);
    assert!(
        text.contains("NodePools tried, by weight: spot (weight 10)"),
        "{text}"
    );
    assert!(text.contains("times, until"), "repeats collapsed: {text}");

    let web = pods
        .iter()
        .find(|p| {
            p["pod"]
                .as_str()
                .is_some_and(|p| p.starts_with("default/web-"))
                && p["node"].is_string()
        })
        .expect("a web pod on a node");
    let e = json_of(&[
        "explain",
        "pod",
        web["pod"].as_str().unwrap(),
        "--from",
        &path,
        "-o",
        "json",
    ]);
    let claim = live_claims(&saved)
        .into_iter()
        .find(|c| c["nodeName"] == web["node"])
        .expect("the web pod's node has a claim");
    assert!(
        e["summary"].as_str().is_some_and(|s| s.contains(&format!(
            "launched by nodewright as {}",
            claim["instanceType"].as_str().unwrap()
        ))),
        "{e}"
    );
    let details = e["details"].to_string();
    assert!(
        details.contains("launch decision at") && details.contains(claim["name"].as_str().unwrap()),
        "{details}"
    );
}

#[test]
fn explain_nodepool_shows_its_nodes_usage_and_the_typed_reasons_they_stay() {
    let (saved, path) = saved_run(None);
    let text = text_of(&["explain", "nodepool", "spot", "--from", &path]);
    for claim in live_claims(&saved) {
        assert!(text.contains(claim["name"].as_str().unwrap()), "{text}");
    }
    assert!(text.contains("usage: cpu"), "{text}");
    assert!(
        text.contains("conditions: ") && text.contains("Ready=True"),
        "{text}"
    );
    assert!(
        text.contains("nodes staying:") && text.contains("SpotToSpot"),
        "{text}"
    );
    let e = json_of(&[
        "explain",
        "nodepool",
        "on-demand",
        "--from",
        &path,
        "-o",
        "json",
    ]);
    assert_eq!(e["kind"], "nodepool");
    assert!(
        e["summary"]
            .as_str()
            .is_some_and(|s| s.starts_with("0 live claim(s)")),
        "{e}"
    );
}

#[test]
fn status_without_a_source_or_from_a_file_that_is_no_saved_run_exits_two() {
    let out = nodewright(&["status"]);
    assert_unusable(&out, &["--from", "--table"]);
    let out = nodewright(&["status", "--from", &data("pending.json")]);
    assert_unusable(&out, &["pending.json", "simulate --save"]);
    let out = nodewright(&[
        "explain",
        "pod",
        "default/x",
        "--from",
        &data("missing.json"),
    ]);
    assert_unusable(&out, &["missing.json", "cannot read"]);
}

#[test]
fn the_timeline_shows_a_kept_node_again_only_when_its_reason_changes_and_json_keeps_all() {
    let table = text_of(&["simulate"]);
    let mut last: std::collections::HashMap<String, String> = Default::default();
    let mut shown = 0;
    for line in table.lines() {
        let Some(rest) = line.split("disruption: keep ").nth(1) else {
            continue;
        };
        // "keep a, b (Code); c (Other)": the nodes kept at one instant, by reason.
        for group in rest.split("; ") {
            let (nodes, code) = group.rsplit_once(" (").expect("keep NODES (Code)");
            let code = code.trim_end_matches(')').to_string();
            for node in nodes.split(", ") {
                assert_ne!(
                    last.insert(node.to_string(), code.clone()).as_ref(),
                    Some(&code),
                    "{node} shown twice as kept for {code}: {table}"
                );
                shown += 1;
            }
        }
    }
    assert!(shown > 0, "{table}");
    let doc = json_of(&["simulate", "--output", "json"]);
    let kept = doc["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| {
            r["decision"]
                .as_str()
                .is_some_and(|d| d.starts_with("disruption: keep "))
        })
        .count();
    assert!(kept > shown, "JSON keeps every row: {kept} vs {shown}");
    assert!(table.contains("\nSummary\n"), "{table}");
}

// ----- status and explain on a deployed stack: moto and a real control plane ----------

/// `nodewright ARGS` against moto (AWS_* as tests/moto.sh exports them), run off the
/// test's runtime. (Reading a stack takes the `stack` feature.)
#[cfg(feature = "stack")]
async fn nodewright_on_stack(url: &str, args: Vec<String>) -> Output {
    let url = url.to_string();
    tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_nodewright"))
            .args(&args)
            .env("AWS_ENDPOINT_URL", &url)
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_REGION", nodewright_aws::testing::REGION)
            .env_remove("AWS_PROFILE")
            .env_remove("AWS_SESSION_TOKEN")
            .output()
            .expect("run nodewright")
    })
    .await
    .expect("the command's thread")
}

#[cfg(feature = "stack")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn status_and_explain_on_a_deployed_stack_answer_from_its_table_and_cluster() {
    use nodewright_engine::{Provisioner, ProvisionerConfig};
    use nodewright_testkit::{
        ClusterBehaviour, Timings, emulated_cluster, wait_until, web_deployment,
    };

    // Three pods of 1.5 cpu (two m5.xlarge), and one no m5.xlarge can hold.
    let world = emulated_cluster("status", "on-demand", 3).await;
    world.deploy(web_deployment("huge", 1, "100", "1Gi")).await;
    let huge = world
        .pod_names()
        .await
        .into_iter()
        .find(|p| p.starts_with("default/huge-"))
        .expect("the Deployment huge's pod");
    let cluster = ClusterBehaviour::start(&world, Timings::default()).await;
    let (ports, _) = nodewright_lambda::build_ports(&world.config)
        .await
        .expect("ports");
    let provisioner = Provisioner::new(
        ports,
        ProvisionerConfig::new(world.cluster.clone(), "status-test"),
    );
    provisioner.tick().await.expect("the launching tick");
    let ready = wait_until(std::time::Duration::from_secs(30), || async {
        let instances = cluster.instances();
        instances.len() == 2 && instances.iter().all(|i| i.ready_at.is_some())
    })
    .await;
    assert!(ready, "nodes never Ready: {:?}", cluster.instances());
    provisioner.tick().await.expect("the registering tick");

    // A dead-letter queue holding one message.
    let sqs = aws_sdk_sqs::Client::new(&nodewright_aws::testing::sdk_config(&world.url).await);
    let dlq = sqs
        .create_queue()
        .queue_name(format!("{}-dlq", world.cluster))
        .send()
        .await
        .expect("create the queue")
        .queue_url
        .expect("its URL");
    sqs.send_message()
        .queue_url(&dlq)
        .message_body("{}")
        .send()
        .await
        .expect("send");

    let kubeconfig = world
        .config
        .kubeconfig
        .clone()
        .expect("the emulated cluster's kubeconfig")
        .display()
        .to_string();
    let stack = |extra: &[&str]| {
        let mut args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        args.extend(["--table", &world.table, "--kubeconfig", &kubeconfig].map(String::from));
        args
    };

    let mut status_args = stack(&["status", "-o", "json"]);
    status_args.extend(["--dead-letter-queue-url".to_string(), dlq.clone()]);
    let out = nodewright_on_stack(&world.url, status_args).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let status: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let claims: Vec<_> = world
        .claims()
        .await
        .into_iter()
        .filter(|c| !c.state.is_terminal())
        .collect();
    assert_eq!(claims.len(), 2, "{claims:#?}");
    let rows = status["nodeClaims"].as_array().expect("nodeClaims");
    assert_eq!(rows.len(), claims.len(), "{status}");
    for c in &claims {
        let row = rows
            .iter()
            .find(|r| r["name"] == c.name.as_str())
            .unwrap_or_else(|| panic!("{} in {status}", c.name));
        assert_eq!(row["state"], c.state.as_str());
        assert_eq!(row["node"].as_str(), c.node_name.as_deref());
        assert_eq!(row["instanceId"].as_str(), c.instance_id.as_deref());
        assert_eq!(row["instanceType"], "m5.xlarge");
        assert_eq!(row["nodePool"], "general-purpose");
    }
    assert_eq!(status["totals"]["claims"], 2);
    // The provisioner's latest entry: the pod it cannot schedule, said on every tick.
    assert_eq!(
        status["lastDecisions"]["provision"]["action"],
        format!("cannot schedule {huge}").as_str(),
        "{status}"
    );
    assert_eq!(status["deadLetterQueue"]["depth"], 1, "{status}");

    let out =
        nodewright_on_stack(&world.url, stack(&["explain", "pod", &huge, "-o", "json"])).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let e: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert!(
        e["constraint"]
            .as_str()
            .is_some_and(|c| c.contains("NodePool \"general-purpose\"") && c.contains("cpu")),
        "{e}"
    );

    let node = claims[0].node_name.clone().expect("a registered node");
    let out = nodewright_on_stack(&world.url, stack(&["explain", "node", &node])).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&claims[0].name), "{text}");
    assert!(
        text.contains(": stays: ") || text.contains("core would disrupt it now"),
        "{text}"
    );

    let out = nodewright_on_stack(
        &world.url,
        stack(&["explain", "nodepool", "general-purpose"]),
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("nodepool general-purpose: 2 live claim(s)"),
        "{text}"
    );
    assert!(
        text.contains("conditions: ") && text.contains("Ready=True"),
        "the provisioner's conditions, read from the cluster: {text}"
    );
    cluster.stop();
}

#[test]
fn simulate_repairs_unhealthy_nodes_a_fifth_of_the_pool_at_a_time_from_scenario_events() {
    let scenario = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/node-repair.yaml");
    let out = nodewright(&["simulate", scenario, "--output", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("simulate prints JSON");
    let summary = &doc["summary"];
    assert_eq!(summary["podsLost"], 0, "{summary}");
    assert_eq!(summary["pdbViolations"], 0);
    assert_eq!(
        summary["repairs"], 6,
        "five NotReady nodes and one impaired instance"
    );
    assert_eq!(summary["podsPendingAtEnd"], 0);
    let text = nodewright(&["simulate", scenario]);
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(
        stdout.contains("kubelet stopped reporting, Ready Unknown"),
        "{stdout}"
    );
    assert!(stdout.contains("hold the repair of"), "{stdout}");
    assert!(stdout.contains("6 unhealthy node(s) replaced"), "{stdout}");
}

/// The repair example with one node that stops reporting (no impaired instance).
fn one_unhealthy_node_of_the_repair_example() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/node-repair.yaml"
    ))
    .unwrap()
    .replace("  - at: 2m\n    instanceImpaired: {target: oldest}\n", "")
    .replace(
        "nodeNotReady: {target: random, count: 5}",
        "nodeNotReady: {target: random, count: 1}",
    )
}

/// `scenario` (ending with `nodeRepair: REPAIR`) simulated to its end with no pod
/// lost: its repairs, and every repair decision as "action: reason".
fn repairs_of(name: &str, scenario: &str, repair: &str) -> (Option<u64>, Vec<String>) {
    let scenario = temp_file(name, &format!("{scenario}\nnodeRepair: {repair}\n"));
    let saved = scenario.with_extension("json");
    let out = nodewright(&[
        "simulate",
        scenario.to_str().unwrap(),
        "--output",
        "json",
        "--save",
        saved.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["summary"]["podsLost"], 0, "{}", doc["summary"]);
    let state: Value = serde_json::from_slice(&std::fs::read(&saved).unwrap()).unwrap();
    let decisions: Vec<String> = state["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["job"] == "repair")
        .map(|d| format!("{}: {}", d["action"], d["reason"]))
        .collect();
    (doc["summary"]["repairs"].as_u64(), decisions)
}

#[test]
fn simulate_terminates_first_a_node_whose_pool_cpu_limit_leaves_no_room_for_its_replacement() {
    // The repair example's ten m5.large (2 vCPU each) under `limits.cpu: 20`: one node
    // stops reporting, and a replacement of its size would make 22.
    let limited = one_unhealthy_node_of_the_repair_example().replace(
        "      disruption:\n        budgets:",
        "      limits: {cpu: 20}\n      disruption:\n        budgets:",
    );
    assert!(limited.contains("limits: {cpu: 20}"), "the example changed");
    let run = |name: &str, repair: &str| repairs_of(name, &limited, repair);
    let (repairs, held) = run("repair-held.yaml", "{terminateFirstRepair: false}");
    assert_eq!(repairs, Some(0), "{held:#?}");
    assert!(
        held.iter().any(|d| d.contains(
            "is at limits.cpu 20 and cannot stage a replacement (TerminateFirstRepair would"
        )),
        "{held:#?}"
    );

    let (repairs, first) = run(
        "repair-terminate-first.yaml",
        "{terminateFirstRepair: true}",
    );
    assert_eq!(repairs, Some(1), "{first:#?}");
    assert!(
        first
            .iter()
            .any(|d| d.contains("is at limits.cpu 20 and cannot stage a replacement")),
        "{first:#?}"
    );
}

#[test]
fn simulate_terminates_first_a_node_whose_reserved_only_pool_has_no_reservation_left() {
    // The repair example's ten m5.large, launched into a capacity reservation of ten
    // by a NodePool that allows only reserved capacity: one node stops reporting, and
    // no reservation has an instance left for its replacement.
    let reserved = one_unhealthy_node_of_the_repair_example()
        .replace(
            "{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}",
            "{key: karpenter.sh/capacity-type, operator: In, values: [reserved]}",
        )
        .replace(
            "      securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]\n",
            "      securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]\n      capacityReservationSelectorTerms: [{id: cr-0aaaabbbbcccc1111}]\n",
        );
    assert!(
        reserved.contains("values: [reserved]") && reserved.contains("cr-0aaaabbbbcccc1111"),
        "the example changed"
    );
    let with_reservation = format!(
        "{reserved}\nreservations:\n  - {{id: cr-0aaaabbbbcccc1111, instanceType: m5.large, zone: us-east-1a, available: 10}}\n"
    );
    let run = |name: &str, repair: &str| repairs_of(name, &with_reservation, repair);
    let (repairs, held) = run("reserved-held.yaml", "{terminateFirstRepair: false}");
    assert_eq!(repairs, Some(0), "{held:#?}");
    assert!(
        held.iter().any(|d| d.contains(
            "allows only reserved capacity, every capacity reservation it can use is full, and cannot stage a replacement (TerminateFirstRepair would"
        )),
        "{held:#?}"
    );
    let (repairs, first) = run("reserved-first.yaml", "{terminateFirstRepair: true}");
    assert_eq!(repairs, Some(1), "{first:#?}");
    assert!(
        first
            .iter()
            .any(|d| d.contains("every capacity reservation it can use is full")),
        "{first:#?}"
    );
}

#[test]
fn simulate_reboots_a_gpu_fault_a_reboot_clears_and_replaces_a_fatal_one_with_reboot_for_repair() {
    let scenario = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/gpu-reboot.yaml");
    let out = nodewright(&["simulate", scenario, "--output", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("simulate prints JSON");
    let summary = &doc["summary"];
    assert_eq!(summary["podsLost"], 0, "{summary}");
    assert_eq!(summary["reboots"], 1, "XID 48 reboots: {summary}");
    assert_eq!(summary["repairs"], 1, "XID 79 replaces: {summary}");
    assert_eq!(summary["podsPendingAtEnd"], 0, "{summary}");
    assert_eq!(summary["nodesAtEnd"], 4, "{summary}");
    let text = nodewright(&["simulate", scenario]);
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(
        stdout.contains("drain it and reboot the instance (drain within 5m0s)"),
        "{stdout}"
    );
    assert!(stdout.contains("back from its reboot, Ready"), "{stdout}");

    // Without RebootForRepair both are replaced.
    let example = std::fs::read_to_string(scenario).unwrap();
    let off = temp_file(
        "gpu-replace.yaml",
        &example.replace(
            "nodeRepair: {rebootForRepair: true}",
            "nodeRepair: {rebootForRepair: false}",
        ),
    );
    let out = nodewright(&["simulate", off.to_str().unwrap(), "--output", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (
            doc["summary"]["reboots"].as_u64(),
            doc["summary"]["repairs"].as_u64()
        ),
        (Some(0), Some(2))
    );

    // The legacy repair stages no replacement: it cannot terminate first.
    let both = temp_file(
        "gpu-legacy-terminate-first.yaml",
        &example.replace(
            "nodeRepair: {rebootForRepair: true}",
            "nodeRepair: {legacy: true, terminateFirstRepair: true}",
        ),
    );
    let out = nodewright(&["simulate", both.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("nodeRepair: legacy and terminateFirstRepair cannot both be true"),
        "{}",
        stderr(&out)
    );
}

/// Seconds into the run of a timeline or disruption entry's `t` ("hh:mm:ss").
fn seconds_of(t: &Value) -> u64 {
    t.as_str()
        .unwrap_or_default()
        .split(':')
        .fold(0, |total, part| {
            total * 60 + part.parse::<u64>().unwrap_or(0)
        })
}

#[test]
fn an_ami_release_rolls_out_as_fast_as_the_budget_allows_not_one_command_at_a_time() {
    // The 5,000-node example, at 60 nodes: the budget (10%) lets 6 go at once.
    let example = std::fs::read_to_string(example("drift-rollout.yaml")).unwrap();
    assert!(
        example.contains("replicas: 5000"),
        "the example's size changed"
    );
    let scenario = temp_file(
        "drift-rollout-60.yaml",
        &example
            .replace("replicas: 5000", "replicas: 60")
            .replace("duration: 1h30m", "duration: 50m"),
    );
    let out = nodewright(&["simulate", scenario.to_str().unwrap(), "--output", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("simulate prints JSON");
    let summary = &doc["summary"];
    assert_eq!(summary["podsLost"], 0, "{summary}");
    assert_eq!(summary["pdbViolations"], 0, "{summary}");
    assert_eq!(summary["podsPendingAtEnd"], 0, "{summary}");
    assert_eq!(summary["nodesAtEnd"], 60, "{summary}");

    let drifted: Vec<&Value> = doc["disruptions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["cause"] == "Drifted")
        .collect();
    assert_eq!(drifted.len(), 60, "every node replaced once");
    let mut started: std::collections::BTreeMap<u64, usize> = Default::default();
    for d in &drifted {
        *started.entry(seconds_of(&d["t"])).or_default() += 1;
    }
    assert_eq!(
        started.values().max(),
        Some(&6),
        "as many at once as the budget allows: {started:?}"
    );
    let done = drifted
        .iter()
        .map(|d| seconds_of(&d["t"]) + d["terminatedAfterSeconds"].as_u64().unwrap())
        .max()
        .unwrap();
    // Ten decisions a minute apart, each replacement booted before its node drains.
    assert!(
        done <= 30 * 60 + 12 * 60,
        "the rollout ended {}s after the release: {started:?}",
        done - 30 * 60
    );

    // The decision names the drift.
    let text = nodewright(&["simulate", scenario.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(
        stdout.contains("(Drift, Drifted: AMI ami-")
            && stdout.contains("is no longer selected by EC2NodeClass default)"),
        "{stdout}"
    );
}

// ----- validate: every field present that nodewright does not honour is named ----------

use nodewright_core::api::Kind;
use nodewright_core::api::fields::{Status, fields};

/// A valid NodePool "web" and its EC2NodeClass "default", as JSON (which is YAML), with
/// an element in each list an ignored field may sit in.
fn base_manifests() -> (Value, Value) {
    let pool = serde_json::json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "web"},
        "spec": {"template": {"spec": {
            "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
            "taints": [{"key": "dedicated", "value": "web", "effect": "NoSchedule"}],
            "startupTaints": [{"key": "starting", "effect": "NoSchedule"}],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
        }}}
    });
    let class = serde_json::json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "role": "NodeRole",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
            "blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "20Gi", "volumeType": "gp3"}}]
        }
    });
    (pool, class)
}

/// A value Karpenter's CRD accepts for the field named last in a registry path.
fn sample_value(registry_path: &str) -> Value {
    let name = registry_path
        .rsplit(['.', '['])
        .find(|s| *s != "*" && *s != "]")
        .unwrap_or_default();
    match (registry_path.ends_with(".*"), name) {
        (true, _) => serde_json::json!("example"),
        (_, "replicas") => serde_json::json!(3),
        (_, "timeAdded") => serde_json::json!("2026-01-01T00:00:00Z"),
        (_, "instanceStorePolicy") => serde_json::json!("RAID0"),
        (_, "context") => serde_json::json!("reserved"),
        (_, "ipPrefixCount") => serde_json::json!(1),
        (_, "deviceIndex" | "networkCardIndex") => serde_json::json!(0),
        (_, "interfaceType") => serde_json::json!("interface"),
        (_, "id") if registry_path.starts_with("spec.placementGroupSelector") => {
            serde_json::json!("pg-0123456789abcdef0")
        }
        (_, "id") => serde_json::json!("cr-0123456789abcdef0"),
        (_, "name") => serde_json::json!("example"),
        (_, "ownerID") => serde_json::json!("123456789012"),
        (_, "instanceMatchCriteria") => serde_json::json!("open"),
        (_, "nestedVirtualization") => serde_json::json!("enabled"),
        (_, "tcpEstablishedTimeout") => serde_json::json!(432000),
        (_, "udpStreamTimeout") => serde_json::json!(180),
        (_, "udpTimeout") => serde_json::json!(30),
        (_, "volumeInitializationRate") => serde_json::json!(300),
        (_, "rootVolume") => serde_json::json!(true),
        (_, "enabled") => serde_json::json!(true),
        _ => panic!("{registry_path}: add a sample value for this field to the test"),
    }
}

/// Fields Karpenter requires beside a field (registry path, value).
fn companions(registry_path: &str) -> Vec<(&'static str, Value)> {
    match registry_path {
        "spec.blockDeviceMappings[].ebs.volumeInitializationRate" => vec![(
            "spec.blockDeviceMappings[].ebs.snapshotID",
            serde_json::json!("snap-0123456789abcdef0"),
        )],
        path if path.starts_with("spec.networkInterfaces[].") => [
            "spec.networkInterfaces[].deviceIndex",
            "spec.networkInterfaces[].networkCardIndex",
            "spec.networkInterfaces[].interfaceType",
        ]
        .into_iter()
        .map(|p| (p, sample_value(p)))
        .collect(),
        _ => Vec::new(),
    }
}

/// `object` with the registry field `registry_path` set (in the first element of each
/// list, under the key `example` of each map); returns the path as written.
fn set_field(object: &mut Value, registry_path: &str, value: Value) -> String {
    let mut at = object;
    let mut written = Vec::new();
    let segments: Vec<&str> = registry_path.split('.').collect();
    for (i, segment) in segments.iter().enumerate() {
        let (key, list) = match segment.strip_suffix("[]") {
            Some(key) => (key, true),
            None => (*segment, false),
        };
        let key = if key == "*" { "example" } else { key };
        let last = i + 1 == segments.len();
        let map = at.as_object_mut().expect("an object on the way");
        if list {
            let items = map.entry(key).or_insert_with(|| serde_json::json!([{}]));
            written.push(format!("{key}[0]"));
            at = &mut items.as_array_mut().expect("a list")[0];
        } else if last {
            map.insert(key.to_string(), value.clone());
            written.push(key.to_string());
            break;
        } else {
            written.push(key.to_string());
            at = map.entry(key).or_insert_with(|| serde_json::json!({}));
        }
    }
    written.join(".")
}

fn write_manifest(name: &str, objects: &[&Value]) -> String {
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("fields-{name}.yaml"));
    let text: Vec<String> = objects.iter().map(|o| o.to_string()).collect();
    std::fs::write(&path, text.join("\n---\n")).expect("write manifest");
    path.display().to_string()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn validate_names_every_ignored_field_present_with_why_and_still_exits_zero() {
    let mut checked = 0;
    for (kind, object) in [
        (Kind::NodePool, "NodePool \"web\""),
        (Kind::Ec2NodeClass, "EC2NodeClass \"default\""),
    ] {
        for field in fields(kind) {
            let Status::Ignored(why) = field.status else {
                continue;
            };
            let (mut pool, mut class) = base_manifests();
            let target = if kind == Kind::NodePool {
                &mut pool
            } else {
                &mut class
            };
            let written = set_field(target, field.path, sample_value(field.path));
            for (companion, value) in companions(field.path) {
                set_field(target, companion, value);
            }
            let file = write_manifest(&written.replace(['[', ']', '.'], "_"), &[&pool, &class]);

            let out = nodewright(&["validate", &file]);

            assert_eq!(
                out.status.code(),
                Some(0),
                "{}: {}",
                field.path,
                stderr(&out)
            );
            let expected = format!("{object}: {written}: not supported (ignored): {why}");
            let printed = stdout(&out);
            assert!(
                printed.lines().any(|l| l == expected),
                "{}: expected {expected:?} in\n{printed}",
                field.path
            );
            assert!(
                printed.contains("valid: 1 NodePool(s), 1 EC2NodeClass(es)"),
                "{printed}"
            );
            checked += 1;
        }
    }
    assert!(checked > 0, "the registry has ignored fields today");
}

#[test]
fn validate_with_fields_lists_honoured_fields_and_refuses_unknown_ones_unless_lenient() {
    let (mut pool, class) = base_manifests();
    pool["spec"]["weight"] = serde_json::json!(10);
    pool["spec"]["wieght"] = serde_json::json!(10);
    pool["spec"]["template"]["metadata"] = serde_json::json!({"annotations": {"team": "a"}});
    let file = write_manifest("unknown", &[&pool, &class]);
    let unknown = format!(
        "{file}: NodePool \"web\": spec.wieght: unknown field: not in Karpenter v1.15's CRD (did you mean \"weight\"?)"
    );

    let strict = nodewright(&["validate", &file]);
    assert_eq!(strict.status.code(), Some(1), "{}", stderr(&strict));
    assert_eq!(stderr(&strict).trim_end(), unknown);

    let quiet = nodewright(&["validate", "--lenient", &file]);
    assert_eq!(quiet.status.code(), Some(0), "{}", stderr(&quiet));
    assert_eq!(stderr(&quiet).trim_end(), format!("warning: {unknown}"));
    assert_eq!(
        stdout(&quiet).lines().next(),
        Some(
            "NodePool \"web\": spec.template.metadata.annotations.team: partly: in the drift hash (a change drifts nodes) but not written on the nodes"
        )
    );
    assert!(!stdout(&quiet).contains("honoured"), "{}", stdout(&quiet));

    let all = nodewright(&["validate", "--lenient", "--fields", &file]);
    assert_eq!(all.status.code(), Some(0));
    let printed = stdout(&all);
    for line in [
        "NodePool \"web\": spec.weight: honoured",
        "NodePool \"web\": spec.template.spec.requirements[0].operator: honoured",
        "EC2NodeClass \"default\": spec.blockDeviceMappings[0].ebs.volumeSize: honoured",
        "EC2NodeClass \"default\": spec.amiSelectorTerms[0].alias: honoured",
    ] {
        assert!(printed.lines().any(|l| l == line), "{line:?} in\n{printed}");
    }
}

#[test]
fn the_karpenter_example_manifests_validate_without_a_field_line() {
    for file in fixture_nodepools() {
        let f = file.display().to_string();
        let out = nodewright(&["validate", &f]);
        assert!(out.status.success(), "{f}: {}", stderr(&out));
        assert_eq!(stderr(&out), "", "{f}");
        let printed = stdout(&out);
        assert_eq!(
            printed.lines().count(),
            1,
            "{f}: only the summary line:\n{printed}"
        );
        assert!(printed.starts_with("valid: "), "{printed}");
    }
}

/// Static NodePools through `nodewright simulate`.
#[path = "cli/static_capacity.rs"]
mod static_capacity;

/// NodeOverlays through `validate`, `plan`, `disrupt` and `simulate`.
#[path = "cli/node_overlay.rs"]
mod node_overlay;

/// EC2NodeClass kubelet expressions through `validate` and `plan`.
#[path = "cli/kubelet_expressions.rs"]
mod kubelet_expressions;

/// CapacityBuffers through `validate`, `plan` and `disrupt`.
#[path = "cli/capacity_buffer.rs"]
mod capacity_buffer;

#[path = "cli/scheduler_gaps.rs"]
mod scheduler_gaps;

#[path = "cli/reservations.rs"]
mod reservations;

/// The default topology spread through `plan --scheduler-config`.
#[path = "cli/default_spread.rs"]
mod default_spread;

/// ARC zonal shifts through `plan --zonal-shift`.
#[path = "cli/zonal_shift.rs"]
mod zonal_shift;

/// `nodewright disrupt`, the dry-run disruption contract.
#[path = "cli/disrupt.rs"]
mod disrupt;

/// Scheduling fidelity through `nodewright plan`.
#[path = "cli/fidelity.rs"]
mod fidelity;

/// The plan's instance type options.
#[path = "cli/options.rs"]
mod options;

/// The manifests the tests' NodePools refer to.
#[path = "cli/manifests.rs"]
mod manifests;

/// Files held to Karpenter's CRDs as the API server holds them, and `--lenient`.
#[path = "cli/strict.rs"]
mod strict;

/// `-o json|yaml|wide`, `explain node` by claim or instance id, errors that say what
/// to set, prices for people.
#[path = "cli/kubectl.rs"]
mod kubectl;

/// `simulate --kubeconfig`: from a real API server's objects, lists only.
#[cfg(feature = "stack")]
#[path = "cli/live_cluster.rs"]
mod live_cluster;

/// An m5.xlarge attaches 25 EBS volumes for pods: 30 pods of one volume each need two,
/// however little else they ask.
#[test]
fn plan_launches_a_second_node_when_the_pods_ebs_volumes_outnumber_what_the_type_attaches() {
    let mut items = vec![serde_json::json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "gp3"},
        "provisioner": "ebs.csi.aws.com", "volumeBindingMode": "WaitForFirstConsumer"})];
    for i in 0..30 {
        items.push(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("db-{i}"), "namespace": "default"},
            "spec": {
                "containers": [{"name": "db", "image": "postgres",
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}],
                "volumes": [{"name": "data",
                    "persistentVolumeClaim": {"claimName": format!("data-db-{i}")}}]},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}}));
        items.push(serde_json::json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": format!("data-db-{i}"), "namespace": "default"},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "gp3",
                "resources": {"requests": {"storage": "10Gi"}}}}));
    }
    let pools = std::fs::read_to_string(general_purpose_nodepool())
        .unwrap()
        .replace(
            "requirements:",
            "requirements:\n        - key: node.kubernetes.io/instance-type\n          operator: In\n          values: [\"m5.xlarge\"]",
        );
    let pools = temp_file("pools.yaml", &pools);
    let json = plan_json(&[
        "--nodepools",
        &pools.display().to_string(),
        "--snapshot",
        &snapshot_file(items),
    ]);
    let mut pods: Vec<usize> = json["nodeClaims"]
        .as_array()
        .expect("claims")
        .iter()
        .map(|c| c["pods"].as_array().map_or(0, Vec::len))
        .collect();
    pods.sort();
    assert_eq!(pods, [5, 25], "{json}");
}
