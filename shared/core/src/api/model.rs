//! Validated Karpenter v1 objects. A value of these types exists only after
//! `api::load` has checked it, so the planner never re-validates.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::resources::Resources;

/// A node selector operator, Karpenter's set (kube's plus Gte/Lte).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
    Gte,
    Lte,
}

impl Operator {
    pub const ALL: [(&'static str, Operator); 8] = [
        ("In", Operator::In),
        ("NotIn", Operator::NotIn),
        ("Exists", Operator::Exists),
        ("DoesNotExist", Operator::DoesNotExist),
        ("Gt", Operator::Gt),
        ("Lt", Operator::Lt),
        ("Gte", Operator::Gte),
        ("Lte", Operator::Lte),
    ];

    pub fn parse(s: &str) -> Option<Operator> {
        Self::ALL.iter().find(|(n, _)| *n == s).map(|(_, o)| *o)
    }

    pub fn as_str(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, o)| *o == self)
            .map(|(n, _)| *n)
            .unwrap_or("?")
    }

    /// "In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte, Lte" for error messages.
    pub fn expected_list() -> String {
        Self::ALL
            .iter()
            .map(|(n, _)| *n)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// One requirement as written: `{key, operator, values, minValues}`.
/// For Gt/Lt/Gte/Lte, `values` holds exactly one integer (checked at load).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NodeRequirement {
    pub key: String,
    pub operator: Operator,
    pub values: Vec<String>,
    pub min_values: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

impl TaintEffect {
    pub fn parse(s: &str) -> Option<TaintEffect> {
        match s {
            "NoSchedule" => Some(TaintEffect::NoSchedule),
            "PreferNoSchedule" => Some(TaintEffect::PreferNoSchedule),
            "NoExecute" => Some(TaintEffect::NoExecute),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            TaintEffect::NoSchedule => "NoSchedule",
            TaintEffect::PreferNoSchedule => "PreferNoSchedule",
            TaintEffect::NoExecute => "NoExecute",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Taint {
    pub key: String,
    pub value: Option<String>,
    pub effect: TaintEffect,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeClassRef {
    pub group: String,
    pub kind: String,
    pub name: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsolidationPolicy {
    WhenEmpty,
    WhenEmptyOrUnderutilized,
    /// Karpenter v1.14: consolidate when a move's savings outweigh its disruption
    /// (`disruption::balanced`, k = 2).
    Balanced,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DisruptionReason {
    Underutilized,
    Empty,
    Drifted,
    /// Node repair (Karpenter v1.15): budgets naming it pace repairs.
    Unhealthy,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetNodes {
    /// "10%": a percentage of the pool's nodes, rounded up as Karpenter does.
    Percent(u32),
    /// "5": an absolute number of nodes.
    Count(u32),
}

/// A disruption budget. `schedule` is a five-field cron expression (or a macro such as
/// `@daily`), checked at load; it is only ever present together with `duration`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    pub nodes: BudgetNodes,
    pub schedule: Option<String>,
    pub duration: Option<Duration>,
    /// Empty means the budget applies to every reason.
    pub reasons: Vec<DisruptionReason>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disruption {
    pub consolidation_policy: ConsolidationPolicy,
    /// `None` is "Never".
    pub consolidate_after: Option<Duration>,
    pub budgets: Vec<Budget>,
}

/// A validated `karpenter.sh/v1` NodePool with Karpenter's defaults applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePool {
    pub name: String,
    /// `spec.template.metadata.labels`
    pub labels: BTreeMap<String, String>,
    /// `spec.template.metadata.annotations`
    pub annotations: BTreeMap<String, String>,
    pub requirements: Vec<NodeRequirement>,
    pub taints: Vec<Taint>,
    pub startup_taints: Vec<Taint>,
    pub node_class_ref: NodeClassRef,
    /// `None` is "Never"; default 720h.
    pub expire_after: Option<Duration>,
    pub termination_grace_period: Option<Duration>,
    /// `spec.limits`; `None` when unset (unlimited). Values in milli-units.
    pub limits: Option<Resources>,
    /// `spec.limits.nodes`, when set: how many nodes the pool may have, launching and
    /// leaving included (kept apart from `limits`, where a limit of 0 reads as unset).
    pub node_limit: Option<u64>,
    /// `spec.weight`, 0 when unset; higher is tried first.
    pub weight: i32,
    pub disruption: Disruption,
    /// `spec.replicas`: a static NodePool keeps exactly this many nodes, launched
    /// without pods and never consolidated (Karpenter's static capacity); `None` is a
    /// dynamic pool, sized by pending pods.
    pub replicas: Option<u32>,
}

impl NodePool {
    /// A static NodePool (`spec.replicas` set).
    pub fn is_static(&self) -> bool {
        self.replicas.is_some()
    }

    /// The limit one more node would pass, as (resource, what use would reach, limit),
    /// in milli-units: `limits.nodes` against `nodes_after` (read apart from the other
    /// limits: `nodes: 0` is a limit too), else the first other resource whose use
    /// with the node, `used_after(name)`, exceeds its limit. Saturating: a limit
    /// written as "no limit" sits at the quantity ceiling.
    pub fn limit_passed(
        &self,
        nodes_after: i64,
        used_after: impl Fn(&str) -> i64,
    ) -> Option<(String, i64, i64)> {
        if let Some(max) = self.node_limit {
            let limit = i64::try_from(max).unwrap_or(i64::MAX).saturating_mul(1000);
            if nodes_after > limit {
                return Some(("nodes".to_string(), nodes_after, limit));
            }
        }
        self.limits
            .as_ref()?
            .iter()
            .filter(|(name, _)| *name != "nodes")
            .map(|(name, limit)| (name, used_after(name), limit))
            .find(|&(_, used, limit)| used > limit)
            .map(|(name, used, limit)| (name.to_string(), used, limit))
    }
}

/// `amiSelectorTerms[]`: exactly one way of selecting per term.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AmiSelectorTerm {
    /// `alias: family@version`, e.g. al2023@latest, bottlerocket@v1.20.0
    Alias {
        family: String,
        version: String,
    },
    Id(String),
    /// `name` with optional `owner`
    Name {
        name: String,
        owner: Option<String>,
    },
    /// `tags` with optional `owner`
    Tags {
        tags: BTreeMap<String, String>,
        owner: Option<String>,
    },
    SsmParameter(String),
}

/// `subnetSelectorTerms[]` / `securityGroupSelectorTerms[]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SelectorTerm {
    Id(String),
    /// Security groups only: the group name.
    Name(String),
    Tags(BTreeMap<String, String>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockDevice {
    pub volume_size: Option<String>,
    pub volume_type: Option<String>,
    pub iops: Option<i64>,
    pub throughput: Option<i64>,
    pub encrypted: Option<bool>,
    pub kms_key_id: Option<String>,
    pub delete_on_termination: Option<bool>,
    pub snapshot_id: Option<String>,
    /// `volumeInitializationRate`, MiB/s (100 to 300): how fast EBS fills the volume
    /// from `snapshotID`.
    pub volume_initialization_rate: Option<i32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockDeviceMapping {
    pub device_name: String,
    pub ebs: Option<BlockDevice>,
    pub root_volume: bool,
}

/// `metadataOptions`, defaults as Karpenter: endpoint enabled, IPv6 disabled,
/// hop limit 1, IMDSv2 required.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataOptions {
    pub http_endpoint: String,
    pub http_protocol_ipv6: String,
    pub http_put_response_hop_limit: i64,
    pub http_tokens: String,
}

impl Default for MetadataOptions {
    fn default() -> Self {
        Self {
            http_endpoint: "enabled".into(),
            http_protocol_ipv6: "disabled".into(),
            http_put_response_hop_limit: 1,
            http_tokens: "required".into(),
        }
    }
}

/// `instanceStorePolicy`: what to do with the instance's NVMe instance-store disks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstanceStorePolicy {
    /// One RAID-0 array of every instance-store disk, holding the kubelet's and the
    /// container runtime's state: node ephemeral-storage is the instance store.
    Raid0,
}

/// `networkInterfaces[].interfaceType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InterfaceType {
    /// An ENA interface (`interface`).
    Interface,
    /// An EFA-only interface (`efa-only`): no IP addresses, no public IP, no
    /// connection tracking.
    EfaOnly,
}

impl InterfaceType {
    pub fn as_str(self) -> &'static str {
        match self {
            InterfaceType::Interface => "interface",
            InterfaceType::EfaOnly => "efa-only",
        }
    }
}

/// One `networkInterfaces[]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkInterface {
    pub network_card_index: i32,
    pub device_index: i32,
    pub interface_type: InterfaceType,
}

/// `cpuOptions`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CpuOptions {
    /// `nestedVirtualization`: `Some(true)` for "enabled", `Some(false)` for "disabled".
    pub nested_virtualization: Option<bool>,
}

/// `placementGroupSelector`: exactly one of `id` and `name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlacementGroupSelector {
    Id(String),
    Name(String),
}

/// `connectionTracking`: idle timeouts in seconds, at least one set.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConnectionTracking {
    /// 60 to 432000.
    pub tcp_established_timeout: Option<i32>,
    /// 60 to 180.
    pub udp_stream_timeout: Option<i32>,
    /// 30 to 60.
    pub udp_timeout: Option<i32>,
}

