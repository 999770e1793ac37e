//! `karpenter.k8s.aws/v1` EC2NodeClass rules and defaults (the AWS provider's CRD).
//!
//! Facts followed: `amiSelectorTerms` is required with 1 to 30 terms; an `alias` term
//! (`family@version`, family one of al2, al2023, bottlerocket, windows2019,
//! windows2022; Windows families only `latest`) must be the only term. `amiFamily` is
//! optional with an alias (inferred from it, and if given must be that family or
//! `Custom`) and required otherwise; there is no `Custom` default. Exactly one of
//! `role` and `instanceProfile`. `metadataOptions` default to endpoint enabled, IPv6
//! disabled, hop limit 1, IMDSv2 required; a partly written object gets the defaults
//! for the fields it leaves out. Tag keys `kubernetes.io/cluster/*`,
//! `karpenter.sh/nodepool`, `karpenter.sh/nodeclaim`, `eks:eks-cluster-name` and
//! `karpenter.k8s.aws/ec2nodeclass` are Karpenter's own and refused.
//!
//! Launch fields (v1.15's CRD): `instanceStorePolicy` is `RAID0`; `networkInterfaces`
//! (at most 150) each name a network card index, a device index (both ≥ 0) and an
//! interface type (`interface` or `efa-only`), include the primary interface (card 0,
//! device 0, `interface`), repeat no (card, device) pair and put at most one EFA-only
//! interface on a card; `cpuOptions.nestedVirtualization` is `enabled` or `disabled`;
//! `placementGroupSelector` has exactly one of `name` (non-empty) and `id`
//! (`pg-` and lowercase letters or digits); `ipPrefixCount` is ≥ 0; `connectionTracking`
//! sets at least one of its timeouts, TCP established 60–432000 s, UDP stream 60–180 s,
//! UDP 30–60 s; an EBS `volumeInitializationRate` is 100–300 MiB/s and needs a
//! `snapshotID`.

use std::collections::BTreeMap;

use super::Document;
use super::model::{
    AmiSelectorTerm, BlockDevice, BlockDeviceMapping, CapacityReservationSelectorTerm,
    ConnectionTracking, CpuOptions, Ec2NodeClass, EvictionThreshold, InstanceMatchCriteria,
    InstanceStorePolicy, InterfaceType, Kubelet, MetadataOptions, NetworkInterface,
    PlacementGroupSelector, SelectorTerm,
};
use super::raw;
use super::report::{Report, deserialize_raw, object_name};
use crate::kubelet_expressions::Expression;
use crate::resources::parse_milli;

/// Alias families and the `amiFamily` each implies.
pub const ALIAS_FAMILIES: [(&str, &str); 5] = [
    ("al2", "AL2"),
    ("al2023", "AL2023"),
    ("bottlerocket", "Bottlerocket"),
    ("windows2019", "Windows2019"),
    ("windows2022", "Windows2022"),
];
pub const AMI_FAMILIES: [&str; 6] = [
    "AL2",
    "AL2023",
    "Bottlerocket",
    "Custom",
    "Windows2019",
    "Windows2022",
];
pub const VOLUME_TYPES: [&str; 7] = ["standard", "io1", "io2", "gp2", "sc1", "st1", "gp3"];
const RESTRICTED_TAGS: [&str; 4] = [
    "karpenter.sh/nodepool",
    "karpenter.sh/nodeclaim",
    "eks:eks-cluster-name",
    "karpenter.k8s.aws/ec2nodeclass",
];

