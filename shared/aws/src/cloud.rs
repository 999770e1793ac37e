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

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use aws_sdk_ec2::types::{
    ArchitectureValues, DefaultTargetCapacityType, Filter, FleetLaunchTemplateConfigRequest,
    FleetLaunchTemplateOverridesRequest, FleetLaunchTemplateSpecificationRequest,
    FleetOnDemandAllocationStrategy, FleetType, InstanceLifecycleType,
    LaunchTemplateBlockDeviceMappingRequest, LaunchTemplateEbsBlockDeviceRequest,
    LaunchTemplateHttpTokensState, LaunchTemplateIamInstanceProfileSpecificationRequest,
    LaunchTemplateInstanceMetadataEndpointState, LaunchTemplateInstanceMetadataOptionsRequest,
    LaunchTemplateInstanceMetadataProtocolIpv6,
    LaunchTemplateInstanceNetworkInterfaceSpecificationRequest,
    LaunchTemplateTagSpecificationRequest, LaunchTemplatesMonitoringRequest, LocationType,
    OnDemandOptionsRequest, RequestLaunchTemplateData, ResourceType, SpotAllocationStrategy,
    SpotOptionsRequest, Tag, TagSpecification, TargetCapacitySpecificationRequest, VolumeType,
};
use base64::Engine;
use serde::Serialize;
use sha2::{Digest, Sha256};

use nodewright_core::api::model::{
    AmiSelectorTerm, Ec2NodeClass, SelectorTerm, Taint, TaintEffect,
};
use nodewright_core::catalog::{self, CapacityType, Catalog, InstanceType};
use nodewright_core::resources::Resources;
use nodewright_engine::ports::{
    Cloud, CloudError, ErrorKind, Image, Instance, LaunchError, LaunchRequest, Launched, Offering,
    ResolvedNodeClass, Subnet,
};

use crate::ami::alias_parameter_paths;
use crate::config::AwsContext;
use crate::eks::ClusterInfo;
use crate::error::{classify, cloud_error};
use crate::fleet::{FleetError, FleetErrors, FleetFailure, classify_fleet_errors};
use crate::instance_profile::InstanceProfiles;
use crate::userdata;

pub const TAG_MANAGED_BY: &str = "nodewright.io/managed-by";
pub const MANAGED_BY: &str = "nodewright";
pub const TAG_NODEPOOL: &str = "karpenter.sh/nodepool";
pub const TAG_NODECLAIM: &str = "karpenter.sh/nodeclaim";
pub const TAG_NODECLASS: &str = "karpenter.k8s.aws/ec2nodeclass";
pub const TAG_EKS_CLUSTER: &str = "eks:eks-cluster-name";
pub const UNREGISTERED_TAINT: &str = "karpenter.sh/unregistered";
/// CreateFleet accepts at most this many overrides per call.
pub const MAX_OVERRIDES: usize = 60;

pub fn cluster_tag_key(cluster: &str) -> String {
    format!("kubernetes.io/cluster/{cluster}")
}

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
}

impl Default for Ec2CloudConfig {
    fn default() -> Self {
        Self {
            ssm_public_prefix: "/aws/service".into(),
            catalog_ttl: Duration::from_secs(3600),
            spot_prices_ttl: Duration::from_secs(300),
            manage_instance_profiles: true,
        }
    }
}

/// How long after this process created an instance profile a launch that EC2 refuses as
/// invalid is taken for IAM's propagation delay (retried later) rather than a mistake.
pub const PROFILE_PROPAGATION: Duration = Duration::from_secs(120);

/// A value a warm Lambda reuses until it is `ttl` old (read again after that; a failed
/// read keeps nothing, so the next call tries again).
struct Reused<T> {
    value: Mutex<Option<(Instant, T)>>,
}

impl<T> Default for Reused<T> {
    fn default() -> Self {
        Self {
            value: Mutex::new(None),
        }
    }
}

impl<T: Clone> Reused<T> {
    fn get(&self, now: Instant, ttl: Duration) -> Option<T> {
        let value = self.value.lock().expect("reused value lock");
        value
            .as_ref()
            .filter(|(at, _)| now.saturating_duration_since(*at) < ttl)
            .map(|(_, v)| v.clone())
    }

    /// Reads the last value whatever its age (for facts that do not go stale, such as
    /// an instance type's architecture).
    fn peek<R>(&self, read: impl FnOnce(&T) -> Option<R>) -> Option<R> {
        let value = self.value.lock().expect("reused value lock");
        value.as_ref().and_then(|(_, v)| read(v))
    }

    fn put(&self, now: Instant, value: T) {
        *self.value.lock().expect("reused value lock") = Some((now, value));
    }
}

/// What EC2 says the same to every caller in a region: the catalog and spot prices.
/// Kept per process, not per `Ec2Cloud`: a Lambda container builds one anyway, and a
/// test binary that builds one per scenario reads them once (moto takes seconds to
/// answer DescribeInstanceTypes and DescribeSpotPriceHistory).
#[derive(Default)]
struct ReadOnce {
    catalog: Reused<Catalog>,
    spot_prices: Reused<BTreeMap<(String, String), f64>>,
}

impl ReadOnce {
    fn for_endpoint(endpoint: &str, region: &str) -> Arc<ReadOnce> {
        static BY_ENDPOINT: LazyLock<Mutex<HashMap<String, Arc<ReadOnce>>>> =
            LazyLock::new(Mutex::default);
        BY_ENDPOINT
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(format!("{endpoint} {region}"))
            .or_default()
            .clone()
    }
}

pub struct Ec2Cloud {
    ec2: aws_sdk_ec2::Client,
    ssm: aws_sdk_ssm::Client,
    config: Ec2CloudConfig,
    cluster: ClusterInfo,
    /// The catalog and spot prices, shared by every `Ec2Cloud` of this process for the
    /// same endpoint and region.
    read: Arc<ReadOnce>,
    /// Launch template names known to exist (per warm Lambda).
    templates: Mutex<HashSet<String>>,
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

    // ----- node class resolution -------------------------------------------------

