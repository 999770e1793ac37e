//! A cluster that behaves like one over time, for end-to-end tests of the handlers.
//!
//! [`ClusterBehaviour`] runs in the background over an [`EmulatedCluster`] (moto's EC2 and
//! the fake API server) and plays, every `period`, the parts of EKS that nodewright does
//! not: the kubelets, the node lifecycle controller, kube-scheduler, the Deployment
//! controller, pod garbage collection and EC2 reclaiming spot capacity. Without them a
//! test can only check one step of a job; with them it can check that the job finishes:
//! instances equal live claims, every pod runs, no budget was broken.
//!
//! What each part does, and where it simplifies the real one:
//! - **kubelet** — an instance tagged for the cluster, running, without a Node yet,
//!   registers `register_after` after it was first seen: a Node named like its private
//!   DNS name, providerID `aws:///<zone>/<id>`, the labels the kubelet and Karpenter's
//!   user data set (hostname, zone, region, instance type, arch, os, and the NodePool and
//!   NodeClaim from the instance's tags), the taints Karpenter registers with
//!   (`karpenter.sh/unregistered:NoExecute`, the NodePool's taints and startup taints),
//!   allocatable and capacity of its type from the catalog, Ready=False. It turns Ready
//!   `ready_after` later. A kubelet registers once: if its Node is deleted it does not
//!   come back (the real kubelet only registers at start).
//! - **node lifecycle controller** — `node.kubernetes.io/not-ready:NoSchedule` while the
//!   node is not Ready (TaintNodesByCondition); when its instance is shutting down or
//!   terminated the node goes Ready=Unknown with `node.kubernetes.io/unreachable`.
//! - **pods of a lost instance** — deleted at once (the real control plane marks them
//!   for deletion only after the node has been unreachable for 5 minutes; the test
//!   cannot wait that long, and what matters is that they are gone and replaced).
//! - **pod GC** — a pod bound to a Node that no longer exists is deleted (the real podgc
//!   waits a 40 s quarantine first).
//! - **kube-scheduler** — binds each pending pod to a node it fits: every NoSchedule and
//!   NoExecute taint tolerated (kube-scheduler itself does not look at the Ready
//!   condition, the not-ready taint keeps pods off; the condition is checked too), not
//!   cordoned, `nodeSelector` matched, cpu, memory and pod count within allocatable minus
//!   what the pods bound there request. Among those it picks the least allocated node
//!   (the default scoring, NodeResourcesFit LeastAllocated). Node affinity, topology
//!   spread and pod affinity are not modelled: the tests do not use them. The pod runs
//!   at once (phase Running, Ready), which the real kubelet takes a few seconds for.
//! - **Deployment controller** — every pod that goes (evicted, deleted, lost) is
//!   recreated pending under a new name with the same labels and spec, so the replica
//!   count stays. [`ClusterBehaviour::scale_down`] lowers the replica count instead:
//!   the ReplicaSet controller deletes the pods it names (at once; the real pods
//!   terminate over their grace period) and nothing recreates them.
//! - **PodDisruptionBudgets** — the fake API server refuses evictions the budgets do not
//!   allow; here every pod that goes is recorded and each budget is checked after it:
//!   fewer healthy pods than the budget requires is a violation (see [`check_budgets`]).
//! - **EC2** — [`ClusterBehaviour::kill_at`]: the instance is terminated through
//!   TerminateInstances at that time (a spot reclaim at the end of its two-minute
//!   notice), drained or not; its pods are lost.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use aws_sdk_ec2::types::Filter;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use nodewright_aws::testing::{Ec2Client, sdk_config};
use nodewright_core::catalog::Catalog;
use nodewright_core::resources::parse_milli;
use nodewright_kube::fake::{FakeApiServer, Store};

use super::EmulatedCluster;

pub const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";
pub const TAINT_UNREACHABLE: &str = "node.kubernetes.io/unreachable";
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
    template: Value,
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

