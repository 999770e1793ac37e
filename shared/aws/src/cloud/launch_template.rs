//! Launch templates named by their content (`nodewright-<sha256>`): identical content is
//! one template, created once and reused by every claim; any change is a new template.
//! What a template holds is [`TemplateContent`], in a canonical, hashable form.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::{
    Filter, LaunchTemplateBlockDeviceMappingRequest, LaunchTemplateEbsBlockDeviceRequest,
    LaunchTemplateHttpTokensState, LaunchTemplateIamInstanceProfileSpecificationRequest,
    LaunchTemplateInstanceMetadataEndpointState, LaunchTemplateInstanceMetadataOptionsRequest,
    LaunchTemplateInstanceMetadataProtocolIpv6,
    LaunchTemplateInstanceNetworkInterfaceSpecificationRequest,
    LaunchTemplateTagSpecificationRequest, LaunchTemplatesMonitoringRequest,
    RequestLaunchTemplateData, ResourceType, Tag, VolumeType,
};
use base64::Engine;
use serde::Serialize;
use sha2::{Digest, Sha256};

use nodewright_core::api::model::{AmiSelectorTerm, Taint, TaintEffect};
use nodewright_core::catalog::{self, CapacityType};
use nodewright_engine::ports::{CloudError, ErrorKind, Image, LaunchRequest};

use super::{Ec2Cloud, TAG_NODECLAIM, UNREGISTERED_TAINT, hex, tag_specification};
use crate::error::{classify, cloud_error};
use crate::userdata;

impl Ec2Cloud {
    pub(super) fn template_content(
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

    #[test]
    fn volume_sizes_parse_to_gib() {
        assert_eq!(parse_gib("20Gi").unwrap(), 20);
        assert_eq!(parse_gib("1Ti").unwrap(), 1024);
        assert_eq!(parse_gib("100").unwrap(), 100);
        assert!(parse_gib("lots").is_err());
    }
}
