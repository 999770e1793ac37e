//! In-memory implementations of the ports, faithful enough that the simulator and the
//! tests of every crate can rely on them (modelled on Karpenter's
//! `pkg/cloudprovider/fake`): each keeps a call log, accepts one-shot error injection
//! per operation (`fail_next`), and behaves like the real service where it matters to
//! the engine — CreateFleet's ClientToken idempotency and cheapest-offering choice,
//! DynamoDB's conditional writes, a kubelet that registers with the launch's labels
//! and taints.
//!
//! State sits behind `std::sync::Mutex`: no lock is held across an `.await`, so an
//! async mutex would buy nothing. Every async method first yields to the runtime, as a
//! network call would, so `tokio::join!` of two ticks really interleaves them.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;

use nodewright_core::api::model::{Ec2NodeClass, MetadataOptions, SelectorTerm, Taint};
use nodewright_core::catalog::{
    CapacityType, Catalog, LABEL_CAPACITY_TYPE, LABEL_HOSTNAME, LABEL_INSTANCE_TYPE,
    LABEL_NODEPOOL, LABEL_REGION, LABEL_ZONE,
};
use nodewright_core::cluster::{Node, Pod, eviction_allowed};
use nodewright_core::nodeclaim::{ClaimState, NodeClaim};

use crate::ports::{
    Clock, Cloud, CloudError, Cluster, ClusterError, ClusterEvent, ClusterState, Condition,
    Decision, ErrorKind, Image, Instance, LaunchError, LaunchRequest, Launched, Lease, NodePatch,
    ObjectKind, Offering, ResolvedNodeClass, StatusUpdate, Store, StoreError, Subnet,
};

/// Locks a mutex, recovering the data if a panicking test thread poisoned it.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One-shot errors queued per operation, each after letting a number of calls pass.
struct Faults<Op, E> {
    queued: HashMap<Op, VecDeque<(usize, E)>>,
}

impl<Op: Hash + Eq, E> Default for Faults<Op, E> {
    fn default() -> Self {
        Self {
            queued: HashMap::new(),
        }
    }
}

impl<Op: Hash + Eq, E> Faults<Op, E> {
    fn push(&mut self, op: Op, err: E) {
        self.push_after(op, 0, err);
    }
    /// The call after the next `skip` calls of `op` fails.
    fn push_after(&mut self, op: Op, skip: usize, err: E) {
        self.queued.entry(op).or_default().push_back((skip, err));
    }
    fn take(&mut self, op: &Op) -> Option<E> {
        let queue = self.queued.get_mut(op)?;
        match queue.front_mut() {
            Some((skip, _)) if *skip > 0 => {
                *skip -= 1;
                None
            }
            Some(_) => queue.pop_front().map(|(_, e)| e),
            None => None,
        }
    }
}

/// One logged call: the operation and its key argument (claim name, node name, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call<Op> {
    pub op: Op,
    pub key: String,
}

fn count_calls<Op: Ord + Copy>(calls: &[Call<Op>]) -> BTreeMap<Op, usize> {
    let mut out = BTreeMap::new();
    for c in calls {
        *out.entry(c.op).or_insert(0) += 1;
    }
    out
}

/// The fault-injection and call-log methods every fake offers, over its
/// `inner.faults` and `inner.calls` (one definition instead of one per fake).
macro_rules! recording_api {
    ($op:ty, $err:ty) => {
        /// The next call of `op` fails with `err` (queued: several calls queue several errors).
        pub fn fail_next(&self, op: $op, err: $err) {
            lock(&self.inner).faults.push(op, err);
        }

        /// The call of `op` after the next `skip` ones fails with `err` (crash-at-every-step tests).
        pub fn fail_after(&self, op: $op, skip: usize, err: $err) {
            lock(&self.inner).faults.push_after(op, skip, err);
        }

        pub fn calls(&self) -> Vec<Call<$op>> {
            lock(&self.inner).calls.clone()
        }

        pub fn call_counts(&self) -> BTreeMap<$op, usize> {
            count_calls(&lock(&self.inner).calls)
        }

        pub fn clear_calls(&self) {
            lock(&self.inner).calls.clear();
        }
    };
    // Also `record`: log the call, then return the fault queued for it, if any.
    ($op:ty, $err:ty, record) => {
        recording_api!($op, $err);

        fn record(&self, op: $op, key: impl Into<String>) -> Option<$err> {
            let mut inner = lock(&self.inner);
            inner.calls.push(Call {
                op,
                key: key.into(),
            });
            inner.faults.take(&op)
        }
    };
}

/// splitmix64: spreads a counter into well-mixed bits (ids that look like EC2's).
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

// ----- Clock -------------------------------------------------------------------------

/// Virtual time: `sleep` advances it instantly, so backoff and TTL tests take no time.
#[derive(Debug)]
pub struct ManualClock {
    /// Milliseconds since the Unix epoch.
    millis: AtomicU64,
}

impl ManualClock {
    /// A clock reading `unix_seconds`.
    pub fn new(unix_seconds: i64) -> Self {
        Self {
            millis: AtomicU64::new(u64::try_from(unix_seconds).unwrap_or(0) * 1000),
        }
    }
    pub fn advance(&self, d: Duration) {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        self.millis.fetch_add(ms, Ordering::SeqCst);
    }
    /// Milliseconds since the epoch (finer than `Clock::now`).
    pub fn now_millis(&self) -> u64 {
        self.millis.load(Ordering::SeqCst)
    }
}

impl Default for ManualClock {
    /// 2025-01-01T00:00:00Z.
    fn default() -> Self {
        Self::new(1_735_689_600)
    }
}

#[async_trait]
impl Clock for ManualClock {
    fn now(&self) -> i64 {
        i64::try_from(self.now_millis() / 1000).unwrap_or(i64::MAX)
    }
    async fn sleep(&self, duration: Duration) {
        self.advance(duration);
        tokio::task::yield_now().await;
    }
}

// ----- Cloud -------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CloudOp {
    Catalog,
    SpotPrices,
    ResolveNodeClass,
    Launch,
    Terminate,
    OwnedInstances,
    KarpenterInstances,
}

/// An instance the fake cloud holds, with the request that launched it.
#[derive(Debug, Clone)]
pub struct FakeInstance {
    pub instance: Instance,
    pub price: f64,
    pub request: LaunchRequest,
}

struct CloudInner {
    catalog: Catalog,
    spot_prices: BTreeMap<(String, String), f64>,
    subnets: Vec<Subnet>,
    /// Insertion order kept for stable listings.
    instances: Vec<FakeInstance>,
    /// Instance id → position in `instances`.
    by_id: HashMap<String, usize>,
    /// ClientToken (claim name) → instance id.
    tokens: HashMap<String, String>,
    out_of_capacity: HashSet<(String, String, CapacityType)>,
    /// Ids of the instances Karpenter launched (`insert_karpenter_instance`): not
    /// nodewright's, so not in `owned_instances`.
    karpenter: HashSet<String>,
    faults: Faults<CloudOp, CloudError>,
    calls: Vec<Call<CloudOp>>,
    next_id: u64,
}

/// EC2 in memory: CreateFleet (instant) with ClientToken idempotency, capacity per
/// offering, TerminateInstances, owned-instance listing, and instances Karpenter
/// launched for the cluster.
pub struct FakeCloud {
    inner: Mutex<CloudInner>,
    clock: Arc<dyn Clock>,
    /// Region of the zones, for the names of managed instance profiles.
    region: String,
}

/// The cluster the fakes stand for (the name `node_class` discovers subnets by).
pub const FAKE_CLUSTER: &str = "test-cluster";

