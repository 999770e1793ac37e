//! `consolidationPolicy: Balanced` (Karpenter v1.14, `designs/balanced-consolidation.md`):
//! a consolidation move is worth making when what it saves, as a fraction of its
//! NodePool's cost, is at least 1/k of what it disrupts, as a fraction of the pool's
//! disruption cost (k = 2).
//!
//! - A node's disruption cost is 1 (draining it costs something even when it is empty)
//!   plus each moving pod's [`crate::cluster::PodFields::eviction_cost`], negatives as 0
//!   ([`super::candidates::reschedule_cost`]).
//! - A pool's totals are the sums over its managed nodes: their prices and their
//!   disruption costs, whether or not they are candidates.
//! - savings = the candidates' price − the replacements' price; a move spanning pools is
//!   scored in each Balanced pool, with the savings split by each pool's share of the
//!   candidates' price, and passes when every Balanced pool approves it.
//! - score = (savings / pool cost) / (disruption / pool disruption cost); no savings
//!   scores 0; approved when score ≥ 1/k.
//!
//! Pools with another policy are not scored: their moves pass as before.

use std::collections::HashMap;

use serde::Serialize;

use crate::api::model::{ConsolidationPolicy, NodePool};

/// Balanced's k: a move passes with a score of at least 1/k.
pub const BALANCED_K: u32 = 2;

/// A NodePool's cost and disruption cost, what a move's fractions are taken of.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PoolTotals {
    /// Its managed nodes' prices, per hour.
    pub cost: f64,
    /// Its managed nodes' disruption costs.
    pub disruption_cost: f64,
}

/// Sums `(pool, price, disruption cost)` of every managed node per pool.
pub fn pool_totals<'a>(
    nodes: impl IntoIterator<Item = (&'a str, f64, f64)>,
) -> HashMap<String, PoolTotals> {
    let mut out: HashMap<String, PoolTotals> = HashMap::new();
    for (pool, price, disruption) in nodes {
        let t = out.entry(pool.to_string()).or_default();
        t.cost += price;
        t.disruption_cost += disruption;
    }
    out
}

/// One pool's score of a move, as `nodewright disrupt --output json` and the decision
/// log show it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Score {
    pub node_pool: String,
    pub score: f64,
    pub threshold: f64,
    pub k: u32,
    /// The move's savings over the pool's cost.
    pub savings_fraction: f64,
    /// The move's disruption cost over the pool's.
    pub disruption_fraction: f64,
    pub approved: bool,
}

impl Score {
    /// Scores a move of `pool` saving `savings` per hour and disrupting
    /// `disruption_cost`, against the pool's `totals`. Empty totals score 0, as
    /// Karpenter's `ScoreMove` (nothing to normalise against).
    pub fn of(pool: &str, savings: f64, disruption_cost: f64, totals: PoolTotals) -> Self {
        let (savings_fraction, disruption_fraction) =
            if totals.cost <= 0.0 || totals.disruption_cost <= 0.0 {
                (0.0, 0.0)
            } else {
                (
                    savings / totals.cost,
                    disruption_cost / totals.disruption_cost,
                )
            };
        let score = if savings_fraction <= 0.0 {
            0.0
        } else if disruption_fraction == 0.0 {
            f64::INFINITY
        } else {
            savings_fraction / disruption_fraction
        };
        let threshold = 1.0 / f64::from(BALANCED_K);
        Score {
            node_pool: pool.to_string(),
            score: round(score),
            threshold,
            k: BALANCED_K,
            savings_fraction: round(savings_fraction),
            disruption_fraction: round(disruption_fraction),
            approved: score >= threshold,
        }
    }

    /// The sentence for a rejection or the decision log: Karpenter's event wording.
    pub fn sentence(&self) -> String {
        format!(
            "consolidation score {:.2} {} threshold {:.2} (k: {}, savings {:.1}%, disruption {:.1}% of NodePool \"{}\")",
            self.score,
            if self.approved { ">=" } else { "<" },
            self.threshold,
            self.k,
            self.savings_fraction * 100.0,
            self.disruption_fraction * 100.0,
            self.node_pool
        )
    }
}

/// A node a move takes: its pool, price and disruption cost.
#[derive(Debug, Clone, Copy)]
pub struct Source<'a> {
    pub pool: &'a NodePool,
    pub price: f64,
    pub disruption_cost: f64,
}

