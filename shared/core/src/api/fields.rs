//! Every field of Karpenter's `karpenter.sh/v1` NodePool and `karpenter.k8s.aws/v1`
//! EC2NodeClass `spec` (as of Karpenter v1.15) and what nodewright does with it, so that
//! no field a manifest carries is dropped without the user being told.
//!
//! The registry ([`NODE_POOL_FIELDS`], [`NODE_CLASS_FIELDS`]) lists field paths with
//! arrays as `[]` and user-keyed maps as `*` (`spec.template.spec.requirements[].minValues`,
//! `spec.tags.*`); every entry is a leaf: no entry lies under another, so a field present
//! in an object matches exactly one entry or none. [`field_report`] walks an object as
//! written and names each field present with its status, and each field present that
//! the CRD does not define as [`Status::Unknown`]. `nodewright validate` prints it; the
//! functions log it and set a condition reason; `docs/karpenter-compatibility.md` lists
//! the same table, checked by a test below.
//!
//! Fields whose support is being built have their status in a constant of its own
//! (`REPLICAS`, `INSTANCE_STORE_POLICY`, ...): flipping one is a one-line change there.

use std::fmt;

use serde_json::Value;

use super::Kind;

/// The Karpenter release whose CRDs the registry lists.
pub const KARPENTER_RELEASE: &str = "v1.15";

/// The message of a field the CRD does not define.
pub const UNKNOWN_FIELD: &str = "not a field of Karpenter v1.15's CRD";

/// What nodewright does with a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Validated with Karpenter's rules and used with Karpenter's meaning.
    Honoured,
    /// Used, with a difference (why).
    Partly(&'static str),
    /// Accepted and not used (why).
    Ignored(&'static str),
    /// In a report only, never in the registry: the CRD has no such field.
    Unknown,
}

impl Status {
    /// `honoured`, `partly`, `ignored`, `unknown`: the words of the compatibility doc.
    pub fn label(self) -> &'static str {
        match self {
            Status::Honoured => "honoured",
            Status::Partly(_) => "partly",
            Status::Ignored(_) => "ignored",
            Status::Unknown => "unknown",
        }
    }

    /// Why the field is not fully honoured; `None` when it is.
    pub fn why(self) -> Option<&'static str> {
        match self {
            Status::Honoured => None,
            Status::Partly(why) | Status::Ignored(why) => Some(why),
            Status::Unknown => Some(UNKNOWN_FIELD),
        }
    }

    pub fn is_honoured(self) -> bool {
        self == Status::Honoured
    }
}

/// One registry entry.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    /// `spec.template.spec.requirements[].minValues`, `spec.tags.*`.
    pub path: &'static str,
    /// The field's status in general (the compatibility doc's).
    pub status: Status,
    /// Values with which a field that is only partly supported is fully honoured
    /// (`alias: al2023@latest`), when that depends on the value.
    honoured_when: Option<fn(&Value) -> bool>,
}

impl Field {
    /// The status of the field holding `value`.
    pub fn status_of(&self, value: &Value) -> Status {
        match self.honoured_when {
            Some(honoured) if honoured(value) => Status::Honoured,
            _ => self.status,
        }
    }
}

const fn honoured(path: &'static str) -> Field {
    with(path, Status::Honoured)
}

const fn partly(path: &'static str, why: &'static str) -> Field {
    with(path, Status::Partly(why))
}

const fn ignored(path: &'static str, why: &'static str) -> Field {
    with(path, Status::Ignored(why))
}

const fn with(path: &'static str, status: Status) -> Field {
    Field {
        path,
        status,
        honoured_when: None,
    }
}

const fn partly_unless(
    path: &'static str,
    why: &'static str,
    honoured: fn(&Value) -> bool,
) -> Field {
    Field {
        path,
        status: Status::Partly(why),
        honoured_when: Some(honoured),
    }
}

// ----- fields being built: flip the status here when the feature lands ------------------

