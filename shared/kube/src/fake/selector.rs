//! `fieldSelector` and `labelSelector`, as list and watch requests carry them.
//!
//! Field selectors: equality terms only (`spec.nodeName=x`, `a==b`, `a!=b`, ANDed with
//! commas), over any field path — a real server accepts only the few fields each kind
//! indexes, and answers 400 for the others; the fake trusts its callers.
//!
//! Label selectors: the whole grammar but `gt`/`lt` — `key=value`, `key==value`,
//! `key!=value` (also true when the label is absent), `key in (a,b)`, `key notin (a,b)`
//! (also true when absent), `key`, `!key` — ANDed with commas. A selector that does not
//! parse is refused with 400 BadRequest, as a real server refuses it.

use serde_json::Value;

/// The selectors of one list or watch request.
#[derive(Debug, Clone, Default)]
pub(crate) struct Selectors {
    fields: String,
    labels: Vec<Requirement>,
}

impl Selectors {
    /// From the raw (percent-decoded) parameters; `Err` says why the label selector
    /// does not parse.
    pub(crate) fn parse(fields: Option<String>, labels: Option<String>) -> Result<Self, String> {
        Ok(Selectors {
            fields: fields.unwrap_or_default(),
            labels: parse_labels(labels.as_deref().unwrap_or(""))?,
        })
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.fields.is_empty() && self.labels.is_empty()
    }

    pub(crate) fn matches(&self, object: &Value) -> bool {
        field_selector_matches(&self.fields, object)
            && self.labels.iter().all(|r| r.matches(object))
    }
}

/// `spec.nodeName=x,metadata.namespace!=y`: every term must hold; a missing field is "".
pub(crate) fn field_selector_matches(selector: &str, object: &Value) -> bool {
    selector.split(',').filter(|t| !t.is_empty()).all(|term| {
        let (path, want, equal) = match term.split_once("!=") {
            Some((p, v)) => (p, v, false),
            None => match term.split_once("==").or_else(|| term.split_once('=')) {
                Some((p, v)) => (p, v, true),
                None => return false,
            },
        };
        let pointer = format!("/{}", path.replace('.', "/"));
        let got = object
            .pointer(&pointer)
            .and_then(Value::as_str)
            .unwrap_or("");
        (got == want) == equal
    })
}

/// One term of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

impl Requirement {
    fn matches(&self, object: &Value) -> bool {
        let label = |key: &str| {
            object
                .pointer("/metadata/labels")
                .and_then(|labels| labels.get(key))
                .and_then(Value::as_str)
        };
        match self {
            Requirement::Equals(key, value) => label(key) == Some(value.as_str()),
            Requirement::NotEquals(key, value) => label(key) != Some(value.as_str()),
            Requirement::In(key, values) => {
                label(key).is_some_and(|v| values.iter().any(|w| w == v))
            }
            Requirement::NotIn(key, values) => {
                label(key).is_none_or(|v| values.iter().all(|w| w != v))
            }
            Requirement::Exists(key) => label(key).is_some(),
            Requirement::DoesNotExist(key) => label(key).is_none(),
        }
    }
}

fn parse_labels(selector: &str) -> Result<Vec<Requirement>, String> {
    split_terms(selector)
        .into_iter()
        .map(str::trim)
        .filter(|term| !term.is_empty())
        .map(parse_requirement)
        .collect()
}

