//! Per-node disruption rules that need no scheduling: expiration, drift of the NodePool's
//! requirements, consolidateAfter, and which pods would move.

use std::collections::BTreeMap;

use crate::api::model::{ConsolidationPolicy, NodePool};
use crate::cluster::Pod;
use crate::scheduling::Requirements;

use super::{RejectCode, Rejection};

/// When a node created at `created_at` expires under its NodePool's `expireAfter`
/// (`None`: never).
pub fn expires_at(pool: &NodePool, created_at: i64) -> Option<i64> {
    let after = i64::try_from(pool.expire_after?.as_secs()).ok()?;
    Some(created_at.saturating_add(after))
}

/// Whether the node has expired at `now`.
pub fn expired(pool: &NodePool, created_at: i64, now: i64) -> bool {
    expires_at(pool, created_at).is_some_and(|at| at <= now)
}

/// Why the node's labels no longer satisfy the NodePool's requirements (its instance
/// type, zone or capacity type was taken out of them, or a label the pool now sets has
/// another value), as Karpenter's requirement drift. `well_known` says which labels a
/// node may lack without drifting (those the cloud sets, which a NodePool may leave
/// open).
pub fn requirements_drift(
    pool: &NodePool,
    node_labels: &BTreeMap<String, String>,
    well_known: &dyn Fn(&str) -> bool,
) -> Option<String> {
    let mut reqs = Requirements::from_node_requirements(&pool.requirements);
    for (k, v) in &pool.labels {
        reqs.add(k, crate::scheduling::ValueSet::in_values([v.clone()]));
    }
    for (key, set) in reqs.iter() {
        match node_labels.get(key) {
            Some(value) if !set.has(value) => {
                return Some(format!(
                    "label {key}={value} is no longer allowed by NodePool \"{}\" ({key} {set})",
                    pool.name
                ));
            }
            None if !set.allows_absent() && !well_known(key) => {
                return Some(format!(
                    "NodePool \"{}\" now requires {key} {set}, which the node does not have",
                    pool.name
                ));
            }
            _ => {}
        }
    }
    None
}

/// The pods that would have to move off a node: all but DaemonSet pods, mirror pods
/// (a DaemonSet's or the kubelet's own, recreated on any node) and finished pods.
pub fn moving_pods<'p>(pods: impl IntoIterator<Item = &'p Pod>) -> impl Iterator<Item = &'p Pod> {
    pods.into_iter()
        .filter(|p| !p.daemonset_owned && !p.mirror && !p.terminal)
}

/// Whether consolidation may consider the node at `now`: its NodePool's policy allows
/// it (WhenEmpty takes empty nodes only) and consolidateAfter has elapsed since the
/// node last changed (the later of its Ready transition and the newest of its moving
/// pods' creation or start, `last_change`). `Never` disables consolidation.
pub fn consolidatable(
    pool: &NodePool,
    empty: bool,
    last_change: i64,
    now: i64,
) -> Result<(), Rejection> {
    // Karpenter ignores consolidationPolicy and consolidateAfter on a static pool: its
    // nodes are kept to `replicas`, never consolidated (drift and expiration still
    // replace them).
    if let Some(replicas) = pool.replicas {
        return Err(Rejection::new(
            RejectCode::ConsolidationPolicy,
            format!(
                "NodePool \"{}\" is static (replicas: {replicas}): consolidation never takes its nodes",
                pool.name
            ),
        ));
    }
    if pool.disruption.consolidation_policy == ConsolidationPolicy::WhenEmpty && !empty {
        return Err(Rejection::new(
            RejectCode::ConsolidationPolicy,
            format!(
                "NodePool \"{}\" consolidates only empty nodes (consolidationPolicy: WhenEmpty)",
                pool.name
            ),
        ));
    }
    let Some(after) = pool.disruption.consolidate_after else {
        return Err(Rejection::new(
            RejectCode::ConsolidateAfter,
            format!("NodePool \"{}\" has consolidateAfter: Never", pool.name),
        ));
    };
    let after = i64::try_from(after.as_secs()).unwrap_or(i64::MAX);
    let ready_at = last_change.saturating_add(after);
    if ready_at > now {
        return Err(Rejection::new(
            RejectCode::ConsolidateAfter,
            format!(
                "consolidateAfter {}s has not elapsed: the node last changed {}s ago",
                after,
                now - last_change
            ),
        ));
    }
    Ok(())
}