const REPLICAS: Status = Status::Honoured;
const INSTANCE_STORE_POLICY: Status = Status::Honoured;
const NETWORK_INTERFACES: Status = Status::Partly(
    "written into the launch template as Karpenter writes them; instance types are not filtered by how many interfaces they support",
);
const CPU_OPTIONS: Status = Status::Partly(
    "`disabled` is EC2's default; `enabled` makes the class not ready (this build's EC2 SDK cannot request nested virtualization)",
);
const PLACEMENT_GROUP: Status = Status::Partly(
    "resolved with DescribePlacementGroups and written into the launch template; no partition label, instance types not filtered by the group's strategy",
);
const IP_PREFIX_COUNT: Status = Status::Honoured;
const CONNECTION_TRACKING: Status = Status::Honoured;
const VOLUME_INITIALIZATION_RATE: Status = Status::Honoured;
const ROOT_VOLUME: Status = Status::Honoured;

// ----- NodePool -----------------------------------------------------------------------

const TIME_ADDED: &str = "the taint is registered without it";

/// `karpenter.sh/v1` NodePool: `spec`, with `spec.template.spec` the NodeClaim template.
pub const NODE_POOL_FIELDS: &[Field] = &[
    honoured("spec.template.metadata.labels.*"),
    partly(
        "spec.template.metadata.annotations.*",
        "in the drift hash (a change drifts nodes) but not written on the nodes",
    ),
    honoured("spec.template.spec.requirements[].key"),
    honoured("spec.template.spec.requirements[].operator"),
    honoured("spec.template.spec.requirements[].values"),
    honoured("spec.template.spec.requirements[].minValues"),
    honoured("spec.template.spec.taints[].key"),
    honoured("spec.template.spec.taints[].value"),
    honoured("spec.template.spec.taints[].effect"),
    ignored("spec.template.spec.taints[].timeAdded", TIME_ADDED),
    honoured("spec.template.spec.startupTaints[].key"),
    honoured("spec.template.spec.startupTaints[].value"),
    honoured("spec.template.spec.startupTaints[].effect"),
    ignored("spec.template.spec.startupTaints[].timeAdded", TIME_ADDED),
    honoured("spec.template.spec.nodeClassRef.group"),
    honoured("spec.template.spec.nodeClassRef.kind"),
    honoured("spec.template.spec.nodeClassRef.name"),
    honoured("spec.template.spec.expireAfter"),
    honoured("spec.template.spec.terminationGracePeriod"),
    honoured("spec.disruption.consolidationPolicy"),
    honoured("spec.disruption.consolidateAfter"),
    honoured("spec.disruption.budgets[].nodes"),
    honoured("spec.disruption.budgets[].schedule"),
    honoured("spec.disruption.budgets[].duration"),
    honoured("spec.disruption.budgets[].reasons"),
    honoured("spec.limits.*"),
    honoured("spec.weight"),
    with("spec.replicas", REPLICAS),
];

// ----- EC2NodeClass -------------------------------------------------------------------

const KUBELET_AL2023_ONLY: &str =
    "passed to the kubelet on AL2023; Bottlerocket nodes do not get it";
const KUBELET_PASSED_THROUGH: &str = "passed to the kubelet as written on AL2023 (nodeadm's KubeletConfiguration); Bottlerocket nodes do not get it";

