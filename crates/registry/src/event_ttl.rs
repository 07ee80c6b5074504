//! `--event-ttl`: Events expire a fixed time after their last write.
//!
//! Upstream attaches an etcd lease of `--event-ttl` (whole seconds, default 1h) to
//! every create and update of an Event (`TTLFunc` of the core `events` store, which
//! `events.k8s.io/v1` shares), and etcd removes the key when the lease runs out; a
//! TTL of 0 attaches no lease, so events are kept forever. Lease reuse
//! (`leaseManager`: the lease is granted `min(5% of the TTL, 60 s)` longer and shared
//! by writes over that span) makes an event live between the TTL and the TTL plus
//! that margin after its last write.
//!
//! The storage contract here has no leases, so the registry does it itself: a task
//! keeps, per stored event, the revision and time of its last write (its storage key
//! and 16 bytes), and deletes the events whose last write is older than the TTL,
//! every `min(TTL / 20, 60 s)` (at least 1 s), each delete on the condition that the
//! event is still at the recorded revision.
//!
//! Where this deviates from upstream:
//! - The time of a write is when this apiserver's watch of the events' storage
//!   prefix delivers it (normally milliseconds late), not when storage committed it.
//! - Events already stored when the task starts (written by an earlier run, or by
//!   another apiserver before this one watched) have no write time anyone recorded:
//!   the newest of their own timestamps (`lastTimestamp`, `firstTimestamp`,
//!   `eventTime`, `series.lastObservedTime`, `metadata.creationTimestamp`; storage
//!   holds the core `v1` form whichever API wrote it) stands in, capped at now (a
//!   writer's clock may run ahead), else now. So does it for an event first seen
//!   when a lost watch is reopened. An event last updated (without moving its
//!   timestamps) while no watch of ours was open can thus expire early, where
//!   upstream's lease would have kept it a full TTL from that update; an event known
//!   before at another revision is dated when the watch comes back (late, never
//!   early).
//! - Every apiserver sharing the store sweeps; the revision condition makes that
//!   safe: an event written meanwhile is kept (its new write restarts its time), and
//!   one already deleted by another sweeper is just forgotten.
//! - Deletes bypass finalizers and admission, as a lease expiry does; watchers see
//!   ordinary deletes.
//! - With etcd, this apiserver watches the events' prefix twice (the watch cache's
//!   watch of everything, and this one), so event writes reach it twice.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use ferrokube_api::resources::ResourceInfo;
use ferrokube_apimachinery::errors::ApiError;
use ferrokube_storage::{Preconditions, Revision, Storage, StorageError, WatchEvent, WatchStream};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::cache::{ResourceCache, WriteTracking};
use crate::meta::Clock;
use crate::{RegistryConfig, Store, errors};

/// Upstream's lease reuse margin is at most this; the sweep interval is too.
const MAX_INTERVAL: Duration = Duration::from_secs(60);
/// Below this a sweep would cost more than it saves (and upstream's TTL is whole
/// seconds anyway).
const MIN_INTERVAL: Duration = Duration::from_secs(1);
/// Deletes in flight at once: a burst of expiries (an hour after a busy minute)
/// drains at storage speed without one round trip per event in series.
const DELETE_CONCURRENCY: usize = 16;
/// How long a lost storage watch waits before it is opened again.
const RETRY: Duration = Duration::from_millis(500);
/// How long a sweep on request waits for the watch cache to reach storage's
/// current revision before it goes on with what the cache has.
const CACHE_WAIT: Duration = Duration::from_secs(3);

type Reply = oneshot::Sender<Result<usize, ApiError>>;

/// The handle of the expiry task.
#[derive(Debug)]
pub(crate) struct EventTtl {
    requests: mpsc::Sender<Reply>,
}

