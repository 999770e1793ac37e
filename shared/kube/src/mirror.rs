//! A claim as a `karpenter.sh/v1` NodeClaim object: what `kubectl get nodeclaims` and
//! eks-node-viewer list. Pure: the object is a function of the claim alone (times come
//! from the claim, never from a clock), so an unchanged claim gives an equal object and
//! a quiet tick writes nothing.
//!
//! What keeps a Karpenter controller left running away from these objects: every one
//! of its NodeClaim controllers (lifecycle, garbage collection, disruption, expiration,
//! its cluster state) first asks whether the cloud provider manages the claim, by the
//! group and kind of `spec.nodeClassRef`; AWS's manages `karpenter.k8s.aws`
//! EC2NodeClasses only. A mirror's `nodeClassRef` is `nodewright.dev/EC2NodeClass`
//! ([`NODE_CLASS_GROUP`]), so none of them acts on it. A mirror also carries no
//! finalizer and no owner, and is labelled [`MANAGED_BY_LABEL`]=[`MANAGED_BY`]: the
//! adapter never touches a NodeClaim without that label.

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use nodewright_core::nodeclaim::{ClaimState, DisruptionCause, NodeClaim};
use nodewright_core::well_known::{
    ANNOTATION_CAPACITY_OVERLAY_APPLIED, ANNOTATION_PRICE_OVERLAY_APPLIED,
};
use nodewright_core::well_known::{
    LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_NODEPOOL, LABEL_ZONE,
};

/// The label every mirror carries, and its value: what marks a NodeClaim as ours.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "nodewright";
/// `spec.nodeClassRef.group` of a mirror: not `karpenter.k8s.aws`, so no Karpenter
/// controller manages it.
pub const NODE_CLASS_GROUP: &str = "nodewright.dev";
pub const NODE_CLASS_KIND: &str = "EC2NodeClass";
/// The claim's price in USD per hour (on-demand or spot, as launched).
pub const PRICE_ANNOTATION: &str = "nodewright.dev/price-per-hour";
/// The claim's state as the store records it (Launching, Draining...).
pub const STATE_ANNOTATION: &str = "nodewright.dev/state";

