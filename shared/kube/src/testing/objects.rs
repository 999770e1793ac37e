//! Objects as JSON, read and written with a test's admin client: what a test puts in the
//! cluster before the code under test reads it, and what it reads back after.
//!
//! Writes use strict field validation, so a fixture with a field the schema lacks fails
//! the test instead of being pruned silently. `put` writes what the fixture says,
//! status included (through `/status` where the kind has it: a create ignores status).

use http::{Method, Request};
use kube::Client;
use serde_json::{Value, json};

/// A kind the helpers know how to reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KindInfo {
    pub kind: &'static str,
    /// `v1`, `apps/v1`, `karpenter.sh/v1`...
    pub api_version: &'static str,
    pub plural: &'static str,
    pub namespaced: bool,
    /// It has a `/status` subresource (a create or an update of the object ignores
    /// `.status`).
    pub status: bool,
}

const fn kind(
    kind: &'static str,
    api_version: &'static str,
    plural: &'static str,
    namespaced: bool,
    status: bool,
) -> KindInfo {
    KindInfo {
        kind,
        api_version,
        plural,
        namespaced,
        status,
    }
}

/// Every kind the tests read or write.
pub const KINDS: &[KindInfo] = &[
    kind("Node", "v1", "nodes", false, true),
    kind("Pod", "v1", "pods", true, true),
    kind("Namespace", "v1", "namespaces", false, true),
    kind("Event", "v1", "events", true, false),
    kind("ConfigMap", "v1", "configmaps", true, false),
    kind("Secret", "v1", "secrets", true, false),
    kind("ServiceAccount", "v1", "serviceaccounts", true, false),
    kind("PodTemplate", "v1", "podtemplates", true, false),
    kind(
        "PersistentVolumeClaim",
        "v1",
        "persistentvolumeclaims",
        true,
        true,
    ),
    kind("PersistentVolume", "v1", "persistentvolumes", false, true),
    kind(
        "StorageClass",
        "storage.k8s.io/v1",
        "storageclasses",
        false,
        false,
    ),
    kind("CSINode", "storage.k8s.io/v1", "csinodes", false, false),
    kind("DaemonSet", "apps/v1", "daemonsets", true, true),
    kind("Deployment", "apps/v1", "deployments", true, true),
    kind("ReplicaSet", "apps/v1", "replicasets", true, true),
    kind("StatefulSet", "apps/v1", "statefulsets", true, true),
    kind("Service", "v1", "services", true, true),
    kind(
        "ReplicationController",
        "v1",
        "replicationcontrollers",
        true,
        true,
    ),
    kind(
        "HorizontalPodAutoscaler",
        "autoscaling/v2",
        "horizontalpodautoscalers",
        true,
        true,
    ),
    kind(
        "PodDisruptionBudget",
        "policy/v1",
        "poddisruptionbudgets",
        true,
        true,
    ),
    kind("Lease", "coordination.k8s.io/v1", "leases", true, false),
    kind("NodePool", "karpenter.sh/v1", "nodepools", false, true),
    kind("NodeClaim", "karpenter.sh/v1", "nodeclaims", false, true),
    kind(
        "NodeOverlay",
        "karpenter.sh/v1alpha1",
        "nodeoverlays",
        false,
        true,
    ),
    kind(
        "EC2NodeClass",
        "karpenter.k8s.aws/v1",
        "ec2nodeclasses",
        false,
        true,
    ),
    kind(
        "CapacityBuffer",
        "autoscaling.x-k8s.io/v1beta1",
        "capacitybuffers",
        true,
        true,
    ),
    kind(
        "ClusterRole",
        "rbac.authorization.k8s.io/v1",
        "clusterroles",
        false,
        false,
    ),
    kind(
        "ClusterRoleBinding",
        "rbac.authorization.k8s.io/v1",
        "clusterrolebindings",
        false,
        false,
    ),
    kind("Role", "rbac.authorization.k8s.io/v1", "roles", true, false),
    kind(
        "RoleBinding",
        "rbac.authorization.k8s.io/v1",
        "rolebindings",
        true,
        false,
    ),
    kind(
        "CustomResourceDefinition",
        "apiextensions.k8s.io/v1",
        "customresourcedefinitions",
        false,
        true,
    ),
    kind(
        "FlowSchema",
        "flowcontrol.apiserver.k8s.io/v1",
        "flowschemas",
        false,
        true,
    ),
];

/// The kind named `kind` ("Node", "NodePool"...). Panics on one the table lacks: add it.
pub fn kind_info(kind: &str) -> KindInfo {
    *KINDS
        .iter()
        .find(|k| k.kind == kind)
        .unwrap_or_else(|| panic!("testing::objects knows no kind {kind:?}: add it to KINDS"))
}

