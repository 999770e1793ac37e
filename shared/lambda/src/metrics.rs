//! CloudWatch metrics in the Embedded Metric Format: JSON lines on stdout that
//! Lambda's log pipeline turns into metrics (no API call, no extra permission).
//!
//! Names follow one rule, Karpenter's: its Prometheus name without the `karpenter_`
//! prefix where Karpenter has the metric (`nodeclaims_created_total`,
//! `voluntary_disruption_decisions_total`, `nodepools_usage`...), and for the rest the
//! Prometheus convention it follows: a counter (a value whose sum over a period means
//! something) ends in `_total`, a gauge does not, a duration ends in `_seconds`.
//! Karpenter's labels become dimensions (`nodepool`, `reason`, `decision`,
//! `message_type`, `resource_type`...), all in the one namespace [`NAMESPACE`].
//!
//! Every metric carries [`CLUSTER`], the EKS cluster's name: two stacks in one account
//! and region keep their metrics, alarms and dashboards apart. A counter is published
//! both with its dimensions and with the cluster alone (the total an alarm or a
//! dashboard reads without knowing the pools); a gauge only as given (summing usages
//! of different resources means nothing). What each function does about itself
//! (`invocation_duration_seconds`, `provisioner_shortfall`...) carries the cluster and
//! the `Function` dimension.
//!
//! One JSON document per distinct set of dimension values: EMF takes a dimension's
//! value from the document's root, so two pools need two documents.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use nodewright_core::nodeclaim::DisruptionCause;
use nodewright_engine::disrupt::rejection_reason;
use nodewright_engine::lifecycle::Census;
use nodewright_engine::{CommandsReport, DisruptionReport, RunReport};
use serde_json::{Map, Value, json};

/// The CloudWatch namespace of every nodewright metric.
pub const NAMESPACE: &str = "nodewright";
/// The dimension naming the function that reports on itself.
pub const FUNCTION: &str = "Function";
/// The dimension naming the EKS cluster, on every metric (the name Container Insights
/// gives the same dimension).
pub const CLUSTER: &str = "ClusterName";
/// EMF's limits: metrics per directive, dimension keys per set, sets per directive.
pub const MAX_METRICS: usize = 100;
pub const MAX_DIMENSIONS: usize = 30;

/// A CloudWatch unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Count,
    Seconds,
    None,
}

impl Unit {
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Count => "Count",
            Unit::Seconds => "Seconds",
            Unit::None => "None",
        }
    }
}

/// What a metric is, which its name says (see the module's rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
}

#[derive(Debug, Clone, PartialEq)]
struct Group {
    /// The cluster's dimension first, then the others sorted.
    dimensions: Vec<(String, String)>,
    /// Also published with the cluster's dimension alone (counters).
    rollup: bool,
    metrics: Vec<(String, Kind, Unit, f64)>,
}

/// The metrics of one invocation, written out by [`Metrics::emit`].
#[derive(Debug, Clone, PartialEq)]
pub struct Metrics {
    cluster: String,
    timestamp_ms: u64,
    groups: Vec<Group>,
}

/// The wall clock in Unix milliseconds: the timestamp of an invocation's metrics.
pub fn unix_now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

impl Metrics {
    /// The metrics of the cluster named `cluster` (the value of [`CLUSTER`] on each).
    pub fn new(cluster: impl Into<String>, timestamp_ms: u64) -> Self {
        Metrics {
            cluster: cluster.into(),
            timestamp_ms,
            groups: Vec::new(),
        }
    }

    /// When the metrics were taken (Unix milliseconds).
    pub fn timestamp_ms(&self) -> u64 {
        self.timestamp_ms
    }

    /// Adds `value` to a counter of the function about itself (dimension `Function`).
    pub fn function_count(&mut self, function: &str, name: &str, value: f64) {
        self.put(
            &[(FUNCTION, function)],
            false,
            name,
            Kind::Counter,
            Unit::Count,
            value,
        );
    }

    /// Sets a gauge of the function about itself (dimension `Function`).
    pub fn function_gauge(&mut self, function: &str, name: &str, unit: Unit, value: f64) {
        self.put(
            &[(FUNCTION, function)],
            false,
            name,
            Kind::Gauge,
            unit,
            value,
        );
    }

