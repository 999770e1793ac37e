//! [`KubeCluster`]: the engine's [`Cluster`] port over the Kubernetes API.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Debug;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Event, EventSource, Node, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::params::ValidationDirective;
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tracing::{debug, warn};

use nodewright_core::api::model::Taint;
use nodewright_core::api::{
    self, Document, NODE_CLASS_API_VERSION, NODE_CLASS_KIND, NODE_POOL_API_VERSION, NODE_POOL_KIND,
};
use nodewright_core::nodeclaim::NodeClaim;
use nodewright_core::volume_limits::{apply_node_attachment_limits, count_ebs_claims};
use nodewright_core::volumes::{Storage, apply_volume_topology, hold_pods_with_claims};
use nodewright_core::{cluster, snapshot};
use nodewright_engine::ports::{
    Cluster, ClusterError, ClusterEvent, ClusterState, Condition, ErrorKind, EventType,
    InvalidObject, Invalidity, MirrorReport, NodePatch, ObjectKind, StatusUpdate, UnreadableKind,
};

use crate::client::{self, ApiRate, TokenProvider};
use crate::error::{classify, cluster_error};
use crate::mirror::{Mirror, Seen, mirror_of};
use crate::view::{self, ClusterView, Crd, NODE_CLAIMS, NODE_CLASSES, NODE_POOLS, crd_of};
use crate::watch::{Key, MISSING_KIND_RETRY, Read, Watched};

mod mirror_writes;
mod validate;

pub use mirror_writes::MIRROR_WRITES_PER_PASS;
use mirror_writes::MirrorMemory;
use validate::validate_karpenter;

/// Objects per page when listing (`limit`); the API server's own cap is 500 by default
/// for kubectl and unbounded for clients, large lists are cheaper for it in pages.
pub const PAGE_SIZE: u32 = 500;
/// Attempts at a taint change before a run of conflicts is returned as `Conflict`.
pub const TAINT_ATTEMPTS: u32 = 5;
/// Attempts at a status write before a run of conflicts is returned as `Conflict`.
pub const STATUS_ATTEMPTS: u32 = 5;
/// The component nodewright's events are reported by.
pub const COMPONENT: &str = "nodewright";
/// Where events about cluster-scoped objects (nodes) go, as the kubelet does.
const CLUSTER_SCOPED_EVENT_NAMESPACE: &str = "default";

/// Kinds whose objects have no namespace: their events go to "default".
fn cluster_scoped(kind: &str) -> bool {
    kind == "Node" || ObjectKind::from_kind(kind).is_some()
}

/// The Kubernetes side of nodewright: reads NodePools, EC2NodeClasses, nodes, pods,
/// DaemonSets and PDBs; labels and taints nodes; records events.
///
/// Cheap to clone (the client is shared).
#[derive(Clone)]
pub struct KubeCluster {
    client: Client,
    page_size: u32,
    /// Every kind a tick reads, listed once and then watched (see `watch`): started by
    /// the first read, shared by the clones, its watches stopped with the last clone.
    view: Arc<tokio::sync::OnceCell<ClusterView>>,
    /// What this process last wrote of each claim's mirror (see `mirror_claims`).
    mirrors: Arc<MirrorMemory>,
    /// Mirror objects one `mirror_claims` pass may create, update or delete.
    mirror_writes: usize,
    /// How long a kind the cluster does not serve waits before it is listed again.
    missing_kind_retry: Duration,
    /// Status fields the installed CRD refused (see `update_status`): left out of
    /// later writes of that kind.
    refused_status_fields: Arc<Mutex<HashSet<(ObjectKind, String)>>>,
    /// The workloads CapacityBuffers name, read by name (see `workloads`).
    workloads: Arc<crate::workloads::Workloads>,
    /// Read Services and controllers' selectors (a scheduler configuration gives pods
    /// default topology spread constraints).
    default_spread: bool,
}

impl KubeCluster {
    /// Over a client built elsewhere. Prefer the other constructors: a client from
    /// `Client::try_default()` retries 429s for minutes.
    pub fn new(client: Client) -> Self {
        KubeCluster {
            client,
            page_size: PAGE_SIZE,
            view: Arc::default(),
            mirrors: Arc::default(),
            mirror_writes: MIRROR_WRITES_PER_PASS,
            missing_kind_retry: MISSING_KIND_RETRY,
            refused_status_fields: Arc::default(),
            workloads: Arc::default(),
            default_spread: false,
        }
    }

    /// For an EKS cluster (endpoint and CA from DescribeCluster, `ca_pem` already
    /// base64-decoded) with a token that the provider renews, sending at most `rate`.
    /// Must be called inside a tokio runtime.
    pub fn from_endpoint(
        endpoint: &str,
        ca_pem: Option<&[u8]>,
        tokens: Arc<dyn TokenProvider>,
        rate: ApiRate,
    ) -> Result<Self, ClusterError> {
        Ok(Self::new(client::client_for_endpoint(
            endpoint, ca_pem, tokens, rate,
        )?))
    }