impl FakeCloud {
    /// A cloud offering `catalog` in `zones`, one subnet per zone, reading launch
    /// times from `clock`.
    pub fn new(catalog: Catalog, zones: &[&str], clock: Arc<dyn Clock>) -> Self {
        let subnets = zones
            .iter()
            .enumerate()
            .map(|(i, z)| Subnet {
                id: format!("subnet-{:017x}", mix(i as u64) >> 4),
                zone: z.to_string(),
                available_ips: 4091,
            })
            .collect();
        Self {
            inner: Mutex::new(CloudInner {
                catalog,
                spot_prices: BTreeMap::new(),
                subnets,
                instances: Vec::new(),
                by_id: HashMap::new(),
                tokens: HashMap::new(),
                out_of_capacity: HashSet::new(),
                karpenter: HashSet::new(),
                faults: Faults::default(),
                calls: Vec::new(),
                next_id: 1,
            }),
            clock,
            region: zones
                .first()
                .map(|z| z.trim_end_matches(|c: char| c.is_ascii_lowercase()))
                .filter(|r| !r.is_empty())
                .unwrap_or("us-east-1")
                .to_string(),
        }
    }

    /// Replaces the subnets (several per zone, or none in a zone).
    pub fn set_subnets(&self, subnets: Vec<Subnet>) {
        lock(&self.inner).subnets = subnets;
    }

    pub fn set_spot_price(&self, instance_type: &str, zone: &str, price: f64) {
        lock(&self.inner)
            .spot_prices
            .insert((instance_type.to_string(), zone.to_string()), price);
    }

    /// Marks an offering as having (or not having) capacity.
    pub fn set_capacity(
        &self,
        instance_type: &str,
        zone: &str,
        capacity_type: CapacityType,
        available: bool,
    ) {
        let key = (instance_type.to_string(), zone.to_string(), capacity_type);
        let mut inner = lock(&self.inner);
        if available {
            inner.out_of_capacity.remove(&key);
        } else {
            inner.out_of_capacity.insert(key);
        }
    }

    recording_api!(CloudOp, CloudError, record);

    /// Every instance ever launched, terminated ones included.
    pub fn instances(&self) -> Vec<FakeInstance> {
        lock(&self.inner).instances.clone()
    }

    /// Instances not terminated.
    pub fn running(&self) -> Vec<Instance> {
        lock(&self.inner)
            .instances
            .iter()
            .filter(|i| i.instance.state != "terminated")
            .map(|i| i.instance.clone())
            .collect()
    }

    pub fn instance(&self, id: &str) -> Option<FakeInstance> {
        let inner = lock(&self.inner);
        inner.by_id.get(id).map(|&at| inner.instances[at].clone())
    }

    /// Starts an instance outside any launch (another tool's, or a leaked one), tagged
    /// with `claim_name` if given and launched at `launch_time`.
    pub fn insert_instance(
        &self,
        instance_type: &str,
        zone: &str,
        claim_name: Option<&str>,
        launch_time: i64,
    ) -> Instance {
        let mut inner = lock(&self.inner);
        let id = Self::new_id(&mut inner);
        let instance = Instance {
            id,
            instance_type: instance_type.to_string(),
            zone: zone.to_string(),
            capacity_type: CapacityType::OnDemand,
            state: "running".into(),
            claim_name: claim_name.map(str::to_string),
            launch_time,
        };
        let request = LaunchRequest {
            claim_name: claim_name.unwrap_or_default().to_string(),
            node_pool: String::new(),
            node_class: node_class("default"),
            resolved: ResolvedNodeClass {
                subnets: vec![],
                security_group_ids: vec![],
                images: vec![],
                instance_profile: None,
            },
            offerings: vec![],
            labels: BTreeMap::new(),
            taints: vec![],
            kubernetes_version: String::new(),
        };
        let at = inner.instances.len();
        inner.by_id.insert(instance.id.clone(), at);
        inner.instances.push(FakeInstance {
            instance: instance.clone(),
            price: 0.0,
            request,
        });
        instance
    }

    /// EC2 takes the instance away by itself (a spot reclaim at its deadline, a
    /// hardware failure): it is terminated, and no call of ours is logged. `false` if
    /// there is no such running instance.
    pub fn reclaim(&self, id: &str) -> bool {
        let mut inner = lock(&self.inner);
        let Some(&at) = inner.by_id.get(id) else {
            return false;
        };
        let instance = &mut inner.instances[at].instance;
        if instance.state == "terminated" {
            return false;
        }
        instance.state = "terminated".into();
        true
    }

    /// Starts an instance as Karpenter would have launched it for this cluster (tagged
    /// with `karpenter.sh/nodepool` = `node_pool` and, if given, `karpenter.sh/nodeclaim`
    /// = `claim_name`; not nodewright's): listed by
    /// `cluster_instances_launched_by_karpenter`, never by `owned_instances`. Its
    /// kubelet (`FakeCluster::register_from`) registers with Karpenter's labels.
    pub fn insert_karpenter_instance(
        &self,
        instance_type: &str,
        zone: &str,
        capacity_type: CapacityType,
        node_pool: &str,
        claim_name: Option<&str>,
        launch_time: i64,
    ) -> Instance {
        let mut inner = lock(&self.inner);
        let id = Self::new_id(&mut inner);
        let instance = Instance {
            id,
            instance_type: instance_type.to_string(),
            zone: zone.to_string(),
            capacity_type,
            state: "running".into(),
            claim_name: claim_name.map(str::to_string),
            launch_time,
        };
        let mut labels = BTreeMap::from([
            (LABEL_NODEPOOL.to_string(), node_pool.to_string()),
            ("karpenter.sh/registered".to_string(), "true".to_string()),
            ("karpenter.sh/initialized".to_string(), "true".to_string()),
        ]);
        if let Some(claim) = claim_name {
            labels.insert("karpenter.sh/nodeclaim".into(), claim.to_string());
        }
        let request = LaunchRequest {
            claim_name: claim_name.unwrap_or_default().to_string(),
            node_pool: node_pool.to_string(),
            node_class: node_class("default"),
            resolved: ResolvedNodeClass {
                subnets: vec![],
                security_group_ids: vec![],
                images: vec![],
                instance_profile: None,
            },
            offerings: vec![],
            labels,
            taints: vec![],
            kubernetes_version: String::new(),
        };
        let at = inner.instances.len();
        inner.by_id.insert(instance.id.clone(), at);
        inner.karpenter.insert(instance.id.clone());
        inner.instances.push(FakeInstance {
            instance: instance.clone(),
            price: 0.0,
            request,
        });
        instance
    }

    /// Sets an instance's state ("stopped", "shutting-down", ...) as EC2 would change it.
    pub fn set_state(&self, id: &str, state: &str) -> bool {
        let mut inner = lock(&self.inner);
        match inner.by_id.get(id).copied() {
            Some(at) => {
                inner.instances[at].instance.state = state.to_string();
                true
            }
            None => false,
        }
    }

    fn new_id(inner: &mut CloudInner) -> String {
        let n = inner.next_id;
        inner.next_id += 1;
        // "i-" + 17 lowercase hex digits, like current EC2 ids.
        format!("i-0{:016x}", mix(n))
    }
}

#[async_trait]
impl Cloud for FakeCloud {
    async fn catalog(&self) -> Result<Catalog, CloudError> {
        tokio::task::yield_now().await;
        if let Some(e) = self.record(CloudOp::Catalog, "") {
            return Err(e);
        }
        Ok(lock(&self.inner).catalog.clone())
    }

    async fn spot_prices(&self) -> Result<BTreeMap<(String, String), f64>, CloudError> {
        tokio::task::yield_now().await;
        if let Some(e) = self.record(CloudOp::SpotPrices, "") {
            return Err(e);
        }
        Ok(lock(&self.inner).spot_prices.clone())
    }

