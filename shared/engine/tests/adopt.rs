//! Adopting the nodes Karpenter launched, over the in-memory fakes.

use std::sync::Arc;

use nodewright_core::catalog::{CapacityType, Catalog, DEFAULT_SPOT_FRACTION};
use nodewright_core::cluster::Node;
use nodewright_core::nodeclaim::{ClaimSpec, ClaimState, DisruptionCause, NodeClaim};
use nodewright_core::pricing::Pricing;
use nodewright_core::testing::general_purpose_pool;
use nodewright_engine::ports::ClaimStore;
use nodewright_engine::ports::{
    Clock, Cloud, CloudError, ClusterState, ErrorKind, Instance, StoreError,
};
use nodewright_engine::{
    InstanceAction, InterruptionConfig, InterruptionInput, InterruptionMode, Ports,
    adopt_karpenter_nodes, handle_interruption,
};
use nodewright_sim::fakes::{
    CloudOp, FakeCloud, FakeCluster, ManualClock, MemoryStore, StoreOp, node_class,
};

const ZONES: [&str; 2] = ["us-east-1a", "us-east-1b"];
const POOL: &str = "general-purpose";

struct Env {
    clock: Arc<ManualClock>,
    cloud: Arc<FakeCloud>,
    cluster: Arc<FakeCluster>,
    store: Arc<MemoryStore>,
    ports: Ports,
}

impl Env {
    fn new() -> Self {
        let clock = Arc::new(ManualClock::default());
        let catalog = Catalog::embedded().clone();
        let cloud = Arc::new(FakeCloud::new(catalog.clone(), &ZONES, clock.clone()));
        let cluster = Arc::new(FakeCluster::new(Arc::new(catalog)));
        cluster.with_state(|s| {
            s.node_pools.push(general_purpose_pool());
            s.node_classes.push(node_class("default"));
        });
        let store = Arc::new(MemoryStore::new());
        let ports = Ports::new(cloud.clone(), cluster.clone(), store.clone(), clock.clone());
        Env {
            clock,
            cloud,
            cluster,
            store,
            ports,
        }
    }

    /// An instance Karpenter launched an hour ago, and its Ready node (registered by the
    /// fake kubelet with Karpenter's labels). Returns the instance and the node name.
    fn karpenter_node(
        &self,
        instance_type: &str,
        zone: &str,
        capacity_type: CapacityType,
        nodeclaim: Option<&str>,
    ) -> (Instance, String) {
        let instance = self.cloud.insert_karpenter_instance(
            instance_type,
            zone,
            capacity_type,
            POOL,
            nodeclaim,
            self.clock.now() - 3600,
        );
        let node = self.cluster.register_from(&self.cloud).remove(0);
        assert!(self.cluster.set_ready(&node));
        (instance, node)
    }

    /// One adoption pass as a caller makes it: the store's claims and Karpenter's
    /// instances read first.
    async fn adopt(&self) -> Vec<NodeClaim> {
        let state = self.cluster.snapshot();
        let claims = self.store.list_claims().await.unwrap();
        self.adopt_with(&state, &claims).await.unwrap()
    }

    async fn adopt_with(
        &self,
        state: &ClusterState,
        claims: &[NodeClaim],
    ) -> nodewright_engine::Result<Vec<NodeClaim>> {
        let karpenter = self
            .cloud
            .cluster_instances_launched_by_karpenter()
            .await
            .unwrap();
        adopt_karpenter_nodes(
            &self.ports,
            state,
            claims,
            &karpenter,
            Catalog::embedded(),
            &Pricing::for_zones(ZONES.map(String::from).to_vec()),
            self.clock.now(),
        )
        .await
    }
}

fn m5_large_on_demand() -> f64 {
    Catalog::embedded()
        .get("m5.large")
        .unwrap()
        .on_demand_price
        .unwrap()
}

