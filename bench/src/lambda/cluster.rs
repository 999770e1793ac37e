//! The Kubernetes side of a steady cluster, as the API server returns it: N Ready
//! nodes of one type (NodePool `default`, registered and initialized as nodewright
//! leaves them), each running 25 pods — the two DaemonSets' (aws-node, kube-proxy)
//! and 23 workload pods of the simulator's mixed workload
//! (`sim::workload::mixed_deployment`: web 40%: 250m–1 cpu, 256Mi–1Gi, zone spread; worker 25%: 1–2 cpu, 2–4Gi; cache
//! 15%: 500m, 4–8Gi, hostname anti-affinity; batch 20%: 2–4 cpu, 1–2Gi), spread over
//! many Deployments, some of them behind PodDisruptionBudgets.
//!
//! Steady means there is nothing for either function to do, while they still look at
//! everything: every node's cpu is exactly used up (the last pod on each node, a
//! Job's, takes what the others leave), so no pod fits anywhere else, no node can be
//! removed and, with one instance type allowed, no replacement is cheaper. The
//! disruption function still considers every node; the provisioner still gathers,
//! polls and reconciles the whole cluster.

use nodewright_core::catalog::{Catalog, InstanceType};
use nodewright_core::well_known::{
    LABEL_CAPACITY_TYPE, LABEL_HOSTNAME, LABEL_INSTANCE_TYPE, LABEL_NODEPOOL, LABEL_REGION,
    LABEL_ZONE,
};
use nodewright_sim::rng::Rng;
use nodewright_sim::workload::{MIXED_MIN_CPU_MILLI, MIXED_MIN_MEMORY_MIB, mixed_deployment};
use serde_json::{Map, Value, json};

/// Every node's type, and the only one the NodePool allows.
pub const NODE_TYPE: &str = "m5.8xlarge";
/// The zones of the moto network's tagged subnets.
pub const ZONES: [&str; 2] = ["us-east-1a", "us-east-1b"];
pub const REGION: &str = "us-east-1";
pub const NODEPOOL: &str = "default";
pub const NODECLASS: &str = "default";
/// The role in the EC2NodeClass (created in moto).
pub const NODE_ROLE: &str = "KarpenterNodeRole-bench";
pub const PODS_PER_NODE: usize = 25;
/// The NodePool's `consolidateAfter`: a node whose pods are younger is not yet a
/// consolidation candidate.
pub const CONSOLIDATE_AFTER_SECS: u64 = 60;
const LABEL_NODECLAIM: &str = "karpenter.sh/nodeclaim";
const DAEMONSETS: [(&str, i64, i64); 2] = [("aws-node", 25, 40), ("kube-proxy", 100, 50)];
/// The smallest workload pod: what the filler on every node is at least.
const MIN_CPU: i64 = MIXED_MIN_CPU_MILLI;
const MIN_MEM_MIB: i64 = MIXED_MIN_MEMORY_MIB;
/// Replicas per Deployment on average (Deployments = workload pods / this).
const REPLICAS: usize = 10;
/// One Deployment in this many has a PodDisruptionBudget.
const PDB_EVERY: usize = 5;
const SEED: u64 = 42;

/// One node of the cluster: its Kubernetes name, its claim and where it runs.
#[derive(Debug, Clone)]
pub struct NodeSpec {
    pub index: usize,
    pub name: String,
    pub claim: String,
    pub zone: &'static str,
}

pub fn node_specs(count: usize) -> Vec<NodeSpec> {
    (0..count)
        .map(|n| NodeSpec {
            index: n,
            name: format!(
                "ip-10-{}-{}-{}.ec2.internal",
                n / 65_536,
                n / 256 % 256,
                n % 256
            ),
            claim: format!("{NODEPOOL}-b{n:05}"),
            zone: ZONES[n % ZONES.len()],
        })
        .collect()
}

pub fn node_type() -> Result<&'static InstanceType, String> {
    Catalog::embedded()
        .get(NODE_TYPE)
        .ok_or_else(|| format!("{NODE_TYPE} is not in the embedded catalog"))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Web,
    Worker,
    Cache,
    Batch,
}

