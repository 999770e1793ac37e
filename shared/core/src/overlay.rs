//! What NodeOverlays do, as Karpenter's NodeOverlay controller resolves them: per
//! NodePool, the price change of each (instance type, zone, capacity type) and the
//! extended resources each type gains, and each overlay's verdict.
//!
//! An overlay selects a type in a pool when its requirements are compatible with the
//! pool's name (`karpenter.sh/nodepool`), the pool's template labels and the type's own
//! labels, zones and capacity types (a key none of them names selects nothing, unless
//! its operator is NotIn or DoesNotExist); within a selected type, it applies to each
//! offering whose zone and capacity type it allows. Overlays are taken by weight
//! (higher first), equal weights by name (later in the alphabet first, Karpenter's
//! order). The first price to reach an offering is its price, the first value of a
//! resource its value; an overlay that would set a price an overlay of the *same*
//! weight already set on one of its offerings, or a resource such an overlay already
//! set on one of its types, conflicts: it is applied nowhere, in no pool, and its
//! `ValidationSucceeded` condition says `Conflict`.
//!
//! Pure: the engine and the CLI resolve once per read of the cluster or the manifests,
//! and the result rides in [`crate::pricing::Pricing::overlays`], so planning and
//! consolidation see the same prices.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::api::model::NodePool;
use crate::api::overlay::{InvalidOverlay, NodeOverlay, PriceChange, VALIDATION_SUCCEEDED};
use crate::catalog::{CapacityType, Catalog, InstanceType};
use crate::resources::Resources;
use crate::scheduling::requirements::{Requirements, ValueSet};
use crate::well_known::{LABEL_CAPACITY_TYPE, LABEL_NODEPOOL, LABEL_ZONE};

/// What the overlays do to one instance type in one pool.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TypeOverlay {
    /// The price change of each offering (zone, capacity type) an overlay priced.
    prices: HashMap<(String, CapacityType), PriceChange>,
    /// Extended resources set on the type, milli-units.
    capacity: BTreeMap<String, i64>,
}

impl TypeOverlay {
    /// The change to the price of the offering in `zone` of `capacity_type`.
    pub fn price_change(&self, zone: &str, capacity_type: CapacityType) -> Option<PriceChange> {
        // Few entries per type; a tuple key would need an owned zone to look up.
        self.prices
            .iter()
            .find(|((z, ct), _)| z == zone && *ct == capacity_type)
            .map(|(_, c)| *c)
    }

    pub fn has_prices(&self) -> bool {
        !self.prices.is_empty()
    }

    /// Extended resources the type gains (name, milli-units).
    pub fn capacity(&self) -> impl Iterator<Item = (&str, i64)> {
        self.capacity.iter().map(|(k, v)| (k.as_str(), *v))
    }

    /// `allocatable` with the overlaid resources set. Huge pages are carved out of the
    /// node's memory, so each `hugepages-*` quantity also leaves pods that much less
    /// memory (never below zero), as Karpenter v1.15 accounts for them.
    pub fn apply_capacity(&self, allocatable: &mut Resources) {
        for (name, milli) in self.capacity() {
            allocatable.set_milli(name, milli);
            if name.starts_with(HUGE_PAGES_PREFIX) {
                let memory = allocatable.get_milli(MEMORY);
                allocatable.set_milli(MEMORY, memory.saturating_sub(milli).max(0));
            }
        }
    }
}

/// Whether NodeOverlays changed a claim's instance-type options: some option has an
/// overlaid price (in any of its offerings), some has overlaid capacity. What the
/// annotations [`crate::well_known::ANNOTATION_PRICE_OVERLAY_APPLIED`] and
/// [`crate::well_known::ANNOTATION_CAPACITY_OVERLAY_APPLIED`] say.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OverlaysApplied {
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub price: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub capacity: bool,
}

