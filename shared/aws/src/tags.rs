//! The tags nodewright puts on what it creates in EC2 and IAM (Karpenter's keys where
//! Karpenter has one, so tools that read Karpenter's tags read ours), and the taint
//! every launched node registers with.

/// On every instance nodewright launches: DescribeInstances finds its own by it.
pub const TAG_MANAGED_BY: &str = "nodewright.io/managed-by";
pub const MANAGED_BY: &str = "nodewright";
pub const TAG_NODEPOOL: &str = "karpenter.sh/nodepool";
pub const TAG_NODECLAIM: &str = "karpenter.sh/nodeclaim";
pub const TAG_NODECLASS: &str = "karpenter.k8s.aws/ec2nodeclass";
pub const TAG_EKS_CLUSTER: &str = "eks:eks-cluster-name";

/// `kubernetes.io/cluster/<name>` (value `owned`): the cluster a resource belongs to,
/// which the IAM policy's tag conditions in template.yaml check.
pub fn cluster_tag_key(cluster: &str) -> String {
    format!("kubernetes.io/cluster/{cluster}")
}
