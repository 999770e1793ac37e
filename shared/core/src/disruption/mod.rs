//! Disruption decisions, as Karpenter v1 makes them (`pkg/controllers/disruption`):
//! which managed nodes may go, why, and within which budgets. Pure: the caller passes
//! the cluster view, the NodePools and `now`.
//!
//! This module holds the rules that need no scheduling simulation: budgets, expiration,
//! requirement drift, which pods move, and the typed codes every rejected candidate
//! carries. Consolidation (which needs speculative solves of the scheduler) builds on it.

pub mod balanced;
pub mod budget;
pub mod candidates;
pub mod command;
pub mod decide;
pub mod drift;
pub mod hash;
pub mod horizon;
mod kube_fit;
pub mod rules;
pub mod speculate;

use serde::Serialize;

pub use command::{Command, Decision, DisruptionInput, DriftedNode, Method, Move, RejectedNode};
pub use decide::{Phase, decide, decide_observed};

use crate::api::model::DisruptionReason;

/// Why a command disrupts its nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Reason {
    Empty,
    Drifted,
    Underutilized,
    /// Forceful: no budget, no consolidateAfter.
    Expired,
}

impl Reason {
    /// The budget reason that limits it; `None` for expiration, which budgets do not
    /// limit.
    pub fn budget_reason(self) -> Option<DisruptionReason> {
        match self {
            Reason::Empty => Some(DisruptionReason::Empty),
            Reason::Drifted => Some(DisruptionReason::Drifted),
            Reason::Underutilized => Some(DisruptionReason::Underutilized),
            Reason::Expired => None,
        }
    }
}

/// Why a managed node is in no command: the code `explain`, events and
/// `nodewright disrupt` show, with a sentence beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum RejectCode {
    /// The node, or an active pod on it, has `karpenter.sh/do-not-disrupt` (`"true"`,
    /// or a duration not yet passed since the pod started).
    DoNotDisrupt,
    /// A PodDisruptionBudget selecting one of its pods allows no disruption.
    PodDisruptionBudget,
    /// The NodePool's disruption budget for the reason is used up.
    DisruptionBudget,
    /// consolidateAfter has not elapsed (or is `Never`).
    ConsolidateAfter,
    /// The NodePool only consolidates empty nodes and this one is not.
    ConsolidationPolicy,
    /// A pod that would move fits nowhere else.
    PodsDoNotFit,
    /// No replacement is cheaper.
    NotCheaper,
    /// Spot-to-spot consolidation is off, or fewer than 15 cheaper spot types fit.
    SpotToSpot,
    /// Not Ready, not initialized, or already being deleted.
    NotReady,
    /// `consolidationPolicy: Balanced`: the move's savings do not outweigh its
    /// disruption (its score is below 1/k, [`balanced`]).
    Balanced,
    /// The node holds nothing but CapacityBuffers' room: not empty, and not a
    /// consolidation candidate (drift and expiration still replace it).
    CapacityBuffer,
    /// The node's zone is under an ARC zonal shift or autoshift: no voluntary
    /// disruption there until it ends (expiration still replaces it).
    ZonalShift,
}

/// A rejected candidate: the code and what exactly stopped it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rejection {
    pub code: RejectCode,
    pub reason: String,
}

impl Rejection {
    pub fn new(code: RejectCode, reason: impl Into<String>) -> Self {
        Self {
            code,
            reason: reason.into(),
        }
    }
}
