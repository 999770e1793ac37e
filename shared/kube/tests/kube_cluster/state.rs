//! What a tick reads (`state`, `pods`): Karpenter's objects validated one by one (a bad
//! one reported, the rest used), the built-in kinds page by page, a missing CRD and an
//! object nodewright cannot convert reported rather than fatal, volume topology.

use nodewright_engine::ports::{Cluster, Invalidity, ObjectKind};
use serde_json::json;

use super::{
    EXAMPLES, api_server, daemonset, default_node_class, example_objects, node,
    node_class_with_a_bad_alias, node_pool, node_pool_with_a_bad_schedule, pdb, pod,
};

#[tokio::test]
async fn state_reads_the_karpenter_example_node_pools_and_node_classes() {
    let t = api_server().await;
    for (_, text) in EXAMPLES {
        for object in example_objects(text) {
            t.cp.put(object).await;
        }
    }

    let state = t.cluster.state().await.expect("state");

    assert_eq!(state.invalid, Vec::<String>::new());
    let mut pools: Vec<&str> = state.node_pools.iter().map(|p| p.name.as_str()).collect();
    pools.sort();
    // min-values-family.yaml and spot.yaml both name their NodePool "spot": one object.
    assert_eq!(
        pools,
        ["amd64", "arm64", "general-purpose", "limitcpu100", "spot"]
    );
    let classes: Vec<&str> = state.node_classes.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(classes, ["default"]);
}

#[tokio::test]
async fn state_reads_nodes_pods_daemonsets_and_pdbs_page_by_page() {
    let t = api_server().await;
    let cluster = t.cluster.clone().with_page_size(2);
    for name in ["node-a", "node-b", "node-c"] {
        t.cp.put(node(name)).await;
    }
    t.cp.put(pod("default", "web-1", "500m")).await;
    t.cp.put(pod("default", "web-2", "500m")).await;
    t.cp.put(pod("team-a", "batch-1", "2")).await;
    t.cp.put(pod("team-b", "batch-2", "1")).await;
    t.cp.put(pod("team-b", "batch-3", "1")).await;
    t.cp.put(daemonset("kube-system", "aws-node")).await;
    t.cp.put(pdb("default", "web")).await;

    let state = cluster.state().await.expect("state");

    assert_eq!(state.invalid, Vec::<String>::new());
    let nodes: Vec<&str> = state.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(nodes, ["node-a", "node-b", "node-c"]);
    assert!(state.nodes[0].ready);
    assert_eq!(
        state.nodes[0].provider_id.as_deref(),
        Some("aws:///us-east-1a/i-node-a")
    );
    assert_eq!(state.nodes[0].taints.len(), 2);
    let pods: Vec<String> = state
        .pods
        .iter()
        .map(|p| format!("{}/{}", p.namespace, p.name))
        .collect();
    assert_eq!(
        pods,
        [
            "default/web-1",
            "default/web-2",
            "team-a/batch-1",
            "team-b/batch-2",
            "team-b/batch-3"
        ]
    );
    assert_eq!(state.daemonsets.len(), 1);
    assert_eq!(state.daemonsets[0].name, "aws-node");
    assert_eq!(state.pdbs.len(), 1);
    assert_eq!(state.pdbs[0].namespace, "default");

    let pod_pages: Vec<String> = t
        .proxy
        .requests()
        .into_iter()
        .filter(|r| r.path == "/api/v1/pods" && !r.watch)
        .map(|r| r.query)
        .collect();
    assert_eq!(pod_pages.len(), 3, "5 pods in pages of 2: {pod_pages:?}");
    assert!(pod_pages.iter().all(|q| q.contains("limit=2")));
    assert!(pod_pages[1..].iter().all(|q| q.contains("continue=")));
}

