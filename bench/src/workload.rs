//! The planner benchmarks' inputs: Karpenter's scheduling-benchmark shape (400 fake
//! instance types, pods in groups with spread and (anti-)affinity) and the "real"
//! setting (the embedded AWS catalog, a c/m/r NodePool, two DaemonSets, the simulator's
//! mixed workload). Every random draw comes from the simulator's seeded [`Rng`].

use std::collections::BTreeMap;

use nodewright_core::api::model::{NodePool, Operator};
use nodewright_core::catalog::{Catalog, InstanceType};
use nodewright_core::cluster::{
    ClusterSnapshot, DaemonSet, LabelSelector, Pod, PodAffinityTerm, PodFields, Toleration,
    TolerationOperator, TopologySpreadConstraint, WhenUnsatisfiable,
};
use nodewright_core::pricing::Pricing;
use nodewright_core::testing::{node_pool, req};
use nodewright_core::well_known::{
    LABEL_ARCH, LABEL_CAPACITY_TYPE, LABEL_HOSTNAME, LABEL_INSTANCE_CPU, LABEL_INSTANCE_MEMORY,
    LABEL_INSTANCE_TYPE, LABEL_OS, LABEL_ZONE,
};
use nodewright_sim::rng::Rng;
use nodewright_sim::workload::{BoundCluster, app_pod, bound_cluster, mixed_pods};
use serde_json::{Value, json};

/// Every generated workload's seed.
pub const SEED: u64 = 42;
pub const SYNTHETIC_TYPES: usize = 400;
pub const SYNTHETIC_ZONES: [&str; 3] = ["us-test-1a", "us-test-1b", "us-test-1c"];
pub const ZONES: [&str; 3] = ["us-east-1a", "us-east-1b", "us-east-1c"];
/// Node types of the bound clusters, smallest first: a node is the first that holds
/// its pods with [`NODE_HEADROOM`] to spare.
pub const CLUSTER_NODE_TYPES: [&str; 8] = [
    "m5.4xlarge",
    "m5.8xlarge",
    "r5.8xlarge",
    "m5.12xlarge",
    "r5.12xlarge",
    "m5.16xlarge",
    "r5.16xlarge",
    "m5.24xlarge",
];
pub const NODE_HEADROOM: f64 = 0.15;
pub const GIB: f64 = (1u64 << 30) as f64;

/// Pod mix of the synthetic suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Shape {
    /// Karpenter's benchmark as written: six equal groups (generic, zone spread, hostname
    /// spread, hostname pod affinity, zone pod affinity, hostname anti-affinity), labels
    /// and selectors drawn at random from a..g, memory from {100,256,512,1024,2048,4096}Mi.
    Karpenter,
    /// Five equal groups (generic, zone spread, hostname spread, zonal self-affinity,
    /// hostname self anti-affinity); selectors select the pod's own label, memory is
    /// uniform in 100..4096Mi.
    Five,
    /// Both shapes, one after the other.
    Both,
}

// ----- building blocks -------------------------------------------------------------

/// A pending pod in `default` requesting `cpu_milli` millicores and `mem_mib` MiB, which
/// kube-scheduler has marked Unschedulable.
pub fn pending_pod(
    name: String,
    cpu_milli: i64,
    mem_mib: i64,
    labels: BTreeMap<String, String>,
) -> Pod {
    Pod::from(PodFields {
        labels: labels.into(),
        marked_unschedulable: true,
        ..app_pod(name, "", cpu_milli, mem_mib).into_fields()
    })
}

pub fn labels(key: &str, value: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(key.to_string(), value.to_string())])
}

fn selects(key: &str, value: &str) -> LabelSelector {
    LabelSelector {
        match_labels: labels(key, value),
        match_expressions: vec![],
    }
}

