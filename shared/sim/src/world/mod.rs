//! [`World`]: the fakes, plus everything a cluster and EC2 do that no port call does.
//! [`World::step`] is one instant of it, in this order:
//!
//! 1. EC2: instances whose deadline came are taken (`kill_at`: a spot reclaim, a
//!    retirement), drained or not: the node turns NotReady and its pods are lost;
//!    a stop ([`World::stop`]) ends in `stopped`. Every change to `stopping`,
//!    `stopped`, `shutting-down` or `terminated` (nodewright's own terminations
//!    included) is sent to the interruption queue as an EventBridge state-change
//!    notification, as the stack's rule does.
//! 2. Kubelets: a `running` instance registers its node `register_after` its launch,
//!    with the labels and taints it was launched with; the node turns Ready
//!    `ready_after` that.
//! 3. Workload controllers ([`super::workload`]): Deployments to their replica count
//!    of the moment, a DaemonSet pod on every eligible Ready node; pods bound to a node
//!    that no longer exists are garbage-collected (the DaemonSet's go quietly, any
//!    other counts as orphaned).
//! 4. An observer of the jobs' work: every claim's progress (disrupted, draining,
//!    drained, terminated), and every launch checked against the capacity there was:
//!    a launch whose pods all fitted a Ready node, or were already nominated to
//!    another claim in flight, is recorded as unneeded.
//! 5. The binder ([`super::binder`]) binds pending pods; the observer records how long
//!    each waited, and every instant a PodDisruptionBudget had fewer healthy pods than
//!    it requires without an instance having just died.
//!
//! [`World::run`] steps it every `step` of virtual time; the jobs run beside it.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nodewright_core::catalog::{CapacityType, Catalog};
use nodewright_core::cluster::{DaemonSet, Node, Pod, PodFields, ScalableWorkload};
use nodewright_core::default_spread::{SchedulerConfig, apply_defaults_from};
use nodewright_core::nodeclaim::{
    ClaimState, DisruptionCause, NodeClaim, instance_id_from_provider_id,
};

use crate::fakes::{FakeCloud, FakeCluster, MemoryStore, replacement_pod_name};
use nodewright_engine::context::Ports;
use nodewright_engine::ports::{Clock, ClusterState, Instance};

use super::SimClock;
use super::binder::Binder;
use super::cloud::Ec2;
use super::eks::{InstanceSeen, KubeletWrite, Kubelets, Reclaims};
use super::eventbridge::{self, Envelope};
use super::queue::{QueueConfig, SqsQueue};
use super::rng::Rng;
use super::workload::{Deployment, daemonset_pods, live_replicas, scale_live};

mod observer;

use observer::Observations;
pub use observer::{BudgetViolation, Disrupted, Lifetime, PodWait, UnneededLaunch};

/// How the world behaves.
#[derive(Debug, Clone, PartialEq)]
pub struct WorldConfig {
    /// From launch to `running` (EC2's `pending`).
    pub running_after: Duration,
    /// From launch to the kubelet's Node object (boot, nodeadm, kubelet start).
    pub register_after: Duration,
    /// From registration to Ready (CNI up).
    pub ready_after: Duration,
    /// From `stopping` to `stopped`.
    pub stop_after: Duration,
    /// From RebootInstances to the node Ready again with a new boot id.
    pub reboot_after: Duration,
    /// How often the world acts.
    pub step: Duration,
    /// The interruption queue.
    pub queue: QueueConfig,
    /// Seeds event ids and duplicate deliveries.
    pub seed: u64,
    /// The cluster's kube-scheduler default topology spread: the binder gives it to pods
    /// without constraints of their own, and the functions run with it as the stack's
    /// `SchedulerConfig` (configured to match the cluster, as an operator does).
    pub scheduler_config: SchedulerConfig,
}

impl Default for WorldConfig {
    fn default() -> Self {
        WorldConfig {
            running_after: Duration::from_secs(8),
            register_after: Duration::from_secs(20),
            ready_after: Duration::from_secs(10),
            stop_after: Duration::from_secs(10),
            reboot_after: Duration::from_secs(90),
            step: Duration::from_secs(1),
            queue: QueueConfig::default(),
            seed: 1,
            scheduler_config: SchedulerConfig::default(),
        }
    }
}

