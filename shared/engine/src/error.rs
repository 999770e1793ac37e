//! The engine's one error type. Port errors keep their kind and source, so a caller
//! (a Lambda handler) can still tell throttling from a lost conditional write.

use nodewright_core::nodeclaim::TransitionError;

use crate::ports::{CloudError, ClusterError, ErrorKind, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Cloud(#[from] CloudError),
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A bug: the engine asked the state machine for a step it does not allow.
    #[error(transparent)]
    Transition(#[from] TransitionError),
    #[error("lease {name:?} was lost during the tick (another holder took it)")]
    LeaseLost {
        name: String,
        #[source]
        source: StoreError,
    },
    /// A termination was asked for an instance the store does not record on the claim:
    /// refused, never sent to the cloud.
    #[error(
        "NodeClaim {claim:?} does not own instance {instance} in the store; refusing to terminate it"
    )]
    NotOwned { claim: String, instance: String },
    #[error("no free NodeClaim name for NodePool {pool:?} after {attempts} attempts")]
    NoFreeName { pool: String, attempts: u32 },
}

impl EngineError {
    /// The kind of the port error underneath, if any.
    pub fn kind(&self) -> Option<ErrorKind> {
        match self {
            EngineError::Cloud(e) => Some(e.kind),
            EngineError::Cluster(e) => Some(e.kind),
            EngineError::Store(e) | EngineError::LeaseLost { source: e, .. } => Some(e.kind),
            EngineError::Transition(_)
            | EngineError::NoFreeName { .. }
            | EngineError::NotOwned { .. } => None,
        }
    }
}

pub type Result<T, E = EngineError> = std::result::Result<T, E>;
