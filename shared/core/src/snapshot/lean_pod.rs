//! Lean decoding of a snapshot's pods, for the fast pass (`super::fast`): the fields of
//! a pod that the conversion reads, with the types (and so the checks) `k8s_openapi`
//! gives them; everything else is skipped unread. Like `k8s_openapi`'s own visitors,
//! they read JSON objects only, a null field is absent, and a repeated key keeps its
//! last value.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use serde::Deserialize;
use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde_json::Value;

/// A key, borrowed from the input when it has no escapes.
struct Key<'de>(std::borrow::Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("field identifier")
            }
            fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Borrowed(v)))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Owned(v.to_string())))
            }
        }
        d.deserialize_str(V)
    }
}

macro_rules! lean {
    ($(#[$doc:meta])* struct $name:ident { $($field:ident : $ty:ty = $key:literal),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Default)]
        struct $name {
            $($field: Option<$ty>,)*
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> Visitor<'de> for V {
                    type Value = $name;
                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        f.write_str(stringify!($name))
                    }
                    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<$name, A::Error> {
                        let mut out = $name::default();
                        while let Some(key) = map.next_key::<Key<'de>>()? {
                            match &*key.0 {
                                $($key => out.$field = map.next_value()?,)*
                                _ => {
                                    map.next_value::<IgnoredAny>()?;
                                }
                            }
                        }
                        Ok(out)
                    }
                }
                d.deserialize_map(V)
            }
        }
    };
}

/// A `List` item read as a pod. `apiVersion` and `kind` are kept as found (a null
/// one is not an absent one: `k8s_openapi` refuses it).
#[derive(Default)]
pub(super) struct LeanPodItem {
    api_version: Option<Value>,
    kind: Option<Value>,
    metadata: Option<LeanMeta>,
    spec: Option<LeanPodSpec>,
    status: Option<LeanPodStatus>,
}

impl<'de> Deserialize<'de> for LeanPodItem {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = LeanPodItem;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("Pod")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<LeanPodItem, A::Error> {
                let mut out = LeanPodItem::default();
                while let Some(key) = map.next_key::<Key<'de>>()? {
                    match &*key.0 {
                        "apiVersion" => out.api_version = Some(map.next_value()?),
                        "kind" => out.kind = Some(map.next_value()?),
                        "metadata" => out.metadata = map.next_value()?,
                        "spec" => out.spec = map.next_value()?,
                        "status" => out.status = map.next_value()?,
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_map(V)
    }
}

lean! {
    struct LeanMeta {
        name: String = "name",
        namespace: String = "namespace",
        labels: BTreeMap<String, String> = "labels",
        annotations: BTreeMap<String, String> = "annotations",
        owner_references: Vec<meta::OwnerReference> = "ownerReferences",
        creation_timestamp: meta::Time = "creationTimestamp",
        deletion_timestamp: meta::Time = "deletionTimestamp",
        uid: String = "uid",
        resource_version: String = "resourceVersion",
    }
}

lean! {
    struct LeanPodSpec {
        affinity: core::Affinity = "affinity",
        containers: Vec<LeanContainer> = "containers",
        init_containers: Vec<LeanContainer> = "initContainers",
        node_name: String = "nodeName",
        node_selector: BTreeMap<String, String> = "nodeSelector",
        overhead: BTreeMap<String, Quantity> = "overhead",
        priority: i32 = "priority",
        priority_class_name: String = "priorityClassName",
        resources: core::ResourceRequirements = "resources",
        scheduler_name: String = "schedulerName",
        termination_grace_period_seconds: i64 = "terminationGracePeriodSeconds",
        tolerations: Vec<core::Toleration> = "tolerations",
        topology_spread_constraints: Vec<core::TopologySpreadConstraint> = "topologySpreadConstraints",
        volumes: Vec<LeanVolume> = "volumes",
    }
}

lean! {
    struct LeanContainer {
        name: String = "name",
        ports: Vec<core::ContainerPort> = "ports",
        resources: core::ResourceRequirements = "resources",
        restart_policy: String = "restartPolicy",
    }
}

lean! {
    struct LeanVolume {
        name: String = "name",
        persistent_volume_claim: core::PersistentVolumeClaimVolumeSource = "persistentVolumeClaim",
        ephemeral: core::EphemeralVolumeSource = "ephemeral",
    }
}

lean! {
    struct LeanPodStatus {
        conditions: Vec<core::PodCondition> = "conditions",
        nominated_node_name: String = "nominatedNodeName",
        phase: String = "phase",
        start_time: meta::Time = "startTime",
    }
}

/// A pod decoded with only what [`super::pod_from_k8s`] reads, plus its identity
/// (`uid`, `resourceVersion`): what a watch of every pod in a cluster keeps. Decoding a
/// whole `k8s_openapi` pod allocates every container's env, probes, mounts and the
/// managedFields, which no decision reads; at 25,000 pods that is most of a list's cost.
/// Unlike the snapshot reader it does not require `kind` (list items of built-in kinds
/// have none).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LeanPod(pub core::Pod);

impl<'de> Deserialize<'de> for LeanPod {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(LeanPod(LeanPodItem::deserialize(d)?.into_k8s()))
    }
}

