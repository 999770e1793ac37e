//! The instances of the cluster: nodewright's own and Karpenter's, read with
//! DescribeInstances, and terminated (only ever by instance id).

use std::collections::BTreeMap;

use aws_sdk_ec2::types::{
    CapacityReservationPreference, Filter, InstanceLifecycleType, StatusType, SummaryStatus,
};

use nodewright_core::catalog::CapacityType;
use nodewright_core::repair::ImpairedInstance;
use nodewright_engine::ports::{CloudError, ErrorKind, Instance};

use super::Ec2Cloud;
use crate::error::cloud_error;
use crate::tags::{
    MANAGED_BY, TAG_EKS_CLUSTER, TAG_MANAGED_BY, TAG_NODECLAIM, TAG_NODEPOOL, cluster_tag_key,
};

impl Ec2Cloud {
    /// TerminateInstances, after checking every id is an instance id.
    pub(super) async fn terminate_instances(
        &self,
        instance_ids: &[String],
    ) -> Result<(), CloudError> {
        if let Some(bad) = instance_ids.iter().find(|id| !is_instance_id(id)) {
            return Err(CloudError::new(
                ErrorKind::Invalid,
                format!("refusing to terminate {bad:?}: not an EC2 instance id"),
            ));
        }
        if instance_ids.is_empty() {
            return Ok(());
        }
        self.ec2
            .terminate_instances()
            .set_instance_ids(Some(instance_ids.to_vec()))
            .send()
            .await
            .map_err(|e| {
                cloud_error(format!("TerminateInstances {}", instance_ids.join(",")), e)
            })?;
        Ok(())
    }

    /// RebootInstances for one instance (node repair's reboot). EC2 answers an unknown
    /// id with `InvalidInstanceID.NotFound`, classified `NotFound`; a role without
    /// `ec2:RebootInstances` on the instance gets `UnauthorizedOperation`.
    pub(super) async fn reboot_instance(&self, instance_id: &str) -> Result<(), CloudError> {
        if !is_instance_id(instance_id) {
            return Err(CloudError::new(
                ErrorKind::Invalid,
                format!("refusing to reboot {instance_id:?}: not an EC2 instance id"),
            ));
        }
        self.ec2
            .reboot_instances()
            .instance_ids(instance_id)
            .send()
            .await
            .map_err(|e| cloud_error(format!("RebootInstances {instance_id}"), e))?;
        Ok(())
    }

    /// The instances nodewright launched in this cluster and not yet terminated.
    pub(super) async fn describe_owned_instances(&self) -> Result<Vec<Instance>, CloudError> {
        let filters = vec![
            Filter::builder()
                .name(format!("tag:{}", cluster_tag_key(&self.cluster.name)))
                .values("owned")
                .build(),
            Filter::builder()
                .name(format!("tag:{TAG_MANAGED_BY}"))
                .values(MANAGED_BY)
                .build(),
            state_filter(&["pending", "running", "shutting-down", "stopping", "stopped"]),
        ];
        Ok(self
            .describe_instances(filters)
            .await?
            .into_iter()
            .map(|(i, _)| i)
            .collect())
    }

    /// The running instances Karpenter launched in this cluster (not nodewright's).
    pub(super) async fn describe_karpenter_instances(&self) -> Result<Vec<Instance>, CloudError> {
        // Karpenter v1 tags its instances with both cluster tags; older ones may carry
        // only one. DescribeInstances filters AND, so one call per tag, merged by id.
        let states = ["pending", "running", "stopping", "stopped"];
        let by_tag = [
            (
                format!("tag:{}", cluster_tag_key(&self.cluster.name)),
                "owned".to_string(),
            ),
            (format!("tag:{TAG_EKS_CLUSTER}"), self.cluster.name.clone()),
        ];
        let mut found: BTreeMap<String, Instance> = BTreeMap::new();
        for (name, value) in by_tag {
            let filters = vec![
                Filter::builder().name(name).values(value).build(),
                Filter::builder()
                    .name("tag-key")
                    .values(TAG_NODEPOOL)
                    .build(),
                state_filter(&states),
            ];
            for (instance, tags) in self.describe_instances(filters).await? {
                // nodewright tags its own instances with karpenter.sh/nodepool too.
                if tags.contains_key(TAG_MANAGED_BY) {
                    continue;
                }
                found.insert(instance.id.clone(), instance);
            }
        }
        Ok(found.into_values().collect())
    }