pub(super) fn validate_node_class(doc: &Document, report: &mut Report<'_>) -> Option<Ec2NodeClass> {
    let name = object_name(&doc.value).map(str::to_string);
    if name.is_none() {
        report.missing("metadata.name");
    }
    let raw: raw::NodeClass = deserialize_raw(doc, report)?;
    let Some(spec) = raw.spec else {
        report.missing("spec");
        return None;
    };
    let ami_selector_terms = ami_terms(spec.ami_selector_terms, report);
    let ami_family = ami_family(spec.ami_family, &ami_selector_terms, report);
    let subnet_selector_terms = selector_terms(
        spec.subnet_selector_terms,
        "spec.subnetSelectorTerms",
        "subnet-",
        false,
        report,
    );
    let security_group_selector_terms = selector_terms(
        spec.security_group_selector_terms,
        "spec.securityGroupSelectorTerms",
        "sg-",
        true,
        report,
    );
    let (role, instance_profile) = identity(spec.role, spec.instance_profile, report);
    let block_device_mappings =
        block_device_mappings(spec.block_device_mappings.unwrap_or_default(), report);
    let metadata_options = metadata_options(spec.metadata_options, report);
    let tags = tags(spec.tags.unwrap_or_default(), report);
    let kubelet = kubelet(
        spec.kubelet,
        doc.value.pointer("/spec/kubelet").cloned(),
        report,
    );
    let class = Ec2NodeClass {
        name: name?,
        ami_selector_terms,
        ami_family,
        subnet_selector_terms,
        security_group_selector_terms,
        role,
        instance_profile,
        status_instance_profile: doc
            .value
            .pointer("/status/instanceProfile")
            .and_then(serde_json::Value::as_str)
            .filter(|p| !p.is_empty())
            .map(str::to_string),
        user_data: spec.user_data,
        block_device_mappings,
        metadata_options,
        tags,
        kubelet,
        associate_public_ip_address: spec.associate_public_ip_address,
        detailed_monitoring: spec.detailed_monitoring.unwrap_or(false),
        instance_store_policy: instance_store_policy(spec.instance_store_policy, report),
        network_interfaces: network_interfaces(spec.network_interfaces, report),
        cpu_options: spec.cpu_options.map(|c| cpu_options(c, report)),
        placement_group_selector: spec
            .placement_group_selector
            .and_then(|p| placement_group_selector(p, report)),
        ip_prefix_count: spec
            .ip_prefix_count
            .and_then(|n| int32_in(n, 0, i64::from(i32::MAX), "spec.ipPrefixCount", report)),
        connection_tracking: spec
            .connection_tracking
            .map(|c| connection_tracking(c, report)),
        capacity_reservation_selector_terms: capacity_reservation_terms(
            spec.capacity_reservation_selector_terms,
            report,
        ),
    };
    report.finish(class)
}

/// `capacityReservationSelectorTerms`, with the CRD's rules: at most 30 terms; each
/// names `id`, `tags` or `instanceMatchCriteria`; `id` stands alone; ids look like
/// `cr-…`, owners are 12-digit account ids, tags as for other selectors.
fn capacity_reservation_terms(
    raw: Option<Vec<raw::CapacityReservationTerm>>,
    report: &mut Report<'_>,
) -> Vec<CapacityReservationSelectorTerm> {
    const PATH: &str = "spec.capacityReservationSelectorTerms";
    let raw = raw.unwrap_or_default();
    if raw.len() > 30 {
        report.add(
            PATH,
            format!("expected at most 30 terms, got {}", raw.len()),
        );
    }
    let mut terms = Vec::with_capacity(raw.len());
    for (i, t) in raw.into_iter().enumerate() {
        let path = format!("{PATH}[{i}]");
        if t.id.is_none() && t.tags.is_none() && t.instance_match_criteria.is_none() {
            report.add(
                path.as_str(),
                "expected at least one of id, tags, instanceMatchCriteria, got none",
            );
            continue;
        }
        if t.id.is_some()
            && (t.tags.is_some() || t.owner_id.is_some() || t.instance_match_criteria.is_some())
        {
            report.add(
                path.as_str(),
                "id is mutually exclusive: it cannot be set with tags, ownerID or instanceMatchCriteria",
            );
            continue;
        }
        if let Some(id) = &t.id {
            check_id(id, "cr-", &format!("{path}.id"), report);
        }
        if let Some(owner) = &t.owner_id
            && !(owner.len() == 12 && owner.bytes().all(|b| b.is_ascii_digit()))
        {
            report.add(
                format!("{path}.ownerID"),
                format!("expected a 12-digit AWS account id, got {owner:?}"),
            );
        }
        // The CRD allows an empty map here (it selects on the other fields alone).
        if let Some(tags) = t.tags.as_ref().filter(|t| !t.is_empty()) {
            check_selector_tags(tags, &format!("{path}.tags"), report);
        }
        let instance_match_criteria = match t.instance_match_criteria.as_deref() {
            None => None,
            Some("open") => Some(InstanceMatchCriteria::Open),
            Some("targeted") => Some(InstanceMatchCriteria::Targeted),
            Some(other) => {
                report.add(
                    format!("{path}.instanceMatchCriteria"),
                    format!("expected one of open, targeted, got {other:?}"),
                );
                None
            }
        };
        terms.push(CapacityReservationSelectorTerm {
            id: t.id,
            owner_id: t.owner_id,
            tags: t.tags.unwrap_or_default(),
            instance_match_criteria,
        });
    }
    terms
}

