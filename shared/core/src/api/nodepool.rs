//! `karpenter.sh/v1` NodePool rules and defaults.
//!
//! Defaults applied (Karpenter v1's CRD defaults unless noted):
//! - `expireAfter`: 720h; `consolidationPolicy`: WhenEmptyOrUnderutilized;
//!   `consolidateAfter`: 0s; `budgets`: `[{nodes: "10%"}]` when the field is absent
//!   (an explicit `budgets: []` stays empty, i.e. no budget limits disruption, as in
//!   Karpenter); a budget without `nodes` gets "10%".
//! - `karpenter.sh/capacity-type In [on-demand]` when no requirement names that key:
//!   a pool that says nothing about capacity type gets on-demand capacity, as Karpenter
//!   documents. No `kubernetes.io/arch` or `kubernetes.io/os` requirement is added:
//!   Karpenter v1 has no such default (the amd64 default belonged to the old AWS
//!   provisioner webhook and was removed with v1beta1); architecture and OS are then
//!   limited only by the instance types and AMIs.
//! - `weight`: 0 when unset.
//!
//! Static NodePools (`spec.replicas`, Karpenter v1.8) follow the CRD's rules: replicas
//! is at least 0, `limits` may hold only `nodes`, and `weight` is refused. Their
//! `consolidationPolicy` and `consolidateAfter` are read but have no effect.

use crate::well_known::LABEL_CAPACITY_TYPE;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::Document;
use super::cron::CronSchedule;
use super::duration::{
    EXPECTED_DURATION, EXPECTED_DURATION_OR_NEVER, parse_budget_duration, parse_duration,
    parse_nillable_duration,
};
use super::kind::NODE_CLASS_KIND;
use super::labels::{
    label_key_problem, label_restriction, label_value_problem, normalize_label_key,
};
use super::model::{
    Budget, BudgetNodes, ConsolidationPolicy, Disruption, DisruptionReason, NodeClassRef, NodePool,
    NodeRequirement, Operator, Taint, TaintEffect,
};
use super::raw;
use super::report::{Report, check_max_items, deserialize_raw, object_name};
use crate::resources::{QuantityError, Resources, matches_crd_quantity_pattern, parse_milli};

pub const DEFAULT_EXPIRE_AFTER: Duration = Duration::from_secs(720 * 3600);
pub const NODE_CLASS_GROUP: &str = "karpenter.k8s.aws";

const REQUIREMENTS: &str = "spec.template.spec.requirements";

pub(super) fn validate_node_pool(
    doc: &Document,
    class_names: &BTreeSet<String>,
    report: &mut Report<'_>,
) -> Option<NodePool> {
    let name = object_name(&doc.value).map(str::to_string);
    if name.is_none() {
        report.missing("metadata.name");
    }
    let raw: raw::NodePool = deserialize_raw(doc, report)?;
    let Some(spec) = raw.spec else {
        report.missing("spec");
        return None;
    };
    // The limits as written (a limit of "0" is a limit, though it reads as unset).
    let spec_limit_names: BTreeMap<String, bool> = spec
        .limits
        .iter()
        .flatten()
        .map(|(name, raw::Scalar(text))| (name.clone(), parse_milli(text).is_ok_and(|m| m == 0)))
        .collect();
    let Some(template) = spec.template else {
        report.missing("spec.template");
        return None;
    };
    let Some(tspec) = template.spec else {
        report.missing("spec.template.spec");
        return None;
    };
    let meta = template.metadata.unwrap_or_default();
    let labels = meta.labels.unwrap_or_default();
    check_labels(&labels, report);
    let requirements = with_default_capacity_type(requirements(
        tspec.requirements.unwrap_or_default(),
        &NODE_POOL_REQUIREMENTS,
        report,
    ));
    let taints = taints(
        tspec.taints.unwrap_or_default(),
        "spec.template.spec.taints",
        report,
    );
    let startup_taints = taints_of(
        tspec.startup_taints,
        "spec.template.spec.startupTaints",
        report,
    );
    check_duplicate_taints(&taints, &startup_taints, report);
    let node_class_ref = node_class_ref(tspec.node_class_ref, class_names, report);
    let expire_after = match tspec.expire_after {
        None => Some(DEFAULT_EXPIRE_AFTER),
        Some(text) => nillable_duration(&text, "spec.template.spec.expireAfter", report),
    };
    let termination_grace_period = tspec.termination_grace_period.and_then(|text| {
        let parsed = parse_duration(&text);
        if parsed.is_none() {
            report.add(
                "spec.template.spec.terminationGracePeriod",
                bad_duration(&text, EXPECTED_DURATION),
            );
        }
        parsed
    });
    let limits = spec.limits.map(|l| limits(l, report));
    let node_limit = limits.as_ref().and_then(|l| {
        let milli = l.get_milli("nodes");
        // A quantity counts whole nodes, rounded up as Karpenter reads it.
        (milli > 0).then(|| u64::try_from(milli.saturating_add(999) / 1000).unwrap_or(u64::MAX))
    });
    let node_limit = node_limit.or_else(|| node_limit_of_zero(&spec_limit_names));
    let weight = weight(spec.weight, report);
    let replicas = replicas(spec.replicas, report);
    if replicas.is_some() {
        check_static(&spec_limit_names, spec.weight.is_some(), report);
    }
    let disruption = disruption(spec.disruption.unwrap_or_default(), report);
    let pool = NodePool {
        name: name?,
        labels,
        annotations: meta.annotations.unwrap_or_default(),
        requirements,
        taints,
        startup_taints,
        node_class_ref: node_class_ref?,
        expire_after,
        termination_grace_period,
        limits,
        node_limit,
        weight,
        disruption,
        replicas,
    };
    report.finish(pool)
}

