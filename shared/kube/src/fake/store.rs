//! The fake's objects: JSON values keyed by (kind, namespace, name), with the
//! bookkeeping a real API server does on write (resourceVersion, uid,
//! creationTimestamp), the resource types it serves, and what watches need: every
//! change recorded in a bounded history and sent to the open watches (see `events`).

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::events::{Event, EventType, History, Watchers};

/// A resource type the fake serves, as discovery would describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceType {
    /// "" for the core group.
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    /// The URL segment: `nodes`, `nodepools`.
    pub plural: &'static str,
    pub namespaced: bool,
    /// Built-in types' lists omit `apiVersion`/`kind` on items (custom resources'
    /// lists keep them), as a real API server does.
    pub builtin: bool,
    /// Served with a `/status` subresource: writes to the object itself leave `.status`
    /// as it was, writes to `/status` change nothing else (and a custom resource's
    /// `.status` is dropped on create), as a real API server does.
    pub status_subresource: bool,
}

impl ResourceType {
    /// `v1`, `apps/v1`, `karpenter.sh/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

const fn builtin(
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
) -> ResourceType {
    ResourceType {
        group,
        version,
        kind,
        plural,
        namespaced,
        builtin: true,
        // Every built-in kind here but Event and StorageClass has one.
        status_subresource: !matches!(kind.as_bytes(), b"Event" | b"StorageClass"),
    }
}

/// What a fresh fake serves: the kinds nodewright reads and writes.
pub fn default_resource_types() -> Vec<ResourceType> {
    vec![
        builtin("", "v1", "Node", "nodes", false),
        builtin("", "v1", "Pod", "pods", true),
        builtin("", "v1", "Event", "events", true),
        builtin("", "v1", "Namespace", "namespaces", false),
        builtin("apps", "v1", "DaemonSet", "daemonsets", true),
        builtin(
            "policy",
            "v1",
            "PodDisruptionBudget",
            "poddisruptionbudgets",
            true,
        ),
        builtin(
            "",
            "v1",
            "PersistentVolumeClaim",
            "persistentvolumeclaims",
            true,
        ),
        builtin("", "v1", "PersistentVolume", "persistentvolumes", false),
        builtin(
            "storage.k8s.io",
            "v1",
            "StorageClass",
            "storageclasses",
            false,
        ),
        ResourceType {
            group: "karpenter.sh",
            version: "v1",
            kind: "NodePool",
            plural: "nodepools",
            namespaced: false,
            builtin: false,
            status_subresource: true,
        },
        ResourceType {
            group: "karpenter.sh",
            version: "v1",
            kind: "NodeClaim",
            plural: "nodeclaims",
            namespaced: false,
            builtin: false,
            status_subresource: true,
        },
        ResourceType {
            group: "karpenter.k8s.aws",
            version: "v1",
            kind: "EC2NodeClass",
            plural: "ec2nodeclasses",
            namespaced: false,
            builtin: false,
            status_subresource: true,
        },
        ResourceType {
            group: "karpenter.sh",
            version: "v1alpha1",
            kind: "NodeOverlay",
            plural: "nodeoverlays",
            namespaced: false,
            builtin: false,
            status_subresource: true,
        },
    ]
}

/// (kind, namespace — "" for cluster-scoped, name)
pub type ObjectKey = (String, String, String);

/// The objects and the resource types of a fake API server.
///
/// Every change (whatever makes it: a request, a test's `put`, a hook) is recorded in
/// the history and sent to the open watches, so a watch sees the back door's writes too.
#[derive(Debug)]
pub struct Store {
    types: Vec<ResourceType>,
    /// Shared with the history's events (an unchanged object is held once).
    objects: BTreeMap<ObjectKey, Arc<Value>>,
    /// Like etcd's revision: bumped by every write, the list's resourceVersion.
    revision: u64,
    uids: u64,
    pub(crate) history: History,
    pub(crate) watchers: Watchers,
}

impl Default for Store {
    fn default() -> Self {
        let revision = 1;
        Store {
            types: default_resource_types(),
            objects: BTreeMap::new(),
            revision,
            uids: 0,
            history: History::new(revision),
            watchers: Watchers::default(),
        }
    }
}

impl Store {
    pub fn revision(&self) -> u64 {
        self.revision
    }

    pub fn resource_types(&self) -> &[ResourceType] {
        &self.types
    }

