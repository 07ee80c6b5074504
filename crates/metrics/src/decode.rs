//! A kubelet's `/metrics/resource` page -> one batch of points (upstream
//! metrics-server's `pkg/scraper/client/resource/decode.go`).
//!
//! The page is the Prometheus text exposition format; only what the kubelet writes
//! there is read: comments and blank lines are skipped, each sample line is a metric
//! name, optional `{label="value",...}` (with `\\`, `\"` and `\n` escapes), a value
//! (Go's float syntax, `NaN` and `±Inf` included) and an optional timestamp in
//! milliseconds. A line that does not parse fails the whole page, as upstream's parser
//! does.
//!
//! As upstream: CPU seconds become cumulative nanoseconds (`uint64(value*1e9)`), a
//! point's time is the millisecond stamp of the last usage sample read for it (the
//! scrape's start when a sample has none), `container_start_time_seconds` is the
//! container's start; the node is left out when its time, CPU or memory is zero, and a
//! pod when any of its containers has a zero CPU or memory value.

use std::collections::BTreeMap;

/// One node's or container's sample (upstream `storage.MetricsPoint`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Point {
    /// When the usage was measured, nanoseconds since the epoch (0: unknown).
    pub timestamp_ns: i64,
    /// Cumulative CPU time, nanoseconds.
    pub cpu_ns: u64,
    /// Memory working set, bytes.
    pub memory_bytes: u64,
    /// The container's start, nanoseconds since the epoch (0: unknown; nodes: 0).
    pub start_ns: i64,
}

/// A pod's namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
}

impl PodRef {
    pub fn new(namespace: &str, name: &str) -> PodRef {
        PodRef {
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }
}

/// The containers' points of one pod, by container name.
pub type PodPoints = BTreeMap<String, Point>;

/// What one or more scrapes measured (upstream `storage.MetricsBatch`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Batch {
    pub nodes: BTreeMap<String, Point>,
    pub pods: BTreeMap<PodRef, PodPoints>,
}

impl Batch {
    /// Adds `other`'s points (the scrapes of several nodes into one batch).
    pub fn merge(&mut self, other: Batch) {
        self.nodes.extend(other.nodes);
        for (pod, containers) in other.pods {
            self.pods.entry(pod).or_default().extend(containers);
        }
    }
}

/// A line of the page that is not a sample.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("failed parsing metrics: line {line}: {message}")]
pub struct DecodeError {
    pub line: usize,
    pub message: String,
}

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample<'a> {
    pub name: &'a str,
    pub labels: Vec<(&'a str, String)>,
    pub value: f64,
    pub timestamp_ms: Option<i64>,
}

impl Sample<'_> {
    pub fn label(&self, name: &str) -> &str {
        self.labels
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or_default()
    }
}

fn is_name_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_' || c == b':'
}

fn is_name_char(c: u8) -> bool {
    is_name_start(c) || c.is_ascii_digit()
}

/// Parses one sample line (not a comment, not blank).
pub fn parse_sample(line: &str) -> Result<Sample<'_>, String> {
    let b = line.as_bytes();
    let mut i = 0;
    if b.is_empty() || !is_name_start(b[0]) {
        return Err(format!("invalid metric name in {line:?}"));
    }
    while i < b.len() && is_name_char(b[i]) {
        i += 1;
    }
    let name = &line[..i];
    let mut labels = Vec::new();
    if b.get(i) == Some(&b'{') {
        i += 1;
        loop {
            while b.get(i).is_some_and(|c| *c == b' ' || *c == b'\t') {
                i += 1;
            }
            match b.get(i) {
                Some(b'}') => {
                    i += 1;
                    break;
                }
                Some(c) if is_name_start(*c) => {}
                _ => return Err(format!("invalid label in {line:?}")),
            }
            let start = i;
            while i < b.len() && is_name_char(b[i]) {
                i += 1;
            }
            let key = &line[start..i];
            if b.get(i) != Some(&b'=') || b.get(i + 1) != Some(&b'"') {
                return Err(format!("expected =\" after label {key:?} in {line:?}"));
            }
            i += 2;
            let mut value = String::new();
            loop {
                match b.get(i) {
                    None => return Err(format!("unterminated label value in {line:?}")),
                    Some(b'"') => {
                        i += 1;
                        break;
                    }
                    Some(b'\\') => {
                        match b.get(i + 1) {
                            Some(b'\\') => value.push('\\'),
                            Some(b'"') => value.push('"'),
                            Some(b'n') => value.push('\n'),
                            _ => return Err(format!("invalid escape in {line:?}")),
                        }
                        i += 2;
                    }
                    Some(_) => {
                        // Up to the next quote or backslash, UTF-8 kept whole.
                        let end = line[i..].find(['"', '\\']).map_or(line.len(), |n| i + n);
                        value.push_str(&line[i..end]);
                        i = end;
                    }
                }
            }
            labels.push((key, value));
            while b.get(i).is_some_and(|c| *c == b' ' || *c == b'\t') {
                i += 1;
            }
            match b.get(i) {
                Some(b',') => i += 1,
                Some(b'}') => {}
                _ => return Err(format!("expected , or }} in {line:?}")),
            }
        }
    }
    let mut rest = line[i..].split_ascii_whitespace();
    if !line[i..].starts_with([' ', '\t']) {
        return Err(format!("expected a value after {name:?} in {line:?}"));
    }
    let value = rest
        .next()
        .ok_or_else(|| format!("missing value in {line:?}"))?;
    let value = parse_float(value).ok_or_else(|| format!("invalid value {value:?}"))?;
    let timestamp_ms = match rest.next() {
        None => None,
        Some(ts) => Some(
            ts.parse::<i64>()
                .map_err(|_| format!("invalid timestamp {ts:?}"))?,
        ),
    };
    if rest.next().is_some() {
        return Err(format!("unexpected text after the timestamp in {line:?}"));
    }
    Ok(Sample {
        name,
        labels,
        value,
        timestamp_ms,
    })
}