#[derive(Debug, Clone)]
struct Deployment {
    app: String,
    kind: Kind,
    cpu: i64,
    mem_mib: i64,
}

/// The Deployments of the real workload's mix; the first is the smallest web shape,
/// the fallback when a node has little room left.
fn deployments(count: usize, rng: &mut Rng) -> Vec<Deployment> {
    let mut out = vec![Deployment {
        app: "web-0".into(),
        kind: Kind::Web,
        cpu: MIN_CPU,
        mem_mib: MIN_MEM_MIB,
    }];
    for d in 1..count.max(1) {
        let drawn = mixed_deployment(rng, d);
        let kind = match drawn.name.split_once('-').map(|(kind, _)| kind) {
            Some("web") => Kind::Web,
            Some("worker") => Kind::Worker,
            Some("cache") => Kind::Cache,
            _ => Kind::Batch,
        };
        let requests = &drawn.template.requests;
        out.push(Deployment {
            kind,
            cpu: requests.get_milli("cpu"),
            mem_mib: requests.get_milli("memory") / 1000 / (1 << 20),
            app: drawn.name,
        });
    }
    out
}

/// Every object of the cluster but its nodes' instances, handed to `put` one at a
/// time (a 10,000-node cluster is 250,000 pods: never held as one list here).
pub fn objects(
    cluster: &str,
    nodes: &[NodeSpec],
    instance_ids: &[String],
    mut put: impl FnMut(Value),
) -> Result<(), String> {
    let it = node_type()?;
    put(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}));
    put(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system"}}));
    put(node_class(cluster));
    put(node_pool());
    for (name, cpu, mem) in DAEMONSETS {
        put(daemonset(name, cpu, mem));
    }
    let workload_per_node = PODS_PER_NODE - DAEMONSETS.len();
    let mut rng = Rng::new(SEED);
    let deployments = deployments(nodes.len() * (workload_per_node - 1) / REPLICAS, &mut rng);
    for d in deployments.iter().step_by(PDB_EVERY) {
        put(pdb(&d.app));
    }
    let alloc_cpu = it.allocatable.get_milli("cpu");
    let alloc_mem = it.allocatable.get_milli("memory") / 1000 / (1 << 20);
    let mut pod_index = 0;
    for (node, instance_id) in nodes.iter().zip(instance_ids) {
        put(node_object(node, instance_id, it));
        let mut cpu_left = alloc_cpu;
        let mut mem_left = alloc_mem;
        for (ds, cpu, mem) in DAEMONSETS {
            let pod = PodShape {
                name: format!("{ds}-{:05x}", node.index),
                namespace: "kube-system",
                app: ds,
                owner: ("DaemonSet", ds.to_string()),
                cpu,
                mem_mib: mem,
                kind: None,
            };
            put(pod.object(Some(&node.name), pod_index));
            pod_index += 1;
            cpu_left -= cpu;
            mem_left -= mem;
        }
        let mut caches_here: Vec<usize> = Vec::new();
        // Each workload pod leaves the smallest shape's room for every pod after it
        // (the filler included), so the smallest shape always fits.
        for slot in 0..workload_per_node - 1 {
            let after = (workload_per_node - 1 - slot) as i64;
            let fits = |d: &Deployment| {
                cpu_left - d.cpu >= MIN_CPU * after && mem_left - d.mem_mib >= MIN_MEM_MIB * after
            };
            let mut chosen = rng.below(deployments.len());
            let d = &deployments[chosen];
            if !fits(d) || (d.kind == Kind::Cache && caches_here.contains(&chosen)) {
                chosen = 0;
            }
            let d = &deployments[chosen];
            if d.kind == Kind::Cache {
                caches_here.push(chosen);
            }
            let pod = PodShape {
                name: format!("{}-{:x}-{slot}", d.app, node.index),
                namespace: "default",
                app: &d.app,
                owner: ("ReplicaSet", format!("{}-7d9c8b6f5", d.app)),
                cpu: d.cpu,
                mem_mib: d.mem_mib,
                kind: Some(d.kind),
            };
            put(pod.object(Some(&node.name), pod_index));
            pod_index += 1;
            cpu_left -= d.cpu;
            mem_left -= d.mem_mib;
        }
        let job = format!("fill-{:05x}", node.index);
        let filler = PodShape {
            name: format!("{job}-x"),
            namespace: "default",
            app: &job,
            owner: ("Job", job.clone()),
            cpu: cpu_left,
            mem_mib: MIN_MEM_MIB,
            kind: None,
        };
        put(filler.object(Some(&node.name), pod_index));
        pod_index += 1;
    }
    Ok(())
}

