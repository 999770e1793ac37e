//! Scheduling simulation: the requirements algebra, topology bookkeeping, the
//! fractional-fleet LP and the bin-packer that places pods on nodes and NodeClaims.

pub(crate) mod fast_hash;
pub mod lp;
mod prepared;
mod repack;
pub mod requirements;
pub mod scheduler;
pub mod topology;
mod unschedulable;

pub use prepared::{Placed, PreparedScheduler, Removal, Solve, SolveLimits, Stop, schedule};
pub use requirements::{Requirements, ValueSet};
pub use scheduler::{
    ClaimOption, InFlightClaim, InFlightPlacement, MAX_INSTANCE_TYPE_OPTIONS, NewClaim,
    NodePlacement, Schedule, SchedulerInput, UnplacedPod,
};
pub use unschedulable::{PoolRefusal, Refusal, Unschedulable};

#[cfg(test)]
mod prepared_tests;
#[cfg(test)]
mod tests;
