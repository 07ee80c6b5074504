//! Upstream's proxy health (`pkg/proxy/healthcheck/proxy_health.go`) and the
//! `/metrics` text: healthy unless an update was queued and not applied within the
//! health timeout (2 × syncPeriod), and, for `/healthz` only, while this node is not
//! being deleted or tainted `ToBeDeletedByClusterAutoscaler`. Time is passed in.
//! The sync metrics include upstream's network programming latency, measured from the
//! EndpointSlices' `endpoints.kubernetes.io/last-change-trigger-time` to the sync that
//! programmed their change, once for either backend.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::{Duration, Instant, SystemTime};

use ferrokube_component_base::metrics::{Histogram, Metric, exponential_buckets, write_header};
use k8s_openapi::api::core::v1::Node;

use crate::backend::IptablesCounts;
use crate::config::ProxyMode;
use crate::net::IpFamily;

/// The taint the cluster autoscaler puts on a node it is about to delete.
pub const TO_BE_DELETED_TAINT: &str = "ToBeDeletedByClusterAutoscaler";

#[derive(Debug)]
pub struct ProxyHealth {
    timeout: Duration,
    last_updated: Option<(Instant, SystemTime)>,
    oldest_pending: Option<Instant>,
    node_eligible: bool,
    healthz_200: u64,
    healthz_503: u64,
}

impl ProxyHealth {
    pub fn new(timeout: Duration) -> Self {
        ProxyHealth {
            timeout,
            last_updated: None,
            oldest_pending: None,
            // Eligible while starting up, until a node event says otherwise.
            node_eligible: true,
            healthz_200: 0,
            healthz_503: 0,
        }
    }

    /// A change was received that the rules do not reflect yet.
    pub fn queued(&mut self, now: Instant) {
        self.oldest_pending.get_or_insert(now);
    }

    /// The rules reflect everything received so far.
    pub fn updated(&mut self, now: Instant, wall: SystemTime) {
        self.oldest_pending = None;
        self.last_updated = Some((now, wall));
    }

    pub fn sync_node(&mut self, node: &Node) {
        let deleting = node.metadata.deletion_timestamp.is_some();
        let tainted = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| t.iter().any(|t| t.key == TO_BE_DELETED_TAINT));
        self.node_eligible = !deleting && !tainted;
    }

    pub fn node_eligible(&self) -> bool {
        self.node_eligible
    }

    /// The proxier alone: no pending update older than the timeout.
    pub fn is_healthy(&self, now: Instant) -> bool {
        match self.oldest_pending {
            None => true,
            Some(queued) => now.saturating_duration_since(queued) < self.timeout,
        }
    }

    /// `/healthz` (`livez` = false) or `/livez`: status code and upstream's JSON body.
    pub fn respond(&mut self, now: Instant, wall: SystemTime, livez: bool) -> (u16, String) {
        let healthy = self.is_healthy(now) && (livez || self.node_eligible);
        let last = if healthy {
            wall
        } else {
            self.last_updated
                .map(|(_, w)| w)
                .unwrap_or(SystemTime::UNIX_EPOCH)
        };
        if !livez {
            if healthy {
                self.healthz_200 += 1;
            } else {
                self.healthz_503 += 1;
            }
        }
        let mut body = format!(
            "{{\"lastUpdated\": \"{}\",\"currentTime\": \"{}\"",
            rfc3339(last),
            rfc3339(wall)
        );
        if !livez {
            let _ = write!(body, ", \"nodeEligible\": {}", self.node_eligible);
        }
        body.push('}');
        (if healthy { 200 } else { 503 }, body)
    }

    /// `kubeproxy_proxy_healthz_total` lines.
    pub fn metrics(&self, out: &mut String) {
        out.push_str("# HELP kubeproxy_proxy_healthz_total Cumulative proxy healthz HTTP status\n# TYPE kubeproxy_proxy_healthz_total counter\n");
        let _ = writeln!(
            out,
            "kubeproxy_proxy_healthz_total{{code=\"200\"}} {}",
            self.healthz_200
        );
        let _ = writeln!(
            out,
            "kubeproxy_proxy_healthz_total{{code=\"503\"}} {}",
            self.healthz_503
        );
    }
}

