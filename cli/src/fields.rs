//! `nodewright validate`'s field report: every Karpenter field a manifest carries that
//! nodewright does not fully honour, named with why (see `nodewright_core::api::fields`).

use std::path::PathBuf;

use nodewright_core::api::fields::{FieldUse, Status, field_report, overlay_field_report};
use nodewright_core::api::{Document, Kind, parse_documents};

use crate::{Failure, read};

/// The documents of every file, in order (a file that is not YAML or holds another
/// kind is unusable, as for `load_manifests`).
pub(crate) fn read_documents(files: &[PathBuf]) -> Result<Vec<Document>, Failure> {
    let mut documents = Vec::new();
    for file in files {
        let source = file.display().to_string();
        let text = read(file)?;
        documents
            .extend(parse_documents(&source, &text).map_err(|e| Failure::Unusable(e.to_string()))?);
    }
    Ok(documents)
}

/// What to print about the fields of the documents.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct FieldLines {
    /// `NodePool "x": spec.replicas: not supported (ignored): …`, `… partly: …`, and
    /// with `all`, `… honoured`.
    pub(crate) report: Vec<String>,
    /// `warning: NodePool "x": spec.foo: unknown field: …`.
    pub(crate) warnings: Vec<String>,
}

/// One line per field present that is not fully honoured (every field with `all`),
/// prefixed with the object; unknown fields as warnings.
pub(crate) fn field_lines(documents: &[Document], all: bool) -> FieldLines {
    let mut lines = FieldLines::default();
    for doc in documents {
        let (object, report) = match Kind::of(&doc.value) {
            Some(kind) => (
                object_label(kind.as_str(), doc),
                field_report(kind, &doc.value),
            ),
            None if is_node_overlay(&doc.value) => (
                object_label("NodeOverlay", doc),
                overlay_field_report(&doc.value),
            ),
            None => continue,
        };
        for field in report {
            match field.status {
                Status::Unknown => lines.warnings.push(format!("warning: {object}: {field}")),
                Status::Honoured if !all => {}
                _ => lines.report.push(line(&object, &field)),
            }
        }
    }
    lines
}

fn line(object: &str, field: &FieldUse) -> String {
    format!("{object}: {field}")
}

/// `NodePool "web"`, or where the object is when it has no name (as validation names it).
fn object_label(kind: &str, doc: &Document) -> String {
    match doc.value.pointer("/metadata/name").and_then(|n| n.as_str()) {
        Some(name) => format!("{kind} {name:?}"),
        None => format!("{kind} in {}", doc.label()),
    }
}

fn is_node_overlay(value: &serde_json::Value) -> bool {
    value.get("kind").and_then(|k| k.as_str()) == Some("NodeOverlay")
}
