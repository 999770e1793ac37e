//! `MIN_VALUES_POLICY` through the provisioner's tick: Strict leaves pods pending on an
//! unkeepable minValues; BestEffort launches with the minimum lowered and says so.

use nodewright_core::api::model::{NodeRequirement, Operator};
use nodewright_core::scheduling::requirements::MinValuesPolicy;
use nodewright_core::testing::req;
use nodewright_engine::ports::DecisionLog;
use nodewright_engine::ports::EventType;
use nodewright_engine::provision::MinValuesRelaxed;

use super::Env;

const FAMILY: &str = "karpenter.k8s.aws/instance-family";

/// The parent's fakes, the NodePool allowing three types of two families with
/// `instance-family` minValues 3, and one pending pod.
fn env_with_unkeepable_min_values() -> Env {
    let env = Env::new();
    env.require([
        req(
            "node.kubernetes.io/instance-type",
            Operator::In,
            &["m5.large", "m5.xlarge", "c5.xlarge"],
        ),
        NodeRequirement {
            key: FAMILY.into(),
            operator: Operator::Exists,
            values: vec![],
            min_values: Some(3),
        },
    ]);
    env.add_pods("web", 1);
    env
}

#[tokio::test]
async fn strict_leaves_the_pod_pending_with_the_min_values_it_cannot_keep() {
    let env = env_with_unkeepable_min_values();
    let report = env
        .provisioner_with(|c| c.min_values_policy = MinValuesPolicy::Strict)
        .tick()
        .await
        .unwrap();
    assert!(report.launched.is_empty());
    assert!(env.cloud.instances().is_empty());
    assert!(report.min_values_relaxed.is_empty());
    assert_eq!(report.unschedulable.len(), 1);
    assert!(
        report.unschedulable[0].reason.contains("minValues 3"),
        "{:?}",
        report.unschedulable
    );
    assert!(
        !env.cluster
            .events()
            .iter()
            .any(|e| e.reason == "MinValuesRelaxed")
    );
}

#[tokio::test]
async fn best_effort_launches_with_the_minimum_lowered_and_an_event_on_the_node_pool() {
    let env = env_with_unkeepable_min_values();
    let report = env
        .provisioner_with(|c| c.min_values_policy = MinValuesPolicy::BestEffort)
        .tick()
        .await
        .unwrap();
    assert!(
        report.unschedulable.is_empty(),
        "{:?}",
        report.unschedulable
    );
    assert_eq!(report.launched.len(), 1);
    assert_eq!(env.cloud.instances().len(), 1);
    let claim = report.launched[0].name.clone();
    assert_eq!(
        report.min_values_relaxed,
        vec![MinValuesRelaxed {
            claim: claim.clone(),
            node_pool: "general-purpose".into(),
            keys: vec![(FAMILY.into(), 3, 2)],
        }]
    );
    let events = env.cluster.events();
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
    let decisions = env.store.decisions(0).await.unwrap();
    assert!(
        decisions
            .iter()
            .any(|d| d.action.contains("minValues relaxed") && d.reason.contains("default/web-0")),
        "{decisions:?}"
    );
}
