//! What EKS does outside Kubernetes, and what nodewright does not do, over a real
//! control plane: with it a test checks where a job *ends* (instances equal live
//! claims, every pod runs, no budget broken), not one step of it.
//!
//! Everything Kubernetes does is the real control plane's ([`EmulatedCluster::api`]):
//! kube-scheduler marks pods Unschedulable and binds them; the Deployment and
//! ReplicaSet controllers keep the replicas (recreating what goes, deleting what a
//! scale-down asks for); the eviction API and the disruption controller keep the
//! PodDisruptionBudgets; the node lifecycle controller taints nodes not ready and marks
//! them unreachable when their kubelet stops; the taint eviction controller and podgc
//! take pods off lost and deleted nodes; KWOK is the kubelet of every node that has
//! joined (Ready, its lease renewed, its pods Running and Ready, deletions confirmed).
//!
//! [`ClusterBehaviour`] adds, every `period`, what is outside Kubernetes, as the
//! simulator models it ([`nodewright_sim::eks`]: the same steps, whose writes are
//! carried out here on moto and the control plane):
//! - **an instance joining** (`kubelet`) — an instance EC2 (moto) runs for the cluster
//!   registers its Node `register_after` after it was first seen, as the kubelet and
//!   Karpenter's user data do (name, providerID, labels, taints, allocatable, Ready=False),
//!   and its kubelet finishes booting `ready_after` later: KWOK takes the node and turns
//!   it Ready;
//! - **EC2 taking an instance back** (`cloud`) — [`ClusterBehaviour::kill_at`]: the
//!   instance is terminated in moto at that time, drained or not; a kubelet whose
//!   instance shut down stops (the node goes unreachable); and as the AWS cloud
//!   controller manager does, a node that is not Ready and whose instance EC2 reports
//!   terminated is deleted ([`ClusterBehaviour::deleted_by_cloud`]);
//! - **an observer** (`observer`) — every pod's life (created, bound, Ready, gone and
//!   why), and each PodDisruptionBudget checked every time a bound pod goes
//!   ([`ClusterBehaviour::violations`]).
//!
//! A failed call (to moto or the API server) skips that part of the round and is named
//! in [`ClusterBehaviour::errors`].

mod cloud;
mod ec2;
mod kubelet;
mod observer;

pub use observer::{GoneBy, PodLife};

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::task::JoinHandle;

use nodewright_aws::testing::{Ec2Client, sdk_config};
use nodewright_core::catalog::Catalog;
use nodewright_kube::testing::{ControlPlane, objects};
use nodewright_sim::eks::{KubeletWrite, Kubelets, Reclaims};

use crate::emulated::EmulatedCluster;
use crate::wait_until;
use ec2::Ec2Instance;

/// How fast the cluster reacts. The defaults are short so a test runs in seconds; a
/// real EKS node takes ~30 s from launch to Ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timings {
    /// From the instance first seen to its kubelet registering the Node (boot).
    pub register_after: Duration,
    /// From registration to the kubelet handing the node to KWOK (the CNI is up);
    /// KWOK turns it Ready within a quarter of its lease duration (2 s).
    pub ready_after: Duration,
    /// How often the kubelets and the cloud act.
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
            period: Duration::from_millis(200),
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
    /// When its kubelet handed the node to KWOK.
    pub booted_at: Option<Instant>,
    /// When its Node was first seen Ready.
    pub ready_at: Option<Instant>,
    /// When its Node was first seen Ready and without the node lifecycle controller's
    /// not-ready or unreachable taint (a node-monitor period after Ready, longer on a
    /// busy control plane): from then kube-scheduler may bind there, nodewright's own
    /// taints aside.
    pub untainted_at: Option<Instant>,
    /// When it was first seen shutting down, stopped or terminated.
    pub gone_at: Option<Instant>,
    /// When its kubelet stopped (its instance went, or [`ClusterBehaviour::stop_kubelet`]).
    pub kubelet_stopped_at: Option<Instant>,
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
            booted_at: None,
            ready_at: None,
            untainted_at: None,
            gone_at: None,
            kubelet_stopped_at: None,
            killed: false,
        }
    }
}

