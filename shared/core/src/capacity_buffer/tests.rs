//! CapacityBuffers from manifest to decision: the CRD's rules, the replica count as
//! Karpenter computes it, virtual pods, provisioning (after real pods, under NodePool
//! limits), the conditions, and the room they hold through disruption.

use super::*;
use crate::api::buffer::ACTIVE_CAPACITY;
use crate::api::load;
use crate::api::model::{Budget, BudgetNodes, NodePool};
use crate::catalog::Catalog;
use crate::disruption::{DisruptionInput, RejectCode, decide};
use crate::pricing::Pricing;
use crate::resources::Resources;
use crate::testing::{bound_pod, general_purpose_pool, initialized_node, pod, resources};

const NOW: i64 = 2_000_000_000;

fn manifests(text: &str) -> crate::api::Manifests {
    load(&[("buffers.yaml".to_string(), text.to_string())]).unwrap_or_else(|e| panic!("{e}"))
}

fn problems(text: &str) -> String {
    match load(&[("buffers.yaml".to_string(), text.to_string())]) {
        Ok(m) => panic!("expected problems, loaded {m:?}"),
        Err(e) => e.to_string(),
    }
}

const TEMPLATE: &str = "apiVersion: v1\nkind: PodTemplate\nmetadata: {name: chunk, namespace: web}\ntemplate:\n  metadata: {labels: {app: spare}}\n  spec:\n    containers: [{name: c, image: x, resources: {requests: {cpu: '1', memory: 1Gi}}}]\n    volumes: [{name: data, persistentVolumeClaim: {claimName: data}}, {name: cfg, configMap: {name: cfg}}]\n";

fn buffer(spec: &str) -> String {
    format!(
        "apiVersion: autoscaling.x-k8s.io/v1beta1\nkind: CapacityBuffer\nmetadata: {{name: spare, namespace: web}}\nspec:\n{spec}---\n{TEMPLATE}"
    )
}

fn one_buffer(spec: &str) -> CapacityBuffer {
    manifests(&buffer(spec)).capacity_buffers.remove(0)
}

#[test]
fn the_crd_rules_refuse_both_refs_a_template_without_a_count_and_negative_counts() {
    let both = problems(&buffer(
        "  podTemplateRef: {name: chunk}\n  scalableRef: {kind: Deployment, name: web}\n  replicas: 1\n",
    ));
    assert!(
        both.contains("CapacityBuffer \"web/spare\": spec: You must define either PodTemplateRef or ScalableRef, but not both"),
        "{both}"
    );
    let bare = problems(&buffer("  podTemplateRef: {name: chunk}\n"));
    assert!(
        bare.contains("spec: If podTemplateRef is set, replicas or limits must also be set"),
        "{bare}"
    );
    let negative = problems(&buffer("  podTemplateRef: {name: chunk}\n  replicas: -1\n"));
    assert!(
        negative.contains("spec.replicas: -1 should be greater than or equal to 0"),
        "{negative}"
    );
    let unnamed = problems(&buffer("  scalableRef: {kind: Deployment, name: ''}\n"));
    assert!(
        unnamed.contains("spec.scalableRef.name: must be at least 1 character long"),
        "{unnamed}"
    );
    let quantity = problems(&buffer(
        "  podTemplateRef: {name: chunk}\n  limits: {cpu: lots}\n",
    ));
    assert!(
        quantity.contains("spec.limits.cpu: \"lots\" is not a quantity"),
        "{quantity}"
    );
    // Schema-valid, refused only when resolved: a scalableRef alone, neither ref.
    assert_eq!(
        one_buffer("  scalableRef: {kind: Deployment, name: web}\n").replicas,
        None
    );
    assert_eq!(one_buffer("  replicas: 2\n").source, None);
    assert_eq!(
        one_buffer("  replicas: 2\n").provisioning_strategy,
        ACTIVE_CAPACITY
    );
}

