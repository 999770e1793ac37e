//! The simulated kube-scheduler: where a pending pod may be bound now, and where it
//! goes. Filters as kube-scheduler's: the node is Ready and schedulable; its
//! NoSchedule/NoExecute taints are tolerated; node selector and required node affinity
//! match; the requests fit what the pods bound there leave; `DoNotSchedule` topology
//! spread keeps its skew (domains are the nodes that match the pod's node affinity,
//! with `nodeTaintsPolicy: Ignore`, Kubernetes' default); required pod affinity and
//! anti-affinity hold, including other pods' anti-affinity towards this one. Among the
//! nodes left, the least allocated wins, as the default scoring prefers ([`Scoring`]:
//! by free cpu in the simulator; by free shares of cpu and memory, kube-scheduler's
//! NodeResourcesFit LeastAllocated, on request). The functions' end-to-end tests bind
//! with the real kube-scheduler instead. Preferences (preferred affinity,
//! `ScheduleAnyway`) only score in kube-scheduler and are not modelled.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};

use nodewright_core::api::model::{NodeRequirement, TaintEffect};
use nodewright_core::cluster::{LabelSelector, Node, Pod, PodAffinityTerm, WhenUnsatisfiable};
use nodewright_core::resources::Resources;
use nodewright_core::scheduling::requirements::Requirements;
use nodewright_core::share::Shared;

use nodewright_engine::ports::ClusterState;

/// How the binder picks among the nodes a pod may go to; ties go to the first node by
/// name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scoring {
    /// The most free cpu: the simulator's (its bundled runs are measured with it).
    MostFreeCpu,
    /// kube-scheduler's default (NodeResourcesFit LeastAllocated, cpu and memory
    /// weighted alike): the largest free share of allocatable cpu plus free share of
    /// allocatable memory (a resource the node does not allocate counts no share).
    LeastAllocated,
}

/// The cluster as the scheduler's cache holds it, updated as it binds. It borrows the
/// nodes and bound pods it starts from (each step with pods pending makes one) and owns
/// only the pods it places.
pub struct Binder<'a> {
    scoring: Scoring,
    nodes: &'a [Node],
    /// Room left on each node (allocatable less the requests of the pods bound there).
    free: Vec<Resources>,
    /// The live pods bound to each node.
    pods: Vec<Vec<Cow<'a, Pod>>>,
    /// The nodes running a pod with required anti-affinity, in order: the only pods
    /// that can repel another, so the check for it does not scan every pod (which
    /// made binding quadratic in the pods at cluster sizes of 30,000).
    repelling: Vec<usize>,
    /// The `DoNotSchedule` spread counts asked for so far, kept up to date as pods are
    /// placed: the replicas of one workload ask the same question, and counting the
    /// bound pods afresh for each of them made binding a rollout's evicted pods cost
    /// pods × bound pods.
    spread_counts: Vec<SpreadCount>,
    /// Where in `spread_counts` the counts of a (namespace, topology key, selector)
    /// are (one per node affinity asking).
    spread_index: HashMap<(String, String, LabelSelector), Vec<usize>>,
    /// The counts of each namespace's pods: those a placed pod may add to.
    spread_namespaces: HashMap<String, Vec<usize>>,
    /// The bound pods by label, built when the first count is made: a count reads the
    /// pods its selector's first label names instead of every bound pod.
    by_label: Option<LabelIndex>,
}

/// Bound pods, (node, place in `Binder::pods[node]`), under a hash of each of their
/// labels' key and value. A collision only adds candidates the selector then rejects;
/// a pod is listed once under each distinct hash of its labels.
type LabelIndex = HashMap<u64, Vec<(usize, usize)>>;

fn label_hash(key: &str, value: &str) -> u64 {
    let mut hasher = std::hash::DefaultHasher::new();
    key.hash(&mut hasher);
    value.hash(&mut hasher);
    hasher.finish()
}