/// The world's own bookkeeping between steps (what its kubelets, EC2 and controllers
/// remember), and what the observer recorded.
#[derive(Default)]
struct Observed {
    /// Every instance's kubelet.
    kubelets: Kubelets,
    /// Nodes whose instance reboots: node → when it is back.
    rebooting: BTreeMap<String, i64>,
    /// Reboots so far.
    reboots: usize,
    /// The last look at the claims found one on its way somewhere.
    claims_in_motion: bool,
    /// The store's claim generation at the last look at the claims.
    claims_seen_at: Option<u64>,
    pending_since: HashMap<String, i64>,
    /// The instances EC2 takes back (after a notice), and when.
    reclaims: Reclaims,
    /// Instance → when its stop completes.
    stopping: BTreeMap<String, i64>,
    /// Last state seen per instance.
    states: HashMap<String, String>,
    /// Replica count last applied per Deployment (by its place in `deployments`).
    replicas: Vec<Option<u32>>,
    /// The cluster's generation after the last step that found nothing to do: while
    /// it holds (and no Deployment's count moves), kube-scheduler, the controllers and
    /// the budgets would find the same again ([`World::step`]).
    settled: Option<u64>,
    /// Instances not terminated, with their states, as of the last step.
    live: Vec<Instance>,
    next_pod: u64,
    /// What the observer saw ([`observer`]).
    seen: Observations,
}

pub struct World {
    pub clock: Arc<SimClock>,
    /// EC2's API state (what was launched, terminated, reclaimed).
    pub cloud: Arc<FakeCloud>,
    /// The same EC2 with instance states over time: what the jobs call.
    pub ec2: Arc<Ec2>,
    pub cluster: Arc<FakeCluster>,
    pub store: Arc<MemoryStore>,
    /// EventBridge → SQS: the interruption function's input.
    pub queue: Arc<SqsQueue>,
    pub config: WorldConfig,
    region: String,
    started_at: i64,
    rng: Mutex<Rng>,
    deployments: Mutex<Vec<Deployment>>,
    observed: Mutex<Observed>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A world time (Unix seconds) as the [`eks`](crate::eks) model counts it.
fn since_epoch(unix_seconds: i64) -> Duration {
    Duration::from_secs(u64::try_from(unix_seconds).unwrap_or(0))
}

fn secs(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}

/// Instance id of a node, from its providerID.
fn instance_of(node: &Node) -> Option<String> {
    node.provider_id
        .as_deref()
        .and_then(instance_id_from_provider_id)
        .map(str::to_string)
}

/// EventBridge forwards these state changes to the queue (the stack's rule).
const REPORTED_STATES: [&str; 4] = ["stopping", "stopped", "shutting-down", "terminated"];

impl World {
    /// An empty cluster over `catalog` in `zones`, its clock reading `base` now.
    pub fn new(catalog: Catalog, zones: &[&str], base: i64, config: WorldConfig) -> Arc<World> {
        let clock = Arc::new(SimClock::new(base));
        let cloud = Arc::new(FakeCloud::new(catalog.clone(), zones, clock.clone()));
        let ec2 = Arc::new(Ec2::new(cloud.clone(), clock.clone(), config.running_after));
        let cluster = Arc::new(FakeCluster::new(Arc::new(catalog)));
        cluster.recreate_evicted_pods(true);
        let region = zones
            .first()
            .map(|z| {
                z.trim_end_matches(|c: char| c.is_ascii_lowercase())
                    .to_string()
            })
            .unwrap_or_else(|| "us-east-1".into());
        let observed = Observed {
            kubelets: Kubelets::new(config.register_after, config.ready_after),
            ..Observed::default()
        };
        Arc::new(World {
            clock,
            cloud,
            ec2,
            cluster,
            store: Arc::new(MemoryStore::new()),
            queue: Arc::new(SqsQueue::new(config.queue.clone(), config.seed ^ 0x5153)),
            region,
            started_at: base,
            rng: Mutex::new(Rng::new(config.seed)),
            config,
            deployments: Mutex::new(Vec::new()),
            observed: Mutex::new(observed),
        })
    }

    /// The ports every job runs over: EC2 with instance states over time, the cluster,
    /// the store and the virtual clock.
    pub fn ports(&self) -> Ports {
        Ports::new(
            self.ec2.clone(),
            self.cluster.clone(),
            self.store.clone(),
            self.clock.clone(),
        )
    }

    pub fn now(&self) -> i64 {
        self.clock.now()
    }

    /// Seconds since the world began.
    pub fn elapsed(&self) -> i64 {
        self.now() - self.started_at
    }

    pub fn started_at(&self) -> i64 {
        self.started_at
    }

    pub fn region(&self) -> &str {
        &self.region
    }