fn spread_on(topology_key: &str, selector: LabelSelector) -> TopologySpreadConstraint {
    TopologySpreadConstraint {
        max_skew: 1,
        topology_key: topology_key.into(),
        when_unsatisfiable: WhenUnsatisfiable::DoNotSchedule,
        label_selector: Some(selector),
        min_domains: None,
        honor_node_affinity: true,
        honor_node_taints: false,
    }
}

fn term_on(topology_key: &str, selector: LabelSelector) -> PodAffinityTerm {
    PodAffinityTerm {
        label_selector: Some(selector),
        topology_key: topology_key.into(),
        namespaces: vec!["default".into()],
    }
}

// ----- synthetic: Karpenter's benchmark shape --------------------------------------

/// Karpenter's `fake.InstanceTypes(400)`: type i has i+1 vCPU, 2(i+1) GiB and 10(i+1)
/// pods; its price is Karpenter's `PriceFromResources`: 0.1 per vCPU + 0.1 per 10^9 bytes.
pub fn synthetic_catalog(types: usize) -> Catalog {
    let text = synthetic_catalog_json(types).to_string();
    Catalog::from_json(&text).expect("the synthetic catalog is well formed")
}

/// [`synthetic_catalog`] in the `--catalog` file format.
pub fn synthetic_catalog_json(types: usize) -> Value {
    let instance_types: Vec<Value> = (0..types)
        .map(|i| {
            let n = (i + 1) as u64;
            let price = 0.1 * n as f64 + 0.1 * (2 * n) as f64 * GIB / 1e9;
            json!({
                "name": format!("fake-it-{i}"),
                "labels": {
                    LABEL_INSTANCE_TYPE: format!("fake-it-{i}"),
                    LABEL_ARCH: "amd64",
                    LABEL_OS: "linux",
                    LABEL_INSTANCE_CPU: n.to_string(),
                    LABEL_INSTANCE_MEMORY: (2 * n * 1024).to_string(),
                },
                "allocatable": {"cpu": n.to_string(), "memory": format!("{}Gi", 2 * n), "pods": (10 * n).to_string()},
                "onDemandPricePerHour": price,
            })
        })
        .collect();
    json!({ "instanceTypes": instance_types })
}

/// Karpenter's fake offerings: every type in every zone, spot and on-demand at one price.
pub fn synthetic_pricing() -> Pricing {
    let mut pricing = Pricing::for_zones(SYNTHETIC_ZONES.map(String::from).to_vec());
    pricing.spot_fraction = 1.0;
    pricing
}

/// `test.NodePool()`: no requirements of its own; both capacity types allowed.
pub fn synthetic_pool() -> NodePool {
    node_pool(
        "default",
        vec![req(
            LABEL_CAPACITY_TYPE,
            Operator::In,
            &["spot", "on-demand"],
        )],
    )
}

/// Sets a synthetic pod's labels and constraints.
type PodShaper = Box<dyn FnMut(&mut Rng, &mut Pod)>;