fn index_labels(index: &mut LabelIndex, pod: &Pod, at: (usize, usize)) {
    let mut hashes: Vec<u64> = pod.labels.iter().map(|(k, v)| label_hash(k, v)).collect();
    hashes.sort_unstable();
    hashes.dedup();
    for hash in hashes {
        index.entry(hash).or_default().push(at);
    }
}

/// The pods a spread constraint's selector matches, per domain, over the nodes the
/// asking pod's node affinity matches (a domain with none counts 0): what
/// kube-scheduler's PodTopologySpread filter counts for that pod.
struct SpreadCount {
    topology_key: String,
    selector: LabelSelector,
    node_selector: Shared<BTreeMap<String, String>>,
    required_node_terms: Shared<Vec<Vec<NodeRequirement>>>,
    counts: HashMap<String, u32>,
}

impl SpreadCount {
    /// Counts `pod` (of the count's namespace), just bound to `node`, where the
    /// constraint counts it.
    fn count(&mut self, pod: &Pod, node: &Node) {
        if !self.selector.matches(&pod.labels) {
            return;
        }
        let Some(value) = node.labels.get(&self.topology_key) else {
            return;
        };
        if node_affinity_matches(&self.node_selector, &self.required_node_terms, node) {
            *self.counts.entry(value.clone()).or_default() += 1;
        }
    }
}