    /// Adds a Deployment (and its PodDisruptionBudget); its controller acts from the
    /// next step.
    pub fn add_deployment(&self, deployment: Deployment) {
        let replica_set = deployment.replica_set();
        let budget = deployment.budget.clone();
        self.cluster.with_state(|s| {
            s.controllers.push(replica_set);
            s.pdbs.extend(budget);
        });
        lock(&self.deployments).push(deployment);
    }

    /// A node running before the simulation, Ready. One of Karpenter's (`node_pool`
    /// set) has its instance in EC2, billed at `price`, and its kubelet up and
    /// reporting. Another tool's node stays in the cluster as it is, its instance
    /// neither simulated nor billed: nothing here ever acts on it.
    pub fn add_running_node(
        &self,
        running: &crate::scenario::RunningNode,
        price: f64,
    ) -> Option<Instance> {
        let now = self.now();
        let mut node = running.node.clone();
        node.created_at = node.created_at.or(Some(running.launched_at));
        node.ready_since = node.ready_since.or(Some(now));
        let name = node.name.clone();
        let instance = running.node_pool.as_ref().map(|pool| {
            let claim = node
                .labels
                .get(nodewright_core::well_known::LABEL_NODECLAIM)
                .cloned();
            let instance = self.cloud.insert_karpenter_instance(
                &running.instance_type,
                &running.zone,
                running.capacity_type,
                pool,
                claim.as_deref(),
                running.launched_at,
            );
            self.cloud.set_price(&instance.id, price);
            node.provider_id = Some(format!("aws:///{}/{}", instance.zone, instance.id));
            node.boot_id = Some(format!("{}-boot-0", instance.id));
            instance
        });
        self.cluster.add_node(node);
        self.cluster.set_ready(&name);
        if let Some(instance) = &instance {
            let mut o = lock(&self.observed);
            o.kubelets.registered(&instance.id, &name, since_epoch(now));
            o.kubelets
                .done(&KubeletWrite::Ready { node: name }, since_epoch(now));
        }
        instance
    }

    pub fn add_daemonset(&self, daemonset: DaemonSet) {
        self.cluster.with_state(|s| s.daemonsets.push(daemonset));
    }

    /// Runs `f` with the world's random number generator (seeded).
    pub fn with_rng<R>(&self, f: impl FnOnce(&mut Rng) -> R) -> R {
        f(&mut lock(&self.rng))
    }

    /// A line for the timeline.
    pub fn log(&self, message: impl Into<String>) {
        let now = self.now();
        lock(&self.observed).seen.log.push((now, message.into()));
    }

    /// A moment worth marking on a chart, with a short label ("spot interruption").
    pub fn mark(&self, label: impl Into<String>) {
        let now = self.now();
        lock(&self.observed).seen.marks.push((now, label.into()));
    }

    /// The marks so far: (when, label), in order.
    pub fn marks(&self) -> Vec<(i64, String)> {
        lock(&self.observed).seen.marks.clone()
    }

    /// EC2 takes `instance` at `at`, whatever state its drain is in (it was told).
    pub fn kill_at(&self, instance: &str, at: i64) {
        lock(&self.observed)
            .reclaims
            .take_at(instance, since_epoch(at));
    }

    /// Someone stops `instance` now, without notice: `stopping` at once, `stopped`
    /// `stop_after` later; its pods die with it.
    pub fn stop(&self, instance: &str) {
        self.ec2.set_state(instance, "stopping");
        let done = self.now() + secs(self.config.stop_after);
        let killed = self.lose_node_of(instance);
        let mut o = lock(&self.observed);
        o.stopping.insert(instance.to_string(), done);
        o.seen
            .stops
            .push((instance.to_string(), done - secs(self.config.stop_after)));
        o.seen.killed_pods.extend(killed);
    }

    /// The kubelet of `node` stops reporting (the instance keeps running): after its
    /// grace the node lifecycle controller sets Ready Unknown and taints the node
    /// `node.kubernetes.io/unreachable`, so nothing new is scheduled there. Its pods
    /// stay bound, not running, until the node is repaired.
    pub fn kubelet_stops(&self, node: &str, now: i64) {
        use nodewright_core::api::model::{Taint, TaintEffect};
        use nodewright_core::cluster::ConditionStatus;
        self.cluster
            .set_condition(node, "Ready", ConditionStatus::Unknown, now);
        self.cluster.with_state(|s| {
            if let Some(n) = s.nodes.iter_mut().find(|n| n.name == node) {
                for effect in [TaintEffect::NoSchedule, TaintEffect::NoExecute] {
                    let taint = Taint {
                        key: "node.kubernetes.io/unreachable".into(),
                        value: None,
                        effect,
                    };
                    if !n.taints.contains(&taint) {
                        n.taints.push(taint);
                    }
                }
            }
        });
    }

