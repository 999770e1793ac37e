//! The provisioning tick over the in-memory fakes, with virtual time.

use std::sync::Arc;
use std::time::Duration;

use nodewright_core::api::model::{NodeRequirement, Taint, TaintEffect};
use nodewright_core::catalog::{CapacityType, Catalog};
use nodewright_core::nodeclaim::{ClaimSpec, ClaimState, NodeClaim};
use nodewright_core::repair::RepairSettings;
use nodewright_core::testing::{general_purpose_pool, pod};
use nodewright_core::well_known::{
    LABEL_INITIALIZED, LABEL_NODECLAIM, LABEL_REGISTERED, TAINT_UNREGISTERED,
};
use nodewright_engine::launch::LAUNCH_IN_FLIGHT;
use nodewright_engine::ports::{ClaimStore, LeaseStore, OfferingBackoff};
use nodewright_engine::ports::{Clock, CloudError, ClusterError, ErrorKind, StoreError};
use nodewright_engine::provision::LEASE_NAME;
use nodewright_engine::{Ports, Provisioner, ProvisionerConfig};
use nodewright_sim::fakes::{
    CloudOp, ClusterOp, FakeCloud, FakeCluster, ManualClock, MemoryStore, StoreOp, node_class,
};

const ZONES: [&str; 3] = ["us-east-1a", "us-east-1b", "us-east-1c"];

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

    fn provisioner(&self) -> Provisioner {
        self.provisioner_with(|_| {})
    }

    /// The provisioner with its configuration changed by `configure`.
    fn provisioner_with(&self, configure: impl FnOnce(&mut ProvisionerConfig)) -> Provisioner {
        let mut config = ProvisionerConfig::new("test-cluster", "holder-a");
        configure(&mut config);
        Provisioner::new(self.ports.clone(), config)
    }

    fn dry_run(&self) -> Provisioner {
        let mut config = ProvisionerConfig::new("test-cluster", "holder-dry");
        config.dry_run = true;
        Provisioner::new(self.ports.clone(), config)
    }

    /// Adds `requirements` to the NodePool's.
    fn require(&self, requirements: impl IntoIterator<Item = NodeRequirement>) {
        self.cluster
            .with_state(|s| s.node_pools[0].requirements.extend(requirements));
    }

    fn add_pods(&self, prefix: &str, n: usize) {
        for i in 0..n {
            self.cluster
                .add_pod(pod(&format!("{prefix}-{i}"), "1", "2Gi"));
        }
    }

    fn claims_in(&self, state: ClaimState) -> Vec<NodeClaim> {
        self.store
            .claims()
            .into_iter()
            .filter(|c| c.state == state)
            .collect()
    }
}

fn launching_claim(name: &str, pods: &[&str], now: i64) -> NodeClaim {
    NodeClaim::launching(
        ClaimSpec {
            labels: Default::default(),
            name: name.into(),
            node_pool: "general-purpose".into(),
            node_class: "default".into(),
            instance_type_options: vec!["m5.xlarge".into()],
            zones: ZONES.iter().map(|z| z.to_string()).collect(),
            capacity_types: vec![CapacityType::OnDemand],
            pods: pods.iter().map(|p| p.to_string()).collect(),
        },
        now,
    )
}

#[tokio::test]
async fn pending_pods_become_claims_instances_and_initialized_nodes() {
    let env = Env::new();
    env.add_pods("web", 3);
    let prov = env.provisioner();

    let report = prov.tick().await.unwrap();
    assert_eq!(report.launched.len(), 1, "{report:?}");
    let launched = &report.launched[0];
    assert_eq!(launched.pods, 3);
    // The cheapest fitting type, as the planner chose it.
    assert_eq!(launched.instance_type, report.planned[0].instance_type);
    assert!(
        launched.name.starts_with("general-purpose-")
            && launched.name.len() == "general-purpose-".len() + 5
    );

    let claims = env.claims_in(ClaimState::Launched);
    assert_eq!(claims.len(), 1);
    assert_eq!(
        claims[0].instance_id.as_deref(),
        Some(launched.instance_id.as_str())
    );
    let instances = env.cloud.instances();
    assert_eq!(instances.len(), 1);
    let fi = &instances[0];
    assert_eq!(
        fi.instance.claim_name.as_deref(),
        Some(launched.name.as_str())
    );
    assert_eq!(fi.request.labels[LABEL_NODECLAIM], launched.name);
    assert_eq!(
        fi.request.labels["karpenter.sh/nodepool"],
        "general-purpose"
    );
    assert!(
        fi.request
            .taints
            .iter()
            .any(|t| t.key == TAINT_UNREGISTERED && t.effect == TaintEffect::NoExecute)
    );
    // The claim was written before CreateFleet was called.
    let calls = env.store.calls();
    assert!(calls.iter().any(|c| c.op == StoreOp::CreateClaim));
    assert!(
        env.store
            .all_decisions()
            .iter()
            .any(|d| d.action.starts_with(&format!("launch {}", launched.name)))
    );

    let nodes = env.cluster.register_from(&env.cloud);
    assert_eq!(nodes.len(), 1);
    let report = prov.tick().await.unwrap();
    assert_eq!(report.lifecycle.registered, vec![launched.name.clone()]);
    assert!(report.launched.is_empty(), "{report:?}");
    let node = env.cluster.node(&nodes[0]).unwrap();
    assert_eq!(node.labels[LABEL_REGISTERED], "true");
    assert_eq!(node.labels[LABEL_NODECLAIM], launched.name);
    assert_eq!(node.labels["karpenter.sh/nodepool"], "general-purpose");
    assert!(
        node.labels
            .contains_key("karpenter.k8s.aws/instance-category")
    );
    assert!(!node.taints.iter().any(|t| t.key == TAINT_UNREGISTERED));
    assert_eq!(
        env.claims_in(ClaimState::Registered)[0]
            .node_name
            .as_deref(),
        Some(nodes[0].as_str())
    );

    env.cluster.set_ready(&nodes[0]);
    let report = prov.tick().await.unwrap();
    assert_eq!(report.lifecycle.initialized, vec![launched.name.clone()]);
    assert!(report.launched.is_empty());
    assert_eq!(
        env.cluster.node(&nodes[0]).unwrap().labels[LABEL_INITIALIZED],
        "true"
    );
    assert_eq!(env.claims_in(ClaimState::Initialized).len(), 1);
    let reasons: Vec<String> = env
        .cluster
        .events()
        .iter()
        .map(|e| e.reason.clone())
        .collect();
    // Every pod of the claim hears where it goes (Launched), and again while it waits
    // for the node (Nominated, once per de-duplication window); the node's own events.
    assert_eq!(
        reasons,
        [
            "Launched",
            "Launched",
            "Launched",
            "Registered",
            "Nominated",
            "Nominated",
            "Nominated",
            "Initialized"
        ]
    );
    let mut launched: Vec<String> = env
        .cluster
        .events()
        .iter()
        .filter(|e| e.reason == "Launched")
        .map(|e| format!("{}/{}", e.namespace.as_deref().unwrap_or(""), e.name))
        .collect();
    launched.sort();
    assert_eq!(
        launched,
        ["default/web-0", "default/web-1", "default/web-2"]
    );
}

