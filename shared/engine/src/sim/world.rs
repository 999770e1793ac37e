//! A world that behaves like an EKS cluster over virtual time, for system tests (and
//! the simulator): the engine's real jobs run against the fakes while the world does
//! what a cluster does between their calls.
//!
//! - [`SimClock`]: virtual time on tokio's paused clock. Every job sleeps through it,
//!   so with a runtime started paused the whole system runs in time order and in
//!   milliseconds: tokio advances to the next timer whenever every task waits.
//! - [`World`]: the fakes plus what no port call does:
//!   - a kubelet: an instance registers its node `register_after` its launch, with the
//!     labels and taints it was launched with (the unregistered taint among them), and
//!     the node turns Ready `ready_after` that;
//!   - a binder like kube-scheduler's: a pending pod goes to a Ready, schedulable node
//!     whose NoSchedule/NoExecute taints it tolerates, whose labels match its node
//!     selector and required node affinity, and with room for its requests — the least
//!     allocated such node, as the default scoring prefers;
//!   - EC2 reclaiming instances at their deadline (`kill_at`), drained or not: the node
//!     turns NotReady and its pods are lost;
//!   - the workload controllers: evicted, deleted and lost pods come back pending
//!     (`FakeCluster::recreate_evicted_pods`, switched on by the world);
//!   - an observer: how long each pod waited from pending to bound, and every instant
//!     a PodDisruptionBudget had fewer healthy pods than it requires without an
//!     instance having died.
//!
//! [`World::run`] steps the world every `step` of virtual time; the jobs under test
//! run beside it (`tokio::join!`).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use nodewright_core::api::model::TaintEffect;
use nodewright_core::catalog::Catalog;
use nodewright_core::cluster::{Node, Pod};
use nodewright_core::nodeclaim::instance_id_from_provider_id;
use nodewright_core::resources::Resources;
use nodewright_core::scheduling::requirements::Requirements;

use crate::context::Ports;
use crate::fakes::{FakeCloud, FakeCluster, MemoryStore};
use crate::ports::Clock;

/// Virtual time: Unix seconds `base` plus the time elapsed on tokio's clock since the
/// world was made. Sleeping is tokio's sleep: real time in a normal runtime, virtual
/// and instant in one started paused.
#[derive(Debug)]
pub struct SimClock {
    base: i64,
    start: tokio::time::Instant,
}

impl SimClock {
    pub fn new(base_unix_seconds: i64) -> Self {
        SimClock {
            base: base_unix_seconds,
            start: tokio::time::Instant::now(),
        }
    }

    /// Milliseconds since the Unix epoch.
    pub fn now_millis(&self) -> i64 {
        self.base * 1000 + i64::try_from(self.start.elapsed().as_millis()).unwrap_or(i64::MAX)
    }
}

#[async_trait]
impl Clock for SimClock {
    fn now(&self) -> i64 {
        self.now_millis().div_euclid(1000)
    }
    async fn sleep(&self, duration: Duration) {
        tokio::time::sleep(duration).await;
    }
}

/// How the world behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorldConfig {
    /// From launch to the kubelet's Node object (boot, nodeadm, kubelet start).
    pub register_after: Duration,
    /// From registration to Ready (CNI up).
    pub ready_after: Duration,
    /// How often the world acts.
    pub step: Duration,
}

impl Default for WorldConfig {
    fn default() -> Self {
        WorldConfig {
            register_after: Duration::from_secs(20),
            ready_after: Duration::from_secs(10),
            step: Duration::from_secs(1),
        }
    }
}

/// A PodDisruptionBudget found with fewer healthy pods than it requires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetViolation {
    pub at: i64,
    pub budget: String,
    pub allowed: i64,
}

#[derive(Default)]
struct Observed {
    registered_at: HashMap<String, i64>,
    pending_since: HashMap<String, i64>,
    /// (pod, seconds from pending to bound), in binding order.
    waits: Vec<(String, i64)>,
    deaths: BTreeMap<String, i64>,
    died: Vec<String>,
    violations: Vec<BudgetViolation>,
    lost_pods: Vec<String>,
}