fn ami_terms(raw: Option<Vec<raw::AmiTerm>>, report: &mut Report<'_>) -> Vec<AmiSelectorTerm> {
    const PATH: &str = "spec.amiSelectorTerms";
    let Some(raw) = raw else {
        report.missing(PATH);
        return vec![];
    };
    if raw.is_empty() || raw.len() > 30 {
        report.add(PATH, format!("expected 1 to 30 terms, got {}", raw.len()));
    }
    let count = raw.len();
    let terms: Vec<AmiSelectorTerm> = raw
        .into_iter()
        .enumerate()
        .filter_map(|(i, t)| ami_term(t, &format!("{PATH}[{i}]"), report))
        .collect();
    if count > 1
        && terms
            .iter()
            .any(|t| matches!(t, AmiSelectorTerm::Alias { .. }))
    {
        report.add(PATH, "an alias term must be the only term");
    }
    terms
}

fn ami_term(raw: raw::AmiTerm, path: &str, report: &mut Report<'_>) -> Option<AmiSelectorTerm> {
    let set: Vec<&str> = [
        ("alias", raw.alias.is_some()),
        ("id", raw.id.is_some()),
        ("name", raw.name.is_some()),
        ("tags", raw.tags.is_some()),
        ("ssmParameter", raw.ssm_parameter.is_some()),
    ]
    .into_iter()
    .filter_map(|(field, present)| present.then_some(field))
    .collect();
    if set.len() != 1 {
        report.add(
            path,
            format!(
                "expected exactly one of alias, id, name, tags, ssmParameter, got {}",
                describe_fields(&set)
            ),
        );
        return None;
    }
    let owner = raw.owner.filter(|o| !o.is_empty());
    if owner.is_some() && (raw.alias.is_some() || raw.id.is_some() || raw.ssm_parameter.is_some()) {
        report.add(
            format!("{path}.owner"),
            "owner can only be given with name or tags",
        );
    }
    if let Some(alias) = raw.alias {
        return parse_alias(&alias, &format!("{path}.alias"), report);
    }
    if let Some(id) = raw.id {
        check_id(&id, "ami-", &format!("{path}.id"), report);
        return Some(AmiSelectorTerm::Id(id));
    }
    if let Some(name) = raw.name {
        return non_empty(name, &format!("{path}.name"), report)
            .map(|name| AmiSelectorTerm::Name { name, owner });
    }
    if let Some(tags) = raw.tags {
        check_selector_tags(&tags, &format!("{path}.tags"), report);
        return Some(AmiSelectorTerm::Tags { tags, owner });
    }
    raw.ssm_parameter
        .and_then(|p| non_empty(p, &format!("{path}.ssmParameter"), report))
        .map(AmiSelectorTerm::SsmParameter)
}

fn describe_fields(fields: &[&str]) -> String {
    if fields.is_empty() {
        "none".into()
    } else {
        fields.join(" and ")
    }
}

fn parse_alias(alias: &str, path: &str, report: &mut Report<'_>) -> Option<AmiSelectorTerm> {
    let Some((family, version)) = alias.split_once('@') else {
        report.add(
            path,
            format!("expected family@version such as \"al2023@latest\", got {alias:?}"),
        );
        return None;
    };
    if !ALIAS_FAMILIES.iter().any(|(f, _)| *f == family) {
        report.add(
            path,
            format!("unknown family {family:?} (expected one of al2, al2023, bottlerocket, windows2019, windows2022)"),
        );
        return None;
    }
    let windows = family.starts_with("windows");
    let version_ok =
        version == "latest" || (!windows && version.len() > 1 && version.starts_with('v'));
    if !version_ok {
        let expected = if windows {
            "\"latest\" (Windows aliases cannot be pinned)"
        } else {
            "\"latest\" or a version like \"v20240625\""
        };
        report.add(
            path,
            format!("expected version {expected}, got {version:?}"),
        );
        return None;
    }
    Some(AmiSelectorTerm::Alias {
        family: family.into(),
        version: version.into(),
    })
}

fn ami_family(
    raw: Option<String>,
    terms: &[AmiSelectorTerm],
    report: &mut Report<'_>,
) -> Option<String> {
    const PATH: &str = "spec.amiFamily";
    let implied = terms.iter().find_map(|t| match t {
        AmiSelectorTerm::Alias { family, .. } => ALIAS_FAMILIES
            .iter()
            .find(|(f, _)| f == family)
            .map(|(_, implied)| *implied),
        _ => None,
    });
    match (raw, implied) {
        (None, Some(implied)) => Some(implied.to_string()),
        (None, None) => {
            if !terms.is_empty() {
                report.add(PATH, "required unless amiSelectorTerms uses an alias");
            }
            None
        }
        (Some(given), _) if !AMI_FAMILIES.contains(&given.as_str()) => {
            report.add(
                PATH,
                format!(
                    "unknown family {given:?} (expected one of {})",
                    AMI_FAMILIES.join(", ")
                ),
            );
            None
        }
        (Some(given), Some(implied)) if given != implied && given != "Custom" => {
            report.add(
                PATH,
                format!("must be {implied:?} (from the alias) or \"Custom\", got {given:?}"),
            );
            None
        }
        (Some(given), _) => Some(given),
    }
}

