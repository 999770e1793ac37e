//! `kubectl scale nodepool` against the fake API server: the NodePool's `/scale`
//! subresource (`autoscaling/v1` Scale over `.spec.replicas` and `.status.nodes`) with
//! kube-rs's own scale calls, as a real API server serves it for Karpenter's CRD.

use std::sync::Arc;

use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use nodewright_engine::ports::{Cluster, ObjectKind, StatusUpdate};
use nodewright_kube::fake::FakeApiServer;
use nodewright_kube::{ApiRate, KubeCluster, StaticToken};
use serde_json::{Value, json};

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

fn node_class() -> Value {
    json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "role": "KarpenterNodeRole-demo",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}]
        }
    })
}

async fn pools_api(server: &FakeApiServer) -> Api<DynamicObject> {
    let url = server.url().parse().expect("a URL");
    let client = kube::Client::try_from(kube::Config::new(url)).expect("a client for the fake");
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("karpenter.sh", "v1", "NodePool"),
        "nodepools",
    );
    Api::all_with(client, &resource)
}

#[tokio::test]
async fn kubectl_scale_nodepool_reads_replicas_and_nodes_and_writes_spec_replicas() {
    let server = FakeApiServer::start().await.expect("the fake starts");
    server.put(node_class());
    server.put(node_pool("fixed", Some(3)));
    let cluster = KubeCluster::from_endpoint(
        &server.url(),
        None,
        Arc::new(StaticToken("test-token".into())),
        ApiRate::default(),
    )
    .expect("a client");
    // nodewright publishes the pool's node count: the scale's status reads it.
    let mut update = StatusUpdate::default();
    update.fields.insert("nodes".into(), json!(3));
    cluster
        .update_status(ObjectKind::NodePool, "fixed", &update, 1_700_000_000)
        .await
        .expect("status written");

    let api = pools_api(&server).await;
    let scale = api.get_scale("fixed").await.expect("GET /scale");
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(3));
    assert_eq!(scale.status.map(|s| s.replicas), Some(3));

    // What `kubectl scale nodepool fixed --replicas=5` sends: a merge patch of the Scale.
    let patched = api
        .patch_scale(
            "fixed",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 5}})),
        )
        .await
        .expect("PATCH /scale");
    assert_eq!(patched.spec.and_then(|s| s.replicas), Some(5));
    let stored = server.get("NodePool", None, "fixed").expect("stored");
    assert_eq!(stored["spec"]["replicas"], 5);
    assert_eq!(stored["status"]["nodes"], 3, "the status is left alone");
    let state = cluster.state().await.expect("read");
    let pool = state
        .node_pools
        .iter()
        .find(|p| p.name == "fixed")
        .expect("valid");
    assert_eq!(pool.replicas, Some(5), "nodewright reads the new replicas");

    // A replace of the Scale, with a stale resourceVersion refused.
    let mut scale = api.get_scale("fixed").await.expect("GET /scale");
    scale.spec = Some(k8s_openapi::api::autoscaling::v1::ScaleSpec { replicas: Some(2) });
    api.replace_scale("fixed", &PostParams::default(), &scale)
        .await
        .expect("PUT /scale");
    assert_eq!(
        server.get("NodePool", None, "fixed").unwrap()["spec"]["replicas"],
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

#[tokio::test]
async fn the_scale_of_a_dynamic_nodepool_cannot_set_replicas_nor_go_negative() {
    let server = FakeApiServer::start().await.expect("the fake starts");
    server.put(node_pool("dynamic", None));
    server.put(node_pool("fixed", Some(1)));
    let api = pools_api(&server).await;
    let scale = api.get_scale("dynamic").await.expect("GET /scale");
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(0));

    let refused = api
        .patch_scale(
            "dynamic",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .expect_err("static and dynamic do not change into each other");
    match refused {
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
        server.get("NodePool", None, "dynamic").unwrap()["spec"]
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