/// Go's `strconv.ParseFloat` for what Prometheus writes (`NaN`, `+Inf`, `-Inf`, decimal
/// and exponent forms).
fn parse_float(s: &str) -> Option<f64> {
    match s {
        "NaN" => Some(f64::NAN),
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        _ if s
            .bytes()
            .all(|c| c.is_ascii_digit() || b"+-.eE".contains(&c)) =>
        {
            s.parse().ok()
        }
        _ => None,
    }
}

/// Go's `uint64(f)` for the values found here (negative and NaN values are 0).
fn to_u64(f: f64) -> u64 {
    if f.is_nan() || f <= 0.0 { 0 } else { f as u64 }
}

/// The batch of node `node`'s page; samples without a timestamp are stamped
/// `default_ms` (the scrape's start, in milliseconds).
pub fn decode(text: &str, default_ms: i64, node: &str) -> Result<Batch, DecodeError> {
    let mut node_point = Point::default();
    let mut pods: BTreeMap<PodRef, PodPoints> = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim_start();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let sample = parse_sample(line).map_err(|message| DecodeError {
            line: n + 1,
            message,
        })?;
        let ts_ns = sample
            .timestamp_ms
            .unwrap_or(default_ms)
            .saturating_mul(1_000_000);
        match sample.name {
            "node_cpu_usage_seconds_total" => {
                node_point.cpu_ns = to_u64(sample.value * 1e9);
                node_point.timestamp_ns = ts_ns;
            }
            "node_memory_working_set_bytes" => {
                node_point.memory_bytes = to_u64(sample.value);
                node_point.timestamp_ns = ts_ns;
            }
            "node_swap_usage_bytes" => node_point.timestamp_ns = ts_ns,
            "container_cpu_usage_seconds_total"
            | "container_memory_working_set_bytes"
            | "container_swap_usage_bytes"
            | "container_start_time_seconds" => {
                let pod = PodRef::new(sample.label("namespace"), sample.label("pod"));
                let point = pods
                    .entry(pod)
                    .or_default()
                    .entry(sample.label("container").to_string())
                    .or_default();
                match sample.name {
                    "container_cpu_usage_seconds_total" => {
                        point.cpu_ns = to_u64(sample.value * 1e9);
                        point.timestamp_ns = ts_ns;
                    }
                    "container_memory_working_set_bytes" => {
                        point.memory_bytes = to_u64(sample.value);
                        point.timestamp_ns = ts_ns;
                    }
                    "container_swap_usage_bytes" => point.timestamp_ns = ts_ns,
                    _ => point.start_ns = (sample.value * 1e9) as i64,
                }
            }
            _ => {}
        }
    }
    let mut batch = Batch::default();
    if node_point.timestamp_ns == 0 || node_point.cpu_ns == 0 || node_point.memory_bytes == 0 {
        tracing::debug!(node, "failed getting complete node metric");
    } else {
        batch.nodes.insert(node.to_string(), node_point);
    }
    for (pod, containers) in pods {
        let complete = containers
            .values()
            .filter(|p| **p != Point::default())
            .all(|p| p.cpu_ns != 0 && p.memory_bytes != 0);
        if !complete {
            tracing::debug!(
                namespace = pod.namespace,
                pod = pod.name,
                "failed getting complete pod metric"
            );
            continue;
        }
        let containers: PodPoints = containers
            .into_iter()
            .filter(|(_, p)| *p != Point::default())
            .collect();
        batch.pods.insert(pod, containers);
    }
    Ok(batch)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the kubelet's /metrics/resource writes (crates/kubelet/src/resource_metrics.rs).
    const PAGE: &str = r#"# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container="coredns",namespace="kube-system",pod="coredns-55f8f66c8-m5dvr"} 1.5 1700000000000