/// Subnet (`id` | `tags`) or security group (`id` | `name` | `tags`) terms.
fn selector_terms(
    raw: Option<Vec<raw::SelectorTerm>>,
    path: &str,
    id_prefix: &str,
    name_allowed: bool,
    report: &mut Report<'_>,
) -> Vec<SelectorTerm> {
    let Some(raw) = raw else {
        report.missing(path);
        return vec![];
    };
    if raw.is_empty() || raw.len() > 30 {
        report.add(path, format!("expected 1 to 30 terms, got {}", raw.len()));
    }
    raw.into_iter()
        .enumerate()
        .filter_map(|(i, t)| {
            selector_term(t, &format!("{path}[{i}]"), id_prefix, name_allowed, report)
        })
        .collect()
}

fn selector_term(
    raw: raw::SelectorTerm,
    path: &str,
    id_prefix: &str,
    name_allowed: bool,
    report: &mut Report<'_>,
) -> Option<SelectorTerm> {
    let expected = if name_allowed {
        "id, name, tags"
    } else {
        "id, tags"
    };
    let mut set = vec![];
    if raw.id.is_some() {
        set.push("id");
    }
    if raw.name.is_some() {
        set.push("name");
    }
    if raw.tags.is_some() {
        set.push("tags");
    }
    if set.len() != 1 || (!name_allowed && raw.name.is_some()) {
        report.add(
            path,
            format!(
                "expected exactly one of {expected}, got {}",
                describe_fields(&set)
            ),
        );
        return None;
    }
    if let Some(id) = raw.id {
        check_id(&id, id_prefix, &format!("{path}.id"), report);
        return Some(SelectorTerm::Id(id));
    }
    if let Some(name) = raw.name {
        return non_empty(name, &format!("{path}.name"), report).map(SelectorTerm::Name);
    }
    let tags = raw.tags.unwrap_or_default();
    check_selector_tags(&tags, &format!("{path}.tags"), report);
    Some(SelectorTerm::Tags(tags))
}

fn check_selector_tags(tags: &BTreeMap<String, String>, path: &str, report: &mut Report<'_>) {
    if tags.is_empty() {
        report.add(path, "at least one tag is required");
    }
    if tags.len() > 20 {
        report.add(
            path,
            format!("at most 20 tags are allowed, got {}", tags.len()),
        );
    }
    if tags.iter().any(|(k, v)| k.is_empty() || v.is_empty()) {
        report.add(
            path,
            "empty tag keys or values are not allowed (use \"*\" to match any value)",
        );
    }
}

/// EC2 ids look like `subnet-0abc…`: the prefix and lowercase letters or digits.
fn check_id(id: &str, prefix: &str, path: &str, report: &mut Report<'_>) {
    let ok = id.strip_prefix(prefix).is_some_and(|rest| {
        !rest.is_empty()
            && rest
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    });
    if !ok {
        report.add(
            path,
            format!("expected an id like \"{prefix}0123abcd\", got {id:?}"),
        );
    }
}

fn non_empty(value: String, path: &str, report: &mut Report<'_>) -> Option<String> {
    if value.is_empty() {
        report.add(path, "must not be empty");
        None
    } else {
        Some(value)
    }
}

fn identity(
    role: Option<String>,
    instance_profile: Option<String>,
    report: &mut Report<'_>,
) -> (Option<String>, Option<String>) {
    let role = role.and_then(|r| non_empty(r, "spec.role", report));
    let profile = instance_profile.and_then(|p| non_empty(p, "spec.instanceProfile", report));
    match (&role, &profile) {
        (None, None) => report.add(
            "spec",
            "expected one of role or instanceProfile, got neither",
        ),
        (Some(_), Some(_)) => {
            report.add("spec", "expected one of role or instanceProfile, got both")
        }
        _ => {}
    }
    (role, profile)
}

fn block_device_mappings(
    raw: Vec<raw::BlockDeviceMapping>,
    report: &mut Report<'_>,
) -> Vec<BlockDeviceMapping> {
    const PATH: &str = "spec.blockDeviceMappings";
    if raw.len() > 50 {
        report.add(
            PATH,
            format!("at most 50 entries are allowed, got {}", raw.len()),
        );
    }
    let mappings: Vec<BlockDeviceMapping> = raw
        .into_iter()
        .enumerate()
        .filter_map(|(i, m)| block_device_mapping(m, &format!("{PATH}[{i}]"), report))
        .collect();
    let roots = mappings.iter().filter(|m| m.root_volume).count();
    if roots > 1 {
        report.add(
            PATH,
            format!("at most one mapping may have rootVolume: true, got {roots}"),
        );
    }
    mappings
}

