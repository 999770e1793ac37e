//! Which kinds nodewright watches, and how each becomes a domain object (see `watch`
//! for how a kind is watched and kept).

use std::borrow::Cow;
use std::time::Duration;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::{DaemonSet, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Node, PersistentVolume, PersistentVolumeClaim, Pod, PodTemplate, ReplicationController, Service,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ObjectMeta};
use kube::{Client, Resource};
use serde::Deserialize;
use serde_json::Value;

use nodewright_core::api::buffer::{
    self, CAPACITY_BUFFER_API_VERSION, CAPACITY_BUFFER_KIND, CapacityBuffer,
};
use nodewright_core::api::fields::ObjectFields;
use nodewright_core::api::overlay::{
    InvalidOverlay, NODE_OVERLAY_API_VERSION, NODE_OVERLAY_KIND, ReadOverlay, overlay_label,
    parse_node_overlay,
};
use nodewright_core::api::{
    Document, Kind, NODE_CLASS_API_VERSION, NODE_CLASS_KIND, NODE_POOL_API_VERSION, NODE_POOL_KIND,
};
use nodewright_core::snapshot::{self, LeanPod};
use nodewright_core::{cluster, volume_limits, volumes};
use nodewright_engine::ports::ObjectKind;

use crate::mirror;
use crate::watch::{Watched, catch_up};

/// A Karpenter custom resource nodewright reads.
pub(crate) struct Crd {
    pub(crate) group: &'static str,
    pub(crate) version: &'static str,
    pub(crate) kind: &'static str,
    pub(crate) plural: &'static str,
    pub(crate) api_version: &'static str,
}

impl Crd {
    pub(crate) fn api(&self, client: Client) -> Api<DynamicObject> {
        Api::all_with(client, &self.resource())
    }

    /// The kind in one namespace (a namespaced kind's reads and writes by name).
    pub(crate) fn namespaced(&self, client: Client, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(client, namespace, &self.resource())
    }

    fn resource(&self) -> ApiResource {
        let gvk = GroupVersionKind::gvk(self.group, self.version, self.kind);
        ApiResource::from_gvk_with_plural(&gvk, self.plural)
    }
}

pub(crate) const NODE_POOLS: Crd = Crd {
    group: "karpenter.sh",
    version: "v1",
    kind: NODE_POOL_KIND,
    plural: "nodepools",
    api_version: NODE_POOL_API_VERSION,
};

pub(crate) const NODE_CLAIMS: Crd = Crd {
    group: "karpenter.sh",
    version: "v1",
    kind: "NodeClaim",
    plural: "nodeclaims",
    api_version: NODE_POOL_API_VERSION,
};

pub(crate) const NODE_CLASSES: Crd = Crd {
    group: "karpenter.k8s.aws",
    version: "v1",
    kind: NODE_CLASS_KIND,
    plural: "ec2nodeclasses",
    api_version: NODE_CLASS_API_VERSION,
};

pub(crate) const NODE_OVERLAYS: Crd = Crd {
    group: "karpenter.sh",
    version: "v1alpha1",
    kind: NODE_OVERLAY_KIND,
    plural: "nodeoverlays",
    api_version: NODE_OVERLAY_API_VERSION,
};

/// CapacityBuffers (Karpenter v1.14, Cluster Autoscaler's API): namespaced.
pub(crate) const CAPACITY_BUFFERS: Crd = Crd {
    group: "autoscaling.x-k8s.io",
    version: "v1beta1",
    kind: CAPACITY_BUFFER_KIND,
    plural: "capacitybuffers",
    api_version: CAPACITY_BUFFER_API_VERSION,
};

/// The custom resource of a Karpenter kind.
pub(crate) fn crd_of(kind: ObjectKind) -> &'static Crd {
    match kind {
        ObjectKind::NodePool => &NODE_POOLS,
        ObjectKind::Ec2NodeClass => &NODE_CLASSES,
        ObjectKind::NodeOverlay => &NODE_OVERLAYS,
        ObjectKind::CapacityBuffer => &CAPACITY_BUFFERS,
    }
}

