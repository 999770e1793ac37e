//! ManualClock: virtual time for the engine's tests.

use super::*;

/// Virtual time: `sleep` advances it instantly, so backoff and TTL tests take no time.
#[derive(Debug)]
pub struct ManualClock {
    /// Milliseconds since the Unix epoch.
    millis: AtomicU64,
}

impl ManualClock {
    /// A clock reading `unix_seconds`.
    pub fn new(unix_seconds: i64) -> Self {
        Self {
            millis: AtomicU64::new(u64::try_from(unix_seconds).unwrap_or(0) * 1000),
        }
    }
    pub fn advance(&self, d: Duration) {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        self.millis.fetch_add(ms, Ordering::SeqCst);
    }
    /// Milliseconds since the epoch (finer than `Clock::now`).
    pub fn now_millis(&self) -> u64 {
        self.millis.load(Ordering::SeqCst)
    }
}

impl Default for ManualClock {
    /// 2025-01-01T00:00:00Z.
    fn default() -> Self {
        Self::new(1_735_689_600)
    }
}

#[async_trait]
impl Clock for ManualClock {
    fn now(&self) -> i64 {
        i64::try_from(self.now_millis() / 1000).unwrap_or(i64::MAX)
    }
    async fn sleep(&self, duration: Duration) {
        self.advance(duration);
        tokio::task::yield_now().await;
    }
}
