//! The pods as they come and go, watched from the API server, and every
//! PodDisruptionBudget checked each time a bound pod goes: an independent check of what
//! the real eviction API enforces, which also catches a budget broken by a deletion.
//!
//! A pod *goes* the moment it is seen being deleted (its `deletionTimestamp` set) or
//! seen deleted, whichever is first; why is read from its `DisruptionTarget` condition,
//! which the eviction API, podgc and the taint eviction controller set before they
//! delete (a plain deletion, by nodewright or by a ReplicaSet scaling down, sets none).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1 as k8s;
use kube::Api;
use kube::runtime::watcher::{self, Event};
use serde_json::Value;
use tokio::sync::oneshot;

use nodewright_kube::testing::{ControlPlane, objects};

/// Why a pod went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GoneBy {
    /// Through the eviction API (which only lets a pod go when its budgets allow it).
    Evicted,
    /// Deleted through the API without an eviction: by nodewright (a drain past its
    /// deadline, an instance gone) or by its ReplicaSet on a scale-down.
    Deleted,
    /// Evicted by the taint eviction controller off this node, unreachable or not ready
    /// for longer than the pod tolerates.
    NodeLost(String),
    /// Collected by podgc: this node was deleted under it.
    NodeDeleted(String),
}

/// One pod over its life (a pod its ReplicaSet creates to replace it is a new life).
#[derive(Debug, Clone, PartialEq)]
pub struct PodLife {
    /// namespace/name
    pub key: String,
    pub uid: String,
    /// A DaemonSet's pod (one per node, goes with its node).
    pub daemon: bool,
    /// When the observer first saw it (created, or there when the behaviour started).
    pub first_seen: Instant,
    pub bound_at: Option<Instant>,
    pub node: Option<String>,
    /// When it was first seen Ready.
    pub ready_at: Option<Instant>,
    pub gone: Option<(Instant, GoneBy)>,
}

impl PodLife {
    /// How long it waited for a node: until bound, until it went, or until now.
    pub fn pending_for(&self, now: Instant) -> Duration {
        let end = self
            .bound_at
            .or(self.gone.as_ref().map(|(at, _)| *at))
            .unwrap_or(now);
        end.saturating_duration_since(self.first_seen)
    }
}

/// What the observer saw.
#[derive(Default)]
pub(super) struct Observed {
    /// By uid, gone ones included.
    pub lives: BTreeMap<String, PodLife>,
    /// The pods in the API server now, by uid.
    pub live: BTreeMap<String, k8s::Pod>,
    pub violations: Vec<String>,
    pub errors: Vec<String>,
}

pub(super) type Shared = Arc<Mutex<Observed>>;

pub(super) fn lock(shared: &Shared) -> MutexGuard<'_, Observed> {
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

