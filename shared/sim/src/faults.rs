//! Fault injection ([`FaultConfig`], a scenario's `faults` section): what AWS and
//! Kubernetes really do to a controller now and then, drawn from a seeded generator so
//! a run can be repeated exactly.
//!
//! - Errors: each call to a port fails with probability three quarters of its port's
//!   rate, with an error that call can really answer — EC2 throttling and 5xx,
//!   DynamoDB throttling, 500s and conditional writes lost to another writer (the
//!   claim really is written first, one version on), Kubernetes 429, 500 and timeouts.
//!   The fakes draw these themselves (`inject_faults`).
//! - Stalls: the other quarter of the rate, here: a call answers 1–10 s late (virtual
//!   time); an eviction 10–60 s late (a slow eviction); a read of the cluster's state
//!   2–15 s late (its watch dropped and the view is listed afresh: the adapter's
//!   level of abstraction has no stream to cut, only a read that waits for the relist).
//! - Capacity storms: a CreateFleet call, with probability the EC2 rate, finds its two
//!   to four cheapest offerings out of capacity for 2–5 minutes (EC2 then answers
//!   InsufficientInstanceCapacity for them, as it would).
//! - Crashes: every `crash_every` on average (exponential), the invocation of a job
//!   chosen at random (provisioner, interruption, disruption) is killed at one of its
//!   next port calls, before the call or after it took effect: the call never answers
//!   and the runner drops the invocation, leaving its lease to expire, as a killed
//!   Lambda does.
//! - Late events and warm functions frozen between invocations are the queue's and
//!   the runner's ([`super::queue::QueueConfig::late_rate`], [`super::run`]).

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use nodewright_core::api::model::Ec2NodeClass;
use nodewright_core::catalog::{CapacityType, Catalog};
use nodewright_core::cluster::Pod;
use nodewright_core::nodeclaim::{ClaimState, NodeClaim};
use nodewright_core::repair::ImpairedInstance;

use crate::fakes::FakeCloud;
use nodewright_engine::context::Ports;
use nodewright_engine::ports::{
    ClaimStore, Clock, Cloud, CloudError, Cluster, ClusterError, ClusterEvent, ClusterState,
    Decision, DecisionLog, IdempotencyKeys, Instance, LaunchError, LaunchRequest, Launched, Lease,
    LeaseStore, MirrorReport, NodePatch, ObjectKind, Offering, OfferingBackoff, ResolvedNodeClass,
    StatusUpdate, StoreError,
};

use super::rng::Rng;

/// A scenario's `faults`: rates per call, the mean interval between crashes, a seed.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultConfig {
    /// Probability that a call fails or stalls, on every port unless set per port.
    pub rate: f64,
    /// Mean virtual time between two crashes (none: no crash).
    pub crash_every: Option<Duration>,
    pub seed: u64,
    pub ec2: Option<f64>,
    pub dynamodb: Option<f64>,
    pub kubernetes: Option<f64>,
    /// Faults stop this long after the start (none: they last the whole run), so that
    /// the end state shows what the jobs made of them once things are calm again.
    pub until: Option<Duration>,
}

impl Default for FaultConfig {
    fn default() -> Self {
        FaultConfig {
            rate: 0.05,
            crash_every: None,
            seed: 1,
            ec2: None,
            dynamodb: None,
            kubernetes: None,
            until: None,
        }
    }
}

impl FaultConfig {
    pub fn ec2_rate(&self) -> f64 {
        self.ec2.unwrap_or(self.rate)
    }
    pub fn dynamodb_rate(&self) -> f64 {
        self.dynamodb.unwrap_or(self.rate)
    }
    pub fn kubernetes_rate(&self) -> f64 {
        self.kubernetes.unwrap_or(self.rate)
    }
}

/// Faults injected, per kind (the summary's `faults`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FaultCounts {
    pub ec2_throttled: usize,
    pub ec2_unavailable: usize,
    /// Capacity storms, and the offerings they took.
    pub capacity_storms: usize,
    pub storm_offerings: usize,
    pub dynamodb_throttled: usize,
    pub dynamodb_unavailable: usize,
    /// Claim updates another writer got to first.
    pub dynamodb_conflicts: usize,
    pub kubernetes_throttled: usize,
    pub kubernetes_unavailable: usize,
    /// Calls that answered late (slow evictions and dropped watches apart).
    pub stalls: usize,
    pub slow_evictions: usize,
    pub watch_drops: usize,
    /// Invocations killed, per job.
    pub crashes: BTreeMap<String, usize>,
    /// Events delivered late (after newer ones).
    pub late_events: usize,
    /// Warm functions frozen between invocations.
    pub freezes: usize,
}

