//! kube-scheduler's default pod topology spread, as Karpenter accounts for it (its
//! `--scheduler-config`, after v1.14.1): the operator states the `defaultConstraints`
//! their kube-scheduler applies (`podTopologySpread.defaultConstraints`, the shape of
//! the PodTopologySpread plugin's arguments), and a pod that has no topology spread
//! constraints of its own is planned with them, each with a label selector deduced as
//! kube-scheduler deduces it: the selectors of the Services in the pod's namespace that
//! select it, merged, and its controller's (a ReplicationController's selector as
//! labels; a ReplicaSet's or StatefulSet's as requirements). A pod for which nothing is
//! deduced gets none, as kube-scheduler skips it.
//!
//! Nothing is assumed when nothing is configured: kube-scheduler's built-in defaults
//! (zone 5, hostname 3, `ScheduleAnyway`) are not applied unless written, as Karpenter
//! does, since a cluster's scheduler may run with others or none. The constraints exist
//! only on the copies planning reads; nothing is written to the API server.

use std::collections::{BTreeMap, HashMap};

use serde::Deserialize;

pub use crate::cluster::{ControllerRef, Service};
use crate::cluster::{
    LabelSelector, LabelSelectorRequirement, Pod, TopologySpreadConstraint, WhenUnsatisfiable,
};

