//! Metrics in the Prometheus text format, as upstream's `k8s.io/component-base/metrics`
//! records them: counters, gauges and fixed-bucket histograms, alone or in families
//! keyed by label values.
//!
//! A family's series are found by `&str` label values without allocating, so that a
//! family can be recorded on every request; a series costs an allocation only the
//! first time its label values are seen. Rendering sorts the series by label values,
//! so that a page reads the same from one scrape to the next.

use std::fmt::Write;
use std::hash::{BuildHasher, Hash, Hasher};
use std::time::{SystemTime, UNIX_EPOCH};

pub mod held_body;
pub mod process;

use hashbrown::DefaultHashBuilder;
use hashbrown::HashTable;
use parking_lot::Mutex;

/// Upstream's `metrics.ExponentialBuckets(start, factor, N)`: `N` bounds from `start`,
/// each `factor` times the one before.
pub const fn exponential_buckets<const N: usize>(start: f64, factor: f64) -> [f64; N] {
    let mut bounds = [0.0; N];
    let mut bound = start;
    let mut i = 0;
    while i < N {
        bounds[i] = bound;
        bound *= factor;
        i += 1;
    }
    bounds
}

/// Upstream's `prometheus.DefBuckets`.
pub const DEFAULT_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Seconds since the Unix epoch, the value of upstream's `SetToCurrentTime`.
pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Metrics one part of a process keeps, written into the page of the process that
/// serves them (e.g. the encryption metrics on kube-apiserver's `/metrics`).
pub trait Collector: Send + Sync + std::fmt::Debug {
    /// Appends its families in the text format.
    fn collect(&self, out: &mut String);
}

/// One series' value, and how it is written.
pub trait Metric: Clone + Send {
    /// The `# TYPE` word.
    const TYPE: &'static str;

    /// The sample lines of one series named `name`, with `labels` already rendered
    /// (`a="x",b="y"`, or empty).
    fn write_samples(&self, out: &mut String, name: &str, labels: &str);
}

/// A monotonic count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counter(pub u64);

impl Metric for Counter {
    const TYPE: &'static str = "counter";

    fn write_samples(&self, out: &mut String, name: &str, labels: &str) {
        let _ = writeln!(out, "{name}{} {}", braced(labels), self.0);
    }
}

/// A value that goes up and down.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Gauge(pub f64);

impl Metric for Gauge {
    const TYPE: &'static str = "gauge";

    fn write_samples(&self, out: &mut String, name: &str, labels: &str) {
        let _ = writeln!(out, "{name}{} {}", braced(labels), self.0);
    }
}

/// A histogram with fixed bucket bounds.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    bounds: &'static [f64],
    /// Per bucket, not cumulative: an observation touches one count.
    counts: Box<[u64]>,
    sum: f64,
    count: u64,
}

impl Histogram {
    pub fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: vec![0; bounds.len()].into_boxed_slice(),
            sum: 0.0,
            count: 0,
        }
    }

    pub fn observe(&mut self, value: f64) {
        self.sum += value;
        self.count += 1;
        if let Some(i) = self.bounds.iter().position(|bound| value <= *bound) {
            self.counts[i] += 1;
        }
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn sum(&self) -> f64 {
        self.sum
    }

    /// `(upper bound, observations at or under it)` per bucket, without `+Inf`.
    pub fn cumulative(&self) -> impl Iterator<Item = (f64, u64)> + '_ {
        self.bounds
            .iter()
            .zip(self.counts.iter())
            .scan(0, |total, (bound, n)| {
                *total += n;
                Some((*bound, *total))
            })
    }
}

impl Metric for Histogram {
    const TYPE: &'static str = "histogram";

