//! A simulation's input: the cluster's NodePools, classes and workloads, the
//! [`Disturbance`]s at their times, and the world's settings. [`Scenario::run`]
//! (in [`super::run`]) runs it.

use std::time::Duration;

use nodewright_core::api::model::{Ec2NodeClass, NodePool};
use nodewright_core::catalog::{CapacityType, Catalog};
use nodewright_core::cluster::{DaemonSet, Node, Pod, PodDisruptionBudget};
use nodewright_core::interruption::RebalanceAction;

use super::faults::FaultConfig;
use super::workload::Deployment;
use super::world::WorldConfig;

/// 2025-01-01T00:00:00Z: when simulations start unless told otherwise.
pub const DEFAULT_START: i64 = 1_735_689_600;

/// Which instance a disturbance hits; chosen among the instances running when it
/// happens (spot ones only for spot interruptions and rebalance recommendations).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The one whose node runs the most pods (DaemonSet pods aside).
    Busiest,
    /// One at random (seeded).
    Random,
    /// The oldest.
    Oldest,
}

impl Target {
    pub fn describe(&self) -> &'static str {
        match self {
            Target::Busiest => "the busiest",
            Target::Random => "a random",
            Target::Oldest => "the oldest",
        }
    }
}

/// Something that happens to the cluster from outside.
#[derive(Debug, Clone, PartialEq)]
pub enum Disturbance {
    /// EC2 Spot Instance Interruption Warning; EC2 takes the instance 2 minutes later.
    SpotInterruption { target: Target },
    /// EC2 Capacity Reservation Instance Interruption Warning: the owner of the
    /// interruptible reservation an instance runs in takes it back (the reservation
    /// shrinks by one); EC2 takes the instance 2 minutes later.
    ReservationInterruption { target: Target },
    /// EC2 Instance Rebalance Recommendation.
    RebalanceRecommendation { target: Target },
    /// AWS Health scheduled change (retirement) `notice` ahead; EC2 retires the
    /// instance then.
    ScheduledChange { target: Target, notice: Duration },
    /// Someone stops the instance without notice.
    InstanceStopped { target: Target },
    /// The kubelets of `count` nodes stop reporting: the node lifecycle controller turns
    /// their Ready condition Unknown and taints them unreachable; their pods stay bound.
    NodeNotReady { target: Target, count: u32 },
    /// EC2's status checks of `count` instances fail (instance and system).
    InstanceImpaired { target: Target, count: u32 },
    /// The node monitoring agent reports NVIDIA XID `xid` on `count` nodes
    /// (`AcceleratedHardwareReady=False`, reason `NVIDIAXID<xid>Error`); a reboot clears
    /// it.
    GpuFault {
        target: Target,
        count: u32,
        xid: u32,
    },
    /// `kubectl scale nodepool`: the static NodePool's `spec.replicas` becomes
    /// `replicas`.
    ScaleNodePool { node_pool: String, replicas: u32 },
    /// A new AMI is released: every EC2NodeClass's alias resolves to new images, and
    /// the nodes running the old ones have drifted.
    ImageRelease,
    /// No capacity for these offerings for `duration` (empty zones: every zone; empty
    /// capacity types: both).
    CapacityShortage {
        instance_types: Vec<String>,
        zones: Vec<String>,
        capacity_types: Vec<CapacityType>,
        duration: Duration,
    },
    /// ARC shifts traffic away from `zone` for `duration` (a zonal shift an operator
    /// starts, or an autoshift); the functions run as with the stack's `ZonalShift` on.
    ZonalShift { zone: String, duration: Duration },
}

/// A disturbance and when it happens (from the scenario's start).
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduledDisturbance {
    pub at: Duration,
    pub disturbance: Disturbance,
}

