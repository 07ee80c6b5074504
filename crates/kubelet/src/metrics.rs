//! The kubelet's own metrics (`/metrics`) and the container metrics cAdvisor would give
//! (`/metrics/cadvisor`, here from CRI stats), in the Prometheus text format with
//! upstream's metric names. The kubelet's own are component-base's metric families;
//! the cAdvisor page is rendered from a sample of CRI stats, pure and table-tested.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use ferrokube_component_base::metrics::{
    CounterVec, DEFAULT_BUCKETS, GaugeVec, Histogram, HistogramVec, exponential_buckets, unix_now,
};
use parking_lot::Mutex;

/// `kubelet_pleg_relist_duration_seconds` buckets (upstream's).
const PLEG_BUCKETS: &[f64] = &exponential_buckets::<10>(0.005, 2.0);
/// `kubelet_pod_start_duration_seconds` buckets (upstream's).
const POD_START_BUCKETS: &[f64] = &[
    0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 20.0, 30.0, 45.0, 60.0, 120.0, 180.0, 240.0,
    300.0, 360.0, 480.0, 600.0, 900.0, 1200.0, 1800.0, 2700.0, 3600.0,
];

/// `kubelet_pod_status_sync_duration_seconds` buckets (upstream's).
const POD_STATUS_SYNC_BUCKETS: &[f64] = &[
    0.010, 0.050, 0.100, 0.500, 1.0, 5.0, 10.0, 20.0, 30.0, 45.0, 60.0,
];

/// `storage_operation_duration_seconds` buckets (upstream's `pkg/volume/util`).
const STORAGE_OPERATION_BUCKETS: &[f64] = &[
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 25.0, 50.0, 120.0, 300.0, 600.0,
];

/// The `state` values of `volume_manager_total_volumes`: the volumes the kubelet wants
/// mounted for its pods, and the ones that are.
pub const DESIRED_STATE_OF_WORLD: &str = "desired_state_of_world";
pub const ACTUAL_STATE_OF_WORLD: &str = "actual_state_of_world";

/// The `operation_name` values of `storage_operation_duration_seconds` for what this
/// kubelet's volume manager does (upstream's operation generator): a volume's SetUp,
/// its TearDown, and the fsGroup ownership walk of a SetUp.
pub const VOLUME_MOUNT: &str = "volume_mount";
pub const VOLUME_UNMOUNT: &str = "volume_unmount";
pub const VOLUME_APPLY_ACCESS_CONTROL: &str = "volume_apply_access_control";

/// What the kubelet records while it runs (one per kubelet; the certificate managers'
/// metrics, which the process registers as upstream's do, are [`CertificateMetrics`]).
#[derive(Debug)]
pub struct KubeletMetrics {
    operations: CounterVec<1>,
    operation_errors: CounterVec<1>,
    operation_duration: HistogramVec<1>,
    pleg_relist: HistogramVec<0>,
    pleg_relist_interval: HistogramVec<0>,
    pleg_last_seen: GaugeVec<0>,
    /// When the previous relist started (for the interval).
    last_relist: Mutex<Option<Instant>>,
    pod_start: HistogramVec<0>,
    pod_worker_duration: HistogramVec<1>,
    started_pods: CounterVec<0>,
    started_pods_errors: CounterVec<0>,
    started_containers: CounterVec<1>,
    /// code, container_type (the text format's order).
    started_containers_errors: CounterVec<2>,
    evictions: CounterVec<1>,
    cgroup_manager: HistogramVec<1>,
    /// migrated, operation_name, status, volume_plugin (the text format's order).
    storage_operations: HistogramVec<4>,
    /// Pods whose start was already observed (by UID).
    started: Mutex<HashSet<String>>,
    /// static (`true`, or empty for API pods).
    desired_pods: GaugeVec<1>,
    active_pods: GaugeVec<1>,
    mirror_pods: GaugeVec<0>,
    /// config, lifecycle, static (the text format's order).
    working_pods: GaugeVec<3>,
    restarted_pods: CounterVec<1>,
    orphaned_runtime_pods: CounterVec<0>,
    /// Upstream's vectors without labels: shown once a pod's startup is recorded.
    pod_start_sli: HistogramVec<0>,
    pod_start_total: HistogramVec<0>,
    first_network_pod_start_sli: GaugeVec<0>,
    startup: Mutex<crate::pod_startup::PodStartupTracker>,
    pod_status_sync: HistogramVec<0>,
    /// long_running, method, path, server_type (the text format's order).
    http_requests: CounterVec<4>,
    http_duration: HistogramVec<4>,
    http_inflight: GaugeVec<4>,
}

impl Default for KubeletMetrics {
    fn default() -> Self {
        KubeletMetrics {
            operations: CounterVec::new(
                "kubelet_runtime_operations_total",
                "[ALPHA] Cumulative number of runtime operations by operation type.",
                ["operation_type"],
            ),
            operation_errors: CounterVec::new(
                "kubelet_runtime_operations_errors_total",
                "[ALPHA] Cumulative number of runtime operation errors by operation type.",
                ["operation_type"],
            ),
            operation_duration: HistogramVec::histogram(
                "kubelet_runtime_operations_duration_seconds",
                "[ALPHA] Duration in seconds of runtime operations. Broken down by operation type.",
                ["operation_type"],
                &DEFAULT_BUCKETS,
            ),
            pleg_relist: HistogramVec::histogram(
                "kubelet_pleg_relist_duration_seconds",
                "[ALPHA] Duration in seconds for relisting pods in PLEG.",
                [],
                PLEG_BUCKETS,
            ),
            pleg_relist_interval: HistogramVec::histogram(
                "kubelet_pleg_relist_interval_seconds",
                "[ALPHA] Interval in seconds between relisting in PLEG.",
                [],
                &DEFAULT_BUCKETS,
            ),
            pleg_last_seen: GaugeVec::new(
                "kubelet_pleg_last_seen_seconds",
                "[ALPHA] Timestamp in seconds when PLEG was last seen active.",
                [],
            ),
            last_relist: Mutex::new(None),
            pod_start: HistogramVec::histogram(
                "kubelet_pod_start_duration_seconds",
                "[ALPHA] Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run",
                [],
                POD_START_BUCKETS,
            ),
            pod_worker_duration: HistogramVec::histogram(
                "kubelet_pod_worker_duration_seconds",
                "[ALPHA] Duration in seconds to sync a single pod. Broken down by operation type: create, update, or sync",
                ["operation_type"],
                &DEFAULT_BUCKETS,
            ),
            started_pods: CounterVec::new(
                "kubelet_started_pods_total",
                "[ALPHA] Cumulative number of pods started",
                [],
            ),
            started_pods_errors: CounterVec::new(
                "kubelet_started_pods_errors_total",
                "[ALPHA] Cumulative number of errors when starting pods",
                [],
            ),
            started_containers: CounterVec::new(
                "kubelet_started_containers_total",
                "[ALPHA] Cumulative number of containers started",
                ["container_type"],
            ),
            started_containers_errors: CounterVec::new(
                "kubelet_started_containers_errors_total",
                "[ALPHA] Cumulative number of errors when starting containers",
                ["code", "container_type"],
            ),
            evictions: CounterVec::new(
                "kubelet_evictions",
                "[ALPHA] Cumulative number of pod evictions by eviction signal",
                ["eviction_signal"],
            ),
            cgroup_manager: HistogramVec::histogram(
                "kubelet_cgroup_manager_duration_seconds",
                "[ALPHA] Duration in seconds for cgroup manager operations. Broken down by method.",
                ["operation_type"],
                &DEFAULT_BUCKETS,
            ),
            storage_operations: HistogramVec::histogram(
                "storage_operation_duration_seconds",
                "[ALPHA] Storage operation duration",
                ["migrated", "operation_name", "status", "volume_plugin"],
                STORAGE_OPERATION_BUCKETS,
            ),
            started: Mutex::new(HashSet::new()),
            desired_pods: GaugeVec::new(
                "kubelet_desired_pods",
                "[ALPHA] The number of pods the kubelet is being instructed to run. static is true if the pod is not from the apiserver.",
                ["static"],
            ),
            active_pods: GaugeVec::new(
                "kubelet_active_pods",
                "[ALPHA] The number of pods the kubelet considers active and which are being considered when admitting new pods. static is true if the pod is not from the apiserver.",
                ["static"],
            ),
            mirror_pods: GaugeVec::new(
                "kubelet_mirror_pods",
                "[ALPHA] The number of mirror pods the kubelet will try to create (one per admitted static pod)",
                [],
            ),
            working_pods: GaugeVec::new(
                "kubelet_working_pods",
                "[ALPHA] Number of pods the kubelet is actually running, broken down by lifecycle phase, whether the pod is desired, orphaned, or runtime only (also orphaned), and whether the pod is static. An orphaned pod has been removed from local configuration or force deleted in the API and consumes resources that are not otherwise visible.",
                ["config", "lifecycle", "static"],
            ),
            restarted_pods: CounterVec::new(
                "kubelet_restarted_pods_total",
                "[ALPHA] Number of pods that have been restarted because they were deleted and recreated with the same UID while the kubelet was watching them (common for static pods, extremely uncommon for API pods)",
                ["static"],
            ),
            orphaned_runtime_pods: CounterVec::new(
                "kubelet_orphaned_runtime_pods_total",
                "[ALPHA] Number of pods that have been detected in the container runtime without being already known to the pod worker. This typically indicates the kubelet was restarted while a pod was force deleted in the API or in the local configuration, which is unusual.",
                [],
            ),
            pod_start_sli: HistogramVec::histogram(
                "kubelet_pod_start_sli_duration_seconds",
                "[ALPHA] Duration in seconds to start a pod, excluding time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch",
                [],
                POD_START_BUCKETS,
            ),
            pod_start_total: HistogramVec::histogram(
                "kubelet_pod_start_total_duration_seconds",
                "[ALPHA] Duration in seconds to start a pod since creation, including time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch",
                [],
                POD_START_BUCKETS,
            ),
            first_network_pod_start_sli: GaugeVec::new(
                "kubelet_first_network_pod_start_sli_duration_seconds",
                "[INTERNAL] Duration in seconds to start the first network pod, excluding time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch",
                [],
            ),
            startup: Mutex::new(Default::default()),
            pod_status_sync: HistogramVec::histogram(
                "kubelet_pod_status_sync_duration_seconds",
                "[ALPHA] Duration in seconds to sync a pod status update. Measures time from detection of a change to pod status until the API is successfully updated for that pod, even if multiple intevening changes to pod status occur.",
                [],
                POD_STATUS_SYNC_BUCKETS,
            ),
            http_requests: CounterVec::new(
                "kubelet_http_requests_total",
                "[ALPHA] Number of the http requests received since the server started",
                ["long_running", "method", "path", "server_type"],
            ),
            http_duration: HistogramVec::histogram(
                "kubelet_http_requests_duration_seconds",
                "[ALPHA] Duration in seconds to serve http requests",
                ["long_running", "method", "path", "server_type"],
                &DEFAULT_BUCKETS,
            ),
            http_inflight: GaugeVec::new(
                "kubelet_http_inflight_requests",
                "[ALPHA] Number of the inflight http requests",
                ["long_running", "method", "path", "server_type"],
            ),
        }
    }
}

