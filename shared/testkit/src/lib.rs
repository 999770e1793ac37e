//! An emulated EKS cluster for end-to-end tests of the Lambda handlers: moto for
//! DynamoDB, EC2, SSM and EKS (tests/moto.sh), a real Kubernetes control plane for the
//! cluster (etcd, kube-apiserver, kube-controller-manager, kube-scheduler and KWOK as
//! every node's kubelet: `nodewright_kube::testing`), reached through
//! `NODEWRIGHT_KUBECONFIG` as the functions' own identity, and the `Config` the
//! handlers are built from. Test-only: the function crates take it as a
//! dev-dependency, no Lambda binary links it, and it depends on no function crate (a
//! test hands it the handler it exercises).
//!
//! - [`emulated_cluster`]: the world, with a NodePool and a Deployment whose pods
//!   kube-scheduler found no node for; [`web_deployment`] for more workloads;
//! - [`ClusterBehaviour`] (`behaviour`): what EKS does outside Kubernetes over time —
//!   instances joining as nodes, EC2 taking instances back, the cloud controller
//!   deleting their nodes: the simulator's model of it (`nodewright_sim::eks`), its
//!   writes carried out on moto and the control plane — and an observer of every pod
//!   and PodDisruptionBudget, so a test can assert where a job *ends*;
//! - [`ProvisionerSchedule`]: the provisioner invoked back to back as its schedule
//!   would, with what each invocation left behind;
//! - [`lambda_context`], [`scheduled_event`], [`wait_until`] and the accessors on
//!   [`EmulatedCluster`] (claims, live instances, the functions' requests as the audit
//!   log recorded them, a fault proxy in front of the API server).

mod behaviour;
mod emulated;
mod schedule;

pub use behaviour::{ClusterBehaviour, GoneBy, InstanceLife, PodLife, Timings};
pub use emulated::{
    Audited, AwsView, EmulatedCluster, NODE_LEASE_SECONDS, NODE_ROLE, control_plane_options,
    emulated_cluster, emulated_cluster_with, marked_unschedulable, node_daemon_set, web_deployment,
};
pub use schedule::{Invocation, ProvisionerSchedule};

use std::future::Future;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lambda_runtime::{Context, LambdaEvent};
use serde_json::{Value, json};

use nodewright_aws::testing::unique;

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

/// What EventBridge's schedule delivers, to an invocation that times out `timeout`
/// from now.
pub fn scheduled_event(timeout: Duration) -> LambdaEvent<Value> {
    LambdaEvent::new(
        json!({"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}}),
        lambda_context(timeout),
    )
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
