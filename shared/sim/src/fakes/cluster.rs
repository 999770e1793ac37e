//! FakeCluster: the Kubernetes API in memory, with a kubelet and a binder for tests.

use super::*;
use nodewright_core::cluster::{ConditionStatus, NodeCondition, PodFields};
use nodewright_engine::ports::MirrorReport;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ClusterOp {
    State,
    Pods,
    PatchNode,
    RecordEvent,
    KubernetesVersion,
    PodsOnNode,
    EvictPod,
    DeletePod,
    DeleteNode,
    UpdateStatus,
    MirrorClaims,
}

/// The errors a Kubernetes API call answers when it fails at random (`inject_faults`):
/// 429 Too Many Requests (Throttled), 500 and timeouts (Unavailable).
fn injectable(_op: ClusterOp) -> &'static [ErrorKind] {
    &[ErrorKind::Throttled, ErrorKind::Unavailable]
}

/// A condition as the fake stores it: what the engine set, and when its status last
/// changed (Unix seconds, the `now` of the update that changed it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCondition {
    pub condition: Condition,
    pub last_transition_time: i64,
}

/// The `status` of a NodePool or EC2NodeClass as written through `update_status`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ObjectStatus {
    /// Sorted by type, as Karpenter keeps them.
    pub conditions: Vec<StoredCondition>,
    pub fields: serde_json::Map<String, serde_json::Value>,
}

impl ObjectStatus {
    pub fn condition(&self, type_: &str) -> Option<&StoredCondition> {
        self.conditions.iter().find(|c| c.condition.type_ == type_)
    }

    /// `update` applied at `now` (the port's merge rules); `None` when it changes nothing.
    fn updated(&self, update: &StatusUpdate, now: i64) -> Option<ObjectStatus> {
        let mut next = self.clone();
        for wanted in &update.conditions {
            match next
                .conditions
                .iter_mut()
                .find(|c| c.condition.type_ == wanted.type_)
            {
                Some(stored) => {
                    if stored.condition.status != wanted.status {
                        stored.last_transition_time = now;
                    }
                    stored.condition = wanted.clone();
                }
                None => next.conditions.push(StoredCondition {
                    condition: wanted.clone(),
                    last_transition_time: now,
                }),
            }
        }
        next.conditions
            .sort_by(|a, b| a.condition.type_.cmp(&b.condition.type_));
        for (key, value) in &update.fields {
            if value.is_null() {
                next.fields.remove(key);
            } else {
                next.fields.insert(key.clone(), value.clone());
            }
        }
        (next != *self).then_some(next)
    }
}

type PodKey = (String, String);

/// Where each pod sits in `state.pods`, and which pods each node holds: evictions at
/// the scale of the interruption benchmark (45,000 pods) must not scan the list.
/// Rebuilt lazily after any change made behind its back (`with_state`, `add_pod`...).
#[derive(Default)]
struct PodIndex {
    by_key: HashMap<PodKey, usize>,
    by_node: HashMap<String, HashSet<PodKey>>,
    /// Node name → position in `state.nodes`.
    nodes: HashMap<String, usize>,
}

impl PodIndex {
    fn build(state: &ClusterState) -> Self {
        let mut index = PodIndex::default();
        for (i, p) in state.pods.iter().enumerate() {
            index.insert(p, i);
        }
        index.nodes = state
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), i))
            .collect();
        index
    }
    fn insert(&mut self, p: &Pod, i: usize) {
        let key = (p.namespace.clone(), p.name.clone());
        if let Some(node) = &p.node_name {
            self.by_node
                .entry(node.clone())
                .or_default()
                .insert(key.clone());
        }
        self.by_key.insert(key, i);
    }
}