/// `karpenter.k8s.aws/v1` EC2NodeClass `spec`.
pub const NODE_CLASS_FIELDS: &[Field] = &[
    partly_unless(
        "spec.amiSelectorTerms[].alias",
        "only the al2023 and bottlerocket families resolve: al2 and windows aliases leave the class not ready",
        |v| {
            let family = v.as_str().and_then(|a| a.split('@').next());
            matches!(family, Some("al2023" | "bottlerocket"))
        },
    ),
    honoured("spec.amiSelectorTerms[].id"),
    honoured("spec.amiSelectorTerms[].name"),
    honoured("spec.amiSelectorTerms[].owner"),
    honoured("spec.amiSelectorTerms[].tags.*"),
    honoured("spec.amiSelectorTerms[].ssmParameter"),
    partly_unless(
        "spec.amiFamily",
        "only AL2023 and Bottlerocket get their own user data: other families get AL2023 nodeadm user data",
        |v| matches!(v.as_str(), Some("AL2023" | "Bottlerocket")),
    ),
    honoured("spec.subnetSelectorTerms[].id"),
    honoured("spec.subnetSelectorTerms[].tags.*"),
    honoured("spec.securityGroupSelectorTerms[].id"),
    honoured("spec.securityGroupSelectorTerms[].name"),
    honoured("spec.securityGroupSelectorTerms[].tags.*"),
    honoured("spec.role"),
    honoured("spec.instanceProfile"),
    partly(
        "spec.userData",
        "merged before nodewright's own settings; with amiFamily Custom nodewright still appends its NodeConfig",
    ),
    honoured("spec.blockDeviceMappings[].deviceName"),
    honoured("spec.blockDeviceMappings[].ebs.volumeSize"),
    honoured("spec.blockDeviceMappings[].ebs.volumeType"),
    honoured("spec.blockDeviceMappings[].ebs.iops"),
    honoured("spec.blockDeviceMappings[].ebs.throughput"),
    honoured("spec.blockDeviceMappings[].ebs.encrypted"),
    honoured("spec.blockDeviceMappings[].ebs.kmsKeyID"),
    honoured("spec.blockDeviceMappings[].ebs.deleteOnTermination"),
    honoured("spec.blockDeviceMappings[].ebs.snapshotID"),
    with(
        "spec.blockDeviceMappings[].ebs.volumeInitializationRate",
        VOLUME_INITIALIZATION_RATE,
    ),
    with("spec.blockDeviceMappings[].rootVolume", ROOT_VOLUME),
    honoured("spec.metadataOptions.httpEndpoint"),
    honoured("spec.metadataOptions.httpProtocolIPv6"),
    honoured("spec.metadataOptions.httpPutResponseHopLimit"),
    honoured("spec.metadataOptions.httpTokens"),
    honoured("spec.tags.*"),
    honoured("spec.associatePublicIPAddress"),
    honoured("spec.detailedMonitoring"),
    honoured("spec.kubelet.maxPods"),
    honoured("spec.kubelet.podsPerCore"),
    honoured("spec.kubelet.clusterDNS"),
    partly("spec.kubelet.kubeReserved.*", KUBELET_AL2023_ONLY),
    partly("spec.kubelet.systemReserved.*", KUBELET_AL2023_ONLY),
    partly("spec.kubelet.evictionHard.*", KUBELET_AL2023_ONLY),
    partly("spec.kubelet.evictionSoft.*", KUBELET_AL2023_ONLY),
    partly(
        "spec.kubelet.evictionSoftGracePeriod.*",
        KUBELET_AL2023_ONLY,
    ),
    partly("spec.kubelet.evictionMinimumReclaim.*", KUBELET_AL2023_ONLY),
    partly("spec.kubelet.*", KUBELET_PASSED_THROUGH),
    honoured("spec.capacityReservationSelectorTerms[].id"),
    honoured("spec.capacityReservationSelectorTerms[].ownerID"),
    honoured("spec.capacityReservationSelectorTerms[].tags.*"),
    honoured("spec.capacityReservationSelectorTerms[].instanceMatchCriteria"),
    with("spec.instanceStorePolicy", INSTANCE_STORE_POLICY),
    ignored("spec.context", "not passed to EC2 CreateFleet"),
    ignored(
        "spec.enclaveOptions.enabled",
        "Nitro Enclaves are not enabled on the instances launched",
    ),
    with("spec.ipPrefixCount", IP_PREFIX_COUNT),
    with("spec.networkInterfaces[].deviceIndex", NETWORK_INTERFACES),
    with(
        "spec.networkInterfaces[].networkCardIndex",
        NETWORK_INTERFACES,
    ),
    with("spec.networkInterfaces[].interfaceType", NETWORK_INTERFACES),
    with("spec.placementGroupSelector.id", PLACEMENT_GROUP),
    with("spec.placementGroupSelector.name", PLACEMENT_GROUP),
    with("spec.cpuOptions.nestedVirtualization", CPU_OPTIONS),
    with(
        "spec.connectionTracking.tcpEstablishedTimeout",
        CONNECTION_TRACKING,
    ),
    with(
        "spec.connectionTracking.udpStreamTimeout",
        CONNECTION_TRACKING,
    ),
    with("spec.connectionTracking.udpTimeout", CONNECTION_TRACKING),
];

