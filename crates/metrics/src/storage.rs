//! The last two points of every node and container, and the usage they give (upstream
//! metrics-server's `pkg/storage`): CPU is the rate between two cumulative samples over
//! the window between their timestamps, memory the last working set. A node or pod
//! without two points is not reported.
//!
//! As upstream, a container that started less than one metric resolution (but at least
//! ten seconds) before its first point gets a synthetic previous point at its start
//! with zero CPU, so a fresh pod is reported after one scrape; a point that is not
//! newer than the stored one keeps the stored previous point; a point of a container
//! that restarted (started after the stored point) starts over.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::decode::{Batch, PodPoints, PodRef, Point};

/// The youngest a container may be for its start to serve as its previous point
/// (upstream `freshContainerMinMetricsResolution`).
pub const FRESH_CONTAINER_MIN_RESOLUTION: Duration = Duration::from_secs(10);

/// One measured usage (upstream `resourceUsage`'s answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub cpu_nanocores: u64,
    pub memory_bytes: u64,
    /// The last point's time, nanoseconds since the epoch.
    pub timestamp_ns: i64,
    /// Between the two points.
    pub window_ns: i64,
}

/// The usage between two points of one node or container.
pub fn resource_usage(last: &Point, prev: &Point) -> Result<Usage, String> {
    if last.cpu_ns < prev.cpu_ns {
        return Err("unexpected decrease in cumulative CPU usage value".into());
    }
    let window_ns = last.timestamp_ns - prev.timestamp_ns;
    if window_ns <= 0 {
        return Err("points are not ordered in time".into());
    }
    let rate = (last.cpu_ns - prev.cpu_ns) as f64 / (window_ns as f64 / 1e9);
    Ok(Usage {
        cpu_nanocores: rate as u64,
        memory_bytes: last.memory_bytes,
        timestamp_ns: last.timestamp_ns,
        window_ns,
    })
}

/// A pod's containers' usage (by container name), its time and its window.
pub type PodUsage = (Vec<(String, Usage)>, i64, i64);

/// Nodes' and pods' last and previous points.
#[derive(Debug, Clone, Default)]
pub struct Storage {
    resolution: Duration,
    nodes_last: BTreeMap<String, Point>,
    nodes_prev: BTreeMap<String, Point>,
    pods_last: BTreeMap<PodRef, PodPoints>,
    pods_prev: BTreeMap<PodRef, PodPoints>,
    stored: bool,
}

impl Storage {
    /// A storage for points `resolution` apart (`--metric-resolution`).
    pub fn new(resolution: Duration) -> Storage {
        Storage {
            resolution,
            ..Default::default()
        }
    }

    /// Whether a batch was stored (upstream's `metric-storage-ready` check).
    pub fn ready(&self) -> bool {
        self.stored
    }

    /// Replaces the last points with `batch`'s, moving the ones they follow to previous.
    pub fn store(&mut self, batch: Batch) {
        self.store_nodes(batch.nodes);
        self.store_pods(batch.pods);
        self.stored = true;
    }

    fn store_nodes(&mut self, nodes: BTreeMap<String, Point>) {
        let mut prev = BTreeMap::new();
        for (name, new) in &nodes {
            if let Some(last) = self.nodes_last.get(name) {
                if new.timestamp_ns > last.timestamp_ns {
                    prev.insert(name.clone(), *last);
                } else if let Some(p) = self.nodes_prev.get(name)
                    && p.timestamp_ns < new.timestamp_ns
                {
                    prev.insert(name.clone(), *p);
                }
            }
        }
        self.nodes_last = nodes;
        self.nodes_prev = prev;
    }

    fn store_pods(&mut self, pods: BTreeMap<PodRef, PodPoints>) {
        let resolution = i64::try_from(self.resolution.as_nanos()).unwrap_or(i64::MAX);
        let fresh_min = FRESH_CONTAINER_MIN_RESOLUTION.as_nanos() as i64;
        let mut prev_pods = BTreeMap::new();
        for (pod, containers) in &pods {
            let mut prev = PodPoints::new();
            for (name, new) in containers {
                let age = new.timestamp_ns - new.start_ns;
                if new.start_ns > 0
                    && new.start_ns < new.timestamp_ns
                    && age < resolution
                    && age >= fresh_min
                {
                    let start = Point {
                        timestamp_ns: new.start_ns,
                        cpu_ns: 0,
                        ..*new
                    };
                    prev.insert(name.clone(), start);
                } else if let Some(last) = self.pods_last.get(pod).and_then(|p| p.get(name))
                    && new.start_ns < last.timestamp_ns
                {
                    if new.timestamp_ns > last.timestamp_ns {
                        prev.insert(name.clone(), *last);
                    } else if let Some(p) = self.pods_prev.get(pod).and_then(|p| p.get(name))
                        && p.timestamp_ns < new.timestamp_ns
                    {
                        prev.insert(name.clone(), *p);
                    }
                }
            }
            if !prev.is_empty() {
                prev_pods.insert(pod.clone(), prev);
            }
        }
        self.pods_last = pods;
        self.pods_prev = prev_pods;
    }