    async fn subnets(&self, terms: &[SelectorTerm]) -> Result<Vec<Subnet>, CloudError> {
        let mut found: BTreeMap<String, Subnet> = BTreeMap::new();
        for term in terms {
            let filters = selector_filters(term, "subnet-id", None)?;
            let mut next: Option<String> = None;
            loop {
                let out = self
                    .ec2
                    .describe_subnets()
                    .set_filters(Some(filters.clone()))
                    .set_next_token(next.take())
                    .send()
                    .await
                    .map_err(|e| cloud_error("DescribeSubnets", e))?;
                for s in out.subnets.unwrap_or_default() {
                    if let (Some(id), Some(zone)) = (s.subnet_id, s.availability_zone) {
                        let available_ips = i64::from(s.available_ip_address_count.unwrap_or(0));
                        found.insert(
                            id.clone(),
                            Subnet {
                                id,
                                zone,
                                available_ips,
                            },
                        );
                    }
                }
                match out.next_token {
                    Some(t) if !t.is_empty() => next = Some(t),
                    _ => break,
                }
            }
        }
        Ok(found.into_values().collect())
    }

    async fn security_groups(&self, terms: &[SelectorTerm]) -> Result<Vec<String>, CloudError> {
        let mut found = BTreeSet::new();
        for term in terms {
            let filters = selector_filters(term, "group-id", Some("group-name"))?;
            let mut next: Option<String> = None;
            loop {
                let out = self
                    .ec2
                    .describe_security_groups()
                    .set_filters(Some(filters.clone()))
                    .set_next_token(next.take())
                    .send()
                    .await
                    .map_err(|e| cloud_error("DescribeSecurityGroups", e))?;
                found.extend(
                    out.security_groups
                        .unwrap_or_default()
                        .into_iter()
                        .filter_map(|g| g.group_id),
                );
                match out.next_token {
                    Some(t) if !t.is_empty() => next = Some(t),
                    _ => break,
                }
            }
        }
        Ok(found.into_iter().collect())
    }