    async fn resolve_node_class(
        &self,
        node_class: &Ec2NodeClass,
        _kubernetes_version: &str,
    ) -> Result<ResolvedNodeClass, CloudError> {
        tokio::task::yield_now().await;
        if let Some(e) = self.record(CloudOp::ResolveNodeClass, node_class.name.clone()) {
            return Err(e);
        }
        let subnets = lock(&self.inner).subnets.clone();
        Ok(ResolvedNodeClass {
            subnets,
            security_group_ids: vec!["sg-0123456789abcdef0".into()],
            images: vec![
                Image {
                    id: "ami-0aaaaaaaaaaaaaaa1".into(),
                    arch: "amd64".into(),
                },
                Image {
                    id: "ami-0aaaaaaaaaaaaaaa2".into(),
                    arch: "arm64".into(),
                },
            ],
            // As Ec2Cloud: `instanceProfile` as written, else the managed one for the role.
            instance_profile: node_class.instance_profile_for(FAKE_CLUSTER, &self.region),
        })
    }

    async fn launch(&self, request: &LaunchRequest) -> Result<Launched, LaunchError> {
        tokio::task::yield_now().await;
        if let Some(e) = self.record(CloudOp::Launch, request.claim_name.clone()) {
            return Err(LaunchError::Cloud(e));
        }
        let now = self.clock.now();
        let mut inner = lock(&self.inner);
        // ClientToken: the same token returns the instance it launched the first time.
        if let Some(id) = inner.tokens.get(&request.claim_name).cloned() {
            if let Some(existing) = inner.instances.iter().find(|i| i.instance.id == id) {
                return Ok(Launched {
                    instance_id: existing.instance.id.clone(),
                    instance_type: existing.instance.instance_type.clone(),
                    zone: existing.instance.zone.clone(),
                    capacity_type: existing.instance.capacity_type,
                    price: existing.price,
                    unavailable: vec![],
                });
            }
        }
        if request.offerings.is_empty() {
            return Err(LaunchError::Cloud(CloudError::new(
                ErrorKind::Invalid,
                format!(
                    "CreateFleet for {}: no launch template overrides",
                    request.claim_name
                ),
            )));
        }
        if let Some(unknown) = request
            .offerings
            .iter()
            .find(|o| inner.catalog.get(&o.instance_type).is_none())
        {
            return Err(LaunchError::Cloud(CloudError::new(
                ErrorKind::Invalid,
                format!(
                    "CreateFleet for {}: invalid instance type {}",
                    request.claim_name, unknown.instance_type
                ),
            )));
        }
        let subnet_zones: HashSet<&str> = inner.subnets.iter().map(|s| s.zone.as_str()).collect();
        let mut order: Vec<&Offering> = request.offerings.iter().collect();
        order.sort_by(|a, b| a.price.total_cmp(&b.price));
        let mut refused = Vec::new();
        let mut chosen = None;
        for o in order {
            let key = (o.instance_type.clone(), o.zone.clone(), o.capacity_type);
            if !subnet_zones.contains(o.zone.as_str()) || inner.out_of_capacity.contains(&key) {
                refused.push(o.clone());
            } else {
                chosen = Some(o.clone());
                break;
            }
        }
        let Some(o) = chosen else {
            let message = format!(
                "CreateFleet for {}: InsufficientInstanceCapacity for {}",
                request.claim_name,
                refused
                    .iter()
                    .map(|o| format!("{}/{}/{}", o.instance_type, o.zone, o.capacity_type))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            return Err(LaunchError::InsufficientCapacity {
                offerings: refused,
                message,
            });
        };
        let id = Self::new_id(&mut inner);
        let instance = Instance {
            id: id.clone(),
            instance_type: o.instance_type.clone(),
            zone: o.zone.clone(),
            capacity_type: o.capacity_type,
            state: "running".into(),
            claim_name: Some(request.claim_name.clone()),
            launch_time: now,
        };
        inner.tokens.insert(request.claim_name.clone(), id.clone());
        let at = inner.instances.len();
        inner.by_id.insert(id.clone(), at);
        inner.instances.push(FakeInstance {
            instance,
            price: o.price,
            request: request.clone(),
        });
        Ok(Launched {
            instance_id: id,
            instance_type: o.instance_type,
            zone: o.zone,
            capacity_type: o.capacity_type,
            price: o.price,
            unavailable: refused,
        })
    }

    async fn terminate(&self, instance_ids: &[String]) -> Result<(), CloudError> {
        tokio::task::yield_now().await;
        if let Some(e) = self.record(CloudOp::Terminate, instance_ids.join(",")) {
            return Err(e);
        }
        let mut inner = lock(&self.inner);
        // TerminateInstances is all-or-nothing on unknown ids.
        if let Some(unknown) = instance_ids
            .iter()
            .find(|id| !inner.by_id.contains_key(*id))
        {
            return Err(CloudError::new(
                ErrorKind::NotFound,
                format!("TerminateInstances: InvalidInstanceID.NotFound {unknown}"),
            ));
        }
        for id in instance_ids {
            if let Some(&at) = inner.by_id.get(id) {
                inner.instances[at].instance.state = "terminated".into();
            }
        }
        Ok(())
    }

    async fn owned_instances(&self) -> Result<Vec<Instance>, CloudError> {
        tokio::task::yield_now().await;
        if let Some(e) = self.record(CloudOp::OwnedInstances, "") {
            return Err(e);
        }
        let inner = lock(&self.inner);
        Ok(inner
            .instances
            .iter()
            .filter(|i| {
                i.instance.state != "terminated" && !inner.karpenter.contains(&i.instance.id)
            })
            .map(|i| i.instance.clone())
            .collect())
    }

    async fn cluster_instances_launched_by_karpenter(&self) -> Result<Vec<Instance>, CloudError> {
        tokio::task::yield_now().await;
        if let Some(e) = self.record(CloudOp::KarpenterInstances, "") {
            return Err(e);
        }
        let inner = lock(&self.inner);
        Ok(inner
            .instances
            .iter()
            .filter(|i| {
                inner.karpenter.contains(&i.instance.id)
                    && matches!(
                        i.instance.state.as_str(),
                        "pending" | "running" | "stopping" | "stopped"
                    )
            })
            .map(|i| i.instance.clone())
            .collect())
    }
}

/// A minimal valid EC2NodeClass (al2023@latest, role "KarpenterNodeRole").
pub fn node_class(name: &str) -> Ec2NodeClass {
    Ec2NodeClass {
        name: name.to_string(),
        ami_selector_terms: vec![nodewright_core::api::model::AmiSelectorTerm::Alias {
            family: "al2023".into(),
            version: "latest".into(),
        }],
        ami_family: Some("AL2023".into()),
        subnet_selector_terms: vec![SelectorTerm::Tags(BTreeMap::from([(
            "karpenter.sh/discovery".to_string(),
            "test-cluster".to_string(),
        )]))],
        security_group_selector_terms: vec![SelectorTerm::Tags(BTreeMap::from([(
            "karpenter.sh/discovery".to_string(),
            "test-cluster".to_string(),
        )]))],
        role: Some("KarpenterNodeRole".into()),
        instance_profile: None,
        user_data: None,
        block_device_mappings: vec![],
        metadata_options: MetadataOptions::default(),
        tags: BTreeMap::new(),
        kubelet: Default::default(),
        associate_public_ip_address: None,
        detailed_monitoring: false,
    }
}

// ----- Cluster -----------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ClusterOp {
    State,
    Pods,
    PatchNode,
    RecordEvent,
    KubernetesVersion,
    PodsOnNode,
    EvictPod,
    DeletePod,
    DeleteNode,
    UpdateStatus,
}

/// A condition as the fake stores it: what the engine set, and when its status last
/// changed (Unix seconds, the `now` of the update that changed it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCondition {
    pub condition: Condition,
    pub last_transition_time: i64,
}

