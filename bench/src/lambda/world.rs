//! The world a function runs against: moto (DynamoDB table, tagged network, EKS
//! cluster, one EC2 instance per node tagged as nodewright tags its own, one
//! Initialized claim per node written through `DynamoStore`) and a real Kubernetes
//! control plane — etcd and kube-apiserver only, with Karpenter's CRDs and the
//! functions' RBAC, so that the objects stay exactly as written — holding the cluster
//! of [`super::cluster`] and each claim's NodeClaim as the functions mirror it,
//! written through the API ([`super::load`]).

use nodewright_engine::ports::ClaimStore;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_sdk_ec2::types::{InstanceType, ResourceType};
use nodewright_aws::DynamoStore;
use nodewright_aws::tags::{
    MANAGED_BY, TAG_EKS_CLUSTER, TAG_MANAGED_BY, TAG_NODECLAIM, TAG_NODECLASS, TAG_NODEPOOL,
    cluster_tag_key,
};
use nodewright_aws::testing::{
    REGION, SdkConfig, create_table_from_definition, eks_cluster, network, node_role, sdk_config,
    tag_spec, unique,
};
use nodewright_core::catalog::CapacityType;
use nodewright_core::nodeclaim::{ClaimSpec, ClaimState, NodeClaim};
use nodewright_kube::mirror::mirror_of;
use nodewright_kube::testing::{ControlPlane, Options};
use serde_json::Value;
use tokio::task::JoinSet;

use super::cluster::{
    self, CONSOLIDATE_AFTER_SECS, NODE_ROLE, NODE_TYPE, NODECLASS, NODEPOOL, NodeSpec,
};
use super::load::{self, Loaded};
use super::process;
use super::server::ServerProcesses;

/// Concurrent requests to moto while setting up (it serves on a thread per request;
/// DynamoDB one request at a time, see tests/moto_server.py).
const SETUP_WORKERS: usize = 8;
/// Claims and nodes are an hour old: past consolidateAfter, so every node is a
/// disruption candidate from the first run.
const AGE_SECS: i64 = 3600;
pub struct World {
    pub cluster: String,
    pub table: String,
    pub ssm_prefix: String,
    pub nodes: usize,
    pub pods: usize,
    /// Writing the Kubernetes objects through the API.
    pub loaded: Loaded,
    /// kube-apiserver's and etcd's processes, measured.
    pub server: ServerProcesses,
    pub control_plane: ControlPlane,
    /// The bench's own writes (cluster-admin, unpaced).
    admin: kube::Client,
}