    /// Adds `value` to a counter with these dimensions (and to its total).
    pub fn count(&mut self, name: &str, dimensions: &[(&str, &str)], value: f64) {
        self.put(dimensions, true, name, Kind::Counter, Unit::Count, value);
    }

    /// Adds `value` to a counter that is not a number of things (dollars per hour
    /// saved, say), with these dimensions (and to its total).
    pub fn count_in(&mut self, name: &str, unit: Unit, dimensions: &[(&str, &str)], value: f64) {
        self.put(dimensions, true, name, Kind::Counter, unit, value);
    }

    /// Sets a gauge with these dimensions (adds, if set twice in one invocation).
    pub fn gauge(&mut self, name: &str, unit: Unit, dimensions: &[(&str, &str)], value: f64) {
        self.put(dimensions, false, name, Kind::Gauge, unit, value);
    }

    fn put(
        &mut self,
        dimensions: &[(&str, &str)],
        rollup: bool,
        name: &str,
        kind: Kind,
        unit: Unit,
        value: f64,
    ) {
        debug_assert_eq!(
            name.ends_with("_total"),
            kind == Kind::Counter,
            "{name}: a counter's name ends in _total, a gauge's does not"
        );
        let mut others: Vec<(String, String)> = dimensions
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect();
        others.sort();
        let mut dims = vec![(CLUSTER.to_string(), self.cluster.clone())];
        dims.extend(others);
        let group = match self
            .groups
            .iter_mut()
            .position(|g| g.dimensions == dims && g.rollup == rollup)
        {
            Some(i) => &mut self.groups[i],
            None => {
                self.groups.push(Group {
                    dimensions: dims,
                    rollup,
                    metrics: Vec::new(),
                });
                self.groups.last_mut().expect("just pushed")
            }
        };
        match group.metrics.iter_mut().find(|(n, ..)| n == name) {
            Some((.., v)) => *v += value,
            None => group.metrics.push((name.to_string(), kind, unit, value)),
        }
    }

    /// The EMF documents, one per dimension values (split at [`MAX_METRICS`]).
    pub fn documents(&self) -> Vec<Value> {
        let mut out = Vec::new();
        for group in &self.groups {
            for chunk in group.metrics.chunks(MAX_METRICS) {
                let keys: Vec<&str> = group.dimensions.iter().map(|(k, _)| k.as_str()).collect();
                let mut sets = vec![json!(keys)];
                if group.rollup && keys.len() > 1 {
                    sets.push(json!([CLUSTER]));
                }
                let definitions: Vec<Value> = chunk
                    .iter()
                    .map(|(n, _, u, _)| json!({"Name": n, "Unit": u.as_str()}))
                    .collect();
                let mut root = Map::new();
                root.insert(
                    "_aws".into(),
                    json!({
                        "Timestamp": self.timestamp_ms,
                        "CloudWatchMetrics": [{
                            "Namespace": NAMESPACE,
                            "Dimensions": sets,
                            "Metrics": definitions,
                        }],
                    }),
                );
                for (k, v) in &group.dimensions {
                    root.insert(k.clone(), json!(v));
                }
                for (n, .., v) in chunk {
                    root.insert(n.clone(), json!(v));
                }
                out.push(Value::Object(root));
            }
        }
        out
    }

    /// The documents as the lines to print.
    pub fn lines(&self) -> String {
        let mut text = String::new();
        for d in self.documents() {
            let _ = writeln!(text, "{d}");
        }
        text
    }

    /// Prints every document on stdout, one line each.
    pub fn emit(&self) {
        print!("{}", self.lines());
    }
}

