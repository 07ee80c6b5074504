//! client-go's `util/workqueue`: a deduplicating work queue with one worker per item at
//! a time, delayed adds, rate-limited re-adds and upstream's metrics.
//!
//! Semantics (as upstream's `Typed{,Delaying,RateLimiting}Queue`):
//! * an item added while it is waiting in the queue is stored once (dirty set);
//! * an item handed out by [`WorkQueue::get`] is "processing" until [`WorkQueue::done`];
//!   if it is added again meanwhile, it is queued again only after `done`, so no two
//!   workers ever hold the same item;
//! * [`WorkQueue::add_after`] adds an item once a delay has passed (the earliest
//!   pending time wins); [`WorkQueue::add_rate_limited`] asks the [`RateLimiter`] for
//!   the delay; [`WorkQueue::forget`] clears the item's failure history;
//! * after [`WorkQueue::shutdown`], adds are ignored, delayed items are dropped and
//!   `get` still hands out what is queued, then returns `None`;
//!   [`WorkQueue::shutdown_with_drain`] also waits until every item is done.
//!
//! Time is tokio's clock, so tests may pause it.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ferrokube_component_base::metrics::{
    CounterVec, GaugeVec, Histogram, HistogramVec, exponential_buckets,
};
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use ferrokube_component_base::ratelimit::TokenBucket;

/// Decides how long an item waits before it is re-added (client-go `RateLimiter`).
pub trait RateLimiter<T>: Send + Sync {
    /// The delay before `item` is added again; counts a failure for per-item limiters.
    fn when(&self, item: &T) -> Duration;
    /// Clears the failure history of `item`.
    fn forget(&self, item: &T);
    /// How many times `item` has been rate-limited since it was last forgotten.
    fn num_requeues(&self, item: &T) -> u32;
}

/// Per-item exponential backoff: `base * 2^failures`, capped at `max`.
#[derive(Debug)]
pub struct ItemExponentialFailureRateLimiter<T> {
    base: Duration,
    max: Duration,
    failures: Mutex<HashMap<T, u32>>,
}

impl<T: Eq + Hash + Clone> ItemExponentialFailureRateLimiter<T> {
    pub fn new(base: Duration, max: Duration) -> Self {
        ItemExponentialFailureRateLimiter {
            base,
            max,
            failures: Mutex::new(HashMap::new()),
        }
    }
}

impl<T: Eq + Hash + Clone + Send + Sync> RateLimiter<T> for ItemExponentialFailureRateLimiter<T> {
    fn when(&self, item: &T) -> Duration {
        let mut f = self.failures.lock();
        let n = f.entry(item.clone()).or_insert(0);
        let exp = *n;
        *n = n.saturating_add(1);
        let backoff = self.base.as_secs_f64() * 2f64.powi(exp.min(1023) as i32);
        if !backoff.is_finite() || backoff >= self.max.as_secs_f64() {
            self.max
        } else {
            Duration::from_secs_f64(backoff)
        }
    }

    fn forget(&self, item: &T) {
        self.failures.lock().remove(item);
    }

    fn num_requeues(&self, item: &T) -> u32 {
        self.failures.lock().get(item).copied().unwrap_or(0)
    }
}

/// `fast` for the first `max_fast_attempts` failures of an item, `slow` after.
#[derive(Debug)]
pub struct ItemFastSlowRateLimiter<T> {
    fast: Duration,
    slow: Duration,
    max_fast_attempts: u32,
    failures: Mutex<HashMap<T, u32>>,
}

impl<T: Eq + Hash + Clone> ItemFastSlowRateLimiter<T> {
    pub fn new(fast: Duration, slow: Duration, max_fast_attempts: u32) -> Self {
        ItemFastSlowRateLimiter {
            fast,
            slow,
            max_fast_attempts,
            failures: Mutex::new(HashMap::new()),
        }
    }
}

impl<T: Eq + Hash + Clone + Send + Sync> RateLimiter<T> for ItemFastSlowRateLimiter<T> {
    fn when(&self, item: &T) -> Duration {
        let mut f = self.failures.lock();
        let n = f.entry(item.clone()).or_insert(0);
        *n = n.saturating_add(1);
        if *n <= self.max_fast_attempts {
            self.fast
        } else {
            self.slow
        }
    }

    fn forget(&self, item: &T) {
        self.failures.lock().remove(item);
    }

