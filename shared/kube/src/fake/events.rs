//! What a watch is made of on the store's side: the history of changes a watch replays
//! from a resourceVersion (bounded and compactable, like etcd's), and the open watches
//! each new change is sent to.
//!
//! Both are kept by the [`Store`](super::Store), under the server's lock: a change is
//! recorded and sent in the same critical section as the write, so every watch sees the
//! changes in revision order, and a watch that opens in between sees each change once —
//! in its replay or in its feed, never both, never neither.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::Value;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use super::store::ObjectKey;

/// How many changes the history keeps unless told otherwise: a client that falls
/// further behind gets `410 Gone` and lists again, as with a real server whose etcd
/// compacted (every 5 minutes on EKS).
pub const DEFAULT_HISTORY_LIMIT: usize = 100_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    /// As the wire spells it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change to the store.
#[derive(Debug)]
pub(crate) struct Event {
    /// The revision the change made (the object's new resourceVersion).
    pub revision: u64,
    pub key: ObjectKey,
    pub event_type: EventType,
    /// The object as written; for a deletion, as last stored but with the deletion's
    /// resourceVersion (what a real server sends in a DELETED event).
    pub object: Arc<Value>,
    /// The object before the change (`None` on creation): a watch with a selector needs
    /// it to tell an object leaving the selection (DELETED) from one never in it.
    pub previous: Option<Arc<Value>>,
}

impl Event {
    /// Whether a watch of `kind` in `namespace` (`None`: all) is about this object.
    pub(crate) fn concerns(&self, kind: &str, namespace: Option<&str>) -> bool {
        self.key.0 == kind && namespace.is_none_or(|ns| self.key.1 == ns)
    }
}

/// The changes a watch can still start from, oldest first.
#[derive(Debug)]
pub(crate) struct History {
    events: VecDeque<Arc<Event>>,
    limit: usize,
    /// Changes up to and including this revision are forgotten: a watch must start at
    /// this revision or later.
    compacted: u64,
}

impl History {
    /// An empty history of a store at `revision`.
    pub(crate) fn new(revision: u64) -> History {
        History {
            events: VecDeque::new(),
            limit: DEFAULT_HISTORY_LIMIT,
            compacted: revision,
        }
    }

    pub(crate) fn compacted(&self) -> u64 {
        self.compacted
    }

    pub(crate) fn push(&mut self, event: Arc<Event>) {
        self.events.push_back(event);
        self.trim();
    }

    pub(crate) fn set_limit(&mut self, limit: usize) {
        self.limit = limit;
        self.trim();
    }

    /// Forgets every change up to `revision` (the store's current one), as an etcd
    /// compaction does.
    pub(crate) fn compact(&mut self, revision: u64) {
        self.events.clear();
        self.compacted = self.compacted.max(revision);
    }

    fn trim(&mut self) {
        while self.events.len() > self.limit {
            if let Some(oldest) = self.events.pop_front() {
                self.compacted = oldest.revision;
            }
        }
    }

    /// The changes after `revision`, oldest first, or `Err(compacted)` when some of them
    /// are forgotten.
    pub(crate) fn since(&self, revision: u64) -> Result<impl Iterator<Item = &Arc<Event>>, u64> {
        if revision < self.compacted {
            return Err(self.compacted);
        }
        let first = self.events.partition_point(|e| e.revision <= revision);
        Ok(self.events.range(first..))
    }
}

/// What an open watch is sent after it opened, in revision order.
#[derive(Debug)]
pub(crate) enum Feed {
    Event(Arc<Event>),
    /// A bookmark at this revision: every change the watch must see up to it was sent
    /// before (the bookmark is queued behind them).
    Bookmark(u64),
}

/// The open watches: where each new change goes.
#[derive(Debug, Default)]
pub(crate) struct Watchers {
    open: BTreeMap<u64, Watcher>,
    next_id: u64,
}

#[derive(Debug)]
struct Watcher {
    kind: String,
    namespace: Option<String>,
    bookmarks: bool,
    feed: UnboundedSender<Feed>,
    dropped: Arc<AtomicBool>,
}

/// A watch's end of its registration.
#[derive(Debug)]
pub(crate) struct Subscription {
    pub id: u64,
    /// Closed when the watch is to end: cleanly, or abruptly when `dropped` is set
    /// first.
    pub feed: UnboundedReceiver<Feed>,
    pub dropped: Arc<AtomicBool>,
}

impl Watchers {
    /// Registers a watch of `kind` in `namespace` (`None`: all namespaces). Unbounded,
    /// so a writer never waits for a slow watch (a queued change is one `Arc`).
    pub(crate) fn subscribe(
        &mut self,
        kind: &str,
        namespace: Option<&str>,
        bookmarks: bool,
    ) -> Subscription {
        let (sender, feed) = unbounded_channel();
        let dropped = Arc::new(AtomicBool::new(false));
        self.next_id += 1;
        let id = self.next_id;
        self.open.insert(
            id,
            Watcher {
                kind: kind.to_string(),
                namespace: namespace.map(str::to_string),
                bookmarks,
                feed: sender,
                dropped: dropped.clone(),
            },
        );
        Subscription { id, feed, dropped }
    }

