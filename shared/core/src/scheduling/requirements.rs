//! The requirements algebra: sets of allowed label values per key, intersected as
//! pods join a NodeClaim, with Karpenter's meaning for each operator.
//!
//! A key's set is either a finite list (`In`, `DoesNotExist` = the empty list) or the
//! complement of a finite list (`NotIn`, `Exists` = complement of nothing), optionally
//! bounded numerically (`Gt`/`Lt`/`Gte`/`Lte`; integer labels only).

use std::collections::BTreeMap;
use std::fmt;

use crate::api::model::{NodePool, NodeRequirement, Operator};

#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ValueSet {
    /// When true the set is "every value except `values`".
    complement: bool,
    /// Sorted, deduplicated.
    values: Vec<String>,
    /// Exclusive lower bound (`Gt n`; `Gte n` is stored as `Gt n-1`).
    greater_than: Option<i64>,
    /// Exclusive upper bound.
    less_than: Option<i64>,
    /// Karpenter's minValues: the claim must keep at least this many distinct values
    /// of this key among its instance type options.
    pub min_values: Option<u32>,
}

impl ValueSet {
    pub fn in_values<I: IntoIterator<Item = S>, S: Into<String>>(values: I) -> Self {
        let mut v: Vec<String> = values.into_iter().map(Into::into).collect();
        v.sort();
        v.dedup();
        Self {
            complement: false,
            values: v,
            greater_than: None,
            less_than: None,
            min_values: None,
        }
    }
    pub fn not_in<I: IntoIterator<Item = S>, S: Into<String>>(values: I) -> Self {
        let mut s = Self::in_values(values);
        s.complement = true;
        s
    }
    pub fn exists() -> Self {
        Self::not_in(Vec::<String>::new())
    }
    pub fn does_not_exist() -> Self {
        Self::in_values(Vec::<String>::new())
    }

    pub fn from_requirement(r: &NodeRequirement) -> Self {
        let int = || r.values.first().and_then(|v| v.trim().parse::<i64>().ok());
        let mut set = match r.operator {
            Operator::In => Self::in_values(r.values.iter().cloned()),
            Operator::NotIn => Self::not_in(r.values.iter().cloned()),
            Operator::Exists => Self::exists(),
            Operator::DoesNotExist => Self::does_not_exist(),
            // Validation guarantees one integer; an unparseable one allows nothing.
            Operator::Gt => match int() {
                Some(n) => Self {
                    greater_than: Some(n),
                    ..Self::exists()
                },
                None => Self::does_not_exist(),
            },
            Operator::Gte => match int() {
                Some(n) => Self {
                    greater_than: Some(n.saturating_sub(1)),
                    ..Self::exists()
                },
                None => Self::does_not_exist(),
            },
            Operator::Lt => match int() {
                Some(n) => Self {
                    less_than: Some(n),
                    ..Self::exists()
                },
                None => Self::does_not_exist(),
            },
            Operator::Lte => match int() {
                Some(n) => Self {
                    less_than: Some(n.saturating_add(1)),
                    ..Self::exists()
                },
                None => Self::does_not_exist(),
            },
        };
        set.min_values = r.min_values;
        set
    }

    fn within_bounds(&self, value: &str) -> bool {
        if self.greater_than.is_none() && self.less_than.is_none() {
            return true;
        }
        match value.parse::<i64>() {
            Ok(n) => {
                self.greater_than.is_none_or(|g| n > g) && self.less_than.is_none_or(|l| n < l)
            }
            Err(_) => false,
        }
    }

    /// Whether a node whose label has this value satisfies the set.
    pub fn has(&self, value: &str) -> bool {
        let listed = self
            .values
            .binary_search_by(|v| v.as_str().cmp(value))
            .is_ok();
        listed != self.complement && self.within_bounds(value)
    }

    /// Whether a value nobody knows yet satisfies the set: only a complement without
    /// numeric bounds (`NotIn`, `Exists`) does. A new node's hostname is such a value
    /// (Karpenter gives a new NodeClaim a placeholder hostname), so `In`, an empty list
    /// (`DoesNotExist`, or `In` lists that did not intersect) and bounds never admit it.
    pub fn admits_unknown_value(&self) -> bool {
        self.complement && self.greater_than.is_none() && self.less_than.is_none()
    }

    /// Whether a node *without* this label satisfies the set (NotIn, DoesNotExist).
    pub fn allows_absent(&self) -> bool {
        if self.complement {
            !self.values.is_empty() && self.greater_than.is_none() && self.less_than.is_none()
        } else {
            self.values.is_empty()
        }
    }

