//! The disruption Lambda end to end, through its real handler: DynamoDB and EC2 are
//! moto's server (tests/moto.sh), Kubernetes is a real control plane reached through
//! `NODEWRIGHT_KUBECONFIG` as the functions' own identity, as the provisioner's and the
//! interruption function's end-to-end tests.
//!
//! The control plane schedules, runs (KWOK), keeps the Deployment's replicas and its
//! PodDisruptionBudget; a [`ClusterBehaviour`] has the instances join as nodes and
//! checks every budget as pods go; the provisioner runs on its schedule in the
//! background (its polls carry a disruption command on once the disruption function
//! started it). Each scenario starts from the web Deployment running on nodes the
//! provisioner launched, then scales it down (choosing the pods that go with their
//! deletion cost), invokes the disruption function as its schedule would, and checks
//! where the cluster ends:
//! - a node left half empty on each side is deleted, its pod moved to the other (a
//!   delete consolidation): one node left, its instance terminated by nodewright,
//!   nothing launched, no pod lost, no budget broken;
//! - a dry run decides and records the same, and touches nothing;
//! - a node left mostly empty is replaced by a cheaper one (a replace consolidation):
//!   the replacement is launched once, the pod moves there, the old node goes;
//! - the same delete consolidation with pods that tolerate every taint: the drain does
//!   not evict a pod kube-scheduler would put straight back; it goes with its node.
//!
//! Both functions reach the API server through a fault proxy, which counts what they
//! ask.

use nodewright_engine::ports::{ClaimStore, DecisionLog};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lambda_runtime::LambdaEvent;
use serde_json::{Value, json};

use nodewright_core::nodeclaim::{ClaimState, NodeClaim};
use nodewright_disruption::Handler;
use nodewright_engine::disrupt::VALIDATION_DELAY;
use nodewright_engine::{Provisioner, ProvisionerConfig};
use nodewright_kube::testing::FaultProxy;
use nodewright_lambda::{Config, build_ports};
use nodewright_provisioner::DEADLINE_MARGIN;
use nodewright_testkit::{
    ClusterBehaviour, EmulatedCluster, GoneBy, ProvisionerSchedule, Timings, emulated_cluster,
    lambda_context, scheduled_event, wait_until, web_deployment,
};

/// Each scheduled provisioner invocation's budget (shortened from 55 s, so several run).
const SCHEDULE_BUDGET: Duration = Duration::from_secs(15);
/// The disruption function's timeout (template.yaml).
const FUNCTION_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the nodes may take to come up and run the Deployment, and a command to
/// reach its end. A working engine needs about 25 s for a command (15 s of it the
/// validation delay), minutes on a machine busy with the other lanes (a tick of a debug
/// build took 90 s there once); a passing test stops waiting as soon as it settles.
const SETTLE: Duration = Duration::from_secs(180);
/// The disruption schedule, shortened: how long between two invocations while none
/// has started a command yet, and how many are tried.
const DISRUPTION_EVERY: Duration = Duration::from_secs(3);
const DISRUPTION_TRIES: usize = 10;

const TAINT_DISRUPTED: &str = "karpenter.sh/disrupted";

/// A node registers 1 s after its instance appears and its kubelet hands it to KWOK 2 s
/// later.
fn timings() -> Timings {
    Timings {
        register_after: Duration::from_secs(1),
        ready_after: Duration::from_secs(2),
        ..Timings::default()
    }
}

/// At most one web pod unavailable at a time: a drain evicts one pod, then waits for
/// its replacement to run before the next.
fn budget() -> Value {
    json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}
    })
}

/// The real provisioner handler (as its `main` builds it) invoked back to back in the
/// background, each invocation with `budget` (as the one-minute schedule does with
/// 55 s), until dropped.
async fn provisioner_schedule(
    env: &EmulatedCluster,
    config: &Config,
    holder: &str,
    budget: Duration,
) -> ProvisionerSchedule {
    let (ports, _) = build_ports(config).await.expect("ports");
    let handler = Arc::new(nodewright_provisioner::Handler {
        provisioner: Provisioner::new(ports, ProvisionerConfig::new(env.cluster.clone(), holder)),
        poll_interval: config.poll_interval,
    });
    ProvisionerSchedule::start(env, move || {
        let handler = handler.clone();
        async move {
            let event = scheduled_event(budget + DEADLINE_MARGIN);
            handler.handle(event).await.map_err(|e| e.to_string())
        }
    })
}

/// The cluster of a scenario, running: the Deployment's pods on the nodes the
/// provisioner launched for them, every claim Initialized.
struct Live {
    env: EmulatedCluster,
    cluster: ClusterBehaviour,
    schedule: ProvisionerSchedule,
    /// In front of the API server: both functions' requests go through it.
    proxy: FaultProxy,
    proxied: Config,
    /// The claims launched for the Deployment, before any disruption.
    launched: Vec<NodeClaim>,
    /// The pods the scenario's scale-down took away.
    scaled_down: Vec<String>,
}

impl std::ops::Deref for Live {
    type Target = EmulatedCluster;
    fn deref(&self) -> &EmulatedCluster {
        &self.env
    }
}

