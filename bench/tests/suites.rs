//! Every planner suite of `nodewright-bench` run as a user runs it, at a tiny size: the
//! subcommands parse, measure and exit 0 (a target missed at this size is a figure, not
//! a failure). The whole-command suites run the `nodewright` built beside this binary.

use std::path::PathBuf;
use std::process::Command;

fn bench(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_nodewright-bench"))
        .args(args)
        .output()
        .expect("nodewright-bench runs");
    assert!(
        out.status.success(),
        "nodewright-bench {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `nodewright` from the same build (`cargo test --workspace` builds it): the bench's
/// own default is the release build, which a test run does not make.
fn nodewright() -> String {
    let dir = PathBuf::from(env!("CARGO_BIN_EXE_nodewright-bench"));
    let path = dir.with_file_name(format!("nodewright{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.is_file(),
        "{} is missing: build the workspace (`cargo build --workspace`)",
        path.display()
    );
    path.display().to_string()
}

#[test]
fn the_in_process_suites_run_at_a_tiny_size() {
    let synthetic = bench(&["synthetic", "--sizes", "1,30"]);
    assert!(synthetic.contains("Karpenter's makeDiversePods") && synthetic.contains("five-group"));
    assert!(bench(&["real", "--sizes", "30"]).contains("== real"));
    assert!(bench(&["memory", "--pods", "50"]).contains("peak RSS after planning"));
    assert!(bench(&["prepared", "--nodes", "10"]).contains("1-node removal"));
}

#[test]
fn json_output_is_one_object_per_line() {
    let out = bench(&["synthetic", "--sizes", "20", "--shape", "five", "--json"]);
    let records: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON object per line"))
        .collect();
    assert!(
        records
            .iter()
            .any(|r| r["suite"] == "synthetic" && r["pods"] == 20)
    );
}

#[test]
fn the_whole_command_suites_run_nodewright_at_a_tiny_size() {
    let binary = nodewright();
    let plan = bench(&[
        "command",
        "--binary",
        &binary,
        "--runs",
        "1",
        "--pending",
        "40",
        "--nodes",
        "3",
    ]);
    assert!(plan.contains("Karpenter's shape, 40 pending"), "{plan}");
    assert!(plan.contains("cluster: 3 nodes, 75 pods bound"), "{plan}");
    let disrupt = bench(&["disrupt", "--binary", &binary, "--nodes", "6"]);
    assert!(disrupt.contains("read snapshot and manifests"), "{disrupt}");
}

/// The Lambda suite at a tiny size: both functions built beside this binary (a debug
/// build: its figures mean nothing here, the path does) run in turn on one world
/// against moto and a real control plane, authenticated as the `nodewright` user, which
/// RBAC lets do all it asks.
#[test]
#[ignore = "needs moto: run through tests/moto.sh"]
fn the_lambda_suite_runs_each_function_against_moto_and_a_real_control_plane() {
    let bench_binary = PathBuf::from(env!("CARGO_BIN_EXE_nodewright-bench"));
    let functions = ["provisioner", "disruption"];
    let binaries: Vec<String> = functions
        .iter()
        .map(|function| {
            let binary =
                bench_binary.with_file_name(format!("{function}{}", std::env::consts::EXE_SUFFIX));
            assert!(
                binary.is_file(),
                "{} is missing: build it (`cargo build -p nodewright-{function}`)",
                binary.display()
            );
            binary.display().to_string()
        })
        .collect();
    let dir = std::env::temp_dir().join(format!("nodewright-bench-suite-{}", std::process::id()));
    let out = bench(&[
        "lambda",
        "--function",
        &functions.join(","),
        "--binary",
        &binaries.join(","),
        "--nodes",
        "4",
        "--invocations",
        "1",
        "--gap",
        "0",
        "--dir",
        &dir.display().to_string(),
    ]);
    assert!(out.contains("4 nodes, 100 pods"), "{out}");
    assert!(out.contains("loaded through the API"), "{out}");
    let figures: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dir.join("provisioner-disruption-quiet.json")).expect("the figures"),
    )
    .expect("JSON figures");
    let runs = figures["runs"].as_array().expect("runs");
    let ran: Vec<&str> = runs
        .iter()
        .map(|r| r["function"].as_str().unwrap())
        .collect();
    assert_eq!(
        ran, functions,
        "each function, in the order given, on the one world"
    );
    for run in runs {
        for invocation in run["invocations"].as_array().unwrap() {
            assert!(invocation["error"].is_null(), "{invocation}");
            for call in invocation["kubernetes"]["calls"].as_array().unwrap() {
                assert_eq!(call["errors"], 0, "refused: {call}");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two binaries for one function cannot be matched to what they run.
#[test]
fn the_lambda_suite_refuses_binaries_that_do_not_match_the_functions() {
    let out = Command::new(env!("CARGO_BIN_EXE_nodewright-bench"))
        .args(["lambda", "--function", "provisioner", "--binary", "a,b"])
        .env("NODEWRIGHT_MOTO_URL", "http://127.0.0.1:1")
        .output()
        .expect("the bench runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--binary: give one path per --function (1 functions, 2 binaries)"),
        "{stderr}"
    );
}
