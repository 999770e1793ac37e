//! The disruption job with the provisioner, over time, in the simulated world
//! (`nodewright_sim`): the provisioner runs as its schedule runs it (an
//! invocation a minute, polling every 5 s, advancing commands on every poll); the
//! disruption function once a minute, half a minute later, deciding and exiting.
//!
//! Decisions are hand-built here (a decider that finds empty nodes, one that expires
//! named nodes) so these tests pin the execution: marking, replacements, validation,
//! abandonment, draining, termination, crashes. Core's `decide` has its own tests.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nodewright_core::api::model::{Budget, BudgetNodes, NodePool, NodeRequirement, Operator};
use nodewright_core::catalog::Catalog;
use nodewright_core::cluster::Pod;
use nodewright_core::disruption::command::{
    Command, Decision, DisruptionInput, Method, RejectedNode,
};
use nodewright_core::disruption::hash::{self, HASH_VERSION};
use nodewright_core::disruption::{Reason, RejectCode};
use nodewright_core::nodeclaim::{ClaimState, DisruptionCause, NodeClaim};
use nodewright_core::provisioning::PlannedNodeClaim;
use nodewright_core::testing::{node_pool, pod};
use nodewright_core::well_known::TAINT_DISRUPTED;
use nodewright_core::well_known::{LABEL_CAPACITY_TYPE, LABEL_NODEPOOL};
use nodewright_engine::default_decider;
use nodewright_engine::ports::{CloudError, ErrorKind, StoreError};
use nodewright_engine::{
    Decider, Disrupter, DisruptionConfig, DisruptionReport, Provisioner, ProvisionerConfig,
};
use nodewright_sim::fakes::{CloudOp, ClusterOp, StoreOp, node_class};
use nodewright_sim::{World, WorldConfig};

#[path = "disruption/worth.rs"]
mod worth;

#[path = "disruption/min_values.rs"]
mod min_values;

#[path = "disruption/reservations.rs"]
mod reservations;

#[path = "disruption/zonal_shift.rs"]
mod zonal_shift;

const ZONES: [&str; 3] = ["us-east-1a", "us-east-1b", "us-east-1c"];
/// 2025-01-01T00:00:00Z.
const START: i64 = 1_735_689_600;
const POLL: Duration = Duration::from_secs(5);
/// A fault to inject, named for the failure message.
type Fault = (String, Box<dyn Fn(&World)>);

fn m5_pool() -> NodePool {
    node_pool(
        "general-purpose",
        vec![
            NodeRequirement {
                key: "node.kubernetes.io/instance-type".into(),
                operator: Operator::In,
                values: vec!["m5.xlarge".into()],
                min_values: None,
            },
            NodeRequirement {
                key: LABEL_CAPACITY_TYPE.into(),
                operator: Operator::In,
                values: vec!["on-demand".into()],
                min_values: None,
            },
        ],
    )
}

/// Pods that leave with their node (all but DaemonSet, mirror and terminal pods).
fn moving<'a>(pods: &'a [Pod], node: &str) -> Vec<&'a Pod> {
    pods.iter()
        .filter(|p| p.node_name.as_deref() == Some(node))
        .filter(|p| !p.daemonset_owned && !p.mirror && !p.terminal)
        .collect()
}

/// A stand-in for core's decision: every managed node in `expire` is Expired (forceful,
/// replaced by an m5.xlarge for its pods, no budget); every other managed node with no
/// pod to move is Empty unless a pod or the node says do-not-disrupt. Nodes already being
/// disrupted are left alone.
fn test_decider(expire: Arc<Mutex<HashSet<String>>>) -> Decider {
    Arc::new(move |input: &DisruptionInput<'_>| {
        let expire = expire.lock().unwrap().clone();
        let mut d = Decision::default();
        for n in &input.snapshot.nodes {
            let Some(pool) = n.labels.get(LABEL_NODEPOOL) else {
                continue;
            };
            if input.disrupting.contains(&n.name) {
                continue;
            }
            let pods = moving(&input.snapshot.pods, &n.name);
            if expire.contains(&n.name) {
                let zone = n.labels["topology.kubernetes.io/zone"].clone();
                d.commands.push(Command {
                    method: Method::Expiration,
                    reason: Reason::Expired,
                    drifted: Vec::new(),
                    nodes: vec![n.name.clone()],
                    moves: vec![],
                    replacements: vec![PlannedNodeClaim {
                        node_pool: pool.clone(),
                        instance_type: "m5.xlarge".into(),
                        instance_type_options: vec!["m5.xlarge".into()],
                        compatible_instance_types: 1,
                        capacity_type: "on-demand".into(),
                        zone: zone.clone(),
                        price_per_hour: 0.192,
                        pods: pods.iter().map(|p| p.key()).collect(),
                        labels: Default::default(),
                        overlays_applied: Default::default(),
                        zones: vec![zone],
                        capacity_types: vec!["on-demand".into()],
                        requirements: Default::default(),
                    }],
                    price_per_hour_before: 0.192,
                    price_per_hour_after: 0.192,
                    savings_per_hour: 0.0,
                    scores: Vec::new(),
                });
                continue;
            }
            let blocked = n.do_not_disrupt || pods.iter().any(|p| p.do_not_disrupt);
            if pods.is_empty() && !blocked {
                d.commands.push(Command {
                    method: Method::Emptiness,
                    reason: Reason::Empty,
                    drifted: Vec::new(),
                    nodes: vec![n.name.clone()],
                    moves: vec![],
                    replacements: vec![],
                    price_per_hour_before: 0.192,
                    price_per_hour_after: 0.0,
                    savings_per_hour: 0.192,
                    scores: Vec::new(),
                });
            } else {
                let (code, reason) = if blocked {
                    (
                        RejectCode::DoNotDisrupt,
                        "a pod has karpenter.sh/do-not-disrupt",
                    )
                } else {
                    (RejectCode::NotCheaper, "not empty")
                };
                d.rejected.push(RejectedNode {
                    node: n.name.clone(),
                    code,
                    reason: reason.into(),
                });
            }
        }
        d
    })
}

struct System {
    world: Arc<World>,
    provisioner: Provisioner,
    disrupter: Disrupter,
    expire: Arc<Mutex<HashSet<String>>>,
    /// Reports of the disruption runs so far.
    runs: Mutex<Vec<DisruptionReport>>,
}

impl System {
    /// Decisions by [`test_decider`].
    fn new() -> System {
        let expire = Arc::new(Mutex::new(HashSet::new()));
        System::with(m5_pool(), test_decider(expire.clone()), expire)
    }

    /// Decisions by core's `decide`, over `pool`.
    fn deciding_with_core(pool: NodePool) -> System {
        System::with(pool, default_decider(), Arc::default())
    }

    /// Decisions by core's `decide`, over `pool`, with spot-to-spot consolidation on
    /// (for both jobs: the provisioner's polls validate the commands).
    fn deciding_with_core_spot_to_spot(pool: NodePool) -> System {
        System::with_settings(pool, default_decider(), Arc::default(), true)
    }

    fn with(pool: NodePool, decider: Decider, expire: Arc<Mutex<HashSet<String>>>) -> System {
        System::with_settings(pool, decider, expire, false)
    }

