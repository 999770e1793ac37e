//! Why a snapshot, or one object of it, cannot be read: the one error type of the reader
//! and the conversions, and the small renderers that make its messages name the object,
//! the container and the field path.

use std::fmt;

use crate::resources::QuantityError;

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

pub(super) type Result<T, E = SnapshotError> = std::result::Result<T, E>;
