//! Builders for tests and benchmarks, and an independent checker of plans: it re-derives
//! from first principles that every placement honours requests, requirements, taints
//! and hard topology, so packer tests can assert "no constraint broken" on any input.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use crate::api::model::*;
use crate::catalog::Catalog;
use crate::cluster::*;
use crate::provisioning::ProvisioningPlan;
use crate::resources::Resources;
use crate::scheduling::Requirements;
use crate::well_known::{LABEL_CAPACITY_TYPE, LABEL_HOSTNAME, LABEL_ZONE};

pub fn req(key: &str, operator: Operator, values: &[&str]) -> NodeRequirement {
    NodeRequirement {
        key: key.into(),
        operator,
        values: values.iter().map(|v| v.to_string()).collect(),
        min_values: None,
    }
}

/// A NodePool with Karpenter's defaults and the given requirements.
pub fn node_pool(name: &str, requirements: Vec<NodeRequirement>) -> NodePool {
    let mut requirements = requirements;
    if !requirements.iter().any(|r| r.key == LABEL_CAPACITY_TYPE) {
        requirements.push(req(LABEL_CAPACITY_TYPE, Operator::In, &["on-demand"]));
    }
    NodePool {
        name: name.into(),
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
        requirements,
        taints: vec![],
        startup_taints: vec![],
        node_class_ref: NodeClassRef {
            group: "karpenter.k8s.aws".into(),
            kind: "EC2NodeClass".into(),
            name: "default".into(),
        },
        expire_after: Some(Duration::from_secs(720 * 3600)),
        termination_grace_period: None,
        limits: None,
        node_limit: None,
        weight: 0,
        replicas: None,
        disruption: Disruption {
            consolidation_policy: ConsolidationPolicy::WhenEmptyOrUnderutilized,
            consolidate_after: Some(Duration::ZERO),
            budgets: vec![Budget {
                nodes: BudgetNodes::Percent(10),
                schedule: None,
                duration: None,
                reasons: vec![],
            }],
        },
    }
}

/// Karpenter's general-purpose example: amd64 linux on-demand c/m/r, generation > 2.
pub fn general_purpose_pool() -> NodePool {
    node_pool(
        "general-purpose",
        vec![
            req("kubernetes.io/arch", Operator::In, &["amd64"]),
            req("kubernetes.io/os", Operator::In, &["linux"]),
            req(LABEL_CAPACITY_TYPE, Operator::In, &["on-demand"]),
            req(
                "karpenter.k8s.aws/instance-category",
                Operator::In,
                &["c", "m", "r"],
            ),
            req(
                "karpenter.k8s.aws/instance-generation",
                Operator::Gt,
                &["2"],
            ),
        ],
    )
}

pub fn resources(pairs: &[(&str, &str)]) -> Resources {
    let mut r = Resources::new();
    for (k, v) in pairs {
        r.set_quantity(k, v).expect("test quantity");
    }
    r
}

/// A pending pod requesting `cpu` and `memory` (plus its pod slot), which kube-scheduler
/// has marked Unschedulable (so capacity may be launched for it).
pub fn pod(name: &str, cpu: &str, memory: &str) -> Pod {
    let mut requests = Resources::one_pod();
    requests.add(&resources(&[("cpu", cpu), ("memory", memory)]));
    Pod::from(PodFields {
        namespace: "default".into(),
        name: name.into(),
        labels: BTreeMap::from([(
            "app".to_string(),
            name.split('-').next().unwrap_or(name).to_string(),
        )])
        .into(),
        requests,
        marked_unschedulable: true,
        ..PodFields::default()
    })
}

pub fn selector(app: &str) -> LabelSelector {
    LabelSelector {
        match_labels: BTreeMap::from([("app".to_string(), app.to_string())]),
        match_expressions: vec![],
    }
}

pub fn spread(key: &str, app: &str) -> TopologySpreadConstraint {
    TopologySpreadConstraint {
        max_skew: 1,
        topology_key: key.into(),
        when_unsatisfiable: WhenUnsatisfiable::DoNotSchedule,
        label_selector: Some(selector(app)),
        min_domains: None,
        honor_node_affinity: true,
        honor_node_taints: false,
    }
}

pub fn affinity_term(key: &str, app: &str) -> PodAffinityTerm {
    PodAffinityTerm {
        label_selector: Some(selector(app)),
        topology_key: key.into(),
        namespaces: vec!["default".into()],
    }
}