    /// The usage of node `name`, when it has two points.
    pub fn node(&self, name: &str) -> Option<Usage> {
        let last = self.nodes_last.get(name)?;
        let prev = self.nodes_prev.get(name)?;
        resource_usage(last, prev)
            .map_err(|e| tracing::debug!(node = name, error = e, "skipping node usage"))
            .ok()
    }

    /// The usage of each container of `pod` (by container name) and the pod's time and
    /// window (its containers' earliest), when every container has two points.
    pub fn pod(&self, pod: &PodRef) -> Option<PodUsage> {
        let last = self.pods_last.get(pod)?;
        let prev = self.pods_prev.get(pod)?;
        let mut containers = Vec::with_capacity(last.len());
        let mut earliest: Option<(i64, i64)> = None;
        for (name, l) in last {
            let p = prev.get(name)?;
            match resource_usage(l, p) {
                Ok(u) => {
                    if earliest.is_none_or(|(ts, _)| ts > u.timestamp_ns) {
                        earliest = Some((u.timestamp_ns, u.window_ns));
                    }
                    containers.push((name.clone(), u));
                }
                Err(e) => {
                    tracing::debug!(
                        container = name,
                        pod = pod.name,
                        error = e,
                        "skipping container usage"
                    );
                }
            }
        }
        let (ts, window) = earliest.unwrap_or_default();
        Some((containers, ts, window))
    }
}

const DECIMAL_SUFFIXES: [(i32, &str); 10] = [
    (-9, "n"),
    (-6, "u"),
    (-3, "m"),
    (0, ""),
    (3, "k"),
    (6, "M"),
    (9, "G"),
    (12, "T"),
    (15, "P"),
    (18, "E"),
];

/// `value × 10^exponent` as apimachinery's canonical DecimalSI string (trailing zeros
/// folded into the suffix, the exponent a multiple of three).
fn decimal_si(value: u64, exponent: i32) -> String {
    if value == 0 {
        return "0".into();
    }
    let (mut v, mut e) = (u128::from(value), exponent);
    while v % 10 == 0 {
        v /= 10;
        e += 1;
    }
    while e.rem_euclid(3) != 0 {
        v *= 10;
        e -= 1;
    }
    match DECIMAL_SUFFIXES.iter().find(|(x, _)| *x == e) {
        Some((_, s)) => format!("{v}{s}"),
        None => format!("{v}e{e}"),
    }
}

/// CPU in cores as upstream's `NewScaledQuantity(nanocores, -9)` prints it: `"123456789n"`,
/// `"5m"`, `"2"`.
pub fn cpu_quantity(nanocores: u64) -> String {
    decimal_si(nanocores, -9)
}

