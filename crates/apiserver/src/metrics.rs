//! Request and storage metrics in Prometheus text format (upstream's metric names).

use std::fmt::Write;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use ferrokube_component_base::metrics::{Collector, CounterVec, GaugeVec, HistogramVec, unix_now};
use ferrokube_registry::Registry;
use ferrokube_storage::{
    Deleted, KeyValue, ListOptions, ListResult, Preconditions, Revision, Storage, StorageStats,
    UpdateFn, WatchStream,
};
use parking_lot::Mutex;

/// Bounds in seconds of `apiserver_request_duration_seconds` (upstream's).
const REQUEST_BUCKETS: &[f64] = &[
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0,
    10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
];

/// Bounds in seconds of `apiserver_request_sli_duration_seconds` (upstream's).
const SLI_BUCKETS: &[f64] = &[
    0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 15.0, 20.0,
    30.0, 45.0, 60.0,
];

/// Bounds in bytes of `apiserver_response_sizes`: 1 kB to 1 GB, by tens (upstream's).
const RESPONSE_SIZE_BUCKETS: &[f64] = &[1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9];

/// The labels of the SLI latency and the response sizes: the duration's without
/// `dry_run`.
const SLI_LABELS: [&str; 7] = [
    "component",
    "group",
    "resource",
    "scope",
    "subresource",
    "verb",
    "version",
];

/// The labels of `apiserver_request_duration_seconds`, upstream's, in its (sorted) order.
const REQUEST_LABELS: [&str; 8] = [
    "component",
    "dry_run",
    "group",
    "resource",
    "scope",
    "subresource",
    "verb",
    "version",
];

/// `apiserver_request_total`'s: `code`, then the duration's.
const REQUEST_COUNT_LABELS: [&str; 9] = with_code("code", REQUEST_LABELS);

const fn with_code<'a>(code: &'a str, labels: [&'a str; 8]) -> [&'a str; 9] {
    let mut out = [code; 9];
    let mut i = 0;
    while i < labels.len() {
        out[i + 1] = labels[i];
        i += 1;
    }
    out
}

/// What upstream's request metrics are broken out by (its `MonitorRequest` labels), so
/// that dashboards and SLO rules written for upstream (`verb=~"POST|PUT|PATCH|DELETE"`,
/// `scope="resource"`) read Ferrokube's figures as they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestLabels {
    /// Upstream's reported verb: the route's (`POST` for a create, `PUT` for an update,
    /// `APPLY` for a server-side apply, `CONNECT` for exec, attach, port-forward and
    /// proxy), with `LIST` and `WATCH` told from `GET`; the HTTP method otherwise.
    pub verb: String,
    /// The request's `dryRun` values, sorted and joined by commas.
    pub dry_run: String,
    pub group: String,
    pub version: String,
    pub resource: String,
    pub subresource: String,
    /// `resource` (one named object, or a create), `namespace`, `cluster`, or empty for a
    /// request that is not about a resource.
    pub scope: &'static str,
    pub component: &'static str,
}

impl RequestLabels {
    /// The labels of a request with these authorization attributes, HTTP method,
    /// `Content-Type` and query (`aggregated_discovery`: its `Accept` asks for aggregated
    /// discovery this server serves); `None` for a request upstream does not
    /// instrument (non-resource paths other than its health checks, OpenAPI v3 and
    /// aggregated discovery), which then counts in no request metric, as upstream.
    pub fn of(
        attrs: &ferrokube_auth::authz::Attributes,
        method: &str,
        content_type: Option<&str>,
        aggregated_discovery: bool,
        query: Option<&str>,
    ) -> Option<RequestLabels> {
        if !attrs.resource_request {
            return Self::non_resource(&attrs.path, method, aggregated_discovery);
        }
        Some(Self::resource(attrs, content_type, query))
    }

    /// Upstream's instrumented non-resource handlers: each names its path in
    /// `subresource` (the OpenAPI v3 ones without the leading slash), with the component
    /// set only by aggregated discovery.
    fn non_resource(path: &str, method: &str, aggregated_discovery: bool) -> Option<RequestLabels> {
        let (subresource, component) = match path {
            "/healthz" | "/livez" | "/readyz" => (path, ""),
            "/openapi/v3" => ("openapi/v3", ""),
            p if p.starts_with("/openapi/v3/") => ("openapi/v3/", ""),
            "/api" | "/apis" if aggregated_discovery => (path, "apiserver"),
            _ => return None,
        };
        Some(RequestLabels {
            verb: method.to_ascii_uppercase(),
            dry_run: String::new(),
            group: String::new(),
            version: String::new(),
            resource: String::new(),
            subresource: subresource.to_string(),
            scope: "",
            component,
        })
    }

    /// The labels upstream's `RecordRequestTermination` gives a non-resource request:
    /// its path as the subresource.
    pub fn non_resource_path(path: &str, method: &str) -> RequestLabels {
        RequestLabels {
            verb: method.to_ascii_uppercase(),
            dry_run: String::new(),
            group: String::new(),
            version: String::new(),
            resource: String::new(),
            subresource: path.to_string(),
            scope: "",
            component: "apiserver",
        }
    }

