//! The cluster as this process last saw it: one LIST per kind when the process first
//! reads the cluster (or when a watch expires with `410 Gone`), then WATCH with
//! bookmarks, kept current in memory by kube-rs's [`watcher`] — the informer model
//! Karpenter uses, fitted to Lambda.
//!
//! Why: a Lambda gets CPU in proportion to its memory (256 MB is 0.145 vCPU), and the
//! provisioner used to LIST every pod of the cluster on every 5-s poll — the API
//! server's most expensive read, paid again and again for a cluster that had not
//! changed. A warm execution environment keeps its process between invocations (frozen,
//! not restarted), so what was read once stays read: when the process thaws, each
//! watch resumes from the last resourceVersion it saw (kube-rs's watcher does that on a
//! broken stream), and only a version the server has compacted costs a new LIST.
//!
//! Objects are converted to the domain types once, when they arrive, and only the
//! domain object is kept (not the k8s object with its managedFields and status): a
//! poll then costs a walk over memory. Pods are decoded with [`LeanPod`], which skips
//! every field no decision reads.
//!
//! Freshness:
//! - this process's own writes (a node patched, a pod evicted or deleted, a node
//!   deleted) are applied to the view as soon as the API server accepts them, so a tick
//!   that changed the cluster plans on what it changed (`KubeCluster` does this);
//! - a version never replaces a newer one: resourceVersions are compared as numbers
//!   when both are (etcd revisions, as every API server writes them);
//! - a kind whose watch could not be (re)started — a list or watch request failed, not
//!   merely a stream that broke and resumes — is read afresh with one LIST by the next
//!   read of the view: the view never serves a kind it cannot vouch for, and a read
//!   that cannot be served fails with the list's error, as before.
//!
//! Failures are retried with kube-rs's default backoff (0.8 s doubling to 30 s), reset
//! only when the watch delivers again. An optional kind the cluster does not serve (a
//! CRD not installed: 404) reads as empty and is listed again only every
//! [`MISSING_KIND_RETRY`], with one warning per kind: a cluster with Karpenter's older
//! CRDs has no NodeOverlay kind, and asking for it every second is load for nothing.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::StreamExt;
use kube::Resource;
use kube::api::{Api, ListParams};
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::{self, DefaultBackoff, Event};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio::task::AbortHandle;
use tracing::{debug, warn};

use nodewright_engine::ports::{ClusterError, ErrorKind};

use crate::error::{classify, cluster_error};

/// (namespace, or "" for cluster-scoped kinds; name): a LIST's order.
pub(crate) type Key = (String, String);

/// A converted object, or why it could not be converted (reported, as a LIST reported
/// it, and left out of decisions).
pub(crate) struct Entry<T> {
    pub(crate) value: Result<T, String>,
    pub(crate) uid: Option<String>,
    version: Option<u64>,
}

impl<T: Clone> Clone for Entry<T> {
    fn clone(&self) -> Self {
        Entry {
            value: self.value.clone(),
            uid: self.uid.clone(),
            version: self.version,
        }
    }
}

/// What a read of one kind found.
pub(crate) struct Read<T> {
    pub(crate) objects: Vec<T>,
    /// Objects that could not be converted, one message each.
    pub(crate) invalid: Vec<String>,
    /// The kind is not served (404: a CRD not installed).
    pub(crate) missing: bool,
}

/// Why the view of a kind cannot be vouched for: before the first list completed, the
/// list failed (reads fail with it, as a LIST would have; the watcher tries again with
/// backoff); after, a watch could not be restarted (the next read lists afresh).
#[derive(Debug, Clone)]
struct Failure {
    kind: ErrorKind,
    error: Arc<watcher::Error>,
}

/// A watcher error shared by the readers it fails: the kube error stays the source.
#[derive(Debug, Clone)]
struct SharedError(Arc<watcher::Error>);

impl std::fmt::Display for SharedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for SharedError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(self.0.as_ref())
    }
}

/// What a read of the view finds.
enum Vouched<T> {
    Read(Read<T>),
    /// The watch could not be restarted: list afresh.
    ListAfresh,
    /// The first list failed, and this is why.
    Failed(ClusterError),
}