/// The kubelet settings nodewright uses for planning: those that change how many pods
/// and how much of a node they get (see `crate::density`). The rest is passed through
/// to user data as written.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Kubelet {
    pub max_pods: Option<i64>,
    /// A string `maxPods`: an expression evaluated per instance type
    /// (`crate::kubelet_expressions`); set only when `max_pods` is not.
    pub max_pods_expression: Option<String>,
    pub pods_per_core: Option<i64>,
    /// `kubeReserved`, milli-units by resource (cpu, memory, ephemeral-storage, pid);
    /// each key written replaces Karpenter's default for it, the others keep theirs.
    pub kube_reserved: BTreeMap<String, i64>,
    /// `systemReserved`, milli-units by resource.
    pub system_reserved: BTreeMap<String, i64>,
    /// `kubeReserved` values that are expressions, by resource; a resource is in this
    /// map or in `kube_reserved`, never both.
    pub kube_reserved_expressions: BTreeMap<String, String>,
    /// `systemReserved` values that are expressions, by resource.
    pub system_reserved_expressions: BTreeMap<String, String>,
    /// `evictionHard` by signal (`memory.available`, `nodefs.available`, ...). Only
    /// hard thresholds reduce allocatable: the kubelet subtracts them, while soft ones
    /// only start evictions after a grace period (checked at load, carried in `raw`).
    pub eviction_hard: BTreeMap<String, EvictionThreshold>,
    pub cluster_dns: Vec<String>,
    /// The whole `kubelet` object as written, for user data.
    pub raw: Option<serde_json::Value>,
}

