//! The three patch types kube-rs sends (`Patch::Merge`, `Patch::Strategic`,
//! `Patch::Json`), applied to JSON objects.

use serde_json::{Map, Value};

/// RFC 7386 JSON merge patch: objects merge, `null` deletes, anything else (lists
/// included) replaces.
pub fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let target = target.as_object_mut().expect("made an object above");
    for (key, value) in patch {
        if value.is_null() {
            target.remove(key);
        } else {
            merge(target.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

/// The merge key of the lists Kubernetes merges by key in a strategic merge patch
/// (`patchStrategy: merge`) that a node or pod patch may touch. Other lists replace.
fn merge_key(field: &str) -> Option<&'static str> {
    match field {
        "taints" => Some("key"),
        "conditions" | "addresses" => Some("type"),
        "containers" | "initContainers" | "ephemeralContainers" | "volumes" | "env" => Some("name"),
        "ownerReferences" => Some("uid"),
        _ => None,
    }
}

/// A strategic merge patch, as far as nodewright's patches go: like a merge patch, but
/// the lists Kubernetes declares with a merge key merge element by element, and an
/// element `{"$patch": "delete", <key>: ...}` removes that element. Other directives
/// (`$retainKeys`, `$setElementOrder`, `$deleteFromPrimitiveList`) are not modelled.
pub fn strategic(target: &mut Value, patch: &Value) {
    strategic_field(target, patch, None);
}

fn strategic_field(target: &mut Value, patch: &Value, field: Option<&str>) {
    match (patch, field.and_then(merge_key)) {
        (Value::Array(elements), Some(key)) if target.is_array() => {
            let list = target.as_array_mut().expect("checked above");
            for element in elements {
                let id = element.get(key);
                let position = id.and_then(|id| list.iter().position(|e| e.get(key) == Some(id)));
                let delete = element.get("$patch").and_then(Value::as_str) == Some("delete");
                match (position, delete) {
                    (Some(i), true) => {
                        list.remove(i);
                    }
                    (None, true) => {}
                    (Some(i), false) => strategic_field(&mut list[i], element, None),
                    (None, false) => list.push(element.clone()),
                }
            }
        }
        (Value::Object(fields), _) => {
            if !target.is_object() {
                *target = Value::Object(Map::new());
            }
            let target = target.as_object_mut().expect("made an object above");
            for (name, value) in fields {
                if value.is_null() {
                    target.remove(name);
                } else {
                    strategic_field(
                        target.entry(name.clone()).or_insert(Value::Null),
                        value,
                        Some(name),
                    );
                }
            }
        }
        _ => *target = patch.clone(),
    }
}

/// RFC 6902 JSON patch (add, remove, replace, move, copy, test). `Err` names the
/// failing operation; the target is left unchanged then.
pub fn json_patch(target: &mut Value, operations: &Value) -> Result<(), String> {
    let operations = operations
        .as_array()
        .ok_or("a JSON patch must be an array of operations")?;
    let mut result = target.clone();
    for (index, op) in operations.iter().enumerate() {
        let fail = |why: &str| format!("operation {index}: {why}");
        let name = op
            .get("op")
            .and_then(Value::as_str)
            .ok_or_else(|| fail("no \"op\""))?;
        let path = op
            .get("path")
            .and_then(Value::as_str)
            .ok_or_else(|| fail("no \"path\""))?;
        let value = || op.get("value").cloned().ok_or_else(|| fail("no \"value\""));
        let from = || {
            op.get("from")
                .and_then(Value::as_str)
                .ok_or_else(|| fail("no \"from\""))
        };
        match name {
            "add" => add(&mut result, path, value()?).map_err(|e| fail(&e))?,
            "remove" => {
                remove(&mut result, path).map_err(|e| fail(&e))?;
            }
            "replace" => {
                remove(&mut result, path).map_err(|e| fail(&e))?;
                add(&mut result, path, value()?).map_err(|e| fail(&e))?;
            }
            "move" => {
                let moved = remove(&mut result, from()?).map_err(|e| fail(&e))?;
                add(&mut result, path, moved).map_err(|e| fail(&e))?;
            }
            "copy" => {
                let copied = result
                    .pointer(from()?)
                    .cloned()
                    .ok_or_else(|| fail("\"from\" does not exist"))?;
                add(&mut result, path, copied).map_err(|e| fail(&e))?;
            }
            "test" => {
                if result.pointer(path) != Some(&value()?) {
                    return Err(fail(&format!("test failed at {path:?}")));
                }
            }
            other => return Err(fail(&format!("unknown op {other:?}"))),
        }
    }
    *target = result;
    Ok(())
}

/// Splits a JSON pointer into its parent pointer and its last (unescaped) token.
fn split(path: &str) -> Result<(&str, String), String> {
    let slash = path
        .rfind('/')
        .ok_or_else(|| format!("{path:?} is not a JSON pointer"))?;
    let last = path[slash + 1..].replace("~1", "/").replace("~0", "~");
    Ok((&path[..slash], last))
}

fn add(target: &mut Value, path: &str, value: Value) -> Result<(), String> {
    if path.is_empty() {
        *target = value;
        return Ok(());
    }
    let (parent, last) = split(path)?;
    match target.pointer_mut(parent) {
        Some(Value::Object(map)) => {
            map.insert(last, value);
            Ok(())
        }
        Some(Value::Array(list)) => {
            let index = if last == "-" {
                list.len()
            } else {
                last.parse::<usize>()
                    .map_err(|_| format!("{last:?} is not an array index"))?
            };
            if index > list.len() {
                return Err(format!("index {index} is past the end of {parent:?}"));
            }
            list.insert(index, value);
            Ok(())
        }
        _ => Err(format!("{parent:?} does not exist")),
    }
}

fn remove(target: &mut Value, path: &str) -> Result<Value, String> {
    let (parent, last) = split(path)?;
    match target.pointer_mut(parent) {
        Some(Value::Object(map)) => map
            .remove(&last)
            .ok_or_else(|| format!("{path:?} does not exist")),
        Some(Value::Array(list)) => match last.parse::<usize>() {
            Ok(i) if i < list.len() => Ok(list.remove(i)),
            _ => Err(format!("{path:?} does not exist")),
        },
        _ => Err(format!("{parent:?} does not exist")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_merge_patch_replaces_lists_and_deletes_nulls() {
        let mut node = json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"taints": [{"key": "x"}]}});
        merge(
            &mut node,
            &json!({"metadata": {"labels": {"b": null, "c": "3"}}, "spec": {"taints": []}}),
        );
        assert_eq!(
            node,
            json!({"metadata": {"labels": {"a": "1", "c": "3"}}, "spec": {"taints": []}})
        );
    }

    #[test]
    fn a_strategic_patch_merges_taints_by_key() {
        let mut node = json!({"spec": {"taints": [{"key": "x", "effect": "NoSchedule"}, {"key": "y", "effect": "NoSchedule"}]}});
        strategic(
            &mut node,
            &json!({"spec": {"taints": [{"key": "z", "effect": "NoExecute"}, {"key": "x", "$patch": "delete"}]}}),
        );
        assert_eq!(
            node,
            json!({"spec": {"taints": [{"key": "y", "effect": "NoSchedule"}, {"key": "z", "effect": "NoExecute"}]}})
        );
    }

    #[test]
    fn a_json_patch_applies_all_or_nothing() {
        let mut node =
            json!({"metadata": {"labels": {"a/b": "1"}}, "spec": {"taints": [{"key": "x"}]}});
        json_patch(
            &mut node,
            &json!([
                {"op": "remove", "path": "/metadata/labels/a~1b"},
                {"op": "add", "path": "/spec/taints/-", "value": {"key": "y"}},
                {"op": "test", "path": "/spec/taints/0/key", "value": "x"},
            ]),
        )
        .unwrap();
        assert_eq!(
            node,
            json!({"metadata": {"labels": {}}, "spec": {"taints": [{"key": "x"}, {"key": "y"}]}})
        );
        let before = node.clone();
        let failed = json_patch(
            &mut node,
            &json!([{"op": "remove", "path": "/spec/taints/0"}, {"op": "test", "path": "/spec/unschedulable", "value": true}]),
        );
        assert!(failed.is_err());
        assert_eq!(node, before);
    }
}
