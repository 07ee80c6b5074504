//! An event recorder (client-go `tools/events`) writing to either event API.
//!
//! [`EventApi::EventsV1`] writes `events.k8s.io/v1` Events (what controllers use);
//! [`EventApi::CoreV1`] writes the same events as core `v1` Events in the shape of
//! client-go's legacy `tools/record` (source, count, first/lastTimestamp), which is
//! what kubelets must use: the Node authorizer and `system:node` only let them write
//! core events. Both share one recorder, aggregation and spam filter; only the
//! final write differs.
//!
//! [`EventRecorder::event`] never blocks and never fails the caller: the event goes
//! into a bounded queue (upstream's 1000, dropped when full) that one task per
//! [`EventBroadcaster`] drains to the API. Each API keeps its upstream recorder's
//! aggregation:
//! - `events.k8s.io` (`tools/events`): events with the same (action, reason,
//!   reportingController, regarding, related) are isomorphic; the first is created,
//!   the second turns it into a series (count 2, patched at once), later ones only
//!   bump the cached count and lastObservedTime, which reach the API on the periodic
//!   refresh (30 min) or when the series ends (no repeat for 6 min). A per-object
//!   token bucket (burst 25, one per 5 min) bounds how many *new* events one object
//!   can cause.
//! - core `v1` (`tools/record`'s `EventCorrelator`): an identical event (same object
//!   part, type, reason and message) raises the count of the Event already written,
//!   patched at once; the tenth distinct message of one object's reason within ten
//!   minutes turns its events into one `(combined from similar events): ...` Event;
//!   and the same per-object token bucket passes every write, repeats included, so a
//!   hot loop cannot flood the apiserver.
//!
//! Every cache is bounded.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{self as core, EventSource, ObjectReference};
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use parking_lot::Mutex;
use serde_json::json;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use kube::runtime::events::EventType;

use ferrokube_component_base::ratelimit::TokenBucket;

/// Upstream's limits on event fields.
pub const MAX_NOTE_BYTES: usize = 1024;
pub const MAX_REASON_BYTES: usize = 128;
pub const MAX_ACTION_BYTES: usize = 128;

/// Which API a broadcaster writes its events to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum EventApi {
    /// `events.k8s.io/v1` Events (client-go `tools/events`).
    #[default]
    EventsV1,
    /// Core `v1` Events shaped as client-go's legacy `tools/record` writes them.
    CoreV1,
}

/// Settings of a broadcaster; the defaults are upstream's.
#[derive(Debug, Clone)]
pub struct EventBroadcasterOptions {
    /// The API events are written to.
    pub api: EventApi,
    /// Events queued before new ones are dropped.
    pub queue_size: usize,
    /// Per-object spam filter: new events allowed at once ...
    pub spam_burst: u32,
    /// ... and refilled per second.
    pub spam_qps: f32,
    /// Objects the spam filter remembers (least recently used are forgotten).
    pub spam_cache_size: usize,
    /// How often ongoing series are written to the API.
    pub refresh_interval: Duration,
    /// A series with no repeat for this long is finished (written and forgotten).
    pub finish_time: Duration,
    /// Aggregation entries kept at most (oldest evicted).
    pub cache_size: usize,
    /// Attempts per write (network / 5xx / 429 errors are retried).
    pub max_attempts: u32,
}

impl Default for EventBroadcasterOptions {
    fn default() -> Self {
        EventBroadcasterOptions {
            api: EventApi::default(),
            queue_size: 1000,
            spam_burst: 25,
            spam_qps: 1.0 / 300.0,
            spam_cache_size: 4096,
            refresh_interval: Duration::from_secs(30 * 60),
            finish_time: Duration::from_secs(6 * 60),
            cache_size: 4096,
            max_attempts: 3,
        }
    }
}

/// What happened to the events a broadcaster was given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventStats {
    /// Events created through the API.
    pub created: u64,
    /// Series updates patched through the API.
    pub patched: u64,
    /// Repeats folded into a cached series without an API call.
    pub aggregated: u64,
    /// Dropped because the queue was full (or the broadcaster had shut down).
    pub dropped_queue_full: u64,
    /// Dropped by the per-object spam filter.
    pub dropped_spam: u64,
    /// Rejected (invalid) or failed after every attempt.
    pub failed: u64,
}

