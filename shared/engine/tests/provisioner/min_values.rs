//! `MIN_VALUES_POLICY` through the provisioner's tick: Strict leaves pods pending on an
//! unkeepable minValues; BestEffort launches with the minimum lowered and says so.

use std::sync::Arc;

use nodewright_core::api::model::{NodeRequirement, Operator};
use nodewright_core::catalog::Catalog;
use nodewright_core::scheduling::requirements::MinValuesPolicy;
use nodewright_core::testing::{general_purpose_pool, pod, req};
use nodewright_engine::fakes::{FakeCloud, FakeCluster, ManualClock, MemoryStore, node_class};
use nodewright_engine::ports::{EventType, Store};
use nodewright_engine::provision::MinValuesRelaxed;
use nodewright_engine::{Ports, Provisioner, ProvisionerConfig};

const FAMILY: &str = "karpenter.k8s.aws/instance-family";

/// A cluster whose one NodePool allows three types of two families with
/// `instance-family` minValues 3, and one pending pod; the provisioner under `policy`.
fn cluster_under(
    policy: MinValuesPolicy,
) -> (
    Provisioner,
    Arc<FakeCluster>,
    Arc<FakeCloud>,
    Arc<MemoryStore>,
) {
    let clock = Arc::new(ManualClock::default());
    let catalog = Catalog::embedded().clone();
    let cloud = Arc::new(FakeCloud::new(
        catalog.clone(),
        &["us-east-1a", "us-east-1b", "us-east-1c"],
        clock.clone(),
    ));
    let cluster = Arc::new(FakeCluster::new(Arc::new(catalog)));
    let mut pool = general_purpose_pool();
    pool.requirements.push(req(
        "node.kubernetes.io/instance-type",
        Operator::In,
        &["m5.large", "m5.xlarge", "c5.xlarge"],
    ));
    pool.requirements.push(NodeRequirement {
        key: FAMILY.into(),
        operator: Operator::Exists,
        values: vec![],
        min_values: Some(3),
    });
    cluster.with_state(|s| {
        s.node_pools.push(pool);
        s.node_classes.push(node_class("default"));
    });
    cluster.add_pod(pod("web-0", "1", "2Gi"));
    let store = Arc::new(MemoryStore::new());
    let ports = Ports {
        cloud: cloud.clone(),
        cluster: cluster.clone(),
        store: store.clone(),
        clock,
    };
    let mut config = ProvisionerConfig::new("test-cluster", "holder-a");
    config.min_values_policy = policy;
    (Provisioner::new(ports, config), cluster, cloud, store)
}

#[tokio::test]
async fn strict_leaves_the_pod_pending_with_the_min_values_it_cannot_keep() {
    let (provisioner, cluster, cloud, _) = cluster_under(MinValuesPolicy::Strict);
    let report = provisioner.tick().await.unwrap();
    assert!(report.launched.is_empty());
    assert!(cloud.instances().is_empty());
    assert!(report.min_values_relaxed.is_empty());
    assert_eq!(report.unschedulable.len(), 1);
    assert!(
        report.unschedulable[0].reason.contains("minValues 3"),
        "{:?}",
        report.unschedulable
    );
    assert!(
        !cluster
            .events()
            .iter()
            .any(|e| e.reason == "MinValuesRelaxed")
    );
}

#[tokio::test]
async fn best_effort_launches_with_the_minimum_lowered_and_an_event_on_the_node_pool() {
    let (provisioner, cluster, cloud, store) = cluster_under(MinValuesPolicy::BestEffort);
    let report = provisioner.tick().await.unwrap();
    assert!(
        report.unschedulable.is_empty(),
        "{:?}",
        report.unschedulable
    );
    assert_eq!(report.launched.len(), 1);
    assert_eq!(cloud.instances().len(), 1);
    let claim = report.launched[0].name.clone();
    assert_eq!(
        report.min_values_relaxed,
        vec![MinValuesRelaxed {
            claim: claim.clone(),
            node_pool: "general-purpose".into(),
            keys: vec![(FAMILY.into(), 3, 2)],
        }]
    );
    let events = cluster.events();
    let relaxed: Vec<_> = events
        .iter()
        .filter(|e| e.reason == "MinValuesRelaxed")
        .collect();
    assert_eq!(relaxed.len(), 1, "{events:?}");
    assert_eq!(relaxed[0].kind, "NodePool");
    assert_eq!(relaxed[0].name, "general-purpose");
    assert_eq!(relaxed[0].event_type, EventType::Normal);
    assert_eq!(
        relaxed[0].message,
        format!(
            "NodeClaim {claim} launched with minValues relaxed ({FAMILY} from 3 to 2): the instance types that fit its pods cannot keep the NodePool's minimum (MIN_VALUES_POLICY=BestEffort)"
        )
    );
    let decisions = store.decisions(0).await.unwrap();
    assert!(
        decisions
            .iter()
            .any(|d| d.action.contains("minValues relaxed") && d.reason.contains("default/web-0")),
        "{decisions:?}"
    );
}