    /// The node monitoring agent reports NVIDIA XID `xid` on `node`: its
    /// `AcceleratedHardwareReady` condition turns False (reason `NVIDIAXID<xid>Error`).
    pub fn gpu_fault(&self, node: &str, xid: u32, now: i64) {
        use nodewright_core::cluster::ConditionStatus;
        self.cluster.set_condition_with_reason(
            node,
            "AcceleratedHardwareReady",
            ConditionStatus::False,
            Some(&format!("NVIDIAXID{xid}Error")),
            now,
        );
    }

    /// Instances rebooted so far (RebootInstances the world carried out).
    pub fn reboots(&self) -> usize {
        lock(&self.observed).reboots
    }

    /// RebootInstances: the node's kubelet goes down (Ready Unknown) and comes back
    /// `reboot_after` later with a new boot id, its GPU fault cleared, Ready again.
    fn reboots_due(&self, now: i64) {
        use nodewright_core::cluster::ConditionStatus;
        for (instance, _) in self.cloud.take_reboots() {
            let node = self.cluster.with_state(|s| {
                s.nodes
                    .iter()
                    .find(|n| instance_of(n).as_deref() == Some(instance.as_str()))
                    .map(|n| n.name.clone())
            });
            let Some(node) = node else { continue };
            self.cluster
                .set_condition(&node, "Ready", ConditionStatus::Unknown, now);
            let back = now + secs(self.config.reboot_after);
            let mut o = lock(&self.observed);
            o.rebooting.insert(node.clone(), back);
            o.reboots += 1;
            o.seen
                .log
                .push((now, format!("{node} ({instance}) rebooting")));
        }
        let back: Vec<String> = {
            let mut o = lock(&self.observed);
            let due: Vec<String> = o
                .rebooting
                .iter()
                .filter(|(_, at)| **at <= now)
                .map(|(n, _)| n.clone())
                .collect();
            for n in &due {
                o.rebooting.remove(n);
            }
            due
        };
        for node in back {
            self.cluster.with_state(|s| {
                if let Some(n) = s.nodes.iter_mut().find(|n| n.name == node) {
                    let boots = n
                        .boot_id
                        .as_deref()
                        .and_then(|b| b.rsplit('-').next())
                        .and_then(|k| k.parse::<u32>().ok())
                        .unwrap_or(0);
                    let stem = instance_of(n).unwrap_or_default();
                    n.boot_id = Some(format!("{stem}-boot-{}", boots + 1));
                }
            });
            self.cluster.set_condition(
                &node,
                "AcceleratedHardwareReady",
                ConditionStatus::True,
                now,
            );
            self.cluster
                .set_condition(&node, "Ready", ConditionStatus::True, now);
            self.log(format!("{node} back from its reboot, Ready"));
        }
    }

    /// `kubectl scale nodepool`: the static NodePool's `spec.replicas` becomes
    /// `replicas` (through the scale subresource, as the API server applies it). The
    /// replicas it had; `None` when no static NodePool has that name.
    pub fn scale_node_pool(&self, name: &str, replicas: u32) -> Option<u32> {
        self.cluster.with_state(|s| {
            let pool = s
                .node_pools
                .iter_mut()
                .find(|p| p.name == name && p.is_static())?;
            pool.replicas.replace(replicas)
        })
    }

    fn envelope(&self) -> Envelope {
        Envelope {
            id: self.with_rng(Rng::uuid),
            time: self.now(),
            region: self.region.clone(),
        }
    }

    /// EC2 warns that it takes the spot `instance` in two minutes, and will.
    /// Returns the deadline.
    pub fn spot_interruption(&self, instance: &str) -> i64 {
        let e = self.envelope();
        let deadline = e.time + nodewright_core::interruption::SPOT_NOTICE_SECONDS;
        self.queue
            .send(eventbridge::spot_interruption(&e, instance), e.time);
        self.kill_at(instance, deadline);
        deadline
    }

    /// The owner of the interruptible capacity reservation `instance` runs in takes it
    /// back: the reservation shrinks by one, EC2 warns, and takes the instance two
    /// minutes later. Returns the deadline; `None` (nothing sent) when the instance is
    /// in no interruptible reservation.
    pub fn reservation_interruption(&self, instance: &str) -> Option<i64> {
        let zone = self.ec2.reclaim_from_reservation(instance)?;
        let e = self.envelope();
        let deadline = e.time + nodewright_core::interruption::SPOT_NOTICE_SECONDS;
        // A zone id as EC2 writes one (`use1-az1` for a zone ending in `a`); the handler
        // reads the instance id.
        let letter = zone.chars().last().filter(char::is_ascii_lowercase);
        let zone_id = format!(
            "use1-az{}",
            letter.map_or(1, |c| u32::from(c) - u32::from('a') + 1)
        );
        self.queue.send(
            eventbridge::capacity_reservation_interruption(&e, instance, &zone_id, deadline),
            e.time,
        );
        self.kill_at(instance, deadline);
        Some(deadline)
    }