#[tokio::test]
async fn startup_taints_hold_initialization_until_removed() {
    let env = Env::new();
    env.cluster.with_state(|s| {
        s.node_pools[0].startup_taints.push(Taint {
            key: "cni.example/not-ready".into(),
            value: None,
            effect: TaintEffect::NoSchedule,
        })
    });
    env.add_pods("web", 1);
    let prov = env.provisioner();
    prov.tick().await.unwrap();
    let nodes = env.cluster.register_from(&env.cloud);
    env.cluster.set_ready(&nodes[0]);
    let report = prov.tick().await.unwrap();
    assert_eq!(report.lifecycle.registered.len(), 1);
    assert!(report.lifecycle.initialized.is_empty());
    env.cluster.remove_taint(&nodes[0], "cni.example/not-ready");
    let report = prov.tick().await.unwrap();
    assert_eq!(report.lifecycle.initialized.len(), 1);
}

/// The node lifecycle controller taints a node NotReady when it registers and untaints
/// it a node-monitor period after the kubelet reports Ready (longer on a busy control
/// plane). In between, kube-scheduler binds nothing there.
#[tokio::test]
async fn a_ready_node_still_tainted_not_ready_is_not_initialized_and_nothing_is_launched_again() {
    let env = Env::new();
    env.add_pods("web", 20);
    let prov = env.provisioner();
    let first = prov.tick().await.unwrap();
    assert!(!first.launched.is_empty());
    let nodes = env.cluster.register_from(&env.cloud);
    for n in &nodes {
        env.cluster.add_taint(
            n,
            Taint {
                key: "node.kubernetes.io/not-ready".into(),
                value: None,
                effect: TaintEffect::NoSchedule,
            },
        );
        env.cluster.set_ready(n);
    }
    for _ in 0..2 {
        let report = prov.tick().await.unwrap();
        assert!(report.lifecycle.initialized.is_empty(), "{report:?}");
        assert!(report.planned.is_empty(), "{report:?}");
    }
    assert_eq!(env.cloud.instances().len(), first.launched.len());
    for n in &nodes {
        env.cluster.remove_taint(n, "node.kubernetes.io/not-ready");
    }
    let report = prov.tick().await.unwrap();
    assert_eq!(report.lifecycle.initialized.len(), nodes.len());
    assert!(report.planned.is_empty(), "{report:?}");
}

#[tokio::test]
async fn a_second_tick_launches_nothing_for_pods_already_counted() {
    let env = Env::new();
    env.add_pods("web", 20);
    let prov = env.provisioner();
    let first = prov.tick().await.unwrap();
    assert!(!first.launched.is_empty());
    let again = prov.tick().await.unwrap();
    assert!(
        again.launched.is_empty() && again.planned.is_empty(),
        "{again:?}"
    );
    // Registered but not Ready: still counted once, not twice, not zero times.
    env.cluster.register_from(&env.cloud);
    let again = prov.tick().await.unwrap();
    assert!(again.planned.is_empty(), "{again:?}");
    for n in env.cluster.nodes() {
        env.cluster.set_ready(&n.name);
    }
    let again = prov.tick().await.unwrap();
    assert!(again.planned.is_empty(), "{again:?}");
    assert_eq!(env.cloud.instances().len(), first.launched.len());
}