    pub(crate) fn unsubscribe(&mut self, id: u64) {
        self.open.remove(&id);
    }

    /// How many watches are open.
    pub(crate) fn len(&self) -> usize {
        self.open.values().filter(|w| !w.feed.is_closed()).count()
    }

    /// Sends a change to the watches it concerns.
    pub(crate) fn dispatch(&mut self, event: &Arc<Event>) {
        self.open.retain(|_, w| {
            if !event.concerns(&w.kind, w.namespace.as_deref()) {
                return true;
            }
            // Fails only when the watch's body is gone: forget the watch then.
            w.feed.send(Feed::Event(event.clone())).is_ok()
        });
    }

    /// Queues a bookmark at `revision` for watch `id`, if it asked for bookmarks.
    pub(crate) fn bookmark(&mut self, id: u64, revision: u64) {
        if let Some(w) = self.open.get(&id).filter(|w| w.bookmarks) {
            let _gone_is_fine = w.feed.send(Feed::Bookmark(revision));
        }
    }

    /// Queues a bookmark at `revision` for every watch that asked for bookmarks.
    pub(crate) fn bookmark_all(&mut self, revision: u64) {
        self.open
            .retain(|_, w| !w.bookmarks || w.feed.send(Feed::Bookmark(revision)).is_ok());
    }

    /// Ends every watch abruptly: each body sees `dropped` and breaks its connection.
    pub(crate) fn drop_all(&mut self) {
        for watcher in self.open.values() {
            watcher.dropped.store(true, Ordering::SeqCst);
        }
        // Dropping the senders wakes the bodies.
        self.open.clear();
    }

    /// Ends the watches of `kind` cleanly, once they have sent what is queued (the kind
    /// is no longer served).
    pub(crate) fn close_kind(&mut self, kind: &str) {
        self.open.retain(|_, w| w.kind != kind);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(revision: u64) -> Arc<Event> {
        Arc::new(Event {
            revision,
            key: ("Node".into(), String::new(), format!("n{revision}")),
            event_type: EventType::Added,
            object: Arc::new(json!({})),
            previous: None,
        })
    }

    fn revisions(history: &History, after: u64) -> Result<Vec<u64>, u64> {
        history
            .since(after)
            .map(|events| events.map(|e| e.revision).collect())
    }

    #[test]
    fn the_history_replays_what_came_after_a_revision() {
        let mut history = History::new(1);
        for r in 2..=5 {
            history.push(event(r));
        }
        assert_eq!(revisions(&history, 1), Ok(vec![2, 3, 4, 5]));
        assert_eq!(revisions(&history, 3), Ok(vec![4, 5]));
        assert_eq!(revisions(&history, 5), Ok(vec![]));
        assert_eq!(revisions(&history, 9), Ok(vec![]));
    }

    #[test]
    fn a_bounded_history_forgets_its_oldest_changes() {
        let mut history = History::new(1);
        history.set_limit(2);
        for r in 2..=5 {
            history.push(event(r));
        }
        assert_eq!(revisions(&history, 2), Err(3));
        assert_eq!(revisions(&history, 3), Ok(vec![4, 5]));
    }

    #[test]
    fn compaction_forgets_everything_up_to_the_current_revision() {
        let mut history = History::new(1);
        for r in 2..=5 {
            history.push(event(r));
        }
        history.compact(5);
        assert_eq!(revisions(&history, 4), Err(5));
        assert_eq!(revisions(&history, 5), Ok(vec![]));
    }

    #[test]
    fn a_watch_is_sent_only_the_changes_of_its_kind_and_namespace() {
        let mut watchers = Watchers::default();
        let mut nodes = watchers.subscribe("Node", None, false);
        let mut pods_in_a = watchers.subscribe("Pod", Some("a"), false);
        let pod = |ns: &str| {
            Arc::new(Event {
                revision: 2,
                key: ("Pod".into(), ns.into(), "p".into()),
                event_type: EventType::Added,
                object: Arc::new(json!({})),
                previous: None,
            })
        };
        watchers.dispatch(&pod("b"));
        watchers.dispatch(&pod("a"));
        watchers.dispatch(&event(3));
        assert!(matches!(pods_in_a.feed.try_recv(), Ok(Feed::Event(e)) if e.key.1 == "a"));
        assert!(pods_in_a.feed.try_recv().is_err());
        assert!(matches!(nodes.feed.try_recv(), Ok(Feed::Event(e)) if e.revision == 3));
        assert_eq!(watchers.len(), 2);
        watchers.drop_all();
        assert!(nodes.dropped.load(Ordering::SeqCst));
        assert_eq!(watchers.len(), 0);
    }
}