    /// EC2 recommends rebalancing `instance` (it is at elevated risk; nothing is taken).
    pub fn rebalance_recommendation(&self, instance: &str) {
        let e = self.envelope();
        self.queue
            .send(eventbridge::rebalance_recommendation(&e, instance), e.time);
    }

    /// AWS Health schedules the retirement of `instances` at `start`, and EC2 retires
    /// them then.
    pub fn scheduled_change(&self, instances: &[String], start: i64) {
        let e = self.envelope();
        self.queue
            .send(eventbridge::scheduled_change(&e, instances, start), e.time);
        for i in instances {
            self.kill_at(i, start);
        }
    }

    /// Steps the world every `config.step` until `until` (Unix seconds).
    pub async fn run(&self, until: i64) {
        while self.now() < until {
            self.step();
            tokio::time::sleep(self.config.step).await;
        }
        self.step();
    }

    /// One instant of the world (see the module documentation for the order).
    pub fn step(&self) {
        let now = self.now();
        let died_now = self.reclaim_due(now);
        self.finish_stops(now);
        let launched = self.report_instance_states(now);
        self.reboots_due(now);
        self.kubelets(now);
        let claims = self.claims_to_observe(now, launched);
        // Nothing moved since a step that found nothing to do: the controllers and
        // kube-scheduler would find the same, and the budgets read as they did. A quiet
        // hour of a large cluster is thousands of such steps, each a pass over every pod.
        let generation = self.cluster.generation();
        let settled = lock(&self.observed).settled == Some(generation);
        if settled && !self.replicas_due(now - self.started_at) {
            if let Some(claims) = &claims {
                self.cluster
                    .with_state_read(|state| self.observe_claims(now, state, claims));
            }
            self.observe_budgets_again(now, died_now);
            return;
        }
        // The controllers, the observer and the binder work on the cluster's state in
        // place, under its lock, as one instant: nothing else acts in between.
        let changed = self.cluster.edit_state(|state| {
            let mut changed = self.workloads(now, state);
            if let Some(claims) = &claims {
                self.observe_claims(now, state, claims);
            }
            changed |= self.bind(now, state);
            self.observe_budgets(now, died_now, state);
            changed
        });
        lock(&self.observed).settled = (!changed).then(|| self.cluster.generation());
    }

    /// The claims, when they may have changed in a way the observer must see this
    /// instant: an instance was launched (its launch is checked before the binder
    /// runs), a claim is on its way somewhere, an interruption event is queued; and
    /// every ten seconds regardless (a disruption the reconciler starts).
    fn claims_to_observe(&self, now: i64, launched: bool) -> Option<Vec<NodeClaim>> {
        let busy = lock(&self.observed).claims_in_motion || self.queue.stats().queued > 0;
        if !(launched || busy || now % 10 == 0) {
            return None;
        }
        // Claims no one wrote since the last look read as they did then.
        let generation = self.store.generation();
        if !launched && lock(&self.observed).claims_seen_at == Some(generation) {
            return None;
        }
        lock(&self.observed).claims_seen_at = Some(generation);
        let claims = self.store.claims();
        lock(&self.observed).claims_in_motion = claims
            .iter()
            .any(|c| !c.state.is_terminal() && c.state != ClaimState::Initialized);
        Some(claims)
    }

    fn reclaim_due(&self, now: i64) -> bool {
        let due = lock(&self.observed).reclaims.due(since_epoch(now));
        let mut any = false;
        for id in due {
            if !self.cloud.reclaim(&id) {
                continue;
            }
            any = true;
            let lost = self.lose_node_of(&id);
            let mut o = lock(&self.observed);
            o.seen.died.push(id.clone());
            o.seen.lost_pods.extend(lost);
            o.seen
                .log
                .push((now, format!("EC2 took {id} at its deadline")));
        }
        any
    }

