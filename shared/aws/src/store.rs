//! `DynamoStore`: the engine's [`Store`] over one DynamoDB table.
//!
//! Key design (see `infra/dynamodb-table.md`): one table, string keys `pk`/`sk`, a
//! sparse GSI `byInstance` on `instanceId`, TTL on `expiresAt`.
//!
//! | item        | pk                     | sk                      |
//! |-------------|------------------------|-------------------------|
//! | claim       | `CLAIMS`               | `CLAIM#<name>`          |
//! | generation  | `GENERATION`           | `CLAIMS`                |
//! | lease       | `LEASE#<name>`         | `LEASE`                 |
//! | ICE entry   | `ICE`                  | `ICE#<type>#<zone>#<ct>`|
//! | idempotency | `IDEMPOTENCY#<key>`    | `IDEMPOTENCY`           |
//! | decision    | `DECISION#<yyyy-mm-dd>`| `<unix ts, 12 digits>#<seq>` |
//!
//! Claims and ICE entries share one partition each so that listing them is a single
//! strongly consistent Query (a Scan would read every decision and idempotency key
//! too, and a GSI is only eventually consistent: a claim written a moment ago must
//! not be missing when the lifecycle garbage-collects instances without a claim).
//! The generation item counts successful claim writes (`ADD`, after each write): a
//! reader checks it with one small consistent read instead of listing every claim
//! (`nodewright_engine::ClaimCache`). It lives outside the `CLAIMS` partition, so a
//! claim listing never reads it.
//! Items are mapped with serde_dynamo; the claim itself is a nested map `claim`,
//! with `state` and `version` copied to the top level for the conditions.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use serde::{Deserialize, Serialize};
use serde_dynamo::aws_sdk_dynamodb_1::{from_item, to_item};

use nodewright_core::catalog::CapacityType;
use nodewright_core::nodeclaim::{ClaimState, NodeClaim};
use nodewright_engine::ports::{
    ClaimStore, Decision, DecisionLog, ErrorKind, IdempotencyKeys, Lease, LeaseStore, Offering,
    OfferingBackoff, StoreError,
};

use crate::config::AwsContext;
use crate::error::table_error;

/// The GSI over `instanceId` (claims only: the attribute is absent elsewhere).
pub const INSTANCE_INDEX: &str = "byInstance";
/// Terminal claims stay this long as tombstones, then DynamoDB's TTL removes them.
pub const CLAIM_TOMBSTONE_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
/// How long decisions are kept.
pub const DECISION_TTL: Duration = Duration::from_secs(14 * 24 * 3600);

const CLAIMS_PK: &str = "CLAIMS";
const GENERATION_PK: &str = "GENERATION";
const CLAIMS_GENERATION_SK: &str = "CLAIMS";
const ICE_PK: &str = "ICE";

type Item = HashMap<String, AttributeValue>;

pub struct DynamoStore {
    client: aws_sdk_dynamodb::Client,
    table: String,
    /// Named with the table when it does not exist.
    region: Option<String>,
    seq: AtomicU64,
    /// Distinguishes this process's decision sort keys from other Lambdas'.
    instance_nonce: u64,
    /// Query requests sent (each page counts): listing claims is the table's costly
    /// read, and tests and benchmarks check how often it happens.
    queries: AtomicU64,
}

impl DynamoStore {
    pub fn new(ctx: &AwsContext, table: impl Into<String>) -> Self {
        Self {
            client: ctx.dynamodb.clone(),
            table: table.into(),
            region: ctx.region(),
            seq: AtomicU64::new(0),
            instance_nonce: process_nonce(),
            queries: AtomicU64::new(0),
        }
    }

    /// Query requests this store has sent so far (each page counts).
    pub fn queries(&self) -> u64 {
        self.queries.load(Ordering::Relaxed)
    }

    pub fn table(&self) -> &str {
        &self.table
    }

    /// An SDK error of a call on this table, saying what was being done.
    fn error<E, R>(&self, what: impl AsRef<str>, err: SdkError<E, R>) -> StoreError
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
        R: std::fmt::Debug + Send + Sync + 'static,
    {
        table_error(&self.table, self.region.as_deref(), what, err)
    }

    fn key(pk: &str, sk: &str) -> Item {
        HashMap::from([
            ("pk".to_string(), AttributeValue::S(pk.to_string())),
            ("sk".to_string(), AttributeValue::S(sk.to_string())),
        ])
    }

