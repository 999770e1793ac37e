//! How failures reach Lambda and the logs: one line each (the error's text and its
//! sources), with a stable `errorType` to alarm and search on.
//!
//! - A failed cold start ([`run_or_report_init_error`]) is logged, posted to the Runtime
//!   API's `/runtime/init/error` and ends the process with a failure exit code, so
//!   Lambda reports `Config.Malformed: NODEWRIGHT_POLL_INTERVAL="5 seconds": ...`
//!   rather than a Rust `Debug` dump.
//! - A failed invocation returns a [`HandlerError`]: lambda_runtime turns it into the
//!   invocation's `errorType` and `errorMessage`, and logs its `Debug`, which is the
//!   same line (the derived `Debug` of an AWS SDK error carries the raw HTTP response,
//!   headers and all).

use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::process::ExitCode;

use http::Method;
use http::header::CONTENT_TYPE;
use lambda_runtime::Diagnostic;
use lambda_runtime_api_client::body::Body;
use lambda_runtime_api_client::{BoxError, PooledClient, build_request};
use nodewright_engine::EngineError;
use nodewright_engine::ports::ErrorKind;
use tracing::error;

use crate::StartupError;

/// Where a runtime reports a failed initialization (Lambda Runtime API 2018-06-01).
pub const INIT_ERROR_PATH: &str = "/2018-06-01/runtime/init/error";
/// The header naming the error type on the Runtime API's error endpoints.
pub const ERROR_TYPE_HEADER: &str = "Lambda-Runtime-Function-Error-Type";

/// An error and its sources on one line: "outer: inner: innermost". A source whose
/// text the line already carries is left out (a port error's message already quotes
/// the AWS error code and message it wraps), and line breaks become spaces.
pub fn one_line(error: &(dyn StdError + 'static)) -> String {
    let mut line = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        let text = e.to_string();
        if !text.trim().is_empty() && !line.contains(text.trim()) {
            line.push_str(": ");
            line.push_str(text.trim());
        }
        source = e.source();
    }
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The error a handler returns: a stable `errorType` and the one-line message.
pub struct HandlerError {
    error_type: String,
    message: String,
}

impl HandlerError {
    pub fn new(error_type: impl Into<String>, error: &(dyn StdError + 'static)) -> Self {
        HandlerError {
            error_type: error_type.into(),
            message: one_line(error),
        }
    }

    /// `Store.Throttled`, `Cluster.Unavailable`, `Cloud.Unauthorized`, `LeaseLost`...
    pub fn error_type(&self) -> &str {
        &self.error_type
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

/// The `errorType` of an engine error: the port and the kind of its error
/// (`Store.NotFound`), or the engine's own reason (`LeaseLost`, `NotOwned`...).
pub fn engine_error_type(error: &EngineError) -> String {
    let port = |port: &str, kind: ErrorKind| format!("{port}.{}", kind_name(kind));
    match error {
        EngineError::Cloud(e) => port("Cloud", e.kind),
        EngineError::Cluster(e) => port("Cluster", e.kind),
        EngineError::Store(e) => port("Store", e.kind),
        EngineError::LeaseLost { .. } => "LeaseLost".into(),
        EngineError::Transition(_) => "Transition".into(),
        EngineError::NotOwned { .. } => "NotOwned".into(),
        EngineError::NoFreeName { .. } => "NoFreeName".into(),
    }
}

/// Spelled out here, not taken from `Debug`, so that renaming a variant cannot
/// silently change what alarms match on.
fn kind_name(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Throttled => "Throttled",
        ErrorKind::NotFound => "NotFound",
        ErrorKind::Conflict => "Conflict",
        ErrorKind::InsufficientCapacity => "InsufficientCapacity",
        ErrorKind::Unauthorized => "Unauthorized",
        ErrorKind::Invalid => "Invalid",
        ErrorKind::Unavailable => "Unavailable",
        ErrorKind::DisruptionBudget => "DisruptionBudget",
        ErrorKind::Other => "Other",
    }
}

impl From<EngineError> for HandlerError {
    fn from(error: EngineError) -> Self {
        HandlerError::new(engine_error_type(&error), &error)
    }
}

impl From<HandlerError> for Diagnostic {
    fn from(error: HandlerError) -> Diagnostic {
        Diagnostic {
            error_type: error.error_type,
            error_message: error.message,
        }
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// lambda_runtime logs a handler's error with `Debug`: the same one line, typed.
impl fmt::Debug for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.error_type, self.message)
    }
}

impl StdError for HandlerError {}

/// Runs a function: `init` once (the cold start), then `serve` with what it built.
///
/// If `init` fails, the error is logged on one line with its `errorType`, posted to
/// the Runtime API's init-error endpoint (when `AWS_LAMBDA_RUNTIME_API` is set, as it
/// is under Lambda), and the process is to exit with the returned failure code. If the
/// runtime itself stops with an error, that is logged the same way.
pub async fn run_or_report_init_error<H, S>(
    init: impl Future<Output = Result<H, StartupError>>,
    serve: impl FnOnce(H) -> S,
) -> ExitCode
where
    S: Future<Output = Result<(), lambda_runtime::Error>>,
{
    let handler = match init.await {
        Ok(handler) => handler,
        Err(e) => {
            let api = std::env::var("AWS_LAMBDA_RUNTIME_API").ok();
            report_init_error(api.as_deref().filter(|a| !a.is_empty()), &e).await;
            return ExitCode::FAILURE;
        }
    };
    match serve(handler).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error!(error = %one_line(e.as_ref()), "the Lambda runtime stopped");
            ExitCode::FAILURE
        }
    }
}