    /// The node of `instance` turns NotReady and its pods die (their controllers
    /// recreate them pending). Returns the pods lost, DaemonSet pods aside.
    fn lose_node_of(&self, instance: &str) -> Vec<String> {
        let Some(node) = self
            .cluster
            .nodes()
            .into_iter()
            .find(|n| instance_of(n).as_deref() == Some(instance))
        else {
            return Vec::new();
        };
        let daemons: HashSet<String> = self
            .cluster
            .snapshot()
            .pods
            .iter()
            .filter(|p| p.daemonset_owned)
            .map(|p| p.key())
            .collect();
        self.cluster
            .lose_node(&node.name)
            .into_iter()
            .filter(|k| !daemons.contains(k))
            .collect()
    }

    fn finish_stops(&self, now: i64) {
        let done: Vec<String> = lock(&self.observed)
            .stopping
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in done {
            lock(&self.observed).stopping.remove(&id);
            if self
                .cloud
                .instance(&id)
                .is_some_and(|i| i.instance.state != "terminated")
            {
                self.ec2.set_state(&id, "stopped");
            }
        }
    }

    /// Sends a state-change notification for every instance whose state changed to one
    /// the stack's rule forwards, and keeps the billing record of each instance.
    /// `true` if an instance was launched since the last step.
    fn report_instance_states(&self, now: i64) -> bool {
        // Most steps, the instances are as the last one saw them: nothing to send or
        // bill anew, and no copy of every instance to make.
        if self.ec2.live_instances_are(&lock(&self.observed).live) {
            return false;
        }
        let mut launched = false;
        let current = self.ec2.live_instances();
        let mut sends = Vec::new();
        let mut o = lock(&self.observed);
        let live: HashSet<&str> = current.iter().map(|i| i.id.as_str()).collect();
        // Instances no longer listed were terminated (by nodewright or by EC2).
        let mut gone: Vec<String> = o
            .states
            .iter()
            .filter(|(id, state)| state.as_str() != "terminated" && !live.contains(id.as_str()))
            .map(|(id, _)| id.clone())
            .collect();
        // By id: the timeline of a seed is the same from run to run.
        gone.sort();
        for id in gone {
            let previous = o.states.insert(id.clone(), "terminated".into());
            if let Some(l) = o.seen.lifetimes.get_mut(&id) {
                l.ended_at.get_or_insert(now);
            }
            if !o.seen.died.contains(&id) {
                let what = o
                    .seen
                    .lifetimes
                    .get(&id)
                    .map(|l| l.instance_type.clone())
                    .unwrap_or_default();
                o.seen.log.push((now, format!("{id} ({what}) terminated")));
            }
            // EC2 passes through shutting-down; the rule forwards both.
            if previous.as_deref() != Some("shutting-down") {
                sends.push((id.clone(), "shutting-down"));
            }
            sends.push((id, "terminated"));
        }
        for i in &current {
            // Most instances are as the last step saw them: nothing to write or send (a
            // day of 1,000 nodes is 86,400 steps over each of them).
            let previous = match o.states.get_mut(&i.id) {
                Some(state) if *state == i.state => continue,
                Some(state) => Some(std::mem::replace(state, i.state.clone())),
                None => o.states.insert(i.id.clone(), i.state.clone()),
            };
            if previous.is_none() {
                launched = true;
                let price = self.cloud.instance(&i.id).map_or(0.0, |fi| fi.price);
                o.seen.lifetimes.insert(
                    i.id.clone(),
                    Lifetime {
                        instance: i.id.clone(),
                        instance_type: i.instance_type.clone(),
                        zone: i.zone.clone(),
                        capacity_type: i.capacity_type,
                        price_per_hour: price,
                        launched_at: i.launch_time,
                        ended_at: None,
                    },
                );
            }
            if previous.as_deref() != Some(i.state.as_str())
                && REPORTED_STATES.contains(&i.state.as_str())
            {
                sends.push((
                    i.id.clone(),
                    if i.state == "stopping" {
                        "stopping"
                    } else {
                        "stopped"
                    },
                ));
            }
        }
        o.seen.billed =
            current
                .iter()
                .filter(|i| i.state != "stopped")
                .fold((0, 0.0), |(n, price), i| {
                    let p = o
                        .seen
                        .lifetimes
                        .get(&i.id)
                        .map_or(0.0, |l| l.price_per_hour);
                    (n + 1, price + p)
                });
        o.live = current;
        drop(o);
        for (id, state) in sends {
            let e = self.envelope();
            self.queue
                .send(eventbridge::state_change(&e, &id, state), now);
        }
        launched
    }