/// Starts `env` behaving, with the budget and the provisioner on its schedule, and
/// waits until every pod runs on `nodes` Initialized nodes.
async fn live(env: EmulatedCluster, nodes: usize) -> Live {
    env.api.put(budget()).await;
    let started = Instant::now();
    let cluster = ClusterBehaviour::start(&env, timings()).await;
    let (proxy, proxied) = env.through_proxy().await;
    let schedule = provisioner_schedule(&env, &proxied, "schedule", SCHEDULE_BUDGET).await;
    let running = wait_until(SETTLE, || async {
        let claims = env.claims().await;
        cluster.pending_pods().is_empty()
            && cluster.running().len() == cluster.placements().len()
            && !claims.is_empty()
            && claims.iter().all(|c| c.state == ClaimState::Initialized)
    })
    .await;
    let launched = env.claims().await;
    assert!(
        running,
        "setup: the Deployment never ran on Initialized nodes: {}",
        story(&cluster, &launched)
    );
    assert_eq!(
        launched.len(),
        nodes,
        "setup: {nodes} node(s) for the Deployment: {}",
        story(&cluster, &launched)
    );
    eprintln!(
        "{}: the Deployment runs on {nodes} node(s) after {:.1}s",
        env.cluster,
        started.elapsed().as_secs_f64()
    );
    Live {
        env,
        cluster,
        schedule,
        proxy,
        proxied,
        launched,
        scaled_down: Vec::new(),
    }
}

impl Live {
    /// The Deployment scaled down by these pods (see [`ClusterBehaviour::scale_down`]).
    async fn scale_down(&mut self, pods: &[&str]) {
        self.cluster.scale_down(pods).await;
        self.scaled_down.extend(pods.iter().map(|p| p.to_string()));
    }
}

/// Four web pods of 1.5 cpu on two m5.xlarge (two fit a node), then the Deployment
/// scaled down by one pod on each node: two half-empty nodes whose pods fit on one.
async fn scaled_down_across_two_nodes(prefix: &str) -> Live {
    scale_down_across_two_nodes(emulated_cluster(prefix, "on-demand", 4).await).await
}

/// [`scaled_down_across_two_nodes`] of `env`, whose Deployment `web` has four pods of
/// 1.5 cpu.
async fn scale_down_across_two_nodes(env: EmulatedCluster) -> Live {
    let mut live = live(env, 2).await;
    let mut by_node: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (pod, node, _) in live.cluster.placements() {
        by_node.entry(node.expect("bound")).or_default().push(pod);
    }
    let scaled: Vec<String> = by_node
        .values_mut()
        .map(|pods| {
            pods.sort();
            pods[0].clone()
        })
        .collect();
    assert_eq!(scaled.len(), 2, "setup: two pods a node: {by_node:?}");
    let scaled: Vec<&str> = scaled.iter().map(String::as_str).collect();
    live.scale_down(&scaled).await;
    live
}

/// The disruption function's handler as its `main` builds it, from the cluster's
/// configuration (`dry_run` as `NODEWRIGHT_DRY_RUN`).
async fn disruption(live: &Live, dry_run: bool) -> Handler {
    let config = Config {
        dry_run,
        ..live.proxied.clone()
    };
    Handler::from_config(&config, "disruption-e2e")
        .await
        .expect("the disruption function's cold start")
}

/// One scheduled invocation of the disruption function.
async fn invoke(handler: &Handler) -> Result<Value, String> {
    let event = LambdaEvent::new(
        json!({"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}}),
        lambda_context(FUNCTION_TIMEOUT),
    );
    handler.handle(event).await.map_err(|e| format!("{e:?}"))
}

/// The disruption function on its (shortened) schedule until an invocation starts a
/// command: its summary, and every summary before it. Panics after
/// [`DISRUPTION_TRIES`] invocations.
async fn until_started(live: &Live, handler: &Handler) -> (Value, Vec<String>) {
    let mut before = Vec::new();
    for _ in 0..DISRUPTION_TRIES {
        match invoke(handler).await {
            Ok(summary) if summary["started"].as_array().is_some_and(|s| !s.is_empty()) => {
                return (summary, before);
            }
            Ok(summary) => before.push(summary.to_string()),
            Err(e) => before.push(e),
        }
        tokio::time::sleep(DISRUPTION_EVERY).await;
    }
    panic!(
        "no disruption command started in {DISRUPTION_TRIES} invocations: {before:#?}; {}",
        story(&live.cluster, &live.claims().await)
    );
}

/// The claim of `node` among `claims`.
fn claim_of<'a>(claims: &'a [NodeClaim], node: &str) -> &'a NodeClaim {
    claims
        .iter()
        .find(|c| c.node_name.as_deref() == Some(node))
        .unwrap_or_else(|| panic!("no claim for node {node}: {:#?}", briefs(claims)))
}

/// The id of the disruption command `claim` carries (its tombstone keeps it).
fn command_on(claim: &NodeClaim) -> Option<&str> {
    claim
        .disruption
        .as_ref()?
        .command
        .as_ref()
        .map(|c| c.id.as_str())
}

/// A claim in one line: name, state, type, instance, node, disruption.
fn brief(c: &NodeClaim) -> String {
    format!(
        "{} {:?} {} instance={} node={} disruption={:?}",
        c.name,
        c.state,
        c.instance_type.as_deref().unwrap_or("-"),
        c.instance_id.as_deref().unwrap_or("-"),
        c.node_name.as_deref().unwrap_or("-"),
        c.disruption
    )
}

