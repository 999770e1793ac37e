//! Volume topology: where a pod's PersistentVolumeClaims let it run, as Karpenter's
//! `volumetopology.go` works it out, and which claims keep a pod from being planned for
//! at all.
//!
//! A claim bound to a PersistentVolume with `spec.nodeAffinity.required` (an EBS volume
//! lives in one zone) limits the pod to nodes matching that affinity. An unbound claim
//! of a `WaitForFirstConsumer` StorageClass is provisioned where the pod lands, within
//! the class's `allowedTopologies`, so those limit the pod the same way. Both become
//! part of the pod's required node terms: the pod's terms are ORed, the volume's terms
//! are ORed, and a pod must satisfy one of each, so the result is every pod term ANDed
//! with every volume term (a pod with no terms takes the volume's).
//!
//! Claims the planner cannot reason about make the pod not provisionable, with the
//! reason, as Karpenter's `ValidatePersistentVolumeClaims` ignores such pods: a claim
//! that does not exist (kube-scheduler cannot bind the pod either until it does), an
//! unbound claim of an `Immediate` class (the volume, and so its zone, is chosen before
//! the pod is scheduled: planning now could pick the wrong zone), a claim being deleted
//! or lost, or bound to a volume that is missing or being deleted.
//!
//! Pure: [`apply_volume_topology`] takes the pods and the storage objects already read
//! (by `snapshot::parse_snapshot` or the kube adapter) and changes only the pods.

use crate::well_known::{LABEL_EBS_CSI_ZONE, LABEL_HOSTNAME, LABEL_ZONE};
use std::collections::HashMap;

use crate::api::model::NodeRequirement;
// The pod's side of volumes lives with the pod; re-exported where volumes are read.
use crate::cluster::Pod;
pub use crate::cluster::{PodClaim, VolumeProblem};

/// A PersistentVolumeClaim reduced to what placement depends on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VolumeClaim {
    pub namespace: String,
    pub name: String,
    /// `spec.volumeName`: the PersistentVolume it is (being) bound to.
    pub volume_name: Option<String>,
    /// `spec.storageClassName` (empty counts as none).
    pub storage_class: Option<String>,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// `status.phase` is `Lost`: its volume is gone.
    pub lost: bool,
    /// The `pv.kubernetes.io/bind-completed` annotation: until the PV controller sets it,
    /// kube-scheduler treats a claim with a `volumeName` as unbound.
    pub bind_completed: bool,
}

/// A PersistentVolume reduced to what placement depends on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PersistentVolume {
    pub name: String,
    /// `spec.nodeAffinity.required.nodeSelectorTerms[].matchExpressions`, ORed; empty
    /// terms are left out (they add no alternative, as in Karpenter).
    pub required_terms: Vec<Vec<NodeRequirement>>,
    /// A `local` or `hostPath` volume: its hostname requirement is ignored, as Karpenter
    /// does, since a new node can never be the host it names.
    pub node_local: bool,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// The CSI driver that attaches it (`spec.csi.driver`; an in-tree
    /// `awsElasticBlockStore` volume reads as `ebs.csi.aws.com`, the driver CSI migration
    /// hands it to): what its attachment counts against (see
    /// [`crate::volume_limits`]).
    pub csi_driver: Option<String>,
}

/// A StorageClass reduced to what placement depends on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StorageClass {
    pub name: String,
    /// `volumeBindingMode: WaitForFirstConsumer` (the API server defaults it to
    /// `Immediate`).
    pub wait_for_first_consumer: bool,
    /// `allowedTopologies[].matchLabelExpressions` as `In` requirements, ORed; empty
    /// terms are left out.
    pub allowed_topologies: Vec<Vec<NodeRequirement>>,
    /// `provisioner`: the driver its volumes are made and attached by.
    pub provisioner: String,
}

/// The storage objects of a cluster.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Storage {
    pub claims: Vec<VolumeClaim>,
    pub volumes: Vec<PersistentVolume>,
    pub classes: Vec<StorageClass>,
}

/// The ORed terms both `a` and `b` must hold: every term of `a` ANDed with every term of
/// `b`. No terms means no constraint, so the other side is taken as it is.
fn and_terms(a: &[Vec<NodeRequirement>], b: &[Vec<NodeRequirement>]) -> Vec<Vec<NodeRequirement>> {
    if a.is_empty() {
        return b.to_vec();
    }
    if b.is_empty() {
        return a.to_vec();
    }
    let mut out = Vec::with_capacity(a.len() * b.len());
    for x in a {
        for y in b {
            out.push(x.iter().chain(y).cloned().collect());
        }
    }
    out
}

