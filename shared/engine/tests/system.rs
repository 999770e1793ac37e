//! The jobs together, over time, against a world that behaves like a cluster
//! (`nodewright_sim`): nodes register seconds after their launch and turn Ready
//! later, a binder places pods only where they fit and are tolerated, evicted pods come
//! back pending, PodDisruptionBudgets refuse evictions until replacements run, EC2
//! reclaims spot instances at their deadline. The provisioner runs as its schedule runs
//! it (an invocation a minute, polling for 55 s); the interruption job as its Lambda
//! does. Every test asserts the end state: instances = live claims, every disrupted
//! claim Terminated, no pod pending, no PDB violated, nothing launched twice.
//!
//! Virtual time on tokio's paused clock: minutes of cluster time take milliseconds.

use nodewright_engine::ports::{ClaimStore, LeaseStore};
use std::sync::Arc;
use std::time::Duration;

use nodewright_core::api::model::{NodePool, NodeRequirement, Operator};
use nodewright_core::catalog::Catalog;
use nodewright_core::cluster::{IntOrPercent, PodDisruptionBudget};
use nodewright_core::nodeclaim::{ClaimState, DisruptionCause, NodeClaim};
use nodewright_core::testing::{node_pool, pod, selector};
use nodewright_core::well_known::LABEL_CAPACITY_TYPE;
use nodewright_engine::provision::LEASE_NAME;
use nodewright_engine::{
    InterruptionConfig, InterruptionInput, InterruptionMode, Provisioner, ProvisionerConfig,
    handle_interruption_until,
};
use nodewright_sim::fakes::node_class;
use nodewright_sim::{World, WorldConfig};

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
                status_disruptions_allowed: None,
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
async fn a_spread_over_a_label_two_node_pools_set_runs_one_on_demand_pod_per_four_spot() {
    // The Karpenter workshop's ratio split: the on-demand pool is domain "1" of
    // `capacity-spread`, the spot pool domains "2".."5"; the nodes must carry the
    // domain the plan chose, or the binder would never place the pods.
    let pool = |name: &str, capacity_type: &str, domains: &[&str]| {
        node_pool(
            name,
            vec![
                req(
                    "node.kubernetes.io/instance-type",
                    &["m5.large", "m5.xlarge"],
                ),
                req(LABEL_CAPACITY_TYPE, &[capacity_type]),
                req("capacity-spread", domains),
            ],
        )
    };
    let sys = System::new(pool("on-demand", "on-demand", &["1"]));
    sys.world.cluster.with_state(|s| {
        s.node_pools
            .push(pool("spot", "spot", &["2", "3", "4", "5"]))
    });
    for i in 0..10 {
        let mut p = pod(&format!("inflate-{i}"), "500m", "512Mi");
        p.labels.insert("app".into(), "inflate".into());
        p.topology_spread.push(nodewright_core::testing::spread(
            "capacity-spread",
            "inflate",
        ));
        sys.world.cluster.add_pod(p);
    }

    sys.run(3).await;

    sys.assert_settled();
    let state = sys.world.cluster.snapshot();
    let mut per_domain = std::collections::BTreeMap::<String, usize>::new();
    let mut on_demand = 0;
    for p in state.pods.iter().filter(|p| !p.daemonset_owned) {
        let node = state
            .nodes
            .iter()
            .find(|n| Some(&n.name) == p.node_name.as_ref())
            .expect("bound");
        *per_domain
            .entry(node.labels["capacity-spread"].clone())
            .or_default() += 1;
        if node.labels[LABEL_CAPACITY_TYPE] == "on-demand" {
            on_demand += 1;
        }
    }
    assert_eq!(per_domain.values().copied().collect::<Vec<_>>(), vec![2; 5]);
    assert_eq!(on_demand, 2);
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
    eprintln!(
        "spot drain: terminated {} s after the warning, {} s before the deadline; longest pod wait {} s",
        claim.updated_at - (deadline - 120),
        deadline - claim.updated_at,
        sys.longest_wait()
    );
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

// ----- Scenarios: the whole autoscaler over virtual hours ------------------------------
//
// `Scenario::run` runs the provisioner on its schedule (one invocation at a time, 55 s
// each, polling every 5 s, woken by the interruption function), the interruption
// function on its SQS queue (real EventBridge JSON, at-least-once delivery, 60 s
// invocations), workloads whose replicas change over time, and disturbances at their
// times. Each test asserts the end state and the bounds below.

use nodewright_core::api::model::TaintEffect;
use nodewright_core::catalog::CapacityType;
use nodewright_core::cluster::{DaemonSet, Pod, Toleration, TolerationOperator};
use nodewright_sim::faults::FaultConfig;
use nodewright_sim::report::Percentiles;
use nodewright_sim::run::SCHEDULE;
use nodewright_sim::{Deployment, Disturbance, Report, Scenario, ScheduledDisturbance, Target};

fn minutes(m: u64) -> Duration {
    Duration::from_secs(m * 60)
}

fn deployment(name: &str, cpu: &str, memory: &str, replicas: Vec<(u64, u32)>) -> Deployment {
    let mut template = pod(name, cpu, memory);
    template.labels.insert("app".into(), name.into());
    Deployment {
        name: name.into(),
        namespace: "default".into(),
        template,
        replicas: replicas
            .into_iter()
            .map(|(minute, n)| (minute as i64 * 60, n))
            .collect(),
        budget: None,
        autoscaled: false,
    }
}

fn with_budget(mut d: Deployment, min_available: i32) -> Deployment {
    d.budget = Some(PodDisruptionBudget {
        namespace: d.namespace.clone(),
        name: d.name.clone(),
        selector: Some(selector(&d.name)),
        min_available: Some(IntOrPercent::Int(min_available)),
        max_unavailable: None,
        status_disruptions_allowed: None,
    });
    d
}

fn at(minute: u64, disturbance: Disturbance) -> ScheduledDisturbance {
    ScheduledDisturbance {
        at: minutes(minute),
        disturbance,
    }
}

fn scenario(pool: NodePool, minutes_long: u64) -> Scenario {
    let mut s = Scenario::new("test");
    s.node_pools.push(pool);
    s.node_classes.push(node_class("default"));
    s.duration = minutes(minutes_long);
    s
}

async fn simulate(scenario: &Scenario) -> Report {
    let report = scenario.run(&|_, _| {}).await;
    if std::env::var_os("SIM_TIMELINE").is_some() {
        for r in &report.timeline {
            println!(
                "{} | {} | {} | {} | {:.3}",
                nodewright_sim::report::clock_time(r.t),
                r.event,
                r.decision,
                r.nodes,
                r.price_per_hour
            );
        }
        for d in report.world.store.all_decisions() {
            println!(
                "DECISION {} {} {} :: {}",
                d.at - report.world.started_at(),
                d.job,
                d.action,
                d.reason
            );
        }
        for d in &report.drains {
            println!("DRAIN {d:?}");
        }
    }
    report
}

/// Launch + registration + readiness + one poll, with a second of the world's step
/// either side: the longest a pod may wait for capacity.
fn launch_boot_poll(config: &WorldConfig) -> i64 {
    (config.register_after + config.ready_after + POLL).as_secs() as i64 + 2
}

/// The longest `w` may have waited. Launch + boot + one poll, with two exceptions:
///
/// - Capacity shortages: a pod pending at any moment of a shortage may wait until the
///   shortage ends, plus the time its offerings stay in the ICE cache after the last
///   failed launch (3 min, recorded at the latest when the shortage ends), plus one
///   schedule period (the invocation that failed counted the pods; the next one plans
///   again), plus launch, boot and one poll.
/// - Pods the first tick that saw them counted against capacity already there (a node
///   with room, a claim in flight) may wait one schedule period more: when that room
///   goes to other pods (kube-scheduler spreads where the planner packed) or goes away
///   (the node's instance was stopped without notice and is cleaned up a second
///   later), `Provisioner::run_for` does not tick again for pods it has counted once,
///   and the next invocation launches for them. (A finding of this simulator, left to
///   the provisioner's owners: see the report of issue 9.)
fn allowed_wait(w: &nodewright_sim::PodWait, report: &Report, config: &WorldConfig) -> i64 {
    let ice_ttl = ProvisionerConfig::new("c", "h").ice_ttl.as_secs() as i64;
    let schedule = SCHEDULE.as_secs() as i64;
    let shortage_end = report
        .shortages
        .iter()
        .filter(|s| w.since <= s.to && w.bound_at >= s.from)
        .map(|s| s.to)
        .max();
    match shortage_end {
        Some(end) => end + ice_ttl + schedule + launch_boot_poll(config) - w.since,
        // Counted against room that another pod took first: planned again within a
        // recount interval and a poll, not at the next invocation.
        None if report.counted_on_capacity.contains(&w.pod) => 20 + launch_boot_poll(config),
        None => launch_boot_poll(config),
    }
}

/// Whether a shortage was in force at `t`.
fn short_at(report: &Report, t: i64) -> bool {
    report
        .shortages
        .iter()
        .any(|s| (s.from..=s.to).contains(&t))
}

/// The end state every scenario must reach, and the bounds on the way.
fn assert_scenario_settled(report: &Report) {
    let w = &report.world;
    assert_eq!(
        report.problems,
        Vec::<String>::new(),
        "end-state invariants"
    );
    assert_eq!(report.summary.pods_lost, 0);
    assert_eq!(report.summary.pdb_violations, 0);
    let leaks: Vec<String> = w
        .store
        .all_decisions()
        .into_iter()
        .filter(|d| d.action.starts_with("terminate leaked instance"))
        .map(|d| format!("{}: {}", d.action, d.reason))
        .collect();
    assert_eq!(
        leaks,
        Vec::<String>::new(),
        "no instance of ours is ever a leak"
    );
    for c in w.store.claims() {
        if c.disruption.is_some() {
            assert_eq!(c.state, ClaimState::Terminated, "{c:#?}");
        } else if c.state == ClaimState::LaunchFailed {
            assert!(
                short_at(report, c.created_at),
                "failed without a shortage: {c:#?}"
            );
        } else {
            assert_eq!(c.state, ClaimState::Initialized, "{c:#?}");
        }
    }
    assert_eq!(w.still_pending(), vec![], "no pod left pending");
    for wait in &report.waits {
        let allowed = allowed_wait(wait, report, &w.config);
        assert!(
            wait.seconds() <= allowed,
            "{} waited {}s (allowed {allowed}s) from {}",
            wait.pod,
            wait.seconds(),
            wait.since - w.started_at()
        );
    }
    assert_eq!(
        report.unneeded_launches,
        vec![],
        "no instance launched for pods that already had capacity"
    );
    assert_eq!(
        report.summary.instances_needed,
        report.summary.instances_launched
    );
}

#[tokio::test(start_paused = true)]
async fn every_kind_of_interruption_in_one_hour_is_drained_replaced_and_terminated_losing_no_pod() {
    let mut s = scenario(m5_pool("spot"), 60);
    s.deployments.push(with_budget(
        deployment("web", "1", "1536Mi", vec![(0, 12)]),
        10,
    ));
    s.disturbances = vec![
        at(
            5,
            Disturbance::SpotInterruption {
                target: Target::Busiest,
            },
        ),
        at(
            10,
            Disturbance::RebalanceRecommendation {
                target: Target::Random,
            },
        ),
        at(
            15,
            Disturbance::ScheduledChange {
                target: Target::Oldest,
                notice: minutes(10),
            },
        ),
        at(
            35,
            Disturbance::InstanceStopped {
                target: Target::Random,
            },
        ),
    ];
    let report = simulate(&s).await;

    assert_scenario_settled(&report);
    let causes: Vec<DisruptionCause> = report.drains.iter().map(|d| d.cause).collect();
    for cause in [
        DisruptionCause::SpotInterrupted,
        DisruptionCause::RebalanceRecommended,
        DisruptionCause::ScheduledChange,
        DisruptionCause::InstanceStopped,
    ] {
        assert!(causes.contains(&cause), "{cause:?} in {causes:?}");
    }
    assert_eq!(report.summary.interruptions, 4, "{:#?}", report.drains);
    for d in &report.drains {
        if let Some(margin) = d.margin_to_deadline {
            assert!(margin < 0, "terminated before its deadline: {d:#?}");
        }
    }
    assert!(
        report.summary.pods_killed_without_notice > 0,
        "the stopped instance took its pods"
    );
    // 12 pods, three to a node: four nodes, one replacement per interruption.
    assert_eq!(
        report.summary.instances_launched,
        4 + 4,
        "{:#?}",
        report.timeline
    );
}

#[tokio::test(start_paused = true)]
async fn a_capacity_shortage_of_every_offering_delays_pods_only_until_capacity_and_the_ice_cache_allow()
 {
    let mut s = scenario(m5_pool("on-demand"), 40);
    s.deployments
        .push(deployment("web", "1", "1536Mi", vec![(0, 3), (5, 9)]));
    s.disturbances = vec![at(
        4,
        Disturbance::CapacityShortage {
            instance_types: vec!["m5.xlarge".into()],
            zones: vec![],
            capacity_types: vec![],
            duration: minutes(10),
        },
    )];
    let report = simulate(&s).await;

    assert_scenario_settled(&report);
    let start = report.world.started_at();
    let delayed: Vec<i64> = report
        .waits
        .iter()
        .filter(|w| w.since >= start + 300)
        .map(|w| w.bound_at - start)
        .collect();
    assert_eq!(delayed.len(), 6);
    assert!(
        delayed.iter().all(|&t| t >= 14 * 60),
        "no capacity before the shortage ends: {delayed:?}"
    );
    assert_eq!(report.summary.instances_launched, 3);
}

#[tokio::test(start_paused = true)]
async fn a_shortage_of_one_zone_falls_back_to_the_others_without_delaying_any_pod() {
    let mut s = scenario(m5_pool("spot"), 20);
    s.deployments
        .push(deployment("web", "1", "1536Mi", vec![(0, 3), (3, 12)]));
    s.disturbances = vec![at(
        2,
        Disturbance::CapacityShortage {
            instance_types: vec!["m5.xlarge".into()],
            zones: vec!["us-east-1a".into(), "us-east-1b".into()],
            capacity_types: vec![CapacityType::Spot],
            duration: minutes(10),
        },
    )];
    let report = simulate(&s).await;
    assert_scenario_settled(&report);
    let bound = launch_boot_poll(&report.world.config);
    assert!(
        report.waits.iter().all(|w| w.seconds() <= bound),
        "{:?}",
        report.waits
    );
    let zones: Vec<String> = report
        .world
        .cloud
        .instances()
        .iter()
        .skip(1)
        .map(|i| i.instance.zone.clone())
        .collect();
    assert!(zones.iter().all(|z| z == "us-east-1c"), "{zones:?}");
}

#[tokio::test(start_paused = true)]
async fn daemonset_pods_run_on_every_node_and_nodes_are_sized_to_hold_them() {
    let mut s = scenario(m5_pool("on-demand"), 10);
    let mut agent = pod("node-agent", "500m", "512Mi");
    agent.daemonset_owned = true;
    agent.tolerations.push(Toleration {
        key: String::new(),
        operator: TolerationOperator::Exists,
        value: String::new(),
        effect: Some(TaintEffect::NoSchedule),
    });
    s.daemonsets.push(DaemonSet {
        namespace: "kube-system".into(),
        name: "node-agent".into(),
        template: agent,
    });
    s.deployments
        .push(deployment("web", "1", "1536Mi", vec![(0, 9)]));
    let report = simulate(&s).await;

    assert_scenario_settled(&report);
    let state = report.world.cluster.snapshot();
    let agents: Vec<&Pod> = state.pods.iter().filter(|p| p.daemonset_owned).collect();
    assert_eq!(agents.len(), state.nodes.len(), "one agent per node");
    // 3.92 cpu a node: 0.5 for the agent leaves three 1-cpu pods: three nodes.
    assert_eq!(report.summary.instances_launched, 3);
}

#[tokio::test(start_paused = true)]
async fn zone_spread_is_kept_by_the_binder_and_met_by_the_launches() {
    let pool = node_pool(
        "general-purpose",
        vec![req(
            "node.kubernetes.io/instance-type",
            &["m5.large", "m5.xlarge"],
        )],
    );
    let mut s = scenario(pool, 10);
    let mut web = deployment("web", "500m", "512Mi", vec![(0, 6)]);
    web.template
        .topology_spread
        .push(nodewright_core::testing::spread(
            "topology.kubernetes.io/zone",
            "web",
        ));
    s.deployments.push(web);
    let report = simulate(&s).await;

    assert_scenario_settled(&report);
    let state = report.world.cluster.snapshot();
    let mut per_zone = std::collections::BTreeMap::<String, usize>::new();
    for p in state.pods.iter().filter(|p| !p.daemonset_owned) {
        let node = state
            .nodes
            .iter()
            .find(|n| Some(&n.name) == p.node_name.as_ref())
            .expect("bound");
        *per_zone
            .entry(node.labels["topology.kubernetes.io/zone"].clone())
            .or_default() += 1;
    }
    assert_eq!(
        per_zone.values().copied().collect::<Vec<_>>(),
        vec![2, 2, 2]
    );
}

#[tokio::test(start_paused = true)]
async fn every_event_delivered_twice_still_drains_each_node_once_and_launches_each_replacement_once()
 {
    let mut s = scenario(m5_pool("spot"), 30);
    s.world.queue.duplicate_rate = 1.0;
    s.deployments
        .push(deployment("web", "1", "1536Mi", vec![(0, 6)]));
    s.disturbances = vec![
        at(
            4,
            Disturbance::SpotInterruption {
                target: Target::Busiest,
            },
        ),
        at(
            12,
            Disturbance::SpotInterruption {
                target: Target::Random,
            },
        ),
    ];
    let report = simulate(&s).await;

    assert_scenario_settled(&report);
    assert_eq!(
        report.summary.duplicate_deliveries,
        report.summary.events_sent
    );
    assert_eq!(report.summary.interruptions, 2);
    assert_eq!(report.summary.instances_launched, 2 + 2);
    let drains = report
        .world
        .store
        .all_decisions()
        .iter()
        .filter(|d| d.action.starts_with("drain and terminate"))
        .count();
    assert_eq!(drains, 2, "one drain per interrupted node");
}

#[tokio::test(start_paused = true)]
async fn a_scale_down_is_consolidated_onto_one_node_with_both_pods_running() {
    let mut s = scenario(m5_pool("on-demand"), 20);
    s.deployments
        .push(deployment("web", "1", "1536Mi", vec![(0, 9), (10, 2)]));
    let report = simulate(&s).await;
    assert_scenario_settled(&report);
    assert_eq!(report.summary.instances_launched, 3);
    assert_eq!(
        report.summary.nodes_at_end, 1,
        "the disruption function consolidates the two idle nodes away"
    );
    let pods = report
        .world
        .cluster
        .snapshot()
        .pods
        .iter()
        .filter(|p| !p.daemonset_owned)
        .count();
    assert_eq!(pods, 2);
}

/// `SOAK_HOURS` (default 24): how long the soaks run.
fn soak_hours() -> u64 {
    std::env::var("SOAK_HOURS")
        .ok()
        .and_then(|h| h.parse().ok())
        .unwrap_or(24)
}

/// A day of a diurnal workload (two Deployments following the sun, one with a budget)
/// on spot and on-demand pools, with a spot interruption or rebalance recommendation
/// every ~40 minutes at random and a capacity shortage every few hours; seed 2025.
fn diurnal_day(hours: u64) -> Scenario {
    let mut spot = m5_pool("spot");
    // Spot first; on-demand when spot cannot be had.
    spot.weight = 10;
    let on_demand = node_pool(
        "on-demand",
        vec![
            req(
                "node.kubernetes.io/instance-type",
                &["m5.xlarge", "m5.2xlarge"],
            ),
            req(LABEL_CAPACITY_TYPE, &["on-demand"]),
        ],
    );
    let mut s = scenario(spot, hours * 60);
    s.node_pools.push(on_demand);
    s.seed = 2025;
    // The pools only use m5: a catalog of the m5 family keeps each tick's planning to
    // what matters here (the full catalog is for the CLI's release build).
    s.catalog.types.retain(|t| t.name.starts_with("m5."));
    // Replicas every 30 min along a day's curve: lowest at 02:00, highest at 14:00.
    let curve = |low: f64, high: f64| -> Vec<(u64, u32)> {
        (0..48)
            .map(|half_hour| {
                let hour = half_hour as f64 / 2.0;
                let day = (1.0 - (std::f64::consts::TAU * (hour - 2.0) / 24.0).cos()) / 2.0;
                (half_hour * 30, (low + (high - low) * day).round() as u32)
            })
            .collect()
    };
    s.deployments.push(with_budget(
        deployment("web", "1", "1536Mi", curve(4.0, 30.0)),
        3,
    ));
    s.deployments
        .push(deployment("api", "500m", "1Gi", curve(2.0, 14.0)));
    let mut rng = nodewright_sim::rng::Rng::new(s.seed);
    let mut minute = 20;
    while minute < 23 * 60 {
        let disturbance = if rng.chance(0.5) {
            Disturbance::SpotInterruption {
                target: Target::Random,
            }
        } else {
            Disturbance::RebalanceRecommendation {
                target: Target::Random,
            }
        };
        s.disturbances.push(at(minute, disturbance));
        minute += 25 + rng.below(30) as u64;
    }
    for hour in [3u64, 9, 13, 19] {
        s.disturbances.push(at(
            hour * 60,
            Disturbance::CapacityShortage {
                instance_types: vec!["m5.xlarge".into()],
                zones: vec![["us-east-1a", "us-east-1b", "us-east-1c"][rng.below(3)].into()],
                capacity_types: vec![CapacityType::Spot],
                duration: minutes(20 + rng.below(40) as u64),
            },
        ));
    }
    s
}

/// Prints how long the virtual day took in real time; asserts the end state and the
/// bounds.
#[tokio::test(start_paused = true)]
async fn a_day_of_diurnal_load_with_random_interruptions_and_shortages_loses_no_pod() {
    let wall = std::time::Instant::now();
    let hours = soak_hours();
    let s = diurnal_day(hours);
    let report = simulate(&s).await;

    let summary = &report.summary;
    let Percentiles { p50, p95, max } = summary.pending_seconds;
    println!(
        "soak: {hours} virtual hours in {:.1} s real time; {} pods bound (pending p50 {p50} s, p95 {p95} s, max {max} s), {} instances launched, {} interruptions, {:.1} node-hours, ${:.2}",
        wall.elapsed().as_secs_f64(),
        summary.pods_bound,
        summary.instances_launched,
        summary.interruptions,
        summary.node_hours,
        summary.cost
    );
    assert_scenario_settled(&report);
    assert!(summary.interruptions >= 20, "{summary:#?}");
}

/// Found by the chaos soak (seed 25, 01:44 virtual): a driver sent TerminateInstances,
/// then failed to record the claim Terminated (a throttled write or a crash); half a
/// minute later the intent it left was taken over and the call sent again for an
/// instance already terminated. A driver taking over an old intent asks EC2 first.
#[tokio::test(start_paused = true)]
async fn a_driver_taking_over_an_old_termination_intent_sends_terminate_instances_only_if_needed() {
    use nodewright_engine::ports::Cloud;
    use nodewright_sim::fakes::CloudOp;
    let world = World::new(
        Catalog::embedded().clone(),
        &ZONES,
        START,
        WorldConfig::default(),
    );
    let now = world.now();
    let claim_for = |name: &str, instance: &str| {
        let mut c = claim_recording(name, instance, ClaimState::Terminating, now);
        // A driver recorded its intent a minute ago and was not heard of again.
        c.terminate_requested_at = Some(now - 60);
        c
    };
    let sent = world
        .cloud
        .insert_instance("m5.large", ZONES[0], Some("default-sent"), now - 600);
    world
        .cloud
        .terminate(std::slice::from_ref(&sent.id))
        .await
        .unwrap();
    let unsent =
        world
            .cloud
            .insert_instance("m5.large", ZONES[0], Some("default-unsent"), now - 600);
    for (name, id) in [("default-sent", &sent.id), ("default-unsent", &unsent.id)] {
        world
            .store
            .create_claim(&claim_for(name, id))
            .await
            .unwrap();
    }
    world.cloud.clear_calls();

    let ports = world.ports();
    let sent_claim = world
        .store
        .get_claim("default-sent")
        .await
        .unwrap()
        .unwrap();
    let done = nodewright_engine::terminate::terminate_instance(&ports, &sent_claim)
        .await
        .unwrap();
    assert_eq!(done.state, ClaimState::Terminated);
    assert_eq!(
        world.cloud.call_counts().get(&CloudOp::Terminate),
        None,
        "the call it died after is not sent again"
    );

    let unsent_claim = world
        .store
        .get_claim("default-unsent")
        .await
        .unwrap()
        .unwrap();
    let done = nodewright_engine::terminate::terminate_instance(&ports, &unsent_claim)
        .await
        .unwrap();
    assert_eq!(done.state, ClaimState::Terminated);
    assert_eq!(
        world.cloud.call_counts().get(&CloudOp::Terminate),
        Some(&1),
        "the call it died before is sent"
    );
    assert_eq!(
        world.cloud.instance(&unsent.id).unwrap().instance.state,
        "terminated"
    );
}

/// A claim in `state` recording `instance` (a spot interruption's, two minutes ago).
fn claim_recording(name: &str, instance: &str, state: ClaimState, now: i64) -> NodeClaim {
    use nodewright_core::nodeclaim::{ClaimSpec, Disruption};
    let mut c = NodeClaim::launching(
        ClaimSpec {
            name: name.into(),
            node_pool: "default".into(),
            node_class: "default".into(),
            instance_type_options: vec!["m5.large".into()],
            zones: vec![ZONES[0].into()],
            capacity_types: vec![CapacityType::OnDemand],
            pods: vec![],
            labels: Default::default(),
        },
        now - 600,
    );
    c.state = state;
    c.version = 8;
    c.updated_at = now;
    c.instance_id = Some(instance.into());
    c.disruption = Some(Disruption {
        cause: DisruptionCause::SpotInterrupted,
        deadline: None,
        since: now - 120,
        drain_after: None,
        drain_grace: None,
        event: None,
        command: None,
    });
    c
}

/// Found by the chaos soak (seed 25, 14:17 virtual): the reconciler listed the
/// instances, the interruption function then terminated one and recorded its claim
/// Terminated, and the reconciler, re-reading that claim after a conflict, took the
/// instance its stale listing still showed running for a leak and terminated it again.
/// A claim Terminated within the orphan grace still holds its instance; an instance
/// that outlives that is collected.
#[tokio::test(start_paused = true)]
async fn an_instance_another_driver_just_terminated_is_no_leak_in_a_listing_made_before() {
    use nodewright_engine::lifecycle::{LifecycleConfig, reconcile};
    use nodewright_engine::ports::Cloud;
    use nodewright_sim::fakes::CloudOp;
    let world = World::new(
        Catalog::embedded().clone(),
        &ZONES,
        START,
        WorldConfig::default(),
    );
    let now = world.now();
    let done = world
        .cloud
        .insert_instance("m5.large", ZONES[0], Some("default-done"), now - 3600);
    let left = world
        .cloud
        .insert_instance("m5.large", ZONES[0], Some("default-left"), now - 3600);
    let listed = world.cloud.owned_instances().await.unwrap();
    // After the listing: another driver terminates `done` and records it. `left`'s
    // claim was recorded Terminated long ago, its instance still running.
    world
        .cloud
        .terminate(std::slice::from_ref(&done.id))
        .await
        .unwrap();
    let mut claims = vec![
        claim_recording("default-done", &done.id, ClaimState::Terminated, now),
        claim_recording("default-left", &left.id, ClaimState::Terminated, now - 600),
    ];
    for c in &claims {
        world.store.create_claim(c).await.unwrap();
    }
    world.cloud.clear_calls();

    let report = reconcile(
        &world.ports(),
        &LifecycleConfig::default(),
        &world.cluster.snapshot(),
        &Catalog::embedded().clone(),
        &mut claims,
        &listed,
        &[],
        None,
    )
    .await
    .unwrap();

    assert_eq!(report.orphans_terminated, vec![left.id.clone()]);
    let terminated: Vec<String> = world
        .cloud
        .calls()
        .into_iter()
        .filter(|c| c.op == CloudOp::Terminate)
        .map(|c| c.key)
        .collect();
    assert_eq!(
        terminated,
        vec![left.id],
        "{done:?} is not terminated twice"
    );
}

/// The diurnal day, plus AWS Health retirements and two AMI releases (drift).
fn stormy_day(hours: u64) -> Scenario {
    let mut s = diurnal_day(hours);
    for minute in [5 * 60 + 10, 11 * 60 + 40, 17 * 60 + 20] {
        s.disturbances.push(at(
            minute,
            Disturbance::ScheduledChange {
                target: Target::Random,
                notice: minutes(15),
            },
        ));
    }
    for minute in [7 * 60 + 30, 15 * 60 + 30] {
        s.disturbances.push(at(minute, Disturbance::ImageRelease));
    }
    s.disturbances.retain(|d| d.at < minutes(hours * 60));
    s.disturbances.sort_by_key(|d| d.at);
    s
}

/// Faults on every port of `s` at `rate`, a crash every `crash_every` on average,
/// stopping half an hour before the end (the end state is read once things are calm).
fn with_faults(mut s: Scenario, rate: f64, crash_every: Duration, seed: u64) -> Scenario {
    s.faults = Some(FaultConfig {
        rate,
        crash_every: Some(crash_every),
        seed,
        until: Some(s.duration.saturating_sub(minutes(30))),
        ..FaultConfig::default()
    });
    s
}

/// What the chaos soak asserts, counted on one run.
#[derive(Debug, Default, PartialEq)]
struct ChaosFigures {
    instances_without_claim: Vec<String>,
    claims_without_instance: Vec<String>,
    /// Claims with more than one instance, and launches for pods already nominated to
    /// another claim in flight.
    double_launches: Vec<String>,
    double_terminations: Vec<String>,
    stuck_claims: Vec<String>,
    pods_lost: usize,
    pdb_violations: usize,
}

fn chaos_figures(report: &Report) -> ChaosFigures {
    use nodewright_engine::lifecycle::{LifecycleConfig, stuck_deadline};
    let w = &report.world;
    let now = w.now();
    let running: Vec<(String, Option<String>)> = w
        .ec2
        .instances()
        .into_iter()
        .filter(|fi| fi.instance.state != "terminated")
        .map(|fi| (fi.instance.id, fi.instance.claim_name))
        .collect();
    let claims = w.store.claims();
    let live: Vec<&NodeClaim> = claims.iter().filter(|c| !c.state.is_terminal()).collect();
    let mut per_claim: std::collections::BTreeMap<String, usize> = Default::default();
    for fi in w.cloud.instances() {
        if let Some(c) = fi.instance.claim_name {
            *per_claim.entry(c).or_default() += 1;
        }
    }
    let mut double_launches: Vec<String> = per_claim
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(c, n)| format!("{c}: {n} instances"))
        .collect();
    double_launches.extend(
        report
            .unneeded_launches
            .iter()
            .filter(|u| u.reason.contains("nominated to another claim"))
            .map(|u| format!("{}: {}", u.claim, u.reason)),
    );
    let config = LifecycleConfig::default();
    ChaosFigures {
        instances_without_claim: running
            .iter()
            .filter(|(id, _)| !live.iter().any(|c| c.instance_id.as_deref() == Some(id)))
            .map(|(id, claim)| format!("{id} ({claim:?})"))
            .collect(),
        claims_without_instance: live
            .iter()
            .filter(|c| {
                c.instance_id
                    .as_ref()
                    .is_some_and(|id| !running.iter().any(|(r, _)| r == id))
            })
            .map(|c| format!("{} {:?} {:?}", c.name, c.state, c.instance_id))
            .collect(),
        double_launches,
        double_terminations: report
            .chaos
            .as_ref()
            .map(|c| c.double_terminations())
            .unwrap_or_default(),
        stuck_claims: live
            .iter()
            .filter(|c| stuck_deadline(c, &config).is_some_and(|d| d < now))
            .map(|c| {
                format!(
                    "{} {:?} since {}",
                    c.name,
                    c.state,
                    c.updated_at - w.started_at()
                )
            })
            .collect(),
        pods_lost: report.summary.pods_lost,
        pdb_violations: report.summary.pdb_violations,
    }
}

