//! Scenario files for `nodewright simulate`: YAML (or JSON) read into an engine
//! [`Scenario`]. Every error names the file and the field (`deployments[0].pod.containers[0].resources.requests.cpu`),
//! as `validate` does for manifests.
//!
//! NodePools and EC2NodeClasses are read with `core::api` (inline under `manifests`, or
//! from `manifestFiles` relative to the scenario), pod specs with the snapshot parser's
//! pod conversion (`core::snapshot::pod_from_k8s`), budgets with `pdb_from_k8s`: the
//! same rules as `plan` and the Lambdas.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::policy::v1 as policy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use nodewright_core::api::duration::{EXPECTED_DURATION, parse_duration};
use nodewright_core::api::{self, LoadError, Strictness};
use nodewright_core::catalog::CapacityType;
use nodewright_core::cluster::DaemonSet;
use nodewright_core::default_spread::SchedulerConfig;
use nodewright_core::interruption::RebalanceAction;
use nodewright_core::repair::RepairSettings;
use nodewright_core::snapshot::{pdb_from_k8s, pod_from_k8s};
use nodewright_sim::fakes::FakeReservation;
use nodewright_sim::faults::FaultConfig;
use nodewright_sim::{Deployment, Disturbance, Scenario, ScheduledDisturbance, Target};
use serde::Deserialize;

/// The scenario built into the binary: `nodewright simulate` with no file.
pub const BUNDLED: &str = include_str!("../examples/scenario.yaml");
pub const BUNDLED_NAME: &str = "cli/examples/scenario.yaml (bundled)";

/// Why a scenario could not be read: the file and what is wrong, on one line.
#[derive(Debug)]
pub struct ScenarioError {
    pub file: String,
    pub message: String,
    /// The scenario was read, but its manifests break Karpenter's rules or CRDs (exit
    /// 1, as `validate`); otherwise it could not be used (exit 2).
    pub invalid: bool,
}

impl From<ScenarioError> for crate::failure::Failure {
    fn from(e: ScenarioError) -> Self {
        if e.invalid {
            crate::failure::Failure::Invalid(vec![e.to_string()])
        } else {
            crate::failure::Failure::Unusable(e.to_string())
        }
    }
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.file, self.message)
    }
}

/// A duration as Karpenter writes them (`30s`, `45m`, `1h30m`).
#[derive(Debug, Clone, Copy)]
pub struct Dur(pub Duration);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        parse_duration(&text)
            .map(Dur)
            .ok_or_else(|| serde::de::Error::custom(format!("{text:?}: {EXPECTED_DURATION}")))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct File {
    name: Option<String>,
    duration: Option<Dur>,
    seed: Option<u64>,
    zones: Option<Vec<String>>,
    rebalance: Option<Rebalance>,
    /// The stack's node repair switches (`LegacyNodeRepair`, `RebootForRepair`,
    /// `TerminateFirstRepair`).
    node_repair: Option<NodeRepairSpec>,
    /// The cluster's kube-scheduler default spread, as `--scheduler-config` and the
    /// stack's `SchedulerConfig` take it (`podTopologySpread.defaultConstraints`).
    scheduler_config: Option<serde_json::Value>,
    /// How often SQS delivers an event twice (0..1).
    duplicate_rate: Option<f64>,
    #[serde(default)]
    manifests: Vec<serde_json::Value>,
    #[serde(default)]
    manifest_files: Vec<String>,
    #[serde(default)]
    deployments: Vec<DeploymentSpec>,
    #[serde(default)]
    daemon_sets: Vec<DaemonSetSpec>,
    #[serde(default)]
    events: Vec<EventSpec>,
    faults: Option<FaultsSpec>,
    /// Capacity reservations EC2 holds (the `--reservations` format of `plan`):
    /// `available` is the reservation's size at the start.
    #[serde(default)]
    reservations: Vec<nodewright_core::catalog::Reservation>,
}

