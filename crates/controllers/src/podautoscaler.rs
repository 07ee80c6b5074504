//! The horizontal pod autoscaler controller (upstream
//! `pkg/controller/podautoscaler`: `horizontal.go`, `replica_calculator.go`,
//! `metrics/client.go`), over `autoscaling/v2` HorizontalPodAutoscalers.
//!
//! Every `--horizontal-pod-autoscaler-sync-period` each autoscaler is reconciled as
//! upstream's `reconcileAutoscaler`: the target's scale is read through its `scale`
//! subresource (built-in workloads by a fixed table, other kinds, custom resources
//! with a scale subresource among them, by discovery), then
//! - a target scaled to 0 with `minReplicas` != 0: `ScalingActive` False
//!   `ScalingDisabled`, nothing changes;
//! - above `maxReplicas` or below `minReplicas`: scaled to the bound, metrics unread;
//! - otherwise the desired count is the largest proposal of the metrics, normalized
//!   (no `behavior`: the downscale stabilization window and the 2x/4 scale-up
//!   limit; with `behavior`: stabilization windows and the scaling policies over the
//!   scale events kept in memory), then written through `scale`.
//!
//! `Resource` and `ContainerResource` metrics (`Utilization` and `AverageValue`) come
//! from `metrics.k8s.io/v1beta1` PodMetrics listed with the scale's selector, through
//! upstream's replica calculator: requests summed from the pod specs, the tolerance,
//! deleted and failed pods ignored, pending pods and (cpu) pods not ready yet or in
//! their initialization period counted as unready, missing metrics taken as 100% of
//! the request on a scale-down and 0% on a scale-up.
//!
//! `Pods` metrics (`AverageValue`) come from `custom.metrics.k8s.io` (v1beta2, else
//! v1beta1, whichever the group serves first, rediscovered every sync period) for the
//! scale's selector and the metric's selector, through the same calculation as a
//! resource's `AverageValue` (readiness aside; missing pods at the target on a
//! scale-down, idle on a scale-up). `Object` metrics read one object's metric (its kind
//! mapped to a resource by the built-in table, else discovery; a `Namespace` through
//! the root-scoped path): a `Value` target scales the ready pods by the ratio, an
//! `AverageValue` target divides by the scale's `status.replicas`. `External` metrics
//! sum the values `external.metrics.k8s.io/v1beta1` lists for the metric's selector,
//! against a `Value` or `AverageValue` target likewise. Their statuses, names
//! (`pods metric qps`, `Service metric hits`, `external metric queue(...)`), failure
//! reasons (`FailedGetPodsMetric`, `FailedGetObjectMetric`,
//! `FailedGetExternalMetric`) and messages are upstream's.
//!
//! Status as upstream (currentReplicas, desiredReplicas, lastScaleTime,
//! currentMetrics, the AbleToScale / ScalingActive / ScalingLimited conditions with
//! upstream's reasons and messages), written through `/status` when it changed;
//! events as upstream (`SuccessfulRescale`, `FailedGetResourceMetric`,
//! `FailedComputeMetricsReplicas`, `FailedGetScale`, `FailedRescale`, ...).
//!
//! Deviations: custom and external metrics are read from the standard
//! `custom.metrics.k8s.io` and `external.metrics.k8s.io` groups only (the newest
//! upstream can route a metric to another group); the metrics APIs' error texts follow
//! client-go's generic ones (`the server could not find the requested resource (get
//! ...)`) without every detail of its request description; the `AmbiguousSelector`
//! check (pods selected by two autoscalers) is not made; `status.observedGeneration`
//! is set to the spec's generation (upstream leaves it unset); the alpha per-rule
//! `tolerance` of `behavior` is ignored (its feature gate is off by default upstream).
//! A new autoscaler is reconciled at once (upstream waits one sync period), and a
//! reconcile that fails is retried after the sync period as upstream, not with
//! back-off.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::api::autoscaling::v2::{
    ContainerResourceMetricStatus, CrossVersionObjectReference, ExternalMetricSource,
    ExternalMetricStatus, HPAScalingPolicy, HPAScalingRules, HorizontalPodAutoscaler,
    HorizontalPodAutoscalerCondition, HorizontalPodAutoscalerStatus, MetricSpec, MetricStatus,
    MetricTarget, MetricValueStatus, ObjectMetricSource, ObjectMetricStatus, PodsMetricSource,
    PodsMetricStatus, ResourceMetricStatus,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use parking_lot::Mutex;
use serde_json::Value;

use ferrokube_apimachinery::labels::Selector;
use ferrokube_apimachinery::quantity;
use ferrokube_client::informer::{Notification, SharedInformerFactory, Store, object_key};
use ferrokube_client::workqueue::WorkQueue;

use crate::events::{EventSink, EventType, emit};
use crate::{Action, Controller, Result, replace_status_retrying};

/// Upstream `scaleUpLimitFactor` and `scaleUpLimitMinimum` (no `behavior`).
const SCALE_UP_LIMIT_FACTOR: f64 = 2.0;
const SCALE_UP_LIMIT_MINIMUM: f64 = 4.0;
/// How long one PodMetrics list may take (a client retrying an unavailable
/// aggregated API must not hold the autoscaler's worker).
const METRICS_TIMEOUT: Duration = Duration::from_secs(30);

/// The `--horizontal-pod-autoscaler-*` settings.
#[derive(Debug, Clone, PartialEq)]
pub struct HpaConfig {
    /// `--horizontal-pod-autoscaler-sync-period`.
    pub sync_period: Duration,
    /// `--horizontal-pod-autoscaler-tolerance`.
    pub tolerance: f64,
    /// `--horizontal-pod-autoscaler-downscale-stabilization`.
    pub downscale_stabilization: Duration,
    /// `--horizontal-pod-autoscaler-cpu-initialization-period`.
    pub cpu_initialization_period: Duration,
    /// `--horizontal-pod-autoscaler-initial-readiness-delay`.
    pub initial_readiness_delay: Duration,
}

impl Default for HpaConfig {
    fn default() -> Self {
        HpaConfig {
            sync_period: Duration::from_secs(15),
            tolerance: 0.1,
            downscale_stabilization: Duration::from_secs(300),
            cpu_initialization_period: Duration::from_secs(300),
            initial_readiness_delay: Duration::from_secs(30),
        }
    }
}

fn ms(t: Timestamp) -> i64 {
    t.as_millisecond()
}

fn dur_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

// ---------------------------------------------------------------------------------
// Metrics (upstream metrics/client.go)
// ---------------------------------------------------------------------------------

/// One pod's metric: the summed value in thousandths, when and over which window it
/// was measured (upstream `PodMetric`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodMetric {
    pub value: i64,
    /// Unix milliseconds.
    pub timestamp: i64,
    /// Milliseconds.
    pub window: i64,
}

/// Metrics by pod name (upstream `PodMetricsInfo`).
pub type PodMetricsInfo = BTreeMap<String, PodMetric>;

fn parse_time_ms(v: &Value) -> i64 {
    v.as_str()
        .and_then(|s| s.parse::<Timestamp>().ok())
        .map(ms)
        .unwrap_or(0)
}

