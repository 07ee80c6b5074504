//! The watch cache: one storage watch for the whole registry, fanned out into one
//! in-memory cache per resource. Each cache holds the current objects (for lists at
//! RV=0 / NotOlderThan and for initial watch events) and a window of recent events
//! (for watches from a resourceVersion). An object version from storage is kept as its
//! JSON (the stored bytes with its resourceVersion, [`CachedObject::from_stored`]) and
//! decoded only when something reads it as a value; that one JSON serves every list
//! that returns it and every watch event that carries it, however many watchers see it
//! (upstream's `cachingObject`).

use std::collections::{BTreeMap, VecDeque};
use std::ops::Deref;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use ferrokube_apimachinery::errors::ApiError;
use ferrokube_storage::{
    Deleted, KeyValue, ListOptions, ListResult, Preconditions, Revision, RevisionMatch, Storage,
    StorageStats, UpdateFn, WatchEvent, WatchStream,
};
use futures::StreamExt;
use parking_lot::{RwLock, RwLockUpgradableReadGuard, RwLockWriteGuard};
use serde_json::Value;
use tokio::sync::{broadcast, mpsc};

use crate::meta;

/// Events a cache keeps for watches from a resourceVersion.
pub const EVENT_WINDOW: usize = 10_000;
/// Capacity of the live-event channel; a watcher further behind is closed.
const CHANNEL_CAPACITY: usize = 4096;
/// How long [`ResourceCache::sync_own_writes`] waits for the cache before it gives up
/// and lets the reader use what the cache has (it is normally microseconds behind).
const OWN_WRITES_WAIT: Duration = Duration::from_secs(3);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One version of one object as the cache hands it out: its JSON and its decoded
/// value, shared by every clone (lists, watch events, initial watch events). Cloning is
/// one reference-count increment. It dereferences to the object, so selectors and
/// readers use it as a `Value`.
///
/// An object read from storage ([`CachedObject::from_stored`]) starts as its JSON only
/// and is decoded on first use: most cached versions are only ever served as JSON (or
/// never read before they are replaced), and the JSON is a sixth of the decoded tree's
/// memory. An object built in memory ([`CachedObject::new`]) is serialized on first use.
#[derive(Clone, Debug)]
pub struct CachedObject(Arc<CachedForms>);

#[derive(Debug)]
struct CachedForms {
    value: OnceLock<Arc<Value>>,
    json: OnceLock<Bytes>,
}

impl CachedObject {
    pub fn new(value: Value) -> Self {
        Self::from_arc(Arc::new(value))
    }

    pub fn from_arc(value: Arc<Value>) -> Self {
        CachedObject(Arc::new(CachedForms {
            value: OnceLock::from(value),
            json: OnceLock::new(),
        }))
    }

    /// A stored object at `revision` (its resourceVersion), without decoding it;
    /// `None` when the stored bytes are not a JSON object.
    pub fn from_stored(value: &[u8], revision: Revision) -> Option<Self> {
        let json = crate::stored_json::with_resource_version(value, revision)?;
        Some(CachedObject(Arc::new(CachedForms {
            value: OnceLock::new(),
            json: OnceLock::from(json),
        })))
    }

    /// The shared value (the same `Arc` until the object changes).
    pub fn value(&self) -> &Arc<Value> {
        self.0.value.get_or_init(|| {
            // Only objects made from their JSON lack a value, and that JSON was checked
            // to be an object when it was made, so decoding it cannot fail.
            let json = self.0.json.get().map(|b| &b[..]).unwrap_or_default();
            Arc::new(serde_json::from_slice(json).unwrap_or_default())
        })
    }

    /// The object in JSON, serialized once for all holders of this version.
    pub fn json(&self) -> &Bytes {
        self.0.json.get_or_init(|| {
            // Objects without JSON were made from a value; serializing one cannot fail.
            let value = self.0.value.get().map(|v| &**v).unwrap_or(&Value::Null);
            Bytes::from(serde_json::to_vec(value).unwrap_or_default())
        })
    }
}

impl Deref for CachedObject {
    type Target = Value;

    fn deref(&self) -> &Value {
        self.value()
    }
}