pub fn node(name: &str, instance_type: &str, zone: &str, pool: &str, catalog: &Catalog) -> Node {
    let it = catalog
        .get(instance_type)
        .expect("instance type in catalog");
    let mut labels = it.labels.clone();
    labels.insert(LABEL_ZONE.into(), zone.into());
    labels.insert(LABEL_CAPACITY_TYPE.into(), "on-demand".into());
    labels.insert("karpenter.sh/nodepool".into(), pool.into());
    labels.insert(LABEL_HOSTNAME.into(), name.into());
    Node {
        name: name.into(),
        labels,
        taints: vec![],
        allocatable: it.allocatable.clone(),
        capacity: it.capacity.clone(),
        provider_id: Some(format!("aws:///{zone}/i-0123456789abcdef0")),
        unschedulable: false,
        ready: true,
        ..Node::default()
    }
}

/// A node of the general-purpose pool in us-east-1a that disruption may consider at
/// `now`: initialized, created an hour before and Ready since 3,500 s before.
pub fn initialized_node(name: &str, instance_type: &str, now: i64) -> Node {
    let mut n = node(
        name,
        instance_type,
        "us-east-1a",
        "general-purpose",
        Catalog::embedded(),
    );
    n.labels
        .insert(crate::well_known::LABEL_INITIALIZED.into(), "true".into());
    n.created_at = Some(now - 3600);
    n.ready_since = Some(now - 3500);
    n
}

/// A running pod of `cpu` and 512Mi bound to `node`, created ten minutes before `now`.
pub fn bound_pod(node: &str, name: &str, cpu: &str, now: i64) -> Pod {
    let mut p = pod(name, cpu, "512Mi");
    p.node_name = Some(node.into());
    p.marked_unschedulable = false;
    p.created_at = Some(now - 600);
    p
}

