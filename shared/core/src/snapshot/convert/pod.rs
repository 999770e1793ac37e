//! Pods, and DaemonSets' pod templates (a DaemonSet is read as the pod it would create):
//! requests as kube-scheduler counts them, node selection, tolerations, host ports,
//! topology spread and pod (anti-)affinity.

use crate::well_known::LABEL_HOSTNAME;
use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::core::v1 as core;

use super::{
    do_not_disrupt, do_not_disrupt_duration, label_selector, namespace_or_default,
    node_requirement, pod_deletion_cost, quantity, taint_effect, unix,
};
use crate::api::model::{NodeRequirement, Operator};
use crate::cluster::{
    DaemonSet, HostPort, LabelSelectorOperator, LabelSelectorRequirement, Pod, PodAffinityTerm,
    PodFields, PreferredNodeTerm, Toleration, TolerationOperator, TopologySpreadConstraint,
    WeightedPodAffinityTerm, WhenUnsatisfiable,
};
use crate::resources::Resources;
use crate::snapshot::error::{ContainerRef, Result, SnapshotError};
use crate::volumes::PodClaim;

const TOLERATION_OPERATORS: &str = "Equal, Exists";

/// Where a pod spec lives, for messages: a pod's own, or a DaemonSet's template.
struct PodCtx<'a> {
    /// `pod "default/web-1"` or `DaemonSet "kube-system/aws-node"`.
    object: String,
    /// `spec` or `spec.template.spec`.
    spec_path: &'static str,
    namespace: &'a str,
    labels: &'a BTreeMap<String, String>,
}

/// Converts a Kubernetes pod to the scheduling view.
///
/// Requests follow kube-scheduler (`k8s.io/component-helpers/resource.PodRequests`):
/// the sum of the regular containers and of the sidecars (init containers with
/// `restartPolicy: Always`), at least the largest of each classic init container plus
/// the sidecars started before it, then pod-level `spec.resources` (cpu, memory,
/// hugepages) override the aggregate where set, then `spec.overhead` is added, then one
/// pod slot. A container with limits but no request for a resource requests its limit,
/// as the API server's defaulting does. Not modelled: in-place resize (the scheduler
/// uses max(spec, allocated) while a resize is pending; we use the spec) and ephemeral
/// containers (they request nothing).
///
/// Required node affinity `matchFields` on `metadata.name` (how DaemonSet pods are pinned)
/// become requirements on [`LABEL_HOSTNAME`]: on EKS a node's hostname label is its name,
/// and a new node can never satisfy it, which is right for a pod pinned to one node.
/// Pod (anti-)affinity terms with no `namespaces` get the pod's namespace filled in;
/// `namespaceSelector` is not supported and is ignored (see [`PodAffinityTerm`]).
/// `matchLabelKeys`/`mismatchLabelKeys` are merged into the selectors from the pod's
/// labels, as the scheduler does. `nodeAffinityPolicy`/`nodeTaintsPolicy` of spread
/// constraints are not represented (Kubernetes' defaults, Honor/Ignore, are assumed).
pub fn pod_from_k8s(pod: &core::Pod) -> Result<Pod, SnapshotError> {
    let namespace = namespace_or_default(&pod.metadata);
    let name = pod.metadata.name.clone().unwrap_or_default();
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let ctx = PodCtx {
        object: format!("pod \"{namespace}/{name}\""),
        spec_path: "spec",
        namespace: &namespace,
        labels: &labels,
    };
    let default_spec = core::PodSpec::default();
    let spec = pod.spec.as_ref().unwrap_or(&default_spec);
    let mut out = convert_pod_spec(&ctx, spec)?;
    out.owner_daemonset = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.kind == "DaemonSet")
        .map(|o| o.name.clone());
    out.daemonset_owned = out.owner_daemonset.is_some();
    out.controller = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| {
            std::sync::Arc::new(crate::cluster::ControllerRef {
                api_version: o.api_version.clone(),
                kind: o.kind.clone(),
                name: o.name.clone(),
            })
        });
    // A static pod's mirror: the kubelet owns it and recreates it on its node.
    let annotations = pod.metadata.annotations.as_ref();
    out.mirror = annotations.is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"));
    out.do_not_disrupt = annotations.is_some_and(do_not_disrupt);
    match annotations.and_then(do_not_disrupt_duration) {
        Some(Ok(secs)) => out.do_not_disrupt_for = Some(secs),
        Some(Err(invalid)) => out.do_not_disrupt_invalid = Some(invalid),
        None => {}
    }
    out.deletion_cost = annotations.and_then(pod_deletion_cost);
    out.priority = spec.priority;
    out.created_at = pod.metadata.creation_timestamp.as_ref().map(unix);
    out.started_at = pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map(unix);
    // Pods for kube-scheduler may spell it out or leave it to the API server's default.
    out.scheduler_name = spec
        .scheduler_name
        .clone()
        .filter(|s| !s.is_empty() && s != "default-scheduler");
    let status = pod.status.as_ref();
    out.nominated_node_name = status
        .and_then(|s| s.nominated_node_name.clone())
        .filter(|n| !n.is_empty());
    out.marked_unschedulable = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| {
            c.type_ == "PodScheduled"
                && c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
        });
    for v in spec.volumes.iter().flatten() {
        let claim = if let Some(pvc) = &v.persistent_volume_claim {
            pvc.claim_name.clone()
        } else if v.ephemeral.is_some() {
            // The ephemeral volume controller names the claim it creates so.
            format!("{name}-{}", v.name)
        } else {
            continue;
        };
        out.claims.push(PodClaim {
            volume: v.name.clone(),
            claim,
        });
    }
    out.terminal = matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    );
    out.node_name = spec.node_name.clone().filter(|n| !n.is_empty());
    out.termination_grace_period_seconds = spec.termination_grace_period_seconds;
    out.terminating = pod.metadata.deletion_timestamp.is_some();
    out.deletion_at = pod.metadata.deletion_timestamp.as_ref().map(unix);
    out.namespace = namespace;
    out.name = name;
    out.labels = labels.into();
    Ok(out)
}