/// The provisioner's metrics for one invocation: its own (`provisioner_ticks_total`,
/// `provisioner_lease_busy_total`, `provisioner_failed_ticks_total`,
/// `provisioner_shortfall` 0 or 1, `invocation_duration_seconds`); the counters of
/// every tick (`nodeclaims_created_total` by nodepool and reason — `provisioned`, or
/// the disruption reason of a command's replacement — `nodeclaims_terminated_total` by
/// nodepool, `nodeclaims_disrupted_total` by reason and nodepool); and the gauges of its last tick (`scheduler_unschedulable_pods_count`,
/// `pods_pending_oldest_age_seconds`, `nodeclaims` by state and by nodepool and state,
/// `nodeclaims_stuck`, `cluster_cost_per_hour`, `nodepools_usage` and
/// `nodepools_limit` by nodepool and resource_type), and `cluster_kinds_unreadable`
/// (with `cluster_kind_unreadable` by kind) when a kind could not be listed.
pub fn provisioner_metrics(
    cluster: &str,
    run: &RunReport,
    duration_secs: f64,
    timestamp_ms: u64,
) -> Metrics {
    const F: &str = "provisioner";
    let mut m = Metrics::new(cluster, timestamp_ms);
    m.function_count(F, "provisioner_ticks_total", run.ticks.len() as f64);
    m.function_count(
        F,
        "provisioner_lease_busy_total",
        run.lease_busy.len() as f64,
    );
    m.function_count(
        F,
        "provisioner_failed_ticks_total",
        run.failed_ticks.len() as f64,
    );
    let shortfall = !run.shortfalls().is_empty();
    m.function_gauge(
        F,
        "provisioner_shortfall",
        Unit::Count,
        f64::from(u8::from(shortfall)),
    );
    m.function_gauge(
        F,
        "invocation_duration_seconds",
        Unit::Seconds,
        duration_secs,
    );
    for tick in &run.ticks {
        for l in &tick.launched {
            m.count(
                "nodeclaims_created_total",
                &[("nodepool", &l.node_pool), ("reason", "provisioned")],
                1.0,
            );
        }
        commands_metrics(&mut m, &tick.commands);
        for (pool, n) in &tick.lifecycle.terminated_by_pool {
            m.count(
                "nodeclaims_terminated_total",
                &[("nodepool", pool)],
                *n as f64,
            );
        }
        for d in &tick.lifecycle.disrupted {
            disrupted(&mut m, &d.node_pool, d.cause);
        }
    }
    if let Some(last) = run.ticks.last() {
        census_metrics(&mut m, &last.lifecycle.census);
        // Kinds RBAC forbids or the server does not serve: the function goes on without
        // them (pods with volumes wait, disruption stops); the alarm names the fix.
        m.function_gauge(
            F,
            "cluster_kinds_unreadable",
            Unit::Count,
            last.unreadable.len() as f64,
        );
        for u in &last.unreadable {
            m.gauge(
                "cluster_kind_unreadable",
                Unit::Count,
                &[("kind", &u.kind)],
                1.0,
            );
        }
        m.gauge(
            "scheduler_unschedulable_pods_count",
            Unit::Count,
            &[],
            last.unschedulable.len() as f64,
        );
    }
    m
}

fn census_metrics(m: &mut Metrics, census: &Census) {
    let oldest = census.oldest_pending_pod_secs.unwrap_or(0);
    m.gauge(
        "pods_pending_oldest_age_seconds",
        Unit::Seconds,
        &[],
        oldest as f64,
    );
    m.gauge(
        "nodeclaims_stuck",
        Unit::Count,
        &[],
        census.stuck.len() as f64,
    );
    m.gauge(
        "cluster_cost_per_hour",
        Unit::None,
        &[],
        census.price_per_hour,
    );
    for ((pool, state), n) in &census.claims {
        let n = *n as f64;
        m.gauge("nodeclaims", Unit::Count, &[("state", state.as_str())], n);
        m.gauge(
            "nodeclaims",
            Unit::Count,
            &[("nodepool", pool), ("state", state.as_str())],
            n,
        );
    }
    for pool in &census.pools {
        for (resource, milli) in pool.usage.iter() {
            let dims = [
                ("nodepool", pool.node_pool.as_str()),
                ("resource_type", resource),
            ];
            m.gauge("nodepools_usage", Unit::None, &dims, from_milli(milli));
        }
        for (resource, milli) in pool.limits.iter().flat_map(|l| l.iter()) {
            let dims = [
                ("nodepool", pool.node_pool.as_str()),
                ("resource_type", resource),
            ];
            m.gauge("nodepools_limit", Unit::None, &dims, from_milli(milli));
        }
    }
}

/// What the disruption command machine did: candidates disrupted, replacements created.
fn commands_metrics(m: &mut Metrics, commands: &CommandsReport) {
    for d in &commands.disrupted {
        disrupted(m, &d.node_pool, d.cause);
    }
    for (r, cause) in &commands.replacements {
        m.count(
            "nodeclaims_created_total",
            &[("nodepool", &r.node_pool), ("reason", cause_label(*cause))],
            1.0,
        );
    }
}

