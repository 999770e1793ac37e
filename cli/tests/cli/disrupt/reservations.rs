//! Capacity reservations and the minValues policy in `nodewright disrupt`, as the
//! disruption function has them: a node in a reservation is priced as reserved (never
//! "replaced by a cheaper node", still removed when empty), replacements go into
//! reservations with room, counted across the commands of one decision, and
//! `--min-values-policy` decides whether an unkeepable minValues blocks a replacement.

use serde_json::{Value, json};

use super::{check_contract, commands, decide, node, pod_on, rejected, run, temp_file};

/// A NodePool `default` with `requirements` (YAML flow mappings), every node free to go
/// at once, and its EC2NodeClass selecting the reservations the tests use.
fn manifests(requirements: &[&str]) -> String {
    let requirements: String = requirements
        .iter()
        .map(|r| format!("        - {r}\n"))
        .collect();
    format!(
        r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  template:
    spec:
      expireAfter: 720h
      requirements:
{requirements}      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: 30s
    budgets:
      - nodes: "100%"
---
{class}"#,
        class = crate::manifests::node_class_with(
            "  capacityReservationSelectorTerms: [{id: cr-0aaaa}, {id: cr-0bbbb}]\n"
        )
    )
}

/// m5 types allowing `capacity_types`.
fn pool(capacity_types: &str) -> String {
    manifests(&[
        "{key: kubernetes.io/arch, operator: In, values: [amd64]}",
        &format!("{{key: karpenter.sh/capacity-type, operator: In, values: [{capacity_types}]}}"),
        "{key: karpenter.k8s.aws/instance-family, operator: In, values: [m5]}",
    ])
}

/// A `--reservations` file: (id, instance type, instances available), in us-east-1a
/// where the nodes are.
fn reservations(list: &[(&str, &str, u32)]) -> String {
    let items: Vec<Value> = list
        .iter()
        .map(
            |(id, t, n)| json!({"id": id, "instanceType": t, "zone": "us-east-1a", "available": n}),
        )
        .collect();
    let file = temp_file(
        "reservations.json",
        &json!({ "reservations": items }).to_string(),
    );
    file.display().to_string()
}

/// A node Karpenter launched into reservation `id`.
fn reserved_node(name: &str, instance_type: &str, id: &str) -> Value {
    let mut n = node(name, instance_type, "reserved");
    let labels = &mut n["metadata"]["labels"];
    labels["karpenter.k8s.aws/capacity-reservation-id"] = json!(id);
    labels["karpenter.k8s.aws/capacity-reservation-type"] = json!("default");
    n
}