    fn resource(
        attrs: &ferrokube_auth::authz::Attributes,
        content_type: Option<&str>,
        query: Option<&str>,
    ) -> RequestLabels {
        let connects = matches!(
            (attrs.resource.as_str(), attrs.subresource.as_str()),
            ("pods", "exec" | "attach" | "portforward" | "proxy") | ("services" | "nodes", "proxy")
        );
        let verb = match attrs.verb.as_str() {
            _ if connects => "CONNECT".to_string(),
            "create" => "POST".to_string(),
            "update" => "PUT".to_string(),
            "patch"
                if content_type.is_some_and(|t| {
                    crate::output::media_essence(t) == "application/apply-patch+yaml"
                }) =>
            {
                "APPLY".to_string()
            }
            other => other.to_ascii_uppercase(),
        };
        let mut dry_run: Vec<String> = form_urlencoded::parse(query.unwrap_or_default().as_bytes())
            .filter(|(k, _)| k == "dryRun")
            .map(|(_, v)| v.into_owned())
            .collect();
        dry_run.sort();
        let scope = if !attrs.name.is_empty() || attrs.verb == "create" {
            "resource"
        } else if !attrs.namespace.is_empty() {
            "namespace"
        } else {
            "cluster"
        };
        RequestLabels {
            verb,
            dry_run: dry_run.join(","),
            group: attrs.api_group.clone(),
            version: attrs.api_version.clone(),
            resource: attrs.resource.clone(),
            subresource: attrs.subresource.clone(),
            scope,
            component: "apiserver",
        }
    }
}

/// Marks a response the server answered in self-defense (a refused seat or slot), for
/// `apiserver_request_terminations_total`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Terminated;

/// A long-running request's observation, made when its response body is dropped
/// (sent to the end, or the client went away): upstream records watches and
/// connections when their handler returns, with their whole duration.
pub(crate) struct ObservedAtEnd {
    metrics: Arc<Metrics>,
    labels: RequestLabels,
    start: Instant,
    code: u16,
    counted: bool,
}

impl ObservedAtEnd {
    /// Counts the request in `apiserver_longrunning_requests` (watches and connections)
    /// until the end.
    pub(crate) fn begin(
        metrics: Arc<Metrics>,
        labels: RequestLabels,
        start: Instant,
        code: u16,
    ) -> ObservedAtEnd {
        let counted = labels.counted_as_long_running();
        if counted {
            metrics.long_running_started(&labels);
        }
        ObservedAtEnd {
            metrics,
            labels,
            start,
            code,
            counted,
        }
    }

    /// `body`, which makes the observation when it is dropped.
    pub(crate) fn around(self, body: crate::handler::Body) -> crate::handler::Body {
        http_body_util::combinators::UnsyncBoxBody::new(
            ferrokube_component_base::metrics::held_body::HeldBody::new(body, self),
        )
    }
}

impl Drop for ObservedAtEnd {
    fn drop(&mut self) {
        if self.counted {
            self.metrics.long_running_ended(&self.labels);
        }
        self.metrics.observe(
            &self.labels,
            RequestOutcome {
                code: self.code,
                seconds: self.start.elapsed().as_secs_f64(),
                excluded_seconds: 0.0,
                response_bytes: None,
            },
        );
    }
}

/// Bounds in seconds of `etcd_request_duration_seconds`. Finer than upstream's at the
/// low end: a local store answers in well under upstream's first bound of 5 ms.
const STORAGE_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0,
];

/// Upstream's `apiserver_current_inflight_requests`: not the count at the scrape but
/// the highest count of the last whole second, so that short bursts show. Tracked in
/// one-second periods since `start`; a period in which nothing started or ended held
/// the count throughout.
struct Inflight {
    start: Instant,
    /// Executing now: `[readOnly, mutating]`.
    current: [AtomicI64; 2],
    periods: Mutex<Periods>,
}

#[derive(Default)]
struct Periods {
    /// The period (seconds since `start`) `this` is the high mark of.
    period: u64,
    this: [i64; 2],
    /// The high mark of the period before `period`.
    last: [i64; 2],
}

impl Inflight {
    fn new() -> Inflight {
        Inflight {
            start: Instant::now(),
            current: [AtomicI64::new(0), AtomicI64::new(0)],
            periods: Mutex::default(),
        }
    }

    fn now_period(&self) -> u64 {
        self.start.elapsed().as_secs()
    }

    fn current(&self) -> [i64; 2] {
        self.current
            .each_ref()
            .map(|c| c.load(Ordering::Relaxed).max(0))
    }

    /// Moves `periods` on to `now`, the count unchanged since the last call standing
    /// for the periods skipped.
    fn roll(&self, periods: &mut Periods, now: u64) {
        if now <= periods.period {
            return;
        }
        let current = self.current();
        periods.last = if now == periods.period + 1 {
            periods.this
        } else {
            current
        };
        periods.this = current;
        periods.period = now;
    }

    fn add(&self, kind: usize, delta: i64) {
        self.add_at(kind, delta, self.now_period());
    }

    fn add_at(&self, kind: usize, delta: i64, now: u64) {
        let mut periods = self.periods.lock();
        // Rolled before the change and counted under the lock: the count a new period
        // starts at is the one before this request came or went.
        self.roll(&mut periods, now);
        let count = self.current[kind].fetch_add(delta, Ordering::Relaxed) + delta;
        periods.this[kind] = periods.this[kind].max(count);
    }