/// A Go duration (`10s`, `1m30s`, `500ms`) in milliseconds; 0 when unparsable.
fn parse_go_duration_ms(s: &str) -> i64 {
    ferrokube_apimachinery::duration::parse_go_duration(s)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Upstream `getPodMetrics` / `getContainerMetrics` over a `PodMetricsList`: each
/// pod's usage of `resource` summed over its containers (a pod missing it in any
/// container, or with no containers, is left out), or of one `container` only (an
/// error when a pod has no such container). Also the first item's timestamp.
pub fn pod_metrics(
    list: &Value,
    resource: &str,
    container: Option<&str>,
) -> std::result::Result<(PodMetricsInfo, i64), String> {
    let items = list["items"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    if items.is_empty() {
        return Err("no metrics returned from resource metrics API".into());
    }
    let mut out = PodMetricsInfo::new();
    for m in items {
        let name = m["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let timestamp = parse_time_ms(&m["timestamp"]);
        let window = m["window"].as_str().map(parse_go_duration_ms).unwrap_or(0);
        let containers = m["containers"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        let usage = |c: &Value| {
            c["usage"][resource]
                .as_str()
                .and_then(quantity::milli_value)
        };
        match container {
            Some(want) => {
                let Some(c) = containers.iter().find(|c| c["name"] == want) else {
                    return Err(format!(
                        "failed to get container metrics: container {want} not present in metrics for pod {}/{name}",
                        m["metadata"]["namespace"].as_str().unwrap_or_default()
                    ));
                };
                if let Some(value) = usage(c) {
                    out.insert(
                        name,
                        PodMetric {
                            value,
                            timestamp,
                            window,
                        },
                    );
                }
            }
            None => {
                let mut sum = 0i64;
                let mut missing = containers.is_empty();
                for c in containers {
                    match usage(c) {
                        Some(v) => sum = sum.saturating_add(v),
                        None => {
                            missing = true;
                            break;
                        }
                    }
                }
                if !missing {
                    out.insert(
                        name,
                        PodMetric {
                            value: sum,
                            timestamp,
                            window,
                        },
                    );
                }
            }
        }
    }
    Ok((out, parse_time_ms(&items[0]["timestamp"])))
}

/// Upstream `GetRawMetric` over a custom metrics `MetricValueList` (v1beta2 or
/// v1beta1, which agree on these fields): each described pod's value, measured at
/// `timestamp` over `windowSeconds` (a minute when unset).
pub fn custom_pod_metrics(list: &Value) -> std::result::Result<PodMetricsInfo, String> {
    let items = list["items"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    if items.is_empty() {
        return Err("no metrics returned from custom metrics API".into());
    }
    Ok(items
        .iter()
        .map(|m| {
            let window = m["windowSeconds"].as_i64().map_or(60_000, |s| s * 1000);
            (
                m["describedObject"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                PodMetric {
                    value: metric_value(m),
                    timestamp: parse_time_ms(&m["timestamp"]),
                    window,
                },
            )
        })
        .collect())
}

fn metric_value(m: &Value) -> i64 {
    m["value"]
        .as_str()
        .and_then(quantity::milli_value)
        .unwrap_or(0)
}

/// Upstream `GetObjectMetric` over the custom metrics API's answer for one object:
/// a `MetricValueList` of exactly one item, its value in thousandths.
pub fn object_metric_value(list: &Value) -> std::result::Result<i64, String> {
    match list["items"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
        [m] => Ok(metric_value(m)),
        items => Err(format!(
            "unable to fetch metrics from custom metrics API: the custom metrics API server returned {} results when we asked for exactly one",
            items.len()
        )),
    }
}

/// Upstream `GetExternalMetric` over an `ExternalMetricValueList`: every value in
/// thousandths.
pub fn external_metric_values(list: &Value) -> std::result::Result<Vec<i64>, String> {
    let items = list["items"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    if items.is_empty() {
        return Err("no metrics returned from external metrics API".into());
    }
    Ok(items.iter().map(metric_value).collect())
}

/// `metav1.LabelSelectorAsSelector(s).String()`: the metric selector as the metrics
/// APIs' query parameter (empty for none).
pub fn metric_selector(s: Option<&LabelSelector>) -> std::result::Result<String, String> {
    Selector::from_optional_label_selector(s)
        .map(|s| s.to_string())
        .map_err(|e| e.to_string())
}

/// A `*metav1.LabelSelector` as Go's `%+v` prints it (its generated `String()`), as
/// upstream puts it in metric names and errors.
pub fn go_label_selector(s: Option<&LabelSelector>) -> String {
    let Some(s) = s else {
        return "nil".into();
    };
    let mut out = String::from("&LabelSelector{MatchLabels:map[string]string{");
    for (k, v) in s.match_labels.iter().flatten() {
        out.push_str(&format!("{k}: {v},"));
    }
    out.push_str("},MatchExpressions:[]LabelSelectorRequirement{");
    for e in s.match_expressions.iter().flatten() {
        out.push_str(&format!(
            "LabelSelectorRequirement{{Key:{},Operator:{},Values:[{}],}},",
            e.key,
            e.operator,
            e.values.as_deref().unwrap_or_default().join(" ")
        ));
    }
    out.push_str("},}");
    out
}

/// Appends `name=value` to a query when the value is not empty.
fn push_query(path: &mut String, name: &str, value: &str) {
    if value.is_empty() {
        return;
    }
    path.push(if path.contains('?') { '&' } else { '?' });
    path.push_str(name);
    path.push('=');
    path.push_str(&encode_query(value));
}

/// The custom metrics API path of a metric of every pod `selector` selects
/// (upstream `NamespacedMetrics(ns).GetForObjects(Pod, ...)`).
pub fn custom_pods_metric_path(
    version: &str,
    ns: &str,
    metric: &str,
    selector: &str,
    metric_selector: &str,
) -> String {
    let mut path = format!("/apis/custom.metrics.k8s.io/{version}/namespaces/{ns}/pods/*/{metric}");
    push_query(&mut path, "labelSelector", selector);
    push_query(&mut path, "metricLabelSelector", metric_selector);
    path
}

/// The custom metrics API path of one object's metric; `resource` is the group-qualified
/// resource (`deployments.apps`, `services`). A `Namespace` is the root-scoped
/// `namespaces/{ns}/metrics/{metric}`.
pub fn custom_object_metric_path(
    version: &str,
    ns: &str,
    resource: &str,
    name: &str,
    metric: &str,
    metric_selector: &str,
) -> String {
    let mut path = if resource == "namespaces" {
        format!("/apis/custom.metrics.k8s.io/{version}/namespaces/{ns}/metrics/{metric}")
    } else {
        format!("/apis/custom.metrics.k8s.io/{version}/namespaces/{ns}/{resource}/{name}/{metric}")
    };
    push_query(&mut path, "metricLabelSelector", metric_selector);
    path
}

/// The external metrics API path of a metric (`NamespacedMetrics(ns).List`).
pub fn external_metric_path(ns: &str, metric: &str, metric_selector: &str) -> String {
    let mut path = format!("/apis/external.metrics.k8s.io/v1beta1/namespaces/{ns}/{metric}");
    push_query(&mut path, "labelSelector", metric_selector);
    path
}

// ---------------------------------------------------------------------------------
// Replica calculator (upstream replica_calculator.go)
// ---------------------------------------------------------------------------------

/// Upstream `ReplicaCalculator`'s settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReplicaCalc {
    pub tolerance: f64,
    pub cpu_initialization_period: Duration,
    pub initial_readiness_delay: Duration,
}

impl ReplicaCalc {
    fn within_tolerance(&self, ratio: f64) -> bool {
        (1.0 - ratio).abs() <= self.tolerance
    }
}

/// Upstream `groupPods`: the ready count and the unready, missing and ignored pods.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PodGroups {
    pub ready: usize,
    pub unready: BTreeSet<String>,
    pub missing: BTreeSet<String>,
    pub ignored: BTreeSet<String>,
}

fn pod_name(p: &Pod) -> String {
    p.metadata.name.clone().unwrap_or_default()
}

/// Upstream `groupPods`: deleted and failed pods are ignored, pending ones unready,
/// those without a metric missing; for cpu, a pod not ready, or in its
/// initialization period without a full metric window since it turned ready, or
/// never ready within the initial readiness delay, is unready.
pub fn group_pods(
    pods: &[&Pod],
    metrics: &PodMetricsInfo,
    resource: &str,
    calc: &ReplicaCalc,
    now: Timestamp,
) -> PodGroups {
    let mut g = PodGroups::default();
    let now = ms(now);
    for pod in pods {
        let name = pod_name(pod);
        let phase = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .unwrap_or_default();
        if pod.metadata.deletion_timestamp.is_some() || phase == "Failed" {
            g.ignored.insert(name);
            continue;
        }
        if phase == "Pending" {
            g.unready.insert(name);
            continue;
        }
        let Some(metric) = metrics.get(&name) else {
            g.missing.insert(name);
            continue;
        };
        if resource == "cpu" {
            let ready = crate::util::pod_condition(pod, "Ready");
            let start = pod
                .status
                .as_ref()
                .and_then(|s| s.start_time.as_ref())
                .map(|t| ms(t.0));
            let unready = match (ready, start) {
                (Some(cond), Some(start)) => {
                    let transition = cond
                        .last_transition_time
                        .as_ref()
                        .map(|t| ms(t.0))
                        .unwrap_or(0);
                    if start + dur_ms(calc.cpu_initialization_period) > now {
                        cond.status == "False" || metric.timestamp < transition + metric.window
                    } else {
                        cond.status == "False"
                            && start + dur_ms(calc.initial_readiness_delay) > transition
                    }
                }
                _ => true,
            };
            if unready {
                g.unready.insert(name);
                continue;
            }
        }
        g.ready += 1;
    }
    g
}

/// Upstream `calculatePodRequests`: each pod's request of `resource` in thousandths,
/// summed over its containers and restartable init containers (or one `container`).
pub fn pod_requests(
    pods: &[&Pod],
    container: Option<&str>,
    resource: &str,
) -> std::result::Result<BTreeMap<String, i64>, String> {
    let mut out = BTreeMap::new();
    for pod in pods {
        let Some(spec) = &pod.spec else {
            out.insert(pod_name(pod), 0);
            continue;
        };
        let sidecars = spec
            .init_containers
            .iter()
            .flatten()
            .filter(|c| c.restart_policy.as_deref() == Some("Always"));
        let mut sum = 0i64;
        for c in spec.containers.iter().chain(sidecars) {
            if container.is_some_and(|want| want != c.name) {
                continue;
            }
            let request = c
                .resources
                .as_ref()
                .and_then(|r| r.requests.as_ref())
                .and_then(|r| r.get(resource))
                .and_then(|q| quantity::milli_value(&q.0));
            match request {
                Some(v) => sum = sum.saturating_add(v),
                None => {
                    return Err(format!(
                        "missing request for {resource} in container {} of Pod {}",
                        c.name,
                        pod_name(pod)
                    ));
                }
            }
        }
        out.insert(pod_name(pod), sum);
    }
    Ok(out)
}

/// Upstream `GetResourceUtilizationRatio`: (usage / target utilization ratio, the
/// utilization in percent, the average raw usage).
pub fn resource_utilization_ratio(
    metrics: &PodMetricsInfo,
    requests: &BTreeMap<String, i64>,
    target_utilization: i32,
) -> std::result::Result<(f64, i32, i64), String> {
    let (mut total, mut requested, mut entries) = (0i64, 0i64, 0i64);
    for (name, m) in metrics {
        let Some(r) = requests.get(name) else {
            continue;
        };
        total += m.value;
        requested += r;
        entries += 1;
    }
    if requested == 0 {
        return Err("no metrics returned matched known pods".into());
    }
    let utilization = ((total * 100) / requested) as i32;
    Ok((
        f64::from(utilization) / f64::from(target_utilization),
        utilization,
        total / entries,
    ))
}

/// Upstream `GetMetricUsageRatio`: (average usage / target, average usage).
pub fn metric_usage_ratio(metrics: &PodMetricsInfo, target: i64) -> (f64, i64) {
    let total: i64 = metrics.values().map(|m| m.value).sum();
    let avg = total / (metrics.len().max(1) as i64);
    (avg as f64 / target as f64, avg)
}

fn ceil_i32(v: f64) -> i32 {
    v.ceil() as i32
}

/// What the pods of the target are: those the scale's selector selects.
fn remove(metrics: &mut PodMetricsInfo, names: &BTreeSet<String>) {
    for n in names {
        metrics.remove(n);
    }
}

/// The resource a metric measures, in every container of a pod or in one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Source<'a> {
    pub resource: &'a str,
    pub container: Option<&'a str>,
}

/// Upstream `GetResourceReplicas` (after the metrics are fetched): the proposed
/// count, the utilization in percent and the average raw usage.
pub fn resource_replicas(
    calc: &ReplicaCalc,
    current: i32,
    target_utilization: i32,
    source: Source<'_>,
    pods: &[&Pod],
    mut metrics: PodMetricsInfo,
    now: Timestamp,
) -> std::result::Result<(i32, i32, i64), String> {
    if pods.is_empty() {
        return Err("no pods returned by selector while calculating replica count".into());
    }
    let g = group_pods(pods, &metrics, source.resource, calc, now);
    remove(&mut metrics, &g.ignored);
    remove(&mut metrics, &g.unready);
    if metrics.is_empty() {
        return Err("did not receive metrics for targeted pods (pods might be unready)".into());
    }
    let requests = pod_requests(pods, source.container, source.resource)?;
    let (ratio, utilization, raw) =
        resource_utilization_ratio(&metrics, &requests, target_utilization)?;
    let scale_up_with_unready = !g.unready.is_empty() && ratio > 1.0;
    if !scale_up_with_unready && g.missing.is_empty() {
        if calc.within_tolerance(ratio) {
            return Ok((current, utilization, raw));
        }
        return Ok((ceil_i32(ratio * g.ready as f64), utilization, raw));
    }
    if !g.missing.is_empty() {
        if ratio < 1.0 {
            // A scale-down: missing pods use 100% of their request (or the target,
            // when it is above 100%).
            let fallback = i64::from(target_utilization.max(100));
            for name in &g.missing {
                let value = requests.get(name).copied().unwrap_or(0) * fallback / 100;
                metrics.insert(name.clone(), metric_of(value));
            }
        } else if ratio > 1.0 {
            for name in &g.missing {
                metrics.insert(name.clone(), metric_of(0));
            }
        }
    }
    if scale_up_with_unready {
        for name in &g.unready {
            metrics.insert(name.clone(), metric_of(0));
        }
    }
    let (new_ratio, _, _) = resource_utilization_ratio(&metrics, &requests, target_utilization)?;
    Ok((
        settle(calc, current, ratio, new_ratio, metrics.len()),
        utilization,
        raw,
    ))
}

fn metric_of(value: i64) -> PodMetric {
    PodMetric {
        value,
        timestamp: 0,
        window: 0,
    }
}

/// The end of both calculations once missing and unready pods are filled in: the
/// current count when the change is within tolerance or would flip direction.
fn settle(calc: &ReplicaCalc, current: i32, ratio: f64, new_ratio: f64, counted: usize) -> i32 {
    if calc.within_tolerance(new_ratio)
        || (ratio < 1.0 && new_ratio > 1.0)
        || (ratio > 1.0 && new_ratio < 1.0)
    {
        return current;
    }
    let proposed = ceil_i32(new_ratio * counted as f64);
    if (new_ratio < 1.0 && proposed > current) || (new_ratio > 1.0 && proposed < current) {
        return current;
    }
    proposed
}

/// Upstream `calcPlainMetricReplicas` (the `AverageValue` target of a resource): the
/// proposed count and the average usage.
pub fn plain_replicas(
    calc: &ReplicaCalc,
    current: i32,
    target: i64,
    resource: &str,
    pods: &[&Pod],
    mut metrics: PodMetricsInfo,
    now: Timestamp,
) -> std::result::Result<(i32, i64), String> {
    if pods.is_empty() {
        return Err("no pods returned by selector while calculating replica count".into());
    }
    let g = group_pods(pods, &metrics, resource, calc, now);
    remove(&mut metrics, &g.ignored);
    remove(&mut metrics, &g.unready);
    if metrics.is_empty() {
        return Err("did not receive metrics for targeted pods (pods might be unready)".into());
    }
    let (ratio, usage) = metric_usage_ratio(&metrics, target);
    let scale_up_with_unready = !g.unready.is_empty() && ratio > 1.0;
    if !scale_up_with_unready && g.missing.is_empty() {
        if calc.within_tolerance(ratio) {
            return Ok((current, usage));
        }
        return Ok((ceil_i32(ratio * g.ready as f64), usage));
    }
    // Missing pods count as at the target on a scale-down, idle on a scale-up (and
    // are left out at exactly the target, as upstream).
    let fill = if ratio < 1.0 {
        Some(target)
    } else if ratio > 1.0 {
        Some(0)
    } else {
        None
    };
    if let Some(fill) = fill {
        for name in &g.missing {
            metrics.insert(name.clone(), metric_of(fill));
        }
    }
    if scale_up_with_unready {
        for name in &g.unready {
            metrics.insert(name.clone(), metric_of(0));
        }
    }
    let (new_ratio, _) = metric_usage_ratio(&metrics, target);
    Ok((
        settle(calc, current, ratio, new_ratio, metrics.len()),
        usage,
    ))
}

/// Upstream `getReadyPodsCount`: the running and ready pods.
pub fn ready_pods_count(pods: &[&Pod]) -> std::result::Result<i64, String> {
    if pods.is_empty() {
        return Err("no pods returned by selector while calculating replica count".into());
    }
    Ok(pods
        .iter()
        .filter(|p| {
            p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                && crate::util::pod_condition(p, "Ready").is_some_and(|c| c.status == "True")
        })
        .count() as i64)
}

/// Upstream `getUsageRatioReplicaCount` (the `Value` targets of `Object` and
/// `External` metrics): the current count within the tolerance, else the ratio times
/// the ready pods; from zero replicas, the ratio alone.
pub fn usage_ratio_replicas(
    calc: &ReplicaCalc,
    current: i32,
    ratio: f64,
    pods: &[&Pod],
) -> std::result::Result<i32, String> {
    if current == 0 {
        return Ok(ceil_i32(ratio));
    }
    if calc.within_tolerance(ratio) {
        return Ok(current);
    }
    let ready =
        ready_pods_count(pods).map_err(|e| format!("unable to calculate ready pods: {e}"))?;
    Ok(ceil_i32(ratio * ready as f64))
}

/// Upstream `GetObjectMetricReplicas` / `GetExternalMetricReplicas` once the metric is
/// read: `usage` (thousandths; the sum of an external metric's values) against the
/// `Value` target.
pub fn value_replicas(
    calc: &ReplicaCalc,
    current: i32,
    target: i64,
    usage: i64,
    pods: &[&Pod],
) -> std::result::Result<i32, String> {
    usage_ratio_replicas(calc, current, usage as f64 / target as f64, pods)
}

/// Upstream `GetObjectPerPodMetricReplicas` / `GetExternalPerPodMetricReplicas` once
/// the metric is read: `usage` against the `AverageValue` target per pod of the
/// scale's `status.replicas`; the proposed count and the usage per pod.
pub fn per_pod_replicas(
    calc: &ReplicaCalc,
    status_replicas: i32,
    target_per_pod: i64,
    usage: i64,
) -> (i32, i64) {
    let (usage, target) = (usage as f64, target_per_pod as f64);
    let mut replicas = status_replicas;
    let ratio = usage / (target * f64::from(status_replicas));
    if !calc.within_tolerance(ratio) {
        replicas = ceil_i32(usage / target);
    }
    (replicas, (usage / f64::from(status_replicas)).ceil() as i64)
}

// ---------------------------------------------------------------------------------
// Recommendations and scale events kept in memory (upstream horizontal.go)
// ---------------------------------------------------------------------------------

/// A recommendation and when it was made (Unix milliseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recommendation {
    pub replicas: i32,
    pub at: i64,
}

/// A past scale change (positive count) and when it happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScaleEvent {
    pub change: i32,
    pub at: i64,
    pub outdated: bool,
}

/// What the controller remembers of one autoscaler (upstream's `recommendations`,
/// `scaleUpEvents` and `scaleDownEvents` maps).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Memory {
    pub recommendations: Vec<Recommendation>,
    pub scale_up: Vec<ScaleEvent>,
    pub scale_down: Vec<ScaleEvent>,
}

impl Memory {
    /// Upstream `recordInitialRecommendation`.
    pub fn record_initial(&mut self, current: i32, now: i64) {
        if self.recommendations.is_empty() {
            self.recommendations.push(Recommendation {
                replicas: current,
                at: now,
            });
        }
    }

    fn record(&mut self, old: Option<usize>, replicas: i32, now: i64) {
        let rec = Recommendation { replicas, at: now };
        match old {
            Some(i) => self.recommendations[i] = rec,
            None => self.recommendations.push(rec),
        }
    }

    /// Upstream `stabilizeRecommendation` (no `behavior`): the highest recommendation
    /// within the downscale window; the new one recorded.
    pub fn stabilize(&mut self, desired: i32, window: Duration, now: i64) -> i32 {
        let cutoff = now - dur_ms(window);
        let mut highest = desired;
        let mut old = None;
        for (i, r) in self.recommendations.iter().enumerate() {
            if r.at < cutoff {
                old = Some(i);
            } else if r.replicas > highest {
                highest = r.replicas;
            }
        }
        self.record(old, desired, now);
        highest
    }

    /// Upstream `stabilizeRecommendationWithBehaviors`: the recommendation held
    /// between the lowest within the scale-up window and the highest within the
    /// scale-down window; with the condition reason and message to report.
    pub fn stabilize_with_behaviors(
        &mut self,
        args: &Normalization,
        now: i64,
    ) -> (i32, &'static str, &'static str) {
        let up_cutoff =
            now - i64::from(args.scale_up.stabilization_window_seconds.unwrap_or(0)) * 1000;
        let down_cutoff =
            now - i64::from(args.scale_down.stabilization_window_seconds.unwrap_or(0)) * 1000;
        let (mut up, mut down) = (args.desired, args.desired);
        let mut old = None;
        for (i, r) in self.recommendations.iter().enumerate() {
            if r.at > up_cutoff {
                up = up.min(r.replicas);
            }
            if r.at > down_cutoff {
                down = down.max(r.replicas);
            }
            if r.at < up_cutoff && r.at < down_cutoff {
                old = Some(i);
            }
        }
        let mut recommendation = args.current;
        if recommendation < up {
            recommendation = up;
        }
        if recommendation > down {
            recommendation = down;
        }
        self.record(old, args.desired, now);
        if args.desired >= args.current {
            (
                recommendation,
                "ScaleUpStabilized",
                "recent recommendations were lower than current one, applying the lowest recent recommendation",
            )
        } else {
            (
                recommendation,
                "ScaleDownStabilized",
                "recent recommendations were higher than current one, applying the highest recent recommendation",
            )
        }
    }

    /// Upstream `convertDesiredReplicasWithBehaviorRate`: the desired count bounded by
    /// the min/max and by what the policies still allow in their periods.
    pub fn bound_by_rate(
        &self,
        args: &Normalization,
        now: i64,
    ) -> (i32, &'static str, &'static str) {
        if args.desired > args.current {
            let limit = scale_up_limit(
                args.current,
                &self.scale_up,
                &self.scale_down,
                &args.scale_up,
                now,
            )
            .max(args.current);
            let (allowed, reason, message) = if args.max > limit {
                (
                    limit,
                    "ScaleUpLimit",
                    "the desired replica count is increasing faster than the maximum scale rate",
                )
            } else {
                (
                    args.max,
                    "TooManyReplicas",
                    "the desired replica count is more than the maximum replica count",
                )
            };
            if args.desired > allowed {
                return (allowed, reason, message);
            }
        } else if args.desired < args.current {
            let limit = scale_down_limit(
                args.current,
                &self.scale_up,
                &self.scale_down,
                &args.scale_down,
                now,
            )
            .min(args.current);
            let (allowed, reason, message) = if args.min < limit {
                (
                    limit,
                    "ScaleDownLimit",
                    "the desired replica count is decreasing faster than the maximum scale rate",
                )
            } else {
                (
                    args.min,
                    "TooFewReplicas",
                    "the desired replica count is less than the minimum replica count",
                )
            };
            if args.desired < allowed {
                return (allowed, reason, message);
            }
        }
        (
            args.desired,
            "DesiredWithinRange",
            "the desired count is within the acceptable range",
        )
    }

    /// Upstream `storeScaleEvent` (only with `behavior`): the change recorded in the
    /// slot of an event older than the longest policy period, or appended.
    pub fn store_scale_event(&mut self, rules: &Behavior, previous: i32, new: i32, now: i64) {
        let (events, longest, change) = if new > previous {
            (
                &mut self.scale_up,
                longest_period(&rules.scale_up),
                new - previous,
            )
        } else {
            (
                &mut self.scale_down,
                longest_period(&rules.scale_down),
                previous - new,
            )
        };
        let cutoff = now - i64::from(longest) * 1000;
        let mut old = None;
        for (i, e) in events.iter_mut().enumerate() {
            if e.at < cutoff {
                e.outdated = true;
            }
            if e.outdated {
                old = Some(i);
            }
        }
        let event = ScaleEvent {
            change,
            at: now,
            outdated: false,
        };
        match old {
            Some(i) => events[i] = event,
            None => events.push(event),
        }
    }
}

fn longest_period(rules: &HPAScalingRules) -> i32 {
    rules
        .policies
        .iter()
        .flatten()
        .map(|p| p.period_seconds)
        .max()
        .unwrap_or(0)
        .max(0)
}

/// Upstream `getReplicasChangePerPeriod`.
fn change_in_period(period_seconds: i32, events: &[ScaleEvent], now: i64) -> i32 {
    let cutoff = now - i64::from(period_seconds) * 1000;
    events
        .iter()
        .filter(|e| e.at > cutoff)
        .map(|e| e.change)
        .sum()
}

/// Upstream `calculateScaleUpLimitWithScalingRules`.
pub fn scale_up_limit(
    current: i32,
    up: &[ScaleEvent],
    down: &[ScaleEvent],
    rules: &HPAScalingRules,
    now: i64,
) -> i32 {
    policy_limit(current, up, down, rules, now, true)
}

/// Upstream `calculateScaleDownLimitWithBehaviors`.
pub fn scale_down_limit(
    current: i32,
    up: &[ScaleEvent],
    down: &[ScaleEvent],
    rules: &HPAScalingRules,
    now: i64,
) -> i32 {
    policy_limit(current, up, down, rules, now, false)
}

/// The farthest the rules' policies let the replicas move in one direction from where
/// the changes of their periods started: `Max` takes the policy allowing the most change,
/// `Min` the least, `Disabled` none.
fn policy_limit(
    current: i32,
    up: &[ScaleEvent],
    down: &[ScaleEvent],
    rules: &HPAScalingRules,
    now: i64,
    scaling_up: bool,
) -> i32 {
    let select = rules.select_policy.as_deref().unwrap_or("Max");
    if select == "Disabled" {
        return current;
    }
    let most_change = select != "Min";
    // Up, the most change is the highest count; down, the lowest.
    let take_highest = most_change == scaling_up;
    let mut result = if take_highest { i32::MIN } else { i32::MAX };
    for p in rules.policies.iter().flatten() {
        let start = current - change_in_period(p.period_seconds, up, now)
            + change_in_period(p.period_seconds, down, now);
        let proposed = match (p.type_.as_str(), scaling_up) {
            ("Pods", true) => start + p.value,
            ("Pods", false) => start - p.value,
            ("Percent", true) => {
                (f64::from(start) * (1.0 + f64::from(p.value) / 100.0)).ceil() as i32
            }
            ("Percent", false) => (f64::from(start) * (1.0 - f64::from(p.value) / 100.0)) as i32,
            _ => continue,
        };
        result = if take_highest {
            result.max(proposed)
        } else {
            result.min(proposed)
        };
    }
    result
}

/// Upstream `calculateScaleUpLimit` (no `behavior`).
pub fn default_scale_up_limit(current: i32) -> i32 {
    (SCALE_UP_LIMIT_FACTOR * f64::from(current)).max(SCALE_UP_LIMIT_MINIMUM) as i32
}

/// Upstream `convertDesiredReplicasWithRules` (no `behavior`).
pub fn bound_by_rules(
    current: i32,
    desired: i32,
    min: i32,
    max: i32,
) -> (i32, &'static str, &'static str) {
    let limit = default_scale_up_limit(current);
    let (allowed, reason, message) = if max > limit {
        (
            limit,
            "ScaleUpLimit",
            "the desired replica count is increasing faster than the maximum scale rate",
        )
    } else {
        (
            max,
            "TooManyReplicas",
            "the desired replica count is more than the maximum replica count",
        )
    };
    if desired < min {
        return (
            min,
            "TooFewReplicas",
            "the desired replica count is less than the minimum replica count",
        );
    }
    if desired > allowed {
        return (allowed, reason, message);
    }
    (
        desired,
        "DesiredWithinRange",
        "the desired count is within the acceptable range",
    )
}

/// Both rule sets of a `behavior`, with upstream's defaults where a field is unset
/// (the apiserver's defaulting normally filled them) and the scale-down window from
/// `--horizontal-pod-autoscaler-downscale-stabilization` when unset.
#[derive(Debug, Clone, PartialEq)]
pub struct Behavior {
    pub scale_up: HPAScalingRules,
    pub scale_down: HPAScalingRules,
}

fn policy(type_: &str, value: i32, period_seconds: i32) -> HPAScalingPolicy {
    HPAScalingPolicy {
        type_: type_.into(),
        value,
        period_seconds,
    }
}

impl Behavior {
    pub fn of(hpa: &HorizontalPodAutoscaler, downscale_window: Duration) -> Option<Behavior> {
        let b = hpa.spec.as_ref()?.behavior.as_ref()?;
        let fill = |given: Option<&HPAScalingRules>, default: HPAScalingRules| {
            let Some(g) = given else { return default };
            HPAScalingRules {
                stabilization_window_seconds: g
                    .stabilization_window_seconds
                    .or(default.stabilization_window_seconds),
                select_policy: g.select_policy.clone().or(default.select_policy),
                policies: g.policies.clone().or(default.policies),
                tolerance: g.tolerance.clone(),
            }
        };
        let up = HPAScalingRules {
            stabilization_window_seconds: Some(0),
            select_policy: Some("Max".into()),
            policies: Some(vec![policy("Pods", 4, 15), policy("Percent", 100, 15)]),
            tolerance: None,
        };
        let down = HPAScalingRules {
            stabilization_window_seconds: None,
            select_policy: Some("Max".into()),
            policies: Some(vec![policy("Percent", 100, 15)]),
            tolerance: None,
        };
        let mut scale_down = fill(b.scale_down.as_ref(), down);
        if scale_down.stabilization_window_seconds.is_none() {
            scale_down.stabilization_window_seconds =
                Some(i32::try_from(downscale_window.as_secs()).unwrap_or(i32::MAX));
        }
        Some(Behavior {
            scale_up: fill(b.scale_up.as_ref(), up),
            scale_down,
        })
    }
}

/// Upstream `NormalizationArg`.
#[derive(Debug, Clone, PartialEq)]
pub struct Normalization {
    pub scale_up: HPAScalingRules,
    pub scale_down: HPAScalingRules,
    pub min: i32,
    pub max: i32,
    pub current: i32,
    pub desired: i32,
}

// ---------------------------------------------------------------------------------
// Conditions and status
// ---------------------------------------------------------------------------------

/// Upstream `setConditionInList`: the condition of `type_` set (added last when
/// absent), its transition time moved only when its status changes.
pub fn set_condition(
    conditions: &mut Vec<HorizontalPodAutoscalerCondition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
    now: Timestamp,
) {
    let i = match conditions.iter().position(|c| c.type_ == type_) {
        Some(i) => i,
        None => {
            conditions.push(HorizontalPodAutoscalerCondition {
                type_: type_.into(),
                ..Default::default()
            });
            conditions.len() - 1
        }
    };
    let c = &mut conditions[i];
    if c.status != status {
        c.last_transition_time = Some(Time(now));
    }
    c.status = status.into();
    c.reason = Some(reason.into());
    c.message = Some(message);
}

/// The condition of `type_` in a status: (status, reason, message).
pub fn condition<'a>(
    status: &'a HorizontalPodAutoscalerStatus,
    type_: &str,
) -> Option<(&'a str, &'a str, &'a str)> {
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_)
        .map(|c| {
            (
                c.status.as_str(),
                c.reason.as_deref().unwrap_or_default(),
                c.message.as_deref().unwrap_or_default(),
            )
        })
}

