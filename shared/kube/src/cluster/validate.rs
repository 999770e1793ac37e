//! The Karpenter objects read from the cluster, validated so that one bad object
//! costs only itself.

use super::*;

/// Validates NodePools and EC2NodeClasses so that one bad object costs only itself:
/// each EC2NodeClass alone, then each NodePool together with the valid EC2NodeClasses
/// (a NodePool whose class is invalid is invalid too: it could not launch anything).
/// Every problem goes to `invalid`, formatted `NodePool "x": path: message`, and each
/// invalid object (by kind and name) to `invalid_objects`.
pub(super) fn validate_karpenter(
    pools: Vec<Value>,
    classes: Vec<Value>,
    invalid: &mut Vec<String>,
    invalid_objects: &mut Vec<InvalidObject>,
) -> api::Manifests {
    let mut manifests = api::Manifests::default();
    let document = |source: &str, index: usize, value: Value| Document {
        source: source.to_string(),
        index,
        value,
    };
    let name_of = |value: &Value| {
        value
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let listed_classes: Vec<String> = classes.iter().filter_map(name_of).collect();
    let mut valid_class_docs = Vec::new();
    for (index, value) in classes.into_iter().enumerate() {
        let name = name_of(&value);
        let doc = document("cluster ec2nodeclasses", index, value);
        match api::validate(std::slice::from_ref(&doc)) {
            Ok(valid) => {
                manifests.node_classes.extend(valid.node_classes);
                valid_class_docs.push(doc);
            }
            Err(problems) => {
                invalid.extend(problems.iter().map(ToString::to_string));
                if let Some(name) = name {
                    invalid_objects.push(InvalidObject {
                        kind: ObjectKind::Ec2NodeClass,
                        name,
                        why: Invalidity::Spec {
                            message: spec_message(&problems),
                        },
                    });
                }
            }
        }
    }
    for (index, value) in pools.into_iter().enumerate() {
        let name = name_of(&value);
        let class = value
            .pointer(NODE_CLASS_REF_NAME_POINTER)
            .and_then(Value::as_str)
            .map(str::to_string);
        let mut docs = Vec::with_capacity(valid_class_docs.len() + 1);
        docs.push(document("cluster nodepools", index, value));
        docs.extend(valid_class_docs.iter().cloned());
        match api::validate(&docs) {
            Ok(valid) => manifests.node_pools.extend(valid.node_pools),
            Err(problems) => {
                invalid.extend(problems.iter().map(ToString::to_string));
                let Some(name) = name else { continue };
                // Valid but for the class it names: say which way the class is wrong.
                let only_the_class_ref = problems.len() == 1
                    && problems[0].path == NODE_CLASS_REF_NAME_PATH
                    && class.is_some();
                let why = match class {
                    Some(node_class) if only_the_class_ref => {
                        if listed_classes.contains(&node_class) {
                            Invalidity::NodeClassInvalid { node_class }
                        } else {
                            Invalidity::NodeClassNotFound { node_class }
                        }
                    }
                    _ => Invalidity::Spec {
                        message: spec_message(&problems),
                    },
                };
                invalid_objects.push(InvalidObject {
                    kind: ObjectKind::NodePool,
                    name,
                    why,
                });
            }
        }
    }
    manifests
}

/// Where a NodePool names its EC2NodeClass, as core's validation reports the path and
/// as JSON.
const NODE_CLASS_REF_NAME_PATH: &str = "spec.template.spec.nodeClassRef.name";

const NODE_CLASS_REF_NAME_POINTER: &str = "/spec/template/spec/nodeClassRef/name";

/// "path: message; path: message" (the object is implied: the message goes on it).
fn spec_message(problems: &[api::Problem]) -> String {
    problems
        .iter()
        .map(|p| {
            if p.path.is_empty() {
                p.message.clone()
            } else {
                format!("{}: {}", p.path, p.message)
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}
