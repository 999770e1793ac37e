//! EBS attachment limits through the planner (Karpenter's VolumeUsage cases and its
//! v1.15 instance-type limits, with nodewright's estimate for new nodes).

use super::*;
use crate::volume_limits::{CsiNode, Published, apply_node_attachment_limits, count_ebs_claims};
use crate::volumes::{PodClaim, Storage, VolumeClaim, apply_volume_topology};

const TYPE: &str = "node.kubernetes.io/instance-type";

/// Pending pods `prefix-0..n`, each using `claims_each` claims of `class`: its own, or
/// with `shared` all the same ones.
fn pods_with_claims(
    prefix: &str,
    n: usize,
    claims_each: usize,
    class: &str,
    shared: bool,
    storage: &mut Storage,
) -> Vec<Pod> {
    (0..n)
        .map(|i| {
            let mut p = pod(&format!("{prefix}-{i}"), "100m", "64Mi");
            for j in 0..claims_each {
                let claim = if shared {
                    format!("{prefix}-data-{j}")
                } else {
                    format!("{prefix}-{i}-data-{j}")
                };
                p.claims.push(PodClaim {
                    volume: format!("data-{j}"),
                    claim: claim.clone(),
                });
                if !storage.claims.iter().any(|c| c.name == claim) {
                    storage.claims.push(VolumeClaim {
                        namespace: "default".into(),
                        name: claim,
                        storage_class: Some(class.into()),
                        ..VolumeClaim::default()
                    });
                }
            }
            p
        })
        .collect()
}

fn storage() -> Storage {
    Storage {
        classes: crate::volume_limits::tests::classes(),
        ..Storage::default()
    }
}

/// The snapshot as the kube adapter builds it: volumes applied to the pods, attachment
/// limits to the nodes.
fn read(mut snap: ClusterSnapshot, storage: &Storage, csi_nodes: &[CsiNode]) -> ClusterSnapshot {
    apply_volume_topology(&mut snap.pods, storage);
    count_ebs_claims(&mut snap.pods, storage);
    apply_node_attachment_limits(&mut snap.nodes, csi_nodes);
    snap
}

fn one_type_pool(instance_type: &str) -> NodePool {
    node_pool(
        "general-purpose",
        vec![req(TYPE, Operator::In, &[instance_type])],
    )
}

/// The plan for `snap` beside an m5.4xlarge node `big` whose EBS CSI driver published
/// `published`.
fn on_big_node(
    mut snap: ClusterSnapshot,
    storage: &Storage,
    published: Published,
) -> ProvisioningPlan {
    let catalog = Catalog::embedded();
    snap.nodes.push(node(
        "big",
        "m5.4xlarge",
        "us-east-1a",
        "general-purpose",
        catalog,
    ));
    let csi = [CsiNode {
        name: "big".into(),
        ebs: Some(published),
    }];
    plan(&read(snap, storage, &csi), &[general_purpose_pool()])
}

fn claimed_pods(planned: &ProvisioningPlan) -> Vec<usize> {
    planned.node_claims.iter().map(|c| c.pods.len()).collect()
}

#[test]
fn a_node_takes_no_more_ebs_volumes_than_its_csi_node_publishes_and_the_rest_get_a_new_node() {
    // Karpenter: a CSINode count of 10; six pods of two claims each; five fit.
    let mut storage = storage();
    let snap = snapshot(pods_with_claims("db", 6, 2, "gp3", false, &mut storage));
    let planned = on_big_node(snap, &storage, Published::Count(10));
    let on_big: usize = planned
        .existing_nodes
        .iter()
        .filter(|a| a.target == "big")
        .map(|a| a.pods.len())
        .sum();
    assert_eq!(on_big, 5, "{:?}", planned.existing_nodes);
    assert_eq!(claimed_pods(&planned), [1]);
}

#[test]
fn a_new_node_takes_no_more_ebs_volumes_than_its_instance_type_attaches() {
    // 30 small pods of one volume each fit one m5.xlarge by cpu, memory and pods, but it
    // attaches 25 volumes for pods.
    let mut storage = storage();
    let snap = snapshot(pods_with_claims("db", 30, 1, "gp3", false, &mut storage));
    let planned = plan(&read(snap, &storage, &[]), &[one_type_pool("m5.xlarge")]);
    let counts = claimed_pods(&planned);
    assert_eq!(counts.len(), 2, "{counts:?}");
    assert!(counts.iter().all(|&n| n <= 25), "{counts:?}");
    // A type with dedicated attachments takes them all.
    let planned = plan_for(&storage, 30, "m7i.xlarge");
    assert_eq!(claimed_pods(&planned), [30]);
}

fn plan_for(storage: &Storage, n: usize, instance_type: &str) -> ProvisioningPlan {
    let mut storage = storage.clone();
    let snap = snapshot(pods_with_claims("db", n, 1, "gp3", false, &mut storage));
    plan(&read(snap, &storage, &[]), &[one_type_pool(instance_type)])
}

#[test]
fn pods_sharing_one_claim_attach_it_once() {
    // Karpenter: all pods using the same PVC launch a single node. 30 pods of 100m fill
    // an m5.xlarge's cpu; counted once each, their claim would need two.
    let mut storage = storage();
    let snap = snapshot(pods_with_claims("web", 30, 1, "gp3", true, &mut storage));
    let planned = plan(&read(snap, &storage, &[]), &[one_type_pool("m5.xlarge")]);
    assert_eq!(claimed_pods(&planned), [30]);
}

#[test]
fn an_in_tree_aws_ebs_class_counts_against_the_csi_drivers_limit_and_efs_does_not() {
    let mut storage = storage();
    let in_tree = snapshot(pods_with_claims(
        "old",
        30,
        1,
        "in-tree",
        false,
        &mut storage,
    ));
    let planned = plan(&read(in_tree, &storage, &[]), &[one_type_pool("m5.xlarge")]);
    assert_eq!(planned.node_claims.len(), 2, "{:?}", claimed_pods(&planned));
    let efs = snapshot(pods_with_claims(
        "shared-fs",
        30,
        1,
        "efs",
        false,
        &mut storage,
    ));
    let planned = plan(&read(efs, &storage, &[]), &[one_type_pool("m5.xlarge")]);
    assert_eq!(claimed_pods(&planned), [30]);
}

#[test]
fn a_driver_that_published_no_count_leaves_its_node_unlimited() {
    let mut storage = storage();
    let snap = snapshot(pods_with_claims("db", 30, 1, "gp3", false, &mut storage));
    let planned = on_big_node(snap, &storage, Published::Unbounded);
    assert!(
        planned.node_claims.is_empty(),
        "{:?}",
        claimed_pods(&planned)
    );
}
