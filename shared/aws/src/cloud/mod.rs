//! `Ec2Cloud`: the engine's [`Cloud`] over EC2 and SSM.
//!
//! - Node classes resolve through DescribeSubnets / DescribeSecurityGroups /
//!   DescribeImages and SSM (AMI aliases, `ssmParameter` terms).
//! - Launches are `CreateFleet` (instant, one instance) over launch templates named
//!   `nodewright-<sha256 of their content>`: identical content is one template, created
//!   once and reused; any change is a new template (old ones are left for a cleanup job).
//! - Per-claim data (the `karpenter.sh/nodeclaim` tag) travels in CreateFleet's tag
//!   specifications, so templates are shared between claims. The capacity type label is
//!   written into the user data, so there is one template per capacity type.
//! - IAM: an EC2NodeClass `instanceProfile` is used as written. For a `role`, the
//!   instance profile is created (or adopted) while the class resolves, as Karpenter v1
//!   does: one per class, named and tagged as Karpenter names and tags it, holding the
//!   role ([`crate::instance_profile`]). The name is what `ResolvedNodeClass` reports.
//!
//! One file per concern, each an `impl Ec2Cloud` block the [`Cloud`] implementation
//! here delegates to:
//! - `catalog`: instance types and spot prices, read once per process and region.
//! - `resolve`: EC2NodeClass → subnets, security groups, images, instance profile.
//! - `launch_template`: content-addressed launch templates (`nodewright-<sha256>`).
//! - `launch`: the fleet launch: one instant CreateFleet per capacity type, cheapest
//!   first, falling back on insufficient capacity (classified in [`crate::fleet`]).
//! - `instances`: DescribeInstances (ours, Karpenter's) and TerminateInstances.
//! - `reservations`: DescribeCapacityReservations for `capacityReservationSelectorTerms`.
//! - `zonal_shift`: ARC GetManagedResource, the zonal shifts on the cluster (opt-in).

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_ec2::types::{ResourceType, Tag, TagSpecification};

use nodewright_core::api::model::{CapacityReservationSelectorTerm, Ec2NodeClass};
use nodewright_core::catalog::{Catalog, Reservation};
use nodewright_engine::ports::{
    Cloud, CloudError, Instance, LaunchError, LaunchRequest, Launched, ResolvedNodeClass,
};

use crate::config::AwsContext;
use crate::eks::ClusterInfo;
use crate::instance_profile::InstanceProfiles;

mod catalog;
mod instances;
mod launch;
mod launch_template;
mod reservations;
mod resolve;
mod zonal_shift;

use catalog::ReadOnce;
pub use instances::is_instance_id;
pub use launch::{MAX_OVERRIDES, PROFILE_PROPAGATION};

use crate::tags::{
    MANAGED_BY, TAG_EKS_CLUSTER, TAG_MANAGED_BY, TAG_NODECLASS, TAG_NODEPOOL, cluster_tag_key,
};

/// Settings of the EC2 adapter.
#[derive(Debug, Clone)]
pub struct Ec2CloudConfig {
    /// Where the public SSM parameters live. `/aws/service` on AWS; tests point it at
    /// parameters they seeded (emulators refuse to create parameters under `/aws`).
    pub ssm_public_prefix: String,
    /// How long a warm Lambda reuses the instance-type catalog.
    pub catalog_ttl: Duration,
    /// How long a warm Lambda reuses the spot prices. DescribeSpotPriceHistory is
    /// several paginated calls (seconds) and spot prices move a few times a day at
    /// most; without this every tick of every function paid for them.
    pub spot_prices_ttl: Duration,
    /// Create or adopt the instance profile of an EC2NodeClass `role` while resolving
    /// the class. False in a dry run: the profile's name is reported and IAM is not
    /// called.
    pub manage_instance_profiles: bool,
    /// Read the cluster's ARC zonal shifts and autoshifts (the stack's `ZonalShift`):
    /// no launch into a shifted zone. Off: nothing is asked of ARC.
    pub zonal_shift: bool,
    /// How long a warm Lambda reuses ARC's answer.
    pub zonal_shift_ttl: Duration,
}

impl Default for Ec2CloudConfig {
    fn default() -> Self {
        Self {
            ssm_public_prefix: "/aws/service".into(),
            catalog_ttl: Duration::from_secs(3600),
            spot_prices_ttl: Duration::from_secs(300),
            manage_instance_profiles: true,
            zonal_shift: false,
            zonal_shift_ttl: Duration::from_secs(30),
        }
    }
}