    fn with_settings(
        pool: NodePool,
        decider: Decider,
        expire: Arc<Mutex<HashSet<String>>>,
        spot_to_spot: bool,
    ) -> System {
        let world = World::new(
            Catalog::embedded().clone(),
            &ZONES,
            START,
            WorldConfig::default(),
        );
        world.cluster.with_state(|s| {
            s.node_pools.push(pool);
            s.node_classes.push(node_class("default"));
        });
        let mut provisioner_config = ProvisionerConfig::new("test-cluster", "provisioner-1");
        provisioner_config.spot_to_spot = spot_to_spot;
        let provisioner =
            Provisioner::new(world.ports(), provisioner_config).with_decider(decider.clone());
        let mut disruption_config = DisruptionConfig::new("test-cluster", "disruption-1");
        disruption_config.spot_to_spot = spot_to_spot;
        let disrupter = Disrupter::new(world.ports(), disruption_config).with_decider(decider);
        System {
            world,
            provisioner,
            disrupter,
            expire,
            runs: Mutex::new(Vec::new()),
        }
    }

    fn add_pods(&self, app: &str, n: usize) {
        for i in 0..n {
            let mut p = pod(&format!("{app}-{i}"), "1", "1536Mi");
            p.labels.insert("app".into(), app.into());
            self.world.cluster.add_pod(p);
        }
    }

    /// Only the provisioner, for `minutes`.
    async fn provision(&self, minutes: i64) {
        let until = self.world.now() + minutes * 60;
        tokio::join!(self.world.run(until), self.provisioner_schedule(until));
    }

    /// The provisioner and the disruption function on their schedules, for `minutes`.
    async fn run(&self, minutes: i64) {
        let until = self.world.now() + minutes * 60;
        tokio::join!(
            self.world.run(until),
            self.provisioner_schedule(until),
            self.disruption_schedule(until)
        );
    }

    async fn provisioner_schedule(&self, until: i64) {
        while self.world.now() + 60 <= until {
            let started = self.world.now();
            // A failed tick (an injected crash) is retried at the next poll, as in Lambda.
            self.provisioner
                .run_for(Duration::from_secs(55), POLL)
                .await;
            sleep_until(&self.world, started + 60).await;
        }
    }

    async fn disruption_schedule(&self, until: i64) {
        sleep_until(&self.world, self.world.now() + 30).await;
        while self.world.now() + 30 <= until {
            let started = self.world.now();
            if let Ok(report) = self.disrupter.tick().await {
                self.runs.lock().unwrap().push(report);
            }
            sleep_until(&self.world, started + 60).await;
        }
    }

    fn claims(&self) -> Vec<NodeClaim> {
        self.world.store.claims()
    }

    fn live_nodes(&self) -> Vec<String> {
        let mut n: Vec<String> = self
            .world
            .cluster
            .nodes()
            .into_iter()
            .map(|n| n.name)
            .collect();
        n.sort();
        n
    }

    fn pods_on(&self, node: &str) -> usize {
        let state = self.world.cluster.snapshot();
        moving(&state.pods, node).len()
    }

    /// Instances = live claims, every claim a disruption touched Terminated or back to
    /// Initialized (or a replacement that could not launch, LaunchFailed), no pod pending, no PDB violated, nothing launched twice for a claim,
    /// every terminated instance terminated by its own claim.
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
            assert!(
                matches!(
                    c.state,
                    ClaimState::Initialized | ClaimState::Terminated | ClaimState::LaunchFailed
                ),
                "{c:#?}"
            );
        }
        assert_eq!(self.world.still_pending(), vec![], "no pod left pending");
        assert_eq!(self.world.budget_violations(), vec![], "no PDB violated");
        assert_eq!(self.live_nodes().len(), live.len(), "a node per live claim");
        let mut tokens: Vec<String> = self
            .world
            .cloud
            .instances()
            .into_iter()
            .filter_map(|i| i.instance.claim_name)
            .collect();
        let n = tokens.len();
        tokens.sort();
        tokens.dedup();
        assert_eq!(tokens.len(), n, "one instance per claim");
        for node in self.live_nodes() {
            let n = self.world.cluster.node(&node).unwrap();
            assert!(
                !n.taints.iter().any(|t| t.key == TAINT_DISRUPTED),
                "no live node left cordoned: {node}"
            );
        }
    }

    fn decisions(&self, job: &str) -> Vec<String> {
        self.world
            .store
            .all_decisions()
            .into_iter()
            .filter(|d| d.job == job)
            .map(|d| format!("{}: {}", d.action, d.reason))
            .collect()
    }
}

async fn sleep_until(world: &World, at: i64) {
    let wait = (at - world.now()).max(0);
    tokio::time::sleep(Duration::from_secs(wait as u64)).await;
}

/// Two nodes, three 1-cpu pods each.
async fn two_full_nodes() -> System {
    two_full_nodes_of(System::new()).await
}

async fn two_full_nodes_of(sys: System) -> System {
    sys.add_pods("web", 6);
    sys.provision(2).await;
    assert_eq!(sys.live_nodes().len(), 2, "{:#?}", sys.claims());
    sys
}

fn delete_pods_on(sys: &System, node: &str) {
    sys.world
        .cluster
        .with_state(|s| s.pods.retain(|p| p.node_name.as_deref() != Some(node)));
}

