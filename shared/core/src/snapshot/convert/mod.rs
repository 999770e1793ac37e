//! Kubernetes API objects (`k8s_openapi` types) → the scheduling view of
//! [`crate::cluster`] and [`crate::volumes`], one file per kind: [`pod`] (pods and
//! DaemonSet pod templates, which share the pod spec), [`node`], [`pdb`], [`storage`], [`workload`] (what a CapacityBuffer takes its chunk from).
//! This file holds the field conversions several kinds share (quantities, node
//! requirements, label selectors, taint effects, times, annotations).

use crate::well_known::ANNOTATION_DO_NOT_DISRUPT;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;

use super::error::{ContainerRef, Result, SnapshotError};
use crate::api::model::{NodeRequirement, Operator, TaintEffect};
use crate::cluster::{LabelSelector, LabelSelectorOperator, LabelSelectorRequirement};
use crate::resources::parse_milli;

mod node;
mod pdb;
mod pod;
mod storage;
mod workload;

pub use node::node_from_k8s;
pub use pdb::pdb_from_k8s;
pub use pod::{daemonset_from_k8s, pod_from_k8s};
pub use storage::{csi_node_from_k8s, pv_from_k8s, pvc_from_k8s, storage_class_from_k8s};
pub use workload::{
    autoscaler_from_k8s, chunk_pod, controller_selector, deployment_from_k8s, replicaset_from_k8s,
    replicaset_selector, replication_controller_selector, scalable_workload, service_from_k8s,
    statefulset_from_k8s, statefulset_selector,
};

/// Operators Kubernetes accepts in node selector requirements (Karpenter's Gte/Lte are
/// NodePool-only; a pod using them would have been rejected by the API server).
const NODE_OPERATORS: &str = "In, NotIn, Exists, DoesNotExist, Gt, Lt";

const LABEL_SELECTOR_OPERATORS: &str = "In, NotIn, Exists, DoesNotExist";
const TAINT_EFFECTS: &str = "NoSchedule, PreferNoSchedule, NoExecute";

fn namespace_or_default(meta: &meta::ObjectMeta) -> String {
    match meta.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => ns.to_string(),
        _ => "default".to_string(),
    }
}

/// Parses a quantity that must not be negative.
fn quantity(
    object: &str,
    container: Option<&ContainerRef>,
    path: String,
    q: &Quantity,
) -> Result<i64> {
    match parse_milli(&q.0) {
        Ok(milli) if milli < 0 => Err(SnapshotError::NegativeQuantity {
            object: object.to_string(),
            container: container.cloned(),
            path,
            quantity: q.0.clone(),
        }),
        Ok(milli) => Ok(milli),
        Err(source) => Err(SnapshotError::Quantity {
            object: object.to_string(),
            container: container.cloned(),
            path,
            source,
        }),
    }
}

fn node_requirement(
    object: &str,
    path: &str,
    r: &core::NodeSelectorRequirement,
    key: &str,
) -> Result<NodeRequirement> {
    let operator = match r.operator.as_str() {
        "In" => Operator::In,
        "NotIn" => Operator::NotIn,
        "Exists" => Operator::Exists,
        "DoesNotExist" => Operator::DoesNotExist,
        "Gt" => Operator::Gt,
        "Lt" => Operator::Lt,
        other => {
            return Err(SnapshotError::UnknownOperator {
                object: object.to_string(),
                path: format!("{path}.operator"),
                operator: other.to_string(),
                expected: NODE_OPERATORS,
            });
        }
    };
    let values = r.values.clone().unwrap_or_default();
    if matches!(operator, Operator::Gt | Operator::Lt) {
        // The requirements algebra relies on exactly one integer here.
        let ok = matches!(values.as_slice(), [v] if v.parse::<i64>().is_ok());
        if !ok {
            return Err(SnapshotError::InvalidValue {
                object: object.to_string(),
                path: format!("{path}.values"),
                value: format!("{values:?}"),
                expected: format!("exactly one integer for operator {}", r.operator),
            });
        }
    }
    Ok(NodeRequirement {
        key: key.to_string(),
        operator,
        values,
        min_values: None,
    })
}

