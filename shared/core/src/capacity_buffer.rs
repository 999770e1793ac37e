//! CapacityBuffer (`autoscaling.x-k8s.io/v1beta1`, Karpenter v1.14, Cluster Autoscaler's
//! API): spare room kept ready for pods that have not been created yet.
//!
//! A buffer names the shape of one chunk (a `v1` PodTemplate by `podTemplateRef`, or the
//! pod template of a Deployment, StatefulSet or ReplicaSet by `scalableRef`) and how
//! many chunks to keep (`replicas`, `percentage` of the workload's replicas, capped by
//! `limits`). Each chunk becomes a *virtual pod*: never created in the cluster, pending
//! in every provisioning pass after the real pods (the lowest priority), counted against
//! NodePool limits like any pod, and — where it fits on an existing node — holding that
//! room through disruption: a node with buffer room is not empty, a node with nothing
//! but buffer room is not a consolidation candidate, and a consolidation must fit the
//! room it displaces elsewhere. Conditions (`ReadyForProvisioning`, `Provisioning`) read
//! as Karpenter writes them.

use std::collections::BTreeMap;

use crate::api::buffer::{
    APPS_GROUP, BufferSource, CapacityBuffer, MAX_VIRTUAL_PODS, PodTemplate, SCALABLE_KINDS,
    VIRTUAL_POD_PRIORITY,
};
use crate::cluster::{ClusterSnapshot, Pod, ScalableWorkload};
use crate::provisioning::{ProvisioningInput, ProvisioningPlan, plan_provisioning};
use crate::resources::{PODS, Resources, WELL_KNOWN};

/// A buffer resolved against the cluster: its chunk and how many, or why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolution {
    pub buffer: String,
    pub outcome: Result<Resolved, NotReady>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// `status.replicas`: how many chunks to keep.
    pub replicas: i32,
    pub chunk: Pod,
    /// `status.podTemplateRef.name` and `status.podTemplateGeneration` (a
    /// `podTemplateRef` buffer only).
    pub pod_template: Option<(String, i64)>,
}

/// `ReadyForProvisioning=False`: the reason and message Karpenter writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotReady {
    /// `ResolutionFailed`, `PodTemplateNotFound` or `ScalableRefNotFound`.
    pub reason: &'static str,
    pub message: String,
}

/// Resolves each buffer against the PodTemplates and workloads it may name (same
/// namespace), as Karpenter's buffer controller does.
pub fn resolve_buffers(
    buffers: &[CapacityBuffer],
    templates: &[PodTemplate],
    workloads: &[ScalableWorkload],
) -> Vec<Resolution> {
    buffers
        .iter()
        .map(|b| Resolution {
            buffer: b.key(),
            outcome: resolve(b, templates, workloads),
        })
        .collect()
}

fn resolve(
    buffer: &CapacityBuffer,
    templates: &[PodTemplate],
    workloads: &[ScalableWorkload],
) -> Result<Resolved, NotReady> {
    let not_ready = |reason, message: String| NotReady { reason, message };
    match &buffer.source {
        None => Err(not_ready(
            "ResolutionFailed",
            "Neither podTemplateRef nor scalableRef is set".into(),
        )),
        Some(BufferSource::PodTemplate { name }) => {
            let Some(t) = templates
                .iter()
                .find(|t| t.namespace == buffer.namespace && &t.name == name)
            else {
                return Err(not_ready(
                    "PodTemplateNotFound",
                    format!("podtemplates \"{name}\" not found"),
                ));
            };
            Ok(Resolved {
                replicas: buffer_replicas(buffer, None, &t.template.requests),
                chunk: t.template.clone(),
                pod_template: Some((t.name.clone(), t.generation)),
            })
        }
        Some(BufferSource::Scalable {
            api_group,
            kind,
            name,
        }) => {
            let group = if api_group.is_empty() {
                APPS_GROUP
            } else {
                api_group
            };
            if group != APPS_GROUP {
                return Err(not_ready(
                    "ResolutionFailed",
                    format!("unsupported scalableRef API group {group:?}"),
                ));
            }
            if !SCALABLE_KINDS.contains(&kind.as_str()) {
                return Err(not_ready(
                    "ResolutionFailed",
                    format!("unsupported kind {kind:?}"),
                ));
            }
            let Some(w) = workloads
                .iter()
                .find(|w| &w.kind == kind && w.namespace == buffer.namespace && &w.name == name)
            else {
                let plural = format!("{}s", kind.to_lowercase());
                return Err(not_ready(
                    "ScalableRefNotFound",
                    format!("{plural}.apps \"{name}\" not found"),
                ));
            };
            let chunk = w
                .template
                .clone()
                .map_err(|why| not_ready("ResolutionFailed", why))?;
            Ok(Resolved {
                replicas: buffer_replicas(buffer, Some(w.replicas.unwrap_or(1)), &chunk.requests),
                chunk,
                pod_template: None,
            })
        }
    }
}

