//! The workload controllers of the simulated cluster: Deployments whose replica count
//! changes over time (creating pending pods, deleting surplus ones as a ReplicaSet
//! does), and DaemonSets that put one pod on every eligible node.
//!
//! Both edit the cluster directly, as controllers with their own API access do: pods
//! they delete are not recreated (scaling down), unlike pods evicted by a drain, which
//! `FakeCluster`'s recreation brings back pending.
//!
//! Also the one generator of workloads at scale ([`mixed_deployment`], [`mixed_pods`],
//! [`bound_cluster`]), seeded by [`Rng`]: the benchmarks draw their clusters here, so a
//! simulated Deployment and a benchmark's are the same thing.

use std::collections::{BTreeMap, HashMap, HashSet};

use nodewright_core::api::model::TaintEffect;
use nodewright_core::catalog::InstanceType;
use nodewright_core::cluster::{
    ControllerRef, ControllerSelector, DaemonSet, LabelSelector, Node, Pod, PodAffinityTerm,
    PodDisruptionBudget, PodFields, Toleration, TolerationOperator, TopologySpreadConstraint,
    WhenUnsatisfiable,
};
use nodewright_core::resources::Resources;
use nodewright_core::well_known::{
    LABEL_CAPACITY_TYPE, LABEL_HOSTNAME, LABEL_NODEPOOL, LABEL_ZONE,
};

use nodewright_engine::ports::ClusterState;

use super::binder::fits;
use super::rng::Rng;

/// A Deployment: every replica is `template` (its labels select the replicas), and the
/// replica count follows `replicas` over time.
#[derive(Debug, Clone, PartialEq)]
pub struct Deployment {
    pub name: String,
    pub namespace: String,
    pub template: Pod,
    /// (seconds since the simulation started, replicas from then on), in time order.
    pub replicas: Vec<(i64, u32)>,
    pub budget: Option<PodDisruptionBudget>,
    /// The replicas follow an autoscaler's curve (`simulate --cluster` with an HPA):
    /// its steps are not told in the timeline one by one (a day's curve is hundreds).
    pub autoscaled: bool,
}

impl Deployment {
    /// The replica count wanted `elapsed` seconds into the simulation (0 before the
    /// first entry).
    pub fn replicas_at(&self, elapsed: i64) -> u32 {
        // A day's curve is hundreds of steps, read for every Deployment every step.
        let after = self.replicas.partition_point(|(at, _)| *at <= elapsed);
        after.checked_sub(1).map_or(0, |i| self.replicas[i].1)
    }

    /// The ReplicaSet the Deployment controller keeps for the template: its replicas'
    /// controller, and the selector kube-scheduler's default spread reads.
    pub fn replica_set(&self) -> ControllerSelector {
        ControllerSelector {
            kind: "ReplicaSet".into(),
            namespace: self.namespace.clone(),
            name: self.replica_set_name(),
            selector: Some(LabelSelector {
                match_labels: (*self.template.labels).clone(),
                match_expressions: Vec::new(),
            }),
        }
    }

    /// `<deployment>-<pod-template-hash>`; the template never changes in a simulation,
    /// so neither does the hash.
    fn replica_set_name(&self) -> String {
        // FNV-1a over the name: stable across runs and platforms.
        let hash = self.name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        format!("{}-{:x}", self.name, hash & 0xff_ffff_ffff)
    }

    /// Whether `pod` is one of this Deployment's replicas.
    pub fn selects(&self, pod: &Pod) -> bool {
        !pod.daemonset_owned
            && pod.namespace == self.namespace
            && self
                .template
                .labels
                .iter()
                .all(|(k, v)| pod.labels.get(k) == Some(v))
    }
}

/// What one reconciliation of a Deployment changes.
#[derive(Debug, Default, PartialEq)]
pub struct Scaling {
    pub created: Vec<Pod>,
    /// Keys (namespace/name) of pods to delete.
    pub deleted: Vec<String>,
}