/// A NodeClaim as nodewright writes it: metadata and spec through the object, status
/// through `/status` (a subresource in Karpenter's CRD).
#[derive(Debug, Clone, PartialEq)]
pub struct Mirror {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// Immutable once created (the CRD refuses spec changes).
    pub spec: MirrorSpec,
    pub status: MirrorStatus,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MirrorSpec {
    pub node_class_ref: NodeClassRef,
    pub requirements: Vec<Requirement>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeClassRef {
    pub group: String,
    pub kind: String,
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Requirement {
    pub key: String,
    pub operator: String,
    pub values: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MirrorStatus {
    #[serde(
        rename = "providerID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    #[serde(default)]
    pub conditions: Vec<MirrorCondition>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MirrorCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
    pub last_transition_time: String,
}

/// The mirror of a claim; `None` for a terminal one (Terminated, LaunchFailed): its
/// mirror is deleted.
pub fn mirror_of(claim: &NodeClaim) -> Option<Mirror> {
    if claim.state.is_terminal() {
        return None;
    }
    let mut labels = claim.labels.clone();
    labels.insert(LABEL_NODEPOOL.into(), claim.node_pool.clone());
    if let Some(t) = &claim.instance_type {
        labels.insert(LABEL_INSTANCE_TYPE.into(), t.clone());
    }
    if let Some(z) = &claim.zone {
        labels.insert(LABEL_ZONE.into(), z.clone());
    }
    if let Some(c) = claim.capacity_type {
        labels.insert(LABEL_CAPACITY_TYPE.into(), c.as_str().into());
    }
    labels.insert(MANAGED_BY_LABEL.into(), MANAGED_BY.into());
    let mut annotations = BTreeMap::new();
    annotations.insert(STATE_ANNOTATION.into(), claim.state.as_str().into());
    if let Some(price) = claim.price_per_hour {
        annotations.insert(PRICE_ANNOTATION.into(), format!("{price}"));
    }
    // Karpenter's: an overlay priced or sized one of the claim's instance-type options.
    if claim.overlays_applied.price {
        annotations.insert(ANNOTATION_PRICE_OVERLAY_APPLIED.into(), "true".into());
    }
    if claim.overlays_applied.capacity {
        annotations.insert(ANNOTATION_CAPACITY_OVERLAY_APPLIED.into(), "true".into());
    }
    let requirement = |key: &str, values: Vec<String>| {
        (!values.is_empty()).then(|| Requirement {
            key: key.into(),
            operator: "In".into(),
            values,
        })
    };
    let requirements = [
        requirement(LABEL_NODEPOOL, vec![claim.node_pool.clone()]),
        requirement(LABEL_INSTANCE_TYPE, claim.instance_type_options.to_vec()),
        requirement(LABEL_ZONE, claim.zones.clone()),
        requirement(
            LABEL_CAPACITY_TYPE,
            claim
                .capacity_types
                .iter()
                .map(|c| c.as_str().to_string())
                .collect(),
        ),
    ]
    .into_iter()
    .flatten()
    .collect();
    Some(Mirror {
        name: claim.name.clone(),
        labels,
        annotations,
        spec: MirrorSpec {
            node_class_ref: NodeClassRef {
                group: NODE_CLASS_GROUP.into(),
                kind: NODE_CLASS_KIND.into(),
                name: claim.node_class.clone(),
            },
            requirements,
        },
        status: MirrorStatus {
            provider_id: claim.provider_id(),
            node_name: claim.node_name.clone(),
            conditions: conditions_of(claim),
        },
    })
}

/// Karpenter's condition types (pkg/apis/v1/nodeclaim_status.go), sorted by type.
fn conditions_of(claim: &NodeClaim) -> Vec<MirrorCondition> {
    let condition =
        |type_: &str, status: &str, reason: &str, message: &str, at: i64| MirrorCondition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: rfc3339(at),
        };
    let created = claim.created_at;
    let mut out = Vec::new();
    let launched = claim.state != ClaimState::Launching;
    out.push(match (launched, claim.launched_at) {
        (true, at) => condition("Launched", "True", "Launched", "", at.unwrap_or(created)),
        (false, _) => condition(
            "Launched",
            "Unknown",
            "AwaitingReconciliation",
            "launching an instance",
            created,
        ),
    });
    let registered = claim.registered_at.or(match claim.state {
        ClaimState::Registered | ClaimState::Initialized => Some(claim.updated_at),
        _ => None,
    });
    out.push(match registered {
        Some(at) => condition("Registered", "True", "Registered", "", at),
        None => condition(
            "Registered",
            "Unknown",
            "NodeNotFound",
            "Node not registered with cluster",
            created,
        ),
    });
    let initialized = claim.initialized_at.or(match claim.state {
        ClaimState::Initialized => Some(claim.updated_at),
        _ => None,
    });
    out.push(match (initialized, registered) {
        (Some(at), _) => condition("Initialized", "True", "Initialized", "", at),
        (None, Some(at)) => condition(
            "Initialized",
            "Unknown",
            "NodeNotReady",
            "Node is not Ready yet or still has startup taints",
            at,
        ),
        (None, None) => condition(
            "Initialized",
            "Unknown",
            "NodeNotFound",
            "Node not registered with cluster",
            created,
        ),
    });
    let disruption = claim
        .disruption
        .as_ref()
        .filter(|_| claim.state.is_being_taken_away());
    out.push(match (disruption, initialized) {
        (Some(d), _) => condition(
            "Ready",
            "False",
            "Disrupting",
            &format!("{} ({})", claim.state.as_str(), cause_reason(d.cause)),
            d.since,
        ),
        (None, Some(at)) => condition("Ready", "True", "Ready", "", at),
        (None, None) => condition(
            "Ready",
            "Unknown",
            "UnhealthyDependents",
            "Launched, Registered and Initialized are not all True yet",
            registered.or(claim.launched_at).unwrap_or(created),
        ),
    });
    if let Some(d) = disruption {
        let reason = cause_reason(d.cause);
        out.push(condition(
            "DisruptionReason",
            "True",
            reason,
            reason,
            d.since,
        ));
        if d.cause == DisruptionCause::Drifted {
            out.push(condition("Drifted", "True", "Drifted", "", d.since));
        }
        if matches!(
            d.cause,
            DisruptionCause::Empty | DisruptionCause::Underutilized
        ) {
            out.push(condition(
                "Consolidatable",
                "True",
                "Consolidatable",
                "",
                d.since,
            ));
        }
        if claim.state == ClaimState::Terminating {
            out.push(condition(
                "InstanceTerminating",
                "True",
                "InstanceTerminating",
                "",
                claim.updated_at,
            ));
        }
    }
    out.sort_by(|a, b| a.type_.cmp(&b.type_));
    out
}

/// The reason a disruption reads as: Karpenter's names (Empty, Underutilized, Drifted,
/// Expired) where it has one; nodewright's cause otherwise.
pub fn cause_reason(cause: DisruptionCause) -> &'static str {
    match cause {
        DisruptionCause::Empty => "Empty",
        DisruptionCause::Underutilized => "Underutilized",
        DisruptionCause::Drifted => "Drifted",
        DisruptionCause::Expired => "Expired",
        DisruptionCause::SpotInterrupted => "SpotInterrupted",
        DisruptionCause::RebalanceRecommended => "RebalanceRecommended",
        DisruptionCause::InstanceStopped => "InstanceStopped",
        DisruptionCause::InstanceTerminated => "InstanceTerminated",
        DisruptionCause::ScheduledChange => "ScheduledChange",
        DisruptionCause::Unregistered => "Unregistered",
        DisruptionCause::Unhealthy => "Unhealthy",
        DisruptionCause::Overprovisioned => "Overprovisioned",
        DisruptionCause::CapacityReservationExpiring => "CapacityReservationExpiring",
        DisruptionCause::CapacityReservationInterrupted => "CapacityReservationInterrupted",
    }
}

/// Unix seconds as Kubernetes writes `metav1.Time`.
fn rfc3339(unix_seconds: i64) -> String {
    Timestamp::from_second(unix_seconds)
        .unwrap_or(Timestamp::UNIX_EPOCH)
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

impl Mirror {
    /// The object to create (no status: the API server drops it on create).
    pub fn object(&self) -> Value {
        json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {
                "name": self.name,
                "labels": self.labels,
                "annotations": self.annotations,
            },
            "spec": self.spec,
        })
    }

    /// The body of a merge patch of `/status`: every field, `null` for an absent one.
    pub fn status_patch(&self) -> Value {
        json!({ "status": {
            "providerID": self.status.provider_id,
            "nodeName": self.status.node_name,
            "conditions": self.status.conditions,
        }})
    }

    /// A merge patch setting these labels and annotations, and removing the keys of
    /// `before` (what was written last) that are gone.
    pub fn metadata_patch(&self, before: Option<&Mirror>) -> Value {
        let keyed = |now: &BTreeMap<String, String>, old: Option<&BTreeMap<String, String>>| {
            let mut map: serde_json::Map<String, Value> = now
                .iter()
                .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
                .collect();
            for k in old.into_iter().flat_map(|o| o.keys()) {
                if !now.contains_key(k) {
                    map.insert(k.clone(), Value::Null);
                }
            }
            Value::Object(map)
        };
        json!({ "metadata": {
            "labels": keyed(&self.labels, before.map(|b| &b.labels)),
            "annotations": keyed(&self.annotations, before.map(|b| &b.annotations)),
        }})
    }
}

/// A NodeClaim as the watch delivers it: whose it is, and what it reads as.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Seen {
    pub(crate) name: String,
    /// Labelled [`MANAGED_BY_LABEL`]=[`MANAGED_BY`].
    pub(crate) ours: bool,
    /// The object read back as a mirror (`None` when it does not parse as one).
    pub(crate) mirror: Option<Mirror>,
}

