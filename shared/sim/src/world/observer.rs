//! The observer of a simulated world: how long each pod waited, PodDisruptionBudgets
//! short of healthy pods, instances' lifetimes as billed, claims' progress through a
//! disruption, launches whose pods had capacity already, and the log and marks a run's
//! report shows. It watches; it changes nothing in the world.

use super::*;

/// A PodDisruptionBudget found with fewer healthy pods than it requires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetViolation {
    pub at: i64,
    pub budget: String,
    pub allowed: i64,
}

/// How long one pod waited from pending to bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodWait {
    pub pod: String,
    pub since: i64,
    pub bound_at: i64,
}

impl PodWait {
    pub fn seconds(&self) -> i64 {
        self.bound_at - self.since
    }
}

/// One instance from its launch to its end, as billed.
#[derive(Debug, Clone, PartialEq)]
pub struct Lifetime {
    pub instance: String,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: CapacityType,
    pub price_per_hour: f64,
    pub launched_at: i64,
    /// When it was seen terminated; `None` while it runs.
    pub ended_at: Option<i64>,
}

/// How a disrupted claim went away, as the observer saw it (to the second).
#[derive(Debug, Clone, PartialEq)]
pub struct Disrupted {
    pub claim: String,
    pub instance: Option<String>,
    pub cause: DisruptionCause,
    /// When the claim was disrupted (its `disruption.since`).
    pub since: i64,
    pub deadline: Option<i64>,
    pub draining_at: Option<i64>,
    /// The node was empty (the claim reached Terminating).
    pub drained_at: Option<i64>,
    pub terminated_at: Option<i64>,
}

/// A launch whose pods had capacity already.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnneededLaunch {
    pub claim: String,
    pub at: i64,
    /// Why: where its pods fitted.
    pub reason: String,
}

/// What the observer records while the world runs.
#[derive(Default)]
pub(super) struct Observations {
    pub(super) waits: Vec<PodWait>,
    pub(super) died: Vec<String>,
    pub(super) violations: Vec<BudgetViolation>,
    pub(super) lost_pods: Vec<String>,
    pub(super) killed_pods: Vec<String>,
    /// (instance, when) of every stop without notice.
    pub(super) stops: Vec<(String, i64)>,
    pub(super) orphaned_pods: Vec<String>,
    pub(super) lifetimes: BTreeMap<String, Lifetime>,
    pub(super) claims_seen: HashSet<String>,
    pub(super) disrupted: BTreeMap<String, Disrupted>,
    pub(super) unneeded: Vec<UnneededLaunch>,
    pub(super) log: Vec<(i64, String)>,
    /// What a chart marks (disturbances, Deployments scaled): (when, short label).
    pub(super) marks: Vec<(i64, String)>,
    /// (instances, $/h) billed as of the last step.
    pub(super) billed: (usize, f64),
    /// Pods left pending by the last step.
    pub(super) pending: usize,
    /// The budgets the last look found violated, and by how much: what a step that
    /// finds the cluster as it was sees again ([`World::observe_budgets_again`]).
    pub(super) violated_now: Vec<(String, i64)>,
}

impl World {
    /// Claims' progress, and whether each new launch was needed (before the binder
    /// runs: what fits a Ready node now would be bound by it this very step).
    pub(super) fn observe_claims(&self, now: i64, state: &ClusterState, claims: &[NodeClaim]) {
        let mut o = lock(&self.observed);
        let fresh: Vec<&NodeClaim> = claims
            .iter()
            .filter(|c| !o.seen.claims_seen.contains(&c.name))
            .collect();
        if !fresh.is_empty() {
            let pending: HashMap<String, &Pod> = state
                .pods
                .iter()
                .filter(|p| p.is_pending())
                .map(|p| (p.key(), p))
                .collect();
            for claim in &fresh {
                let nominated_elsewhere: HashSet<&String> = claims
                    .iter()
                    .filter(|c| {
                        c.name != claim.name
                            && c.created_at <= claim.created_at
                            && matches!(
                                c.state,
                                ClaimState::Launching
                                    | ClaimState::Launched
                                    | ClaimState::Registered
                            )
                    })
                    .flat_map(|c| c.pods.iter())
                    .collect();
                let waiting = self.as_scheduled(
                    state,
                    claim
                        .pods
                        .iter()
                        .filter_map(|k| pending.get(k).copied())
                        .collect(),
                );
                if waiting.is_empty() || claim.state == ClaimState::LaunchFailed {
                    continue;
                }
                let mut binder = Binder::new(state);
                let mut placed = Vec::new();
                let all_had_room = waiting.iter().all(|p| {
                    if nominated_elsewhere.contains(&p.key()) {
                        placed.push(format!("{} (nominated to another claim)", p.key()));
                        true
                    } else if let Some(node) = binder.place(p) {
                        placed.push(format!("{} → {node}", p.key()));
                        true
                    } else {
                        false
                    }
                });
                if all_had_room {
                    o.seen.unneeded.push(UnneededLaunch {
                        claim: claim.name.clone(),
                        at: claim.created_at,
                        reason: placed.join(", "),
                    });
                }
            }
            for claim in fresh {
                o.seen.claims_seen.insert(claim.name.clone());
            }
        }
        for c in claims {
            let Some(d) = &c.disruption else { continue };
            let entry = o
                .seen
                .disrupted
                .entry(c.name.clone())
                .or_insert_with(|| Disrupted {
                    claim: c.name.clone(),
                    instance: c.instance_id.clone(),
                    cause: d.cause,
                    since: d.since,
                    deadline: d.deadline,
                    draining_at: None,
                    drained_at: None,
                    terminated_at: None,
                });
            // An escalation changes the cause and deadline of the disruption under way.
            entry.cause = d.cause;
            entry.deadline = d.deadline;
            match c.state {
                ClaimState::Draining => {
                    entry.draining_at.get_or_insert(now);
                }
                ClaimState::Terminating => {
                    entry.draining_at.get_or_insert(now);
                    entry.drained_at.get_or_insert(now);
                }
                ClaimState::Terminated => {
                    entry.draining_at.get_or_insert(c.updated_at);
                    entry.drained_at.get_or_insert(c.updated_at);
                    entry.terminated_at.get_or_insert(c.updated_at);
                }
                _ => {}
            }
        }
    }