#[derive(Debug, Default)]
struct Stats {
    created: AtomicU64,
    patched: AtomicU64,
    aggregated: AtomicU64,
    dropped_queue_full: AtomicU64,
    dropped_spam: AtomicU64,
    failed: AtomicU64,
}

impl Stats {
    fn snapshot(&self) -> EventStats {
        EventStats {
            created: self.created.load(Ordering::Relaxed),
            patched: self.patched.load(Ordering::Relaxed),
            aggregated: self.aggregated.load(Ordering::Relaxed),
            dropped_queue_full: self.dropped_queue_full.load(Ordering::Relaxed),
            dropped_spam: self.dropped_spam.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
        }
    }
}

/// Writes the events of every recorder it made; one task, one queue.
pub struct EventBroadcaster {
    tx: Mutex<Option<mpsc::Sender<Event>>>,
    stop: CancellationToken,
    task: Mutex<Option<JoinHandle<()>>>,
    stats: Arc<Stats>,
}

impl std::fmt::Debug for EventBroadcaster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventBroadcaster")
            .field("stats", &self.stats.snapshot())
            .finish()
    }
}

/// Records events for one reporting controller and instance. Cheap to clone.
#[derive(Clone)]
pub struct EventRecorder {
    tx: mpsc::Sender<Event>,
    controller: String,
    instance: String,
    stats: Arc<Stats>,
}

impl std::fmt::Debug for EventRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventRecorder")
            .field("controller", &self.controller)
            .field("instance", &self.instance)
            .finish()
    }
}

/// This host's name (the kernel's, else `$HOSTNAME`, else `localhost`), as client-go's
/// recorders and leader election identities use it.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".into())
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

impl EventBroadcaster {
    /// Starts the writer task (needs a tokio runtime).
    pub fn new(client: Client, options: EventBroadcasterOptions) -> Self {
        let (tx, rx) = mpsc::channel(options.queue_size.max(1));
        let stats = Arc::new(Stats::default());
        let sink = Sink {
            client,
            stats: stats.clone(),
            cache: HashMap::new(),
            order: VecDeque::new(),
            spam: HashMap::new(),
            spam_order: VecDeque::new(),
            similar: HashMap::new(),
            similar_order: VecDeque::new(),
            options,
        };
        let stop = CancellationToken::new();
        let task = tokio::spawn(sink.run(rx, stop.clone()));
        EventBroadcaster {
            tx: Mutex::new(Some(tx)),
            stop,
            task: Mutex::new(Some(task)),
            stats,
        }
    }

    /// A recorder for `reporting_controller` (e.g. `kube-scheduler`), with this
    /// host's name as reportingInstance.
    pub fn new_recorder(&self, reporting_controller: &str) -> EventRecorder {
        self.new_recorder_with_instance(reporting_controller, &hostname())
    }

    pub fn new_recorder_with_instance(
        &self,
        reporting_controller: &str,
        reporting_instance: &str,
    ) -> EventRecorder {
        let tx = self.tx.lock().clone().unwrap_or_else(|| mpsc::channel(1).0);
        EventRecorder {
            tx,
            controller: reporting_controller.to_string(),
            instance: reporting_instance.to_string(),
            stats: self.stats.clone(),
        }
    }

    pub fn stats(&self) -> EventStats {
        self.stats.snapshot()
    }

    /// Stops taking events, writes what is queued (and the counts of open series),
    /// then returns. Recorders made earlier drop their events from now on. Bound it
    /// with a timeout if the apiserver may be unreachable.
    pub async fn shutdown(&self) {
        self.tx.lock().take();
        self.stop.cancel();
        let task = self.task.lock().take();
        if let Some(t) = task {
            let _ = t.await;
        }
    }
}

