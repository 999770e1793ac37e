//! A real Kubernetes control plane for tests (feature `testing`): what this crate's
//! tests, the functions' end-to-end tests and the benchmarks run against.
//!
//! - [`ControlPlane`] (`control_plane`): etcd, kube-apiserver, kube-controller-manager,
//!   kube-scheduler and KWOK built from their Go modules (tests/kube), with Karpenter's
//!   CRDs and `infra/rbac.yaml`, started for one test by `tests/kube/up.sh` and stopped
//!   on drop; the product's [`KubeCluster`](crate::KubeCluster) as the functions'
//!   identity sees it, an admin client, and a test's reads and writes as JSON
//!   (`objects`: strict field validation, status through `/status`).
//! - [`FaultProxy`] (`proxy`): what a real server cannot be made to do on cue — an
//!   injected 429 or 500, a watch cut mid-stream, a write between a client's read and
//!   its write — and a count of the requests and bytes a client sends, in front of the
//!   real server; never a second model of Kubernetes.
//!
//! Test-only: no Lambda binary or CLI enables the feature.

mod control_plane;
pub mod objects;
mod proxy;

pub use control_plane::{ControlPlane, Crds, Info, NODEWRIGHT_USER, Options, User};
pub use objects::{KindInfo, Refused};
pub use proxy::{FaultProxy, Hook, RecordedRequest};