impl LeanPodItem {
    /// The pod as `k8s_openapi` would have read it (as far as the conversion looks),
    /// when this item is one: kind "Pod", apiVersion "v1" or none.
    pub(super) fn into_pod(self) -> Option<core::Pod> {
        if self.kind != Some(Value::String("Pod".to_string())) {
            return None;
        }
        match &self.api_version {
            None => {}
            Some(Value::String(v)) if v == "v1" => {}
            Some(_) => return None,
        }
        Some(self.into_k8s())
    }

    /// The fields read, as a `k8s_openapi` pod (kind and apiVersion not checked).
    fn into_k8s(self) -> core::Pod {
        let m = self.metadata.unwrap_or_default();
        let metadata = meta::ObjectMeta {
            name: m.name,
            namespace: m.namespace,
            labels: m.labels,
            annotations: m.annotations,
            owner_references: m.owner_references,
            creation_timestamp: m.creation_timestamp,
            deletion_timestamp: m.deletion_timestamp,
            uid: m.uid,
            resource_version: m.resource_version,
            ..Default::default()
        };
        let spec = self.spec.map(|s| core::PodSpec {
            affinity: s.affinity,
            containers: s
                .containers
                .unwrap_or_default()
                .into_iter()
                .map(LeanContainer::into_k8s)
                .collect(),
            init_containers: s
                .init_containers
                .map(|cs| cs.into_iter().map(LeanContainer::into_k8s).collect()),
            node_name: s.node_name,
            node_selector: s.node_selector,
            overhead: s.overhead,
            priority: s.priority,
            priority_class_name: s.priority_class_name,
            resources: s.resources,
            scheduler_name: s.scheduler_name,
            termination_grace_period_seconds: s.termination_grace_period_seconds,
            tolerations: s.tolerations,
            topology_spread_constraints: s.topology_spread_constraints,
            volumes: s.volumes.map(|vs| {
                vs.into_iter()
                    .map(|v| core::Volume {
                        name: v.name.unwrap_or_default(),
                        persistent_volume_claim: v.persistent_volume_claim,
                        ephemeral: v.ephemeral,
                        ..Default::default()
                    })
                    .collect()
            }),
            ..Default::default()
        });
        let status = self.status.map(|s| core::PodStatus {
            conditions: s.conditions,
            nominated_node_name: s.nominated_node_name,
            phase: s.phase,
            start_time: s.start_time,
            ..Default::default()
        });
        core::Pod {
            metadata,
            spec,
            status,
        }
    }
}

impl LeanContainer {
    fn into_k8s(self) -> core::Container {
        core::Container {
            name: self.name.unwrap_or_default(),
            ports: self.ports,
            resources: self.resources,
            restart_policy: self.restart_policy,
            ..Default::default()
        }
    }
}
