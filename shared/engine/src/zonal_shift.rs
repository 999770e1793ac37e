//! ARC zonal shifts and autoshifts (opt-in: the stack's `ZonalShift` parameter).
//!
//! While ARC shifts traffic away from an Availability Zone, nothing launches there and
//! consolidation leaves the zone alone: its offerings are not sold
//! ([`nodewright_core::pricing::Pricing::shifted_zones`]), its nodes are in no voluntary
//! command and take no moved pods (`RejectCode::ZonalShift`). Expiration, interruptions
//! and repair still act there: they replace a node whatever its zone, and the
//! replacement lands elsewhere.
//!
//! ARC names a zone by its ID (`use1-az1`); the EC2NodeClasses' subnets say which zone
//! name that is in this account. A zone none of them has a subnet in cannot get a launch
//! anyway, and is left out.
//!
//! Each NodePool that could launch into a zone is told when a shift there starts
//! (Warning `ZonalShiftActive`) and ends (Normal `ZonalShiftCleared`). The memory of
//! what was shifted lives as long as the warm Lambda: a cold start tells the shifts in
//! force again, and a shift that ended while no process remembered it ends silently.

use std::collections::BTreeMap;
use std::sync::Mutex;

use tracing::info;

use nodewright_core::api::model::NodePool;
use nodewright_core::scheduling::requirements::node_pool_allows;
use nodewright_core::well_known::LABEL_ZONE;

use crate::context::Ports;
use crate::ports::{ClusterEvent, EventType, ObjectKind, ResolvedNodeClass, ZonalShift};

/// Event reasons on a NodePool.
pub const ZONAL_SHIFT_ACTIVE: &str = "ZonalShiftActive";
pub const ZONAL_SHIFT_CLEARED: &str = "ZonalShiftCleared";

/// A zone under a shift in force, by name and ID.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ShiftedZone {
    pub zone: String,
    pub zone_id: String,
    /// ARC's shift type (`ZONAL_SHIFT`, `ZONAL_AUTOSHIFT`, ...).
    pub kind: String,
}

/// The shifts in force at `now`, by zone name, for the zones the resolved classes'
/// subnets are in. One entry per zone, sorted by name.
pub fn shifted_zones<'a>(
    shifts: &[ZonalShift],
    classes: impl Iterator<Item = &'a ResolvedNodeClass>,
    now: i64,
) -> Vec<ShiftedZone> {
    if shifts.is_empty() {
        return Vec::new();
    }
    let names: BTreeMap<&str, &str> = classes
        .flat_map(|r| r.subnets.iter())
        .map(|s| (s.zone_id.as_str(), s.zone.as_str()))
        .collect();
    let mut out: Vec<ShiftedZone> = shifts
        .iter()
        .filter(|s| s.active(now))
        .filter_map(|s| {
            Some(ShiftedZone {
                zone: names.get(s.zone_id.as_str())?.to_string(),
                zone_id: s.zone_id.clone(),
                kind: s.kind.clone(),
            })
        })
        .collect();
    out.sort();
    out.dedup_by(|a, b| a.zone == b.zone);
    out
}

/// Whether `pool` may put a node in `zone`.
fn pool_allows_zone(pool: &NodePool, zone: &str) -> bool {
    node_pool_allows(pool, LABEL_ZONE, zone)
}

/// What the provisioner remembers between ticks: the zones it last saw shifted (ID →
/// name), to tell the NodePools when a shift starts and ends.
#[derive(Debug, Default)]
pub struct ZonalShiftNotices {
    told: Mutex<BTreeMap<String, String>>,
}