fn taint_effect(object: &str, path: &str, effect: &str) -> Result<TaintEffect> {
    TaintEffect::parse(effect).ok_or_else(|| SnapshotError::InvalidValue {
        object: object.to_string(),
        path: path.to_string(),
        value: effect.to_string(),
        expected: format!("one of {TAINT_EFFECTS}"),
    })
}

fn label_selector(object: &str, path: &str, s: &meta::LabelSelector) -> Result<LabelSelector> {
    let mut out = LabelSelector {
        match_labels: s.match_labels.clone().unwrap_or_default(),
        match_expressions: Vec::new(),
    };
    for (i, e) in s.match_expressions.iter().flatten().enumerate() {
        let operator = match e.operator.as_str() {
            "In" => LabelSelectorOperator::In,
            "NotIn" => LabelSelectorOperator::NotIn,
            "Exists" => LabelSelectorOperator::Exists,
            "DoesNotExist" => LabelSelectorOperator::DoesNotExist,
            other => {
                return Err(SnapshotError::UnknownOperator {
                    object: object.to_string(),
                    path: format!("{path}.matchExpressions[{i}].operator"),
                    operator: other.to_string(),
                    expected: LABEL_SELECTOR_OPERATORS,
                });
            }
        };
        out.match_expressions.push(LabelSelectorRequirement {
            key: e.key.clone(),
            operator,
            values: e.values.clone().unwrap_or_default(),
        });
    }
    Ok(out)
}

fn unix(t: &meta::Time) -> i64 {
    t.0.as_second()
}

/// `karpenter.sh/do-not-disrupt: "true"`.
fn do_not_disrupt(annotations: &BTreeMap<String, String>) -> bool {
    annotations
        .get(ANNOTATION_DO_NOT_DISRUPT)
        .is_some_and(|v| v == "true")
}

/// What a pod's `karpenter.sh/do-not-disrupt` says when it is not `"true"`: a
/// positive Go duration in whole seconds (rounded up), or the value and why it is
/// ignored (Karpenter's `parseDoNotDisrupt`: Go's `time.ParseDuration`, then > 0).
fn do_not_disrupt_duration(
    annotations: &BTreeMap<String, String>,
) -> Option<Result<i64, (String, String)>> {
    let value = annotations.get(ANNOTATION_DO_NOT_DISRUPT)?;
    if value == "true" {
        return None;
    }
    Some(match go_duration_nanos(value) {
        None => Err((
            value.clone(),
            format!("{value:?} is neither \"true\" nor a duration such as \"30m\" or \"1h30m\""),
        )),
        Some(n) if n <= 0 => Err((
            value.clone(),
            format!("duration {value:?} must be positive"),
        )),
        Some(n) => {
            let secs = n / 1_000_000_000 + i128::from(n % 1_000_000_000 != 0);
            Ok(i64::try_from(secs).unwrap_or(i64::MAX))
        }
    })
}

