//! Shared informers (client-go `tools/cache`), on kube-runtime's `watcher`.
//!
//! A [`SharedIndexInformer`] runs one list+watch of one resource (kube-runtime's
//! `watcher` with its default backoff: it relists on 410 Gone and resumes from the
//! last resourceVersion otherwise) and keeps an indexed [`Store`]. Consumers get
//! [`Notification`]s through [`SharedIndexInformer::subscribe`] (a stream) or
//! [`SharedIndexInformer::add_event_handler`] (a callback run on its own task), each
//! with its own unbounded buffer as upstream's `processorListener`: a slow consumer
//! delays only itself. A consumer added late first gets an `Added` for every cached
//! object. A relist is diffed against the cache as upstream's `Replace`: objects
//! still there are `Updated` (old, new), new ones `Added`, vanished ones `Deleted`
//! with `final_state_unknown` (upstream's `DeletedFinalStateUnknown`).
//!
//! [`SharedInformerFactory`] hands out one informer per resource type (and
//! namespace) per factory, so every controller of a process shares one watch.

mod factory;
mod store;

use std::collections::HashMap;
use std::fmt::Debug;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, InitialListStrategy};
use kube::{Api, Resource};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use factory::SharedInformerFactory;
pub use store::{
    IndexFn, NAMESPACE_INDEX, Store, key_of, namespace_index, object_key, owner_uid_index,
    pod_node_name_index,
};

/// A change of one cached object, as an upstream `ResourceEventHandler` sees it.
#[derive(Debug)]
pub enum Notification<K> {
    /// A new object; `in_initial_list` while the informer has not synced yet.
    Added { obj: Arc<K>, in_initial_list: bool },
    /// A changed object, or (old and new identical) a resync or a relist.
    Updated { old: Arc<K>, new: Arc<K> },
    /// A deleted object. `final_state_unknown`: the delete was inferred from a relist
    /// (upstream's `DeletedFinalStateUnknown`) and `obj` is the last state cached.
    Deleted {
        obj: Arc<K>,
        final_state_unknown: bool,
    },
}

impl<K> Clone for Notification<K> {
    fn clone(&self) -> Self {
        match self {
            Notification::Added {
                obj,
                in_initial_list,
            } => Notification::Added {
                obj: obj.clone(),
                in_initial_list: *in_initial_list,
            },
            Notification::Updated { old, new } => Notification::Updated {
                old: old.clone(),
                new: new.clone(),
            },
            Notification::Deleted {
                obj,
                final_state_unknown,
            } => Notification::Deleted {
                obj: obj.clone(),
                final_state_unknown: *final_state_unknown,
            },
        }
    }
}

impl<K> Notification<K> {
    /// The object after the change (for deletes, the last known state).
    pub fn object(&self) -> &Arc<K> {
        match self {
            Notification::Added { obj, .. } | Notification::Deleted { obj, .. } => obj,
            Notification::Updated { new, .. } => new,
        }
    }
}

/// How an informer fetches its initial state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InitialListMode {
    /// A streaming list: one watch with `sendInitialEvents=true` (KEP-3157). Our
    /// apiserver supports it, so it is the default.
    #[default]
    StreamingList,
    /// A paginated LIST, then a WATCH from its resourceVersion.
    ListWatch,
}

/// Settings of an informer (upstream's factory options and `tweakListOptions`).
#[derive(Debug, Clone)]
pub struct InformerConfig {
    pub initial_list: InitialListMode,
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    /// Page size of LISTs (ListWatch mode); client-go's 500 by default.
    pub page_size: Option<u32>,
    /// Server-side timeout of each watch request, in seconds (kube-runtime: 290).
    pub watch_timeout_secs: Option<u32>,
    /// Resync period of handlers that do not set their own; `None` never resyncs.
    pub default_resync: Option<Duration>,
}

