//! What every job runs over: the ports, shared (the store by concern).
//!
//! Jobs hold `Arc<dyn Port>` rather than being generic over four type parameters:
//! the ports are already dynamically dispatched (`async_trait` boxes every future), so
//! generics would buy no inlining, while `dyn` keeps one concrete `Provisioner` type
//! that the Lambda builds once per cold start, the CLI and simulator build over fakes,
//! and the disruption and interruption jobs share without repeating
//! `<C: Cloud, K: Cluster, S: Store, T: Clock>` on every function. Tests keep their own
//! `Arc<FakeCloud>` clone to inspect the fake after the tick.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tracing::warn;

use nodewright_core::nodeclaim::NodeClaim;

use crate::error::Result;
use crate::ports::{
    ClaimStore, Clock, Cloud, Cluster, ClusterEvent, Decision, DecisionLog, IdempotencyKeys,
    LeaseStore, OfferingBackoff, Store,
};

#[derive(Clone)]
pub struct Ports {
    pub cloud: Arc<dyn Cloud>,
    pub cluster: Arc<dyn Cluster>,
    /// The NodeClaims (in the Lambdas, through the claim cache).
    pub claims: Arc<dyn ClaimStore>,
    pub leases: Arc<dyn LeaseStore>,
    /// The ICE cache.
    pub backoff: Arc<dyn OfferingBackoff>,
    pub keys: Arc<dyn IdempotencyKeys>,
    pub decisions: Arc<dyn DecisionLog>,
    pub clock: Arc<dyn Clock>,
}

impl Ports {
    /// The ports over one store that holds every concern (the table, or a fake).
    pub fn new(
        cloud: Arc<dyn Cloud>,
        cluster: Arc<dyn Cluster>,
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
    ) -> Ports {
        Ports {
            cloud,
            cluster,
            claims: store.clone(),
            leases: store.clone(),
            backoff: store.clone(),
            keys: store.clone(),
            decisions: store,
            clock,
        }
    }

    /// The same ports with the claims read and written through `claims` (the claim
    /// cache in front of the table).
    pub fn with_claims(mut self, claims: Arc<dyn ClaimStore>) -> Ports {
        self.claims = claims;
        self
    }
    /// Kubernetes Events are best effort: a failure is logged, never fails the tick.
    pub(crate) async fn emit(&self, event: ClusterEvent) {
        if let Err(e) = self.cluster.record_event(&event).await {
            warn!(reason = %event.reason, object = %event.name, error = %e, "could not record event");
        }
    }

    /// Decisions are an audit log: a failed write is logged, never undoes the action.
    pub(crate) async fn record_decision(&self, decision: Decision) {
        if let Err(e) = self.decisions.record_decision(&decision).await {
            warn!(job = %decision.job, action = %decision.action, error = %e, "could not record decision");
        }
    }
}

impl Ports {
    /// Writes `next` over `prev` conditionally on `prev`'s state and version: every
    /// step of every claim machine is one such write, so two drivers of one claim
    /// never both win (the loser gets `Conflict`).
    pub(crate) async fn save_claim(&self, prev: &NodeClaim, next: NodeClaim) -> Result<NodeClaim> {
        self.claims
            .update_claim(&next, prev.state, prev.version)
            .await?;
        Ok(next)
    }
}

/// The wall clock, for the Lambda functions.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

#[async_trait]
impl Clock for SystemClock {
    fn now(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
            .unwrap_or(0)
    }
    async fn sleep(&self, duration: Duration) {
        tokio::time::sleep(duration).await;
    }
}