#[tokio::test]
async fn two_concurrent_ticks_launch_exactly_once() {
    let env = Env::new();
    env.add_pods("web", 3);
    let a = env.provisioner();
    let b = Provisioner::new(
        env.ports.clone(),
        ProvisionerConfig::new("test-cluster", "holder-b"),
    );
    let (ra, rb) = tokio::join!(a.tick(), b.tick());
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    assert_eq!(ra.launched.len() + rb.launched.len(), 1, "{ra:?} {rb:?}");
    assert!(
        ra.skipped.is_some()
            || rb.skipped.is_some()
            || ra.launched.is_empty()
            || rb.launched.is_empty()
    );
    assert_eq!(env.cloud.instances().len(), 1);
    assert_eq!(env.store.claims().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_ticks_on_threads_launch_exactly_once() {
    let env = Env::new();
    env.add_pods("web", 10);
    let provs: Vec<Arc<Provisioner>> = (0..4)
        .map(|i| {
            Arc::new(Provisioner::new(
                env.ports.clone(),
                ProvisionerConfig::new("test-cluster", format!("h{i}")),
            ))
        })
        .collect();
    let handles: Vec<_> = provs
        .iter()
        .map(|p| {
            let p = p.clone();
            tokio::spawn(async move { p.tick().await })
        })
        .collect();
    let mut launched = 0;
    for h in handles {
        launched += h.await.unwrap().unwrap().launched.len();
    }
    assert_eq!(env.cloud.instances().len(), launched);
    assert_eq!(env.store.claims().len(), launched);
    // Whatever interleaving happened, one more tick has nothing left to do.
    assert!(provs[0].tick().await.unwrap().planned.is_empty());
}

#[tokio::test]
async fn a_claim_another_invocation_just_wrote_is_left_to_it_then_relaunched_once_stale() {
    let env = Env::new();
    env.add_pods("web", 2);
    // Another invocation (a previous tick, or the disruption function launching a
    // replacement) wrote the claim; its CreateFleet may still be under way.
    let now = env.clock.now_millis() as i64 / 1000;
    env.store
        .create_claim(&launching_claim(
            "general-purpose-crash",
            &["default/web-0", "default/web-1"],
            now,
        ))
        .await
        .unwrap();
    let prov = env.provisioner();
    let report = prov.tick().await.unwrap();
    assert!(
        report.launched.is_empty() && report.planned.is_empty(),
        "left to the invocation that wrote it, and its pods are its own: {report:?}"
    );
    assert!(!env.cloud.call_counts().contains_key(&CloudOp::Launch));
    // Still Launching well past any CreateFleet: that invocation died before it.
    env.clock.advance(LAUNCH_IN_FLIGHT);
    let report = prov.tick().await.unwrap();
    assert_eq!(report.launched.len(), 1, "{report:?}");
    assert_eq!(report.launched[0].name, "general-purpose-crash");
    assert!(
        report.planned.is_empty(),
        "the recovered claim absorbs the pods: {report:?}"
    );
    assert_eq!(env.cloud.call_counts()[&CloudOp::Launch], 1);
    assert_eq!(env.cloud.instances().len(), 1);
    assert_eq!(
        env.cloud.instances()[0].request.claim_name,
        "general-purpose-crash"
    );
}

#[tokio::test]
async fn a_launch_that_keeps_failing_transiently_is_retried_next_tick_with_the_same_token() {
    let env = Env::new();
    env.add_pods("web", 2);
    let prov = env.provisioner();
    for _ in 0..prov.config().launch_attempts {
        env.cloud.fail_next(
            CloudOp::Launch,
            CloudError::new(ErrorKind::Unavailable, "connection reset"),
        );
    }
    let report = prov.tick().await.unwrap();
    assert_eq!(report.deferred.len(), 1, "{report:?}");
    assert!(env.cloud.instances().is_empty());
    assert_eq!(env.claims_in(ClaimState::Launching).len(), 1);
    let report = prov.tick().await.unwrap();
    assert_eq!(report.launched.len(), 1, "{report:?}");
    assert_eq!(report.launched[0].name, env.store.claims()[0].name);
    assert_eq!(env.cloud.instances().len(), 1);
    assert_eq!(env.store.claims().len(), 1);
}

#[tokio::test]
async fn a_crash_after_create_fleet_is_adopted_not_launched_again() {
    let env = Env::new();
    env.add_pods("web", 2);
    let prov = env.provisioner();
    env.store.fail_next(
        StoreOp::UpdateClaim,
        StoreError::new(ErrorKind::Unavailable, "DynamoDB timed out"),
    );
    assert!(prov.tick().await.is_err());
    assert_eq!(env.cloud.instances().len(), 1);
    assert_eq!(env.claims_in(ClaimState::Launching).len(), 1);
    // The lease was released on the way out: the next tick is not blocked.
    let report = prov.tick().await.unwrap();
    assert_eq!(report.adopted.len(), 1, "{report:?}");
    assert!(
        report.launched.is_empty() && report.planned.is_empty(),
        "{report:?}"
    );
    assert_eq!(env.cloud.call_counts()[&CloudOp::Launch], 1);
    assert_eq!(env.cloud.instances().len(), 1);
    let launched = env.claims_in(ClaimState::Launched);
    assert_eq!(
        launched[0].instance_id.as_deref(),
        Some(env.cloud.instances()[0].instance.id.as_str())
    );
    assert!(
        prov.tick()
            .await
            .unwrap()
            .lifecycle
            .orphans_terminated
            .is_empty()
    );
}

#[tokio::test]
async fn insufficient_capacity_falls_back_and_is_remembered_for_three_minutes() {
    let env = Env::new();
    env.add_pods("web", 3);
    let cheapest = env.dry_run().tick().await.unwrap().planned[0]
        .instance_type
        .clone();
    for z in ZONES {
        env.cloud
            .set_capacity(&cheapest, z, CapacityType::OnDemand, false);
    }
    let prov = env.provisioner();
    let report = prov.tick().await.unwrap();
    assert_eq!(report.launched.len(), 1, "{report:?}");
    assert_ne!(report.launched[0].instance_type, cheapest);
    let now = env.clock.now_millis() as i64 / 1000;
    let ice = env.store.unavailable_offerings(now).await.unwrap();
    assert_eq!(ice.len(), 3);
    assert!(ice.iter().all(|(t, _, _)| *t == cheapest));
    assert!(
        env.store
            .unavailable_offerings(now + 180)
            .await
            .unwrap()
            .is_empty()
    );

    // The next plan avoids the type while the entry lasts...
    env.add_pods("api", 3);
    let planned = env.dry_run().tick().await.unwrap().planned;
    assert!(!planned.is_empty());
    assert!(
        planned
            .iter()
            .all(|c| !c.instance_type_options.contains(&cheapest)),
        "{planned:?}"
    );
    // ...and forgets it after expiry.
    env.clock.advance(Duration::from_secs(181));
    for z in ZONES {
        env.cloud
            .set_capacity(&cheapest, z, CapacityType::OnDemand, true);
    }
    let report = prov.tick().await.unwrap();
    assert_eq!(report.launched.len(), 1, "{report:?}");
    assert_eq!(report.launched[0].instance_type, cheapest);
}

#[tokio::test]
async fn no_capacity_anywhere_fails_the_claim_with_the_clouds_message() {
    let env = Env::new();
    env.add_pods("web", 1);
    let options = env.dry_run().tick().await.unwrap().planned[0]
        .instance_type_options
        .clone();
    for t in &options {
        for z in ZONES {
            env.cloud.set_capacity(t, z, CapacityType::OnDemand, false);
        }
    }
    let report = env.provisioner().tick().await.unwrap();
    assert_eq!(report.failed.len(), 1, "{report:?}");
    assert!(
        report.failed[0].1.contains("InsufficientInstanceCapacity"),
        "{report:?}"
    );
    let failed = env.claims_in(ClaimState::LaunchFailed);
    assert!(
        failed[0]
            .failure
            .as_deref()
            .is_some_and(|f| f.contains("InsufficientInstanceCapacity"))
    );
    assert!(env.cloud.instances().is_empty());
    assert!(
        env.cluster
            .events()
            .iter()
            .any(|e| e.reason == "LaunchFailed" && e.name == "web-0")
    );
}

#[tokio::test]
async fn a_throttled_launch_backs_off_in_virtual_time_then_succeeds() {
    let env = Env::new();
    env.add_pods("web", 1);
    env.cloud.fail_next(
        CloudOp::Launch,
        CloudError::new(ErrorKind::Throttled, "RequestLimitExceeded"),
    );
    let before = env.clock.now_millis();
    let report = env.provisioner().tick().await.unwrap();
    assert_eq!(report.launched.len(), 1, "{report:?}");
    assert!(env.clock.now_millis() - before >= 500);
    assert_eq!(env.cloud.call_counts()[&CloudOp::Launch], 2);
}

#[tokio::test]
async fn an_invalid_launch_fails_the_claim_carrying_the_message() {
    let env = Env::new();
    env.add_pods("web", 1);
    env.cloud.fail_next(
        CloudOp::Launch,
        CloudError::new(ErrorKind::Invalid, "InvalidParameterValue: bad AMI"),
    );
    let report = env.provisioner().tick().await.unwrap();
    assert_eq!(report.failed.len(), 1);
    assert!(report.failed[0].1.contains("bad AMI"));
    assert_eq!(env.claims_in(ClaimState::LaunchFailed).len(), 1);
}

#[tokio::test]
async fn a_node_that_never_registers_is_terminated_after_fifteen_minutes() {
    let env = Env::new();
    env.add_pods("web", 1);
    let prov = env.provisioner();
    let first = prov.tick().await.unwrap();
    let id = first.launched[0].instance_id.clone();
    env.clock.advance(Duration::from_secs(14 * 60));
    assert!(prov.tick().await.unwrap().lifecycle.unregistered.is_empty());
    env.clock.advance(Duration::from_secs(60));
    let report = prov.tick().await.unwrap();
    assert_eq!(
        report.lifecycle.unregistered,
        vec![first.launched[0].name.clone()]
    );
    assert_eq!(
        env.cloud.instance(&id).unwrap().instance.state,
        "terminated"
    );
    let claim = env
        .store
        .get_claim(&first.launched[0].name)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claim.state, ClaimState::Terminated);
    assert!(
        env.cluster
            .events()
            .iter()
            .any(|e| e.reason == "Unregistered")
    );
    // The pod still needs a home: a replacement is launched in the same tick.
    assert_eq!(report.launched.len(), 1);
}

#[tokio::test]
async fn a_termination_interrupted_by_a_crash_is_finished_by_the_next_tick() {
    let env = Env::new();
    env.add_pods("web", 1);
    let prov = env.provisioner();
    let first = prov.tick().await.unwrap();
    env.clock.advance(Duration::from_secs(15 * 60));
    env.cloud.fail_next(
        CloudOp::Terminate,
        CloudError::new(ErrorKind::Unavailable, "timeout"),
    );
    // One claim's failure does not fail the tick: it is reported and retried.
    let report = prov.tick().await.unwrap();
    assert_eq!(report.lifecycle.errors.len(), 1, "{:?}", report.lifecycle);
    assert_eq!(report.lifecycle.errors[0].0, first.launched[0].name);
    let claim = env
        .store
        .get_claim(&first.launched[0].name)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claim.state, ClaimState::Terminating);
    prov.tick().await.unwrap();
    let claim = env
        .store
        .get_claim(&first.launched[0].name)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claim.state, ClaimState::Terminated);
    assert_eq!(
        env.cloud
            .instance(&first.launched[0].instance_id)
            .unwrap()
            .instance
            .state,
        "terminated"
    );
}

