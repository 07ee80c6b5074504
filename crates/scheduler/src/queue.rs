//! The scheduling queue (`internal/queue/scheduling_queue.go`): activeQ (a heap in
//! QueueSort order), backoffQ (ordered by backoff expiry; per-pod exponential backoff),
//! and the unschedulable pods map, with pods moved back on cluster events according
//! to the rejecting plugins' registered events and queueing hints. PreEnqueue plugins
//! (scheduling gates) keep pods out of activeQ. Also the nominator (pods nominated to
//! nodes by preemption).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use parking_lot::Mutex;

use crate::framework::{
    ClusterEvent, ClusterEventWithHint, EVENT_UNSCHEDULABLE_TIMEOUT, EventObject, Framework,
    Nominator, Plugin, QueueingHint,
};
use crate::types::{PodInfo, QueuedPodInfo, pod_key};

/// How long a pod may stay in the unschedulable map before it is retried anyway.
pub const POD_MAX_IN_UNSCHEDULABLE_DURATION: Duration = Duration::from_secs(5 * 60);

/// A source of time, so that tests can step it.
pub trait Clock: Send + Sync {
    fn now(&self) -> Instant;
}

/// The real clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealClock;
impl Clock for RealClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that moves only when told to.
#[derive(Debug)]
pub struct FakeClock(Mutex<Instant>);
impl FakeClock {
    pub fn new() -> Self {
        FakeClock(Mutex::new(Instant::now()))
    }
    pub fn step(&self, d: Duration) {
        *self.0.lock() += d;
    }
}
impl Default for FakeClock {
    fn default() -> Self {
        Self::new()
    }
}
impl Clock for FakeClock {
    fn now(&self) -> Instant {
        *self.0.lock()
    }
}

type Less = Arc<dyn Fn(&QueuedPodInfo, &QueuedPodInfo) -> bool + Send + Sync>;

/// A binary heap with removal and update by pod key.
struct KeyedHeap {
    items: Vec<QueuedPodInfo>,
    index: HashMap<String, usize>,
    less: Less,
}

impl KeyedHeap {
    fn new(less: Less) -> Self {
        KeyedHeap {
            items: Vec::new(),
            index: HashMap::new(),
            less,
        }
    }
    fn len(&self) -> usize {
        self.items.len()
    }
    fn contains(&self, k: &str) -> bool {
        self.index.contains_key(k)
    }
    fn get(&self, k: &str) -> Option<&QueuedPodInfo> {
        self.index.get(k).map(|i| &self.items[*i])
    }
    fn swap(&mut self, a: usize, b: usize) {
        self.items.swap(a, b);
        self.index.insert(self.items[a].pod_info.key(), a);
        self.index.insert(self.items[b].pod_info.key(), b);
    }
    fn up(&mut self, mut i: usize) {
        while i > 0 {
            let p = (i - 1) / 2;
            if (self.less)(&self.items[i], &self.items[p]) {
                self.swap(i, p);
                i = p;
            } else {
                break;
            }
        }
    }
    fn down(&mut self, mut i: usize) {
        loop {
            let l = 2 * i + 1;
            let r = l + 1;
            let mut m = i;
            if l < self.items.len() && (self.less)(&self.items[l], &self.items[m]) {
                m = l;
            }
            if r < self.items.len() && (self.less)(&self.items[r], &self.items[m]) {
                m = r;
            }
            if m == i {
                break;
            }
            self.swap(i, m);
            i = m;
        }
    }
    /// Adds or replaces.
    fn push(&mut self, q: QueuedPodInfo) {
        let k = q.pod_info.key();
        if let Some(&i) = self.index.get(&k) {
            self.items[i] = q;
            self.up(i);
            self.down(i);
            return;
        }
        self.items.push(q);
        let i = self.items.len() - 1;
        self.index.insert(k, i);
        self.up(i);
    }
    fn peek(&self) -> Option<&QueuedPodInfo> {
        self.items.first()
    }
    fn pop(&mut self) -> Option<QueuedPodInfo> {
        if self.items.is_empty() {
            return None;
        }
        let last = self.items.len() - 1;
        self.swap(0, last);
        let q = self.items.pop()?;
        self.index.remove(&q.pod_info.key());
        if !self.items.is_empty() {
            self.down(0);
        }
        Some(q)
    }
    fn remove(&mut self, k: &str) -> Option<QueuedPodInfo> {
        let i = *self.index.get(k)?;
        let last = self.items.len() - 1;
        self.swap(i, last);
        let q = self.items.pop()?;
        self.index.remove(k);
        if i < self.items.len() {
            self.up(i);
            self.down(i);
        }
        Some(q)
    }
}