    /// True when no value satisfies the set (a finite, empty list). Note that this is
    /// also how `DoesNotExist` looks: use `allows_absent` to tell them apart.
    pub fn is_empty_list(&self) -> bool {
        !self.complement && self.values.is_empty()
    }

    pub fn is_complement(&self) -> bool {
        self.complement
    }

    /// The finite list of allowed values, if the set is finite.
    pub fn finite_values(&self) -> Option<&[String]> {
        (!self.complement).then_some(self.values.as_slice())
    }

    /// The single allowed value, if exactly one.
    pub fn single_value(&self) -> Option<&str> {
        match self.finite_values() {
            Some([one]) => Some(one.as_str()),
            _ => None,
        }
    }

    /// Some value a node's label could take to satisfy the set (Karpenter's
    /// `Requirement.Any()`, which labels a node for keys no instance type carries):
    /// the first listed value in bounds, or for a complement set an integer within the
    /// bounds or a made-up string that is not excluded. `None` when nothing satisfies it.
    pub fn any_value(&self) -> Option<String> {
        if !self.complement {
            return self.values.iter().find(|v| self.within_bounds(v)).cloned();
        }
        let start = match (self.greater_than, self.less_than) {
            (Some(g), _) => g.checked_add(1)?,
            (None, Some(l)) => l.checked_sub(1 + self.values.len() as i64)?,
            (None, None) => {
                return (0..=self.values.len())
                    .map(|i| format!("nodewright-any-{i}"))
                    .find(|v| self.has(v));
            }
        };
        (0..=self.values.len() as i64)
            .filter_map(|i| start.checked_add(i))
            .map(|n| n.to_string())
            .find(|v| self.has(v))
    }

    pub fn intersect(&self, other: &ValueSet) -> ValueSet {
        let greater_than = max_opt(self.greater_than, other.greater_than);
        let less_than = min_opt(self.less_than, other.less_than);
        let min_values = max_opt(self.min_values, other.min_values);
        let mut out = match (self.complement, other.complement) {
            (false, false) => ValueSet {
                complement: false,
                values: self
                    .values
                    .iter()
                    .filter(|v| other.values.binary_search(v).is_ok())
                    .cloned()
                    .collect(),
                greater_than: None,
                less_than: None,
                min_values,
            },
            (false, true) => ValueSet {
                complement: false,
                values: self
                    .values
                    .iter()
                    .filter(|v| other.values.binary_search(v).is_err())
                    .cloned()
                    .collect(),
                greater_than: None,
                less_than: None,
                min_values,
            },
            (true, false) => return other.intersect(self),
            (true, true) => {
                let mut values = self.values.clone();
                values.extend(other.values.iter().cloned());
                values.sort();
                values.dedup();
                ValueSet {
                    complement: true,
                    values,
                    greater_than: None,
                    less_than: None,
                    min_values,
                }
            }
        };
        out.greater_than = greater_than;
        out.less_than = less_than;
        if !out.complement && (greater_than.is_some() || less_than.is_some()) {
            // A finite list under bounds: keep only the values within them.
            let bounded = out.clone();
            out.values.retain(|v| bounded.within_bounds(v));
        }
        out
    }

    /// Karpenter's "intersects": some value is allowed by both, or both allow the label
    /// to be absent (NotIn/DoesNotExist on both sides).
    pub fn intersects(&self, other: &ValueSet) -> bool {
        if self.allows_absent() && other.allows_absent() {
            return true;
        }
        let both = self.intersect(other);
        both.complement || !both.values.is_empty()
    }
}

fn max_opt<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, None) => a,
        (None, b) => b,
    }
}
fn min_opt<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

impl fmt::Debug for ValueSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for ValueSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.complement, self.values.is_empty()) {
            (false, true) => write!(f, "DoesNotExist")?,
            (false, false) => write!(f, "In [{}]", self.values.join(", "))?,
            (true, true) => write!(f, "Exists")?,
            (true, false) => write!(f, "NotIn [{}]", self.values.join(", "))?,
        }
        if let Some(g) = self.greater_than {
            write!(f, " >{g}")?;
        }
        if let Some(l) = self.less_than {
            write!(f, " <{l}")?;
        }
        Ok(())
    }
}

/// What planning does when the types that fit a claim cannot keep a NodePool's
/// minValues (Karpenter's `MIN_VALUES_POLICY`): `Strict` leaves the pods pending;
/// `BestEffort` lowers the minimum of each such key to the distinct values those types
/// have, and the claim launches with it (Karpenter then annotates the NodeClaim
/// `karpenter.sh/nodeclaim-min-values-relaxed: "true"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum MinValuesPolicy {
    #[default]
    Strict,
    BestEffort,
}

