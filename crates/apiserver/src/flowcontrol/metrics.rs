//! Upstream's `apiserver_flowcontrol_*` metrics (`k8s.io/apiserver/pkg/util/flowcontrol/metrics`)
//! that apply to this filter: names, help, types, buckets and labels as 1.33 serves
//! them (labels in the sorted order Prometheus writes them).
//!
//! Left out: `epoch_advance_total` (the virtual clock here has no epochs) and the
//! timing-ratio histograms (`demand_seats` and the utilization ones).
//! `request_concurrency_limit` and `request_concurrency_in_use` are deprecated since
//! 1.30 and 1.31 and so hidden in 1.33.

use ferrokube_component_base::metrics::{CounterVec, GaugeVec, HistogramVec};

use super::borrowing::{Bounds, DemandStats};

/// Upstream's buckets of `work_estimated_seats` and `watch_count_samples`.
const SEATS_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 10.0];
const WATCH_COUNT_BUCKETS: &[f64] = &[0.0, 1.0, 10.0, 100.0, 1000.0, 10000.0];

/// Upstream's `queueLengthBuckets`.
const QUEUE_LENGTH_BUCKETS: &[f64] = &[0.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0];

/// Upstream's `requestDurationSecondsBuckets`.
const DURATION_BUCKETS: &[f64] = &[
    0.0, 0.005, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0,
];

const SCHEMA_AND_LEVEL: [&str; 2] = ["flow_schema", "priority_level"];

/// Why a request was refused, as upstream's `reason` label. Upstream 1.33 counts a
/// request that left its queue because its wait ran out and one whose client went
/// away alike, as `time-out`; it never records `cancelled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RejectReason {
    /// Every queue of the request's hand was at its length limit.
    QueueFull,
    /// The request left its queue without a seat.
    TimeOut,
    /// A level that does not queue had no seat free.
    ConcurrencyLimit,
}

impl RejectReason {
    fn label(self) -> &'static str {
        match self {
            RejectReason::QueueFull => "queue-full",
            RejectReason::TimeOut => "time-out",
            RejectReason::ConcurrencyLimit => "concurrency-limit",
        }
    }
}

/// One apiserver's flow-control metrics.
#[derive(Debug)]
pub(crate) struct FlowControlMetrics {
    rejected: CounterVec<3>,
    dispatched: CounterVec<2>,
    inqueue_requests: GaugeVec<2>,
    inqueue_seats: GaugeVec<2>,
    queue_length: HistogramVec<2>,
    executing_requests: GaugeVec<2>,
    executing_seats: GaugeVec<2>,
    wait: HistogramVec<3>,
    execution: HistogramVec<3>,
    nominal_limit: GaugeVec<1>,
    lower_limit: GaugeVec<1>,
    upper_limit: GaugeVec<1>,
    current_limit: GaugeVec<1>,
    demand_high_watermark: GaugeVec<1>,
    demand_average: GaugeVec<1>,
    demand_stdev: GaugeVec<1>,
    demand_smoothed: GaugeVec<1>,
    target: GaugeVec<1>,
    fair_frac: GaugeVec<0>,
    work_estimated_seats: HistogramVec<2>,
    watch_count_samples: HistogramVec<2>,
    no_accommodation: CounterVec<2>,
    current_r: GaugeVec<1>,
    epoch_advances: CounterVec<2>,
    dispatch_r: GaugeVec<1>,
    latest_s: GaugeVec<1>,
    next_s_bounds: GaugeVec<2>,
    next_discounted_s_bounds: GaugeVec<2>,
}

/// What a dispatch saw of a level's virtual times (upstream `SetDispatchMetrics`), in
/// seat-seconds: R, the dispatching queue's next dispatch R, and the lowest and highest
/// of the waiting queues' next dispatch R, plain and less their work in progress.
pub(crate) struct DispatchTimes {
    pub r: f64,
    pub s: f64,
    pub s_bounds: (f64, f64),
    pub discounted_s_bounds: (f64, f64),
}

