//! The claim cache over the in-memory store: one list while nobody else writes, this
//! process's writes kept, every other writer seen at the next list.

use nodewright_engine::ports::ClaimStore;
use std::sync::Arc;

use nodewright_core::catalog::CapacityType;
use nodewright_core::nodeclaim::ClaimSpec;
use nodewright_core::nodeclaim::{ClaimState, NodeClaim};
use nodewright_engine::ClaimCache;
use nodewright_sim::fakes::{ManualClock, MemoryStore, StoreOp};

fn claim(name: &str) -> NodeClaim {
    NodeClaim::launching(
        ClaimSpec {
            name: name.into(),
            node_pool: "default".into(),
            node_class: "default".into(),
            instance_type_options: vec!["m5.large".into()],
            zones: vec!["us-east-1a".into()],
            capacity_types: vec![CapacityType::OnDemand],
            pods: vec![],
            labels: Default::default(),
        },
        100,
    )
}

struct Setup {
    table: Arc<MemoryStore>,
    clock: Arc<ManualClock>,
    cache: ClaimCache,
}

fn setup() -> Setup {
    let table = Arc::new(MemoryStore::new());
    let clock = Arc::new(ManualClock::new(1_000));
    let cache = ClaimCache::new(table.clone(), clock.clone());
    Setup {
        table,
        clock,
        cache,
    }
}

impl Setup {
    fn lists(&self) -> usize {
        self.table
            .call_counts()
            .get(&StoreOp::ListClaims)
            .copied()
            .unwrap_or(0)
    }
    async fn names(&self) -> Vec<String> {
        let claims = self.cache.list_claims().await.unwrap();
        claims.into_iter().map(|c| c.name).collect()
    }
}

#[tokio::test]
async fn claims_nobody_changed_are_listed_once_and_then_answered_from_memory() {
    let s = setup();
    s.table.create_claim(&claim("a")).await.unwrap();
    assert_eq!(s.names().await, ["a"]);
    assert_eq!(s.names().await, ["a"]);
    assert_eq!(s.names().await, ["a"]);
    assert_eq!(s.lists(), 1);
}

#[tokio::test]
async fn this_process_writes_are_kept_without_listing_again() {
    let s = setup();
    s.table.create_claim(&claim("a")).await.unwrap();
    s.names().await;
    s.cache.create_claim(&claim("b")).await.unwrap();
    let a = s.table.get_claim("a").await.unwrap().unwrap();
    let launched = a.transition(ClaimState::Launched, 110, |_| {}).unwrap();
    s.cache
        .update_claim(&launched, ClaimState::Launching, a.version)
        .await
        .unwrap();
    let claims = s.cache.list_claims().await.unwrap();
    assert_eq!(
        claims
            .iter()
            .map(|c| (c.name.as_str(), c.state))
            .collect::<Vec<_>>(),
        [("a", ClaimState::Launched), ("b", ClaimState::Launching)]
    );
    assert_eq!(s.lists(), 1);
}

#[tokio::test]
async fn a_claim_another_function_wrote_is_seen_at_the_next_list() {
    let s = setup();
    s.table.create_claim(&claim("a")).await.unwrap();
    s.names().await;
    // Another function writes straight to the table: the generation moves.
    s.table.create_claim(&claim("z")).await.unwrap();
    assert_eq!(s.names().await, ["a", "z"]);
    assert_eq!(s.lists(), 2);
}

#[tokio::test]
async fn another_writer_between_two_of_ours_is_not_missed() {
    let s = setup();
    s.names().await;
    s.cache.create_claim(&claim("a")).await.unwrap();
    s.table.create_claim(&claim("other")).await.unwrap();
    s.cache.create_claim(&claim("b")).await.unwrap();
    assert_eq!(s.names().await, ["a", "b", "other"]);
}

#[tokio::test]
async fn a_write_that_loses_drops_the_cache() {
    let s = setup();
    s.table.create_claim(&claim("a")).await.unwrap();
    s.names().await;
    let stale = claim("a");
    let launched = stale.transition(ClaimState::Launched, 110, |_| {}).unwrap();
    // Someone moved the claim on first: our conditional write loses.
    s.table
        .update_claim(&launched, ClaimState::Launching, stale.version)
        .await
        .unwrap();
    let lost = s
        .cache
        .update_claim(&launched, ClaimState::Launching, stale.version)
        .await;
    assert!(lost.is_err());
    s.names().await;
    assert_eq!(s.lists(), 2, "the claims are read again after a lost write");
}

#[tokio::test]
async fn claims_older_than_the_max_age_are_read_again() {
    let s = setup();
    s.names().await;
    s.clock.advance(ClaimCache::DEFAULT_MAX_AGE);
    s.names().await;
    assert_eq!(s.lists(), 2);
}

#[tokio::test]
async fn a_poll_asks_the_cached_claims_in_place_and_sees_another_writers_claim() {
    let s = setup();
    s.table.create_claim(&claim("a")).await.unwrap();
    let named = |name: &'static str| move |c: &NodeClaim| c.name == name;
    assert!(s.cache.any_claim(&named("a")).await.unwrap());
    assert!(!s.cache.any_claim(&named("z")).await.unwrap());
    assert_eq!(s.lists(), 1, "the second poll is answered from memory");
    s.table.create_claim(&claim("z")).await.unwrap();
    assert!(s.cache.any_claim(&named("z")).await.unwrap());
    assert_eq!(s.lists(), 2);
    assert_eq!(s.names().await, ["a", "z"], "the poll's read is the list's");
    assert_eq!(s.lists(), 2);
}
