//! nodewright-kube: the engine's [`Cluster`](nodewright_engine::ports::Cluster) port over
//! the Kubernetes API, with kube-rs. A tour:
//!
//! - [`KubeCluster`] (in `cluster`): reads NodePools/EC2NodeClasses (validated with
//!   `nodewright_core::api`, bad objects reported rather than fatal), nodes, pods,
//!   DaemonSets, PDBs and volumes from a view that is listed once and then watched
//!   (`watch`: the machinery; `view`: the kinds and their conversions), applying its own
//!   writes to that view; labels and taints nodes under optimistic concurrency; records
//!   Events (on nodes, pods, NodePools and EC2NodeClasses); writes NodePool and
//!   EC2NodeClass status conditions through `/status`; reads the server version;
//!   mirrors the claims as `karpenter.sh/v1` NodeClaims; reads CapacityBuffers and
//!   the PodTemplates they name from the view, and the workloads they name by name
//!   (`workloads`), and writes their status.
//! - [`mirror`]: a claim as a NodeClaim object (pure), and what keeps a Karpenter
//!   controller left running from acting on it.
//! - [`client`]: how the kube-rs client is built: no automatic retries (a 429 comes back
//!   at once as `Throttled`), response timeouts, and a bearer token asked of a
//!   [`TokenProvider`] on every request (the EKS token is renewed every ~14 minutes).
//! - [`error`]: kube errors classified into the engine's `ErrorKind`s by status code.
//! - `testing` (feature `testing`): a real control plane per test (tests/kube) and a
//!   fault proxy in front of it; this crate's tests, the functions' end-to-end tests
//!   and the benchmarks run against it.

pub mod client;
mod cluster;
pub mod error;
pub mod mirror;
#[cfg(feature = "testing")]
pub mod testing;
mod view;
mod watch;
mod workloads;

pub use client::{ApiRate, StaticToken, TokenError, TokenProvider};
pub use cluster::{COMPONENT, KubeCluster, PAGE_SIZE, STATUS_ATTEMPTS, TAINT_ATTEMPTS};
pub use watch::MISSING_KIND_RETRY;
