//! nodewright-core: the pure decision code of nodewright.
//!
//! Nothing here performs I/O, spawns tasks or reads a clock; callers pass in the data
//! and the time. A tour:
//!
//! - [`resources`]: exact Kubernetes quantities and resource vectors.
//! - [`api`]: Karpenter v1 NodePool / EC2NodeClass, validated, with defaults.
//! - [`cluster`] and [`snapshot`]: pods, nodes, DaemonSets and PDBs as scheduling sees them.
//! - [`volumes`]: where pods' PersistentVolumeClaims let them run (volume topology).
//! - [`catalog`]: instance types, offerings (type × zone × capacity type) and prices.
//! - [`density`]: a type's allocatable under an EC2NodeClass's kubelet settings.
//! - [`scheduling`]: requirements algebra, taints, topology, and the bin-packer.
//! - [`nodeclaim`]: the NodeClaim record and its state machine.
//! - [`provisioning`]: `plan_provisioning`, the entry point the provisioner calls.
//! - [`static_capacity`]: static NodePools (`replicas`): what to launch or take away.
//! - [`interruption`]: EventBridge interruption events parsed, and the action each calls for.

pub mod api;
pub mod calendar;
pub mod capacity_buffer;
pub mod catalog;
pub mod cluster;
pub mod default_spread;
pub mod density;
pub mod disruption;
pub mod ebs_attachments;
pub mod interruption;
pub mod kubelet_expressions;
pub mod nodeclaim;
pub mod overlay;
pub mod planning_view;
pub mod pricing;
pub mod provisioning;
pub mod repair;
pub mod resources;
pub mod scheduling;
pub mod share;
pub mod snapshot;
pub mod static_capacity;
#[doc(hidden)]
pub mod testing;
pub mod volume_limits;
pub mod volumes;
pub mod well_known;
