//! The interruption Lambda end to end, through its real handler: SQS, DynamoDB and EC2
//! are moto's server (tests/moto.sh), Kubernetes is a real control plane (KWOK as the
//! kubelets) reached through `NODEWRIGHT_KUBECONFIG` as the functions' own identity.
//! Events are the real fixtures, sent to and received from an SQS queue with a DLQ,
//! then handed to the handler as the Lambda SQS integration would.
//!
//! Two worlds:
//! - step by step (`world`): the instance is launched by the real provisioner handler
//!   for a Deployment's two pods, joins as a node, and kube-scheduler binds the pods
//!   there; the interruption handler reaches the API server through a fault proxy, to
//!   check what one delivery does and what it asks;
//! - over time (`live_world`): a [`ClusterBehaviour`] plays EC2 and the instances
//!   joining, the provisioner runs as its schedule would, and each scenario is checked
//!   where it ends: the interrupted node drained, terminated by nodewright (not
//!   reclaimed by EC2), its claim Terminated, its node deleted, every pod running
//!   elsewhere, no PodDisruptionBudget broken, the instances equal to the live claims
//!   after every invocation, nothing launched twice — also when the node's kubelet hung
//!   and nothing confirms the deletion of its pods.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{Value, json};

use nodewright_aws::testing::{REGION, sdk_config, unique};
use nodewright_aws::{AwsContext, DynamoStore};
use nodewright_core::catalog::CapacityType;
use nodewright_core::interruption::{RebalanceAction, format_rfc3339};
use nodewright_core::nodeclaim::{ClaimState, NodeClaim};
use nodewright_engine::ports::BoxError;
use nodewright_engine::ports::{ClaimStore, OfferingBackoff};
use nodewright_engine::{InterruptionConfig, Provisioner, ProvisionerConfig};
use nodewright_interruption::{Handler, ProvisionerTrigger};
use nodewright_kube::testing::FaultProxy;
use nodewright_lambda::{Config, build_ports};
use nodewright_provisioner::DEADLINE_MARGIN;
use nodewright_testkit::{
    ClusterBehaviour, EmulatedCluster, GoneBy, ProvisionerSchedule, Timings, emulated_cluster,
    lambda_context, scheduled_event, wait_until, web_deployment,
};
use tokio::task::JoinHandle;

const FIXTURES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/core/tests/fixtures/events/"
);
const FIXTURE_INSTANCE: &str = "i-1234567890abcdef0";

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!("{FIXTURES}{name}")).expect("fixture")
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// A fixture about `instance` with a fresh event id and, for a spot warning, sent now
/// (the fixture's own time is in the past: its two-minute deadline would be over).
fn about(fixture_body: &str, instance: &str) -> String {
    about_at(fixture_body, instance, unix_now())
}

/// [`about`], sent at `time` (Unix seconds): a spot warning's deadline is `time` + 2 min.
fn about_at(fixture_body: &str, instance: &str, time: i64) -> String {
    let mut v: Value =
        serde_json::from_str(&fixture_body.replace(FIXTURE_INSTANCE, instance)).unwrap();
    v["id"] = json!(unique("evt"));
    v["time"] = json!(format_rfc3339(time));
    v.to_string()
}

struct World {
    /// The emulated cluster: moto, the control plane, the handlers' config.
    env: EmulatedCluster,
    cluster: ClusterBehaviour,
    /// In front of the API server: the interruption handler's requests go through it.
    proxy: FaultProxy,
    /// The handlers' configuration through the proxy.
    proxied: Config,
    instance: String,
    node: String,
    claim: String,
    /// The Deployment's pods on the node.
    pods: Vec<String>,
}

impl std::ops::Deref for World {
    type Target = EmulatedCluster;
    fn deref(&self) -> &EmulatedCluster {
        &self.env
    }
}

/// The real provisioner handler on `config`.
async fn provisioner_on(
    env: &EmulatedCluster,
    config: &Config,
    holder: &str,
) -> nodewright_provisioner::Handler {
    let (ports, _) = build_ports(config).await.expect("ports");
    nodewright_provisioner::Handler {
        provisioner: Provisioner::new(ports, ProvisionerConfig::new(env.cluster.clone(), holder)),
        poll_interval: config.poll_interval,
    }
}

/// One provisioner tick (an invocation with an unknown deadline).
async fn tick(provisioner: &nodewright_provisioner::Handler) -> Value {
    let event = LambdaEvent::new(json!({}), Context::default());
    provisioner.handle(event).await.expect("provisioner")
}

/// A spot instance launched by the provisioner for the two pods of the Deployment
/// `web`, its node registered and Ready, the pods bound and running on it, a PDB
/// allowing one of them to be disrupted.
async fn world() -> World {
    let env = emulated_cluster("int", "spot", 2).await;
    env.api
        .put(json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}
        }))
        .await;
    let cluster = ClusterBehaviour::start(&env, Timings::default()).await;

    // Launch with the real provisioner handler (one tick each).
    let provisioner = provisioner_on(&env, &env.config, "int-e2e").await;
    let launched = tick(&provisioner).await;
    assert_eq!(
        launched["launched"].as_array().map(Vec::len),
        Some(1),
        "{launched}"
    );
    let claims = env.claims().await;
    let claim = claims[0].clone();
    assert_eq!(claim.capacity_type, Some(CapacityType::Spot));
    let id = claim.instance_id.clone().unwrap();

    // The kubelet registers a Ready node; the provisioner's lifecycle pass adopts it;
    // kube-scheduler binds the pods and KWOK runs them.
    let running = wait_until(Duration::from_secs(60), || async {
        tick(&provisioner).await;
        cluster.running().len() == 2
            && env
                .claims()
                .await
                .iter()
                .all(|c| c.state == ClaimState::Initialized)
    })
    .await;
    let claim = store_of(&env.url, &env.table)
        .await
        .get_claim(&claim.name)
        .await
        .unwrap()
        .unwrap();
    assert!(
        running,
        "setup: the pods never ran: {:?}; {claim:#?}",
        cluster.placements()
    );
    let node = claim.node_name.clone().expect("registered");
    let pods: Vec<String> = cluster
        .placements()
        .into_iter()
        .filter(|(_, n, _)| n.as_deref() == Some(node.as_str()))
        .map(|(p, _, _)| p)
        .collect();
    assert_eq!(pods.len(), 2, "{:?}", cluster.placements());
    let (proxy, proxied) = env.through_proxy().await;
    World {
        env,
        cluster,
        proxy,
        proxied,
        instance: id,
        node,
        claim: claim.name.clone(),
        pods,
    }
}

async fn store_of(url: &str, table: &str) -> DynamoStore {
    DynamoStore::new(
        &AwsContext::for_emulator(url, REGION).await,
        table.to_string(),
    )
}

#[derive(Default)]
struct RecordingTrigger(AtomicUsize);

