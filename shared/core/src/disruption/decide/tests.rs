//! `decide` on small clusters: the order of the methods, budgets, what a command leaves
//! for the next, consolidation's choices, the reasons nodes stay, and that applying any
//! decision keeps every pod placed.

use super::*;
use crate::api::model::{Budget, BudgetNodes};
use crate::catalog::Catalog;
use crate::cluster::{ClusterSnapshot, Node, Pod};
use crate::disruption::Move;
use crate::pricing::Pricing;
use crate::testing::{bound_pod, general_purpose_pool, initialized_node};

const NOW: i64 = 2_000_000_000;

fn managed(name: &str, instance_type: &str) -> Node {
    initialized_node(name, instance_type, NOW)
}

fn on(node: &str, name: &str, cpu: &str) -> Pod {
    bound_pod(node, name, cpu, NOW)
}

fn pool(budget_percent: u32) -> NodePool {
    let mut pool = general_purpose_pool();
    pool.disruption.budgets = vec![Budget {
        nodes: BudgetNodes::Percent(budget_percent),
        schedule: None,
        duration: None,
        reasons: vec![],
    }];
    pool
}

struct Case {
    snapshot: ClusterSnapshot,
    pools: Vec<NodePool>,
    disrupting: Vec<String>,
    nominated: Vec<String>,
    external_drift: Vec<(String, String)>,
    validating: Option<Vec<String>>,
    zones: Vec<String>,
    shifted_zones: Vec<String>,
}

impl Case {
    fn new(nodes: Vec<Node>, pods: Vec<Pod>) -> Self {
        Self {
            snapshot: ClusterSnapshot {
                nodes,
                pods,
                ..Default::default()
            },
            pools: vec![pool(100)],
            disrupting: vec![],
            nominated: vec![],
            external_drift: vec![],
            validating: None,
            zones: vec!["us-east-1a".into()],
            shifted_zones: vec![],
        }
    }

    fn decide(&self) -> Decision {
        let mut pricing = Pricing::for_zones(self.zones.clone());
        pricing.shifted_zones = self.shifted_zones.clone();
        decide(&DisruptionInput {
            snapshot: &self.snapshot,
            node_pools: &self.pools,
            node_classes: &[],
            catalog: Catalog::embedded(),
            pricing: &pricing,
            in_flight: &[],
            now: NOW,
            spot_to_spot: false,
            external_drift: &self.external_drift,
            disrupting: &self.disrupting,
            nominated: &self.nominated,
            validating: self.validating.as_deref(),
        })
    }
}

fn methods(d: &Decision) -> Vec<(Method, Vec<String>)> {
    d.commands
        .iter()
        .map(|c| (c.method, c.nodes.clone()))
        .collect()
}

fn codes(d: &Decision) -> Vec<(String, RejectCode)> {
    d.rejected
        .iter()
        .map(|r| (r.node.clone(), r.code))
        .collect()
}

#[test]
fn methods_run_in_order_expiration_emptiness_drift_then_consolidation() {
    // The expired node's pod fits on no other node, so nothing moves onto "empty".
    let mut old = managed("old", "m5.xlarge");
    old.created_at = Some(NOW - 800 * 3600);
    let empty = managed("empty", "m5.large");
    let drifted = managed("drifted", "m5.large");
    let busy = managed("busy", "m5.xlarge");
    let mut case = Case::new(
        vec![old, empty, drifted, busy],
        vec![
            on("old", "a", "3"),
            on("drifted", "b", "1"),
            on("busy", "c", "3"),
        ],
    );
    case.external_drift = vec![("drifted".into(), "AMI ami-old is no longer selected".into())];
    let d = case.decide();
    let order: Vec<Method> = d.commands.iter().map(|c| c.method).collect();
    assert_eq!(
        &order[..3],
        [Method::Expiration, Method::Emptiness, Method::Drift],
        "{d:#?}"
    );
    assert_eq!(d.commands[2].nodes, ["drifted"]);
    assert_eq!(d.commands[2].reason, Reason::Drifted);
}