/// One change of one object, shared by every watcher.
#[derive(Debug)]
pub struct CachedEvent {
    pub kind: EventType,
    pub key: String,
    /// The object after the change (for deletes: the last state, with the delete's
    /// resourceVersion). For adds and updates, the same [`CachedObject`] the cache
    /// lists, so a list and the event share one serialization.
    pub object: CachedObject,
    pub prev: Option<CachedObject>,
    pub revision: Revision,
    json: OnceLock<Bytes>,
    protobuf: OnceLock<Bytes>,
}

impl CachedEvent {
    /// The same change with its objects in another form (a resource served from
    /// another's storage, see [`crate::strategy::StorageCodec`]).
    pub(crate) fn converted(&self, f: impl Fn(&Value) -> Value) -> CachedEvent {
        CachedEvent {
            kind: self.kind,
            key: self.key.clone(),
            object: CachedObject::new(f(&self.object)),
            prev: self.prev.as_ref().map(|p| CachedObject::new(f(p))),
            revision: self.revision,
            json: OnceLock::new(),
            protobuf: OnceLock::new(),
        }
    }

    /// The same change with `object` in its place and no previous state (a custom
    /// resource's event converted by its webhook).
    pub(crate) fn with_object(&self, object: CachedObject) -> CachedEvent {
        CachedEvent {
            kind: self.kind,
            key: self.key.clone(),
            object,
            prev: None,
            revision: self.revision,
            json: OnceLock::new(),
            protobuf: OnceLock::new(),
        }
    }

    /// `{"type":"ADDED","object":{...}}\n`, made on first use from the object's
    /// shared serialization.
    pub fn json_line(&self) -> Bytes {
        self.json
            .get_or_init(|| watch_line_json(self.kind.as_str(), self.object.json()))
            .clone()
    }

    /// The event as a protobuf watch frame, made by `encode` for the first watcher that
    /// asks (the apiserver owns the encoding) and shared with the others.
    pub fn protobuf_frame(&self, encode: impl FnOnce(&CachedEvent) -> Bytes) -> Bytes {
        self.protobuf.get_or_init(|| encode(self)).clone()
    }
}

/// One watch event line in JSON.
pub fn watch_line(kind: &str, object: &Value) -> Bytes {
    // Serializing a Value cannot fail.
    watch_line_json(kind, &serde_json::to_vec(object).unwrap_or_default())
}

/// One watch event line around an object already in JSON.
pub fn watch_line_json(kind: &str, object_json: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(object_json.len() + kind.len() + 32);
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\",\"object\":");
    out.extend_from_slice(object_json);
    out.extend_from_slice(b"}\n");
    Bytes::from(out)
}

/// What a watcher receives.
#[derive(Debug, Clone)]
pub enum WatchItem {
    /// A shared event, passed on as it is.
    Event(Arc<CachedEvent>),
    /// An event specific to this watcher (initial state, or an object entering or
    /// leaving its selector).
    Synthetic(EventType, CachedObject),
    /// A bookmark at this revision; `initial_events_end` marks the end of the initial
    /// events of a `sendInitialEvents` watch.
    Bookmark {
        revision: Revision,
        initial_events_end: bool,
    },
    /// The watch ends with this error (e.g. 410 Gone).
    Error(ApiError),
}

/// Decides whether a watcher wants an object.
pub type Filter = Arc<dyn Fn(&Value) -> bool + Send + Sync>;

struct State {
    objects: BTreeMap<String, CachedObject>,
    events: VecDeque<Arc<CachedEvent>>,
    /// Everything up to this revision is applied.
    revision: Revision,
    /// Watches from a revision `>= oldest` can be served from `events`.
    oldest: Revision,
    /// Live events for the open watchers; made by the first watcher and dropped with
    /// the event after the last one leaves. The channel's ring is allocated and written
    /// in full when it is made (about 160 KiB), and most of the caches have no watcher
    /// at all on an apiserver without controllers: one per cache was most of the idle
    /// heap (docs/benchmarks.md, session 37).
    tx: Option<broadcast::Sender<Arc<CachedEvent>>>,
}

impl State {
    /// The entries whose keys start with `prefix`, in key order.
    fn under<'a>(
        &'a self,
        prefix: &'a str,
    ) -> impl Iterator<Item = (&'a String, &'a CachedObject)> + 'a {
        self.objects
            .range(prefix.to_string()..)
            .take_while(move |(k, _)| k.starts_with(prefix))
    }

    fn objects_under(&self, prefix: &str) -> Vec<CachedObject> {
        self.under(prefix).map(|(_, v)| v.clone()).collect()
    }
}

