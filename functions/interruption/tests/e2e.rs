//! The interruption Lambda end to end, through its real handler: SQS, DynamoDB and EC2
//! are moto's server (tests/moto.sh), Kubernetes is the fake API server reached through
//! `NODEWRIGHT_KUBECONFIG`. The instance is launched by the real provisioner handler;
//! the test plays the kubelet (registers the node, binds the pods). Events are the real
//! fixtures, sent to and received from an SQS queue with a DLQ, then handed to the
//! handler as the Lambda SQS integration would.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

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
use nodewright_engine::ports::{BoxError, Store};
use nodewright_engine::{InterruptionConfig, Provisioner, ProvisionerConfig};
use nodewright_interruption::{Handler, ProvisionerTrigger};
use nodewright_kube::fake::FakeApiServer;
use nodewright_lambda::build_ports;
use nodewright_provisioner::testing::{EmulatedCluster, emulated_cluster};

const FIXTURES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/core/tests/fixtures/events/"
);
const FIXTURE_INSTANCE: &str = "i-1234567890abcdef0";

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!("{FIXTURES}{name}")).expect("fixture")
}

/// A fixture about `instance` with a fresh event id and, for a spot warning, sent now
/// (the fixture's own time is in the past: its two-minute deadline would be over).
fn about(fixture_body: &str, instance: &str) -> String {
    let mut v: Value =
        serde_json::from_str(&fixture_body.replace(FIXTURE_INSTANCE, instance)).unwrap();
    v["id"] = json!(unique("evt"));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    v["time"] = json!(format_rfc3339(now));
    v.to_string()
}

struct World {
    /// The emulated cluster: moto, the fake API server, the handlers' config.
    env: EmulatedCluster,
    instance: String,
    node: String,
    claim: String,
}

impl std::ops::Deref for World {
    type Target = EmulatedCluster;
    fn deref(&self) -> &EmulatedCluster {
        &self.env
    }
}

