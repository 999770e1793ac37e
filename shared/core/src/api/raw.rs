//! The manifests as written: serde shapes of the fields nodewright reads.
//!
//! Every field is optional here so that a missing one is reported by validation with
//! its path, rather than as a bare serde error. Unknown fields are ignored on purpose:
//! newer Karpenter releases add fields, and a manifest written for them must still load.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Visitor};

pub(super) type StringMap = BTreeMap<String, String>;

// ---------- NodePool ----------

#[derive(Debug, Deserialize)]
pub(super) struct NodePool {
    pub spec: Option<NodePoolSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct NodePoolSpec {
    pub template: Option<Template>,
    pub disruption: Option<Disruption>,
    pub limits: Option<BTreeMap<String, Scalar>>,
    pub weight: Option<i64>,
    pub replicas: Option<i64>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Template {
    pub metadata: Option<TemplateMeta>,
    pub spec: Option<TemplateSpec>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct TemplateMeta {
    pub labels: Option<StringMap>,
    pub annotations: Option<StringMap>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct TemplateSpec {
    pub requirements: Option<Vec<Requirement>>,
    pub taints: Option<Vec<Taint>>,
    pub startup_taints: Option<Vec<Taint>>,
    pub node_class_ref: Option<NodeClassRef>,
    pub expire_after: Option<String>,
    pub termination_grace_period: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Requirement {
    pub key: Option<String>,
    pub operator: Option<String>,
    pub values: Option<Vec<String>>,
    pub min_values: Option<i64>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Taint {
    pub key: Option<String>,
    pub value: Option<String>,
    pub effect: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(super) struct NodeClassRef {
    pub group: Option<String>,
    pub kind: Option<String>,
    pub name: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Disruption {
    pub consolidation_policy: Option<String>,
    pub consolidate_after: Option<String>,
    pub budgets: Option<Vec<Budget>>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Budget {
    pub nodes: Option<Scalar>,
    pub schedule: Option<String>,
    pub duration: Option<String>,
    pub reasons: Option<Vec<String>>,
}

// ---------- EC2NodeClass ----------

#[derive(Debug, Deserialize)]
pub(super) struct NodeClass {
    pub spec: Option<NodeClassSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct NodeClassSpec {
    pub ami_selector_terms: Option<Vec<AmiTerm>>,
    pub ami_family: Option<String>,
    pub subnet_selector_terms: Option<Vec<SelectorTerm>>,
    pub security_group_selector_terms: Option<Vec<SelectorTerm>>,
    pub role: Option<String>,
    pub instance_profile: Option<String>,
    pub user_data: Option<String>,
    pub block_device_mappings: Option<Vec<BlockDeviceMapping>>,
    pub metadata_options: Option<MetadataOptions>,
    pub tags: Option<StringMap>,
    pub kubelet: Option<Kubelet>,
    #[serde(rename = "associatePublicIPAddress")]
    pub associate_public_ip_address: Option<bool>,
    pub detailed_monitoring: Option<bool>,
    pub instance_store_policy: Option<String>,
    pub network_interfaces: Option<Vec<NetworkInterface>>,
    pub cpu_options: Option<CpuOptions>,
    pub placement_group_selector: Option<PlacementGroupSelector>,
    pub ip_prefix_count: Option<i64>,
    pub connection_tracking: Option<ConnectionTracking>,
    pub capacity_reservation_selector_terms: Option<Vec<CapacityReservationTerm>>,
}

#[derive(Debug, Deserialize)]
pub(super) struct CapacityReservationTerm {
    pub id: Option<String>,
    #[serde(rename = "ownerID")]
    pub owner_id: Option<String>,
    pub tags: Option<StringMap>,
    #[serde(rename = "instanceMatchCriteria")]
    pub instance_match_criteria: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct NetworkInterface {
    pub network_card_index: Option<i64>,
    pub device_index: Option<i64>,
    pub interface_type: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct CpuOptions {
    pub nested_virtualization: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(super) struct PlacementGroupSelector {
    pub id: Option<String>,
    pub name: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ConnectionTracking {
    pub tcp_established_timeout: Option<i64>,
    pub udp_stream_timeout: Option<i64>,
    pub udp_timeout: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct AmiTerm {
    pub alias: Option<String>,
    pub id: Option<String>,
    pub name: Option<String>,
    pub owner: Option<String>,
    pub tags: Option<StringMap>,
    pub ssm_parameter: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(super) struct SelectorTerm {
    pub id: Option<String>,
    pub name: Option<String>,
    pub tags: Option<StringMap>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct BlockDeviceMapping {
    pub device_name: Option<String>,
    pub ebs: Option<Ebs>,
    pub root_volume: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Ebs {
    pub volume_size: Option<Scalar>,
    pub volume_type: Option<String>,
    pub iops: Option<i64>,
    pub throughput: Option<i64>,
    pub encrypted: Option<bool>,
    #[serde(rename = "kmsKeyID")]
    pub kms_key_id: Option<String>,
    pub delete_on_termination: Option<bool>,
    #[serde(rename = "snapshotID")]
    pub snapshot_id: Option<String>,
    pub volume_initialization_rate: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct MetadataOptions {
    pub http_endpoint: Option<String>,
    #[serde(rename = "httpProtocolIPv6")]
    pub http_protocol_ipv6: Option<String>,
    pub http_put_response_hop_limit: Option<i64>,
    pub http_tokens: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Kubelet {
    pub max_pods: Option<IntOrString>,
    pub pods_per_core: Option<i64>,
    #[serde(rename = "clusterDNS")]
    pub cluster_dns: Option<Vec<String>>,
    // The kubelet's own types: maps of strings, so `cpu: 1` is refused as Karpenter
    // refuses it (the kubelet would not read it).
    pub kube_reserved: Option<BTreeMap<String, String>>,
    pub system_reserved: Option<BTreeMap<String, String>>,
    pub eviction_hard: Option<BTreeMap<String, String>>,
    pub eviction_soft: Option<BTreeMap<String, String>>,
    pub eviction_soft_grace_period: Option<BTreeMap<String, String>>,
    pub eviction_minimum_reclaim: Option<BTreeMap<String, String>>,
}

/// Kubernetes' int-or-string: `maxPods: 110` or `maxPods: "min(110, vcpus * 8)"`.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum IntOrString {
    Int(i64),
    String(String),
}

impl<'de> Deserialize<'de> for IntOrString {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(IntOrStringVisitor)
    }
}

struct IntOrStringVisitor;

impl Visitor<'_> for IntOrStringVisitor {
    type Value = IntOrString;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an integer or a string expression")
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(IntOrString::Int(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        i64::try_from(v)
            .map(IntOrString::Int)
            .map_err(|_| E::invalid_value(de::Unexpected::Unsigned(v), &self))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(IntOrString::String(v.into()))
    }
}

/// A string that YAML may also have written as a number: `cpu: 100`,
/// `memory: 1000Gi`, `nodes: 5`. Kept as text; the field's own rule parses it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Scalar(pub String);

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ScalarVisitor)
    }
}

struct ScalarVisitor;

impl Visitor<'_> for ScalarVisitor {
    type Value = Scalar;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string or a number")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar, E> {
        Ok(Scalar(v.to_string()))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar, E> {
        Ok(Scalar(v.to_string()))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar, E> {
        Ok(Scalar(v.to_string()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Scalar, E> {
        Ok(Scalar(v.to_string()))
    }
}
