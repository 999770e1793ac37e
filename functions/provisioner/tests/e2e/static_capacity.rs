//! A static NodePool (`spec.replicas`) through the provisioner's real handler: DynamoDB
//! and EC2 are moto's (tests/moto.sh), Kubernetes is a real control plane whose nodes
//! join as their instances boot. The pool comes up to its replicas with no pod pending,
//! publishes `status.nodes`, and when its replicas drop the surplus node is drained and
//! its instance terminated.

use lambda_runtime::{Context, LambdaEvent};
use nodewright_engine::ports::ClaimStore;
use serde_json::{Value, json};

use aws_sdk_ec2::types::Filter;
use nodewright_aws::testing::{REGION, sdk_config};
use nodewright_aws::{AwsContext, DynamoStore};
use nodewright_core::nodeclaim::{ClaimState, DisruptionCause, NodeClaim};
use nodewright_engine::{Provisioner, ProvisionerConfig};
use nodewright_lambda::build_ports;
use nodewright_provisioner::Handler;
use nodewright_testkit::{
    ClusterBehaviour, EmulatedCluster, Timings, emulated_cluster, wait_until,
};
use std::time::Duration;

const SCHEDULED_TICK: &str =
    include_str!("../../../../shared/core/tests/fixtures/events/scheduled-tick.json");
const POOL: &str = "general-purpose";

async fn handler(world: &EmulatedCluster) -> Handler {
    let (ports, _) = build_ports(&world.config).await.expect("ports");
    Handler {
        provisioner: Provisioner::new(
            ports,
            ProvisionerConfig::new(world.cluster.clone(), "static"),
        ),
        poll_interval: world.config.poll_interval,
    }
}

/// One scheduled invocation with an unknown deadline: a single tick.
async fn invoke(handler: &Handler) -> Value {
    let event = LambdaEvent::new(
        serde_json::from_str(SCHEDULED_TICK).unwrap(),
        Context::default(),
    );
    handler.handle(event).await.expect("handler")
}

async fn claims(world: &EmulatedCluster) -> Vec<NodeClaim> {
    DynamoStore::new(
        &AwsContext::for_emulator(&world.url, REGION).await,
        world.table.clone(),
    )
    .list_claims()
    .await
    .expect("list claims")
}

/// This cluster's instances EC2 has not terminated.
async fn live_instances(world: &EmulatedCluster) -> Vec<String> {
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
        .filter_map(|i| i.instance_id().map(str::to_string))
        .collect()
}