/// Everything that comes from the pod spec (shared by pods and DaemonSet templates).
fn convert_pod_spec(ctx: &PodCtx<'_>, spec: &core::PodSpec) -> Result<Pod> {
    let sp = ctx.spec_path;
    let mut pod = Pod::from(PodFields {
        requests: pod_requests(ctx, spec)?,
        node_selector: spec.node_selector.clone().unwrap_or_default().into(),
        critical: matches!(
            spec.priority_class_name.as_deref(),
            Some("system-cluster-critical" | "system-node-critical")
        ),
        ..PodFields::default()
    });

    for (i, t) in spec.tolerations.iter().flatten().enumerate() {
        pod.tolerations
            .push(toleration(ctx, &format!("{sp}.tolerations[{i}]"), t)?);
    }

    pod.host_ports = host_ports(ctx, spec)?.into();

    for (i, c) in spec
        .topology_spread_constraints
        .iter()
        .flatten()
        .enumerate()
    {
        let path = format!("{sp}.topologySpreadConstraints[{i}]");
        pod.topology_spread.push(spread_constraint(ctx, &path, c)?);
    }

    let Some(affinity) = &spec.affinity else {
        return Ok(pod);
    };
    if let Some(na) = &affinity.node_affinity {
        let base = format!("{sp}.affinity.nodeAffinity");
        if let Some(required) = &na.required_during_scheduling_ignored_during_execution {
            let mut any_term = false;
            for (i, term) in required.node_selector_terms.iter().enumerate() {
                any_term = true;
                let path = format!(
                    "{base}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}]"
                );
                let reqs = node_selector_term(ctx, &path, term)?;
                // An empty term matches no node; as one of ORed terms it adds nothing.
                if !reqs.is_empty() {
                    pod.required_node_terms.push(reqs);
                }
            }
            if any_term && pod.required_node_terms.is_empty() {
                // Only empty terms: the pod fits no node. `In` with no values is a
                // requirement no node satisfies, so consumers need no special case.
                pod.required_node_terms.push(vec![NodeRequirement {
                    key: LABEL_HOSTNAME.to_string(),
                    operator: Operator::In,
                    values: Vec::new(),
                    min_values: None,
                }]);
            }
        }
        for (i, pref) in na
            .preferred_during_scheduling_ignored_during_execution
            .iter()
            .flatten()
            .enumerate()
        {
            let path = format!("{base}.preferredDuringSchedulingIgnoredDuringExecution[{i}]");
            let requirements =
                node_selector_term(ctx, &format!("{path}.preference"), &pref.preference)?;
            // An empty preference matches no node and so never adds to a score.
            if !requirements.is_empty() {
                pod.preferred_node_terms.push(PreferredNodeTerm {
                    weight: pref.weight,
                    requirements,
                });
            }
        }
    }
    if let Some(pa) = &affinity.pod_affinity {
        let base = format!("{sp}.affinity.podAffinity");
        let (required, preferred) = pod_affinity_terms(
            ctx,
            &base,
            pa.required_during_scheduling_ignored_during_execution
                .as_deref(),
            pa.preferred_during_scheduling_ignored_during_execution
                .as_deref(),
        )?;
        (pod.pod_affinity, pod.preferred_pod_affinity) = (required.into(), preferred.into());
    }
    if let Some(paa) = &affinity.pod_anti_affinity {
        let base = format!("{sp}.affinity.podAntiAffinity");
        let (required, preferred) = pod_affinity_terms(
            ctx,
            &base,
            paa.required_during_scheduling_ignored_during_execution
                .as_deref(),
            paa.preferred_during_scheduling_ignored_during_execution
                .as_deref(),
        )?;
        (pod.pod_anti_affinity, pod.preferred_pod_anti_affinity) =
            (required.into(), preferred.into());
    }
    Ok(pod)
}

