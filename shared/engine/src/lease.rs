//! A job's lease, kept short and renewed while the job works.
//!
//! A lease is what keeps two invocations from planning (and launching) at once. Its
//! TTL is short (15 s by default) so that a holder that dies — killed, timed out, its
//! sandbox frozen — frees it within seconds, not after the rest of a minute; a holder
//! that lives renews it at every checkpoint of its work ([`LeaseKeeper::keep`]) once a
//! third of the TTL has passed, so a long tick never loses it by merely being long.
//! No background task renews it: the virtual clock of the tests and the simulator
//! must only move when the job itself waits.

use std::sync::Mutex;
use std::time::Duration;

use tracing::{info, warn};

use crate::context::Ports;
use crate::error::{EngineError, Result};
use crate::ports::Lease;

/// The lease of one job, held.
pub struct LeaseKeeper {
    ttl: Duration,
    state: Mutex<(Lease, i64)>,
}

/// What an attempt to take a lease found.
pub enum Acquired {
    Held(LeaseKeeper),
    /// Someone else holds it (`holder`, until `expires_at`), when the store could say.
    Busy {
        holder: Option<String>,
        expires_at: Option<i64>,
    },
}

fn secs(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}

impl LeaseKeeper {
    /// Takes `name` for `holder` if it is free or expired.
    pub async fn acquire(
        ports: &Ports,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Acquired> {
        let now = ports.clock.now();
        match ports.leases.acquire_lease(name, holder, now, ttl).await? {
            Some(lease) => Ok(Acquired::Held(LeaseKeeper {
                ttl,
                state: Mutex::new((lease, now)),
            })),
            None => {
                let current = ports.leases.lease(name).await.ok().flatten();
                Ok(Acquired::Busy {
                    holder: current.as_ref().map(|l| l.holder.clone()),
                    expires_at: current.map(|l| l.expires_at),
                })
            }
        }
    }

    /// The lease as last written.
    pub fn lease(&self) -> Lease {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .clone()
    }

    /// A checkpoint: renews the lease once a third of its TTL has passed since the last
    /// write. `LeaseLost` when someone else took it (the job must stop acting).
    pub async fn keep(&self, ports: &Ports) -> Result<()> {
        let now = ports.clock.now();
        let (lease, renewed_at) = {
            let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
            (s.0.clone(), s.1)
        };
        if now - renewed_at < (secs(self.ttl) / 3).max(1) {
            return Ok(());
        }
        let renewed = ports
            .leases
            .renew_lease(&lease, now, self.ttl)
            .await
            .map_err(|source| EngineError::LeaseLost {
                name: lease.name.clone(),
                source,
            })?;
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = (renewed, now);
        Ok(())
    }

    /// Gives the lease back (best effort: it expires by itself within its TTL).
    pub async fn release(self, ports: &Ports) {
        let lease = self.lease();
        match ports.leases.release_lease(&lease).await {
            Ok(()) => info!(lease = %lease.name, "lease released"),
            Err(e) => {
                warn!(lease = %lease.name, error = %e, "could not release the lease; it expires on its own")
            }
        }
    }
}
