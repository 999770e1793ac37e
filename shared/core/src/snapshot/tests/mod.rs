//! The snapshot read end to end, through [`parse_snapshot`]: the JSON builders the tests
//! share here, the tests in a file per part of the reader they exercise.

use serde_json::{Value, json};

use super::{SnapshotError, parse_snapshot};
use crate::cluster::Pod;
use crate::resources::Resources;

mod list;
mod node;
mod pdb;
mod pod;
mod storage;

type Result<T, E = SnapshotError> = std::result::Result<T, E>;

/// A List as kubectl prints it.
fn list(items: Vec<Value>) -> String {
    json!({"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}})
        .to_string()
}

/// A pod as the API server returns it, with the given spec fields merged in.
fn pod_json(ns: &str, name: &str, spec: Value) -> Value {
    let mut full = json!({
        "containers": [],
        "dnsPolicy": "ClusterFirst",
        "restartPolicy": "Always",
        "schedulerName": "default-scheduler",
    });
    if let (Some(full), Value::Object(extra)) = (full.as_object_mut(), spec) {
        full.extend(extra);
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": name}},
        "spec": full,
        "status": {"phase": "Pending"},
    })
}

fn container(name: &str, resources: Value) -> Value {
    json!({"name": name, "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7", "resources": resources})
}

fn one_pod(spec: Value) -> Result<Pod> {
    let mut snapshot = parse_snapshot(&list(vec![pod_json("default", "web-1", spec)]))?;
    Ok(snapshot.pods.remove(0))
}

fn res(pairs: &[(&str, &str)]) -> Resources {
    let mut r = Resources::one_pod();
    for (name, q) in pairs {
        r.set_quantity(name, q).unwrap();
    }
    r
}

fn node_json(name: &str, ready: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": "us-east-1a"}},
        "spec": {
            "providerID": "aws:///us-east-1a/i-0123456789abcdef0",
            "taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
                       {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}],
            "unschedulable": true,
        },
        "status": {
            "allocatable": {"cpu": "3920m", "memory": "14909676Ki", "pods": "58", "ephemeral-storage": "18242267924"},
            "capacity": {"cpu": "4", "memory": "15896812Ki", "pods": "58"},
            "conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": ready},
            ],
            "nodeInfo": {"architecture": "amd64", "bootID": "", "containerRuntimeVersion": "", "kernelVersion": "",
                         "kubeProxyVersion": "", "kubeletVersion": "", "machineID": "", "operatingSystem": "linux",
                         "osImage": "", "systemUUID": ""},
        },
    })
}

fn daemonset_json() -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "aws-node", "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": {"k8s-app": "aws-node"}},
            "template": {
                "metadata": {"labels": {"k8s-app": "aws-node"}},
                "spec": {
                    "containers": [container("aws-node", json!({"requests": {"cpu": "25m"}})),
                                   container("aws-eks-nodeagent", json!({"requests": {"cpu": "25m"}}))],
                    "priorityClassName": "system-node-critical",
                    "tolerations": [{"operator": "Exists"}],
                },
            },
            "updateStrategy": {"type": "RollingUpdate"},
        },
        "status": {"currentNumberScheduled": 3, "desiredNumberScheduled": 3, "numberMisscheduled": 0, "numberReady": 3},
    })
}

fn pdb_json(name: &str, field: &str, value: Value) -> Value {
    json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {"selector": {"matchLabels": {"app": name}}, field: value},
        "status": {"currentHealthy": 2, "desiredHealthy": 1, "disruptionsAllowed": 1, "expectedPods": 2},
    })
}

fn strip_kinds(mut items: Vec<Value>) -> Vec<Value> {
    for item in &mut items {
        if let Some(obj) = item.as_object_mut() {
            obj.remove("kind");
            obj.remove("apiVersion");
        }
    }
    items
}

fn mixed_items() -> Vec<Value> {
    vec![
        node_json("ip-192-168-12-34.ec2.internal", "True"),
        pod_json(
            "default",
            "web-1",
            json!({"containers": [container("app", json!({"requests": {"cpu": "1"}}))]}),
        ),
        daemonset_json(),
        pdb_json("storefront", "minAvailable", json!("50%")),
    ]
}
