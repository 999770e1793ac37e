//! The cloud around the cluster: EC2 taking instances back at their time (a spot
//! reclaim two minutes after its notice, a scheduled retirement), drained or not, and
//! the AWS cloud controller manager deleting the Node of an instance EC2 no longer has.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

/// The instances EC2 takes back, and when.
#[derive(Debug, Clone, Default)]
pub struct Reclaims {
    due: BTreeMap<String, Duration>,
}

impl Reclaims {
    /// EC2 takes `instance` at `at`, whatever state its drain is in (a later time for
    /// the same instance replaces the earlier).
    pub fn take_at(&mut self, instance: &str, at: Duration) {
        self.due.insert(instance.to_string(), at);
    }

    /// The instances whose time has come by `now`, by id; they are not returned again.
    /// The harness terminates those still up (one terminated already is nobody's loss).
    pub fn due(&mut self, now: Duration) -> Vec<String> {
        let (due, later): (BTreeMap<_, _>, BTreeMap<_, _>) = std::mem::take(&mut self.due)
            .into_iter()
            .partition(|(_, at)| *at <= now);
        self.due = later;
        due.into_keys().collect()
    }

    /// Whether anything is still to be taken.
    pub fn is_empty(&self) -> bool {
        self.due.is_empty()
    }
}

/// A Node as the cloud controller manager looks at it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeSeen<'a> {
    pub name: &'a str,
    pub ready: bool,
    /// Its deletion has begun (a `deletionTimestamp`).
    pub being_deleted: bool,
    /// The EC2 instance its providerID names.
    pub instance: Option<&'a str>,
}

/// The cloud controller manager's node lifecycle controller: a Node that is not Ready
/// and not already being deleted, whose instance EC2 reports terminated, is deleted.
/// (It looks only at nodes that are not Ready, as the real one does, so a node whose
/// owner deletes it right after terminating its instance is its owner's to delete.)
pub fn nodes_the_cloud_deletes<'a>(
    nodes: &[NodeSeen<'a>],
    terminated: &HashSet<&str>,
) -> Vec<&'a str> {
    nodes
        .iter()
        .filter(|n| !n.ready && !n.being_deleted)
        .filter(|n| n.instance.is_some_and(|i| terminated.contains(i)))
        .map(|n| n.name)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instance_is_taken_once_its_time_comes_and_only_once() {
        let mut r = Reclaims::default();
        r.take_at("i-2", Duration::from_secs(20));
        r.take_at("i-1", Duration::from_secs(10));
        assert!(r.due(Duration::from_secs(9)).is_empty());
        assert_eq!(r.due(Duration::from_secs(10)), ["i-1"]);
        assert_eq!(r.due(Duration::from_secs(30)), ["i-2"]);
        assert!(r.due(Duration::from_secs(40)).is_empty());
        assert!(r.is_empty());
    }

    #[test]
    fn only_a_not_ready_node_of_a_terminated_instance_is_deleted_by_the_cloud() {
        let node = |name, ready, being_deleted, instance| NodeSeen {
            name,
            ready,
            being_deleted,
            instance: Some(instance),
        };
        let nodes = [
            node("lost", false, false, "i-1"),
            node("ready", true, false, "i-2"),
            node("deleting", false, true, "i-3"),
            node("running", false, false, "i-4"),
        ];
        let terminated = HashSet::from(["i-1", "i-2", "i-3"]);
        assert_eq!(nodes_the_cloud_deletes(&nodes, &terminated), ["lost"]);
    }
}
