//! What EKS and EC2 do outside Kubernetes, as steps that return the writes they make:
//! an instance's kubelet joining the cluster and finishing its boot ([`kubelet`]), EC2
//! taking instances back at their time and the cloud controller manager deleting the
//! Node of an instance EC2 no longer has ([`cloud`]).
//!
//! This is the one model of that behaviour. Each step reads what the harness observed
//! (the instances as EC2 reports them, the Nodes) and returns writes; the harness
//! carries them out where its cluster lives and reports back what took effect:
//! - the simulator's [`World`](crate::World) applies them to its in-memory cluster;
//! - the functions' end-to-end tests (`nodewright-testkit`) apply them to a real
//!   control plane, where KWOK plays a node once its kubelet has booted, and to moto.
//!
//! Times are [`Duration`](std::time::Duration)s since an origin the harness picks
//! (virtual Unix time in the simulator, the start of a test in the testkit).

pub mod cloud;
pub mod kubelet;

pub use cloud::{NodeSeen, Reclaims, nodes_the_cloud_deletes};
pub use kubelet::{InstanceSeen, JoiningInstance, KubeletWrite, Kubelets, joining_node};