/// The cache of one resource (one key prefix).
pub struct ResourceCache {
    prefix: String,
    state: RwLock<State>,
    /// The revision every cache of the hub has applied, shared by all of them: the hub
    /// advances every cache after each event, so one notification per event serves
    /// every waiter (one channel per cache cost a notification of each per event).
    revision_tx: Arc<tokio::sync::watch::Sender<Revision>>,
    /// The newest revision this process wrote under the prefix (see [`WriteTracking`]).
    last_write: AtomicI64,
    /// Bumped after every change to the objects, under the state's write lock.
    changes: AtomicU64,
}

impl std::fmt::Debug for ResourceCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceCache")
            .field("prefix", &self.prefix)
            .finish()
    }
}

/// Parses a stored value into an object with `metadata.resourceVersion` set.
pub fn decode_stored(value: &[u8], revision: Revision) -> Option<Value> {
    let mut obj: Value = serde_json::from_slice(value).ok()?;
    meta::set_meta(
        &mut obj,
        "resourceVersion",
        Value::String(revision.to_string()),
    );
    Some(obj)
}

impl ResourceCache {
    fn new(prefix: String, revision_tx: Arc<tokio::sync::watch::Sender<Revision>>) -> Self {
        ResourceCache {
            prefix,
            state: RwLock::new(State {
                objects: BTreeMap::new(),
                events: VecDeque::new(),
                revision: 0,
                oldest: 0,
                tx: None,
            }),
            revision_tx,
            last_write: AtomicI64::new(0),
            changes: AtomicU64::new(0),
        }
    }