/// Brings the Deployment's live replicas (not finished, not being deleted) to the count
/// wanted now. New pods are named `<deployment>-<suffix>` from `next_suffix`. Surplus
/// pods go in the ReplicaSet controller's order: pending before bound, then those on
/// the nodes with the most replicas of this Deployment, then the newest.
pub fn scale(
    deployment: &Deployment,
    state: &ClusterState,
    elapsed: i64,
    next_suffix: impl FnMut() -> String,
) -> Scaling {
    let live = live_replicas(std::slice::from_ref(deployment), &state.pods)
        .pop()
        .unwrap_or_default();
    scale_live(deployment, live, elapsed, next_suffix)
}

/// Each Deployment's live replicas (not finished, not being deleted), with their
/// places in `pods`, in pod order: one pass over the pods, each tried only against
/// the Deployments one of its labels could select (a Deployment is found by the first
/// of its template's labels, or by namespace when it has none), not against all.
pub fn live_replicas<'p>(
    deployments: &[Deployment],
    pods: &'p [Pod],
) -> Vec<Vec<(usize, &'p Pod)>> {
    let mut by_label: HashMap<(&str, &str, &str), Vec<usize>> = HashMap::new();
    let mut by_namespace: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, d) in deployments.iter().enumerate() {
        match d.template.labels.iter().next() {
            Some((k, v)) => by_label
                .entry((d.namespace.as_str(), k.as_str(), v.as_str()))
                .or_default()
                .push(i),
            None => by_namespace
                .entry(d.namespace.as_str())
                .or_default()
                .push(i),
        }
    }
    let mut live = vec![Vec::new(); deployments.len()];
    for (at, p) in pods.iter().enumerate() {
        if p.daemonset_owned || p.terminal || p.terminating {
            continue;
        }
        let ns = p.namespace.as_str();
        let by_labels = p
            .labels
            .iter()
            .filter_map(|(k, v)| by_label.get(&(ns, k.as_str(), v.as_str())))
            .flatten();
        for &i in by_namespace.get(ns).into_iter().flatten().chain(by_labels) {
            if deployments[i].selects(p) {
                live[i].push((at, p));
            }
        }
    }
    live
}

/// [`scale`] given the Deployment's live replicas ([`live_replicas`]).
pub fn scale_live(
    deployment: &Deployment,
    live: Vec<(usize, &Pod)>,
    elapsed: i64,
    mut next_suffix: impl FnMut() -> String,
) -> Scaling {
    let wanted = deployment.replicas_at(elapsed) as usize;
    let mut out = Scaling::default();
    if live.len() < wanted {
        for _ in live.len()..wanted {
            out.created.push(Pod::from(PodFields {
                namespace: deployment.namespace.clone(),
                name: format!("{}-{}", deployment.name, next_suffix()),
                node_name: None,
                controller: Some(std::sync::Arc::new(ControllerRef {
                    api_version: "apps/v1".into(),
                    kind: "ReplicaSet".into(),
                    name: deployment.replica_set_name(),
                })),
                ..PodFields::clone(&deployment.template)
            }));
        }
    } else if live.len() > wanted {
        let mut per_node: HashMap<&str, usize> = HashMap::new();
        for (_, p) in &live {
            if let Some(n) = &p.node_name {
                *per_node.entry(n.as_str()).or_default() += 1;
            }
        }
        let mut ranked = live;
        // Later in the list = created later (pods are appended).
        ranked.sort_by_key(|(i, p)| {
            (
                p.node_name.is_some(),
                std::cmp::Reverse(
                    p.node_name
                        .as_deref()
                        .and_then(|n| per_node.get(n))
                        .copied()
                        .unwrap_or(0),
                ),
                std::cmp::Reverse(*i),
            )
        });
        let surplus = ranked.len() - wanted;
        out.deleted = ranked
            .into_iter()
            .take(surplus)
            .map(|(_, p)| p.key())
            .collect();
    }
    out
}