    pub(super) fn observe_budgets(&self, now: i64, died_now: bool, state: &ClusterState) {
        if died_now {
            return;
        }
        let mut violated = Vec::new();
        for pdb in &state.pdbs {
            let allowed = pdb.disruptions_allowed(state.pods.iter());
            if allowed < 0 {
                violated.push((format!("{}/{}", pdb.namespace, pdb.name), allowed));
            }
        }
        let mut o = lock(&self.observed);
        o.seen
            .violations
            .extend(violated.iter().map(|(budget, allowed)| BudgetViolation {
                at: now,
                budget: budget.clone(),
                allowed: *allowed,
            }));
        o.seen.violated_now = violated;
    }

    /// [`Self::observe_budgets`] on a cluster unchanged since the last look: the same
    /// budgets are violated (if any), now.
    pub(super) fn observe_budgets_again(&self, now: i64, died_now: bool) {
        if died_now {
            return;
        }
        let mut o = lock(&self.observed);
        let again: Vec<BudgetViolation> = o
            .seen
            .violated_now
            .iter()
            .map(|(budget, allowed)| BudgetViolation {
                at: now,
                budget: budget.clone(),
                allowed: *allowed,
            })
            .collect();
        o.seen.violations.extend(again);
    }

    /// (pod, seconds it waited from pending to bound), in binding order.
    pub fn waits(&self) -> Vec<(String, i64)> {
        lock(&self.observed)
            .seen
            .waits
            .iter()
            .map(|w| (w.pod.clone(), w.seconds()))
            .collect()
    }

    /// Every wait from pending to bound, in binding order.
    pub fn pod_waits(&self) -> Vec<PodWait> {
        lock(&self.observed).seen.waits.clone()
    }

    /// Pods pending now, with how long they have waited.
    pub fn still_pending(&self) -> Vec<(String, i64)> {
        let now = self.now();
        let o = lock(&self.observed);
        let mut out: Vec<(String, i64)> = self
            .cluster
            .snapshot()
            .pods
            .iter()
            .filter(|p| p.is_pending())
            .map(|p| {
                let key = p.key();
                let since = o.pending_since.get(&key).copied().unwrap_or(now);
                (key, now - since)
            })
            .collect();
        out.sort();
        out
    }

    pub fn budget_violations(&self) -> Vec<BudgetViolation> {
        lock(&self.observed).seen.violations.clone()
    }

    /// Instances EC2 reclaimed at their deadline (not terminated by nodewright).
    pub fn reclaimed(&self) -> Vec<String> {
        lock(&self.observed).seen.died.clone()
    }

    /// Pods lost with an instance EC2 took at a deadline it had announced (they were
    /// not drained in time). DaemonSet pods are not counted.
    pub fn lost_pods(&self) -> Vec<String> {
        lock(&self.observed).seen.lost_pods.clone()
    }

    /// Pods that died with an instance stopped without notice (nothing could drain
    /// them).
    pub fn killed_pods(&self) -> Vec<String> {
        lock(&self.observed).seen.killed_pods.clone()
    }

    /// (instance, when) of every stop without notice.
    pub fn stops(&self) -> Vec<(String, i64)> {
        lock(&self.observed).seen.stops.clone()
    }

    /// Pods found bound to a node that no longer existed (a node deleted under them).
    pub fn orphaned_pods(&self) -> Vec<String> {
        lock(&self.observed).seen.orphaned_pods.clone()
    }

    /// Every instance ever launched, with its price and how long it ran.
    pub fn lifetimes(&self) -> Vec<Lifetime> {
        lock(&self.observed)
            .seen
            .lifetimes
            .values()
            .cloned()
            .collect()
    }

    /// Every claim disrupted so far and how far it got.
    pub fn disruptions(&self) -> Vec<Disrupted> {
        lock(&self.observed)
            .seen
            .disrupted
            .values()
            .cloned()
            .collect()
    }

    /// Launches whose pods all had capacity when they were made.
    pub fn unneeded_launches(&self) -> Vec<UnneededLaunch> {
        lock(&self.observed).seen.unneeded.clone()
    }

    /// The world's own events (EC2 taking instances, scaling...), in order.
    pub fn log_entries(&self) -> Vec<(i64, String)> {
        lock(&self.observed).seen.log.clone()
    }

    /// The world's events after the first `seen`.
    pub fn log_since(&self, seen: usize) -> Vec<(i64, String)> {
        lock(&self.observed)
            .seen
            .log
            .get(seen..)
            .map(<[_]>::to_vec)
            .unwrap_or_default()
    }

    /// How many pods were left pending by the last step.
    pub fn pending_pods(&self) -> usize {
        lock(&self.observed).seen.pending
    }

    /// Instances billed as of the last step (pending, running, stopping: not
    /// terminated or stopped) and what they cost per hour together.
    pub fn billed_now(&self) -> (usize, f64) {
        lock(&self.observed).seen.billed
    }
}