#[test]
fn an_empty_node_nominated_for_pods_on_their_way_is_not_a_candidate_but_counts_for_budgets() {
    // Two empty nodes; "waiting" is the replacement of a node whose pods a budget holds.
    let nodes = vec![managed("waiting", "m5.large"), managed("idle", "m5.large")];
    let mut case = Case::new(nodes, vec![]);
    case.nominated = vec!["waiting".into()];
    let d = case.decide();
    let taken: Vec<&String> = d.commands.iter().flat_map(|c| c.nodes.iter()).collect();
    assert_eq!(taken, ["idle"], "{d:#?}");
    assert!(!d.rejected.iter().any(|r| r.node == "waiting"));
}

#[test]
fn nodes_already_disrupting_count_against_the_budget_and_are_not_candidates() {
    // 50% of 4 nodes is 2; one is already being disrupted, so one more may go.
    let nodes: Vec<Node> = (1..=4)
        .map(|i| managed(&format!("n{i}"), "m5.large"))
        .collect();
    let mut case = Case::new(nodes, vec![]);
    case.pools = vec![pool(50)];
    case.disrupting = vec!["n1".into()];
    let d = case.decide();
    let taken: usize = d.commands.iter().map(|c| c.nodes.len()).sum();
    assert_eq!(taken, 1, "{d:#?}");
    assert!(!d.rejected.iter().any(|r| r.node == "n1"));
    assert!(
        !d.commands
            .iter()
            .any(|c| c.nodes.contains(&"n1".to_string()))
    );
    assert_eq!(
        codes(&d)
            .iter()
            .filter(|(_, c)| *c == RejectCode::DisruptionBudget)
            .count(),
        2
    );
}

#[test]
fn candidates_are_never_destinations_of_their_own_command() {
    // Two half-full m5.large: either may take the other's pod, never both go with
    // their pods on each other.
    let case = Case::new(
        vec![managed("a", "m5.large"), managed("b", "m5.large")],
        vec![on("a", "p1", "700m"), on("b", "p2", "700m")],
    );
    let d = case.decide();
    for c in &d.commands {
        for m in &c.moves {
            assert!(!c.nodes.contains(&m.target), "{d:#?}");
        }
    }
    assert!(d.price_per_hour.after < d.price_per_hour.before, "{d:#?}");
}

#[test]
fn a_command_is_computed_on_the_cluster_the_commands_before_it_leave() {
    // Three m5.xlarge with one 1.5-CPU pod each: a node has room for one more pod
    // (3.92 CPU allocatable), so commands move pods onto the others. A later
    // command must not count the space an earlier one's moves used.
    let case = xlarges_with_one_pod_each(3, "1500m");
    let d = case.decide();
    let mut load: HashMap<String, usize> = HashMap::new();
    for c in &d.commands {
        for m in &c.moves {
            *load.entry(m.target.clone()).or_default() += m.pods.len();
        }
    }
    // An m5.xlarge (3.92 CPU) holds at most two 1.5-CPU pods: its own and one more.
    assert!(load.values().all(|&n| n <= 1), "{d:#?}");
    assert!(d.price_per_hour.after < d.price_per_hour.before);
}

/// Nodes `n1..=count`, each an m5.xlarge running one pod `pI` of `cpu`.
fn xlarges_with_one_pod_each(count: usize, cpu: &str) -> Case {
    let nodes = (1..=count)
        .map(|i| managed(&format!("n{i}"), "m5.xlarge"))
        .collect();
    let pods = (1..=count)
        .map(|i| on(&format!("n{i}"), &format!("p{i}"), cpu))
        .collect();
    Case::new(nodes, pods)
}

