//! New claims for a static NodePool (`spec.replicas`): no pods, the pool's
//! requirements only, each finished as any claim is — every compatible type, cheapest
//! offering first, within the pool's limits, equal prices spread over the zones — as
//! Karpenter builds a static NodeClaim from its NodePool's template.

use crate::resources::Resources;

use super::bins::{Bin, Origin};
use super::ids::IdVec;
use super::{NewClaim, Scheduler, SchedulerInput};

/// Up to `count` claims for the static NodePool `node_pool` of `input` (existing nodes
/// and in-flight claims count against its limits). Fewer when no type can be launched
/// or a limit is reached; none when the pool is not in the input.
pub fn static_claims(input: &SchedulerInput<'_>, node_pool: &str, count: usize) -> Vec<NewClaim> {
    let mut s = Scheduler::new(input);
    let Some(pool) = s.pool_named(node_pool) else {
        return Vec::new();
    };
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        // A new claim's bin holds its node in the pool's usage while it is packed;
        // finishing takes that back before checking each type against the limits.
        let nodes = s.pools[pool].usage.get_milli("nodes");
        s.pools[pool].usage.set_milli("nodes", nodes + 1000);
        let b = s.bins.push(Bin {
            origin: Origin::New(pool),
            reqs: s.pools[pool].reqs.clone(),
            version: 0,
            taints: s.pools[pool].taints.clone(),
            ceiling: Resources::new(),
            used: Resources::new(),
            target: None,
            domains: IdVec::filled(None, s.keys.len()),
            ports: Vec::new(),
            pods: Vec::new(),
        });
        let claim = s.finalize_claim(b, pool, Vec::new());
        if claim.options.is_empty() {
            break;
        }
        out.push(claim);
    }
    out
}
