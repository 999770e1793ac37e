//! The kubelet's writes ([`nodewright_sim::eks::KubeletWrite`]) carried out on a real
//! control plane: the Node it registers, and its lease, which decides whether KWOK
//! plays the node (Ready, its lease renewed, its pods run).
//!
//! KWOK (v0.8) only plays a node it saw *created* with its annotation, and only while
//! it holds the node's Lease in `kube-node-lease`; a lease held by someone else stops
//! it (it tries again once that lease expires). Adding or removing the annotation
//! later changes nothing. So a kubelet's life is its lease:
//! - **booting**: the Node is created with KWOK's annotation, Ready=False, while this
//!   kubelet holds the Lease (renewing it: a booting kubelet heartbeats), so KWOK
//!   leaves the node alone and the node lifecycle controller keeps it not-ready;
//! - **running**: the Lease is deleted; KWOK takes it within a quarter of its lease
//!   duration and turns the node Ready;
//! - **stopped** (the instance went): the Lease is taken with a duration KWOK will not
//!   outlive and never renewed, so KWOK stops playing the node and its pods (a pod
//!   deleted there stays Terminating), and the node lifecycle controller marks it
//!   unreachable after its grace period.

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde_json::{Value, json};

use nodewright_core::api::model::{Taint, TaintEffect};
use nodewright_core::api::{self, Document, NodePool};
use nodewright_core::catalog::Catalog;
use nodewright_core::interruption::format_rfc3339;
use nodewright_core::resources::Resources;
use nodewright_core::well_known::{LABEL_NODECLAIM, LABEL_NODEPOOL, TAINT_UNREGISTERED};
use nodewright_kube::testing::{ControlPlane, objects};
use nodewright_sim::eks::{JoiningInstance, joining_node};

use super::ec2::Ec2Instance;

const LEASE_NAMESPACE: &str = "kube-node-lease";
/// Who holds a booting kubelet's lease.
const BOOTING: &str = "testkit-kubelet-booting";
/// Who holds a stopped kubelet's lease, and for how long: longer than any test.
const STOPPED: &str = "testkit-kubelet-stopped";
const STOPPED_FOR_SECONDS: i64 = 365 * 24 * 3600;

/// The Node the kubelet registers ([`joining_node`], the simulator's model of it) as
/// the API server takes it: the labels Karpenter's user data passes (the NodePool and
/// NodeClaim from the instance's tags, its capacity type), the taints it registers with
/// (`karpenter.sh/unregistered`, the NodePool's taints and startup taints), its
/// addresses, Ready=False, and KWOK's annotation so that KWOK plays it once it may.
pub(super) fn registration(
    instance: &Ec2Instance,
    pool: Option<&NodePool>,
    catalog: &Catalog,
    kwok_annotation: (&str, &str),
) -> Value {
    let name = node_name(instance);
    let labels: BTreeMap<String, String> = [LABEL_NODEPOOL, LABEL_NODECLAIM]
        .into_iter()
        .filter_map(|key| Some((key.to_string(), instance.tags.get(key)?.clone())))
        .collect();
    let unregistered = Taint {
        key: TAINT_UNREGISTERED.into(),
        value: None,
        effect: TaintEffect::NoExecute,
    };
    let taints: Vec<Taint> = std::iter::once(unregistered)
        .chain(
            pool.into_iter()
                .flat_map(|pool| pool.taints.iter().chain(&pool.startup_taints).cloned()),
        )
        .collect();
    let node = joining_node(
        &name,
        &JoiningInstance {
            id: &instance.id,
            zone: &instance.zone,
            instance_type: &instance.instance_type,
            capacity_type: instance.capacity_type,
        },
        &labels,
        &taints,
        catalog,
    );
    let now = format_rfc3339(unix_now());
    let mut addresses = vec![json!({"type": "Hostname", "address": name})];
    if !instance.private_ip.is_empty() {
        addresses.insert(
            0,
            json!({"type": "InternalIP", "address": instance.private_ip}),
        );
    }
    let taints: Vec<Value> = node
        .taints
        .iter()
        .map(|t| {
            let mut wire = json!({"key": t.key, "effect": t.effect.as_str()});
            if let Some(value) = &t.value {
                wire["value"] = json!(value);
            }
            wire
        })
        .collect();
    // The boot id is KWOK's to report (it writes the node's status.nodeInfo).
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": node.name,
            "labels": node.labels,
            "annotations": {kwok_annotation.0: kwok_annotation.1},
        },
        "spec": {"providerID": node.provider_id, "taints": taints},
        "status": {
            "allocatable": resources(&node.allocatable),
            "capacity": resources(&node.capacity),
            "addresses": addresses,
            "conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady",
                "message": "container runtime network not ready",
                "lastHeartbeatTime": now, "lastTransitionTime": now}],
        }
    })
}

/// The Node's name: the instance's private DNS name.
pub(super) fn node_name(instance: &Ec2Instance) -> String {
    if instance.private_dns.is_empty() {
        format!("ip-{}.ec2.internal", instance.id.trim_start_matches("i-"))
    } else {
        instance.private_dns.clone()
    }
}

