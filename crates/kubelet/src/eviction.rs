//! The eviction manager's decisions (upstream `pkg/kubelet/eviction`), pure and
//! table-tested: which hard thresholds are met by the node's observations, the node
//! pressures they give (held for the pressure transition period), the order pods are
//! evicted in, and the status an evicted pod gets.
//!
//! Not wired into the kubelet yet: this machine's own disk is far below the default
//! nodefs threshold, so DiskPressure would taint the development cluster's only node.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;

use crate::node::{EvictionThresholds, Pressures};

/// Upstream's `--eviction-pressure-transition-period` default.
pub const DEFAULT_PRESSURE_TRANSITION_PERIOD: Duration = Duration::from_secs(300);
/// `Evicted`, the reason of an evicted pod's status.
pub const EVICTED_REASON: &str = "Evicted";

/// What the node has left (bytes, inodes, PIDs) and of how much; `None` when unknown.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observations {
    /// signal (`memory.available`, `nodefs.available`, ...) -> (available, capacity).
    pub signals: BTreeMap<String, (i64, i64)>,
}

/// The signals whose hard threshold is met: available below the threshold's amount.
pub fn thresholds_met(thresholds: &EvictionThresholds, obs: &Observations) -> Vec<String> {
    thresholds
        .thresholds
        .iter()
        .filter(|(signal, t)| {
            obs.signals
                .get(*signal)
                .is_some_and(|(available, capacity)| *available < t.amount(*capacity))
        })
        .map(|(s, _)| s.clone())
        .collect()
}

/// The node condition a signal drives.
pub fn pressure_of(signal: &str) -> Option<&'static str> {
    match signal {
        "memory.available" | "allocatableMemory.available" => Some("MemoryPressure"),
        "nodefs.available"
        | "nodefs.inodesFree"
        | "imagefs.available"
        | "imagefs.inodesFree"
        | "containerfs.available"
        | "containerfs.inodesFree" => Some("DiskPressure"),
        "pid.available" => Some("PIDPressure"),
        _ => None,
    }
}

/// Remembers when each signal was last met, so a pressure stays on for the transition
/// period after its threshold stops being met (upstream's anti-flapping).
#[derive(Debug, Default)]
pub struct PressureTracker {
    last_met: BTreeMap<&'static str, Instant>,
}

impl PressureTracker {
    pub fn update(&mut self, met: &[String], now: Instant, transition: Duration) -> Pressures {
        for s in met {
            if let Some(p) = pressure_of(s) {
                self.last_met.insert(p, now);
            }
        }
        let on = |p: &str| {
            self.last_met.get(p).is_some_and(|t| {
                now.duration_since(*t) < transition || met.iter().any(|s| pressure_of(s) == Some(p))
            })
        };
        Pressures {
            memory: on("MemoryPressure"),
            disk: on("DiskPressure"),
            pid: on("PIDPressure"),
        }
    }
}

/// One pod as ranking sees it: its priority, its usage of the starved resource and what
/// it requested of it (bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub uid: String,
    pub priority: i32,
    pub usage: i64,
    pub requests: i64,
    /// Static, mirror and system-critical pods are never evicted.
    pub critical: bool,
}

/// Upstream's ranking for memory and disk: pods whose usage exceeds their requests
/// first, then lower priority first, then the largest usage above requests first. The
/// critical ones are left out.
pub fn rank(mut pods: Vec<Candidate>) -> Vec<Candidate> {
    pods.retain(|p| !p.critical);
    pods.sort_by(|a, b| {
        let exceeds = |p: &Candidate| p.usage > p.requests;
        exceeds(b)
            .cmp(&exceeds(a))
            .then(a.priority.cmp(&b.priority))
            .then((b.usage - b.requests).cmp(&(a.usage - a.requests)))
            .then(a.uid.cmp(&b.uid))
    });
    pods
}

/// Whether a pod is critical for eviction: static or mirror pods, and priorities at or
/// above system-cluster-critical's 2000000000 (upstream `IsCriticalPod`).
pub fn is_critical(pod: &Pod) -> bool {
    let ann = pod.metadata.annotations.as_ref();
    let static_or_mirror = ann.is_some_and(|a| {
        a.contains_key(crate::static_pods::CONFIG_MIRROR_ANNOTATION)
            || a.get(crate::static_pods::CONFIG_SOURCE_ANNOTATION)
                .is_some_and(|s| s != "api")
    });
    let priority = pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
    static_or_mirror || priority >= 2_000_000_000
}

/// The resource name of a signal in upstream's eviction message.
fn resource_of(signal: &str) -> &'static str {
    match signal {
        "memory.available" | "allocatableMemory.available" => "memory",
        "pid.available" => "pids",
        s if s.ends_with("inodesFree") => "inodes",
        _ => "ephemeral-storage",
    }
}