#[derive(Default)]
struct Record {
    instances: BTreeMap<String, InstanceLife>,
    /// By uid.
    pods: BTreeMap<String, PodLife>,
    kills: Vec<(String, Instant)>,
    /// (old pod, its replacement).
    recreated: Vec<(String, String)>,
    violations: Vec<String>,
    /// Failed calls to moto: a step was skipped.
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

/// An instance as DescribeInstances reports it.
#[derive(Debug, Clone)]
struct Ec2Instance {
    id: String,
    state: String,
    instance_type: String,
    zone: String,
    private_dns: String,
    tags: BTreeMap<String, String>,
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
            observe_pods(store, &mut shared.lock(), Instant::now());
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
        self.shared.api.with_store(|store| {
            store
                .list("Pod", None)
                .into_iter()
                .filter(|p| node_name(p).is_none() && !finished(p))
                .map(pod_key)
                .collect()
        })
    }

    /// Pods in the API server now: ("namespace/name", its node, its phase).
    pub fn placements(&self) -> Vec<(String, Option<String>, String)> {
        self.shared.api.with_store(|store| {
            store
                .list("Pod", None)
                .into_iter()
                .map(|p| {
                    (
                        pod_key(p),
                        node_name(p).map(str::to_string),
                        str_at(p, "/status/phase").to_string(),
                    )
                })
                .collect()
        })
    }

    /// The Nodes in the API server now.
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
            let mut record = self.shared.lock();
            for key in pods {
                let (namespace, name) = key
                    .split_once('/')
                    .unwrap_or_else(|| panic!("{key}: not namespace/name"));
                let pod = store
                    .remove("Pod", Some(namespace), name)
                    .unwrap_or_else(|| panic!("scale down: no pod {key}"));
                let life = record
                    .pods
                    .entry(uid(&pod).to_string())
                    .or_insert_with(|| PodLife {
                        key: pod_key(&pod),
                        uid: uid(&pod).to_string(),
                        first_seen: now,
                        bound_at: None,
                        node: node_name(&pod).map(str::to_string),
                        gone: None,
                        template: pod.clone(),
                    });
                life.gone = Some((now, GoneBy::ScaledDown));
            }
        });
    }

    /// Calls to moto that failed (the step was skipped): to explain a test that stalls.
    pub fn errors(&self) -> Vec<String> {
        self.shared.lock().errors.clone()
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
            match self.describe().await {
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
            let mut gone = observe_pods(store, &mut record, now);
            gone.extend(kubelets(
                store,
                &mut record,
                &instances,
                catalog,
                self.timings,
                now,
            ));
            gone.extend(collect_orphans(store, &mut record, now));
            recreate(store, &mut record, &gone, now);
            check_budgets(store, &mut record, &gone);
            schedule(store, &mut record, now);
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
        let up = match self.describe().await {
            Ok(all) => all,
            Err(e) => {
                self.lock().errors.push(format!("DescribeInstances: {e}"));
                return false;
            }
        };
        let alive: Vec<String> = due
            .into_iter()
            .filter(|id| up.iter().any(|i| &i.id == id && !is_gone(&i.state)))
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

    /// The cluster's instances in moto, by the tag every launch carries.
    async fn describe(&self) -> Result<Vec<Ec2Instance>, String> {
        let out = self
            .ec2
            .describe_instances()
            .filters(
                Filter::builder()
                    .name(format!("tag:kubernetes.io/cluster/{}", self.cluster))
                    .values("owned")
                    .build(),
            )
            .send()
            .await
            .map_err(|e| format!("{e:?}"))?;
        Ok(out
            .reservations()
            .iter()
            .flat_map(|r| r.instances())
            .map(|i| Ec2Instance {
                id: i.instance_id().unwrap_or_default().to_string(),
                state: i
                    .state()
                    .and_then(|s| s.name())
                    .map(|n| n.as_str().to_string())
                    .unwrap_or_default(),
                instance_type: i
                    .instance_type()
                    .map(|t| t.as_str().to_string())
                    .unwrap_or_default(),
                zone: i
                    .placement()
                    .and_then(|p| p.availability_zone())
                    .unwrap_or_default()
                    .to_string(),
                private_dns: i.private_dns_name().unwrap_or_default().to_string(),
                tags: i
                    .tags()
                    .iter()
                    .map(|t| {
                        (
                            t.key().unwrap_or_default().to_string(),
                            t.value().unwrap_or_default().to_string(),
                        )
                    })
                    .collect(),
            })
            .collect())
    }
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

/// Shutting down, stopped or terminated: its kubelet is gone.
fn is_gone(state: &str) -> bool {
    matches!(
        state,
        "shutting-down" | "terminated" | "stopping" | "stopped"
    )
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn pod_key(pod: &Value) -> String {
    format!(
        "{}/{}",
        str_at(pod, "/metadata/namespace"),
        str_at(pod, "/metadata/name")
    )
}

fn uid(v: &Value) -> &str {
    str_at(v, "/metadata/uid")
}

fn node_name(pod: &Value) -> Option<&str> {
    Some(str_at(pod, "/spec/nodeName")).filter(|n| !n.is_empty())
}

fn finished(pod: &Value) -> bool {
    matches!(str_at(pod, "/status/phase"), "Succeeded" | "Failed")
}

fn daemonset_owned(pod: &Value) -> bool {
    pod.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|owners| owners.iter().any(|o| o["kind"] == "DaemonSet"))
}

fn labels(v: &Value) -> BTreeMap<String, String> {
    v.pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                .collect()
        })
        .unwrap_or_default()
}

