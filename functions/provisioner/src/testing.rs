//! An emulated cluster for end-to-end tests of the Lambda handlers (feature
//! `test-support`): moto for DynamoDB, EC2, SSM and EKS (tests/moto.sh), the fake
//! Kubernetes API server for the cluster, reached through `NODEWRIGHT_KUBECONFIG` as a
//! local run would, and the `Config` the handlers are built from.
//!
//! - [`emulated_cluster`]: the world, with a NodePool and pending pods;
//! - [`ClusterBehaviour`] (`behaviour`): kubelets, scheduler, controllers and EC2 acting
//!   over time, so a test can assert where a job *ends*;
//! - [`ProvisionerSchedule`]: the provisioner invoked back to back as its schedule
//!   would, with what each invocation left behind;
//! - [`lambda_context`], [`invoke_for`], [`wait_until`] and the accessors on
//!   [`EmulatedCluster`] (claims, live instances).

mod behaviour;

pub use behaviour::{ClusterBehaviour, GoneBy, InstanceLife, PodLife, Timings};

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_sdk_ec2::types::Filter;
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use nodewright_aws::testing::{
    K8S, REGION, create_table_from_definition, moto_url, network, node_role, sdk_config, unique,
};
use nodewright_aws::{AwsContext, DynamoStore};
use nodewright_core::nodeclaim::NodeClaim;
use nodewright_engine::ports::Store;
use nodewright_engine::{Provisioner, ProvisionerConfig};
use nodewright_kube::fake::FakeApiServer;
use nodewright_lambda::{Config, build_ports};

use crate::{DEADLINE_MARGIN, Handler};

/// The node role of the emulated cluster's EC2NodeClass.
pub const NODE_ROLE: &str = "KarpenterNodeRole-e2e";

pub struct EmulatedCluster {
    /// moto's URL.
    pub url: String,
    pub cluster: String,
    pub table: String,
    /// Shared with a [`ClusterBehaviour`] acting on it in the background.
    pub api: Arc<FakeApiServer>,
    pub config: Config,
    kubeconfig: PathBuf,
}

impl Drop for EmulatedCluster {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.kubeconfig);
    }
}

/// A table, a tagged network with AMIs in two zones, an EKS cluster in moto, and an API
/// server holding an EC2NodeClass and a NodePool of m5.xlarge of `capacity_type`, plus
/// `pods` pending pods of 1.5 cpu (two fit a node). Panics without moto.
pub async fn emulated_cluster(prefix: &str, capacity_type: &str, pods: usize) -> EmulatedCluster {
    let url = moto_url();
    let cluster = unique(prefix);
    let table = unique(&format!("{prefix}-table"));
    create_table_from_definition(&url, &table).await;
    let net = network(&url, &cluster).await;
    // The EC2NodeClass names this role: the provisioner creates its instance profile.
    node_role(&url, NODE_ROLE).await;
    aws_sdk_eks::Client::new(&sdk_config(&url).await)
        .create_cluster()
        .name(&cluster)
        .role_arn("arn:aws:iam::123456789012:role/eks")
        .version(K8S)
        .resources_vpc_config(
            aws_sdk_eks::types::VpcConfigRequest::builder()
                .subnet_ids(&net.subnet_a)
                .build(),
        )
        .send()
        .await
        .expect("create EKS cluster in moto");

    let api = Arc::new(FakeApiServer::start().await.expect("fake API server"));
    api.put(json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
        "spec": {
            "role": NODE_ROLE,
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": cluster}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": cluster}}]
        }
    }));
    api.put(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "general-purpose"},
        "spec": {"template": {"spec": {
            "requirements": [
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": [capacity_type]},
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.xlarge"]}
            ],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
        }}}
    }));
    for i in 0..pods {
        api.put(pending_pod(&format!("web-{i}")));
    }

    let kubeconfig = std::env::temp_dir().join(format!("{}.kubeconfig", unique("nw")));
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\ncurrent-context: fake\nusers:\n- name: fake\n  user:\n    token: test\n",
            api.url()
        ),
    )
    .expect("write kubeconfig");
    let vars: HashMap<String, String> = [
        ("NODEWRIGHT_CLUSTER_NAME", cluster.as_str()),
        ("NODEWRIGHT_TABLE_NAME", table.as_str()),
        (
            "NODEWRIGHT_KUBECONFIG",
            kubeconfig.to_str().expect("utf-8 temp path"),
        ),
        ("NODEWRIGHT_SSM_PUBLIC_PREFIX", net.ssm_prefix.as_str()),
        ("NODEWRIGHT_POLL_INTERVAL", "1s"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let config = Config::from_vars(&vars).expect("config");
    EmulatedCluster {
        url,
        cluster,
        table,
        api,
        config,
        kubeconfig,
    }
}

/// A pending pod of the `web` app requesting 1.5 cpu and 1 GiB.
pub fn pending_pod(name: &str) -> Value {
    web_pod(name, "1500m", "1Gi")
}

/// A pending pod of the `web` app (no tolerations, no node selector) with these
/// requests, which kube-scheduler has marked Unschedulable.
pub fn web_pod(name: &str, cpu: &str, memory: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "app", "image": "nginx",
            "resources": {"requests": {"cpu": cpu, "memory": memory}}}]},
        "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    })
}

