//! Topology groups as the scheduler keeps them (see `scheduling::topology` for the
//! counts themselves): registering a group once per distinct constraint, finding the
//! groups that select or are owned by a pod, and counting pods in them — bound pods
//! where they run, placed pods on their bins. While a solve runs every count change is
//! logged so it can be undone.

use crate::cluster::{Pod, WhenUnsatisfiable};
use crate::scheduling::topology::{
    CompiledFilter, DomainCounts, Group, GroupKind, GroupSpec, NodeFilter, TopologyConstraint,
    TopologyKey,
};

use super::Scheduler;
use super::bins::Origin;
use super::domain_keys::domain_key;
use super::ids::{BinId, DomainKeyId, EClassId, GroupId, PodId};
use super::undo::CountChange;

impl Scheduler<'_> {
    pub(crate) fn group(&mut self, spec: GroupSpec) -> GroupId {
        if let Some(&g) = self.group_index.get(&spec) {
            return g;
        }
        let filter = spec.filter.as_ref().map(CompiledFilter::new);
        let (domains, universe) = match domain_key(spec.key) {
            None => (0, Vec::new()),
            Some(k) => {
                let cache_key = (spec.filter.clone(), k);
                let universe = match self.universe_cache.get(&cache_key) {
                    Some(u) => u.clone(),
                    None => {
                        let u = self.universe(filter.as_ref(), k);
                        self.universe_cache.insert(cache_key, u.clone());
                        u
                    }
                };
                (self.keys[k].values.len(), universe)
            }
        };
        let g = self.groups.push(Group {
            filter,
            spec: spec.clone(),
            counts: DomainCounts::new(domains),
            owners: DomainCounts::new(domains),
            universe,
        });
        self.group_index.insert(spec, g);
        self.index_group(g);
        g
    }

    /// Files group `g` in the selection and ownership indexes.
    pub(super) fn index_group(&mut self, g: GroupId) {
        let spec = &self.groups[g].spec;
        if let Some(selector) = &spec.selector {
            match selector.match_labels.iter().next() {
                Some((k, v)) => self
                    .select_index
                    .entry(k.clone())
                    .or_default()
                    .entry(v.clone())
                    .or_default()
                    .push(g),
                None => self.select_scan.push(g),
            }
        }
        if spec.kind == GroupKind::AntiAffinity && spec.required {
            let key = (self.key_label(spec.key).to_string(), spec.selector.clone());
            self.owner_index.entry(key).or_default().push(g);
        }
    }

    /// The groups that select `pod`, in index order.
    pub(crate) fn groups_selecting(&self, pod: &Pod) -> Vec<GroupId> {
        let mut gs: Vec<GroupId> = self.select_scan.clone();
        for (k, v) in &pod.labels {
            if let Some(list) = self
                .select_index
                .get(k.as_str())
                .and_then(|m| m.get(v.as_str()))
            {
                gs.extend_from_slice(list);
            }
        }
        gs.retain(|&g| self.groups[g].spec.selects(&pod.namespace, &pod.labels));
        gs.sort_unstable();
        gs.dedup();
        gs
    }

    /// The required anti-affinity groups `pod` owns through its own terms (same key and
    /// selector), in index order.
    pub(crate) fn groups_owned(&self, pod: &Pod) -> Vec<GroupId> {
        let mut gs: Vec<GroupId> = Vec::new();
        for t in &pod.pod_anti_affinity {
            if let Some(list) = self
                .owner_index
                .get(&(t.topology_key.clone(), t.label_selector.clone()))
            {
                gs.extend_from_slice(list);
            }
        }
        gs.sort_unstable();
        gs.dedup();
        gs
    }

    /// Counts pod `p`, bound to input node `n`, in the groups from `from_group` on that
    /// select it or that it owns (`delta` -1 takes it out again). Pods on nodes that are
    /// not bins (not Ready yet) count as "elsewhere" for hostname: nothing can be placed
    /// next to them now.
    pub(crate) fn count_on_node(&mut self, p: PodId, n: usize, delta: i32, from_group: GroupId) {
        let pod = self.pod(p);
        let selecting = self.groups_selecting(pod);
        let owned = self.groups_owned(pod);
        self.count_listed(n, delta, &selecting, &owned, from_group);
    }

    /// `count_on_node` for a pod whose selecting and owned groups are known (sorted).
    pub(crate) fn count_listed(
        &mut self,
        n: usize,
        delta: i32,
        selecting: &[GroupId],
        owned: &[GroupId],
        from_group: GroupId,
    ) {
        let node = &self.input.nodes[n];
        // Hostname domains are bins.
        let host = self.node_bin[n].map(BinId::index);
        let mut gs: Vec<GroupId> = selecting
            .iter()
            .chain(owned)
            .copied()
            .filter(|&g| g >= from_group)
            .collect();
        gs.sort_unstable();
        gs.dedup();
        for g in gs {
            if self.groups[g]
                .filter
                .as_ref()
                .is_some_and(|f| !f.matches_node(&node.labels, &node.taints))
            {
                continue;
            }
            let key = self.groups[g].spec.key;
            let domain = match domain_key(key) {
                None => host,
                Some(k) => node
                    .labels
                    .get(&self.keys[k].label)
                    .and_then(|v| self.keys[k].domain(v))
                    .map(|d| d.index()),
            };
            let selects = selecting.binary_search(&g).is_ok();
            let owns = owned.binary_search(&g).is_ok();
            for (hit, owners) in [(selects, false), (owns, true)] {
                if !hit {
                    continue;
                }
                match domain {
                    Some(d) => self.add_count(g, owners, key, Some(d), delta),
                    None if key == TopologyKey::Hostname => {
                        self.add_count(g, owners, key, None, delta)
                    }
                    None => {}
                }
            }
        }
    }

    /// Counts a pod of class `e` on bin `b` in `domain` of `key` (the bin's index for
    /// hostname, as [`DomainCounts`] takes it): in every group that selects it (and whose
    /// node filter admits the bin), and as an owner in its own required anti-affinity
    /// groups.
    pub(super) fn count_pod(&mut self, e: EClassId, b: BinId, key: TopologyKey, domain: usize) {
        let class = self.eclasses[e].class;
        for i in 0..self.classes[class].matched.len() {
            let g = self.classes[class].matched[i];
            if self.groups[g].spec.key != key {
                continue;
            }
            if let Some(filter) = &self.groups[g].filter {
                let bin = &self.bins[b];
                let admitted = match bin.origin {
                    Origin::New(_) => filter.matches_requirements(&bin.reqs, &bin.taints, &|k| {
                        self.well_known.contains(k)
                    }),
                    _ => filter.matches_requirements(&bin.reqs, &bin.taints, &|_| false),
                };
                if !admitted {
                    continue;
                }
            }
            self.add_count(g, false, key, Some(domain), 1);
        }
        for i in 0..self.eclasses[e].anti.len() {
            let g = self.eclasses[e].anti[i];
            if self.groups[g].spec.key == key && self.groups[g].spec.required {
                self.add_count(g, true, key, Some(domain), 1);
            }
        }
    }

    /// Changes one count (logged while a solve runs, so it can be undone).
    pub(crate) fn add_count(
        &mut self,
        group: GroupId,
        owners: bool,
        key: TopologyKey,
        domain: Option<usize>,
        delta: i32,
    ) {
        let group_ref = &mut self.groups[group];
        let dc = if owners {
            &mut group_ref.owners
        } else {
            &mut group_ref.counts
        };
        match domain {
            Some(d) => dc.add(key, d, delta),
            None => {
                debug_assert!(delta > 0 || dc.other_hosts > 0);
                dc.other_hosts = dc.other_hosts.saturating_add_signed(delta);
            }
        }
        if let Some(u) = &mut self.undo {
            u.counts.push(CountChange {
                group,
                owners,
                key,
                domain,
                delta,
            });
        }
    }

    /// The domains of key `k` a node counted by the group could be in: what the
    /// NodePools can launch (those whose taints the filter admits) and what existing
    /// nodes it matches are in.
    pub(super) fn universe(&self, filter: Option<&CompiledFilter>, k: DomainKeyId) -> Vec<bool> {
        let key = &self.keys[k];
        let mut universe = vec![false; key.values.len()];
        for (p, pool) in self.pools.enumerate() {
            if filter.is_some_and(|f| !f.tolerates(&pool.taints)) {
                continue;
            }
            for (d, ok) in key.pool_values[p].enumerate() {
                universe[d.index()] |= *ok;
            }
        }
        for node in self.input.nodes {
            if filter.is_some_and(|f| !f.matches_node(&node.labels, &node.taints)) {
                continue;
            }
            if let Some(d) = node.labels.get(&key.label).and_then(|v| key.domain(v)) {
                universe[d.index()] = true;
            }
        }
        universe
    }

    /// Group `g`'s constraint as reasons name it.
    pub(super) fn group_constraint(&self, g: GroupId) -> TopologyConstraint {
        let spec = &self.groups[g].spec;
        spec.constraint(self.key_label(spec.key))
    }

    pub(super) fn term_namespaces(pod: &Pod, namespaces: &[String]) -> Vec<String> {
        if namespaces.is_empty() {
            vec![pod.namespace.clone()]
        } else {
            namespaces.to_vec()
        }
    }

    /// Which nodes a spread constraint of `pod` counts; `None` when every node does.
    /// Node affinity is the pod's own: its volumes' zones limit where it goes, not the
    /// domains counted (kube-scheduler's and Karpenter's reading).
    pub(super) fn spread_filter(
        pod: &Pod,
        c: &crate::cluster::TopologySpreadConstraint,
    ) -> Option<NodeFilter> {
        let mut filter = NodeFilter::default();
        if c.honor_node_affinity {
            filter.node_selector = (*pod.node_selector).clone();
            filter.required_terms = pod
                .own_node_terms
                .as_ref()
                .unwrap_or(&pod.required_node_terms)
                .clone();
        }
        if c.honor_node_taints {
            filter.tolerations = Some((*pod.tolerations).clone());
        }
        (filter != NodeFilter::default()).then_some(filter)
    }

    /// The groups of a pod's constraints: [spreads, affinity, anti-affinity]; with
    /// `all`, preferred terms and ScheduleAnyway spreads included.
    pub(crate) fn group_specs(&mut self, pod: &Pod, all: bool) -> [Vec<GroupSpec>; 3] {
        let mut spreads = Vec::new();
        for c in &pod.topology_spread {
            if c.when_unsatisfiable == WhenUnsatisfiable::ScheduleAnyway && !all {
                continue;
            }
            spreads.push(GroupSpec {
                kind: GroupKind::Spread {
                    max_skew: c.max_skew.max(1),
                    min_domains: c.min_domains.unwrap_or(1),
                },
                key: self.topology_key(&c.topology_key),
                selector: c.label_selector.clone(),
                namespaces: vec![pod.namespace.clone()],
                filter: Self::spread_filter(pod, c),
                required: false,
            });
        }
        let mut terms = |required: &[crate::cluster::PodAffinityTerm],
                         preferred: &[crate::cluster::WeightedPodAffinityTerm],
                         kind: GroupKind| {
            let preferred = preferred.iter().filter(|_| all).map(|w| (&w.term, false));
            required
                .iter()
                .map(|t| (t, true))
                .chain(preferred)
                .map(|(t, required)| GroupSpec {
                    kind,
                    key: self.topology_key(&t.topology_key),
                    selector: t.label_selector.clone(),
                    namespaces: Self::term_namespaces(pod, &t.namespaces),
                    filter: None,
                    // Only anti-affinity tells required from preferred (symmetry);
                    // affinity groups count the same pods either way.
                    required: required && kind == GroupKind::AntiAffinity,
                })
                .collect::<Vec<_>>()
        };
        let affinity = terms(
            &pod.pod_affinity,
            &pod.preferred_pod_affinity,
            GroupKind::Affinity,
        );
        let anti = terms(
            &pod.pod_anti_affinity,
            &pod.preferred_pod_anti_affinity,
            GroupKind::AntiAffinity,
        );
        [spreads, affinity, anti]
    }
}