impl<'a> Binder<'a> {
    /// The simulator's binder over `state` ([`Scoring::MostFreeCpu`]).
    pub fn new(state: &'a ClusterState) -> Binder<'a> {
        Binder::over(&state.nodes, &state.pods, Scoring::MostFreeCpu)
    }

    /// A binder over these nodes and the pods bound to them (other pods are ignored).
    pub fn over(nodes: &'a [Node], all_pods: &'a [Pod], scoring: Scoring) -> Binder<'a> {
        let index: HashMap<&str, usize> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.as_str(), i))
            .collect();
        let mut free: Vec<Resources> = nodes.iter().map(|n| n.allocatable.clone()).collect();
        let mut pods: Vec<Vec<Cow<'a, Pod>>> = vec![Vec::new(); nodes.len()];
        for p in all_pods.iter().filter(|p| !p.terminal) {
            let Some(&i) = p.node_name.as_deref().and_then(|n| index.get(n)) else {
                continue;
            };
            free[i].sub(&p.requests);
            if !p.terminating {
                pods[i].push(Cow::Borrowed(p));
            }
        }
        let repelling = (0..pods.len())
            .filter(|&i| pods[i].iter().any(|p| !p.pod_anti_affinity.is_empty()))
            .collect();
        Binder {
            scoring,
            nodes,
            free,
            pods,
            repelling,
            spread_counts: Vec::new(),
            spread_index: HashMap::new(),
            spread_namespaces: HashMap::new(),
            by_label: None,
        }
    }

    /// Where in `spread_counts` the count `pod`'s constraint asks for is, counted now
    /// if no pod asked it before.
    fn spread_count(&mut self, pod: &Pod, topology_key: &str, selector: &LabelSelector) -> usize {
        let key = (
            pod.namespace.clone(),
            topology_key.to_string(),
            selector.clone(),
        );
        let same_affinity = |s: &SpreadCount| {
            s.node_selector == pod.node_selector && s.required_node_terms == pod.required_node_terms
        };
        if let Some(&at) = self.spread_index.get(&key).and_then(|asked| {
            asked
                .iter()
                .find(|&&at| same_affinity(&self.spread_counts[at]))
        }) {
            return at;
        }
        // Every domain of a node the pod's node affinity matches counts, with or
        // without pods; then each matching pod on such a node adds one.
        let mut counts: HashMap<String, u32> = HashMap::new();
        let mut domains: Vec<Option<&String>> = vec![None; self.nodes.len()];
        for (j, n) in self.nodes.iter().enumerate() {
            if let Some(value) = n.labels.get(topology_key)
                && matches_node_affinity(pod, n)
            {
                counts.entry(value.clone()).or_default();
                domains[j] = Some(value);
            }
        }
        let mut add = |j: usize, p: &Pod| {
            if let Some(value) = domains[j]
                && p.namespace == pod.namespace
                && selector.matches(&p.labels)
            {
                *counts.get_mut(value).expect("counted above") += 1;
            }
        };
        match selector.match_labels.iter().next() {
            Some((key, value)) => {
                let pods = &self.pods;
                let index = self.by_label.get_or_insert_with(|| {
                    let mut index = LabelIndex::new();
                    for (j, bound) in pods.iter().enumerate() {
                        for (i, p) in bound.iter().enumerate() {
                            index_labels(&mut index, p, (j, i));
                        }
                    }
                    index
                });
                for &(j, i) in index.get(&label_hash(key, value)).into_iter().flatten() {
                    add(j, &self.pods[j][i]);
                }
            }
            None => {
                for (j, bound) in self.pods.iter().enumerate() {
                    for p in bound {
                        add(j, p);
                    }
                }
            }
        }
        let at = self.spread_counts.len();
        self.spread_index.entry(key).or_default().push(at);
        self.spread_namespaces
            .entry(pod.namespace.clone())
            .or_default()
            .push(at);
        self.spread_counts.push(SpreadCount {
            topology_key: topology_key.to_string(),
            selector: selector.clone(),
            node_selector: pod.node_selector.clone(),
            required_node_terms: pod.required_node_terms.clone(),
            counts,
        });
        at
    }

    /// The node kube-scheduler would bind `pod` to now, if any; the binding is
    /// counted (room and topology) for the pods placed after it.
    pub fn place(&mut self, pod: &Pod) -> Option<String> {
        let spreads = pod
            .topology_spread
            .iter()
            .filter(|c| c.when_unsatisfiable == WhenUnsatisfiable::DoNotSchedule)
            .filter_map(|c| {
                let selector = c.label_selector.as_ref()?;
                let at = self.spread_count(pod, &c.topology_key, selector);
                let counts = &self.spread_counts[at].counts;
                let mut min = counts.values().copied().min().unwrap_or(0);
                if c.min_domains.is_some_and(|m| (counts.len() as u32) < m) {
                    min = 0;
                }
                Some(Spread {
                    at,
                    min,
                    max_skew: c.max_skew,
                    self_match: u32::from(selector.matches(&pod.labels)),
                })
            })
            .collect();
        let others = OtherPods::around(self, pod, spreads);
        let best = (0..self.nodes.len())
            .filter(|&i| self.allows(pod, &others, i))
            .max_by(|&a, &b| {
                self.score(a)
                    .total_cmp(&self.score(b))
                    .then_with(|| self.nodes[b].name.cmp(&self.nodes[a].name))
            })?;
        self.free[best].sub(&pod.requests);
        for &at in self
            .spread_namespaces
            .get(&pod.namespace)
            .into_iter()
            .flatten()
        {
            self.spread_counts[at].count(pod, &self.nodes[best]);
        }
        let mut bound = pod.clone();
        bound.node_name = Some(self.nodes[best].name.clone());
        self.pods[best].push(Cow::Owned(bound));
        if let Some(index) = &mut self.by_label {
            let at = (best, self.pods[best].len() - 1);
            index_labels(index, &self.pods[best][at.1], at);
        }
        if !pod.pod_anti_affinity.is_empty()
            && let Err(at) = self.repelling.binary_search(&best)
        {
            self.repelling.insert(at, best);
        }
        Some(self.nodes[best].name.clone())
    }

    /// How much node `i` is preferred (higher is better), as [`Scoring`] says.
    fn score(&self, i: usize) -> f64 {
        let free = |resource: &str| self.free[i].get_milli(resource);
        match self.scoring {
            Scoring::MostFreeCpu => free("cpu") as f64,
            Scoring::LeastAllocated => {
                let share = |resource: &str| {
                    let total = self.nodes[i].allocatable.get_milli(resource);
                    if total == 0 {
                        0.0
                    } else {
                        free(resource) as f64 / total as f64
                    }
                };
                share("cpu") + share("memory")
            }
        }
    }

    fn allows(&self, pod: &Pod, others: &OtherPods, i: usize) -> bool {
        let node = &self.nodes[i];
        node.ready
            && !node.unschedulable
            && fits(pod, node)
            && pod.requests.fits_in(&self.free[i])
            && others.allow(node, &self.spread_counts)
    }
}

