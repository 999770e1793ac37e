//! nodewright-lambda: what every Lambda main shares, so each main stays a few lines.
//!
//! - [`config`]: [`Config::from_env`], every setting in one place.
//! - [`wire`]: the engine's ports over the real adapters — DynamoDB and EC2 from the
//!   SDK's standard environment (`AWS_ENDPOINT_URL` points them at an emulator), and
//!   Kubernetes from EKS (DescribeCluster + IAM token) or, for local runs, a kubeconfig.
//! - [`report`]: failures as Lambda shows them — one line and a stable `errorType`:
//!   [`run_or_report_init_error`] for the cold start, [`HandlerError`] for invocations.
//! - [`metrics`]: CloudWatch metrics in the Embedded Metric Format, named after
//!   Karpenter's, built from the jobs' reports.
//! - [`heap`]: the heap counted ([`heap::CountingAllocator`], each main's allocator),
//!   for the invocations' summaries.
//! - [`logging`]: [`init_tracing`], timestamped logs, JSON when Lambda asks for them
//!   (`AWS_LAMBDA_LOG_FORMAT`).

// A Lambda function must unwind: lambda_runtime turns a handler's panic into that one
// invocation's error only if the panic unwinds to it; with panic=abort the process dies
// with the whole batch. See `[profile.release]` in the workspace Cargo.toml.
#[cfg(panic = "abort")]
compile_error!(
    "nodewright's Lambda functions must be built with panic = \"unwind\" \
     (cargo lambda adds panic=\"abort\" unless [profile.release] sets panic)"
);

pub mod config;
pub mod heap;
pub mod logging;
pub mod metrics;
pub mod report;
#[cfg(any(test, feature = "test-support"))]
pub mod testing;
pub mod wire;

pub use config::{Config, ConfigError};
pub use logging::init_tracing;
pub use report::{HandlerError, run_or_report_init_error};
pub use wire::{StartupError, build_ports};

/// Who holds a lease: the Lambda execution environment (its log stream is unique to
/// it), or the host and process for local runs.
pub fn holder_id() -> String {
    std::env::var("AWS_LAMBDA_LOG_STREAM_NAME")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| format!("local-{}", std::process::id()))
}
