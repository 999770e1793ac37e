//! The jobs together, over time, against a world that behaves like a cluster
//! (`nodewright_engine::sim`): nodes register seconds after their launch and turn Ready
//! later, a binder places pods only where they fit and are tolerated, evicted pods come
//! back pending, PodDisruptionBudgets refuse evictions until replacements run, EC2
//! reclaims spot instances at their deadline. The provisioner runs as its schedule runs
//! it (an invocation a minute, polling for 55 s); the interruption job as its Lambda
//! does. Every test asserts the end state: instances = live claims, every disrupted
//! claim Terminated, no pod pending, no PDB violated, nothing launched twice.
//!
//! Virtual time on tokio's paused clock: minutes of cluster time take milliseconds.

use std::sync::Arc;
use std::time::Duration;

use nodewright_core::api::model::{NodePool, NodeRequirement, Operator};
use nodewright_core::catalog::{Catalog, LABEL_CAPACITY_TYPE};
use nodewright_core::cluster::{IntOrPercent, PodDisruptionBudget};
use nodewright_core::nodeclaim::{ClaimState, DisruptionCause, NodeClaim};
use nodewright_core::testing::{node_pool, pod, selector};
use nodewright_engine::fakes::node_class;
use nodewright_engine::ports::Store;
use nodewright_engine::provision::LEASE_NAME;
use nodewright_engine::sim::{World, WorldConfig};
use nodewright_engine::{
    InterruptionConfig, InterruptionInput, InterruptionMode, Provisioner, ProvisionerConfig,
    handle_interruption_until,
};

const ZONES: [&str; 3] = ["us-east-1a", "us-east-1b", "us-east-1c"];
/// 2025-01-01T00:00:00Z.
const START: i64 = 1_735_689_600;
const POLL: Duration = Duration::from_secs(5);
/// What an interruption invocation may spend (its timeout less a margin).
const INTERRUPTION_BUDGET: i64 = 140;

fn req(key: &str, values: &[&str]) -> NodeRequirement {
    NodeRequirement {
        key: key.into(),
        operator: Operator::In,
        values: values.iter().map(|v| v.to_string()).collect(),
        min_values: None,
    }
}

/// m5.xlarge only (3.92 cpu allocatable: three 1-cpu pods a node), of `capacity_type`.
fn m5_pool(capacity_type: &str) -> NodePool {
    node_pool(
        "general-purpose",
        vec![
            req("node.kubernetes.io/instance-type", &["m5.xlarge"]),
            req(LABEL_CAPACITY_TYPE, &[capacity_type]),
        ],
    )
}

struct System {
    world: Arc<World>,
    provisioner: Provisioner,
}

impl System {
    fn new(pool: NodePool) -> System {
        System::with(pool, WorldConfig::default())
    }

    fn with(pool: NodePool, config: WorldConfig) -> System {
        let world = World::new(Catalog::embedded().clone(), &ZONES, START, config);
        world.cluster.with_state(|s| {
            s.node_pools.push(pool);
            s.node_classes.push(node_class("default"));
        });
        let provisioner = Provisioner::new(
            world.ports(),
            ProvisionerConfig::new("test-cluster", "provisioner-1"),
        );
        System { world, provisioner }
    }

    fn add_pods(&self, app: &str, n: usize, cpu: &str, memory: &str) {
        for i in 0..n {
            self.world
                .cluster
                .add_pod(pod(&format!("{app}-{i}"), cpu, memory));
        }
    }

    fn add_budget(&self, app: &str, min_available: i32) {
        self.world.cluster.with_state(|s| {
            s.pdbs.push(PodDisruptionBudget {
                namespace: "default".into(),
                name: app.into(),
                selector: Some(selector(app)),
                min_available: Some(IntOrPercent::Int(min_available)),
                max_unavailable: None,
            })
        });
    }

    /// The provisioner as its EventBridge schedule runs it, for `minutes` minutes from
    /// now, with the world acting beside it.
    async fn run(&self, minutes: i64) {
        let until = self.world.now() + minutes * 60;
        tokio::join!(self.world.run(until), self.schedule(until));
    }

    async fn schedule(&self, until: i64) {
        while self.world.now() + 60 <= until {
            let started = self.world.now();
            let run = self
                .provisioner
                .run_for(Duration::from_secs(55), POLL)
                .await;
            assert!(run.failed_ticks.is_empty(), "{:?}", run.failed_ticks);
            let next = started + 60;
            let wait = (next - self.world.now()).max(0);
            tokio::time::sleep(Duration::from_secs(wait as u64)).await;
        }
    }

    /// The interruption function handling one event now, keeping its drains going
    /// for as long as its invocation may run.
    async fn interrupt(&self, input: InterruptionInput) {
        let ports = self.world.ports();
        let until = self.world.now() + INTERRUPTION_BUDGET;
        handle_interruption_until(&ports, &InterruptionConfig::default(), input, until)
            .await
            .expect("interruption handled");
    }