/// Checks a plan against the snapshot it was made for. Returns every violation found.
pub fn violations(
    plan: &ProvisioningPlan,
    snapshot: &ClusterSnapshot,
    pools: &[NodePool],
    catalog: &Catalog,
) -> Vec<String> {
    let mut out = Vec::new();
    let by_key: HashMap<String, &Pod> = snapshot.pods.iter().map(|p| (p.key(), p)).collect();
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for c in plan.node_claims.iter() {
        for p in &c.pods {
            *seen.entry(p.as_str()).or_default() += 1;
        }
    }
    for u in &plan.unschedulable {
        *seen.entry(u.pod.as_str()).or_default() += 1;
    }
    for n in &plan.not_provisioned {
        *seen.entry(n.pod.as_str()).or_default() += 1;
    }
    for a in plan.existing_nodes.iter().chain(plan.in_flight.iter()) {
        for p in &a.pods {
            *seen.entry(p.as_str()).or_default() += 1;
        }
    }
    for p in snapshot.pending_pods() {
        match seen.get(p.key().as_str()) {
            Some(1) => {}
            Some(n) => out.push(format!("{} appears {n} times", p.key())),
            None => out.push(format!("{} is missing from the plan", p.key())),
        }
    }
    // Hostname / zone positions of placed pods for topology checks.
    let mut placed: Vec<(&Pod, String, String)> = Vec::new();
    let type_keys = catalog.label_keys();
    for (ci, c) in plan.node_claims.iter().enumerate() {
        let Some(pool) = pools.iter().find(|p| p.name == c.node_pool) else {
            out.push(format!("claim {ci}: unknown pool {}", c.node_pool));
            continue;
        };
        let Some(it) = catalog.get(&c.instance_type) else {
            out.push(format!("claim {ci}: unknown type {}", c.instance_type));
            continue;
        };
        if c.instance_type_options.first() != Some(&c.instance_type) {
            out.push(format!("claim {ci}: instanceType is not the first option"));
        }
        if c.compatible_instance_types < c.instance_type_options.len() {
            out.push(format!(
                "claim {ci}: {} options but only {} compatible types",
                c.instance_type_options.len(),
                c.compatible_instance_types
            ));
        }
        // minValues holds over the options the launch may use, and only minValues may
        // take the list past the cap.
        let mut needed = 1;
        for (key, set) in c.requirements.iter() {
            let Some(min) = set.min_values else { continue };
            let values: std::collections::BTreeSet<&str> = c
                .instance_type_options
                .iter()
                .filter_map(|t| catalog.get(t)?.labels.get(key).map(String::as_str))
                .collect();
            if values.len() < min as usize {
                out.push(format!(
                    "claim {ci}: options give {} distinct {key}, minValues is {min}",
                    values.len()
                ));
            }
            needed += min as usize;
        }
        if c.instance_type_options.len() > crate::scheduling::MAX_INSTANCE_TYPE_OPTIONS.max(needed)
        {
            out.push(format!(
                "claim {ci}: {} options, more than the cap of {}",
                c.instance_type_options.len(),
                crate::scheduling::MAX_INSTANCE_TYPE_OPTIONS
            ));
        }
        let mut labels = it.labels.clone();
        labels.insert(LABEL_ZONE.into(), c.zone.clone());
        labels.insert(LABEL_CAPACITY_TYPE.into(), c.capacity_type.clone());
        labels.insert("karpenter.sh/nodepool".into(), pool.name.clone());
        labels.extend(pool.labels.clone());
        // Keys no instance type carries (custom labels a NodePool requires) are on the
        // node as the claim says.
        labels.extend(c.labels.clone());
        for (key, set) in c.requirements.iter() {
            if !labels.contains_key(key)
                && !type_keys.contains(key.as_str())
                && key != LABEL_HOSTNAME
                && set.any_value().is_some()
            {
                out.push(format!(
                    "claim {ci}: no value for the label {key} its requirements name"
                ));
            }
        }
        if !Requirements::from_node_requirements(&pool.requirements).matches_labels(&labels) {
            out.push(format!(
                "claim {ci}: {} breaks NodePool {} requirements",
                c.instance_type, pool.name
            ));
        }
        let mut total = Resources::new();
        let mut ports: Vec<(crate::cluster::HostPort, String)> = Vec::new();
        for ds in &snapshot.daemonsets {
            // Conservative: DaemonSets that tolerate the pool and match the node's labels.
            let t = &ds.template;
            let tolerated = pool
                .taints
                .iter()
                .all(|taint| t.tolerations.iter().any(|tol| tol.tolerates(taint)));
            let sel = t
                .node_selector
                .iter()
                .all(|(k, v)| labels.get(k) == Some(v))
                && (t.required_node_terms.is_empty()
                    || t.required_node_terms.iter().any(|term| {
                        Requirements::from_node_requirements(term).matches_labels(&labels)
                    }));
            if tolerated && sel {
                total.add(&t.requests);
                ports.extend(t.host_ports.iter().map(|p| (p.clone(), ds.name.clone())));
            }
        }
        for key in &c.pods {
            let Some(p) = by_key.get(key) else { continue };
            total.add(&p.requests);
            for mine in &p.host_ports {
                if let Some((_, holder)) = ports.iter().find(|(q, _)| q.conflicts_with(mine)) {
                    out.push(format!(
                        "{key}: host port {} also bound by {holder}",
                        mine.port
                    ));
                }
            }
            ports.extend(p.host_ports.iter().map(|q| (q.clone(), key.clone())));
            for (k, v) in &p.node_selector {
                if labels.get(k) != Some(v) {
                    out.push(format!(
                        "{key} on {}: nodeSelector {k}={v} not met",
                        c.instance_type
                    ));
                }
            }
            if !p.required_node_terms.is_empty()
                && !p
                    .required_node_terms
                    .iter()
                    .any(|t| Requirements::from_node_requirements(t).matches_labels(&labels))
            {
                out.push(format!(
                    "{key} on {}: required node affinity not met",
                    c.instance_type
                ));
            }
            for taint in &pool.taints {
                if taint.effect != TaintEffect::PreferNoSchedule
                    && !p.tolerations.iter().any(|t| t.tolerates(taint))
                {
                    out.push(format!("{key}: taint {} not tolerated", taint.key));
                }
            }
            placed.push((p, format!("claim-{ci}"), c.zone.clone()));
        }
        if let Some((name, want, have)) = total.first_shortfall(&it.allocatable) {
            out.push(format!(
                "claim {ci} ({}): {name} {want} > allocatable {have}",
                c.instance_type
            ));
        }
    }
    // Hard anti-affinity on hostname and zone spread among new claims' pods.
    for (i, (p, host, zone)) in placed.iter().enumerate() {
        for term in &p.pod_anti_affinity {
            for (j, (q, host2, zone2)) in placed.iter().enumerate() {
                if i == j || q.namespace != p.namespace {
                    continue;
                }
                let same = match term.topology_key.as_str() {
                    LABEL_HOSTNAME => host == host2,
                    LABEL_ZONE => zone == zone2,
                    _ => false,
                };
                if same
                    && term
                        .label_selector
                        .as_ref()
                        .is_some_and(|s| s.matches(&q.labels))
                {
                    out.push(format!(
                        "{} and {} break anti-affinity on {}",
                        p.key(),
                        q.key(),
                        term.topology_key
                    ));
                }
            }
        }
    }
    out
}