struct Inner {
    active: KeyedHeap,
    backoff: KeyedHeap,
    unschedulable: HashMap<String, QueuedPodInfo>,
    in_flight: HashSet<String>,
    scheduling_cycle: u64,
    move_request_cycle: u64,
    nominated: HashMap<String, Vec<Arc<PodInfo>>>,
    nominated_node_of: HashMap<String, String>,
    closed: bool,
}

/// Where a pod is in the queue (tests, debugging).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueLocation {
    Active,
    Backoff,
    Unschedulable,
    Gated,
    InFlight,
    Absent,
}

/// Queue sizes, for the pending pods metric.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PendingPods {
    pub active: usize,
    pub backoff: usize,
    pub unschedulable: usize,
    pub gated: usize,
}

/// Backoff parameters.
#[derive(Debug, Clone, Copy)]
pub struct BackoffConfig {
    pub initial: Duration,
    pub max: Duration,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        BackoffConfig {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(10),
        }
    }
}

/// `calculateBackoffDuration`: initial * 2^(attempts-1), capped at max.
pub fn backoff_duration(cfg: BackoffConfig, attempts: u32) -> Duration {
    let mut d = cfg.initial;
    for _ in 1..attempts {
        d = d.saturating_mul(2);
        if d > cfg.max {
            return cfg.max;
        }
    }
    d.min(cfg.max)
}

/// The priority queue of pods waiting to be scheduled.
pub struct SchedulingQueue {
    inner: Mutex<Inner>,
    notify: tokio::sync::Notify,
    clock: Arc<dyn Clock>,
    backoff: BackoffConfig,
    /// PreEnqueue plugins per profile (scheduler name).
    pre_enqueue: HashMap<String, Vec<Arc<dyn Plugin>>>,
    /// Registered events of every plugin (all profiles), by plugin name.
    events: HashMap<String, Vec<ClusterEventWithHint>>,
}

impl std::fmt::Debug for SchedulingQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchedulingQueue")
            .field("pending", &self.pending())
            .finish()
    }
}

fn backoff_expiry(cfg: BackoffConfig, q: &QueuedPodInfo) -> Instant {
    q.timestamp + backoff_duration(cfg, q.attempts)
}

impl SchedulingQueue {
    /// A queue sorted by the first profile's QueueSort plugin (all profiles must use
    /// the same one, as upstream requires).
    pub fn new(
        frameworks: &[Arc<Framework>],
        backoff: BackoffConfig,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let sort = frameworks.first().map(|f| f.queue_sort());
        let less: Less = match sort {
            Some(p) => Arc::new(move |a, b| p.queue_sort().expect("queue sort plugin").less(a, b)),
            None => Arc::new(|a: &QueuedPodInfo, b: &QueuedPodInfo| a.timestamp < b.timestamp),
        };
        let bo = backoff;
        let backoff_less: Less =
            Arc::new(move |a, b| backoff_expiry(bo, a) < backoff_expiry(bo, b));
        let mut pre_enqueue = HashMap::new();
        let mut events: HashMap<String, Vec<ClusterEventWithHint>> = HashMap::new();
        for f in frameworks {
            pre_enqueue.insert(f.profile_name.clone(), f.pre_enqueue_plugins());
            for (name, ev) in f.events_to_register() {
                events.entry(name).or_insert(ev);
            }
        }
        SchedulingQueue {
            inner: Mutex::new(Inner {
                active: KeyedHeap::new(less),
                backoff: KeyedHeap::new(backoff_less),
                unschedulable: HashMap::new(),
                in_flight: HashSet::new(),
                scheduling_cycle: 0,
                move_request_cycle: 0,
                nominated: HashMap::new(),
                nominated_node_of: HashMap::new(),
                closed: false,
            }),
            notify: tokio::sync::Notify::new(),
            clock,
            backoff,
            pre_enqueue,
            events,
        }
    }

    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    fn run_pre_enqueue(&self, q: &mut QueuedPodInfo) -> bool {
        let sched = q
            .pod()
            .spec
            .as_ref()
            .and_then(|s| s.scheduler_name.clone())
            .unwrap_or_else(|| crate::config::DEFAULT_SCHEDULER_NAME.into());
        for p in self.pre_enqueue.get(&sched).into_iter().flatten() {
            if let Some(pe) = p.pre_enqueue() {
                let s = pe.pre_enqueue(q.pod());
                if !s.is_success() {
                    q.gated = true;
                    q.gating_plugin = Some(p.name().to_string());
                    q.unschedulable_plugins.insert(p.name().to_string());
                    return false;
                }
            }
        }
        q.gated = false;
        q.gating_plugin = None;
        true
    }