/// Records pods that appeared (created by the test) and pods that went through the API
/// since the last round. Returns the uids of the pods that went.
fn observe_pods(store: &Store, record: &mut Record, now: Instant) -> Vec<String> {
    let current: HashMap<&str, &Value> = store
        .list("Pod", None)
        .into_iter()
        .map(|p| (uid(p), p))
        .collect();
    let mut gone = Vec::new();
    for life in record.pods.values_mut().filter(|l| l.gone.is_none()) {
        if !current.contains_key(life.uid.as_str()) {
            life.gone = Some((now, GoneBy::Api));
            gone.push(life.uid.clone());
        }
    }
    for (uid, pod) in current {
        record
            .pods
            .entry(uid.to_string())
            .or_insert_with(|| PodLife {
                key: pod_key(pod),
                uid: uid.to_string(),
                first_seen: now,
                bound_at: None,
                node: node_name(pod).map(str::to_string),
                gone: None,
                template: pod.clone(),
            });
    }
    gone
}

/// The kubelets and the node lifecycle controller. Returns the uids of pods lost with
/// their instance.
fn kubelets(
    store: &mut Store,
    record: &mut Record,
    instances: &[Ec2Instance],
    catalog: &Catalog,
    timings: Timings,
    now: Instant,
) -> Vec<String> {
    let mut lost_nodes = Vec::new();
    let hold_ready = record.hold_ready;
    for instance in instances {
        let life = record
            .instances
            .entry(instance.id.clone())
            .or_insert_with(|| InstanceLife::new(&instance.id, now));
        if is_gone(&instance.state) {
            if life.gone_at.is_none() {
                life.gone_at = Some(now);
                if let Some(node) = &life.node {
                    lost_nodes.push((node.clone(), instance.id.clone()));
                }
            }
            continue;
        }
        if instance.state != "running" {
            continue; // pending: still booting
        }
        match (life.registered_at, &life.node, life.ready_at) {
            (None, _, _) if now >= life.first_seen + timings.register_after => {
                life.node = Some(register(store, instance, catalog));
                life.registered_at = Some(now);
            }
            (Some(at), Some(node), None) if !hold_ready && now >= at + timings.ready_after => {
                set_ready(store, node);
                life.ready_at = Some(now);
            }
            _ => {}
        }
    }
    let mut lost = Vec::new();
    for (node, instance) in lost_nodes {
        store.modify("Node", None, &node, |n| {
            n["status"]["conditions"] = json!([{
                "type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                "message": "Kubelet stopped posting node status."
            }]);
            add_taint(n, TAINT_UNREACHABLE, "NoSchedule");
        });
        lost.extend(remove_pods_on(
            store,
            record,
            &node,
            GoneBy::InstanceLost(instance),
            now,
        ));
    }
    lost
}