impl FaultCounts {
    pub fn crashes_total(&self) -> usize {
        self.crashes.values().sum()
    }
}

/// The three functions, whose invocations a crash kills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Job {
    Provisioner,
    Interruption,
    Disruption,
}

impl Job {
    pub fn as_str(self) -> &'static str {
        match self {
            Job::Provisioner => "provisioner",
            Job::Interruption => "interruption",
            Job::Disruption => "disruption",
        }
    }
}

/// One invocation under way: which function, and how the runner hears of its death.
struct Invocation {
    job: Job,
    killed: tokio::sync::Notify,
}

tokio::task_local! {
    static INVOCATION: Arc<Invocation>;
}

/// Runs one invocation of `job`; `None` when a crash killed it (its future dropped
/// where it stood, as Lambda ends a killed invocation).
pub async fn invoke<F: Future>(job: Job, fut: F) -> Option<F::Output> {
    let invocation = Arc::new(Invocation {
        job,
        killed: tokio::sync::Notify::new(),
    });
    let scoped = INVOCATION.scope(invocation.clone(), fut);
    tokio::select! {
        biased;
        _ = invocation.killed.notified() => None,
        out = scoped => Some(out),
    }
}

/// The crash to come: which function, after how many more of its calls.
struct ArmedCrash {
    job: Job,
    calls_left: u32,
}

/// What happens to one call.
enum Gate {
    Go,
    /// The invocation dies before the call is made.
    CrashBefore,
    /// The call takes effect, and the invocation dies before the answer.
    CrashAfter,
}

#[derive(Debug, Clone, Copy)]
enum Port {
    Ec2,
    Dynamodb,
    Kubernetes,
}

/// (instance type, zone, capacity type).
pub type OfferingKey = (String, String, CapacityType);

struct ChaosState {
    rng: Rng,
    counts: FaultCounts,
    armed: Option<ArmedCrash>,
    /// Storms in force: when each ends, and its offerings.
    storms: Vec<(i64, Vec<OfferingKey>)>,
    /// Instance id → successful TerminateInstances calls of ours that named it.
    terminations: HashMap<String, usize>,
}

