//! [`Pricing`]: what the planner knows about prices and availability beyond the
//! catalog — spot prices, the offerings out of capacity, NodeOverlays' changes, the
//! capacity reservations it may launch into, the zones under an ARC zonal shift — and
//! the price of each offering and of each running node from them.

use std::collections::{HashMap, HashSet};

use crate::catalog::{
    CapacityType, DEFAULT_SPOT_FRACTION, InstanceType, RESERVED_PRICE_DIVISOR, Reservation,
};

/// What the planner knows about prices and availability beyond the catalog.
#[derive(Debug, Clone, PartialEq)]
pub struct Pricing {
    /// Zones to offer capacity in.
    pub zones: Vec<String>,
    /// Known spot prices per (instance type, zone).
    pub spot_prices: HashMap<(String, String), f64>,
    /// Fraction of on-demand used for spot when no spot price is known.
    pub spot_fraction: f64,
    /// Offerings known to be unavailable right now (insufficient capacity cache).
    pub unavailable: HashSet<(String, String, CapacityType)>,
    /// What NodeOverlays do to prices and capacity, per NodePool (see
    /// [`crate::overlay`]); empty when there are none.
    pub overlays: std::sync::Arc<crate::overlay::OverlayTable>,
    /// Capacity reservations the EC2NodeClasses select that can take instances now
    /// (active, not expiring): where `reserved` offerings exist.
    pub reservations: Vec<Reservation>,
    /// Whether a minValues the fitting types cannot keep leaves pods pending or is
    /// lowered (`MIN_VALUES_POLICY`); planning and consolidation read it alike.
    pub min_values_policy: crate::scheduling::requirements::MinValuesPolicy,
    /// Zones (names) under an ARC zonal shift or autoshift now: nothing is sold there
    /// (no launch, no replacement) while it lasts, and consolidation neither disrupts
    /// nor fills the nodes there ([`crate::disruption`]). Empty unless the stack opts in.
    pub shifted_zones: Vec<String>,
}

impl Default for Pricing {
    fn default() -> Self {
        Self::for_zones(
            ["us-east-1a", "us-east-1b", "us-east-1c"]
                .map(String::from)
                .to_vec(),
        )
    }
}

impl Pricing {
    pub fn for_zones(zones: Vec<String>) -> Self {
        Self {
            zones,
            spot_prices: HashMap::new(),
            spot_fraction: DEFAULT_SPOT_FRACTION,
            unavailable: HashSet::new(),
            overlays: Default::default(),
            reservations: Vec::new(),
            min_values_policy: Default::default(),
            shifted_zones: Vec::new(),
        }
    }

    /// Whether `zone` is under a zonal shift now.
    pub fn is_shifted(&self, zone: &str) -> bool {
        self.shifted_zones.iter().any(|z| z == zone)
    }

    /// The reservations a node of EC2NodeClass `class` (any class when `None`) of type
    /// `instance_type` in `zone` may launch into, with instances left.
    pub fn reservations_for<'p>(
        &'p self,
        class: Option<&'p str>,
        instance_type: &'p str,
        zone: &'p str,
    ) -> impl Iterator<Item = &'p Reservation> + 'p {
        self.reservations.iter().filter(move |r| {
            r.instance_type == instance_type
                && r.zone == zone
                && r.available > 0
                && class.is_none_or(|c| r.selected_by(c))
        })
    }

    /// [`Self::price`] for a node of NodePool `pool`: with the pool's NodeOverlays.
    pub fn price_in(
        &self,
        pool: &str,
        it: &InstanceType,
        zone: &str,
        capacity_type: CapacityType,
    ) -> Option<f64> {
        let base = self.price(it, zone, capacity_type)?;
        if self.overlays.is_empty() {
            return Some(base);
        }
        Some(
            self.overlays
                .price(pool, &it.name, zone, capacity_type, base),
        )
    }

    /// Price of one offering, or `None` when it is not offered, known unavailable, or
    /// in a zone under a zonal shift.
    pub fn price(&self, it: &InstanceType, zone: &str, capacity_type: CapacityType) -> Option<f64> {
        if !self.unavailable.is_empty()
            && self
                .unavailable
                .contains(&(it.name.clone(), zone.to_string(), capacity_type))
        {
            return None;
        }
        if self.is_shifted(zone) {
            return None;
        }
        self.running_price(it, zone, capacity_type)
    }

    /// What a node of this offering costs while it runs, whether or not the offering
    /// can be launched now: an instance keeps its spot price when the spot pool runs
    /// out of capacity or its zone is shifted away from. Pricing such a node at
    /// on-demand would make replacing it look like a saving. A `reserved` offering
    /// still needs a reservation with room (see [`Self::price`]).
    pub fn running_price(
        &self,
        it: &InstanceType,
        zone: &str,
        capacity_type: CapacityType,
    ) -> Option<f64> {
        let od = it.on_demand_price?;
        Some(match capacity_type {
            CapacityType::OnDemand => od,
            CapacityType::Reserved => {
                self.reservations_for(None, &it.name, zone).next()?;
                od / RESERVED_PRICE_DIVISOR
            }
            CapacityType::Spot => self
                .spot_prices
                .get(&(it.name.clone(), zone.to_string()))
                .copied()
                .unwrap_or(od * self.spot_fraction),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;

    #[test]
    fn spot_defaults_to_a_documented_fraction_of_on_demand_unless_priced() {
        let c = Catalog::embedded();
        let m5 = c.get("m5.xlarge").unwrap();
        let mut pricing = Pricing::default();
        let spot = pricing.price(m5, "us-east-1a", CapacityType::Spot).unwrap();
        assert!((spot - 0.192 * DEFAULT_SPOT_FRACTION).abs() < 1e-12);
        pricing
            .spot_prices
            .insert(("m5.xlarge".into(), "us-east-1a".into()), 0.05);
        assert_eq!(
            pricing.price(m5, "us-east-1a", CapacityType::Spot),
            Some(0.05)
        );
        pricing
            .unavailable
            .insert(("m5.xlarge".into(), "us-east-1a".into(), CapacityType::Spot));
        assert_eq!(pricing.price(m5, "us-east-1a", CapacityType::Spot), None);
        assert!(
            pricing
                .price(m5, "us-east-1b", CapacityType::Spot)
                .is_some()
        );
    }

    #[test]
    fn a_shifted_zone_sells_nothing_but_its_running_nodes_keep_their_price() {
        let c = Catalog::embedded();
        let m5 = c.get("m5.xlarge").unwrap();
        let mut pricing = Pricing::default();
        pricing
            .spot_prices
            .insert(("m5.xlarge".into(), "us-east-1a".into()), 0.05);
        pricing
            .unavailable
            .insert(("m5.xlarge".into(), "us-east-1a".into(), CapacityType::Spot));
        pricing.shifted_zones = vec!["us-east-1b".into()];
        for ct in CapacityType::ALL {
            assert_eq!(pricing.price(m5, "us-east-1b", ct), None, "{ct:?}");
        }
        assert!(
            pricing
                .price(m5, "us-east-1c", CapacityType::OnDemand)
                .is_some()
        );
        // A spot node whose pool ran out of capacity still costs its spot price, not
        // on-demand (which would make replacing it look like a saving).
        assert_eq!(
            pricing.running_price(m5, "us-east-1a", CapacityType::Spot),
            Some(0.05)
        );
        assert_eq!(
            pricing.running_price(m5, "us-east-1b", CapacityType::OnDemand),
            Some(0.192)
        );
    }
}