impl Kubelet {
    /// True when no setting that changes allocatable is written.
    pub fn is_default_density(&self) -> bool {
        !self.has_expressions()
            && self.max_pods.is_none()
            && self.pods_per_core.is_none_or(|p| p == 0)
            && self.kube_reserved.is_empty()
            && self.system_reserved.is_empty()
            && self.eviction_hard.is_empty()
    }

    /// True when a setting is an expression, so each instance type has its own values.
    pub fn has_expressions(&self) -> bool {
        self.max_pods_expression.is_some()
            || !self.kube_reserved_expressions.is_empty()
            || !self.system_reserved_expressions.is_empty()
    }
}

/// An eviction threshold: a quantity, or a percentage of the node's capacity of the
/// signal's resource ("10%"; "100%" disables the threshold, as in the kubelet).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum EvictionThreshold {
    /// Milli-units.
    Quantity(i64),
    /// 0 to 100.
    Percent(f64),
}

/// `capacityReservationSelectorTerms[].instanceMatchCriteria`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InstanceMatchCriteria {
    /// The reservation takes any matching instance.
    Open,
    /// Only instances launched into it by id.
    Targeted,
}

impl InstanceMatchCriteria {
    pub fn as_str(self) -> &'static str {
        match self {
            InstanceMatchCriteria::Open => "open",
            InstanceMatchCriteria::Targeted => "targeted",
        }
    }
}

/// `capacityReservationSelectorTerms[]`: an `id` alone, or any of `tags`, `ownerID`
/// and `instanceMatchCriteria` (every one given must match).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CapacityReservationSelectorTerm {
    pub id: Option<String>,
    pub owner_id: Option<String>,
    /// `"*"` as a value matches any value of the key.
    pub tags: BTreeMap<String, String>,
    pub instance_match_criteria: Option<InstanceMatchCriteria>,
}

/// A validated `karpenter.k8s.aws/v1` EC2NodeClass with Karpenter's defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Ec2NodeClass {
    pub name: String,
    pub ami_selector_terms: Vec<AmiSelectorTerm>,
    /// `amiFamily`; when unset, derived from an alias term (e.g. "AL2023").
    pub ami_family: Option<String>,
    pub subnet_selector_terms: Vec<SelectorTerm>,
    pub security_group_selector_terms: Vec<SelectorTerm>,
    /// Exactly one of `role` and `instance_profile` is set.
    pub role: Option<String>,
    pub instance_profile: Option<String>,
    /// `status.instanceProfile` as the object carries it: the profile last recorded for
    /// the class, by nodewright or by Karpenter. Karpenter v1.7 and later name a role's
    /// profile at random and keep the name only here, so this is how their profile is
    /// found and reused. Not part of the spec nor of its drift hash.
    pub status_instance_profile: Option<String>,
    pub user_data: Option<String>,
    pub block_device_mappings: Vec<BlockDeviceMapping>,
    pub metadata_options: MetadataOptions,
    pub tags: BTreeMap<String, String>,
    pub kubelet: Kubelet,
    pub associate_public_ip_address: Option<bool>,
    pub detailed_monitoring: bool,
    /// `instanceStorePolicy`; `None` leaves the instance store unused.
    pub instance_store_policy: Option<InstanceStorePolicy>,
    /// `networkInterfaces`; empty means one primary interface, as EC2 defaults.
    pub network_interfaces: Vec<NetworkInterface>,
    pub cpu_options: Option<CpuOptions>,
    pub placement_group_selector: Option<PlacementGroupSelector>,
    /// `ipPrefixCount`: IPv4 prefixes (/28) assigned to each interface that carries
    /// addresses.
    pub ip_prefix_count: Option<i32>,
    pub connection_tracking: Option<ConnectionTracking>,
    /// `capacityReservationSelectorTerms` (ORed); empty selects no reservation. Not
    /// part of the drift hash (Karpenter: `hash:"ignore"`).
    pub capacity_reservation_selector_terms: Vec<CapacityReservationSelectorTerm>,
}

