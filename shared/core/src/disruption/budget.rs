//! NodePool disruption budgets: how many of a NodePool's nodes may be disrupted now,
//! for a reason.
//!
//! Karpenter's rules (v1): a budget is active when it has no schedule, or when its
//! schedule (cron, UTC) fired within the last `duration`; an inactive budget allows
//! any number. `nodes` is a count, or a percentage of the NodePool's nodes rounded up
//! (so 10% of 5 nodes is 1, never 0). A budget with no reasons applies to every
//! reason. The most restrictive active budget wins, and nodes already being disrupted
//! (or NotReady) count against it. Expiration is forceful and not limited.

use crate::api::model::{Budget, BudgetNodes, DisruptionReason, NodePool};

impl Budget {
    /// Whether the budget limits disruptions at `now` (Unix seconds).
    pub fn is_active(&self, now: i64) -> bool {
        let (Some(schedule), Some(duration)) = (self.cron_schedule(), self.duration) else {
            // Validation only lets a schedule come with a duration; neither: always on.
            return self.schedule.is_none();
        };
        let window = i64::try_from(duration.as_secs()).unwrap_or(i64::MAX);
        schedule.fires_between(now.saturating_sub(window), now)
    }

    /// The nodes it allows out of `nodes` when active.
    pub fn allowed_of(&self, nodes: usize) -> usize {
        match self.nodes {
            BudgetNodes::Count(n) => n as usize,
            BudgetNodes::Percent(p) => (p as usize * nodes).div_ceil(100),
        }
    }
}

/// What a NodePool's budgets allow for one reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowance {
    /// Nodes that may start being disrupted now (after those already disrupting).
    pub allowed: usize,
    /// The active budget that sets the limit (index into `spec.disruption.budgets`);
    /// `None` when no budget limits this reason now.
    pub limited_by: Option<usize>,
}

