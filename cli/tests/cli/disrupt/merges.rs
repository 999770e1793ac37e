//! Multi-node consolidation finds the longest prefix worth merging even when shorter
//! prefixes are not, and every command stands on its own: its pods go to nodes that
//! exist or to its own replacements, never to another command's.

use serde_json::{Value, json};

use super::{ALL_AT_ONCE, check_contract, commands, decide, node, pod_on, pools};

/// m5 only, on-demand only: prices are exact steps (each size twice the one below).
const M5_ON_DEMAND: &str = "        - key: karpenter.k8s.aws/instance-family\n          operator: In\n          values: [\"m5\"]\n        - key: karpenter.sh/capacity-type\n          operator: NotIn\n          values: [\"spot\"]\n";

#[test]
fn three_nodes_worth_merging_are_merged_though_no_two_of_them_are() {
    // a and c (m5.xlarge, 3 CPU each) come first: their 6 CPU need an m5.2xlarge at
    // $0.384, what the two cost. With b (m5.large, 1 CPU) the 7 CPU still fit one
    // m5.2xlarge, now for $0.48 of nodes. No node alone is worth replacing.
    let items = vec![
        node("a", "m5.xlarge", "on-demand"),
        pod_on("a-pod", "a", "3"),
        node("b", "m5.large", "on-demand"),
        pod_on("b-pod", "b", "1"),
        node("c", "m5.xlarge", "on-demand"),
        pod_on("c-pod", "c", "3"),
    ];
    let d = decide(&pools(ALL_AT_ONCE, M5_ON_DEMAND), items, &[]);
    let c = commands(&d);
    assert_eq!(c.len(), 1, "{d:#}");
    assert_eq!(c[0].0, "multi-node", "{d:#}");
    let mut nodes = c[0].1.clone();
    nodes.sort();
    assert_eq!(nodes, ["a", "b", "c"], "{d:#}");
    let cmd = &d["commands"][0];
    assert_eq!(
        cmd["replacements"][0]["instanceType"], "m5.2xlarge",
        "{d:#}"
    );
    assert!((cmd["savingsPerHour"].as_f64().unwrap() - 0.096).abs() < 1e-6);
}

/// Every move's target, by command.
fn targets(d: &Value) -> Vec<Vec<String>> {
    d["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            c["moves"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["target"].as_str().unwrap().to_string())
                .collect()
        })
        .collect()
}

#[test]
fn a_later_command_never_moves_pods_onto_an_earlier_commands_replacement() {
    // 110 m5.xlarge, under half used: the first window of 100 candidates (1.5 CPU
    // each) becomes m5.2xlarge replacements with 0.4 CPU to spare each; the 10 left
    // (0.3 CPU each) are a later command, whose pods would fit that spare room. They
    // must not go there: the function validates each command alone, where another
    // command's replacements do not exist yet.
    let mut items = Vec::new();
    for i in 0..110 {
        let n = format!("node-{i:03}");
        items.push(node(&n, "m5.xlarge", "on-demand"));
        let cpu = if i < 100 { "1500m" } else { "300m" };
        items.push(pod_on(&format!("web-{i:03}"), &n, cpu));
    }
    let d = decide(&pools(ALL_AT_ONCE, M5_ON_DEMAND), items, &[]);
    check_contract(&d);
    let removed: usize = commands(&d).iter().map(|(_, n)| n.len()).sum();
    assert_eq!(removed, 110, "{d:#}");
    assert!(commands(&d).len() >= 2, "{d:#}");
    for (i, ts) in targets(&d).iter().enumerate() {
        for t in ts {
            assert!(
                t.starts_with("node-"),
                "command {} moves pods to {t}, which is not a node: {:#}",
                i + 1,
                json!(d["commands"][i]["moves"])
            );
        }
    }
}

#[test]
fn a_deletion_whose_pods_fit_only_as_packed_is_not_taken() {
    // y has 1.2 CPU left and z 1 CPU (neither is managed: they stay). Packed, x's 1-CPU
    // pod goes to z and its two half-CPU pods to y. kube-scheduler binds them one by
    // one to the least allocated node: a half to y, the other to z, and the 1-CPU pod
    // stays pending, to be launched for, and the new node deleted the same way.
    let unmanaged = |name: &str| {
        let mut n = node(name, "m5.large", "on-demand");
        let labels = n["metadata"]["labels"].as_object_mut().unwrap();
        labels.remove("karpenter.sh/nodepool");
        labels.remove("karpenter.sh/initialized");
        n
    };
    let items = vec![
        node("x", "m5.xlarge", "on-demand"),
        pod_on("half-1", "x", "500m"),
        pod_on("half-2", "x", "500m"),
        pod_on("one", "x", "1"),
        unmanaged("y"),
        pod_on("y-fill", "y", "730m"),
        unmanaged("z"),
        pod_on("z-fill", "z", "930m"),
    ];
    let d = decide(&pools(ALL_AT_ONCE, M5_ON_DEMAND), items, &[]);
    assert!(commands(&d).is_empty(), "{d:#}");
    let x = &d["rejected"][0];
    assert_eq!(x["node"], "x", "{d:#}");
    assert_eq!(x["code"], "PodsDoNotFit", "{d:#}");
    assert!(
        x["reason"]
            .as_str()
            .unwrap()
            .contains("default/one fits only as packed"),
        "{d:#}"
    );
}