    /// How many times the objects have changed (each event applied, each relist). A
    /// reader that digests them (API Priority and Fairness, on every request) compares
    /// this instead of taking a snapshot: a snapshot taken after reading a count has at
    /// least the changes it counts.
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }

    /// Records that this process wrote under the prefix at `revision`.
    pub fn note_write(&self, revision: Revision) {
        self.last_write.fetch_max(revision, Ordering::AcqRel);
    }

    /// Whether a reader would find nothing here even after [`Self::sync_own_writes`]:
    /// the cache holds no object and this process never wrote under the prefix. A
    /// cheap check for admission plugins that have nothing to do until a
    /// configuration exists (webhooks, policies), before they take a snapshot.
    pub fn is_known_empty(&self) -> bool {
        self.last_write.load(Ordering::Acquire) == 0 && self.state.read().objects.is_empty()
    }

    /// Waits until the cache has applied every write this process made under the
    /// prefix, so a reader of the cache sees its own writes (a webhook configuration
    /// or policy created through this apiserver applies to the next request) without
    /// a storage round trip. Writes by other apiservers show up with the watch's lag,
    /// as upstream's informer-fed admission plugins see them. Normally this returns at
    /// once: writes to configuration kinds are rare and the cache trails storage by
    /// microseconds. If the cache does not catch up within a few seconds (its storage
    /// watch is down), the reader goes on with what the cache has.
    pub async fn sync_own_writes(&self) {
        let wanted = self.last_write.load(Ordering::Acquire);
        if wanted <= self.revision() {
            return;
        }
        if self.wait_for(wanted, OWN_WRITES_WAIT).await.is_err() {
            tracing::warn!(
                prefix = self.prefix,
                revision = wanted,
                "the watch cache has not applied this apiserver's own write yet; reading it as it is"
            );
        }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// How many objects the cache holds: every object under its prefix once the
    /// cache has listed them.
    pub fn object_count(&self) -> usize {
        self.state.read().objects.len()
    }

    pub fn revision(&self) -> Revision {
        self.state.read().revision
    }

    /// Replaces the content after a (re)list; open watchers are closed, as they may
    /// have missed events.
    fn reset(&self, items: Vec<(String, CachedObject)>, revision: Revision) {
        let mut st = self.state.write();
        st.objects = items.into_iter().collect();
        st.events.clear();
        st.revision = revision;
        st.oldest = revision;
        // Dropping the sender ends every open watcher's stream.
        st.tx = None;
        self.changes.fetch_add(1, Ordering::Release);
    }

    /// Marks everything up to `revision` applied. Waiters are told by the hub, once
    /// every cache has advanced ([`CacheHub::advance_all`]).
    fn advance(&self, revision: Revision) {
        let mut st = self.state.write();
        if revision > st.revision {
            st.revision = revision;
        }
    }

    fn apply(&self, ev: &WatchEvent) {
        let (kind, key, object, revision) = match ev {
            WatchEvent::Added(kv) => (
                EventType::Added,
                &kv.key,
                CachedObject::from_stored(&kv.value, kv.mod_revision),
                kv.mod_revision,
            ),
            WatchEvent::Modified { current, .. } => (
                EventType::Modified,
                &current.key,
                CachedObject::from_stored(&current.value, current.mod_revision),
                current.mod_revision,
            ),
            WatchEvent::Deleted { previous, revision } => (
                EventType::Deleted,
                &previous.key,
                CachedObject::from_stored(&previous.value, *revision),
                *revision,
            ),
            WatchEvent::Progress(rev) => {
                self.advance(*rev);
                return;
            }
        };
        let Some(object) = object else {
            tracing::warn!(key, "undecodable stored value skipped by the watch cache");
            self.advance(revision);
            return;
        };
        let mut st = self.state.write();
        if revision <= st.revision {
            return;
        }
        let prev = if kind == EventType::Deleted {
            st.objects.remove(key)
        } else {
            st.objects.insert(key.clone(), object.clone())
        };
        let event = Arc::new(CachedEvent {
            kind,
            key: key.clone(),
            object,
            prev,
            revision,
            json: OnceLock::new(),
            protobuf: OnceLock::new(),
        });
        if st.events.len() >= EVENT_WINDOW
            && let Some(old) = st.events.pop_front()
        {
            st.oldest = old.revision;
        }
        st.events.push_back(event.clone());
        st.revision = revision;
        self.changes.fetch_add(1, Ordering::Release);
        if let Some(tx) = &st.tx
            && tx.send(event).is_err()
        {
            // The last watcher has gone: give the ring back until the next one comes.
            st.tx = None;
        }
    }

    /// Waits until the cache has applied `revision` (at most `timeout`).
    pub async fn wait_for(&self, revision: Revision, timeout: Duration) -> Result<(), ApiError> {
        let mut rx = self.revision_tx.subscribe();
        let res = tokio::time::timeout(timeout, rx.wait_for(|r| *r >= revision)).await;
        match res {
            Ok(Ok(_)) => Ok(()),
            _ => Err(ApiError::too_large_resource_version(
                u64::try_from(revision).unwrap_or(0),
                u64::try_from(self.revision()).unwrap_or(0),
                1,
            )),
        }
    }

    /// The objects under `prefix` (a namespace's prefix or the whole resource) and
    /// the revision they are current at.
    pub fn snapshot(&self, prefix: &str) -> (Vec<Arc<Value>>, Revision) {
        // Decoded (on first use) after the lock is released.
        let (objects, revision) = self.snapshot_objects(prefix);
        (
            objects.iter().map(|o| o.value().clone()).collect(),
            revision,
        )
    }

    /// The object at `key`, if the cache has it.
    pub fn get(&self, key: &str) -> Option<CachedObject> {
        self.state.read().objects.get(key).cloned()
    }

    /// The objects under `prefix` as the cache holds them (JSON and value, each made
    /// once), and the revision they are current at.
    pub fn snapshot_objects(&self, prefix: &str) -> (Vec<CachedObject>, Revision) {
        let st = self.state.read();
        (st.objects_under(prefix), st.revision)
    }

    /// [`Self::snapshot_objects`] with each object's key, in the same order.
    pub fn snapshot_keyed_objects(
        &self,
        prefix: &str,
    ) -> (Vec<String>, Vec<CachedObject>, Revision) {
        let st = self.state.read();
        let (keys, objects) = st
            .under(prefix)
            .map(|(k, v)| (k.clone(), v.clone()))
            .unzip();
        (keys, objects, st.revision)
    }

    /// Starts a watch. `from`: `None` starts now with the current objects as ADDED
    /// events (`initial_end` then sends the initial-events-end bookmark); `Some(rv)`
    /// replays every event after `rv` (410 when the window no longer has it).
    pub async fn watch(
        self: &Arc<Self>,
        prefix: String,
        from: Option<Revision>,
        initial_end: bool,
        filter: Filter,
        bookmarks: bool,
        bookmark_interval: Duration,
    ) -> Result<mpsc::Receiver<WatchItem>, ApiError> {
        if let Some(rv) = from {
            self.wait_for(rv, Duration::from_secs(3)).await?;
        }
        // The backlog is taken under the lock and filtered after it: a selector decodes
        // objects on first use, which must not hold up the cache's writer.
        let (objects, events, mut rx, start_rev) = {
            let st = self.state.upgradable_read();
            let (st, rx) = match &st.tx {
                Some(tx) => {
                    let rx = tx.subscribe();
                    (RwLockUpgradableReadGuard::downgrade(st), rx)
                }
                None => {
                    let mut st = RwLockUpgradableReadGuard::upgrade(st);
                    let tx = broadcast::channel(CHANNEL_CAPACITY).0;
                    let rx = tx.subscribe();
                    st.tx = Some(tx);
                    (RwLockWriteGuard::downgrade(st), rx)
                }
            };
            match from {
                None => (st.objects_under(&prefix), Vec::new(), rx, st.revision),
                Some(rv) => {
                    if rv < st.oldest {
                        return Err(ApiError::resource_expired(format!(
                            "too old resource version: {rv} ({})",
                            st.oldest
                        )));
                    }
                    let events: Vec<Arc<CachedEvent>> = st
                        .events
                        .iter()
                        .filter(|e| e.revision > rv && e.key.starts_with(&prefix))
                        .cloned()
                        .collect();
                    (Vec::new(), events, rx, st.revision)
                }
            }
        };
        let initial: Vec<WatchItem> = objects
            .into_iter()
            .filter(|o| filter(o))
            .map(|o| WatchItem::Synthetic(EventType::Added, o))
            .chain(events.iter().filter_map(|e| route(e, &filter)))
            .collect();
        let (tx, out) = mpsc::channel(256);
        tokio::spawn(async move {
            for item in initial {
                if tx.send(item).await.is_err() {
                    return;
                }
            }
            if initial_end
                && tx
                    .send(WatchItem::Bookmark {
                        revision: start_rev,
                        initial_events_end: true,
                    })
                    .await
                    .is_err()
            {
                return;
            }
            let mut last = start_rev;
            let mut ticker = tokio::time::interval(bookmark_interval);
            ticker.reset();
            loop {
                tokio::select! {
                    ev = rx.recv() => match ev {
                        Ok(ev) => {
                            if ev.revision <= last || !ev.key.starts_with(&prefix) {
                                continue;
                            }
                            last = ev.revision;
                            if let Some(item) = route(&ev, &filter)
                                && tx.send(item).await.is_err()
                            {
                                return;
                            }
                        }
                        // Lagged or reset: the client re-watches from its last revision.
                        Err(_) => return,
                    },
                    _ = ticker.tick(), if bookmarks => {
                        if tx.send(WatchItem::Bookmark { revision: last, initial_events_end: false }).await.is_err() {
                            return;
                        }
                    }
                    _ = tx.closed() => return,
                }
            }
        });
        Ok(out)
    }
}

