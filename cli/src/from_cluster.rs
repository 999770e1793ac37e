//! `simulate --cluster FILE --nodepools FILE` (or `--kubeconfig FILE`, the cluster
//! itself): a simulation that begins as a cluster stands. The snapshot is read as
//! `plan` reads it; its nodes become running instances
//! (Karpenter's, adopted by nodewright, when they carry `karpenter.sh/nodepool` of a
//! NodePool in the manifests; another tool's, never touched, otherwise), its pods stay
//! where they are, and the controllers that own them hold their replica counts, or
//! follow a day between their HorizontalPodAutoscaler's bounds.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use nodewright_core::catalog::{CapacityType, Catalog};
use nodewright_core::cluster::{Autoscaler, ClusterSnapshot, ControllerRef, Node, Pod, PodFields};
use nodewright_core::share::Shared;
use nodewright_core::well_known::{
    LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_NODEPOOL, LABEL_ZONE,
};
use nodewright_sim::{Deployment, RunningNode, Scenario};

use crate::failure::Failure;
use crate::inputs::{load_snapshot, need_in_snapshot, parse_snapshot};
use crate::manifests::{self, StrictArgs};

/// A day: how long a simulation from a cluster runs unless told otherwise.
pub(crate) const DEFAULT_DURATION: Duration = Duration::from_secs(24 * 3600);

/// EC2's long-run spot interruption frequency: the Spot Instance Advisor's lowest
/// bucket, "<5%" of instances interrupted a month, where most types sit; what
/// `--spot-interruptions` defaults to (interruptions a month per instance).
const TYPICAL_SPOT_INTERRUPTIONS: f64 = 0.05;

/// How often a diurnal curve's replica count is recomputed: the HPA controller syncs
/// every 15 s, but a day's curve moves by under a replica in 5 minutes at any
/// range up to ~90 replicas, and fewer steps keep a long run quick.
const CURVE_STEP_SECS: i64 = 5 * 60;

/// A day, in seconds: a diurnal curve's period.
const DAY_SECS: f64 = 24.0 * 3600.0;

/// The label the Deployment controller puts on its ReplicaSets' pods; a ReplicaSet is
/// named `<deployment>-<pod-template-hash>`.
const LABEL_POD_TEMPLATE_HASH: &str = "pod-template-hash";

/// EKS managed node groups' capacity type label (`ON_DEMAND`, `SPOT`, `CAPACITY_BLOCK`).
const LABEL_EKS_CAPACITY_TYPE: &str = "eks.amazonaws.com/capacityType";

/// Where a simulation's cluster comes from: a file (`--cluster`), or a live cluster's
/// objects listed once (`--kubeconfig`), so both runs of a comparison start from the
/// same read.
pub(crate) enum ClusterSource {
    File(PathBuf),
    Listed { kubeconfig: PathBuf, list: Vec<u8> },
}

impl ClusterSource {
    fn snapshot(&self) -> Result<ClusterSnapshot, Failure> {
        match self {
            ClusterSource::File(path) => load_snapshot(path),
            ClusterSource::Listed { list, .. } => parse_snapshot(list.as_slice(), self),
        }
    }

    /// The command as the user gave it, for what its messages name.
    fn command(&self) -> &'static str {
        match self {
            ClusterSource::File(_) => "simulate --cluster",
            ClusterSource::Listed { .. } => "simulate --kubeconfig",
        }
    }

    /// A cluster with no node: exit 1 naming where it came from (a warning with
    /// `--lenient`). A file's message says which `kubectl get` makes one; a live
    /// cluster's, that its read listed none.
    fn need_nodes(&self, snapshot: &ClusterSnapshot, strict: StrictArgs) -> Result<(), Failure> {
        match self {
            ClusterSource::File(_) => need_in_snapshot(self.command(), self, snapshot, true, strict),
            ClusterSource::Listed { .. } if snapshot.nodes.is_empty() => strict.check(vec![format!(
                "{self}: no Node: {} starts from the cluster's nodes, and listing them found none",
                self.command()
            )]),
            ClusterSource::Listed { .. } => Ok(()),
        }
    }
}

impl std::fmt::Display for ClusterSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClusterSource::File(path) => write!(f, "{}", path.display()),
            ClusterSource::Listed { kubeconfig, .. } => {
                write!(f, "the cluster of kubeconfig {}", kubeconfig.display())
            }
        }
    }
}