#[tokio::test]
async fn a_node_karpenter_launched_becomes_an_initialized_claim_recording_its_instance() {
    let env = Env::new();
    let (instance, node) = env.karpenter_node(
        "m5.large",
        "us-east-1b",
        CapacityType::Spot,
        Some("general-purpose-k8r7x"),
    );

    let adopted = env.adopt().await;

    assert_eq!(adopted.len(), 1, "{adopted:?}");
    let claim = env.store.get_claim("general-purpose-k8r7x").await.unwrap();
    assert_eq!(claim.as_ref(), Some(&adopted[0]));
    let claim = claim.unwrap();
    assert_eq!(claim.state, ClaimState::Initialized);
    assert_eq!(claim.version, 1);
    assert_eq!(claim.node_pool, POOL);
    assert_eq!(claim.node_class, "default", "the pool's nodeClassRef");
    assert_eq!(claim.instance_id.as_deref(), Some(instance.id.as_str()));
    assert_eq!(claim.instance_type.as_deref(), Some("m5.large"));
    assert_eq!(claim.zone.as_deref(), Some("us-east-1b"));
    assert_eq!(claim.capacity_type, Some(CapacityType::Spot));
    assert_eq!(claim.node_name.as_deref(), Some(node.as_str()));
    assert_eq!(claim.launched_at, Some(env.clock.now() - 3600));
    let price = claim.price_per_hour.unwrap();
    assert!(
        (price - m5_large_on_demand() * DEFAULT_SPOT_FRACTION).abs() < 1e-12,
        "spot price estimate, got {price}"
    );
    assert_eq!(
        env.store.claim_by_instance(&instance.id).await.unwrap(),
        Some(claim.clone())
    );

    let decisions = env.store.all_decisions();
    assert_eq!(decisions.len(), 1, "{decisions:?}");
    assert_eq!(decisions[0].job, "adopt");
    assert!(decisions[0].action.contains(&node), "{decisions:?}");
    assert!(decisions[0].action.contains(&instance.id), "{decisions:?}");
    assert_eq!(decisions[0].price_per_hour, Some(price));
    // Adopting touches no instance and no node.
    assert_eq!(env.cloud.call_counts().get(&CloudOp::Terminate), None);
    assert_eq!(env.cluster.node(&node).unwrap().taints, vec![]);
}

#[tokio::test]
async fn a_second_pass_adopts_nothing_more() {
    let env = Env::new();
    env.karpenter_node(
        "m5.large",
        "us-east-1a",
        CapacityType::OnDemand,
        Some("general-purpose-aaaaa"),
    );
    env.karpenter_node(
        "m5.xlarge",
        "us-east-1b",
        CapacityType::OnDemand,
        Some("general-purpose-bbbbb"),
    );
    assert_eq!(env.adopt().await.len(), 2);
    let adopted = env.adopt().await;
    assert_eq!(adopted, vec![]);
    assert_eq!(env.store.call_counts()[&StoreOp::CreateClaim], 2);
    assert_eq!(env.store.all_decisions().len(), 2);
    let on_demand = env
        .store
        .get_claim("general-purpose-aaaaa")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(on_demand.price_per_hour, Some(m5_large_on_demand()));
}

#[tokio::test]
async fn a_node_without_a_nodeclaim_label_is_adopted_under_its_own_name() {
    let env = Env::new();
    let (instance, node) = env.karpenter_node("m5.large", "us-east-1a", CapacityType::Spot, None);
    let adopted = env.adopt().await;
    assert_eq!(adopted.len(), 1);
    assert_eq!(adopted[0].name, node);
    assert_eq!(
        adopted[0].instance_id.as_deref(),
        Some(instance.id.as_str())
    );
}