#[tokio::test(start_paused = true)]
async fn an_empty_node_is_validated_drained_and_terminated_and_the_other_stays() {
    let sys = two_full_nodes().await;
    let nodes = sys.live_nodes();
    delete_pods_on(&sys, &nodes[0]);

    sys.run(3).await;

    assert_eq!(
        sys.live_nodes(),
        vec![nodes[1].clone()],
        "{:#?}\n{:#?}\n{:#?}",
        sys.decisions("disruption"),
        sys.runs.lock().unwrap(),
        sys.claims()
    );
    let gone = sys
        .claims()
        .into_iter()
        .find(|c| c.node_name.as_deref() == Some(nodes[0].as_str()))
        .unwrap();
    assert_eq!(gone.state, ClaimState::Terminated);
    assert_eq!(
        gone.disruption.as_ref().map(|d| d.cause),
        Some(DisruptionCause::Empty)
    );
    assert_eq!(sys.world.cloud.instances().len(), 2, "nothing launched");
    sys.assert_settled();
    let log = sys.decisions("disruption");
    assert!(log.iter().any(|d| d.starts_with("disrupt ")), "{log:#?}");
    assert!(log.iter().any(|d| d.starts_with("validated ")), "{log:#?}");
    assert!(
        log.iter()
            .any(|d| d.starts_with(&format!("keep {}", nodes[1]))),
        "rejections recorded: {log:#?}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_expired_node_is_replaced_first_and_its_pods_move_without_a_second_launch() {
    // The decider expires the node whatever the budget says (expiration is forceful);
    // the execution must launch exactly one replacement, nominated for the node's pods,
    // and the provisioner, polling through it all, must launch nothing for them.
    let sys = System::new();
    sys.add_pods("web", 3);
    sys.provision(2).await;
    let old = sys.live_nodes();
    assert_eq!(old.len(), 1);
    sys.expire.lock().unwrap().insert(old[0].clone());

    sys.run(4).await;

    let nodes = sys.live_nodes();
    assert_eq!(nodes.len(), 1, "{:#?}", sys.claims());
    assert_ne!(nodes[0], old[0], "replaced");
    assert_eq!(sys.pods_on(&nodes[0]), 3, "the pods run on the replacement");
    assert_eq!(
        sys.world.cloud.instances().len(),
        2,
        "one original, one replacement: {:#?}",
        sys.claims()
    );
    sys.assert_settled();
    let replacement = sys
        .claims()
        .into_iter()
        .find(|c| c.node_name.as_deref() == Some(nodes[0].as_str()))
        .unwrap();
    assert_eq!(replacement.pods.len(), 3, "nominated for the moving pods");
    // The node was launched with nodewright's drift hashes, and they match.
    let node = sys.world.cluster.node(&nodes[0]).unwrap();
    assert_eq!(
        node.nodepool_hash.as_deref(),
        Some(hash::nodepool_hash(&m5_pool()).as_str())
    );
    let class = node_class("default");
    assert_eq!(
        hash::hash_drift(
            &m5_pool(),
            Some(&class),
            &node,
            Some(HASH_VERSION),
            Some(HASH_VERSION)
        ),
        None
    );
}

#[tokio::test(start_paused = true)]
async fn a_drain_never_evicts_a_do_not_disrupt_pod_and_waits_until_it_ends() {
    // Expiration is forceful: a do-not-disrupt pod does not keep the node from being
    // chosen, and its replacement launches. The drain moves the other pods and then
    // waits (Karpenter never evicts such a pod; no terminationGracePeriod here).
    let sys = System::new();
    sys.add_pods("web", 3);
    sys.world.cluster.with_state(|s| {
        let p = s.pods.iter_mut().find(|p| p.name == "web-0").unwrap();
        p.do_not_disrupt = true;
    });
    sys.provision(2).await;
    let old = sys.live_nodes();
    assert_eq!(old.len(), 1);
    sys.expire.lock().unwrap().insert(old[0].clone());

    sys.run(5).await;

    let claim_of_old = |sys: &System| {
        sys.claims()
            .into_iter()
            .find(|c| c.node_name.as_deref() == Some(old[0].as_str()))
            .unwrap()
    };
    assert_eq!(
        claim_of_old(&sys).state,
        ClaimState::Draining,
        "{:#?}",
        sys.claims()
    );
    let state = sys.world.cluster.snapshot();
    let on_old: Vec<&str> = moving(&state.pods, &old[0])
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(on_old, ["web-0"], "only the do-not-disrupt pod is left");
    assert!(
        !sys.world
            .cluster
            .calls()
            .iter()
            .any(|c| c.op == ClusterOp::EvictPod && c.key.ends_with("/web-0")),
        "web-0 was never evicted"
    );
    assert_eq!(sys.live_nodes().len(), 2, "the old node waits for it");

    // Its job ends: the node goes on the next polls.
    sys.world
        .cluster
        .with_state(|s| s.pods.retain(|p| p.name != "web-0"));
    sys.run(2).await;

    assert_eq!(claim_of_old(&sys).state, ClaimState::Terminated);
    assert_eq!(sys.live_nodes().len(), 1);
    assert_eq!(sys.world.cloud.instances().len(), 2, "one replacement only");
    sys.assert_settled();
}

#[tokio::test(start_paused = true)]
async fn do_not_disrupt_pods_keep_an_otherwise_empty_node() {
    let sys = two_full_nodes().await;
    let nodes = sys.live_nodes();
    delete_pods_on(&sys, &nodes[0]);
    let mut p = pod("batch-0", "100m", "128Mi");
    p.do_not_disrupt = true;
    p.node_name = Some(nodes[0].clone());
    sys.world.cluster.add_pod(p);

    sys.run(3).await;

    assert_eq!(sys.live_nodes(), nodes, "both nodes stay");
    assert_eq!(sys.world.cloud.instances().len(), 2);
    sys.assert_settled();
}

#[tokio::test(start_paused = true)]
async fn a_pod_arriving_during_the_validation_delay_abandons_the_command_and_uncordons() {
    let sys = two_full_nodes().await;
    let nodes = sys.live_nodes();
    delete_pods_on(&sys, &nodes[0]);
    // The disruption run decides and marks; the provisioner is not polling yet.
    let world = sys.world.clone();
    let until = world.now() + 31;
    let (_, report) = tokio::join!(world.run(until), async {
        sleep_until(&sys.world, sys.world.now() + 30).await;
        sys.disrupter.tick().await.unwrap()
    });
    assert_eq!(report.started.len(), 1, "{report:#?}");
    let tainted = sys.world.cluster.node(&nodes[0]).unwrap();
    assert!(tainted.taints.iter().any(|t| t.key == TAINT_DISRUPTED));
    // A pod lands on it before the 15 s are up (bound directly: the taint keeps the
    // scheduler off, not a pod that names its node).
    let mut p = pod("late-0", "500m", "512Mi");
    p.node_name = Some(nodes[0].clone());
    sys.world.cluster.add_pod(p);

    sys.provision(2).await;

    assert_eq!(sys.live_nodes(), nodes, "the node stays");
    let back = sys
        .claims()
        .into_iter()
        .find(|c| c.node_name.as_deref() == Some(nodes[0].as_str()))
        .unwrap();
    assert_eq!(back.state, ClaimState::Initialized);
    assert_eq!(back.disruption, None);
    sys.assert_settled();
    let log = sys.decisions("disruption");
    assert!(
        log.iter()
            .any(|d| d.starts_with("abandoned ") && d.contains("no longer qualifies")),
        "{log:#?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_replacement_that_cannot_launch_abandons_the_command_and_the_node_stays() {
    let sys = System::new();
    sys.add_pods("web", 3);
    sys.provision(2).await;
    let old = sys.live_nodes();
    sys.expire.lock().unwrap().insert(old[0].clone());
    // No capacity for the replacement anywhere.
    for z in ZONES {
        sys.world.cloud.set_capacity(
            "m5.xlarge",
            z,
            nodewright_core::catalog::CapacityType::OnDemand,
            false,
        );
    }
    let world = sys.world.clone();
    let until = world.now() + 31;
    let (_, report) = tokio::join!(world.run(until), async {
        sleep_until(&sys.world, sys.world.now() + 30).await;
        sys.disrupter.tick().await.unwrap()
    });
    assert_eq!(
        report.progress.abandoned.len(),
        1,
        "abandoned in the same run: {report:#?}"
    );
    assert!(report.progress.abandoned[0].1.contains("failed to launch"));
    assert_eq!(sys.live_nodes(), old);
    sys.expire.lock().unwrap().clear();
    sys.provision(1).await;
    sys.assert_settled();
}

/// A run of the expiry scenario with one fault injected, to the end.
async fn expiry_with(fault: impl FnOnce(&World)) -> System {
    let sys = System::new();
    sys.add_pods("web", 3);
    sys.provision(2).await;
    let old = sys.live_nodes();
    sys.expire.lock().unwrap().insert(old[0].clone());
    sys.world.store.clear_calls();
    sys.world.cloud.clear_calls();
    fault(&sys.world);
    sys.run(5).await;
    sys
}

#[tokio::test(start_paused = true)]
async fn a_crash_at_any_write_or_launch_of_a_command_is_resumed_with_no_leak_and_one_termination() {
    // A clean run says how many times each step is taken.
    let clean = expiry_with(|_| {}).await;
    clean.assert_settled();
    let store_counts = clean.world.store.call_counts();
    let cloud_counts = clean.world.cloud.call_counts();
    let mut faults: Vec<Fault> = Vec::new();
    for op in [StoreOp::CreateClaim, StoreOp::UpdateClaim] {
        for k in 0..store_counts.get(&op).copied().unwrap_or(0) {
            faults.push((
                format!("{op:?} #{k}"),
                Box::new(move |w: &World| {
                    w.store
                        .fail_after(op, k, StoreError::new(ErrorKind::Unavailable, "crash"))
                }),
            ));
        }
    }
    for op in [CloudOp::Launch, CloudOp::Terminate] {
        for k in 0..cloud_counts.get(&op).copied().unwrap_or(0) {
            faults.push((
                format!("{op:?} #{k}"),
                Box::new(move |w: &World| {
                    w.cloud
                        .fail_after(op, k, CloudError::new(ErrorKind::Unavailable, "crash"))
                }),
            ));
        }
    }
    assert!(faults.len() >= 8, "{store_counts:?} {cloud_counts:?}");
    for (what, fault) in faults {
        let sys = expiry_with(fault).await;
        let nodes = sys.live_nodes();
        assert_eq!(nodes.len(), 1, "{what}: {:#?}", sys.claims());
        assert_eq!(sys.pods_on(&nodes[0]), 3, "{what}");
        assert_eq!(
            sys.world.cloud.instances().len(),
            2,
            "{what}: one replacement, launched once: {:#?}",
            sys.claims()
        );
        // Each instance is terminated only by its own claim, and the replacement never.
        let live: Vec<String> = sys
            .claims()
            .into_iter()
            .filter(|c| !c.state.is_terminal())
            .filter_map(|c| c.instance_id)
            .collect();
        let terminated: Vec<String> = sys
            .world
            .cloud
            .calls()
            .into_iter()
            .filter(|c| c.op == CloudOp::Terminate)
            .map(|c| c.key)
            .collect();
        assert!(
            terminated
                .iter()
                .all(|id| !live.iter().any(|l| id.contains(l.as_str()))),
            "{what}: a live instance was terminated: {terminated:?}"
        );
        sys.assert_settled();
    }
}

#[tokio::test(start_paused = true)]
async fn the_provisioner_and_disruption_running_together_through_a_scale_down_launch_nothing_twice()
{
    // Pods come and go while both jobs run: every launch is for pods no other claim
    // was made for, and the cluster ends with no empty node.
    let sys = two_full_nodes().await;
    let nodes = sys.live_nodes();
    sys.world.cluster.with_state(|s| {
        s.pods
            .retain(|p| p.node_name.as_deref() != Some(nodes[0].as_str()))
    });
    sys.add_pods("api", 2);
    sys.run(4).await;

    sys.assert_settled();
    for n in sys.live_nodes() {
        assert!(sys.pods_on(&n) > 0, "no empty node left: {n}");
    }
    assert_eq!(
        sys.world.unneeded_launches(),
        vec![],
        "nothing launched twice"
    );
}

// ----- with core's decisions -------------------------------------------------------------

fn pool_with_budget(nodes: BudgetNodes) -> NodePool {
    let mut pool = m5_pool();
    pool.disruption.budgets = vec![Budget {
        nodes,
        schedule: None,
        duration: None,
        reasons: vec![],
    }];
    pool
}

/// Leaves one pod on the first node and two on the second: one node's worth.
fn scale_down(sys: &System, nodes: &[String]) {
    let mut keep = std::collections::HashMap::new();
    sys.world.cluster.with_state(|s| {
        s.pods.retain(|p| {
            let Some(node) = p.node_name.as_deref() else {
                return true;
            };
            let quota = if node == nodes[0] { 1 } else { 2 };
            let n = keep.entry(node.to_string()).or_insert(0);
            *n += 1;
            *n <= quota
        })
    });
}

#[tokio::test(start_paused = true)]
async fn core_consolidates_a_scale_down_to_one_node_with_every_pod_running() {
    let sys = two_full_nodes_of(System::deciding_with_core(m5_pool())).await;
    let nodes = sys.live_nodes();
    scale_down(&sys, &nodes);

    sys.run(4).await;

    let left = sys.live_nodes();
    assert_eq!(
        left.len(),
        1,
        "{:#?}\n{:#?}",
        sys.decisions("disruption"),
        sys.runs.lock().unwrap()
    );
    assert_eq!(sys.pods_on(&left[0]), 3);
    assert_eq!(sys.world.cloud.instances().len(), 2, "nothing launched");
    sys.assert_settled();
    assert!(
        sys.decisions("disruption")
            .iter()
            .any(|d| d.contains("saves 0.1920/h")),
        "{:#?}",
        sys.decisions("disruption")
    );
}

#[tokio::test(start_paused = true)]
async fn core_consolidates_nothing_under_a_budget_of_zero() {
    let sys = two_full_nodes_of(System::deciding_with_core(pool_with_budget(
        BudgetNodes::Count(0),
    )))
    .await;
    let nodes = sys.live_nodes();
    scale_down(&sys, &nodes);

    sys.run(3).await;

    assert_eq!(sys.live_nodes(), nodes);
    sys.assert_settled();
    assert!(
        sys.decisions("disruption")
            .iter()
            .any(|d| d.contains("DisruptionBudget")),
        "{:#?}",
        sys.decisions("disruption")
    );
}

#[tokio::test(start_paused = true)]
async fn a_quiet_cluster_is_answered_with_the_decision_already_made_until_something_changes() {
    // Core decides, and the decider counts the fresh decisions it is asked for.
    let asked = Arc::new(Mutex::new(0usize));
    let counting: Decider = {
        let asked = asked.clone();
        let core = default_decider();
        Arc::new(move |input: &DisruptionInput<'_>| {
            if input.validating.is_none() {
                *asked.lock().unwrap() += 1;
            }
            core(input)
        })
    };
    let sys = two_full_nodes_of(System::with(m5_pool(), counting, Arc::default())).await;
    let nodes = sys.live_nodes();

    // Two full nodes: nothing to consolidate, minute after minute.
    sys.run(5).await;
    let quiet: Vec<DisruptionReport> = sys.runs.lock().unwrap().drain(..).collect();
    assert_eq!(quiet.len(), 5);
    assert!(quiet.iter().all(|r| r.decided && r.started.is_empty()));
    assert!(
        quiet.iter().all(|r| r.rejected == quiet[0].rejected),
        "every run keeps the same nodes for the same reasons: {quiet:#?}"
    );
    assert_eq!(quiet[0].rejected.len(), 2, "{:#?}", quiet[0].rejected);
    assert_eq!(
        *asked.lock().unwrap(),
        1,
        "the view did not change: the first decision answers the four runs after it"
    );

    // A change in the view is decided afresh: the first node's pods go, it is empty.
    delete_pods_on(&sys, &nodes[0]);
    sys.run(3).await;
    assert!(*asked.lock().unwrap() > 1);
    assert_eq!(sys.live_nodes(), vec![nodes[1].clone()]);
    sys.assert_settled();
}

#[tokio::test(start_paused = true)]
async fn core_replaces_an_expired_node_despite_a_budget_of_zero() {
    let mut pool = pool_with_budget(BudgetNodes::Count(0));
    pool.expire_after = Some(Duration::from_secs(5 * 60));
    let sys = System::deciding_with_core(pool);
    sys.add_pods("web", 3);
    sys.provision(2).await;
    let old = sys.live_nodes();
    assert_eq!(old.len(), 1);

    sys.run(6).await;

    let nodes = sys.live_nodes();
    assert_eq!(
        nodes.len(),
        1,
        "{:#?}\n{:#?}",
        sys.decisions("disruption"),
        sys.claims()
    );
    assert_ne!(
        nodes,
        old,
        "replaced: {:#?}\n{:#?}",
        sys.decisions("disruption"),
        sys.world.cluster.nodes()
    );
    assert_eq!(sys.pods_on(&nodes[0]), 3);
    assert_eq!(sys.world.cloud.instances().len(), 2, "one replacement");
    let expired = sys
        .claims()
        .into_iter()
        .find(|c| c.node_name.as_deref() == Some(old[0].as_str()))
        .unwrap();
    assert_eq!(
        expired.disruption.map(|d| d.cause),
        Some(DisruptionCause::Expired)
    );
    sys.assert_settled();
}

#[tokio::test(start_paused = true)]
async fn core_keeps_an_empty_node_that_runs_a_do_not_disrupt_pod() {
    let sys = two_full_nodes_of(System::deciding_with_core(m5_pool())).await;
    let nodes = sys.live_nodes();
    delete_pods_on(&sys, &nodes[0]);
    let mut p = pod("batch-0", "100m", "128Mi");
    p.do_not_disrupt = true;
    p.node_name = Some(nodes[0].clone());
    sys.world.cluster.add_pod(p);

    sys.run(3).await;

    // The other node may well be consolidated onto it; this one stays.
    assert!(sys.live_nodes().contains(&nodes[0]));
    sys.assert_settled();
    assert!(
        sys.decisions("disruption")
            .iter()
            .any(|d| d.starts_with(&format!("keep {} (DoNotDisrupt)", nodes[0]))),
        "{:#?}",
        sys.decisions("disruption")
    );
}

#[tokio::test(start_paused = true)]
async fn a_drain_a_budget_refuses_forever_ends_at_the_node_pools_termination_grace_period() {
    let mut pool = m5_pool();
    pool.termination_grace_period = Some(Duration::from_secs(90));
    let expire = Arc::new(Mutex::new(HashSet::new()));
    let sys = System::with(pool, test_decider(expire.clone()), expire);
    sys.add_pods("web", 3);
    // More than can ever be available: every eviction is refused.
    sys.world.cluster.with_state(|s| {
        s.pdbs.push(nodewright_core::cluster::PodDisruptionBudget {
            namespace: "default".into(),
            name: "web".into(),
            selector: Some(nodewright_core::testing::selector("web")),
            min_available: Some(nodewright_core::cluster::IntOrPercent::Int(10)),
            max_unavailable: None,
            status_disruptions_allowed: None,
        })
    });
    sys.provision(2).await;
    let old = sys.live_nodes();
    sys.expire.lock().unwrap().insert(old[0].clone());

    sys.run(5).await;

    let nodes = sys.live_nodes();
    assert_eq!(nodes.len(), 1, "{:#?}", sys.claims());
    assert_ne!(nodes, old, "the old node went at its grace period");
    assert_eq!(sys.pods_on(&nodes[0]), 3, "its pods run on the replacement");
    let gone = sys
        .claims()
        .into_iter()
        .find(|c| c.node_name.as_deref() == Some(old[0].as_str()))
        .unwrap();
    assert_eq!(gone.state, ClaimState::Terminated);
    let d = gone.disruption.unwrap();
    assert!(d.deadline.is_some_and(|t| t - d.since <= 90 + 60), "{d:?}");
}

// ----- issue 13: drift, spot-to-spot, M → N, budget windows, PDBs -----------------------

impl System {
    /// The instance behind a node (by its providerID), as EC2 holds it.
    fn instance_of(&self, node: &str) -> nodewright_sim::fakes::FakeInstance {
        let n = self.world.cluster.node(node).expect("node");
        let id = n
            .provider_id
            .as_deref()
            .and_then(nodewright_core::nodeclaim::instance_id_from_provider_id)
            .expect("providerID");
        self.world.cloud.instance(id).expect("instance")
    }

    fn claim_of(&self, node: &str) -> NodeClaim {
        self.claims()
            .into_iter()
            .find(|c| c.node_name.as_deref() == Some(node))
            .expect("claim")
    }

    /// Every pod that went pending after `since` was bound again within `secs`: it
    /// was moved onto capacity already there, never left waiting for a launch.
    fn assert_pods_moved_within(&self, since: i64, secs: i64) {
        let slow: Vec<_> = self
            .world
            .pod_waits()
            .into_iter()
            .filter(|w| w.since >= since && w.seconds() > secs)
            .collect();
        assert_eq!(slow, vec![], "pods waited for capacity");
    }
}

fn web_pdb(max_unavailable: i32) -> nodewright_core::cluster::PodDisruptionBudget {
    nodewright_core::cluster::PodDisruptionBudget {
        namespace: "default".into(),
        name: "web".into(),
        selector: Some(nodewright_core::testing::selector("web")),
        min_available: None,
        max_unavailable: Some(nodewright_core::cluster::IntOrPercent::Int(max_unavailable)),
        status_disruptions_allowed: None,
    }
}

/// Keeps `quota[i]` pods on the i-th node (in name order) and deletes the rest.
fn keep_on_nodes(sys: &System, nodes: &[String], quota: &[usize]) {
    let mut kept = std::collections::HashMap::new();
    sys.world.cluster.with_state(|s| {
        s.pods.retain(|p| {
            let Some(node) = p.node_name.as_deref() else {
                return true;
            };
            let Some(i) = nodes.iter().position(|n| n == node) else {
                return true;
            };
            let n = kept.entry(node.to_string()).or_insert(0);
            *n += 1;
            *n <= quota[i]
        })
    });
}

#[tokio::test(start_paused = true)]
async fn a_drifted_ami_is_replaced_and_the_new_node_runs_the_new_image() {
    use nodewright_engine::ports::Image;
    let sys = System::deciding_with_core(m5_pool());
    sys.add_pods("web", 3);
    sys.provision(2).await;
    let old = sys.live_nodes();
    assert_eq!(old.len(), 1);
    let before = sys.instance_of(&old[0]).instance;
    assert_eq!(before.image_id.as_deref(), Some("ami-0aaaaaaaaaaaaaaa1"));
    assert!(before.subnet_id.is_some() && !before.security_group_ids.is_empty());
    // Settled: a minute of both jobs disrupts nothing.
    sys.run(1).await;
    assert_eq!(sys.live_nodes(), old);

    // The alias now resolves to a new AMI.
    sys.world.cloud.set_images(vec![
        Image {
            id: "ami-0bbbbbbbbbbbbbbb1".into(),
            arch: "amd64".into(),
        },
        Image {
            id: "ami-0bbbbbbbbbbbbbbb2".into(),
            arch: "arm64".into(),
        },
    ]);
    let t0 = sys.world.now();
    sys.run(4).await;

    let nodes = sys.live_nodes();
    assert_eq!(
        nodes.len(),
        1,
        "{:#?}\n{:#?}",
        sys.decisions("disruption"),
        sys.claims()
    );
    assert_ne!(nodes, old, "replaced: {:#?}", sys.decisions("disruption"));
    assert_eq!(
        sys.instance_of(&nodes[0]).instance.image_id.as_deref(),
        Some("ami-0bbbbbbbbbbbbbbb1"),
        "the replacement runs the new image"
    );
    assert_eq!(sys.pods_on(&nodes[0]), 3, "the pods moved");
    let gone = sys.claim_of(&old[0]);
    assert_eq!(gone.state, ClaimState::Terminated);
    assert_eq!(
        gone.disruption.map(|d| d.cause),
        Some(DisruptionCause::Drifted)
    );
    assert_eq!(sys.world.cloud.instances().len(), 2, "one replacement");
    assert_eq!(
        sys.world.cloud.instance(&before.id).unwrap().instance.state,
        "terminated"
    );
    sys.assert_pods_moved_within(t0, 5);
    sys.assert_settled();
    // The decision log names the drift: which AMI the class no longer selects.
    assert!(
        sys.decisions("disruption").iter().any(|d| d.contains(
            "(Drift, Drifted: AMI ami-0aaaaaaaaaaaaaaa1 is no longer selected by EC2NodeClass"
        )),
        "{:#?}",
        sys.decisions("disruption")
    );
}

#[tokio::test(start_paused = true)]
async fn drift_commands_due_in_the_same_poll_are_validated_by_one_decision() {
    use nodewright_engine::ports::Image;
    // Core's decision, recording how many nodes each validation asks about.
    let validations: Arc<Mutex<Vec<usize>>> = Arc::default();
    let seen = validations.clone();
    let decider: Decider = Arc::new(move |input: &DisruptionInput<'_>| {
        if let Some(nodes) = input.validating {
            seen.lock().unwrap().push(nodes.len());
        }
        nodewright_core::disruption::decide(input)
    });
    let sys = System::with(
        pool_with_budget(BudgetNodes::Percent(100)),
        decider,
        Arc::default(),
    );
    sys.add_pods("web", 9);
    sys.provision(2).await;
    let old = sys.live_nodes();
    assert_eq!(old.len(), 3, "{:#?}", sys.claims());

    sys.world.cloud.set_images(vec![Image {
        id: "ami-0bbbbbbbbbbbbbbb1".into(),
        arch: "amd64".into(),
    }]);
    sys.run(5).await;

    let nodes = sys.live_nodes();
    assert_eq!(nodes.len(), 3, "{:#?}", sys.decisions("disruption"));
    assert!(
        nodes.iter().all(|n| !old.contains(n)),
        "every node replaced: {:#?}",
        sys.decisions("disruption")
    );
    // The three commands were decided together, so their replacements came up
    // together: one decision validated all three, not one decision each.
    assert_eq!(
        *validations.lock().unwrap(),
        vec![3],
        "{:#?}",
        sys.decisions("disruption")
    );
    sys.assert_settled();
}

