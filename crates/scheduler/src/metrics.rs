//! Scheduler metrics in the Prometheus text format: scheduling attempts by result,
//! the e2e scheduling latency histogram, and pending pods by queue.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ferrokube_component_base::metrics::{CounterVec, HistogramVec, exponential_buckets};

use crate::queue::PendingPods;

/// Upstream's buckets of both histograms: from 1 ms, doubling, 15 of them.
const BUCKETS: [f64; 15] = exponential_buckets(0.001, 2.0);

/// The scheduler's metrics (one instance per scheduler, no globals).
#[derive(Debug)]
pub struct Metrics {
    /// By profile and result.
    attempts: CounterVec<2>,
    /// By profile and result.
    attempt_duration: HistogramVec<2>,
    /// From first enqueue to bound.
    e2e: HistogramVec<0>,
    pub preemption_attempts: AtomicU64,
    pub preemption_victims: AtomicU64,
    pub bindings: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            attempts: CounterVec::new(
                "scheduler_schedule_attempts_total",
                "Number of attempts to schedule pods, by the result.",
                ["profile", "result"],
            ),
            attempt_duration: HistogramVec::histogram(
                "scheduler_scheduling_attempt_duration_seconds",
                "Scheduling attempt latency in seconds.",
                ["profile", "result"],
                &BUCKETS,
            ),
            e2e: HistogramVec::histogram(
                "scheduler_pod_scheduling_sli_duration_seconds",
                "E2e latency for a pod being scheduled, from the time the pod enters the scheduling queue.",
                [],
                &BUCKETS,
            ),
            preemption_attempts: AtomicU64::default(),
            preemption_victims: AtomicU64::default(),
            bindings: AtomicU64::default(),
        }
    }
}

impl Metrics {
    pub fn new() -> Self {
        Self::default()
    }

    /// One scheduling attempt with its result (`scheduled`, `unschedulable`, `error`).
    pub fn observe_attempt(&self, result: &str, profile: &str, d: Duration) {
        self.attempts.inc([profile, result]);
        self.attempt_duration
            .observe([profile, result], d.as_secs_f64());
    }

    /// A pod bound, `d` after it was first enqueued.
    pub fn observe_e2e(&self, d: Duration) {
        self.e2e.observe([], d.as_secs_f64());
        self.bindings.fetch_add(1, Ordering::Relaxed);
    }

    /// Attempts with `result`, over all profiles.
    pub fn attempts(&self, result: &str) -> u64 {
        self.attempts
            .snapshot()
            .iter()
            .filter(|([_, r], _)| &**r == result)
            .map(|(_, n)| n.0)
            .sum()
    }

    /// The text exposition.
    pub fn render(&self, pending: PendingPods) -> String {
        let mut out = String::new();
        self.attempts.render(&mut out);
        self.attempt_duration.render(&mut out);
        self.e2e.render(&mut out);
        out.push_str("# HELP scheduler_pending_pods Number of pending pods, by the queue type.\n");
        out.push_str("# TYPE scheduler_pending_pods gauge\n");
        for (q, v) in [
            ("active", pending.active),
            ("backoff", pending.backoff),
            ("unschedulable", pending.unschedulable),
            ("gated", pending.gated),
        ] {
            let _ = writeln!(out, "scheduler_pending_pods{{queue=\"{q}\"}} {v}");
        }
        let _ = writeln!(
            out,
            "# TYPE scheduler_preemption_attempts_total counter\nscheduler_preemption_attempts_total {}",
            self.preemption_attempts.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# TYPE scheduler_preemption_victims_total counter\nscheduler_preemption_victims_total {}",
            self.preemption_victims.load(Ordering::Relaxed)
        );
        ferrokube_component_base::metrics::process::write_process_metrics(&mut out);
        ferrokube_client::metrics::write_rest_client_metrics(&mut out);
        ferrokube_client::leaderelection::write_leader_election_metrics(&mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_histograms_and_gauges() {
        let m = Metrics::new();
        m.observe_attempt("scheduled", "default-scheduler", Duration::from_millis(3));
        m.observe_attempt(
            "unschedulable",
            "default-scheduler",
            Duration::from_millis(1),
        );
        m.observe_e2e(Duration::from_millis(30));
        let t = m.render(PendingPods {
            active: 1,
            backoff: 2,
            unschedulable: 3,
            gated: 0,
        });
        assert!(t.contains("scheduler_schedule_attempts_total{profile=\"default-scheduler\",result=\"scheduled\"} 1"));
        assert!(t.contains("scheduler_pod_scheduling_sli_duration_seconds_bucket{le=\"0.032\"} 1"));
        assert!(t.contains("scheduler_pod_scheduling_sli_duration_seconds_bucket{le=\"0.016\"} 0"));
        assert!(t.contains("scheduler_pending_pods{queue=\"unschedulable\"} 3"));
        assert_eq!(m.attempts("scheduled"), 1);
    }
}
