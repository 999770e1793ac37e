//! Reading `--nodepools` files (and `validate`'s) as the API server reads them with
//! Karpenter's CRDs installed: an unknown field, a missing required field, a file with
//! no object are problems (exit 1), each line naming the file and the object.
//! `--lenient` turns those into warnings on stderr and goes on with what validates.

use std::collections::HashMap;
use std::path::PathBuf;

use nodewright_core::api::buffer::{is_buffer_document, object_label as buffer_label};
use nodewright_core::api::fields::{Status, field_report, overlay_field_report};
use nodewright_core::api::is_node_overlay;
use nodewright_core::api::schema::schema_problems;
use nodewright_core::api::{
    Document, Kind, Manifests, Problem, Strictness, empty_file, parse_documents, validate_all_with,
};

use crate::failure::{Failure, read};

/// `--lenient`, shared by the commands that read manifests.
#[derive(clap::Args, Clone, Copy, Debug, Default)]
pub(crate) struct StrictArgs {
    /// Accept what Karpenter's CRDs refuse (unknown fields, missing required fields,
    /// empty files, zones outside the region, missing kinds) with a warning on stderr,
    /// instead of exit 1.
    #[arg(long)]
    pub(crate) lenient: bool,
}

impl StrictArgs {
    pub(crate) fn strictness(self) -> Strictness {
        if self.lenient {
            Strictness::Lenient
        } else {
            Strictness::Strict
        }
    }

    /// `problems` are errors (exit 1), or with `--lenient` warnings on stderr.
    pub(crate) fn check(self, problems: Vec<String>) -> Result<(), Failure> {
        if problems.is_empty() {
            return Ok(());
        }
        if self.lenient {
            for p in problems {
                eprintln!("warning: {p}");
            }
            return Ok(());
        }
        Err(Failure::Invalid(problems))
    }
}

/// The documents of `files`, in order, and the files that hold none.
pub(crate) struct Documents {
    pub(crate) documents: Vec<Document>,
    pub(crate) empty: Vec<String>,
}

/// Reads every file into its documents (a file that is not YAML, or holds another
/// kind, is unusable: exit 2).
pub(crate) fn read_documents(files: &[PathBuf]) -> Result<Documents, Failure> {
    let mut documents = Vec::new();
    let mut empty = Vec::new();
    for file in files {
        let source = file.display().to_string();
        let text = read(file)?;
        let parsed =
            parse_documents(&source, &text).map_err(|e| Failure::Unusable(e.to_string()))?;
        if parsed.is_empty() {
            empty.push(source);
        }
        documents.extend(parsed);
    }
    Ok(Documents { documents, empty })
}

/// Validates the documents as `strict` says: `Err` with one line per problem, each
/// naming its file. With `--lenient`, what strictness adds is warned about on stderr.
pub(crate) fn validate(read: &Documents, strict: StrictArgs) -> Result<Manifests, Failure> {
    let sources = Sources::of(&read.documents);
    let named = |p: &Problem| sources.line(p);
    let mut lines: Vec<String> = Vec::new();
    if !strict.lenient {
        lines.extend(read.empty.iter().map(|f| empty_file(f).to_string()));
    }
    let result = validate_all_with(&read.documents, strict.strictness());
    if strict.lenient {
        let warnings: Vec<String> = read
            .empty
            .iter()
            .map(|f| empty_file(f).to_string())
            .chain(
                read.documents
                    .iter()
                    .flat_map(schema_problems)
                    .map(|p| named(&p)),
            )
            .collect();
        strict.check(warnings)?;
    }
    match result {
        Ok(manifests) if lines.is_empty() => Ok(manifests),
        Ok(_) => Err(Failure::Invalid(lines)),
        Err(problems) => {
            lines.extend(problems.iter().map(named));
            Err(Failure::Invalid(lines))
        }
    }
}

/// Reads and validates `--nodepools` files.
pub(crate) fn load(files: &[PathBuf], strict: StrictArgs) -> Result<Manifests, Failure> {
    validate(&read_documents(files)?, strict)
}

/// Which file holds each named object, to lead its problems with.
pub(crate) struct Sources<'a> {
    /// `NodePool "web"` → its file; `None` when two files hold that name.
    by_label: HashMap<String, Option<&'a str>>,
}