/// How many more of `pool`'s nodes may be disrupted for `reason` at `now`, given its
/// `nodes` managed, initialized nodes of which `disrupting` are already being disrupted
/// or NotReady. `reason` `None` is expiration: unlimited.
pub fn allowance(
    pool: &NodePool,
    reason: Option<DisruptionReason>,
    now: i64,
    nodes: usize,
    disrupting: usize,
) -> Allowance {
    let Some(reason) = reason else {
        return Allowance {
            allowed: usize::MAX,
            limited_by: None,
        };
    };
    let mut limit: Option<(usize, usize)> = None;
    for (i, budget) in pool.disruption.budgets.iter().enumerate() {
        if !(budget.reasons.is_empty() || budget.reasons.contains(&reason)) {
            continue;
        }
        if !budget.is_active(now) {
            continue;
        }
        let allowed = budget.allowed_of(nodes);
        if limit.is_none_or(|(least, _)| allowed < least) {
            limit = Some((allowed, i));
        }
    }
    match limit {
        Some((allowed, i)) => Allowance {
            allowed: allowed.saturating_sub(disrupting),
            limited_by: Some(i),
        },
        None => Allowance {
            allowed: usize::MAX,
            limited_by: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::calendar::days_from_civil;
    use crate::testing::general_purpose_pool;

    /// 2026-11-23 (a Monday) at hh:mm UTC.
    fn monday(hour: i64, minute: i64) -> i64 {
        days_from_civil(2026, 11, 23) * 86_400 + hour * 3600 + minute * 60
    }

    fn budget(
        nodes: BudgetNodes,
        schedule: Option<(&str, u64)>,
        reasons: &[DisruptionReason],
    ) -> Budget {
        Budget {
            nodes,
            schedule: schedule.map(|(s, _)| s.to_string()),
            duration: schedule.map(|(_, hours)| Duration::from_secs(hours * 3600)),
            reasons: reasons.to_vec(),
        }
    }

    fn pool_with(budgets: Vec<Budget>) -> NodePool {
        let mut pool = general_purpose_pool();
        pool.disruption.budgets = budgets;
        pool
    }

    #[test]
    fn percentages_round_up_so_a_small_pool_still_moves() {
        let pool = pool_with(vec![budget(BudgetNodes::Percent(10), None, &[])]);
        let a = allowance(
            &pool,
            Some(DisruptionReason::Underutilized),
            monday(12, 0),
            5,
            0,
        );
        assert_eq!(a.allowed, 1, "10% of 5 is 0.5, rounded up");
        assert_eq!(
            allowance(&pool, Some(DisruptionReason::Empty), monday(12, 0), 25, 0).allowed,
            3
        );
    }

    #[test]
    fn nodes_already_disrupting_count_against_the_budget() {
        let pool = pool_with(vec![budget(BudgetNodes::Count(3), None, &[])]);
        let r = Some(DisruptionReason::Drifted);
        assert_eq!(allowance(&pool, r, monday(12, 0), 40, 1).allowed, 2);
        assert_eq!(allowance(&pool, r, monday(12, 0), 40, 5).allowed, 0);
    }

    #[test]
    fn a_scheduled_budget_limits_only_inside_its_window() {
        // No disruption 09:00-17:00 UTC on weekdays; 10% otherwise.
        let pool = pool_with(vec![
            budget(BudgetNodes::Percent(10), None, &[]),
            budget(BudgetNodes::Count(0), Some(("0 9 * * mon-fri", 8)), &[]),
        ]);
        let r = Some(DisruptionReason::Underutilized);
        let inside = allowance(&pool, r, monday(12, 30), 20, 0);
        assert_eq!(
            inside,
            Allowance {
                allowed: 0,
                limited_by: Some(1)
            }
        );
        assert_eq!(
            allowance(&pool, r, monday(9, 0), 20, 0).allowed,
            0,
            "from the minute it fires"
        );
        assert_eq!(allowance(&pool, r, monday(8, 59), 20, 0).allowed, 2);
        assert_eq!(
            allowance(&pool, r, monday(17, 0), 20, 0).allowed,
            2,
            "the window is 8h after 09:00"
        );
        // Sunday noon: the weekday schedule last fired on Friday, long ago.
        let sunday = monday(12, 0) - 86_400;
        assert_eq!(allowance(&pool, r, sunday, 20, 0).allowed, 2);
    }

    #[test]
    fn a_budget_names_its_reasons_and_the_most_restrictive_active_one_wins() {
        let pool = pool_with(vec![
            budget(BudgetNodes::Percent(50), None, &[]),
            budget(BudgetNodes::Count(1), None, &[DisruptionReason::Drifted]),
            budget(BudgetNodes::Count(0), None, &[DisruptionReason::Empty]),
        ]);
        let now = monday(12, 0);
        assert_eq!(
            allowance(&pool, Some(DisruptionReason::Underutilized), now, 10, 0),
            Allowance {
                allowed: 5,
                limited_by: Some(0)
            }
        );
        assert_eq!(
            allowance(&pool, Some(DisruptionReason::Drifted), now, 10, 0),
            Allowance {
                allowed: 1,
                limited_by: Some(1)
            }
        );
        assert_eq!(
            allowance(&pool, Some(DisruptionReason::Empty), now, 10, 0).allowed,
            0
        );
    }

    #[test]
    fn expiration_is_forceful_even_under_a_budget_of_zero() {
        let pool = pool_with(vec![budget(BudgetNodes::Count(0), None, &[])]);
        assert_eq!(
            allowance(&pool, None, monday(12, 0), 10, 3).allowed,
            usize::MAX
        );
    }

    #[test]
    fn a_long_window_reaches_back_across_days() {
        // Fires on the 1st of the month at midnight, for 30 days.
        let monthly = budget(BudgetNodes::Count(0), Some(("@monthly", 30 * 24)), &[]);
        assert!(
            monthly.is_active(monday(12, 0)),
            "Nov 1 + 30 days covers Nov 23"
        );
        let weekly = budget(BudgetNodes::Count(0), Some(("@weekly", 24)), &[]);
        assert!(
            !weekly.is_active(monday(12, 0)),
            "Sunday 00:00 + 24h ended on Monday 00:00"
        );
        assert!(weekly.is_active(monday(0, 0) - 60), "Sunday 23:59");
    }
}