/// Watches every pod until the task is aborted; `listed` fires once the first list is
/// in (the pods there are first seen then).
pub(super) async fn observe(api: Arc<ControlPlane>, shared: Shared, listed: oneshot::Sender<()>) {
    let pods: Api<k8s::Pod> = Api::all(api.admin().clone());
    // Under the client's 30 s read timeout: a quiet watch ends and is resumed, never cut.
    let config = watcher::Config::default().timeout(25);
    let mut stream = watcher::watcher(pods, config).boxed();
    let mut listed = Some(listed);
    let mut relisted: BTreeSet<String> = BTreeSet::new();
    while let Some(event) = stream.next().await {
        let event = match event {
            Ok(event) => event,
            Err(e) => {
                lock(&shared).errors.push(format!("watching pods: {e}"));
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let went = match event {
            Event::Init => {
                relisted.clear();
                Vec::new()
            }
            Event::InitApply(pod) => {
                relisted.insert(uid_of(&pod));
                seen(&mut lock(&shared), pod)
            }
            Event::InitDone => {
                if let Some(listed) = listed.take() {
                    let _ = listed.send(());
                }
                // What the relist no longer has went while the watch was down.
                let mut observed = lock(&shared);
                let missing: Vec<String> = observed
                    .live
                    .keys()
                    .filter(|uid| !relisted.contains(*uid))
                    .cloned()
                    .collect();
                missing
                    .into_iter()
                    .filter_map(|uid| deleted(&mut observed, &uid))
                    .collect()
            }
            Event::Apply(pod) => seen(&mut lock(&shared), pod),
            Event::Delete(pod) => {
                let uid = uid_of(&pod);
                let mut observed = lock(&shared);
                let mut went = seen(&mut observed, pod);
                went.extend(deleted(&mut observed, &uid));
                went
            }
        };
        for pod in went {
            check_budgets(&api, &shared, &pod).await;
        }
    }
}

fn uid_of(pod: &k8s::Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

fn key_of(pod: &k8s::Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The pod as now seen. Returns it if it just went (being deleted).
fn seen(observed: &mut Observed, pod: k8s::Pod) -> Vec<k8s::Pod> {
    let now = Instant::now();
    let uid = uid_of(&pod);
    let life = observed
        .lives
        .entry(uid.clone())
        .or_insert_with(|| PodLife {
            key: key_of(&pod),
            uid: uid.clone(),
            daemon: is_daemon(&pod),
            first_seen: now,
            bound_at: None,
            node: None,
            ready_at: None,
            gone: None,
        });
    let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
    if node.is_some() && life.bound_at.is_none() {
        life.bound_at = Some(now);
        life.node = node;
    }
    if is_ready(&pod) && life.ready_at.is_none() {
        life.ready_at = Some(now);
    }
    let mut went = Vec::new();
    if pod.metadata.deletion_timestamp.is_some() && life.gone.is_none() {
        life.gone = Some((now, gone_by(&pod)));
        went.push(pod.clone());
    }
    observed.live.insert(uid, pod);
    went
}

/// The pod is no longer in the API server. Returns it as last seen if that is when it
/// went.
fn deleted(observed: &mut Observed, uid: &str) -> Option<k8s::Pod> {
    let pod = observed.live.remove(uid)?;
    let life = observed.lives.get_mut(uid)?;
    if life.gone.is_some() {
        return None;
    }
    life.gone = Some((Instant::now(), gone_by(&pod)));
    Some(pod)
}

fn condition<'a>(pod: &'a k8s::Pod, type_: &str) -> Option<&'a k8s::PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// Owned by a DaemonSet.
pub(super) fn is_daemon(pod: &k8s::Pod) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "DaemonSet" && o.controller == Some(true))
}

pub(super) fn is_ready(pod: &k8s::Pod) -> bool {
    condition(pod, "Ready").is_some_and(|c| c.status == "True")
}

fn gone_by(pod: &k8s::Pod) -> GoneBy {
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default();
    let reason = condition(pod, "DisruptionTarget")
        .filter(|c| c.status == "True")
        .and_then(|c| c.reason.as_deref());
    match reason {
        Some("EvictionByEvictionAPI") => GoneBy::Evicted,
        Some("DeletionByTaintManager") => GoneBy::NodeLost(node),
        Some("DeletionByPodGC") => GoneBy::NodeDeleted(node),
        _ => GoneBy::Deleted,
    }
}

/// After `pod` went: each budget of its namespace that selects it, if it was bound,
/// must still have as many healthy pods as it requires.
async fn check_budgets(api: &ControlPlane, shared: &Shared, pod: &k8s::Pod) {
    let (life, pods) = {
        let observed = lock(shared);
        let Some(life) = observed.lives.get(&uid_of(pod)).cloned() else {
            return;
        };
        (life, observed.live.values().cloned().collect::<Vec<_>>())
    };
    if life.node.is_none() {
        return;
    }
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let (budgets, sets) = match tokio::join!(
        objects::list(api.admin(), "PodDisruptionBudget"),
        objects::list(api.admin(), "ReplicaSet")
    ) {
        (Ok(budgets), Ok(sets)) => (budgets, sets),
        (Err(e), _) | (_, Err(e)) => {
            lock(shared)
                .errors
                .push(format!("checking the budgets after {}: {e}", life.key));
            return;
        }
    };
    let pods: Vec<Value> = pods
        .iter()
        .filter_map(|p| serde_json::to_value(p).ok())
        .collect();
    let mut found = Vec::new();
    for budget in &budgets {
        if budget["metadata"]["namespace"].as_str() != Some(namespace.as_str())
            || !selects(&budget["spec"]["selector"], &labels)
        {
            continue;
        }
        let count = count(budget, &pods, &sets);
        if count.healthy < count.desired {
            found.push(format!(
                "PodDisruptionBudget {namespace}/{}: {} healthy of {}, {} required, after {} went ({:?})",
                budget["metadata"]["name"].as_str().unwrap_or_default(),
                count.healthy,
                count.expected,
                count.desired,
                life.key,
                life.gone.as_ref().map(|(_, by)| by.clone())
            ));
        }
    }
    lock(shared).violations.extend(found);
}

/// A budget's arithmetic as the disruption controller does it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Count {
    /// Selected pods bound, Ready and not being deleted.
    pub healthy: i64,
    /// The scale of the controllers of the selected pods (a ReplicaSet's replicas),
    /// plus one for each selected pod without one that is not being deleted.
    pub expected: i64,
    /// minAvailable (a percentage of expected, rounded up), or expected − maxUnavailable
    /// (rounded up), or expected when neither is set.
    pub desired: i64,
}