fn pool_of_types(types: &[&str]) -> NodePool {
    let mut pool = pool(100);
    pool.requirements
        .retain(|r| r.key != LABEL_INSTANCE_TYPE && r.key != "karpenter.k8s.aws/instance-category");
    pool.requirements.push(crate::api::model::NodeRequirement {
        key: LABEL_INSTANCE_TYPE.into(),
        operator: crate::api::model::Operator::In,
        values: types.iter().map(|t| t.to_string()).collect(),
        min_values: None,
    });
    pool
}

#[test]
fn several_nodes_are_replaced_by_one_cheaper_node() {
    let mut case = xlarges_with_one_pod_each(3, "500m");
    case.pools = vec![pool_of_types(&["m5.large", "m5.xlarge"])];
    let d = case.decide();
    assert_eq!(
        methods(&d),
        [(
            Method::MultiNode,
            vec!["n1".to_string(), "n2".into(), "n3".into()]
        )],
        "{d:#?}"
    );
    let replacements = &d.commands[0].replacements;
    assert_eq!(replacements.len(), 1, "{d:#?}");
    assert_eq!(replacements[0].instance_type_options, ["m5.large"]);
}

#[test]
fn a_command_under_validation_is_decided_as_its_own_set_not_the_first_the_budget_allows() {
    // Four alike half-empty nodes and room for two: a fresh decision takes n1 and n2
    // (name order); the command being validated took n3 and n4 and still holds.
    let mut case = xlarges_with_one_pod_each(4, "500m");
    let mut pool = pool_of_types(&["m5.large", "m5.xlarge"]);
    pool.disruption.budgets[0].nodes = BudgetNodes::Count(2);
    case.pools = vec![pool];
    let fresh = case.decide();
    assert_eq!(
        methods(&fresh),
        [(Method::MultiNode, vec!["n1".to_string(), "n2".to_string()])],
        "{fresh:#?}"
    );
    assert!(
        codes(&fresh).contains(&("n3".to_string(), RejectCode::DisruptionBudget)),
        "{fresh:#?}"
    );

    case.validating = Some(vec!["n3".into(), "n4".into()]);
    let validated = case.decide();
    assert_eq!(
        methods(&validated),
        [(Method::MultiNode, vec!["n3".to_string(), "n4".to_string()])],
        "{validated:#?}"
    );
    assert!(validated.rejected.is_empty(), "{validated:#?}");
}

#[test]
fn commands_validated_together_never_move_pods_onto_each_others_nodes() {
    // Two drift commands due in one poll: each node has room for the other's pod, but
    // both are leaving, so each keeps its own replacement and both still hold.
    let mut case = Case::new(
        vec![managed("d1", "m5.xlarge"), managed("d2", "m5.xlarge")],
        vec![on("d1", "p1", "1"), on("d2", "p2", "1")],
    );
    case.external_drift = vec![
        ("d1".into(), "AMI ami-old is no longer selected".into()),
        ("d2".into(), "AMI ami-old is no longer selected".into()),
    ];
    case.validating = Some(vec!["d1".into(), "d2".into()]);
    let d = case.decide();
    assert_eq!(
        methods(&d),
        [
            (Method::Drift, vec!["d1".to_string()]),
            (Method::Drift, vec!["d2".to_string()])
        ],
        "{d:#?}"
    );
    for c in &d.commands {
        assert!(
            c.moves.iter().all(|m| m.target != "d1" && m.target != "d2"),
            "{d:#?}"
        );
        assert_eq!(c.replacements.len(), 1, "{d:#?}");
    }
}

/// A node of the general-purpose pool in `zone`, as [`managed`] makes them.
fn managed_in(name: &str, instance_type: &str, zone: &str) -> Node {
    let mut n = managed(name, instance_type);
    n.labels.insert(LABEL_ZONE.into(), zone.into());
    n
}

