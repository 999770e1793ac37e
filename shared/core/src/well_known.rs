//! The well-known label, annotation and taint keys nodewright reads and writes —
//! Kubernetes', Karpenter's and the AWS provider's — each defined once, here: labels
//! `LABEL_*`, annotations `ANNOTATION_*`, taint keys `TAINT_*`.

// ----- Labels ----------------------------------------------------------------

/// The instance type label every node carries (the kubelet sets it).
pub const LABEL_INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";

/// The zone a node is in (its offering's).
pub const LABEL_ZONE: &str = "topology.kubernetes.io/zone";

/// The region a node is in.
pub const LABEL_REGION: &str = "topology.kubernetes.io/region";

/// `spot`, `on-demand` or `reserved`: the capacity type a node was launched as.
pub const LABEL_CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";

/// The NodePool label Karpenter puts on its nodes (never allowed in a NodePool).
pub const LABEL_NODEPOOL: &str = "karpenter.sh/nodepool";

/// A node's name as a label (a `matchFields` requirement on `metadata.name` is
/// translated to it).
pub const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";

/// `amd64` or `arm64`.
pub const LABEL_ARCH: &str = "kubernetes.io/arch";

/// `linux` or `windows`.
pub const LABEL_OS: &str = "kubernetes.io/os";

/// The vCPUs of a node's instance type.
pub const LABEL_INSTANCE_CPU: &str = "karpenter.k8s.aws/instance-cpu";

/// The memory of a node's instance type, in MiB.
pub const LABEL_INSTANCE_MEMORY: &str = "karpenter.k8s.aws/instance-memory";

/// Label of a node launched into a capacity reservation: the reservation's id.
pub const LABEL_CAPACITY_RESERVATION_ID: &str = "karpenter.k8s.aws/capacity-reservation-id";

/// Label of a node launched into a capacity reservation: `default` or `capacity-block`.
pub const LABEL_CAPACITY_RESERVATION_TYPE: &str = "karpenter.k8s.aws/capacity-reservation-type";

/// Label of a node launched into a capacity reservation: whether its owner may
/// reclaim it (`true`/`false`).
pub const LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE: &str =
    "karpenter.k8s.aws/capacity-reservation-interruptible";

/// The instance store of a type, in GB (EC2's `InstanceStorageInfo.TotalSizeInGB`).
pub const LABEL_INSTANCE_LOCAL_NVME: &str = "karpenter.k8s.aws/instance-local-nvme";

/// The EBS CSI driver's own zone key, on the volumes it provisions and in the
/// `allowedTopologies` of its StorageClasses.
pub const LABEL_EBS_CSI_ZONE: &str = "topology.ebs.csi.aws.com/zone";

/// The label a node carries naming its NodeClaim (set at launch and at registration).
pub const LABEL_NODECLAIM: &str = "karpenter.sh/nodeclaim";

/// Set on a node once its NodeClaim saw it register.
pub const LABEL_REGISTERED: &str = "karpenter.sh/registered";

/// Set on a node once it is Ready with its startup taints gone and its resources
/// reported: it counts as capacity for disruption.
pub const LABEL_INITIALIZED: &str = "karpenter.sh/initialized";

// ----- Annotations -----------------------------------------------------------

/// `karpenter.sh/do-not-disrupt: "true"` on a pod or a node: no voluntary disruption.
pub const ANNOTATION_DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";

/// `karpenter.sh/do-not-repair: "true"` on a node: repair leaves it alone.
pub const ANNOTATION_DO_NOT_REPAIR: &str = "karpenter.sh/do-not-repair";

/// The annotation the PV controller sets once a claim is bound to its volume.
pub const ANNOTATION_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";

/// `"true"` on a NodeClaim when a NodeOverlay changed the price of any of its
/// instance-type options (Karpenter's).
pub const ANNOTATION_PRICE_OVERLAY_APPLIED: &str = "karpenter.sh/price-overlay-applied";

/// `"true"` on a NodeClaim when a NodeOverlay changed the capacity of any of its
/// instance-type options (Karpenter's).
pub const ANNOTATION_CAPACITY_OVERLAY_APPLIED: &str = "karpenter.sh/capacity-overlay-applied";

/// Annotation: the NodePool hash the node was launched with.
pub const ANNOTATION_NODEPOOL_HASH: &str = "karpenter.sh/nodepool-hash";

/// Annotation: the scheme that wrote [`ANNOTATION_NODEPOOL_HASH`].
pub const ANNOTATION_NODEPOOL_HASH_VERSION: &str = "karpenter.sh/nodepool-hash-version";

/// Annotation: the EC2NodeClass hash the node was launched with.
pub const ANNOTATION_NODECLASS_HASH: &str = "karpenter.k8s.aws/ec2nodeclass-hash";

/// Annotation: the scheme that wrote [`ANNOTATION_NODECLASS_HASH`].
pub const ANNOTATION_NODECLASS_HASH_VERSION: &str = "karpenter.k8s.aws/ec2nodeclass-hash-version";

/// The annotation Karpenter puts on its virtual pods, and the buffer's name and namespace.
pub const ANNOTATION_VIRTUAL_POD: &str = "karpenter.sh/capacity-buffer-fake-pod";

// ----- Taint keys ------------------------------------------------------------

/// The taint that keeps new pods off a node being taken away (Karpenter's).
pub const TAINT_DISRUPTED: &str = "karpenter.sh/disrupted";

/// The taint on a node draining before, or during, a reboot for repair.
pub const TAINT_REBOOTING: &str = "karpenter.sh/rebooting";

/// The taint every launched node registers with; registration removes it.
pub const TAINT_UNREGISTERED: &str = "karpenter.sh/unregistered";
