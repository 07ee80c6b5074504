//! A priority level's seats and queues at run time (upstream
//! `fairqueuing/queueset`): requests take as many seats as their work estimate says
//! ([`WorkEstimate`]); a level's queues are served by virtual-time fair queuing. The
//! level's virtual clock R advances at the rate each active queue would be served at
//! (its seats shared among the queues with requests waiting or executing); each queue
//! has the R at which it may dispatch next, raised by the work of each request it
//! dispatches (its seats times 3 ms, plus its final seats times their extra latency) and
//! corrected by the work the request turned out to take. The next seat goes to the
//! waiting head whose queue would finish it first in virtual time. A request waits
//! while its seats do not fit, unless nothing runs at all. A request with final seats
//! (a write watched by many) holds them for its extra latency after it finishes.
//!
//! The clock is wound back by half its range (an epoch advance) before it could
//! overflow, with the queues' and waiters' virtual times, as upstream winds it.
//!
//! Deviation: a level's queues beyond a lowered queue count are removed once idle from
//! the end, not from the middle.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::borrowing::{DemandStats, SeatDemand};
use super::metrics::{DispatchTimes, FlowControlMetrics, RejectReason};
use super::{LevelSpec, Tracked, deal_hand};

/// Upstream's `estimatedServiceDuration`: the service time charged to each initial seat
/// of a request when it is dispatched, corrected when it finishes.
const ESTIMATED_SERVICE: Duration = Duration::from_millis(3);

/// How many seats a request takes, and for how long after it finishes it keeps its
/// final seats (upstream `request.WorkEstimate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct WorkEstimate {
    pub initial_seats: u32,
    pub final_seats: u32,
    pub additional_latency: Duration,
}

impl WorkEstimate {
    pub(super) const ONE_SEAT: WorkEstimate = WorkEstimate {
        initial_seats: 1,
        final_seats: 0,
        additional_latency: Duration::ZERO,
    };

    pub(super) fn max_seats(&self) -> u32 {
        self.initial_seats.max(self.final_seats)
    }
}

/// Virtual work in upstream's fixed point: 10⁻⁸ seat-seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct SeatSeconds(i64);

impl SeatSeconds {
    const SCALE: f64 = 1e8;

    pub(super) fn of(seats: f64, duration: Duration) -> SeatSeconds {
        SeatSeconds((seats * duration.as_secs_f64() * Self::SCALE).round() as i64)
    }

    /// Upstream's `SeatSeconds.String()`: `12.34567890ss`.
    pub(super) fn display(self) -> String {
        let scale = Self::SCALE as i64;
        let v = self.0.max(0);
        format!("{}.{:08}ss", v / scale, v % scale)
    }

    fn as_f64(self) -> f64 {
        self.0 as f64 / Self::SCALE
    }

    fn add(self, o: SeatSeconds) -> SeatSeconds {
        SeatSeconds(self.0.saturating_add(o.0))
    }

    fn sub(self, o: SeatSeconds) -> SeatSeconds {
        SeatSeconds(self.0.saturating_sub(o.0))
    }
}

/// Upstream's `rDecrement` and `highR`: how far R is wound back at an epoch advance,
/// and the R that triggers one. Upstream's fixed point is unsigned, so these are half
/// its; the time to reach them at a level's full rate is still years.
const R_DECREMENT: SeatSeconds = SeatSeconds(i64::MAX / 2);
const HIGH_R: SeatSeconds = SeatSeconds(R_DECREMENT.0 + R_DECREMENT.0 / 2);

/// A work estimate with the virtual work it is charged.
#[derive(Debug, Clone, Copy)]
struct Work {
    estimate: WorkEstimate,
    /// Initial and final work.
    total: SeatSeconds,
}

impl Work {
    fn of(estimate: WorkEstimate) -> Work {
        let initial = SeatSeconds::of(f64::from(estimate.initial_seats), ESTIMATED_SERVICE);
        let finals = SeatSeconds::of(f64::from(estimate.final_seats), estimate.additional_latency);
        Work {
            estimate,
            total: initial.add(finals),
        }
    }

    fn max_seats(&self) -> u32 {
        self.estimate.max_seats()
    }
}