/// The timeline's rows and the decisions (with their reasons) that name `needle`, and
/// the claim it names or whose instance it is: what a failed soak prints.
fn explain(report: &Report, needle: &str) {
    let start = report.world.started_at();
    println!("--- {needle}");
    for r in report.timeline.iter().filter(|r| r.event.contains(needle)) {
        println!("{} {}", nodewright_sim::report::clock_time(r.t), r.event);
    }
    let claim = report
        .world
        .store
        .claims()
        .into_iter()
        .find(|c| c.name == needle || c.instance_id.as_deref() == Some(needle));
    let names: Vec<String> = std::iter::once(needle.to_string())
        .chain(claim.iter().map(|c| c.name.clone()))
        .collect();
    for d in report.world.store.all_decisions() {
        let text = format!("{} {}", d.action, d.reason);
        if names.iter().any(|n| text.contains(n.as_str())) {
            println!(
                "{} {}: {} :: {}",
                nodewright_sim::report::clock_time(d.at - start),
                d.job,
                d.action,
                d.reason
            );
        }
    }
    if let Some(c) = claim {
        println!("{c:#?}");
    }
}

/// Runs `s` on a runtime of its own, on its own thread, in virtual time.
fn simulate_on_a_thread(s: Scenario) -> std::thread::JoinHandle<Report> {
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("a runtime")
            .block_on(simulate(&s))
    })
}