impl EventTtl {
    /// The handle and the task to spawn, unless `config.event_ttl` is under a second
    /// (upstream's TTL is whole seconds, and 0 attaches no lease: events are kept).
    pub(crate) fn start(
        stores: &[Arc<Store>],
        storage: Arc<dyn Storage>,
        config: &RegistryConfig,
    ) -> Option<(EventTtl, impl Future<Output = ()> + Send + 'static)> {
        let ttl = Duration::from_secs(config.event_ttl.as_secs());
        if ttl.is_zero() {
            return None;
        }
        let store = stores.get(ferrokube_api::resources::position("", "v1", "events")?)?;
        let cache = store.cache().clone();
        let (requests, rx) = mpsc::channel(8);
        let tracker = Tracker {
            info: store.info(),
            prefix: format!("{}/", store.info().storage_prefix),
            // Through the cache's write tracking, as the store's own deletes go.
            storage: Arc::new(WriteTracking::new(storage, cache.clone())),
            cache,
            clock: config.clock.clone(),
            ttl_ms: i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX),
            interval: sweep_interval(ttl),
            written: HashMap::new(),
            watch: None,
        };
        Some((EventTtl { requests }, tracker.run(rx)))
    }

    /// Brings the record of write times up to the watch cache and deletes every
    /// event whose last write is older than the TTL; returns how many it deleted.
    pub(crate) async fn expire_now(&self) -> Result<usize, ApiError> {
        let (tx, rx) = oneshot::channel();
        let stopped = || ApiError::internal("the event expiry task is not running");
        self.requests.send(tx).await.map_err(|_| stopped())?;
        rx.await.map_err(|_| stopped())?
    }
}

/// Upstream keeps an event up to `min(5% of the TTL, 60 s)` past its TTL (lease
/// reuse); sweeping at that interval keeps ours within the same margin.
fn sweep_interval(ttl: Duration) -> Duration {
    (ttl / 20).clamp(MIN_INTERVAL, MAX_INTERVAL)
}

/// The last write of one stored event: 16 bytes beside its key.
#[derive(Clone, Copy, Debug)]
struct Written {
    /// The revision of that write; the delete's precondition.
    revision: Revision,
    /// When it was written, in milliseconds since the epoch.
    at_ms: i64,
}

/// The task's state; only the task touches it, so it needs no lock.
struct Tracker {
    info: &'static ResourceInfo,
    /// The events' storage prefix, with its trailing slash.
    prefix: String,
    storage: Arc<dyn Storage>,
    cache: Arc<ResourceCache>,
    clock: Arc<dyn Clock>,
    ttl_ms: i64,
    interval: Duration,
    /// One entry per stored event, by storage key.
    written: HashMap<Box<str>, Written>,
    /// The storage watch of the prefix; `None` until (re)opened. Not a watch of the
    /// watch cache: that one decodes every object for its filter, and the decoded
    /// trees would stay in the cache for every event's lifetime.
    watch: Option<WatchStream>,
}