#[test]
fn nodes_in_a_zone_under_a_zonal_shift_are_neither_disrupted_nor_destinations() {
    // Without the shift: a1 is empty and goes; a2 and b1 are consolidated.
    let mut case = Case::new(
        vec![
            managed_in("a1", "m5.xlarge", "us-east-1a"),
            managed_in("a2", "m5.xlarge", "us-east-1a"),
            managed_in("b1", "m5.xlarge", "us-east-1b"),
        ],
        vec![on("a2", "p-a2", "1"), on("b1", "p-b1", "1")],
    );
    case.zones = vec!["us-east-1a".into(), "us-east-1b".into()];
    let before = case.decide();
    assert!(
        before.commands.iter().any(|c| c.nodes == ["a1"]),
        "{before:#?}"
    );
    assert!(
        before
            .commands
            .iter()
            .any(|c| c.nodes.iter().any(|n| n == "a2")),
        "{before:#?}"
    );

    case.shifted_zones = vec!["us-east-1a".into()];
    let d = case.decide();
    let mut shifted: Vec<(String, RejectCode)> = codes(&d)
        .into_iter()
        .filter(|(n, _)| n.starts_with('a'))
        .collect();
    shifted.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        shifted,
        [
            ("a1".to_string(), RejectCode::ZonalShift),
            ("a2".to_string(), RejectCode::ZonalShift)
        ],
        "{d:#?}"
    );
    for c in &d.commands {
        assert!(c.nodes.iter().all(|n| n == "b1"), "{d:#?}");
        assert!(c.moves.iter().all(|m| !m.target.starts_with('a')), "{d:#?}");
        for r in &c.replacements {
            assert_ne!(
                r.zone, "us-east-1a",
                "a replacement in the shifted zone: {d:#?}"
            );
        }
    }
    let why = &d.rejected.iter().find(|r| r.node == "a1").unwrap().reason;
    assert!(
        why.contains("us-east-1a is under an ARC zonal shift"),
        "{why}"
    );
}

#[test]
fn a_node_in_a_zone_under_a_zonal_shift_still_expires() {
    // Expiration is forceful: the node is replaced, in a zone not shifted.
    let mut case = Case::new(
        vec![managed_in("a1", "m5.xlarge", "us-east-1a")],
        vec![on("a1", "p", "3")],
    );
    case.zones = vec!["us-east-1a".into(), "us-east-1b".into()];
    case.shifted_zones = vec!["us-east-1a".into()];
    case.pools[0].expire_after = Some(std::time::Duration::from_secs(60));
    let d = case.decide();
    assert_eq!(
        methods(&d),
        [(Method::Expiration, vec!["a1".to_string()])],
        "{d:#?}"
    );
    let zones: Vec<&str> = d.commands[0]
        .replacements
        .iter()
        .map(|r| r.zone.as_str())
        .collect();
    assert_eq!(zones, ["us-east-1b"], "{d:#?}");
}

#[test]
fn several_nodes_are_never_replaced_by_one_of_their_own_type() {
    // One m5.xlarge takes both pods: a new one is no better than keeping either,
    // so one node goes and its pod moves to the other; nothing is launched.
    let mut case = Case::new(
        vec![managed("n1", "m5.xlarge"), managed("n2", "m5.xlarge")],
        vec![on("n1", "p1", "1"), on("n2", "p2", "1")],
    );
    case.pools = vec![pool_of_types(&["m5.xlarge"])];
    let d = case.decide();
    assert_eq!(d.commands.len(), 1, "{d:#?}");
    assert_eq!(d.commands[0].method, Method::SingleNode, "{d:#?}");
    assert_eq!(d.commands[0].replacements, vec![], "{d:#?}");
    assert_eq!(d.commands[0].moves.len(), 1, "{d:#?}");
}

#[test]
fn a_pod_that_fits_nowhere_keeps_its_node_with_pods_do_not_fit_naming_it() {
    let mut big = on("n1", "big", "3");
    big.node_selector
        .insert("example.com/special".into(), "yes".into());
    let case = Case::new(vec![managed("n1", "m5.xlarge")], vec![big]);
    let d = case.decide();
    assert_eq!(codes(&d), [("n1".to_string(), RejectCode::PodsDoNotFit)]);
    assert!(
        d.rejected[0].reason.contains("default/big"),
        "{}",
        d.rejected[0].reason
    );
}