#[tokio::test(start_paused = true)]
async fn a_node_class_that_fails_to_resolve_drifts_nothing_that_run_and_fails_no_run() {
    use nodewright_engine::ports::Image;
    let sys = System::deciding_with_core(m5_pool());
    sys.add_pods("web", 3);
    sys.provision(2).await;
    let old = sys.live_nodes();
    sys.world.cloud.set_images(vec![Image {
        id: "ami-0bbbbbbbbbbbbbbb1".into(),
        arch: "amd64".into(),
    }]);
    sys.world.cloud.fail_after(
        CloudOp::ResolveNodeClass,
        0,
        CloudError::new(ErrorKind::Throttled, "Rate exceeded"),
    );

    let report = sys.disrupter.tick().await.expect("not a failed run");
    assert!(report.decided && report.started.is_empty(), "{report:#?}");
    assert_eq!(sys.live_nodes(), old);

    // The next runs resolve it, and the node is replaced.
    sys.run(4).await;
    let nodes = sys.live_nodes();
    assert_eq!(nodes.len(), 1);
    assert_ne!(nodes, old, "{:#?}", sys.decisions("disruption"));
    sys.assert_settled();
}

/// Spot, amd64, c/m/r of generation 5 or later: far more than 15 types are cheaper than
/// the 8-vCPU node six pods need, once one pod is left.
fn spot_pool() -> NodePool {
    let req = |key: &str, operator: Operator, values: &[&str]| NodeRequirement {
        key: key.into(),
        operator,
        values: values.iter().map(|v| v.to_string()).collect(),
        min_values: None,
    };
    let mut pool = node_pool(
        "spot",
        vec![
            req(LABEL_CAPACITY_TYPE, Operator::In, &["spot"]),
            req("kubernetes.io/arch", Operator::In, &["amd64"]),
            req(
                "karpenter.k8s.aws/instance-category",
                Operator::In,
                &["c", "m", "r"],
            ),
            req(
                "karpenter.k8s.aws/instance-generation",
                Operator::Gt,
                &["4"],
            ),
        ],
    );
    pool.disruption.budgets[0].nodes = BudgetNodes::Percent(100);
    pool
}