impl Tracker {
    async fn run(mut self, mut requests: mpsc::Receiver<Reply>) {
        if let Err(e) = self.resync().await {
            tracing::warn!(error = %e, "event expiry: reading the stored events failed; retrying");
        }
        let mut ticker = tokio::time::interval(self.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first sweep one interval after start, not at once: a restart is no
        // reason to expire anything sooner than the interval allows.
        ticker.reset();
        loop {
            tokio::select! {
                item = next_event(&mut self.watch), if self.watch.is_some() => self.on_watch(item),
                _ = tokio::time::sleep(RETRY), if self.watch.is_none() => {
                    if let Err(e) = self.resync().await {
                        tracing::warn!(error = %e, "event expiry: reading the stored events failed; retrying");
                    }
                }
                _ = ticker.tick() => {
                    if let Err(e) = self.sweep().await {
                        tracing::warn!(error = %e, "event expiry: deleting expired events failed");
                    }
                }
                Some(reply) = requests.recv() => {
                    let result = match self.resync().await {
                        Ok(()) => self.sweep().await,
                        Err(e) => Err(e),
                    };
                    let _ = reply.send(result);
                }
            }
        }
    }

    fn now_ms(&self) -> i64 {
        self.clock.now().as_millisecond()
    }

    /// Rebuilds the record from the watch cache and reopens the storage watch where
    /// the cache's snapshot ends. An event known at the same revision keeps its time;
    /// one known at another revision was written while nobody watched and is dated
    /// now; one unknown is dated by its own timestamps.
    async fn resync(&mut self) -> Result<(), ApiError> {
        self.watch = None;
        let current = self
            .storage
            .current_revision()
            .await
            .map_err(ApiError::internal)?;
        // The snapshot then holds every write made before this call (a caller of
        // `Registry::expire_events` expects its own writes counted). A cache that
        // lags (its watch is down) is used as it is; the next resync catches up.
        let _ = self.cache.wait_for(current, CACHE_WAIT).await;
        let (objects, revision) = self.cache.snapshot_objects(&self.prefix);
        let watch = self
            .storage
            .watch(&self.prefix, revision)
            .await
            .map_err(ApiError::internal)?;
        let now = self.now_ms();
        let mut written = HashMap::with_capacity(objects.len());
        let mut untracked = 0;
        for object in objects {
            // From the JSON the cache keeps: decoding the cached value would keep a
            // decoded tree of every event in the cache.
            let Some(stored) = StoredEvent::parse(object.json()) else {
                untracked += 1;
                continue;
            };
            let key = stored.key(self.info.storage_prefix);
            let at_ms = match self.written.get(key.as_str()) {
                Some(w) if w.revision == stored.revision => w.at_ms,
                Some(_) => now,
                None => stored.newest_timestamp_ms().map_or(now, |t| t.min(now)),
            };
            written.insert(
                key.into_boxed_str(),
                Written {
                    revision: stored.revision,
                    at_ms,
                },
            );
        }
        if untracked > 0 {
            tracing::warn!(
                untracked,
                "event expiry: events without a name or resourceVersion are not tracked"
            );
        }
        self.written = written;
        self.watch = Some(watch);
        Ok(())
    }

    fn on_watch(&mut self, item: Option<Result<WatchEvent, StorageError>>) {
        match item {
            Some(Ok(event)) => self.apply(&event),
            Some(Err(e)) => {
                tracing::warn!(error = %e, "event expiry: the storage watch ended; reopening");
                self.watch = None;
            }
            None => {
                tracing::warn!("event expiry: the storage watch ended; reopening");
                self.watch = None;
            }
        }
    }

    fn apply(&mut self, event: &WatchEvent) {
        match event {
            WatchEvent::Added(kv) | WatchEvent::Modified { current: kv, .. } => {
                let latest = Written {
                    revision: kv.mod_revision,
                    at_ms: self.now_ms(),
                };
                match self.written.get_mut(kv.key.as_str()) {
                    Some(w) if w.revision < kv.mod_revision => *w = latest,
                    Some(_) => {}
                    None => {
                        self.written.insert(kv.key.as_str().into(), latest);
                    }
                }
            }
            WatchEvent::Deleted { previous, revision } => {
                if self
                    .written
                    .get(previous.key.as_str())
                    .is_some_and(|w| w.revision < *revision)
                {
                    self.written.remove(previous.key.as_str());
                }
            }
            WatchEvent::Progress(_) => {}
        }
    }

    /// Deletes every event whose last write is older than the TTL, each only at the
    /// revision recorded for it. The watch is read meanwhile, so a large sweep (whose
    /// own deletes come back through it) does not make it fall behind.
    async fn sweep(&mut self) -> Result<usize, ApiError> {
        let now = self.now_ms();
        let due: Vec<(Box<str>, Revision)> = self
            .written
            .iter()
            .filter(|(_, w)| now.saturating_sub(w.at_ms) >= self.ttl_ms)
            .map(|(key, w)| (key.clone(), w.revision))
            .collect();
        if due.is_empty() {
            return Ok(0);
        }
        let storage = self.storage.clone();
        let mut deletes = futures::stream::iter(due)
            .map(move |(key, revision)| {
                let storage = storage.clone();
                async move {
                    let result = storage
                        .delete(&key, &Preconditions::revision(revision))
                        .await;
                    (key, revision, result)
                }
            })
            .buffer_unordered(DELETE_CONCURRENCY);
        let mut deleted = 0;
        let mut failed = None;
        loop {
            tokio::select! {
                done = deletes.next() => {
                    let Some((key, revision, result)) = done else { break };
                    let gone = match result {
                        Ok(_) => {
                            deleted += 1;
                            true
                        }
                        // Another apiserver's sweep (or a client) got there first.
                        Err(StorageError::NotFound { .. }) => true,
                        // Written since: its watch event restarts its time.
                        Err(StorageError::Conflict { .. }) => false,
                        Err(e) => {
                            let name = key.rsplit('/').next().unwrap_or_default();
                            failed.get_or_insert(errors::from_storage(self.info, name, e));
                            false
                        }
                    };
                    // Only the version deleted: the key may hold a new event by now.
                    if gone && self.written.get(&key).is_some_and(|w| w.revision == revision) {
                        self.written.remove(&key);
                    }
                }
                item = next_event(&mut self.watch), if self.watch.is_some() => self.on_watch(item),
            }
        }
        if deleted > 0 {
            tracing::debug!(deleted, "event expiry: deleted expired events");
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(deleted),
        }
    }
}

fn text(v: &Option<Value>) -> &str {
    v.as_ref().and_then(Value::as_str).unwrap_or_default()
}

/// The next item of the watch; never ready without one.
async fn next_event(watch: &mut Option<WatchStream>) -> Option<Result<WatchEvent, StorageError>> {
    match watch {
        Some(w) => w.next().await,
        None => std::future::pending().await,
    }
}

/// What the expiry reads of a stored (core `v1`) Event. Leaves are loose values, so
/// a field of an unexpected type only loses that field.
#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct StoredEvent {
    metadata: StoredMeta,
    last_timestamp: Option<Value>,
    first_timestamp: Option<Value>,
    event_time: Option<Value>,
    series: Option<Value>,
    #[serde(skip)]
    revision: Revision,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct StoredMeta {
    name: Option<Value>,
    namespace: Option<Value>,
    resource_version: Option<Value>,
    creation_timestamp: Option<Value>,
}

impl StoredEvent {
    /// `None` without a name or a resourceVersion (never an object the cache holds).
    fn parse(json: &[u8]) -> Option<StoredEvent> {
        let mut event: StoredEvent = serde_json::from_slice(json).ok()?;
        event.metadata.name.as_ref()?.as_str()?;
        event.revision = event
            .metadata
            .resource_version
            .as_ref()?
            .as_str()?
            .parse()
            .ok()?;
        Some(event)
    }