/// What the pods already bound say about where `pod` may go, gathered once per pod
/// (one pass over the bound pods) rather than once per node it is tried on, which
/// made a placement cost nodes × pods.
struct OtherPods {
    /// `DoNotSchedule` spread: per constraint, its count (the matching pods per
    /// domain), the least populated domain's count, and what the pod adds (1 if the
    /// selector matches itself).
    spreads: Vec<Spread>,
    /// The pod's required anti-affinity: per term, its key and the domains where a
    /// pod it selects runs.
    avoid: Vec<(String, HashSet<String>)>,
    /// The pod's required affinity: per term, its key, the domains where a pod it
    /// selects runs, and whether it may go anywhere (no such pod runs anywhere and the
    /// term selects the pod itself: the first pod of a group).
    join: Vec<(String, HashSet<String>, bool)>,
    /// (key, domain) pairs where a bound pod's required anti-affinity selects `pod`.
    repelled: Vec<(String, String)>,
}

struct Spread {
    /// Where its count is in the binder's `spread_counts`.
    at: usize,
    min: u32,
    max_skew: u32,
    self_match: u32,
}

impl OtherPods {
    fn around(binder: &Binder, pod: &Pod, spreads: Vec<Spread>) -> OtherPods {
        let domain_of = |j: usize, key: &str| binder.nodes[j].labels.get(key).cloned();
        let domains_selected = |term: &PodAffinityTerm| -> (HashSet<String>, bool) {
            let mut domains = HashSet::new();
            let mut anywhere = false;
            for (j, pods) in binder.pods.iter().enumerate() {
                if pods.iter().any(|p| term_selects(term, pod, p)) {
                    anywhere = true;
                    if let Some(domain) = domain_of(j, &term.topology_key) {
                        domains.insert(domain);
                    }
                }
            }
            (domains, anywhere)
        };
        let avoid = pod
            .pod_anti_affinity
            .iter()
            .map(|t| (t.topology_key.clone(), domains_selected(t).0))
            .collect();
        let join = pod
            .pod_affinity
            .iter()
            .map(|t| {
                let (domains, anywhere) = domains_selected(t);
                let first = !anywhere && term_selects(t, pod, pod);
                (t.topology_key.clone(), domains, first)
            })
            .collect();
        let mut repelled: Vec<(String, String)> = Vec::new();
        for &j in &binder.repelling {
            for other in &binder.pods[j] {
                for term in &other.pod_anti_affinity {
                    if term_selects(term, other, pod)
                        && let Some(domain) = domain_of(j, &term.topology_key)
                    {
                        let pair = (term.topology_key.clone(), domain);
                        if !repelled.contains(&pair) {
                            repelled.push(pair);
                        }
                    }
                }
            }
        }
        OtherPods {
            spreads,
            avoid,
            join,
            repelled,
        }
    }

    /// Whether the bound pods let the pod onto `node`: spread skew, its affinity and
    /// anti-affinity, and the anti-affinity of the pods there towards it.
    fn allow(&self, node: &Node, spread_counts: &[SpreadCount]) -> bool {
        let domain = |key: &str| node.labels.get(key);
        self.spreads.iter().all(|s| {
            let count = &spread_counts[s.at];
            domain(&count.topology_key).is_some_and(|d| {
                count.counts.get(d).copied().unwrap_or(0) + s.self_match <= s.min + s.max_skew
            })
        }) && self
            .join
            .iter()
            .all(|(key, domains, first)| domain(key).is_some_and(|d| *first || domains.contains(d)))
            && self
                .avoid
                .iter()
                .all(|(key, domains)| domain(key).is_none_or(|d| !domains.contains(d)))
            && !self.repelled.iter().any(|(key, d)| domain(key) == Some(d))
    }
}

