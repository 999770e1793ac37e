//! KubeCluster against a real Kubernetes control plane (`nodewright_kube::testing`:
//! etcd and kube-apiserver v1.36.3, and where a test needs them the controllers, the
//! scheduler and KWOK, with Karpenter's CRDs and `infra/rbac.yaml`), read and written as
//! the functions' user `nodewright`. Each test starts its own control plane; the product
//! reaches it through a [`FaultProxy`] that counts what it asks and injects what a real
//! server cannot be made to do on cue (a 429, a cut watch). The test's own reads and
//! writes go to the server directly, as cluster-admin, with strict field validation.
//!
//! Modules: `state` (what a tick reads), `errors` (how failures are classified; the
//! token; the version), `nodes` (labels and taints), `drain` (evictions, deletions),
//! `events`, `status` (NodePool and EC2NodeClass conditions), `watch` (the watched
//! view: resumes, expiry, bookmarks, a frozen process), `mirror` (NodeClaim mirrors),
//! `node_overlays`, `scale` (`kubectl scale nodepool`), `rbac` (every verb the
//! adapter uses, and nothing more, as `infra/rbac.yaml` grants), `old_crds` (a
//! cluster with Karpenter v1.1.1's CRDs) and `control_plane` (the harness itself).
//!
//! The read-only test at the end of `errors` reads a real cluster: it is `#[ignore]`d,
//! tests/run.sh runs it when KUBECONFIG is set (and says it skipped it otherwise), and
//! run by hand without KUBECONFIG it fails rather than pass having read nothing.

use std::future::Future;
use std::time::{Duration, Instant};

use nodewright_core::api::model::{Taint, TaintEffect};
use nodewright_engine::ports::{Condition, NodePatch, StatusUpdate};
use nodewright_kube::KubeCluster;
use nodewright_kube::testing::{ControlPlane, FaultProxy, Options, objects};
use serde_json::{Value, json};

const EXAMPLES: [(&str, &str); 5] = [
    (
        "100-cpu-limit.yaml",
        include_str!("../../core/tests/fixtures/nodepools/100-cpu-limit.yaml"),
    ),
    (
        "general-purpose.yaml",
        include_str!("../../core/tests/fixtures/nodepools/general-purpose.yaml"),
    ),
    (
        "min-values-family.yaml",
        include_str!("../../core/tests/fixtures/nodepools/min-values-family.yaml"),
    ),
    (
        "multiple-arch.yaml",
        include_str!("../../core/tests/fixtures/nodepools/multiple-arch.yaml"),
    ),
    (
        "spot.yaml",
        include_str!("../../core/tests/fixtures/nodepools/spot.yaml"),
    ),
];

const UNREGISTERED: &str = "karpenter.sh/unregistered";
/// 2025-01-01T00:00:00Z
const T0: i64 = 1_735_689_600;

// ----- the control plane a test runs against ---------------------------------------------

/// A control plane, the proxy in front of it, and the product's cluster port through
/// the proxy as the functions' user.
struct Setup {
    cp: ControlPlane,
    proxy: FaultProxy,
    cluster: KubeCluster,
}

/// etcd and kube-apiserver only (nothing binds, runs or changes what the test writes),
/// Karpenter v1.15.1's CRDs, `infra/rbac.yaml`, and the namespaces the fixtures use.
async fn api_server() -> Setup {
    setup(Options::api_server_only()).await
}

async fn setup(options: Options) -> Setup {
    let cp = ControlPlane::start_with(options).await;
    for name in ["team-a", "team-b"] {
        cp.put(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}))
            .await;
    }
    let proxy = FaultProxy::start(&cp).await;
    let cluster = cp.cluster_at(&proxy.url(), None, &cp.nodewright().token);
    Setup { cp, proxy, cluster }
}

impl Setup {
    /// Another process of the functions (a cold start) through the same proxy.
    fn another_process(&self) -> KubeCluster {
        self.cp
            .cluster_at(&self.proxy.url(), None, &self.cp.nodewright().token)
    }
}