impl Default for InformerConfig {
    fn default() -> Self {
        InformerConfig {
            initial_list: InitialListMode::default(),
            label_selector: None,
            field_selector: None,
            page_size: Some(500),
            watch_timeout_secs: None,
            default_resync: None,
        }
    }
}

impl InformerConfig {
    /// The kube-runtime watcher configuration.
    pub fn watcher_config(&self) -> watcher::Config {
        watcher::Config {
            label_selector: self.label_selector.clone(),
            field_selector: self.field_selector.clone(),
            page_size: self.page_size,
            timeout: self.watch_timeout_secs,
            initial_list_strategy: match self.initial_list {
                InitialListMode::StreamingList => InitialListStrategy::StreamingList,
                InitialListMode::ListWatch => InitialListStrategy::ListWatch,
            },
            ..watcher::Config::default()
        }
    }
}

enum Msg<K> {
    Note(Notification<K>),
    /// The consumer has received every object of the initial list.
    Synced,
}

struct Listener<K> {
    tx: mpsc::UnboundedSender<Msg<K>>,
}

struct Dispatch<K> {
    listeners: Vec<Listener<K>>,
    synced: bool,
    /// Objects of a (re)list in progress.
    relist: Option<HashMap<String, Arc<K>>>,
}

/// Counters of one informer.
#[derive(Debug, Default)]
struct Stats {
    lists: AtomicU64,
    events: AtomicU64,
    errors: AtomicU64,
}

struct Inner<K> {
    api: Api<K>,
    config: InformerConfig,
    store: Store<K>,
    dispatch: Mutex<Dispatch<K>>,
    synced: watch::Sender<bool>,
    started: AtomicBool,
    cancel: CancellationToken,
    task: Mutex<Option<JoinHandle<()>>>,
    stats: Stats,
    description: String,
}

/// One list+watch of one resource with an indexed cache and any number of
/// consumers. Cheap to clone; clones share everything.
pub struct SharedIndexInformer<K> {
    inner: Arc<Inner<K>>,
}

impl<K> Clone for SharedIndexInformer<K> {
    fn clone(&self) -> Self {
        SharedIndexInformer {
            inner: self.inner.clone(),
        }
    }
}

impl<K> Debug for SharedIndexInformer<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedIndexInformer")
            .field("resource", &self.inner.description)
            .field("synced", &*self.inner.synced.borrow())
            .finish()
    }
}

/// A stream of [`Notification`]s from one informer; it ends when the informer stops.
pub struct EventStream<K> {
    rx: mpsc::UnboundedReceiver<Msg<K>>,
    synced: Arc<AtomicBool>,
}

impl<K> Debug for EventStream<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventStream")
            .field("synced", &self.synced.load(Ordering::Relaxed))
            .finish()
    }
}

impl<K> EventStream<K> {
    /// Whether this consumer has taken every object of the initial list off the stream.
    pub fn has_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }
}