impl EventRecorder {
    /// Records an event about `regarding` (upstream's `Eventf`): never blocks; the
    /// event is dropped (and counted) when the queue is full or the broadcaster has
    /// shut down.
    pub fn event(
        &self,
        regarding: &ObjectReference,
        related: Option<&ObjectReference>,
        type_: EventType,
        reason: &str,
        action: &str,
        note: &str,
    ) {
        let now = Timestamp::now();
        let namespace = regarding
            .namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".to_string());
        let name = format!(
            "{}.{:x}",
            regarding.name.as_deref().unwrap_or(&self.controller),
            now.as_nanosecond()
        );
        let ev = Event {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: Some(namespace),
                ..Default::default()
            },
            event_time: Some(MicroTime(now)),
            series: None,
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            action: Some(truncate(action, MAX_ACTION_BYTES)),
            reason: Some(truncate(reason, MAX_REASON_BYTES)),
            regarding: Some(regarding.clone()),
            related: related.cloned(),
            note: Some(truncate(note, MAX_NOTE_BYTES)),
            type_: Some(
                match type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .to_string(),
            ),
            ..Default::default()
        };
        if self.tx.try_send(ev).is_err() {
            self.stats
                .dropped_queue_full
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// [`EventRecorder::event`] about an object.
    pub fn event_for<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        type_: EventType,
        reason: &str,
        action: &str,
        note: &str,
    ) {
        self.event(&obj.object_ref(&()), None, type_, reason, action, note);
    }
}

/// Upstream's isomorphic-event key. `tools/events` (events.k8s.io) keys by the whole
/// event but its note, so a changed message only bumps the series; the legacy
/// `tools/record` that core events come from (`getEventKey`) keys by the message too,
/// so a new cause (a kubelet's next FailedMount reason) is written as an event of its
/// own, and not by the object's resourceVersion, so a pod that changed between two
/// occurrences still counts them in one event.
fn event_key(ev: &Event, api: EventApi) -> String {
    match api {
        EventApi::EventsV1 => json!([
            ev.action,
            ev.reason,
            ev.reporting_controller,
            ev.regarding,
            ev.related,
        ]),
        EventApi::CoreV1 => {
            // `getEventKey` is `getSpamKey`'s fields and these.
            let field_path = ev.regarding.as_ref().and_then(|r| r.field_path.as_deref());
            json!([spam_key(ev), field_path, ev.type_, ev.reason, ev.note])
        }
    }
    .to_string()
}

/// The spam filter's key (upstream's `getSpamKey`): the object the event is about,
/// whichever version and part of it, and who reports it.
fn spam_key(ev: &Event) -> String {
    let object = ev.regarding.clone().unwrap_or_default();
    json!([
        ev.reporting_controller,
        ev.reporting_instance,
        object.kind,
        object.namespace,
        object.name,
        object.uid,
        object.api_version,
    ])
    .to_string()
}

struct Sink {
    client: Client,
    stats: Arc<Stats>,
    /// Isomorphic key -> the event as last written (series counts may be ahead).
    cache: HashMap<String, Event>,
    /// Cache keys, oldest insertion first (for eviction).
    order: VecDeque<String>,
    spam: HashMap<String, TokenBucket>,
    spam_order: VecDeque<String>,
    /// Core events only: the distinct messages of one object's reason (aggregate key).
    similar: HashMap<String, SimilarEvents>,
    similar_order: VecDeque<String>,
    options: EventBroadcasterOptions,
}

/// The legacy aggregator's record of one object's events of one type and reason.
struct SimilarEvents {
    messages: HashSet<String>,
    last_seen: Timestamp,
}

/// The legacy aggregator's limits (upstream's `defaultAggregateMaxEvents` and
/// `defaultAggregateIntervalInSeconds`) and the prefix of a combined event's message.
const SIMILAR_EVENTS_COMBINED_AT: usize = 10;
const SIMILAR_EVENTS_WINDOW: Duration = Duration::from_secs(600);
const COMBINED_PREFIX: &str = "(combined from similar events): ";

/// Before a new key goes into `map` (at most `cap` entries; `order` holds its keys,
/// oldest first): forgets the oldest entry if the map is full.
fn make_room<V>(map: &mut HashMap<String, V>, order: &mut VecDeque<String>, cap: usize) {
    if map.len() >= cap.max(1)
        && let Some(old) = order.pop_front()
    {
        map.remove(&old);
    }
}

