//! The emulated cluster's world: moto's table, network and EKS cluster, a real
//! Kubernetes control plane with an EC2NodeClass, a NodePool and the workloads a test
//! deploys, the handlers' `Config`, and what tests read back (claims and instances
//! from moto, the functions' requests from the API server's audit log).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_ec2::types::Filter;
use serde_json::{Value, json};

use nodewright_aws::testing::{
    Network, REGION, create_table_from_definition, eks_cluster, moto_url, network, node_role,
    sdk_config, unique,
};
use nodewright_aws::{AwsContext, DynamoStore};
use nodewright_core::nodeclaim::NodeClaim;
use nodewright_engine::ports::ClaimStore;
use nodewright_kube::testing::{ControlPlane, FaultProxy, Options};
use nodewright_lambda::Config;

use crate::wait_until;

/// The node role of the emulated cluster's EC2NodeClass.
pub const NODE_ROLE: &str = "KarpenterNodeRole-e2e";

/// How long a KWOK node's lease lasts: KWOK renews it every quarter of this, and takes
/// the lease of a node whose kubelet finished booting within that quarter (see
/// `behaviour::kubelet`).
pub const NODE_LEASE_SECONDS: u32 = 8;

/// The control plane every emulated cluster runs: all of it (etcd, kube-apiserver,
/// kube-controller-manager with every default controller, kube-scheduler, KWOK),
/// Karpenter v1.15.1's CRDs and `infra/rbac.yaml`, with the settings a test's time
/// needs:
/// - KWOK's node leases last [`NODE_LEASE_SECONDS`] (renewed every 2 s), so a node
///   whose kubelet finished booting turns Ready within 2 s;
/// - the node lifecycle controller marks a node whose kubelet stopped (its instance
///   reclaimed, a test's `stop_kubelet`) unreachable after 20 s without a heartbeat
///   instead of 50 s: well above the 2 s between KWOK's renewals, even on a busy
///   machine, and short enough for a test to wait for.
///
/// podgc's 40 s quarantine before it collects the pods of a deleted Node has no flag:
/// a test that needs them gone waits for it.
pub fn control_plane_options() -> Options {
    let mut options =
        Options::default().with_controller_manager_arg("--node-monitor-grace-period=20s");
    options.node_lease_seconds = NODE_LEASE_SECONDS;
    options
}

pub struct EmulatedCluster {
    /// moto's URL.
    pub url: String,
    pub cluster: String,
    pub table: String,
    /// The cluster's control plane (admin access for the test's own reads and writes);
    /// shared with a [`ClusterBehaviour`](crate::ClusterBehaviour) acting on it in the
    /// background.
    pub api: Arc<ControlPlane>,
    /// What the handlers' `main`s read from the environment, pointing at this world:
    /// `NODEWRIGHT_KUBECONFIG` is the functions' identity (the `nodewright` user, in
    /// the group `infra/rbac.yaml` binds), over TLS to the API server.
    pub config: Config,
    /// Kubeconfigs written for fault proxies, removed on drop.
    written: Mutex<Vec<PathBuf>>,
}

impl Drop for EmulatedCluster {
    fn drop(&mut self) {
        for path in self
            .written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// A table, a tagged network with AMIs in two zones, an EKS cluster in moto, and a
/// control plane ([`control_plane_options`]) holding an EC2NodeClass, a NodePool of
/// m5.xlarge of `capacity_type` and the DaemonSet every node runs
/// ([`node_daemon_set`]), plus, when `pods` > 0, the Deployment `web` of `pods`
/// replicas of 1.5 cpu (two fit a node), returned once kube-scheduler has marked all
/// of them Unschedulable. Panics without moto.
pub async fn emulated_cluster(prefix: &str, capacity_type: &str, pods: usize) -> EmulatedCluster {
    let world = emulated_cluster_with(prefix, capacity_type, control_plane_options()).await;
    if pods > 0 {
        world
            .deploy(web_deployment("web", pods, "1500m", "1Gi"))
            .await;
    }
    world
}

/// [`emulated_cluster`] without a workload, on a control plane started with `options`
/// (start from [`control_plane_options`]).
pub async fn emulated_cluster_with(
    prefix: &str,
    capacity_type: &str,
    options: Options,
) -> EmulatedCluster {
    let url = moto_url();
    let cluster = unique(prefix);
    let table = unique(&format!("{prefix}-table"));
    let (api, net) = tokio::join!(ControlPlane::start_with(options), async {
        create_table_from_definition(&url, &table).await;
        let net = network(&url, &cluster).await;
        // The EC2NodeClass names this role: the provisioner creates its instance profile.
        node_role(&url, NODE_ROLE).await;
        eks_cluster(&url, &cluster, &net.subnet_a)
            .await
            .expect("create EKS cluster in moto");
        net
    });
    let api = Arc::new(api);
    publish_amis(&url, &net, &api.info().kubernetes_version).await;
    api.put(json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
        "spec": {
            "role": NODE_ROLE,
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": cluster}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": cluster}}]
        }
    }))
    .await;
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
    }))
    .await;

    // Every EKS node runs kube-proxy (and the VPC CNI), tolerating every taint.
    api.put(node_daemon_set()).await;

    let kubeconfig = api.nodewright().kubeconfig.clone();
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
        written: Mutex::default(),
    }
}

