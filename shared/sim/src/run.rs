//! A [`Scenario`] run to its end: the world, the provisioner as its EventBridge
//! schedule and `template.yaml` run it, the interruption function as its SQS event
//! source runs it, and the scenario's disturbances at their times — then a [`Report`].
//!
//! - Provisioner: an invocation every minute (`ReservedConcurrentExecutions: 1`, so one
//!   at a time; a request waiting more than `MaximumEventAgeInSeconds` = 60 s is
//!   dropped), each keeping its invocation alive 55 s and polling every 5 s
//!   (`Provisioner::run_for`, the Lambda's call). The interruption function's "run
//!   now" (an asynchronous Invoke after pods were evicted) is one more request.
//! - Interruption function: the SQS event source polls about every second and hands
//!   batches of up to ten messages to concurrent invocations
//!   ([`super::queue::InterruptionFunction`], 60 s timeout); acknowledged messages are
//!   deleted, the others come back after the visibility timeout.
//! - Disruption function: an invocation every minute, half a minute after the
//!   provisioner's, that decides once and exits ([`nodewright_engine::Disrupter::tick`]); the
//!   commands it starts advance on the provisioner's polls. Off with
//!   [`Scenario::disruption`] = false.
//! - Disturbances: spot interruptions and rebalance recommendations (on spot
//!   instances), AWS Health scheduled changes, stops without notice, capacity shortages
//!   per offering for a while. A target ([`Target`]) is chosen when the disturbance
//!   happens, from the instances running then.
//!
//! At the scenario's end every invocation is frozen where it is (as if the account
//! were switched off); the report reads the world at that instant.
//!
//! The event loop, the three functions' schedules and the disturbances stay in this one
//! file: they share one run's state and one virtual clock, and read in the order time
//! runs. What goes in ([`super::scenario`]) and what comes out ([`super::report`]) are
//! their own files.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;

use nodewright_core::catalog::CapacityType;
use nodewright_core::nodeclaim::DisruptionCause;

use crate::fakes::FakeInstance;
use nodewright_engine::disrupt::{Disrupter, DisruptionConfig};
use nodewright_engine::interrupt::InterruptionConfig;
use nodewright_engine::provision::{Provisioner, ProvisionerConfig};

use super::faults::{Chaos, FaultCounts, Job};
use super::queue::{Disposition, InterruptionFunction, Message};
use super::report::{
    DrainRecord, Marker, Percentiles, Recorder, Report, Shortage, Summary, clock_time,
    drain_record, is_interruption, node_records, problems,
};
use super::rng::Rng;
use super::scenario::{Disturbance, Scenario, Target};
use super::world::{Lifetime, PodWait, World, WorldConfig};

/// The provisioner's schedule and its invocation's budget (template.yaml, provisioner lib).
pub const SCHEDULE: Duration = Duration::from_secs(60);
pub const PROVISIONER_BUDGET: Duration = Duration::from_secs(55);
/// `NODEWRIGHT_POLL_INTERVAL`.
pub const POLL_INTERVAL: Duration = Duration::from_secs(5);
/// `MaximumEventAgeInSeconds` of the provisioner's asynchronous invocations.
pub const MAX_EVENT_AGE_SECS: i64 = 60;
/// The interruption function's timeout (template.yaml).
pub const INTERRUPTION_TIMEOUT: Duration = Duration::from_secs(60);

struct Run<'a> {
    scenario: &'a Scenario,
    world: std::sync::Arc<World>,
    until: i64,
    /// Provisioner invocation requests (when each was made).
    requests: Mutex<VecDeque<i64>>,
    shortages: Mutex<Vec<Shortage>>,
    invocations: Mutex<(usize, usize)>,
    first_planning: Mutex<FirstPlanning>,
    /// Disruption invocations, and the commands they started.
    disruption: Mutex<(usize, Vec<nodewright_engine::command::StartedCommand>)>,
    chaos: Option<std::sync::Arc<Chaos>>,
}

