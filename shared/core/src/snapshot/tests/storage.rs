//! Claims, volumes and storage classes, applied to the pods that use them.

use serde_json::{Value, json};

use super::*;
use crate::api::model::{NodeRequirement, Operator};

fn pvc_json(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": "default",
            "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
        "spec": spec})
}

fn zonal_pv_json(name: &str, zone: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
        "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"],
            "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]}]}]}}}})
}

fn zone_term(zones: &[&str]) -> Vec<NodeRequirement> {
    vec![NodeRequirement {
        key: "topology.kubernetes.io/zone".into(),
        operator: Operator::In,
        values: zones.iter().map(|z| z.to_string()).collect(),
        min_values: None,
    }]
}

#[test]
fn claims_volumes_and_storage_classes_limit_the_pods_that_use_them() {
    let items = vec![
        pod_json(
            "default",
            "db-0",
            json!({"volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}}]}),
        ),
        pod_json(
            "default",
            "job-1",
            json!({"volumes": [
            {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]}),
        ),
        pvc_json(
            "data-db-0",
            json!({"volumeName": "pv-1", "storageClassName": "gp3", "accessModes": ["ReadWriteOnce"]}),
        ),
        pvc_json(
            "job-1-scratch",
            json!({"storageClassName": "late", "accessModes": ["ReadWriteOnce"]}),
        ),
        zonal_pv_json("pv-1", "us-east-1b"),
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": "late"}, "provisioner": "ebs.csi.aws.com",
            "volumeBindingMode": "WaitForFirstConsumer",
            "allowedTopologies": [{"matchLabelExpressions": [
                {"key": "topology.kubernetes.io/zone", "values": ["us-east-1c"]}]}]}),
    ];
    let with = parse_snapshot(&list(items.clone())).unwrap();
    assert_eq!(
        with.pods[0].required_node_terms,
        vec![zone_term(&["us-east-1b"])]
    );
    assert_eq!(
        with.pods[1].required_node_terms,
        vec![zone_term(&["us-east-1c"])]
    );
    assert_eq!(with.pods[1].claims[0].claim, "job-1-scratch");
    // The same without kinds: claims, volumes and classes are told by their shape.
    let without = parse_snapshot(&list(strip_kinds(items))).unwrap();
    assert_eq!(with, without);
}

#[test]
fn a_pod_whose_claim_is_not_in_the_snapshot_is_not_provisionable_and_says_so() {
    let mut item = pod_json(
        "default",
        "db-0",
        json!({"volumes": [
        {"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}}]}),
    );
    item["status"]["conditions"] =
        json!([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]);
    let pod = parse_snapshot(&list(vec![item])).unwrap().pods.remove(0);
    assert_eq!(
        pod.not_provisionable().map(|r| r.to_string()).as_deref(),
        Some(
            "its volume \"data\" uses PersistentVolumeClaim \"default/data-db-0\", which does not exist"
        )
    );
}

#[test]
fn a_volume_with_an_unknown_affinity_operator_is_named() {
    let mut pv = zonal_pv_json("pv-1", "us-east-1a");
    pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["operator"] =
        json!("Near");
    let err = parse_snapshot(&list(vec![pv])).unwrap_err().to_string();
    assert_eq!(
        err,
        "PersistentVolume \"pv-1\": spec.nodeAffinity.required.nodeSelectorTerms[0].matchExpressions[0].operator: unknown operator \"Near\" (expected one of In, NotIn, Exists, DoesNotExist, Gt, Lt)"
    );
}

#[test]
fn two_storage_classes_with_one_name_are_rejected() {
    let sc = json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "gp3"}, "provisioner": "ebs.csi.aws.com"});
    let err = parse_snapshot(&list(vec![sc.clone(), sc])).unwrap_err();
    assert!(
        matches!(&err, SnapshotError::Duplicate { index: 1, object } if object == "StorageClass \"gp3\""),
        "{err:?}"
    );
}

#[test]
fn a_csi_nodes_ebs_count_is_its_nodes_room_and_a_pods_ebs_claims_its_request() {
    let ebs = "attachable-volumes-csi-ebs.csi.aws.com";
    let mut counted = node_json("counted", "True");
    counted["metadata"]["labels"]["node.kubernetes.io/instance-type"] = "m5.xlarge".into();
    let mut starting = node_json("starting", "True");
    starting["metadata"]["labels"]["node.kubernetes.io/instance-type"] = "m5.xlarge".into();
    let items = vec![
        counted,
        starting,
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
            "metadata": {"name": "counted"},
            "spec": {"drivers": [
                {"name": "efs.csi.aws.com", "nodeID": "i-1"},
                {"name": "ebs.csi.aws.com", "nodeID": "i-1", "allocatable": {"count": 12}}]}}),
        pod_json(
            "default",
            "db-0",
            json!({"volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}}]}),
        ),
        pvc_json(
            "data-db-0",
            json!({"volumeName": "pv-1", "storageClassName": "gp3", "accessModes": ["ReadWriteOnce"]}),
        ),
        zonal_pv_json("pv-1", "us-east-1b"),
    ];
    let with = parse_snapshot(&list(items.clone())).unwrap();
    let room: Vec<i64> = with
        .nodes
        .iter()
        .map(|n| n.allocatable.get_milli(ebs) / 1000)
        .collect();
    assert_eq!(
        room,
        [12, 25],
        "the CSINode's count; else the type's estimate"
    );
    assert_eq!(with.pods[0].requests.get_milli(ebs), 1000);
    // Without kinds, a CSINode is told by its drivers.
    let without = parse_snapshot(&list(strip_kinds(items))).unwrap();
    assert_eq!(with, without);
}
