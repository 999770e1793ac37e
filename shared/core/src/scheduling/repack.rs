//! Re-packing pods that have no inter-pod constraints into a cheaper set of nodes.
//!
//! The first-fit-decreasing packer places pods one at a time and never looks back: the
//! nodes it opens for the tail are too big, and a node's pods do not match its shape
//! (memory-heavy pods fill a compute node's memory and leave its cpu idle). This pass
//! takes the pods of claims that share one set of requirements and whose pods can go
//! anywhere those requirements allow, and packs them again:
//!
//! - pods with identical requests form a *shape*;
//! - while more than one node is needed, the dual prices of the cheapest fractional
//!   fleet for what is left (see `lp`) value every pod; each of the few types closest
//!   to that fleet is filled greedily (the pod whose requests best match the node's
//!   free room first, a dot product) and the type whose fill is worth most per dollar
//!   is opened, as many times over as the remaining pods repeat that fill (halved, so
//!   the prices are revisited while the mix drifts);
//! - once one node could hold everything left and the fractional fleet needs at most
//!   one node's worth, a small search compares that
//!   single node with splits over up to [`TAIL_DEPTH`] nodes, each split taking off a
//!   node of one of the [`TAIL_BRANCHES`] types whose fill takes the most of what is
//!   left per dollar (the cheapest whole-node plans of small workloads are of this kind: a
//!   2xlarge and an xlarge, not a 4xlarge).
//!
//! The caller keeps the result only when it is cheaper than what it had. Work is
//! bounded by a budget of shape scans; past it the pass gives up (returns `None`).
//! Pure: integers in, integers out.

use super::lp;

/// How many nodes the tail search may split the last pods over.
const TAIL_DEPTH: usize = 3;
/// Types the tail search tries splitting off, per level.
const TAIL_BRANCHES: usize = 6;
/// Types filled per node opened outside the tail: those of smallest reduced cost.
const CANDIDATES: usize = 8;

/// A node type: what it offers pods per dimension, and its price.
pub(crate) struct NodeType {
    pub cap: Vec<i64>,
    pub price: f64,
}

/// One node of the result: its type (index into the types given) and how many pods of
/// each shape it holds.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PackedNode {
    pub ty: usize,
    pub take: Vec<(usize, usize)>,
}

struct Packer<'a> {
    demands: &'a [Vec<i64>],
    types: &'a [NodeType],
    /// Undominated types, cheapest first.
    frontier: Vec<usize>,
    dims: usize,
    budget: u64,
}

/// Packs `counts[s]` pods of request vector `demands[s]` onto nodes of `types`.
/// Returns the total price and the nodes, or `None` when some pod fits no type or the
/// budget (shape scans) runs out.
pub(crate) fn pack(
    demands: &[Vec<i64>],
    counts: &[usize],
    types: &[NodeType],
    budget: u64,
) -> Option<(f64, Vec<PackedNode>)> {
    let dims = demands.first().map_or(0, |d| d.len());
    let mut order: Vec<usize> = (0..types.len()).collect();
    order.sort_by(|&a, &b| types[a].price.total_cmp(&types[b].price).then(a.cmp(&b)));
    let dominated = |t: usize| {
        order.iter().any(|&u| {
            u != t
                && types[u].price <= types[t].price
                && (0..dims).all(|d| types[u].cap[d] >= types[t].cap[d])
                && (types[u].price < types[t].price
                    || (0..dims).any(|d| types[u].cap[d] > types[t].cap[d])
                    || u < t)
        })
    };
    let frontier: Vec<usize> = order.iter().copied().filter(|&t| !dominated(t)).collect();
    let mut p = Packer {
        demands,
        types,
        frontier,
        dims,
        budget,
    };
    let mut counts = counts.to_vec();
    let mut nodes = Vec::new();
    let mut total = 0.0;
    while counts.iter().any(|&c| c > 0) {
        let demand = p.total(&counts);
        let one_holds_all = p.cheapest_holding(&demand).is_some();
        let Some((t, take)) = p.next_node(&counts, &demand, one_holds_all)? else {
            let (cost, tail) = p.tail(&counts, TAIL_DEPTH)?;
            total += cost;
            nodes.extend(tail);
            break;
        };
        let possible = take.iter().map(|&(s, n)| counts[s] / n).min().unwrap_or(1);
        let reps = (possible / 2).max(1);
        for _ in 0..reps {
            for &(s, n) in &take {
                counts[s] -= n;
            }
            total += types[t].price;
            nodes.push(PackedNode {
                ty: t,
                take: take.clone(),
            });
        }
    }
    Some((total, nodes))
}