struct Record {
    /// What the model's times count from (the behaviour's start).
    origin: Instant,
    instances: BTreeMap<String, InstanceLife>,
    /// The kubelets, as the simulator models them; their writes are carried out here.
    kubelets: Kubelets,
    /// What EC2 takes back, and when ([`ClusterBehaviour::kill_at`]).
    reclaims: Reclaims,
    /// Nodes the cloud controller manager deleted, and when it last looked.
    deleted_by_cloud: Vec<String>,
    cloud_looked: Option<Instant>,
    /// The Nodes as last listed.
    nodes: Vec<Value>,
    errors: Vec<String>,
    /// The last DescribeInstances, and when.
    described: Option<(Instant, Vec<Ec2Instance>)>,
}

impl Record {
    fn new(timings: &Timings) -> Self {
        Record {
            origin: Instant::now(),
            instances: BTreeMap::new(),
            kubelets: Kubelets::new(timings.register_after, timings.ready_after),
            reclaims: Reclaims::default(),
            deleted_by_cloud: Vec::new(),
            cloud_looked: None,
            nodes: Vec::new(),
            errors: Vec::new(),
            described: None,
        }
    }

    /// `at` as the model counts time.
    fn since_origin(&self, at: Instant) -> Duration {
        at.saturating_duration_since(self.origin)
    }
}

/// Everything the background tasks and the accessors share.
struct Shared {
    api: Arc<ControlPlane>,
    ec2: Ec2Client,
    cluster: String,
    timings: Timings,
    record: Mutex<Record>,
    observed: observer::Shared,
}

/// The cluster's behaviour outside Kubernetes, running in the background until dropped
/// (or [`stop`](ClusterBehaviour::stop)ped). See the module documentation.
pub struct ClusterBehaviour {
    shared: Arc<Shared>,
    task: JoinHandle<()>,
    observer: JoinHandle<()>,
}