/// The faults of one run, shared by the ports' wrappers and the runner.
pub struct Chaos {
    config: FaultConfig,
    clock: Arc<dyn Clock>,
    /// Unix seconds after which nothing more is injected.
    until: i64,
    state: Mutex<ChaosState>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Chaos {
    pub fn new(config: FaultConfig, clock: Arc<dyn Clock>, until: i64) -> Arc<Chaos> {
        let seed = config.seed;
        Arc::new(Chaos {
            config,
            clock,
            until,
            state: Mutex::new(ChaosState {
                rng: Rng::new(seed ^ 0xc4a0_5eed),
                counts: FaultCounts::default(),
                armed: None,
                storms: Vec::new(),
                terminations: HashMap::new(),
            }),
        })
    }

    pub fn config(&self) -> &FaultConfig {
        &self.config
    }

    /// Whether faults are still being injected.
    pub fn active(&self) -> bool {
        self.clock.now() < self.until
    }

    /// The counts so far (the fakes' errors are added by the runner).
    pub fn counts(&self) -> FaultCounts {
        lock(&self.state).counts.clone()
    }

    /// Runs `f` with the generator.
    pub fn with_rng<R>(&self, f: impl FnOnce(&mut Rng) -> R) -> R {
        f(&mut lock(&self.state).rng)
    }

    /// Counts one late event or one freeze.
    pub fn count(&self, f: impl FnOnce(&mut FaultCounts)) {
        f(&mut lock(&self.state).counts)
    }

    /// Virtual seconds to the next crash: exponential around `crash_every`.
    pub fn next_crash_in(&self) -> Option<Duration> {
        let mean = self.config.crash_every?.as_secs_f64();
        let u = self.with_rng(|r| r.unit());
        Some(Duration::from_secs_f64((-mean * (1.0 - u).ln()).max(1.0)))
    }

    /// Arms a crash: the invocation of a function chosen at random dies at one of its
    /// next 0–29 port calls.
    pub fn arm_crash(&self) {
        let mut s = lock(&self.state);
        let job = s
            .rng
            .one_of([Job::Provisioner, Job::Interruption, Job::Disruption]);
        let calls_left = s.rng.below(30) as u32;
        s.armed = Some(ArmedCrash { job, calls_left });
    }

    /// How long a freeze of a warm function lasts, if one starts now (probability a
    /// tenth of the rate per invocation): 1–5 minutes.
    pub fn freeze(&self) -> Option<Duration> {
        if !self.active() {
            return None;
        }
        let mut s = lock(&self.state);
        if !s.rng.chance(self.config.rate / 10.0) {
            return None;
        }
        s.counts.freezes += 1;
        Some(Duration::from_secs(s.rng.range(60, 300) as u64))
    }

    /// Capacity storms whose time is over, taken off the list.
    pub fn storms_over(&self, now: i64) -> Vec<OfferingKey> {
        let mut s = lock(&self.state);
        let (over, left): (Vec<_>, Vec<_>) = s.storms.drain(..).partition(|(end, _)| *end <= now);
        s.storms = left;
        over.into_iter().flat_map(|(_, o)| o).collect()
    }

    /// Instances TerminateInstances was sent for more than once.
    pub fn double_terminations(&self) -> Vec<String> {
        let mut out: Vec<String> = lock(&self.state)
            .terminations
            .iter()
            .filter(|(_, n)| **n > 1)
            .map(|(id, _)| id.clone())
            .collect();
        out.sort();
        out
    }

    fn rate(&self, port: Port) -> f64 {
        match port {
            Port::Ec2 => self.config.ec2_rate(),
            Port::Dynamodb => self.config.dynamodb_rate(),
            Port::Kubernetes => self.config.kubernetes_rate(),
        }
    }

    /// Before a call of `op` on `port`: maybe a stall, maybe the invocation's death.
    async fn gate(&self, port: Port, op: &str) -> Gate {
        let crash = INVOCATION
            .try_with(|inv| inv.job)
            .ok()
            .and_then(|job| self.crash_due(job));
        if let Some(gate) = crash {
            return gate;
        }
        if !self.active() {
            return Gate::Go;
        }
        let stall = {
            let mut s = lock(&self.state);
            if s.rng.chance(self.rate(port) / 4.0) {
                let (lo, hi) = match op {
                    "evict_pod" => {
                        s.counts.slow_evictions += 1;
                        (10, 60)
                    }
                    "state" => {
                        s.counts.watch_drops += 1;
                        (2, 15)
                    }
                    _ => {
                        s.counts.stalls += 1;
                        (1, 10)
                    }
                };
                Some(s.rng.range(lo, hi))
            } else {
                None
            }
        };
        if let Some(secs) = stall {
            self.clock.sleep(Duration::from_secs(secs as u64)).await;
        }
        Gate::Go
    }

    fn crash_due(&self, job: Job) -> Option<Gate> {
        let mut s = lock(&self.state);
        let armed = s.armed.as_mut()?;
        if armed.job != job {
            return None;
        }
        if armed.calls_left > 0 {
            armed.calls_left -= 1;
            return None;
        }
        s.armed = None;
        *s.counts
            .crashes
            .entry(job.as_str().to_string())
            .or_insert(0) += 1;
        Some(if s.rng.chance(0.5) {
            Gate::CrashAfter
        } else {
            Gate::CrashBefore
        })
    }

    /// A call through the gate: `call` is made unless the invocation dies first; a
    /// dead invocation never gets its answer.
    async fn through<T>(&self, port: Port, op: &str, call: impl Future<Output = T>) -> T {
        match self.gate(port, op).await {
            Gate::Go => call.await,
            Gate::CrashBefore => die().await,
            Gate::CrashAfter => {
                let _answer = call.await;
                die().await
            }
        }
    }
}

/// The invocation dies here: the runner hears of it and drops it.
async fn die<T>() -> T {
    let _ = INVOCATION.try_with(|inv| inv.killed.notify_one());
    std::future::pending().await
}

/// The ports every job runs over, with the faults of `chaos` in front of them.
pub fn faulty_ports(ports: Ports, fake_cloud: Arc<FakeCloud>, chaos: Arc<Chaos>) -> Ports {
    let store = Arc::new(ChaosStore {
        inner: ports.clone(),
        chaos: chaos.clone(),
    });
    Ports {
        cloud: Arc::new(ChaosCloud {
            inner: ports.cloud,
            fake: fake_cloud,
            chaos: chaos.clone(),
        }),
        cluster: Arc::new(ChaosCluster {
            inner: ports.cluster,
            chaos: chaos.clone(),
        }),
        claims: store.clone(),
        leases: store.clone(),
        backoff: store.clone(),
        keys: store.clone(),
        decisions: store,
        clock: ports.clock,
    }
}

struct ChaosCloud {
    inner: Arc<dyn Cloud>,
    fake: Arc<FakeCloud>,
    chaos: Arc<Chaos>,
}

impl ChaosCloud {
    /// With probability the EC2 rate, a launch meets a capacity storm: its two to four
    /// cheapest offerings have no capacity for 2–5 minutes.
    fn maybe_storm(&self, request: &LaunchRequest) {
        if !self.chaos.active() || request.offerings.is_empty() {
            return;
        }
        let now = self.chaos.clock.now();
        let mut s = lock(&self.chaos.state);
        if !s.rng.chance(self.chaos.config.ec2_rate()) {
            return;
        }
        let mut offerings: Vec<&Offering> = request.offerings.iter().collect();
        offerings.sort_by(|a, b| a.price.total_cmp(&b.price));
        let n = s.rng.range(2, 4) as usize;
        let taken: Vec<OfferingKey> = offerings
            .into_iter()
            .take(n)
            .map(|o| (o.instance_type.clone(), o.zone.clone(), o.capacity_type))
            .collect();
        for (t, z, c) in &taken {
            self.fake.set_capacity(t, z, *c, false);
        }
        let end = now + s.rng.range(120, 300);
        s.counts.capacity_storms += 1;
        s.counts.storm_offerings += taken.len();
        s.storms.push((end, taken));
    }
}

#[async_trait]
impl Cloud for ChaosCloud {
    async fn catalog(&self) -> Result<Arc<Catalog>, CloudError> {
        let c = &self.chaos;
        c.through(Port::Ec2, "catalog", self.inner.catalog()).await
    }