/// A pod decoded with only what decisions read ([`LeanPod`]), as kube-rs's watcher
/// needs it: a `Resource` with Pod's group, version and kind.
#[derive(Debug, Clone)]
pub(crate) struct WatchedPod(pub(crate) Pod);

impl<'de> Deserialize<'de> for WatchedPod {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(WatchedPod(LeanPod::deserialize(d)?.0))
    }
}

impl Resource for WatchedPod {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Pod::kind(&())
    }
    fn group(_: &()) -> Cow<'_, str> {
        Pod::group(&())
    }
    fn version(_: &()) -> Cow<'_, str> {
        Pod::version(&())
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Pod::plural(&())
    }
    fn meta(&self) -> &ObjectMeta {
        &self.0.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}

/// What the default topology spread reads: Services, and the controllers whose
/// selectors it deduces.
pub(crate) struct SpreadSources {
    pub(crate) services: Watched<Service, cluster::Service>,
    pub(crate) replica_sets: Watched<ReplicaSet, cluster::ControllerSelector>,
    pub(crate) stateful_sets: Watched<StatefulSet, cluster::ControllerSelector>,
    pub(crate) replication_controllers: Watched<ReplicationController, cluster::ControllerSelector>,
}

/// Every kind a tick reads, watched.
pub(crate) struct ClusterView {
    pub(crate) node_pools: Watched<DynamicObject, Karpenter>,
    pub(crate) node_classes: Watched<DynamicObject, Karpenter>,
    pub(crate) nodes: Watched<Node, cluster::Node>,
    pub(crate) pods: Watched<WatchedPod, cluster::Pod>,
    pub(crate) daemonsets: Watched<DaemonSet, cluster::DaemonSet>,
    pub(crate) pdbs: Watched<PodDisruptionBudget, cluster::PodDisruptionBudget>,
    pub(crate) volume_claims: Watched<PersistentVolumeClaim, volumes::VolumeClaim>,
    pub(crate) volumes: Watched<PersistentVolume, volumes::PersistentVolume>,
    pub(crate) storage_classes: Watched<StorageClass, volumes::StorageClass>,
    /// What the CSI drivers published on each node: the EBS volumes it attaches.
    pub(crate) csi_nodes: Watched<CSINode, volume_limits::CsiNode>,
    /// NodeOverlays (optional: a cluster without the CRD has none).
    pub(crate) node_overlays: Watched<DynamicObject, ReadOverlay>,
    /// CapacityBuffers (optional: a cluster without the CRD has none).
    pub(crate) capacity_buffers: Watched<DynamicObject, CapacityBuffer>,
    /// The PodTemplates buffers may name (few in any cluster), watched from the first
    /// buffer on; the workloads a `scalableRef` names are read by name instead (see
    /// `workloads`).
    pod_templates: std::sync::OnceLock<Watched<PodTemplate, buffer::PodTemplate>>,
    /// NodeClaims (optional: the CRD may not be installed), watched from the first
    /// mirror write on: only the provisioner mirrors claims, so the other functions
    /// neither list nor watch them.
    node_claims: std::sync::OnceLock<Watched<DynamicObject, mirror::Seen>>,
    /// Services and controllers by their selectors, watched from the first call on:
    /// only a scheduler configuration with default spread constraints reads them.
    spread_sources: std::sync::OnceLock<SpreadSources>,
    client: Client,
    page_size: u32,
    missing_retry: Duration,
}