/// The scenario of a day of the cluster in `cluster` under the NodePools (and the
/// rest) of `nodepools`, and the cluster's HorizontalPodAutoscalers (for
/// [`follow_autoscalers`] once the run's length is known). Says on stderr which nodes
/// nodewright takes over.
pub(crate) fn scenario(
    cluster: &ClusterSource,
    nodepools: &[PathBuf],
    strict: StrictArgs,
) -> Result<(Scenario, Vec<Autoscaler>), Failure> {
    let manifests = manifests::load(nodepools, strict)?;
    manifests::need_node_pools(cluster.command(), nodepools, &manifests, strict)?;
    let snapshot = cluster.snapshot()?;
    cluster.need_nodes(&snapshot, strict)?;
    let mut scenario = Scenario::new(cluster.to_string());
    scenario.duration = DEFAULT_DURATION;
    scenario.adopt_karpenter_nodes = true;
    scenario.node_pools = manifests.node_pools;
    scenario.node_classes = manifests.node_classes;
    scenario.node_overlays = manifests.node_overlays;
    scenario.capacity_buffers = manifests.capacity_buffers;
    scenario.pod_templates = manifests.pod_templates;
    let pools: BTreeSet<&str> = scenario
        .node_pools
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    // A minute after the newest object: every node it starts with launched before it.
    let start = snapshot_time(&snapshot).map_or(scenario.start, |t| t + 60);
    scenario.start = start;
    let mut running = Vec::with_capacity(snapshot.nodes.len());
    for node in &snapshot.nodes {
        running.push(
            running_node(node, &pools, &scenario.catalog, start).map_err(|problem| {
                Failure::Invalid(vec![format!("{cluster}: Node {}: {problem}", node.name)])
            })?,
        );
    }
    let zones: BTreeSet<String> = running.iter().map(|r| r.zone.clone()).collect();
    let problems = crate::region::zone_problems(
        &zones.iter().cloned().collect::<Vec<_>>(),
        Some(crate::region::EMBEDDED_REGION),
    );
    strict.check(
        problems
            .into_iter()
            .map(|p| {
                format!("{cluster}: the nodes' zones: {p} (the simulated EC2 prices us-east-1)")
            })
            .collect(),
    )?;
    for zone in zones {
        if !scenario.zones.contains(&zone) {
            scenario.zones.push(zone);
        }
    }
    say_who_manages(&running, &pools);
    let nodes: BTreeSet<&str> = snapshot.nodes.iter().map(|n| n.name.as_str()).collect();
    scenario.running_nodes = running;
    let pods: Vec<Pod> = snapshot
        .pods
        .iter()
        // The DaemonSet controller gives every node its pod from the first instant.
        .filter(|p| !p.terminal && !p.daemonset_owned && !p.mirror)
        .map(|p| as_found(p, &nodes))
        .collect();
    scenario.deployments = controllers(&pods);
    scenario.spot_interruption_rate = TYPICAL_SPOT_INTERRUPTIONS;
    scenario.pods = pods;
    scenario.daemonsets = snapshot.daemonsets;
    scenario.pdbs = snapshot.pdbs;
    Ok((scenario, snapshot.autoscalers))
}

/// Each HorizontalPodAutoscaler's workload follows a day between the autoscaler's
/// bounds ([`diurnal`]) for the scenario's duration, starting from the replicas it has. Says on
/// stderr which workloads follow one, and which autoscalers name a workload the
/// snapshot has no pods of.
pub(crate) fn follow_autoscalers(scenario: &mut Scenario, autoscalers: &[Autoscaler]) {
    let duration = scenario.duration;
    let mut followed = Vec::new();
    for hpa in autoscalers {
        let Some(d) = scaled_by(&mut scenario.deployments, hpa) else {
            eprintln!(
                "simulate: HorizontalPodAutoscaler {}/{} scales {} {}, which has no pods in the snapshot: nothing to scale",
                hpa.namespace, hpa.name, hpa.target_kind, hpa.target_name
            );
            continue;
        };
        let now = d.replicas_at(0);
        d.replicas = diurnal(now, hpa.min_replicas, hpa.max_replicas, duration);
        d.autoscaled = true;
        followed.push(format!(
            "{}/{} {}–{}",
            hpa.namespace, hpa.target_name, hpa.min_replicas, hpa.max_replicas
        ));
    }
    if !followed.is_empty() {
        eprintln!(
            "simulate: {} workload(s) follow a day between their HorizontalPodAutoscaler's minReplicas and maxReplicas: {}",
            followed.len(),
            followed.join(", ")
        );
    }
}

