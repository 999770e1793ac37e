//! The kubelets and the node lifecycle controller: an instance's Node registers, turns
//! Ready, and goes Unknown, its pods with it, when the instance goes.

use std::collections::BTreeMap;
use std::time::Instant;

use nodewright_core::api::model::{Taint, TaintEffect};
use nodewright_core::catalog::Catalog;
use nodewright_kube::fake::Store;

use super::controllers::remove_pods_on;
use super::ec2::Ec2Instance;
use super::write::{self, Registration};
use super::{
    GoneBy, InstanceLife, Record, TAINT_NOT_READY, TAINT_UNREACHABLE, TAINT_UNREGISTERED, Timings,
    read,
};

/// The kubelets and the node lifecycle controller. Returns the uids of pods lost with
/// their instance.
pub(super) fn kubelets(
    store: &mut Store,
    record: &mut Record,
    instances: &[Ec2Instance],
    catalog: &Catalog,
    timings: Timings,
    now: Instant,
) -> Vec<String> {
    let mut lost_nodes = Vec::new();
    let hold_ready = record.hold_ready;
    for instance in instances {
        let life = record
            .instances
            .entry(instance.id.clone())
            .or_insert_with(|| InstanceLife::new(&instance.id, now));
        if instance.is_gone() {
            if life.gone_at.is_none() {
                life.gone_at = Some(now);
                if let Some(node) = &life.node {
                    lost_nodes.push((node.clone(), instance.id.clone()));
                }
            }
            continue;
        }
        if instance.state != "running" {
            continue; // pending: still booting
        }
        match (life.registered_at, &life.node, life.ready_at) {
            (None, _, _) if now >= life.first_seen + timings.register_after => {
                let node = registration(store, instance, catalog, &mut record.errors);
                life.node = Some(node.name.clone());
                life.registered_at = Some(now);
                write::register_node(store, node);
            }
            (Some(at), Some(node), None) if !hold_ready && now >= at + timings.ready_after => {
                write::set_ready(store, node);
                life.ready_at = Some(now);
            }
            _ => {}
        }
    }
    let mut lost = Vec::new();
    for (node, instance) in lost_nodes {
        write::set_unreachable(
            store,
            &node,
            &taint(TAINT_UNREACHABLE, TaintEffect::NoSchedule),
        );
        lost.extend(remove_pods_on(
            store,
            record,
            &node,
            GoneBy::InstanceLost(instance),
            now,
        ));
    }
    lost
}

/// The Node the kubelet registers, as Karpenter's user data configures it: named like
/// the instance's private DNS name, the labels the kubelet and the user data set, the
/// taints Karpenter registers with, allocatable and capacity of its type.
fn registration<'c>(
    store: &Store,
    instance: &Ec2Instance,
    catalog: &'c Catalog,
    errors: &mut Vec<String>,
) -> Registration<'c> {
    let name = if instance.private_dns.is_empty() {
        format!("ip-{}.ec2.internal", instance.id.trim_start_matches("i-"))
    } else {
        instance.private_dns.clone()
    };
    let it = catalog.get(&instance.instance_type);
    let mut labels = BTreeMap::from([
        ("kubernetes.io/hostname".to_string(), name.clone()),
        (
            "topology.kubernetes.io/zone".to_string(),
            instance.zone.clone(),
        ),
        (
            "topology.kubernetes.io/region".to_string(),
            instance
                .zone
                .trim_end_matches(|c: char| c.is_ascii_lowercase())
                .to_string(),
        ),
        (
            "node.kubernetes.io/instance-type".to_string(),
            instance.instance_type.clone(),
        ),
    ]);
    for key in ["kubernetes.io/arch", "kubernetes.io/os"] {
        if let Some(v) = it.and_then(|t| t.labels.get(key)) {
            labels.insert(key.to_string(), v.clone());
        }
    }
    for key in ["karpenter.sh/nodepool", "karpenter.sh/nodeclaim"] {
        if let Some(v) = instance.tags.get(key) {
            labels.insert(key.to_string(), v.clone());
        }
    }
    let mut taints = vec![taint(TAINT_UNREGISTERED, TaintEffect::NoExecute)];
    if let Some(pool) = instance.tags.get("karpenter.sh/nodepool") {
        let pool = read::noted(read::node_pool(store, pool), errors);
        if let Some(pool) = pool {
            taints.extend(pool.taints);
            taints.extend(pool.startup_taints);
        }
    }
    taints.push(taint(TAINT_NOT_READY, TaintEffect::NoSchedule));
    Registration {
        provider_id: format!("aws:///{}/{}", instance.zone, instance.id),
        name,
        labels,
        taints,
        allocatable: it.map(|t| &t.allocatable),
        capacity: it.map(|t| &t.capacity),
    }
}

/// A taint with no value.
fn taint(key: &str, effect: TaintEffect) -> Taint {
    Taint {
        key: key.to_string(),
        value: None,
        effect,
    }
}