/// The host ports a pod binds, as kube-scheduler's NodePorts filter counts them
/// (`GetHostPorts`): every container's, and the sidecars' (init containers with
/// `restartPolicy: Always`, which run for the pod's whole life) — classic init
/// containers have exited before the others start. Protocol defaults to TCP, as the API
/// server's defaulting does; an empty host IP binds every address.
fn host_ports(ctx: &PodCtx<'_>, spec: &core::PodSpec) -> Result<Vec<HostPort>> {
    let sp = ctx.spec_path;
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .enumerate()
        .filter(|(_, c)| c.restart_policy.as_deref() == Some("Always"))
        .map(|(i, c)| (format!("{sp}.initContainers[{i}]"), c));
    let containers = spec
        .containers
        .iter()
        .enumerate()
        .map(|(i, c)| (format!("{sp}.containers[{i}]"), c));
    let mut out = Vec::new();
    for (path, c) in sidecars.chain(containers) {
        for (j, p) in c.ports.iter().flatten().enumerate() {
            let Some(port) = p.host_port.filter(|&port| port > 0) else {
                continue;
            };
            let port = u16::try_from(port).map_err(|_| SnapshotError::InvalidValue {
                object: ctx.object.clone(),
                path: format!("{path}.ports[{j}].hostPort"),
                value: port.to_string(),
                expected: "a port number from 1 to 65535".to_string(),
            })?;
            out.push(HostPort {
                port,
                protocol: p
                    .protocol
                    .clone()
                    .filter(|proto| !proto.is_empty())
                    .unwrap_or_else(|| "TCP".to_string()),
                host_ip: p.host_ip.clone().unwrap_or_default(),
            });
        }
    }
    Ok(out)
}

