//! Instance types, offerings and prices.
//!
//! The default catalog is embedded (derived, unchanged in content, from
//! `shared/data/instance-catalog.json`: 1,363 types with Karpenter's labels, AL2023
//! allocatable and us-east-1 on-demand prices), so planning works with no network.
//! `Catalog::from_json` reads the same format for people who plan against their own list.
//!
//! An offering is type × zone × capacity type. Spot prices, when not given, are
//! [`DEFAULT_SPOT_FRACTION`] of on-demand: a planning estimate, not a quote.

use crate::well_known::{
    LABEL_CAPACITY_RESERVATION_ID, LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE,
    LABEL_CAPACITY_RESERVATION_TYPE, LABEL_INSTANCE_CPU, LABEL_INSTANCE_MEMORY,
    LABEL_INSTANCE_TYPE,
};
use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::sync::OnceLock;

use serde::Deserialize;

use crate::resources::{EBS_ATTACHMENTS, RawQuantity, Resources, WELL_KNOWN};
use crate::scheduling::fast_hash::FastSet;

pub use crate::ebs_attachments::estimated_ebs_attachments;

/// Spot price as a fraction of on-demand when no spot price is known (a 60% discount,
/// in line with typical EC2 spot savings for c/m/r families).
pub const DEFAULT_SPOT_FRACTION: f64 = 0.4;

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, Deserialize,
)]
pub enum CapacityType {
    #[serde(rename = "spot")]
    Spot,
    #[serde(rename = "on-demand")]
    OnDemand,
    /// Capacity in an EC2 capacity reservation (an ODCR or a Capacity Block) that an
    /// EC2NodeClass selects: offered only while the reservation has instances left.
    #[serde(rename = "reserved")]
    Reserved,
}

impl CapacityType {
    pub const ALL: [CapacityType; 3] = [
        CapacityType::Spot,
        CapacityType::OnDemand,
        CapacityType::Reserved,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            CapacityType::Spot => "spot",
            CapacityType::OnDemand => "on-demand",
            CapacityType::Reserved => "reserved",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "spot" => Some(CapacityType::Spot),
            "on-demand" => Some(CapacityType::OnDemand),
            "reserved" => Some(CapacityType::Reserved),
            _ => None,
        }
    }
}

impl fmt::Display for CapacityType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct InstanceType {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// What pods can use (after kube/system reserved and eviction threshold).
    pub allocatable: Resources,
    /// Raw capacity for NodePool limits: cpu and memory from the instance-cpu /
    /// instance-memory labels when present, otherwise the allocatable values.
    pub capacity: Resources,
    /// `None` when the type has no on-demand price (then it has no offerings).
    pub on_demand_price: Option<f64>,
}

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error(
        "catalog is not valid JSON of the expected shape (instanceTypes[] with name, labels, allocatable, onDemandPricePerHour): {0}"
    )]
    Shape(#[source] serde_path_to_error::Error<serde_json::Error>),
    #[error("catalog instanceTypes[{index}] ({name}): allocatable.{resource}: {source}")]
    Quantity {
        index: usize,
        name: String,
        resource: String,
        #[source]
        source: crate::resources::QuantityError,
    },
    #[error("catalog instanceTypes[{index}] ({name}): {message}")]
    Invalid {
        index: usize,
        name: String,
        message: String,
    },
    #[error("catalog has no instance types")]
    Empty,
}

#[derive(Deserialize)]
struct RawCatalog {
    #[serde(rename = "instanceTypes")]
    instance_types: Vec<RawInstanceType>,
}

#[derive(Deserialize)]
struct RawInstanceType {
    name: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    allocatable: BTreeMap<String, RawQuantity>,
    #[serde(rename = "onDemandPricePerHour")]
    on_demand_price_per_hour: Option<f64>,
}

/// A list of instance types. Cheap to share: planners hold it by reference.
#[derive(Debug, Clone, PartialEq)]
pub struct Catalog {
    pub types: Vec<InstanceType>,
}