/// A spot instance launched by the provisioner for two pods, its node registered and
/// Ready, the pods bound and running on it, a PDB allowing one of them to be disrupted.
async fn world() -> World {
    let env = emulated_cluster("int", "spot", 2).await;
    let (url, table, api, config, cluster) =
        (&env.url, &env.table, &env.api, &env.config, &env.cluster);

    // Launch with the real provisioner handler (one tick each).
    let (ports, _) = build_ports(config).await.expect("ports");
    let provisioner = nodewright_provisioner::Handler {
        provisioner: Provisioner::new(ports, ProvisionerConfig::new(cluster.clone(), "int-e2e")),
        poll_interval: config.poll_interval,
    };
    let tick = || async {
        let event = LambdaEvent::new(json!({}), Context::default());
        provisioner.handle(event).await.expect("provisioner")
    };
    let launched = tick().await;
    assert_eq!(
        launched["launched"].as_array().map(Vec::len),
        Some(1),
        "{launched}"
    );
    let claims = store_of(url, table).await.list_claims().await.unwrap();
    let claim = claims[0].clone();
    assert_eq!(claim.capacity_type, Some(CapacityType::Spot));
    let (id, zone) = (
        claim.instance_id.clone().unwrap(),
        claim.zone.clone().unwrap(),
    );

    // The kubelet registers a Ready node; the provisioner's lifecycle pass adopts it.
    let node = format!("ip-{}.ec2.internal", &id[2..10]);
    api.put(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": node, "labels": {"kubernetes.io/hostname": node, "topology.kubernetes.io/zone": zone,
            "node.kubernetes.io/instance-type": "m5.xlarge", "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux"}},
        "spec": {"providerID": format!("aws:///{zone}/{id}"),
                 "taints": [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]},
        "status": {"allocatable": {"cpu": "3920m", "memory": "14162Mi", "pods": "58"},
                   "capacity": {"cpu": "4", "memory": "15Gi", "pods": "58"},
                   "conditions": [{"type": "Ready", "status": "True"}]}
    }));
    tick().await;
    tick().await;
    let claim = store_of(url, table)
        .await
        .get_claim(&claim.name)
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(
            claim.state,
            ClaimState::Initialized | ClaimState::Registered
        ),
        "{claim:#?}"
    );
    assert_eq!(claim.node_name.as_deref(), Some(node.as_str()));

    // The scheduler binds the pods; they run.
    for i in 0..2 {
        api.modify("Pod", Some("default"), &format!("web-{i}"), |p| {
            p["spec"]["nodeName"] = json!(node);
            p["status"] =
                json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]});
        });
    }
    api.put(json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}
    }));
    let claim = claim.name.clone();
    World {
        env,
        instance: id,
        node,
        claim,
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

async fn handler(world: &World, trigger: Arc<RecordingTrigger>) -> Handler {
    let (ports, _) = build_ports(&world.config).await.expect("ports");
    Handler {
        ports,
        config: InterruptionConfig::default(),
        rebalance: RebalanceAction::Replace,
        trigger,
        dry_run: false,
    }
}

/// A queue with a DLQ (maxReceiveCount 2), as template.yaml declares it.
struct Queue {
    sqs: aws_sdk_sqs::Client,
    url: String,
    dlq_url: String,
}

async fn queue(world: &World) -> Queue {
    let sqs = aws_sdk_sqs::Client::new(&sdk_config(&world.url).await);
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
            json!({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "2"}).to_string(),
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

/// Requests that change something in the cluster: patches, deletes, evictions.
fn mutations(api: &FakeApiServer) -> Vec<String> {
    api.requests()
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
    world.api.clear_requests();
    let response = invoke(&h, batch.clone()).await;
    assert!(
        response.batch_item_failures.is_empty(),
        "both acknowledged: {response:?}"
    );
    q.settle(&batch, &response).await;
    assert_eq!(
        mutations(&world.api),
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
        .expect("node still there while pods are kept");
    let taints = node["spec"]["taints"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        taints.iter().any(|t| t["key"] == "karpenter.sh/disrupted"),
        "{node}"
    );
    // The budget (minAvailable 1) let one pod go and kept the other.
    let left: Vec<Value> = world.api.list("Pod");
    assert_eq!(
        left.len(),
        1,
        "one pod evicted, one kept by the PDB: {left:?}"
    );
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
    world.api.clear_requests();
    q.send(&warning).await;
    let batch = q.receive().await;
    let response = invoke(&h, batch.clone()).await;
    assert!(response.batch_item_failures.is_empty());
    q.settle(&batch, &response).await;
    assert_eq!(
        mutations(&world.api),
        Vec::<String>::new(),
        "a duplicate does nothing"
    );
    assert_eq!(trigger.0.load(Ordering::SeqCst), 1);

    // The evicted pod's replacement is up elsewhere: the budget lets the last one go, and
    // the next step of the termination machine finishes the drain.
    world.api.put(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-new", "namespace": "default", "labels": {"app": "web"}},
        "spec": {"nodeName": "elsewhere", "containers": [{"name": "app", "image": "nginx"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    }));
    let (ports, _) = build_ports(&world.config).await.unwrap();
    let progress = nodewright_engine::terminate::drive(&ports, &claim(&world).await)
        .await
        .expect("drive");
    assert_eq!(progress.evicted.len(), 1, "{progress:?}");
    let c = claim(&world).await;
    assert_eq!(c.state, ClaimState::Terminated, "{c:#?}");
    assert!(matches!(
        instance_state(&world).await.as_str(),
        "shutting-down" | "terminated"
    ));
    assert!(
        world.api.get("Node", None, &world.node).is_none(),
        "the node is deleted"
    );
    assert_eq!(
        world.api.list("Pod").len(),
        1,
        "only the replacement is left"
    );
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
    world.api.fail_next("*", &node_path, 500);
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
    world.api.fail_next("*", &node_path, 500);
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

    // The claim was disrupted by the failed attempts (cordon pending); no instance touched.
    assert_eq!(instance_state(&world).await, "running");
    assert_eq!(claim(&world).await.state, ClaimState::Disrupting);
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
    world.api.clear_requests();

    let response = invoke(&h, batch).await;
    assert!(response.batch_item_failures.is_empty(), "acknowledged");
    assert!(
        mutations(&world.api).is_empty(),
        "{:?}",
        mutations(&world.api)
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
    world.api.clear_requests();

    let response = invoke(&h, batch).await;
    assert!(
        response.batch_item_failures.is_empty(),
        "{:?}",
        response.batch_item_failures
    );
    // The records run concurrently; the conditional write to Disrupting lets one of
    // them proceed. A drain evicts; a clean-up deletes pods without evicting: never both.
    let mutations = mutations(&world.api);
    let evictions = mutations
        .iter()
        .filter(|m| m.ends_with("/eviction"))
        .count();
    let pod_deletes = mutations
        .iter()
        .filter(|m| m.starts_with("DELETE /api/v1/namespaces/"))
        .count();
    assert!(
        evictions == 0 || pod_deletes == 0,
        "one drain, not two: {mutations:#?}"
    );
    let node_deletes = mutations
        .iter()
        .filter(|m| m.starts_with("DELETE /api/v1/nodes/"))
        .count();
    assert!(node_deletes <= 1, "{mutations:#?}");
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