/// Whether `term`, written in `owner`'s pod spec, selects `candidate`.
fn term_selects(term: &PodAffinityTerm, owner: &Pod, candidate: &Pod) -> bool {
    let namespace_ok = if term.namespaces.is_empty() {
        candidate.namespace == owner.namespace
    } else {
        term.namespaces.contains(&candidate.namespace)
    };
    namespace_ok
        && term
            .label_selector
            .as_ref()
            .is_some_and(|s: &LabelSelector| s.matches(&candidate.labels))
}

fn matches_node_affinity(pod: &Pod, node: &Node) -> bool {
    node_affinity_matches(&pod.node_selector, &pod.required_node_terms, node)
}

/// Whether a node selector and required node affinity terms match `node`.
fn node_affinity_matches(
    node_selector: &BTreeMap<String, String>,
    required_node_terms: &[Vec<NodeRequirement>],
    node: &Node,
) -> bool {
    let selected = node_selector
        .iter()
        .all(|(k, v)| node.labels.get(k) == Some(v));
    selected
        && (required_node_terms.is_empty()
            || required_node_terms.iter().any(|term| {
                Requirements::from_node_requirements(term).matches_labels(&node.labels)
            }))
}

/// Whether kube-scheduler's filters let `pod` onto `node` (resources and other pods
/// aside): taints, node selector, required node affinity.
pub fn fits(pod: &Pod, node: &Node) -> bool {
    let tolerated = node
        .taints
        .iter()
        .filter(|t| matches!(t.effect, TaintEffect::NoSchedule | TaintEffect::NoExecute))
        .all(|t| pod.tolerations.iter().any(|tol| tol.tolerates(t)));
    tolerated && matches_node_affinity(pod, node)
}