/// One event to emit about the autoscaler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedEvent {
    pub type_: EventType,
    pub reason: String,
    pub note: String,
}

fn warning(reason: &str, note: String) -> PlannedEvent {
    PlannedEvent {
        type_: EventType::Warning,
        reason: reason.into(),
        note,
    }
}

/// Where a metric of one spec could not be computed: the condition to report and the
/// error.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MetricFailure {
    reason: &'static str,
    message: String,
}

/// One metric's proposal: replicas, the metric's description and its status.
struct Proposal {
    replicas: i32,
    name: String,
    status: MetricStatus,
}

/// What a metrics API answered (a `PodMetricsList`, a custom metrics
/// `MetricValueList`, an `ExternalMetricValueList`), or why there is none; `None` when
/// nothing was asked.
pub type MetricsAnswer = Option<std::result::Result<Value, String>>;

/// Every metrics API answer of one reconcile.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fetched {
    /// The resource metrics API's for the scale's selector (`Resource` and
    /// `ContainerResource` metrics share it).
    pub resource: MetricsAnswer,
    /// The custom or external metrics API's for each `Pods`, `Object` and `External`
    /// spec, by the spec's index.
    pub specs: BTreeMap<usize, std::result::Result<Value, String>>,
}

impl From<MetricsAnswer> for Fetched {
    fn from(resource: MetricsAnswer) -> Fetched {
        Fetched {
            resource,
            specs: BTreeMap::new(),
        }
    }
}

/// The largest proposal, its metric and the metrics' statuses; or the error and the
/// statuses there are.
type MetricsOutcome =
    std::result::Result<(i32, String, Vec<MetricStatus>), (String, Option<Vec<MetricStatus>>)>;

/// What the metrics of one reconcile are computed from.
struct Inputs<'a> {
    calc: ReplicaCalc,
    /// The autoscaler's namespace.
    namespace: &'a str,
    /// The target's pods (those its scale's selector selects).
    pods: &'a [&'a Pod],
    fetched: &'a Fetched,
    now: Timestamp,
}

impl Inputs<'_> {
    /// The custom or external metrics API's answer for the spec at `index`.
    fn answer(&self, index: usize) -> std::result::Result<&Value, String> {
        match self.fetched.specs.get(&index) {
            Some(Ok(v)) => Ok(v),
            Some(Err(e)) => Err(e.clone()),
            None => Err("no metrics fetched".into()),
        }
    }
}

/// Upstream `computeStatusForResourceMetricGeneric`, after the metrics are fetched.
fn resource_proposal(
    input: &Inputs<'_>,
    current: i32,
    target: &MetricTarget,
    source: Source<'_>,
) -> std::result::Result<(i32, MetricValueStatus, String), String> {
    let Source {
        resource,
        container,
    } = source;
    let (calc, pods, now) = (&input.calc, input.pods, input.now);
    let fetched = || -> std::result::Result<PodMetricsInfo, String> {
        let list = match &input.fetched.resource {
            Some(Ok(v)) => v,
            Some(Err(e)) => return Err(e.clone()),
            None => return Err("no metrics fetched".into()),
        };
        pod_metrics(list, resource, container).map(|(m, _)| m)
    };
    let unable = |e: String| format!("unable to get metrics for resource {resource}: {e}");
    if let Some(value) = &target.average_value {
        let target_milli = quantity::milli_value(&value.0).unwrap_or(0);
        let (replicas, usage) = fetched()
            .map_err(unable)
            .and_then(|m| plain_replicas(calc, current, target_milli, resource, pods, m, now))
            .map_err(|e| format!("failed to get {resource} usage: {e}"))?;
        return Ok((
            replicas,
            MetricValueStatus {
                average_value: Some(Quantity(quantity::format_milli(usage.into(), false))),
                ..Default::default()
            },
            format!("{resource} resource"),
        ));
    }
    let Some(target_utilization) = target.average_utilization else {
        return Err("invalid resource metric source: neither an average utilization target nor an average value (usage) target was set".into());
    };
    let (replicas, utilization, raw) = fetched()
        .map_err(unable)
        .and_then(|m| resource_replicas(calc, current, target_utilization, source, pods, m, now))
        .map_err(|e| format!("failed to get {resource} utilization: {e}"))?;
    let name = if container.is_some() {
        format!("{resource} container resource utilization (percentage of request)")
    } else {
        format!("{resource} resource utilization (percentage of request)")
    };
    Ok((
        replicas,
        MetricValueStatus {
            average_utilization: Some(utilization),
            average_value: Some(Quantity(quantity::format_milli(raw.into(), false))),
            value: None,
        },
        name,
    ))
}

/// A failed metric: the condition's reason and message (`e`), and the error
/// `computeReplicasForMetric` returns (`e` wrapped by `wrap`).
fn failure(
    reason: &'static str,
    e: String,
    wrap: impl FnOnce(&str) -> String,
) -> (MetricFailure, String) {
    let error = wrap(&e);
    (MetricFailure { reason, message: e }, error)
}

fn milli_quantity(v: i64) -> Quantity {
    Quantity(quantity::format_milli(v.into(), false))
}

fn target_milli(q: Option<&Quantity>) -> Option<i64> {
    q.map(|q| quantity::milli_value(&q.0).unwrap_or(0))
}

/// Upstream `computeStatusForPodsMetric` (`GetMetricReplicas`): the metric of every
/// target pod against the `AverageValue` target, pods grouped as for a resource
/// (readiness aside).
fn pods_proposal(
    input: &Inputs<'_>,
    index: usize,
    current: i32,
    src: &PodsMetricSource,
) -> std::result::Result<Proposal, (MetricFailure, String)> {
    let fail = |e: String| {
        failure("FailedGetPodsMetric", e, |e| {
            format!("failed to get pods metric value: {e}")
        })
    };
    let name = &src.metric.name;
    metric_selector(src.metric.selector.as_ref()).map_err(fail)?;
    let target = target_milli(src.target.average_value.as_ref()).ok_or_else(|| {
        fail("invalid pods metric source: the average value target is not set".into())
    })?;
    let (replicas, usage) = input
        .answer(index)
        .and_then(custom_pod_metrics)
        .map_err(|e| format!("unable to get metric {name}: {e}"))
        .and_then(|m| plain_replicas(&input.calc, current, target, "", input.pods, m, input.now))
        .map_err(fail)?;
    Ok(Proposal {
        replicas,
        name: format!("pods metric {name}"),
        status: MetricStatus {
            type_: "Pods".into(),
            pods: Some(PodsMetricStatus {
                metric: src.metric.clone(),
                current: MetricValueStatus {
                    average_value: Some(milli_quantity(usage)),
                    ..Default::default()
                },
            }),
            ..Default::default()
        },
    })
}

/// Upstream `computeStatusForObjectMetric` (`GetObjectMetricReplicas` for a `Value`
/// target, `GetObjectPerPodMetricReplicas` for an `AverageValue` one).
fn object_proposal(
    input: &Inputs<'_>,
    index: usize,
    scale: &ScaleView,
    src: &ObjectMetricSource,
) -> std::result::Result<Proposal, (MetricFailure, String)> {
    let fail = |e: String, wrap: &dyn Fn(&str) -> String| {
        failure("FailedGetObjectMetric", e, |e| {
            format!("failed to get object metric value: {}", wrap(e))
        })
    };
    let plain = |e: &str| e.to_string();
    let (name, object) = (&src.metric.name, &src.described_object);
    metric_selector(src.metric.selector.as_ref()).map_err(|e| fail(e, &plain))?;
    let usage = || {
        input
            .answer(index)
            .and_then(object_metric_value)
            // Upstream's arguments are in this order.
            .map_err(|e| {
                format!(
                    "unable to get metric {name}: {} on {} {}/{e}",
                    object.kind, input.namespace, object.name
                )
            })
    };
    let status = |current: MetricValueStatus| MetricStatus {
        type_: "Object".into(),
        object: Some(ObjectMetricStatus {
            described_object: object.clone(),
            metric: src.metric.clone(),
            current,
        }),
        ..Default::default()
    };
    let target = &src.target;
    if let (Some(value), "Value") = (target_milli(target.value.as_ref()), target.type_.as_str()) {
        let (replicas, usage) = usage()
            .and_then(|u| {
                value_replicas(&input.calc, scale.replicas, value, u, input.pods).map(|r| (r, u))
            })
            .map_err(|e| fail(e, &plain))?;
        return Ok(Proposal {
            replicas,
            name: format!("{} metric {name}", object.kind),
            status: status(MetricValueStatus {
                value: Some(milli_quantity(usage)),
                ..Default::default()
            }),
        });
    }
    if let (Some(average), "AverageValue") = (
        target_milli(target.average_value.as_ref()),
        target.type_.as_str(),
    ) {
        let usage = usage().map_err(|e| {
            fail(e, &|e: &str| {
                format!("failed to get {name} object metric: {e}")
            })
        })?;
        let (replicas, per_pod) =
            per_pod_replicas(&input.calc, scale.status_replicas, average, usage);
        return Ok(Proposal {
            replicas,
            // Upstream's name for this one.
            name: format!(
                "external metric {name}({})",
                go_label_selector(src.metric.selector.as_ref())
            ),
            status: status(MetricValueStatus {
                average_value: Some(milli_quantity(per_pod)),
                ..Default::default()
            }),
        });
    }
    Err(fail(
        "invalid object metric source: neither a value target nor an average value target was set"
            .into(),
        &plain,
    ))
}