/// `faults`: injected failures, stalls and crashes (docs/simulator.md).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FaultsSpec {
    /// Probability that a call fails or stalls (default 0.05).
    rate: Option<f64>,
    /// Mean virtual time between two crashes of an invocation (none: no crash).
    crash_every: Option<Dur>,
    /// Default: the scenario's seed.
    seed: Option<u64>,
    /// Faults stop this long after the start (default: they last the run).
    until: Option<Dur>,
    #[serde(default)]
    ports: PortRates,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct PortRates {
    ec2: Option<f64>,
    dynamodb: Option<f64>,
    kubernetes: Option<f64>,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "camelCase")]
enum Rebalance {
    Ignore,
    Cordon,
    Replace,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct DeploymentSpec {
    name: String,
    #[serde(default = "default_namespace")]
    namespace: String,
    /// Pod labels (they select the replicas); default `app: <name>`.
    labels: Option<BTreeMap<String, String>>,
    replicas: Vec<ReplicaStep>,
    pod: core::PodSpec,
    disruption_budget: Option<BudgetSpec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplicaStep {
    at: Dur,
    replicas: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct BudgetSpec {
    min_available: Option<IntOrString>,
    max_unavailable: Option<IntOrString>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct DaemonSetSpec {
    name: String,
    #[serde(default = "default_system_namespace")]
    namespace: String,
    labels: Option<BTreeMap<String, String>>,
    pod: core::PodSpec,
}

fn default_namespace() -> String {
    "default".into()
}

fn default_system_namespace() -> String {
    "kube-system".into()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct EventSpec {
    at: Dur,
    spot_interruption: Option<TargetSpec>,
    reservation_interruption: Option<TargetSpec>,
    rebalance_recommendation: Option<TargetSpec>,
    scheduled_change: Option<ScheduledChangeSpec>,
    instance_stopped: Option<TargetSpec>,
    node_not_ready: Option<SeveralSpec>,
    instance_impaired: Option<SeveralSpec>,
    gpu_fault: Option<GpuFaultSpec>,
    capacity_shortage: Option<ShortageSpec>,
    scale_node_pool: Option<ScaleSpec>,
    image_release: Option<EmptySpec>,
    zonal_shift: Option<ZonalShiftSpec>,
}

/// `zonalShift`: ARC shifts traffic away from `zone` for `duration`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ZonalShiftSpec {
    zone: String,
    duration: Dur,
}

/// `nodeRepair`: how the provisioner repairs, as the stack's parameters say.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct NodeRepairSpec {
    #[serde(default)]
    legacy: bool,
    #[serde(default)]
    reboot_for_repair: bool,
    #[serde(default)]
    terminate_first_repair: bool,
}

/// `gpuFault`: the node monitoring agent reports an NVIDIA XID on `count` nodes.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GpuFaultSpec {
    #[serde(default)]
    target: TargetName,
    count: Option<u32>,
    xid: u32,
}

/// An event that needs nothing more than its time: `imageRelease: {}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EmptySpec {}

/// `kubectl scale nodepool <nodepool> --replicas=<replicas>`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScaleSpec {
    nodepool: String,
    replicas: u32,
}

/// A target and how many distinct instances it hits (default 1).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SeveralSpec {
    #[serde(default)]
    target: TargetName,
    count: Option<u32>,
}

impl SeveralSpec {
    fn count(&self, field: &str) -> Result<u32, String> {
        match self.count {
            None => Ok(1),
            Some(0) => Err(format!(".{field}.count: at least 1")),
            Some(n) => Ok(n),
        }
    }
}

const EVENT_KINDS: &str = "spotInterruption, reservationInterruption, rebalanceRecommendation, scheduledChange, instanceStopped, nodeNotReady, instanceImpaired, gpuFault, capacityShortage, scaleNodePool, imageRelease or zonalShift";

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct TargetSpec {
    #[serde(default)]
    target: TargetName,
}