    /// The type served at `/api[s]/{group}/{version}/{plural}`, if installed.
    pub fn resource_type(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceType> {
        self.types
            .iter()
            .find(|t| t.group == group && t.version == version && t.plural == plural)
    }

    pub fn type_of_kind(&self, kind: &str) -> Option<&ResourceType> {
        self.types.iter().find(|t| t.kind == kind)
    }

    /// Stops serving a kind (as when its CRD is not installed): its paths answer 404.
    /// Its objects are deleted, as deleting a CRD does: its watches are sent a DELETED
    /// event for each, then end (cleanly).
    pub fn uninstall(&mut self, kind: &str) {
        let doomed: Vec<ObjectKey> = self
            .objects
            .keys()
            .filter(|(k, _, _)| k == kind)
            .cloned()
            .collect();
        for (kind, namespace, name) in doomed {
            // `key` spells "no namespace" as "" too.
            self.remove(&kind, Some(&namespace), &name);
        }
        self.watchers.close_kind(kind);
        self.types.retain(|t| t.kind != kind);
    }

    /// Serves a kind again (or a new one).
    pub fn install(&mut self, resource_type: ResourceType) {
        self.types.retain(|t| t.kind != resource_type.kind);
        self.types.push(resource_type);
    }

    pub fn get(&self, kind: &str, namespace: Option<&str>, name: &str) -> Option<&Value> {
        self.objects
            .get(&key(kind, namespace, name))
            .map(Arc::as_ref)
    }

    /// Objects of a kind, in (namespace, name) order; `namespace` filters.
    pub fn list(&self, kind: &str, namespace: Option<&str>) -> Vec<&Value> {
        self.shared(kind, namespace).map(Arc::as_ref).collect()
    }

    /// Like [`Store::list`], without copying an object (a watch's initial events).
    pub(crate) fn shared<'s, 'q>(
        &'s self,
        kind: &'q str,
        namespace: Option<&'q str>,
    ) -> impl Iterator<Item = &'s Arc<Value>> + use<'s, 'q> {
        self.objects
            .iter()
            .filter(move |((k, ns, _), _)| k == kind && namespace.is_none_or(|n| n == ns))
            .map(|(_, v)| v)
    }