/// Upstream `computeStatusForExternalMetric` (`GetExternalPerPodMetricReplicas` for an
/// `AverageValue` target, else `GetExternalMetricReplicas` for a `Value` one): the sum
/// of the metric's values.
fn external_proposal(
    input: &Inputs<'_>,
    index: usize,
    scale: &ScaleView,
    src: &ExternalMetricSource,
) -> std::result::Result<Proposal, (MetricFailure, String)> {
    let name = &src.metric.name;
    let fail = |e: String, wrap: &dyn Fn(&str) -> String| {
        failure("FailedGetExternalMetric", e, |e| {
            format!("failed to get {name} external metric value: {}", wrap(e))
        })
    };
    let selector = src.metric.selector.as_ref();
    let usage = || -> std::result::Result<i64, String> {
        metric_selector(selector)?;
        input
            .answer(index)
            .and_then(external_metric_values)
            .map(|values| values.iter().fold(0i64, |a, v| a.saturating_add(*v)))
            .map_err(|e| {
                format!(
                    "unable to get external metric {}/{name}/{}: {e}",
                    input.namespace,
                    go_label_selector(selector)
                )
            })
    };
    let proposal = |replicas, current| Proposal {
        replicas,
        name: format!("external metric {name}({})", go_label_selector(selector)),
        status: MetricStatus {
            type_: "External".into(),
            external: Some(ExternalMetricStatus {
                metric: src.metric.clone(),
                current,
            }),
            ..Default::default()
        },
    };
    if let Some(average) = target_milli(src.target.average_value.as_ref()) {
        let usage = usage().map_err(|e| {
            fail(e, &|e: &str| {
                format!("failed to get {name} external metric: {e}")
            })
        })?;
        let (replicas, per_pod) =
            per_pod_replicas(&input.calc, scale.status_replicas, average, usage);
        return Ok(proposal(
            replicas,
            MetricValueStatus {
                average_value: Some(milli_quantity(per_pod)),
                ..Default::default()
            },
        ));
    }
    if let Some(value) = target_milli(src.target.value.as_ref()) {
        let (replicas, usage) = usage()
            .and_then(|u| {
                value_replicas(&input.calc, scale.replicas, value, u, input.pods).map(|r| (r, u))
            })
            .map_err(|e| {
                fail(e, &|e: &str| {
                    format!("failed to get external metric {name}: {e}")
                })
            })?;
        return Ok(proposal(
            replicas,
            MetricValueStatus {
                value: Some(milli_quantity(usage)),
                ..Default::default()
            },
        ));
    }
    let plain = |e: &str| e.to_string();
    Err(fail(
        "invalid external metric source: neither a value target nor an average value target was set"
            .into(),
        &plain,
    ))
}

/// Upstream `computeReplicasForMetric` for one spec.
fn metric_proposal(
    input: &Inputs<'_>,
    index: usize,
    spec: &MetricSpec,
    scale: &ScaleView,
) -> std::result::Result<Proposal, (MetricFailure, String)> {
    let spec_replicas = scale.replicas;
    match spec.type_.as_str() {
        "Resource" => {
            let Some(src) = &spec.resource else {
                let e = "invalid resource metric source: the resource field is not set".to_string();
                return Err((
                    MetricFailure {
                        reason: "FailedGetResourceMetric",
                        message: e.clone(),
                    },
                    format!("failed to get resource metric value: {e}"),
                ));
            };
            match resource_proposal(
                input,
                spec_replicas,
                &src.target,
                Source {
                    resource: &src.name,
                    container: None,
                },
            ) {
                Ok((replicas, current, name)) => Ok(Proposal {
                    replicas,
                    name,
                    status: MetricStatus {
                        type_: "Resource".into(),
                        resource: Some(ResourceMetricStatus {
                            name: src.name.clone(),
                            current,
                        }),
                        ..Default::default()
                    },
                }),
                Err(e) => Err((
                    MetricFailure {
                        reason: "FailedGetResourceMetric",
                        message: e.clone(),
                    },
                    format!("failed to get {} resource metric value: {e}", src.name),
                )),
            }
        }
        "ContainerResource" => {
            let Some(src) = &spec.container_resource else {
                let e = "invalid container resource metric source: the containerResource field is not set".to_string();
                return Err((
                    MetricFailure {
                        reason: "FailedGetContainerResourceMetric",
                        message: e.clone(),
                    },
                    format!("failed to get container metric value: {e}"),
                ));
            };
            match resource_proposal(
                input,
                spec_replicas,
                &src.target,
                Source {
                    resource: &src.name,
                    container: Some(&src.container),
                },
            ) {
                Ok((replicas, current, name)) => Ok(Proposal {
                    replicas,
                    name,
                    status: MetricStatus {
                        type_: "ContainerResource".into(),
                        container_resource: Some(ContainerResourceMetricStatus {
                            name: src.name.clone(),
                            container: src.container.clone(),
                            current,
                        }),
                        ..Default::default()
                    },
                }),
                Err(e) => Err((
                    MetricFailure {
                        reason: "FailedGetContainerResourceMetric",
                        message: e.clone(),
                    },
                    format!(
                        "failed to get {} container metric value: {e}",
                        src.container
                    ),
                )),
            }
        }
        "Pods" => match &spec.pods {
            Some(src) => pods_proposal(input, index, scale.replicas, src),
            None => Err(failure(
                "FailedGetPodsMetric",
                "invalid pods metric source: the pods field is not set".into(),
                |e| format!("failed to get pods metric value: {e}"),
            )),
        },
        "Object" => match &spec.object {
            Some(src) => object_proposal(input, index, scale, src),
            None => Err(failure(
                "FailedGetObjectMetric",
                "invalid object metric source: the object field is not set".into(),
                |e| format!("failed to get object metric value: {e}"),
            )),
        },
        "External" => match &spec.external {
            Some(src) => external_proposal(input, index, scale, src),
            None => Err(failure(
                "FailedGetExternalMetric",
                "invalid external metric source: the external field is not set".into(),
                |e| format!("failed to get external metric value: {e}"),
            )),
        },
        other => {
            let e = format!("unknown metric source type {other:?}");
            Err((
                MetricFailure {
                    reason: "InvalidMetricSourceType",
                    message: e.clone(),
                },
                e,
            ))
        }
    }
}

/// Whether the spec's metrics need the resource metrics API.
pub fn needs_resource_metrics(hpa: &HorizontalPodAutoscaler) -> bool {
    hpa.spec
        .iter()
        .flat_map(|s| s.metrics.iter().flatten())
        .any(|m| m.type_ == "Resource" || m.type_ == "ContainerResource")
}

/// The target's scale as the plan needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScaleView {
    /// `spec.replicas`.
    pub replicas: i32,
    /// `status.replicas` (what the `AverageValue` targets of `Object` and `External`
    /// metrics divide by).
    pub status_replicas: i32,
    /// `status.selector`.
    pub selector: Option<String>,
}

/// The branch of `reconcileAutoscaler` a current count takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Branch {
    /// Scaled to zero with `minReplicas` != 0: autoscaling is off.
    Disabled,
    /// Outside the bounds: scaled to this bound, for this reason.
    Bound(i32, &'static str),
    /// The metrics decide.
    Metrics,
}

/// Upstream's order: zero, above max, below min, else metrics.
pub fn branch(current: i32, min: i32, max: i32) -> Branch {
    if current == 0 && min != 0 {
        Branch::Disabled
    } else if current > max {
        Branch::Bound(max, "Current number of replicas above Spec.MaxReplicas")
    } else if current < min {
        Branch::Bound(min, "Current number of replicas below Spec.MinReplicas")
    } else {
        Branch::Metrics
    }
}

/// The decision of one reconcile before the scale is written.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The status so far (conditions set; replicas and metrics not yet).
    pub status: HorizontalPodAutoscalerStatus,
    pub current: i32,
    pub desired: i32,
    /// Whether to write `desired` through the scale subresource.
    pub rescale: bool,
    /// The `reason:` of the rescale event.
    pub reason: String,
    pub metrics: Option<Vec<MetricStatus>>,
    pub events: Vec<PlannedEvent>,
    /// The metrics could not be computed: `status` is final, nothing is scaled.
    pub failed: Option<String>,
}

/// Upstream `reconcileAutoscaler` from the scale read onwards, without IO: the
/// conditions, the desired count, the events; `memory` gets the recommendation.
/// `pods` are the namespace's pods; `metrics` the metrics APIs' answers.
pub fn decide(
    hpa: &HorizontalPodAutoscaler,
    scale: &ScaleView,
    pods: &[&Pod],
    metrics: &Fetched,
    memory: &mut Memory,
    cfg: &HpaConfig,
    now: Timestamp,
) -> Decision {
    let spec = hpa.spec.clone().unwrap_or_default();
    let mut status = hpa.status.clone().unwrap_or_default();
    let mut conditions = status.conditions.take().unwrap_or_default();
    set_condition(
        &mut conditions,
        "AbleToScale",
        "True",
        "SucceededGetScale",
        "the HPA controller was able to get the target's current scale".into(),
        now,
    );
    let current = scale.replicas;
    let now_ms = ms(now);
    memory.record_initial(current, now_ms);
    let min = spec.min_replicas.unwrap_or(1);
    let max = spec.max_replicas;
    let mut d = Decision {
        status: HorizontalPodAutoscalerStatus::default(),
        current,
        desired: 0,
        rescale: true,
        reason: String::new(),
        metrics: None,
        events: Vec::new(),
        failed: None,
    };
    match branch(current, min, max) {
        Branch::Disabled => {
            d.rescale = false;
            set_condition(
                &mut conditions,
                "ScalingActive",
                "False",
                "ScalingDisabled",
                "scaling is disabled since the replica count of the target is zero".into(),
                now,
            );
        }
        Branch::Bound(desired, reason) => {
            d.desired = desired;
            d.reason = reason.into();
        }
        Branch::Metrics => {
            let calc = ReplicaCalc {
                tolerance: cfg.tolerance,
                cpu_initialization_period: cfg.cpu_initialization_period,
                initial_readiness_delay: cfg.initial_readiness_delay,
            };
            let namespace = hpa.metadata.namespace.as_deref().unwrap_or_default();
            let input = Inputs {
                calc,
                namespace,
                pods,
                fetched: metrics,
                now,
            };
            match metric_replicas(
                &spec.metrics.clone().unwrap_or_default(),
                scale,
                &input,
                &mut conditions,
                &mut d.events,
            ) {
                Err((error, statuses)) => {
                    d.metrics = statuses;
                    d.events
                        .push(warning("FailedComputeMetricsReplicas", error.clone()));
                    d.failed = Some(error);
                    d.rescale = false;
                }
                Ok((proposed, metric, statuses)) => {
                    d.metrics = Some(statuses);
                    let desired = proposed.max(0);
                    if desired > current {
                        d.reason = format!("{metric} above target");
                    }
                    if desired < current {
                        d.reason = "All metrics below target".into();
                    }
                    d.desired = match Behavior::of(hpa, cfg.downscale_stabilization) {
                        None => {
                            let stabilized =
                                memory.stabilize(desired, cfg.downscale_stabilization, now_ms);
                            if stabilized != desired {
                                set_condition(&mut conditions, "AbleToScale", "True", "ScaleDownStabilized",
                                    "recent recommendations were higher than current one, applying the highest recent recommendation".into(), now);
                            } else {
                                set_condition(
                                    &mut conditions,
                                    "AbleToScale",
                                    "True",
                                    "ReadyForNewScale",
                                    "recommended size matches current size".into(),
                                    now,
                                );
                            }
                            let (bounded, reason, message) =
                                bound_by_rules(current, stabilized, min, max);
                            let limited = if bounded == stabilized {
                                "False"
                            } else {
                                "True"
                            };
                            set_condition(
                                &mut conditions,
                                "ScalingLimited",
                                limited,
                                reason,
                                message.into(),
                                now,
                            );
                            bounded
                        }
                        Some(b) => {
                            let mut args = Normalization {
                                scale_up: b.scale_up,
                                scale_down: b.scale_down,
                                min,
                                max,
                                current,
                                desired,
                            };
                            let (stabilized, reason, message) =
                                memory.stabilize_with_behaviors(&args, now_ms);
                            if stabilized != desired {
                                set_condition(
                                    &mut conditions,
                                    "AbleToScale",
                                    "True",
                                    reason,
                                    message.into(),
                                    now,
                                );
                            } else {
                                set_condition(
                                    &mut conditions,
                                    "AbleToScale",
                                    "True",
                                    "ReadyForNewScale",
                                    "recommended size matches current size".into(),
                                    now,
                                );
                            }
                            args.desired = stabilized;
                            let (bounded, reason, message) = memory.bound_by_rate(&args, now_ms);
                            let limited = if bounded == stabilized {
                                "False"
                            } else {
                                "True"
                            };
                            set_condition(
                                &mut conditions,
                                "ScalingLimited",
                                limited,
                                reason,
                                message.into(),
                                now,
                            );
                            bounded
                        }
                    };
                    d.rescale = d.desired != current;
                }
            }
        }
    }
    status.conditions = Some(conditions);
    d.status = status;
    if d.failed.is_some() {
        let metrics = d.metrics.clone();
        set_replicas(&mut d.status, current, None, metrics, hpa, false, now);
    }
    d
}

/// Upstream `computeReplicasForMetrics`: the largest proposal, its metric and every
/// metric's status; an error (with the statuses) when all metrics failed, or some
/// did and the others would scale down.
fn metric_replicas(
    specs: &[MetricSpec],
    scale: &ScaleView,
    input: &Inputs<'_>,
    conditions: &mut Vec<HorizontalPodAutoscalerCondition>,
    events: &mut Vec<PlannedEvent>,
) -> MetricsOutcome {
    let now = input.now;
    let selector = match scale.selector.as_deref().unwrap_or_default() {
        "" => {
            events.push(warning("SelectorRequired", "selector is required".into()));
            set_condition(
                conditions,
                "ScalingActive",
                "False",
                "InvalidSelector",
                "the HPA target's scale is missing a selector".into(),
                now,
            );
            return Err(("selector is required".into(), None));
        }
        s => match Selector::parse(s) {
            Ok(sel) => sel,
            Err(e) => {
                let msg = format!(
                    "couldn't convert selector into a corresponding internal selector object: {e}"
                );
                events.push(warning("InvalidSelector", msg.clone()));
                set_condition(
                    conditions,
                    "ScalingActive",
                    "False",
                    "InvalidSelector",
                    msg.clone(),
                    now,
                );
                return Err((msg, None));
            }
        },
    };
    let empty = BTreeMap::new();
    let pods: Vec<&Pod> = input
        .pods
        .iter()
        .copied()
        .filter(|p| selector.matches(p.metadata.labels.as_ref().unwrap_or(&empty)))
        .collect();
    let input = Inputs {
        calc: input.calc,
        namespace: input.namespace,
        pods: &pods,
        fetched: input.fetched,
        now,
    };
    let mut statuses = vec![MetricStatus::default(); specs.len()];
    let (mut replicas, mut metric) = (0i32, String::new());
    let mut invalid = 0usize;
    let mut first: Option<(MetricFailure, String)> = None;
    for (i, spec) in specs.iter().enumerate() {
        match metric_proposal(&input, i, spec, scale) {
            Ok(p) => {
                if replicas == 0 || p.replicas > replicas {
                    replicas = p.replicas;
                    metric = p.name;
                }
                statuses[i] = p.status;
            }
            Err((failure, error)) => {
                // Upstream's getUnableComputeReplicaCountCondition records an event
                // for every failed metric.
                events.push(warning(failure.reason, failure.message.clone()));
                if first.is_none() {
                    first = Some((failure, error));
                }
                invalid += 1;
            }
        }
    }
    let error = first.as_ref().map(|(_, e)| {
        format!(
            "invalid metrics ({invalid} invalid out of {}), first error is: {e}",
            specs.len()
        )
    });
    if invalid >= specs.len() || (invalid > 0 && replicas < scale.replicas) {
        if let Some((f, _)) = &first {
            set_condition(
                conditions,
                "ScalingActive",
                "False",
                f.reason,
                format!(
                    "the HPA was unable to compute the replica count: {}",
                    f.message
                ),
                now,
            );
        }
        return Err((
            error.unwrap_or_else(|| "no metrics to compute a replica count from".into()),
            Some(statuses),
        ));
    }
    set_condition(
        conditions,
        "ScalingActive",
        "True",
        "ValidMetricFound",
        format!("the HPA was able to successfully calculate a replica count from {metric}"),
        now,
    );
    Ok((replicas, metric, statuses))
}

