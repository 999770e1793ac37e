//! The cloud's steps (the simulator's model: [`nodewright_sim::eks::cloud`]) carried
//! out on moto and the control plane: EC2 taking instances back at their time, and the
//! AWS cloud controller manager deleting the Node of an instance EC2 no longer has.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde_json::Value;

use nodewright_kube::testing::objects;
use nodewright_sim::eks::{NodeSeen, nodes_the_cloud_deletes};

use super::ec2::{self, Ec2Instance};
use super::{InstanceLife, Shared, ready_status};

/// EC2 reclaims the instances whose time has come (TerminateInstances, whatever their
/// state). True when it did.
pub(super) async fn reclaim_due(shared: &Shared) -> bool {
    let now = Instant::now();
    let due = {
        let mut record = shared.lock();
        let at = record.since_origin(now);
        record.reclaims.due(at)
    };
    if due.is_empty() {
        return false;
    }
    // Only instances still up are reclaimed by EC2; one already terminated by
    // nodewright is not "killed".
    let up = match ec2::describe(&shared.ec2, &shared.cluster).await {
        Ok(all) => all,
        Err(e) => {
            shared.note(format!("DescribeInstances: {e}"));
            return false;
        }
    };
    let alive: Vec<String> = due
        .into_iter()
        .filter(|id| up.iter().any(|i| &i.id == id && !i.is_gone()))
        .collect();
    if alive.is_empty() {
        return false;
    }
    match shared
        .ec2
        .terminate_instances()
        .set_instance_ids(Some(alive.clone()))
        .send()
        .await
    {
        Ok(_) => {
            let mut record = shared.lock();
            for id in alive {
                let life = record
                    .instances
                    .entry(id.clone())
                    .or_insert_with(|| InstanceLife::new(&id, now));
                life.killed = true;
            }
            true
        }
        Err(e) => {
            shared.note(format!("TerminateInstances: {e}"));
            false
        }
    }
}

/// How often the cloud node lifecycle controller looks (the AWS cloud controller
/// manager's `--node-monitor-period`).
const CLOUD_PERIOD: Duration = Duration::from_secs(5);

/// The cloud node lifecycle controller ([`nodes_the_cloud_deletes`]), every
/// [`CLOUD_PERIOD`]: a Node whose kubelet stopped (the node lifecycle controller
/// noticed: not Ready) and whose instance EC2 reports terminated is deleted.
pub(super) async fn delete_lost_nodes(shared: &Shared, instances: &[Ec2Instance], nodes: &[Value]) {
    {
        let mut record = shared.lock();
        if record
            .cloud_looked
            .is_some_and(|at| at.elapsed() < CLOUD_PERIOD)
        {
            return;
        }
        record.cloud_looked = Some(Instant::now());
    }
    let seen: Vec<NodeSeen<'_>> = nodes
        .iter()
        .map(|node| NodeSeen {
            name: node["metadata"]["name"].as_str().unwrap_or_default(),
            ready: ready_status(node) == "True",
            being_deleted: !node["metadata"]["deletionTimestamp"].is_null(),
            instance: node["spec"]["providerID"]
                .as_str()
                .and_then(|p| p.rsplit('/').next()),
        })
        .collect();
    let terminated: HashSet<&str> = instances
        .iter()
        .filter(|i| i.is_terminated())
        .map(|i| i.id.as_str())
        .collect();
    for name in nodes_the_cloud_deletes(&seen, &terminated) {
        match objects::remove(shared.api.admin(), "Node", None, name).await {
            Ok(Some(_)) => shared.lock().deleted_by_cloud.push(name.to_string()),
            Ok(None) => {}
            Err(e) => shared.note(format!("deleting Node {name}: {e}")),
        }
    }
}