    /// The high marks of the last whole period before `now`.
    fn last_period(&self, now: u64) -> [i64; 2] {
        let mut periods = self.periods.lock();
        self.roll(&mut periods, now);
        periods.last
    }
}

/// A request counted in `apiserver_current_inflight_requests` until dropped.
pub(crate) struct Executing<'a> {
    inflight: &'a Inflight,
    kind: usize,
}

impl Drop for Executing<'_> {
    fn drop(&mut self) {
        self.inflight.add(self.kind, -1);
    }
}

/// Counters of one server; no process-global state.
pub struct Metrics {
    requests: CounterVec<9>,
    /// `apiserver_request_terminations_total`: requests the server ended itself (a
    /// full priority level or in-flight limit, 429; its request timeout, 504).
    terminations: CounterVec<9>,
    request_latency: HistogramVec<8>,
    sli_latency: HistogramVec<7>,
    response_sizes: HistogramVec<7>,
    storage_latency: HistogramVec<2>,
    /// `apiserver_longrunning_requests`: watches and connections (exec, attach,
    /// port-forward, proxy) open now, by the SLI labels.
    longrunning: GaugeVec<7>,
    watchers: AtomicI64,
    inflight: Inflight,
    /// Automatic reloads of the authentication and authorization configuration files.
    config_reloads: ConfigReloads,
    /// What the binary added (`Options::metrics_collectors`).
    collectors: Vec<Arc<dyn Collector>>,
}

/// Which configuration file a reload was of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum ReloadedConfig {
    Authentication,
    Authorization,
    Encryption,
}

impl ReloadedConfig {
    const ALL: [ReloadedConfig; 3] = [
        ReloadedConfig::Authentication,
        ReloadedConfig::Authorization,
        ReloadedConfig::Encryption,
    ];

    /// The count's and the last time's families, with upstream's names and help.
    fn families(self) -> (CounterVec<2>, GaugeVec<2>) {
        const LABELS: [&str; 2] = ["apiserver_id_hash", "status"];
        let (count, count_help, time, time_help) = match self {
            ReloadedConfig::Authentication => (
                "apiserver_authentication_config_controller_automatic_reloads_total",
                "[BETA] Total number of automatic reloads of authentication configuration split by status and apiserver identity.",
                "apiserver_authentication_config_controller_automatic_reload_last_timestamp_seconds",
                "[BETA] Timestamp of the last automatic reload of authentication configuration split by status and apiserver identity.",
            ),
            ReloadedConfig::Authorization => (
                "apiserver_authorization_config_controller_automatic_reloads_total",
                "[BETA] Total number of automatic reloads of authorization configuration split by status and apiserver identity.",
                "apiserver_authorization_config_controller_automatic_reload_last_timestamp_seconds",
                "[BETA] Timestamp of the last automatic reload of authorization configuration split by status and apiserver identity.",
            ),
            ReloadedConfig::Encryption => (
                "apiserver_encryption_config_controller_automatic_reloads_total",
                "[ALPHA] Total number of reload successes and failures of encryption configuration split by apiserver identity.",
                "apiserver_encryption_config_controller_automatic_reload_last_timestamp_seconds",
                "[ALPHA] Timestamp of the last successful or failed automatic reload of encryption configuration split by apiserver identity.",
            ),
        };
        (
            CounterVec::new(count, count_help, LABELS),
            GaugeVec::new(time, time_help, LABELS),
        )
    }
}

/// `apiserver_{authentication,authorization,encryption}_config_controller_automatic_reload*`.
struct ConfigReloads {
    /// Upstream labels the series with a digest of the apiserver's identity
    /// (`apiserver-<hash of the host name>`), so that they can be told apart.
    apiserver_id_hash: String,
    /// Per [`ReloadedConfig::ALL`]: reloads by status, and the last one's Unix time.
    families: [(CounterVec<2>, GaugeVec<2>); 3],
}

/// This apiserver's identity, as upstream's with APIServerIdentity on: derived from
/// the host name (see [`crate::identity::apiserver_id`]).
pub fn new_apiserver_id() -> String {
    crate::identity::apiserver_id(&crate::identity::hostname())
}

impl ConfigReloads {
    fn new(apiserver_id: &str) -> ConfigReloads {
        let digest = ring::digest::digest(&ring::digest::SHA256, apiserver_id.as_bytes());
        let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        ConfigReloads {
            apiserver_id_hash: format!("sha256:{hex}"),
            families: ReloadedConfig::ALL.map(ReloadedConfig::families),
        }
    }

    fn reloaded(&self, config: ReloadedConfig, succeeded: bool) {
        let (count, last) = &self.families[config as usize];
        let labels = [
            self.apiserver_id_hash.as_str(),
            if succeeded { "success" } else { "failure" },
        ];
        count.inc(labels);
        last.set(labels, unix_now());
    }

    fn render(&self, out: &mut String) {
        for (count, last) in &self.families {
            count.render(out);
            last.render(out);
        }
    }
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new(&new_apiserver_id(), Vec::new())
    }
}