/// Upstream's eviction message: `The node was low on resource: memory. Threshold
/// quantity: 100Mi, available: 50Mi. ` followed, per container using the resource, by
/// `Container c was using 300Mi, request is 0, has larger consumption of memory. `.
pub fn eviction_message(
    signal: &str,
    threshold: &str,
    available: &str,
    containers: &[(String, String, String)],
) -> String {
    let resource = resource_of(signal);
    let mut m = format!(
        "The node was low on resource: {resource}. Threshold quantity: {threshold}, available: {available}. "
    );
    for (name, usage, request) in containers {
        m.push_str(&format!(
            "Container {name} was using {usage}, request is {request}, has larger consumption of {resource}. "
        ));
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(pairs: &[(&str, i64, i64)]) -> Observations {
        Observations {
            signals: pairs
                .iter()
                .map(|(s, a, c)| (s.to_string(), (*a, *c)))
                .collect(),
        }
    }

    #[test]
    fn thresholds_by_quantity_and_percentage() {
        let t = EvictionThresholds::parse(
            "memory.available<100Mi,nodefs.available<10%,imagefs.available<15%",
        )
        .unwrap();
        let gib = 1 << 30;
        assert!(thresholds_met(&t, &obs(&[("memory.available", gib, 4 * gib)])).is_empty());
        assert_eq!(
            thresholds_met(
                &t,
                &obs(&[
                    ("memory.available", 50 << 20, 4 * gib),
                    ("nodefs.available", 9 * gib, 100 * gib),
                    ("imagefs.available", 20 * gib, 100 * gib),
                ])
            ),
            ["memory.available", "nodefs.available"]
        );
        // Unknown observations never meet a threshold.
        assert!(thresholds_met(&t, &Observations::default()).is_empty());
    }

    #[test]
    fn pressures_hold_for_the_transition_period() {
        let mut tracker = PressureTracker::default();
        let t0 = Instant::now();
        let period = Duration::from_secs(300);
        let p = tracker.update(&["memory.available".into()], t0, period);
        assert!(p.memory && !p.disk && !p.pid);
        let p = tracker.update(&[], t0 + Duration::from_secs(60), period);
        assert!(p.memory, "still within the transition period");
        let p = tracker.update(&[], t0 + Duration::from_secs(301), period);
        assert!(!p.memory);
        let p = tracker.update(
            &["imagefs.available".into()],
            t0 + Duration::from_secs(302),
            period,
        );
        assert!(p.disk && !p.memory);
        assert_eq!(pressure_of("pid.available"), Some("PIDPressure"));
    }

    fn c(uid: &str, priority: i32, usage: i64, requests: i64) -> Candidate {
        Candidate {
            uid: uid.into(),
            priority,
            usage,
            requests,
            critical: false,
        }
    }

    #[test]
    fn ranking_puts_over_request_low_priority_big_users_first() {
        let mut critical = c("static", -10, 1 << 40, 0);
        critical.critical = true;
        let ranked = rank(vec![
            c("within-requests", 0, 100, 200),
            c("over-high-prio", 1000, 500, 100),
            c("over-small", 0, 150, 100),
            c("over-big", 0, 900, 100),
            critical,
        ]);
        let order: Vec<&str> = ranked.iter().map(|c| c.uid.as_str()).collect();
        assert_eq!(
            order,
            [
                "over-big",
                "over-small",
                "over-high-prio",
                "within-requests"
            ]
        );
    }

    #[test]
    fn critical_pods_and_messages() {
        let mut p = Pod::default();
        assert!(!is_critical(&p));
        p.spec = Some(k8s_openapi::api::core::v1::PodSpec {
            priority: Some(2_000_001_000),
            ..Default::default()
        });
        assert!(is_critical(&p));
        let mut s = Pod::default();
        s.metadata.annotations = Some(
            [(
                crate::static_pods::CONFIG_SOURCE_ANNOTATION.to_string(),
                "file".to_string(),
            )]
            .into(),
        );
        assert!(is_critical(&s));
        assert_eq!(
            eviction_message(
                "memory.available",
                "100Mi",
                "50Mi",
                &[("c".into(), "300Mi".into(), "0".into())]
            ),
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. \
             Container c was using 300Mi, request is 0, has larger consumption of memory. "
        );
        assert!(
            eviction_message("nodefs.inodesFree", "5%", "1k", &[]).contains("resource: inodes.")
        );
        assert!(
            eviction_message("nodefs.available", "10%", "1Gi", &[])
                .contains("resource: ephemeral-storage.")
        );
    }
}
