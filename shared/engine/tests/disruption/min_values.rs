//! `MIN_VALUES_POLICY` in consolidation: the disruption function plans replacements
//! under the same policy as the provisioner, read from its own setting.

use nodewright_core::api::model::{BudgetNodes, NodePool, NodeRequirement, Operator};
use nodewright_core::scheduling::requirements::MinValuesPolicy;
use nodewright_core::testing::node_pool;
use nodewright_core::well_known::LABEL_CAPACITY_TYPE;
use nodewright_engine::{
    Disrupter, DisruptionConfig, Provisioner, ProvisionerConfig, default_decider,
};

use super::{System, keep_on_nodes};

/// On-demand m5.large, c5.large, m5.2xlarge and c5.2xlarge with `instance-family`
/// minValues 3: two families, so no claim ever keeps it. Both families have a type
/// cheaper than a 2xlarge: a replacement's cheaper options keep the two a relaxed
/// minValues asks for (consolidation refuses one whose cheaper options do not, under
/// either policy, as Karpenter).
fn two_family_pool() -> NodePool {
    let req = |key: &str, operator: Operator, values: &[&str], min: Option<u32>| NodeRequirement {
        key: key.into(),
        operator,
        values: values.iter().map(|v| v.to_string()).collect(),
        min_values: min,
    };
    let mut pool = node_pool(
        "general-purpose",
        vec![
            req(LABEL_CAPACITY_TYPE, Operator::In, &["on-demand"], None),
            req(
                "node.kubernetes.io/instance-type",
                Operator::In,
                &["m5.large", "c5.large", "m5.2xlarge", "c5.2xlarge"],
                None,
            ),
            req(
                "karpenter.k8s.aws/instance-family",
                Operator::Exists,
                &[],
                Some(3),
            ),
        ],
    );
    pool.disruption.budgets[0].nodes = BudgetNodes::Percent(100);
    pool
}

/// Core's decisions; the provisioner under BestEffort (so there is a node at all), the
/// disruption function under `disruption`.
fn system(disruption: MinValuesPolicy) -> System {
    let mut sys = System::deciding_with_core(two_family_pool());
    let mut provisioning = ProvisionerConfig::new("test-cluster", "provisioner-1");
    provisioning.min_values_policy = MinValuesPolicy::BestEffort;
    sys.provisioner =
        Provisioner::new(sys.world.ports(), provisioning).with_decider(default_decider());
    let mut disrupting = DisruptionConfig::new("test-cluster", "disruption-1");
    disrupting.min_values_policy = disruption;
    sys.disrupter = Disrupter::new(sys.world.ports(), disrupting).with_decider(default_decider());
    sys
}

/// Six pods on one 2xlarge, then five of them gone.
async fn one_oversized_node(sys: &System) -> String {
    sys.add_pods("web", 6);
    sys.provision(2).await;
    let nodes = sys.live_nodes();
    assert_eq!(nodes.len(), 1, "{:#?}", sys.claims());
    keep_on_nodes(sys, &nodes, &[1]);
    nodes[0].clone()
}

#[tokio::test(start_paused = true)]
async fn consolidation_replaces_only_when_its_own_policy_relaxes_the_replacements_min_values() {
    // Strict: the replacement cannot keep minValues 3, so the node stays.
    let sys = system(MinValuesPolicy::Strict);
    let node = one_oversized_node(&sys).await;
    sys.run(4).await;
    assert_eq!(sys.live_nodes(), vec![node]);
    assert_eq!(sys.world.cloud.instances().len(), 1, "no replacement");

    // BestEffort: replaced by a cheaper node whose minValues is lowered to 2.
    let sys = system(MinValuesPolicy::BestEffort);
    let node = one_oversized_node(&sys).await;
    let before = sys.instance_of(&node).price;
    sys.run(4).await;
    let nodes = sys.live_nodes();
    assert_eq!(nodes.len(), 1, "{:#?}", sys.decisions("disruption"));
    assert_ne!(nodes[0], node, "{:#?}", sys.decisions("disruption"));
    let replacement = sys.instance_of(&nodes[0]);
    assert!(
        replacement.price < before,
        "{} is not cheaper",
        replacement.price
    );
    assert_eq!(sys.pods_on(&nodes[0]), 1);
    sys.assert_settled();
}