impl Default for FlowControlMetrics {
    fn default() -> Self {
        FlowControlMetrics {
            rejected: CounterVec::new(
                "apiserver_flowcontrol_rejected_requests_total",
                "[BETA] Number of requests rejected by API Priority and Fairness subsystem",
                ["flow_schema", "priority_level", "reason"],
            ),
            dispatched: CounterVec::new(
                "apiserver_flowcontrol_dispatched_requests_total",
                "[BETA] Number of requests executed by API Priority and Fairness subsystem",
                SCHEMA_AND_LEVEL,
            ),
            inqueue_requests: GaugeVec::new(
                "apiserver_flowcontrol_current_inqueue_requests",
                "[BETA] Number of requests currently pending in queues of the API Priority and Fairness subsystem",
                SCHEMA_AND_LEVEL,
            ),
            inqueue_seats: GaugeVec::new(
                "apiserver_flowcontrol_current_inqueue_seats",
                "[ALPHA] Number of seats currently pending in queues of the API Priority and Fairness subsystem",
                SCHEMA_AND_LEVEL,
            ),
            queue_length: HistogramVec::histogram(
                "apiserver_flowcontrol_request_queue_length_after_enqueue",
                "[ALPHA] Length of queue in the API Priority and Fairness subsystem, as seen by each request after it is enqueued",
                SCHEMA_AND_LEVEL,
                QUEUE_LENGTH_BUCKETS,
            ),
            executing_requests: GaugeVec::new(
                "apiserver_flowcontrol_current_executing_requests",
                "[BETA] Number of requests in initial (for a WATCH) or any (for a non-WATCH) execution stage in the API Priority and Fairness subsystem",
                SCHEMA_AND_LEVEL,
            ),
            executing_seats: GaugeVec::new(
                "apiserver_flowcontrol_current_executing_seats",
                "[BETA] Concurrency (number of seats) occupied by the currently executing (initial stage for a WATCH, any stage otherwise) requests in the API Priority and Fairness subsystem",
                SCHEMA_AND_LEVEL,
            ),
            wait: HistogramVec::histogram(
                "apiserver_flowcontrol_request_wait_duration_seconds",
                "[BETA] Length of time a request spent waiting in its queue",
                ["execute", "flow_schema", "priority_level"],
                DURATION_BUCKETS,
            ),
            execution: HistogramVec::histogram(
                "apiserver_flowcontrol_request_execution_seconds",
                "[ALPHA] Duration of initial stage (for a WATCH) or any (for a non-WATCH) stage of request execution in the API Priority and Fairness subsystem",
                ["flow_schema", "priority_level", "type"],
                DURATION_BUCKETS,
            ),
            nominal_limit: GaugeVec::new(
                "apiserver_flowcontrol_nominal_limit_seats",
                "[BETA] Nominal number of execution seats configured for each priority level",
                ["priority_level"],
            ),
            lower_limit: GaugeVec::new(
                "apiserver_flowcontrol_lower_limit_seats",
                "[ALPHA] Configured lower bound on number of execution seats available to each priority level",
                ["priority_level"],
            ),
            upper_limit: GaugeVec::new(
                "apiserver_flowcontrol_upper_limit_seats",
                "[ALPHA] Configured upper bound on number of execution seats available to each priority level",
                ["priority_level"],
            ),
            current_limit: GaugeVec::new(
                "apiserver_flowcontrol_current_limit_seats",
                "[ALPHA] current derived number of execution seats available to each priority level",
                ["priority_level"],
            ),
            demand_high_watermark: GaugeVec::new(
                "apiserver_flowcontrol_demand_seats_high_watermark",
                "[ALPHA] High watermark, over last adjustment period, of demand_seats",
                ["priority_level"],
            ),
            demand_average: GaugeVec::new(
                "apiserver_flowcontrol_demand_seats_average",
                "[ALPHA] Time-weighted average, over last adjustment period, of demand_seats",
                ["priority_level"],
            ),
            demand_stdev: GaugeVec::new(
                "apiserver_flowcontrol_demand_seats_stdev",
                "[ALPHA] Time-weighted standard deviation, over last adjustment period, of demand_seats",
                ["priority_level"],
            ),
            demand_smoothed: GaugeVec::new(
                "apiserver_flowcontrol_demand_seats_smoothed",
                "[ALPHA] Smoothed seat demands",
                ["priority_level"],
            ),
            target: GaugeVec::new(
                "apiserver_flowcontrol_target_seats",
                "[ALPHA] Seat allocation targets",
                ["priority_level"],
            ),
            fair_frac: GaugeVec::new(
                "apiserver_flowcontrol_seat_fair_frac",
                "[ALPHA] Fair fraction of server's concurrency to allocate to each priority level that can use it",
                [],
            ),
            work_estimated_seats: HistogramVec::histogram(
                "apiserver_flowcontrol_work_estimated_seats",
                "[ALPHA] Number of estimated seats (maximum of initial and final seats) associated with requests in API Priority and Fairness",
                SCHEMA_AND_LEVEL,
                SEATS_BUCKETS,
            ),
            watch_count_samples: HistogramVec::histogram(
                "apiserver_flowcontrol_watch_count_samples",
                "[ALPHA] count of watchers for mutating requests in API Priority and Fairness",
                SCHEMA_AND_LEVEL,
                WATCH_COUNT_BUCKETS,
            ),
            no_accommodation: CounterVec::new(
                "apiserver_flowcontrol_request_dispatch_no_accommodation_total",
                "[ALPHA] Number of times a dispatch attempt resulted in a non accommodation due to lack of available seats",
                SCHEMA_AND_LEVEL,
            ),
            current_r: GaugeVec::new(
                "apiserver_flowcontrol_current_r",
                "[ALPHA] R(time of last change)",
                ["priority_level"],
            ),
            epoch_advances: CounterVec::new(
                "apiserver_flowcontrol_epoch_advance_total",
                "[ALPHA] Number of times the queueset's progress meter jumped backward",
                ["priority_level", "success"],
            ),
            dispatch_r: GaugeVec::new(
                "apiserver_flowcontrol_dispatch_r",
                "[ALPHA] R(time of last dispatch)",
                ["priority_level"],
            ),
            latest_s: GaugeVec::new(
                "apiserver_flowcontrol_latest_s",
                "[ALPHA] S(most recently dispatched request)",
                ["priority_level"],
            ),
            next_s_bounds: GaugeVec::new(
                "apiserver_flowcontrol_next_s_bounds",
                "[ALPHA] min and max, over queues, of S(oldest waiting request in queue)",
                ["bound", "priority_level"],
            ),
            next_discounted_s_bounds: GaugeVec::new(
                "apiserver_flowcontrol_next_discounted_s_bounds",
                "[ALPHA] min and max, over queues, of S(oldest waiting request in queue) - estimated work in progress",
                ["bound", "priority_level"],
            ),
        }
    }
}