impl EmulatedCluster {
    /// The claims and instances of this cluster, for reading from a background task.
    pub fn aws(&self) -> AwsView {
        AwsView {
            url: self.url.clone(),
            cluster: self.cluster.clone(),
            table: self.table.clone(),
        }
    }

    /// The store the handlers use (DynamoDB in moto).
    pub async fn store(&self) -> DynamoStore {
        self.aws().store().await
    }

    /// Every claim in the store, tombstones included.
    pub async fn claims(&self) -> Vec<NodeClaim> {
        self.aws().claims().await
    }

    /// See [`AwsView::live_claims`].
    pub async fn live_claims(&self) -> Vec<(String, Option<String>)> {
        self.aws().live_claims().await
    }

    /// See [`AwsView::live_instances`].
    pub async fn live_instances(&self) -> Vec<String> {
        self.aws().live_instances().await
    }

    /// The provisioner's handler as its `main` builds it (real config, real adapters).
    pub async fn provisioner(&self, holder: &str) -> Handler {
        let (ports, _) = build_ports(&self.config).await.expect("ports");
        Handler {
            provisioner: Provisioner::new(
                ports,
                ProvisionerConfig::new(self.cluster.clone(), holder),
            ),
            poll_interval: self.config.poll_interval,
        }
    }
}

/// One cluster's claims (DynamoDB) and instances (EC2) in moto. Cheap to clone.
#[derive(Debug, Clone)]
pub struct AwsView {
    pub url: String,
    pub cluster: String,
    pub table: String,
}

impl AwsView {
    pub async fn store(&self) -> DynamoStore {
        DynamoStore::new(
            &AwsContext::for_emulator(&self.url, REGION).await,
            self.table.clone(),
        )
    }

    /// Every claim in the store, tombstones included.
    pub async fn claims(&self) -> Vec<NodeClaim> {
        self.store().await.list_claims().await.expect("list claims")
    }

    /// The claims that are not terminal (Terminated, LaunchFailed), with the instance
    /// each records (`None` while Launching).
    pub async fn live_claims(&self) -> Vec<(String, Option<String>)> {
        self.claims()
            .await
            .into_iter()
            .filter(|c| !c.state.is_terminal())
            .map(|c| (c.name, c.instance_id))
            .collect()
    }