/// How many chunks a buffer keeps: the larger of `replicas` and `percentage` of the
/// workload's replicas (rounded up, at least 1; a workload at 0 adds nothing), capped
/// by as many chunks as `limits` hold (floor, the smallest over the resources both
/// the limits and a chunk's requests name); `limits` alone give that many. Karpenter's
/// `computeReplicas`, then [`MAX_VIRTUAL_PODS`].
pub fn buffer_replicas(buffer: &CapacityBuffer, scalable: Option<i32>, chunk: &Resources) -> i32 {
    let mut sizes = Vec::new();
    if let (Some(workload), Some(pct)) = (scalable, buffer.percentage)
        && workload > 0
    {
        let scaled = (i64::from(workload) * i64::from(pct) + 99) / 100;
        let scaled = if pct > 0 { scaled.max(1) } else { scaled };
        sizes.push(i32::try_from(scaled).unwrap_or(i32::MAX));
    }
    if let Some(r) = buffer.replicas {
        sizes.push(r);
    }
    let sized = sizes.into_iter().max();
    let by_limits = buffer
        .limits
        .as_ref()
        .and_then(|l| limit_replicas(l, chunk));
    let replicas = match (sized, by_limits) {
        (Some(s), Some(l)) => s.min(l),
        (None, Some(l)) => l,
        (Some(s), None) => s,
        (None, None) => 0,
    };
    replicas.min(MAX_VIRTUAL_PODS)
}

/// How many chunks of `requests` fit in `limits`: the smallest floor over the
/// resources in both (not `pods`: Karpenter counts a pod's requests, which have no pod
/// slot); `None` when they share none.
fn limit_replicas(limits: &Resources, requests: &Resources) -> Option<i32> {
    let mut fewest: Option<i64> = None;
    for (resource, limit) in limits.iter() {
        let request = requests.get_milli(resource);
        if request <= 0 || resource == WELL_KNOWN[PODS] {
            continue;
        }
        let n = limit / request;
        fewest = Some(fewest.map_or(n, |f| f.min(n)));
    }
    fewest.map(|n| i32::try_from(n).unwrap_or(i32::MAX))
}

/// The virtual pods of every resolved buffer: `capacity-buffer-NAME-I` in the buffer's
/// namespace, `I` from 1, with the chunk's labels and spec, the lowest priority, marked
/// Unschedulable (so provisioning takes them), unbound, and never seen by a
/// PodDisruptionBudget ([`PodFields::capacity_buffer`]).
pub fn virtual_pods(buffers: &[CapacityBuffer], resolutions: &[Resolution]) -> Vec<Pod> {
    let mut pods = Vec::new();
    for (buffer, resolution) in buffers.iter().zip(resolutions) {
        let Ok(resolved) = &resolution.outcome else {
            continue;
        };
        for i in 1..=resolved.replicas.max(0) {
            let mut pod = resolved.chunk.clone();
            pod.namespace = buffer.namespace.clone();
            pod.name = format!("capacity-buffer-{}-{i}", buffer.name);
            pod.priority = Some(VIRTUAL_POD_PRIORITY);
            pod.marked_unschedulable = true;
            pod.node_name = None;
            pod.nominated_node_name = None;
            pod.created_at = None;
            pod.started_at = None;
            pod.do_not_disrupt = false;
            pod.do_not_disrupt_for = None;
            pod.deletion_cost = None;
            pod.capacity_buffer = Some(buffer.key());
            pods.push(pod);
        }
    }
    pods
}

/// A buffer's conditions after a provisioning pass, as Karpenter writes them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BufferStatus {
    /// `namespace/name`.
    pub buffer: String,
    /// `status.replicas` (`None` when not resolved).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Virtual pods that fit existing nodes or claims in flight.
    pub existing: usize,
    /// Virtual pods that open new claims.
    pub new_capacity: usize,
    /// Virtual pods nothing can hold (NodePool limits, no type fits).
    pub failed: usize,
    pub conditions: Vec<BufferCondition>,
}

/// One `metav1.Condition` of a buffer.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BufferCondition {
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// `True` or `False`.
    pub status: &'static str,
    pub reason: &'static str,
    pub message: String,
}

impl BufferCondition {
    fn new(kind: &'static str, ok: bool, reason: &'static str, message: String) -> Self {
        Self {
            kind,
            status: if ok { "True" } else { "False" },
            reason,
            message,
        }
    }
}

