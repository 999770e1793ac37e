use super::*;
use crate::catalog::Catalog;
use crate::testing::{node, pod};
use crate::volumes::{PersistentVolume, PodClaim, StorageClass, VolumeClaim};

fn attachments(node: &Node) -> i64 {
    node.allocatable.slot_milli(EBS_ATTACHMENTS) / 1000
}

#[test]
fn a_new_nodes_ebs_room_is_its_types_attachments_less_the_root_volume_and_a_second_interface() {
    // Nitro, shared with interfaces: 27 less the root volume and the VPC CNI's second one.
    assert_eq!(estimated_ebs_attachments("m5.xlarge"), 25);
    // One NVMe instance store volume takes one more.
    assert_eq!(estimated_ebs_attachments("c5d.large"), 24);
    // Dedicated EBS attachments (7th generation on): only the root volume comes off.
    assert_eq!(estimated_ebs_attachments("m7i.large"), 31);
    assert_eq!(estimated_ebs_attachments("m7i.48xlarge"), 127);
    // Xen: 39 of its own.
    assert_eq!(estimated_ebs_attachments("c4.large"), 38);
    // A type the table does not know gets the Nitro default, as the driver gives it.
    assert_eq!(estimated_ebs_attachments("zz9.large"), 25);
    // Never less than one.
    assert_eq!(estimated_ebs_attachments("d3.8xlarge"), 1);
}

#[test]
fn every_catalog_type_offers_its_estimate_for_ebs_volumes() {
    for t in &Catalog::embedded().types {
        assert_eq!(
            t.allocatable.slot_milli(EBS_ATTACHMENTS),
            estimated_ebs_attachments(&t.name) * 1000,
            "{}",
            t.name
        );
    }
}

#[test]
fn a_node_offers_its_csi_nodes_count_else_its_types_estimate_else_no_limit() {
    let catalog = Catalog::embedded();
    let mut published = node("published", "m5.xlarge", "us-east-1a", "gp", catalog);
    let mut unbounded = node("unbounded", "m5.xlarge", "us-east-1a", "gp", catalog);
    let mut waiting = node("waiting", "m5.xlarge", "us-east-1a", "gp", catalog);
    let mut unknown = waiting.clone();
    unknown.name = "unknown".into();
    // As the kube adapter reads them: a kubelet publishes no attachments.
    for n in [&mut published, &mut unbounded, &mut waiting, &mut unknown] {
        n.allocatable.set_milli(WELL_KNOWN[EBS_ATTACHMENTS], 0);
    }
    unknown.labels.remove(LABEL_INSTANCE_TYPE);
    let mut nodes = vec![published, unbounded, waiting, unknown];
    let csi_nodes = [
        CsiNode {
            name: "published".into(),
            ebs: Some(Published::Count(10)),
        },
        CsiNode {
            name: "unbounded".into(),
            ebs: Some(Published::Unbounded),
        },
        // The driver has not registered on it yet.
        CsiNode {
            name: "waiting".into(),
            ebs: None,
        },
    ];
    apply_node_attachment_limits(&mut nodes, &csi_nodes);
    let got: Vec<i64> = nodes.iter().map(attachments).collect();
    assert_eq!(got, [10, UNLIMITED_ATTACHMENTS, 25, UNLIMITED_ATTACHMENTS]);
    // Applying again changes nothing; a count the driver lowers later is taken.
    apply_node_attachment_limits(&mut nodes, &csi_nodes);
    assert_eq!(nodes.iter().map(attachments).collect::<Vec<_>>(), got);
    let lowered = [CsiNode {
        name: "published".into(),
        ebs: Some(Published::Count(7)),
    }];
    apply_node_attachment_limits(&mut nodes, &lowered);
    assert_eq!(attachments(&nodes[0]), 7);
}

/// `claims` (ns `default`) on `pod`, each unbound in `class`.
fn with_claims(pod: &mut Pod, claims: &[&str], class: &str, storage: &mut Storage) {
    for c in claims {
        pod.claims.push(PodClaim {
            volume: format!("v-{c}"),
            claim: (*c).into(),
        });
        if !storage.claims.iter().any(|s| s.name == *c) {
            storage.claims.push(VolumeClaim {
                namespace: "default".into(),
                name: (*c).into(),
                storage_class: Some(class.into()),
                ..VolumeClaim::default()
            });
        }
    }
}