/// What one watcher sees of a shared event, given its filter: the event itself, an
/// ADDED/DELETED when the object enters/leaves the selector, or nothing.
fn route(ev: &Arc<CachedEvent>, filter: &Filter) -> Option<WatchItem> {
    let now = filter(&ev.object);
    let before = ev.prev.as_ref().is_some_and(|p| filter(p));
    match ev.kind {
        EventType::Added | EventType::Deleted => now.then(|| WatchItem::Event(ev.clone())),
        EventType::Modified => match (before, now) {
            (true, true) => Some(WatchItem::Event(ev.clone())),
            (false, true) => Some(WatchItem::Synthetic(EventType::Added, ev.object.clone())),
            (true, false) => Some(WatchItem::Synthetic(EventType::Deleted, ev.object.clone())),
            (false, false) => None,
        },
    }
}

/// The storage one resource's store writes through: every successful write records its
/// revision in the resource's cache ([`ResourceCache::note_write`]), which is what
/// [`ResourceCache::sync_own_writes`] waits for. Reads pass straight through.
pub struct WriteTracking {
    inner: Arc<dyn Storage>,
    cache: Arc<ResourceCache>,
}

impl WriteTracking {
    pub fn new(inner: Arc<dyn Storage>, cache: Arc<ResourceCache>) -> Self {
        WriteTracking { inner, cache }
    }
}

