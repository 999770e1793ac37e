//! The EC2NodeClass the tests' NodePools refer to, written as users write it: one
//! document instead of a copy in every file that builds a NodePool.

/// An EC2NodeClass `default` selecting subnets and security groups by the usual
/// discovery tag and the latest AL2023 AMI, with `extra_spec` (lines indented by two,
/// each ending in a newline) added to its spec.
pub fn node_class_with(extra_spec: &str) -> String {
    format!(
        r#"apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: default
spec:
  role: KarpenterNodeRole-demo
  subnetSelectorTerms:
    - tags:
        karpenter.sh/discovery: demo
  securityGroupSelectorTerms:
    - tags:
        karpenter.sh/discovery: demo
  amiSelectorTerms:
    - alias: al2023@latest
{extra_spec}"#
    )
}

/// [`node_class_with`] nothing more.
pub fn node_class() -> String {
    node_class_with("")
}
