//! Reading the cluster: `kubectl get pods,nodes,daemonsets,poddisruptionbudgets -A -o json`
//! into a [`ClusterSnapshot`], and the conversions from Kubernetes API objects
//! (`k8s_openapi` types) into the scheduling view of [`crate::cluster`].
//!
//! The conversions are public so the engine can apply them to objects it lists from the
//! API server: one reduction, one set of rules, whichever way the objects arrive.
//!
//! What is accepted:
//! - the top level must be a JSON object of kind `List` (what kubectl prints for any
//!   `get ... -o json` that can return several objects, even `kubectl get pods`), or one
//!   of the typed lists the API server itself returns for our kinds (`PodList`,
//!   `NodeList`, `DaemonSetList`, `PodDisruptionBudgetList`, e.g. from
//!   `kubectl get --raw /api/v1/pods`). A single object, or a list of another kind
//!   (`DeploymentList`), is an error naming what was found: silently reading nothing
//!   from it would plan for an empty cluster.
//! - items of other kinds (Deployment, ReplicaSet, Service, ...) are skipped, not errors:
//!   `kubectl get all,...` output contains them and they do not affect scheduling.
//! - a real API server omits `apiVersion`/`kind` on the items of built-in lists. An item
//!   without `kind` takes it from a typed list (`PodList` → Pod), and otherwise from its
//!   shape (see `infer_kind`); an item whose kind cannot be told is an error naming its
//!   index rather than a guess.
//!
//! Nothing here panics on input: this parser reads whatever a user pipes into the CLI.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::policy::v1 as policy;
use k8s_openapi::api::storage::v1 as storage;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Deserialize as _;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::api::model::{NodeRequirement, Operator, Taint, TaintEffect};
use crate::cluster::{
    ClusterSnapshot, DaemonSet, HostPort, IntOrPercent, LabelSelector, LabelSelectorOperator,
    LabelSelectorRequirement, Node, Pod, PodAffinityTerm, PodDisruptionBudget, PreferredNodeTerm,
    Toleration, TolerationOperator, TopologySpreadConstraint, WeightedPodAffinityTerm,
    WhenUnsatisfiable,
};
use crate::resources::{QuantityError, Resources, parse_milli};
use crate::volumes::{
    PersistentVolume, PodClaim, Storage, StorageClass, VolumeClaim, apply_volume_topology,
};

mod fast;

pub use fast::LeanPod;

/// The label a `matchFields` requirement on `metadata.name` is translated to.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// Operators Kubernetes accepts in node selector requirements (Karpenter's Gte/Lte are
/// NodePool-only; a pod using them would have been rejected by the API server).
const NODE_OPERATORS: &str = "In, NotIn, Exists, DoesNotExist, Gt, Lt";
const LABEL_SELECTOR_OPERATORS: &str = "In, NotIn, Exists, DoesNotExist";
const TOLERATION_OPERATORS: &str = "Equal, Exists";
const TAINT_EFFECTS: &str = "NoSchedule, PreferNoSchedule, NoExecute";

/// Which container of a pod a quantity belongs to, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerRef {
    pub name: String,
    /// An entry of `initContainers` (sidecars included).
    pub init: bool,
}

impl fmt::Display for ContainerRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.init {
            write!(f, "init container {:?}", self.name)
        } else {
            write!(f, "container {:?}", self.name)
        }
    }
}

/// Renders `container "app": ` or nothing, so messages read
/// `pod "default/web-1": container "app": resources.requests.memory: ...`.
struct InContainer<'a>(&'a Option<ContainerRef>);

impl fmt::Display for InContainer<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(c) => write!(f, "{c}: "),
            None => Ok(()),
        }
    }
}

/// Renders ` "ns/name"` when an item's name could be read.
struct MaybeName<'a>(&'a Option<String>);

impl fmt::Display for MaybeName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(n) => write!(f, " {n:?}"),
            None => Ok(()),
        }
    }
}

/// Why a snapshot (or one object of it) cannot be read. Objects are named as
/// `pod "ns/name"`, `node "name"`, `DaemonSet "ns/name"`, `PodDisruptionBudget "ns/name"`;
/// paths are Kubernetes field paths (relative to the container for container fields).
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error(
        "the snapshot is not JSON: {source} (expected the output of `kubectl get pods,nodes,daemonsets,poddisruptionbudgets -A -o json`)"
    )]
    NotJson {
        #[source]
        source: serde_json::Error,
    },

    #[error("cannot read the snapshot: {source}")]
    Unreadable {
        #[source]
        source: serde_json::Error,
    },

    #[error(
        "the snapshot is {found}, not a List (expected the output of `kubectl get pods,nodes,daemonsets,poddisruptionbudgets -A -o json`: an object with kind \"List\" and an items array)"
    )]
    NotAList { found: String },

    #[error(
        "items[{index}]: cannot tell what kind of object this is: {found} (expected a Pod, Node, DaemonSet or PodDisruptionBudget; give the item a \"kind\")"
    )]
    UnknownItemKind { index: usize, found: String },

    #[error("items[{index}] ({kind}{}): {path}: {source}", MaybeName(.object))]
    Item {
        index: usize,
        kind: &'static str,
        /// `ns/name` (or `name`) when it could be read from the item.
        object: Option<String>,
        /// Field path inside the item, `.` for the item itself.
        path: String,
        #[source]
        source: serde_json::Error,
    },

    #[error("{object}: {}{path}: {source}", InContainer(.container))]
    Quantity {
        object: String,
        container: Option<ContainerRef>,
        path: String,
        #[source]
        source: QuantityError,
    },

    #[error(
        "{object}: {}{path}: quantity {quantity:?} is negative (expected zero or more)",
        InContainer(.container)
    )]
    NegativeQuantity {
        object: String,
        container: Option<ContainerRef>,
        path: String,
        quantity: String,
    },

    #[error(
        "items[{index}]: {object} appears more than once (a cluster holds one object per kind, namespace and name; was the snapshot put together from several outputs?)"
    )]
    Duplicate { index: usize, object: String },

    #[error("{object}: {path}: unknown operator {operator:?} (expected one of {expected})")]
    UnknownOperator {
        object: String,
        path: String,
        operator: String,
        expected: &'static str,
    },

    #[error("{object}: {path}: {value:?} is not valid (expected {expected})")]
    InvalidValue {
        object: String,
        path: String,
        value: String,
        expected: String,
    },
}

type Result<T, E = SnapshotError> = std::result::Result<T, E>;

// ---------------------------------------------------------------------------------------
// The List
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ItemKind {
    Pod,
    Node,
    DaemonSet,
    Pdb,
    Pvc,
    Pv,
    StorageClass,
}

impl ItemKind {
    fn from_kind(kind: &str) -> Option<ItemKind> {
        match kind {
            "Pod" => Some(ItemKind::Pod),
            "Node" => Some(ItemKind::Node),
            "DaemonSet" => Some(ItemKind::DaemonSet),
            "PodDisruptionBudget" => Some(ItemKind::Pdb),
            "PersistentVolumeClaim" => Some(ItemKind::Pvc),
            "PersistentVolume" => Some(ItemKind::Pv),
            "StorageClass" => Some(ItemKind::StorageClass),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            ItemKind::Pod => "Pod",
            ItemKind::Node => "Node",
            ItemKind::DaemonSet => "DaemonSet",
            ItemKind::Pdb => "PodDisruptionBudget",
            ItemKind::Pvc => "PersistentVolumeClaim",
            ItemKind::Pv => "PersistentVolume",
            ItemKind::StorageClass => "StorageClass",
        }
    }
}

/// Parses `kubectl get pods,nodes,daemonsets,poddisruptionbudgets,pvc,pv,storageclasses
/// -A -o json`.
///
/// Accepts a `List` (or a typed list of one of the kinds read, e.g. `PodList`); items of
/// kinds other than Pod, Node, DaemonSet, PodDisruptionBudget, PersistentVolumeClaim,
/// PersistentVolume and StorageClass are skipped. Objects keep the order of the items.
/// The storage objects are not kept: they are applied to the pods
/// ([`apply_volume_topology`]), so a pending pod's required node terms include where
/// its volumes let it run, and a pod whose claim cannot be planned for says why.
pub fn parse_snapshot(text: &str) -> Result<ClusterSnapshot, SnapshotError> {
    // The fast pass, and the original one over the text when the fast one stopped
    // anywhere but after the items (so messages are the text reader's, not the stream's).
    let stop = fast::run(fast::Window::new(text.as_bytes()));
    if let fast::Stop::Resume {
        state: fast::Resume::AfterItems,
        ..
    } = stop
        && let Ok((list, top)) = resume(stop)
    {
        return finish(list, top);
    }
    read_list(serde_json::Deserializer::from_str(text))
}

/// [`parse_snapshot`] over a byte stream (a file, a pipe), read once from start to end:
/// only one item at a time is held as JSON, so a snapshot of any size takes the memory
/// of what planning keeps from it, not of its text.
pub fn parse_snapshot_reader<R: std::io::Read>(
    reader: R,
) -> Result<ClusterSnapshot, SnapshotError> {
    let (list, top) = resume(fast::run(fast::Window::new(reader)))?;
    finish(list, top)
}

/// The original pass over what the fast one left (see [`fast`]).
fn resume<R: std::io::Read>(
    stop: fast::Stop<R>,
) -> Result<(ListReader, Option<serde_json::Map<String, Value>>), SnapshotError> {
    let (so_far, input) = stop.into_input();
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
fn read_list<'de, R: serde_json::de::Read<'de>>(
    de: serde_json::Deserializer<R>,
) -> Result<ClusterSnapshot, SnapshotError> {
    let (list, top) = read_top(de, ListReader::default(), serde_json::Map::new(), false)?;
    finish(list, top)
}

/// The top level read by serde visitors, items streamed into `list`. `resuming`: the
/// input's first `items` array stands in for what the fast pass read (see [`fast`]); the
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
fn finish(
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
        ..
    } = list;
    apply_volume_topology(&mut snapshot.pods, &storage);
    Ok(snapshot)
}

/// The kind every item has when the list is a typed one (the API server's own lists);
/// an error when the top level is not a list we read.
fn list_item_kind(top: &serde_json::Map<String, Value>) -> Result<Option<ItemKind>> {
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
        Some(kind) => match kind.strip_suffix("List").and_then(ItemKind::from_kind) {
            Some(item_kind) => Ok(Some(item_kind)),
            None => Err(not_a_list(top)),
        },
        None => Err(not_a_list(top)),
    }
}

/// What the List's kind says about its items, as far as it has been read.
#[derive(Default)]
enum ListKind {
    /// `kind` comes after `items` (kubectl prints keys in order: apiVersion, items, kind).
    #[default]
    NotYetRead,
    /// A List or a typed list: `Some` gives kindless items their kind.
    Known(Option<ItemKind>),
    /// Not a list we read: its items are skipped unread, the error is the top level's.
    NotAList,
}

#[derive(Default)]
enum ItemsFound {
    #[default]
    Missing,
    Array,
    /// Go marshals an empty slice that was never allocated as null.
    Null,
    Other(Value),
}