    fn to_item<T: Serialize>(what: &str, value: &T) -> Result<Item, StoreError> {
        to_item(value)
            .map_err(|e| StoreError::with_source(ErrorKind::Invalid, format!("encoding {what}"), e))
    }

    fn from_item<'a, T: Deserialize<'a>>(what: &str, item: Item) -> Result<T, StoreError> {
        from_item(item)
            .map_err(|e| StoreError::with_source(ErrorKind::Other, format!("decoding {what}"), e))
    }

    /// All items of one partition, strongly consistent, every page.
    async fn query_partition(
        &self,
        pk: &str,
        sk_from: Option<&str>,
    ) -> Result<Vec<Item>, StoreError> {
        let mut items = Vec::new();
        let mut start: Option<Item> = None;
        loop {
            let mut q = self
                .client
                .query()
                .table_name(&self.table)
                .consistent_read(true)
                .expression_attribute_values(":pk", AttributeValue::S(pk.to_string()))
                .set_exclusive_start_key(start.take());
            q = match sk_from {
                Some(from) => q
                    .key_condition_expression("pk = :pk AND sk >= :from")
                    .expression_attribute_values(":from", AttributeValue::S(from.to_string())),
                None => q.key_condition_expression("pk = :pk"),
            };
            self.queries.fetch_add(1, Ordering::Relaxed);
            let out = q
                .send()
                .await
                .map_err(|e| self.error(format!("Query {pk}"), e))?;
            items.extend(out.items.unwrap_or_default());
            match out.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => return Ok(items),
            }
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ClaimItemOut<'a> {
    pk: &'a str,
    sk: String,
    state: &'static str,
    version: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    instance_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    expires_at: Option<i64>,
    claim: &'a NodeClaim,
}

#[derive(Deserialize)]
struct ClaimItemIn {
    claim: NodeClaim,
}

fn claim_sk(name: &str) -> String {
    format!("CLAIM#{name}")
}

fn claim_item(claim: &NodeClaim) -> Result<Item, StoreError> {
    let expires_at = claim
        .state
        .is_terminal()
        .then(|| claim.updated_at + CLAIM_TOMBSTONE_TTL.as_secs() as i64);
    DynamoStore::to_item(
        "claim",
        &ClaimItemOut {
            pk: CLAIMS_PK,
            sk: claim_sk(&claim.name),
            state: claim.state.as_str(),
            version: claim.version,
            instance_id: claim.instance_id.as_deref(),
            expires_at,
            claim,
        },
    )
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct LeaseItem {
    holder: String,
    token: u64,
    lease_until: i64,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct IceItem {
    pk: String,
    sk: String,
    instance_type: String,
    zone: String,
    capacity_type: CapacityType,
    expires_at: i64,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct IdempotencyItem<'a> {
    pk: String,
    sk: &'a str,
    expires_at: i64,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DecisionItem {
    pk: String,
    sk: String,
    at: i64,
    job: String,
    action: String,
    reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    price_per_hour: Option<f64>,
    expires_at: i64,
}

fn lease_from(name: &str, attrs: Option<Item>) -> Result<Lease, StoreError> {
    let attrs = attrs.ok_or_else(|| {
        StoreError::new(
            ErrorKind::Other,
            format!("lease {name}: no attributes returned"),
        )
    })?;
    let item: LeaseItem = DynamoStore::from_item("lease", attrs)?;
    Ok(Lease {
        name: name.to_string(),
        holder: item.holder,
        token: item.token,
        expires_at: item.lease_until,
    })
}

fn is_conflict(err: &StoreError) -> bool {
    err.kind == ErrorKind::Conflict
}

fn ttl_secs(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX / 2)
}

impl DynamoStore {
    /// Moves the claims generation on after a claim write that succeeded. A failure is
    /// logged and not returned: the write itself stands, and a reader whose count no
    /// longer matches the generation simply reads the claims again.
    async fn bump_claims_generation(&self, claim: &str) {
        let bumped = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(Self::key(GENERATION_PK, CLAIMS_GENERATION_SK)))
            .update_expression("ADD #g :one")
            .expression_attribute_names("#g", "generation")
            .expression_attribute_values(":one", AttributeValue::N("1".into()))
            .send()
            .await;
        if let Err(e) = bumped {
            let e = self.error("UpdateItem claims generation", e);
            tracing::warn!(claim, error = %e, kind = ?e.kind(), "could not move the claims generation on; readers will list the claims again");
        }
    }
}

#[async_trait]
impl ClaimStore for DynamoStore {
    async fn create_claim(&self, claim: &NodeClaim) -> Result<(), StoreError> {
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(claim_item(claim)?))
            .condition_expression("attribute_not_exists(pk)")
            .send()
            .await
            .map_err(|e| self.error(format!("PutItem claim {} (create)", claim.name), e))?;
        self.bump_claims_generation(&claim.name).await;
        Ok(())
    }

    async fn update_claim(
        &self,
        claim: &NodeClaim,
        expected_state: ClaimState,
        expected_version: u64,
    ) -> Result<(), StoreError> {
        if claim.version != expected_version + 1 {
            return Err(StoreError::new(
                ErrorKind::Invalid,
                format!(
                    "claim {}: version {} must be expected version {} + 1",
                    claim.name, claim.version, expected_version
                ),
            ));
        }
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(claim_item(claim)?))
            .condition_expression("#state = :state AND version = :version")
            .expression_attribute_names("#state", "state")
            .expression_attribute_values(
                ":state",
                AttributeValue::S(expected_state.as_str().to_string()),
            )
            .expression_attribute_values(
                ":version",
                AttributeValue::N(expected_version.to_string()),
            )
            .send()
            .await
            .map_err(|e| {
                self.error(
                    format!(
                        "PutItem claim {} (expecting {} v{})",
                        claim.name,
                        expected_state.as_str(),
                        expected_version
                    ),
                    e,
                )
            })?;
        self.bump_claims_generation(&claim.name).await;
        Ok(())
    }

