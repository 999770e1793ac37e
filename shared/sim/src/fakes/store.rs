//! MemoryStore: the store in memory, held to DynamoStore's contract (shared/aws/tests/moto.rs).

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StoreOp {
    CreateClaim,
    UpdateClaim,
    GetClaim,
    ListClaims,
    ClaimsGeneration,
    ClaimByInstance,
    AcquireLease,
    RenewLease,
    ReleaseLease,
    MarkUnavailable,
    UnavailableOfferings,
    ClaimIdempotencyKey,
    IdempotencyKeyExists,
    RecordDecision,
    Decisions,
}

#[derive(Default)]
struct StoreInner {
    claims: BTreeMap<String, NodeClaim>,
    /// Bumped by every successful claim write, as DynamoStore's generation item.
    claims_generation: u64,
    leases: HashMap<String, Lease>,
    /// Last fencing token handed out per lease name: survives release.
    tokens: HashMap<String, u64>,
    unavailable: HashMap<(String, String, CapacityType), i64>,
    keys: HashMap<String, i64>,
    /// Instance id → claim name (the GSI).
    by_instance: HashMap<String, String>,
    decisions: Vec<Decision>,
    faults: Faults<StoreOp, StoreError>,
    calls: Vec<Call<StoreOp>>,
}

/// DynamoDB's semantics in memory: conditional claim writes (state, version, and the
/// new version exactly one more), leases with a monotonic fencing token, expiring ICE
/// entries and idempotency keys.
#[derive(Default)]
pub struct MemoryStore {
    inner: Mutex<StoreInner>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    recording_api!(StoreOp, StoreError);

    /// The claims' generation (bumped by every claim write), without logging a call.
    pub fn generation(&self) -> u64 {
        lock(&self.inner).claims_generation
    }

    /// Every claim, without logging a call.
    pub fn claims(&self) -> Vec<NodeClaim> {
        lock(&self.inner).claims.values().cloned().collect()
    }

    pub fn all_decisions(&self) -> Vec<Decision> {
        lock(&self.inner).decisions.clone()
    }

    /// The lease record as stored (held or expired), without logging a call.
    pub fn lease(&self, name: &str) -> Option<Lease> {
        lock(&self.inner).leases.get(name).cloned()
    }

    fn record(
        &self,
        op: StoreOp,
        key: impl Into<String>,
    ) -> Result<MutexGuard<'_, StoreInner>, StoreError> {
        let key = key.into();
        let mut inner = lock(&self.inner);
        inner.calls.push(Call {
            op,
            key: key.clone(),
        });
        if let Some(e) = inner.faults.take(&op) {
            return Err(e);
        }
        match inner.faults.draw(injectable(op)) {
            None => Ok(inner),
            // Another writer wrote the claim first (the same content, one version on):
            // the caller's condition then fails as it would in DynamoDB.
            Some(ErrorKind::Conflict) => {
                match inner.claims.get(&key).cloned() {
                    Some(mut claim) => {
                        claim.version += 1;
                        inner.claims.insert(key, claim);
                        inner.claims_generation += 1;
                    }
                    None => inner.faults.undraw(ErrorKind::Conflict),
                }
                Ok(inner)
            }
            Some(kind) => Err(StoreError::new(kind, format!("{op:?}: injected {kind:?}"))),
        }
    }
}

/// The errors a DynamoDB call answers when it fails at random (`inject_faults`):
/// throttling (ProvisionedThroughputExceeded) and 500s; a claim update also loses its
/// condition to another writer. The decision log is read by the simulator's observer,
/// not by the jobs: left alone.
fn injectable(op: StoreOp) -> &'static [ErrorKind] {
    match op {
        StoreOp::UpdateClaim => &[
            ErrorKind::Throttled,
            ErrorKind::Unavailable,
            ErrorKind::Conflict,
        ],
        StoreOp::Decisions => &[],
        _ => &[ErrorKind::Throttled, ErrorKind::Unavailable],
    }
}

fn conflict(message: String) -> StoreError {
    StoreError::new(ErrorKind::Conflict, message)
}

fn ttl_secs(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX)
}

