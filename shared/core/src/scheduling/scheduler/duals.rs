//! Dual prices of what is still to place: the cheapest fractional fleet (see `lp`) for
//! the remaining demand a pool could serve prices each resource, and a type is worth
//! what it would hold at those prices. New claims are sized by the type worth most per
//! dollar, so early claims are shaped by the whole batch, not by the pod that opened
//! them.

use crate::resources::{CPU, MEMORY, PODS, Resources, WELL_KNOWN};
use crate::scheduling::lp;

use super::Scheduler;
use super::ids::{InstanceTypeId, PoolId};
use super::offerings::Offering;

/// The dual prices of one pool's remaining demand.
#[derive(Clone, Debug)]
pub(crate) struct DualPrices {
    /// The resource slots priced (those with demand), and each one's price per milli-unit.
    pub(crate) dims: Vec<usize>,
    pub(crate) prices: Vec<f64>,
    /// The demand they were computed for: they are recomputed when it drifts.
    pub(crate) demand: Resources,
}

/// What a type would hold of the remaining demand, at the dual prices (`value`), and
/// what all of it would be worth (`size`).
pub(super) struct Worth {
    pub(super) value: f64,
    pub(super) size: f64,
}

impl Scheduler<'_> {
    /// Remaining requests of unplaced pods that could use this pool.
    pub(super) fn compatible_remaining(&self, pool: PoolId) -> Resources {
        if let Some(u) = &self.undo {
            // A solve places only the pods it moves; what is left of them is kept as
            // they are placed.
            let kept = u.remaining.get(pool).cloned().unwrap_or_default();
            debug_assert_eq!(
                kept,
                self.unplaced_moving_requests(pool),
                "the remaining demand kept during a solve"
            );
            return kept;
        }
        let mut r = Resources::new();
        for c in &self.classes {
            if c.pools_ok.get(pool).copied().unwrap_or(false) {
                r.add(&c.remaining);
            }
        }
        r
    }

    /// The requests of the solve's moving pods not placed yet whose class may use
    /// `pool`, summed over them.
    pub(crate) fn unplaced_moving_requests(&self, pool: PoolId) -> Resources {
        let mut r = Resources::new();
        if let Some(u) = &self.undo {
            for m in &u.moving {
                let class = &self.classes[self.class_of(m.pod)];
                if !m.placed && class.pools_ok.get(pool).copied().unwrap_or(false) {
                    r.add(&self.pod(m.pod).requests);
                }
            }
        }
        r
    }

    /// What type `t` is worth to the remaining demand (see [`Worth`]); without dual
    /// prices every type is worth the same.
    pub(super) fn value(
        &self,
        pool: PoolId,
        t: InstanceTypeId,
        remaining: &Resources,
        pod: &Resources,
    ) -> Worth {
        let usable = self.usable(pool, t);
        let Some(DualPrices {
            dims,
            prices: duals,
            ..
        }) = &self.pools[pool].duals
        else {
            return Worth {
                value: 1.0,
                size: 0.0,
            };
        };
        let mut value = 0.0;
        let mut size = 0.0;
        for (i, &d) in dims.iter().enumerate() {
            let cap = usable.slot_milli(d).max(0) as f64;
            let want = (remaining.slot_milli(d).max(pod.slot_milli(d))) as f64;
            value += duals[i] * cap.min(want);
            size += duals[i] * cap;
        }
        Worth { value, size }
    }

    /// Recomputes the pool's dual prices when the remaining demand moved by >10%.
    pub(super) fn refresh_duals(&mut self, pool: PoolId) {
        let remaining = self.compatible_remaining(pool);
        if let Some(DualPrices { demand: at, .. }) = &self.pools[pool].duals {
            let drift = [CPU, MEMORY, PODS].iter().any(|&d| {
                let (a, b) = (at.slot_milli(d) as f64, remaining.slot_milli(d) as f64);
                (a - b).abs() > 0.1 * a.max(1.0)
            });
            if !drift {
                return;
            }
        }
        let dims: Vec<usize> = (0..WELL_KNOWN.len())
            .filter(|&d| remaining.slot_milli(d) > 0 && d != crate::resources::EPHEMERAL_STORAGE)
            .collect();
        let scale = |d: usize| {
            if d == MEMORY {
                (1u64 << 30) as f64 * 1000.0
            } else {
                1000.0
            }
        };
        let demand: Vec<f64> = dims
            .iter()
            .map(|&d| remaining.slot_milli(d) as f64 / scale(d))
            .collect();
        let reqs = self.pools[pool].reqs.clone();
        let mut caps = Vec::new();
        let mut prices = Vec::new();
        for &t in &self.pools[pool].types {
            let Some(Offering { price, .. }) = self.cheapest_offering(t, &reqs, None, None) else {
                continue;
            };
            let usable = self.usable(pool, t);
            caps.push(
                dims.iter()
                    .map(|&d| usable.slot_milli(d).max(0) as f64 / scale(d))
                    .collect(),
            );
            prices.push(price);
        }
        let duals = lp::cheapest_fractional_fleet(&demand, &caps, &prices).map(|s| {
            s.duals
                .iter()
                .zip(&dims)
                .map(|(y, &d)| y / scale(d))
                .collect()
        });
        self.pools[pool].duals = duals.map(|prices| DualPrices {
            dims,
            prices,
            demand: remaining,
        });
    }
}