#[tokio::test]
async fn an_invalid_node_pool_is_reported_and_the_valid_ones_are_still_returned() {
    let t = api_server().await;
    t.cp.put(default_node_class()).await;
    t.cp.put(node_pool("good")).await;
    t.cp.put(node_pool_with_a_bad_schedule("broken")).await;
    let mut orphan = node_pool("orphan");
    orphan["spec"]["template"]["spec"]["nodeClassRef"]["name"] = "missing".into();
    t.cp.put(orphan).await;

    let state = t.cluster.state().await.expect("state");

    let pools: Vec<&str> = state.node_pools.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(pools, ["good"]);
    assert_eq!(state.node_classes.len(), 1);
    assert_eq!(state.invalid.len(), 2, "{:#?}", state.invalid);
    assert!(
        state.invalid[0].starts_with("NodePool \"broken\": spec.disruption.budgets[0].schedule:"),
        "{}",
        state.invalid[0]
    );
    assert!(
        state.invalid[1].starts_with("NodePool \"orphan\":"),
        "{}",
        state.invalid[1]
    );
}

#[tokio::test]
async fn an_invalid_node_class_is_reported_and_its_node_pools_are_not_returned() {
    let t = api_server().await;
    t.cp.put(node_class_with_a_bad_alias("default")).await;
    t.cp.put(node_pool("uses-broken-class")).await;

    let state = t.cluster.state().await.expect("state");

    assert!(state.node_pools.is_empty());
    assert!(state.node_classes.is_empty());
    assert!(
        state
            .invalid
            .iter()
            .any(|p| p.starts_with("EC2NodeClass \"default\": spec.amiSelectorTerms")),
        "{:#?}",
        state.invalid
    );
    assert!(
        state
            .invalid
            .iter()
            .any(|p| p.starts_with("NodePool \"uses-broken-class\":")),
        "{:#?}",
        state.invalid
    );
}

#[tokio::test]
async fn a_missing_crd_is_reported_and_the_rest_of_the_state_is_read() {
    let t = api_server().await;
    t.cp.uninstall("nodepools.karpenter.sh").await;
    t.cp.put(default_node_class()).await;
    t.cp.put(node("node-a")).await;

    let state = t.cluster.state().await.expect("state");

    assert!(state.node_pools.is_empty());
    assert_eq!(state.node_classes.len(), 1);
    assert_eq!(state.nodes.len(), 1);
    assert_eq!(state.invalid.len(), 1, "{:#?}", state.invalid);
    assert!(
        state.invalid[0].contains("nodepools.karpenter.sh"),
        "{}",
        state.invalid[0]
    );
    assert!(
        state.invalid[0].contains("not installed"),
        "{}",
        state.invalid[0]
    );
}

#[tokio::test]
async fn an_object_that_cannot_be_converted_is_reported_and_skipped() {
    let t = api_server().await;
    t.cp.put(pod("default", "good", "250m")).await;
    // The API server takes any label value after Gt; nodewright needs an integer it
    // can compare (64 bits).
    let mut bad = pod("default", "bad", "250m");
    bad["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "example.com/generation", "operator": "Gt", "values": ["99999999999999999999"]},
        ]}],
    }}});
    t.cp.put(bad).await;

    let state = t.cluster.state().await.expect("state");

    let pods: Vec<&str> = state.pods.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(pods, ["good"]);
    assert_eq!(state.invalid.len(), 1, "{:#?}", state.invalid);
    assert!(
        state.invalid[0].contains("default/bad"),
        "{}",
        state.invalid[0]
    );

    let pods = t.cluster.pods().await.expect("pods");
    assert_eq!(pods.len(), 1, "pods() skips it too");
}

#[tokio::test]
async fn pods_lists_pods_in_every_namespace() {
    let t = api_server().await;
    t.cp.put(pod("default", "web-1", "500m")).await;
    t.cp.put(pod("kube-system", "coredns", "100m")).await;

    let pods = t.cluster.pods().await.expect("pods");

    let names: Vec<String> = pods
        .iter()
        .map(|p| format!("{}/{}", p.namespace, p.name))
        .collect();
    assert_eq!(names, ["default/web-1", "kube-system/coredns"]);
    assert_eq!(t.proxy.count_lists("/api/v1/pods"), 1);
}

