//! The files a user would have: NodePools as YAML, and a cluster as
//! `kubectl get pods,nodes,daemonsets -A -o json` prints it (a `List`, written item by
//! item, each object with the fields the API server fills in), from core's types.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use nodewright_core::cluster::{
    LabelSelector, Node, Pod, PodAffinityTerm, Toleration, TolerationOperator,
    TopologySpreadConstraint,
};
use nodewright_core::well_known::LABEL_INSTANCE_TYPE;
use serde::Serialize;
use serde_json::{Map, Value, json};

pub fn write_text(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

pub fn write_json(path: &Path, value: &Value) -> Result<(), String> {
    write_text(path, &value.to_string())
}

/// One NodePool `default` with these requirements, and its EC2NodeClass.
pub fn nodepools_yaml(requirements: &[(&str, &str, &[&str])]) -> String {
    let mut reqs = String::new();
    for (key, op, values) in requirements {
        let values: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
        reqs.push_str(&format!(
            "        - key: {key}\n          operator: {op}\n          values: [{}]\n",
            values.join(", ")
        ));
    }
    format!(
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata:\n  name: default\nspec:\n  template:\n    spec:\n      requirements:\n{reqs}      nodeClassRef:\n        group: karpenter.k8s.aws\n        kind: EC2NodeClass\n        name: default\n---\napiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata:\n  name: default\nspec:\n  role: KarpenterNodeRole-bench\n  amiSelectorTerms:\n    - alias: al2023@latest\n  subnetSelectorTerms:\n    - tags:\n        karpenter.sh/discovery: bench\n  securityGroupSelectorTerms:\n    - tags:\n        karpenter.sh/discovery: bench\n"
    )
}

/// A `List` written item by item, indented as kubectl indents (4 spaces).
pub struct ListWriter {
    out: BufWriter<File>,
    first: bool,
}

impl ListWriter {
    pub fn item(&mut self, value: &Value) -> Result<(), String> {
        let sep: &[u8] = if self.first { b"\n" } else { b",\n" };
        self.first = false;
        self.out.write_all(sep).map_err(|e| e.to_string())?;
        let formatter = serde_json::ser::PrettyFormatter::with_indent(b"    ");
        let mut ser = serde_json::Serializer::with_formatter(&mut self.out, formatter);
        value.serialize(&mut ser).map_err(|e| e.to_string())
    }
}

pub fn write_list(
    path: &Path,
    items: impl FnOnce(&mut ListWriter) -> Result<(), String>,
) -> Result<(), String> {
    let file = File::create(path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    let mut w = ListWriter {
        out: BufWriter::new(file),
        first: true,
    };
    w.out
        .write_all(b"{\n    \"apiVersion\": \"v1\",\n    \"items\": [")
        .map_err(|e| e.to_string())?;
    items(&mut w)?;
    w.out
        .write_all(b"\n    ],\n    \"kind\": \"List\",\n    \"metadata\": {\n        \"resourceVersion\": \"\"\n    }\n}\n")
        .and_then(|_| w.out.flush())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn uid(kind: u8, i: usize) -> String {
    format!("{kind:02x}5f0c3a-{:04x}-4e1b-9c2d-{i:012x}", i % 65_536)
}

fn string_map(map: &BTreeMap<String, String>) -> Value {
    Value::Object(map.iter().map(|(k, v)| (k.clone(), json!(v))).collect())
}

fn selector(s: &Option<LabelSelector>) -> Value {
    match s {
        Some(s) => json!({ "matchLabels": string_map(&s.match_labels) }),
        None => json!({}),
    }
}

fn spread(c: &TopologySpreadConstraint) -> Value {
    json!({
        "maxSkew": c.max_skew,
        "topologyKey": c.topology_key,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": selector(&c.label_selector),
    })
}

fn affinity_term(t: &PodAffinityTerm) -> Value {
    json!({ "labelSelector": selector(&t.label_selector), "topologyKey": t.topology_key })
}

fn toleration(t: &Toleration) -> Value {
    let mut out = Map::new();
    if !t.key.is_empty() {
        out.insert("key".into(), json!(t.key));
    }
    match t.operator {
        TolerationOperator::Exists => {
            out.insert("operator".into(), json!("Exists"));
        }
        TolerationOperator::Equal => {
            out.insert("operator".into(), json!("Equal"));
            out.insert("value".into(), json!(t.value));
        }
    }
    if let Some(effect) = &t.effect {
        out.insert("effect".into(), json!(format!("{effect:?}")));
    }
    Value::Object(out)
}

fn quantity_mi(milli_bytes: i64) -> String {
    format!("{}Mi", milli_bytes / 1000 / (1 << 20))
}

/// A pod as the API server returns it: the generated pod's labels, requests, spread and
/// affinity, plus the fields every pod carries (defaults, the service account volume,
/// the default tolerations). Pending pods carry kube-scheduler's `PodScheduled=False`
/// (`Unschedulable`) mark; bound ones are Running.
pub fn pod_object(p: &Pod, i: usize) -> Value {
    let mut affinity = Map::new();
    if !p.pod_affinity.is_empty() {
        affinity.insert(
            "podAffinity".into(),
            json!({"requiredDuringSchedulingIgnoredDuringExecution": p.pod_affinity.iter().map(affinity_term).collect::<Vec<_>>()}),
        );
    }
    if !p.pod_anti_affinity.is_empty() {
        affinity.insert(
            "podAntiAffinity".into(),
            json!({"requiredDuringSchedulingIgnoredDuringExecution": p.pod_anti_affinity.iter().map(affinity_term).collect::<Vec<_>>()}),
        );
    }
    let mut tolerations: Vec<Value> = p.tolerations.iter().map(toleration).collect();
    // What the DefaultTolerationSeconds admission plugin adds where the pod says nothing.
    for key in [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ] {
        if !p.tolerations.iter().any(|t| t.key == key) {
            tolerations.push(json!({"effect": "NoExecute", "key": key, "operator": "Exists", "tolerationSeconds": 300}));
        }
    }
    let (owner_kind, owner) = match (&p.owner_daemonset, p.daemonset_owned) {
        (Some(daemonset), _) => ("DaemonSet", daemonset.clone()),
        (None, true) => (
            "DaemonSet",
            p.name
                .rsplit_once('-')
                .map_or(&*p.name, |(d, _)| d)
                .to_string(),
        ),
        (None, false) => (
            "ReplicaSet",
            format!(
                "{}-7d9c8b6f5",
                p.labels.values().next().map_or("app", String::as_str)
            ),
        ),
    };
    let mut spec = json!({
        "containers": [{
            "image": "public.ecr.aws/docker/library/nginx:1.27",
            "imagePullPolicy": "IfNotPresent",
            "name": "app",
            "resources": {"requests": {
                "cpu": format!("{}m", p.requests.get_milli("cpu")),
                "memory": quantity_mi(p.requests.get_milli("memory")),
            }},
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File",
            "volumeMounts": [{"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "name": "kube-api-access", "readOnly": true}],
        }],
        "dnsPolicy": "ClusterFirst",
        "enableServiceLinks": true,
        "preemptionPolicy": "PreemptLowerPriority",
        "priority": 0,
        "restartPolicy": "Always",
        "schedulerName": "default-scheduler",
        "securityContext": {},
        "serviceAccount": "default",
        "serviceAccountName": "default",
        "terminationGracePeriodSeconds": 30,
        "tolerations": tolerations,
        "volumes": [{"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"items": [{"key": "ca.crt", "path": "ca.crt"}], "name": "kube-root-ca.crt"}},
            {"downwardAPI": {"items": [{"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}, "path": "namespace"}]}},
        ]}}],
    });
    if !affinity.is_empty() {
        spec["affinity"] = Value::Object(affinity);
    }
    if !p.topology_spread.is_empty() {
        spec["topologySpreadConstraints"] = p.topology_spread.iter().map(spread).collect();
    }
    let status = match &p.node_name {
        Some(node) => {
            spec["nodeName"] = json!(node);
            let conditions: Vec<Value> = ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"]
                .map(|t| json!({"lastProbeTime": null, "lastTransitionTime": "2026-11-20T08:15:02Z", "status": "True", "type": t}))
                .into();
            json!({
                "conditions": conditions,
                "containerStatuses": [{
                    "containerID": format!("containerd://{:064x}", i),
                    "image": "public.ecr.aws/docker/library/nginx:1.27",
                    "imageID": "public.ecr.aws/docker/library/nginx@sha256:5f0c3a1e4b9c2d7e8f6a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e",
                    "lastState": {}, "name": "app", "ready": true, "restartCount": 0, "started": true,
                    "state": {"running": {"startedAt": "2026-11-20T08:15:01Z"}},
                }],
                "hostIP": "10.0.0.1",
                "phase": "Running",
                "podIP": format!("10.1.{}.{}", i / 256 % 256, i % 256),
                "qosClass": "Burstable",
                "startTime": "2026-11-20T08:14:58Z",
            })
        }
        None => json!({
            "conditions": [{
                "lastProbeTime": null,
                "lastTransitionTime": "2026-11-20T08:14:58Z",
                "message": "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.",
                "reason": "Unschedulable",
                "status": "False",
                "type": "PodScheduled",
            }],
            "phase": "Pending",
            "qosClass": "Burstable",
        }),
    };
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "creationTimestamp": "2026-11-20T08:14:58Z",
            "generateName": format!("{owner}-"),
            "labels": string_map(&p.labels),
            "name": p.name,
            "namespace": p.namespace,
            "ownerReferences": [{"apiVersion": "apps/v1", "blockOwnerDeletion": true, "controller": true, "kind": owner_kind, "name": owner, "uid": uid(1, i / 10)}],
            "resourceVersion": (4_100_000 + i).to_string(),
            "uid": uid(2, i),
        },
        "spec": spec,
        "status": status,
    })
}

pub fn daemonset_object(name: &str, template: &Pod) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "kube-system", "uid": uid(3, 0)},
        "spec": {
            "selector": {"matchLabels": string_map(&template.labels)},
            "template": {
                "metadata": {"labels": string_map(&template.labels)},
                "spec": {
                    "containers": [{"name": name, "image": "public.ecr.aws/eks/agent:v1", "resources": {"requests": {
                        "cpu": format!("{}m", template.requests.get_milli("cpu")),
                        "memory": quantity_mi(template.requests.get_milli("memory")),
                    }}}],
                    "tolerations": [{"operator": "Exists"}],
                },
            },
        },
        "status": {"desiredNumberScheduled": 0, "numberReady": 0},
    })
}