    /// Keys and objects of a kind after `after` (exclusive), in key order, for paging:
    /// a seek, not a scan, so that paging through a big kind costs each page its size.
    pub(crate) fn page<'s>(
        &'s self,
        kind: &str,
        namespace: Option<&str>,
        after: Option<&ObjectKey>,
    ) -> impl Iterator<Item = (&'s ObjectKey, &'s Value)> + use<'s> {
        // Keys sort by (kind, namespace, name): the first of the page's range has the
        // empty name ("" namespace too for a cluster-wide list).
        let first = key(kind, namespace, "");
        let lower = match after {
            Some(after) if *after >= first => Bound::Excluded(after.clone()),
            _ => Bound::Included(first),
        };
        let (kind, namespace) = (kind.to_string(), namespace.map(str::to_string));
        self.objects
            .range((lower, Bound::Unbounded))
            .take_while(move |((k, ns, _), _)| {
                *k == kind && namespace.as_ref().is_none_or(|n| n == ns)
            })
            .map(|(key, v)| (key, v.as_ref()))
    }

    /// Creates or replaces an object (the test's back door: no precondition). The
    /// object must carry `apiVersion`, `kind` and `metadata.name` of a served kind.
    /// Returns it as stored.
    pub fn put(&mut self, object: Value) -> Value {
        let (kind, namespace, name) = self
            .identify(&object)
            .unwrap_or_else(|e| panic!("FakeApiServer::put: {e}"));
        let key = key(&kind, namespace.as_deref(), &name);
        let previous = self.objects.get(&key).cloned();
        self.write(key, object, previous.as_deref())
    }

    /// Changes an object in place (bumping its resourceVersion), as a concurrent
    /// writer would. `None` if it does not exist.
    pub fn modify(
        &mut self,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
        change: impl FnOnce(&mut Value),
    ) -> Option<Value> {
        let key = key(kind, namespace, name);
        let previous = self.objects.get(&key)?.clone();
        let mut object = Value::clone(&previous);
        change(&mut object);
        Some(self.write(key, object, Some(&previous)))
    }

    /// Deletes an object; returns it as it was stored. Its watches get a DELETED event
    /// with the object as last stored and the deletion's resourceVersion.
    pub fn remove(&mut self, kind: &str, namespace: Option<&str>, name: &str) -> Option<Value> {
        let key = key(kind, namespace, name);
        let removed = self.objects.remove(&key)?;
        self.revision += 1;
        let mut last = Value::clone(&removed);
        last["metadata"]["resourceVersion"] = self.revision.to_string().into();
        self.record(
            key,
            EventType::Deleted,
            Arc::new(last),
            Some(removed.clone()),
        );
        Some(Arc::unwrap_or_clone(removed))
    }

    /// Forgets the history up to the current revision, as an etcd compaction does: a
    /// watch from an older resourceVersion is answered 410 Gone.
    pub fn compact(&mut self) {
        self.history.compact(self.revision);
    }

    /// Keeps the last `limit` changes (the oldest are forgotten, as by a compaction).
    pub fn set_history_limit(&mut self, limit: usize) {
        self.history.set_limit(limit);
    }

    /// The oldest resourceVersion a watch can start from (older ones are compacted).
    pub fn compacted_revision(&self) -> u64 {
        self.history.compacted()
    }

    /// Records a change (the store's current revision) and sends it to the open
    /// watches.
    fn record(
        &mut self,
        key: ObjectKey,
        event_type: EventType,
        object: Arc<Value>,
        previous: Option<Arc<Value>>,
    ) {
        let event = Arc::new(Event {
            revision: self.revision,
            key,
            event_type,
            object,
            previous,
        });
        self.watchers.dispatch(&event);
        self.history.push(event);
    }

    /// Stores `object` under `key` as the API server would: identity fields kept from
    /// `previous` (uid, creationTimestamp), a new resourceVersion, namespace filled in;
    /// for custom resources, `metadata.generation` (1 on create, or as given by a test's
    /// `put`; one more whenever anything but metadata and status changes).
    pub(crate) fn write(
        &mut self,
        key: ObjectKey,
        mut object: Value,
        previous: Option<&Value>,
    ) -> Value {
        self.revision += 1;
        let (kind, namespace, name) = &key;
        let resource_type = self.type_of_kind(kind).cloned();
        if !object.is_object() {
            object = json!({});
        }
        if let Some(t) = &resource_type {
            object["apiVersion"] = t.api_version().into();
            object["kind"] = t.kind.into();
        }
        if !object.get("metadata").is_some_and(Value::is_object) {
            object["metadata"] = json!({});
        }
        let uid = match previous.and_then(|p| p.pointer("/metadata/uid")).cloned() {
            Some(uid) => uid,
            None => {
                self.uids += 1;
                Value::String(format!("00000000-0000-4000-8000-{:012x}", self.uids))
            }
        };
        let created = previous
            .and_then(|p| p.pointer("/metadata/creationTimestamp"))
            .cloned()
            .unwrap_or_else(|| Value::String(now()));
        let metadata = &mut object["metadata"];
        metadata["name"] = name.as_str().into();
        if !namespace.is_empty() {
            metadata["namespace"] = namespace.as_str().into();
        }
        metadata["uid"] = uid;
        metadata["creationTimestamp"] = created;
        if resource_type.as_ref().is_some_and(|t| !t.builtin) {
            let generation = match previous {
                Some(previous) => {
                    let before = generation_of(previous);
                    if spec_of(previous) == spec_of(&object) {
                        before
                    } else {
                        before + 1
                    }
                }
                None => object
                    .pointer("/metadata/generation")
                    .and_then(Value::as_i64)
                    .unwrap_or(1),
            };
            object["metadata"]["generation"] = generation.into();
        }
        let metadata = &mut object["metadata"];
        metadata["resourceVersion"] = self.revision.to_string().into();
        let stored = Arc::new(object);
        let replaced = self.objects.insert(key.clone(), stored.clone());
        let event_type = match replaced {
            Some(_) => EventType::Modified,
            None => EventType::Added,
        };
        self.record(key, event_type, stored.clone(), replaced);
        Value::clone(&stored)
    }

    /// (kind, namespace, name) of an object given by a test; the namespace defaults to
    /// "default" for namespaced kinds.
    fn identify(&self, object: &Value) -> Result<(String, Option<String>, String), String> {
        let kind = object
            .get("kind")
            .and_then(Value::as_str)
            .ok_or("the object has no kind")?;
        let resource_type = self
            .type_of_kind(kind)
            .ok_or_else(|| format!("kind {kind:?} is not served (installed kinds only)"))?;
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .ok_or("the object has no metadata.name")?;
        let namespace = resource_type.namespaced.then(|| {
            object
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or("default")
                .to_string()
        });
        Ok((kind.to_string(), namespace, name.to_string()))
    }
}

fn generation_of(object: &Value) -> i64 {
    object
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(1)
}

/// Everything the generation counts: the object without metadata and status.
fn spec_of(object: &Value) -> Value {
    let mut rest = object.clone();
    if let Value::Object(map) = &mut rest {
        map.remove("metadata");
        map.remove("status");
        map.remove("apiVersion");
        map.remove("kind");
    }
    rest
}

pub(crate) fn key(kind: &str, namespace: Option<&str>, name: &str) -> ObjectKey {
    (
        kind.to_string(),
        namespace.unwrap_or("").to_string(),
        name.to_string(),
    )
}

/// RFC 3339 in seconds, as Kubernetes writes `metav1.Time`.
pub(crate) fn now() -> String {
    Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}