/// The tolerations the DaemonSet controller adds to every DaemonSet pod.
fn daemonset_tolerations() -> Vec<Toleration> {
    let tolerate = |key: &str, effect: TaintEffect| Toleration {
        key: key.into(),
        operator: TolerationOperator::Exists,
        value: String::new(),
        effect: Some(effect),
    };
    vec![
        tolerate("node.kubernetes.io/not-ready", TaintEffect::NoExecute),
        tolerate("node.kubernetes.io/unreachable", TaintEffect::NoExecute),
        tolerate("node.kubernetes.io/disk-pressure", TaintEffect::NoSchedule),
        tolerate(
            "node.kubernetes.io/memory-pressure",
            TaintEffect::NoSchedule,
        ),
        tolerate("node.kubernetes.io/pid-pressure", TaintEffect::NoSchedule),
        tolerate("node.kubernetes.io/unschedulable", TaintEffect::NoSchedule),
        tolerate(
            "node.kubernetes.io/network-unavailable",
            TaintEffect::NoSchedule,
        ),
    ]
}

/// The DaemonSet pod for `node`: the template, bound to the node.
fn daemonset_pod(ds: &DaemonSet, node: &Node) -> Pod {
    let mut pod = ds.template.clone();
    pod.name = daemonset_pod_name(ds, node);
    pod.namespace = ds.namespace.clone();
    pod.node_name = Some(node.name.clone());
    pod.daemonset_owned = true;
    pod.tolerations.extend(daemonset_tolerations());
    pod
}

/// `<daemonset>-<node name's first label>`: one pod per DaemonSet and node.
pub fn daemonset_pod_name(ds: &DaemonSet, node: &Node) -> String {
    let host = node.name.split('.').next().unwrap_or(&node.name);
    format!("{}-{host}", ds.name)
}

/// DaemonSet pods to create: one for every DaemonSet on every Ready node it may run on
/// (its selector, affinity and tolerations, plus the controller's own tolerations) and
/// that has room for it, where it has none yet. A node still carrying taints the pod
/// does not tolerate (Karpenter's unregistered taint until the node is initialized)
/// gets its pod once they are gone.
pub fn daemonset_pods(state: &ClusterState) -> Vec<Pod> {
    if state.daemonsets.is_empty() {
        return Vec::new();
    }
    let existing: HashSet<(&str, &str)> = state
        .pods
        .iter()
        .filter(|p| p.daemonset_owned)
        .map(|p| (p.namespace.as_str(), p.name.as_str()))
        .collect();
    let mut used: BTreeMap<&str, Resources> = BTreeMap::new();
    for p in state.pods.iter().filter(|p| !p.terminal) {
        if let Some(n) = &p.node_name {
            used.entry(n.as_str()).or_default().add(&p.requests);
        }
    }
    let mut out = Vec::new();
    for node in state.nodes.iter().filter(|n| n.ready) {
        let mut left = node.allocatable.clone();
        if let Some(u) = used.get(node.name.as_str()) {
            left.sub(u);
        }
        for ds in &state.daemonsets {
            let name = daemonset_pod_name(ds, node);
            if existing.contains(&(ds.namespace.as_str(), name.as_str())) {
                continue;
            }
            let pod = daemonset_pod(ds, node);
            if fits(&pod, node) && pod.requests.fits_in(&left) {
                left.sub(&pod.requests);
                out.push(pod);
            }
        }
    }
    out
}

// ----- generated workloads ---------------------------------------------------------

const MIB_MILLI: i64 = (1 << 20) * 1000;
/// The smallest pod [`mixed_deployment`] draws (a web replica): 250m cpu, 256Mi.
pub const MIXED_MIN_CPU_MILLI: i64 = 250;
pub const MIXED_MIN_MEMORY_MIB: i64 = 256;