/// What the first provisioning tick that saw each pod pending made of it.
#[derive(Default)]
struct FirstPlanning {
    seen: HashSet<String>,
    /// Pods that tick counted against capacity already there (a node, a claim in
    /// flight) rather than launching for them.
    counted_on_capacity: HashSet<String>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn secs(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}

impl Scenario {
    /// Runs the scenario to its end on the current runtime's clock (start the runtime
    /// paused for virtual time). `progress(elapsed, total)` is called every virtual
    /// minute.
    pub async fn run(&self, progress: &(dyn Fn(i64, i64) + Sync)) -> Report {
        let mut config = WorldConfig {
            seed: self.seed,
            ..self.world.clone()
        };
        let faults_until = self.start
            + secs(
                self.faults
                    .as_ref()
                    .and_then(|f| f.until)
                    .unwrap_or(self.duration),
            );
        if let Some(f) = &self.faults {
            config.queue.late_rate = f.rate;
            config.queue.late_until = faults_until;
        }
        let zones: Vec<&str> = self.zones.iter().map(String::as_str).collect();
        let world = World::new(self.catalog.clone(), &zones, self.start, config);
        for r in &self.reservations {
            world.cloud.add_reservation(r.clone());
        }
        world.cluster.with_state(|s| {
            s.node_pools.extend(self.node_pools.iter().cloned());
            s.node_classes.extend(self.node_classes.iter().cloned());
            s.node_overlays
                .extend(self.node_overlays.iter().cloned().map(Ok));
            s.capacity_buffers
                .extend(self.capacity_buffers.iter().cloned());
            s.pod_templates.extend(self.pod_templates.iter().cloned());
        });
        for d in &self.deployments {
            world.add_deployment(d.clone());
        }
        for ds in &self.daemonsets {
            world.add_daemonset(ds.clone());
        }
        let pricing = nodewright_core::pricing::Pricing::for_zones(self.zones.clone());
        for running in &self.running_nodes {
            let price = self
                .catalog
                .get(&running.instance_type)
                .and_then(|it| pricing.running_price(it, &running.zone, running.capacity_type))
                .unwrap_or(0.0);
            world.add_running_node(running, price);
        }
        world
            .cluster
            .with_state(|s| s.pdbs.extend(self.pdbs.iter().cloned()));
        for pod in &self.pods {
            world.cluster.add_pod(pod.clone());
        }
        let chaos = self.faults.as_ref().map(|f| {
            // Three quarters of each rate are errors the fakes answer, a quarter stalls.
            world
                .cloud
                .inject_faults(f.ec2_rate() * 0.75, f.seed ^ 0xec2);
            world
                .store
                .inject_faults(f.dynamodb_rate() * 0.75, f.seed ^ 0xdd8);
            world
                .cluster
                .inject_faults(f.kubernetes_rate() * 0.75, f.seed ^ 0x8c5);
            Chaos::new(f.clone(), world.clock.clone(), faults_until)
        });
        let run = Run {
            scenario: self,
            until: world.now() + secs(self.duration),
            world,
            requests: Mutex::new(VecDeque::new()),
            shortages: Mutex::new(Vec::new()),
            invocations: Mutex::new((0, 0)),
            first_planning: Mutex::new(FirstPlanning::default()),
            disruption: Mutex::new((0, Vec::new())),
            chaos,
        };
        let mut recorder = Recorder::default();
        let jobs = async {
            tokio::join!(
                run.disturbances(),
                run.provisioner(),
                run.interruptions(),
                run.disruption(),
                run.chaos()
            );
        };
        let world_loop = async {
            loop {
                run.world.step();
                recorder.record(&run.world).await;
                let elapsed = run.world.elapsed();
                if elapsed % 60 == 0 {
                    progress(elapsed, secs(self.duration));
                }
                if run.world.now() >= run.until {
                    break;
                }
                tokio::time::sleep(run.world.config.step).await;
            }
        };
        tokio::select! {
            biased;
            _ = jobs => {}
            _ = world_loop => {}
        }
        run.report(recorder)
    }
}

impl Run<'_> {
    /// The ports the functions call: the world's, behind the faults if any.
    fn ports(&self) -> nodewright_engine::context::Ports {
        match &self.chaos {
            Some(chaos) => super::faults::faulty_ports(
                self.world.ports(),
                self.world.cloud.clone(),
                chaos.clone(),
            ),
            None => self.world.ports(),
        }
    }

    /// One invocation of `job`; `None` when a crash killed it.
    async fn invoke<F: std::future::Future>(&self, job: Job, fut: F) -> Option<F::Output> {
        match &self.chaos {
            Some(_) => super::faults::invoke(job, fut).await,
            None => Some(fut.await),
        }
    }