/// The synthetic pods, deterministic for a seed.
pub fn synthetic_pods(count: usize, shape: Shape, seed: u64) -> Vec<Pod> {
    let mut rng = Rng::new(seed);
    let mut pods = Vec::with_capacity(count);
    let value = |rng: &mut Rng| rng.one_of(["a", "b", "c", "d", "e", "f", "g"]);
    let cpu = |rng: &mut Rng| rng.one_of([100, 250, 500, 1000, 1500]);
    let karpenter_memory = |rng: &mut Rng| rng.one_of([100, 256, 512, 1024, 2048, 4096]);
    let push = |pods: &mut Vec<Pod>, rng: &mut Rng, group: &str, mut make: PodShaper| {
        let (c, m) = match shape {
            Shape::Five => (cpu(rng), rng.range(100, 4096)),
            _ => (cpu(rng), karpenter_memory(rng)),
        };
        let mut p = pending_pod(format!("{group}-{}", pods.len()), c, m, BTreeMap::new());
        make(rng, &mut p);
        pods.push(p);
    };
    match shape {
        Shape::Five => {
            let per = count / 5;
            for _ in 0..per {
                push(
                    &mut pods,
                    &mut rng,
                    "generic",
                    Box::new(move |rng, p| p.labels = labels("my-label", value(rng)).into()),
                );
            }
            for (group, key) in [("zone-spread", LABEL_ZONE), ("host-spread", LABEL_HOSTNAME)] {
                for _ in 0..per {
                    push(
                        &mut pods,
                        &mut rng,
                        group,
                        Box::new(move |rng, p| {
                            let v = value(rng);
                            p.labels = labels("my-label", v).into();
                            p.topology_spread = vec![spread_on(key, selects("my-label", v))].into();
                        }),
                    );
                }
            }
            for _ in 0..per {
                push(
                    &mut pods,
                    &mut rng,
                    "zone-affinity",
                    Box::new(move |rng, p| {
                        let v = value(rng);
                        p.labels = labels("my-affinity", v).into();
                        p.pod_affinity =
                            vec![term_on(LABEL_ZONE, selects("my-affinity", v))].into();
                    }),
                );
            }
            for _ in 0..per {
                push(
                    &mut pods,
                    &mut rng,
                    "host-anti",
                    Box::new(|_, p| {
                        p.labels = labels("app", "nginx").into();
                        p.pod_anti_affinity =
                            vec![term_on(LABEL_HOSTNAME, selects("app", "nginx"))].into();
                    }),
                );
            }
        }
        _ => {
            // makeDiversePods: count/6 of each, the remainder generic.
            let per = count / 6;
            for _ in 0..per {
                push(
                    &mut pods,
                    &mut rng,
                    "generic",
                    Box::new(move |rng, p| p.labels = labels("my-label", value(rng)).into()),
                );
            }
            for (group, key) in [("zone-spread", LABEL_ZONE), ("host-spread", LABEL_HOSTNAME)] {
                for _ in 0..per {
                    push(
                        &mut pods,
                        &mut rng,
                        group,
                        Box::new(move |rng, p| {
                            p.labels = labels("my-label", value(rng)).into();
                            p.topology_spread =
                                vec![spread_on(key, selects("my-label", value(rng)))].into();
                        }),
                    );
                }
            }
            for (group, key) in [
                ("host-affinity", LABEL_HOSTNAME),
                ("zone-affinity", LABEL_ZONE),
            ] {
                for _ in 0..per {
                    push(
                        &mut pods,
                        &mut rng,
                        group,
                        Box::new(move |rng, p| {
                            p.labels = labels("my-affininity", value(rng)).into();
                            p.pod_affinity =
                                vec![term_on(key, selects("my-affininity", value(rng)))].into();
                        }),
                    );
                }
            }
            for _ in 0..per {
                push(
                    &mut pods,
                    &mut rng,
                    "host-anti",
                    Box::new(|_, p| {
                        p.labels = labels("app", "nginx").into();
                        p.pod_anti_affinity =
                            vec![term_on(LABEL_HOSTNAME, selects("app", "nginx"))].into();
                    }),
                );
            }
        }
    }
    while pods.len() < count {
        push(
            &mut pods,
            &mut rng,
            "generic",
            Box::new(move |rng, p| p.labels = labels("my-label", value(rng)).into()),
        );
    }
    pods
}

// ----- real: the AWS catalog and a mixed workload -----------------------------------

/// amd64 linux on-demand c/m/r, generation > 4.
pub fn real_pool() -> NodePool {
    node_pool(
        "default",
        vec![
            req(LABEL_ARCH, Operator::In, &["amd64"]),
            req(LABEL_OS, Operator::In, &["linux"]),
            req(LABEL_CAPACITY_TYPE, Operator::In, &["on-demand"]),
            req(
                "karpenter.k8s.aws/instance-category",
                Operator::In,
                &["c", "m", "r"],
            ),
            req(
                "karpenter.k8s.aws/instance-generation",
                Operator::Gt,
                &["4"],
            ),
        ],
    )
}