    /// DescribeInstances over all pages: each instance with its tags.
    /// Instances whose EC2 instance or system status check fails
    /// (DescribeInstanceStatus, filtered server-side to `impaired`; two filter sets, as
    /// EC2 ANDs filters of different names). Every instance of the account may be
    /// listed: callers act only on instances their claims record.
    pub(super) async fn describe_impaired_instances(
        &self,
    ) -> Result<Vec<ImpairedInstance>, CloudError> {
        let mut by_id: BTreeMap<String, ImpairedInstance> = BTreeMap::new();
        for (filter, check) in [
            ("instance-status.status", "instance"),
            ("system-status.status", "system"),
        ] {
            let mut next: Option<String> = None;
            loop {
                let out = self
                    .ec2
                    .describe_instance_status()
                    .filters(Filter::builder().name(filter).values("impaired").build())
                    .set_next_token(next.take())
                    .send()
                    .await
                    .map_err(|e| cloud_error("DescribeInstanceStatus", e))?;
                for status in out.instance_statuses.unwrap_or_default() {
                    let Some(id) = status.instance_id else {
                        continue;
                    };
                    let summary = if check == "instance" {
                        status.instance_status
                    } else {
                        status.system_status
                    };
                    let Some(summary) = summary else { continue };
                    if summary.status != Some(SummaryStatus::Impaired) {
                        continue;
                    }
                    // The earliest failing check's time; EC2 omits it for checks that
                    // have not failed.
                    let since = summary
                        .details
                        .unwrap_or_default()
                        .into_iter()
                        .filter(|d| d.status == Some(StatusType::Failed))
                        .filter_map(|d| d.impaired_since.map(|t| t.secs()))
                        .min();
                    let entry = by_id.entry(id.clone()).or_insert(ImpairedInstance {
                        instance_id: id,
                        checks: Vec::new(),
                        since,
                    });
                    entry.checks.push(check.to_string());
                    entry.since = match (entry.since, since) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                }
                match out.next_token {
                    Some(t) if !t.is_empty() => next = Some(t),
                    _ => break,
                }
            }
        }
        Ok(by_id.into_values().collect())
    }

    async fn describe_instances(
        &self,
        filters: Vec<Filter>,
    ) -> Result<Vec<(Instance, BTreeMap<String, String>)>, CloudError> {
        let mut instances = Vec::new();
        let mut next: Option<String> = None;
        loop {
            // A page at a time: without MaxResults one answer may hold every instance
            // (34 MB of XML at 10,000), parsed whole into the SDK's types before the
            // few fields kept here are taken from it.
            let out = self
                .ec2
                .describe_instances()
                .set_filters(Some(filters.clone()))
                .max_results(DESCRIBE_INSTANCES_PAGE)
                .set_next_token(next.take())
                .send()
                .await
                .map_err(|e| cloud_error("DescribeInstances", e))?;
            for reservation in out.reservations.unwrap_or_default() {
                instances.extend(
                    reservation
                        .instances
                        .unwrap_or_default()
                        .into_iter()
                        .filter_map(read_instance),
                );
            }
            match out.next_token {
                Some(t) if !t.is_empty() => next = Some(t),
                _ => break,
            }
        }
        Ok(instances)
    }
}

/// Instances a DescribeInstances page holds at most (EC2's largest page).
const DESCRIBE_INSTANCES_PAGE: i32 = 1000;

/// An instance as DescribeInstances lists it, with its tags; `None` without an id.
/// It is `reserved` when it runs in a capacity reservation it was launched into
/// (`CapacityReservationsOnly`, as every reserved launch is): an on-demand instance
/// that landed in an open reservation stays on-demand, as in Karpenter.
fn read_instance(i: aws_sdk_ec2::types::Instance) -> Option<(Instance, BTreeMap<String, String>)> {
    let id = i.instance_id?;
    let tags: BTreeMap<String, String> = i
        .tags
        .unwrap_or_default()
        .into_iter()
        .filter_map(|t| Some((t.key?, t.value.unwrap_or_default())))
        .collect();
    let capacity_reservation_id = i.capacity_reservation_id.filter(|s| !s.is_empty());
    let targeted = i
        .capacity_reservation_specification
        .and_then(|s| s.capacity_reservation_preference)
        == Some(CapacityReservationPreference::CapacityReservationsOnly);
    let instance = Instance {
        id,
        instance_type: i
            .instance_type
            .map(|t| t.as_str().to_string())
            .unwrap_or_default(),
        zone: i
            .placement
            .and_then(|p| p.availability_zone)
            .unwrap_or_default(),
        // The `instance-lifecycle` filter is not universally implemented; the field is.
        // An interruptible reservation's instance (lifecycle
        // `interruptible-capacity-reservation`) is reserved like any other.
        capacity_type: match i.instance_lifecycle {
            Some(InstanceLifecycleType::Spot) => CapacityType::Spot,
            _ if targeted && capacity_reservation_id.is_some() => CapacityType::Reserved,
            _ => CapacityType::OnDemand,
        },
        state: i
            .state
            .and_then(|s| s.name)
            .map(|n| n.as_str().to_string())
            .unwrap_or_default(),
        claim_name: tags.get(TAG_NODECLAIM).cloned(),
        launch_time: i.launch_time.map(|t| t.secs()).unwrap_or(0),
        image_id: i.image_id.filter(|s| !s.is_empty()),
        subnet_id: i.subnet_id.filter(|s| !s.is_empty()),
        security_group_ids: i
            .security_groups
            .unwrap_or_default()
            .into_iter()
            .filter_map(|g| g.group_id)
            .collect(),
        capacity_reservation_id,
    };
    Some((instance, tags))
}