/// The selector's terms: split at the commas outside `( )` (a set's values are
/// comma-separated too).
fn split_terms(selector: &str) -> Vec<&str> {
    let mut terms = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in selector.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                terms.push(&selector[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&selector[start..]);
    terms
}

fn parse_requirement(term: &str) -> Result<Requirement, String> {
    let invalid = || format!("unable to parse requirement: {term:?}");
    if let Some(open) = term.find('(') {
        let values = term[open + 1..]
            .strip_suffix(')')
            .ok_or_else(invalid)?
            .split(',')
            .map(|v| checked(v.trim()).map(str::to_string))
            .collect::<Result<Vec<_>, _>>()?;
        if values.iter().all(String::is_empty) {
            return Err(format!("{term:?}: a set of values can't be empty"));
        }
        let (key, operator) = term[..open]
            .trim_end()
            .rsplit_once(char::is_whitespace)
            .ok_or_else(invalid)?;
        let key = checked_key(key.trim())?;
        return match operator {
            "in" => Ok(Requirement::In(key, values)),
            "notin" => Ok(Requirement::NotIn(key, values)),
            _ => Err(invalid()),
        };
    }
    if let Some(key) = term.strip_prefix('!') {
        return Ok(Requirement::DoesNotExist(checked_key(key.trim())?));
    }
    if let Some((key, value)) = term.split_once("!=") {
        return Ok(Requirement::NotEquals(
            checked_key(key.trim())?,
            checked(value.trim())?.to_string(),
        ));
    }
    if let Some((key, value)) = term.split_once("==").or_else(|| term.split_once('=')) {
        return Ok(Requirement::Equals(
            checked_key(key.trim())?,
            checked(value.trim())?.to_string(),
        ));
    }
    Ok(Requirement::Exists(checked_key(term)?))
}

/// A label key: a non-empty run of the characters label keys are made of
/// (`[prefix/]name`); anything else (`>`, `<`, a space) is a term the fake does not
/// know.
fn checked_key(key: &str) -> Result<String, String> {
    if key.is_empty() {
        return Err("a label selector term has an empty key".into());
    }
    checked(key).map(str::to_string)
}

fn checked(text: &str) -> Result<&str, String> {
    match text
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/')))
    {
        Some(c) => Err(format!(
            "unable to parse requirement: unexpected {c:?} in {text:?}"
        )),
        None => Ok(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labelled(labels: Value) -> Value {
        json!({ "metadata": { "name": "x", "labels": labels }, "spec": { "nodeName": "n1" } })
    }

    fn selects(labels: &str, object: &Value) -> bool {
        Selectors::parse(None, Some(labels.into()))
            .expect("the selector parses")
            .matches(object)
    }

    #[test]
    fn equality_terms_are_anded_and_inequality_holds_for_an_absent_label() {
        let pod = labelled(json!({ "app": "web", "tier": "front" }));
        assert!(selects("app=web,tier==front", &pod));
        assert!(!selects("app=web,tier=back", &pod));
        assert!(selects("app!=db", &pod));
        assert!(selects("team!=ops", &pod));
        assert!(!selects("team=ops", &pod));
        assert!(selects("", &pod));
    }

    #[test]
    fn set_terms_and_existence_terms_select_as_the_api_server_does() {
        let pod = labelled(json!({ "app": "web" }));
        assert!(selects("app in (db, web)", &pod));
        assert!(!selects("app notin (db,web)", &pod));
        assert!(selects("team notin (ops)", &pod));
        assert!(selects("app,!team", &pod));
        assert!(!selects("team", &pod));
        assert!(selects("app in (web),app", &pod));
    }

    #[test]
    fn a_label_selector_the_fake_cannot_parse_is_refused() {
        assert!(Selectors::parse(None, Some("replicas>1".into())).is_err());
        assert!(Selectors::parse(None, Some("app in (web".into())).is_err());
        assert!(Selectors::parse(None, Some("=web".into())).is_err());
        assert!(Selectors::parse(None, Some("app in ()".into())).is_err());
    }

    #[test]
    fn field_and_label_selectors_must_both_hold() {
        let pod = labelled(json!({ "app": "web" }));
        let both = |fields: &str| {
            Selectors::parse(Some(fields.into()), Some("app=web".into()))
                .expect("the selector parses")
                .matches(&pod)
        };
        assert!(both("spec.nodeName=n1"));
        assert!(!both("spec.nodeName=n2"));
        assert!(both("spec.nodeName!=n2,metadata.name=x"));
    }
}