fn check_labels(labels: &BTreeMap<String, String>, report: &mut Report<'_>) {
    check_max_items(report, "spec.template.metadata.labels", labels.len(), 100);
    for (key, value) in labels {
        let path = format!("spec.template.metadata.labels.{key}");
        let why = label_key_problem(key)
            .or_else(|| label_restriction(key))
            .or_else(|| label_value_problem(value));
        if let Some(why) = why {
            report.add(path, why);
        }
    }
}

/// Where the requirements of one kind of object follow rules of their own. Both kinds
/// share Karpenter's `NodeSelectorRequirement` checks (key pattern and restricted
/// labels, known operators, no values for Exists/DoesNotExist, one non-negative integer
/// for Gt/Lt/Gte/Lte, label-value values, at most 100 requirements); a NodePool's are
/// [`NODE_POOL_REQUIREMENTS`], a NodeOverlay's are in `overlay`.
pub(super) struct RequirementRules {
    /// Where the list is (`spec.template.spec.requirements`).
    pub path: &'static str,
    /// Keys `label_restriction` refuses that these requirements may still use.
    pub allowed_restricted: &'static [&'static str],
    /// Operators that need at least one value.
    pub need_values: &'static [Operator],
    /// What the single value of Gt, Lt, Gte and Lte is called in a problem.
    pub integer: &'static str,
    /// The most values one requirement may list, when there is a limit.
    pub max_values: Option<usize>,
}

/// A NodePool's: `In` needs a value (the CRD's rule; `NotIn` may be empty), and the
/// NodePool label itself is restricted.
const NODE_POOL_REQUIREMENTS: RequirementRules = RequirementRules {
    path: REQUIREMENTS,
    allowed_restricted: &[],
    need_values: &[Operator::In],
    integer: "integer value",
    max_values: Some(100),
};

/// Validates a list of requirements under `rules`; the valid ones are returned.
pub(super) fn requirements(
    raw: Vec<raw::Requirement>,
    rules: &RequirementRules,
    report: &mut Report<'_>,
) -> Vec<NodeRequirement> {
    let list = rules.path;
    check_max_items(report, list, raw.len(), 100);
    raw.into_iter()
        .enumerate()
        .filter_map(|(i, r)| requirement(r, rules, &format!("{list}[{i}]"), report))
        .collect()
}

fn requirement(
    raw: raw::Requirement,
    rules: &RequirementRules,
    path: &str,
    report: &mut Report<'_>,
) -> Option<NodeRequirement> {
    let key = raw.key.filter(|k| !k.is_empty());
    match &key {
        None => report.missing(format!("{path}.key")),
        Some(k) => {
            let restriction = if rules.allowed_restricted.contains(&normalize_label_key(k)) {
                None
            } else {
                label_restriction(k)
            };
            if let Some(why) = label_key_problem(k).or(restriction) {
                report.add(format!("{path}.key"), why);
            }
        }
    }
    let operator = match raw.operator.as_deref() {
        None => {
            report.missing(format!("{path}.operator"));
            None
        }
        Some(text) => {
            let parsed = Operator::parse(text);
            if parsed.is_none() {
                report.add(
                    format!("{path}.operator"),
                    format!(
                        "unknown operator {text:?} (expected one of {})",
                        Operator::expected_list()
                    ),
                );
            }
            parsed
        }
    };
    let values = raw.values.unwrap_or_default();
    if let Some(op) = operator {
        check_values(op, &values, rules, path, report);
    }
    let min_values = min_values(raw.min_values, operator, values.len(), path, report);
    Some(NodeRequirement {
        key: key?,
        operator: operator?,
        values,
        min_values,
    })
}

