//! Speculative scheduling for disruption: "take these nodes away: where do their pods
//! go, with how many new claims, at what price?", and making an answer permanent once
//! its command is taken, so the next question sees the cluster the commands before it
//! leave.

use std::collections::HashSet;

use crate::api::model::{Ec2NodeClass, NodePool};
use crate::catalog::{Catalog, Pricing};
use crate::cluster::{ClusterSnapshot, Node, Pod};
use crate::provisioning::{PlannedNodeClaim, planned_claim};
use crate::scheduling::{InFlightClaim, SchedulerInput, schedule};

use super::command::Move;
use super::rules::moving_pods;

/// When a speculative solve gives up.
#[derive(Debug, Clone, PartialEq)]
pub enum Stop {
    /// This pod ("namespace/name") fits nowhere; why.
    PodDoesNotFit { pod: String, reason: String },
    /// More new claims than allowed were needed.
    TooManyClaims,
    /// The new claims cost at least the cap.
    TooExpensive,
}

/// Where a removal's pods go.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Placement {
    pub moves: Vec<Move>,
    pub new_claims: Vec<PlannedNodeClaim>,
}

impl Placement {
    pub fn new_claims_price(&self) -> f64 {
        self.new_claims
            .iter()
            .fold(0.0, |total, c| total + c.price_per_hour)
    }
}

#[derive(Debug, Clone, Copy, Default)]
pub struct Limits {
    pub max_new_claims: Option<usize>,
    /// The new claims' cheapest prices must sum strictly below this.
    pub max_price: Option<f64>,
}

/// The cluster as the commands taken so far leave it.
pub struct Speculator<'a> {
    pods: Vec<Pod>,
    nodes: Vec<Node>,
    snapshot: &'a ClusterSnapshot,
    node_pools: &'a [NodePool],
    node_classes: &'a [Ec2NodeClass],
    catalog: &'a Catalog,
    pricing: &'a Pricing,
    in_flight: Vec<InFlightClaim>,
    /// Nodes that are never destinations (being disrupted, or gone).
    closed: HashSet<String>,
}

impl<'a> Speculator<'a> {
    pub fn new(
        snapshot: &'a ClusterSnapshot,
        node_pools: &'a [NodePool],
        node_classes: &'a [Ec2NodeClass],
        catalog: &'a Catalog,
        pricing: &'a Pricing,
        in_flight: &[InFlightClaim],
        closed: impl IntoIterator<Item = String>,
    ) -> Self {
        // Pods already pending are the provisioner's: a removal's pods must not take
        // their place, and they do not take the removal's. Only those nominated to an
        // in-flight claim stay, so the claim's capacity counts as used.
        let nominated: HashSet<&str> = in_flight
            .iter()
            .flat_map(|c| c.pods.iter().map(String::as_str))
            .collect();
        let pods = snapshot
            .pods
            .iter()
            .filter(|p| p.node_name.is_some() || nominated.contains(p.key().as_str()))
            .cloned()
            .collect();
        Self {
            pods,
            nodes: snapshot.nodes.clone(),
            snapshot,
            node_pools,
            node_classes,
            catalog,
            pricing,
            in_flight: in_flight.to_vec(),
            closed: closed.into_iter().collect(),
        }
    }

    pub fn snapshot(&self) -> &ClusterSnapshot {
        self.snapshot
    }

    /// These nodes stay but take no pods (they are being disrupted).
    pub fn close(&mut self, nodes: impl IntoIterator<Item = String>) {
        self.closed.extend(nodes);
    }