/// aws-node (25m, 40Mi) and kube-proxy (100m, 50Mi), tolerating every taint.
pub fn real_daemonsets() -> Vec<DaemonSet> {
    [("aws-node", 25, 40), ("kube-proxy", 100, 50)]
        .into_iter()
        .map(|(name, cpu, mem)| {
            let mut template = pending_pod(name.to_string(), cpu, mem, labels("k8s-app", name));
            template.namespace = "kube-system".into();
            template.daemonset_owned = true;
            template.tolerations = vec![Toleration {
                key: String::new(),
                operator: TolerationOperator::Exists,
                value: String::new(),
                effect: None,
            }]
            .into();
            DaemonSet {
                namespace: "kube-system".into(),
                name: name.into(),
                template,
            }
        })
        .collect()
}

/// `count` pods of the simulator's mixed workload
/// ([`nodewright_sim::workload::mixed_deployment`]), pending and marked
/// Unschedulable by kube-scheduler.
pub fn real_pods(count: usize, seed: u64) -> Vec<Pod> {
    let mut pods = mixed_pods(count, seed);
    for p in &mut pods {
        p.marked_unschedulable = true;
    }
    pods
}

pub fn real_snapshot(count: usize) -> ClusterSnapshot {
    ClusterSnapshot {
        pods: real_pods(count, SEED),
        daemonsets: real_daemonsets(),
        ..Default::default()
    }
}

/// A steady cluster of `nodes` nodes of [`CLUSTER_NODE_TYPES`] in [`ZONES`], NodePool
/// `default`, each running the two DaemonSets' pods and `per_node` pods of the real
/// workload.
pub fn real_cluster(nodes: usize, per_node: usize) -> Result<BoundCluster, String> {
    let catalog = Catalog::embedded();
    let types = CLUSTER_NODE_TYPES
        .iter()
        .map(|t| {
            catalog
                .get(t)
                .ok_or_else(|| format!("{t} is not in the embedded catalog"))
        })
        .collect::<Result<Vec<&InstanceType>, String>>()?;
    Ok(bound_cluster(
        real_pods(nodes * per_node, SEED),
        &real_daemonsets(),
        nodes,
        &types,
        &ZONES,
        "default",
        NODE_HEADROOM,
    ))
}

#[cfg(test)]
mod tests {
    use nodewright_core::provisioning::{ProvisioningInput, plan_provisioning};
    use nodewright_core::testing::violations;

    use super::*;

    #[test]
    fn the_synthetic_workload_at_100_pods_plans_without_breaking_a_constraint() {
        let catalog = synthetic_catalog(SYNTHETIC_TYPES);
        let pricing = synthetic_pricing();
        let pools = [synthetic_pool()];
        for shape in [Shape::Karpenter, Shape::Five] {
            let snapshot = ClusterSnapshot {
                pods: synthetic_pods(100, shape, SEED),
                ..Default::default()
            };
            assert_eq!(snapshot.pods.len(), 100);
            let plan = plan_provisioning(&ProvisioningInput {
                snapshot: &snapshot,
                node_pools: &pools,
                node_classes: &[],
                catalog: &catalog,
                pricing: &pricing,
                in_flight: &[],
            });
            let broken = violations(&plan, &snapshot, &pools, &catalog);
            assert!(broken.is_empty(), "{shape:?}: {broken:#?}");
            assert!(!plan.node_claims.is_empty());
        }
    }

    #[test]
    fn the_generators_are_deterministic_and_fill_the_requested_count() {
        let a = synthetic_pods(1_003, Shape::Karpenter, 7);
        let b = synthetic_pods(1_003, Shape::Karpenter, 7);
        assert_eq!(a, b);
        assert_eq!(a.len(), 1_003);
        assert_eq!(real_pods(501, 1).len(), 501);
        let catalog = synthetic_catalog(3);
        assert_eq!(catalog.types[2].allocatable.get_milli("pods"), 30_000);
        assert_eq!(catalog.types[2].labels[LABEL_INSTANCE_MEMORY], "6144");
    }
}