pub(super) fn count(budget: &Value, pods: &[Value], replica_sets: &[Value]) -> Count {
    let namespace = &budget["metadata"]["namespace"];
    let selected: Vec<&Value> = pods
        .iter()
        .filter(|p| p["metadata"]["namespace"] == *namespace)
        .filter(|p| !matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed")))
        .filter(|p| selects(&budget["spec"]["selector"], &labels_of(p)))
        .collect();
    let deleting = |p: &Value| !p["metadata"]["deletionTimestamp"].is_null();
    let healthy = selected
        .iter()
        .filter(|p| !deleting(p) && p["spec"]["nodeName"].is_string())
        .filter(|p| {
            p["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
        .count() as i64;
    let mut owners: BTreeSet<String> = BTreeSet::new();
    let mut expected = 0;
    for pod in &selected {
        let owner = pod["metadata"]["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|o| o["controller"] == true && o["kind"] == "ReplicaSet")
            .and_then(|o| o["name"].as_str());
        match owner {
            // Each ReplicaSet's scale counts once.
            Some(owner) if owners.insert(owner.to_string()) => {
                expected += replica_sets
                    .iter()
                    .find(|rs| {
                        rs["metadata"]["namespace"] == *namespace && rs["metadata"]["name"] == owner
                    })
                    .and_then(|rs| rs["spec"]["replicas"].as_i64())
                    .unwrap_or(0);
            }
            Some(_) => {}
            None if !deleting(pod) => expected += 1,
            None => {}
        }
    }
    let spec = &budget["spec"];
    let desired = if !spec["minAvailable"].is_null() {
        scaled_up(&spec["minAvailable"], expected)
    } else if !spec["maxUnavailable"].is_null() {
        expected - scaled_up(&spec["maxUnavailable"], expected)
    } else {
        expected
    };
    Count {
        healthy,
        expected,
        desired,
    }
}

/// An IntOrString of a budget: an integer, or a percentage of `of` rounded up.
fn scaled_up(value: &Value, of: i64) -> i64 {
    match value {
        Value::Number(n) => n.as_i64().unwrap_or(0),
        Value::String(s) => match s.strip_suffix('%').and_then(|p| p.parse::<i64>().ok()) {
            Some(percent) => (of * percent + 99) / 100,
            None => s.parse().unwrap_or(0),
        },
        _ => 0,
    }
}

fn labels_of(pod: &Value) -> BTreeMap<String, String> {
    pod["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect()
}

/// A `metav1.LabelSelector` over `labels` (policy/v1: an empty selector selects every
/// pod of the namespace, a missing one none).
pub(super) fn selects(selector: &Value, labels: &BTreeMap<String, String>) -> bool {
    if selector.is_null() {
        return false;
    }
    let matches_labels = selector["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| labels.get(k).map(String::as_str) == v.as_str());
    let matches_expressions = selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .all(|e| {
            let key = e["key"].as_str().unwrap_or_default();
            let values: Vec<&str> = e["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let value = labels.get(key).map(String::as_str);
            match e["operator"].as_str() {
                Some("In") => value.is_some_and(|v| values.contains(&v)),
                Some("NotIn") => value.is_none_or(|v| !values.contains(&v)),
                Some("Exists") => value.is_some(),
                Some("DoesNotExist") => value.is_none(),
                _ => false,
            }
        });
    matches_labels && matches_expressions
}
