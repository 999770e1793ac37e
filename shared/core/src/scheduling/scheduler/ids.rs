//! Typed indices into the scheduler's tables: a bin id cannot be used where a pool or
//! an instance type is meant, and a table says in its type what indexes it. An id is
//! a `u32` (the tables are far smaller), and indexing costs what a `Vec`'s does.

use std::fmt;
use std::marker::PhantomData;
use std::ops::{Index, IndexMut};

/// An index type for an [`IdVec`].
pub(crate) trait Id: Copy {
    fn from_index(index: usize) -> Self;
    fn index(self) -> usize;
}

macro_rules! id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
        pub(crate) struct $name(u32);

        impl $name {
            pub(crate) fn from_index(index: usize) -> Self {
                debug_assert!(index <= u32::MAX as usize);
                Self(index as u32)
            }

            pub(crate) fn index(self) -> usize {
                self.0 as usize
            }
        }

        impl Id for $name {
            fn from_index(index: usize) -> Self {
                $name::from_index(index)
            }
            fn index(self) -> usize {
                $name::index(self)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($name), self.0)
            }
        }
    };
}

id!(
    /// A NodePool: its place in `SchedulerInput::node_pools` and `Scheduler::pools`.
    PoolId
);
id!(
    /// An instance type: its place in the catalog.
    InstanceTypeId
);
id!(
    /// A bin: an existing node, an in-flight claim or a new claim (`Scheduler::bins`).
    BinId
);
id!(
    /// A pod class (`Scheduler::classes`).
    ClassId
);
id!(
    /// A pod class compiled at one relaxation level (`Scheduler::eclasses`).
    EClassId
);
id!(
    /// A topology group (`Scheduler::groups`).
    GroupId
);
id!(
    /// A domain key: a label topology constraints count on (`Scheduler::keys`).
    DomainKeyId
);
id!(
    /// A domain: one value of a domain key (`DomainKey::values`). The zone key's domains
    /// are `Scheduler::zones`, the capacity type key's are the `ct_index` slots.
    DomainId
);
id!(
    /// A pod: its place in `SchedulerInput::pods`. The public results (`Schedule`,
    /// `Stop`) keep plain indices; this id is the scheduler's own.
    PodId
);

impl DomainKeyId {
    /// `topology.kubernetes.io/zone`: always key 0, its domains `Scheduler::zones`.
    pub(crate) const ZONE: Self = Self(0);
    /// `karpenter.sh/capacity-type`: always key 1, its domains by `ct_index`.
    pub(crate) const CAPACITY_TYPE: Self = Self(1);
    /// The first key a constraint named (neither zone nor capacity type).
    pub(crate) const FIRST_OTHER: Self = Self(2);
}

/// A `Vec` indexed by one kind of id.
pub(crate) struct IdVec<I, T> {
    items: Vec<T>,
    id: PhantomData<fn(I) -> I>,
}

impl<I: Id, T> IdVec<I, T> {
    pub(crate) fn new() -> Self {
        Self::from(Vec::new())
    }

    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The id the next `push` returns.
    pub(crate) fn next_id(&self) -> I {
        I::from_index(self.items.len())
    }

    pub(crate) fn push(&mut self, item: T) -> I {
        let id = self.next_id();
        self.items.push(item);
        id
    }

    /// Drops every item from `first` on.
    pub(crate) fn truncate(&mut self, first: I) {
        self.items.truncate(first.index());
    }

    pub(crate) fn get(&self, id: I) -> Option<&T> {
        self.items.get(id.index())
    }

    /// The id of the first item that satisfies `pred`.
    pub(crate) fn position(&self, pred: impl FnMut(&T) -> bool) -> Option<I> {
        self.items.iter().position(pred).map(I::from_index)
    }

    pub(crate) fn iter(&self) -> std::slice::Iter<'_, T> {
        self.items.iter()
    }

    pub(crate) fn iter_mut(&mut self) -> std::slice::IterMut<'_, T> {
        self.items.iter_mut()
    }

    /// Every id, in order.
    pub(crate) fn ids(&self) -> impl DoubleEndedIterator<Item = I> + use<I, T> {
        (0..self.items.len()).map(I::from_index)
    }

    /// The ids from `first` on.
    pub(crate) fn ids_from(&self, first: I) -> impl Iterator<Item = I> + use<I, T> {
        (first.index()..self.items.len()).map(I::from_index)
    }

    /// Each id with its item.
    pub(crate) fn enumerate(&self) -> impl Iterator<Item = (I, &T)> {
        self.items
            .iter()
            .enumerate()
            .map(|(i, item)| (I::from_index(i), item))
    }

    pub(crate) fn enumerate_mut(&mut self) -> impl Iterator<Item = (I, &mut T)> {
        self.items
            .iter_mut()
            .enumerate()
            .map(|(i, item)| (I::from_index(i), item))
    }
}

impl<I: Id, T: Clone> IdVec<I, T> {
    /// `len` copies of `item`.
    pub(crate) fn filled(item: T, len: usize) -> Self {
        Self::from(vec![item; len])
    }

    /// Grows or shrinks to `len` items, new ones copies of `item`.
    pub(crate) fn resize(&mut self, len: usize, item: T) {
        self.items.resize(len, item);
    }
}

impl<I, T> From<Vec<T>> for IdVec<I, T> {
    fn from(items: Vec<T>) -> Self {
        Self {
            items,
            id: PhantomData,
        }
    }
}

impl<I: Id, T> FromIterator<T> for IdVec<I, T> {
    fn from_iter<It: IntoIterator<Item = T>>(iter: It) -> Self {
        Self::from(iter.into_iter().collect::<Vec<T>>())
    }
}

impl<I: Id, T> Index<I> for IdVec<I, T> {
    type Output = T;
    fn index(&self, id: I) -> &T {
        &self.items[id.index()]
    }
}

impl<I: Id, T> IndexMut<I> for IdVec<I, T> {
    fn index_mut(&mut self, id: I) -> &mut T {
        &mut self.items[id.index()]
    }
}

impl<'a, I: Id, T> IntoIterator for &'a IdVec<I, T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.items.iter()
    }
}

impl<'a, I: Id, T> IntoIterator for &'a mut IdVec<I, T> {
    type Item = &'a mut T;
    type IntoIter = std::slice::IterMut<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.items.iter_mut()
    }
}

impl<I, T: Clone> Clone for IdVec<I, T> {
    fn clone(&self) -> Self {
        Self::from(self.items.clone())
    }
}

impl<I, T> Default for IdVec<I, T> {
    fn default() -> Self {
        Self::from(Vec::new())
    }
}

impl<I, T: fmt::Debug> fmt::Debug for IdVec<I, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.items.fmt(f)
    }
}