/// Every command's replacements as (instance type, capacity type).
fn replacements(d: &Value) -> Vec<(String, String)> {
    d["commands"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["replacements"].as_array().unwrap())
        .map(|r| {
            (
                r["instanceType"].as_str().unwrap().to_string(),
                r["capacityType"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// An on-demand m5.xlarge whose 3-CPU pod needs an m5.xlarge again.
fn full_on_demand(name: &str) -> Vec<Value> {
    vec![
        node(name, "m5.xlarge", "on-demand"),
        pod_on(&format!("{name}-pod"), name, "3"),
    ]
}

#[test]
fn an_on_demand_node_moves_into_a_reservation_with_room_and_stays_when_it_has_none() {
    let pools = pool("reserved, on-demand");
    let alone = decide(&pools, full_on_demand("busy"), &[]);
    assert!(commands(&alone).is_empty(), "{alone:#}");
    assert_eq!(
        rejected(&alone),
        [("busy".to_string(), "NotCheaper".to_string())]
    );

    let room = reservations(&[("cr-0aaaa", "m5.xlarge", 1)]);
    let d = decide(&pools, full_on_demand("busy"), &["--reservations", &room]);
    assert_eq!(
        commands(&d),
        [("single-node".to_string(), vec!["busy".to_string()])],
        "{d:#}"
    );
    let r = &d["commands"][0]["replacements"][0];
    assert_eq!(r["instanceType"], "m5.xlarge", "{d:#}");
    assert_eq!(r["capacityType"], "reserved", "{d:#}");
    assert_eq!(r["zone"], "us-east-1a", "{d:#}");
    // Priced as Karpenter prices a reservation: on-demand / 10,000,000.
    assert!(r["pricePerHour"].as_f64().unwrap() < 1e-6, "{d:#}");

    let used_up = reservations(&[("cr-0aaaa", "m5.xlarge", 0)]);
    let d = decide(
        &pools,
        full_on_demand("busy"),
        &["--reservations", &used_up],
    );
    assert!(commands(&d).is_empty(), "{d:#}");
}

#[test]
fn a_reservation_a_command_takes_is_not_offered_to_a_later_command_of_the_decision() {
    // "drifted" goes first (drift before consolidation) and its replacement takes the
    // reservation's first instance; "busy" may have the second, if there is one.
    let mut items = full_on_demand("drifted");
    items[0]["metadata"]["annotations"] = json!({
        "karpenter.sh/nodepool-hash": "0",
        "karpenter.sh/nodepool-hash-version": "nodewright-v1"});
    items.extend(full_on_demand("busy"));
    for room in [1, 2] {
        let file = reservations(&[("cr-0aaaa", "m5.xlarge", room)]);
        let d = decide(
            &pool("reserved, on-demand"),
            items.clone(),
            &["--reservations", &file],
        );
        let mut expected = vec![("drift".to_string(), vec!["drifted".to_string()])];
        if room == 2 {
            expected.push(("single-node".to_string(), vec!["busy".to_string()]));
        } else {
            assert_eq!(
                rejected(&d),
                [("busy".to_string(), "NotCheaper".to_string())],
                "{d:#}"
            );
        }
        assert_eq!(commands(&d), expected, "room for {room}: {d:#}");
        assert_eq!(
            replacements(&d),
            vec![("m5.xlarge".to_string(), "reserved".to_string()); room as usize],
            "room for {room}: {d:#}"
        );
    }
}

#[test]
fn a_node_in_a_reservation_is_not_replaced_by_a_cheaper_type_but_goes_when_empty() {
    // Priced on-demand, "big" (an m5.2xlarge at $0.384) would become a spot m5.large.
    let items = vec![
        reserved_node("big", "m5.2xlarge", "cr-0aaaa"),
        pod_on("web", "big", "500m"),
        reserved_node("idle", "m5.xlarge", "cr-0aaaa"),
    ];
    let d = decide(&pool("reserved, on-demand, spot"), items, &[]);
    assert_eq!(
        commands(&d),
        [("emptiness".to_string(), vec!["idle".to_string()])],
        "{d:#}"
    );
    assert_eq!(
        rejected(&d),
        [("big".to_string(), "NotCheaper".to_string())],
        "{d:#}"
    );
    assert!(
        d["pricePerHour"]["before"].as_f64().unwrap() < 1e-6,
        "{d:#}"
    );
}

#[test]
fn a_node_in_a_large_reservation_moves_to_a_smaller_reservation_with_room() {
    // Reserved prices keep on-demand's order (Karpenter's reserved-to-reserved
    // consolidation): an m5.large in a reservation is cheaper than an m5.2xlarge in one.
    let items = vec![
        reserved_node("big", "m5.2xlarge", "cr-0aaaa"),
        pod_on("web", "big", "500m"),
    ];
    let smaller = reservations(&[("cr-0bbbb", "m5.large", 1)]);
    let d = decide(
        &pool("reserved, on-demand, spot"),
        items,
        &["--reservations", &smaller],
    );
    assert_eq!(
        commands(&d),
        [("single-node".to_string(), vec!["big".to_string()])],
        "{d:#}"
    );
    assert_eq!(
        replacements(&d),
        [("m5.large".to_string(), "reserved".to_string())]
    );
}

/// Types of two families under a minValues of three: no claim can keep it.
fn unkeepable_min_values() -> String {
    manifests(&[
        "{key: node.kubernetes.io/instance-type, operator: In, values: [m5.large, m5.xlarge, c5.xlarge]}",
        "{key: karpenter.k8s.aws/instance-family, operator: Exists, minValues: 3}",
        "{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}",
    ])
}

#[test]
fn an_unkeepable_min_values_blocks_a_replacement_when_strict_and_not_when_best_effort() {
    // One CPU on an m5.xlarge: an m5.large ($0.096) or a c5.xlarge ($0.17) would do, but
    // no replacement can offer three families.
    let items = || {
        vec![
            node("web-node", "m5.xlarge", "on-demand"),
            pod_on("web", "web-node", "1"),
        ]
    };
    for strict in [
        decide(&unkeepable_min_values(), items(), &[]),
        decide(
            &unkeepable_min_values(),
            items(),
            &["--min-values-policy", "strict"],
        ),
    ] {
        assert!(commands(&strict).is_empty(), "{strict:#}");
        let reason = strict["rejected"][0]["reason"].as_str().unwrap();
        assert!(reason.contains("minValues 3"), "{strict:#}");
    }
    let relaxed = decide(
        &unkeepable_min_values(),
        items(),
        &["--min-values-policy", "best-effort"],
    );
    assert_eq!(
        commands(&relaxed),
        [("single-node".to_string(), vec!["web-node".to_string()])],
        "{relaxed:#}"
    );
    assert_eq!(
        replacements(&relaxed),
        [("m5.large".to_string(), "on-demand".to_string())]
    );
    let options = &relaxed["commands"][0]["replacements"][0]["instanceTypeOptions"];
    assert_eq!(options, &json!(["m5.large", "c5.xlarge"]), "{relaxed:#}");
    check_contract(&relaxed);
}

#[test]
fn a_reservations_file_with_a_bad_field_is_refused_naming_it() {
    let pools = pool("reserved, on-demand");
    let wrong_type = temp_file(
        "reservations.yaml",
        "reservations:\n  - {id: cr-0aaaa, instanceType: m5.xlarge, zone: us-east-1a, available: lots}\n",
    );
    let (code, stdout, stderr) = run(
        &pools,
        full_on_demand("busy"),
        &["--reservations", wrong_type.to_str().unwrap()],
    );
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(stderr.contains("reservations[0].available"), "{stderr}");

    let not_an_id = temp_file(
        "reservations.yaml",
        "reservations:\n  - {id: odcr-1, instanceType: m5.xlarge, zone: us-east-1a, available: 1}\n",
    );
    let (code, _, stderr) = run(
        &pools,
        full_on_demand("busy"),
        &["--reservations", not_an_id.to_str().unwrap()],
    );
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("reservations[0].id: expected an id like \"cr-0123abcd\""),
        "{stderr}"
    );

    let (code, _, stderr) = run(
        &pools,
        full_on_demand("busy"),
        &["--min-values-policy", "loose"],
    );
    assert_eq!(code, 2, "clap refuses an unknown policy: {stderr}");
}

#[test]
fn a_replacement_left_on_demand_by_a_used_up_reservation_is_priced_on_demand_not_reserved() {
    // One instance left: one node's pod moves into it; the other's would need an
    // identical on-demand m5.xlarge, no saving, though the reservation's price was
    // once offered for it as well.
    let mut items = full_on_demand("a");
    items.extend(full_on_demand("b"));
    let room = reservations(&[("cr-0aaaa", "m5.xlarge", 1)]);
    let d = decide(
        &pool("reserved, on-demand"),
        items,
        &["--reservations", &room],
    );
    assert_eq!(
        commands(&d),
        [("single-node".to_string(), vec!["a".to_string()])],
        "{d:#}"
    );
    assert_eq!(
        replacements(&d),
        [("m5.xlarge".to_string(), "reserved".to_string())],
        "{d:#}"
    );
    assert_eq!(
        rejected(&d),
        [("b".to_string(), "NotCheaper".to_string())],
        "{d:#}"
    );
}

/// m5 and c5 types under a family minValues of two, on-demand only.
fn two_families() -> String {
    manifests(&[
        "{key: karpenter.k8s.aws/instance-family, operator: In, values: [m5, c5], minValues: 2}",
        "{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}",
    ])
}

#[test]
fn a_replacement_whose_cheaper_types_cannot_keep_min_values_is_refused_under_either_policy() {
    // Only a c5.large ($0.085) is cheaper than the m5.large ($0.096): one family where
    // the NodePool asks for two. The types that fit have both families, so BestEffort
    // relaxes nothing and the price filter refuses the replacement as well.
    let items = || {
        vec![
            node("small", "m5.large", "on-demand"),
            pod_on("web", "small", "300m"),
        ]
    };
    for policy in ["strict", "best-effort"] {
        let d = decide(&two_families(), items(), &["--min-values-policy", policy]);
        assert!(commands(&d).is_empty(), "{policy}: {d:#}");
        assert_eq!(
            rejected(&d),
            [("small".to_string(), "NotCheaper".to_string())],
            "{policy}: {d:#}"
        );
        let reason = d["rejected"][0]["reason"].as_str().unwrap();
        assert!(
            reason.contains("(c5.large) have 1 distinct karpenter.k8s.aws/instance-family, below the NodePool's minValues 2"),
            "{policy}: {d:#}"
        );
    }
}