#[tokio::test]
async fn invalid_objects_are_named_by_kind_and_say_how_a_pool_is_wrong() {
    let t = api_server().await;
    t.cp.put(node_class_with_a_bad_alias("broken")).await;
    t.cp.put(default_node_class()).await;
    t.cp.put(node_pool("good")).await;
    t.cp.put(node_pool_with_a_bad_schedule("bad-spec")).await;
    let mut orphan = node_pool("orphan");
    orphan["spec"]["template"]["spec"]["nodeClassRef"]["name"] = "missing".into();
    t.cp.put(orphan).await;
    let mut uses_broken = node_pool("uses-broken");
    uses_broken["spec"]["template"]["spec"]["nodeClassRef"]["name"] = "broken".into();
    t.cp.put(uses_broken).await;

    let state = t.cluster.state().await.expect("state");

    let by_name = |name: &str| {
        state
            .invalid_objects
            .iter()
            .find(|o| o.name == name)
            .unwrap_or_else(|| panic!("{name} not reported: {:#?}", state.invalid_objects))
    };
    assert_eq!(
        state.invalid_objects.len(),
        4,
        "{:#?}",
        state.invalid_objects
    );
    let class = by_name("broken");
    assert_eq!(class.kind, ObjectKind::Ec2NodeClass);
    assert!(
        matches!(&class.why, Invalidity::Spec { message } if message.starts_with("spec.amiSelectorTerms")),
        "{class:?}"
    );
    let spec = by_name("bad-spec");
    assert_eq!(spec.kind, ObjectKind::NodePool);
    assert!(
        matches!(&spec.why, Invalidity::Spec { message } if message.starts_with("spec.disruption.budgets[0].schedule: ")),
        "{spec:?}"
    );
    assert_eq!(
        by_name("orphan").why,
        Invalidity::NodeClassNotFound {
            node_class: "missing".into()
        }
    );
    assert_eq!(
        by_name("uses-broken").why,
        Invalidity::NodeClassInvalid {
            node_class: "broken".into()
        }
    );
    assert_eq!(state.invalid.len(), 4, "the messages are still there too");
}

#[tokio::test]
async fn state_limits_a_pod_bound_to_a_zonal_volume_to_its_zone_and_names_a_missing_claim() {
    let t = api_server().await;
    let mut db = pod("default", "db-0", "1");
    db["spec"]["volumes"] =
        json!([{"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}}]);
    db["status"]["conditions"] =
        json!([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]);
    t.cp.put(db).await;
    let mut orphan = pod("default", "orphan-0", "1");
    orphan["spec"]["volumes"] =
        json!([{"name": "data", "persistentVolumeClaim": {"claimName": "never-created"}}]);
    t.cp.put(orphan).await;
    t.cp.put(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data-db-0", "namespace": "default",
            "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "gp3", "volumeName": "pv-1",
            "resources": {"requests": {"storage": "20Gi"}}},
    }))
    .await;
    t.cp.put(json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": "pv-1"},
        "spec": {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "20Gi"},
            "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-0123456789abcdef0"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1b"]}]}]}}},
    }))
    .await;
    t.cp.put(json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "gp3"}, "provisioner": "ebs.csi.aws.com",
        "volumeBindingMode": "WaitForFirstConsumer",
    }))
    .await;

    let state = t.cluster.state().await.expect("state");

    assert_eq!(state.invalid, Vec::<String>::new());
    for path in [
        "/api/v1/persistentvolumeclaims",
        "/api/v1/persistentvolumes",
        "/apis/storage.k8s.io/v1/storageclasses",
    ] {
        assert_eq!(t.proxy.count_lists(path), 1, "{path} listed once");
    }
    let db = state.pods.iter().find(|p| p.name == "db-0").unwrap();
    let zones: Vec<(&str, &[String])> = db
        .required_node_terms
        .iter()
        .flatten()
        .map(|r| (r.key.as_str(), r.values.as_slice()))
        .collect();
    assert_eq!(
        zones,
        [(
            "topology.kubernetes.io/zone",
            &["us-east-1b".to_string()][..]
        )]
    );
    assert_eq!(db.not_provisionable(), None);
    let orphan = state.pods.iter().find(|p| p.name == "orphan-0").unwrap();
    assert_eq!(
        orphan.not_provisionable().map(|r| r.to_string()).as_deref(),
        Some(
            "its volume \"data\" uses PersistentVolumeClaim \"default/never-created\", which does not exist"
        )
    );
}

