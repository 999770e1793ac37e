//! Launch templates named by their content (`nodewright-<sha256>`): identical content is
//! one template, created once and reused by every claim; any change is a new template.
//! What a template holds is [`TemplateContent`], in a canonical, hashable form.
//!
//! The EC2NodeClass launch fields go where Karpenter-AWS puts them
//! (`pkg/providers/launchtemplate`): `networkInterfaces` become the template's
//! interfaces (network card and device index, interface type; the security groups on
//! each; `ipPrefixCount`, the public IP setting and `connectionTracking` on every one
//! but EFA-only interfaces); without them, one primary interface carries
//! `ipPrefixCount`, `associatePublicIPAddress` and `connectionTracking` when any is set.
//! `placementGroupSelector` is the template's placement group (by id, or by name,
//! which EC2 resolves the same way); `volumeInitializationRate` goes on its EBS volume;
//! `instanceStorePolicy: RAID0` is written into the user data. A template that sets
//! none of these is what it was before they were read, name included.
//!
//! A launch into a capacity reservation has a template of its own per reservation
//! (as Karpenter-AWS): `capacityReservationSpecification` targets the reservation with
//! preference `capacity-reservations-only`, a Capacity Block adds the `capacity-block`
//! market type, and the kubelet registers with `karpenter.sh/capacity-type=reserved`
//! and the reservation's id and type labels.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::{
    CapacityReservationPreference, CapacityReservationTarget,
    LaunchTemplateCapacityReservationSpecificationRequest,
    LaunchTemplateInstanceMarketOptionsRequest, MarketType,
};
use aws_sdk_ec2::types::{
    ConnectionTrackingSpecificationRequest, Filter, LaunchTemplateBlockDeviceMappingRequest,
    LaunchTemplateEbsBlockDeviceRequest, LaunchTemplateHttpTokensState,
    LaunchTemplateIamInstanceProfileSpecificationRequest,
    LaunchTemplateInstanceMetadataEndpointState, LaunchTemplateInstanceMetadataOptionsRequest,
    LaunchTemplateInstanceMetadataProtocolIpv6,
    LaunchTemplateInstanceNetworkInterfaceSpecificationRequest, LaunchTemplatePlacementRequest,
    LaunchTemplateTagSpecificationRequest, LaunchTemplatesMonitoringRequest,
    RequestLaunchTemplateData, ResourceType, Tag, VolumeType,
};
use base64::Engine;
use serde::Serialize;
use sha2::{Digest, Sha256};

use nodewright_core::api::model::{
    AmiSelectorTerm, InstanceStorePolicy, InterfaceType, Kubelet, PlacementGroupSelector, Taint,
    TaintEffect,
};
use nodewright_core::catalog::{CapacityType, Reservation, ReservationMarket};
use nodewright_engine::ports::{CloudError, ErrorKind, Image, LaunchRequest};

use super::{Ec2Cloud, hex, tag_specification};
use crate::error::{classify, cloud_error};
use crate::tags::TAG_NODECLAIM;
use crate::userdata;
use nodewright_core::well_known::TAINT_UNREGISTERED;