static EMBEDDED_JSON: &str = include_str!("../data/instance-catalog.json");

impl Catalog {
    /// The embedded default catalog, parsed once.
    pub fn embedded() -> &'static Catalog {
        static CATALOG: OnceLock<Catalog> = OnceLock::new();
        CATALOG.get_or_init(|| {
            Catalog::from_json(EMBEDDED_JSON).expect("the embedded catalog is checked by tests")
        })
    }

    pub fn from_json(text: &str) -> Result<Catalog, CatalogError> {
        let de = &mut serde_json::Deserializer::from_str(text);
        let raw: RawCatalog = serde_path_to_error::deserialize(de).map_err(CatalogError::Shape)?;
        if raw.instance_types.is_empty() {
            return Err(CatalogError::Empty);
        }
        let mut seen = HashSet::new();
        let mut types = Vec::with_capacity(raw.instance_types.len());
        for (index, t) in raw.instance_types.into_iter().enumerate() {
            if t.name.is_empty() {
                return Err(CatalogError::Invalid {
                    index,
                    name: t.name,
                    message: "name is empty".into(),
                });
            }
            if !seen.insert(t.name.clone()) {
                return Err(CatalogError::Invalid {
                    index,
                    name: t.name,
                    message: "duplicate instance type name".into(),
                });
            }
            if let Some(p) = t.on_demand_price_per_hour
                && !(p.is_finite() && p >= 0.0)
            {
                return Err(CatalogError::Invalid {
                    index,
                    name: t.name,
                    message: format!("onDemandPricePerHour must be a non-negative number, got {p}"),
                });
            }
            let mut allocatable = Resources::new();
            for (resource, q) in &t.allocatable {
                let milli = q.milli().map_err(|source| CatalogError::Quantity {
                    index,
                    name: t.name.clone(),
                    resource: resource.clone(),
                    source,
                })?;
                if milli < 0 {
                    return Err(CatalogError::Invalid {
                        index,
                        name: t.name,
                        message: format!("allocatable.{resource} is negative"),
                    });
                }
                allocatable.set_milli(resource, milli);
            }
            let mut labels = t.labels;
            labels
                .entry(LABEL_INSTANCE_TYPE.to_string())
                .or_insert_with(|| t.name.clone());
            let mut capacity = allocatable.clone();
            // Labels too large to represent in milli-units are ignored like unparseable ones.
            if let Some(cpu) = labels
                .get(LABEL_INSTANCE_CPU)
                .and_then(|v| v.parse::<i64>().ok())
                .and_then(|c| c.checked_mul(1000))
            {
                capacity.set_milli("cpu", cpu);
            }
            if let Some(memory) = labels
                .get(LABEL_INSTANCE_MEMORY)
                .and_then(|v| v.parse::<i64>().ok())
                .and_then(|mib| mib.checked_mul((1 << 20) * 1000))
            {
                capacity.set_milli("memory", memory);
            }
            // The EBS volumes it attaches for pods, unless the catalog says: planned as
            // a resource (see `crate::volume_limits`), not reported as capacity.
            if allocatable.slot_milli(EBS_ATTACHMENTS) == 0 {
                allocatable.set_milli(
                    WELL_KNOWN[EBS_ATTACHMENTS],
                    estimated_ebs_attachments(&t.name) * 1000,
                );
            }
            capacity.set_milli(WELL_KNOWN[EBS_ATTACHMENTS], 0);
            types.push(InstanceType {
                name: t.name,
                labels,
                allocatable,
                capacity,
                on_demand_price: t.on_demand_price_per_hour,
            });
        }
        Ok(Catalog { types })
    }

    pub fn get(&self, name: &str) -> Option<&InstanceType> {
        self.types.iter().find(|t| t.name == name)
    }

    /// Every label key some instance type carries: these are "well-known" for
    /// scheduling (a pod may require them even if a NodePool does not mention them).
    /// Borrowed, in a fast-hashed set: every decision asks, and a set of owned strings
    /// copied each of some 1,400 types' label keys each time.
    pub fn label_keys(&self) -> FastSet<&str> {
        self.types
            .iter()
            .flat_map(|t| t.labels.keys().map(String::as_str))
            .collect()
    }
}