impl OverlaysApplied {
    /// No overlay changed any option.
    pub fn is_none(&self) -> bool {
        !self.price && !self.capacity
    }
}

/// Kubernetes' prefix of huge page resources (`hugepages-2Mi`, `hugepages-1Gi`).
pub const HUGE_PAGES_PREFIX: &str = "hugepages-";
const MEMORY: &str = "memory";

/// Every pool's overlaid types: what planning and consolidation price and size with.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OverlayTable {
    pools: BTreeMap<String, HashMap<String, TypeOverlay>>,
}

impl OverlayTable {
    /// No overlay applies anywhere.
    pub fn is_empty(&self) -> bool {
        self.pools.is_empty()
    }

    /// What the overlays do to type `instance_type` in pool `pool`.
    pub fn get(&self, pool: &str, instance_type: &str) -> Option<&TypeOverlay> {
        self.pools.get(pool)?.get(instance_type)
    }

    /// Whether any overlay changes a price in `pool`.
    pub fn prices_in(&self, pool: &str) -> bool {
        self.pools
            .get(pool)
            .is_some_and(|types| types.values().any(TypeOverlay::has_prices))
    }

    /// The overlaid types of `pool`, by name.
    pub fn types_in(&self, pool: &str) -> impl Iterator<Item = (&str, &TypeOverlay)> {
        self.pools
            .get(pool)
            .into_iter()
            .flat_map(|types| types.iter().map(|(k, v)| (k.as_str(), v)))
    }

    /// The price of an offering priced `base`, in `pool`.
    pub fn price(
        &self,
        pool: &str,
        instance_type: &str,
        zone: &str,
        capacity_type: CapacityType,
        base: f64,
    ) -> f64 {
        match self
            .get(pool, instance_type)
            .and_then(|t| t.price_change(zone, capacity_type))
        {
            Some(change) => change.apply(base),
            None => base,
        }
    }

    /// The capacity NodePool `limits` count for a node of type `it` in `pool`: the
    /// catalog's, with the overlaid resources set over it (Karpenter's
    /// `ApplyCapacityOverlay`; huge pages come out of allocatable memory, not out of
    /// capacity).
    pub fn capacity(&self, pool: &str, it: &InstanceType) -> Resources {
        let mut r = it.capacity.clone();
        if let Some(t) = self.get(pool, &it.name) {
            for (name, milli) in t.capacity() {
                r.set_milli(name, milli);
            }
        }
        r
    }

    /// Whether an overlay priced or sized any of `instance_types` in `pool`: Karpenter
    /// checks a new NodeClaim's instance-type options, and annotates it. A static
    /// pool's claims (`replicas`) are not annotated: Karpenter leaves their types to
    /// the cloud provider.
    pub fn applied_to_claim<'t>(
        &self,
        pool: &NodePool,
        instance_types: impl IntoIterator<Item = &'t str>,
    ) -> OverlaysApplied {
        let mut applied = OverlaysApplied::default();
        if pool.is_static() {
            return applied;
        }
        let Some(types) = self.pools.get(&pool.name) else {
            return applied;
        };
        for name in instance_types {
            if let Some(t) = types.get(name) {
                applied.price |= t.has_prices();
                applied.capacity |= !t.capacity.is_empty();
            }
            if applied.price && applied.capacity {
                break;
            }
        }
        applied
    }

    /// The resources type `it` offers pods in `pool`: `allocatable` with the overlays'
    /// extended resources set (see [`TypeOverlay::apply_capacity`]).
    pub fn allocatable(&self, pool: &str, it: &InstanceType, allocatable: &Resources) -> Resources {
        let mut r = allocatable.clone();
        if let Some(t) = self.get(pool, &it.name) {
            t.apply_capacity(&mut r);
        }
        r
    }
}

/// An overlay's `ValidationSucceeded` condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Valid and not in conflict (it may still select nothing).
    Applied,
    /// An overlay of the same weight already set a price or resource it sets.
    Conflict,
    /// It breaks a rule (read from a cluster, where the CRD let it in).
    Invalid(String),
}