#[derive(Deserialize, Default, Clone, Copy)]
#[serde(rename_all = "camelCase")]
enum TargetName {
    Busiest,
    #[default]
    Random,
    Oldest,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScheduledChangeSpec {
    #[serde(default)]
    target: TargetName,
    notice: Dur,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ShortageSpec {
    instance_types: Vec<String>,
    #[serde(default)]
    zones: Vec<String>,
    #[serde(default)]
    capacity_types: Vec<CapacityName>,
    duration: Dur,
}

#[derive(Deserialize, Clone, Copy)]
enum CapacityName {
    #[serde(rename = "spot")]
    Spot,
    #[serde(rename = "on-demand")]
    OnDemand,
}

impl From<TargetName> for Target {
    fn from(t: TargetName) -> Self {
        match t {
            TargetName::Busiest => Target::Busiest,
            TargetName::Random => Target::Random,
            TargetName::Oldest => Target::Oldest,
        }
    }
}

/// Reads the scenario at `path`, or the bundled one.
#[cfg(test)]
pub fn load(path: Option<&Path>) -> Result<Scenario, ScenarioError> {
    load_with(path, Strictness::Strict)
}

/// [`load`], its manifests held to Karpenter's CRDs as `strictness` says.
pub fn load_with(path: Option<&Path>, strictness: Strictness) -> Result<Scenario, ScenarioError> {
    match path {
        None => parse_with(BUNDLED_NAME, BUNDLED, Path::new("cli/examples"), strictness),
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| ScenarioError {
                file: p.display().to_string(),
                message: format!("cannot read: {e}"),
                invalid: false,
            })?;
            let dir = p.parent().map(Path::to_path_buf).unwrap_or_default();
            parse_with(&p.display().to_string(), &text, &dir, strictness)
        }
    }
}

/// Parses a scenario named `file` whose relative paths start at `dir`.
#[cfg(test)]
pub fn parse(file: &str, text: &str, dir: &Path) -> Result<Scenario, ScenarioError> {
    parse_with(file, text, dir, Strictness::Strict)
}

/// [`parse`], its manifests held to Karpenter's CRDs as `strictness` says (unknown
/// fields, missing required ones, empty files).
pub fn parse_with(
    file: &str,
    text: &str,
    dir: &Path,
    strictness: Strictness,
) -> Result<Scenario, ScenarioError> {
    let fail = failing(file);
    let mut spec = read_file(file, text)?;
    let mut scenario = Scenario::new(spec.name.clone().unwrap_or_else(|| file.to_string()));
    if let Some(zones) = spec.zones.take() {
        if zones.is_empty() {
            return Err(fail("zones: at least one zone is required".into()));
        }
        scenario.zones = zones;
    }
    // The simulated EC2 prices us-east-1 (the embedded catalog).
    let zone_problems =
        crate::region::zone_problems(&scenario.zones, Some(crate::region::EMBEDDED_REGION));
    if strictness == Strictness::Strict && !zone_problems.is_empty() {
        return Err(ScenarioError {
            invalid: true,
            ..fail(format!("zones: {}", zone_problems.join("; ")))
        });
    }
    settings(&mut spec, &mut scenario, &fail)?;

    // Manifests: inline documents and files, validated together (a NodePool may name
    // an EC2NodeClass from another source).
    let mut sources = Vec::new();
    for (i, value) in spec.manifests.iter().enumerate() {
        sources.push((format!("manifests[{i}]"), value.to_string()));
    }
    for (i, f) in spec.manifest_files.iter().enumerate() {
        let path: PathBuf = dir.join(f);
        let text = std::fs::read_to_string(&path).map_err(|e| {
            fail(format!(
                "manifestFiles[{i}]: {}: cannot read: {e}",
                path.display()
            ))
        })?;
        sources.push((path.display().to_string(), text));
    }
    let manifests = api::load_with(&sources, strictness).map_err(|e| match e {
        LoadError::Format(f) => fail(f.to_string()),
        LoadError::Invalid(problems) => ScenarioError {
            invalid: true,
            ..fail(
                problems
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; "),
            )
        },
    })?;
    if manifests.node_pools.is_empty() {
        return Err(fail(
            "manifests: no NodePool (give at least one karpenter.sh/v1 NodePool and its EC2NodeClass)".into(),
        ));
    }
    scenario.node_pools = manifests.node_pools;
    scenario.node_classes = manifests.node_classes;
    scenario.node_overlays = manifests.node_overlays;
    scenario.capacity_buffers = manifests.capacity_buffers;
    scenario.pod_templates = manifests.pod_templates;

    for (i, d) in std::mem::take(&mut spec.deployments)
        .into_iter()
        .enumerate()
    {
        scenario
            .deployments
            .push(deployment(d).map_err(|m| fail(format!("deployments[{i}]: {m}")))?);
    }
    for (i, d) in std::mem::take(&mut spec.daemon_sets)
        .into_iter()
        .enumerate()
    {
        scenario
            .daemonsets
            .push(daemonset(d).map_err(|m| fail(format!("daemonSets[{i}]: {m}")))?);
    }
    events(&mut spec, &mut scenario, &fail)?;
    for (i, r) in spec.reservations.into_iter().enumerate() {
        if let Some(p) = crate::reservations::shape_problems(&r).into_iter().next() {
            return Err(fail(format!("reservations[{i}].{p}")));
        }
        let mut fake = FakeReservation::new(&r.id, &r.instance_type, &r.zone, r.available);
        fake.reservation_type = r.reservation_type;
        fake.end_time = r.end_time;
        fake.interruptible = r.interruptible;
        scenario.reservations.push(fake);
    }
    Ok(scenario)
}

