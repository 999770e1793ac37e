//! The provisioner binary's cold start, as Lambda runs it: a bad setting ends the
//! process with a failure code and one timestamped log line naming the setting, and is
//! posted to the Runtime API's init-error endpoint with a stable `errorType`.

use std::process::{Command, Output};

use nodewright_lambda::testing::{RecordedRequest, RuntimeApiStub};
use serde_json::{Value, json};

/// Runs the binary with only `vars` (and the stand-in Runtime API) in its environment.
fn cold_start(vars: &[(&str, &str)]) -> (Output, Vec<RecordedRequest>) {
    let api = RuntimeApiStub::start();
    let output = Command::new(env!("CARGO_BIN_EXE_provisioner"))
        .env_clear()
        .env("AWS_LAMBDA_RUNTIME_API", api.address())
        .envs(vars.iter().copied())
        .output()
        .expect("run the provisioner binary");
    (output, api.requests())
}

fn starts_with_a_timestamp(line: &str) -> bool {
    let time = line.split(' ').next().unwrap_or("");
    time.len() >= 20 && time.ends_with('Z') && time.as_bytes()[10] == b'T'
}

#[test]
fn a_malformed_setting_fails_the_cold_start_with_one_line_naming_it() {
    let (out, requests) = cold_start(&[
        ("NODEWRIGHT_CLUSTER_NAME", "prod"),
        ("NODEWRIGHT_TABLE_NAME", "nw"),
        ("NODEWRIGHT_POLL_INTERVAL", "5 seconds"),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stdout}{stderr}");
    assert_eq!(stderr, "", "no Debug dump on stderr");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{stdout}");
    let line = lines[0];
    assert!(starts_with_a_timestamp(line), "{line}");
    assert!(line.contains("ERROR"), "{line}");
    assert!(line.contains("Config.Malformed"), "{line}");
    assert!(
        line.contains(
            r#"NODEWRIGHT_POLL_INTERVAL="5 seconds": a duration between 1s and 60s, like "5s""#
        ),
        "{line}"
    );

    assert_eq!(requests.len(), 1, "{requests:?}");
    let r = &requests[0];
    assert_eq!(
        (r.method.as_str(), r.path.as_str()),
        ("POST", "/2018-06-01/runtime/init/error")
    );
    assert_eq!(
        r.header("Lambda-Runtime-Function-Error-Type"),
        Some("Config.Malformed")
    );
    let body: Value = serde_json::from_str(&r.body).expect("JSON body");
    assert_eq!(
        body,
        json!({
            "errorType": "Config.Malformed",
            "errorMessage": r#"NODEWRIGHT_POLL_INTERVAL="5 seconds": a duration between 1s and 60s, like "5s""#,
        })
    );
}

#[test]
fn a_missing_setting_is_logged_as_one_json_line_when_lambda_asks_for_json() {
    let (out, requests) = cold_start(&[
        ("NODEWRIGHT_TABLE_NAME", "nw"),
        ("AWS_LAMBDA_LOG_FORMAT", "JSON"),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    let line: Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
    assert!(
        line["timestamp"]
            .as_str()
            .is_some_and(starts_with_a_timestamp),
        "{line}"
    );
    assert_eq!(line["level"], "ERROR");
    assert_eq!(line["fields"]["error_type"], "Config.Missing");
    assert_eq!(
        line["fields"]["error"],
        "NODEWRIGHT_CLUSTER_NAME is not set (required)"
    );
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(
        requests[0].header("Lambda-Runtime-Function-Error-Type"),
        Some("Config.Missing")
    );
}