/// A pod in `default` labelled `app=<app>`, requesting `cpu_milli` millicores and
/// `memory_mib` MiB (and one pod slot): unbound, not yet seen by kube-scheduler.
pub fn app_pod(name: String, app: &str, cpu_milli: i64, memory_mib: i64) -> Pod {
    let mut requests = Resources::one_pod();
    requests.set_milli("cpu", cpu_milli);
    requests.set_milli("memory", memory_mib * MIB_MILLI);
    Pod::from(PodFields {
        namespace: "default".into(),
        name,
        labels: BTreeMap::from([("app".to_string(), app.to_string())]).into(),
        requests,
        ..PodFields::default()
    })
}

fn selects_app(app: &str) -> LabelSelector {
    LabelSelector {
        match_labels: BTreeMap::from([("app".to_string(), app.to_string())]),
        match_expressions: vec![],
    }
}

/// The next Deployment of the mixed workload the benchmarks measure: web 40% (6–20
/// replicas, 250m–1 cpu, 256Mi–1Gi, spread over zones), worker 25% (4–12, 1–2 cpu,
/// 2–4Gi), cache 15% (3 replicas, 500m, 4–8Gi, one per host), batch 20% (5–15, 2–4 cpu,
/// 1–2Gi). `number` names it (`web-7`, its replicas labelled `app=web-7`).
pub fn mixed_deployment(rng: &mut Rng, number: usize) -> Deployment {
    let (kind, replicas, cpu, memory) = match rng.below(100) {
        0..40 => (
            "web",
            rng.range(6, 20),
            rng.one_of([250, 500, 750, 1000]),
            rng.one_of([256, 512, 768, 1024]),
        ),
        40..65 => (
            "worker",
            rng.range(4, 12),
            rng.one_of([1000, 1500, 2000]),
            rng.one_of([2048, 3072, 4096]),
        ),
        65..80 => ("cache", 3, 500, rng.one_of([4096, 6144, 8192])),
        _ => (
            "batch",
            rng.range(5, 15),
            rng.one_of([2000, 3000, 4000]),
            rng.one_of([1024, 1536, 2048]),
        ),
    };
    let name = format!("{kind}-{number}");
    let mut template = app_pod(name.clone(), &name, cpu, memory);
    match kind {
        "web" => {
            template.topology_spread = vec![TopologySpreadConstraint {
                max_skew: 1,
                topology_key: LABEL_ZONE.into(),
                when_unsatisfiable: WhenUnsatisfiable::DoNotSchedule,
                label_selector: Some(selects_app(&name)),
                min_domains: None,
                honor_node_affinity: true,
                honor_node_taints: false,
            }]
            .into()
        }
        "cache" => {
            template.pod_anti_affinity = vec![PodAffinityTerm {
                label_selector: Some(selects_app(&name)),
                topology_key: LABEL_HOSTNAME.into(),
                namespaces: vec!["default".into()],
            }]
            .into()
        }
        _ => {}
    }
    Deployment {
        name,
        namespace: "default".into(),
        template,
        replicas: vec![(0, u32::try_from(replicas).unwrap_or(1))],
        budget: None,
        autoscaled: false,
    }
}

/// `count` pods of the mixed workload, Deployment after Deployment (`web-1`, `batch-2`,
/// …; the last one cut short), unbound: replica `r` of `web-7` is `web-7-r`.
pub fn mixed_pods(count: usize, seed: u64) -> Vec<Pod> {
    let mut rng = Rng::new(seed);
    let mut pods = Vec::with_capacity(count);
    let mut number = 0;
    while pods.len() < count {
        number += 1;
        let deployment = mixed_deployment(&mut rng, number);
        let replicas = deployment.replicas_at(0) as usize;
        for r in 0..replicas.min(count - pods.len()) {
            pods.push(Pod::from(PodFields {
                name: format!("{}-{r}", deployment.name),
                ..PodFields::clone(&deployment.template)
            }));
        }
    }
    pods
}

/// A cluster already running its workload: what a benchmark of a steady cluster
/// starts from.
#[derive(Debug, Clone, Default)]
pub struct BoundCluster {
    pub nodes: Vec<Node>,
    /// Every DaemonSet's pod on every node, then the workload, all bound.
    pub pods: Vec<Pod>,
}