/// Which of upstream's kubelet servers a request came to (the `server_type` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpServer {
    /// `--read-only-port`: no authentication, debugging handlers disabled.
    ReadOnly,
    /// `--port`: authenticated, with the debugging handlers.
    ReadWrite,
}

/// The path buckets upstream's server registers as it installs its handlers; any
/// other root is `other`, so that the label's values stay few whatever is asked.
const HTTP_DEFAULT_BUCKETS: &[&str] = &[
    "healthz",
    "pods",
    "stats",
    "metrics",
    "metrics/cadvisor",
    "metrics/probes",
    "metrics/resource",
    // ContainerCheckpoint is on by default in 1.33.
    "checkpoint",
];
const HTTP_DEBUGGING_BUCKETS: &[&str] = &[
    "run",
    "exec",
    "attach",
    "portForward",
    "containerLogs",
    "configz",
    "runningpods",
    "logs",
    "debug",
];
const HTTP_DEBUGGING_DISABLED_BUCKETS: &[&str] = &[
    "run",
    "exec",
    "attach",
    "portForward",
    "containerLogs",
    "runningpods",
    "pprof",
    "logs",
];

/// The labels of one request on upstream's kubelet server metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpRequestLabels {
    pub method: &'static str,
    pub path: &'static str,
    pub server_type: &'static str,
    pub long_running: &'static str,
}

impl HttpRequestLabels {
    /// Upstream's buckets: the method if a standard one but PATCH (which upstream's
    /// list lacks), else `other`; the path's first segment (`metrics/<next>` under
    /// `/metrics`) if the server has a handler there, else `other`; long running for
    /// `exec`, `attach` and `debug` (upstream's list spells `portforward`, which no
    /// bucket matches, so port-forwards count as not long running there too).
    pub fn of(server: HttpServer, method: &str, path: &str) -> HttpRequestLabels {
        const METHODS: &[&str] = &[
            "OPTIONS", "GET", "HEAD", "POST", "PUT", "DELETE", "TRACE", "CONNECT",
        ];
        let method = METHODS
            .iter()
            .find(|m| **m == method)
            .copied()
            .unwrap_or("other");
        let trimmed = path.strip_prefix('/').unwrap_or(path);
        let mut parts = trimmed.splitn(3, '/');
        let first = parts.next().unwrap_or("");
        let second = parts.next();
        let debugging = match server {
            HttpServer::ReadOnly => HTTP_DEBUGGING_DISABLED_BUCKETS,
            HttpServer::ReadWrite => HTTP_DEBUGGING_BUCKETS,
        };
        let known = |root: &str| {
            HTTP_DEFAULT_BUCKETS
                .iter()
                .chain(debugging)
                .find(|b| **b == root)
                .copied()
        };
        let path = match (first, second) {
            ("metrics", Some(next)) => HTTP_DEFAULT_BUCKETS
                .iter()
                .find(|b| b.strip_prefix("metrics/") == Some(next))
                .copied(),
            _ => known(first),
        }
        .unwrap_or("other");
        let long_running = matches!(path, "exec" | "attach" | "portforward" | "debug");
        HttpRequestLabels {
            method,
            path,
            server_type: match server {
                HttpServer::ReadOnly => "readonly",
                HttpServer::ReadWrite => "readwrite",
            },
            long_running: if long_running { "true" } else { "false" },
        }
    }

    fn values(&self) -> [&'static str; 4] {
        [self.long_running, self.method, self.path, self.server_type]
    }
}

/// One request in flight on a kubelet server: counted when made, and when dropped
/// (its response body written, or the connection gone) no longer in flight and timed.
#[derive(Debug)]
pub struct HttpRequestInFlight {
    metrics: Arc<KubeletMetrics>,
    labels: HttpRequestLabels,
    started: Instant,
}

impl Drop for HttpRequestInFlight {
    fn drop(&mut self) {
        let values = self.labels.values();
        self.metrics.http_inflight.with(values, |g| g.0 -= 1.0);
        self.metrics
            .http_duration
            .observe(values, self.started.elapsed().as_secs_f64());
    }
}

impl KubeletMetrics {
    /// A request arrives at a kubelet server.
    pub fn http_request(self: &Arc<Self>, labels: HttpRequestLabels) -> HttpRequestInFlight {
        let values = labels.values();
        self.http_requests.inc(values);
        self.http_inflight.with(values, |g| g.0 += 1.0);
        HttpRequestInFlight {
            metrics: self.clone(),
            labels,
            started: Instant::now(),
        }
    }
}

/// Upstream's `operation_type` label of a CRI method (`run_pod_sandbox` ->
/// `run_podsandbox`, `list_pod_sandbox` -> `list_podsandbox`).
pub fn operation_type(method: &str) -> String {
    method.replace("pod_sandbox", "podsandbox")
}

/// Gauges read at scrape time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KubeletGauges {
    /// This kubelet's node (`kubelet_node_name`).
    pub node_name: String,
    /// The filesystem figures of the claimed volumes this kubelet measures, by
    /// `(namespace, claim)` (`kubelet_volume_stats_*`).
    pub volume_stats: BTreeMap<(String, String), crate::stats::FsStats>,
    /// Pods with a running sandbox.
    pub running_pods: u64,
    /// Containers by CRI state label (`running`, `exited`, `created`, `unknown`).
    pub containers_by_state: BTreeMap<String, u64>,
    /// The volume manager's pod volumes by `(plugin_name, state)`
    /// (`volume_manager_total_volumes`; a pair with none is left out, as upstream's).
    pub volumes: BTreeMap<(String, String), u64>,
}

