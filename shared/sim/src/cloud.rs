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
        Self::state_in(
            instance,
            &self.states(),
            self.clock.now(),
            self.running_after,
        )
        .into()
    }

    /// [`Ec2::state_of`], given the world's states and the time.
    fn state_in<'a>(
        instance: &'a Instance,
        states: &'a HashMap<String, String>,
        now: i64,
        running_after: Duration,
    ) -> &'a str {
        if instance.state == "terminated" {
            return &instance.state;
        }
        if let Some(s) = states.get(&instance.id) {
            return s;
        }
        let age = now - instance.launch_time;
        if age < i64::try_from(running_after.as_secs()).unwrap_or(i64::MAX) {
            "pending"
        } else {
            "running"
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

    /// Whether [`Ec2::live_instances`] would return `last` again, found without copying
    /// an instance: the world asks every virtual second, and most seconds nothing
    /// launched, ended or changed state.
    pub fn live_instances_are(&self, last: &[Instance]) -> bool {
        let states = self.states();
        let now = self.clock.now();
        let mut last = last.iter();
        let same = self.fake.all_running(|i| {
            last.next().is_some_and(|l| {
                l.state == Self::state_in(i, &states, now, self.running_after)
                    && same_but_state(i, l)
            })
        });
        same && last.next().is_none()
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

/// Whether two instances agree on everything but their state (every field named, so a
/// new one is not forgotten here).
fn same_but_state(a: &Instance, b: &Instance) -> bool {
    let Instance {
        id,
        instance_type,
        zone,
        capacity_type,
        state: _,
        claim_name,
        launch_time,
        image_id,
        subnet_id,
        security_group_ids,
        capacity_reservation_id,
    } = a;
    *id == b.id
        && *instance_type == b.instance_type
        && *zone == b.zone
        && *capacity_type == b.capacity_type
        && *claim_name == b.claim_name
        && *launch_time == b.launch_time
        && *image_id == b.image_id
        && *subnet_id == b.subnet_id
        && *security_group_ids == b.security_group_ids
        && *capacity_reservation_id == b.capacity_reservation_id
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