    /// The storage key, as [`Store::key`] makes it.
    fn key(&self, storage_prefix: &str) -> String {
        let (name, namespace) = (text(&self.metadata.name), text(&self.metadata.namespace));
        if namespace.is_empty() {
            format!("{storage_prefix}/{name}")
        } else {
            format!("{storage_prefix}/{namespace}/{name}")
        }
    }

    fn newest_timestamp_ms(&self) -> Option<i64> {
        let series_time = self.series.as_ref().and_then(|s| s.get("lastObservedTime"));
        [
            self.last_timestamp.as_ref(),
            self.first_timestamp.as_ref(),
            self.event_time.as_ref(),
            series_time,
            self.metadata.creation_timestamp.as_ref(),
        ]
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str()?.parse::<jiff::Timestamp>().ok())
        .map(|t| t.as_millisecond())
        .max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> i64 {
        s.parse::<jiff::Timestamp>().unwrap().as_millisecond()
    }

    /// A tracker over a fresh SQLite store, with nothing recorded and no watch.
    fn tracker(dir: &tempfile::TempDir) -> Tracker {
        let storage: Arc<dyn Storage> = Arc::new(
            ferrokube_storage_sqlite::SqliteStorage::open(
                &dir.path().join("db.sqlite"),
                ferrokube_storage_sqlite::SqliteOptions::default(),
            )
            .unwrap(),
        );
        let hub = crate::cache::CacheHub::new(["/registry/events".to_string()]);
        let info = ferrokube_api::resources::RESOURCES
            .iter()
            .find(|r| r.group.is_empty() && r.plural == "events")
            .unwrap();
        Tracker {
            info,
            prefix: "/registry/events/".into(),
            storage,
            cache: hub.cache("/registry/events").unwrap(),
            clock: Arc::new(crate::meta::SystemClock),
            ttl_ms: 1000,
            interval: MIN_INTERVAL,
            written: HashMap::new(),
            watch: None,
        }
    }

