//! NodePool rules: requirements and their operators, budgets, durations, the node class
//! reference, limits, taints, labels, and Karpenter's defaults.

use std::time::Duration;

use super::super::validate::testing::{pool, problems, valid};
use super::*;

fn requirement_yaml(key: &str, operator: &str, values: &str) -> String {
    format!(
        "      requirements:\n        - key: {key}\n          operator: {operator}\n          values: {values}"
    )
}

#[test]
fn unknown_operator_is_named_with_the_expected_list() {
    let text = pool(
        &requirement_yaml("example.com/tier", "GreaterThan", r#"["2"]"#),
        "",
    );
    assert_eq!(
        problems(&text),
        vec![
            r#"NodePool "broken": spec.template.spec.requirements[0].operator: unknown operator "GreaterThan" (expected one of In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte, Lte)"#
        ]
    );
}

#[test]
fn gt_with_a_non_integer_value_names_the_field() {
    let text = pool(
        &requirement_yaml("karpenter.k8s.aws/instance-generation", "Gt", r#"["two"]"#),
        "",
    );
    assert_eq!(
        problems(&text),
        vec![
            r#"NodePool "broken": spec.template.spec.requirements[0].values[0]: expected a single integer value, got "two""#
        ]
    );
}

#[test]
fn lt_with_two_values_is_refused() {
    let text = pool(
        &requirement_yaml("karpenter.k8s.aws/instance-cpu", "Lt", r#"["2", "4"]"#),
        "",
    );
    assert_eq!(
        problems(&text),
        vec![
            r#"NodePool "broken": spec.template.spec.requirements[0].values: expected a single integer value, got 2 values"#
        ]
    );
}

#[test]
fn in_without_values_is_refused() {
    let text = pool(
        "      requirements:\n        - key: kubernetes.io/arch\n          operator: In",
        "",
    );
    assert_eq!(
        problems(&text),
        vec![
            r#"NodePool "broken": spec.template.spec.requirements[0].values: operator In needs at least one value"#
        ]
    );
}

#[test]
fn exists_with_values_is_refused() {
    let text = pool(
        &requirement_yaml("example.com/gpu", "Exists", r#"["yes"]"#),
        "",
    );
    assert_eq!(
        problems(&text),
        vec![
            r#"NodePool "broken": spec.template.spec.requirements[0].values: operator Exists takes no values, got 1"#
        ]
    );
}

#[test]
fn min_values_must_fit_the_values_given_and_the_range() {
    let text = pool(
        "      requirements:\n        - key: karpenter.k8s.aws/instance-family\n          operator: In\n          values: [m5, c5]\n          minValues: 3\n        - key: karpenter.k8s.aws/instance-size\n          operator: Exists\n          minValues: 51",
        "",
    );
    assert_eq!(
        problems(&text),
        vec![
            r#"NodePool "broken": spec.template.spec.requirements[0].minValues: minValues 3 is more than the 2 value(s) given"#,
            r#"NodePool "broken": spec.template.spec.requirements[1].minValues: must be between 1 and 50, got 51"#,
        ]
    );
}

#[test]
fn restricted_requirement_keys_and_labels_are_refused() {
    let text = pool(
        &requirement_yaml("kubernetes.io/hostname", "In", "[a]"),
        "",
    )
    .replace("  template:\n", "  template:\n    metadata:\n      labels:\n        karpenter.sh/custom: x\n        team: web\n");
    assert_eq!(
        problems(&text),
        vec![
            r#"NodePool "broken": spec.template.metadata.labels.karpenter.sh/custom: label domain "karpenter.sh" is restricted (only well-known labels such as karpenter.sh/capacity-type may use it)"#,
            r#"NodePool "broken": spec.template.spec.requirements[0].key: label "kubernetes.io/hostname" is restricted"#,
        ]
    );
}

#[test]
fn a_budget_schedule_without_duration_is_refused() {
    let text = pool(
        "",
        "  disruption:\n    budgets:\n      - nodes: \"0\"\n        schedule: \"0 9 * * mon-fri\"",
    );
    assert_eq!(
        problems(&text),
        vec![
            r#"NodePool "broken": spec.disruption.budgets[0].duration: a schedule requires a duration"#
        ]
    );
}

#[test]
fn a_budget_duration_without_schedule_is_refused() {
    let text = pool(
        "",
        "  disruption:\n    budgets:\n      - nodes: \"0\"\n        duration: 8h",
    );
    assert_eq!(
        problems(&text),
        vec![
            r#"NodePool "broken": spec.disruption.budgets[0].schedule: a duration requires a schedule"#
        ]
    );
}

#[test]
fn bad_budget_fields_are_each_reported() {
    let text = pool(
        "",
        "  disruption:\n    budgets:\n      - nodes: \"101%\"\n        schedule: \"0 25 * * *\"\n        duration: 30s\n        reasons: [Empty, Expired]",
    );
    assert_eq!(
        problems(&text),
        vec![
            r#"NodePool "broken": spec.disruption.budgets[0].nodes: expected a percentage like "10%" (0-100%) or a node count like "5", got "101%""#,
            r#"NodePool "broken": spec.disruption.budgets[0].schedule: invalid cron schedule "0 25 * * *": hour field "25": 25 is out of range 0-23"#,
            r#"NodePool "broken": spec.disruption.budgets[0].duration: expected hours and/or minutes like "8h", "30m" or "1h30m", got "30s""#,
            r#"NodePool "broken": spec.disruption.budgets[0].reasons[1]: unknown reason "Expired" (expected one of Underutilized, Empty, Drifted, Unhealthy)"#,
        ]
    );
}

#[test]
fn scheduled_budgets_keep_their_schedule_duration_and_reasons() {
    let text = pool(
        "",
        "  disruption:\n    budgets:\n      - nodes: 5\n      - nodes: \"0\"\n        schedule: \"@daily\"\n        duration: 1h30m\n        reasons: [Drifted, Underutilized]",
    );
    let budgets = valid(&text).node_pools[0].disruption.budgets.clone();
    assert_eq!(
        budgets,
        vec![
            Budget {
                nodes: BudgetNodes::Count(5),
                schedule: None,
                duration: None,
                reasons: vec![]
            },
            Budget {
                nodes: BudgetNodes::Count(0),
                schedule: Some("@daily".into()),
                duration: Some(Duration::from_secs(5400)),
                reasons: vec![DisruptionReason::Drifted, DisruptionReason::Underutilized],
            },
        ]
    );
}

#[test]
fn a_duration_in_words_is_refused() {
    let text = pool("      expireAfter: 30 seconds", "");
    assert_eq!(
        problems(&text),
        vec![
            r#"NodePool "broken": spec.template.spec.expireAfter: expected a duration like "720h" or "1h30m", or "Never", got "30 seconds""#
        ]
    );
}

#[test]
fn termination_grace_period_takes_a_duration_but_not_never() {
    let ok = valid(&pool("      terminationGracePeriod: 48h", ""));
    assert_eq!(
        ok.node_pools[0].termination_grace_period,
        Some(Duration::from_secs(48 * 3600))
    );
    assert_eq!(
        problems(&pool("      terminationGracePeriod: Never", "")),
        vec![
            r#"NodePool "broken": spec.template.spec.terminationGracePeriod: expected a duration like "720h" or "1h30m", got "Never""#
        ]
    );
}

#[test]
fn never_turns_expiry_and_consolidation_off() {
    let text = pool(
        "      expireAfter: Never",
        "  disruption:\n    consolidateAfter: Never",
    );
    let pool = valid(&text).node_pools.remove(0);
    assert_eq!(pool.expire_after, None);
    assert_eq!(pool.disruption.consolidate_after, None);
}

#[test]
fn a_node_class_ref_to_a_missing_class_is_refused() {
    let text = pool("", "").replace("        name: default\n", "        name: gpu\n");
    assert_eq!(
        problems(&text),
        vec![
            r#"NodePool "broken": spec.template.spec.nodeClassRef.name: EC2NodeClass "gpu" is not defined in the input"#
        ]
    );
}

#[test]
fn a_node_class_ref_must_name_an_ec2_node_class() {
    let text = pool("", "")
        .replace(
            "        group: karpenter.k8s.aws\n",
            "        group: karpenter.azure.com\n",
        )
        .replace("        kind: EC2NodeClass\n", "");
    assert_eq!(
        problems(&text),
        vec![
            r#"NodePool "broken": spec.template.spec.nodeClassRef.group: expected "karpenter.k8s.aws" (nodewright reads EC2NodeClass only), got "karpenter.azure.com""#,
            r#"NodePool "broken": spec.template.spec.nodeClassRef.kind: required"#,
        ]
    );
}

#[test]
fn a_weight_of_the_wrong_type_names_the_field() {
    assert_eq!(
        problems(&pool("", "  weight: \"heavy\"")),
        vec![
            r#"NodePool "broken": spec.weight: invalid type: string "heavy", expected an integer"#
        ]
    );
}

#[test]
fn requirements_written_as_a_string_name_the_field() {
    assert_eq!(
        problems(&pool(
            "      requirements: \"kubernetes.io/arch=amd64\"",
            ""
        )),
        vec![
            r#"NodePool "broken": spec.template.spec.requirements: invalid type: string "kubernetes.io/arch=amd64", expected a sequence"#
        ]
    );
}

#[test]
fn a_bad_limits_quantity_names_the_key() {
    assert_eq!(
        problems(&pool("", "  limits:\n    cpu: 100\n    memory: 1000GB")),
        vec![
            r#"NodePool "broken": spec.limits.memory: quantity "1000GB" is not a Kubernetes quantity (expected a number with an optional suffix such as 500m, 2, 1.5Gi, 256M, 1e3)"#
        ]
    );
}

#[test]
fn limits_accept_numbers_and_quantity_strings() {
    let text = pool(
        "",
        "  limits:\n    cpu: 100\n    memory: 1000Gi\n    nvidia.com/gpu: 0.5",
    );
    let limits = valid(&text).node_pools[0]
        .limits
        .clone()
        .unwrap_or_default();
    assert_eq!(limits.get_milli("cpu"), 100_000);
    assert_eq!(limits.get_milli("memory"), 1000 * (1i64 << 30) * 1000);
    assert_eq!(limits.get_milli("nvidia.com/gpu"), 500);
}

#[test]
fn a_bad_taint_effect_is_refused() {
    let text = pool(
        "      taints:\n        - key: dedicated\n          value: gpu\n          effect: Sometimes",
        "",
    );
    assert_eq!(
        problems(&text),
        vec![
            r#"NodePool "broken": spec.template.spec.taints[0].effect: unknown effect "Sometimes" (expected one of NoSchedule, PreferNoSchedule, NoExecute)"#
        ]
    );
}

#[test]
fn taints_and_startup_taints_are_read_and_duplicates_refused() {
    let text = pool(
        "      taints:\n        - key: dedicated\n          value: gpu\n          effect: NoSchedule\n      startupTaints:\n        - key: node.cilium.io/agent-not-ready\n          effect: NoExecute",
        "",
    );
    let pool_ = valid(&text).node_pools.remove(0);
    assert_eq!(
        pool_.taints,
        vec![Taint {
            key: "dedicated".into(),
            value: Some("gpu".into()),
            effect: TaintEffect::NoSchedule
        }]
    );
    assert_eq!(pool_.startup_taints[0].effect, TaintEffect::NoExecute);
    let dup = pool(
        "      taints:\n        - key: a\n          effect: NoSchedule\n      startupTaints:\n        - key: a\n          effect: NoSchedule",
        "",
    );
    assert_eq!(
        problems(&dup),
        vec![
            r#"NodePool "broken": spec.template.spec.startupTaints: duplicate taint key and effect a:NoSchedule"#
        ]
    );
}

#[test]
fn unknown_extra_fields_are_accepted() {
    let text = pool(
        "      futureField: {anything: [1, 2]}\n      requirements:\n        - key: kubernetes.io/arch\n          operator: In\n          values: [arm64]\n          somethingNew: true",
        "  replicas: 3\n  disruption:\n    consolidateWhen: WhenCostJustifiesDisruption\n    budgets:\n      - nodes: 10%\n        newKnob: 1",
    )
    .replace("metadata:\n  name: broken\n", "metadata:\n  name: broken\n  uid: abc\nstatus:\n  conditions: []\n");
    assert_eq!(
        valid(&text).node_pools[0].requirements[0].values,
        vec!["arm64".to_string()]
    );
}

#[test]
fn karpenter_defaults_are_applied() {
    let pool = valid(&pool("", "")).node_pools.remove(0);
    assert_eq!(pool.expire_after, Some(Duration::from_secs(720 * 3600)));
    assert_eq!(pool.termination_grace_period, None);
    assert_eq!(pool.limits, None);
    assert_eq!(pool.weight, 0);
    assert_eq!(
        pool.disruption,
        Disruption {
            consolidation_policy: ConsolidationPolicy::WhenEmptyOrUnderutilized,
            consolidate_after: Some(Duration::ZERO),
            budgets: vec![Budget {
                nodes: BudgetNodes::Percent(10),
                schedule: None,
                duration: None,
                reasons: vec![]
            }],
        }
    );
    assert_eq!(
        pool.requirements,
        vec![NodeRequirement {
            key: "karpenter.sh/capacity-type".into(),
            operator: Operator::In,
            values: vec!["on-demand".into()],
            min_values: None,
        }]
    );
}

#[test]
fn a_stated_capacity_type_is_not_overridden_and_no_arch_is_added() {
    let text = pool(
        &requirement_yaml("karpenter.sh/capacity-type", "In", "[spot, on-demand]"),
        "",
    );
    let reqs = valid(&text).node_pools.remove(0).requirements;
    assert_eq!(reqs.len(), 1);
    assert_eq!(
        reqs[0].values,
        vec!["spot".to_string(), "on-demand".to_string()]
    );
}

#[test]
fn explicit_empty_budgets_stay_empty() {
    let text = pool(
        "",
        "  disruption:\n    consolidationPolicy: WhenEmpty\n    consolidateAfter: 5m\n    budgets: []",
    );
    let d = valid(&text).node_pools.remove(0).disruption;
    assert_eq!(d.consolidation_policy, ConsolidationPolicy::WhenEmpty);
    assert_eq!(d.consolidate_after, Some(Duration::from_secs(300)));
    assert!(d.budgets.is_empty());
}

#[test]
fn balanced_is_a_consolidation_policy() {
    let text = pool(
        "",
        "  disruption:\n    consolidationPolicy: Balanced\n    consolidateAfter: 30s",
    );
    let d = valid(&text).node_pools.remove(0).disruption;
    assert_eq!(d.consolidation_policy, ConsolidationPolicy::Balanced);
}

#[test]
fn budget_nodes_follow_the_crd_pattern() {
    assert_eq!(parse_budget_nodes("10%"), Some(BudgetNodes::Percent(10)));
    assert_eq!(parse_budget_nodes("100%"), Some(BudgetNodes::Percent(100)));
    assert_eq!(parse_budget_nodes("0%"), Some(BudgetNodes::Percent(0)));
    assert_eq!(parse_budget_nodes("5"), Some(BudgetNodes::Count(5)));
    for text in [
        "101%",
        "010%",
        "%",
        "",
        "5.5",
        "-1",
        "ten",
        "99999999999",
        "1 0",
    ] {
        assert_eq!(parse_budget_nodes(text), None, "{text:?}");
    }
}

#[test]
fn a_missing_template_spec_is_required() {
    let text = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: broken}\nspec:\n  template: {}\n";
    assert_eq!(
        problems(text),
        vec![r#"NodePool "broken": spec.template.spec: required"#]
    );
}

#[test]
fn malformed_label_keys_and_values_are_refused() {
    let text = pool(
        &requirement_yaml("\"Team Name\"", "In", "[\"web app\"]"),
        "",
    )
    .replace(
        "  template:\n",
        "  template:\n    metadata:\n      labels:\n        team: \"-web\"\n",
    );
    assert_eq!(
        problems(&text),
        vec![
            r#"NodePool "broken": spec.template.metadata.labels.team: label value "-web" must be letters, digits, '-', '_' or '.', starting and ending with a letter or digit"#,
            r#"NodePool "broken": spec.template.spec.requirements[0].key: "Team Name" is not a valid label key (expected an optional DNS prefix and '/', then up to 63 letters, digits, '-', '_' or '.')"#,
            r#"NodePool "broken": spec.template.spec.requirements[0].values[0]: label value "web app" must be letters, digits, '-', '_' or '.', starting and ending with a letter or digit"#,
        ]
    );
}

#[test]
fn replicas_make_a_static_pool_and_limits_nodes_is_read_as_a_node_count() {
    let text = pool("", "  replicas: 3\n  limits:\n    nodes: 5");
    let p = &valid(&text).node_pools[0];
    assert_eq!(p.replicas, Some(3));
    assert!(p.is_static());
    assert_eq!(p.node_limit, Some(5));

    let dynamic = &valid(&pool("", "")).node_pools[0];
    assert_eq!((dynamic.replicas, dynamic.node_limit), (None, None));
}

#[test]
fn replicas_of_zero_and_limits_nodes_of_zero_are_kept() {
    let p = &valid(&pool("", "  replicas: 0\n  limits:\n    nodes: 0")).node_pools[0];
    assert_eq!(p.replicas, Some(0));
    assert_eq!(p.node_limit, Some(0));
}

#[test]
fn static_pool_rules_are_named_with_their_field_paths() {
    let cases = [
        (
            "  replicas: -1",
            vec![r#"NodePool "broken": spec.replicas: must be at least 0, got -1"#],
        ),
        (
            "  replicas: 2\n  limits:\n    cpu: 10\n    nodes: 4",
            vec![
                r#"NodePool "broken": spec.limits.cpu: only 'limits.nodes' is supported on static NodePools (spec.replicas is set)"#,
            ],
        ),
        (
            "  replicas: 2\n  weight: 10",
            vec![
                r#"NodePool "broken": spec.weight: 'weight' is not supported on static NodePools (spec.replicas is set)"#,
            ],
        ),
    ];
    for (spec, want) in cases {
        assert_eq!(problems(&pool("", spec)), want, "{spec}");
    }
}

#[test]
fn a_dynamic_pool_may_have_weight_and_any_limits() {
    let p = &valid(&pool(
        "",
        "  weight: 10\n  limits:\n    cpu: 10\n    nodes: 3",
    ))
    .node_pools[0];
    assert_eq!((p.weight, p.node_limit, p.replicas), (10, Some(3), None));
}