/// The controller `hpa` scales: a StatefulSet or ReplicaSet by name; a Deployment's
/// ReplicaSet by the name the Deployment controller gives it
/// (`<deployment>-<pod-template-hash>`), the one with the most pods mid-rollout.
fn scaled_by<'d>(
    deployments: &'d mut [nodewright_sim::Deployment],
    hpa: &Autoscaler,
) -> Option<&'d mut nodewright_sim::Deployment> {
    let kind_of = |d: &nodewright_sim::Deployment| {
        d.template
            .controller
            .as_deref()
            .map(|c| c.kind.clone())
            .unwrap_or_default()
    };
    deployments
        .iter_mut()
        .filter(|d| d.namespace == hpa.namespace)
        .filter(|d| match hpa.target_kind.as_str() {
            "Deployment" => {
                kind_of(d) == "ReplicaSet"
                    && d.template
                        .labels
                        .get(LABEL_POD_TEMPLATE_HASH)
                        .is_some_and(|hash| d.name == format!("{}-{hash}", hpa.target_name))
            }
            kind => kind_of(d) == kind && d.name == hpa.target_name,
        })
        .max_by_key(|d| (d.replicas_at(0), std::cmp::Reverse(d.name.clone())))
}

/// Replicas over `duration`, a step every [`CURVE_STEP_SECS`]: a 24-hour cosine
/// between `min` and `max` that begins at `now` (held within the bounds, as the HPA
/// controller would at once) and rises first, to `max`, then falls to `min`.
fn diurnal(now: u32, min: u32, max: u32, duration: Duration) -> Vec<(i64, u32)> {
    let start = now.clamp(min, max);
    if min == max {
        return vec![(0, start)];
    }
    let range = f64::from(max - min);
    // The phase whose height is `start`, on the rising half of the wave.
    let phase = (1.0 - 2.0 * f64::from(start - min) / range)
        .clamp(-1.0, 1.0)
        .acos();
    let mut steps: Vec<(i64, u32)> = vec![(0, start)];
    let end = duration.as_secs() as i64;
    let mut t = CURVE_STEP_SECS;
    while t < end {
        let angle = phase + std::f64::consts::TAU * t as f64 / DAY_SECS;
        let replicas = (f64::from(min) + range * (1.0 - angle.cos()) / 2.0).round() as u32;
        if steps.last().is_some_and(|(_, r)| *r != replicas) {
            steps.push((t, replicas));
        }
        t += CURVE_STEP_SECS;
    }
    steps
}

/// When the snapshot was taken, as near as it tells: its newest node or pod.
fn snapshot_time(snapshot: &ClusterSnapshot) -> Option<i64> {
    let nodes = snapshot.nodes.iter().filter_map(|n| n.created_at);
    let pods = snapshot.pods.iter().filter_map(|p| p.created_at);
    nodes.chain(pods).max()
}

/// The node as a running instance: its type, zone and capacity type from the labels
/// the kubelet and the cloud provider set.
fn running_node(
    node: &Node,
    pools: &BTreeSet<&str>,
    catalog: &Catalog,
    start: i64,
) -> Result<RunningNode, String> {
    let label = |key: &str| node.labels.get(key).filter(|v| !v.is_empty());
    let instance_type = label(LABEL_INSTANCE_TYPE)
        .ok_or_else(|| format!("no {LABEL_INSTANCE_TYPE} label: its instance type is unknown"))?
        .clone();
    if catalog.get(&instance_type).is_none() {
        return Err(format!(
            "{LABEL_INSTANCE_TYPE} {instance_type:?} is not an instance type of the catalog"
        ));
    }
    let zone = label(LABEL_ZONE)
        .ok_or_else(|| format!("no {LABEL_ZONE} label: its zone is unknown"))?
        .clone();
    let capacity_type = match (label(LABEL_CAPACITY_TYPE), label(LABEL_EKS_CAPACITY_TYPE)) {
        (Some(karpenter), _) => CapacityType::parse(karpenter).ok_or_else(|| {
            format!("{LABEL_CAPACITY_TYPE} {karpenter:?} is not spot, on-demand or reserved")
        })?,
        (None, Some(eks)) if eks == "SPOT" => CapacityType::Spot,
        _ => CapacityType::OnDemand,
    };
    let node_pool = label(LABEL_NODEPOOL)
        .filter(|pool| pools.contains(pool.as_str()))
        .cloned();
    Ok(RunningNode {
        launched_at: node.created_at.map_or(start - 60, |t| t.min(start - 60)),
        node: node.clone(),
        instance_type,
        zone,
        capacity_type,
        node_pool,
    })
}