    /// The faults' own schedule: crashes armed at random intervals, capacity storms
    /// ended, and the fakes' errors stopped when the faults end.
    async fn chaos(&self) {
        let Some(chaos) = &self.chaos else { return };
        let w = &self.world;
        let mut next_crash = chaos.next_crash_in().map(|d| w.now() + secs(d));
        let mut stopped = false;
        loop {
            let now = w.now();
            if now >= self.until {
                return;
            }
            if next_crash.is_some_and(|t| t <= now) {
                if chaos.active() {
                    chaos.arm_crash();
                    next_crash = chaos.next_crash_in().map(|d| now + secs(d));
                } else {
                    next_crash = None;
                }
            }
            let shortages = lock(&self.shortages).clone();
            for (t, z, c) in chaos.storms_over(now) {
                // A scenario's shortage of the same offering keeps it short.
                let short = shortages.iter().any(|s| {
                    s.to > now && s.offerings.iter().any(|o| o.0 == t && o.1 == z && o.2 == c)
                });
                if !short {
                    w.cloud.set_capacity(&t, &z, c, true);
                }
            }
            if !stopped && !chaos.active() {
                stopped = true;
                let seed = chaos.config().seed;
                w.cloud.inject_faults(0.0, seed);
                w.store.inject_faults(0.0, seed);
                w.cluster.inject_faults(0.0, seed);
                w.log("faults end");
            }
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
    }

    /// The faults injected: the runner's, the fakes' errors and the queue's late events.
    fn fault_counts(&self, chaos: &Chaos) -> FaultCounts {
        let w = &self.world;
        let mut counts = chaos.counts();
        let ec2 = w.cloud.injected_faults();
        let ddb = w.store.injected_faults();
        let k8s = w.cluster.injected_faults();
        let n =
            |m: &std::collections::BTreeMap<String, usize>, k: &str| m.get(k).copied().unwrap_or(0);
        counts.ec2_throttled = n(&ec2, "Throttled");
        counts.ec2_unavailable = n(&ec2, "Unavailable");
        counts.dynamodb_throttled = n(&ddb, "Throttled");
        counts.dynamodb_unavailable = n(&ddb, "Unavailable");
        counts.dynamodb_conflicts = n(&ddb, "Conflict");
        counts.kubernetes_throttled = n(&k8s, "Throttled");
        counts.kubernetes_unavailable = n(&k8s, "Unavailable");
        counts.late_events = w.queue.stats().late;
        counts
    }

    async fn sleep_until(&self, t: i64) {
        let wait = t - self.world.now();
        if wait > 0 {
            tokio::time::sleep(Duration::from_secs(wait as u64)).await;
        }
    }

    /// What happens to the cluster from outside: the scenario's disturbances, and spot
    /// interruptions at the scenario's rate.
    async fn disturbances(&self) {
        // Beside the others in one task, so the jobs' tasks are polled as before.
        tokio::join!(self.scheduled_disturbances(), self.spot_market());
    }

    /// The scenario's disturbances, and the end of each capacity shortage, in time order.
    async fn scheduled_disturbances(&self) {
        enum Step<'d> {
            Apply(&'d Disturbance),
            Restore(usize),
        }
        let start = self.world.started_at();
        let mut agenda: Vec<(i64, Step<'_>)> = self
            .scenario
            .disturbances
            .iter()
            .map(|d| (start + secs(d.at), Step::Apply(&d.disturbance)))
            .collect();
        agenda.sort_by_key(|(at, _)| *at);
        let mut agenda: VecDeque<(i64, Step<'_>)> = agenda.into();
        while let Some((at, step)) = agenda.pop_front() {
            self.sleep_until(at).await;
            match step {
                Step::Apply(d) => {
                    if let Some((end, index)) = self.apply(d) {
                        let pos = agenda
                            .iter()
                            .position(|(t, _)| *t > end)
                            .unwrap_or(agenda.len());
                        agenda.insert(pos, (end, Step::Restore(index)));
                    }
                }
                Step::Restore(index) => self.restore(index),
            }
        }
    }

    /// EC2 reclaims spot capacity at the scenario's rate
    /// ([`Scenario::spot_interruption_rate`]): once a minute, each running spot
    /// instance not yet warned gets its warning with that minute's share of the rate.
    /// Seeded on its own, so the run's other random choices do not shift it.
    async fn spot_market(&self) {
        let rate = self.scenario.spot_interruption_rate;
        if rate <= 0.0 {
            return;
        }
        const MINUTES_PER_MONTH: f64 = 730.0 * 60.0;
        // Interruptions come to an instance as a Poisson process of `rate` a month:
        // the chance of one in a minute.
        let per_minute = 1.0 - (-rate / MINUTES_PER_MONTH).exp();
        let mut rng = Rng::new(self.scenario.seed ^ 0x5b07_3a4c);
        let mut warned: HashSet<String> = HashSet::new();
        loop {
            let next = self.world.now() + 60;
            if next >= self.until {
                return;
            }
            self.sleep_until(next).await;
            // The live instances only: every one the day launched, terminated ones
            // included, was copied each minute.
            let mut spot: Vec<String> = self
                .world
                .ec2
                .live_instances()
                .into_iter()
                .filter(|i| i.state == "running" && i.capacity_type == CapacityType::Spot)
                .map(|i| i.id)
                .filter(|id| !warned.contains(id))
                .collect();
            spot.sort();
            for id in spot {
                if rng.chance(per_minute) {
                    self.interrupt_spot(&id);
                    warned.insert(id);
                }
            }
        }
    }

    /// EC2's two-minute warning for spot instance `id`.
    fn interrupt_spot(&self, id: &str) {
        let w = &self.world;
        let deadline = w.spot_interruption(id);
        w.mark("spot interruption");
        w.log(format!(
            "spot interruption warning for {id} ({}); EC2 takes it at {}",
            self.describe_instance(id),
            clock_time(deadline - w.started_at())
        ));
    }

    /// Applies one disturbance now; a capacity shortage returns when it ends.
    fn apply(&self, d: &Disturbance) -> Option<(i64, usize)> {
        let w = &self.world;
        let now = w.now();
        match d {
            Disturbance::SpotInterruption { target } => {
                match self.choose(target, Some(CapacityType::Spot)) {
                    Some(i) => self.interrupt_spot(&i),
                    None => w.log("spot interruption: no spot instance running; nothing sent"),
                }
                None
            }
            Disturbance::ReservationInterruption { target } => {
                let in_interruptible = |i: &FakeInstance| {
                    i.instance.capacity_type == CapacityType::Reserved
                        && i.instance
                            .capacity_reservation_id
                            .as_deref()
                            .is_some_and(|id| w.cloud.interruptible_reservation(id))
                };
                let chosen = self.choose_where(target, &in_interruptible, &HashSet::new());
                match chosen.and_then(|i| Some((w.reservation_interruption(&i)?, i))) {
                    Some((deadline, i)) => {
                        w.mark("reservation interruption");
                        w.log(format!(
                            "capacity reservation interruption warning for {i} ({}); EC2 takes it at {}",
                            self.describe_instance(&i),
                            clock_time(deadline - w.started_at())
                        ))
                    }
                    None => w.log(
                        "capacity reservation interruption: no instance running in an interruptible reservation; nothing sent",
                    ),
                }
                None
            }
            Disturbance::RebalanceRecommendation { target } => {
                match self.choose(target, Some(CapacityType::Spot)) {
                    Some(i) => {
                        w.rebalance_recommendation(&i);
                        w.mark("rebalance recommendation");
                        w.log(format!(
                            "rebalance recommendation for {i} ({})",
                            self.describe_instance(&i)
                        ));
                    }
                    None => {
                        w.log("rebalance recommendation: no spot instance running; nothing sent")
                    }
                }
                None
            }
            Disturbance::ScheduledChange { target, notice } => {
                match self.choose(target, None) {
                    Some(i) => {
                        let start = now + secs(*notice);
                        w.scheduled_change(std::slice::from_ref(&i), start);
                        w.mark("retirement notice");
                        w.log(format!(
                            "AWS Health: {i} ({}) retired at {}",
                            self.describe_instance(&i),
                            clock_time(start - w.started_at())
                        ));
                    }
                    None => w.log("scheduled change: no instance running; nothing sent"),
                }
                None
            }
            Disturbance::InstanceStopped { target } => {
                match self.choose(target, None) {
                    Some(i) => {
                        let what = self.describe_instance(&i);
                        w.stop(&i);
                        w.mark("instance stopped");
                        w.log(format!("{i} ({what}) stopped without notice"));
                    }
                    None => w.log("instance stop: no instance running; nothing stopped"),
                }
                None
            }
            Disturbance::NodeNotReady { target, count } => {
                let chosen = self.choose_several(target, *count);
                if chosen.is_empty() {
                    w.log("node not ready: no instance running; nothing changed");
                } else {
                    w.mark(format!("{} node(s) not ready", chosen.len()));
                }
                for i in chosen {
                    let Some(node) = self.node_of(&i) else {
                        w.log(format!(
                            "node not ready: {i} has no node yet; nothing changed"
                        ));
                        continue;
                    };
                    w.kubelet_stops(&node, now);
                    w.log(format!(
                        "{node} ({i}, {}): kubelet stopped reporting, Ready Unknown",
                        self.describe_instance(&i)
                    ));
                }
                None
            }
            Disturbance::GpuFault { target, count, xid } => {
                let chosen = self.choose_several(target, *count);
                if chosen.is_empty() {
                    w.log("GPU fault: no instance running; nothing changed");
                } else {
                    w.mark(format!("{} GPU fault(s)", chosen.len()));
                }
                for i in chosen {
                    let Some(node) = self.node_of(&i) else {
                        w.log(format!("GPU fault: {i} has no node yet; nothing changed"));
                        continue;
                    };
                    w.gpu_fault(&node, *xid, now);
                    w.log(format!(
                        "{node} ({i}, {}): AcceleratedHardwareReady False (NVIDIAXID{xid}Error)",
                        self.describe_instance(&i)
                    ));
                }
                None
            }
            Disturbance::InstanceImpaired { target, count } => {
                let chosen = self.choose_several(target, *count);
                if chosen.is_empty() {
                    w.log("instance impaired: no instance running; nothing changed");
                } else {
                    w.mark(format!("{} instance(s) impaired", chosen.len()));
                }
                for i in chosen {
                    w.cloud.set_impaired(&i, &["instance", "system"]);
                    w.log(format!(
                        "{i} ({}): EC2 status checks impaired",
                        self.describe_instance(&i)
                    ));
                }
                None
            }
            Disturbance::ScaleNodePool {
                node_pool,
                replicas,
            } => {
                match w.scale_node_pool(node_pool, *replicas) {
                    Some(was) => {
                        w.mark(format!("nodepool {node_pool} → {replicas}"));
                        w.log(format!(
                            "kubectl scale nodepool {node_pool} --replicas={replicas} (was {was})"
                        ))
                    }
                    None => w.log(format!(
                        "kubectl scale nodepool {node_pool}: no static NodePool of that name; nothing changed"
                    )),
                }
                None
            }
            Disturbance::ImageRelease => {
                // Ids from the time of the release: distinct per release.
                let n = u64::try_from(now).unwrap_or(0);
                let images: Vec<nodewright_engine::ports::Image> = [("amd64", 0), ("arm64", 1)]
                    .into_iter()
                    .map(|(arch, i)| nodewright_engine::ports::Image {
                        id: format!("ami-0{:016x}", n * 2 + i),
                        arch: arch.into(),
                    })
                    .collect();
                w.mark("AMI release");
                w.log(format!(
                    "new AMI release ({}): the nodes running older images have drifted",
                    images[0].id
                ));
                w.cloud.set_images(images);
                None
            }
            Disturbance::ZonalShift { zone, duration } => {
                let end = now + secs(*duration);
                w.mark("zonal shift");
                w.log(format!(
                    "ARC zonal shift away from {zone} ({}) until {}",
                    crate::fakes::zone_id(zone),
                    clock_time(end - w.started_at())
                ));
                w.cloud.start_zonal_shift(zone, "ZONAL_SHIFT", Some(end));
                None
            }
            Disturbance::CapacityShortage {
                instance_types,
                zones,
                capacity_types,
                duration,
            } => {
                let zones = if zones.is_empty() {
                    &self.scenario.zones
                } else {
                    zones
                };
                let capacity_types: &[CapacityType] = if capacity_types.is_empty() {
                    &[CapacityType::OnDemand, CapacityType::Spot]
                } else {
                    capacity_types
                };
                let mut offerings = Vec::new();
                for t in instance_types {
                    for z in zones {
                        for &c in capacity_types {
                            w.cloud.set_capacity(t, z, c, false);
                            offerings.push((t.clone(), z.clone(), c));
                        }
                    }
                }
                let end = now + secs(*duration);
                w.log(format!(
                    "capacity shortage: no {} {} in {} until {}",
                    instance_types.join(", "),
                    capacity_types
                        .iter()
                        .map(|c| c.as_str())
                        .collect::<Vec<_>>()
                        .join("/"),
                    zones.join(", "),
                    clock_time(end - w.started_at())
                ));
                let mut shortages = lock(&self.shortages);
                shortages.push(Shortage {
                    from: now,
                    to: end,
                    offerings,
                });
                Some((end, shortages.len() - 1))
            }
        }
    }

    fn restore(&self, index: usize) {
        let Some(shortage) = lock(&self.shortages).get(index).cloned() else {
            return;
        };
        for (t, z, c) in &shortage.offerings {
            self.world.cloud.set_capacity(t, z, *c, true);
        }
        self.world.log(format!(
            "capacity back for {} offering(s)",
            shortage.offerings.len()
        ));
    }

    /// `m5.xlarge spot in us-east-1a, node ip-..., 3 pods`.
    fn describe_instance(&self, id: &str) -> String {
        let Some(fi) = self.world.cloud.instance(id) else {
            return String::new();
        };
        let i = &fi.instance;
        let state = self.world.cluster.snapshot();
        let node = state.nodes.iter().find(|n| {
            n.provider_id
                .as_deref()
                .is_some_and(|p| p.ends_with(&format!("/{id}")))
        });
        let pods = node
            .map(|n| {
                state
                    .pods
                    .iter()
                    .filter(|p| {
                        !p.daemonset_owned && p.node_name.as_deref() == Some(n.name.as_str())
                    })
                    .count()
            })
            .unwrap_or(0);
        format!(
            "{} {} in {}, {pods} pod(s)",
            i.instance_type, i.capacity_type, i.zone
        )
    }

    /// The instance `target` names among the running ones (of `capacity_type`).
    fn choose(&self, target: &Target, capacity_type: Option<CapacityType>) -> Option<String> {
        self.choose_except(target, capacity_type, &HashSet::new())
    }

    /// `count` distinct running instances `target` names, one after the other.
    fn choose_several(&self, target: &Target, count: u32) -> Vec<String> {
        let mut chosen = HashSet::new();
        let mut out = Vec::new();
        for _ in 0..count {
            let Some(id) = self.choose_except(target, None, &chosen) else {
                break;
            };
            chosen.insert(id.clone());
            out.push(id);
        }
        out
    }

    /// The node of instance `id`, if it registered.
    fn node_of(&self, id: &str) -> Option<String> {
        let suffix = format!("/{id}");
        self.world
            .cluster
            .snapshot()
            .nodes
            .iter()
            .find(|n| {
                n.provider_id
                    .as_deref()
                    .is_some_and(|p| p.ends_with(&suffix))
            })
            .map(|n| n.name.clone())
    }

    /// [`Self::choose`] among the instances not in `except`.
    fn choose_except(
        &self,
        target: &Target,
        capacity_type: Option<CapacityType>,
        except: &HashSet<String>,
    ) -> Option<String> {
        let of_type =
            |fi: &FakeInstance| capacity_type.is_none_or(|c| fi.instance.capacity_type == c);
        self.choose_where(target, &of_type, except)
    }

    /// The running instance `target` names among those `keep` accepts, not in `except`.
    fn choose_where(
        &self,
        target: &Target,
        keep: &dyn Fn(&FakeInstance) -> bool,
        except: &HashSet<String>,
    ) -> Option<String> {
        let mut candidates: Vec<(String, i64)> = self
            .world
            .ec2
            .instances()
            .into_iter()
            .filter(|fi| fi.instance.state == "running" && !except.contains(&fi.instance.id))
            .filter(|fi| keep(fi))
            .map(|fi| (fi.instance.id, fi.instance.launch_time))
            .collect();
        candidates.sort();
        match target {
            Target::Random => self
                .world
                .with_rng(|r| r.pick(&candidates).map(|(id, _)| id.clone())),
            Target::Oldest => candidates
                .iter()
                .min_by_key(|(id, at)| (*at, id.clone()))
                .map(|(id, _)| id.clone()),
            Target::Busiest => {
                let state = self.world.cluster.snapshot();
                candidates
                    .iter()
                    .max_by_key(|(id, _)| {
                        let node = state.nodes.iter().find(|n| {
                            n.provider_id
                                .as_deref()
                                .is_some_and(|p| p.ends_with(&format!("/{id}")))
                        });
                        let pods = node.map_or(0, |n| {
                            state
                                .pods
                                .iter()
                                .filter(|p| {
                                    !p.daemonset_owned
                                        && p.node_name.as_deref() == Some(n.name.as_str())
                                })
                                .count()
                        });
                        (pods, std::cmp::Reverse(id.clone()))
                    })
                    .map(|(id, _)| id.clone())
            }
        }
    }

    /// The provisioner function: one invocation at a time, requested every minute by
    /// its schedule and on demand by the interruption function.
    async fn provisioner(&self) {
        let w = &self.world;
        let mut next_schedule = w.now();
        let mut invocation = 0usize;
        loop {
            let now = w.now();
            if now >= self.until {
                return;
            }
            while next_schedule <= now {
                lock(&self.requests).push_back(next_schedule);
                next_schedule += secs(SCHEDULE);
            }
            let request = {
                let mut requests = lock(&self.requests);
                requests.retain(|at| now - at <= MAX_EVENT_AGE_SECS);
                requests.pop_front()
            };
            if request.is_none() {
                self.sleep_until((next_schedule).min(now + 1)).await;
                continue;
            }
            if let Some(frozen) = self.chaos.as_ref().and_then(|c| c.freeze()) {
                // Frozen between invocations: the requests of that while age out.
                w.log(format!(
                    "provisioner: execution environment frozen for {} s",
                    frozen.as_secs()
                ));
                tokio::time::sleep(frozen).await;
                continue;
            }
            invocation += 1;
            lock(&self.invocations).0 += 1;
            let mut config =
                ProvisionerConfig::new("simulated", format!("provisioner-{invocation}"));
            config.repair = self.scenario.repair.clone();
            config.scheduler_config = self.scenario.world.scheduler_config.clone();
            config.adopt_karpenter_nodes = self.scenario.adopt_karpenter_nodes;
            let provisioner = Provisioner::new(self.ports(), config);
            let budget = PROVISIONER_BUDGET.min(Duration::from_secs((self.until - now) as u64));
            let Some(report) = self
                .invoke(Job::Provisioner, provisioner.run_for(budget, POLL_INTERVAL))
                .await
            else {
                w.log(format!("provisioner invocation {invocation} killed"));
                continue;
            };
            for why in report.shortfalls() {
                w.log(format!("provisioner invocation {invocation}: {why}"));
            }
            let mut first = lock(&self.first_planning);
            for tick in &report.ticks {
                let launched: HashSet<&String> =
                    tick.planned.iter().flat_map(|c| c.pods.iter()).collect();
                let unschedulable: HashSet<&String> =
                    tick.unschedulable.iter().map(|u| &u.pod).collect();
                for pod in &tick.pending {
                    if first.seen.insert(pod.clone())
                        && !launched.contains(pod)
                        && !unschedulable.contains(pod)
                    {
                        first.counted_on_capacity.insert(pod.clone());
                    }
                }
            }
        }
    }

    /// The disruption function: its schedule, offset by half a minute from the
    /// provisioner's; each invocation decides once and exits.
    async fn disruption(&self) {
        if !self.scenario.disruption {
            return;
        }
        let w = &self.world;
        let mut next = w.now() + secs(SCHEDULE) / 2;
        let mut invocation = 0usize;
        // One warm execution environment serves every run (a schedule a minute keeps it
        // warm), as in Lambda: built once, like the function's cold start.
        let mut environment = 1;
        let config = |environment: usize| DisruptionConfig {
            scheduler_config: self.scenario.world.scheduler_config.clone(),
            ..DisruptionConfig::new("simulated", format!("disruption-{environment}"))
        };
        let mut disrupter = Disrupter::new(self.ports(), config(environment));
        loop {
            self.sleep_until(next).await;
            if w.now() >= self.until {
                return;
            }
            next += secs(SCHEDULE);
            if let Some(frozen) = self.chaos.as_ref().and_then(|c| c.freeze()) {
                // Frozen between invocations: the schedule's events of that while are
                // missed, and the environment thaws with its caches as they were.
                w.log(format!(
                    "disruption: execution environment frozen for {} s",
                    frozen.as_secs()
                ));
                next += secs(frozen);
                continue;
            }
            invocation += 1;
            let Some(report) = self.invoke(Job::Disruption, disrupter.tick()).await else {
                w.log(format!("disruption invocation {invocation} killed"));
                lock(&self.disruption).0 += 1;
                // Lambda replaces a killed execution environment: a cold start.
                environment += 1;
                disrupter = Disrupter::new(self.ports(), config(environment));
                continue;
            };
            let mut d = lock(&self.disruption);
            d.0 += 1;
            match report {
                Ok(r) => d.1.extend(r.started),
                Err(e) => w.log(format!("disruption invocation {invocation} failed: {e}")),
            }
        }
    }

    /// The SQS event source and the interruption function's invocations.
    async fn interruptions(&self) {
        let w = &self.world;
        let function = InterruptionFunction {
            ports: self.ports(),
            config: InterruptionConfig::default(),
            rebalance: self.scenario.rebalance,
            timeout: INTERRUPTION_TIMEOUT,
        };
        let function = &function;
        let mut running = FuturesUnordered::new();
        loop {
            let batch: Vec<Message> = w.queue.receive(w.now());
            if !batch.is_empty() {
                lock(&self.invocations).1 += 1;
                running.push(async move {
                    let results = self
                        .invoke(Job::Interruption, function.invoke(&batch))
                        .await;
                    (batch, results)
                });
            }
            tokio::select! {
                biased;
                Some((batch, results)) = running.next() => match results {
                    Some(results) => self.acknowledge(&batch, &results),
                    // Not acknowledged: SQS delivers the batch again after its
                    // visibility timeout.
                    None => w.log(format!(
                        "interruption invocation killed ({} message(s) left in flight)",
                        batch.len()
                    )),
                },
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    }

    fn acknowledge(&self, batch: &[Message], results: &[super::queue::RecordResult]) {
        let w = &self.world;
        let mut wake = false;
        for (m, r) in batch.iter().zip(results) {
            match r.disposition {
                Disposition::Retry => w.log(format!(
                    "interruption function: event {} failed and will be delivered again",
                    r.event_id.as_deref().unwrap_or("?")
                )),
                Disposition::Duplicate => {
                    w.queue.delete(&m.message_id);
                    w.log(format!(
                        "SQS delivered event {} again; acknowledged as a duplicate",
                        r.event_id.as_deref().unwrap_or("?")
                    ));
                }
                _ => w.queue.delete(&m.message_id),
            }
            wake |= r.provisioner_needed;
        }
        if wake {
            lock(&self.requests).push_back(w.now());
        }
    }

    fn report(&self, recorder: Recorder) -> Report {
        let w = self.world.clone();
        let now = w.now();
        let start = w.started_at();
        let waits = w.pod_waits();
        let still = w.still_pending();
        let mut seconds: Vec<i64> = waits.iter().map(PodWait::seconds).collect();
        seconds.extend(still.iter().map(|(_, s)| *s));
        let lifetimes = w.lifetimes();
        // Billed within the run: a node running at its start counts from then.
        let hours = |l: &Lifetime| {
            (l.ended_at.unwrap_or(now) - l.launched_at.max(start)).max(0) as f64 / 3600.0
        };
        let node_hours: f64 = lifetimes.iter().map(hours).sum();
        let cost: f64 = lifetimes.iter().map(|l| hours(l) * l.price_per_hour).sum();
        let unneeded = w.unneeded_launches();
        let launched = w
            .cloud
            .instances()
            .iter()
            .filter(|i| i.instance.launch_time >= start)
            .count();
        let mut drains: Vec<DrainRecord> = w
            .disruptions()
            .iter()
            .map(|d| drain_record(d, start))
            .collect();
        drains.sort_by_key(|d| (d.since, d.claim.clone()));
        let interruptions = w
            .disruptions()
            .iter()
            .filter(|d| is_interruption(d.cause) && d.terminated_at.is_some())
            .count();
        let repairs = w
            .disruptions()
            .iter()
            .filter(|d| d.cause == DisruptionCause::Unhealthy && d.terminated_at.is_some())
            .count();
        let drain_max = drains
            .iter()
            .filter_map(|d| d.drain_seconds)
            .max()
            .unwrap_or(0) as f64;
        let queue = w.queue.stats();
        let (billed, price) = w.billed_now();
        let lost = w.lost_pods().len() + w.orphaned_pods().len();
        let (provisioner_invocations, interruption_invocations) = *lock(&self.invocations);
        // A command counts once every node it named is gone by it (a Terminated claim
        // that carries it): a node whose command was abandoned and that a later
        // command took counts for the later one alone.
        let (disruption_invocations, started) = lock(&self.disruption).clone();
        let claims = w.store.claims();
        let terminated_by: HashMap<&str, &str> = claims
            .iter()
            .filter(|k| k.state == nodewright_core::nodeclaim::ClaimState::Terminated)
            .filter_map(|k| Some((k.node_name.as_deref()?, k.command()?.id.as_str())))
            .collect();
        let done: Vec<&nodewright_engine::command::StartedCommand> = started
            .iter()
            .filter(|c| {
                c.nodes
                    .iter()
                    .all(|n| terminated_by.get(n.as_str()) == Some(&c.id.as_str()))
            })
            .collect();
        let nodes = node_records(&w);
        let evictions = w.cluster.evictions();
        let cause_of: HashMap<&str, DisruptionCause> = nodes
            .iter()
            .filter_map(|n| Some((n.node.as_deref()?, n.cause?)))
            .collect();
        let caused_by_interruption =
            |node: &str| cause_of.get(node).copied().is_some_and(is_interruption);
        let (mut pods_evicted, mut pods_evicted_by_interruption) = (0, 0);
        for (node, count) in &evictions.evicted {
            if caused_by_interruption(node) {
                pods_evicted_by_interruption += count;
            } else {
                pods_evicted += count;
            }
        }
        let summary = Summary {
            duration_seconds: now - start,
            pods_evicted,
            pods_evicted_by_interruption,
            drains_blocked_by_budgets: evictions.refused_by_budget.len(),
            pods_lost: lost,
            pods_killed_without_notice: w.killed_pods().len(),
            pdb_violations: w.budget_violations().len(),
            pending_seconds: Percentiles::of(&seconds),
            pods_bound: waits.len(),
            pods_pending_at_end: still.len(),
            instances_launched: launched,
            instances_needed: launched.saturating_sub(unneeded.len()),
            peak_nodes: recorder.peak_nodes,
            nodes_at_end: billed,
            price_per_hour_at_end: price,
            node_hours,
            cost,
            interruptions,
            repairs,
            reboots: w.reboots(),
            drain_seconds_max: drain_max,
            events_sent: queue.sent,
            duplicate_deliveries: queue.duplicated,
            dead_lettered: queue.dead_lettered,
            provisioner_invocations,
            interruption_invocations,
            disruption_invocations,
            disruption_commands: done.len(),
            nodes_disrupted: done.iter().map(|c| c.nodes.len()).sum(),
            replacements_launched: done.iter().map(|c| c.replacements.len()).sum(),
            savings_per_hour: done.iter().map(|c| c.savings_per_hour).sum(),
            faults: self.chaos.as_ref().map(|c| self.fault_counts(c)),
        };
        let problems = problems(&w, &summary);
        Report {
            scenario: self.scenario.name.clone(),
            seed: self.scenario.seed,
            summary,
            timeline: recorder.timeline,
            samples: recorder.samples,
            drains,
            shortages: lock(&self.shortages).clone(),
            nodes,
            markers: w
                .marks()
                .into_iter()
                .map(|(t, label)| Marker {
                    t: t - start,
                    label,
                })
                .collect(),
            waits,
            unneeded_launches: unneeded,
            counted_on_capacity: std::mem::take(
                &mut lock(&self.first_planning).counted_on_capacity,
            ),
            problems,
            world: w,
            chaos: self.chaos.clone(),
        }
    }
}