    async fn spot_prices(&self) -> Result<BTreeMap<(String, String), f64>, CloudError> {
        let c = &self.chaos;
        c.through(Port::Ec2, "spot_prices", self.inner.spot_prices())
            .await
    }

    async fn resolve_node_class(
        &self,
        node_class: &Ec2NodeClass,
        kubernetes_version: &str,
    ) -> Result<ResolvedNodeClass, CloudError> {
        let call = self
            .inner
            .resolve_node_class(node_class, kubernetes_version);
        self.chaos
            .through(Port::Ec2, "resolve_node_class", call)
            .await
    }

    async fn capacity_reservations(
        &self,
        terms: &[nodewright_core::api::model::CapacityReservationSelectorTerm],
    ) -> Result<Vec<nodewright_core::catalog::Reservation>, CloudError> {
        let call = self.inner.capacity_reservations(terms);
        self.chaos
            .through(Port::Ec2, "capacity_reservations", call)
            .await
    }

    async fn launch(&self, request: &LaunchRequest) -> Result<Launched, LaunchError> {
        let call = async {
            self.maybe_storm(request);
            self.inner.launch(request).await
        };
        self.chaos.through(Port::Ec2, "launch", call).await
    }

    async fn terminate(&self, instance_ids: &[String]) -> Result<(), CloudError> {
        let call = async {
            let result = self.inner.terminate(instance_ids).await;
            if result.is_ok() {
                let mut s = lock(&self.chaos.state);
                for id in instance_ids {
                    *s.terminations.entry(id.clone()).or_insert(0) += 1;
                }
            }
            result
        };
        self.chaos.through(Port::Ec2, "terminate", call).await
    }

    async fn reboot(&self, instance_id: &str) -> Result<(), CloudError> {
        let call = self.inner.reboot(instance_id);
        self.chaos.through(Port::Ec2, "reboot", call).await
    }