/// Issue 25's chaos soak: the stormy day with 5% of every port's calls failing or
/// stalling, capacity storms, late and reordered events, frozen functions and a crash
/// every ~30 virtual minutes (seed 25), against the same day without faults (run
/// beside it, on another thread). Prints the figures; asserts that nothing leaked,
/// launched or terminated twice, got stuck, or was lost, and that the faults cost
/// less than 10%.
#[test]
fn a_day_of_chaos_leaks_loses_and_duplicates_nothing_and_costs_within_a_tenth_of_a_calm_day() {
    let wall = std::time::Instant::now();
    let hours = soak_hours();
    let calm = simulate_on_a_thread(stormy_day(hours));
    let chaotic = simulate_on_a_thread(with_faults(stormy_day(hours), 0.05, minutes(30), 25));
    let calm = calm.join().expect("the calm day ran");
    let chaotic = chaotic.join().expect("the chaotic day ran");
    let faults = chaotic.summary.faults.clone().expect("faults were set");
    let figures = chaos_figures(&chaotic);
    let (calm_cost, cost) = (calm.summary.cost, chaotic.summary.cost);
    // Written to the process's stderr directly: the test harness captures print!
    // but not this, so CI's log shows the figures of every run.
    let figures_out = [
        format!(
            "chaos soak: {hours} virtual hours (twice, on two threads) in {:.1} s real time",
            wall.elapsed().as_secs_f64()
        ),
        format!("  faults        {faults:?}"),
        format!(
            "  end state     {} instance(s) without a live claim, {} live claim(s) without an instance",
            figures.instances_without_claim.len(),
            figures.claims_without_instance.len()
        ),
        format!(
            "  twice         {} double launch(es), {} double termination(s)",
            figures.double_launches.len(),
            figures.double_terminations.len()
        ),
        format!(
            "  stuck, lost   {} claim(s) stuck past their deadline, {} pod(s) lost, {} PDB violation(s)",
            figures.stuck_claims.len(),
            figures.pods_lost,
            figures.pdb_violations
        ),
        format!(
            "  cost          ${cost:.2} with faults, ${calm_cost:.2} without ({:+.1}%); {} vs {} instances launched, {} vs {} interruptions",
            (cost / calm_cost - 1.0) * 100.0,
            chaotic.summary.instances_launched,
            calm.summary.instances_launched,
            chaotic.summary.interruptions,
            calm.summary.interruptions
        ),
    ];
    {
        use std::io::Write;
        let _ = writeln!(std::io::stderr().lock(), "{}", figures_out.join("\n"));
    }
    if figures != ChaosFigures::default() {
        let suspects = figures
            .double_terminations
            .iter()
            .chain(&figures.instances_without_claim)
            .chain(&figures.claims_without_instance)
            .chain(&figures.stuck_claims)
            .chain(&figures.double_launches);
        for suspect in suspects {
            let needle = suspect.split([' ', ':']).next().unwrap_or(suspect);
            explain(&chaotic, needle);
        }
    }
    assert!(faults.crashes_total() >= hours as usize, "{faults:?}");
    assert_eq!(figures, ChaosFigures::default(), "{:#?}", chaotic.problems);
    assert_eq!(chaotic.problems, Vec::<String>::new());
    assert!(
        (cost - calm_cost).abs() <= 0.10 * calm_cost,
        "cost ${cost:.2} against ${calm_cost:.2} without faults"
    );
}