/// Upstream `setStatus`: replicas and metrics replaced, conditions and lastScaleTime
/// kept (now when rescaled). `desired: None` keeps the old desired count
/// (`setCurrentReplicasAndMetricsInStatus`).
pub fn set_replicas(
    status: &mut HorizontalPodAutoscalerStatus,
    current: i32,
    desired: Option<i32>,
    metrics: Option<Vec<MetricStatus>>,
    hpa: &HorizontalPodAutoscaler,
    rescaled: bool,
    now: Timestamp,
) {
    status.current_replicas = crate::omitempty(current);
    if let Some(d) = desired {
        status.desired_replicas = d;
    }
    status.current_metrics = metrics;
    status.observed_generation = hpa.metadata.generation;
    if rescaled {
        status.last_scale_time = Some(Time(now));
    }
}

/// The rest of `reconcileAutoscaler` once the scale write (if any) answered: the
/// final status and the events; `memory` gets the scale event.
pub fn finish(
    hpa: &HorizontalPodAutoscaler,
    mut d: Decision,
    written: Option<std::result::Result<(), String>>,
    memory: &mut Memory,
    cfg: &HpaConfig,
    now: Timestamp,
) -> (HorizontalPodAutoscalerStatus, Vec<PlannedEvent>) {
    if d.failed.is_some() {
        return (d.status, d.events);
    }
    let mut conditions = d.status.conditions.take().unwrap_or_default();
    let rescaled = match written {
        Some(Err(e)) => {
            d.events.push(warning(
                "FailedRescale",
                format!("New size: {}; reason: {}; error: {e}", d.desired, d.reason),
            ));
            set_condition(
                &mut conditions,
                "AbleToScale",
                "False",
                "FailedUpdateScale",
                format!("the HPA controller was unable to update the target scale: {e}"),
                now,
            );
            d.status.conditions = Some(conditions);
            set_replicas(&mut d.status, d.current, None, d.metrics, hpa, false, now);
            return (d.status, d.events);
        }
        Some(Ok(())) => {
            set_condition(
                &mut conditions,
                "AbleToScale",
                "True",
                "SucceededRescale",
                format!(
                    "the HPA controller was able to update the target scale to {}",
                    d.desired
                ),
                now,
            );
            d.events.push(PlannedEvent {
                type_: EventType::Normal,
                reason: "SuccessfulRescale".into(),
                note: format!("New size: {}; reason: {}", d.desired, d.reason),
            });
            if let Some(b) = Behavior::of(hpa, cfg.downscale_stabilization) {
                memory.store_scale_event(&b, d.current, d.desired, ms(now));
            }
            true
        }
        None => false,
    };
    let desired = if rescaled { d.desired } else { d.current };
    d.status.conditions = Some(conditions);
    set_replicas(
        &mut d.status,
        d.current,
        Some(desired),
        d.metrics,
        hpa,
        rescaled,
        now,
    );
    (d.status, d.events)
}

// ---------------------------------------------------------------------------------
// The controller
// ---------------------------------------------------------------------------------

/// Upstream `schema.ParseGroupVersion`.
pub fn parse_group_version(api_version: &str) -> std::result::Result<(String, String), String> {
    if api_version.is_empty() || api_version == "/" {
        return Ok((String::new(), String::new()));
    }
    match api_version.split('/').collect::<Vec<_>>().as_slice() {
        [v] => Ok((String::new(), (*v).to_string())),
        [g, v] => Ok(((*g).to_string(), (*v).to_string())),
        _ => Err(format!("unexpected GroupVersion string: {api_version}")),
    }
}

/// The built-in kinds with a scale subresource: (group, kind) -> (version, plural).
fn builtin_scalable(group: &str, kind: &str) -> Option<(&'static str, &'static str)> {
    match (group, kind) {
        ("", "ReplicationController") => Some(("v1", "replicationcontrollers")),
        ("apps", "Deployment") => Some(("v1", "deployments")),
        ("apps", "ReplicaSet") => Some(("v1", "replicasets")),
        ("apps", "StatefulSet") => Some(("v1", "statefulsets")),
        _ => None,
    }
}

/// The path of a namespaced object's scale subresource.
pub fn scale_path(group: &str, version: &str, plural: &str, ns: &str, name: &str) -> String {
    if group.is_empty() {
        format!("/api/{version}/namespaces/{ns}/{plural}/{name}/scale")
    } else {
        format!("/apis/{group}/{version}/namespaces/{ns}/{plural}/{name}/scale")
    }
}