/// RFC 3339 UTC with seconds, from a wall-clock time.
pub fn rfc3339(t: SystemTime) -> String {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let days = secs.div_euclid(86400);
    let rem = secs.rem_euclid(86400);
    // Howard Hinnant's civil-from-days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Sync latency histograms and counters (upstream's kubeproxy_sync_proxy_rules_*),
/// and the mode's own: the nftables transaction failures, or iptables mode's restore
/// failures and rule counts.
#[derive(Debug)]
pub struct SyncMetrics {
    mode: ProxyMode,
    all: Histogram,
    full: Histogram,
    partial: Histogram,
    failures: u64,
    last_timestamp: f64,
    last_services: usize,
    restore_failures: u64,
    partial_restore_failures: u64,
    /// Per family: the rule counts of its last successful restore.
    iptables: BTreeMap<IpFamily, IptablesCounts>,
    /// kubeproxy_network_programming_duration_seconds.
    network_programming: Histogram,
}

/// Upstream's buckets: exponential from 1 ms, factor 2, 15 buckets.
const BUCKETS: [f64; 15] = exponential_buckets(0.001, 2.0);

/// Upstream's NetworkProgrammingLatency buckets (pkg/proxy/metrics): `MergeBuckets`
/// (which starts with a 0 bucket) of 0.25 s and 0.5 s, 1 s to 59 s by 1 s, 60 s to
/// 115 s by 5 s, and 2 min to 5 min by 30 s.
pub const NETWORK_PROGRAMMING_BUCKETS: [f64; 81] = network_programming_buckets();

const fn network_programming_buckets() -> [f64; 81] {
    let mut b = [0.0; 81];
    b[1] = 0.25;
    b[2] = 0.5;
    let mut i = 0;
    while i < 59 {
        b[3 + i] = (1 + i) as f64;
        i += 1;
    }
    let mut i = 0;
    while i < 12 {
        b[62 + i] = 60.0 + 5.0 * i as f64;
        i += 1;
    }
    let mut i = 0;
    while i < 7 {
        b[74 + i] = 120.0 + 30.0 * i as f64;
        i += 1;
    }
    b
}

impl Default for SyncMetrics {
    fn default() -> Self {
        SyncMetrics::new(ProxyMode::Nftables)
    }
}

impl SyncMetrics {
    pub fn new(mode: ProxyMode) -> Self {
        SyncMetrics {
            mode,
            all: Histogram::new(&BUCKETS),
            full: Histogram::new(&BUCKETS),
            partial: Histogram::new(&BUCKETS),
            failures: 0,
            last_timestamp: 0.0,
            last_services: 0,
            restore_failures: 0,
            partial_restore_failures: 0,
            iptables: BTreeMap::new(),
            network_programming: Histogram::new(&NETWORK_PROGRAMMING_BUCKETS),
        }
    }

    /// A sync that succeeded at `now` programmed EndpointSlice changes triggered at
    /// `trigger_times`: one observation each, in seconds (negative with clock skew
    /// between the controller manager and this node, as upstream's `time.Since`).
    pub fn observe_network_programming(&mut self, now: SystemTime, trigger_times: &[SystemTime]) {
        for t in trigger_times {
            let seconds = match now.duration_since(*t) {
                Ok(d) => d.as_secs_f64(),
                Err(e) => -e.duration().as_secs_f64(),
            };
            self.network_programming.observe(seconds);
        }
    }

    /// iptables mode: one family's sync (its restore failed, or the rules it left).
    pub fn observe_iptables(
        &mut self,
        family: IpFamily,
        full: bool,
        restore_failed: bool,
        counts: Option<IptablesCounts>,
    ) {
        if restore_failed {
            self.restore_failures += 1;
            if !full {
                self.partial_restore_failures += 1;
            }
        }
        if let Some(c) = counts {
            self.iptables.insert(family, c);
        }
    }

    /// A sync finished (successfully or not) after `seconds`.
    pub fn observe(
        &mut self,
        seconds: f64,
        full: bool,
        ok: bool,
        wall: SystemTime,
        services: usize,
    ) {
        self.all.observe(seconds);
        if full {
            self.full.observe(seconds);
        } else {
            self.partial.observe(seconds);
        }
        if ok {
            self.last_timestamp = wall
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0);
        } else {
            self.failures += 1;
        }
        self.last_services = services;
    }

    /// Prometheus text format.
    pub fn write(&self, out: &mut String) {
        for (histogram, name, help) in [
            (
                &self.all,
                "kubeproxy_sync_proxy_rules_duration_seconds",
                "SyncProxyRules latency in seconds",
            ),
            (
                &self.full,
                "kubeproxy_sync_full_proxy_rules_duration_seconds",
                "SyncProxyRules latency in seconds for full resyncs",
            ),
            (
                &self.partial,
                "kubeproxy_sync_partial_proxy_rules_duration_seconds",
                "SyncProxyRules latency in seconds for partial resyncs",
            ),
        ] {
            write_header(out, name, help, Histogram::TYPE);
            histogram.write_samples(out, name, "");
        }
        let name = "kubeproxy_network_programming_duration_seconds";
        write_header(
            out,
            name,
            "In Cluster Network Programming Latency in seconds",
            Histogram::TYPE,
        );
        self.network_programming.write_samples(out, name, "");
        let _ = writeln!(
            out,
            "# HELP kubeproxy_sync_proxy_rules_last_timestamp_seconds The last time proxy rules were successfully synced\n# TYPE kubeproxy_sync_proxy_rules_last_timestamp_seconds gauge\nkubeproxy_sync_proxy_rules_last_timestamp_seconds {}",
            self.last_timestamp
        );
        match self.mode {
            ProxyMode::Nftables => {
                let _ = writeln!(
                    out,
                    "# HELP kubeproxy_sync_proxy_rules_nftables_failures_total Cumulative proxy nftables transaction failures\n# TYPE kubeproxy_sync_proxy_rules_nftables_failures_total counter\nkubeproxy_sync_proxy_rules_nftables_failures_total {}",
                    self.failures
                );
            }
            ProxyMode::Iptables => self.write_iptables(out),
        }
        let _ = writeln!(
            out,
            "# HELP kubeproxy_sync_proxy_rules_services Services with rules after the last sync\n# TYPE kubeproxy_sync_proxy_rules_services gauge\nkubeproxy_sync_proxy_rules_services {}",
            self.last_services
        );
    }
}