/// One spot node for six pods, then five of them gone: the node is far too big.
async fn one_oversized_spot_node(sys: System) -> (System, String, f64) {
    sys.add_pods("web", 6);
    sys.provision(2).await;
    let nodes = sys.live_nodes();
    assert_eq!(nodes.len(), 1, "{:#?}", sys.claims());
    keep_on_nodes(&sys, &nodes, &[1]);
    let spot = sys.instance_of(&nodes[0]);
    assert_eq!(
        spot.instance.capacity_type,
        nodewright_core::catalog::CapacityType::Spot
    );
    let price = spot.price;
    (sys, nodes[0].clone(), price)
}

#[tokio::test(start_paused = true)]
async fn spot_to_spot_consolidation_happens_only_with_the_setting() {
    // Without the setting: the pod has nowhere else to go, and a spot node is only
    // ever deleted, never replaced.
    let (sys, node, _) = one_oversized_spot_node(System::deciding_with_core(spot_pool())).await;
    sys.run(4).await;
    assert_eq!(sys.live_nodes(), vec![node.clone()]);
    assert_eq!(sys.world.cloud.instances().len(), 1, "nothing launched");
    sys.assert_settled();
    assert!(
        sys.decisions("disruption")
            .iter()
            .any(|d| d.starts_with(&format!("keep {node} (SpotToSpot)"))),
        "{:#?}",
        sys.decisions("disruption")
    );

    // With it: replaced by a cheaper spot node, chosen among at least 15 types.
    let (sys, node, price) =
        one_oversized_spot_node(System::deciding_with_core_spot_to_spot(spot_pool())).await;
    let t0 = sys.world.now();
    sys.run(4).await;
    let nodes = sys.live_nodes();
    assert_eq!(
        nodes.len(),
        1,
        "{:#?}\n{:#?}",
        sys.decisions("disruption"),
        sys.claims()
    );
    assert_ne!(nodes[0], node, "{:#?}", sys.decisions("disruption"));
    let replacement = sys.instance_of(&nodes[0]);
    assert_eq!(
        replacement.instance.capacity_type,
        nodewright_core::catalog::CapacityType::Spot
    );
    assert!(
        replacement.price < price,
        "{} at {} is not cheaper than {price}",
        replacement.instance.instance_type,
        replacement.price
    );
    assert_eq!(
        replacement.request.offerings.len(),
        nodewright_core::disruption::decide::SPOT_TO_SPOT_MIN_TYPES * 3,
        "the 15 cheapest spot types, in each zone: {:?}",
        replacement.request.offerings
    );
    assert_eq!(sys.pods_on(&nodes[0]), 1);
    assert_eq!(
        sys.claim_of(&node).disruption.map(|d| d.cause),
        Some(DisruptionCause::Underutilized)
    );
    assert_eq!(sys.world.cloud.instances().len(), 2, "one replacement");
    sys.assert_pods_moved_within(t0, 5);
    sys.assert_settled();
}

