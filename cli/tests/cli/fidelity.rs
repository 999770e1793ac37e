//! Scheduling fidelity through `nodewright plan`: each constraint read as kube-scheduler
//! and Karpenter read it. Snapshots are built here as `kubectl get -o json` would print
//! them, NodePools as users write them.

use serde_json::{Value, json};

use super::temp_file;

/// The general-purpose NodePool; [`general_purpose`] adds its EC2NodeClass.
const GENERAL_PURPOSE_POOL: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: general-purpose
spec:
  template:
    spec:
      requirements:
        - key: kubernetes.io/arch
          operator: In
          values: ["amd64"]
        - key: karpenter.sh/capacity-type
          operator: In
          values: ["on-demand"]
        - key: karpenter.k8s.aws/instance-category
          operator: In
          values: ["c", "m", "r"]
        - key: karpenter.k8s.aws/instance-generation
          operator: Gt
          values: ["2"]
      nodeClassRef:
        group: karpenter.k8s.aws
        kind: EC2NodeClass
        name: default
"#;

/// The general-purpose NodePool and its EC2NodeClass.
fn general_purpose() -> String {
    format!(
        "{GENERAL_PURPOSE_POOL}---\n{}",
        crate::manifests::node_class()
    )
}

/// The general-purpose NodePool with one more requirement.
fn general_purpose_with(requirement: &str) -> String {
    general_purpose().replace(
        "      requirements:\n",
        &format!("      requirements:\n{requirement}"),
    )
}

/// `nodewright plan --output json` on these NodePools and snapshot items.
fn plan(pools: &str, items: Vec<Value>) -> Value {
    let pools = temp_file("pools.yaml", pools).display().to_string();
    super::plan_json(&[
        "--nodepools",
        &pools,
        "--snapshot",
        &super::snapshot_file(items),
    ])
}

/// A pending pod kube-scheduler found no node for.
fn pod(name: &str, cpu: &str, memory: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": name}},
        "spec": {"containers": [{"name": "c", "image": "pause",
            "resources": {"requests": {"cpu": cpu, "memory": memory}}}]},
        "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    })
}

fn with_app(mut pod: Value, app: &str) -> Value {
    pod["metadata"]["labels"]["app"] = json!(app);
    pod
}

fn with_host_port(mut pod: Value, port: u16) -> Value {
    pod["spec"]["containers"][0]["ports"] = json!([{"containerPort": port, "hostPort": port}]);
    pod
}

fn bound_to(mut pod: Value, node: &str) -> Value {
    pod["spec"]["nodeName"] = json!(node);
    pod["status"] = json!({"phase": "Running"});
    pod
}

fn with_affinity(mut pod: Value, kind: &str, required: bool, key: &str, app: &str) -> Value {
    let term = json!({"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key});
    let terms = if required {
        json!({"requiredDuringSchedulingIgnoredDuringExecution": [term]})
    } else {
        json!({"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": term}]})
    };
    pod["spec"]["affinity"][kind] = terms;
    pod
}

fn with_zone_spread(mut pod: Value, key: &str, app: &str) -> Value {
    pod["spec"]["topologySpreadConstraints"] = json!([{
        "maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": app}}}]);
    pod
}

fn node(name: &str, zone: &str, cpu: &str, memory: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name,
            "topology.kubernetes.io/zone": zone,
            "node.kubernetes.io/instance-type": "m5.xlarge",
            "kubernetes.io/arch": "amd64",
            "karpenter.sh/capacity-type": "on-demand"}},
        "spec": {},
        "status": {
            "allocatable": {"cpu": cpu, "memory": memory, "pods": "58"},
            "capacity": {"cpu": cpu, "memory": memory, "pods": "58"},
            "conditions": [{"type": "Ready", "status": "True"}]}
    })
}

