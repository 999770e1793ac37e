//! Karpenter v1 manifests: `karpenter.sh/v1` NodePool and `karpenter.k8s.aws/v1`
//! EC2NodeClass, and `karpenter.sh/v1alpha1` NodeOverlay (`overlay`). Loading is two
//! steps: `parse_documents` splits a file into documents and rejects what is not
//! YAML/JSON or not one of our kinds (a problem with the file); `validate_all` checks
//! every object against Karpenter's rules and applies its defaults (problems with
//! objects, each naming the object, the field path and what is expected; `validate`
//! does it for NodePools and EC2NodeClasses alone). `schema` holds files to the CRDs
//! as the API server does (unknown fields, missing required ones), for `load_with`.

pub mod buffer;
pub mod cron;
pub mod duration;
pub mod fields;
mod kind;
pub mod labels;
mod load;
pub mod model;
mod nodeclass;
mod nodepool;
pub mod overlay;
mod raw;
mod report;
pub mod schema;
mod validate;

use std::fmt;

pub use kind::{
    Kind, NODE_CLASS_API_VERSION, NODE_CLASS_KIND, NODE_POOL_API_VERSION, NODE_POOL_KIND,
    is_node_overlay,
};
pub use load::{
    LoadError, empty_file, load, load_with, parse_documents, validate_all, validate_all_with,
};
pub use model::*;
pub use nodeclass::{ALIAS_FAMILIES, AMI_FAMILIES, VOLUME_TYPES};
pub use nodepool::DEFAULT_EXPIRE_AFTER;
pub use overlay::{InvalidOverlay, NodeOverlay, PriceChange, ReadOverlay};
pub use schema::Strictness;
pub use validate::validate;

/// One YAML/JSON document of a manifest file.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    /// Where it came from, for messages (usually the file path).
    pub source: String,
    /// 0-based index of the document in its source.
    pub index: usize,
    pub value: serde_json::Value,
}

/// The file itself is unusable: unreadable, not YAML/JSON, or holds a kind we do not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{source_name}: {message}")]
pub struct FormatError {
    pub source_name: String,
    pub message: String,
}

/// One thing wrong with one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// `NodePool "broken"` or `EC2NodeClass "default"`.
    pub object: String,
    /// `spec.template.spec.requirements[0].operator`
    pub path: String,
    /// `unknown operator "GreaterThan" (expected one of In, NotIn, ...)`
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}: {}", self.object, self.message)
        } else {
            write!(f, "{}: {}: {}", self.object, self.path, self.message)
        }
    }
}

/// Validated NodePools, EC2NodeClasses and NodeOverlays from one or more files.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Manifests {
    pub node_pools: Vec<NodePool>,
    pub node_classes: Vec<Ec2NodeClass>,
    pub node_overlays: Vec<NodeOverlay>,
    /// `autoscaling.x-k8s.io/v1beta1` CapacityBuffers and the `v1` PodTemplates they
    /// may name ([`buffer`]).
    pub capacity_buffers: Vec<buffer::CapacityBuffer>,
    pub pod_templates: Vec<buffer::PodTemplate>,
}