#[test]
fn a_node_already_the_cheapest_for_its_pods_is_not_cheaper_to_replace() {
    // 1.5 CPU and 6 GiB: nothing allowed is cheaper than an m5a.large.
    let mut p = on("n1", "p", "1500m");
    p.requests
        .add(&crate::testing::resources(&[("memory", "5632Mi")]));
    let case = Case::new(vec![managed("n1", "m5a.large")], vec![p]);
    let d = case.decide();
    assert!(d.commands.is_empty(), "{:#?}", d.commands);
    assert_eq!(codes(&d), [("n1".to_string(), RejectCode::NotCheaper)]);
}

#[test]
fn daemonset_and_mirror_pods_do_not_keep_a_node_from_being_empty() {
    let mut ds = on("n1", "agent", "100m");
    ds.daemonset_owned = true;
    let mut mirror = on("n1", "static", "100m");
    mirror.mirror = true;
    let case = Case::new(vec![managed("n1", "m5.large")], vec![ds, mirror]);
    let d = case.decide();
    assert_eq!(methods(&d), [(Method::Emptiness, vec!["n1".to_string()])]);
}

#[test]
fn prices_before_and_after_cover_every_managed_node() {
    let case = Case::new(
        vec![managed("n1", "m5.large"), managed("n2", "m5.large")],
        vec![on("n1", "p", "500m")],
    );
    let d = case.decide();
    assert!((d.price_per_hour.before - 0.192).abs() < 1e-9, "{d:#?}");
    let saved: f64 = d.commands.iter().map(|c| c.savings_per_hour).sum();
    assert!(saved >= 0.096, "the empty node at least: {d:#?}");
    assert!(
        (d.price_per_hour.after - (0.192 - saved)).abs() < 1e-6,
        "{d:#?}"
    );
}

#[test]
fn a_pod_blocker_stops_drift_unless_the_pool_bounds_the_drain_with_a_grace_period() {
    let mut blocker = on("n1", "batch", "3");
    blocker.do_not_disrupt = true;
    let mut case = Case::new(vec![managed("n1", "m5.xlarge")], vec![blocker]);
    case.external_drift = vec![("n1".into(), "AMI no longer selected".into())];
    let d = case.decide();
    assert_eq!(codes(&d), [("n1".to_string(), RejectCode::DoNotDisrupt)]);
    case.pools[0].termination_grace_period = Some(std::time::Duration::from_secs(3600));
    let d = case.decide();
    assert_eq!(methods(&d), [(Method::Drift, vec!["n1".to_string()])]);
    // The node's own do-not-disrupt still blocks.
    case.snapshot.nodes[0].do_not_disrupt = true;
    let d = case.decide();
    assert_eq!(codes(&d), [("n1".to_string(), RejectCode::DoNotDisrupt)]);
}