impl KindInfo {
    /// The collection's path: all namespaces when `namespace` is `None` for a namespaced kind.
    pub fn collection(&self, namespace: Option<&str>) -> String {
        self.collection_at(self.api_version, namespace)
    }

    /// One object's path (`namespace` defaults to "default" for a namespaced kind).
    pub fn object(&self, namespace: Option<&str>, name: &str) -> String {
        self.object_at(self.api_version, namespace, name)
    }

    /// [`KindInfo::collection`] at another version of the kind's group.
    fn collection_at(&self, api_version: &str, namespace: Option<&str>) -> String {
        let base = if api_version.contains('/') {
            format!("/apis/{api_version}")
        } else {
            format!("/api/{api_version}")
        };
        match namespace {
            Some(ns) if self.namespaced => format!("{base}/namespaces/{ns}/{}", self.plural),
            _ => format!("{base}/{}", self.plural),
        }
    }

    fn object_at(&self, api_version: &str, namespace: Option<&str>, name: &str) -> String {
        let ns = self.namespaced.then(|| namespace.unwrap_or("default"));
        format!("{}/{name}", self.collection_at(api_version, ns))
    }
}

/// A request's failure as the test sees it: the HTTP status (0 when the server was not
/// reached) and the answer.
#[derive(Debug)]
pub struct Refused {
    pub code: u16,
    pub reason: String,
    pub message: String,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for Refused {}

/// Sends one JSON request.
pub async fn send(
    client: &Client,
    method: Method,
    path: &str,
    content_type: &str,
    body: Option<&Value>,
) -> Result<Value, Refused> {
    let bytes = body
        .map(|b| serde_json::to_vec(b).expect("JSON"))
        .unwrap_or_default();
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::CONTENT_TYPE, content_type)
        .header(http::header::ACCEPT, "application/json")
        .body(bytes)
        .expect("a request");
    client
        .request::<Value>(request)
        .await
        .map_err(|error| match error {
            kube::Error::Api(status) => Refused {
                code: status.code,
                reason: status.reason.clone(),
                message: status.message.clone(),
            },
            other => Refused {
                code: 0,
                reason: "Unreachable".into(),
                message: other.to_string(),
            },
        })
}

fn name_of(object: &Value) -> (Option<String>, String) {
    let namespace = object["metadata"]["namespace"].as_str().map(str::to_string);
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_else(|| panic!("an object without metadata.name: {object}"))
        .to_string();
    (namespace, name)
}

/// The object's kind, and the version it is written at.
fn info_of(object: &Value) -> (KindInfo, String) {
    let kind = object["kind"]
        .as_str()
        .unwrap_or_else(|| panic!("an object without kind: {object}"));
    let info = kind_info(kind);
    let version = object["apiVersion"]
        .as_str()
        .unwrap_or(info.api_version)
        .to_string();
    (info, version)
}

/// Creates `object`, or replaces the object of that name; then writes its `.status`
/// when it has one and the kind keeps status apart. Returns the object as stored.
pub async fn put(client: &Client, object: Value) -> Result<Value, Refused> {
    let (info, api_version) = info_of(&object);
    let (namespace, name) = name_of(&object);
    let mut object = object;
    if info.namespaced && namespace.is_none() {
        object["metadata"]["namespace"] = json!("default");
    }
    // An object read back from the server may be put again: what the server keeps for
    // itself is not the test's to write (a create refuses a resourceVersion).
    if let Some(metadata) = object["metadata"].as_object_mut() {
        for field in [
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "generation",
            "managedFields",
        ] {
            metadata.remove(field);
        }
    }
    let ns = object["metadata"]["namespace"].as_str().map(str::to_string);
    let status = object.get("status").cloned();
    let strict = "?fieldValidation=Strict";
    let collection = info.collection_at(&api_version, ns.as_deref());
    let path = info.object_at(&api_version, ns.as_deref(), &name);
    let mut stored = match send(
        client,
        Method::POST,
        &format!("{collection}{strict}"),
        "application/json",
        Some(&object),
    )
    .await
    {
        Ok(created) => created,
        Err(e) if e.code == 409 => loop {
            let current = send(client, Method::GET, &path, "application/json", None).await?;
            let mut replacement = object.clone();
            replacement["metadata"]["resourceVersion"] =
                current["metadata"]["resourceVersion"].clone();
            match send(
                client,
                Method::PUT,
                &format!("{path}{strict}"),
                "application/json",
                Some(&replacement),
            )
            .await
            {
                Ok(replaced) => break replaced,
                Err(e) if e.code == 409 => continue,
                Err(e) => return Err(e),
            }
        },
        Err(e) => return Err(e),
    };
    if let (true, Some(status)) = (info.status, status) {
        loop {
            let mut with_status = stored.clone();
            with_status["status"] = status.clone();
            match send(
                client,
                Method::PUT,
                &format!("{path}/status{strict}"),
                "application/json",
                Some(&with_status),
            )
            .await
            {
                Ok(written) => {
                    stored = written;
                    break;
                }
                Err(e) if e.code == 409 => {
                    stored = send(client, Method::GET, &path, "application/json", None).await?;
                }
                Err(e) => return Err(e),
            }
        }
    }
    Ok(stored)
}