impl KubeletMetrics {
    /// Records one CRI call of `method` that took `took` and failed or not.
    pub fn observe_operation(&self, method: &str, took: Duration, failed: bool) {
        let operation = operation_type(method);
        let labels = [operation.as_str()];
        self.operations.inc(labels);
        // Counted at 0 too, so that every operation type has an errors series.
        self.operation_errors.add(labels, u64::from(failed));
        self.operation_duration.observe(labels, took.as_secs_f64());
    }

    /// A PLEG relist that started at `started` and took `took`: its duration, the
    /// interval since the previous one started, and when PLEG was last active.
    pub fn observe_relist(&self, started: Instant, took: Duration) {
        self.pleg_relist.observe([], took.as_secs_f64());
        if let Some(previous) = self.last_relist.lock().replace(started) {
            self.pleg_relist_interval
                .observe([], started.duration_since(previous).as_secs_f64());
        }
        self.pleg_last_seen.set([], unix_now().floor());
    }

    /// One pod sync (`create`, `update`, `sync` or `kill`, upstream's sync types) and how
    /// long it took.
    pub fn observe_pod_worker(&self, operation: &str, took: Duration) {
        self.pod_worker_duration
            .observe([operation], took.as_secs_f64());
    }

    /// A pod sandbox the kubelet asked the runtime for, and whether that failed.
    pub fn observe_pod_started(&self, failed: bool) {
        self.started_pods.inc([]);
        self.started_pods_errors.add([], u64::from(failed));
    }

    /// A container start the kubelet tried (`container`, `init_container` or
    /// `ephemeral_container`), and the error code it failed with (upstream's
    /// well-known reasons: `ErrImagePull`, `CreateContainerError`, ...).
    pub fn observe_container_started(&self, container_type: &str, error: Option<&str>) {
        self.started_containers.inc([container_type]);
        if let Some(code) = error {
            self.started_containers_errors.inc([code, container_type]);
        }
    }

    /// A pod the eviction manager evicted, by the signal it acted on.
    pub fn observe_eviction(&self, signal: &str) {
        self.evictions.inc([signal]);
    }

    /// One cgroup manager operation (`create`, `update` or `destroy`, upstream's
    /// methods) and how long it took, whatever its outcome (as upstream's deferred
    /// observation).
    pub fn observe_cgroup_operation(&self, operation: &str, took: Duration) {
        self.cgroup_manager.observe([operation], took.as_secs_f64());
    }

    /// One volume operation (`volume_mount`, ...) of a plugin, whether it succeeded
    /// (`status` `success`, else `fail-unknown`) and how long it took. No volume this
    /// kubelet mounts is migrated to CSI.
    pub fn observe_storage_operation(
        &self,
        plugin: &str,
        operation: &str,
        succeeded: bool,
        took: Duration,
    ) {
        let status = if succeeded { "success" } else { "fail-unknown" };
        self.storage_operations
            .observe(["false", operation, status, plugin], took.as_secs_f64());
    }

    /// The count of one storage operation series so far (0 if never recorded).
    pub fn storage_operation_count(&self, plugin: &str, operation: &str, succeeded: bool) -> u64 {
        let status = if succeeded { "success" } else { "fail-unknown" };
        self.storage_operations
            .get(["false", operation, status, plugin])
            .map_or(0, |h| h.count())
    }

    /// The count of one cgroup manager operation so far.
    pub fn cgroup_operation_count(&self, operation: &str) -> u64 {
        self.cgroup_manager
            .get([operation])
            .map_or(0, |h| h.count())
    }

    /// Records a pod's start (first seen to Running) once per pod UID.
    pub fn observe_pod_start(&self, pod_uid: &str, took: Duration) {
        if self.started.lock().insert(pod_uid.to_owned()) {
            self.pod_start.observe([], took.as_secs_f64());
        }
    }

    /// Forgets a pod that left the node.
    pub fn forget_pod(&self, pod_uid: &str) {
        self.started.lock().remove(pod_uid);
        self.startup.lock().forget(pod_uid);
    }

    /// The pod counts of one housekeeping pass (upstream sets them all each pass).
    pub fn set_pod_counts(&self, counts: &crate::working_pods::PodCounts) {
        self.desired_pods.set([""], counts.desired.0 as f64);
        self.desired_pods.set(["true"], counts.desired.1 as f64);
        self.active_pods.set([""], counts.active.0 as f64);
        self.active_pods.set(["true"], counts.active.1 as f64);
        self.mirror_pods.set([], counts.mirrors as f64);
        for ((lifecycle, config, is_static), n) in &counts.working {
            self.working_pods
                .set([config, lifecycle, is_static], *n as f64);
        }
    }

    /// Pods restarted in one housekeeping pass because they came back with the UID of
    /// a pod still being terminated; counted (0 too) every pass, as upstream's.
    pub fn add_restarted_pods(&self, regular: u64, statics: u64) {
        self.restarted_pods.add(["true"], statics);
        self.restarted_pods.add([""], regular);
    }

    /// Runtime pods found without a worker and handed to termination.
    pub fn add_orphaned_runtime_pods(&self, n: u64) {
        self.orphaned_runtime_pods.add([], n);
    }

    /// An API pod as the pod watch delivered it: records its startup once the watch
    /// shows it started ([`crate::pod_startup`]).
    pub fn observe_pod_on_watch(&self, pod: &k8s_openapi::api::core::v1::Pod) {
        let seen = self.startup.lock().observed_on_watch(pod, unix_now());
        self.record_startup(seen);
    }

    fn record_startup(&self, seen: Option<crate::pod_startup::StartupObservation>) {
        if let Some(seen) = seen {
            self.pod_start_sli.observe([], seen.sli_seconds);
            self.pod_start_total.observe([], seen.total_seconds);
            if seen.first_network {
                self.first_network_pod_start_sli.set([], seen.sli_seconds);
            }
        }
    }

    /// Forgets the startup of a pod gone from the API.
    pub fn forget_pod_startup(&self, pod_uid: &str) {
        self.startup.lock().forget(pod_uid);
    }

    /// An image pull for the pod starts.
    pub fn image_started_pulling(&self, pod_uid: &str) {
        self.startup
            .lock()
            .image_started_pulling(pod_uid, unix_now());
    }

    /// An image pull for the pod succeeded.
    pub fn image_finished_pulling(&self, pod_uid: &str) {
        self.startup
            .lock()
            .image_finished_pulling(pod_uid, unix_now());
    }

    /// The kubelet set a status for the pod.
    pub fn pod_status_updated(
        &self,
        pod_uid: &str,
        status: &k8s_openapi::api::core::v1::PodStatus,
    ) {
        let seen = self
            .startup
            .lock()
            .status_updated(pod_uid, status, unix_now());
        self.record_startup(seen);
    }

    /// A pod status change reached the API `took` after it was first seen.
    pub fn observe_pod_status_sync(&self, took: Duration) {
        self.pod_status_sync.observe([], took.as_secs_f64());
    }

    /// The `/metrics` page.
    pub fn render(&self, gauges: &KubeletGauges) -> String {
        let mut out = String::new();
        family(
            &mut out,
            "kubelet_node_name",
            "gauge",
            "The node's name. The count is always 1.",
        );
        let _ = writeln!(
            out,
            "kubelet_node_name{{node=\"{}\"}} 1",
            escape(&gauges.node_name)
        );
        family(
            &mut out,
            "kubelet_running_pods",
            "gauge",
            "Number of pods that have a running pod sandbox",
        );
        let _ = writeln!(out, "kubelet_running_pods {}", gauges.running_pods);
        family(
            &mut out,
            "kubelet_running_containers",
            "gauge",
            "Number of containers currently running",
        );
        for (state, n) in &gauges.containers_by_state {
            let _ = writeln!(
                out,
                "kubelet_running_containers{{container_state=\"{state}\"}} {n}"
            );
        }
        render_volume_stats(&mut out, &gauges.volume_stats);
        if !gauges.volumes.is_empty() {
            family(
                &mut out,
                "volume_manager_total_volumes",
                "gauge",
                "Number of volumes in Volume Manager",
            );
            for ((plugin, state), n) in &gauges.volumes {
                let _ = writeln!(
                    out,
                    "volume_manager_total_volumes{{plugin_name=\"{}\",state=\"{}\"}} {n}",
                    escape(plugin),
                    escape(state)
                );
            }
        }
        self.storage_operations.render(&mut out);
        self.cgroup_manager.render(&mut out);
        CertificateMetrics::global().render(&mut out, SystemTime::now());
        self.pod_start.render(&mut out);
        // Vectors without labels upstream: nothing until something is recorded.
        for h in [
            &self.pod_start_sli,
            &self.pod_start_total,
            &self.pod_status_sync,
        ] {
            if h.get([]).is_some() {
                h.render(&mut out);
            }
        }
        self.first_network_pod_start_sli.render(&mut out);
        self.desired_pods.render(&mut out);
        self.active_pods.render(&mut out);
        self.mirror_pods.render(&mut out);
        self.working_pods.render(&mut out);
        self.restarted_pods.render(&mut out);
        self.orphaned_runtime_pods.render(&mut out);
        self.pod_worker_duration.render(&mut out);
        self.http_requests.render(&mut out);
        self.http_duration.render(&mut out);
        self.http_inflight.render(&mut out);
        self.started_pods.render(&mut out);
        self.started_pods_errors.render(&mut out);
        self.started_containers.render(&mut out);
        self.started_containers_errors.render(&mut out);
        self.evictions.render(&mut out);
        self.pleg_relist.render(&mut out);
        self.pleg_relist_interval.render(&mut out);
        self.pleg_last_seen.render(&mut out);
        self.operations.render(&mut out);
        self.operation_errors.render(&mut out);
        self.operation_duration.render(&mut out);
        ferrokube_component_base::metrics::process::write_process_metrics(&mut out);
        ferrokube_client::metrics::write_rest_client_metrics(&mut out);
        out
    }
}