/// n1-b and n2-c hold pods that may not be disrupted, leaving 2 and 1.2 CPU free;
/// n3-a and n4-d hold a 1-CPU pod each, n5-e a 1.1-CPU one (2.82 free). Packed, both
/// 1-CPU pods fit n1-b, leaving n2-c's 1.2 for n5-e's pod: n3-a, n4-d and n5-e would all
/// go. kube-scheduler binds the first 1-CPU pod to n5-e (the least allocated node that
/// stays) and the second to n1-b: the deletion of n3-a and n4-d counts its pods there,
/// so n5-e receives pods and stays, and no later command counts on room kube-scheduler
/// gives away. (The pool has m5.xlarge only: nothing cheaper replaces them.)
#[test]
fn a_deletion_counts_its_pods_where_kube_scheduler_binds_them_for_the_commands_after_it() {
    let mut fill_b = on("n1-b", "fill-b", "1920m");
    fill_b.do_not_disrupt = true;
    let mut fill_c = on("n2-c", "fill-c", "2720m");
    fill_c.do_not_disrupt = true;
    let mut case = Case::new(
        ["n1-b", "n2-c", "n3-a", "n4-d", "n5-e"]
            .into_iter()
            .map(|n| managed(n, "m5.xlarge"))
            .collect(),
        vec![
            fill_b,
            fill_c,
            on("n3-a", "x-1", "1"),
            on("n4-d", "x-2", "1"),
            on("n5-e", "y-1", "1100m"),
        ],
    );
    // Nothing cheaper to replace them with: deletions only.
    case.pools = vec![pool_of_types(&["m5.xlarge"])];
    let d = case.decide();
    assert_eq!(
        methods(&d),
        [(
            Method::MultiNode,
            vec!["n3-a".to_string(), "n4-d".to_string()]
        )],
        "{d:#?}"
    );
    assert_eq!(
        d.commands[0].moves,
        [
            Move {
                target: "n1-b".into(),
                pods: vec!["default/x-2".into()]
            },
            Move {
                target: "n5-e".into(),
                pods: vec!["default/x-1".into()]
            },
        ]
    );
    assert!(
        codes(&d).iter().any(|(node, _)| node == "n5-e"),
        "n5-e stays: {d:#?}"
    );
}

/// Karpenter's "should consolidate the node with best savings ratio first": two equal
/// nodes, the older with two pods, the younger with one; only one can go (a budget of
/// 50%: one node). The younger has the better ratio (price over 1 + one pod) and goes,
/// though it is far from expiry and the other is near it: age no longer counts.
#[test]
fn the_node_with_the_best_savings_ratio_is_consolidated_first_whatever_its_age() {
    let mut young = managed("z-young", "m5.xlarge");
    young.created_at = Some(NOW - 3600);
    let mut aged = managed("a-aged", "m5.xlarge");
    aged.created_at = Some(NOW - 700 * 3600);
    let mut case = Case::new(
        vec![young, aged],
        vec![
            on("a-aged", "a", "1"),
            on("a-aged", "b", "1"),
            on("z-young", "c", "1"),
        ],
    );
    case.pools = vec![pool(50)];
    let d = case.decide();
    assert_eq!(d.commands.len(), 1, "{d:#?}");
    assert_eq!(d.commands[0].nodes, ["z-young"]);
}