/// The objects of a kind by namespace and name, each boxed: a converted pod is some
/// 700 bytes, and a B-tree's nodes, half full after a list delivered in key order,
/// would otherwise hold twice that for each pod.
type Objects<T> = BTreeMap<Key, Box<Entry<T>>>;

struct Cache<T> {
    objects: Objects<T>,
    /// A relist in progress (after `Init`): swapped in whole at `InitDone`, so readers
    /// never see half a list.
    relisting: Option<Objects<T>>,
    /// A complete list has been applied.
    synced: bool,
    /// The kind is not served (a CRD not installed): it reads as empty.
    missing: bool,
    failure: Option<Failure>,
    /// Objects this process deleted, with the version they had then: an event for an
    /// older version still on its way must not bring them back.
    deleted: HashMap<Key, u64>,
}

impl<T> Cache<T> {
    /// The watch delivered an event: it runs again, and the view is current.
    fn watching_again(&mut self) {
        if self.synced {
            self.failure = None;
        }
    }
}

impl<T> Default for Cache<T> {
    fn default() -> Self {
        Cache {
            objects: BTreeMap::new(),
            relisting: None,
            synced: false,
            missing: false,
            failure: None,
            deleted: HashMap::new(),
        }
    }
}

/// What applying one item of a watch stream asks of the task that drives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// The view moved (a list completed, an object changed): failures are behind.
    Progress,
    /// Nothing to decide (a list began, an object of it arrived).
    Quiet,
    /// A request failed: back off before the next.
    Failed,
    /// The kind is not served: stop, and list again after [`MISSING_KIND_RETRY`].
    Missing,
}

/// How long an optional kind the cluster does not serve (404: its CRD is not
/// installed) is left before it is listed again. Installing a CRD is rare and slow;
/// five minutes late is soon enough to see it, and a quiet process then asks about the
/// kind a dozen times an hour instead of every second.
pub const MISSING_KIND_RETRY: Duration = Duration::from_secs(300);

/// One kind, watched: the objects and the state of its watch. Shared by the task that
/// applies the watch's events and by the readers.
pub(crate) struct Reflected<T> {
    /// "pods", "nodes", "nodepools"...
    what: &'static str,
    /// A kind the cluster may not serve (a CRD): 404 reads as "not installed", empty.
    /// Says what goes without it, for the warning.
    optional: Option<&'static str>,
    /// The warning that the kind is not served was given (once per process).
    warned_missing: AtomicBool,
    cache: Mutex<Cache<T>>,
    /// Woken at every change of `cache`.
    changed: Notify,
    /// Events applied since the process started (progress, for catching up).
    applied: AtomicU64,
}

impl<T: Clone> Reflected<T> {
    fn new(what: &'static str, optional: Option<&'static str>) -> Self {
        Reflected {
            what,
            optional,
            warned_missing: AtomicBool::new(false),
            cache: Mutex::new(Cache::default()),
            changed: Notify::new(),
            applied: AtomicU64::new(0),
        }
    }