/// One claim put in Disrupting.
pub fn disrupted(m: &mut Metrics, node_pool: &str, cause: DisruptionCause) {
    m.count(
        "nodeclaims_disrupted_total",
        &[("nodepool", node_pool), ("reason", cause_label(cause))],
        1.0,
    );
}

/// The disruption function's metrics for one run: its own
/// (`invocation_duration_seconds`, `disruption_lease_busy_total`), Karpenter's
/// `voluntary_disruption_decisions_total` by decision (`delete`, `replace`) and reason,
/// `voluntary_disruption_rejected_nodes` by the event reason a kept node got
/// (`DisruptionBlocked`, `Unconsolidatable`) and code, `nodeclaims_disrupted_total`,
/// `nodeclaims_created_total` for replacements, and the savings decided
/// (`voluntary_disruption_savings_per_hour_total`, USD per hour, by reason).
pub fn disruption_metrics(
    cluster: &str,
    report: &DisruptionReport,
    duration_secs: f64,
    timestamp_ms: u64,
) -> Metrics {
    const F: &str = "disruption";
    let mut m = Metrics::new(cluster, timestamp_ms);
    m.function_gauge(
        F,
        "invocation_duration_seconds",
        Unit::Seconds,
        duration_secs,
    );
    m.function_count(
        F,
        "disruption_lease_busy_total",
        f64::from(u8::from(report.skipped.is_some())),
    );
    for c in &report.started {
        let decision = if c.replacements.is_empty() {
            "delete"
        } else {
            "replace"
        };
        let reason = format!("{:?}", c.reason).to_lowercase();
        m.count(
            "voluntary_disruption_decisions_total",
            &[("decision", decision), ("reason", &reason)],
            1.0,
        );
        m.count_in(
            "voluntary_disruption_savings_per_hour_total",
            Unit::None,
            &[("reason", &reason)],
            c.savings_per_hour,
        );
    }
    for r in &report.rejected {
        let code = format!("{:?}", r.code);
        m.gauge(
            "voluntary_disruption_rejected_nodes",
            Unit::Count,
            &[("code", &code), ("reason", rejection_reason(r.code))],
            1.0,
        );
    }
    commands_metrics(&mut m, &report.progress);
    m
}

/// A disruption cause as a `reason` dimension: Karpenter's lower-case, snake_case
/// values (`underutilized`, `drifted`, `spot_interrupted`...).
pub fn cause_label(cause: DisruptionCause) -> &'static str {
    match cause {
        DisruptionCause::SpotInterrupted => "spot_interrupted",
        DisruptionCause::RebalanceRecommended => "rebalance_recommendation",
        DisruptionCause::InstanceStopped => "instance_stopped",
        DisruptionCause::InstanceTerminated => "instance_terminated",
        DisruptionCause::ScheduledChange => "scheduled_change",
        DisruptionCause::Unregistered => "unregistered",
        DisruptionCause::Expired => "expired",
        DisruptionCause::Drifted => "drifted",
        DisruptionCause::Empty => "empty",
        DisruptionCause::Underutilized => "underutilized",
        // Karpenter's node health controller counts its repairs as `unhealthy`.
        DisruptionCause::Unhealthy => "unhealthy",
        // Karpenter's static deprovisioning terminates with reason `overprovisioned`.
        DisruptionCause::Overprovisioned => "overprovisioned",
        DisruptionCause::CapacityReservationExpiring => "capacity_reservation_expiring",
        // Karpenter's interruption message kind.
        DisruptionCause::CapacityReservationInterrupted => "capacity_reservation_interrupted",
    }
}

/// A resource quantity in milli-units as a metric value (cores, bytes, pods).
pub fn from_milli(milli: i64) -> f64 {
    milli as f64 / 1000.0
}