/// Checks `check` until it holds, or fails the test after `within` saying `what`.
async fn eventually<F, Fut>(what: &str, within: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if check().await {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether the functions' user may `verb` the `resource` (a SelfSubjectAccessReview as
/// that user: the authorizer every request of theirs goes through).
async fn nodewright_may(cp: &ControlPlane, verb: &str, group: &str, resource: &str) -> bool {
    let review = json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"verb": verb, "group": group, "resource": resource}},
    });
    let answer = objects::send(
        cp.cluster().client(),
        http::Method::POST,
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        "application/json",
        Some(&review),
    )
    .await
    .expect("a SelfSubjectAccessReview");
    answer["status"]["allowed"] == true
}

/// Narrows the functions' ClusterRole with `change` (a real RBAC refusal, as a cluster
/// whose role lacks a rule), and waits until the authorizer refuses `verb` on
/// `resource` to them.
async fn narrow_role(
    cp: &ControlPlane,
    change: impl FnMut(&mut Value),
    (verb, group, resource): (&str, &str, &str),
) {
    cp.modify("ClusterRole", None, "nodewright", change)
        .await
        .expect("the functions' ClusterRole");
    eventually(
        &format!("RBAC refuses {verb} {resource}"),
        Duration::from_secs(30),
        || async { !nodewright_may(cp, verb, group, resource).await },
    )
    .await;
}

/// The role without `resource` in any rule (a rule left with no resource goes).
fn without_resource(resource: &str) -> impl FnMut(&mut Value) + '_ {
    move |role| {
        let rules = role["rules"].as_array_mut().expect("rules");
        for rule in rules.iter_mut() {
            if let Some(resources) = rule["resources"].as_array_mut() {
                resources.retain(|r| r != resource);
            }
        }
        rules.retain(|r| {
            r.get("resources")
                .and_then(Value::as_array)
                .is_none_or(|r| !r.is_empty())
        });
    }
}

// ----- fixtures ------------------------------------------------------------------------

/// Every document of a Karpenter example manifest, as JSON.
fn example_objects(text: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|doc| serde::Deserialize::deserialize(doc).expect("the example is YAML"))
        .filter(|v: &Value| !v.is_null())
        .collect()
}

fn default_node_class() -> Value {
    example_objects(EXAMPLES[1].1)
        .into_iter()
        .find(|o| o["kind"] == "EC2NodeClass")
        .expect("general-purpose.yaml has an EC2NodeClass")
}

fn node_pool(name: &str) -> Value {
    let mut pool = example_objects(EXAMPLES[1].1)
        .into_iter()
        .find(|o| o["kind"] == "NodePool")
        .expect("general-purpose.yaml has a NodePool");
    pool["metadata"]["name"] = name.into();
    pool
}

/// A NodePool Karpenter's CRD accepts and nodewright's validation does not: a budget
/// whose schedule has the CRD's five fields but a minute past 59.
fn node_pool_with_a_bad_schedule(name: &str) -> Value {
    let mut pool = node_pool(name);
    pool["spec"]["disruption"] = json!({"budgets": [
        {"nodes": "10%", "schedule": "99 * * * *", "duration": "1h"},
    ]});
    pool
}

/// An EC2NodeClass Karpenter's CRD accepts and nodewright's validation does not: an
/// alias pinned to a version with no date.
fn node_class_with_a_bad_alias(name: &str) -> Value {
    let mut class = default_node_class();
    class["metadata"]["name"] = name.into();
    class["spec"]["amiSelectorTerms"] = json!([{"alias": "al2023@v"}]);
    class
}