#[async_trait]
impl Storage for WriteTracking {
    async fn create(&self, key: &str, value: Bytes) -> ferrokube_storage::Result<Revision> {
        let revision = self.inner.create(key, value).await?;
        self.cache.note_write(revision);
        Ok(revision)
    }

    async fn get(
        &self,
        key: &str,
        revision: Option<Revision>,
    ) -> ferrokube_storage::Result<KeyValue> {
        self.inner.get(key, revision).await
    }

    async fn list(
        &self,
        prefix: &str,
        options: &ListOptions,
    ) -> ferrokube_storage::Result<ListResult> {
        self.inner.list(prefix, options).await
    }

    async fn guaranteed_update(
        &self,
        key: &str,
        preconditions: &Preconditions,
        update: &mut UpdateFn<'_>,
    ) -> ferrokube_storage::Result<KeyValue> {
        let kv = self
            .inner
            .guaranteed_update(key, preconditions, update)
            .await?;
        self.cache.note_write(kv.mod_revision);
        Ok(kv)
    }

    async fn compare_and_swap(
        &self,
        key: &str,
        expected_revision: Revision,
        value: Bytes,
    ) -> ferrokube_storage::Result<KeyValue> {
        let kv = self
            .inner
            .compare_and_swap(key, expected_revision, value)
            .await?;
        self.cache.note_write(kv.mod_revision);
        Ok(kv)
    }

    async fn delete(
        &self,
        key: &str,
        preconditions: &Preconditions,
    ) -> ferrokube_storage::Result<Deleted> {
        let deleted = self.inner.delete(key, preconditions).await?;
        self.cache.note_write(deleted.revision);
        Ok(deleted)
    }

    async fn watch(
        &self,
        prefix: &str,
        from_revision: Revision,
    ) -> ferrokube_storage::Result<WatchStream> {
        self.inner.watch(prefix, from_revision).await
    }

    async fn compact(&self, revision: Revision) -> ferrokube_storage::Result<()> {
        self.inner.compact(revision).await
    }

    async fn current_revision(&self) -> ferrokube_storage::Result<Revision> {
        self.inner.current_revision().await
    }

    fn watch_sees_every_revision(&self) -> bool {
        self.inner.watch_sees_every_revision()
    }

    async fn stats(&self) -> ferrokube_storage::Result<StorageStats> {
        self.inner.stats().await
    }

    fn backend(&self) -> ferrokube_storage::Backend {
        self.inner.backend()
    }
}

/// All resource caches, fed by one storage watch on the common prefix.
pub struct CacheHub {
    caches: Vec<Arc<ResourceCache>>,
    /// The revision every cache has applied ([`ResourceCache::wait_for`] waits on it).
    revision_tx: Arc<tokio::sync::watch::Sender<Revision>>,
}

impl std::fmt::Debug for CacheHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheHub")
            .field("caches", &self.caches.len())
            .finish()
    }
}

impl CacheHub {
    /// Caches for the given key prefixes (each without trailing slash).
    pub fn new(prefixes: impl IntoIterator<Item = String>) -> Self {
        let revision_tx = Arc::new(tokio::sync::watch::channel(0).0);
        CacheHub {
            caches: prefixes
                .into_iter()
                .map(|p| Arc::new(ResourceCache::new(format!("{p}/"), revision_tx.clone())))
                .collect(),
            revision_tx,
        }
    }

    pub fn cache(&self, prefix: &str) -> Option<Arc<ResourceCache>> {
        let p = format!("{prefix}/");
        self.caches.iter().find(|c| c.prefix == p).cloned()
    }

    fn cache_for_key(&self, key: &str) -> Option<&Arc<ResourceCache>> {
        self.caches.iter().find(|c| key.starts_with(&c.prefix))
    }