    /// Where the moving pods of `removed` (node names) would go.
    pub fn solve(&self, removed: &[&str], limits: Limits) -> Result<Placement, Stop> {
        let removed: HashSet<&str> = removed.iter().copied().collect();
        let mut pods = Vec::with_capacity(self.pods.len());
        let mut moving = 0usize;
        for pod in &self.pods {
            match pod.node_name.as_deref() {
                Some(node) if removed.contains(node) => {
                    if moving_pods([pod]).next().is_some() {
                        let mut p = pod.clone();
                        p.node_name = None;
                        p.nominated_node_name = None;
                        p.marked_unschedulable = true;
                        pods.push(p);
                        moving += 1;
                    }
                }
                _ => pods.push(pod.clone()),
            }
        }
        if moving == 0 {
            return Ok(Placement::default());
        }
        let nodes: Vec<Node> = self
            .nodes
            .iter()
            .filter(|n| !removed.contains(n.name.as_str()))
            .map(|n| {
                let mut n = n.clone();
                if self.closed.contains(&n.name) {
                    n.unschedulable = true;
                }
                n
            })
            .collect();
        let result = schedule(&SchedulerInput {
            pods: &pods,
            nodes: &nodes,
            daemonsets: &self.snapshot.daemonsets,
            node_pools: self.node_pools,
            node_classes: self.node_classes,
            catalog: self.catalog,
            pricing: self.pricing,
            in_flight: &self.in_flight,
        });
        if let Some((p, reason)) = result.unschedulable.first() {
            return Err(Stop::PodDoesNotFit {
                pod: pods[*p].key(),
                reason: reason.clone(),
            });
        }
        if limits
            .max_new_claims
            .is_some_and(|max| result.new_claims.len() > max)
        {
            return Err(Stop::TooManyClaims);
        }
        let new_claims: Vec<PlannedNodeClaim> = result
            .new_claims
            .iter()
            .map(|c| planned_claim(c, &pods))
            .collect();
        let placement = Placement {
            moves: result
                .existing_nodes
                .iter()
                .chain(&result.in_flight)
                .map(|(target, idx)| Move {
                    target: target.clone(),
                    pods: idx.iter().map(|&p| pods[p].key()).collect(),
                })
                .filter(|m| !m.pods.is_empty())
                .collect(),
            new_claims,
        };
        if limits
            .max_price
            .is_some_and(|cap| placement.new_claims_price() >= cap)
        {
            return Err(Stop::TooExpensive);
        }
        Ok(placement)
    }

    /// The command is taken: `removed` is gone, its pods are where `placement` put
    /// them, and its new claims are in flight, named `command-<command>-replacement-<k>`
    /// (later commands' moves may target them by that name).
    pub fn commit(&mut self, removed: &[&str], placement: &Placement, command: usize) {
        let removed: HashSet<&str> = removed.iter().copied().collect();
        let mut moved_to: std::collections::HashMap<&str, &str> = Default::default();
        for m in &placement.moves {
            for p in &m.pods {
                moved_to.insert(p, &m.target);
            }
        }
        let in_flight: HashSet<&str> = self.in_flight.iter().map(|c| c.name.as_str()).collect();
        let mut replacement_pods: HashSet<&str> = HashSet::new();
        for c in &placement.new_claims {
            replacement_pods.extend(c.pods.iter().map(String::as_str));
        }
        self.pods.retain_mut(|pod| {
            let Some(node) = pod.node_name.as_deref() else {
                return true;
            };
            if !removed.contains(node) {
                return true;
            }
            let key = pod.key();
            if let Some(target) = moved_to.get(key.as_str()) {
                if in_flight.contains(target) {
                    pod.node_name = None;
                    pod.marked_unschedulable = true;
                } else {
                    pod.node_name = Some(target.to_string());
                }
                return true;
            }
            if replacement_pods.contains(key.as_str()) {
                pod.node_name = None;
                pod.marked_unschedulable = true;
                return true;
            }
            false
        });
        for m in &placement.moves {
            if let Some(claim) = self.in_flight.iter_mut().find(|c| c.name == m.target) {
                claim.pods.extend(m.pods.iter().cloned());
            }
        }
        for (k, c) in placement.new_claims.iter().enumerate() {
            let Some(capacity_type) = crate::catalog::CapacityType::parse(&c.capacity_type) else {
                continue;
            };
            self.in_flight.push(InFlightClaim {
                name: format!("command-{command}-replacement-{}", k + 1),
                node_pool: c.node_pool.clone(),
                instance_type: c.instance_type.clone(),
                zone: c.zone.clone(),
                capacity_type,
                pods: c.pods.clone(),
                labels: c.labels.clone(),
            });
        }
        self.nodes.retain(|n| !removed.contains(n.name.as_str()));
        self.closed.extend(removed.iter().map(|n| n.to_string()));
    }
}