fn daemonset(name: &str, cpu: &str, spec_extra: Value) -> Value {
    let mut pod_spec = json!({"containers": [{"name": "c", "image": "agent",
        "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]});
    if let Value::Object(extra) = spec_extra {
        for (k, v) in extra {
            if k == "ports" {
                pod_spec["containers"][0]["ports"] = v;
            } else {
                pod_spec[k] = v;
            }
        }
    }
    json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {"selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec}}
    })
}

/// The plan without the long option lists, for assertion messages.
fn summary(plan: &Value) -> String {
    let mut short = plan.clone();
    for c in short["nodeClaims"].as_array_mut().into_iter().flatten() {
        c.as_object_mut().map(|o| o.remove("instanceTypeOptions"));
    }
    short.to_string()
}

fn claims(plan: &Value) -> &Vec<Value> {
    plan["nodeClaims"].as_array().expect("nodeClaims")
}

fn unschedulable(plan: &Value) -> Vec<(String, String)> {
    plan["unschedulable"]
        .as_array()
        .expect("unschedulable")
        .iter()
        .map(|u| {
            (
                u["pod"].as_str().unwrap().to_string(),
                u["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn pods_of(claim: &Value) -> Vec<String> {
    claim["pods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect()
}

fn claim_holding<'p>(plan: &'p Value, pod: &str) -> &'p Value {
    claims(plan)
        .iter()
        .find(|c| pods_of(c).iter().any(|p| p == pod))
        .unwrap_or_else(|| panic!("no claim holds {pod}: {}", summary(plan)))
}

// ----- host ports --------------------------------------------------------------------

#[test]
fn pods_binding_the_same_host_port_never_share_a_node() {
    let plan = plan(
        &general_purpose(),
        vec![
            with_host_port(pod("a", "100m", "128Mi"), 8080),
            with_host_port(pod("b", "100m", "128Mi"), 8080),
            with_host_port(pod("c", "100m", "128Mi"), 8081),
        ],
    );
    assert!(unschedulable(&plan).is_empty(), "{}", summary(&plan));
    assert_eq!(claims(&plan).len(), 2, "{}", summary(&plan));
    assert_ne!(
        claim_holding(&plan, "default/a")["pods"],
        claim_holding(&plan, "default/b")["pods"]
    );
}

#[test]
fn a_pod_cannot_join_an_existing_node_whose_pod_binds_its_host_port() {
    let plan = plan(
        &general_purpose(),
        vec![
            node("n1", "us-east-1a", "4", "16Gi"),
            bound_to(with_host_port(pod("running", "100m", "128Mi"), 8080), "n1"),
            with_host_port(pod("new", "100m", "128Mi"), 8080),
        ],
    );
    assert!(
        plan["existingNodes"].as_array().unwrap().is_empty(),
        "{}",
        summary(&plan)
    );
    assert_eq!(claims(&plan).len(), 1, "{}", summary(&plan));
}

#[test]
fn a_pod_whose_host_port_a_daemonset_holds_on_every_node_is_unschedulable_naming_it() {
    let exporter = daemonset(
        "node-exporter",
        "100m",
        json!({"ports": [{"containerPort": 9100, "hostPort": 9100}]}),
    );
    let plan = plan(
        &general_purpose(),
        vec![
            exporter,
            with_host_port(pod("clash", "100m", "128Mi"), 9100),
            with_host_port(pod("fine", "100m", "128Mi"), 9200),
        ],
    );
    let stuck = unschedulable(&plan);
    assert_eq!(stuck.len(), 1, "{}", summary(&plan));
    assert_eq!(stuck[0].0, "default/clash");
    assert!(
        stuck[0].1.contains("host port 9100/TCP")
            && stuck[0].1.contains("DaemonSet kube-system/node-exporter"),
        "{}",
        stuck[0].1
    );
    assert_eq!(pods_of(&claims(&plan)[0]), ["default/fine"]);
}

// ----- DaemonSet overhead per instance type ----------------------------------------------

fn instance_type_for(pool: &str, mut items: Vec<Value>) -> String {
    items.push(pod("app", "1500m", "1Gi"));
    let plan = plan(pool, items);
    assert_eq!(claims(&plan).len(), 1, "{}", summary(&plan));
    claims(&plan)[0]["instanceType"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn a_daemonset_counts_only_on_the_instance_types_its_affinity_selects() {
    let alone = instance_type_for(&general_purpose(), vec![]);
    // 3 cpu on local-NVMe types only: the cheapest type (no NVMe) is still right.
    let nvme_only = daemonset(
        "nvme-agent",
        "3",
        json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
            {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "karpenter.k8s.aws/instance-local-nvme", "operator": "Exists"}]}]}}}}),
    );
    assert_eq!(
        instance_type_for(&general_purpose(), vec![nvme_only]),
        alone
    );
    // NotIn on a label non-GPU types lack: it lands on them, and needs room there.
    let not_gpu = daemonset(
        "cpu-agent",
        "1",
        json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
            {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "NotIn",
                 "values": ["t4"]}]}]}}}}),
    );
    let with_agent = instance_type_for(&general_purpose(), vec![not_gpu]);
    assert_ne!(
        with_agent, alone,
        "1.5 cpu + 1 cpu agent needs a bigger type"
    );
    assert!(with_agent.ends_with(".xlarge"), "{with_agent}");
}