struct ClusterInner {
    state: ClusterState,
    events: Vec<ClusterEvent>,
    statuses: BTreeMap<(ObjectKind, String), ObjectStatus>,
    /// The claims as last mirrored (`mirror_claims`), by name.
    mirrors: BTreeMap<String, NodeClaim>,
    faults: Faults<ClusterOp, ClusterError>,
    calls: Vec<Call<ClusterOp>>,
    index: Option<PodIndex>,
    /// Pods deleted through `delete_pod`: (namespace/name, grace period seconds).
    pod_deletions: Vec<(String, i64)>,
    /// A workload controller recreates evicted or deleted pods (not DaemonSet pods) as
    /// pending pods with a new name.
    recreate: bool,
    recreated: u64,
    evictions: EvictionCounts,
    /// Moves on with every write to the state ([`FakeCluster::generation`]).
    generation: u64,
}

/// What the eviction subresource answered, by the node the pod ran on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EvictionCounts {
    /// Pods evicted from each node.
    pub evicted: HashMap<String, usize>,
    /// Evictions a PodDisruptionBudget refused (429), per node.
    pub refused_by_budget: HashMap<String, usize>,
}

impl ClusterInner {
    fn index(&mut self) -> &mut PodIndex {
        let state = &self.state;
        self.index.get_or_insert_with(|| PodIndex::build(state))
    }

    fn find_node(&mut self, name: &str) -> Option<usize> {
        self.index().nodes.get(name).copied()
    }

    fn find_pod(&mut self, namespace: &str, name: &str) -> Option<usize> {
        self.index()
            .by_key
            .get(&(namespace.to_string(), name.to_string()))
            .copied()
    }

    /// Removes a pod (order of the others may change: swap-remove), and lets the
    /// controller recreate it when asked to.
    fn remove_pod(&mut self, i: usize) -> Pod {
        self.index();
        let pod = self.state.pods.swap_remove(i);
        let key = (pod.namespace.clone(), pod.name.clone());
        if let Some(index) = self.index.as_mut() {
            index.by_key.remove(&key);
            if let Some(node) = &pod.node_name
                && let Some(set) = index.by_node.get_mut(node)
            {
                set.remove(&key);
            }
            if let Some(moved) = self.state.pods.get(i) {
                index
                    .by_key
                    .insert((moved.namespace.clone(), moved.name.clone()), i);
            }
        }
        if self.recreate && !pod.daemonset_owned {
            self.recreated += 1;
            // This fake has no kube-scheduler loop: the replacement is as kube-scheduler
            // leaves it after a first attempt found no node (the tests that recreate
            // pods are about replacing lost capacity).
            let replacement = Pod::from(PodFields {
                name: replacement_pod_name(
                    &pod.name,
                    &format!("{:05x}", mix(self.recreated) & 0xfffff),
                ),
                node_name: None,
                terminal: false,
                terminating: false,
                marked_unschedulable: true,
                nominated_node_name: None,
                ..PodFields::clone(&pod)
            });
            let at = self.state.pods.len();
            if let Some(index) = self.index.as_mut() {
                index.insert(&replacement, at);
            }
            self.state.pods.push(replacement);
        }
        pod
    }
}