#[tokio::test]
async fn only_nodes_of_instances_karpenter_launched_for_this_cluster_in_an_existing_pool_qualify() {
    let env = Env::new();
    let catalog = Catalog::embedded();

    // 1. A node labelled for a pool whose instance is not Karpenter's (another tool's:
    //    the label alone proves nothing).
    let foreign = env
        .cloud
        .insert_instance("m5.large", "us-east-1a", None, env.clock.now());
    let mut labelled = nodewright_core::testing::node(
        "ip-10-0-0-1.ec2.internal",
        "m5.large",
        "us-east-1a",
        POOL,
        catalog,
    );
    labelled.provider_id = Some(format!("aws:///us-east-1a/{}", foreign.id));
    env.cluster.add_node(labelled);

    // 2. Karpenter's instance, but its NodePool no longer exists.
    let gone_pool = env.cloud.insert_karpenter_instance(
        "m5.large",
        "us-east-1a",
        CapacityType::OnDemand,
        "deleted-pool",
        Some("deleted-pool-xxxxx"),
        env.clock.now(),
    );
    let mut node = nodewright_core::testing::node(
        "ip-10-0-0-2.ec2.internal",
        "m5.large",
        "us-east-1a",
        "deleted-pool",
        catalog,
    );
    node.provider_id = Some(format!("aws:///us-east-1a/{}", gone_pool.id));
    env.cluster.add_node(node);

    // 3. Karpenter's instance whose node carries no karpenter.sh/nodepool label.
    let unlabelled = env.cloud.insert_karpenter_instance(
        "m5.large",
        "us-east-1a",
        CapacityType::OnDemand,
        POOL,
        None,
        env.clock.now(),
    );
    env.cluster.add_node(Node {
        name: "ip-10-0-0-3.ec2.internal".into(),
        provider_id: Some(format!("aws:///us-east-1a/{}", unlabelled.id)),
        ready: true,
        ..Node::default()
    });

    // 4. Karpenter's instance already recorded by a claim (a tombstone): not adopted
    //    again.
    let (recorded, _) = env.karpenter_node(
        "m5.large",
        "us-east-1b",
        CapacityType::OnDemand,
        Some("general-purpose-ccccc"),
    );
    let mut tombstone = NodeClaim::launching(
        ClaimSpec {
            labels: Default::default(),
            name: "general-purpose-old01".into(),
            node_pool: POOL.into(),
            node_class: "default".into(),
            instance_type_options: vec!["m5.large".into()],
            zones: vec!["us-east-1b".into()],
            capacity_types: vec![CapacityType::OnDemand],
            pods: vec![],
        },
        env.clock.now(),
    );
    tombstone.state = ClaimState::Terminated;
    tombstone.instance_id = Some(recorded.id.clone());
    env.store.create_claim(&tombstone).await.unwrap();

    // 5. Karpenter's instance, stopped: still Karpenter's, still adopted (the
    //    interruption and liveness handling then take care of it).
    let (stopped, _) = env.karpenter_node(
        "m5.large",
        "us-east-1a",
        CapacityType::OnDemand,
        Some("general-purpose-ddddd"),
    );
    assert!(env.cloud.set_state(&stopped.id, "stopped"));

    // 6. Terminated: gone, not listed, not adopted.
    let (terminated, _) = env.karpenter_node(
        "m5.large",
        "us-east-1a",
        CapacityType::OnDemand,
        Some("general-purpose-eeeee"),
    );
    assert!(env.cloud.set_state(&terminated.id, "terminated"));

    let adopted: Vec<String> = env.adopt().await.into_iter().map(|c| c.name).collect();
    assert_eq!(adopted, vec!["general-purpose-ddddd".to_string()]);
    // nodewright's own instances are never Karpenter's, and Karpenter's are never
    // nodewright's to collect as leaks.
    let owned: Vec<String> = env
        .cloud
        .owned_instances()
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.id)
        .collect();
    assert_eq!(owned, vec![foreign.id]);
}

#[tokio::test]
async fn a_node_someone_else_adopted_first_is_skipped() {
    let env = Env::new();
    env.karpenter_node(
        "m5.large",
        "us-east-1a",
        CapacityType::OnDemand,
        Some("general-purpose-fffff"),
    );
    let state = env.cluster.snapshot();
    // Two adopters read the store while it was empty; the first one wins.
    let first = env.adopt_with(&state, &[]).await.unwrap();
    assert_eq!(first.len(), 1);
    let second = env.adopt_with(&state, &[]).await.unwrap();
    assert_eq!(second, vec![]);
    assert_eq!(env.store.claims().len(), 1);
    assert_eq!(env.store.all_decisions().len(), 1);
}