#[tokio::test(start_paused = true)]
async fn a_rebalanced_node_whose_pods_fit_elsewhere_drains_without_waiting_for_a_replacement() {
    let sys = System::new(m5_pool("spot"));
    sys.add_pods("web", 6, "1", "1536Mi");
    sys.run(1).await;
    let (instance, node) = sys.busiest_instance();
    // The workload shrinks (no controller brings these back): two pods stay on the
    // node to be replaced, one on the other, which has room for two more.
    let (mut here, mut there) = (1, 2);
    sys.world.cluster.with_state(|s| {
        s.pods.retain(|p| {
            let on_it = p.node_name.as_deref() == Some(node.as_str());
            let quota = if on_it { &mut here } else { &mut there };
            if *quota > 0 {
                *quota -= 1;
                return false;
            }
            true
        })
    });
    let since = sys.world.now();
    tokio::join!(sys.run(3), sys.interrupt(rebalance(&instance)));
    let claim = sys.claim_of(&instance);
    assert_eq!(claim.state, ClaimState::Terminated, "{claim:#?}");
    assert!(
        claim.updated_at < since + 60,
        "drained within a minute, not after the 5-minute wait: {}",
        claim.updated_at - since
    );
    assert_eq!(sys.launched(), 2, "no replacement was needed");
    sys.assert_settled();
}

