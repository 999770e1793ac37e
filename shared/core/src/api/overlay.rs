//! Karpenter's `karpenter.sh/v1alpha1` NodeOverlay: a price (`price`, absolute, or
//! `priceAdjustment`, signed absolute or percent) and extra extended resources
//! (`capacity`) for the instance types and offerings its requirements select, ordered by
//! `weight`. Parsing checks what the CRD and Karpenter's runtime validation check, each
//! problem naming its field path; what overlays do to prices and capacity, and which of
//! them conflict, is `crate::overlay`.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde_json::Value;

pub use super::kind::{NODE_OVERLAY_API_VERSION, NODE_OVERLAY_KIND};
use super::labels::{label_key_problem, normalize_label_key};
use super::model::{NodeRequirement, Operator};
use super::nodepool::{RequirementRules, requirements};
use super::raw;
use super::report::{Report, deserialize_value};
use super::{Document, Problem};
use crate::resources::{RawQuantity, Resources};
use crate::well_known::LABEL_NODEPOOL;

/// The one condition of a NodeOverlay's status.
pub const VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";

/// Resources an overlay may not set: a node's own (Karpenter's well-known resources).
pub const RESTRICTED_RESOURCES: [&str; 4] = ["cpu", "memory", "ephemeral-storage", "pods"];

/// A validated NodeOverlay.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeOverlay {
    pub name: String,
    /// `spec.weight`, 0 when unset; higher overlays win.
    pub weight: i32,
    pub requirements: Vec<NodeRequirement>,
    /// `spec.price` or `spec.priceAdjustment` (never both).
    pub price: Option<PriceChange>,
    /// `spec.capacity`: extended resources set on every selected type, milli-units.
    pub capacity: BTreeMap<String, i64>,
}

/// A NodeOverlay read from the cluster that breaks a rule: it applies to nothing and
/// its status says why (`ValidationSucceeded=False`, reason `RuntimeValidation`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidOverlay {
    pub name: String,
    pub message: String,
}

/// A NodeOverlay as read from a cluster: valid, or why not.
pub type ReadOverlay = Result<NodeOverlay, InvalidOverlay>;

/// How an overlay changes an offering's price.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PriceChange {
    /// `price: "0.25"`: this price, whatever the offering's.
    Price(f64),
    /// `priceAdjustment: "-0.05"`: added to the price (never below 0).
    Add(f64),
    /// `priceAdjustment: "-30%"`: a percentage of the price added (never below 0).
    Percent(f64),
}

impl PriceChange {
    /// `spec.price`: an unsigned decimal (`^\d+(\.\d+)?$`).
    pub fn parse_price(text: &str) -> Option<PriceChange> {
        let (int, frac) = match text.split_once('.') {
            Some((i, f)) => (i, Some(f)),
            None => (text, None),
        };
        let ok = all_digits(int) && frac.is_none_or(all_digits);
        if !ok {
            return None;
        }
        text.parse().ok().map(PriceChange::Price)
    }

    /// `spec.priceAdjustment`: `+0.5`/`-0.05` (signed absolute), `+10%` (any increase),
    /// `-15%` (a decrease of at most 99.99…%, or exactly `-100%`).
    pub fn parse_adjustment(text: &str) -> Option<PriceChange> {
        let (negative, rest) = match text.as_bytes().first() {
            Some(b'+') => (false, &text[1..]),
            Some(b'-') => (true, &text[1..]),
            _ => return None,
        };
        let sign = if negative { -1.0 } else { 1.0 };
        if let Some(number) = rest.strip_suffix('%') {
            let ok = if negative {
                number == "100" || {
                    let (int, frac) = match number.split_once('.') {
                        Some((i, f)) => (i, Some(f)),
                        None => (number, None),
                    };
                    (1..=2).contains(&int.len()) && all_digits(int) && frac.is_none_or(all_digits)
                }
            } else {
                loose_decimal(number)
            };
            return ok
                .then(|| number.parse::<f64>().ok())
                .flatten()
                .map(|v| PriceChange::Percent(sign * v));
        }
        loose_decimal(rest)
            .then(|| rest.parse::<f64>().ok())
            .flatten()
            .map(|v| PriceChange::Add(sign * v))
    }

