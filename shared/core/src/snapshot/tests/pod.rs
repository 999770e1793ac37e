//! Pods and DaemonSet templates: what makes a pod pending, its requests, its placement
//! constraints, host ports, and the fields disruption reads.

use serde_json::{Value, json};

use super::*;
use crate::api::model::{NodeRequirement, Operator, Taint, TaintEffect};
use crate::cluster::{
    HostPort, LabelSelector, PreferredNodeTerm, Toleration, TolerationOperator,
    TopologySpreadConstraint, WhenUnsatisfiable,
};
use crate::resources::QuantityError;
use crate::well_known::LABEL_HOSTNAME;

// --- pods: pending -----------------------------------------------------------------

#[test]
fn pending_means_unbound_not_terminal_and_not_a_daemonset_pod() {
    let mut bound = pod_json("default", "bound", json!({"nodeName": "n1"}));
    bound["status"]["phase"] = json!("Running");
    let mut done = pod_json("default", "done", json!({}));
    done["status"]["phase"] = json!("Succeeded");
    let mut failed = pod_json("default", "failed", json!({}));
    failed["status"]["phase"] = json!("Failed");
    let mut ds_pod = pod_json("kube-system", "aws-node-x7k2p", json!({}));
    ds_pod["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "aws-node", "uid": "u1", "controller": true}]);
    let waiting = pod_json("default", "waiting", json!({}));
    let s = parse_snapshot(&list(vec![bound, done, failed, ds_pod, waiting])).unwrap();
    let pending: Vec<String> = s.pending_pods().map(|p| p.key()).collect();
    assert_eq!(pending, ["default/waiting"]);
    assert!(s.pods[1].terminal && s.pods[2].terminal);
    assert!(s.pods[3].daemonset_owned);
    assert_eq!(s.pods[0].node_name.as_deref(), Some("n1"));
}

#[test]
fn a_pod_without_namespace_is_in_default() {
    let mut p = pod_json("x", "web-1", json!({}));
    p["metadata"].as_object_mut().unwrap().remove("namespace");
    let s = parse_snapshot(&list(vec![p])).unwrap();
    assert_eq!(s.pods[0].namespace, "default");
}

#[test]
fn critical_priority_classes_mark_a_pod_critical() {
    let p = one_pod(json!({"priorityClassName": "system-node-critical"})).unwrap();
    assert!(p.critical);
    let p = one_pod(json!({"priorityClassName": "high"})).unwrap();
    assert!(!p.critical);
}

// --- pods: requests ----------------------------------------------------------------

#[test]
fn a_pod_without_requests_still_takes_a_pod_slot() {
    let p = one_pod(json!({"containers": [container("app", json!({}))]})).unwrap();
    assert_eq!(p.requests, Resources::one_pod());
}

#[test]
fn containers_requests_add_up() {
    let p = one_pod(json!({"containers": [
        container("app", json!({"requests": {"cpu": "250m", "memory": "256Mi"}})),
        container("log", json!({"requests": {"cpu": "100m", "memory": "64Mi"}})),
    ]}))
    .unwrap();
    assert_eq!(p.requests, res(&[("cpu", "350m"), ("memory", "320Mi")]));
}

#[test]
fn the_largest_init_container_wins_over_a_smaller_sum() {
    let p = one_pod(json!({
        "containers": [container("app", json!({"requests": {"cpu": "500m", "memory": "128Mi"}}))],
        "initContainers": [
            container("migrate", json!({"requests": {"cpu": "2", "memory": "64Mi"}})),
            container("warm", json!({"requests": {"cpu": "1", "memory": "1Gi"}})),
        ],
    }))
    .unwrap();
    // Per resource: cpu max(0.5, 2, 1) = 2, memory max(128Mi, 64Mi, 1Gi) = 1Gi.
    assert_eq!(p.requests, res(&[("cpu", "2"), ("memory", "1Gi")]));
}

#[test]
fn sidecars_add_to_the_sum_and_to_later_init_containers() {
    let sidecar = |name: &str, cpu: &str| {
        let mut c = container(name, json!({"requests": {"cpu": cpu}}));
        c["restartPolicy"] = json!("Always");
        c
    };
    let p = one_pod(json!({
        "containers": [container("app", json!({"requests": {"cpu": "1"}}))],
        "initContainers": [
            container("first", json!({"requests": {"cpu": "1500m"}})),
            sidecar("envoy", "200m"),
            container("after-sidecar", json!({"requests": {"cpu": "1900m"}})),
            sidecar("log-shipper", "100m"),
        ],
    }))
    .unwrap();
    // Running: app 1 + envoy 0.2 + shipper 0.1 = 1.3.
    // Init peaks: first 1.5; envoy 0.2; after-sidecar 1.9 + 0.2 = 2.1; shipper 0.3.
    assert_eq!(p.requests, res(&[("cpu", "2100m")]));
}

#[test]
fn overhead_is_added_after_the_init_rule() {
    let p = one_pod(json!({
        "containers": [container("app", json!({"requests": {"cpu": "1", "memory": "1Gi"}}))],
        "initContainers": [container("init", json!({"requests": {"cpu": "2"}}))],
        "overhead": {"cpu": "250m", "memory": "120Mi"},
    }))
    .unwrap();
    assert_eq!(p.requests, res(&[("cpu", "2250m"), ("memory", "1144Mi")]));
}

#[test]
fn a_container_with_limits_only_requests_its_limits() {
    let p = one_pod(json!({"containers": [
        container("app", json!({"limits": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"}})),
        container("side", json!({"requests": {"cpu": "100m"}, "limits": {"cpu": "500m", "memory": "256Mi"}})),
    ]}))
    .unwrap();
    assert_eq!(
        p.requests,
        res(&[
            ("cpu", "2100m"),
            ("memory", "4352Mi"),
            ("nvidia.com/gpu", "1")
        ])
    );
}

#[test]
fn extended_resources_are_counted_exactly() {
    let p = one_pod(json!({"containers": [
        container("trainer", json!({"requests": {"cpu": "4", "nvidia.com/gpu": "2", "vpc.amazonaws.com/pod-eni": "1",
                                                  "example.com/dongle": "3"},
                                     "limits": {"nvidia.com/gpu": "2", "vpc.amazonaws.com/pod-eni": "1"}})),
    ]}))
    .unwrap();
    assert_eq!(p.requests.get_milli("nvidia.com/gpu"), 2000);
    assert_eq!(p.requests.get_milli("vpc.amazonaws.com/pod-eni"), 1000);
    assert_eq!(p.requests.get_milli("example.com/dongle"), 3000);
    assert_eq!(p.requests.get_milli("pods"), 1000);
}

#[test]
fn pod_level_requests_replace_the_container_sum_for_cpu_and_memory() {
    let p = one_pod(json!({
        "containers": [container("a", json!({"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}})),
                       container("b", json!({"requests": {"cpu": "1"}}))],
        "resources": {"requests": {"cpu": "1500m"}, "limits": {"memory": "3Gi"}},
    }))
    .unwrap();
    assert_eq!(
        p.requests,
        res(&[("cpu", "1500m"), ("memory", "3Gi"), ("nvidia.com/gpu", "1")])
    );
}

#[test]
fn a_malformed_quantity_names_pod_container_and_resource() {
    let err = one_pod(
        json!({"containers": [container("app", json!({"requests": {"memory": "1.5.3Gi"}}))]}),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "pod \"default/web-1\": container \"app\": resources.requests.memory: quantity \"1.5.3Gi\" is not a \
         Kubernetes quantity (expected a number with an optional suffix such as 500m, 2, 1.5Gi, 256M, 1e3)"
    );
    assert!(matches!(
        std::error::Error::source(&err).and_then(|s| s.downcast_ref::<QuantityError>()),
        Some(QuantityError::Malformed(_))
    ));
}

#[test]
fn a_malformed_init_container_limit_says_it_is_an_init_container() {
    let err = one_pod(
        json!({"initContainers": [container("setup", json!({"limits": {"cpu": "lots"}}))]}),
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("pod \"default/web-1\": init container \"setup\": resources.limits.cpu: "),
        "{err}"
    );
}

#[test]
fn a_negative_request_is_an_error_naming_pod_container_and_resource() {
    let err =
        one_pod(json!({"containers": [container("app", json!({"requests": {"cpu": "-500m"}}))]}))
            .unwrap_err();
    assert!(
        matches!(err, SnapshotError::NegativeQuantity { .. }),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "pod \"default/web-1\": container \"app\": resources.requests.cpu: quantity \"-500m\" is negative \
         (expected zero or more)"
    );
}

#[test]
fn requests_too_large_to_add_saturate_rather_than_fail() {
    // Each is a valid quantity; their sum is beyond what nodewright represents,
    // which only means "more than any node has".
    let big = json!({"requests": {"cpu": "5000000000000000"}});
    let pod =
        one_pod(json!({"containers": [container("a", big.clone()), container("b", big)]})).unwrap();
    assert_eq!(
        pod.requests.get_milli("cpu"),
        crate::resources::QUANTITY_CEILING
    );
}

#[test]
fn a_negative_overhead_names_the_field() {
    let err = one_pod(json!({"overhead": {"memory": "-1Mi"}})).unwrap_err();
    assert_eq!(
        err.to_string(),
        "pod \"default/web-1\": spec.overhead.memory: quantity \"-1Mi\" is negative (expected zero or more)"
    );
}

// --- pods: placement constraints ---------------------------------------------------

#[test]
fn node_selector_affinity_spread_and_tolerations_are_converted() {
    let p = one_pod(json!({
        "nodeSelector": {"kubernetes.io/arch": "arm64"},
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "dedicated", "value": "batch"},
            {"operator": "Exists"},
        ],
        "topologySpreadConstraints": [{
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web-1"}},
            "minDomains": 3,
        }, {
            "maxSkew": 2,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway",
        }],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
                        {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["4"]},
                        {"key": "node.kubernetes.io/exclude", "operator": "DoesNotExist"},
                    ]},
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["ip-10-0-0-1.ec2.internal"]}]},
                ]},
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 40, "preference": {"matchExpressions": [
                        {"key": "topology.kubernetes.io/zone", "operator": "NotIn", "values": ["us-east-1c"]}]}},
                ],
            },
            "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 10, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "cache"}},
                                                   "topologyKey": "topology.kubernetes.io/zone",
                                                   "namespaces": ["cache", "default"]}},
            ]},
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web-1"]}]},
                 "topologyKey": "kubernetes.io/hostname"},
            ]},
        },
    }))
    .unwrap();

    assert_eq!(
        p.node_selector
            .get("kubernetes.io/arch")
            .map(String::as_str),
        Some("arm64")
    );

    let req = |key: &str, operator, values: &[&str]| NodeRequirement {
        key: key.to_string(),
        operator,
        values: values.iter().map(|v| v.to_string()).collect(),
        min_values: None,
    };
    assert_eq!(
        p.required_node_terms,
        vec![
            vec![
                req(
                    "karpenter.sh/capacity-type",
                    Operator::In,
                    &["spot", "on-demand"]
                ),
                req(
                    "karpenter.k8s.aws/instance-generation",
                    Operator::Gt,
                    &["4"]
                ),
                req("node.kubernetes.io/exclude", Operator::DoesNotExist, &[]),
            ],
            vec![req(
                LABEL_HOSTNAME,
                Operator::In,
                &["ip-10-0-0-1.ec2.internal"]
            )],
        ]
    );
    assert_eq!(
        p.preferred_node_terms,
        vec![PreferredNodeTerm {
            weight: 40,
            requirements: vec![req(
                "topology.kubernetes.io/zone",
                Operator::NotIn,
                &["us-east-1c"]
            )],
        }]
    );

    assert_eq!(
        p.tolerations,
        vec![
            Toleration {
                key: "nvidia.com/gpu".into(),
                operator: TolerationOperator::Exists,
                value: String::new(),
                effect: Some(TaintEffect::NoSchedule),
            },
            Toleration {
                key: "dedicated".into(),
                operator: TolerationOperator::Equal,
                value: "batch".into(),
                effect: None,
            },
            Toleration {
                key: String::new(),
                operator: TolerationOperator::Exists,
                value: String::new(),
                effect: None,
            },
        ]
    );
    let gpu_taint = Taint {
        key: "nvidia.com/gpu".into(),
        value: None,
        effect: TaintEffect::NoSchedule,
    };
    assert!(p.tolerations[0].tolerates(&gpu_taint));

    let web_selector = LabelSelector {
        match_labels: [("app".to_string(), "web-1".to_string())].into(),
        match_expressions: vec![],
    };
    assert_eq!(
        p.topology_spread,
        vec![
            TopologySpreadConstraint {
                max_skew: 1,
                topology_key: "topology.kubernetes.io/zone".into(),
                when_unsatisfiable: WhenUnsatisfiable::DoNotSchedule,
                label_selector: Some(web_selector.clone()),
                min_domains: Some(3),
                honor_node_affinity: true,
                honor_node_taints: false,
            },
            TopologySpreadConstraint {
                max_skew: 2,
                topology_key: "kubernetes.io/hostname".into(),
                when_unsatisfiable: WhenUnsatisfiable::ScheduleAnyway,
                label_selector: None,
                min_domains: None,
                honor_node_affinity: true,
                honor_node_taints: false,
            },
        ]
    );

    assert!(p.pod_affinity.is_empty());
    assert_eq!(p.preferred_pod_affinity.len(), 1);
    assert_eq!(p.preferred_pod_affinity[0].weight, 10);
    assert_eq!(
        p.preferred_pod_affinity[0].term.namespaces,
        ["cache", "default"]
    );
    assert_eq!(p.pod_anti_affinity.len(), 1);
    let anti = &p.pod_anti_affinity[0];
    assert_eq!(anti.topology_key, "kubernetes.io/hostname");
    assert!(anti.label_selector.as_ref().unwrap().matches(&p.labels));
    assert!(p.preferred_pod_anti_affinity.is_empty());
}

