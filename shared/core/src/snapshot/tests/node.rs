//! Nodes: readiness, taints, allocatable, provider id, and errors that name the node.

use serde_json::json;

use super::*;
use crate::api::model::{Taint, TaintEffect};

#[test]
fn a_node_keeps_readiness_taints_allocatable_and_provider_id() {
    let s = parse_snapshot(&list(vec![
        node_json("n1", "True"),
        node_json("n2", "Unknown"),
    ]))
    .unwrap();
    let n = &s.nodes[0];
    assert_eq!(n.name, "n1");
    assert!(n.ready);
    assert!(!s.nodes[1].ready);
    assert!(n.unschedulable);
    assert_eq!(
        n.provider_id.as_deref(),
        Some("aws:///us-east-1a/i-0123456789abcdef0")
    );
    assert_eq!(
        n.taints,
        vec![
            Taint {
                key: "dedicated".into(),
                value: Some("gpu".into()),
                effect: TaintEffect::NoSchedule
            },
            Taint {
                key: "node.kubernetes.io/unschedulable".into(),
                value: None,
                effect: TaintEffect::NoSchedule
            },
        ]
    );
    assert_eq!(n.allocatable.get_milli("cpu"), 3920);
    assert_eq!(n.allocatable.get_milli("memory"), 14909676 * 1024 * 1000);
    assert_eq!(n.allocatable.get_milli("pods"), 58_000);
    assert_eq!(
        n.allocatable.get_milli("ephemeral-storage"),
        18242267924 * 1000
    );
    assert_eq!(n.capacity.get_milli("cpu"), 4000);
    assert_eq!(
        n.labels
            .get("topology.kubernetes.io/zone")
            .map(String::as_str),
        Some("us-east-1a")
    );
}

#[test]
fn a_node_with_a_bad_taint_effect_or_quantity_is_named() {
    let mut n = node_json("n1", "True");
    n["spec"]["taints"][0]["effect"] = json!("NoWay");
    let err = parse_snapshot(&list(vec![n])).unwrap_err();
    assert_eq!(
        err.to_string(),
        "node \"n1\": spec.taints[0].effect: \"NoWay\" is not valid (expected one of NoSchedule, \
         PreferNoSchedule, NoExecute)"
    );
    let mut n = node_json("n1", "True");
    n["status"]["allocatable"]["cpu"] = json!("4 cores");
    let err = parse_snapshot(&list(vec![n])).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("node \"n1\": status.allocatable.cpu: quantity \"4 cores\""),
        "{err}"
    );
}