fn briefs(claims: &[NodeClaim]) -> Vec<String> {
    claims.iter().map(brief).collect()
}

/// The nodes (with their taints), the pods and the claims, for a failure message.
fn story(cluster: &ClusterBehaviour, claims: &[NodeClaim]) -> String {
    let nodes: Vec<String> = cluster
        .nodes()
        .iter()
        .map(|n| {
            let ready = n["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["type"] == "Ready")
                .and_then(|c| c["status"].as_str())
                .unwrap_or("");
            format!(
                "{} ready={ready} taints={:?}",
                n["metadata"]["name"].as_str().unwrap_or(""),
                taints(n)
            )
        })
        .collect();
    format!(
        "nodes {nodes:#?}; pods {:?}; claims {:#?}; behaviour errors {:?}",
        cluster.placements(),
        briefs(claims),
        cluster.errors()
    )
}

fn taints(node: &Value) -> Vec<String> {
    node["spec"]["taints"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(|t| t["key"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

impl Live {
    /// Waits until `candidate` is Terminated, its Node deleted, its instance gone (in
    /// EC2 and as the cluster saw it), and every pod runs on another node; false after
    /// [`SETTLE`].
    async fn settled(&self, candidate: &NodeClaim) -> bool {
        self.settled_within(candidate, SETTLE).await
    }

    /// [`Live::settled`], waiting up to `timeout`.
    async fn settled_within(&self, candidate: &NodeClaim, timeout: Duration) -> bool {
        let node = candidate.node_name.clone().expect("the candidate's node");
        let instance = candidate
            .instance_id
            .clone()
            .expect("the candidate's instance");
        let started = Instant::now();
        let settled = wait_until(timeout, || async {
            let claim = self
                .store()
                .await
                .get_claim(&candidate.name)
                .await
                .expect("get claim");
            claim.is_some_and(|c| c.state == ClaimState::Terminated)
                && self.api.get("Node", None, &node).await.is_none()
                && !self.live_instances().await.contains(&instance)
                // and the cluster's EC2 poll (every 500 ms) has seen it go too
                && self.gone_instances().contains(&instance)
                && self.cluster.pending_pods().is_empty()
                && self.cluster.placements().iter().all(|(_, n, phase)| {
                    n.as_ref().is_some_and(|n| *n != node) && phase == "Running"
                })
        })
        .await;
        eprintln!(
            "{}: {} {:.1}s after the command started",
            self.env.cluster,
            if settled { "settled" } else { "not settled" },
            started.elapsed().as_secs_f64()
        );
        settled
    }

    /// The end state every scenario shares: the instances are exactly the live
    /// claims' now and were after every provisioner invocation; no pod was lost with
    /// its instance or node; no budget was broken; `pods` web pods run.
    async fn assert_consistent(&self, pods: usize) {
        let instances = self.live_instances().await;
        let claims = self.live_claims().await;
        let mut claimed: Vec<String> = claims.iter().filter_map(|(_, i)| i.clone()).collect();
        claimed.sort();
        assert_eq!(
            instances, claimed,
            "the instances are not the live claims' ({claims:?})"
        );
        for (n, invocation) in self.schedule.invocations().iter().enumerate() {
            assert!(
                invocation.unclaimed().is_empty(),
                "after provisioner invocation {}: instances without a live claim {:?} (claims {:?})",
                n + 1,
                invocation.unclaimed(),
                invocation.claims
            );
        }
        assert_eq!(
            self.cluster.lost(),
            Vec::<(String, GoneBy)>::new(),
            "pods lost with their instance or node"
        );
        assert_eq!(
            self.cluster.deleted_by_cloud(),
            Vec::<String>::new(),
            "nodewright deleted the nodes it took away, not the cloud controller"
        );
        assert_eq!(
            self.unexpected_refusals(),
            Vec::<String>::new(),
            "the API server refused the functions' requests"
        );
        assert_eq!(
            self.cluster.violations(),
            Vec::<String>::new(),
            "a PodDisruptionBudget was broken"
        );
        let placements = self.cluster.placements();
        assert_eq!(
            placements.len(),
            pods,
            "the Deployment has {pods} replicas: {placements:?}"
        );
        assert!(
            placements
                .iter()
                .all(|(_, node, phase)| node.is_some() && phase == "Running"),
            "every pod runs: {placements:?}"
        );
    }

    /// The pods that left `node` since the scale-down, each evicted by nodewright (an
    /// eviction the API server accepted), never deleted: a drain respects the budgets.
    fn assert_evicted_off(&self, node: &str) {
        let left: Vec<(String, GoneBy)> = self
            .cluster
            .pods()
            .into_iter()
            .filter(|p| p.node.as_deref() == Some(node) && !self.scaled_down.contains(&p.key))
            .filter_map(|p| Some((p.key, p.gone?.1)))
            .collect();
        assert!(!left.is_empty(), "no pod left {node}");
        let requests = self.proxy.requests();
        for (pod, by) in &left {
            assert_eq!(*by, GoneBy::Evicted, "{pod} left {node}");
            let (namespace, name) = pod.split_once('/').expect("namespace/name");
            let path = format!("/api/v1/namespaces/{namespace}/pods/{name}");
            assert!(
                requests.iter().any(|r| r.method == "POST"
                    && r.path == format!("{path}/eviction")
                    && r.status < 300),
                "{pod} left {node} without an eviction by nodewright"
            );
            assert!(
                !requests
                    .iter()
                    .any(|r| r.method == "DELETE" && r.path == path),
                "{pod} was deleted, not evicted"
            );
        }
    }

    /// Instances the cluster saw go (shutting down or terminated).
    fn gone_instances(&self) -> Vec<String> {
        self.cluster
            .instances()
            .into_iter()
            .filter(|i| i.gone_at.is_some())
            .map(|i| i.id)
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn a_scaled_down_deployment_is_consolidated_and_the_cluster_shrinks() {
    let live = scaled_down_across_two_nodes("dis-delete").await;
    let h = disruption(&live, false).await;

    let (summary, before) = until_started(&live, &h).await;
    let started = &summary["started"];
    assert_eq!(
        started.as_array().map(Vec::len),
        Some(1),
        "one command (budget: 10% of 2 nodes is 1): {summary}"
    );
    let command = &started[0];
    assert_eq!(command["method"], "SingleNode", "{summary}");
    assert_eq!(command["reason"], "Underutilized", "{summary}");
    assert_eq!(
        command["replacements"],
        json!([]),
        "the pod fits on the other node: deleted, not replaced: {summary}"
    );
    let node = command["nodes"][0].as_str().expect("a node").to_string();
    assert_eq!(command["nodes"], json!([node]), "{summary}");
    let candidate = claim_of(&live.launched, &node).clone();
    let instance = candidate.instance_id.clone().expect("an instance");
    let other = live
        .launched
        .iter()
        .find(|c| c.name != candidate.name)
        .expect("the other claim")
        .clone();

    let settled = live.settled(&candidate).await;
    let claims = live.claims().await;
    assert!(
        settled,
        "the command never finished (summaries before it started: {before:?}): {}",
        story(&live.cluster, &claims)
    );

    // One node left: the other one, untouched.
    let instances = live.live_instances().await;
    assert_eq!(
        instances,
        vec![other.instance_id.clone().expect("an instance")],
        "{}",
        story(&live.cluster, &claims)
    );
    assert_eq!(
        live.gone_instances(),
        vec![instance.clone()],
        "exactly the candidate's recorded instance was terminated"
    );
    assert!(
        live.cluster.killed().is_empty(),
        "nodewright terminated it, not EC2"
    );
    let disrupted = claims
        .iter()
        .find(|c| c.name == candidate.name)
        .expect("the candidate's claim");
    assert_eq!(
        disrupted.state,
        ClaimState::Terminated,
        "{}",
        brief(disrupted)
    );
    assert_eq!(
        disrupted.instance_id.as_deref(),
        Some(instance.as_str()),
        "{}",
        brief(disrupted)
    );
    assert_eq!(
        command_on(disrupted),
        command["command"].as_str(),
        "the summary names the command the claim carried: {summary}"
    );
    // Nothing launched: the store holds the two claims of the setup, and no provisioner
    // invocation launched after it.
    assert_eq!(
        claims.len(),
        2,
        "a delete consolidation launches nothing: {:#?}",
        briefs(&claims)
    );
    let launches: usize = live
        .schedule
        .invocations()
        .iter()
        .map(|i| i.launched())
        .sum();
    assert_eq!(
        launches, 2,
        "the provisioner launched only the setup's nodes"
    );
    assert_eq!(
        live.cluster.instances().len(),
        2,
        "{:?}",
        live.cluster.instances()
    );
    let kept = live.cluster.nodes();
    assert_eq!(kept.len(), 1, "{}", story(&live.cluster, &claims));
    assert!(
        !taints(&kept[0]).iter().any(|t| t == TAINT_DISRUPTED),
        "the node that stays is not cordoned: {}",
        kept[0]
    );
    live.assert_evicted_off(&node);
    live.assert_consistent(2).await;

    // Settled, the function goes back to what it does every minute: gather, decide
    // nothing, exit. Those warm invocations are its idle bill (docs/operations.md, "Cost").
    for _ in 0..3 {
        let started = std::time::Instant::now();
        let summary = invoke(&h).await.expect("an idle invocation");
        eprintln!(
            "idle disruption invocation (warm, nothing to do): {:.2} s",
            started.elapsed().as_secs_f64()
        );
        assert_eq!(
            summary["started"],
            json!([]),
            "nothing left to do: {summary}"
        );
    }
    assert_eq!(
        live.live_instances().await.len(),
        1,
        "and the cluster stays shrunk"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn a_pod_that_tolerates_the_disruption_taint_does_not_hold_a_consolidated_node() {
    // The web pods tolerate every taint (as agents that must run anywhere do), the
    // disruption taint included: evicted off a cordoned node, kube-scheduler puts its
    // replacement straight back there (the least allocated node). As in Karpenter, the
    // drain leaves such a pod alone: it goes with its node.
    let env = emulated_cluster("dis-tolerant", "on-demand", 0).await;
    let mut web = web_deployment("web", 4, "1500m", "1Gi");
    web["spec"]["template"]["spec"]["tolerations"] = json!([{"operator": "Exists"}]);
    env.deploy(web).await;
    let live = scale_down_across_two_nodes(env).await;
    let h = disruption(&live, false).await;

    let (summary, before) = until_started(&live, &h).await;
    let command = &summary["started"][0];
    assert_eq!(command["replacements"], json!([]), "{summary}");
    let node = command["nodes"][0].as_str().expect("a node").to_string();
    let candidate = claim_of(&live.launched, &node).clone();
    let other = live
        .launched
        .iter()
        .find(|c| c.name != candidate.name)
        .expect("the other claim")
        .clone();
    let tolerant: Vec<String> = live
        .cluster
        .placements()
        .into_iter()
        .filter(|(_, n, _)| n.as_deref() == Some(node.as_str()))
        .map(|(pod, _, _)| pod)
        .collect();
    assert_eq!(tolerant.len(), 1, "{:?}", live.cluster.placements());

    // The command, then podgc collecting the pod of the deleted node (40 to 80 s).
    let settled = live
        .settled_within(&candidate, SETTLE + Duration::from_secs(90))
        .await;
    let claims = live.claims().await;
    assert!(
        settled,
        "the command never finished (summaries before it started: {before:?}): {}",
        story(&live.cluster, &claims)
    );
    assert_eq!(
        live.live_instances().await,
        vec![other.instance_id.clone().expect("an instance")]
    );
    // Never evicted: it went with its node (podgc), and its ReplicaSet brought it back
    // on the node that stays.
    let lives = live.cluster.pods();
    let went = lives
        .iter()
        .find(|p| p.key == tolerant[0])
        .and_then(|p| p.gone.clone())
        .map(|(_, by)| by);
    assert_eq!(went, Some(GoneBy::NodeDeleted(node.clone())), "{lives:#?}");
    let evictions: Vec<String> = live
        .proxy
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/eviction"))
        .map(|r| format!("{} {} {}", r.method, r.path, r.status))
        .collect();
    assert_eq!(evictions, Vec::<String>::new(), "nothing to evict");
    assert_eq!(
        live.cluster.violations(),
        Vec::<String>::new(),
        "a PodDisruptionBudget was broken"
    );
    assert_eq!(live.cluster.deleted_by_cloud(), Vec::<String>::new());
    assert_eq!(live.unexpected_refusals(), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn a_dry_run_decides_and_touches_nothing() {
    let live = scaled_down_across_two_nodes("dis-dry").await;
    let h = disruption(&live, true).await;
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
        - 1;
    live.proxy.clear_requests();

    let summary = invoke(&h).await.expect("the dry run");
    assert_eq!(summary["dryRun"], true, "{summary}");
    assert_eq!(summary["decided"], true, "{summary}");
    assert_eq!(summary["started"], json!([]), "nothing started: {summary}");
    let (before, after) = (
        summary["pricePerHour"]["before"].as_f64().unwrap_or(0.0),
        summary["pricePerHour"]["after"].as_f64().unwrap_or(0.0),
    );
    assert!(
        after > 0.0 && after < before,
        "the decision halves the price (one m5.xlarge of two): {summary}"
    );
    // The decision is in the decision log, marked as a dry run.
    let decisions = live
        .store()
        .await
        .decisions(since)
        .await
        .expect("decision log");
    let decided: Vec<&str> = decisions
        .iter()
        .filter(|d| d.job == "disruption")
        .map(|d| d.action.as_str())
        .collect();
    assert!(
        decided.iter().any(|a| a.starts_with("disrupt ")
            && a.contains("SingleNode")
            && a.contains("Underutilized")
            && a.ends_with("[dry run]")),
        "{decided:#?}"
    );

    // Long enough for a command to have been validated and drained by the provisioner's
    // polls, had the dry run started one.
    tokio::time::sleep(VALIDATION_DELAY + Duration::from_secs(5)).await;
    let claims = live.claims().await;
    for before in &live.launched {
        let now = claims
            .iter()
            .find(|c| c.name == before.name)
            .expect("the claim");
        assert_eq!(
            (now.state, &now.disruption),
            (ClaimState::Initialized, &None),
            "{}",
            brief(now)
        );
    }
    assert_eq!(claims.len(), 2, "{:#?}", briefs(&claims));
    for node in live.cluster.nodes() {
        assert!(
            !taints(&node).iter().any(|t| t == TAINT_DISRUPTED),
            "a dry run tainted {node}"
        );
    }
    assert_eq!(live.gone_instances(), Vec::<String>::new());
    // Neither the dry run nor the provisioner's polls evicted or deleted a pod.
    let removed: Vec<String> = live
        .proxy
        .requests()
        .into_iter()
        .filter(|r| r.path.contains("/pods/") && matches!(r.method.as_str(), "POST" | "DELETE"))
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert_eq!(removed, Vec::<String>::new(), "no pod evicted or deleted");
    assert_eq!(live.live_instances().await.len(), 2);
    live.assert_consistent(2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn a_mostly_empty_node_is_replaced_by_a_cheaper_one_and_its_pod_moves_there() {
    // Three pods of 1.2 cpu: one m5.xlarge ($0.192/h) takes them all, where three
    // m5.large would cost $0.288/h. Scaled down to one pod, an m5.large ($0.096/h,
    // 1.93 cpu allocatable) is enough.
    let env = emulated_cluster("dis-replace", "on-demand", 0).await;
    env.api
        .modify("NodePool", None, "general-purpose", |pool| {
            let requirements = pool["spec"]["template"]["spec"]["requirements"]
                .as_array_mut()
                .expect("requirements");
            for r in requirements.iter_mut() {
                if r["key"] == "node.kubernetes.io/instance-type" {
                    r["values"] = json!(["m5.large", "m5.xlarge"]);
                }
            }
        })
        .await;
    env.deploy(web_deployment("web", 3, "1200m", "1Gi")).await;
    let mut live = live(env, 1).await;
    let old = live.launched[0].clone();
    assert_eq!(
        old.instance_type.as_deref(),
        Some("m5.xlarge"),
        "{}",
        brief(&old)
    );
    let pods = live.pod_names().await;
    let scaled: Vec<&str> = pods.iter().take(2).map(String::as_str).collect();
    live.scale_down(&scaled).await;
    let h = disruption(&live, false).await;

    let (summary, before) = until_started(&live, &h).await;
    let command = &summary["started"][0];
    assert_eq!(command["method"], "SingleNode", "{summary}");
    assert_eq!(command["reason"], "Underutilized", "{summary}");
    assert_eq!(
        command["nodes"],
        json!([old.node_name.clone().expect("a node")]),
        "{summary}"
    );
    let replacements: Vec<String> = command["replacements"]
        .as_array()
        .map(|r| {
            r.iter()
                .filter_map(|n| n.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(replacements.len(), 1, "one cheaper node: {summary}");

    let settled = live.settled(&old).await;
    let claims = live.claims().await;
    assert!(
        settled,
        "the command never finished (summaries before it started: {before:?}): {}",
        story(&live.cluster, &claims)
    );
    assert_eq!(
        claims.len(),
        2,
        "the old claim and its one replacement, launched once: {:#?}",
        briefs(&claims)
    );
    let replacement = claims
        .iter()
        .find(|c| c.name == replacements[0])
        .expect("the replacement's claim");
    assert_eq!(
        replacement.state,
        ClaimState::Initialized,
        "{}",
        brief(replacement)
    );
    assert_eq!(
        replacement.instance_type.as_deref(),
        Some("m5.large"),
        "{}",
        brief(replacement)
    );
    let new_instance = replacement.instance_id.clone().expect("an instance");
    assert_eq!(live.live_instances().await, vec![new_instance]);
    assert_eq!(
        live.gone_instances(),
        vec![old.instance_id.clone().expect("an instance")],
        "exactly the old node's instance was terminated"
    );
    assert!(live.cluster.killed().is_empty());
    let disrupted = claims
        .iter()
        .find(|c| c.name == old.name)
        .expect("old claim");
    assert_eq!(
        disrupted.state,
        ClaimState::Terminated,
        "{}",
        brief(disrupted)
    );
    assert_eq!(
        command_on(disrupted),
        command["command"].as_str(),
        "{summary}"
    );
    let new_node = replacement
        .node_name
        .clone()
        .expect("the replacement's node");
    let placements = live.cluster.placements();
    assert!(
        placements
            .iter()
            .all(|(_, node, _)| node.as_deref() == Some(new_node.as_str())),
        "the pod moved to the replacement: {placements:?}"
    );
    let launches: usize = live
        .schedule
        .invocations()
        .iter()
        .map(|i| i.launched())
        .sum();
    assert_eq!(
        launches, 1,
        "the provisioner launched the setup's node only; the replacement is the command's"
    );
    live.assert_evicted_off(old.node_name.as_deref().expect("a node"));
    live.assert_consistent(1).await;
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// The Deployment a pod ("namespace/name") belongs to: its name without the
/// ReplicaSet's hash and its own suffix.
fn deployment_of(pod: &str) -> String {
    let name = pod.rsplit('/').next().unwrap_or(pod);
    let mut parts: Vec<&str> = name.rsplitn(3, '-').collect();
    parts.pop().unwrap_or(name).to_string()
}

/// Where a disruption decision the log recorded counted room for the pods it moves to
/// nodes that stay: (Deployment, node) for each pod, from its action
/// (`disrupt A, B (...), N replacement(s); default/x-1, default/x-2 to C; ...`).
fn recorded_moves(action: &str) -> Vec<(String, String)> {
    action
        .split("; ")
        .skip(1)
        .filter_map(|m| m.rsplit_once(" to "))
        .flat_map(|(pods, node)| {
            pods.split(", ")
                .map(move |pod| (deployment_of(pod), node.to_string()))
        })
        .collect()
}

/// `kubectl cordon` (or `uncordon`) of `node`, as an administrator does it.
async fn cordon(env: &EmulatedCluster, node: &str, unschedulable: bool) {
    env.api
        .modify("Node", None, node, |n| {
            n["spec"]["unschedulable"] = json!(unschedulable);
        })
        .await
        .unwrap_or_else(|| panic!("no Node {node}"));
}

/// Waits until `n` pods of the Deployment `name` run; the nodes they run on.
async fn running_on(cluster: &ClusterBehaviour, name: &str, n: usize) -> Vec<String> {
    let ran = wait_until(SETTLE, || async {
        let running = cluster.running();
        cluster
            .placements()
            .iter()
            .filter(|(pod, _, _)| deployment_of(pod) == name && running.contains(pod))
            .count()
            == n
    })
    .await;
    assert!(
        ran,
        "setup: {n} pod(s) of {name} never ran: {}",
        story(cluster, &[])
    );
    cluster
        .placements()
        .into_iter()
        .filter(|(pod, _, _)| deployment_of(pod) == name)
        .filter_map(|(_, node, _)| node)
        .collect()
}

/// Waits until `n` pods of the Deployment `name` run and none of those not in `before`
/// runs on a `cordoned` node; the nodes they run on.
///
/// kube-scheduler learns of a cordon from its own watch, so a pod created just after one
/// can still be bound to that node, the more so on a loaded machine. Such a pod is
/// deleted, and its ReplicaSet's next pod is scheduled by a kube-scheduler that has
/// seen the cordon by then.
async fn running_off(
    env: &EmulatedCluster,
    cluster: &ClusterBehaviour,
    name: &str,
    n: usize,
    before: &[String],
    cordoned: &[String],
) -> Vec<String> {
    for _ in 0..5 {
        let nodes = running_on(cluster, name, n).await;
        let misplaced: Vec<String> = cluster
            .placements()
            .into_iter()
            .filter(|(pod, node, _)| {
                deployment_of(pod) == name
                    && !before.contains(pod)
                    && node.as_ref().is_some_and(|node| cordoned.contains(node))
            })
            .map(|(pod, _, _)| pod)
            .collect();
        if misplaced.is_empty() {
            return nodes;
        }
        for pod in misplaced {
            let (namespace, pod_name) = pod.split_once('/').unwrap_or(("default", &pod));
            eprintln!(
                "{}: {pod} went to a node cordoned just before; again",
                env.cluster
            );
            env.api.remove("Pod", Some(namespace), pod_name).await;
        }
    }
    panic!(
        "setup: {name}'s pods keep going to cordoned nodes: {}",
        story(cluster, &[])
    );
}

/// The pods of the Deployment `name` there are now.
fn pods_of(cluster: &ClusterBehaviour, name: &str) -> Vec<String> {
    cluster
        .placements()
        .into_iter()
        .filter(|(pod, _, _)| deployment_of(pod) == name)
        .map(|(pod, _, _)| pod)
        .collect()
}

/// A Deployment of `replicas` pods of `cpu` and 128 MiB: cpu decides where they fit.
fn sized(name: &str, replicas: usize, cpu: &str) -> Value {
    web_deployment(name, replicas, cpu, "128Mi")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn consolidation_counts_pods_only_onto_room_kube_scheduler_gives_them() {
    // Five m5.xlarge (3.82 cpu free for pods each): two that receive, B (1.82 cpu used,
    // 2 free) and C (2.62 used, 1.2 free), whose pods may not be disrupted; and A, D
    // and E with one pod each that could go — x (1 cpu) on A and on D, y (1.1 cpu) on
    // E. The pool may disrupt every node at once.
    //
    // kube-scheduler binds each evicted pod to the least allocated node that takes it:
    // the first x to B, the second to C (1.2 free against B's 1), and then y fits
    // nowhere. A decision that counted both x onto B (packed) and y onto C would have
    // y pending and the provisioner launch a node for it. Every command's pods must be
    // bound where the decision counted on room — a node it named, or its replacement —
    // and nothing launched for them afterwards.
    let env = emulated_cluster("dis-sched", "on-demand", 0).await;
    env.api
        .modify("NodePool", None, "general-purpose", |pool| {
            pool["spec"]["disruption"] = json!({
                "consolidationPolicy": "WhenEmptyOrUnderutilized",
                "consolidateAfter": "0s",
                "budgets": [{"nodes": "100%"}]
            });
        })
        .await
        .expect("the pool");
    let started = Instant::now();
    let cluster = ClusterBehaviour::start(&env, timings()).await;
    let (proxy, proxied) = env.through_proxy().await;
    let schedule = provisioner_schedule(&env, &proxied, "schedule", SCHEDULE_BUDGET).await;

    // One node per step: each step's pods cannot go to the nodes before it (cordoned
    // until the end), so the provisioner launches one for them.
    let mut cordoned = Vec::new();
    for (name, cpu) in [("fill-b", "1820m"), ("fill-c", "2620m")] {
        let mut fill = sized(name, 1, cpu);
        fill["spec"]["template"]["metadata"]["annotations"] =
            json!({"karpenter.sh/do-not-disrupt": "true"});
        env.deploy(fill).await;
        let node = running_off(&env, &cluster, name, 1, &[], &cordoned)
            .await
            .remove(0);
        cordon(&env, &node, true).await;
        cordoned.push(node);
    }
    env.deploy(sized("x", 1, "1")).await;
    let a = running_off(&env, &cluster, "x", 1, &[], &cordoned)
        .await
        .remove(0);
    cordon(&env, &a, true).await;
    cordoned.push(a.clone());
    let first_x = pods_of(&cluster, "x");
    env.scale("x", 2).await;
    let d = running_off(&env, &cluster, "x", 2, &first_x, &cordoned)
        .await
        .into_iter()
        .find(|n| *n != a)
        .expect("x's second node");
    cordon(&env, &d, true).await;
    cordoned.push(d);
    env.deploy(sized("y", 1, "1100m")).await;
    running_off(&env, &cluster, "y", 1, &[], &cordoned).await;
    for node in &cordoned {
        cordon(&env, node, false).await;
    }
    let initialized = wait_until(SETTLE, || async {
        let claims = env.claims().await;
        claims.len() == 5 && claims.iter().all(|c| c.state == ClaimState::Initialized)
    })
    .await;
    let launched = env.claims().await;
    assert!(
        initialized,
        "setup: five Initialized nodes: {}",
        story(&cluster, &launched)
    );
    eprintln!(
        "{}: five nodes, one per step, after {:.1}s",
        env.cluster,
        started.elapsed().as_secs_f64()
    );
    let live = Live {
        env,
        cluster,
        schedule,
        proxy,
        proxied,
        launched,
        scaled_down: Vec::new(),
    };
    let h = disruption(&live, false).await;

    // Decision after decision, until one starts nothing. After the first, y's
    // Deployment is scaled down: E's pods can then go too.
    let mut commands = 0;
    let mut rounds = 0;
    let mut quiet = 0;
    while quiet < 2 {
        let round = Instant::now();
        let since = unix_now() - 1;
        let claims_before = live.claims().await.len();
        let summary = invoke(&h).await.expect("a disruption run");
        let started: Vec<Value> = summary["started"].as_array().cloned().unwrap_or_default();
        if started.is_empty() {
            quiet += 1;
            tokio::time::sleep(DISRUPTION_EVERY).await;
            continue;
        }
        quiet = 0;
        commands += started.len();
        assert!(commands <= 4, "the cluster never settles: {summary}");
        let decisions = live.store().await.decisions(since).await.expect("log");
        let mut counted: Vec<(String, String)> = Vec::new();
        let mut replacements: Vec<String> = Vec::new();
        let mut candidates: Vec<NodeClaim> = Vec::new();
        let claims = live.claims().await;
        for command in &started {
            let nodes: Vec<String> = command["nodes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|n| n.as_str().map(str::to_string))
                .collect();
            let header = format!("disrupt {} (", nodes.join(", "));
            let recorded = decisions
                .iter()
                .find(|d| d.job == "disruption" && d.action.starts_with(&header))
                .unwrap_or_else(|| panic!("no decision recorded for {command}: {decisions:#?}"));
            eprintln!("{}: {}", live.env.cluster, recorded.action);
            counted.extend(recorded_moves(&recorded.action));
            for node in &nodes {
                candidates.push(claim_of(&claims, node).clone());
            }
            replacements.extend(
                command["replacements"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|r| r.as_str().map(str::to_string)),
            );
        }
        for candidate in &candidates {
            let settled = live.settled(candidate).await;
            assert!(
                settled,
                "the command never finished ({summary}): {}",
                story(&live.cluster, &live.claims().await)
            );
        }
        // The replacements' pods go to their nodes.
        let claims = live.claims().await;
        for name in &replacements {
            let replacement = claims
                .iter()
                .find(|c| &c.name == name)
                .unwrap_or_else(|| panic!("no replacement claim {name}"));
            let node = replacement
                .node_name
                .clone()
                .unwrap_or_else(|| panic!("the replacement {name} has no node"));
            counted.extend(
                replacement
                    .pods
                    .iter()
                    .map(|p| (deployment_of(p), node.clone())),
            );
        }
        // Where kube-scheduler bound the pods that replaced those evicted.
        let mut bound: Vec<(String, String)> = live
            .cluster
            .pods()
            .into_iter()
            .filter(|p| !p.daemon && p.first_seen >= round)
            .map(|p| {
                (
                    deployment_of(&p.key),
                    p.node.clone().unwrap_or_else(|| "(pending)".into()),
                )
            })
            .collect();
        bound.sort();
        counted.sort();
        assert_eq!(
            bound,
            counted,
            "kube-scheduler bound the moved pods elsewhere than the decision counted on ({summary}): {}",
            story(&live.cluster, &claims)
        );
        // A few provisioner polls later, nothing was launched for them.
        tokio::time::sleep(Duration::from_secs(8)).await;
        let after = live.claims().await;
        assert_eq!(
            after.len(),
            claims_before + replacements.len(),
            "claims launched after the command ({summary}): {:#?}",
            briefs(&after)
        );
        assert!(
            live.cluster.pending_pods().is_empty(),
            "{}",
            story(&live.cluster, &after)
        );
        rounds += 1;
        if rounds == 1 {
            let y = live
                .cluster
                .placements()
                .into_iter()
                .find(|(pod, _, _)| deployment_of(pod) == "y")
                .map(|(pod, _, _)| pod)
                .expect("y's pod");
            live.cluster.scale_down(&[&y]).await;
        }
    }
    assert!(
        rounds >= 2,
        "{rounds} decision(s) started commands: {}",
        story(&live.cluster, &live.claims().await)
    );
    let pods = live.cluster.placements().len();
    assert_eq!(pods, 4, "{:?}", live.cluster.placements());
    live.assert_consistent(pods).await;
}
