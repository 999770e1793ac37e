//! A cluster that behaves like one over time, for end-to-end tests of the handlers.
//!
//! [`ClusterBehaviour`] runs in the background over an [`EmulatedCluster`] (moto's EC2 and
//! the fake API server) and plays, every `period`, the parts of EKS that nodewright does
//! not: the kubelets, the node lifecycle controller, kube-scheduler, the Deployment
//! controller, pod garbage collection and EC2 reclaiming spot capacity. Without them a
//! test can only check one step of a job; with them it can check that the job finishes:
//! instances equal live claims, every pod runs, no budget was broken.
//!
//! It is a typed model: each round reads the API server's objects into core's domain
//! (`read`: `nodewright_core::cluster::{Node, Pod, PodDisruptionBudget}` through the
//! `snapshot` conversions, NodePools through core's validation), decides on those (core's
//! tolerations, selectors, requests and budget arithmetic; the simulator's binder), and
//! writes what it decided as the wire's JSON (`write`).
//!
//! What each part does, and where it simplifies the real one:
//! - **kubelet** (`kubelet`) — an instance tagged for the cluster, running, without a
//!   Node yet, registers `register_after` after it was first seen: a Node named like its
//!   private DNS name, providerID `aws:///<zone>/<id>`, the labels the kubelet and
//!   Karpenter's user data set (hostname, zone, region, instance type, arch, os, and the
//!   NodePool and NodeClaim from the instance's tags), the taints Karpenter registers
//!   with (`karpenter.sh/unregistered:NoExecute`, the NodePool's taints and startup
//!   taints), allocatable and capacity of its type from the catalog, Ready=False. It
//!   turns Ready `ready_after` later. A kubelet registers once: if its Node is deleted it
//!   does not come back (the real kubelet only registers at start).
//! - **node lifecycle controller** (`kubelet`) — `node.kubernetes.io/not-ready:NoSchedule`
//!   while the node is not Ready (TaintNodesByCondition); when its instance is shutting
//!   down or terminated the node goes Ready=Unknown with `node.kubernetes.io/unreachable`.
//! - **pods of a lost instance** — deleted at once (the real control plane marks them
//!   for deletion only after the node has been unreachable for 5 minutes; the test
//!   cannot wait that long, and what matters is that they are gone and replaced).
//! - **pod GC** (`controllers`) — a pod bound to a Node that no longer exists is deleted
//!   (the real podgc waits a 40 s quarantine first).
//! - **kube-scheduler** (`scheduler`) — binds each pending pod for kube-scheduler where
//!   the engine simulator's binder (`nodewright_engine::sim::binder`) would: every
//!   NoSchedule and NoExecute taint tolerated (kube-scheduler itself does not look at
//!   the Ready condition, the not-ready taint keeps pods off; the condition is checked
//!   too), not cordoned, not being deleted, `nodeSelector` and required node affinity
//!   matched, the pod's requests (cpu, memory, a pod slot, anything else it asks for)
//!   within allocatable minus what the pods bound there request, `DoNotSchedule`
//!   topology spread and required pod (anti-)affinity kept. Among those it picks the
//!   least allocated node (the default scoring, NodeResourcesFit LeastAllocated: free
//!   shares of cpu and memory). Preferences only score in kube-scheduler and are not
//!   modelled. The pod runs at once (phase Running, Ready), which the real kubelet takes
//!   a few seconds for. A pod that fits nowhere is marked PodScheduled=False,
//!   Unschedulable (once).
//! - **Deployment controller** (`controllers`) — every pod that goes (evicted, deleted,
//!   lost) is recreated pending under a new name with the same labels and spec, so the
//!   replica count stays. [`ClusterBehaviour::scale_down`] lowers the replica count
//!   instead: the ReplicaSet controller deletes the pods it names (at once; the real
//!   pods terminate over their grace period) and nothing recreates them.
//! - **PodDisruptionBudgets** (`budgets`) — the fake API server refuses evictions the
//!   budgets do not allow; here every pod that goes is recorded and each budget is
//!   checked after it: fewer healthy pods than the budget requires is a violation.
//! - **EC2** (`ec2`) — [`ClusterBehaviour::kill_at`]: the instance is terminated through
//!   TerminateInstances at that time (a spot reclaim at the end of its two-minute
//!   notice), drained or not; its pods are lost.
//!
//! An object in the API server that does not decode is left out of every decision and
//! named in [`ClusterBehaviour::errors`].

mod budgets;
mod controllers;
mod ec2;
mod kubelet;
mod read;
mod scheduler;
mod write;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::task::JoinHandle;