/// The `status` of a NodePool or EC2NodeClass as written through `update_status`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ObjectStatus {
    /// Sorted by type, as Karpenter keeps them.
    pub conditions: Vec<StoredCondition>,
    pub fields: serde_json::Map<String, serde_json::Value>,
}

impl ObjectStatus {
    pub fn condition(&self, type_: &str) -> Option<&StoredCondition> {
        self.conditions.iter().find(|c| c.condition.type_ == type_)
    }

    /// `update` applied at `now` (the port's merge rules); `None` when it changes nothing.
    fn updated(&self, update: &StatusUpdate, now: i64) -> Option<ObjectStatus> {
        let mut next = self.clone();
        for wanted in &update.conditions {
            match next
                .conditions
                .iter_mut()
                .find(|c| c.condition.type_ == wanted.type_)
            {
                Some(stored) => {
                    if stored.condition.status != wanted.status {
                        stored.last_transition_time = now;
                    }
                    stored.condition = wanted.clone();
                }
                None => next.conditions.push(StoredCondition {
                    condition: wanted.clone(),
                    last_transition_time: now,
                }),
            }
        }
        next.conditions
            .sort_by(|a, b| a.condition.type_.cmp(&b.condition.type_));
        for (key, value) in &update.fields {
            if value.is_null() {
                next.fields.remove(key);
            } else {
                next.fields.insert(key.clone(), value.clone());
            }
        }
        (next != *self).then_some(next)
    }
}

type PodKey = (String, String);

/// Where each pod sits in `state.pods`, and which pods each node holds: evictions at
/// the scale of the interruption benchmark (45,000 pods) must not scan the list.
/// Rebuilt lazily after any change made behind its back (`with_state`, `add_pod`...).
#[derive(Default)]
struct PodIndex {
    by_key: HashMap<PodKey, usize>,
    by_node: HashMap<String, HashSet<PodKey>>,
    /// Node name → position in `state.nodes`.
    nodes: HashMap<String, usize>,
}

impl PodIndex {
    fn build(state: &ClusterState) -> Self {
        let mut index = PodIndex::default();
        for (i, p) in state.pods.iter().enumerate() {
            index.insert(p, i);
        }
        index.nodes = state
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), i))
            .collect();
        index
    }
    fn insert(&mut self, p: &Pod, i: usize) {
        let key = (p.namespace.clone(), p.name.clone());
        if let Some(node) = &p.node_name {
            self.by_node
                .entry(node.clone())
                .or_default()
                .insert(key.clone());
        }
        self.by_key.insert(key, i);
    }
}

struct ClusterInner {
    state: ClusterState,
    events: Vec<ClusterEvent>,
    statuses: BTreeMap<(ObjectKind, String), ObjectStatus>,
    faults: Faults<ClusterOp, ClusterError>,
    calls: Vec<Call<ClusterOp>>,
    index: Option<PodIndex>,
    /// Pods deleted through `delete_pod`: (namespace/name, grace period seconds).
    pod_deletions: Vec<(String, i64)>,
    /// A workload controller recreates evicted or deleted pods (not DaemonSet pods) as
    /// pending pods with a new name.
    recreate: bool,
    recreated: u64,
}

impl ClusterInner {
    fn index(&mut self) -> &mut PodIndex {
        let state = &self.state;
        self.index.get_or_insert_with(|| PodIndex::build(state))
    }

    fn find_node(&mut self, name: &str) -> Option<usize> {
        self.index().nodes.get(name).copied()
    }

    fn find_pod(&mut self, namespace: &str, name: &str) -> Option<usize> {
        self.index()
            .by_key
            .get(&(namespace.to_string(), name.to_string()))
            .copied()
    }

    /// Removes a pod (order of the others may change: swap-remove), and lets the
    /// controller recreate it when asked to.
    fn remove_pod(&mut self, i: usize) -> Pod {
        self.index();
        let pod = self.state.pods.swap_remove(i);
        let key = (pod.namespace.clone(), pod.name.clone());
        if let Some(index) = self.index.as_mut() {
            index.by_key.remove(&key);
            if let Some(node) = &pod.node_name
                && let Some(set) = index.by_node.get_mut(node)
            {
                set.remove(&key);
            }
            if let Some(moved) = self.state.pods.get(i) {
                index
                    .by_key
                    .insert((moved.namespace.clone(), moved.name.clone()), i);
            }
        }
        if self.recreate && !pod.daemonset_owned {
            self.recreated += 1;
            let base = pod
                .name
                .split("-r~")
                .next()
                .unwrap_or(&pod.name)
                .to_string();
            let replacement = Pod {
                name: format!("{base}-r~{:05x}", mix(self.recreated) & 0xfffff),
                node_name: None,
                terminal: false,
                terminating: false,
                ..pod.clone()
            };
            let at = self.state.pods.len();
            if let Some(index) = self.index.as_mut() {
                index.insert(&replacement, at);
            }
            self.state.pods.push(replacement);
        }
        pod
    }
}

/// The Kubernetes API in memory, plus a simulated kubelet (`register`, `set_ready`)
/// and binder (`bind_pod`).
pub struct FakeCluster {
    inner: Mutex<ClusterInner>,
    catalog: Arc<Catalog>,
    version: String,
}

impl FakeCluster {
    /// An empty cluster whose kubelets size nodes from `catalog`.
    pub fn new(catalog: Arc<Catalog>) -> Self {
        Self {
            inner: Mutex::new(ClusterInner {
                state: ClusterState::default(),
                events: Vec::new(),
                statuses: BTreeMap::new(),
                faults: Faults::default(),
                calls: Vec::new(),
                index: None,
                pod_deletions: Vec::new(),
                recreate: false,
                recreated: 0,
            }),
            catalog,
            version: "1.33".into(),
        }
    }

    /// Reads or edits the whole state (add pools, node classes, DaemonSets...).
    pub fn with_state<R>(&self, f: impl FnOnce(&mut ClusterState) -> R) -> R {
        let mut inner = lock(&self.inner);
        inner.index = None;
        f(&mut inner.state)
    }

    /// Evicted and deleted pods (not DaemonSet pods) come back as pending pods named
    /// `<name>-r~<suffix>`, as their ReplicaSet would recreate them, so the provisioner
    /// can be seen replacing the capacity. Off by default.
    pub fn recreate_evicted_pods(&self, on: bool) {
        lock(&self.inner).recreate = on;
    }

    /// Pods deleted through `delete_pod`: (namespace/name, grace period seconds), in order.
    pub fn pod_deletions(&self) -> Vec<(String, i64)> {
        lock(&self.inner).pod_deletions.clone()
    }

    pub fn pod(&self, namespace: &str, name: &str) -> Option<Pod> {
        let mut inner = lock(&self.inner);
        let i = inner.find_pod(namespace, name)?;
        Some(inner.state.pods[i].clone())
    }

    pub fn snapshot(&self) -> ClusterState {
        lock(&self.inner).state.clone()
    }

    pub fn add_pod(&self, pod: Pod) {
        let mut inner = lock(&self.inner);
        let at = inner.state.pods.len();
        if let Some(index) = inner.index.as_mut() {
            index.insert(&pod, at);
        }
        inner.state.pods.push(pod);
    }

    pub fn add_node(&self, node: Node) {
        let mut inner = lock(&self.inner);
        let at = inner.state.nodes.len();
        if let Some(index) = inner.index.as_mut() {
            index.nodes.insert(node.name.clone(), at);
        }
        inner.state.nodes.push(node);
    }

    /// Removes a node (the order of the others may change); false if there was none.
    pub fn remove_node(&self, name: &str) -> bool {
        let mut inner = lock(&self.inner);
        let Some(i) = inner.find_node(name) else {
            return false;
        };
        inner.state.nodes.swap_remove(i);
        let moved = inner.state.nodes.get(i).map(|n| n.name.clone());
        if let Some(index) = inner.index.as_mut() {
            index.nodes.remove(name);
            if let Some(moved) = moved {
                index.nodes.insert(moved, i);
            }
        }
        true
    }

