//! The provisioner Lambda end to end, through its real handler: DynamoDB and EC2 are
//! moto's server (tests/moto.sh), Kubernetes is a real control plane (kube-apiserver,
//! kube-controller-manager, kube-scheduler, KWOK as the kubelets), reached through
//! `NODEWRIGHT_KUBECONFIG` as the functions' own identity. The pending pods are a
//! Deployment's, marked Unschedulable by kube-scheduler.
//!
//! Step by step (a [`ClusterBehaviour`] whose instances register and turn Ready when
//! the test lets them): pending pods → claims in DynamoDB → instances in EC2 with the
//! right tags and types → nodes registered → claims Initialized and the pods bound by
//! kube-scheduler; again → nothing launched; two concurrent invocations → one launch; a
//! crash left half-way → recovered with no leaked and no duplicate instance.
//!
//! Over time (the instances join as they boot; invocations have real deadlines): a
//! scale-out launches the nodes it needs once, and the instances are the live claims
//! after every invocation; a node that becomes Ready between two invocations is used,
//! not launched again; pods run within one poll of their node becoming Ready, not a
//! schedule period later.

use std::collections::HashMap;
use std::sync::Arc;

use aws_sdk_ec2::types::Filter;
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{Value, json};

use nodewright_aws::testing::{REGION, sdk_config};
use nodewright_aws::{AwsContext, DynamoStore};
use nodewright_core::nodeclaim::{ClaimSpec, ClaimState, NodeClaim};
use std::time::{Duration, Instant};

use nodewright_core::catalog::CapacityType;
use nodewright_engine::ports::{ClaimStore, DecisionLog, ErrorKind, StoreError};
use nodewright_engine::{ClaimCache, Ports, Provisioner, ProvisionerConfig};
use nodewright_kube::testing::RecordedRequest;
use nodewright_lambda::{Config, build_ports};
use nodewright_provisioner::{DEADLINE_MARGIN, Handler};
use nodewright_testkit::{
    ClusterBehaviour, EmulatedCluster, GoneBy, Timings, control_plane_options, emulated_cluster,
    emulated_cluster_with, scheduled_event, wait_until, web_deployment,
};

/// How long a test waits for an end state its checks then judge (a repair, pods running
/// again): it only bounds a hang. A machine several times busier than usual (CI runs the
/// suites in lanes beside each other) still gets there.
const SETTLE: Duration = Duration::from_secs(180);

const SCHEDULED_TICK: &str =
    include_str!("../../../shared/core/tests/fixtures/events/scheduled-tick.json");

async fn world(pods: usize) -> EmulatedCluster {
    emulated_cluster("e2e", "on-demand", pods).await
}

/// The Lambda handler as the runtime builds it (real config, real adapters).
async fn handler(world: &EmulatedCluster, holder: &str) -> Handler {
    handler_with(world, &world.config, holder).await
}

/// [`handler`] from `config` (the world's, or one reaching the API server through a
/// fault proxy).
async fn handler_with(world: &EmulatedCluster, config: &Config, holder: &str) -> Handler {
    let (ports, _) = build_ports(config).await.expect("ports");
    let mut settings = ProvisionerConfig::new(world.cluster.clone(), holder);
    settings.node_repair = config.node_repair;
    settings.repair = config.repair.clone();
    Handler {
        provisioner: Provisioner::new(ports, settings),
        poll_interval: config.poll_interval,
    }
}

/// [`handler`] repairing as Karpenter v1.14 did (`LegacyNodeRepair`): forceful, so a
/// repair finishes within a few ticks.
async fn legacy_repair_handler(world: &EmulatedCluster, holder: &str) -> Handler {
    let mut config = world.config.clone();
    config.repair = nodewright_core::repair::RepairSettings::legacy();
    handler_with(world, &config, holder).await
}

/// One scheduled invocation that may keep ticking for `budget` (its deadline is
/// `budget` + the margin the handler keeps; `Duration::ZERO` gives a single tick).
async fn invoke_for(handler: &Handler, budget: Duration) -> Value {
    let event = scheduled_event(budget + DEADLINE_MARGIN);
    handler.handle(event).await.expect("provisioner handler")
}

/// One scheduled invocation; an unknown deadline gives a single tick.
async fn invoke(handler: &Handler) -> Value {
    let event = LambdaEvent::new(
        serde_json::from_str(SCHEDULED_TICK).unwrap(),
        Context::default(),
    );
    handler.handle(event).await.expect("handler")
}

async fn store(world: &EmulatedCluster) -> DynamoStore {
    DynamoStore::new(
        &AwsContext::for_emulator(&world.url, REGION).await,
        world.table.clone(),
    )
}

async fn claims(world: &EmulatedCluster) -> Vec<NodeClaim> {
    store(world).await.list_claims().await.expect("list claims")
}

/// Instances tagged as this cluster's, not terminated: (id, type, zone, tags).
async fn instances(
    world: &EmulatedCluster,
) -> Vec<(String, String, String, HashMap<String, String>)> {
    let ec2 = aws_sdk_ec2::Client::new(&sdk_config(&world.url).await);
    let out = ec2
        .describe_instances()
        .filters(
            Filter::builder()
                .name(format!("tag:kubernetes.io/cluster/{}", world.cluster))
                .values("owned")
                .build(),
        )
        .send()
        .await
        .expect("describe instances");
    out.reservations()
        .iter()
        .flat_map(|r| r.instances())
        .filter(|i| i.state().and_then(|s| s.name()).map(|n| n.as_str()) != Some("terminated"))
        .map(|i| {
            (
                i.instance_id().unwrap_or_default().to_string(),
                i.instance_type()
                    .map(|t| t.as_str().to_string())
                    .unwrap_or_default(),
                i.placement()
                    .and_then(|p| p.availability_zone())
                    .unwrap_or_default()
                    .to_string(),
                i.tags()
                    .iter()
                    .map(|t| {
                        (
                            t.key().unwrap_or_default().to_string(),
                            t.value().unwrap_or_default().to_string(),
                        )
                    })
                    .collect(),
            )
        })
        .collect()
}