fn block_device_mapping(
    raw: raw::BlockDeviceMapping,
    path: &str,
    report: &mut Report<'_>,
) -> Option<BlockDeviceMapping> {
    let device_name = raw.device_name.filter(|d| !d.is_empty());
    if device_name.is_none() {
        report.missing(format!("{path}.deviceName"));
    }
    let ebs = raw.ebs.map(|e| ebs(e, &format!("{path}.ebs"), report));
    Some(BlockDeviceMapping {
        device_name: device_name?,
        ebs,
        root_volume: raw.root_volume.unwrap_or(false),
    })
}

fn ebs(raw: raw::Ebs, path: &str, report: &mut Report<'_>) -> BlockDevice {
    let volume_size = raw.volume_size.map(|raw::Scalar(text)| {
        match parse_milli(&text) {
            Ok(milli) if milli > 0 => {}
            Ok(_) => report.add(
                format!("{path}.volumeSize"),
                format!("must be positive, got {text:?}"),
            ),
            Err(e) => report.add(format!("{path}.volumeSize"), e.to_string()),
        }
        text
    });
    if let Some(kind) = raw
        .volume_type
        .as_deref()
        .filter(|t| !VOLUME_TYPES.contains(t))
    {
        report.add(
            format!("{path}.volumeType"),
            format!(
                "unknown volume type {kind:?} (expected one of {})",
                VOLUME_TYPES.join(", ")
            ),
        );
    }
    let volume_initialization_rate = raw.volume_initialization_rate.and_then(|rate| {
        let path = format!("{path}.volumeInitializationRate");
        if raw.snapshot_id.as_deref().is_none_or(str::is_empty) {
            report.add(
                &path,
                "snapshotID must be set when volumeInitializationRate is set",
            );
        }
        int32_in(rate, 100, 300, &path, report)
    });
    BlockDevice {
        volume_initialization_rate,
        volume_size,
        volume_type: raw.volume_type,
        iops: raw.iops,
        throughput: raw.throughput,
        encrypted: raw.encrypted,
        kms_key_id: raw.kms_key_id,
        delete_on_termination: raw.delete_on_termination,
        snapshot_id: raw.snapshot_id,
    }
}

/// `value` as an int32 when it lies in `[min, max]`; else the error, on `path`.
fn int32_in(value: i64, min: i64, max: i64, path: &str, report: &mut Report<'_>) -> Option<i32> {
    if !(min..=max).contains(&value) {
        let message = if max == i64::from(i32::MAX) && value >= min {
            format!("must be at most {max}, got {value}")
        } else if max == i64::from(i32::MAX) {
            format!("must be at least {min}, got {value}")
        } else {
            format!("must be between {min} and {max}, got {value}")
        };
        report.add(path, message);
        return None;
    }
    i32::try_from(value).ok()
}

fn instance_store_policy(
    raw: Option<String>,
    report: &mut Report<'_>,
) -> Option<InstanceStorePolicy> {
    match raw.as_deref() {
        None => None,
        Some("RAID0") => Some(InstanceStorePolicy::Raid0),
        Some(other) => {
            report.add(
                "spec.instanceStorePolicy",
                format!("unknown policy {other:?} (expected \"RAID0\")"),
            );
            None
        }
    }
}

fn network_interfaces(
    raw: Option<Vec<raw::NetworkInterface>>,
    report: &mut Report<'_>,
) -> Vec<NetworkInterface> {
    const PATH: &str = "spec.networkInterfaces";
    let raw = raw.unwrap_or_default();
    if raw.len() > 150 {
        report.add(
            PATH,
            format!("at most 150 entries are allowed, got {}", raw.len()),
        );
    }
    let count = raw.len();
    let interfaces: Vec<NetworkInterface> = raw
        .into_iter()
        .enumerate()
        .filter_map(|(i, n)| network_interface(n, &format!("{PATH}[{i}]"), report))
        .collect();
    if interfaces.len() != count {
        // An entry was refused: the list-wide rules would only repeat its error.
        return interfaces;
    }
    if count > 0
        && !interfaces.iter().any(|n| {
            n.network_card_index == 0
                && n.device_index == 0
                && n.interface_type == InterfaceType::Interface
        })
    {
        report.add(
            PATH,
            "must include a primary interface (networkCardIndex 0, deviceIndex 0, interfaceType \"interface\")",
        );
    }
    for (i, n) in interfaces.iter().enumerate() {
        let same_slot = interfaces[..i].iter().any(|m| {
            m.network_card_index == n.network_card_index && m.device_index == n.device_index
        });
        if same_slot {
            report.add(
                format!("{PATH}[{i}]"),
                format!(
                    "duplicate networkCardIndex {} and deviceIndex {}",
                    n.network_card_index, n.device_index
                ),
            );
        }
        let second_efa = n.interface_type == InterfaceType::EfaOnly
            && interfaces[..i].iter().any(|m| {
                m.interface_type == InterfaceType::EfaOnly
                    && m.network_card_index == n.network_card_index
            });
        if second_efa {
            report.add(
                format!("{PATH}[{i}]"),
                format!(
                    "at most one efa-only interface per network card (card {} has two)",
                    n.network_card_index
                ),
            );
        }
    }
    interfaces
}