#[tokio::test(start_paused = true)]
async fn a_fargate_pod_in_the_simulator_never_causes_a_launch_while_an_ordinary_pending_pod_does() {
    let sys = System::new(m5_pool("on-demand"));
    // Both as the API server holds them when created: kube-scheduler has not seen them.
    let mut fargate = pod("batch-0", "1", "1536Mi");
    fargate.scheduler_name = Some("fargate-scheduler".into());
    fargate.marked_unschedulable = false;
    sys.world.cluster.add_pod(fargate);

    sys.run(3).await;

    assert_eq!(sys.launched(), 0, "{:#?}", sys.claims());
    let batch = sys.world.cluster.pod("default", "batch-0").unwrap();
    assert!(
        batch.node_name.is_none() && !batch.marked_unschedulable,
        "kube-scheduler leaves another scheduler's pod alone: {batch:?}"
    );

    let mut web = pod("web-0", "1", "1536Mi");
    web.marked_unschedulable = false;
    sys.world.cluster.add_pod(web);

    sys.run(3).await;

    assert_eq!(sys.launched(), 1, "{:#?}", sys.claims());
    let web = sys.world.cluster.pod("default", "web-0").unwrap();
    assert!(
        web.node_name.is_some() && !web.marked_unschedulable,
        "bound, and the mark gone with binding: {web:?}"
    );
    let pending: Vec<String> = sys
        .world
        .still_pending()
        .into_iter()
        .map(|(pod, _)| pod)
        .collect();
    assert_eq!(pending, vec!["default/batch-0".to_string()]);
}