#[async_trait]
impl ClaimStore for MemoryStore {
    async fn create_claim(&self, claim: &NodeClaim) -> Result<(), StoreError> {
        tokio::task::yield_now().await;
        let mut inner = self.record(StoreOp::CreateClaim, claim.name.clone())?;
        if inner.claims.contains_key(&claim.name) {
            return Err(conflict(format!("claim {} already exists", claim.name)));
        }
        if let Some(id) = &claim.instance_id {
            inner.by_instance.insert(id.clone(), claim.name.clone());
        }
        inner.claims.insert(claim.name.clone(), claim.clone());
        inner.claims_generation += 1;
        Ok(())
    }

    async fn update_claim(
        &self,
        claim: &NodeClaim,
        expected_state: ClaimState,
        expected_version: u64,
    ) -> Result<(), StoreError> {
        tokio::task::yield_now().await;
        let mut inner = self.record(StoreOp::UpdateClaim, claim.name.clone())?;
        // As DynamoStore: a version that does not step by one is a caller's bug
        // (Invalid, checked before anything is read); a claim that is not there fails
        // the condition like any other mismatch (both found by the store contract tests).
        if claim.version != expected_version + 1 {
            return Err(StoreError::new(
                ErrorKind::Invalid,
                format!(
                    "claim {}: new version {} is not {} + 1",
                    claim.name, claim.version, expected_version
                ),
            ));
        }
        let Some(current) = inner.claims.get(&claim.name) else {
            return Err(conflict(format!("claim {} does not exist", claim.name)));
        };
        if current.state != expected_state || current.version != expected_version {
            return Err(conflict(format!(
                "claim {} is {:?} v{}, expected {:?} v{}",
                claim.name, current.state, current.version, expected_state, expected_version
            )));
        }
        if let Some(id) = &claim.instance_id {
            inner.by_instance.insert(id.clone(), claim.name.clone());
        }
        inner.claims.insert(claim.name.clone(), claim.clone());
        inner.claims_generation += 1;
        Ok(())
    }

    async fn get_claim(&self, name: &str) -> Result<Option<NodeClaim>, StoreError> {
        tokio::task::yield_now().await;
        let inner = self.record(StoreOp::GetClaim, name)?;
        Ok(inner.claims.get(name).cloned())
    }

    async fn list_claims(&self) -> Result<Vec<NodeClaim>, StoreError> {
        tokio::task::yield_now().await;
        let inner = self.record(StoreOp::ListClaims, "")?;
        Ok(inner.claims.values().cloned().collect())
    }

    /// As `list_claims` (the same call, for faults), answered in place.
    async fn any_claim(
        &self,
        wanted: &(dyn for<'c> Fn(&'c NodeClaim) -> bool + Send + Sync),
    ) -> Result<bool, StoreError> {
        tokio::task::yield_now().await;
        let inner = self.record(StoreOp::ListClaims, "")?;
        Ok(inner.claims.values().any(wanted))
    }

    async fn claims_generation(&self) -> Result<Option<u64>, StoreError> {
        tokio::task::yield_now().await;
        let inner = self.record(StoreOp::ClaimsGeneration, "")?;
        Ok(Some(inner.claims_generation))
    }

    async fn claim_by_instance(&self, instance_id: &str) -> Result<Option<NodeClaim>, StoreError> {
        tokio::task::yield_now().await;
        let inner = self.record(StoreOp::ClaimByInstance, instance_id)?;
        Ok(inner
            .by_instance
            .get(instance_id)
            .and_then(|name| inner.claims.get(name))
            .filter(|c| c.instance_id.as_deref() == Some(instance_id))
            .cloned())
    }
}

#[async_trait]
impl LeaseStore for MemoryStore {
    async fn lease(&self, name: &str) -> Result<Option<Lease>, StoreError> {
        tokio::task::yield_now().await;
        Ok(MemoryStore::lease(self, name))
    }