fn network_interface(
    raw: raw::NetworkInterface,
    path: &str,
    report: &mut Report<'_>,
) -> Option<NetworkInterface> {
    let mut index = |field: &str, value: Option<i64>| match value {
        None => {
            report.missing(format!("{path}.{field}"));
            None
        }
        Some(v) => int32_in(
            v,
            0,
            i64::from(i32::MAX),
            &format!("{path}.{field}"),
            report,
        ),
    };
    let network_card_index = index("networkCardIndex", raw.network_card_index);
    let device_index = index("deviceIndex", raw.device_index);
    let interface_type = match raw.interface_type.as_deref() {
        None => {
            report.missing(format!("{path}.interfaceType"));
            None
        }
        Some("interface") => Some(InterfaceType::Interface),
        Some("efa-only") => Some(InterfaceType::EfaOnly),
        Some(other) => {
            report.add(
                format!("{path}.interfaceType"),
                format!(
                    "unknown interface type {other:?} (expected \"interface\" or \"efa-only\")"
                ),
            );
            None
        }
    };
    Some(NetworkInterface {
        network_card_index: network_card_index?,
        device_index: device_index?,
        interface_type: interface_type?,
    })
}

fn cpu_options(raw: raw::CpuOptions, report: &mut Report<'_>) -> CpuOptions {
    let nested_virtualization = match raw.nested_virtualization.as_deref() {
        None => None,
        Some("enabled") => Some(true),
        Some("disabled") => Some(false),
        Some(other) => {
            report.add(
                "spec.cpuOptions.nestedVirtualization",
                format!("expected \"enabled\" or \"disabled\", got {other:?}"),
            );
            None
        }
    };
    CpuOptions {
        nested_virtualization,
    }
}

fn placement_group_selector(
    raw: raw::PlacementGroupSelector,
    report: &mut Report<'_>,
) -> Option<PlacementGroupSelector> {
    const PATH: &str = "spec.placementGroupSelector";
    match (raw.id, raw.name) {
        (Some(_), Some(_)) => {
            report.add(PATH, "expected exactly one of id and name, got both");
            None
        }
        (None, None) => {
            report.add(PATH, "expected exactly one of id and name, got none");
            None
        }
        (Some(id), None) => {
            check_id(&id, "pg-", &format!("{PATH}.id"), report);
            Some(PlacementGroupSelector::Id(id))
        }
        (None, Some(name)) => {
            non_empty(name, &format!("{PATH}.name"), report).map(PlacementGroupSelector::Name)
        }
    }
}

fn connection_tracking(
    raw: raw::ConnectionTracking,
    report: &mut Report<'_>,
) -> ConnectionTracking {
    const PATH: &str = "spec.connectionTracking";
    if raw.tcp_established_timeout.is_none()
        && raw.udp_stream_timeout.is_none()
        && raw.udp_timeout.is_none()
    {
        report.add(
            PATH,
            "at least one of tcpEstablishedTimeout, udpStreamTimeout and udpTimeout must be set",
        );
    }
    let mut timeout = |field: &str, value: Option<i64>, min: i64, max: i64| {
        value.and_then(|v| int32_in(v, min, max, &format!("{PATH}.{field}"), report))
    };
    ConnectionTracking {
        tcp_established_timeout: timeout(
            "tcpEstablishedTimeout",
            raw.tcp_established_timeout,
            60,
            432_000,
        ),
        udp_stream_timeout: timeout("udpStreamTimeout", raw.udp_stream_timeout, 60, 180),
        udp_timeout: timeout("udpTimeout", raw.udp_timeout, 30, 60),
    }
}