#[async_trait]
impl ProvisionerTrigger for RecordingTrigger {
    async fn run_now(&self) -> Result<(), BoxError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// The interruption handler, its requests to the API server through the world's proxy.
async fn handler(world: &World, trigger: Arc<RecordingTrigger>) -> Handler {
    interruption_handler(&world.proxied, RebalanceAction::Replace, trigger).await
}

/// The interruption handler as its `main` builds it from `config` (real adapters).
async fn interruption_handler(
    config: &Config,
    rebalance: RebalanceAction,
    trigger: Arc<RecordingTrigger>,
) -> Handler {
    let (ports, _) = build_ports(config).await.expect("ports");
    Handler {
        cluster_name: config.cluster_name.clone(),
        ports,
        config: InterruptionConfig::default(),
        rebalance,
        trigger,
        dry_run: false,
    }
}

/// A queue with a DLQ, as template.yaml declares it (`maxReceiveCount` set by the test).
#[derive(Clone)]
struct Queue {
    sqs: aws_sdk_sqs::Client,
    url: String,
    dlq_url: String,
}

/// A queue whose DLQ takes a message after 2 receives.
async fn queue(world: &World) -> Queue {
    queue_with(&world.url, 2).await
}

/// template.yaml's `maxReceiveCount` for the interruption queue.
fn template_max_receive_count() -> u32 {
    template_queue_setting("maxReceiveCount:")
}

/// template.yaml's number after `key` (one the interruption queue alone declares).
fn template_queue_setting(key: &str) -> u32 {
    let template =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../template.yaml"))
            .expect("template.yaml");
    template
        .lines()
        .find_map(|l| l.trim().strip_prefix(key))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("template.yaml declares no {key}"))
}

