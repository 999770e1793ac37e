//! nodewright-engine: the ports nodewright's jobs run over, the jobs themselves, and
//! in-memory fakes of the ports.
//!
//! - [`ports`]: Cloud, Cluster, Store, Clock — domain types only, classified errors.
//! - [`context`]: [`Ports`], the four ports shared by every job; [`SystemClock`].
//! - [`provision`]: one provisioning tick ([`Provisioner::tick`]) and the
//!   minute-long polling loop ([`Provisioner::run_for`]).
//! - [`lifecycle`]: matching nodes to claims: Registered, Initialized, registration
//!   timeouts, leaked instances.
//! - [`terminate`]: the steps that take a claim away (cordon, drain with PDB-aware
//!   evictions, terminate, tombstone), one function per step, and `advance`/`drive`.
//! - [`interrupt`]: the interruption job over decided inputs ([`handle_interruption`]).
//! - [`adopt`]: recording the nodes Karpenter launched as claims, after a migration
//!   ([`adopt_karpenter_nodes`]; opt-in).
//! - [`fakes`]: FakeCloud, FakeCluster (with a kubelet), MemoryStore, ManualClock.
//! - [`error`]: [`EngineError`], the crate's one error type.
pub mod adopt;
pub mod context;
pub mod error;
pub mod fakes;
pub mod interrupt;
pub mod lifecycle;
pub mod ports;
pub mod provision;
pub mod terminate;

pub use adopt::adopt_karpenter_nodes;
pub use context::{Ports, SystemClock};
pub use error::{EngineError, Result};
pub use interrupt::{
    InstanceAction, InstanceOutcome, InterruptionConfig, InterruptionInput, InterruptionMode,
    InterruptionOutcome, handle_interruption,
};
pub use provision::{Provisioner, ProvisionerConfig, TickReport};