impl Metrics {
    /// The metrics of the apiserver `apiserver_id`, with what `collectors` add.
    pub fn new(apiserver_id: &str, collectors: Vec<Arc<dyn Collector>>) -> Metrics {
        Metrics {
            requests: CounterVec::new(
                "apiserver_request_total",
                "[STABLE] Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code.",
                REQUEST_COUNT_LABELS,
            ),
            terminations: CounterVec::new(
                "apiserver_request_terminations_total",
                "[ALPHA] Number of requests which apiserver terminated in self-defense.",
                REQUEST_COUNT_LABELS,
            ),
            request_latency: HistogramVec::histogram(
                "apiserver_request_duration_seconds",
                "[STABLE] Response latency distribution in seconds for each verb, dry run value, group, version, resource, subresource, scope and component.",
                REQUEST_LABELS,
                REQUEST_BUCKETS,
            ),
            sli_latency: HistogramVec::histogram(
                "apiserver_request_sli_duration_seconds",
                "[ALPHA] Response latency distribution (not counting webhook duration and priority & fairness queue wait times) in seconds for each verb, group, version, resource, subresource, scope and component.",
                SLI_LABELS,
                SLI_BUCKETS,
            ),
            response_sizes: HistogramVec::histogram(
                "apiserver_response_sizes",
                "[STABLE] Response size distribution in bytes for each group, version, verb, resource, subresource, scope and component.",
                SLI_LABELS,
                RESPONSE_SIZE_BUCKETS,
            ),
            storage_latency: HistogramVec::histogram(
                "etcd_request_duration_seconds",
                "Storage request latency in seconds for each operation and object type (the embedded store's as well as etcd's).",
                ["operation", "type"],
                STORAGE_BUCKETS,
            ),
            longrunning: GaugeVec::new(
                "apiserver_longrunning_requests",
                "[STABLE] Gauge of all active long-running apiserver requests broken out by verb, group, version, resource, scope and component. Not all requests are tracked this way.",
                SLI_LABELS,
            ),
            watchers: AtomicI64::new(0),
            inflight: Inflight::new(),
            config_reloads: ConfigReloads::new(apiserver_id),
            collectors,
        }
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish()
    }
}

/// One request's outcome, as the request metrics record it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RequestOutcome {
    pub code: u16,
    /// From the request's arrival to its response.
    pub seconds: f64,
    /// Of that, what its admission webhooks and its wait in an API Priority and Fairness
    /// queue took (left out of the SLI latency).
    pub excluded_seconds: f64,
    /// The response body's length, when known before it is sent.
    pub response_bytes: Option<u64>,
}

impl RequestLabels {
    /// The values of the request duration's labels, in [`REQUEST_LABELS`]' order.
    fn values(&self) -> [&str; 8] {
        [
            self.component,
            &self.dry_run,
            &self.group,
            &self.resource,
            self.scope,
            &self.subresource,
            &self.verb,
            &self.version,
        ]
    }

    /// The values of the SLI latency's (and `apiserver_longrunning_requests`') labels,
    /// in [`SLI_LABELS`]' order.
    fn sli_values(&self) -> [&str; 7] {
        [
            self.component,
            &self.group,
            &self.resource,
            self.scope,
            &self.subresource,
            &self.verb,
            &self.version,
        ]
    }

    /// Upstream counts watches and connections in `apiserver_longrunning_requests`
    /// (its `RecordLongRunning` wraps those two handlers only).
    pub fn counted_as_long_running(&self) -> bool {
        matches!(self.verb.as_str(), "WATCH" | "CONNECT")
    }
}

impl Metrics {
    /// A long-running request with these labels started; [`Metrics::long_running_ended`]
    /// when it ends.
    pub fn long_running_started(&self, labels: &RequestLabels) {
        self.longrunning.with(labels.sli_values(), |g| g.0 += 1.0);
    }

    pub fn long_running_ended(&self, labels: &RequestLabels) {
        self.longrunning.with(labels.sli_values(), |g| g.0 -= 1.0);
    }

    /// A request the server ended itself with `code`, as upstream's
    /// `RecordRequestTermination` (it is also counted by [`Metrics::observe`]).
    pub fn terminated(&self, labels: &RequestLabels, code: u16) {
        let mut digits = [0; 5];
        self.terminations
            .inc(with_code(decimal(code, &mut digits), labels.values()));
    }

    pub fn observe(&self, labels: &RequestLabels, outcome: RequestOutcome) {
        let mut digits = [0; 5];
        let l = labels;
        let values = l.values();
        self.requests
            .inc(with_code(decimal(outcome.code, &mut digits), values));
        self.request_latency.observe(values, outcome.seconds);
        let without_dry_run = l.sli_values();
        self.sli_latency.observe(
            without_dry_run,
            (outcome.seconds - outcome.excluded_seconds).max(0.0),
        );
        // Upstream measures the answers of reads only.
        if let Some(bytes) = outcome.response_bytes
            && matches!(l.verb.as_str(), "GET" | "LIST")
        {
            self.response_sizes.observe(without_dry_run, bytes as f64);
        }
    }

    pub fn watch_started(&self) {
        self.watchers.fetch_add(1, Ordering::Relaxed);
    }

    pub fn watch_ended(&self) {
        self.watchers.fetch_sub(1, Ordering::Relaxed);
    }