    /// The cluster's instances in EC2 that are not shutting down or terminated (a
    /// stopped instance still counts: it is still there, and still costs), sorted.
    pub async fn live_instances(&self) -> Vec<String> {
        let ec2 = aws_sdk_ec2::Client::new(&sdk_config(&self.url).await);
        let out = ec2
            .describe_instances()
            .filters(
                Filter::builder()
                    .name(format!("tag:kubernetes.io/cluster/{}", self.cluster))
                    .values("owned")
                    .build(),
            )
            .send()
            .await
            .expect("describe instances");
        let mut ids: Vec<String> = out
            .reservations()
            .iter()
            .flat_map(|r| r.instances())
            .filter(|i| {
                !matches!(
                    i.state().and_then(|s| s.name()).map(|n| n.as_str()),
                    Some("shutting-down" | "terminated")
                )
            })
            .filter_map(|i| i.instance_id().map(str::to_string))
            .collect();
        ids.sort();
        ids
    }
}

/// A Lambda context whose invocation times out `timeout` from now.
pub fn lambda_context(timeout: Duration) -> Context {
    let deadline = SystemTime::now() + timeout;
    let mut context = Context::default();
    context.deadline = deadline
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    context.request_id = unique("req");
    context
}

/// One scheduled invocation of the provisioner that may keep ticking for `budget`
/// (its deadline is `budget` + the margin the handler keeps; `Duration::ZERO` gives a
/// single tick).
pub async fn invoke_for(handler: &Handler, budget: Duration) -> Value {
    let event = LambdaEvent::new(
        json!({"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}}),
        lambda_context(budget + DEADLINE_MARGIN),
    );
    handler.handle(event).await.expect("provisioner handler")
}

/// Polls `condition` every 250 ms until it holds (true) or `timeout` passes (false).
pub async fn wait_until<F, Fut>(timeout: Duration, mut condition: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let end = Instant::now() + timeout;
    loop {
        if condition().await {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// What one scheduled provisioner invocation returned and left behind.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// The handler's summary, or its error.
    pub summary: Result<Value, String>,
    /// Live instances right after it ([`EmulatedCluster::live_instances`]).
    pub instances: Vec<String>,
    /// Live claims right after it ([`EmulatedCluster::live_claims`]).
    pub claims: Vec<(String, Option<String>)>,
}

impl Invocation {
    /// Instances no live claim records: leaked or launched behind the store's back.
    pub fn unclaimed(&self) -> Vec<String> {
        self.instances
            .iter()
            .filter(|i| !self.claims.iter().any(|(_, c)| c.as_ref() == Some(*i)))
            .cloned()
            .collect()
    }

    /// How many instances the invocation says it launched.
    pub fn launched(&self) -> usize {
        self.summary
            .as_ref()
            .ok()
            .and_then(|s| s["launched"].as_array())
            .map_or(0, Vec::len)
    }
}

/// The provisioner invoked back to back in the background, each invocation with
/// `budget` (as the one-minute schedule does with 55 s), until dropped.
pub struct ProvisionerSchedule {
    log: Arc<Mutex<Vec<Invocation>>>,
    task: JoinHandle<()>,
}

impl Drop for ProvisionerSchedule {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ProvisionerSchedule {
    pub async fn start(world: &EmulatedCluster, holder: &str, budget: Duration) -> Self {
        let handler = world.provisioner(holder).await;
        let probe = world.aws();
        let log: Arc<Mutex<Vec<Invocation>>> = Arc::default();
        let writer = log.clone();
        let task = tokio::spawn(async move {
            loop {
                let event = LambdaEvent::new(
                    json!({"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}}),
                    lambda_context(budget + DEADLINE_MARGIN),
                );
                let summary = handler.handle(event).await.map_err(|e| e.to_string());
                let invocation = Invocation {
                    summary,
                    instances: probe.live_instances().await,
                    claims: probe.live_claims().await,
                };
                writer
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(invocation);
            }
        });
        ProvisionerSchedule { log, task }
    }

    /// The invocations finished so far.
    pub fn invocations(&self) -> Vec<Invocation> {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Stops invoking (an invocation under way is abandoned, as a Lambda timeout would).
    pub fn stop(&self) {
        self.task.abort();
    }
}
