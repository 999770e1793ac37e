//! Requests to a resource (all but watches): list with selectors, pages and continue
//! tokens; get, create, replace and patch, of an object or its `/status`; delete; and
//! a pod's eviction, refused as the PodDisruptionBudgets in the store require.

use http::Method;
use serde_json::{Value, json};

use super::answer::{Answer, json_answer, status_answer};
use super::patch;
use super::scale;
use super::selector::Selectors;
use super::serve::{Call, Route, query_param};
use super::store::{ObjectKey, ResourceType, Store, key};

/// A request to a resource, but a watch.
pub(super) fn handle_resource(store: &mut Store, route: &Route, call: &Call) -> Answer {
    match (call.method, &route.name, route.subresource.as_deref()) {
        (&Method::GET, None, None) => list(store, route, call.query),
        (&Method::GET, Some(name), None) => get(store, route, name),
        (&Method::POST, None, None) => create(store, route, call.body),
        (&Method::PUT, Some(name), None) => replace(store, route, name, call.body),
        (&Method::PATCH, Some(name), None) => patch(
            store,
            route,
            name,
            call.content_type,
            call.body,
            Part::Object,
        ),
        (&Method::GET, Some(name), Some("status")) if route.resource.status_subresource => {
            get(store, route, name)
        }
        (&Method::PUT, Some(name), Some("status")) if route.resource.status_subresource => {
            replace_status(store, route, name, call.body)
        }
        (&Method::PATCH, Some(name), Some("status")) if route.resource.status_subresource => patch(
            store,
            route,
            name,
            call.content_type,
            call.body,
            Part::Status,
        ),
        (_, Some(name), Some("scale")) if scale::serves(route) => {
            scale::handle(store, route, name, call)
        }
        (&Method::DELETE, Some(name), None) => delete(store, route, name),
        (&Method::POST, Some(name), Some("eviction")) if route.resource.kind == "Pod" => match call
            .body
            .and_then(|b| b.pointer("/metadata/name"))
            .and_then(Value::as_str)
        {
            Some(named) if named != name => status_answer(
                400,
                "BadRequest",
                "name in URL does not match name in Eviction object",
                None,
            ),
            _ => evict(store, route, name),
        },
        _ => status_answer(
            405,
            "MethodNotAllowed",
            &format!(
                "{} {} is not implemented by the fake API server",
                call.method, call.path
            ),
            None,
        ),
    }
}

/// Continue tokens are opaque to clients; here, the revision of the list's first page
/// (every page answers it, as a real server's pages are one snapshot) and the last key
/// served, hex-encoded.
fn encode_continue(revision: u64, key: &ObjectKey) -> String {
    let raw = format!("{revision}\u{0}{}\u{0}{}\u{0}{}", key.0, key.1, key.2);
    raw.bytes().map(|b| format!("{b:02x}")).collect()
}

fn decode_continue(token: &str) -> Option<(u64, ObjectKey)> {
    if !token.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..token.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(token.get(i..i + 2)?, 16).ok())
        .collect();
    let raw = String::from_utf8(bytes?).ok()?;
    let mut parts = raw.split('\u{0}');
    let revision = parts.next()?.parse().ok()?;
    let key = (
        parts.next()?.into(),
        parts.next()?.into(),
        parts.next()?.into(),
    );
    Some((revision, key))
}

