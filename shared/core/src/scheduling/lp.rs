//! The cheapest *fractional* fleet covering a demand: a small linear program.
//!
//! Primal: minimise Σ price_t·x_t subject to Σ capacity_t·x_t ≥ demand, x ≥ 0.
//! Its value is a lower bound on any real fleet's cost (pods are indivisible, nodes
//! are whole), used to grade the packer; its dual prices (what one more unit of cpu,
//! memory or pod slots is worth at the optimum) steer the packer's choice of node type.
//!
//! We solve the dual, max demand·y subject to capacity_t·y ≤ price_t, y ≥ 0, with a
//! dictionary simplex: it has as many variables as resource dimensions (a handful)
//! and one constraint per instance type, so each pivot is O(types × dims) and the
//! all-slack start is feasible because prices are non-negative. Bland's rule rules
//! out cycling.

const EPS: f64 = 1e-9;

#[derive(Debug, Clone, PartialEq)]
pub struct LpSolution {
    /// Cost of the cheapest fractional fleet (= the dual optimum).
    pub cost: f64,
    /// Shadow price of each demand dimension.
    pub duals: Vec<f64>,
    /// The fractional fleet: (type index, how many), non-zero entries only.
    pub mix: Vec<(usize, f64)>,
}

/// `capacities[t][d]` is what type `t` offers in dimension `d`; `prices[t]` its price.
/// Returns `None` when some demanded dimension is offered by no type (no fleet covers it).
pub fn cheapest_fractional_fleet(
    demand: &[f64],
    capacities: &[Vec<f64>],
    prices: &[f64],
) -> Option<LpSolution> {
    let m = demand.len();
    let n = capacities.len();
    if demand.iter().all(|d| *d <= EPS) {
        return Some(LpSolution {
            cost: 0.0,
            duals: vec![0.0; m],
            mix: vec![],
        });
    }
    // Variables 0..m are the duals y, m..m+n the slacks of each type's constraint.
    let mut nonbasic: Vec<usize> = (0..m).collect();
    let mut basic: Vec<usize> = (m..m + n).collect();
    let mut rhs: Vec<f64> = prices.to_vec();
    let mut coef: Vec<Vec<f64>> = capacities
        .iter()
        .map(|row| row.iter().map(|a| -a).collect())
        .collect();
    let mut obj: Vec<f64> = demand.to_vec();
    let mut z = 0.0;

    for _ in 0..10_000 {
        // Entering: the non-basic variable of smallest index with a positive reduced cost.
        let entering = (0..m)
            .filter(|&j| obj[j] > EPS)
            .min_by_key(|&j| nonbasic[j]);
        let Some(j) = entering else { break };
        // Leaving: tightest ratio; ties by smallest variable index (Bland).
        let mut leave: Option<(usize, f64)> = None;
        for i in 0..n {
            if coef[i][j] < -EPS {
                let ratio = rhs[i] / -coef[i][j];
                let better = match leave {
                    None => true,
                    Some((r, best)) => {
                        ratio < best - EPS || (ratio <= best + EPS && basic[i] < basic[r])
                    }
                };
                if better {
                    leave = Some((i, ratio));
                }
            }
        }
        let (r, _) = leave?; // unbounded dual: demand in a dimension no type offers
        pivot(r, j, &mut rhs, &mut coef, &mut obj, &mut z);
        std::mem::swap(&mut basic[r], &mut nonbasic[j]);
    }

    let mut duals = vec![0.0; m];
    for (i, var) in basic.iter().enumerate() {
        if *var < m {
            duals[*var] = rhs[i].max(0.0);
        }
    }
    let mut mix = Vec::new();
    for (j, var) in nonbasic.iter().enumerate() {
        if *var >= m && -obj[j] > EPS {
            mix.push((*var - m, -obj[j]));
        }
    }
    mix.sort_by_key(|(t, _)| *t);
    Some(LpSolution {
        cost: z,
        duals,
        mix,
    })
}