/// One overlay's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverlayStatus {
    pub name: String,
    pub verdict: Verdict,
}

impl OverlayStatus {
    /// `ValidationSucceeded`'s status.
    pub fn succeeded(&self) -> bool {
        self.verdict == Verdict::Applied
    }

    /// The condition's reason, as Karpenter's controller writes it.
    pub fn reason(&self) -> &'static str {
        match self.verdict {
            Verdict::Applied => VALIDATION_SUCCEEDED,
            Verdict::Conflict => "Conflict",
            Verdict::Invalid(_) => "RuntimeValidation",
        }
    }

    /// The condition's message.
    pub fn message(&self) -> String {
        match &self.verdict {
            Verdict::Applied => String::new(),
            Verdict::Conflict => "conflict with another overlay".to_string(),
            Verdict::Invalid(why) => why.clone(),
        }
    }
}

/// The overlays resolved: the table and every overlay's verdict, in the order they
/// were taken (weight, then name, both descending).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Resolution {
    pub table: OverlayTable,
    pub statuses: Vec<OverlayStatus>,
}

/// An update as the resolver keeps it: the value applied, and the lowest weight of an
/// overlay that reached it (conflicts are between equal weights).
#[derive(Debug, Clone)]
struct PriceSlot {
    change: PriceChange,
    lowest_weight: i32,
}

#[derive(Debug, Clone, Default)]
struct CapacitySlot {
    applied: BTreeMap<String, i64>,
    lowest_weight: i32,
    lowest_weight_resources: Vec<String>,
}

/// (pool index, catalog index).
type PoolType = (usize, usize);
/// (zone index, capacity type).
type Offering = (usize, CapacityType);

#[derive(Default)]
struct Store {
    prices: HashMap<PoolType, BTreeMap<Offering, PriceSlot>>,
    capacity: HashMap<PoolType, CapacitySlot>,
}

/// Resolves `overlays` (valid, or as read with why not) for `pools`, over the catalog's
/// priced types offered in `zones` with every capacity type.
pub fn resolve(
    overlays: &[Result<NodeOverlay, InvalidOverlay>],
    pools: &[NodePool],
    catalog: &Catalog,
    zones: &[String],
) -> Resolution {
    let mut order: Vec<&Result<NodeOverlay, InvalidOverlay>> = overlays.iter().collect();
    // Weight, then name, both descending (Karpenter's `OrderByWeight`).
    order.sort_by_key(|o| {
        std::cmp::Reverse(match o {
            Ok(o) => (o.weight, o.name.clone()),
            Err(i) => (0, i.name.clone()),
        })
    });
    let types: Vec<(usize, &InstanceType)> = catalog
        .types
        .iter()
        .enumerate()
        .filter(|(_, t)| t.on_demand_price.is_some())
        .collect();
    let mut store = Store::default();
    let mut statuses = Vec::with_capacity(order.len());
    for overlay in order {
        let overlay = match overlay {
            Err(invalid) => {
                statuses.push(OverlayStatus {
                    name: invalid.name.clone(),
                    verdict: Verdict::Invalid(invalid.message.clone()),
                });
                continue;
            }
            Ok(o) => o,
        };
        let reqs = Requirements::from_node_requirements(&overlay.requirements);
        // (pool, type) → the offerings it selects, across every pool first: an
        // overlay in conflict anywhere applies nowhere.
        let mut selected: Vec<(PoolType, Vec<Offering>)> = Vec::new();
        for (p, pool) in pools.iter().enumerate() {
            for &(t, it) in &types {
                let offerings = selected_offerings(&reqs, pool, it, zones);
                if !offerings.is_empty() {
                    selected.push(((p, t), offerings));
                }
            }
        }
        let conflict = selected
            .iter()
            .any(|(at, offerings)| conflicts(&store, overlay, *at, offerings));
        if !conflict {
            for (at, offerings) in &selected {
                record(&mut store, overlay, *at, offerings);
            }
        }
        statuses.push(OverlayStatus {
            name: overlay.name.clone(),
            verdict: if conflict {
                Verdict::Conflict
            } else {
                Verdict::Applied
            },
        });
    }
    let mut table = OverlayTable::default();
    for ((p, t), slots) in store.prices {
        let entry = table_entry(&mut table, pools, catalog, p, t);
        for ((z, ct), slot) in slots {
            entry.prices.insert((zones[z].clone(), ct), slot.change);
        }
    }
    for ((p, t), slot) in store.capacity {
        if slot.applied.is_empty() {
            continue;
        }
        table_entry(&mut table, pools, catalog, p, t).capacity = slot.applied;
    }
    Resolution { table, statuses }
}

