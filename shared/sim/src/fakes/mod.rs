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

use nodewright_core::api::model::{
    CapacityReservationSelectorTerm, Ec2NodeClass, InstanceMatchCriteria, MetadataOptions,
    SelectorTerm, Taint,
};
use nodewright_core::catalog::{CapacityType, Catalog, Reservation, ReservationType};
use nodewright_core::cluster::{Node, Pod, eviction_allowed};
use nodewright_core::nodeclaim::{ClaimState, NodeClaim};
use nodewright_core::well_known::{LABEL_ARCH, LABEL_NODEPOOL};

use nodewright_engine::ports::{
    ClaimStore, Clock, Cloud, CloudError, Cluster, ClusterError, ClusterEvent, ClusterState,
    Condition, Decision, DecisionLog, ErrorKind, IdempotencyKeys, Image, Instance, LaunchError,
    LaunchRequest, Launched, Lease, LeaseStore, NodePatch, ObjectKind, Offering, OfferingBackoff,
    ResolvedNodeClass, StatusUpdate, StoreError, Subnet, ZonalShift,
};

/// Locks a mutex, recovering the data if a panicking test thread poisoned it.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One-shot errors queued per operation, each after letting a number of calls pass;
/// and, once [`Faults::set_rate`] was called, errors at random (seeded) at a rate.
struct Faults<Op, E> {
    queued: HashMap<Op, VecDeque<(usize, E)>>,
    random: Option<RandomFaults>,
}

/// Errors drawn at random: each call fails with probability `rate`, with one of the
/// kinds its operation can really fail with (the fake's `injectable`).
struct RandomFaults {
    rate: f64,
    rng: crate::rng::Rng,
    /// Errors injected so far, per kind (`Throttled`, `Unavailable`, ...).
    injected: BTreeMap<String, usize>,
}

impl<Op: Hash + Eq, E> Default for Faults<Op, E> {
    fn default() -> Self {
        Self {
            queued: HashMap::new(),
            random: None,
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
    /// From now on each call fails with probability `rate` (seeded by `seed`); the
    /// counts carry over a change of rate.
    fn set_rate(&mut self, rate: f64, seed: u64) {
        let injected = self.random.take().map(|r| r.injected).unwrap_or_default();
        self.random = Some(RandomFaults {
            rate,
            rng: crate::rng::Rng::new(seed),
            injected,
        });
    }
    /// A kind of error drawn at random among `kinds` (none: the call cannot fail that
    /// way), with probability the rate; counted.
    fn draw(&mut self, kinds: &[ErrorKind]) -> Option<ErrorKind> {
        let random = self.random.as_mut()?;
        if kinds.is_empty() || !random.rng.chance(random.rate) {
            return None;
        }
        let kind = kinds[random.rng.below(kinds.len())];
        *random.injected.entry(format!("{kind:?}")).or_insert(0) += 1;
        Some(kind)
    }
    /// Takes back the count of a drawn error the fake could not inject faithfully.
    fn undraw(&mut self, kind: ErrorKind) {
        if let Some(n) = self
            .random
            .as_mut()
            .and_then(|r| r.injected.get_mut(&format!("{kind:?}")))
        {
            *n = n.saturating_sub(1);
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

        /// From now on every call fails with probability `rate` (seeded), with an
        /// error its operation can really answer (see `injectable`).
        pub fn inject_faults(&self, rate: f64, seed: u64) {
            lock(&self.inner).faults.set_rate(rate, seed);
        }

        /// Errors injected at random so far, per kind (`Throttled`, ...).
        pub fn injected_faults(&self) -> BTreeMap<String, usize> {
            lock(&self.inner)
                .faults
                .random
                .as_ref()
                .map(|r| r.injected.clone())
                .unwrap_or_default()
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
            inner.faults.take(&op).or_else(|| {
                let kind = inner.faults.draw(injectable(op))?;
                Some(<$err>::new(kind, format!("{op:?}: injected {kind:?}")))
            })
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

mod clock;
mod cloud;
mod cluster;
mod store;

pub use clock::*;
pub use cloud::*;
pub use cluster::*;
pub use store::*;

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_core::nodeclaim::{ClaimSpec, ClaimState};
    use nodewright_core::well_known::{LABEL_HOSTNAME, LABEL_REGION};

    /// A DNS-1123 label, as Kubernetes requires of a pod's name.
    fn is_dns_label(name: &str) -> bool {
        nodewright_core::api::labels::is_dns_label(name, 63)
    }

    #[test]
    fn a_pod_replaced_again_and_again_keeps_a_name_kubernetes_accepts() {
        let mut name = "web-x7k2p".to_string();
        for suffix in ["0a1b2", "zz9y8", "00000"] {
            name = replacement_pod_name(&name, suffix);
            assert!(is_dns_label(&name), "{name}");
        }
        assert_eq!(name, "web-x7k2p-r00000", "the base is kept, not stacked");
        let long = format!("{}-", "a".repeat(70));
        let replaced = replacement_pod_name(&long, "abcde");
        assert!(is_dns_label(&replaced), "{replaced}");
        assert_eq!(replaced.len(), 63);
    }

    fn claim(name: &str) -> NodeClaim {
        NodeClaim::launching(
            ClaimSpec {
                labels: Default::default(),
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
                reservations: vec![],
            },
            offerings,
            prices_overlaid: false,
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

    #[test]
    fn two_instances_whose_first_choice_addresses_collide_get_two_nodes() {
        // Two instance ids that hash to the same 10.x.y.z, found by search.
        let mut seen: HashMap<u64, String> = HashMap::new();
        let (first, second) = (0u64..)
            .map(|n| format!("i-{n:017x}"))
            .find_map(|id| {
                let address = cluster::address_hash(&id) & 0xff_ffff;
                seen.insert(address, id.clone()).map(|before| (before, id))
            })
            .unwrap();
        let cluster = FakeCluster::new(Arc::new(Catalog::embedded().clone()));
        let instance = |id: &str| Instance {
            id: id.into(),
            instance_type: "m5.large".into(),
            zone: "us-east-1a".into(),
            capacity_type: CapacityType::OnDemand,
            state: "running".into(),
            claim_name: None,
            launch_time: 0,
            image_id: None,
            subnet_id: None,
            security_group_ids: vec![],
            capacity_reservation_id: None,
        };
        let a = cluster.register(&instance(&first), &BTreeMap::new(), &[]);
        let b = cluster.register(&instance(&second), &BTreeMap::new(), &[]);
        assert_ne!(a, b, "EC2 gives two live instances two addresses");
        assert_eq!(cluster.nodes().len(), 2, "the first node is still there");
        assert_eq!(
            cluster.node(&a).unwrap().provider_id,
            Some(format!("aws:///us-east-1a/{first}"))
        );
        assert_eq!(
            cluster.register(&instance(&first), &BTreeMap::new(), &[]),
            a,
            "registering again keeps the name"
        );
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