/// The name of the pod a workload controller makes to replace `name`: the name's base
/// (without an earlier replacement's `-r<suffix>`), `-r`, then `suffix` (five
/// lowercase letters or digits). A valid pod name for Kubernetes (a DNS-1123 label:
/// lowercase alphanumerics and `-`, at most 63 characters) whenever `name` is one: a
/// long base is cut short, as the API server cuts a `generateName`.
pub fn replacement_pod_name(name: &str, suffix: &str) -> String {
    let bytes = name.as_bytes();
    let marked = bytes.len() > 7 && {
        let tail = &bytes[bytes.len() - 7..];
        tail.starts_with(b"-r")
            && tail[2..]
                .iter()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    let base = if marked {
        &name[..name.len() - 7]
    } else {
        name
    };
    let room = 63usize.saturating_sub(2 + suffix.len());
    let base = match base.char_indices().nth(room) {
        Some((cut, _)) => &base[..cut],
        None => base,
    };
    format!("{}-r{suffix}", base.trim_end_matches('-'))
}

/// The Kubernetes API in memory, plus a simulated kubelet (`register`, `set_ready`)
/// and binder (`bind_pod`).
pub struct FakeCluster {
    inner: Mutex<ClusterInner>,
    catalog: Arc<Catalog>,
    version: String,
}

impl FakeCluster {
    /// An empty cluster whose kubelets size nodes from `catalog`.
    pub fn new(catalog: Arc<Catalog>) -> Self {
        Self {
            inner: Mutex::new(ClusterInner {
                state: ClusterState::default(),
                events: Vec::new(),
                statuses: BTreeMap::new(),
                mirrors: BTreeMap::new(),
                faults: Faults::default(),
                calls: Vec::new(),
                index: None,
                pod_deletions: Vec::new(),
                recreate: false,
                recreated: 0,
                evictions: EvictionCounts::default(),
                generation: 0,
            }),
            catalog,
            version: "1.33".into(),
        }
    }

    /// The cluster's inner state for a write: the generation moves on.
    fn write(&self) -> std::sync::MutexGuard<'_, ClusterInner> {
        let mut inner = lock(&self.inner);
        inner.generation += 1;
        inner
    }

    /// A number that moves on whenever the state may have changed (any write through
    /// this fake, `with_state` included): the same number twice means nothing changed
    /// in between.
    pub fn generation(&self) -> u64 {
        lock(&self.inner).generation
    }

    /// Reads or edits the whole state (add pools, node classes, DaemonSets...).
    pub fn with_state<R>(&self, f: impl FnOnce(&mut ClusterState) -> R) -> R {
        let mut inner = self.write();
        inner.index = None;
        f(&mut inner.state)
    }

    /// Edits the whole state with `f`, which says whether it changed anything: the
    /// generation moves on only if it did.
    pub fn edit_state(&self, f: impl FnOnce(&mut ClusterState) -> bool) -> bool {
        let mut inner = lock(&self.inner);
        let changed = f(&mut inner.state);
        if changed {
            inner.index = None;
            inner.generation += 1;
        }
        changed
    }

    /// Reads the whole state in place.
    pub fn with_state_read<R>(&self, f: impl FnOnce(&ClusterState) -> R) -> R {
        f(&lock(&self.inner).state)
    }

    /// Evicted and deleted pods (not DaemonSet pods) come back as pending pods named
    /// `<name>-r<suffix>` ([`replacement_pod_name`]), as their ReplicaSet would recreate
    /// them, so the provisioner
    /// can be seen replacing the capacity. Off by default.
    pub fn recreate_evicted_pods(&self, on: bool) {
        lock(&self.inner).recreate = on;
    }

    /// The evictions answered so far, by node.
    pub fn evictions(&self) -> EvictionCounts {
        lock(&self.inner).evictions.clone()
    }

    /// Pods deleted through `delete_pod`: (namespace/name, grace period seconds), in order.
    pub fn pod_deletions(&self) -> Vec<(String, i64)> {
        lock(&self.inner).pod_deletions.clone()
    }

    pub fn pod(&self, namespace: &str, name: &str) -> Option<Pod> {
        let mut inner = self.write();
        let i = inner.find_pod(namespace, name)?;
        Some(inner.state.pods[i].clone())
    }

    /// RBAC forbids listing `kind` from now on (`persistentvolumeclaims`,
    /// `poddisruptionbudgets`...): reads go on without it, as the adapter's do.
    pub fn forbid(&self, kind: &str) {
        self.write().state.unreadable.push(nodewright_engine::ports::UnreadableKind {
            kind: kind.to_string(),
            error_kind: ErrorKind::Unauthorized,
            message: format!(
                "{kind} is forbidden: User \"nodewright\" cannot list resource \"{kind}\" at the cluster scope"
            ),
        });
    }

    /// The cluster's NodeOverlays from now on (valid, or as read with why not).
    pub fn set_node_overlays(&self, overlays: Vec<nodewright_core::api::ReadOverlay>) {
        self.write().state.node_overlays = overlays;
    }

    pub fn snapshot(&self) -> ClusterState {
        lock(&self.inner).state.clone()
    }

    pub fn add_pod(&self, pod: Pod) {
        let mut inner = self.write();
        let at = inner.state.pods.len();
        if let Some(index) = inner.index.as_mut() {
            index.insert(&pod, at);
        }
        inner.state.pods.push(pod);
    }

    pub fn add_node(&self, node: Node) {
        let mut inner = self.write();
        let at = inner.state.nodes.len();
        if let Some(index) = inner.index.as_mut() {
            index.nodes.insert(node.name.clone(), at);
        }
        inner.state.nodes.push(node);
    }

    /// Removes a node (the order of the others may change); false if there was none.
    pub fn remove_node(&self, name: &str) -> bool {
        let mut inner = self.write();
        let Some(i) = inner.find_node(name) else {
            return false;
        };
        inner.state.nodes.swap_remove(i);
        let moved = inner.state.nodes.get(i).map(|n| n.name.clone());
        if let Some(index) = inner.index.as_mut() {
            index.nodes.remove(name);
            if let Some(moved) = moved {
                index.nodes.insert(moved, i);
            }
        }
        true
    }

    /// Binds the pod `namespace/name` to `node`; false if there is no such pod.
    pub fn bind_pod(&self, pod_key: &str, node: &str) -> bool {
        let mut inner = self.write();
        inner.index = None;
        match inner.state.pods.iter_mut().find(|p| p.key() == pod_key) {
            Some(p) => {
                p.node_name = Some(node.to_string());
                // Binding sets PodScheduled=True: the Unschedulable mark goes.
                p.marked_unschedulable = false;
                true
            }
            None => false,
        }
    }

    pub fn node(&self, name: &str) -> Option<Node> {
        lock(&self.inner)
            .state
            .nodes
            .iter()
            .find(|n| n.name == name)
            .cloned()
    }

    pub fn nodes(&self) -> Vec<Node> {
        lock(&self.inner).state.nodes.clone()
    }

    pub fn events(&self) -> Vec<ClusterEvent> {
        lock(&self.inner).events.clone()
    }

    /// The status written to a NodePool or EC2NodeClass, if any was.
    pub fn status(&self, kind: ObjectKind, name: &str) -> Option<ObjectStatus> {
        lock(&self.inner)
            .statuses
            .get(&(kind, name.to_string()))
            .cloned()
    }

    /// The claims mirrored now (as `mirror_claims` last wrote each), by name.
    pub fn mirrors(&self) -> BTreeMap<String, NodeClaim> {
        lock(&self.inner).mirrors.clone()
    }

    /// Deletes a mirror as a person would (`kubectl delete nodeclaim`); false if there
    /// was none.
    pub fn delete_mirror(&self, name: &str) -> bool {
        lock(&self.inner).mirrors.remove(name).is_some()
    }

    /// One condition of a NodePool or EC2NodeClass, if it was set.
    pub fn condition(&self, kind: ObjectKind, name: &str, type_: &str) -> Option<StoredCondition> {
        self.status(kind, name)
            .and_then(|s| s.condition(type_).cloned())
    }

    /// The kubelet of `instance` joins with the labels and taints it was launched
    /// with: the Node [`joining_node`](crate::eks::joining_node) describes, named like
    /// EC2's private DNS name. Returns the node name.
    pub fn register(
        &self,
        instance: &Instance,
        labels: &BTreeMap<String, String>,
        taints: &[Taint],
    ) -> String {
        let provider_id = format!("aws:///{}/{}", instance.zone, instance.id);
        let name = self.free_node_name(&instance.id, &provider_id);
        let node = crate::eks::joining_node(
            &name,
            &crate::eks::JoiningInstance {
                id: &instance.id,
                zone: &instance.zone,
                instance_type: &instance.instance_type,
                capacity_type: instance.capacity_type,
            },
            labels,
            taints,
            &self.catalog,
        );
        let mut inner = self.write();
        inner.index = None;
        inner.state.nodes.retain(|n| n.name != name);
        inner.state.nodes.push(node);
        name
    }

    /// The node name of the instance's private IP address, derived from its id (the
    /// same on a re-registration). EC2 never gives two instances of a VPC the same
    /// address, so an address whose node belongs to another instance is passed over
    /// for the next one: the 24 bits of a hash collide between two of 4,000 instances
    /// about every other run.
    fn free_node_name(&self, instance_id: &str, provider_id: &str) -> String {
        let inner = lock(&self.inner);
        let mut h = address_hash(instance_id);
        loop {
            let name = format!(
                "ip-10-{}-{}-{}.ec2.internal",
                (h >> 16) & 0xff,
                (h >> 8) & 0xff,
                h & 0xff
            );
            let taken = inner
                .state
                .nodes
                .iter()
                .any(|n| n.name == name && n.provider_id.as_deref() != Some(provider_id));
            if !taken {
                return name;
            }
            h = h.wrapping_add(1);
        }
    }

    /// Every running instance of `cloud` without a node registers, with the labels and
    /// taints of the request that launched it. Returns the new node names.
    pub fn register_from(&self, cloud: &FakeCloud) -> Vec<String> {
        let known: HashSet<String> = self
            .nodes()
            .iter()
            .filter_map(|n| n.provider_id.clone())
            .collect();
        let mut out = Vec::new();
        for fi in cloud.instances() {
            let i = &fi.instance;
            if i.state == "terminated" || known.contains(&format!("aws:///{}/{}", i.zone, i.id)) {
                continue;
            }
            out.push(self.register(i, &fi.request.labels, &fi.request.taints));
        }
        out
    }

    /// The node's Ready condition turns True; false if there is no such node.
    pub fn set_ready(&self, name: &str) -> bool {
        let mut inner = self.write();
        match inner.state.nodes.iter_mut().find(|n| n.name == name) {
            Some(n) => {
                n.ready = true;
                n.conditions.retain(|c| c.kind != "Ready");
                n.conditions.push(NodeCondition {
                    kind: "Ready".into(),
                    status: ConditionStatus::True,
                    since: n.ready_since,
                    reason: Some("KubeletReady".into()),
                });
                true
            }
            None => false,
        }
    }

    /// The node reports condition `kind` with `status` since `since`, as the kubelet,
    /// the node lifecycle controller (Ready Unknown when the kubelet stops reporting)
    /// or the node monitoring agent would write it. False if there is no such node.
    pub fn set_condition(
        &self,
        name: &str,
        kind: &str,
        status: ConditionStatus,
        since: i64,
    ) -> bool {
        self.set_condition_with_reason(name, kind, status, None, since)
    }

    /// [`FakeCluster::set_condition`] with the condition's `reason` (the node
    /// monitoring agent names a GPU fault's XID there).
    pub fn set_condition_with_reason(
        &self,
        name: &str,
        kind: &str,
        status: ConditionStatus,
        reason: Option<&str>,
        since: i64,
    ) -> bool {
        let mut inner = self.write();
        match inner.state.nodes.iter_mut().find(|n| n.name == name) {
            Some(n) => {
                if kind == "Ready" {
                    n.ready = status == ConditionStatus::True;
                    n.ready_since = n.ready.then_some(since);
                }
                n.conditions.retain(|c| c.kind != kind);
                n.conditions.push(NodeCondition {
                    kind: kind.into(),
                    status,
                    since: Some(since),
                    reason: reason.map(str::to_string),
                });
                true
            }
            None => false,
        }
    }

    /// The node's instance is gone: the node turns NotReady and the pods on it are
    /// lost (their controllers recreate them, when recreation is on). Returns the pods
    /// lost. The Node object stays until someone deletes it.
    pub fn lose_node(&self, name: &str) -> Vec<String> {
        let mut inner = self.write();
        if let Some(i) = inner.find_node(name) {
            inner.state.nodes[i].ready = false;
        }
        let mut lost = Vec::new();
        while let Some(i) = inner
            .state
            .pods
            .iter()
            .position(|p| p.node_name.as_deref() == Some(name))
        {
            let pod = inner.remove_pod(i);
            lost.push(pod.key());
        }
        lost
    }

    /// Puts a taint on a node as its owner (the node lifecycle controller, a CNI)
    /// would; a taint of the same key and effect is replaced.
    pub fn add_taint(&self, node: &str, taint: Taint) {
        let mut inner = self.write();
        if let Some(n) = inner.state.nodes.iter_mut().find(|n| n.name == node) {
            n.taints
                .retain(|t| !(t.key == taint.key && t.effect == taint.effect));
            n.taints.push(taint);
        }
    }

    /// Removes a taint from a node as its owner (a CNI, a device plugin) would.
    pub fn remove_taint(&self, node: &str, key: &str) {
        let mut inner = self.write();
        if let Some(n) = inner.state.nodes.iter_mut().find(|n| n.name == node) {
            n.taints.retain(|t| t.key != key);
        }
    }

    recording_api!(ClusterOp, ClusterError, record);
}