/// Terms with the EBS CSI driver's zone key read as `topology.kubernetes.io/zone`: the
/// driver labels its nodes with both, and Karpenter's AWS provider normalizes one to the
/// other, so a volume in a zone limits its pods to that zone whichever key it names.
fn normalized(terms: &[Vec<NodeRequirement>]) -> Vec<Vec<NodeRequirement>> {
    terms
        .iter()
        .map(|term| {
            term.iter()
                .map(|r| {
                    let mut r = r.clone();
                    if r.key == LABEL_EBS_CSI_ZONE {
                        r.key = LABEL_ZONE.to_string();
                    }
                    r
                })
                .collect()
        })
        .collect()
}

/// The ORed terms a bound volume places its consumers under (empty: anywhere).
fn volume_terms(pv: &PersistentVolume) -> Vec<Vec<NodeRequirement>> {
    if !pv.node_local {
        return normalized(&pv.required_terms);
    }
    let mut out = Vec::new();
    for term in &normalized(&pv.required_terms) {
        let kept: Vec<NodeRequirement> = term
            .iter()
            .filter(|r| r.key != LABEL_HOSTNAME)
            .cloned()
            .collect();
        if kept.is_empty() {
            // A term that only named the host now allows every node: so does the OR.
            return Vec::new();
        }
        out.push(kept);
    }
    out
}

/// The placement a claim imposes (ORed terms, empty: none), or why the pod cannot be
/// planned for.
fn claim_terms(
    storage: &Lookup<'_>,
    namespace: &str,
    pc: &PodClaim,
) -> Result<Vec<Vec<NodeRequirement>>, VolumeProblem> {
    let key = format!("{namespace}/{}", pc.claim);
    let Some(claim) = storage.claims.get(&(namespace, pc.claim.as_str())) else {
        return Err(VolumeProblem::ClaimMissing {
            volume: pc.volume.clone(),
            claim: key,
        });
    };
    if claim.deleting {
        return Err(VolumeProblem::ClaimDeleting { claim: key });
    }
    let class = claim.storage_class.as_deref().filter(|c| !c.is_empty());
    if let Some(volume) = claim.volume_name.as_deref().filter(|v| !v.is_empty()) {
        if claim.lost {
            return Err(VolumeProblem::ClaimLost {
                claim: key,
                volume: volume.to_string(),
            });
        }
        let Some(pv) = storage.volumes.get(volume) else {
            return Err(VolumeProblem::VolumeMissing {
                claim: key,
                volume: volume.to_string(),
            });
        };
        if pv.deleting {
            return Err(VolumeProblem::VolumeDeleting {
                claim: key,
                volume: volume.to_string(),
            });
        }
        if !claim.bind_completed {
            return Err(VolumeProblem::BindNotCompleted {
                claim: key,
                volume: volume.to_string(),
            });
        }
        return Ok(volume_terms(pv));
    }
    let Some(class) = class else {
        return Err(VolumeProblem::NoStorageClass { claim: key });
    };
    let Some(sc) = storage.classes.get(class) else {
        return Err(VolumeProblem::StorageClassMissing {
            claim: key,
            class: class.to_string(),
        });
    };
    if !sc.wait_for_first_consumer {
        return Err(VolumeProblem::ImmediateUnbound {
            claim: key,
            class: class.to_string(),
        });
    }
    Ok(normalized(&sc.allowed_topologies))
}

struct Lookup<'a> {
    claims: HashMap<(&'a str, &'a str), &'a VolumeClaim>,
    volumes: HashMap<&'a str, &'a PersistentVolume>,
    classes: HashMap<&'a str, &'a StorageClass>,
}