/// Logs a failed cold start and, given the Runtime API's address (`host:port`),
/// posts it to `/runtime/init/error`.
pub async fn report_init_error(runtime_api: Option<&str>, error: &StartupError) {
    let error_type = error.error_type();
    let message = one_line(error);
    error!(error_type = %error_type, error = %message, "cold start failed");
    let Some(api) = runtime_api else {
        return;
    };
    if let Err(e) = post_init_error(api, error_type, &message).await {
        error!(runtime_api = api, error = %one_line(e.as_ref()),
            "could not report the failed cold start to the Lambda Runtime API");
    }
}

async fn post_init_error(api: &str, error_type: &str, message: &str) -> Result<(), BoxError> {
    let client = PooledClient::builder()
        .with_endpoint(format!("http://{api}").parse()?)
        .build();
    let body = serde_json::to_vec(&Diagnostic {
        error_type: error_type.to_string(),
        error_message: message.to_string(),
    })?;
    let request = build_request()
        .method(Method::POST)
        .uri(INIT_ERROR_PATH)
        .header(ERROR_TYPE_HEADER, error_type)
        .header(CONTENT_TYPE, "application/json")
        .body(Body::from(body))?;
    let status = client.call(request).await?.status();
    if !status.is_success() {
        return Err(format!("{INIT_ERROR_PATH} answered {status}").into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use nodewright_core::nodeclaim::{ClaimState, TransitionError};
    use nodewright_engine::ports::{ClusterError, StoreError};

    use super::*;
    use crate::ConfigError;
    use crate::testing::RuntimeApiStub;

    /// An error like an SDK's: a generic text, its cause underneath.
    #[derive(Debug)]
    struct Wrapper(&'static str, Option<Box<dyn StdError + Send + Sync>>);
    impl fmt::Display for Wrapper {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }
    impl StdError for Wrapper {
        fn source(&self) -> Option<&(dyn StdError + 'static)> {
            self.1.as_deref().map(|e| e as &(dyn StdError + 'static))
        }
    }

    #[test]
    fn one_line_joins_the_sources_leaves_out_repeats_and_line_breaks() {
        let inner = Wrapper(
            "ResourceNotFoundException: Requested resource not found",
            None,
        );
        let sdk = Wrapper("service error", Some(Box::new(inner)));
        let store = StoreError::with_source(
            ErrorKind::NotFound,
            "GetItem claim a: ResourceNotFoundException: Requested resource not found",
            sdk,
        );
        assert_eq!(
            one_line(&store),
            "store not found: GetItem claim a: ResourceNotFoundException: Requested resource not found: service error"
        );
        let multi = Wrapper("first\n  second\n", None);
        assert_eq!(one_line(&multi), "first second");
    }

    #[test]
    fn each_engine_error_has_a_stable_error_type() {
        let store = |kind| EngineError::Store(StoreError::new(kind, "PutItem claim a"));
        let cases: Vec<(EngineError, &str)> = vec![
            (store(ErrorKind::Throttled), "Store.Throttled"),
            (store(ErrorKind::NotFound), "Store.NotFound"),
            (
                EngineError::Cluster(ClusterError::new(ErrorKind::Unavailable, "list pods")),
                "Cluster.Unavailable",
            ),
            (
                EngineError::Cloud(nodewright_engine::ports::CloudError::new(
                    ErrorKind::Unauthorized,
                    "CreateFleet",
                )),
                "Cloud.Unauthorized",
            ),
            (
                EngineError::Cloud(nodewright_engine::ports::CloudError::new(
                    ErrorKind::InsufficientCapacity,
                    "CreateFleet",
                )),
                "Cloud.InsufficientCapacity",
            ),
            (
                EngineError::LeaseLost {
                    name: "provisioner".into(),
                    source: StoreError::new(ErrorKind::Conflict, "renew"),
                },
                "LeaseLost",
            ),
            (
                EngineError::NotOwned {
                    claim: "a".into(),
                    instance: "i-1".into(),
                },
                "NotOwned",
            ),
            (
                EngineError::Transition(TransitionError {
                    name: "a".into(),
                    from: ClaimState::Launching,
                    to: ClaimState::Initialized,
                }),
                "Transition",
            ),
            (
                EngineError::NoFreeName {
                    pool: "default".into(),
                    attempts: 3,
                },
                "NoFreeName",
            ),
        ];
        for (error, expected) in cases {
            let text = one_line(&error);
            let handler = HandlerError::from(error);
            assert_eq!(handler.error_type(), expected);
            assert_eq!(handler.message(), text);
            let diagnostic = Diagnostic::from(handler);
            assert_eq!(diagnostic.error_type, expected);
            assert_eq!(diagnostic.error_message, text);
        }
    }

    #[test]
    fn a_handler_error_logs_as_its_type_and_one_line_not_as_a_debug_dump() {
        let error = EngineError::LeaseLost {
            name: "provisioner".into(),
            source: StoreError::new(ErrorKind::Conflict, "UpdateItem lease provisioner"),
        };
        let handler = HandlerError::from(error);
        assert_eq!(
            format!("{handler:?}"),
            "LeaseLost: lease \"provisioner\" was lost during the tick (another holder took it): \
             store conflict: UpdateItem lease provisioner"
        );
        assert_eq!(format!("{handler}"), handler.message());
    }

    #[test]
    fn startup_errors_have_stable_error_types() {
        let cluster = || ClusterError::new(ErrorKind::NotFound, "DescribeCluster prod");
        let cases = [
            (
                StartupError::from(ConfigError::Missing("NODEWRIGHT_CLUSTER_NAME")),
                "Config.Missing",
            ),
            (
                StartupError::from(ConfigError::Malformed {
                    name: "NODEWRIGHT_DRY_RUN",
                    value: "maybe".into(),
                    expected: "true or false",
                }),
                "Config.Malformed",
            ),
            (
                StartupError::Eks {
                    cluster: "prod".into(),
                    source: cluster(),
                },
                "Startup.Eks",
            ),
            (StartupError::Kubernetes(cluster()), "Startup.Kubernetes"),
        ];
        for (error, expected) in cases {
            assert_eq!(error.error_type(), expected, "{error}");
        }
    }

    #[tokio::test]
    async fn a_failed_cold_start_is_posted_to_the_init_error_endpoint_with_its_type() {
        let api = RuntimeApiStub::start();
        let error = StartupError::from(ConfigError::Malformed {
            name: "NODEWRIGHT_POLL_INTERVAL",
            value: "5 seconds".into(),
            expected: "a duration between 1s and 60s, like \"5s\"",
        });

        report_init_error(Some(&api.address()), &error).await;

        let requests = api.requests();
        assert_eq!(requests.len(), 1, "{requests:?}");
        let r = &requests[0];
        assert_eq!(
            (r.method.as_str(), r.path.as_str()),
            ("POST", "/2018-06-01/runtime/init/error")
        );
        assert_eq!(
            r.header("lambda-runtime-function-error-type"),
            Some("Config.Malformed")
        );
        let body: serde_json::Value = serde_json::from_str(&r.body).expect("a JSON body");
        assert_eq!(
            body,
            serde_json::json!({
                "errorType": "Config.Malformed",
                "errorMessage": "NODEWRIGHT_POLL_INTERVAL=\"5 seconds\": a duration between 1s and 60s, like \"5s\"",
            })
        );
    }

    #[tokio::test]
    async fn a_failed_init_ends_with_a_failure_code_and_never_serves() {
        let code = run_or_report_init_error(
            async {
                Err::<(), _>(StartupError::from(ConfigError::Missing(
                    "NODEWRIGHT_TABLE_NAME",
                )))
            },
            |()| async { panic!("served after a failed init") },
        )
        .await;
        assert_eq!(format!("{code:?}"), format!("{:?}", ExitCode::FAILURE));
    }
}