#[tokio::test(start_paused = true)]
async fn a_multi_node_consolidation_replaces_several_nodes_with_one() {
    // m5.large or m5.xlarge. A 3-CPU batch pod needs an m5.xlarge each, and a 500m web
    // pod fits beside each; when the batch pods are done, the three web pods fit one
    // m5.large: three nodes become one (not one m5.xlarge: keeping one of the three
    // would do as well).
    let mut pool = pool_with_budget(BudgetNodes::Percent(100));
    pool.requirements[0].values = vec!["m5.large".into(), "m5.xlarge".into()];
    let sys = System::deciding_with_core(pool);
    for i in 0..3 {
        sys.world
            .cluster
            .add_pod(pod(&format!("batch-{i}"), "3", "4Gi"));
    }
    sys.provision(2).await;
    let old = sys.live_nodes();
    assert_eq!(old.len(), 3, "{:#?}", sys.claims());
    // Each node has room for one web pod beside its batch pod (0.92 CPU left).
    for i in 0..3 {
        sys.world
            .cluster
            .add_pod(pod(&format!("web-{i}"), "500m", "1Gi"));
    }
    sys.provision(1).await;
    for n in &old {
        assert_eq!(sys.pods_on(n), 2, "a batch and a web pod on {n}");
    }
    assert_eq!(sys.world.cloud.instances().len(), 3);
    sys.world
        .cluster
        .with_state(|s| s.pods.retain(|p| !p.name.starts_with("batch-")));

    let t0 = sys.world.now();
    sys.run(4).await;

    let nodes = sys.live_nodes();
    assert_eq!(
        nodes.len(),
        1,
        "{:#?}\n{:#?}",
        sys.decisions("disruption"),
        sys.claims()
    );
    assert!(!old.contains(&nodes[0]), "a replacement, not a survivor");
    assert_eq!(sys.pods_on(&nodes[0]), 3);
    assert_eq!(
        sys.instance_of(&nodes[0]).instance.instance_type,
        "m5.large"
    );
    for n in &old {
        let c = sys.claim_of(n);
        assert_eq!(c.state, ClaimState::Terminated, "{n}");
        assert_eq!(
            c.disruption.map(|d| d.cause),
            Some(DisruptionCause::Underutilized)
        );
    }
    assert_eq!(
        sys.world.cloud.instances().len(),
        4,
        "three nodes, one replacement"
    );
    let log = sys.decisions("disruption");
    assert_eq!(
        log.iter()
            .filter(|d| d.starts_with("disrupt ")
                && d.contains("(MultiNode, Underutilized), 1 replacement(s)"))
            .count(),
        1,
        "{log:#?}"
    );
    sys.assert_pods_moved_within(t0, 5);
    sys.assert_settled();
}