/// The labels of a node launched into a capacity reservation. Requirements on them
/// select reservations (Karpenter's reserved offerings carry them; other offerings
/// carry none of them).
pub const RESERVATION_LABELS: [&str; 3] = [
    LABEL_CAPACITY_RESERVATION_ID,
    LABEL_CAPACITY_RESERVATION_TYPE,
    LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE,
];

/// A reserved offering is priced at on-demand divided by this (Karpenter's constant):
/// as good as free, so it wins, while the order between types stays that of on-demand
/// for consolidation.
pub const RESERVED_PRICE_DIVISOR: f64 = 10_000_000.0;

/// How long before a Capacity Block ends it counts as expiring (Karpenter's 40
/// minutes): nothing new launches into it, and its nodes are drained.
pub const CAPACITY_BLOCK_EXPIRATION_SECS: i64 = 40 * 60;

/// The kind of an EC2 capacity reservation.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, Deserialize,
)]
pub enum ReservationType {
    /// An On-Demand Capacity Reservation (ODCR).
    #[serde(rename = "default")]
    Default,
    /// A Capacity Block for ML: reserved until a fixed end time.
    #[serde(rename = "capacity-block")]
    CapacityBlock,
}

impl ReservationType {
    pub fn as_str(self) -> &'static str {
        match self {
            ReservationType::Default => "default",
            ReservationType::CapacityBlock => "capacity-block",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "default" => Some(ReservationType::Default),
            "capacity-block" => Some(ReservationType::CapacityBlock),
            _ => None,
        }
    }
}

/// How a reservation's capacity is bought, in the order Karpenter launches into them
/// when their offerings cost the same (`CapacityReservationTypeFilter`): an ODCR, then a
/// Capacity Block, then an interruptible ODCR, whose owner may take the instance back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ReservationMarket {
    /// An On-Demand Capacity Reservation: CreateFleet target `on-demand`.
    Odcr,
    /// A Capacity Block: target and market type `capacity-block`.
    CapacityBlock,
    /// An interruptible ODCR: target `reserved-capacity`, reservation type and market
    /// type `interruptible-capacity-reservation`.
    Interruptible,
}

impl fmt::Display for ReservationType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One active capacity reservation an EC2NodeClass selects, as planning sees it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reservation {
    pub id: String,
    pub instance_type: String,
    pub zone: String,
    #[serde(default = "default_reservation_type")]
    pub reservation_type: ReservationType,
    /// Instances it can still hold now.
    pub available: u32,
    /// When it ends (Unix seconds); `None` for an open-ended ODCR.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<i64>,
    /// Whether its owner may reclaim the capacity (interruptible reservations).
    #[serde(default)]
    pub interruptible: bool,
    /// The EC2NodeClasses that select it; empty means any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_classes: Vec<String>,
}

fn default_reservation_type() -> ReservationType {
    ReservationType::Default
}

impl Reservation {
    /// Whether the reservation is expiring at `now`: a Capacity Block within
    /// [`CAPACITY_BLOCK_EXPIRATION_SECS`] of its end. Nothing launches into an expiring
    /// reservation and its nodes are taken away.
    pub fn expiring(&self, now: i64) -> bool {
        self.reservation_type == ReservationType::CapacityBlock
            && self
                .end_time
                .is_some_and(|end| now >= end - CAPACITY_BLOCK_EXPIRATION_SECS)
    }