    #[tokio::test]
    async fn a_sweep_deletes_only_the_version_it_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = tracker(&dir);
        let key = "/registry/events/ns/a";
        let stored = bytes::Bytes::from_static(br#"{"metadata":{"name":"a"}}"#);
        let first = t.storage.create(key, stored.clone()).await.unwrap();
        let second = t
            .storage
            .compare_and_swap(key, first, stored)
            .await
            .unwrap()
            .mod_revision;
        let due = |revision| Written { revision, at_ms: 0 };

        // Written again since the record: kept, and the record waits for the watch.
        t.written.insert(key.into(), due(first));
        assert_eq!(t.sweep().await.unwrap(), 0);
        assert!(t.storage.get(key, None).await.is_ok());
        assert_eq!(t.written[key].revision, first);

        t.written.insert(key.into(), due(second));
        assert_eq!(t.sweep().await.unwrap(), 1);
        assert!(t.storage.get(key, None).await.is_err());
        assert!(t.written.is_empty());

        // Already gone (another apiserver's sweep): forgotten without an error.
        t.written.insert(key.into(), due(second));
        assert_eq!(t.sweep().await.unwrap(), 0);
        assert!(t.written.is_empty());
    }

    #[test]
    fn the_interval_follows_upstreams_lease_margin() {
        assert_eq!(sweep_interval(Duration::from_secs(3600)), MAX_INTERVAL);
        assert_eq!(
            sweep_interval(Duration::from_secs(600)),
            Duration::from_secs(30)
        );
        assert_eq!(sweep_interval(Duration::from_secs(5)), MIN_INTERVAL);
    }

    #[test]
    fn a_stored_event_is_dated_by_its_newest_timestamp() {
        let stored = br#"{"metadata":{"name":"a.1","namespace":"ns","resourceVersion":"42",
            "creationTimestamp":"2026-01-01T00:00:00Z"},
            "firstTimestamp":"2026-01-01T00:00:00Z","lastTimestamp":"2026-01-01T01:00:00Z",
            "eventTime":"2026-01-01T00:30:00.123456Z",
            "series":{"count":3,"lastObservedTime":"2026-01-01T02:00:00.500000Z"}}"#;
        let ev = StoredEvent::parse(stored).unwrap();
        assert_eq!(ev.revision, 42);
        assert_eq!(ev.key("/registry/events"), "/registry/events/ns/a.1");
        assert_eq!(ev.newest_timestamp_ms(), Some(at("2026-01-01T02:00:00.5Z")));
    }

    #[test]
    fn odd_fields_are_ignored_and_nameless_events_are_not_tracked() {
        let odd = br#"{"metadata":{"name":"b","namespace":"ns","resourceVersion":"7",
            "creationTimestamp":"2026-01-01T00:00:00Z"},
            "lastTimestamp":17,"eventTime":null,"series":"x"}"#;
        let ev = StoredEvent::parse(odd).unwrap();
        assert_eq!(ev.newest_timestamp_ms(), Some(at("2026-01-01T00:00:00Z")));
        let bare = br#"{"metadata":{"name":"c","resourceVersion":"8"}}"#;
        assert_eq!(
            StoredEvent::parse(bare).unwrap().newest_timestamp_ms(),
            None
        );
        assert!(StoredEvent::parse(br#"{"metadata":{"resourceVersion":"9"}}"#).is_none());
        assert!(StoredEvent::parse(br#"{"metadata":{"name":"d"}}"#).is_none());
        assert!(StoredEvent::parse(br#"{"metadata":[]}"#).is_none());
        assert!(StoredEvent::parse(b"[]").is_none());
    }
}