/// Whether a node whose pods last changed at `last_change` is still within its pool's
/// consolidateAfter at `now`, so consolidation moves no pods onto it (Karpenter v1.14's
/// `IsUnderConsolidateAfter` on destinations: pods landing on a node restart its
/// timer). Its last change is the later of its Ready transition and the newest creation
/// or start of a pod that would move (Karpenter reads the claim's `lastPodEventTime`,
/// which pods leaving also set; a snapshot cannot see those). `Never` and `0s` never
/// hold a node back; a static pool's nodes neither (consolidation ignores the field
/// there).
pub fn cooling_down(pool: &NodePool, last_change: i64, now: i64) -> bool {
    if pool.replicas.is_some() {
        return false;
    }
    let Some(after) = pool.disruption.consolidate_after.filter(|d| !d.is_zero()) else {
        return false;
    };
    let after = i64::try_from(after.as_secs()).unwrap_or(i64::MAX);
    now < last_change.saturating_add(after)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::api::model::Operator;
    use crate::catalog::Catalog;
    use crate::testing::{general_purpose_pool, node, pod, req};
    use crate::well_known::{LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE};

    #[test]
    fn a_node_expires_expire_after_its_creation_and_never_with_never() {
        let mut pool = general_purpose_pool();
        pool.expire_after = Some(Duration::from_secs(720 * 3600));
        let created = 1_000_000;
        assert_eq!(expires_at(&pool, created), Some(created + 720 * 3600));
        assert!(!expired(&pool, created, created + 720 * 3600 - 1));
        assert!(expired(&pool, created, created + 720 * 3600));
        pool.expire_after = None;
        assert!(!expired(&pool, created, i64::MAX));
    }

    #[test]
    fn a_node_whose_type_zone_or_capacity_type_left_the_requirements_has_drifted() {
        let catalog = Catalog::embedded();
        let n = node("n1", "m5.large", "us-east-1a", "general-purpose", catalog);
        let well_known = |k: &str| catalog.label_keys().contains(k);
        let pool = general_purpose_pool();
        assert_eq!(requirements_drift(&pool, &n.labels, &well_known), None);

        let mut narrowed = general_purpose_pool();
        narrowed
            .requirements
            .push(req(LABEL_INSTANCE_TYPE, Operator::In, &["m5.xlarge"]));
        let why = requirements_drift(&narrowed, &n.labels, &well_known).expect("drifted");
        assert!(
            why.contains("node.kubernetes.io/instance-type=m5.large"),
            "{why}"
        );

        let mut spot_only = general_purpose_pool();
        spot_only
            .requirements
            .retain(|r| r.key != LABEL_CAPACITY_TYPE);
        spot_only
            .requirements
            .push(req(LABEL_CAPACITY_TYPE, Operator::In, &["spot"]));
        assert!(requirements_drift(&spot_only, &n.labels, &well_known).is_some());

        let mut labelled = general_purpose_pool();
        labelled.labels.insert("team".into(), "blue".into());
        let why = requirements_drift(&labelled, &n.labels, &well_known).expect("drifted");
        assert!(why.contains("requires team"), "{why}");
    }

    #[test]
    fn daemonset_mirror_and_finished_pods_do_not_move() {
        let mut ds = pod("agent", "100m", "64Mi");
        ds.daemonset_owned = true;
        let mut mirror = pod("kube-proxy", "100m", "64Mi");
        mirror.mirror = true;
        let mut done = pod("job", "1", "1Gi");
        done.terminal = true;
        let web = pod("web", "1", "1Gi");
        let pods = [ds, mirror, done, web];
        let moving: Vec<&str> = moving_pods(&pods).map(|p| p.name.as_str()).collect();
        assert_eq!(moving, ["web"]);
    }

    #[test]
    fn consolidate_after_and_the_policy_decide_whether_a_node_is_considered() {
        let mut pool = general_purpose_pool();
        pool.disruption.consolidate_after = Some(Duration::from_secs(300));
        let now = 10_000;
        assert!(consolidatable(&pool, false, now - 300, now).is_ok());
        let early = consolidatable(&pool, false, now - 299, now).unwrap_err();
        assert_eq!(early.code, RejectCode::ConsolidateAfter);

        pool.disruption.consolidation_policy = ConsolidationPolicy::WhenEmpty;
        let busy = consolidatable(&pool, false, 0, now).unwrap_err();
        assert_eq!(busy.code, RejectCode::ConsolidationPolicy);
        assert!(consolidatable(&pool, true, 0, now).is_ok());

        pool.disruption.consolidate_after = None;
        let never = consolidatable(&pool, true, 0, now).unwrap_err();
        assert_eq!(never.code, RejectCode::ConsolidateAfter);
        assert!(never.reason.contains("Never"), "{}", never.reason);
    }

    #[test]
    fn a_node_is_no_destination_until_consolidate_after_passes_its_last_change() {
        let mut pool = general_purpose_pool();
        let now = 10_000;
        pool.disruption.consolidate_after = Some(Duration::from_secs(300));
        assert!(cooling_down(&pool, now - 299, now));
        assert!(!cooling_down(&pool, now - 300, now));
        pool.disruption.consolidate_after = Some(Duration::ZERO);
        assert!(!cooling_down(&pool, now, now), "0s");
        pool.disruption.consolidate_after = None;
        assert!(!cooling_down(&pool, now, now), "Never");
    }

    #[test]
    fn a_static_pools_nodes_are_never_consolidatable() {
        let mut pool = general_purpose_pool();
        pool.replicas = Some(3);
        for empty in [true, false] {
            let why = consolidatable(&pool, empty, 0, 10_000).unwrap_err();
            assert_eq!(why.code, RejectCode::ConsolidationPolicy);
            assert!(
                why.reason.contains("static (replicas: 3)"),
                "{}",
                why.reason
            );
        }
    }
}