    /// How its capacity is bought; the order between reservations at one price.
    /// There are no interruptible Capacity Blocks (EC2 has none; Karpenter neither).
    pub fn market(&self) -> ReservationMarket {
        match self.reservation_type {
            ReservationType::CapacityBlock => ReservationMarket::CapacityBlock,
            ReservationType::Default if self.interruptible => ReservationMarket::Interruptible,
            ReservationType::Default => ReservationMarket::Odcr,
        }
    }

    /// Where it comes when planning and launch look for a reservation with room, first
    /// to last: by [`Self::market`], then by id.
    pub fn launch_order(&self) -> (ReservationMarket, &str) {
        (self.market(), &self.id)
    }

    /// Whether a node of EC2NodeClass `class` may launch into it.
    pub fn selected_by(&self, class: &str) -> bool {
        self.node_classes.is_empty() || self.node_classes.iter().any(|c| c == class)
    }

    /// Whether a claim with `labels` may launch into it: each reservation label the
    /// claim carries (a requirement pinned it) has this reservation's value.
    pub fn agrees_with(&self, labels: &BTreeMap<String, String>) -> bool {
        self.node_labels()
            .iter()
            .all(|(k, v)| labels.get(k).is_none_or(|l| l == v))
    }

    /// The value of reservation label `key` on a node launched into it; `None` for
    /// another key.
    pub fn label(&self, key: &str) -> Option<String> {
        match key {
            LABEL_CAPACITY_RESERVATION_ID => Some(self.id.clone()),
            LABEL_CAPACITY_RESERVATION_TYPE => Some(self.reservation_type.as_str().to_string()),
            LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE => Some(self.interruptible.to_string()),
            _ => None,
        }
    }

    /// The labels a node launched into it carries.
    pub fn node_labels(&self) -> [(String, String); 3] {
        [
            (LABEL_CAPACITY_RESERVATION_ID.to_string(), self.id.clone()),
            (
                LABEL_CAPACITY_RESERVATION_TYPE.to_string(),
                self.reservation_type.as_str().to_string(),
            ),
            (
                LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE.to_string(),
                self.interruptible.to_string(),
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_catalog_holds_every_type_of_the_source_file() {
        let c = Catalog::embedded();
        assert_eq!(c.types.len(), 1363);
        let m5 = c.get("m5.xlarge").expect("m5.xlarge");
        assert_eq!(m5.capacity.get_milli("cpu"), 4000);
        assert_eq!(m5.allocatable.get_milli("cpu"), 3920);
        assert_eq!(m5.allocatable.get_milli("pods"), 58_000);
        assert_eq!(m5.on_demand_price, Some(0.192));
        assert_eq!(m5.labels[LABEL_INSTANCE_TYPE], "m5.xlarge");
        // Types without a price carry none rather than a made-up one.
        assert_eq!(
            c.types
                .iter()
                .filter(|t| t.on_demand_price.is_none())
                .count(),
            18
        );
    }

    #[test]
    fn a_custom_catalog_with_a_bad_quantity_names_the_type_and_resource() {
        let text = r#"{"instanceTypes":[{"name":"x.large","labels":{},"allocatable":{"cpu":"1.5.3"},"onDemandPricePerHour":1}]}"#;
        let err = Catalog::from_json(text).unwrap_err().to_string();
        assert!(
            err.starts_with(
                "catalog instanceTypes[0] (x.large): allocatable.cpu: quantity \"1.5.3\""
            ),
            "{err}"
        );
    }

    #[test]
    fn a_custom_catalog_of_the_wrong_shape_says_which_field() {
        let err = Catalog::from_json(
            r#"{"instanceTypes":[{"name":"x","allocatable":{},"onDemandPricePerHour":"cheap"}]}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("instanceTypes[0].onDemandPricePerHour"),
            "{err}"
        );
        assert!(matches!(
            Catalog::from_json(r#"{"instanceTypes":[]}"#),
            Err(CatalogError::Empty)
        ));
    }
}
