//! The streaming List reader: serde visitors over the top level that hand each item, as
//! it is read, to [`ListReader`], which converts it and drops it before the next. The
//! outcome is the one a check of the whole document would give (see [`read_list`]).

use std::fmt;

use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::autoscaling::v2 as autoscaling;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::policy::v1 as policy;
use k8s_openapi::api::storage::v1 as storage;
use serde::Deserialize as _;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::convert::{
    autoscaler_from_k8s, csi_node_from_k8s, daemonset_from_k8s, deployment_from_k8s, node_from_k8s,
    pdb_from_k8s, pod_from_k8s, pv_from_k8s, pvc_from_k8s, replicaset_from_k8s,
    replicaset_selector, replication_controller_selector, service_from_k8s, statefulset_from_k8s,
    statefulset_selector, storage_class_from_k8s,
};
use super::error::{Result, SnapshotError};
use super::kind::{ItemKind, classify, describe_object, describe_value, item_name};
use crate::cluster::{ClusterSnapshot, ScalableWorkload};
use crate::volume_limits::{CsiNode, apply_node_attachment_limits, count_ebs_claims};
use crate::volumes::{Storage, apply_volume_topology};

/// The original pass over `input`, what the fast one left (see `fast`): resumed with
/// what it read `so_far`, or from the start.
pub(super) fn resume(
    so_far: Option<(ListReader, serde_json::Map<String, Value>)>,
    input: impl std::io::Read,
) -> Result<(ListReader, Option<serde_json::Map<String, Value>>), SnapshotError> {
    let de = serde_json::Deserializer::from_reader(input);
    match so_far {
        Some((list, top)) => read_top(de, list, top, true),
        None => read_top(de, ListReader::default(), serde_json::Map::new(), false),
    }
}

/// One pass over the List. Each item is read as a JSON value, converted and dropped
/// before the next is read. The outcome is the same as checking the whole document
/// first: broken JSON anywhere wins over everything, then a top level that is not a
/// List, then the first item that cannot be read.
pub(super) fn read_list<'de, R: serde_json::de::Read<'de>>(
    de: serde_json::Deserializer<R>,
) -> Result<ClusterSnapshot, SnapshotError> {
    let (list, top) = read_top(de, ListReader::default(), serde_json::Map::new(), false)?;
    finish(list, top)
}

/// The top level read by serde visitors, items streamed into `list`. `resuming`: the
/// input's first `items` array stands in for what the fast pass read (see `fast`); the
/// keys it read before the items are in `top`.
fn read_top<'de, R: serde_json::de::Read<'de>>(
    mut de: serde_json::Deserializer<R>,
    mut list: ListReader,
    top: serde_json::Map<String, Value>,
    resuming: bool,
) -> Result<(ListReader, Option<serde_json::Map<String, Value>>), SnapshotError> {
    let not_json = |source: serde_json::Error| {
        if source.is_io() {
            SnapshotError::Unreadable { source }
        } else {
            SnapshotError::NotJson { source }
        }
    };
    let visitor = TopVisitor {
        list: &mut list,
        top,
        resuming,
    };
    let top = serde::Deserializer::deserialize_any(&mut de, visitor).map_err(not_json)?;
    de.end().map_err(not_json)?;
    Ok((list, top))
}

/// What the List says once read whole: the first error in the order of
/// [`read_list`]'s comment, or the snapshot.
pub(super) fn finish(
    mut list: ListReader,
    top: Option<serde_json::Map<String, Value>>,
) -> Result<ClusterSnapshot, SnapshotError> {
    let Some(top) = top else {
        return Err(SnapshotError::NotAList {
            found: describe_value(&list.other_top),
        });
    };
    let list_item_kind = list_item_kind(&top)?;
    match std::mem::replace(&mut list.items, ItemsFound::Missing) {
        ItemsFound::Array | ItemsFound::Null => {}
        ItemsFound::Other(other) => {
            return Err(SnapshotError::NotAList {
                found: format!("a List whose items is {}", describe_value(&other)),
            });
        }
        ItemsFound::Missing => {
            return Err(SnapshotError::NotAList {
                found: "a List without an items array".to_string(),
            });
        }
    }
    if let Some(error) = list.error.take() {
        return Err(error);
    }
    // Items read before the List said its kind, from the first one without a kind of
    // its own on: their kind may come from the List's.
    list.list_kind = ListKind::Known(list_item_kind);
    let deferred = std::mem::take(&mut list.deferred);
    for (index, item) in (list.deferred_from..).zip(deferred) {
        list.convert(index, item)?;
    }
    let ListReader {
        mut snapshot,
        storage,
        csi_nodes,
        ..
    } = list;
    apply_volume_topology(&mut snapshot.pods, &storage);
    count_ebs_claims(&mut snapshot.pods, &storage);
    apply_node_attachment_limits(&mut snapshot.nodes, &csi_nodes);
    Ok(snapshot)
}

