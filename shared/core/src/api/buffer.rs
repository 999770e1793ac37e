//! `autoscaling.x-k8s.io/v1beta1` CapacityBuffer and the `v1` PodTemplate it may name,
//! read from manifest files beside NodePools: the CRD's schema and CEL rules (with the
//! API server's messages) and its defaults. What a buffer does is
//! [`crate::capacity_buffer`]'s.

use k8s_openapi::api::core::v1 as core;
use serde_json::Value;

use super::{Document, Problem};
use crate::cluster::Pod;
use crate::resources::{Resources, parse_milli};
use crate::snapshot::chunk_pod;

pub const CAPACITY_BUFFER_API_VERSION: &str = "autoscaling.x-k8s.io/v1beta1";
pub const CAPACITY_BUFFER_KIND: &str = "CapacityBuffer";
pub const POD_TEMPLATE_API_VERSION: &str = "v1";
pub const POD_TEMPLATE_KIND: &str = "PodTemplate";
/// `spec.provisioningStrategy`'s default, the only strategy there is.
pub const ACTIVE_CAPACITY: &str = "buffer.x-k8s.io/active-capacity";
/// The API group a `scalableRef` without one means (Karpenter resolves `""` as `apps`).
pub const APPS_GROUP: &str = "apps";
/// The kinds a `scalableRef` may name.
pub const SCALABLE_KINDS: [&str; 3] = ["Deployment", "StatefulSet", "ReplicaSet"];
/// The priority of a virtual pod (Karpenter's `VirtualPodPriority`, `math.MinInt32`).
pub const VIRTUAL_POD_PRIORITY: i32 = i32::MIN;
/// At most this many virtual pods per buffer: `limits` alone over a small pod can ask
/// for billions. Karpenter has no bound; a buffer this large is a mistake, and planning
/// it would stall every tick.
pub const MAX_VIRTUAL_PODS: i32 = 10_000;

/// A validated CapacityBuffer, with the API server's defaults applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapacityBuffer {
    pub namespace: String,
    pub name: String,
    pub generation: i64,
    /// `None` when neither ref is set: schema-valid, refused at resolution
    /// (`ResolutionFailed`), as Karpenter's controller does.
    pub source: Option<BufferSource>,
    pub replicas: Option<i32>,
    pub percentage: Option<i32>,
    pub limits: Option<Resources>,
    pub provisioning_strategy: String,
}

/// Where a buffer's chunk shape comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BufferSource {
    PodTemplate {
        name: String,
    },
    Scalable {
        /// As written: `""` means `apps`.
        api_group: String,
        kind: String,
        name: String,
    },
}

/// A `v1` PodTemplate, its template read as a pod (volumes that need a claim dropped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodTemplate {
    pub namespace: String,
    pub name: String,
    pub generation: i64,
    pub template: Pod,
}