// ----- hostname ------------------------------------------------------------------------

#[test]
fn a_pod_that_requires_a_hostname_only_goes_to_that_node() {
    let mut wants_n1 = pod("pinned", "500m", "512Mi");
    wants_n1["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": "n1"});
    let mut wants_n2 = pod("pinned-full", "2", "512Mi");
    wants_n2["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": "n2"});
    let plan = plan(
        &general_purpose(),
        vec![
            node("n1", "us-east-1a", "4", "16Gi"),
            node("n2", "us-east-1a", "1", "16Gi"),
            wants_n1,
            wants_n2,
        ],
    );
    assert_eq!(
        plan["existingNodes"],
        json!([{"target": "n1", "pods": ["default/pinned"]}]),
        "{}",
        summary(&plan)
    );
    assert!(
        claims(&plan).is_empty(),
        "a new node never has that name: {}",
        summary(&plan)
    );
    let stuck = unschedulable(&plan);
    assert_eq!(stuck.len(), 1);
    assert!(
        stuck[0].1.contains("kubernetes.io/hostname"),
        "{}",
        stuck[0].1
    );
}

// ----- topology spread domains ------------------------------------------------------------

#[test]
fn zone_spread_counts_only_the_zones_the_node_pool_allows() {
    let pools = general_purpose_with(
        "        - key: topology.kubernetes.io/zone\n          operator: In\n          values: [\"us-east-1a\", \"us-east-1b\"]\n",
    );
    let pods: Vec<Value> = (0..4)
        .map(|i| {
            with_zone_spread(
                with_app(pod(&format!("web-{i}"), "1", "1Gi"), "web"),
                "topology.kubernetes.io/zone",
                "web",
            )
        })
        .collect();
    let plan = plan(&pools, pods);
    assert!(
        unschedulable(&plan).is_empty(),
        "us-east-1c is no domain: {}",
        summary(&plan)
    );
    let mut per_zone = std::collections::BTreeMap::new();
    for c in claims(&plan) {
        *per_zone
            .entry(c["zone"].as_str().unwrap().to_string())
            .or_insert(0) += pods_of(c).len();
    }
    assert_eq!(
        per_zone,
        [("us-east-1a".to_string(), 2), ("us-east-1b".to_string(), 2)].into()
    );
}

#[test]
fn zone_spread_counts_only_the_zones_the_pods_own_affinity_allows() {
    let pods: Vec<Value> = (0..4)
        .map(|i| {
            let mut p = with_zone_spread(
                with_app(pod(&format!("web-{i}"), "1", "1Gi"), "web"),
                "topology.kubernetes.io/zone",
                "web",
            );
            p["spec"]["affinity"] = json!({"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "topology.kubernetes.io/zone",
                        "operator": "In", "values": ["us-east-1b", "us-east-1c"]}]}]}}});
            p
        })
        .collect();
    let plan = plan(&general_purpose(), pods);
    assert!(unschedulable(&plan).is_empty(), "{}", summary(&plan));
    let zones: std::collections::BTreeSet<&str> = claims(&plan)
        .iter()
        .map(|c| c["zone"].as_str().unwrap())
        .collect();
    assert_eq!(zones, ["us-east-1b", "us-east-1c"].into());
}

