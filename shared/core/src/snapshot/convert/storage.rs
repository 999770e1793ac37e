//! Storage: PersistentVolumeClaims, PersistentVolumes and StorageClasses, read for where
//! they let a pod run (applied to pods by [`crate::volumes::apply_volume_topology`]), and
//! CSINodes with the PVs' drivers for how many volumes a node attaches
//! ([`crate::volume_limits`]).

use crate::well_known::ANNOTATION_BIND_COMPLETED;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::storage::v1 as storage;

use super::{namespace_or_default, node_requirement};
use crate::api::model::{NodeRequirement, Operator};
use crate::snapshot::error::SnapshotError;
use crate::volume_limits::{CsiNode, EBS_CSI_DRIVER, Published};
use crate::volumes::{PersistentVolume, StorageClass, VolumeClaim};

/// Converts a PersistentVolumeClaim (nothing in it can be malformed for our purposes).
pub fn pvc_from_k8s(pvc: &core::PersistentVolumeClaim) -> VolumeClaim {
    let spec = pvc.spec.as_ref();
    VolumeClaim {
        namespace: namespace_or_default(&pvc.metadata),
        name: pvc.metadata.name.clone().unwrap_or_default(),
        volume_name: spec
            .and_then(|s| s.volume_name.clone())
            .filter(|v| !v.is_empty()),
        storage_class: spec
            .and_then(|s| s.storage_class_name.clone())
            .filter(|c| !c.is_empty()),
        deleting: pvc.metadata.deletion_timestamp.is_some(),
        lost: pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Lost"),
        bind_completed: pvc
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(ANNOTATION_BIND_COMPLETED)),
    }
}

/// Converts a PersistentVolume: its required node affinity's `matchExpressions` (what
/// Karpenter reads; `matchFields` are not used for volumes), with operators checked as
/// for pods. Errors name the volume and the field.
pub fn pv_from_k8s(pv: &core::PersistentVolume) -> Result<PersistentVolume, SnapshotError> {
    let name = pv.metadata.name.clone().unwrap_or_default();
    let object = format!("PersistentVolume {name:?}");
    let spec = pv.spec.as_ref();
    let mut required_terms = Vec::new();
    let required = spec
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref());
    for (i, term) in required
        .map(|r| r.node_selector_terms.as_slice())
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let mut reqs = Vec::new();
        for (j, r) in term.match_expressions.iter().flatten().enumerate() {
            let path =
                format!("spec.nodeAffinity.required.nodeSelectorTerms[{i}].matchExpressions[{j}]");
            reqs.push(node_requirement(&object, &path, r, &r.key)?);
        }
        if !reqs.is_empty() {
            required_terms.push(reqs);
        }
    }
    Ok(PersistentVolume {
        name,
        required_terms,
        node_local: spec.is_some_and(|s| s.local.is_some() || s.host_path.is_some()),
        deleting: pv.metadata.deletion_timestamp.is_some(),
        csi_driver: spec.and_then(|s| match (&s.csi, &s.aws_elastic_block_store) {
            (Some(csi), _) => Some(csi.driver.clone()),
            (None, Some(_)) => Some(EBS_CSI_DRIVER.to_string()),
            (None, None) => None,
        }),
    })
}

/// Converts a StorageClass: `allowedTopologies` become `In` requirements.
pub fn storage_class_from_k8s(sc: &storage::StorageClass) -> StorageClass {
    let allowed_topologies = sc
        .allowed_topologies
        .iter()
        .flatten()
        .map(|term| {
            term.match_label_expressions
                .iter()
                .flatten()
                .map(|e| NodeRequirement {
                    key: e.key.clone(),
                    operator: Operator::In,
                    values: e.values.clone(),
                    min_values: None,
                })
                .collect::<Vec<_>>()
        })
        .filter(|term| !term.is_empty())
        .collect();
    StorageClass {
        name: sc.metadata.name.clone().unwrap_or_default(),
        wait_for_first_consumer: sc.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer"),
        allowed_topologies,
        provisioner: sc.provisioner.clone(),
    }
}

/// Converts a CSINode to what the EBS CSI driver published on it: its count, or no
/// limit when it registered without one.
pub fn csi_node_from_k8s(csi_node: &storage::CSINode) -> CsiNode {
    let ebs = csi_node
        .spec
        .drivers
        .iter()
        .find(|d| d.name == EBS_CSI_DRIVER)
        .map(|d| match d.allocatable.as_ref().and_then(|a| a.count) {
            Some(count) => Published::Count(i64::from(count)),
            None => Published::Unbounded,
        });
    CsiNode {
        name: csi_node.metadata.name.clone().unwrap_or_default(),
        ebs,
    }
}
