//! Values many pods hold alike, held once.
//!
//! The replicas of one workload carry the same labels, tolerations, node selector,
//! affinity and spread constraints: a cluster has one such value per workload, not per
//! pod. A [`Shared`] field holds its value behind a reference count, so a pod
//! costs a pointer for it, copying a pod (a tick's copy of the watched view) copies the
//! pointer, and a [`Pool`] lets the reader of a cluster hand every equal value the same
//! allocation. Code reads a shared field as it reads the value (`Deref`), and a write
//! (`DerefMut`) first copies the value if another holder shares it, so no holder ever
//! sees another's change.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A type with an empty value that lives for the whole program, which an empty
/// [`Shared`] reads as (an empty field allocates nothing).
pub trait Empty: Clone + Default + PartialEq + 'static {
    fn empty() -> &'static Self;
}

impl<T: Clone + PartialEq + 'static> Empty for Vec<T> {
    fn empty() -> &'static Self {
        const { &Vec::new() }
    }
}

impl<K: Ord + Clone + 'static, V: Clone + PartialEq + 'static> Empty for BTreeMap<K, V> {
    fn empty() -> &'static Self {
        const { &BTreeMap::new() }
    }
}

/// A value behind a reference count, read as the value; empty, it holds nothing.
pub struct Shared<T: Empty>(Option<Arc<T>>);

impl<T: Empty> Shared<T> {
    pub fn new(value: T) -> Self {
        if value == *T::empty() {
            Shared(None)
        } else {
            Shared(Some(Arc::new(value)))
        }
    }

    /// The value, copied only when another holder shares it.
    pub fn into_inner(self) -> T {
        match self.0 {
            None => T::default(),
            Some(arc) => Arc::try_unwrap(arc).unwrap_or_else(|arc| (*arc).clone()),
        }
    }

    /// Whether both hold the very same allocation (both empty counts).
    pub fn same_as(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl<T: Empty> Deref for Shared<T> {
    type Target = T;
    fn deref(&self) -> &T {
        match &self.0 {
            Some(value) => value,
            None => T::empty(),
        }
    }
}

impl<T: Empty> DerefMut for Shared<T> {
    fn deref_mut(&mut self) -> &mut T {
        Arc::make_mut(self.0.get_or_insert_with(|| Arc::new(T::default())))
    }
}

impl<T: Empty> Default for Shared<T> {
    fn default() -> Self {
        Shared(None)
    }
}

impl<T: Empty> Clone for Shared<T> {
    fn clone(&self) -> Self {
        Shared(self.0.clone())
    }
}

impl<T: Empty> From<T> for Shared<T> {
    fn from(value: T) -> Self {
        Shared::new(value)
    }
}

impl<T: Empty> PartialEq for Shared<T> {
    fn eq(&self, other: &Self) -> bool {
        self.same_as(other) || **self == **other
    }
}

impl<T: Empty> PartialEq<T> for Shared<T> {
    fn eq(&self, other: &T) -> bool {
        **self == *other
    }
}

impl<T: Empty + Eq> Eq for Shared<T> {}

impl<T: Empty + Hash> Hash for Shared<T> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (**self).hash(state)
    }
}

impl<T: Empty + fmt::Debug> fmt::Debug for Shared<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}

impl<'a, T: Empty> IntoIterator for &'a Shared<T>
where
    &'a T: IntoIterator,
{
    type Item = <&'a T as IntoIterator>::Item;
    type IntoIter = <&'a T as IntoIterator>::IntoIter;
    fn into_iter(self) -> Self::IntoIter {
        (**self).into_iter()
    }
}

impl<A, T: Empty + FromIterator<A>> FromIterator<A> for Shared<T> {
    fn from_iter<I: IntoIterator<Item = A>>(iter: I) -> Self {
        Shared::new(iter.into_iter().collect())
    }
}

/// Stored as the value itself: the sharing is how a process holds it, not part of
/// the record.
impl<T: Empty + Serialize> Serialize for Shared<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(serializer)
    }
}

impl<'de, T: Empty + Deserialize<'de>> Deserialize<'de> for Shared<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        T::deserialize(deserializer).map(Shared::new)
    }
}

