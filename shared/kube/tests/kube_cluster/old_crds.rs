//! A cluster that installed Karpenter v1.1.1's CRDs and never upgraded them: no
//! NodeOverlay or CapacityBuffer kind, a NodePool without `status.nodes` (and without
//! `spec.replicas` or a scale subresource). nodewright reads, writes status and mirrors
//! claims there as anywhere; each missing kind is asked about once per interval (5
//! minutes; shortened here) with one warning, and the status field the old CRD lacks is
//! found once (with one warning) and left out. Nothing is logged at error.

use std::cell::RefCell;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use nodewright_engine::ports::{Cluster, Condition, ObjectKind, StatusUpdate};
use nodewright_kube::MISSING_KIND_RETRY;
use nodewright_kube::testing::{Crds, Options};
use serde_json::json;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

use super::mirror::{every_kind_of_claim, table};
use super::{Setup, T0, condition_of, default_node_class, eventually, kubectl, node_pool, setup};

const NODE_OVERLAYS_PATH: &str = "/apis/karpenter.sh/v1alpha1/nodeoverlays";

/// What was logged at WARN or above on the thread that asked (the test's runtime runs
/// the view's watch tasks too), as "target field=value ...".
#[derive(Clone, Default)]
struct Logged(Arc<Mutex<Vec<(Level, String)>>>);

impl Logged {
    fn at(&self, level: Level) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(l, _)| *l == level)
            .map(|(_, line)| line.clone())
            .collect()
    }
}

thread_local! {
    static CAPTURE: RefCell<Option<Logged>> = const { RefCell::new(None) };
}

/// The process's subscriber (a scoped one misses events when another thread registered
/// their callsite first): each event goes to the capture of the thread that logs it.
struct ByThread;

struct Line(String);

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!(" {}={value:?}", field.name()));
    }
}