    /// Counts a request that is not long-running as executing (in upstream's
    /// `readOnly` or `mutating` kind) while the guard lives.
    pub(crate) fn executing(&self, mutating: bool) -> Executing<'_> {
        let kind = usize::from(mutating);
        self.inflight.add(kind, 1);
        Executing {
            inflight: &self.inflight,
            kind,
        }
    }

    /// Requests that are not long-running, executing now.
    pub(crate) fn executing_now(&self) -> i64 {
        self.inflight.current().iter().sum()
    }

    /// Counts an automatic reload of `config`'s file, which `succeeded` or not.
    pub(crate) fn config_reloaded(&self, config: ReloadedConfig, succeeded: bool) {
        self.config_reloads.reloaded(config, succeeded);
    }

    /// Watches open now.
    pub(crate) fn watches_now(&self) -> i64 {
        self.watchers.load(Ordering::Relaxed)
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        self.requests.render(&mut out);
        self.terminations.render(&mut out);
        self.request_latency.render(&mut out);
        self.sli_latency.render(&mut out);
        self.response_sizes.render(&mut out);
        self.storage_latency.render(&mut out);
        self.longrunning.render(&mut out);
        crate::admission::metrics::render(&mut out);
        let [read_only, mutating] = self.inflight.last_period(self.inflight.now_period());
        let _ = writeln!(
            out,
            "# HELP apiserver_current_inflight_requests Maximal number of currently used inflight request limit of this apiserver per request kind in last second.\n# TYPE apiserver_current_inflight_requests gauge\napiserver_current_inflight_requests{{request_kind=\"mutating\"}} {mutating}\napiserver_current_inflight_requests{{request_kind=\"readOnly\"}} {read_only}"
        );
        self.config_reloads.render(&mut out);
        ferrokube_auth::authn::write_client_certificate_metrics(&mut out);
        for collector in &self.collectors {
            collector.collect(&mut out);
        }
        ferrokube_component_base::metrics::process::write_process_metrics(&mut out);
        out
    }
}

tokio::task_local! {
    /// The current request's time outside the apiserver's own work, in nanoseconds.
    static EXCLUDED_LATENCY: std::cell::Cell<u64>;
}

/// Runs a request's handling, returning its output and how long of it went to admission
/// webhooks and API Priority and Fairness queues (upstream's `LatencyTrackers`), which
/// [`exclude_from_sli`] counted while it ran.
pub(crate) async fn with_excluded_latency<F: Future>(handling: F) -> (F::Output, Duration) {
    EXCLUDED_LATENCY
        .scope(std::cell::Cell::new(0), async {
            let output = handling.await;
            let excluded = EXCLUDED_LATENCY.with(std::cell::Cell::get);
            (output, Duration::from_nanos(excluded))
        })
        .await
}

/// Runs `work` (calling admission webhooks, or waiting in a flow control queue) and counts
/// its time against the current request's SLI latency; outside a request it only runs it.
pub(crate) async fn exclude_from_sli<F: Future>(work: F) -> F::Output {
    let started = Instant::now();
    let output = work.await;
    let took = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
    let _ = EXCLUDED_LATENCY.try_with(|total| total.set(total.get().saturating_add(took)));
    output
}

/// Upstream's `apiserver_storage_objects`: the objects of each resource (built-in and
/// custom), counted in its watch cache when scraped, with upstream's `resource` label
/// (`pods`, `deployments.apps`).
pub(crate) fn render_storage_objects(registry: &Registry, out: &mut String) {
    let objects = GaugeVec::new(
        "apiserver_storage_objects",
        "[STABLE] Number of stored objects at the time of last check split by kind. In case of a fetching error, the value will be -1.",
        ["resource"],
    );
    let custom = registry.custom().served();
    let stores = registry
        .stores()
        .iter()
        .chain(custom.all().map(|resource| &resource.store));
    for store in stores {
        let info = store.info();
        let resource = if info.group.is_empty() {
            info.plural.to_string()
        } else {
            format!("{}.{}", info.plural, info.group)
        };
        objects.set([&resource], store.cache().object_count() as f64);
    }
    objects.render(out);
}

/// The storage the registry uses, timing every request into
/// `etcd_request_duration_seconds` (upstream's name, kept for the embedded store so
/// dashboards work on either backend). Watches are not timed: they last.
pub(crate) struct MeteredStorage {
    inner: Arc<dyn Storage>,
    metrics: Arc<Metrics>,
}

impl MeteredStorage {
    pub(crate) fn new(inner: Arc<dyn Storage>, metrics: Arc<Metrics>) -> MeteredStorage {
        MeteredStorage { inner, metrics }
    }

    async fn timed<T>(&self, operation: &str, key: &str, request: impl Future<Output = T>) -> T {
        let start = Instant::now();
        let result = request.await;
        self.metrics
            .storage_latency
            .observe([operation, object_type(key)], start.elapsed().as_secs_f64());
        result
    }
}

/// `n` in decimal, written into `digits`: a status code as a label value without
/// allocating.
fn decimal(mut n: u16, digits: &mut [u8; 5]) -> &str {
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    std::str::from_utf8(&digits[start..]).expect("ASCII digits")
}

/// Upstream's `type` label: the resource's key prefix, e.g. `/registry/pods/` for
/// `/registry/pods/default/web`.
fn object_type(key: &str) -> &str {
    let segments_end = key
        .match_indices('/')
        .nth(2)
        .map_or(key.len(), |(i, _)| i + 1);
    &key[..segments_end]
}