    async fn ssm_parameter(&self, name: &str) -> Result<Option<String>, CloudError> {
        match self.ssm.get_parameter().name(name).send().await {
            Ok(out) => Ok(out.parameter.and_then(|p| p.value)),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_parameter_not_found()) =>
            {
                Ok(None)
            }
            Err(e) => Err(cloud_error(format!("GetParameter {name}"), e)),
        }
    }

    /// DescribeImages, newest first.
    async fn describe_images(
        &self,
        ids: Vec<String>,
        filters: Vec<Filter>,
        owners: Vec<String>,
    ) -> Result<Vec<(Image, String)>, CloudError> {
        let mut req = self.ec2.describe_images();
        if !ids.is_empty() {
            req = req.set_image_ids(Some(ids));
        }
        if !filters.is_empty() {
            req = req.set_filters(Some(filters));
        }
        if !owners.is_empty() {
            req = req.set_owners(Some(owners));
        }
        let out = req
            .send()
            .await
            .map_err(|e| cloud_error("DescribeImages", e))?;
        let mut images: Vec<(Image, String)> = out
            .images
            .unwrap_or_default()
            .into_iter()
            .filter_map(|i| {
                let arch = match i.architecture {
                    Some(ArchitectureValues::Arm64) | Some(ArchitectureValues::Arm64Mac) => "arm64",
                    _ => "amd64",
                };
                Some((
                    Image {
                        id: i.image_id?,
                        arch: arch.into(),
                    },
                    i.creation_date.unwrap_or_default(),
                ))
            })
            .collect();
        images.sort_by(|a, b| b.1.cmp(&a.1));
        Ok(images)
    }

    async fn images(
        &self,
        terms: &[AmiSelectorTerm],
        kubernetes_version: &str,
    ) -> Result<Vec<Image>, CloudError> {
        // One image per architecture: the first term that yields one wins; within a
        // term, the newest image.
        let mut by_arch: BTreeMap<String, Image> = BTreeMap::new();
        for term in terms {
            let candidates: Vec<Image> = match term {
                AmiSelectorTerm::Alias { family, version } => {
                    let mut v = Vec::new();
                    for (arch, path) in alias_parameter_paths(
                        &self.config.ssm_public_prefix,
                        family,
                        version,
                        kubernetes_version,
                    )? {
                        if let Some(id) = self.ssm_parameter(&path).await? {
                            v.push(Image {
                                id,
                                arch: arch.into(),
                            });
                        }
                    }
                    v
                }
                AmiSelectorTerm::Id(id) => self
                    .describe_images(vec![id.clone()], vec![], vec![])
                    .await?
                    .into_iter()
                    .map(|(i, _)| i)
                    .collect(),
                AmiSelectorTerm::Name { name, owner } => {
                    let owners = match owner {
                        Some(o) => vec![o.clone()],
                        None => vec!["self".into(), "amazon".into()],
                    };
                    let filters = vec![Filter::builder().name("name").values(name).build()];
                    self.describe_images(vec![], filters, owners)
                        .await?
                        .into_iter()
                        .map(|(i, _)| i)
                        .collect()
                }
                AmiSelectorTerm::Tags { tags, owner } => {
                    let filters = tag_filters(tags);
                    let owners = owner.iter().cloned().collect();
                    self.describe_images(vec![], filters, owners)
                        .await?
                        .into_iter()
                        .map(|(i, _)| i)
                        .collect()
                }
                AmiSelectorTerm::SsmParameter(name) => match self.ssm_parameter(name).await? {
                    Some(id) => {
                        let described = self
                            .describe_images(vec![id.clone()], vec![], vec![])
                            .await?;
                        match described.into_iter().next() {
                            Some((image, _)) => vec![image],
                            None => vec![Image {
                                id,
                                arch: "amd64".into(),
                            }],
                        }
                    }
                    None => vec![],
                },
            };
            for image in candidates {
                by_arch.entry(image.arch.clone()).or_insert(image);
            }
        }
        Ok(by_arch.into_values().collect())
    }

    // ----- launch templates ------------------------------------------------------

    fn template_content(
        &self,
        request: &LaunchRequest,
        capacity_type: CapacityType,
        image: &Image,
    ) -> Result<TemplateContent, CloudError> {
        let class = &request.node_class;
        // Labels the kubelet registers with; claim-specific ones are left out so the
        // template can be shared (the lifecycle applies them once the node registers).
        let mut labels = request.labels.clone();
        labels.remove(TAG_NODECLAIM);
        labels.insert(
            catalog::LABEL_CAPACITY_TYPE.into(),
            capacity_type.as_str().into(),
        );
        let mut taints = request.taints.clone();
        if !taints.iter().any(|t| t.key == UNREGISTERED_TAINT) {
            taints.push(Taint {
                key: UNREGISTERED_TAINT.into(),
                value: Some("true".into()),
                effect: TaintEffect::NoExecute,
            });
        }
        let family = class.ami_family.clone().or_else(|| {
            class.ami_selector_terms.iter().find_map(|t| match t {
                AmiSelectorTerm::Alias { family, .. } => Some(family.clone()),
                _ => None,
            })
        });
        let user_data = match family.as_deref().map(str::to_ascii_lowercase).as_deref() {
            Some("bottlerocket") => userdata::bottlerocket_user_data(
                &self.cluster,
                &labels,
                &taints,
                &class.kubelet,
                class.user_data.as_deref(),
            ),
            // AL2023 is the default family.
            _ => userdata::al2023_user_data(
                &self.cluster,
                &labels,
                &taints,
                &class.kubelet,
                class.user_data.as_deref(),
            ),
        };
        let instance_profile = request
            .resolved
            .instance_profile
            .clone()
            .or_else(|| class.instance_profile.clone())
            .ok_or_else(|| {
                CloudError::new(
                    ErrorKind::Invalid,
                    format!(
                        "EC2NodeClass {}: no instance profile (instanceProfile is not set and the role's profile was not resolved)",
                        class.name
                    ),
                )
            })?;
        let mut block_devices = Vec::new();
        for m in &class.block_device_mappings {
            let ebs = match &m.ebs {
                Some(e) => Some(TemplateEbs {
                    volume_size_gib: e.volume_size.as_deref().map(parse_gib).transpose()?,
                    volume_type: e.volume_type.clone(),
                    iops: e.iops,
                    throughput: e.throughput,
                    encrypted: e.encrypted,
                    kms_key_id: e.kms_key_id.clone(),
                    delete_on_termination: e.delete_on_termination,
                    snapshot_id: e.snapshot_id.clone(),
                }),
                None => None,
            };
            block_devices.push((m.device_name.clone(), ebs));
        }
        let mut security_groups = request.resolved.security_group_ids.clone();
        security_groups.sort();
        Ok(TemplateContent {
            image_id: image.id.clone(),
            user_data,
            instance_profile,
            security_groups,
            block_devices,
            http_endpoint: class.metadata_options.http_endpoint.clone(),
            http_protocol_ipv6: class.metadata_options.http_protocol_ipv6.clone(),
            http_put_response_hop_limit: class.metadata_options.http_put_response_hop_limit,
            http_tokens: class.metadata_options.http_tokens.clone(),
            associate_public_ip_address: class.associate_public_ip_address,
            detailed_monitoring: class.detailed_monitoring,
            tags: self.base_tags(&request.node_pool, class),
        })
    }

    /// The name of a launch template with this content, creating it if needed.
    async fn ensure_launch_template(
        &self,
        content: &TemplateContent,
    ) -> Result<String, CloudError> {
        let name = content.name();
        if self
            .templates
            .lock()
            .expect("template cache lock")
            .contains(&name)
        {
            return Ok(name);
        }
        let existing = self
            .ec2
            .describe_launch_templates()
            .filters(
                Filter::builder()
                    .name("launch-template-name")
                    .values(&name)
                    .build(),
            )
            .send()
            .await
            .map_err(|e| cloud_error(format!("DescribeLaunchTemplates {name}"), e))?;
        let exists = existing
            .launch_templates
            .unwrap_or_default()
            .iter()
            .any(|t| t.launch_template_name.as_deref() == Some(name.as_str()));
        if !exists {
            let created = self
                .ec2
                .create_launch_template()
                .launch_template_name(&name)
                .launch_template_data(content.to_request())
                .tag_specifications(tag_specification(
                    ResourceType::LaunchTemplate,
                    &content.tags,
                ))
                .send()
                .await;
            match created {
                Ok(_) => tracing::info!(launch_template = %name, "created launch template"),
                // Another invocation created it first: same name, same content.
                Err(e) if classify(&e) == ErrorKind::Conflict => {}
                Err(e) => return Err(cloud_error(format!("CreateLaunchTemplate {name}"), e)),
            }
        }
        self.templates
            .lock()
            .expect("template cache lock")
            .insert(name.clone());
        Ok(name)
    }

    /// Architecture of an instance type: the cached catalog, the embedded one, or the
    /// naming convention (a `g` after the generation digit means Graviton).
    fn arch_of(&self, instance_type: &str) -> String {
        let cached = self.read.catalog.peek(|c| {
            c.get(instance_type)
                .and_then(|t| t.labels.get(catalog::LABEL_ARCH).cloned())
        });
        cached
            .or_else(|| {
                Catalog::embedded()
                    .get(instance_type)
                    .and_then(|t| t.labels.get(catalog::LABEL_ARCH).cloned())
            })
            .unwrap_or_else(|| guess_arch(instance_type).into())
    }

    /// One CreateFleet over the offerings of one capacity type.
    async fn launch_group(
        &self,
        request: &LaunchRequest,
        capacity_type: CapacityType,
        offerings: &[Offering],
        subnet_by_zone: &HashMap<String, Subnet>,
    ) -> Result<Launched, LaunchError> {
        let images: HashMap<&str, &Image> = request
            .resolved
            .images
            .iter()
            .map(|i| (i.arch.as_str(), i))
            .collect();
        // (launch template name) -> overrides, in price order; offerings actually tried.
        let mut configs: Vec<(String, Vec<FleetLaunchTemplateOverridesRequest>)> = Vec::new();
        let mut tried: Vec<Offering> = Vec::new();
        let mut template_for_arch: HashMap<String, String> = HashMap::new();
        for offering in offerings {
            if tried.len() == MAX_OVERRIDES {
                break;
            }
            let Some(subnet) = subnet_by_zone.get(&offering.zone) else {
                continue;
            };
            let arch = self.arch_of(&offering.instance_type);
            let Some(image) = images.get(arch.as_str()) else {
                continue;
            };
            let template = match template_for_arch.get(&arch) {
                Some(t) => t.clone(),
                None => {
                    let content = self.template_content(request, capacity_type, image)?;
                    let name = self.ensure_launch_template(&content).await?;
                    template_for_arch.insert(arch.clone(), name.clone());
                    name
                }
            };
            let o = FleetLaunchTemplateOverridesRequest::builder()
                .instance_type(offering.instance_type.as_str().into())
                .subnet_id(&subnet.id)
                .build();
            match configs.iter_mut().find(|(name, _)| *name == template) {
                Some((_, overrides)) => overrides.push(o),
                None => configs.push((template, vec![o])),
            }
            tried.push(offering.clone());
        }
        if tried.is_empty() {
            return Err(CloudError::new(
                ErrorKind::Invalid,
                format!(
                    "claim {}: no {} offering has both a subnet in its zone and an image for its architecture",
                    request.claim_name, capacity_type
                ),
            )
            .into());
        }

        let mut tags = self.base_tags(&request.node_pool, &request.node_class);
        tags.insert(TAG_NODECLAIM.into(), request.claim_name.clone());
        let mut fleet = self
            .ec2
            .create_fleet()
            .r#type(FleetType::Instant)
            .client_token(client_token(&request.claim_name, capacity_type, &tried))
            .target_capacity_specification(
                TargetCapacitySpecificationRequest::builder()
                    .total_target_capacity(1)
                    .default_target_capacity_type(match capacity_type {
                        CapacityType::Spot => DefaultTargetCapacityType::Spot,
                        CapacityType::OnDemand => DefaultTargetCapacityType::OnDemand,
                    })
                    .build(),
            )
            .tag_specifications(tag_specification(ResourceType::Instance, &tags))
            .tag_specifications(tag_specification(ResourceType::Volume, &tags))
            // The fleet is tagged too: template.yaml allows CreateFleet only with the
            // cluster tag on every resource the request creates.
            .tag_specifications(tag_specification(ResourceType::Fleet, &tags));
        fleet = match capacity_type {
            CapacityType::OnDemand => fleet.on_demand_options(
                OnDemandOptionsRequest::builder()
                    .allocation_strategy(FleetOnDemandAllocationStrategy::LowestPrice)
                    .build(),
            ),
            CapacityType::Spot => fleet.spot_options(
                SpotOptionsRequest::builder()
                    .allocation_strategy(SpotAllocationStrategy::PriceCapacityOptimized)
                    .build(),
            ),
        };
        for (template, overrides) in configs {
            fleet = fleet.launch_template_configs(
                FleetLaunchTemplateConfigRequest::builder()
                    .launch_template_specification(
                        FleetLaunchTemplateSpecificationRequest::builder()
                            .launch_template_name(template)
                            .version("$Latest")
                            .build(),
                    )
                    .set_overrides(Some(overrides))
                    .build(),
            );
        }
        let out = fleet
            .send()
            .await
            .map_err(|e| cloud_error(format!("CreateFleet for claim {}", request.claim_name), e))?;

        let zone_of_subnet: HashMap<&str, &str> = subnet_by_zone
            .values()
            .map(|s| (s.id.as_str(), s.zone.as_str()))
            .collect();
        let errors: Vec<FleetError> = out
            .errors
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|e| {
                let overrides = e.launch_template_and_overrides.and_then(|l| l.overrides);
                FleetError {
                    code: e.error_code.unwrap_or_else(|| "Unknown".into()),
                    message: e.error_message.unwrap_or_default(),
                    instance_type: overrides
                        .as_ref()
                        .and_then(|o| o.instance_type.as_ref().map(|t| t.as_str().to_string())),
                    zone: overrides.as_ref().and_then(|o| {
                        o.availability_zone.clone().or_else(|| {
                            o.subnet_id
                                .as_deref()
                                .and_then(|s| zone_of_subnet.get(s))
                                .map(|z| z.to_string())
                        })
                    }),
                }
            })
            .collect();
        for instance in out.instances.unwrap_or_default() {
            let Some(instance_id) = instance.instance_ids.unwrap_or_default().into_iter().next()
            else {
                continue;
            };
            let overrides = instance
                .launch_template_and_overrides
                .and_then(|l| l.overrides);
            let instance_type = instance
                .instance_type
                .map(|t| t.as_str().to_string())
                .or_else(|| {
                    overrides
                        .as_ref()
                        .and_then(|o| o.instance_type.as_ref().map(|t| t.as_str().to_string()))
                })
                .unwrap_or_else(|| tried[0].instance_type.clone());
            let zone = overrides
                .as_ref()
                .and_then(|o| {
                    o.availability_zone.clone().or_else(|| {
                        o.subnet_id
                            .as_deref()
                            .and_then(|s| zone_of_subnet.get(s))
                            .map(|z| z.to_string())
                    })
                })
                .or_else(|| {
                    tried
                        .iter()
                        .find(|o| o.instance_type == instance_type)
                        .map(|o| o.zone.clone())
                })
                .unwrap_or_else(|| tried[0].zone.clone());
            let price = tried
                .iter()
                .find(|o| o.instance_type == instance_type && o.zone == zone)
                .or_else(|| tried.iter().find(|o| o.instance_type == instance_type))
                .map(|o| o.price)
                .unwrap_or(tried[0].price);
            tracing::info!(claim = %request.claim_name, instance_id = %instance_id, instance_type = %instance_type,
                zone = %zone, capacity_type = %capacity_type, "launched");
            let unavailable =
                crate::fleet::out_of_capacity_besides(&errors, &tried, &instance_type, &zone);
            return Ok(Launched {
                instance_id,
                instance_type,
                zone,
                capacity_type,
                price,
                unavailable,
            });
        }

        let failure = classify_fleet_errors(&errors, &tried);
        let errors = FleetErrors(errors);
        match failure {
            FleetFailure::InsufficientCapacity(offerings) => {
                Err(LaunchError::InsufficientCapacity {
                    offerings,
                    message: format!("CreateFleet ({capacity_type}): {errors}"),
                })
            }
            FleetFailure::Failed(kind) => Err(CloudError::with_source(
                kind,
                format!(
                    "CreateFleet for claim {} launched nothing: {errors}",
                    request.claim_name
                ),
                errors,
            )
            .into()),
        }
    }
}