    /// Lists everything under `root` and fills the caches; returns the revision.
    async fn fill(
        &self,
        storage: &dyn Storage,
        root: &str,
    ) -> Result<Revision, ferrokube_storage::StorageError> {
        let mut per_cache: Vec<Vec<(String, CachedObject)>> = vec![Vec::new(); self.caches.len()];
        let mut opts = ListOptions {
            revision: RevisionMatch::Latest,
            limit: 5000,
            continue_token: None,
        };
        let revision;
        loop {
            let page = storage.list(root, &opts).await?;
            for KeyValue {
                key,
                value,
                mod_revision,
                ..
            } in page.items
            {
                if let Some(i) = self.caches.iter().position(|c| key.starts_with(&c.prefix))
                    && let Some(obj) = CachedObject::from_stored(&value, mod_revision)
                {
                    per_cache[i].push((key, obj));
                }
            }
            match page.continue_token {
                Some(t) => opts.continue_token = Some(t),
                None => {
                    revision = page.revision;
                    break;
                }
            }
        }
        for (cache, items) in self.caches.iter().zip(per_cache) {
            cache.reset(items, revision);
        }
        self.revision_tx.send_replace(revision);
        Ok(revision)
    }

    /// Marks `revision` applied in every cache, then tells the waiters once.
    fn advance_all(&self, revision: Revision) {
        for c in &self.caches {
            c.advance(revision);
        }
        self.revision_tx.send_if_modified(|current| {
            let newer = revision > *current;
            if newer {
                *current = revision;
            }
            newer
        });
    }