#[tokio::test]
async fn a_leaked_instance_is_terminated_after_the_grace_and_a_foreign_one_never() {
    let env = Env::new();
    let now = env.clock.now_millis() as i64 / 1000;
    // A claim that ended long ago, and an instance still tagged for it.
    let mut c = launching_claim("general-purpose-old", &[], now);
    env.store.create_claim(&c).await.unwrap();
    c = c
        .transition(ClaimState::LaunchFailed, now, |c| {
            c.failure = Some("x".into())
        })
        .unwrap();
    env.store
        .update_claim(&c, ClaimState::Launching, 1)
        .await
        .unwrap();
    let leak =
        env.cloud
            .insert_instance("m5.large", "us-east-1a", Some("general-purpose-old"), now);
    let foreign = env.cloud.insert_instance(
        "m5.large",
        "us-east-1b",
        Some("someone-elses-claim"),
        now - 86_400,
    );
    let untagged = env
        .cloud
        .insert_instance("m5.large", "us-east-1c", None, now - 86_400);

    let prov = env.provisioner();
    let report = prov.tick().await.unwrap();
    assert!(
        report.lifecycle.orphans_terminated.is_empty(),
        "within the grace period"
    );
    env.clock.advance(Duration::from_secs(5 * 60));
    let report = prov.tick().await.unwrap();
    assert_eq!(report.lifecycle.orphans_terminated, vec![leak.id.clone()]);
    assert_eq!(
        env.cloud.instance(&leak.id).unwrap().instance.state,
        "terminated"
    );
    for id in [&foreign.id, &untagged.id] {
        assert_eq!(env.cloud.instance(id).unwrap().instance.state, "running");
    }
    assert!(report.lifecycle.foreign_ignored.contains(&foreign.id));
    assert!(
        env.store
            .all_decisions()
            .iter()
            .any(|d| d.action == format!("ignored foreign instance {}", foreign.id))
    );
    let terminated: Vec<String> = env
        .cloud
        .calls()
        .into_iter()
        .filter(|c| c.op == CloudOp::Terminate)
        .map(|c| c.key)
        .collect();
    assert_eq!(terminated, vec![leak.id]);
}

#[tokio::test]
async fn a_dry_run_writes_no_claim_and_launches_nothing_but_records_why() {
    let env = Env::new();
    env.add_pods("web", 4);
    let report = env.dry_run().tick().await.unwrap();
    assert!(report.dry_run);
    assert!(!report.planned.is_empty());
    assert!(env.store.claims().is_empty());
    assert!(env.cloud.instances().is_empty());
    let decisions = env.store.all_decisions();
    assert_eq!(decisions.len(), report.planned.len());
    assert!(
        decisions[0].action.contains("[dry run]") && decisions[0].reason.contains("default/web-")
    );
}

#[tokio::test]
async fn a_lease_held_by_another_holder_skips_the_tick() {
    let env = Env::new();
    env.add_pods("web", 4);
    let now = env.clock.now_millis() as i64 / 1000;
    env.store
        .acquire_lease(LEASE_NAME, "someone-else", now, Duration::from_secs(90))
        .await
        .unwrap()
        .unwrap();
    let report = env.provisioner().tick().await.unwrap();
    assert_eq!(
        report.skipped.as_deref(),
        Some("lease held by someone-else"),
        "names the holder"
    );
    assert!(env.cloud.instances().is_empty() && env.store.claims().is_empty());
    // Once it expires, the tick proceeds.
    env.clock.advance(Duration::from_secs(91));
    // Two launches, not one: the planner's repack pass puts the four 1-cpu/2Gi pods on
    // an xlarge (three) and a large (one), cheaper than the single 2xlarge it took before.
    assert_eq!(env.provisioner().tick().await.unwrap().launched.len(), 2);
}

#[tokio::test]
async fn run_for_ticks_again_when_new_pods_appear_within_the_minute() {
    let env = Env::new();
    env.add_pods("web", 2);
    let prov = env.provisioner();
    let start = env.clock.now_millis();
    let clock = env.clock.clone();
    let cluster = env.cluster.clone();
    let (reports, ()) = tokio::join!(
        prov.run_for(Duration::from_secs(55), Duration::from_secs(5)),
        async move {
            while clock.now_millis() < start + 20_000 {
                tokio::task::yield_now().await;
            }
            cluster.add_pod(pod("late-0", "2", "4Gi"));
        }
    );
    assert!(reports.shortfalls().is_empty(), "{reports:?}");
    let ticks = &reports.ticks;
    assert_eq!(ticks.iter().map(|r| r.launched.len()).sum::<usize>(), 2);
    let late = ticks
        .iter()
        .position(|r| r.pending.contains(&"default/late-0".to_string()))
        .expect("a tick saw the late pod");
    assert_eq!(ticks[late].launched.len(), 1, "launched for it at once");
    let elapsed = env.clock.now_millis() - start;
    assert!((50_000..=55_000).contains(&elapsed), "{elapsed}");
}

#[tokio::test]
async fn pods_keep_the_claim_they_were_planned_for_so_repeated_ticks_add_nothing() {
    let env = Env::new();
    let shapes = [
        ("250m", "512Mi"),
        ("1", "2Gi"),
        ("2", "4Gi"),
        ("1", "8Gi"),
        ("4", "8Gi"),
    ];
    for i in 0..300 {
        let (cpu, mem) = shapes[i % shapes.len()];
        env.cluster
            .add_pod(pod(&format!("app{}-{i}", i % 7), cpu, mem));
    }
    let prov = env.provisioner();
    let first = prov.tick().await.unwrap();
    assert!(!first.launched.is_empty());
    for _ in 0..3 {
        let again = prov.tick().await.unwrap();
        assert!(again.planned.is_empty(), "{:?}", again.planned);
    }
    assert_eq!(env.cloud.instances().len(), first.launched.len());
}