/// Each buffer's `ReadyForProvisioning` and `Provisioning` conditions after `plan`
/// placed its virtual pods: `Provisioning` is `True/FitsExistingCapacity` when every
/// virtual pod fits an existing node or a claim in flight, `False/RequiresNewCapacity`
/// when any opens a claim or fits nowhere, `False/BufferEmpty` at zero replicas,
/// `False/NotReadyForProvisioning` when unresolved; a partial fit with nothing new
/// leaves it unset, as Karpenter leaves it unchanged.
pub fn buffer_statuses(
    resolutions: &[Resolution],
    virtual_pods: &[Pod],
    plan: &ProvisioningPlan,
) -> Vec<BufferStatus> {
    // Each virtual pod's buffer, by the pod's key: a real pod may be named alike.
    let owner: BTreeMap<String, &str> = virtual_pods
        .iter()
        .filter_map(|p| Some((p.key(), p.capacity_buffer.as_deref()?)))
        .collect();
    let mut counts: BTreeMap<&str, [usize; 3]> = BTreeMap::new();
    let mut count = |pods: &mut dyn Iterator<Item = &String>, slot: usize| {
        for pod in pods {
            if let Some(buffer) = owner.get(pod) {
                counts.entry(buffer).or_default()[slot] += 1;
            }
        }
    };
    count(
        &mut plan
            .existing_nodes
            .iter()
            .chain(&plan.in_flight)
            .flat_map(|a| &a.pods),
        0,
    );
    count(&mut plan.node_claims.iter().flat_map(|c| &c.pods), 1);
    count(&mut plan.unschedulable.iter().map(|u| &u.pod), 2);
    resolutions
        .iter()
        .map(|r| {
            let [existing, new_capacity, failed] =
                counts.get(r.buffer.as_str()).copied().unwrap_or_default();
            let (replicas, ready, provisioning) = match &r.outcome {
                Err(why) => (
                    None,
                    BufferCondition::new(
                        "ReadyForProvisioning",
                        false,
                        why.reason,
                        why.message.clone(),
                    ),
                    Some(BufferCondition::new(
                        "Provisioning",
                        false,
                        "NotReadyForProvisioning",
                        "Buffer is not ReadyForProvisioning".into(),
                    )),
                ),
                Ok(resolved) => {
                    let desired = usize::try_from(resolved.replicas.max(0)).unwrap_or(0);
                    let provisioning = if desired == 0 {
                        Some(BufferCondition::new(
                            "Provisioning",
                            false,
                            "BufferEmpty",
                            "Buffer has zero desired replicas".into(),
                        ))
                    } else if new_capacity > 0 || failed > 0 {
                        Some(BufferCondition::new(
                            "Provisioning",
                            false,
                            "RequiresNewCapacity",
                            format!(
                                "{new_capacity}/{desired} virtual pods required new capacity, {failed} failed"
                            ),
                        ))
                    } else if existing == desired {
                        Some(BufferCondition::new(
                            "Provisioning",
                            true,
                            "FitsExistingCapacity",
                            format!("All {desired} virtual pods fit on existing capacity"),
                        ))
                    } else {
                        None
                    };
                    (
                        Some(resolved.replicas),
                        BufferCondition::new(
                            "ReadyForProvisioning",
                            true,
                            "Resolved",
                            "Pod template resolved successfully".into(),
                        ),
                        provisioning,
                    )
                }
            };
            BufferStatus {
                buffer: r.buffer.clone(),
                replicas,
                existing,
                new_capacity,
                failed,
                conditions: std::iter::once(ready).chain(provisioning).collect(),
            }
        })
        .collect()
}

/// The virtual pods `plan` fit on existing nodes, bound there: the room each node holds
/// for buffers, as disruption sees it (Karpenter's per-node buffer pod counts). Pods
/// counted against claims in flight or opening new claims hold no node yet.
pub fn placed_virtual_pods(virtual_pods: &[Pod], plan: &ProvisioningPlan) -> Vec<Pod> {
    let by_key: BTreeMap<String, &Pod> = virtual_pods.iter().map(|p| (p.key(), p)).collect();
    let mut placed = Vec::new();
    for absorbed in &plan.existing_nodes {
        for key in &absorbed.pods {
            if let Some(pod) = by_key.get(key) {
                let mut pod = (*pod).clone();
                pod.node_name = Some(absorbed.target.clone());
                placed.push(pod);
            }
        }
    }
    placed
}

/// `snapshot` with `extra` pods among its own (for a provisioning pass: the buffers'
/// virtual pods, pending).
pub fn with_pods(snapshot: &ClusterSnapshot, extra: &[Pod]) -> ClusterSnapshot {
    let mut out = snapshot.clone();
    out.pods.extend_from_slice(extra);
    out
}

/// The room buffers hold on existing nodes, for a disruption decision: the virtual pods
/// planned as a provisioning pass plans them (after the real pending pods), those that
/// fit an existing node bound to it. Add them to the decision's snapshot.
pub fn buffer_room(input: &ProvisioningInput<'_>, virtual_pods: &[Pod]) -> Vec<Pod> {
    if virtual_pods.is_empty() {
        return Vec::new();
    }
    let planning = with_pods(input.snapshot, virtual_pods);
    let plan = plan_provisioning(&ProvisioningInput {
        snapshot: &planning,
        ..*input
    });
    placed_virtual_pods(virtual_pods, &plan)
}

#[cfg(test)]
mod tests;