    /// Binds the pod `namespace/name` to `node`; false if there is no such pod.
    pub fn bind_pod(&self, pod_key: &str, node: &str) -> bool {
        let mut inner = lock(&self.inner);
        inner.index = None;
        match inner.state.pods.iter_mut().find(|p| p.key() == pod_key) {
            Some(p) => {
                p.node_name = Some(node.to_string());
                true
            }
            None => false,
        }
    }

    pub fn node(&self, name: &str) -> Option<Node> {
        lock(&self.inner)
            .state
            .nodes
            .iter()
            .find(|n| n.name == name)
            .cloned()
    }

    pub fn nodes(&self) -> Vec<Node> {
        lock(&self.inner).state.nodes.clone()
    }

    pub fn events(&self) -> Vec<ClusterEvent> {
        lock(&self.inner).events.clone()
    }

    /// The status written to a NodePool or EC2NodeClass, if any was.
    pub fn status(&self, kind: ObjectKind, name: &str) -> Option<ObjectStatus> {
        lock(&self.inner)
            .statuses
            .get(&(kind, name.to_string()))
            .cloned()
    }

    /// One condition of a NodePool or EC2NodeClass, if it was set.
    pub fn condition(&self, kind: ObjectKind, name: &str, type_: &str) -> Option<StoredCondition> {
        self.status(kind, name)
            .and_then(|s| s.condition(type_).cloned())
    }

    /// The kubelet of `instance` joins: a NotReady Node named like EC2's private DNS
    /// name, with providerID `aws:///<zone>/<id>`, the launch's labels plus the ones the
    /// kubelet sets itself (instance type, zone, region, capacity type, hostname, arch,
    /// os), and the launch's taints. Returns the node name.
    pub fn register(
        &self,
        instance: &Instance,
        labels: &BTreeMap<String, String>,
        taints: &[Taint],
    ) -> String {
        let h = mix(instance
            .id
            .bytes()
            .fold(0u64, |a, b| a.wrapping_mul(31).wrapping_add(u64::from(b))));
        let name = format!(
            "ip-10-{}-{}-{}.ec2.internal",
            (h >> 16) & 0xff,
            (h >> 8) & 0xff,
            h & 0xff
        );
        let it = self.catalog.get(&instance.instance_type);
        let mut node_labels = BTreeMap::new();
        if let Some(it) = it {
            for key in ["kubernetes.io/arch", "kubernetes.io/os"] {
                if let Some(v) = it.labels.get(key) {
                    node_labels.insert(key.to_string(), v.clone());
                }
            }
        }
        node_labels.extend(labels.clone());
        node_labels.insert(LABEL_INSTANCE_TYPE.into(), instance.instance_type.clone());
        node_labels.insert(LABEL_ZONE.into(), instance.zone.clone());
        let region = instance
            .zone
            .trim_end_matches(|c: char| c.is_ascii_lowercase())
            .to_string();
        node_labels.insert(LABEL_REGION.into(), region);
        node_labels.insert(
            LABEL_CAPACITY_TYPE.into(),
            instance.capacity_type.as_str().into(),
        );
        node_labels.insert(LABEL_HOSTNAME.into(), name.clone());
        let node = Node {
            name: name.clone(),
            labels: node_labels,
            taints: taints.to_vec(),
            allocatable: it.map(|t| t.allocatable.clone()).unwrap_or_default(),
            capacity: it.map(|t| t.capacity.clone()).unwrap_or_default(),
            provider_id: Some(format!("aws:///{}/{}", instance.zone, instance.id)),
            unschedulable: false,
            ready: false,
        };
        let mut inner = lock(&self.inner);
        inner.index = None;
        inner.state.nodes.retain(|n| n.name != name);
        inner.state.nodes.push(node);
        name
    }

    /// Every running instance of `cloud` without a node registers, with the labels and
    /// taints of the request that launched it. Returns the new node names.
    pub fn register_from(&self, cloud: &FakeCloud) -> Vec<String> {
        let known: HashSet<String> = self
            .nodes()
            .iter()
            .filter_map(|n| n.provider_id.clone())
            .collect();
        let mut out = Vec::new();
        for fi in cloud.instances() {
            let i = &fi.instance;
            if i.state == "terminated" || known.contains(&format!("aws:///{}/{}", i.zone, i.id)) {
                continue;
            }
            out.push(self.register(i, &fi.request.labels, &fi.request.taints));
        }
        out
    }

    /// The node's Ready condition turns True; false if there is no such node.
    pub fn set_ready(&self, name: &str) -> bool {
        let mut inner = lock(&self.inner);
        match inner.state.nodes.iter_mut().find(|n| n.name == name) {
            Some(n) => {
                n.ready = true;
                true
            }
            None => false,
        }
    }

    /// The node's instance is gone: the node turns NotReady and the pods on it are
    /// lost (their controllers recreate them, when recreation is on). Returns the pods
    /// lost. The Node object stays until someone deletes it.
    pub fn lose_node(&self, name: &str) -> Vec<String> {
        let mut inner = lock(&self.inner);
        if let Some(i) = inner.find_node(name) {
            inner.state.nodes[i].ready = false;
        }
        let mut lost = Vec::new();
        while let Some(i) = inner
            .state
            .pods
            .iter()
            .position(|p| p.node_name.as_deref() == Some(name))
        {
            let pod = inner.remove_pod(i);
            lost.push(pod.key());
        }
        lost
    }

    /// Removes a taint from a node as its owner (a CNI, a device plugin) would.
    pub fn remove_taint(&self, node: &str, key: &str) {
        let mut inner = lock(&self.inner);
        if let Some(n) = inner.state.nodes.iter_mut().find(|n| n.name == node) {
            n.taints.retain(|t| t.key != key);
        }
    }

    recording_api!(ClusterOp, ClusterError, record);
}

#[async_trait]
impl Cluster for FakeCluster {
    async fn state(&self) -> Result<ClusterState, ClusterError> {
        tokio::task::yield_now().await;
        if let Some(e) = self.record(ClusterOp::State, "") {
            return Err(e);
        }
        Ok(self.snapshot())
    }

    async fn pods(&self) -> Result<Vec<Pod>, ClusterError> {
        tokio::task::yield_now().await;
        if let Some(e) = self.record(ClusterOp::Pods, "") {
            return Err(e);
        }
        Ok(lock(&self.inner).state.pods.clone())
    }

    async fn patch_node(&self, name: &str, patch: &NodePatch) -> Result<(), ClusterError> {
        tokio::task::yield_now().await;
        if let Some(e) = self.record(ClusterOp::PatchNode, name) {
            return Err(e);
        }
        let mut inner = lock(&self.inner);
        let Some(i) = inner.find_node(name) else {
            return Err(ClusterError::new(
                ErrorKind::NotFound,
                format!("nodes \"{name}\" not found"),
            ));
        };
        let node = &mut inner.state.nodes[i];
        node.labels.extend(patch.set_labels.clone());
        node.taints
            .retain(|t| !patch.remove_taints.contains(&t.key));
        for t in &patch.add_taints {
            if !node
                .taints
                .iter()
                .any(|x| x.key == t.key && x.effect == t.effect)
            {
                node.taints.push(t.clone());
            }
        }
        Ok(())
    }

    async fn record_event(&self, event: &ClusterEvent) -> Result<(), ClusterError> {
        tokio::task::yield_now().await;
        if let Some(e) = self.record(
            ClusterOp::RecordEvent,
            format!("{}/{}", event.reason, event.name),
        ) {
            return Err(e);
        }
        lock(&self.inner).events.push(event.clone());
        Ok(())
    }