async fn status_nodes(world: &EmulatedCluster) -> Value {
    world
        .api
        .get("NodePool", None, POOL)
        .await
        .expect("the pool")["status"]["nodes"]
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn a_static_nodepool_keeps_its_replicas_and_scales_down_through_the_handler() {
    let world = emulated_cluster("static", "on-demand", 0).await;
    // A pool is static from its creation (Karpenter's CRD refuses a dynamic pool made
    // static): the cluster's pool is made again with replicas.
    let mut pool = world
        .api
        .remove("NodePool", None, POOL)
        .await
        .expect("the pool");
    pool["metadata"] = json!({"name": POOL});
    pool.as_object_mut().expect("an object").remove("status");
    pool["spec"]["replicas"] = json!(2);
    world.api.put(pool).await;
    let cluster = ClusterBehaviour::start(&world, Timings::default()).await;
    cluster.hold_registration(true);
    let h = handler(&world).await;

    // No pod is pending: the pool launches its two nodes anyway.
    let first = invoke(&h).await;
    assert_eq!(first["launched"].as_array().unwrap().len(), 2, "{first}");
    let stored = claims(&world).await;
    assert_eq!(stored.len(), 2);
    assert!(stored.iter().all(|c| c.pods.is_empty()), "{stored:#?}");
    assert_eq!(live_instances(&world).await.len(), 2);
    assert_eq!(
        status_nodes(&world).await,
        2,
        "status.nodes is what kubectl scale reads"
    );

    cluster.hold_registration(false);
    let initialized = wait_until(Duration::from_secs(60), || async {
        invoke(&h).await;
        claims(&world)
            .await
            .iter()
            .all(|c| c.state == ClaimState::Initialized)
    })
    .await;
    let stored = claims(&world).await;
    assert!(initialized, "{stored:#?}");
    let again = invoke(&h).await;
    assert_eq!(again["launched"].as_array().unwrap().len(), 0, "{again}");

    // `kubectl scale nodepool general-purpose --replicas=1`.
    world
        .api
        .modify("NodePool", None, POOL, |p| {
            p["spec"]["replicas"] = json!(1);
        })
        .await;
    let scaled = wait_until(Duration::from_secs(60), || async {
        invoke(&h).await;
        claims(&world)
            .await
            .iter()
            .any(|c| c.state == ClaimState::Terminated)
    })
    .await;
    let after = claims(&world).await;
    assert!(scaled, "{after:#?}");
    let gone: Vec<&NodeClaim> = after
        .iter()
        .filter(|c| c.state == ClaimState::Terminated)
        .collect();
    assert_eq!(gone.len(), 1, "{after:#?}");
    assert_eq!(
        gone[0].disruption.as_ref().map(|d| d.cause),
        Some(DisruptionCause::Overprovisioned)
    );
    let live = live_instances(&world).await;
    assert_eq!(live.len(), 1, "{live:?}");
    assert!(!live.contains(gone[0].instance_id.as_ref().unwrap()));
    let node = gone[0].node_name.clone().expect("it had a node");
    assert!(
        world.api.get("Node", None, &node).await.is_none(),
        "the node is deleted"
    );
    assert_eq!(
        cluster.deleted_by_cloud(),
        Vec::<String>::new(),
        "nodewright deleted it"
    );
    assert!(
        world
            .api
            .list("Event")
            .await
            .iter()
            .any(|e| e["reason"] == "Overprovisioned"
                && e["involvedObject"]["name"] == node.as_str()),
        "an Overprovisioned event on the node"
    );
    assert_eq!(status_nodes(&world).await, 1);
}

/// `kubectl scale nodepool POOL --replicas=N`, as a user runs it (Debian's kubectl with
/// the cluster-admin kubeconfig, through the NodePool's scale subresource).
async fn kubectl_scale(world: &EmulatedCluster, replicas: u32) {
    let mut kubectl = world.api.kubectl();
    kubectl.args(["scale", "nodepool", POOL, &format!("--replicas={replicas}")]);
    let output = tokio::task::spawn_blocking(move || kubectl.output())
        .await
        .expect("kubectl")
        .expect("kubectl runs");
    assert!(
        output.status.success(),
        "kubectl scale nodepool {POOL} --replicas={replicas}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The scale subresource as `kubectl` reads it: (spec.replicas, status.replicas).
async fn scale_of(world: &EmulatedCluster) -> (Value, Value) {
    let mut kubectl = world.api.kubectl();
    kubectl.args([
        "get",
        "--raw",
        &format!("/apis/karpenter.sh/v1/nodepools/{POOL}/scale"),
    ]);
    let output = tokio::task::spawn_blocking(move || kubectl.output())
        .await
        .expect("kubectl")
        .expect("kubectl runs");
    assert!(
        output.status.success(),
        "kubectl get --raw .../scale: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let scale: Value = serde_json::from_slice(&output.stdout).expect("a Scale");
    (
        scale["spec"]["replicas"].clone(),
        scale["status"]["replicas"].clone(),
    )
}

/// Invokes single ticks until the pool has `n` claims Initialized and no other live
/// claim, asserting after every invocation that each instance has a live claim.
/// Returns whether it got there within `timeout`.
async fn until_kept(world: &EmulatedCluster, h: &Handler, n: usize, timeout: Duration) -> bool {
    wait_until(timeout, || async {
        invoke(h).await;
        let stored = claims(world).await;
        let live: Vec<&NodeClaim> = stored.iter().filter(|c| !c.state.is_terminal()).collect();
        let mut instances = live_instances(world).await;
        instances.sort();
        let unclaimed: Vec<&String> = instances
            .iter()
            .filter(|i| {
                !live
                    .iter()
                    .any(|c| c.instance_id.as_deref() == Some(i.as_str()))
            })
            .collect();
        assert!(
            unclaimed.is_empty(),
            "instances without a live claim {unclaimed:?}: {stored:#?}"
        );
        live.len() == n
            && live.iter().all(|c| c.state == ClaimState::Initialized)
            && instances.len() == n
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn kubectl_scale_nodepool_up_then_down_changes_what_the_provisioner_keeps() {
    let world = emulated_cluster("static-kubectl", "on-demand", 0).await;
    let mut pool = world
        .api
        .remove("NodePool", None, POOL)
        .await
        .expect("the pool");
    pool["metadata"] = json!({"name": POOL});
    pool.as_object_mut().expect("an object").remove("status");
    pool["spec"]["replicas"] = json!(1);
    world.api.put(pool).await;
    let _cluster = ClusterBehaviour::start(&world, Timings::default()).await;
    let h = handler(&world).await;
    let kept = until_kept(&world, &h, 1, Duration::from_secs(60)).await;
    assert!(kept, "one node: {:#?}", claims(&world).await);
    assert_eq!(scale_of(&world).await, (json!(1), json!(1)));

    // Up: the provisioner launches to three.
    kubectl_scale(&world, 3).await;
    let kept = until_kept(&world, &h, 3, Duration::from_secs(60)).await;
    let stored = claims(&world).await;
    assert!(kept, "scaled to 3: {stored:#?}");
    assert_eq!(stored.len(), 3, "launched once each: {stored:#?}");
    let scaled = wait_until(Duration::from_secs(10), || async {
        invoke(&h).await;
        scale_of(&world).await == (json!(3), json!(3))
    })
    .await;
    assert!(scaled, "the scale's status: {:?}", scale_of(&world).await);

    // Down: the surplus is drained and terminated.
    kubectl_scale(&world, 1).await;
    let kept = until_kept(&world, &h, 1, Duration::from_secs(90)).await;
    let stored = claims(&world).await;
    assert!(kept, "scaled to 1: {stored:#?}");
    let gone: Vec<&NodeClaim> = stored
        .iter()
        .filter(|c| c.state == ClaimState::Terminated)
        .collect();
    assert_eq!(gone.len(), 2, "{stored:#?}");
    assert!(
        gone.iter()
            .all(|c| c.disruption.as_ref().map(|d| d.cause)
                == Some(DisruptionCause::Overprovisioned)),
        "{gone:#?}"
    );
    for c in &gone {
        let node = c.node_name.clone().expect("it had a node");
        assert!(
            world.api.get("Node", None, &node).await.is_none(),
            "{node} is deleted"
        );
    }
    assert_eq!(stored.len(), 3, "nothing else launched: {stored:#?}");
    let scaled = wait_until(Duration::from_secs(10), || async {
        invoke(&h).await;
        scale_of(&world).await == (json!(1), json!(1))
    })
    .await;
    assert!(scaled, "the scale's status: {:?}", scale_of(&world).await);
    // And it stays so.
    for _ in 0..3 {
        let summary = invoke(&h).await;
        assert_eq!(
            summary["launched"].as_array().map(Vec::len),
            Some(0),
            "{summary}"
        );
    }
    assert_eq!(live_instances(&world).await.len(), 1);
    assert_eq!(
        world.unexpected_refusals(),
        Vec::<String>::new(),
        "the API server refused the provisioner's requests"
    );
}
