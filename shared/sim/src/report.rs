//! What a [`super::Scenario`] run leaves: the [`Report`] (timeline, samples for
//! charts, drains, the [`Summary`]) and its end-state checks (`problems`), and the
//! `Recorder` that reads the world after every step of the run to build them.

use std::collections::{HashMap, HashSet};

use nodewright_core::catalog::CapacityType;
use nodewright_core::nodeclaim::{DisruptionCause, NodeClaim};

use nodewright_engine::ports::DecisionLog;

use super::faults::{Chaos, FaultCounts};
use super::world::{Disrupted, PodWait, UnneededLaunch, World};

/// One line of the timeline.
#[derive(Debug, Clone, PartialEq)]
pub struct TimelineRow {
    /// Seconds since the start.
    pub t: i64,
    /// What happened in the world (empty when the row is a decision).
    pub event: String,
    /// What nodewright decided (`job: action`), from the store's decision log.
    pub decision: String,
    /// Instances billed then.
    pub nodes: usize,
    pub price_per_hour: f64,
}

/// The world at one instant, for charts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    pub t: i64,
    pub nodes: usize,
    pub pending_pods: usize,
    pub price_per_hour: f64,
}

/// A moment a chart marks: a disturbance of the scenario, a Deployment scaled.
#[derive(Debug, Clone, PartialEq)]
pub struct Marker {
    /// Seconds since the start.
    pub t: i64,
    /// Short: "spot interruption", "web → 30".
    pub label: String,
}

/// One node of the run under the one name a report gives it, its NodeClaim's, with the
/// EC2 instance and the Kubernetes node it was (events name those).
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRecord {
    /// The claim's name.
    pub name: String,
    pub instance: String,
    /// The Kubernetes node, once one registered.
    pub node: Option<String>,
    pub node_pool: Option<String>,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: CapacityType,
    pub price_per_hour: f64,
    /// Seconds since the start.
    pub launched: i64,
    /// Seconds since the start when EC2 had it terminated; `None` while it runs.
    pub ended: Option<i64>,
    /// Why nodewright took it away, if it did.
    pub cause: Option<DisruptionCause>,
}

/// One interruption (or other disruption) and how long its drain took.
#[derive(Debug, Clone, PartialEq)]
pub struct DrainRecord {
    pub claim: String,
    pub instance: Option<String>,
    pub cause: DisruptionCause,
    /// Seconds since the start when the claim was disrupted.
    pub since: i64,
    /// Seconds from the drain's start to an empty node.
    pub drain_seconds: Option<i64>,
    /// Seconds from the disruption to the claim Terminated.
    pub terminated_after: Option<i64>,
    /// Seconds between the deadline and the claim Terminated (negative: before it).
    pub margin_to_deadline: Option<i64>,
}

/// p50, p95 and max of a set of seconds.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Percentiles {
    pub p50: f64,
    pub p95: f64,
    pub max: f64,
}

impl Percentiles {
    /// Nearest-rank percentiles.
    pub fn of(values: &[i64]) -> Percentiles {
        if values.is_empty() {
            return Percentiles::default();
        }
        let mut v = values.to_vec();
        v.sort_unstable();
        let rank = |p: f64| {
            let i = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
            v[i] as f64
        };
        Percentiles {
            p50: rank(0.50),
            p95: rank(0.95),
            max: v[v.len() - 1] as f64,
        }
    }
}