/// The expiry of a certificate manager's current certificate (`None` while it has none).
pub type CertificateExpiry = Arc<dyn Fn() -> Option<SystemTime> + Send + Sync>;

/// `kubelet_certificate_manager_server_rotation_seconds` buckets (upstream's: a minute,
/// an hour, 4 hours, a day, a week, a month, 3 and 6 months, a year, 4 years).
const CERTIFICATE_ROTATION_BUCKETS: &[f64] = &[
    60.0,
    3600.0,
    14400.0,
    86400.0,
    604800.0,
    2592000.0,
    7776000.0,
    15552000.0,
    31104000.0,
    124416000.0,
];

/// The certificate managers' metrics (upstream `pkg/kubelet/certificate/kubelet.go` and
/// `cmd/kubelet/app/server.go`). As upstream registers them in the process's registry
/// when it builds a manager, a manager registers itself here, in the process's
/// [`CertificateMetrics::global`] (which every kubelet `/metrics` page shows) unless told
/// otherwise, and each manager's families show only once it is registered:
///
/// - client certificate rotation (`rotateCertificates`):
///   `kubelet_certificate_manager_client_ttl_seconds` (seconds until the current client
///   certificate expires, truncated, negative once expired, `+Inf` without one) and
///   `kubelet_certificate_manager_client_expiration_renew_errors` (failed renewals);
/// - the serving certificate bootstrap (`serverTLSBootstrap`):
///   `kubelet_certificate_manager_server_ttl_seconds`,
///   `kubelet_certificate_manager_server_rotation_seconds` (how long the replaced
///   certificate had lived, from its notBefore, at each rotation) and
///   `kubelet_server_expiration_renew_errors`.
pub struct CertificateMetrics {
    client: Mutex<Option<CertificateExpiry>>,
    client_renew_errors: CounterVec<0>,
    server: Mutex<Option<CertificateExpiry>>,
    server_renew_errors: CounterVec<0>,
    server_rotation: Mutex<Histogram>,
}

impl std::fmt::Debug for CertificateMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertificateMetrics")
            .field("client", &self.client.lock().is_some())
            .field("server", &self.server.lock().is_some())
            .finish_non_exhaustive()
    }
}

impl Default for CertificateMetrics {
    fn default() -> Self {
        CertificateMetrics {
            client: Mutex::new(None),
            client_renew_errors: CounterVec::new(
                "kubelet_certificate_manager_client_expiration_renew_errors",
                "[ALPHA] Counter of certificate renewal errors.",
                [],
            ),
            server: Mutex::new(None),
            server_renew_errors: CounterVec::new(
                "kubelet_server_expiration_renew_errors",
                "[ALPHA] Counter of certificate renewal errors.",
                [],
            ),
            server_rotation: Mutex::new(Histogram::new(CERTIFICATE_ROTATION_BUCKETS)),
        }
    }
}

impl CertificateMetrics {
    /// The process's registry of certificate manager metrics.
    pub fn global() -> &'static CertificateMetrics {
        static GLOBAL: OnceLock<CertificateMetrics> = OnceLock::new();
        GLOBAL.get_or_init(CertificateMetrics::default)
    }

    /// The client certificate manager, whose current certificate's expiry `expiry` gives.
    pub fn register_client(&self, expiry: CertificateExpiry) {
        *self.client.lock() = Some(expiry);
    }

    /// The serving certificate manager.
    pub fn register_server(&self, expiry: CertificateExpiry) {
        *self.server.lock() = Some(expiry);
    }

    /// A client certificate renewal that failed.
    pub fn client_renew_failed(&self) {
        self.client_renew_errors.inc([]);
    }

    /// A serving certificate renewal that failed.
    pub fn server_renew_failed(&self) {
        self.server_renew_errors.inc([]);
    }

    /// The serving certificate was replaced at `now`; the one replaced was valid from
    /// `previous_not_before`.
    pub fn server_rotated(&self, previous_not_before: SystemTime, now: SystemTime) {
        let lived = now
            .duration_since(previous_not_before)
            .map_or(0.0, |d| d.as_secs_f64());
        self.server_rotation.lock().observe(lived);
    }

    /// Failed client renewals so far.
    pub fn client_renew_errors(&self) -> u64 {
        self.client_renew_errors.value([])
    }

    /// Failed serving renewals so far.
    pub fn server_renew_errors(&self) -> u64 {
        self.server_renew_errors.value([])
    }

    /// The registered families, in name order, with the TTLs as of `now`.
    pub fn render(&self, out: &mut String, now: SystemTime) {
        let client = self.client.lock().clone();
        let server = self.server.lock().clone();
        if let Some(expiry) = client {
            self.client_renew_errors.render(out);
            family(
                out,
                "kubelet_certificate_manager_client_ttl_seconds",
                "gauge",
                "Gauge of the TTL (time-to-live) of the Kubelet's client certificate. The value is in seconds until certificate expiry (negative if already expired). If client certificate is invalid or unused, the value will be +INF.",
            );
            let _ = writeln!(
                out,
                "kubelet_certificate_manager_client_ttl_seconds {}",
                format_float(ttl_seconds(expiry(), now))
            );
        }
        let Some(expiry) = server else { return };
        family(
            out,
            "kubelet_certificate_manager_server_rotation_seconds",
            "histogram",
            "Histogram of the number of seconds the previous certificate lived before being rotated.",
        );
        write_histogram(
            out,
            "kubelet_certificate_manager_server_rotation_seconds",
            &self.server_rotation.lock(),
        );
        family(
            out,
            "kubelet_certificate_manager_server_ttl_seconds",
            "gauge",
            "Gauge of the shortest TTL (time-to-live) of the Kubelet's serving certificate. The value is in seconds until certificate expiry (negative if already expired). If serving certificate is invalid or unused, the value will be +INF.",
        );
        let _ = writeln!(
            out,
            "kubelet_certificate_manager_server_ttl_seconds {}",
            format_float(ttl_seconds(expiry(), now))
        );
        self.server_renew_errors.render(out);
    }
}

/// Upstream's `math.Trunc(time.Until(NotAfter).Seconds())`, `+Inf` without a
/// certificate.
fn ttl_seconds(not_after: Option<SystemTime>, now: SystemTime) -> f64 {
    let Some(not_after) = not_after else {
        return f64::INFINITY;
    };
    match not_after.duration_since(now) {
        Ok(left) => left.as_secs_f64().trunc(),
        Err(e) => -e.duration().as_secs_f64().trunc(),
    }
}

/// An unlabelled histogram's samples with bounds and sum as Go writes them (`2.592e+06`).
fn write_histogram(out: &mut String, name: &str, h: &Histogram) {
    for (bound, n) in h.cumulative() {
        let _ = writeln!(out, "{name}_bucket{{le=\"{}\"}} {n}", format_float(bound));
    }
    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", h.count());
    let _ = writeln!(out, "{name}_sum {}", format_float(h.sum()));
    let _ = writeln!(out, "{name}_count {}", h.count());
}