/// The AL2023 alias parameters for the control plane's Kubernetes version (the
/// functions resolve `al2023@latest` for the version the API server reports; the moto
/// network publishes them for the EKS cluster's).
async fn publish_amis(url: &str, net: &Network, server_version: &str) {
    let minor = server_version
        .trim_start_matches('v')
        .splitn(3, '.')
        .take(2)
        .collect::<Vec<_>>()
        .join(".");
    let ssm = aws_sdk_ssm::Client::new(&sdk_config(url).await);
    for (arch, ami) in [("x86_64", &net.ami_amd64), ("arm64", &net.ami_arm64)] {
        ssm.put_parameter()
            .name(format!(
                "{}/eks/optimized-ami/{minor}/amazon-linux-2023/{arch}/standard/recommended/image_id",
                net.ssm_prefix
            ))
            .value(ami)
            .r#type(aws_sdk_ssm::types::ParameterType::String)
            .overwrite(true)
            .send()
            .await
            .expect("an AMI parameter in moto");
    }
}

/// A DaemonSet like EKS's kube-proxy: a pod on every node from the moment it joins
/// (it tolerates every taint), 100m cpu and 64 MiB each.
pub fn node_daemon_set() -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "kube-proxy", "namespace": "kube-system", "labels": {"k8s-app": "kube-proxy"}},
        "spec": {
            "selector": {"matchLabels": {"k8s-app": "kube-proxy"}},
            "template": {
                "metadata": {"labels": {"k8s-app": "kube-proxy"}},
                "spec": {
                    "priorityClassName": "system-node-critical",
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": "kube-proxy", "image": "kube-proxy",
                        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]
                }
            }
        }
    })
}

/// The Deployment `name` of `replicas` pods labelled `app: <name>` (no tolerations, no
/// node selector), each requesting `cpu` and `memory`: the object a test puts in the
/// API server (edit `spec.template.spec` for more).
pub fn web_deployment(name: &str, replicas: usize, cpu: &str, memory: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "nginx",
                    "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}
            }
        }
    })
}

/// The pod's PodScheduled condition says kube-scheduler found no node for it.
pub fn marked_unschedulable(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| {
            c["type"] == "PodScheduled" && c["status"] == "False" && c["reason"] == "Unschedulable"
        })
}

/// A request of the functions' identity, as the API server's audit log recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Audited {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`...
    pub verb: String,
    /// `pods`, `nodes`, `nodeclaims`...
    pub resource: String,
    /// `eviction`, `status`, or "".
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    /// The HTTP status answered.
    pub code: u16,
}

impl Audited {
    /// "verb resource[/subresource] [namespace/]name code", for a failure message.
    pub fn describe(&self) -> String {
        let what = if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        };
        let name = if self.namespace.is_empty() {
            self.name.clone()
        } else {
            format!("{}/{}", self.namespace, self.name)
        };
        format!("{} {what} {name} {}", self.verb, self.code)
    }
}

impl EmulatedCluster {
    /// Puts `deployment` and waits until its replicas exist and kube-scheduler has
    /// either bound each or marked it Unschedulable: what a test wants the handlers to
    /// see next. Panics after 30 s.
    pub async fn deploy(&self, deployment: Value) {
        let name = deployment["metadata"]["name"]
            .as_str()
            .expect("a Deployment's name")
            .to_string();
        let replicas = deployment["spec"]["replicas"].as_u64().unwrap_or(1) as usize;
        let labels = deployment["spec"]["selector"]["matchLabels"].clone();
        self.api.put(deployment).await;
        let settled = wait_until(Duration::from_secs(30), || async {
            let pods: Vec<Value> = self
                .api
                .list("Pod")
                .await
                .into_iter()
                .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
                .filter(|p| {
                    labels
                        .as_object()
                        .into_iter()
                        .flatten()
                        .all(|(k, v)| p["metadata"]["labels"][k] == *v)
                })
                .collect();
            pods.len() == replicas
                && pods
                    .iter()
                    .all(|p| p["spec"]["nodeName"].is_string() || marked_unschedulable(p))
        })
        .await;
        assert!(
            settled,
            "Deployment {name}: its {replicas} pods were not created and looked at by kube-scheduler within 30 s: {:#?}",
            self.api.list("Pod").await
        );
    }