impl MinValuesPolicy {
    /// Karpenter's spelling: `Strict` or `BestEffort`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "Strict" => Some(Self::Strict),
            "BestEffort" => Some(Self::BestEffort),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Strict => "Strict",
            Self::BestEffort => "BestEffort",
        }
    }
}

/// Requirements on several keys, all of which must hold.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Requirements {
    map: BTreeMap<String, ValueSet>,
}

impl fmt::Debug for Requirements {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.map.iter()).finish()
    }
}

/// Whether a node of `pool` may carry `key=value`: its template labels and its
/// requirements allow it (no requirement on `key`: any value).
pub fn node_pool_allows(pool: &NodePool, key: &str, value: &str) -> bool {
    pool.labels.get(key).is_none_or(|v| v == value)
        && pool
            .requirements
            .iter()
            .filter(|r| r.key == key)
            .all(|r| ValueSet::from_requirement(r).has(value))
}

impl Requirements {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn from_node_requirements<'a>(reqs: impl IntoIterator<Item = &'a NodeRequirement>) -> Self {
        let mut out = Self::new();
        for r in reqs {
            out.add(&r.key, ValueSet::from_requirement(r));
        }
        out
    }

    pub fn from_labels<'a>(labels: impl IntoIterator<Item = (&'a String, &'a String)>) -> Self {
        let mut out = Self::new();
        for (k, v) in labels {
            out.add(k, ValueSet::in_values([v.clone()]));
        }
        out
    }

    /// Adds a requirement, intersecting with any existing one on the same key.
    pub fn add(&mut self, key: &str, set: ValueSet) {
        match self.map.get_mut(key) {
            Some(existing) => *existing = existing.intersect(&set),
            None => {
                self.map.insert(key.to_string(), set);
            }
        }
    }

    pub fn get(&self, key: &str) -> Option<&ValueSet> {
        self.map.get(key)
    }

    /// Lowers the minValues of `key` to `min` when it has a larger one.
    pub fn lower_min_values(&mut self, key: &str, min: u32) {
        if let Some(set) = self.map.get_mut(key)
            && set.min_values.is_some_and(|m| m > min)
        {
            set.min_values = Some(min);
        }
    }

    /// Keys whose minValues `self` has lowered below `original`'s: a claim's
    /// requirements against its NodePool's, after a `BestEffort` relaxation.
    pub fn min_values_lowered_from(&self, original: &Requirements) -> Vec<(String, u32, u32)> {
        original
            .map
            .iter()
            .filter_map(|(key, set)| {
                let from = set.min_values?;
                let to = self.map.get(key)?.min_values?;
                (to < from).then(|| (key.clone(), from, to))
            })
            .collect()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &ValueSet)> {
        self.map.iter()
    }

    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.map.keys()
    }

    /// Whether a node with exactly these labels satisfies every requirement.
    pub fn matches_labels(&self, labels: &BTreeMap<String, String>) -> bool {
        self.map.iter().all(|(k, set)| match labels.get(k) {
            Some(v) => set.has(v),
            None => set.allows_absent(),
        })
    }

    /// Intersection of two requirement sets.
    pub fn intersect(&self, other: &Requirements) -> Requirements {
        let mut out = self.clone();
        for (k, v) in &other.map {
            out.add(k, v.clone());
        }
        out
    }

    /// Karpenter's compatibility of incoming (pod) requirements with these (node or
    /// NodePool) requirements: every shared key intersects; a key only the incoming side
    /// names must be well-known (the node will get it from its instance type, zone, ...)
    /// or be satisfiable by the label's absence. Returns the first conflict.
    pub fn compatible_with(
        &self,
        incoming: &Requirements,
        well_known: &dyn Fn(&str) -> bool,
    ) -> Result<(), Conflict> {
        match self.first_conflict(incoming, well_known) {
            None => Ok(()),
            Some((key, wanted, None)) => Err(Conflict::MissingLabel {
                key: key.clone(),
                wanted: Box::new(wanted.clone()),
            }),
            Some((key, wanted, Some(have))) => Err(Conflict::Disjoint {
                key: key.clone(),
                wanted: Box::new(wanted.clone()),
                have: Box::new(have.clone()),
            }),
        }
    }

    /// [`Self::compatible_with`] without the conflict: placement asks this often and
    /// needs only the answer.
    pub fn is_compatible_with(
        &self,
        incoming: &Requirements,
        well_known: &dyn Fn(&str) -> bool,
    ) -> bool {
        self.first_conflict(incoming, well_known).is_none()
    }

    /// The first incoming key that cannot hold: its wanted set, and ours if we name it.
    fn first_conflict<'s>(
        &'s self,
        incoming: &'s Requirements,
        well_known: &dyn Fn(&str) -> bool,
    ) -> Option<(&'s String, &'s ValueSet, Option<&'s ValueSet>)> {
        for (key, want) in &incoming.map {
            match self.map.get(key) {
                Some(have) => {
                    if !have.intersects(want) {
                        return Some((key, want, Some(have)));
                    }
                }
                None => {
                    if !want.allows_absent() && !well_known(key) {
                        return Some((key, want, None));
                    }
                }
            }
        }
        None
    }
}