/// The probe workers' metrics, served on `/metrics/probes` (upstream's prober
/// `ProberResults` and `ProberDuration`): every probe run counted by its result, and its
/// duration. A worker's series go when the worker stops, as upstream deletes them.
/// Labels are declared in the order the text format shows them (upstream's client sorts
/// them by name).
#[derive(Debug)]
pub struct ProberMetrics {
    results: CounterVec<6>,
    duration: HistogramVec<4>,
}

impl Default for ProberMetrics {
    fn default() -> Self {
        ProberMetrics {
            results: CounterVec::new(
                "prober_probe_total",
                "[BETA] Cumulative number of a liveness, readiness or startup probe for a container by result.",
                [
                    "container",
                    "namespace",
                    "pod",
                    "pod_uid",
                    "probe_type",
                    "result",
                ],
            ),
            duration: HistogramVec::histogram(
                "prober_probe_duration_seconds",
                "[ALPHA] Duration in seconds for a probe response.",
                ["container", "namespace", "pod", "probe_type"],
                &DEFAULT_BUCKETS,
            ),
        }
    }
}

/// Which probe of which container a worker runs, as the prober metrics label it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeLabels {
    /// `Liveness`, `Readiness` or `Startup`.
    pub probe_type: &'static str,
    pub container: String,
    pub pod: String,
    pub namespace: String,
    pub pod_uid: String,
}

impl ProbeLabels {
    fn with_result<'a>(&'a self, result: &'a str) -> [&'a str; 6] {
        [
            &self.container,
            &self.namespace,
            &self.pod,
            &self.pod_uid,
            self.probe_type,
            result,
        ]
    }

    fn of_duration(&self) -> [&str; 4] {
        [&self.container, &self.namespace, &self.pod, self.probe_type]
    }
}

/// The `result` label values.
const PROBE_RESULTS: [&str; 3] = ["successful", "failed", "unknown"];

impl ProberMetrics {
    /// One probe run: its result (`successful`, `failed`, `unknown`) and how long it took.
    pub fn observe(&self, l: &ProbeLabels, result: &str, took: Duration) {
        self.results.inc(l.with_result(result));
        self.duration.observe(l.of_duration(), took.as_secs_f64());
    }

    /// Drops a stopped worker's series.
    pub fn forget(&self, l: &ProbeLabels) {
        for result in PROBE_RESULTS {
            self.results.remove(l.with_result(result));
        }
        self.duration.remove(l.of_duration());
    }

    /// The `/metrics/probes` page.
    pub fn render(&self) -> String {
        let mut out = String::new();
        self.duration.render(&mut out);
        self.results.render(&mut out);
        out
    }
}

/// Upstream's volume stats collector: each claimed volume's bytes and inodes, labelled by
/// its claim (a claim two pods use shows once).
fn render_volume_stats(
    out: &mut String,
    volumes: &BTreeMap<(String, String), crate::stats::FsStats>,
) {
    type Pick = fn(&crate::stats::FsStats) -> Option<u64>;
    let families: [(&str, &str, Pick); 6] = [
        (
            "kubelet_volume_stats_available_bytes",
            "Number of available bytes in the volume",
            |f| f.available_bytes,
        ),
        (
            "kubelet_volume_stats_capacity_bytes",
            "Capacity in bytes of the volume",
            |f| f.capacity_bytes,
        ),
        (
            "kubelet_volume_stats_inodes",
            "Maximum number of inodes in the volume",
            |f| f.inodes,
        ),
        (
            "kubelet_volume_stats_inodes_free",
            "Number of free inodes in the volume",
            |f| f.inodes_free,
        ),
        (
            "kubelet_volume_stats_inodes_used",
            "Number of used inodes in the volume",
            |f| f.inodes_used,
        ),
        (
            "kubelet_volume_stats_used_bytes",
            "Number of used bytes in the volume",
            |f| f.used_bytes,
        ),
    ];
    for (name, help, pick) in families {
        let samples: Vec<_> = volumes
            .iter()
            .filter_map(|(claim, fs)| Some((claim, pick(fs)?)))
            .collect();
        if samples.is_empty() {
            continue;
        }
        family(out, name, "gauge", help);
        for ((namespace, claim), value) in samples {
            let _ = writeln!(
                out,
                "{name}{{namespace=\"{}\",persistentvolumeclaim=\"{}\"}} {}",
                escape(namespace),
                escape(claim),
                format_float(value as f64)
            );
        }
    }
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} [ALPHA] {help}\n# TYPE {name} {kind}");
}

/// Escapes a label value (backslash, quote, newline), as the text format requires.
pub(crate) fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// One container's CRI stats, as `/metrics/cadvisor` labels them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContainerSample {
    pub id: String,
    pub container: String,
    pub pod: String,
    pub namespace: String,
    pub image: String,
    pub cpu_usage_core_nanoseconds: Option<u64>,
    pub memory_working_set_bytes: Option<u64>,
    pub memory_usage_bytes: Option<u64>,
    pub memory_rss_bytes: Option<u64>,
    pub writable_layer_bytes: Option<u64>,
    /// Seconds since the epoch.
    pub start_time_seconds: Option<f64>,
    /// Milliseconds since the epoch of the sample.
    pub timestamp_ms: i64,
}

/// The `/metrics/cadvisor` page: upstream's cAdvisor names and labels for the values
/// the CRI gives, plus the machine's size.
pub fn render_cadvisor(samples: &[ContainerSample], cpu_cores: i64, memory_bytes: i64) -> String {
    let mut out = String::new();
    family_plain(
        &mut out,
        "machine_cpu_cores",
        "gauge",
        "Number of logical CPU cores.",
    );
    let _ = writeln!(out, "machine_cpu_cores {cpu_cores}");
    family_plain(
        &mut out,
        "machine_memory_bytes",
        "gauge",
        "Amount of memory installed on the machine.",
    );
    let _ = writeln!(out, "machine_memory_bytes {memory_bytes}");
    type Pick = fn(&ContainerSample) -> Option<f64>;
    let series: [(&str, &str, &str, Pick); 6] = [
        (
            "container_cpu_usage_seconds_total",
            "counter",
            "Cumulative cpu time consumed in seconds.",
            |s| s.cpu_usage_core_nanoseconds.map(|n| n as f64 / 1e9),
        ),
        (
            "container_memory_working_set_bytes",
            "gauge",
            "Current working set in bytes.",
            |s| s.memory_working_set_bytes.map(|n| n as f64),
        ),
        (
            "container_memory_usage_bytes",
            "gauge",
            "Current memory usage in bytes, including all memory regardless of when it was accessed",
            |s| s.memory_usage_bytes.map(|n| n as f64),
        ),
        (
            "container_memory_rss",
            "gauge",
            "Size of RSS in bytes.",
            |s| s.memory_rss_bytes.map(|n| n as f64),
        ),
        (
            "container_fs_usage_bytes",
            "gauge",
            "Number of bytes that are consumed by the container on this filesystem.",
            |s| s.writable_layer_bytes.map(|n| n as f64),
        ),
        (
            "container_start_time_seconds",
            "gauge",
            "Start time of the container since unix epoch in seconds.",
            |s| s.start_time_seconds,
        ),
    ];
    for (name, kind, help, pick) in series {
        family_plain(&mut out, name, kind, help);
        for s in samples {
            if let Some(v) = pick(s) {
                let _ = writeln!(
                    out,
                    "{name}{{container=\"{}\",id=\"{}\",image=\"{}\",name=\"{}\",namespace=\"{}\",pod=\"{}\"}} {v} {}",
                    escape(&s.container),
                    escape(&s.id),
                    escape(&s.image),
                    escape(&s.id),
                    escape(&s.namespace),
                    escape(&s.pod),
                    s.timestamp_ms
                );
            }
        }
    }
    out
}