impl ClusterView {
    /// Starts every watch (each lists first) on the current tokio runtime; a kind the
    /// cluster does not serve is asked about again after `missing_retry`.
    pub(crate) fn start(
        client: &Client,
        page_size: u32,
        missing_retry: Duration,
        node_pools: &'static Crd,
        node_classes: &'static Crd,
    ) -> Self {
        let c = || client.clone();
        ClusterView {
            node_pools: Watched::start(
                node_pools.plural,
                Some("no NodePool: nothing is provisioned (install Karpenter's CRDs)"),
                node_pools.api(c()),
                as_nodepool_json,
                page_size,
                missing_retry,
            ),
            node_classes: Watched::start(
                node_classes.plural,
                Some("no EC2NodeClass: nothing is provisioned (install Karpenter's CRDs)"),
                node_classes.api(c()),
                as_nodeclass_json,
                page_size,
                missing_retry,
            ),
            nodes: Watched::start("nodes", None, Api::all(c()), node, page_size, missing_retry),
            pods: Watched::start("pods", None, Api::all(c()), pod, page_size, missing_retry),
            daemonsets: Watched::start(
                "daemonsets",
                None,
                Api::all(c()),
                |d| snapshot::daemonset_from_k8s(d).map_err(|e| e.to_string()),
                page_size,
                missing_retry,
            ),
            pdbs: Watched::start(
                "poddisruptionbudgets",
                None,
                Api::all(c()),
                |p| snapshot::pdb_from_k8s(p).map_err(|e| e.to_string()),
                page_size,
                missing_retry,
            ),
            volume_claims: Watched::start(
                "persistentvolumeclaims",
                None,
                Api::all(c()),
                |c| Ok(snapshot::pvc_from_k8s(c)),
                page_size,
                missing_retry,
            ),
            volumes: Watched::start(
                "persistentvolumes",
                None,
                Api::all(c()),
                |v| snapshot::pv_from_k8s(v).map_err(|e| e.to_string()),
                page_size,
                missing_retry,
            ),
            storage_classes: Watched::start(
                "storageclasses",
                None,
                Api::all(c()),
                |s| Ok(snapshot::storage_class_from_k8s(s)),
                page_size,
                missing_retry,
            ),
            csi_nodes: Watched::start(
                "csinodes",
                None,
                Api::all(c()),
                |c| Ok(snapshot::csi_node_from_k8s(c)),
                page_size,
                missing_retry,
            ),
            node_overlays: Watched::start(
                NODE_OVERLAYS.plural,
                Some(
                    "no NodeOverlay adjusts prices or capacity (Karpenter's NodeOverlay CRD is not installed)",
                ),
                NODE_OVERLAYS.api(c()),
                as_overlay,
                page_size,
                missing_retry,
            ),
            capacity_buffers: Watched::start(
                CAPACITY_BUFFERS.plural,
                Some(
                    "no CapacityBuffer keeps room (the CapacityBuffer CRD, autoscaling.x-k8s.io, is not installed)",
                ),
                CAPACITY_BUFFERS.api(c()),
                as_capacity_buffer,
                page_size,
                missing_retry,
            ),
            pod_templates: std::sync::OnceLock::new(),
            node_claims: std::sync::OnceLock::new(),
            spread_sources: std::sync::OnceLock::new(),
            client: client.clone(),
            page_size,
            missing_retry,
        }
    }

    /// The NodeClaims, watched from the first call on (on the current tokio runtime).
    pub(crate) fn node_claims(&self) -> &Watched<DynamicObject, mirror::Seen> {
        self.node_claims.get_or_init(|| {
            Watched::start(
                NODE_CLAIMS.plural,
                Some("claims are not mirrored as NodeClaims (install Karpenter's NodeClaim CRD to list them with kubectl)"),
                NODE_CLAIMS.api(self.client.clone()),
                as_seen_mirror,
                self.page_size,
                self.missing_retry,
            )
        })
    }

    /// The PodTemplates, watched from the first call on (on the current tokio runtime).
    pub(crate) fn pod_templates(&self) -> &Watched<PodTemplate, buffer::PodTemplate> {
        self.pod_templates.get_or_init(|| {
            Watched::start(
                "podtemplates",
                None,
                Api::all(self.client.clone()),
                as_pod_template,
                self.page_size,
                self.missing_retry,
            )
        })
    }