/// The kind every item has when the list is a typed one (the API server's own lists);
/// an error when the top level is not a list we read.
pub(super) fn list_item_kind(top: &serde_json::Map<String, Value>) -> Result<Option<ItemKind>> {
    let not_a_list = |top: &serde_json::Map<String, Value>| SnapshotError::NotAList {
        found: describe_object(top),
    };
    match top.get("kind").and_then(Value::as_str) {
        Some("List") => {
            match top.get("apiVersion") {
                None => {}
                Some(Value::String(v)) if v == "v1" => {}
                Some(other) => {
                    return Err(SnapshotError::NotAList {
                        found: format!("a List with apiVersion {other} (expected \"v1\")"),
                    });
                }
            }
            Ok(None)
        }
        Some(kind) => match kind
            .strip_suffix("List")
            .and_then(ItemKind::from_kind)
            .filter(|k| !k.is_workload())
        {
            Some(item_kind) => Ok(Some(item_kind)),
            None => Err(not_a_list(top)),
        },
        None => Err(not_a_list(top)),
    }
}

/// What the List's kind says about its items, as far as it has been read.
#[derive(Default)]
pub(super) enum ListKind {
    /// `kind` comes after `items` (kubectl prints keys in order: apiVersion, items, kind).
    #[default]
    NotYetRead,
    /// A List or a typed list: `Some` gives kindless items their kind.
    Known(Option<ItemKind>),
    /// Not a list we read: its items are skipped unread, the error is the top level's.
    NotAList,
}

#[derive(Default)]
pub(super) enum ItemsFound {
    #[default]
    Missing,
    Array,
    /// Go marshals an empty slice that was never allocated as null.
    Null,
    Other(Value),
}

#[derive(Default)]
pub(super) struct ListReader {
    snapshot: ClusterSnapshot,
    storage: Storage,
    csi_nodes: Vec<CsiNode>,
    /// Plans name pods "ns/name" and nodes by name: two objects of one kind with the same
    /// name would make a plan ambiguous (and the planner would place one pod twice).
    seen: std::collections::HashSet<(&'static str, String)>,
    pub(super) list_kind: ListKind,
    pub(super) items: ItemsFound,
    /// Index of the next item.
    next_index: usize,
    /// The first item that could not be read; later items are skipped.
    pub(super) error: Option<SnapshotError>,
    /// Items kept whole until the List's kind is read (see [`ListKind::NotYetRead`]).
    pub(super) deferred: Vec<Value>,
    deferred_from: usize,
    /// The top level when it is not an object.
    other_top: Value,
    /// The next item is a stand-in for one already read (see `fast::Resume`).
    pub(super) skip_one: bool,
    /// The pods' shared parts: a workload's replicas hold theirs once.
    parts: crate::cluster::PodParts,
}

impl ListReader {
    pub(super) fn item(&mut self, item: Value) {
        if std::mem::take(&mut self.skip_one) {
            return;
        }
        let index = self.next_index;
        self.next_index += 1;
        if self.error.is_some() {
            return;
        }
        if !self.deferred.is_empty() {
            self.deferred.push(item);
            return;
        }
        if let ListKind::NotYetRead = self.list_kind {
            let kindless = match item.get("kind") {
                None | Some(Value::Null) => true,
                Some(Value::String(kind)) => kind.is_empty(),
                Some(_) => false,
            };
            if kindless && item.is_object() {
                self.deferred_from = index;
                self.deferred.push(item);
                return;
            }
        }
        if let Err(e) = self.convert(index, item) {
            self.error = Some(e);
        }
    }