/// Reads a stored NodeClaim (as JSON) back.
pub(crate) fn seen(object: &Value) -> Seen {
    let map = |pointer: &str| -> BTreeMap<String, String> {
        object
            .pointer(pointer)
            .and_then(|v| serde_json::from_value(v.clone()).ok())
            .unwrap_or_default()
    };
    let labels = map("/metadata/labels");
    let ours = labels.get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY);
    let spec = object
        .get("spec")
        .and_then(|s| serde_json::from_value::<MirrorSpec>(s.clone()).ok());
    let status = object
        .get("status")
        .map(|s| serde_json::from_value::<MirrorStatus>(s.clone()).ok())
        .unwrap_or_else(|| Some(MirrorStatus::default()));
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .map(str::to_string);
    let mirror = match (name.clone(), spec, status) {
        (Some(name), Some(spec), Some(status)) => Some(Mirror {
            name,
            labels,
            annotations: map("/metadata/annotations"),
            spec,
            status,
        }),
        _ => None,
    };
    Seen {
        name: name.unwrap_or_default(),
        ours,
        mirror,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_core::catalog::CapacityType;
    use nodewright_core::nodeclaim::{ClaimSpec, Disruption};

    fn claim() -> NodeClaim {
        NodeClaim::launching(
            ClaimSpec {
                name: "general-purpose-x7k2p".into(),
                node_pool: "general-purpose".into(),
                node_class: "default".into(),
                instance_type_options: vec!["m5.xlarge".into(), "m6a.xlarge".into()],
                zones: vec!["us-east-1a".into(), "us-east-1b".into()],
                capacity_types: vec![CapacityType::OnDemand],
                pods: vec!["default/web-0".into()],
                labels: BTreeMap::new(),
            },
            1_000,
        )
    }

    fn initialized() -> NodeClaim {
        let c = claim();
        let c = c
            .transition(ClaimState::Launched, 1_010, |c| {
                c.instance_id = Some("i-0123456789abcdef0".into());
                c.instance_type = Some("m5.xlarge".into());
                c.zone = Some("us-east-1b".into());
                c.capacity_type = Some(CapacityType::OnDemand);
                c.price_per_hour = Some(0.192);
                c.launched_at = Some(1_010);
            })
            .unwrap();
        let c = c
            .transition(ClaimState::Registered, 1_060, |c| {
                c.node_name = Some("ip-10-0-1-2.ec2.internal".into());
                c.registered_at = Some(1_060);
            })
            .unwrap();
        c.transition(ClaimState::Initialized, 1_090, |c| {
            c.initialized_at = Some(1_090)
        })
        .unwrap()
    }

    fn status_of<'m>(m: &'m Mirror, type_: &str) -> (&'m str, &'m str) {
        let c = m
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
            .unwrap_or_else(|| panic!("no {type_} condition: {m:#?}"));
        (c.status.as_str(), c.reason.as_str())
    }

    #[test]
    fn the_node_class_ref_is_never_one_a_karpenter_controller_manages() {
        for c in [claim(), initialized()] {
            let m = mirror_of(&c).unwrap();
            assert_eq!(m.spec.node_class_ref.group, NODE_CLASS_GROUP);
            assert_ne!(m.spec.node_class_ref.group, "karpenter.k8s.aws");
            assert_eq!(m.spec.node_class_ref.name, "default");
            let object = m.object();
            assert_eq!(object["spec"]["nodeClassRef"]["group"], "nodewright.dev");
            assert!(object["metadata"].get("finalizers").is_none());
            assert!(object["metadata"].get("ownerReferences").is_none());
            assert_eq!(object["metadata"]["labels"][MANAGED_BY_LABEL], MANAGED_BY);
        }
    }

    #[test]
    fn an_initialized_claim_reads_as_karpenter_prints_it() {
        let m = mirror_of(&initialized()).unwrap();
        assert_eq!(m.labels["karpenter.sh/nodepool"], "general-purpose");
        assert_eq!(m.labels["node.kubernetes.io/instance-type"], "m5.xlarge");
        assert_eq!(m.labels["topology.kubernetes.io/zone"], "us-east-1b");
        assert_eq!(m.labels["karpenter.sh/capacity-type"], "on-demand");
        assert_eq!(m.annotations[PRICE_ANNOTATION], "0.192");
        assert_eq!(
            m.status.provider_id.as_deref(),
            Some("aws:///us-east-1b/i-0123456789abcdef0")
        );
        assert_eq!(
            m.status.node_name.as_deref(),
            Some("ip-10-0-1-2.ec2.internal")
        );
        for t in ["Launched", "Registered", "Initialized", "Ready"] {
            assert_eq!(status_of(&m, t).0, "True", "{t}");
        }
        assert_eq!(m.spec.requirements.len(), 4);
        assert!(
            m.spec
                .requirements
                .iter()
                .all(|r| r.operator == "In" && !r.values.is_empty())
        );
    }

    #[test]
    fn a_launching_claim_is_not_ready_yet() {
        let m = mirror_of(&claim()).unwrap();
        assert_eq!(status_of(&m, "Launched").0, "Unknown");
        assert_eq!(status_of(&m, "Ready").0, "Unknown");
        assert_eq!(m.status.provider_id, None);
        assert!(!m.labels.contains_key("node.kubernetes.io/instance-type"));
    }

    #[test]
    fn a_claim_being_consolidated_says_why_and_is_not_ready() {
        let c = initialized()
            .transition(ClaimState::Disrupting, 2_000, |c| {
                c.disruption = Some(Disruption {
                    cause: DisruptionCause::Empty,
                    deadline: None,
                    since: 2_000,
                    drain_after: None,
                    drain_grace: None,
                    event: None,
                    command: None,
                })
            })
            .unwrap();
        let m = mirror_of(&c).unwrap();
        assert_eq!(status_of(&m, "DisruptionReason"), ("True", "Empty"));
        assert_eq!(status_of(&m, "Consolidatable").0, "True");
        assert_eq!(status_of(&m, "Ready"), ("False", "Disrupting"));
        assert_eq!(status_of(&m, "Initialized").0, "True");
        assert_eq!(m.annotations[STATE_ANNOTATION], "Disrupting");
    }

    #[test]
    fn terminal_claims_have_no_mirror_and_an_unchanged_claim_gives_an_equal_one() {
        let c = initialized();
        assert_eq!(mirror_of(&c), mirror_of(&c.clone()));
        let mut done = c.clone();
        done.state = ClaimState::Terminated;
        assert_eq!(mirror_of(&done), None);
        done.state = ClaimState::LaunchFailed;
        assert_eq!(mirror_of(&done), None);
    }

    #[test]
    fn a_claim_whose_options_an_overlay_changed_carries_karpenters_annotations() {
        let plain = mirror_of(&claim()).unwrap();
        assert!(
            !plain
                .annotations
                .contains_key(ANNOTATION_PRICE_OVERLAY_APPLIED)
        );
        assert!(
            !plain
                .annotations
                .contains_key(ANNOTATION_CAPACITY_OVERLAY_APPLIED)
        );
        let mut priced = initialized();
        priced.overlays_applied.price = true;
        let m = mirror_of(&priced).unwrap();
        assert_eq!(
            m.annotations.get("karpenter.sh/price-overlay-applied"),
            Some(&"true".to_string())
        );
        assert!(
            !m.annotations
                .contains_key(ANNOTATION_CAPACITY_OVERLAY_APPLIED)
        );
        priced.overlays_applied.capacity = true;
        let m = mirror_of(&priced).unwrap();
        assert_eq!(m.annotations[ANNOTATION_CAPACITY_OVERLAY_APPLIED], "true");
        let object = m.object();
        assert_eq!(
            object["metadata"]["annotations"]["karpenter.sh/capacity-overlay-applied"],
            "true"
        );
        // Written on an existing mirror by the metadata patch, and read back as itself.
        assert_eq!(
            m.metadata_patch(Some(&plain))["metadata"]["annotations"]["karpenter.sh/price-overlay-applied"],
            "true"
        );
        let mut stored = object;
        stored["status"] = m.status_patch()["status"].clone();
        assert_eq!(seen(&stored).mirror, Some(m));
    }

    #[test]
    fn a_written_mirror_reads_back_as_itself() {
        let m = mirror_of(&initialized()).unwrap();
        let mut stored = m.object();
        stored["status"] = m.status_patch()["status"].clone();
        stored["metadata"]["resourceVersion"] = "42".into();
        stored["spec"]["expireAfter"] = "720h".into();
        let seen = seen(&stored);
        assert!(seen.ours);
        assert_eq!(seen.mirror, Some(m));
    }
}
