//! The List: what is accepted at the top level, kinds told and inferred, items that
//! cannot be read, input that is not a snapshot at all, and the CLI's example.

use serde_json::{Value, json};

use super::*;
use crate::cluster::ClusterSnapshot;
use crate::snapshot::parse_snapshot_reader;

#[test]
fn a_kubectl_list_yields_every_kind_in_order() {
    let s = parse_snapshot(&list(mixed_items())).unwrap();
    assert_eq!(s.nodes.len(), 1);
    assert_eq!(s.pods.len(), 1);
    assert_eq!(s.daemonsets.len(), 1);
    assert_eq!(s.pdbs.len(), 1);
    assert_eq!(s.pods[0].key(), "default/web-1");
}

#[test]
fn two_objects_of_one_kind_with_one_name_are_rejected() {
    let twice = list(vec![
        pod_json("default", "web-1", json!({})),
        pod_json("default", "web-1", json!({})),
    ]);
    let err = parse_snapshot(&twice).unwrap_err();
    assert!(
        matches!(err, SnapshotError::Duplicate { index: 1, .. }),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .starts_with("items[1]: pod \"default/web-1\" appears more than once"),
        "{err}"
    );
    // Same name in another namespace is another pod.
    let other_ns = list(vec![
        pod_json("default", "web-1", json!({})),
        pod_json("batch", "web-1", json!({})),
    ]);
    assert_eq!(parse_snapshot(&other_ns).unwrap().pods.len(), 2);
}

#[test]
fn items_without_kind_are_recognised_by_their_shape() {
    let with = parse_snapshot(&list(mixed_items())).unwrap();
    let without = parse_snapshot(&list(strip_kinds(mixed_items()))).unwrap();
    assert_eq!(with, without);
}

#[test]
fn a_typed_list_gives_its_kind_to_items_that_have_none() {
    let items = strip_kinds(vec![pod_json("default", "web-1", json!({}))]);
    let text =
        json!({"apiVersion": "v1", "kind": "PodList", "items": items, "metadata": {}}).to_string();
    let s = parse_snapshot(&text).unwrap();
    assert_eq!(s.pods.len(), 1);
}

/// `{"kind": ..., "items": [...]}` with `kind` written before or after `items` (the
/// API server writes it first, kubectl after).
fn list_text(kind: &str, items: &[Value], kind_first: bool) -> String {
    let items: Vec<String> = items.iter().map(Value::to_string).collect();
    let items = items.join(",");
    if kind_first {
        format!(r#"{{"kind":"{kind}","apiVersion":"v1","items":[{items}]}}"#)
    } else {
        format!(r#"{{"apiVersion":"v1","items":[{items}],"kind":"{kind}"}}"#)
    }
}

#[test]
fn the_lists_kind_before_or_after_its_items_and_text_or_stream_read_the_same() {
    let kinded = mixed_items();
    let kindless = strip_kinds(vec![
        pod_json("default", "web-2", json!({})),
        pod_json("default", "web-3", json!({})),
    ]);
    let mut items = kinded.clone();
    items.extend(kindless.clone());
    let expected = parse_snapshot(&list_text("List", &items, true)).unwrap();
    assert_eq!(expected.pods.len(), 3);
    assert_eq!(
        (
            expected.nodes.len(),
            expected.daemonsets.len(),
            expected.pdbs.len()
        ),
        (1, 1, 1)
    );
    for kind_first in [true, false] {
        let text = list_text("List", &items, kind_first);
        let read = parse_snapshot(&text).unwrap();
        assert_eq!(read.pods, expected.pods, "kind first: {kind_first}");
        assert_eq!(read.nodes, expected.nodes);
        assert_eq!(read.daemonsets, expected.daemonsets);
        let streamed = parse_snapshot_reader(text.as_bytes()).unwrap();
        assert_eq!(streamed.pods, expected.pods, "kind first: {kind_first}");
        assert_eq!(streamed.nodes, expected.nodes);
        // A typed list names the kind of items that have none.
        let typed =
            parse_snapshot_reader(list_text("PodList", &kindless, kind_first).as_bytes()).unwrap();
        assert_eq!(typed.pods.len(), 2);
    }
}

#[test]
fn a_top_level_that_is_not_a_list_wins_over_a_bad_item_read_before_it() {
    let bad = pod_json("default", "web-1", json!({"containers": "not a list"}));
    for kind_first in [true, false] {
        let text = list_text("DeploymentList", std::slice::from_ref(&bad), kind_first);
        let err = parse_snapshot_reader(text.as_bytes()).unwrap_err();
        assert!(matches!(err, SnapshotError::NotAList { .. }), "{err}");
        let text = list_text("List", std::slice::from_ref(&bad), kind_first);
        let err = parse_snapshot_reader(text.as_bytes()).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("items[0] (Pod \"default/web-1\"): spec.containers"),
            "{err}"
        );
        // Broken JSON after the bad item wins over both.
        let broken = format!("{}{{", &text[..text.len() - 1]);
        let err = parse_snapshot_reader(broken.as_bytes()).unwrap_err();
        assert!(matches!(err, SnapshotError::NotJson { .. }), "{err}");
    }
}

#[test]
fn an_item_whose_kind_cannot_be_told_is_an_error_naming_its_index() {
    let items = vec![
        node_json("n1", "True"),
        json!({"metadata": {"name": "mystery"}, "spec": {"foo": 1}}),
    ];
    let err = parse_snapshot(&list(items)).unwrap_err();
    assert!(
        matches!(err, SnapshotError::UnknownItemKind { index: 1, .. }),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .starts_with("items[1]: cannot tell what kind of object this is"),
        "{err}"
    );
}

#[test]
fn other_kinds_are_skipped_and_workloads_are_read_only_with_their_kind() {
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "inflate", "namespace": "default"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "inflate"}},
                 "template": {"metadata": {"labels": {"app": "inflate"}}, "spec": {"containers": []}}},
    });
    let service = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"clusterIP": "10.100.0.1", "ports": [{"port": 80}], "selector": {"app": "web"}},
    });
    let items = vec![deployment, service];
    // A CapacityBuffer's scalableRef may name the Deployment: it is read, with its
    // replicas and its template as a buffer chunk.
    let read = parse_snapshot(&list(items.clone())).unwrap();
    assert_eq!(read.workloads.len(), 1);
    let inflate = &read.workloads[0];
    assert_eq!(
        (
            inflate.kind.as_str(),
            inflate.namespace.as_str(),
            inflate.name.as_str()
        ),
        ("Deployment", "default", "inflate")
    );
    assert_eq!(inflate.replicas, Some(3));
    assert_eq!(
        inflate
            .template
            .as_ref()
            .map(|p| p.labels.get("app").cloned()),
        Ok(Some("inflate".to_string()))
    );
    assert_eq!(
        ClusterSnapshot {
            workloads: Vec::new(),
            services: Vec::new(),
            ..read
        },
        ClusterSnapshot::default()
    );
    assert_eq!(
        parse_snapshot(&list(strip_kinds(items))).unwrap(),
        ClusterSnapshot::default()
    );
}