/// The effective requests of a pod; see [`pod_from_k8s`] for the rule.
fn pod_requests(ctx: &PodCtx<'_>, spec: &core::PodSpec) -> Result<Resources> {
    let object = &ctx.object;
    let mut total = Resources::new();
    for c in &spec.containers {
        let r = container_requests(object, c, false)?;
        total.add(&r);
    }
    // Sidecars run for the pod's whole life, so they add to the sum; a classic init
    // container runs alone except for the sidecars started before it.
    let mut sidecars = Resources::new();
    let mut init_peak = Resources::new();
    for c in spec.init_containers.iter().flatten() {
        let r = container_requests(object, c, true)?;
        if c.restart_policy.as_deref() == Some("Always") {
            total.add(&r);
            sidecars.add(&r);
            init_peak.max_with(&sidecars);
        } else {
            let mut running = r;
            running.add(&sidecars);
            init_peak.max_with(&running);
        }
    }
    total.max_with(&init_peak);

    // Pod-level resources (PodLevelResources): cpu, memory and hugepages only; they
    // replace the container aggregate. Limits without requests default the requests.
    if let Some(pod_resources) = &spec.resources {
        let requests = pod_resources.requests.as_ref();
        let limits = pod_resources.limits.as_ref();
        let names = requests
            .into_iter()
            .flatten()
            .chain(limits.into_iter().flatten());
        let mut pod_level = BTreeMap::new();
        for (name, _) in names {
            if !(name == "cpu" || name == "memory" || name.starts_with("hugepages-")) {
                continue;
            }
            if pod_level.contains_key(name) {
                continue;
            }
            let (field, q) = match requests.and_then(|m| m.get(name)) {
                Some(q) => ("requests", q),
                None => match limits.and_then(|m| m.get(name)) {
                    Some(q) => ("limits", q),
                    None => continue,
                },
            };
            let path = format!("{}.resources.{field}.{name}", ctx.spec_path);
            pod_level.insert(name.clone(), quantity(object, None, path, q)?);
        }
        for (name, milli) in pod_level {
            total.set_milli(&name, milli);
        }
    }

    let mut overhead = Resources::new();
    for (name, q) in spec.overhead.iter().flatten() {
        let path = format!("{}.overhead.{name}", ctx.spec_path);
        overhead.set_milli(name, quantity(object, None, path, q)?);
    }
    total.add(&overhead);
    total.add(&Resources::one_pod());
    Ok(total)
}

/// A container's requests, with limits standing in for missing requests.
fn container_requests(object: &str, c: &core::Container, init: bool) -> Result<Resources> {
    let cref = ContainerRef {
        name: c.name.clone(),
        init,
    };
    let mut out = Resources::new();
    let Some(res) = &c.resources else {
        return Ok(out);
    };
    let requests = res.requests.as_ref();
    for (name, q) in requests.into_iter().flatten() {
        let path = format!("resources.requests.{name}");
        out.set_milli(name, quantity(object, Some(&cref), path, q)?);
    }
    for (name, q) in res.limits.iter().flatten() {
        // Every limit is checked, even one shadowed by a request: the API server would
        // not have admitted the pod with a malformed one.
        let path = format!("resources.limits.{name}");
        let milli = quantity(object, Some(&cref), path, q)?;
        if !requests.is_some_and(|r| r.contains_key(name)) {
            out.set_milli(name, milli);
        }
    }
    Ok(out)
}

fn node_selector_term(
    ctx: &PodCtx<'_>,
    path: &str,
    term: &core::NodeSelectorTerm,
) -> Result<Vec<NodeRequirement>> {
    let mut out = Vec::new();
    for (i, r) in term.match_expressions.iter().flatten().enumerate() {
        out.push(node_requirement(
            &ctx.object,
            &format!("{path}.matchExpressions[{i}]"),
            r,
            &r.key,
        )?);
    }
    for (i, r) in term.match_fields.iter().flatten().enumerate() {
        let p = format!("{path}.matchFields[{i}]");
        if r.key != "metadata.name" {
            return Err(SnapshotError::InvalidValue {
                object: ctx.object.clone(),
                path: format!("{p}.key"),
                value: r.key.clone(),
                expected: "\"metadata.name\", the only field node selectors support".to_string(),
            });
        }
        out.push(node_requirement(&ctx.object, &p, r, LABEL_HOSTNAME)?);
    }
    Ok(out)
}