/// Scores a move taking `sources` and saving `savings` per hour in each of their
/// Balanced pools (Karpenter's `EvaluateBalancedMove`). Approved when every Balanced
/// pool approves; the scores in pool-name order (none when no pool is Balanced).
pub fn evaluate(
    sources: &[Source<'_>],
    savings: f64,
    totals: &HashMap<String, PoolTotals>,
) -> (bool, Vec<Score>) {
    let mut by_pool: Vec<(&NodePool, f64, f64)> = Vec::new();
    for s in sources {
        match by_pool.iter_mut().find(|(p, _, _)| p.name == s.pool.name) {
            Some(entry) => {
                entry.1 += s.price;
                entry.2 += s.disruption_cost;
            }
            None => by_pool.push((s.pool, s.price, s.disruption_cost)),
        }
    }
    let source_cost: f64 = sources.iter().map(|s| s.price).sum();
    let pools = by_pool.len();
    let mut scores: Vec<Score> = by_pool
        .into_iter()
        .filter(|(pool, _, _)| is_balanced(pool))
        .map(|(pool, cost, disruption)| {
            // Across pools the net savings are split by each pool's share of the
            // candidates' price.
            let share = if pools > 1 && source_cost > 0.0 {
                savings * (cost / source_cost)
            } else {
                savings
            };
            let t = totals.get(&pool.name).copied().unwrap_or_default();
            Score::of(&pool.name, share, disruption, t)
        })
        .collect();
    scores.sort_by(|a, b| a.node_pool.cmp(&b.node_pool));
    (scores.iter().all(|s| s.approved), scores)
}

/// Whether deleting the node outright — the best any move of it can do — would pass
/// (Karpenter's `CanPassThreshold`): `Err` with that score when it would not. Pools
/// with another policy, or no totals, always pass.
pub fn can_pass(source: Source<'_>, totals: &HashMap<String, PoolTotals>) -> Result<(), Score> {
    if !is_balanced(source.pool) {
        return Ok(());
    }
    let Some(t) = totals.get(&source.pool.name).filter(|t| t.cost > 0.0) else {
        return Ok(());
    };
    let best = Score::of(&source.pool.name, source.price, source.disruption_cost, *t);
    if best.approved { Ok(()) } else { Err(best) }
}

fn is_balanced(pool: &NodePool) -> bool {
    pool.disruption.consolidation_policy == ConsolidationPolicy::Balanced
}

fn round(v: f64) -> f64 {
    if v.is_finite() {
        (v * 1e4).round() / 1e4
    } else {
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::general_purpose_pool;

    fn balanced(name: &str) -> NodePool {
        let mut p = general_purpose_pool();
        p.name = name.into();
        p.disruption.consolidation_policy = ConsolidationPolicy::Balanced;
        p
    }

    fn totals(pool: &str, cost: f64, disruption: f64) -> HashMap<String, PoolTotals> {
        HashMap::from([(
            pool.to_string(),
            PoolTotals {
                cost,
                disruption_cost: disruption,
            },
        )])
    }

    // The design's examples: ten nodes, $58.08/day, disruption cost 80.
    #[test]
    fn the_designs_examples_score_as_written() {
        let t = PoolTotals {
            cost: 58.08,
            disruption_cost: 80.0,
        };
        let oversized = Score::of("p", 7.26, 3.0, t);
        assert_eq!(oversized.score, 3.3333);
        assert!(oversized.approved);
        let marginal = Score::of("p", 2.42, 8.0, t);
        assert_eq!(marginal.score, 0.4167);
        assert!(!marginal.approved);
        let uniform = Score::of(
            "p",
            2.42,
            8.0,
            PoolTotals {
                cost: 48.40,
                disruption_cost: 80.0,
            },
        );
        assert!(uniform.approved, "0.50 is on the threshold: {uniform:?}");
        assert_eq!(Score::of("p", 0.0, 8.0, t).score, 0.0);
        assert!(!Score::of("p", -1.0, 8.0, t).approved);
        assert_eq!(
            marginal.sentence(),
            "consolidation score 0.42 < threshold 0.50 (k: 2, savings 4.2%, disruption 10.0% of NodePool \"p\")"
        );
    }

    #[test]
    fn heterogeneous_disruption_cost_tells_equal_savings_apart() {
        let t = PoolTotals {
            cost: 58.08,
            disruption_cost: 107.0,
        };
        assert!(Score::of("p", 4.84, 4.0, t).approved);
        let b = Score::of("p", 4.84, 31.0, t);
        assert!(!b.approved, "{b:?}");
        assert_eq!(b.score, 0.2876);
    }

    #[test]
    fn only_balanced_pools_score_and_savings_split_by_price_across_pools() {
        let a = balanced("a");
        let b = balanced("b");
        let other = general_purpose_pool();
        let mut t = totals("a", 10.0, 10.0);
        t.extend(totals("b", 10.0, 10.0));
        let sources = [
            Source {
                pool: &a,
                price: 3.0,
                disruption_cost: 2.0,
            },
            Source {
                pool: &b,
                price: 1.0,
                disruption_cost: 2.0,
            },
        ];
        let (ok, scores) = evaluate(&sources, 2.0, &t);
        // a: 1.5/10 over 2/10 = 0.75; b: 0.5/10 over 2/10 = 0.25.
        assert_eq!(
            scores.iter().map(|s| s.score).collect::<Vec<_>>(),
            [0.75, 0.25]
        );
        assert!(!ok, "every Balanced pool must approve");
        let mut b2 = b.clone();
        b2.disruption.consolidation_policy = ConsolidationPolicy::WhenEmptyOrUnderutilized;
        let sources = [
            sources[0],
            Source {
                pool: &b2,
                ..sources[1]
            },
        ];
        let (ok, scores) = evaluate(&sources, 2.0, &t);
        assert!(ok);
        assert_eq!(scores.len(), 1);
        let (ok, scores) = evaluate(
            &[Source {
                pool: &other,
                price: 1.0,
                disruption_cost: 50.0,
            }],
            0.01,
            &t,
        );
        assert!(ok && scores.is_empty(), "not Balanced: not scored");
    }

    #[test]
    fn a_node_whose_deletion_would_not_pass_is_no_candidate() {
        let a = balanced("a");
        let t = totals("a", 10.0, 20.0);
        let cheap_busy = Source {
            pool: &a,
            price: 1.0,
            disruption_cost: 11.0,
        };
        let best = can_pass(cheap_busy, &t).unwrap_err();
        assert_eq!(best.score, 0.1818);
        let dear = Source {
            pool: &a,
            price: 5.0,
            disruption_cost: 11.0,
        };
        assert!(can_pass(dear, &t).is_ok());
    }

    #[test]
    fn totals_sum_every_node_of_each_pool() {
        let t = pool_totals([("a", 1.0, 2.0), ("b", 3.0, 1.0), ("a", 0.5, 4.0)]);
        assert_eq!(
            t["a"],
            PoolTotals {
                cost: 1.5,
                disruption_cost: 6.0
            }
        );
        assert_eq!(t["b"].cost, 3.0);
    }
}