/// Waits until `n` instances have registered their nodes (and, with `ready`, the nodes
/// are Ready). Panics after 30 s.
async fn nodes_up(cluster: &ClusterBehaviour, n: usize, ready: bool) {
    let up = wait_until(Duration::from_secs(30), || async {
        let instances = cluster.instances();
        instances.len() == n
            && instances
                .iter()
                .all(|i| i.registered_at.is_some() && (!ready || i.ready_at.is_some()))
    })
    .await;
    assert!(
        up,
        "{n} nodes never came up (ready: {ready}): {:?}; errors {:?}",
        cluster.instances(),
        cluster.errors()
    );
}

/// Invokes single ticks until every claim is Initialized; the claims then. Panics
/// after [`SETTLE`].
async fn until_initialized(world: &EmulatedCluster, h: &Handler) -> Vec<NodeClaim> {
    let initialized = wait_until(SETTLE, || async {
        invoke(h).await;
        let stored = claims(world).await;
        !stored.is_empty() && stored.iter().all(|c| c.state == ClaimState::Initialized)
    })
    .await;
    let stored = claims(world).await;
    assert!(
        initialized,
        "the claims never became Initialized: {stored:#?}"
    );
    stored
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn pending_pods_become_tagged_instances_then_registered_and_initialized_nodes() {
    let world = world(4).await;
    let cluster = ClusterBehaviour::start(&world, Timings::default()).await;
    cluster.hold_registration(true);
    cluster.hold_ready(true);
    let h = handler(&world, "e2e-1").await;

    let first = invoke(&h).await;
    let launched = first["launched"].as_array().unwrap().len();
    // 4 pods × 1.5 cpu on m5.xlarge (3.92 allocatable): two pods per node.
    assert_eq!(launched, 2, "{first}");
    let stored = claims(&world).await;
    assert_eq!(stored.len(), 2);
    assert!(
        stored.iter().all(|c| c.state == ClaimState::Launched),
        "{stored:#?}"
    );
    let running = instances(&world).await;
    assert_eq!(running.len(), 2);
    for (id, instance_type, zone, tags) in &running {
        let claim = stored
            .iter()
            .find(|c| c.instance_id.as_deref() == Some(id.as_str()))
            .expect("instance has a claim");
        assert_eq!(instance_type, "m5.xlarge");
        assert_eq!(claim.zone.as_deref(), Some(zone.as_str()));
        assert_eq!(
            tags.get("karpenter.sh/nodepool").map(String::as_str),
            Some("general-purpose")
        );
        assert_eq!(tags.get("karpenter.sh/nodeclaim"), Some(&claim.name));
        assert_eq!(
            tags.get(&format!("kubernetes.io/cluster/{}", world.cluster))
                .map(String::as_str),
            Some("owned")
        );
    }

    // Again before any node exists: the pods are counted against the in-flight claims.
    let again = invoke(&h).await;
    assert_eq!(again["launched"].as_array().unwrap().len(), 0, "{again}");
    assert_eq!(instances(&world).await.len(), 2);

    // The kubelets register (NotReady): claims become Registered, nodes get labels and
    // lose the unregistered taint.
    cluster.hold_registration(false);
    nodes_up(&cluster, 2, false).await;
    invoke(&h).await;
    let stored = claims(&world).await;
    assert!(
        stored.iter().all(|c| c.state == ClaimState::Registered),
        "{stored:#?}"
    );
    for node in world.api.list("Node").await {
        let labels = &node["metadata"]["labels"];
        assert_eq!(labels["karpenter.sh/registered"], "true", "{node}");
        assert_eq!(labels["karpenter.sh/nodepool"], "general-purpose");
        let taints = node["spec"]["taints"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(
            taints
                .iter()
                .all(|t| t["key"] != "karpenter.sh/unregistered"),
            "{node}"
        );
    }

    // Ready: Initialized; still nothing new launched; kube-scheduler binds the pods.
    cluster.hold_ready(false);
    nodes_up(&cluster, 2, true).await;
    // The node lifecycle controller lifts its not-ready taint from its own watch, a
    // moment after the node turns Ready; a claim is initialized only once it is gone,
    // so a loaded machine may need another tick. None of them launches anything.
    until_initialized(&world, &h).await;
    assert_eq!(instances(&world).await.len(), 2);
    let all_run = wait_until(Duration::from_secs(30), || async {
        cluster.running().len() == 4
    })
    .await;
    assert!(all_run, "{:?}", cluster.placements());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn two_concurrent_invocations_launch_once() {
    let world = world(2).await;
    let (a, b) = (
        handler(&world, "e2e-a").await,
        handler(&world, "e2e-b").await,
    );
    let scheduled = || {
        LambdaEvent::new(
            serde_json::from_str::<Value>(SCHEDULED_TICK).unwrap(),
            Context::default(),
        )
    };
    let (ra, rb) = tokio::join!(a.handle(scheduled()), b.handle(scheduled()));
    // On a loaded machine one CreateFleet in moto can outlast the lease's TTL; the
    // other invocation then takes the lease over and the first ends with its tick
    // failed, having launched. That is the lease doing its job; any other failure
    // is not.
    let mut launched = 0;
    for r in [&ra, &rb] {
        match r {
            Ok(summary) => launched += summary["launched"].as_array().unwrap().len(),
            Err(e) => assert!(
                e.to_string().contains("was lost during the tick"),
                "an invocation failed for another reason than a lost lease: {e}"
            ),
        }
    }
    assert!(launched <= 1, "{ra:?} {rb:?}");
    assert_eq!(instances(&world).await.len(), 1, "{ra:?} {rb:?}");
    assert_eq!(claims(&world).await.len(), 1, "{ra:?} {rb:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn a_crash_after_the_claim_write_is_finished_with_one_instance() {
    let world = world(2).await;
    // A dry run shows what the crashed tick had planned; write that claim as the crash
    // left it: Launching, no instance.
    let h = handler(&world, "e2e-crash").await;
    let mut planning = handler(&world, "e2e-plan").await;
    planning.provisioner = Provisioner::new(planning.provisioner.ports().clone(), {
        let mut c = ProvisionerConfig::new(world.cluster.clone(), "e2e-plan");
        c.dry_run = true;
        c
    });
    let planned = planning.provisioner.tick().await.expect("dry run").planned;
    assert_eq!(planned.len(), 1);
    let p = &planned[0];
    let crashed = NodeClaim::launching(
        ClaimSpec {
            labels: Default::default(),
            name: "general-purpose-crash".into(),
            node_pool: p.node_pool.clone(),
            node_class: "default".into(),
            instance_type_options: p.instance_type_options.clone(),
            zones: p.zones.clone(),
            capacity_types: vec![CapacityType::OnDemand],
            pods: p.pods.clone(),
        },
        0,
    );
    store(&world).await.create_claim(&crashed).await.unwrap();

    invoke(&h).await;
    invoke(&h).await;
    let running = instances(&world).await;
    assert_eq!(
        running.len(),
        1,
        "one instance for the one claim: {running:?}"
    );
    let stored = claims(&world).await;
    assert_eq!(
        stored.len(),
        1,
        "the recovered claim carries the pods; no second claim: {stored:#?}"
    );
    assert_eq!(stored[0].name, "general-purpose-crash");
    assert_eq!(stored[0].state, ClaimState::Launched);
    assert_eq!(
        stored[0].instance_id.as_deref(),
        Some(running[0].0.as_str())
    );
}

/// The real store, except that the first claim update is lost: what a crash between
/// CreateFleet and the claim update leaves behind.
struct LoseFirstUpdate {
    inner: Arc<dyn ClaimStore>,
    lost: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl ClaimStore for LoseFirstUpdate {
    async fn create_claim(&self, c: &NodeClaim) -> Result<(), StoreError> {
        self.inner.create_claim(c).await
    }

    async fn update_claim(&self, c: &NodeClaim, s: ClaimState, v: u64) -> Result<(), StoreError> {
        if !self.lost.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return Err(StoreError::new(
                ErrorKind::Unavailable,
                "the Lambda died before this write",
            ));
        }
        self.inner.update_claim(c, s, v).await
    }

    async fn get_claim(&self, n: &str) -> Result<Option<NodeClaim>, StoreError> {
        self.inner.get_claim(n).await
    }

    async fn list_claims(&self) -> Result<Vec<NodeClaim>, StoreError> {
        self.inner.list_claims().await
    }

    async fn claim_by_instance(&self, i: &str) -> Result<Option<NodeClaim>, StoreError> {
        self.inner.claim_by_instance(i).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn a_crash_after_the_fleet_was_created_adopts_the_instance_instead_of_launching_again() {
    let world = world(2).await;
    let (mut ports, _) = build_ports(&world.config).await.expect("ports");
    ports.claims = Arc::new(LoseFirstUpdate {
        inner: ports.claims.clone(),
        lost: Default::default(),
    });
    let crashing = Handler {
        provisioner: Provisioner::new(
            ports,
            ProvisionerConfig::new(world.cluster.clone(), "e2e-crash"),
        ),
        poll_interval: world.config.poll_interval,
    };
    let event = LambdaEvent::new(
        serde_json::from_str(SCHEDULED_TICK).unwrap(),
        Context::default(),
    );
    assert!(
        crashing.handle(event).await.is_err(),
        "the invocation dies with its write"
    );
    let left = claims(&world).await;
    assert_eq!(left.len(), 1);
    assert_eq!(
        left[0].state,
        ClaimState::Launching,
        "the crash left the claim Launching"
    );
    assert_eq!(
        instances(&world).await.len(),
        1,
        "but the fleet was created"
    );

    let h = handler(&world, "e2e-next").await;
    invoke(&h).await;
    let running = instances(&world).await;
    assert_eq!(running.len(), 1, "adopted, not launched again: {running:?}");
    let adopted = claims(&world).await.remove(0);
    assert_eq!(adopted.state, ClaimState::Launched);
    assert_eq!(adopted.instance_id.as_deref(), Some(running[0].0.as_str()));
}

/// The scale-out of the issue: a Deployment of ten pods of 1 cpu and 1.5 GiB. An
/// m5.xlarge allocates 3920m cpu, so three fit a node and four nodes are needed.
async fn scale_out() -> EmulatedCluster {
    let world = emulated_cluster("scale", "on-demand", 0).await;
    world.deploy(web_deployment("web", 10, "1", "1536Mi")).await;
    world
}

const NODES_NEEDED: usize = 4;

/// What every invocation must leave behind: the instances are exactly those the live
/// claims record (none leaked, none launched behind the store's back, no claim without
/// its instance), and as many as the pods need.
async fn assert_instances_are_the_claims(world: &EmulatedCluster, after: &str) {
    let instances = world.live_instances().await;
    let claims = world.live_claims().await;
    let mut claimed: Vec<String> = claims.iter().filter_map(|(_, i)| i.clone()).collect();
    claimed.sort();
    assert_eq!(
        instances, claimed,
        "after {after}: the instances are not the live claims' ({claims:?})"
    );
    assert_eq!(
        claims.len(),
        instances.len(),
        "after {after}: a live claim has no instance: {claims:?}"
    );
    assert_eq!(
        instances.len(),
        NODES_NEEDED,
        "after {after}: {} instances for pods that need {NODES_NEEDED} nodes: {instances:?}",
        instances.len()
    );
}

/// Everything that happened to the pods and nodes, for a failure message.
fn story(cluster: &ClusterBehaviour) -> String {
    let pending = cluster.pending_pods();
    let nodes: Vec<String> = cluster
        .nodes()
        .iter()
        .map(|n| {
            let taints: Vec<&str> = n["spec"]["taints"]
                .as_array()
                .map(|t| t.iter().filter_map(|t| t["key"].as_str()).collect())
                .unwrap_or_default();
            let ready = n["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["type"] == "Ready")
                .and_then(|c| c["status"].as_str())
                .unwrap_or("");
            format!(
                "{} ready={ready} taints={taints:?}",
                n["metadata"]["name"].as_str().unwrap_or("")
            )
        })
        .collect();
    format!(
        "{} pods pending {pending:?}; nodes {nodes:#?}; behaviour errors {:?}",
        pending.len(),
        cluster.errors()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn a_scale_out_launches_the_nodes_it_needs_once_and_every_pod_runs() {
    let world = scale_out().await;
    let cluster = ClusterBehaviour::start(&world, Timings::default()).await;
    let h = handler(&world, "scale").await;

    // As the schedule runs it: one invocation after another, each with its budget. The
    // nodes register and become Ready a few seconds into the first.
    let budgets = [20, 10, 10].map(Duration::from_secs);
    for (n, budget) in budgets.into_iter().enumerate() {
        let summary = invoke_for(&h, budget).await;
        assert_instances_are_the_claims(&world, &format!("invocation {} ({summary})", n + 1)).await;
    }
    assert!(
        cluster.pending_pods().is_empty(),
        "nodes Ready for half a minute, yet {}",
        story(&cluster)
    );
    let claims = world.claims().await;
    assert!(
        claims.iter().all(|c| c.state == ClaimState::Initialized),
        "{claims:#?}"
    );
    assert_eq!(
        world.unexpected_refusals(),
        Vec::<String>::new(),
        "the API server refused the provisioner's requests"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn a_node_that_became_ready_between_two_invocations_is_used_and_not_launched_again() {
    let world = scale_out().await;
    let cluster = ClusterBehaviour::start(&world, Timings::default()).await;
    let h = handler(&world, "between").await;

    // A single tick launches, then the invocation ends.
    let first = invoke_for(&h, Duration::ZERO).await;
    assert_instances_are_the_claims(&world, &format!("the first invocation ({first})")).await;

    // Before the next one, every node registers and becomes Ready: the next tick sees a
    // Launched claim whose node is already Ready (registration and initialization in
    // one tick — the case of the issue).
    let ready = wait_until(Duration::from_secs(30), || async {
        let instances = cluster.instances();
        instances.len() == NODES_NEEDED && instances.iter().all(|i| i.ready_at.is_some())
    })
    .await;
    assert!(
        ready,
        "the nodes never became Ready: {:?}",
        cluster.instances()
    );

    let second = invoke_for(&h, Duration::ZERO).await;
    assert_instances_are_the_claims(&world, &format!("the second invocation ({second})")).await;
    let running = wait_until(Duration::from_secs(15), || async {
        cluster.pending_pods().is_empty()
    })
    .await;
    assert!(
        running,
        "the nodes are initialized, yet {}",
        story(&cluster)
    );
    let third = invoke_for(&h, Duration::ZERO).await;
    assert_instances_are_the_claims(&world, &format!("the third invocation ({third})")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn pods_run_within_a_poll_of_their_node_becoming_ready_not_a_schedule_period_later() {
    let world = scale_out().await;
    let timings = Timings::default();
    let cluster = ClusterBehaviour::start(&world, timings).await;
    let h = handler(&world, "reaction").await;
    let created = Instant::now();

    // One invocation, well longer than launch + boot + a poll + slack even on a loaded
    // machine: a pod should not need the next invocation.
    let budget = Duration::from_secs(40);
    let summary = invoke_for(&h, budget).await;

    let poll = world.config.poll_interval;
    // Machines are noisy (two cores, moto in Python, a control plane per test, tests
    // in parallel): generous slack, still well short of the next invocation.
    let slack = Duration::from_secs(10);
    let instances = cluster.instances();
    let since = |at: Option<Instant>| {
        at.map(|at| {
            format!(
                "{:.1}s",
                at.saturating_duration_since(created).as_secs_f64()
            )
        })
        .unwrap_or_else(|| "never".into())
    };
    eprintln!(
        "pending → bound, 10 pods on {} m5.xlarge (poll {poll:?}, register after {:?}, boot {:?} + KWOK):",
        instances.len(),
        timings.register_after,
        timings.ready_after
    );
    for i in &instances {
        eprintln!(
            "  {}: launched by {}, registered {}, booted {}, Ready {}, untainted {}",
            i.id,
            since(Some(i.first_seen)),
            since(i.registered_at),
            since(i.booted_at),
            since(i.ready_at),
            since(i.untainted_at)
        );
    }
    // Each pod against the moment the node it runs on was seen Ready and the node
    // lifecycle controller had taken its not-ready taint off (a controller-manager's
    // pace, not nodewright's): nodewright registers and initializes the node within a
    // poll, and kube-scheduler binds at once.
    let ready_of = |node: &str| {
        instances
            .iter()
            .find(|i| i.node.as_deref() == Some(node))
            .and_then(|i| i.untainted_at)
    };
    let mut waits: Vec<(String, String)> = Vec::new();
    let mut late: Vec<String> = Vec::new();
    for pod in cluster.pods() {
        let (Some(bound), Some(node)) = (pod.bound_at, pod.node.as_deref()) else {
            late.push(format!("{}: never bound", pod.key));
            continue;
        };
        let Some(ready) = ready_of(node) else {
            late.push(format!(
                "{}: bound to {node}, never seen Ready and untainted",
                pod.key
            ));
            continue;
        };
        let after = bound.saturating_duration_since(ready);
        waits.push((
            pod.key.clone(),
            format!(
                "pending {:.1}s, bound {:.1}s after its node was Ready and untainted",
                pod.pending_for(Instant::now()).as_secs_f64(),
                after.as_secs_f64()
            ),
        ));
        if after > poll + slack {
            late.push(format!(
                "{}: bound {:.1}s after {node} was Ready and untainted",
                pod.key,
                after.as_secs_f64()
            ));
        }
    }
    waits.sort();
    for (pod, wait) in &waits {
        eprintln!("  {pod}: {wait}");
    }
    assert!(
        late.is_empty(),
        "pods waited longer than a poll ({poll:?}) + slack ({slack:?}) after their node was Ready and untainted, within the {budget:?} invocation ({summary}): {late:#?}; {}",
        story(&cluster)
    );
}

/// LIST requests (GETs of a collection without `watch`) the API server got per path.
fn lists_by_path(requests: &[RecordedRequest]) -> std::collections::BTreeMap<String, usize> {
    let mut out = std::collections::BTreeMap::new();
    for r in requests {
        let collection = r.path.starts_with("/api/v1/")
            && !r.path.contains("/namespaces/")
            && r.path.matches('/').count() == 3
            || r.path.starts_with("/apis/") && r.path.matches('/').count() == 4;
        let watch = r
            .query
            .split('&')
            .any(|p| p == "watch=true" || p == "watch=1");
        if r.method == "GET" && collection && !watch {
            *out.entry(r.path.clone()).or_insert(0) += 1;
        }
    }
    out
}

fn watches(requests: &[RecordedRequest]) -> usize {
    requests.iter().filter(|r| r.watch).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn a_quiet_invocation_lists_each_kind_once_then_watches_and_queries_the_claims_once() {
    let world = scale_out().await;
    let cluster = ClusterBehaviour::start(&world, Timings::default()).await;
    let h = handler(&world, "settle").await;
    for budget in [20, 10].map(Duration::from_secs) {
        invoke_for(&h, budget).await;
    }
    assert!(cluster.pending_pods().is_empty(), "{}", story(&cluster));

    // A new process (a cold start) over the settled cluster, its store counted and its
    // requests to the API server counted by a proxy.
    let (proxy, through_proxy) = world.through_proxy().await;
    let (ports, _) = build_ports(&through_proxy).await.expect("ports");
    let table = Arc::new(store(&world).await);
    let ports = Ports::new(
        ports.cloud,
        ports.cluster,
        table.clone(),
        ports.clock.clone(),
    )
    .with_claims(Arc::new(ClaimCache::new(table.clone(), ports.clock)));
    let quiet = Handler {
        provisioner: Provisioner::new(
            ports,
            ProvisionerConfig::new(world.cluster.clone(), "quiet"),
        ),
        poll_interval: world.config.poll_interval,
    };
    proxy.clear_requests();
    let budget = Duration::from_secs(12);
    let polls = budget.as_secs() / world.config.poll_interval.as_secs();
    let summary = invoke_for(&quiet, budget).await;
    assert_eq!(
        summary["launched"].as_array().map(Vec::len),
        Some(0),
        "{summary}"
    );
    let requests = proxy.requests();
    let cold = lists_by_path(&requests);
    assert!(
        cold.values().all(|&n| n == 1),
        "the cold invocation lists each kind once over {polls} polls: {cold:?}"
    );
    assert!(
        cold.contains_key("/api/v1/pods") && cold.contains_key("/api/v1/nodes"),
        "{cold:?}"
    );
    assert!(
        watches(&requests) >= cold.len(),
        "then it watches every kind it listed"
    );
    let cold_queries = table.queries();
    assert!(
        cold_queries <= 3,
        "claims read once (plus the tick's ICE query), not per poll: {cold_queries} Query requests over {polls} polls"
    );

    // The same process again (a warm invocation): nothing is listed.
    proxy.clear_requests();
    invoke_for(&quiet, budget).await;
    let requests = proxy.requests();
    assert_eq!(
        lists_by_path(&requests),
        Default::default(),
        "a warm invocation lists nothing"
    );
    assert_eq!(
        node_claim_writes(&requests),
        Vec::<String>::new(),
        "a warm quiet invocation writes no NodeClaim"
    );
    let warm_queries = table.queries() - cold_queries;
    assert!(
        warm_queries <= 2,
        "{warm_queries} Query requests in a warm quiet invocation"
    );
}

/// The claim's NodeClaim mirror as the API server stores it.
async fn mirror(world: &EmulatedCluster, name: &str) -> Option<Value> {
    world.api.get("NodeClaim", None, name).await
}

fn mirror_condition(object: &Value, type_: &str) -> String {
    object["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .and_then(|c| c["status"].as_str())
        .unwrap_or("absent")
        .to_string()
}

/// The requests among `requests` that wrote NodeClaims (anything but GET).
fn node_claim_writes(requests: &[RecordedRequest]) -> Vec<String> {
    requests
        .iter()
        .filter(|r| r.path.starts_with("/apis/karpenter.sh/v1/nodeclaims") && r.method != "GET")
        .map(|r| format!("{} {}", r.method, r.path))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn each_claim_is_a_node_claim_in_the_cluster_until_it_is_terminated() {
    let world = world(2).await;
    let cluster = ClusterBehaviour::start(&world, Timings::default()).await;
    cluster.hold_registration(true);
    let (proxy, through_proxy) = world.through_proxy().await;
    let h = handler_with(&world, &through_proxy, "e2e-mirror").await;
    invoke(&h).await;
    let stored = claims(&world).await;
    assert_eq!(stored.len(), 1, "{stored:#?}");
    let name = stored[0].name.clone();
    let launched = mirror(&world, &name)
        .await
        .expect("a launched claim is mirrored");
    assert_eq!(
        mirror_condition(&launched, "Launched"),
        "True",
        "{launched}"
    );
    assert_eq!(mirror_condition(&launched, "Registered"), "Unknown");

    cluster.hold_registration(false);
    let claim = until_initialized(&world, &h).await.remove(0);
    let object = mirror(&world, &name).await.expect("mirrored");
    let labels = &object["metadata"]["labels"];
    assert_eq!(labels["karpenter.sh/nodepool"], "general-purpose");
    assert_eq!(
        labels["node.kubernetes.io/instance-type"],
        claim.instance_type.clone().unwrap().as_str()
    );
    assert_eq!(
        labels["topology.kubernetes.io/zone"],
        claim.zone.clone().unwrap().as_str()
    );
    assert_eq!(labels["karpenter.sh/capacity-type"], "on-demand");
    assert_eq!(labels["app.kubernetes.io/managed-by"], "nodewright");
    assert_eq!(object["spec"]["nodeClassRef"]["group"], "nodewright.dev");
    assert_eq!(
        object["status"]["providerID"],
        claim.provider_id().unwrap().as_str()
    );
    assert_eq!(
        object["status"]["nodeName"],
        claim.node_name.clone().unwrap().as_str()
    );
    for t in ["Launched", "Registered", "Initialized", "Ready"] {
        assert_eq!(mirror_condition(&object, t), "True", "{t}: {object}");
    }
    assert!(
        object["metadata"]["annotations"]["nodewright.dev/price-per-hour"]
            .as_str()
            .is_some_and(|p| p.parse::<f64>().is_ok_and(|p| p > 0.0)),
        "{object}"
    );

    // A quiet invocation writes no NodeClaim.
    proxy.clear_requests();
    invoke(&h).await;
    assert_eq!(
        node_claim_writes(&proxy.requests()),
        Vec::<String>::new(),
        "a quiet invocation wrote NodeClaims"
    );

    // Deleted by someone: written again by the next invocation.
    world.api.remove("NodeClaim", None, &name).await;
    let rewritten = wait_until(Duration::from_secs(10), || async {
        invoke(&h).await;
        mirror(&world, &name).await.is_some()
    })
    .await;
    assert!(rewritten, "the deleted mirror was not written again");

    // Taken away as the disruption job would (the node is empty, its Deployment scaled
    // to nothing): the provisioner drains and terminates it, and the mirror goes with
    // the claim.
    world.scale("web", 0).await;
    let empty = wait_until(Duration::from_secs(30), || async {
        cluster.placements().is_empty()
    })
    .await;
    assert!(empty, "{:?}", cluster.placements());
    let table = store(&world).await;
    let current = table.get_claim(&name).await.unwrap().unwrap();
    let now = current.updated_at + 1;
    let disrupting = current
        .transition(ClaimState::Disrupting, now, |c| {
            c.disruption = Some(nodewright_core::nodeclaim::Disruption {
                cause: nodewright_core::nodeclaim::DisruptionCause::Empty,
                deadline: None,
                since: now,
                drain_after: None,
                drain_grace: None,
                event: None,
                command: None,
            })
        })
        .unwrap();
    table
        .update_claim(&disrupting, ClaimState::Initialized, current.version)
        .await
        .unwrap();
    let terminated = wait_until(Duration::from_secs(30), || async {
        invoke(&h).await;
        table.get_claim(&name).await.unwrap().map(|c| c.state) == Some(ClaimState::Terminated)
    })
    .await;
    assert!(terminated, "{:#?}", table.get_claim(&name).await);
    assert!(
        mirror(&world, &name).await.is_none(),
        "the terminated claim's mirror is gone"
    );
}

use nodewright_core::interruption::format_rfc3339 as rfc3339;

/// The Ready condition of a Node (null when it has none).
fn ready_condition(node: &Value) -> Value {
    node["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready")
        .cloned()
        .unwrap_or_default()
}

/// Waits until the node lifecycle controller has marked `node` unreachable (Ready=Unknown,
/// its kubelet's lease not renewed for the grace period). Panics after [`SETTLE`].
async fn unreachable(world: &EmulatedCluster, node: &str) {
    let unknown = wait_until(SETTLE, || async {
        world
            .api
            .get("Node", None, node)
            .await
            .is_some_and(|n| ready_condition(&n)["status"] == "Unknown")
    })
    .await;
    assert!(
        unknown,
        "the node lifecycle controller never marked {node} unreachable: {:?}",
        world
            .api
            .get("Node", None, node)
            .await
            .map(|n| ready_condition(&n))
    );
}

/// Time passes (the handler reads the wall clock): `node`'s Ready condition took its
/// status `secs` ago.
async fn not_ready_since(world: &EmulatedCluster, node: &str, secs: i64) {
    let since = rfc3339(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64
            - secs,
    );
    world
        .api
        .modify("Node", None, node, |n| {
            for c in n["status"]["conditions"]
                .as_array_mut()
                .into_iter()
                .flatten()
            {
                if c["type"] == "Ready" {
                    c["lastTransitionTime"] = json!(since);
                }
            }
        })
        .await
        .unwrap_or_else(|| panic!("no Node {node}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn a_node_not_ready_for_thirty_minutes_is_repaired_through_the_handler() {
    let world = world(4).await;
    let cluster = ClusterBehaviour::start(&world, Timings::default()).await;
    let h = legacy_repair_handler(&world, "repair").await;
    let stored = until_initialized(&world, &h).await;
    assert_eq!(stored.len(), 2, "{stored:#?}");

    // One kubelet stops: the node lifecycle controller marks its node Ready=Unknown
    // once its lease has not been renewed for the grace period. Then 31 minutes pass
    // (the handler reads the wall clock): the condition's transition is moved back.
    let sick = stored[0].clone();
    let node = sick.node_name.clone().expect("registered node");
    cluster.stop_kubelet(&node).await;
    unreachable(&world, &node).await;
    not_ready_since(&world, &node, 31 * 60).await;
    let repaired = wait_until(SETTLE, || async {
        invoke(&h).await;
        let after = claims(&world).await;
        after
            .iter()
            .any(|c| c.name == sick.name && c.state == ClaimState::Terminated)
            && after.iter().filter(|c| c.state.is_live_capacity()).count() == 2
    })
    .await;

    let after = claims(&world).await;
    assert!(repaired, "{after:#?}");
    let repaired = after.iter().find(|c| c.name == sick.name).unwrap();
    assert_eq!(
        repaired.disruption.as_ref().map(|d| d.cause),
        Some(nodewright_core::nodeclaim::DisruptionCause::Unhealthy)
    );
    let live: Vec<String> = instances(&world).await.into_iter().map(|i| i.0).collect();
    assert!(
        !live.contains(sick.instance_id.as_ref().unwrap()),
        "the unhealthy instance is terminated: {live:?}"
    );
    assert!(
        world.api.get("Node", None, &node).await.is_none(),
        "the node is deleted"
    );
    let decisions = store(&world).await.decisions(0).await.unwrap();
    assert!(
        decisions
            .iter()
            .any(|d| d.job == "repair" && d.reason.contains("Ready=Unknown")),
        "{decisions:#?}"
    );
    assert!(
        world
            .api
            .list("Event")
            .await
            .iter()
            .any(|e| e["reason"] == "Unhealthy" && e["involvedObject"]["name"] == node.as_str()),
        "an Unhealthy event on the node"
    );
    // The other node is untouched; the pods of the repaired one got a new node.
    let other = after.iter().find(|c| c.name == stored[1].name).unwrap();
    assert_eq!(other.state, ClaimState::Initialized);
    let all_run = wait_until(SETTLE, || async {
        invoke(&h).await;
        cluster.running().len() == 4 && cluster.pending_pods().is_empty()
    })
    .await;
    assert!(all_run, "{}", story(&cluster));
}

/// How long a pod tolerates `node.kubernetes.io/unreachable` unless it says otherwise
/// (kube-apiserver's `--default-unreachable-toleration-seconds`, 300 by default):
/// short, so the taint eviction controller acts within the test.
const UNREACHABLE_TOLERATION_SECONDS: u32 = 5;

/// The pods (namespace/name) on `node` now.
fn pods_on(cluster: &ClusterBehaviour, node: &str) -> Vec<String> {
    cluster
        .placements()
        .into_iter()
        .filter(|(_, n, _)| n.as_deref() == Some(node))
        .map(|(pod, _, _)| pod)
        .collect()
}

/// The functions' evictions and deletions of `pods` (namespace/name), as the audit log
/// recorded them.
fn evictions_and_deletions_of(world: &EmulatedCluster, pods: &[String]) -> Vec<String> {
    world
        .nodewright_requests()
        .into_iter()
        .filter(|r| r.resource == "pods")
        .filter(|r| {
            (r.verb == "create" && r.subresource == "eviction")
                || (r.verb == "delete" && r.subresource.is_empty())
        })
        .filter(|r| pods.contains(&format!("{}/{}", r.namespace, r.name)))
        .map(|r| r.describe())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn a_lost_node_emptied_by_the_taint_eviction_controller_is_replaced_once_and_repaired_without_touching_its_pods()
 {
    // What Kubernetes does with a node whose kubelet stopped, and what nodewright does
    // beside it, as Karpenter does:
    // - the node lifecycle controller marks the node unreachable (Ready=Unknown, the
    //   `node.kubernetes.io/unreachable` NoSchedule and NoExecute taints), and the taint
    //   eviction controller deletes its pods once they stop tolerating it; with no
    //   kubelet to confirm, they stay Terminating;
    // - their ReplicaSet's replacements are pending: nothing will schedule onto an
    //   unreachable node, so the provisioner launches capacity for them at once, not
    //   30 minutes later when the node is repaired;
    // - 30 minutes after the node went NotReady, node repair takes it away: its pods
    //   were deleted already, so the drain neither evicts nor deletes them again
    //   (Karpenter's drain waits only for pods not already terminating), nothing is
    //   launched for them a second time, and the instance is terminated once.
    let options = control_plane_options().with_apiserver_arg(format!(
        "--default-unreachable-toleration-seconds={UNREACHABLE_TOLERATION_SECONDS}"
    ));
    let world = emulated_cluster_with("repair-lost", "on-demand", options).await;
    // A long grace period: the pods the taint eviction controller deletes stay
    // Terminating for ten minutes (their kubelet will not confirm), well past the repair.
    let mut web = web_deployment("web", 4, "1500m", "1Gi");
    web["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = json!(600);
    world.deploy(web).await;
    let cluster = ClusterBehaviour::start(&world, Timings::default()).await;
    let h = legacy_repair_handler(&world, "repair-lost").await;
    let stored = until_initialized(&world, &h).await;
    assert_eq!(stored.len(), 2, "{stored:#?}");
    let all_run = wait_until(SETTLE, || async { cluster.running().len() == 4 }).await;
    assert!(all_run, "setup: {}", story(&cluster));

    let sick = stored[0].clone();
    let node = sick.node_name.clone().expect("registered node");
    let on_node = pods_on(&cluster, &node);
    assert_eq!(on_node.len(), 2, "setup: {:?}", cluster.placements());
    cluster.stop_kubelet(&node).await;
    unreachable(&world, &node).await;

    // The taint eviction controller deletes the node's pods: the observer sees them go
    // with their node (their DisruptionTarget condition says so).
    let evicted_by_taint = wait_until(SETTLE, || async {
        let lost = cluster.lost();
        on_node
            .iter()
            .all(|p| lost.contains(&(p.clone(), GoneBy::NodeLost(node.clone()))))
    })
    .await;
    assert!(
        evicted_by_taint,
        "the taint eviction controller did not take the pods off {node}: lost {:?}; {}",
        cluster.lost(),
        story(&cluster)
    );

    // Their replacements run on a node launched for them, well before any repair.
    let replaced = wait_until(SETTLE, || async {
        invoke(&h).await;
        cluster.running().len() == 4 && cluster.pending_pods().is_empty()
    })
    .await;
    let now = claims(&world).await;
    assert!(
        replaced,
        "the replacements of the pods the taint eviction controller deleted never ran: {}; claims {now:#?}",
        story(&cluster)
    );
    assert_eq!(now.len(), 3, "one node launched for the two pods: {now:#?}");
    let sick_now = now.iter().find(|c| c.name == sick.name).unwrap();
    assert_eq!(
        sick_now.state,
        ClaimState::Initialized,
        "not repaired before its 30 minutes: {sick_now:#?}"
    );
    assert!(
        pods_on(&cluster, &node).is_empty(),
        "every pod on {node} is being deleted: {:?}",
        cluster.placements()
    );

    // 30 minutes later: repaired, once.
    not_ready_since(&world, &node, 31 * 60).await;
    let repaired = wait_until(SETTLE, || async {
        invoke(&h).await;
        claims(&world)
            .await
            .iter()
            .any(|c| c.name == sick.name && c.state == ClaimState::Terminated)
    })
    .await;
    let after = claims(&world).await;
    assert!(repaired, "{after:#?}");
    assert_eq!(
        after
            .iter()
            .find(|c| c.name == sick.name)
            .and_then(|c| c.disruption.as_ref())
            .map(|d| d.cause),
        Some(nodewright_core::nodeclaim::DisruptionCause::Unhealthy)
    );
    assert_eq!(
        evictions_and_deletions_of(&world, &on_node),
        Vec::<String>::new(),
        "the pods the taint eviction controller deleted were evicted or deleted again"
    );
    assert!(
        world.api.get("Node", None, &node).await.is_none(),
        "the repaired node is deleted"
    );
    // A few more polls: nothing else is launched, and the instances are the live claims.
    for _ in 0..3 {
        let summary = invoke(&h).await;
        assert_eq!(
            summary["launched"].as_array().map(Vec::len),
            Some(0),
            "{summary}"
        );
    }
    let after = claims(&world).await;
    assert_eq!(
        after.len(),
        3,
        "nothing launched for the repaired node's pods a second time: {after:#?}"
    );
    let live: Vec<String> = instances(&world).await.into_iter().map(|i| i.0).collect();
    let mut claimed: Vec<String> = after
        .iter()
        .filter(|c| !c.state.is_terminal())
        .filter_map(|c| c.instance_id.clone())
        .collect();
    let mut live_sorted = live.clone();
    live_sorted.sort();
    claimed.sort();
    assert_eq!(live_sorted, claimed, "the instances are the live claims'");
    assert_eq!(live.len(), 2, "{live:?}");
    let decisions = store(&world).await.decisions(0).await.unwrap();
    let repairs: Vec<&str> = decisions
        .iter()
        .filter(|d| d.job == "repair")
        .map(|d| d.action.as_str())
        .collect();
    assert_eq!(repairs.len(), 1, "repaired once: {repairs:#?}");
    assert!(
        cluster.running().len() == 4 && cluster.pending_pods().is_empty(),
        "{}",
        story(&cluster)
    );
    assert_eq!(
        world.unexpected_refusals(),
        Vec::<String>::new(),
        "the API server refused the provisioner's requests"
    );
}

/// The `type` condition of a NodePool or EC2NodeClass as the API server holds it.
async fn object_condition(world: &EmulatedCluster, kind: &str, name: &str, type_: &str) -> Value {
    let object = world
        .api
        .get(kind, None, name)
        .await
        .unwrap_or_else(|| panic!("{kind} {name} exists"));
    object["status"]["conditions"]
        .as_array()
        .and_then(|all| all.iter().find(|c| c["type"] == type_).cloned())
        .unwrap_or_else(|| panic!("{kind} {name} has no {type_} condition: {object}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn objects_with_fields_nodewright_ignores_stay_ready_with_a_condition_reason_naming_them() {
    let world = world(0).await;
    let pool = world
        .api
        .modify("NodePool", None, "general-purpose", |pool| {
            pool["spec"]["template"]["spec"]["taints"] = json!([
                {"key": "dedicated", "effect": "NoSchedule", "timeAdded": "2026-01-01T00:00:00Z"}
            ]);
        })
        .await
        .expect("the pool");
    // A field Karpenter's CRD does not have never reaches nodewright: the API server
    // refuses it (strict field validation) or prunes it (any other write).
    let misspelt = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "general-purpose"},
        "spec": {"wieght": 10, "template": pool["spec"]["template"].clone()}
    });
    let refused = world
        .api
        .try_put(misspelt)
        .await
        .expect_err("an unknown field in a NodePool");
    assert!(
        refused.code == 400 && refused.message.contains("wieght"),
        "{refused}"
    );
    world
        .api
        .modify("EC2NodeClass", None, "default", |class| {
            class["spec"]["context"] = json!("reserved");
        })
        .await
        .expect("the class");
    let handler = handler(&world, "holder-fields").await;

    invoke(&handler).await;

    let validation =
        object_condition(&world, "NodePool", "general-purpose", "ValidationSucceeded").await;
    assert_eq!(validation["status"], "True", "{validation}");
    assert_eq!(
        validation["reason"], "UnsupportedFieldsIgnored",
        "{validation}"
    );
    let message = validation["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("spec.template.spec.taints[0].timeAdded: not supported (ignored)"),
        "{message}"
    );
    let ready = object_condition(&world, "NodePool", "general-purpose", "Ready").await;
    assert_eq!(ready["status"], "True", "{ready}");
    let class_validation =
        object_condition(&world, "EC2NodeClass", "default", "ValidationSucceeded").await;
    assert_eq!(class_validation["reason"], "UnsupportedFieldsIgnored");
    assert!(
        class_validation["message"]
            .as_str()
            .is_some_and(|m| m.contains("spec.context: not supported (ignored)")),
        "{class_validation}"
    );
    assert_eq!(
        object_condition(&world, "EC2NodeClass", "default", "Ready").await["status"],
        "True"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn a_forbidden_volume_claim_list_leaves_provisioning_running_for_pods_without_volumes() {
    let world = world(0).await;
    // An RBAC manifest older than the stack: no get/list/watch on PersistentVolumeClaims.
    world.revoke("persistentvolumeclaims").await;
    world.deploy(web_deployment("web", 2, "1", "1536Mi")).await;
    // Its claim does not exist: kube-scheduler marks it Unschedulable too.
    let mut db = web_deployment("db", 1, "1", "1536Mi");
    db["spec"]["template"]["spec"]["volumes"] =
        json!([{"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}}]);
    world.deploy(db).await;
    let h = handler(&world, "rbac").await;

    let summary = invoke(&h).await;
    let stored = claims(&world).await;
    assert_eq!(stored.len(), 1, "{summary}");
    let pods = world.pod_names().await;
    let web: Vec<String> = pods
        .iter()
        .filter(|p| p.starts_with("default/web-"))
        .cloned()
        .collect();
    let db = pods
        .iter()
        .find(|p| p.starts_with("default/db-"))
        .expect("the db pod")
        .trim_start_matches("default/")
        .to_string();
    let mut claimed = stored[0].pods.to_vec();
    claimed.sort();
    assert_eq!(claimed, web, "only the pods without volumes");
    // nodewright's own event (kube-scheduler posts FailedScheduling on it too).
    let event = world
        .api
        .list("Event")
        .await
        .into_iter()
        .find(|e| {
            e["involvedObject"]["name"] == db.as_str() && e["source"]["component"] == "nodewright"
        })
        .expect("an event of nodewright on the held pod");
    assert_eq!(event["reason"], "FailedScheduling", "{event}");
    assert!(
        event["message"]
            .as_str()
            .unwrap()
            .contains("persistentvolumeclaims"),
        "{event}"
    );
}

/// A static NodePool through the handler.
#[path = "e2e/static_capacity.rs"]
mod static_capacity;

#[path = "e2e/capacity_buffer.rs"]
mod capacity_buffer;