/// The kubelet's registration, as Karpenter's user data configures it.
fn register(store: &mut Store, instance: &Ec2Instance, catalog: &Catalog) -> String {
    let name = if instance.private_dns.is_empty() {
        format!("ip-{}.ec2.internal", instance.id.trim_start_matches("i-"))
    } else {
        instance.private_dns.clone()
    };
    let it = catalog.get(&instance.instance_type);
    let mut labels = BTreeMap::from([
        ("kubernetes.io/hostname".to_string(), name.clone()),
        (
            "topology.kubernetes.io/zone".to_string(),
            instance.zone.clone(),
        ),
        (
            "topology.kubernetes.io/region".to_string(),
            instance
                .zone
                .trim_end_matches(|c: char| c.is_ascii_lowercase())
                .to_string(),
        ),
        (
            "node.kubernetes.io/instance-type".to_string(),
            instance.instance_type.clone(),
        ),
    ]);
    for key in ["kubernetes.io/arch", "kubernetes.io/os"] {
        if let Some(v) = it.and_then(|t| t.labels.get(key)) {
            labels.insert(key.to_string(), v.clone());
        }
    }
    for key in ["karpenter.sh/nodepool", "karpenter.sh/nodeclaim"] {
        if let Some(v) = instance.tags.get(key) {
            labels.insert(key.to_string(), v.clone());
        }
    }
    let mut taints = vec![json!({"key": TAINT_UNREGISTERED, "effect": "NoExecute"})];
    if let Some(pool) = instance
        .tags
        .get("karpenter.sh/nodepool")
        .and_then(|p| store.get("NodePool", None, p))
    {
        for field in ["taints", "startupTaints"] {
            if let Some(list) = pool
                .pointer(&format!("/spec/template/spec/{field}"))
                .and_then(Value::as_array)
            {
                taints.extend(list.iter().cloned());
            }
        }
    }
    taints.push(json!({"key": TAINT_NOT_READY, "effect": "NoSchedule"}));
    let resources = |r: Option<&nodewright_core::resources::Resources>| -> Value {
        r.map(|r| {
            r.iter()
                .map(|(k, milli)| (k.to_string(), Value::String(quantity(k, milli))))
                .collect::<serde_json::Map<_, _>>()
                .into()
        })
        .unwrap_or_else(|| json!({}))
    };
    store.put(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "providerID": format!("aws:///{}/{}", instance.zone, instance.id),
            "taints": taints,
        },
        "status": {
            "allocatable": resources(it.map(|t| &t.allocatable)),
            "capacity": resources(it.map(|t| &t.capacity)),
            "conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady",
                            "message": "container runtime network not ready"}],
        }
    }));
    name
}

/// A quantity as the kubelet writes it, exactly: cpu in millicores, bytes in Mi when
/// whole, counts as integers.
fn quantity(name: &str, milli: i64) -> String {
    match name {
        "cpu" => format!("{milli}m"),
        "memory" | "ephemeral-storage" => {
            let bytes = milli / 1000;
            if bytes % (1 << 20) == 0 {
                format!("{}Mi", bytes >> 20)
            } else {
                bytes.to_string()
            }
        }
        _ => (milli / 1000).to_string(),
    }
}

/// The Ready condition turns True and the not-ready taint goes. A Node deleted in the
/// meantime stays deleted.
fn set_ready(store: &mut Store, node: &str) {
    store.modify("Node", None, node, |n| {
        n["status"]["conditions"] =
            json!([{"type": "Ready", "status": "True", "reason": "KubeletReady"}]);
        if let Some(taints) = n.pointer_mut("/spec/taints").and_then(Value::as_array_mut) {
            taints.retain(|t| t["key"] != TAINT_NOT_READY);
        }
    });
}

fn add_taint(node: &mut Value, key: &str, effect: &str) {
    if !node["spec"]["taints"].is_array() {
        node["spec"]["taints"] = json!([]);
    }
    let taints = node["spec"]["taints"].as_array_mut().expect("an array");
    if !taints
        .iter()
        .any(|t| t["key"] == key && t["effect"] == effect)
    {
        taints.push(json!({"key": key, "effect": effect}));
    }
}