fn check_values(
    operator: Operator,
    values: &[String],
    rules: &RequirementRules,
    path: &str,
    report: &mut Report<'_>,
) {
    let name = operator.as_str();
    let integer = rules.integer;
    match operator {
        _ if values.is_empty() && rules.need_values.contains(&operator) => {
            report.add(
                format!("{path}.values"),
                format!("operator {name} needs at least one value"),
            );
        }
        Operator::Exists | Operator::DoesNotExist if !values.is_empty() => {
            report.add(
                format!("{path}.values"),
                format!("operator {name} takes no values, got {}", values.len()),
            );
        }
        Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte => match values {
            [value] => {
                if !value.parse::<i64>().is_ok_and(|v| v >= 0) {
                    report.add(
                        format!("{path}.values[0]"),
                        format!("expected a single {integer}, got {value:?}"),
                    );
                }
            }
            _ => report.add(
                format!("{path}.values"),
                format!("expected a single {integer}, got {} values", values.len()),
            ),
        },
        _ => {}
    }
    for (i, value) in values.iter().enumerate() {
        if let Some(why) = label_value_problem(value) {
            report.add(format!("{path}.values[{i}]"), why);
        }
    }
    if let Some(max) = rules.max_values {
        check_max_items(report, &format!("{path}.values"), values.len(), max);
    }
}

fn min_values(
    raw: Option<i64>,
    operator: Option<Operator>,
    value_count: usize,
    path: &str,
    report: &mut Report<'_>,
) -> Option<u32> {
    let min = raw?;
    let field = format!("{path}.minValues");
    if !(1..=50).contains(&min) {
        report.add(field, format!("must be between 1 and 50, got {min}"));
        return None;
    }
    if operator == Some(Operator::In) && (min as usize) > value_count {
        report.add(
            field,
            format!("minValues {min} is more than the {value_count} value(s) given"),
        );
    }
    u32::try_from(min).ok()
}

fn with_default_capacity_type(mut requirements: Vec<NodeRequirement>) -> Vec<NodeRequirement> {
    if !requirements.iter().any(|r| r.key == LABEL_CAPACITY_TYPE) {
        requirements.push(NodeRequirement {
            key: LABEL_CAPACITY_TYPE.into(),
            operator: Operator::In,
            values: vec!["on-demand".into()],
            min_values: None,
        });
    }
    requirements
}

fn taints_of(raw: Option<Vec<raw::Taint>>, path: &str, report: &mut Report<'_>) -> Vec<Taint> {
    taints(raw.unwrap_or_default(), path, report)
}

fn taints(raw: Vec<raw::Taint>, path: &str, report: &mut Report<'_>) -> Vec<Taint> {
    raw.into_iter()
        .enumerate()
        .filter_map(|(i, t)| taint(t, &format!("{path}[{i}]"), report))
        .collect()
}

fn taint(raw: raw::Taint, path: &str, report: &mut Report<'_>) -> Option<Taint> {
    let key = raw.key.filter(|k| !k.is_empty());
    if key.is_none() {
        report.missing(format!("{path}.key"));
    }
    let effect = match raw.effect.as_deref() {
        None => {
            report.missing(format!("{path}.effect"));
            None
        }
        Some(text) => {
            let parsed = TaintEffect::parse(text);
            if parsed.is_none() {
                report.add(
                    format!("{path}.effect"),
                    format!("unknown effect {text:?} (expected one of NoSchedule, PreferNoSchedule, NoExecute)"),
                );
            }
            parsed
        }
    };
    Some(Taint {
        key: key?,
        value: raw.value.filter(|v| !v.is_empty()),
        effect: effect?,
    })
}

/// Karpenter refuses the same key and effect twice across taints and startupTaints.
fn check_duplicate_taints(taints: &[Taint], startup: &[Taint], report: &mut Report<'_>) {
    let mut seen = BTreeSet::new();
    let all = taints
        .iter()
        .map(|t| ("spec.template.spec.taints", t))
        .chain(
            startup
                .iter()
                .map(|t| ("spec.template.spec.startupTaints", t)),
        );
    for (field, taint) in all {
        if !seen.insert((taint.key.as_str(), taint.effect)) {
            report.add(
                field,
                format!(
                    "duplicate taint key and effect {}:{}",
                    taint.key,
                    taint.effect.as_str()
                ),
            );
        }
    }
}