#[test]
fn text_that_is_not_json_is_a_not_json_error() {
    let err = parse_snapshot("NAME   READY   STATUS\nweb-1  0/1     Pending").unwrap_err();
    assert!(matches!(err, SnapshotError::NotJson { .. }), "{err:?}");
    assert!(std::error::Error::source(&err).is_some());
    assert!(
        err.to_string().starts_with("the snapshot is not JSON: "),
        "{err}"
    );
}

#[test]
fn a_single_pod_is_not_a_list_and_the_error_says_what_it_is() {
    let text = pod_json("default", "web-1", json!({})).to_string();
    let err = parse_snapshot(&text).unwrap_err();
    assert!(matches!(err, SnapshotError::NotAList { .. }), "{err:?}");
    assert!(
        err.to_string()
            .starts_with("the snapshot is a Pod \"default/web-1\", not a List"),
        "{err}"
    );
}

#[test]
fn arrays_lists_of_other_kinds_and_lists_without_items_are_not_lists() {
    let cases = [
        ("[]", "a JSON array"),
        (
            r#"{"apiVersion":"apps/v1","kind":"DeploymentList","items":[]}"#,
            "a DeploymentList",
        ),
        (
            r#"{"apiVersion":"v1","kind":"List"}"#,
            "a List without an items array",
        ),
        (r#"{"items":[]}"#, "a JSON object without kind"),
    ];
    for (text, found) in cases {
        match parse_snapshot(text) {
            Err(SnapshotError::NotAList { found: f }) => assert_eq!(f, found, "{text}"),
            other => panic!("{text}: {other:?}"),
        }
    }
}

#[test]
fn a_list_with_null_items_is_empty() {
    let s = parse_snapshot(r#"{"apiVersion":"v1","kind":"List","items":null}"#).unwrap();
    assert_eq!(s, ClusterSnapshot::default());
}

#[test]
fn an_item_that_does_not_deserialize_names_index_object_and_field() {
    let mut bad = pod_json("default", "web-1", json!({}));
    bad["spec"]["containers"] = json!([{"name": "app", "resources": {"requests": {"cpu": ["1"]}}}]);
    let err = parse_snapshot(&list(vec![node_json("n1", "True"), bad])).unwrap_err();
    let SnapshotError::Item {
        index,
        kind,
        object,
        path,
        ..
    } = &err
    else {
        panic!("{err:?}");
    };
    assert_eq!((*index, *kind), (1, "Pod"));
    assert_eq!(object.as_deref(), Some("default/web-1"));
    assert_eq!(path, "spec.containers[0].resources.requests.cpu");
    assert!(
        err.to_string().starts_with(
            "items[1] (Pod \"default/web-1\"): spec.containers[0].resources.requests.cpu: "
        ),
        "{err}"
    );
}

#[test]
fn an_item_with_the_wrong_api_version_is_an_item_error() {
    let mut pdb = pdb_json("web", "maxUnavailable", json!(1));
    pdb["apiVersion"] = json!("policy/v1beta1");
    let err = parse_snapshot(&list(vec![pdb])).unwrap_err();
    assert!(
        matches!(
            err,
            SnapshotError::Item {
                index: 0,
                kind: "PodDisruptionBudget",
                ..
            }
        ),
        "{err:?}"
    );
}

/// Every leaf replaced by values of other types, and every key removed: the parser
/// returns Ok or Err, never panics (a cheap stand-in for the fuzzer).
#[test]
fn mangled_snapshots_are_errors_never_panics() {
    fn paths(v: &Value, here: String, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                for (k, c) in m {
                    paths(
                        c,
                        format!("{here}/{}", k.replace('~', "~0").replace('/', "~1")),
                        out,
                    );
                }
            }
            Value::Array(a) => {
                for (i, c) in a.iter().enumerate() {
                    paths(c, format!("{here}/{i}"), out);
                }
            }
            _ => {}
        }
        out.push(here);
    }
    let mut doc = json!({"apiVersion": "v1", "kind": "List", "items": mixed_items()});
    doc["items"][1]["spec"]["initContainers"] = json!([{"name": "i", "restartPolicy": "Always",
        "resources": {"requests": {"cpu": "1"}}}]);
    doc["items"][1]["spec"]["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["a"]}]},
         "topologyKey": "kubernetes.io/hostname"}]}});
    let mut all = Vec::new();
    paths(&doc, String::new(), &mut all);
    let replacements = [
        json!(null),
        json!(-1),
        json!(i64::MAX),
        json!(1e300),
        json!(""),
        json!("-5"),
        json!("9999999999999999999Ei"),
        json!("1.5.3Gi"),
        json!([]),
        json!({}),
        json!(true),
    ];
    let mut outcomes = 0;
    for path in &all {
        for r in &replacements {
            let mut d = doc.clone();
            if let Some(slot) = d.pointer_mut(path) {
                *slot = r.clone();
            }
            let _ = parse_snapshot(&d.to_string());
            outcomes += 1;
        }
        if let Some((parent, key)) = path.rsplit_once('/') {
            let mut d = doc.clone();
            if let Some(Value::Object(m)) = d.pointer_mut(parent) {
                m.remove(&key.replace("~1", "/").replace("~0", "~"));
            }
            let _ = parse_snapshot(&d.to_string());
            outcomes += 1;
        }
    }
    assert!(outcomes > 1000, "{outcomes}");
    for text in [
        "",
        "{",
        "null",
        "\"List\"",
        "{\"kind\":\"List\",\"items\":[1,\"a\",null,[]]}",
    ] {
        assert!(parse_snapshot(text).is_err(), "{text}");
    }
}