enum Write {
    Done,
    /// Failed for good (invalid, forbidden, ...).
    Rejected,
}

impl Sink {
    async fn run(mut self, mut rx: mpsc::Receiver<Event>, stop: CancellationToken) {
        let mut refresh = tokio::time::interval(self.options.refresh_interval);
        let mut finish = tokio::time::interval(self.options.finish_time);
        refresh.tick().await;
        finish.tick().await;
        loop {
            tokio::select! {
                ev = rx.recv() => match ev {
                    Some(ev) => self.record(ev).await,
                    None => break,
                },
                // The legacy correlator writes every repeat as it comes and keeps an
                // Event's count for as long as it remembers the Event.
                _ = refresh.tick(), if self.options.api == EventApi::EventsV1 => {
                    self.refresh_series().await
                }
                _ = finish.tick(), if self.options.api == EventApi::EventsV1 => {
                    self.finish_series().await
                }
                _ = stop.cancelled() => {
                    // Refuse new events, write the queued ones.
                    rx.close();
                    while let Some(ev) = rx.recv().await {
                        self.record(ev).await;
                    }
                    break;
                }
            }
        }
        // Shutdown: write the counts of open series once more.
        if self.options.api == EventApi::EventsV1 {
            self.refresh_series().await;
        }
    }

    fn allow(&mut self, ev: &Event) -> bool {
        let key = spam_key(ev);
        if !self.spam.contains_key(&key) {
            make_room(
                &mut self.spam,
                &mut self.spam_order,
                self.options.spam_cache_size,
            );
            self.spam.insert(
                key.clone(),
                TokenBucket::new(f64::from(self.options.spam_qps), self.options.spam_burst),
            );
            self.spam_order.push_back(key.clone());
        }
        self.spam.get(&key).is_some_and(|b| b.try_acquire())
    }

    async fn record(&mut self, ev: Event) {
        match self.options.api {
            EventApi::EventsV1 => self.record_in_series(ev).await,
            EventApi::CoreV1 => self.record_correlated(ev).await,
        }
    }