/// A request waiting in a queue for its seats.
pub(super) struct Waiter {
    pub id: u64,
    grant: oneshot::Sender<()>,
    pub request: Tracked,
    work: Work,
    /// The level's R when it arrived: its queue never dispatches before that.
    arrival_r: SeatSeconds,
}

/// A request holding seats.
pub(super) struct Running {
    /// The queue it waited in (none for a level without queues).
    pub queue: Option<usize>,
    pub request: Tracked,
    work: Work,
    started: Instant,
}

/// One queue of a level.
#[derive(Default)]
pub(super) struct Queue {
    pub waiting: VecDeque<Waiter>,
    /// The R at which it may next dispatch.
    pub next_dispatch_r: SeatSeconds,
    /// Its requests executing, and the seats they (and those in their final phase)
    /// hold.
    pub executing: u32,
    pub seats_in_use: u32,
    /// Sums over its waiting requests.
    pub initial_seats_sum: u32,
    pub max_seats_sum: u32,
    pub total_work_sum: SeatSeconds,
}

impl Queue {
    fn idle(&self) -> bool {
        self.waiting.is_empty() && self.executing == 0
    }

    fn push(&mut self, waiter: Waiter) {
        self.note_waiter(&waiter.work, true);
        self.waiting.push_back(waiter);
    }

    fn note_waiter(&mut self, work: &Work, added: bool) {
        let (seats, max) = (work.estimate.initial_seats, work.max_seats());
        if added {
            self.initial_seats_sum += seats;
            self.max_seats_sum += max;
            self.total_work_sum = self.total_work_sum.add(work.total);
        } else {
            self.initial_seats_sum = self.initial_seats_sum.saturating_sub(seats);
            self.max_seats_sum = self.max_seats_sum.saturating_sub(max);
            self.total_work_sum = self.total_work_sum.sub(work.total);
        }
    }

    /// The head, out of the queue.
    fn pop(&mut self) -> Option<Waiter> {
        let waiter = self.waiting.pop_front()?;
        self.note_waiter(&waiter.work, false);
        Some(waiter)
    }

    /// Upstream `boundNextDispatchLocked`: a queue never dispatches its head before
    /// the R at which the head arrived.
    fn bound_next_dispatch(&mut self) {
        if let Some(head) = self.waiting.front() {
            self.next_dispatch_r = self.next_dispatch_r.max(head.arrival_r);
        }
    }
}

/// Where [`admit_to`] left a request.
pub(super) enum Step {
    Admitted,
    Rejected,
    Queued(oneshot::Receiver<()>),
}

/// Final seats a finished request still holds, to be given back after `after`
/// ([`Level::release`]). Its level stays while they are held (a level goes only when
/// idle), so the release always finds it.
#[must_use]
pub(super) struct HeldSeats {
    pub after: Duration,
    queue: Option<usize>,
    seats: u32,
    flow_schema: Arc<str>,
}

/// What [`Level::finish`] found.
pub(super) enum Finished {
    /// The request was not executing here (it may still wait in a queue).
    NotHere,
    Done,
    /// Done, but holding its final seats: give them back with [`Level::release`] after
    /// `after`.
    Holding(HeldSeats),
}

/// A level at run time: its executing requests, its queues and its virtual clock.
/// Kept across configuration changes while the level exists.
pub(super) struct Level {
    pub name: Arc<str>,
    pub spec: LevelSpec,
    pub queues: Vec<Queue>,
    /// By request id.
    pub running: HashMap<u64, Running>,
    /// Seats held (by executing requests and final phases), and wanted by waiters.
    seats_in_use: u32,
    seats_waiting: u32,
    waiting_count: usize,
    /// The virtual clock, and the real time it was last advanced to.
    current_r: SeatSeconds,
    last_real: Instant,
    /// Where the search for the queue to dispatch from starts next.
    robin_index: usize,
    /// Enqueues so far: where in a hand the search for the shortest queue starts.
    enqueues: usize,
    /// The seats it may use now: set by each borrowing adjustment, between its lower
    /// and upper bounds.
    pub current: u32,
    /// Its seat demand since the last adjustment, and as the adjustments saw it.
    pub demand: SeatDemand,
    pub demand_stats: DemandStats,
    /// Totals since the level was made, for `dump_priority_levels`.
    pub dispatched: u64,
    pub rejected: u64,
    /// Refused after waiting in a queue (upstream counts these in both).
    pub cancelled: u64,
    /// Its configuration is gone: it serves what it holds and queues, no new request
    /// comes to it, and it goes once idle.
    pub quiescing: bool,
}