/// Interruption event target: bytes (lossy UTF-8) → `parse_event`; when it parses, decide
/// the action under every rebalance setting and check what a parsed event promises.
/// A NodeClaim record as the store holds it (JSON, the shape DynamoDB items are mapped
/// from), written by this or an older version: it parses or is refused, never panics;
/// what parses survives a round trip, and every step the state machine allows from its
/// state (and an escalation by each cause) produces a record that parses again.
pub fn fuzz_claim(data: &[u8]) {
    use crate::nodeclaim::{ClaimState, Disruption, DisruptionCause, NodeClaim};
    let Ok(claim) = serde_json::from_slice::<NodeClaim>(data) else {
        return;
    };
    let written = serde_json::to_vec(&claim).expect("a parsed claim serializes");
    let mut again: NodeClaim = serde_json::from_slice(&written).expect("and parses again");
    // A price comes back within a rounding of itself (JSON floats are parsed fast, not
    // exactly); everything else exactly.
    let (a, b) = (again.price_per_hour, claim.price_per_hour);
    assert_eq!(a.is_some(), b.is_some());
    if let (Some(a), Some(b)) = (a, b) {
        assert!(a == b || ((a - b) / b).abs() < 1e-12, "{a} vs {b}");
    }
    again.price_per_hour = claim.price_per_hour;
    assert_eq!(again, claim);
    let _ = claim.provider_id();
    let now = claim.updated_at.saturating_add(1);
    for next in [
        ClaimState::Launched,
        ClaimState::Registered,
        ClaimState::Initialized,
        ClaimState::Disrupting,
        ClaimState::Draining,
        ClaimState::Terminating,
        ClaimState::Terminated,
        ClaimState::LaunchFailed,
    ] {
        match claim.transition(next, now, |_| {}) {
            Ok(moved) => {
                assert!(claim.state.can_become(next));
                assert_eq!(moved.state, next);
                assert_eq!(moved.version, claim.version.saturating_add(1));
                let text = serde_json::to_vec(&moved).expect("serializes");
                serde_json::from_slice::<NodeClaim>(&text).expect("parses");
            }
            Err(_) => assert!(!claim.state.can_become(next)),
        }
    }
    if let Some(current) = &claim.disruption {
        for cause in [
            DisruptionCause::SpotInterrupted,
            DisruptionCause::InstanceTerminated,
            DisruptionCause::Unhealthy,
            DisruptionCause::Expired,
        ] {
            let incoming = Disruption {
                cause,
                deadline: Some(now),
                since: now,
                drain_after: None,
                drain_grace: None,
                event: None,
                command: None,
            };
            if let Some(e) = current.escalated_by(&incoming) {
                assert!(e.cause.urgency() >= current.cause.urgency());
            }
        }
    }
}

pub fn fuzz_event(data: &[u8]) {
    use crate::interruption::{Action, EventKind, RebalanceAction, action_for, parse_event};
    let text = String::from_utf8_lossy(data);
    let Ok(event) = parse_event(&text) else {
        return;
    };
    assert_eq!(
        event.kind == EventKind::Ignored,
        event.ignored_reason.is_some(),
        "{event:?}"
    );
    assert_eq!(
        event.kind == EventKind::Ignored,
        event.instance_ids.is_empty(),
        "{event:?}"
    );
    for id in &event.instance_ids {
        assert!(crate::nodeclaim::is_instance_id(id.as_str()), "{id}");
    }
    for rebalance in RebalanceAction::ALL {
        let action = action_for(&event, rebalance);
        assert!(!action.as_str().is_empty());
        if let Action::None { reason } = &action {
            assert!(!reason.is_empty(), "{event:?}");
        }
    }
}

// ---------------------------------------------------------------------------------------
// Fuzz target bodies. The cargo-fuzz targets in `shared/core/fuzz` and the regular test
// `tests/fuzz_corpus.rs` both call these, so a corpus file replays exactly as fuzzed.
// Each one must return normally on every input; a panic (including a failed
// `violations` check) is a bug.
// ---------------------------------------------------------------------------------------