#[async_trait]
impl Cluster for FakeCluster {
    async fn state(&self) -> Result<ClusterState, ClusterError> {
        tokio::task::yield_now().await;
        if let Some(e) = self.record(ClusterOp::State, "") {
            return Err(e);
        }
        let mut state = self.snapshot();
        // What the adapter does when a kind cannot be listed (`KubeCluster::state`).
        for u in state.unreadable.clone() {
            match u.kind.as_str() {
                "persistentvolumeclaims" | "persistentvolumes" | "storageclasses" => {
                    nodewright_core::volumes::hold_pods_with_claims(
                        &mut state.pods,
                        &u.kind,
                        &u.why(),
                    )
                }
                "poddisruptionbudgets" => state.pdbs.clear(),
                "daemonsets" => state.daemonsets.clear(),
                _ => {}
            }
        }
        Ok(state)
    }

    async fn pods(&self) -> Result<Vec<Pod>, ClusterError> {
        tokio::task::yield_now().await;
        if let Some(e) = self.record(ClusterOp::Pods, "") {
            return Err(e);
        }
        Ok(lock(&self.inner).state.pods.clone())
    }

    async fn patch_node(&self, name: &str, patch: &NodePatch) -> Result<(), ClusterError> {
        tokio::task::yield_now().await;
        if let Some(e) = self.record(ClusterOp::PatchNode, name) {
            return Err(e);
        }
        let mut inner = self.write();
        let Some(i) = inner.find_node(name) else {
            return Err(ClusterError::new(
                ErrorKind::NotFound,
                format!("nodes \"{name}\" not found"),
            ));
        };
        let node = &mut inner.state.nodes[i];
        node.labels.extend(patch.set_labels.clone());
        for key in &patch.remove_labels {
            node.labels.remove(key);
        }
        // The core Node keeps only the annotations planning reads.
        for (k, v) in &patch.set_annotations {
            match k.as_str() {
                nodewright_core::well_known::ANNOTATION_NODEPOOL_HASH => {
                    node.nodepool_hash = Some(v.clone())
                }
                nodewright_core::well_known::ANNOTATION_NODECLASS_HASH => {
                    node.nodeclass_hash = Some(v.clone())
                }
                _ => {}
            }
        }
        node.taints
            .retain(|t| !patch.remove_taints.contains(&t.key));
        for t in &patch.add_taints {
            if !node
                .taints
                .iter()
                .any(|x| x.key == t.key && x.effect == t.effect)
            {
                node.taints.push(t.clone());
            }
        }
        Ok(())
    }