    /// As the `/status` subresource: the object must exist (valid, or listed in
    /// `invalid_objects`); conditions merge by type, keeping `lastTransitionTime`
    /// unless the status flips. Generations are not modelled.
    async fn update_status(
        &self,
        kind: ObjectKind,
        name: &str,
        update: &StatusUpdate,
        now: i64,
    ) -> Result<bool, ClusterError> {
        tokio::task::yield_now().await;
        if let Some(e) = self.record(ClusterOp::UpdateStatus, format!("{kind}/{name}")) {
            return Err(e);
        }
        let mut inner = lock(&self.inner);
        let state = &inner.state;
        let exists = match kind {
            ObjectKind::NodePool => state.node_pools.iter().any(|p| p.name == name),
            ObjectKind::Ec2NodeClass => state.node_classes.iter().any(|c| c.name == name),
        } || state
            .invalid_objects
            .iter()
            .any(|o| o.kind == kind && o.name == name);
        if !exists {
            return Err(ClusterError::new(
                ErrorKind::NotFound,
                format!("{kind} {name:?} not found"),
            ));
        }
        let key = (kind, name.to_string());
        let current = inner.statuses.get(&key).cloned().unwrap_or_default();
        match current.updated(update, now) {
            Some(next) => {
                inner.statuses.insert(key, next);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    async fn kubernetes_version(&self) -> Result<String, ClusterError> {
        tokio::task::yield_now().await;
        if let Some(e) = self.record(ClusterOp::KubernetesVersion, "") {
            return Err(e);
        }
        Ok(self.version.clone())
    }

    async fn pods_on_node(&self, node: &str) -> Result<Vec<Pod>, ClusterError> {
        tokio::task::yield_now().await;
        if let Some(e) = self.record(ClusterOp::PodsOnNode, node) {
            return Err(e);
        }
        let mut inner = lock(&self.inner);
        let positions: Vec<usize> = {
            let index = inner.index();
            let Some(keys) = index.by_node.get(node) else {
                return Ok(Vec::new());
            };
            keys.iter()
                .filter_map(|k| index.by_key.get(k).copied())
                .collect()
        };
        let mut pods: Vec<Pod> = positions
            .into_iter()
            .map(|i| inner.state.pods[i].clone())
            .collect();
        pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        Ok(pods)
    }

    /// As the eviction subresource: the pod must exist; a running pod selected by a
    /// budget goes only if every such budget allows a disruption now (computed over
    /// the pods as they are: see `core::cluster::eviction_allowed`); otherwise
    /// `DisruptionBudget`. An evicted pod is gone at once (a kubelet would take up to
    /// its grace period).
    async fn evict_pod(&self, namespace: &str, name: &str) -> Result<(), ClusterError> {
        tokio::task::yield_now().await;
        if let Some(e) = self.record(ClusterOp::EvictPod, format!("{namespace}/{name}")) {
            return Err(e);
        }
        let mut inner = lock(&self.inner);
        let Some(i) = inner.find_pod(namespace, name) else {
            return Err(ClusterError::new(
                ErrorKind::NotFound,
                format!("pods \"{name}\" not found"),
            ));
        };
        let pod = &inner.state.pods[i];
        if inner.state.pdbs.iter().any(|b| b.selects(pod))
            && !eviction_allowed(pod, &inner.state.pods, &inner.state.pdbs)
        {
            return Err(ClusterError::new(
                ErrorKind::DisruptionBudget,
                format!(
                    "evicting pod {namespace}/{name}: Cannot evict pod as it would violate the pod's disruption budget."
                ),
            ));
        }
        inner.remove_pod(i);
        Ok(())
    }

    /// Deletes the pod at once whatever the grace period (recorded in `pod_deletions`);
    /// a kubelet would give the containers that long to stop.
    async fn delete_pod(
        &self,
        namespace: &str,
        name: &str,
        grace_period_seconds: i64,
    ) -> Result<(), ClusterError> {
        tokio::task::yield_now().await;
        if let Some(e) = self.record(ClusterOp::DeletePod, format!("{namespace}/{name}")) {
            return Err(e);
        }
        let mut inner = lock(&self.inner);
        let Some(i) = inner.find_pod(namespace, name) else {
            return Err(ClusterError::new(
                ErrorKind::NotFound,
                format!("pods \"{name}\" not found"),
            ));
        };
        inner
            .pod_deletions
            .push((format!("{namespace}/{name}"), grace_period_seconds));
        inner.remove_pod(i);
        Ok(())
    }

    /// Removes the Node object. Pods still bound to it stay (the pod garbage collector
    /// would remove them later).
    async fn delete_node(&self, name: &str) -> Result<(), ClusterError> {
        tokio::task::yield_now().await;
        if let Some(e) = self.record(ClusterOp::DeleteNode, name) {
            return Err(e);
        }
        if self.remove_node(name) {
            Ok(())
        } else {
            Err(ClusterError::new(
                ErrorKind::NotFound,
                format!("nodes \"{name}\" not found"),
            ))
        }
    }
}

// ----- Store -------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StoreOp {
    CreateClaim,
    UpdateClaim,
    GetClaim,
    ListClaims,
    ClaimByInstance,
    AcquireLease,
    RenewLease,
    ReleaseLease,
    MarkUnavailable,
    UnavailableOfferings,
    ClaimIdempotencyKey,
    IdempotencyKeyExists,
    RecordDecision,
    Decisions,
}

#[derive(Default)]
struct StoreInner {
    claims: BTreeMap<String, NodeClaim>,
    leases: HashMap<String, Lease>,
    /// Last fencing token handed out per lease name: survives release.
    tokens: HashMap<String, u64>,
    unavailable: HashMap<(String, String, CapacityType), i64>,
    keys: HashMap<String, i64>,
    /// Instance id → claim name (the GSI).
    by_instance: HashMap<String, String>,
    decisions: Vec<Decision>,
    faults: Faults<StoreOp, StoreError>,
    calls: Vec<Call<StoreOp>>,
}

/// DynamoDB's semantics in memory: conditional claim writes (state, version, and the
/// new version exactly one more), leases with a monotonic fencing token, expiring ICE
/// entries and idempotency keys.
#[derive(Default)]
pub struct MemoryStore {
    inner: Mutex<StoreInner>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    recording_api!(StoreOp, StoreError);

    /// Every claim, without logging a call.
    pub fn claims(&self) -> Vec<NodeClaim> {
        lock(&self.inner).claims.values().cloned().collect()
    }

    pub fn all_decisions(&self) -> Vec<Decision> {
        lock(&self.inner).decisions.clone()
    }

    /// The lease record as stored (held or expired), without logging a call.
    pub fn lease(&self, name: &str) -> Option<Lease> {
        lock(&self.inner).leases.get(name).cloned()
    }

    fn record(
        &self,
        op: StoreOp,
        key: impl Into<String>,
    ) -> Result<MutexGuard<'_, StoreInner>, StoreError> {
        let mut inner = lock(&self.inner);
        inner.calls.push(Call {
            op,
            key: key.into(),
        });
        match inner.faults.take(&op) {
            Some(e) => Err(e),
            None => Ok(inner),
        }
    }
}

fn conflict(message: String) -> StoreError {
    StoreError::new(ErrorKind::Conflict, message)
}

fn ttl_secs(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX)
}

#[async_trait]
impl Store for MemoryStore {
    async fn lease(&self, name: &str) -> Result<Option<Lease>, StoreError> {
        tokio::task::yield_now().await;
        Ok(MemoryStore::lease(self, name))
    }

    async fn create_claim(&self, claim: &NodeClaim) -> Result<(), StoreError> {
        tokio::task::yield_now().await;
        let mut inner = self.record(StoreOp::CreateClaim, claim.name.clone())?;
        if inner.claims.contains_key(&claim.name) {
            return Err(conflict(format!("claim {} already exists", claim.name)));
        }
        if let Some(id) = &claim.instance_id {
            inner.by_instance.insert(id.clone(), claim.name.clone());
        }
        inner.claims.insert(claim.name.clone(), claim.clone());
        Ok(())
    }