fn node_class_ref(
    raw: Option<raw::NodeClassRef>,
    class_names: &BTreeSet<String>,
    report: &mut Report<'_>,
) -> Option<NodeClassRef> {
    const PATH: &str = "spec.template.spec.nodeClassRef";
    let Some(raw) = raw else {
        report.missing(PATH);
        return None;
    };
    let mut field = |name: &str, value: Option<String>, expected: Option<&str>| {
        let value = value.filter(|v| !v.is_empty());
        match (&value, expected) {
            (None, _) => report.missing(format!("{PATH}.{name}")),
            (Some(v), Some(want)) if v != want => report.add(
                format!("{PATH}.{name}"),
                format!("expected {want:?} (nodewright reads EC2NodeClass only), got {v:?}"),
            ),
            _ => {}
        }
        value
    };
    let group = field("group", raw.group, Some(NODE_CLASS_GROUP));
    let kind = field("kind", raw.kind, Some(NODE_CLASS_KIND));
    let name = field("name", raw.name, None);
    if let Some(n) = name.as_ref().filter(|n| !class_names.contains(*n)) {
        report.add(
            format!("{PATH}.name"),
            format!("EC2NodeClass {n:?} is not defined in the input"),
        );
    }
    Some(NodeClassRef {
        group: group?,
        kind: kind?,
        name: name?,
    })
}

fn nillable_duration(text: &str, path: &str, report: &mut Report<'_>) -> Option<Duration> {
    match parse_nillable_duration(text) {
        Some(duration) => duration,
        None => {
            report.add(path, bad_duration(text, EXPECTED_DURATION_OR_NEVER));
            None
        }
    }
}

fn bad_duration(text: &str, expected: &str) -> String {
    format!("{expected}, got {text:?}")
}

fn limits(raw: BTreeMap<String, raw::Scalar>, report: &mut Report<'_>) -> Resources {
    let mut limits = Resources::new();
    for (name, raw::Scalar(text)) in raw {
        let path = format!("spec.limits.{name}");
        // The CRD's pattern is checked by the API server before Karpenter parses the
        // value, and refuses a few strings the parser alone would read as zero.
        if !matches_crd_quantity_pattern(&text) {
            report.add(path, QuantityError::Malformed(text).to_string());
            continue;
        }
        match parse_milli(&text) {
            Ok(milli) if milli < 0 => {
                report.add(path, format!("must not be negative, got {text:?}"))
            }
            Ok(milli) => limits.set_milli(&name, milli),
            Err(e) => report.add(path, e.to_string()),
        }
    }
    limits
}

/// `limits.nodes: 0`: no node at all (the resource vector cannot hold a zero).
fn node_limit_of_zero(written: &BTreeMap<String, bool>) -> Option<u64> {
    written.get("nodes").is_some_and(|&zero| zero).then_some(0)
}

/// `spec.replicas`: at least 0 (the CRD's minimum).
fn replicas(raw: Option<i64>, report: &mut Report<'_>) -> Option<u32> {
    let n = raw?;
    match u32::try_from(n) {
        Ok(n) => Some(n),
        Err(_) if n < 0 => {
            report.add("spec.replicas", format!("must be at least 0, got {n}"));
            None
        }
        Err(_) => {
            report.add(
                "spec.replicas",
                format!("must be at most {}, got {n}", u32::MAX),
            );
            None
        }
    }
}

/// The CRD's rules for a static NodePool: only `limits.nodes`, no `weight`.
fn check_static(limits: &BTreeMap<String, bool>, has_weight: bool, report: &mut Report<'_>) {
    for name in limits.keys().filter(|n| n.as_str() != "nodes") {
        report.add(
            format!("spec.limits.{name}"),
            "only 'limits.nodes' is supported on static NodePools (spec.replicas is set)",
        );
    }
    if has_weight {
        report.add(
            "spec.weight",
            "'weight' is not supported on static NodePools (spec.replicas is set)",
        );
    }
}

fn weight(raw: Option<i64>, report: &mut Report<'_>) -> i32 {
    match raw {
        None => 0,
        Some(w) if (1..=100).contains(&w) => w as i32,
        Some(w) => {
            report.add("spec.weight", format!("must be between 1 and 100, got {w}"));
            0
        }
    }
}