    fn claims(&self) -> Vec<NodeClaim> {
        self.world.store.claims()
    }

    fn claim_of(&self, instance: &str) -> NodeClaim {
        self.claims()
            .into_iter()
            .find(|c| c.instance_id.as_deref() == Some(instance))
            .expect("a claim for the instance")
    }

    /// A running instance with the most pods bound to its node.
    fn busiest_instance(&self) -> (String, String) {
        let state = self.world.cluster.snapshot();
        let node = state
            .nodes
            .iter()
            .max_by_key(|n| {
                state
                    .pods
                    .iter()
                    .filter(|p| p.node_name.as_deref() == Some(n.name.as_str()))
                    .count()
            })
            .expect("a node");
        let id = node
            .provider_id
            .as_deref()
            .and_then(nodewright_core::nodeclaim::instance_id_from_provider_id)
            .expect("provider id")
            .to_string();
        (id, node.name.clone())
    }

    /// The end state every scenario must reach.
    fn assert_settled(&self) {
        let mut running: Vec<String> = self
            .world
            .cloud
            .running()
            .into_iter()
            .map(|i| i.id)
            .collect();
        running.sort();
        let mut live: Vec<String> = self
            .claims()
            .into_iter()
            .filter(|c| !c.state.is_terminal())
            .filter_map(|c| c.instance_id)
            .collect();
        live.sort();
        assert_eq!(running, live, "instances = live claims");
        for c in self.claims() {
            if c.disruption.is_some() {
                assert_eq!(c.state, ClaimState::Terminated, "{c:#?}");
            } else {
                assert_eq!(c.state, ClaimState::Initialized, "{c:#?}");
            }
        }
        assert_eq!(self.world.still_pending(), vec![], "no pod left pending");
        assert_eq!(self.world.budget_violations(), vec![], "no PDB violated");
        let nodes: Vec<String> = self
            .world
            .cluster
            .nodes()
            .into_iter()
            .map(|n| n.name)
            .collect();
        assert_eq!(nodes.len(), live.len(), "a node per live claim: {nodes:?}");
    }

    fn launched(&self) -> usize {
        self.world.cloud.instances().len()
    }

    fn longest_wait(&self) -> i64 {
        self.world
            .waits()
            .iter()
            .map(|(_, w)| *w)
            .max()
            .unwrap_or(0)
    }
}

fn spot_warning(instance: &str, deadline: i64) -> InterruptionInput {
    InterruptionInput {
        event_id: format!("spot-{instance}"),
        instance_ids: vec![instance.into()],
        cause: DisruptionCause::SpotInterrupted,
        deadline: Some(deadline),
        mark_unavailable: true,
        mode: InterruptionMode::Drain,
    }
}

fn rebalance(instance: &str) -> InterruptionInput {
    InterruptionInput {
        event_id: format!("rebalance-{instance}"),
        instance_ids: vec![instance.into()],
        cause: DisruptionCause::RebalanceRecommended,
        deadline: None,
        mark_unavailable: false,
        mode: InterruptionMode::ReplaceThenDrain,
    }
}

fn terminated(instance: &str) -> InterruptionInput {
    InterruptionInput {
        event_id: format!("terminated-{instance}"),
        instance_ids: vec![instance.into()],
        cause: DisruptionCause::InstanceTerminated,
        deadline: None,
        mark_unavailable: false,
        mode: InterruptionMode::CleanUp,
    }
}

/// Launch + registration + readiness + one poll, with a second of the world's step.
fn bound_wait(config: &WorldConfig) -> i64 {
    (config.register_after + config.ready_after + POLL).as_secs() as i64 + 2
}

#[tokio::test(start_paused = true)]
async fn a_scale_out_launches_once_and_pods_run_within_launch_boot_and_one_poll() {
    let sys = System::new(m5_pool("on-demand"));
    sys.add_pods("web", 10, "1", "1536Mi");

    sys.run(3).await;

    // 10 pods of 1 cpu, three to an m5.xlarge: four nodes, launched once.
    assert_eq!(sys.launched(), 4, "{:#?}", sys.claims());
    sys.assert_settled();
    let longest = sys.longest_wait();
    assert!(
        longest <= bound_wait(&sys.world.config),
        "a pod waited {longest}s for a node: {:?}",
        sys.world.waits()
    );
}

#[tokio::test(start_paused = true)]
async fn a_node_that_registers_already_ready_between_two_polls_is_not_launched_again() {
    // Registered and Initialized in one tick, then planned on in the same tick: the
    // view read at the tick's start still has the unregistered taint and a NotReady
    // node. That view once launched a second node for pods that had one.
    let config = WorldConfig {
        ready_after: Duration::ZERO,
        ..WorldConfig::default()
    };
    let sys = System::with(m5_pool("on-demand"), config);
    sys.add_pods("web", 10, "1", "1536Mi");
    sys.run(3).await;
    assert_eq!(sys.launched(), 4, "{:#?}", sys.claims());
    sys.assert_settled();
}

