//! ARC zonal shifts (opt-in, read through the Cloud port): while one is in force,
//! nothing launches in its zone and consolidation leaves the zone's nodes alone; when
//! it ends, both resume. Both jobs on the simulated world, with core's decisions.

use nodewright_core::api::model::BudgetNodes;
use nodewright_core::well_known::LABEL_ZONE;
use nodewright_engine::zonal_shift::{ZONAL_SHIFT_ACTIVE, ZONAL_SHIFT_CLEARED};

use super::{System, keep_on_nodes, pool_with_budget};

const SHIFTED: &str = "us-east-1a";

impl System {
    fn zone_of(&self, node: &str) -> String {
        self.world
            .cluster
            .nodes()
            .into_iter()
            .find(|n| n.name == node)
            .and_then(|n| n.labels.get(LABEL_ZONE).cloned())
            .unwrap_or_default()
    }

    /// The zones of the instances launched at or after `since`.
    fn zones_launched_since(&self, since: i64) -> Vec<String> {
        self.world
            .cloud
            .instances()
            .into_iter()
            .filter(|i| i.instance.launch_time >= since)
            .map(|i| i.instance.zone)
            .collect()
    }
}

#[tokio::test(start_paused = true)]
async fn a_zone_under_a_zonal_shift_gets_no_launch_and_keeps_its_nodes_until_the_shift_ends() {
    let sys = System::deciding_with_core(pool_with_budget(BudgetNodes::Percent(100)));
    sys.add_pods("web", 9);
    sys.provision(2).await;
    let nodes = sys.live_nodes();
    let in_shifted: Vec<String> = nodes
        .iter()
        .filter(|n| sys.zone_of(n) == SHIFTED)
        .cloned()
        .collect();
    assert_eq!(nodes.len(), 3, "{:#?}", sys.claims());
    assert!(!in_shifted.is_empty(), "a node in {SHIFTED}: {nodes:?}");

    // ARC shifts away from the zone for an hour; the cluster scales down to a pod a
    // node (one node's worth: consolidation would pack them) and a new app arrives
    // whose pods fit on none of the nodes there.
    let shift_started = sys.world.now();
    sys.world
        .cloud
        .start_zonal_shift(SHIFTED, "ZONAL_SHIFT", Some(shift_started + 3600));
    keep_on_nodes(&sys, &nodes, &[1, 1, 1]);
    for i in 0..2 {
        let mut p = nodewright_core::testing::pod(&format!("late-{i}"), "3", "1536Mi");
        p.labels.insert("app".into(), "late".into());
        sys.world.cluster.add_pod(p);
    }
    sys.run(6).await;

    let launched = sys.zones_launched_since(shift_started);
    assert!(!launched.is_empty(), "the new app needed capacity");
    assert!(
        launched.iter().all(|z| z != SHIFTED),
        "a launch in the shifted zone: {launched:?}"
    );
    let live = sys.live_nodes();
    assert!(
        in_shifted.iter().all(|n| live.contains(n)),
        "a node of the shifted zone was consolidated: {:#?}",
        sys.decisions("disruption")
    );
    assert_eq!(
        sys.events(ZONAL_SHIFT_ACTIVE, "general-purpose").len(),
        1,
        "the NodePool is told once: {:#?}",
        sys.world.cluster.events()
    );

    // ARC ends the shift: the zone's nodes are consolidated like any other again.
    sys.world.cloud.end_zonal_shifts();
    sys.run(6).await;
    assert_eq!(
        sys.events(ZONAL_SHIFT_CLEARED, "general-purpose").len(),
        1,
        "{:#?}",
        sys.world.cluster.events()
    );
    let live = sys.live_nodes();
    assert!(
        in_shifted.iter().any(|n| !live.contains(n)),
        "the nodes kept for the shift are consolidated once it ends: {:#?}",
        sys.decisions("disruption")
    );
    assert_eq!(sys.world.budget_violations(), vec![]);
    sys.assert_settled();
}