fn resources(r: &Resources) -> Value {
    r.iter()
        .map(|(k, milli)| (k.to_string(), Value::String(quantity(k, milli))))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// A quantity as the kubelet writes it, exactly: cpu in millicores, bytes in Mi when
/// whole, counts as integers.
pub(super) fn quantity(name: &str, milli: i64) -> String {
    match name {
        "cpu" => format!("{milli}m"),
        "memory" | "ephemeral-storage" => {
            let bytes = milli / 1000;
            if bytes % (1 << 20) == 0 {
                format!("{}Mi", bytes >> 20)
            } else {
                bytes.to_string()
            }
        }
        _ => (milli / 1000).to_string(),
    }
}

/// The NodePool `name` as the provisioner reads it, validated with the EC2NodeClasses
/// that are valid on their own: where the registration's taints come from.
pub(super) fn node_pool(pool: &Value, classes: &[Value]) -> Result<NodePool, String> {
    let document = |index: usize, value: &Value| Document {
        source: "the control plane".to_string(),
        index,
        value: value.clone(),
    };
    let classes = classes
        .iter()
        .enumerate()
        .map(|(i, class)| document(i + 1, class))
        .filter(|class| api::validate(std::slice::from_ref(class)).is_ok());
    let documents: Vec<Document> = std::iter::once(document(0, pool)).chain(classes).collect();
    let manifests = api::validate(&documents).map_err(|problems| {
        problems
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    })?;
    manifests
        .node_pools
        .into_iter()
        .next()
        .ok_or_else(|| "not a NodePool".to_string())
}

/// Registers the instance's Node while holding its lease (booting). Returns the Node's
/// name.
pub(super) async fn register(
    api: &ControlPlane,
    instance: &Ec2Instance,
    catalog: &Catalog,
) -> Result<String, String> {
    let pool = match instance.tags.get("karpenter.sh/nodepool") {
        Some(name) => {
            let pool = objects::get(api.admin(), "NodePool", None, name)
                .await
                .map_err(|e| format!("reading NodePool {name}: {e}"))?
                .ok_or_else(|| format!("NodePool {name:?} of {} not found", instance.id))?;
            let classes = objects::list(api.admin(), "EC2NodeClass")
                .await
                .map_err(|e| format!("listing EC2NodeClasses: {e}"))?;
            Some(node_pool(&pool, &classes).map_err(|e| format!("NodePool {name}: {e}"))?)
        }
        None => None,
    };
    let annotation = api
        .info()
        .kwok_node_annotation
        .split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .expect("KWOK's annotation is key=value");
    let node = registration(
        instance,
        pool.as_ref(),
        catalog,
        (&annotation.0, &annotation.1),
    );
    let name = node_name(instance);
    hold_lease(api, &name, BOOTING, 3600).await?;
    objects::put(api.admin(), node)
        .await
        .map_err(|e| format!("registering Node {name}: {e}"))?;
    Ok(name)
}

/// A booting kubelet's heartbeat: its lease renewed.
pub(super) async fn heartbeat(api: &ControlPlane, node: &str) -> Result<(), String> {
    hold_lease(api, node, BOOTING, 3600).await
}

/// The kubelet finished booting: its lease is given up, and KWOK takes it.
pub(super) async fn release(api: &ControlPlane, node: &str) -> Result<(), String> {
    objects::remove(api.admin(), "Lease", Some(LEASE_NAMESPACE), node)
        .await
        .map(|_| ())
        .map_err(|e| format!("releasing the lease of {node}: {e}"))
}

/// The kubelet stopped: its lease is taken from KWOK for good and never renewed.
pub(super) async fn stop(api: &ControlPlane, node: &str) -> Result<(), String> {
    hold_lease(api, node, STOPPED, STOPPED_FOR_SECONDS).await
}

/// Writes the node's lease as held by `holder` for `seconds` from now, creating it or
/// taking it over (under optimistic concurrency: a KWOK renewal in between loses).
async fn hold_lease(
    api: &ControlPlane,
    node: &str,
    holder: &str,
    seconds: i64,
) -> Result<(), String> {
    let spec = json!({
        "holderIdentity": holder,
        "leaseDurationSeconds": seconds,
        "renewTime": micro_time(SystemTime::now()),
    });
    let changed = objects::modify(api.admin(), "Lease", Some(LEASE_NAMESPACE), node, |lease| {
        lease["spec"] = spec.clone();
    })
    .await
    .map_err(|e| format!("the lease of {node}: {e}"))?;
    if changed.is_none() {
        objects::put(
            api.admin(),
            json!({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": node, "namespace": LEASE_NAMESPACE},
                "spec": spec,
            }),
        )
        .await
        .map_err(|e| format!("the lease of {node}: {e}"))?;
    }
    Ok(())
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// A `metav1.MicroTime` (a lease's renewTime must carry its microseconds).
fn micro_time(at: SystemTime) -> String {
    let since = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let seconds = format_rfc3339(since.as_secs() as i64);
    let stem = seconds.trim_end_matches('Z');
    format!("{stem}.{:06}Z", since.subsec_micros())
}

#[cfg(test)]
pub(super) fn micro_time_for_tests(at: SystemTime) -> String {
    micro_time(at)
}
