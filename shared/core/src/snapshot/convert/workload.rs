//! Workloads a CapacityBuffer may take its chunk from, and a pod template read as one
//! chunk.

use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::pod::pod_from_k8s;
use k8s_openapi::api::autoscaling::v2 as autoscaling;

use crate::cluster::{Autoscaler, ControllerSelector, Pod, ScalableWorkload};
use crate::snapshot::SnapshotError;

/// A workload's (or PodTemplate's) pod template as one buffer chunk: read as a pod,
/// with the volumes that need a claim (`persistentVolumeClaim`, `ephemeral`) and their
/// mounts dropped, as Karpenter's virtual pods have them.
pub fn chunk_pod(
    namespace: &str,
    name: &str,
    template: core::PodTemplateSpec,
) -> Result<Pod, String> {
    let mut spec = template.spec.unwrap_or_default();
    let dropped: Vec<String> = spec
        .volumes
        .iter()
        .flatten()
        .filter(|v| v.persistent_volume_claim.is_some() || v.ephemeral.is_some())
        .map(|v| v.name.clone())
        .collect();
    if let Some(volumes) = spec.volumes.as_mut() {
        volumes.retain(|v| !dropped.contains(&v.name));
    }
    let strip = |containers: &mut Vec<core::Container>| {
        for c in containers {
            if let Some(mounts) = c.volume_mounts.as_mut() {
                mounts.retain(|m| !dropped.contains(&m.name));
            }
        }
    };
    strip(&mut spec.containers);
    if let Some(init) = spec.init_containers.as_mut() {
        strip(init);
    }
    spec.node_name = None;
    let pod = core::Pod {
        metadata: ObjectMeta {
            namespace: Some(namespace.to_string()),
            name: Some(name.to_string()),
            labels: template.metadata.and_then(|m| m.labels),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    };
    pod_from_k8s(&pod).map_err(|e| e.to_string())
}

/// A workload read from the cluster as a `scalableRef` may name it.
pub fn scalable_workload(
    kind: &str,
    meta: &ObjectMeta,
    replicas: Option<i32>,
    template: core::PodTemplateSpec,
) -> ScalableWorkload {
    let namespace = meta
        .namespace
        .clone()
        .filter(|ns| !ns.is_empty())
        .unwrap_or_else(|| "default".to_string());
    let name = meta.name.clone().unwrap_or_default();
    ScalableWorkload {
        kind: kind.to_string(),
        template: chunk_pod(&namespace, &name, template),
        namespace,
        name,
        replicas,
    }
}

/// A Deployment as a `scalableRef` reads it.
pub fn deployment_from_k8s(d: apps::Deployment) -> ScalableWorkload {
    let spec = d.spec.unwrap_or_default();
    scalable_workload("Deployment", &d.metadata, spec.replicas, spec.template)
}

/// A StatefulSet as a `scalableRef` reads it.
pub fn statefulset_from_k8s(s: apps::StatefulSet) -> ScalableWorkload {
    let spec = s.spec.unwrap_or_default();
    scalable_workload("StatefulSet", &s.metadata, spec.replicas, spec.template)
}

/// A ReplicaSet as a `scalableRef` reads it.
pub fn replicaset_from_k8s(r: apps::ReplicaSet) -> ScalableWorkload {
    let spec = r.spec.unwrap_or_default();
    scalable_workload(
        "ReplicaSet",
        &r.metadata,
        spec.replicas,
        spec.template.unwrap_or_default(),
    )
}

/// A controller by its selector, as the default topology spread reads it.
pub fn controller_selector(
    kind: &str,
    object: &ObjectMeta,
    selector: Option<&meta::LabelSelector>,
) -> ControllerSelector {
    let namespace = super::namespace_or_default(object);
    let name = object.name.clone().unwrap_or_default();
    let selector = selector.and_then(|s| super::label_selector(&name, "spec.selector", s).ok());
    ControllerSelector {
        kind: kind.to_string(),
        namespace,
        name,
        selector,
    }
}

pub fn replicaset_selector(r: &apps::ReplicaSet) -> ControllerSelector {
    controller_selector(
        "ReplicaSet",
        &r.metadata,
        r.spec.as_ref().map(|s| &s.selector),
    )
}

pub fn statefulset_selector(s: &apps::StatefulSet) -> ControllerSelector {
    controller_selector(
        "StatefulSet",
        &s.metadata,
        s.spec.as_ref().map(|s| &s.selector),
    )
}

/// A ReplicationController's selector is labels: read as `match_labels`.
pub fn replication_controller_selector(r: &core::ReplicationController) -> ControllerSelector {
    let selector = r
        .spec
        .as_ref()
        .and_then(|s| s.selector.clone())
        .map(|labels| meta::LabelSelector {
            match_labels: Some(labels),
            match_expressions: None,
        });
    controller_selector("ReplicationController", &r.metadata, selector.as_ref())
}

/// A Service as the default topology spread reads it: its namespace and selector.
pub fn service_from_k8s(s: &core::Service) -> crate::cluster::Service {
    crate::cluster::Service {
        namespace: super::namespace_or_default(&s.metadata),
        name: s.metadata.name.clone().unwrap_or_default(),
        selector: s
            .spec
            .as_ref()
            .and_then(|spec| spec.selector.as_ref())
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()),
    }
}

/// A HorizontalPodAutoscaler: its target and bounds. A negative `minReplicas`, or a
/// `maxReplicas` below 1 or below `minReplicas`, is an object the API server refuses.
pub fn autoscaler_from_k8s(
    hpa: &autoscaling::HorizontalPodAutoscaler,
) -> Result<Autoscaler, SnapshotError> {
    let namespace = super::namespace_or_default(&hpa.metadata);
    let name = hpa.metadata.name.clone().unwrap_or_default();
    let object = format!("HorizontalPodAutoscaler \"{namespace}/{name}\"");
    let invalid = |path: &str, value: String, expected: &str| SnapshotError::InvalidValue {
        object: object.clone(),
        path: path.to_string(),
        value,
        expected: expected.to_string(),
    };
    let spec = hpa.spec.clone().unwrap_or_default();
    // minReplicas 0 needs the HPAScaleToZero feature gate: read as the floor all the same.
    let min = spec.min_replicas.unwrap_or(1);
    if min < 0 {
        return Err(invalid(
            "spec.minReplicas",
            min.to_string(),
            "a count of at least 0",
        ));
    }
    if spec.max_replicas < 1 || spec.max_replicas < min {
        return Err(invalid(
            "spec.maxReplicas",
            spec.max_replicas.to_string(),
            &format!("a count of at least 1 and at least spec.minReplicas ({min})"),
        ));
    }
    if spec.scale_target_ref.name.is_empty() {
        return Err(invalid(
            "spec.scaleTargetRef.name",
            String::new(),
            "the name of the workload it scales",
        ));
    }
    Ok(Autoscaler {
        namespace,
        name,
        target_kind: spec.scale_target_ref.kind,
        target_name: spec.scale_target_ref.name,
        min_replicas: min as u32,
        max_replicas: spec.max_replicas as u32,
    })
}
