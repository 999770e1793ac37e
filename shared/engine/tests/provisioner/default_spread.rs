//! The cluster's default topology spread (`NODEWRIGHT_SCHEDULER_CONFIG`): the
//! provisioner gives pods without constraints of their own the defaults, with the
//! selector deduced from the gathered Services and controllers, before it plans.

use std::collections::BTreeMap;

use nodewright_core::cluster::{ControllerRef, ControllerSelector, LabelSelector, Service};
use nodewright_core::default_spread::SchedulerConfig;
use nodewright_core::testing::pod;

use super::Env;

/// Three pending pods of ReplicaSet `web-abc` (3 CPUs each), the ReplicaSet and a
/// Service selecting them.
fn replica_set_pending(env: &Env) {
    let labels = BTreeMap::from([("app".to_string(), "web".to_string())]);
    for i in 0..3 {
        let mut p = pod(&format!("web-abc-{i}"), "3", "4Gi");
        p.labels = labels.clone().into();
        p.controller = Some(std::sync::Arc::new(ControllerRef {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: "web-abc".into(),
        }));
        env.cluster.add_pod(p);
    }
    env.cluster.with_state(|s| {
        s.controllers.push(ControllerSelector {
            kind: "ReplicaSet".into(),
            namespace: "default".into(),
            name: "web-abc".into(),
            selector: Some(LabelSelector {
                match_labels: labels.clone(),
                match_expressions: vec![],
            }),
        });
        s.services.push(Service {
            namespace: "default".into(),
            name: "web".into(),
            selector: Some(labels.clone()),
        });
    });
}

fn zones_launched(env: &Env) -> Vec<String> {
    let mut zones: Vec<String> = env
        .cloud
        .instances()
        .into_iter()
        .map(|i| i.instance.zone)
        .collect();
    zones.sort();
    zones.dedup();
    zones
}

#[tokio::test]
async fn a_replica_sets_pods_are_launched_across_the_zones_the_scheduler_config_spreads_them() {
    let plain = Env::new();
    replica_set_pending(&plain);
    plain.provisioner().tick().await.expect("tick");
    assert!(
        zones_launched(&plain).len() < 3,
        "{:?}",
        zones_launched(&plain)
    );

    let spread = Env::new();
    replica_set_pending(&spread);
    let config = SchedulerConfig::parse(
        "podTopologySpread:\n  defaultConstraints:\n    - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule}\n",
    )
    .unwrap();
    spread
        .provisioner_with(|c| c.scheduler_config = config)
        .tick()
        .await
        .expect("tick");
    assert_eq!(
        zones_launched(&spread),
        ["us-east-1a", "us-east-1b", "us-east-1c"]
    );
}