fn node(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "karpenter.sh/nodepool": "general-purpose"},
        },
        "spec": {
            "providerID": format!("aws:///us-east-1a/i-{name}"),
            "taints": [
                {"key": UNREGISTERED, "effect": "NoExecute"},
                {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
            ],
        },
        "status": {
            "allocatable": {"cpu": "3920m", "memory": "15Gi", "pods": "58"},
            "capacity": {"cpu": "4", "memory": "16Gi", "pods": "58"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    })
}

fn pod(namespace: &str, name: &str, cpu: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {"containers": [{"name": "app", "image": "nginx", "resources": {"requests": {"cpu": cpu, "memory": "128Mi"}}}]},
        "status": {"phase": "Pending"},
    })
}

fn daemonset(namespace: &str, name: &str) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "agent", "image": "agent", "resources": {"requests": {"cpu": "100m"}}}]},
            },
        },
    })
}

fn pdb(namespace: &str, name: &str) -> Value {
    json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "minAvailable": 1},
    })
}

fn taint(key: &str, value: Option<&str>, effect: TaintEffect) -> Taint {
    Taint {
        key: key.into(),
        value: value.map(Into::into),
        effect,
    }
}

fn taint_keys(node: &Value) -> Vec<String> {
    node["spec"]["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| t["key"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn registration_patch() -> NodePatch {
    NodePatch {
        set_labels: [("karpenter.sh/registered".to_string(), "true".to_string())].into(),
        set_annotations: [(
            "karpenter.sh/nodepool-hash".to_string(),
            "7271df6171be70a1".to_string(),
        )]
        .into(),
        add_taints: vec![taint("dedicated", Some("gpu"), TaintEffect::NoSchedule)],
        remove_taints: vec![UNREGISTERED.into()],
        ..NodePatch::default()
    }
}

fn not_ready_class() -> StatusUpdate {
    StatusUpdate {
        conditions: vec![
            Condition::failed(
                "SubnetsReady",
                "SubnetsNotFound",
                "subnetSelectorTerms select no subnet",
            ),
            Condition::met("SecurityGroupsReady"),
            Condition::failed(
                "Ready",
                "SubnetsNotFound",
                "subnetSelectorTerms select no subnet",
            ),
        ],
        fields: Default::default(),
    }
}

fn conditions_of(object: &Value) -> Vec<Value> {
    object["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn condition_of(object: &Value, type_: &str) -> Value {
    conditions_of(object)
        .into_iter()
        .find(|c| c["type"] == type_)
        .unwrap_or_else(|| panic!("no {type_} condition in {object:#}"))
}

/// Runs kubectl (cluster-admin) and returns its stdout, failing the test when it fails.
fn kubectl(cp: &ControlPlane, args: &[&str]) -> String {
    let output = cp.kubectl().args(args).output().expect("kubectl runs");
    assert!(
        output.status.success(),
        "kubectl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[path = "kube_cluster/control_plane.rs"]
mod control_plane;

#[path = "kube_cluster/state.rs"]
mod state;

#[path = "kube_cluster/errors.rs"]
mod errors;

#[path = "kube_cluster/nodes.rs"]
mod nodes;

#[path = "kube_cluster/drain.rs"]
mod drain;

#[path = "kube_cluster/events.rs"]
mod events;

#[path = "kube_cluster/status.rs"]
mod status;

#[path = "kube_cluster/watch.rs"]
mod watch;

#[path = "kube_cluster/mirror.rs"]
mod mirror;

/// NodeOverlays read, watched and given a status.
#[path = "kube_cluster/node_overlays.rs"]
mod node_overlays;

#[path = "kube_cluster/capacity_buffers.rs"]
mod capacity_buffers;

/// `kubectl scale nodepool` through the CRD's scale subresource.
#[path = "kube_cluster/scale.rs"]
mod scale;

#[path = "kube_cluster/rbac.rs"]
mod rbac;

/// What default topology spread constraints deduce their selectors from.
#[path = "kube_cluster/default_spread.rs"]
mod default_spread;

#[path = "kube_cluster/old_crds.rs"]
mod old_crds;