#[derive(Default)]
struct ListReader {
    snapshot: ClusterSnapshot,
    storage: Storage,
    /// Plans name pods "ns/name" and nodes by name: two objects of one kind with the same
    /// name would make a plan ambiguous (and the planner would place one pod twice).
    seen: std::collections::HashSet<(&'static str, String)>,
    list_kind: ListKind,
    items: ItemsFound,
    /// Index of the next item.
    next_index: usize,
    /// The first item that could not be read; later items are skipped.
    error: Option<SnapshotError>,
    /// Items kept whole until the List's kind is read (see [`ListKind::NotYetRead`]).
    deferred: Vec<Value>,
    deferred_from: usize,
    /// The top level when it is not an object.
    other_top: Value,
    /// The next item is a stand-in for one already read (see [`fast::Resume`]).
    skip_one: bool,
}

impl ListReader {
    fn item(&mut self, item: Value) {
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
        }
        Ok(())
    }

    fn pod(&mut self, index: usize, pod: &core::Pod) -> Result<()> {
        let pod = pod_from_k8s(pod)?;
        self.unique(index, "pod", pod.key())?;
        self.snapshot.pods.push(pod);
        Ok(())
    }

    /// An item the fast pass decoded as a pod (with kind "Pod"): what [`Self::item`]
    /// does with it.
    fn decoded_pod(&mut self, pod: &core::Pod) {
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

/// `Some(kind)` for an item to read, `None` for one to skip.
fn classify(
    index: usize,
    item: &Value,
    list_item_kind: Option<ItemKind>,
) -> Result<Option<ItemKind>> {
    let Value::Object(obj) = item else {
        return Err(SnapshotError::UnknownItemKind {
            index,
            found: format!("it is {}, not an object", describe_value(item)),
        });
    };
    match obj.get("kind") {
        Some(Value::String(kind)) if !kind.is_empty() => return Ok(ItemKind::from_kind(kind)),
        None | Some(Value::Null) | Some(Value::String(_)) => {}
        Some(other) => {
            return Err(SnapshotError::UnknownItemKind {
                index,
                found: format!("its kind is {other}, not a string"),
            });
        }
    }
    if let Some(kind) = list_item_kind {
        return Ok(Some(kind));
    }
    match infer_kind(obj) {
        Inferred::Kind(kind) => Ok(Some(kind)),
        Inferred::Other => Ok(None),
        Inferred::Unknown => Err(SnapshotError::UnknownItemKind {
            index,
            found: "it has no kind and its shape matches none of them".to_string(),
        }),
    }
}

enum Inferred {
    Kind(ItemKind),
    /// Recognisably another kind (a Deployment, a Service, ...): skipped like a kinded one.
    Other,
    Unknown,
}

/// Guesses the kind of an item that has none, from fields only that kind has.
/// Workloads with a pod template are told apart by fields a DaemonSet never has.
fn infer_kind(obj: &serde_json::Map<String, Value>) -> Inferred {
    let empty = serde_json::Map::new();
    let spec = obj.get("spec").and_then(Value::as_object).unwrap_or(&empty);
    let status = obj
        .get("status")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let has_namespace = obj
        .get("metadata")
        .and_then(|m| m.get("namespace"))
        .and_then(Value::as_str)
        .is_some_and(|ns| !ns.is_empty());
    let spec_has = |keys: &[&str]| keys.iter().any(|k| spec.contains_key(*k));
    let status_has = |keys: &[&str]| keys.iter().any(|k| status.contains_key(*k));

    if spec.contains_key("containers") {
        return Inferred::Kind(ItemKind::Pod);
    }
    if spec.contains_key("template") {
        // Deployment, ReplicaSet, StatefulSet, Job, ReplicationController.
        let other_workload = spec_has(&[
            "replicas",
            "strategy",
            "serviceName",
            "podManagementPolicy",
            "completions",
            "parallelism",
            "backoffLimit",
            "paused",
            "progressDeadlineSeconds",
        ]) || status_has(&["replicas", "succeeded", "active"]);
        if other_workload {
            return Inferred::Other;
        }
        if spec.contains_key("selector") || status_has(&["desiredNumberScheduled", "numberReady"]) {
            return Inferred::Kind(ItemKind::DaemonSet);
        }
        return Inferred::Unknown;
    }
    if obj.contains_key("provisioner") {
        return Inferred::Kind(ItemKind::StorageClass);
    }
    if spec_has(&["accessModes", "volumeMode"]) {
        // Both claims and volumes have these; only a volume has a capacity or a
        // reclaim policy, only a claim a namespace.
        if spec_has(&["capacity", "persistentVolumeReclaimPolicy", "claimRef"]) {
            return Inferred::Kind(ItemKind::Pv);
        }
        if has_namespace {
            return Inferred::Kind(ItemKind::Pvc);
        }
        return Inferred::Unknown;
    }
    if spec.contains_key("jobTemplate") || spec_has(&["ports", "clusterIP", "externalName"]) {
        // CronJob, Service.
        return Inferred::Other;
    }
    if spec_has(&[
        "minAvailable",
        "maxUnavailable",
        "unhealthyPodEvictionPolicy",
    ]) || status_has(&["disruptionsAllowed", "expectedPods", "desiredHealthy"])
    {
        return Inferred::Kind(ItemKind::Pdb);
    }
    if !has_namespace
        && (status_has(&["nodeInfo", "allocatable", "daemonEndpoints"])
            || spec_has(&[
                "providerID",
                "podCIDR",
                "podCIDRs",
                "taints",
                "unschedulable",
            ]))
    {
        return Inferred::Kind(ItemKind::Node);
    }
    // A PDB with only a selector: a metav1.LabelSelector (unlike a Service's plain map).
    let only_selector = !spec.is_empty() && spec.keys().all(|k| k == "selector");
    let label_selector = spec
        .get("selector")
        .and_then(Value::as_object)
        .is_some_and(|s| {
            s.keys()
                .all(|k| k == "matchLabels" || k == "matchExpressions")
        });
    if has_namespace && only_selector && label_selector {
        return Inferred::Kind(ItemKind::Pdb);
    }
    Inferred::Unknown
}

fn decode<T: DeserializeOwned>(index: usize, kind: ItemKind, item: Value) -> Result<T> {
    let object = item_name(&item);
    serde_path_to_error::deserialize(item).map_err(|e| SnapshotError::Item {
        index,
        kind: kind.name(),
        object,
        path: e.path().to_string(),
        source: e.into_inner(),
    })
}

/// `ns/name` or `name` of an item, when readable.
fn item_name(item: &Value) -> Option<String> {
    let meta = item.get("metadata")?;
    let name = meta.get("name")?.as_str()?;
    match meta.get("namespace").and_then(Value::as_str) {
        Some(ns) if !ns.is_empty() => Some(format!("{ns}/{name}")),
        _ => Some(name.to_string()),
    }
}

fn describe_value(value: &Value) -> String {
    match value {
        Value::Null => "null".to_string(),
        Value::Bool(_) => "a JSON boolean".to_string(),
        Value::Number(_) => "a JSON number".to_string(),
        Value::String(_) => "a JSON string".to_string(),
        Value::Array(_) => "a JSON array".to_string(),
        Value::Object(obj) => describe_object(obj),
    }
}

/// `a Pod "default/web-1"`, `a DeploymentList`, `a JSON object without kind`.
fn describe_object(obj: &serde_json::Map<String, Value>) -> String {
    match obj.get("kind") {
        Some(Value::String(kind)) if !kind.is_empty() => {
            let article = if kind.starts_with(['A', 'E', 'I', 'O', 'U']) {
                "an"
            } else {
                "a"
            };
            match item_name(&Value::Object(obj.clone())) {
                Some(name) => format!("{article} {kind} {name:?}"),
                None => format!("{article} {kind}"),
            }
        }
        _ => "a JSON object without kind".to_string(),
    }
}

// ---------------------------------------------------------------------------------------
// Pods
// ---------------------------------------------------------------------------------------

/// Where a pod spec lives, for messages: a pod's own, or a DaemonSet's template.
struct PodCtx<'a> {
    /// `pod "default/web-1"` or `DaemonSet "kube-system/aws-node"`.
    object: String,
    /// `spec` or `spec.template.spec`.
    spec_path: &'static str,
    namespace: &'a str,
    labels: &'a BTreeMap<String, String>,
}

/// Converts a Kubernetes pod to the scheduling view.
///
/// Requests follow kube-scheduler (`k8s.io/component-helpers/resource.PodRequests`):
/// the sum of the regular containers and of the sidecars (init containers with
/// `restartPolicy: Always`), at least the largest of each classic init container plus
/// the sidecars started before it, then pod-level `spec.resources` (cpu, memory,
/// hugepages) override the aggregate where set, then `spec.overhead` is added, then one
/// pod slot. A container with limits but no request for a resource requests its limit,
/// as the API server's defaulting does. Not modelled: in-place resize (the scheduler
/// uses max(spec, allocated) while a resize is pending; we use the spec) and ephemeral
/// containers (they request nothing).
///
/// Required node affinity `matchFields` on `metadata.name` (how DaemonSet pods are pinned)
/// become requirements on [`HOSTNAME_LABEL`]: on EKS a node's hostname label is its name,
/// and a new node can never satisfy it, which is right for a pod pinned to one node.
/// Pod (anti-)affinity terms with no `namespaces` get the pod's namespace filled in;
/// `namespaceSelector` is not supported and is ignored (see [`PodAffinityTerm`]).
/// `matchLabelKeys`/`mismatchLabelKeys` are merged into the selectors from the pod's
/// labels, as the scheduler does. `nodeAffinityPolicy`/`nodeTaintsPolicy` of spread
/// constraints are not represented (Kubernetes' defaults, Honor/Ignore, are assumed).
pub fn pod_from_k8s(pod: &core::Pod) -> Result<Pod, SnapshotError> {
    let namespace = namespace_or_default(&pod.metadata);
    let name = pod.metadata.name.clone().unwrap_or_default();
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let ctx = PodCtx {
        object: format!("pod \"{namespace}/{name}\""),
        spec_path: "spec",
        namespace: &namespace,
        labels: &labels,
    };
    let default_spec = core::PodSpec::default();
    let spec = pod.spec.as_ref().unwrap_or(&default_spec);
    let mut out = convert_pod_spec(&ctx, spec)?;
    out.owner_daemonset = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.kind == "DaemonSet")
        .map(|o| o.name.clone());
    out.daemonset_owned = out.owner_daemonset.is_some();
    // A static pod's mirror: the kubelet owns it and recreates it on its node.
    let annotations = pod.metadata.annotations.as_ref();
    out.mirror = annotations.is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"));
    out.do_not_disrupt = annotations.is_some_and(do_not_disrupt);
    out.created_at = pod.metadata.creation_timestamp.as_ref().map(unix);
    out.started_at = pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map(unix);
    // Pods for kube-scheduler may spell it out or leave it to the API server's default.
    out.scheduler_name = spec
        .scheduler_name
        .clone()
        .filter(|s| !s.is_empty() && s != "default-scheduler");
    let status = pod.status.as_ref();
    out.nominated_node_name = status
        .and_then(|s| s.nominated_node_name.clone())
        .filter(|n| !n.is_empty());
    out.marked_unschedulable = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| {
            c.type_ == "PodScheduled"
                && c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
        });
    for v in spec.volumes.iter().flatten() {
        let claim = if let Some(pvc) = &v.persistent_volume_claim {
            pvc.claim_name.clone()
        } else if v.ephemeral.is_some() {
            // The ephemeral volume controller names the claim it creates so.
            format!("{name}-{}", v.name)
        } else {
            continue;
        };
        out.claims.push(PodClaim {
            volume: v.name.clone(),
            claim,
        });
    }
    out.terminal = matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    );
    out.node_name = spec.node_name.clone().filter(|n| !n.is_empty());
    out.termination_grace_period_seconds = spec.termination_grace_period_seconds;
    out.terminating = pod.metadata.deletion_timestamp.is_some();
    out.namespace = namespace;
    out.name = name;
    out.labels = labels;
    Ok(out)
}