#[tokio::test]
async fn a_tick_tells_people_why_a_class_cannot_be_used_and_why_a_pod_waits() {
    use nodewright_engine::ports::{ConditionStatus, EventType, ObjectKind};
    let env = Env::new();
    env.cluster.add_pod(pod("giant-0", "500", "1Ti"));
    let report = env.provisioner().tick().await.unwrap();
    assert_eq!(report.unschedulable.len(), 1);
    let events = env.cluster.events();
    let failed: Vec<_> = events
        .iter()
        .filter(|e| e.reason == "FailedScheduling")
        .collect();
    assert_eq!(failed.len(), 1, "{events:?}");
    assert_eq!(failed[0].name, "giant-0");
    assert_eq!(failed[0].event_type, EventType::Warning);
    assert!(
        env.store
            .all_decisions()
            .iter()
            .any(|d| d.action.contains("default/giant-0")),
        "recorded as a decision"
    );
    let ready = env
        .cluster
        .condition(ObjectKind::Ec2NodeClass, "default", "Ready")
        .expect("the class's Ready condition is set");
    assert_eq!(ready.condition.status, ConditionStatus::True);

    // The class's subnets go away: the class and its pool turn not Ready, with reasons.
    env.cloud.set_subnets(vec![]);
    let report = env.provisioner().tick().await.unwrap();
    assert!(!report.invalid.is_empty());
    let subnets = env
        .cluster
        .condition(ObjectKind::Ec2NodeClass, "default", "SubnetsReady")
        .unwrap();
    assert_eq!(subnets.condition.status, ConditionStatus::False);
    assert_eq!(subnets.condition.reason, "SubnetsNotFound");
    let pool = env
        .cluster
        .condition(ObjectKind::NodePool, "general-purpose", "Ready")
        .unwrap();
    assert_eq!(pool.condition.status, ConditionStatus::False);
    assert!(
        env.cluster
            .events()
            .iter()
            .any(|e| e.reason == "SubnetsNotFound" && e.event_type == EventType::Warning),
        "a warning event on the EC2NodeClass"
    );
}

#[tokio::test]
async fn each_live_claim_is_mirrored_rewritten_when_deleted_and_removed_once_terminated() {
    let env = Env::new();
    env.add_pods("web", 1);
    let prov = env.provisioner();
    let first = prov.tick().await.unwrap();
    let name = first.launched[0].name.clone();
    let mirrors = env.cluster.mirrors();
    assert_eq!(mirrors.len(), 1);
    assert_eq!(mirrors[&name].state, ClaimState::Launched);

    let nodes = env.cluster.register_from(&env.cloud);
    env.cluster.set_ready(&nodes[0]);
    prov.tick().await.unwrap();
    prov.tick().await.unwrap();
    assert_eq!(env.cluster.mirrors()[&name].state, ClaimState::Initialized);

    // A quiet tick mirrors nothing new; a mirror someone deleted comes back.
    let before = env.cluster.mirrors();
    prov.tick().await.unwrap();
    assert_eq!(env.cluster.mirrors(), before);
    assert!(env.cluster.delete_mirror(&name));
    prov.tick().await.unwrap();
    assert!(env.cluster.mirrors().contains_key(&name));

    // A failed mirror never fails the tick.
    env.cluster.fail_next(
        ClusterOp::MirrorClaims,
        ClusterError::new(ErrorKind::Unavailable, "the API server is restarting"),
    );
    prov.tick()
        .await
        .expect("the tick does not fail with its mirror");

    // Taken away as the disruption job would (an empty node): the ticks drain and
    // terminate it, and its mirror goes.
    let claim = env.store.get_claim(&name).await.unwrap().unwrap();
    let disrupting = claim
        .transition(ClaimState::Disrupting, env.clock.now(), |c| {
            c.disruption = Some(nodewright_core::nodeclaim::Disruption {
                cause: nodewright_core::nodeclaim::DisruptionCause::Empty,
                deadline: None,
                since: c.updated_at,
                drain_after: None,
                drain_grace: None,
                event: None,
                command: None,
            })
        })
        .unwrap();
    env.store
        .update_claim(&disrupting, ClaimState::Initialized, claim.version)
        .await
        .unwrap();
    for _ in 0..5 {
        prov.tick().await.unwrap();
        env.clock.advance(Duration::from_secs(10));
    }
    assert_eq!(
        env.store.get_claim(&name).await.unwrap().unwrap().state,
        ClaimState::Terminated
    );
    assert!(
        !env.cluster.mirrors().contains_key(&name),
        "{:?}",
        env.cluster.mirrors().keys()
    );
}

/// A running node of the general-purpose pool with `pods` web pods bound to it.
async fn initialized_node_with_pods(
    env: &Env,
    prov: &Provisioner,
    prefix: &str,
) -> (String, String) {
    env.add_pods(prefix, 2);
    let report = prov.tick().await.unwrap();
    let claim = report.launched[0].name.clone();
    let node = env.cluster.register_from(&env.cloud).remove(0);
    env.cluster.set_ready(&node);
    prov.tick().await.unwrap();
    for i in 0..2 {
        env.cluster
            .bind_pod(&format!("default/{prefix}-{i}"), &node);
    }
    assert_eq!(env.claims_in(ClaimState::Initialized).len(), 1);
    (claim, node)
}

/// A PodDisruptionBudget over the `web` pods that allows no eviction.
fn refuse_every_eviction_of_web(env: &Env) {
    env.cluster.with_state(|s| {
        s.pdbs.push(nodewright_core::cluster::PodDisruptionBudget {
            namespace: "default".into(),
            name: "web".into(),
            selector: Some(nodewright_core::testing::selector("web")),
            min_available: Some(nodewright_core::cluster::IntOrPercent::Int(10)),
            max_unavailable: None,
            status_disruptions_allowed: None,
        })
    });
}

