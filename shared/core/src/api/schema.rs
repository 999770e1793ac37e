//! What the API server refuses once Karpenter's CRDs are installed, and validation
//! (`validate`, which checks values) lets through: a field the CRD does not define
//! (kubectl's default strict field validation answers `unknown field`), a field the CRD
//! requires, and a document or file that holds nothing.
//!
//! The knowledge is the product's own: the field registry of `fields` (every field of
//! the CRDs of [`KARPENTER_RELEASE`]) and the required fields below, both checked
//! against the CRDs themselves by a test when they are at hand. Objects read from a
//! cluster were already checked by the API server; files given to the CLI are checked
//! here, unless the user asks for [`Strictness::Lenient`].

use serde_json::Value;

use super::fields::{
    FieldUse, KARPENTER_RELEASE, NODE_OVERLAY_FIELDS, Status, field_report, fields,
    overlay_field_report,
};
use super::kind::{Kind, is_node_overlay};
use super::{Document, Problem};

/// How files are held to Karpenter's CRDs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Strictness {
    /// As the API server: unknown fields, missing required fields and empty files are
    /// problems.
    #[default]
    Strict,
    /// Only validation's problems; the rest is for the caller to warn about.
    Lenient,
}

/// Fields Karpenter v1.15's NodePool CRD requires that have no default, with arrays
/// as `[]` (`spec.disruption.budgets[].nodes` is required but defaulted to 10%).
pub const NODE_POOL_REQUIRED: &[&str] = &[
    "spec",
    "spec.template",
    "spec.template.spec",
    "spec.template.spec.requirements",
    "spec.template.spec.nodeClassRef",
    "spec.template.spec.nodeClassRef.group",
    "spec.template.spec.nodeClassRef.kind",
    "spec.template.spec.nodeClassRef.name",
    "spec.template.spec.requirements[].key",
    "spec.template.spec.requirements[].operator",
    "spec.template.spec.taints[].key",
    "spec.template.spec.taints[].effect",
    "spec.template.spec.startupTaints[].key",
    "spec.template.spec.startupTaints[].effect",
];

/// The same for EC2NodeClass (its `spec` itself is required by validation).
pub const NODE_CLASS_REQUIRED: &[&str] = &[
    "spec.amiSelectorTerms",
    "spec.subnetSelectorTerms",
    "spec.securityGroupSelectorTerms",
    "spec.enclaveOptions.enabled",
    "spec.networkInterfaces[].deviceIndex",
    "spec.networkInterfaces[].networkCardIndex",
    "spec.networkInterfaces[].interfaceType",
];

/// The same for NodeOverlay.
pub const NODE_OVERLAY_REQUIRED: &[&str] = &[
    "spec",
    "spec.requirements",
    "spec.requirements[].key",
    "spec.requirements[].operator",
];

