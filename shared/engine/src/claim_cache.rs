//! [`ClaimCache`]: the claims read once, then kept current by this process's own
//! writes, with a one-item check for other writers.
//!
//! Why: the provisioner polls every few seconds, and each poll (and each tick, and each
//! drain step) listed every claim with a strongly consistent Query — at 1,000 nodes
//! about 370 read units a poll, 4,000 a quiet minute, for a table nobody had changed.
//! The store keeps a claims *generation*, a counter every successful claim write bumps
//! ([`ClaimStore::claims_generation`]). A list reads that one item first: when it moved
//! exactly by this process's own writes since the claims were read, the cached claims
//! (with those writes applied) are the table's; any other move — another function
//! wrote, a bump was lost — reads the claims again. The claims are also read again
//! once they are older than [`ClaimCache::max_age`], so a writer that crashed between
//! its write and its bump is seen within that long (a new invocation's first list).
//!
//! Every transition is still a conditional write on the expected state and version: a
//! stale cache can make a write lose (`Conflict`, which drops the cache), never make a
//! wrong one succeed.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;

use nodewright_core::nodeclaim::{ClaimState, NodeClaim};

use crate::ports::{ClaimStore, Clock, StoreError};

/// The claims as last read, and how far the generation has moved since by this
/// process's own writes.
struct Cached {
    claims: BTreeMap<String, NodeClaim>,
    /// The generation read just before the claims were.
    generation: u64,
    /// Claim writes this process made since (each bumped the generation once).
    own_writes: u64,
    read_at: i64,
}

/// A [`ClaimStore`] whose `list_claims` is served from memory while the claims generation
/// says nobody else wrote; everything else goes to the store underneath.
pub struct ClaimCache {
    inner: Arc<dyn ClaimStore>,
    clock: Arc<dyn Clock>,
    max_age: Duration,
    cached: Mutex<Option<Cached>>,
}

impl ClaimCache {
    /// The claims are read afresh at least once a minute: about once per invocation
    /// of a function scheduled every minute.
    pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(60);

    pub fn new(inner: Arc<dyn ClaimStore>, clock: Arc<dyn Clock>) -> Self {
        ClaimCache {
            inner,
            clock,
            max_age: Self::DEFAULT_MAX_AGE,
            cached: Mutex::new(None),
        }
    }

    pub fn with_max_age(mut self, max_age: Duration) -> Self {
        self.max_age = max_age;
        self
    }

    pub fn max_age(&self) -> Duration {
        self.max_age
    }

    fn cached(&self) -> MutexGuard<'_, Option<Cached>> {
        self.cached.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A claim write of this process succeeded: the cache holds it, and expects the
    /// generation one further.
    fn wrote(&self, claim: &NodeClaim) {
        if let Some(cached) = self.cached().as_mut() {
            cached.claims.insert(claim.name.clone(), claim.clone());
            cached.own_writes += 1;
        }
    }

    fn forget(&self) {
        *self.cached() = None;
    }

    /// `read` over the cached claims, if they are still the table's at `generation`.
    fn current<R>(
        &self,
        generation: u64,
        read: impl FnOnce(&BTreeMap<String, NodeClaim>) -> R,
    ) -> Option<R> {
        let max_age = i64::try_from(self.max_age.as_secs()).unwrap_or(i64::MAX);
        let now = self.clock.now();
        let cached = self.cached();
        let cached = cached.as_ref()?;
        let fresh = now - cached.read_at < max_age
            && cached.generation.checked_add(cached.own_writes) == Some(generation);
        fresh.then(|| read(&cached.claims))
    }

    /// Reads the claims from the store and caches them as of `generation`.
    async fn read_through(&self, generation: u64) -> Result<Vec<NodeClaim>, StoreError> {
        let read_at = self.clock.now();
        let claims = self.inner.list_claims().await?;
        *self.cached() = Some(Cached {
            claims: claims.iter().map(|c| (c.name.clone(), c.clone())).collect(),
            generation,
            own_writes: 0,
            read_at,
        });
        Ok(claims)
    }
}

#[async_trait]
impl ClaimStore for ClaimCache {
    async fn create_claim(&self, claim: &NodeClaim) -> Result<(), StoreError> {
        match self.inner.create_claim(claim).await {
            Ok(()) => {
                self.wrote(claim);
                Ok(())
            }
            Err(e) => {
                self.forget();
                Err(e)
            }
        }
    }

    async fn update_claim(
        &self,
        claim: &NodeClaim,
        expected_state: ClaimState,
        expected_version: u64,
    ) -> Result<(), StoreError> {
        match self
            .inner
            .update_claim(claim, expected_state, expected_version)
            .await
        {
            Ok(()) => {
                self.wrote(claim);
                Ok(())
            }
            Err(e) => {
                // Lost to another writer, or not known whether it was written: the
                // cache cannot say what the table holds.
                self.forget();
                Err(e)
            }
        }
    }

    async fn get_claim(&self, name: &str) -> Result<Option<NodeClaim>, StoreError> {
        self.inner.get_claim(name).await
    }

    async fn list_claims(&self) -> Result<Vec<NodeClaim>, StoreError> {
        // The generation is read before the claims: a write that lands between the two
        // moves it past what the cache records, and the next list reads again.
        let Some(generation) = self.inner.claims_generation().await? else {
            return self.inner.list_claims().await;
        };
        match self.current(generation, |claims| claims.values().cloned().collect()) {
            Some(claims) => Ok(claims),
            None => self.read_through(generation).await,
        }
    }

    async fn any_claim(
        &self,
        wanted: &(dyn for<'c> Fn(&'c NodeClaim) -> bool + Send + Sync),
    ) -> Result<bool, StoreError> {
        // As `list_claims`, but asked of the cached claims in place: a poll every few
        // seconds copied every claim (at 1,000 nodes a sixth of a quiet minute's CPU).
        let Some(generation) = self.inner.claims_generation().await? else {
            return Ok(self.inner.list_claims().await?.iter().any(wanted));
        };
        match self.current(generation, |claims| claims.values().any(wanted)) {
            Some(found) => Ok(found),
            None => Ok(self.read_through(generation).await?.iter().any(wanted)),
        }
    }

    async fn claims_generation(&self) -> Result<Option<u64>, StoreError> {
        self.inner.claims_generation().await
    }

    async fn claim_by_instance(&self, instance_id: &str) -> Result<Option<NodeClaim>, StoreError> {
        self.inner.claim_by_instance(instance_id).await
    }
}