    /// The kubelets' step ([`Kubelets`]) on the instances as last reported, applied to
    /// the in-memory cluster.
    fn kubelets(&self, now: i64) {
        let at = since_epoch(now);
        let writes = {
            let o = lock(&self.observed);
            let seen: Vec<InstanceSeen<'_>> = o
                .live
                .iter()
                .map(|i| InstanceSeen {
                    id: &i.id,
                    state: &i.state,
                    up_since: since_epoch(i.launch_time),
                })
                .collect();
            o.kubelets.step(at, &seen)
        };
        for write in writes {
            match &write {
                KubeletWrite::Register { instance } => {
                    let live = lock(&self.observed)
                        .live
                        .iter()
                        .find(|i| &i.id == instance)
                        .cloned();
                    let (Some(i), Some(launched)) = (live, self.cloud.instance(instance)) else {
                        continue;
                    };
                    let name = self.cluster.register(
                        &i,
                        &launched.request.labels,
                        &launched.request.taints,
                    );
                    // The API server stamps the object: expiry (expireAfter) counts from it.
                    self.cluster.with_state(|s| {
                        if let Some(n) = s.nodes.iter_mut().find(|n| n.name == name) {
                            n.created_at = Some(now);
                        }
                    });
                    lock(&self.observed)
                        .kubelets
                        .registered(instance, &name, at);
                    continue;
                }
                KubeletWrite::Ready { node } => {
                    self.cluster.set_ready(node);
                    // The Ready transition: consolidateAfter counts from it.
                    self.cluster.with_state(|s| {
                        if let Some(n) = s.nodes.iter_mut().find(|n| &n.name == node) {
                            n.ready_since = Some(now);
                        }
                    });
                }
                // The in-memory cluster keeps no node leases, and its nodes' health is
                // not read from them: the world loses a node where EC2 takes or stops
                // its instance (`reclaim_due`, `stop`), and a node whose instance
                // nodewright terminated is nodewright's to delete. Nothing to write.
                KubeletWrite::Heartbeat { .. } | KubeletWrite::Stop { .. } => {}
            }
            lock(&self.observed).kubelets.done(&write, at);
        }
    }

    /// Whether some Deployment wants another replica count now than it was last given.
    fn replicas_due(&self, elapsed: i64) -> bool {
        let deployments = lock(&self.deployments);
        let o = lock(&self.observed);
        deployments.len() != o.replicas.len()
            || deployments
                .iter()
                .zip(&o.replicas)
                .any(|(d, last)| *last != Some(d.replicas_at(elapsed)))
    }

    /// Deployments, DaemonSets and the pod garbage collector, on `state` in place.
    /// Returns whether it changed anything.
    fn workloads(&self, now: i64, state: &mut ClusterState) -> bool {
        let elapsed = now - self.started_at;
        let deployments = lock(&self.deployments).clone();
        let mut created: Vec<Pod> = Vec::new();
        let mut deleted: HashSet<String> = HashSet::new();
        let live = live_replicas(&deployments, &state.pods);
        let mut counts_moved = false;
        for (i, (d, live)) in deployments.iter().zip(live).enumerate() {
            let wanted = d.replicas_at(elapsed);
            let logged = {
                let mut o = lock(&self.observed);
                if o.replicas.len() <= i {
                    o.replicas.resize(i + 1, None);
                }
                o.replicas[i].replace(wanted)
            };
            if logged != Some(wanted) {
                counts_moved = true;
                // A curve's steps (an autoscaler's day) are too many to tell one by one.
                if !d.autoscaled {
                    self.log(format!(
                        "{}/{} scaled to {wanted} replicas (from {})",
                        d.namespace,
                        d.name,
                        logged.unwrap_or(0)
                    ));
                    if logged.is_some() {
                        self.mark(format!("{} → {wanted}", d.name));
                    }
                }
            }
            let scaling = scale_live(d, live, elapsed, || {
                let mut o = lock(&self.observed);
                o.next_pod += 1;
                pod_suffix(o.next_pod)
            });
            created.extend(scaling.created);
            deleted.extend(scaling.deleted);
        }
        // What a CapacityBuffer's `scalableRef` reads: each Deployment's replicas and
        // its pod template as a chunk (without the volumes that need a claim); made
        // again only when a count moved.
        if counts_moved || state.workloads.len() != deployments.len() {
            state.workloads = deployments
                .iter()
                .map(|d| ScalableWorkload {
                    kind: "Deployment".into(),
                    namespace: d.namespace.clone(),
                    name: d.name.clone(),
                    replicas: Some(i32::try_from(d.replicas_at(elapsed)).unwrap_or(i32::MAX)),
                    template: Ok(Pod::from(PodFields {
                        claims: Default::default(),
                        volume_problem: None,
                        node_name: None,
                        ..PodFields::clone(&d.template)
                    })),
                })
                .collect();
        }
        let node_names: HashSet<&str> = state.nodes.iter().map(|n| n.name.as_str()).collect();
        for p in &state.pods {
            let Some(n) = &p.node_name else { continue };
            if node_names.contains(n.as_str()) {
                continue;
            }
            deleted.insert(p.key());
            if !p.daemonset_owned && !p.terminal {
                // A workload's pod comes back pending, as its controller makes it again.
                let mut again = p.clone();
                again.node_name = None;
                let mut o = lock(&self.observed);
                o.next_pod += 1;
                again.name = replacement_pod_name(&p.name, &pod_suffix(o.next_pod));
                o.seen.orphaned_pods.push(p.key());
                created.push(again);
            }
        }
        let daemons = daemonset_pods(state);
        let changed =
            counts_moved || !deleted.is_empty() || !created.is_empty() || !daemons.is_empty();
        if !deleted.is_empty() {
            state.pods.retain(|p| !deleted.contains(&p.key()));
        }
        state.pods.extend(created);
        state.pods.extend(daemons);
        changed
    }