/// Memory in bytes as a BinarySI quantity prints it: `"12Ki"`, `"3Mi"`, and DecimalSI
/// under 1024 (`"1k"`, `"512"`).
pub fn memory_quantity(bytes: u64) -> String {
    ferrokube_apimachinery::quantity::format_milli(i128::from(bytes) * 1000, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    fn point(ts_s: i64, cpu_s: f64, mem: u64) -> Point {
        Point {
            timestamp_ns: ts_s * S,
            cpu_ns: (cpu_s * 1e9) as u64,
            memory_bytes: mem,
            start_ns: S,
        }
    }

    fn node_batch(name: &str, p: Point) -> Batch {
        let mut b = Batch::default();
        b.nodes.insert(name.into(), p);
        b
    }

    #[test]
    fn usage_is_the_rate_over_the_window() {
        let u = resource_usage(&point(115, 3.0, 2048), &point(100, 1.5, 1024)).unwrap();
        assert_eq!(
            u,
            Usage {
                cpu_nanocores: 100_000_000,
                memory_bytes: 2048,
                timestamp_ns: 115 * S,
                window_ns: 15 * S,
            }
        );
        assert!(resource_usage(&point(115, 1.0, 1), &point(100, 2.0, 1)).is_err());
        assert!(resource_usage(&point(100, 2.0, 1), &point(100, 1.0, 1)).is_err());
    }

    #[test]
    fn nodes_are_reported_from_their_second_point() {
        let mut st = Storage::new(Duration::from_secs(15));
        assert!(!st.ready());
        st.store(node_batch("a", point(100, 10.0, 500)));
        assert!(st.ready());
        assert_eq!(st.node("a"), None);
        st.store(node_batch("a", point(115, 13.0, 600)));
        let u = st.node("a").unwrap();
        assert_eq!((u.cpu_nanocores, u.memory_bytes), (200_000_000, 600));
        assert_eq!(u.window_ns, 15 * S);
        // The same point again keeps the previous one.
        st.store(node_batch("a", point(115, 13.0, 600)));
        assert_eq!(st.node("a").unwrap().cpu_nanocores, 200_000_000);
        // A node missing from a batch is forgotten.
        st.store(Batch::default());
        assert_eq!(st.node("a"), None);
    }

    fn pod_batch(containers: &[(&str, Point)]) -> Batch {
        let mut b = Batch::default();
        b.pods.insert(
            PodRef::new("ns", "p"),
            containers
                .iter()
                .map(|(n, p)| (n.to_string(), *p))
                .collect(),
        );
        b
    }

    #[test]
    fn pods_need_two_points_of_every_container() {
        let pod = PodRef::new("ns", "p");
        let mut st = Storage::new(Duration::from_secs(15));
        st.store(pod_batch(&[("a", point(100, 1.0, 4096))]));
        assert_eq!(st.pod(&pod), None);
        st.store(pod_batch(&[
            ("a", point(110, 2.0, 8192)),
            ("b", point(112, 1.0, 1)),
        ]));
        // b has one point only: the pod is not reported.
        assert_eq!(st.pod(&pod), None);
        st.store(pod_batch(&[
            ("a", point(120, 3.0, 8192)),
            ("b", point(122, 1.5, 1)),
        ]));
        let (containers, ts, window) = st.pod(&pod).unwrap();
        assert_eq!(containers.len(), 2);
        assert_eq!(containers[0].0, "a");
        assert_eq!(containers[0].1.cpu_nanocores, 100_000_000);
        assert_eq!(containers[1].1.cpu_nanocores, 50_000_000);
        // The earliest container's time and window.
        assert_eq!((ts, window), (120 * S, 10 * S));
    }

    #[test]
    fn a_fresh_container_is_measured_from_its_start() {
        let pod = PodRef::new("ns", "p");
        let mut st = Storage::new(Duration::from_secs(60));
        let p = Point {
            timestamp_ns: 130 * S,
            cpu_ns: 3 * S as u64,
            memory_bytes: 1 << 20,
            start_ns: 100 * S,
        };
        st.store(pod_batch(&[("a", p)]));
        let (containers, _, window) = st.pod(&pod).unwrap();
        assert_eq!(containers[0].1.cpu_nanocores, 100_000_000);
        assert_eq!(window, 30 * S);
        // Younger than ten seconds: wait for a second point.
        let mut st = Storage::new(Duration::from_secs(60));
        st.store(pod_batch(&[(
            "a",
            Point {
                start_ns: 125 * S,
                ..p
            },
        )]));
        assert_eq!(st.pod(&pod), None);
    }

    #[test]
    fn a_restarted_container_starts_over() {
        let pod = PodRef::new("ns", "p");
        let mut st = Storage::new(Duration::from_secs(15));
        st.store(pod_batch(&[("a", point(100, 5.0, 1))]));
        let restarted = Point {
            start_ns: 110 * S,
            ..point(115, 0.5, 1)
        };
        st.store(pod_batch(&[("a", restarted)]));
        assert_eq!(st.pod(&pod), None);
    }

    #[test]
    fn quantities_print_as_upstream() {
        assert_eq!(cpu_quantity(0), "0");
        assert_eq!(cpu_quantity(123_456_789), "123456789n");
        assert_eq!(cpu_quantity(5_000_000), "5m");
        assert_eq!(cpu_quantity(120_000), "120u");
        assert_eq!(cpu_quantity(2_000_000_000), "2");
        assert_eq!(cpu_quantity(1_500_000_000), "1500m");
        assert_eq!(memory_quantity(12_288), "12Ki");
        assert_eq!(memory_quantity(3 << 20), "3Mi");
        assert_eq!(memory_quantity(1_100_000_000), "1100000000");
        assert_eq!(memory_quantity(1_099_999_232), "1074218Ki");
        assert_eq!(memory_quantity(1025), "1025");
        assert_eq!(memory_quantity(1000), "1k");
        assert_eq!(memory_quantity(0), "0");
    }
}