pub struct World {
    pub clock: Arc<SimClock>,
    pub cloud: Arc<FakeCloud>,
    pub cluster: Arc<FakeCluster>,
    pub store: Arc<MemoryStore>,
    pub config: WorldConfig,
    observed: Mutex<Observed>,
}

fn lock(m: &Mutex<Observed>) -> std::sync::MutexGuard<'_, Observed> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl World {
    /// An empty cluster over `catalog` in `zones`, its clock reading `base` now.
    pub fn new(catalog: Catalog, zones: &[&str], base: i64, config: WorldConfig) -> Arc<World> {
        let clock = Arc::new(SimClock::new(base));
        let cloud = Arc::new(FakeCloud::new(catalog.clone(), zones, clock.clone()));
        let cluster = Arc::new(FakeCluster::new(Arc::new(catalog)));
        cluster.recreate_evicted_pods(true);
        Arc::new(World {
            clock,
            cloud,
            cluster,
            store: Arc::new(MemoryStore::new()),
            config,
            observed: Mutex::new(Observed::default()),
        })
    }

    pub fn ports(&self) -> Ports {
        Ports {
            cloud: self.cloud.clone(),
            cluster: self.cluster.clone(),
            store: self.store.clone(),
            clock: self.clock.clone(),
        }
    }

    pub fn now(&self) -> i64 {
        self.clock.now()
    }

    /// EC2 takes `instance` at `at`, whatever state its drain is in.
    pub fn kill_at(&self, instance: &str, at: i64) {
        lock(&self.observed).deaths.insert(instance.to_string(), at);
    }

    /// Steps the world every `config.step` until `until` (Unix seconds).
    pub async fn run(&self, until: i64) {
        while self.now() < until {
            self.step();
            tokio::time::sleep(self.config.step).await;
        }
        self.step();
    }

    /// One instant of the world: deaths, kubelets, binder, observer.
    pub fn step(&self) {
        let now = self.now();
        let died_now = self.reclaim_due(now);
        self.kubelets(now);
        self.bind(now);
        self.observe_budgets(now, died_now);
    }

    fn reclaim_due(&self, now: i64) -> bool {
        let due: Vec<String> = lock(&self.observed)
            .deaths
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(id, _)| id.clone())
            .collect();
        let mut any = false;
        for id in due {
            lock(&self.observed).deaths.remove(&id);
            if !self.cloud.reclaim(&id) {
                continue;
            }
            any = true;
            let node = self.cluster.nodes().into_iter().find(|n| {
                n.provider_id
                    .as_deref()
                    .and_then(instance_id_from_provider_id)
                    == Some(id.as_str())
            });
            let lost = node
                .map(|n| self.cluster.lose_node(&n.name))
                .unwrap_or_default();
            let mut o = lock(&self.observed);
            o.died.push(id);
            o.lost_pods.extend(lost);
        }
        any
    }

    fn kubelets(&self, now: i64) {
        let registered_for = |n: &Node| {
            n.provider_id
                .as_deref()
                .and_then(instance_id_from_provider_id)
                .map(str::to_string)
        };
        let nodes = self.cluster.nodes();
        let known: std::collections::HashSet<String> =
            nodes.iter().filter_map(registered_for).collect();
        let register_after = secs(self.config.register_after);
        for fi in self.cloud.instances() {
            let i = &fi.instance;
            if i.state != "running" || known.contains(&i.id) || now - i.launch_time < register_after
            {
                continue;
            }
            let name = self
                .cluster
                .register(i, &fi.request.labels, &fi.request.taints);
            lock(&self.observed).registered_at.insert(name, now);
        }
        let ready_after = secs(self.config.ready_after);
        let alive: std::collections::HashSet<String> =
            self.cloud.running().into_iter().map(|i| i.id).collect();
        for n in self.cluster.nodes() {
            let Some(at) = lock(&self.observed).registered_at.get(&n.name).copied() else {
                continue;
            };
            let instance_alive = registered_for(&n).is_some_and(|id| alive.contains(&id));
            if !n.ready && instance_alive && now - at >= ready_after {
                self.cluster.set_ready(&n.name);
            }
        }
    }

    fn bind(&self, now: i64) {
        let state = self.cluster.snapshot();
        let mut free: Vec<(Node, Resources)> = state
            .nodes
            .iter()
            .filter(|n| n.ready && !n.unschedulable)
            .map(|n| {
                let mut left = n.allocatable.clone();
                for p in state
                    .pods
                    .iter()
                    .filter(|p| !p.terminal && p.node_name.as_deref() == Some(n.name.as_str()))
                {
                    left.sub(&p.requests);
                }
                (n.clone(), left)
            })
            .collect();
        let mut pending: Vec<&Pod> = state.pods.iter().filter(|p| p.is_pending()).collect();
        pending.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        let mut o = lock(&self.observed);
        for pod in pending {
            let key = pod.key();
            let since = *o.pending_since.entry(key.clone()).or_insert(now);
            let best = free
                .iter_mut()
                .filter(|(n, left)| fits(pod, n) && pod.requests.fits_in(left))
                .max_by_key(|(n, left)| (left.get_milli("cpu"), std::cmp::Reverse(n.name.clone())));
            if let Some((node, left)) = best {
                left.sub(&pod.requests);
                if self.cluster.bind_pod(&key, &node.name) {
                    o.pending_since.remove(&key);
                    o.waits.push((key, now - since));
                }
            }
        }
    }

    fn observe_budgets(&self, now: i64, died_now: bool) {
        if died_now {
            return;
        }
        let state = self.cluster.snapshot();
        for pdb in &state.pdbs {
            let allowed = pdb.disruptions_allowed(state.pods.iter());
            if allowed < 0 {
                lock(&self.observed).violations.push(BudgetViolation {
                    at: now,
                    budget: format!("{}/{}", pdb.namespace, pdb.name),
                    allowed,
                });
            }
        }
    }

    /// (pod, seconds it waited from pending to bound), in binding order.
    pub fn waits(&self) -> Vec<(String, i64)> {
        lock(&self.observed).waits.clone()
    }

    /// Pods pending now, with how long they have waited.
    pub fn still_pending(&self) -> Vec<(String, i64)> {
        let now = self.now();
        let o = lock(&self.observed);
        let mut out: Vec<(String, i64)> = self
            .cluster
            .snapshot()
            .pods
            .iter()
            .filter(|p| p.is_pending())
            .map(|p| {
                let key = p.key();
                let since = o.pending_since.get(&key).copied().unwrap_or(now);
                (key, now - since)
            })
            .collect();
        out.sort();
        out
    }

    pub fn budget_violations(&self) -> Vec<BudgetViolation> {
        lock(&self.observed).violations.clone()
    }

    /// Instances EC2 reclaimed at their deadline (not terminated by nodewright).
    pub fn reclaimed(&self) -> Vec<String> {
        lock(&self.observed).died.clone()
    }

    /// Pods lost with a reclaimed instance (they were not drained in time).
    pub fn lost_pods(&self) -> Vec<String> {
        lock(&self.observed).lost_pods.clone()
    }
}

/// Whether kube-scheduler's filters let `pod` onto `node` (resources aside): taints,
/// node selector, required node affinity.
pub fn fits(pod: &Pod, node: &Node) -> bool {
    let tolerated = node
        .taints
        .iter()
        .filter(|t| matches!(t.effect, TaintEffect::NoSchedule | TaintEffect::NoExecute))
        .all(|t| pod.tolerations.iter().any(|tol| tol.tolerates(t)));
    let selected = pod
        .node_selector
        .iter()
        .all(|(k, v)| node.labels.get(k) == Some(v));
    let affinity = pod.required_node_terms.is_empty()
        || pod
            .required_node_terms
            .iter()
            .any(|term| Requirements::from_node_requirements(term).matches_labels(&node.labels));
    tolerated && selected && affinity
}

fn secs(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}