container_cpu_usage_seconds_total{container="sidecar",namespace="kube-system",pod="coredns-55f8f66c8-m5dvr"} 0.25 1700000000000
# HELP container_memory_working_set_bytes [STABLE] Current working set of the container in bytes
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container="coredns",namespace="kube-system",pod="coredns-55f8f66c8-m5dvr"} 1.2288e+07 1700000000000
container_memory_working_set_bytes{container="sidecar",namespace="kube-system",pod="coredns-55f8f66c8-m5dvr"} 4096 1700000000000
# HELP container_start_time_seconds [STABLE] Start time of the container since unix epoch in seconds
# TYPE container_start_time_seconds gauge
container_start_time_seconds{container="coredns",namespace="kube-system",pod="coredns-55f8f66c8-m5dvr"} 1.6999e+09
# HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node in core-seconds
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total 357.35 1700000000500
# HELP node_memory_working_set_bytes [STABLE] Current working set of the node in bytes
# TYPE node_memory_working_set_bytes gauge
node_memory_working_set_bytes 1.1e+09 1700000000500
# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise
# TYPE resource_scrape_error gauge
resource_scrape_error 0
"#;

    #[test]
    fn samples_parse_with_labels_escapes_and_timestamps() {
        let s = parse_sample(r#"m{a="x\"y\\z\n",b="ü"} 1.5e3 42"#).unwrap();
        assert_eq!(s.name, "m");
        assert_eq!(
            s.labels,
            vec![("a", "x\"y\\z\n".to_string()), ("b", "ü".to_string())]
        );
        assert_eq!((s.value, s.timestamp_ms), (1500.0, Some(42)));
        let s = parse_sample("up 1").unwrap();
        assert_eq!((s.name, s.value, s.timestamp_ms), ("up", 1.0, None));
        assert!(
            parse_sample("x{a=\"1\",} +Inf")
                .unwrap()
                .value
                .is_infinite()
        );
        assert!(parse_sample("x NaN").unwrap().value.is_nan());
        for bad in [
            "x",
            "x{a=1} 1",
            "x{a=\"1\" 1",
            "x 1 2 3",
            "x one",
            "x 1 1.5",
            "1x 1",
            "x{a=\"\\q\"} 1",
        ] {
            assert!(parse_sample(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_kubelet_page_becomes_node_and_container_points() {
        let batch = decode(PAGE, 1, "node-a").unwrap();
        assert_eq!(
            batch.nodes["node-a"],
            Point {
                timestamp_ns: 1_700_000_000_500_000_000,
                cpu_ns: 357_350_000_000,
                memory_bytes: 1_100_000_000,
                start_ns: 0,
            }
        );
        let pod = &batch.pods[&PodRef::new("kube-system", "coredns-55f8f66c8-m5dvr")];
        assert_eq!(pod.len(), 2);
        assert_eq!(
            pod["coredns"],
            Point {
                timestamp_ns: 1_700_000_000_000_000_000,
                cpu_ns: 1_500_000_000,
                memory_bytes: 12_288_000,
                start_ns: 1_699_900_000_000_000_000,
            }
        );
        assert_eq!(pod["sidecar"].cpu_ns, 250_000_000);
    }

    #[test]
    fn incomplete_points_are_dropped_as_upstream() {
        // A node without memory, a pod with one container lacking cpu.
        let page = "node_cpu_usage_seconds_total 1 1000\n\
            container_cpu_usage_seconds_total{container=\"a\",namespace=\"ns\",pod=\"p\"} 1 1000\n\
            container_memory_working_set_bytes{container=\"a\",namespace=\"ns\",pod=\"p\"} 10 1000\n\
            container_memory_working_set_bytes{container=\"b\",namespace=\"ns\",pod=\"p\"} 10 1000\n\
            container_cpu_usage_seconds_total{container=\"a\",namespace=\"ns\",pod=\"q\"} 1 1000\n\
            container_memory_working_set_bytes{container=\"a\",namespace=\"ns\",pod=\"q\"} 10 1000\n";
        let batch = decode(page, 1, "n").unwrap();
        assert!(batch.nodes.is_empty());
        assert_eq!(
            batch.pods.keys().collect::<Vec<_>>(),
            vec![&PodRef::new("ns", "q")]
        );
        // Samples without a stamp take the scrape's time.
        let batch = decode(
            "node_cpu_usage_seconds_total 1\nnode_memory_working_set_bytes 2\n",
            7,
            "n",
        )
        .unwrap();
        assert_eq!(batch.nodes["n"].timestamp_ns, 7_000_000);
        let err = decode("ok 1\nbad{ 1\n", 1, "n").unwrap_err();
        assert_eq!(err.line, 2);
    }
}