/// `karpenter.sh/v1alpha1` NodeOverlay (not a [`Kind`]: it is read beside the two,
/// see `api::overlay`).
pub const NODE_OVERLAY_FIELDS: &[Field] = &[
    honoured("spec.requirements[].key"),
    honoured("spec.requirements[].operator"),
    honoured("spec.requirements[].values"),
    honoured("spec.price"),
    honoured("spec.priceAdjustment"),
    honoured("spec.capacity.*"),
    honoured("spec.weight"),
];

/// [`field_report`] for a NodeOverlay.
pub fn overlay_field_report(object: &Value) -> Vec<FieldUse> {
    let mut out = Vec::new();
    if let Some(spec) = object.get("spec") {
        walk(
            NODE_OVERLAY_FIELDS,
            spec,
            "spec",
            "spec".to_string(),
            &mut out,
        );
    }
    out
}

/// The registry of a kind.
pub fn fields(kind: Kind) -> &'static [Field] {
    match kind {
        Kind::NodePool => NODE_POOL_FIELDS,
        Kind::Ec2NodeClass => NODE_CLASS_FIELDS,
    }
}

// ----- the walker ---------------------------------------------------------------------

/// One field present in an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldUse {
    /// As written, with real indices and keys: `spec.template.spec.requirements[2].minValues`.
    pub path: String,
    /// The registry entry it matched; `None` for an unknown field.
    pub field: Option<&'static str>,
    pub status: Status,
}

impl fmt::Display for FieldUse {
    /// `spec.replicas: not supported (ignored): <why>`, `spec.userData: partly: <why>`,
    /// `spec.weight: honoured`, `spec.foo: unknown field: <why>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.status {
            Status::Honoured => write!(f, "{}: honoured", self.path),
            Status::Partly(why) => write!(f, "{}: partly: {why}", self.path),
            Status::Ignored(why) => write!(f, "{}: not supported (ignored): {why}", self.path),
            Status::Unknown => write!(f, "{}: unknown field: {UNKNOWN_FIELD}", self.path),
        }
    }
}

/// Every field of `object`'s `spec` that is present (not null), in document order
/// within each level, each with its status: registry fields with theirs (for the value
/// written), others [`Status::Unknown`]. A value of the wrong shape where the CRD has an
/// object or a list (a string for `spec.template`) is left to validation.
pub fn field_report(kind: Kind, object: &Value) -> Vec<FieldUse> {
    let mut out = Vec::new();
    if let Some(spec) = object.get("spec") {
        walk(fields(kind), spec, "spec", "spec".to_string(), &mut out);
    }
    out
}

