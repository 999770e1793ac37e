//! The interruption job and the termination machine over the in-memory fakes, with
//! virtual time.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use nodewright_core::catalog::{CapacityType, Catalog};
use nodewright_core::cluster::{
    IntOrPercent, LabelSelector, Node, Pod, PodDisruptionBudget, PodFields, Toleration,
    TolerationOperator,
};
use nodewright_core::nodeclaim::{ClaimState, DisruptionCause, NodeClaim};
use nodewright_core::well_known::TAINT_DISRUPTED;
use nodewright_engine::ports::{ClaimStore, OfferingBackoff};
use nodewright_engine::ports::{CloudError, ClusterError, ErrorKind, StoreError};
use nodewright_engine::terminate::{self};
use nodewright_engine::{
    InstanceAction, InterruptionConfig, InterruptionInput, InterruptionMode, InterruptionOutcome,
    Ports, handle_interruption, handle_interruption_until,
};
use nodewright_sim::fakes::{
    CloudOp, ClusterOp, FakeCloud, FakeCluster, ManualClock, MemoryStore, StoreOp,
};

const ZONE: &str = "us-east-1a";

struct Env {
    clock: Arc<ManualClock>,
    cloud: Arc<FakeCloud>,
    cluster: Arc<FakeCluster>,
    store: Arc<MemoryStore>,
    ports: Ports,
}

/// An instance of this cluster, its Ready node and its Initialized claim.
struct Owned {
    claim: String,
    instance: String,
    node: String,
}