impl FlowControlMetrics {
    pub(crate) fn rejected(&self, schema: &str, level: &str, reason: RejectReason) {
        self.rejected.inc([schema, level, reason.label()]);
    }

    pub(crate) fn dispatched(&self, schema: &str, level: &str) {
        self.dispatched.inc([schema, level]);
    }

    /// A request entered (`requests` 1) or left (-1) a queue, with its seats.
    pub(crate) fn waiting(&self, schema: &str, level: &str, requests: f64, seats: f64) {
        self.inqueue_requests
            .with([schema, level], |g| g.0 += requests);
        self.inqueue_seats.with([schema, level], |g| g.0 += seats);
    }

    /// A request started (`requests` 1) or stopped (-1) executing; its seats are
    /// counted apart, as a write keeps its final seats a while after it ends.
    pub(crate) fn executing(&self, schema: &str, level: &str, requests: f64, seats: f64) {
        if requests != 0.0 {
            self.executing_requests
                .with([schema, level], |g| g.0 += requests);
        }
        if seats != 0.0 {
            self.executing_seats.with([schema, level], |g| g.0 += seats);
        }
    }

    pub(crate) fn queue_length(&self, schema: &str, level: &str, length: usize) {
        self.queue_length.observe([schema, level], length as f64);
    }

    pub(crate) fn waited(&self, schema: &str, level: &str, executed: bool, seconds: f64) {
        let execute = if executed { "true" } else { "false" };
        self.wait.observe([execute, schema, level], seconds);
    }

    pub(crate) fn executed(&self, schema: &str, level: &str, watch: bool, seconds: f64) {
        let kind = if watch { "watch" } else { "regular" };
        self.execution.observe([schema, level, kind], seconds);
    }

