//! Capacity Blocks that are about to end: their nodes are taken away before EC2
//! reclaims the block, as Karpenter's capacity reservation expiration controller does.
//!
//! A Capacity Block counts as expiring from [`CAPACITY_BLOCK_EXPIRATION_SECS`] (40
//! minutes) before its end ([`Reservation::expiring`]): the gather leaves it out of
//! planning (nothing new launches into it) and lists it in
//! `Gathered::expiring_reservations`; on every provisioner poll each live claim whose
//! node carries its id (`karpenter.k8s.aws/capacity-reservation-id`) becomes
//! `Disrupting(CapacityReservationExpiring)`, drained at once with a deadline of the
//! block's end less [`RECLAIM_LEAD_SECS`] (EC2 starts terminating a block's instances
//! 30 minutes before its end), and its pods are planned elsewhere.

use tracing::info;

use nodewright_core::catalog::{CAPACITY_BLOCK_EXPIRATION_SECS, Reservation};
use nodewright_core::nodeclaim::{ClaimState, DisruptionCause, NodeClaim};
use nodewright_core::well_known::LABEL_CAPACITY_RESERVATION_ID;

use crate::context::Ports;
use crate::error::{EngineError, Result};
use crate::ports::{Decision, ErrorKind};
use crate::terminate::{self, Disrupted};

/// How long before a Capacity Block's end EC2 starts terminating its instances: the
/// drain's deadline.
pub const RECLAIM_LEAD_SECS: i64 = 30 * 60;

/// Takes away every live claim in one of `expiring`; `claims` are updated in place and
/// each one disrupted is added to `disrupted`. A claim another writer changed first is
/// left to that writer.
pub async fn drain_expiring(
    ports: &Ports,
    expiring: &[Reservation],
    claims: &mut [NodeClaim],
    disrupted: &mut Vec<Disrupted>,
    now: i64,
) -> Result<Vec<String>> {
    let mut drained = Vec::new();
    if expiring.is_empty() {
        return Ok(drained);
    }
    for slot in claims.iter_mut() {
        if !slot.state.can_become(ClaimState::Disrupting) {
            continue;
        }
        let Some(r) = slot
            .labels
            .get(LABEL_CAPACITY_RESERVATION_ID)
            .and_then(|id| expiring.iter().find(|r| r.id == *id))
        else {
            continue;
        };
        let deadline = r.end_time.map(|end| (end - RECLAIM_LEAD_SECS).max(now));
        let next = match terminate::disrupt(
            ports,
            slot,
            DisruptionCause::CapacityReservationExpiring,
            deadline,
        )
        .await
        {
            Ok(next) => next,
            Err(EngineError::Store(e)) if e.kind == ErrorKind::Conflict => continue,
            Err(e) => return Err(e),
        };
        info!(claim = %slot.name, capacity_reservation = %r.id, end = ?r.end_time,
            "capacity block expiring; draining its node");
        ports
            .record_decision(Decision {
                at: now,
                job: "provision".into(),
                action: format!("drain {} before its capacity block ends", slot.name),
                reason: format!(
                    "capacity reservation {} ({}) ends at {} and is expiring (less than {} minutes left)",
                    r.id,
                    r.reservation_type,
                    r.end_time.unwrap_or_default(),
                    CAPACITY_BLOCK_EXPIRATION_SECS / 60
                ),
                price_per_hour: None,
            })
            .await;
        disrupted.push(Disrupted::new(
            slot,
            DisruptionCause::CapacityReservationExpiring,
        ));
        drained.push(slot.name.clone());
        *slot = next;
    }
    Ok(drained)
}