/// One line on stderr: the nodes nodewright adopts (by NodePool), and those it leaves
/// alone and why, as adoption decides.
fn say_who_manages(running: &[RunningNode], pools: &BTreeSet<&str>) {
    let mut adopted: BTreeMap<&str, usize> = BTreeMap::new();
    let mut other_pools: BTreeMap<&str, usize> = BTreeMap::new();
    let mut unlabelled = 0;
    for r in running {
        match (&r.node_pool, r.node.labels.get(LABEL_NODEPOOL)) {
            (Some(pool), _) => *adopted.entry(pool).or_default() += 1,
            (None, Some(pool)) if !pools.contains(pool.as_str()) => {
                *other_pools.entry(pool).or_default() += 1
            }
            _ => unlabelled += 1,
        }
    }
    let count = |m: &BTreeMap<&str, usize>| {
        m.iter()
            .map(|(pool, n)| format!("{n} of {pool}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut line = format!(
        "simulate: {} node(s) taken over as nodewright's (Karpenter's, adopted)",
        adopted.values().sum::<usize>()
    );
    if !adopted.is_empty() {
        line += &format!(": {}", count(&adopted));
    }
    line += &format!("; {unlabelled} left unmanaged (no {LABEL_NODEPOOL} label: another tool's)");
    if !other_pools.is_empty() {
        line += &format!(
            "; {} left unmanaged (a NodePool not in --nodepools: {})",
            other_pools.values().sum::<usize>(),
            count(&other_pools)
        );
    }
    eprintln!("{line}");
}

/// The pod as the simulation starts with it: bound where it runs (pending if its node
/// is not in the snapshot), its scheduler's marks cleared.
fn as_found(pod: &Pod, nodes: &BTreeSet<&str>) -> Pod {
    let mut fields = PodFields::clone(pod);
    if fields
        .node_name
        .as_deref()
        .is_some_and(|n| !nodes.contains(n))
    {
        fields.node_name = None;
    }
    fields.nominated_node_name = None;
    fields.marked_unschedulable = false;
    Pod::from(fields)
}

/// The controllers (ReplicaSets, StatefulSets) of `pods`, each holding the replicas it
/// has: a pod it loses is made again. A controller's template is its pods' shared
/// labels (a StatefulSet's per-pod labels aside), so it counts exactly its own pods.
fn controllers(pods: &[Pod]) -> Vec<Deployment> {
    let mut groups: BTreeMap<(String, String, String), Vec<&Pod>> = BTreeMap::new();
    for pod in pods {
        let Some(controller) = pod.controller.as_deref() else {
            continue;
        };
        if matches!(controller.kind.as_str(), "ReplicaSet" | "StatefulSet") {
            groups
                .entry((
                    pod.namespace.clone(),
                    controller.kind.clone(),
                    controller.name.clone(),
                ))
                .or_default()
                .push(pod);
        }
    }
    groups
        .into_iter()
        .map(|((namespace, kind, name), pods)| {
            let mut shared: BTreeMap<String, String> = (*pods[0].labels).clone();
            for pod in &pods[1..] {
                shared.retain(|k, v| pod.labels.get(k) == Some(v));
            }
            let mut template = PodFields::clone(pods[0]);
            template.name = String::new();
            template.node_name = None;
            template.labels = Shared::new(shared);
            template.created_at = None;
            template.started_at = None;
            template.terminating = false;
            template.deletion_at = None;
            template.controller = Some(Arc::new(ControllerRef {
                api_version: "apps/v1".into(),
                kind,
                name: name.clone(),
            }));
            Deployment {
                name,
                namespace,
                template: Pod::from(template),
                replicas: vec![(0, pods.len() as u32)],
                budget: None,
                autoscaled: false,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn replicas(deployments: &[Deployment]) -> HashMap<String, u32> {
        deployments
            .iter()
            .map(|d| (d.name.clone(), d.replicas_at(0)))
            .collect()
    }

    fn pod(name: &str, controller: &str, labels: &[(&str, &str)]) -> Pod {
        Pod::from(PodFields {
            namespace: "default".into(),
            name: name.into(),
            labels: Shared::new(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            controller: Some(Arc::new(ControllerRef {
                api_version: "apps/v1".into(),
                kind: "StatefulSet".into(),
                name: controller.into(),
            })),
            node_name: Some("ip-10-0-0-1.ec2.internal".into()),
            ..PodFields::default()
        })
    }

    #[test]
    fn a_controller_counts_its_own_pods_by_the_labels_they_share() {
        let pods = [
            pod(
                "db-0",
                "db",
                &[
                    ("app", "db"),
                    ("statefulset.kubernetes.io/pod-name", "db-0"),
                ],
            ),
            pod(
                "db-1",
                "db",
                &[
                    ("app", "db"),
                    ("statefulset.kubernetes.io/pod-name", "db-1"),
                ],
            ),
            pod("cache-0", "cache", &[("app", "cache")]),
        ];
        let deployments = controllers(&pods);
        assert_eq!(
            replicas(&deployments),
            HashMap::from([("db".to_string(), 2), ("cache".to_string(), 1)])
        );
        let db = deployments.iter().find(|d| d.name == "db").unwrap();
        assert!(pods[..2].iter().all(|p| db.selects(p)), "{db:?}");
        assert!(!db.selects(&pods[2]));
        assert_eq!(db.template.node_name, None);
    }

    #[test]
    fn an_autoscaled_workload_rises_from_its_replicas_to_max_then_falls_to_min_in_a_day() {
        let day = Duration::from_secs(24 * 3600);
        let steps = diurnal(4, 2, 10, day);
        assert_eq!(steps[0], (0, 4), "it starts where it stands");
        assert!(
            steps
                .windows(2)
                .all(|w| w[0].0 < w[1].0 && w[0].1 != w[1].1)
        );
        assert!(
            steps
                .iter()
                .all(|(at, r)| (2..=10).contains(r) && *at < 24 * 3600)
        );
        let peak = steps
            .iter()
            .position(|(_, r)| *r == 10)
            .expect("reaches max");
        let trough = steps
            .iter()
            .position(|(_, r)| *r == 2)
            .expect("reaches min");
        assert!(peak < trough, "{steps:?}");
        assert!(
            steps[..=peak].windows(2).all(|w| w[1].1 > w[0].1),
            "rises first"
        );
        // Held within the bounds at once, as the HPA controller would.
        assert_eq!(diurnal(20, 2, 10, day)[0], (0, 10));
        assert_eq!(diurnal(3, 5, 5, day), vec![(0, 5)]);
    }

    #[test]
    fn an_autoscaler_of_a_deployment_scales_the_replicaset_named_for_it() {
        let replica = |name: &str, rs: &str, hash: &str| {
            let mut p = PodFields::clone(&pod(
                name,
                rs,
                &[("app", "web"), ("pod-template-hash", hash)],
            ));
            p.controller = Some(Arc::new(ControllerRef {
                api_version: "apps/v1".into(),
                kind: "ReplicaSet".into(),
                name: rs.into(),
            }));
            Pod::from(p)
        };
        let pods = [
            replica("web-7d9f-a", "web-7d9f", "7d9f"),
            replica("web-7d9f-b", "web-7d9f", "7d9f"),
            // Another Deployment whose name starts the same.
            replica("web-api-55c1-a", "web-api-55c1", "55c1"),
        ];
        let mut scenario = Scenario::new("test");
        scenario.deployments = controllers(&pods);
        scenario.duration = Duration::from_secs(24 * 3600);
        let hpa = Autoscaler {
            namespace: "default".into(),
            name: "web".into(),
            target_kind: "Deployment".into(),
            target_name: "web".into(),
            min_replicas: 2,
            max_replicas: 8,
        };
        follow_autoscalers(&mut scenario, &[hpa]);
        let web = scenario
            .deployments
            .iter()
            .find(|d| d.name == "web-7d9f")
            .unwrap();
        assert_eq!(web.replicas_at(0), 2);
        assert_eq!(web.replicas_at(12 * 3600), 8, "{:?}", web.replicas);
        let api = scenario
            .deployments
            .iter()
            .find(|d| d.name == "web-api-55c1")
            .unwrap();
        assert_eq!(api.replicas, vec![(0, 1)], "not its autoscaler's");
    }
}