    async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        now: i64,
        ttl: Duration,
    ) -> Result<Option<Lease>, StoreError> {
        tokio::task::yield_now().await;
        let mut inner = self.record(StoreOp::AcquireLease, format!("{name}:{holder}"))?;
        if let Some(l) = inner.leases.get(name)
            && l.holder != holder
            && l.expires_at > now
        {
            return Ok(None);
        }
        let token = inner.tokens.get(name).copied().unwrap_or(0) + 1;
        inner.tokens.insert(name.to_string(), token);
        let lease = Lease {
            name: name.to_string(),
            holder: holder.to_string(),
            token,
            expires_at: now + ttl_secs(ttl),
        };
        inner.leases.insert(name.to_string(), lease.clone());
        Ok(Some(lease))
    }

    async fn renew_lease(
        &self,
        lease: &Lease,
        now: i64,
        ttl: Duration,
    ) -> Result<Lease, StoreError> {
        tokio::task::yield_now().await;
        let mut inner = self.record(
            StoreOp::RenewLease,
            format!("{}:{}", lease.name, lease.holder),
        )?;
        match inner.leases.get_mut(&lease.name) {
            Some(l) if l.holder == lease.holder && l.token == lease.token => {
                l.expires_at = now + ttl_secs(ttl);
                Ok(l.clone())
            }
            _ => Err(conflict(format!(
                "lease {} (token {}) is no longer held by {}",
                lease.name, lease.token, lease.holder
            ))),
        }
    }

    async fn release_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        tokio::task::yield_now().await;
        let mut inner = self.record(
            StoreOp::ReleaseLease,
            format!("{}:{}", lease.name, lease.holder),
        )?;
        if inner
            .leases
            .get(&lease.name)
            .is_some_and(|l| l.holder == lease.holder && l.token == lease.token)
        {
            inner.leases.remove(&lease.name);
        }
        Ok(())
    }
}

#[async_trait]
impl OfferingBackoff for MemoryStore {
    async fn mark_unavailable(&self, offering: &Offering, until: i64) -> Result<(), StoreError> {
        tokio::task::yield_now().await;
        let key = (
            offering.instance_type.clone(),
            offering.zone.clone(),
            offering.capacity_type,
        );
        let mut inner = self.record(
            StoreOp::MarkUnavailable,
            format!("{}/{}/{}", key.0, key.1, key.2),
        )?;
        let entry = inner.unavailable.entry(key).or_insert(until);
        *entry = (*entry).max(until);
        Ok(())
    }

    async fn unavailable_offerings(
        &self,
        now: i64,
    ) -> Result<Vec<(String, String, CapacityType)>, StoreError> {
        tokio::task::yield_now().await;
        let inner = self.record(StoreOp::UnavailableOfferings, "")?;
        let mut out: Vec<_> = inner
            .unavailable
            .iter()
            .filter(|(_, until)| **until > now)
            .map(|(k, _)| k.clone())
            .collect();
        out.sort();
        Ok(out)
    }
}

#[async_trait]
impl IdempotencyKeys for MemoryStore {
    async fn claim_idempotency_key(
        &self,
        key: &str,
        now: i64,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        tokio::task::yield_now().await;
        let mut inner = self.record(StoreOp::ClaimIdempotencyKey, key)?;
        if inner.keys.get(key).is_some_and(|expires| *expires > now) {
            return Ok(false);
        }
        inner.keys.insert(key.to_string(), now + ttl_secs(ttl));
        Ok(true)
    }

    async fn idempotency_key_exists(&self, key: &str, now: i64) -> Result<bool, StoreError> {
        tokio::task::yield_now().await;
        let inner = self.record(StoreOp::IdempotencyKeyExists, key)?;
        Ok(inner.keys.get(key).is_some_and(|expires| *expires > now))
    }
}

#[async_trait]
impl DecisionLog for MemoryStore {
    async fn record_decision(&self, decision: &Decision) -> Result<(), StoreError> {
        tokio::task::yield_now().await;
        let mut inner = self.record(StoreOp::RecordDecision, decision.job.clone())?;
        inner.decisions.push(decision.clone());
        Ok(())
    }

    async fn decisions(&self, since: i64) -> Result<Vec<Decision>, StoreError> {
        tokio::task::yield_now().await;
        let inner = self.record(StoreOp::Decisions, "")?;
        Ok(inner
            .decisions
            .iter()
            .filter(|d| d.at >= since)
            .cloned()
            .collect())
    }
}
