//! Reading manifest files into documents: YAML (JSON is YAML), one or more documents
//! separated by `---`, each a NodePool, an EC2NodeClass or a NodeOverlay, or a `v1`
//! List of them (as `kubectl get -o yaml` prints them).

use serde::Deserialize;
use serde_json::Value;

use super::buffer::{is_buffer_document, validate_buffers};
use super::kind::{Kind, is_node_overlay};
use super::overlay::validate_overlays;
use super::schema::{Strictness, schema_problems};
use super::{Document, FormatError, Manifests, Problem, validate};

/// Why `load` failed: a file is unusable, or objects in it break Karpenter's rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Format(#[from] FormatError),
    #[error("{} problem(s) in the manifests:\n{}", .0.len(), render_problems(.0))]
    Invalid(Vec<Problem>),
}

fn render_problems(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|p| format!("  {p}"))
        .collect::<Vec<_>>()
        .join("\n")
}

impl Document {
    /// `pools.yaml document 2`, counting from 1 as people do (`index` counts from 0).
    pub fn label(&self) -> String {
        format!("{} document {}", self.source, self.index + 1)
    }
}

/// Splits `text` (named `source` in messages) into its documents. Empty documents
/// (only comments) are skipped, but still counted so that document numbers in messages
/// match the file. Every other document must be a `karpenter.sh/v1` NodePool or a
/// `karpenter.k8s.aws/v1` EC2NodeClass; anything else is an error naming the document.
/// Messages count documents from 1.
pub fn parse_documents(source: &str, text: &str) -> Result<Vec<Document>, FormatError> {
    let error = |message: String| FormatError {
        source_name: source.to_string(),
        message,
    };
    let mut documents = Vec::new();
    for (index, deserializer) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let number = index + 1;
        let value = Value::deserialize(deserializer)
            .map_err(|e| error(format!("document {number}: not valid YAML: {e}")))?;
        if value.is_null() {
            continue;
        }
        // `kubectl get nodepools,ec2nodeclasses -o yaml` prints one `v1` List.
        if let Some(items) = list_items(&value) {
            for (i, item) in items.iter().enumerate() {
                check_kind(item)
                    .map_err(|why| error(format!("document {number}: items[{i}]: {why}")))?;
                documents.push(Document {
                    source: source.to_string(),
                    index,
                    value: item.clone(),
                });
            }
            continue;
        }
        check_kind(&value).map_err(|why| error(format!("document {number}: {why}")))?;
        documents.push(Document {
            source: source.to_string(),
            index,
            value,
        });
    }
    Ok(documents)
}

/// The items of a `v1` List (what `kubectl get -o yaml` prints for several objects).
fn list_items(value: &Value) -> Option<&Vec<Value>> {
    let is_list = value.get("apiVersion").and_then(Value::as_str) == Some("v1")
        && value.get("kind").and_then(Value::as_str) == Some("List");
    if !is_list {
        return None;
    }
    match value.get("items") {
        Some(Value::Array(items)) => Some(items),
        _ => None,
    }
}

/// Parses and validates several files at once (name, text), so that a NodePool in one
/// file may refer to an EC2NodeClass in another. Lenient: fields the CRDs do not know
/// are left to the caller (objects read from a cluster were checked by its API server).
pub fn load(sources: &[(String, String)]) -> Result<Manifests, LoadError> {
    load_with(sources, Strictness::Lenient)
}

/// [`load`], holding the files to Karpenter's CRDs as the API server would with
/// [`Strictness::Strict`]: an unknown field, a missing required field or a file with
/// no object is a problem too.
pub fn load_with(
    sources: &[(String, String)],
    strictness: Strictness,
) -> Result<Manifests, LoadError> {
    let mut documents = Vec::new();
    let mut empty = Vec::new();
    for (source, text) in sources {
        let parsed = parse_documents(source, text)?;
        if parsed.is_empty() {
            empty.push(empty_file(source));
        }
        documents.extend(parsed);
    }
    match strictness {
        Strictness::Lenient => validate_all(&documents).map_err(LoadError::Invalid),
        Strictness::Strict => match validate_all_with(&documents, strictness) {
            Ok(manifests) if empty.is_empty() => Ok(manifests),
            Ok(_) => Err(LoadError::Invalid(empty)),
            Err(problems) => {
                empty.extend(problems);
                Err(LoadError::Invalid(empty))
            }
        },
    }
}

/// The problem of a file that holds no object (empty, or only comments).
pub fn empty_file(source: &str) -> Problem {
    Problem {
        object: source.to_string(),
        path: String::new(),
        message: format!("holds no object (expected {EXPECTED_KINDS})"),
    }
}