fn sized(
    replicas: Option<i32>,
    percentage: Option<i32>,
    cpu_limit: Option<&str>,
    workload: i32,
) -> i32 {
    let b = CapacityBuffer {
        namespace: "web".into(),
        name: "spare".into(),
        generation: 1,
        source: None,
        replicas,
        percentage,
        limits: cpu_limit.map(|l| resources(&[("cpu", l)])),
        provisioning_strategy: ACTIVE_CAPACITY.into(),
    };
    let mut chunk = Resources::one_pod();
    chunk.add(&resources(&[("cpu", "1"), ("memory", "1Gi")]));
    buffer_replicas(&b, Some(workload), &chunk)
}

#[test]
fn replicas_are_the_larger_of_replicas_and_percentage_capped_by_limits() {
    // Karpenter's table (capacitybuffer suite, "should resolve buffer replicas").
    assert_eq!(sized(Some(7), None, None, 10), 7);
    assert_eq!(sized(Some(10), None, Some("3"), 10), 3);
    assert_eq!(sized(Some(3), None, Some("10"), 10), 3);
    assert_eq!(sized(None, None, Some("5"), 10), 5);
    assert_eq!(sized(None, Some(20), None, 10), 2);
    assert_eq!(sized(Some(5), Some(20), None, 10), 5);
    assert_eq!(sized(Some(5), Some(80), None, 10), 8);
    assert_eq!(sized(Some(5), Some(80), Some("4"), 10), 4);
    assert_eq!(
        sized(None, Some(10), None, 1),
        1,
        "rounded up, at least one"
    );
    assert_eq!(
        sized(None, Some(50), None, 0),
        0,
        "a workload at zero adds nothing"
    );
    assert_eq!(sized(None, None, Some("1500m"), 10), 1, "floor");
    assert_eq!(sized(None, None, None, 10), 0);
    // A limit on a resource the chunk does not request is ignored.
    let b = CapacityBuffer {
        limits: Some(resources(&[("nvidia.com/gpu", "1"), ("pods", "2")])),
        ..one_buffer("  scalableRef: {kind: Deployment, name: web}\n  replicas: 6\n")
    };
    let chunk = resources(&[("cpu", "1"), ("pods", "1")]);
    assert_eq!(buffer_replicas(&b, Some(1), &chunk), 6);
    assert_eq!(sized(None, None, Some("100000"), 10), MAX_VIRTUAL_PODS);
}