fn namespace_or_default(meta: &meta::ObjectMeta) -> String {
    match meta.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => ns.to_string(),
        _ => "default".to_string(),
    }
}

/// Everything that comes from the pod spec (shared by pods and DaemonSet templates).
fn convert_pod_spec(ctx: &PodCtx<'_>, spec: &core::PodSpec) -> Result<Pod> {
    let sp = ctx.spec_path;
    let mut pod = Pod {
        requests: pod_requests(ctx, spec)?,
        node_selector: spec.node_selector.clone().unwrap_or_default(),
        critical: matches!(
            spec.priority_class_name.as_deref(),
            Some("system-cluster-critical" | "system-node-critical")
        ),
        ..Pod::default()
    };

    for (i, t) in spec.tolerations.iter().flatten().enumerate() {
        pod.tolerations
            .push(toleration(ctx, &format!("{sp}.tolerations[{i}]"), t)?);
    }

    pod.host_ports = host_ports(ctx, spec)?;

    for (i, c) in spec
        .topology_spread_constraints
        .iter()
        .flatten()
        .enumerate()
    {
        let path = format!("{sp}.topologySpreadConstraints[{i}]");
        pod.topology_spread.push(spread_constraint(ctx, &path, c)?);
    }

    let Some(affinity) = &spec.affinity else {
        return Ok(pod);
    };
    if let Some(na) = &affinity.node_affinity {
        let base = format!("{sp}.affinity.nodeAffinity");
        if let Some(required) = &na.required_during_scheduling_ignored_during_execution {
            let mut any_term = false;
            for (i, term) in required.node_selector_terms.iter().enumerate() {
                any_term = true;
                let path = format!(
                    "{base}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}]"
                );
                let reqs = node_selector_term(ctx, &path, term)?;
                // An empty term matches no node; as one of ORed terms it adds nothing.
                if !reqs.is_empty() {
                    pod.required_node_terms.push(reqs);
                }
            }
            if any_term && pod.required_node_terms.is_empty() {
                // Only empty terms: the pod fits no node. `In` with no values is a
                // requirement no node satisfies, so consumers need no special case.
                pod.required_node_terms.push(vec![NodeRequirement {
                    key: HOSTNAME_LABEL.to_string(),
                    operator: Operator::In,
                    values: Vec::new(),
                    min_values: None,
                }]);
            }
        }
        for (i, pref) in na
            .preferred_during_scheduling_ignored_during_execution
            .iter()
            .flatten()
            .enumerate()
        {
            let path = format!("{base}.preferredDuringSchedulingIgnoredDuringExecution[{i}]");
            let requirements =
                node_selector_term(ctx, &format!("{path}.preference"), &pref.preference)?;
            // An empty preference matches no node and so never adds to a score.
            if !requirements.is_empty() {
                pod.preferred_node_terms.push(PreferredNodeTerm {
                    weight: pref.weight,
                    requirements,
                });
            }
        }
    }
    if let Some(pa) = &affinity.pod_affinity {
        let base = format!("{sp}.affinity.podAffinity");
        (pod.pod_affinity, pod.preferred_pod_affinity) = pod_affinity_terms(
            ctx,
            &base,
            pa.required_during_scheduling_ignored_during_execution
                .as_deref(),
            pa.preferred_during_scheduling_ignored_during_execution
                .as_deref(),
        )?;
    }
    if let Some(paa) = &affinity.pod_anti_affinity {
        let base = format!("{sp}.affinity.podAntiAffinity");
        (pod.pod_anti_affinity, pod.preferred_pod_anti_affinity) = pod_affinity_terms(
            ctx,
            &base,
            paa.required_during_scheduling_ignored_during_execution
                .as_deref(),
            paa.preferred_during_scheduling_ignored_during_execution
                .as_deref(),
        )?;
    }
    Ok(pod)
}

/// The host ports a pod binds, as kube-scheduler's NodePorts filter counts them
/// (`GetHostPorts`): every container's, and the sidecars' (init containers with
/// `restartPolicy: Always`, which run for the pod's whole life) — classic init
/// containers have exited before the others start. Protocol defaults to TCP, as the API
/// server's defaulting does; an empty host IP binds every address.
fn host_ports(ctx: &PodCtx<'_>, spec: &core::PodSpec) -> Result<Vec<HostPort>> {
    let sp = ctx.spec_path;
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .enumerate()
        .filter(|(_, c)| c.restart_policy.as_deref() == Some("Always"))
        .map(|(i, c)| (format!("{sp}.initContainers[{i}]"), c));
    let containers = spec
        .containers
        .iter()
        .enumerate()
        .map(|(i, c)| (format!("{sp}.containers[{i}]"), c));
    let mut out = Vec::new();
    for (path, c) in sidecars.chain(containers) {
        for (j, p) in c.ports.iter().flatten().enumerate() {
            let Some(port) = p.host_port.filter(|&port| port > 0) else {
                continue;
            };
            let port = u16::try_from(port).map_err(|_| SnapshotError::InvalidValue {
                object: ctx.object.clone(),
                path: format!("{path}.ports[{j}].hostPort"),
                value: port.to_string(),
                expected: "a port number from 1 to 65535".to_string(),
            })?;
            out.push(HostPort {
                port,
                protocol: p
                    .protocol
                    .clone()
                    .filter(|proto| !proto.is_empty())
                    .unwrap_or_else(|| "TCP".to_string()),
                host_ip: p.host_ip.clone().unwrap_or_default(),
            });
        }
    }
    Ok(out)
}

/// The effective requests of a pod; see [`pod_from_k8s`] for the rule.
fn pod_requests(ctx: &PodCtx<'_>, spec: &core::PodSpec) -> Result<Resources> {
    let object = &ctx.object;
    let mut total = Resources::new();
    for c in &spec.containers {
        let r = container_requests(object, c, false)?;
        total.add(&r);
    }
    // Sidecars run for the pod's whole life, so they add to the sum; a classic init
    // container runs alone except for the sidecars started before it.
    let mut sidecars = Resources::new();
    let mut init_peak = Resources::new();
    for c in spec.init_containers.iter().flatten() {
        let r = container_requests(object, c, true)?;
        if c.restart_policy.as_deref() == Some("Always") {
            total.add(&r);
            sidecars.add(&r);
            init_peak.max_with(&sidecars);
        } else {
            let mut running = r;
            running.add(&sidecars);
            init_peak.max_with(&running);
        }
    }
    total.max_with(&init_peak);

    // Pod-level resources (PodLevelResources): cpu, memory and hugepages only; they
    // replace the container aggregate. Limits without requests default the requests.
    if let Some(pod_resources) = &spec.resources {
        let requests = pod_resources.requests.as_ref();
        let limits = pod_resources.limits.as_ref();
        let names = requests
            .into_iter()
            .flatten()
            .chain(limits.into_iter().flatten());
        let mut pod_level = BTreeMap::new();
        for (name, _) in names {
            if !(name == "cpu" || name == "memory" || name.starts_with("hugepages-")) {
                continue;
            }
            if pod_level.contains_key(name) {
                continue;
            }
            let (field, q) = match requests.and_then(|m| m.get(name)) {
                Some(q) => ("requests", q),
                None => match limits.and_then(|m| m.get(name)) {
                    Some(q) => ("limits", q),
                    None => continue,
                },
            };
            let path = format!("{}.resources.{field}.{name}", ctx.spec_path);
            pod_level.insert(name.clone(), quantity(object, None, path, q)?);
        }
        for (name, milli) in pod_level {
            total.set_milli(&name, milli);
        }
    }

    let mut overhead = Resources::new();
    for (name, q) in spec.overhead.iter().flatten() {
        let path = format!("{}.overhead.{name}", ctx.spec_path);
        overhead.set_milli(name, quantity(object, None, path, q)?);
    }
    total.add(&overhead);
    total.add(&Resources::one_pod());
    Ok(total)
}

