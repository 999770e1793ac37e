//! The emulated cluster's world: moto's table, network and EKS cluster, the fake API
//! server with a NodePool and pending pods, the handlers' `Config`, and what tests read
//! back from moto (claims, instances).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use aws_sdk_ec2::types::Filter;
use serde_json::{Value, json};

use nodewright_aws::testing::{
    REGION, create_table_from_definition, eks_cluster, moto_url, network, node_role, sdk_config,
    unique,
};
use nodewright_aws::{AwsContext, DynamoStore};
use nodewright_core::nodeclaim::NodeClaim;
use nodewright_engine::ports::Store;
use nodewright_kube::fake::FakeApiServer;
use nodewright_lambda::Config;

/// The node role of the emulated cluster's EC2NodeClass.
pub const NODE_ROLE: &str = "KarpenterNodeRole-e2e";

pub struct EmulatedCluster {
    /// moto's URL.
    pub url: String,
    pub cluster: String,
    pub table: String,
    /// Shared with a [`ClusterBehaviour`](crate::ClusterBehaviour) acting on it in the
    /// background.
    pub api: Arc<FakeApiServer>,
    /// What the handlers' `main`s read from the environment, pointing at this world.
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
    eks_cluster(&url, &cluster, &net.subnet_a)
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
/// requests, which kube-scheduler has marked Unschedulable: the object a test puts in
/// the API server.
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