/// An error in `file` (not a manifest's: exit 2).
fn failing(file: &str) -> impl Fn(String) -> ScenarioError + '_ {
    move |message: String| ScenarioError {
        file: file.to_string(),
        message,
        invalid: false,
    }
}

/// The scenario file's fields, an error naming the path of the one at fault.
fn read_file(file: &str, text: &str) -> Result<File, ScenarioError> {
    let fail = failing(file);
    let de = serde_yaml_ng::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        if path == "." {
            fail(inner)
        } else {
            fail(format!("{path}: {inner}"))
        }
    })
}

/// The settings of the run: how long, its seed, the stack's switches, the queue's
/// duplicates and the faults.
fn settings(
    spec: &mut File,
    scenario: &mut Scenario,
    fail: &dyn Fn(String) -> ScenarioError,
) -> Result<(), ScenarioError> {
    if let Some(d) = spec.duration.take() {
        scenario.duration = d.0;
    }
    if let Some(seed) = spec.seed.take() {
        scenario.seed = seed;
    }
    if let Some(r) = spec.rebalance.take() {
        scenario.rebalance = match r {
            Rebalance::Ignore => RebalanceAction::Ignore,
            Rebalance::Cordon => RebalanceAction::Cordon,
            Rebalance::Replace => RebalanceAction::Replace,
        };
    }
    if let Some(r) = spec.node_repair.take() {
        if r.legacy && r.terminate_first_repair {
            return Err(fail(
                "nodeRepair: legacy and terminateFirstRepair cannot both be true (the legacy repair stages no replacement)".into(),
            ));
        }
        scenario.repair = if r.legacy {
            RepairSettings::legacy()
        } else {
            RepairSettings::aws(r.reboot_for_repair, r.terminate_first_repair)
        };
    }
    if let Some(config) = spec.scheduler_config.take() {
        scenario.world.scheduler_config =
            SchedulerConfig::from_value(config).map_err(|problems| ScenarioError {
                invalid: true,
                ..fail(
                    problems
                        .iter()
                        .map(|p| format!("schedulerConfig: {p}"))
                        .collect::<Vec<_>>()
                        .join("; "),
                )
            })?;
    }
    if let Some(rate) = spec.duplicate_rate.take() {
        if !(0.0..=1.0).contains(&rate) {
            return Err(fail(format!(
                "duplicateRate: {rate} is not between 0 and 1"
            )));
        }
        scenario.world.queue.duplicate_rate = rate;
    }
    if let Some(f) = spec.faults.take() {
        scenario.faults = Some(faults(f, scenario.seed).map_err(|m| fail(format!("faults{m}")))?);
    }
    Ok(())
}

/// The events, checked against the scenario's NodePools, zones and catalog.
fn events(
    spec: &mut File,
    scenario: &mut Scenario,
    fail: &dyn Fn(String) -> ScenarioError,
) -> Result<(), ScenarioError> {
    for (i, e) in std::mem::take(&mut spec.events).into_iter().enumerate() {
        let d = disturbance(e, scenario).map_err(|m| fail(format!("events[{i}]{m}")))?;
        scenario.disturbances.push(d);
    }
    Ok(())
}

