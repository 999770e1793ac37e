//! The fake's objects: JSON values keyed by (kind, namespace, name), with the
//! bookkeeping a real API server does on write (resourceVersion, uid,
//! creationTimestamp) and the resource types it serves.

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

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
            group: "karpenter.k8s.aws",
            version: "v1",
            kind: "EC2NodeClass",
            plural: "ec2nodeclasses",
            namespaced: false,
            builtin: false,
            status_subresource: true,
        },
    ]
}

/// (kind, namespace — "" for cluster-scoped, name)
pub type ObjectKey = (String, String, String);

/// The objects and the resource types of a fake API server.
#[derive(Debug)]
pub struct Store {
    types: Vec<ResourceType>,
    objects: BTreeMap<ObjectKey, Value>,
    /// Like etcd's revision: bumped by every write, the list's resourceVersion.
    revision: u64,
    uids: u64,
}

impl Default for Store {
    fn default() -> Self {
        Store {
            types: default_resource_types(),
            objects: BTreeMap::new(),
            revision: 1,
            uids: 0,
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
    /// Its objects are deleted, as deleting a CRD does.
    pub fn uninstall(&mut self, kind: &str) {
        self.types.retain(|t| t.kind != kind);
        self.objects.retain(|(k, _, _), _| k != kind);
    }

    /// Serves a kind again (or a new one).
    pub fn install(&mut self, resource_type: ResourceType) {
        self.types.retain(|t| t.kind != resource_type.kind);
        self.types.push(resource_type);
    }

    pub fn get(&self, kind: &str, namespace: Option<&str>, name: &str) -> Option<&Value> {
        self.objects.get(&key(kind, namespace, name))
    }

    /// Objects of a kind, in (namespace, name) order; `namespace` filters.
    pub fn list(&self, kind: &str, namespace: Option<&str>) -> Vec<&Value> {
        self.objects
            .iter()
            .filter(|((k, ns, _), _)| k == kind && namespace.is_none_or(|n| n == ns))
            .map(|(_, v)| v)
            .collect()
    }

    /// Keys and objects of a kind after `after` (exclusive), for paging.
    pub(crate) fn page(
        &self,
        kind: &str,
        namespace: Option<&str>,
        after: Option<&ObjectKey>,
    ) -> Vec<(ObjectKey, Value)> {
        self.objects
            .iter()
            .filter(|((k, ns, _), _)| k == kind && namespace.is_none_or(|n| n == ns))
            .filter(|(key, _)| after.is_none_or(|a| *key > a))
            .map(|(key, v)| (key.clone(), v.clone()))
            .collect()
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
        self.write(key, object, previous.as_ref())
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
        let mut object = previous.clone();
        change(&mut object);
        Some(self.write(key, object, Some(&previous)))
    }

    pub fn remove(&mut self, kind: &str, namespace: Option<&str>, name: &str) -> Option<Value> {
        let removed = self.objects.remove(&key(kind, namespace, name));
        if removed.is_some() {
            self.revision += 1;
        }
        removed
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
        self.objects.insert(key, object.clone());
        object
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