    fn cache(&self) -> MutexGuard<'_, Cache<T>> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn touched(&self) {
        self.applied.fetch_add(1, Ordering::Relaxed);
        self.changed.notify_waiters();
    }

    pub(crate) fn applied(&self) -> u64 {
        self.applied.load(Ordering::Relaxed)
    }

    /// Applies one item of the watch stream; what the task driving it does next.
    fn apply<K: Resource>(
        &self,
        item: Result<Event<K>, watcher::Error>,
        convert: fn(&K) -> Result<T, String>,
        missing_retry: Duration,
    ) -> Step {
        let step = {
            let mut cache = self.cache();
            match item {
                Ok(Event::Init) => {
                    cache.relisting = Some(BTreeMap::new());
                    Step::Quiet
                }
                Ok(Event::InitApply(object)) => {
                    let (key, entry) = entry_of(&object, convert);
                    match cache.relisting.as_mut() {
                        Some(relisting) => {
                            relisting.insert(key, entry);
                        }
                        None => upsert(&mut cache, key, entry),
                    }
                    Step::Quiet
                }
                Ok(Event::InitDone) => {
                    if let Some(listed) = cache.relisting.take() {
                        cache.objects = listed;
                    }
                    cache.synced = true;
                    cache.missing = false;
                    cache.failure = None;
                    cache.deleted.clear();
                    Step::Progress
                }
                Ok(Event::Apply(object)) => {
                    let (key, entry) = entry_of(&object, convert);
                    upsert(&mut cache, key, entry);
                    cache.watching_again();
                    Step::Progress
                }
                Ok(Event::Delete(object)) => {
                    let (key, _) = key_of(object.meta());
                    cache.objects.remove(&key);
                    cache.deleted.remove(&key);
                    cache.watching_again();
                    Step::Progress
                }
                Err(e) => self.record_error(&mut cache, e, missing_retry),
            }
        };
        self.touched();
        step
    }

    /// A stream that broke resumes by itself from its last version, and a version too
    /// old relists: neither makes the view doubtful. A list or watch that could not be
    /// made does, until the watch delivers again or a reader lists afresh. An optional
    /// kind that is not served (404, at the first list or later: its CRD uninstalled,
    /// and its objects with it) reads as empty.
    fn record_error(
        &self,
        cache: &mut Cache<T>,
        error: watcher::Error,
        missing_retry: Duration,
    ) -> Step {
        let kind = match &error {
            watcher::Error::WatchFailed(e) => {
                debug!(kind = self.what, error = %e, "watch stream broke; resuming from its resourceVersion");
                return Step::Failed;
            }
            watcher::Error::WatchError(status) if status.code == 410 => {
                debug!(kind = self.what, "watch expired (410 Gone); listing again");
                return Step::Failed;
            }
            watcher::Error::InitialListFailed(e) | watcher::Error::WatchStartFailed(e) => {
                classify(e)
            }
            watcher::Error::WatchError(status) => crate::error::kind_of_status(status.code),
            watcher::Error::NoResourceVersion => ErrorKind::Other,
        };
        if let (ErrorKind::NotFound, Some(without)) = (kind, self.optional) {
            cache.missing = true;
            cache.synced = true;
            cache.objects.clear();
            cache.relisting = None;
            cache.failure = None;
            cache.deleted.clear();
            if self.warned_missing.swap(true, Ordering::Relaxed) {
                debug!(kind = self.what, "still not served");
            } else {
                warn!(
                    kind = self.what,
                    without,
                    retry_seconds = missing_retry.as_secs(),
                    "the cluster does not serve this kind (its CRD is not installed): going on without it, and listing it again every retry_seconds"
                );
            }
            return Step::Missing;
        }
        if cache.failure.is_none() {
            warn!(kind = self.what, error = %error, error_kind = ?kind,
                "reading this kind failed; the watcher tries again (check that the RBAC grants list and watch)");
        } else {
            debug!(kind = self.what, error = %error, error_kind = ?kind, "reading this kind failed again");
        }
        cache.failure = Some(Failure {
            kind,
            error: Arc::new(error),
        });
        Step::Failed
    }

    /// The view of this kind if it can be vouched for (synced, its watch running); waits
    /// while the first list is under way.
    async fn vouched(&self) -> Vouched<T> {
        loop {
            let changed = self.changed.notified();
            {
                let cache = self.cache();
                match (&cache.failure, cache.synced) {
                    (None, true) => return Vouched::Read(read_of(&cache)),
                    (Some(_), true) => return Vouched::ListAfresh,
                    (Some(failure), false) => {
                        return Vouched::Failed(ClusterError::with_source(
                            failure.kind,
                            format!("listing {}", self.what),
                            SharedError(failure.error.clone()),
                        ));
                    }
                    (None, false) => {}
                }
            }
            changed.await;
        }
    }

    /// Replaces the view with a fresh list's objects.
    fn replace(&self, objects: Objects<T>) {
        {
            let mut cache = self.cache();
            cache.objects = objects;
            cache.synced = true;
            cache.missing = false;
            cache.failure = None;
            cache.deleted.clear();
        }
        self.touched();
    }

    /// The kind is not served (a fresh list answered 404).
    fn mark_missing(&self) {
        {
            let mut cache = self.cache();
            cache.objects.clear();
            cache.synced = true;
            cache.missing = true;
            cache.failure = None;
        }
        self.touched();
    }

    /// Objects that pass `keep`, cloned; `None` when the view cannot be vouched for now
    /// (not synced, or failed): the caller reads afresh.
    pub(crate) fn select(&self, keep: impl Fn(&T) -> bool) -> Option<Vec<T>> {
        let cache = self.cache();
        if !cache.synced || cache.failure.is_some() {
            return None;
        }
        Some(
            cache
                .objects
                .values()
                .filter_map(|e| e.value.as_ref().ok())
                .filter(|v| keep(v))
                .cloned()
                .collect(),
        )
    }

    /// The uid of an object in the view.
    pub(crate) fn uid(&self, key: &Key) -> Option<String> {
        self.cache().objects.get(key).and_then(|e| e.uid.clone())
    }

    /// This process wrote the object: the API server's answer replaces what the view
    /// holds, unless the view already holds a newer version.
    pub(crate) fn wrote<K: Resource>(&self, object: &K, convert: fn(&K) -> Result<T, String>) {
        let (key, entry) = entry_of(object, convert);
        upsert(&mut self.cache(), key, entry);
        self.touched();
    }

    /// This process changed the object in a way its next version will show (an
    /// eviction makes a pod terminating): `change` is applied to the view's copy now.
    pub(crate) fn amend(&self, key: &Key, change: impl FnOnce(&mut T)) {
        if let Some(Ok(value)) = self.cache().objects.get_mut(key).map(|e| e.value.as_mut()) {
            change(value);
        }
        self.touched();
    }

    /// This process deleted the object: it leaves the view now.
    pub(crate) fn deleted(&self, key: &Key) {
        {
            let mut cache = self.cache();
            if let Some(entry) = cache.objects.remove(key) {
                let version = entry.version.unwrap_or(0);
                cache.deleted.insert(key.clone(), version);
            }
        }
        self.touched();
    }
}

