//! The provisioner on its schedule: invoked back to back in the background, with what
//! each invocation returned and left behind. The invocation itself is the test's (the
//! real handler lives in a function crate, which this crate does not depend on).

use std::future::Future;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::task::JoinHandle;

use crate::emulated::EmulatedCluster;

/// What one scheduled provisioner invocation returned and left behind.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// The handler's summary, or its error.
    pub summary: Result<Value, String>,
    /// Live instances right after it ([`EmulatedCluster::live_instances`]).
    pub instances: Vec<String>,
    /// Live claims right after it ([`EmulatedCluster::live_claims`]).
    pub claims: Vec<(String, Option<String>)>,
}

impl Invocation {
    /// Instances no live claim records: leaked or launched behind the store's back.
    pub fn unclaimed(&self) -> Vec<String> {
        self.instances
            .iter()
            .filter(|i| !self.claims.iter().any(|(_, c)| c.as_ref() == Some(*i)))
            .cloned()
            .collect()
    }

    /// How many instances the invocation says it launched.
    pub fn launched(&self) -> usize {
        self.summary
            .as_ref()
            .ok()
            .and_then(|s| s["launched"].as_array())
            .map_or(0, Vec::len)
    }
}

/// The provisioner invoked back to back in the background (as the one-minute schedule
/// does, each invocation with its budget), until dropped.
pub struct ProvisionerSchedule {
    log: Arc<Mutex<Vec<Invocation>>>,
    task: JoinHandle<()>,
}

impl Drop for ProvisionerSchedule {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ProvisionerSchedule {
    /// Starts invoking over `world`: `invoke` is one scheduled invocation of the
    /// provisioner's handler (its event carrying the invocation's deadline), returning
    /// its summary or its error.
    pub fn start<F, Fut>(world: &EmulatedCluster, mut invoke: F) -> Self
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = Result<Value, String>> + Send + 'static,
    {
        let probe = world.aws();
        let log: Arc<Mutex<Vec<Invocation>>> = Arc::default();
        let writer = log.clone();
        let task = tokio::spawn(async move {
            loop {
                let summary = invoke().await;
                let invocation = Invocation {
                    summary,
                    instances: probe.live_instances().await,
                    claims: probe.live_claims().await,
                };
                writer
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(invocation);
            }
        });
        ProvisionerSchedule { log, task }
    }

    /// The invocations finished so far.
    pub fn invocations(&self) -> Vec<Invocation> {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Stops invoking (an invocation under way is abandoned, as a Lambda timeout would).
    pub fn stop(&self) {
        self.task.abort();
    }
}