#[tokio::test(start_paused = true)]
async fn a_budget_of_zero_stops_consolidation_only_inside_its_schedule_window() {
    // Closed for the first 10 minutes of every day (UTC); the test starts at midnight.
    let mut pool = m5_pool();
    pool.disruption.budgets = vec![Budget {
        nodes: BudgetNodes::Count(0),
        schedule: Some("0 0 * * *".into()),
        duration: Some(Duration::from_secs(10 * 60)),
        reasons: vec![],
    }];
    let sys = two_full_nodes_of(System::deciding_with_core(pool)).await;
    let nodes = sys.live_nodes();
    scale_down(&sys, &nodes);

    // Until 00:09: inside the window.
    sys.run(7).await;
    assert!(sys.world.now() < START + 10 * 60);
    assert_eq!(
        sys.live_nodes(),
        nodes,
        "nothing consolidated in the window"
    );
    assert_eq!(sys.world.cloud.instances().len(), 2);
    assert!(
        sys.decisions("disruption")
            .iter()
            .any(|d| d.contains("(DisruptionBudget)")),
        "{:#?}",
        sys.decisions("disruption")
    );

    // After 00:10 the budget no longer applies.
    sys.run(4).await;
    let left = sys.live_nodes();
    assert_eq!(left.len(), 1, "{:#?}", sys.decisions("disruption"));
    assert_eq!(sys.pods_on(&left[0]), 3);
    assert_eq!(sys.world.cloud.instances().len(), 2, "nothing launched");
    let consolidated_at = sys
        .world
        .store
        .all_decisions()
        .into_iter()
        .find(|d| d.job == "disruption" && d.action.starts_with("disrupt "))
        .map(|d| d.at)
        .unwrap();
    assert!(consolidated_at >= START + 10 * 60, "{consolidated_at}");
    sys.assert_settled();
}

#[tokio::test(start_paused = true)]
async fn a_fragmented_cluster_consolidates_to_fewer_cheaper_nodes_with_a_pdb_respected() {
    let sys = System::deciding_with_core(pool_with_budget(BudgetNodes::Percent(100)));
    sys.world.cluster.with_state(|s| s.pdbs.push(web_pdb(1)));
    sys.add_pods("web", 12);
    sys.provision(2).await;
    let old = sys.live_nodes();
    assert_eq!(old.len(), 4, "{:#?}", sys.claims());
    // Five pods over four nodes: two nodes' worth.
    keep_on_nodes(&sys, &old, &[1, 1, 1, 2]);
    let before: f64 = sys.world.billed_now().1;

    let t0 = sys.world.now();
    sys.run(6).await;

    let nodes = sys.live_nodes();
    assert_eq!(
        nodes.len(),
        2,
        "{:#?}\n{:#?}",
        sys.decisions("disruption"),
        sys.claims()
    );
    let mut pods: Vec<usize> = nodes.iter().map(|n| sys.pods_on(n)).collect();
    pods.sort();
    assert_eq!(pods.iter().sum::<usize>(), 5, "{pods:?}");
    let after = sys.world.billed_now().1;
    assert!(after < before, "{after} < {before}");
    assert_eq!(sys.world.budget_violations(), vec![], "the PDB held");
    sys.assert_pods_moved_within(t0, 5);
    sys.assert_settled();
}

// ----- issue 23: Karpenter's events ----------------------------------------------------

impl System {
    /// The events posted about `object` (a node, pool or pod name) with `reason`.
    fn events(&self, reason: &str, object: &str) -> Vec<nodewright_engine::ports::ClusterEvent> {
        self.world
            .cluster
            .events()
            .into_iter()
            .filter(|e| e.reason == reason && e.name == object)
            .collect()
    }

    fn reasons_on(&self, object: &str) -> Vec<String> {
        self.world
            .cluster
            .events()
            .into_iter()
            .filter(|e| e.name == object)
            .map(|e| e.reason)
            .collect()
    }
}

#[tokio::test(start_paused = true)]
async fn a_replacing_command_is_told_on_its_node_at_each_step_and_each_moved_pod_is_told_it_was_evicted()
 {
    let sys = System::new();
    sys.add_pods("web", 3);
    sys.provision(2).await;
    let old = sys.live_nodes();
    let pods: Vec<String> = sys
        .world
        .cluster
        .snapshot()
        .pods
        .iter()
        .filter(|p| p.node_name.as_deref() == Some(old[0].as_str()))
        .map(|p| p.name.clone())
        .collect();
    sys.expire.lock().unwrap().insert(old[0].clone());

    sys.run(4).await;

    assert_ne!(sys.live_nodes(), old, "replaced");
    let on_node = sys.reasons_on(&old[0]);
    for reason in [
        "DisruptionLaunching",
        "DisruptionWaitingReadiness",
        "DisruptionTerminating",
    ] {
        assert_eq!(
            on_node.iter().filter(|r| *r == reason).count(),
            1,
            "one {reason} on {}: {on_node:?}",
            old[0]
        );
    }
    let order: Vec<&String> = on_node
        .iter()
        .filter(|r| r.starts_with("Disruption"))
        .collect();
    assert_eq!(
        order,
        [
            "DisruptionLaunching",
            "DisruptionWaitingReadiness",
            "DisruptionTerminating"
        ],
        "in the order the command advances"
    );
    let launching = &sys.events("DisruptionLaunching", &old[0])[0];
    assert!(launching.message.ends_with(": Expired"), "{launching:?}");
    let terminating = &sys.events("DisruptionTerminating", &old[0])[0];
    assert_eq!(terminating.message, "Disrupting Node: Expired");
    assert_eq!(pods.len(), 3);
    for pod in &pods {
        let evicted = sys.events("Evicted", pod);
        assert_eq!(evicted.len(), 1, "{pod}: {evicted:?}");
        assert_eq!(evicted[0].kind, "Pod");
        assert_eq!(evicted[0].namespace.as_deref(), Some("default"));
        assert_eq!(evicted[0].message, "Evicted pod: Expired");
    }
}