/// Adds each unbound, unfinished pod's volume topology to its required node terms
/// (keeping its own in [`PodFields::own_node_terms`] for topology spread), or sets its
/// [`PodFields::volume_problem`] at the first claim that cannot be planned for (its terms are
/// then left as they were). Bound and finished pods are left alone: their
/// volumes are already where they run.
pub fn apply_volume_topology(pods: &mut [Pod], storage: &Storage) {
    let lookup = Lookup {
        claims: storage
            .claims
            .iter()
            .map(|c| ((c.namespace.as_str(), c.name.as_str()), c))
            .collect(),
        volumes: storage
            .volumes
            .iter()
            .map(|v| (v.name.as_str(), v))
            .collect(),
        classes: storage
            .classes
            .iter()
            .map(|c| (c.name.as_str(), c))
            .collect(),
    };
    for pod in pods
        .iter_mut()
        .filter(|p| p.node_name.is_none() && !p.terminal && !p.claims.is_empty())
    {
        // From the pod's own terms, so applying twice changes nothing.
        let own = pod
            .own_node_terms
            .as_ref()
            .unwrap_or(&pod.required_node_terms);
        let mut terms = own.clone();
        let mut problem = None;
        for pc in &pod.claims {
            match claim_terms(&lookup, &pod.namespace, pc) {
                Ok(volume) => terms = and_terms(&terms, &volume),
                Err(p) => {
                    problem = Some(p);
                    break;
                }
            }
        }
        match problem {
            Some(p) => pod.volume_problem = Some(p),
            None => {
                let own = pod
                    .own_node_terms
                    .take()
                    .unwrap_or_else(|| std::mem::take(&mut pod.required_node_terms));
                pod.own_node_terms = (terms != own).then_some(own);
                pod.required_node_terms = terms.into();
            }
        }
    }
}

