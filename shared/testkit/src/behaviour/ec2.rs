//! The cluster's instances as EC2 (moto) reports them: what the kubelets boot on, what a
//! spot reclaim takes away, and what the cloud controller manager asks about a node.

use std::collections::BTreeMap;

use std::time::Duration;

use aws_sdk_ec2::types::{Filter, InstanceLifecycleType};

use nodewright_core::catalog::CapacityType;
use nodewright_sim::eks::InstanceSeen;

use nodewright_aws::testing::Ec2Client;

/// An instance as DescribeInstances reports it.
#[derive(Debug, Clone)]
pub(super) struct Ec2Instance {
    pub id: String,
    pub state: String,
    pub instance_type: String,
    pub zone: String,
    pub private_dns: String,
    pub private_ip: String,
    /// Spot, in a capacity reservation, or on-demand: the capacity-type label its
    /// kubelet registers with.
    pub capacity_type: CapacityType,
    pub tags: BTreeMap<String, String>,
}

impl Ec2Instance {
    /// As the kubelets see it, `up_since` when the harness first saw it.
    pub fn seen(&self, up_since: Duration) -> InstanceSeen<'_> {
        InstanceSeen {
            id: &self.id,
            state: &self.state,
            up_since,
        }
    }

    /// Shutting down, stopped or terminated: its kubelet is gone.
    pub fn is_gone(&self) -> bool {
        self.seen(Duration::ZERO).is_gone()
    }

    /// EC2 no longer has it: what makes the cloud controller manager delete its Node.
    pub fn is_terminated(&self) -> bool {
        self.state == "terminated"
    }
}

/// The cluster's instances in moto, by the tag every launch carries.
pub(super) async fn describe(ec2: &Ec2Client, cluster: &str) -> Result<Vec<Ec2Instance>, String> {
    let out = ec2
        .describe_instances()
        .filters(
            Filter::builder()
                .name(format!("tag:kubernetes.io/cluster/{cluster}"))
                .values("owned")
                .build(),
        )
        .send()
        .await
        .map_err(|e| format!("{e:?}"))?;
    Ok(out
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .map(|i| Ec2Instance {
            id: i.instance_id().unwrap_or_default().to_string(),
            state: i
                .state()
                .and_then(|s| s.name())
                .map(|n| n.as_str().to_string())
                .unwrap_or_default(),
            instance_type: i
                .instance_type()
                .map(|t| t.as_str().to_string())
                .unwrap_or_default(),
            zone: i
                .placement()
                .and_then(|p| p.availability_zone())
                .unwrap_or_default()
                .to_string(),
            private_dns: i.private_dns_name().unwrap_or_default().to_string(),
            private_ip: i.private_ip_address().unwrap_or_default().to_string(),
            capacity_type: if i.instance_lifecycle() == Some(&InstanceLifecycleType::Spot) {
                CapacityType::Spot
            } else if i.capacity_reservation_id().is_some() {
                CapacityType::Reserved
            } else {
                CapacityType::OnDemand
            },
            tags: i
                .tags()
                .iter()
                .map(|t| {
                    (
                        t.key().unwrap_or_default().to_string(),
                        t.value().unwrap_or_default().to_string(),
                    )
                })
                .collect(),
        })
        .collect())
}
