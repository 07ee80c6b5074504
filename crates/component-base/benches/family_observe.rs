//! Benchmark (not a test): the CPU of what kube-apiserver records for every request
//! in component-base's metric families: `apiserver_request_total` (upstream's nine
//! labels) and `apiserver_request_duration_seconds` (eight labels, upstream's 23
//! buckets), among a few hundred
//! existing series, as a server that has seen many verbs and resources holds them.
//!
//! `cargo bench -p ferrokube-component-base --bench family_observe [-- --calls N]`.
//! Without `--bench` (as `cargo test --benches` runs it) it makes a few thousand calls
//! and checks the counts, to show that it still works.

use std::time::Instant;

use ferrokube_component_base::metrics::{CounterVec, HistogramVec};

const VERBS: [&str; 8] = [
    "GET", "LIST", "WATCH", "POST", "PUT", "PATCH", "DELETE", "APPLY",
];
// The apiserver's buckets and labels (crates/apiserver/src/metrics.rs; component-base
// cannot depend on the apiserver).
const REQUEST_BUCKETS: &[f64] = &[
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0,
    10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
];
const LATENCY_LABELS: [&str; 8] = [
    "component",
    "dry_run",
    "group",
    "resource",
    "scope",
    "subresource",
    "verb",
    "version",
];

/// A request's latency labels, as the apiserver records them.
fn latency_labels<'a>(resource: &'a str, verb: &'a str) -> [&'a str; 8] {
    [
        "apiserver",
        "",
        "apps",
        resource,
        "namespace",
        "",
        verb,
        "v1",
    ]
}

/// `first`, then `rest`: the count's labels are the code and the latency's.
fn with_code<'a>(first: &'a str, rest: [&'a str; 8]) -> [&'a str; 9] {
    std::array::from_fn(|i| if i == 0 { first } else { rest[i - 1] })
}

const CODES: [&str; 4] = ["200", "201", "404", "409"];

fn resources() -> Vec<String> {
    (0..40).map(|i| format!("resource{i}")).collect()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let bench = args.iter().any(|a| a == "--bench");
    let calls: usize = args
        .iter()
        .position(|a| a == "--calls")
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(if bench { 2_000_000 } else { 5_000 });

    let requests = CounterVec::new(
        "requests_total",
        "Requests.",
        with_code("code", LATENCY_LABELS),
    );
    let latency = HistogramVec::histogram(
        "duration_seconds",
        "Latency.",
        LATENCY_LABELS,
        REQUEST_BUCKETS,
    );
    let resources = resources();
    // Every verb of every resource seen once: 320 latency series, 1,280 count series.
    for resource in &resources {
        for verb in VERBS {
            for code in CODES {
                requests.inc(with_code(code, latency_labels(resource, verb)));
            }
            latency.observe(latency_labels(resource, verb), 0.001);
        }
    }

    let start = Instant::now();
    for i in 0..calls {
        let resource = resources[i % resources.len()].as_str();
        let verb = VERBS[i % VERBS.len()];
        requests.inc(with_code("201", latency_labels(resource, verb)));
        latency.observe(latency_labels(resource, verb), 0.0004);
    }
    let took = start.elapsed();

    let recorded: u64 = requests
        .snapshot()
        .iter()
        .filter(|(labels, _)| &*labels[0] == "201")
        .map(|(_, n)| n.0)
        .sum();
    assert_eq!(recorded as usize, calls + resources.len() * VERBS.len());
    if bench {
        println!(
            "{calls} requests recorded: {:.1} ns per request (one counter, one histogram)",
            took.as_nanos() as f64 / calls as f64
        );
    }
}