fn family_plain(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// A sample value as Prometheus' Go text encoder writes it: `strconv.FormatFloat(v, 'g',
/// -1, 64)`, the shortest digits that read back the same, in exponent form (`e+07`, at
/// least two exponent digits) from 1e6 up and below 1e-4; `NaN`, `+Inf`, `-Inf`.
pub fn format_float(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    if v == 0.0 {
        return "0".into();
    }
    // Rust's `{:e}` gives the same shortest digits: "1.2345678e7", "-2.5e-5".
    let sci = format!("{v:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..6).contains(&exp) {
        format!("{v}")
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.unsigned_abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubelet_page_has_upstream_names() {
        let m = KubeletMetrics::default();
        m.observe_operation("run_pod_sandbox", Duration::from_millis(300), false);
        m.observe_operation("list_containers", Duration::from_millis(2), true);
        let relisted = Instant::now();
        m.observe_relist(relisted, Duration::from_millis(3));
        m.observe_relist(
            relisted + Duration::from_millis(1500),
            Duration::from_millis(2),
        );
        m.observe_pod_start("u1", Duration::from_millis(700));
        m.observe_pod_start("u1", Duration::from_secs(9));
        m.observe_pod_worker("create", Duration::from_millis(40));
        m.observe_pod_worker("sync", Duration::from_millis(2));
        m.observe_pod_started(false);
        m.observe_pod_started(true);
        m.observe_container_started("container", None);
        m.observe_container_started("init_container", Some("ErrImagePull"));
        m.observe_eviction("memory.available");
        m.observe_cgroup_operation("create", Duration::from_millis(3));
        m.observe_cgroup_operation("destroy", Duration::from_millis(30));
        m.observe_storage_operation(
            "kubernetes.io/empty-dir",
            VOLUME_MOUNT,
            true,
            Duration::from_millis(20),
        );
        m.observe_storage_operation(
            "kubernetes.io/configmap",
            VOLUME_MOUNT,
            false,
            Duration::from_secs(2),
        );
        let volume = crate::stats::FsStats {
            capacity_bytes: Some(270_553_174_016),
            inodes_used: Some(12),
            ..Default::default()
        };
        let page = m.render(&KubeletGauges {
            node_name: "node-a".into(),
            volume_stats: [(("ns".to_string(), "data".to_string()), volume)].into(),
            running_pods: 2,
            containers_by_state: [("running".to_string(), 3), ("exited".to_string(), 1)].into(),
            volumes: [
                (
                    (
                        "kubernetes.io/projected".to_string(),
                        DESIRED_STATE_OF_WORLD.to_string(),
                    ),
                    2,
                ),
                (
                    (
                        "kubernetes.io/projected".to_string(),
                        ACTUAL_STATE_OF_WORLD.to_string(),
                    ),
                    1,
                ),
            ]
            .into(),
        });
        for line in [
            "# TYPE kubelet_running_pods gauge",
            "kubelet_running_pods 2",
            "kubelet_running_containers{container_state=\"running\"} 3",
            "kubelet_running_containers{container_state=\"exited\"} 1",
            "kubelet_pod_start_duration_seconds_count 1",
            "kubelet_pod_start_duration_seconds_bucket{le=\"1\"} 1",
            "kubelet_pleg_relist_duration_seconds_count 2",
            "kubelet_pleg_relist_interval_seconds_count 1",
            "kubelet_pleg_relist_interval_seconds_bucket{le=\"1\"} 0",
            "kubelet_pleg_relist_interval_seconds_bucket{le=\"2.5\"} 1",
            "# TYPE kubelet_pleg_last_seen_seconds gauge",
            "kubelet_node_name{node=\"node-a\"} 1",
            "kubelet_pod_worker_duration_seconds_count{operation_type=\"create\"} 1",
            "kubelet_pod_worker_duration_seconds_count{operation_type=\"sync\"} 1",
            "kubelet_started_pods_total 2",
            "kubelet_started_pods_errors_total 1",
            "kubelet_started_containers_total{container_type=\"container\"} 1",
            "kubelet_started_containers_total{container_type=\"init_container\"} 1",
            "kubelet_started_containers_errors_total{code=\"ErrImagePull\",container_type=\"init_container\"} 1",
            "kubelet_evictions{eviction_signal=\"memory.available\"} 1",
            "# HELP kubelet_volume_stats_capacity_bytes [ALPHA] Capacity in bytes of the volume",
            "kubelet_volume_stats_capacity_bytes{namespace=\"ns\",persistentvolumeclaim=\"data\"} 2.70553174016e+11",
            "kubelet_volume_stats_inodes_used{namespace=\"ns\",persistentvolumeclaim=\"data\"} 12",
            "kubelet_runtime_operations_total{operation_type=\"run_podsandbox\"} 1",
            "kubelet_runtime_operations_errors_total{operation_type=\"list_containers\"} 1",
            "kubelet_runtime_operations_errors_total{operation_type=\"run_podsandbox\"} 0",
            "kubelet_runtime_operations_duration_seconds_bucket{operation_type=\"run_podsandbox\",le=\"0.5\"} 1",
            "# HELP volume_manager_total_volumes [ALPHA] Number of volumes in Volume Manager",
            "# TYPE volume_manager_total_volumes gauge",
            "volume_manager_total_volumes{plugin_name=\"kubernetes.io/projected\",state=\"actual_state_of_world\"} 1",
            "volume_manager_total_volumes{plugin_name=\"kubernetes.io/projected\",state=\"desired_state_of_world\"} 2",
            "# HELP kubelet_cgroup_manager_duration_seconds [ALPHA] Duration in seconds for cgroup manager operations. Broken down by method.",
            "# TYPE kubelet_cgroup_manager_duration_seconds histogram",
            "kubelet_cgroup_manager_duration_seconds_bucket{operation_type=\"create\",le=\"0.005\"} 1",
            "kubelet_cgroup_manager_duration_seconds_bucket{operation_type=\"destroy\",le=\"0.025\"} 0",
            "kubelet_cgroup_manager_duration_seconds_bucket{operation_type=\"destroy\",le=\"0.05\"} 1",
            "# HELP storage_operation_duration_seconds [ALPHA] Storage operation duration",
            "# TYPE storage_operation_duration_seconds histogram",
            "storage_operation_duration_seconds_bucket{migrated=\"false\",operation_name=\"volume_mount\",status=\"success\",volume_plugin=\"kubernetes.io/empty-dir\",le=\"0.1\"} 1",
            "storage_operation_duration_seconds_bucket{migrated=\"false\",operation_name=\"volume_mount\",status=\"fail-unknown\",volume_plugin=\"kubernetes.io/configmap\",le=\"1\"} 0",
            "storage_operation_duration_seconds_bucket{migrated=\"false\",operation_name=\"volume_mount\",status=\"fail-unknown\",volume_plugin=\"kubernetes.io/configmap\",le=\"2.5\"} 1",
            "storage_operation_duration_seconds_bucket{migrated=\"false\",operation_name=\"volume_mount\",status=\"fail-unknown\",volume_plugin=\"kubernetes.io/configmap\",le=\"600\"} 1",
            "storage_operation_duration_seconds_count{migrated=\"false\",operation_name=\"volume_mount\",status=\"fail-unknown\",volume_plugin=\"kubernetes.io/configmap\"} 1",
        ] {
            assert!(page.lines().any(|l| l == line), "{line} in\n{page}");
        }
        // Upstream's text format: each family's samples together, its buckets in order.
        let storage: Vec<&str> = page
            .lines()
            .filter(|l| l.starts_with("storage_operation_duration_seconds_bucket"))
            .collect();
        assert_eq!(storage.len(), 2 * 14, "{page}");
        assert!(
            !page.contains("kubelet_node_config_error"),
            "gone with dynamic kubelet config (1.24)"
        );
        let empty = KubeletMetrics::default().render(&KubeletGauges::default());
        for absent in [
            "volume_manager_total_volumes",
            "storage_operation_duration_seconds",
            "kubelet_cgroup_manager_duration_seconds",
        ] {
            assert!(!empty.contains(absent), "{absent} without series");
        }
        m.forget_pod("u1");
        m.observe_pod_start("u1", Duration::from_secs(1));
        assert!(
            m.render(&KubeletGauges::default())
                .contains("kubelet_pod_start_duration_seconds_count 2")
        );
    }

    #[test]
    fn pod_counts_startup_and_status_sync_families() {
        use crate::working_pods::{ConfigPod, Lifecycle, count_pods};
        let m = KubeletMetrics::default();
        let empty = m.render(&KubeletGauges::default());
        for absent in [
            "kubelet_desired_pods",
            "kubelet_working_pods",
            "kubelet_restarted_pods_total",
            "kubelet_pod_start_sli_duration_seconds",
            "kubelet_pod_start_total_duration_seconds",
            "kubelet_pod_status_sync_duration_seconds",
        ] {
            assert!(!empty.contains(absent), "{absent} before anything set it");
        }
        // Upstream's plain gauge and counter show from the start.
        for line in [
            "kubelet_mirror_pods 0",
            "kubelet_orphaned_runtime_pods_total 0",
            "# TYPE kubelet_first_network_pod_start_sli_duration_seconds gauge",
        ] {
            assert!(empty.lines().any(|l| l == line), "{line} in\n{empty}");
        }

        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"uid": "u1", "creationTimestamp": "2024-01-01T00:00:00Z"},
            "spec": {"containers": []},
            "status": {"phase": "Running"},
        }))
        .unwrap_or_default();
        let counts = count_pods(
            [ConfigPod {
                pod: &pod,
                lifecycle: Some(Lifecycle::Sync),
            }],
            [],
            1,
            2,
        );
        m.set_pod_counts(&counts);
        m.add_orphaned_runtime_pods(1);
        m.add_restarted_pods(0, 1);

        // Tracked from a first sight without startTime; the kubelet writes it running
        // (no container statuses: upstream's check passes), the watch shows it so.
        let mut pending = pod.clone();
        if let Some(s) = pending.status.as_mut() {
            s.phase = Some("Pending".into());
        }
        m.observe_pod_on_watch(&pending);
        m.pod_status_updated("u1", pod.status.as_ref().unwrap());
        m.observe_pod_on_watch(&pod);
        m.observe_pod_on_watch(&pod);
        m.observe_pod_status_sync(Duration::from_millis(30));
        let page = m.render(&KubeletGauges::default());
        for line in [
            "# HELP kubelet_desired_pods [ALPHA] The number of pods the kubelet is being instructed to run. static is true if the pod is not from the apiserver.",
            "# TYPE kubelet_desired_pods gauge",
            "kubelet_desired_pods{static=\"\"} 1",
            "kubelet_desired_pods{static=\"true\"} 0",
            "kubelet_active_pods{static=\"\"} 1",
            "kubelet_mirror_pods 2",
            "# TYPE kubelet_working_pods gauge",
            "kubelet_working_pods{config=\"desired\",lifecycle=\"sync\",static=\"\"} 1",
            "kubelet_working_pods{config=\"runtime_only\",lifecycle=\"terminating\",static=\"unknown\"} 1",
            "kubelet_working_pods{config=\"orphan\",lifecycle=\"terminated\",static=\"true\"} 0",
            "kubelet_orphaned_runtime_pods_total 1",
            "# TYPE kubelet_restarted_pods_total counter",
            "kubelet_restarted_pods_total{static=\"\"} 0",
            "kubelet_restarted_pods_total{static=\"true\"} 1",
            "# TYPE kubelet_pod_start_sli_duration_seconds histogram",
            "kubelet_pod_start_sli_duration_seconds_bucket{le=\"0.5\"} 0",
            "kubelet_pod_start_sli_duration_seconds_bucket{le=\"3600\"} 0",
            "kubelet_pod_start_sli_duration_seconds_count 1",
            "# HELP kubelet_pod_start_total_duration_seconds [ALPHA] Duration in seconds to start a pod since creation, including time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch",
            "kubelet_pod_start_total_duration_seconds_count 1",
            "# HELP kubelet_pod_status_sync_duration_seconds [ALPHA] Duration in seconds to sync a pod status update. Measures time from detection of a change to pod status until the API is successfully updated for that pod, even if multiple intevening changes to pod status occur.",
            "kubelet_pod_status_sync_duration_seconds_bucket{le=\"0.01\"} 0",
            "kubelet_pod_status_sync_duration_seconds_bucket{le=\"0.05\"} 1",
            "kubelet_pod_status_sync_duration_seconds_bucket{le=\"60\"} 1",
            "kubelet_pod_status_sync_duration_seconds_count 1",
            "# HELP kubelet_first_network_pod_start_sli_duration_seconds [INTERNAL] Duration in seconds to start the first network pod, excluding time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch",
        ] {
            assert!(page.lines().any(|l| l == line), "{line} in\n{page}");
        }
        assert_eq!(
            page.lines()
                .filter(|l| l.starts_with("kubelet_working_pods{"))
                .count(),
            15
        );
        let first_network = page
            .lines()
            .find_map(|l| l.strip_prefix("kubelet_first_network_pod_start_sli_duration_seconds "))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0);
        assert!(first_network > 3600.0, "created in 2024: {first_network}");
    }

    #[test]
    fn http_request_labels_as_upstream_buckets_them() {
        use HttpServer::{ReadOnly, ReadWrite};
        let of = |server, method: &str, path: &str| {
            let l = HttpRequestLabels::of(server, method, path);
            (l.method, l.path, l.server_type, l.long_running)
        };
        for (server, method, path, want) in [
            (
                ReadOnly,
                "GET",
                "/metrics",
                ("GET", "metrics", "readonly", "false"),
            ),
            (
                ReadOnly,
                "GET",
                "/metrics/cadvisor",
                ("GET", "metrics/cadvisor", "readonly", "false"),
            ),
            (
                ReadOnly,
                "GET",
                "/metrics/resource/x",
                ("GET", "metrics/resource", "readonly", "false"),
            ),
            // Not a bucket upstream registers.
            (
                ReadOnly,
                "GET",
                "/metrics/slis",
                ("GET", "other", "readonly", "false"),
            ),
            (
                ReadOnly,
                "GET",
                "/metrics/",
                ("GET", "other", "readonly", "false"),
            ),
            (
                ReadOnly,
                "GET",
                "/stats/summary",
                ("GET", "stats", "readonly", "false"),
            ),
            (
                ReadOnly,
                "GET",
                "/healthz",
                ("GET", "healthz", "readonly", "false"),
            ),
            (
                ReadWrite,
                "POST",
                "/exec/ns/p/c",
                ("POST", "exec", "readwrite", "true"),
            ),
            (
                ReadWrite,
                "GET",
                "/attach/ns/p/u/c",
                ("GET", "attach", "readwrite", "true"),
            ),
            // Upstream's long-running list spells it portforward.
            (
                ReadWrite,
                "POST",
                "/portForward/ns/p",
                ("POST", "portForward", "readwrite", "false"),
            ),
            (
                ReadWrite,
                "GET",
                "/debug/pprof/",
                ("GET", "debug", "readwrite", "true"),
            ),
            (
                ReadWrite,
                "GET",
                "/configz",
                ("GET", "configz", "readwrite", "false"),
            ),
            (
                ReadWrite,
                "GET",
                "/containerLogs/ns/p/c",
                ("GET", "containerLogs", "readwrite", "false"),
            ),
            // The read-only server has no configz, and its debug paths are pprof's.
            (
                ReadOnly,
                "GET",
                "/configz",
                ("GET", "other", "readonly", "false"),
            ),
            (
                ReadOnly,
                "GET",
                "/debug/pprof/",
                ("GET", "other", "readonly", "false"),
            ),
            (
                ReadOnly,
                "GET",
                "/pprof",
                ("GET", "pprof", "readonly", "false"),
            ),
            (
                ReadWrite,
                "GET",
                "/pprof",
                ("GET", "other", "readwrite", "false"),
            ),
            (
                ReadOnly,
                "PATCH",
                "/pods",
                ("other", "pods", "readonly", "false"),
            ),
            (
                ReadOnly,
                "get",
                "/pods",
                ("other", "pods", "readonly", "false"),
            ),
            (ReadOnly, "GET", "/", ("GET", "other", "readonly", "false")),
            (
                ReadOnly,
                "GET",
                "//pods",
                ("GET", "other", "readonly", "false"),
            ),
            (
                ReadOnly,
                "GET",
                "/nope/../pods",
                ("GET", "other", "readonly", "false"),
            ),
        ] {
            assert_eq!(of(server, method, path), want, "{method} {path}");
        }
    }

    #[test]
    fn http_requests_are_counted_timed_and_in_flight_until_dropped() {
        let m = Arc::new(KubeletMetrics::default());
        let labels = HttpRequestLabels::of(HttpServer::ReadOnly, "GET", "/pods");
        let first = m.http_request(labels);
        let second = m.http_request(labels);
        const SERIES: &str =
            "{long_running=\"false\",method=\"GET\",path=\"pods\",server_type=\"readonly\"}";
        let page = m.render(&KubeletGauges::default());
        for line in [
            "# HELP kubelet_http_requests_total [ALPHA] Number of the http requests received since the server started",
            "# TYPE kubelet_http_requests_total counter",
            &format!("kubelet_http_requests_total{SERIES} 2"),
            "# HELP kubelet_http_inflight_requests [ALPHA] Number of the inflight http requests",
            "# TYPE kubelet_http_inflight_requests gauge",
            &format!("kubelet_http_inflight_requests{SERIES} 2"),
        ] {
            assert!(page.lines().any(|l| l == line), "{line} in\n{page}");
        }
        assert!(
            !page.contains("kubelet_http_requests_duration_seconds"),
            "timed when done"
        );
        drop(first);
        drop(second);
        let page = m.render(&KubeletGauges::default());
        for line in [
            &format!("kubelet_http_inflight_requests{SERIES} 0"),
            "# HELP kubelet_http_requests_duration_seconds [ALPHA] Duration in seconds to serve http requests",
            "# TYPE kubelet_http_requests_duration_seconds histogram",
            "kubelet_http_requests_duration_seconds_bucket{long_running=\"false\",method=\"GET\",path=\"pods\",server_type=\"readonly\",le=\"10\"} 2",
            &format!("kubelet_http_requests_duration_seconds_count{SERIES} 2"),
        ] {
            assert!(page.lines().any(|l| l == line), "{line} in\n{page}");
        }
    }

    #[test]
    fn certificate_families_show_once_their_manager_registers() {
        let m = CertificateMetrics::default();
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let render = |m: &CertificateMetrics| {
            let mut out = String::new();
            m.render(&mut out, now);
            out
        };
        // Renewals may fail before any manager shows (none of these is served yet).
        m.client_renew_failed();
        assert_eq!(render(&m), "");

        let expiry = Arc::new(Mutex::new(Some(
            now + Duration::from_millis(31_536_000_900),
        )));
        let current = expiry.clone();
        m.register_client(Arc::new(move || *current.lock()));
        assert_eq!(
            render(&m),
            "# HELP kubelet_certificate_manager_client_expiration_renew_errors [ALPHA] Counter of certificate renewal errors.\n\
             # TYPE kubelet_certificate_manager_client_expiration_renew_errors counter\n\
             kubelet_certificate_manager_client_expiration_renew_errors 1\n\
             # HELP kubelet_certificate_manager_client_ttl_seconds [ALPHA] Gauge of the TTL (time-to-live) of the Kubelet's client certificate. The value is in seconds until certificate expiry (negative if already expired). If client certificate is invalid or unused, the value will be +INF.\n\
             # TYPE kubelet_certificate_manager_client_ttl_seconds gauge\n\
             kubelet_certificate_manager_client_ttl_seconds 3.1536e+07\n"
        );
        let ttl = |m: &CertificateMetrics, name: &str| -> String {
            render(m)
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{name} ")).map(str::to_owned))
                .unwrap_or_default()
        };
        const CLIENT_TTL: &str = "kubelet_certificate_manager_client_ttl_seconds";
        *expiry.lock() = Some(now + Duration::from_millis(90_500));
        assert_eq!(ttl(&m, CLIENT_TTL), "90");
        *expiry.lock() = Some(now - Duration::from_millis(2_700));
        assert_eq!(ttl(&m, CLIENT_TTL), "-2", "expired");
        *expiry.lock() = None;
        assert_eq!(ttl(&m, CLIENT_TTL), "+Inf", "no certificate");
        assert!(!render(&m).contains("server"), "{}", render(&m));

        m.register_server(Arc::new(move || Some(now + Duration::from_secs(3600))));
        m.server_renew_failed();
        m.server_renew_failed();
        let day = Duration::from_secs(86_400);
        m.server_rotated(now - 30 * day, now);
        m.server_rotated(now + day, now);
        let page = render(&m);
        for line in [
            "# HELP kubelet_certificate_manager_server_rotation_seconds [ALPHA] Histogram of the number of seconds the previous certificate lived before being rotated.",
            "# TYPE kubelet_certificate_manager_server_rotation_seconds histogram",
            "kubelet_certificate_manager_server_rotation_seconds_bucket{le=\"60\"} 1",
            "kubelet_certificate_manager_server_rotation_seconds_bucket{le=\"604800\"} 1",
            "kubelet_certificate_manager_server_rotation_seconds_bucket{le=\"2.592e+06\"} 2",
            "kubelet_certificate_manager_server_rotation_seconds_bucket{le=\"1.24416e+08\"} 2",
            "kubelet_certificate_manager_server_rotation_seconds_bucket{le=\"+Inf\"} 2",
            "kubelet_certificate_manager_server_rotation_seconds_sum 2.592e+06",
            "kubelet_certificate_manager_server_rotation_seconds_count 2",
            "# TYPE kubelet_certificate_manager_server_ttl_seconds gauge",
            "kubelet_certificate_manager_server_ttl_seconds 3600",
            "# HELP kubelet_server_expiration_renew_errors [ALPHA] Counter of certificate renewal errors.",
            "# TYPE kubelet_server_expiration_renew_errors counter",
            "kubelet_server_expiration_renew_errors 2",
        ] {
            assert!(page.lines().any(|l| l == line), "{line} in\n{page}");
        }
        assert_eq!((m.client_renew_errors(), m.server_renew_errors()), (1, 2));
    }

    #[test]
    fn probe_page_counts_results_and_forgets_stopped_workers() {
        let m = ProberMetrics::default();
        let web = ProbeLabels {
            probe_type: "Readiness",
            container: "web".into(),
            pod: "p".into(),
            namespace: "ns".into(),
            pod_uid: "u1".into(),
        };
        let other = ProbeLabels {
            probe_type: "Liveness",
            ..web.clone()
        };
        m.observe(&web, "successful", Duration::from_millis(3));
        m.observe(&web, "successful", Duration::from_millis(4));
        m.observe(&web, "failed", Duration::from_millis(700));
        m.observe(&other, "successful", Duration::from_millis(1));
        let page = m.render();
        for line in [
            "# HELP prober_probe_total [BETA] Cumulative number of a liveness, readiness or startup probe for a container by result.",
            "# TYPE prober_probe_total counter",
            "prober_probe_total{container=\"web\",namespace=\"ns\",pod=\"p\",pod_uid=\"u1\",probe_type=\"Readiness\",result=\"successful\"} 2",
            "prober_probe_total{container=\"web\",namespace=\"ns\",pod=\"p\",pod_uid=\"u1\",probe_type=\"Readiness\",result=\"failed\"} 1",
            "# TYPE prober_probe_duration_seconds histogram",
            "prober_probe_duration_seconds_bucket{container=\"web\",namespace=\"ns\",pod=\"p\",probe_type=\"Readiness\",le=\"0.005\"} 2",
            "prober_probe_duration_seconds_count{container=\"web\",namespace=\"ns\",pod=\"p\",probe_type=\"Readiness\"} 3",
        ] {
            assert!(page.lines().any(|l| l == line), "{line} in\n{page}");
        }
        m.forget(&web);
        let page = m.render();
        assert!(!page.contains("Readiness"), "{page}");
        assert!(page.contains("probe_type=\"Liveness\""), "{page}");
    }

    #[test]
    fn floats_as_go_formats_them() {
        for (v, want) in [
            (0.0, "0"),
            (-0.0, "0"),
            (1.0, "1"),
            (-1.0, "-1"),
            (10.0, "10"),
            (2.5, "2.5"),
            (1000.0, "1000"),
            (999_999.0, "999999"),
            (1_000_000.0, "1e+06"),
            (12_345_678.0, "1.2345678e+07"),
            (1_624_396_248.302_091_6, "1.6243962483020916e+09"),
            (1e21, "1e+21"),
            (0.0001, "0.0001"),
            (0.000_012_5, "1.25e-05"),
            (-3.5e-7, "-3.5e-07"),
            (1e100, "1e+100"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
        ] {
            assert_eq!(format_float(v), want, "{v}");
        }
    }

    #[test]
    fn cadvisor_page_labels_and_units() {
        let s = ContainerSample {
            id: "abc".into(),
            container: "web".into(),
            pod: "p\"1".into(),
            namespace: "default".into(),
            image: "nginx".into(),
            cpu_usage_core_nanoseconds: Some(2_500_000_000),
            memory_working_set_bytes: Some(1024),
            timestamp_ms: 1000,
            ..Default::default()
        };
        let page = render_cadvisor(&[s], 2, 4096);
        assert!(page.contains("machine_cpu_cores 2\n"));
        assert!(page.contains("machine_memory_bytes 4096\n"));
        assert!(page.contains(
            "container_cpu_usage_seconds_total{container=\"web\",id=\"abc\",image=\"nginx\",name=\"abc\",namespace=\"default\",pod=\"p\\\"1\"} 2.5 1000\n"
        ), "{page}");
        assert!(page.contains("container_memory_working_set_bytes{container=\"web\""));
        assert!(
            !page.contains("container_memory_rss{"),
            "absent values are left out"
        );
    }
}