    /// `pods` as kube-scheduler schedules them: those without topology spread
    /// constraints of their own get the cluster's defaults (copies; none is made when
    /// the cluster has no defaults).
    fn as_scheduled<'a>(&self, state: &ClusterState, pods: Vec<&'a Pod>) -> Vec<Cow<'a, Pod>> {
        let config = &self.config.scheduler_config;
        if config.is_empty() {
            return pods.into_iter().map(Cow::Borrowed).collect();
        }
        let mut copies: Vec<Pod> = pods.into_iter().cloned().collect();
        apply_defaults_from(&mut copies, config, &state.services, &state.controllers);
        copies.into_iter().map(Cow::Owned).collect()
    }

    /// Binds what can be bound, as kube-scheduler: only pods for it (not another
    /// scheduler's); a pod it finds no node for is marked Unschedulable on that first
    /// attempt, and the mark goes when it binds.
    /// Returns whether it bound a pod or marked one.
    fn bind(&self, now: i64, state: &mut ClusterState) -> bool {
        let mut pending: Vec<usize> = (0..state.pods.len())
            .filter(|&i| state.pods[i].is_pending() && state.pods[i].scheduler_name.is_none())
            .collect();
        let mut o = lock(&self.observed);
        if pending.is_empty() {
            o.pending_since.clear();
            o.seen.pending = 0;
            return false;
        }
        let live: HashSet<String> = pending.iter().map(|&i| state.pods[i].key()).collect();
        o.pending_since.retain(|k, _| live.contains(k));
        for &i in &pending {
            o.pending_since.entry(state.pods[i].key()).or_insert(now);
        }
        // kube-scheduler's queue: first come, first served (equal priorities); pods of
        // one instant in the order they were created.
        pending.sort_by_key(|&i| (o.pending_since[&state.pods[i].key()], i));
        let mut bindings = Vec::new();
        {
            let mut binder = Binder::new(state);
            let scheduled =
                self.as_scheduled(state, pending.iter().map(|&i| &state.pods[i]).collect());
            for (&i, pod) in pending.iter().zip(&scheduled) {
                let key = state.pods[i].key();
                let since = *o.pending_since.entry(key.clone()).or_insert(now);
                if let Some(node) = binder.place(pod) {
                    o.pending_since.remove(&key);
                    o.seen.waits.push(PodWait {
                        pod: key,
                        since,
                        bound_at: now,
                    });
                    bindings.push((i, node));
                }
            }
        }
        o.seen.pending = pending.len() - bindings.len();
        let mut changed = !bindings.is_empty();
        for &i in &pending {
            changed |= !state.pods[i].marked_unschedulable;
            state.pods[i].marked_unschedulable = true;
        }
        for (i, node) in bindings {
            state.pods[i].node_name = Some(node);
            state.pods[i].marked_unschedulable = false;
        }
        changed
    }
}

/// Five lowercase alphanumerics from a counter, like a ReplicaSet's pod suffix: an
/// affine map that is one-to-one modulo 36^5 (7,777,777 shares no factor with 36), so
/// no two pods of a run share a name.
fn pod_suffix(n: u64) -> String {
    const ALPHABET: &[u8; 36] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    const SPACE: u64 = 36 * 36 * 36 * 36 * 36;
    let mut x = (n.wrapping_mul(7_777_777).wrapping_add(12_345)) % SPACE;
    let mut out = String::with_capacity(5);
    for _ in 0..5 {
        out.push(char::from(ALPHABET[(x % 36) as usize]));
        x /= 36;
    }
    out
}
