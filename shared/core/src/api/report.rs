//! The building blocks of every kind's validation: [`Report`], the problems of one
//! object with their field paths, and reading a document into its raw shape with a
//! type error reported at the field it is in.

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::kind::Kind;
use super::{Document, Problem};

/// `metadata.name` when it is a string.
pub(super) fn object_name(value: &Value) -> Option<&str> {
    value
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
}

/// `NodePool "name"`, or the document's place when it has no name.
pub(super) fn object_label(kind: Kind, doc: &Document) -> String {
    match object_name(&doc.value) {
        Some(name) => format!("{} {name:?}", kind.as_str()),
        None => format!("{} in {}", kind.as_str(), doc.label()),
    }
}

/// Collects the problems of one object.
pub(super) struct Report<'a> {
    object: String,
    problems: &'a mut Vec<Problem>,
    before: usize,
}

impl<'a> Report<'a> {
    /// The problems of the object `doc` holds, named by its kind and name.
    pub fn new(kind: Kind, doc: &Document, problems: &'a mut Vec<Problem>) -> Self {
        Report::named(object_label(kind, doc), problems)
    }

    /// The problems of the object `object` names (`NodeOverlay "x"`).
    pub fn named(object: String, problems: &'a mut Vec<Problem>) -> Self {
        let before = problems.len();
        Report {
            object,
            problems,
            before,
        }
    }

    pub fn add(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.problems.push(Problem {
            object: self.object.clone(),
            path: path.into(),
            message: message.into(),
        });
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
pub(super) fn deserialize_raw<T: DeserializeOwned>(
    doc: &Document,
    report: &mut Report<'_>,
) -> Option<T> {
    deserialize_value(&doc.value, report)
}

/// [`deserialize_raw`] of an object that is no document (one read from a cluster).
pub(super) fn deserialize_value<T: DeserializeOwned>(
    value: &Value,
    report: &mut Report<'_>,
) -> Option<T> {
    match serde_path_to_error::deserialize::<_, T>(value) {
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
        report.add(
            path,
            format!("at most {max} entries are allowed, got {len}"),
        );
    }
}