    async fn get_claim(&self, name: &str) -> Result<Option<NodeClaim>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(Self::key(CLAIMS_PK, &claim_sk(name))))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| self.error(format!("GetItem claim {name}"), e))?;
        match out.item {
            Some(item) => Ok(Some(Self::from_item::<ClaimItemIn>("claim", item)?.claim)),
            None => Ok(None),
        }
    }

    async fn list_claims(&self) -> Result<Vec<NodeClaim>, StoreError> {
        self.query_partition(CLAIMS_PK, None)
            .await?
            .into_iter()
            .map(|item| Self::from_item::<ClaimItemIn>("claim", item).map(|c| c.claim))
            .collect()
    }

    async fn claims_generation(&self) -> Result<Option<u64>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(Self::key(GENERATION_PK, CLAIMS_GENERATION_SK)))
            .consistent_read(true)
            .projection_expression("#g")
            .expression_attribute_names("#g", "generation")
            .send()
            .await
            .map_err(|e| self.error("GetItem claims generation", e))?;
        let generation = match out.item.as_ref().and_then(|i| i.get("generation")) {
            None => 0,
            Some(AttributeValue::N(n)) => n.parse().map_err(|e| {
                StoreError::with_source(
                    ErrorKind::Other,
                    format!("decoding the claims generation {n:?}"),
                    e,
                )
            })?,
            Some(other) => {
                return Err(StoreError::new(
                    ErrorKind::Other,
                    format!("the claims generation is not a number: {other:?}"),
                ));
            }
        };
        Ok(Some(generation))
    }

    async fn claim_by_instance(&self, instance_id: &str) -> Result<Option<NodeClaim>, StoreError> {
        // GSIs are eventually consistent; callers treat "no claim" for a just-launched
        // instance with a grace period.
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(INSTANCE_INDEX)
            .key_condition_expression("instanceId = :id")
            .expression_attribute_values(":id", AttributeValue::S(instance_id.to_string()))
            .send()
            .await
            .map_err(|e| self.error(format!("Query {INSTANCE_INDEX} {instance_id}"), e))?;
        let mut claims = out
            .items
            .unwrap_or_default()
            .into_iter()
            .map(|item| Self::from_item::<ClaimItemIn>("claim", item).map(|c| c.claim))
            .collect::<Result<Vec<_>, _>>()?;
        claims.sort_by_key(|c| std::cmp::Reverse(c.updated_at));
        Ok(claims.into_iter().next())
    }
}