#[tokio::test]
async fn with_legacy_node_repair_a_node_not_ready_for_thirty_minutes_is_repaired_forcefully_and_logged()
 {
    use nodewright_core::cluster::ConditionStatus;
    let env = Env::new();
    let prov = env.provisioner_with(|c| c.repair = RepairSettings::legacy());
    let (claim, node) = initialized_node_with_pods(&env, &prov, "web").await;
    let instance = env
        .store
        .get_claim(&claim)
        .await
        .unwrap()
        .unwrap()
        .instance_id
        .unwrap();
    // A budget that refuses every eviction: the pods cannot run on a dead node anyway.
    refuse_every_eviction_of_web(&env);
    // The kubelet stops reporting: the node lifecycle controller turns Ready Unknown.
    let lost_at = env.clock.now();
    env.cluster
        .set_condition(&node, "Ready", ConditionStatus::Unknown, lost_at);
    env.clock.advance(Duration::from_secs(29 * 60));
    let report = prov.tick().await.unwrap();
    assert!(
        report.repair.repaired.is_empty(),
        "repaired before 30 minutes"
    );
    env.clock.advance(Duration::from_secs(60));
    let report = prov.tick().await.unwrap();
    assert_eq!(report.repair.repaired, vec![claim.clone()]);
    assert!(
        report.lifecycle.disrupted.iter().any(|d| d.claim == claim
            && d.cause == nodewright_core::nodeclaim::DisruptionCause::Unhealthy)
    );
    // Forceful: the pods are deleted (not evicted against budgets), the instance goes.
    for _ in 0..3 {
        prov.tick().await.unwrap();
    }
    let stored = env.store.get_claim(&claim).await.unwrap().unwrap();
    assert_eq!(stored.state, ClaimState::Terminated, "{stored:?}");
    assert_eq!(
        env.cloud.instance(&instance).unwrap().instance.state,
        "terminated"
    );
    assert!(env.cluster.node(&node).is_none());
    let decisions = env.store.all_decisions();
    let repair = decisions
        .iter()
        .find(|d| d.job == "repair")
        .expect("a repair decision");
    assert!(
        repair.reason.contains("Ready=Unknown for 30m0s"),
        "{}",
        repair.reason
    );
    assert!(
        env.cluster
            .events()
            .iter()
            .any(|e| e.reason == "Unhealthy" && e.name == node)
    );
}

#[tokio::test]
async fn a_node_not_ready_for_thirty_minutes_gets_a_replacement_first_then_a_drain_of_ten_minutes_at_most()
 {
    use nodewright_core::cluster::ConditionStatus;
    let env = Env::new();
    let prov = env.provisioner();
    let (claim, node) = initialized_node_with_pods(&env, &prov, "web").await;
    refuse_every_eviction_of_web(&env);
    env.cluster
        .set_condition(&node, "Ready", ConditionStatus::Unknown, env.clock.now());
    env.clock.advance(Duration::from_secs(30 * 60));
    let report = prov.tick().await.unwrap();
    assert_eq!(report.repair.repaired, vec![claim.clone()]);
    let stored = env.store.get_claim(&claim).await.unwrap().unwrap();
    let d = stored.disruption.clone().unwrap();
    assert_eq!(
        stored.state,
        ClaimState::Disrupting,
        "cordoned, not draining yet"
    );
    assert_eq!(d.deadline, None, "no deadline until the drain starts");
    assert_eq!(d.drain_grace, Some(600), "the Ready policy's ten minutes");
    assert!(d.drain_after.is_some());
    let replacements: Vec<NodeClaim> = env
        .store
        .claims()
        .into_iter()
        .filter(|c| c.name != claim && c.pods.iter().any(|p| p.starts_with("default/web")))
        .collect();
    assert_eq!(
        replacements.len(),
        1,
        "a replacement for its pods, in the same tick"
    );
    let decision = env
        .store
        .all_decisions()
        .into_iter()
        .find(|d| d.job == "repair")
        .unwrap();
    assert!(
        decision
            .action
            .contains("launch a replacement, then drain and terminate it (drain within 10m0s)"),
        "{}",
        decision.action
    );
    // The replacement never comes up here: the drain starts when the wait ends, and the
    // budget is honoured until the ten minutes are over.
    env.clock.advance(Duration::from_secs(15 * 60));
    prov.tick().await.unwrap();
    let stored = env.store.get_claim(&claim).await.unwrap().unwrap();
    assert_eq!(stored.state, ClaimState::Draining, "{stored:?}");
    let deadline = stored.disruption.as_ref().unwrap().deadline.unwrap();
    assert_eq!(deadline, env.clock.now() + 600);
    env.clock.advance(Duration::from_secs(5 * 60));
    prov.tick().await.unwrap();
    assert!(
        env.store
            .get_claim(&claim)
            .await
            .unwrap()
            .unwrap()
            .state
            .is_being_taken_away(),
        "the PDB holds the pods within the bound"
    );
    env.clock.advance(Duration::from_secs(5 * 60 + 1));
    for _ in 0..3 {
        prov.tick().await.unwrap();
    }
    let stored = env.store.get_claim(&claim).await.unwrap().unwrap();
    assert_eq!(stored.state, ClaimState::Terminated, "{stored:?}");
}

/// A node with a GPU fault a reboot clears, as the node monitoring agent reports it.
fn gpu_fault(env: &Env, node: &str) {
    use nodewright_core::cluster::ConditionStatus;
    env.cluster.set_condition_with_reason(
        node,
        "AcceleratedHardwareReady",
        ConditionStatus::False,
        Some("NVIDIAXID48Error"),
        env.clock.now(),
    );
}

#[tokio::test]
async fn a_gpu_fault_a_reboot_clears_reboots_the_instance_and_the_node_is_back_when_its_boot_id_changes()
 {
    use nodewright_core::cluster::ConditionStatus;
    let env = Env::new();
    let prov = env.provisioner_with(|c| c.repair = RepairSettings::aws(true, false));
    let (claim, node) = initialized_node_with_pods(&env, &prov, "web").await;
    let instance = env
        .store
        .get_claim(&claim)
        .await
        .unwrap()
        .unwrap()
        .instance_id
        .unwrap();
    gpu_fault(&env, &node);
    env.clock.advance(Duration::from_secs(10 * 60));
    let report = prov.tick().await.unwrap();
    assert_eq!(report.repair.rebooting, vec![claim.clone()]);
    assert!(report.repair.repaired.is_empty(), "not replaced");
    let stored = env.store.get_claim(&claim).await.unwrap().unwrap();
    assert_eq!(stored.state, ClaimState::Initialized, "still capacity");
    assert_eq!(stored.reboots.len(), 1);
    assert!(
        env.cluster
            .node(&node)
            .unwrap()
            .taints
            .iter()
            .any(|t| t.key == "karpenter.sh/rebooting")
    );
    // The pods are evicted; after the drain's minimum the reboot goes out.
    env.clock.advance(Duration::from_secs(10));
    prov.tick().await.unwrap();
    assert_eq!(
        env.cloud
            .take_reboots()
            .iter()
            .map(|(id, _)| id.as_str())
            .collect::<Vec<_>>(),
        [instance.as_str()]
    );
    let stored = env.store.get_claim(&claim).await.unwrap().unwrap();
    let reboot = stored.reboot.clone().unwrap();
    assert_eq!(
        reboot.pre_boot_id.as_deref(),
        Some(format!("{instance}-boot-0").as_str())
    );
    // The machine comes back: a new boot id, the fault cleared, Ready.
    env.clock.advance(Duration::from_secs(90));
    env.cluster.with_state(|s| {
        let n = s.nodes.iter_mut().find(|n| n.name == node).unwrap();
        n.boot_id = Some(format!("{instance}-boot-1"));
    });
    env.cluster.set_condition(
        &node,
        "AcceleratedHardwareReady",
        ConditionStatus::True,
        env.clock.now(),
    );
    let report = prov.tick().await.unwrap();
    assert_eq!(report.repair.rebooted, vec![claim.clone()]);
    let stored = env.store.get_claim(&claim).await.unwrap().unwrap();
    assert_eq!(stored.reboot, None);
    assert_eq!(stored.rebooted_at, Some(env.clock.now()));
    assert_eq!(
        env.cloud.instance(&instance).unwrap().instance.state,
        "running"
    );
    assert!(
        !env.cluster
            .node(&node)
            .unwrap()
            .taints
            .iter()
            .any(|t| t.key == "karpenter.sh/rebooting")
    );
    assert!(
        env.cluster
            .events()
            .iter()
            .any(|e| e.reason == "RebootObserved" && e.name == node)
    );
    assert_eq!(
        env.claims_in(ClaimState::Initialized).len(),
        1,
        "nothing launched"
    );
}