/// `count` pending pods of the web, worker and batch shapes, which kube-scheduler
/// has marked Unschedulable: a burst (a Deployment scaled up, a batch submitted).
pub fn pending_pods(count: usize) -> Vec<Value> {
    let mut rng = Rng::new(SEED + 1);
    (0..count)
        .map(|i| {
            let (kind, cpu, mem) = match i % 3 {
                0 => (Kind::Web, rng.one_of([250, 500, 1000]), 512),
                1 => (Kind::Worker, rng.one_of([1000, 2000]), 2048),
                _ => (Kind::Batch, rng.one_of([2000, 4000]), 1024),
            };
            let app = format!("burst-{}", i % 3);
            PodShape {
                name: format!("{app}-{i}"),
                namespace: "default",
                app: &app,
                owner: ("ReplicaSet", format!("{app}-5b7c9d8f6")),
                cpu,
                mem_mib: mem,
                kind: Some(kind),
            }
            .object(None, 10_000_000 + i)
        })
        .collect()
}

fn node_pool() -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": NODEPOOL},
        "spec": {
            "template": {"spec": {
                "requirements": [
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                    {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                    {"key": LABEL_CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
                    {"key": LABEL_INSTANCE_TYPE, "operator": "In", "values": [NODE_TYPE]}
                ],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": NODECLASS},
                "expireAfter": "720h"
            }},
            "disruption": {
                "consolidationPolicy": "WhenEmptyOrUnderutilized",
                "consolidateAfter": format!("{CONSOLIDATE_AFTER_SECS}s"),
                "budgets": [{"nodes": "10%"}]
            }
        }
    })
}

fn node_class(cluster: &str) -> Value {
    json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": NODECLASS},
        "spec": {
            "role": NODE_ROLE,
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": cluster}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": cluster}}]
        }
    })
}

fn daemonset(name: &str, cpu: i64, mem_mib: i64) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": {"k8s-app": name}},
            "template": {
                "metadata": {"labels": {"k8s-app": name}},
                "spec": {
                    "containers": [{"name": name, "image": "public.ecr.aws/eks/agent:v1",
                        "resources": {"requests": {"cpu": format!("{cpu}m"), "memory": format!("{mem_mib}Mi")}}}],
                    "tolerations": [{"operator": "Exists"}]
                }
            }
        },
        "status": {"desiredNumberScheduled": 0, "numberReady": 0}
    })
}

fn pdb(app: &str) -> Value {
    json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": app, "namespace": "default"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": app}}},
        "status": {"currentHealthy": 0, "desiredHealthy": 0, "disruptionsAllowed": 1, "expectedPods": 0}
    })
}