/// `simulate SCENARIO --cluster FILE`: the scenario's events, faults and settings
/// (`duration`, `seed`, `rebalance`, `nodeRepair`, `schedulerConfig`,
/// `duplicateRate`), read before the run from the cluster is built
/// ([`Overlay::apply`]). What the cluster and `--nodepools` give (manifests,
/// workloads, zones, reservations) it must not set.
pub struct Overlay {
    file: String,
    spec: File,
}

/// Reads the scenario at `path` as an [`Overlay`].
pub fn overlay(path: &Path) -> Result<Overlay, ScenarioError> {
    let file = path.display().to_string();
    let fail = failing(&file);
    let text = std::fs::read_to_string(path).map_err(|e| fail(format!("cannot read: {e}")))?;
    let spec = read_file(&file, &text)?;
    let given_by_the_cluster = [
        ("manifests", !spec.manifests.is_empty()),
        ("manifestFiles", !spec.manifest_files.is_empty()),
        ("deployments", !spec.deployments.is_empty()),
        ("daemonSets", !spec.daemon_sets.is_empty()),
        ("zones", spec.zones.is_some()),
        ("reservations", !spec.reservations.is_empty()),
    ];
    if let Some((field, _)) = given_by_the_cluster.iter().find(|(_, set)| *set) {
        return Err(fail(format!(
            "{field}: with --cluster the snapshot and --nodepools give the cluster; a scenario adds only events, faults, duration, seed, rebalance, nodeRepair, schedulerConfig and duplicateRate"
        )));
    }
    Ok(Overlay {
        file: file.clone(),
        spec,
    })
}

impl Overlay {
    /// The settings, then the events (checked against `onto`'s NodePools and zones).
    pub fn apply(mut self, onto: &mut Scenario) -> Result<(), ScenarioError> {
        let fail = failing(&self.file);
        settings(&mut self.spec, onto, &fail)?;
        events(&mut self.spec, onto, &fail)
    }
}

fn object_meta(name: &str, namespace: &str, labels: &BTreeMap<String, String>) -> meta::ObjectMeta {
    meta::ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(namespace.to_string()),
        labels: Some(labels.clone()),
        ..meta::ObjectMeta::default()
    }
}

fn labels_or_app(labels: Option<BTreeMap<String, String>>, name: &str) -> BTreeMap<String, String> {
    labels
        .filter(|l| !l.is_empty())
        .unwrap_or_else(|| BTreeMap::from([("app".to_string(), name.to_string())]))
}

/// A DNS-1123 label of at most `max` characters, as Kubernetes requires of names: `what`
/// says which (`name`, `namespace`) and why the limit.
fn dns_label(what: &str, value: &str, max: usize, why: &str) -> Result<(), String> {
    if nodewright_core::api::labels::is_dns_label(value, max) {
        return Ok(());
    }
    Err(format!(
        "{what}: {value:?} is not a name Kubernetes accepts: lowercase letters, digits and '-', starting and ending with a letter or digit, at most {max} characters{why}"
    ))
}

/// The names of a workload and its namespace: its pods' names are made from them.
fn workload_names(name: &str, namespace: &str, max: usize, pods: &str) -> Result<(), String> {
    dns_label("name", name, max, &format!(" (its pods are named {pods})"))?;
    dns_label("namespace", namespace, 63, "")
}

fn deployment(d: DeploymentSpec) -> Result<Deployment, String> {
    // Pods are `<name>-<5 characters>`, at most 63 characters.
    workload_names(&d.name, &d.namespace, 57, "<name>-<5 characters>")?;
    let labels = labels_or_app(d.labels, &d.name);
    let template = pod_from_k8s(&core::Pod {
        metadata: object_meta(&d.name, &d.namespace, &labels),
        spec: Some(d.pod),
        status: None,
    })
    .map_err(|e| e.to_string())?;
    let mut replicas = Vec::with_capacity(d.replicas.len());
    let mut last = None;
    for (i, step) in d.replicas.iter().enumerate() {
        let at = i64::try_from(step.at.0.as_secs()).unwrap_or(i64::MAX);
        if last.is_some_and(|l| at <= l) {
            return Err(format!(
                "replicas[{i}].at: steps must be in time order (each later than the one before)"
            ));
        }
        last = Some(at);
        replicas.push((at, step.replicas));
    }
    let budget = match d.disruption_budget {
        None => None,
        Some(b) => {
            let pdb = policy::PodDisruptionBudget {
                metadata: object_meta(&d.name, &d.namespace, &BTreeMap::new()),
                spec: Some(policy::PodDisruptionBudgetSpec {
                    min_available: b.min_available,
                    max_unavailable: b.max_unavailable,
                    selector: Some(meta::LabelSelector {
                        match_labels: Some(labels.clone()),
                        match_expressions: None,
                    }),
                    unhealthy_pod_eviction_policy: None,
                }),
                status: None,
            };
            Some(pdb_from_k8s(&pdb).map_err(|e| format!("disruptionBudget: {e}"))?)
        }
    };
    Ok(Deployment {
        name: d.name,
        namespace: d.namespace,
        template,
        replicas,
        budget,
        autoscaled: false,
    })
}

