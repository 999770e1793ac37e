//! nodewright-engine: the ports nodewright's jobs run over and the jobs themselves:
//! what the Lambda functions run. The ports' in-memory fakes and the simulator are in
//! `nodewright-sim`.
//!
//! # Who owns what, in the order a provisioner tick runs
//!
//! 1. [`lease`]: the job's lease, short and renewed at every checkpoint
//!    ([`lease::LeaseKeeper`]); someone else holds it → the tick is skipped.
//! 2. [`gather`]: the one read a tick starts from — cluster, claims, catalog, prices,
//!    instances, every EC2NodeClass resolved, the zones under an ARC zonal shift
//!    ([`zonal_shift`]: nothing sold there; NodePools told when a shift starts and ends).
//! 3. [`launch`]: claims left `Launching` by a crash are adopted or launched again.
//! 4. [`adopt`]: nodes Karpenter launched recorded as claims (opt-in, after a
//!    migration: [`adopt_karpenter_nodes`]).
//! 5. [`lifecycle`]: nodes matched to claims — Registered, Initialized, registration
//!    timeouts, leaked instances; claims being taken away advanced through
//!    [`terminate`] (cordon, PDB-aware drain, TerminateInstances, tombstone).
//! 6. [`command`]: the disruption commands in flight advanced one step (mark,
//!    replace, validate or abandon); validation re-asks core through [`decide`].
//! 7. the plan (core's `plan_provisioning`), then [`launch`] for each new claim:
//!    `Launching` written before CreateFleet, ICE fallback, backoff.
//! 8. [`reasons`]: what could not be done, published where people look (Events,
//!    status conditions, the decision log).
//!
//! The jobs are [`provision`] (the tick above, and [`Provisioner::run_for`], the
//! minute-long polling loop), [`disrupt`] (once a minute: gather, advance commands,
//! decide through [`decide`] when none is in flight, start commands) and [`interrupt`]
//! (one EC2 or AWS Health event: drain, replace, clean up, through [`terminate`]).
//! The jobs never import each other: what two of them share — [`gather`], [`launch`],
//! [`command`], [`decide`], [`terminate`] — lives in modules of its own.
//!
//! Around them: [`ports`] (Cloud, Cluster, Store, Clock — domain types only,
//! classified errors), [`context`] ([`Ports`], the four shared; [`SystemClock`]),
//! [`claim_cache`] (the claims read once and kept by this process's writes,
//! [`ClaimCache`]) and [`error`] ([`EngineError`]).
pub mod adopt;
pub mod claim_cache;
pub mod command;
pub mod context;
pub mod decide;
pub mod disrupt;
pub mod error;
pub mod gather;
pub mod interrupt;
pub mod launch;
pub mod lease;
pub mod lifecycle;
pub mod ports;
pub mod provision;
pub mod reasons;
pub mod repair;
pub mod reservations;
pub mod static_capacity;
pub mod terminate;
pub mod zonal_shift;

pub use adopt::adopt_karpenter_nodes;
pub use claim_cache::ClaimCache;
pub use command::{CommandsReport, StartedCommand, VALIDATION_DELAY};
pub use context::{Ports, SystemClock};
pub use decide::{Decider, default_decider};
pub use disrupt::{Disrupter, DisruptionConfig, DisruptionReport};
pub use error::{EngineError, Result};
pub use interrupt::{
    InstanceAction, InstanceOutcome, InterruptionConfig, InterruptionInput, InterruptionMode,
    InterruptionOutcome, handle_interruption, handle_interruption_until, input_for,
};
pub use launch::{LaunchConfig, LaunchedClaim};
pub use provision::{Provisioner, ProvisionerConfig, RunReport, TickReport};
pub use reasons::{ClaimPods, Problem, PublishReport, Reasons, ReasonsInput, StatusFields};
