//! What a disruption decision produces: commands that can run now, together, within
//! budgets, and a typed rejection for every managed node that is in none of them.
//! `nodewright disrupt --output json` prints [`Decision`] as it is; the disruption
//! function executes its commands.

use serde::Serialize;

use crate::api::model::{Ec2NodeClass, NodePool};
use crate::catalog::Catalog;
use crate::cluster::ClusterSnapshot;
use crate::pricing::Pricing;
use crate::provisioning::PlannedNodeClaim;
use crate::scheduling::InFlightClaim;

use super::{Reason, RejectCode};

/// How a command was found, in the order the methods run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    Expiration,
    Drift,
    Emptiness,
    MultiNode,
    SingleNode,
}

/// Pods that move to a node that stays (or an in-flight claim, by its name).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Move {
    pub target: String,
    /// "namespace/name"
    pub pods: Vec<String>,
}

/// Disrupt `nodes`; their pods go to `moves` and `replacements`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Command {
    pub method: Method,
    pub reason: Reason,
    /// For a drift: what drifted, per node.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub drifted: Vec<DriftedNode>,
    pub nodes: Vec<String>,
    pub moves: Vec<Move>,
    /// New NodeClaims to launch before the nodes drain: their options are those
    /// cheaper than what they replace (for spot-to-spot, the 15 cheapest spot types).
    pub replacements: Vec<PlannedNodeClaim>,
    pub price_per_hour_before: f64,
    pub price_per_hour_after: f64,
    pub savings_per_hour: f64,
    /// A consolidation's score in each `consolidationPolicy: Balanced` NodePool of its
    /// nodes (none for other pools and other methods).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub scores: Vec<super::balanced::Score>,
}

/// A node a drift command replaces, and what drifted: the AMI, subnet, security groups
/// or reservation its EC2NodeClass no longer selects, the NodePool's or the
/// EC2NodeClass's hash, or a requirement or label the node's labels left.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DriftedNode {
    pub node: String,
    pub reason: String,
}

impl Command {
    /// What drifted, for a one-line summary: the reason alone for one node, each node
    /// with its reason for several; empty when nothing did.
    pub fn drift_summary(&self) -> String {
        match self.drifted.as_slice() {
            [] => String::new(),
            [one] => one.reason.clone(),
            many => many
                .iter()
                .map(|d| format!("{}: {}", d.node, d.reason))
                .collect::<Vec<_>>()
                .join("; "),
        }
    }
}

/// A managed node in no command, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RejectedNode {
    pub node: String,
    pub code: RejectCode,
    pub reason: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Default)]
pub struct PriceBeforeAfter {
    pub before: f64,
    pub after: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    pub commands: Vec<Command>,
    pub rejected: Vec<RejectedNode>,
    /// All managed nodes' price; after every command has run.
    pub price_per_hour: PriceBeforeAfter,
    /// Managed nodes that could not be considered, one sentence each naming the node
    /// and field at fault (no instance-type label, a type the catalog lacks).
    #[serde(skip)]
    pub problems: Vec<String>,
}

/// Everything a decision reads. Pure: the caller gathers it and passes the clock.
pub struct DisruptionInput<'a> {
    pub snapshot: &'a ClusterSnapshot,
    pub node_pools: &'a [NodePool],
    pub node_classes: &'a [Ec2NodeClass],
    pub catalog: &'a Catalog,
    pub pricing: &'a Pricing,
    /// Claims launched whose nodes have not registered: destinations for moving pods.
    pub in_flight: &'a [InFlightClaim],
    /// Unix seconds: the clock for consolidateAfter, expireAfter and budget schedules.
    pub now: i64,
    /// Allow replacing spot nodes by spot nodes (Karpenter's SpotToSpotConsolidation).
    pub spot_to_spot: bool,
    /// Drift the caller resolved and core cannot see (node name, why): an AMI, subnet
    /// or security group the node's EC2NodeClass no longer selects
    /// ([`super::drift::external_drift`] compares them).
    pub external_drift: &'a [(String, String)],
    /// Nodes already being disrupted by earlier commands: they count against budgets,
    /// are not candidates and are not destinations.
    pub disrupting: &'a [String],
    /// Nodes launched for pods still on their way to them (the replacement of a node
    /// being drained, whose pods a PodDisruptionBudget holds): they are destinations
    /// and count toward budgets, but are not candidates (Karpenter's nominated nodes) —
    /// an empty one is not empty for long.
    pub nominated: &'a [String],
    /// Validation of commands already under way: only these nodes (their candidates)
    /// are considered, none of them takes pods, and consolidation tries them as one set
    /// first. Everything else still counts: budgets, the nodes pods may move to, other
    /// commands' nodes.
    pub validating: Option<&'a [String]>,
}
