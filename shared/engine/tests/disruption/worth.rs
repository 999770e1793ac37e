//! When a node is worth disrupting, through the disruption function with core's
//! decisions: do-not-disrupt durations, an invalid do-not-disrupt (ignored, with a
//! warning on the pod), and Balanced scores in the decision log.

use nodewright_core::api::model::ConsolidationPolicy;
use nodewright_core::testing::pod;
use nodewright_engine::ports::EventType;

use super::{System, delete_pods_on, m5_pool, scale_down, two_full_nodes_of};

/// Two full nodes, the first emptied but for `batch-0` (100m), as `edit` leaves it.
async fn one_batch_pod(edit: impl FnOnce(&mut nodewright_core::cluster::Pod)) -> (System, String) {
    let sys = two_full_nodes_of(System::deciding_with_core(m5_pool())).await;
    let nodes = sys.live_nodes();
    delete_pods_on(&sys, &nodes[0]);
    let mut p = pod("batch-0", "100m", "128Mi");
    p.node_name = Some(nodes[0].clone());
    p.started_at = Some(sys.world.now());
    edit(&mut p);
    sys.world.cluster.add_pod(p);
    (sys, nodes[0].clone())
}

#[tokio::test(start_paused = true)]
async fn a_do_not_disrupt_duration_keeps_a_node_until_it_passes_and_then_it_goes() {
    let (sys, node) = one_batch_pod(|p| p.do_not_disrupt_for = Some(600)).await;
    // The other node stays put (a pod there says so), and has room for batch-0.
    let other = sys.live_nodes().into_iter().find(|n| *n != node).unwrap();
    let mut pinned = pod("pinned", "100m", "128Mi");
    pinned.node_name = Some(other.clone());
    pinned.do_not_disrupt = true;
    sys.world.cluster.add_pod(pinned);

    sys.run(3).await;

    assert!(sys.live_nodes().contains(&node), "protected for 10 minutes");
    let kept = format!("keep {node} (DoNotDisrupt)");
    assert!(
        sys.decisions("disruption")
            .iter()
            .any(|d| d.starts_with(&kept) && d.contains("from its start, until")),
        "{:#?}",
        sys.decisions("disruption")
    );
    assert_eq!(
        sys.decisions("disruption")
            .iter()
            .filter(|d| d.starts_with(&kept))
            .count(),
        1,
        "recorded once while the reason holds: {:#?}",
        sys.decisions("disruption")
    );

    sys.run(12).await;

    assert_eq!(
        sys.live_nodes(),
        std::slice::from_ref(&other),
        "{:#?}",
        sys.decisions("disruption")
    );
    assert_eq!(sys.pods_on(&other), 5, "batch-0 moved over");
    sys.assert_settled();
}

#[tokio::test(start_paused = true)]
async fn an_invalid_do_not_disrupt_is_ignored_and_the_pod_is_warned_once() {
    let (sys, node) = one_batch_pod(|p| {
        p.do_not_disrupt_invalid = Some((
            "forever".into(),
            "\"forever\" is neither \"true\" nor a duration such as \"30m\" or \"1h30m\"".into(),
        ))
    })
    .await;

    sys.run(5).await;

    assert!(
        !sys.live_nodes().contains(&node),
        "the annotation is ignored"
    );
    let warned = sys.events("InvalidDoNotDisruptAnnotation", "batch-0");
    assert_eq!(warned.len(), 1, "{warned:#?}");
    assert_eq!(warned[0].kind, "Pod");
    assert_eq!(warned[0].namespace.as_deref(), Some("default"));
    assert_eq!(warned[0].event_type, EventType::Warning);
    assert!(
        warned[0].message.contains("\"forever\" is neither"),
        "{}",
        warned[0].message
    );
    sys.assert_settled();
}

#[tokio::test(start_paused = true)]
async fn a_balanced_pool_consolidates_a_move_worth_it_and_logs_its_score() {
    let mut pool = m5_pool();
    pool.disruption.consolidation_policy = ConsolidationPolicy::Balanced;
    let sys = two_full_nodes_of(System::deciding_with_core(pool)).await;
    let nodes = sys.live_nodes();
    // One pod on the first node, two on the second: deleting the first saves half the
    // pool's cost for 2 of its 5 disruption: 0.5 / 0.4 = 1.25.
    scale_down(&sys, &nodes);

    sys.run(4).await;

    assert_eq!(sys.live_nodes().len(), 1);
    sys.assert_settled();
    assert!(
        sys.decisions("disruption").iter().any(|d| d.contains(
            "consolidation score 1.25 >= threshold 0.50 (k: 2, savings 50.0%, disruption 40.0% of NodePool \"general-purpose\")"
        )),
        "{:#?}",
        sys.decisions("disruption")
    );
}