fn metadata_options(raw: Option<raw::MetadataOptions>, report: &mut Report<'_>) -> MetadataOptions {
    const PATH: &str = "spec.metadataOptions";
    let defaults = MetadataOptions::default();
    let Some(raw) = raw else {
        return defaults;
    };
    let mut choice =
        |field: &str, value: Option<String>, allowed: [&str; 2], default: String| match value {
            None => default,
            Some(v) if allowed.contains(&v.as_str()) => v,
            Some(v) => {
                report.add(
                    format!("{PATH}.{field}"),
                    format!("expected {:?} or {:?}, got {v:?}", allowed[0], allowed[1]),
                );
                default
            }
        };
    let http_endpoint = choice(
        "httpEndpoint",
        raw.http_endpoint,
        ["enabled", "disabled"],
        defaults.http_endpoint,
    );
    let http_protocol_ipv6 = choice(
        "httpProtocolIPv6",
        raw.http_protocol_ipv6,
        ["enabled", "disabled"],
        defaults.http_protocol_ipv6,
    );
    let http_tokens = choice(
        "httpTokens",
        raw.http_tokens,
        ["required", "optional"],
        defaults.http_tokens,
    );
    let hop_limit = raw
        .http_put_response_hop_limit
        .unwrap_or(defaults.http_put_response_hop_limit);
    if !(1..=64).contains(&hop_limit) {
        report.add(
            format!("{PATH}.httpPutResponseHopLimit"),
            format!("must be between 1 and 64, got {hop_limit}"),
        );
    }
    MetadataOptions {
        http_endpoint,
        http_protocol_ipv6,
        http_put_response_hop_limit: hop_limit,
        http_tokens,
    }
}

fn tags(tags: BTreeMap<String, String>, report: &mut Report<'_>) -> BTreeMap<String, String> {
    for key in tags.keys() {
        if key.is_empty() {
            report.add("spec.tags", "empty tag keys are not allowed");
        } else if key.starts_with("kubernetes.io/cluster")
            || RESTRICTED_TAGS.contains(&key.as_str())
        {
            report.add(
                format!("spec.tags.{key}"),
                format!("tag {key:?} is restricted (Karpenter sets it)"),
            );
        }
    }
    tags
}

/// Eviction signals the kubelet acts on; any other key would be ignored by it, so
/// Karpenter refuses it.
pub const EVICTION_SIGNALS: [&str; 6] = [
    "memory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "pid.available",
];
/// Resources the kubelet can reserve.
pub const RESERVABLE: [&str; 4] = ["cpu", "memory", "ephemeral-storage", "pid"];

/// `spec.kubelet`, with the rules Karpenter's validation controller applies to it (the
/// CRD leaves the object open): maps keyed by real signals and resources, eviction
/// thresholds a percentage in [0, 100] or a non-negative quantity, reservations a
/// non-negative quantity, soft thresholds and grace periods in matching pairs.
/// A string `maxPods`, and a reservation that is not a quantity, are expressions
/// (`crate::kubelet_expressions`), compiled here so a bad one names its field.
fn kubelet(
    raw: Option<raw::Kubelet>,
    whole: Option<serde_json::Value>,
    report: &mut Report<'_>,
) -> Kubelet {
    const PATH: &str = "spec.kubelet";
    let Some(raw) = raw else {
        return Kubelet::default();
    };
    let (max_pods, max_pods_expression) = match raw.max_pods {
        Some(raw::IntOrString::Int(v)) => (Some(v), None),
        Some(raw::IntOrString::String(text)) => {
            if let Err(e) = Expression::compile(&text) {
                report.add(format!("{PATH}.maxPods"), format!("{text:?}: {e}"));
            }
            (None, Some(text))
        }
        None => (None, None),
    };
    for (field, value) in [("maxPods", max_pods), ("podsPerCore", raw.pods_per_core)] {
        match value {
            Some(v) if v < 0 => report.add(
                format!("{PATH}.{field}"),
                format!("must not be negative, got {v}"),
            ),
            // The kubelet's field is an int32.
            Some(v) if v > i64::from(i32::MAX) => report.add(
                format!("{PATH}.{field}"),
                format!("must be at most {}, got {v}", i32::MAX),
            ),
            _ => {}
        }
    }
    let (kube_reserved, kube_reserved_expressions) =
        reserved(raw.kube_reserved, "kubeReserved", report);
    let (system_reserved, system_reserved_expressions) =
        reserved(raw.system_reserved, "systemReserved", report);
    let eviction_hard = thresholds(raw.eviction_hard.as_ref(), "evictionHard", report);
    thresholds(raw.eviction_soft.as_ref(), "evictionSoft", report);
    thresholds(
        raw.eviction_minimum_reclaim.as_ref(),
        "evictionMinimumReclaim",
        report,
    );
    let soft = raw.eviction_soft.unwrap_or_default();
    let grace = raw.eviction_soft_grace_period.unwrap_or_default();
    for (signal, value) in &grace {
        let path = format!("{PATH}.evictionSoftGracePeriod.{signal}");
        if !EVICTION_SIGNALS.contains(&signal.as_str()) {
            report.add(&path, unknown_signal(signal));
        }
        if !is_go_duration(value) {
            report.add(
                &path,
                format!(
                    "expected a non-negative duration such as \"30s\" or \"1m30s\", got {value:?}"
                ),
            );
        }
        if !soft.contains_key(signal) {
            report.add(path, "has no matching evictionSoft threshold");
        }
    }
    // The kubelet ignores a soft threshold without a grace period.
    for signal in soft.keys().filter(|s| !grace.contains_key(*s)) {
        report.add(
            format!("{PATH}.evictionSoft.{signal}"),
            "has no matching evictionSoftGracePeriod",
        );
    }
    Kubelet {
        max_pods,
        max_pods_expression,
        pods_per_core: raw.pods_per_core,
        kube_reserved,
        system_reserved,
        kube_reserved_expressions,
        system_reserved_expressions,
        eviction_hard,
        cluster_dns: raw.cluster_dns.unwrap_or_default(),
        raw: whole,
    }
}

