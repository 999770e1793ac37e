//! DescribeCapacityReservations for an EC2NodeClass's `capacityReservationSelectorTerms`,
//! queried as Karpenter-AWS queries them: a term's `id` alone, or its `ownerID`, tags
//! (`"*"`: any value of the key) and `instanceMatchCriteria` as filters; active
//! reservations only. Read on every gather (no cache): the counts change with every
//! launch, and one call per term is cheap next to a tick.
//!
//! Interruptible ODCRs are kept, marked so: they are launched into last at one price
//! (CreateFleet target `reserved-capacity`, see `launch.rs`), and their nodes carry
//! `karpenter.k8s.aws/capacity-reservation-interruptible: "true"`.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::{
    CapacityReservation, CapacityReservationInstancePlatform, CapacityReservationType, Filter,
};

use nodewright_core::api::model::CapacityReservationSelectorTerm;
use nodewright_core::catalog::{Reservation, ReservationType};
use nodewright_engine::ports::CloudError;

use super::Ec2Cloud;
use crate::error::cloud_error;

impl Ec2Cloud {
    /// The active reservations any of `terms` selects, once each.
    pub(super) async fn describe_capacity_reservations(
        &self,
        terms: &[CapacityReservationSelectorTerm],
    ) -> Result<Vec<Reservation>, CloudError> {
        let mut found: BTreeMap<String, Reservation> = BTreeMap::new();
        for term in terms {
            let mut next: Option<String> = None;
            loop {
                let mut call = self
                    .ec2
                    .describe_capacity_reservations()
                    .set_filters(Some(filters(term)))
                    .set_next_token(next.take());
                call = match &term.id {
                    // MaxResults is refused alongside ids.
                    Some(id) => call.capacity_reservation_ids(id),
                    None => call.max_results(1000),
                };
                let out = call
                    .send()
                    .await
                    .map_err(|e| cloud_error("DescribeCapacityReservations", e))?;
                for cr in out.capacity_reservations.unwrap_or_default() {
                    if let Some(r) = reservation(&cr) {
                        found.insert(r.id.clone(), r);
                    } else {
                        tracing::debug!(
                            capacity_reservation =
                                cr.capacity_reservation_id.as_deref().unwrap_or_default(),
                            "capacity reservation left out (not Linux, an interruptible Capacity Block, or incomplete)"
                        );
                    }
                }
                match out.next_token {
                    Some(t) if !t.is_empty() => next = Some(t),
                    _ => break,
                }
            }
        }
        Ok(found.into_values().collect())
    }
}

/// The filters of one term's query: `state=active`, then its fields.
fn filters(term: &CapacityReservationSelectorTerm) -> Vec<Filter> {
    let filter = |name: &str, value: &str| Filter::builder().name(name).values(value).build();
    let mut filters = vec![filter("state", "active")];
    if term.id.is_some() {
        return filters;
    }
    if let Some(owner) = &term.owner_id {
        filters.push(filter("owner-id", owner));
    }
    for (k, v) in &term.tags {
        filters.push(if v == "*" {
            filter("tag-key", k)
        } else {
            filter(&format!("tag:{k}"), v)
        });
    }
    if let Some(c) = term.instance_match_criteria {
        filters.push(filter("instance-match-criteria", c.as_str()));
    }
    filters
}

/// One reservation as planning sees it; `None` for one nodes cannot use: one for a
/// platform other than Linux/UNIX, an interruptible Capacity Block (EC2 sells none;
/// Karpenter refuses one), or an entry missing its id, type or zone.
fn reservation(cr: &CapacityReservation) -> Option<Reservation> {
    let interruptible = cr.interruptible == Some(true);
    if cr
        .instance_platform
        .as_ref()
        .is_some_and(|p| *p != CapacityReservationInstancePlatform::LinuxUnix)
    {
        return None;
    }
    let reservation_type = match &cr.reservation_type {
        Some(CapacityReservationType::CapacityBlock) if interruptible => return None,
        Some(CapacityReservationType::CapacityBlock) => ReservationType::CapacityBlock,
        Some(CapacityReservationType::Default) | None => ReservationType::Default,
        Some(_) => return None,
    };
    Some(Reservation {
        id: cr.capacity_reservation_id.clone()?,
        instance_type: cr.instance_type.clone()?,
        zone: cr.availability_zone.clone()?,
        reservation_type,
        available: cr
            .available_instance_count
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0),
        end_time: cr.end_date.map(|d| d.secs()),
        interruptible,
        node_classes: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_core::api::model::InstanceMatchCriteria;
    use nodewright_core::catalog::ReservationMarket;

    fn names(filters: &[Filter]) -> Vec<(String, Vec<String>)> {
        filters
            .iter()
            .map(|f| {
                (
                    f.name.clone().unwrap_or_default(),
                    f.values.clone().unwrap_or_default(),
                )
            })
            .collect()
    }

    #[test]
    fn a_term_becomes_karpenters_filters_with_star_tags_as_tag_keys() {
        let term = CapacityReservationSelectorTerm {
            id: None,
            owner_id: Some("012345678901".into()),
            tags: [
                ("team".to_string(), "ml".to_string()),
                ("any".to_string(), "*".to_string()),
            ]
            .into(),
            instance_match_criteria: Some(InstanceMatchCriteria::Targeted),
        };
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            names(&filters(&term)),
            vec![
                ("state".into(), s(&["active"])),
                ("owner-id".into(), s(&["012345678901"])),
                ("tag-key".into(), s(&["any"])),
                ("tag:team".into(), s(&["ml"])),
                ("instance-match-criteria".into(), s(&["targeted"])),
            ]
        );
        let by_id = CapacityReservationSelectorTerm {
            id: Some("cr-0123".into()),
            ..Default::default()
        };
        assert_eq!(
            names(&filters(&by_id)),
            vec![("state".into(), s(&["active"]))]
        );
    }

    #[test]
    fn capacity_blocks_and_interruptible_odcrs_are_told_apart_and_interruptible_blocks_left_out() {
        let base = CapacityReservation::builder()
            .capacity_reservation_id("cr-0123")
            .instance_type("p5.48xlarge")
            .availability_zone("us-east-1a")
            .available_instance_count(2)
            .reservation_type(CapacityReservationType::CapacityBlock)
            .end_date(aws_sdk_ec2::primitives::DateTime::from_secs(1_800_000_000));
        let r = reservation(&base.clone().build()).expect("a capacity block");
        assert_eq!(r.reservation_type, ReservationType::CapacityBlock);
        assert_eq!(r.available, 2);
        assert_eq!(r.end_time, Some(1_800_000_000));
        assert_eq!(reservation(&base.clone().interruptible(true).build()), None);
        let interruptible = base
            .reservation_type(CapacityReservationType::Default)
            .interruptible(true)
            .build();
        let r = reservation(&interruptible).expect("an interruptible ODCR");
        assert!(r.interruptible);
        assert_eq!(r.market(), ReservationMarket::Interruptible);
    }
}
