//! nodewright-sim: the simulator — nodewright's real jobs against a world that behaves
//! like an EKS cluster over virtual time. The jobs are the ones the Lambdas run
//! (`nodewright-engine`), called the way the Lambdas call them; only the world is
//! simulated. Nothing here ships in the Lambda binaries: the CLI, the benchmarks and
//! the tests depend on this crate.
//!
//! - [`fakes`]: the engine's ports in memory (FakeCloud, FakeCluster, MemoryStore,
//!   ManualClock), faithful enough that the world is built on them.
//! - [`SimClock`]: virtual time on tokio's paused clock. Every job sleeps through it,
//!   so with a runtime started paused the whole system runs in time order and in
//!   milliseconds: tokio advances to the next timer whenever every task waits.
//! - [`world`]: [`World`], the fakes plus what happens between port calls — instances
//!   pending then running, kubelets registering and turning Ready, a kube-scheduler
//!   ([`binder`]), workload controllers ([`workload`]: Deployments over time,
//!   DaemonSets), EC2 taking instances at their deadline, stops, and an observer of
//!   waits, budgets, launches, drains and cost.
//! - [`eks`]: what EKS and EC2 do outside Kubernetes (kubelets joining and booting,
//!   EC2 taking instances back, the cloud controller manager), as steps returning
//!   writes: the world applies them in memory, the functions' end-to-end tests to a
//!   real control plane.
//! - [`cloud`]: EC2's instance states over time on top of `FakeCloud`.
//! - [`eventbridge`]: the events EC2 and AWS Health send, as real EventBridge JSON.
//! - [`queue`]: the SQS queue (at-least-once, visibility timeout, dead letters) and
//!   the interruption function reading it as the Lambda does.
//! - [`scenario`]: a [`Scenario`]: NodePools, workloads, disturbances at times.
//! - [`run`]: a scenario run to the end with the provisioner on its schedule, the
//!   disruption function on its own and the interruption function on its queue.
//! - [`report`]: what a run leaves, the [`Report`]: timeline, summary, samples,
//!   end-state checks.
//! - [`rng`]: the seeded generator behind every random choice.

pub mod binder;
pub mod cloud;
pub mod eks;
pub mod eventbridge;
pub mod fakes;
pub mod faults;
pub mod queue;
pub mod report;
pub mod rng;
pub mod run;
pub mod scenario;
pub mod workload;
pub mod world;

use std::time::Duration;

use async_trait::async_trait;

use nodewright_engine::ports::Clock;

pub use binder::{Binder, fits};
pub use report::{DrainRecord, Marker, NodeRecord, Report, Sample, Summary, TimelineRow};
pub use scenario::{Disturbance, RunningNode, Scenario, ScheduledDisturbance, Target};
pub use workload::Deployment;
pub use world::{BudgetViolation, PodWait, World, WorldConfig};

/// Virtual time: Unix seconds `base` plus the time elapsed on tokio's clock since the
/// world was made. Sleeping is tokio's sleep: real time in a normal runtime, virtual
/// and instant in one started paused.
#[derive(Debug)]
pub struct SimClock {
    base: i64,
    start: tokio::time::Instant,
}

impl SimClock {
    pub fn new(base_unix_seconds: i64) -> Self {
        SimClock {
            base: base_unix_seconds,
            start: tokio::time::Instant::now(),
        }
    }

    /// Milliseconds since the Unix epoch.
    pub fn now_millis(&self) -> i64 {
        self.base * 1000 + i64::try_from(self.start.elapsed().as_millis()).unwrap_or(i64::MAX)
    }
}

#[async_trait]
impl Clock for SimClock {
    fn now(&self) -> i64 {
        self.now_millis().div_euclid(1000)
    }
    async fn sleep(&self, duration: Duration) {
        tokio::time::sleep(duration).await;
    }
}
