//! Validation of all documents together: each object against Karpenter's rules (see
//! `nodepool` and `nodeclass`), then the checks across objects (duplicate names,
//! NodePools referring to EC2NodeClasses). Every problem is collected, not just the
//! first, so one run of `nodewright validate` shows everything to fix.

use std::collections::{BTreeMap, BTreeSet};

use super::kind::Kind;
use super::report::{Report, object_label, object_name};
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
                message: "not a NodePool (karpenter.sh/v1) or EC2NodeClass (karpenter.k8s.aws/v1)"
                    .into(),
            }),
        }
    }
    check_duplicate_names(docs, &mut problems);
    if problems.is_empty() {
        Ok(manifests)
    } else {
        Err(problems)
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

/// Helpers for the validation tests of this module and its siblings.
#[cfg(test)]
pub(super) mod testing {
    use super::super::{Manifests, parse_documents, validate};

    /// A valid EC2NodeClass named "default", to pair with NodePools under test.
    pub const CLASS: &str = r#"
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: default
spec:
  role: "KarpenterNodeRole-${CLUSTER_NAME}"
  subnetSelectorTerms:
    - tags:
        karpenter.sh/discovery: "${CLUSTER_NAME}"
  securityGroupSelectorTerms:
    - tags:
        karpenter.sh/discovery: "${CLUSTER_NAME}"
  amiSelectorTerms:
    - alias: al2023@latest
"#;

    /// A minimal NodePool named "broken" whose `spec.template.spec` ends with `extra`
    /// (indented 6 spaces) and whose `spec` ends with `spec_extra` (2 spaces).
    pub fn pool(template_spec_extra: &str, spec_extra: &str) -> String {
        format!(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata:\n  name: broken\nspec:\n  template:\n    spec:\n      nodeClassRef:\n        group: karpenter.k8s.aws\n        kind: EC2NodeClass\n        name: default\n{template_spec_extra}\n{spec_extra}\n---\n{CLASS}"
        )
    }

    pub fn load_yaml(text: &str) -> Result<Manifests, Vec<String>> {
        let docs = parse_documents("test.yaml", text).map_err(|e| vec![e.to_string()])?;
        validate(&docs).map_err(|ps| ps.iter().map(ToString::to_string).collect())
    }

    /// The Display of every problem; panics (test only) when the input is valid.
    pub fn problems(text: &str) -> Vec<String> {
        match load_yaml(text) {
            Ok(m) => panic!("expected problems, got {m:?}"),
            Err(ps) => ps,
        }
    }

    pub fn valid(text: &str) -> Manifests {
        match load_yaml(text) {
            Ok(m) => m,
            Err(ps) => panic!("expected valid manifests, got {ps:#?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{LoadError, load};
    use super::testing::*;

    macro_rules! fixture {
        ($name:literal) => {
            (
                $name,
                include_str!(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/tests/fixtures/nodepools/",
                    $name
                )),
            )
        };
    }

    const FIXTURES: [(&str, &str); 5] = [
        fixture!("100-cpu-limit.yaml"),
        fixture!("general-purpose.yaml"),
        fixture!("min-values-family.yaml"),
        fixture!("multiple-arch.yaml"),
        fixture!("spot.yaml"),
    ];

    #[test]
    fn every_upstream_example_loads_unchanged() {
        for (name, text) in FIXTURES {
            let manifests = match load(&[(name.to_string(), text.to_string())]) {
                Ok(m) => m,
                Err(e) => panic!("{name}: {e}"),
            };
            assert!(!manifests.node_pools.is_empty(), "{name}");
            assert_eq!(manifests.node_classes.len(), 1, "{name}");
            let class = &manifests.node_classes[0];
            assert_eq!(class.ami_family.as_deref(), Some("AL2023"), "{name}");
            assert_eq!(
                class.role.as_deref(),
                Some("KarpenterNodeRole-${CLUSTER_NAME}"),
                "{name}"
            );
        }
    }

    #[test]
    fn the_cpu_limit_example_limits_cpu_to_one_hundred_cores() {
        let (name, text) = FIXTURES[0];
        let manifests = valid(text);
        let pool = &manifests.node_pools[0];
        assert_eq!(pool.name, "limitcpu100", "{name}");
        let limits = pool.limits.clone().unwrap_or_default();
        assert_eq!(limits.get_milli("cpu"), 100_000);
    }

    #[test]
    fn a_node_pool_may_refer_to_a_class_in_another_file() {
        let pool_only = pool("", "")
            .split("---")
            .next()
            .unwrap_or_default()
            .to_string();
        let sources = [
            ("pools.yaml".to_string(), pool_only),
            ("classes.yaml".to_string(), CLASS.to_string()),
        ];
        let manifests = match load(&sources) {
            Ok(m) => m,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(manifests.node_pools.len(), 1);
        assert_eq!(manifests.node_classes.len(), 1);
    }

    #[test]
    fn load_reports_format_errors_before_validation() {
        let sources = [(
            "bad.yaml".to_string(),
            "apiVersion: apps/v1\nkind: Deployment\n".to_string(),
        )];
        assert!(matches!(load(&sources), Err(LoadError::Format(_))));
    }

    #[test]
    fn load_lists_every_problem_in_its_message() {
        let sources = [(
            "p.yaml".to_string(),
            pool(
                "",
                "  weight: 0\n  disruption:\n    consolidationPolicy: Sometimes",
            ),
        )];
        let message = match load(&sources) {
            Err(e @ LoadError::Invalid(_)) => e.to_string(),
            other => panic!("expected Invalid, got {other:?}"),
        };
        assert_eq!(
            message,
            "2 problem(s) in the manifests:\n  NodePool \"broken\": spec.weight: must be between 1 and 100, got 0\n  NodePool \"broken\": spec.disruption.consolidationPolicy: unknown policy \"Sometimes\" (expected one of WhenEmpty, WhenEmptyOrUnderutilized, Balanced)"
        );
    }

    #[test]
    fn duplicate_names_of_one_kind_are_reported_once_per_repeat() {
        let text = format!("{}\n---\n{CLASS}", pool("", ""));
        assert_eq!(
            problems(&text),
            vec![
                "EC2NodeClass \"default\": metadata.name: defined more than once (test.yaml document 2 and test.yaml document 3)"
            ]
        );
    }

    #[test]
    fn a_node_pool_and_a_class_may_share_a_name() {
        let text = pool("", "").replace("name: broken", "name: default");
        assert_eq!(valid(&text).node_pools[0].name, "default");
    }

    #[test]
    fn problems_from_several_objects_are_all_collected() {
        let text = format!(
            "{}\n---\n{}",
            pool("", "  weight: 101"),
            CLASS
                .replace("name: default", "name: other")
                .replace("  role: \"KarpenterNodeRole-${CLUSTER_NAME}\"\n", "")
        );
        assert_eq!(
            problems(&text),
            vec![
                "NodePool \"broken\": spec.weight: must be between 1 and 100, got 101",
                "EC2NodeClass \"other\": spec: expected one of role or instanceProfile, got neither",
            ]
        );
    }

    #[test]
    fn an_object_without_a_name_is_named_by_its_document() {
        let text = CLASS.replace("  name: default\n", "  labels: {}\n");
        assert_eq!(
            problems(&text),
            vec!["EC2NodeClass in test.yaml document 1: metadata.name: required"]
        );
    }

    #[test]
    fn every_truncation_of_an_example_is_handled_without_panicking() {
        let (_, text) = FIXTURES[3];
        for (end, _) in text.char_indices() {
            if let Ok(docs) = super::super::parse_documents("cut.yaml", &text[..end]) {
                let _ = super::validate(&docs);
            }
        }
    }

    #[test]
    fn alias_bombs_are_refused_rather_than_expanded() {
        let mut text = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 0..9 {
            let prev = if i == 0 {
                "a".to_string()
            } else {
                format!("l{}", i - 1)
            };
            text.push_str(&format!("l{i}: &l{i} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"));
        }
        let message = super::super::parse_documents("bomb.yaml", &text).map_err(|e| e.to_string());
        assert!(
            matches!(&message, Err(m) if m.contains("not valid YAML")),
            "{message:?}"
        );
    }
}