/// [`validate_all`], with [`Strictness::Strict`] also the problems of
/// [`schema_problems`] first (validation's own after them, each once).
pub fn validate_all_with(
    docs: &[Document],
    strictness: Strictness,
) -> Result<Manifests, Vec<Problem>> {
    let mut problems: Vec<Problem> = match strictness {
        Strictness::Strict => docs.iter().flat_map(schema_problems).collect(),
        Strictness::Lenient => Vec::new(),
    };
    match validate_all(docs) {
        Ok(manifests) if problems.is_empty() => Ok(manifests),
        Ok(_) => Err(problems),
        Err(more) => {
            for p in more {
                if !problems.contains(&p) {
                    problems.push(p);
                }
            }
            Err(problems)
        }
    }
}

/// Validates the documents and applies Karpenter's defaults: NodePools and
/// EC2NodeClasses (see `validate`), then NodeOverlays, then CapacityBuffers and
/// PodTemplates. `Err` holds every problem found, in that order.
pub fn validate_all(docs: &[Document]) -> Result<Manifests, Vec<Problem>> {
    let (buffer_docs, docs): (Vec<&Document>, Vec<&Document>) =
        docs.iter().partition(|d| is_buffer_document(&d.value));
    let (overlay_docs, others): (Vec<&Document>, Vec<&Document>) =
        docs.into_iter().partition(|d| is_node_overlay(&d.value));
    let others: Vec<Document> = others.into_iter().cloned().collect();
    let (node_overlays, mut overlay_problems) = validate_overlays(&overlay_docs);
    let (capacity_buffers, pod_templates, mut buffer_problems) = validate_buffers(&buffer_docs);
    overlay_problems.append(&mut buffer_problems);
    match validate(&others) {
        Ok(mut manifests) if overlay_problems.is_empty() => {
            manifests.node_overlays = node_overlays;
            manifests.capacity_buffers = capacity_buffers;
            manifests.pod_templates = pod_templates;
            Ok(manifests)
        }
        Ok(_) => Err(overlay_problems),
        Err(mut problems) => {
            problems.extend(overlay_problems);
            Err(problems)
        }
    }
}

const EXPECTED_KINDS: &str = "a NodePool (karpenter.sh/v1), EC2NodeClass (karpenter.k8s.aws/v1), NodeOverlay (karpenter.sh/v1alpha1), CapacityBuffer (autoscaling.x-k8s.io/v1beta1) or PodTemplate (v1)";

fn check_kind(value: &Value) -> Result<(), String> {
    let Value::Object(map) = value else {
        return Err(format!(
            "expected a mapping with apiVersion and kind, found {}",
            describe(value)
        ));
    };
    let kind = map.get("kind").and_then(Value::as_str);
    let api_version = map.get("apiVersion").and_then(Value::as_str);
    let (Some(kind), Some(api_version)) = (kind, api_version) else {
        return Err(format!(
            "missing apiVersion or kind (expected {EXPECTED_KINDS})"
        ));
    };
    if is_node_overlay(value) || is_buffer_document(value) {
        return Ok(());
    }
    Kind::of(value).map(|_| ()).ok_or_else(|| {
        let hint = if api_version.starts_with("karpenter.") && api_version.ends_with("beta1") {
            "; v1beta1 manifests must be converted to v1 first"
        } else {
            ""
        };
        format!("kind {kind:?} (apiVersion {api_version:?}) is not {EXPECTED_KINDS}{hint}")
    })
}

