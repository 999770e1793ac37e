//! PodDisruptionBudgets as the disruption controller counts them, checked after every
//! round in which pods went: the fake API server refuses the evictions a budget does
//! not allow; this catches a budget broken any other way.

use nodewright_core::cluster::PodDisruptionBudget;
use nodewright_kube::fake::Store;

use super::read::{self, PodObject};
use super::{GoneBy, PodLife, Record};

/// After pods went (and were recreated, pending): each budget that selected one of
/// them, bound when it went, must still have as many healthy pods as it requires.
///
/// Checking once per round is enough to catch every instant: between two rounds only
/// nodewright acts on pods, and it only takes them away (evicts, deletes) — it never
/// creates or binds one — so the healthy count between rounds only falls, and its
/// lowest point is what this round sees.
///
/// expected = the selected pods, pending replacements included (the Deployment's
/// replicas); desired = minAvailable (a percentage of expected, rounded up), or
/// expected − maxUnavailable (rounded up), or expected when neither is set.
pub(super) fn check_budgets(store: &Store, record: &mut Record, gone: &[String]) {
    if gone.is_empty() {
        return;
    }
    let budgets = read::budgets(store, &mut record.errors);
    let pods = read::pods(store, &mut record.errors);
    let gone: Vec<&PodLife> = gone.iter().filter_map(|u| record.pods.get(u)).collect();
    let mut found = Vec::new();
    for budget in &budgets {
        let went: Vec<String> = gone
            .iter()
            .filter(|l| l.node.is_some() && budget.selects(&l.template.pod))
            .map(|l| format!("{} ({})", l.key, why(l)))
            .collect();
        if went.is_empty() {
            continue;
        }
        let (healthy, expected, desired) = count(budget, &pods);
        if healthy < desired {
            found.push(format!(
                "PodDisruptionBudget {}/{}: {healthy} healthy of {expected}, {desired} required, after {}",
                budget.namespace,
                budget.name,
                went.join(", ")
            ));
        }
    }
    record.violations.extend(found);
}

/// (healthy, expected, desired) for `budget` over the pods now.
fn count(budget: &PodDisruptionBudget, pods: &[PodObject]) -> (i64, i64, i64) {
    let selected: Vec<&PodObject> = pods
        .iter()
        .filter(|p| !p.pod.terminal && budget.selects(&p.pod))
        .collect();
    let expected = selected.len() as i64;
    let healthy = selected.iter().filter(|p| p.healthy()).count() as i64;
    let desired = match (&budget.min_available, &budget.max_unavailable) {
        (Some(min), _) => min.scaled_up(expected),
        (None, Some(max)) => expected - max.scaled_up(expected),
        (None, None) => expected,
    };
    (healthy, expected, desired)
}

fn why(life: &PodLife) -> String {
    match &life.gone {
        Some((_, GoneBy::Api)) => "evicted or deleted".to_string(),
        Some((_, GoneBy::ScaledDown)) => "scaled down".to_string(),
        Some((_, GoneBy::InstanceLost(i))) => format!("lost with instance {i}"),
        Some((_, GoneBy::NodeDeleted(n))) => format!("lost with node {n}"),
        None => String::new(),
    }
}
