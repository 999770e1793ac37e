//! Validation of all documents together: each object against Karpenter's rules (see
//! `nodepool` and `nodeclass`), then the checks across objects (duplicate names,
//! NodePools referring to EC2NodeClasses). Every problem is collected, not just the
//! first, so one run of `nodewright validate` shows everything to fix.

use std::collections::{BTreeMap, BTreeSet};

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::load::Kind;
use super::{Document, Manifests, Problem, nodeclass, nodepool};

/// Validates the documents and applies Karpenter's defaults. `Err` holds every problem
/// found, in document order, cross-object problems last.
pub fn validate(docs: &[Document]) -> Result<Manifests, Vec<Problem>> {
    let mut problems = Vec::new();
    let mut manifests = Manifests::default();
    let class_names: BTreeSet<String> = docs
        .iter()
        .filter(|d| Kind::of(&d.value) == Some(Kind::Ec2NodeClass))
        .filter_map(|d| object_name(&d.value).map(str::to_string))
        .collect();
    for doc in docs {
        match Kind::of(&doc.value) {
            Some(Kind::NodePool) => {
                let mut report = Report::new(Kind::NodePool, doc, &mut problems);
                if let Some(pool) = nodepool::validate_node_pool(doc, &class_names, &mut report) {
                    manifests.node_pools.push(pool);
                }
            }
            Some(Kind::Ec2NodeClass) => {
                let mut report = Report::new(Kind::Ec2NodeClass, doc, &mut problems);
                if let Some(class) = nodeclass::validate_node_class(doc, &mut report) {
                    manifests.node_classes.push(class);
                }
            }
            None => problems.push(Problem {
                object: doc.label(),
                path: String::new(),
                message: "not a NodePool (karpenter.sh/v1) or EC2NodeClass (karpenter.k8s.aws/v1)".into(),
            }),
        }
    }
    check_duplicate_names(docs, &mut problems);
    if problems.is_empty() { Ok(manifests) } else { Err(problems) }
}

/// `metadata.name` when it is a string.
pub(super) fn object_name(value: &Value) -> Option<&str> {
    value.get("metadata").and_then(|m| m.get("name")).and_then(Value::as_str)
}

/// `NodePool "name"`, or the document's place when it has no name.
fn object_label(kind: Kind, doc: &Document) -> String {
    match object_name(&doc.value) {
        Some(name) => format!("{} {name:?}", kind.as_str()),
        None => format!("{} in {}", kind.as_str(), doc.label()),
    }
}

fn check_duplicate_names(docs: &[Document], problems: &mut Vec<Problem>) {
    let mut first_seen: BTreeMap<(Kind, &str), String> = BTreeMap::new();
    for doc in docs {
        let (Some(kind), Some(name)) = (Kind::of(&doc.value), object_name(&doc.value)) else {
            continue;
        };
        match first_seen.get(&(kind, name)) {
            Some(first) => problems.push(Problem {
                object: object_label(kind, doc),
                path: "metadata.name".into(),
                message: format!("defined more than once ({} and {})", first, doc.label()),
            }),
            None => {
                first_seen.insert((kind, name), doc.label());
            }
        }
    }
}

/// Collects the problems of one object.
pub(super) struct Report<'a> {
    object: String,
    problems: &'a mut Vec<Problem>,
    before: usize,
}

impl<'a> Report<'a> {
    fn new(kind: Kind, doc: &Document, problems: &'a mut Vec<Problem>) -> Self {
        let before = problems.len();
        Report { object: object_label(kind, doc), problems, before }
    }

    pub fn add(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.problems.push(Problem { object: self.object.clone(), path: path.into(), message: message.into() });
    }

    /// A required field is missing.
    pub fn missing(&mut self, path: impl Into<String>) {
        self.add(path, "required");
    }

    /// True when nothing was reported for this object.
    pub fn is_clean(&self) -> bool {
        self.problems.len() == self.before
    }

    /// `Some(value)` if nothing was reported: how a validator hands back its result.
    pub fn finish<T>(&self, value: T) -> Option<T> {
        self.is_clean().then_some(value)
    }
}

/// Deserializes a document into its raw shape; a type error is reported with the path
/// of the offending field (`spec.limits.cpu: invalid type: ...`).
pub(super) fn deserialize_raw<T: DeserializeOwned>(doc: &Document, report: &mut Report<'_>) -> Option<T> {
    match serde_path_to_error::deserialize::<_, T>(&doc.value) {
        Ok(raw) => Some(raw),
        Err(error) => {
            let path = error.path().to_string();
            let path = if path == "." { String::new() } else { path };
            report.add(path, plain_serde_message(&error.inner().to_string()));
            None
        }
    }
}

/// serde names Rust types ("expected struct NodePoolSpec", "expected i64"); say what
/// a manifest author would call them.
fn plain_serde_message(message: &str) -> String {
    let message = match message.split_once("expected struct ") {
        Some((head, _)) => format!("{head}expected a mapping"),
        None => message.to_string(),
    };
    message
        .replace("expected i64", "expected an integer")
        .replace("expected u64", "expected an integer")
}

/// Checks a `values` list (or map) size limit and reports it under `path`.
pub(super) fn check_max_items(report: &mut Report<'_>, path: &str, len: usize, max: usize) {
    if len > max {
        report.add(path, format!("at most {max} entries are allowed, got {len}"));
    }
}
