//! nodewright-engine: the ports nodewright's jobs run over, and the jobs themselves.
//!
//! - [`ports`]: Cloud, Cluster, Store, Clock — domain types only, classified errors.
pub mod ports;