#[async_trait]
impl LeaseStore for DynamoStore {
    async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        now: i64,
        ttl: Duration,
    ) -> Result<Option<Lease>, StoreError> {
        // One UpdateItem: the token is an atomic counter kept in the lease item itself
        // (`ADD token 1`), so every acquisition gets a strictly larger token. The item
        // is never deleted (release only expires it, and `leaseUntil` is not the TTL
        // attribute), so the counter never restarts.
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(Self::key(&format!("LEASE#{name}"), "LEASE")))
            .update_expression("SET holder = :holder, leaseUntil = :until ADD #token :one")
            .expression_attribute_names("#token", "token")
            .condition_expression(
                // Free from the second it expires, as every store reads it.
                "attribute_not_exists(pk) OR leaseUntil <= :now OR holder = :holder",
            )
            .expression_attribute_values(":holder", AttributeValue::S(holder.to_string()))
            .expression_attribute_values(
                ":until",
                AttributeValue::N((now + ttl_secs(ttl)).to_string()),
            )
            .expression_attribute_values(":now", AttributeValue::N(now.to_string()))
            .expression_attribute_values(":one", AttributeValue::N("1".into()))
            .return_values(ReturnValue::AllNew)
            .send()
            .await
            .map_err(|e| self.error(format!("UpdateItem lease {name} (acquire by {holder})"), e));
        match result {
            Ok(out) => Ok(Some(lease_from(name, out.attributes)?)),
            Err(e) if is_conflict(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn renew_lease(
        &self,
        lease: &Lease,
        now: i64,
        ttl: Duration,
    ) -> Result<Lease, StoreError> {
        let out = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(Self::key(&format!("LEASE#{}", lease.name), "LEASE")))
            .update_expression("SET leaseUntil = :until")
            .condition_expression("holder = :holder AND #token = :token")
            .expression_attribute_names("#token", "token")
            .expression_attribute_values(":holder", AttributeValue::S(lease.holder.clone()))
            .expression_attribute_values(":token", AttributeValue::N(lease.token.to_string()))
            .expression_attribute_values(
                ":until",
                AttributeValue::N((now + ttl_secs(ttl)).to_string()),
            )
            .return_values(ReturnValue::AllNew)
            .send()
            .await
            .map_err(|e| {
                self.error(
                    format!(
                        "UpdateItem lease {} (renew token {})",
                        lease.name, lease.token
                    ),
                    e,
                )
            })?;
        lease_from(&lease.name, out.attributes)
    }

    async fn release_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(Self::key(&format!("LEASE#{}", lease.name), "LEASE")))
            .update_expression("SET leaseUntil = :zero")
            .condition_expression("holder = :holder AND #token = :token")
            .expression_attribute_names("#token", "token")
            .expression_attribute_values(":holder", AttributeValue::S(lease.holder.clone()))
            .expression_attribute_values(":token", AttributeValue::N(lease.token.to_string()))
            .expression_attribute_values(":zero", AttributeValue::N("0".into()))
            .send()
            .await
            .map_err(|e| self.error(format!("UpdateItem lease {} (release)", lease.name), e));
        match result {
            // Already lost: nothing left to release.
            Err(e) if is_conflict(&e) => Ok(()),
            other => other.map(|_| ()),
        }
    }

    async fn lease(&self, name: &str) -> Result<Option<Lease>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(Self::key(&format!("LEASE#{name}"), "LEASE")))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| self.error(format!("GetItem lease {name}"), e))?;
        out.item
            .map(|item| lease_from(name, Some(item)))
            .transpose()
    }
}

#[async_trait]
impl OfferingBackoff for DynamoStore {
    async fn mark_unavailable(&self, offering: &Offering, until: i64) -> Result<(), StoreError> {
        let item = IceItem {
            pk: ICE_PK.to_string(),
            sk: format!(
                "ICE#{}#{}#{}",
                offering.instance_type,
                offering.zone,
                offering.capacity_type.as_str()
            ),
            instance_type: offering.instance_type.clone(),
            zone: offering.zone.clone(),
            capacity_type: offering.capacity_type,
            expires_at: until,
        };
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(Self::to_item("ICE entry", &item)?))
            .send()
            .await
            .map_err(|e| self.error(format!("PutItem {}", item.sk), e))?;
        Ok(())
    }

    async fn unavailable_offerings(
        &self,
        now: i64,
    ) -> Result<Vec<(String, String, CapacityType)>, StoreError> {
        // DynamoDB's TTL deletes expired items up to 48 hours late: filter here.
        let mut out = Vec::new();
        for item in self.query_partition(ICE_PK, None).await? {
            let ice: IceItem = Self::from_item("ICE entry", item)?;
            if ice.expires_at > now {
                out.push((ice.instance_type, ice.zone, ice.capacity_type));
            }
        }
        Ok(out)
    }
}

