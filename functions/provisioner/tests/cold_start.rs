//! The provisioner binary's cold start, as Lambda runs it: a bad setting ends the
//! process with a failure code and one timestamped log line naming the setting, and is
//! posted to the Runtime API's init-error endpoint with a stable `errorType`.

use nodewright_lambda::testing::{
    RecordedRequest, assert_init_error_reported, starts_with_a_timestamp,
};
use serde_json::Value;

/// Runs the provisioner binary with only `vars` (and the stand-in Runtime API) in its environment.
fn cold_start(vars: &[(&str, &str)]) -> (std::process::Output, Vec<RecordedRequest>) {
    nodewright_lambda::testing::cold_start(env!("CARGO_BIN_EXE_provisioner"), vars)
}

#[test]
fn a_malformed_setting_fails_the_cold_start_with_one_line_naming_it() {
    let (out, requests) = cold_start(&[
        ("NODEWRIGHT_CLUSTER_NAME", "prod"),
        ("NODEWRIGHT_TABLE_NAME", "nw"),
        ("NODEWRIGHT_POLL_INTERVAL", "5 seconds"),
    ]);
    assert_init_error_reported(
        &out,
        &requests,
        "Config.Malformed",
        r#"NODEWRIGHT_POLL_INTERVAL="5 seconds": a duration between 1s and 60s, like "5s""#,
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