    async fn update_claim(
        &self,
        claim: &NodeClaim,
        expected_state: ClaimState,
        expected_version: u64,
    ) -> Result<(), StoreError> {
        tokio::task::yield_now().await;
        let mut inner = self.record(StoreOp::UpdateClaim, claim.name.clone())?;
        // As DynamoStore: a version that does not step by one is a caller's bug
        // (Invalid, checked before anything is read); a claim that is not there fails
        // the condition like any other mismatch (both found by the store contract tests).
        if claim.version != expected_version + 1 {
            return Err(StoreError::new(
                ErrorKind::Invalid,
                format!(
                    "claim {}: new version {} is not {} + 1",
                    claim.name, claim.version, expected_version
                ),
            ));
        }
        let Some(current) = inner.claims.get(&claim.name) else {
            return Err(conflict(format!("claim {} does not exist", claim.name)));
        };
        if current.state != expected_state || current.version != expected_version {
            return Err(conflict(format!(
                "claim {} is {:?} v{}, expected {:?} v{}",
                claim.name, current.state, current.version, expected_state, expected_version
            )));
        }
        if let Some(id) = &claim.instance_id {
            inner.by_instance.insert(id.clone(), claim.name.clone());
        }
        inner.claims.insert(claim.name.clone(), claim.clone());
        Ok(())
    }

    async fn get_claim(&self, name: &str) -> Result<Option<NodeClaim>, StoreError> {
        tokio::task::yield_now().await;
        let inner = self.record(StoreOp::GetClaim, name)?;
        Ok(inner.claims.get(name).cloned())
    }

    async fn list_claims(&self) -> Result<Vec<NodeClaim>, StoreError> {
        tokio::task::yield_now().await;
        let inner = self.record(StoreOp::ListClaims, "")?;
        Ok(inner.claims.values().cloned().collect())
    }

    async fn claim_by_instance(&self, instance_id: &str) -> Result<Option<NodeClaim>, StoreError> {
        tokio::task::yield_now().await;
        let inner = self.record(StoreOp::ClaimByInstance, instance_id)?;
        Ok(inner
            .by_instance
            .get(instance_id)
            .and_then(|name| inner.claims.get(name))
            .filter(|c| c.instance_id.as_deref() == Some(instance_id))
            .cloned())
    }