/// The fixed pods the manifests and catalog targets plan against fuzzed NodePools /
/// catalogs: plain pods of a few sizes, one tolerating every taint, one pinned to arm64,
/// two spread over zones and two with hostname anti-affinity.
pub fn fuzz_pods() -> Vec<Pod> {
    let mut pods = vec![
        pod("web-0", "500m", "512Mi"),
        pod("web-1", "2", "4Gi"),
        pod("big-0", "16", "64Gi"),
    ];
    let mut tolerant = pod("tolerant-0", "1", "1Gi");
    tolerant.tolerations.push(Toleration {
        key: String::new(),
        operator: TolerationOperator::Exists,
        value: String::new(),
        effect: None,
    });
    pods.push(tolerant);
    let mut arm = pod("arm-0", "1", "2Gi");
    arm.node_selector
        .insert("kubernetes.io/arch".into(), "arm64".into());
    pods.push(arm);
    for i in 0..2 {
        let mut p = pod(&format!("zonal-{i}"), "250m", "256Mi");
        p.topology_spread.push(spread(LABEL_ZONE, "zonal"));
        pods.push(p);
    }
    for i in 0..2 {
        let mut p = pod(&format!("solo-{i}"), "250m", "256Mi");
        p.pod_anti_affinity
            .push(affinity_term(LABEL_HOSTNAME, "solo"));
        pods.push(p);
    }
    pods
}

/// Plans `snapshot` against `pools` and `catalog` and panics if the independent checker
/// finds a broken constraint.
pub fn plan_and_check(snapshot: &ClusterSnapshot, pools: &[NodePool], catalog: &Catalog) {
    use crate::pricing::Pricing;
    use crate::provisioning::{ProvisioningInput, plan_provisioning};
    let pricing = Pricing::default();
    let plan = plan_provisioning(&ProvisioningInput {
        snapshot,
        node_pools: pools,
        node_classes: &[],
        catalog,
        pricing: &pricing,
        in_flight: &[],
    });
    let broken = violations(&plan, snapshot, pools, catalog);
    assert!(broken.is_empty(), "plan breaks constraints: {broken:#?}");
}

/// Manifests target: bytes (lossy UTF-8) → `parse_documents` → `validate`; when valid,
/// plan [`fuzz_pods`] against the NodePools and the embedded catalog.
pub fn fuzz_manifests(data: &[u8]) {
    fuzz_manifests_with(data, true)
}

/// [`fuzz_manifests`], planning only when `plan` (the corpus test caps planning, which
/// is slow in debug builds).
pub fn fuzz_manifests_with(data: &[u8], plan: bool) {
    let text = String::from_utf8_lossy(data);
    let Ok(docs) = crate::api::parse_documents("fuzz.yaml", &text) else {
        return;
    };
    let Ok(manifests) = crate::api::validate(&docs) else {
        return;
    };
    if !plan || manifests.node_pools.is_empty() {
        return;
    }
    let snapshot = ClusterSnapshot {
        pods: fuzz_pods(),
        ..Default::default()
    };
    plan_and_check(&snapshot, &manifests.node_pools, Catalog::embedded());
}

/// Snapshot target: bytes (lossy UTF-8) → `parse_snapshot`; when it parses, plan it
/// against [`general_purpose_pool`] and the embedded catalog.
pub fn fuzz_snapshot(data: &[u8]) {
    fuzz_snapshot_with(data, true)
}

/// [`fuzz_snapshot`], planning only when `plan`.
pub fn fuzz_snapshot_with(data: &[u8], plan: bool) {
    let text = String::from_utf8_lossy(data);
    let Ok(snapshot) = crate::snapshot::parse_snapshot(&text) else {
        return;
    };
    if !plan {
        return;
    }
    plan_and_check(&snapshot, &[general_purpose_pool()], Catalog::embedded());
}

/// Catalog target: bytes (lossy UTF-8) → `Catalog::from_json`; when it parses, plan
/// [`fuzz_pods`] against a NodePool with no requirements beyond its defaults.
pub fn fuzz_catalog(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let Ok(catalog) = Catalog::from_json(&text) else {
        return;
    };
    let snapshot = ClusterSnapshot {
        pods: fuzz_pods(),
        ..Default::default()
    };
    plan_and_check(&snapshot, &[node_pool("any", vec![])], &catalog);
}