async fn queue_with(moto: &str, max_receive_count: u32) -> Queue {
    let sqs = aws_sdk_sqs::Client::new(&sdk_config(moto).await);
    let name = unique("int-q");
    let dlq_url = sqs
        .create_queue()
        .queue_name(format!("{name}-dlq"))
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let dlq_arn = sqs
        .get_queue_attributes()
        .queue_url(&dlq_url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap()[&QueueAttributeName::QueueArn]
        .clone();
    let url = sqs
        .create_queue()
        .queue_name(&name)
        .attributes(
            QueueAttributeName::RedrivePolicy,
            json!({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": max_receive_count.to_string()})
                .to_string(),
        )
        // As the stack's queue: a batch in flight stays invisible for the whole
        // invocation, so a concurrent poll (see `Poller`) never takes it a second time.
        .attributes(
            QueueAttributeName::VisibilityTimeout,
            template_queue_setting("VisibilityTimeout:").to_string(),
        )
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    Queue { sqs, url, dlq_url }
}

impl Queue {
    async fn send(&self, body: &str) {
        self.sqs
            .send_message()
            .queue_url(&self.url)
            .message_body(body)
            .send()
            .await
            .unwrap();
    }

    /// Receives what is visible on `queue_url`, as Lambda's SQS poller would.
    async fn receive_from(&self, queue_url: &str) -> Vec<SqsMessage> {
        let out = self
            .sqs
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(10)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .unwrap();
        out.messages
            .unwrap_or_default()
            .into_iter()
            .map(|m| {
                let mut r = SqsMessage::default();
                r.message_id = m.message_id;
                r.receipt_handle = m.receipt_handle;
                r.body = m.body;
                r.md5_of_body = m.md5_of_body;
                r.attributes = m
                    .attributes
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k.as_str().to_string(), v))
                    .collect();
                r.event_source = Some("aws:sqs".into());
                r
            })
            .collect()
    }

    async fn receive(&self) -> Vec<SqsMessage> {
        self.receive_from(&self.url).await
    }

    /// One invocation of the handler with `batch`, then settled.
    async fn invoke(
        &self,
        h: &Handler,
        batch: Vec<SqsMessage>,
        timeout: Duration,
    ) -> SqsBatchResponse {
        let mut event = SqsEvent::default();
        event.records = batch.clone();
        let response = h
            .handle(LambdaEvent::new(event, lambda_context(timeout)))
            .await
            .expect("interruption handler");
        self.settle(&batch, &response).await;
        response
    }

    /// What Lambda does with the response: delete the successes, make the failures
    /// visible again (at once, instead of after the visibility timeout).
    async fn settle(&self, batch: &[SqsMessage], response: &SqsBatchResponse) {
        for m in batch {
            let failed = response
                .batch_item_failures
                .iter()
                .any(|f| Some(&f.item_identifier) == m.message_id.as_ref());
            let handle = m.receipt_handle.clone().unwrap();
            if failed {
                self.sqs
                    .change_message_visibility()
                    .queue_url(&self.url)
                    .receipt_handle(handle)
                    .visibility_timeout(0)
                    .send()
                    .await
                    .unwrap();
            } else {
                self.sqs
                    .delete_message()
                    .queue_url(&self.url)
                    .receipt_handle(handle)
                    .send()
                    .await
                    .unwrap();
            }
        }
    }
}

async fn invoke(h: &Handler, records: Vec<SqsMessage>) -> SqsBatchResponse {
    let mut event = SqsEvent::default();
    event.records = records;
    h.handle(LambdaEvent::new(event, Context::default()))
        .await
        .expect("handler")
}

/// Requests through the proxy that change something in the cluster: patches, deletes,
/// evictions.
fn mutations(proxy: &FaultProxy) -> Vec<String> {
    proxy
        .requests()
        .into_iter()
        .filter(|r| matches!(r.method.as_str(), "PATCH" | "DELETE" | "POST" | "PUT"))
        .map(|r| format!("{} {}", r.method, r.path))
        .collect()
}

async fn instance_state(world: &World) -> String {
    let ec2 = aws_sdk_ec2::Client::new(&sdk_config(&world.url).await);
    let out = ec2
        .describe_instances()
        .instance_ids(&world.instance)
        .send()
        .await
        .unwrap();
    out.reservations()[0].instances()[0]
        .state()
        .unwrap()
        .name()
        .unwrap()
        .as_str()
        .to_string()
}

async fn claim(world: &World) -> NodeClaim {
    store_of(&world.url, &world.table)
        .await
        .get_claim(&world.claim)
        .await
        .unwrap()
        .unwrap()
}

fn bodies(batch: &[SqsMessage]) -> Vec<&str> {
    batch
        .iter()
        .map(|m| m.body.as_deref().unwrap_or(""))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn a_spot_warning_drains_within_the_budget_terminates_the_instance_and_wakes_the_provisioner_once()
 {
    let world = world().await;
    let trigger = Arc::new(RecordingTrigger::default());
    let h = handler(&world, trigger.clone()).await;
    let q = queue(&world).await;

    // A forged warning (the fixture, unchanged: not our instance) and a malformed body.
    q.send(&fixture("spot-interruption.json")).await;
    q.send("{\"detail-type\": \"EC2 Spot Instance Interruption Warning\", ")
        .await;
    let batch = q.receive().await;
    assert_eq!(batch.len(), 2);
    world.proxy.clear_requests();
    let response = invoke(&h, batch.clone()).await;
    assert!(
        response.batch_item_failures.is_empty(),
        "both acknowledged: {response:?}"
    );
    q.settle(&batch, &response).await;
    assert_eq!(
        mutations(&world.proxy),
        Vec::<String>::new(),
        "nothing touched for a forged event"
    );
    assert_eq!(instance_state(&world).await, "running");
    assert_eq!(claim(&world).await.state, ClaimState::Initialized);
    assert_eq!(trigger.0.load(Ordering::SeqCst), 0);

    // The real warning for our instance.
    let warning = about(&fixture("spot-interruption.json"), &world.instance);
    q.send(&warning).await;
    let batch = q.receive().await;
    let response = invoke(&h, batch.clone()).await;
    assert!(response.batch_item_failures.is_empty(), "{response:?}");
    q.settle(&batch, &response).await;

    let store = store_of(&world.url, &world.table).await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let unavailable = store.unavailable_offerings(now).await.unwrap();
    let c = claim(&world).await;
    assert_eq!(
        unavailable,
        vec![(
            c.instance_type.clone().unwrap(),
            c.zone.clone().unwrap(),
            CapacityType::Spot
        )],
        "the interrupted offering is out of launches"
    );
    let node = world
        .api
        .get("Node", None, &world.node)
        .await
        .expect("node still there while pods are kept");
    let taints = node["spec"]["taints"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        taints.iter().any(|t| t["key"] == "karpenter.sh/disrupted"),
        "{node}"
    );
    // The budget (minAvailable 1) let one pod go and kept the other; the Deployment
    // replaced the one that went, pending (its node is cordoned, there is no other).
    let lives = world.cluster.pods();
    let evicted: Vec<&String> = lives
        .iter()
        .filter(|p| {
            world.pods.contains(&p.key)
                && p.gone.as_ref().map(|(_, by)| by) == Some(&GoneBy::Evicted)
        })
        .map(|p| &p.key)
        .collect();
    assert_eq!(evicted.len(), 1, "one pod evicted: {lives:#?}");
    let kept: Vec<String> = world
        .cluster
        .placements()
        .into_iter()
        .filter(|(_, node, _)| node.as_deref() == Some(world.node.as_str()))
        .map(|(pod, _, _)| pod)
        .collect();
    assert_eq!(kept.len(), 1, "one pod kept by the PDB: {kept:?}");
    assert_eq!(c.state, ClaimState::Draining, "{c:#?}");
    assert_eq!(
        instance_state(&world).await,
        "running",
        "not terminated while a pod is kept"
    );
    assert_eq!(
        trigger.0.load(Ordering::SeqCst),
        1,
        "the provisioner was woken once"
    );

    // The same event delivered again: nothing more.
    world.proxy.clear_requests();
    q.send(&warning).await;
    let batch = q.receive().await;
    let response = invoke(&h, batch.clone()).await;
    assert!(response.batch_item_failures.is_empty());
    q.settle(&batch, &response).await;
    assert_eq!(
        mutations(&world.proxy),
        Vec::<String>::new(),
        "a duplicate does nothing"
    );
    assert_eq!(trigger.0.load(Ordering::SeqCst), 1);

    // A node nodewright does not manage (a managed node group's) joins: the evicted
    // pod's replacement runs there, the budget lets the last one go, and the next step
    // of the termination machine finishes the drain.
    world
        .api
        .put(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "elsewhere", "labels": {"kubernetes.io/hostname": "elsewhere"},
                "annotations": {"kwok.x-k8s.io/node": "fake"}},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"}}
        }))
        .await;
    let replaced = wait_until(Duration::from_secs(30), || async {
        world
            .cluster
            .placements()
            .iter()
            .any(|(_, node, phase)| node.as_deref() == Some("elsewhere") && phase == "Running")
            && world.cluster.running().len() == 2
    })
    .await;
    assert!(replaced, "{:?}", world.cluster.placements());
    let (ports, _) = build_ports(&world.config).await.unwrap();
    let drained = wait_until(Duration::from_secs(20), || async {
        let progress = nodewright_engine::terminate::drive(&ports, &claim(&world).await)
            .await
            .expect("drive");
        progress.claim.state == ClaimState::Terminated
    })
    .await;
    let c = claim(&world).await;
    assert!(drained, "{c:#?}");
    assert!(matches!(
        instance_state(&world).await.as_str(),
        "shutting-down" | "terminated"
    ));
    assert!(
        world.api.get("Node", None, &world.node).await.is_none(),
        "the node is deleted"
    );
    let moved = wait_until(Duration::from_secs(30), || async {
        let placements = world.cluster.placements();
        placements.len() == 2
            && placements
                .iter()
                .all(|(_, node, phase)| node.as_deref() == Some("elsewhere") && phase == "Running")
    })
    .await;
    assert!(
        moved,
        "both replicas run elsewhere: {:?}",
        world.cluster.placements()
    );
    let evicted = world
        .cluster
        .pods()
        .into_iter()
        .filter(|p| world.pods.contains(&p.key))
        .filter(|p| p.gone.as_ref().map(|(_, by)| by) == Some(&GoneBy::Evicted))
        .count();
    assert_eq!(evicted, 2, "both were evicted, none deleted");
    assert_eq!(world.cluster.violations(), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn a_retryable_failure_is_retried_alone_and_lands_in_the_dlq_after_max_receives() {
    let world = world().await;
    let trigger = Arc::new(RecordingTrigger::default());
    let h = handler(&world, trigger.clone()).await;
    let q = queue(&world).await;

    let rebalance = about(&fixture("rebalance-recommendation.json"), &world.instance);
    q.send(&rebalance).await;
    q.send(&fixture("health-scheduled-change.json")).await; // not our instance
    q.send("not json").await;
    let node_path = format!("/api/v1/nodes/{}", world.node);

    // Receive 1: the node API answers 500 to the cordon.
    world.proxy.fail_next("*", &node_path, 500);
    let batch = q.receive().await;
    assert_eq!(batch.len(), 3);
    let response = invoke(&h, batch.clone()).await;
    let failed: Vec<&str> = response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect();
    let rebalance_id = batch
        .iter()
        .find(|m| m.body.as_deref() == Some(rebalance.as_str()))
        .unwrap()
        .message_id
        .clone()
        .unwrap();
    assert_eq!(
        failed,
        vec![rebalance_id.as_str()],
        "only the failed message is retried: {:?}",
        bodies(&batch)
    );
    q.settle(&batch, &response).await;

    // Receive 2: it fails again.
    world.proxy.fail_next("*", &node_path, 500);
    let batch = q.receive().await;
    assert_eq!(
        bodies(&batch),
        vec![rebalance.as_str()],
        "the others were deleted"
    );
    let response = invoke(&h, batch.clone()).await;
    assert_eq!(response.batch_item_failures.len(), 1);
    q.settle(&batch, &response).await;

    // maxReceiveCount (2) reached: the next receive moves it to the DLQ.
    let batch = q.receive().await;
    assert!(batch.is_empty(), "{:?}", bodies(&batch));
    let dead = q.receive_from(&q.dlq_url).await;
    assert_eq!(bodies(&dead), vec![rebalance.as_str()]);

    // Nothing was taken away: no instance touched, and the claim is at most marked
    // Disrupting (an engine that cordons before writing the claim leaves it Initialized
    // when the cordon fails).
    assert_eq!(instance_state(&world).await, "running");
    let state = claim(&world).await.state;
    assert!(
        matches!(state, ClaimState::Initialized | ClaimState::Disrupting),
        "{state:?}"
    );
    assert_eq!(trigger.0.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn in_a_dry_run_a_spot_warning_for_our_instance_is_acknowledged_and_nothing_is_touched() {
    let world = world().await;
    let trigger = Arc::new(RecordingTrigger::default());
    let mut h = handler(&world, trigger.clone()).await;
    h.dry_run = true;
    let queue = queue(&world).await;
    queue
        .send(&about(&fixture("spot-interruption.json"), &world.instance))
        .await;
    let batch = queue.receive().await;
    assert_eq!(batch.len(), 1);
    world.proxy.clear_requests();

    let response = invoke(&h, batch).await;
    assert!(response.batch_item_failures.is_empty(), "acknowledged");
    assert!(
        mutations(&world.proxy).is_empty(),
        "{:?}",
        mutations(&world.proxy)
    );
    assert_eq!(instance_state(&world).await, "running");
    assert!(matches!(
        claim(&world).await.state,
        ClaimState::Initialized | ClaimState::Registered
    ));
    assert_eq!(trigger.0.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn a_spot_warning_and_a_state_change_in_one_batch_lead_to_one_drain() {
    let world = world().await;
    let trigger = Arc::new(RecordingTrigger::default());
    let h = handler(&world, trigger.clone()).await;
    let queue = queue(&world).await;
    queue
        .send(&about(&fixture("spot-interruption.json"), &world.instance))
        .await;
    queue
        .send(&about(
            &fixture("state-change-terminated.json"),
            &world.instance,
        ))
        .await;
    let mut batch = queue.receive().await;
    if batch.len() < 2 {
        batch.extend(queue.receive().await);
    }
    assert_eq!(batch.len(), 2, "both events in one batch");
    world.proxy.clear_requests();

    let response = invoke(&h, batch).await;
    assert!(
        response.batch_item_failures.is_empty(),
        "{:?}",
        response.batch_item_failures
    );
    // The records run concurrently; the conditional write to Disrupting lets one of
    // them start the drain, and the other escalates it (the instance is gone): pods the
    // budget still protects are then deleted instead of evicted. Both may act, but on
    // each pod at most once.
    let mutations = mutations(&world.proxy);
    // Each pod goes once, evicted or deleted. (The node may be deleted by both records,
    // the drain's termination and the state change's clean-up: the second DELETE finds
    // nothing.)
    let mut pods_removed: Vec<String> = world
        .proxy
        .requests()
        .into_iter()
        .filter(|r| r.status < 300 && matches!(r.method.as_str(), "DELETE" | "POST"))
        .filter(|r| r.path.contains("/pods/"))
        .map(|r| r.path.trim_end_matches("/eviction").to_string())
        .collect();
    pods_removed.sort();
    let total = pods_removed.len();
    pods_removed.dedup();
    assert_eq!(
        total,
        pods_removed.len(),
        "a pod went twice: {mutations:#?}"
    );
    let claim = claim(&world).await;
    assert!(claim.disruption.is_some(), "{claim:#?}");
    assert!(
        matches!(
            claim.state,
            ClaimState::Disrupting
                | ClaimState::Draining
                | ClaimState::Terminating
                | ClaimState::Terminated
        ),
        "{claim:#?}"
    );
    assert!(
        trigger.0.load(Ordering::SeqCst) <= 1,
        "the provisioner is woken at most once per batch"
    );
}

// Over time: a cluster that behaves like one, the provisioner on its schedule, the
// interruption function fed by SQS. Each scenario is checked where it ends.

/// The interruption function's timeout (template.yaml).
const FUNCTION_TIMEOUT: Duration = Duration::from_secs(60);
/// Each scheduled provisioner invocation's budget (shortened from 55 s, so several run).
const SCHEDULE_BUDGET: Duration = Duration::from_secs(15);

/// The provisioner's handler as its `main` builds it (real config, real adapters).
async fn provisioner(env: &EmulatedCluster, holder: &str) -> nodewright_provisioner::Handler {
    provisioner_on(env, &env.config, holder).await
}

/// One scheduled provisioner invocation that may keep ticking for `budget` (its
/// deadline is `budget` + the margin the handler keeps; `Duration::ZERO` gives a
/// single tick).
async fn invoke_for(handler: &nodewright_provisioner::Handler, budget: Duration) -> Value {
    let event = scheduled_event(budget + DEADLINE_MARGIN);
    handler.handle(event).await.expect("provisioner handler")
}

/// The provisioner invoked back to back in the background, each invocation with
/// `budget` (as the one-minute schedule does with 55 s), until dropped.
async fn provisioner_schedule(
    env: &EmulatedCluster,
    holder: &str,
    budget: Duration,
) -> ProvisionerSchedule {
    let handler = Arc::new(provisioner(env, holder).await);
    ProvisionerSchedule::start(env, move || {
        let handler = handler.clone();
        async move {
            let event = scheduled_event(budget + DEADLINE_MARGIN);
            handler.handle(event).await.map_err(|e| e.to_string())
        }
    })
}

/// The Deployment `web`: two pods of 1.5 cpu (two fit an m5.xlarge) with 5 s of
/// termination grace, so a drain nearing its deadline deletes pods only in its last
/// 5 s.
fn web() -> Value {
    let mut deployment = web_deployment("web", 2, "1500m", "1Gi");
    deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = json!(5);
    deployment
}

/// A budget keeping at least `min` web pods available.
fn budget(min: i64) -> Value {
    json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"minAvailable": min, "selector": {"matchLabels": {"app": "web"}}}
    })
}

/// A node registers 1 s after its instance appears and its kubelet hands it to KWOK
/// 2 s later.
fn timings() -> Timings {
    Timings {
        register_after: Duration::from_secs(1),
        ready_after: Duration::from_secs(2),
        ..Timings::default()
    }
}

/// How long a scenario may take to reach its end state. A working engine needs ~20 s
/// here (a replacement launched and booted, evictions retried), more when the machine
/// is busy (moto is one Python process for every test, and each test runs a control
/// plane); a passing test stops waiting as soon as it settles, so only a stuck engine
/// pays for the margin.
const SETTLE: Duration = Duration::from_secs(180);

struct Live {
    env: EmulatedCluster,
    cluster: ClusterBehaviour,
    /// The node the pods run on, its instance and its claim: what the events are about.
    instance: String,
    node: String,
    claim: String,
    /// The claims that existed before the scenario's first event.
    before: Vec<String>,
    /// The web Deployment's replicas.
    replicas: usize,
    /// When the setup ended.
    started: Instant,
    /// In front of the API server: the interruption handler's requests go through it.
    proxy: FaultProxy,
    proxied: Config,
}

impl std::ops::Deref for Live {
    type Target = EmulatedCluster;
    fn deref(&self) -> &EmulatedCluster {
        &self.env
    }
}

/// Two web pods running on one spot node that the provisioner launched, its claim
/// Initialized, with the cluster behaving, and `pdb` if given.
///
/// The provisioner is invoked a tick at a time, and the node is held NotReady until a
/// tick has registered it: registration and initialization in one tick is the case
/// where today's provisioner launches a second node (its own tests cover that), and
/// these scenarios need to start from one node.
async fn live_world(prefix: &str, pdb: Option<Value>) -> Live {
    live_world_with(prefix, web(), pdb).await
}

/// [`live_world`] with the Deployment `web` as given (its pods fit one m5.xlarge).
async fn live_world_with(prefix: &str, web: Value, pdb: Option<Value>) -> Live {
    let replicas = web["spec"]["replicas"].as_u64().expect("replicas") as usize;
    let env = emulated_cluster(prefix, "spot", 0).await;
    env.deploy(web).await;
    if let Some(pdb) = pdb {
        env.api.put(pdb).await;
    }
    let started = Instant::now();
    let cluster = ClusterBehaviour::start(&env, timings()).await;
    cluster.hold_ready(true);
    let provisioner = provisioner(&env, &format!("{prefix}-setup")).await;
    let launched = invoke_for(&provisioner, Duration::ZERO).await;
    assert_eq!(
        launched["launched"].as_array().map(Vec::len),
        Some(1),
        "setup: {launched}"
    );
    // Setup deadlines only bound a hang: a machine several times busier than usual
    // still gets there.
    let registered = wait_until(Duration::from_secs(90), || async {
        let instances = cluster.instances();
        !instances.is_empty() && instances.iter().all(|i| i.registered_at.is_some())
    })
    .await;
    assert!(registered, "setup: {:?}", cluster.instances());
    invoke_for(&provisioner, Duration::ZERO).await;
    cluster.hold_ready(false);
    let settled = wait_until(Duration::from_secs(180), || async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        invoke_for(&provisioner, Duration::ZERO).await;
        cluster.pending_pods().is_empty()
            && cluster.running().len() == replicas
            && env
                .claims()
                .await
                .iter()
                .all(|c| c.state == ClaimState::Initialized)
    })
    .await;
    let claims = env.claims().await;
    assert!(
        settled,
        "setup: the pods never ran on initialized nodes: {:?} {claims:#?}",
        cluster.placements()
    );
    assert_eq!(claims.len(), 1, "setup: one node for the pods: {claims:#?}");
    eprintln!(
        "{prefix}: setup took {:.1}s",
        started.elapsed().as_secs_f64()
    );
    let mut pods_per_node: BTreeMap<String, usize> = BTreeMap::new();
    for (_, node, _) in cluster.placements() {
        *pods_per_node.entry(node.expect("bound")).or_default() += 1;
    }
    let node = pods_per_node
        .into_iter()
        .max_by_key(|(_, n)| *n)
        .map(|(node, _)| node)
        .expect("a node with pods");
    let instance = cluster
        .instances()
        .into_iter()
        .find(|i| i.node.as_deref() == Some(node.as_str()))
        .expect("the node's instance")
        .id;
    let claim = claims
        .iter()
        .find(|c| c.instance_id.as_deref() == Some(instance.as_str()))
        .expect("the instance's claim")
        .name
        .clone();
    let (proxy, proxied) = env.through_proxy().await;
    Live {
        before: claims.iter().map(|c| c.name.clone()).collect(),
        replicas,
        env,
        cluster,
        instance,
        node,
        claim,
        started: Instant::now(),
        proxy,
        proxied,
    }
}

impl Live {
    async fn claim(&self) -> NodeClaim {
        self.store()
            .await
            .get_claim(&self.claim)
            .await
            .unwrap()
            .expect("the claim")
    }

    async fn handler(&self, rebalance: RebalanceAction) -> Arc<Handler> {
        let trigger = Arc::new(RecordingTrigger::default());
        Arc::new(interruption_handler(&self.proxied, rebalance, trigger).await)
    }

    async fn queue(&self, max_receive_count: u32) -> Queue {
        queue_with(&self.url, max_receive_count).await
    }

    /// Every replica runs on a node that exists and is not the interrupted one; none
    /// pending.
    fn running_elsewhere(&self) -> Result<(), String> {
        let nodes: Vec<String> = self
            .cluster
            .nodes()
            .iter()
            .filter_map(|n| n["metadata"]["name"].as_str().map(str::to_string))
            .collect();
        let placements = self.cluster.placements();
        let ok = placements.len() == self.replicas
            && placements.iter().all(|(_, node, phase)| {
                node.as_ref()
                    .is_some_and(|n| *n != self.node && nodes.contains(n))
                    && phase == "Running"
            });
        if ok {
            Ok(())
        } else {
            Err(format!(
                "not every pod runs on another node: {placements:?} (nodes {nodes:?}, interrupted {})",
                self.node
            ))
        }
    }

    /// Waits until the claim is Terminated, its node deleted and every pod runs
    /// elsewhere; false after [`SETTLE`]. Prints how long it took.
    async fn settled(&self) -> bool {
        self.settled_within(SETTLE).await
    }

    /// [`Live::settled`], waiting up to `timeout`.
    async fn settled_within(&self, timeout: Duration) -> bool {
        let started = Instant::now();
        let settled = wait_until(timeout, || async {
            self.claim().await.state == ClaimState::Terminated
                && self.api.get("Node", None, &self.node).await.is_none()
                && self.running_elsewhere().is_ok()
        })
        .await;
        let now = Instant::now();
        let waits: Vec<String> = self
            .cluster
            .pods()
            .iter()
            .filter(|p| p.first_seen >= self.started)
            .map(|p| format!("{} {:.1}s", p.key, p.pending_for(now).as_secs_f64()))
            .collect();
        eprintln!(
            "{}: {} after {:.1}s; pods created since the setup, pending for: {waits:?}",
            self.cluster_name(),
            if settled { "settled" } else { "not settled" },
            started.elapsed().as_secs_f64(),
        );
        settled
    }

    fn cluster_name(&self) -> &str {
        &self.env.cluster
    }

    /// The claims made since the scenario began.
    async fn new_claims(&self) -> Vec<NodeClaim> {
        self.claims()
            .await
            .into_iter()
            .filter(|c| !self.before.contains(&c.name))
            .collect()
    }

    /// The end state of every scenario: the interrupted node taken away by nodewright
    /// and its pods running elsewhere; at most `replacements` claims launched for them;
    /// the instances equal to the live claims now, and never one without a live claim
    /// after any provisioner invocation.
    async fn assert_taken_away(&self, schedule: &ProvisionerSchedule, replacements: usize) {
        let claim = self.claim().await;
        assert_eq!(
            claim.state,
            ClaimState::Terminated,
            "the interrupted claim is still {:?} after {SETTLE:?}: {}; pods {:?}",
            claim.state,
            brief(&claim),
            self.cluster.placements()
        );
        let instances = self.live_instances().await;
        assert!(
            !self.cluster.killed().contains(&self.instance),
            "EC2 reclaimed {} at its deadline: nodewright never terminated it",
            self.instance
        );
        assert!(
            !instances.contains(&self.instance),
            "the interrupted instance {} still runs: {instances:?}",
            self.instance
        );
        assert!(
            self.api.get("Node", None, &self.node).await.is_none(),
            "the interrupted node {} is still there",
            self.node
        );
        assert_eq!(
            self.cluster.deleted_by_cloud(),
            Vec::<String>::new(),
            "nodewright deleted the node it took away, not the cloud controller"
        );
        assert_eq!(
            self.unexpected_refusals(),
            Vec::<String>::new(),
            "the API server refused the functions' requests"
        );
        if let Err(e) = self.running_elsewhere() {
            panic!("{e}");
        }
        let claims = self.live_claims().await;
        let mut claimed: Vec<String> = claims.iter().filter_map(|(_, i)| i.clone()).collect();
        claimed.sort();
        assert_eq!(
            instances, claimed,
            "the instances are not the live claims' ({claims:?})"
        );
        for (n, invocation) in schedule.invocations().iter().enumerate() {
            assert!(
                invocation.unclaimed().is_empty(),
                "after provisioner invocation {}: instances without a live claim {:?} (claims {:?})",
                n + 1,
                invocation.unclaimed(),
                invocation.claims
            );
        }
        let new = self.new_claims().await;
        assert!(
            new.len() <= replacements,
            "{} claims launched for pods that fit {replacements} node(s): {:#?}",
            new.len(),
            briefs(&new)
        );
    }
}

/// A claim in one line: name, state, instance, node, disruption.
fn brief(c: &NodeClaim) -> String {
    format!(
        "{} {:?} instance={} node={} disruption={:?}",
        c.name,
        c.state,
        c.instance_id.as_deref().unwrap_or("-"),
        c.node_name.as_deref().unwrap_or("-"),
        c.disruption
    )
}

fn briefs(claims: &[NodeClaim]) -> Vec<String> {
    claims.iter().map(brief).collect()
}

/// Lambda's SQS integration in the background: delivers every visible batch to the
/// handler (with the function's timeout) and settles it, until dropped. As Lambda does
/// for a function without reserved concurrency (the interruption function's), a batch
/// that arrives while an invocation is still draining gets an invocation of its own: a
/// spot warning is never queued behind a rebalance's drain.
struct Poller {
    responses: Arc<Mutex<Vec<SqsBatchResponse>>>,
    task: JoinHandle<()>,
}

impl Poller {
    fn start(queue: &Queue, handler: &Arc<Handler>) -> Poller {
        let (queue, handler) = (queue.clone(), handler.clone());
        let responses: Arc<Mutex<Vec<SqsBatchResponse>>> = Arc::default();
        let log = responses.clone();
        let task = tokio::spawn(async move {
            // Invocations in flight: dropped (aborted) with the poller.
            let mut invocations = tokio::task::JoinSet::new();
            loop {
                while invocations.try_join_next().is_some() {}
                let batch = queue.receive().await;
                if batch.is_empty() {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    continue;
                }
                let (queue, handler, log) = (queue.clone(), handler.clone(), log.clone());
                invocations.spawn(async move {
                    let response = queue.invoke(&handler, batch, FUNCTION_TIMEOUT).await;
                    log.lock().unwrap().push(response);
                });
            }
        });
        Poller { responses, task }
    }

    fn responses(&self) -> Vec<SqsBatchResponse> {
        self.responses.lock().unwrap().clone()
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn a_spot_warning_drains_the_node_to_the_end_and_nodewright_terminates_it_before_ec2_does() {
    // minAvailable 1 of 2: the second eviction is refused until the first pod's
    // replacement runs on a new node.
    let live = live_world("int-spot", Some(budget(1))).await;
    let schedule = provisioner_schedule(&live, "schedule", SCHEDULE_BUDGET).await;
    let q = live.queue(template_max_receive_count()).await;
    let h = live.handler(RebalanceAction::Replace).await;

    let warned = unix_now();
    live.cluster
        .kill_at(&live.instance, Instant::now() + Duration::from_secs(120));
    q.send(&about_at(
        &fixture("spot-interruption.json"),
        &live.instance,
        warned,
    ))
    .await;
    let poller = Poller::start(&q, &h);

    live.settled().await;
    assert_eq!(
        live.cluster.violations(),
        Vec::<String>::new(),
        "a PodDisruptionBudget was broken"
    );
    live.assert_taken_away(&schedule, 1).await;
    assert!(
        poller
            .responses()
            .iter()
            .all(|r| r.batch_item_failures.is_empty()),
        "{:?}",
        poller.responses()
    );
}

/// The web budget's status as the disruption controller (kube-controller-manager) keeps
/// it: (currentHealthy, desiredHealthy, disruptionsAllowed).
async fn budget_status(env: &EmulatedCluster) -> (i64, i64, i64) {
    let pdb = env
        .api
        .get("PodDisruptionBudget", Some("default"), "web")
        .await
        .expect("the web budget");
    let field = |name: &str| pdb["status"][name].as_i64().unwrap_or(-1);
    (
        field("currentHealthy"),
        field("desiredHealthy"),
        field("disruptionsAllowed"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn a_budget_the_disruption_controller_keeps_holds_a_spot_drain_until_each_pod_runs_elsewhere()
{
    // Three web pods on one spot node, and a budget of minAvailable 2 whose status the
    // real disruption controller keeps: one pod may go at a time. The drain evicts one;
    // the API server refuses the next (429) until that pod's replacement, on the node
    // the provisioner launched for it, is Ready and the controller has counted it;
    // then the next, and the last. All within the two-minute notice: nothing is deleted
    // past the budget, nothing is lost with the instance.
    let mut web = web_deployment("web", 3, "1", "1Gi");
    web["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = json!(5);
    let live = live_world_with("int-budget", web, Some(budget(2))).await;
    let counted = wait_until(Duration::from_secs(30), || async {
        budget_status(&live).await == (3, 2, 1)
    })
    .await;
    assert!(
        counted,
        "the disruption controller never counted the three pods: (currentHealthy, desiredHealthy, disruptionsAllowed) = {:?}",
        budget_status(&live).await
    );
    let on_node: Vec<String> = live
        .cluster
        .placements()
        .into_iter()
        .filter(|(_, node, _)| node.as_deref() == Some(live.node.as_str()))
        .map(|(pod, _, _)| pod)
        .collect();
    assert_eq!(on_node.len(), 3, "setup: {:?}", live.cluster.placements());
    let schedule = provisioner_schedule(&live, "schedule", SCHEDULE_BUDGET).await;
    let q = live.queue(template_max_receive_count()).await;
    let h = live.handler(RebalanceAction::Replace).await;

    let warned = Instant::now();
    live.cluster
        .kill_at(&live.instance, warned + Duration::from_secs(120));
    q.send(&about(&fixture("spot-interruption.json"), &live.instance))
        .await;
    let poller = Poller::start(&q, &h);
    let settled = live.settled().await;

    // Every pod left by an eviction the budget allowed, none deleted or lost.
    let lives = live.cluster.pods();
    let mut left: Vec<(Instant, String, GoneBy)> = lives
        .iter()
        .filter(|p| on_node.contains(&p.key))
        .filter_map(|p| p.gone.clone().map(|(at, by)| (at, p.key.clone(), by)))
        .collect();
    left.sort_by_key(|(at, _, _)| *at);
    assert_eq!(
        left.iter()
            .map(|(_, pod, by)| (pod.clone(), by.clone()))
            .collect::<Vec<_>>(),
        left.iter()
            .map(|(_, pod, _)| (pod.clone(), GoneBy::Evicted))
            .collect::<Vec<_>>(),
        "every pod is evicted (settled={settled}): {}",
        brief(&live.claim().await)
    );
    assert_eq!(left.len(), 3, "{left:?}");
    // The API server refused evictions while the budget allowed none.
    let refused: Vec<String> = live
        .nodewright_requests()
        .into_iter()
        .filter(|r| r.subresource == "eviction" && r.code == 429)
        .map(|r| format!("{}/{}", r.namespace, r.name))
        .collect();
    assert!(
        !refused.is_empty() && refused.iter().all(|p| on_node.contains(p)),
        "no eviction of the node's pods was answered 429: {refused:?}"
    );
    // Each eviction after the first waited for a replacement Ready on another node:
    // the n-th pod went only once n - 1 replacements ran elsewhere.
    let replacements: Vec<Instant> = lives
        .iter()
        .filter(|p| !p.daemon && p.first_seen >= warned && !on_node.contains(&p.key))
        .filter(|p| p.node.as_deref().is_some_and(|n| n != live.node))
        .filter_map(|p| p.ready_at)
        .collect();
    for (n, (at, pod, _)) in left.iter().enumerate() {
        let ready_before = replacements.iter().filter(|r| *r < at).count();
        assert!(
            ready_before >= n,
            "{pod} (eviction {} of 3) went when {ready_before} replacement(s) ran elsewhere",
            n + 1
        );
    }
    assert_eq!(
        live.cluster.violations(),
        Vec::<String>::new(),
        "a PodDisruptionBudget was broken"
    );
    assert_eq!(live.cluster.lost(), Vec::<(String, GoneBy)>::new());
    live.assert_taken_away(&schedule, 1).await;
    assert_eq!(
        live.cluster.running().len(),
        3,
        "every replica runs: {:?}",
        live.cluster.placements()
    );
    let kept = wait_until(Duration::from_secs(30), || async {
        budget_status(&live).await == (3, 2, 1)
    })
    .await;
    assert!(
        kept,
        "the budget's status at the end: {:?}",
        budget_status(&live).await
    );
    assert!(
        poller
            .responses()
            .iter()
            .all(|r| r.batch_item_failures.is_empty()),
        "{:?}",
        poller.responses()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn a_rebalance_recommendation_replaces_the_node_then_drains_and_terminates_it() {
    let live = live_world("int-rebalance", Some(budget(1))).await;
    let schedule = provisioner_schedule(&live, "schedule", SCHEDULE_BUDGET).await;
    let q = live.queue(template_max_receive_count()).await;
    let h = live.handler(RebalanceAction::Replace).await;
    let on_node: Vec<String> = live
        .cluster
        .placements()
        .into_iter()
        .filter(|(_, node, _)| node.as_deref() == Some(live.node.as_str()))
        .map(|(pod, _, _)| pod)
        .collect();

    q.send(&about(
        &fixture("rebalance-recommendation.json"),
        &live.instance,
    ))
    .await;
    let _poller = Poller::start(&q, &h);
    let settled = live.settled().await;

    let new = live.new_claims().await;
    assert_eq!(
        new.len(),
        1,
        "one replacement is launched for the node's pods (settled={settled}): {:?}; the claim: {}",
        briefs(&new),
        brief(&live.claim().await)
    );
    let replacement = new[0].instance_id.clone().unwrap_or_default();
    let Some(ready) = live.cluster.instance(&replacement).and_then(|i| i.ready_at) else {
        panic!(
            "the replacement {} never became a Ready node: {:?}",
            brief(&new[0]),
            live.cluster.instance(&replacement)
        );
    };
    let Some(first_left) = live
        .cluster
        .pods()
        .iter()
        .filter(|p| on_node.contains(&p.key))
        .filter_map(|p| p.gone.as_ref().map(|(at, _)| *at))
        .min()
    else {
        panic!(
            "the node was never drained, {:.1}s after its replacement was Ready: {}",
            ready.elapsed().as_secs_f64(),
            brief(&live.claim().await)
        );
    };
    assert!(
        first_left >= ready,
        "the drain began {:.1}s before the replacement was Ready",
        (ready - first_left).as_secs_f64()
    );
    assert_eq!(
        live.cluster.violations(),
        Vec::<String>::new(),
        "a PodDisruptionBudget was broken"
    );
    live.assert_taken_away(&schedule, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn a_spot_warning_after_a_rebalance_still_counts_and_drains_before_ec2_reclaims_the_node() {
    let live = live_world("int-escalate", Some(budget(1))).await;
    let schedule = provisioner_schedule(&live, "schedule", SCHEDULE_BUDGET).await;
    let q = live.queue(template_max_receive_count()).await;
    let h = live.handler(RebalanceAction::Replace).await;
    let _poller = Poller::start(&q, &h);

    q.send(&about(
        &fixture("rebalance-recommendation.json"),
        &live.instance,
    ))
    .await;
    let disrupted = wait_until(Duration::from_secs(20), || async {
        live.claim().await.disruption.is_some()
    })
    .await;
    assert!(disrupted, "the rebalance recommendation was not acted on");

    // The warning was sent 100 s ago (as if delivered late): EC2 takes the instance
    // back 20 s from now, and the drain must not wait for the rebalance's delay.
    q.send(&about_at(
        &fixture("spot-interruption.json"),
        &live.instance,
        unix_now() - 100,
    ))
    .await;
    live.cluster
        .kill_at(&live.instance, Instant::now() + Duration::from_secs(20));
    let settled = live.settled().await;

    let lost = live.cluster.lost();
    assert!(
        lost.is_empty(),
        "pods lost with the instance (the drain did not start before EC2 took it; settled={settled}): {lost:?}; the claim: {}",
        brief(&live.claim().await)
    );
    live.assert_taken_away(&schedule, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn a_terminated_notice_after_a_disruption_cleans_up_the_claim_and_the_node() {
    let live = live_world("int-gone", Some(budget(1))).await;
    let schedule = provisioner_schedule(&live, "schedule", SCHEDULE_BUDGET).await;
    let q = live.queue(template_max_receive_count()).await;
    let h = live.handler(RebalanceAction::Replace).await;
    let _poller = Poller::start(&q, &h);

    q.send(&about(
        &fixture("rebalance-recommendation.json"),
        &live.instance,
    ))
    .await;
    let disrupted = wait_until(Duration::from_secs(20), || async {
        live.claim().await.disruption.is_some()
    })
    .await;
    assert!(disrupted, "the rebalance recommendation was not acted on");

    // The instance goes anyway (EC2 reclaimed it without a warning, or someone
    // terminated it), and EC2 says so.
    live.cluster.kill_at(&live.instance, Instant::now());
    let gone = wait_until(Duration::from_secs(10), || async {
        live.cluster
            .instance(&live.instance)
            .is_some_and(|i| i.gone_at.is_some())
    })
    .await;
    assert!(gone, "EC2 did not take the instance");
    q.send(&about(
        &fixture("state-change-terminated.json"),
        &live.instance,
    ))
    .await;
    live.settled().await;

    let claim = live.claim().await;
    assert_eq!(
        claim.state,
        ClaimState::Terminated,
        "the claim of a terminated instance is left {:?}: {}",
        claim.state,
        brief(&claim)
    );
    assert!(
        live.api.get("Node", None, &live.node).await.is_none(),
        "the node of a terminated instance is left behind"
    );
    assert_eq!(
        live.cluster.deleted_by_cloud(),
        Vec::<String>::new(),
        "nodewright cleaned the node up before the cloud controller would"
    );
    if let Err(e) = live.running_elsewhere() {
        panic!("{e}");
    }
    let instances = live.live_instances().await;
    let mut claimed: Vec<String> = live
        .live_claims()
        .await
        .into_iter()
        .filter_map(|(_, i)| i)
        .collect();
    claimed.sort();
    assert_eq!(instances, claimed, "the instances are not the live claims'");
    for (n, invocation) in schedule.invocations().iter().enumerate() {
        assert!(
            invocation.unclaimed().is_empty(),
            "after provisioner invocation {}: {:?} without a live claim",
            n + 1,
            invocation.unclaimed()
        );
    }
    let new = live.new_claims().await;
    assert!(
        new.len() <= 1,
        "{} claims launched: {:#?}",
        new.len(),
        briefs(&new)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn a_rebalance_recommendation_for_a_node_whose_kubelet_hung_still_takes_the_node_away() {
    let live = live_world("int-hung", None).await;
    let schedule = provisioner_schedule(&live, "schedule", SCHEDULE_BUDGET).await;
    let q = live.queue(template_max_receive_count()).await;
    let h = live.handler(RebalanceAction::Replace).await;
    let on_node: Vec<String> = live
        .cluster
        .placements()
        .into_iter()
        .filter(|(_, node, _)| node.as_deref() == Some(live.node.as_str()))
        .map(|(pod, _, _)| pod)
        .collect();

    // The kubelet hangs while its instance runs on: nothing will confirm a deletion of
    // its pods. The drain (no deadline: a rebalance recommendation) evicts them once the
    // replacement is up; they stay Terminating, and a minute past their grace period
    // (5 s) the drain stops waiting for them.
    live.cluster.stop_kubelet(&live.node).await;
    q.send(&about(
        &fixture("rebalance-recommendation.json"),
        &live.instance,
    ))
    .await;
    let _poller = Poller::start(&q, &h);
    let settled = live.settled_within(SETTLE + Duration::from_secs(60)).await;

    let claim = live.claim().await;
    assert_eq!(
        claim.state,
        ClaimState::Terminated,
        "the claim is still {:?} (settled={settled}): {}; pods {:?}, terminating {:?}",
        claim.state,
        brief(&claim),
        live.cluster.placements(),
        live.cluster
            .pods()
            .iter()
            .filter(|p| on_node.contains(&p.key))
            .map(|p| (p.key.clone(), p.gone.clone().map(|(_, by)| by)))
            .collect::<Vec<_>>()
    );
    assert!(
        !live.cluster.killed().contains(&live.instance),
        "nodewright terminated the instance"
    );
    let instances = live.live_instances().await;
    assert!(!instances.contains(&live.instance), "{instances:?}");
    assert!(live.api.get("Node", None, &live.node).await.is_none());
    if let Err(e) = live.running_elsewhere() {
        panic!("{e}");
    }
    let evicted: Vec<String> = live
        .cluster
        .pods()
        .into_iter()
        .filter(|p| on_node.contains(&p.key))
        .filter(|p| p.gone.as_ref().map(|(_, by)| by) == Some(&GoneBy::Evicted))
        .map(|p| p.key)
        .collect();
    assert_eq!(
        evicted.len(),
        on_node.len(),
        "evicted, not lost: {evicted:?}"
    );
    let mut claimed: Vec<String> = live
        .live_claims()
        .await
        .into_iter()
        .filter_map(|(_, i)| i)
        .collect();
    claimed.sort();
    assert_eq!(instances, claimed, "the instances are not the live claims'");
    for (n, invocation) in schedule.invocations().iter().enumerate() {
        assert!(
            invocation.unclaimed().is_empty(),
            "after provisioner invocation {}: {:?} without a live claim",
            n + 1,
            invocation.unclaimed()
        );
    }
    let new = live.new_claims().await;
    assert_eq!(new.len(), 1, "one replacement: {:#?}", briefs(&new));
    assert_eq!(live.unexpected_refusals(), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn transient_api_errors_on_evictions_do_not_send_a_spot_warning_to_the_dlq() {
    let live = live_world("int-transient", None).await;
    let schedule = provisioner_schedule(&live, "schedule", SCHEDULE_BUDGET).await;
    let q = live.queue(template_max_receive_count()).await;
    let h = live.handler(RebalanceAction::Replace).await;

    // The API server answers the first pod's eviction with 500, three times, then
    // recovers.
    let first = live
        .cluster
        .placements()
        .into_iter()
        .find(|(_, node, _)| node.as_deref() == Some(live.node.as_str()))
        .map(|(pod, _, _)| pod)
        .expect("a pod on the node");
    let (namespace, name) = first.split_once('/').expect("namespace/name");
    for _ in 0..3 {
        live.proxy.fail_next(
            "POST",
            &format!("/api/v1/namespaces/{namespace}/pods/{name}/eviction"),
            500,
        );
    }
    q.send(&about(&fixture("spot-interruption.json"), &live.instance))
        .await;
    let poller = Poller::start(&q, &h);
    let settled = live.settled().await;

    let dead = q.receive_from(&q.dlq_url).await;
    let retried: usize = poller
        .responses()
        .iter()
        .map(|r| r.batch_item_failures.len())
        .sum();
    assert!(
        dead.is_empty(),
        "the spot warning went to the DLQ after {} deliveries ({retried} returned for retry; settled={settled}); the claim: {}",
        poller.responses().len(),
        brief(&live.claim().await)
    );
    live.assert_taken_away(&schedule, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn a_duplicate_of_an_event_in_the_same_batch_is_acknowledged() {
    let live = live_world("int-dup", None).await;
    let q = live.queue(template_max_receive_count()).await;
    let h = live.handler(RebalanceAction::Replace).await;
    let warning = about(&fixture("spot-interruption.json"), &live.instance);
    // EventBridge delivers at least once: the same event twice.
    q.send(&warning).await;
    q.send(&warning).await;
    let mut batch = q.receive().await;
    for _ in 0..3 {
        if batch.len() >= 2 {
            break;
        }
        batch.extend(q.receive().await);
    }
    assert_eq!(batch.len(), 2, "both copies in one batch");
    live.proxy.clear_requests();

    let mut event = SqsEvent::default();
    event.records = batch;
    let response = h
        .handle(LambdaEvent::new(event, lambda_context(FUNCTION_TIMEOUT)))
        .await
        .expect("handler");
    assert!(
        response.batch_item_failures.is_empty(),
        "a duplicate was returned for retry: {:?}",
        response.batch_item_failures
    );
    let mut evicted: Vec<String> = live
        .proxy
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/eviction") && r.status == 201)
        .map(|r| r.path)
        .collect();
    evicted.sort();
    let mut once = evicted.clone();
    once.dedup();
    assert_eq!(evicted, once, "a pod was evicted twice");
}