#[async_trait]
impl IdempotencyKeys for DynamoStore {
    async fn claim_idempotency_key(
        &self,
        key: &str,
        now: i64,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let item = IdempotencyItem {
            pk: format!("IDEMPOTENCY#{key}"),
            sk: "IDEMPOTENCY",
            expires_at: now + ttl_secs(ttl),
        };
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(Self::to_item("idempotency key", &item)?))
            .condition_expression("attribute_not_exists(pk) OR expiresAt < :now")
            .expression_attribute_values(":now", AttributeValue::N(now.to_string()))
            .send()
            .await
            .map_err(|e| self.error(format!("PutItem idempotency key {key}"), e));
        match result {
            Ok(_) => Ok(true),
            Err(e) if is_conflict(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn idempotency_key_exists(&self, key: &str, now: i64) -> Result<bool, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(Self::key(
                &format!("IDEMPOTENCY#{key}"),
                "IDEMPOTENCY",
            )))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| self.error(format!("GetItem idempotency key {key}"), e))?;
        // TTL deletion lags (up to days; never in emulators): an expired key is absent.
        Ok(out
            .item
            .and_then(|item| {
                item.get("expiresAt")
                    .and_then(|v| v.as_n().ok())
                    .and_then(|n| n.parse::<i64>().ok())
            })
            .is_some_and(|expires_at| expires_at >= now))
    }
}

#[async_trait]
impl DecisionLog for DynamoStore {
    async fn record_decision(&self, decision: &Decision) -> Result<(), StoreError> {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let item = DecisionItem {
            pk: format!("DECISION#{}", utc_date(decision.at)),
            sk: format!(
                "{}#{:016x}{:08x}",
                decision_sk_prefix(decision.at),
                self.instance_nonce,
                seq
            ),
            at: decision.at,
            job: decision.job.clone(),
            action: decision.action.clone(),
            reason: decision.reason.clone(),
            price_per_hour: decision.price_per_hour,
            expires_at: decision.at + ttl_secs(DECISION_TTL),
        };
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(Self::to_item("decision", &item)?))
            .send()
            .await
            .map_err(|e| self.error(format!("PutItem decision {} {}", item.pk, item.sk), e))?;
        Ok(())
    }

    async fn decisions(&self, since: i64) -> Result<Vec<Decision>, StoreError> {
        // One partition per UTC day, from `since`'s day through today (tomorrow too,
        // for clock skew), at most the retention period.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(since);
        let first_day = since.max(now - ttl_secs(DECISION_TTL)).div_euclid(86_400);
        let last_day = now.max(since).div_euclid(86_400) + 1;
        let from = decision_sk_prefix(since);
        let mut decisions = Vec::new();
        for day in first_day..=last_day {
            let pk = format!("DECISION#{}", utc_date(day * 86_400));
            for item in self.query_partition(&pk, Some(&from)).await? {
                let d: DecisionItem = Self::from_item("decision", item)?;
                decisions.push(Decision {
                    at: d.at,
                    job: d.job,
                    action: d.action,
                    reason: d.reason,
                    price_per_hour: d.price_per_hour,
                });
            }
        }
        decisions.sort_by_key(|d| d.at);
        Ok(decisions)
    }
}

fn decision_sk_prefix(at: i64) -> String {
    format!("{:012}", at.max(0))
}

/// A number unlikely to repeat across processes (std's per-process random hash keys
/// mixed with the time and the process id), so two Lambdas writing a decision in
/// the same second never collide on the sort key.
fn process_nonce() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

/// `yyyy-mm-dd` (UTC) of a Unix time (Howard Hinnant's civil-from-days).
pub(crate) fn utc_date(unix: i64) -> String {
    let z = unix.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!("{y:04}-{m:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates_match_the_calendar() {
        assert_eq!(utc_date(0), "1970-01-01");
        assert_eq!(utc_date(951_782_400), "2000-02-29");
        assert_eq!(utc_date(1_767_225_599), "2025-12-31");
        assert_eq!(utc_date(1_767_225_600), "2026-01-01");
    }
}
