//! The relaxation order of a pod's preferences. A class first treats every preference as
//! a requirement; when it fits nowhere it drops one step at a time, in Karpenter's
//! order: the next required node-affinity term, preferred pod affinity, preferred pod
//! anti-affinity, preferred node-affinity terms (lightest first), ScheduleAnyway
//! spreads, and finally tolerating PreferNoSchedule taints.

use crate::cluster::{Pod, WhenUnsatisfiable};

use super::Scheduler;

/// One relaxation state of a class.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Relax {
    pub(super) term: usize,
    pub(super) preferred_pod_affinity: bool,
    pub(super) preferred_pod_anti_affinity: bool,
    pub(super) preferred_node_terms: usize,
    pub(super) schedule_anyway: bool,
    pub(super) tolerate_prefer_no_schedule: bool,
}

impl Scheduler<'_> {
    pub(crate) fn ladder(&self, pod: &Pod) -> Vec<Relax> {
        let mut state = Relax {
            term: 0,
            preferred_pod_affinity: !pod.preferred_pod_affinity.is_empty(),
            preferred_pod_anti_affinity: !pod.preferred_pod_anti_affinity.is_empty(),
            preferred_node_terms: pod.preferred_node_terms.len(),
            schedule_anyway: pod
                .topology_spread
                .iter()
                .any(|c| c.when_unsatisfiable == WhenUnsatisfiable::ScheduleAnyway),
            tolerate_prefer_no_schedule: false,
        };
        let mut ladder = vec![state];
        while state.term + 1 < pod.required_node_terms.len() {
            state.term += 1;
            ladder.push(state);
        }
        if state.preferred_pod_affinity {
            state.preferred_pod_affinity = false;
            ladder.push(state);
        }
        if state.preferred_pod_anti_affinity {
            state.preferred_pod_anti_affinity = false;
            ladder.push(state);
        }
        while state.preferred_node_terms > 0 {
            state.preferred_node_terms -= 1;
            ladder.push(state);
        }
        if state.schedule_anyway {
            state.schedule_anyway = false;
            ladder.push(state);
        }
        if self.any_prefer_no_schedule {
            state.tolerate_prefer_no_schedule = true;
            ladder.push(state);
        }
        ladder
    }
}