impl World {
    /// Builds everything for `nodes` nodes; progress on stderr. `consolidating`: the
    /// function consolidates, so its world waits until consolidateAfter has elapsed for
    /// every pod written (the provisioner's does not).
    pub async fn build(moto: &str, nodes: usize, consolidating: bool) -> Result<World, String> {
        let started = Instant::now();
        let cluster = unique("bench");
        let table = unique("bench-table");
        create_table_from_definition(moto, &table).await;
        let net = network(moto, &cluster).await;
        node_role(moto, NODE_ROLE).await;
        let config = sdk_config(moto).await;
        let ec2 = aws_sdk_ec2::Client::new(&config);
        eks_cluster(moto, &cluster, &net.subnet_a).await?;
        let subnets = node_subnets(&ec2, &cluster, &net.subnet_a).await?;

        let specs = cluster::node_specs(nodes);
        eprintln!("  launching {nodes} instances in moto");
        let instance_ids = launch(
            &ec2,
            &cluster,
            &net.ami_amd64,
            &net.security_group,
            &subnets,
            &specs,
        )
        .await?;
        eprintln!("  writing {nodes} claims");
        let claims = write_claims(moto, &table, &specs, &instance_ids).await?;

        eprintln!("  starting a control plane (etcd, kube-apiserver)");
        let control_plane = ControlPlane::start_with(Options::api_server_only()).await;
        publish_images(
            &config,
            &net.ssm_prefix,
            &control_plane.info().kubernetes_version,
            &[("x86_64", &net.ami_amd64), ("arm64", &net.ami_arm64)],
        )
        .await?;
        let server = ServerProcesses::watch(&control_plane)?;
        let admin = load::admin_client(&control_plane)?;
        let objects = {
            let (cluster, specs, instance_ids) = (cluster.clone(), specs.clone(), instance_ids);
            move |put: &mut dyn FnMut(Value)| {
                cluster::objects(&cluster, &specs, &instance_ids, &mut *put)?;
                // Each claim's NodeClaim as the functions mirror it when they create the
                // claim: a steady cluster has them all, so no invocation writes any.
                for mirror in claims.iter().filter_map(mirror_of) {
                    let mut object = mirror.object();
                    object["status"] = mirror.status_patch()["status"].take();
                    put(object);
                }
                Ok(())
            }
        };
        let own_cpu = || process::cpu_seconds(std::process::id(), process::ticks_per_second());
        let cpu_before = (server.cpu_seconds()?, own_cpu()?);
        let mut loaded = load::load(&admin, "loading the cluster", objects).await?;
        loaded.server_cpu_s = server.cpu_seconds()? - cpu_before.0;
        loaded.bench_cpu_s = own_cpu()? - cpu_before.1;
        eprintln!(
            "  loaded {} objects ({} pods) in {:.0} s: {} requests, {:.0} a second; CPU-s: kube-apiserver and etcd {:.0}, the bench {:.0}",
            loaded.objects,
            loaded.pods,
            loaded.seconds,
            loaded.requests,
            loaded.requests as f64 / loaded.seconds,
            loaded.server_cpu_s,
            loaded.bench_cpu_s
        );
        let loaded_at = Instant::now();
        // The loading is history nobody watched: compact it away, as kube-apiserver has
        // etcd do every 5 minutes.
        control_plane.compact().await;
        // The API server stamps each object with the time it was written (a fixture
        // cannot backdate `creationTimestamp`), and the disruption function counts a
        // node's consolidateAfter from its newest pod's creation. In a steady cluster
        // every node is past it: wait until these are (the machine settles from the
        // loading meanwhile).
        if consolidating {
            let settle = Duration::from_secs(CONSOLIDATE_AFTER_SECS + 5);
            eprintln!(
                "  waiting {} s: consolidateAfter elapses for the pods just written",
                settle.saturating_sub(loaded_at.elapsed()).as_secs()
            );
            tokio::time::sleep(settle.saturating_sub(loaded_at.elapsed())).await;
        }
        eprintln!(
            "  world ready in {:.0} s: {nodes} nodes, {} pods",
            started.elapsed().as_secs_f64(),
            loaded.pods
        );
        Ok(World {
            cluster,
            table,
            ssm_prefix: net.ssm_prefix,
            nodes,
            pods: loaded.pods,
            loaded,
            server,
            control_plane,
            admin,
        })
    }

    /// Writes `objects` into the cluster (as its administrator, not as the function).
    pub async fn put(&self, objects: Vec<Value>) -> Result<Loaded, String> {
        load::load(&self.admin, "writing", move |put: &mut dyn FnMut(Value)| {
            objects.into_iter().for_each(put);
            Ok(())
        })
        .await
    }

    /// A kubeconfig for `server` (the counting proxy in front of the control plane,
    /// plain HTTP) with the functions' identity: the `nodewright` user's token, in the
    /// group `infra/rbac.yaml` binds.
    pub fn write_kubeconfig(&self, dir: &Path, server: &str) -> Result<PathBuf, String> {
        let path = dir.join(format!("{}.kubeconfig", self.cluster));
        let token = &self.control_plane.nodewright().token;
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: bench\n  cluster:\n    server: {server}\ncontexts:\n- name: bench\n  context:\n    cluster: bench\n    user: nodewright\ncurrent-context: bench\nusers:\n- name: nodewright\n  user:\n    token: {token}\n"
            ),
        )
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        Ok(path)
    }
}