    /// A level's configured seats: nominal, and the bounds borrowing keeps it in.
    pub(crate) fn level_bounds(&self, level: &str, bounds: Bounds) {
        self.nominal_limit.set([level], f64::from(bounds.nominal));
        self.lower_limit.set([level], f64::from(bounds.min));
        self.upper_limit.set([level], f64::from(bounds.max));
    }

    /// What a borrowing adjustment saw of a level's demand, and the seats it gave.
    pub(crate) fn adjusted(&self, level: &str, demand: &DemandStats, target: f64, current: u32) {
        self.demand_high_watermark
            .set([level], f64::from(demand.high_watermark));
        self.demand_average.set([level], demand.avg);
        self.demand_stdev.set([level], demand.std_dev);
        self.demand_smoothed.set([level], demand.smoothed);
        self.target.set([level], target);
        self.current_limit.set([level], f64::from(current));
    }

    pub(crate) fn fair_frac(&self, fair_frac: f64) {
        self.fair_frac.set([], fair_frac);
    }

    /// A request's estimate: its seats, and for a write the watches it was made from.
    pub(crate) fn estimated(&self, schema: &str, level: &str, seats: u32, watches: Option<usize>) {
        self.work_estimated_seats
            .observe([schema, level], f64::from(seats));
        if let Some(n) = watches {
            self.watch_count_samples.observe([schema, level], n as f64);
        }
    }

    /// The head of the queue to dispatch from did not fit in the free seats.
    pub(crate) fn not_accommodated(&self, schema: &str, level: &str) {
        self.no_accommodation.inc([schema, level]);
    }

    /// A level's virtual clock, in seat-seconds.
    pub(crate) fn current_r(&self, level: &str, r: f64) {
        self.current_r.set([level], r);
    }

    /// A level's virtual clock was wound back, and whether every time it holds stayed
    /// in range.
    pub(crate) fn epoch_advanced(&self, level: &str, success: bool) {
        let success = if success { "true" } else { "false" };
        self.epoch_advances.inc([level, success]);
    }

    pub(crate) fn dispatch_times(&self, level: &str, t: &DispatchTimes) {
        self.dispatch_r.set([level], t.r);
        self.latest_s.set([level], t.s);
        for (family, (min, max)) in [
            (&self.next_s_bounds, t.s_bounds),
            (&self.next_discounted_s_bounds, t.discounted_s_bounds),
        ] {
            family.set(["min", level], min);
            family.set(["max", level], max);
        }
    }

    /// Forgets the limits of the levels `keep` does not hold.
    pub(crate) fn retain_levels(&self, keep: impl Fn(&str) -> bool) {
        for family in [
            &self.nominal_limit,
            &self.lower_limit,
            &self.upper_limit,
            &self.current_limit,
            &self.demand_high_watermark,
            &self.demand_average,
            &self.demand_stdev,
            &self.demand_smoothed,
            &self.target,
            &self.current_r,
            &self.dispatch_r,
            &self.latest_s,
        ] {
            family.retain(|labels| keep(&labels[0]));
        }
        for family in [&self.next_s_bounds, &self.next_discounted_s_bounds] {
            family.retain(|labels| keep(&labels[1]));
        }
    }

    pub(crate) fn render(&self, out: &mut String) {
        self.rejected.render(out);
        self.dispatched.render(out);
        self.inqueue_requests.render(out);
        self.inqueue_seats.render(out);
        self.queue_length.render(out);
        self.executing_requests.render(out);
        self.executing_seats.render(out);
        self.wait.render(out);
        self.execution.render(out);
        self.nominal_limit.render(out);
        self.lower_limit.render(out);
        self.upper_limit.render(out);
        self.current_limit.render(out);
        self.demand_high_watermark.render(out);
        self.demand_average.render(out);
        self.demand_stdev.render(out);
        self.demand_smoothed.render(out);
        self.target.render(out);
        self.fair_frac.render(out);
        self.work_estimated_seats.render(out);
        self.watch_count_samples.render(out);
        self.no_accommodation.render(out);
        self.current_r.render(out);
        self.epoch_advances.render(out);
        self.dispatch_r.render(out);
        self.latest_s.render(out);
        self.next_s_bounds.render(out);
        self.next_discounted_s_bounds.render(out);
    }
}