impl<K> Stream for EventStream<K> {
    type Item = Notification<K>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            match self.rx.poll_recv(cx) {
                Poll::Ready(Some(Msg::Synced)) => self.synced.store(true, Ordering::Release),
                Poll::Ready(Some(Msg::Note(n))) => return Poll::Ready(Some(n)),
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// A registered event handler (upstream's `ResourceEventHandlerRegistration`).
#[derive(Debug)]
pub struct HandlerRegistration {
    synced: Arc<AtomicBool>,
    task: JoinHandle<()>,
}

impl HandlerRegistration {
    /// Whether the handler has been called for every object of the initial list.
    pub fn has_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// Removes the handler (upstream's `RemoveEventHandler`).
    pub fn remove(self) {
        self.task.abort();
    }
}

/// Upstream's `ResourceEventHandler`. Calls are sequential per handler; keep them
/// short (typically: enqueue a key into a [`crate::workqueue::WorkQueue`]).
pub trait ResourceEventHandler<K>: Send + 'static {
    fn on_add(&mut self, _obj: &Arc<K>, _in_initial_list: bool) {}
    fn on_update(&mut self, _old: &Arc<K>, _new: &Arc<K>) {}
    fn on_delete(&mut self, _obj: &Arc<K>, _final_state_unknown: bool) {}
}

/// Any `FnMut(Notification<K>)` is a handler.
impl<K, F> ResourceEventHandler<K> for F
where
    F: FnMut(Notification<K>) + Send + 'static,
{
    fn on_add(&mut self, obj: &Arc<K>, in_initial_list: bool) {
        self(Notification::Added {
            obj: obj.clone(),
            in_initial_list,
        });
    }
    fn on_update(&mut self, old: &Arc<K>, new: &Arc<K>) {
        self(Notification::Updated {
            old: old.clone(),
            new: new.clone(),
        });
    }
    fn on_delete(&mut self, obj: &Arc<K>, final_state_unknown: bool) {
        self(Notification::Deleted {
            obj: obj.clone(),
            final_state_unknown,
        });
    }
}

/// The bounds every informed resource type meets.
pub trait InformerResource:
    Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static
{
}

impl<K> InformerResource for K where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static
{
}

impl<K: InformerResource> SharedIndexInformer<K> {
    /// An informer over `api` (its namespace, or all namespaces). Nothing runs until
    /// [`SharedIndexInformer::start`] or [`SharedIndexInformer::run`].
    pub fn new(api: Api<K>, config: InformerConfig) -> Self {
        let description = match api.namespace() {
            Some(ns) => format!("{} in {ns}", K::plural(&())),
            None => K::plural(&()).to_string(),
        };
        SharedIndexInformer {
            inner: Arc::new(Inner {
                api,
                config,
                store: Store::new(),
                dispatch: Mutex::new(Dispatch {
                    listeners: Vec::new(),
                    synced: false,
                    relist: None,
                }),
                synced: watch::channel(false).0,
                started: AtomicBool::new(false),
                cancel: CancellationToken::new(),
                task: Mutex::new(None),
                stats: Stats::default(),
                description,
            }),
        }
    }

    /// What this informer watches, e.g. `pods` or `configmaps in default`.
    pub fn description(&self) -> &str {
        &self.inner.description
    }

    /// The cache (upstream's indexer / lister).
    pub fn store(&self) -> Store<K> {
        self.inner.store.clone()
    }

    /// Registers an index (see [`Store::add_indexer`]); allowed before and after start.
    pub fn add_indexer(&self, name: &str, func: IndexFn<K>) -> crate::Result<()> {
        self.inner.store.add_indexer(name, func)
    }

    /// Whether the initial list has been fully applied to the cache.
    pub fn has_synced(&self) -> bool {
        *self.inner.synced.borrow()
    }

    /// Waits until synced; `false` on timeout or if the informer stopped first.
    pub async fn wait_for_sync(&self, timeout: Duration) -> bool {
        let mut rx = self.inner.synced.subscribe();
        let wait = async {
            tokio::select! {
                r = rx.wait_for(|s| *s) => r.is_ok(),
                _ = self.inner.cancel.cancelled() => self.has_synced(),
            }
        };
        tokio::time::timeout(timeout, wait).await.unwrap_or(false)
    }

    /// How many (re)lists this informer has started (initial list included).
    pub fn list_count(&self) -> u64 {
        self.inner.stats.lists.load(Ordering::Relaxed)
    }

    /// How many watch errors it has recovered from.
    pub fn error_count(&self) -> u64 {
        self.inner.stats.errors.load(Ordering::Relaxed)
    }

    /// How many objects it has received (initial and watch events).
    pub fn event_count(&self) -> u64 {
        self.inner.stats.events.load(Ordering::Relaxed)
    }