/// Random fragmented clusters: whatever the decision, applying every command leaves
/// each pod on a node (or replacement) its requests fit, no two pods of an
/// anti-affine app on one node, every managed node accounted for once, and every
/// consolidation cheaper.
#[test]
fn applying_any_decision_leaves_every_pod_fitting_and_every_node_accounted_for() {
    use crate::testing::affinity_term;
    let catalog = Catalog::embedded();
    let types = [
        "m5.large",
        "m5.xlarge",
        "m5.2xlarge",
        "c5.xlarge",
        "r5.large",
    ];
    let mut seed: u64 = 0x5eed;
    let mut next = |n: u64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    // Rounds 15 and up: 60 nodes, some drifted, where a command that moved pods onto a
    // node a later command removes would leave them on a removed node (checked below).
    let mut large_commands_moving_pods = 0;
    for round in 0..20 {
        let mut nodes = Vec::new();
        let mut pods = Vec::new();
        let count = if round < 15 { 2 + next(9) } else { 60 };
        let mut drifted = Vec::new();
        for i in 0..count {
            let name = format!("n{i}");
            let it = types[next(types.len() as u64) as usize];
            let node = managed(&name, it);
            let mut free = node.allocatable.get_milli("cpu");
            for k in 0..next(6) {
                let cpu = 100 * (1 + next(12)) as i64;
                if cpu > free {
                    break;
                }
                free -= cpu;
                let mut p = on(&name, &format!("p{i}x{k}"), &format!("{cpu}m"));
                if next(4) == 0 {
                    p.labels.insert("app".into(), "solo".into());
                    p.pod_anti_affinity =
                        vec![affinity_term(crate::well_known::LABEL_HOSTNAME, "solo")].into();
                    if pods.iter().any(|q: &Pod| {
                        q.node_name == p.node_name
                            && q.labels.get("app").map(String::as_str) == Some("solo")
                    }) {
                        continue;
                    }
                }
                pods.push(p);
            }
            if round >= 15 && next(8) == 0 {
                drifted.push((
                    name.clone(),
                    "AMI ami-old is no longer selected".to_string(),
                ));
            }
            nodes.push(node);
        }
        let mut case = Case::new(nodes, pods);
        case.external_drift = drifted;
        let d = case.decide();
        if round >= 15 {
            large_commands_moving_pods += d.commands.iter().filter(|c| !c.moves.is_empty()).count();
        }
        let by_key: HashMap<String, &Pod> =
            case.snapshot.pods.iter().map(|p| (p.key(), p)).collect();
        // Every managed node once.
        let mut seen: HashSet<&str> = HashSet::new();
        for n in d
            .commands
            .iter()
            .flat_map(|c| &c.nodes)
            .chain(d.rejected.iter().map(|r| &r.node))
        {
            assert!(seen.insert(n), "round {round}: {n} twice: {d:#?}");
        }
        assert_eq!(seen.len(), case.snapshot.nodes.len(), "round {round}");
        // Where every pod ends up.
        let mut home: HashMap<String, String> = case
            .snapshot
            .pods
            .iter()
            .map(|p| (p.key(), p.node_name.clone().unwrap()))
            .collect();
        let mut capacity: HashMap<String, i64> = case
            .snapshot
            .nodes
            .iter()
            .map(|n| (n.name.clone(), n.allocatable.get_milli("cpu")))
            .collect();
        for (ci, c) in d.commands.iter().enumerate() {
            let mut moved: Vec<&String> = c.moves.iter().flat_map(|m| &m.pods).collect();
            for m in &c.moves {
                for p in &m.pods {
                    home.insert(p.clone(), m.target.clone());
                }
            }
            for (k, r) in c.replacements.iter().enumerate() {
                let name = format!("command-{}-replacement-{}", ci + 1, k + 1);
                let cpu = catalog
                    .get(&r.instance_type)
                    .unwrap()
                    .allocatable
                    .get_milli("cpu");
                capacity.insert(name.clone(), cpu);
                for p in &r.pods {
                    home.insert(p.clone(), name.clone());
                    moved.push(p);
                }
            }
            let mut expected: Vec<String> = case
                .snapshot
                .pods
                .iter()
                .filter(|p| c.nodes.contains(p.node_name.as_ref().unwrap()))
                .map(|p| p.key())
                .collect();
            expected.sort();
            let mut moved: Vec<String> = moved.into_iter().cloned().collect();
            moved.sort();
            assert_eq!(
                moved,
                expected,
                "round {round}: command {} moves exactly its nodes' pods",
                ci + 1
            );
            if c.reason == Reason::Underutilized || c.reason == Reason::Empty {
                assert!(c.savings_per_hour > 0.0, "round {round}: {c:#?}");
            }
            for n in &c.nodes {
                capacity.remove(n);
            }
        }
        let mut used: HashMap<&str, i64> = HashMap::new();
        let mut solo: HashSet<&str> = HashSet::new();
        for (key, node) in &home {
            let Some(cap) = capacity.get(node) else {
                panic!("round {round}: {key} is left on removed node {node}: {d:#?}");
            };
            let pod = by_key[key];
            let u = used.entry(node).or_default();
            *u += pod.requests.get_milli("cpu");
            assert!(*u <= *cap, "round {round}: {node} over its cpu: {d:#?}");
            if pod.labels.get("app").map(String::as_str) == Some("solo") {
                assert!(
                    solo.insert(node),
                    "round {round}: two solo pods on {node}: {d:#?}"
                );
            }
        }
    }
    // The 60-node rounds did move pods between nodes that stay (the case checked).
    assert!(
        large_commands_moving_pods > 5,
        "{large_commands_moving_pods}"
    );
}