fn describe(value: &Value) -> &'static str {
    match value {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn format_error(source: &str, text: &str) -> String {
        match parse_documents(source, text) {
            Ok(docs) => panic!("expected a format error, got {docs:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_deployment_document_is_a_format_error_naming_the_document() {
        let text = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: a}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n";
        assert_eq!(
            format_error("pools.yaml", text),
            r#"pools.yaml: document 2: kind "Deployment" (apiVersion "apps/v1") is not a NodePool (karpenter.sh/v1), EC2NodeClass (karpenter.k8s.aws/v1), NodeOverlay (karpenter.sh/v1alpha1), CapacityBuffer (autoscaling.x-k8s.io/v1beta1) or PodTemplate (v1)"#
        );
    }

    #[test]
    fn a_v1beta1_node_pool_is_refused_with_a_hint() {
        let text = "apiVersion: karpenter.sh/v1beta1\nkind: NodePool\n";
        assert_eq!(
            format_error("old.yaml", text),
            r#"old.yaml: document 1: kind "NodePool" (apiVersion "karpenter.sh/v1beta1") is not a NodePool (karpenter.sh/v1), EC2NodeClass (karpenter.k8s.aws/v1), NodeOverlay (karpenter.sh/v1alpha1), CapacityBuffer (autoscaling.x-k8s.io/v1beta1) or PodTemplate (v1); v1beta1 manifests must be converted to v1 first"#
        );
    }

    #[test]
    fn broken_yaml_is_a_format_error_with_line_and_column() {
        let message = format_error("bad.yaml", "apiVersion: karpenter.sh/v1\nkind: [NodePool\n");
        assert!(
            message.starts_with("bad.yaml: document 1: not valid YAML: "),
            "{message}"
        );
        assert!(message.contains("line "), "{message}");
        assert!(message.contains("column "), "{message}");
    }

    #[test]
    fn a_list_or_a_scalar_document_is_not_an_object() {
        assert_eq!(
            format_error("x.yaml", "- a\n- b\n"),
            "x.yaml: document 1: expected a mapping with apiVersion and kind, found a list"
        );
        assert_eq!(
            format_error("x.yaml", "hello\n"),
            "x.yaml: document 1: expected a mapping with apiVersion and kind, found a string"
        );
        assert_eq!(
            format_error("x.yaml", "metadata: {}\n"),
            "x.yaml: document 1: missing apiVersion or kind (expected a NodePool (karpenter.sh/v1), EC2NodeClass (karpenter.k8s.aws/v1), NodeOverlay (karpenter.sh/v1alpha1), CapacityBuffer (autoscaling.x-k8s.io/v1beta1) or PodTemplate (v1))"
        );
    }

    #[test]
    fn empty_and_comment_only_documents_are_skipped() {
        let text = "# just a comment\n---\n---\napiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\n---\n# trailing\n";
        let docs = parse_documents("c.yaml", text).unwrap_or_default();
        assert_eq!(docs.len(), 1);
        assert_eq!(Kind::of(&docs[0].value), Some(Kind::Ec2NodeClass));
        assert_eq!(parse_documents("empty.yaml", ""), Ok(vec![]));
    }

    #[test]
    fn node_overlays_load_from_the_same_files_as_node_pools() {
        let text = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: web}\nspec:\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n---\napiVersion: karpenter.sh/v1alpha1\nkind: NodeOverlay\nmetadata: {name: savings}\nspec:\n  requirements: [{key: karpenter.k8s.aws/instance-family, operator: In, values: [m5]}]\n  priceAdjustment: \"-30%\"\n";
        let class = "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: default}\nspec:\n  role: r\n  amiSelectorTerms: [{alias: al2023@latest}]\n  subnetSelectorTerms: [{tags: {a: b}}]\n  securityGroupSelectorTerms: [{tags: {a: b}}]\n";
        let manifests = load(&[
            ("pools.yaml".into(), text.into()),
            ("class.yaml".into(), class.into()),
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(manifests.node_pools.len(), 1);
        assert_eq!(manifests.node_overlays.len(), 1);
        assert_eq!(manifests.node_overlays[0].name, "savings");
        let broken = text.replace("-30%", "-130%");
        let err = load(&[
            ("pools.yaml".into(), broken),
            ("class.yaml".into(), class.into()),
        ])
        .unwrap_err()
        .to_string();
        assert!(
            err.contains(
                "NodeOverlay \"savings\": spec.priceAdjustment: \"-130%\" is not a price adjustment"
            ),
            "{err}"
        );
    }

    #[test]
    fn a_list_kubectl_prints_is_read_item_by_item_and_its_other_kinds_are_named() {
        let text = "apiVersion: v1\nkind: List\nmetadata: {resourceVersion: \"\"}\nitems:\n- apiVersion: karpenter.sh/v1\n  kind: NodePool\n  metadata: {name: a}\n- apiVersion: karpenter.k8s.aws/v1\n  kind: EC2NodeClass\n  metadata: {name: c}\n";
        let docs = parse_documents("got.yaml", text).unwrap_or_default();
        let kinds: Vec<Option<Kind>> = docs.iter().map(|d| Kind::of(&d.value)).collect();
        assert_eq!(kinds, [Some(Kind::NodePool), Some(Kind::Ec2NodeClass)]);
        let other = text.replace("kind: EC2NodeClass", "kind: Deployment");
        assert!(
            format_error("got.yaml", &other)
                .starts_with("got.yaml: document 1: items[1]: kind \"Deployment\""),
            "{}",
            format_error("got.yaml", &other)
        );
        assert_eq!(
            parse_documents("none.yaml", "apiVersion: v1\nkind: List\nitems: []\n"),
            Ok(vec![])
        );
    }

    #[test]
    fn json_input_is_read_as_yaml() {
        let text =
            r#"{"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "j"}}"#;
        let docs = parse_documents("p.json", text).unwrap_or_default();
        assert_eq!(docs.len(), 1);
        assert_eq!(docs[0].label(), "p.json document 1");
    }
}