/// Idempotency token for one CreateFleet: the claim name, plus a digest of what is
/// asked, so that a retry of the same request never launches twice while a retry
/// with other offerings (after insufficient capacity) is a new request rather than
/// an `IdempotentParameterMismatch`.
fn client_token(claim: &str, capacity_type: CapacityType, tried: &[Offering]) -> String {
    let mut h = Sha256::new();
    h.update(capacity_type.as_str());
    for o in tried {
        h.update(format!("|{}@{}", o.instance_type, o.zone));
    }
    let digest = hex(&h.finalize()[..4]);
    let mut base: String = claim.chars().take(64 - 9).collect();
    base.push('-');
    base.push_str(&digest);
    base
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn guess_arch(instance_type: &str) -> &'static str {
    let family = instance_type.split('.').next().unwrap_or("");
    if family == "a1" {
        return "arm64";
    }
    match family.find(|c: char| c.is_ascii_digit()) {
        Some(i) if family[i + 1..].contains('g') => "arm64",
        _ => "amd64",
    }
}

/// "20Gi" / "100G" / "1Ti" / "30" → GiB.
fn parse_gib(size: &str) -> Result<i32, CloudError> {
    let s = size.trim();
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: i64 = num.parse().map_err(|_| {
        CloudError::new(
            ErrorKind::Invalid,
            format!("volumeSize {size:?} is not a size like 20Gi"),
        )
    })?;
    let gib = match unit {
        "" | "Gi" | "G" => n,
        "Ti" | "T" => n * 1024,
        "Mi" | "M" => (n + 1023) / 1024,
        _ => {
            return Err(CloudError::new(
                ErrorKind::Invalid,
                format!("volumeSize {size:?}: unknown unit {unit:?}"),
            ));
        }
    };
    i32::try_from(gib).map_err(|_| {
        CloudError::new(
            ErrorKind::Invalid,
            format!("volumeSize {size:?} is too large"),
        )
    })
}