impl Packer<'_> {
    fn total(&self, counts: &[usize]) -> Vec<i64> {
        let mut out = vec![0i64; self.dims];
        for (s, &c) in counts.iter().enumerate() {
            if c > 0 {
                for (o, d) in out.iter_mut().zip(&self.demands[s]) {
                    *o = o.saturating_add(d.saturating_mul(c as i64));
                }
            }
        }
        out
    }

    fn fits(&self, demand: &[i64], t: usize) -> bool {
        demand.iter().zip(&self.types[t].cap).all(|(d, c)| d <= c)
    }

    fn cheapest_holding(&self, demand: &[i64]) -> Option<usize> {
        self.frontier
            .iter()
            .copied()
            .find(|&t| self.fits(demand, t))
    }

    /// Fills one node of type `t` from `counts`: repeatedly the shape whose requests
    /// best match the node's free room (dot product, each dimension relative to the
    /// node's capacity), a quarter of what would still fit of it at a time.
    fn fill(&mut self, t: usize, counts: &[usize]) -> Option<Vec<(usize, usize)>> {
        let cap = &self.types[t].cap;
        let mut room = cap.clone();
        let mut left = counts.to_vec();
        let mut take: Vec<(usize, usize)> = Vec::new();
        loop {
            self.budget = self.budget.checked_sub(left.len() as u64 + 1)?;
            let mut best: Option<(f64, usize)> = None;
            for (s, &c) in left.iter().enumerate() {
                if c == 0 {
                    continue;
                }
                let dem = &self.demands[s];
                if dem.iter().zip(&room).any(|(d, r)| d > r) {
                    continue;
                }
                let mut score = 0.0;
                for d in 0..self.dims {
                    if cap[d] > 0 {
                        score += (dem[d] as f64 / cap[d] as f64) * (room[d] as f64 / cap[d] as f64);
                    }
                }
                if best.is_none_or(|(b, _)| score > b) {
                    best = Some((score, s));
                }
            }
            let Some((_, s)) = best else { break };
            let dem = &self.demands[s];
            let fit = (0..self.dims)
                .filter(|&d| dem[d] > 0)
                .map(|d| (room[d] / dem[d]) as usize)
                .min()
                .unwrap_or(left[s]);
            let n = (fit.min(left[s]) / 4).max(1);
            for d in 0..self.dims {
                room[d] -= dem[d] * n as i64;
            }
            left[s] -= n;
            match take.iter_mut().find(|(x, _)| *x == s) {
                Some((_, k)) => *k += n,
                None => take.push((s, n)),
            }
        }
        Some(take)
    }

    /// The node to open while more than one is needed: among the types closest to the
    /// cheapest fractional fleet for `demand`, the one whose greedy fill is worth most
    /// per dollar at that fleet's dual prices.
    /// `Some(None)`: what is left is the tail (one node holds it, and the fractional
    /// fleet needs at most one node's worth).
    #[allow(clippy::type_complexity)]
    fn next_node(
        &mut self,
        counts: &[usize],
        demand: &[i64],
        one_holds_all: bool,
    ) -> Option<Option<(usize, Vec<(usize, usize)>)>> {
        let used: Vec<usize> = (0..self.dims).filter(|&d| demand[d] > 0).collect();
        let scale: Vec<f64> = used
            .iter()
            .map(|&d| {
                self.frontier
                    .iter()
                    .map(|&t| self.types[t].cap[d])
                    .max()
                    .unwrap_or(1)
                    .max(1) as f64
            })
            .collect();
        let lp_demand: Vec<f64> = used
            .iter()
            .zip(&scale)
            .map(|(&d, s)| demand[d] as f64 / s)
            .collect();
        let caps: Vec<Vec<f64>> = self
            .frontier
            .iter()
            .map(|&t| {
                used.iter()
                    .zip(&scale)
                    .map(|(&d, s)| self.types[t].cap[d].max(0) as f64 / s)
                    .collect()
            })
            .collect();
        let prices: Vec<f64> = self.frontier.iter().map(|&t| self.types[t].price).collect();
        let sol = lp::cheapest_fractional_fleet(&lp_demand, &caps, &prices)?;
        if one_holds_all && sol.mix.iter().map(|(_, x)| x).sum::<f64>() <= 1.0 + 1e-9 {
            return Some(None);
        }
        // Dual price per unit of each dimension (unscaled).
        let mut y = vec![0.0; self.dims];
        for (i, &d) in used.iter().enumerate() {
            y[d] = sol.duals[i] / scale[i];
        }
        let mut by_reduced: Vec<(f64, usize)> = self
            .frontier
            .iter()
            .enumerate()
            .map(|(i, &t)| {
                let worth: f64 = caps[i].iter().zip(&sol.duals).map(|(c, y)| c * y).sum();
                (prices[i] - worth, t)
            })
            .collect();
        by_reduced.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let mut best: Option<(f64, f64, usize, Vec<(usize, usize)>)> = None;
        for &(_, t) in by_reduced.iter().take(CANDIDATES) {
            let take = self.fill(t, counts)?;
            if take.is_empty() {
                continue;
            }
            let value: f64 = take
                .iter()
                .map(|&(s, n)| {
                    n as f64
                        * self.demands[s]
                            .iter()
                            .zip(&y)
                            .map(|(d, y)| *d as f64 * y)
                            .sum::<f64>()
                })
                .sum();
            let price = self.types[t].price;
            let eff = if price > 0.0 {
                value / price
            } else {
                f64::INFINITY
            };
            let better = best.as_ref().is_none_or(|(be, bv, ..)| {
                eff > be * (1.0 + 1e-9) || (eff >= be * (1.0 - 1e-9) && value > *bv)
            });
            if better {
                best = Some((eff, value, t, take));
            }
        }
        Some(best.map(|(_, _, t, take)| (t, take)))
    }

    /// Everything left fits on one node: that node, or a split over up to `depth`
    /// nodes when cheaper (each split fills a cheaper type greedily and recurses).
    fn tail(&mut self, counts: &[usize], depth: usize) -> Option<(f64, Vec<PackedNode>)> {
        let demand = self.total(counts);
        let single = self.cheapest_holding(&demand)?;
        let all: Vec<(usize, usize)> = counts
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(s, &c)| (s, c))
            .collect();
        let mut best = (
            self.types[single].price,
            vec![PackedNode {
                ty: single,
                take: all,
            }],
        );
        if depth <= 1 {
            return Some(best);
        }
        // The cheapest node that holds the largest single pod: what any rest costs at least.
        let mut floor = f64::INFINITY;
        for (s, &c) in counts.iter().enumerate() {
            if c > 0 {
                let one = &self.demands[s];
                let p = self
                    .cheapest_holding(one)
                    .map_or(f64::INFINITY, |t| self.types[t].price);
                floor = floor.min(p);
            }
        }
        // Types cheaper than that node less the rest's floor, ranked by how much of
        // what is left their greedy fill takes per dollar (the largest share over the
        // dimensions); the best few are tried at each level.
        // (share per dollar, the node that takes it)
        let mut ranked: Vec<(f64, PackedNode)> = Vec::new();
        for t in self.frontier.clone() {
            if self.types[t].price + floor >= best.0 - 1e-12 {
                break; // cheapest first
            }
            let take = self.fill(t, counts)?;
            if take.is_empty() {
                continue;
            }
            let share = (0..self.dims)
                .filter(|&d| demand[d] > 0)
                .map(|d| {
                    let got: i64 = take
                        .iter()
                        .map(|&(s, n)| self.demands[s][d] * n as i64)
                        .sum();
                    got as f64 / demand[d] as f64
                })
                .fold(0.0, f64::max);
            let per_dollar = share / self.types[t].price.max(1e-12);
            ranked.push((per_dollar, PackedNode { ty: t, take }));
        }
        ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.ty.cmp(&b.1.ty)));
        ranked.truncate(TAIL_BRANCHES);
        for (_, PackedNode { ty: t, take }) in ranked {
            let mut rest = counts.to_vec();
            for &(s, n) in &take {
                rest[s] -= n;
            }
            if rest.iter().all(|&c| c == 0) {
                if self.types[t].price < best.0 - 1e-12 {
                    best = (self.types[t].price, vec![PackedNode { ty: t, take }]);
                }
                continue;
            }
            let (cost, mut nodes) = self.tail(&rest, depth - 1)?;
            let cost = cost + self.types[t].price;
            if cost < best.0 - 1e-12 {
                nodes.insert(0, PackedNode { ty: t, take });
                best = (cost, nodes);
            }
        }
        Some(best)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ty(cpu: i64, mem: i64, price: f64) -> NodeType {
        NodeType {
            cap: vec![cpu, mem],
            price,
        }
    }

    fn check(demands: &[Vec<i64>], counts: &[usize], types: &[NodeType], nodes: &[PackedNode]) {
        let mut placed = vec![0usize; counts.len()];
        for n in nodes {
            let mut used = vec![0i64; demands[0].len()];
            for &(s, k) in &n.take {
                placed[s] += k;
                for (u, d) in used.iter_mut().zip(&demands[s]) {
                    *u += d * k as i64;
                }
            }
            assert!(
                used.iter().zip(&types[n.ty].cap).all(|(u, c)| u <= c),
                "node over capacity: {n:?}"
            );
        }
        assert_eq!(placed, counts);
    }

    #[test]
    fn ten_one_cpu_pods_go_on_a_seven_pod_node_and_a_three_pod_node_not_one_big_one() {
        // xlarge 3.9 cpu, 2xlarge 7.9, 4xlarge 15.9, prices linear in size.
        let types = [
            ty(3_900, 100, 1.0),
            ty(7_900, 100, 2.0),
            ty(15_900, 100, 4.0),
        ];
        let demands = [vec![1_000, 1]];
        let (cost, nodes) = pack(&demands, &[10], &types, 1_000_000).unwrap();
        check(&demands, &[10], &types, &nodes);
        assert_eq!(cost, 3.0, "{nodes:?}");
    }

    #[test]
    fn compute_and_memory_heavy_pods_share_nodes_of_the_matching_shapes() {
        // c: 16 cpu / 32 GiB for 1.0; r: 16 cpu / 128 GiB for 1.6.
        let types = [ty(16_000, 32_000, 1.0), ty(16_000, 128_000, 1.6)];
        let demands = [vec![4_000, 1_000], vec![500, 16_000]];
        let counts = [40, 40];
        let (cost, nodes) = pack(&demands, &counts, &types, 10_000_000).unwrap();
        check(&demands, &counts, &types, &nodes);
        // Demand: 180 cpu, 680 GiB; the fractional bound is 14.4 (5.3 r, 5.9 c). Seven
        // memory pods and three compute pods per r-node, four compute pods per c-node
        // make 6 r + 6 c = 15.6.
        assert!(cost <= 15.6 + 1e-9, "{cost} {nodes:?}");
    }

    #[test]
    fn a_pod_no_type_can_hold_makes_the_pass_give_up() {
        let types = [ty(1_000, 1_000, 1.0)];
        assert!(pack(&[vec![2_000, 1]], &[1], &types, 1_000_000).is_none());
    }

    #[test]
    fn the_pass_gives_up_when_its_budget_runs_out() {
        let types = [ty(100_000, 100_000, 1.0), ty(50_000, 50_000, 0.6)];
        let demands: Vec<Vec<i64>> = (1..200).map(|i| vec![i * 10, i * 7]).collect();
        let counts = vec![5; demands.len()];
        assert!(pack(&demands, &counts, &types, 100).is_none());
        let (_, nodes) = pack(&demands, &counts, &types, u64::MAX).unwrap();
        check(&demands, &counts, &types, &nodes);
    }
}