impl Ec2Cloud {
    pub(super) fn template_content(
        &self,
        request: &LaunchRequest,
        capacity_type: CapacityType,
        image: &Image,
        reservation: Option<&Reservation>,
        kubelet: &Kubelet,
    ) -> Result<TemplateContent, CloudError> {
        let class = &request.node_class;
        // Labels the kubelet registers with; claim-specific ones are left out so the
        // template can be shared (the lifecycle applies them once the node registers).
        let mut labels = request.labels.clone();
        labels.remove(TAG_NODECLAIM);
        labels.insert(
            nodewright_core::well_known::LABEL_CAPACITY_TYPE.into(),
            capacity_type.as_str().into(),
        );
        if let Some(r) = reservation {
            labels.extend(r.node_labels());
        }
        let mut taints = request.taints.clone();
        if !taints.iter().any(|t| t.key == TAINT_UNREGISTERED) {
            taints.push(Taint {
                key: TAINT_UNREGISTERED.into(),
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
        let raid0 = class.instance_store_policy == Some(InstanceStorePolicy::Raid0);
        let user_data = match family.as_deref().map(str::to_ascii_lowercase).as_deref() {
            Some("bottlerocket") => userdata::bottlerocket_user_data(
                &self.cluster,
                &labels,
                &taints,
                kubelet,
                class.user_data.as_deref(),
                raid0,
            ),
            // AL2023 is the default family.
            _ => userdata::al2023_user_data(
                &self.cluster,
                &labels,
                &taints,
                kubelet,
                class.user_data.as_deref(),
                raid0,
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
                    volume_initialization_rate: e.volume_initialization_rate,
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
            network_interfaces: class
                .network_interfaces
                .iter()
                .map(|n| TemplateInterface {
                    network_card_index: n.network_card_index,
                    device_index: n.device_index,
                    interface_type: n.interface_type.as_str(),
                })
                .collect(),
            ip_prefix_count: class.ip_prefix_count,
            connection_tracking: class.connection_tracking.as_ref().map(|c| {
                TemplateConnectionTracking {
                    tcp_established_timeout: c.tcp_established_timeout,
                    udp_stream_timeout: c.udp_stream_timeout,
                    udp_timeout: c.udp_timeout,
                }
            }),
            placement_group: class.placement_group_selector.clone().map(|p| match p {
                PlacementGroupSelector::Id(id) => TemplatePlacementGroup::Id(id),
                PlacementGroupSelector::Name(name) => TemplatePlacementGroup::Name(name),
            }),
            capacity_reservation: reservation.map(|r| TemplateReservation {
                id: r.id.clone(),
                capacity_block: r.market() == ReservationMarket::CapacityBlock,
                interruptible: r.market() == ReservationMarket::Interruptible,
            }),
        })
    }

    /// The name of a launch template with this content, creating it if needed.
    pub(super) async fn ensure_launch_template(
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
}

/// Everything a launch template holds, in a canonical form: its JSON is what the
/// template name hashes.
#[derive(Debug, Clone, Serialize)]
pub(super) struct TemplateContent {
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
    // Read later than the fields above: left out of the JSON when unset, so templates
    // that do not use them keep their names.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    network_interfaces: Vec<TemplateInterface>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ip_prefix_count: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    connection_tracking: Option<TemplateConnectionTracking>,
    #[serde(skip_serializing_if = "Option::is_none")]
    placement_group: Option<TemplatePlacementGroup>,
    #[serde(skip_serializing_if = "Option::is_none")]
    capacity_reservation: Option<TemplateReservation>,
}

/// The capacity reservation a template launches into.
#[derive(Debug, Clone, Serialize)]
struct TemplateReservation {
    id: String,
    capacity_block: bool,
    /// Left out of the name's digest when false: templates made before interruptible
    /// reservations keep their names.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    interruptible: bool,
}

#[derive(Debug, Clone, Serialize)]
struct TemplateInterface {
    network_card_index: i32,
    device_index: i32,
    interface_type: &'static str,
}

#[derive(Debug, Clone, Serialize)]
struct TemplateConnectionTracking {
    tcp_established_timeout: Option<i32>,
    udp_stream_timeout: Option<i32>,
    udp_timeout: Option<i32>,
}

#[derive(Debug, Clone, Serialize)]
enum TemplatePlacementGroup {
    Id(String),
    Name(String),
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
    #[serde(skip_serializing_if = "Option::is_none")]
    volume_initialization_rate: Option<i32>,
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
                    .set_snapshot_id(e.snapshot_id.clone())
                    .set_volume_initialization_rate(e.volume_initialization_rate);
                if e.delete_on_termination.is_none() {
                    b = b.delete_on_termination(true);
                }
                m = m.ebs(b.build());
            }
            data = data.block_device_mappings(m.build());
        }
        match self.network_interfaces_request() {
            // The security groups then live on the interfaces.
            Some(interfaces) => data = data.set_network_interfaces(Some(interfaces)),
            None => data = data.set_security_group_ids(Some(self.security_groups.clone())),
        }
        if let Some(group) = &self.placement_group {
            let placement = match group {
                TemplatePlacementGroup::Id(id) => {
                    LaunchTemplatePlacementRequest::builder().group_id(id)
                }
                TemplatePlacementGroup::Name(name) => {
                    LaunchTemplatePlacementRequest::builder().group_name(name)
                }
            };
            data = data.placement(placement.build());
        }
        if let Some(r) = &self.capacity_reservation {
            data = data.capacity_reservation_specification(
                LaunchTemplateCapacityReservationSpecificationRequest::builder()
                    .capacity_reservation_preference(
                        CapacityReservationPreference::CapacityReservationsOnly,
                    )
                    .capacity_reservation_target(
                        CapacityReservationTarget::builder()
                            .capacity_reservation_id(&r.id)
                            .build(),
                    )
                    .build(),
            );
            // Karpenter-AWS's market types: an ODCR needs none.
            let market = if r.capacity_block {
                Some(MarketType::CapacityBlock)
            } else if r.interruptible {
                Some(MarketType::InterruptibleCapacityReservation)
            } else {
                None
            };
            if let Some(market) = market {
                data = data.instance_market_options(
                    LaunchTemplateInstanceMarketOptionsRequest::builder()
                        .market_type(market)
                        .build(),
                );
            }
        }
        data.build()
    }
}

impl TemplateContent {
    /// The template's network interfaces, or `None` to leave EC2's default primary
    /// interface with the template's security groups.
    fn network_interfaces_request(
        &self,
    ) -> Option<Vec<LaunchTemplateInstanceNetworkInterfaceSpecificationRequest>> {
        let tracking = self.connection_tracking.as_ref().map(|c| {
            ConnectionTrackingSpecificationRequest::builder()
                .set_tcp_established_timeout(c.tcp_established_timeout)
                .set_udp_stream_timeout(c.udp_stream_timeout)
                .set_udp_timeout(c.udp_timeout)
                .build()
        });
        if self.network_interfaces.is_empty() {
            if self.associate_public_ip_address.is_none()
                && self.ip_prefix_count.is_none()
                && tracking.is_none()
            {
                return None;
            }
            return Some(vec![
                LaunchTemplateInstanceNetworkInterfaceSpecificationRequest::builder()
                    .device_index(0)
                    .set_associate_public_ip_address(self.associate_public_ip_address)
                    .set_ipv4_prefix_count(self.ip_prefix_count)
                    .set_connection_tracking_specification(tracking)
                    .set_groups(Some(self.security_groups.clone()))
                    .build(),
            ]);
        }
        Some(
            self.network_interfaces
                .iter()
                .map(|n| {
                    // EC2 refuses prefixes, a public IP or connection tracking on an
                    // EFA-only interface.
                    let addressed = n.interface_type != InterfaceType::EfaOnly.as_str();
                    LaunchTemplateInstanceNetworkInterfaceSpecificationRequest::builder()
                        .network_card_index(n.network_card_index)
                        .device_index(n.device_index)
                        .interface_type(n.interface_type)
                        .set_ipv4_prefix_count(self.ip_prefix_count.filter(|_| addressed))
                        .set_associate_public_ip_address(
                            self.associate_public_ip_address.filter(|_| addressed),
                        )
                        .set_connection_tracking_specification(
                            tracking.clone().filter(|_| addressed),
                        )
                        .set_groups(Some(self.security_groups.clone()))
                        .build()
                })
                .collect(),
        )
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

#[cfg(test)]
mod tests {
    use super::*;

    fn content() -> TemplateContent {
        TemplateContent {
            image_id: "ami-1".into(),
            user_data: "ud".into(),
            instance_profile: "profile".into(),
            security_groups: vec!["sg-1".into()],
            block_devices: vec![(
                "/dev/xvda".into(),
                Some(TemplateEbs {
                    volume_size_gib: Some(20),
                    volume_type: None,
                    iops: None,
                    throughput: None,
                    encrypted: None,
                    kms_key_id: None,
                    delete_on_termination: None,
                    snapshot_id: None,
                    volume_initialization_rate: None,
                }),
            )],
            http_endpoint: "enabled".into(),
            http_protocol_ipv6: "disabled".into(),
            http_put_response_hop_limit: 1,
            http_tokens: "required".into(),
            associate_public_ip_address: None,
            detailed_monitoring: false,
            tags: BTreeMap::new(),
            network_interfaces: vec![],
            ip_prefix_count: None,
            connection_tracking: None,
            placement_group: None,
            capacity_reservation: None,
        }
    }

    #[test]
    fn a_template_without_the_launch_fields_keeps_the_name_it_had_before_them() {
        // The JSON a name hashes, exactly as before the fields were read: templates
        // already created are reused, not duplicated.
        let json = serde_json::to_string(&content()).unwrap();
        assert_eq!(
            json,
            r#"{"image_id":"ami-1","user_data":"ud","instance_profile":"profile","security_groups":["sg-1"],"block_devices":[["/dev/xvda",{"volume_size_gib":20,"volume_type":null,"iops":null,"throughput":null,"encrypted":null,"kms_key_id":null,"delete_on_termination":null,"snapshot_id":null}]],"http_endpoint":"enabled","http_protocol_ipv6":"disabled","http_put_response_hop_limit":1,"http_tokens":"required","associate_public_ip_address":null,"detailed_monitoring":false,"tags":{}}"#
        );
        // Without any of them the groups stay on the template, as before.
        let request = content().to_request();
        assert_eq!(request.security_group_ids(), ["sg-1".to_string()]);
        assert!(request.network_interfaces().is_empty());
        assert!(request.placement().is_none());
        // Each one changes the name.
        let base = content().name();
        let mut with_prefixes = content();
        with_prefixes.ip_prefix_count = Some(1);
        assert_ne!(with_prefixes.name(), base);
        let mut with_group = content();
        with_group.placement_group = Some(TemplatePlacementGroup::Id("pg-1".into()));
        assert_ne!(with_group.name(), base);
    }

    #[test]
    fn a_reserved_template_targets_its_reservation_and_blocks_and_interruptible_odcrs_their_markets()
     {
        let base = content();
        assert!(
            base.to_request()
                .capacity_reservation_specification()
                .is_none()
        );
        let mut odcr = content();
        odcr.capacity_reservation = Some(TemplateReservation {
            id: "cr-0123".into(),
            capacity_block: false,
            interruptible: false,
        });
        let request = odcr.to_request();
        let spec = request.capacity_reservation_specification().unwrap();
        assert_eq!(
            spec.capacity_reservation_preference(),
            Some(&CapacityReservationPreference::CapacityReservationsOnly)
        );
        assert_eq!(
            spec.capacity_reservation_target()
                .and_then(|t| t.capacity_reservation_id()),
            Some("cr-0123")
        );
        assert!(request.instance_market_options().is_none());
        assert_ne!(odcr.name(), base.name());
        let mut block = odcr.clone();
        block.capacity_reservation = Some(TemplateReservation {
            id: "cr-0123".into(),
            capacity_block: true,
            interruptible: false,
        });
        assert_eq!(
            block
                .to_request()
                .instance_market_options()
                .and_then(|m| m.market_type()),
            Some(&MarketType::CapacityBlock)
        );
        assert_ne!(block.name(), odcr.name());
        let mut interruptible = odcr.clone();
        interruptible.capacity_reservation = Some(TemplateReservation {
            id: "cr-0123".into(),
            capacity_block: false,
            interruptible: true,
        });
        let request = interruptible.to_request();
        assert_eq!(
            request
                .instance_market_options()
                .and_then(|m| m.market_type()),
            Some(&MarketType::InterruptibleCapacityReservation)
        );
        assert_eq!(
            request
                .capacity_reservation_specification()
                .and_then(|s| s.capacity_reservation_target())
                .and_then(|t| t.capacity_reservation_id()),
            Some("cr-0123")
        );
        assert_ne!(interruptible.name(), odcr.name());
        assert_ne!(interruptible.name(), block.name());
    }

    #[test]
    fn an_odcr_template_keeps_the_name_it_had_before_interruptible_reservations() {
        let mut odcr = content();
        odcr.capacity_reservation = Some(TemplateReservation {
            id: "cr-0123".into(),
            capacity_block: false,
            interruptible: false,
        });
        let json = serde_json::to_value(&odcr).unwrap();
        assert_eq!(
            json["capacity_reservation"],
            serde_json::json!({"id": "cr-0123", "capacity_block": false})
        );
    }

    #[test]
    fn volume_sizes_parse_to_gib() {
        assert_eq!(parse_gib("20Gi").unwrap(), 20);
        assert_eq!(parse_gib("1Ti").unwrap(), 1024);
        assert_eq!(parse_gib("100").unwrap(), 100);
        assert!(parse_gib("lots").is_err());
    }
}