/// Deletes the pods bound to `node`, recording why. Returns their uids.
fn remove_pods_on(
    store: &mut Store,
    record: &mut Record,
    node: &str,
    by: GoneBy,
    now: Instant,
) -> Vec<String> {
    let on_node: Vec<(String, String, String)> = store
        .list("Pod", None)
        .into_iter()
        .filter(|p| node_name(p) == Some(node))
        .map(|p| {
            (
                str_at(p, "/metadata/namespace").to_string(),
                str_at(p, "/metadata/name").to_string(),
                uid(p).to_string(),
            )
        })
        .collect();
    let mut removed = Vec::new();
    for (namespace, name, uid) in on_node {
        store.remove("Pod", Some(&namespace), &name);
        if let Some(life) = record.pods.get_mut(&uid) {
            life.gone = Some((now, by.clone()));
        }
        removed.push(uid);
    }
    removed
}

/// Pod GC: pods bound to a Node that does not exist are deleted.
fn collect_orphans(store: &mut Store, record: &mut Record, now: Instant) -> Vec<String> {
    let nodes: Vec<String> = store
        .list("Node", None)
        .into_iter()
        .map(|n| str_at(n, "/metadata/name").to_string())
        .collect();
    let orphaned: Vec<String> = store
        .list("Pod", None)
        .into_iter()
        .filter_map(node_name)
        .filter(|n| !nodes.iter().any(|known| known == n))
        .map(str::to_string)
        .collect();
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

/// The Deployment controller: each pod that went comes back pending under a new name.
fn recreate(store: &mut Store, record: &mut Record, gone: &[String], now: Instant) {
    for went in gone {
        let Some(life) = record.pods.get(went) else {
            continue;
        };
        let template = &life.template;
        if daemonset_owned(template) || finished(template) {
            continue;
        }
        let old_key = life.key.clone();
        let namespace = str_at(template, "/metadata/namespace").to_string();
        let labels = template["metadata"]["labels"].clone();
        let base = labels["app"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| str_at(template, "/metadata/name").to_string());
        let mut spec = template["spec"].clone();
        if let Some(spec) = spec.as_object_mut() {
            spec.remove("nodeName");
        }
        record.next_pod += 1;
        let name = format!("{base}-r{:04}", record.next_pod);
        let stored = store.put(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": spec,
            "status": {"phase": "Pending"}
        }));
        let new_uid = uid(&stored).to_string();
        record.recreated.push((old_key, pod_key(&stored)));
        record.pods.insert(
            new_uid.clone(),
            PodLife {
                key: pod_key(&stored),
                uid: new_uid,
                first_seen: now,
                bound_at: None,
                node: None,
                gone: None,
                template: stored,
            },
        );
    }
}

/// Counts towards a budget: bound, running, Ready, not being deleted (the disruption
/// controller counts Ready pods).
fn healthy(pod: &Value) -> bool {
    node_name(pod).is_some()
        && str_at(pod, "/status/phase") == "Running"
        && pod.pointer("/metadata/deletionTimestamp").is_none()
        && pod
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
}