pub struct Ec2Cloud {
    ec2: aws_sdk_ec2::Client,
    ssm: aws_sdk_ssm::Client,
    arc: aws_sdk_arczonalshift::Client,
    config: Ec2CloudConfig,
    cluster: ClusterInfo,
    /// The catalog and spot prices, shared by every `Ec2Cloud` of this process for the
    /// same endpoint and region.
    read: Arc<ReadOnce>,
    /// Launch template names known to exist (per warm Lambda).
    templates: Mutex<HashSet<String>>,
    /// Subnets found without a free address by a recent launch (per warm Lambda).
    exhausted_subnets: launch::ExhaustedSubnets,
    /// ARC's last answer about the cluster's zonal shifts (per warm Lambda).
    zonal_shifts: Mutex<zonal_shift::LastRead>,
    profiles: InstanceProfiles,
    region: Option<String>,
}

impl Ec2Cloud {
    pub fn new(ctx: &AwsContext, config: Ec2CloudConfig, cluster: ClusterInfo) -> Self {
        let region = ctx.region();
        let read = ReadOnce::for_endpoint(
            ctx.config.endpoint_url().unwrap_or_default(),
            region.as_deref().unwrap_or_default(),
        );
        Self {
            ec2: ctx.ec2.clone(),
            ssm: ctx.ssm.clone(),
            arc: ctx.arc.clone(),
            profiles: InstanceProfiles::new(
                ctx.iam.clone(),
                &cluster.name,
                region.as_deref().unwrap_or_default(),
            ),
            region,
            config,
            cluster,
            read,
            templates: Mutex::new(HashSet::new()),
            exhausted_subnets: launch::ExhaustedSubnets::default(),
            zonal_shifts: Mutex::default(),
        }
    }

    pub fn cluster(&self) -> &ClusterInfo {
        &self.cluster
    }

    /// Tags every nodewright resource carries (instances, volumes, launch templates).
    fn base_tags(&self, node_pool: &str, node_class: &Ec2NodeClass) -> BTreeMap<String, String> {
        let mut tags = node_class.tags.clone();
        tags.insert(cluster_tag_key(&self.cluster.name), "owned".into());
        tags.insert(TAG_EKS_CLUSTER.into(), self.cluster.name.clone());
        tags.insert(TAG_NODEPOOL.into(), node_pool.into());
        tags.insert(TAG_NODECLASS.into(), node_class.name.clone());
        tags.insert(TAG_MANAGED_BY.into(), MANAGED_BY.into());
        tags
    }
}

#[async_trait]
impl Cloud for Ec2Cloud {
    async fn catalog(&self) -> Result<Arc<Catalog>, CloudError> {
        self.read_catalog().await
    }

    async fn spot_prices(&self) -> Result<BTreeMap<(String, String), f64>, CloudError> {
        self.read_spot_prices().await
    }

    async fn resolve_node_class(
        &self,
        node_class: &Ec2NodeClass,
        kubernetes_version: &str,
    ) -> Result<ResolvedNodeClass, CloudError> {
        self.resolve(node_class, kubernetes_version).await
    }

    async fn capacity_reservations(
        &self,
        terms: &[CapacityReservationSelectorTerm],
    ) -> Result<Vec<Reservation>, CloudError> {
        self.describe_capacity_reservations(terms).await
    }

    async fn launch(&self, request: &LaunchRequest) -> Result<Launched, LaunchError> {
        self.launch_cheapest_first(request).await
    }

    async fn terminate(&self, instance_ids: &[String]) -> Result<(), CloudError> {
        self.terminate_instances(instance_ids).await
    }

    async fn reboot(&self, instance_id: &str) -> Result<(), CloudError> {
        self.reboot_instance(instance_id).await
    }

    async fn owned_instances(&self) -> Result<Vec<Instance>, CloudError> {
        self.describe_owned_instances().await
    }

    async fn cluster_instances_launched_by_karpenter(&self) -> Result<Vec<Instance>, CloudError> {
        self.describe_karpenter_instances().await
    }

    async fn impaired_instances(
        &self,
    ) -> Result<Vec<nodewright_core::repair::ImpairedInstance>, CloudError> {
        self.describe_impaired_instances().await
    }

    async fn zonal_shifts(&self) -> Result<Vec<nodewright_engine::ports::ZonalShift>, CloudError> {
        self.read_zonal_shifts().await
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn tag_specification(resource: ResourceType, tags: &BTreeMap<String, String>) -> TagSpecification {
    TagSpecification::builder()
        .resource_type(resource)
        .set_tags(Some(
            tags.iter()
                .map(|(k, v)| Tag::builder().key(k).value(v).build())
                .collect(),
        ))
        .build()
}
