//! EC2 as the simulated world has it: [`FakeCloud`] (CreateFleet picking the cheapest
//! offering with capacity, ClientToken idempotency, TerminateInstances) plus what
//! happens to an instance over time, which the fake does not model: it is `pending`
//! for a while after its launch before it is `running`, and it can be stopped by
//! someone else (`stopping`, then `stopped`). The jobs see these states through the
//! `Cloud` port (`owned_instances`), as they would see them from DescribeInstances.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use nodewright_core::api::model::{CapacityReservationSelectorTerm, Ec2NodeClass};
use nodewright_core::catalog::{Catalog, Reservation};
use nodewright_core::repair::ImpairedInstance;

use crate::fakes::{FakeCloud, FakeInstance};
use nodewright_engine::ports::{
    Clock, Cloud, CloudError, Instance, LaunchError, LaunchRequest, Launched, ResolvedNodeClass,
};

use super::SimClock;

pub struct Ec2 {
    fake: Arc<FakeCloud>,
    clock: Arc<SimClock>,
    running_after: Duration,
    /// States set by the world (stopping, stopped), overriding the timed ones until the
    /// instance is terminated.
    states: Mutex<HashMap<String, String>>,
}

impl Ec2 {
    pub fn new(fake: Arc<FakeCloud>, clock: Arc<SimClock>, running_after: Duration) -> Self {
        Ec2 {
            fake,
            clock,
            running_after,
            states: Mutex::new(HashMap::new()),
        }
    }

    fn states(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.states.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The instance's state now: `terminated` once the fake terminated it, else a state
    /// the world set, else `pending` until `running_after` has passed since its launch.
    pub fn state_of(&self, instance: &Instance) -> String {
        if instance.state == "terminated" {
            return instance.state.clone();
        }
        if let Some(s) = self.states().get(&instance.id) {
            return s.clone();
        }
        let age = self.clock.now() - instance.launch_time;
        if age < i64::try_from(self.running_after.as_secs()).unwrap_or(i64::MAX) {
            "pending".into()
        } else {
            "running".into()
        }
    }

    /// Sets an instance's state as EC2 would on its own (a stop by someone else).
    pub fn set_state(&self, id: &str, state: &str) {
        self.states().insert(id.to_string(), state.to_string());
    }

    /// The owner of the interruptible reservation instance `id` runs in takes its
    /// capacity back ([`FakeCloud::reclaim_from_reservation`]); the instance's zone.
    pub fn reclaim_from_reservation(&self, id: &str) -> Option<String> {
        self.fake.reclaim_from_reservation(id)
    }

    /// Instances not terminated, each with its state as of now (cheaper than
    /// [`Ec2::instances`]: no launch requests are copied).
    pub fn live_instances(&self) -> Vec<Instance> {
        let mut out = self.fake.running();
        for i in &mut out {
            i.state = self.state_of(i);
        }
        out
    }

    /// Every instance ever launched, each with its state as of now.
    pub fn instances(&self) -> Vec<FakeInstance> {
        self.fake
            .instances()
            .into_iter()
            .map(|mut fi| {
                fi.instance.state = self.state_of(&fi.instance);
                fi
            })
            .collect()
    }
}

#[async_trait]
impl Cloud for Ec2 {
    async fn catalog(&self) -> Result<Arc<Catalog>, CloudError> {
        self.fake.catalog().await
    }

    async fn spot_prices(&self) -> Result<BTreeMap<(String, String), f64>, CloudError> {
        self.fake.spot_prices().await
    }

    async fn resolve_node_class(
        &self,
        node_class: &Ec2NodeClass,
        kubernetes_version: &str,
    ) -> Result<ResolvedNodeClass, CloudError> {
        self.fake
            .resolve_node_class(node_class, kubernetes_version)
            .await
    }

    async fn capacity_reservations(
        &self,
        terms: &[CapacityReservationSelectorTerm],
    ) -> Result<Vec<Reservation>, CloudError> {
        self.fake.capacity_reservations(terms).await
    }

    async fn launch(&self, request: &LaunchRequest) -> Result<Launched, LaunchError> {
        self.fake.launch(request).await
    }

    async fn terminate(&self, instance_ids: &[String]) -> Result<(), CloudError> {
        self.fake.terminate(instance_ids).await
    }

    async fn reboot(&self, instance_id: &str) -> Result<(), CloudError> {
        self.fake.reboot(instance_id).await
    }

    async fn owned_instances(&self) -> Result<Vec<Instance>, CloudError> {
        let mut out = self.fake.owned_instances().await?;
        for i in &mut out {
            i.state = self.state_of(i);
        }
        Ok(out)
    }

    async fn cluster_instances_launched_by_karpenter(&self) -> Result<Vec<Instance>, CloudError> {
        let mut out = self.fake.cluster_instances_launched_by_karpenter().await?;
        for i in &mut out {
            i.state = self.state_of(i);
        }
        Ok(out)
    }

    async fn impaired_instances(&self) -> Result<Vec<ImpairedInstance>, CloudError> {
        self.fake.impaired_instances().await
    }

    async fn zonal_shifts(&self) -> Result<Vec<nodewright_engine::ports::ZonalShift>, CloudError> {
        self.fake.zonal_shifts().await
    }
}
