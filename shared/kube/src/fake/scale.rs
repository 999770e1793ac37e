//! The `/scale` subresource of the kinds whose CRD declares one — Karpenter's NodePool:
//! `subresources.scale` with `specReplicasPath: .spec.replicas` and
//! `statusReplicasPath: .status.nodes` — answered as an `autoscaling/v1` Scale, as a
//! real API server serves it for a custom resource (`kubectl scale nodepool`).
//!
//! - GET: the Scale, `spec.replicas` and `status.replicas` read from the object's
//!   paths (0 when absent);
//! - PUT (a Scale) and PATCH (merge or JSON patch over the Scale, what `kubectl scale`
//!   sends): `spec.replicas` is written into the object at its spec path; a stale
//!   `metadata.resourceVersion` is a conflict, a negative count is refused, and so is
//!   a NodePool that has no `spec.replicas` (the CRD's rule: a pool never changes
//!   between static and dynamic).

use http::Method;
use serde_json::{Value, json};

use super::answer::{Answer, json_answer, status_answer};
use super::patch;
use super::serve::{Call, Route};
use super::store::{ResourceType, Store, key};

/// Where a kind keeps the replicas its scale subresource reads and writes.
struct ScalePaths {
    spec: &'static str,
    status: &'static str,
}

fn scale_paths(resource: &ResourceType) -> Option<ScalePaths> {
    (resource.group == "karpenter.sh" && resource.kind == "NodePool").then_some(ScalePaths {
        spec: "/spec/replicas",
        status: "/status/nodes",
    })
}

/// Whether `route` is a `/scale` request the fake serves.
pub(super) fn serves(route: &Route) -> bool {
    route.subresource.as_deref() == Some("scale") && scale_paths(&route.resource).is_some()
}

/// A request to `.../{name}/scale` (see [`serves`]).
pub(super) fn handle(store: &mut Store, route: &Route, name: &str, call: &Call) -> Answer {
    let Some(paths) = scale_paths(&route.resource) else {
        return not_found(route, name);
    };
    let Some(current) = store
        .get(route.resource.kind, route.namespace.as_deref(), name)
        .cloned()
    else {
        return not_found(route, name);
    };
    let scale = scale_of(&current, &paths);
    let wanted = match *call.method {
        Method::GET => return json_answer(200, &scale),
        Method::PUT => match call.body.filter(|b| b.is_object()) {
            Some(body) => body.clone(),
            None => return status_answer(400, "BadRequest", "the body is not a JSON object", None),
        },
        Method::PATCH => {
            let Some(body) = call.body else {
                return status_answer(400, "BadRequest", "the patch is not JSON", None);
            };
            let media_type = call
                .content_type
                .unwrap_or("")
                .split(';')
                .next()
                .unwrap_or("")
                .trim();
            let mut patched = scale.clone();
            match media_type {
                "application/merge-patch+json" => patch::merge(&mut patched, body),
                "application/json-patch+json" => {
                    if let Err(why) = patch::json_patch(&mut patched, body) {
                        return status_answer(422, "Invalid", &why, None);
                    }
                }
                other => {
                    return status_answer(
                        415,
                        "UnsupportedMediaType",
                        &format!("the fake does not apply {other:?} patches to a scale"),
                        None,
                    );
                }
            }
            patched
        }
        _ => {
            return status_answer(
                405,
                "MethodNotAllowed",
                &format!(
                    "{} {} is not implemented by the fake API server",
                    call.method, call.path
                ),
                None,
            );
        }
    };
    if wanted.pointer("/metadata/name").and_then(Value::as_str) != Some(name) {
        return status_answer(
            400,
            "BadRequest",
            "the name of the object does not match the name on the URL",
            None,
        );
    }
    if let Some(rv) = wanted
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .filter(|rv| !rv.is_empty())
        && Some(rv)
            != current
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
    {
        return status_answer(
            409,
            "Conflict",
            &format!(
                "Operation cannot be fulfilled on {}.{} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                route.resource.plural, route.resource.group
            ),
            None,
        );
    }
    let replicas = match wanted.pointer("/spec/replicas") {
        None | Some(Value::Null) => 0,
        Some(v) => match v.as_i64() {
            Some(n) => n,
            None => {
                return invalid(
                    route,
                    name,
                    &format!("spec.replicas: Invalid value: {v}: must be an integer"),
                );
            }
        },
    };
    if replicas < 0 {
        return invalid(
            route,
            name,
            &format!(
                "spec.replicas: Invalid value: {replicas}: must be greater than or equal to 0"
            ),
        );
    }
    if current.pointer(paths.spec).is_none() {
        // Karpenter's CEL rule `has(self.replicas) == has(oldSelf.replicas)`.
        return invalid(
            route,
            name,
            "spec: Invalid value: \"object\": Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes",
        );
    }
    let mut updated = current.clone();
    if let Some(slot) = updated.pointer_mut(paths.spec) {
        *slot = json!(replicas);
    }
    let stored = store.write(
        key(route.resource.kind, route.namespace.as_deref(), name),
        updated,
        Some(&current),
    );
    json_answer(200, &scale_of(&stored, &paths))
}

/// The `autoscaling/v1` Scale of `object`.
fn scale_of(object: &Value, paths: &ScalePaths) -> Value {
    let count = |path: &str| object.pointer(path).and_then(Value::as_i64).unwrap_or(0);
    let mut metadata = json!({});
    for field in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(v) = object.pointer(&format!("/metadata/{field}")) {
            metadata[field] = v.clone();
        }
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": metadata,
        "spec": {"replicas": count(paths.spec)},
        "status": {"replicas": count(paths.status)},
    })
}

fn not_found(route: &Route, name: &str) -> Answer {
    status_answer(
        404,
        "NotFound",
        &format!(
            "{}.{} \"{name}\" not found",
            route.resource.plural, route.resource.group
        ),
        Some(json!({"name": name, "group": route.resource.group, "kind": route.resource.plural})),
    )
}

fn invalid(route: &Route, name: &str, message: &str) -> Answer {
    status_answer(
        422,
        "Invalid",
        &format!(
            "{}.{} \"{name}\" is invalid: {message}",
            route.resource.kind, route.resource.group
        ),
        Some(json!({"name": name, "group": route.resource.group, "kind": route.resource.kind})),
    )
}