/// Inserts or replaces, never going back to an older version (of a live object, or of
/// one this process deleted).
fn upsert<T>(cache: &mut Cache<T>, key: Key, entry: Box<Entry<T>>) {
    let older = |known: Option<u64>| match (known, entry.version) {
        (Some(known), Some(new)) => new < known,
        _ => false,
    };
    if let Some(&gone_at) = cache.deleted.get(&key) {
        if older(Some(gone_at)) || entry.version == Some(gone_at) {
            return;
        }
        cache.deleted.remove(&key);
    }
    if older(cache.objects.get(&key).and_then(|e| e.version)) {
        return;
    }
    cache.objects.insert(key, entry);
}

fn read_of<T: Clone>(cache: &Cache<T>) -> Read<T> {
    let mut objects = Vec::with_capacity(cache.objects.len());
    let mut invalid = Vec::new();
    for entry in cache.objects.values() {
        match &entry.value {
            Ok(value) => objects.push(value.clone()),
            Err(why) => invalid.push(why.clone()),
        }
    }
    Read {
        objects,
        invalid,
        missing: cache.missing,
    }
}

pub(crate) fn key_of(meta: &kube::api::ObjectMeta) -> (Key, Option<String>) {
    (
        (
            meta.namespace.clone().unwrap_or_default(),
            meta.name.clone().unwrap_or_default(),
        ),
        meta.uid.clone(),
    )
}

fn entry_of<K: Resource, T>(
    object: &K,
    convert: fn(&K) -> Result<T, String>,
) -> (Key, Box<Entry<T>>) {
    let meta = object.meta();
    let (key, uid) = key_of(meta);
    let version = meta
        .resource_version
        .as_deref()
        .and_then(|v| v.parse::<u64>().ok());
    (
        key,
        Box::new(Entry {
            value: convert(object),
            uid,
            version,
        }),
    )
}

/// One watched kind: its view, and how to read it afresh when the view cannot be
/// vouched for.
pub(crate) struct Watched<K: Resource, T> {
    pub(crate) view: Arc<Reflected<T>>,
    api: Api<K>,
    convert: fn(&K) -> Result<T, String>,
    page_size: u32,
    task: AbortHandle,
}

