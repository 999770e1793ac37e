//! nodewright-engine: the ports nodewright's jobs run over, the jobs themselves, and
//! in-memory fakes of the ports.
//!
//! - [`ports`]: Cloud, Cluster, Store, Clock — domain types only, classified errors.
//! - [`context`]: [`Ports`], the four ports shared by every job; [`SystemClock`].
//! - [`provision`]: one provisioning tick ([`Provisioner::tick`]) and the
//!   minute-long polling loop ([`Provisioner::run_for`]).
//! - [`lifecycle`]: matching nodes to claims: Registered, Initialized, registration
//!   timeouts, leaked instances.
//! - [`terminate`]: the steps that take a claim away, one function per step.
//! - [`fakes`]: FakeCloud, FakeCluster (with a kubelet), MemoryStore, ManualClock.
//! - [`error`]: [`EngineError`], the crate's one error type.
pub mod context;
pub mod error;
pub mod fakes;
pub mod lifecycle;
pub mod ports;
pub mod provision;
pub mod terminate;

pub use context::{Ports, SystemClock};
pub use error::{EngineError, Result};
pub use provision::{Provisioner, ProvisionerConfig, TickReport};
