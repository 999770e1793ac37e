//! The interruption binary's cold start, as Lambda runs it: a bad setting ends the
//! process with a failure code and one timestamped log line naming the setting, and is
//! posted to the Runtime API's init-error endpoint with a stable `errorType`.

use nodewright_lambda::testing::{RecordedRequest, assert_init_error_reported};

/// Runs the interruption binary with only `vars` (and the stand-in Runtime API) in its environment.
fn cold_start(vars: &[(&str, &str)]) -> (std::process::Output, Vec<RecordedRequest>) {
    nodewright_lambda::testing::cold_start(env!("CARGO_BIN_EXE_interruption"), vars)
}

#[test]
fn a_malformed_setting_fails_the_cold_start_with_one_line_naming_it() {
    let (out, requests) = cold_start(&[
        ("NODEWRIGHT_CLUSTER_NAME", "prod"),
        ("NODEWRIGHT_TABLE_NAME", "nw"),
        ("NODEWRIGHT_REBALANCE_ACTION", "panic"),
    ]);
    assert_init_error_reported(
        &out,
        &requests,
        "Config.Malformed",
        r#"NODEWRIGHT_REBALANCE_ACTION="panic": ignore, cordon or replace"#,
    );
}