fn table_entry<'t>(
    table: &'t mut OverlayTable,
    pools: &[NodePool],
    catalog: &Catalog,
    pool: usize,
    instance_type: usize,
) -> &'t mut TypeOverlay {
    table
        .pools
        .entry(pools[pool].name.clone())
        .or_default()
        .entry(catalog.types[instance_type].name.clone())
        .or_default()
}

/// The offerings (zone index, capacity type) of `it` in `pool` that `reqs` selects;
/// empty when it selects none of the type's (Karpenter's `getOverlaidOfferings`).
fn selected_offerings(
    reqs: &Requirements,
    pool: &NodePool,
    it: &InstanceType,
    zones: &[String],
) -> Vec<(usize, CapacityType)> {
    for (key, want) in reqs.iter() {
        let have = known_values(key, pool, it, zones);
        let compatible = match have {
            None => want.allows_absent(),
            Some(have) => have.intersects(want),
        };
        if !compatible {
            return Vec::new();
        }
    }
    let zone_set = reqs.get(LABEL_ZONE);
    let ct_set = reqs.get(LABEL_CAPACITY_TYPE);
    let mut out = Vec::new();
    for (z, zone) in zones.iter().enumerate() {
        if zone_set.is_some_and(|s| !s.has(zone)) {
            continue;
        }
        for ct in CapacityType::ALL {
            if ct_set.is_none_or(|s| s.has(ct.as_str())) {
                out.push((z, ct));
            }
        }
    }
    out
}

/// The values a node of `it` in `pool` may have for `key`: the pool's name, its
/// template labels, the type's labels, its zones and capacity types (intersected when
/// several name the key); `None` when none does.
fn known_values(
    key: &str,
    pool: &NodePool,
    it: &InstanceType,
    zones: &[String],
) -> Option<ValueSet> {
    let mut sets: Vec<ValueSet> = Vec::new();
    if key == LABEL_NODEPOOL {
        sets.push(ValueSet::in_values([pool.name.clone()]));
    }
    if key == LABEL_ZONE {
        sets.push(ValueSet::in_values(zones.iter().cloned()));
    }
    if key == LABEL_CAPACITY_TYPE {
        sets.push(ValueSet::in_values(CapacityType::ALL.map(|c| c.as_str())));
    }
    if let Some(v) = pool.labels.get(key) {
        sets.push(ValueSet::in_values([v.clone()]));
    }
    if let Some(v) = it.labels.get(key) {
        sets.push(ValueSet::in_values([v.clone()]));
    }
    let mut sets = sets.into_iter();
    let first = sets.next()?;
    Some(sets.fold(first, |acc, s| acc.intersect(&s)))
}

