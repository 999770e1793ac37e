//! What default topology spread constraints deduce their selectors from, read through
//! the real API server: Services and the ReplicaSets, StatefulSets and
//! ReplicationControllers, kept as their selectors, only when asked for.

use std::time::Duration;

use serde_json::json;

use nodewright_engine::ports::Cluster;

use super::{api_server, eventually};

fn template(app: &str) -> serde_json::Value {
    json!({"metadata": {"labels": {"app": app}},
        "spec": {"containers": [{"name": "c", "image": "pause"}]}})
}

#[tokio::test]
async fn services_and_controllers_are_read_only_with_default_spread_and_kept_as_their_selectors() {
    let t = api_server().await;
    t.cp.put(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}))
        .await;
    t.cp.put(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web-abc", "namespace": "default"},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web"}}, "template": template("web")}}))
        .await;
    t.cp.put(json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": "team-a"},
        "spec": {"replicas": 0, "serviceName": "db",
            "selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["db"]}]},
            "template": template("db")}}))
        .await;
    t.cp.put(json!({"apiVersion": "v1", "kind": "ReplicationController",
        "metadata": {"name": "legacy", "namespace": "default"},
        "spec": {"replicas": 0, "selector": {"app": "legacy"}, "template": template("legacy")}}))
        .await;

    let plain = t.cluster.state().await.expect("state");
    assert!(plain.services.is_empty() && plain.controllers.is_empty());

    let spread = t.another_process().with_default_spread(true);
    let state = spread.state().await.expect("state with default spread");
    let web = state
        .services
        .iter()
        .find(|s| s.name == "web")
        .unwrap_or_else(|| panic!("{:#?}", state.services));
    assert_eq!(web.namespace, "default");
    assert_eq!(web.selector.as_ref().unwrap()["app"], "web");
    let mut controllers: Vec<(String, String, String)> = state
        .controllers
        .iter()
        .map(|c| (c.kind.clone(), c.namespace.clone(), c.name.clone()))
        .collect();
    controllers.sort();
    assert_eq!(
        controllers,
        [
            ("ReplicaSet".into(), "default".into(), "web-abc".into()),
            (
                "ReplicationController".into(),
                "default".into(),
                "legacy".into()
            ),
            ("StatefulSet".into(), "team-a".into(), "db".into()),
        ]
    );
    let rc = state
        .controllers
        .iter()
        .find(|c| c.name == "legacy")
        .unwrap();
    assert_eq!(rc.selector.as_ref().unwrap().match_labels["app"], "legacy");
    let db = state.controllers.iter().find(|c| c.name == "db").unwrap();
    assert_eq!(
        db.selector.as_ref().unwrap().match_expressions[0].values,
        ["db"]
    );

    // Later changes arrive through the watch.
    t.cp.put(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "api", "namespace": "team-a"},
        "spec": {"selector": {"app": "api"}, "ports": [{"port": 80}]}}))
        .await;
    eventually(
        "the new Service is seen",
        Duration::from_secs(10),
        || async {
            spread
                .state()
                .await
                .is_ok_and(|s| s.services.iter().any(|s| s.name == "api"))
        },
    )
    .await;
}