/// How many EBS volumes a node attaches comes from what the EBS CSI driver published on
/// its CSINode (a real API server's objects), or the instance type's estimate before it
/// has; a pod asks for one attachment per distinct EBS claim, whichever way the claim
/// names the driver.
#[tokio::test]
async fn state_reads_a_nodes_ebs_room_from_its_csi_node_and_a_pods_ebs_claims() {
    let t = api_server().await;
    let ebs_room = |count: Option<i64>| match count {
        Some(n) => json!({"name": "ebs.csi.aws.com", "nodeID": "i-0", "allocatable": {"count": n}}),
        None => json!({"name": "ebs.csi.aws.com", "nodeID": "i-0"}),
    };
    for (name, driver) in [
        ("published", Some(ebs_room(Some(10)))),
        ("unbounded", Some(ebs_room(None))),
        ("starting", None),
    ] {
        let mut n = node(name);
        n["metadata"]["labels"]["node.kubernetes.io/instance-type"] = "m5.xlarge".into();
        t.cp.put(n).await;
        if let Some(driver) = driver {
            t.cp.put(json!({
                "apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
                "metadata": {"name": name},
                "spec": {"drivers": [driver]},
            }))
            .await;
        }
    }
    let mut db = pod("default", "db-0", "1");
    db["spec"]["volumes"] = json!([
        {"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}},
        {"name": "logs", "persistentVolumeClaim": {"claimName": "logs-db-0"}},
        {"name": "shared", "persistentVolumeClaim": {"claimName": "shared-nfs"}},
    ]);
    t.cp.put(db).await;
    let claim = |name: &str, class: &str, volume: Option<&str>| {
        let mut c = json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                "resources": {"requests": {"storage": "20Gi"}}},
        });
        if let Some(v) = volume {
            c["spec"]["volumeName"] = v.into();
            c["metadata"]["annotations"] = json!({"pv.kubernetes.io/bind-completed": "yes"});
        }
        c
    };
    t.cp.put(claim("data-db-0", "gp3", Some("pv-data"))).await;
    t.cp.put(claim("logs-db-0", "gp2", None)).await;
    t.cp.put(claim("shared-nfs", "", Some("pv-nfs"))).await;
    t.cp.put(json!({
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "20Gi"},
            "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-0123456789abcdef0"}},
    }))
    .await;
    t.cp.put(json!({
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-nfs"},
        "spec": {"accessModes": ["ReadWriteMany"], "capacity": {"storage": "20Gi"},
            "nfs": {"server": "10.0.0.2", "path": "/exports"}},
    }))
    .await;
    for (name, provisioner) in [("gp3", "ebs.csi.aws.com"), ("gp2", "kubernetes.io/aws-ebs")] {
        t.cp.put(json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": name}, "provisioner": provisioner,
            "volumeBindingMode": "WaitForFirstConsumer",
        }))
        .await;
    }

    let state = t.cluster.state().await.expect("state");

    assert_eq!(state.invalid, Vec::<String>::new());
    assert_eq!(
        t.proxy.count_lists("/apis/storage.k8s.io/v1/csinodes"),
        1,
        "listed once"
    );
    let ebs = "attachable-volumes-csi-ebs.csi.aws.com";
    let mut room: Vec<(&str, i64)> = state
        .nodes
        .iter()
        .map(|n| (n.name.as_str(), n.allocatable.get_milli(ebs) / 1000))
        .collect();
    room.sort();
    assert_eq!(
        room,
        [
            ("published", 10),
            ("starting", 25),
            (
                "unbounded",
                nodewright_core::volume_limits::UNLIMITED_ATTACHMENTS
            ),
        ]
    );
    let db = state.pods.iter().find(|p| p.name == "db-0").unwrap();
    assert_eq!(
        db.requests.get_milli(ebs),
        2000,
        "the bound EBS volume and the in-tree class's claim; not the NFS one"
    );
}