fn toleration(ctx: &PodCtx<'_>, path: &str, t: &core::Toleration) -> Result<Toleration> {
    let operator = match t.operator.as_deref() {
        None | Some("") | Some("Equal") => TolerationOperator::Equal,
        Some("Exists") => TolerationOperator::Exists,
        Some(other) => {
            return Err(SnapshotError::UnknownOperator {
                object: ctx.object.clone(),
                path: format!("{path}.operator"),
                operator: other.to_string(),
                expected: TOLERATION_OPERATORS,
            });
        }
    };
    let effect = match t.effect.as_deref() {
        None | Some("") => None,
        Some(e) => Some(taint_effect(&ctx.object, &format!("{path}.effect"), e)?),
    };
    Ok(Toleration {
        key: t.key.clone().unwrap_or_default(),
        operator,
        value: t.value.clone().unwrap_or_default(),
        effect,
    })
}

fn spread_constraint(
    ctx: &PodCtx<'_>,
    path: &str,
    c: &core::TopologySpreadConstraint,
) -> Result<TopologySpreadConstraint> {
    let invalid = |field: &str, value: String, expected: &str| SnapshotError::InvalidValue {
        object: ctx.object.clone(),
        path: format!("{path}.{field}"),
        value,
        expected: expected.to_string(),
    };
    let max_skew = u32::try_from(c.max_skew)
        .ok()
        .filter(|s| *s > 0)
        .ok_or_else(|| {
            invalid(
                "maxSkew",
                c.max_skew.to_string(),
                "an integer greater than 0",
            )
        })?;
    let when_unsatisfiable = match c.when_unsatisfiable.as_str() {
        "DoNotSchedule" => WhenUnsatisfiable::DoNotSchedule,
        "ScheduleAnyway" => WhenUnsatisfiable::ScheduleAnyway,
        other => {
            return Err(invalid(
                "whenUnsatisfiable",
                other.to_string(),
                "one of DoNotSchedule, ScheduleAnyway",
            ));
        }
    };
    let min_domains =
        match c.min_domains {
            None => None,
            Some(m) => Some(u32::try_from(m).ok().filter(|m| *m > 0).ok_or_else(|| {
                invalid("minDomains", m.to_string(), "an integer greater than 0")
            })?),
        };
    let mut label_selector = match &c.label_selector {
        Some(s) => Some(label_selector(
            &ctx.object,
            &format!("{path}.labelSelector"),
            s,
        )?),
        None => None,
    };
    // matchLabelKeys: the pod's values for these keys narrow the selector to its own
    // revision (the scheduler merges them; from 1.34 the API server does it on create).
    if let Some(sel) = &mut label_selector {
        for key in c.match_label_keys.iter().flatten() {
            if let Some(v) = ctx.labels.get(key) {
                sel.match_expressions.push(LabelSelectorRequirement {
                    key: key.clone(),
                    operator: LabelSelectorOperator::In,
                    values: vec![v.clone()],
                });
            }
        }
    }
    let honor = |field: &str, value: &Option<String>, default: bool| match value.as_deref() {
        None => Ok(default),
        Some("Honor") => Ok(true),
        Some("Ignore") => Ok(false),
        Some(other) => Err(invalid(field, other.to_string(), "one of Honor, Ignore")),
    };
    Ok(TopologySpreadConstraint {
        max_skew,
        topology_key: c.topology_key.clone(),
        when_unsatisfiable,
        label_selector,
        min_domains,
        honor_node_affinity: honor("nodeAffinityPolicy", &c.node_affinity_policy, true)?,
        honor_node_taints: honor("nodeTaintsPolicy", &c.node_taints_policy, false)?,
    })
}

