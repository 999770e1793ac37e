//! A claim whose instance-type options a NodeOverlay priced or sized says so, through
//! the provisioner's tick: the stored claim and its NodeClaim mirror carry the facts
//! behind Karpenter's `karpenter.sh/price-overlay-applied` and
//! `karpenter.sh/capacity-overlay-applied` annotations (the Kubernetes adapter writes
//! them, see `nodewright_kube::mirror`).

use nodewright_engine::ports::ClaimStore;
use std::sync::Arc;

use nodewright_core::api::model::Operator;
use nodewright_core::catalog::Catalog;
use nodewright_core::overlay::OverlaysApplied;
use nodewright_core::testing::{general_purpose_pool, pod, req};
use nodewright_engine::{Ports, Provisioner, ProvisionerConfig};
use nodewright_sim::fakes::{FakeCloud, FakeCluster, ManualClock, MemoryStore, node_class};

/// A price overlay on m5 and a device overlay on c5, as read from a cluster.
const OVERLAYS: &str = "apiVersion: karpenter.sh/v1alpha1\nkind: NodeOverlay\nmetadata: {name: savings}\nspec:\n  requirements: [{key: karpenter.k8s.aws/instance-family, operator: In, values: [m5]}]\n  priceAdjustment: \"-30%\"\n---\napiVersion: karpenter.sh/v1alpha1\nkind: NodeOverlay\nmetadata: {name: devices}\nspec:\n  requirements: [{key: karpenter.k8s.aws/instance-family, operator: In, values: [c5]}]\n  capacity: {example.com/device: \"2\"}\n";

struct Env {
    provisioner: Provisioner,
    cluster: Arc<FakeCluster>,
    store: Arc<MemoryStore>,
}

/// One pool of c5.large and m5.large on demand, both overlays, and `pods`.
fn env(pods: Vec<nodewright_core::cluster::Pod>) -> Env {
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
        &["c5.large", "m5.large"],
    ));
    pool.requirements.push(req(
        "karpenter.sh/capacity-type",
        Operator::In,
        &["on-demand"],
    ));
    cluster.with_state(|s| {
        s.node_pools.push(pool);
        s.node_classes.push(node_class("default"));
    });
    let overlays = nodewright_core::api::load(&[("overlays.yaml".into(), OVERLAYS.into())])
        .unwrap_or_else(|e| panic!("{e}"))
        .node_overlays;
    cluster.set_node_overlays(overlays.into_iter().map(Ok).collect());
    for p in pods {
        cluster.add_pod(p);
    }
    let store = Arc::new(MemoryStore::new());
    let ports = Ports::new(cloud, cluster.clone(), store.clone(), clock);
    let config = ProvisionerConfig::new("test-cluster", "holder-a");
    Env {
        provisioner: Provisioner::new(ports, config),
        cluster,
        store,
    }
}

#[tokio::test]
async fn a_claim_with_price_and_capacity_overlaid_options_is_mirrored_saying_both() {
    let env = env(vec![pod("web-0", "1", "2Gi")]);
    let report = env.provisioner.tick().await.unwrap();
    let name = report.launched[0].name.clone();
    let stored = env.store.get_claim(&name).await.unwrap().expect("stored");
    // Both types fit: m5.large (priced by one overlay) and c5.large (sized by the other).
    assert_eq!(stored.instance_type_options.len(), 2, "{stored:#?}");
    let both = OverlaysApplied {
        price: true,
        capacity: true,
    };
    assert_eq!(stored.overlays_applied, both);
    assert_eq!(env.cluster.mirrors()[&name].overlays_applied, both);
}

#[tokio::test]
async fn a_claim_only_the_sized_type_can_take_is_mirrored_with_capacity_applied_only() {
    let mut device = pod("dev-0", "1", "1Gi");
    device.requests.set_milli("example.com/device", 2000);
    let env = env(vec![device]);
    let report = env.provisioner.tick().await.unwrap();
    let name = report.launched[0].name.clone();
    let mirrored = &env.cluster.mirrors()[&name];
    assert_eq!(*mirrored.instance_type_options, ["c5.large"]);
    assert_eq!(
        mirrored.overlays_applied,
        OverlaysApplied {
            price: false,
            capacity: true
        }
    );
}
