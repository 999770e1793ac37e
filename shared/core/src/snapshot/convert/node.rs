//! Nodes: readiness, taints, allocatable and capacity, and what disruption reads (times,
//! do-not-disrupt, the drift hashes nodewright wrote).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::{do_not_disrupt, quantity, taint_effect, unix};
use crate::api::model::Taint;
use crate::cluster::{ConditionStatus, Node, NodeCondition};
use crate::resources::Resources;
use crate::snapshot::error::{Result, SnapshotError};

/// Converts a Kubernetes node. `ready` is the Ready condition being "True"; allocatable
/// and capacity are parsed exactly and must not be negative.
pub fn node_from_k8s(node: &core::Node) -> Result<Node, SnapshotError> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let object = format!("node {name:?}");
    let mut out = Node {
        labels: node.metadata.labels.clone().unwrap_or_default(),
        ..Node::default()
    };
    if let Some(spec) = &node.spec {
        out.provider_id = spec.provider_id.clone().filter(|p| !p.is_empty());
        out.unschedulable = spec.unschedulable.unwrap_or(false);
        for (i, t) in spec.taints.iter().flatten().enumerate() {
            out.taints.push(Taint {
                key: t.key.clone(),
                value: t.value.clone().filter(|v| !v.is_empty()),
                effect: taint_effect(&object, &format!("spec.taints[{i}].effect"), &t.effect)?,
            });
        }
    }
    if let Some(status) = &node.status {
        out.allocatable =
            resource_list(&object, "status.allocatable", status.allocatable.as_ref())?;
        out.capacity = resource_list(&object, "status.capacity", status.capacity.as_ref())?;
        let ready = status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "Ready" && c.status == "True");
        out.ready = ready.is_some();
        out.ready_since = ready
            .and_then(|c| c.last_transition_time.as_ref())
            .map(unix);
        // Only what node repair reads: a node reports a dozen conditions, and a view
        // of thousands of nodes keeps them all.
        out.boot_id = status
            .node_info
            .as_ref()
            .map(|i| i.boot_id.clone())
            .filter(|b| !b.is_empty());
        out.conditions = status
            .conditions
            .iter()
            .flatten()
            .filter(|c| crate::repair::WATCHED_CONDITIONS.contains(&c.type_.as_str()))
            .map(|c| NodeCondition {
                kind: c.type_.clone(),
                status: ConditionStatus::parse(&c.status),
                since: c.last_transition_time.as_ref().map(unix),
                reason: c.reason.clone().filter(|r| !r.is_empty()),
            })
            .collect();
    }
    let meta = &node.metadata;
    out.created_at = meta.creation_timestamp.as_ref().map(unix);
    out.deleting = meta.deletion_timestamp.is_some();
    if let Some(annotations) = &meta.annotations {
        out.do_not_disrupt = do_not_disrupt(annotations);
        out.do_not_repair = annotations
            .get(crate::well_known::ANNOTATION_DO_NOT_REPAIR)
            .is_some_and(|v| v == "true");
        // Only hashes nodewright wrote are comparable: Karpenter's (another version)
        // hash other fields another way.
        use crate::disruption::hash;
        let ours = |version: &str| {
            annotations.get(version).map(String::as_str) == Some(hash::HASH_VERSION)
        };
        if ours(crate::well_known::ANNOTATION_NODEPOOL_HASH_VERSION) {
            out.nodepool_hash = annotations
                .get(crate::well_known::ANNOTATION_NODEPOOL_HASH)
                .cloned();
        }
        if ours(crate::well_known::ANNOTATION_NODECLASS_HASH_VERSION) {
            out.nodeclass_hash = annotations
                .get(crate::well_known::ANNOTATION_NODECLASS_HASH)
                .cloned();
        }
    }
    out.name = name;
    Ok(out)
}

fn resource_list(
    object: &str,
    path: &str,
    list: Option<&BTreeMap<String, Quantity>>,
) -> Result<Resources> {
    let mut out = Resources::new();
    for (name, q) in list.into_iter().flatten() {
        out.set_milli(name, quantity(object, None, format!("{path}.{name}"), q)?);
    }
    Ok(out)
}
