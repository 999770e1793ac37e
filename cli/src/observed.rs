//! What `status` and `explain` answer from, whichever source it came from: a
//! [`StatusInput`] — the claims, the decision log, and the cluster [`observe`]d once
//! (its nodes, pods and NodePools, and what core makes of them now: the provisioning
//! plan, why each pending pod waits, and the disruption decision, why each managed node
//! stays), run on the cluster as read, as `nodewright plan` and `nodewright disrupt` run
//! them. A saved simulation holds the observation, so reading it needs neither the
//! manifests nor the catalog. [`SourceArgs`] say where it is read from.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use nodewright_core::api::duration::parse_duration;
use nodewright_core::catalog::Catalog;
use nodewright_core::disruption::{DisruptionInput, decide};
use nodewright_core::nodeclaim::NodeClaim;
use nodewright_core::planning_view::{
    ClusterView, in_flight_claims, planning_claims, planning_snapshot,
};
use nodewright_core::pricing::Pricing;
use nodewright_core::provisioning::{ProvisioningInput, plan_provisioning};
use nodewright_core::resources::{Resources, format_milli};
use nodewright_core::well_known::LABEL_NODEPOOL;
use nodewright_engine::ports::{ClusterState, Decision};
use serde::{Deserialize, Serialize};

/// Where `status` and `explain` read from.
#[derive(clap::Args, Clone)]
pub struct SourceArgs {
    /// A simulation saved by `nodewright simulate --save run.json`.
    #[arg(
        long,
        conflicts_with_all = ["table", "region", "kubeconfig", "dead_letter_queue_url", "since", "zones", "spot_to_spot"]
    )]
    pub from: Option<PathBuf>,
    /// A deployed stack's DynamoDB table (the stack's `StateTableName` output).
    /// Credentials come from the usual AWS environment (AWS_PROFILE, ...).
    #[arg(long)]
    pub table: Option<String>,
    /// The stack's region (default: AWS_REGION, then the AWS profile's).
    #[arg(long)]
    pub region: Option<String>,
    /// The cluster's kubeconfig (default: `KUBECONFIG`, then ~/.kube/config).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The interruption queue's dead-letter queue, for its depth.
    #[arg(long)]
    pub dead_letter_queue_url: Option<String>,
    /// How far back to read the decision log, e.g. 1h, 24h.
    #[arg(long, default_value = "24h", value_parser = since)]
    pub since: Duration,
    /// Zones the planner may offer capacity in when answering for a deployed stack
    /// (default: those of the claims and nodes, else us-east-1a,b,c).
    #[arg(long, value_delimiter = ',')]
    pub zones: Vec<String>,
    /// Answer for a deployed stack whose disruption function has spot-to-spot
    /// consolidation on (`NODEWRIGHT_SPOT_TO_SPOT`).
    #[arg(long)]
    pub spot_to_spot: bool,
}

fn since(text: &str) -> Result<Duration, String> {
    parse_duration(text).ok_or_else(|| format!("{text:?} is not a duration like 1h or 24h"))
}

// ----- What both sources give ------------------------------------------------------

/// Everything `status` and `explain` answer from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusInput {
    /// Unix seconds when it was read (a simulation's virtual time).
    pub now: i64,
    /// "table nodewright-State-..." or "simulation burst (seed 7) after 00:45:00 of
    /// virtual time".
    pub source: String,
    /// Every claim the store holds, terminal ones included.
    pub claims: Vec<NodeClaim>,
    /// The decision log, oldest first.
    pub decisions: Vec<LoggedDecision>,
    pub cluster: ObservedCluster,
    /// Messages in the dead-letter queue; `None` when not read.
    pub dead_letter_queue: Option<u64>,
}

/// One decision-log entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoggedDecision {
    pub at: i64,
    pub job: String,
    pub action: String,
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_per_hour: Option<f64>,
}

impl From<Decision> for LoggedDecision {
    fn from(d: Decision) -> Self {
        LoggedDecision {
            at: d.at,
            job: d.job,
            action: d.action,
            reason: d.reason,
            price_per_hour: d.price_per_hour,
        }
    }
}