fn tag_filters(tags: &BTreeMap<String, String>) -> Vec<Filter> {
    tags.iter()
        .map(|(k, v)| {
            if v == "*" {
                Filter::builder().name("tag-key").values(k).build()
            } else {
                Filter::builder().name(format!("tag:{k}")).values(v).build()
            }
        })
        .collect()
}

fn selector_filters(
    term: &SelectorTerm,
    id_filter: &str,
    name_filter: Option<&str>,
) -> Result<Vec<Filter>, CloudError> {
    Ok(match term {
        SelectorTerm::Id(id) => vec![Filter::builder().name(id_filter).values(id).build()],
        SelectorTerm::Name(name) => match name_filter {
            Some(f) => vec![Filter::builder().name(f).values(name).build()],
            None => {
                return Err(CloudError::new(
                    ErrorKind::Invalid,
                    "subnets cannot be selected by name",
                ));
            }
        },
        SelectorTerm::Tags(tags) => tag_filters(tags),
    })
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

/// Everything a launch template holds, in a canonical form: its JSON is what the
/// template name hashes.
#[derive(Debug, Clone, Serialize)]
struct TemplateContent {
    image_id: String,
    user_data: String,
    instance_profile: String,
    security_groups: Vec<String>,
    block_devices: Vec<(String, Option<TemplateEbs>)>,
    http_endpoint: String,
    http_protocol_ipv6: String,
    http_put_response_hop_limit: i64,
    http_tokens: String,
    associate_public_ip_address: Option<bool>,
    detailed_monitoring: bool,
    tags: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize)]
struct TemplateEbs {
    volume_size_gib: Option<i32>,
    volume_type: Option<String>,
    iops: Option<i64>,
    throughput: Option<i64>,
    encrypted: Option<bool>,
    kms_key_id: Option<String>,
    delete_on_termination: Option<bool>,
    snapshot_id: Option<String>,
}

impl TemplateContent {
    fn name(&self) -> String {
        let json = serde_json::to_vec(self).expect("template content is JSON");
        format!("nodewright-{}", hex(&Sha256::digest(&json)[..16]))
    }

    fn to_request(&self) -> RequestLaunchTemplateData {
        let mut data = RequestLaunchTemplateData::builder()
            .image_id(&self.image_id)
            .user_data(base64::engine::general_purpose::STANDARD.encode(&self.user_data))
            .iam_instance_profile(
                LaunchTemplateIamInstanceProfileSpecificationRequest::builder()
                    .name(&self.instance_profile)
                    .build(),
            )
            .metadata_options(
                LaunchTemplateInstanceMetadataOptionsRequest::builder()
                    .http_endpoint(LaunchTemplateInstanceMetadataEndpointState::from(
                        self.http_endpoint.as_str(),
                    ))
                    .http_protocol_ipv6(LaunchTemplateInstanceMetadataProtocolIpv6::from(
                        self.http_protocol_ipv6.as_str(),
                    ))
                    .http_put_response_hop_limit(
                        i32::try_from(self.http_put_response_hop_limit).unwrap_or(1),
                    )
                    .http_tokens(LaunchTemplateHttpTokensState::from(
                        self.http_tokens.as_str(),
                    ))
                    .build(),
            )
            .monitoring(
                LaunchTemplatesMonitoringRequest::builder()
                    .enabled(self.detailed_monitoring)
                    .build(),
            )
            .tag_specifications(template_tags(ResourceType::Instance, &self.tags))
            .tag_specifications(template_tags(ResourceType::Volume, &self.tags));
        for (device, ebs) in &self.block_devices {
            let mut m = LaunchTemplateBlockDeviceMappingRequest::builder().device_name(device);
            if let Some(e) = ebs {
                let mut b = LaunchTemplateEbsBlockDeviceRequest::builder()
                    .set_volume_size(e.volume_size_gib)
                    .set_volume_type(e.volume_type.as_deref().map(VolumeType::from))
                    .set_iops(e.iops.and_then(|v| i32::try_from(v).ok()))
                    .set_throughput(e.throughput.and_then(|v| i32::try_from(v).ok()))
                    .set_encrypted(e.encrypted)
                    .set_kms_key_id(e.kms_key_id.clone())
                    .set_delete_on_termination(e.delete_on_termination)
                    .set_snapshot_id(e.snapshot_id.clone());
                if e.delete_on_termination.is_none() {
                    b = b.delete_on_termination(true);
                }
                m = m.ebs(b.build());
            }
            data = data.block_device_mappings(m.build());
        }
        match self.associate_public_ip_address {
            // The public IP setting lives on the network interface, and then so must the groups.
            Some(public) => {
                data = data.network_interfaces(
                    LaunchTemplateInstanceNetworkInterfaceSpecificationRequest::builder()
                        .device_index(0)
                        .associate_public_ip_address(public)
                        .set_groups(Some(self.security_groups.clone()))
                        .build(),
                )
            }
            None => data = data.set_security_group_ids(Some(self.security_groups.clone())),
        }
        data.build()
    }
}