    async fn owned_instances(&self) -> Result<Vec<Instance>, CloudError> {
        let c = &self.chaos;
        c.through(Port::Ec2, "owned_instances", self.inner.owned_instances())
            .await
    }

    async fn cluster_instances_launched_by_karpenter(&self) -> Result<Vec<Instance>, CloudError> {
        let call = self.inner.cluster_instances_launched_by_karpenter();
        self.chaos
            .through(Port::Ec2, "karpenter_instances", call)
            .await
    }

    async fn impaired_instances(&self) -> Result<Vec<ImpairedInstance>, CloudError> {
        let call = self.inner.impaired_instances();
        self.chaos
            .through(Port::Ec2, "impaired_instances", call)
            .await
    }

    async fn zonal_shifts(&self) -> Result<Vec<nodewright_engine::ports::ZonalShift>, CloudError> {
        let call = self.inner.zonal_shifts();
        self.chaos.through(Port::Ec2, "zonal_shifts", call).await
    }
}

struct ChaosCluster {
    inner: Arc<dyn Cluster>,
    chaos: Arc<Chaos>,
}

#[async_trait]
impl Cluster for ChaosCluster {
    async fn state(&self) -> Result<ClusterState, ClusterError> {
        let c = &self.chaos;
        c.through(Port::Kubernetes, "state", self.inner.state())
            .await
    }

    async fn pods(&self) -> Result<Vec<Pod>, ClusterError> {
        let c = &self.chaos;
        c.through(Port::Kubernetes, "pods", self.inner.pods()).await
    }

    async fn unbound_pods(&self) -> Result<Vec<Pod>, ClusterError> {
        let c = &self.chaos;
        c.through(Port::Kubernetes, "unbound_pods", self.inner.unbound_pods())
            .await
    }

    async fn patch_node(&self, name: &str, patch: &NodePatch) -> Result<(), ClusterError> {
        let call = self.inner.patch_node(name, patch);
        self.chaos
            .through(Port::Kubernetes, "patch_node", call)
            .await
    }

    async fn record_event(&self, event: &ClusterEvent) -> Result<(), ClusterError> {
        let call = self.inner.record_event(event);
        self.chaos
            .through(Port::Kubernetes, "record_event", call)
            .await
    }

    async fn update_status(
        &self,
        kind: ObjectKind,
        name: &str,
        update: &StatusUpdate,
        now: i64,
    ) -> Result<bool, ClusterError> {
        let call = self.inner.update_status(kind, name, update, now);
        self.chaos
            .through(Port::Kubernetes, "update_status", call)
            .await
    }

    async fn kubernetes_version(&self) -> Result<String, ClusterError> {
        let call = self.inner.kubernetes_version();
        self.chaos
            .through(Port::Kubernetes, "kubernetes_version", call)
            .await
    }

    async fn pods_on_node(&self, node: &str) -> Result<Vec<Pod>, ClusterError> {
        let call = self.inner.pods_on_node(node);
        self.chaos
            .through(Port::Kubernetes, "pods_on_node", call)
            .await
    }

    async fn evict_pod(&self, namespace: &str, name: &str) -> Result<(), ClusterError> {
        let call = self.inner.evict_pod(namespace, name);
        self.chaos
            .through(Port::Kubernetes, "evict_pod", call)
            .await
    }

    async fn delete_pod(
        &self,
        namespace: &str,
        name: &str,
        grace_period_seconds: i64,
    ) -> Result<(), ClusterError> {
        let call = self.inner.delete_pod(namespace, name, grace_period_seconds);
        self.chaos
            .through(Port::Kubernetes, "delete_pod", call)
            .await
    }

    async fn delete_node(&self, name: &str) -> Result<(), ClusterError> {
        let call = self.inner.delete_node(name);
        self.chaos
            .through(Port::Kubernetes, "delete_node", call)
            .await
    }

    async fn mirror_claims(&self, claims: &[NodeClaim]) -> Result<MirrorReport, ClusterError> {
        let call = self.inner.mirror_claims(claims);
        self.chaos
            .through(Port::Kubernetes, "mirror_claims", call)
            .await
    }
}

/// Every concern of the store, each through its own inner port.
struct ChaosStore {
    inner: Ports,
    chaos: Arc<Chaos>,
}

#[async_trait]
impl ClaimStore for ChaosStore {
    async fn create_claim(&self, claim: &NodeClaim) -> Result<(), StoreError> {
        let call = self.inner.claims.create_claim(claim);
        self.chaos
            .through(Port::Dynamodb, "create_claim", call)
            .await
    }