impl Subscriber for ByThread {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        *metadata.level() <= Level::WARN
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        CAPTURE.with(|capture| {
            if let Some(logged) = capture.borrow().as_ref() {
                let mut line = Line(event.metadata().target().to_string());
                event.record(&mut line);
                logged
                    .0
                    .lock()
                    .unwrap()
                    .push((*event.metadata().level(), line.0));
            }
        });
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// Captures what this thread logs from now on.
fn capture_logs() -> Logged {
    static INSTALLED: OnceLock<bool> = OnceLock::new();
    let installed =
        INSTALLED.get_or_init(|| tracing::subscriber::set_global_default(ByThread).is_ok());
    assert!(installed, "another global tracing subscriber is installed");
    let logged = Logged::default();
    CAPTURE.with(|capture| *capture.borrow_mut() = Some(logged.clone()));
    logged
}

async fn old_cluster(retry: Duration) -> Setup {
    let mut t = setup(Options::api_server_only().with_crds(Crds::Karpenter1_1_1)).await;
    t.cluster = t.cluster.clone().with_missing_kind_retry(retry);
    t
}

#[tokio::test]
async fn a_cluster_with_karpenter_1_1_crds_works_with_one_warning_per_thing_it_lacks() {
    let logged = capture_logs();
    const RETRY: Duration = Duration::from_secs(3);
    assert!(RETRY < MISSING_KIND_RETRY);
    let t = old_cluster(RETRY).await;
    assert!(
        !t.cp
            .info()
            .crds
            .iter()
            .any(|c| c == "nodeoverlays.karpenter.sh"),
        "{:?}",
        t.cp.info().crds
    );
    t.cp.put(default_node_class()).await;
    t.cp.put(node_pool("general-purpose")).await;
    t.cp.put(node_pool("batch")).await;

    // The state reads: the pools and class, no overlays, nothing invalid or unreadable.
    let first_read = Instant::now();
    let state = t.cluster.state().await.expect("state");
    assert_eq!(state.node_pools.len(), 2);
    assert_eq!(state.node_classes.len(), 1);
    assert!(state.node_overlays.is_empty());
    assert!(state.invalid.is_empty(), "{:?}", state.invalid);
    assert!(state.unreadable.is_empty(), "{:?}", state.unreadable);

    // Status writes: the conditions and the node count, which the old NodePool lacks.
    let mut update = StatusUpdate {
        conditions: vec![Condition::met("Ready")],
        fields: Default::default(),
    };
    update.fields.insert("nodes".into(), json!(2));
    for pool in ["general-purpose", "batch"] {
        let changed = t
            .cluster
            .update_status(ObjectKind::NodePool, pool, &update, T0)
            .await
            .expect("written without the count");
        assert!(changed, "{pool}");
        let stored = t.cp.get("NodePool", None, pool).await.unwrap();
        assert_eq!(condition_of(&stored, "Ready")["status"], "True");
        assert!(stored["status"].get("nodes").is_none(), "{stored:#}");
    }
    let dry_runs = t
        .proxy
        .requests()
        .iter()
        .filter(|r| r.query.contains("dryRun=All"))
        .count();
    assert_eq!(
        dry_runs, 1,
        "the missing field is found once, for the first pool"
    );
    // Unchanged: nothing more to write (not the count, every tick, in vain).
    assert!(
        !t.cluster
            .update_status(ObjectKind::NodePool, "batch", &update, T0 + 60)
            .await
            .expect("read")
    );

    // Mirrors: the v1.1.1 NodeClaim schema takes every one of them.
    let claims = every_kind_of_claim();
    let report = t.cluster.mirror_claims(&claims).await.expect("mirrored");
    assert_eq!(report.created.len(), claims.len(), "{report:?}");
    let rows = table(&kubectl(&t.cp, &["get", "nodeclaims"]));
    assert_eq!(rows.len(), claims.len());

    // The missing kind: asked about again every interval, never more often.
    eventually(
        "NodeOverlays are asked about again",
        Duration::from_secs(60),
        || async { t.proxy.count_lists(NODE_OVERLAYS_PATH) >= 3 },
    )
    .await;
    for _ in 0..5 {
        t.cluster.state().await.expect("a read");
    }
    // Each list after the first waits a whole interval after the one before.
    let lists = t.proxy.count_lists(NODE_OVERLAYS_PATH);
    let elapsed = first_read.elapsed();
    let intervals = elapsed.as_secs_f64() / RETRY.as_secs_f64();
    assert!(
        (lists as f64) <= intervals.floor() + 1.0,
        "{lists} lists of nodeoverlays in {elapsed:?}"
    );

    let errors = logged.at(Level::ERROR);
    assert!(errors.is_empty(), "{errors:#?}");
    let warnings = logged.at(Level::WARN);
    let about = |needle: &str| warnings.iter().filter(|w| w.contains(needle)).count();
    assert_eq!(about("nodeoverlays"), 1, "{warnings:#?}");
    // v1.1's CRDs have no CapacityBuffer either (it came with v1.14).
    assert_eq!(about("capacitybuffers"), 1, "{warnings:#?}");
    assert_eq!(about("status fields"), 1, "{warnings:#?}");
    assert_eq!(warnings.len(), 3, "{warnings:#?}");
}

#[tokio::test]
async fn a_crd_installed_later_is_seen_at_the_next_ask() {
    let t = old_cluster(Duration::from_secs(2)).await;
    let state = t.cluster.state().await.expect("state");
    assert!(state.node_overlays.is_empty());

    let crd = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/kube/crds/karpenter-v1.15.1/karpenter.sh_nodeoverlays.yaml");
    kubectl(&t.cp, &["create", "-f", crd.to_str().unwrap()]);
    kubectl(
        &t.cp,
        &[
            "wait",
            "--for=condition=Established",
            "crd/nodeoverlays.karpenter.sh",
        ],
    );
    t.cp.put(
        json!({"apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
        "metadata": {"name": "savings"},
        "spec": {"requirements": [], "priceAdjustment": "-10%"}}),
    )
    .await;

    eventually(
        "the overlay is read once the kind is served",
        Duration::from_secs(60),
        || async {
            let state = t.cluster.state().await.expect("state");
            state.node_overlays.len() == 1
        },
    )
    .await;
}