/// The object, or `None` when there is none.
pub async fn get(
    client: &Client,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
) -> Result<Option<Value>, Refused> {
    let path = kind_info(kind).object(namespace, name);
    match send(client, Method::GET, &path, "application/json", None).await {
        Ok(object) => Ok(Some(object)),
        Err(e) if e.code == 404 => Ok(None),
        Err(e) => Err(e),
    }
}

/// Every object of the kind (all namespaces), in the server's order, each with its
/// `apiVersion` and `kind` (a list's items of built-in kinds lack them).
pub async fn list(client: &Client, kind: &str) -> Result<Vec<Value>, Refused> {
    let info = kind_info(kind);
    let mut items = Vec::new();
    let mut next = String::new();
    loop {
        let mut path = format!("{}?limit=500", info.collection(None));
        if !next.is_empty() {
            path.push_str(&format!("&continue={next}"));
        }
        let page = send(client, Method::GET, &path, "application/json", None).await?;
        for mut item in page["items"].as_array().cloned().unwrap_or_default() {
            item["apiVersion"] = json!(info.api_version);
            item["kind"] = json!(info.kind);
            items.push(item);
        }
        match page["metadata"]["continue"].as_str() {
            Some(token) if !token.is_empty() => next = token.to_string(),
            _ => return Ok(items),
        }
    }
}

/// Reads the object, lets `change` edit it, and writes it back (the object, and its
/// status through `/status` when that changed), again on a conflict. Returns the object
/// as stored, or `None` when there is none.
pub async fn modify(
    client: &Client,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
    mut change: impl FnMut(&mut Value),
) -> Result<Option<Value>, Refused> {
    let info = kind_info(kind);
    let path = info.object(namespace, name);
    loop {
        let Some(current) = get(client, kind, namespace, name).await? else {
            return Ok(None);
        };
        let mut changed = current.clone();
        change(&mut changed);
        let mut stored = current.clone();
        let mut body = changed.clone();
        // The object as it was but for `change`'s edits outside status (a kind without
        // status, a ClusterRole, has none: a `"status": null` would be an unknown field).
        match current.get("status") {
            Some(status) => body["status"] = status.clone(),
            None => {
                if let Some(map) = body.as_object_mut() {
                    map.remove("status");
                }
            }
        }
        if body != current {
            match send(
                client,
                Method::PUT,
                &format!("{path}?fieldValidation=Strict"),
                "application/json",
                Some(&body),
            )
            .await
            {
                Ok(written) => stored = written,
                Err(e) if e.code == 409 => continue,
                Err(e) => return Err(e),
            }
        }
        if info.status && changed["status"] != current["status"] {
            let mut body = stored.clone();
            body["status"] = changed["status"].clone();
            match send(
                client,
                Method::PUT,
                &format!("{path}/status?fieldValidation=Strict"),
                "application/json",
                Some(&body),
            )
            .await
            {
                Ok(written) => stored = written,
                Err(e) if e.code == 409 => continue,
                Err(e) => return Err(e),
            }
        }
        return Ok(Some(stored));
    }
}

/// Deletes the object at once (no grace period; its dependents in the background) and
/// returns it as it was, or `None` when there was none.
pub async fn remove(
    client: &Client,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
) -> Result<Option<Value>, Refused> {
    let Some(current) = get(client, kind, namespace, name).await? else {
        return Ok(None);
    };
    let path = kind_info(kind).object(namespace, name);
    let options = json!({"apiVersion": "v1", "kind": "DeleteOptions",
        "gracePeriodSeconds": 0, "propagationPolicy": "Background"});
    match send(
        client,
        Method::DELETE,
        &path,
        "application/json",
        Some(&options),
    )
    .await
    {
        Ok(_) => Ok(Some(current)),
        Err(e) if e.code == 404 => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_follow_the_api_groups_and_scopes() {
        assert_eq!(kind_info("Node").object(None, "n"), "/api/v1/nodes/n");
        assert_eq!(
            kind_info("Pod").object(None, "p"),
            "/api/v1/namespaces/default/pods/p"
        );
        assert_eq!(kind_info("Pod").collection(None), "/api/v1/pods");
        assert_eq!(
            kind_info("NodePool").object(Some("ignored"), "default"),
            "/apis/karpenter.sh/v1/nodepools/default"
        );
        assert_eq!(
            kind_info("PodDisruptionBudget").collection(Some("web")),
            "/apis/policy/v1/namespaces/web/poddisruptionbudgets"
        );
    }
}