/// The fields of an object's top level and of its `metadata` (ObjectMeta, as
/// `kubectl get -o yaml` prints it).
const TOP_LEVEL: &[&str] = &["apiVersion", "kind", "metadata", "spec", "status"];
const METADATA: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// What the API server would refuse in `doc` beyond validation's rules: each unknown
/// field (`unknown field`, with the nearest known name when one is close) and each
/// missing required field (`required`), in document order.
pub fn schema_problems(doc: &Document) -> Vec<Problem> {
    let value = &doc.value;
    let (kind, registry, required, uses): (&str, _, &[&str], Vec<FieldUse>) =
        if let Some(kind) = Kind::of(value) {
            let required = match kind {
                Kind::NodePool => NODE_POOL_REQUIRED,
                Kind::Ec2NodeClass => NODE_CLASS_REQUIRED,
            };
            (
                kind.as_str(),
                fields(kind),
                required,
                field_report(kind, value),
            )
        } else if is_node_overlay(value) {
            (
                "NodeOverlay",
                NODE_OVERLAY_FIELDS,
                NODE_OVERLAY_REQUIRED,
                overlay_field_report(value),
            )
        } else {
            return super::buffer::buffer_schema_problems(doc);
        };
    let object = match value.pointer("/metadata/name").and_then(Value::as_str) {
        Some(name) => format!("{kind} {name:?}"),
        None => format!("{kind} in {}", doc.label()),
    };
    let problem = |path: String, message: String| Problem {
        object: object.clone(),
        path,
        message,
    };
    let mut problems = Vec::new();
    if let Value::Object(map) = value {
        for key in map.keys().filter(|k| !TOP_LEVEL.contains(&k.as_str())) {
            problems.push(problem(
                key.clone(),
                unknown(key, TOP_LEVEL.iter().copied()),
            ));
        }
        if let Some(Value::Object(meta)) = map.get("metadata") {
            for key in meta.keys().filter(|k| !METADATA.contains(&k.as_str())) {
                problems.push(problem(
                    format!("metadata.{key}"),
                    unknown(key, METADATA.iter().copied()),
                ));
            }
        }
    }
    for u in uses.iter().filter(|u| u.status == Status::Unknown) {
        let (parent, key) = split_last(&u.path);
        let pattern = pattern_of(parent);
        let siblings = registry.iter().filter_map(|f| {
            f.path
                .strip_prefix(pattern.as_str())
                .and_then(|rest| rest.strip_prefix('.'))
                .map(|rest| rest.split(['.', '[']).next().unwrap_or(rest))
        });
        problems.push(problem(u.path.clone(), unknown(key, siblings)));
    }
    for path in required {
        missing(value, path, &mut |at| {
            problems.push(problem(at, "required".into()));
        });
    }
    problems
}

/// `unknown field: not in Karpenter v1.15's CRD`, with `(did you mean "x"?)` when a
/// known name is at most two edits away.
fn unknown<'a>(key: &str, known: impl Iterator<Item = &'a str>) -> String {
    let nearest = known
        .filter(|k| *k != "*")
        .map(|k| (edit_distance(key, k), k))
        .filter(|(d, _)| *d <= 2)
        .min();
    let base = format!("unknown field: not in Karpenter {KARPENTER_RELEASE}'s CRD");
    match nearest {
        Some((_, k)) => format!("{base} (did you mean {k:?}?)"),
        None => base,
    }
}

/// `spec.template.spec.requirments` → (`spec.template.spec`, `requirments`).
fn split_last(path: &str) -> (&str, &str) {
    path.rsplit_once('.').unwrap_or(("", path))
}

/// A path as written (`spec.taints[2]`) as a registry pattern (`spec.taints[]`).
fn pattern_of(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut in_index = false;
    for c in path.chars() {
        match c {
            '[' => {
                in_index = true;
                out.push_str("[]");
            }
            ']' => in_index = false,
            c if !in_index => out.push(c),
            _ => {}
        }
    }
    out
}

/// Calls `report` with the path of each place `required` (a pattern) is missing in
/// `value`: only where its parent is present (an absent optional parent needs nothing).
fn missing(value: &Value, required: &str, report: &mut dyn FnMut(String)) {
    let segments: Vec<&str> = required.split('.').collect();
    walk_missing(value, &segments, String::new(), report);
}

fn walk_missing(value: &Value, segments: &[&str], path: String, report: &mut dyn FnMut(String)) {
    let Some((first, rest)) = segments.split_first() else {
        return;
    };
    let (key, each) = match first.strip_suffix("[]") {
        Some(key) => (key, true),
        None => (*first, false),
    };
    let Value::Object(map) = value else {
        // A value of the wrong shape is validation's to report.
        return;
    };
    let here = if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    };
    let child = map.get(key).filter(|v| !v.is_null());
    match child {
        None if rest.is_empty() => report(here),
        None => {}
        Some(Value::Array(items)) if each => {
            for (i, item) in items.iter().enumerate() {
                walk_missing(item, rest, format!("{here}[{i}]"), report);
            }
        }
        Some(_) if each => {}
        Some(child) => walk_missing(child, rest, here, report),
    }
}

