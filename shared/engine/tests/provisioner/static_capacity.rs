//! Static NodePools (`spec.replicas`) and `limits.nodes` through the provisioner's tick
//! and the disruption job, over the in-memory fakes with virtual time.

use std::sync::Arc;
use std::time::Duration;

use nodewright_core::api::model::{Budget, BudgetNodes, NodePool};
use nodewright_core::catalog::Catalog;
use nodewright_core::cluster::{IntOrPercent, PodDisruptionBudget};
use nodewright_core::nodeclaim::{ClaimState, DisruptionCause, NodeClaim};
use nodewright_core::testing::{general_purpose_pool, pod, selector};
use nodewright_engine::ports::ClaimStore;
use nodewright_engine::ports::{Clock, ObjectKind};
use nodewright_engine::{Ports, Provisioner, ProvisionerConfig};
use nodewright_sim::fakes::{FakeCloud, FakeCluster, ManualClock, MemoryStore, node_class};

const ZONES: [&str; 3] = ["us-east-1a", "us-east-1b", "us-east-1c"];

struct Env {
    clock: Arc<ManualClock>,
    cloud: Arc<FakeCloud>,
    cluster: Arc<FakeCluster>,
    store: Arc<MemoryStore>,
    ports: Ports,
}

fn static_pool(name: &str, replicas: u32) -> NodePool {
    let mut p = general_purpose_pool();
    p.name = name.into();
    p.replicas = Some(replicas);
    p
}