    /// Moves `q` to activeQ unless a PreEnqueue plugin gates it (then it waits in the
    /// unschedulable map). Returns whether it went to activeQ.
    fn move_to_active(&self, inner: &mut Inner, mut q: QueuedPodInfo) -> bool {
        let k = q.pod_info.key();
        inner.backoff.remove(&k);
        inner.unschedulable.remove(&k);
        if !self.run_pre_enqueue(&mut q) {
            inner.unschedulable.insert(k, q);
            return false;
        }
        if q.initial_attempt_timestamp.is_none() {
            q.initial_attempt_timestamp = Some(q.timestamp);
        }
        inner.active.push(q);
        self.notify.notify_one();
        true
    }

    fn update_nomination(inner: &mut Inner, pi: &Arc<PodInfo>, node: Option<&str>) {
        let k = pi.key();
        if let Some(old) = inner.nominated_node_of.remove(&k)
            && let Some(v) = inner.nominated.get_mut(&old)
        {
            v.retain(|p| p.key() != k);
            if v.is_empty() {
                inner.nominated.remove(&old);
            }
        }
        if let Some(n) = node.filter(|n| !n.is_empty()) {
            inner.nominated_node_of.insert(k, n.to_string());
            inner
                .nominated
                .entry(n.to_string())
                .or_default()
                .push(pi.clone());
        }
    }

    fn status_nominated(pod: &Pod) -> Option<&str> {
        pod.status
            .as_ref()
            .and_then(|s| s.nominated_node_name.as_deref())
    }

    /// `Add`: a new unscheduled pod.
    pub fn add(&self, pod: Arc<Pod>) {
        let q = QueuedPodInfo::new(pod, self.now());
        let mut inner = self.inner.lock();
        if let Some(n) = Self::status_nominated(q.pod()) {
            let n = n.to_string();
            Self::update_nomination(&mut inner, &q.pod_info, Some(&n));
        }
        self.move_to_active(&mut inner, q);
    }

    /// `Update`: an unscheduled pod changed.
    pub fn update(&self, new: Arc<Pod>) {
        let k = pod_key(&new);
        let now = self.now();
        let mut inner = self.inner.lock();
        let fresh = Arc::new(PodInfo::new(new.clone()));
        if inner.nominated_node_of.contains_key(&k) || Self::status_nominated(&new).is_some() {
            let n = Self::status_nominated(&new)
                .map(str::to_string)
                .or_else(|| inner.nominated_node_of.get(&k).cloned());
            Self::update_nomination(&mut inner, &fresh, n.as_deref());
        }
        if let Some(mut q) = inner.active.get(&k).cloned() {
            q.pod_info = fresh;
            inner.active.push(q);
            return;
        }
        if let Some(mut q) = inner.backoff.get(&k).cloned() {
            q.pod_info = fresh;
            inner.backoff.push(q);
            return;
        }
        if let Some(mut q) = inner.unschedulable.remove(&k) {
            let spec_changed =
                q.pod().spec != new.spec || q.pod().metadata.labels != new.metadata.labels;
            q.pod_info = fresh;
            if q.gated {
                // Re-run PreEnqueue: lifting the last gate releases the pod.
                q.timestamp = now;
                self.move_to_active(&mut inner, q);
            } else if spec_changed {
                if self.is_backing_off(&q, now) {
                    inner.backoff.push(q);
                } else {
                    self.move_to_active(&mut inner, q);
                }
            } else {
                inner.unschedulable.insert(k, q);
            }
            return;
        }
        if inner.in_flight.contains(&k) {
            return;
        }
        let q = QueuedPodInfo::new(new, now);
        self.move_to_active(&mut inner, q);
    }

