//! The pods' side of the control plane: what went and why, pod garbage collection, and
//! the Deployment (ReplicaSet) controller recreating what went or deleting what a
//! scale-down names.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use nodewright_kube::fake::Store;

use super::read::{self, PodObject};
use super::{GoneBy, PodLife, Record, write};

/// Records pods that appeared (created by the test) and pods that went through the API
/// since the last round. Returns the uids of the pods that went.
pub(super) fn observe_pods(store: &Store, record: &mut Record, now: Instant) -> Vec<String> {
    let current: HashMap<String, PodObject> = read::pods(store, &mut record.errors)
        .into_iter()
        .map(|p| (p.uid.clone(), p))
        .collect();
    let mut gone = Vec::new();
    for life in record.pods.values_mut().filter(|l| l.gone.is_none()) {
        if !current.contains_key(&life.uid) {
            life.gone = Some((now, GoneBy::Api));
            gone.push(life.uid.clone());
        }
    }
    for (uid, pod) in current {
        record
            .pods
            .entry(uid)
            .or_insert_with(|| PodLife::first_seen(pod, now));
    }
    gone
}

/// Deletes the pods bound to `node`, recording why. Returns their uids.
pub(super) fn remove_pods_on(
    store: &mut Store,
    record: &mut Record,
    node: &str,
    by: GoneBy,
    now: Instant,
) -> Vec<String> {
    let on_node: Vec<PodObject> = read::pods(store, &mut record.errors)
        .into_iter()
        .filter(|p| p.pod.node_name.as_deref() == Some(node))
        .collect();
    let mut removed = Vec::new();
    for pod in on_node {
        write::remove_pod(store, &pod.pod);
        if let Some(life) = record.pods.get_mut(&pod.uid) {
            life.gone = Some((now, by.clone()));
        }
        removed.push(pod.uid);
    }
    removed
}

/// Pod GC: pods bound to a Node that does not exist are deleted.
pub(super) fn collect_orphans(store: &mut Store, record: &mut Record, now: Instant) -> Vec<String> {
    let nodes: HashSet<String> = read::nodes(store, &mut record.errors)
        .into_iter()
        .map(|n| n.name)
        .collect();
    let mut orphaned: Vec<String> = Vec::new();
    for pod in read::pods(store, &mut record.errors) {
        if let Some(node) = pod.pod.node_name
            && !nodes.contains(&node)
            && !orphaned.contains(&node)
        {
            orphaned.push(node);
        }
    }
    let mut removed = Vec::new();
    for node in orphaned {
        removed.extend(remove_pods_on(
            store,
            record,
            &node,
            GoneBy::NodeDeleted(node.clone()),
            now,
        ));
    }
    removed
}

/// The Deployment controller: each pod that went comes back pending under a new name
/// (`<app label or old name>-rNNNN`), with the same labels and spec.
pub(super) fn recreate(store: &mut Store, record: &mut Record, gone: &[String], now: Instant) {
    for went in gone {
        let Some(life) = record.pods.get(went) else {
            continue;
        };
        let template = &life.template;
        if template.pod.daemonset_owned || template.pod.terminal {
            continue;
        }
        let old_key = life.key.clone();
        let base = template
            .pod
            .labels
            .get("app")
            .cloned()
            .unwrap_or_else(|| template.pod.name.clone());
        record.next_pod += 1;
        let name = format!("{base}-r{:04}", record.next_pod);
        let stored = write::create_pod(
            store,
            &name,
            &template.pod.namespace,
            &template.pod.labels,
            template.spec.clone(),
        );
        let Some(created) = read::noted(PodObject::decode(&stored), &mut record.errors) else {
            continue;
        };
        let new = PodLife::first_seen(created, now);
        record.recreated.push((old_key, new.key.clone()));
        record.pods.insert(new.uid.clone(), new);
    }
}

/// The ReplicaSet controller after a scale-down: these pods ("namespace/name") are
/// deleted and recorded as gone by [`GoneBy::ScaledDown`], so no round sees them go
/// and recreates them. Panics on a pod that is not in the API server.
pub(super) fn scale_down(store: &mut Store, record: &mut Record, pods: &[&str], now: Instant) {
    for key in pods {
        let (namespace, name) = key
            .split_once('/')
            .unwrap_or_else(|| panic!("{key}: not namespace/name"));
        let removed = store
            .remove("Pod", Some(namespace), name)
            .unwrap_or_else(|| panic!("scale down: no pod {key}"));
        let Some(pod) = read::noted(PodObject::decode(&removed), &mut record.errors) else {
            continue;
        };
        let life = record
            .pods
            .entry(pod.uid.clone())
            .or_insert_with(|| PodLife::first_seen(pod, now));
        life.gone = Some((now, GoneBy::ScaledDown));
    }
}