impl Level {
    pub(super) fn new(name: Arc<str>, spec: LevelSpec) -> Level {
        let queues = spec.queuing.map_or(0, |q| q.queues);
        let current = spec.bounds.initial();
        let now = Instant::now();
        Level {
            name,
            spec,
            queues: (0..queues).map(|_| Queue::default()).collect(),
            running: HashMap::new(),
            seats_in_use: 0,
            seats_waiting: 0,
            waiting_count: 0,
            current_r: SeatSeconds::default(),
            last_real: now,
            robin_index: 0,
            enqueues: 0,
            current,
            demand: SeatDemand::new(now),
            demand_stats: DemandStats::default(),
            dispatched: 0,
            rejected: 0,
            cancelled: 0,
            quiescing: false,
        }
    }

    /// Nothing waits, runs or holds seats.
    pub(super) fn idle(&self) -> bool {
        self.running.is_empty() && self.waiting_count == 0 && self.seats_in_use == 0
    }

    #[cfg(test)]
    pub(super) fn executing(&self) -> u32 {
        u32::try_from(self.running.len()).unwrap_or(u32::MAX)
    }

    pub(super) fn waiting(&self) -> usize {
        self.waiting_count
    }

    fn note_demand(&mut self) {
        self.note_demand_at(Instant::now());
    }

    fn note_demand_at(&mut self, now: Instant) {
        let demand = self.seats_in_use + self.seats_waiting;
        self.demand.set(f64::from(demand), now);
    }

    /// Upstream `syncTimeLocked`: R advances at the seats the active queues could use
    /// (at most the level's), shared among them.
    fn sync_time(&mut self, m: &FlowControlMetrics) {
        // Without queues (exempt, or refusing rather than queuing) R stays at 0, which
        // the gauge was set to when the level was made.
        if self.queues.is_empty() {
            return;
        }
        self.advance_r();
        if self.current_r >= HIGH_R {
            let success = self.advance_epoch();
            m.epoch_advanced(&self.name, success);
        }
        m.current_r(&self.name, self.current_r.as_f64());
    }

    /// Upstream `advanceEpoch`: winds R and the virtual times of the queues in use and
    /// of their waiters back by [`R_DECREMENT`]; an idle queue's is reset, as its next
    /// request sets it from R anyway. `false` when a time would have gone below zero
    /// (upstream's unsigned times would have wrapped; here they go negative, which
    /// orders them as before).
    fn advance_epoch(&mut self) -> bool {
        self.current_r = self.current_r.sub(R_DECREMENT);
        let mut success = true;
        for queue in &mut self.queues {
            if queue.idle() {
                queue.next_dispatch_r = SeatSeconds::default();
                continue;
            }
            queue.next_dispatch_r = queue.next_dispatch_r.sub(R_DECREMENT);
            success &= queue.next_dispatch_r.0 >= 0;
            for waiter in &mut queue.waiting {
                waiter.arrival_r = waiter.arrival_r.sub(R_DECREMENT);
                success &= waiter.arrival_r.0 >= 0;
            }
        }
        success
    }

    fn advance_r(&mut self) {
        let now = Instant::now();
        let elapsed = now.saturating_duration_since(self.last_real);
        self.last_real = now;
        let (mut active, mut requested) = (0u32, 0u64);
        for q in &self.queues {
            requested += u64::from(q.seats_in_use) + u64::from(q.max_seats_sum);
            if !q.idle() {
                active += 1;
            }
        }
        if active == 0 {
            return;
        }
        let ratio = (requested as f64).min(f64::from(self.current)) / f64::from(active);
        self.current_r = self.current_r.add(SeatSeconds::of(ratio, elapsed));
    }

