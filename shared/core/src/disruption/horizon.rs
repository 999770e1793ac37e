//! How long a disruption decision stays what it is when nothing in its view changes:
//! the caller may answer a later run with the decision it already has instead of
//! searching the cluster again (Karpenter keeps a cluster "consolidated" the same way,
//! until something changes). Only the clock moves between such runs, so the decision
//! holds until the first fact that depends on the time alone flips.

use super::DisruptionInput;
use super::candidates::evaluate;
use super::rules::expires_at;

/// The first time at which a decision on `input`'s view, the view unchanged, could
/// differ from the decision at `input.now`; the decision holds at every `t` with
/// `input.now <= t < until`. `None`: nothing in it depends on the time.
///
/// What depends on the time alone, as [`super::decide`] reads it:
/// - a node's expiry (`expireAfter` after its creation): it holds until then;
/// - a pod's duration-valued `karpenter.sh/do-not-disrupt`: until it lapses;
/// - `consolidateAfter` not yet elapsed on a node: its rejection counts the seconds
///   since the node last changed, and it keeps pods off the node, so the decision holds
///   at `input.now` only;
/// - a budget with a schedule: its window opens and closes on its cron, which this does
///   not follow, so the decision holds at `input.now` only.
pub fn unchanged_until(input: &DisruptionInput<'_>) -> Option<i64> {
    let now = input.now;
    let scheduled = input
        .node_pools
        .iter()
        .any(|p| p.disruption.budgets.iter().any(|b| b.schedule.is_some()));
    if scheduled {
        return Some(now);
    }
    let mut until: Option<i64> = None;
    let mut flips_at = |t: i64| until = Some(until.map_or(t, |u: i64| u.min(t)));
    for verdict in evaluate(input.snapshot, input.node_pools, now, &|_| true) {
        let pool = verdict.pool;
        if let Some(after) = pool.disruption.consolidate_after {
            let after = i64::try_from(after.as_secs()).unwrap_or(i64::MAX);
            if verdict.last_change.saturating_add(after) > now {
                return Some(now);
            }
        }
        if let Some(at) = verdict
            .node
            .created_at
            .and_then(|created| expires_at(pool, created))
            .filter(|&at| at > now)
        {
            flips_at(at);
        }
    }
    for pod in &input.snapshot.pods {
        if let Some(lapses) = pod
            .do_not_disrupt_until()
            .filter(|&t| t > now && t != i64::MAX)
        {
            flips_at(lapses);
        }
    }
    until
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::api::model::{Budget, BudgetNodes, NodePool};
    use crate::catalog::Catalog;
    use crate::cluster::ClusterSnapshot;
    use crate::disruption::decide;
    use crate::pricing::Pricing;
    use crate::testing::{bound_pod, general_purpose_pool, initialized_node};

    const NOW: i64 = 2_000_000_000;

    /// Two m5.xlarge nodes created two hours before `NOW`, one pod on the first,
    /// started 6,990 s before.
    fn snapshot() -> ClusterSnapshot {
        let nodes = ["a", "b"]
            .map(|name| {
                let mut n = initialized_node(name, "m5.xlarge", NOW);
                n.created_at = Some(NOW - 7200);
                n.ready_since = Some(NOW - 7100);
                n
            })
            .to_vec();
        let mut p = bound_pod("a", "web-1", "500m", NOW);
        p.created_at = Some(NOW - 7000);
        p.started_at = Some(NOW - 6990);
        ClusterSnapshot {
            nodes,
            pods: vec![p],
            ..ClusterSnapshot::default()
        }
    }

    fn input<'a>(
        snapshot: &'a ClusterSnapshot,
        pools: &'a [NodePool],
        pricing: &'a Pricing,
        now: i64,
    ) -> DisruptionInput<'a> {
        DisruptionInput {
            snapshot,
            node_pools: pools,
            node_classes: &[],
            catalog: Catalog::embedded(),
            pricing,
            in_flight: &[],
            now,
            spot_to_spot: false,
            external_drift: &[],
            disrupting: &[],
            nominated: &[],
            validating: None,
        }
    }

    fn pool(consolidate_after: u64, expire_after: Option<u64>) -> NodePool {
        let mut pool = general_purpose_pool();
        pool.disruption.consolidate_after = Some(Duration::from_secs(consolidate_after));
        pool.expire_after = expire_after.map(Duration::from_secs);
        pool
    }

    fn until(snapshot: &ClusterSnapshot, pool: NodePool) -> Option<i64> {
        let pricing = Pricing::for_zones(vec!["us-east-1a".into()]);
        unchanged_until(&input(snapshot, &[pool], &pricing, NOW))
    }

    #[test]
    fn a_quiet_cluster_past_consolidate_after_holds_its_decision_until_the_first_expiry() {
        let snapshot = snapshot();
        let pools = [pool(300, Some(3 * 3600))];
        // Both nodes were created two hours ago: they expire in one.
        assert_eq!(until(&snapshot, pools[0].clone()), Some(NOW + 3600));
        // And the decision is indeed the same a second before that time, and not at it.
        let pricing = Pricing::for_zones(vec!["us-east-1a".into()]);
        let first = decide(&input(&snapshot, &pools, &pricing, NOW));
        let later = decide(&input(&snapshot, &pools, &pricing, NOW + 3599));
        let expired = decide(&input(&snapshot, &pools, &pricing, NOW + 3600));
        assert_eq!(first, later);
        assert_ne!(first, expired);
    }

    #[test]
    fn nothing_that_depends_on_the_time_leaves_the_decision_unbounded() {
        assert_eq!(until(&snapshot(), pool(0, None)), None);
    }

    #[test]
    fn a_node_within_consolidate_after_holds_the_decision_at_this_second_only() {
        let mut snapshot = snapshot();
        snapshot.pods[0].started_at = Some(NOW - 30);
        assert_eq!(until(&snapshot, pool(300, None)), Some(NOW));
    }

    #[test]
    fn a_do_not_disrupt_duration_holds_the_decision_until_it_lapses() {
        let mut snapshot = snapshot();
        snapshot.pods[0].do_not_disrupt_for = Some(7200);
        // Started 6,990 s ago with 7,200 s of protection: 210 s left.
        assert_eq!(until(&snapshot, pool(0, None)), Some(NOW + 210));
    }

    #[test]
    fn a_scheduled_budget_holds_the_decision_at_this_second_only() {
        let mut pool = pool(0, None);
        pool.disruption.budgets = vec![Budget {
            nodes: BudgetNodes::Count(0),
            schedule: Some("0 9 * * mon-fri".into()),
            duration: Some(Duration::from_secs(8 * 3600)),
            reasons: vec![],
        }];
        assert_eq!(until(&snapshot(), pool), Some(NOW));
    }
}