/// After pods went (and were recreated, pending): each budget that selected one of
/// them, bound when it went, must still have as many healthy pods as it requires.
///
/// Checking once per round is enough to catch every instant: between two rounds only
/// nodewright acts on pods, and it only takes them away (evicts, deletes) — it never
/// creates or binds one — so the healthy count between rounds only falls, and its
/// lowest point is what this round sees.
///
/// expected = the selected pods, pending replacements included (the Deployment's
/// replicas); desired = minAvailable (a percentage of expected, rounded up), or
/// expected − maxUnavailable (rounded up), or expected when neither is set.
fn check_budgets(store: &Store, record: &mut Record, gone: &[String]) {
    if gone.is_empty() {
        return;
    }
    let gone: Vec<&PodLife> = gone.iter().filter_map(|u| record.pods.get(u)).collect();
    let mut found = Vec::new();
    for pdb in store.list("PodDisruptionBudget", None) {
        let namespace = str_at(pdb, "/metadata/namespace");
        let Some(selector) = pdb.pointer("/spec/selector") else {
            continue; // a nil selector selects nothing
        };
        let went: Vec<String> = gone
            .iter()
            .filter(|l| l.node.is_some())
            .filter(|l| str_at(&l.template, "/metadata/namespace") == namespace)
            .filter(|l| selector_matches(selector, &labels(&l.template)))
            .map(|l| {
                let why = match &l.gone {
                    Some((_, GoneBy::Api)) => "evicted or deleted".to_string(),
                    Some((_, GoneBy::ScaledDown)) => "scaled down".to_string(),
                    Some((_, GoneBy::InstanceLost(i))) => format!("lost with instance {i}"),
                    Some((_, GoneBy::NodeDeleted(n))) => format!("lost with node {n}"),
                    None => String::new(),
                };
                format!("{} ({why})", l.key)
            })
            .collect();
        if went.is_empty() {
            continue;
        }
        let selected: Vec<&Value> = store
            .list("Pod", Some(namespace))
            .into_iter()
            .filter(|p| !finished(p) && selector_matches(selector, &labels(p)))
            .collect();
        let expected = selected.len() as i64;
        let healthy = selected.iter().filter(|p| healthy(p)).count() as i64;
        let desired = match (
            pdb.pointer("/spec/minAvailable"),
            pdb.pointer("/spec/maxUnavailable"),
        ) {
            (Some(min), _) => scaled_up(min, expected),
            (None, Some(max)) => expected - scaled_up(max, expected),
            (None, None) => expected,
        };
        if healthy < desired {
            found.push(format!(
                "PodDisruptionBudget {namespace}/{}: {healthy} healthy of {expected}, {desired} required, after {}",
                str_at(pdb, "/metadata/name"),
                went.join(", ")
            ));
        }
    }
    record.violations.extend(found);
}

/// An int-or-percent scaled against `total`, a percentage rounded up.
fn scaled_up(v: &Value, total: i64) -> i64 {
    match v {
        Value::Number(n) => n.as_i64().unwrap_or(0),
        Value::String(s) => s
            .strip_suffix('%')
            .and_then(|p| p.parse::<i64>().ok())
            .map(|p| (p * total + 99) / 100)
            .unwrap_or(0),
        _ => 0,
    }
}