    async fn update_claim(
        &self,
        claim: &NodeClaim,
        expected_state: ClaimState,
        expected_version: u64,
    ) -> Result<(), StoreError> {
        let call = self
            .inner
            .claims
            .update_claim(claim, expected_state, expected_version);
        self.chaos
            .through(Port::Dynamodb, "update_claim", call)
            .await
    }

    async fn get_claim(&self, name: &str) -> Result<Option<NodeClaim>, StoreError> {
        let call = self.inner.claims.get_claim(name);
        self.chaos.through(Port::Dynamodb, "get_claim", call).await
    }

    async fn list_claims(&self) -> Result<Vec<NodeClaim>, StoreError> {
        let c = &self.chaos;
        c.through(
            Port::Dynamodb,
            "list_claims",
            self.inner.claims.list_claims(),
        )
        .await
    }

    async fn claims_generation(&self) -> Result<Option<u64>, StoreError> {
        let call = self.inner.claims.claims_generation();
        self.chaos
            .through(Port::Dynamodb, "claims_generation", call)
            .await
    }

    async fn claim_by_instance(&self, instance_id: &str) -> Result<Option<NodeClaim>, StoreError> {
        let call = self.inner.claims.claim_by_instance(instance_id);
        self.chaos
            .through(Port::Dynamodb, "claim_by_instance", call)
            .await
    }
}

#[async_trait]
impl LeaseStore for ChaosStore {
    async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        now: i64,
        ttl: Duration,
    ) -> Result<Option<Lease>, StoreError> {
        let call = self.inner.leases.acquire_lease(name, holder, now, ttl);
        self.chaos
            .through(Port::Dynamodb, "acquire_lease", call)
            .await
    }

    async fn renew_lease(
        &self,
        lease: &Lease,
        now: i64,
        ttl: Duration,
    ) -> Result<Lease, StoreError> {
        let call = self.inner.leases.renew_lease(lease, now, ttl);
        self.chaos
            .through(Port::Dynamodb, "renew_lease", call)
            .await
    }

    async fn release_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        let call = self.inner.leases.release_lease(lease);
        self.chaos
            .through(Port::Dynamodb, "release_lease", call)
            .await
    }

    async fn lease(&self, name: &str) -> Result<Option<Lease>, StoreError> {
        let c = &self.chaos;
        c.through(Port::Dynamodb, "lease", self.inner.leases.lease(name))
            .await
    }
}

#[async_trait]
impl OfferingBackoff for ChaosStore {
    async fn mark_unavailable(&self, offering: &Offering, until: i64) -> Result<(), StoreError> {
        let call = self.inner.backoff.mark_unavailable(offering, until);
        self.chaos
            .through(Port::Dynamodb, "mark_unavailable", call)
            .await
    }

    async fn unavailable_offerings(
        &self,
        now: i64,
    ) -> Result<Vec<(String, String, CapacityType)>, StoreError> {
        let call = self.inner.backoff.unavailable_offerings(now);
        self.chaos
            .through(Port::Dynamodb, "unavailable_offerings", call)
            .await
    }
}

#[async_trait]
impl IdempotencyKeys for ChaosStore {
    async fn claim_idempotency_key(
        &self,
        key: &str,
        now: i64,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let call = self.inner.keys.claim_idempotency_key(key, now, ttl);
        self.chaos
            .through(Port::Dynamodb, "claim_idempotency_key", call)
            .await
    }

    async fn idempotency_key_exists(&self, key: &str, now: i64) -> Result<bool, StoreError> {
        let call = self.inner.keys.idempotency_key_exists(key, now);
        self.chaos
            .through(Port::Dynamodb, "idempotency_key_exists", call)
            .await
    }
}

#[async_trait]
impl DecisionLog for ChaosStore {
    async fn record_decision(&self, decision: &Decision) -> Result<(), StoreError> {
        let call = self.inner.decisions.record_decision(decision);
        self.chaos
            .through(Port::Dynamodb, "record_decision", call)
            .await
    }

