//! The world a function runs against: moto (DynamoDB table, tagged network, EKS
//! cluster, one EC2 instance per node tagged as nodewright tags its own, one
//! Initialized claim per node written through `DynamoStore`) and the fake Kubernetes
//! API server holding the cluster of [`super::cluster`], on its own thread and
//! runtime so that serving large lists never stalls the bench's proxies.

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
    REGION, create_table_from_definition, eks_cluster, network, node_role, sdk_config, tag_spec,
    unique,
};
use nodewright_core::catalog::CapacityType;
use nodewright_core::nodeclaim::{ClaimSpec, ClaimState, NodeClaim};
use nodewright_engine::ports::Store;
use nodewright_kube::fake::FakeApiServer;
use tokio::task::JoinSet;

use super::cluster::{self, NODE_ROLE, NODE_TYPE, NODECLASS, NODEPOOL, NodeSpec};

/// Concurrent requests to moto while setting up (it serves on a thread per request;
/// DynamoDB one request at a time, see tests/moto_server.py).
const SETUP_WORKERS: usize = 8;
/// Claims and nodes are an hour old: past consolidateAfter, so every node is a
/// disruption candidate from the first run.
const AGE_SECS: i64 = 3600;
/// How often a watch that allows bookmarks gets one (kube-apiserver: about a minute).
const BOOKMARK_INTERVAL: Duration = Duration::from_secs(60);

pub struct World {
    pub cluster: String,
    pub table: String,
    pub ssm_prefix: String,
    pub nodes: usize,
    pub pods: usize,
    pub api: Arc<FakeApiServer>,
    _runtime: FakeApiRuntime,
}

impl World {
    /// Builds everything for `nodes` nodes; progress on stderr.
    pub async fn build(moto: &str, nodes: usize) -> Result<World, String> {
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
        write_claims(moto, &table, &specs, &instance_ids).await?;

        let (api, runtime) = start_fake_api()?;
        let mut pods = 0;
        api.with_store(|store| {
            cluster::objects(&cluster, &specs, &instance_ids, |object| {
                pods += usize::from(object["kind"] == "Pod");
                store.put(object);
            })
        })?;
        // The loading is history nobody watched: forget it, as etcd compacts.
        api.compact();
        // A real API server sends a watch a bookmark about once a minute; the fake's
        // default (every second) would cost the function CPU it never spends on EKS.
        api.set_bookmark_interval(BOOKMARK_INTERVAL);
        eprintln!(
            "  world ready in {:.0} s: {nodes} nodes, {pods} pods",
            started.elapsed().as_secs_f64()
        );
        Ok(World {
            cluster,
            table,
            ssm_prefix: net.ssm_prefix,
            nodes,
            pods,
            api,
            _runtime: runtime,
        })
    }

    /// A kubeconfig for `server` (the counting proxy in front of the fake).
    pub fn write_kubeconfig(&self, dir: &Path, server: &str) -> Result<PathBuf, String> {
        let path = dir.join(format!("{}.kubeconfig", self.cluster));
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: bench\n  cluster:\n    server: {server}\ncontexts:\n- name: bench\n  context:\n    cluster: bench\n    user: bench\ncurrent-context: bench\nusers:\n- name: bench\n  user:\n    token: bench\n"
            ),
        )
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        Ok(path)
    }
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
/// through each transition (the state machine's own steps), then written once.
async fn write_claims(
    moto: &str,
    table: &str,
    specs: &[NodeSpec],
    instance_ids: &[String],
) -> Result<(), String> {
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
    Ok(())
}

/// Keeps the fake API server's runtime alive; dropping it ends the runtime (and with
/// it every connection the server holds) and its thread.
pub struct FakeApiRuntime {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for FakeApiRuntime {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The fake API server on its own OS thread and multi-thread runtime.
fn start_fake_api() -> Result<(Arc<FakeApiServer>, FakeApiRuntime), String> {
    let (tx, rx) = std::sync::mpsc::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("fake-api-server".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(e) => {
                    let _ = tx.send(Err(format!("fake API server runtime: {e}")));
                    return;
                }
            };
            runtime.block_on(async move {
                match FakeApiServer::start().await {
                    Ok(server) => {
                        let _ = tx.send(Ok(Arc::new(server)));
                        let _ = stopped.await;
                    }
                    Err(e) => {
                        let _ = tx.send(Err(format!("fake API server: {e}")));
                    }
                }
            })
        })
        .map_err(|e| format!("cannot start the fake API server's thread: {e}"))?;
    let api = rx
        .recv()
        .map_err(|_| "the fake API server's thread ended".to_string())??;
    Ok((
        api,
        FakeApiRuntime {
            stop: Some(stop),
            thread: Some(thread),
        },
    ))
}