/// `i-` followed by 8 or 17 lowercase hex digits.
pub fn is_instance_id(id: &str) -> bool {
    id.strip_prefix("i-").is_some_and(|hex| {
        (hex.len() == 8 || hex.len() == 17)
            && hex
                .chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
    })
}

fn state_filter(states: &[&str]) -> Filter {
    Filter::builder()
        .name("instance-state-name")
        .set_values(Some(states.iter().map(|s| s.to_string()).collect()))
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_ids_are_checked_before_terminating() {
        assert!(is_instance_id("i-0123456789abcdef0"));
        assert!(is_instance_id("i-1234abcd"));
        assert!(!is_instance_id("i-0123456789ABCDEF0"));
        assert!(!is_instance_id("i-123"));
        assert!(!is_instance_id("sg-1234abcd"));
        assert!(!is_instance_id("i-0123456789abcdef0 "));
    }

    /// An instance as DescribeInstances lists one nodewright launched, with `spec` as
    /// its capacity reservation specification and `id` as its reservation.
    fn listed(
        spec: Option<CapacityReservationPreference>,
        id: Option<&str>,
    ) -> aws_sdk_ec2::types::Instance {
        use aws_sdk_ec2::types::{CapacityReservationSpecificationResponse, Tag};
        aws_sdk_ec2::types::Instance::builder()
            .instance_id("i-0123456789abcdef0")
            .instance_type(aws_sdk_ec2::types::InstanceType::M5Xlarge)
            .set_capacity_reservation_id(id.map(str::to_string))
            .set_capacity_reservation_specification(spec.map(|p| {
                CapacityReservationSpecificationResponse::builder()
                    .capacity_reservation_preference(p)
                    .build()
            }))
            .tags(
                Tag::builder()
                    .key(TAG_NODECLAIM)
                    .value("default-abcde")
                    .build(),
            )
            .build()
    }

    #[test]
    fn an_instance_launched_into_a_reservation_is_read_as_reserved_with_its_reservation() {
        let (instance, _) = read_instance(listed(
            Some(CapacityReservationPreference::CapacityReservationsOnly),
            Some("cr-0aaaa"),
        ))
        .unwrap();
        assert_eq!(instance.capacity_type, CapacityType::Reserved);
        assert_eq!(
            instance.capacity_reservation_id.as_deref(),
            Some("cr-0aaaa")
        );
        assert_eq!(instance.claim_name.as_deref(), Some("default-abcde"));

        // EC2 lists an instance in an interruptible ODCR with its own lifecycle.
        let mut interruptible = listed(
            Some(CapacityReservationPreference::CapacityReservationsOnly),
            Some("cr-0bbbb"),
        );
        interruptible.instance_lifecycle =
            Some(InstanceLifecycleType::InterruptibleCapacityReservation);
        let (instance, _) = read_instance(interruptible).unwrap();
        assert_eq!(instance.capacity_type, CapacityType::Reserved);
        assert_eq!(
            instance.capacity_reservation_id.as_deref(),
            Some("cr-0bbbb")
        );
    }

    #[test]
    fn an_on_demand_instance_that_landed_in_an_open_reservation_stays_on_demand() {
        let (instance, _) = read_instance(listed(
            Some(CapacityReservationPreference::Open),
            Some("cr-0open"),
        ))
        .unwrap();
        assert_eq!(instance.capacity_type, CapacityType::OnDemand);
        assert_eq!(
            instance.capacity_reservation_id.as_deref(),
            Some("cr-0open")
        );
        let (plain, _) = read_instance(listed(None, None)).unwrap();
        assert_eq!(plain.capacity_type, CapacityType::OnDemand);
        assert_eq!(plain.capacity_reservation_id, None);
    }
}