impl Drop for ClusterBehaviour {
    fn drop(&mut self) {
        self.task.abort();
        self.observer.abort();
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
            record: Mutex::new(Record::new(&timings)),
            observed: Arc::default(),
        });
        let (listed, first_list) = tokio::sync::oneshot::channel();
        let observer = tokio::spawn(observer::observe(
            shared.api.clone(),
            shared.observed.clone(),
            listed,
        ));
        // The pods there now are "created" now, not at the first round.
        let _ = tokio::time::timeout(Duration::from_secs(30), first_list).await;
        let behaving = shared.clone();
        let task = tokio::spawn(async move {
            let mut every = tokio::time::interval(behaving.timings.period);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                behaving.step().await;
            }
        });
        ClusterBehaviour {
            shared,
            task,
            observer,
        }
    }

    /// Stops behaving: nothing registers or boots, EC2 takes nothing back, and pods are
    /// no longer observed. (The control plane goes on.)
    pub fn stop(&self) {
        self.task.abort();
        self.observer.abort();
    }

    /// While `hold` is set, no instance registers its Node; once released, an instance
    /// whose `register_after` has passed registers at the next round.
    pub fn hold_registration(&self, hold: bool) {
        self.shared.lock().kubelets.hold_registration(hold);
    }

    /// While `hold` is set, registered nodes stay NotReady (a slow CNI: their kubelets
    /// keep booting); once released, a kubelet whose `ready_after` has passed hands its
    /// node to KWOK at the next round. Lets a test reach a state at a step it chooses.
    pub fn hold_ready(&self, hold: bool) {
        self.shared.lock().kubelets.hold_ready(hold);
    }

    /// EC2 takes `instance_id` back at `at` (TerminateInstances), whatever its state.
    pub fn kill_at(&self, instance_id: &str, at: Instant) {
        let mut record = self.shared.lock();
        let at = record.since_origin(at);
        record.reclaims.take_at(instance_id, at);
    }

    /// The kubelet of `node` stops now while its instance runs on (a hung kubelet):
    /// KWOK no longer plays the node or its pods, and the node lifecycle controller
    /// marks it unreachable after its grace period.
    pub async fn stop_kubelet(&self, node: &str) {
        kubelet::stop(&self.shared.api, node)
            .await
            .unwrap_or_else(|e| panic!("stopping the kubelet of {node}: {e}"));
        let now = Instant::now();
        let mut record = self.shared.lock();
        record.kubelets.stopped(node);
        if let Some(life) = record
            .instances
            .values_mut()
            .find(|i| i.node.as_deref() == Some(node))
        {
            life.kubelet_stopped_at.get_or_insert(now);
        }
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

    /// Nodes deleted by the cloud controller manager (not Ready, their instance
    /// terminated) rather than by nodewright.
    pub fn deleted_by_cloud(&self) -> Vec<String> {
        self.shared.lock().deleted_by_cloud.clone()
    }

    /// Every instance of the cluster seen so far.
    pub fn instances(&self) -> Vec<InstanceLife> {
        self.shared.lock().instances.values().cloned().collect()
    }

    pub fn instance(&self, id: &str) -> Option<InstanceLife> {
        self.shared.lock().instances.get(id).cloned()
    }

    /// Every pod seen so far, gone ones included, DaemonSets' too (`daemon`).
    pub fn pods(&self) -> Vec<PodLife> {
        observer::lock(&self.shared.observed)
            .lives
            .values()
            .cloned()
            .collect()
    }

    /// Workload pods (not DaemonSets') in the API server now, not being deleted, not
    /// finished and not bound ("namespace/name").
    pub fn pending_pods(&self) -> Vec<String> {
        self.placements()
            .into_iter()
            .filter(|(_, node, phase)| {
                node.is_none() && !matches!(phase.as_str(), "Succeeded" | "Failed")
            })
            .map(|(pod, _, _)| pod)
            .collect()
    }

    /// Workload pods (not DaemonSets') in the API server now that are not being deleted
    /// (a Deployment's replicas): ("namespace/name", its node, its phase), by name.
    pub fn placements(&self) -> Vec<(String, Option<String>, String)> {
        let observed = observer::lock(&self.shared.observed);
        let mut placements: Vec<(String, Option<String>, String)> = observed
            .live
            .values()
            .filter(|p| p.metadata.deletion_timestamp.is_none() && !observer::is_daemon(p))
            .map(|p| {
                (
                    format!(
                        "{}/{}",
                        p.metadata.namespace.as_deref().unwrap_or_default(),
                        p.metadata.name.as_deref().unwrap_or_default()
                    ),
                    p.spec.as_ref().and_then(|s| s.node_name.clone()),
                    p.status
                        .as_ref()
                        .and_then(|s| s.phase.clone())
                        .unwrap_or_default(),
                )
            })
            .collect();
        placements.sort();
        placements
    }

    /// Every workload pod (not a DaemonSet's) now running and Ready ("namespace/name"),
    /// sorted.
    pub fn running(&self) -> Vec<String> {
        let observed = observer::lock(&self.shared.observed);
        let mut running: Vec<String> = observed
            .live
            .values()
            .filter(|p| {
                p.metadata.deletion_timestamp.is_none()
                    && observer::is_ready(p)
                    && !observer::is_daemon(p)
            })
            .map(|p| {
                format!(
                    "{}/{}",
                    p.metadata.namespace.as_deref().unwrap_or_default(),
                    p.metadata.name.as_deref().unwrap_or_default()
                )
            })
            .collect();
        running.sort();
        running
    }

    /// The Nodes in the API server as last listed (for a test's failure message).
    pub fn nodes(&self) -> Vec<Value> {
        self.shared.lock().nodes.clone()
    }

    /// Every moment a PodDisruptionBudget had fewer healthy pods than it requires
    /// because a bound pod went, described.
    pub fn violations(&self) -> Vec<String> {
        observer::lock(&self.shared.observed).violations.clone()
    }

    /// Workload pods that went with their node (taint eviction off a lost node, podgc
    /// after its deletion) rather than through the API. (A DaemonSet's pod always goes
    /// with its node.)
    pub fn lost(&self) -> Vec<(String, GoneBy)> {
        self.pods()
            .into_iter()
            .filter(|p| !p.daemon)
            .filter_map(|p| match p.gone {
                Some((_, by @ (GoneBy::NodeLost(_) | GoneBy::NodeDeleted(_)))) => Some((p.key, by)),
                _ => None,
            })
            .collect()
    }

    /// Their Deployment is scaled down by these pods ("namespace/name"), as a user
    /// picks the pods to go with `controller.kubernetes.io/pod-deletion-cost`: each is
    /// given the lowest cost, then its Deployment loses as many replicas; the real
    /// ReplicaSet controller deletes them. Returns once they are gone. Panics on a pod
    /// that is not a Deployment's, or when they do not go within 30 s.
    pub async fn scale_down(&self, pods: &[&str]) {
        let api = &self.shared.api;
        let mut by_deployment: BTreeMap<(String, String), usize> = BTreeMap::new();
        for key in pods {
            let (namespace, name) = key
                .split_once('/')
                .unwrap_or_else(|| panic!("{key}: not namespace/name"));
            let pod = api
                .get("Pod", Some(namespace), name)
                .await
                .unwrap_or_else(|| panic!("scale down: no pod {key}"));
            let set = owner(&pod, "ReplicaSet")
                .unwrap_or_else(|| panic!("scale down: {key} has no ReplicaSet"));
            let set = api
                .get("ReplicaSet", Some(namespace), &set)
                .await
                .unwrap_or_else(|| panic!("scale down: the ReplicaSet of {key} is gone"));
            let deployment = owner(&set, "Deployment")
                .unwrap_or_else(|| panic!("scale down: {key} is not a Deployment's"));
            api.modify("Pod", Some(namespace), name, |p| {
                p["metadata"]["annotations"]["controller.kubernetes.io/pod-deletion-cost"] =
                    json!("-1000");
            })
            .await;
            *by_deployment
                .entry((namespace.to_string(), deployment))
                .or_default() += 1;
        }
        for ((namespace, deployment), fewer) in by_deployment {
            api.modify("Deployment", Some(&namespace), &deployment, |d| {
                let replicas = d["spec"]["replicas"].as_u64().unwrap_or(1) as usize;
                d["spec"]["replicas"] = json!(replicas.saturating_sub(fewer));
            })
            .await;
        }
        let gone = wait_until(Duration::from_secs(30), || async {
            let placed = self.placements();
            pods.iter()
                .all(|key| !placed.iter().any(|(p, _, _)| p == key))
        })
        .await;
        assert!(
            gone,
            "scale down: {pods:?} not deleted by their ReplicaSet: {:?}",
            self.placements()
        );
    }

    /// Calls that failed (that part of a round was skipped): to explain a test that
    /// stalls.
    pub fn errors(&self) -> Vec<String> {
        let mut errors = self.shared.lock().errors.clone();
        errors.extend(observer::lock(&self.shared.observed).errors.clone());
        errors
    }
}