    /// client-go's legacy `EventCorrelator`: aggregate, observe, spam-filter, write.
    async fn record_correlated(&mut self, ev: Event) {
        let (mut ev, key) = self.aggregate_similar(ev);
        // Observe: a repeat is the Event already written, one more time.
        match self.cache.get(&key) {
            Some(seen) => {
                let count = seen.series.as_ref().map_or(1, |s| s.count) + 1;
                let now = ev.event_time.clone().unwrap_or(MicroTime(Timestamp::now()));
                ev.metadata.name = seen.metadata.name.clone();
                ev.event_time = seen.event_time.clone();
                ev.series = Some(EventSeries {
                    count,
                    last_observed_time: now,
                });
            }
            None => {
                make_room(&mut self.cache, &mut self.order, self.options.cache_size);
                self.order.push_back(key.clone());
            }
        }
        self.cache.insert(key, ev.clone());
        // The count is remembered even when the filter drops this write: the next
        // write that passes carries it.
        if !self.allow(&ev) {
            self.stats.dropped_spam.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.write(&ev).await;
    }

    /// Upstream's `EventAggregator`: once one object's events of one type and reason
    /// have had ten distinct messages within ten minutes, each further one is written
    /// as the single combined event of that reason (keyed without the message), so a
    /// cause that words itself differently each time does not make Event after Event.
    fn aggregate_similar(&mut self, mut ev: Event) -> (Event, String) {
        let event_key = event_key(&ev, EventApi::CoreV1);
        let aggregate_key = json!([spam_key(&ev), ev.type_, ev.reason]).to_string();
        let now = Timestamp::now();
        if !self.similar.contains_key(&aggregate_key) {
            make_room(
                &mut self.similar,
                &mut self.similar_order,
                self.options.cache_size,
            );
            self.similar_order.push_back(aggregate_key.clone());
        }
        let record = self
            .similar
            .entry(aggregate_key.clone())
            .or_insert_with(|| SimilarEvents {
                messages: HashSet::new(),
                last_seen: now,
            });
        if now.duration_since(record.last_seen).unsigned_abs() > SIMILAR_EVENTS_WINDOW {
            record.messages.clear();
        }
        record.last_seen = now;
        let note = ev.note.clone().unwrap_or_default();
        record.messages.insert(note.clone());
        if record.messages.len() < SIMILAR_EVENTS_COMBINED_AT {
            return (ev, event_key);
        }
        // Keep the set at its limit, as upstream's PopAny.
        if let Some(any) = record.messages.iter().next().cloned() {
            record.messages.remove(&any);
        }
        ev.note = Some(truncate(
            &format!("{COMBINED_PREFIX}{note}"),
            MAX_NOTE_BYTES,
        ));
        (ev, aggregate_key)
    }

    /// client-go's `tools/events`: isomorphic events become one series.
    async fn record_in_series(&mut self, ev: Event) {
        let key = event_key(&ev, self.options.api);
        let now = Timestamp::now();
        if let Some(cached) = self.cache.get_mut(&key) {
            match &mut cached.series {
                Some(series) => {
                    series.count += 1;
                    series.last_observed_time = MicroTime(now);
                    self.stats.aggregated.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                None => {
                    cached.series = Some(EventSeries {
                        count: 2,
                        last_observed_time: MicroTime(now),
                    });
                    let snapshot = cached.clone();
                    self.write(&snapshot).await;
                    return;
                }
            }
        }
        if !self.allow(&ev) {
            self.stats.dropped_spam.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if let Write::Rejected = self.write(&ev).await {
            return;
        }
        make_room(&mut self.cache, &mut self.order, self.options.cache_size);
        self.order.push_back(key.clone());
        self.cache.insert(key, ev);
    }

    async fn refresh_series(&mut self) {
        let open: Vec<Event> = self
            .cache
            .values()
            .filter(|e| e.series.is_some())
            .cloned()
            .collect();
        for ev in open {
            self.write(&ev).await;
        }
    }

    async fn finish_series(&mut self) {
        let cutoff = Timestamp::now() - self.options.finish_time;
        let mut done = Vec::new();
        for (k, ev) in &self.cache {
            let last = match &ev.series {
                Some(s) => s.last_observed_time.0,
                None => ev.event_time.as_ref().map(|t| t.0).unwrap_or(cutoff),
            };
            if last <= cutoff {
                done.push(k.clone());
            }
        }
        for k in done {
            if let Some(ev) = self.cache.remove(&k) {
                if ev.series.is_some() {
                    self.write(&ev).await;
                }
                self.order.retain(|o| o != &k);
            }
        }
    }

    /// One attempt at writing `ev` (or its series update) to the configured API;
    /// answers the counter the write adds to.
    async fn try_write(&self, ev: &Event) -> Result<&AtomicU64, kube::Error> {
        match self.options.api {
            EventApi::EventsV1 => self.try_write_events_v1(ev).await,
            EventApi::CoreV1 => self.try_write_core_v1(ev).await,
        }
    }

    async fn try_write_events_v1(&self, ev: &Event) -> Result<&AtomicU64, kube::Error> {
        let ns = ev.metadata.namespace.as_deref().unwrap_or("default");
        let name = ev.metadata.name.as_deref().unwrap_or_default();
        let api: Api<Event> = Api::namespaced(self.client.clone(), ns);
        match &ev.series {
            Some(series) => {
                let patch = json!({"series": {
                    "count": series.count,
                    "lastObservedTime": series.last_observed_time,
                }});
                match api
                    .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Err(kube::Error::Api(s)) if s.code == 404 => api
                        .create(&PostParams::default(), ev)
                        .await
                        .map(|_| &self.stats.created),
                    other => other.map(|_| &self.stats.patched),
                }
            }
            None => match api.create(&PostParams::default(), ev).await {
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(&self.stats.created),
                other => other.map(|_| &self.stats.created),
            },
        }
    }

    /// As the legacy correlator: a repeat patches `count` and `lastTimestamp`.
    async fn try_write_core_v1(&self, ev: &Event) -> Result<&AtomicU64, kube::Error> {
        let core_ev = to_core_event(ev);
        let ns = core_ev.metadata.namespace.as_deref().unwrap_or("default");
        let name = core_ev.metadata.name.as_deref().unwrap_or_default();
        let api: Api<core::Event> = Api::namespaced(self.client.clone(), ns);
        if ev.series.is_some() {
            // A combined event's message is the latest of its kind.
            let patch = json!({
                "count": core_ev.count,
                "lastTimestamp": core_ev.last_timestamp,
                "message": core_ev.message,
            });
            match api
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Err(kube::Error::Api(s)) if s.code == 404 => api
                    .create(&PostParams::default(), &core_ev)
                    .await
                    .map(|_| &self.stats.created),
                other => other.map(|_| &self.stats.patched),
            }
        } else {
            match api.create(&PostParams::default(), &core_ev).await {
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(&self.stats.created),
                other => other.map(|_| &self.stats.created),
            }
        }
    }

    async fn write(&self, ev: &Event) -> Write {
        let name = ev.metadata.name.as_deref().unwrap_or_default();
        let attempts = self.options.max_attempts.max(1);
        for attempt in 0..attempts {
            match self.try_write(ev).await {
                Ok(counter) => {
                    counter.fetch_add(1, Ordering::Relaxed);
                    return Write::Done;
                }
                Err(kube::Error::Api(s)) if s.code != 429 && s.code < 500 => {
                    tracing::warn!(event = %name, reason = %s.message, "event rejected");
                    break;
                }
                Err(e) => {
                    tracing::info!(event = %name, error = %e, attempt, "event write failed");
                    if attempt + 1 < attempts {
                        tokio::time::sleep(Duration::from_millis(100 << attempt.min(6))).await;
                    }
                }
            }
        }
        self.stats.failed.fetch_add(1, Ordering::Relaxed);
        Write::Rejected
    }
}

/// The core `v1` form of a recorded event, as client-go's legacy recorder makes it:
/// the reporter in `source` and `reportingComponent`/`reportingInstance`, the first
/// occurrence in `firstTimestamp`, the latest in `lastTimestamp`, repeats in `count`,
/// and no `eventTime`/`series` (those mark the events.k8s.io shape, which core
/// validation would then hold to the stricter new-style rules).
pub fn to_core_event(ev: &Event) -> core::Event {
    let first = ev.event_time.as_ref().map(|t| Time(t.0));
    let (count, last) = match &ev.series {
        Some(series) => (series.count, Some(Time(series.last_observed_time.0))),
        None => (1, first.clone()),
    };
    core::Event {
        metadata: ev.metadata.clone(),
        involved_object: ev.regarding.clone().unwrap_or_default(),
        related: ev.related.clone(),
        reason: ev.reason.clone(),
        message: ev.note.clone(),
        type_: ev.type_.clone(),
        action: ev.action.clone(),
        source: Some(EventSource {
            component: ev.reporting_controller.clone(),
            // Go's omitempty: a recorder without a host writes none.
            host: ev.reporting_instance.clone().filter(|h| !h.is_empty()),
        }),
        reporting_component: ev.reporting_controller.clone(),
        reporting_instance: ev.reporting_instance.clone(),
        first_timestamp: first,
        last_timestamp: last,
        count: Some(count),
        event_time: None,
        series: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncates_on_char_boundaries() {
        assert_eq!(truncate("abc", 5), "abc");
        assert_eq!(truncate("abcdef", 3), "abc");
        assert_eq!(truncate("aé", 2), "a");
    }

    #[test]
    fn isomorphic_keys_ignore_time_and_only_core_events_key_by_note() {
        let mk = |reason: &str, note: &str| Event {
            action: Some("A".into()),
            reason: Some(reason.into()),
            note: Some(note.into()),
            reporting_controller: Some("c".into()),
            regarding: Some(ObjectReference {
                name: Some("o".into()),
                ..Default::default()
            }),
            event_time: Some(MicroTime(Timestamp::now())),
            ..Default::default()
        };
        let v1 = EventApi::EventsV1;
        assert_eq!(event_key(&mk("R", "x"), v1), event_key(&mk("R", "y"), v1));
        assert_ne!(event_key(&mk("R", "x"), v1), event_key(&mk("S", "x"), v1));
        let core = EventApi::CoreV1;
        assert_ne!(
            event_key(&mk("R", "x"), core),
            event_key(&mk("R", "y"), core)
        );
        assert_eq!(
            event_key(&mk("R", "x"), core),
            event_key(&mk("R", "x"), core)
        );
        assert_eq!(spam_key(&mk("R", "x")), spam_key(&mk("S", "y")));
        // The legacy key and the spam key ignore which version of the object it was.
        let mut newer = mk("R", "x");
        if let Some(r) = newer.regarding.as_mut() {
            r.resource_version = Some("42".into());
        }
        assert_eq!(event_key(&mk("R", "x"), core), event_key(&newer, core));
        assert_eq!(spam_key(&mk("R", "x")), spam_key(&newer));
        assert_ne!(event_key(&mk("R", "x"), v1), event_key(&newer, v1));
        // A container's events are their own series but share the pod's spam budget.
        let mut container = mk("R", "x");
        if let Some(r) = container.regarding.as_mut() {
            r.field_path = Some("spec.containers{c}".into());
        }
        assert_ne!(event_key(&mk("R", "x"), core), event_key(&container, core));
        assert_eq!(spam_key(&mk("R", "x")), spam_key(&container));
    }

    fn recorded(series: Option<EventSeries>) -> Event {
        let at = |s: i64| MicroTime(Timestamp::from_second(s).unwrap());
        Event {
            metadata: ObjectMeta {
                name: Some("web-0.1234".into()),
                namespace: Some("prod".into()),
                ..Default::default()
            },
            event_time: Some(at(1_700_000_000)),
            series: series.map(|mut s| {
                s.last_observed_time = at(1_700_000_060);
                s
            }),
            reporting_controller: Some("kubelet".into()),
            reporting_instance: Some("node-a".into()),
            action: Some("Pulling".into()),
            reason: Some("Pulling".into()),
            note: Some("Pulling image \"nginx\"".into()),
            type_: Some("Normal".into()),
            regarding: Some(ObjectReference {
                kind: Some("Pod".into()),
                name: Some("web-0".into()),
                namespace: Some("prod".into()),
                field_path: Some("spec.containers{web}".into()),
                ..Default::default()
            }),
            related: Some(ObjectReference {
                kind: Some("Node".into()),
                name: Some("node-a".into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn core_event_has_the_legacy_recorder_shape() {
        let ev = recorded(None);
        let core = to_core_event(&ev);
        assert_eq!(core.metadata.name.as_deref(), Some("web-0.1234"));
        assert_eq!(core.metadata.namespace.as_deref(), Some("prod"));
        assert_eq!(Some(&core.involved_object), ev.regarding.as_ref());
        assert_eq!(core.related, ev.related);
        assert_eq!(core.message, ev.note);
        assert_eq!(core.reason.as_deref(), Some("Pulling"));
        assert_eq!(core.action.as_deref(), Some("Pulling"));
        assert_eq!(core.type_.as_deref(), Some("Normal"));
        let source = core.source.clone().unwrap();
        assert_eq!(source.component.as_deref(), Some("kubelet"));
        assert_eq!(source.host.as_deref(), Some("node-a"));
        assert_eq!(core.reporting_component.as_deref(), Some("kubelet"));
        assert_eq!(core.reporting_instance.as_deref(), Some("node-a"));
        assert_eq!(core.count, Some(1));
        let first = Time(Timestamp::from_second(1_700_000_000).unwrap());
        assert_eq!(core.first_timestamp.as_ref(), Some(&first));
        assert_eq!(core.last_timestamp.as_ref(), Some(&first));
        assert!(core.event_time.is_none() && core.series.is_none());
    }

    #[test]
    fn core_event_carries_a_series_as_count_and_last_timestamp() {
        let core = to_core_event(&recorded(Some(EventSeries {
            count: 7,
            last_observed_time: MicroTime(Timestamp::now()),
        })));
        assert_eq!(core.count, Some(7));
        assert_eq!(
            core.first_timestamp,
            Some(Time(Timestamp::from_second(1_700_000_000).unwrap()))
        );
        assert_eq!(
            core.last_timestamp,
            Some(Time(Timestamp::from_second(1_700_000_060).unwrap()))
        );
        assert!(core.series.is_none());
    }
}
