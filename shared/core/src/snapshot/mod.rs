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
//!
//! The module map, in the order a snapshot is read:
//! - `fast`: the lean pass in front: large reads, pods decoded straight into what
//!   planning reads; whatever it does not handle it hands to the reader.
//! - `reader`: the streaming List reader (serde visitors): one item held at a time,
//!   errors in the order a check of the whole document would give them.
//! - `kind`: what kind an item is (its own `kind`, its typed list's, or its shape) and
//!   how an object is named in messages.
//! - `convert`: Kubernetes object → scheduling view, one file per kind (`pod` with
//!   DaemonSet templates, `node`, `pdb`, `storage`); public, so the engine applies the
//!   same rules to what it lists from the API server.
//! - `error`: [`SnapshotError`], what a message names and how.

use crate::cluster::ClusterSnapshot;

mod convert;
mod error;
mod fast;
mod kind;
mod lean_pod;
mod reader;
#[cfg(test)]
mod tests;

pub use convert::{
    autoscaler_from_k8s, chunk_pod, controller_selector, csi_node_from_k8s, daemonset_from_k8s,
    deployment_from_k8s, node_from_k8s, pdb_from_k8s, pod_from_k8s, pv_from_k8s, pvc_from_k8s,
    replicaset_from_k8s, replicaset_selector, replication_controller_selector, scalable_workload,
    service_from_k8s, statefulset_from_k8s, statefulset_selector, storage_class_from_k8s,
};
pub use error::{ContainerRef, SnapshotError};
pub use lean_pod::LeanPod;

use reader::{ListReader, finish, read_list};

/// The original pass over what the fast one left.
fn resume<R: std::io::Read>(
    stop: fast::Stop<R>,
) -> Result<
    (
        ListReader,
        Option<serde_json::Map<String, serde_json::Value>>,
    ),
    SnapshotError,
> {
    let (so_far, input) = stop.into_input();
    reader::resume(so_far, input)
}

/// Parses `kubectl get pods,nodes,daemonsets,poddisruptionbudgets,pvc,pv,storageclasses,csinodes
/// -A -o json`.
///
/// Accepts a `List` (or a typed list of one of the kinds read, e.g. `PodList`); items of
/// kinds other than Pod, Node, DaemonSet, PodDisruptionBudget, PersistentVolumeClaim,
/// PersistentVolume, StorageClass and CSINode are skipped. Objects keep the order of the
/// items. The storage objects are not kept: they are applied to the pods
/// ([`crate::volumes::apply_volume_topology`]), so a pending pod's required node terms
/// include where its volumes let it run, and a pod whose claim cannot be planned for
/// says why; a pod's EBS volumes and a node's room for them become resources
/// ([`crate::volume_limits`]).
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