    /// Fills the caches once, then keeps them current until `storage`'s watch fails;
    /// then re-lists. Runs until the task is aborted. `ready` fires after the first
    /// fill.
    pub async fn run(
        self: Arc<Self>,
        storage: Arc<dyn Storage>,
        root: String,
        ready: tokio::sync::oneshot::Sender<()>,
    ) {
        let mut ready = Some(ready);
        loop {
            let revision = match self.fill(storage.as_ref(), &root).await {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(error = %e, "watch cache list failed; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
            };
            if let Some(r) = ready.take() {
                let _ = r.send(());
            }
            let mut stream = match storage.watch(&root, revision).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "watch cache watch failed; re-listing");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            };
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(WatchEvent::Progress(rev)) => self.advance_all(rev),
                    Ok(ev) => {
                        let rev = ev.revision();
                        if let Some(key) = ev.key()
                            && let Some(c) = self.cache_for_key(key)
                        {
                            c.apply(&ev);
                        }
                        self.advance_all(rev);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "storage watch ended; re-listing");
                        break;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn added(key: &str, value: &[u8], revision: Revision) -> WatchEvent {
        WatchEvent::Added(KeyValue {
            key: key.to_string(),
            value: Bytes::copy_from_slice(value),
            create_revision: revision,
            mod_revision: revision,
        })
    }

    #[test]
    fn a_stored_object_is_served_with_its_revision_and_decodes_to_the_same() {
        let stored = br#"{"kind":"Pod","metadata":{"name":"a","uid":"u"},"spec":{}}"#;
        let obj = CachedObject::from_stored(stored, 17).unwrap();
        assert_eq!(
            &obj.json()[..],
            br#"{"kind":"Pod","metadata":{"name":"a","resourceVersion":"17","uid":"u"},"spec":{}}"#
        );
        assert_eq!(
            **obj.value(),
            json!({"kind": "Pod", "metadata": {"name": "a", "resourceVersion": "17", "uid": "u"}, "spec": {}})
        );
        // The decoded value is made once and shared by every clone.
        let clone = obj.clone();
        assert!(Arc::ptr_eq(obj.value(), clone.value()));
        assert!(CachedObject::from_stored(b"[1]", 1).is_none());
    }

    #[test]
    fn an_object_made_in_memory_is_serialized_on_first_use() {
        let obj = CachedObject::new(json!({"metadata": {"name": "b"}}));
        assert_eq!(&obj.json()[..], br#"{"metadata":{"name":"b"}}"#);
        assert_eq!(meta::name(&obj), "b");
    }

    #[test]
    fn known_empty_until_it_holds_an_object_or_this_process_wrote_there() {
        let revisions = Arc::new(tokio::sync::watch::channel(0).0);
        let written = ResourceCache::new("/registry/a/".into(), revisions.clone());
        assert!(written.is_known_empty());
        // A write the cache has not applied yet is enough: a reader must sync first.
        written.note_write(3);
        assert!(!written.is_known_empty());
        let filled = ResourceCache::new("/registry/b/".into(), revisions);
        filled.apply(&added("/registry/b/x", br#"{"metadata":{"name":"x"}}"#, 4));
        assert!(!filled.is_known_empty());
    }

    #[test]
    fn every_change_to_the_objects_is_counted_and_nothing_else() {
        let revisions = Arc::new(tokio::sync::watch::channel(0).0);
        let cache = ResourceCache::new("/registry/a/".into(), revisions);
        assert_eq!(cache.changes(), 0);
        cache.apply(&added("/registry/a/x", br#"{"metadata":{"name":"x"}}"#, 4));
        assert_eq!(cache.changes(), 1);
        // Progress, an event the cache has already applied and an undecodable value
        // leave the objects as they were.
        cache.apply(&WatchEvent::Progress(9));
        cache.apply(&added("/registry/a/y", br#"{"metadata":{"name":"y"}}"#, 8));
        cache.apply(&added("/registry/a/z", b"{", 10));
        assert_eq!(cache.changes(), 1);
        cache.reset(Vec::new(), 11);
        assert_eq!(cache.changes(), 2);
    }

    #[test]
    fn the_cache_skips_an_undecodable_value_and_keeps_going() {
        let revisions = Arc::new(tokio::sync::watch::channel(0).0);
        let cache = ResourceCache::new("/registry/pods/".into(), revisions);
        cache.apply(&added("/registry/pods/ns/bad", b"{\"metadata\":", 5));
        cache.apply(&added(
            "/registry/pods/ns/good",
            br#"{"metadata":{"name":"good","namespace":"ns"}}"#,
            6,
        ));
        let (items, revision) = cache.snapshot_objects("/registry/pods/ns/");
        assert_eq!(revision, 6);
        assert_eq!(items.len(), 1);
        assert_eq!(items[0]["metadata"]["resourceVersion"], "6");
        assert!(cache.get("/registry/pods/ns/bad").is_none());
    }

    #[tokio::test]
    async fn the_live_event_channel_exists_only_while_someone_watches() {
        let revisions = Arc::new(tokio::sync::watch::channel(0).0);
        // Every revision the test watches from counts as applied by the hub.
        revisions.send_replace(Revision::MAX);
        let cache = Arc::new(ResourceCache::new("/registry/pods/".into(), revisions));
        let has_channel = |cache: &ResourceCache| cache.state.read().tx.is_some();
        let pod = |name: &str| format!(r#"{{"metadata":{{"name":"{name}","namespace":"ns"}}}}"#);
        cache.apply(&added("/registry/pods/ns/a", pod("a").as_bytes(), 2));
        assert!(!has_channel(&cache), "no watcher, no channel");

        let all: Filter = Arc::new(|_| true);
        let from = |rv| {
            cache.watch(
                "/registry/pods/".into(),
                Some(rv),
                false,
                all.clone(),
                false,
                Duration::from_secs(60),
            )
        };
        let mut first = from(2).await.unwrap();
        assert!(has_channel(&cache));
        cache.apply(&added("/registry/pods/ns/b", pod("b").as_bytes(), 3));
        let Some(WatchItem::Event(ev)) = first.recv().await else {
            panic!("the watcher should get the event at 3");
        };
        assert_eq!(ev.revision, 3);

        // The watcher's task ends once its receiver is gone; the next event finds no
        // receiver and drops the channel.
        drop(first);
        tokio::time::timeout(Duration::from_secs(5), async {
            while cache
                .state
                .read()
                .tx
                .as_ref()
                .is_some_and(|tx| tx.receiver_count() > 0)
            {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the watch task should end when its receiver is dropped");
        cache.apply(&added("/registry/pods/ns/c", pod("c").as_bytes(), 4));
        assert!(!has_channel(&cache));

        // A later watcher gets a new channel and the events after its revision.
        let mut second = from(2).await.unwrap();
        cache.apply(&added("/registry/pods/ns/d", pod("d").as_bytes(), 5));
        let mut revisions_seen = Vec::new();
        while revisions_seen.len() < 3 {
            match tokio::time::timeout(Duration::from_secs(5), second.recv()).await {
                Ok(Some(WatchItem::Event(ev))) => revisions_seen.push(ev.revision),
                other => panic!("expected an event, got {:?}", other.map(|o| o.is_some())),
            }
        }
        assert_eq!(revisions_seen, [3, 4, 5]);
    }
}