#[tokio::test(start_paused = true)]
async fn pods_that_arrive_while_nodes_boot_use_them_and_nothing_is_launched_twice() {
    let sys = System::new(m5_pool("on-demand"));
    sys.add_pods("web", 4, "1", "1536Mi");
    let world = sys.world.clone();
    let late = async {
        // Arrives as the first nodes register (launch + 20 s): they fit the spare room.
        tokio::time::sleep(Duration::from_secs(21)).await;
        world.cluster.add_pod(pod("late-0", "1", "1536Mi"));
        world.cluster.add_pod(pod("late-1", "1", "1536Mi"));
    };
    tokio::join!(sys.run(3), late);
    assert_eq!(sys.launched(), 2, "{:#?}", sys.claims());
    sys.assert_settled();
}

#[tokio::test(start_paused = true)]
async fn a_spot_warning_drains_through_a_budget_terminates_before_the_deadline_and_replaces() {
    let sys = System::new(m5_pool("spot"));
    sys.add_pods("web", 6, "1", "1536Mi");
    sys.add_budget("web", 5);
    sys.run(1).await;
    assert_eq!(sys.launched(), 2);
    let (instance, node) = sys.busiest_instance();

    let deadline = sys.world.now() + 120;
    sys.world.kill_at(&instance, deadline);
    tokio::join!(sys.run(4), sys.interrupt(spot_warning(&instance, deadline)));

    let claim = sys.claim_of(&instance);
    assert_eq!(claim.state, ClaimState::Terminated, "{claim:#?}");
    assert!(
        claim.updated_at < deadline,
        "terminated by nodewright before EC2 took it ({} ≥ {deadline})",
        claim.updated_at
    );
    assert_eq!(sys.world.reclaimed(), Vec::<String>::new());
    assert_eq!(
        sys.world.lost_pods(),
        Vec::<String>::new(),
        "every pod drained in time"
    );
    assert!(
        sys.world.cluster.node(&node).is_none(),
        "the node is deleted"
    );
    // One replacement for the interrupted node; nothing else.
    assert_eq!(sys.launched(), 3, "{:#?}", sys.claims());
    sys.assert_settled();
}

#[tokio::test(start_paused = true)]
async fn a_rebalance_recommendation_launches_a_replacement_then_drains_and_terminates() {
    let sys = System::new(m5_pool("spot"));
    sys.add_pods("web", 6, "1", "1536Mi");
    sys.add_budget("web", 5);
    sys.run(1).await;
    let (instance, _) = sys.busiest_instance();
    let since = sys.world.now();

    tokio::join!(sys.run(4), sys.interrupt(rebalance(&instance)));

    let claim = sys.claim_of(&instance);
    assert_eq!(claim.state, ClaimState::Terminated, "{claim:#?}");
    let replacement = sys
        .claims()
        .into_iter()
        .filter(|c| c.created_at >= since)
        .collect::<Vec<_>>();
    assert_eq!(replacement.len(), 1, "one replacement: {replacement:#?}");
    let up = replacement[0]
        .initialized_at
        .expect("the replacement initialized");
    let replace_wait = InterruptionConfig::default().replace_wait.as_secs() as i64;
    assert!(
        claim.updated_at < since + replace_wait,
        "drained once the replacement was up ({up}), not at the wait's end"
    );
    assert_eq!(sys.world.lost_pods(), Vec::<String>::new());
    sys.assert_settled();
}

#[tokio::test(start_paused = true)]
async fn a_spot_warning_after_a_rebalance_escalates_to_a_drain_before_the_deadline() {
    let sys = System::new(m5_pool("spot"));
    sys.add_pods("web", 6, "1", "1536Mi");
    sys.add_budget("web", 5);
    sys.run(1).await;
    let (instance, _) = sys.busiest_instance();

    let both = async {
        sys.interrupt(rebalance(&instance)).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let deadline = sys.world.now() + 120;
        sys.world.kill_at(&instance, deadline);
        sys.interrupt(spot_warning(&instance, deadline)).await;
        deadline
    };
    let ((), deadline) = tokio::join!(sys.run(4), both);

    let claim = sys.claim_of(&instance);
    assert_eq!(claim.state, ClaimState::Terminated, "{claim:#?}");
    let d = claim.disruption.clone().unwrap();
    assert_eq!(d.cause, DisruptionCause::SpotInterrupted, "escalated");
    assert_eq!(d.deadline, Some(deadline));
    assert!(claim.updated_at < deadline);
    assert_eq!(sys.world.lost_pods(), Vec::<String>::new());
    sys.assert_settled();
}

