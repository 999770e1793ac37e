//! The disruption function's handler: one scheduled invocation runs one disruption
//! run ([`Disrupter::tick`]) — advance the commands in flight one step, decide when
//! none is, start the commands decided — and exits. The commands go on advancing on
//! every poll of the provisioner, so this function costs one short invocation a minute.

use std::time::Instant;

use lambda_runtime::LambdaEvent;
use nodewright_engine::{Disrupter, DisruptionConfig, DisruptionReport};
use nodewright_lambda::metrics::{disruption_metrics, unix_now_ms};
use nodewright_lambda::report::engine_error_type;
use nodewright_lambda::{Config, HandlerError, StartupError, build_ports, heap};
use serde_json::{Value, json};
use tracing::{info, warn};

pub struct Handler {
    pub disrupter: Disrupter,
}

impl Handler {
    /// The handler as a cold start builds it from `config` (ports once, reused by
    /// every invocation), competing for the lease as `holder`. `main` and the
    /// end-to-end tests build it here, so they cannot drift apart.
    pub async fn from_config(
        config: &Config,
        holder: impl Into<String>,
    ) -> Result<Handler, StartupError> {
        let (ports, _cluster) = build_ports(config).await?;
        let mut settings = DisruptionConfig::new(config.cluster_name.clone(), holder);
        settings.dry_run = config.dry_run;
        settings.spot_to_spot = config.spot_to_spot;
        settings.min_values_policy = config.min_values_policy;
        settings.scheduler_config = config.scheduler_config.clone();
        Ok(Handler {
            disrupter: Disrupter::new(ports, settings),
        })
    }

    /// Handles one invocation. The payload (an EventBridge scheduled event, or any
    /// JSON for a manual run) is not needed: the cluster is the input. A run that
    /// failed is an invocation error (`errorType` names the port and kind), so the
    /// function's Errors metric sees it; the next schedule starts over.
    pub async fn handle(&self, event: LambdaEvent<Value>) -> Result<Value, HandlerError> {
        info!(request_id = %event.context.request_id, "disruption run");
        let started = Instant::now();
        let heap_at_start = heap::begin_invocation();
        match self.disrupter.tick().await {
            Ok(report) => {
                emit_metrics(&self.disrupter.config().cluster_name, &report, started);
                let mut summary = summary(&report);
                if let Some(heap) = heap::invocation_ended(heap_at_start) {
                    summary["heap"] = heap.to_json();
                }
                Ok(summary)
            }
            Err(e) => {
                warn!(request_id = %event.context.request_id, error = %e, kind = ?e.kind(), "disruption run failed");
                Err(HandlerError::new(engine_error_type(&e), &e))
            }
        }
    }
}

/// CloudWatch metrics in the Embedded Metric Format, printed on stdout (see
/// [`nodewright_lambda::metrics::disruption_metrics`] for what is published).
fn emit_metrics(cluster: &str, report: &DisruptionReport, started: Instant) {
    disruption_metrics(
        cluster,
        report,
        started.elapsed().as_secs_f64(),
        unix_now_ms(),
    )
    .emit();
}

/// What the run did, returned to Lambda (and so visible in the console).
pub fn summary(report: &DisruptionReport) -> Value {
    json!({
        "skipped": report.skipped,
        "dryRun": report.dry_run,
        "decided": report.decided,
        "started": report.started.iter().map(|c| json!({
            "command": c.id,
            "method": c.method,
            "reason": format!("{:?}", c.reason),
            "nodes": c.nodes,
            "replacements": c.replacements,
            "savingsPerHour": c.savings_per_hour,
        })).collect::<Vec<_>>(),
        "rejected": report.rejected.len(),
        "pricePerHour": {"before": report.price_per_hour.before, "after": report.price_per_hour.after},
        "marked": report.progress.marked,
        "validated": report.progress.validated,
        "abandoned": report.progress.abandoned.iter().map(|(c, why)| json!({"command": c, "reason": why})).collect::<Vec<_>>(),
        "waiting": report.progress.waiting,
        "errors": report.progress.errors.iter().map(|(c, e)| json!({"command": c, "error": e})).collect::<Vec<_>>(),
    })
}