impl Env {
    fn new(pools: Vec<NodePool>) -> Self {
        let clock = Arc::new(ManualClock::default());
        let catalog = Catalog::embedded().clone();
        let cloud = Arc::new(FakeCloud::new(catalog.clone(), &ZONES, clock.clone()));
        let cluster = Arc::new(FakeCluster::new(Arc::new(catalog)));
        cluster.with_state(|s| {
            s.node_pools = pools;
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

    fn provisioner(&self) -> Provisioner {
        Provisioner::new(
            self.ports.clone(),
            ProvisionerConfig::new("test-cluster", "holder-a"),
        )
    }

    fn claims_of(&self, pool: &str) -> Vec<NodeClaim> {
        self.store
            .claims()
            .into_iter()
            .filter(|c| c.node_pool == pool && !c.state.is_terminal())
            .collect()
    }

    fn set_replicas(&self, pool: &str, replicas: u32) {
        self.cluster.with_state(|s| {
            let p = s.node_pools.iter_mut().find(|p| p.name == pool).unwrap();
            p.replicas = Some(replicas);
        });
    }

    fn status_nodes(&self, pool: &str) -> Option<u64> {
        self.cluster
            .status(ObjectKind::NodePool, pool)?
            .fields
            .get("nodes")?
            .as_u64()
    }

    /// Registers every launched instance as a Ready node and initializes it.
    async fn bring_up(&self, prov: &Provisioner) -> Vec<String> {
        let nodes = self.cluster.register_from(&self.cloud);
        for n in &nodes {
            self.cluster.set_ready(n);
        }
        prov.tick().await.unwrap();
        nodes
    }
}

#[tokio::test]
async fn a_static_pool_launches_its_replicas_without_pods_and_reports_status_nodes() {
    let env = Env::new(vec![static_pool("fixed", 3)]);
    let prov = env.provisioner();
    let report = prov.tick().await.unwrap();
    assert_eq!(report.launched.len(), 3, "{report:?}");
    assert!(report.launched.iter().all(|l| l.pods == 0));
    assert!(env.claims_of("fixed").iter().all(|c| c.pods.is_empty()));
    assert_eq!(env.status_nodes("fixed"), Some(3));
    let decisions = env.store.all_decisions();
    assert_eq!(
        decisions
            .iter()
            .filter(|d| d.action.contains("to keep its replicas"))
            .count(),
        3
    );
    assert!(
        decisions.iter().any(|d| d
            .reason
            .contains("no pending pods: a static NodePool's replicas")),
        "{decisions:#?}"
    );
    assert!(
        env.cluster
            .events()
            .iter()
            .any(|e| e.reason == "ScalingUp" && e.name == "fixed")
    );

    env.bring_up(&prov).await;
    let report = prov.tick().await.unwrap();
    assert!(report.launched.is_empty(), "steady at its replicas");
    assert_eq!(
        env.claims_of("fixed")
            .iter()
            .filter(|c| c.state == ClaimState::Initialized)
            .count(),
        3
    );
}

#[tokio::test]
async fn pending_pods_never_launch_into_a_static_pool_but_a_dynamic_pool_takes_them() {
    let env = Env::new(vec![static_pool("fixed", 0), general_purpose_pool()]);
    env.cluster.add_pod(pod("web-0", "1", "2Gi"));
    let report = env.provisioner().tick().await.unwrap();
    assert_eq!(report.launched.len(), 1);
    assert_eq!(report.launched[0].node_pool, "general-purpose");
    assert!(env.claims_of("fixed").is_empty());
}

#[tokio::test]
async fn scale_down_drains_through_pod_disruption_budgets_and_bypasses_disruption_budgets() {
    let mut pool = static_pool("fixed", 2);
    // No disruption budget allows anything: static scale-down does not ask them.
    pool.disruption.budgets = vec![Budget {
        nodes: BudgetNodes::Count(0),
        schedule: None,
        duration: None,
        reasons: vec![],
    }];
    let env = Env::new(vec![pool]);
    let prov = env.provisioner();
    prov.tick().await.unwrap();
    let nodes = env.bring_up(&prov).await;
    assert_eq!(nodes.len(), 2);
    for (i, node) in nodes.iter().enumerate() {
        let mut p = pod(&format!("web-{i}"), "500m", "512Mi");
        p.labels.insert("app".into(), "web".into());
        env.cluster.add_pod(p);
        env.cluster.bind_pod(&format!("default/web-{i}"), node);
    }
    env.cluster.with_state(|s| {
        s.pdbs.push(PodDisruptionBudget {
            namespace: "default".into(),
            name: "web".into(),
            selector: Some(selector("web")),
            min_available: Some(IntOrPercent::Int(2)),
            max_unavailable: None,
            status_disruptions_allowed: None,
        })
    });

    env.set_replicas("fixed", 1);
    let report = prov.tick().await.unwrap();
    let gone: Vec<&str> = report
        .static_capacity
        .scaled_down
        .iter()
        .map(|d| d.claim.as_str())
        .collect();
    assert_eq!(gone.len(), 1, "{report:?}");
    assert!(
        report
            .static_capacity
            .scaled_down
            .iter()
            .all(|d| d.cause == DisruptionCause::Overprovisioned)
    );
    // Counted as Karpenter counts its disruptions (nodeclaims_disrupted).
    assert!(
        report
            .lifecycle
            .disrupted
            .iter()
            .any(|d| d.claim == gone[0] && d.cause == DisruptionCause::Overprovisioned)
    );
    let leaving = gone[0].to_string();
    // The budget refuses the eviction: the drain waits and retries, the pod stays.
    for _ in 0..3 {
        env.clock.advance(Duration::from_secs(5));
        prov.tick().await.unwrap();
    }
    let stored = env.store.get_claim(&leaving).await.unwrap().unwrap();
    assert_eq!(stored.state, ClaimState::Draining, "{stored:?}");
    assert_eq!(env.cluster.snapshot().pods.len(), 2, "no pod evicted");
    assert!(
        env.cluster
            .events()
            .iter()
            .any(|e| e.reason == "FailedDraining")
    );
    // No replacement: the pool is at its replicas with the leaving claim gone.
    assert_eq!(
        env.claims_of("fixed")
            .iter()
            .filter(|c| c.state.is_live_capacity())
            .count(),
        1
    );

    // The budget allows one disruption: the drain goes on and the instance goes.
    env.cluster
        .with_state(|s| s.pdbs[0].min_available = Some(IntOrPercent::Int(1)));
    for _ in 0..4 {
        env.clock.advance(Duration::from_secs(5));
        prov.tick().await.unwrap();
    }
    let stored = env.store.get_claim(&leaving).await.unwrap().unwrap();
    assert_eq!(stored.state, ClaimState::Terminated, "{stored:?}");
    assert_eq!(env.status_nodes("fixed"), Some(1));
    let decisions = env.store.all_decisions();
    assert!(
        decisions.iter().any(|d| d
            .action
            .contains("away: NodePool fixed is above its replicas")),
        "{decisions:#?}"
    );
}

#[tokio::test]
async fn a_static_node_lost_to_an_interruption_is_replaced_back_to_replicas() {
    let env = Env::new(vec![static_pool("fixed", 2)]);
    let prov = env.provisioner();
    prov.tick().await.unwrap();
    env.bring_up(&prov).await;
    let victim = env.claims_of("fixed")[0].clone();
    nodewright_engine::terminate::disrupt(
        &env.ports,
        &victim,
        DisruptionCause::SpotInterrupted,
        Some(env.clock.now() + 120),
    )
    .await
    .unwrap();
    let report = prov.tick().await.unwrap();
    assert_eq!(report.launched.len(), 1, "{report:?}");
    let stored = env.store.get_claim(&victim.name).await.unwrap().unwrap();
    assert!(!stored.state.is_live_capacity(), "{stored:?}");
    assert_eq!(
        env.claims_of("fixed")
            .iter()
            .filter(|c| c.state.is_live_capacity())
            .count(),
        2
    );
}

#[tokio::test]
async fn limits_nodes_caps_a_static_pool_and_says_why_once() {
    let mut pool = static_pool("fixed", 3);
    pool.node_limit = Some(2);
    let env = Env::new(vec![pool]);
    let prov = env.provisioner();
    let report = prov.tick().await.unwrap();
    assert_eq!(report.launched.len(), 2, "{report:?}");
    let held = report.static_capacity.plans[0].held.clone().expect("held");
    assert!(held.contains("limits.nodes 2 reached"), "{held}");
    prov.tick().await.unwrap();
    let warnings = env
        .cluster
        .events()
        .into_iter()
        .filter(|e| e.reason == "ReplicasNotReached" && e.name == "fixed")
        .count();
    assert_eq!(warnings, 1, "announced once per window");
    assert_eq!(env.claims_of("fixed").len(), 2);
}

#[tokio::test]
async fn limits_nodes_caps_dynamic_provisioning_counting_existing_nodes() {
    let mut pool = general_purpose_pool();
    pool.node_limit = Some(2);
    // One type only, so every pod needs a node of its own.
    pool.requirements.push(nodewright_core::testing::req(
        nodewright_core::well_known::LABEL_INSTANCE_TYPE,
        nodewright_core::api::model::Operator::In,
        &["m5.large"],
    ));
    let env = Env::new(vec![pool]);
    let prov = env.provisioner();
    env.cluster.add_pod(pod("web-0", "1500m", "2Gi"));
    prov.tick().await.unwrap();
    env.bring_up(&prov).await;
    for i in 1..4 {
        env.cluster
            .add_pod(pod(&format!("web-{i}"), "1500m", "2Gi"));
    }
    let report = prov.tick().await.unwrap();
    assert_eq!(report.launched.len(), 1, "one more node reaches the limit");
    assert_eq!(report.unschedulable.len(), 2, "{report:?}");
    assert!(
        report.unschedulable[0].reason.contains("nodes"),
        "{}",
        report.unschedulable[0].reason
    );

    // limits.nodes: 0 launches nothing at all.
    let mut none = general_purpose_pool();
    none.node_limit = Some(0);
    let env = Env::new(vec![none]);
    env.cluster.add_pod(pod("web-0", "1", "2Gi"));
    let report = env.provisioner().tick().await.unwrap();
    assert!(report.launched.is_empty(), "{report:?}");
}