    /// Upstream `canAccommodateSeatsLocked`.
    fn can_accommodate(&self, seats: u32) -> bool {
        if self.spec.bounds.exempt {
            return true;
        }
        if seats > self.current {
            // It can never fit: it runs once nothing else does.
            return self.running.is_empty();
        }
        self.seats_in_use + seats <= self.current
    }

    /// Starts `request` executing, from `queue` if it waited in one.
    fn start(
        &mut self,
        id: u64,
        queue: Option<usize>,
        mut request: Tracked,
        work: Work,
        m: &FlowControlMetrics,
    ) {
        request.started = Some(jiff::Timestamp::now());
        let seats = work.max_seats();
        m.dispatched(&request.flow_schema, &self.name);
        m.executing(&request.flow_schema, &self.name, 1.0, f64::from(seats));
        self.dispatched += 1;
        self.seats_in_use += seats;
        if let Some(q) = queue.and_then(|q| self.queues.get_mut(q)) {
            q.executing += 1;
            q.seats_in_use += seats;
        }
        let now = Instant::now();
        self.running.insert(
            id,
            Running {
                queue,
                request,
                work,
                started: now,
            },
        );
        self.note_demand_at(now);
    }

    /// Counts a waiter out of its queue.
    fn left_queue(&mut self, waiter: &Waiter, m: &FlowControlMetrics) {
        let seats = waiter.work.max_seats();
        self.waiting_count -= 1;
        self.seats_waiting = self.seats_waiting.saturating_sub(seats);
        m.waiting(
            &waiter.request.flow_schema,
            &self.name,
            -1.0,
            -f64::from(seats),
        );
    }

    fn refused_after_waiting(&mut self, flow_schema: &str, m: &FlowControlMetrics) {
        self.rejected += 1;
        self.cancelled += 1;
        m.rejected(flow_schema, &self.name, RejectReason::TimeOut);
    }

    /// Upstream `findDispatchQueueToBoundLocked`: the queue whose head would finish
    /// first in virtual time, searched round-robin from after the last one; `None`
    /// when no queue has a waiter or that head's seats do not fit.
    fn dispatch_queue(&mut self, m: &FlowControlMetrics) -> Option<usize> {
        let n = self.queues.len();
        let mut best: Option<(SeatSeconds, usize)> = None;
        let (mut s_min, mut s_max) = (f64::MAX, f64::MIN);
        let (mut ds_min, mut ds_max) = (f64::MAX, f64::MIN);
        for _ in 0..n {
            self.robin_index = (self.robin_index + 1) % n;
            let q = &self.queues[self.robin_index];
            if let Some(head) = q.waiting.front() {
                let s = q.next_dispatch_r.as_f64();
                let in_progress = SeatSeconds::of(f64::from(q.seats_in_use), ESTIMATED_SERVICE);
                let ds = s - in_progress.as_f64();
                (s_min, s_max) = (s_min.min(s), s_max.max(s));
                (ds_min, ds_max) = (ds_min.min(ds), ds_max.max(ds));
                let finish = q.next_dispatch_r.add(head.work.total);
                if best.is_none_or(|(f, _)| finish < f) {
                    best = Some((finish, self.robin_index));
                }
            }
        }
        let (_, q) = best?;
        let head = self.queues[q].waiting.front()?;
        if !self.can_accommodate(head.work.max_seats()) {
            m.not_accommodated(&head.request.flow_schema, &self.name);
            return None;
        }
        m.dispatch_times(
            &self.name,
            &DispatchTimes {
                r: self.current_r.as_f64(),
                s: self.queues[q].next_dispatch_r.as_f64(),
                s_bounds: (s_min, s_max),
                discounted_s_bounds: (ds_min, ds_max),
            },
        );
        self.robin_index = q;
        Some(q)
    }