fn node_object(node: &NodeSpec, instance_id: &str, it: &InstanceType) -> Value {
    let mut labels: Map<String, Value> = it
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    for (k, v) in [
        (LABEL_ZONE, node.zone),
        (LABEL_REGION, REGION),
        (LABEL_CAPACITY_TYPE, "on-demand"),
        (LABEL_NODEPOOL, NODEPOOL),
        (LABEL_NODECLAIM, &node.claim),
        (LABEL_HOSTNAME, &node.name),
        ("karpenter.sh/registered", "true"),
        ("karpenter.sh/initialized", "true"),
        ("beta.kubernetes.io/instance-type", NODE_TYPE),
    ] {
        labels.insert(k.into(), json!(v));
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
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": node.name,
            "labels": labels,
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true"},
        },
        "spec": {"providerID": format!("aws:///{}/{instance_id}", node.zone)},
        "status": {
            "addresses": [{"address": node.name, "type": "InternalDNS"}, {"address": node.name, "type": "Hostname"}],
            "allocatable": resources(&it.allocatable),
            "capacity": resources(&it.capacity),
            "conditions": [
                {"lastHeartbeatTime": "2026-11-21T08:00:00Z", "lastTransitionTime": "2026-11-20T08:15:00Z", "message": "kubelet is posting ready status", "reason": "KubeletReady", "status": "True", "type": "Ready"},
                {"lastHeartbeatTime": "2026-11-21T08:00:00Z", "lastTransitionTime": "2026-11-20T08:15:00Z", "message": "kubelet has sufficient memory available", "reason": "KubeletHasSufficientMemory", "status": "False", "type": "MemoryPressure"}
            ],
            "nodeInfo": {"architecture": "amd64", "containerRuntimeVersion": "containerd://1.7.27", "kernelVersion": "6.1.134", "kubeProxyVersion": "v1.33.0", "kubeletVersion": "v1.33.0", "operatingSystem": "linux", "osImage": "Amazon Linux 2023"}
        }
    })
}

/// What a pod is made of; [`PodShape::object`] dresses it as the API server returns it.
struct PodShape<'a> {
    name: String,
    namespace: &'a str,
    app: &'a str,
    owner: (&'static str, String),
    cpu: i64,
    mem_mib: i64,
    /// Workload pods carry their kind's scheduling constraints.
    kind: Option<Kind>,
}