/// Checks a document against the Embedded Metric Format's rules: one directive in
/// [`NAMESPACE`], every declared dimension and metric present at the root (dimensions
/// as strings, metrics as numbers), at most [`MAX_METRICS`] metrics, at most
/// [`MAX_DIMENSIONS`] dimension sets of at most [`MAX_DIMENSIONS`] keys each.
pub fn validate(document: &Value) -> Result<(), String> {
    let root = document.as_object().ok_or("not an object")?;
    let aws = root.get("_aws").ok_or("no _aws")?;
    if !aws["Timestamp"].is_u64() {
        return Err("no integer Timestamp".into());
    }
    let directives = aws["CloudWatchMetrics"]
        .as_array()
        .ok_or("no CloudWatchMetrics")?;
    if directives.is_empty() {
        return Err("no directive".into());
    }
    for d in directives {
        if d["Namespace"] != NAMESPACE {
            return Err(format!("namespace {}", d["Namespace"]));
        }
        let sets = d["Dimensions"].as_array().ok_or("no Dimensions")?;
        if sets.len() > MAX_DIMENSIONS {
            return Err(format!("{} dimension sets", sets.len()));
        }
        for set in sets {
            let keys = set.as_array().ok_or("a dimension set is not an array")?;
            if keys.len() > MAX_DIMENSIONS {
                return Err(format!("{} keys in a dimension set", keys.len()));
            }
            for k in keys {
                let k = k.as_str().ok_or("a dimension key is not a string")?;
                if !root.get(k).is_some_and(Value::is_string) {
                    return Err(format!("dimension {k} has no string value at the root"));
                }
            }
        }
        let metrics = d["Metrics"].as_array().ok_or("no Metrics")?;
        if metrics.is_empty() || metrics.len() > MAX_METRICS {
            return Err(format!("{} metrics", metrics.len()));
        }
        for m in metrics {
            let name = m["Name"].as_str().ok_or("a metric without a Name")?;
            if !root.get(name).is_some_and(Value::is_number) {
                return Err(format!("metric {name} has no numeric value at the root"));
            }
            if !matches!(m["Unit"].as_str(), Some("Count" | "Seconds" | "None")) {
                return Err(format!("metric {name} has unit {}", m["Unit"]));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find<'a>(docs: &'a [Value], name: &str, dims: &[(&str, &str)]) -> &'a Value {
        docs.iter()
            .find(|d| {
                d.get(name).is_some()
                    && dims
                        .iter()
                        .all(|(k, v)| d.get(*k).and_then(Value::as_str) == Some(*v))
            })
            .unwrap_or_else(|| panic!("no {name} {dims:?} in {docs:#?}"))
    }

    #[test]
    fn a_counter_is_published_per_dimension_values_and_as_a_total() {
        let mut m = Metrics::new("prod", 1_700_000_000_000);
        m.count(
            "nodeclaims_created_total",
            &[("nodepool", "web"), ("reason", "provisioned")],
            1.0,
        );
        m.count(
            "nodeclaims_created_total",
            &[("reason", "provisioned"), ("nodepool", "web")],
            2.0,
        );
        m.count(
            "nodeclaims_created_total",
            &[("nodepool", "batch"), ("reason", "provisioned")],
            1.0,
        );
        let docs = m.documents();
        assert_eq!(docs.len(), 2, "{docs:#?}");
        for d in &docs {
            validate(d).unwrap();
        }
        let web = find(&docs, "nodeclaims_created_total", &[("nodepool", "web")]);
        assert_eq!(web["nodeclaims_created_total"], 3.0);
        assert_eq!(web["ClusterName"], "prod");
        assert_eq!(
            web["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            json!([["ClusterName", "nodepool", "reason"], ["ClusterName"]])
        );
        assert_eq!(web["_aws"]["Timestamp"], 1_700_000_000_000u64);
        assert_eq!(
            web["_aws"]["CloudWatchMetrics"][0]["Namespace"],
            "nodewright"
        );
    }

    #[test]
    fn a_gauge_and_a_function_metric_keep_only_their_own_dimensions_and_the_clusters() {
        let mut m = Metrics::new("prod", 1);
        m.gauge(
            "nodepools_usage",
            Unit::None,
            &[("nodepool", "web"), ("resource_type", "cpu")],
            4.0,
        );
        m.gauge("cluster_cost_per_hour", Unit::None, &[], 0.5);
        m.function_gauge("provisioner", "provisioner_shortfall", Unit::Count, 0.0);
        let docs = m.documents();
        for d in &docs {
            validate(d).unwrap();
        }
        let usage = find(&docs, "nodepools_usage", &[]);
        assert_eq!(
            usage["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            json!([["ClusterName", "nodepool", "resource_type"]])
        );
        let cost = find(&docs, "cluster_cost_per_hour", &[]);
        assert_eq!(
            cost["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            json!([["ClusterName"]])
        );
        let shortfall = find(
            &docs,
            "provisioner_shortfall",
            &[("Function", "provisioner")],
        );
        assert_eq!(
            shortfall["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            json!([["ClusterName", "Function"]])
        );
    }

    #[test]
    fn two_clusters_metrics_never_share_a_dimension_set_value() {
        let docs = |cluster: &str| {
            let mut m = Metrics::new(cluster, 1);
            m.count("nodeclaims_created_total", &[("nodepool", "web")], 1.0);
            m.gauge("cluster_cost_per_hour", Unit::None, &[], 0.5);
            m.function_gauge("provisioner", "provisioner_shortfall", Unit::Count, 1.0);
            m.documents()
        };
        for (a, b) in docs("prod").iter().zip(docs("staging").iter()) {
            assert_eq!(a["ClusterName"], "prod");
            assert_eq!(b["ClusterName"], "staging");
            for set in a["_aws"]["CloudWatchMetrics"][0]["Dimensions"]
                .as_array()
                .unwrap()
            {
                assert!(
                    set.as_array().unwrap().contains(&json!("ClusterName")),
                    "every dimension set names the cluster: {a}"
                );
            }
        }
    }

    #[test]
    fn more_metrics_than_a_directive_holds_are_split_into_valid_documents() {
        let mut m = Metrics::new("prod", 1);
        for i in 0..(MAX_METRICS + 5) {
            m.function_count("disruption", &format!("m{i}_total"), 1.0);
        }
        let docs = m.documents();
        assert_eq!(docs.len(), 2);
        for d in &docs {
            validate(d).unwrap();
        }
        assert_eq!(m.lines().lines().count(), 2);
    }

    #[test]
    fn the_validator_refuses_what_cloudwatch_would_drop() {
        let good = {
            let mut m = Metrics::new("prod", 1);
            m.count("x_total", &[("nodepool", "a")], 1.0);
            m.documents().remove(0)
        };
        validate(&good).unwrap();
        let mut missing_dimension = good.clone();
        missing_dimension
            .as_object_mut()
            .unwrap()
            .remove("nodepool");
        assert!(validate(&missing_dimension).is_err());
        let mut missing_value = good.clone();
        missing_value.as_object_mut().unwrap().remove("x_total");
        assert!(validate(&missing_value).is_err());
        let mut other_namespace = good.clone();
        other_namespace["_aws"]["CloudWatchMetrics"][0]["Namespace"] = json!("other");
        assert!(validate(&other_namespace).is_err());
        let mut too_many_sets = good.clone();
        too_many_sets["_aws"]["CloudWatchMetrics"][0]["Dimensions"] =
            json!(vec![json!([]); MAX_DIMENSIONS + 1]);
        assert!(validate(&too_many_sets).is_err());
    }

    #[test]
    fn causes_are_labelled_as_karpenter_labels_reasons() {
        assert_eq!(cause_label(DisruptionCause::Underutilized), "underutilized");
        assert_eq!(
            cause_label(DisruptionCause::SpotInterrupted),
            "spot_interrupted"
        );
        assert_eq!(from_milli(4_000), 4.0);
    }

    fn all(m: &Metrics) -> Vec<Value> {
        let docs = m.documents();
        for d in &docs {
            validate(d).unwrap_or_else(|e| panic!("{e}: {d:#}"));
        }
        docs
    }

    #[test]
    fn a_provisioner_run_publishes_its_launches_terminations_and_the_last_ticks_gauges() {
        use nodewright_core::nodeclaim::ClaimState;
        use nodewright_core::resources::Resources;
        use nodewright_engine::lifecycle::{PoolUsage, StuckClaim};
        use nodewright_engine::terminate::Disrupted;
        use nodewright_engine::{LaunchedClaim, TickReport};

        let launched = |name: &str| LaunchedClaim {
            name: name.into(),
            node_pool: "web".into(),
            instance_id: "i-1".into(),
            instance_type: "m5.large".into(),
            zone: "us-east-1a".into(),
            capacity_type: nodewright_core::catalog::CapacityType::OnDemand,
            price_per_hour: 0.096,
            pods: 2,
        };
        let mut first = TickReport {
            launched: vec![launched("web-a")],
            ..TickReport::default()
        };
        first.lifecycle.terminated_by_pool.insert("web".into(), 1);
        first.lifecycle.disrupted.push(Disrupted {
            claim: "web-old".into(),
            node_pool: "web".into(),
            cause: DisruptionCause::Unregistered,
        });
        let mut last = TickReport {
            launched: vec![launched("web-b")],
            ..TickReport::default()
        };
        last.commands
            .replacements
            .push((launched("web-r"), DisruptionCause::Drifted));
        let census = &mut last.lifecycle.census;
        census
            .claims
            .insert(("web".into(), ClaimState::Initialized), 3);
        census
            .claims
            .insert(("batch".into(), ClaimState::Initialized), 1);
        census.price_per_hour = 0.384;
        census.oldest_pending_pod_secs = Some(420);
        census.stuck.push(StuckClaim {
            name: "web-x".into(),
            state: ClaimState::Draining,
            deadline: 0,
        });
        let mut usage = Resources::new();
        usage.set_milli("cpu", 6_000);
        let mut limits = Resources::new();
        limits.set_milli("cpu", 100_000);
        census.pools.push(PoolUsage {
            node_pool: "web".into(),
            usage,
            limits: Some(limits),
        });
        let run = RunReport {
            ticks: vec![first, last],
            lease_busy: vec!["other".into()],
            ..RunReport::default()
        };

        let docs = all(&provisioner_metrics("prod", &run, 54.5, 7));

        let f = [("Function", "provisioner")];
        assert_eq!(
            find(&docs, "provisioner_ticks_total", &f)["provisioner_ticks_total"],
            2.0
        );
        assert_eq!(
            find(&docs, "provisioner_shortfall", &f)["provisioner_shortfall"],
            0.0
        );
        assert_eq!(
            find(&docs, "provisioner_lease_busy_total", &f)["provisioner_lease_busy_total"],
            1.0
        );
        assert_eq!(
            find(&docs, "invocation_duration_seconds", &f)["invocation_duration_seconds"],
            54.5
        );
        let created = find(
            &docs,
            "nodeclaims_created_total",
            &[("nodepool", "web"), ("reason", "provisioned")],
        );
        assert_eq!(created["nodeclaims_created_total"], 2.0);
        let replaced = find(&docs, "nodeclaims_created_total", &[("reason", "drifted")]);
        assert_eq!(replaced["nodeclaims_created_total"], 1.0);
        assert_eq!(
            find(&docs, "nodeclaims_terminated_total", &[("nodepool", "web")])["nodeclaims_terminated_total"],
            1.0
        );
        let disrupted = find(
            &docs,
            "nodeclaims_disrupted_total",
            &[("reason", "unregistered")],
        );
        assert_eq!(disrupted["nodepool"], "web");
        assert_eq!(
            find(&docs, "cluster_cost_per_hour", &[])["cluster_cost_per_hour"],
            0.384
        );
        assert_eq!(
            find(&docs, "pods_pending_oldest_age_seconds", &[])["pods_pending_oldest_age_seconds"],
            420.0
        );
        assert_eq!(
            find(&docs, "nodeclaims_stuck", &[])["nodeclaims_stuck"],
            1.0
        );
        let by_state: Vec<&Value> = docs
            .iter()
            .filter(|d| d.get("nodeclaims").is_some() && d.get("nodepool").is_none())
            .collect();
        assert_eq!(by_state.len(), 1, "one document per state, pools summed");
        assert_eq!(by_state[0]["nodeclaims"], 4.0);
        assert_eq!(by_state[0]["state"], "Initialized");
        let usage = find(
            &docs,
            "nodepools_usage",
            &[("nodepool", "web"), ("resource_type", "cpu")],
        );
        assert_eq!(usage["nodepools_usage"], 6.0);
        let limit = find(
            &docs,
            "nodepools_limit",
            &[("nodepool", "web"), ("resource_type", "cpu")],
        );
        assert_eq!(limit["nodepools_limit"], 100.0);
        assert_eq!(
            find(&docs, "scheduler_unschedulable_pods_count", &[])["scheduler_unschedulable_pods_count"],
            0.0
        );
    }

    #[test]
    fn a_kind_the_cluster_would_not_list_is_counted_for_the_alarm_and_named() {
        use nodewright_engine::ports::{ErrorKind, UnreadableKind};
        use nodewright_engine::provision::TickReport;
        let run = RunReport {
            ticks: vec![TickReport {
                unreadable: vec![UnreadableKind {
                    kind: "persistentvolumeclaims".into(),
                    error_kind: ErrorKind::Unauthorized,
                    message: "forbidden".into(),
                }],
                ..TickReport::default()
            }],
            ..RunReport::default()
        };
        let docs = all(&provisioner_metrics("prod", &run, 1.0, 7));
        let f = [("Function", "provisioner")];
        assert_eq!(
            find(&docs, "cluster_kinds_unreadable", &f)["cluster_kinds_unreadable"],
            1.0
        );
        assert_eq!(
            find(
                &docs,
                "cluster_kind_unreadable",
                &[("kind", "persistentvolumeclaims")]
            )["cluster_kind_unreadable"],
            1.0
        );
    }

    #[test]
    fn a_provisioner_run_that_did_nothing_says_so_in_its_shortfall() {
        let run = RunReport {
            failed_ticks: vec!["store throttled".into()],
            ..RunReport::default()
        };
        let docs = all(&provisioner_metrics("prod", &run, 1.0, 7));
        let f = [("Function", "provisioner")];
        assert_eq!(
            find(&docs, "provisioner_shortfall", &f)["provisioner_shortfall"],
            1.0
        );
        assert_eq!(
            find(&docs, "provisioner_failed_ticks_total", &f)["provisioner_failed_ticks_total"],
            1.0
        );
        assert!(
            docs.iter()
                .all(|d| d.get("cluster_cost_per_hour").is_none()),
            "no tick, no gauges"
        );
    }

    #[test]
    fn a_disruption_run_publishes_its_decisions_and_its_kept_nodes_by_karpenters_labels() {
        use nodewright_core::disruption::{Reason, RejectCode, RejectedNode};
        use nodewright_engine::StartedCommand;

        let report = DisruptionReport {
            decided: true,
            started: vec![
                StartedCommand {
                    id: "c1".into(),
                    method: "SingleNodeConsolidation".into(),
                    reason: Reason::Underutilized,
                    nodes: vec!["n1".into()],
                    replacements: vec!["web-r".into()],
                    savings_per_hour: 0.05,
                },
                StartedCommand {
                    id: "c2".into(),
                    method: "Emptiness".into(),
                    reason: Reason::Empty,
                    nodes: vec!["n2".into()],
                    replacements: vec![],
                    savings_per_hour: 0.1,
                },
            ],
            rejected: vec![
                RejectedNode {
                    node: "n3".into(),
                    code: RejectCode::DoNotDisrupt,
                    reason: "a pod".into(),
                },
                RejectedNode {
                    node: "n4".into(),
                    code: RejectCode::NotCheaper,
                    reason: "no".into(),
                },
                RejectedNode {
                    node: "n5".into(),
                    code: RejectCode::NotCheaper,
                    reason: "no".into(),
                },
            ],
            ..DisruptionReport::default()
        };

        let docs = all(&disruption_metrics("prod", &report, 2.0, 7));

        let replace = find(
            &docs,
            "voluntary_disruption_decisions_total",
            &[("decision", "replace"), ("reason", "underutilized")],
        );
        assert_eq!(replace["voluntary_disruption_decisions_total"], 1.0);
        find(
            &docs,
            "voluntary_disruption_decisions_total",
            &[("decision", "delete"), ("reason", "empty")],
        );
        let kept = find(
            &docs,
            "voluntary_disruption_rejected_nodes",
            &[("code", "NotCheaper"), ("reason", "Unconsolidatable")],
        );
        assert_eq!(kept["voluntary_disruption_rejected_nodes"], 2.0);
        find(
            &docs,
            "voluntary_disruption_rejected_nodes",
            &[("code", "DoNotDisrupt"), ("reason", "DisruptionBlocked")],
        );
        let f = [("Function", "disruption")];
        assert_eq!(
            find(&docs, "disruption_lease_busy_total", &f)["disruption_lease_busy_total"],
            0.0
        );
    }
}