fn daemonset(d: DaemonSetSpec) -> Result<DaemonSet, String> {
    // Pods are `<name>-<node>`, a simulated node's name being `ip-10-a-b-c` (at most 17
    // characters before `.ec2.internal`): 45 + 1 + 17 = 63.
    workload_names(&d.name, &d.namespace, 45, "<name>-<node>")?;
    let labels = labels_or_app(d.labels, &d.name);
    let mut template = pod_from_k8s(&core::Pod {
        metadata: object_meta(&d.name, &d.namespace, &labels),
        spec: Some(d.pod),
        status: None,
    })
    .map_err(|e| e.to_string())?;
    template.daemonset_owned = true;
    Ok(DaemonSet {
        namespace: d.namespace,
        name: d.name,
        template,
    })
}

/// The disturbance an event describes; errors start with the field path after
/// `events[i]`.
/// The `faults` section; an error names the field (`.rate: ...`).
fn faults(f: FaultsSpec, seed: u64) -> Result<FaultConfig, String> {
    let rate = |field: &str, r: Option<f64>| match r {
        Some(r) if !(0.0..=1.0).contains(&r) => {
            Err(format!(".{field}: {r} is not between 0 and 1"))
        }
        r => Ok(r),
    };
    let defaults = FaultConfig::default();
    Ok(FaultConfig {
        rate: rate("rate", f.rate)?.unwrap_or(defaults.rate),
        crash_every: f.crash_every.map(|d| d.0),
        seed: f.seed.unwrap_or(seed),
        ec2: rate("ports.ec2", f.ports.ec2)?,
        dynamodb: rate("ports.dynamodb", f.ports.dynamodb)?,
        kubernetes: rate("ports.kubernetes", f.ports.kubernetes)?,
        until: f.until.map(|d| d.0),
    })
}