fn conflicts(
    store: &Store,
    overlay: &NodeOverlay,
    at: (usize, usize),
    offerings: &[(usize, CapacityType)],
) -> bool {
    if overlay.price.is_some()
        && let Some(slots) = store.prices.get(&at)
        && offerings.iter().any(|o| {
            slots
                .get(o)
                .is_some_and(|slot| slot.lowest_weight == overlay.weight)
        })
    {
        return true;
    }
    if !overlay.capacity.is_empty()
        && let Some(slot) = store.capacity.get(&at)
        && slot.lowest_weight == overlay.weight
        && overlay
            .capacity
            .keys()
            .any(|r| slot.lowest_weight_resources.contains(r))
    {
        return true;
    }
    false
}

fn record(
    store: &mut Store,
    overlay: &NodeOverlay,
    at: (usize, usize),
    offerings: &[(usize, CapacityType)],
) {
    if let Some(change) = overlay.price {
        let slots = store.prices.entry(at).or_default();
        for o in offerings {
            slots
                .entry(*o)
                .and_modify(|slot| slot.lowest_weight = overlay.weight)
                .or_insert(PriceSlot {
                    change,
                    lowest_weight: overlay.weight,
                });
        }
    }
    if !overlay.capacity.is_empty() {
        let slot = store.capacity.entry(at).or_default();
        for (resource, milli) in &overlay.capacity {
            slot.applied.entry(resource.clone()).or_insert(*milli);
        }
        slot.lowest_weight = overlay.weight;
        slot.lowest_weight_resources = overlay.capacity.keys().cloned().collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::model::{NodeRequirement, Operator};

    fn pool(name: &str, labels: &[(&str, &str)]) -> NodePool {
        let text = format!(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: {name}}}\nspec:\n  template:\n    spec:\n      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n---\napiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {{name: default}}\nspec:\n  role: r\n  amiSelectorTerms: [{{alias: al2023@latest}}]\n  subnetSelectorTerms: [{{tags: {{a: b}}}}]\n  securityGroupSelectorTerms: [{{tags: {{a: b}}}}]\n"
        );
        let mut p = crate::api::load(&[("p.yaml".into(), text)])
            .unwrap_or_else(|e| panic!("{e}"))
            .node_pools
            .remove(0);
        p.labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        p
    }

    fn req(key: &str, op: Operator, values: &[&str]) -> NodeRequirement {
        NodeRequirement {
            key: key.into(),
            operator: op,
            values: values.iter().map(|v| v.to_string()).collect(),
            min_values: None,
        }
    }

    fn overlay(
        name: &str,
        weight: i32,
        requirements: Vec<NodeRequirement>,
        price: Option<PriceChange>,
        capacity: &[(&str, i64)],
    ) -> Result<NodeOverlay, InvalidOverlay> {
        Ok(NodeOverlay {
            name: name.into(),
            weight,
            requirements,
            price,
            capacity: capacity.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        })
    }

    fn zones() -> Vec<String> {
        vec!["us-east-1a".into(), "us-east-1b".into()]
    }

    fn m5() -> NodeRequirement {
        req("karpenter.k8s.aws/instance-family", Operator::In, &["m5"])
    }

    fn verdicts(r: &Resolution) -> Vec<(&str, &str)> {
        r.statuses
            .iter()
            .map(|s| (s.name.as_str(), s.reason()))
            .collect()
    }

    #[test]
    fn a_percent_discount_on_one_family_in_one_pool_changes_only_its_offerings() {
        let pools = [pool("a", &[]), pool("b", &[])];
        let overlays = [overlay(
            "savings",
            0,
            vec![m5(), req(LABEL_NODEPOOL, Operator::In, &["a"])],
            Some(PriceChange::Percent(-30.0)),
            &[],
        )];
        let r = resolve(&overlays, &pools, Catalog::embedded(), &zones());
        assert_eq!(verdicts(&r), [("savings", "ValidationSucceeded")]);
        let t = &r.table;
        let od = CapacityType::OnDemand;
        assert!((t.price("a", "m5.large", "us-east-1a", od, 0.096) - 0.0672).abs() < 1e-9);
        assert_eq!(t.price("b", "m5.large", "us-east-1a", od, 0.096), 0.096);
        assert_eq!(t.price("a", "c5.large", "us-east-1a", od, 0.085), 0.085);
        assert!(t.prices_in("a") && !t.prices_in("b"));
    }

    #[test]
    fn an_overlay_may_select_offerings_by_zone_and_capacity_type() {
        let pools = [pool("a", &[])];
        let overlays = [overlay(
            "spot-a",
            0,
            vec![
                m5(),
                req(LABEL_ZONE, Operator::In, &["us-east-1a"]),
                req(LABEL_CAPACITY_TYPE, Operator::In, &["spot"]),
            ],
            Some(PriceChange::Price(0.01)),
            &[],
        )];
        let r = resolve(&overlays, &pools, Catalog::embedded(), &zones());
        let t = r.table.get("a", "m5.large").expect("overlaid");
        assert_eq!(
            t.price_change("us-east-1a", CapacityType::Spot),
            Some(PriceChange::Price(0.01))
        );
        assert_eq!(t.price_change("us-east-1b", CapacityType::Spot), None);
        assert_eq!(t.price_change("us-east-1a", CapacityType::OnDemand), None);
    }

    #[test]
    fn custom_keys_select_by_pool_template_labels_and_unknown_keys_select_nothing() {
        let pools = [pool("a", &[("team", "ml")]), pool("b", &[])];
        let overlays = [
            overlay(
                "ml",
                0,
                vec![req("team", Operator::In, &["ml"])],
                Some(PriceChange::Add(1.0)),
                &[],
            ),
            overlay(
                "absent-ok",
                0,
                vec![req("other", Operator::DoesNotExist, &[])],
                None,
                &[("example.com/thing", 1000)],
            ),
        ];
        let r = resolve(&overlays, &pools, Catalog::embedded(), &zones());
        assert!(r.table.prices_in("a"));
        assert!(!r.table.prices_in("b"));
        assert!(
            r.table
                .get("b", "m5.large")
                .is_some_and(|t| t.capacity().count() == 1)
        );
    }

    #[test]
    fn the_heavier_overlay_wins_and_equal_weights_on_one_offering_conflict() {
        let pools = [pool("a", &[])];
        let overlays = [
            overlay("heavy", 10, vec![m5()], Some(PriceChange::Price(0.5)), &[]),
            overlay("light-b", 1, vec![m5()], Some(PriceChange::Price(0.2)), &[]),
            overlay("light-a", 1, vec![m5()], Some(PriceChange::Price(0.1)), &[]),
            overlay(
                "elsewhere",
                1,
                vec![req(
                    "karpenter.k8s.aws/instance-family",
                    Operator::In,
                    &["c5"],
                )],
                Some(PriceChange::Price(0.3)),
                &[],
            ),
        ];
        let r = resolve(&overlays, &pools, Catalog::embedded(), &zones());
        assert_eq!(
            verdicts(&r),
            [
                ("heavy", "ValidationSucceeded"),
                ("light-b", "ValidationSucceeded"),
                ("light-a", "Conflict"),
                ("elsewhere", "ValidationSucceeded"),
            ]
        );
        let od = CapacityType::OnDemand;
        assert_eq!(r.table.price("a", "m5.large", "us-east-1a", od, 0.096), 0.5);
        assert_eq!(r.table.price("a", "c5.large", "us-east-1a", od, 0.085), 0.3);
        assert_eq!(r.statuses[2].message(), "conflict with another overlay");
    }

    #[test]
    fn capacity_merges_by_weight_and_conflicts_on_a_resource_set_at_the_same_weight() {
        let pools = [pool("a", &[])];
        let gi = (1i64 << 30) * 1000;
        let overlays = [
            overlay("device", 5, vec![m5()], None, &[("example.com/dev", 1000)]),
            overlay("huge-a", 5, vec![m5()], None, &[("hugepages-2Mi", 1000)]),
            overlay("huge-b", 5, vec![m5()], None, &[("hugepages-2Mi", gi)]),
            overlay(
                "lower",
                1,
                vec![m5()],
                None,
                &[("hugepages-2Mi", 1000), ("example.com/other", 3000)],
            ),
        ];
        let r = resolve(&overlays, &pools, Catalog::embedded(), &zones());
        assert_eq!(
            verdicts(&r),
            [
                ("huge-b", "ValidationSucceeded"),
                ("huge-a", "Conflict"),
                ("device", "ValidationSucceeded"),
                ("lower", "ValidationSucceeded"),
            ]
        );
        let t = r.table.get("a", "m5.large").expect("overlaid");
        let cap: Vec<(&str, i64)> = t.capacity().collect();
        assert_eq!(
            cap,
            [
                ("example.com/dev", 1000),
                ("example.com/other", 3000),
                ("hugepages-2Mi", gi)
            ]
        );
        let it = Catalog::embedded().get("m5.large").expect("m5.large");
        let alloc = r.table.allocatable("a", it, &it.allocatable);
        assert_eq!(alloc.get_milli("hugepages-2Mi"), gi);
        assert_eq!(alloc.get_milli("cpu"), it.allocatable.get_milli("cpu"));
        // Huge pages come out of memory; devices do not.
        assert_eq!(
            alloc.get_milli("memory"),
            it.allocatable.get_milli("memory") - gi
        );
    }

    #[test]
    fn limits_count_overlaid_capacity_set_over_the_catalogs_and_claims_say_what_applied() {
        let mut pools = [pool("a", &[]), pool("s", &[])];
        pools[1].replicas = Some(2);
        let gi = (1i64 << 30) * 1000;
        let overlays = [
            overlay("huge", 0, vec![m5()], None, &[("hugepages-2Mi", gi)]),
            overlay(
                "cheap-c5",
                0,
                vec![req(
                    "karpenter.k8s.aws/instance-family",
                    Operator::In,
                    &["c5"],
                )],
                Some(PriceChange::Percent(-10.0)),
                &[],
            ),
        ];
        let r = resolve(&overlays, &pools, Catalog::embedded(), &zones());
        let m5 = Catalog::embedded().get("m5.large").expect("m5.large");
        let capacity = r.table.capacity("a", m5);
        assert_eq!(capacity.get_milli("hugepages-2Mi"), gi);
        // Huge pages leave allocatable memory smaller, not the capacity limits count.
        assert_eq!(
            capacity.get_milli("memory"),
            m5.capacity.get_milli("memory")
        );
        assert_eq!(capacity.get_milli("cpu"), m5.capacity.get_milli("cpu"));
        let applied =
            |pool: &NodePool, types: &[&str]| r.table.applied_to_claim(pool, types.iter().copied());
        assert_eq!(
            applied(&pools[0], &["m5.large", "r5.large"]),
            OverlaysApplied {
                price: false,
                capacity: true
            }
        );
        assert_eq!(
            applied(&pools[0], &["c5.large", "m5.large"]),
            OverlaysApplied {
                price: true,
                capacity: true
            }
        );
        assert!(applied(&pools[0], &["r5.large"]).is_none());
        // Karpenter does not annotate a static pool's claims.
        assert!(applied(&pools[1], &["c5.large", "m5.large"]).is_none());
    }

    #[test]
    fn an_invalid_overlay_from_a_cluster_applies_nowhere_and_says_why() {
        let pools = [pool("a", &[])];
        let overlays = [Err(InvalidOverlay {
            name: "broken".into(),
            message: "spec.capacity.cpu: resource \"cpu\" is restricted".into(),
        })];
        let r = resolve(&overlays, &pools, Catalog::embedded(), &zones());
        assert!(r.table.is_empty());
        assert!(!r.statuses[0].succeeded());
        assert_eq!(r.statuses[0].reason(), "RuntimeValidation");
    }
}