/// The EKS-optimized AMI parameters for the control plane's Kubernetes version
/// (`v1.36.3` → `1.36`; the test network publishes them for the version the tests'
/// EKS clusters run), naming the test network's images: the function reads the
/// version from `/version`, so the EC2NodeClass's `al2023@latest` resolves to the
/// image the nodes' instances run, the NodeClass is Ready and no node has drifted.
async fn publish_images(
    config: &SdkConfig,
    ssm_prefix: &str,
    server_version: &str,
    images: &[(&str, &str)],
) -> Result<(), String> {
    let minor = server_version
        .trim_start_matches('v')
        .split('.')
        .take(2)
        .collect::<Vec<_>>()
        .join(".");
    let ssm = aws_sdk_ssm::Client::new(config);
    for (arch, image) in images {
        let name = format!(
            "{ssm_prefix}/eks/optimized-ami/{minor}/amazon-linux-2023/{arch}/standard/recommended/image_id"
        );
        ssm.put_parameter()
            .name(&name)
            .value(*image)
            .r#type(aws_sdk_ssm::types::ParameterType::String)
            .overwrite(true)
            .send()
            .await
            .map_err(|e| format!("PutParameter {name}: {e:?}"))?;
    }
    Ok(())
}

/// One subnet per zone of [`cluster::ZONES`], large enough for 10,000 nodes (the test
/// network's are a few hundred addresses), tagged for the cluster so the
/// EC2NodeClass selects them and the nodes in them do not drift.
async fn node_subnets(
    ec2: &aws_sdk_ec2::Client,
    cluster: &str,
    any_subnet: &str,
) -> Result<Vec<String>, String> {
    let vpc = ec2
        .describe_subnets()
        .subnet_ids(any_subnet)
        .send()
        .await
        .map_err(|e| format!("DescribeSubnets: {e:?}"))?
        .subnets()
        .first()
        .and_then(|s| s.vpc_id().map(str::to_string))
        .ok_or("the test network's subnet has no VPC")?;
    let mut subnets = Vec::new();
    for (zone, cidr) in cluster::ZONES.iter().zip(["10.0.64.0/18", "10.0.128.0/18"]) {
        let subnet = ec2
            .create_subnet()
            .vpc_id(&vpc)
            .cidr_block(cidr)
            .availability_zone(*zone)
            .tag_specifications(tag_spec(
                ResourceType::Subnet,
                &[("karpenter.sh/discovery", cluster)],
            ))
            .send()
            .await
            .map_err(|e| format!("CreateSubnet {cidr}: {e:?}"))?
            .subnet
            .and_then(|s| s.subnet_id)
            .ok_or("CreateSubnet returned no id")?;
        subnets.push(subnet);
    }
    Ok(subnets)
}

