//! nodewright-engine: the ports nodewright's jobs run over, the jobs themselves, and
//! in-memory fakes of the ports.
//!
//! - [`ports`]: Cloud, Cluster, Store, Clock — domain types only, classified errors.
//! - [`context`]: [`Ports`], the four ports shared by every job; [`SystemClock`].
//! - [`provision`]: one provisioning tick ([`Provisioner::tick`]) and the
//!   minute-long polling loop ([`Provisioner::run_for`]).
//! - [`disrupt`]: the disruption job ([`Disrupter::tick`]): decide with core once per
//!   run, execute each command as a state machine persisted on its claims (mark,
//!   replace, validate or abandon, drain), advanced by every provisioner poll.
//! - [`lifecycle`]: matching nodes to claims: Registered, Initialized, registration
//!   timeouts, leaked instances.
//! - [`terminate`]: the steps that take a claim away (cordon, drain with PDB-aware
//!   evictions, terminate, tombstone), one function per step, and `advance`/`drive`.
//! - [`interrupt`]: the interruption job over decided inputs ([`handle_interruption`]).
//! - [`fakes`] (feature `sim`, default): FakeCloud, FakeCluster (with a kubelet),
//!   MemoryStore, ManualClock.
//! - [`sim`] (feature `sim`): a world that behaves like a cluster over virtual time,
//!   scenarios run on it with every job as its Lambda runs it, and their reports.
//! - [`lease`]: a job's lease, short and renewed at checkpoints ([`lease::LeaseKeeper`]).
//! - [`reasons`]: what a tick could not do, published where people look: warn logs,
//!   decisions, Kubernetes Events (`FailedScheduling` on pods, warnings on NodePools and
//!   EC2NodeClasses) and the objects' status conditions ([`Reasons::publish`]).
//! - [`adopt`]: recording the nodes Karpenter launched as claims, after a migration
//!   ([`adopt_karpenter_nodes`]; opt-in).
//! - [`claim_cache`]: the claims read once and kept by this process's own writes, with
//!   a one-item check for other writers ([`ClaimCache`], wrapped around the store by the
//!   Lambda functions).
//! - [`error`]: [`EngineError`], the crate's one error type.
pub mod adopt;
pub mod claim_cache;
pub mod context;
pub mod disrupt;
pub mod error;
#[cfg(feature = "sim")]
pub mod fakes;
pub mod interrupt;
pub mod lease;
pub mod lifecycle;
pub mod ports;
pub mod provision;
pub mod reasons;
#[cfg(feature = "sim")]
pub mod sim;
pub mod terminate;

pub use adopt::adopt_karpenter_nodes;
pub use claim_cache::ClaimCache;
pub use context::{Ports, SystemClock};
pub use disrupt::{
    CommandsReport, Decider, Disrupter, DisruptionConfig, DisruptionReport, StartedCommand,
};
pub use error::{EngineError, Result};
pub use interrupt::{
    InstanceAction, InstanceOutcome, InterruptionConfig, InterruptionInput, InterruptionMode,
    InterruptionOutcome, handle_interruption, handle_interruption_until, input_for,
};
pub use provision::{Provisioner, ProvisionerConfig, RunReport, TickReport};
pub use reasons::{ClaimPods, Problem, PublishReport, Reasons, ReasonsInput, StatusFields};