#[tokio::test]
async fn a_reboot_the_node_does_not_come_back_from_replaces_it_after_twenty_minutes() {
    let env = Env::new();
    let prov = env.provisioner_with(|c| c.repair = RepairSettings::aws(true, false));
    let (claim, node) = initialized_node_with_pods(&env, &prov, "web").await;
    gpu_fault(&env, &node);
    env.clock.advance(Duration::from_secs(10 * 60));
    prov.tick().await.unwrap();
    env.clock.advance(Duration::from_secs(10));
    prov.tick().await.unwrap();
    assert!(
        env.store
            .get_claim(&claim)
            .await
            .unwrap()
            .unwrap()
            .reboot
            .unwrap()
            .issued_at
            .is_some()
    );
    env.clock.advance(Duration::from_secs(19 * 60));
    prov.tick().await.unwrap();
    assert_eq!(
        env.store.get_claim(&claim).await.unwrap().unwrap().state,
        ClaimState::Initialized
    );
    env.clock.advance(Duration::from_secs(60));
    let report = prov.tick().await.unwrap();
    assert_eq!(report.repair.repaired, vec![claim.clone()]);
    let stored = env.store.get_claim(&claim).await.unwrap().unwrap();
    assert_eq!(
        stored.disruption.as_ref().map(|d| (d.cause, d.drain_grace)),
        Some((
            nodewright_core::nodeclaim::DisruptionCause::Unhealthy,
            Some(300)
        )),
        "taken away (its pods were drained before the reboot: it goes at once)"
    );
    assert_eq!(stored.reboot, None);
    assert!(
        env.cluster
            .events()
            .iter()
            .any(|e| e.reason == "RebootFailed" && e.name == node)
    );
}

#[tokio::test]
async fn a_reboot_ec2_refuses_for_the_role_fails_at_once_and_replaces_the_node() {
    let env = Env::new();
    let prov = env.provisioner_with(|c| c.repair = RepairSettings::aws(true, false));
    let (claim, node) = initialized_node_with_pods(&env, &prov, "web").await;
    gpu_fault(&env, &node);
    env.clock.advance(Duration::from_secs(10 * 60));
    prov.tick().await.unwrap();
    env.cloud.fail_next(
        CloudOp::Reboot,
        CloudError::new(ErrorKind::Unauthorized, "UnauthorizedOperation"),
    );
    env.clock.advance(Duration::from_secs(10));
    let report = prov.tick().await.unwrap();
    assert_eq!(report.repair.repaired, vec![claim.clone()]);
    assert!(env.cloud.take_reboots().is_empty());
}

#[tokio::test]
async fn an_instance_failing_its_ec2_status_checks_is_repaired_after_two_minutes() {
    let env = Env::new();
    let prov = env.provisioner();
    let (claim, _node) = initialized_node_with_pods(&env, &prov, "web").await;
    let instance = env
        .store
        .get_claim(&claim)
        .await
        .unwrap()
        .unwrap()
        .instance_id
        .unwrap();
    env.cloud.set_impaired(&instance, &["system"]);
    env.clock.advance(Duration::from_secs(60));
    assert!(prov.tick().await.unwrap().repair.repaired.is_empty());
    // Status checks are read once a minute.
    env.clock.advance(Duration::from_secs(61));
    assert_eq!(prov.tick().await.unwrap().repair.repaired, vec![claim]);
}

#[tokio::test]
async fn node_repair_turned_off_leaves_an_unhealthy_node_alone() {
    use nodewright_core::cluster::ConditionStatus;
    let env = Env::new();
    let mut config = ProvisionerConfig::new("test-cluster", "holder-a");
    config.node_repair = false;
    let prov = Provisioner::new(env.ports.clone(), config);
    let (_claim, node) = initialized_node_with_pods(&env, &prov, "web").await;
    env.cluster
        .set_condition(&node, "Ready", ConditionStatus::False, env.clock.now());
    env.clock.advance(Duration::from_secs(3600));
    let report = prov.tick().await.unwrap();
    assert!(report.repair.repaired.is_empty());
    assert_eq!(env.claims_in(ClaimState::Initialized).len(), 1);
}

#[tokio::test]
async fn a_role_without_describe_instance_status_still_repairs_by_node_conditions() {
    use nodewright_core::cluster::ConditionStatus;
    let env = Env::new();
    let prov = env.provisioner();
    let (claim, node) = initialized_node_with_pods(&env, &prov, "web").await;
    env.cloud.fail_next(
        CloudOp::InstanceStatus,
        CloudError::new(ErrorKind::Unauthorized, "UnauthorizedOperation"),
    );
    env.cluster.set_condition(
        &node,
        "KernelReady",
        ConditionStatus::False,
        env.clock.now(),
    );
    env.clock.advance(Duration::from_secs(30 * 60));
    assert_eq!(prov.tick().await.unwrap().repair.repaired, vec![claim]);
}

#[tokio::test]
async fn a_repair_cut_short_by_a_failure_is_finished_by_the_next_poll() {
    use nodewright_core::cluster::ConditionStatus;
    let env = Env::new();
    // Forceful (the legacy way), so the whole repair fits in two polls.
    let legacy = |c: &mut ProvisionerConfig| c.repair = RepairSettings::legacy();
    let prov = env.provisioner_with(legacy);
    let (claim, node) = initialized_node_with_pods(&env, &prov, "web").await;
    env.cluster
        .set_condition(&node, "Ready", ConditionStatus::False, env.clock.now());
    env.clock.advance(Duration::from_secs(30 * 60));
    // The instance cannot be terminated on this poll (the Lambda could as well have
    // been killed): the claim stays on its way out and the next poll finishes it.
    env.cloud.fail_next(
        CloudOp::Terminate,
        CloudError::new(ErrorKind::Unavailable, "timeout"),
    );
    let report = prov.tick().await.unwrap();
    assert_eq!(report.repair.repaired, vec![claim.clone()]);
    let stored = env.store.get_claim(&claim).await.unwrap().unwrap();
    assert!(stored.state.is_being_taken_away(), "{stored:?}");
    // A fresh provisioner, as after a cold start: the claim's state is enough.
    let next = env.provisioner_with(legacy);
    next.tick().await.unwrap();
    next.tick().await.unwrap();
    let stored = env.store.get_claim(&claim).await.unwrap().unwrap();
    assert_eq!(stored.state, ClaimState::Terminated);
    assert_eq!(
        env.store
            .all_decisions()
            .iter()
            .filter(|d| d.job == "repair")
            .count(),
        1,
        "repaired once"
    );
}