#[test]
fn a_spread_over_a_label_the_node_pools_set_splits_on_demand_and_spot_by_ratio() {
    // The Karpenter workshop's ratio split: 1 on-demand domain, 4 spot domains.
    let pool = |name: &str, capacity_type: &str, values: &str| {
        format!(
            r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: {name}
spec:
  template:
    spec:
      requirements:
        - key: karpenter.sh/capacity-type
          operator: In
          values: ["{capacity_type}"]
        - key: capacity-spread
          operator: In
          values: [{values}]
        - key: karpenter.k8s.aws/instance-category
          operator: In
          values: ["c", "m", "r"]
      nodeClassRef:
        group: karpenter.k8s.aws
        kind: EC2NodeClass
        name: default
---
"#
        )
    };
    let class = crate::manifests::node_class();
    let pools = format!(
        "{}{}{class}",
        pool("on-demand", "on-demand", r#""1""#),
        pool("spot", "spot", r#""2", "3", "4", "5""#)
    );
    let pods: Vec<Value> = (0..10)
        .map(|i| {
            with_zone_spread(
                with_app(pod(&format!("inflate-{i}"), "1", "1Gi"), "inflate"),
                "capacity-spread",
                "inflate",
            )
        })
        .collect();
    let plan = plan(&pools, pods);
    assert!(unschedulable(&plan).is_empty(), "{}", summary(&plan));
    let mut per_domain = std::collections::BTreeMap::new();
    let mut on_demand_pods = 0;
    for c in claims(&plan) {
        let domain = c["labels"]["capacity-spread"]
            .as_str()
            .unwrap_or_else(|| panic!("the claim carries its domain: {c}"))
            .to_string();
        *per_domain.entry(domain).or_insert(0) += pods_of(c).len();
        if c["capacityType"] == "on-demand" {
            on_demand_pods += pods_of(c).len();
        }
    }
    assert_eq!(
        per_domain,
        (1..=5).map(|d| (d.to_string(), 2)).collect(),
        "{}",
        summary(&plan)
    );
    assert_eq!(on_demand_pods, 2, "a 1:4 on-demand/spot ratio");
}

// ----- pod affinity ----------------------------------------------------------------------

#[test]
fn a_pod_follows_its_hostname_affinity_target_to_the_existing_node() {
    let plan = plan(
        &general_purpose(),
        vec![
            node("n1", "us-east-1a", "4", "16Gi"),
            node("n2", "us-east-1a", "4", "16Gi"),
            bound_to(pod("db", "500m", "1Gi"), "n2"),
            with_affinity(
                pod("web", "500m", "1Gi"),
                "podAffinity",
                true,
                "kubernetes.io/hostname",
                "db",
            ),
        ],
    );
    assert_eq!(
        plan["existingNodes"],
        json!([{"target": "n2", "pods": ["default/web"]}]),
        "{}",
        summary(&plan)
    );
}

#[test]
fn a_pod_follows_its_affinity_target_onto_the_claim_being_planned() {
    let plan = plan(
        &general_purpose(),
        vec![
            with_affinity(
                pod("web", "500m", "1Gi"),
                "podAffinity",
                true,
                "kubernetes.io/hostname",
                "db",
            ),
            pod("db", "2", "4Gi"),
        ],
    );
    assert!(unschedulable(&plan).is_empty(), "{}", summary(&plan));
    assert_eq!(claims(&plan).len(), 1, "{}", summary(&plan));
    let mut pods = pods_of(&claims(&plan)[0]);
    pods.sort();
    assert_eq!(pods, ["default/db", "default/web"]);
}

#[test]
fn a_group_with_hostname_self_affinity_lands_together() {
    let pods: Vec<Value> = (0..3)
        .map(|i| {
            with_affinity(
                with_app(pod(&format!("cache-{i}"), "500m", "512Mi"), "cache"),
                "podAffinity",
                true,
                "kubernetes.io/hostname",
                "cache",
            )
        })
        .collect();
    let plan = plan(&general_purpose(), pods);
    assert!(unschedulable(&plan).is_empty(), "{}", summary(&plan));
    assert_eq!(claims(&plan).len(), 1, "{}", summary(&plan));
    assert_eq!(pods_of(&claims(&plan)[0]).len(), 3);
}

#[test]
fn a_pod_whose_required_affinity_matches_no_pod_is_unschedulable_saying_so() {
    let plan = plan(
        &general_purpose(),
        vec![
            with_affinity(
                pod("lonely-host", "500m", "512Mi"),
                "podAffinity",
                true,
                "kubernetes.io/hostname",
                "nobody",
            ),
            with_affinity(
                pod("lonely-zone", "500m", "512Mi"),
                "podAffinity",
                true,
                "topology.kubernetes.io/zone",
                "nobody",
            ),
        ],
    );
    assert!(claims(&plan).is_empty(), "{}", summary(&plan));
    let stuck = unschedulable(&plan);
    assert_eq!(stuck.len(), 2, "{}", summary(&plan));
    for (pod, reason) in stuck {
        assert!(
            reason.contains("no pod matches its selector"),
            "{pod}: {reason}"
        );
    }
}

// ----- preferences -----------------------------------------------------------------------

#[test]
fn preferred_pod_affinity_and_anti_affinity_never_leave_a_pod_unschedulable() {
    let one_zone = general_purpose_with(
        "        - key: topology.kubernetes.io/zone\n          operator: In\n          values: [\"us-east-1a\"]\n",
    );
    let plan = plan(
        &one_zone,
        vec![
            // A placed pod's preferred anti-affinity is not a wall for the pods it selects.
            with_affinity(
                pod("shy", "2", "1Gi"),
                "podAntiAffinity",
                false,
                "topology.kubernetes.io/zone",
                "web",
            ),
            with_app(pod("web-0", "500m", "512Mi"), "web"),
            with_app(pod("web-1", "500m", "512Mi"), "web"),
            // Its own preferences relax when they cannot be met.
            with_affinity(
                pod("hopeful", "500m", "512Mi"),
                "podAffinity",
                false,
                "topology.kubernetes.io/zone",
                "nobody",
            ),
            with_affinity(
                with_app(pod("loner", "500m", "512Mi"), "loner"),
                "podAntiAffinity",
                false,
                "topology.kubernetes.io/zone",
                "web",
            ),
        ],
    );
    assert!(unschedulable(&plan).is_empty(), "{}", summary(&plan));
    let placed: usize = claims(&plan).iter().map(|c| pods_of(c).len()).sum();
    assert_eq!(placed, 5);
}

#[test]
fn a_running_daemonset_pod_sizes_the_overhead_rather_than_the_template() {
    let agent = || daemonset("agent", "100m", json!({}));
    let from_template = instance_type_for(&general_purpose(), vec![agent()]);
    // VPA raised the running pods to 2 cpu: a new node must hold that, plus the pod.
    let mut running = bound_to(pod("agent-x7k2p", "2", "64Mi"), "n1");
    running["metadata"]["namespace"] = json!("kube-system");
    running["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1",
        "kind": "DaemonSet", "name": "agent", "uid": "d1", "controller": true}]);
    let full_node = node("n1", "us-east-1a", "2", "1Gi");
    let from_running = instance_type_for(&general_purpose(), vec![agent(), full_node, running]);
    assert_ne!(from_running, from_template);
    assert!(
        from_running.ends_with(".xlarge"),
        "{from_running} holds 1.5 + 2 cpu"
    );
}