#[async_trait]
impl Storage for MeteredStorage {
    async fn create(&self, key: &str, value: Bytes) -> ferrokube_storage::Result<Revision> {
        self.timed("create", key, self.inner.create(key, value))
            .await
    }

    async fn get(
        &self,
        key: &str,
        revision: Option<Revision>,
    ) -> ferrokube_storage::Result<KeyValue> {
        self.timed("get", key, self.inner.get(key, revision)).await
    }

    async fn list(
        &self,
        prefix: &str,
        options: &ListOptions,
    ) -> ferrokube_storage::Result<ListResult> {
        self.timed("listWithCount", prefix, self.inner.list(prefix, options))
            .await
    }

    async fn guaranteed_update(
        &self,
        key: &str,
        preconditions: &Preconditions,
        update: &mut UpdateFn<'_>,
    ) -> ferrokube_storage::Result<KeyValue> {
        let update = self.inner.guaranteed_update(key, preconditions, update);
        self.timed("update", key, update).await
    }

    async fn compare_and_swap(
        &self,
        key: &str,
        expected_revision: Revision,
        value: Bytes,
    ) -> ferrokube_storage::Result<KeyValue> {
        let swap = self.inner.compare_and_swap(key, expected_revision, value);
        self.timed("update", key, swap).await
    }

    async fn delete(
        &self,
        key: &str,
        preconditions: &Preconditions,
    ) -> ferrokube_storage::Result<Deleted> {
        self.timed("delete", key, self.inner.delete(key, preconditions))
            .await
    }

    async fn watch(
        &self,
        prefix: &str,
        from_revision: Revision,
    ) -> ferrokube_storage::Result<WatchStream> {
        self.inner.watch(prefix, from_revision).await
    }

    async fn compact(&self, revision: Revision) -> ferrokube_storage::Result<()> {
        self.timed("compact", "", self.inner.compact(revision))
            .await
    }

    async fn current_revision(&self) -> ferrokube_storage::Result<Revision> {
        self.timed("getRevision", "", self.inner.current_revision())
            .await
    }

    fn watch_sees_every_revision(&self) -> bool {
        self.inner.watch_sees_every_revision()
    }

    async fn stats(&self) -> ferrokube_storage::Result<StorageStats> {
        self.inner.stats().await
    }