/// A container's requests, with limits standing in for missing requests.
fn container_requests(object: &str, c: &core::Container, init: bool) -> Result<Resources> {
    let cref = ContainerRef {
        name: c.name.clone(),
        init,
    };
    let mut out = Resources::new();
    let Some(res) = &c.resources else {
        return Ok(out);
    };
    let requests = res.requests.as_ref();
    for (name, q) in requests.into_iter().flatten() {
        let path = format!("resources.requests.{name}");
        out.set_milli(name, quantity(object, Some(&cref), path, q)?);
    }
    for (name, q) in res.limits.iter().flatten() {
        // Every limit is checked, even one shadowed by a request: the API server would
        // not have admitted the pod with a malformed one.
        let path = format!("resources.limits.{name}");
        let milli = quantity(object, Some(&cref), path, q)?;
        if !requests.is_some_and(|r| r.contains_key(name)) {
            out.set_milli(name, milli);
        }
    }
    Ok(out)
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

fn node_selector_term(
    ctx: &PodCtx<'_>,
    path: &str,
    term: &core::NodeSelectorTerm,
) -> Result<Vec<NodeRequirement>> {
    let mut out = Vec::new();
    for (i, r) in term.match_expressions.iter().flatten().enumerate() {
        out.push(node_requirement(
            &ctx.object,
            &format!("{path}.matchExpressions[{i}]"),
            r,
            &r.key,
        )?);
    }
    for (i, r) in term.match_fields.iter().flatten().enumerate() {
        let p = format!("{path}.matchFields[{i}]");
        if r.key != "metadata.name" {
            return Err(SnapshotError::InvalidValue {
                object: ctx.object.clone(),
                path: format!("{p}.key"),
                value: r.key.clone(),
                expected: "\"metadata.name\", the only field node selectors support".to_string(),
            });
        }
        out.push(node_requirement(&ctx.object, &p, r, HOSTNAME_LABEL)?);
    }
    Ok(out)
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

fn toleration(ctx: &PodCtx<'_>, path: &str, t: &core::Toleration) -> Result<Toleration> {
    let operator = match t.operator.as_deref() {
        None | Some("") | Some("Equal") => TolerationOperator::Equal,
        Some("Exists") => TolerationOperator::Exists,
        Some(other) => {
            return Err(SnapshotError::UnknownOperator {
                object: ctx.object.clone(),
                path: format!("{path}.operator"),
                operator: other.to_string(),
                expected: TOLERATION_OPERATORS,
            });
        }
    };
    let effect = match t.effect.as_deref() {
        None | Some("") => None,
        Some(e) => Some(taint_effect(&ctx.object, &format!("{path}.effect"), e)?),
    };
    Ok(Toleration {
        key: t.key.clone().unwrap_or_default(),
        operator,
        value: t.value.clone().unwrap_or_default(),
        effect,
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

fn spread_constraint(
    ctx: &PodCtx<'_>,
    path: &str,
    c: &core::TopologySpreadConstraint,
) -> Result<TopologySpreadConstraint> {
    let invalid = |field: &str, value: String, expected: &str| SnapshotError::InvalidValue {
        object: ctx.object.clone(),
        path: format!("{path}.{field}"),
        value,
        expected: expected.to_string(),
    };
    let max_skew = u32::try_from(c.max_skew)
        .ok()
        .filter(|s| *s > 0)
        .ok_or_else(|| {
            invalid(
                "maxSkew",
                c.max_skew.to_string(),
                "an integer greater than 0",
            )
        })?;
    let when_unsatisfiable = match c.when_unsatisfiable.as_str() {
        "DoNotSchedule" => WhenUnsatisfiable::DoNotSchedule,
        "ScheduleAnyway" => WhenUnsatisfiable::ScheduleAnyway,
        other => {
            return Err(invalid(
                "whenUnsatisfiable",
                other.to_string(),
                "one of DoNotSchedule, ScheduleAnyway",
            ));
        }
    };
    let min_domains =
        match c.min_domains {
            None => None,
            Some(m) => Some(u32::try_from(m).ok().filter(|m| *m > 0).ok_or_else(|| {
                invalid("minDomains", m.to_string(), "an integer greater than 0")
            })?),
        };
    let mut label_selector = match &c.label_selector {
        Some(s) => Some(label_selector(
            &ctx.object,
            &format!("{path}.labelSelector"),
            s,
        )?),
        None => None,
    };
    // matchLabelKeys: the pod's values for these keys narrow the selector to its own
    // revision (the scheduler merges them; from 1.34 the API server does it on create).
    if let Some(sel) = &mut label_selector {
        for key in c.match_label_keys.iter().flatten() {
            if let Some(v) = ctx.labels.get(key) {
                sel.match_expressions.push(LabelSelectorRequirement {
                    key: key.clone(),
                    operator: LabelSelectorOperator::In,
                    values: vec![v.clone()],
                });
            }
        }
    }
    let honor = |field: &str, value: &Option<String>, default: bool| match value.as_deref() {
        None => Ok(default),
        Some("Honor") => Ok(true),
        Some("Ignore") => Ok(false),
        Some(other) => Err(invalid(field, other.to_string(), "one of Honor, Ignore")),
    };
    Ok(TopologySpreadConstraint {
        max_skew,
        topology_key: c.topology_key.clone(),
        when_unsatisfiable,
        label_selector,
        min_domains,
        honor_node_affinity: honor("nodeAffinityPolicy", &c.node_affinity_policy, true)?,
        honor_node_taints: honor("nodeTaintsPolicy", &c.node_taints_policy, false)?,
    })
}

type AffinityTerms = (Vec<PodAffinityTerm>, Vec<WeightedPodAffinityTerm>);

fn pod_affinity_terms(
    ctx: &PodCtx<'_>,
    base: &str,
    required: Option<&[core::PodAffinityTerm]>,
    preferred: Option<&[core::WeightedPodAffinityTerm]>,
) -> Result<AffinityTerms> {
    let mut req = Vec::new();
    for (i, t) in required.into_iter().flatten().enumerate() {
        let path = format!("{base}.requiredDuringSchedulingIgnoredDuringExecution[{i}]");
        req.push(pod_affinity_term(ctx, &path, t)?);
    }
    let mut pref = Vec::new();
    for (i, w) in preferred.into_iter().flatten().enumerate() {
        let path =
            format!("{base}.preferredDuringSchedulingIgnoredDuringExecution[{i}].podAffinityTerm");
        pref.push(WeightedPodAffinityTerm {
            weight: w.weight,
            term: pod_affinity_term(ctx, &path, &w.pod_affinity_term)?,
        });
    }
    Ok((req, pref))
}

fn pod_affinity_term(
    ctx: &PodCtx<'_>,
    path: &str,
    t: &core::PodAffinityTerm,
) -> Result<PodAffinityTerm> {
    let mut selector = match &t.label_selector {
        Some(s) => Some(label_selector(
            &ctx.object,
            &format!("{path}.labelSelector"),
            s,
        )?),
        None => None,
    };
    if let Some(sel) = &mut selector {
        for key in t.match_label_keys.iter().flatten() {
            if let Some(v) = ctx.labels.get(key) {
                sel.match_expressions.push(LabelSelectorRequirement {
                    key: key.clone(),
                    operator: LabelSelectorOperator::In,
                    values: vec![v.clone()],
                });
            }
        }
        for key in t.mismatch_label_keys.iter().flatten() {
            if let Some(v) = ctx.labels.get(key) {
                sel.match_expressions.push(LabelSelectorRequirement {
                    key: key.clone(),
                    operator: LabelSelectorOperator::NotIn,
                    values: vec![v.clone()],
                });
            }
        }
    }
    let mut namespaces = t.namespaces.clone().unwrap_or_default();
    if namespaces.is_empty() {
        // Kubernetes reads "no namespaces" as the pod's own; filling it in here means no
        // consumer can forget to.
        namespaces.push(ctx.namespace.to_string());
    }
    Ok(PodAffinityTerm {
        label_selector: selector,
        topology_key: t.topology_key.clone(),
        namespaces,
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

// ---------------------------------------------------------------------------------------
// Nodes, DaemonSets, PDBs
// ---------------------------------------------------------------------------------------

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
    }
    let meta = &node.metadata;
    out.created_at = meta.creation_timestamp.as_ref().map(unix);
    out.deleting = meta.deletion_timestamp.is_some();
    if let Some(annotations) = &meta.annotations {
        out.do_not_disrupt = do_not_disrupt(annotations);
        // Only hashes nodewright wrote are comparable: Karpenter's (another version)
        // hash other fields another way.
        use crate::disruption::hash;
        let ours = |version: &str| {
            annotations.get(version).map(String::as_str) == Some(hash::HASH_VERSION)
        };
        if ours(hash::ANNOTATION_NODEPOOL_HASH_VERSION) {
            out.nodepool_hash = annotations.get(hash::ANNOTATION_NODEPOOL_HASH).cloned();
        }
        if ours(hash::ANNOTATION_NODECLASS_HASH_VERSION) {
            out.nodeclass_hash = annotations.get(hash::ANNOTATION_NODECLASS_HASH).cloned();
        }
    }
    out.name = name;
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

/// Converts a DaemonSet: its pod template as a pod named and namespaced as the
/// DaemonSet, with `daemonset_owned` set (the pods it creates are), so it is never
/// pending itself. Errors name the DaemonSet and paths under `spec.template.spec`.
pub fn daemonset_from_k8s(ds: &apps::DaemonSet) -> Result<DaemonSet, SnapshotError> {
    let namespace = namespace_or_default(&ds.metadata);
    let name = ds.metadata.name.clone().unwrap_or_default();
    let default_spec = core::PodSpec::default();
    let template = ds.spec.as_ref().map(|s| &s.template);
    let spec = template
        .and_then(|t| t.spec.as_ref())
        .unwrap_or(&default_spec);
    let labels = template
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let ctx = PodCtx {
        object: format!("DaemonSet \"{namespace}/{name}\""),
        spec_path: "spec.template.spec",
        namespace: &namespace,
        labels: &labels,
    };
    let mut pod = convert_pod_spec(&ctx, spec)?;
    pod.namespace = namespace.clone();
    pod.name = name.clone();
    pod.labels = labels;
    pod.daemonset_owned = true;
    Ok(DaemonSet {
        namespace,
        name,
        template: pod,
    })
}

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

// ---------------------------------------------------------------------------------------
// Storage
// ---------------------------------------------------------------------------------------

/// The annotation the PV controller sets once a claim is bound to its volume.
const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";

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
            .is_some_and(|a| a.contains_key(BIND_COMPLETED)),
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
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A List as kubectl prints it.
    fn list(items: Vec<Value>) -> String {
        json!({"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}})
            .to_string()
    }

    /// A pod as the API server returns it, with the given spec fields merged in.
    fn pod_json(ns: &str, name: &str, spec: Value) -> Value {
        let mut full = json!({
            "containers": [],
            "dnsPolicy": "ClusterFirst",
            "restartPolicy": "Always",
            "schedulerName": "default-scheduler",
        });
        if let (Some(full), Value::Object(extra)) = (full.as_object_mut(), spec) {
            full.extend(extra);
        }
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": {"app": name}},
            "spec": full,
            "status": {"phase": "Pending"},
        })
    }

    fn container(name: &str, resources: Value) -> Value {
        json!({"name": name, "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7", "resources": resources})
    }

    fn one_pod(spec: Value) -> Result<Pod> {
        let mut snapshot = parse_snapshot(&list(vec![pod_json("default", "web-1", spec)]))?;
        Ok(snapshot.pods.remove(0))
    }

    fn res(pairs: &[(&str, &str)]) -> Resources {
        let mut r = Resources::one_pod();
        for (name, q) in pairs {
            r.set_quantity(name, q).unwrap();
        }
        r
    }

    fn node_json(name: &str, ready: &str) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": "us-east-1a"}},
            "spec": {
                "providerID": "aws:///us-east-1a/i-0123456789abcdef0",
                "taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
                           {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}],
                "unschedulable": true,
            },
            "status": {
                "allocatable": {"cpu": "3920m", "memory": "14909676Ki", "pods": "58", "ephemeral-storage": "18242267924"},
                "capacity": {"cpu": "4", "memory": "15896812Ki", "pods": "58"},
                "conditions": [
                    {"type": "MemoryPressure", "status": "False"},
                    {"type": "Ready", "status": ready},
                ],
                "nodeInfo": {"architecture": "amd64", "bootID": "", "containerRuntimeVersion": "", "kernelVersion": "",
                             "kubeProxyVersion": "", "kubeletVersion": "", "machineID": "", "operatingSystem": "linux",
                             "osImage": "", "systemUUID": ""},
            },
        })
    }

    fn daemonset_json() -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "aws-node", "namespace": "kube-system"},
            "spec": {
                "selector": {"matchLabels": {"k8s-app": "aws-node"}},
                "template": {
                    "metadata": {"labels": {"k8s-app": "aws-node"}},
                    "spec": {
                        "containers": [container("aws-node", json!({"requests": {"cpu": "25m"}})),
                                       container("aws-eks-nodeagent", json!({"requests": {"cpu": "25m"}}))],
                        "priorityClassName": "system-node-critical",
                        "tolerations": [{"operator": "Exists"}],
                    },
                },
                "updateStrategy": {"type": "RollingUpdate"},
            },
            "status": {"currentNumberScheduled": 3, "desiredNumberScheduled": 3, "numberMisscheduled": 0, "numberReady": 3},
        })
    }

    fn pdb_json(name: &str, field: &str, value: Value) -> Value {
        json!({
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": "shop"},
            "spec": {"selector": {"matchLabels": {"app": name}}, field: value},
            "status": {"currentHealthy": 2, "desiredHealthy": 1, "disruptionsAllowed": 1, "expectedPods": 2},
        })
    }

    fn strip_kinds(mut items: Vec<Value>) -> Vec<Value> {
        for item in &mut items {
            if let Some(obj) = item.as_object_mut() {
                obj.remove("kind");
                obj.remove("apiVersion");
            }
        }
        items
    }

    fn mixed_items() -> Vec<Value> {
        vec![
            node_json("ip-192-168-12-34.ec2.internal", "True"),
            pod_json(
                "default",
                "web-1",
                json!({"containers": [container("app", json!({"requests": {"cpu": "1"}}))]}),
            ),
            daemonset_json(),
            pdb_json("storefront", "minAvailable", json!("50%")),
        ]
    }

    // --- the List ----------------------------------------------------------------------

    #[test]
    fn a_kubectl_list_yields_every_kind_in_order() {
        let s = parse_snapshot(&list(mixed_items())).unwrap();
        assert_eq!(s.nodes.len(), 1);
        assert_eq!(s.pods.len(), 1);
        assert_eq!(s.daemonsets.len(), 1);
        assert_eq!(s.pdbs.len(), 1);
        assert_eq!(s.pods[0].key(), "default/web-1");
    }

    #[test]
    fn two_objects_of_one_kind_with_one_name_are_rejected() {
        let twice = list(vec![
            pod_json("default", "web-1", json!({})),
            pod_json("default", "web-1", json!({})),
        ]);
        let err = parse_snapshot(&twice).unwrap_err();
        assert!(
            matches!(err, SnapshotError::Duplicate { index: 1, .. }),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .starts_with("items[1]: pod \"default/web-1\" appears more than once"),
            "{err}"
        );
        // Same name in another namespace is another pod.
        let other_ns = list(vec![
            pod_json("default", "web-1", json!({})),
            pod_json("batch", "web-1", json!({})),
        ]);
        assert_eq!(parse_snapshot(&other_ns).unwrap().pods.len(), 2);
    }

    #[test]
    fn items_without_kind_are_recognised_by_their_shape() {
        let with = parse_snapshot(&list(mixed_items())).unwrap();
        let without = parse_snapshot(&list(strip_kinds(mixed_items()))).unwrap();
        assert_eq!(with, without);
    }

    #[test]
    fn a_typed_list_gives_its_kind_to_items_that_have_none() {
        let items = strip_kinds(vec![pod_json("default", "web-1", json!({}))]);
        let text = json!({"apiVersion": "v1", "kind": "PodList", "items": items, "metadata": {}})
            .to_string();
        let s = parse_snapshot(&text).unwrap();
        assert_eq!(s.pods.len(), 1);
    }

    /// `{"kind": ..., "items": [...]}` with `kind` written before or after `items` (the
    /// API server writes it first, kubectl after).
    fn list_text(kind: &str, items: &[Value], kind_first: bool) -> String {
        let items: Vec<String> = items.iter().map(Value::to_string).collect();
        let items = items.join(",");
        if kind_first {
            format!(r#"{{"kind":"{kind}","apiVersion":"v1","items":[{items}]}}"#)
        } else {
            format!(r#"{{"apiVersion":"v1","items":[{items}],"kind":"{kind}"}}"#)
        }
    }

    #[test]
    fn the_lists_kind_before_or_after_its_items_and_text_or_stream_read_the_same() {
        let kinded = mixed_items();
        let kindless = strip_kinds(vec![
            pod_json("default", "web-2", json!({})),
            pod_json("default", "web-3", json!({})),
        ]);
        let mut items = kinded.clone();
        items.extend(kindless.clone());
        let expected = parse_snapshot(&list_text("List", &items, true)).unwrap();
        assert_eq!(expected.pods.len(), 3);
        assert_eq!(
            (
                expected.nodes.len(),
                expected.daemonsets.len(),
                expected.pdbs.len()
            ),
            (1, 1, 1)
        );
        for kind_first in [true, false] {
            let text = list_text("List", &items, kind_first);
            let read = parse_snapshot(&text).unwrap();
            assert_eq!(read.pods, expected.pods, "kind first: {kind_first}");
            assert_eq!(read.nodes, expected.nodes);
            assert_eq!(read.daemonsets, expected.daemonsets);
            let streamed = parse_snapshot_reader(text.as_bytes()).unwrap();
            assert_eq!(streamed.pods, expected.pods, "kind first: {kind_first}");
            assert_eq!(streamed.nodes, expected.nodes);
            // A typed list names the kind of items that have none.
            let typed =
                parse_snapshot_reader(list_text("PodList", &kindless, kind_first).as_bytes())
                    .unwrap();
            assert_eq!(typed.pods.len(), 2);
        }
    }

    #[test]
    fn a_top_level_that_is_not_a_list_wins_over_a_bad_item_read_before_it() {
        let bad = pod_json("default", "web-1", json!({"containers": "not a list"}));
        for kind_first in [true, false] {
            let text = list_text("DeploymentList", std::slice::from_ref(&bad), kind_first);
            let err = parse_snapshot_reader(text.as_bytes()).unwrap_err();
            assert!(matches!(err, SnapshotError::NotAList { .. }), "{err}");
            let text = list_text("List", std::slice::from_ref(&bad), kind_first);
            let err = parse_snapshot_reader(text.as_bytes()).unwrap_err();
            assert!(
                err.to_string()
                    .starts_with("items[0] (Pod \"default/web-1\"): spec.containers"),
                "{err}"
            );
            // Broken JSON after the bad item wins over both.
            let broken = format!("{}{{", &text[..text.len() - 1]);
            let err = parse_snapshot_reader(broken.as_bytes()).unwrap_err();
            assert!(matches!(err, SnapshotError::NotJson { .. }), "{err}");
        }
    }

    #[test]
    fn an_item_whose_kind_cannot_be_told_is_an_error_naming_its_index() {
        let items = vec![
            node_json("n1", "True"),
            json!({"metadata": {"name": "mystery"}, "spec": {"foo": 1}}),
        ];
        let err = parse_snapshot(&list(items)).unwrap_err();
        assert!(
            matches!(err, SnapshotError::UnknownItemKind { index: 1, .. }),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .starts_with("items[1]: cannot tell what kind of object this is"),
            "{err}"
        );
    }

    #[test]
    fn other_kinds_are_skipped_with_or_without_a_kind() {
        let deployment = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "inflate", "namespace": "default"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "inflate"}},
                     "template": {"metadata": {"labels": {"app": "inflate"}}, "spec": {"containers": []}}},
        });
        let service = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"clusterIP": "10.100.0.1", "ports": [{"port": 80}], "selector": {"app": "web"}},
        });
        let items = vec![deployment, service];
        assert_eq!(
            parse_snapshot(&list(items.clone())).unwrap(),
            ClusterSnapshot::default()
        );
        assert_eq!(
            parse_snapshot(&list(strip_kinds(items))).unwrap(),
            ClusterSnapshot::default()
        );
    }

    #[test]
    fn text_that_is_not_json_is_a_not_json_error() {
        let err = parse_snapshot("NAME   READY   STATUS\nweb-1  0/1     Pending").unwrap_err();
        assert!(matches!(err, SnapshotError::NotJson { .. }), "{err:?}");
        assert!(std::error::Error::source(&err).is_some());
        assert!(
            err.to_string().starts_with("the snapshot is not JSON: "),
            "{err}"
        );
    }

    #[test]
    fn a_single_pod_is_not_a_list_and_the_error_says_what_it_is() {
        let text = pod_json("default", "web-1", json!({})).to_string();
        let err = parse_snapshot(&text).unwrap_err();
        assert!(matches!(err, SnapshotError::NotAList { .. }), "{err:?}");
        assert!(
            err.to_string()
                .starts_with("the snapshot is a Pod \"default/web-1\", not a List"),
            "{err}"
        );
    }

    #[test]
    fn arrays_lists_of_other_kinds_and_lists_without_items_are_not_lists() {
        let cases = [
            ("[]", "a JSON array"),
            (
                r#"{"apiVersion":"apps/v1","kind":"DeploymentList","items":[]}"#,
                "a DeploymentList",
            ),
            (
                r#"{"apiVersion":"v1","kind":"List"}"#,
                "a List without an items array",
            ),
            (r#"{"items":[]}"#, "a JSON object without kind"),
        ];
        for (text, found) in cases {
            match parse_snapshot(text) {
                Err(SnapshotError::NotAList { found: f }) => assert_eq!(f, found, "{text}"),
                other => panic!("{text}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_list_with_null_items_is_empty() {
        let s = parse_snapshot(r#"{"apiVersion":"v1","kind":"List","items":null}"#).unwrap();
        assert_eq!(s, ClusterSnapshot::default());
    }

    #[test]
    fn an_item_that_does_not_deserialize_names_index_object_and_field() {
        let mut bad = pod_json("default", "web-1", json!({}));
        bad["spec"]["containers"] =
            json!([{"name": "app", "resources": {"requests": {"cpu": ["1"]}}}]);
        let err = parse_snapshot(&list(vec![node_json("n1", "True"), bad])).unwrap_err();
        let SnapshotError::Item {
            index,
            kind,
            object,
            path,
            ..
        } = &err
        else {
            panic!("{err:?}");
        };
        assert_eq!((*index, *kind), (1, "Pod"));
        assert_eq!(object.as_deref(), Some("default/web-1"));
        assert_eq!(path, "spec.containers[0].resources.requests.cpu");
        assert!(
            err.to_string().starts_with(
                "items[1] (Pod \"default/web-1\"): spec.containers[0].resources.requests.cpu: "
            ),
            "{err}"
        );
    }

    #[test]
    fn an_item_with_the_wrong_api_version_is_an_item_error() {
        let mut pdb = pdb_json("web", "maxUnavailable", json!(1));
        pdb["apiVersion"] = json!("policy/v1beta1");
        let err = parse_snapshot(&list(vec![pdb])).unwrap_err();
        assert!(
            matches!(
                err,
                SnapshotError::Item {
                    index: 0,
                    kind: "PodDisruptionBudget",
                    ..
                }
            ),
            "{err:?}"
        );
    }

    // --- pods: pending -----------------------------------------------------------------

    #[test]
    fn pending_means_unbound_not_terminal_and_not_a_daemonset_pod() {
        let mut bound = pod_json("default", "bound", json!({"nodeName": "n1"}));
        bound["status"]["phase"] = json!("Running");
        let mut done = pod_json("default", "done", json!({}));
        done["status"]["phase"] = json!("Succeeded");
        let mut failed = pod_json("default", "failed", json!({}));
        failed["status"]["phase"] = json!("Failed");
        let mut ds_pod = pod_json("kube-system", "aws-node-x7k2p", json!({}));
        ds_pod["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "aws-node", "uid": "u1", "controller": true}]);
        let waiting = pod_json("default", "waiting", json!({}));
        let s = parse_snapshot(&list(vec![bound, done, failed, ds_pod, waiting])).unwrap();
        let pending: Vec<String> = s.pending_pods().map(Pod::key).collect();
        assert_eq!(pending, ["default/waiting"]);
        assert!(s.pods[1].terminal && s.pods[2].terminal);
        assert!(s.pods[3].daemonset_owned);
        assert_eq!(s.pods[0].node_name.as_deref(), Some("n1"));
    }

    #[test]
    fn a_pod_without_namespace_is_in_default() {
        let mut p = pod_json("x", "web-1", json!({}));
        p["metadata"].as_object_mut().unwrap().remove("namespace");
        let s = parse_snapshot(&list(vec![p])).unwrap();
        assert_eq!(s.pods[0].namespace, "default");
    }

    #[test]
    fn critical_priority_classes_mark_a_pod_critical() {
        let p = one_pod(json!({"priorityClassName": "system-node-critical"})).unwrap();
        assert!(p.critical);
        let p = one_pod(json!({"priorityClassName": "high"})).unwrap();
        assert!(!p.critical);
    }

    // --- pods: requests ----------------------------------------------------------------

    #[test]
    fn a_pod_without_requests_still_takes_a_pod_slot() {
        let p = one_pod(json!({"containers": [container("app", json!({}))]})).unwrap();
        assert_eq!(p.requests, Resources::one_pod());
    }

    #[test]
    fn containers_requests_add_up() {
        let p = one_pod(json!({"containers": [
            container("app", json!({"requests": {"cpu": "250m", "memory": "256Mi"}})),
            container("log", json!({"requests": {"cpu": "100m", "memory": "64Mi"}})),
        ]}))
        .unwrap();
        assert_eq!(p.requests, res(&[("cpu", "350m"), ("memory", "320Mi")]));
    }

    #[test]
    fn the_largest_init_container_wins_over_a_smaller_sum() {
        let p = one_pod(json!({
            "containers": [container("app", json!({"requests": {"cpu": "500m", "memory": "128Mi"}}))],
            "initContainers": [
                container("migrate", json!({"requests": {"cpu": "2", "memory": "64Mi"}})),
                container("warm", json!({"requests": {"cpu": "1", "memory": "1Gi"}})),
            ],
        }))
        .unwrap();
        // Per resource: cpu max(0.5, 2, 1) = 2, memory max(128Mi, 64Mi, 1Gi) = 1Gi.
        assert_eq!(p.requests, res(&[("cpu", "2"), ("memory", "1Gi")]));
    }

    #[test]
    fn sidecars_add_to_the_sum_and_to_later_init_containers() {
        let sidecar = |name: &str, cpu: &str| {
            let mut c = container(name, json!({"requests": {"cpu": cpu}}));
            c["restartPolicy"] = json!("Always");
            c
        };
        let p = one_pod(json!({
            "containers": [container("app", json!({"requests": {"cpu": "1"}}))],
            "initContainers": [
                container("first", json!({"requests": {"cpu": "1500m"}})),
                sidecar("envoy", "200m"),
                container("after-sidecar", json!({"requests": {"cpu": "1900m"}})),
                sidecar("log-shipper", "100m"),
            ],
        }))
        .unwrap();
        // Running: app 1 + envoy 0.2 + shipper 0.1 = 1.3.
        // Init peaks: first 1.5; envoy 0.2; after-sidecar 1.9 + 0.2 = 2.1; shipper 0.3.
        assert_eq!(p.requests, res(&[("cpu", "2100m")]));
    }

    #[test]
    fn overhead_is_added_after_the_init_rule() {
        let p = one_pod(json!({
            "containers": [container("app", json!({"requests": {"cpu": "1", "memory": "1Gi"}}))],
            "initContainers": [container("init", json!({"requests": {"cpu": "2"}}))],
            "overhead": {"cpu": "250m", "memory": "120Mi"},
        }))
        .unwrap();
        assert_eq!(p.requests, res(&[("cpu", "2250m"), ("memory", "1144Mi")]));
    }

    #[test]
    fn a_container_with_limits_only_requests_its_limits() {
        let p = one_pod(json!({"containers": [
            container("app", json!({"limits": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"}})),
            container("side", json!({"requests": {"cpu": "100m"}, "limits": {"cpu": "500m", "memory": "256Mi"}})),
        ]}))
        .unwrap();
        assert_eq!(
            p.requests,
            res(&[
                ("cpu", "2100m"),
                ("memory", "4352Mi"),
                ("nvidia.com/gpu", "1")
            ])
        );
    }

    #[test]
    fn extended_resources_are_counted_exactly() {
        let p = one_pod(json!({"containers": [
            container("trainer", json!({"requests": {"cpu": "4", "nvidia.com/gpu": "2", "vpc.amazonaws.com/pod-eni": "1",
                                                      "example.com/dongle": "3"},
                                         "limits": {"nvidia.com/gpu": "2", "vpc.amazonaws.com/pod-eni": "1"}})),
        ]}))
        .unwrap();
        assert_eq!(p.requests.get_milli("nvidia.com/gpu"), 2000);
        assert_eq!(p.requests.get_milli("vpc.amazonaws.com/pod-eni"), 1000);
        assert_eq!(p.requests.get_milli("example.com/dongle"), 3000);
        assert_eq!(p.requests.get_milli("pods"), 1000);
    }

    #[test]
    fn pod_level_requests_replace_the_container_sum_for_cpu_and_memory() {
        let p = one_pod(json!({
            "containers": [container("a", json!({"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}})),
                           container("b", json!({"requests": {"cpu": "1"}}))],
            "resources": {"requests": {"cpu": "1500m"}, "limits": {"memory": "3Gi"}},
        }))
        .unwrap();
        assert_eq!(
            p.requests,
            res(&[("cpu", "1500m"), ("memory", "3Gi"), ("nvidia.com/gpu", "1")])
        );
    }

    #[test]
    fn a_malformed_quantity_names_pod_container_and_resource() {
        let err = one_pod(
            json!({"containers": [container("app", json!({"requests": {"memory": "1.5.3Gi"}}))]}),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "pod \"default/web-1\": container \"app\": resources.requests.memory: quantity \"1.5.3Gi\" is not a \
             Kubernetes quantity (expected a number with an optional suffix such as 500m, 2, 1.5Gi, 256M, 1e3)"
        );
        assert!(matches!(
            std::error::Error::source(&err).and_then(|s| s.downcast_ref::<QuantityError>()),
            Some(QuantityError::Malformed(_))
        ));
    }

    #[test]
    fn a_malformed_init_container_limit_says_it_is_an_init_container() {
        let err = one_pod(
            json!({"initContainers": [container("setup", json!({"limits": {"cpu": "lots"}}))]}),
        )
        .unwrap_err();
        assert!(
            err.to_string().starts_with(
                "pod \"default/web-1\": init container \"setup\": resources.limits.cpu: "
            ),
            "{err}"
        );
    }

    #[test]
    fn a_negative_request_is_an_error_naming_pod_container_and_resource() {
        let err = one_pod(
            json!({"containers": [container("app", json!({"requests": {"cpu": "-500m"}}))]}),
        )
        .unwrap_err();
        assert!(
            matches!(err, SnapshotError::NegativeQuantity { .. }),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "pod \"default/web-1\": container \"app\": resources.requests.cpu: quantity \"-500m\" is negative \
             (expected zero or more)"
        );
    }

    #[test]
    fn requests_too_large_to_add_saturate_rather_than_fail() {
        // Each is a valid quantity; their sum is beyond what nodewright represents,
        // which only means "more than any node has".
        let big = json!({"requests": {"cpu": "5000000000000000"}});
        let pod =
            one_pod(json!({"containers": [container("a", big.clone()), container("b", big)]}))
                .unwrap();
        assert_eq!(
            pod.requests.get_milli("cpu"),
            crate::resources::QUANTITY_CEILING
        );
    }

    #[test]
    fn a_negative_overhead_names_the_field() {
        let err = one_pod(json!({"overhead": {"memory": "-1Mi"}})).unwrap_err();
        assert_eq!(
            err.to_string(),
            "pod \"default/web-1\": spec.overhead.memory: quantity \"-1Mi\" is negative (expected zero or more)"
        );
    }

    // --- pods: placement constraints ---------------------------------------------------

    #[test]
    fn node_selector_affinity_spread_and_tolerations_are_converted() {
        let p = one_pod(json!({
            "nodeSelector": {"kubernetes.io/arch": "arm64"},
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "dedicated", "value": "batch"},
                {"operator": "Exists"},
            ],
            "topologySpreadConstraints": [{
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "web-1"}},
                "minDomains": 3,
            }, {
                "maxSkew": 2,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "ScheduleAnyway",
            }],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                        {"matchExpressions": [
                            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
                            {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["4"]},
                            {"key": "node.kubernetes.io/exclude", "operator": "DoesNotExist"},
                        ]},
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["ip-10-0-0-1.ec2.internal"]}]},
                    ]},
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 40, "preference": {"matchExpressions": [
                            {"key": "topology.kubernetes.io/zone", "operator": "NotIn", "values": ["us-east-1c"]}]}},
                    ],
                },
                "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 10, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "cache"}},
                                                       "topologyKey": "topology.kubernetes.io/zone",
                                                       "namespaces": ["cache", "default"]}},
                ]},
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web-1"]}]},
                     "topologyKey": "kubernetes.io/hostname"},
                ]},
            },
        }))
        .unwrap();

        assert_eq!(
            p.node_selector
                .get("kubernetes.io/arch")
                .map(String::as_str),
            Some("arm64")
        );

        let req = |key: &str, operator, values: &[&str]| NodeRequirement {
            key: key.to_string(),
            operator,
            values: values.iter().map(|v| v.to_string()).collect(),
            min_values: None,
        };
        assert_eq!(
            p.required_node_terms,
            vec![
                vec![
                    req(
                        "karpenter.sh/capacity-type",
                        Operator::In,
                        &["spot", "on-demand"]
                    ),
                    req(
                        "karpenter.k8s.aws/instance-generation",
                        Operator::Gt,
                        &["4"]
                    ),
                    req("node.kubernetes.io/exclude", Operator::DoesNotExist, &[]),
                ],
                vec![req(
                    HOSTNAME_LABEL,
                    Operator::In,
                    &["ip-10-0-0-1.ec2.internal"]
                )],
            ]
        );
        assert_eq!(
            p.preferred_node_terms,
            vec![PreferredNodeTerm {
                weight: 40,
                requirements: vec![req(
                    "topology.kubernetes.io/zone",
                    Operator::NotIn,
                    &["us-east-1c"]
                )],
            }]
        );

        assert_eq!(
            p.tolerations,
            vec![
                Toleration {
                    key: "nvidia.com/gpu".into(),
                    operator: TolerationOperator::Exists,
                    value: String::new(),
                    effect: Some(TaintEffect::NoSchedule),
                },
                Toleration {
                    key: "dedicated".into(),
                    operator: TolerationOperator::Equal,
                    value: "batch".into(),
                    effect: None,
                },
                Toleration {
                    key: String::new(),
                    operator: TolerationOperator::Exists,
                    value: String::new(),
                    effect: None,
                },
            ]
        );
        let gpu_taint = Taint {
            key: "nvidia.com/gpu".into(),
            value: None,
            effect: TaintEffect::NoSchedule,
        };
        assert!(p.tolerations[0].tolerates(&gpu_taint));

        let web_selector = LabelSelector {
            match_labels: [("app".to_string(), "web-1".to_string())].into(),
            match_expressions: vec![],
        };
        assert_eq!(
            p.topology_spread,
            vec![
                TopologySpreadConstraint {
                    max_skew: 1,
                    topology_key: "topology.kubernetes.io/zone".into(),
                    when_unsatisfiable: WhenUnsatisfiable::DoNotSchedule,
                    label_selector: Some(web_selector.clone()),
                    min_domains: Some(3),
                    honor_node_affinity: true,
                    honor_node_taints: false,
                },
                TopologySpreadConstraint {
                    max_skew: 2,
                    topology_key: "kubernetes.io/hostname".into(),
                    when_unsatisfiable: WhenUnsatisfiable::ScheduleAnyway,
                    label_selector: None,
                    min_domains: None,
                    honor_node_affinity: true,
                    honor_node_taints: false,
                },
            ]
        );

        assert!(p.pod_affinity.is_empty());
        assert_eq!(p.preferred_pod_affinity.len(), 1);
        assert_eq!(p.preferred_pod_affinity[0].weight, 10);
        assert_eq!(
            p.preferred_pod_affinity[0].term.namespaces,
            ["cache", "default"]
        );
        assert_eq!(p.pod_anti_affinity.len(), 1);
        let anti = &p.pod_anti_affinity[0];
        assert_eq!(anti.topology_key, "kubernetes.io/hostname");
        assert!(anti.label_selector.as_ref().unwrap().matches(&p.labels));
        assert!(p.preferred_pod_anti_affinity.is_empty());
    }

    #[test]
    fn affinity_terms_without_namespaces_get_the_pods_namespace() {
        let item = pod_json(
            "shop",
            "cart-1",
            json!({"affinity": {
                "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": "redis"}}, "topologyKey": "topology.kubernetes.io/zone"}]},
                "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 100, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "cart-1"}},
                                                        "topologyKey": "kubernetes.io/hostname", "namespaces": []}}]},
            }}),
        );
        let s = parse_snapshot(&list(vec![item])).unwrap();
        let p = &s.pods[0];
        assert_eq!(p.pod_affinity[0].namespaces, ["shop"]);
        assert_eq!(p.preferred_pod_anti_affinity[0].term.namespaces, ["shop"]);
    }

    #[test]
    fn match_label_keys_narrow_selectors_to_the_pods_own_values() {
        let mut item = pod_json(
            "default",
            "web-1",
            json!({
                "topologySpreadConstraints": [{
                    "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": "web"}}, "matchLabelKeys": ["pod-template-hash"],
                }],
            }),
        );
        item["metadata"]["labels"] = json!({"app": "web", "pod-template-hash": "abc123"});
        let s = parse_snapshot(&list(vec![item])).unwrap();
        let sel = s.pods[0].topology_spread[0].label_selector.clone().unwrap();
        let mut other_revision = s.pods[0].labels.clone();
        assert!(sel.matches(&other_revision));
        other_revision.insert("pod-template-hash".into(), "def456".into());
        assert!(!sel.matches(&other_revision));
    }

    #[test]
    fn only_empty_required_node_terms_match_no_node() {
        let p = one_pod(
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
            {"nodeSelectorTerms": [{}]}}}}),
        )
        .unwrap();
        assert_eq!(p.required_node_terms.len(), 1);
        assert_eq!(p.required_node_terms[0][0].operator, Operator::In);
        assert!(p.required_node_terms[0][0].values.is_empty());
    }

    #[test]
    fn an_unknown_node_operator_names_the_pod_and_path() {
        let err = one_pod(json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
            {"nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Gte", "values": ["1"]}]}]}}}}))
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "pod \"default/web-1\": spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.\
             nodeSelectorTerms[0].matchExpressions[0].operator: unknown operator \"Gte\" (expected one of In, \
             NotIn, Exists, DoesNotExist, Gt, Lt)"
        );
    }

    #[test]
    fn gt_needs_exactly_one_integer() {
        let err = one_pod(json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
            {"nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["x"]}]}]}}}}))
        .unwrap_err();
        assert!(matches!(err, SnapshotError::InvalidValue { .. }), "{err:?}");
        assert!(
            err.to_string().contains("matchExpressions[0].values"),
            "{err}"
        );
    }

    #[test]
    fn unknown_label_selector_and_toleration_operators_are_errors() {
        let err = one_pod(json!({"topologySpreadConstraints": [{
            "maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchExpressions": [{"key": "app", "operator": "Equals", "values": ["x"]}]}}]}))
        .unwrap_err();
        assert!(
            err.to_string().ends_with(
                "spec.topologySpreadConstraints[0].labelSelector.matchExpressions[0].operator: unknown operator \
                 \"Equals\" (expected one of In, NotIn, Exists, DoesNotExist)"
            ),
            "{err}"
        );
        let err =
            one_pod(json!({"tolerations": [{"key": "a", "operator": "Matches"}]})).unwrap_err();
        assert!(
            matches!(
                err,
                SnapshotError::UnknownOperator {
                    expected: "Equal, Exists",
                    ..
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn a_zero_max_skew_is_invalid() {
        let err = one_pod(json!({"topologySpreadConstraints": [
            {"maxSkew": 0, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]}))
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("topologySpreadConstraints[0].maxSkew"),
            "{err}"
        );
    }

    // --- nodes, DaemonSets, PDBs -------------------------------------------------------

    #[test]
    fn a_node_keeps_readiness_taints_allocatable_and_provider_id() {
        let s = parse_snapshot(&list(vec![
            node_json("n1", "True"),
            node_json("n2", "Unknown"),
        ]))
        .unwrap();
        let n = &s.nodes[0];
        assert_eq!(n.name, "n1");
        assert!(n.ready);
        assert!(!s.nodes[1].ready);
        assert!(n.unschedulable);
        assert_eq!(
            n.provider_id.as_deref(),
            Some("aws:///us-east-1a/i-0123456789abcdef0")
        );
        assert_eq!(
            n.taints,
            vec![
                Taint {
                    key: "dedicated".into(),
                    value: Some("gpu".into()),
                    effect: TaintEffect::NoSchedule
                },
                Taint {
                    key: "node.kubernetes.io/unschedulable".into(),
                    value: None,
                    effect: TaintEffect::NoSchedule
                },
            ]
        );
        assert_eq!(n.allocatable.get_milli("cpu"), 3920);
        assert_eq!(n.allocatable.get_milli("memory"), 14909676 * 1024 * 1000);
        assert_eq!(n.allocatable.get_milli("pods"), 58_000);
        assert_eq!(
            n.allocatable.get_milli("ephemeral-storage"),
            18242267924 * 1000
        );
        assert_eq!(n.capacity.get_milli("cpu"), 4000);
        assert_eq!(
            n.labels
                .get("topology.kubernetes.io/zone")
                .map(String::as_str),
            Some("us-east-1a")
        );
    }

    #[test]
    fn a_node_with_a_bad_taint_effect_or_quantity_is_named() {
        let mut n = node_json("n1", "True");
        n["spec"]["taints"][0]["effect"] = json!("NoWay");
        let err = parse_snapshot(&list(vec![n])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "node \"n1\": spec.taints[0].effect: \"NoWay\" is not valid (expected one of NoSchedule, \
             PreferNoSchedule, NoExecute)"
        );
        let mut n = node_json("n1", "True");
        n["status"]["allocatable"]["cpu"] = json!("4 cores");
        let err = parse_snapshot(&list(vec![n])).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("node \"n1\": status.allocatable.cpu: quantity \"4 cores\""),
            "{err}"
        );
    }

    #[test]
    fn a_daemonset_template_becomes_a_pod_named_after_the_daemonset() {
        let s = parse_snapshot(&list(vec![daemonset_json()])).unwrap();
        let ds = &s.daemonsets[0];
        assert_eq!(
            (ds.namespace.as_str(), ds.name.as_str()),
            ("kube-system", "aws-node")
        );
        assert_eq!(ds.template.key(), "kube-system/aws-node");
        assert_eq!(ds.template.requests, res(&[("cpu", "50m")]));
        assert!(ds.template.critical);
        assert!(ds.template.daemonset_owned);
        assert!(!ds.template.is_pending());
        assert_eq!(
            ds.template.labels.get("k8s-app").map(String::as_str),
            Some("aws-node")
        );
        assert_eq!(ds.template.tolerations.len(), 1);
    }

    #[test]
    fn a_daemonset_error_names_the_daemonset_and_template_path() {
        let mut ds = daemonset_json();
        ds["spec"]["template"]["spec"]["overhead"] = json!({"cpu": "x"});
        let err = parse_snapshot(&list(vec![ds])).unwrap_err();
        assert!(
            err.to_string().starts_with(
                "DaemonSet \"kube-system/aws-node\": spec.template.spec.overhead.cpu: "
            ),
            "{err}"
        );
    }

    #[test]
    fn pdbs_take_integers_and_percentages() {
        let s = parse_snapshot(&list(vec![
            pdb_json("web", "minAvailable", json!("50%")),
            pdb_json("cache", "maxUnavailable", json!(1)),
        ]))
        .unwrap();
        assert_eq!(s.pdbs[0].min_available, Some(IntOrPercent::Percent(50)));
        assert_eq!(s.pdbs[0].max_unavailable, None);
        assert_eq!(s.pdbs[1].max_unavailable, Some(IntOrPercent::Int(1)));
        assert_eq!(
            (s.pdbs[1].namespace.as_str(), s.pdbs[1].name.as_str()),
            ("shop", "cache")
        );
        let sel = s.pdbs[1].selector.as_ref().unwrap();
        assert!(sel.matches(&[("app".to_string(), "cache".to_string())].into()));
    }

    #[test]
    fn a_pdb_with_a_numeric_string_or_a_percentage_over_100_is_invalid() {
        for bad in [json!("3"), json!("150%"), json!("%"), json!(-1)] {
            let err = parse_snapshot(&list(vec![pdb_json("web", "minAvailable", bad.clone())]))
                .unwrap_err();
            assert!(
                err.to_string()
                    .starts_with("PodDisruptionBudget \"shop/web\": spec.minAvailable: "),
                "{bad}: {err}"
            );
        }
    }

    /// Every leaf replaced by values of other types, and every key removed: the parser
    /// returns Ok or Err, never panics (a cheap stand-in for the fuzzer).
    #[test]
    fn mangled_snapshots_are_errors_never_panics() {
        fn paths(v: &Value, here: String, out: &mut Vec<String>) {
            match v {
                Value::Object(m) => {
                    for (k, c) in m {
                        paths(
                            c,
                            format!("{here}/{}", k.replace('~', "~0").replace('/', "~1")),
                            out,
                        );
                    }
                }
                Value::Array(a) => {
                    for (i, c) in a.iter().enumerate() {
                        paths(c, format!("{here}/{i}"), out);
                    }
                }
                _ => {}
            }
            out.push(here);
        }
        let mut doc = json!({"apiVersion": "v1", "kind": "List", "items": mixed_items()});
        doc["items"][1]["spec"]["initContainers"] = json!([{"name": "i", "restartPolicy": "Always",
            "resources": {"requests": {"cpu": "1"}}}]);
        doc["items"][1]["spec"]["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["a"]}]},
             "topologyKey": "kubernetes.io/hostname"}]}});
        let mut all = Vec::new();
        paths(&doc, String::new(), &mut all);
        let replacements = [
            json!(null),
            json!(-1),
            json!(i64::MAX),
            json!(1e300),
            json!(""),
            json!("-5"),
            json!("9999999999999999999Ei"),
            json!("1.5.3Gi"),
            json!([]),
            json!({}),
            json!(true),
        ];
        let mut outcomes = 0;
        for path in &all {
            for r in &replacements {
                let mut d = doc.clone();
                if let Some(slot) = d.pointer_mut(path) {
                    *slot = r.clone();
                }
                let _ = parse_snapshot(&d.to_string());
                outcomes += 1;
            }
            if let Some((parent, key)) = path.rsplit_once('/') {
                let mut d = doc.clone();
                if let Some(Value::Object(m)) = d.pointer_mut(parent) {
                    m.remove(&key.replace("~1", "/").replace("~0", "~"));
                }
                let _ = parse_snapshot(&d.to_string());
                outcomes += 1;
            }
        }
        assert!(outcomes > 1000, "{outcomes}");
        for text in [
            "",
            "{",
            "null",
            "\"List\"",
            "{\"kind\":\"List\",\"items\":[1,\"a\",null,[]]}",
        ] {
            assert!(parse_snapshot(text).is_err(), "{text}");
        }
    }

    // --- the example -------------------------------------------------------------------

    #[test]
    fn the_cli_example_snapshot_parses() {
        let s = parse_snapshot(include_str!("../../../cli/examples/snapshot.json")).unwrap();
        assert_eq!(s.nodes.len(), 3);
        assert!(s.nodes.iter().all(|n| n.ready));
        assert_eq!(s.daemonsets.len(), 2);
        assert_eq!(s.pdbs.len(), 2);
        assert_eq!(s.pending_pods().count(), 25);
        let gpu: Vec<&Pod> = s
            .pending_pods()
            .filter(|p| p.requests.get_milli("nvidia.com/gpu") > 0)
            .collect();
        assert_eq!(gpu.len(), 1);
        // aws-node: two 25m containers, the 25m init container fits inside them.
        let aws_node = s.daemonsets.iter().find(|d| d.name == "aws-node").unwrap();
        assert_eq!(aws_node.template.requests, res(&[("cpu", "50m")]));
    }

    #[test]
    fn the_cli_example_reads_the_same_without_item_kinds() {
        let text = include_str!("../../../cli/examples/snapshot.json");
        let mut doc: Value = serde_json::from_str(text).unwrap();
        let items = doc["items"].as_array().cloned().unwrap();
        doc["items"] = Value::Array(strip_kinds(items));
        assert_eq!(
            parse_snapshot(&doc.to_string()).unwrap(),
            parse_snapshot(text).unwrap()
        );
    }

    #[test]
    fn host_ports_come_from_containers_and_sidecars_but_not_classic_init_containers() {
        let ports = |list: Value| json!({"name": "c", "image": "pause", "ports": list});
        let mut sidecar = ports(json!([{"containerPort": 9000, "hostPort": 9000}]));
        sidecar["restartPolicy"] = json!("Always");
        let pod = one_pod(json!({
            "initContainers": [
                ports(json!([{"containerPort": 7000, "hostPort": 7000}])),
                sidecar,
            ],
            "containers": [ports(json!([
                {"containerPort": 80, "hostPort": 8080, "protocol": "UDP", "hostIP": "10.0.0.1"},
                {"containerPort": 443},
                {"containerPort": 53, "hostPort": 0},
            ]))],
        }))
        .unwrap();
        assert_eq!(
            pod.host_ports,
            vec![
                HostPort {
                    port: 9000,
                    protocol: "TCP".into(),
                    host_ip: String::new(),
                },
                HostPort {
                    port: 8080,
                    protocol: "UDP".into(),
                    host_ip: "10.0.0.1".into(),
                },
            ]
        );
    }

    #[test]
    fn a_host_port_out_of_range_names_the_container_port() {
        let err = one_pod(json!({"containers": [
            {"name": "c", "image": "pause", "ports": [{"containerPort": 1, "hostPort": 70000}]}
        ]}))
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "pod \"default/web-1\": spec.containers[0].ports[0].hostPort: \"70000\" is not valid (expected a port number from 1 to 65535)"
        );
    }

    #[test]
    fn scheduler_nomination_mark_and_owning_daemonset_are_read() {
        let mut item = pod_json(
            "default",
            "agent-x",
            json!({"schedulerName": "fargate-scheduler"}),
        );
        item["metadata"]["ownerReferences"] =
            json!([{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "u"}]);
        item["status"] = json!({
            "phase": "Pending",
            "nominatedNodeName": "n1",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        });
        let pod = parse_snapshot(&list(vec![item])).unwrap().pods.remove(0);
        assert_eq!(pod.scheduler_name.as_deref(), Some("fargate-scheduler"));
        assert_eq!(pod.nominated_node_name.as_deref(), Some("n1"));
        assert!(pod.marked_unschedulable);
        assert_eq!(pod.owner_daemonset.as_deref(), Some("agent"));
        assert!(pod.daemonset_owned);

        // The default scheduler, spelt out, is no scheduler name; other PodScheduled
        // conditions are no mark.
        let mut plain = pod_json("default", "web-1", json!({}));
        plain["status"]["conditions"] =
            json!([{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]);
        let pod = parse_snapshot(&list(vec![plain])).unwrap().pods.remove(0);
        assert_eq!(pod.scheduler_name, None);
        assert!(!pod.marked_unschedulable);
        assert_eq!(pod.owner_daemonset, None);
        assert!(!pod.mirror);
    }

    #[test]
    fn times_do_not_disrupt_hashes_and_budget_status_are_read_for_disruption() {
        let mut node = node_json("n1", "True");
        node["metadata"]["creationTimestamp"] = json!("2026-11-20T08:00:00Z");
        node["metadata"]["annotations"] = json!({
            "karpenter.sh/do-not-disrupt": "true",
            "karpenter.sh/nodepool-hash": "123",
            "karpenter.sh/nodepool-hash-version": "nodewright-v1",
            "karpenter.k8s.aws/ec2nodeclass-hash": "456",
            "karpenter.k8s.aws/ec2nodeclass-hash-version": "v4",
        });
        node["status"]["conditions"] = json!([{"type": "Ready", "status": "True",
            "lastTransitionTime": "2026-11-20T08:01:30Z"}]);
        let mut pod = pod_json("default", "web-1", json!({}));
        pod["metadata"]["creationTimestamp"] = json!("2026-11-21T00:00:00Z");
        pod["metadata"]["annotations"] = json!({"karpenter.sh/do-not-disrupt": "true"});
        pod["status"]["startTime"] = json!("2026-11-21T00:00:05Z");
        let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
            "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1,
                       "expectedPods": 1}});
        let s = parse_snapshot(&list(vec![node, pod, pdb])).unwrap();
        let day = |d: i64| crate::calendar::days_from_civil(2026, 11, d) * 86_400;
        let n = &s.nodes[0];
        assert_eq!(n.created_at, Some(day(20) + 8 * 3600));
        assert_eq!(n.ready_since, Some(day(20) + 8 * 3600 + 90));
        assert!(n.do_not_disrupt && !n.deleting);
        assert_eq!(n.nodepool_hash.as_deref(), Some("123"));
        // Karpenter's version ("v4"): not comparable with nodewright's hash.
        assert_eq!(n.nodeclass_hash, None);
        let p = &s.pods[0];
        assert!(p.do_not_disrupt);
        assert_eq!(
            (p.created_at, p.started_at),
            (Some(day(21)), Some(day(21) + 5))
        );
        assert_eq!(s.pdbs[0].status_disruptions_allowed, Some(0));
    }

    #[test]
    fn a_static_pods_mirror_is_known_by_its_annotation() {
        let mut item = pod_json("kube-system", "kube-proxy-n1", json!({}));
        item["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "abc123"});
        let pod = parse_snapshot(&list(vec![item])).unwrap().pods.remove(0);
        assert!(pod.mirror);
    }

    fn pvc_json(name: &str, spec: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": "default",
                "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
            "spec": spec})
    }

    fn zonal_pv_json(name: &str, zone: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"],
                "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]}]}]}}}})
    }

    fn zone_term(zones: &[&str]) -> Vec<NodeRequirement> {
        vec![NodeRequirement {
            key: "topology.kubernetes.io/zone".into(),
            operator: Operator::In,
            values: zones.iter().map(|z| z.to_string()).collect(),
            min_values: None,
        }]
    }

    #[test]
    fn claims_volumes_and_storage_classes_limit_the_pods_that_use_them() {
        let items = vec![
            pod_json(
                "default",
                "db-0",
                json!({"volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}}]}),
            ),
            pod_json(
                "default",
                "job-1",
                json!({"volumes": [
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]}),
            ),
            pvc_json(
                "data-db-0",
                json!({"volumeName": "pv-1", "storageClassName": "gp3", "accessModes": ["ReadWriteOnce"]}),
            ),
            pvc_json(
                "job-1-scratch",
                json!({"storageClassName": "late", "accessModes": ["ReadWriteOnce"]}),
            ),
            zonal_pv_json("pv-1", "us-east-1b"),
            json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                "metadata": {"name": "late"}, "provisioner": "ebs.csi.aws.com",
                "volumeBindingMode": "WaitForFirstConsumer",
                "allowedTopologies": [{"matchLabelExpressions": [
                    {"key": "topology.kubernetes.io/zone", "values": ["us-east-1c"]}]}]}),
        ];
        let with = parse_snapshot(&list(items.clone())).unwrap();
        assert_eq!(
            with.pods[0].required_node_terms,
            vec![zone_term(&["us-east-1b"])]
        );
        assert_eq!(
            with.pods[1].required_node_terms,
            vec![zone_term(&["us-east-1c"])]
        );
        assert_eq!(with.pods[1].claims[0].claim, "job-1-scratch");
        // The same without kinds: claims, volumes and classes are told by their shape.
        let without = parse_snapshot(&list(strip_kinds(items))).unwrap();
        assert_eq!(with, without);
    }

    #[test]
    fn a_pod_whose_claim_is_not_in_the_snapshot_is_not_provisionable_and_says_so() {
        let mut item = pod_json(
            "default",
            "db-0",
            json!({"volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}}]}),
        );
        item["status"]["conditions"] =
            json!([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]);
        let pod = parse_snapshot(&list(vec![item])).unwrap().pods.remove(0);
        assert_eq!(
            pod.not_provisionable().map(|r| r.to_string()).as_deref(),
            Some(
                "its volume \"data\" uses PersistentVolumeClaim \"default/data-db-0\", which does not exist"
            )
        );
    }

    #[test]
    fn a_volume_with_an_unknown_affinity_operator_is_named() {
        let mut pv = zonal_pv_json("pv-1", "us-east-1a");
        pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["operator"] =
            json!("Near");
        let err = parse_snapshot(&list(vec![pv])).unwrap_err().to_string();
        assert_eq!(
            err,
            "PersistentVolume \"pv-1\": spec.nodeAffinity.required.nodeSelectorTerms[0].matchExpressions[0].operator: unknown operator \"Near\" (expected one of In, NotIn, Exists, DoesNotExist, Gt, Lt)"
        );
    }

    #[test]
    fn two_storage_classes_with_one_name_are_rejected() {
        let sc = json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": "gp3"}, "provisioner": "ebs.csi.aws.com"});
        let err = parse_snapshot(&list(vec![sc.clone(), sc])).unwrap_err();
        assert!(
            matches!(&err, SnapshotError::Duplicate { index: 1, object } if object == "StorageClass \"gp3\""),
            "{err:?}"
        );
    }
}
