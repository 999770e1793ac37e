//! `kubectl scale nodepool`: Karpenter's NodePool CRD has a scale subresource
//! (`autoscaling/v1` Scale over `.spec.replicas` and `.status.nodes`), served by the
//! API server itself. A static pool's replicas set that way are what nodewright reads,
//! and the node count nodewright publishes in `status.nodes` is what the Scale reports.

use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use nodewright_engine::ports::{Cluster, ObjectKind, StatusUpdate};
use serde_json::{Value, json};

use super::{Setup, T0, api_server, default_node_class, kubectl};

fn node_pool(name: &str, replicas: Option<i64>) -> Value {
    let mut pool = json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {"template": {"spec": {
            "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
        }}}
    });
    if let Some(n) = replicas {
        pool["spec"]["replicas"] = json!(n);
    }
    pool
}

/// NodePools as cluster-admin (a person with kubectl, not nodewright).
fn pools_api(t: &Setup) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("karpenter.sh", "v1", "NodePool"),
        "nodepools",
    );
    Api::all_with(t.cp.admin().clone(), &resource)
}

/// What nodewright reads of the pool's replicas.
async fn replicas_read(t: &Setup, name: &str) -> Option<u32> {
    let state = t.cluster.state().await.expect("read");
    state
        .node_pools
        .iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("{name} is not a valid pool: {:#?}", state.invalid))
        .replicas
}

#[tokio::test]
async fn kubectl_scale_nodepool_reaches_the_scale_subresource_and_nodewright_reads_it() {
    let t = api_server().await;
    t.cp.put(default_node_class()).await;
    t.cp.put(node_pool("fixed", Some(3))).await;
    let mut update = StatusUpdate::default();
    update.fields.insert("nodes".into(), json!(3));
    t.cluster
        .update_status(ObjectKind::NodePool, "fixed", &update, T0)
        .await
        .expect("status written");
    assert_eq!(replicas_read(&t, "fixed").await, Some(3));

    let out = kubectl(&t.cp, &["scale", "nodepool", "fixed", "--replicas=5"]);
    assert!(out.contains("scaled"), "{out}");

    let stored = t.cp.get("NodePool", None, "fixed").await.expect("stored");
    assert_eq!(stored["spec"]["replicas"], 5);
    assert_eq!(stored["status"]["nodes"], 3, "the status is left alone");
    super::eventually(
        "nodewright reads the new replicas",
        std::time::Duration::from_secs(30),
        || async { replicas_read(&t, "fixed").await == Some(5) },
    )
    .await;
    // The Scale reports nodewright's node count as its status.
    let scale = pools_api(&t).get_scale("fixed").await.expect("GET /scale");
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(5));
    assert_eq!(scale.status.map(|s| s.replicas), Some(3));
}

#[tokio::test]
async fn the_scale_subresource_reads_replicas_and_nodes_and_writes_spec_replicas() {
    let t = api_server().await;
    t.cp.put(default_node_class()).await;
    t.cp.put(node_pool("fixed", Some(3))).await;
    // nodewright publishes the pool's node count: the scale's status reads it.
    let mut update = StatusUpdate::default();
    update.fields.insert("nodes".into(), json!(3));
    t.cluster
        .update_status(ObjectKind::NodePool, "fixed", &update, T0)
        .await
        .expect("status written");

    let api = pools_api(&t);
    let scale = api.get_scale("fixed").await.expect("GET /scale");
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(3));
    assert_eq!(scale.status.map(|s| s.replicas), Some(3));

    // A merge patch of the Scale.
    let patched = api
        .patch_scale(
            "fixed",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 5}})),
        )
        .await
        .expect("PATCH /scale");
    assert_eq!(patched.spec.and_then(|s| s.replicas), Some(5));
    let stored = t.cp.get("NodePool", None, "fixed").await.expect("stored");
    assert_eq!(stored["spec"]["replicas"], 5);
    assert_eq!(stored["status"]["nodes"], 3, "the status is left alone");

    // A replace of the Scale, with a stale resourceVersion refused.
    let mut scale = api.get_scale("fixed").await.expect("GET /scale");
    scale.spec = Some(k8s_openapi::api::autoscaling::v1::ScaleSpec { replicas: Some(2) });
    api.replace_scale("fixed", &PostParams::default(), &scale)
        .await
        .expect("PUT /scale");
    assert_eq!(
        t.cp.get("NodePool", None, "fixed").await.unwrap()["spec"]["replicas"],
        2
    );
    let stale = api
        .replace_scale("fixed", &PostParams::default(), &scale)
        .await
        .expect_err("stale resourceVersion");
    assert!(
        matches!(stale, kube::Error::Api(ref e) if e.code == 409),
        "{stale:?}"
    );
}

/// A dynamic pool (no `spec.replicas`) has no Scale — kube-apiserver answers 500 for
/// a CRD scale whose replicas path is absent — and does not become static, by its
/// Scale or its spec (the CRD's transition rule).
#[tokio::test]
async fn a_dynamic_nodepool_has_no_scale_and_a_static_one_cannot_go_negative() {
    let t = api_server().await;
    t.cp.put(node_pool("dynamic", None)).await;
    t.cp.put(node_pool("fixed", Some(1))).await;
    let api = pools_api(&t);
    let no_scale = api
        .get_scale("dynamic")
        .await
        .expect_err("no replicas to scale");
    assert!(
        matches!(no_scale, kube::Error::Api(ref e) if e.code == 500),
        "{no_scale:?}"
    );
    let refused = api
        .patch_scale(
            "dynamic",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .expect_err("a dynamic pool is not scaled");
    assert!(matches!(refused, kube::Error::Api(_)), "{refused:?}");
    let transition = api
        .patch(
            "dynamic",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .expect_err("static and dynamic do not change into each other");
    match transition {
        kube::Error::Api(e) => {
            assert_eq!(e.code, 422);
            assert!(
                e.message.contains("Cannot transition NodePool"),
                "{}",
                e.message
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(
        t.cp.get("NodePool", None, "dynamic").await.unwrap()["spec"]
            .get("replicas")
            .is_none()
    );

    let negative = api
        .patch_scale(
            "fixed",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": -1}})),
        )
        .await
        .expect_err("replicas is at least 0");
    assert!(
        matches!(negative, kube::Error::Api(ref e) if e.code == 422),
        "{negative:?}"
    );
    let missing = api.get_scale("ghost").await.expect_err("no such pool");
    assert!(
        matches!(missing, kube::Error::Api(ref e) if e.code == 404),
        "{missing:?}"
    );
}