/// Why incoming requirements cannot hold on a node (see [`Requirements::compatible_with`]).
/// The sets are boxed to keep the error, and every `Result` carrying it, small.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Conflict {
    /// Both sides name `key`, and no value is in both sets.
    Disjoint {
        key: String,
        wanted: Box<ValueSet>,
        have: Box<ValueSet>,
    },
    /// Only the incoming side names `key`: the node would not carry it, and the
    /// incoming set needs it.
    MissingLabel { key: String, wanted: Box<ValueSet> },
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Conflict::Disjoint { key, wanted, have } => {
                write!(f, "{key} {wanted} conflicts with {key} {have}")
            }
            Conflict::MissingLabel { key, wanted } => {
                write!(f, "{key} {wanted} is not a label this node would have")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(key: &str, op: Operator, values: &[&str]) -> NodeRequirement {
        NodeRequirement {
            key: key.into(),
            operator: op,
            values: values.iter().map(|s| s.to_string()).collect(),
            min_values: None,
        }
    }

    #[test]
    fn in_and_not_in_intersect_to_the_difference() {
        let a = ValueSet::in_values(["a", "b", "c"]);
        let b = ValueSet::not_in(["b"]);
        let both = a.intersect(&b);
        assert!(both.has("a") && !both.has("b") && both.has("c") && !both.has("d"));
        assert_eq!(both.finite_values().unwrap(), ["a", "c"]);
    }

    #[test]
    fn numeric_operators_bound_integer_labels_and_reject_other_values() {
        let gt = ValueSet::from_requirement(&req("gen", Operator::Gt, &["2"]));
        assert!(!gt.has("2") && gt.has("3") && !gt.has("x"));
        let gte = ValueSet::from_requirement(&req("gen", Operator::Gte, &["2"]));
        assert!(gte.has("2") && !gte.has("1"));
        let lte = ValueSet::from_requirement(&req("gen", Operator::Lte, &["5"]));
        let band = gte.intersect(&lte);
        assert!(band.has("2") && band.has("5") && !band.has("6"));
        let listed = ValueSet::in_values(["1", "3", "7"]).intersect(&band);
        assert_eq!(listed.finite_values().unwrap(), ["3"]);
    }

    #[test]
    fn absence_is_allowed_only_by_not_in_and_does_not_exist() {
        assert!(ValueSet::not_in(["a"]).allows_absent());
        assert!(ValueSet::does_not_exist().allows_absent());
        assert!(!ValueSet::exists().allows_absent());
        assert!(!ValueSet::in_values(["a"]).allows_absent());
        assert!(!ValueSet::from_requirement(&req("g", Operator::Gt, &["1"])).allows_absent());
        let labels = BTreeMap::new();
        let r = Requirements::from_node_requirements(&[req("team", Operator::NotIn, &["x"])]);
        assert!(r.matches_labels(&labels));
    }

    #[test]
    fn a_pod_requiring_an_unknown_custom_label_is_incompatible_with_a_pool_that_lacks_it() {
        let pool = Requirements::from_node_requirements(&[req(
            "kubernetes.io/arch",
            Operator::In,
            &["amd64"],
        )]);
        let pod = Requirements::from_node_requirements(&[req("team", Operator::In, &["a"])]);
        let err = pool
            .compatible_with(&pod, &|k| k == "kubernetes.io/arch")
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "team In [a] is not a label this node would have"
        );
        let well_known_pod = Requirements::from_node_requirements(&[req(
            "kubernetes.io/arch",
            Operator::In,
            &["arm64"],
        )]);
        assert_eq!(
            pool.compatible_with(&well_known_pod, &|_| true)
                .unwrap_err()
                .to_string(),
            "kubernetes.io/arch In [arm64] conflicts with kubernetes.io/arch In [amd64]"
        );
        let not_in = Requirements::from_node_requirements(&[req("team", Operator::NotIn, &["b"])]);
        assert!(pool.compatible_with(&not_in, &|_| false).is_ok());
    }

    #[test]
    fn min_values_survive_intersection() {
        let mut a = ValueSet::exists();
        a.min_values = Some(5);
        let b = ValueSet::in_values(["m5", "c5"]);
        assert_eq!(a.intersect(&b).min_values, Some(5));
    }
}
