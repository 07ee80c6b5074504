//! `/metrics/resource` (upstream `pkg/kubelet/metrics/collectors/resource_metrics.go`):
//! the node's, pods' and containers' CPU time, memory working set and swap, and the
//! containers' start times, in the Prometheus text format; what metrics-server scrapes
//! for `kubectl top` and the HorizontalPodAutoscaler. The values are the summary's
//! ([`crate::stats::cpu_and_memory`]); rendering is pure.
//!
//! As upstream's stability framework prints them: `[STABLE]`/`[ALPHA]` in each HELP,
//! families sorted by name and only when they have a sample, labels sorted by name,
//! samples by label values, values as Go's text encoder writes them
//! ([`crate::metrics::format_float`]), and usage samples stamped with their stats' time
//! in milliseconds (metrics-server computes CPU rates from those stamps). Upstream's
//! `scrape_error`, deprecated in 1.29, is hidden in 1.33 and not written.

use std::fmt::Write;

use crate::metrics::{escape, format_float};
use crate::stats::{StatsTime, Summary};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stability {
    Alpha,
    Stable,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
}

/// One metric family's description (upstream's `metrics.NewDesc`).
struct Desc {
    name: &'static str,
    help: &'static str,
    kind: Kind,
    stability: Stability,
}

const NODE_CPU: Desc = Desc {
    name: "node_cpu_usage_seconds_total",
    help: "Cumulative cpu time consumed by the node in core-seconds",
    kind: Kind::Counter,
    stability: Stability::Stable,
};
const NODE_MEMORY: Desc = Desc {
    name: "node_memory_working_set_bytes",
    help: "Current working set of the node in bytes",
    kind: Kind::Gauge,
    stability: Stability::Stable,
};
const NODE_SWAP: Desc = Desc {
    name: "node_swap_usage_bytes",
    help: "Current swap usage of the node in bytes. Reported only on non-windows systems",
    kind: Kind::Gauge,
    stability: Stability::Alpha,
};
const CONTAINER_CPU: Desc = Desc {
    name: "container_cpu_usage_seconds_total",
    help: "Cumulative cpu time consumed by the container in core-seconds",
    kind: Kind::Counter,
    stability: Stability::Stable,
};
const CONTAINER_MEMORY: Desc = Desc {
    name: "container_memory_working_set_bytes",
    help: "Current working set of the container in bytes",
    kind: Kind::Gauge,
    stability: Stability::Stable,
};
const CONTAINER_SWAP: Desc = Desc {
    name: "container_swap_usage_bytes",
    help: "Current amount of the container swap usage in bytes. Reported only on non-windows systems",
    kind: Kind::Gauge,
    stability: Stability::Alpha,
};
const CONTAINER_START: Desc = Desc {
    name: "container_start_time_seconds",
    help: "Start time of the container since unix epoch in seconds",
    kind: Kind::Gauge,
    stability: Stability::Stable,
};
const POD_CPU: Desc = Desc {
    name: "pod_cpu_usage_seconds_total",
    help: "Cumulative cpu time consumed by the pod in core-seconds",
    kind: Kind::Counter,
    stability: Stability::Stable,
};
const POD_MEMORY: Desc = Desc {
    name: "pod_memory_working_set_bytes",
    help: "Current working set of the pod in bytes",
    kind: Kind::Gauge,
    stability: Stability::Stable,
};
const POD_SWAP: Desc = Desc {
    name: "pod_swap_usage_bytes",
    help: "Current amount of the pod swap usage in bytes. Reported only on non-windows systems",
    kind: Kind::Gauge,
    stability: Stability::Alpha,
};
const SCRAPE_ERROR: Desc = Desc {
    name: "resource_scrape_error",
    help: "1 if there was an error while getting container metrics, 0 otherwise",
    kind: Kind::Gauge,
    stability: Stability::Stable,
};