fn disturbance(e: EventSpec, scenario: &Scenario) -> Result<ScheduledDisturbance, String> {
    let mut kinds: Vec<Disturbance> = Vec::new();
    if let Some(t) = e.spot_interruption {
        kinds.push(Disturbance::SpotInterruption {
            target: t.target.into(),
        });
    }
    if let Some(t) = e.reservation_interruption {
        kinds.push(Disturbance::ReservationInterruption {
            target: t.target.into(),
        });
    }
    if let Some(t) = e.rebalance_recommendation {
        kinds.push(Disturbance::RebalanceRecommendation {
            target: t.target.into(),
        });
    }
    if let Some(s) = e.scheduled_change {
        kinds.push(Disturbance::ScheduledChange {
            target: s.target.into(),
            notice: s.notice.0,
        });
    }
    if let Some(t) = e.instance_stopped {
        kinds.push(Disturbance::InstanceStopped {
            target: t.target.into(),
        });
    }
    if let Some(t) = e.node_not_ready {
        kinds.push(Disturbance::NodeNotReady {
            count: t.count("nodeNotReady")?,
            target: t.target.into(),
        });
    }
    if let Some(t) = e.instance_impaired {
        kinds.push(Disturbance::InstanceImpaired {
            count: t.count("instanceImpaired")?,
            target: t.target.into(),
        });
    }
    if let Some(g) = e.gpu_fault {
        kinds.push(Disturbance::GpuFault {
            count: match g.count {
                None => 1,
                Some(0) => return Err(".gpuFault.count: at least 1".into()),
                Some(n) => n,
            },
            target: g.target.into(),
            xid: g.xid,
        });
    }
    if let Some(s) = e.capacity_shortage {
        if s.instance_types.is_empty() {
            return Err(".capacityShortage.instanceTypes: name at least one instance type".into());
        }
        for (i, t) in s.instance_types.iter().enumerate() {
            if scenario.catalog.get(t).is_none() {
                return Err(format!(
                    ".capacityShortage.instanceTypes[{i}]: {t:?} is not in the instance catalog"
                ));
            }
        }
        for (i, z) in s.zones.iter().enumerate() {
            if !scenario.zones.contains(z) {
                return Err(format!(
                    ".capacityShortage.zones[{i}]: {z:?} is not one of the scenario's zones ({})",
                    scenario.zones.join(", ")
                ));
            }
        }
        kinds.push(Disturbance::CapacityShortage {
            instance_types: s.instance_types,
            zones: s.zones,
            capacity_types: s
                .capacity_types
                .into_iter()
                .map(|c| match c {
                    CapacityName::Spot => CapacityType::Spot,
                    CapacityName::OnDemand => CapacityType::OnDemand,
                })
                .collect(),
            duration: s.duration.0,
        });
    }
    if let Some(s) = e.scale_node_pool {
        match scenario.node_pools.iter().find(|p| p.name == s.nodepool) {
            None => {
                return Err(format!(
                    ".scaleNodePool.nodepool: NodePool {:?} is not in the scenario's manifests",
                    s.nodepool
                ));
            }
            // The CRD refuses a change between static and dynamic (Karpenter's rule).
            Some(p) if !p.is_static() => {
                return Err(format!(
                    ".scaleNodePool.nodepool: NodePool {:?} has no spec.replicas: only a static NodePool scales",
                    s.nodepool
                ));
            }
            Some(_) => kinds.push(Disturbance::ScaleNodePool {
                node_pool: s.nodepool,
                replicas: s.replicas,
            }),
        }
    }
    if e.image_release.is_some() {
        kinds.push(Disturbance::ImageRelease);
    }
    if let Some(z) = e.zonal_shift {
        if !scenario.zones.contains(&z.zone) {
            return Err(format!(
                ".zonalShift.zone: {:?} is not one of the scenario's zones ({})",
                z.zone,
                scenario.zones.join(", ")
            ));
        }
        if z.duration.0.is_zero() {
            return Err(".zonalShift.duration: longer than 0s".into());
        }
        kinds.push(Disturbance::ZonalShift {
            zone: z.zone,
            duration: z.duration.0,
        });
    }
    match kinds.len() {
        1 => Ok(ScheduledDisturbance {
            at: e.at.0,
            disturbance: kinds.remove(0),
        }),
        0 => Err(format!(": name what happens: one of {EVENT_KINDS}")),
        _ => Err(format!(
            ": one event per entry (found {}): one of {EVENT_KINDS}",
            kinds.len()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(text: &str) -> String {
        match parse("s.yaml", text, Path::new(".")) {
            Ok(_) => panic!("expected an error"),
            Err(e) => e.to_string(),
        }
    }

    const POOLS: &str = r#"
manifests:
  - apiVersion: karpenter.sh/v1
    kind: NodePool
    metadata: {name: default}
    spec:
      template:
        spec:
          requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [spot]}]
          nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
  - apiVersion: karpenter.k8s.aws/v1
    kind: EC2NodeClass
    metadata: {name: default}
    spec:
      role: KarpenterNodeRole
      amiSelectorTerms: [{alias: al2023@latest}]
      subnetSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
      securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
"#;

    #[test]
    fn faults_read_with_per_port_rates_and_the_scenario_seed_by_default() {
        let text = format!(
            "seed: 9\nfaults: {{rate: 0.05, crashEvery: 30m, until: 23h, ports: {{ec2: 0.1}}}}\nevents:\n  - {{at: 1h, imageRelease: {{}}}}\n{POOLS}"
        );
        let s = parse("s.yaml", &text, Path::new(".")).unwrap();
        let f = s.faults.unwrap();
        assert_eq!(f.seed, 9);
        assert_eq!(f.crash_every, Some(std::time::Duration::from_secs(1800)));
        assert_eq!(f.until, Some(std::time::Duration::from_secs(23 * 3600)));
        assert_eq!((f.ec2_rate(), f.dynamodb_rate()), (0.1, 0.05));
        assert_eq!(s.disturbances[0].disturbance, Disturbance::ImageRelease);
        let bad = format!("faults: {{ports: {{kubernetes: 2}}}}\n{POOLS}");
        assert!(
            error(&bad).contains("faults.ports.kubernetes: 2 is not between 0 and 1"),
            "{}",
            error(&bad)
        );
        assert!(
            parse("s.yaml", POOLS, Path::new("."))
                .unwrap()
                .faults
                .is_none()
        );
    }

    #[test]
    fn the_bundled_scenario_reads() {
        let s = load(None).unwrap();
        assert!(!s.node_pools.is_empty() && !s.deployments.is_empty());
        assert!(!s.disturbances.is_empty());
    }

    #[test]
    fn a_bad_quantity_names_the_deployment_and_the_container_field() {
        let text = format!(
            "{POOLS}deployments:\n  - name: web\n    replicas: [{{at: 0s, replicas: 1}}]\n    pod:\n      containers:\n        - name: app\n          resources: {{requests: {{cpu: lots}}}}\n"
        );
        let e = error(&text);
        assert!(e.starts_with("s.yaml: deployments[0]: "), "{e}");
        assert!(e.contains("resources.requests.cpu"), "{e}");
    }

    #[test]
    fn a_bad_duration_and_an_unknown_field_are_named_by_path() {
        let e = error(&format!(
            "{POOLS}events:\n  - at: soon\n    spotInterruption: {{}}\n"
        ));
        assert!(e.starts_with("s.yaml: events[0].at: "), "{e}");
        assert!(e.contains("1h30m"), "{e}");
        let e = error(&format!(
            "{POOLS}events:\n  - at: 1m\n    spotInterruption: {{target: biggest}}\n"
        ));
        assert!(
            e.starts_with("s.yaml: events[0].spotInterruption.target: "),
            "{e}"
        );
        let e = error(&format!("{POOLS}duratoin: 1h\n"));
        assert!(e.contains("duratoin"), "{e}");
    }

    #[test]
    fn an_event_must_say_what_happens_once() {
        let e = error(&format!("{POOLS}events:\n  - at: 1m\n"));
        assert!(e.starts_with("s.yaml: events[0]: name what happens"), "{e}");
        let e = error(&format!(
            "{POOLS}events:\n  - at: 1m\n    capacityShortage: {{instanceTypes: [m9.huge], duration: 5m}}\n"
        ));
        assert!(
            e.contains("events[0].capacityShortage.instanceTypes[0]"),
            "{e}"
        );
    }

    #[test]
    fn a_workload_whose_pods_kubernetes_would_refuse_to_name_is_refused_naming_the_field() {
        let deployment = |name: &str, namespace: &str| {
            format!(
                "{POOLS}deployments:\n  - name: {name}\n    namespace: {namespace}\n    replicas: [{{at: 0s, replicas: 1}}]\n    pod:\n      containers: [{{name: app}}]\n"
            )
        };
        let e = error(&deployment("Web_1", "default"));
        assert!(
            e.starts_with("s.yaml: deployments[0]: name: \"Web_1\" is not a name"),
            "{e}"
        );
        let e = error(&deployment(&"w".repeat(58), "default"));
        assert!(e.contains("at most 57 characters"), "{e}");
        let e = error(&deployment("web", "-prod"));
        assert!(e.contains("namespace: \"-prod\""), "{e}");
        assert!(
            parse(
                "s.yaml",
                &deployment(&"w".repeat(57), "prod-1"),
                Path::new(".")
            )
            .is_ok()
        );
        let e = error(&format!(
            "{POOLS}daemonSets:\n  - name: node.agent\n    pod:\n      containers: [{{name: a}}]\n"
        ));
        assert!(
            e.starts_with("s.yaml: daemonSets[0]: name: \"node.agent\""),
            "{e}"
        );
    }

    #[test]
    fn a_scenario_without_a_node_pool_is_refused() {
        let e = error("deployments: []\n");
        assert!(e.contains("manifests: no NodePool"), "{e}");
    }
}