fn unknown_signal(signal: &str) -> String {
    format!(
        "unknown eviction signal {signal:?} (expected one of {})",
        EVICTION_SIGNALS.join(", ")
    )
}

/// `kubeReserved` / `systemReserved`: milli-units by resource, and the values that
/// are expressions rather than quantities.
fn reserved(
    raw: Option<BTreeMap<String, String>>,
    field: &str,
    report: &mut Report<'_>,
) -> (BTreeMap<String, i64>, BTreeMap<String, String>) {
    let mut out = BTreeMap::new();
    let mut expressions = BTreeMap::new();
    for (name, text) in raw.unwrap_or_default() {
        let path = format!("spec.kubelet.{field}.{name}");
        if !RESERVABLE.contains(&name.as_str()) {
            report.add(
                &path,
                format!(
                    "{name:?} cannot be reserved (expected one of {})",
                    RESERVABLE.join(", ")
                ),
            );
            continue;
        }
        match parse_milli(&text) {
            Ok(milli) if milli < 0 => {
                report.add(path, format!("must not be negative, got {text:?}"))
            }
            Ok(milli) => {
                out.insert(name, milli);
            }
            Err(not_a_quantity) => match Expression::compile(&text) {
                Ok(_) => {
                    expressions.insert(name, text);
                }
                Err(e) => report.add(
                    path,
                    format!(
                        "{text:?} is neither a quantity ({not_a_quantity}) nor an expression ({e})"
                    ),
                ),
            },
        }
    }
    (out, expressions)
}

/// An eviction map: thresholds by signal.
fn thresholds(
    raw: Option<&BTreeMap<String, String>>,
    field: &str,
    report: &mut Report<'_>,
) -> BTreeMap<String, EvictionThreshold> {
    let mut out = BTreeMap::new();
    for (signal, text) in raw.into_iter().flatten() {
        let path = format!("spec.kubelet.{field}.{signal}");
        if !EVICTION_SIGNALS.contains(&signal.as_str()) {
            report.add(&path, unknown_signal(signal));
            continue;
        }
        match eviction_threshold(text) {
            Some(t) => {
                out.insert(signal.clone(), t);
            }
            None => report.add(
                path,
                format!(
                    "expected a percentage from 0% to 100% or a non-negative quantity such as 500Mi, got {text:?}"
                ),
            ),
        }
    }
    out
}

fn eviction_threshold(text: &str) -> Option<EvictionThreshold> {
    if let Some(number) = text.strip_suffix('%') {
        let p: f64 = number.parse().ok()?;
        return (p.is_finite() && (0.0..=100.0).contains(&p))
            .then_some(EvictionThreshold::Percent(p));
    }
    parse_milli(text)
        .ok()
        .filter(|m| *m >= 0)
        .map(EvictionThreshold::Quantity)
}

/// Go's `time.ParseDuration` syntax, non-negative: `0`, or one or more decimal
/// numbers each with a unit (ns, us, µs, ms, s, m, h), e.g. "1.5h", "2m30s".
fn is_go_duration(text: &str) -> bool {
    let s = text.strip_prefix('+').unwrap_or(text);
    if s == "0" {
        return true;
    }
    let mut rest = s;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let mut after = &rest[int_len..];
        let mut frac_len = 0;
        if let Some(f) = after.strip_prefix('.') {
            frac_len = f.bytes().take_while(u8::is_ascii_digit).count();
            after = &f[frac_len..];
        }
        if int_len == 0 && frac_len == 0 {
            return false;
        }
        let Some(unit) = ["ns", "us", "µs", "μs", "ms", "s", "m", "h"]
            .into_iter()
            .find(|u| after.starts_with(u))
        else {
            return false;
        };
        rest = &after[unit.len()..];
    }
    true
}

#[cfg(test)]
mod tests;