#[tokio::test(start_paused = true)]
async fn a_node_kept_for_the_same_reason_is_told_once_and_not_every_minute() {
    let sys = two_full_nodes().await;
    let nodes = sys.live_nodes();

    sys.run(5).await;

    assert_eq!(sys.live_nodes(), nodes, "nothing disrupted");
    assert!(sys.runs.lock().unwrap().len() >= 4, "several runs decided");
    for node in &nodes {
        let kept = sys.events("Unconsolidatable", node);
        assert_eq!(kept.len(), 1, "{node}: {:?}", sys.reasons_on(node));
        assert_eq!(kept[0].message, "not empty");
        assert_eq!(kept[0].kind, "Node");
    }
}

#[tokio::test(start_paused = true)]
async fn kept_nodes_past_the_per_run_limit_are_told_in_the_next_runs_each_once() {
    let mut sys = two_full_nodes().await;
    let expire = Arc::new(Mutex::new(HashSet::new()));
    let mut config = DisruptionConfig::new("test-cluster", "disruption-1");
    config.rejections_told_per_run = 1;
    sys.disrupter = Disrupter::new(sys.world.ports(), config).with_decider(test_decider(expire));
    let nodes = sys.live_nodes();
    let told = |sys: &System| -> usize {
        nodes
            .iter()
            .map(|n| sys.events("Unconsolidatable", n).len())
            .sum()
    };

    sys.run(1).await;
    assert_eq!(told(&sys), 1, "one node told in the first run");
    sys.run(1).await;
    assert_eq!(told(&sys), 2, "the other in the next");
    sys.run(3).await;
    for node in &nodes {
        assert_eq!(
            sys.events("Unconsolidatable", node).len(),
            1,
            "{node}: told once"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_node_whose_reason_changes_is_told_again_under_karpenters_reason_for_it() {
    let sys = two_full_nodes().await;
    let nodes = sys.live_nodes();
    sys.run(2).await;
    let mut p = pod("batch-0", "100m", "128Mi");
    p.do_not_disrupt = true;
    p.node_name = Some(nodes[0].clone());
    sys.world.cluster.add_pod(p);

    sys.run(3).await;

    assert_eq!(
        sys.reasons_on(&nodes[0])
            .into_iter()
            .filter(|r| r == "Unconsolidatable" || r == "DisruptionBlocked")
            .collect::<Vec<_>>(),
        ["Unconsolidatable", "DisruptionBlocked"],
        "told when kept, told again when the reason changed"
    );
    let blocked = &sys.events("DisruptionBlocked", &nodes[0])[0];
    assert_eq!(blocked.message, "a pod has karpenter.sh/do-not-disrupt");
    assert_eq!(sys.events("DisruptionBlocked", &nodes[1]), vec![]);
}

#[tokio::test(start_paused = true)]
async fn a_budget_of_zero_blocks_on_the_nodes_and_once_on_the_node_pool() {
    let sys = two_full_nodes_of(System::deciding_with_core(pool_with_budget(
        BudgetNodes::Count(0),
    )))
    .await;
    let nodes = sys.live_nodes();
    scale_down(&sys, &nodes);

    sys.run(4).await;

    assert_eq!(sys.live_nodes(), nodes);
    let on_pool = sys.events("DisruptionBlocked", "general-purpose");
    assert_eq!(on_pool.len(), 1, "{on_pool:#?}");
    assert_eq!(on_pool[0].kind, "NodePool");
    assert!(
        on_pool[0].message.contains("NodePool \"general-purpose\""),
        "{on_pool:?}"
    );
    let blocked: usize = nodes
        .iter()
        .map(|n| sys.events("DisruptionBlocked", n).len())
        .sum();
    assert!(
        blocked >= 1,
        "the kept nodes are told why: {:#?}",
        sys.world.cluster.events()
    );
}

#[tokio::test(start_paused = true)]
async fn a_drain_a_budget_refuses_warns_once_per_pod_and_its_deadline_and_deletions_are_told() {
    let mut pool = m5_pool();
    pool.termination_grace_period = Some(Duration::from_secs(90));
    let expire = Arc::new(Mutex::new(HashSet::new()));
    let sys = System::with(pool, test_decider(expire.clone()), expire);
    sys.add_pods("web", 3);
    sys.world.cluster.with_state(|s| {
        s.pdbs.push(nodewright_core::cluster::PodDisruptionBudget {
            namespace: "default".into(),
            name: "web".into(),
            selector: Some(nodewright_core::testing::selector("web")),
            min_available: Some(nodewright_core::cluster::IntOrPercent::Int(10)),
            max_unavailable: None,
            status_disruptions_allowed: None,
        })
    });
    sys.provision(2).await;
    let old = sys.live_nodes();
    sys.expire.lock().unwrap().insert(old[0].clone());

    sys.run(5).await;

    assert_ne!(sys.live_nodes(), old, "gone at its grace period");
    let refused = sys.events("FailedDraining", &old[0]);
    assert_eq!(
        refused.len(),
        3,
        "one per pod refused, not one per poll: {refused:#?}"
    );
    assert!(refused.iter().all(|e| e.message.contains("violates a PDB")));
    let expiring = sys.events("TerminationGracePeriodExpiring", &old[0]);
    assert_eq!(expiring.len(), 1, "{expiring:#?}");
    assert!(
        expiring[0]
            .message
            .starts_with("All pods will be deleted by 20"),
        "{expiring:?}"
    );
    let disrupted: Vec<_> = sys
        .world
        .cluster
        .events()
        .into_iter()
        .filter(|e| e.reason == "Disrupted" && e.kind == "Pod")
        .collect();
    assert_eq!(
        disrupted.len(),
        3,
        "each pod deleted at the deadline is told: {disrupted:#?}"
    );
}

#[tokio::test(start_paused = true)]
async fn forbidden_disruption_budgets_stop_voluntary_disruption() {
    // As `an_empty_node_is_validated_drained_and_terminated_and_the_other_stays`, but
    // PodDisruptionBudgets cannot be listed: no budget can be weighed, so nothing goes.
    let sys = two_full_nodes().await;
    sys.world.cluster.forbid("poddisruptionbudgets");
    let nodes = sys.live_nodes();
    delete_pods_on(&sys, &nodes[0]);

    sys.run(3).await;

    assert_eq!(sys.live_nodes(), nodes, "{:#?}", sys.runs.lock().unwrap());
    assert!(
        sys.runs
            .lock()
            .unwrap()
            .iter()
            .all(|r| r.started.is_empty())
    );
}