fn disruption(raw: raw::Disruption, report: &mut Report<'_>) -> Disruption {
    let consolidation_policy = match raw.consolidation_policy.as_deref() {
        None | Some("WhenEmptyOrUnderutilized") => ConsolidationPolicy::WhenEmptyOrUnderutilized,
        Some("WhenEmpty") => ConsolidationPolicy::WhenEmpty,
        Some("Balanced") => ConsolidationPolicy::Balanced,
        Some(other) => {
            report.add(
                "spec.disruption.consolidationPolicy",
                format!(
                    "unknown policy {other:?} (expected one of WhenEmpty, WhenEmptyOrUnderutilized, Balanced)"
                ),
            );
            ConsolidationPolicy::WhenEmptyOrUnderutilized
        }
    };
    let consolidate_after = match raw.consolidate_after {
        None => Some(Duration::ZERO),
        Some(text) => nillable_duration(&text, "spec.disruption.consolidateAfter", report),
    };
    let budgets = match raw.budgets {
        None => vec![default_budget()],
        Some(list) => budgets(list, report),
    };
    Disruption {
        consolidation_policy,
        consolidate_after,
        budgets,
    }
}

fn default_budget() -> Budget {
    Budget {
        nodes: BudgetNodes::Percent(10),
        schedule: None,
        duration: None,
        reasons: vec![],
    }
}

fn budgets(raw: Vec<raw::Budget>, report: &mut Report<'_>) -> Vec<Budget> {
    check_max_items(report, "spec.disruption.budgets", raw.len(), 50);
    raw.into_iter()
        .enumerate()
        .filter_map(|(i, b)| budget(b, &format!("spec.disruption.budgets[{i}]"), report))
        .collect()
}

fn budget(raw: raw::Budget, path: &str, report: &mut Report<'_>) -> Option<Budget> {
    match (raw.schedule.is_some(), raw.duration.is_some()) {
        (true, false) => report.add(format!("{path}.duration"), "a schedule requires a duration"),
        (false, true) => report.add(format!("{path}.schedule"), "a duration requires a schedule"),
        _ => {}
    }
    let nodes = match raw.nodes {
        None => Some(BudgetNodes::Percent(10)),
        Some(raw::Scalar(text)) => {
            let parsed = parse_budget_nodes(&text);
            if parsed.is_none() {
                report.add(
                    format!("{path}.nodes"),
                    format!(r#"expected a percentage like "10%" (0-100%) or a node count like "5", got {text:?}"#),
                );
            }
            parsed
        }
    };
    let schedule = raw.schedule.filter(|s| match CronSchedule::parse(s) {
        Ok(_) => true,
        Err(why) => {
            report.add(
                format!("{path}.schedule"),
                format!("invalid cron schedule {s:?}: {why}"),
            );
            false
        }
    });
    let duration = raw.duration.as_deref().and_then(|text| {
        let parsed = parse_budget_duration(text);
        if parsed.is_none() {
            report.add(
                format!("{path}.duration"),
                format!(
                    r#"expected hours and/or minutes like "8h", "30m" or "1h30m", got {text:?}"#
                ),
            );
        }
        parsed
    });
    let reasons = reasons(raw.reasons.unwrap_or_default(), path, report);
    Some(Budget {
        nodes: nodes?,
        schedule,
        duration,
        reasons,
    })
}

/// `^((100|[0-9]{1,2})%|[0-9]+)$`
fn parse_budget_nodes(text: &str) -> Option<BudgetNodes> {
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    match text.strip_suffix('%') {
        Some(percent) if all_digits(percent) && percent.len() <= 3 => {
            let value: u32 = percent.parse().ok()?;
            (percent.len() <= 2 || percent == "100").then_some(BudgetNodes::Percent(value))
        }
        Some(_) => None,
        None if all_digits(text) => text.parse().ok().map(BudgetNodes::Count),
        None => None,
    }
}

fn reasons(raw: Vec<String>, path: &str, report: &mut Report<'_>) -> Vec<DisruptionReason> {
    check_max_items(report, &format!("{path}.reasons"), raw.len(), 50);
    let mut reasons = Vec::new();
    for (i, text) in raw.iter().enumerate() {
        let reason = match text.as_str() {
            "Underutilized" => DisruptionReason::Underutilized,
            "Empty" => DisruptionReason::Empty,
            "Drifted" => DisruptionReason::Drifted,
            "Unhealthy" => DisruptionReason::Unhealthy,
            other => {
                report.add(
                    format!("{path}.reasons[{i}]"),
                    format!(
                        "unknown reason {other:?} (expected one of Underutilized, Empty, Drifted, Unhealthy)"
                    ),
                );
                continue;
            }
        };
        if !reasons.contains(&reason) {
            reasons.push(reason);
        }
    }
    reasons
}

#[cfg(test)]
mod tests;
