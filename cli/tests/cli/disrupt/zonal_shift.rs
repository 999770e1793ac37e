//! `disrupt --zonal-shift ZONE`: the nodes in a zone under an ARC zonal shift are in no
//! voluntary command (code `ZonalShift`) and take no moved pods.

use serde_json::Value;

use super::{ALL_AT_ONCE, commands, decide, node, pod_on, pools, rejected};

/// `node` in `zone` (the helper puts nodes in us-east-1a).
fn node_in(name: &str, zone: &str) -> Value {
    let mut n = node(name, "m5.xlarge", "on-demand");
    n["metadata"]["labels"]["topology.kubernetes.io/zone"] = zone.into();
    n["spec"]["providerID"] = format!("aws:///{zone}/i-{name}").into();
    n
}

#[test]
fn disrupt_leaves_the_nodes_of_a_shifted_zone_alone_and_moves_no_pod_onto_them() {
    // Two nodes a pod each in us-east-1a, one in us-east-1b: one node's worth.
    let items = vec![
        node_in("a-1", "us-east-1a"),
        pod_on("web-a1", "a-1", "500m"),
        node_in("a-2", "us-east-1a"),
        pod_on("web-a2", "a-2", "500m"),
        node_in("b-1", "us-east-1b"),
        pod_on("web-b1", "b-1", "500m"),
    ];
    let pools = pools(ALL_AT_ONCE, "");
    let before = decide(&pools, items.clone(), &[]);
    assert!(
        commands(&before)
            .iter()
            .any(|(_, nodes)| nodes.iter().any(|n| n.starts_with("a-"))),
        "without the shift the zone's nodes are consolidated: {before:#}"
    );

    let d = decide(&pools, items, &["--zonal-shift", "us-east-1a"]);
    let mut kept: Vec<(String, String)> = rejected(&d)
        .into_iter()
        .filter(|(n, _)| n.starts_with("a-"))
        .collect();
    kept.sort();
    assert_eq!(
        kept,
        [
            ("a-1".to_string(), "ZonalShift".to_string()),
            ("a-2".to_string(), "ZonalShift".to_string())
        ],
        "{d:#}"
    );
    for c in d["commands"].as_array().unwrap() {
        for m in c["moves"].as_array().unwrap() {
            assert!(!m["target"].as_str().unwrap().starts_with("a-"), "{d:#}");
        }
        for r in c["replacements"].as_array().unwrap() {
            assert_ne!(r["zone"], "us-east-1a", "{d:#}");
        }
    }
}