/// LIST, from the current state whatever `resourceVersion` asks (a real server serves
/// `resourceVersion=0` and `NotOlderThan` from its watch cache, as current as the fake;
/// an `Exact` one it reads from etcd at that revision — which the fake does not keep —
/// or answers 410 Expired when etcd compacted it, as the fake does). `limit` pages
/// whatever the resourceVersion (an older server ignores it with `resourceVersion=0`).
///
/// Every page of a list answers the first page's resourceVersion, as a real server's
/// do: a client that watches from it is replayed whatever changed while it paged (a
/// later page may already show some of those changes — the fake does not keep old
/// versions to serve a snapshot — which the replay repeats, harmlessly). A continue
/// token whose revision was compacted since is answered 410 Expired, as a real
/// server's is.
fn list(store: &Store, route: &Route, query: &str) -> Answer {
    if let Some(answer) = compacted_list(store, query) {
        return answer;
    }
    let selectors = match Selectors::parse(
        query_param(query, "fieldSelector"),
        query_param(query, "labelSelector"),
    ) {
        Ok(selectors) => selectors,
        Err(why) => return status_answer(400, "BadRequest", &why, None),
    };
    let resource = &route.resource;
    let (revision, after) = match query_param(query, "continue").filter(|t| !t.is_empty()) {
        Some(token) => match decode_continue(&token) {
            Some((revision, _)) if revision < store.compacted_revision() => {
                return expired_continue();
            }
            Some((revision, key)) => (revision, Some(key)),
            None => return status_answer(400, "BadRequest", "continue key is not valid", None),
        },
        None => (store.revision(), None),
    };
    let limit = query_param(query, "limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0)
        .unwrap_or(usize::MAX);
    let mut matching = store
        .page(resource.kind, route.namespace.as_deref(), after.as_ref())
        .filter(|(_, item)| selectors.matches(item));
    let mut items = Vec::new();
    let mut last = None;
    for (key, item) in matching.by_ref().take(limit) {
        let mut item = item.clone();
        if resource.builtin
            && let Value::Object(map) = &mut item
        {
            map.remove("apiVersion");
            map.remove("kind");
        }
        items.push(item);
        last = Some(key);
    }
    let remaining = matching.count();
    let mut metadata = json!({ "resourceVersion": revision.to_string() });
    if remaining > 0
        && let Some(last) = last
    {
        metadata["continue"] = encode_continue(revision, last).into();
        metadata["remainingItemCount"] = remaining.into();
    }
    json_answer(
        200,
        &json!({
            "kind": format!("{}List", resource.kind),
            "apiVersion": resource.api_version(),
            "metadata": metadata,
            "items": items,
        }),
    )
}

/// The real server's answer to a continue token older than its compaction.
fn expired_continue() -> Answer {
    status_answer(
        410,
        "Expired",
        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
        None,
    )
}

/// A LIST at an `Exact` resourceVersion the history no longer reaches: the real
/// server's 410 (etcd compacted that revision).
fn compacted_list(store: &Store, query: &str) -> Option<Answer> {
    if query_param(query, "resourceVersionMatch").as_deref() != Some("Exact") {
        return None;
    }
    let rv = query_param(query, "resourceVersion")?.parse::<u64>().ok()?;
    (rv < store.compacted_revision()).then(|| {
        status_answer(
            410,
            "Expired",
            "The resourceVersion for the provided list is too old.",
            None,
        )
    })
}

fn delete(store: &mut Store, route: &Route, name: &str) -> Answer {
    match store.remove(route.resource.kind, route.namespace.as_deref(), name) {
        Some(object) => json_answer(200, &object),
        None => not_found(route, name),
    }
}

/// The eviction subresource: the budget check, then the pod is deleted.
fn evict(store: &mut Store, route: &Route, name: &str) -> Answer {
    let namespace = route.namespace.as_deref();
    let Some(object) = store.get("Pod", namespace, name).cloned() else {
        return not_found(route, name);
    };
    let pods: Vec<nodewright_core::cluster::Pod> = store
        .list("Pod", namespace)
        .into_iter()
        .filter_map(|v| serde_json::from_value(v.clone()).ok())
        .filter_map(|p| nodewright_core::snapshot::pod_from_k8s(&p).ok())
        .collect();
    let pdbs: Vec<nodewright_core::cluster::PodDisruptionBudget> = store
        .list("PodDisruptionBudget", namespace)
        .into_iter()
        .filter_map(|v| serde_json::from_value(v.clone()).ok())
        .filter_map(|b| nodewright_core::snapshot::pdb_from_k8s(&b).ok())
        .collect();
    let pod = serde_json::from_value(object)
        .ok()
        .and_then(|p| nodewright_core::snapshot::pod_from_k8s(&p).ok());
    if let Some(pod) = pod
        && !nodewright_core::cluster::eviction_allowed(&pod, &pods, &pdbs)
    {
        let blocking = pdbs
            .iter()
            .find(|b| b.selects(&pod) && b.disruptions_allowed(&pods) == 0)
            .map(|b| b.name.clone())
            .unwrap_or_default();
        return status_answer(
            429,
            "TooManyRequests",
            "Cannot evict pod as it would violate the pod's disruption budget.",
            Some(json!({
                "causes": [{
                    "reason": "DisruptionBudget",
                    "message": format!("The disruption budget {blocking} does not allow a disruption now"),
                }],
            })),
        );
    }
    store.remove("Pod", namespace, name);
    json_answer(
        201,
        &json!({ "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201 }),
    )
}

fn not_found(route: &Route, name: &str) -> Answer {
    status_answer(
        404,
        "NotFound",
        &format!("{} {name:?} not found", qualified(&route.resource)),
        Some(json!({ "name": name, "group": route.resource.group, "kind": route.resource.plural })),
    )
}

/// `nodes`, `daemonsets.apps`, `nodepools.karpenter.sh`, as messages name resources.
fn qualified(resource: &ResourceType) -> String {
    if resource.group.is_empty() {
        resource.plural.to_string()
    } else {
        format!("{}.{}", resource.plural, resource.group)
    }
}

fn conflict(route: &Route, name: &str) -> Answer {
    status_answer(
        409,
        "Conflict",
        &format!(
            "Operation cannot be fulfilled on {} {name:?}: the object has been modified; please apply your changes to the latest version and try again",
            qualified(&route.resource)
        ),
        Some(json!({ "name": name, "group": route.resource.group, "kind": route.resource.plural })),
    )
}

fn get(store: &Store, route: &Route, name: &str) -> Answer {
    match store.get(route.resource.kind, route.namespace.as_deref(), name) {
        Some(object) => json_answer(200, object),
        None => not_found(route, name),
    }
}

/// The object's namespace must match the path's (namespaced kinds); fills it in.
/// `Some` is the refusal.
fn check_namespace(route: &Route, object: &mut Value) -> Option<Answer> {
    let namespace = route.namespace.as_ref()?;
    match object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
    {
        Some(ns) if ns != namespace => Some(status_answer(
            400,
            "BadRequest",
            "the namespace of the provided object does not match the namespace sent on the request",
            None,
        )),
        _ => {
            object["metadata"]["namespace"] = namespace.as_str().into();
            None
        }
    }
}

fn create(store: &mut Store, route: &Route, body: Option<&Value>) -> Answer {
    let Some(mut object) = body.filter(|b| b.is_object()).cloned() else {
        return status_answer(400, "BadRequest", "the body is not a JSON object", None);
    };
    if route.resource.namespaced && route.namespace.is_none() {
        return status_answer(
            405,
            "MethodNotAllowed",
            "create a namespaced object under /namespaces/{ns}/",
            None,
        );
    }
    if !object.get("metadata").is_some_and(Value::is_object) {
        object["metadata"] = json!({});
    }
    if let Some(answer) = check_namespace(route, &mut object) {
        return answer;
    }
    let name = match object.pointer("/metadata/name").and_then(Value::as_str) {
        Some(name) if !name.is_empty() => name.to_string(),
        _ => match object
            .pointer("/metadata/generateName")
            .and_then(Value::as_str)
        {
            Some(prefix) => format!("{prefix}{:05x}", store.revision() & 0xfffff),
            None => {
                return status_answer(
                    422,
                    "Invalid",
                    "metadata.name: Required value: name or generateName is required",
                    None,
                );
            }
        },
    };
    let key = key(route.resource.kind, route.namespace.as_deref(), &name);
    if store
        .get(&key.0, route.namespace.as_deref(), &name)
        .is_some()
    {
        return status_answer(
            409,
            "AlreadyExists",
            &format!("{} {name:?} already exists", qualified(&route.resource)),
            Some(
                json!({ "name": name, "group": route.resource.group, "kind": route.resource.plural }),
            ),
        );
    }
    if let Some(meta) = object["metadata"].as_object_mut() {
        // Set by the server, never by the client.
        meta.remove("resourceVersion");
        meta.remove("uid");
        meta.remove("generation");
    }
    // A custom resource with a status subresource starts without one (built-in kinds
    // each reset it their own way; not modelled).
    if route.resource.status_subresource
        && !route.resource.builtin
        && let Value::Object(map) = &mut object
    {
        map.remove("status");
    }
    let stored = store.write(key, object, None);
    json_answer(201, &stored)
}

fn resource_version(object: &Value) -> Option<&str> {
    object
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .filter(|rv| !rv.is_empty())
}

fn replace(store: &mut Store, route: &Route, name: &str, body: Option<&Value>) -> Answer {
    let Some(mut object) = body.filter(|b| b.is_object()).cloned() else {
        return status_answer(400, "BadRequest", "the body is not a JSON object", None);
    };
    if object.pointer("/metadata/name").and_then(Value::as_str) != Some(name) {
        return status_answer(
            400,
            "BadRequest",
            "the name of the object does not match the name on the URL",
            None,
        );
    }
    if let Some(answer) = check_namespace(route, &mut object) {
        return answer;
    }
    let Some(current) = store
        .get(route.resource.kind, route.namespace.as_deref(), name)
        .cloned()
    else {
        return not_found(route, name);
    };
    if let Some(rv) = resource_version(&object)
        && Some(rv) != resource_version(&current)
    {
        return conflict(route, name);
    }
    let object = Part::Object.written(&route.resource, &current, object);
    let stored = store.write(
        key(route.resource.kind, route.namespace.as_deref(), name),
        object,
        Some(&current),
    );
    json_answer(200, &stored)
}

/// `PUT .../{name}/status`: the body's `.status` replaces the stored one; nothing
/// else of the body counts (a stale `metadata.resourceVersion` is still a conflict).
fn replace_status(store: &mut Store, route: &Route, name: &str, body: Option<&Value>) -> Answer {
    let Some(object) = body.filter(|b| b.is_object()) else {
        return status_answer(400, "BadRequest", "the body is not a JSON object", None);
    };
    if object.pointer("/metadata/name").and_then(Value::as_str) != Some(name) {
        return status_answer(
            400,
            "BadRequest",
            "the name of the object does not match the name on the URL",
            None,
        );
    }
    let Some(current) = store
        .get(route.resource.kind, route.namespace.as_deref(), name)
        .cloned()
    else {
        return not_found(route, name);
    };
    if let Some(rv) = resource_version(object)
        && Some(rv) != resource_version(&current)
    {
        return conflict(route, name);
    }
    let updated = Part::Status.written(&route.resource, &current, object.clone());
    let stored = store.write(
        key(route.resource.kind, route.namespace.as_deref(), name),
        updated,
        Some(&current),
    );
    json_answer(200, &stored)
}

/// Which part of an object a write may change.
#[derive(Clone, Copy)]
enum Part {
    /// The object itself: everything but `.status` when the kind has a status
    /// subresource.
    Object,
    /// The `/status` subresource: `.status` only.
    Status,
}

impl Part {
    /// What is stored when `wanted` is written over `current` through this part.
    fn written(self, resource: &ResourceType, current: &Value, wanted: Value) -> Value {
        let (mut base, from) = match self {
            Part::Object if !resource.status_subresource => return wanted,
            Part::Object => (wanted, current),
            Part::Status => (current.clone(), &wanted),
        };
        match from.get("status") {
            Some(status) => base["status"] = status.clone(),
            None => {
                if let Value::Object(map) = &mut base {
                    map.remove("status");
                }
            }
        }
        base
    }
}

fn patch(
    store: &mut Store,
    route: &Route,
    name: &str,
    content_type: Option<&str>,
    body: Option<&Value>,
    part: Part,
) -> Answer {
    let Some(body) = body else {
        return status_answer(400, "BadRequest", "the patch is not JSON", None);
    };
    let Some(current) = store
        .get(route.resource.kind, route.namespace.as_deref(), name)
        .cloned()
    else {
        return not_found(route, name);
    };
    let media_type = content_type
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim();
    let mut patched = current.clone();
    match media_type {
        "application/merge-patch+json" => patch::merge(&mut patched, body),
        "application/strategic-merge-patch+json" => {
            if !route.resource.builtin {
                return status_answer(
                    415,
                    "UnsupportedMediaType",
                    "strategic merge patch is not supported for custom resources",
                    None,
                );
            }
            patch::strategic(&mut patched, body)
        }
        "application/json-patch+json" => {
            if let Err(why) = patch::json_patch(&mut patched, body) {
                return status_answer(422, "Invalid", &why, None);
            }
        }
        other => {
            return status_answer(
                415,
                "UnsupportedMediaType",
                &format!("the fake does not apply {other:?} patches"),
                None,
            );
        }
    }
    // A resourceVersion the patch sets is a precondition (JSON patch: only if changed).
    if let Some(rv) = resource_version(&patched)
        && Some(rv) != resource_version(&current)
    {
        return conflict(route, name);
    }
    if patched.pointer("/metadata/name").and_then(Value::as_str) != Some(name) {
        return status_answer(
            422,
            "Invalid",
            "metadata.name: Invalid value: field is immutable",
            None,
        );
    }
    let patched = part.written(&route.resource, &current, patched);
    let stored = store.write(
        key(route.resource.kind, route.namespace.as_deref(), name),
        patched,
        Some(&current),
    );
    json_answer(200, &stored)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip() {
        let key = (
            "Pod".to_string(),
            "kube-system".to_string(),
            "coredns-1".to_string(),
        );
        assert_eq!(decode_continue(&encode_continue(42, &key)), Some((42, key)));
        assert_eq!(decode_continue("zz"), None);
    }
}