/// Levenshtein distance, for short field names.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::parse_documents;

    fn problems(text: &str) -> Vec<String> {
        parse_documents("pools.yaml", text)
            .unwrap_or_else(|e| panic!("{e}"))
            .iter()
            .flat_map(schema_problems)
            .map(|p| p.to_string())
            .collect()
    }

    const POOL: &str = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: default}\nspec:\n  template:\n    spec:\n      requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [spot]}]\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n";

    #[test]
    fn a_node_pool_as_karpenter_documents_it_has_no_schema_problem() {
        assert_eq!(problems(POOL), Vec::<String>::new());
    }

    #[test]
    fn a_misspelt_requirements_is_an_unknown_field_and_requirements_is_then_missing() {
        let text = POOL.replace("requirements:", "requirments:");
        assert_eq!(
            problems(&text),
            [
                "NodePool \"default\": spec.template.spec.requirments: unknown field: not in Karpenter v1.15's CRD (did you mean \"requirements\"?)",
                "NodePool \"default\": spec.template.spec.requirements: required",
            ]
        );
    }

    #[test]
    fn unknown_fields_at_the_top_in_metadata_and_in_list_items_are_named_with_their_index() {
        let text = POOL
            .replace(
                "metadata: {name: default}",
                "metadata: {name: default, lables: {a: b}}\nspce: {}",
            )
            .replace("operator: In,", "operator: In, vaules: [x],");
        assert_eq!(
            problems(&text),
            [
                "NodePool \"default\": spce: unknown field: not in Karpenter v1.15's CRD (did you mean \"spec\"?)",
                "NodePool \"default\": metadata.lables: unknown field: not in Karpenter v1.15's CRD (did you mean \"labels\"?)",
                "NodePool \"default\": spec.template.spec.requirements[0].vaules: unknown field: not in Karpenter v1.15's CRD (did you mean \"values\"?)",
            ]
        );
    }

    #[test]
    fn required_fields_of_list_items_are_named_per_item_and_optional_parents_need_nothing() {
        let text = POOL.replace(
            "      nodeClassRef",
            "      taints: [{key: a, effect: NoSchedule}, {key: b}]\n      nodeClassRef",
        );
        assert_eq!(
            problems(&text),
            ["NodePool \"default\": spec.template.spec.taints[1].effect: required"]
        );
        let class = "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: c}\nspec:\n  role: r\n  amiSelectorTerms: [{alias: al2023@latest}]\n  subnetSelectorTerms: [{tags: {a: b}}]\n";
        assert_eq!(
            problems(class),
            ["EC2NodeClass \"c\": spec.securityGroupSelectorTerms: required"]
        );
    }

    #[test]
    fn a_node_overlay_without_a_name_is_named_by_its_place() {
        let text = "apiVersion: karpenter.sh/v1alpha1\nkind: NodeOverlay\nmetadata: {}\nspec:\n  pricee: \"1\"\n";
        assert_eq!(
            problems(text),
            [
                "NodeOverlay in pools.yaml document 1: spec.pricee: unknown field: not in Karpenter v1.15's CRD (did you mean \"price\"?)",
                "NodeOverlay in pools.yaml document 1: spec.requirements: required",
            ]
        );
    }

    #[test]
    fn the_nearest_name_is_offered_only_within_two_edits() {
        assert_eq!(edit_distance("requirments", "requirements"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert!(!unknown("colour", ["weight", "price"].into_iter()).contains("did you mean"));
    }

    // ----- the registry and the required lists against Karpenter's CRDs ---------------

    /// Karpenter's CRDs, where the build fetched them (from the Go modules; never kept
    /// in the repository). `None` when they are not there.
    fn crd(file: &str) -> Option<Value> {
        let dir = std::env::var_os("NODEWRIGHT_KARPENTER_CRDS")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| {
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../../target/kube/crds/karpenter-v1.15.1")
            });
        let text = std::fs::read_to_string(dir.join(file)).ok()?;
        let crd: Value = serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        let versions = crd.pointer("/spec/versions")?.as_array()?.clone();
        let storage = versions
            .into_iter()
            .find(|v| v.get("storage") == Some(&Value::Bool(true)))?;
        storage
            .pointer("/schema/openAPIV3Schema/properties/spec")
            .cloned()
    }

    /// The CRD's leaf fields as registry patterns, the prefixes whose contents are
    /// free-form, and the required fields without a default.
    fn crd_shape(
        schema: &Value,
        path: &str,
        leaves: &mut Vec<String>,
        free: &mut Vec<String>,
        required: &mut Vec<String>,
    ) {
        if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
            free.push(path.to_string());
        }
        let props = schema.get("properties").and_then(Value::as_object);
        for name in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            let defaulted = props
                .and_then(|p| p.get(name))
                .is_some_and(|p| p.get("default").is_some());
            if !defaulted {
                required.push(format!("{path}.{name}"));
            }
        }
        match schema.get("type").and_then(Value::as_str) {
            Some("array") => {
                let items = &schema["items"];
                if items.get("type").and_then(Value::as_str) == Some("object") {
                    crd_shape(items, &format!("{path}[]"), leaves, free, required);
                } else {
                    leaves.push(path.to_string());
                }
            }
            Some("object") | None => {
                let additional = schema.get("additionalProperties").filter(|a| a.is_object());
                if let Some(props) = props {
                    for (name, child) in props {
                        crd_shape(child, &format!("{path}.{name}"), leaves, free, required);
                    }
                }
                match additional {
                    Some(a) if a.get("type").and_then(Value::as_str) == Some("object") => {
                        crd_shape(a, &format!("{path}.*"), leaves, free, required)
                    }
                    Some(_) => leaves.push(format!("{path}.*")),
                    None if props.is_none() => leaves.push(path.to_string()),
                    None => {}
                }
            }
            Some(_) => leaves.push(path.to_string()),
        }
    }

    #[test]
    fn the_registry_and_the_required_fields_are_those_of_karpenters_crds_when_at_hand() {
        let kinds: [(&str, &[super::super::fields::Field], &[&str], bool); 3] = [
            (
                "karpenter.sh_nodepools.yaml",
                fields(Kind::NodePool),
                NODE_POOL_REQUIRED,
                true,
            ),
            (
                "karpenter.k8s.aws_ec2nodeclasses.yaml",
                fields(Kind::Ec2NodeClass),
                NODE_CLASS_REQUIRED,
                false,
            ),
            (
                "karpenter.sh_nodeoverlays.yaml",
                NODE_OVERLAY_FIELDS,
                NODE_OVERLAY_REQUIRED,
                true,
            ),
        ];
        let mut checked = 0;
        for (file, registry, listed, spec_required) in kinds {
            let Some(schema) = crd(file) else {
                eprintln!("{file}: not at hand (target/kube/crds); nothing compared");
                continue;
            };
            let (mut leaves, mut free, mut required) = (Vec::new(), Vec::new(), Vec::new());
            crd_shape(&schema, "spec", &mut leaves, &mut free, &mut required);
            if spec_required {
                required.insert(0, "spec".into());
            }
            let mut problems = Vec::new();
            for leaf in &leaves {
                if !registry.iter().any(|f| f.path == leaf) {
                    problems.push(format!("{leaf}: in the CRD, not in the registry"));
                }
            }
            for f in registry {
                let under_free = free.iter().any(|p| f.path.starts_with(&format!("{p}.")));
                if !leaves.iter().any(|l| l == f.path) && !under_free {
                    problems.push(format!("{}: in the registry, not in the CRD", f.path));
                }
            }
            let mut want = required.clone();
            let mut have: Vec<String> = listed.iter().map(|s| s.to_string()).collect();
            want.sort();
            have.sort();
            if want != have {
                problems.push(format!(
                    "required: the CRD says {want:?}, the list {have:?}"
                ));
            }
            assert!(problems.is_empty(), "{file}:\n{}", problems.join("\n"));
            checked += 1;
        }
        eprintln!("compared {checked} CRD(s)");
    }
}