    fn num_requeues(&self, item: &T) -> u32 {
        self.failures.lock().get(item).copied().unwrap_or(0)
    }
}

/// An overall token bucket: every item shares it (client-go `BucketRateLimiter`).
#[derive(Debug)]
pub struct BucketRateLimiter {
    bucket: TokenBucket,
}

impl BucketRateLimiter {
    pub fn new(qps: f32, burst: u32) -> Self {
        BucketRateLimiter {
            bucket: TokenBucket::new(f64::from(qps), burst),
        }
    }
}

impl<T> RateLimiter<T> for BucketRateLimiter {
    fn when(&self, _item: &T) -> Duration {
        self.bucket.reserve()
    }

    fn forget(&self, _item: &T) {}

    fn num_requeues(&self, _item: &T) -> u32 {
        0
    }
}

/// The longest delay of several limiters; requeues are the most of any.
pub struct MaxOfRateLimiter<T> {
    limiters: Vec<Box<dyn RateLimiter<T>>>,
}

impl<T> std::fmt::Debug for MaxOfRateLimiter<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MaxOfRateLimiter")
            .field("limiters", &self.limiters.len())
            .finish()
    }
}

impl<T> MaxOfRateLimiter<T> {
    pub fn new(limiters: Vec<Box<dyn RateLimiter<T>>>) -> Self {
        MaxOfRateLimiter { limiters }
    }
}

impl<T> RateLimiter<T> for MaxOfRateLimiter<T> {
    fn when(&self, item: &T) -> Duration {
        self.limiters
            .iter()
            .map(|l| l.when(item))
            .max()
            .unwrap_or_default()
    }

    fn forget(&self, item: &T) {
        for l in &self.limiters {
            l.forget(item);
        }
    }

    fn num_requeues(&self, item: &T) -> u32 {
        self.limiters
            .iter()
            .map(|l| l.num_requeues(item))
            .max()
            .unwrap_or(0)
    }
}

/// Upstream's per-item backoff defaults: 5 ms doubling up to 1000 s.
pub const DEFAULT_ITEM_BASE_DELAY: Duration = Duration::from_millis(5);
pub const DEFAULT_ITEM_MAX_DELAY: Duration = Duration::from_secs(1000);
/// Upstream's overall bucket defaults: 10 qps, burst 100.
pub const DEFAULT_QUEUE_QPS: f32 = 10.0;
pub const DEFAULT_QUEUE_BURST: u32 = 100;

/// client-go's `DefaultTypedControllerRateLimiter`: the max of per-item exponential
/// backoff (5 ms .. 1000 s) and an overall bucket (10 qps, burst 100).
pub fn default_controller_rate_limiter<T>() -> MaxOfRateLimiter<T>
where
    T: Eq + Hash + Clone + Send + Sync + 'static,
{
    MaxOfRateLimiter::new(vec![
        Box::new(ItemExponentialFailureRateLimiter::new(
            DEFAULT_ITEM_BASE_DELAY,
            DEFAULT_ITEM_MAX_DELAY,
        )),
        Box::new(BucketRateLimiter::new(
            DEFAULT_QUEUE_QPS,
            DEFAULT_QUEUE_BURST,
        )),
    ])
}

/// Bucket bounds (seconds) of the latency histograms: upstream's
/// `ExponentialBuckets(10e-9, 10, 10)`.
pub const LATENCY_BUCKETS: [f64; 10] = exponential_buckets(1e-8, 10.0);

#[derive(Debug)]
struct Counters {
    adds: AtomicU64,
    retries: AtomicU64,
    queue_latency: Mutex<Histogram>,
    work_duration: Mutex<Histogram>,
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            adds: AtomicU64::default(),
            retries: AtomicU64::default(),
            queue_latency: Mutex::new(Histogram::new(&LATENCY_BUCKETS)),
            work_duration: Mutex::new(Histogram::new(&LATENCY_BUCKETS)),
        }
    }
}

/// Upstream's workqueue metrics at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueMetrics {
    pub name: String,
    /// `workqueue_depth`: items waiting in the queue (not delayed, not processing).
    pub depth: u64,
    /// `workqueue_adds_total`.
    pub adds: u64,
    /// `workqueue_retries_total`: delayed / rate-limited adds.
    pub retries: u64,
    /// `workqueue_queue_duration_seconds`: time from add to `get`.
    pub queue_latency: Histogram,
    /// `workqueue_work_duration_seconds`: time from `get` to `done`.
    pub work_duration: Histogram,
    /// `workqueue_unfinished_work_seconds`: summed age of the items in processing.
    pub unfinished_work_seconds: f64,
    /// `workqueue_longest_running_processor_seconds`.
    pub longest_running_processor_seconds: f64,
}