/// One sample: label pairs in label-name order, value, optional timestamp (ms).
struct Sample {
    labels: Vec<(&'static str, String)>,
    value: f64,
    timestamp_ms: Option<i64>,
}

/// The samples collected for each family, in the order upstream describes them.
struct Page {
    families: Vec<(&'static Desc, Vec<Sample>)>,
}

impl Page {
    fn push(
        &mut self,
        desc: &'static Desc,
        labels: Vec<(&'static str, String)>,
        value: f64,
        time: Option<&StatsTime>,
    ) {
        let sample = Sample {
            labels,
            value,
            timestamp_ms: time.map(|t| t.0.0.as_millisecond()),
        };
        match self.families.iter_mut().find(|(d, _)| d.name == desc.name) {
            Some((_, samples)) => samples.push(sample),
            None => self.families.push((desc, vec![sample])),
        }
    }

    fn render(mut self) -> String {
        self.families.sort_by_key(|(d, _)| d.name);
        let mut out = String::new();
        for (desc, mut samples) in self.families {
            // Upstream's registry sorts by label values, then timestamp, and drops a
            // second sample with the same labels (ContinueOnError).
            samples.sort_by(|a, b| {
                let va = a.labels.iter().map(|(_, v)| v);
                let vb = b.labels.iter().map(|(_, v)| v);
                va.cmp(vb).then(a.timestamp_ms.cmp(&b.timestamp_ms))
            });
            samples.dedup_by(|b, a| a.labels == b.labels);
            let stability = match desc.stability {
                Stability::Alpha => "ALPHA",
                Stability::Stable => "STABLE",
            };
            let kind = match desc.kind {
                Kind::Counter => "counter",
                Kind::Gauge => "gauge",
            };
            let _ = writeln!(out, "# HELP {} [{stability}] {}", desc.name, desc.help);
            let _ = writeln!(out, "# TYPE {} {kind}", desc.name);
            for s in samples {
                out.push_str(desc.name);
                if !s.labels.is_empty() {
                    let labels: Vec<String> = s
                        .labels
                        .iter()
                        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                        .collect();
                    let _ = write!(out, "{{{}}}", labels.join(","));
                }
                let _ = write!(out, " {}", format_float(s.value));
                if let Some(ts) = s.timestamp_ms {
                    let _ = write!(out, " {ts}");
                }
                out.push('\n');
            }
        }
        out
    }
}

fn seconds(nanos: u64) -> f64 {
    nanos as f64 / 1e9
}

/// The `/metrics/resource` page of `stats` (upstream `CollectWithStability`); `None`
/// when the stats could not be had, which leaves only `resource_scrape_error 1`.
pub fn render(stats: Option<&Summary>) -> String {
    let mut page = Page { families: vec![] };
    let Some(stats) = stats else {
        page.push(&SCRAPE_ERROR, vec![], 1.0, None);
        return page.render();
    };
    let node = &stats.node;
    if let Some(cpu) = &node.cpu
        && let Some(n) = cpu.usage_core_nano_seconds
    {
        page.push(&NODE_CPU, vec![], seconds(n), Some(&cpu.time));
    }
    if let Some(mem) = &node.memory
        && let Some(ws) = mem.working_set_bytes
    {
        page.push(&NODE_MEMORY, vec![], ws as f64, Some(&mem.time));
    }
    if let Some(swap) = &node.swap
        && let Some(used) = swap.swap_usage_bytes
    {
        page.push(&NODE_SWAP, vec![], used as f64, Some(&swap.time));
    }
    for pod in &stats.pods {
        let (name, ns) = (&pod.pod_ref.name, &pod.pod_ref.namespace);
        for c in &pod.containers {
            let labels = || {
                vec![
                    ("container", c.name.clone()),
                    ("namespace", ns.clone()),
                    ("pod", name.clone()),
                ]
            };
            if let Some(start) = &c.start_time {
                let nanos = start.0.as_nanosecond();
                if nanos >= 1_000_000_000 {
                    page.push(&CONTAINER_START, labels(), nanos as f64 / 1e9, None);
                }
            }
            if let Some(cpu) = &c.cpu
                && let Some(n) = cpu.usage_core_nano_seconds
            {
                page.push(&CONTAINER_CPU, labels(), seconds(n), Some(&cpu.time));
            }
            if let Some(mem) = &c.memory
                && let Some(ws) = mem.working_set_bytes
            {
                page.push(&CONTAINER_MEMORY, labels(), ws as f64, Some(&mem.time));
            }
            if let Some(swap) = &c.swap
                && let Some(used) = swap.swap_usage_bytes
            {
                page.push(&CONTAINER_SWAP, labels(), used as f64, Some(&swap.time));
            }
        }
        let labels = || vec![("namespace", ns.clone()), ("pod", name.clone())];
        if let Some(cpu) = &pod.cpu
            && let Some(n) = cpu.usage_core_nano_seconds
        {
            page.push(&POD_CPU, labels(), seconds(n), Some(&cpu.time));
        }
        if let Some(mem) = &pod.memory
            && let Some(ws) = mem.working_set_bytes
        {
            page.push(&POD_MEMORY, labels(), ws as f64, Some(&mem.time));
        }
        if let Some(swap) = &pod.swap
            && let Some(used) = swap.swap_usage_bytes
        {
            page.push(&POD_SWAP, labels(), used as f64, Some(&swap.time));
        }
    }
    page.push(&SCRAPE_ERROR, vec![], 0.0, None);
    page.render()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::{SignedDuration, Timestamp};

    use super::*;
    use crate::stats::{
        ContainerStats, CpuStats, MemoryStats, NodeStats, PodReference, PodStats, SwapStats,
    };

    /// 2021-06-23 05:11:18.302091597 +0800, upstream's test instant.
    fn instant() -> Timestamp {
        Timestamp::from_nanosecond(1_624_396_278_302_091_597).unwrap()
    }

    fn at(offset_secs: i64) -> StatsTime {
        StatsTime(Time(instant() + SignedDuration::from_secs(offset_secs)))
    }

    fn cpu(nanos: Option<u64>) -> Option<CpuStats> {
        Some(CpuStats {
            time: at(0),
            usage_nano_cores: None,
            usage_core_nano_seconds: nanos,
        })
    }

    fn memory(ws: Option<u64>) -> Option<MemoryStats> {
        Some(MemoryStats {
            time: at(0),
            working_set_bytes: ws,
            usage_bytes: Some(2000),
            ..Default::default()
        })
    }

    fn container(name: &str, started: i64, swap: Option<u64>) -> ContainerStats {
        ContainerStats {
            name: name.into(),
            start_time: Some(Time(instant() + SignedDuration::from_secs(started))),
            cpu: cpu(Some(10_000_000_000)),
            memory: memory(Some(1000)),
            swap: swap.map(|s| SwapStats {
                time: at(0),
                swap_available_bytes: Some(9000),
                swap_usage_bytes: Some(s),
            }),
            ..Default::default()
        }
    }

    fn pod(name: &str, ns: &str, containers: Vec<ContainerStats>) -> PodStats {
        PodStats {
            pod_ref: PodReference {
                name: name.into(),
                namespace: ns.into(),
                uid: format!("{ns}-{name}"),
            },
            containers,
            ..Default::default()
        }
    }

    const SCRAPE_OK: &str = "\
# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise
# TYPE resource_scrape_error gauge
resource_scrape_error 0
";

    #[test]
    fn an_error_is_only_the_scrape_error() {
        assert_eq!(
            render(None),
            "\
# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise
# TYPE resource_scrape_error gauge
resource_scrape_error 1
"
        );
        assert_eq!(render(Some(&Summary::default())), SCRAPE_OK);
    }

    #[test]
    fn node_metrics_with_their_own_timestamps() {
        let s = Summary {
            node: NodeStats {
                cpu: cpu(Some(10_000_000_000)),
                memory: memory(Some(1000)),
                swap: Some(SwapStats {
                    time: at(10),
                    swap_available_bytes: None,
                    swap_usage_bytes: Some(500),
                }),
                ..Default::default()
            },
            pods: vec![],
        };
        assert_eq!(
            render(Some(&s)),
            "\
# HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node in core-seconds
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total 10 1624396278302
# HELP node_memory_working_set_bytes [STABLE] Current working set of the node in bytes
# TYPE node_memory_working_set_bytes gauge
node_memory_working_set_bytes 1000 1624396278302
# HELP node_swap_usage_bytes [ALPHA] Current swap usage of the node in bytes. Reported only on non-windows systems
# TYPE node_swap_usage_bytes gauge
node_swap_usage_bytes 500 1624396288302
"
            .to_owned()
                + SCRAPE_OK
        );
        // Stats without the values leave their families out.
        let s = Summary {
            node: NodeStats {
                cpu: cpu(None),
                memory: memory(None),
                ..Default::default()
            },
            pods: vec![],
        };
        assert_eq!(render(Some(&s)), SCRAPE_OK);
    }

    #[test]
    fn containers_of_pods_in_namespaces_sorted_by_labels() {
        let s = Summary {
            node: NodeStats::default(),
            pods: vec![
                pod(
                    "pod_a",
                    "namespace_a",
                    vec![
                        container("container_a", -30, Some(1000)),
                        container("container_b", -120, None),
                    ],
                ),
                pod(
                    "pod_b",
                    "namespace_b",
                    vec![container("container_a", -600, None)],
                ),
            ],
        };
        assert_eq!(
            render(Some(&s)),
            "\
# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container=\"container_a\",namespace=\"namespace_a\",pod=\"pod_a\"} 10 1624396278302
container_cpu_usage_seconds_total{container=\"container_a\",namespace=\"namespace_b\",pod=\"pod_b\"} 10 1624396278302
container_cpu_usage_seconds_total{container=\"container_b\",namespace=\"namespace_a\",pod=\"pod_a\"} 10 1624396278302
# HELP container_memory_working_set_bytes [STABLE] Current working set of the container in bytes
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container=\"container_a\",namespace=\"namespace_a\",pod=\"pod_a\"} 1000 1624396278302
container_memory_working_set_bytes{container=\"container_a\",namespace=\"namespace_b\",pod=\"pod_b\"} 1000 1624396278302
container_memory_working_set_bytes{container=\"container_b\",namespace=\"namespace_a\",pod=\"pod_a\"} 1000 1624396278302
# HELP container_start_time_seconds [STABLE] Start time of the container since unix epoch in seconds
# TYPE container_start_time_seconds gauge
container_start_time_seconds{container=\"container_a\",namespace=\"namespace_a\",pod=\"pod_a\"} 1.6243962483020916e+09
container_start_time_seconds{container=\"container_a\",namespace=\"namespace_b\",pod=\"pod_b\"} 1.6243956783020916e+09
container_start_time_seconds{container=\"container_b\",namespace=\"namespace_a\",pod=\"pod_a\"} 1.6243961583020916e+09
# HELP container_swap_usage_bytes [ALPHA] Current amount of the container swap usage in bytes. Reported only on non-windows systems
# TYPE container_swap_usage_bytes gauge
container_swap_usage_bytes{container=\"container_a\",namespace=\"namespace_a\",pod=\"pod_a\"} 1000 1624396278302
"
            .to_owned()
                + SCRAPE_OK
        );
    }

    #[test]
    fn containers_without_values_or_start_time() {
        let mut empty = container("container_a", -30, None);
        empty.cpu = cpu(None);
        empty.memory = memory(None);
        let mut unstarted = container("container_a", 0, None);
        unstarted.start_time = Some(Time(
            Timestamp::from_nanosecond(-1_624_396_278_302_091_597).unwrap(),
        ));
        let s = Summary {
            node: NodeStats::default(),
            pods: vec![
                pod("pod_a", "namespace_a", vec![empty]),
                pod("pod_b", "namespace_b", vec![unstarted]),
            ],
        };
        assert_eq!(
            render(Some(&s)),
            "\
# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container=\"container_a\",namespace=\"namespace_b\",pod=\"pod_b\"} 10 1624396278302
# HELP container_memory_working_set_bytes [STABLE] Current working set of the container in bytes
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container=\"container_a\",namespace=\"namespace_b\",pod=\"pod_b\"} 1000 1624396278302
# HELP container_start_time_seconds [STABLE] Start time of the container since unix epoch in seconds
# TYPE container_start_time_seconds gauge
container_start_time_seconds{container=\"container_a\",namespace=\"namespace_a\",pod=\"pod_a\"} 1.6243962483020916e+09
"
            .to_owned()
                + SCRAPE_OK
        );
    }

    #[test]
    fn pod_metrics_large_values_and_escaping() {
        let mut p = pod("pod_a", "namespace_a", vec![]);
        p.cpu = cpu(Some(10_000_000_000));
        p.memory = memory(Some(12_345_678));
        p.swap = Some(SwapStats {
            time: at(0),
            swap_available_bytes: None,
            swap_usage_bytes: Some(5000),
        });
        let mut q = pod("we\"ird\\", "namespace_a", vec![]);
        q.cpu = cpu(Some(1_500_000));
        let s = Summary {
            node: NodeStats::default(),
            pods: vec![p, q],
        };
        assert_eq!(
            render(Some(&s)),
            "\
# HELP pod_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the pod in core-seconds
# TYPE pod_cpu_usage_seconds_total counter
pod_cpu_usage_seconds_total{namespace=\"namespace_a\",pod=\"pod_a\"} 10 1624396278302
pod_cpu_usage_seconds_total{namespace=\"namespace_a\",pod=\"we\\\"ird\\\\\"} 0.0015 1624396278302
# HELP pod_memory_working_set_bytes [STABLE] Current working set of the pod in bytes
# TYPE pod_memory_working_set_bytes gauge
pod_memory_working_set_bytes{namespace=\"namespace_a\",pod=\"pod_a\"} 1.2345678e+07 1624396278302
# HELP pod_swap_usage_bytes [ALPHA] Current amount of the pod swap usage in bytes. Reported only on non-windows systems
# TYPE pod_swap_usage_bytes gauge
pod_swap_usage_bytes{namespace=\"namespace_a\",pod=\"pod_a\"} 5000 1624396278302
"
            .to_owned()
                + SCRAPE_OK
        );
    }

    #[test]
    fn a_second_sample_with_the_same_labels_is_dropped() {
        let a = pod("p", "ns", vec![container("c", -30, None)]);
        let mut b = a.clone();
        b.pod_ref.uid = "other".into();
        b.containers[0].memory = memory(Some(7));
        let page = render(Some(&Summary {
            node: NodeStats::default(),
            pods: vec![a, b],
        }));
        let lines: Vec<&str> = page
            .lines()
            .filter(|l| l.starts_with("container_memory_working_set_bytes{"))
            .collect();
        assert_eq!(lines.len(), 1, "{page}");
    }
}