impl PodShape<'_> {
    /// The pod with the fields every pod carries (defaults, the service-account
    /// volume, the default tolerations); bound pods are Running on `node`, the others
    /// carry kube-scheduler's `PodScheduled=False` (`Unschedulable`) mark.
    fn object(&self, node: Option<&str>, i: usize) -> Value {
        let label_key = if self.owner.0 == "DaemonSet" {
            "k8s-app"
        } else {
            "app"
        };
        let mut tolerations: Vec<Value> = vec![];
        if self.owner.0 == "DaemonSet" {
            tolerations.push(json!({"operator": "Exists"}));
        }
        for key in [
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable",
        ] {
            tolerations.push(json!({"effect": "NoExecute", "key": key, "operator": "Exists", "tolerationSeconds": 300}));
        }
        let mut spec = json!({
            "containers": [{
                "image": "public.ecr.aws/docker/library/nginx:1.27",
                "imagePullPolicy": "IfNotPresent",
                "name": "app",
                "resources": {"requests": {"cpu": format!("{}m", self.cpu), "memory": format!("{}Mi", self.mem_mib)}},
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "volumeMounts": [{"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "name": "kube-api-access", "readOnly": true}]
            }],
            "dnsPolicy": "ClusterFirst",
            "enableServiceLinks": true,
            "preemptionPolicy": "PreemptLowerPriority",
            "priority": 0,
            "restartPolicy": if self.owner.0 == "Job" { "Never" } else { "Always" },
            "schedulerName": "default-scheduler",
            "securityContext": {},
            "serviceAccount": "default",
            "serviceAccountName": "default",
            "terminationGracePeriodSeconds": 30,
            "tolerations": tolerations,
            "volumes": [{"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"items": [{"key": "ca.crt", "path": "ca.crt"}], "name": "kube-root-ca.crt"}},
                {"downwardAPI": {"items": [{"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}, "path": "namespace"}]}}
            ]}}]
        });
        let selector = json!({"matchLabels": {"app": self.app}});
        match self.kind {
            Some(Kind::Web) => {
                spec["topologySpreadConstraints"] = json!([{"maxSkew": 1, "topologyKey": LABEL_ZONE,
                    "whenUnsatisfiable": "DoNotSchedule", "labelSelector": selector}]);
            }
            Some(Kind::Cache) => {
                spec["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": selector, "topologyKey": LABEL_HOSTNAME}]}});
            }
            _ => {}
        }
        let status = match node {
            Some(node) => {
                spec["nodeName"] = json!(node);
                let conditions: Vec<Value> = ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"]
                    .map(|t| json!({"lastProbeTime": null, "lastTransitionTime": "2026-11-20T08:15:02Z", "status": "True", "type": t}))
                    .into();
                json!({
                    "conditions": conditions,
                    "containerStatuses": [{
                        "containerID": format!("containerd://{i:064x}"),
                        "image": "public.ecr.aws/docker/library/nginx:1.27",
                        "imageID": "public.ecr.aws/docker/library/nginx@sha256:5f0c3a1e4b9c2d7e8f6a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e",
                        "lastState": {}, "name": "app", "ready": true, "restartCount": 0, "started": true,
                        "state": {"running": {"startedAt": "2026-11-20T08:15:01Z"}}
                    }],
                    "hostIP": "10.0.0.1",
                    "phase": "Running",
                    "podIP": format!("10.1.{}.{}", i / 256 % 256, i % 256),
                    "qosClass": "Burstable",
                    "startTime": "2026-11-20T08:14:58Z"
                })
            }
            None => json!({
                "conditions": [{
                    "lastProbeTime": null,
                    "lastTransitionTime": "2026-11-20T08:14:58Z",
                    "message": "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.",
                    "reason": "Unschedulable",
                    "status": "False",
                    "type": "PodScheduled"
                }],
                "phase": "Pending",
                "qosClass": "Burstable"
            }),
        };
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "generateName": format!("{}-", self.owner.1),
                "labels": {label_key: self.app},
                "name": self.name,
                "namespace": self.namespace,
                "ownerReferences": [{"apiVersion": if self.owner.0 == "Job" { "batch/v1" } else { "apps/v1" },
                    "blockOwnerDeletion": true, "controller": true, "kind": self.owner.0, "name": self.owner.1,
                    "uid": format!("015f0c3a-0000-4e1b-9c2d-{:012x}", i / 10)}]
            },
            "spec": spec,
            "status": status
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_node_runs_25_pods_and_its_cpu_is_used_up() {
        let nodes = node_specs(40);
        let ids: Vec<String> = (0..40).map(|i| format!("i-{i:017x}")).collect();
        let mut objects = Vec::new();
        super::objects("c", &nodes, &ids, |o| objects.push(o)).unwrap();
        let alloc = node_type().unwrap().allocatable.get_milli("cpu");
        let milli = |q: &str| q.trim_end_matches('m').parse::<i64>().unwrap();
        for node in &nodes {
            let pods: Vec<&Value> = objects
                .iter()
                .filter(|o| o["kind"] == "Pod" && o["spec"]["nodeName"] == node.name.as_str())
                .collect();
            assert_eq!(pods.len(), PODS_PER_NODE, "{}", node.name);
            let used: i64 = pods
                .iter()
                .map(|p| {
                    milli(
                        p["spec"]["containers"][0]["resources"]["requests"]["cpu"]
                            .as_str()
                            .unwrap(),
                    )
                })
                .sum();
            assert_eq!(used, alloc, "{}", node.name);
            let caches: Vec<&str> = pods
                .iter()
                .filter_map(|p| p["metadata"]["labels"]["app"].as_str())
                .filter(|a| a.starts_with("cache-"))
                .collect();
            let mut distinct = caches.clone();
            distinct.sort();
            distinct.dedup();
            assert_eq!(
                caches.len(),
                distinct.len(),
                "anti-affinity holds on {}",
                node.name
            );
        }
        assert!(objects.iter().any(|o| o["kind"] == "PodDisruptionBudget"));
        let names: std::collections::BTreeSet<String> = objects
            .iter()
            .filter(|o| o["kind"] == "Pod")
            .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(names.len(), 40 * PODS_PER_NODE, "pod names are unique");
    }
}