#[test]
fn affinity_terms_without_namespaces_get_the_pods_namespace() {
    let item = pod_json(
        "shop",
        "cart-1",
        json!({"affinity": {
            "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "redis"}}, "topologyKey": "topology.kubernetes.io/zone"}]},
            "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "cart-1"}},
                                                    "topologyKey": "kubernetes.io/hostname", "namespaces": []}}]},
        }}),
    );
    let s = parse_snapshot(&list(vec![item])).unwrap();
    let p = &s.pods[0];
    assert_eq!(p.pod_affinity[0].namespaces, ["shop"]);
    assert_eq!(p.preferred_pod_anti_affinity[0].term.namespaces, ["shop"]);
}

#[test]
fn match_label_keys_narrow_selectors_to_the_pods_own_values() {
    let mut item = pod_json(
        "default",
        "web-1",
        json!({
            "topologySpreadConstraints": [{
                "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "web"}}, "matchLabelKeys": ["pod-template-hash"],
            }],
        }),
    );
    item["metadata"]["labels"] = json!({"app": "web", "pod-template-hash": "abc123"});
    let s = parse_snapshot(&list(vec![item])).unwrap();
    let sel = s.pods[0].topology_spread[0].label_selector.clone().unwrap();
    let mut other_revision = s.pods[0].labels.clone();
    assert!(sel.matches(&other_revision));
    other_revision.insert("pod-template-hash".into(), "def456".into());
    assert!(!sel.matches(&other_revision));
}

