//! Request metrics in Prometheus text format (upstream's metric names).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicI64, Ordering};

use parking_lot::Mutex;

/// Latency bucket bounds in seconds.
const BUCKETS: &[f64] = &[
    0.005, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0,
];

#[derive(Default)]
struct Series {
    count: u64,
    sum: f64,
    buckets: [u64; 11],
}

/// Counters of one server; no process-global state.
#[derive(Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(String, String, u16), u64>>,
    latency: Mutex<BTreeMap<(String, String), Series>>,
    watchers: AtomicI64,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish()
    }
}

impl Metrics {
    pub fn observe(&self, verb: &str, resource: &str, code: u16, seconds: f64) {
        *self
            .requests
            .lock()
            .entry((verb.to_string(), resource.to_string(), code))
            .or_default() += 1;
        let mut lat = self.latency.lock();
        let s = lat
            .entry((verb.to_string(), resource.to_string()))
            .or_default();
        s.count += 1;
        s.sum += seconds;
        for (i, b) in BUCKETS.iter().enumerate() {
            if seconds <= *b {
                s.buckets[i] += 1;
            }
        }
    }

    pub fn watch_started(&self) {
        self.watchers.fetch_add(1, Ordering::Relaxed);
    }

    pub fn watch_ended(&self) {
        self.watchers.fetch_sub(1, Ordering::Relaxed);
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        out.push_str("# HELP apiserver_request_total Counter of apiserver requests broken out for each verb, resource and HTTP response code.\n# TYPE apiserver_request_total counter\n");
        for ((verb, resource, code), n) in self.requests.lock().iter() {
            let _ = writeln!(
                out,
                "apiserver_request_total{{code=\"{code}\",resource=\"{resource}\",verb=\"{verb}\"}} {n}"
            );
        }
        out.push_str("# HELP apiserver_request_duration_seconds Response latency distribution in seconds for each verb and resource.\n# TYPE apiserver_request_duration_seconds histogram\n");
        for ((verb, resource), s) in self.latency.lock().iter() {
            for (i, b) in BUCKETS.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "apiserver_request_duration_seconds_bucket{{resource=\"{resource}\",verb=\"{verb}\",le=\"{b}\"}} {}",
                    s.buckets[i]
                );
            }
            let _ = writeln!(
                out,
                "apiserver_request_duration_seconds_bucket{{resource=\"{resource}\",verb=\"{verb}\",le=\"+Inf\"}} {}",
                s.count
            );
            let _ = writeln!(
                out,
                "apiserver_request_duration_seconds_sum{{resource=\"{resource}\",verb=\"{verb}\"}} {}",
                s.sum
            );
            let _ = writeln!(
                out,
                "apiserver_request_duration_seconds_count{{resource=\"{resource}\",verb=\"{verb}\"}} {}",
                s.count
            );
        }
        let _ = writeln!(
            out,
            "# HELP apiserver_longrunning_requests Gauge of all active long-running apiserver requests.\n# TYPE apiserver_longrunning_requests gauge\napiserver_longrunning_requests{{verb=\"WATCH\"}} {}",
            self.watchers.load(Ordering::Relaxed)
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders() {
        let m = Metrics::default();
        m.observe("GET", "pods", 200, 0.01);
        m.watch_started();
        let t = m.render();
        assert!(
            t.contains("apiserver_request_total{code=\"200\",resource=\"pods\",verb=\"GET\"} 1")
        );
        assert!(t.contains("le=\"0.025\"} 1"));
        assert!(t.contains("apiserver_longrunning_requests{verb=\"WATCH\"} 1"));
    }
}