/// The part of a scheduler configuration planning reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// Each without a label selector (deduced per pod).
    pub default_constraints: Vec<TopologySpreadConstraint>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct File {
    #[serde(default)]
    pod_topology_spread: Option<SpreadArgs>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SpreadArgs {
    #[serde(default)]
    default_constraints: Vec<ConstraintSpec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ConstraintSpec {
    max_skew: i64,
    #[serde(default)]
    topology_key: String,
    when_unsatisfiable: String,
    #[serde(default)]
    min_domains: Option<i64>,
    #[serde(default)]
    node_affinity_policy: Option<String>,
    #[serde(default)]
    node_taints_policy: Option<String>,
    /// Refused: kube-scheduler deduces the selector of a default constraint.
    #[serde(default)]
    label_selector: Option<serde_json::Value>,
    /// Refused, as kube-scheduler refuses it in a default constraint.
    #[serde(default)]
    match_label_keys: Option<Vec<String>>,
}

impl SchedulerConfig {
    /// Reads `podTopologySpread.defaultConstraints` from YAML or JSON text; every
    /// problem names its field (`podTopologySpread.defaultConstraints[1].maxSkew`).
    /// Empty text is no configuration.
    pub fn parse(text: &str) -> Result<Self, Vec<String>> {
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        // The YAML reader's message names the field and its line.
        let file: File = serde_yaml_ng::from_str(text).map_err(|e| vec![e.to_string()])?;
        Self::from_file(file)
    }

    /// [`Self::parse`] for a configuration held inside another document (a simulator
    /// scenario's `schedulerConfig`); messages name the field from this value down.
    pub fn from_value(value: serde_json::Value) -> Result<Self, Vec<String>> {
        let file: File = serde_json::from_value(value).map_err(|e| vec![e.to_string()])?;
        Self::from_file(file)
    }

    fn from_file(file: File) -> Result<Self, Vec<String>> {
        let specs = file
            .pod_topology_spread
            .map(|s| s.default_constraints)
            .unwrap_or_default();
        let mut problems = Vec::new();
        let mut constraints = Vec::new();
        for (i, spec) in specs.iter().enumerate() {
            let at = format!("podTopologySpread.defaultConstraints[{i}]");
            match constraint(spec) {
                Ok(c) => constraints.push(c),
                Err(found) => problems.extend(found.into_iter().map(|p| format!("{at}.{p}"))),
            }
            // kube-scheduler refuses two defaults on one key for one outcome.
            if specs[..i].iter().any(|o| {
                o.topology_key == spec.topology_key
                    && o.when_unsatisfiable == spec.when_unsatisfiable
            }) {
                problems.push(format!(
                    "{at}: a second constraint on topologyKey {:?} with whenUnsatisfiable {}",
                    spec.topology_key, spec.when_unsatisfiable
                ));
            }
        }
        if problems.is_empty() {
            Ok(Self {
                default_constraints: constraints,
            })
        } else {
            Err(problems)
        }
    }

    pub fn is_empty(&self) -> bool {
        self.default_constraints.is_empty()
    }
}

/// One default constraint, or what is wrong with it (each message starting with the
/// field it names).
fn constraint(spec: &ConstraintSpec) -> Result<TopologySpreadConstraint, Vec<String>> {
    let mut problems = Vec::new();
    let max_skew = u32::try_from(spec.max_skew).ok().filter(|s| *s > 0);
    if max_skew.is_none() {
        problems.push(format!(
            "maxSkew: {} is not an integer greater than 0",
            spec.max_skew
        ));
    }
    if let Err(why) = qualified_name(&spec.topology_key) {
        problems.push(format!("topologyKey: {:?} {why}", spec.topology_key));
    }
    let when_unsatisfiable = match spec.when_unsatisfiable.as_str() {
        "DoNotSchedule" => Some(WhenUnsatisfiable::DoNotSchedule),
        "ScheduleAnyway" => Some(WhenUnsatisfiable::ScheduleAnyway),
        other => {
            problems.push(format!(
                "whenUnsatisfiable: {other:?} is not DoNotSchedule or ScheduleAnyway"
            ));
            None
        }
    };
    let min_domains = match spec.min_domains {
        None => None,
        Some(m) => {
            let ok = u32::try_from(m).ok().filter(|m| *m > 0);
            if ok.is_none() {
                problems.push(format!("minDomains: {m} is not an integer greater than 0"));
            }
            ok
        }
    };
    let mut policy = |field: &str, value: &Option<String>, default: bool| match value.as_deref() {
        None => default,
        Some("Honor") => true,
        Some("Ignore") => false,
        Some(other) => {
            problems.push(format!("{field}: {other:?} is not Honor or Ignore"));
            default
        }
    };
    let honor_node_affinity = policy("nodeAffinityPolicy", &spec.node_affinity_policy, true);
    let honor_node_taints = policy("nodeTaintsPolicy", &spec.node_taints_policy, false);
    if spec.label_selector.is_some() {
        problems.push(
            "labelSelector: not allowed in a default constraint (each pod's is deduced from its Services and controller)"
                .into(),
        );
    }
    if spec.match_label_keys.is_some() {
        problems.push("matchLabelKeys: not allowed in a default constraint".into());
    }
    match (max_skew, when_unsatisfiable) {
        (Some(max_skew), Some(when_unsatisfiable)) if problems.is_empty() => {
            Ok(TopologySpreadConstraint {
                max_skew,
                topology_key: spec.topology_key.clone(),
                when_unsatisfiable,
                label_selector: None,
                min_domains,
                honor_node_affinity,
                honor_node_taints,
            })
        }
        _ => Err(problems),
    }
}

/// Kubernetes' qualified name: an optional DNS subdomain prefix and `/`, then a name of
/// at most 63 characters, alphanumeric at both ends, `-`, `_` and `.` inside.
fn qualified_name(key: &str) -> Result<(), &'static str> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if name.is_empty() {
        return Err("is empty: name a node label, like topology.kubernetes.io/zone");
    }
    let alnum = |c: char| c.is_ascii_alphanumeric();
    if name.len() > 63
        || !name.starts_with(alnum)
        || !name.ends_with(alnum)
        || !name
            .chars()
            .all(|c| alnum(c) || matches!(c, '-' | '_' | '.'))
    {
        return Err(
            "is not a qualified name (at most 63 characters of [A-Za-z0-9-_.], alphanumeric at both ends)",
        );
    }
    if let Some(p) = prefix {
        let lower = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
        if p.is_empty()
            || p.len() > 253
            || !p.split('.').all(|part| {
                !part.is_empty()
                    && part.starts_with(lower)
                    && part.ends_with(lower)
                    && part.chars().all(|c| lower(c) || c == '-')
            })
        {
            return Err("has a prefix that is not a DNS subdomain");
        }
    }
    Ok(())
}