/// Go's `time.ParseDuration` in nanoseconds: an optional sign, then `0` or one or more
/// decimal numbers each with a unit (`ns`, `us`, `µs`, `ms`, `s`, `m`, `h`), e.g.
/// `"1.5h"`, `"2m30s"`, `"-1s"`. `None` when the text is not one or overflows Go's
/// int64 of nanoseconds.
fn go_duration_nanos(text: &str) -> Option<i128> {
    let (negative, body) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if body == "0" {
        return Some(0);
    }
    if body.is_empty() {
        return None;
    }
    let mut total: i128 = 0;
    let mut rest = body;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let int_part = &rest[..int_len];
        let mut after = &rest[int_len..];
        let mut frac_part = "";
        if let Some(f) = after.strip_prefix('.') {
            let frac_len = f.bytes().take_while(u8::is_ascii_digit).count();
            frac_part = &f[..frac_len];
            after = &f[frac_len..];
        }
        if int_part.is_empty() && frac_part.is_empty() {
            return None;
        }
        let (unit, scale): (&str, i128) = [
            ("ns", 1),
            ("us", 1_000),
            ("µs", 1_000),
            ("μs", 1_000),
            ("ms", 1_000_000),
            ("s", 1_000_000_000),
            ("m", 60_000_000_000),
            ("h", 3_600_000_000_000),
        ]
        .into_iter()
        .find(|(u, _)| after.starts_with(u))?;
        let whole: i128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().ok()?
        };
        let mut value = whole.checked_mul(scale)?;
        // The fraction, digit by digit, truncated as Go does.
        let mut place = scale;
        for d in frac_part.bytes() {
            place /= 10;
            if place == 0 {
                break;
            }
            value += i128::from(d - b'0') * place;
        }
        total = total.checked_add(value)?;
        if total > i128::from(i64::MAX) + i128::from(negative) {
            return None;
        }
        rest = &after[unit.len()..];
    }
    Some(if negative { -total } else { total })
}

/// `controller.kubernetes.io/pod-deletion-cost`, when it holds an int32 (the API
/// server admits nothing else on a pod).
fn pod_deletion_cost(annotations: &BTreeMap<String, String>) -> Option<i32> {
    annotations
        .get("controller.kubernetes.io/pod-deletion-cost")
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod annotation_tests {
    use super::*;

    fn annotated(value: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(ANNOTATION_DO_NOT_DISRUPT.to_string(), value.to_string())])
    }

    #[test]
    fn go_durations_parse_as_go_parses_them() {
        let s = 1_000_000_000i128;
        assert_eq!(go_duration_nanos("30m"), Some(1800 * s));
        assert_eq!(go_duration_nanos("1h30m"), Some(5400 * s));
        assert_eq!(go_duration_nanos("1.5h"), Some(5400 * s));
        assert_eq!(go_duration_nanos("+2m30s"), Some(150 * s));
        assert_eq!(go_duration_nanos("300ms"), Some(300_000_000));
        assert_eq!(go_duration_nanos(".5s"), Some(s / 2));
        assert_eq!(go_duration_nanos("-1s"), Some(-s));
        assert_eq!(go_duration_nanos("0"), Some(0));
        for bad in ["", "1", "1d", "true", "h", ".s", "1h-1m", "3000000h"] {
            assert_eq!(go_duration_nanos(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn do_not_disrupt_is_true_a_positive_duration_or_ignored() {
        assert_eq!(do_not_disrupt_duration(&annotated("true")), None);
        assert_eq!(do_not_disrupt_duration(&BTreeMap::new()), None);
        assert_eq!(do_not_disrupt_duration(&annotated("1h30m")), Some(Ok(5400)));
        assert_eq!(
            do_not_disrupt_duration(&annotated("1500ms")),
            Some(Ok(2)),
            "rounded up: protected at least as long as asked"
        );
        for bad in ["false", "yes", "0s", "-5m", "10"] {
            let got = do_not_disrupt_duration(&annotated(bad));
            assert!(
                matches!(got, Some(Err((ref v, _))) if v == bad),
                "{bad}: {got:?}"
            );
        }
    }

    #[test]
    fn pod_deletion_cost_is_an_int32() {
        let cost = |v: &str| {
            pod_deletion_cost(&BTreeMap::from([(
                "controller.kubernetes.io/pod-deletion-cost".to_string(),
                v.to_string(),
            )]))
        };
        assert_eq!(cost("2147483647"), Some(i32::MAX));
        assert_eq!(cost("-100"), Some(-100));
        assert_eq!(cost("2147483648"), None);
        assert_eq!(cost("cheap"), None);
    }
}
