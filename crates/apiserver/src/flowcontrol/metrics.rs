//! Upstream's `apiserver_flowcontrol_*` metrics (`k8s.io/apiserver/pkg/util/flowcontrol/metrics`)
//! that apply to this filter: names, help, types, buckets and labels as 1.33 serves
//! them (labels in the sorted order Prometheus writes them).
//!
//! Left out: the virtual-time gauges (`current_r`, `dispatch_r`, `latest_s`,
//! `next_*s_bounds`, `epoch_advance_total`), the work estimate's
//! (`work_estimated_seats`, `watch_count_samples`,
//! `request_dispatch_no_accommodation_total`) and the timing-ratio histograms
//! (`demand_seats` and the utilization ones); none has a counterpart here.
//! `request_concurrency_limit` and `request_concurrency_in_use` are deprecated since
//! 1.30 and 1.31 and so hidden in 1.33.

use ferrokube_component_base::metrics::{CounterVec, GaugeVec, HistogramVec};

use super::borrowing::{Bounds, DemandStats};

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
        ] {
            family.retain(|labels| keep(&labels[0]));
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
    }
}