impl<K: Resource, T> Drop for Watched<K, T> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl<K, T> Watched<K, T>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    T: Clone + Send + 'static,
{
    /// Starts watching (on the current tokio runtime): the first list, then the watch,
    /// with kube-rs's default backoff between failed attempts (reset when the watch
    /// delivers, not when a list is merely tried again), and a kind that is not served
    /// asked about again after `missing_retry`. `optional`: what goes without the kind
    /// when the cluster does not serve it (`None`: a kind every cluster serves).
    pub(crate) fn start(
        what: &'static str,
        optional: Option<&'static str>,
        api: Api<K>,
        convert: fn(&K) -> Result<T, String>,
        page_size: u32,
        missing_retry: Duration,
    ) -> Self {
        let view = Arc::new(Reflected::new(what, optional));
        // From the API server's watch cache (resourceVersion=0, NotOlderThan), not a
        // quorum read of etcd: the LIST a busy API server can afford. Bookmarks keep the
        // resourceVersion to resume from current even for a kind that rarely changes.
        let config = watcher::Config::default()
            .any_semantic()
            .page_size(page_size)
            .timeout(WATCH_TIMEOUT_SECS);
        let applying = view.clone();
        let watch = api.clone();
        // kube-rs's `default_backoff()` resets its backoff on every item the watcher
        // yields, and a watcher yields `Init` before each attempt to list: a list that
        // fails every time was retried every 0.8 s. Here the backoff resets only when
        // the watch delivers.
        let task = tokio::spawn(async move {
            loop {
                let mut backoff = DefaultBackoff::default();
                let mut events = pin!(watcher::watcher(watch.clone(), config.clone()));
                while let Some(item) = events.next().await {
                    match applying.apply(item, convert, missing_retry) {
                        Step::Progress => backoff.reset(),
                        Step::Quiet => {}
                        Step::Failed => {
                            if let Some(wait) = backoff.next() {
                                tokio::time::sleep(wait).await;
                            }
                        }
                        Step::Missing => break,
                    }
                }
                // Not served: asked again later, so that installing the CRD is seen.
                tokio::time::sleep(missing_retry).await;
            }
        })
        .abort_handle();
        Watched {
            view,
            api,
            convert,
            page_size,
            task,
        }
    }

    /// The kind as the view holds it, or read afresh when the view cannot be vouched for.
    pub(crate) async fn read(&self) -> Result<Read<T>, ClusterError> {
        match self.view.vouched().await {
            Vouched::Read(read) => return Ok(read),
            Vouched::Failed(e) => return Err(e),
            Vouched::ListAfresh => {
                debug!(
                    kind = self.view.what,
                    "a watch could not be restarted; listing afresh"
                );
            }
        }
        match self.list().await {
            Ok(listed) => {
                self.view.replace(listed);
            }
            Err(e) if e.kind == ErrorKind::NotFound && self.view.optional.is_some() => {
                self.view.mark_missing()
            }
            Err(e) => return Err(e),
        }
        Ok(read_of(&self.view.cache()))
    }

    /// Every object, page by page (the read of a kind whose watch failed).
    async fn list(&self) -> Result<Objects<T>, ClusterError> {
        let mut out = BTreeMap::new();
        let mut continue_token: Option<String> = None;
        loop {
            let mut params = ListParams::default().limit(self.page_size);
            if let Some(token) = &continue_token {
                params = params.continue_token(token);
            }
            let page = self
                .api
                .list(&params)
                .await
                .map_err(|e| cluster_error(format!("listing {}", self.view.what), e))?;
            for object in &page.items {
                let (key, entry) = entry_of(object, self.convert);
                out.insert(key, entry);
            }
            match page.metadata.continue_ {
                Some(token) if !token.is_empty() => continue_token = Some(token),
                _ => return Ok(out),
            }
        }
    }
}

/// Lets every watch apply what has already reached this process before a read: after
/// a warm process thaws, the events of the frozen seconds are in the sockets, and a
/// tick should not plan on the view from before them. Yields until no watch makes
/// progress for two turns in a row (bounded).
pub(crate) async fn catch_up(progress: impl Fn() -> u64) {
    let mut before = progress();
    let mut idle = 0;
    for _ in 0..CATCH_UP_TURNS {
        tokio::task::yield_now().await;
        let now = progress();
        if now == before {
            idle += 1;
            if idle == 2 {
                return;
            }
        } else {
            idle = 0;
            before = now;
        }
    }
}