/// Percent-encodes a query value (everything but RFC 3986's unreserved characters).
fn encode_query(v: &str) -> String {
    let mut out = String::new();
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// An API error as client-go prints it: the Status message (with client-go's
/// `(get <resource>)` suffix for the generic not-found/unavailable answers).
fn api_message(e: &kube::Error, what: &str) -> String {
    match e {
        kube::Error::Api(s) => match s.code {
            404 if s.message.is_empty()
                || s.message.contains("could not find the requested resource") =>
            {
                format!("the server could not find the requested resource ({what})")
            }
            503 => format!("the server is currently unable to handle the request ({what})"),
            _ if !s.message.is_empty() => s.message.clone(),
            _ => format!(
                "an error on the server ({}) has prevented the request from succeeding ({what})",
                s.code
            ),
        },
        other => other.to_string(),
    }
}

/// The horizontal pod autoscaler controller.
pub struct HorizontalController {
    client: kube::Client,
    hpas: Store<HorizontalPodAutoscaler>,
    pods: Store<Pod>,
    recorder: Arc<dyn EventSink>,
    cfg: HpaConfig,
    memory: Mutex<HashMap<String, Memory>>,
    /// The custom metrics API version to ask and when it was discovered (upstream's
    /// discovery-based client, invalidated every sync period).
    custom_version: Mutex<Option<(std::time::Instant, String)>>,
}

impl HorizontalController {
    pub fn new(
        factory: &SharedInformerFactory,
        client: kube::Client,
        recorder: Arc<dyn EventSink>,
        cfg: HpaConfig,
    ) -> Arc<Self> {
        Arc::new(HorizontalController {
            client,
            hpas: factory.informer::<HorizontalPodAutoscaler>().store(),
            pods: factory.informer::<Pod>().store(),
            recorder,
            cfg,
            memory: Mutex::new(HashMap::new()),
            custom_version: Mutex::new(None),
        })
    }

    /// The (group, version, plural) of the target kind: the built-in table, else
    /// discovery (upstream's REST mapper).
    async fn resolve(
        &self,
        group: &str,
        version: &str,
        kind: &str,
    ) -> std::result::Result<(String, String, String), String> {
        if let Some((v, plural)) = builtin_scalable(group, kind) {
            return Ok((group.into(), v.into(), plural.into()));
        }
        let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
        match kube::discovery::pinned_kind(&self.client, &gvk).await {
            Ok((ar, _)) => Ok((ar.group, ar.version, ar.plural)),
            Err(_) => Err(format!("no matches for kind {kind:?} in group {group:?}")),
        }
    }

    async fn get_scale(&self, path: &str) -> std::result::Result<Scale, String> {
        let req = http::Request::get(path)
            .body(Vec::new())
            .map_err(|e| e.to_string())?;
        self.client
            .request::<Scale>(req)
            .await
            .map_err(|e| api_message(&e, "get scale"))
    }

    async fn put_scale(&self, path: &str, scale: &Scale) -> std::result::Result<(), String> {
        let body = serde_json::to_vec(scale).map_err(|e| e.to_string())?;
        let req = http::Request::put(path)
            .header("content-type", "application/json")
            .body(body)
            .map_err(|e| e.to_string())?;
        self.client
            .request::<Scale>(req)
            .await
            .map(|_| ())
            .map_err(|e| api_message(&e, "update scale"))
    }

    /// GETs a metrics API path, bounded by [`METRICS_TIMEOUT`]; errors as client-go
    /// prints them for `what`.
    async fn get_metrics(&self, path: String, what: &str) -> std::result::Result<Value, String> {
        let req = http::Request::get(path)
            .body(Vec::new())
            .map_err(|e| e.to_string())?;
        match tokio::time::timeout(METRICS_TIMEOUT, self.client.request::<Value>(req)).await {
            Err(_) => Err("timed out".into()),
            Ok(Err(e)) => Err(api_message(&e, what)),
            Ok(Ok(v)) => Ok(v),
        }
    }

    /// Upstream `resourceMetricsClient`: the PodMetrics of the selector's pods.
    async fn pod_metrics_list(
        &self,
        ns: &str,
        selector: &str,
    ) -> std::result::Result<Value, String> {
        let path = format!(
            "/apis/metrics.k8s.io/v1beta1/namespaces/{ns}/pods?labelSelector={}",
            encode_query(selector)
        );
        self.get_metrics(path, "get pods.metrics.k8s.io")
            .await
            .map_err(|e| format!("unable to fetch metrics from resource metrics API: {e}"))
    }

    /// The custom metrics API version to ask: the first the group serves (in the
    /// server's order) of those upstream's client knows, v1beta2 and v1beta1.
    async fn custom_metrics_version(&self) -> std::result::Result<String, String> {
        if let Some((at, version)) = &*self.custom_version.lock()
            && at.elapsed() < self.cfg.sync_period
        {
            return Ok(version.clone());
        }
        let group = self
            .get_metrics(
                "/apis/custom.metrics.k8s.io".into(),
                "get apigroups custom.metrics.k8s.io",
            )
            .await
            .map_err(|e| {
                if e.starts_with("the server could not find the requested resource") {
                    "no custom metrics API (custom.metrics.k8s.io) registered".to_string()
                } else {
                    e
                }
            })?;
        let version = group["versions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v["version"].as_str())
            .find(|v| matches!(*v, "v1beta2" | "v1beta1"))
            .ok_or_else(|| {
                "the custom metrics API (custom.metrics.k8s.io) serves neither v1beta2 nor v1beta1"
                    .to_string()
            })?
            .to_string();
        *self.custom_version.lock() = Some((std::time::Instant::now(), version.clone()));
        Ok(version)
    }

    /// The group-qualified resource of a described object (upstream's REST mapping
    /// in `qualResourceForKind`): the built-in table, else discovery.
    async fn object_resource(
        &self,
        object: &CrossVersionObjectReference,
    ) -> std::result::Result<String, String> {
        let (group, version) =
            parse_group_version(object.api_version.as_deref().unwrap_or_default())?;
        let kind = &object.kind;
        let plural = match ferrokube_api::resources::lookup_kind(&group, kind) {
            Some(info) => info.plural.to_string(),
            None => {
                let gvk = kube::api::GroupVersionKind::gvk(&group, &version, kind);
                match kube::discovery::pinned_kind(&self.client, &gvk).await {
                    Ok((ar, _)) => ar.plural,
                    Err(_) => {
                        let gk = if group.is_empty() {
                            kind.clone()
                        } else {
                            format!("{kind}.{group}")
                        };
                        return Err(format!(
                            "unable to map kind {gk} to resource: no matches for kind {kind:?} in group {group:?}"
                        ));
                    }
                }
            }
        };
        Ok(if group.is_empty() {
            plural
        } else {
            format!("{plural}.{group}")
        })
    }

    /// Upstream `customMetricsClient` / `externalMetricsClient`: what the custom or
    /// external metrics API answers for a `Pods`, `Object` or `External` spec (`None`
    /// for other specs and for a metric selector that does not convert, which the
    /// calculation reports).
    async fn fetch_spec(&self, ns: &str, selector: &str, spec: &MetricSpec) -> MetricsAnswer {
        let custom = |e: String| format!("unable to fetch metrics from custom metrics API: {e}");
        match spec.type_.as_str() {
            "Pods" => {
                let src = spec.pods.as_ref()?;
                let metric_selector = metric_selector(src.metric.selector.as_ref()).ok()?;
                let version = match self.custom_metrics_version().await {
                    Ok(v) => v,
                    Err(e) => return Some(Err(custom(e))),
                };
                let path = custom_pods_metric_path(
                    &version,
                    ns,
                    &src.metric.name,
                    selector,
                    &metric_selector,
                );
                let what = "get pods.custom.metrics.k8s.io *";
                Some(self.get_metrics(path, what).await.map_err(custom))
            }
            "Object" => {
                let src = spec.object.as_ref()?;
                let metric_selector = metric_selector(src.metric.selector.as_ref()).ok()?;
                let object = &src.described_object;
                let found = match self.custom_metrics_version().await {
                    Ok(v) => self.object_resource(object).await.map(|r| (v, r)),
                    Err(e) => Err(e),
                };
                let (version, resource) = match found {
                    Ok(found) => found,
                    Err(e) => return Some(Err(custom(e))),
                };
                let path = custom_object_metric_path(
                    &version,
                    ns,
                    &resource,
                    &object.name,
                    &src.metric.name,
                    &metric_selector,
                );
                let what = format!("get {resource}.custom.metrics.k8s.io {}", object.name);
                Some(self.get_metrics(path, &what).await.map_err(custom))
            }
            "External" => {
                let src = spec.external.as_ref()?;
                let metric_selector = metric_selector(src.metric.selector.as_ref()).ok()?;
                let path = external_metric_path(ns, &src.metric.name, &metric_selector);
                let what = format!("get {}.external.metrics.k8s.io", src.metric.name);
                Some(
                    self.get_metrics(path, &what).await.map_err(|e| {
                        format!("unable to fetch metrics from external metrics API: {e}")
                    }),
                )
            }
            _ => None,
        }
    }

    fn emit(&self, hpa: &HorizontalPodAutoscaler, events: Vec<PlannedEvent>) {
        for e in events {
            emit(&*self.recorder, hpa, e.type_, &e.reason, e.note);
        }
    }

    /// Writes `status` through `/status` when it differs from the object's.
    async fn write_status(
        &self,
        hpa: &HorizontalPodAutoscaler,
        status: HorizontalPodAutoscalerStatus,
    ) -> Result<()> {
        if hpa.status.as_ref() == Some(&status) {
            return Ok(());
        }
        let ns = hpa.metadata.namespace.clone().unwrap_or_default();
        let api: Api<HorizontalPodAutoscaler> = Api::namespaced(self.client.clone(), &ns);
        let result = replace_status_retrying(&api, hpa, |h| h.status = Some(status.clone())).await;
        if let Err(e) = &result {
            emit(
                &*self.recorder,
                hpa,
                EventType::Warning,
                "FailedUpdateStatus",
                e.to_string(),
            );
        }
        result
    }

    /// A failure to read the target's scale: `AbleToScale` False `FailedGetScale`.
    async fn failed_get_scale(&self, hpa: &HorizontalPodAutoscaler, error: String) -> Result<()> {
        let now = Timestamp::now();
        emit(
            &*self.recorder,
            hpa,
            EventType::Warning,
            "FailedGetScale",
            error.clone(),
        );
        let mut status = hpa.status.clone().unwrap_or_default();
        let mut conditions = status.conditions.take().unwrap_or_default();
        set_condition(
            &mut conditions,
            "AbleToScale",
            "False",
            "FailedGetScale",
            format!("the HPA controller was unable to get the target's current scale: {error}"),
            now,
        );
        status.conditions = Some(conditions);
        self.write_status(hpa, status).await
    }

    async fn reconcile_autoscaler(&self, key: &str, hpa: &HorizontalPodAutoscaler) -> Result<()> {
        let spec = hpa.spec.clone().unwrap_or_default();
        let target = &spec.scale_target_ref;
        let ns = hpa.metadata.namespace.clone().unwrap_or_default();
        let (group, version) =
            match parse_group_version(target.api_version.as_deref().unwrap_or_default()) {
                Ok(gv) => gv,
                Err(e) => return self.failed_get_scale(hpa, e).await,
            };
        let (group, version, plural) = match self.resolve(&group, &version, &target.kind).await {
            Ok(r) => r,
            Err(e) => return self.failed_get_scale(hpa, e).await,
        };
        let path = scale_path(&group, &version, &plural, &ns, &target.name);
        let scale = match self.get_scale(&path).await {
            Ok(s) => s,
            Err(e) => return self.failed_get_scale(hpa, e).await,
        };
        let view = ScaleView {
            replicas: scale.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0),
            status_replicas: scale.status.as_ref().map_or(0, |s| s.replicas),
            selector: scale.status.as_ref().and_then(|s| s.selector.clone()),
        };
        let min = spec.min_replicas.unwrap_or(1);
        let selector = view.selector.clone().unwrap_or_default();
        let mut metrics = Fetched::default();
        if let (Branch::Metrics, Ok(parsed), false) = (
            branch(view.replicas, min, spec.max_replicas),
            Selector::parse(&selector),
            selector.is_empty(),
        ) {
            if needs_resource_metrics(hpa) {
                metrics.resource = Some(self.pod_metrics_list(&ns, &selector).await);
            }
            let selector = parsed.to_string();
            for (i, m) in spec.metrics.iter().flatten().enumerate() {
                if let Some(answer) = self.fetch_spec(&ns, &selector, m).await {
                    metrics.specs.insert(i, answer);
                }
            }
        }
        let pods = self.pods.list_namespace(&ns);
        let pod_refs: Vec<&Pod> = pods.iter().map(|p| &**p).collect();
        let now = Timestamp::now();
        let mut memory = self.memory.lock().remove(key).unwrap_or_default();
        let decision = decide(hpa, &view, &pod_refs, &metrics, &mut memory, &self.cfg, now);
        if let Some(error) = &decision.failed {
            tracing::warn!(hpa = key, %error, "failed to compute desired number of replicas based on listed metrics");
        }
        let written = if decision.rescale {
            let mut updated = scale.clone();
            updated.spec.get_or_insert_with(Default::default).replicas = Some(decision.desired);
            let result = self.put_scale(&path, &updated).await;
            if let Err(error) = &result {
                tracing::warn!(hpa = key, %error, "failed to rescale");
            }
            Some(result)
        } else {
            None
        };
        let now = Timestamp::now();
        let (status, events) = finish(hpa, decision, written, &mut memory, &self.cfg, now);
        self.memory.lock().insert(key.to_string(), memory);
        self.emit(hpa, events);
        self.write_status(hpa, status).await
    }
}

#[async_trait::async_trait]
impl Controller for HorizontalController {
    fn name(&self) -> &'static str {
        "horizontalpodautoscaling"
    }

    fn watch(self: Arc<Self>, factory: &SharedInformerFactory, queue: &WorkQueue<String>) {
        let q = queue.clone();
        factory
            .informer::<HorizontalPodAutoscaler>()
            .add_event_handler(
                move |n: Notification<HorizontalPodAutoscaler>| match &n {
                    Notification::Added { .. } => q.add(object_key(&**n.object())),
                    // A spec change is acted on at once; status writes (ours) wait for
                    // the next sync period, as upstream's rate-limited queue makes
                    // every update wait.
                    Notification::Updated { old, new } => {
                        if old.metadata.generation != new.metadata.generation {
                            q.add(object_key(&**new));
                        }
                    }
                    Notification::Deleted { .. } => {}
                },
                None,
            );
    }

    async fn reconcile(&self, key: &str) -> Result<Action> {
        let Some(hpa) = self.hpas.get(key) else {
            self.memory.lock().remove(key);
            return Ok(Action::Done);
        };
        if let Err(e) = self.reconcile_autoscaler(key, &hpa).await {
            tracing::warn!(hpa = key, error = %e, "reconciling the autoscaler failed");
        }
        Ok(Action::RequeueAfter(self.cfg.sync_period))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: &str = "2026-01-01T00:10:00Z";
    const CPU: Source<'static> = Source {
        resource: "cpu",
        container: None,
    };

    fn now() -> Timestamp {
        NOW.parse().unwrap()
    }

    fn at(secs_before_now: i64) -> String {
        Timestamp::from_millisecond(ms(now()) - secs_before_now * 1000)
            .unwrap()
            .to_string()
    }

    /// A running, ready pod started ten minutes ago with one container requesting
    /// `cpu`.
    fn pod(name: &str, cpu: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
            "status": {"phase": "Running", "startTime": at(600),
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": at(590)}]}
        }))
        .unwrap()
    }

    fn calc() -> ReplicaCalc {
        ReplicaCalc {
            tolerance: 0.1,
            cpu_initialization_period: Duration::from_secs(300),
            initial_readiness_delay: Duration::from_secs(30),
        }
    }

    fn metrics(usage: &[(&str, i64)]) -> PodMetricsInfo {
        usage
            .iter()
            .map(|(n, v)| {
                (
                    n.to_string(),
                    PodMetric {
                        value: *v,
                        timestamp: ms(now()),
                        window: 30_000,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn utilization_proposes_the_ratio_times_ready_pods_outside_the_tolerance() {
        let pods = [pod("a", "100m"), pod("b", "100m")];
        let refs: Vec<&Pod> = pods.iter().collect();
        // (usage per pod, target %) -> (replicas, utilization, average usage)
        let cases = [
            (200, 100, (4, 200, 200)),
            (200, 50, (8, 200, 200)),
            (105, 100, (2, 105, 105)),
            (95, 100, (2, 95, 95)),
            (20, 100, (1, 20, 20)),
            (50, 100, (1, 50, 50)),
        ];
        for (usage, target, want) in cases {
            let m = metrics(&[("a", usage), ("b", usage)]);
            assert_eq!(
                resource_replicas(&calc(), 2, target, CPU, &refs, m, now()).unwrap(),
                want,
                "usage {usage} target {target}"
            );
        }
        // A wider tolerance keeps 130% as it is.
        let wide = ReplicaCalc {
            tolerance: 0.5,
            ..calc()
        };
        let m = metrics(&[("a", 130), ("b", 130)]);
        assert_eq!(
            resource_replicas(&wide, 2, 100, CPU, &refs, m, now())
                .unwrap()
                .0,
            2
        );
    }

    #[test]
    fn missing_metrics_count_as_full_on_scale_down_and_empty_on_scale_up() {
        let pods = [
            pod("a", "100m"),
            pod("b", "100m"),
            pod("c", "100m"),
            pod("d", "100m"),
        ];
        let refs: Vec<&Pod> = pods.iter().collect();
        // Scale-up: two pods at 200%, two without metrics (0%): back to 100%, no change.
        let m = metrics(&[("a", 200), ("b", 200)]);
        assert_eq!(
            resource_replicas(&calc(), 4, 100, CPU, &refs, m, now()).unwrap(),
            (4, 200, 200)
        );
        // Scale-up beyond: 2 x 400% and two missing -> 200% over 4 pods -> 8.
        let m = metrics(&[("a", 400), ("b", 400)]);
        assert_eq!(
            resource_replicas(&calc(), 4, 100, CPU, &refs, m, now())
                .unwrap()
                .0,
            8
        );
        // Scale-down: two at 10%, two missing taken as 100%: 55% of 4 -> 3.
        let m = metrics(&[("a", 10), ("b", 10)]);
        assert_eq!(
            resource_replicas(&calc(), 4, 100, CPU, &refs, m, now())
                .unwrap()
                .0,
            3
        );
        // Plain (AverageValue) targets: missing pods take the target on a scale-down.
        let m = metrics(&[("a", 10), ("b", 10)]);
        assert_eq!(
            plain_replicas(&calc(), 4, 100, "cpu", &refs, m, now()).unwrap(),
            (3, 10)
        );
        let m = metrics(&[("a", 100), ("b", 100), ("c", 100), ("d", 300)]);
        assert_eq!(
            plain_replicas(&calc(), 4, 100, "cpu", &refs, m, now()).unwrap(),
            (6, 150)
        );
    }

    #[test]
    fn pods_are_grouped_as_upstream() {
        let mut deleting = pod("deleting", "100m");
        deleting.metadata.deletion_timestamp = Some(Time(now()));
        let mut failed = pod("failed", "100m");
        failed.status.as_mut().unwrap().phase = Some("Failed".into());
        let mut pending = pod("pending", "100m");
        pending.status.as_mut().unwrap().phase = Some("Pending".into());
        let mut unready = pod("unready", "100m");
        unready.status.as_mut().unwrap().conditions = None;
        let mut young = pod("young", "100m");
        // Started a minute ago, ready 10 s ago: its 30 s window is not full yet.
        young.status.as_mut().unwrap().start_time = Some(Time(at(60).parse().unwrap()));
        young.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].last_transition_time =
            Some(Time(at(10).parse().unwrap()));
        let mut never_ready = pod("never-ready", "100m");
        {
            let st = never_ready.status.as_mut().unwrap();
            st.conditions.as_mut().unwrap()[0].status = "False".into();
            st.conditions.as_mut().unwrap()[0].last_transition_time =
                Some(Time(at(595).parse().unwrap()));
        }
        let ok = pod("ok", "100m");
        let missing = pod("missing", "100m");
        let pods = [
            &deleting,
            &failed,
            &pending,
            &unready,
            &young,
            &never_ready,
            &ok,
            &missing,
        ];
        let m = metrics(&[
            ("deleting", 1),
            ("failed", 1),
            ("pending", 1),
            ("unready", 1),
            ("young", 1),
            ("never-ready", 1),
            ("ok", 1),
        ]);
        let g = group_pods(&pods, &m, "cpu", &calc(), now());
        let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        assert_eq!(g.ready, 1);
        assert_eq!(g.ignored, set(&["deleting", "failed"]));
        assert_eq!(
            g.unready,
            set(&["pending", "unready", "young", "never-ready"])
        );
        assert_eq!(g.missing, set(&["missing"]));
        // Readiness matters for cpu only.
        let g = group_pods(&pods, &m, "memory", &calc(), now());
        assert_eq!(g.ready, 4);
        assert_eq!(g.unready, set(&["pending"]));
    }

    #[test]
    fn unready_pods_count_as_idle_on_a_scale_up_and_errors_are_upstreams() {
        let mut pending = pod("c", "100m");
        pending.status.as_mut().unwrap().phase = Some("Pending".into());
        let pods = [pod("a", "100m"), pod("b", "100m"), pending];
        let refs: Vec<&Pod> = pods.iter().collect();
        // 300% on two ready pods, the pending one idle: 200% of 3 -> 6.
        let m = metrics(&[("a", 300), ("b", 300)]);
        assert_eq!(
            resource_replicas(&calc(), 3, 100, CPU, &refs, m, now())
                .unwrap()
                .0,
            6
        );
        assert_eq!(
            resource_replicas(&calc(), 3, 100, CPU, &refs, metrics(&[]), now()),
            Err("did not receive metrics for targeted pods (pods might be unready)".into())
        );
        assert_eq!(
            resource_replicas(&calc(), 3, 100, CPU, &[], metrics(&[]), now()),
            Err("no pods returned by selector while calculating replica count".into())
        );
        let no_request: Pod = serde_json::from_value(json!({
            "metadata": {"name": "x"}, "spec": {"containers": [{"name": "c"}]},
            "status": {"phase": "Running"}}))
        .unwrap();
        assert_eq!(
            pod_requests(&[&no_request], None, "cpu"),
            Err("missing request for cpu in container c of Pod x".into())
        );
    }

    #[test]
    fn pod_metrics_lists_are_summed_per_pod_or_read_per_container() {
        let list = json!({"kind": "PodMetricsList", "items": [
            {"metadata": {"name": "a", "namespace": "ns"}, "timestamp": NOW, "window": "1m30s",
             "containers": [{"name": "c", "usage": {"cpu": "100m", "memory": "1Mi"}},
                            {"name": "s", "usage": {"cpu": "0.05"}}]},
            {"metadata": {"name": "b", "namespace": "ns"}, "timestamp": NOW, "window": "30s",
             "containers": [{"name": "c", "usage": {"memory": "1Mi"}}]},
            {"metadata": {"name": "empty", "namespace": "ns"}, "timestamp": NOW, "window": "30s",
             "containers": []}]});
        let (m, ts) = pod_metrics(&list, "cpu", None).unwrap();
        assert_eq!(ts, ms(now()));
        assert_eq!(m.keys().collect::<Vec<_>>(), vec!["a"]);
        assert_eq!(m["a"].value, 150);
        assert_eq!(m["a"].window, 90_000);
        let (m, _) = pod_metrics(&list, "memory", None).unwrap();
        assert_eq!(m.len(), 1);
        assert_eq!(
            pod_metrics(&list, "cpu", Some("c")).unwrap_err(),
            "failed to get container metrics: container c not present in metrics for pod ns/empty"
        );
        assert_eq!(
            pod_metrics(&json!({"items": []}), "cpu", None).unwrap_err(),
            "no metrics returned from resource metrics API"
        );
    }

    #[test]
    fn rules_without_behavior_bound_and_limit_scale_up() {
        // (current, desired, min, max) -> (replicas, reason)
        let cases = [
            ((2, 3, 1, 10), (3, "DesiredWithinRange")),
            ((2, 9, 1, 10), (4, "ScaleUpLimit")),
            ((1, 9, 1, 10), (4, "ScaleUpLimit")),
            ((5, 12, 1, 8), (8, "TooManyReplicas")),
            ((5, 0, 2, 8), (2, "TooFewReplicas")),
        ];
        for ((current, desired, min, max), want) in cases {
            let (r, reason, _) = bound_by_rules(current, desired, min, max);
            assert_eq!((r, reason), want, "{current} -> {desired}");
        }
    }

    fn default_behavior() -> Behavior {
        let hpa: HorizontalPodAutoscaler = serde_json::from_value(json!({
            "spec": {"maxReplicas": 100, "scaleTargetRef": {"kind": "Deployment", "name": "d"},
                     "behavior": {}}}))
        .unwrap();
        Behavior::of(&hpa, Duration::from_secs(300)).unwrap()
    }

    #[test]
    fn behavior_defaults_and_policy_limits_as_upstream() {
        let b = default_behavior();
        assert_eq!(b.scale_up.stabilization_window_seconds, Some(0));
        assert_eq!(b.scale_down.stabilization_window_seconds, Some(300));
        let n = ms(now());
        // Scale-up: the larger of +4 pods and +100%.
        assert_eq!(scale_up_limit(2, &[], &[], &b.scale_up, n), 6);
        assert_eq!(scale_up_limit(10, &[], &[], &b.scale_up, n), 20);
        // 10 pods added 5 s ago: the period started at 10, so 20 is still the limit
        // for a current 20.
        let added = [ScaleEvent {
            change: 10,
            at: n - 5_000,
            outdated: false,
        }];
        assert_eq!(scale_up_limit(20, &added, &[], &b.scale_up, n), 20);
        // Once the period has passed, the limit grows again.
        let old = [ScaleEvent {
            change: 10,
            at: n - 20_000,
            outdated: false,
        }];
        assert_eq!(scale_up_limit(20, &old, &[], &b.scale_up, n), 40);
        // Scale-down: 100% per 15 s; Min selects the smaller change.
        assert_eq!(scale_down_limit(10, &[], &[], &b.scale_down, n), 0);
        let slow = HPAScalingRules {
            select_policy: Some("Min".into()),
            policies: Some(vec![policy("Pods", 1, 60), policy("Percent", 50, 60)]),
            ..Default::default()
        };
        assert_eq!(scale_down_limit(10, &[], &[], &slow, n), 9);
        let disabled = HPAScalingRules {
            select_policy: Some("Disabled".into()),
            ..slow.clone()
        };
        assert_eq!(scale_down_limit(10, &[], &[], &disabled, n), 10);
        assert_eq!(scale_up_limit(10, &[], &[], &disabled, n), 10);

        let memory = Memory::default();
        let args = |current, desired| Normalization {
            scale_up: b.scale_up.clone(),
            scale_down: slow.clone(),
            min: 2,
            max: 12,
            current,
            desired,
        };
        assert_eq!(memory.bound_by_rate(&args(2, 20), n).0, 6);
        assert_eq!(memory.bound_by_rate(&args(2, 20), n).1, "ScaleUpLimit");
        assert_eq!(memory.bound_by_rate(&args(10, 20), n).1, "TooManyReplicas");
        assert_eq!(
            memory.bound_by_rate(&args(10, 1), n),
            (
                9,
                "ScaleDownLimit",
                "the desired replica count is decreasing faster than the maximum scale rate"
            )
        );
        assert_eq!(memory.bound_by_rate(&args(3, 1), n).1, "TooFewReplicas");
        assert_eq!(memory.bound_by_rate(&args(3, 2), n).1, "DesiredWithinRange");
        assert_eq!(memory.bound_by_rate(&args(5, 5), n).1, "DesiredWithinRange");
    }

    #[test]
    fn stabilization_keeps_the_highest_recent_recommendation() {
        let n = ms(now());
        let window = Duration::from_secs(300);
        let mut m = Memory::default();
        m.record_initial(5, n - 450_000);
        m.record_initial(9, n);
        assert_eq!(m.recommendations.len(), 1);
        // The 5 is older than the window: 3 stands, and takes the old slot.
        assert_eq!(m.stabilize(3, window, n - 100_000), 3);
        assert_eq!(m.recommendations.len(), 1);
        // 8 recorded, then 2 proposed within the window: 8 wins.
        assert_eq!(m.stabilize(8, window, n - 50_000), 8);
        assert_eq!(m.stabilize(2, window, n), 8);
        // Once the 8 is out of the window, the next highest recent one.
        assert_eq!(m.stabilize(1, window, n + 260_000), 2);

        // With behaviors: scale-down held by the window, scale-up at once (window 0).
        let b = default_behavior();
        let mut m = Memory::default();
        m.record_initial(10, n - 10_000);
        let args = |current, desired| Normalization {
            scale_up: b.scale_up.clone(),
            scale_down: b.scale_down.clone(),
            min: 1,
            max: 20,
            current,
            desired,
        };
        assert_eq!(m.stabilize_with_behaviors(&args(10, 4), n).0, 10);
        assert_eq!(
            m.stabilize_with_behaviors(&args(10, 4), n).1,
            "ScaleDownStabilized"
        );
        assert_eq!(m.stabilize_with_behaviors(&args(10, 15), n).0, 15);
    }

    fn hpa(min: i32, max: i32, behavior: Option<Value>) -> HorizontalPodAutoscaler {
        let mut spec = json!({"minReplicas": min, "maxReplicas": max,
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": 100}}}]});
        if let Some(b) = behavior {
            spec["behavior"] = b;
        }
        serde_json::from_value(
            json!({"metadata": {"name": "h", "namespace": "ns", "generation": 3},
            "spec": spec}),
        )
        .unwrap()
    }

    fn scale(replicas: i32) -> ScaleView {
        ScaleView {
            replicas,
            status_replicas: replicas,
            selector: Some("app=web".into()),
        }
    }

    fn list(usage: &[(&str, &str)]) -> Fetched {
        let items: Vec<Value> = usage
            .iter()
            .map(|(n, u)| {
                json!({"metadata": {"name": n, "namespace": "ns"}, "timestamp": NOW,
                "window": "30s", "containers": [{"name": "c", "usage": {"cpu": u}}]})
            })
            .collect();
        Some(Ok(json!({"items": items}))).into()
    }

    fn cond(s: &HorizontalPodAutoscalerStatus, t: &str) -> (String, String) {
        let (st, reason, _) = condition(s, t).unwrap_or_default();
        (st.to_string(), reason.to_string())
    }

    #[test]
    fn bounds_decide_before_metrics() {
        let cfg = HpaConfig::default();
        let no_metrics: Fetched = Some(Err("unable to fetch metrics from resource metrics API: the server could not find the requested resource (get pods.metrics.k8s.io)".into())).into();
        // Below min: to min, with no metrics at all.
        let h = hpa(2, 5, None);
        let mut m = Memory::default();
        let d = decide(&h, &scale(1), &[], &no_metrics, &mut m, &cfg, now());
        assert_eq!((d.rescale, d.desired), (true, 2));
        assert_eq!(
            d.reason,
            "Current number of replicas below Spec.MinReplicas"
        );
        let (st, events) = finish(&h, d, Some(Ok(())), &mut m, &cfg, now());
        assert_eq!(
            cond(&st, "AbleToScale"),
            ("True".into(), "SucceededRescale".into())
        );
        assert_eq!(
            condition(&st, "AbleToScale").unwrap().2,
            "the HPA controller was able to update the target scale to 2"
        );
        assert_eq!((st.current_replicas, st.desired_replicas), (Some(1), 2));
        assert_eq!(st.last_scale_time, Some(Time(now())));
        assert_eq!(st.observed_generation, Some(3));
        assert_eq!(
            events,
            vec![PlannedEvent {
                type_: EventType::Normal,
                reason: "SuccessfulRescale".into(),
                note: "New size: 2; reason: Current number of replicas below Spec.MinReplicas"
                    .into()
            }]
        );
        // Above max: to max.
        let d = decide(&h, &scale(9), &[], &no_metrics, &mut m, &cfg, now());
        assert_eq!((d.rescale, d.desired), (true, 5));
        assert_eq!(
            d.reason,
            "Current number of replicas above Spec.MaxReplicas"
        );
        // A failed write: AbleToScale False, nothing else changes.
        let (st, events) = finish(&h, d, Some(Err("boom".into())), &mut m, &cfg, now());
        assert_eq!(
            cond(&st, "AbleToScale"),
            ("False".into(), "FailedUpdateScale".into())
        );
        assert_eq!(events[0].reason, "FailedRescale");
        assert_eq!(
            events[0].note,
            "New size: 5; reason: Current number of replicas above Spec.MaxReplicas; error: boom"
        );
        assert_eq!(st.last_scale_time, None);
        // Zero: disabled.
        let d = decide(&h, &scale(0), &[], &no_metrics, &mut m, &cfg, now());
        assert!(!d.rescale);
        let (st, _) = finish(&h, d, None, &mut m, &cfg, now());
        assert_eq!(
            cond(&st, "ScalingActive"),
            ("False".into(), "ScalingDisabled".into())
        );
        // Go's omitempty: currentReplicas 0 is left out (desiredReplicas has none).
        assert_eq!((st.current_replicas, st.desired_replicas), (None, 0));
    }

    #[test]
    fn failing_metrics_report_upstreams_conditions_and_events() {
        let cfg = HpaConfig::default();
        let h = hpa(1, 5, None);
        let pods = [pod("a", "100m"), pod("b", "100m")];
        let refs: Vec<&Pod> = pods.iter().collect();
        let err = "unable to fetch metrics from resource metrics API: the server could not find the requested resource (get pods.metrics.k8s.io)";
        let mut m = Memory::default();
        let d = decide(
            &h,
            &scale(2),
            &refs,
            &Some(Err(err.into())).into(),
            &mut m,
            &cfg,
            now(),
        );
        assert!(!d.rescale);
        let (st, events) = finish(&h, d, None, &mut m, &cfg, now());
        assert_eq!(
            cond(&st, "AbleToScale"),
            ("True".into(), "SucceededGetScale".into())
        );
        assert_eq!(
            cond(&st, "ScalingActive"),
            ("False".into(), "FailedGetResourceMetric".into())
        );
        assert_eq!(
            condition(&st, "ScalingActive").unwrap().2,
            format!(
                "the HPA was unable to compute the replica count: failed to get cpu utilization: unable to get metrics for resource cpu: {err}"
            )
        );
        let reasons: Vec<&str> = events.iter().map(|e| e.reason.as_str()).collect();
        assert_eq!(
            reasons,
            vec!["FailedGetResourceMetric", "FailedComputeMetricsReplicas"]
        );
        assert_eq!(
            events[1].note,
            format!(
                "invalid metrics (1 invalid out of 1), first error is: failed to get cpu resource metric value: failed to get cpu utilization: unable to get metrics for resource cpu: {err}"
            )
        );
        assert_eq!(st.current_replicas, Some(2));
        assert_eq!(st.current_metrics.as_ref().map(Vec::len), Some(1));

        // A missing selector.
        let no_selector = ScaleView {
            replicas: 2,
            status_replicas: 2,
            selector: None,
        };
        let d = decide(
            &h,
            &no_selector,
            &refs,
            &Fetched::default(),
            &mut m,
            &cfg,
            now(),
        );
        assert_eq!(d.failed.as_deref(), Some("selector is required"));
        assert_eq!(
            cond(&d.status, "ScalingActive"),
            ("False".into(), "InvalidSelector".into())
        );

        // A custom metric the API did not answer.
        let mut pods_metric = h.clone();
        pods_metric.spec.as_mut().unwrap().metrics = Some(vec![
            serde_json::from_value(json!(
            {"type": "Pods", "pods": {"metric": {"name": "qps"},
             "target": {"type": "AverageValue", "averageValue": "1"}}}))
            .unwrap(),
        ]);
        let no_answer = Fetched::from(Some(Err(err.into())));
        let d = decide(
            &pods_metric,
            &scale(2),
            &refs,
            &no_answer,
            &mut m,
            &cfg,
            now(),
        );
        assert_eq!(
            cond(&d.status, "ScalingActive"),
            ("False".into(), "FailedGetPodsMetric".into())
        );
    }

    #[test]
    fn metrics_scale_up_within_limits_and_report_the_utilization() {
        let cfg = HpaConfig::default();
        let pods = [pod("a", "100m"), pod("b", "100m"), pod("other", "100m")];
        let mut other = pods[2].clone();
        other.metadata.labels = Some([("app".to_string(), "db".to_string())].into());
        let refs: Vec<&Pod> = vec![&pods[0], &pods[1], &other];
        // Twice the request on both pods: 2 -> 4 (the other pod is not selected).
        let h = hpa(1, 10, None);
        let mut m = Memory::default();
        let metrics = list(&[("a", "200m"), ("b", "200m"), ("other", "1")]);
        let d = decide(&h, &scale(2), &refs, &metrics, &mut m, &cfg, now());
        assert_eq!((d.rescale, d.desired), (true, 4));
        assert_eq!(
            d.reason,
            "cpu resource utilization (percentage of request) above target"
        );
        let (st, _) = finish(&h, d, Some(Ok(())), &mut m, &cfg, now());
        assert_eq!(
            cond(&st, "ScalingActive"),
            ("True".into(), "ValidMetricFound".into())
        );
        assert_eq!(
            condition(&st, "ScalingActive").unwrap().2,
            "the HPA was able to successfully calculate a replica count from cpu resource utilization (percentage of request)"
        );
        assert_eq!(
            cond(&st, "ScalingLimited"),
            ("False".into(), "DesiredWithinRange".into())
        );
        let current = &st.current_metrics.as_ref().unwrap()[0];
        assert_eq!(current.type_, "Resource");
        let r = current.resource.as_ref().unwrap();
        assert_eq!(
            (r.name.as_str(), r.current.average_utilization),
            ("cpu", Some(200))
        );
        assert_eq!(r.current.average_value, Some(Quantity("200m".into())));
        assert_eq!(st.desired_replicas, 4);

        // Ten times the request: limited to twice the current count without behavior...
        let metrics = list(&[("a", "1"), ("b", "1")]);
        let d = decide(
            &h,
            &scale(2),
            &refs,
            &metrics,
            &mut Memory::default(),
            &cfg,
            now(),
        );
        assert_eq!(d.desired, 4);
        assert_eq!(
            cond(&d.status, "ScalingLimited"),
            ("True".into(), "ScaleUpLimit".into())
        );
        // ... and by the default policies (max of +4 pods, +100%) with one.
        let hb = hpa(1, 10, Some(json!({})));
        let d = decide(
            &hb,
            &scale(2),
            &refs,
            &metrics,
            &mut Memory::default(),
            &cfg,
            now(),
        );
        assert_eq!(d.desired, 6);
        // Within the tolerance: nothing to do.
        let metrics = list(&[("a", "105m"), ("b", "105m")]);
        let d = decide(
            &h,
            &scale(2),
            &refs,
            &metrics,
            &mut Memory::default(),
            &cfg,
            now(),
        );
        assert!(!d.rescale);
        assert_eq!(
            cond(&d.status, "AbleToScale"),
            ("True".into(), "ReadyForNewScale".into())
        );
    }

    #[test]
    fn container_resource_metrics_read_one_container() {
        let cfg = HpaConfig::default();
        let pods = [pod("a", "100m"), pod("b", "100m")];
        let refs: Vec<&Pod> = pods.iter().collect();
        let mut h = hpa(1, 10, None);
        h.spec.as_mut().unwrap().metrics = Some(vec![
            serde_json::from_value(json!(
            {"type": "ContainerResource", "containerResource": {"name": "cpu", "container": "c",
             "target": {"type": "Utilization", "averageUtilization": 50}}}))
            .unwrap(),
        ]);
        let metrics = list(&[("a", "100m"), ("b", "100m")]);
        let d = decide(
            &h,
            &scale(2),
            &refs,
            &metrics,
            &mut Memory::default(),
            &cfg,
            now(),
        );
        assert_eq!(d.desired, 4);
        assert_eq!(
            d.reason,
            "cpu container resource utilization (percentage of request) above target"
        );
        let status = &d.metrics.as_ref().unwrap()[0];
        assert_eq!(status.type_, "ContainerResource");
        let c = status.container_resource.as_ref().unwrap();
        assert_eq!(
            (c.container.as_str(), c.current.average_utilization),
            ("c", Some(100))
        );
        // A container the metrics do not have: FailedGetContainerResourceMetric.
        h.spec.as_mut().unwrap().metrics.as_mut().unwrap()[0]
            .container_resource
            .as_mut()
            .unwrap()
            .container = "sidecar".into();
        let d = decide(
            &h,
            &scale(2),
            &refs,
            &metrics,
            &mut Memory::default(),
            &cfg,
            now(),
        );
        assert_eq!(
            cond(&d.status, "ScalingActive"),
            ("False".into(), "FailedGetContainerResourceMetric".into())
        );
        assert!(!d.rescale);
    }

    #[test]
    fn scale_down_waits_for_the_stabilization_window() {
        let cfg = HpaConfig::default();
        let pods = [
            pod("a", "100m"),
            pod("b", "100m"),
            pod("c", "100m"),
            pod("d", "100m"),
        ];
        let refs: Vec<&Pod> = pods.iter().collect();
        let low = list(&[("a", "10m"), ("b", "10m"), ("c", "10m"), ("d", "10m")]);
        for behavior in [None, Some(json!({}))] {
            let h = hpa(1, 10, behavior);
            let mut m = Memory::default();
            // The first look records the current 4: the low proposal is held.
            let d = decide(&h, &scale(4), &refs, &low, &mut m, &cfg, now());
            assert!(!d.rescale);
            assert_eq!(
                cond(&d.status, "AbleToScale"),
                ("True".into(), "ScaleDownStabilized".into())
            );
            // Five minutes later the 4 is out of the window: down to 1.
            let later = Timestamp::from_millisecond(ms(now()) + 301_000).unwrap();
            let d = decide(&h, &scale(4), &refs, &low, &mut m, &cfg, later);
            assert_eq!((d.rescale, d.desired), (true, 1));
            assert_eq!(d.reason, "All metrics below target");
        }
    }

    #[test]
    fn conditions_move_their_transition_time_only_on_a_status_change() {
        let t0 = now();
        let t1 = Timestamp::from_millisecond(ms(t0) + 1000).unwrap();
        let mut c = Vec::new();
        set_condition(&mut c, "AbleToScale", "True", "A", "a".into(), t0);
        set_condition(&mut c, "ScalingActive", "False", "B", "b".into(), t0);
        set_condition(&mut c, "AbleToScale", "True", "C", "c".into(), t1);
        assert_eq!(c[0].last_transition_time, Some(Time(t0)));
        assert_eq!(c[0].reason.as_deref(), Some("C"));
        set_condition(&mut c, "AbleToScale", "False", "D", "d".into(), t1);
        assert_eq!(c[0].last_transition_time, Some(Time(t1)));
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn custom_and_external_metric_answers_are_read_as_upstream() {
        let list = json!({"kind": "MetricValueList", "items": [
            {"describedObject": {"kind": "Pod", "name": "a"}, "metric": {"name": "qps"},
             "timestamp": NOW, "windowSeconds": 30, "value": "1500m"},
            {"describedObject": {"kind": "Pod", "name": "b"}, "metric": {"name": "qps"},
             "timestamp": NOW, "value": "2"}]});
        let m = custom_pod_metrics(&list).unwrap();
        assert_eq!(
            (m["a"].value, m["a"].window, m["a"].timestamp),
            (1500, 30_000, ms(now()))
        );
        // No window: upstream's default minute.
        assert_eq!((m["b"].value, m["b"].window), (2000, 60_000));
        let empty = json!({"items": []});
        assert_eq!(
            custom_pod_metrics(&empty).unwrap_err(),
            "no metrics returned from custom metrics API"
        );
        // One object: exactly one item.
        let one = json!({"items": [{"describedObject": {"kind": "Service", "name": "s"},
            "value": "42", "timestamp": NOW}]});
        assert_eq!(object_metric_value(&one), Ok(42_000));
        assert_eq!(
            object_metric_value(&list).unwrap_err(),
            "unable to fetch metrics from custom metrics API: the custom metrics API server returned 2 results when we asked for exactly one"
        );
        // External values, each in thousandths (summed by the calculation).
        let ext = json!({"kind": "ExternalMetricValueList", "items": [
            {"metricName": "queue", "value": "10", "timestamp": NOW},
            {"metricName": "queue", "value": "250m", "timestamp": NOW}]});
        assert_eq!(external_metric_values(&ext), Ok(vec![10_000, 250]));
        assert_eq!(
            external_metric_values(&empty).unwrap_err(),
            "no metrics returned from external metrics API"
        );
    }

    #[test]
    fn metrics_api_paths_and_selectors() {
        let sel: LabelSelector = serde_json::from_value(json!({
            "matchLabels": {"queue": "jobs", "env": "prod"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["b", "a"]}]}))
        .unwrap();
        assert_eq!(
            metric_selector(Some(&sel)).unwrap(),
            "env=prod,queue=jobs,tier in (a,b)"
        );
        assert_eq!(metric_selector(None).unwrap(), "");
        assert_eq!(
            go_label_selector(Some(&sel)),
            "&LabelSelector{MatchLabels:map[string]string{env: prod,queue: jobs,},\
             MatchExpressions:[]LabelSelectorRequirement{LabelSelectorRequirement{Key:tier,Operator:In,Values:[b a],},},}"
        );
        assert_eq!(go_label_selector(None), "nil");
        assert_eq!(
            custom_pods_metric_path("v1beta2", "ns", "qps", "app=web", ""),
            "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ns/pods/*/qps?labelSelector=app%3Dweb"
        );
        assert_eq!(
            custom_pods_metric_path("v1beta1", "ns", "qps", "app=web", "verb=GET"),
            "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ns/pods/*/qps?labelSelector=app%3Dweb&metricLabelSelector=verb%3DGET"
        );
        assert_eq!(
            custom_object_metric_path("v1beta2", "ns", "deployments.apps", "web", "hits", ""),
            "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ns/deployments.apps/web/hits"
        );
        assert_eq!(
            custom_object_metric_path("v1beta2", "ns", "namespaces", "ns", "hits", "a=b"),
            "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ns/metrics/hits?metricLabelSelector=a%3Db"
        );
        assert_eq!(
            external_metric_path("ns", "queue", "queue=jobs"),
            "/apis/external.metrics.k8s.io/v1beta1/namespaces/ns/queue?labelSelector=queue%3Djobs"
        );
    }

    #[test]
    fn pods_metrics_use_the_plain_calculation_without_readiness() {
        // A pod with no Ready condition is unready for cpu only.
        let mut not_ready = pod("c", "100m");
        not_ready.status.as_mut().unwrap().conditions = None;
        let pods = [pod("a", "100m"), pod("b", "100m"), not_ready];
        let refs: Vec<&Pod> = pods.iter().collect();
        // (per-pod values in thousandths, target) -> (replicas, average)
        type Case<'a> = (&'a [(&'a str, i64)], i64, (i32, i64));
        let cases: [Case<'_>; 6] = [
            (&[("a", 2000), ("b", 2000), ("c", 2000)], 1000, (6, 2000)),
            (&[("a", 1050), ("b", 1000), ("c", 950)], 1000, (3, 1000)),
            (&[("a", 500), ("b", 500), ("c", 500)], 1000, (2, 500)),
            // c missing on a scale-up: taken as 0 -> 2000 on average over 3 pods -> 6.
            (&[("a", 3000), ("b", 3000)], 1000, (6, 3000)),
            // c missing at exactly the target: left out, nothing changes.
            (&[("a", 1000), ("b", 1000)], 1000, (3, 1000)),
            // c missing on a scale-down: taken as the target -> 1500 / 3 -> 2.
            (&[("a", 250), ("b", 250)], 1000, (2, 250)),
        ];
        for (values, target, want) in cases {
            let got = plain_replicas(&calc(), 3, target, "", &refs, metrics(values), now());
            assert_eq!(got, Ok(want), "{values:?}");
        }
    }

    #[test]
    fn object_and_external_replicas_as_upstream() {
        let mut pending = pod("c", "100m");
        pending.status.as_mut().unwrap().phase = Some("Pending".into());
        let pods = [pod("a", "100m"), pod("b", "100m"), pending];
        let refs: Vec<&Pod> = pods.iter().collect();
        // Value targets: (current, target, usage) -> replicas, over 2 ready pods.
        let cases = [
            ((3, 1000, 1050), 3), // within the tolerance
            ((3, 1000, 3000), 6), // 3x the target times 2 ready pods
            ((3, 1000, 500), 1),
            ((0, 1000, 2500), 3), // from zero: the ratio alone
            ((0, 1000, 0), 0),
        ];
        for ((current, target, usage), want) in cases {
            assert_eq!(
                value_replicas(&calc(), current, target, usage, &refs),
                Ok(want),
                "{current} {target} {usage}"
            );
        }
        assert_eq!(
            value_replicas(&calc(), 2, 1000, 3000, &[]),
            Err("unable to calculate ready pods: no pods returned by selector while calculating replica count".into())
        );
        // AverageValue targets: (status replicas, target per pod, usage) ->
        // (replicas, usage per pod).
        let cases = [
            ((2, 1000, 2100), (2, 1050)), // within the tolerance
            ((2, 1000, 5000), (5, 2500)),
            ((4, 500, 1000), (2, 250)),
            ((3, 1000, 1000), (1, 334)),
        ];
        for ((status, target, usage), want) in cases {
            assert_eq!(
                per_pod_replicas(&calc(), status, target, usage),
                want,
                "{status} {target} {usage}"
            );
        }
    }

    fn with_metrics(h: &HorizontalPodAutoscaler, specs: Value) -> HorizontalPodAutoscaler {
        let mut h = h.clone();
        h.spec.as_mut().unwrap().metrics = Some(serde_json::from_value(specs).unwrap());
        h
    }

    fn answers(
        resource: Fetched,
        specs: &[(usize, std::result::Result<Value, String>)],
    ) -> Fetched {
        Fetched {
            resource: resource.resource,
            specs: specs.iter().cloned().collect(),
        }
    }

    #[test]
    fn custom_and_external_metrics_propose_and_report_status() {
        let cfg = HpaConfig::default();
        let pods = [pod("a", "100m"), pod("b", "100m")];
        let refs: Vec<&Pod> = pods.iter().collect();
        let h = with_metrics(
            &hpa(1, 10, None),
            json!([
                {"type": "Pods", "pods": {"metric": {"name": "qps"},
                    "target": {"type": "AverageValue", "averageValue": "10"}}},
                {"type": "Object", "object": {"metric": {"name": "hits"},
                    "describedObject": {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "name": "main"},
                    "target": {"type": "Value", "value": "100"}}},
                {"type": "External", "external": {
                    "metric": {"name": "queue", "selector": {"matchLabels": {"q": "jobs"}}},
                    "target": {"type": "AverageValue", "averageValue": "5"}}}
            ]),
        );
        let item = |name: &str, v: &str| json!({"describedObject": {"kind": "Pod", "name": name}, "value": v, "timestamp": NOW});
        let fetched = answers(
            Fetched::default(),
            &[
                (0, Ok(json!({"items": [item("a", "15"), item("b", "15")]}))),
                (1, Ok(json!({"items": [item("main", "100")]}))),
                (2, Ok(json!({"items": [{"value": "12"}, {"value": "8"}]}))),
            ],
        );
        // qps 15 of 10 -> 3; hits at the target -> 2; queue 20 / 5 -> 4: 4 wins.
        let d = decide(
            &h,
            &scale(2),
            &refs,
            &fetched,
            &mut Memory::default(),
            &cfg,
            now(),
        );
        assert_eq!((d.rescale, d.desired), (true, 4));
        let name = "external metric queue(&LabelSelector{MatchLabels:map[string]string{q: jobs,},MatchExpressions:[]LabelSelectorRequirement{},})";
        assert_eq!(d.reason, format!("{name} above target"));
        assert_eq!(
            condition(&d.status, "ScalingActive").unwrap().2,
            format!("the HPA was able to successfully calculate a replica count from {name}")
        );
        let st = d.metrics.clone().unwrap();
        let p = st[0].pods.as_ref().unwrap();
        assert_eq!(
            (st[0].type_.as_str(), p.metric.name.as_str()),
            ("Pods", "qps")
        );
        assert_eq!(p.current.average_value, Some(Quantity("15".into())));
        let o = st[1].object.as_ref().unwrap();
        assert_eq!(st[1].type_, "Object");
        assert_eq!(
            (
                o.described_object.kind.as_str(),
                o.described_object.name.as_str()
            ),
            ("Ingress", "main")
        );
        assert_eq!(o.current.value, Some(Quantity("100".into())));
        let e = st[2].external.as_ref().unwrap();
        assert_eq!(st[2].type_, "External");
        assert_eq!(e.current.average_value, Some(Quantity("10".into())));
        assert_eq!(
            e.metric
                .selector
                .as_ref()
                .and_then(|s| s.match_labels.clone()),
            Some([("q".to_string(), "jobs".to_string())].into())
        );

        // The Pods metric alone: 15 of 10 on two pods -> 3.
        let only_pods = with_metrics(
            &h,
            json!([h.spec.as_ref().unwrap().metrics.as_ref().unwrap()[0]]),
        );
        let d = decide(
            &only_pods,
            &scale(2),
            &refs,
            &fetched,
            &mut Memory::default(),
            &cfg,
            now(),
        );
        assert_eq!(
            (d.desired, d.reason.as_str()),
            (3, "pods metric qps above target")
        );
    }

    #[test]
    fn custom_and_external_metric_failures_report_upstreams_messages() {
        let cfg = HpaConfig::default();
        let pods = [pod("a", "100m"), pod("b", "100m")];
        let refs: Vec<&Pod> = pods.iter().collect();
        let fetch_err = "unable to fetch metrics from custom metrics API: no custom metrics API (custom.metrics.k8s.io) registered";
        let ext_err = "unable to fetch metrics from external metrics API: the server could not find the requested resource (get queue.external.metrics.k8s.io)";
        // (spec, answer) -> (reason, condition message, returned error)
        let cases = [
            (
                json!({"type": "Pods", "pods": {"metric": {"name": "qps"},
                    "target": {"type": "AverageValue", "averageValue": "10"}}}),
                Err(fetch_err.to_string()),
                "FailedGetPodsMetric",
                format!("unable to get metric qps: {fetch_err}"),
                format!("failed to get pods metric value: unable to get metric qps: {fetch_err}"),
            ),
            (
                json!({"type": "Object", "object": {"metric": {"name": "hits"},
                    "describedObject": {"apiVersion": "v1", "kind": "Service", "name": "svc"},
                    "target": {"type": "Value", "value": "100"}}}),
                Err(fetch_err.to_string()),
                "FailedGetObjectMetric",
                format!("unable to get metric hits: Service on ns svc/{fetch_err}"),
                format!("failed to get object metric value: unable to get metric hits: Service on ns svc/{fetch_err}"),
            ),
            (
                json!({"type": "Object", "object": {"metric": {"name": "hits"},
                    "describedObject": {"apiVersion": "v1", "kind": "Service", "name": "svc"},
                    "target": {"type": "AverageValue", "averageValue": "100"}}}),
                Err(fetch_err.to_string()),
                "FailedGetObjectMetric",
                format!("unable to get metric hits: Service on ns svc/{fetch_err}"),
                format!("failed to get object metric value: failed to get hits object metric: unable to get metric hits: Service on ns svc/{fetch_err}"),
            ),
            (
                json!({"type": "External", "external": {"metric": {"name": "queue"},
                    "target": {"type": "Value", "value": "10"}}}),
                Err(ext_err.to_string()),
                "FailedGetExternalMetric",
                format!("unable to get external metric ns/queue/nil: {ext_err}"),
                format!("failed to get queue external metric value: failed to get external metric queue: unable to get external metric ns/queue/nil: {ext_err}"),
            ),
            (
                json!({"type": "External", "external": {"metric": {"name": "queue"},
                    "target": {"type": "Utilization", "averageUtilization": 10}}}),
                Ok(json!({"items": [{"value": "1"}]})),
                "FailedGetExternalMetric",
                "invalid external metric source: neither a value target nor an average value target was set".to_string(),
                "failed to get queue external metric value: invalid external metric source: neither a value target nor an average value target was set".to_string(),
            ),
        ];
        for (spec, answer, reason, message, error) in cases {
            let h = with_metrics(&hpa(1, 10, None), json!([spec]));
            let fetched = answers(Fetched::default(), &[(0, answer)]);
            let mut m = Memory::default();
            let d = decide(&h, &scale(2), &refs, &fetched, &mut m, &cfg, now());
            assert!(!d.rescale, "{reason}");
            assert_eq!(
                condition(&d.status, "ScalingActive").unwrap(),
                (
                    "False",
                    reason,
                    format!("the HPA was unable to compute the replica count: {message}").as_str()
                )
            );
            assert_eq!(d.events[0].reason, reason);
            assert_eq!(d.events[0].note, message);
            assert_eq!(
                d.failed,
                Some(format!(
                    "invalid metrics (1 invalid out of 1), first error is: {error}"
                ))
            );
        }
        // A failed custom metric next to a working cpu one that scales up: the cpu
        // proposal stands.
        let h = with_metrics(
            &hpa(1, 10, None),
            json!([
                {"type": "Resource", "resource": {"name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": 100}}},
                {"type": "Pods", "pods": {"metric": {"name": "qps"},
                    "target": {"type": "AverageValue", "averageValue": "10"}}}
            ]),
        );
        let fetched = answers(
            list(&[("a", "200m"), ("b", "200m")]),
            &[(1, Err(fetch_err.to_string()))],
        );
        let d = decide(
            &h,
            &scale(2),
            &refs,
            &fetched,
            &mut Memory::default(),
            &cfg,
            now(),
        );
        assert_eq!((d.rescale, d.desired), (true, 4));
        assert_eq!(d.events[0].reason, "FailedGetPodsMetric");
        assert_eq!(d.metrics.as_ref().unwrap()[1], MetricStatus::default());
    }

    #[test]
    fn targets_and_paths() {
        assert_eq!(
            parse_group_version("apps/v1").unwrap(),
            ("apps".into(), "v1".into())
        );
        assert_eq!(
            parse_group_version("v1").unwrap(),
            (String::new(), "v1".into())
        );
        assert_eq!(
            parse_group_version("a/b/c").unwrap_err(),
            "unexpected GroupVersion string: a/b/c"
        );
        assert_eq!(
            scale_path("apps", "v1", "deployments", "ns", "web"),
            "/apis/apps/v1/namespaces/ns/deployments/web/scale"
        );
        assert_eq!(
            scale_path("", "v1", "replicationcontrollers", "ns", "rc"),
            "/api/v1/namespaces/ns/replicationcontrollers/rc/scale"
        );
        assert_eq!(
            builtin_scalable("apps", "StatefulSet"),
            Some(("v1", "statefulsets"))
        );
        assert_eq!(builtin_scalable("apps", "Widget"), None);
        assert_eq!(
            encode_query("app=web,tier in (a,b)"),
            "app%3Dweb%2Ctier%20in%20%28a%2Cb%29"
        );
        assert_eq!(parse_go_duration_ms("1m30s"), 90_000);
        assert_eq!(parse_go_duration_ms("250ms"), 250);
    }
}
