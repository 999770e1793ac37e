//! Kubernetes API objects (`k8s_openapi` types) → the scheduling view of
//! [`crate::cluster`] and [`crate::volumes`], one file per kind: [`pod`] (pods and
//! DaemonSet pod templates, which share the pod spec), [`node`], [`pdb`], [`storage`].
//! This file holds the field conversions several kinds share (quantities, node
//! requirements, label selectors, taint effects, times, annotations).

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

pub use node::node_from_k8s;
pub use pdb::pdb_from_k8s;
pub use pod::{HOSTNAME_LABEL, daemonset_from_k8s, pod_from_k8s};
pub use storage::{pv_from_k8s, pvc_from_k8s, storage_class_from_k8s};

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
        .get("karpenter.sh/do-not-disrupt")
        .is_some_and(|v| v == "true")
}