    /// Upstream `dispatchAsMuchAsPossibleLocked`: hands free seats to waiters.
    pub(super) fn dispatch(&mut self, m: &FlowControlMetrics) {
        while self.waiting_count > 0 && self.seats_in_use < self.current {
            let Some(q) = self.dispatch_queue(m) else {
                break;
            };
            let Some(mut waiter) = self.queues[q].pop() else {
                break;
            };
            self.left_queue(&waiter, m);
            // Final seats over the level's limit are spread over a longer latency.
            let est = &mut waiter.work.estimate;
            if est.final_seats > self.current && self.current > 0 {
                let final_work =
                    SeatSeconds::of(f64::from(est.final_seats), est.additional_latency);
                est.final_seats = self.current;
                est.additional_latency = Duration::from_secs_f64(
                    final_work.0.max(0) as f64 / SeatSeconds::SCALE / f64::from(self.current),
                );
            }
            let queue = &mut self.queues[q];
            queue.next_dispatch_r = queue.next_dispatch_r.add(waiter.work.total);
            queue.bound_next_dispatch();
            let Waiter {
                id,
                grant,
                request,
                work,
                ..
            } = waiter;
            if grant.send(()).is_ok() {
                self.start(id, Some(q), request, work, m);
            } else {
                // Its request was dropped (the client went away) just now, before it
                // could take itself out of the queue.
                self.refused_after_waiting(&request.flow_schema, m);
            }
        }
        self.note_demand();
    }

    /// Ends an executing request and gives its seats on, or keeps its final seats.
    pub(super) fn finish(&mut self, id: u64, m: &FlowControlMetrics) -> Finished {
        self.sync_time(m);
        let Some(Running {
            queue,
            request,
            work,
            started,
        }) = self.running.remove(&id)
        else {
            return Finished::NotHere;
        };
        if let Some(q) = queue.and_then(|q| self.queues.get_mut(q)) {
            q.executing = q.executing.saturating_sub(1);
            // The initial work charged at dispatch, corrected by the time it took.
            let charged = ESTIMATED_SERVICE.as_secs_f64();
            let took = started.elapsed().as_secs_f64();
            let correction = SeatSeconds(
                (f64::from(work.estimate.initial_seats) * (charged - took) * SeatSeconds::SCALE)
                    .round() as i64,
            );
            q.next_dispatch_r = q.next_dispatch_r.sub(correction);
            q.bound_next_dispatch();
        }
        let (seats, after) = (work.max_seats(), work.estimate.additional_latency);
        if after.is_zero() {
            m.executing(&request.flow_schema, &self.name, -1.0, -f64::from(seats));
            self.give_back(queue, seats);
            self.dispatch(m);
            return Finished::Done;
        }
        m.executing(&request.flow_schema, &self.name, -1.0, 0.0);
        self.dispatch(m);
        Finished::Holding(HeldSeats {
            after,
            queue,
            seats,
            flow_schema: request.flow_schema,
        })
    }

    /// Gives back the final seats of a finished request, and serves what they let
    /// through.
    pub(super) fn release(&mut self, held: HeldSeats, m: &FlowControlMetrics) {
        self.sync_time(m);
        m.executing(&held.flow_schema, &self.name, 0.0, -f64::from(held.seats));
        self.give_back(held.queue, held.seats);
        self.dispatch(m);
    }

    fn give_back(&mut self, queue: Option<usize>, seats: u32) {
        self.seats_in_use = self.seats_in_use.saturating_sub(seats);
        if let Some(q) = queue.and_then(|q| self.queues.get_mut(q)) {
            q.seats_in_use = q.seats_in_use.saturating_sub(seats);
        }
        self.remove_idle_surplus_queues();
    }

    /// Takes a request that gave up (its wait ran out, or its client went away) out of
    /// its queue, refused; false if it was not waiting here.
    pub(super) fn withdraw(&mut self, id: u64, m: &FlowControlMetrics) -> bool {
        self.sync_time(m);
        let Some((q, i)) = self
            .queues
            .iter()
            .enumerate()
            .find_map(|(q, queue)| Some((q, queue.waiting.iter().position(|w| w.id == id)?)))
        else {
            return false;
        };
        let queue = &mut self.queues[q];
        let Some(waiter) = queue.waiting.remove(i) else {
            return false;
        };
        queue.note_waiter(&waiter.work, false);
        queue.bound_next_dispatch();
        self.left_queue(&waiter, m);
        self.refused_after_waiting(&waiter.request.flow_schema, m);
        self.note_demand();
        true
    }