impl Ec2NodeClass {
    /// The instance profile nodes of this class launch with: `instanceProfile` as
    /// written, else the profile managed for `role`, named by
    /// [`managed_instance_profile_name`]. `None` when neither is set (validation
    /// refuses such a class).
    pub fn instance_profile_for(&self, cluster: &str, region: &str) -> Option<String> {
        match (&self.instance_profile, &self.role) {
            (Some(profile), _) => Some(profile.clone()),
            (None, Some(_)) => Some(managed_instance_profile_name(cluster, region, &self.name)),
            (None, None) => None,
        }
    }
}

/// The name of the instance profile managed for an EC2NodeClass's `role`, as Karpenter
/// names it (`EC2NodeClass.InstanceProfileName` in v1.0 to v1.6, kept by later versions
/// as the "legacy" name they still clean up): `<cluster>_<hash>`, where the hash is
/// `hashstructure.Hash(region + nodeClassName, FormatV2)` in decimal. For a string that
/// is the 64-bit FNV-1 hash of its bytes. So a profile Karpenter created for the same
/// cluster, region and node class has this very name, and is found and adopted.
pub fn managed_instance_profile_name(cluster: &str, region: &str, node_class: &str) -> String {
    format!(
        "{cluster}_{}",
        fnv1_64(region.bytes().chain(node_class.bytes()))
    )
}

/// 64-bit FNV-1 (multiply, then xor), Go's `hash/fnv.New64`.
fn fnv1_64(bytes: impl IntoIterator<Item = u8>) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes
        .into_iter()
        .fold(OFFSET_BASIS, |h, b| h.wrapping_mul(PRIME) ^ u64::from(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1_matches_the_published_test_vectors() {
        assert_eq!(fnv1_64(*b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1_64(*b"a"), 0xaf63_bd4c_8601_b7be);
        assert_eq!(fnv1_64(*b"foobar"), 0x340d_8765_a4dd_a9c2);
    }

    #[test]
    fn managed_instance_profiles_are_named_as_karpenter_names_them() {
        // hashstructure.Hash("us-east-1default", FormatV2, nil) = FNV-1 64 of the bytes.
        assert_eq!(
            managed_instance_profile_name("prod", "us-east-1", "default"),
            "prod_15843455441266977890"
        );
        assert_eq!(
            managed_instance_profile_name("prod", "us-west-2", "general-purpose"),
            "prod_7346686188728735239"
        );
        // Region and class both count.
        assert_ne!(
            managed_instance_profile_name("prod", "us-east-2", "default"),
            managed_instance_profile_name("prod", "us-east-1", "default")
        );
    }

    fn class(role: Option<&str>, instance_profile: Option<&str>) -> Ec2NodeClass {
        Ec2NodeClass {
            name: "default".into(),
            ami_selector_terms: vec![],
            ami_family: None,
            subnet_selector_terms: vec![],
            security_group_selector_terms: vec![],
            role: role.map(str::to_string),
            instance_profile: instance_profile.map(str::to_string),
            status_instance_profile: None,
            user_data: None,
            block_device_mappings: vec![],
            metadata_options: MetadataOptions::default(),
            tags: BTreeMap::new(),
            kubelet: Kubelet::default(),
            associate_public_ip_address: None,
            detailed_monitoring: false,
            instance_store_policy: None,
            network_interfaces: vec![],
            cpu_options: None,
            placement_group_selector: None,
            ip_prefix_count: None,
            connection_tracking: None,
            capacity_reservation_selector_terms: vec![],
        }
    }

    #[test]
    fn an_instance_profile_is_used_as_written_and_a_role_gets_the_managed_one() {
        assert_eq!(
            class(None, Some("MyProfile"))
                .instance_profile_for("prod", "us-east-1")
                .as_deref(),
            Some("MyProfile")
        );
        assert_eq!(
            class(Some("KarpenterNodeRole-prod"), None)
                .instance_profile_for("prod", "us-east-1")
                .as_deref(),
            Some("prod_15843455441266977890")
        );
        assert_eq!(
            class(None, None).instance_profile_for("prod", "us-east-1"),
            None
        );
    }
}