impl<'a> Sources<'a> {
    pub(crate) fn of(documents: &'a [Document]) -> Self {
        let mut by_label: HashMap<String, Option<&'a str>> = HashMap::new();
        for d in documents {
            let Some(label) = label(d) else { continue };
            by_label
                .entry(label)
                .and_modify(|s| {
                    if *s != Some(d.source.as_str()) {
                        *s = None;
                    }
                })
                .or_insert(Some(d.source.as_str()));
        }
        Sources { by_label }
    }

    /// `file: NodePool "x": path: message`: the problem, led by the file of its object
    /// when that is one file (an object without a name is already named by its place).
    pub(crate) fn line(&self, problem: &Problem) -> String {
        match self.by_label.get(&problem.object) {
            Some(Some(source)) => format!("{source}: {problem}"),
            _ => problem.to_string(),
        }
    }
}

/// `NodePool "web"`, `NodeOverlay "o"`; `None` for an object without a name.
fn label(doc: &Document) -> Option<String> {
    let kind = match Kind::of(&doc.value) {
        Some(kind) => kind.as_str(),
        None if is_node_overlay(&doc.value) => "NodeOverlay",
        None if is_buffer_document(&doc.value) => {
            doc.value.pointer("/metadata/name")?;
            return Some(buffer_label(doc));
        }
        None => return None,
    };
    let name = doc.value.pointer("/metadata/name")?.as_str()?;
    Some(format!("{kind} {name:?}"))
}

/// One field present in an object, as `validate` prints it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct FieldRow {
    /// `NodePool "web"`.
    pub(crate) object: String,
    /// `spec.template.spec.taints[0].timeAdded`.
    pub(crate) path: String,
    /// `honoured`, `partly`, `ignored`.
    pub(crate) status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) why: Option<&'static str>,
    #[serde(skip)]
    line: String,
}

impl std::fmt::Display for FieldRow {
    /// `NodePool "x": spec.replicas: not supported (ignored): …`, `… partly: …`,
    /// `… honoured`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.line)
    }
}

/// Every field present that is not fully honoured (every field with `all`), with its
/// object. Unknown fields are the strict check's (problems, or warnings with
/// `--lenient`), not listed here.
pub(crate) fn field_lines(documents: &[Document], all: bool) -> Vec<FieldRow> {
    let mut rows = Vec::new();
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
                Status::Unknown => {}
                Status::Honoured if !all => {}
                status => rows.push(FieldRow {
                    line: format!("{object}: {field}"),
                    object: object.clone(),
                    path: field.path,
                    status: status.label(),
                    why: status.why(),
                }),
            }
        }
    }
    rows
}

/// `NodePool "web"`, or where the object is when it has no name (as validation names it).
fn object_label(kind: &str, doc: &Document) -> String {
    match doc.value.pointer("/metadata/name").and_then(|n| n.as_str()) {
        Some(name) => format!("{kind} {name:?}"),
        None => format!("{kind} in {}", doc.label()),
    }
}

/// A command that launches from NodePools got none: a problem line naming the files.
pub(crate) fn need_node_pools(
    command: &str,
    files: &[PathBuf],
    manifests: &Manifests,
    strict: StrictArgs,
) -> Result<(), Failure> {
    if !manifests.node_pools.is_empty() {
        return Ok(());
    }
    let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    strict.check(vec![format!(
        "{}: no NodePool: {command} needs at least one karpenter.sh/v1 NodePool (and its EC2NodeClass)",
        names.join(", ")
    )])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn docs(source: &str, text: &str) -> Vec<Document> {
        parse_documents(source, text).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_problem_is_led_by_the_file_of_its_object_unless_two_files_hold_that_name() {
        let pool = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: web}\n";
        let problem = Problem {
            object: "NodePool \"web\"".into(),
            path: "spec".into(),
            message: "required".into(),
        };
        let one = docs("a.yaml", pool);
        assert_eq!(
            Sources::of(&one).line(&problem),
            "a.yaml: NodePool \"web\": spec: required"
        );
        let mut two = one.clone();
        two.extend(docs("b.yaml", pool));
        assert_eq!(
            Sources::of(&two).line(&problem),
            "NodePool \"web\": spec: required"
        );
    }
}
