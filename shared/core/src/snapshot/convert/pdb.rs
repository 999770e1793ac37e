//! PodDisruptionBudgets: the selector, and `minAvailable`/`maxUnavailable` checked as
//! Kubernetes checks them when it evaluates a budget.

use k8s_openapi::api::policy::v1 as policy;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{label_selector, namespace_or_default};
use crate::cluster::{IntOrPercent, PodDisruptionBudget};
use crate::snapshot::error::{Result, SnapshotError};

/// Converts a PodDisruptionBudget. `minAvailable`/`maxUnavailable` are an integer (≥ 0)
/// or a percentage string "0%".."100%"; a plain numeric string such as "3" is rejected,
/// as Kubernetes does when it evaluates the budget.
pub fn pdb_from_k8s(
    pdb: &policy::PodDisruptionBudget,
) -> Result<PodDisruptionBudget, SnapshotError> {
    let namespace = namespace_or_default(&pdb.metadata);
    let name = pdb.metadata.name.clone().unwrap_or_default();
    let object = format!("PodDisruptionBudget \"{namespace}/{name}\"");
    let mut out = PodDisruptionBudget {
        namespace,
        name,
        selector: None,
        min_available: None,
        max_unavailable: None,
        status_disruptions_allowed: pdb
            .status
            .as_ref()
            .map(|s| i64::from(s.disruptions_allowed)),
    };
    if let Some(spec) = &pdb.spec {
        if let Some(s) = &spec.selector {
            out.selector = Some(label_selector(&object, "spec.selector", s)?);
        }
        if let Some(v) = &spec.min_available {
            out.min_available = Some(int_or_percent(&object, "spec.minAvailable", v)?);
        }
        if let Some(v) = &spec.max_unavailable {
            out.max_unavailable = Some(int_or_percent(&object, "spec.maxUnavailable", v)?);
        }
    }
    Ok(out)
}

fn int_or_percent(object: &str, path: &str, v: &IntOrString) -> Result<IntOrPercent> {
    let invalid = |value: String| SnapshotError::InvalidValue {
        object: object.to_string(),
        path: path.to_string(),
        value,
        expected: "an integer of at least 0 or a percentage such as \"50%\"".to_string(),
    };
    match v {
        IntOrString::Int(i) if *i >= 0 => Ok(IntOrPercent::Int(*i)),
        IntOrString::Int(i) => Err(invalid(i.to_string())),
        IntOrString::String(s) => s
            .strip_suffix('%')
            .filter(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|digits| digits.parse::<u32>().ok())
            .filter(|p| *p <= 100)
            .map(IntOrPercent::Percent)
            .ok_or_else(|| invalid(s.clone())),
    }
}