    async fn decisions(&self, since: i64) -> Result<Vec<Decision>, StoreError> {
        let c = &self.chaos;
        c.through(
            Port::Dynamodb,
            "decisions",
            self.inner.decisions.decisions(since),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fakes::{CloudOp, ManualClock};

    #[tokio::test(start_paused = true)]
    async fn a_crash_drops_the_invocation_at_a_port_call_and_the_call_may_have_taken_effect() {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::default());
        let config = FaultConfig {
            rate: 0.0,
            ..FaultConfig::default()
        };
        let chaos = Chaos::new(config, clock, i64::MAX);
        let fake = Arc::new(FakeCloud::new(
            Catalog::embedded().clone(),
            &["us-east-1a"],
            Arc::new(ManualClock::default()),
        ));
        let cloud = ChaosCloud {
            inner: fake.clone(),
            fake: fake.clone(),
            chaos: chaos.clone(),
        };
        // Armed for the provisioner: another function's calls go through.
        lock(&chaos.state).armed = Some(ArmedCrash {
            job: Job::Provisioner,
            calls_left: 1,
        });
        let other = invoke(Job::Disruption, async {
            cloud.owned_instances().await.unwrap();
            cloud.owned_instances().await.unwrap().len()
        })
        .await;
        assert_eq!(other, Some(0));
        let killed = invoke(Job::Provisioner, async {
            cloud.owned_instances().await.unwrap();
            cloud.owned_instances().await.unwrap();
            "answered"
        })
        .await;
        assert_eq!(killed, None);
        assert_eq!(chaos.counts().crashes["provisioner"], 1);
        let made = fake.call_counts()[&CloudOp::OwnedInstances];
        assert!(made == 3 || made == 4, "the fatal call made or not: {made}");
        // Disarmed: the next invocation runs to its end.
        let next = invoke(Job::Provisioner, async { cloud.catalog().await.is_ok() }).await;
        assert_eq!(next, Some(true));
    }

    #[tokio::test(start_paused = true)]
    async fn a_storm_takes_the_cheapest_offerings_until_it_is_over() {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::default());
        let config = FaultConfig {
            rate: 1.0,
            ..FaultConfig::default()
        };
        let chaos = Chaos::new(config, clock, i64::MAX);
        let fake = Arc::new(FakeCloud::new(
            Catalog::embedded().clone(),
            &["us-east-1a"],
            Arc::new(ManualClock::default()),
        ));
        let cloud = ChaosCloud {
            inner: fake.clone(),
            fake: fake.clone(),
            chaos: chaos.clone(),
        };
        let offering = |t: &str, price: f64| Offering {
            instance_type: t.into(),
            zone: "us-east-1a".into(),
            capacity_type: CapacityType::OnDemand,
            price,
        };
        let request = LaunchRequest {
            claim_name: "default-aaaaa".into(),
            node_pool: "default".into(),
            node_class: crate::fakes::node_class("default"),
            resolved: ResolvedNodeClass {
                subnets: vec![],
                security_group_ids: vec![],
                images: vec![],
                instance_profile: None,
                reservations: vec![],
            },
            offerings: vec![
                offering("m5.large", 0.096),
                offering("m5.xlarge", 0.192),
                offering("m5.2xlarge", 0.384),
                offering("m5.4xlarge", 0.768),
                offering("m5.8xlarge", 1.536),
            ],
            prices_overlaid: false,
            labels: BTreeMap::new(),
            taints: vec![],
            kubernetes_version: "1.33".into(),
        };
        cloud.maybe_storm(&request);
        let counts = chaos.counts();
        assert_eq!(counts.capacity_storms, 1);
        let taken = counts.storm_offerings;
        assert!((2..=4).contains(&taken), "{taken}");
        // EC2 itself answers: the cheapest with capacity left.
        let launched = fake.launch(&request).await.unwrap();
        assert_eq!(
            launched.instance_type,
            request.offerings[taken].instance_type
        );
        let now = chaos.clock.now();
        assert!(
            chaos.storms_over(now + 119).is_empty(),
            "2 minutes at least"
        );
        assert_eq!(chaos.storms_over(now + 300).len(), taken, "5 at most");
    }
}
