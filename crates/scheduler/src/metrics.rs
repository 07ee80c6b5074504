//! Scheduler metrics in the Prometheus text format: scheduling attempts by result,
//! the e2e scheduling latency histogram, and pending pods by queue.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use crate::queue::PendingPods;

const BUCKETS: [f64; 15] = [
    0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096,
    8.192, 16.384,
];

#[derive(Debug, Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    fn observe(&mut self, v: f64) {
        for (i, b) in BUCKETS.iter().enumerate() {
            if v <= *b {
                self.counts[i] += 1;
            }
        }
        self.count += 1;
        self.sum += v;
    }
    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (i, b) in BUCKETS.iter().enumerate() {
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{b}\"}} {}",
                self.counts[i]
            );
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let _ = writeln!(out, "{name}_sum{{{labels}}} {}", self.sum);
        let _ = writeln!(out, "{name}_count{{{labels}}} {}", self.count);
    }
}

/// The scheduler's metrics (one instance per scheduler, no globals).
#[derive(Debug, Default)]
pub struct Metrics {
    /// (result, profile) -> attempts.
    attempts: Mutex<BTreeMap<(String, String), u64>>,
    /// (result, profile) -> attempt duration.
    attempt_duration: Mutex<BTreeMap<(String, String), Histogram>>,
    /// attempts bucket -> e2e latency from first enqueue to bound.
    e2e: Mutex<Histogram>,
    pub preemption_attempts: AtomicU64,
    pub preemption_victims: AtomicU64,
    pub bindings: AtomicU64,
}

impl Metrics {
    pub fn new() -> Self {
        Self::default()
    }

    /// One scheduling attempt with its result (`scheduled`, `unschedulable`, `error`).
    pub fn observe_attempt(&self, result: &str, profile: &str, d: Duration) {
        let k = (result.to_string(), profile.to_string());
        *self.attempts.lock().entry(k.clone()).or_default() += 1;
        self.attempt_duration
            .lock()
            .entry(k)
            .or_default()
            .observe(d.as_secs_f64());
    }

    /// A pod bound, `d` after it was first enqueued.
    pub fn observe_e2e(&self, d: Duration) {
        self.e2e.lock().observe(d.as_secs_f64());
        self.bindings.fetch_add(1, Ordering::Relaxed);
    }

    pub fn attempts(&self, result: &str) -> u64 {
        self.attempts
            .lock()
            .iter()
            .filter(|((r, _), _)| r == result)
            .map(|(_, v)| *v)
            .sum()
    }

    /// The text exposition.
    pub fn render(&self, pending: PendingPods) -> String {
        let mut out = String::new();
        out.push_str("# HELP scheduler_schedule_attempts_total Number of attempts to schedule pods, by the result.\n");
        out.push_str("# TYPE scheduler_schedule_attempts_total counter\n");
        for ((r, p), v) in self.attempts.lock().iter() {
            let _ = writeln!(
                out,
                "scheduler_schedule_attempts_total{{profile=\"{p}\",result=\"{r}\"}} {v}"
            );
        }
        out.push_str("# HELP scheduler_scheduling_attempt_duration_seconds Scheduling attempt latency in seconds.\n");
        out.push_str("# TYPE scheduler_scheduling_attempt_duration_seconds histogram\n");
        for ((r, p), h) in self.attempt_duration.lock().iter() {
            h.render(
                &mut out,
                "scheduler_scheduling_attempt_duration_seconds",
                &format!("profile=\"{p}\",result=\"{r}\""),
            );
        }
        out.push_str("# HELP scheduler_pod_scheduling_sli_duration_seconds E2e latency for a pod being scheduled, from the time the pod enters the scheduling queue.\n");
        out.push_str("# TYPE scheduler_pod_scheduling_sli_duration_seconds histogram\n");
        self.e2e.lock().render(
            &mut out,
            "scheduler_pod_scheduling_sli_duration_seconds",
            "",
        );
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