fn pivot(r: usize, j: usize, rhs: &mut [f64], coef: &mut [Vec<f64>], obj: &mut [f64], z: &mut f64) {
    let a = coef[r][j];
    // Solve row r for the entering variable.
    let new_rhs = -rhs[r] / a;
    let mut new_row: Vec<f64> = coef[r].iter().map(|c| -c / a).collect();
    new_row[j] = 1.0 / a;
    rhs[r] = new_rhs;
    coef[r] = new_row.clone();
    for i in 0..rhs.len() {
        if i == r {
            continue;
        }
        let f = coef[i][j];
        if f == 0.0 {
            continue;
        }
        rhs[i] += f * new_rhs;
        for (k, nr) in new_row.iter().enumerate() {
            if k == j {
                coef[i][k] = f * nr;
            } else {
                coef[i][k] += f * nr;
            }
        }
    }
    let f = obj[j];
    *z += f * new_rhs;
    for (k, nr) in new_row.iter().enumerate() {
        if k == j {
            obj[k] = f * nr;
        } else {
            obj[k] += f * nr;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Exhaustive optimum for two dimensions: the optimum of a 2-row LP uses at most
    /// two types, so try every single type and every pair.
    fn brute_force_2d(demand: [f64; 2], caps: &[Vec<f64>], prices: &[f64]) -> f64 {
        let mut best = f64::INFINITY;
        for a in 0..caps.len() {
            let need = (demand[0] / caps[a][0]).max(demand[1] / caps[a][1]);
            best = best.min(need * prices[a]);
            for b in 0..caps.len() {
                // Solve x_a*caps[a] + x_b*caps[b] = demand exactly.
                let det = caps[a][0] * caps[b][1] - caps[b][0] * caps[a][1];
                if det.abs() < 1e-12 {
                    continue;
                }
                let xa = (demand[0] * caps[b][1] - caps[b][0] * demand[1]) / det;
                let xb = (caps[a][0] * demand[1] - demand[0] * caps[a][1]) / det;
                if xa >= -1e-12 && xb >= -1e-12 {
                    best = best.min(xa * prices[a] + xb * prices[b]);
                }
            }
        }
        best
    }

    #[test]
    fn the_lp_matches_exhaustive_search_on_small_fleets() {
        // A deterministic pseudo-random family of catalogs.
        let mut seed = 42u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % 1000) as f64 / 100.0 + 0.5
        };
        for _ in 0..200 {
            let n = 2 + (next() as usize % 6);
            let caps: Vec<Vec<f64>> = (0..n).map(|_| vec![next(), next()]).collect();
            let prices: Vec<f64> = (0..n).map(|_| next()).collect();
            let demand = [next() * 10.0, next() * 10.0];
            let lp = cheapest_fractional_fleet(&demand, &caps, &prices).unwrap();
            let brute = brute_force_2d(demand, &caps, &prices);
            assert!(
                (lp.cost - brute).abs() < 1e-6 * brute.max(1.0),
                "lp {} brute {}",
                lp.cost,
                brute
            );
            // The mix really covers the demand at that cost.
            let covered: Vec<f64> = (0..2)
                .map(|d| lp.mix.iter().map(|(t, x)| caps[*t][d] * x).sum())
                .collect();
            assert!(covered[0] >= demand[0] - 1e-6 && covered[1] >= demand[1] - 1e-6);
            let cost: f64 = lp.mix.iter().map(|(t, x)| prices[*t] * x).sum();
            assert!((cost - lp.cost).abs() < 1e-6 * cost.max(1.0));
        }
    }

    #[test]
    fn a_ratio_between_two_shapes_is_met_by_mixing_them() {
        // c: 4 cpu/8 GiB for 1.0; r: 4 cpu/32 GiB for 1.5; demand 8 cpu, 40 GiB.
        let caps = vec![vec![4.0, 8.0], vec![4.0, 32.0]];
        let lp = cheapest_fractional_fleet(&[8.0, 40.0], &caps, &[1.0, 1.5]).unwrap();
        assert_eq!(lp.mix.len(), 2);
        assert!((lp.cost - 2.5).abs() < 1e-9, "{lp:?}");
        assert!(lp.duals.iter().all(|y| *y >= 0.0));
    }

    #[test]
    fn demand_no_type_offers_has_no_fleet() {
        let caps = vec![vec![4.0, 0.0]];
        assert!(cheapest_fractional_fleet(&[1.0, 1.0], &caps, &[1.0]).is_none());
    }
}