impl ZonalShiftNotices {
    /// Tells each NodePool that could launch into a zone whose shift started or ended
    /// since the last call. `classes` are the resolved EC2NodeClasses by name (a pool is
    /// told about a zone its class has a subnet in).
    pub(crate) async fn publish<'a>(
        &self,
        ports: &Ports,
        shifted: &[ShiftedZone],
        pools: &[NodePool],
        classes: &(dyn Fn(&str) -> Option<&'a ResolvedNodeClass> + Sync),
    ) {
        let now: BTreeMap<String, String> = shifted
            .iter()
            .map(|s| (s.zone_id.clone(), s.zone.clone()))
            .collect();
        let (started, ended) = {
            let told = self.told.lock().unwrap_or_else(|p| p.into_inner());
            let started: Vec<&ShiftedZone> = shifted
                .iter()
                .filter(|s| !told.contains_key(&s.zone_id))
                .collect();
            let ended: Vec<(String, String)> = told
                .iter()
                .filter(|(id, _)| !now.contains_key(*id))
                .map(|(id, zone)| (id.clone(), zone.clone()))
                .collect();
            (started, ended)
        };
        if started.is_empty() && ended.is_empty() {
            return;
        }
        let affected = |zone: &str| -> Vec<&NodePool> {
            pools
                .iter()
                .filter(|p| {
                    pool_allows_zone(p, zone)
                        && classes(&p.node_class_ref.name)
                            .is_some_and(|c| c.subnets.iter().any(|s| s.zone == zone))
                })
                .collect()
        };
        for s in &started {
            info!(zone = %s.zone, zone_id = %s.zone_id, shift = %s.kind,
                "zonal shift in force: no launch in the zone, and consolidation leaves its nodes alone, until it ends");
            for pool in affected(&s.zone) {
                ports
                    .emit(ClusterEvent::about_object(
                        ObjectKind::NodePool,
                        &pool.name,
                        EventType::Warning,
                        ZONAL_SHIFT_ACTIVE,
                        format!(
                            "ARC shifted traffic away from zone {} ({}): NodePool {} launches nothing there, and its nodes there are not consolidated, until the shift ends",
                            s.zone, s.zone_id, pool.name
                        ),
                    ))
                    .await;
            }
        }
        for (zone_id, zone) in &ended {
            info!(zone = %zone, zone_id = %zone_id, "zonal shift over: launches in the zone resume");
            for pool in affected(zone) {
                ports
                    .emit(ClusterEvent::about_object(
                        ObjectKind::NodePool,
                        &pool.name,
                        EventType::Normal,
                        ZONAL_SHIFT_CLEARED,
                        format!(
                            "the zonal shift away from zone {zone} ({zone_id}) is over: NodePool {} may launch there again",
                            pool.name
                        ),
                    ))
                    .await;
            }
        }
        *self.told.lock().unwrap_or_else(|p| p.into_inner()) = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::Subnet;

    fn class(zones: &[(&str, &str)]) -> ResolvedNodeClass {
        ResolvedNodeClass {
            subnets: zones
                .iter()
                .map(|(zone, id)| Subnet {
                    id: format!("subnet-{id}"),
                    zone: zone.to_string(),
                    zone_id: id.to_string(),
                    available_ips: 100,
                })
                .collect(),
            security_group_ids: vec![],
            images: vec![],
            instance_profile: None,
            reservations: vec![],
        }
    }

    fn shift(zone_id: &str, applied: bool, expires: Option<i64>) -> ZonalShift {
        ZonalShift {
            zone_id: zone_id.into(),
            applied,
            expires,
            kind: "ZONAL_SHIFT".into(),
        }
    }

    #[test]
    fn only_applied_unexpired_shifts_of_zones_the_classes_use_are_in_force() {
        let c = class(&[("us-east-1a", "use1-az4"), ("us-east-1b", "use1-az6")]);
        let shifts = [
            shift("use1-az4", true, Some(1_000)),
            shift("use1-az6", false, Some(1_000)),
            shift("use1-az2", true, None),
        ];
        let found = shifted_zones(&shifts, [&c].into_iter(), 999);
        assert_eq!(
            found.iter().map(|s| s.zone.as_str()).collect::<Vec<_>>(),
            ["us-east-1a"]
        );
        assert!(shifted_zones(&shifts, [&c].into_iter(), 1_000).is_empty());
        // An autoshift has no end of its own.
        let auto = [shift("use1-az6", true, None)];
        assert_eq!(
            shifted_zones(&auto, [&c].into_iter(), i64::MAX)[0].zone,
            "us-east-1b"
        );
    }

    #[test]
    fn a_pool_is_told_of_a_zone_only_when_its_requirements_allow_it() {
        use nodewright_core::api::model::Operator;
        let mut pool = nodewright_core::testing::general_purpose_pool();
        assert!(pool_allows_zone(&pool, "us-east-1a"));
        pool.requirements
            .push(nodewright_core::api::model::NodeRequirement {
                key: LABEL_ZONE.into(),
                operator: Operator::In,
                values: vec!["us-east-1b".into()],
                min_values: None,
            });
        assert!(!pool_allows_zone(&pool, "us-east-1a"));
        assert!(pool_allows_zone(&pool, "us-east-1b"));
    }
}