use k8s_openapi::api::core::v1 as k8s;
use nodewright_aws::testing::{Ec2Client, sdk_config};
use nodewright_core::catalog::Catalog;
use nodewright_core::cluster::Pod;
use nodewright_kube::fake::FakeApiServer;

use crate::emulated::EmulatedCluster;
use ec2::Ec2Instance;
use read::PodObject;

const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";
const TAINT_UNREACHABLE: &str = "node.kubernetes.io/unreachable";
const TAINT_UNREGISTERED: &str = "karpenter.sh/unregistered";

/// How fast the cluster reacts. The defaults are short so a test runs in seconds; a
/// real EKS node takes ~30 s from launch to Ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timings {
    /// From the instance first seen to its kubelet registering the Node (boot).
    pub register_after: Duration,
    /// From registration to the Ready condition (the CNI is up).
    pub ready_after: Duration,
    /// How often the kubelets, the controllers and the scheduler act.
    pub period: Duration,
    /// How often EC2 is asked about the instances (moto is slow, and shared by the
    /// tests running in parallel).
    pub ec2_period: Duration,
}

impl Default for Timings {
    fn default() -> Self {
        Timings {
            register_after: Duration::from_secs(2),
            ready_after: Duration::from_secs(1),
            period: Duration::from_millis(100),
            ec2_period: Duration::from_millis(500),
        }
    }
}

/// One instance as the cluster saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceLife {
    pub id: String,
    pub first_seen: Instant,
    /// Its Node's name, once registered.
    pub node: Option<String>,
    pub registered_at: Option<Instant>,
    pub ready_at: Option<Instant>,
    /// When it was first seen shutting down, stopped or terminated.
    pub gone_at: Option<Instant>,
    /// EC2 reclaimed it ([`ClusterBehaviour::kill_at`]); nobody else terminated it first.
    pub killed: bool,
}

impl InstanceLife {
    fn new(id: &str, now: Instant) -> Self {
        InstanceLife {
            id: id.to_string(),
            first_seen: now,
            node: None,
            registered_at: None,
            ready_at: None,
            gone_at: None,
            killed: false,
        }
    }
}

/// Why a pod went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GoneBy {
    /// Evicted or deleted through the API (by nodewright).
    Api,
    /// Deleted by the ReplicaSet controller when its Deployment was scaled down
    /// ([`ClusterBehaviour::scale_down`]): not recreated, not a disruption.
    ScaledDown,
    /// Its instance shut down or was terminated under it.
    InstanceLost(String),
    /// Its Node was deleted while it was bound there (pod GC).
    NodeDeleted(String),
}

/// One pod over its life (a recreated pod is a new life with a new name).
#[derive(Debug, Clone, PartialEq)]
pub struct PodLife {
    /// namespace/name
    pub key: String,
    pub uid: String,
    /// When it was created by the Deployment controller, or first seen.
    pub first_seen: Instant,
    pub bound_at: Option<Instant>,
    pub node: Option<String>,
    pub gone: Option<(Instant, GoneBy)>,
    /// The pod as first seen: what the Deployment controller recreates it from.
    template: Template,
}

/// A pod as first seen: core's view of it (its labels select it for budgets; a
/// DaemonSet's or a finished pod is not recreated) and the spec to recreate it with.
#[derive(Debug, Clone, PartialEq)]
struct Template {
    pod: Pod,
    spec: k8s::PodSpec,
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

    fn first_seen(object: PodObject, now: Instant) -> PodLife {
        PodLife {
            key: object.pod.key(),
            uid: object.uid,
            first_seen: now,
            bound_at: None,
            node: object.pod.node_name.clone(),
            gone: None,
            template: Template {
                pod: object.pod,
                spec: object.spec,
            },
        }
    }
}

#[derive(Default)]
struct Record {
    instances: BTreeMap<String, InstanceLife>,
    /// By uid.
    pods: BTreeMap<String, PodLife>,
    kills: Vec<(String, Instant)>,
    /// (old pod, its replacement).
    recreated: Vec<(String, String)>,
    violations: Vec<String>,
    /// Failed calls to moto (a step was skipped) and objects that did not decode (left
    /// out).
    errors: Vec<String>,
    next_pod: u64,
    /// While set, no node turns Ready ([`ClusterBehaviour::hold_ready`]).
    hold_ready: bool,
    /// The last DescribeInstances, and when.
    described: Option<(Instant, Vec<Ec2Instance>)>,
}