fn template_tags(
    resource: ResourceType,
    tags: &BTreeMap<String, String>,
) -> LaunchTemplateTagSpecificationRequest {
    LaunchTemplateTagSpecificationRequest::builder()
        .resource_type(resource)
        .set_tags(Some(
            tags.iter()
                .map(|(k, v)| Tag::builder().key(k).value(v).build())
                .collect(),
        ))
        .build()
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

/// Labels and allocatable for an instance type the embedded catalog does not know,
/// from what DescribeInstanceTypes says (allocatable with Karpenter's AL2023 overhead
/// formulas and 110 pods).
fn instance_type_from_api(name: &str, arch: &str, vcpus: i64, memory_mib: i64) -> InstanceType {
    let mut labels = BTreeMap::new();
    labels.insert(catalog::LABEL_INSTANCE_TYPE.to_string(), name.to_string());
    labels.insert(catalog::LABEL_ARCH.to_string(), arch.to_string());
    labels.insert(catalog::LABEL_OS.to_string(), "linux".to_string());
    labels.insert(catalog::LABEL_INSTANCE_CPU.to_string(), vcpus.to_string());
    labels.insert(
        catalog::LABEL_INSTANCE_MEMORY.to_string(),
        memory_mib.to_string(),
    );
    if let Some((family, size)) = name.split_once('.') {
        labels.insert("karpenter.k8s.aws/instance-family".into(), family.into());
        labels.insert("karpenter.k8s.aws/instance-size".into(), size.into());
        if let Some(i) = family.find(|c: char| c.is_ascii_digit()) {
            labels.insert(
                "karpenter.k8s.aws/instance-category".into(),
                family[..i].into(),
            );
            let generation: String = family[i..]
                .chars()
                .take_while(|c| c.is_ascii_digit())
                .collect();
            labels.insert("karpenter.k8s.aws/instance-generation".into(), generation);
        }
    }
    let max_pods = 110i64;
    // kube-reserved CPU: 6% of the first core, 1% of the second, 0.5% of the next
    // two, 0.25% of the rest (millicores).
    let cores = vcpus * 1000;
    let reserved_cpu = [(1000, 60), (1000, 10), (2000, 5)]
        .iter()
        .scan(cores, |left, &(span, permille)| {
            let used = (*left).min(span);
            *left -= used;
            Some(used * permille / 1000)
        })
        .sum::<i64>()
        + (cores - 4000).max(0) * 25 / 10_000;
    let reserved_mem_mib = 255 + 11 * max_pods + 100; // kube-reserved + eviction threshold
    let mut allocatable = Resources::new();
    allocatable.set_milli("cpu", (cores - reserved_cpu).max(0));
    allocatable.set_milli(
        "memory",
        (memory_mib - reserved_mem_mib).max(0) * (1 << 20) * 1000,
    );
    allocatable.set_milli("pods", max_pods * 1000);
    let mut capacity = allocatable.clone();
    capacity.set_milli("cpu", cores);
    capacity.set_milli("memory", memory_mib * (1 << 20) * 1000);
    InstanceType {
        name: name.to_string(),
        labels,
        allocatable,
        capacity,
        on_demand_price: None,
    }
}

#[async_trait]
impl Cloud for Ec2Cloud {
    async fn catalog(&self) -> Result<Catalog, CloudError> {
        if let Some(catalog) = self
            .read
            .catalog
            .get(Instant::now(), self.config.catalog_ttl)
        {
            return Ok(catalog);
        }
        // Which types are offered in at least one zone of the region.
        let mut offered: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut next: Option<String> = None;
        loop {
            let out = self
                .ec2
                .describe_instance_type_offerings()
                .location_type(LocationType::AvailabilityZone)
                .set_next_token(next.take())
                .send()
                .await
                .map_err(|e| cloud_error("DescribeInstanceTypeOfferings", e))?;
            for o in out.instance_type_offerings.unwrap_or_default() {
                if let (Some(t), Some(zone)) = (o.instance_type, o.location) {
                    offered
                        .entry(t.as_str().to_string())
                        .or_default()
                        .insert(zone);
                }
            }
            match out.next_token {
                Some(t) if !t.is_empty() => next = Some(t),
                _ => break,
            }
        }
        let embedded = Catalog::embedded();
        let mut types = Vec::new();
        let mut next: Option<String> = None;
        loop {
            let out = self
                .ec2
                .describe_instance_types()
                .set_next_token(next.take())
                .send()
                .await
                .map_err(|e| cloud_error("DescribeInstanceTypes", e))?;
            for info in out.instance_types.unwrap_or_default() {
                let Some(name) = info.instance_type.as_ref().map(|t| t.as_str().to_string()) else {
                    continue;
                };
                if !offered.contains_key(&name) {
                    continue;
                }
                if let Some(known) = embedded.get(&name) {
                    types.push(known.clone());
                    continue;
                }
                let arch = info
                    .processor_info
                    .as_ref()
                    .and_then(|p| p.supported_architectures.as_ref())
                    .map(|archs| {
                        if archs.contains(&aws_sdk_ec2::types::ArchitectureType::Arm64) {
                            "arm64"
                        } else {
                            "amd64"
                        }
                    })
                    .unwrap_or("amd64");
                let vcpus = info
                    .v_cpu_info
                    .as_ref()
                    .and_then(|v| v.default_v_cpus)
                    .unwrap_or(0);
                let memory = info
                    .memory_info
                    .as_ref()
                    .and_then(|m| m.size_in_mib)
                    .unwrap_or(0);
                if vcpus == 0 || memory == 0 {
                    continue;
                }
                types.push(instance_type_from_api(
                    &name,
                    arch,
                    i64::from(vcpus),
                    memory,
                ));
            }
            match out.next_token {
                Some(t) if !t.is_empty() => next = Some(t),
                _ => break,
            }
        }
        types.sort_by(|a, b| a.name.cmp(&b.name));
        if types.is_empty() {
            return Err(CloudError::new(
                ErrorKind::NotFound,
                "DescribeInstanceTypes: no instance type is offered in this region",
            ));
        }
        let catalog = Catalog { types };
        self.read.catalog.put(Instant::now(), catalog.clone());
        Ok(catalog)
    }

    async fn spot_prices(&self) -> Result<BTreeMap<(String, String), f64>, CloudError> {
        if let Some(prices) = self
            .read
            .spot_prices
            .get(Instant::now(), self.config.spot_prices_ttl)
        {
            return Ok(prices);
        }
        let mut latest: BTreeMap<(String, String), (i64, f64)> = BTreeMap::new();
        let mut next: Option<String> = None;
        let now = std::time::SystemTime::now();
        loop {
            let out = self
                .ec2
                .describe_spot_price_history()
                .product_descriptions("Linux/UNIX")
                .start_time(now.into())
                .set_next_token(next.take())
                .send()
                .await
                .map_err(|e| cloud_error("DescribeSpotPriceHistory", e))?;
            for p in out.spot_price_history.unwrap_or_default() {
                let (Some(t), Some(zone), Some(price)) =
                    (p.instance_type, p.availability_zone, p.spot_price)
                else {
                    continue;
                };
                let Ok(price) = price.parse::<f64>() else {
                    continue;
                };
                let at = p.timestamp.map(|d| d.secs()).unwrap_or(0);
                let key = (t.as_str().to_string(), zone);
                if latest.get(&key).is_none_or(|(seen, _)| at >= *seen) {
                    latest.insert(key, (at, price));
                }
            }
            match out.next_token {
                Some(t) if !t.is_empty() => next = Some(t),
                _ => break,
            }
        }
        let prices: BTreeMap<(String, String), f64> =
            latest.into_iter().map(|(k, (_, p))| (k, p)).collect();
        self.read.spot_prices.put(Instant::now(), prices.clone());
        Ok(prices)
    }

    async fn resolve_node_class(
        &self,
        node_class: &Ec2NodeClass,
        kubernetes_version: &str,
    ) -> Result<ResolvedNodeClass, CloudError> {
        let name = &node_class.name;
        let subnets = self.subnets(&node_class.subnet_selector_terms).await?;
        if subnets.is_empty() {
            return Err(CloudError::new(
                ErrorKind::NotFound,
                format!("EC2NodeClass {name}: subnetSelectorTerms match no subnet"),
            ));
        }
        let security_group_ids = self
            .security_groups(&node_class.security_group_selector_terms)
            .await?;
        if security_group_ids.is_empty() {
            return Err(CloudError::new(
                ErrorKind::NotFound,
                format!("EC2NodeClass {name}: securityGroupSelectorTerms match no security group"),
            ));
        }
        let images = self
            .images(&node_class.ami_selector_terms, kubernetes_version)
            .await?;
        if images.is_empty() {
            return Err(CloudError::new(
                ErrorKind::NotFound,
                format!("EC2NodeClass {name}: amiSelectorTerms match no image"),
            ));
        }
        // Last, so a class that selects nothing creates nothing in IAM.
        let instance_profile = self.instance_profile(node_class).await?;
        Ok(ResolvedNodeClass {
            subnets,
            security_group_ids,
            images,
            instance_profile: Some(instance_profile),
        })
    }

    async fn launch(&self, request: &LaunchRequest) -> Result<Launched, LaunchError> {
        // The subnet with the most free addresses in each zone.
        let mut subnet_by_zone: HashMap<String, Subnet> = HashMap::new();
        for s in &request.resolved.subnets {
            let better = subnet_by_zone
                .get(&s.zone)
                .is_none_or(|cur| s.available_ips > cur.available_ips);
            if better {
                subnet_by_zone.insert(s.zone.clone(), s.clone());
            }
        }
        // Offerings by capacity type, cheapest group first.
        let mut groups: BTreeMap<CapacityType, Vec<Offering>> = BTreeMap::new();
        for o in &request.offerings {
            groups.entry(o.capacity_type).or_default().push(o.clone());
        }
        let mut groups: Vec<(CapacityType, Vec<Offering>)> = groups.into_iter().collect();
        for (_, offerings) in &mut groups {
            offerings.sort_by(|a, b| a.price.total_cmp(&b.price));
        }
        groups.sort_by(|a, b| a.1[0].price.total_cmp(&b.1[0].price));
        if groups.is_empty() {
            return Err(CloudError::new(
                ErrorKind::Invalid,
                format!("claim {}: no offerings to launch", request.claim_name),
            )
            .into());
        }

        let mut unavailable = Vec::new();
        let mut messages = Vec::new();
        for (capacity_type, offerings) in &groups {
            match self
                .launch_group(request, *capacity_type, offerings, &subnet_by_zone)
                .await
            {
                Ok(launched) => return Ok(launched),
                Err(LaunchError::InsufficientCapacity { offerings, message }) => {
                    tracing::info!(claim = %request.claim_name, capacity_type = %capacity_type,
                        offerings = offerings.len(), "insufficient capacity");
                    unavailable.extend(offerings);
                    messages.push(message);
                }
                Err(LaunchError::Cloud(e)) => {
                    return Err(self.while_profile_propagates(request, e).into());
                }
            }
        }
        Err(LaunchError::InsufficientCapacity {
            offerings: unavailable,
            message: messages.join("; "),
        })
    }

    async fn terminate(&self, instance_ids: &[String]) -> Result<(), CloudError> {
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

    async fn owned_instances(&self) -> Result<Vec<Instance>, CloudError> {
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

    async fn cluster_instances_launched_by_karpenter(&self) -> Result<Vec<Instance>, CloudError> {
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
}

impl Ec2Cloud {
    /// The instance profile of a class: `instanceProfile` as written, else the managed
    /// profile of its role, created or adopted unless this is a dry run.
    async fn instance_profile(&self, class: &Ec2NodeClass) -> Result<String, CloudError> {
        match (&class.instance_profile, &class.role) {
            (Some(profile), _) => Ok(profile.clone()),
            (None, Some(role)) => {
                if self.region.as_deref().unwrap_or_default().is_empty() {
                    return Err(CloudError::new(
                        ErrorKind::Invalid,
                        format!(
                            "EC2NodeClass {}: no AWS region is configured, so its role's instance profile cannot be named",
                            class.name
                        ),
                    ));
                }
                if self.config.manage_instance_profiles {
                    self.profiles.ensure(class, role).await
                } else {
                    Ok(self.profiles.name(class))
                }
            }
            (None, None) => Err(CloudError::new(
                ErrorKind::Invalid,
                format!(
                    "EC2NodeClass {}: neither role nor instanceProfile is set",
                    class.name
                ),
            )),
        }
    }

    /// A launch EC2 refused as invalid shortly after this process created the instance
    /// profile it uses is most likely IAM's propagation delay: report it as
    /// `Unavailable`, so the claim is retried rather than failed.
    fn while_profile_propagates(&self, request: &LaunchRequest, err: CloudError) -> CloudError {
        let Some(profile) = request.resolved.instance_profile.as_deref() else {
            return err;
        };
        let fresh = self.profiles.recently_created(profile, PROFILE_PROPAGATION);
        match propagation_kind(err.kind, fresh) {
            kind if kind == err.kind => err,
            kind => CloudError {
                kind,
                message: format!(
                    "{} (instance profile {profile} was created moments ago; IAM may not have propagated it yet)",
                    err.message
                ),
                source: err.source,
            },
        }
    }

    /// DescribeInstances over all pages: each instance with its tags.
    async fn describe_instances(
        &self,
        filters: Vec<Filter>,
    ) -> Result<Vec<(Instance, BTreeMap<String, String>)>, CloudError> {
        let mut instances = Vec::new();
        let mut next: Option<String> = None;
        loop {
            let out = self
                .ec2
                .describe_instances()
                .set_filters(Some(filters.clone()))
                .set_next_token(next.take())
                .send()
                .await
                .map_err(|e| cloud_error("DescribeInstances", e))?;
            for reservation in out.reservations.unwrap_or_default() {
                for i in reservation.instances.unwrap_or_default() {
                    let Some(id) = i.instance_id else { continue };
                    let tags: BTreeMap<String, String> = i
                        .tags
                        .unwrap_or_default()
                        .into_iter()
                        .filter_map(|t| Some((t.key?, t.value.unwrap_or_default())))
                        .collect();
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
                        // The `instance-lifecycle` filter is not universally implemented;
                        // the field is.
                        capacity_type: match i.instance_lifecycle {
                            Some(InstanceLifecycleType::Spot) => CapacityType::Spot,
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
                    };
                    instances.push((instance, tags));
                }
            }
            match out.next_token {
                Some(t) if !t.is_empty() => next = Some(t),
                _ => break,
            }
        }
        Ok(instances)
    }
}

fn state_filter(states: &[&str]) -> Filter {
    Filter::builder()
        .name("instance-state-name")
        .set_values(Some(states.iter().map(|s| s.to_string()).collect()))
        .build()
}

/// The kind a launch failure is reported as: `Invalid` becomes `Unavailable` (retry
/// later) while the instance profile it used is fresh from this process.
fn propagation_kind(kind: ErrorKind, profile_is_fresh: bool) -> ErrorKind {
    match kind {
        ErrorKind::Invalid if profile_is_fresh => ErrorKind::Unavailable,
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reused_value_is_served_until_its_ttl_then_read_again() {
        let reused: Reused<u32> = Reused::default();
        let t0 = Instant::now();
        let ttl = Duration::from_secs(300);
        assert_eq!(reused.get(t0, ttl), None, "nothing read yet");
        reused.put(t0, 7);
        assert_eq!(reused.get(t0 + Duration::from_secs(299), ttl), Some(7));
        assert_eq!(reused.get(t0 + ttl, ttl), None, "stale at the ttl");
        reused.put(t0 + ttl, 8);
        assert_eq!(reused.get(t0 + ttl, ttl), Some(8));
        assert_eq!(
            reused.get(t0, Duration::ZERO),
            None,
            "a zero ttl never reuses"
        );
    }

    #[test]
    fn an_invalid_launch_is_retried_only_while_a_new_instance_profile_propagates() {
        assert_eq!(
            propagation_kind(ErrorKind::Invalid, true),
            ErrorKind::Unavailable
        );
        assert_eq!(
            propagation_kind(ErrorKind::Invalid, false),
            ErrorKind::Invalid
        );
        assert_eq!(
            propagation_kind(ErrorKind::Unauthorized, true),
            ErrorKind::Unauthorized
        );
    }

    #[test]
    fn instance_ids_are_checked_before_terminating() {
        assert!(is_instance_id("i-0123456789abcdef0"));
        assert!(is_instance_id("i-1234abcd"));
        assert!(!is_instance_id("i-0123456789ABCDEF0"));
        assert!(!is_instance_id("i-123"));
        assert!(!is_instance_id("sg-1234abcd"));
        assert!(!is_instance_id("i-0123456789abcdef0 "));
    }

    #[test]
    fn volume_sizes_parse_to_gib() {
        assert_eq!(parse_gib("20Gi").unwrap(), 20);
        assert_eq!(parse_gib("1Ti").unwrap(), 1024);
        assert_eq!(parse_gib("100").unwrap(), 100);
        assert!(parse_gib("lots").is_err());
    }

    #[test]
    fn graviton_families_are_arm64() {
        assert_eq!(guess_arch("m7g.large"), "arm64");
        assert_eq!(guess_arch("c7gn.xlarge"), "arm64");
        assert_eq!(guess_arch("a1.medium"), "arm64");
        assert_eq!(guess_arch("m5.large"), "amd64");
        assert_eq!(guess_arch("m7i-flex.large"), "amd64");
    }

    #[test]
    fn client_tokens_are_stable_per_request_and_fit_the_limit() {
        let o = |t: &str| Offering {
            instance_type: t.into(),
            zone: "us-east-1a".into(),
            capacity_type: CapacityType::Spot,
            price: 0.1,
        };
        let a = client_token(
            "default-x7k2p",
            CapacityType::Spot,
            &[o("m5.large"), o("c5.large")],
        );
        assert!(a.starts_with("default-x7k2p-"));
        assert_eq!(
            a,
            client_token(
                "default-x7k2p",
                CapacityType::Spot,
                &[o("m5.large"), o("c5.large")]
            )
        );
        assert_ne!(
            a,
            client_token("default-x7k2p", CapacityType::Spot, &[o("c5.large")])
        );
        assert!(client_token(&"x".repeat(100), CapacityType::Spot, &[]).len() <= 64);
    }

    #[test]
    fn api_only_instance_types_get_karpenter_labels_and_overhead() {
        let t = instance_type_from_api("m9z.2xlarge", "amd64", 8, 32768);
        assert_eq!(t.labels["karpenter.k8s.aws/instance-family"], "m9z");
        assert_eq!(t.labels["karpenter.k8s.aws/instance-category"], "m");
        assert_eq!(t.labels["karpenter.k8s.aws/instance-generation"], "9");
        assert_eq!(t.allocatable.get_milli("cpu"), 8000 - 60 - 10 - 10 - 10);
        assert_eq!(t.on_demand_price, None);
    }
}