// --- the example -------------------------------------------------------------------

#[test]
fn the_cli_example_snapshot_parses() {
    let s = parse_snapshot(include_str!("../../../../../cli/examples/snapshot.json")).unwrap();
    assert_eq!(s.nodes.len(), 3);
    assert!(s.nodes.iter().all(|n| n.ready));
    assert_eq!(s.daemonsets.len(), 2);
    assert_eq!(s.pdbs.len(), 2);
    assert_eq!(s.pending_pods().count(), 25);
    let gpu: Vec<&Pod> = s
        .pending_pods()
        .filter(|p| p.requests.get_milli("nvidia.com/gpu") > 0)
        .collect();
    assert_eq!(gpu.len(), 1);
    // aws-node: two 25m containers, the 25m init container fits inside them.
    let aws_node = s.daemonsets.iter().find(|d| d.name == "aws-node").unwrap();
    assert_eq!(aws_node.template.requests, res(&[("cpu", "50m")]));
}

#[test]
fn the_cli_example_reads_the_same_without_item_kinds() {
    let text = include_str!("../../../../../cli/examples/snapshot.json");
    let mut doc: Value = serde_json::from_str(text).unwrap();
    let items = doc["items"].as_array().cloned().unwrap();
    doc["items"] = Value::Array(strip_kinds(items));
    assert_eq!(
        parse_snapshot(&doc.to_string()).unwrap(),
        parse_snapshot(text).unwrap()
    );
}