    fn backend(&self) -> ferrokube_storage::Backend {
        self.inner.backend()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(method: &str, path: &str, query: Option<&str>) -> ferrokube_auth::authz::Attributes {
        ferrokube_auth::request_info::request_attributes(method, path, query)
    }

    #[test]
    fn requests_carry_upstreams_labels() {
        let of = |method: &str, path: &str, query: Option<&str>, content_type: Option<&str>| {
            let l = RequestLabels::of(
                &attrs(method, path, query),
                method,
                content_type,
                false,
                query,
            )
            .expect("a resource request is instrumented");
            (
                l.verb,
                l.scope,
                l.group,
                l.version,
                l.resource,
                l.subresource,
                l.dry_run,
            )
        };
        let s = String::from;
        assert_eq!(
            of(
                "POST",
                "/api/v1/namespaces/d/pods",
                Some("dryRun=All"),
                None
            ),
            (
                s("POST"),
                "resource",
                s(""),
                s("v1"),
                s("pods"),
                s(""),
                s("All")
            )
        );
        assert_eq!(
            of(
                "PUT",
                "/apis/apps/v1/namespaces/d/deployments/web/scale",
                None,
                None
            ),
            (
                s("PUT"),
                "resource",
                s("apps"),
                s("v1"),
                s("deployments"),
                s("scale"),
                s("")
            )
        );
        assert_eq!(
            of(
                "PATCH",
                "/api/v1/nodes/n",
                None,
                Some("application/apply-patch+yaml; charset=utf-8")
            )
            .0,
            "APPLY"
        );
        assert_eq!(
            of(
                "PATCH",
                "/api/v1/nodes/n",
                None,
                Some("application/merge-patch+json")
            )
            .0,
            "PATCH"
        );
        assert_eq!(
            of("GET", "/api/v1/namespaces/d/pods", Some("watch=true"), None).0,
            "WATCH"
        );
        assert_eq!(
            of("GET", "/api/v1/namespaces/d/pods", None, None).1,
            "namespace"
        );
        assert_eq!(of("GET", "/api/v1/pods", None, None).1, "cluster");
        assert_eq!(
            of(
                "POST",
                "/api/v1/namespaces/d/pods/p/exec",
                Some("command=ls"),
                None
            )
            .0,
            "CONNECT"
        );
        assert_eq!(
            of("DELETE", "/api/v1/namespaces/d/configmaps", None, None).0,
            "DELETECOLLECTION"
        );
    }

    #[test]
    fn non_resource_requests_are_labelled_as_upstreams_instrumented_handlers() {
        let of = |path: &str, accept: Option<&str>| {
            let aggregated = crate::discovery::wants_aggregated(accept, false).is_some();
            RequestLabels::of(&attrs("GET", path, None), "GET", None, aggregated, None)
                .map(|l| (l.verb, l.scope, l.subresource, l.component, l.resource))
        };
        let s = String::from;
        for p in ["/healthz", "/livez", "/readyz"] {
            assert_eq!(of(p, None), Some((s("GET"), "", s(p), "", s(""))));
        }
        assert_eq!(of("/openapi/v3", None).unwrap().2, "openapi/v3");
        assert_eq!(
            of("/openapi/v3/apis/apps/v1", None).unwrap().2,
            "openapi/v3/"
        );
        let aggregated =
            Some("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList");
        assert_eq!(
            of("/apis", aggregated),
            Some((s("GET"), "", s("/apis"), "apiserver", s("")))
        );
        assert_eq!(of("/api", aggregated).unwrap().2, "/api");
        // Not instrumented upstream: no series at all (a slow /openapi/v2 with scope=""
        // would land in the SLO rules' `scope=~"resource|"` reads).
        for p in [
            "/apis",
            "/api",
            "/version",
            "/openapi/v2",
            "/metrics",
            "/healthz/etcd",
            "/apis/apps/v1",
        ] {
            assert_eq!(of(p, None), None, "{p}");
        }
    }

    #[test]
    fn a_long_running_request_counts_while_open_and_is_observed_when_it_ends() {
        let m = Arc::new(Metrics::default());
        let query = Some("watch=true");
        let watch = RequestLabels::of(
            &attrs("GET", "/api/v1/namespaces/d/pods", query),
            "GET",
            None,
            false,
            query,
        )
        .unwrap();
        assert_eq!(watch.verb, "WATCH");
        let series = "component=\"apiserver\",group=\"\",resource=\"pods\",scope=\"namespace\",subresource=\"\",verb=\"WATCH\",version=\"v1\"";
        let start = Instant::now() - Duration::from_secs(90);
        let body = ObservedAtEnd::begin(m.clone(), watch, start, 200).around(
            http_body_util::combinators::UnsyncBoxBody::new(http_body_util::Empty::<Bytes>::new()),
        );
        let open = m.render();
        assert!(
            open.contains(&format!("apiserver_longrunning_requests{{{series}}} 1")),
            "{open}"
        );
        assert!(
            !open.contains("apiserver_request_total{code=\"200\""),
            "{open}"
        );
        drop(body);
        let ended = m.render();
        assert!(
            ended.contains(&format!("apiserver_longrunning_requests{{{series}}} 0")),
            "{ended}"
        );
        let with_dry_run = "component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"pods\",scope=\"namespace\",subresource=\"\",verb=\"WATCH\",version=\"v1\"";
        assert!(ended.contains(&format!(
            "apiserver_request_total{{code=\"200\",{with_dry_run}}} 1"
        )));
        // Its whole duration: past the 60 s bucket.
        assert!(
            ended.contains(&format!(
                "apiserver_request_duration_seconds_bucket{{{with_dry_run},le=\"60\"}} 0"
            )),
            "{ended}"
        );
    }

    #[test]
    fn renders() {
        let m = Metrics::default();
        let get = RequestLabels::of(
            &attrs("GET", "/api/v1/namespaces/d/pods/p", None),
            "GET",
            None,
            false,
            None,
        )
        .unwrap();
        let outcome = |code, seconds| RequestOutcome {
            code,
            seconds,
            excluded_seconds: 0.0,
            response_bytes: Some(2_500),
        };
        m.observe(&get, outcome(200, 0.01));
        m.observe(&get, outcome(200, 0.02));
        m.observe(&get, outcome(404, 0.001));
        // A create that spent 70 ms of its 100 ms in webhooks: 30 ms for the SLI, and
        // no response size (not a read).
        let create = RequestLabels::of(
            &attrs("POST", "/api/v1/namespaces/d/pods", None),
            "POST",
            None,
            false,
            None,
        )
        .unwrap();
        m.observe(
            &create,
            RequestOutcome {
                code: 201,
                seconds: 0.1,
                excluded_seconds: 0.07,
                response_bytes: Some(900),
            },
        );
        m.watch_started();
        m.terminated(&get, 429);
        let t = m.render();
        let series = "component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"pods\",scope=\"resource\",subresource=\"\",verb=\"GET\",version=\"v1\"";
        assert!(
            t.contains(&format!(
                "apiserver_request_total{{code=\"200\",{series}}} 2"
            )),
            "{t}"
        );
        assert!(t.contains(&format!(
            "apiserver_request_total{{code=\"404\",{series}}} 1"
        )));
        assert!(t.contains(&format!(
            "apiserver_request_terminations_total{{code=\"429\",{series}}} 1"
        )));
        assert!(t.contains(&format!(
            "apiserver_request_duration_seconds_bucket{{{series},le=\"0.005\"}} 1"
        )));
        assert!(t.contains(&format!(
            "apiserver_request_duration_seconds_bucket{{{series},le=\"0.025\"}} 3"
        )));
        assert!(t.contains(&format!(
            "apiserver_request_duration_seconds_bucket{{{series},le=\"45\"}} 3"
        )));
        assert!(t.contains(&format!(
            "apiserver_request_duration_seconds_count{{{series}}} 3"
        )));
        assert!(
            !t.contains("apiserver_longrunning_requests"),
            "no series yet: {t}"
        );
        let sli = "component=\"apiserver\",group=\"\",resource=\"pods\",scope=\"resource\",subresource=\"\",verb=\"GET\",version=\"v1\"";
        assert!(t.contains(&format!(
            "apiserver_request_sli_duration_seconds_count{{{sli}}} 3"
        )));
        assert!(
            t.contains(&format!(
                "apiserver_response_sizes_bucket{{{sli},le=\"1000\"}} 0"
            )),
            "{t}"
        );
        assert!(t.contains(&format!(
            "apiserver_response_sizes_bucket{{{sli},le=\"10000\"}} 3"
        )));
        let post = sli.replace("verb=\"GET\"", "verb=\"POST\"");
        assert!(
            t.contains(&format!(
                "apiserver_request_sli_duration_seconds_bucket{{{post},le=\"0.05\"}} 1"
            )),
            "{t}"
        );
        assert!(
            t.contains(&format!(
                "apiserver_request_duration_seconds_bucket{{{},le=\"0.05\"}} 0",
                post.replacen("group", "dry_run=\"\",group", 1)
            )),
            "{t}"
        );
        assert!(!t.contains(&format!("apiserver_response_sizes_count{{{post}}}")));
    }

    #[tokio::test]
    async fn excluded_latency_is_counted_for_the_request_it_ran_in() {
        let started = Instant::now();
        let ((), excluded) = with_excluded_latency(async {
            exclude_from_sli(tokio::time::sleep(Duration::from_millis(30))).await;
            tokio::time::sleep(Duration::from_millis(10)).await;
            exclude_from_sli(tokio::time::sleep(Duration::from_millis(20))).await;
        })
        .await;
        // Both excluded waits, and not the 10 ms between them.
        assert!(excluded >= Duration::from_millis(50), "{excluded:?}");
        assert!(
            excluded + Duration::from_millis(10) <= started.elapsed(),
            "{excluded:?} of {:?}",
            started.elapsed()
        );
        // Outside a request the work only runs.
        assert_eq!(exclude_from_sli(async { 7 }).await, 7);
    }

    #[test]
    fn config_reloads_are_counted_by_file_and_outcome() {
        let m = Metrics::default();
        assert!(!m.render().contains("config_controller"));
        m.config_reloaded(ReloadedConfig::Authorization, true);
        m.config_reloaded(ReloadedConfig::Authorization, true);
        m.config_reloaded(ReloadedConfig::Authorization, false);
        let t = m.render();
        let id = &m.config_reloads.apiserver_id_hash;
        assert!(id.starts_with("sha256:") && id.len() == 7 + 64, "{id}");
        assert!(t.contains(&format!(
            "apiserver_authorization_config_controller_automatic_reloads_total{{apiserver_id_hash=\"{id}\",status=\"success\"}} 2"
        )), "{t}");
        assert!(t.contains(&format!(
            "apiserver_authorization_config_controller_automatic_reloads_total{{apiserver_id_hash=\"{id}\",status=\"failure\"}} 1"
        )));
        assert!(t.contains(
            "# TYPE apiserver_authorization_config_controller_automatic_reload_last_timestamp_seconds gauge"
        ));
        assert!(!t.contains("apiserver_authentication_config_controller"));
    }

    #[test]
    fn inflight_reports_the_high_mark_of_the_last_second() {
        let m = Metrics::default();
        let t = m.render();
        assert!(t.contains("apiserver_current_inflight_requests{request_kind=\"mutating\"} 0"));
        assert!(t.contains("apiserver_current_inflight_requests{request_kind=\"readOnly\"} 0"));
        {
            let _a = m.executing(true);
            let _b = m.executing(false);
            assert_eq!(m.inflight.current(), [1, 1]);
        }
        assert_eq!(m.inflight.current(), [0, 0]);

        // Periods given by hand rather than waited for (period 0 may be under way).
        let f = Inflight::new();
        let (read_only, mutating) = (0, 1);
        f.add_at(mutating, 1, 10);
        f.add_at(mutating, 1, 10);
        f.add_at(read_only, 1, 10);
        f.add_at(mutating, -1, 10);
        assert_eq!(f.last_period(10), [0, 0], "period 10 is not over");
        assert_eq!(f.last_period(11), [1, 2], "the high marks of period 10");
        f.add_at(mutating, -1, 11);
        assert_eq!(f.last_period(12), [1, 1], "period 11 started at the count");
        assert_eq!(f.last_period(20), [1, 0], "quiet periods held the count");
        assert_eq!(f.current(), [1, 0]);
    }

    #[test]
    fn status_codes_are_written_in_decimal() {
        let mut digits = [0; 5];
        assert_eq!(decimal(200, &mut digits), "200");
        assert_eq!(decimal(0, &mut digits), "0");
        assert_eq!(decimal(u16::MAX, &mut digits), "65535");
    }

    #[test]
    fn object_type_is_the_resource_prefix() {
        assert_eq!(object_type("/registry/pods/default/web"), "/registry/pods/");
        assert_eq!(
            object_type("/registry/namespaces/default"),
            "/registry/namespaces/"
        );
        assert_eq!(object_type("/registry/pods/"), "/registry/pods/");
        assert_eq!(object_type("/registry/pods"), "/registry/pods");
        assert_eq!(object_type(""), "");
    }
}
