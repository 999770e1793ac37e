//! An emulated cluster for end-to-end tests of the Lambda handlers (feature
//! `test-support`): moto for DynamoDB, EC2, SSM and EKS (tests/moto.sh), the fake
//! Kubernetes API server for the cluster, reached through `NODEWRIGHT_KUBECONFIG` as a
//! local run would, and the `Config` the handlers are built from.

use std::collections::HashMap;
use std::path::PathBuf;

use serde_json::{Value, json};

use nodewright_aws::testing::{
    K8S, create_table_from_definition, moto_url, network, sdk_config, unique,
};
use nodewright_kube::fake::FakeApiServer;
use nodewright_lambda::Config;

pub struct EmulatedCluster {
    /// moto's URL.
    pub url: String,
    pub cluster: String,
    pub table: String,
    pub api: FakeApiServer,
    pub config: Config,
    kubeconfig: PathBuf,
}

impl Drop for EmulatedCluster {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.kubeconfig);
    }
}

/// A table, a tagged network with AMIs, an EKS cluster in moto, and an API server
/// holding an EC2NodeClass and a NodePool of m5.xlarge of `capacity_type`, plus `pods`
/// pending pods of 1.5 cpu (two fit a node). Panics without moto: a test calling this
/// is `#[ignore = "needs moto: run through tests/moto.sh"]`.
pub async fn emulated_cluster(prefix: &str, capacity_type: &str, pods: usize) -> EmulatedCluster {
    let url = moto_url();
    let cluster = unique(prefix);
    let table = unique(&format!("{prefix}-table"));
    create_table_from_definition(&url, &table).await;
    let net = network(&url, &cluster).await;
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

    let api = FakeApiServer::start().await.expect("fake API server");
    api.put(json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
        "spec": {
            "role": "KarpenterNodeRole-e2e",
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
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "app", "image": "nginx",
            "resources": {"requests": {"cpu": "1500m", "memory": "1Gi"}}}]},
        "status": {"phase": "Pending"}
    })
}