    /// From a kubeconfig file (its current context), for local runs of the CLI
    /// (`NODEWRIGHT_KUBECONFIG`).
    pub async fn from_kubeconfig(
        path: impl AsRef<Path>,
        rate: ApiRate,
    ) -> Result<Self, ClusterError> {
        Ok(Self::new(
            client::client_for_kubeconfig(path.as_ref(), rate).await?,
        ))
    }

    /// Also read the Services and the ReplicaSets, StatefulSets and
    /// ReplicationControllers' selectors into [`ClusterState`] (watched from the first
    /// read on): what default topology spread constraints deduce their selectors from.
    pub fn with_default_spread(mut self, on: bool) -> Self {
        self.default_spread = on;
        self
    }

    /// Objects per list page (tests use small pages to exercise `continue`).
    pub fn with_page_size(mut self, page_size: u32) -> Self {
        self.page_size = page_size.max(1);
        self
    }

    /// Mirror objects a pass may write (tests use a few to exercise the backlog).
    pub fn with_mirror_writes_per_pass(mut self, writes: usize) -> Self {
        self.mirror_writes = writes.max(1);
        self
    }

    /// How long a kind the cluster does not serve (an optional CRD not installed) waits
    /// before it is listed again (tests shorten [`MISSING_KIND_RETRY`]).
    pub fn with_missing_kind_retry(mut self, retry: Duration) -> Self {
        self.missing_kind_retry = retry;
        self
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The watched view, started on first use (inside the tokio runtime that serves
    /// the reads; a Lambda's runtime lives as long as its process).
    async fn view(&self) -> &ClusterView {
        self.view
            .get_or_init(|| async {
                ClusterView::start(
                    &self.client,
                    self.page_size,
                    self.missing_kind_retry,
                    &NODE_POOLS,
                    &NODE_CLASSES,
                )
            })
            .await
    }

    fn crd_api(&self, crd: &Crd) -> Api<DynamicObject> {
        crd.api(self.client.clone())
    }

    /// The API server accepted a change to a node: the view holds its answer now, so
    /// the same tick plans on the node as changed (a taint removed, labels set).
    fn wrote_node(&self, node: &Node) {
        if let Some(view) = self.view.get() {
            view.nodes.view.wrote(node, view::node);
        }
    }

    /// An eviction or delete of a pod was accepted: the pod is terminating now, as its
    /// next version will say (the watch delivers that, and later its deletion).
    fn pod_going(&self, namespace: &str, name: &str) {
        if let Some(view) = self.view.get() {
            let key: Key = (namespace.to_string(), name.to_string());
            view.pods.view.amend(&key, |pod| pod.terminating = true);
        }
    }

    /// Every object of a built-in kind that a field selector picks, converted page by
    /// page as the pages arrive: one page of whole k8s objects (with their
    /// managedFields and status) is the most held at once.
    async fn list_converted<K, T, E: std::fmt::Display>(
        &self,
        what: &str,
        fields: &str,
        from_k8s: impl Fn(&K) -> Result<T, E>,
        invalid: &mut Vec<String>,
    ) -> Result<Vec<T>, ClusterError>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    {
        let api: Api<K> = Api::all(self.client.clone());
        let mut out = Vec::new();
        let mut continue_token: Option<String> = None;
        loop {
            let mut params = ListParams::default().limit(self.page_size).fields(fields);
            if let Some(token) = &continue_token {
                params = params.continue_token(token);
            }
            let page = api
                .list(&params)
                .await
                .map_err(|e| cluster_error(format!("listing {what}"), e))?;
            for object in &page.items {
                match from_k8s(object) {
                    Ok(converted) => out.push(converted),
                    Err(e) => invalid.push(e.to_string()),
                }
            }
            match page.metadata.continue_ {
                Some(token) if !token.is_empty() => continue_token = Some(token),
                _ => return Ok(out),
            }
        }
    }

    /// The pods as the view holds them (read afresh if it cannot be vouched for),
    /// without their volume topology (that needs the storage kinds: `state`).
    async fn view_pods(
        &self,
        keep: impl Fn(&cluster::Pod) -> bool,
    ) -> Result<Vec<cluster::Pod>, ClusterError> {
        let view = self.view().await;
        view.catch_up().await;
        if let Some(pods) = view.pods.view.select(&keep) {
            return Ok(pods);
        }
        let read = view.pods.read().await?;
        warn_invalid(&read.invalid, "pod");
        Ok(read.objects.into_iter().filter(|p| keep(p)).collect())
    }

    /// The uid for an event's `involvedObject`: from the view; for a node not seen
    /// yet, the kubelet's convention of uid = name (describe searches by both); for a
    /// NodePool or EC2NodeClass not seen yet, read from the object (best effort: an
    /// event without a uid is still an event).
    async fn uid_for_event(&self, event: &ClusterEvent, namespace: Option<&str>) -> Option<String> {
        if let Some(uid) = self.known_uid(&event.kind, namespace, &event.name) {
            return Some(uid);
        }
        if event.kind == "Node" {
            return Some(event.name.clone());
        }
        let kind = ObjectKind::from_kind(&event.kind)?;
        match self.crd_api(crd_of(kind)).get(&event.name).await {
            Ok(object) => object.metadata.uid,
            Err(e) => {
                debug!(kind = %kind, object = %event.name, error = %e, "could not read the event's object for its uid");
                None
            }
        }
    }

    /// The `fields` of a status write that the server refuses, each tried alone with
    /// `dryRun=All` under strict validation (nothing is written).
    async fn refused_fields(
        &self,
        api: &Api<DynamicObject>,
        name: &str,
        status: &serde_json::Map<String, Value>,
        fields: &[String],
    ) -> Result<Vec<String>, ClusterError> {
        let mut params = strict();
        params.dry_run = true;
        let mut refused = Vec::new();
        for field in fields {
            let body = json!({ "status": { field.as_str(): status.get(field) } });
            match api.patch_status(name, &params, &Patch::Merge(&body)).await {
                Ok(_) => {}
                Err(e) if classify(&e) == ErrorKind::Invalid => refused.push(field.clone()),
                Err(e) => {
                    return Err(cluster_error(
                        format!("trying the status field {field:?} of {name:?}"),
                        e,
                    ));
                }
            }
        }
        Ok(refused)
    }

    fn known_uid(&self, kind: &str, namespace: Option<&str>, name: &str) -> Option<String> {
        let view = self.view.get()?;
        let key: Key = (namespace.unwrap_or_default().to_string(), name.to_string());
        match kind {
            "Pod" => view.pods.view.uid(&key),
            "Node" => view.nodes.view.uid(&key),
            NODE_POOL_KIND => view.node_pools.view.uid(&key),
            NODE_CLASS_KIND => view.node_classes.view.uid(&key),
            _ => None,
        }
    }
}

/// Every write the adapter makes is validated strictly (`fieldValidation=Strict`): a
/// field the server's schema lacks (a CRD older than the code) is refused as
/// [`ErrorKind::Invalid`] instead of being pruned silently, so a write that did not
/// happen is never taken for one that did.
fn strict() -> PatchParams {
    PatchParams {
        field_validation: Some(ValidationDirective::Strict),
        ..PatchParams::default()
    }
}

/// `POST {url}?fieldValidation=Strict` with `body` as JSON (kube-rs's `PostParams`
/// cannot ask for strict validation): a create, or a subresource's (an eviction).
async fn create_strict<B: Serialize, K: DeserializeOwned>(
    client: &Client,
    url: &str,
    body: &B,
) -> Result<K, kube::Error> {
    let bytes = serde_json::to_vec(body).map_err(kube::Error::SerdeError)?;
    let request = http::Request::post(format!("{url}?fieldValidation=Strict"))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(bytes)
        .map_err(kube::Error::HttpError)?;
    client.request::<K>(request).await
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A kind's objects, its problems added to `invalid`.
fn take<T>(read: Read<T>, invalid: &mut Vec<String>) -> Vec<T> {
    invalid.extend(read.invalid);
    read.objects
}

fn warn_invalid(problems: &[String], what: &str) {
    for problem in problems {
        warn!(problem = %problem, "skipped a {what} read from the cluster");
    }
}

/// `status.conditions` after setting `wanted` at `at` (RFC 3339): a condition of the
/// same type is replaced, keeping its `lastTransitionTime` when its status stays;
/// others (another controller's) are kept; sorted by type, as Karpenter keeps them.
fn merged_conditions(
    current: &[Value],
    wanted: &[Condition],
    generation: Option<i64>,
    at: &str,
) -> Vec<Value> {
    let type_of = |c: &Value| c.get("type").and_then(Value::as_str).map(str::to_string);
    let mut out: Vec<Value> = current
        .iter()
        .filter(|c| !type_of(c).is_some_and(|t| wanted.iter().any(|w| w.type_ == t)))
        .cloned()
        .collect();
    for w in wanted {
        let kept = current
            .iter()
            .find(|c| type_of(c).as_deref() == Some(w.type_.as_str()))
            .filter(|c| c.get("status").and_then(Value::as_str) == Some(w.status.as_str()))
            .and_then(|c| c.get("lastTransitionTime"))
            .and_then(Value::as_str)
            .unwrap_or(at);
        let mut condition = json!({
            "type": w.type_,
            "status": w.status.as_str(),
            "reason": w.reason,
            "message": w.message,
            "lastTransitionTime": kept,
        });
        if let Some(generation) = generation {
            condition["observedGeneration"] = generation.into();
        }
        out.push(condition);
    }
    out.sort_by_key(|c| type_of(c).unwrap_or_default());
    out
}

/// Unix seconds as Kubernetes writes `metav1.Time`.
fn rfc3339(unix_seconds: i64) -> String {
    Timestamp::from_second(unix_seconds)
        .unwrap_or(Timestamp::UNIX_EPOCH)
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

fn crd_missing(crd: &Crd) -> String {
    format!(
        "{}: the CRD {}.{} ({}) is not installed: the API server has no /apis/{}/{}/{}",
        crd.kind, crd.plural, crd.group, crd.api_version, crd.group, crd.version, crd.plural
    )
}

/// The node's taints after `patch`: removals by key (any effect) first, then additions
/// (a taint with the same key and effect is replaced, so its value follows the patch).
/// The `metadata.labels` of a JSON merge patch: each label to set with its value, each
/// to remove as `null` (RFC 7386 deletes it).
fn merged_labels<'a>(
    set: impl Iterator<Item = (&'a String, &'a String)>,
    remove: &[String],
) -> Value {
    let mut labels = serde_json::Map::new();
    for (k, v) in set {
        labels.insert(k.clone(), Value::String(v.clone()));
    }
    for k in remove {
        labels.insert(k.clone(), Value::Null);
    }
    Value::Object(labels)
}

fn patched_taints(current: &[Value], patch: &NodePatch) -> Vec<Value> {
    let key_of = |t: &Value| t.get("key").and_then(Value::as_str).map(str::to_string);
    let effect_of = |t: &Value| t.get("effect").and_then(Value::as_str).map(str::to_string);
    let mut taints: Vec<Value> = current
        .iter()
        .filter(|t| !key_of(t).is_some_and(|k| patch.remove_taints.contains(&k)))
        .cloned()
        .collect();
    for add in &patch.add_taints {
        let wanted = taint_json(add);
        let same = |t: &Value| {
            key_of(t).as_deref() == Some(add.key.as_str())
                && effect_of(t).as_deref() == Some(add.effect.as_str())
        };
        match taints.iter_mut().find(|t| same(t)) {
            Some(existing) => {
                if existing.get("value") != wanted.get("value") {
                    *existing = wanted;
                }
            }
            None => taints.push(wanted),
        }
    }
    taints
}

fn taint_json(taint: &Taint) -> Value {
    let mut value = json!({ "key": taint.key, "effect": taint.effect.as_str() });
    if let Some(v) = &taint.value {
        value["value"] = v.as_str().into();
    }
    value
}

/// The apiVersion of the kinds nodewright reports events about.
fn api_version_of(kind: &str) -> &'static str {
    match kind {
        NODE_POOL_KIND | "NodeClaim" => NODE_POOL_API_VERSION,
        NODE_CLASS_KIND => NODE_CLASS_API_VERSION,
        _ => "v1",
    }
}

/// `"1"`, `"33+"` → `1`, `33` (EKS reports minors like `"33+"`).
fn leading_number(s: &str) -> Option<u32> {
    let digits: String = s.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// "major.minor" from `/version`: its major and minor fields, or its gitVersion
/// (`v1.33.4-eks-...`) when they are empty (some distributions leave them out).
fn parse_version(major: &str, minor: &str, git_version: &str) -> Option<String> {
    if let (Some(major), Some(minor)) = (leading_number(major), leading_number(minor)) {
        return Some(format!("{major}.{minor}"));
    }
    let mut parts = git_version.trim_start_matches('v').split('.');
    let major = leading_number(parts.next()?)?;
    let minor = leading_number(parts.next()?)?;
    Some(format!("{major}.{minor}"))
}

/// An optional kind's read: `Ok(None)` (recorded in `unreadable`) when it is forbidden
/// or not served, the error when it failed otherwise.
fn optional_read<T>(
    kind: &str,
    read: Result<Read<T>, ClusterError>,
    unreadable: &mut Vec<UnreadableKind>,
) -> Result<Option<Read<T>>, ClusterError> {
    match read {
        Ok(r) => Ok(Some(r)),
        Err(e) if UnreadableKind::degrades(e.kind) => {
            unreadable.push(UnreadableKind {
                kind: kind.to_string(),
                error_kind: e.kind,
                message: e.to_string(),
            });
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

#[async_trait]
impl Cluster for KubeCluster {
    /// From the watched view (see `watch`): the first call lists every kind, later
    /// ones read memory, after letting the watches apply what has arrived.
    async fn state(&self) -> Result<ClusterState, ClusterError> {
        let view = self.view().await;
        view.catch_up().await;
        let (
            pools,
            classes,
            nodes,
            pods,
            daemonsets,
            pdbs,
            claims,
            volumes,
            classes_of_storage,
            overlays,
            buffers,
            csi_nodes,
        ) = tokio::join!(
            view.node_pools.read(),
            view.node_classes.read(),
            view.nodes.read(),
            view.pods.read(),
            view.daemonsets.read(),
            view.pdbs.read(),
            view.volume_claims.read(),
            view.volumes.read(),
            view.storage_classes.read(),
            view.node_overlays.read(),
            view.capacity_buffers.read(),
            view.csi_nodes.read(),
        );
        let mut state = ClusterState::default();
        let invalid = &mut state.invalid;

        let karpenter = |read: Read<view::Karpenter>, crd: &Crd, invalid: &mut Vec<String>| {
            if read.missing {
                invalid.push(crd_missing(crd));
            }
            invalid.extend(read.invalid);
            read.objects
        };
        let pools = karpenter(pools?, &NODE_POOLS, invalid);
        let classes = karpenter(classes?, &NODE_CLASSES, invalid);
        state.fields_not_honoured = pools
            .iter()
            .chain(&classes)
            .filter_map(|o| o.fields.clone())
            .collect();
        let values = |objects: Vec<view::Karpenter>| objects.into_iter().map(|o| o.value).collect();
        let manifests = validate_karpenter(
            values(pools),
            values(classes),
            invalid,
            &mut state.invalid_objects,
        );
        state.node_pools = manifests.node_pools;
        state.node_classes = manifests.node_classes;

        state.nodes = take(nodes?, &mut state.invalid);
        state.pods = take(pods?, &mut state.invalid);
        // A kind RBAC forbids or the server does not serve is gone without, not fatal:
        // what depends on it waits (see `UnreadableKind`); the rest goes on.
        let unreadable = &mut state.unreadable;
        let daemonsets = optional_read("daemonsets", daemonsets, unreadable)?;
        let pdbs = optional_read("poddisruptionbudgets", pdbs, unreadable)?;
        let claims = optional_read("persistentvolumeclaims", claims, unreadable)?;
        let volumes = optional_read("persistentvolumes", volumes, unreadable)?;
        let classes_of_storage = optional_read("storageclasses", classes_of_storage, unreadable)?;
        // Without CSINodes, every node offers its instance type's EBS attachments.
        let csi_nodes = optional_read("csinodes", csi_nodes, unreadable)?;
        apply_node_attachment_limits(
            &mut state.nodes,
            &csi_nodes.map_or_else(Vec::new, |r| r.objects),
        );
        state.daemonsets = daemonsets.map_or_else(Vec::new, |r| take(r, &mut state.invalid));
        state.pdbs = pdbs.map_or_else(Vec::new, |r| take(r, &mut state.invalid));
        // No CRD (404) reads as none; forbidden is unreadable, planned without.
        let overlays = optional_read("nodeoverlays", overlays, unreadable)?;
        state.node_overlays = overlays.map_or_else(Vec::new, |r| take(r, &mut state.invalid));
        // CapacityBuffers likewise; the PodTemplates and workloads they name only
        // when there is one.
        let buffers = optional_read("capacitybuffers", buffers, unreadable)?;
        state.capacity_buffers = buffers.map_or_else(Vec::new, |r| take(r, &mut state.invalid));
        if !state.capacity_buffers.is_empty() {
            let templates = view.pod_templates().read().await;
            let templates = optional_read("podtemplates", templates, &mut state.unreadable)?;
            state.pod_templates = templates.map_or_else(Vec::new, |r| take(r, &mut state.invalid));
            state.workloads = self
                .workloads
                .named(&self.client, &state.capacity_buffers, &mut state.unreadable)
                .await?;
        }
        if self.default_spread {
            let sources = view.spread_sources();
            let (services, replica_sets, stateful_sets, replication_controllers) = tokio::join!(
                sources.services.read(),
                sources.replica_sets.read(),
                sources.stateful_sets.read(),
                sources.replication_controllers.read(),
            );
            let unreadable = &mut state.unreadable;
            if let Some(r) = optional_read("services", services, unreadable)? {
                state.services = r.objects;
            }
            for (kind, read) in [
                ("replicasets", replica_sets),
                ("statefulsets", stateful_sets),
                ("replicationcontrollers", replication_controllers),
            ] {
                if let Some(r) = optional_read(kind, read, unreadable)? {
                    state.controllers.extend(r.objects);
                }
            }
        }
        match (claims, volumes, classes_of_storage) {
            (Some(claims), Some(volumes), Some(classes)) => {
                // A volume whose affinity cannot be read is reported and left out: its
                // pods then read as bound to a missing volume and wait, rather than
                // being placed anywhere.
                let storage = Storage {
                    claims: claims.objects,
                    volumes: take(volumes, &mut state.invalid),
                    classes: classes.objects,
                };
                apply_volume_topology(&mut state.pods, &storage);
                count_ebs_claims(&mut state.pods, &storage);
            }
            _ => {
                let u = state
                    .unreadable
                    .iter()
                    .find(|u| {
                        matches!(
                            u.kind.as_str(),
                            "persistentvolumeclaims" | "persistentvolumes" | "storageclasses"
                        )
                    })
                    .cloned();
                if let Some(u) = u {
                    hold_pods_with_claims(&mut state.pods, &u.kind, &u.why());
                }
            }
        }
        for u in &state.unreadable {
            warn!(kind = %u.kind, error_kind = ?u.error_kind, error = %u.message,
                "cannot read this kind; going on without it");
        }
        for problem in &state.invalid {
            warn!(problem = %problem, "skipped an object read from the cluster");
        }
        Ok(state)
    }

    async fn pods(&self) -> Result<Vec<cluster::Pod>, ClusterError> {
        self.view_pods(|_| true).await
    }

    /// From the view, without cloning the bound pods: the provisioner's poll.
    async fn unbound_pods(&self) -> Result<Vec<cluster::Pod>, ClusterError> {
        self.view_pods(|p| p.node_name.is_none()).await
    }

    async fn patch_node(&self, name: &str, patch: &NodePatch) -> Result<(), ClusterError> {
        let api: Api<Node> = Api::all(self.client.clone());
        let params = strict();
        let doing = |what: &str| format!("{what} node {name:?}");
        if patch.add_taints.is_empty() && patch.remove_taints.is_empty() {
            if patch.set_labels.is_empty()
                && patch.remove_labels.is_empty()
                && patch.set_annotations.is_empty()
            {
                return Ok(());
            }
            // Labels and annotations alone: a merge patch touches only the keys it names
            // (a null removes one).
            let mut body = json!({ "metadata": { "labels": merged_labels(
                patch.set_labels.iter(),
                &patch.remove_labels,
            ) } });
            if !patch.set_annotations.is_empty() {
                body["metadata"]["annotations"] = json!(patch.set_annotations);
            }
            let node = api
                .patch(name, &params, &Patch::Merge(&body))
                .await
                .map_err(|e| cluster_error(doing("labelling"), e))?;
            self.wrote_node(&node);
            return Ok(());
        }
        // Taints are a list: a merge patch replaces it whole. Read, compute, and write
        // back under the read resourceVersion, so a change made in between (the
        // kubelet, the node lifecycle controller, a person) makes the write fail with
        // 409 instead of being overwritten; then read again.
        let mut attempt = 1;
        loop {
            let node = api
                .get(name)
                .await
                .map_err(|e| cluster_error(doing("reading"), e))?;
            let current: Vec<Value> = node
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .map(|taints| {
                    taints
                        .iter()
                        .filter_map(|t| serde_json::to_value(t).ok())
                        .collect()
                })
                .unwrap_or_default();
            let taints = patched_taints(&current, patch);
            let labels = node.metadata.labels.clone().unwrap_or_default();
            let labels_to_set: BTreeMap<&String, &String> = patch
                .set_labels
                .iter()
                .filter(|(k, v)| labels.get(*k) != Some(*v))
                .collect();
            let labels_to_remove: Vec<String> = patch
                .remove_labels
                .iter()
                .filter(|k| labels.contains_key(*k))
                .cloned()
                .collect();
            let annotations = node.metadata.annotations.clone().unwrap_or_default();
            let annotations_to_set: BTreeMap<&String, &String> = patch
                .set_annotations
                .iter()
                .filter(|(k, v)| annotations.get(*k) != Some(*v))
                .collect();
            if taints == current
                && labels_to_set.is_empty()
                && labels_to_remove.is_empty()
                && annotations_to_set.is_empty()
            {
                return Ok(());
            }
            let mut body = json!({
                "metadata": { "resourceVersion": node.metadata.resource_version },
            });
            if !annotations_to_set.is_empty() {
                body["metadata"]["annotations"] = json!(annotations_to_set);
            }
            if !labels_to_set.is_empty() || !labels_to_remove.is_empty() {
                body["metadata"]["labels"] =
                    merged_labels(labels_to_set.into_iter(), &labels_to_remove);
            }
            if taints != current {
                body["spec"] = json!({ "taints": taints });
            }
            match api.patch(name, &params, &Patch::Merge(&body)).await {
                Ok(node) => {
                    self.wrote_node(&node);
                    return Ok(());
                }
                Err(e) if classify(&e) == ErrorKind::Conflict && attempt < TAINT_ATTEMPTS => {
                    debug!(
                        node = name,
                        attempt, "node changed while tainting it; reading it again"
                    );
                    attempt += 1;
                }
                Err(e) => return Err(cluster_error(doing("tainting"), e)),
            }
        }
    }

    async fn record_event(&self, event: &ClusterEvent) -> Result<(), ClusterError> {
        // Nodes, NodePools and EC2NodeClasses (and anything given without a namespace)
        // are cluster-scoped: their events go to "default", as the kubelet's and
        // Karpenter's do.
        let object_namespace = match event.namespace.as_deref() {
            Some(ns) if !ns.is_empty() && !cluster_scoped(&event.kind) => Some(ns.to_string()),
            _ => None,
        };
        let namespace = object_namespace
            .clone()
            .unwrap_or_else(|| CLUSTER_SCOPED_EVENT_NAMESPACE.to_string());
        // The uid `kubectl describe` searches by.
        let uid = self.uid_for_event(event, object_namespace.as_deref()).await;
        let now = Timestamp::now();
        let k8s_event = Event {
            metadata: ObjectMeta {
                // As client-go's recorder names them: object name, '.', hex nanoseconds.
                name: Some(format!("{}.{:x}", event.name, now.as_nanosecond())),
                namespace: Some(namespace.clone()),
                ..ObjectMeta::default()
            },
            involved_object: ObjectReference {
                api_version: Some(api_version_of(&event.kind).into()),
                kind: Some(event.kind.clone()),
                name: Some(event.name.clone()),
                namespace: object_namespace,
                uid,
                ..ObjectReference::default()
            },
            reason: Some(event.reason.clone()),
            message: Some(event.message.clone()),
            type_: Some(
                match event.event_type {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .into(),
            ),
            source: Some(EventSource {
                component: Some(COMPONENT.into()),
                host: None,
            }),
            reporting_component: Some(COMPONENT.into()),
            reporting_instance: Some(COMPONENT.into()),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            count: Some(1),
            ..Event::default()
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        create_strict::<_, Event>(&self.client, api.resource_url(), &k8s_event)
            .await
            .map_err(|e| {
                cluster_error(
                    format!(
                        "recording event {} for {} {:?}",
                        event.reason, event.kind, event.name
                    ),
                    e,
                )
            })?;
        Ok(())
    }

    /// Reads the object, merges the conditions (see `merged_conditions`) and fields,
    /// and, if that changes anything, merge-patches `/status` under the read
    /// resourceVersion: conditions are a list that a merge patch replaces whole, so a
    /// concurrent writer's change makes the write fail with 409 (then it reads again)
    /// instead of being lost.
    async fn update_status(
        &self,
        kind: ObjectKind,
        name: &str,
        update: &StatusUpdate,
        now: i64,
    ) -> Result<bool, ClusterError> {
        let doing = |what: &str| format!("{what} the status of {kind} {name:?}");
        // A namespaced kind's object is named `namespace/name`.
        let (api, name) = match (kind, name.split_once('/')) {
            (ObjectKind::CapacityBuffer, Some((namespace, object))) => (
                crd_of(kind).namespaced(self.client.clone(), namespace),
                object,
            ),
            _ => (self.crd_api(crd_of(kind)), name),
        };
        let at = rfc3339(now);
        let mut attempt = 1;
        loop {
            let object = api
                .get(name)
                .await
                .map_err(|e| cluster_error(doing("reading"), e))?;
            let current = object.data.get("status").cloned().unwrap_or(Value::Null);
            let mut status = serde_json::Map::new();
            if !update.conditions.is_empty() {
                let conditions: Vec<Value> = current
                    .get("conditions")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let merged = merged_conditions(
                    &conditions,
                    &update.conditions,
                    object.metadata.generation,
                    &at,
                );
                if merged != conditions {
                    status.insert("conditions".into(), Value::Array(merged));
                }
            }
            let mut fields = Vec::new();
            for (field, value) in &update.fields {
                if lock(&self.refused_status_fields).contains(&(kind, field.clone())) {
                    continue;
                }
                let stored = current.get(field).unwrap_or(&Value::Null);
                if stored != value {
                    status.insert(field.clone(), value.clone());
                    fields.push(field.clone());
                }
            }
            if status.is_empty() {
                return Ok(false);
            }
            let body = json!({
                "metadata": { "resourceVersion": object.metadata.resource_version },
                "status": status,
            });
            match api
                .patch_status(name, &strict(), &Patch::Merge(&body))
                .await
            {
                Ok(_) => return Ok(true),
                Err(e) if classify(&e) == ErrorKind::Conflict && attempt < STATUS_ATTEMPTS => {
                    debug!(kind = %kind, object = name, attempt, "object changed while writing its status; reading it again");
                    attempt += 1;
                }
                // Strict validation refused the write, and it carried fields besides the
                // conditions: maybe a CRD installed before a field existed (Karpenter
                // v1.1's NodePool has no `status.nodes`). Which fields the CRD refuses
                // is asked of the server (a dry run of each alone); those are said
                // once and left out of this kind's writes from now on, and the rest
                // is written. When every field is accepted alone, the refusal was
                // about something else: it is the answer.
                Err(e) if classify(&e) == ErrorKind::Invalid && !fields.is_empty() => {
                    let refused = self.refused_fields(&api, name, &status, &fields).await?;
                    if refused.is_empty() {
                        return Err(cluster_error(doing("writing"), e));
                    }
                    warn!(kind = %kind, object = name, fields = ?refused,
                        "the installed CRD refuses these status fields (an older Karpenter's?); writing this kind's status without them");
                    lock(&self.refused_status_fields)
                        .extend(refused.into_iter().map(|f| (kind, f)));
                }
                Err(e) => return Err(cluster_error(doing("writing"), e)),
            }
        }
    }

    /// A fresh LIST (`fieldSelector=spec.nodeName=<node>`, served from the API
    /// server's index), not the view: a drain decides from it that a node is empty and
    /// its instance may go, and a pod the view has not seen yet must still stop that.
    async fn pods_on_node(&self, node: &str) -> Result<Vec<cluster::Pod>, ClusterError> {
        let mut invalid = Vec::new();
        let pods = self
            .list_converted::<Pod, _, _>(
                &format!("pods on node {node:?}"),
                &format!("spec.nodeName={node}"),
                snapshot::pod_from_k8s,
                &mut invalid,
            )
            .await?;
        warn_invalid(&invalid, "pod");
        Ok(pods)
    }

    /// `POST .../pods/{name}/eviction` (policy/v1). The API server answers a budget's
    /// refusal with 429 TooManyRequests: here, and only here, that is
    /// [`ErrorKind::DisruptionBudget`], not throttling. The client has no retry layer
    /// (see `client`), so the refusal comes back on the first answer instead of after
    /// kube-rs' minutes of backoff; a throttling 429 (API priority and fairness) on this
    /// path is reported the same way, which is harmless: both mean "try on the next
    /// step".
    async fn evict_pod(&self, namespace: &str, name: &str) -> Result<(), ClusterError> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        // A complete policy/v1 Eviction (kube-rs' `Api::evict` sends one without
        // apiVersion/kind and with a misspelt deleteOptions).
        let eviction = json!({
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": { "name": name, "namespace": namespace },
        });
        let url = format!("{}/{name}/eviction", api.resource_url());
        match create_strict::<_, Value>(&self.client, &url, &eviction).await {
            Ok(_) => {
                self.pod_going(namespace, name);
                Ok(())
            }
            Err(e) => {
                let doing = format!("evicting pod {namespace}/{name}");
                match &e {
                    kube::Error::Api(status)
                        if status.code == 429
                            || (status.code == 0 && status.reason == "TooManyRequests") =>
                    {
                        Err(ClusterError::with_source(
                            ErrorKind::DisruptionBudget,
                            doing,
                            e,
                        ))
                    }
                    _ => Err(cluster_error(doing, e)),
                }
            }
        }
    }

    async fn delete_pod(
        &self,
        namespace: &str,
        name: &str,
        grace_period_seconds: i64,
    ) -> Result<(), ClusterError> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let grace = u32::try_from(grace_period_seconds.max(0)).unwrap_or(u32::MAX);
        api.delete(name, &DeleteParams::default().grace_period(grace))
            .await
            .map_err(|e| cluster_error(format!("deleting pod {namespace}/{name}"), e))?;
        self.pod_going(namespace, name);
        Ok(())
    }

    async fn delete_node(&self, name: &str) -> Result<(), ClusterError> {
        let api: Api<Node> = Api::all(self.client.clone());
        api.delete(name, &DeleteParams::default())
            .await
            .map_err(|e| cluster_error(format!("deleting node {name:?}"), e))?;
        if let Some(view) = self.view.get() {
            view.nodes.view.deleted(&(String::new(), name.to_string()));
        }
        Ok(())
    }

    /// NodeClaims read from the watched view (one LIST when first called, then one
    /// WATCH), so a quiet tick sends nothing: a mirror is written only when it is
    /// missing (never made, or deleted by someone: the watch says so) or differs from
    /// what this process last wrote of it (after a cold start: from what the watch
    /// delivered). Objects without nodewright's `managed-by` label are never touched.
    /// Without the CRD, nothing is mirrored (one warning per process).
    async fn mirror_claims(&self, claims: &[NodeClaim]) -> Result<MirrorReport, ClusterError> {
        self.write_mirrors(claims).await
    }

    async fn kubernetes_version(&self) -> Result<String, ClusterError> {
        let info = self
            .client
            .apiserver_version()
            .await
            .map_err(|e| cluster_error("reading /version", e))?;
        parse_version(&info.major, &info.minor, &info.git_version).ok_or_else(|| {
            ClusterError::new(
                ErrorKind::Other,
                format!(
                    "/version has no usable version (major {:?}, minor {:?}, gitVersion {:?})",
                    info.major, info.minor, info.git_version
                ),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_core::api::model::TaintEffect;

    fn taint(key: &str, value: Option<&str>, effect: TaintEffect) -> Taint {
        Taint {
            key: key.into(),
            value: value.map(Into::into),
            effect,
        }
    }

    #[test]
    fn versions_drop_distribution_suffixes() {
        assert_eq!(
            parse_version("1", "33+", "v1.33.4-eks-1234").as_deref(),
            Some("1.33")
        );
        assert_eq!(parse_version("1", "30", "").as_deref(), Some("1.30"));
        assert_eq!(
            parse_version("", "", "v1.31.2-eks-abc").as_deref(),
            Some("1.31")
        );
        assert_eq!(parse_version("", "", "nonsense"), None);
    }

    #[test]
    fn taints_are_removed_by_key_and_added_once() {
        let current = vec![
            json!({"key": "karpenter.sh/unregistered", "effect": "NoExecute"}),
            json!({"key": "team", "value": "a", "effect": "NoSchedule"}),
        ];
        let patch = NodePatch {
            remove_taints: vec!["karpenter.sh/unregistered".into()],
            add_taints: vec![
                taint("team", Some("b"), TaintEffect::NoSchedule),
                taint("gpu", None, TaintEffect::NoSchedule),
            ],
            ..NodePatch::default()
        };
        assert_eq!(
            patched_taints(&current, &patch),
            vec![
                json!({"key": "team", "value": "b", "effect": "NoSchedule"}),
                json!({"key": "gpu", "effect": "NoSchedule"}),
            ]
        );
        let again = patched_taints(&patched_taints(&current, &patch), &patch);
        assert_eq!(
            again,
            patched_taints(&current, &patch),
            "applying twice changes nothing"
        );
    }
}
