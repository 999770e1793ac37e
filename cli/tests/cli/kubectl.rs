//! The CLI as a kubectl user expects it: `-o json|yaml|wide` wherever there is output,
//! `explain node` by node, claim or instance id, errors that say what to set, prices
//! for people.

use serde_json::Value;

use super::{data, example, json_of, live_claims, nodewright, saved_run, stderr, temp_file};

fn stdout_of(args: &[&str]) -> String {
    let out = nodewright(args);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn yaml_of(args: &[&str]) -> Value {
    serde_yaml_ng::from_str(&stdout_of(args)).expect("prints YAML")
}

/// Every number in `value` that is not an integer has at most 4 decimals as written.
fn assert_prices_for_people(value: &Value, text: &str) {
    match value {
        Value::Number(n) if n.is_f64() => {
            let written = n.to_string();
            let decimals = written.split_once('.').map_or(0, |(_, d)| d.len());
            assert!(decimals <= 4, "{written} in {text}");
        }
        Value::Array(items) => items.iter().for_each(|v| assert_prices_for_people(v, text)),
        Value::Object(map) => map.values().for_each(|v| assert_prices_for_people(v, text)),
        _ => {}
    }
}

#[test]
fn plan_validate_status_and_explain_print_the_same_document_with_o_json_and_o_yaml() {
    let plan = [
        "plan",
        "--nodepools",
        &example("nodepools.yaml"),
        "--snapshot",
        &example("snapshot.json"),
    ];
    let (saved, path) = saved_run(None);
    let node = live_claims(&saved)[0]["nodeName"]
        .as_str()
        .unwrap()
        .to_string();
    let validate = ["validate", &example("nodepools.yaml")];
    let status = ["status", "--from", &path];
    let explain = ["explain", "node", &node, "--from", &path];
    for command in [&plan[..], &validate[..], &status[..], &explain[..]] {
        let json = json_of(&[command, &["-o", "json"]].concat());
        let yaml = yaml_of(&[command, &["--output", "yaml"]].concat());
        assert_eq!(json, yaml, "{command:?}");
        assert_prices_for_people(&json, &format!("{command:?}"));
    }
    let validated = json_of(&[&validate[..], &["-o", "json"]].concat());
    assert_eq!(
        validated["nodePools"].as_array().map(Vec::len),
        Some(4),
        "{validated}"
    );
    assert_eq!(validated["ec2NodeClasses"], serde_json::json!(["default"]));
}

#[test]
fn simulate_and_event_take_o_yaml_too() {
    let yaml = yaml_of(&["simulate", "--until", "10m", "-o", "yaml"]);
    assert!(yaml["summary"].is_object(), "{yaml}");
    assert_prices_for_people(&yaml, "simulate");
    let event = yaml_of(&[
        "event",
        &super::event_fixture("spot-interruption.json"),
        "-o",
        "yaml",
    ]);
    assert_eq!(event["kind"], "spotInterruption");
}

#[test]
fn o_wide_adds_columns_where_there_are_more_and_is_refused_where_there_are_none() {
    let plan = stdout_of(&[
        "plan",
        "--nodepools",
        &example("nodepools.yaml"),
        "--snapshot",
        &example("snapshot.json"),
        "-o",
        "wide",
    ]);
    let header = plan.lines().next().unwrap();
    assert!(
        header.contains("COMPATIBLE") && header.contains("CHEAPEST OPTIONS"),
        "{plan}"
    );
    let (_, path) = saved_run(None);
    let status = stdout_of(&["status", "--from", &path, "-o", "wide"]);
    assert!(status.contains("INSTANCE ID"), "{status}");
    assert!(status.contains(" i-"), "{status}");
    let fields = stdout_of(&["validate", &example("nodepools.yaml"), "-o", "wide"]);
    assert!(
        fields.contains(": honoured"),
        "-o wide lists every field: {fields}"
    );

    let out = nodewright(&["explain", "nodepool", "spot", "--from", &path, "-o", "wide"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out).trim_end(),
        "nodewright: explain: -o wide has nothing more to show here; use -o table, -o json or -o yaml"
    );
    let out = nodewright(&["simulate", "-o", "wide"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("'wide'"), "{}", stderr(&out));
}

#[test]
fn explain_finds_a_node_by_its_node_claim_name_or_its_instance_id() {
    let (saved, path) = saved_run(None);
    let claim = live_claims(&saved)
        .into_iter()
        .find(|c| c["nodeName"].is_string() && c["instanceId"].is_string())
        .expect("a live claim with a node and an instance");
    let node = claim["nodeName"].as_str().unwrap();
    let by_node = json_of(&["explain", "node", node, "--from", &path, "-o", "json"]);
    for key in ["name", "instanceId"] {
        let name = claim[key].as_str().unwrap();
        let e = json_of(&["explain", "node", name, "--from", &path, "-o", "json"]);
        assert_eq!(e, by_node, "explain node {name}");
    }
}

#[test]
fn explain_of_a_terminated_node_says_it_is_gone_not_that_it_is_being_taken_away() {
    let (saved, path) = saved_run(None);
    let gone = saved["claims"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["state"] == "Terminated" && c["nodeName"].is_string())
        .find(|c| !c["disruption"].is_null())
        .expect("a claim terminated after a disruption");
    let name = gone["name"].as_str().unwrap();
    let e = json_of(&["explain", "node", name, "--from", &path, "-o", "json"]);
    let summary = e["summary"].as_str().unwrap();
    assert!(summary.starts_with("gone: its claim is Terminated"), "{e}");
    assert!(!summary.contains("being taken away"), "{e}");
}

/// The environment of a user with no AWS region anywhere.
fn without_aws(cmd: &mut std::process::Command, home: &std::path::Path) {
    for var in [
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_PROFILE",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_ENDPOINT_URL",
        "KUBECONFIG",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("HOME", home)
        .env("AWS_CONFIG_FILE", home.join("no-config"))
        .env("AWS_SHARED_CREDENTIALS_FILE", home.join("no-credentials"))
        .env("AWS_EC2_METADATA_DISABLED", "true");
}

#[test]
fn a_deployed_stack_read_without_a_region_or_a_kubeconfig_says_what_to_set_in_one_line() {
    let kubeconfig = temp_file(
        "kubeconfig",
        "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n",
    );
    let home = kubeconfig.parent().unwrap().to_path_buf();
    let run = |args: &[&str], region: Option<&str>| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_nodewright"));
        cmd.args(args);
        without_aws(&mut cmd, &home);
        if let Some(r) = region {
            cmd.env("AWS_REGION", r);
        }
        cmd.output().expect("run nodewright")
    };
    let k = kubeconfig.display().to_string();
    let out = run(&["status", "--table", "t", "--kubeconfig", &k], None);
    if !cfg!(feature = "stack") {
        // A build without the `stack` feature says which command reads a stack.
        super::assert_unusable(
            &out,
            &[&format!(
                "run `cargo run --release -p nodewright-cli --features stack -- status --table t --kubeconfig {k}`"
            )],
        );
        return;
    }
    super::assert_unusable(&out, &["no AWS region: set AWS_REGION or --region"]);
    assert!(
        !stderr(&out).contains("DispatchFailure"),
        "{}",
        stderr(&out)
    );

    let out = run(&["status", "--table", "t"], Some("us-east-1"));
    super::assert_unusable(
        &out,
        &[
            "no kubeconfig at ",
            ".kube/config: set KUBECONFIG or --kubeconfig",
        ],
    );
    // A kubeconfig with no current context cannot be used: one line, what to set.
    let out = run(
        &[
            "explain",
            "node",
            "x",
            "--table",
            "t",
            "--kubeconfig",
            &k,
            "--region",
            "us-east-1",
        ],
        None,
    );
    super::assert_unusable(
        &out,
        &[&format!("kubeconfig {k} cannot be used"), "set KUBECONFIG"],
    );
}

#[test]
fn prices_in_tables_never_read_minus_zero_and_json_has_four_decimals() {
    let args = [
        "plan",
        "--nodepools",
        &example("nodepools.yaml"),
        "--snapshot",
        &data("nothing-pending.json"),
    ];
    let table = stdout_of(&args);
    assert!(!table.contains("-0.0"), "{table}");
    let plan = json_of(&[&args[..], &["-o", "json"]].concat());
    assert_prices_for_people(&plan, "plan");
}