impl QueueMetrics {
    /// Prometheus text exposition with upstream's metric names, labelled `name`.
    pub fn render(&self) -> String {
        render_queues([self])
    }
}

/// The metrics of several queues as one page: each of upstream's metrics once, with a
/// series per queue (labelled `name`).
pub fn render_queues<'a>(queues: impl IntoIterator<Item = &'a QueueMetrics>) -> String {
    const NAME: [&str; 1] = ["name"];
    let depth = GaugeVec::new("workqueue_depth", "[BETA] Current depth of workqueue", NAME);
    let adds = CounterVec::new(
        "workqueue_adds_total",
        "[BETA] Total number of adds handled by workqueue",
        NAME,
    );
    let retries = CounterVec::new(
        "workqueue_retries_total",
        "[BETA] Total number of retries handled by workqueue",
        NAME,
    );
    let queue_duration = HistogramVec::histogram(
        "workqueue_queue_duration_seconds",
        "[BETA] How long in seconds an item stays in workqueue before being requested.",
        NAME,
        &LATENCY_BUCKETS,
    );
    let work_duration = HistogramVec::histogram(
        "workqueue_work_duration_seconds",
        "[BETA] How long in seconds processing an item from workqueue takes.",
        NAME,
        &LATENCY_BUCKETS,
    );
    let unfinished = GaugeVec::new(
        "workqueue_unfinished_work_seconds",
        "[BETA] How many seconds of work has done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this increases.",
        NAME,
    );
    let longest = GaugeVec::new(
        "workqueue_longest_running_processor_seconds",
        "[BETA] How many seconds has the longest running processor for workqueue been running.",
        NAME,
    );
    for q in queues {
        let name = [q.name.as_str()];
        depth.set(name, q.depth as f64);
        adds.add(name, q.adds);
        retries.add(name, q.retries);
        queue_duration.with(name, |h| *h = q.queue_latency.clone());
        work_duration.with(name, |h| *h = q.work_duration.clone());
        unfinished.set(name, q.unfinished_work_seconds);
        longest.set(name, q.longest_running_processor_seconds);
    }
    let mut out = String::new();
    depth.render(&mut out);
    adds.render(&mut out);
    retries.render(&mut out);
    queue_duration.render(&mut out);
    work_duration.render(&mut out);
    unfinished.render(&mut out);
    longest.render(&mut out);
    out
}

struct State<T> {
    queue: VecDeque<T>,
    dirty: HashSet<T>,
    processing: HashMap<T, Instant>,
    added_at: HashMap<T, Instant>,
    waiting: BTreeMap<(Instant, u64), T>,
    waiting_index: HashMap<T, (Instant, u64)>,
    seq: u64,
    shutting_down: bool,
}

struct Inner<T> {
    name: String,
    state: Mutex<State<T>>,
    notify: Notify,
    limiter: Box<dyn RateLimiter<T>>,
    counters: Counters,
}

/// A rate-limiting, delaying, deduplicating work queue. Cheap to clone; clones share
/// the queue.
pub struct WorkQueue<T> {
    inner: Arc<Inner<T>>,
}

impl<T> Clone for WorkQueue<T> {
    fn clone(&self) -> Self {
        WorkQueue {
            inner: self.inner.clone(),
        }
    }
}

impl<T> std::fmt::Debug for WorkQueue<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkQueue")
            .field("name", &self.inner.name)
            .finish()
    }
}