    /// `Delete`: the pod is gone (or got bound).
    pub fn delete(&self, pod: &Pod) {
        let k = pod_key(pod);
        let mut inner = self.inner.lock();
        inner.active.remove(&k);
        inner.backoff.remove(&k);
        inner.unschedulable.remove(&k);
        Self::update_nomination(
            &mut inner,
            &Arc::new(PodInfo::new(Arc::new(pod.clone()))),
            None,
        );
    }

    fn is_backing_off(&self, q: &QueuedPodInfo, now: Instant) -> bool {
        backoff_expiry(self.backoff, q) > now
    }

    /// `Pop` without waiting.
    pub fn try_pop(&self) -> Option<QueuedPodInfo> {
        let mut inner = self.inner.lock();
        let mut q = inner.active.pop()?;
        q.attempts += 1;
        inner.scheduling_cycle += 1;
        inner.in_flight.insert(q.pod_info.key());
        Some(q)
    }

    /// `Pop`: waits for a pod; `None` once closed.
    pub async fn pop(&self) -> Option<QueuedPodInfo> {
        loop {
            if self.inner.lock().closed {
                return None;
            }
            if let Some(q) = self.try_pop() {
                return Some(q);
            }
            self.notify.notified().await;
        }
    }

    /// The scheduling cycle of the last pop.
    pub fn scheduling_cycle(&self) -> u64 {
        self.inner.lock().scheduling_cycle
    }

    /// `Done`: the pod's scheduling attempt finished.
    pub fn done(&self, key: &str) {
        self.inner.lock().in_flight.remove(key);
    }

    /// `AddUnschedulableIfNotPresent`: a pod that failed its attempt in
    /// `pod_cycle`. Pods rejected by no plugin (errors), or for which a move request
    /// arrived while they were being scheduled, go to backoffQ; others wait in the
    /// unschedulable map for a relevant event.
    pub fn add_unschedulable_if_not_present(&self, mut q: QueuedPodInfo, pod_cycle: u64) {
        let k = q.pod_info.key();
        let now = self.now();
        let mut inner = self.inner.lock();
        inner.in_flight.remove(&k);
        if inner.active.contains(&k)
            || inner.backoff.contains(&k)
            || inner.unschedulable.contains_key(&k)
        {
            return;
        }
        q.timestamp = now;
        if let Some(n) = Self::status_nominated(q.pod()) {
            let n = n.to_string();
            let pi = q.pod_info.clone();
            Self::update_nomination(&mut inner, &pi, Some(&n));
        }
        let no_rejector = q.unschedulable_plugins.is_empty() && q.pending_plugins.is_empty();
        if no_rejector || inner.move_request_cycle >= pod_cycle {
            inner.backoff.push(q);
        } else {
            inner.unschedulable.insert(k, q);
        }
    }

    /// Puts a pod back right away after a scheduling error (to backoffQ).
    pub fn requeue_after_error(&self, mut q: QueuedPodInfo) {
        q.unschedulable_plugins.clear();
        q.pending_plugins.clear();
        let cycle = self.scheduling_cycle();
        self.add_unschedulable_if_not_present(q, cycle);
    }

    /// `flushBackoffQCompleted`: backoffQ pods whose backoff expired go to activeQ.
    pub fn flush_backoff_completed(&self) {
        let now = self.now();
        let mut inner = self.inner.lock();
        while let Some(head) = inner.backoff.peek() {
            if backoff_expiry(self.backoff, head) > now {
                break;
            }
            let q = inner.backoff.pop().expect("peeked");
            self.move_to_active(&mut inner, q);
        }
    }

    /// `flushUnschedulablePodsLeftover`: pods unschedulable for longer than 5 minutes
    /// are retried.
    pub fn flush_unschedulable_left_over(&self) {
        let now = self.now();
        let stale: Vec<String> = {
            let inner = self.inner.lock();
            inner
                .unschedulable
                .iter()
                .filter(|(_, q)| {
                    !q.gated && now.duration_since(q.timestamp) > POD_MAX_IN_UNSCHEDULABLE_DURATION
                })
                .map(|(k, _)| k.clone())
                .collect()
        };
        if !stale.is_empty() {
            let mut inner = self.inner.lock();
            let qs: Vec<QueuedPodInfo> = stale
                .iter()
                .filter_map(|k| inner.unschedulable.remove(k))
                .collect();
            self.requeue(&mut inner, qs, now);
        }
    }