    /// The Services and controllers default spread constraints deduce their selectors
    /// from, watched from the first call on (on the current tokio runtime). Each is
    /// kept as its selector only.
    pub(crate) fn spread_sources(&self) -> &SpreadSources {
        self.spread_sources.get_or_init(|| {
            let c = || self.client.clone();
            let (page, retry) = (self.page_size, self.missing_retry);
            SpreadSources {
                services: Watched::start(
                    "services",
                    None,
                    Api::all(c()),
                    |s| Ok(snapshot::service_from_k8s(s)),
                    page,
                    retry,
                ),
                replica_sets: Watched::start(
                    "replicasets",
                    None,
                    Api::all(c()),
                    |r| Ok(snapshot::replicaset_selector(r)),
                    page,
                    retry,
                ),
                stateful_sets: Watched::start(
                    "statefulsets",
                    None,
                    Api::all(c()),
                    |s| Ok(snapshot::statefulset_selector(s)),
                    page,
                    retry,
                ),
                replication_controllers: Watched::start(
                    "replicationcontrollers",
                    None,
                    Api::all(c()),
                    |r| Ok(snapshot::replication_controller_selector(r)),
                    page,
                    retry,
                ),
            }
        })
    }

    /// Events applied by every watch so far.
    fn progress(&self) -> u64 {
        self.node_pools.view.applied()
            + self.node_classes.view.applied()
            + self.nodes.view.applied()
            + self.pods.view.applied()
            + self.daemonsets.view.applied()
            + self.pdbs.view.applied()
            + self.volume_claims.view.applied()
            + self.volumes.view.applied()
            + self.storage_classes.view.applied()
            + self.node_overlays.view.applied()
            + self.capacity_buffers.view.applied()
            + self.pod_templates.get().map_or(0, |w| w.view.applied())
            + self.node_claims.get().map_or(0, |w| w.view.applied())
            + self.spread_sources.get().map_or(0, |s| {
                s.services.view.applied()
                    + s.replica_sets.view.applied()
                    + s.stateful_sets.view.applied()
                    + s.replication_controllers.view.applied()
            })
    }

    /// Lets the watches apply what has already arrived (see [`catch_up`]).
    pub(crate) async fn catch_up(&self) {
        catch_up(|| self.progress()).await;
    }
}

pub(crate) fn node(node: &Node) -> Result<cluster::Node, String> {
    snapshot::node_from_k8s(node).map_err(|e| e.to_string())
}

/// The pods' shared parts, across every watch and re-list of this process: the
/// replicas of a workload hold their labels, tolerations, affinity and spread once.
static POD_PARTS: std::sync::LazyLock<std::sync::Mutex<cluster::PodParts>> =
    std::sync::LazyLock::new(Default::default);

pub(crate) fn pod(pod: &WatchedPod) -> Result<cluster::Pod, String> {
    let mut pod = snapshot::pod_from_k8s(&pod.0).map_err(|e| e.to_string())?;
    POD_PARTS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .intern(&mut pod);
    Ok(pod)
}

pub(crate) fn as_seen_mirror(object: &DynamicObject) -> Result<mirror::Seen, String> {
    let value = serde_json::to_value(object)
        .map_err(|e| format!("re-serializing a listed NodeClaim: {e}"))?;
    Ok(mirror::seen(&value))
}

/// A NodePool or EC2NodeClass as read, with the fields of its spec nodewright does not
/// fully honour: walked here, once per version as the watch delivers it, not on every
/// read of the view.
#[derive(Debug, Clone)]
pub(crate) struct Karpenter {
    pub(crate) value: Value,
    pub(crate) fields: Option<ObjectFields>,
}

fn as_nodepool_json(object: &DynamicObject) -> Result<Karpenter, String> {
    karpenter(object, &NODE_POOLS, Kind::NodePool)
}

fn as_nodeclass_json(object: &DynamicObject) -> Result<Karpenter, String> {
    karpenter(object, &NODE_CLASSES, Kind::Ec2NodeClass)
}

/// A NodeOverlay as read: valid, or with why not (its status will say). One without a
/// name cannot carry a status, and is reported as unreadable instead.
fn as_overlay(object: &DynamicObject) -> Result<ReadOverlay, String> {
    let value = as_json(object, &NODE_OVERLAYS)?;
    let object = overlay_label(&value, || "the cluster's nodeoverlays".to_string());
    match parse_node_overlay(&value, &object) {
        Ok(overlay) => Ok(Ok(overlay)),
        Err(problems) => {
            let message = problems
                .iter()
                .map(|p| format!("{}: {}", p.path, p.message))
                .collect::<Vec<_>>()
                .join("; ");
            match value.pointer("/metadata/name").and_then(Value::as_str) {
                Some(name) => Ok(Err(InvalidOverlay {
                    name: name.to_string(),
                    message,
                })),
                None => Err(format!("{object}: {message}")),
            }
        }
    }
}