impl<T> WorkQueue<T>
where
    T: Eq + Hash + Clone + Send + Sync + 'static,
{
    /// A queue with [`default_controller_rate_limiter`]; `name` labels its metrics.
    pub fn new(name: impl Into<String>) -> Self {
        Self::with_rate_limiter(name, default_controller_rate_limiter())
    }

    pub fn with_rate_limiter(
        name: impl Into<String>,
        limiter: impl RateLimiter<T> + 'static,
    ) -> Self {
        WorkQueue {
            inner: Arc::new(Inner {
                name: name.into(),
                state: Mutex::new(State {
                    queue: VecDeque::new(),
                    dirty: HashSet::new(),
                    processing: HashMap::new(),
                    added_at: HashMap::new(),
                    waiting: BTreeMap::new(),
                    waiting_index: HashMap::new(),
                    seq: 0,
                    shutting_down: false,
                }),
                notify: Notify::new(),
                limiter: Box::new(limiter),
                counters: Counters::default(),
            }),
        }
    }

    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Marks `item` as needing processing.
    pub fn add(&self, item: T) {
        let mut st = self.inner.state.lock();
        if self.add_locked(&mut st, item, Instant::now()) {
            drop(st);
            self.inner.notify.notify_waiters();
        }
    }

    /// Returns whether a waiter should be woken.
    fn add_locked(&self, st: &mut State<T>, item: T, now: Instant) -> bool {
        if st.shutting_down {
            return false;
        }
        self.inner.counters.adds.fetch_add(1, Ordering::Relaxed);
        if st.dirty.contains(&item) {
            return false;
        }
        st.added_at.entry(item.clone()).or_insert(now);
        st.dirty.insert(item.clone());
        if st.processing.contains_key(&item) {
            return false;
        }
        st.queue.push_back(item);
        true
    }

    /// Adds `item` once `delay` has passed. If it is already waiting, the earlier
    /// time wins.
    pub fn add_after(&self, item: T, delay: Duration) {
        let mut st = self.inner.state.lock();
        if st.shutting_down {
            return;
        }
        self.inner.counters.retries.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        if delay.is_zero() {
            let wake = self.add_locked(&mut st, item, now);
            drop(st);
            if wake {
                self.inner.notify.notify_waiters();
            }
            return;
        }
        // A delay past what an Instant holds (a rate limiter's Duration::MAX) is
        // "not for decades", as tokio's own sleep takes it.
        let at = now
            .checked_add(delay)
            .unwrap_or_else(|| now + Duration::from_secs(30 * 365 * 86_400));
        if let Some(&(existing, seq)) = st.waiting_index.get(&item) {
            if existing <= at {
                return;
            }
            st.waiting.remove(&(existing, seq));
        }
        st.seq += 1;
        let key = (at, st.seq);
        st.waiting.insert(key, item.clone());
        st.waiting_index.insert(item, key);
        drop(st);
        // A getter may be sleeping until a later deadline.
        self.inner.notify.notify_waiters();
    }

    /// Adds `item` after the rate limiter's delay for it.
    pub fn add_rate_limited(&self, item: T) {
        let d = self.inner.limiter.when(&item);
        self.add_after(item, d);
    }

    /// Clears `item`'s failure history (call after a successful sync).
    pub fn forget(&self, item: &T) {
        self.inner.limiter.forget(item);
    }

    /// How often `item` was rate-limited since it was last forgotten.
    pub fn num_requeues(&self, item: &T) -> u32 {
        self.inner.limiter.num_requeues(item)
    }

    /// Items waiting in the queue (neither delayed nor processing).
    pub fn len(&self) -> usize {
        self.inner.state.lock().queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Moves delayed items whose time has come into the queue.
    fn promote_due(&self, st: &mut State<T>, now: Instant) {
        while let Some((&key, _)) = st.waiting.first_key_value() {
            if key.0 > now {
                break;
            }
            if let Some(item) = st.waiting.remove(&key) {
                st.waiting_index.remove(&item);
                self.add_locked(st, item, now);
            }
        }
    }

    /// Waits for the next item. `None` once the queue is shut down and empty. The
    /// caller must call [`WorkQueue::done`] with the item when finished with it.
    pub async fn get(&self) -> Option<T> {
        loop {
            let notified = self.inner.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let deadline = {
                let mut st = self.inner.state.lock();
                let now = Instant::now();
                self.promote_due(&mut st, now);
                if let Some(item) = st.queue.pop_front() {
                    st.dirty.remove(&item);
                    if let Some(added) = st.added_at.remove(&item) {
                        self.inner
                            .counters
                            .queue_latency
                            .lock()
                            .observe(now.saturating_duration_since(added).as_secs_f64());
                    }
                    st.processing.insert(item.clone(), now);
                    return Some(item);
                }
                if st.shutting_down {
                    return None;
                }
                st.waiting.first_key_value().map(|(k, _)| k.0)
            };
            match deadline {
                Some(at) => {
                    tokio::select! {
                        _ = &mut notified => {}
                        _ = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Marks `item` as done; if it was added while processing, it is queued again.
    pub fn done(&self, item: &T) {
        let mut st = self.inner.state.lock();
        if let Some(started) = st.processing.remove(item) {
            self.inner
                .counters
                .work_duration
                .lock()
                .observe(started.elapsed().as_secs_f64());
        }
        if st.dirty.contains(item) {
            st.queue.push_back(item.clone());
        }
        drop(st);
        self.inner.notify.notify_waiters();
    }

    /// Stops accepting adds and drops delayed items; `get` hands out what is queued,
    /// then returns `None`.
    pub fn shutdown(&self) {
        let mut st = self.inner.state.lock();
        st.shutting_down = true;
        st.waiting.clear();
        st.waiting_index.clear();
        drop(st);
        self.inner.notify.notify_waiters();
    }

    /// [`WorkQueue::shutdown`], then waits until the queue is empty and no item is
    /// processing. Workers must keep calling `get`/`done` until `get` returns `None`;
    /// bound the wait with a timeout if they may be stuck.
    pub async fn shutdown_with_drain(&self) {
        self.shutdown();
        loop {
            let notified = self.inner.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let st = self.inner.state.lock();
                if st.queue.is_empty() && st.processing.is_empty() {
                    return;
                }
            }
            notified.await;
        }
    }

    pub fn is_shutting_down(&self) -> bool {
        self.inner.state.lock().shutting_down
    }

    /// The queue's metrics now.
    pub fn metrics(&self) -> QueueMetrics {
        let st = self.inner.state.lock();
        let now = Instant::now();
        let mut unfinished = 0.0;
        let mut longest: f64 = 0.0;
        for started in st.processing.values() {
            let age = now.saturating_duration_since(*started).as_secs_f64();
            unfinished += age;
            longest = longest.max(age);
        }
        let depth = st.queue.len() as u64;
        drop(st);
        let c = &self.inner.counters;
        QueueMetrics {
            name: self.inner.name.clone(),
            depth,
            adds: c.adds.load(Ordering::Relaxed),
            retries: c.retries.load(Ordering::Relaxed),
            queue_latency: c.queue_latency.lock().clone(),
            work_duration: c.work_duration.lock().clone(),
            unfinished_work_seconds: unfinished,
            longest_running_processor_seconds: longest,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain<T: Eq + Hash + Clone + Send + Sync + 'static>() -> WorkQueue<T> {
        // No backoff: the queue semantics alone.
        WorkQueue::with_rate_limiter("t", BucketRateLimiter::new(0.0, 1))
    }

    async fn get_now<T>(q: &WorkQueue<T>) -> Option<T>
    where
        T: Eq + Hash + Clone + Send + Sync + 'static,
    {
        tokio::time::timeout(Duration::from_millis(200), q.get())
            .await
            .ok()
            .flatten()
    }

    #[tokio::test]
    async fn a_delay_past_any_instant_waits_without_overflowing() {
        let q = plain::<&str>();
        q.add_after("never", Duration::MAX);
        q.add_after("soon", Duration::from_millis(10));
        assert_eq!(get_now(&q).await, Some("soon"));
        assert_eq!(get_now(&q).await, None);
    }

    #[tokio::test]
    async fn dedups_queued_items() {
        let q = plain::<&str>();
        q.add("a");
        q.add("b");
        q.add("a");
        q.add("a");
        assert_eq!(q.len(), 2);
        assert_eq!(get_now(&q).await, Some("a"));
        assert_eq!(get_now(&q).await, Some("b"));
        assert!(q.is_empty());
        let m = q.metrics();
        assert_eq!(m.adds, 4);
        assert_eq!(m.depth, 0);
        assert_eq!(m.queue_latency.count(), 2);
    }

    #[tokio::test]
    async fn one_worker_per_item_and_requeue_after_done() {
        let q = plain::<&str>();
        q.add("a");
        let a = get_now(&q).await.unwrap();
        // Re-added while processing: not handed to a second worker.
        q.add("a");
        q.add("a");
        assert_eq!(q.len(), 0);
        assert_eq!(get_now(&q).await, None);
        q.done(&a);
        // Queued once again after done.
        assert_eq!(q.len(), 1);
        assert_eq!(get_now(&q).await, Some("a"));
        q.done(&"a");
        assert!(q.is_empty());
        let m = q.metrics();
        assert_eq!(m.work_duration.count(), 2);
        assert_eq!(m.depth, 0);
    }

    #[tokio::test]
    async fn concurrent_workers_never_share_an_item() {
        let q = plain::<u32>();
        let busy = Arc::new(Mutex::new(HashSet::new()));
        let processed = Arc::new(AtomicU64::new(0));
        let mut workers = Vec::new();
        for _ in 0..4 {
            let (q, busy, processed) = (q.clone(), busy.clone(), processed.clone());
            workers.push(tokio::spawn(async move {
                while let Some(item) = q.get().await {
                    assert!(busy.lock().insert(item), "item {item} held twice");
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    busy.lock().remove(&item);
                    processed.fetch_add(1, Ordering::Relaxed);
                    q.done(&item);
                }
            }));
        }
        for round in 0..50 {
            q.add(round % 3);
            tokio::task::yield_now().await;
        }
        tokio::time::timeout(Duration::from_secs(5), q.shutdown_with_drain())
            .await
            .unwrap();
        for w in workers {
            tokio::time::timeout(Duration::from_secs(5), w)
                .await
                .unwrap()
                .unwrap();
        }
        let n = processed.load(Ordering::Relaxed);
        assert!((3..=50).contains(&n), "processed {n}");
    }

    #[test]
    fn exponential_backoff_grows_caps_and_forgets() {
        let r = ItemExponentialFailureRateLimiter::new(
            Duration::from_millis(5),
            Duration::from_secs(1000),
        );
        let got: Vec<_> = (0..5).map(|_| r.when(&"x")).collect();
        let ms = |n| Duration::from_millis(n);
        assert_eq!(got, [ms(5), ms(10), ms(20), ms(40), ms(80)]);
        assert_eq!(r.num_requeues(&"x"), 5);
        assert_eq!(r.when(&"y"), ms(5), "per item");
        for _ in 0..40 {
            r.when(&"x");
        }
        assert_eq!(r.when(&"x"), Duration::from_secs(1000));
        r.forget(&"x");
        assert_eq!(r.num_requeues(&"x"), 0);
        assert_eq!(r.when(&"x"), ms(5));
        // Huge exponents never overflow.
        for _ in 0..5000 {
            r.when(&"z");
        }
        assert_eq!(r.when(&"z"), Duration::from_secs(1000));
    }

    #[test]
    fn default_limiter_is_max_of_backoff_and_bucket() {
        let r = default_controller_rate_limiter::<u32>();
        // Burst 100 shared by all items: the per-item backoff dominates.
        for i in 0..100 {
            assert_eq!(r.when(&i), Duration::from_millis(5));
        }
        // Bucket exhausted: 10 qps spacing now dominates for a fresh item.
        let d = r.when(&1000);
        assert!(
            d > Duration::from_millis(50) && d <= Duration::from_millis(100),
            "{d:?}"
        );
        assert_eq!(r.num_requeues(&1000), 1);
        r.forget(&1000);
        assert_eq!(r.num_requeues(&1000), 0);
    }

    #[test]
    fn fast_slow() {
        let r = ItemFastSlowRateLimiter::new(Duration::from_millis(1), Duration::from_secs(1), 2);
        let got: Vec<_> = (0..3).map(|_| r.when(&1)).collect();
        assert_eq!(
            got,
            [
                Duration::from_millis(1),
                Duration::from_millis(1),
                Duration::from_secs(1)
            ]
        );
    }

    #[tokio::test]
    async fn rate_limited_adds_back_off_per_item() {
        let q = WorkQueue::with_rate_limiter(
            "backoff",
            ItemExponentialFailureRateLimiter::new(
                Duration::from_millis(40),
                Duration::from_secs(10),
            ),
        );
        q.add_rate_limited("a");
        let t = Instant::now();
        assert_eq!(q.len(), 0, "delayed, not queued yet");
        let a = tokio::time::timeout(Duration::from_secs(2), q.get())
            .await
            .unwrap()
            .unwrap();
        let first = t.elapsed();
        assert!(first >= Duration::from_millis(40), "{first:?}");
        q.done(&a);
        q.add_rate_limited("a");
        let t = Instant::now();
        let a = tokio::time::timeout(Duration::from_secs(2), q.get())
            .await
            .unwrap()
            .unwrap();
        let second = t.elapsed();
        assert!(second >= Duration::from_millis(80), "{second:?}");
        q.done(&a);
        assert_eq!(q.num_requeues(&"a"), 2);
        q.forget(&"a");
        assert_eq!(q.num_requeues(&"a"), 0);
        assert_eq!(q.metrics().retries, 2);
    }

    #[tokio::test]
    async fn add_after_delays_and_earliest_wins() {
        let q = plain::<&str>();
        let t = Instant::now();
        q.add_after("late", Duration::from_millis(150));
        q.add_after("x", Duration::from_secs(30));
        q.add_after("x", Duration::from_millis(50));
        q.add_after("x", Duration::from_secs(60));
        assert!(q.is_empty());
        let first = tokio::time::timeout(Duration::from_secs(2), q.get())
            .await
            .unwrap();
        assert_eq!(first, Some("x"));
        let e = t.elapsed();
        assert!(
            e >= Duration::from_millis(50) && e < Duration::from_millis(150),
            "{e:?}"
        );
        let second = tokio::time::timeout(Duration::from_secs(2), q.get())
            .await
            .unwrap();
        assert_eq!(second, Some("late"));
        assert!(t.elapsed() >= Duration::from_millis(150));
        // Only one "x" although it was scheduled three times.
        assert_eq!(get_now(&q).await, None);
        // Zero delay is a plain add.
        q.add_after("now", Duration::ZERO);
        assert_eq!(q.len(), 1);
    }

    #[tokio::test]
    async fn shutdown_hands_out_queued_then_none_and_ignores_adds() {
        let q = plain::<u32>();
        q.add(1);
        q.add(2);
        q.add_after(3, Duration::from_millis(10));
        q.shutdown();
        assert!(q.is_shutting_down());
        q.add(4);
        assert_eq!(get_now(&q).await, Some(1));
        assert_eq!(get_now(&q).await, Some(2));
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(
            tokio::time::timeout(Duration::from_millis(200), q.get())
                .await
                .unwrap(),
            None,
            "delayed item dropped, add ignored"
        );
    }

    #[tokio::test]
    async fn shutdown_wakes_blocked_getter() {
        let q = plain::<u32>();
        let q2 = q.clone();
        let h = tokio::spawn(async move { q2.get().await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        q.shutdown();
        let got = tokio::time::timeout(Duration::from_secs(2), h)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got, None);
    }

    #[tokio::test]
    async fn drain_waits_for_processing_items() {
        let q = plain::<u32>();
        q.add(1);
        let item = get_now(&q).await.unwrap();
        let q2 = q.clone();
        let drained = tokio::spawn(async move { q2.shutdown_with_drain().await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !drained.is_finished(),
            "drain returned while an item was processing"
        );
        assert!(q.metrics().longest_running_processor_seconds > 0.04);
        q.done(&item);
        tokio::time::timeout(Duration::from_secs(2), drained)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(get_now(&q).await, None);
    }

    #[tokio::test]
    async fn metrics_render_upstream_names() {
        let q = plain::<u32>();
        q.add(1);
        q.add(2);
        q.add_after(3, Duration::from_secs(10));
        let m = q.metrics();
        assert_eq!((m.depth, m.adds, m.retries), (2, 2, 1));
        let text = m.render();
        assert!(text.contains("workqueue_depth{name=\"t\"} 2"), "{text}");
        assert!(text.contains("workqueue_adds_total{name=\"t\"} 2"));
        assert!(text.contains("workqueue_retries_total{name=\"t\"} 1"));
        assert!(text.contains("workqueue_queue_duration_seconds_count{name=\"t\"} 0"));
        assert!(text.contains("workqueue_work_duration_seconds_bucket{name=\"t\",le=\"+Inf\"} 0"));
    }

    #[tokio::test]
    async fn several_queues_share_each_metric_s_header() {
        let (a, b) = (WorkQueue::<u32>::new("a"), WorkQueue::<u32>::new("b"));
        a.add(1);
        let text = render_queues([&a.metrics(), &b.metrics()]);
        assert_eq!(
            text.matches("# TYPE workqueue_depth gauge").count(),
            1,
            "{text}"
        );
        assert_eq!(
            text.matches("# TYPE workqueue_queue_duration_seconds histogram")
                .count(),
            1
        );
        assert!(text.contains("workqueue_depth{name=\"a\"} 1\nworkqueue_depth{name=\"b\"} 0\n"));
    }
}