#[test]
fn only_empty_required_node_terms_match_no_node() {
    let p = one_pod(
        json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
        {"nodeSelectorTerms": [{}]}}}}),
    )
    .unwrap();
    assert_eq!(p.required_node_terms.len(), 1);
    assert_eq!(p.required_node_terms[0][0].operator, Operator::In);
    assert!(p.required_node_terms[0][0].values.is_empty());
}

#[test]
fn an_unknown_node_operator_names_the_pod_and_path() {
    let err = one_pod(json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
        {"nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Gte", "values": ["1"]}]}]}}}}))
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "pod \"default/web-1\": spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.\
         nodeSelectorTerms[0].matchExpressions[0].operator: unknown operator \"Gte\" (expected one of In, \
         NotIn, Exists, DoesNotExist, Gt, Lt)"
    );
}

#[test]
fn gt_needs_exactly_one_integer() {
    let err = one_pod(json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
        {"nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["x"]}]}]}}}}))
    .unwrap_err();
    assert!(matches!(err, SnapshotError::InvalidValue { .. }), "{err:?}");
    assert!(
        err.to_string().contains("matchExpressions[0].values"),
        "{err}"
    );
}

#[test]
fn unknown_label_selector_and_toleration_operators_are_errors() {
    let err = one_pod(json!({"topologySpreadConstraints": [{
        "maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchExpressions": [{"key": "app", "operator": "Equals", "values": ["x"]}]}}]}))
    .unwrap_err();
    assert!(
        err.to_string().ends_with(
            "spec.topologySpreadConstraints[0].labelSelector.matchExpressions[0].operator: unknown operator \
             \"Equals\" (expected one of In, NotIn, Exists, DoesNotExist)"
        ),
        "{err}"
    );
    let err = one_pod(json!({"tolerations": [{"key": "a", "operator": "Matches"}]})).unwrap_err();
    assert!(
        matches!(
            err,
            SnapshotError::UnknownOperator {
                expected: "Equal, Exists",
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn a_zero_max_skew_is_invalid() {
    let err = one_pod(json!({"topologySpreadConstraints": [
        {"maxSkew": 0, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]}))
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("topologySpreadConstraints[0].maxSkew"),
        "{err}"
    );
}

#[test]
fn a_daemonset_template_becomes_a_pod_named_after_the_daemonset() {
    let s = parse_snapshot(&list(vec![daemonset_json()])).unwrap();
    let ds = &s.daemonsets[0];
    assert_eq!(
        (ds.namespace.as_str(), ds.name.as_str()),
        ("kube-system", "aws-node")
    );
    assert_eq!(ds.template.key(), "kube-system/aws-node");
    assert_eq!(ds.template.requests, res(&[("cpu", "50m")]));
    assert!(ds.template.critical);
    assert!(ds.template.daemonset_owned);
    assert!(!ds.template.is_pending());
    assert_eq!(
        ds.template.labels.get("k8s-app").map(String::as_str),
        Some("aws-node")
    );
    assert_eq!(ds.template.tolerations.len(), 1);
}

#[test]
fn a_daemonset_error_names_the_daemonset_and_template_path() {
    let mut ds = daemonset_json();
    ds["spec"]["template"]["spec"]["overhead"] = json!({"cpu": "x"});
    let err = parse_snapshot(&list(vec![ds])).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("DaemonSet \"kube-system/aws-node\": spec.template.spec.overhead.cpu: "),
        "{err}"
    );
}

#[test]
fn host_ports_come_from_containers_and_sidecars_but_not_classic_init_containers() {
    let ports = |list: Value| json!({"name": "c", "image": "pause", "ports": list});
    let mut sidecar = ports(json!([{"containerPort": 9000, "hostPort": 9000}]));
    sidecar["restartPolicy"] = json!("Always");
    let pod = one_pod(json!({
        "initContainers": [
            ports(json!([{"containerPort": 7000, "hostPort": 7000}])),
            sidecar,
        ],
        "containers": [ports(json!([
            {"containerPort": 80, "hostPort": 8080, "protocol": "UDP", "hostIP": "10.0.0.1"},
            {"containerPort": 443},
            {"containerPort": 53, "hostPort": 0},
        ]))],
    }))
    .unwrap();
    assert_eq!(
        pod.host_ports,
        vec![
            HostPort {
                port: 9000,
                protocol: "TCP".into(),
                host_ip: String::new(),
            },
            HostPort {
                port: 8080,
                protocol: "UDP".into(),
                host_ip: "10.0.0.1".into(),
            },
        ]
    );
}

#[test]
fn a_host_port_out_of_range_names_the_container_port() {
    let err = one_pod(json!({"containers": [
        {"name": "c", "image": "pause", "ports": [{"containerPort": 1, "hostPort": 70000}]}
    ]}))
    .unwrap_err()
    .to_string();
    assert_eq!(
        err,
        "pod \"default/web-1\": spec.containers[0].ports[0].hostPort: \"70000\" is not valid (expected a port number from 1 to 65535)"
    );
}

#[test]
fn scheduler_nomination_mark_and_owning_daemonset_are_read() {
    let mut item = pod_json(
        "default",
        "agent-x",
        json!({"schedulerName": "fargate-scheduler"}),
    );
    item["metadata"]["ownerReferences"] =
        json!([{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "u"}]);
    item["status"] = json!({
        "phase": "Pending",
        "nominatedNodeName": "n1",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
    });
    let pod = parse_snapshot(&list(vec![item])).unwrap().pods.remove(0);
    assert_eq!(pod.scheduler_name.as_deref(), Some("fargate-scheduler"));
    assert_eq!(pod.nominated_node_name.as_deref(), Some("n1"));
    assert!(pod.marked_unschedulable);
    assert_eq!(pod.owner_daemonset.as_deref(), Some("agent"));
    assert!(pod.daemonset_owned);

    // The default scheduler, spelt out, is no scheduler name; other PodScheduled
    // conditions are no mark.
    let mut plain = pod_json("default", "web-1", json!({}));
    plain["status"]["conditions"] =
        json!([{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]);
    let pod = parse_snapshot(&list(vec![plain])).unwrap().pods.remove(0);
    assert_eq!(pod.scheduler_name, None);
    assert!(!pod.marked_unschedulable);
    assert_eq!(pod.owner_daemonset, None);
    assert!(!pod.mirror);
}

#[test]
fn times_do_not_disrupt_hashes_and_budget_status_are_read_for_disruption() {
    let mut node = node_json("n1", "True");
    node["metadata"]["creationTimestamp"] = json!("2026-11-20T08:00:00Z");
    node["metadata"]["annotations"] = json!({
        "karpenter.sh/do-not-disrupt": "true",
        "karpenter.sh/nodepool-hash": "123",
        "karpenter.sh/nodepool-hash-version": "nodewright-v1",
        "karpenter.k8s.aws/ec2nodeclass-hash": "456",
        "karpenter.k8s.aws/ec2nodeclass-hash-version": "v4",
    });
    node["status"]["conditions"] = json!([{"type": "Ready", "status": "True",
        "lastTransitionTime": "2026-11-20T08:01:30Z"}]);
    let mut pod = pod_json("default", "web-1", json!({}));
    pod["metadata"]["creationTimestamp"] = json!("2026-11-21T00:00:00Z");
    pod["metadata"]["annotations"] = json!({"karpenter.sh/do-not-disrupt": "true"});
    pod["status"]["startTime"] = json!("2026-11-21T00:00:05Z");
    let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
        "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1,
                   "expectedPods": 1}});
    let s = parse_snapshot(&list(vec![node, pod, pdb])).unwrap();
    let day = |d: i64| crate::calendar::days_from_civil(2026, 11, d) * 86_400;
    let n = &s.nodes[0];
    assert_eq!(n.created_at, Some(day(20) + 8 * 3600));
    assert_eq!(n.ready_since, Some(day(20) + 8 * 3600 + 90));
    assert!(n.do_not_disrupt && !n.deleting);
    assert_eq!(n.nodepool_hash.as_deref(), Some("123"));
    // Karpenter's version ("v4"): not comparable with nodewright's hash.
    assert_eq!(n.nodeclass_hash, None);
    let p = &s.pods[0];
    assert!(p.do_not_disrupt);
    assert_eq!(
        (p.created_at, p.started_at),
        (Some(day(21)), Some(day(21) + 5))
    );
    assert_eq!(s.pdbs[0].status_disruptions_allowed, Some(0));
}

#[test]
fn a_static_pods_mirror_is_known_by_its_annotation() {
    let mut item = pod_json("kube-system", "kube-proxy-n1", json!({}));
    item["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "abc123"});
    let pod = parse_snapshot(&list(vec![item])).unwrap().pods.remove(0);
    assert!(pod.mirror);
}