impl Env {
    fn new() -> Self {
        let clock = Arc::new(ManualClock::default());
        let catalog = Catalog::embedded().clone();
        let cloud = Arc::new(FakeCloud::new(catalog.clone(), &[ZONE], clock.clone()));
        let cluster = Arc::new(FakeCluster::new(Arc::new(catalog)));
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

    fn now(&self) -> i64 {
        use nodewright_engine::ports::Clock;
        self.clock.now()
    }

    async fn owned(&self, name: &str, capacity_type: CapacityType) -> Owned {
        let now = self.now();
        let instance = self
            .cloud
            .insert_instance("m5.large", ZONE, Some(name), now - 600);
        let node = format!(
            "ip-10-0-0-{}.ec2.internal",
            name.len() + self.cluster.nodes().len()
        );
        self.cluster.add_node(Node {
            name: node.clone(),
            provider_id: Some(format!("aws:///{ZONE}/{}", instance.id)),
            ready: true,
            ..Node::default()
        });
        let claim = NodeClaim {
            name: name.into(),
            node_pool: "general-purpose".into(),
            node_class: "default".into(),
            state: ClaimState::Initialized,
            version: 4,
            instance_type_options: vec!["m5.large".into()].into(),
            zones: vec![ZONE.into()],
            capacity_types: vec![capacity_type],
            pods: Default::default(),
            labels: Default::default(),
            created_at: now - 600,
            updated_at: now - 300,
            instance_id: Some(instance.id.clone()),
            instance_type: Some("m5.large".into()),
            zone: Some(ZONE.into()),
            capacity_type: Some(capacity_type),
            price_per_hour: Some(0.04),
            node_name: Some(node.clone()),
            launched_at: Some(now - 600),
            registered_at: Some(now - 550),
            initialized_at: Some(now - 500),
            disruption: None,
            failure: None,
            expires_at: None,
            adopted: false,
            nodepool_hash: None,
            nodeclass_hash: None,
            terminate_requested_at: None,
            overlays_applied: Default::default(),
            reboot: None,
            reboots: Vec::new(),
            rebooted_at: None,
        };
        self.store.create_claim(&claim).await.unwrap();
        Owned {
            claim: name.into(),
            instance: instance.id,
            node,
        }
    }

    fn pod(&self, name: &str, node: &str, app: &str) -> Pod {
        let pod = Pod::from(PodFields {
            namespace: "default".into(),
            name: name.into(),
            labels: BTreeMap::from([("app".to_string(), app.to_string())]).into(),
            node_name: Some(node.into()),
            ..PodFields::default()
        });
        self.cluster.add_pod(pod.clone());
        pod
    }

    fn critical_pod(&self, name: &str, node: &str) {
        let mut pod = self.pod(name, node, "dns");
        self.cluster
            .with_state(|s| s.pods.retain(|p| p.name != name));
        pod.namespace = "kube-system".into();
        pod.critical = true;
        self.cluster.add_pod(pod);
    }

    fn daemonset_pod(&self, name: &str, node: &str) {
        let mut pod = self.pod(name, node, "agent");
        self.cluster
            .with_state(|s| s.pods.retain(|p| p.name != name));
        pod.namespace = "kube-system".into();
        pod.daemonset_owned = true;
        self.cluster.add_pod(pod);
    }

    fn claim(&self, name: &str) -> NodeClaim {
        self.store
            .claims()
            .into_iter()
            .find(|c| c.name == name)
            .expect("the claim")
    }

    fn clear_calls(&self) {
        self.cloud.clear_calls();
        self.cluster.clear_calls();
        self.store.clear_calls();
    }

    fn terminate_calls(&self) -> Vec<String> {
        self.cloud
            .calls()
            .into_iter()
            .filter(|c| c.op == CloudOp::Terminate)
            .map(|c| c.key)
            .collect()
    }

    fn cluster_calls(&self, op: ClusterOp) -> Vec<String> {
        self.cluster
            .calls()
            .into_iter()
            .filter(|c| c.op == op)
            .map(|c| c.key)
            .collect()
    }

    async fn handle(
        &self,
        input: InterruptionInput,
    ) -> nodewright_engine::Result<InterruptionOutcome> {
        handle_interruption(&self.ports, &InterruptionConfig::default(), input).await
    }
}

fn spot_warning(event: &str, instance: &str, deadline: i64) -> InterruptionInput {
    InterruptionInput {
        event_id: event.into(),
        instance_ids: vec![instance.into()],
        cause: DisruptionCause::SpotInterrupted,
        deadline: Some(deadline),
        mark_unavailable: true,
        mode: InterruptionMode::Drain,
    }
}

fn state_change(event: &str, instance: &str, cause: DisruptionCause) -> InterruptionInput {
    InterruptionInput {
        event_id: event.into(),
        instance_ids: vec![instance.into()],
        cause,
        deadline: None,
        mark_unavailable: false,
        mode: InterruptionMode::CleanUp,
    }
}

fn web_budget(min_available: i32) -> PodDisruptionBudget {
    PodDisruptionBudget {
        namespace: "default".into(),
        name: "web".into(),
        selector: Some(LabelSelector {
            match_labels: BTreeMap::from([("app".to_string(), "web".to_string())]),
            match_expressions: vec![],
        }),
        min_available: Some(IntOrPercent::Int(min_available)),
        max_unavailable: None,
        status_disruptions_allowed: None,
    }
}

fn action(outcome: &InterruptionOutcome) -> InstanceAction {
    outcome.instances()[0].action.clone()
}

// ----- the spot warning, end to end -----------------------------------------------------

#[tokio::test]
async fn a_spot_warning_marks_the_offering_drains_the_node_and_terminates_the_instance() {
    let env = Env::new();
    let o = env.owned("spot-a", CapacityType::Spot).await;
    env.critical_pod("coredns-1", &o.node);
    env.pod("web-0", &o.node, "web");
    env.pod("web-1", &o.node, "web");
    env.daemonset_pod("agent-x", &o.node);
    let deadline = env.now() + 120;

    let outcome = env
        .handle(spot_warning("e-1", &o.instance, deadline))
        .await
        .unwrap();

    assert_eq!(
        action(&outcome),
        InstanceAction::Disrupted {
            state: ClaimState::Terminated
        }
    );
    assert!(outcome.provisioner_needed());
    assert!(outcome.instances()[0].marked_unavailable);
    let unavailable = env.store.unavailable_offerings(env.now()).await.unwrap();
    assert_eq!(
        unavailable,
        vec![("m5.large".to_string(), ZONE.to_string(), CapacityType::Spot)]
    );
    assert!(
        env.store
            .unavailable_offerings(env.now() + 180)
            .await
            .unwrap()
            .is_empty(),
        "for 3 minutes"
    );
    // Tainted before anything was evicted.
    let calls = env.cluster.calls();
    let first_patch = calls
        .iter()
        .position(|c| c.op == ClusterOp::PatchNode)
        .expect("tainted");
    let first_eviction = calls
        .iter()
        .position(|c| c.op == ClusterOp::EvictPod)
        .expect("evicted");
    assert!(first_patch < first_eviction);
    // Non-critical pods first, the critical one after, the DaemonSet pod stays.
    assert_eq!(
        env.cluster_calls(ClusterOp::EvictPod),
        ["default/web-0", "default/web-1", "kube-system/coredns-1"]
    );
    assert!(env.cluster.pod("kube-system", "agent-x").is_some());
    assert_eq!(env.terminate_calls(), std::slice::from_ref(&o.instance));
    assert_eq!(
        env.cloud.instance(&o.instance).unwrap().instance.state,
        "terminated"
    );
    assert_eq!(
        env.cluster_calls(ClusterOp::DeleteNode),
        std::slice::from_ref(&o.node)
    );
    assert!(env.cluster.node(&o.node).is_none());
    let claim = env.claim(&o.claim);
    assert_eq!(claim.state, ClaimState::Terminated);
    assert_eq!(
        claim.expires_at,
        Some(env.now() + 24 * 3600),
        "a tombstone with a TTL"
    );
    let reasons: Vec<String> = env.cluster.events().into_iter().map(|e| e.reason).collect();
    for reason in ["SpotInterrupted", "Draining", "Terminating", "Terminated"] {
        assert!(
            reasons.contains(&reason.to_string()),
            "{reason} in {reasons:?}"
        );
    }
}

#[tokio::test]
async fn a_pod_that_tolerates_the_disrupted_taint_is_left_to_go_with_its_node() {
    // Evicted, kube-scheduler would put it straight back on the cordoned node: the drain
    // neither evicts nor waits for it (Karpenter's IsDrainable).
    let env = Env::new();
    let o = env.owned("spot-t", CapacityType::Spot).await;
    env.pod("web-0", &o.node, "web");
    let mut anywhere = env.pod("agent-0", &o.node, "agent");
    env.cluster
        .with_state(|s| s.pods.retain(|p| p.name != "agent-0"));
    anywhere.tolerations = vec![Toleration {
        key: String::new(),
        operator: TolerationOperator::Exists,
        value: String::new(),
        effect: None,
    }]
    .into();
    env.cluster.add_pod(anywhere);

    let outcome = env
        .handle(spot_warning("e-1", &o.instance, env.now() + 120))
        .await
        .unwrap();

    assert_eq!(
        action(&outcome),
        InstanceAction::Disrupted {
            state: ClaimState::Terminated
        }
    );
    assert_eq!(env.cluster_calls(ClusterOp::EvictPod), ["default/web-0"]);
    assert_eq!(
        env.cluster_calls(ClusterOp::DeletePod),
        Vec::<String>::new()
    );
    assert_eq!(env.terminate_calls(), std::slice::from_ref(&o.instance));
}

#[tokio::test]
async fn a_pod_still_terminating_a_minute_past_its_grace_period_no_longer_holds_the_drain() {
    // Its kubelet stopped: the pod was evicted, and nothing confirms its deletion. A
    // drain without a deadline (a rebalance recommendation) waits for it while its grace
    // period runs, and a minute more (Karpenter's IsStuckTerminating), then goes on.
    let env = Env::new();
    let o = env.owned("spot-s", CapacityType::Spot).await;
    let mut evicted = env.pod("web-0", &o.node, "web");
    env.cluster
        .with_state(|s| s.pods.retain(|p| p.name != "web-0"));
    evicted.terminating = true;
    evicted.deletion_at = Some(env.now() + 30);
    env.cluster.add_pod(evicted);
    let claim = env.claim(&o.claim);
    let claim = terminate::disrupt(
        &env.ports,
        &claim,
        DisruptionCause::RebalanceRecommended,
        None,
    )
    .await
    .unwrap();

    let waiting = terminate::drive(&env.ports, &claim).await.unwrap();
    assert_eq!(waiting.claim.state, ClaimState::Draining, "{waiting:?}");
    env.clock.advance(Duration::from_secs(30 + 60));
    let waiting = terminate::drive(&env.ports, &waiting.claim).await.unwrap();
    assert_eq!(
        waiting.claim.state,
        ClaimState::Draining,
        "a minute, not less"
    );
    env.clock.advance(Duration::from_secs(1));
    let done = terminate::drive(&env.ports, &waiting.claim).await.unwrap();
    assert_eq!(done.claim.state, ClaimState::Terminated, "{done:?}");
    assert_eq!(env.terminate_calls(), std::slice::from_ref(&o.instance));
}

#[tokio::test]
async fn a_pod_already_terminating_does_not_hold_a_drain_past_its_deadline() {
    // The taint eviction controller deleted the pod off a node whose kubelet stopped;
    // nothing confirms the deletion. Node repair takes the node away with a deadline of
    // now: the pod is not evicted or deleted again, and the drain does not wait for it
    // (its deletion is under way, and the node goes whatever it does).
    let env = Env::new();
    let o = env.owned("spot-r", CapacityType::Spot).await;
    let mut going = env.pod("web-0", &o.node, "web");
    env.cluster
        .with_state(|s| s.pods.retain(|p| p.name != "web-0"));
    going.terminating = true;
    going.deletion_at = Some(env.now() + 30);
    env.cluster.add_pod(going);
    let claim = env.claim(&o.claim);
    let claim = terminate::disrupt(
        &env.ports,
        &claim,
        DisruptionCause::Unhealthy,
        Some(env.now()),
    )
    .await
    .unwrap();

    let done = terminate::drive(&env.ports, &claim).await.unwrap();
    assert_eq!(done.claim.state, ClaimState::Terminated, "{done:?}");
    assert_eq!(env.cluster_calls(ClusterOp::EvictPod), Vec::<String>::new());
    assert_eq!(
        env.cluster_calls(ClusterOp::DeletePod),
        Vec::<String>::new()
    );
    assert_eq!(env.terminate_calls(), std::slice::from_ref(&o.instance));
}

#[tokio::test]
async fn the_node_is_tainted_disrupted_no_schedule_while_it_drains() {
    let env = Env::new();
    let o = env.owned("spot-b", CapacityType::Spot).await;
    env.pod("web-0", &o.node, "web");
    env.cluster.with_state(|s| s.pdbs.push(web_budget(1)));

    let outcome = env
        .handle(spot_warning("e-1", &o.instance, env.now() + 120))
        .await
        .unwrap();

    assert_eq!(
        action(&outcome),
        InstanceAction::Disrupted {
            state: ClaimState::Draining
        }
    );
    let node = env.cluster.node(&o.node).unwrap();
    let taint = node
        .taints
        .iter()
        .find(|t| t.key == TAINT_DISRUPTED)
        .expect("the disrupted taint");
    assert_eq!(taint.effect.as_str(), "NoSchedule");
}

#[tokio::test]
async fn a_pod_held_by_its_budget_is_retried_until_the_deadline_then_deleted() {
    let env = Env::new();
    let o = env.owned("spot-c", CapacityType::Spot).await;
    env.pod("web-0", &o.node, "web");
    env.pod("web-1", &o.node, "web");
    env.pod("other-0", &o.node, "other");
    env.cluster.with_state(|s| s.pdbs.push(web_budget(2)));
    let deadline = env.now() + 120;

    let outcome = env
        .handle(spot_warning("e-1", &o.instance, deadline))
        .await
        .unwrap();
    assert_eq!(
        action(&outcome),
        InstanceAction::Disrupted {
            state: ClaimState::Draining
        }
    );
    assert_eq!(outcome.instances()[0].evicted, ["default/other-0"]);
    assert_eq!(
        outcome.instances()[0].blocked,
        ["default/web-0", "default/web-1"]
    );

    // Still refused a minute later (the default grace period is 30 s: not yet).
    env.clock.advance(Duration::from_secs(60));
    let claim = terminate::advance(&env.ports, &env.claim(&o.claim))
        .await
        .unwrap();
    assert_eq!(claim.state, ClaimState::Draining);
    assert!(env.cluster.pod("default", "web-0").is_some());
    assert!(env.terminate_calls().is_empty());

    // From deadline − grace, deleted with what is left of the time.
    env.clock.advance(Duration::from_secs(40)); // deadline − 20
    let claim = terminate::advance(&env.ports, &env.claim(&o.claim))
        .await
        .unwrap();
    assert_eq!(claim.state, ClaimState::Terminated);
    assert_eq!(
        env.cluster.pod_deletions(),
        [
            ("default/web-0".to_string(), 20),
            ("default/web-1".to_string(), 20)
        ]
    );
    assert_eq!(env.terminate_calls(), std::slice::from_ref(&o.instance));
}

#[tokio::test]
async fn a_budget_with_room_lets_pods_go_one_at_a_time() {
    let env = Env::new();
    let o = env.owned("od-a", CapacityType::OnDemand).await;
    let other = env.owned("od-b", CapacityType::OnDemand).await;
    env.pod("web-0", &o.node, "web");
    env.pod("web-1", &o.node, "web");
    env.pod("web-2", &other.node, "web");
    env.cluster.with_state(|s| s.pdbs.push(web_budget(2)));
    env.cluster.recreate_evicted_pods(true);

    let outcome = env
        .handle(spot_warning("e-1", &o.instance, env.now() + 600))
        .await
        .unwrap();

    // 3 healthy, 2 must stay: one goes; its recreated copy is pending, so the budget is
    // used up until it runs somewhere.
    assert_eq!(outcome.instances()[0].evicted, ["default/web-0"]);
    assert_eq!(outcome.instances()[0].blocked, ["default/web-1"]);
    assert!(
        !outcome.instances()[0].marked_unavailable,
        "on-demand: no ICE entry"
    );
    let pending: Vec<Pod> = env
        .cluster
        .snapshot()
        .pods
        .into_iter()
        .filter(|p| p.is_pending())
        .collect();
    assert_eq!(pending.len(), 1);
    assert!(
        pending[0].name.starts_with("web-0-r"),
        "{}",
        pending[0].name
    );
    env.cluster.bind_pod(&pending[0].key(), &other.node);

    let claim = terminate::advance(&env.ports, &env.claim(&o.claim))
        .await
        .unwrap();
    assert_eq!(claim.state, ClaimState::Terminated);
}

// ----- crash at every step ---------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
enum Fault {
    Store(StoreOp),
    Cloud(CloudOp),
    Cluster(ClusterOp),
}

async fn crash_env() -> (Env, Owned) {
    let env = Env::new();
    let o = env.owned("spot-crash", CapacityType::Spot).await;
    env.critical_pod("coredns-1", &o.node);
    env.pod("web-0", &o.node, "web");
    env.pod("web-1", &o.node, "web");
    env.daemonset_pod("agent-x", &o.node);
    (env, o)
}

#[tokio::test]
async fn a_crash_at_any_step_is_resumed_and_the_instance_is_terminated_once() {
    // A clean run says how many times each operation is called.
    let (env, o) = crash_env().await;
    env.clear_calls();
    env.handle(spot_warning("e-1", &o.instance, env.now() + 120))
        .await
        .unwrap();
    let mut faults = Vec::new();
    for (op, n) in env.store.call_counts() {
        if op != StoreOp::RecordDecision {
            faults.extend((0..n).map(|k| (Fault::Store(op), k)));
        }
    }
    for (op, n) in env.cloud.call_counts() {
        faults.extend((0..n).map(|k| (Fault::Cloud(op), k)));
    }
    for (op, n) in env.cluster.call_counts() {
        if op != ClusterOp::RecordEvent {
            faults.extend((0..n).map(|k| (Fault::Cluster(op), k)));
        }
    }
    assert!(faults.len() >= 15, "{faults:?}");

    for (fault, k) in faults {
        let (env, o) = crash_env().await;
        env.clear_calls();
        match fault {
            Fault::Store(op) => {
                env.store
                    .fail_after(op, k, StoreError::new(ErrorKind::Unavailable, "crash"))
            }
            Fault::Cloud(op) => {
                env.cloud
                    .fail_after(op, k, CloudError::new(ErrorKind::Unavailable, "crash"))
            }
            Fault::Cluster(op) => {
                env.cluster
                    .fail_after(op, k, ClusterError::new(ErrorKind::Unavailable, "crash"))
            }
        }
        let input = spot_warning("e-1", &o.instance, env.now() + 120);
        let first = env.handle(input.clone()).await;
        let what = format!("{fault:?} #{k}");
        let claim = env.claim(&o.claim);
        // Either the message failed (SQS delivers it again), or the claim is already on
        // its way out and the reconciler finishes it: never acknowledged and stranded.
        assert!(
            first.is_err() || !claim.state.is_live_capacity(),
            "{what}: acknowledged with the claim still {:?}: {first:?}",
            claim.state
        );

        // Whoever sees the claim next resumes it: the reconciler's termination machine
        // (a poll later at most: a crash after the intent to terminate was recorded
        // holds other drivers off for its window)...
        env.clock.advance(Duration::from_secs(
            terminate::TERMINATE_INTENT_WINDOW_SECS as u64,
        ));
        if !claim.state.is_live_capacity() {
            terminate::advance(&env.ports, &claim)
                .await
                .unwrap_or_else(|e| panic!("{what}: {e}"));
        }
        // ...and the redelivered message (processed again: its key was not recorded).
        if first.is_err() {
            let again = env
                .handle(input)
                .await
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_ne!(again, InterruptionOutcome::Duplicate, "{what}");
        }

        let claim = env.claim(&o.claim);
        assert_eq!(claim.state, ClaimState::Terminated, "{what}");
        let terminates = env.terminate_calls();
        assert!(
            terminates.iter().all(|id| *id == o.instance),
            "{what}: only the claim's instance: {terminates:?}"
        );
        // TerminateInstances succeeds once. It is sent again only when the failure was
        // its own (the failed call did nothing): a crash between it and the Terminated
        // write leaves the intent, and whoever takes it over finds the instance going.
        let failed_terminate = matches!(fault, Fault::Cloud(CloudOp::Terminate));
        let expected = if failed_terminate { 2 } else { 1 };
        assert_eq!(terminates.len(), expected, "{what}: {terminates:?}");
        assert!(env.cluster.node(&o.node).is_none(), "{what}");
        assert!(env.cluster.pod("default", "web-0").is_none(), "{what}");
        assert!(
            env.cluster.pod("kube-system", "coredns-1").is_none(),
            "{what}"
        );
        assert!(
            env.cluster.pod("kube-system", "agent-x").is_some(),
            "{what}"
        );
        // Each pod was evicted at most once successfully (a repeat finds it gone).
        assert!(
            env.store
                .unavailable_offerings(env.now())
                .await
                .unwrap()
                .len()
                == 1,
            "{what}"
        );
    }
}

// ----- duplicates, order, concurrency ----------------------------------------------------

#[tokio::test]
async fn a_duplicate_event_id_does_nothing_the_second_time() {
    let env = Env::new();
    let o = env.owned("spot-d", CapacityType::Spot).await;
    env.pod("web-0", &o.node, "web");
    let input = spot_warning("e-1", &o.instance, env.now() + 120);
    env.handle(input.clone()).await.unwrap();
    env.clear_calls();

    let outcome = env.handle(input).await.unwrap();

    assert_eq!(outcome, InterruptionOutcome::Duplicate);
    assert!(env.cloud.calls().is_empty());
    assert!(env.cluster.calls().is_empty());
    let store_ops: Vec<StoreOp> = env.store.calls().into_iter().map(|c| c.op).collect();
    assert_eq!(store_ops, [StoreOp::IdempotencyKeyExists]);
}

#[tokio::test]
async fn a_failed_attempt_does_not_block_its_retry() {
    let env = Env::new();
    let o = env.owned("spot-e", CapacityType::Spot).await;
    env.pod("web-0", &o.node, "web");
    // The claim cannot be marked Disrupting: nothing is started, the message fails.
    env.store.fail_next(
        StoreOp::UpdateClaim,
        StoreError::new(ErrorKind::Throttled, "slow down"),
    );
    let input = spot_warning("e-1", &o.instance, env.now() + 120);

    let error = env.handle(input.clone()).await.unwrap_err();
    assert_eq!(error.kind(), Some(ErrorKind::Throttled));
    assert_eq!(env.claim(&o.claim).state, ClaimState::Initialized);

    let outcome = env.handle(input.clone()).await.unwrap();
    assert_eq!(
        action(&outcome),
        InstanceAction::Disrupted {
            state: ClaimState::Terminated
        }
    );
    assert_eq!(
        env.handle(input).await.unwrap(),
        InterruptionOutcome::Duplicate
    );
}

/// A spot warning for a claim whose first write to Disrupting fails with `error`,
/// handled within one invocation (50 s): the outcome, and the same event's redelivery's.
async fn warning_after_a_failed_write(
    error: StoreError,
) -> (InterruptionOutcome, InterruptionOutcome) {
    let env = Env::new();
    let o = env.owned("spot-w", CapacityType::Spot).await;
    env.pod("web-0", &o.node, "web");
    env.store.fail_next(StoreOp::UpdateClaim, error);
    let input = spot_warning("e-1", &o.instance, env.now() + 120);
    let outcome = handle_interruption_until(
        &env.ports,
        &InterruptionConfig::default(),
        input.clone(),
        env.now() + 50,
    )
    .await
    .unwrap();
    (outcome, env.handle(input).await.unwrap())
}

/// Found by the chaos soak: the conditional write to Disrupting throttled, the message
/// went back to SQS, and its redelivery (after the visibility timeout, 160 s then) came
/// after EC2 had taken the instance with its pods.
#[tokio::test]
async fn a_throttled_write_is_tried_again_within_the_invocation_not_after_a_redelivery() {
    let (outcome, again) =
        warning_after_a_failed_write(StoreError::new(ErrorKind::Throttled, "slow down")).await;
    assert_eq!(
        action(&outcome),
        InstanceAction::Disrupted {
            state: ClaimState::Terminated
        }
    );
    assert_eq!(again, InterruptionOutcome::Duplicate);
}

/// Found by the chaos soak: the conditional write to Disrupting lost to another write
/// that left the claim in service (Initialized); the warning was taken for one another
/// event was handling, and EC2 took the instance with its pods two minutes later.
#[tokio::test]
async fn a_warning_whose_write_lost_to_an_update_that_left_the_claim_in_service_still_drains_it() {
    let (outcome, again) = warning_after_a_failed_write(StoreError::new(
        ErrorKind::Conflict,
        "version changed: another writer",
    ))
    .await;
    assert_eq!(
        action(&outcome),
        InstanceAction::Disrupted {
            state: ClaimState::Terminated
        },
        "{outcome:?}"
    );
    assert_eq!(again, InterruptionOutcome::Duplicate);
}

#[tokio::test]
async fn a_state_change_before_the_spot_warning_cleans_up_once_and_the_warning_is_a_no_op() {
    let env = Env::new();
    let o = env.owned("spot-f", CapacityType::Spot).await;
    env.pod("web-0", &o.node, "web");
    env.pod("web-1", &o.node, "web");
    env.cluster.with_state(|s| s.pdbs.push(web_budget(2)));

    let cleaned = env
        .handle(state_change(
            "e-terminated",
            &o.instance,
            DisruptionCause::InstanceTerminated,
        ))
        .await
        .unwrap();

    assert_eq!(
        action(&cleaned),
        InstanceAction::Disrupted {
            state: ClaimState::Terminated
        }
    );
    assert!(
        env.cluster_calls(ClusterOp::EvictPod).is_empty(),
        "no evictions for a dead instance"
    );
    assert_eq!(
        env.cluster.pod_deletions(),
        [
            ("default/web-0".to_string(), 0),
            ("default/web-1".to_string(), 0)
        ],
        "budgets do not hold pods of a dead instance"
    );
    assert!(
        env.terminate_calls().is_empty(),
        "already terminated: no TerminateInstances"
    );
    assert!(env.cluster.node(&o.node).is_none());
    env.clear_calls();

    let late = env
        .handle(spot_warning("e-spot", &o.instance, env.now() + 120))
        .await
        .unwrap();

    assert_eq!(action(&late), InstanceAction::AlreadyGone);
    assert!(env.cloud.calls().is_empty());
    assert!(env.cluster.calls().is_empty());
    assert!(
        env.store
            .unavailable_offerings(env.now())
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn a_stopped_instance_is_cleaned_up_and_terminated() {
    let env = Env::new();
    let o = env.owned("od-stop", CapacityType::OnDemand).await;
    env.pod("web-0", &o.node, "web");

    let outcome = env
        .handle(state_change(
            "e-stopped",
            &o.instance,
            DisruptionCause::InstanceStopped,
        ))
        .await
        .unwrap();

    assert_eq!(
        action(&outcome),
        InstanceAction::Disrupted {
            state: ClaimState::Terminated
        }
    );
    assert_eq!(
        env.cluster.pod_deletions(),
        [("default/web-0".to_string(), 0)]
    );
    assert_eq!(env.terminate_calls(), std::slice::from_ref(&o.instance));
    assert!(env.cluster.node(&o.node).is_none());
}

#[tokio::test(flavor = "current_thread")]
async fn a_spot_warning_and_a_state_change_at_once_drain_once_and_terminate_once() {
    let env = Env::new();
    let o = env.owned("spot-g", CapacityType::Spot).await;
    env.pod("web-0", &o.node, "web");
    env.pod("web-1", &o.node, "web");
    env.critical_pod("coredns-1", &o.node);

    let (a, b) = tokio::join!(
        env.handle(spot_warning("e-spot", &o.instance, env.now() + 120)),
        env.handle(state_change(
            "e-stopping",
            &o.instance,
            DisruptionCause::InstanceStopped
        )),
    );

    let (a, b) = (a.unwrap(), b.unwrap());
    let actions = [action(&a), action(&b)];
    let winners = actions
        .iter()
        .filter(|x| matches!(x, InstanceAction::Disrupted { .. }))
        .count();
    // The other one either found nothing more urgent to add (the state change came
    // first) or escalated the spot drain to a clean-up (it came second).
    let others = actions
        .iter()
        .filter(|x| {
            matches!(
                x,
                InstanceAction::AlreadyDisrupting { .. } | InstanceAction::Escalated { .. }
            )
        })
        .count();
    assert_eq!((winners, others), (1, 1), "{actions:?}");
    // Two drivers may ask for the same pod (the second finds it gone: NotFound, a
    // success); every pod is gone and the instance is terminated exactly once.
    let mut handled: Vec<String> = env.cluster_calls(ClusterOp::EvictPod);
    handled.extend(env.cluster_calls(ClusterOp::DeletePod));
    handled.sort();
    handled.dedup();
    assert_eq!(handled.len(), 3, "{handled:?}");
    for (ns, pod) in [
        ("default", "web-0"),
        ("default", "web-1"),
        ("kube-system", "coredns-1"),
    ] {
        assert!(env.cluster.pod(ns, pod).is_none(), "{pod}");
    }
    // Both drivers may reach the last step together and both send TerminateInstances
    // for the claim's own instance (EC2 answers the repeat as a success); never another.
    let terminates = env.terminate_calls();
    assert!(
        (1..=2).contains(&terminates.len()) && terminates.iter().all(|id| *id == o.instance),
        "{terminates:?}"
    );
    assert_eq!(env.claim(&o.claim).state, ClaimState::Terminated);
}

#[tokio::test]
async fn a_forged_event_for_an_instance_we_do_not_own_touches_nothing() {
    let env = Env::new();
    let o = env.owned("spot-h", CapacityType::Spot).await;
    env.pod("web-0", &o.node, "web");
    // An instance that exists in the account but has no claim (another tool's).
    let foreign = env.cloud.insert_instance("m5.large", ZONE, None, env.now());
    env.clear_calls();

    for id in [foreign.id.as_str(), "i-0123456789abcdef0"] {
        let outcome = env
            .handle(spot_warning(&format!("forged-{id}"), id, env.now() + 120))
            .await
            .unwrap();
        assert_eq!(action(&outcome), InstanceAction::NotOurs);
        assert!(!outcome.provisioner_needed());
    }

    assert!(env.cloud.calls().is_empty(), "{:?}", env.cloud.calls());
    assert!(env.cluster.calls().is_empty(), "{:?}", env.cluster.calls());
    assert_eq!(
        env.cloud.instance(&foreign.id).unwrap().instance.state,
        "running"
    );
    assert_eq!(env.claim(&o.claim).state, ClaimState::Initialized);
    assert!(
        env.store
            .unavailable_offerings(env.now())
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn the_termination_step_refuses_an_instance_the_store_does_not_record() {
    let env = Env::new();
    let o = env.owned("spot-i", CapacityType::Spot).await;
    let foreign = env.cloud.insert_instance("m5.large", ZONE, None, env.now());
    // A caller hands the machine a claim it edited to name another instance.
    let mut forged = env.claim(&o.claim);
    forged.state = ClaimState::Terminating;
    forged.instance_id = Some(foreign.id.clone());

    let error = terminate::terminate_instance(&env.ports, &forged)
        .await
        .unwrap_err();

    assert!(
        matches!(error, nodewright_engine::EngineError::NotOwned { .. }),
        "{error}"
    );
    assert!(env.terminate_calls().is_empty());
    assert_eq!(
        env.cloud.instance(&foreign.id).unwrap().instance.state,
        "running"
    );
}

// ----- rebalance and scheduled changes ---------------------------------------------------

#[tokio::test]
async fn a_rebalance_recommendation_in_cordon_mode_only_taints_the_node() {
    let env = Env::new();
    let o = env.owned("spot-j", CapacityType::Spot).await;
    env.pod("web-0", &o.node, "web");
    let input = InterruptionInput {
        event_id: "e-rebalance".into(),
        instance_ids: vec![o.instance.clone()],
        cause: DisruptionCause::RebalanceRecommended,
        deadline: None,
        mark_unavailable: false,
        mode: InterruptionMode::Cordon,
    };

    let outcome = env.handle(input).await.unwrap();

    assert_eq!(action(&outcome), InstanceAction::Cordoned);
    assert!(!outcome.provisioner_needed());
    assert!(
        env.cluster
            .node(&o.node)
            .unwrap()
            .taints
            .iter()
            .any(|t| t.key == TAINT_DISRUPTED)
    );
    assert_eq!(env.claim(&o.claim).state, ClaimState::Initialized);
    assert!(env.cluster_calls(ClusterOp::EvictPod).is_empty());
    assert!(env.cloud.calls().is_empty());
}

fn replace_then_drain(event: &str, instance: &str, deadline: Option<i64>) -> InterruptionInput {
    InterruptionInput {
        event_id: event.into(),
        instance_ids: vec![instance.into()],
        cause: DisruptionCause::ScheduledChange,
        deadline,
        mark_unavailable: false,
        mode: InterruptionMode::ReplaceThenDrain,
    }
}

#[tokio::test]
async fn replace_then_drain_cordons_first_and_drains_two_minutes_before_the_deadline() {
    let env = Env::new();
    let o = env.owned("od-k", CapacityType::OnDemand).await;
    env.pod("web-0", &o.node, "web");
    let deadline = env.now() + 3600;

    let outcome = env
        .handle(replace_then_drain("e-health", &o.instance, Some(deadline)))
        .await
        .unwrap();

    assert_eq!(
        action(&outcome),
        InstanceAction::Disrupted {
            state: ClaimState::Disrupting
        }
    );
    assert_eq!(outcome.instances()[0].drain_after, Some(deadline - 120));
    assert!(
        env.cluster
            .node(&o.node)
            .unwrap()
            .taints
            .iter()
            .any(|t| t.key == TAINT_DISRUPTED)
    );
    assert!(env.cluster_calls(ClusterOp::EvictPod).is_empty());

    env.clock.advance(Duration::from_secs(3600 - 121));
    let claim = terminate::advance(&env.ports, &env.claim(&o.claim))
        .await
        .unwrap();
    assert_eq!(claim.state, ClaimState::Disrupting, "not yet");

    env.clock.advance(Duration::from_secs(1));
    let claim = terminate::advance(&env.ports, &env.claim(&o.claim))
        .await
        .unwrap();
    assert_eq!(claim.state, ClaimState::Terminated);
    assert_eq!(env.cluster_calls(ClusterOp::EvictPod), ["default/web-0"]);
}

#[tokio::test]
async fn replace_then_drain_starts_draining_once_a_replacement_for_its_pods_is_initialized() {
    let env = Env::new();
    let o = env.owned("od-l", CapacityType::OnDemand).await;
    env.pod("web-0", &o.node, "web");
    let outcome = env
        .handle(replace_then_drain("e-rebalance", &o.instance, None))
        .await
        .unwrap();
    assert_eq!(outcome.instances()[0].drain_after, Some(env.now() + 300));

    // The provisioner launched a claim for the node's pod; it is still coming up.
    env.clock.advance(Duration::from_secs(30));
    let r = env.owned("od-replacement", CapacityType::OnDemand).await;
    let mut replacement = env.claim(&r.claim);
    let mut next = replacement.clone();
    next.state = ClaimState::Registered;
    next.version += 1;
    next.created_at = env.now();
    next.pods = vec!["default/web-0".into()].into();
    env.store
        .update_claim(&next, replacement.state, replacement.version)
        .await
        .unwrap();
    replacement = next;
    assert_eq!(
        terminate::advance(&env.ports, &env.claim(&o.claim))
            .await
            .unwrap()
            .state,
        ClaimState::Disrupting
    );

    let initialized = replacement
        .transition(ClaimState::Initialized, env.now(), |_| {})
        .unwrap();
    env.store
        .update_claim(&initialized, replacement.state, replacement.version)
        .await
        .unwrap();
    let claim = terminate::advance(&env.ports, &env.claim(&o.claim))
        .await
        .unwrap();
    assert_eq!(claim.state, ClaimState::Terminated);
}

// ----- issue 23: Karpenter's events -----------------------------------------------------

impl Env {
    fn events_on(&self, object: &str) -> Vec<nodewright_engine::ports::ClusterEvent> {
        self.cluster
            .events()
            .into_iter()
            .filter(|e| e.name == object)
            .collect()
    }
}

#[tokio::test]
async fn each_kind_of_interruption_is_told_on_the_node_under_karpenters_reason() {
    let cases = [
        (DisruptionCause::SpotInterrupted, "SpotInterrupted"),
        (
            DisruptionCause::RebalanceRecommended,
            "SpotRebalanceRecommendation",
        ),
        (DisruptionCause::ScheduledChange, "InstanceUnhealthy"),
        (DisruptionCause::InstanceStopped, "InstanceStopping"),
        (DisruptionCause::InstanceTerminated, "InstanceTerminating"),
    ];
    for (cause, reason) in cases {
        let env = Env::new();
        let o = env.owned("a", CapacityType::Spot).await;
        let mode = match cause {
            DisruptionCause::SpotInterrupted => InterruptionMode::Drain,
            DisruptionCause::RebalanceRecommended | DisruptionCause::ScheduledChange => {
                InterruptionMode::ReplaceThenDrain
            }
            _ => InterruptionMode::CleanUp,
        };
        let input = InterruptionInput {
            event_id: "e-1".into(),
            instance_ids: vec![o.instance.clone()],
            cause,
            deadline: (mode == InterruptionMode::Drain).then(|| env.now() + 120),
            mark_unavailable: false,
            mode,
        };

        env.handle(input).await.unwrap();

        let told: Vec<_> = env
            .events_on(&o.node)
            .into_iter()
            .filter(|e| e.reason == reason)
            .collect();
        assert_eq!(told.len(), 1, "{cause:?}: {:#?}", env.events_on(&o.node));
        assert_eq!(told[0].kind, "Node");
        assert!(told[0].message.contains(&o.instance), "{told:?}");
        assert!(told[0].message.contains("event e-1"), "{told:?}");
    }
}

#[tokio::test]
async fn a_rebalance_recommendation_that_only_cordons_is_still_told_on_the_node() {
    let env = Env::new();
    let o = env.owned("a", CapacityType::Spot).await;
    let input = InterruptionInput {
        event_id: "e-1".into(),
        instance_ids: vec![o.instance.clone()],
        cause: DisruptionCause::RebalanceRecommended,
        deadline: None,
        mark_unavailable: false,
        mode: InterruptionMode::Cordon,
    };

    let outcome = env.handle(input).await.unwrap();

    assert_eq!(action(&outcome), InstanceAction::Cordoned);
    let told = env.events_on(&o.node);
    assert_eq!(
        told.iter().map(|e| e.reason.as_str()).collect::<Vec<_>>(),
        ["SpotRebalanceRecommendation"]
    );
    assert!(told[0].message.ends_with("; cordoned"), "{told:?}");
}

#[tokio::test]
async fn a_spot_warning_tells_the_node_its_deadline_and_each_pod_its_eviction() {
    let env = Env::new();
    let o = env.owned("spot-a", CapacityType::Spot).await;
    env.pod("web-0", &o.node, "web");
    env.pod("web-1", &o.node, "web");
    let deadline = env.now() + 120;

    env.handle(spot_warning("e-1", &o.instance, deadline))
        .await
        .unwrap();

    let expiring: Vec<_> = env
        .events_on(&o.node)
        .into_iter()
        .filter(|e| e.reason == "TerminationGracePeriodExpiring")
        .collect();
    assert_eq!(expiring.len(), 1, "{expiring:#?}");
    assert_eq!(
        expiring[0].message,
        format!(
            "All pods will be deleted by {}",
            nodewright_core::interruption::format_rfc3339(deadline)
        )
    );
    for pod in ["web-0", "web-1"] {
        let told = env.events_on(pod);
        assert_eq!(told.len(), 1, "{pod}: {told:#?}");
        assert_eq!(
            (
                told[0].kind.as_str(),
                told[0].reason.as_str(),
                told[0].message.as_str()
            ),
            ("Pod", "Evicted", "Evicted pod: SpotInterrupted")
        );
    }
}

#[tokio::test]
async fn an_eviction_a_budget_refuses_is_reported_once_however_often_the_drain_retries() {
    let env = Env::new();
    let o = env.owned("spot-b", CapacityType::Spot).await;
    env.pod("web-0", &o.node, "web");
    env.cluster.with_state(|s| s.pdbs.push(web_budget(1)));
    env.handle(spot_warning("e-1", &o.instance, env.now() + 600))
        .await
        .unwrap();
    let claim = env.claim(&o.claim);
    assert_eq!(claim.state, ClaimState::Draining);

    for _ in 0..5 {
        env.clock.advance(Duration::from_secs(5));
        let claim = env.claim(&o.claim);
        terminate::drive(&env.ports, &claim).await.unwrap();
    }

    let refused: Vec<_> = env
        .events_on(&o.node)
        .into_iter()
        .filter(|e| e.reason == "FailedDraining")
        .collect();
    assert_eq!(refused.len(), 1, "{refused:#?}");
    assert_eq!(
        refused[0].message,
        "Failed to drain node, evicting pod default/web-0 violates a PDB"
    );
    assert_eq!(
        refused[0].event_type,
        nodewright_engine::ports::EventType::Warning
    );
}
