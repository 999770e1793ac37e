//! Volume attachment limits: an EC2 instance attaches only so many EBS volumes, and
//! kube-scheduler binds no pod to a node that has no attachment left for it (its
//! NodeVolumeLimits filter reads what the CSI driver published on the node's CSINode).
//! nodewright plans the same room: a pod's distinct EBS-backed claims are a resource it
//! requests ([`EBS_ATTACHMENTS`]), and a node or an instance type offers as many as it
//! can attach.
//!
//! - **A registered node** offers what the EBS CSI driver published on its CSINode
//!   (`spec.drivers[ebs.csi.aws.com].allocatable.count`). A driver that registered with
//!   no count has no limit, as in Karpenter v1.15.
//! - **Until the driver has published** (a claim being launched, an instance type to
//!   choose, a node whose driver has not started), the limit is the instance type's,
//!   estimated as the driver computes it ([`estimated_ebs_attachments`]): EC2's EBS
//!   attachments for the type (`data/ebs-attachments.tsv`, the Nitro default of 27
//!   elsewhere), less the root volume, and where the type shares its attachments with
//!   network interfaces, less one more for the second interface the VPC CNI attaches for
//!   pod addresses. Karpenter v1.15 applies an instance type's limit the same way until
//!   the CSINode has one; its AWS provider declares none, so a Karpenter-launched node
//!   takes any number of volumes and the pods past its limit wait for the next launch.
//! - **Counting is by distinct claim**, as kube-scheduler counts: a claim several pods
//!   use is attached once, where a running pod uses it, else with the first pending pod
//!   (an EBS volume attaches to one node, so the pods sharing it run together). A claim
//!   attached on several nodes at once (io2 multi-attach) is still counted once.
//! - **Which claims are EBS volumes**: a bound claim by its volume (`spec.csi.driver`, or
//!   an in-tree `awsElasticBlockStore`, which CSI migration hands to the same driver), an
//!   unbound one by its StorageClass's provisioner (`ebs.csi.aws.com`, or the in-tree
//!   `kubernetes.io/aws-ebs`). Other CSI drivers' limits are not planned: on EKS, EFS and
//!   FSx publish none.
//!
//! Pure: the kube adapter and `snapshot::parse_snapshot` apply it to what they read.

use std::collections::{HashMap, HashSet};

use crate::cluster::{Node, Pod};
use crate::ebs_attachments::estimated_ebs_attachments;
use crate::resources::{EBS_ATTACHMENTS, WELL_KNOWN};
use crate::volumes::Storage;
use crate::well_known::LABEL_INSTANCE_TYPE;

/// The EBS CSI driver's name, and the in-tree provisioner CSI migration maps to it.
pub const EBS_CSI_DRIVER: &str = "ebs.csi.aws.com";
const IN_TREE_EBS: &str = "kubernetes.io/aws-ebs";

/// What a node with no limit offers: more than any node could ever be asked for.
pub const UNLIMITED_ATTACHMENTS: i64 = 1 << 20;

/// Whether `driver` (a CSI driver's name or a StorageClass's provisioner) attaches EBS
/// volumes.
pub fn is_ebs(driver: &str) -> bool {
    driver == EBS_CSI_DRIVER || driver == IN_TREE_EBS
}

/// What the EBS CSI driver published on a node's CSINode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Published {
    /// `allocatable.count`: this many EBS volumes in all.
    Count(i64),
    /// Registered without a count: no limit.
    Unbounded,
}

/// A CSINode reduced to the EBS driver's entry (`None`: the driver has not registered on
/// the node yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsiNode {
    /// The node's name (a CSINode is named after its node).
    pub name: String,
    pub ebs: Option<Published>,
}

/// Sets every node's [`EBS_ATTACHMENTS`] allocatable: its CSINode's count, no limit when
/// the driver published none, otherwise what the node already says (a node built from an
/// instance type) or its instance type's estimate; a node of no known type has no limit.
pub fn apply_node_attachment_limits(nodes: &mut [Node], csi_nodes: &[CsiNode]) {
    let published: HashMap<&str, Option<Published>> =
        csi_nodes.iter().map(|c| (c.name.as_str(), c.ebs)).collect();
    let name = WELL_KNOWN[EBS_ATTACHMENTS];
    for node in nodes {
        let count = match published.get(node.name.as_str()).copied().flatten() {
            Some(Published::Count(n)) => n.max(0),
            Some(Published::Unbounded) => UNLIMITED_ATTACHMENTS,
            None if node.allocatable.slot_milli(EBS_ATTACHMENTS) > 0 => continue,
            None => node
                .labels
                .get(LABEL_INSTANCE_TYPE)
                .map_or(UNLIMITED_ATTACHMENTS, |t| estimated_ebs_attachments(t)),
        };
        node.allocatable.set_milli(name, count.saturating_mul(1000));
    }
}

/// Sets each pod's [`EBS_ATTACHMENTS`] request: its distinct EBS-backed claims, each
/// claim counted once in the cluster. A claim a running pod uses is attached where that
/// pod runs and counts there; a claim only pending pods use counts for the first of them
/// (by key): an EBS volume attaches to one node, so the pods sharing it run together.
/// Claims whose driver cannot be told (missing, unbound without a class) count nothing:
/// such a pod waits on [`crate::volumes::apply_volume_topology`]'s verdict anyway.
pub fn count_ebs_claims(pods: &mut [Pod], storage: &Storage) {
    let claims: HashMap<(&str, &str), &crate::volumes::VolumeClaim> = storage
        .claims
        .iter()
        .map(|c| ((c.namespace.as_str(), c.name.as_str()), c))
        .collect();
    let volume_ebs: HashMap<&str, bool> = storage
        .volumes
        .iter()
        .map(|v| (v.name.as_str(), v.csi_driver.as_deref().is_some_and(is_ebs)))
        .collect();
    let class_ebs: HashMap<&str, bool> = storage
        .classes
        .iter()
        .map(|c| (c.name.as_str(), is_ebs(&c.provisioner)))
        .collect();
    let is_ebs_claim = |namespace: &str, claim: &str| {
        let Some(c) = claims.get(&(namespace, claim)) else {
            return false;
        };
        let by_volume = c
            .volume_name
            .as_deref()
            .and_then(|v| volume_ebs.get(v).copied());
        let by_class = || {
            c.storage_class
                .as_deref()
                .and_then(|class| class_ebs.get(class).copied())
        };
        by_volume.or_else(by_class).unwrap_or(false)
    };
    // Running pods first, then pending ones, each by key: the order claims are counted in.
    let mut order: Vec<usize> = (0..pods.len())
        .filter(|&i| !pods[i].terminal && !pods[i].claims.is_empty())
        .collect();
    order.sort_by(|&a, &b| {
        let (a, b) = (&pods[a], &pods[b]);
        (a.node_name.is_none(), &a.namespace, &a.name).cmp(&(
            b.node_name.is_none(),
            &b.namespace,
            &b.name,
        ))
    });
    let mut counted: HashSet<(String, String)> = HashSet::new();
    let name = WELL_KNOWN[EBS_ATTACHMENTS];
    for i in order {
        let pod = &pods[i];
        let mut count = 0i64;
        for pc in &pod.claims {
            if is_ebs_claim(&pod.namespace, &pc.claim)
                && counted.insert((pod.namespace.clone(), pc.claim.clone()))
            {
                count += 1;
            }
        }
        pods[i].requests.set_milli(name, count * 1000);
    }
}

#[cfg(test)]
pub(crate) mod tests;
