//! CapacityBuffers in `plan` and `disrupt`: resolved against the manifests' PodTemplates
//! and the snapshot's Deployments, StatefulSets and ReplicaSets, their virtual pods
//! planned after the real ones, and each buffer's conditions as Karpenter writes them.

use nodewright_core::api::Manifests;
use nodewright_core::capacity_buffer::{BufferStatus, Resolution, resolve_buffers, virtual_pods};
use nodewright_core::cluster::{ClusterSnapshot, Pod};
use nodewright_core::provisioning::ProvisioningPlan;
use serde::Serialize;

/// The buffers of the manifests, resolved, and their virtual pods.
pub(crate) struct Buffers {
    pub(crate) resolutions: Vec<Resolution>,
    pub(crate) virtual_pods: Vec<Pod>,
}

impl Buffers {
    pub(crate) fn of(manifests: &Manifests, snapshot: &ClusterSnapshot) -> Self {
        let resolutions = resolve_buffers(
            &manifests.capacity_buffers,
            &manifests.pod_templates,
            &snapshot.workloads,
        );
        let virtual_pods = virtual_pods(&manifests.capacity_buffers, &resolutions);
        Buffers {
            resolutions,
            virtual_pods,
        }
    }
}

/// `plan`'s output: the plan, and each buffer's status when there are buffers.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PlanOutput<'a> {
    #[serde(flatten)]
    pub(crate) plan: &'a ProvisioningPlan,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub(crate) capacity_buffers: &'a [BufferStatus],
}

/// One line per buffer: its replicas and conditions.
pub(crate) fn render(statuses: &[BufferStatus]) -> String {
    let mut out = String::new();
    if statuses.is_empty() {
        return out;
    }
    out.push_str("\nCapacityBuffers:\n");
    for s in statuses {
        let replicas = s
            .replicas
            .map_or_else(|| "-".to_string(), |r| r.to_string());
        out.push_str(&format!(
            "  {}: {replicas} virtual pods ({} on existing capacity, {} new, {} failed)\n",
            s.buffer, s.existing, s.new_capacity, s.failed
        ));
        for c in &s.conditions {
            out.push_str(&format!(
                "    {}={} {}: {}\n",
                c.kind, c.status, c.reason, c.message
            ));
        }
    }
    out
}