    fn convert(&mut self, index: usize, item: Value) -> Result<()> {
        let list_item_kind = match self.list_kind {
            ListKind::Known(kind) => kind,
            _ => None,
        };
        let Some(kind) = classify(index, &item, list_item_kind)? else {
            return Ok(());
        };
        match kind {
            ItemKind::Pod => {
                let pod: core::Pod = decode(index, kind, item)?;
                self.pod(index, &pod)?;
            }
            ItemKind::Node => {
                let node: core::Node = decode(index, kind, item)?;
                let node = node_from_k8s(&node)?;
                self.unique(index, "node", node.name.clone())?;
                self.snapshot.nodes.push(node);
            }
            ItemKind::DaemonSet => {
                let ds: apps::DaemonSet = decode(index, kind, item)?;
                let ds = daemonset_from_k8s(&ds)?;
                self.unique(index, "DaemonSet", format!("{}/{}", ds.namespace, ds.name))?;
                self.snapshot.daemonsets.push(ds);
            }
            ItemKind::Pdb => {
                let pdb: policy::PodDisruptionBudget = decode(index, kind, item)?;
                let pdb = pdb_from_k8s(&pdb)?;
                self.unique(
                    index,
                    "PodDisruptionBudget",
                    format!("{}/{}", pdb.namespace, pdb.name),
                )?;
                self.snapshot.pdbs.push(pdb);
            }
            ItemKind::Pvc => {
                let pvc: core::PersistentVolumeClaim = decode(index, kind, item)?;
                let pvc = pvc_from_k8s(&pvc);
                self.unique(
                    index,
                    "PersistentVolumeClaim",
                    format!("{}/{}", pvc.namespace, pvc.name),
                )?;
                self.storage.claims.push(pvc);
            }
            ItemKind::Pv => {
                let pv: core::PersistentVolume = decode(index, kind, item)?;
                let pv = pv_from_k8s(&pv)?;
                self.unique(index, "PersistentVolume", pv.name.clone())?;
                self.storage.volumes.push(pv);
            }
            ItemKind::StorageClass => {
                let sc: storage::StorageClass = decode(index, kind, item)?;
                let sc = storage_class_from_k8s(&sc);
                self.unique(index, "StorageClass", sc.name.clone())?;
                self.storage.classes.push(sc);
            }
            ItemKind::CsiNode => {
                let c: storage::CSINode = decode(index, kind, item)?;
                let c = csi_node_from_k8s(&c);
                self.unique(index, "CSINode", c.name.clone())?;
                self.csi_nodes.push(c);
            }
            ItemKind::Deployment => {
                let d: apps::Deployment = decode(index, kind, item)?;
                self.workload(index, kind, deployment_from_k8s(d))?;
            }
            ItemKind::StatefulSet => {
                let s: apps::StatefulSet = decode(index, kind, item)?;
                self.snapshot.controllers.push(statefulset_selector(&s));
                self.workload(index, kind, statefulset_from_k8s(s))?;
            }
            ItemKind::ReplicaSet => {
                let r: apps::ReplicaSet = decode(index, kind, item)?;
                self.snapshot.controllers.push(replicaset_selector(&r));
                self.workload(index, kind, replicaset_from_k8s(r))?;
            }
            ItemKind::ReplicationController => {
                let r: core::ReplicationController = decode(index, kind, item)?;
                let r = replication_controller_selector(&r);
                self.unique(
                    index,
                    "ReplicationController",
                    format!("{}/{}", r.namespace, r.name),
                )?;
                self.snapshot.controllers.push(r);
            }
            ItemKind::Service => {
                let s: core::Service = decode(index, kind, item)?;
                let s = service_from_k8s(&s);
                self.unique(index, "Service", format!("{}/{}", s.namespace, s.name))?;
                self.snapshot.services.push(s);
            }
            ItemKind::Hpa => {
                let h: autoscaling::HorizontalPodAutoscaler = decode(index, kind, item)?;
                let h = autoscaler_from_k8s(&h)?;
                self.unique(
                    index,
                    "HorizontalPodAutoscaler",
                    format!("{}/{}", h.namespace, h.name),
                )?;
                self.snapshot.autoscalers.push(h);
            }
        }
        Ok(())
    }

    fn workload(&mut self, index: usize, kind: ItemKind, workload: ScalableWorkload) -> Result<()> {
        self.unique(
            index,
            kind.name(),
            format!("{}/{}", workload.namespace, workload.name),
        )?;
        self.snapshot.workloads.push(workload);
        Ok(())
    }

    fn pod(&mut self, index: usize, pod: &core::Pod) -> Result<()> {
        let mut pod = pod_from_k8s(pod)?;
        self.parts.intern(&mut pod);
        self.unique(index, "pod", pod.key())?;
        self.snapshot.pods.push(pod);
        Ok(())
    }