/// What a controller adds to a pod's default selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnerSelector {
    /// A ReplicationController's selector: its labels overwrite the Services' on the
    /// same keys.
    Labels(BTreeMap<String, String>),
    /// A ReplicaSet's or StatefulSet's selector: every requirement is ANDed on.
    Requirements(Vec<LabelSelectorRequirement>),
}

/// What `controller` adds to a default selector, from `controllers` (the snapshot's or
/// the watched view's ReplicaSets, StatefulSets and ReplicationControllers); `None`
/// when it is not among them or adds nothing.
pub fn owner_selector_in(
    controllers: &[crate::cluster::ControllerSelector],
    namespace: &str,
    controller: &ControllerRef,
) -> Option<OwnerSelector> {
    let w = controllers.iter().find(|w| {
        w.kind == controller.kind && w.namespace == namespace && w.name == controller.name
    })?;
    let selector = w.selector.as_ref()?;
    if w.kind == "ReplicationController" {
        return (!selector.match_labels.is_empty())
            .then(|| OwnerSelector::Labels(selector.match_labels.clone()));
    }
    let mut reqs: Vec<LabelSelectorRequirement> = selector
        .match_labels
        .iter()
        .map(|(k, v)| LabelSelectorRequirement {
            key: k.clone(),
            operator: crate::cluster::LabelSelectorOperator::In,
            values: vec![v.clone()],
        })
        .collect();
    reqs.extend(selector.match_expressions.iter().cloned());
    Some(OwnerSelector::Requirements(reqs))
}

/// Whether kube-scheduler deduces a selector from a controller of this kind.
pub fn owner_kind_counts(controller: &ControllerRef) -> bool {
    matches!(
        (controller.api_version.as_str(), controller.kind.as_str()),
        ("v1", "ReplicationController") | ("apps/v1", "ReplicaSet" | "StatefulSet")
    )
}

/// Gives each pod without topology spread constraints of its own the configured
/// defaults, with the selector deduced from `services` and its controller
/// (`owner_selector` answers for a pod's namespace and controller; `None` when the
/// controller is gone or of no kind that counts). Returns how many pods were given
/// constraints.
pub fn apply_defaults(
    pods: &mut [Pod],
    config: &SchedulerConfig,
    services: &[Service],
    owner_selector: &dyn Fn(&str, &ControllerRef) -> Option<OwnerSelector>,
) -> usize {
    if config.is_empty() {
        return 0;
    }
    let mut by_namespace: HashMap<&str, Vec<&BTreeMap<String, String>>> = HashMap::new();
    for s in services {
        if let Some(selector) = &s.selector {
            by_namespace
                .entry(s.namespace.as_str())
                .or_default()
                .push(selector);
        }
    }
    let mut owners: HashMap<(String, ControllerRef), Option<OwnerSelector>> = HashMap::new();
    let mut given = 0;
    for pod in pods.iter_mut() {
        if !pod.topology_spread.is_empty() {
            continue;
        }
        let owner = pod.controller.as_ref().and_then(|c| {
            owners
                .entry((pod.namespace.clone(), (**c).clone()))
                .or_insert_with(|| {
                    owner_kind_counts(c)
                        .then(|| owner_selector(&pod.namespace, c))
                        .flatten()
                })
                .clone()
        });
        let services = by_namespace
            .get(pod.namespace.as_str())
            .map(Vec::as_slice)
            .unwrap_or_default();
        let Some(selector) = default_selector(&pod.labels, services, owner) else {
            continue;
        };
        pod.topology_spread = config
            .default_constraints
            .iter()
            .map(|c| TopologySpreadConstraint {
                label_selector: Some(selector.clone()),
                ..c.clone()
            })
            .collect();
        given += 1;
    }
    given
}