#[tokio::test]
async fn a_nodeclaim_name_already_used_by_another_instance_falls_back_to_the_node_name() {
    let env = Env::new();
    // A nodewright claim that happens to share the name Karpenter generated.
    let mut ours = NodeClaim::launching(
        ClaimSpec {
            labels: Default::default(),
            name: "general-purpose-ggggg".into(),
            node_pool: POOL.into(),
            node_class: "default".into(),
            instance_type_options: vec!["m5.large".into()],
            zones: vec!["us-east-1a".into()],
            capacity_types: vec![CapacityType::OnDemand],
            pods: vec![],
        },
        env.clock.now(),
    );
    ours.instance_id = Some("i-0aaaaaaaaaaaaaaa1".into());
    env.store.create_claim(&ours).await.unwrap();
    let (instance, node) = env.karpenter_node(
        "m5.large",
        "us-east-1a",
        CapacityType::OnDemand,
        Some("general-purpose-ggggg"),
    );

    let adopted = env.adopt().await;

    assert_eq!(adopted.len(), 1);
    assert_eq!(adopted[0].name, node);
    assert_eq!(
        env.store
            .claim_by_instance(&instance.id)
            .await
            .unwrap()
            .map(|c| c.name),
        Some(node)
    );
    // The other claim is untouched.
    assert_eq!(
        env.store.get_claim("general-purpose-ggggg").await.unwrap(),
        Some(ours)
    );
}

#[tokio::test]
async fn a_store_failure_is_reported_and_the_next_pass_adopts_the_node() {
    let env = Env::new();
    env.karpenter_node(
        "m5.large",
        "us-east-1a",
        CapacityType::OnDemand,
        Some("general-purpose-hhhhh"),
    );
    env.store.fail_next(
        StoreOp::CreateClaim,
        StoreError::new(ErrorKind::Throttled, "slow down"),
    );
    let state = env.cluster.snapshot();
    let err = env.adopt_with(&state, &[]).await.unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::Throttled));
    assert_eq!(env.store.claims(), vec![]);

    assert_eq!(env.adopt().await.len(), 1);
}

#[tokio::test]
async fn listing_karpenter_instances_fails_with_its_kind() {
    let env = Env::new();
    env.cloud.fail_next(
        CloudOp::KarpenterInstances,
        CloudError::new(ErrorKind::Unauthorized, "ec2:DescribeInstances"),
    );
    let err = env
        .cloud
        .cluster_instances_launched_by_karpenter()
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Unauthorized);
}

#[tokio::test]
async fn an_adopted_node_is_covered_by_interruptions_and_terminated() {
    let env = Env::new();
    let (instance, node) = env.karpenter_node(
        "m5.large",
        "us-east-1a",
        CapacityType::Spot,
        Some("general-purpose-iiiii"),
    );
    // Before adoption the instance is not ours: an interruption leaves it alone.
    let warning = |event: &str| InterruptionInput {
        event_id: event.into(),
        instance_ids: vec![instance.id.clone()],
        cause: DisruptionCause::SpotInterrupted,
        deadline: Some(env.clock.now() + 120),
        mark_unavailable: true,
        mode: InterruptionMode::Drain,
    };
    let before = handle_interruption(&env.ports, &InterruptionConfig::default(), warning("e-1"))
        .await
        .unwrap();
    assert_eq!(before.instances()[0].action, InstanceAction::NotOurs);

    env.adopt().await;
    let after = handle_interruption(&env.ports, &InterruptionConfig::default(), warning("e-2"))
        .await
        .unwrap();

    assert_eq!(
        after.instances()[0].action,
        InstanceAction::Disrupted {
            state: ClaimState::Terminated
        }
    );
    assert_eq!(
        env.cloud.instance(&instance.id).unwrap().instance.state,
        "terminated"
    );
    assert!(env.cluster.node(&node).is_none(), "node deleted");
}