    /// The price of an offering priced `base` under this change (Karpenter's
    /// `AdjustedPrice`: adjustments never go below zero).
    pub fn apply(self, base: f64) -> f64 {
        let adjusted = match self {
            PriceChange::Price(p) => return p,
            PriceChange::Add(d) => base + d,
            PriceChange::Percent(p) => base * (1.0 + p / 100.0),
        };
        adjusted.max(0.0)
    }
}

impl fmt::Display for PriceChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PriceChange::Price(p) => write!(f, "price {p}"),
            PriceChange::Add(d) => write!(f, "price {d:+}"),
            PriceChange::Percent(p) => write!(f, "price {p:+}%"),
        }
    }
}

/// Non-empty and only ASCII digits.
fn all_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// `\d*\.?\d+`: digits, optionally with one dot that has digits after it.
fn loose_decimal(s: &str) -> bool {
    match s.split_once('.') {
        Some((int, frac)) => (int.is_empty() || all_digits(int)) && all_digits(frac),
        None => all_digits(s),
    }
}

#[derive(Debug, Deserialize)]
struct RawOverlay {
    spec: Option<RawSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawSpec {
    requirements: Option<Vec<RawRequirement>>,
    price_adjustment: Option<String>,
    price: Option<String>,
    capacity: Option<BTreeMap<String, RawQuantity>>,
    weight: Option<i64>,
}

/// A `NodeSelectorRequirement`: unlike a NodePool's, it has no `minValues`.
#[derive(Debug, Deserialize)]
struct RawRequirement {
    key: Option<String>,
    operator: Option<String>,
    values: Option<Vec<String>>,
}

/// A NodeOverlay's requirements, as the NodeOverlay CRD and Karpenter's runtime
/// validation check them: the NodePool rules, but a NodePool may be selected by name
/// (the one restricted label a NodePool's own requirements may not use), `NotIn` needs
/// a value too, and the number of values is not limited.
const OVERLAY_REQUIREMENTS: RequirementRules = RequirementRules {
    path: "spec.requirements",
    allowed_restricted: &[LABEL_NODEPOOL],
    need_values: &[Operator::In, Operator::NotIn],
    integer: "non-negative integer",
    max_values: None,
};

/// `NodeOverlay "name"`, or where the object is when it has no name.
pub fn overlay_label(value: &Value, place: impl FnOnce() -> String) -> String {
    match value.pointer("/metadata/name").and_then(Value::as_str) {
        Some(name) => format!("{NODE_OVERLAY_KIND} {name:?}"),
        None => format!("{NODE_OVERLAY_KIND} in {}", place()),
    }
}

/// Checks one NodeOverlay object against the CRD's rules and Karpenter's runtime
/// validation. `object` names it in the problems (see [`overlay_label`]).
pub fn parse_node_overlay(value: &Value, object: &str) -> Result<NodeOverlay, Vec<Problem>> {
    let mut problems = Vec::new();
    let mut report = Report::named(object.to_string(), &mut problems);
    let name = value
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .map(str::to_string);
    if name.is_none() {
        report.missing("metadata.name");
    }
    let Some(raw) = deserialize_value::<RawOverlay>(value, &mut report) else {
        return Err(problems);
    };
    let Some(spec) = raw.spec else {
        report.missing("spec");
        return Err(problems);
    };
    let requirements = match spec.requirements {
        None => {
            report.missing(OVERLAY_REQUIREMENTS.path);
            Vec::new()
        }
        Some(raw) => {
            let raw = raw
                .into_iter()
                .map(|r| raw::Requirement {
                    key: r.key,
                    operator: r.operator,
                    values: r.values,
                    min_values: None,
                })
                .collect();
            requirements(raw, &OVERLAY_REQUIREMENTS, &mut report)
                .into_iter()
                .map(|r| NodeRequirement {
                    key: normalize_label_key(&r.key).to_string(),
                    ..r
                })
                .collect()
        }
    };
    let price = match (spec.price, spec.price_adjustment) {
        (Some(_), Some(_)) => {
            report.add("spec", "cannot set both 'price' and 'priceAdjustment'");
            None
        }
        (Some(text), None) => {
            let parsed = PriceChange::parse_price(&text);
            if parsed.is_none() {
                report.add(
                    "spec.price",
                    format!("{text:?} is not a price (an unsigned decimal such as \"0.25\")"),
                );
            }
            parsed
        }
        (None, Some(text)) => {
            let parsed = PriceChange::parse_adjustment(&text);
            if parsed.is_none() {
                report.add(
                    "spec.priceAdjustment",
                    format!(
                        "{text:?} is not a price adjustment (a signed amount such as \"-0.05\", \"+10%\", or a decrease of at most \"-100%\")"
                    ),
                );
            }
            parsed
        }
        (None, None) => None,
    };
    let mut capacity = BTreeMap::new();
    for (resource, quantity) in spec.capacity.unwrap_or_default() {
        let path = format!("spec.capacity.{resource}");
        if RESTRICTED_RESOURCES.contains(&resource.as_str()) {
            report.add(
                path,
                format!(
                    "resource {resource:?} is restricted (an overlay adds extended resources, never {})",
                    RESTRICTED_RESOURCES.join(", ")
                ),
            );
            continue;
        }
        if resource.is_empty() || label_key_problem(&resource).is_some() {
            report.add(path, format!("{resource:?} is not a resource name"));
            continue;
        }
        match quantity.milli() {
            Ok(milli) if milli >= 0 => {
                capacity.insert(resource, milli);
            }
            Ok(_) => report.add(path, "must not be negative"),
            Err(e) => report.add(path, e.to_string()),
        }
    }
    let weight = match spec.weight {
        None => 0,
        Some(w) if (1..=10_000).contains(&w) => i32::try_from(w).unwrap_or(0),
        Some(w) => {
            report.add(
                "spec.weight",
                format!("must be between 1 and 10000, got {w}"),
            );
            0
        }
    };
    match name {
        Some(name) if report.is_clean() => Ok(NodeOverlay {
            name,
            weight,
            requirements,
            price,
            capacity,
        }),
        _ => Err(problems),
    }
}

/// Validates every NodeOverlay document: each one's rules, then names defined twice.
/// Returns the valid overlays and every problem, in document order.
pub(super) fn validate_overlays(docs: &[&Document]) -> (Vec<NodeOverlay>, Vec<Problem>) {
    let mut overlays = Vec::new();
    let mut problems = Vec::new();
    let mut first_seen: BTreeMap<String, String> = BTreeMap::new();
    for doc in docs {
        let object = overlay_label(&doc.value, || doc.label());
        match parse_node_overlay(&doc.value, &object) {
            Ok(o) => overlays.push(o),
            Err(p) => problems.extend(p),
        }
        if let Some(name) = doc.value.pointer("/metadata/name").and_then(Value::as_str) {
            match first_seen.get(name) {
                Some(first) => problems.push(Problem {
                    object,
                    path: "metadata.name".into(),
                    message: format!("defined more than once ({first} and {})", doc.label()),
                }),
                None => {
                    first_seen.insert(name.to_string(), doc.label());
                }
            }
        }
    }
    (overlays, problems)
}

/// The extra capacity an overlay sets, as resources.
pub fn capacity_resources(capacity: &BTreeMap<String, i64>) -> Resources {
    let mut r = Resources::new();
    for (name, milli) in capacity {
        r.set_milli(name, *milli);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn overlay(spec: Value) -> Value {
        json!({
            "apiVersion": NODE_OVERLAY_API_VERSION,
            "kind": NODE_OVERLAY_KIND,
            "metadata": {"name": "o"},
            "spec": spec,
        })
    }

    fn problems(spec: Value) -> Vec<String> {
        match parse_node_overlay(&overlay(spec), "NodeOverlay \"o\"") {
            Ok(o) => panic!("expected problems, got {o:?}"),
            Err(p) => p.iter().map(ToString::to_string).collect(),
        }
    }

    fn valid(spec: Value) -> NodeOverlay {
        parse_node_overlay(&overlay(spec), "NodeOverlay \"o\"").unwrap_or_else(|p| panic!("{p:?}"))
    }

    #[test]
    fn price_adjustments_read_as_karpenter_patterns_allow() {
        use PriceChange::*;
        for (text, want) in [
            ("+10%", Some(Percent(10.0))),
            ("-10%", Some(Percent(-10.0))),
            ("-99.5%", Some(Percent(-99.5))),
            ("-100%", Some(Percent(-100.0))),
            ("+150%", Some(Percent(150.0))),
            ("-0.05", Some(Add(-0.05))),
            ("+.5", Some(Add(0.5))),
            ("+1.2", Some(Add(1.2))),
            ("-101%", None),
            ("-150%", None),
            ("10%", None),
            ("0.5", None),
            ("+", None),
            ("+5.", None),
            ("+1e3", None),
        ] {
            assert_eq!(PriceChange::parse_adjustment(text), want, "{text}");
        }
        for (text, want) in [
            ("0.25", Some(Price(0.25))),
            ("3", Some(Price(3.0))),
            ("+42", None),
            (".5", None),
            ("42.", None),
            ("42%", None),
            ("3,14", None),
            ("1e10", None),
            ("0x42", None),
        ] {
            assert_eq!(PriceChange::parse_price(text), want, "{text}");
        }
    }

    #[test]
    fn adjusted_prices_never_go_below_zero_and_an_absolute_price_replaces() {
        assert!((PriceChange::Percent(-30.0).apply(0.2) - 0.14).abs() < 1e-12);
        assert_eq!(PriceChange::Add(-1.0).apply(0.2), 0.0);
        assert_eq!(PriceChange::Percent(-100.0).apply(0.2), 0.0);
        assert_eq!(PriceChange::Price(0.01).apply(5.0), 0.01);
    }

    #[test]
    fn a_valid_overlay_keeps_its_requirements_price_capacity_and_weight() {
        let o = valid(json!({
            "requirements": [
                {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["web"]},
                {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5"]},
            ],
            "priceAdjustment": "-30%",
            "capacity": {"hugepages-2Mi": "1Gi", "example.com/device": 2},
            "weight": 10,
        }));
        assert_eq!(o.weight, 10);
        assert_eq!(o.requirements.len(), 2);
        assert_eq!(o.price, Some(PriceChange::Percent(-30.0)));
        assert_eq!(o.capacity["hugepages-2Mi"], (1i64 << 30) * 1000);
        assert_eq!(o.capacity["example.com/device"], 2000);
        assert_eq!(valid(json!({"requirements": []})).weight, 0);
    }

    #[test]
    fn each_broken_rule_names_its_field_path() {
        let got = problems(json!({
            "requirements": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": ["a"]},
                {"key": "zone", "operator": "NotIn"},
                {"key": "x", "operator": "Gt", "values": ["-1"]},
                {"key": "y", "operator": "Bigger"},
            ],
            "price": "1",
            "priceAdjustment": "+1",
            "capacity": {"cpu": "1", "hugepages-2Mi": "lots"},
            "weight": 0,
        }));
        let want = [
            "NodeOverlay \"o\": spec.requirements[0].key: label \"kubernetes.io/hostname\" is restricted",
            "NodeOverlay \"o\": spec.requirements[1].values: operator NotIn needs at least one value",
            "NodeOverlay \"o\": spec.requirements[2].values[0]: expected a single non-negative integer, got \"-1\"",
            "NodeOverlay \"o\": spec.requirements[3].operator: unknown operator \"Bigger\" (expected one of In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte, Lte)",
            "NodeOverlay \"o\": spec: cannot set both 'price' and 'priceAdjustment'",
            "NodeOverlay \"o\": spec.capacity.cpu: resource \"cpu\" is restricted (an overlay adds extended resources, never cpu, memory, ephemeral-storage, pods)",
        ];
        for w in want {
            assert!(got.iter().any(|g| g == w), "missing {w:?} in {got:#?}");
        }
        assert!(
            got.iter()
                .any(|g| g.starts_with("NodeOverlay \"o\": spec.capacity.hugepages-2Mi: ")),
            "{got:#?}"
        );
        assert!(
            got.iter()
                .any(|g| g == "NodeOverlay \"o\": spec.weight: must be between 1 and 10000, got 0"),
            "{got:#?}"
        );
    }

    #[test]
    fn a_missing_spec_or_requirements_is_required() {
        assert_eq!(
            problems(json!({"price": "1"})),
            ["NodeOverlay \"o\": spec.requirements: required"]
        );
        let mut no_spec = overlay(json!({}));
        no_spec.as_object_mut().map(|m| m.remove("spec"));
        let got = parse_node_overlay(&no_spec, "NodeOverlay \"o\"").unwrap_err();
        assert_eq!(got[0].to_string(), "NodeOverlay \"o\": spec: required");
    }

    #[test]
    fn the_karpenter_domain_is_restricted_but_for_the_nodepool_and_capacity_type() {
        valid(json!({"requirements": [
            {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["a"]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
        ]}));
        let got = problems(json!({"requirements": [
            {"key": "karpenter.sh/other", "operator": "Exists"},
        ]}));
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(got[0].starts_with("NodeOverlay \"o\": spec.requirements[0].key: label domain \"karpenter.sh\" is restricted"), "{got:?}");
    }
}