    /// A change stream. A stream created after objects were cached starts with an
    /// `Added` for each of them. With `resync`, every cached object is re-sent as an
    /// `Updated` with old == new each period (upstream's resync).
    pub fn subscribe_with_resync(&self, resync: Option<Duration>) -> EventStream<K> {
        let (tx, rx) = mpsc::unbounded_channel();
        let synced = Arc::new(AtomicBool::new(false));
        {
            let mut d = self.inner.dispatch.lock();
            if !self.inner.cancel.is_cancelled() {
                for obj in self.inner.store.list() {
                    let _ = tx.send(Msg::Note(Notification::Added {
                        obj,
                        in_initial_list: !d.synced,
                    }));
                }
                if d.synced {
                    let _ = tx.send(Msg::Synced);
                }
                d.listeners.push(Listener { tx: tx.clone() });
            }
        }
        if let Some(period) = resync.filter(|p| !p.is_zero()) {
            let inner = self.inner.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(period);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                tick.tick().await;
                loop {
                    tokio::select! {
                        _ = inner.cancel.cancelled() => return,
                        _ = tx.closed() => return,
                        _ = tick.tick() => {}
                    }
                    let d = inner.dispatch.lock();
                    if !d.synced {
                        continue;
                    }
                    for obj in inner.store.list() {
                        let n = Notification::Updated {
                            old: obj.clone(),
                            new: obj,
                        };
                        if tx.send(Msg::Note(n)).is_err() {
                            return;
                        }
                    }
                }
            });
        }
        EventStream { rx, synced }
    }

    /// A change stream with the informer's default resync.
    pub fn subscribe(&self) -> EventStream<K> {
        self.subscribe_with_resync(self.inner.config.default_resync)
    }

    /// Runs `handler` on its own task for every notification (upstream's
    /// `AddEventHandlerWithResyncPeriod`; `None` takes the informer's default).
    pub fn add_event_handler<H: ResourceEventHandler<K>>(
        &self,
        mut handler: H,
        resync: Option<Duration>,
    ) -> HandlerRegistration {
        let mut stream = self.subscribe_with_resync(resync.or(self.inner.config.default_resync));
        let synced = stream.synced.clone();
        let task = tokio::spawn(async move {
            while let Some(n) = stream.next().await {
                match &n {
                    Notification::Added {
                        obj,
                        in_initial_list,
                    } => handler.on_add(obj, *in_initial_list),
                    Notification::Updated { old, new } => handler.on_update(old, new),
                    Notification::Deleted {
                        obj,
                        final_state_unknown,
                    } => handler.on_delete(obj, *final_state_unknown),
                }
            }
        });
        HandlerRegistration { synced, task }
    }

    /// Starts the list+watch on a new task; `false` if it was already started.
    pub fn start(&self) -> bool {
        if self.inner.started.swap(true, Ordering::SeqCst) {
            return false;
        }
        let this = self.clone();
        let handle = tokio::spawn(async move { this.run_loop().await });
        *self.inner.task.lock() = Some(handle);
        true
    }

    /// Runs the list+watch on the current task until [`SharedIndexInformer::stop`];
    /// returns at once if it was already started.
    pub async fn run(&self) {
        if self.inner.started.swap(true, Ordering::SeqCst) {
            return;
        }
        self.run_loop().await;
    }

    /// Stops the watch; streams end once drained. Waits for the watch task to end.
    pub async fn stop(&self) {
        self.inner.cancel.cancel();
        let task = self.inner.task.lock().take();
        if let Some(t) = task {
            let _ = t.await;
        }
    }

    pub fn is_stopped(&self) -> bool {
        self.inner.cancel.is_cancelled()
    }

    async fn run_loop(&self) {
        let wc = self.inner.config.watcher_config();
        let stream = watcher::watcher(self.inner.api.clone(), wc).default_backoff();
        futures::pin_mut!(stream);
        loop {
            tokio::select! {
                _ = self.inner.cancel.cancelled() => break,
                ev = stream.next() => match ev {
                    Some(Ok(ev)) => self.process(ev),
                    Some(Err(e)) => {
                        self.inner.stats.errors.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(resource = %self.inner.description, error = %e, "informer watch error; retrying");
                    }
                    None => break,
                },
            }
        }
        self.inner.cancel.cancel();
        // Dropping the senders ends every stream once it is drained.
        self.inner.dispatch.lock().listeners.clear();
    }

    /// Applies one watcher event to the cache and fans it out, atomically with
    /// respect to new subscriptions.
    fn process(&self, ev: watcher::Event<K>) {
        let mut d = self.inner.dispatch.lock();
        let store = &self.inner.store;
        match ev {
            watcher::Event::Init => {
                self.inner.stats.lists.fetch_add(1, Ordering::Relaxed);
                d.relist = Some(HashMap::new());
            }
            watcher::Event::InitApply(obj) => {
                self.inner.stats.events.fetch_add(1, Ordering::Relaxed);
                let key = object_key(&obj);
                d.relist
                    .get_or_insert_with(HashMap::new)
                    .insert(key, Arc::new(obj));
            }
            watcher::Event::InitDone => {
                let new = d.relist.take().unwrap_or_default();
                let was_synced = d.synced;
                let mut notes = Vec::with_capacity(new.len());
                let mut old = store.replace(new.clone());
                for (key, obj) in new {
                    match old.remove(&key) {
                        Some(prev) => notes.push(Notification::Updated {
                            old: prev,
                            new: obj,
                        }),
                        None => notes.push(Notification::Added {
                            obj,
                            in_initial_list: !was_synced,
                        }),
                    }
                }
                for (_, prev) in old {
                    notes.push(Notification::Deleted {
                        obj: prev,
                        final_state_unknown: true,
                    });
                }
                for n in notes {
                    broadcast(&mut d, n);
                }
                if !was_synced {
                    d.synced = true;
                    d.listeners.retain(|l| l.tx.send(Msg::Synced).is_ok());
                    self.inner.synced.send_replace(true);
                }
            }
            watcher::Event::Apply(obj) => {
                self.inner.stats.events.fetch_add(1, Ordering::Relaxed);
                let key = object_key(&obj);
                let obj = Arc::new(obj);
                let n = match store.insert(key, obj.clone()) {
                    Some(old) => Notification::Updated { old, new: obj },
                    None => Notification::Added {
                        obj,
                        in_initial_list: false,
                    },
                };
                broadcast(&mut d, n);
            }
            watcher::Event::Delete(obj) => {
                self.inner.stats.events.fetch_add(1, Ordering::Relaxed);
                store.remove(&object_key(&obj));
                broadcast(
                    &mut d,
                    Notification::Deleted {
                        obj: Arc::new(obj),
                        final_state_unknown: false,
                    },
                );
            }
        }
    }
}