/// The cluster as read, and what core's planner and disruption decision make of it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObservedCluster {
    pub nodes: Vec<ObservedNode>,
    pub pods: Vec<ObservedPod>,
    pub node_pools: Vec<ObservedPool>,
    /// NodePools and EC2NodeClasses that failed validation, one sentence each.
    pub invalid: Vec<String>,
    pub provisioning: ProvisioningView,
    pub disruption: DisruptionView,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObservedNode {
    pub name: String,
    pub node_pool: Option<String>,
    pub ready: bool,
    /// Cordoned.
    pub unschedulable: bool,
    /// Pods bound to it, DaemonSet pods aside ("namespace/name").
    pub pods: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObservedPod {
    /// "namespace/name".
    pub pod: String,
    pub node: Option<String>,
    pub daemonset: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObservedPool {
    pub name: String,
    pub weight: i32,
    pub node_class: String,
    /// `spec.limits` as quantities; empty: unlimited.
    pub limits: BTreeMap<String, String>,
    /// What its live claims' instance types add up to, for the limited resources (cpu
    /// and memory when unlimited), as Karpenter counts NodePool usage.
    pub usage: BTreeMap<String, String>,
    /// The limited resources used up (usage ≥ limit).
    pub limits_reached: Vec<String>,
    /// Its status conditions as the functions wrote them (Ready, NodeClassReady,
    /// ValidationSucceeded...): where nodewright says what keeps it from launching.
    #[serde(default)]
    pub conditions: Vec<ObservedCondition>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObservedCondition {
    #[serde(rename = "type")]
    pub type_: String,
    /// "True", "False", "Unknown".
    pub status: String,
    pub reason: String,
    #[serde(default)]
    pub message: String,
}

impl ObservedCluster {
    /// Records the status conditions read for NodePool `pool`.
    pub fn set_conditions(&mut self, pool: &str, conditions: Vec<ObservedCondition>) {
        if let Some(p) = self.node_pools.iter_mut().find(|p| p.name == pool) {
            p.conditions = conditions;
        }
    }
}

/// Core's provisioning plan for the pending pods, run on the cluster as read.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProvisioningView {
    /// Pods no NodePool can take, and the constraint that stops them.
    pub unschedulable: Vec<PodReason>,
    /// Pending pods nodewright launches nothing for, and why.
    pub not_provisioned: Vec<PodReason>,
    /// Claims the planner would launch now.
    pub planned: Vec<PlannedView>,
    /// Pending pods that fit a node or an in-flight claim: (target, pods).
    pub absorbed: Vec<PodReason>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodReason {
    pub pod: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedView {
    pub node_pool: String,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
    pub price_per_hour: f64,
    pub options: usize,
    pub pods: Vec<String>,
}

/// Core's disruption decision, run on the cluster as read (`nodewright disrupt`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DisruptionView {
    pub commands: Vec<CommandView>,
    /// Managed nodes in no command, with core's typed reason.
    pub rejected: Vec<RejectedView>,
    pub problems: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CommandView {
    pub method: String,
    pub reason: String,
    pub nodes: Vec<String>,
    pub replacements: usize,
    pub savings_per_hour: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RejectedView {
    pub node: String,
    /// `RejectCode`: DisruptionBudget, SpotToSpot, PodDisruptionBudget...
    pub code: String,
    pub reason: String,
}

/// A serde enum's name ("SpotToSpot", "Emptiness").
fn name_of(value: &impl Serialize) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// What a deployed stack's functions would make of the cluster now: core's planner
/// and disruption decision on `state` and `claims`, as the provisioner and the
/// disruption function call them (claims counted as in-flight capacity, nodes being
/// taken away excluded). What only EC2 knows is left out: spot prices (on-demand
/// prices and the default spot fraction stand in) and drift of images, subnets and
/// security groups.
pub fn observe(
    state: &ClusterState,
    claims: &[NodeClaim],
    catalog: &Catalog,
    zones: Vec<String>,
    now: i64,
    spot_to_spot: bool,
) -> ObservedCluster {
    let pricing = Pricing::for_zones(zones);
    let planning = planning_claims(claims);
    let view = ClusterView {
        nodes: &state.nodes,
        pods: &state.pods,
        daemonsets: &state.daemonsets,
        pdbs: &state.pdbs,
    };
    let snapshot = planning_snapshot(view, &planning, &state.node_pools);
    let in_flight = in_flight_claims(&planning, &snapshot);
    let plan = plan_provisioning(&ProvisioningInput {
        snapshot: &snapshot,
        node_pools: &state.node_pools,
        node_classes: &state.node_classes,
        catalog,
        pricing: &pricing,
        in_flight: &in_flight,
    });
    let disrupting: Vec<String> = claims
        .iter()
        .filter(|c| c.state.is_being_taken_away())
        .filter_map(|c| c.node_name.clone())
        .collect();
    let decision = decide(&DisruptionInput {
        snapshot: &snapshot,
        node_pools: &state.node_pools,
        node_classes: &state.node_classes,
        catalog,
        pricing: &pricing,
        in_flight: &in_flight,
        now,
        spot_to_spot,
        external_drift: &[],
        disrupting: &disrupting,
        nominated: &[],
        validating: None,
    });
    let mut on_node: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for p in state.pods.iter().filter(|p| !p.daemonset_owned) {
        if let Some(n) = p.node_name.as_deref() {
            on_node.entry(n).or_default().push(p.key());
        }
    }
    let reason = |pod: &str, reason: &str| PodReason {
        pod: pod.to_string(),
        reason: reason.to_string(),
    };
    let absorbed = plan
        .existing_nodes
        .iter()
        .map(|a| (a, "fits on node"))
        .chain(plan.in_flight.iter().map(|a| (a, "counted on claim")))
        .flat_map(|(a, how)| {
            a.pods
                .iter()
                .map(move |p| reason(p, &format!("{how} {}", a.target)))
        })
        .collect();
    ObservedCluster {
        nodes: state
            .nodes
            .iter()
            .map(|n| ObservedNode {
                name: n.name.clone(),
                node_pool: n.labels.get(LABEL_NODEPOOL).cloned(),
                ready: n.ready,
                unschedulable: n.unschedulable,
                pods: on_node.remove(n.name.as_str()).unwrap_or_default(),
            })
            .collect(),
        pods: state
            .pods
            .iter()
            .map(|p| ObservedPod {
                pod: p.key(),
                node: p.node_name.clone(),
                daemonset: p.daemonset_owned,
            })
            .collect(),
        node_pools: state
            .node_pools
            .iter()
            .map(|pool| {
                let mut usage = Resources::new();
                for c in claims
                    .iter()
                    .filter(|c| c.node_pool == pool.name && !c.state.is_terminal())
                {
                    if let Some(t) = c.instance_type.as_deref().and_then(|t| catalog.get(t)) {
                        usage.add(&t.capacity);
                    }
                }
                let limits: Vec<(String, i64)> = match &pool.limits {
                    Some(l) => l.iter().map(|(k, v)| (k.to_string(), v)).collect(),
                    None => Vec::new(),
                };
                let shown: Vec<String> = if limits.is_empty() {
                    vec!["cpu".into(), "memory".into()]
                } else {
                    limits.iter().map(|(k, _)| k.clone()).collect()
                };
                ObservedPool {
                    name: pool.name.clone(),
                    weight: pool.weight,
                    node_class: pool.node_class_ref.name.clone(),
                    limits: limits
                        .iter()
                        .map(|(k, v)| (k.clone(), format_milli(k, *v)))
                        .collect(),
                    usage: shown
                        .iter()
                        .map(|k| (k.clone(), format_milli(k, usage.get_milli(k))))
                        .collect(),
                    limits_reached: limits
                        .iter()
                        .filter(|(k, v)| usage.get_milli(k) >= *v)
                        .map(|(k, _)| k.clone())
                        .collect(),
                    conditions: Vec::new(),
                }
            })
            .collect(),
        invalid: state.invalid.clone(),
        provisioning: ProvisioningView {
            unschedulable: plan
                .unschedulable
                .iter()
                .map(|u| reason(&u.pod, &u.reason))
                .collect(),
            not_provisioned: plan
                .not_provisioned
                .iter()
                .map(|u| reason(&u.pod, &u.reason))
                .collect(),
            planned: plan
                .node_claims
                .iter()
                .map(|c| PlannedView {
                    node_pool: c.node_pool.clone(),
                    instance_type: c.instance_type.clone(),
                    zone: c.zone.clone(),
                    capacity_type: c.capacity_type.clone(),
                    price_per_hour: c.price_per_hour,
                    options: c.instance_type_options.len(),
                    pods: c.pods.clone(),
                })
                .collect(),
            absorbed,
        },
        disruption: DisruptionView {
            commands: decision
                .commands
                .iter()
                .map(|c| CommandView {
                    method: name_of(&c.method),
                    reason: name_of(&c.reason),
                    nodes: c.nodes.clone(),
                    replacements: c.replacements.len(),
                    savings_per_hour: c.savings_per_hour,
                })
                .collect(),
            rejected: decision
                .rejected
                .iter()
                .map(|r| RejectedView {
                    node: r.node.clone(),
                    code: name_of(&r.code),
                    reason: r.reason.clone(),
                })
                .collect(),
            problems: decision.problems.iter().map(|p| p.to_string()).collect(),
        },
    }
}
