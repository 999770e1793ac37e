//! The kinds of object a manifest may hold, recognised by their exact `apiVersion` and
//! `kind`.

use serde_json::Value;

pub const NODE_POOL_API_VERSION: &str = "karpenter.sh/v1";
pub const NODE_POOL_KIND: &str = "NodePool";
pub const NODE_CLASS_API_VERSION: &str = "karpenter.k8s.aws/v1";
pub const NODE_CLASS_KIND: &str = "EC2NodeClass";

/// The two kinds nodewright reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    NodePool,
    Ec2NodeClass,
}

impl Kind {
    /// The kind of a document, when it is one of ours (exact apiVersion and kind).
    pub fn of(value: &Value) -> Option<Kind> {
        let api_version = value.get("apiVersion").and_then(Value::as_str)?;
        let kind = value.get("kind").and_then(Value::as_str)?;
        match (api_version, kind) {
            (NODE_POOL_API_VERSION, NODE_POOL_KIND) => Some(Kind::NodePool),
            (NODE_CLASS_API_VERSION, NODE_CLASS_KIND) => Some(Kind::Ec2NodeClass),
            _ => None,
        }
    }

    /// `NodePool` or `EC2NodeClass`, as Kubernetes spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::NodePool => NODE_POOL_KIND,
            Kind::Ec2NodeClass => NODE_CLASS_KIND,
        }
    }
}

pub const NODE_OVERLAY_API_VERSION: &str = "karpenter.sh/v1alpha1";
pub const NODE_OVERLAY_KIND: &str = "NodeOverlay";

/// Whether a document is a `karpenter.sh/v1alpha1` NodeOverlay.
pub fn is_node_overlay(value: &Value) -> bool {
    value.get("apiVersion").and_then(Value::as_str) == Some(NODE_OVERLAY_API_VERSION)
        && value.get("kind").and_then(Value::as_str) == Some(NODE_OVERLAY_KIND)
}