fn broadcast<K>(d: &mut Dispatch<K>, n: Notification<K>) {
    d.listeners
        .retain(|l| l.tx.send(Msg::Note(n.clone())).is_ok());
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn cm(name: &str, rv: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                name: Some(name.into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn informer() -> SharedIndexInformer<ConfigMap> {
        // The API is never called: events are fed to `process` directly.
        let cfg = kube::Config::new("https://127.0.0.1:1".parse().unwrap());
        let client = kube::Client::try_from(cfg).unwrap();
        SharedIndexInformer::new(Api::all(client), InformerConfig::default())
    }

    fn drain(s: &mut EventStream<ConfigMap>) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(Some(n)) = s.next().now_or_never() {
            out.push(match n {
                Notification::Added {
                    obj,
                    in_initial_list,
                } => format!("add {} {in_initial_list}", object_key(obj.as_ref())),
                Notification::Updated { old, new } => format!(
                    "update {} {}->{}",
                    object_key(new.as_ref()),
                    old.metadata.resource_version.as_deref().unwrap_or(""),
                    new.metadata.resource_version.as_deref().unwrap_or("")
                ),
                Notification::Deleted {
                    obj,
                    final_state_unknown,
                } => format!("delete {} {final_state_unknown}", object_key(obj.as_ref())),
            });
        }
        out
    }

    use futures::FutureExt;

    #[tokio::test]
    async fn initial_list_watch_events_and_relist_diff() {
        let inf = informer();
        let mut early = inf.subscribe();
        inf.process(watcher::Event::Init);
        inf.process(watcher::Event::InitApply(cm("a", "1")));
        inf.process(watcher::Event::InitApply(cm("b", "2")));
        assert!(inf.store().is_empty(), "relist is applied at InitDone");
        assert!(!inf.has_synced());
        inf.process(watcher::Event::InitDone);
        assert!(inf.has_synced());
        assert!(!early.has_synced(), "not yet consumed");
        let mut got = drain(&mut early);
        got.sort();
        assert_eq!(got, ["add ns/a true", "add ns/b true"]);
        assert!(early.has_synced());

        inf.process(watcher::Event::Apply(cm("c", "3")));
        inf.process(watcher::Event::Apply(cm("a", "4")));
        inf.process(watcher::Event::Delete(cm("b", "5")));
        assert_eq!(
            drain(&mut early),
            ["add ns/c false", "update ns/a 1->4", "delete ns/b false"]
        );

        // A late subscriber gets the cache as adds, then is synced.
        let mut late = inf.subscribe();
        let mut got = drain(&mut late);
        got.sort();
        assert_eq!(got, ["add ns/a false", "add ns/c false"]);
        assert!(late.has_synced());

        // Relist (e.g. after 410): a changed, c vanished, d new. The cache keeps
        // serving the old state until the relist is complete.
        inf.process(watcher::Event::Init);
        inf.process(watcher::Event::InitApply(cm("a", "6")));
        inf.process(watcher::Event::InitApply(cm("d", "7")));
        assert!(inf.store().get("ns/c").is_some());
        inf.process(watcher::Event::InitDone);
        let mut got = drain(&mut early);
        got.sort();
        assert_eq!(
            got,
            ["add ns/d false", "delete ns/c true", "update ns/a 4->6"]
        );
        let mut keys = inf.store().list_keys();
        keys.sort();
        assert_eq!(keys, ["ns/a", "ns/d"]);
        assert_eq!(inf.list_count(), 2);
    }

    #[tokio::test]
    async fn handlers_resync_and_dropped_consumers() {
        let inf = informer();
        inf.process(watcher::Event::Init);
        inf.process(watcher::Event::InitApply(cm("a", "1")));
        inf.process(watcher::Event::InitDone);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s2 = seen.clone();
        let reg = inf.add_event_handler(
            move |n: Notification<ConfigMap>| {
                let tag = match n {
                    Notification::Added { .. } => "add",
                    Notification::Updated { .. } => "update",
                    Notification::Deleted { .. } => "delete",
                };
                s2.lock().push(tag);
            },
            Some(Duration::from_millis(30)),
        );
        let dropped = inf.subscribe();
        drop(dropped);
        inf.process(watcher::Event::Apply(cm("b", "2")));
        // Resyncs arrive as updates; bounded wait.
        for _ in 0..100 {
            if seen.lock().iter().filter(|t| **t == "update").count() >= 4 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(reg.has_synced());
        let seen_now = seen.lock().clone();
        assert_eq!(&seen_now[..2], ["add", "add"]);
        assert!(seen_now[2..].iter().all(|t| *t == "update"), "{seen_now:?}");
        assert!(seen_now.len() >= 6, "{seen_now:?}");
        // The dropped stream's listener is gone after the next broadcast.
        assert_eq!(inf.inner.dispatch.lock().listeners.len(), 1);
        reg.remove();
    }
}