/// A node already running when the simulation starts (`simulate --cluster`): its
/// instance in EC2 and its Node, Ready, as the cluster had them.
#[derive(Debug, Clone, PartialEq)]
pub struct RunningNode {
    /// The Node as the cluster had it (name, labels, taints, allocatable); its
    /// providerID becomes the simulated instance's.
    pub node: Node,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: CapacityType,
    /// The NodePool Karpenter launched it for (`karpenter.sh/nodepool`): nodewright
    /// adopts it, as after a migration from Karpenter. `None`: another tool's node (a
    /// managed node group's), which nodewright never touches: it stays in the cluster
    /// as it is, its instance neither simulated nor billed.
    pub node_pool: Option<String>,
    /// When its instance was launched (Unix seconds).
    pub launched_at: i64,
}

/// Everything a simulation needs.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: String,
    pub node_pools: Vec<NodePool>,
    pub node_classes: Vec<Ec2NodeClass>,
    /// NodeOverlays in the cluster (`karpenter.sh/v1alpha1`).
    pub node_overlays: Vec<nodewright_core::api::NodeOverlay>,
    /// CapacityBuffers in the cluster and the PodTemplates they may name; a
    /// `scalableRef` names one of `deployments`.
    pub capacity_buffers: Vec<nodewright_core::api::buffer::CapacityBuffer>,
    pub pod_templates: Vec<nodewright_core::api::buffer::PodTemplate>,
    pub deployments: Vec<Deployment>,
    pub daemonsets: Vec<DaemonSet>,
    pub disturbances: Vec<ScheduledDisturbance>,
    pub duration: Duration,
    pub seed: u64,
    pub zones: Vec<String>,
    pub catalog: Catalog,
    /// The interruption function's `NODEWRIGHT_REBALANCE_ACTION`.
    pub rebalance: RebalanceAction,
    /// How the provisioner repairs (the stack's repair switches).
    pub repair: nodewright_core::repair::RepairSettings,
    pub world: WorldConfig,
    /// Unix seconds at the start.
    pub start: i64,
    /// Run the disruption function (consolidation, drift, expiration).
    pub disruption: bool,
    /// Fault injection (none: every call answers at once and nothing crashes).
    pub faults: Option<FaultConfig>,
    /// Capacity reservations EC2 holds for the account (selected by the EC2NodeClasses'
    /// `capacityReservationSelectorTerms`).
    pub reservations: Vec<crate::fakes::FakeReservation>,
    /// The nodes running at the start, and the pods there then (bound where they run,
    /// or pending), which `deployments` count as their replicas when they select them.
    pub running_nodes: Vec<RunningNode>,
    pub pods: Vec<Pod>,
    /// PodDisruptionBudgets beyond the `deployments`' own.
    pub pdbs: Vec<PodDisruptionBudget>,
    /// The provisioner adopts the nodes Karpenter launched
    /// (`NODEWRIGHT_ADOPT_KARPENTER_NODES`).
    pub adopt_karpenter_nodes: bool,
    /// Spot interruptions a month (730 hours) per running spot instance, as the Spot
    /// Instance Advisor's "frequency of interruption" gives it (0.05: 5 in 100
    /// instances a month): each running spot instance gets its warning at random at
    /// that rate, beside the scenario's own events. 0: only the scenario's.
    pub spot_interruption_rate: f64,
}

impl Scenario {
    /// An empty scenario over the embedded catalog in three us-east-1 zones.
    pub fn new(name: impl Into<String>) -> Self {
        Scenario {
            name: name.into(),
            node_pools: Vec::new(),
            node_classes: Vec::new(),
            node_overlays: Vec::new(),
            capacity_buffers: Vec::new(),
            pod_templates: Vec::new(),
            deployments: Vec::new(),
            daemonsets: Vec::new(),
            disturbances: Vec::new(),
            duration: Duration::from_secs(3600),
            seed: 1,
            zones: vec![
                "us-east-1a".into(),
                "us-east-1b".into(),
                "us-east-1c".into(),
            ],
            catalog: Catalog::embedded().clone(),
            rebalance: RebalanceAction::Replace,
            repair: Default::default(),
            world: WorldConfig::default(),
            start: DEFAULT_START,
            disruption: true,
            faults: None,
            reservations: Vec::new(),
            running_nodes: Vec::new(),
            pods: Vec::new(),
            pdbs: Vec::new(),
            adopt_karpenter_nodes: false,
            spot_interruption_rate: 0.0,
        }
    }
}