/// Pods (namespace/name) of `state` that are pending.
pub fn pending_keys(state: &ClusterState) -> HashSet<String> {
    state
        .pods
        .iter()
        .filter(|p| p.is_pending())
        .map(|p| p.key())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_core::catalog::Catalog;
    use nodewright_core::testing::{affinity_term, node, pod, spread};

    fn cluster(zones: &[&str]) -> ClusterState {
        let catalog = Catalog::embedded();
        ClusterState {
            nodes: zones
                .iter()
                .enumerate()
                .map(|(i, z)| node(&format!("n{i}"), "m5.xlarge", z, "default", catalog))
                .collect(),
            ..ClusterState::default()
        }
    }

    fn app(name: &str, app: &str) -> Pod {
        let mut p = pod(name, "100m", "128Mi");
        p.labels.insert("app".into(), app.into());
        p
    }

    #[test]
    fn pods_go_to_the_least_allocated_node_that_has_room() {
        let state = cluster(&["us-east-1a", "us-east-1b"]);
        let mut binder = Binder::new(&state);
        let first = binder.place(&pod("a", "2", "1Gi")).unwrap();
        let second = binder.place(&pod("b", "2", "1Gi")).unwrap();
        assert_ne!(first, second);
        assert!(binder.place(&pod("huge", "64", "1Gi")).is_none());
    }

    #[test]
    fn least_allocated_weighs_memory_as_cpu_where_the_simulator_counts_cpu_only() {
        let mut state = cluster(&["us-east-1a", "us-east-1a"]);
        let bound = |name: &str, cpu: &str, memory: &str, node: &str| {
            let mut p = pod(name, cpu, memory);
            p.node_name = Some(node.into());
            p
        };
        state.pods = vec![
            bound("memory-hungry", "100m", "12Gi", "n0"),
            bound("cpu-hungry", "1", "128Mi", "n1"),
        ];
        let next = pod("next", "100m", "128Mi");
        assert_eq!(Binder::new(&state).place(&next).as_deref(), Some("n0"));
        let mut least_allocated = Binder::over(&state.nodes, &state.pods, Scoring::LeastAllocated);
        assert_eq!(least_allocated.place(&next).as_deref(), Some("n1"));
    }

    #[test]
    fn zone_spread_keeps_its_skew_among_the_zones_nodes_exist_in() {
        let state = cluster(&["us-east-1a", "us-east-1b"]);
        let mut binder = Binder::new(&state);
        let mut spread_pod = |name: &str| {
            let mut p = app(name, "web");
            p.topology_spread
                .push(spread("topology.kubernetes.io/zone", "web"));
            binder.place(&p)
        };
        let a = spread_pod("w0").unwrap();
        let b = spread_pod("w1").unwrap();
        assert_ne!(a, b, "one per zone before a second in either");
    }

    #[test]
    fn a_spread_counts_each_pod_placed_before_it_that_its_selector_matches() {
        // Two nodes in us-east-1a and one in us-east-1b: by free cpu alone every pod
        // would go to an a node first; maxSkew 1 sends every other web pod to b.
        let state = cluster(&["us-east-1a", "us-east-1a", "us-east-1b"]);
        let zone_of = |node: &str| {
            state.nodes.iter().find(|n| n.name == node).unwrap().labels
                ["topology.kubernetes.io/zone"]
                .clone()
        };
        let mut binder = Binder::new(&state);
        let mut place = |name: &str, app_label: &str, spread_over: bool| {
            let mut p = app(name, app_label);
            if spread_over {
                p.topology_spread
                    .push(spread("topology.kubernetes.io/zone", app_label));
            }
            zone_of(&binder.place(&p).unwrap())
        };
        let zones = [
            place("w0", "web", true),
            // Not selected by the web pods' spread: it counts in no zone of theirs.
            place("api0", "api", false),
            place("w1", "web", true),
            place("w2", "web", true),
            place("w3", "web", true),
            // The first api pod to spread: its count, made now, finds api0 in 1a.
            place("api1", "api", true),
        ];
        assert_eq!(
            zones,
            [
                "us-east-1a",
                "us-east-1a",
                "us-east-1b",
                "us-east-1a",
                "us-east-1b",
                "us-east-1b"
            ]
        );
    }

    #[test]
    fn required_anti_affinity_keeps_a_second_replica_off_the_host_and_is_symmetric() {
        let state = cluster(&["us-east-1a"]);
        let mut binder = Binder::new(&state);
        let mut first = app("db-0", "db");
        first
            .pod_anti_affinity
            .push(affinity_term("kubernetes.io/hostname", "db"));
        assert!(binder.place(&first).is_some());
        let mut second = app("db-1", "db");
        second
            .pod_anti_affinity
            .push(affinity_term("kubernetes.io/hostname", "db"));
        assert!(binder.place(&second).is_none());
        assert!(
            binder.place(&app("db-plain", "db")).is_none(),
            "the first replica's anti-affinity repels it"
        );
        assert!(binder.place(&app("web-0", "web")).is_some());
    }

    #[test]
    fn required_pod_affinity_lets_the_first_pod_anywhere_and_the_rest_beside_it() {
        let state = cluster(&["us-east-1a", "us-east-1b"]);
        let mut binder = Binder::new(&state);
        let with_affinity = |name: &str| {
            let mut p = app(name, "cache");
            p.pod_affinity
                .push(affinity_term("topology.kubernetes.io/zone", "cache"));
            p
        };
        let first = binder.place(&with_affinity("c0")).unwrap();
        let second = binder.place(&with_affinity("c1")).unwrap();
        assert_eq!(first, second, "same zone (one node per zone here)");
    }
}