    /// Sets the Deployment's replicas (`kubectl scale`).
    pub async fn scale(&self, deployment: &str, replicas: usize) {
        self.api
            .modify("Deployment", Some("default"), deployment, |d| {
                d["spec"]["replicas"] = json!(replicas);
            })
            .await
            .unwrap_or_else(|| panic!("no Deployment {deployment} to scale"));
    }

    /// The workload pods (not DaemonSets') in the cluster now, not being deleted
    /// ("namespace/name"), sorted.
    pub async fn pod_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .api
            .list("Pod")
            .await
            .iter()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .filter(|p| {
                !p["metadata"]["ownerReferences"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|o| o["kind"] == "DaemonSet")
            })
            .map(|p| {
                format!(
                    "{}/{}",
                    p["metadata"]["namespace"].as_str().unwrap_or_default(),
                    p["metadata"]["name"].as_str().unwrap_or_default()
                )
            })
            .collect();
        names.sort();
        names
    }

    /// A [`FaultProxy`] in front of the API server, and the handlers' `Config` reaching
    /// the server through it (plain HTTP, the functions' token): for a test that
    /// counts the functions' requests or injects a fault.
    pub async fn through_proxy(&self) -> (FaultProxy, Config) {
        let proxy = FaultProxy::start(&self.api).await;
        let path = std::env::temp_dir().join(format!("{}.kubeconfig", unique("nw-proxy")));
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: proxy\n  cluster:\n    server: {}\ncontexts:\n- name: proxy\n  context:\n    cluster: proxy\n    user: nodewright\ncurrent-context: proxy\nusers:\n- name: nodewright\n  user:\n    token: {}\n",
                proxy.url(),
                self.api.nodewright().token
            ),
        )
        .expect("write the proxy's kubeconfig");
        let config = Config {
            kubeconfig: Some(path.clone()),
            ..self.config.clone()
        };
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(path);
        (proxy, config)
    }

    /// Every request of the functions' identity so far, as the API server's audit log
    /// recorded it, in order.
    pub fn nodewright_requests(&self) -> Vec<Audited> {
        let field = |event: &Value, pointer: &str| {
            event
                .pointer(pointer)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        self.api
            .audit_events()
            .iter()
            .filter(|e| e["user"]["username"] == nodewright_kube::testing::NODEWRIGHT_USER)
            .map(|e| Audited {
                verb: field(e, "/verb"),
                resource: field(e, "/objectRef/resource"),
                subresource: field(e, "/objectRef/subresource"),
                namespace: field(e, "/objectRef/namespace"),
                name: field(e, "/objectRef/name"),
                code: e["responseStatus"]["code"].as_u64().unwrap_or(0) as u16,
            })
            .collect()
    }

    /// The functions' requests the API server refused, except those a working function
    /// meets in its stride: a deletion of what is already gone (404), a write that lost
    /// a race (409), an eviction a PodDisruptionBudget refused (429), a read the server
    /// shed under load (429 from API Priority and Fairness on a get, list or watch,
    /// which the client retries: seen on a watch with three control planes on two
    /// cores). Each described.
    pub fn unexpected_refusals(&self) -> Vec<String> {
        self.nodewright_requests()
            .into_iter()
            .filter(|r| r.code >= 400)
            .filter(|r| !(r.verb == "delete" && r.code == 404))
            .filter(|r| r.code != 409)
            .filter(|r| !(r.subresource == "eviction" && r.code == 429))
            .filter(|r| !(matches!(r.verb.as_str(), "get" | "list" | "watch") && r.code == 429))
            .map(|r| r.describe())
            .collect()
    }

    /// Narrows the functions' ClusterRole (`infra/rbac.yaml`'s `nodewright`): `resource`
    /// of the core group is no longer granted, as with an RBAC manifest older than the
    /// stack.
    pub async fn revoke(&self, resource: &str) {
        self.api
            .modify("ClusterRole", None, "nodewright", |role| {
                let rules = role["rules"].as_array_mut().expect("the role's rules");
                for rule in rules.iter_mut() {
                    if let Some(resources) = rule["resources"].as_array_mut() {
                        resources.retain(|r| r != resource);
                    }
                }
                rules.retain(|rule| {
                    rule["resources"].as_array().is_none_or(|r| !r.is_empty())
                        || rule["nonResourceURLs"].is_array()
                });
            })
            .await
            .expect("the nodewright ClusterRole");
    }

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