#[test]
fn services_controllers_and_a_pods_controller_are_read_for_the_default_spread() {
    use crate::default_spread::{ControllerRef, OwnerSelector, owner_selector_in};
    use std::collections::BTreeMap;
    let mut pod = pod_json("default", "web-abc-1", json!({}));
    pod["metadata"]["labels"] = json!({"app": "web", "pod-template-hash": "abc"});
    pod["metadata"]["ownerReferences"] = json!([
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "not-the-controller", "uid": "u0"},
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-abc", "uid": "u1", "controller": true}
    ]);
    let s = parse_snapshot(&list(vec![
        pod,
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "default"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "kubernetes", "namespace": "default"},
            "spec": {"ports": [{"port": 443}]}}),
        json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web-abc", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "web", "pod-template-hash": "abc"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": []}}}}),
        json!({"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "legacy", "namespace": "default"},
            "spec": {"selector": {"app": "legacy"}}}),
    ]))
    .unwrap();
    assert_eq!(
        s.pods[0].controller,
        Some(std::sync::Arc::new(ControllerRef {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: "web-abc".into()
        }))
    );
    let selectors: Vec<(&str, Option<&BTreeMap<String, String>>)> = s
        .services
        .iter()
        .map(|s| (s.name.as_str(), s.selector.as_ref()))
        .collect();
    assert_eq!(selectors.len(), 2);
    assert_eq!(selectors[0].1.unwrap()["app"], "web");
    assert_eq!(selectors[1], ("kubernetes", None));
    let owner = s.pods[0].controller.clone().unwrap();
    match owner_selector_in(&s.controllers, "default", &owner) {
        Some(OwnerSelector::Requirements(reqs)) => {
            let keys: Vec<&str> = reqs.iter().map(|r| r.key.as_str()).collect();
            assert_eq!(keys, ["app", "pod-template-hash"]);
        }
        other => panic!("{other:?}"),
    }
    let rc = ControllerRef {
        api_version: "v1".into(),
        kind: "ReplicationController".into(),
        name: "legacy".into(),
    };
    assert_eq!(
        owner_selector_in(&s.controllers, "default", &rc),
        Some(OwnerSelector::Labels(BTreeMap::from([(
            "app".to_string(),
            "legacy".to_string()
        )])))
    );
    assert_eq!(owner_selector_in(&s.controllers, "other", &rc), None);
}

#[test]
fn pods_read_from_a_list_hold_the_constraints_they_share_once() {
    let spec = json!({"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "web", "effect": "NoSchedule"}],
        "nodeSelector": {"kubernetes.io/arch": "arm64"}});
    let s = parse_snapshot(&list(vec![
        pod_json("default", "web-1", spec.clone()),
        pod_json("default", "web-2", spec),
    ]))
    .unwrap();
    let (a, b) = (&s.pods[0], &s.pods[1]);
    assert_eq!(a.tolerations[0].value, "web");
    assert!(a.tolerations.same_as(&b.tolerations));
    assert!(a.node_selector.same_as(&b.node_selector));
    // Each keeps its own labels.
    assert_eq!(
        (a.labels["app"].as_str(), b.labels["app"].as_str()),
        ("web-1", "web-2")
    );
}

#[test]
fn horizontal_pod_autoscalers_are_read_with_their_target_and_bounds() {
    let hpa = |name: &str, spec: Value| {
        json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": name, "namespace": "shop"}, "spec": spec})
    };
    let target = json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"});
    let s = parse_snapshot(&list(vec![
        hpa(
            "web",
            json!({"scaleTargetRef": target, "minReplicas": 2, "maxReplicas": 10}),
        ),
        // minReplicas unset: the API server's default, 1.
        hpa(
            "db",
            json!({"scaleTargetRef": {"kind": "StatefulSet", "name": "db"}, "maxReplicas": 3}),
        ),
    ]))
    .unwrap();
    let read: Vec<(&str, &str, &str, u32, u32)> = s
        .autoscalers
        .iter()
        .map(|a| {
            (
                a.name.as_str(),
                a.target_kind.as_str(),
                a.target_name.as_str(),
                a.min_replicas,
                a.max_replicas,
            )
        })
        .collect();
    assert_eq!(
        read,
        vec![
            ("web", "Deployment", "web", 2, 10),
            ("db", "StatefulSet", "db", 1, 3)
        ]
    );
    assert!(s.autoscalers.iter().all(|a| a.namespace == "shop"));

    let err = parse_snapshot(&list(vec![hpa(
        "web",
        json!({"scaleTargetRef": target, "minReplicas": 5, "maxReplicas": 3}),
    )]))
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("HorizontalPodAutoscaler \"shop/web\"") && err.contains("spec.maxReplicas"),
        "{err}"
    );
}