/// A `metav1.LabelSelector`: matchLabels and matchExpressions, all must hold (an
/// empty selector selects everything).
fn selector_matches(selector: &Value, labels: &BTreeMap<String, String>) -> bool {
    let match_labels = selector["matchLabels"].as_object().is_none_or(|m| {
        m.iter()
            .all(|(k, v)| labels.get(k).map(String::as_str) == v.as_str())
    });
    let expressions = selector["matchExpressions"].as_array().is_none_or(|list| {
        list.iter().all(|e| {
            let key = e["key"].as_str().unwrap_or("");
            let values: Vec<&str> = e["values"]
                .as_array()
                .map(|v| v.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let value = labels.get(key).map(String::as_str);
            match e["operator"].as_str().unwrap_or("") {
                "In" => value.is_some_and(|v| values.contains(&v)),
                "NotIn" => value.is_none_or(|v| !values.contains(&v)),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                _ => false,
            }
        })
    });
    match_labels && expressions
}

/// cpu and memory (milli-units) a pod asks for: the sum over its containers, or the
/// largest init container if that is more (as the scheduler computes it).
fn requests(pod: &Value) -> (i64, i64) {
    let of = |list: Option<&Value>, resource: &str| -> Vec<i64> {
        list.and_then(Value::as_array)
            .map(|cs| {
                cs.iter()
                    .map(|c| {
                        c.pointer(&format!("/resources/requests/{resource}"))
                            .and_then(Value::as_str)
                            .and_then(|q| parse_milli(q).ok())
                            .unwrap_or(0)
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let spec = &pod["spec"];
    let total = |resource: &str| {
        let sum: i64 = of(spec.get("containers"), resource).iter().sum();
        let init = of(spec.get("initContainers"), resource)
            .into_iter()
            .max()
            .unwrap_or(0);
        sum.max(init)
    };
    (total("cpu"), total("memory"))
}

fn allocatable(node: &Value, resource: &str) -> i64 {
    node.pointer(&format!("/status/allocatable/{resource}"))
        .and_then(Value::as_str)
        .and_then(|q| parse_milli(q).ok())
        .unwrap_or(0)
}

/// Whether `toleration` tolerates `taint` (`v1.Toleration.ToleratesTaint`).
fn tolerates(toleration: &Value, taint: &Value) -> bool {
    let effect = toleration["effect"].as_str().unwrap_or("");
    if !effect.is_empty() && Some(effect) != taint["effect"].as_str() {
        return false;
    }
    let key = toleration["key"].as_str().unwrap_or("");
    if !key.is_empty() && Some(key) != taint["key"].as_str() {
        return false;
    }
    match toleration["operator"].as_str().unwrap_or("Equal") {
        "Exists" => true,
        _ => toleration["value"].as_str().unwrap_or("") == taint["value"].as_str().unwrap_or(""),
    }
}

/// What kube-scheduler writes on a pod it found no node for, in its first attempt:
/// PodScheduled=False, reason Unschedulable (written once; the real one updates the
/// message on later attempts).
fn mark_unschedulable(store: &mut Store, pod: &Value) {
    let marked = pod
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "PodScheduled" && c["reason"] == "Unschedulable")
        });
    if marked {
        return;
    }
    let namespace = str_at(pod, "/metadata/namespace").to_string();
    let name = str_at(pod, "/metadata/name").to_string();
    store.modify("Pod", Some(&namespace), &name, |p| {
        let condition = json!({
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/0 nodes are available: no node fits the pod."
        });
        if !p["status"].is_object() {
            p["status"] = json!({"phase": "Pending"});
        }
        match p["status"]["conditions"].as_array_mut() {
            Some(conditions) => {
                conditions.retain(|c| c["type"] != "PodScheduled");
                conditions.push(condition);
            }
            None => p["status"]["conditions"] = json!([condition]),
        }
    });
}

/// kube-scheduler: binds every pending pod it can, oldest first; marks the others
/// Unschedulable (binding replaces the status, and with it the mark).
fn schedule(store: &mut Store, record: &mut Record, now: Instant) {
    struct Room {
        name: String,
        labels: BTreeMap<String, String>,
        taints: Vec<Value>,
        cpu: (i64, i64),
        memory: (i64, i64),
        pods: (i64, i64),
    }
    let mut rooms: Vec<Room> = store
        .list("Node", None)
        .into_iter()
        .filter(|n| n.pointer("/spec/unschedulable").and_then(Value::as_bool) != Some(true))
        .filter(|n| n.pointer("/metadata/deletionTimestamp").is_none())
        .filter(|n| {
            n.pointer("/status/conditions")
                .and_then(Value::as_array)
                .is_some_and(|c| {
                    c.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                })
        })
        .map(|n| Room {
            name: str_at(n, "/metadata/name").to_string(),
            labels: labels(n),
            taints: n["spec"]["taints"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter(|t| matches!(t["effect"].as_str(), Some("NoSchedule" | "NoExecute")))
                .collect(),
            cpu: (allocatable(n, "cpu"), 0),
            memory: (allocatable(n, "memory"), 0),
            pods: (allocatable(n, "pods"), 0),
        })
        .collect();
    let mut pending = Vec::new();
    for pod in store.list("Pod", None) {
        if finished(pod) {
            continue;
        }
        match node_name(pod) {
            Some(node) => {
                if let Some(room) = rooms.iter_mut().find(|r| r.name == node) {
                    let (cpu, memory) = requests(pod);
                    room.cpu.1 += cpu;
                    room.memory.1 += memory;
                    room.pods.1 += 1000;
                }
            }
            // kube-scheduler only takes the pods that name it (or no scheduler).
            None if pod.pointer("/metadata/deletionTimestamp").is_none()
                && matches!(
                    pod.pointer("/spec/schedulerName").and_then(Value::as_str),
                    None | Some("") | Some("default-scheduler")
                ) =>
            {
                let first_seen = record.pods.get(uid(pod)).map(|l| l.first_seen);
                pending.push((first_seen, pod_key(pod), pod.clone()));
            }
            None => {}
        }
    }
    pending.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    for (_, _, pod) in pending {
        let (cpu, memory) = requests(&pod);
        let selector: BTreeMap<String, String> = pod["spec"]["nodeSelector"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                    .collect()
            })
            .unwrap_or_default();
        let tolerations = pod["spec"]["tolerations"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let free = |r: &Room| {
            let f = |(total, used): (i64, i64)| {
                if total == 0 {
                    0.0
                } else {
                    (total - used) as f64 / total as f64
                }
            };
            f(r.cpu) + f(r.memory)
        };
        let best = rooms
            .iter_mut()
            .filter(|r| {
                r.taints
                    .iter()
                    .all(|t| tolerations.iter().any(|tol| tolerates(tol, t)))
            })
            .filter(|r| selector.iter().all(|(k, v)| r.labels.get(k) == Some(v)))
            .filter(|r| {
                r.cpu.1 + cpu <= r.cpu.0
                    && r.memory.1 + memory <= r.memory.0
                    && r.pods.1 + 1000 <= r.pods.0
            })
            .max_by(|a, b| {
                free(a)
                    .total_cmp(&free(b))
                    .then_with(|| b.name.cmp(&a.name))
            });
        let Some(room) = best else {
            mark_unschedulable(store, &pod);
            continue;
        };
        room.cpu.1 += cpu;
        room.memory.1 += memory;
        room.pods.1 += 1000;
        let node = room.name.clone();
        let namespace = str_at(&pod, "/metadata/namespace").to_string();
        let name = str_at(&pod, "/metadata/name").to_string();
        store.modify("Pod", Some(&namespace), &name, |p| {
            p["spec"]["nodeName"] = json!(node);
            p["status"] = json!({
                "phase": "Running",
                "conditions": [
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "Ready", "status": "True"}
                ]
            });
        });
        if let Some(life) = record.pods.get_mut(uid(&pod)) {
            life.bound_at = Some(now);
            life.node = Some(node);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_toleration_matches_as_kubernetes_does() {
        let taint = json!({"key": "dedicated", "value": "gpu", "effect": "NoSchedule"});
        assert!(tolerates(
            &json!({"key": "dedicated", "value": "gpu"}),
            &taint
        ));
        assert!(tolerates(
            &json!({"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}),
            &taint
        ));
        assert!(tolerates(&json!({"operator": "Exists"}), &taint));
        assert!(!tolerates(
            &json!({"key": "dedicated", "value": "cpu"}),
            &taint
        ));
        assert!(!tolerates(
            &json!({"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}),
            &taint
        ));
    }

    #[test]
    fn a_pod_requests_its_containers_sum_or_its_largest_init_container() {
        let pod = json!({"spec": {
            "containers": [
                {"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
                {"resources": {"requests": {"cpu": "250m"}}}
            ],
            "initContainers": [{"resources": {"requests": {"cpu": "2", "memory": "64Mi"}}}]
        }});
        assert_eq!(requests(&pod), (2000, 1024 * 1024 * 1024 * 1000));
    }

    #[test]
    fn selectors_and_budgets_follow_the_api_semantics() {
        let labels = BTreeMap::from([("app".to_string(), "web".to_string())]);
        assert!(selector_matches(&json!({}), &labels));
        assert!(selector_matches(
            &json!({"matchLabels": {"app": "web"}}),
            &labels
        ));
        assert!(!selector_matches(
            &json!({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]}),
            &labels
        ));
        assert_eq!(scaled_up(&json!("50%"), 3), 2);
        assert_eq!(scaled_up(&json!(1), 3), 1);
    }

    #[test]
    fn quantities_are_written_exactly() {
        assert_eq!(quantity("cpu", 3920), "3920m");
        assert_eq!(quantity("memory", 14162 * (1 << 20) * 1000), "14162Mi");
        assert_eq!(quantity("pods", 58_000), "58");
    }
}