    async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        now: i64,
        ttl: Duration,
    ) -> Result<Option<Lease>, StoreError> {
        tokio::task::yield_now().await;
        let mut inner = self.record(StoreOp::AcquireLease, format!("{name}:{holder}"))?;
        if let Some(l) = inner.leases.get(name) {
            if l.holder != holder && l.expires_at > now {
                return Ok(None);
            }
        }
        let token = inner.tokens.get(name).copied().unwrap_or(0) + 1;
        inner.tokens.insert(name.to_string(), token);
        let lease = Lease {
            name: name.to_string(),
            holder: holder.to_string(),
            token,
            expires_at: now + ttl_secs(ttl),
        };
        inner.leases.insert(name.to_string(), lease.clone());
        Ok(Some(lease))
    }

    async fn renew_lease(
        &self,
        lease: &Lease,
        now: i64,
        ttl: Duration,
    ) -> Result<Lease, StoreError> {
        tokio::task::yield_now().await;
        let mut inner = self.record(
            StoreOp::RenewLease,
            format!("{}:{}", lease.name, lease.holder),
        )?;
        match inner.leases.get_mut(&lease.name) {
            Some(l) if l.holder == lease.holder && l.token == lease.token => {
                l.expires_at = now + ttl_secs(ttl);
                Ok(l.clone())
            }
            _ => Err(conflict(format!(
                "lease {} (token {}) is no longer held by {}",
                lease.name, lease.token, lease.holder
            ))),
        }
    }

    async fn release_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        tokio::task::yield_now().await;
        let mut inner = self.record(
            StoreOp::ReleaseLease,
            format!("{}:{}", lease.name, lease.holder),
        )?;
        if inner
            .leases
            .get(&lease.name)
            .is_some_and(|l| l.holder == lease.holder && l.token == lease.token)
        {
            inner.leases.remove(&lease.name);
        }
        Ok(())
    }

    async fn mark_unavailable(&self, offering: &Offering, until: i64) -> Result<(), StoreError> {
        tokio::task::yield_now().await;
        let key = (
            offering.instance_type.clone(),
            offering.zone.clone(),
            offering.capacity_type,
        );
        let mut inner = self.record(
            StoreOp::MarkUnavailable,
            format!("{}/{}/{}", key.0, key.1, key.2),
        )?;
        let entry = inner.unavailable.entry(key).or_insert(until);
        *entry = (*entry).max(until);
        Ok(())
    }

    async fn unavailable_offerings(
        &self,
        now: i64,
    ) -> Result<Vec<(String, String, CapacityType)>, StoreError> {
        tokio::task::yield_now().await;
        let inner = self.record(StoreOp::UnavailableOfferings, "")?;
        let mut out: Vec<_> = inner
            .unavailable
            .iter()
            .filter(|(_, until)| **until > now)
            .map(|(k, _)| k.clone())
            .collect();
        out.sort();
        Ok(out)
    }

    async fn claim_idempotency_key(
        &self,
        key: &str,
        now: i64,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        tokio::task::yield_now().await;
        let mut inner = self.record(StoreOp::ClaimIdempotencyKey, key)?;
        if inner.keys.get(key).is_some_and(|expires| *expires > now) {
            return Ok(false);
        }
        inner.keys.insert(key.to_string(), now + ttl_secs(ttl));
        Ok(true)
    }

    async fn idempotency_key_exists(&self, key: &str, now: i64) -> Result<bool, StoreError> {
        tokio::task::yield_now().await;
        let inner = self.record(StoreOp::IdempotencyKeyExists, key)?;
        Ok(inner.keys.get(key).is_some_and(|expires| *expires > now))
    }

    async fn record_decision(&self, decision: &Decision) -> Result<(), StoreError> {
        tokio::task::yield_now().await;
        let mut inner = self.record(StoreOp::RecordDecision, decision.job.clone())?;
        inner.decisions.push(decision.clone());
        Ok(())
    }

    async fn decisions(&self, since: i64) -> Result<Vec<Decision>, StoreError> {
        tokio::task::yield_now().await;
        let inner = self.record(StoreOp::Decisions, "")?;
        Ok(inner
            .decisions
            .iter()
            .filter(|d| d.at >= since)
            .cloned()
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_core::nodeclaim::{ClaimSpec, ClaimState};

    fn claim(name: &str) -> NodeClaim {
        NodeClaim::launching(
            ClaimSpec {
                name: name.into(),
                node_pool: "default".into(),
                node_class: "default".into(),
                instance_type_options: vec!["m5.large".into()],
                zones: vec!["us-east-1a".into()],
                capacity_types: vec![CapacityType::OnDemand],
                pods: vec![],
            },
            0,
        )
    }

    fn request(name: &str, offerings: Vec<Offering>) -> LaunchRequest {
        LaunchRequest {
            claim_name: name.into(),
            node_pool: "default".into(),
            node_class: node_class("default"),
            resolved: ResolvedNodeClass {
                subnets: vec![],
                security_group_ids: vec![],
                images: vec![],
                instance_profile: None,
            },
            offerings,
            labels: BTreeMap::new(),
            taints: vec![],
            kubernetes_version: "1.33".into(),
        }
    }

    fn offering(t: &str, zone: &str, price: f64) -> Offering {
        Offering {
            instance_type: t.into(),
            zone: zone.into(),
            capacity_type: CapacityType::OnDemand,
            price,
        }
    }

    fn cloud() -> FakeCloud {
        FakeCloud::new(
            Catalog::embedded().clone(),
            &["us-east-1a", "us-east-1b"],
            Arc::new(ManualClock::default()),
        )
    }

    #[tokio::test]
    async fn a_conditional_update_checks_state_version_and_the_next_version() {
        let store = MemoryStore::new();
        let c = claim("default-aaaaa");
        store.create_claim(&c).await.unwrap();
        assert_eq!(
            store.create_claim(&c).await.unwrap_err().kind,
            ErrorKind::Conflict
        );
        let next = c.transition(ClaimState::Launched, 1, |_| {}).unwrap();
        assert_eq!(
            store
                .update_claim(&next, ClaimState::Launched, 1)
                .await
                .unwrap_err()
                .kind,
            ErrorKind::Conflict
        );
        assert_eq!(
            store
                .update_claim(&next, ClaimState::Launching, 2)
                .await
                .unwrap_err()
                .kind,
            ErrorKind::Invalid,
            "a version that does not step by one is a caller's bug, as in DynamoStore"
        );
        let mut skipped = next.clone();
        skipped.version = 5;
        assert_eq!(
            store
                .update_claim(&skipped, ClaimState::Launching, 1)
                .await
                .unwrap_err()
                .kind,
            ErrorKind::Invalid
        );
        store
            .update_claim(&next, ClaimState::Launching, 1)
            .await
            .unwrap();
        assert_eq!(
            store
                .get_claim("default-aaaaa")
                .await
                .unwrap()
                .unwrap()
                .state,
            ClaimState::Launched
        );
    }

    #[tokio::test]
    async fn lease_tokens_only_grow_and_a_held_lease_is_refused_to_others() {
        let store = MemoryStore::new();
        let ttl = Duration::from_secs(60);
        let a = store
            .acquire_lease("p", "a", 0, ttl)
            .await
            .unwrap()
            .unwrap();
        assert!(
            store
                .acquire_lease("p", "b", 10, ttl)
                .await
                .unwrap()
                .is_none()
        );
        store.release_lease(&a).await.unwrap();
        let b = store
            .acquire_lease("p", "b", 10, ttl)
            .await
            .unwrap()
            .unwrap();
        assert!(b.token > a.token);
        assert!(store.renew_lease(&a, 11, ttl).await.is_err());
        let c = store
            .acquire_lease("p", "c", 71, ttl)
            .await
            .unwrap()
            .unwrap();
        assert!(c.token > b.token);
        assert!(store.renew_lease(&b, 72, ttl).await.is_err());
    }

    #[tokio::test]
    async fn ice_entries_and_idempotency_keys_expire() {
        let store = MemoryStore::new();
        store
            .mark_unavailable(&offering("m5.large", "us-east-1a", 0.1), 100)
            .await
            .unwrap();
        assert_eq!(store.unavailable_offerings(99).await.unwrap().len(), 1);
        assert!(store.unavailable_offerings(100).await.unwrap().is_empty());
        let ttl = Duration::from_secs(10);
        assert!(store.claim_idempotency_key("e1", 0, ttl).await.unwrap());
        assert!(!store.claim_idempotency_key("e1", 9, ttl).await.unwrap());
        assert!(store.claim_idempotency_key("e1", 10, ttl).await.unwrap());
    }

    #[tokio::test]
    async fn the_same_client_token_returns_the_first_instance() {
        let cloud = cloud();
        let r = request(
            "default-aaaaa",
            vec![offering("m5.large", "us-east-1a", 0.096)],
        );
        let a = cloud.launch(&r).await.unwrap();
        let b = cloud.launch(&r).await.unwrap();
        assert_eq!(a, b);
        assert_eq!(cloud.instances().len(), 1);
        assert!(nodewright_core::nodeclaim::is_instance_id(&a.instance_id));
        assert_eq!(
            cloud.running()[0].claim_name.as_deref(),
            Some("default-aaaaa")
        );
    }

    #[tokio::test]
    async fn launch_picks_the_cheapest_offering_with_capacity_and_reports_the_rest() {
        let cloud = cloud();
        cloud.set_capacity("m5.large", "us-east-1a", CapacityType::OnDemand, false);
        let r = request(
            "default-bbbbb",
            vec![
                offering("m5.xlarge", "us-east-1a", 0.192),
                offering("m5.large", "us-east-1a", 0.096),
            ],
        );
        assert_eq!(cloud.launch(&r).await.unwrap().instance_type, "m5.xlarge");
        cloud.set_capacity("m5.xlarge", "us-east-1a", CapacityType::OnDemand, false);
        let err = cloud
            .launch(&request("default-ccccc", r.offerings.clone()))
            .await
            .unwrap_err();
        match err {
            LaunchError::InsufficientCapacity { offerings, .. } => assert_eq!(offerings.len(), 2),
            other => panic!("{other}"),
        }
    }

    #[tokio::test]
    async fn node_classes_resolve_to_their_instance_profile_as_ec2_cloud_resolves_them() {
        let cloud = cloud();
        let mut class = node_class("default");
        let resolved = cloud.resolve_node_class(&class, "1.33").await.unwrap();
        assert_eq!(
            resolved.instance_profile,
            Some(nodewright_core::api::model::managed_instance_profile_name(
                FAKE_CLUSTER,
                "us-east-1",
                "default"
            ))
        );
        class.role = None;
        class.instance_profile = Some("MyNodeProfile".into());
        let resolved = cloud.resolve_node_class(&class, "1.33").await.unwrap();
        assert_eq!(resolved.instance_profile.as_deref(), Some("MyNodeProfile"));
    }

    #[tokio::test]
    async fn injected_errors_fire_once_and_unknown_ids_are_not_found() {
        let cloud = cloud();
        cloud.fail_next(
            CloudOp::OwnedInstances,
            CloudError::new(ErrorKind::Throttled, "slow down"),
        );
        assert_eq!(
            cloud.owned_instances().await.unwrap_err().kind,
            ErrorKind::Throttled
        );
        assert!(cloud.owned_instances().await.is_ok());
        let err = cloud
            .terminate(&["i-0123456789abcdef0".into()])
            .await
            .unwrap_err();
        assert_eq!(err.kind, ErrorKind::NotFound);
        assert_eq!(cloud.call_counts()[&CloudOp::OwnedInstances], 2);
    }

    #[tokio::test]
    async fn the_kubelet_registers_not_ready_with_the_launch_labels_and_taints() {
        let catalog = Arc::new(Catalog::embedded().clone());
        let cluster = FakeCluster::new(catalog);
        let cloud = cloud();
        let mut r = request(
            "default-ddddd",
            vec![offering("m5.large", "us-east-1b", 0.096)],
        );
        r.labels.insert("team".into(), "a".into());
        r.taints.push(Taint {
            key: "karpenter.sh/unregistered".into(),
            value: None,
            effect: nodewright_core::api::model::TaintEffect::NoExecute,
        });
        let l = cloud.launch(&r).await.unwrap();
        let names = cluster.register_from(&cloud);
        assert_eq!(names.len(), 1);
        let n = cluster.node(&names[0]).unwrap();
        assert!(!n.ready);
        assert_eq!(
            n.provider_id,
            Some(format!("aws:///us-east-1b/{}", l.instance_id))
        );
        assert_eq!(n.labels["team"], "a");
        assert_eq!(n.labels[LABEL_HOSTNAME], names[0]);
        assert_eq!(n.labels[LABEL_REGION], "us-east-1");
        assert_eq!(n.taints.len(), 1);
        assert!(cluster.register_from(&cloud).is_empty());
        assert!(cluster.set_ready(&names[0]));
        let err = cluster
            .patch_node("nope", &NodePatch::default())
            .await
            .unwrap_err();
        assert_eq!(err.kind, ErrorKind::NotFound);
    }
}
