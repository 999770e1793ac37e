//! The emulated cluster against moto and a real control plane: an instance the
//! provisioner launches joins as a node that KWOK turns Ready, the real scheduler binds
//! the Deployment's pods there and KWOK runs them; when EC2 takes the instance back,
//! the node goes unreachable, the cloud controller deletes it, podgc collects its pods,
//! the Deployment brings them back, and the observer says which budget that broke.

use std::time::{Duration, Instant};

use serde_json::json;

use nodewright_core::nodeclaim::ClaimState;
use nodewright_engine::{Provisioner, ProvisionerConfig};
use nodewright_lambda::build_ports;
use nodewright_testkit::{ClusterBehaviour, GoneBy, Timings, emulated_cluster, wait_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn an_instance_joins_runs_the_pods_and_when_ec2_takes_it_back_they_come_back_pending() {
    let world = emulated_cluster("kit", "on-demand", 2).await;
    world
        .api
        .put(json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}
        }))
        .await;
    let cluster = ClusterBehaviour::start(&world, Timings::default()).await;
    assert_eq!(
        cluster.pending_pods().len(),
        2,
        "{:?}",
        cluster.placements()
    );
    let (ports, _) = build_ports(&world.config).await.expect("ports");
    let provisioner = Provisioner::new(ports, ProvisionerConfig::new(world.cluster.clone(), "kit"));

    let running = wait_until(Duration::from_secs(60), || async {
        provisioner.tick().await.expect("a provisioner tick");
        let claims = world.claims().await;
        cluster.running().len() == 2
            && !claims.is_empty()
            && claims.iter().all(|c| c.state == ClaimState::Initialized)
    })
    .await;
    let claims = world.claims().await;
    assert!(
        running,
        "the pods never ran: {:?}; nodes {:#?}; claims {claims:#?}; errors {:?}",
        cluster.placements(),
        cluster.nodes(),
        cluster.errors()
    );
    assert_eq!(claims.len(), 1, "{claims:#?}");
    let instance = claims[0].instance_id.clone().expect("an instance");
    let life = cluster.instance(&instance).expect("seen");
    let node_name = life.node.clone().expect("registered");
    assert!(life.registered_at.is_some() && life.booted_at.is_some() && life.ready_at.is_some());
    let node = world
        .api
        .get("Node", None, &node_name)
        .await
        .expect("the node");
    assert_eq!(
        node["spec"]["providerID"],
        format!("aws:///{}/{instance}", claims[0].zone.clone().unwrap())
    );
    assert_eq!(
        node["metadata"]["labels"]["karpenter.sh/nodepool"],
        "general-purpose"
    );
    let lease = world
        .api
        .get("Lease", Some("kube-node-lease"), &node_name)
        .await
        .expect("KWOK holds the node's lease");
    assert!(
        !lease["spec"]["holderIdentity"]
            .as_str()
            .unwrap_or_default()
            .starts_with("testkit-"),
        "{lease}"
    );
    for (pod, node, phase) in cluster.placements() {
        assert_eq!(
            (node.as_deref(), phase.as_str()),
            (Some(node_name.as_str()), "Running"),
            "{pod}"
        );
    }
    assert_eq!(cluster.violations(), Vec::<String>::new());

    // EC2 takes the instance back; nobody drains it. The node is unreachable 20 s after
    // its last heartbeat, then deleted; podgc collects its pods 40 to 80 s after that.
    cluster.kill_at(&instance, Instant::now());
    let gone = wait_until(Duration::from_secs(180), || async {
        cluster.deleted_by_cloud() == vec![node_name.clone()] && cluster.lost().len() == 2
    })
    .await;
    assert!(
        gone,
        "the node was not deleted by the cloud, or its pods not collected: deleted {:?}, lost {:?}, pods {:?}, nodes {:#?}",
        cluster.deleted_by_cloud(),
        cluster.lost(),
        cluster.placements(),
        cluster.nodes()
    );
    assert_eq!(cluster.killed(), vec![instance.clone()]);
    let life = cluster.instance(&instance).expect("seen");
    assert!(
        life.gone_at.is_some() && life.kubelet_stopped_at.is_some(),
        "{life:?}"
    );
    for (pod, by) in cluster.lost() {
        assert!(
            matches!(&by, GoneBy::NodeDeleted(n) | GoneBy::NodeLost(n) if *n == node_name),
            "{pod}: {by:?}"
        );
    }
    // The Deployment brought them back, pending: no node is left.
    let pending = wait_until(Duration::from_secs(30), || async {
        cluster.pending_pods().len() == 2
    })
    .await;
    assert!(pending, "{:?}", cluster.placements());
    let violations = cluster.violations();
    assert!(
        !violations.is_empty()
            && violations
                .iter()
                .all(|v| v.contains("PodDisruptionBudget default/web")),
        "losing both pods broke the budget: {violations:?}"
    );
}