/// `workload` bound across `nodes` Ready nodes of NodePool `pool` (zones in turn,
/// named `ip-10-a-b-c.ec2.internal`), and every DaemonSet's pod on each. Pod `i` goes
/// to node `i mod nodes`, so consecutive replicas land on consecutive nodes and zones
/// and zone spread and one-per-host hold. Each node is the first of `node_types`
/// (smallest first) whose allocatable holds its pods with `headroom` (0.15: 15%) of
/// cpu and memory to spare, else the last.
pub fn bound_cluster(
    mut workload: Vec<Pod>,
    daemonsets: &[DaemonSet],
    nodes: usize,
    node_types: &[&InstanceType],
    zones: &[&str],
    pool: &str,
    headroom: f64,
) -> BoundCluster {
    let nodes = nodes.max(1);
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); nodes];
    for i in 0..workload.len() {
        members[i % nodes].push(i);
    }
    let mut overhead = Resources::new();
    for ds in daemonsets {
        overhead.add(&ds.template.requests);
    }
    let mut cluster = BoundCluster {
        nodes: Vec::with_capacity(nodes),
        pods: Vec::with_capacity(nodes * daemonsets.len() + workload.len()),
    };
    for (n, mine) in members.iter().enumerate() {
        let name = format!(
            "ip-10-{}-{}-{}.ec2.internal",
            n / 65_536,
            n / 256 % 256,
            n % 256
        );
        let mut used = overhead.clone();
        for &p in mine {
            used.add(&workload[p].requests);
        }
        let holds = |it: &&&InstanceType| {
            ["cpu", "memory"].iter().all(|r| {
                used.get_milli(r) as f64 * (1.0 + headroom) <= it.allocatable.get_milli(r) as f64
            }) && used.get_milli("pods") <= it.allocatable.get_milli("pods")
        };
        let Some(it) = node_types.iter().find(holds).or(node_types.last()) else {
            break;
        };
        let zone = zones
            .get(n % zones.len().max(1))
            .copied()
            .unwrap_or_default();
        let mut labels = it.labels.clone();
        labels.insert(LABEL_ZONE.into(), zone.into());
        labels.insert(LABEL_CAPACITY_TYPE.into(), "on-demand".into());
        labels.insert(LABEL_NODEPOOL.into(), pool.into());
        labels.insert(LABEL_HOSTNAME.into(), name.clone());
        let node = Node {
            name: name.clone(),
            labels,
            allocatable: it.allocatable.clone(),
            capacity: it.capacity.clone(),
            provider_id: Some(format!("aws:///{zone}/i-0{n:016x}")),
            ready: true,
            ..Node::default()
        };
        for ds in daemonsets {
            let mut pod = daemonset_pod(ds, &node);
            pod.owner_daemonset = Some(ds.name.clone());
            pod.marked_unschedulable = false;
            cluster.pods.push(pod);
        }
        for &p in mine {
            let pod = &mut workload[p];
            pod.node_name = Some(name.clone());
            pod.marked_unschedulable = false;
        }
        cluster.nodes.push(node);
    }
    cluster.pods.extend(workload);
    cluster
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_core::api::model::Taint;
    use nodewright_core::catalog::Catalog;
    use nodewright_core::testing::{node, pod};

    fn web(replicas: Vec<(i64, u32)>) -> Deployment {
        let mut template = pod("web", "1", "1Gi");
        template.labels = BTreeMap::from([("app".to_string(), "web".to_string())]).into();
        Deployment {
            name: "web".into(),
            namespace: "default".into(),
            template,
            replicas,
            budget: None,
            autoscaled: false,
        }
    }

    fn suffixes() -> impl FnMut() -> String {
        let mut n = 0;
        move || {
            n += 1;
            format!("{n:05}")
        }
    }

    #[test]
    fn the_replica_count_follows_the_schedule() {
        let d = web(vec![(0, 10), (1800, 2)]);
        assert_eq!(d.replicas_at(0), 10);
        assert_eq!(d.replicas_at(1799), 10);
        assert_eq!(d.replicas_at(1800), 2);
        assert_eq!(web(vec![(60, 3)]).replicas_at(0), 0);
    }

    #[test]
    fn scaling_up_creates_pending_replicas_and_down_deletes_pending_ones_first() {
        let d = web(vec![(0, 3), (60, 1)]);
        let mut state = ClusterState::default();
        let up = scale(&d, &state, 0, suffixes());
        assert_eq!(up.created.len(), 3);
        assert!(up.created.iter().all(|p| p.is_pending() && d.selects(p)));
        state.pods = up.created;
        state.pods[0].node_name = Some("n1".into());
        state.pods[1].node_name = Some("n1".into());
        let down = scale(&d, &state, 60, suffixes());
        assert_eq!(
            down.deleted,
            vec![state.pods[2].key(), state.pods[1].key()],
            "the pending one, then the newest bound one"
        );
    }

    #[test]
    fn a_daemonset_pod_lands_on_every_ready_node_it_tolerates_once() {
        let catalog = Catalog::embedded();
        let mut ready = node("n1", "m5.large", "us-east-1a", "default", catalog);
        ready.ready = true;
        let mut tainted = node("n2", "m5.large", "us-east-1a", "default", catalog);
        tainted.ready = true;
        tainted.taints.push(Taint {
            key: "karpenter.sh/unregistered".into(),
            value: None,
            effect: TaintEffect::NoExecute,
        });
        let mut template = pod("agent", "100m", "128Mi");
        template.daemonset_owned = true;
        let mut state = ClusterState {
            nodes: vec![ready, tainted],
            daemonsets: vec![DaemonSet {
                namespace: "kube-system".into(),
                name: "agent".into(),
                template,
            }],
            ..ClusterState::default()
        };
        let pods = daemonset_pods(&state);
        assert_eq!(pods.len(), 1);
        assert_eq!(pods[0].node_name.as_deref(), Some("n1"));
        assert!(pods[0].daemonset_owned && !pods[0].is_pending());
        state.pods = pods;
        assert!(daemonset_pods(&state).is_empty(), "one per node");
    }

    #[test]
    fn the_mixed_workload_is_the_same_for_a_seed_and_fills_the_count() {
        let a = mixed_pods(501, 1);
        assert_eq!(a, mixed_pods(501, 1));
        assert_ne!(a, mixed_pods(501, 2));
        assert_eq!(a.len(), 501);
        assert!(
            a.iter()
                .all(|p| p.is_pending() && p.labels.contains_key("app"))
        );
        let names: HashSet<&str> = a.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names.len(), a.len(), "pod names are unique");
    }

    #[test]
    fn a_bound_cluster_puts_every_pod_on_a_node_that_holds_it() {
        let catalog = Catalog::embedded();
        let types: Vec<&InstanceType> = ["m5.xlarge", "m5.24xlarge"]
            .iter()
            .map(|t| catalog.get(t).unwrap())
            .collect();
        let mut template = pod("agent", "100m", "128Mi");
        template.daemonset_owned = true;
        let agent = DaemonSet {
            namespace: "kube-system".into(),
            name: "agent".into(),
            template,
        };
        let cluster = bound_cluster(
            mixed_pods(60, 3),
            &[agent],
            6,
            &types,
            &["us-east-1a", "us-east-1b"],
            "default",
            0.15,
        );
        assert_eq!(cluster.nodes.len(), 6);
        assert_eq!(cluster.pods.len(), 66);
        assert!(cluster.pods.iter().all(|p| !p.is_pending()));
        for node in &cluster.nodes {
            let mut used = Resources::new();
            for p in cluster
                .pods
                .iter()
                .filter(|p| p.node_name.as_ref() == Some(&node.name))
            {
                used.add(&p.requests);
            }
            assert!(used.fits_in(&node.allocatable), "{}", node.name);
        }
    }
}