/// RunInstances once per node (each instance has its own `karpenter.sh/nodeclaim`
/// tag), [`SETUP_WORKERS`] at a time. The instance ids, in node order.
async fn launch(
    ec2: &aws_sdk_ec2::Client,
    cluster: &str,
    image: &str,
    security_group: &str,
    subnets: &[String],
    specs: &[NodeSpec],
) -> Result<Vec<String>, String> {
    let mut tasks = JoinSet::new();
    for worker in 0..SETUP_WORKERS {
        let mine: Vec<NodeSpec> = specs
            .iter()
            .skip(worker)
            .step_by(SETUP_WORKERS)
            .cloned()
            .collect();
        let ec2 = ec2.clone();
        let (cluster, image, security_group) = (
            cluster.to_string(),
            image.to_string(),
            security_group.to_string(),
        );
        let subnets = subnets.to_vec();
        tasks.spawn(async move {
            let mut ids = Vec::new();
            for node in mine {
                let zone = cluster::ZONES
                    .iter()
                    .position(|z| *z == node.zone)
                    .unwrap_or(0);
                let cluster_tag = cluster_tag_key(&cluster);
                let tags = [
                    (cluster_tag.as_str(), "owned"),
                    (TAG_EKS_CLUSTER, cluster.as_str()),
                    (TAG_NODEPOOL, NODEPOOL),
                    (TAG_NODECLASS, NODECLASS),
                    (TAG_MANAGED_BY, MANAGED_BY),
                    (TAG_NODECLAIM, node.claim.as_str()),
                ];
                let out = ec2
                    .run_instances()
                    .image_id(&image)
                    .instance_type(InstanceType::from(NODE_TYPE))
                    .min_count(1)
                    .max_count(1)
                    .subnet_id(&subnets[zone])
                    .security_group_ids(&security_group)
                    .tag_specifications(tag_spec(ResourceType::Instance, &tags))
                    .send()
                    .await
                    .map_err(|e| format!("RunInstances for {}: {e:?}", node.name))?;
                let id = out
                    .instances()
                    .first()
                    .and_then(|i| i.instance_id())
                    .ok_or("RunInstances returned no instance")?
                    .to_string();
                ids.push((node.index, id));
            }
            Ok::<_, String>(ids)
        });
    }
    let mut ids = vec![String::new(); specs.len()];
    while let Some(done) = tasks.join_next().await {
        for (index, id) in done.map_err(|e| format!("a launch task failed: {e}"))?? {
            ids[index] = id;
        }
    }
    Ok(ids)
}

/// One claim per node, Initialized as nodewright leaves it: made Launching and taken
/// through each transition (the state machine's own steps), then written once. The
/// claims, in node order.
async fn write_claims(
    moto: &str,
    table: &str,
    specs: &[NodeSpec],
    instance_ids: &[String],
) -> Result<Vec<NodeClaim>, String> {
    let store = Arc::new(DynamoStore::new(
        &nodewright_aws::AwsContext::for_emulator(moto, REGION).await,
        table,
    ));
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let then = now - AGE_SECS;
    let price = cluster::node_type()?.on_demand_price;
    let mut claims = Vec::new();
    for (node, instance_id) in specs.iter().zip(instance_ids) {
        let spec = ClaimSpec {
            name: node.claim.clone(),
            node_pool: NODEPOOL.into(),
            node_class: NODECLASS.into(),
            instance_type_options: vec![NODE_TYPE.into()],
            zones: vec![node.zone.into()],
            capacity_types: vec![CapacityType::OnDemand],
            pods: vec![],
            labels: Default::default(),
        };
        let claim = NodeClaim::launching(spec, then)
            .transition(ClaimState::Launched, then, |c| {
                c.instance_id = Some(instance_id.clone());
                c.instance_type = Some(NODE_TYPE.into());
                c.zone = Some(node.zone.into());
                c.capacity_type = Some(CapacityType::OnDemand);
                c.price_per_hour = price;
                c.launched_at = Some(then);
            })
            .and_then(|c| {
                c.transition(ClaimState::Registered, then, |c| {
                    c.node_name = Some(node.name.clone());
                    c.registered_at = Some(then);
                })
            })
            .and_then(|c| {
                c.transition(ClaimState::Initialized, then, |c| {
                    c.initialized_at = Some(then);
                })
            })
            .map_err(|e| e.to_string())?;
        claims.push(claim);
    }
    let mut tasks = JoinSet::new();
    for worker in 0..SETUP_WORKERS {
        let mine: Vec<NodeClaim> = claims
            .iter()
            .skip(worker)
            .step_by(SETUP_WORKERS)
            .cloned()
            .collect();
        let store = store.clone();
        tasks.spawn(async move {
            for claim in mine {
                store
                    .create_claim(&claim)
                    .await
                    .map_err(|e| format!("create claim {}: {e}", claim.name))?;
            }
            Ok::<_, String>(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.map_err(|e| format!("a claim task failed: {e}"))??;
    }
    Ok(claims)
}