/// A capacity shortage as it was in force.
#[derive(Debug, Clone, PartialEq)]
pub struct Shortage {
    pub from: i64,
    pub to: i64,
    /// (instance type, zone, capacity type).
    pub offerings: Vec<(String, String, CapacityType)>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Summary {
    pub duration_seconds: i64,
    /// Pods that died with an instance taken at an announced deadline, or with a node
    /// deleted under them: what nodewright should have drained. Must be 0.
    pub pods_lost: usize,
    /// Pods that died with an instance stopped without notice (nothing could drain them).
    pub pods_killed_without_notice: usize,
    pub pdb_violations: usize,
    /// Pods evicted by drains nodewright started itself (consolidation, drift,
    /// expiration, repair): voluntary disruption.
    pub pods_evicted: usize,
    /// Pods evicted by drains an interruption event started (spot, rebalance,
    /// scheduled change...).
    pub pods_evicted_by_interruption: usize,
    /// Nodes whose drain a PodDisruptionBudget held up at least once (an eviction
    /// answered 429).
    pub drains_blocked_by_budgets: usize,
    /// Seconds from pending to bound, over every pod bound (and those still pending).
    pub pending_seconds: Percentiles,
    pub pods_bound: usize,
    pub pods_pending_at_end: usize,
    pub instances_launched: usize,
    /// Launches minus those whose pods all had capacity already.
    pub instances_needed: usize,
    pub peak_nodes: usize,
    pub nodes_at_end: usize,
    pub price_per_hour_at_end: f64,
    pub node_hours: f64,
    pub cost: f64,
    /// Claims taken away after an interruption event (spot, rebalance, scheduled
    /// change, stop, termination), and finished.
    pub interruptions: usize,
    /// Unhealthy nodes node repair replaced (their claims terminated).
    pub repairs: usize,
    /// Instances node repair rebooted in place (`RebootForRepair`).
    pub reboots: usize,
    pub drain_seconds_max: f64,
    pub events_sent: usize,
    pub duplicate_deliveries: usize,
    pub dead_lettered: usize,
    pub provisioner_invocations: usize,
    pub interruption_invocations: usize,
    pub disruption_invocations: usize,
    /// Disruption commands that ran to the end (their nodes terminated).
    pub disruption_commands: usize,
    /// Nodes those commands took away, and replacements they launched.
    pub nodes_disrupted: usize,
    pub replacements_launched: usize,
    /// What those commands saved, per hour, as decided (price before − after).
    pub savings_per_hour: f64,
    /// Faults injected, per kind (only when the scenario sets `faults`).
    pub faults: Option<FaultCounts>,
}

/// What a simulation did.
pub struct Report {
    pub scenario: String,
    pub seed: u64,
    pub summary: Summary,
    pub timeline: Vec<TimelineRow>,
    pub samples: Vec<Sample>,
    pub drains: Vec<DrainRecord>,
    pub shortages: Vec<Shortage>,
    /// Every instance launched, in launch order, under its claim's name.
    pub nodes: Vec<NodeRecord>,
    /// Disturbances and scaling, for charts.
    pub markers: Vec<Marker>,
    pub waits: Vec<PodWait>,
    pub unneeded_launches: Vec<UnneededLaunch>,
    /// Pods (namespace/name) that the first provisioning tick to see them pending
    /// counted against capacity already there (a node with room, a claim in flight)
    /// instead of launching for them.
    pub counted_on_capacity: HashSet<String>,
    /// End-state invariants broken (pods lost, a budget violated, instances ≠ live
    /// claims), one line each. Empty: all held.
    pub problems: Vec<String>,
    /// The world as the run left it, for further checks.
    pub world: std::sync::Arc<World>,
    /// The faults injected (when the scenario sets `faults`), for further checks.
    pub chaos: Option<std::sync::Arc<Chaos>>,
}

/// `HH:MM:SS` of seconds since the start (hours go past 24).
pub fn clock_time(t: i64) -> String {
    let t = t.max(0);
    format!("{:02}:{:02}:{:02}", t / 3600, t % 3600 / 60, t % 60)
}

/// Causes that come from an interruption event.
pub fn is_interruption(cause: DisruptionCause) -> bool {
    matches!(
        cause,
        DisruptionCause::SpotInterrupted
            | DisruptionCause::CapacityReservationInterrupted
            | DisruptionCause::RebalanceRecommended
            | DisruptionCause::ScheduledChange
            | DisruptionCause::InstanceStopped
            | DisruptionCause::InstanceTerminated
    )
}

pub(super) fn drain_record(d: &Disrupted, start: i64) -> DrainRecord {
    DrainRecord {
        claim: d.claim.clone(),
        instance: d.instance.clone(),
        cause: d.cause,
        since: d.since - start,
        drain_seconds: d.draining_at.zip(d.drained_at).map(|(a, b)| b - a),
        terminated_after: d.terminated_at.map(|t| t - d.since),
        margin_to_deadline: d.deadline.zip(d.terminated_at).map(|(dl, t)| t - dl),
    }
}

/// The nodes of a run: every instance EC2 launched, named by the claim that recorded
/// it (by the instance id when none did), in launch order.
pub(super) fn node_records(w: &World) -> Vec<NodeRecord> {
    let start = w.started_at();
    let claims = w.store.claims();
    let by_instance: HashMap<&str, &NodeClaim> = claims
        .iter()
        .filter_map(|c| Some((c.instance_id.as_deref()?, c)))
        .collect();
    let nodes = w.cluster.snapshot().nodes;
    let mut out: Vec<NodeRecord> = w
        .lifetimes()
        .into_iter()
        .map(|l| {
            let claim = by_instance.get(l.instance.as_str()).copied();
            let node = claim.and_then(|c| c.node_name.clone()).or_else(|| {
                nodes
                    .iter()
                    .find(|n| {
                        n.provider_id
                            .as_deref()
                            .is_some_and(|p| p.rsplit('/').next() == Some(l.instance.as_str()))
                    })
                    .map(|n| n.name.clone())
            });
            NodeRecord {
                name: claim.map_or_else(|| l.instance.clone(), |c| c.name.clone()),
                instance: l.instance.clone(),
                node,
                node_pool: claim.map(|c| c.node_pool.clone()),
                instance_type: l.instance_type,
                zone: l.zone,
                capacity_type: l.capacity_type,
                price_per_hour: l.price_per_hour,
                launched: l.launched_at - start,
                ended: l.ended_at.map(|t| t - start),
                cause: claim.and_then(|c| c.disruption.as_ref()).map(|d| d.cause),
            }
        })
        .collect();
    out.sort_by(|a, b| (a.launched, &a.name).cmp(&(b.launched, &b.name)));
    out
}

/// The end-state invariants: no pod lost, no budget violated, every running instance
/// recorded by a live claim and every live claim's instance running.
pub(super) fn problems(w: &World, summary: &Summary) -> Vec<String> {
    let start = w.started_at();
    let mut out = Vec::new();
    if summary.pods_lost > 0 {
        let mut pods = w.lost_pods();
        pods.extend(w.orphaned_pods());
        out.push(format!(
            "{} pod(s) lost (not drained before their instance went): {}",
            summary.pods_lost,
            pods.join(", ")
        ));
    }
    for v in w.budget_violations().iter().take(5) {
        out.push(format!(
            "PodDisruptionBudget {} had {} healthy pod(s) too few at {}",
            v.budget,
            -v.allowed,
            clock_time(v.at - start)
        ));
    }
    let mut running: Vec<String> = w
        .ec2
        .instances()
        .into_iter()
        .filter(|fi| fi.instance.state != "terminated")
        .map(|fi| fi.instance.id)
        .collect();
    running.sort();
    let mut live: Vec<String> = w
        .store
        .claims()
        .into_iter()
        .filter(|c| !c.state.is_terminal())
        .filter_map(|c| c.instance_id)
        .collect();
    live.sort();
    if running != live {
        let untracked: Vec<&String> = running.iter().filter(|i| !live.contains(i)).collect();
        let missing: Vec<&String> = live.iter().filter(|i| !running.contains(i)).collect();
        out.push(format!(
            "instances ≠ live claims: {} running, {} live claims; running without a claim: {untracked:?}; claims whose instance is gone: {missing:?}",
            running.len(),
            live.len()
        ));
    }
    out
}

/// Reads the world after every step: the timeline (world events and decisions, each
/// with the nodes and price of that moment) and samples for charts.
#[derive(Default)]
pub(super) struct Recorder {
    pub(super) timeline: Vec<TimelineRow>,
    pub(super) samples: Vec<Sample>,
    log_seen: usize,
    last_decision_at: i64,
    seen_at_last_decision: usize,
    pub(super) peak_nodes: usize,
}

impl Recorder {
    pub(super) async fn record(&mut self, w: &World) {
        let start = w.started_at();
        let t = w.now() - start;
        let (nodes, price) = w.billed_now();
        self.peak_nodes = self.peak_nodes.max(nodes);
        let mut added = false;
        for (at, event) in w.log_since(self.log_seen) {
            self.log_seen += 1;
            added = true;
            self.timeline.push(TimelineRow {
                t: at - start,
                event,
                decision: String::new(),
                nodes,
                price_per_hour: price,
            });
        }
        // Decisions are appended in time order: ask for those from the last second
        // seen on, and skip the ones of that second already taken.
        if let Ok(decisions) = w.store.decisions(self.last_decision_at).await {
            let skip = decisions
                .iter()
                .take_while(|d| d.at == self.last_decision_at)
                .count()
                .min(self.seen_at_last_decision);
            for d in decisions.into_iter().skip(skip) {
                if d.at == self.last_decision_at {
                    self.seen_at_last_decision += 1;
                } else {
                    self.last_decision_at = d.at;
                    self.seen_at_last_decision = 1;
                }
                added = true;
                self.timeline.push(TimelineRow {
                    t: d.at - start,
                    event: String::new(),
                    decision: format!("{}: {}", d.job, d.action),
                    nodes,
                    price_per_hour: price,
                });
            }
        }
        if added {
            // Rows arrive in step order; decisions carry their own time.
            self.timeline.sort_by_key(|r| r.t);
        }
        let pending = w.pending_pods();
        let sample = Sample {
            t,
            nodes,
            pending_pods: pending,
            price_per_hour: price,
        };
        let changed = self.samples.last().is_none_or(|last| {
            last.nodes != nodes
                || last.pending_pods != pending
                || (last.price_per_hour - price).abs() > 1e-9
                || t - last.t >= 60
        });
        if changed {
            self.samples.push(sample);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let p = Percentiles::of(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
        assert_eq!((p.p50, p.p95, p.max), (5.0, 10.0, 10.0));
        assert_eq!(Percentiles::of(&[]), Percentiles::default());
    }

    #[test]
    fn clock_time_counts_hours_past_a_day() {
        assert_eq!(clock_time(65), "00:01:05");
        assert_eq!(clock_time(25 * 3600 + 1), "25:00:01");
    }
}