fn workload(kind: &str, replicas: Option<i32>) -> ScalableWorkload {
    let template: k8s_openapi::api::core::v1::PodTemplateSpec =
        serde_json::from_value(serde_json::json!({"metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "500m"}}}]}}))
        .unwrap_or_default();
    crate::snapshot::scalable_workload(
        kind,
        &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some("web".into()),
            namespace: Some("web".into()),
            ..Default::default()
        },
        replicas,
        template,
    )
}

#[test]
fn a_buffer_resolves_its_template_or_says_why_not_as_karpenter_does() {
    let m = manifests(&buffer("  podTemplateRef: {name: chunk}\n  replicas: 2\n"));
    let r = resolve_buffers(&m.capacity_buffers, &m.pod_templates, &[]);
    let resolved = r[0].outcome.clone().unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(resolved.replicas, 2);
    assert_eq!(resolved.pod_template, Some(("chunk".to_string(), 1)));
    assert!(
        resolved.chunk.claims.is_empty(),
        "the claim's volume is dropped"
    );

    let missing = resolve_buffers(&m.capacity_buffers, &[], &[]);
    let why = missing[0].outcome.clone().unwrap_err();
    assert_eq!(
        (why.reason, why.message.as_str()),
        ("PodTemplateNotFound", "podtemplates \"chunk\" not found")
    );

    let by_percent = one_buffer("  scalableRef: {kind: Deployment, name: web}\n  percentage: 50\n");
    let r = resolve_buffers(
        std::slice::from_ref(&by_percent),
        &[],
        &[workload("Deployment", Some(5))],
    );
    assert_eq!(r[0].outcome.as_ref().map(|r| r.replicas), Ok(3));
    // spec.replicas unset is the API server's default, 1.
    let r = resolve_buffers(
        std::slice::from_ref(&by_percent),
        &[],
        &[workload("Deployment", None)],
    );
    assert_eq!(r[0].outcome.as_ref().map(|r| r.replicas), Ok(1));
    let r = resolve_buffers(
        std::slice::from_ref(&by_percent),
        &[],
        &[workload("StatefulSet", Some(5))],
    );
    assert_eq!(
        r[0].outcome.clone().unwrap_err().reason,
        "ScalableRefNotFound"
    );

    let job = one_buffer("  scalableRef: {apiGroup: batch, kind: Job, name: web}\n");
    let r = resolve_buffers(&[job], &[], &[]);
    assert_eq!(
        r[0].outcome.clone().unwrap_err().message,
        "unsupported scalableRef API group \"batch\""
    );
    let kind = one_buffer("  scalableRef: {kind: DaemonSet, name: web}\n");
    let r = resolve_buffers(&[kind], &[], &[]);
    assert_eq!(
        r[0].outcome.clone().unwrap_err().message,
        "unsupported kind \"DaemonSet\""
    );
    let neither = one_buffer("  replicas: 2\n");
    let r = resolve_buffers(&[neither], &[], &[]);
    assert_eq!(
        r[0].outcome.clone().unwrap_err(),
        NotReady {
            reason: "ResolutionFailed",
            message: "Neither podTemplateRef nor scalableRef is set".into()
        }
    );
}

#[test]
fn virtual_pods_carry_the_template_at_the_lowest_priority_and_no_budget_counts_them() {
    let m = manifests(&buffer("  podTemplateRef: {name: chunk}\n  replicas: 2\n"));
    let r = resolve_buffers(&m.capacity_buffers, &m.pod_templates, &[]);
    let pods = virtual_pods(&m.capacity_buffers, &r);
    let names: Vec<String> = pods.iter().map(|p| p.key()).collect();
    assert_eq!(
        names,
        ["web/capacity-buffer-spare-1", "web/capacity-buffer-spare-2"]
    );
    for p in &pods {
        assert_eq!(p.priority, Some(VIRTUAL_POD_PRIORITY));
        assert!(p.wants_capacity());
        assert_eq!(p.labels.get("app").map(String::as_str), Some("spare"));
        assert_eq!(p.capacity_buffer.as_deref(), Some("web/spare"));
        assert_eq!(p.requests.get_milli("cpu"), 1000);
    }
    let budget = crate::cluster::PodDisruptionBudget {
        namespace: "web".into(),
        name: "spare".into(),
        selector: Some(crate::testing::selector("spare")),
        min_available: None,
        max_unavailable: Some(crate::cluster::IntOrPercent::Int(1)),
        status_disruptions_allowed: None,
    };
    assert!(!budget.selects(&pods[0]));
}

struct Cluster {
    snapshot: ClusterSnapshot,
    pools: Vec<NodePool>,
    pricing: Pricing,
}

impl Cluster {
    fn new(nodes: Vec<crate::cluster::Node>, pods: Vec<Pod>) -> Self {
        let mut pool = general_purpose_pool();
        pool.disruption.budgets = vec![Budget {
            nodes: BudgetNodes::Percent(100),
            schedule: None,
            duration: None,
            reasons: vec![],
        }];
        Self {
            snapshot: ClusterSnapshot {
                nodes,
                pods,
                ..Default::default()
            },
            pools: vec![pool],
            pricing: Pricing::for_zones(vec!["us-east-1a".into()]),
        }
    }

    fn input<'a>(&'a self, snapshot: &'a ClusterSnapshot) -> ProvisioningInput<'a> {
        ProvisioningInput {
            snapshot,
            node_pools: &self.pools,
            node_classes: &[],
            catalog: Catalog::embedded(),
            pricing: &self.pricing,
            in_flight: &[],
        }
    }

    fn plan(&self, virtual_pods: &[Pod]) -> ProvisioningPlan {
        let snapshot = with_pods(&self.snapshot, virtual_pods);
        plan_provisioning(&self.input(&snapshot))
    }

    fn decide(&self, virtual_pods: &[Pod]) -> (crate::disruption::Decision, Vec<Pod>) {
        let room = buffer_room(&self.input(&self.snapshot), virtual_pods);
        let snapshot = with_pods(&self.snapshot, &room);
        let decision = decide(&DisruptionInput {
            snapshot: &snapshot,
            node_pools: &self.pools,
            node_classes: &[],
            catalog: Catalog::embedded(),
            pricing: &self.pricing,
            in_flight: &[],
            now: NOW,
            spot_to_spot: false,
            external_drift: &[],
            disrupting: &[],
            nominated: &[],
            validating: None,
        });
        (decision, room)
    }
}

fn managed(name: &str, instance_type: &str) -> crate::cluster::Node {
    initialized_node(name, instance_type, NOW)
}

fn bound(node: &str, name: &str, cpu: &str) -> Pod {
    bound_pod(node, name, cpu, NOW)
}

fn chunks(replicas: i32, cpu: &str) -> (Vec<Resolution>, Vec<Pod>) {
    let mut chunk = pod("chunk", cpu, "512Mi");
    chunk.marked_unschedulable = false;
    let b = CapacityBuffer {
        namespace: "default".into(),
        name: "spare".into(),
        generation: 1,
        source: None,
        replicas: Some(replicas),
        percentage: None,
        limits: None,
        provisioning_strategy: ACTIVE_CAPACITY.into(),
    };
    let resolutions = vec![Resolution {
        buffer: b.key(),
        outcome: Ok(Resolved {
            replicas,
            chunk,
            pod_template: None,
        }),
    }];
    let pods = virtual_pods(std::slice::from_ref(&b), &resolutions);
    (resolutions, pods)
}

fn condition(status: &BufferStatus, kind: &str) -> (String, String, String) {
    let c = status
        .conditions
        .iter()
        .find(|c| c.kind == kind)
        .unwrap_or_else(|| panic!("no {kind} in {status:?}"));
    (
        c.status.to_string(),
        c.reason.to_string(),
        c.message.clone(),
    )
}

#[test]
fn a_buffer_that_fits_existing_nodes_launches_nothing_and_one_that_does_not_launches() {
    // m5.xlarge: ~3.9 CPU allocatable; 1 CPU is used.
    let cluster = Cluster::new(
        vec![managed("a", "m5.xlarge")],
        vec![bound("a", "web-1", "1")],
    );
    let (resolutions, fits) = chunks(2, "1");
    let plan = cluster.plan(&fits);
    assert!(plan.node_claims.is_empty(), "{plan:#?}");
    let status = &buffer_statuses(&resolutions, &fits, &plan)[0];
    assert_eq!(
        condition(status, "Provisioning"),
        (
            "True".into(),
            "FitsExistingCapacity".into(),
            "All 2 virtual pods fit on existing capacity".into()
        )
    );
    assert_eq!(condition(status, "ReadyForProvisioning").1, "Resolved");

    let (resolutions, more) = chunks(5, "1");
    let plan = cluster.plan(&more);
    assert_eq!(plan.node_claims.len(), 1, "{plan:#?}");
    let status = &buffer_statuses(&resolutions, &more, &plan)[0];
    assert_eq!(
        condition(status, "Provisioning"),
        (
            "False".into(),
            "RequiresNewCapacity".into(),
            "3/5 virtual pods required new capacity, 0 failed".into()
        )
    );
}

#[test]
fn a_real_pending_pod_takes_free_room_before_a_buffer_does() {
    let cluster = Cluster::new(
        vec![managed("a", "m5.large")],
        vec![bound("a", "web-1", "500m"), pod("late-1", "1", "512Mi")],
    );
    // m5.large has ~1.9 CPU: room for one more 1-CPU pod, which the real one gets.
    let (_, spare) = chunks(1, "1");
    let plan = cluster.plan(&spare);
    let on_a: Vec<&String> = plan.existing_nodes.iter().flat_map(|a| &a.pods).collect();
    assert_eq!(on_a, ["default/late-1"], "{plan:#?}");
    assert_eq!(plan.node_claims.len(), 1);
    assert_eq!(
        plan.node_claims[0].pods,
        ["default/capacity-buffer-spare-1"]
    );
}

#[test]
fn virtual_pods_count_against_node_pool_limits_and_what_does_not_fit_fails() {
    let mut cluster = Cluster::new(vec![], vec![]);
    cluster.pools[0].limits = Some(resources(&[("cpu", "4")]));
    let (resolutions, pods) = chunks(10, "1");
    let plan = cluster.plan(&pods);
    let cpus: i64 = plan
        .node_claims
        .iter()
        .map(|c| {
            Catalog::embedded()
                .get(&c.instance_type)
                .map_or(0, |t| t.capacity.get_milli("cpu"))
        })
        .sum();
    assert!(cpus <= 4000, "{plan:#?}");
    let status = &buffer_statuses(&resolutions, &pods, &plan)[0];
    assert!(status.failed > 0, "{status:?}");
    assert_eq!(condition(status, "Provisioning").1, "RequiresNewCapacity");
}

/// Every virtual pod on a command's nodes goes somewhere: a move or a replacement.
fn room_kept(d: &crate::disruption::Decision, room: &[Pod]) {
    for c in &d.commands {
        for p in room.iter().filter(|p| {
            c.nodes
                .contains(p.node_name.as_ref().unwrap_or(&String::new()))
        }) {
            let key = p.key();
            let placed = c.moves.iter().any(|m| m.pods.contains(&key))
                || c.replacements.iter().any(|r| r.pods.contains(&key));
            assert!(placed, "{key} lost its room in {c:#?}");
        }
    }
}

#[test]
fn a_node_holding_only_buffer_room_is_neither_empty_nor_consolidated_until_the_buffer_goes() {
    let cluster = Cluster::new(
        vec![managed("busy", "m5.xlarge"), managed("spare", "m5.large")],
        vec![bound("busy", "web-1", "3")],
    );
    // One 1-CPU chunk: busy has ~0.9 CPU free, so it sits on spare.
    let (_, pods) = chunks(1, "1");
    let (d, room) = cluster.decide(&pods);
    assert_eq!(room.len(), 1);
    assert_eq!(room[0].node_name.as_deref(), Some("spare"));
    assert!(
        !d.commands
            .iter()
            .any(|c| c.nodes.contains(&"spare".to_string())),
        "{d:#?}"
    );
    let spare = d.rejected.iter().find(|r| r.node == "spare");
    assert_eq!(
        spare.map(|r| r.code),
        Some(RejectCode::CapacityBuffer),
        "{d:#?}"
    );
    assert!(
        spare.is_some_and(|r| r.reason.contains("CapacityBuffer default/spare")),
        "{spare:?}"
    );
    room_kept(&d, &room);
    // Without the buffer the node is empty and goes.
    let (d, _) = cluster.decide(&[]);
    let empty = d.commands.iter().find(|c| c.nodes == ["spare"]);
    assert_eq!(
        empty.map(|c| c.method),
        Some(crate::disruption::Method::Emptiness),
        "{d:#?}"
    );
}

#[test]
fn a_consolidation_keeps_the_room_of_the_buffer_it_displaces() {
    // Two m5.xlarge with 1 CPU of real pods each: without a buffer they consolidate to
    // something small. With a 2-CPU chunk on each node, whatever replaces them holds
    // the chunks too.
    let cluster = Cluster::new(
        vec![managed("a", "m5.xlarge"), managed("b", "m5.xlarge")],
        vec![bound("a", "web-1", "1"), bound("b", "web-2", "1")],
    );
    let (without, _) = cluster.decide(&[]);
    assert!(!without.commands.is_empty(), "{without:#?}");
    let (_, pods) = chunks(2, "2");
    let (d, room) = cluster.decide(&pods);
    assert_eq!(room.len(), 2, "one chunk on each node");
    room_kept(&d, &room);
    let after = |d: &crate::disruption::Decision| d.price_per_hour.after;
    assert!(
        after(&d) > after(&without),
        "the buffer's room costs: {} vs {}",
        after(&d),
        after(&without)
    );
}