/// The distinct values seen so far, each held once: [`Pool::intern`] gives a value
/// equal to one already held that allocation instead. Values no pod holds any more are
/// let go as the pool grows.
pub struct Pool<T: Eq + Hash> {
    held: HashSet<Arc<T>>,
    /// How many values the pool held after it last let go of unused ones.
    kept_at_sweep: usize,
}

impl<T: Eq + Hash> Default for Pool<T> {
    fn default() -> Self {
        Pool {
            held: HashSet::new(),
            kept_at_sweep: 0,
        }
    }
}

impl<T: Eq + Hash> Pool<T> {
    /// Makes `value` share the pool's allocation of an equal value, or adds it.
    pub fn intern(&mut self, value: &mut Shared<T>)
    where
        T: Empty,
    {
        self.intern_arc(&mut value.0);
    }

    /// [`Pool::intern`] for a value held behind an `Arc` of its own.
    pub fn intern_arc(&mut self, value: &mut Option<Arc<T>>) {
        let Some(arc) = value else {
            return;
        };
        if let Some(held) = self.held.get(&**arc) {
            if !Arc::ptr_eq(held, arc) {
                *value = Some(held.clone());
            }
            return;
        }
        self.held.insert(arc.clone());
        // Doubling since the last sweep keeps the sweeps' cost linear in the values
        // interned; a value held only here is one no pod holds.
        if self.held.len() > 2 * self.kept_at_sweep + 1024 {
            self.held.retain(|v| Arc::strong_count(v) > 1);
            self.kept_at_sweep = self.held.len();
        }
    }

    /// How many distinct values the pool holds.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Shared<BTreeMap<String, String>> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn an_empty_value_holds_nothing_and_reads_as_empty() {
        let empty = labels(&[]);
        assert!(empty.0.is_none());
        assert!(empty.is_empty());
        assert_eq!(empty, Shared::default());
        assert_eq!(empty, BTreeMap::new());
    }

    #[test]
    fn a_write_through_one_holder_is_never_seen_by_another() {
        let a = labels(&[("app", "web")]);
        let mut b = a.clone();
        assert!(a.same_as(&b));
        b.insert("tier".into(), "front".into());
        assert!(!a.same_as(&b));
        assert_eq!(a.len(), 1);
        assert_eq!(b.len(), 2);
        assert_eq!(b["tier"], "front");
    }

    #[test]
    fn equal_values_interned_share_one_allocation_and_unused_ones_are_let_go() {
        let mut pool = Pool::default();
        let mut first = labels(&[("app", "web")]);
        let mut second = labels(&[("app", "web")]);
        assert!(!first.same_as(&second));
        pool.intern(&mut first);
        pool.intern(&mut second);
        assert!(first.same_as(&second));
        assert_eq!(pool.len(), 1);

        // Many distinct values no one keeps: the pool lets them go as it grows.
        for i in 0..5_000 {
            let mut gone = labels(&[("app", &format!("job-{i}"))]);
            pool.intern(&mut gone);
        }
        assert!(pool.len() < 2_100, "{} values held", pool.len());
        let mut third = labels(&[("app", "web")]);
        pool.intern(&mut third);
        assert!(third.same_as(&first));
    }

    #[test]
    fn an_emptied_value_equals_an_empty_one() {
        let mut a = labels(&[("app", "web")]);
        a.clear();
        assert_eq!(a, labels(&[]));
        assert_eq!(a.into_inner(), BTreeMap::new());
    }

    #[test]
    fn a_shared_value_is_stored_as_the_value_itself_and_read_back_empty_as_empty() {
        let a = labels(&[("app", "web")]);
        assert_eq!(serde_json::to_string(&a).unwrap(), r#"{"app":"web"}"#);
        let back: Shared<BTreeMap<String, String>> =
            serde_json::from_str(r#"{"app":"web"}"#).unwrap();
        assert_eq!(back, a);
        let empty: Shared<Vec<String>> = serde_json::from_str("[]").unwrap();
        assert!(empty.0.is_none(), "an empty value read allocates nothing");
    }
}