    /// The configured queue count changed: more queues are added at once; surplus ones
    /// go when idle.
    pub(super) fn resize_queues(&mut self) {
        let wanted = self.spec.queuing.map_or(0, |q| q.queues);
        while self.queues.len() < wanted {
            self.queues.push(Queue::default());
        }
        self.remove_idle_surplus_queues();
    }

    fn remove_idle_surplus_queues(&mut self) {
        let wanted = self.spec.queuing.map_or(0, |q| q.queues);
        while self.queues.len() > wanted
            && self
                .queues
                .last()
                .is_some_and(|q| q.idle() && q.seats_in_use == 0)
        {
            self.queues.pop();
        }
        if !self.queues.is_empty() {
            self.robin_index %= self.queues.len();
        }
    }
}

/// A request's first turn at its level (upstream `StartRequest`): seats now (always,
/// for an exempt level), a place in a queue, or a refusal (counted). `hash` picks the
/// request's hand of queues.
pub(super) fn admit_to(
    level: &mut Level,
    id: u64,
    request: Tracked,
    estimate: WorkEstimate,
    hash: u64,
    m: &FlowControlMetrics,
) -> Step {
    level.sync_time(m);
    let work = Work::of(estimate);
    let Some(queuing) = level.spec.queuing else {
        if level.can_accommodate(work.max_seats()) {
            level.start(id, None, request, work, m);
            return Step::Admitted;
        }
        level.rejected += 1;
        m.rejected(
            &request.flow_schema,
            &level.name,
            RejectReason::ConcurrencyLimit,
        );
        return Step::Rejected;
    };
    // Upstream `shuffleShardLocked`: of the hand, the queue with the least work
    // waiting, looked at from a point that moves with each enqueue.
    let hand = deal_hand(
        hash,
        queuing.queues.min(level.queues.len()),
        queuing.hand_size,
    );
    let offset = level.enqueues % hand.len().max(1);
    level.enqueues += 1;
    let mut best: Option<(SeatSeconds, usize)> = None;
    for i in 0..hand.len() {
        let q = hand[(offset + i) % hand.len()];
        let work = level.queues[q].total_work_sum;
        if best.is_none_or(|(w, _)| work < w) {
            best = Some((work, q));
        }
    }
    let Some((_, q)) = best else {
        level.rejected += 1;
        m.rejected(&request.flow_schema, &level.name, RejectReason::QueueFull);
        return Step::Rejected;
    };
    // A full queue refuses only while the level's seats are all taken.
    if level.seats_in_use >= level.current
        && level.queues[q].waiting.len() >= queuing.queue_length_limit
    {
        level.rejected += 1;
        m.rejected(&request.flow_schema, &level.name, RejectReason::QueueFull);
        return Step::Rejected;
    }
    let current_r = level.current_r;
    let queue = &mut level.queues[q];
    if queue.idle() {
        queue.next_dispatch_r = current_r;
    }
    let (tx, rx) = oneshot::channel();
    let flow_schema = request.flow_schema.clone();
    let seats = work.max_seats();
    queue.push(Waiter {
        id,
        grant: tx,
        request,
        work,
        arrival_r: current_r,
    });
    queue.bound_next_dispatch();
    let length = queue.waiting.len();
    level.waiting_count += 1;
    level.seats_waiting += seats;
    m.waiting(&flow_schema, &level.name, 1.0, f64::from(seats));
    m.queue_length(&flow_schema, &level.name, length);
    level.dispatch(m);
    if level.running.contains_key(&id) {
        Step::Admitted
    } else {
        Step::Queued(rx)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{sample, tracked};
    use super::super::{Bounds, Queuing};
    use super::*;

    fn level(seats: u32, queues: usize) -> Level {
        Level::new(
            Arc::from("pl"),
            LevelSpec {
                uid: "uid".into(),
                bounds: Bounds {
                    nominal: seats,
                    min: seats,
                    max: seats,
                    exempt: false,
                },
                queuing: Some(Queuing {
                    queues,
                    hand_size: 1,
                    queue_length_limit: 10,
                }),
                max_seats: 10,
            },
        )
    }

    fn seats(n: u32) -> WorkEstimate {
        WorkEstimate {
            initial_seats: n,
            ..WorkEstimate::ONE_SEAT
        }
    }

    /// `hash` 0 deals queue 0 of two, 1 queue 1.
    fn admit(
        l: &mut Level,
        id: u64,
        work: WorkEstimate,
        hash: u64,
        m: &FlowControlMetrics,
    ) -> Step {
        admit_to(l, id, tracked("fs", "u"), work, hash, m)
    }

    fn granted(step: Step) -> oneshot::Receiver<()> {
        match step {
            Step::Queued(rx) => rx,
            _ => panic!("expected to wait"),
        }
    }

    #[tokio::test]
    async fn a_late_flow_is_served_before_a_flooding_one() {
        let m = FlowControlMetrics::default();
        let mut l = level(1, 2);
        assert!(matches!(
            admit(&mut l, 0, WorkEstimate::ONE_SEAT, 0, &m),
            Step::Admitted
        ));
        let mut flood: Vec<_> = (1..4)
            .map(|id| granted(admit(&mut l, id, WorkEstimate::ONE_SEAT, 0, &m)))
            .collect();
        let mut late = granted(admit(&mut l, 10, WorkEstimate::ONE_SEAT, 1, &m));
        // The flood's first request ran long: its queue's virtual time moves on by
        // what it took.
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(matches!(l.finish(0, &m), Finished::Done));
        assert!(l.queues[0].next_dispatch_r >= SeatSeconds::of(1.0, Duration::from_millis(30)));
        assert!(late.try_recv().is_ok(), "the other flow goes first");
        assert!(flood[0].try_recv().is_err());
        assert!(matches!(l.finish(10, &m), Finished::Done));
        assert!(flood[0].try_recv().is_ok());
        assert!(flood[1].try_recv().is_err());
        // The virtual times on the metrics' page, in seat-seconds.
        let gauge = |name: &str| -> f64 {
            sample(
                &m,
                &format!(r#"apiserver_flowcontrol_{name}{{priority_level="pl"}}"#),
            )
            .unwrap()
            .parse()
            .unwrap()
        };
        assert!(gauge("current_r") > 0.0);
        assert!(
            gauge("latest_s") >= 0.03,
            "the flood's queue, after its long request"
        );
    }

    #[tokio::test]
    async fn the_virtual_clock_is_wound_back_before_it_overflows() {
        let m = FlowControlMetrics::default();
        let mut l = level(1, 2);
        assert!(matches!(
            admit(&mut l, 0, WorkEstimate::ONE_SEAT, 0, &m),
            Step::Admitted
        ));
        let mut waiting = granted(admit(&mut l, 1, WorkEstimate::ONE_SEAT, 0, &m));
        // As if the level had run for years: R, the busy queue and its waiter at the
        // threshold; the other queue idle since long ago.
        let near = |offset: i64| SeatSeconds(HIGH_R.0 + offset);
        l.current_r = near(0);
        l.queues[0].next_dispatch_r = near(-5);
        l.queues[0].waiting[0].arrival_r = near(-3);
        l.queues[1].next_dispatch_r = near(-1_000);
        assert!(matches!(l.finish(0, &m), Finished::Done));
        assert!(l.current_r >= near(0).sub(R_DECREMENT));
        assert!(l.current_r < R_DECREMENT, "wound back: {:?}", l.current_r);
        // The queue moved back with R (and on by the work it then dispatched); the idle
        // one starts over.
        let busy = l.queues[0].next_dispatch_r;
        assert!(
            busy >= near(-5).sub(R_DECREMENT) && busy < R_DECREMENT,
            "{busy:?}"
        );
        assert_eq!(l.queues[1].next_dispatch_r, SeatSeconds::default());
        assert!(waiting.try_recv().is_ok(), "the waiter is served as before");
        assert_eq!(
            sample(
                &m,
                r#"apiserver_flowcontrol_epoch_advance_total{priority_level="pl",success="true"}"#
            )
            .as_deref(),
            Some("1")
        );
        // R goes on from there.
        assert!(matches!(l.finish(1, &m), Finished::Done));
        assert!(l.current_r < R_DECREMENT);
    }

    #[test]
    fn a_wide_request_waits_until_its_seats_are_free() {
        let m = FlowControlMetrics::default();
        let mut l = level(4, 1);
        for id in 0..2 {
            assert!(matches!(
                admit(&mut l, id, WorkEstimate::ONE_SEAT, 0, &m),
                Step::Admitted
            ));
        }
        let mut wide = granted(admit(&mut l, 2, seats(3), 0, &m));
        // One seat is free, but the head of the queue needs three: nobody behind it
        // passes it.
        let mut behind = granted(admit(&mut l, 3, WorkEstimate::ONE_SEAT, 0, &m));
        assert!(wide.try_recv().is_err() && behind.try_recv().is_err());
        assert!(
            sample(
                &m,
                r#"apiserver_flowcontrol_request_dispatch_no_accommodation_total{flow_schema="fs",priority_level="pl"}"#
            )
            .is_some_and(|n| n != "0")
        );
        assert!(matches!(l.finish(0, &m), Finished::Done));
        assert!(wide.try_recv().is_ok());
        assert_eq!(l.seats_in_use, 4);
        assert!(behind.try_recv().is_err());
        assert!(matches!(l.finish(2, &m), Finished::Done));
        assert!(behind.try_recv().is_ok());
    }

    #[test]
    fn a_request_wider_than_its_level_runs_alone() {
        let m = FlowControlMetrics::default();
        let mut l = level(2, 1);
        assert!(matches!(
            admit(&mut l, 0, WorkEstimate::ONE_SEAT, 0, &m),
            Step::Admitted
        ));
        let mut wide = granted(admit(&mut l, 1, seats(5), 0, &m));
        assert!(wide.try_recv().is_err());
        assert!(matches!(l.finish(0, &m), Finished::Done));
        // The seats are never enough: it runs once nothing else does.
        assert!(wide.try_recv().is_ok());
        assert_eq!(l.seats_in_use, 5);
    }

    #[test]
    fn final_seats_are_held_after_the_request_ends() {
        let m = FlowControlMetrics::default();
        let mut l = level(2, 1);
        let write = WorkEstimate {
            initial_seats: 1,
            final_seats: 2,
            additional_latency: Duration::from_millis(5),
        };
        assert!(matches!(admit(&mut l, 0, write, 0, &m), Step::Admitted));
        let mut next = granted(admit(&mut l, 1, WorkEstimate::ONE_SEAT, 0, &m));
        let Finished::Holding(held) = l.finish(0, &m) else {
            panic!("its final seats are held");
        };
        assert_eq!(held.after, Duration::from_millis(5));
        assert_eq!((l.executing(), l.seats_in_use), (0, 2));
        assert!(next.try_recv().is_err());
        l.release(held, &m);
        assert!(next.try_recv().is_ok());
        assert_eq!(l.seats_in_use, 1);
    }

    #[test]
    fn a_full_queue_takes_more_while_seats_are_free() {
        let m = FlowControlMetrics::default();
        let mut l = level(3, 1);
        l.spec.queuing = Some(Queuing {
            queues: 1,
            hand_size: 1,
            queue_length_limit: 1,
        });
        // Seats free: admitted through the queue whatever its limit.
        for id in 0..3 {
            assert!(matches!(
                admit(&mut l, id, WorkEstimate::ONE_SEAT, 0, &m),
                Step::Admitted
            ));
        }
        let _waiting = granted(admit(&mut l, 3, WorkEstimate::ONE_SEAT, 0, &m));
        assert!(matches!(
            admit(&mut l, 4, WorkEstimate::ONE_SEAT, 0, &m),
            Step::Rejected
        ));
    }

    #[test]
    fn seat_seconds_print_as_upstream() {
        assert_eq!(
            SeatSeconds::of(2.0, Duration::from_millis(3)).display(),
            "0.00600000ss"
        );
        assert_eq!(
            SeatSeconds::of(1.0, Duration::from_secs(12)).display(),
            "12.00000000ss"
        );
    }
}