/// When the storage objects cannot be read (`kind`, and why): every pending pod with a
/// PersistentVolumeClaim waits with that reason; the others are untouched.
pub fn hold_pods_with_claims(pods: &mut [Pod], kind: &str, why: &str) {
    for pod in pods
        .iter_mut()
        .filter(|p| p.node_name.is_none() && !p.terminal && !p.claims.is_empty())
    {
        pod.volume_problem = Some(VolumeProblem::StorageUnreadable {
            kind: kind.to_string(),
            why: why.to_string(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::model::Operator;
    use crate::testing::pod;

    fn zone(z: &[&str]) -> Vec<NodeRequirement> {
        vec![NodeRequirement {
            key: "topology.kubernetes.io/zone".into(),
            operator: Operator::In,
            values: z.iter().map(|s| s.to_string()).collect(),
            min_values: None,
        }]
    }

    fn arch(a: &str) -> Vec<NodeRequirement> {
        vec![NodeRequirement {
            key: "kubernetes.io/arch".into(),
            operator: Operator::In,
            values: vec![a.into()],
            min_values: None,
        }]
    }

    fn with_claim(name: &str, claim: &str) -> Pod {
        let mut p = pod(name, "1", "1Gi");
        p.claims.push(PodClaim {
            volume: "data".into(),
            claim: claim.into(),
        });
        p
    }

    fn bound_claim(name: &str, pv: &str) -> VolumeClaim {
        VolumeClaim {
            namespace: "default".into(),
            name: name.into(),
            volume_name: Some(pv.into()),
            storage_class: Some("gp3".into()),
            bind_completed: true,
            ..VolumeClaim::default()
        }
    }

    fn unbound_claim(name: &str, class: &str) -> VolumeClaim {
        VolumeClaim {
            namespace: "default".into(),
            name: name.into(),
            storage_class: Some(class.into()),
            ..VolumeClaim::default()
        }
    }

    fn pv(name: &str, terms: Vec<Vec<NodeRequirement>>) -> PersistentVolume {
        PersistentVolume {
            name: name.into(),
            required_terms: terms,
            ..PersistentVolume::default()
        }
    }

    #[test]
    fn ored_pod_terms_and_ored_volume_terms_make_their_cross_product() {
        let mut p = with_claim("db-0", "data-db-0");
        p.required_node_terms = vec![arch("amd64"), arch("arm64")].into();
        let storage = Storage {
            claims: vec![bound_claim("data-db-0", "pv-1")],
            volumes: vec![pv(
                "pv-1",
                vec![zone(&["us-east-1a"]), zone(&["us-east-1b"])],
            )],
            classes: vec![],
        };
        let mut pods = vec![p];
        apply_volume_topology(&mut pods, &storage);
        let expected: Vec<Vec<NodeRequirement>> = [
            ("amd64", "us-east-1a"),
            ("amd64", "us-east-1b"),
            ("arm64", "us-east-1a"),
            ("arm64", "us-east-1b"),
        ]
        .iter()
        .map(|(a, z)| [arch(a), zone(&[z])].concat())
        .collect();
        assert_eq!(pods[0].required_node_terms, expected);
        assert_eq!(pods[0].volume_problem, None);
    }

    #[test]
    fn a_pod_without_terms_takes_the_volumes_terms_and_two_volumes_both_apply() {
        let mut p = with_claim("db-0", "data-db-0");
        p.claims.push(PodClaim {
            volume: "scratch".into(),
            claim: "db-0-scratch".into(),
        });
        let storage = Storage {
            claims: vec![
                bound_claim("data-db-0", "pv-1"),
                unbound_claim("db-0-scratch", "wait"),
            ],
            volumes: vec![pv("pv-1", vec![zone(&["us-east-1b"])])],
            classes: vec![StorageClass {
                name: "wait".into(),
                wait_for_first_consumer: true,
                allowed_topologies: vec![zone(&["us-east-1b", "us-east-1c"])],
                ..StorageClass::default()
            }],
        };
        let mut pods = vec![p];
        apply_volume_topology(&mut pods, &storage);
        assert_eq!(
            pods[0].required_node_terms,
            vec![[zone(&["us-east-1b"]), zone(&["us-east-1b", "us-east-1c"])].concat()]
        );
    }

    #[test]
    fn a_local_volumes_hostname_is_ignored_but_its_other_requirements_hold() {
        let mut host = zone(&["us-east-1a"]);
        host.push(NodeRequirement {
            key: LABEL_HOSTNAME.into(),
            operator: Operator::In,
            values: vec!["ip-10-0-0-1".into()],
            min_values: None,
        });
        let mut local = pv("local-1", vec![host]);
        local.node_local = true;
        let storage = Storage {
            claims: vec![bound_claim("data-db-0", "local-1")],
            volumes: vec![local],
            classes: vec![],
        };
        let mut pods = vec![with_claim("db-0", "data-db-0")];
        apply_volume_topology(&mut pods, &storage);
        assert_eq!(pods[0].required_node_terms, vec![zone(&["us-east-1a"])]);
    }

    #[test]
    fn claims_that_cannot_be_planned_for_are_named_with_their_reason() {
        let immediate = StorageClass {
            name: "gp2".into(),
            ..StorageClass::default()
        };
        let mut lost = bound_claim("lost", "pv-gone");
        lost.lost = true;
        let mut deleting_pv = pv("pv-going", vec![]);
        deleting_pv.deleting = true;
        let mut half_bound = bound_claim("half", "pv-1");
        half_bound.bind_completed = false;
        let storage = Storage {
            claims: vec![
                unbound_claim("now", "gp2"),
                unbound_claim("nameless", ""),
                unbound_claim("unknown-class", "fast"),
                bound_claim("dangling", "pv-missing"),
                bound_claim("going", "pv-going"),
                lost,
                half_bound,
            ],
            volumes: vec![deleting_pv, pv("pv-1", vec![])],
            classes: vec![immediate],
        };
        let cases = [
            (
                "absent",
                "its volume \"data\" uses PersistentVolumeClaim \"default/absent\", which does not exist",
            ),
            (
                "now",
                "its PersistentVolumeClaim \"default/now\" is not bound yet and StorageClass \"gp2\" binds Immediately: the volume's zone is chosen before the pod is placed, so it waits for the claim to bind",
            ),
            (
                "nameless",
                "its PersistentVolumeClaim \"default/nameless\" is not bound and names no StorageClass, so no volume will be provisioned for it",
            ),
            (
                "unknown-class",
                "its PersistentVolumeClaim \"default/unknown-class\" names StorageClass \"fast\", which does not exist",
            ),
            (
                "dangling",
                "its PersistentVolumeClaim \"default/dangling\" is bound to PersistentVolume \"pv-missing\", which does not exist",
            ),
            (
                "going",
                "its PersistentVolumeClaim \"default/going\" is bound to PersistentVolume \"pv-going\", which is being deleted",
            ),
            (
                "lost",
                "its PersistentVolumeClaim \"default/lost\" is Lost: PersistentVolume \"pv-gone\" is gone",
            ),
            (
                "half",
                "its PersistentVolumeClaim \"default/half\" names PersistentVolume \"pv-1\" but is not bound yet (no pv.kubernetes.io/bind-completed annotation)",
            ),
        ];
        for (claim, why) in cases {
            let mut pods = vec![with_claim("app-0", claim)];
            apply_volume_topology(&mut pods, &storage);
            let reason = pods[0].not_provisionable().map(|r| r.to_string());
            assert_eq!(reason.as_deref(), Some(why), "claim {claim}");
            assert!(pods[0].required_node_terms.is_empty());
        }
    }

    #[test]
    fn the_ebs_csi_drivers_zone_key_reads_as_the_zone_label_for_volumes_and_classes() {
        let ebs = |z: &str| {
            let mut term = zone(&[z]);
            term[0].key = LABEL_EBS_CSI_ZONE.into();
            term
        };
        let mut p = with_claim("db-0", "data-db-0");
        p.claims.push(PodClaim {
            volume: "scratch".into(),
            claim: "db-0-scratch".into(),
        });
        p.required_node_terms = vec![arch("arm64")].into();
        let storage = Storage {
            claims: vec![
                bound_claim("data-db-0", "pv-1"),
                unbound_claim("db-0-scratch", "wait"),
            ],
            volumes: vec![pv("pv-1", vec![ebs("us-east-1b")])],
            classes: vec![StorageClass {
                name: "wait".into(),
                wait_for_first_consumer: true,
                allowed_topologies: vec![ebs("us-east-1b")],
                ..StorageClass::default()
            }],
        };
        let mut pods = vec![p];
        apply_volume_topology(&mut pods, &storage);
        assert_eq!(
            pods[0].required_node_terms,
            vec![[arch("arm64"), zone(&["us-east-1b"]), zone(&["us-east-1b"])].concat()]
        );
        // The pod's own terms are kept for topology spread, and applying twice is
        // applying once.
        assert_eq!(pods[0].own_node_terms, Some(vec![arch("arm64")]));
        let once = pods.clone();
        apply_volume_topology(&mut pods, &storage);
        assert_eq!(pods, once);
    }

    #[test]
    fn bound_pods_are_left_alone_even_when_their_claim_is_gone() {
        let mut p = with_claim("db-0", "absent");
        p.node_name = Some("n1".into());
        let mut pods = vec![p];
        apply_volume_topology(&mut pods, &Storage::default());
        assert_eq!(pods[0].volume_problem, None);
    }

    /// Plans a `nodewright plan` test snapshot on a spot pool where us-east-1b costs ten
    /// times what the other zones do.
    fn plan_with_1b_dearest(snapshot: &str) -> crate::provisioning::ProvisioningPlan {
        use crate::catalog::Catalog;
        use crate::pricing::Pricing;
        use crate::provisioning::{ProvisioningInput, plan_provisioning};
        use crate::testing::{general_purpose_pool, req};
        use crate::well_known::LABEL_CAPACITY_TYPE;
        let snapshot = crate::snapshot::parse_snapshot(snapshot).unwrap();
        let catalog = Catalog::embedded();
        let mut pricing = Pricing::default();
        for it in &catalog.types {
            let Some(od) = it.on_demand_price else {
                continue;
            };
            for (zone, fraction) in [
                ("us-east-1a", 0.3),
                ("us-east-1b", 3.0),
                ("us-east-1c", 0.3),
            ] {
                pricing
                    .spot_prices
                    .insert((it.name.clone(), zone.to_string()), od * fraction);
            }
        }
        let mut pool = general_purpose_pool();
        pool.requirements.retain(|r| r.key != LABEL_CAPACITY_TYPE);
        pool.requirements
            .push(req(LABEL_CAPACITY_TYPE, Operator::In, &["spot"]));
        plan_provisioning(&ProvisioningInput {
            snapshot: &snapshot,
            node_pools: &[pool],
            node_classes: &[],
            catalog,
            pricing: &pricing,
            in_flight: &[],
        })
    }

    #[test]
    fn a_pod_bound_to_a_zonal_volume_gets_a_claim_only_in_its_zone_though_others_are_cheaper() {
        let plan = plan_with_1b_dearest(include_str!(
            "../../../cli/tests/data/pods-bound-zonal-volume.json"
        ));
        assert_eq!(plan.node_claims.len(), 1, "{plan:?}");
        assert_eq!(plan.node_claims[0].zone, "us-east-1b");
        assert_eq!(plan.node_claims[0].zones, vec!["us-east-1b".to_string()]);

        // The same pod without its volume goes to a cheaper zone: the volume decided.
        let free = include_str!("../../../cli/tests/data/pods-marked-unschedulable.json");
        let plan = plan_with_1b_dearest(free);
        assert_ne!(plan.node_claims[0].zone, "us-east-1b");
    }
}