/// A CapacityBuffer as read, held to its CRD's rules (the API server already did).
fn as_capacity_buffer(object: &DynamicObject) -> Result<CapacityBuffer, String> {
    let value = as_json(object, &CAPACITY_BUFFERS)?;
    read_one(value).and_then(|(mut buffers, _)| {
        buffers
            .pop()
            .ok_or_else(|| "a listed capacitybuffer read as no CapacityBuffer".to_string())
    })
}

/// A PodTemplate as a buffer chunk.
fn as_pod_template(template: &PodTemplate) -> Result<buffer::PodTemplate, String> {
    let mut value = serde_json::to_value(template)
        .map_err(|e| format!("re-serializing a listed PodTemplate: {e}"))?;
    if let Value::Object(map) = &mut value {
        map.insert("apiVersion".into(), buffer::POD_TEMPLATE_API_VERSION.into());
        map.insert("kind".into(), buffer::POD_TEMPLATE_KIND.into());
    }
    read_one(value).and_then(|(_, mut templates)| {
        templates
            .pop()
            .ok_or_else(|| "a listed podtemplate read as no PodTemplate".to_string())
    })
}

type ReadBuffers = (Vec<CapacityBuffer>, Vec<buffer::PodTemplate>);

fn read_one(value: Value) -> Result<ReadBuffers, String> {
    let doc = Document {
        source: "the cluster".into(),
        index: 0,
        value,
    };
    let (buffers, templates, problems) = buffer::validate_buffers(&[&doc]);
    if problems.is_empty() {
        Ok((buffers, templates))
    } else {
        let lines: Vec<String> = problems.iter().map(ToString::to_string).collect();
        Err(lines.join("; "))
    }
}

fn karpenter(object: &DynamicObject, crd: &Crd, kind: Kind) -> Result<Karpenter, String> {
    let value = as_json(object, crd)?;
    let fields = ObjectFields::of(kind, &value);
    Ok(Karpenter { value, fields })
}

/// The object as JSON with `apiVersion` and `kind` set (a list's items may lack them),
/// as validation reads manifests.
fn as_json(object: &DynamicObject, crd: &Crd) -> Result<Value, String> {
    let mut value = serde_json::to_value(object)
        .map_err(|e| format!("re-serializing a listed {}: {e}", crd.kind))?;
    if let Value::Object(map) = &mut value {
        map.insert("apiVersion".into(), crd.api_version.into());
        map.insert("kind".into(), crd.kind.into());
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replica(name: &str) -> WatchedPod {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": name, "namespace": "default",
                "labels": {"app": "web", "pod-template-hash": "7d9c8b6f5"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": "web-7d9c8b6f5", "uid": "u", "controller": true}]
            },
            "spec": {
                "containers": [{"name": "app", "resources": {"requests": {"cpu": "250m"}}}],
                "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                    "effect": "NoExecute", "tolerationSeconds": 300}],
                "topologySpreadConstraints": [{"maxSkew": 1,
                    "topologyKey": "topology.kubernetes.io/zone",
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": "web"}}}]
            }
        }))
        .expect("a pod")
    }

    #[test]
    fn the_watched_replicas_of_a_workload_hold_their_labels_tolerations_spread_and_owner_once() {
        let a = pod(&replica("web-1")).unwrap();
        let b = pod(&replica("web-2")).unwrap();
        assert_eq!(a.labels["app"], "web");
        assert!(a.labels.same_as(&b.labels));
        assert!(a.tolerations.same_as(&b.tolerations));
        assert!(a.topology_spread.same_as(&b.topology_spread));
        let (ca, cb) = (a.controller.clone().unwrap(), b.controller.clone().unwrap());
        assert!(std::sync::Arc::ptr_eq(&ca, &cb));
        assert_eq!(ca.name, "web-7d9c8b6f5");
    }
}