/// m5.large only: one 1500m pod a node.
fn one_pod_a_node_pool() -> NodePool {
    node_pool(
        "general-purpose",
        vec![
            req("node.kubernetes.io/instance-type", &["m5.large"]),
            req(LABEL_CAPACITY_TYPE, &["on-demand"]),
        ],
    )
}

fn repaired_claims(report: &Report) -> Vec<NodeClaim> {
    report
        .world
        .store
        .claims()
        .into_iter()
        .filter(|c| {
            c.disruption
                .as_ref()
                .is_some_and(|d| d.cause == DisruptionCause::Unhealthy)
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_node_not_ready_for_thirty_minutes_is_repaired_and_its_pods_run_again() {
    let mut s = scenario(one_pod_a_node_pool(), 60);
    s.deployments.push(with_budget(
        deployment("web", "1500m", "1Gi", vec![(0, 3)]),
        3,
    ));
    s.disturbances = vec![at(
        5,
        Disturbance::NodeNotReady {
            target: Target::Busiest,
            count: 1,
        },
    )];
    let report = simulate(&s).await;

    assert_scenario_settled(&report);
    let repaired = repaired_claims(&report);
    assert_eq!(repaired.len(), 1, "{:#?}", report.timeline);
    let since = repaired[0].disruption.as_ref().unwrap().since - report.world.started_at();
    // Ready Unknown at 5m, repaired within a poll of 35m (a PDB that allows no eviction
    // does not hold it: the pod cannot run there).
    assert!(
        (35 * 60..35 * 60 + 10).contains(&since),
        "repaired at {since}s"
    );
    let running = report
        .world
        .cluster
        .snapshot()
        .pods
        .iter()
        .filter(|p| p.node_name.is_some())
        .count();
    assert_eq!(running, 3, "every web pod runs again");
}

#[tokio::test(start_paused = true)]
async fn five_of_ten_nodes_failing_at_once_repairs_two_and_blocks_the_rest_with_the_event() {
    // No disruption budget: the 20% limit is what holds (the default budget, 10%,
    // would let one go at a time).
    let mut pool = one_pod_a_node_pool();
    pool.disruption.budgets.clear();
    let mut s = scenario(pool, 41);
    s.deployments
        .push(deployment("web", "1500m", "1Gi", vec![(0, 10)]));
    s.disturbances = vec![at(
        5,
        Disturbance::NodeNotReady {
            target: Target::Random,
            count: 5,
        },
    )];
    let report = simulate(&s).await;

    // The first repair pass: two repaired, three held.
    let decisions: Vec<_> = report
        .world
        .store
        .all_decisions()
        .into_iter()
        .filter(|d| d.job == "repair")
        .collect();
    let first = decisions.iter().map(|d| d.at).min().expect("a repair pass");
    let pass: Vec<&str> = decisions
        .iter()
        .filter(|d| d.at == first)
        .map(|d| d.action.split(' ').next().unwrap_or(""))
        .collect();
    assert_eq!(
        pass.iter().filter(|a| **a == "repair").count(),
        2,
        "20% of ten at once: {decisions:#?}"
    );
    assert_eq!(pass.iter().filter(|a| **a == "hold").count(), 3);
    let events = report.world.cluster.events();
    let blocked: std::collections::BTreeSet<String> = events
        .iter()
        .filter(|e| e.reason == "NodeRepairBlocked" && e.kind == "Node")
        .map(|e| e.name.clone())
        .collect();
    assert_eq!(blocked.len(), 3, "{events:#?}");
    assert!(
        events
            .iter()
            .any(|e| e.reason == "NodeRepairBlocked" && e.kind == "NodePool"),
        "the NodePool hears of it too"
    );
}

#[tokio::test(start_paused = true)]
async fn a_wave_of_failures_is_repaired_a_fifth_of_the_pool_at_a_time_until_all_run() {
    let mut s = scenario(one_pod_a_node_pool(), 120);
    s.deployments
        .push(deployment("web", "1500m", "1Gi", vec![(0, 10)]));
    s.disturbances = vec![at(
        5,
        Disturbance::NodeNotReady {
            target: Target::Random,
            count: 5,
        },
    )];
    let report = simulate(&s).await;

    assert_scenario_settled(&report);
    assert_eq!(repaired_claims(&report).len(), 5);
}

#[tokio::test(start_paused = true)]
async fn an_instance_failing_its_status_checks_is_repaired_within_minutes() {
    let mut s = scenario(one_pod_a_node_pool(), 20);
    s.deployments
        .push(deployment("web", "1500m", "1Gi", vec![(0, 3)]));
    s.disturbances = vec![at(
        5,
        Disturbance::InstanceImpaired {
            target: Target::Oldest,
            count: 1,
        },
    )];
    let report = simulate(&s).await;

    assert_scenario_settled(&report);
    let repaired = repaired_claims(&report);
    assert_eq!(repaired.len(), 1);
    let since = repaired[0].disruption.as_ref().unwrap().since - report.world.started_at();
    // Two minutes of failed checks, read once a minute.
    assert!(
        (7 * 60..=8 * 60 + 10).contains(&since),
        "repaired at {since}s"
    );
}

/// Launches per virtual hour of `report` (the provisioner's `launch` decisions).
fn launches_per_hour(report: &Report) -> Vec<usize> {
    let start = report.world.started_at();
    let mut hours = vec![0usize; 24];
    for d in report.world.store.all_decisions() {
        if d.job == "provision" && d.action.starts_with("launch ") && !d.action.contains("failed") {
            let hour = ((d.at - start) / 3600) as usize;
            if hour < hours.len() {
                hours[hour] += 1;
            }
        }
    }
    hours
}

/// Found by the calm soak (seed 2025): once the day's load fell, consolidation deleted
/// a node a minute whose pods fitted only as the planner packs them; kube-scheduler
/// (the simulator's binder) spread the small ones into the hole a large one needed, the
/// large one went pending and was launched for, and the new node was consolidated the
/// next minute: 30–52 launches an hour in hours 15–20, against 1–7 in the others.
#[tokio::test(start_paused = true)]
async fn consolidation_and_provisioning_do_not_undo_each_other_hour_after_hour() {
    let report = simulate(&stormy_day(21)).await;
    assert_scenario_settled(&report);
    let hours = launches_per_hour(&report);
    eprintln!("launches per hour: {hours:?}");
    // Hours 7 and 15 hold the AMI releases: every node is replaced once.
    for (hour, &n) in hours.iter().enumerate() {
        let bound = if hour == 7 || hour == 15 { 20 } else { 8 };
        assert!(n <= bound, "hour {hour}: {n} launches; per hour: {hours:?}");
    }
}