type AffinityTerms = (Vec<PodAffinityTerm>, Vec<WeightedPodAffinityTerm>);

fn pod_affinity_terms(
    ctx: &PodCtx<'_>,
    base: &str,
    required: Option<&[core::PodAffinityTerm]>,
    preferred: Option<&[core::WeightedPodAffinityTerm]>,
) -> Result<AffinityTerms> {
    let mut req = Vec::new();
    for (i, t) in required.into_iter().flatten().enumerate() {
        let path = format!("{base}.requiredDuringSchedulingIgnoredDuringExecution[{i}]");
        req.push(pod_affinity_term(ctx, &path, t)?);
    }
    let mut pref = Vec::new();
    for (i, w) in preferred.into_iter().flatten().enumerate() {
        let path =
            format!("{base}.preferredDuringSchedulingIgnoredDuringExecution[{i}].podAffinityTerm");
        pref.push(WeightedPodAffinityTerm {
            weight: w.weight,
            term: pod_affinity_term(ctx, &path, &w.pod_affinity_term)?,
        });
    }
    Ok((req, pref))
}

fn pod_affinity_term(
    ctx: &PodCtx<'_>,
    path: &str,
    t: &core::PodAffinityTerm,
) -> Result<PodAffinityTerm> {
    let mut selector = match &t.label_selector {
        Some(s) => Some(label_selector(
            &ctx.object,
            &format!("{path}.labelSelector"),
            s,
        )?),
        None => None,
    };
    if let Some(sel) = &mut selector {
        for key in t.match_label_keys.iter().flatten() {
            if let Some(v) = ctx.labels.get(key) {
                sel.match_expressions.push(LabelSelectorRequirement {
                    key: key.clone(),
                    operator: LabelSelectorOperator::In,
                    values: vec![v.clone()],
                });
            }
        }
        for key in t.mismatch_label_keys.iter().flatten() {
            if let Some(v) = ctx.labels.get(key) {
                sel.match_expressions.push(LabelSelectorRequirement {
                    key: key.clone(),
                    operator: LabelSelectorOperator::NotIn,
                    values: vec![v.clone()],
                });
            }
        }
    }
    let mut namespaces = t.namespaces.clone().unwrap_or_default();
    if namespaces.is_empty() {
        // Kubernetes reads "no namespaces" as the pod's own; filling it in here means no
        // consumer can forget to.
        namespaces.push(ctx.namespace.to_string());
    }
    Ok(PodAffinityTerm {
        label_selector: selector,
        topology_key: t.topology_key.clone(),
        namespaces,
    })
}

/// Converts a DaemonSet: its pod template as a pod named and namespaced as the
/// DaemonSet, with `daemonset_owned` set (the pods it creates are), so it is never
/// pending itself. Errors name the DaemonSet and paths under `spec.template.spec`.
pub fn daemonset_from_k8s(ds: &apps::DaemonSet) -> Result<DaemonSet, SnapshotError> {
    let namespace = namespace_or_default(&ds.metadata);
    let name = ds.metadata.name.clone().unwrap_or_default();
    let default_spec = core::PodSpec::default();
    let template = ds.spec.as_ref().map(|s| &s.template);
    let spec = template
        .and_then(|t| t.spec.as_ref())
        .unwrap_or(&default_spec);
    let labels = template
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let ctx = PodCtx {
        object: format!("DaemonSet \"{namespace}/{name}\""),
        spec_path: "spec.template.spec",
        namespace: &namespace,
        labels: &labels,
    };
    let mut pod = convert_pod_spec(&ctx, spec)?;
    pod.namespace = namespace.clone();
    pod.name = name.clone();
    pod.labels = labels.into();
    pod.daemonset_owned = true;
    Ok(DaemonSet {
        namespace,
        name,
        template: pod,
    })
}