/// StorageClasses of the EBS CSI driver (`gp3`), the in-tree EBS provisioner
/// (`in-tree`) and EFS (`efs`), all binding on first consumer.
pub(crate) fn classes() -> Vec<StorageClass> {
    [
        ("gp3", EBS_CSI_DRIVER),
        ("in-tree", "kubernetes.io/aws-ebs"),
        ("efs", "efs.csi.aws.com"),
    ]
    .into_iter()
    .map(|(name, provisioner)| StorageClass {
        name: name.into(),
        provisioner: provisioner.into(),
        wait_for_first_consumer: true,
        ..StorageClass::default()
    })
    .collect()
}

fn requested(pod: &Pod) -> i64 {
    pod.requests.slot_milli(EBS_ATTACHMENTS) / 1000
}

#[test]
fn a_pod_requests_one_attachment_per_distinct_ebs_claim_and_none_for_other_drivers() {
    let mut storage = Storage {
        classes: classes(),
        ..Storage::default()
    };
    let mut two = pod("two", "100m", "64Mi");
    with_claims(&mut two, &["a", "b"], "gp3", &mut storage);
    let mut in_tree = pod("in-tree", "100m", "64Mi");
    with_claims(&mut in_tree, &["c"], "in-tree", &mut storage);
    let mut efs = pod("efs", "100m", "64Mi");
    with_claims(&mut efs, &["d"], "efs", &mut storage);
    let mut missing = pod("missing", "100m", "64Mi");
    missing.claims.push(PodClaim {
        volume: "v".into(),
        claim: "nowhere".into(),
    });
    // Bound: the volume decides, whatever the class says.
    let mut bound_ebs = pod("bound-ebs", "100m", "64Mi");
    with_claims(&mut bound_ebs, &["e"], "efs", &mut storage);
    let mut bound_nfs = pod("bound-nfs", "100m", "64Mi");
    with_claims(&mut bound_nfs, &["f"], "gp3", &mut storage);
    for (claim, volume, driver) in [("e", "pv-e", Some(EBS_CSI_DRIVER)), ("f", "pv-f", None)] {
        let c = storage.claims.iter_mut().find(|c| c.name == claim).unwrap();
        c.volume_name = Some(volume.into());
        c.bind_completed = true;
        storage.volumes.push(PersistentVolume {
            name: volume.into(),
            csi_driver: driver.map(str::to_string),
            ..PersistentVolume::default()
        });
    }
    let mut pods = vec![two, in_tree, efs, missing, bound_ebs, bound_nfs];
    count_ebs_claims(&mut pods, &storage);
    let got: Vec<(String, i64)> = pods
        .iter()
        .map(|p| (p.name.clone(), requested(p)))
        .collect();
    let want: Vec<(String, i64)> = [
        ("two", 2),
        ("in-tree", 1),
        ("efs", 0),
        ("missing", 0),
        ("bound-ebs", 1),
        ("bound-nfs", 0),
    ]
    .into_iter()
    .map(|(n, c)| (n.to_string(), c))
    .collect();
    assert_eq!(got, want);
}

#[test]
fn a_claim_several_pods_use_is_counted_once_where_it_is_attached() {
    let mut storage = Storage {
        classes: classes(),
        ..Storage::default()
    };
    // Pending pods sharing a claim: the first by name counts it.
    let mut p1 = pod("p1", "100m", "64Mi");
    with_claims(&mut p1, &["shared"], "gp3", &mut storage);
    let mut p0 = pod("p0", "100m", "64Mi");
    with_claims(&mut p0, &["shared", "own"], "gp3", &mut storage);
    // A claim a running pod uses counts on its node, not for the pending pod.
    let mut running = pod("z-running", "100m", "64Mi");
    running.node_name = Some("n1".into());
    with_claims(&mut running, &["attached"], "gp3", &mut storage);
    let mut waiting = pod("a-waiting", "100m", "64Mi");
    with_claims(&mut waiting, &["attached"], "gp3", &mut storage);
    let mut pods = vec![p1, p0, running, waiting];
    count_ebs_claims(&mut pods, &storage);
    let got: Vec<i64> = pods.iter().map(requested).collect();
    assert_eq!(got, [0, 2, 1, 0]);
    // Counting again gives the same.
    count_ebs_claims(&mut pods, &storage);
    assert_eq!(pods.iter().map(requested).collect::<Vec<_>>(), got);
}