fn walk(
    registry: &'static [Field],
    value: &Value,
    pattern: &str,
    path: String,
    out: &mut Vec<FieldUse>,
) {
    if value.is_null() {
        return;
    }
    if let Some(field) = registry.iter().find(|f| f.path == pattern) {
        out.push(FieldUse {
            path,
            field: Some(field.path),
            status: field.status_of(value),
        });
        return;
    }
    let unknown = |path: String, out: &mut Vec<FieldUse>| {
        out.push(FieldUse {
            path,
            field: None,
            status: Status::Unknown,
        })
    };
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let named = format!("{pattern}.{key}");
                let any = format!("{pattern}.*");
                let child_path = format!("{path}.{key}");
                if leads_to_a_field(registry, &named) {
                    walk(registry, child, &named, child_path, out);
                } else if leads_to_a_field(registry, &any) {
                    walk(registry, child, &any, child_path, out);
                } else if !child.is_null() {
                    unknown(child_path, out);
                }
            }
        }
        Value::Array(items) => {
            let each = format!("{pattern}[]");
            if !leads_to_a_field(registry, &each) {
                return;
            }
            for (i, item) in items.iter().enumerate() {
                walk(registry, item, &each, format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// The fields of one object read from a cluster that nodewright does not fully honour:
/// what the functions log and name in the object's `ValidationSucceeded` condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectFields {
    pub kind: Kind,
    pub name: String,
    /// `metadata.generation` (`resourceVersion` when there is none): what changes when
    /// the spec does, so that a notice goes out once per version of the object.
    pub version: String,
    /// Only the uses not fully honoured, never empty.
    pub fields: Vec<FieldUse>,
}

impl ObjectFields {
    /// Walks `object` (a NodePool or EC2NodeClass as read from the API server): `None`
    /// when every field present is honoured, or the object has no name.
    pub fn of(kind: Kind, object: &Value) -> Option<Self> {
        let fields: Vec<FieldUse> = field_report(kind, object)
            .into_iter()
            .filter(|u| !u.status.is_honoured())
            .collect();
        if fields.is_empty() {
            return None;
        }
        let meta = object.get("metadata")?;
        let name = meta.get("name")?.as_str()?.to_string();
        let version = match meta.get("generation").and_then(Value::as_i64) {
            Some(generation) => generation.to_string(),
            None => meta
                .get("resourceVersion")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
        };
        Some(ObjectFields {
            kind,
            name,
            version,
            fields,
        })
    }

    /// `spec.replicas (ignored), spec.foo (unknown)`: for a log field.
    pub fn summary(&self) -> String {
        self.fields
            .iter()
            .map(|u| format!("{} ({})", u.path, u.status.label()))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Every field with why, `; `-separated: for the condition message.
    pub fn message(&self) -> String {
        let fields: Vec<String> = self.fields.iter().map(ToString::to_string).collect();
        format!(
            "fields nodewright does not fully honour: {}",
            fields.join("; ")
        )
    }
}

/// `pattern` is a registry field or lies above one.
fn leads_to_a_field(registry: &[Field], pattern: &str) -> bool {
    registry.iter().any(|f| {
        f.path
            .strip_prefix(pattern)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('.') || rest.starts_with('['))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn report(kind: Kind, object: Value) -> Vec<(String, &'static str)> {
        field_report(kind, &object)
            .into_iter()
            .map(|u| (u.path, u.status.label()))
            .collect()
    }

    fn pairs(expected: &[(&str, &'static str)]) -> Vec<(String, &'static str)> {
        expected.iter().map(|(p, s)| (p.to_string(), *s)).collect()
    }

    #[test]
    fn every_registry_entry_is_a_leaf_named_once_with_a_reason_when_not_honoured() {
        for kind in [Kind::NodePool, Kind::Ec2NodeClass] {
            let registry = fields(kind);
            for (i, f) in registry.iter().enumerate() {
                assert!(f.path.starts_with("spec."), "{}", f.path);
                assert_ne!(f.status, Status::Unknown, "{}", f.path);
                if let Some(why) = f.status.why() {
                    assert!(!why.is_empty(), "{}", f.path);
                }
                for (j, g) in registry.iter().enumerate() {
                    if i == j {
                        continue;
                    }
                    assert_ne!(f.path, g.path, "listed twice");
                    let under = g
                        .path
                        .strip_prefix(f.path)
                        .is_some_and(|r| r.starts_with('.') || r.starts_with('['));
                    assert!(!under, "{} lies under {}", g.path, f.path);
                }
            }
        }
    }

    #[test]
    fn a_node_overlay_names_its_fields_and_unknown_ones() {
        let overlay = json!({
            "apiVersion": "karpenter.sh/v1alpha1",
            "kind": "NodeOverlay",
            "metadata": {"name": "o"},
            "spec": {
                "requirements": [{"key": "a", "operator": "In", "values": ["x"]}],
                "priceAdjustment": "-10%",
                "capacity": {"hugepages-2Mi": "1Gi"},
                "weight": 3,
                "colour": "red"
            }
        });
        let got: Vec<(String, &str)> = overlay_field_report(&overlay)
            .into_iter()
            .map(|u| (u.path, u.status.label()))
            .collect();
        assert_eq!(
            got,
            pairs(&[
                ("spec.capacity.hugepages-2Mi", "honoured"),
                ("spec.colour", "unknown"),
                ("spec.priceAdjustment", "honoured"),
                ("spec.requirements[0].key", "honoured"),
                ("spec.requirements[0].operator", "honoured"),
                ("spec.requirements[0].values", "honoured"),
                ("spec.weight", "honoured"),
            ])
        );
    }

    #[test]
    fn a_node_pool_names_each_field_present_with_real_indices() {
        let pool = json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": "web", "annotations": {"a": "b"}},
            "spec": {
                "replicas": 3,
                "weight": 10,
                "template": {
                    "metadata": {"labels": {"team": "a", "app.kubernetes.io/name": "x"}},
                    "spec": {
                        "requirements": [
                            {"key": "a", "operator": "Exists"},
                            {"key": "b", "operator": "In", "values": ["x"], "minValues": 1}
                        ],
                        "taints": [{"key": "k", "effect": "NoSchedule", "timeAdded": "2026-01-01T00:00:00Z"}],
                        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
                    }
                },
                "limits": {"cpu": 100, "nodes": 5}
            },
            "status": {"conditions": []}
        });
        assert_eq!(
            report(Kind::NodePool, pool),
            pairs(&[
                ("spec.limits.cpu", "honoured"),
                ("spec.limits.nodes", "honoured"),
                ("spec.replicas", "honoured"),
                (
                    "spec.template.metadata.labels.app.kubernetes.io/name",
                    "honoured"
                ),
                ("spec.template.metadata.labels.team", "honoured"),
                ("spec.template.spec.nodeClassRef.group", "honoured"),
                ("spec.template.spec.nodeClassRef.kind", "honoured"),
                ("spec.template.spec.nodeClassRef.name", "honoured"),
                ("spec.template.spec.requirements[0].key", "honoured"),
                ("spec.template.spec.requirements[0].operator", "honoured"),
                ("spec.template.spec.requirements[1].key", "honoured"),
                ("spec.template.spec.requirements[1].minValues", "honoured"),
                ("spec.template.spec.requirements[1].operator", "honoured"),
                ("spec.template.spec.requirements[1].values", "honoured"),
                ("spec.template.spec.taints[0].effect", "honoured"),
                ("spec.template.spec.taints[0].key", "honoured"),
                ("spec.template.spec.taints[0].timeAdded", "ignored"),
                ("spec.weight", "honoured"),
            ])
        );
    }

    #[test]
    fn fields_the_crd_does_not_define_are_unknown_at_any_depth() {
        let pool = json!({"spec": {
            "replica": 3,
            "template": {"spec": {"requirements": [{"key": "a", "operator": "Exists", "minValue": 2}]},
                         "metadata": {"name": "x"}},
            "disruption": {"budgets": [{"nodes": "10%", "schedul": "@daily"}]}
        }});
        assert_eq!(
            report(Kind::NodePool, pool),
            pairs(&[
                ("spec.disruption.budgets[0].nodes", "honoured"),
                ("spec.disruption.budgets[0].schedul", "unknown"),
                ("spec.replica", "unknown"),
                ("spec.template.metadata.name", "unknown"),
                ("spec.template.spec.requirements[0].key", "honoured"),
                ("spec.template.spec.requirements[0].minValue", "unknown"),
                ("spec.template.spec.requirements[0].operator", "honoured"),
            ])
        );
    }

    #[test]
    fn null_fields_are_absent_and_misshapen_ones_are_left_to_validation() {
        let pool = json!({"spec": {"replicas": null, "template": "oops", "limits": {"cpu": null}}});
        assert_eq!(report(Kind::NodePool, pool), pairs(&[]));
        assert_eq!(report(Kind::NodePool, json!({"metadata": {}})), pairs(&[]));
    }

    #[test]
    fn a_node_class_names_its_launch_fields_and_kubelet_pass_through() {
        let class = json!({"spec": {
            "role": "r",
            "amiSelectorTerms": [{"alias": "al2023@latest"}, {"alias": "al2@latest"}],
            "amiFamily": "AL2",
            "instanceStorePolicy": "RAID0",
            "networkInterfaces": [{"deviceIndex": 0, "networkCardIndex": 0, "interfaceType": "efa-only"}],
            "blockDeviceMappings": [{"deviceName": "/dev/xvda", "rootVolume": true,
                                     "ebs": {"volumeSize": "20Gi", "volumeInitializationRate": 300}}],
            "kubelet": {"maxPods": 20, "kubeReserved": {"cpu": "100m"}, "imageGCHighThresholdPercent": 80,
                        "shutdownGracePeriod": "30s"},
            "tags": {"team": "a"}
        }});
        assert_eq!(
            report(Kind::Ec2NodeClass, class),
            pairs(&[
                ("spec.amiFamily", "partly"),
                ("spec.amiSelectorTerms[0].alias", "honoured"),
                ("spec.amiSelectorTerms[1].alias", "partly"),
                ("spec.blockDeviceMappings[0].deviceName", "honoured"),
                (
                    "spec.blockDeviceMappings[0].ebs.volumeInitializationRate",
                    "honoured"
                ),
                ("spec.blockDeviceMappings[0].ebs.volumeSize", "honoured"),
                ("spec.blockDeviceMappings[0].rootVolume", "honoured"),
                ("spec.instanceStorePolicy", "honoured"),
                ("spec.kubelet.imageGCHighThresholdPercent", "partly"),
                ("spec.kubelet.kubeReserved.cpu", "partly"),
                ("spec.kubelet.maxPods", "honoured"),
                ("spec.kubelet.shutdownGracePeriod", "partly"),
                ("spec.networkInterfaces[0].deviceIndex", "partly"),
                ("spec.networkInterfaces[0].interfaceType", "partly"),
                ("spec.networkInterfaces[0].networkCardIndex", "partly"),
                ("spec.role", "honoured"),
                ("spec.tags.team", "honoured"),
            ])
        );
    }

    #[test]
    fn a_use_reads_as_the_cli_prints_it() {
        let uses = field_report(
            Kind::NodePool,
            &json!({"spec": {"replicas": 2, "weight": 1, "wieght": 1,
                "template": {"metadata": {"annotations": {"a": "b"}},
                    "spec": {"taints": [{"key": "k", "effect": "NoSchedule", "timeAdded": "2026-01-01T00:00:00Z"}]}}}}),
        );
        let lines: Vec<String> = uses.iter().map(ToString::to_string).collect();
        let ignored = field_report(
            Kind::NodePool,
            &json!({"spec": {"template": {"spec": {"taints": [{"timeAdded": "x"}]}}}}),
        )[0]
        .status
        .why()
        .unwrap_or_default();
        assert_eq!(
            lines,
            [
                "spec.replicas: honoured".to_string(),
                "spec.template.metadata.annotations.a: partly: in the drift hash (a change drifts nodes) but not written on the nodes".to_string(),
                "spec.template.spec.taints[0].effect: honoured".to_string(),
                "spec.template.spec.taints[0].key: honoured".to_string(),
                format!("spec.template.spec.taints[0].timeAdded: not supported (ignored): {ignored}"),
                "spec.weight: honoured".to_string(),
                "spec.wieght: unknown field: not a field of Karpenter v1.15's CRD".to_string(),
            ]
        );
        assert_eq!(uses.iter().filter(|u| !u.status.is_honoured()).count(), 3);
        assert_eq!(uses[4].field, Some("spec.template.spec.taints[].timeAdded"));
        assert_eq!(uses[6].field, None);
    }

    #[test]
    fn the_value_decides_for_consolidation_policy_and_ami_family() {
        let status = |kind, object| field_report(kind, &object)[0].status.label();
        assert_eq!(
            status(
                Kind::NodePool,
                json!({"spec": {"disruption": {"consolidationPolicy": "WhenEmpty"}}})
            ),
            "honoured"
        );
        assert_eq!(
            status(
                Kind::NodePool,
                json!({"spec": {"disruption": {"consolidationPolicy": "Balanced"}}})
            ),
            "honoured"
        );
        assert_eq!(
            status(
                Kind::Ec2NodeClass,
                json!({"spec": {"amiFamily": "Bottlerocket"}})
            ),
            "honoured"
        );
        assert_eq!(
            status(Kind::Ec2NodeClass, json!({"spec": {"amiFamily": "Custom"}})),
            "partly"
        );
        assert_eq!(
            status(
                Kind::Ec2NodeClass,
                json!({"spec": {"amiSelectorTerms": [{"alias": "windows2022@latest"}]}})
            ),
            "partly"
        );
    }

    #[test]
    fn an_object_read_from_a_cluster_keeps_only_what_is_not_honoured_with_its_generation() {
        let pool = json!({"metadata": {"name": "web", "generation": 4, "resourceVersion": "981"},
            "spec": {"replicas": 3, "weight": 5, "wieght": 5,
                "template": {"spec": {"taints": [{"key": "k", "effect": "NoSchedule", "timeAdded": "x"}]}}}});
        let Some(found) = ObjectFields::of(Kind::NodePool, &pool) else {
            panic!("the pool has fields not honoured");
        };
        assert_eq!(found.name, "web");
        assert_eq!(found.version, "4");
        assert_eq!(
            found.summary(),
            "spec.template.spec.taints[0].timeAdded (ignored), spec.wieght (unknown)"
        );
        assert!(
            found.message().starts_with(
                "fields nodewright does not fully honour: spec.template.spec.taints[0].timeAdded: not supported (ignored)"
            ),
            "{}",
            found.message()
        );
        let honoured =
            json!({"metadata": {"name": "web", "resourceVersion": "7"}, "spec": {"weight": 5}});
        assert_eq!(ObjectFields::of(Kind::NodePool, &honoured), None);
        let no_generation =
            json!({"metadata": {"name": "c", "resourceVersion": "7"}, "spec": {"context": "x"}});
        assert_eq!(
            ObjectFields::of(Kind::Ec2NodeClass, &no_generation).map(|f| f.version),
            Some("7".to_string())
        );
    }

    // ----- the compatibility doc lists the registry -----------------------------------

    /// (path, status label) of every field named in the first column of the doc's
    /// section `heading`: each backticked `spec.…` path in it.
    fn doc_table(doc: &str, heading: &str) -> Vec<(String, String)> {
        let section = doc
            .split("\n## ")
            .find(|s| s.starts_with(heading))
            .unwrap_or_else(|| panic!("no section {heading:?} in the doc"));
        let mut rows = Vec::new();
        for line in section.lines().filter(|l| l.starts_with("| `")) {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let (first, status) = (cells[1], cells[2]);
            for (i, piece) in first.split('`').enumerate() {
                if i % 2 == 1 {
                    assert!(piece.starts_with("spec."), "{piece:?} in {line}");
                    rows.push((piece.to_string(), status.to_string()));
                }
            }
        }
        rows
    }

    #[test]
    fn the_compatibility_doc_lists_every_registry_field_with_its_status_and_no_other() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/karpenter-compatibility.md"
        );
        let doc = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        for (registry, heading) in [
            (fields(Kind::NodePool), "NodePool (`karpenter.sh/v1`)"),
            (
                fields(Kind::Ec2NodeClass),
                "EC2NodeClass (`karpenter.k8s.aws/v1`)",
            ),
            (NODE_OVERLAY_FIELDS, "NodeOverlay (`karpenter.sh/v1alpha1`)"),
        ] {
            let table = doc_table(&doc, heading);
            let mut problems = Vec::new();
            for field in registry {
                match table.iter().filter(|(p, _)| p == field.path).count() {
                    0 => problems.push(format!("{}: missing from the doc", field.path)),
                    1 => {}
                    n => problems.push(format!("{}: listed {n} times", field.path)),
                }
            }
            for (path, status) in &table {
                match registry.iter().find(|f| f.path == path) {
                    None => problems.push(format!("{path}: in the doc, not in the registry")),
                    Some(f) if f.status.label() != status => problems.push(format!(
                        "{path}: the doc says {status}, the registry {}",
                        f.status.label()
                    )),
                    Some(_) => {}
                }
            }
            assert!(problems.is_empty(), "{heading}:\n{}", problems.join("\n"));
        }
    }
}