    fn write_samples(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (bound, n) in self.cumulative() {
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {n}");
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let _ = writeln!(out, "{name}_sum{} {}", braced(labels), self.sum);
        let _ = writeln!(out, "{name}_count{} {}", braced(labels), self.count);
    }
}

fn braced(labels: &str) -> String {
    if labels.is_empty() {
        String::new()
    } else {
        format!("{{{labels}}}")
    }
}

/// `# HELP` and `# TYPE` of a metric.
pub fn write_header(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// Writes `value` as a label value: backslash, double quote and line feed escaped, as
/// the text format asks.
fn write_label_value(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// `a="x",b="y"` for label names and their values.
pub fn render_labels(names: &[&str], values: &[&str]) -> String {
    let mut out = String::new();
    for (i, (name, value)) in names.iter().zip(values).enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(name);
        out.push_str("=\"");
        write_label_value(&mut out, value);
        out.push('"');
    }
    out
}

struct Series<M, const N: usize> {
    labels: [Box<str>; N],
    value: M,
}

/// A metric family: one metric name, `N` label names, and a series of `M` per set of
/// label values seen (upstream's `CounterVec`, `GaugeVec`, `HistogramVec`).
pub struct Family<M: Metric, const N: usize> {
    name: &'static str,
    help: &'static str,
    label_names: [&'static str; N],
    /// What a new series starts from (a histogram's empty buckets).
    zero: M,
    hasher: DefaultHashBuilder,
    series: Mutex<HashTable<Series<M, N>>>,
}

/// Upstream's `CounterVec`.
pub type CounterVec<const N: usize> = Family<Counter, N>;
/// Upstream's `GaugeVec`.
pub type GaugeVec<const N: usize> = Family<Gauge, N>;
/// Upstream's `HistogramVec`.
pub type HistogramVec<const N: usize> = Family<Histogram, N>;

impl<M: Metric, const N: usize> std::fmt::Debug for Family<M, N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Family").field("name", &self.name).finish()
    }
}

impl<M: Metric, const N: usize> Family<M, N> {
    /// A family whose new series start at `zero`.
    pub fn with_zero(
        name: &'static str,
        help: &'static str,
        label_names: [&'static str; N],
        zero: M,
    ) -> Self {
        Family {
            name,
            help,
            label_names,
            zero,
            hasher: DefaultHashBuilder::default(),
            series: Mutex::new(HashTable::new()),
        }
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    fn hash_of<S: AsRef<str>>(&self, values: &[S]) -> u64 {
        let mut hasher = self.hasher.build_hasher();
        for value in values {
            value.as_ref().hash(&mut hasher);
        }
        hasher.finish()
    }

    /// Runs `f` on the series of `values`, made from the family's zero if new.
    pub fn with<R>(&self, values: [&str; N], f: impl FnOnce(&mut M) -> R) -> R {
        let hash = self.hash_of(&values);
        let mut series = self.series.lock();
        let entry = series.entry(
            hash,
            |s| s.labels.iter().map(|l| &**l).eq(values),
            |s| self.hash_of(&s.labels),
        );
        let series = entry.or_insert_with(|| Series {
            labels: values.map(Box::from),
            value: self.zero.clone(),
        });
        f(&mut series.into_mut().value)
    }

    /// The series of `values`, if it was ever recorded.
    pub fn get(&self, values: [&str; N]) -> Option<M> {
        let hash = self.hash_of(&values);
        self.series
            .lock()
            .find(hash, |s| s.labels.iter().map(|l| &**l).eq(values))
            .map(|s| s.value.clone())
    }

    /// Forgets the series of `values` (upstream's `DeleteLabelValues`); whether there
    /// was one.
    pub fn remove(&self, values: [&str; N]) -> bool {
        let hash = self.hash_of(&values);
        let mut series = self.series.lock();
        match series.find_entry(hash, |s| s.labels.iter().map(|l| &**l).eq(values)) {
            Ok(entry) => {
                entry.remove();
                true
            }
            Err(_) => false,
        }
    }

    /// Keeps only the series for which `keep` holds of their label values.
    pub fn retain(&self, mut keep: impl FnMut(&[Box<str>; N]) -> bool) {
        self.series.lock().retain(|s| keep(&s.labels));
    }

    /// Every series' label values and value, sorted by label values.
    pub fn snapshot(&self) -> Vec<([Box<str>; N], M)> {
        let mut series: Vec<([Box<str>; N], M)> = self
            .series
            .lock()
            .iter()
            .map(|s| (s.labels.clone(), s.value.clone()))
            .collect();
        series.sort_by(|a, b| a.0.cmp(&b.0));
        series
    }

    /// The family's lines: header and every series, sorted by label values. A family
    /// with labels shows nothing while it has no series, as upstream's vectors; one
    /// without labels is a single metric and always shows, at its zero until recorded.
    pub fn render(&self, out: &mut String) {
        let mut series = self.snapshot();
        if series.is_empty() {
            if N > 0 {
                return;
            }
            series.push((std::array::from_fn(|_| Box::from("")), self.zero.clone()));
        }
        write_header(out, self.name, self.help, M::TYPE);
        for (values, value) in &series {
            let values: Vec<&str> = values.iter().map(AsRef::as_ref).collect();
            let labels = render_labels(&self.label_names, &values);
            value.write_samples(out, self.name, &labels);
        }
    }
}

impl<M: Metric + Default, const N: usize> Family<M, N> {
    pub fn new(name: &'static str, help: &'static str, label_names: [&'static str; N]) -> Self {
        Family::with_zero(name, help, label_names, M::default())
    }
}

impl<const N: usize> Family<Counter, N> {
    pub fn inc(&self, values: [&str; N]) {
        self.add(values, 1);
    }

    pub fn add(&self, values: [&str; N], n: u64) {
        self.with(values, |c| c.0 += n);
    }

    /// The count of `values`, 0 if never counted.
    pub fn value(&self, values: [&str; N]) -> u64 {
        self.get(values).map_or(0, |c| c.0)
    }
}

impl<const N: usize> Family<Gauge, N> {
    pub fn set(&self, values: [&str; N], value: f64) {
        self.with(values, |g| g.0 = value);
    }

    /// The gauge of `values`, if ever set.
    pub fn value(&self, values: [&str; N]) -> Option<f64> {
        self.get(values).map(|g| g.0)
    }
}

impl<const N: usize> Family<Histogram, N> {
    /// A histogram family with these bucket bounds.
    pub fn histogram(
        name: &'static str,
        help: &'static str,
        label_names: [&'static str; N],
        bounds: &'static [f64],
    ) -> Self {
        Family::with_zero(name, help, label_names, Histogram::new(bounds))
    }

    pub fn observe(&self, values: [&str; N], value: f64) {
        self.with(values, |h| h.observe(value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponential_buckets_double_from_the_start() {
        const BOUNDS: [f64; 4] = exponential_buckets(0.001, 2.0);
        assert_eq!(BOUNDS, [0.001, 0.002, 0.004, 0.008]);
        assert_eq!(exponential_buckets::<3>(60.0, 2.0), [60.0, 120.0, 240.0]);
    }

    #[test]
    fn a_histogram_renders_cumulative_buckets_sum_and_count() {
        let mut h = Histogram::new(&[0.1, 1.0]);
        for v in [0.05, 0.1, 0.5, 3.0] {
            h.observe(v);
        }
        let mut out = String::new();
        h.write_samples(&mut out, "x_seconds", "op=\"a\"");
        assert_eq!(
            out,
            "x_seconds_bucket{op=\"a\",le=\"0.1\"} 2\n\
             x_seconds_bucket{op=\"a\",le=\"1\"} 3\n\
             x_seconds_bucket{op=\"a\",le=\"+Inf\"} 4\n\
             x_seconds_sum{op=\"a\"} 3.65\n\
             x_seconds_count{op=\"a\"} 4\n"
        );
        let mut bare = String::new();
        Histogram::new(&[1.0]).write_samples(&mut bare, "y", "");
        assert_eq!(
            bare,
            "y_bucket{le=\"1\"} 0\ny_bucket{le=\"+Inf\"} 0\ny_sum 0\ny_count 0\n"
        );
    }

    #[test]
    fn a_family_keeps_one_series_per_label_values_and_renders_them_sorted() {
        let requests = CounterVec::new("requests_total", "Requests.", ["verb", "code"]);
        requests.inc(["GET", "200"]);
        requests.add(["GET", "200"], 2);
        requests.inc(["DELETE", "404"]);
        assert_eq!(requests.value(["GET", "200"]), 3);
        assert_eq!(requests.value(["GET", "404"]), 0);
        let mut out = String::new();
        requests.render(&mut out);
        assert_eq!(
            out,
            "# HELP requests_total Requests.\n# TYPE requests_total counter\n\
             requests_total{verb=\"DELETE\",code=\"404\"} 1\n\
             requests_total{verb=\"GET\",code=\"200\"} 3\n"
        );
        assert!(requests.remove(["GET", "200"]));
        assert!(!requests.remove(["GET", "200"]));
        assert_eq!(requests.value(["GET", "200"]), 0);
    }

    #[test]
    fn an_empty_family_renders_nothing_but_a_labelless_one_shows_its_zero() {
        let labelled = GaugeVec::new("l", "Labelled.", ["a"]);
        let mut out = String::new();
        labelled.render(&mut out);
        assert_eq!(out, "");

        let gauge = GaugeVec::new("g", "A gauge.", []);
        gauge.render(&mut out);
        assert_eq!(out, "# HELP g A gauge.\n# TYPE g gauge\ng 0\n");
        assert_eq!(gauge.value([]), None);
        gauge.set([], 2.5);
        out.clear();
        gauge.render(&mut out);
        assert_eq!(out, "# HELP g A gauge.\n# TYPE g gauge\ng 2.5\n");
        assert_eq!(gauge.value([]), Some(2.5));
    }

    #[test]
    fn histogram_families_start_each_series_empty() {
        const BOUNDS: [f64; 2] = [0.5, 1.0];
        let latency = HistogramVec::histogram("l", "Latency.", ["m"], &BOUNDS);
        latency.observe(["a"], 0.2);
        latency.observe(["b"], 2.0);
        let a = latency.get(["a"]).unwrap();
        let b = latency.get(["b"]).unwrap();
        assert_eq!(
            (a.count(), a.cumulative().collect::<Vec<_>>()),
            (1, vec![(0.5, 1), (1.0, 1)])
        );
        assert_eq!(
            (b.count(), b.cumulative().collect::<Vec<_>>()),
            (1, vec![(0.5, 0), (1.0, 0)])
        );
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(
            render_labels(&["error", "path"], &["a \"b\"\nc", "C:\\x"]),
            "error=\"a \\\"b\\\"\\nc\",path=\"C:\\\\x\""
        );
    }

    #[test]
    fn retain_drops_the_series_it_is_told_to() {
        let c = CounterVec::new("c", "C.", ["provider"]);
        c.inc(["kept"]);
        c.inc(["gone"]);
        c.retain(|labels| &*labels[0] == "kept");
        assert_eq!((c.value(["kept"]), c.get(["gone"])), (1, None));
    }
}