    fn requeue(&self, inner: &mut Inner, qs: Vec<QueuedPodInfo>, now: Instant) {
        for q in qs {
            if self.is_backing_off(&q, now) {
                inner.backoff.push(q);
            } else {
                self.move_to_active(inner, q);
            }
        }
    }

    fn hint(
        &self,
        q: &QueuedPodInfo,
        event: &ClusterEvent,
        old: EventObject<'_>,
        new: EventObject<'_>,
    ) -> bool {
        if *event == EVENT_UNSCHEDULABLE_TIMEOUT || event.label == "ForceActivate" {
            return true;
        }
        let rejectors: Vec<&String> = q
            .unschedulable_plugins
            .iter()
            .chain(q.pending_plugins.iter())
            .collect();
        if rejectors.is_empty() {
            return true;
        }
        rejectors.into_iter().any(|plugin| {
            self.events.get(plugin).into_iter().flatten().any(|reg| {
                reg.event.covers(event)
                    && reg
                        .hint
                        .as_ref()
                        .is_none_or(|h| h(q.pod(), old, new) == QueueingHint::Queue)
            })
        })
    }

    /// `MoveAllToActiveOrBackoffQueue`: unschedulable pods for which `event` may help
    /// (per their rejecting plugins' registered events and hints) are retried.
    pub fn move_all_to_active_or_backoff(
        &self,
        event: ClusterEvent,
        old: EventObject<'_>,
        new: EventObject<'_>,
    ) {
        let now = self.now();
        let mut inner = self.inner.lock();
        inner.move_request_cycle = inner.scheduling_cycle;
        let keys: Vec<String> = inner
            .unschedulable
            .iter()
            .filter(|(_, q)| !q.gated && self.hint(q, &event, old, new))
            .map(|(k, _)| k.clone())
            .collect();
        let qs: Vec<QueuedPodInfo> = keys
            .iter()
            .filter_map(|k| inner.unschedulable.remove(k))
            .collect();
        self.requeue(&mut inner, qs, now);
    }

    /// Moves the named pods to activeQ now (`Activate`).
    pub fn activate(&self, keys: &[String]) {
        let mut inner = self.inner.lock();
        for k in keys {
            let q = inner
                .unschedulable
                .remove(k)
                .or_else(|| inner.backoff.remove(k));
            if let Some(q) = q {
                self.move_to_active(&mut inner, q);
            }
        }
    }

    /// Records that preemption nominated `pod` to `node` (or clears it with `None`).
    pub fn set_nominated(&self, pi: &Arc<PodInfo>, node: Option<&str>) {
        let mut inner = self.inner.lock();
        Self::update_nomination(&mut inner, pi, node);
    }

    pub fn location(&self, key: &str) -> QueueLocation {
        let inner = self.inner.lock();
        if inner.active.contains(key) {
            QueueLocation::Active
        } else if inner.backoff.contains(key) {
            QueueLocation::Backoff
        } else if let Some(q) = inner.unschedulable.get(key) {
            if q.gated {
                QueueLocation::Gated
            } else {
                QueueLocation::Unschedulable
            }
        } else if inner.in_flight.contains(key) {
            QueueLocation::InFlight
        } else {
            QueueLocation::Absent
        }
    }

    pub fn pending(&self) -> PendingPods {
        let inner = self.inner.lock();
        let gated = inner.unschedulable.values().filter(|q| q.gated).count();
        PendingPods {
            active: inner.active.len(),
            backoff: inner.backoff.len(),
            unschedulable: inner.unschedulable.len() - gated,
            gated,
        }
    }

    /// Stops [`pop`](Self::pop) waiters.
    pub fn close(&self) {
        self.inner.lock().closed = true;
        self.notify.notify_waiters();
        self.notify.notify_one();
    }
}

impl Nominator for SchedulingQueue {
    fn nominated_pods_for_node(&self, node: &str) -> Vec<Arc<PodInfo>> {
        self.inner
            .lock()
            .nominated
            .get(node)
            .cloned()
            .unwrap_or_default()
    }
    fn has_nominated_pods(&self) -> bool {
        !self.inner.lock().nominated.is_empty()
    }
}