impl CapacityBuffer {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// Whether a document is a CapacityBuffer or a PodTemplate (read beside NodePools).
pub fn is_buffer_document(value: &Value) -> bool {
    let api_version = value.get("apiVersion").and_then(Value::as_str);
    let kind = value.get("kind").and_then(Value::as_str);
    matches!(
        (api_version, kind),
        (
            Some(CAPACITY_BUFFER_API_VERSION),
            Some(CAPACITY_BUFFER_KIND)
        ) | (Some(POD_TEMPLATE_API_VERSION), Some(POD_TEMPLATE_KIND))
    )
}

fn is_capacity_buffer(value: &Value) -> bool {
    value.get("kind").and_then(Value::as_str) == Some(CAPACITY_BUFFER_KIND)
}

/// `CapacityBuffer "ns/name"`, `PodTemplate "ns/name"`, or where it is when unnamed.
pub fn object_label(doc: &Document) -> String {
    let kind = doc
        .value
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or(CAPACITY_BUFFER_KIND);
    match doc.value.pointer("/metadata/name").and_then(Value::as_str) {
        Some(name) => format!("{kind} \"{}/{name}\"", namespace_of(&doc.value)),
        None => format!("{kind} in {}", doc.label()),
    }
}

fn namespace_of(value: &Value) -> &str {
    value
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .filter(|ns| !ns.is_empty())
        .unwrap_or("default")
}

const SPEC_FIELDS: [&str; 6] = [
    "provisioningStrategy",
    "podTemplateRef",
    "scalableRef",
    "replicas",
    "percentage",
    "limits",
];

/// What the API server's schema refuses in a CapacityBuffer beyond what
/// [`validate_buffers`] checks: unknown fields (strict reading only).
pub fn buffer_schema_problems(doc: &Document) -> Vec<Problem> {
    if !is_capacity_buffer(&doc.value) {
        return Vec::new();
    }
    let object = object_label(doc);
    let mut problems = Vec::new();
    let unknown = |path: String, key: &str, known: &[&str]| Problem {
        object: object.clone(),
        path,
        message: format!(
            "unknown field {key:?} (CapacityBuffer's CRD has {})",
            known.join(", ")
        ),
    };
    if let Some(Value::Object(spec)) = doc.value.get("spec") {
        for key in spec.keys().filter(|k| !SPEC_FIELDS.contains(&k.as_str())) {
            problems.push(unknown(format!("spec.{key}"), key, &SPEC_FIELDS));
        }
        for (field, known) in [
            ("podTemplateRef", &["name"][..]),
            ("scalableRef", &["apiGroup", "kind", "name"][..]),
        ] {
            if let Some(Value::Object(r)) = spec.get(field) {
                for key in r.keys().filter(|k| !known.contains(&k.as_str())) {
                    problems.push(unknown(format!("spec.{field}.{key}"), key, known));
                }
            }
        }
    }
    problems
}

/// Validates the CapacityBuffer and PodTemplate documents as the API server does with
/// the CRD (its schema and CEL rules, with their messages) and reads them.
pub fn validate_buffers(
    docs: &[&Document],
) -> (Vec<CapacityBuffer>, Vec<PodTemplate>, Vec<Problem>) {
    let mut buffers = Vec::new();
    let mut templates = Vec::new();
    let mut problems = Vec::new();
    for doc in docs {
        if is_capacity_buffer(&doc.value) {
            match read_buffer(doc) {
                Ok(b) => buffers.push(b),
                Err(mut p) => problems.append(&mut p),
            }
        } else {
            match read_pod_template(doc) {
                Ok(t) => templates.push(t),
                Err(p) => problems.push(p),
            }
        }
    }
    for (i, b) in buffers.iter().enumerate() {
        if buffers[..i].iter().any(|o| o.key() == b.key()) {
            problems.push(Problem {
                object: format!("CapacityBuffer \"{}\"", b.key()),
                path: "metadata.name".into(),
                message: "defined twice".into(),
            });
        }
    }
    (buffers, templates, problems)
}

fn read_buffer(doc: &Document) -> Result<CapacityBuffer, Vec<Problem>> {
    let object = object_label(doc);
    let value = &doc.value;
    let mut problems = Vec::new();
    let mut problem = |path: &str, message: String| {
        problems.push(Problem {
            object: object.clone(),
            path: path.to_string(),
            message,
        })
    };
    let name = value.pointer("/metadata/name").and_then(Value::as_str);
    if name.is_none_or(str::is_empty) {
        problem("metadata.name", "required".into());
    }
    let empty = serde_json::Map::new();
    let spec = match value.get("spec") {
        Some(Value::Object(spec)) => spec,
        None | Some(Value::Null) => {
            problem("spec", "required".into());
            &empty
        }
        Some(other) => {
            problem("spec", format!("expected a mapping, found {other}"));
            &empty
        }
    };
    let mut required_name = |path: &str, v: Option<&Value>| -> Option<String> {
        match v {
            Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
            Some(Value::String(_)) => {
                problem(path, "must be at least 1 character long".into());
                None
            }
            None | Some(Value::Null) => {
                problem(path, "required".into());
                None
            }
            Some(other) => {
                problem(path, format!("expected a string, found {other}"));
                None
            }
        }
    };
    let template_ref = spec.get("podTemplateRef").filter(|v| !v.is_null());
    let scalable_ref = spec.get("scalableRef").filter(|v| !v.is_null());
    let template_name =
        template_ref.map(|r| required_name("spec.podTemplateRef.name", r.get("name")));
    let scalable = scalable_ref.map(|r| {
        let kind = required_name("spec.scalableRef.kind", r.get("kind"));
        let name = required_name("spec.scalableRef.name", r.get("name"));
        let api_group = r.get("apiGroup").and_then(Value::as_str).unwrap_or("");
        (api_group.to_string(), kind, name)
    });
    let mut count = |field: &str| -> Option<i32> {
        let path = format!("spec.{field}");
        match spec.get(field) {
            None | Some(Value::Null) => None,
            Some(v) => match v.as_i64().map(i32::try_from) {
                Some(Ok(n)) if n >= 0 => Some(n),
                Some(Ok(n)) => {
                    problem(&path, format!("{n} should be greater than or equal to 0"));
                    None
                }
                _ => {
                    problem(&path, format!("{v} is not a 32-bit integer"));
                    None
                }
            },
        }
    };
    let replicas = count("replicas");
    let percentage = count("percentage");
    let limits = match spec.get("limits") {
        None | Some(Value::Null) => None,
        Some(Value::Object(map)) => {
            let mut limits = Resources::new();
            for (resource, quantity) in map {
                let path = format!("spec.limits.{resource}");
                let text = match quantity {
                    Value::String(s) => s.clone(),
                    Value::Number(n) => n.to_string(),
                    other => {
                        problem(&path, format!("{other} is not a quantity"));
                        continue;
                    }
                };
                match parse_milli(&text) {
                    Ok(milli) => limits.set_milli(resource, milli),
                    Err(e) => problem(&path, format!("{text:?} is not a quantity: {e}")),
                }
            }
            Some(limits)
        }
        Some(other) => {
            problem("spec.limits", format!("expected a mapping, found {other}"));
            None
        }
    };
    // The CRD's CEL rules, with the API server's messages.
    if template_ref.is_some() && scalable_ref.is_some() {
        problem(
            "spec",
            "You must define either PodTemplateRef or ScalableRef, but not both".into(),
        );
    }
    if template_ref.is_some() && spec.get("replicas").is_none() && spec.get("limits").is_none() {
        problem(
            "spec",
            "If podTemplateRef is set, replicas or limits must also be set".into(),
        );
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let source = match (template_name, scalable) {
        (Some(Some(name)), _) => Some(BufferSource::PodTemplate { name }),
        (None, Some((api_group, Some(kind), Some(name)))) => Some(BufferSource::Scalable {
            api_group,
            kind,
            name,
        }),
        _ => None,
    };
    Ok(CapacityBuffer {
        namespace: namespace_of(value).to_string(),
        name: name.unwrap_or_default().to_string(),
        generation: value
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(1),
        source,
        replicas,
        percentage,
        limits,
        provisioning_strategy: spec
            .get("provisioningStrategy")
            .and_then(Value::as_str)
            .unwrap_or(ACTIVE_CAPACITY)
            .to_string(),
    })
}

fn read_pod_template(doc: &Document) -> Result<PodTemplate, Problem> {
    let object = object_label(doc);
    let problem = |path: &str, message: String| Problem {
        object: object.clone(),
        path: path.to_string(),
        message,
    };
    let template: core::PodTemplate = serde_json::from_value(doc.value.clone())
        .map_err(|e| problem("", format!("not a PodTemplate: {e}")))?;
    let name = template.metadata.name.clone().unwrap_or_default();
    if name.is_empty() {
        return Err(problem("metadata.name", "required".into()));
    }
    let namespace = namespace_of(&doc.value).to_string();
    let spec = template
        .template
        .ok_or_else(|| problem("template", "required".into()))?;
    let pod = chunk_pod(&namespace, &name, spec).map_err(|e| problem("template", e))?;
    Ok(PodTemplate {
        generation: template.metadata.generation.unwrap_or(1),
        namespace,
        name,
        template: pod,
    })
}