    /// An item the fast pass decoded as a pod (with kind "Pod"): what [`Self::item`]
    /// does with it.
    pub(super) fn decoded_pod(&mut self, pod: &core::Pod) {
        let index = self.next_index;
        self.next_index += 1;
        if self.error.is_some() {
            return;
        }
        if let Err(e) = self.pod(index, pod) {
            self.error = Some(e);
        }
    }

    fn unique(&mut self, index: usize, kind: &'static str, key: String) -> Result<()> {
        // The message is written only for a duplicate, not for each of 100,000s of pods.
        match self.seen.replace((kind, key)) {
            None => Ok(()),
            Some((_, key)) => Err(SnapshotError::Duplicate {
                index,
                object: format!("{kind} {key:?}"),
            }),
        }
    }
}

/// The top level: an object gives every key but `items` as JSON values (`None` is
/// returned for anything else, kept in `other_top`); `items` is streamed.
struct TopVisitor<'l> {
    list: &'l mut ListReader,
    /// Keys read before (when resuming).
    top: serde_json::Map<String, Value>,
    resuming: bool,
}

impl TopVisitor<'_> {
    fn other<E>(
        self,
        value: Value,
    ) -> std::result::Result<Option<serde_json::Map<String, Value>>, E> {
        self.list.other_top = value;
        Ok(None)
    }
}

impl<'de> serde::de::Visitor<'de> for TopVisitor<'_> {
    type Value = Option<serde_json::Map<String, Value>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        let mut top = self.top;
        let mut resuming = self.resuming;
        while let Some(key) = map.next_key::<String>()? {
            if key == "items" && std::mem::take(&mut resuming) {
                map.next_value_seed(ItemsSeed { list: self.list })?;
            } else if key == "items" {
                self.list.list_kind = match top.get("kind") {
                    None => ListKind::NotYetRead,
                    Some(_) => match list_item_kind(&top) {
                        Ok(kind) => ListKind::Known(kind),
                        Err(_) => ListKind::NotAList,
                    },
                };
                map.next_value_seed(ItemsSeed { list: self.list })?;
            } else {
                let value: Value = map.next_value()?;
                top.insert(key, value);
            }
        }
        Ok(Some(top))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(
        self,
        seq: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        let value = Value::deserialize(serde::de::value::SeqAccessDeserializer::new(seq))?;
        self.other(value)
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> std::result::Result<Self::Value, E> {
        self.other(Value::Bool(v))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> std::result::Result<Self::Value, E> {
        self.other(Value::from(v))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> std::result::Result<Self::Value, E> {
        self.other(Value::from(v))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> std::result::Result<Self::Value, E> {
        self.other(Value::from(v))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<Self::Value, E> {
        self.other(Value::from(v))
    }

    fn visit_unit<E: serde::de::Error>(self) -> std::result::Result<Self::Value, E> {
        self.other(Value::Null)
    }
}

/// `items`: an array is read one element at a time; anything else is kept to be named.
struct ItemsSeed<'l> {
    list: &'l mut ListReader,
}

impl<'de> serde::de::DeserializeSeed<'de> for ItemsSeed<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> std::result::Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl ItemsSeed<'_> {
    fn other<E>(self, value: Value) -> std::result::Result<(), E> {
        self.list.items = ItemsFound::Other(value);
        Ok(())
    }
}

impl<'de> serde::de::Visitor<'de> for ItemsSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> std::result::Result<(), A::Error> {
        self.list.items = ItemsFound::Array;
        if let ListKind::NotAList = self.list.list_kind {
            while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
            return Ok(());
        }
        while let Some(item) = seq.next_element::<Value>()? {
            self.list.item(item);
        }
        Ok(())
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> std::result::Result<(), A::Error> {
        let value = Value::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
        self.other(value)
    }

    fn visit_unit<E: serde::de::Error>(self) -> std::result::Result<(), E> {
        self.list.items = ItemsFound::Null;
        Ok(())
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> std::result::Result<(), E> {
        self.other(Value::Bool(v))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> std::result::Result<(), E> {
        self.other(Value::from(v))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> std::result::Result<(), E> {
        self.other(Value::from(v))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> std::result::Result<(), E> {
        self.other(Value::from(v))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<(), E> {
        self.other(Value::from(v))
    }
}

pub(super) fn decode<T: DeserializeOwned>(index: usize, kind: ItemKind, item: Value) -> Result<T> {
    let object = item_name(&item);
    serde_path_to_error::deserialize(item).map_err(|e| SnapshotError::Item {
        index,
        kind: kind.name(),
        object,
        path: e.path().to_string(),
        source: e.into_inner(),
    })
}