/// The name of the object's controller of `kind`.
fn owner(object: &Value, kind: &str) -> Option<String> {
    object["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|o| o["kind"] == kind && o["controller"] == true)
        .and_then(|o| o["name"].as_str())
        .map(str::to_string)
}

/// The Ready condition of a Node, "" when it has none.
fn ready_status(node: &Value) -> &str {
    node["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready")
        .and_then(|c| c["status"].as_str())
        .unwrap_or("")
}

/// Whether the node lifecycle controller's not-ready or unreachable taint is on `node`.
fn lifecycle_tainted(node: &Value) -> bool {
    node["spec"]["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["key"].as_str())
        .any(|key| nodewright_core::planning_view::NODE_LIFECYCLE_TAINTS.contains(&key))
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Record> {
        self.record.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn note(&self, error: String) {
        let mut record = self.lock();
        if !record.errors.contains(&error) {
            record.errors.push(error);
        }
    }

    /// One round: EC2's reclaims, the instances as EC2 reports them, the Nodes as the
    /// API server has them, then the kubelets' step and the cloud's.
    async fn step(&self) {
        let reclaimed = cloud::reclaim_due(self).await;
        let fresh = self
            .lock()
            .described
            .as_ref()
            .is_some_and(|(at, _)| at.elapsed() < self.timings.ec2_period);
        if reclaimed || !fresh {
            match ec2::describe(&self.ec2, &self.cluster).await {
                Ok(instances) => self.lock().described = Some((Instant::now(), instances)),
                Err(e) => {
                    self.note(format!("DescribeInstances: {e}"));
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
        let nodes = match objects::list(self.api.admin(), "Node").await {
            Ok(nodes) => nodes,
            Err(e) => {
                self.note(format!("listing Nodes: {e}"));
                return;
            }
        };
        self.lock().nodes = nodes.clone();
        for instance in &instances {
            self.watch(instance, &nodes);
        }
        self.kubelets(&instances, &nodes).await;
        cloud::delete_lost_nodes(self, &instances, &nodes).await;
    }

    /// What the test is told of one instance: when it was first seen, its node Ready
    /// and free of the node lifecycle controller's taints, gone.
    fn watch(&self, instance: &Ec2Instance, nodes: &[Value]) {
        let now = Instant::now();
        let life = self
            .lock()
            .instances
            .entry(instance.id.clone())
            .or_insert_with(|| InstanceLife::new(&instance.id, now))
            .clone();
        let node = life.node.as_ref().and_then(|name| {
            nodes
                .iter()
                .find(|n| n["metadata"]["name"] == name.as_str())
        });
        if node.is_some_and(|n| ready_status(n) == "True") && life.ready_at.is_none() {
            self.update(&instance.id, |l| l.ready_at = Some(now));
        }
        if node.is_some_and(|n| ready_status(n) == "True" && !lifecycle_tainted(n))
            && life.untainted_at.is_none()
        {
            self.update(&instance.id, |l| l.untainted_at = Some(now));
        }
        if instance.is_gone() && life.gone_at.is_none() {
            self.update(&instance.id, |l| l.gone_at = Some(now));
        }
    }

    /// The kubelets' step (the simulator's model), carried out on the control plane:
    /// a registration is the Node put while the kubelet holds its lease, a heartbeat
    /// that lease renewed, Ready the lease given up to KWOK, a stop the lease taken for
    /// good. A write that fails is named in the errors and comes again next round.
    async fn kubelets(&self, instances: &[Ec2Instance], nodes: &[Value]) {
        let (now, at, writes) = {
            let record = self.lock();
            let seen: Vec<_> = instances
                .iter()
                .map(|i| {
                    let first_seen = record
                        .instances
                        .get(&i.id)
                        .map_or(record.origin, |l| l.first_seen);
                    i.seen(record.since_origin(first_seen))
                })
                .collect();
            let now = Instant::now();
            let at = record.since_origin(now);
            (now, at, record.kubelets.step(at, &seen))
        };
        for write in writes {
            let done = match &write {
                KubeletWrite::Register { instance } => {
                    let Some(instance) = instances.iter().find(|i| &i.id == instance) else {
                        continue;
                    };
                    match kubelet::register(&self.api, instance, Catalog::embedded()).await {
                        Ok(name) => {
                            self.lock().kubelets.registered(&instance.id, &name, at);
                            self.update(&instance.id, |l| {
                                l.node = Some(name);
                                l.registered_at = Some(now);
                            });
                        }
                        Err(e) => self.note(e),
                    }
                    continue;
                }
                KubeletWrite::Heartbeat { node } => kubelet::heartbeat(&self.api, node).await,
                KubeletWrite::Ready { node } => {
                    let released = kubelet::release(&self.api, node).await;
                    if released.is_ok() {
                        self.update_node(node, |l| l.booted_at = Some(now));
                    }
                    released
                }
                KubeletWrite::Stop { node } => {
                    // A Node already deleted has nobody left to stop reporting to.
                    let registered = nodes.iter().any(|n| n["metadata"]["name"] == node.as_str());
                    let stopped = if registered {
                        kubelet::stop(&self.api, node).await
                    } else {
                        Ok(())
                    };
                    if stopped.is_ok() && registered {
                        self.update_node(node, |l| l.kubelet_stopped_at = Some(now));
                    }
                    stopped
                }
            };
            match done {
                Ok(()) => self.lock().kubelets.done(&write, at),
                Err(e) => self.note(e),
            }
        }
    }

    fn update_node(&self, node: &str, change: impl FnOnce(&mut InstanceLife)) {
        if let Some(life) = self
            .lock()
            .instances
            .values_mut()
            .find(|l| l.node.as_deref() == Some(node))
        {
            change(life);
        }
    }

    fn update(&self, instance: &str, change: impl FnOnce(&mut InstanceLife)) {
        if let Some(life) = self.lock().instances.get_mut(instance) {
            change(life);
        }
    }
}

#[cfg(test)]
mod tests;