/// [`apply_defaults`] with each controller's selector looked up in `controllers` (a
/// snapshot's or a watched view's).
pub fn apply_defaults_from(
    pods: &mut [Pod],
    config: &SchedulerConfig,
    services: &[Service],
    controllers: &[crate::cluster::ControllerSelector],
) -> usize {
    apply_defaults(pods, config, services, &|ns, controller| {
        owner_selector_in(controllers, ns, controller)
    })
}

/// kube-scheduler's default selector for a pod with `labels`: the selectors of the
/// Services that select it merged (a later one wins a key), then its controller's;
/// `None` when that adds up to nothing.
fn default_selector(
    labels: &BTreeMap<String, String>,
    services: &[&BTreeMap<String, String>],
    owner: Option<OwnerSelector>,
) -> Option<LabelSelector> {
    let mut match_labels = BTreeMap::new();
    for selector in services {
        if selector.iter().all(|(k, v)| labels.get(k) == Some(v)) {
            match_labels.extend(selector.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
    }
    let mut match_expressions = Vec::new();
    match owner {
        Some(OwnerSelector::Labels(rc)) => match_labels.extend(rc),
        Some(OwnerSelector::Requirements(reqs)) => match_expressions = reqs,
        None => {}
    }
    (!match_labels.is_empty() || !match_expressions.is_empty()).then_some(LabelSelector {
        match_labels,
        match_expressions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::LabelSelectorOperator;
    use crate::testing::pod;

    const ZONE: &str = "topology.kubernetes.io/zone";

    fn config() -> SchedulerConfig {
        SchedulerConfig::parse(
            "podTopologySpread:\n  defaultConstraints:\n    - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway}\n    - {maxSkew: 3, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, minDomains: 2}\n",
        )
        .unwrap()
    }

    fn labelled(name: &str, labels: &[(&str, &str)]) -> Pod {
        let mut p = pod(name, "1", "1Gi");
        p.labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        p
    }

    fn service(name: &str, selector: Option<&[(&str, &str)]>) -> Service {
        Service {
            namespace: "default".into(),
            name: name.into(),
            selector: selector.map(|s| {
                s.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            }),
        }
    }

    fn replica_set(name: &str) -> ControllerRef {
        ControllerRef {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: name.into(),
        }
    }

    fn in_values(key: &str, value: &str) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: LabelSelectorOperator::In,
            values: vec![value.into()],
        }
    }

    #[test]
    fn a_configuration_reads_as_kube_schedulers_plugin_arguments() {
        let c = config();
        assert_eq!(c.default_constraints.len(), 2);
        assert_eq!(c.default_constraints[0].topology_key, ZONE);
        assert_eq!(
            c.default_constraints[0].when_unsatisfiable,
            WhenUnsatisfiable::ScheduleAnyway
        );
        assert_eq!(c.default_constraints[1].min_domains, Some(2));
        assert!(c.default_constraints[1].honor_node_affinity);
        assert!(!c.default_constraints[1].honor_node_taints);
        // JSON too, and nothing at all.
        let json = SchedulerConfig::parse(
            r#"{"podTopologySpread": {"defaultConstraints": [{"maxSkew": 5, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"}]}}"#,
        )
        .unwrap();
        assert_eq!(json.default_constraints[0].max_skew, 5);
        assert!(SchedulerConfig::parse("").unwrap().is_empty());
        assert!(SchedulerConfig::parse("{}").unwrap().is_empty());
    }

    #[test]
    fn each_problem_of_a_configuration_names_its_field() {
        let problems = SchedulerConfig::parse(
            "podTopologySpread:\n  defaultConstraints:\n    - {maxSkew: 0, topologyKey: '', whenUnsatisfiable: Maybe}\n    - {maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {a: b}}, matchLabelKeys: [x]}\n    - {maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}\n    - {maxSkew: 1, topologyKey: 'Bad_Prefix/x', whenUnsatisfiable: DoNotSchedule, nodeTaintsPolicy: Sometimes}\n",
        )
        .unwrap_err();
        let expect = [
            "podTopologySpread.defaultConstraints[0].maxSkew: 0 is not an integer greater than 0",
            "podTopologySpread.defaultConstraints[0].topologyKey: \"\" is empty",
            "podTopologySpread.defaultConstraints[0].whenUnsatisfiable: \"Maybe\" is not DoNotSchedule or ScheduleAnyway",
            "podTopologySpread.defaultConstraints[1].labelSelector: not allowed",
            "podTopologySpread.defaultConstraints[1].matchLabelKeys: not allowed",
            "podTopologySpread.defaultConstraints[2]: a second constraint on topologyKey \"zone\" with whenUnsatisfiable DoNotSchedule",
            "podTopologySpread.defaultConstraints[3].topologyKey: \"Bad_Prefix/x\" has a prefix that is not a DNS subdomain",
            "podTopologySpread.defaultConstraints[3].nodeTaintsPolicy: \"Sometimes\" is not Honor or Ignore",
        ];
        assert_eq!(problems.len(), expect.len(), "{problems:#?}");
        for (got, want) in problems.iter().zip(expect) {
            assert!(
                got.starts_with(want),
                "{got:?} does not start with {want:?}"
            );
        }
        let unknown =
            SchedulerConfig::parse("podTopologySpread:\n  defaultConstraint: []\n").unwrap_err();
        assert!(
            unknown[0].starts_with("podTopologySpread: unknown field `defaultConstraint`"),
            "{unknown:?}"
        );
        let wrong_type = SchedulerConfig::parse(
            "podTopologySpread:\n  defaultConstraints:\n    - {maxSkew: many}\n",
        )
        .unwrap_err();
        assert!(
            wrong_type[0].contains("defaultConstraints[0].maxSkew"),
            "{wrong_type:?}"
        );
    }

    #[test]
    fn a_pod_gets_the_defaults_with_its_services_and_controllers_selector() {
        let mut pods = vec![labelled(
            "web-1",
            &[
                ("app", "web"),
                ("tier", "front"),
                ("pod-template-hash", "abc"),
            ],
        )];
        pods[0].controller = Some(replica_set("web-abc").into());
        let services = [
            service("web", Some(&[("app", "web")])),
            service("front", Some(&[("tier", "front")])),
            service("api", Some(&[("app", "api")])),
            service("headless", None),
            Service {
                namespace: "other".into(),
                ..service("elsewhere", Some(&[("app", "web"), ("zone", "x")]))
            },
        ];
        let given = apply_defaults(&mut pods, &config(), &services, &|ns, owner| {
            assert_eq!((ns, owner.name.as_str()), ("default", "web-abc"));
            Some(OwnerSelector::Requirements(vec![
                in_values("app", "web"),
                in_values("pod-template-hash", "abc"),
            ]))
        });
        assert_eq!(given, 1);
        let spread = &pods[0].topology_spread;
        assert_eq!(spread.len(), 2);
        let selector = spread[0].label_selector.as_ref().unwrap();
        assert_eq!(
            selector.match_labels,
            BTreeMap::from([
                ("app".to_string(), "web".to_string()),
                ("tier".to_string(), "front".to_string())
            ])
        );
        assert_eq!(
            selector.match_expressions,
            vec![
                in_values("app", "web"),
                in_values("pod-template-hash", "abc")
            ]
        );
        assert_eq!(spread[1].label_selector.as_ref(), Some(selector));
        assert_eq!(spread[1].max_skew, 3);
    }

    #[test]
    fn a_replica_sets_pods_given_a_zonal_default_are_planned_across_the_zones() {
        use crate::catalog::Catalog;
        use crate::cluster::ClusterSnapshot;
        use crate::pricing::Pricing;
        use crate::provisioning::{ProvisioningInput, plan_provisioning};
        use crate::well_known::LABEL_ZONE;
        // Three pods of 3 CPU: without a spread they share one or two nodes.
        let replicas = || -> Vec<Pod> {
            (0..3)
                .map(|i| {
                    let mut p = pod(&format!("web-{i}"), "3", "4Gi");
                    p.labels = BTreeMap::from([("app".to_string(), "web".to_string())]).into();
                    p.controller = Some(replica_set("web-abc").into());
                    p
                })
                .collect()
        };
        let zones_planned = |pods: Vec<Pod>| -> Vec<String> {
            let snapshot = ClusterSnapshot {
                pods,
                ..Default::default()
            };
            let plan = plan_provisioning(&ProvisioningInput {
                snapshot: &snapshot,
                node_pools: &[crate::testing::general_purpose_pool()],
                node_classes: &[],
                catalog: Catalog::embedded(),
                pricing: &Pricing::default(),
                in_flight: &[],
            });
            assert!(plan.unschedulable.is_empty(), "{plan:#?}");
            let mut zones: Vec<String> = plan.node_claims.iter().map(|c| c.zone.clone()).collect();
            zones.sort();
            zones
        };
        let mut alone = zones_planned(replicas());
        alone.dedup();
        assert!(alone.len() < 3, "spread without a constraint: {alone:?}");

        let zonal = SchedulerConfig::parse(
            "podTopologySpread:\n  defaultConstraints:\n    - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule}\n",
        )
        .unwrap();
        let mut spread = replicas();
        let owner = |_: &str, _: &ControllerRef| {
            Some(OwnerSelector::Requirements(vec![in_values("app", "web")]))
        };
        assert_eq!(apply_defaults(&mut spread, &zonal, &[], &owner), 3);
        assert_eq!(spread[0].topology_spread[0].topology_key, LABEL_ZONE);
        assert_eq!(
            zones_planned(spread),
            ["us-east-1a", "us-east-1b", "us-east-1c"]
        );
    }

    #[test]
    fn a_replication_controllers_selector_overwrites_a_services_labels() {
        let mut pods = vec![labelled("rc-1", &[("app", "web"), ("v", "2")])];
        pods[0].controller = Some(std::sync::Arc::new(ControllerRef {
            api_version: "v1".into(),
            kind: "ReplicationController".into(),
            name: "rc".into(),
        }));
        let services = [service("web", Some(&[("app", "web")]))];
        apply_defaults(&mut pods, &config(), &services, &|_, _| {
            Some(OwnerSelector::Labels(BTreeMap::from([
                ("app".to_string(), "legacy".to_string()),
                ("v".to_string(), "2".to_string()),
            ])))
        });
        let selector = pods[0].topology_spread[0].label_selector.clone().unwrap();
        assert_eq!(selector.match_labels["app"], "legacy");
        assert_eq!(selector.match_labels["v"], "2");
    }

    #[test]
    fn own_constraints_other_owners_and_nothing_deduced_leave_a_pod_as_it_is() {
        let mut own = labelled("own", &[("app", "web")]);
        own.topology_spread = vec![config().default_constraints[1].clone()].into();
        let before = own.topology_spread.clone();
        let mut job = labelled("job", &[("batch", "x")]);
        job.controller = Some(std::sync::Arc::new(ControllerRef {
            api_version: "batch/v1".into(),
            kind: "Job".into(),
            name: "x".into(),
        }));
        let mut gone = labelled("gone", &[("other", "y")]);
        gone.controller = Some(replica_set("deleted").into());
        let mut pods = vec![own, job, gone];
        let services = [
            service("web", Some(&[("app", "web")])),
            service("all", Some(&[])),
        ];
        let asked = std::cell::Cell::new(0);
        let given = apply_defaults(&mut pods, &config(), &services, &|_, owner| {
            asked.set(asked.get() + 1);
            assert_eq!(owner.name, "deleted", "a Job's selector is never asked for");
            None
        });
        assert_eq!(given, 0, "{pods:#?}");
        assert_eq!(pods[0].topology_spread, before);
        assert!(pods[1].topology_spread.is_empty());
        assert!(pods[2].topology_spread.is_empty());
        assert_eq!(asked.get(), 1);
        // Without a configuration nothing is read at all.
        let mut web = vec![labelled("web", &[("app", "web")])];
        assert_eq!(
            apply_defaults(&mut web, &SchedulerConfig::default(), &services, &|_, _| {
                None
            }),
            0
        );
        assert!(web[0].topology_spread.is_empty());
    }
}