/// Everything the background task and the accessors share.
struct Shared {
    api: Arc<FakeApiServer>,
    ec2: Ec2Client,
    cluster: String,
    timings: Timings,
    record: Mutex<Record>,
}

/// The cluster's own behaviour, running in the background until dropped (or
/// [`stop`](ClusterBehaviour::stop)ped). See the module documentation.
pub struct ClusterBehaviour {
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl Drop for ClusterBehaviour {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ClusterBehaviour {
    /// Starts behaving over `world` (pods already in the API server are seen as
    /// created now).
    pub async fn start(world: &EmulatedCluster, timings: Timings) -> ClusterBehaviour {
        let shared = Arc::new(Shared {
            api: world.api.clone(),
            ec2: Ec2Client::new(&sdk_config(&world.url).await),
            cluster: world.cluster.clone(),
            timings,
            record: Mutex::default(),
        });
        // The pods the test put are "created" now, not at the first step.
        shared.api.with_store(|store| {
            controllers::observe_pods(store, &mut shared.lock(), Instant::now());
        });
        let behaving = shared.clone();
        let task = tokio::spawn(async move {
            let mut every = tokio::time::interval(behaving.timings.period);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                behaving.step().await;
            }
        });
        ClusterBehaviour { shared, task }
    }

    /// Stops behaving: nothing registers, binds or is recreated any more.
    pub fn stop(&self) {
        self.task.abort();
    }

    /// While `hold` is set, registered nodes stay NotReady (a slow CNI); once released,
    /// a node whose `ready_after` has passed turns Ready at the next round. Lets a test
    /// reach a state at a step it chooses.
    pub fn hold_ready(&self, hold: bool) {
        self.shared.lock().hold_ready = hold;
    }

    /// EC2 takes `instance_id` back at `at` (TerminateInstances), whatever its state.
    pub fn kill_at(&self, instance_id: &str, at: Instant) {
        self.shared.lock().kills.push((instance_id.to_string(), at));
    }

    /// Instances EC2 reclaimed through [`kill_at`](Self::kill_at) before anyone else
    /// terminated them.
    pub fn killed(&self) -> Vec<String> {
        self.instances()
            .into_iter()
            .filter(|i| i.killed)
            .map(|i| i.id)
            .collect()
    }

    /// Every instance of the cluster seen so far.
    pub fn instances(&self) -> Vec<InstanceLife> {
        self.shared.lock().instances.values().cloned().collect()
    }

    pub fn instance(&self, id: &str) -> Option<InstanceLife> {
        self.shared.lock().instances.get(id).cloned()
    }

    /// Every pod seen so far, gone ones included.
    pub fn pods(&self) -> Vec<PodLife> {
        self.shared.lock().pods.values().cloned().collect()
    }

    /// Pods in the API server now, unbound and not finished ("namespace/name").
    pub fn pending_pods(&self) -> Vec<String> {
        self.pods_now()
            .into_iter()
            .filter(|p| p.pod.node_name.is_none() && !p.pod.terminal)
            .map(|p| p.pod.key())
            .collect()
    }

    /// Pods in the API server now: ("namespace/name", its node, its phase).
    pub fn placements(&self) -> Vec<(String, Option<String>, String)> {
        self.pods_now()
            .into_iter()
            .map(|p| (p.pod.key(), p.pod.node_name, p.phase))
            .collect()
    }

    /// The Nodes in the API server now, as stored (for a test's failure message).
    pub fn nodes(&self) -> Vec<Value> {
        self.shared.api.list("Node")
    }

    /// The longest any pod waited for a node (still pending ones count until now).
    pub fn max_pending(&self) -> Duration {
        let now = Instant::now();
        self.pods()
            .iter()
            .map(|p| p.pending_for(now))
            .max()
            .unwrap_or_default()
    }

    /// (pod, node, how long it waited) for every pod that was bound.
    pub fn bind_times(&self) -> Vec<(String, String, Duration)> {
        self.pods()
            .into_iter()
            .filter_map(|p| {
                let bound = p.bound_at?;
                Some((
                    p.key.clone(),
                    p.node.clone()?,
                    bound.saturating_duration_since(p.first_seen),
                ))
            })
            .collect()
    }

    /// Every moment a PodDisruptionBudget had fewer healthy pods than it requires
    /// because a pod went, described.
    pub fn violations(&self) -> Vec<String> {
        self.shared.lock().violations.clone()
    }

    /// (old pod, its replacement) for every pod the Deployment controller recreated.
    pub fn recreated(&self) -> Vec<(String, String)> {
        self.shared.lock().recreated.clone()
    }

    /// Pods that went with their instance or node rather than through the API.
    pub fn lost(&self) -> Vec<(String, GoneBy)> {
        self.pods()
            .into_iter()
            .filter_map(|p| match p.gone {
                Some((_, by @ (GoneBy::InstanceLost(_) | GoneBy::NodeDeleted(_)))) => {
                    Some((p.key, by))
                }
                _ => None,
            })
            .collect()
    }

    /// Their Deployment is scaled down by these pods ("namespace/name"): the
    /// ReplicaSet controller deletes them through the API and the Deployment
    /// controller does not recreate them, now or later. Budgets do not govern a
    /// scale-down (it is no eviction), so it is no violation either. Panics on a pod
    /// that is not in the API server.
    pub fn scale_down(&self, pods: &[&str]) {
        let now = Instant::now();
        self.shared.api.with_store(|store| {
            // Store first, then the record (as a round): deleted and recorded at once,
            // so the next round never sees these pods go and recreates them.
            controllers::scale_down(store, &mut self.shared.lock(), pods, now);
        });
    }

    /// Calls to moto that failed (the step was skipped), and objects in the API server
    /// that did not decode (left out): to explain a test that stalls.
    pub fn errors(&self) -> Vec<String> {
        self.shared.lock().errors.clone()
    }

    /// The pods in the API server now, typed (those that do not decode are the
    /// rounds' to report).
    fn pods_now(&self) -> Vec<PodObject> {
        self.shared
            .api
            .with_store(|store| read::pods(store, &mut Vec::new()))
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Record> {
        self.record.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One round of everything. The API server's objects are locked for the whole of
    /// the Kubernetes part, so nodewright sees either none or all of a round's changes.
    async fn step(&self) {
        let reclaimed = self.reclaim_due().await;
        let fresh = self
            .lock()
            .described
            .as_ref()
            .is_some_and(|(at, _)| at.elapsed() < self.timings.ec2_period);
        if reclaimed || !fresh {
            match ec2::describe(&self.ec2, &self.cluster).await {
                Ok(instances) => self.lock().described = Some((Instant::now(), instances)),
                Err(e) => {
                    self.lock().errors.push(format!("DescribeInstances: {e}"));
                    return;
                }
            }
        }
        let instances = self
            .lock()
            .described
            .as_ref()
            .map(|(_, i)| i.clone())
            .unwrap_or_default();
        let now = Instant::now();
        let catalog = Catalog::embedded();
        self.api.with_store(|store| {
            // Store first, then the record: the accessors never hold the record while
            // reaching for the store.
            let mut record = self.lock();
            let mut gone = controllers::observe_pods(store, &mut record, now);
            gone.extend(kubelet::kubelets(
                store,
                &mut record,
                &instances,
                catalog,
                self.timings,
                now,
            ));
            gone.extend(controllers::collect_orphans(store, &mut record, now));
            controllers::recreate(store, &mut record, &gone, now);
            budgets::check_budgets(store, &mut record, &gone);
            scheduler::schedule(store, &mut record, now);
        });
    }

    /// EC2 reclaims the instances whose time has come. True when it did.
    async fn reclaim_due(&self) -> bool {
        let now = Instant::now();
        let due: Vec<String> = {
            let mut record = self.lock();
            let (due, later): (Vec<_>, Vec<_>) =
                record.kills.drain(..).partition(|(_, at)| *at <= now);
            record.kills = later;
            due.into_iter().map(|(id, _)| id).collect()
        };
        if due.is_empty() {
            return false;
        }
        // Only instances still up are reclaimed by EC2; one already terminated by
        // nodewright is not "killed".
        let up = match ec2::describe(&self.ec2, &self.cluster).await {
            Ok(all) => all,
            Err(e) => {
                self.lock().errors.push(format!("DescribeInstances: {e}"));
                return false;
            }
        };
        let alive: Vec<String> = due
            .into_iter()
            .filter(|id| up.iter().any(|i| &i.id == id && !i.is_gone()))
            .collect();
        if alive.is_empty() {
            return false;
        }
        match self
            .ec2
            .terminate_instances()
            .set_instance_ids(Some(alive.clone()))
            .send()
            .await
        {
            Ok(_) => {
                let mut record = self.lock();
                for id in alive {
                    let life = record
                        .instances
                        .entry(id.clone())
                        .or_insert_with(|| InstanceLife::new(&id, now));
                    life.killed = true;
                }
                true
            }
            Err(e) => {
                self.lock().errors.push(format!("TerminateInstances: {e}"));
                false
            }
        }
    }
}

#[cfg(test)]
mod tests;