impl SyncMetrics {
    fn write_iptables(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "# HELP kubeproxy_sync_proxy_rules_iptables_restore_failures_total Cumulative proxy iptables restore failures\n# TYPE kubeproxy_sync_proxy_rules_iptables_restore_failures_total counter\nkubeproxy_sync_proxy_rules_iptables_restore_failures_total {}",
            self.restore_failures
        );
        let _ = writeln!(
            out,
            "# HELP kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total Cumulative proxy iptables partial restore failures\n# TYPE kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total counter\nkubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total {}",
            self.partial_restore_failures
        );
        // Summed over the families (upstream's gauges have no family label).
        let sum = |f: fn(&IptablesCounts) -> usize| self.iptables.values().map(f).sum::<usize>();
        for (name, help, filter, nat) in [
            (
                "kubeproxy_sync_proxy_rules_iptables_total",
                "Total number of iptables rules owned by kube-proxy",
                sum(|c| c.filter_total),
                sum(|c| c.nat_total),
            ),
            (
                "kubeproxy_sync_proxy_rules_iptables_last",
                "Number of iptables rules written by kube-proxy in last sync",
                sum(|c| c.filter_last),
                sum(|c| c.nat_last),
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name}{{table=\"filter\"}} {filter}\n{name}{{table=\"nat\"}} {nat}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn healthy_until_a_queued_update_is_late() {
        let t0 = Instant::now();
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let mut h = ProxyHealth::new(Duration::from_secs(60));
        assert_eq!(h.respond(t0, wall, false).0, 200, "healthy while starting");
        h.queued(t0);
        assert_eq!(h.respond(t0 + Duration::from_secs(59), wall, false).0, 200);
        let (code, body) = h.respond(t0 + Duration::from_secs(61), wall, false);
        assert_eq!(code, 503);
        assert!(body.contains("\"nodeEligible\": true"), "{body}");
        // A later queue does not reset the oldest pending time.
        h.queued(t0 + Duration::from_secs(61));
        assert_eq!(h.respond(t0 + Duration::from_secs(62), wall, true).0, 503);
        h.updated(t0 + Duration::from_secs(62), wall);
        let (code, body) = h.respond(t0 + Duration::from_secs(63), wall, false);
        assert_eq!(code, 200);
        assert_eq!(
            body,
            "{\"lastUpdated\": \"2023-11-14T22:13:20Z\",\"currentTime\": \"2023-11-14T22:13:20Z\", \"nodeEligible\": true}"
        );
        let mut m = String::new();
        h.metrics(&mut m);
        assert!(
            m.contains("kubeproxy_proxy_healthz_total{code=\"503\"} 1"),
            "{m}"
        );
    }

    #[test]
    fn node_being_deleted_fails_healthz_not_livez() {
        let t0 = Instant::now();
        let mut h = ProxyHealth::new(Duration::from_secs(60));
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n"},
            "spec": {"taints": [{"key": TO_BE_DELETED_TAINT, "effect": "NoSchedule"}]},
        }))
        .unwrap();
        h.sync_node(&node);
        assert_eq!(h.respond(t0, SystemTime::now(), false).0, 503);
        assert_eq!(h.respond(t0, SystemTime::now(), true).0, 200);
    }

    #[test]
    fn histogram_text() {
        let mut m = SyncMetrics::default();
        m.observe(0.003, true, true, SystemTime::UNIX_EPOCH, 3);
        m.observe(0.5, false, false, SystemTime::UNIX_EPOCH, 3);
        let mut out = String::new();
        m.write(&mut out);
        assert!(
            out.contains("kubeproxy_sync_proxy_rules_duration_seconds_bucket{le=\"0.004\"} 1"),
            "{out}"
        );
        assert!(out.contains("kubeproxy_sync_proxy_rules_duration_seconds_count 2"));
        assert!(out.contains("kubeproxy_sync_full_proxy_rules_duration_seconds_count 1"));
        assert!(out.contains("kubeproxy_sync_proxy_rules_nftables_failures_total 1"));
        assert!(!out.contains("iptables"), "{out}");
    }

    #[test]
    fn network_programming_latency_from_trigger_times() {
        assert_eq!(NETWORK_PROGRAMMING_BUCKETS[..4], [0.0, 0.25, 0.5, 1.0]);
        assert_eq!(NETWORK_PROGRAMMING_BUCKETS[61], 59.0);
        assert_eq!(NETWORK_PROGRAMMING_BUCKETS[62], 60.0);
        assert_eq!(NETWORK_PROGRAMMING_BUCKETS[73], 115.0);
        assert_eq!(NETWORK_PROGRAMMING_BUCKETS[80], 300.0);
        assert!(NETWORK_PROGRAMMING_BUCKETS.windows(2).all(|w| w[0] < w[1]));

        let mut m = SyncMetrics::new(ProxyMode::Iptables);
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let ago = |ms: u64| now - Duration::from_millis(ms);
        m.observe_network_programming(now, &[ago(100), ago(2_500), ago(400_000)]);
        // Clock skew: a trigger "in the future" counts as negative.
        m.observe_network_programming(now, &[now + Duration::from_secs(1)]);
        let mut out = String::new();
        m.write(&mut out);
        let name = "kubeproxy_network_programming_duration_seconds";
        for want in [
            format!(
                "# HELP {name} In Cluster Network Programming Latency in seconds\n# TYPE {name} histogram\n"
            ),
            format!("{name}_bucket{{le=\"0\"}} 1\n"),
            format!("{name}_bucket{{le=\"0.25\"}} 2\n"),
            format!("{name}_bucket{{le=\"2\"}} 2\n"),
            format!("{name}_bucket{{le=\"3\"}} 3\n"),
            format!("{name}_bucket{{le=\"300\"}} 3\n"),
            format!("{name}_bucket{{le=\"+Inf\"}} 4\n"),
            format!("{name}_count 4\n"),
        ] {
            assert!(out.contains(&want), "missing {want:?} in\n{out}");
        }
        let sum: f64 = out
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}_sum ")))
            .unwrap()
            .parse()
            .unwrap();
        assert!((sum - 401.6).abs() < 1e-9, "{sum}");
        // Nothing programmed yet: the family is there, empty (as upstream's).
        let mut out = String::new();
        SyncMetrics::default().write(&mut out);
        assert!(out.contains(&format!("{name}_count 0\n")), "{out}");
    }

    #[test]
    fn iptables_mode_metrics() {
        let mut m = SyncMetrics::new(ProxyMode::Iptables);
        m.observe(0.003, true, true, SystemTime::UNIX_EPOCH, 2);
        let counts = IptablesCounts {
            filter_total: 5,
            nat_total: 20,
            filter_last: 5,
            nat_last: 12,
        };
        m.observe_iptables(IpFamily::V4, true, false, Some(counts));
        m.observe_iptables(IpFamily::V6, false, true, None);
        let mut out = String::new();
        m.write(&mut out);
        for want in [
            "kubeproxy_sync_proxy_rules_iptables_total{table=\"filter\"} 5\n",
            "kubeproxy_sync_proxy_rules_iptables_total{table=\"nat\"} 20\n",
            "kubeproxy_sync_proxy_rules_iptables_last{table=\"nat\"} 12\n",
            "kubeproxy_sync_proxy_rules_iptables_restore_failures_total 1\n",
            "kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total 1\n",
            "kubeproxy_sync_proxy_rules_duration_seconds_count 1\n",
        ] {
            assert!(out.contains(want), "missing {want:?} in\n{out}");
        }
        assert!(!out.contains("nftables"), "{out}");
    }
}