/// How long the API server keeps one watch request open before ending it (the watcher
/// then watches again from its last resourceVersion, which costs the server a lookup in
/// its watch cache). Under the client's 30-s read timeout
/// ([`crate::client::RESPONSE_TIMEOUT`]), which also bounds reads of a quiet stream: a
/// watch the server ends on time is a clean end, not a timed-out read.
const WATCH_TIMEOUT_SECS: u32 = 25;

/// The most turns [`catch_up`] yields.
const CATCH_UP_TURNS: usize = 64;

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(value: &str, version: u64) -> Box<Entry<String>> {
        Box::new(Entry {
            value: Ok(value.to_string()),
            uid: None,
            version: Some(version),
        })
    }

    fn key(name: &str) -> Key {
        ("default".into(), name.into())
    }

    #[test]
    fn an_older_version_never_replaces_a_newer_one() {
        let mut cache = Cache::default();
        upsert(&mut cache, key("a"), entry("new", 20));
        upsert(&mut cache, key("a"), entry("old", 12));
        assert_eq!(cache.objects[&key("a")].value, Ok("new".to_string()));
        upsert(&mut cache, key("a"), entry("newer", 21));
        assert_eq!(cache.objects[&key("a")].value, Ok("newer".to_string()));
    }

    #[test]
    fn an_object_this_process_deleted_is_not_brought_back_by_an_event_from_before() {
        let view: Reflected<String> = Reflected::new("test", None);
        view.cache().objects.insert(key("a"), entry("live", 30));
        view.deleted(&key("a"));
        upsert(&mut view.cache(), key("a"), entry("stale", 30));
        upsert(&mut view.cache(), key("a"), entry("staler", 25));
        assert!(view.cache().objects.is_empty());
        // Created again under the same name: a later version.
        upsert(&mut view.cache(), key("a"), entry("again", 31));
        assert_eq!(
            view.cache().objects[&key("a")].value,
            Ok("again".to_string())
        );
    }

    #[test]
    fn versions_that_are_not_numbers_replace_in_order_of_arrival() {
        let mut cache = Cache::default();
        let opaque = |v: &str| {
            Box::new(Entry {
                value: Ok(v.to_string()),
                uid: None,
                version: None,
            })
        };
        upsert(&mut cache, key("a"), opaque("first"));
        upsert(&mut cache, key("a"), opaque("second"));
        assert_eq!(cache.objects[&key("a")].value, Ok("second".to_string()));
    }

    #[test]
    fn reading_the_watched_pods_copies_no_pod() {
        let view: Reflected<nodewright_core::cluster::Pod> = Reflected::new("pods", None);
        let pod = nodewright_core::testing::pod("web-0", "100m", "64Mi");
        view.replace(BTreeMap::from([(
            key("web-0"),
            Box::new(Entry {
                value: Ok(pod.clone()),
                uid: None,
                version: Some(1),
            }),
        )]));
        let read = read_of(&view.cache());
        assert!(
            read.objects[0].same_as(&pod),
            "a read hands out the view's pod"
        );
        let selected = view.select(|_| true).expect("synced");
        assert!(selected[0].same_as(&pod), "so does a selection");
    }

    #[test]
    fn a_view_that_failed_is_not_served_until_read_afresh() {
        let view: Reflected<String> = Reflected::new("test", None);
        view.replace(BTreeMap::from([(key("a"), entry("x", 1))]));
        assert_eq!(view.select(|_| true), Some(vec!["x".to_string()]));
        view.cache().failure = Some(Failure {
            kind: ErrorKind::Unauthorized,
            error: Arc::new(watcher::Error::NoResourceVersion),
        });
        assert_eq!(view.select(|_| true), None);
        view.replace(BTreeMap::from([(key("b"), entry("y", 2))]));
        assert_eq!(view.select(|_| true), Some(vec!["y".to_string()]));
    }
}