    async fn record_event(&self, event: &ClusterEvent) -> Result<(), ClusterError> {
        tokio::task::yield_now().await;
        if let Some(e) = self.record(
            ClusterOp::RecordEvent,
            format!("{}/{}", event.reason, event.name),
        ) {
            return Err(e);
        }
        lock(&self.inner).events.push(event.clone());
        Ok(())
    }

    /// As the `/status` subresource: the object must exist (valid, or listed in
    /// `invalid_objects`); conditions merge by type, keeping `lastTransitionTime`
    /// unless the status flips. Generations are not modelled.
    async fn update_status(
        &self,
        kind: ObjectKind,
        name: &str,
        update: &StatusUpdate,
        now: i64,
    ) -> Result<bool, ClusterError> {
        tokio::task::yield_now().await;
        if let Some(e) = self.record(ClusterOp::UpdateStatus, format!("{kind}/{name}")) {
            return Err(e);
        }
        let mut inner = self.write();
        let state = &inner.state;
        let exists = match kind {
            ObjectKind::NodePool => state.node_pools.iter().any(|p| p.name == name),
            ObjectKind::Ec2NodeClass => state.node_classes.iter().any(|c| c.name == name),
            ObjectKind::NodeOverlay => state.node_overlays.iter().any(|o| match o {
                Ok(o) => o.name == name,
                Err(invalid) => invalid.name == name,
            }),
            ObjectKind::CapacityBuffer => state.capacity_buffers.iter().any(|b| b.key() == name),
        } || state
            .invalid_objects
            .iter()
            .any(|o| o.kind == kind && o.name == name);
        if !exists {
            return Err(ClusterError::new(
                ErrorKind::NotFound,
                format!("{kind} {name:?} not found"),
            ));
        }
        let key = (kind, name.to_string());
        let current = inner.statuses.get(&key).cloned().unwrap_or_default();
        match current.updated(update, now) {
            Some(next) => {
                inner.statuses.insert(key, next);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// As the Kubernetes adapter: a mirror per live claim, written only when missing or
    /// when its claim changed; the mirrors of terminal and absent claims deleted.
    async fn mirror_claims(&self, claims: &[NodeClaim]) -> Result<MirrorReport, ClusterError> {
        tokio::task::yield_now().await;
        if let Some(e) = self.record(ClusterOp::MirrorClaims, "") {
            return Err(e);
        }
        let mut inner = self.write();
        let mut report = MirrorReport::default();
        let live: BTreeMap<&str, &NodeClaim> = claims
            .iter()
            .filter(|c| !c.state.is_terminal())
            .map(|c| (c.name.as_str(), c))
            .collect();
        let gone: Vec<String> = inner
            .mirrors
            .keys()
            .filter(|n| !live.contains_key(n.as_str()))
            .cloned()
            .collect();
        for name in gone {
            inner.mirrors.remove(&name);
            report.deleted.push(name);
        }
        for (name, claim) in live {
            match inner.mirrors.get(name) {
                Some(mirrored) if mirrored == claim => continue,
                Some(_) => report.updated.push(name.to_string()),
                None => report.created.push(name.to_string()),
            }
            inner.mirrors.insert(name.to_string(), claim.clone());
        }
        Ok(report)
    }

    async fn kubernetes_version(&self) -> Result<String, ClusterError> {
        tokio::task::yield_now().await;
        if let Some(e) = self.record(ClusterOp::KubernetesVersion, "") {
            return Err(e);
        }
        Ok(self.version.clone())
    }

    async fn pods_on_node(&self, node: &str) -> Result<Vec<Pod>, ClusterError> {
        tokio::task::yield_now().await;
        if let Some(e) = self.record(ClusterOp::PodsOnNode, node) {
            return Err(e);
        }
        let mut inner = self.write();
        let positions: Vec<usize> = {
            let index = inner.index();
            let Some(keys) = index.by_node.get(node) else {
                return Ok(Vec::new());
            };
            keys.iter()
                .filter_map(|k| index.by_key.get(k).copied())
                .collect()
        };
        let mut pods: Vec<Pod> = positions
            .into_iter()
            .map(|i| inner.state.pods[i].clone())
            .collect();
        pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        Ok(pods)
    }

    /// As the eviction subresource: the pod must exist; a running pod selected by a
    /// budget goes only if every such budget allows a disruption now (computed over
    /// the pods as they are: see `core::cluster::eviction_allowed`); otherwise
    /// `DisruptionBudget`. An evicted pod is gone at once (a kubelet would take up to
    /// its grace period).
    async fn evict_pod(&self, namespace: &str, name: &str) -> Result<(), ClusterError> {
        tokio::task::yield_now().await;
        if let Some(e) = self.record(ClusterOp::EvictPod, format!("{namespace}/{name}")) {
            return Err(e);
        }
        let mut inner = self.write();
        let Some(i) = inner.find_pod(namespace, name) else {
            return Err(ClusterError::new(
                ErrorKind::NotFound,
                format!("pods \"{name}\" not found"),
            ));
        };
        let pod = &inner.state.pods[i];
        let node = pod.node_name.clone().unwrap_or_default();
        if inner.state.pdbs.iter().any(|b| b.selects(pod))
            && !eviction_allowed(pod, &inner.state.pods, &inner.state.pdbs)
        {
            *inner.evictions.refused_by_budget.entry(node).or_default() += 1;
            return Err(ClusterError::new(
                ErrorKind::DisruptionBudget,
                format!(
                    "evicting pod {namespace}/{name}: Cannot evict pod as it would violate the pod's disruption budget."
                ),
            ));
        }
        *inner.evictions.evicted.entry(node).or_default() += 1;
        inner.remove_pod(i);
        Ok(())
    }

    /// Deletes the pod at once whatever the grace period (recorded in `pod_deletions`);
    /// a kubelet would give the containers that long to stop.
    async fn delete_pod(
        &self,
        namespace: &str,
        name: &str,
        grace_period_seconds: i64,
    ) -> Result<(), ClusterError> {
        tokio::task::yield_now().await;
        if let Some(e) = self.record(ClusterOp::DeletePod, format!("{namespace}/{name}")) {
            return Err(e);
        }
        let mut inner = self.write();
        let Some(i) = inner.find_pod(namespace, name) else {
            return Err(ClusterError::new(
                ErrorKind::NotFound,
                format!("pods \"{name}\" not found"),
            ));
        };
        inner
            .pod_deletions
            .push((format!("{namespace}/{name}"), grace_period_seconds));
        inner.remove_pod(i);
        Ok(())
    }

    /// Removes the Node object. Pods still bound to it stay (the pod garbage collector
    /// would remove them later).
    async fn delete_node(&self, name: &str) -> Result<(), ClusterError> {
        tokio::task::yield_now().await;
        if let Some(e) = self.record(ClusterOp::DeleteNode, name) {
            return Err(e);
        }
        if self.remove_node(name) {
            Ok(())
        } else {
            Err(ClusterError::new(
                ErrorKind::NotFound,
                format!("nodes \"{name}\" not found"),
            ))
        }
    }
}

/// The low 24 bits make up an instance's first-choice private address (10.x.y.z).
pub(super) fn address_hash(instance_id: &str) -> u64 {
    mix(instance_id
        .bytes()
        .fold(0u64, |a, b| a.wrapping_mul(31).wrapping_add(u64::from(b))))
}