pub fn node_object(node: &Node, n: usize) -> Value {
    let mut labels = node.labels.clone();
    labels.insert("topology.kubernetes.io/region".into(), "us-east-1".into());
    labels.insert("karpenter.sh/registered".into(), "true".into());
    labels.insert("karpenter.sh/initialized".into(), "true".into());
    if let Some(it) = node.labels.get(LABEL_INSTANCE_TYPE) {
        labels.insert("beta.kubernetes.io/instance-type".into(), it.clone());
    }
    let resources = |r: &nodewright_core::resources::Resources| {
        json!({
            "cpu": format!("{}m", r.get_milli("cpu")),
            "memory": format!("{}Ki", r.get_milli("memory") / 1000 / 1024),
            "pods": (r.get_milli("pods") / 1000).to_string(),
            "ephemeral-storage": "18242267924",
        })
    };
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true"},
            "creationTimestamp": "2026-11-20T08:14:20Z",
            "labels": string_map(&labels),
            "name": node.name,
            "resourceVersion": (4_000_000 + n).to_string(),
            "uid": uid(4, n),
        },
        "spec": {"providerID": node.provider_id},
        "status": {
            "addresses": [{"address": node.name, "type": "InternalDNS"}, {"address": node.name, "type": "Hostname"}],
            "allocatable": resources(&node.allocatable),
            "capacity": resources(&node.capacity),
            "conditions": [
                {"lastHeartbeatTime": "2026-11-21T08:00:00Z", "lastTransitionTime": "2026-11-20T08:15:00Z", "message": "kubelet is posting ready status", "reason": "KubeletReady", "status": "True", "type": "Ready"},
                {"lastHeartbeatTime": "2026-11-21T08:00:00Z", "lastTransitionTime": "2026-11-20T08:15:00Z", "message": "kubelet has sufficient memory available", "reason": "KubeletHasSufficientMemory", "status": "False", "type": "MemoryPressure"},
            ],
            "nodeInfo": {"architecture": "amd64", "containerRuntimeVersion": "containerd://1.7.27", "kernelVersion": "6.1.134", "kubeProxyVersion": "v1.33.0", "kubeletVersion": "v1.33.0", "operatingSystem": "linux", "osImage": "Amazon Linux 2023"},
        },
    })
}
