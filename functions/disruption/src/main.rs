//! The disruption Lambda: configuration and ports are built once per cold start; each
//! scheduled invocation decides once (`Handler::handle`) and exits. A failed cold
//! start is reported to Lambda on one line with its `errorType`.

use std::process::ExitCode;

use lambda_runtime::service_fn;
use nodewright_disruption::Handler;
use nodewright_lambda::{
    Config, StartupError, heap, holder_id, init_tracing, run_or_report_init_error,
};

/// Counted, so each invocation's summary says what the process holds between
/// invocations and what the invocation needed on top ([`heap`]).
#[global_allocator]
static ALLOCATOR: heap::CountingAllocator = heap::CountingAllocator;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    init_tracing();
    run_or_report_init_error(handler(), |handler| async move {
        heap::mark_baseline();
        lambda_runtime::run(service_fn(|event| handler.handle(event))).await
    })
    .await
}

async fn handler() -> Result<Handler, StartupError> {
    Handler::from_config(&Config::from_env()?, holder_id()).await
}
