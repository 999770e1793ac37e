//! Node-class resolution: an EC2NodeClass's selector terms → the subnets, security groups
//! and images they match (EC2, SSM for AMI aliases and `ssmParameter` terms), and its
//! instance profile (as written, or its role's, created or adopted in IAM). A
//! `placementGroupSelector` must name an available placement group.

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_ec2::error::ProvideErrorMetadata;
use aws_sdk_ec2::types::{ArchitectureValues, Filter, PlacementGroupState};

use nodewright_core::api::model::{
    AmiSelectorTerm, Ec2NodeClass, PlacementGroupSelector, SelectorTerm,
};
use nodewright_engine::ports::{CloudError, ErrorKind, Image, ResolvedNodeClass, Subnet};

use super::Ec2Cloud;
use crate::ami::alias_parameter_paths;
use crate::error::cloud_error;

impl Ec2Cloud {
    /// Resolves a class: every selector must match something; the instance profile
    /// comes last.
    pub(super) async fn resolve(
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
        if node_class
            .cpu_options
            .as_ref()
            .is_some_and(|c| c.nested_virtualization == Some(true))
        {
            // Not silently dropped: the EC2 SDK this build links (aws-sdk-ec2 1.208)
            // has no CpuOptions.NestedVirtualization to send.
            return Err(CloudError::new(
                ErrorKind::Invalid,
                format!(
                    "EC2NodeClass {name}: cpuOptions.nestedVirtualization \"enabled\" is not supported by this build (its EC2 SDK cannot request nested virtualization)"
                ),
            ));
        }
        if let Some(selector) = &node_class.placement_group_selector {
            self.placement_group(name, selector).await?;
        }
        // Last, so a class that selects nothing creates nothing in IAM.
        let instance_profile = self.instance_profile(node_class).await?;
        Ok(ResolvedNodeClass {
            subnets,
            security_group_ids,
            images,
            instance_profile: Some(instance_profile),
            reservations: Vec::new(),
        })
    }

    /// The id of the available placement group `selector` names; not found (the class
    /// is not ready) when there is none.
    pub(super) async fn placement_group(
        &self,
        class: &str,
        selector: &PlacementGroupSelector,
    ) -> Result<String, CloudError> {
        let (request, what) = match selector {
            PlacementGroupSelector::Id(id) => (
                self.ec2.describe_placement_groups().group_ids(id),
                format!("id {id:?}"),
            ),
            PlacementGroupSelector::Name(name) => (
                self.ec2.describe_placement_groups().group_names(name),
                format!("name {name:?}"),
            ),
        };
        let not_found = || {
            CloudError::new(
                ErrorKind::NotFound,
                format!(
                    "EC2NodeClass {class}: placementGroupSelector ({what}) matches no available placement group"
                ),
            )
        };
        let out = match request
            .filters(
                Filter::builder()
                    .name("state")
                    .values(PlacementGroupState::Available.as_str())
                    .build(),
            )
            .send()
            .await
        {
            Ok(out) => out,
            // EC2 answers an unknown name or id with an error rather than an empty list.
            Err(e) if names_an_unknown_placement_group(e.code()) => {
                return Err(not_found());
            }
            Err(e) => {
                return Err(cloud_error(format!("DescribePlacementGroups ({what})"), e));
            }
        };
        out.placement_groups
            .unwrap_or_default()
            .into_iter()
            .find(|g| g.state == Some(PlacementGroupState::Available))
            .and_then(|g| g.group_id)
            .ok_or_else(not_found)
    }

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
                                zone_id: s.availability_zone_id.unwrap_or_default(),
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
}

/// EC2's answer to DescribePlacementGroups naming a group that does not exist
/// (`InvalidPlacementGroup.Unknown` for a name, `InvalidPlacementGroupId.NotFound`
/// for an id): the selector matches nothing, which is no failure of the call.
fn names_an_unknown_placement_group(code: Option<&str>) -> bool {
    code.is_some_and(|c| {
        c.starts_with("InvalidPlacementGroup")
            && (c.ends_with(".Unknown") || c.ends_with(".NotFound"))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_placement_group_name_or_id_reads_as_not_found_and_nothing_else_does() {
        assert!(names_an_unknown_placement_group(Some(
            "InvalidPlacementGroup.Unknown"
        )));
        assert!(names_an_unknown_placement_group(Some(
            "InvalidPlacementGroupId.NotFound"
        )));
        assert!(!names_an_unknown_placement_group(Some(
            "InvalidPlacementGroupId.Malformed"
        )));
        assert!(!names_an_unknown_placement_group(Some(
            "UnauthorizedOperation"
        )));
        assert!(!names_an_unknown_placement_group(None));
    }
}