#[tokio::test(start_paused = true)]
async fn an_instance_terminated_during_a_replace_then_drain_is_cleaned_up() {
    let sys = System::new(m5_pool("spot"));
    sys.add_pods("web", 6, "1", "1536Mi");
    sys.run(1).await;
    let (instance, node) = sys.busiest_instance();

    let events = async {
        sys.interrupt(rebalance(&instance)).await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        sys.world.kill_at(&instance, sys.world.now());
        tokio::time::sleep(Duration::from_secs(1)).await;
        sys.interrupt(terminated(&instance)).await;
    };
    tokio::join!(sys.run(4), events);

    let claim = sys.claim_of(&instance);
    assert_eq!(claim.state, ClaimState::Terminated, "{claim:#?}");
    assert_eq!(
        claim.disruption.as_ref().map(|d| d.cause),
        Some(DisruptionCause::InstanceTerminated)
    );
    assert!(sys.world.cluster.node(&node).is_none());
    sys.assert_settled();
}

#[tokio::test(start_paused = true)]
async fn a_provisioner_that_died_holding_the_lease_delays_the_next_by_seconds_not_minutes() {
    let sys = System::new(m5_pool("on-demand"));
    sys.add_pods("web", 3, "1", "1536Mi");
    let ttl = ProvisionerConfig::new("c", "h").lease_ttl;
    sys.world
        .store
        .acquire_lease(LEASE_NAME, "killed-invocation", sys.world.now(), ttl)
        .await
        .unwrap()
        .expect("lease taken by the dead holder");

    sys.run(2).await;

    assert_eq!(sys.launched(), 1);
    sys.assert_settled();
    let longest = sys.longest_wait();
    assert!(
        longest <= ttl.as_secs() as i64 + bound_wait(&sys.world.config),
        "{longest}s"
    );
}

#[tokio::test(start_paused = true)]
async fn spot_capacity_reclaimed_without_any_warning_is_replaced_by_the_reconciler() {
    // No event at all reaches nodewright (a lost message): the instance dies, its
    // node stays NotReady, the pods are recreated pending. The provisioner launches
    // for them; the dead claim is cleaned up once its instance is seen gone.
    let sys = System::new(m5_pool("on-demand"));
    sys.add_pods("web", 3, "1", "1536Mi");
    sys.run(1).await;
    let (instance, _) = sys.busiest_instance();
    sys.world.kill_at(&instance, sys.world.now());
    sys.run(4).await;
    let claim = sys.claim_of(&instance);
    assert_eq!(claim.state, ClaimState::Terminated, "{claim:#?}");
    assert_eq!(sys.launched(), 2, "one replacement: {:#?}", sys.claims());
    sys.assert_settled();
}

#[tokio::test(start_paused = true)]
async fn a_node_karpenter_launched_is_adopted_and_then_handled_like_any_other() {
    let mut sys = System::new(m5_pool("spot"));
    let mut config = ProvisionerConfig::new("test-cluster", "provisioner-1");
    config.adopt_karpenter_nodes = true;
    sys.provisioner = Provisioner::new(sys.world.ports(), config);
    let karpenters = sys.world.cloud.insert_karpenter_instance(
        "m5.xlarge",
        "us-east-1a",
        nodewright_core::catalog::CapacityType::Spot,
        "general-purpose",
        Some("general-purpose-k8rpt"),
        START - 3600,
    );
    // Its node is up and running pods before nodewright is deployed.
    sys.world.step();
    for n in sys.world.cluster.nodes() {
        sys.world.cluster.set_ready(&n.name);
    }
    sys.add_pods("web", 3, "1", "1536Mi");
    sys.world.step();
    assert_eq!(sys.world.still_pending(), vec![]);

    sys.run(3).await;
    let claim = sys.claim_of(&karpenters.id);
    assert!(
        claim.adopted && claim.state == ClaimState::Initialized,
        "{claim:#?}"
    );
    assert_eq!(claim.name, "general-purpose-k8rpt");
    assert_eq!(
        sys.launched(),
        1,
        "nothing launched for pods that have a node"
    );

    // Minutes later it is still there (its instance is listed as Karpenter's, not
    // mistaken for vanished), and a spot warning takes it away like any claim.
    let deadline = sys.world.now() + 120;
    sys.world.kill_at(&karpenters.id, deadline);
    tokio::join!(
        sys.run(4),
        sys.interrupt(spot_warning(&karpenters.id, deadline))
    );
    let claim = sys.claim_of(&karpenters.id);
    assert_eq!(claim.state, ClaimState::Terminated, "{claim:#?}");
    assert_eq!(sys.world.lost_pods(), Vec::<String>::new());
    assert_eq!(sys.launched(), 2, "one replacement");
    sys.assert_settled();
}
