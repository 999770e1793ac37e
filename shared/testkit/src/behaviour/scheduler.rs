//! kube-scheduler: every pending pod bound where the simulator's binder
//! (`nodewright_engine::sim::binder`) puts it, scored as kube-scheduler's default, or
//! marked Unschedulable.

use std::time::Instant;

use nodewright_core::cluster::{Node, Pod};
use nodewright_engine::sim::binder::{Binder, Scoring};
use nodewright_kube::fake::Store;

use super::read::{self, PodObject};
use super::{Record, write};

/// Binds every pending pod it can, oldest first (by when the behaviour first saw it);
/// marks the others Unschedulable (binding replaces the status, and with it the mark).
pub(super) fn schedule(store: &mut Store, record: &mut Record, now: Instant) {
    let pods = read::pods(store, &mut record.errors);
    // A node being deleted takes no new pods (the binder looks at Ready and cordons).
    let nodes: Vec<Node> = read::nodes(store, &mut record.errors)
        .into_iter()
        .filter(|n| !n.deleting)
        .collect();
    let bound: Vec<Pod> = pods.iter().map(|p| p.pod.clone()).collect();
    let mut binder = Binder::over(&nodes, &bound, Scoring::LeastAllocated);
    let mut pending: Vec<&PodObject> = pods.iter().filter(|p| for_kube_scheduler(&p.pod)).collect();
    pending.sort_by_cached_key(|p| {
        let first_seen = record.pods.get(&p.uid).map(|l| l.first_seen);
        (first_seen, p.pod.key())
    });
    for p in pending {
        let Some(node) = binder.place(&p.pod) else {
            // Written once; the real one updates the message on later attempts.
            if !p.pod.marked_unschedulable {
                write::mark_unschedulable(store, &p.pod);
            }
            continue;
        };
        write::bind(store, &p.pod, &node);
        if let Some(life) = record.pods.get_mut(&p.uid) {
            life.bound_at = Some(now);
            life.node = Some(node);
        }
    }
}

/// Unbound, not finished, not being deleted, and for kube-scheduler (pods naming
/// another scheduler are that scheduler's).
fn for_kube_scheduler(pod: &Pod) -> bool {
    pod.node_name.is_none() && !pod.terminal && !pod.terminating && pod.scheduler_name.is_none()
}