#[tokio::test]
async fn an_invocation_waiting_on_a_dead_holders_lease_takes_it_when_it_expires_not_a_poll_later() {
    let env = Env::new();
    env.add_pods("web", 1);
    let start = env.clock.now();
    // The holder died with 12 s left on its lease.
    env.store
        .acquire_lease(LEASE_NAME, "killed", start - 3, Duration::from_secs(15))
        .await
        .unwrap()
        .unwrap();
    let prov = env.provisioner();
    let run = prov
        .run_for(Duration::from_secs(30), Duration::from_secs(5))
        .await;
    assert!(!run.lease_busy.is_empty(), "it found the lease held");
    let first = env
        .store
        .claims()
        .iter()
        .map(|c| c.created_at)
        .min()
        .expect("a claim written once the lease was free");
    // Polls at 0, 5 and 10 s find it held; it expires at 12 s.
    assert_eq!(first - start, 12, "took the lease when it expired");
}

#[tokio::test]
async fn two_drivers_finishing_one_termination_send_terminate_instances_once() {
    use nodewright_core::nodeclaim::DisruptionCause;
    use nodewright_engine::terminate;
    let env = Env::new();
    let prov = env.provisioner();
    env.add_pods("web", 1);
    let report = prov.tick().await.unwrap();
    let name = report.launched[0].name.clone();
    let instance = report.launched[0].instance_id.clone();
    // Taken away (no node yet: nothing to drain), up to its last step.
    let claim = env.store.get_claim(&name).await.unwrap().unwrap();
    let claim = terminate::disrupt(&env.ports, &claim, DisruptionCause::SpotInterrupted, None)
        .await
        .unwrap();
    let claim = terminate::start_draining(&env.ports, &claim).await.unwrap();
    let claim = terminate::finish_draining(&env.ports, &claim)
        .await
        .unwrap();
    assert_eq!(claim.state, ClaimState::Terminating);

    // The interruption function and the reconciler reach the last step at once.
    let (a, b) = tokio::join!(
        terminate::advance(&env.ports, &claim),
        terminate::advance(&env.ports, &claim)
    );
    assert!(a.is_ok() || b.is_ok(), "{a:?} {b:?}");
    let sent = env
        .cloud
        .calls()
        .into_iter()
        .filter(|c| c.op == CloudOp::Terminate && c.key == instance)
        .count();
    assert_eq!(sent, 1, "TerminateInstances sent once for {instance}");
    // Whoever lost finds it done on its next pass.
    prov.tick().await.unwrap();
    let stored = env.store.get_claim(&name).await.unwrap().unwrap();
    assert_eq!(stored.state, ClaimState::Terminated);
}

#[tokio::test]
async fn a_tick_that_sees_a_claim_interrupted_never_launches_into_its_offering_even_before_the_ice_mark()
 {
    use nodewright_core::api::model::{NodeRequirement, Operator};
    use nodewright_core::nodeclaim::DisruptionCause;
    use nodewright_engine::terminate;
    let env = Env::new();
    let spot = nodewright_core::testing::node_pool(
        "general-purpose",
        vec![
            NodeRequirement {
                key: "node.kubernetes.io/instance-type".into(),
                operator: Operator::In,
                values: vec!["m5.large".into()],
                min_values: None,
            },
            NodeRequirement {
                key: "karpenter.sh/capacity-type".into(),
                operator: Operator::In,
                values: vec!["spot".into()],
                min_values: None,
            },
        ],
    );
    env.cluster.with_state(|s| s.node_pools = vec![spot]);
    let prov = env.provisioner();
    env.add_pods("web", 1);
    let first = prov.tick().await.unwrap();
    let first = &first.launched[0];
    // The spot warning's claim write is seen; its ICE mark is not (yet).
    let claim = env.store.get_claim(&first.name).await.unwrap().unwrap();
    terminate::disrupt(
        &env.ports,
        &claim,
        DisruptionCause::SpotInterrupted,
        Some(env.clock.now() + 120),
    )
    .await
    .unwrap();
    assert!(
        env.store
            .unavailable_offerings(env.clock.now())
            .await
            .unwrap()
            .is_empty()
    );
    // Its pod counts as pending again, with a new one (one pod an m5.large): neither
    // may go into the pool EC2 is reclaiming.
    env.add_pods("again", 1);
    let next = prov.tick().await.unwrap();
    assert_eq!(next.launched.len(), 2, "{next:?}");
    for replacement in &next.launched {
        assert_ne!(
            (&replacement.instance_type, &replacement.zone),
            (&first.instance_type, &first.zone),
            "launched into the offering EC2 is reclaiming"
        );
    }
}

#[tokio::test]
async fn a_forbidden_volume_claim_list_holds_only_the_pods_with_volumes_and_says_which_permission()
{
    let env = Env::new();
    env.cluster.forbid("persistentvolumeclaims");
    env.add_pods("web", 2);
    let mut db = pod("db-0", "1", "2Gi");
    db.claims = vec![nodewright_core::volumes::PodClaim {
        volume: "data".into(),
        claim: "data-db-0".into(),
    }]
    .into();
    env.cluster.add_pod(db);

    let report = env.provisioner().tick().await.unwrap();
    assert_eq!(
        report.launched.iter().map(|l| l.pods).sum::<usize>(),
        2,
        "the pods without volumes get capacity: {report:?}"
    );
    assert_eq!(report.unreadable.len(), 1);
    let held = report
        .not_provisioned
        .iter()
        .find(|n| n.pod == "default/db-0")
        .expect("db-0 held");
    assert!(
        held.reason.contains("persistentvolumeclaims"),
        "{}",
        held.reason
    );
    let event = env
        .cluster
        .events()
        .into_iter()
        .find(|e| e.name == "db-0")
        .expect("an event on the held pod");
    assert_eq!(event.reason, "FailedScheduling");
    assert!(
        event
            .message
            .contains("grant list and watch on persistentvolumeclaims"),
        "{}",
        event.message
    );
}

/// Static NodePools (`spec.replicas`), in a module of their own.
#[path = "provisioner/static_capacity.rs"]
mod static_capacity;

#[path = "provisioner/min_values.rs"]
mod min_values;

#[path = "provisioner/node_overlay.rs"]
mod node_overlay;

#[path = "provisioner/overlay_annotations.rs"]
mod overlay_annotations;

#[path = "provisioner/reservations.rs"]
mod reservations;

#[path = "provisioner/default_spread.rs"]
mod default_spread;

/// The claim cache the provisioner Lambda reads its claims through.
#[path = "provisioner/claim_cache.rs"]
mod claim_cache;
