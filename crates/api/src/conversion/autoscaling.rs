//! `autoscaling/v1` HorizontalPodAutoscalers shown from the stored `autoscaling/v2`
//! form, and written back into it: upstream's `pkg/apis/autoscaling/v1` conversion to
//! and from the internal type, which has the v2 shape.
//!
//! A v1 HPA can only say "scale on this CPU utilization". Everything else a v2 HPA
//! holds (other metrics, the current value of every metric, conditions, scaling
//! behavior) rides along in four `autoscaling.alpha.kubernetes.io/...` annotations on
//! the v1 object, so that a client that reads v1 and writes it back loses nothing. The
//! annotation text is what upstream writes: JSON of the old v1 metric types (Go still
//! has them; k8s-openapi does not, hence the private mirrors below) and, for behavior,
//! Go's encoding of the internal struct, whose members carry Go field names. Reading
//! an annotation follows Go's `encoding/json`: member names match regardless of case,
//! unknown members are skipped, and an annotation that does not parse is ignored. The
//! annotations never reach the stored v2 object.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::autoscaling::{v1, v2};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta, Time,
};
use serde::de::value::{MapDeserializer, SeqDeserializer};
use serde::de::{self, DeserializeOwned, IntoDeserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

pub const METRIC_SPECS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/metrics";
pub const METRIC_STATUSES_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/current-metrics";
pub const CONDITIONS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/conditions";
pub const BEHAVIOR_SPECS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/behavior";

/// The annotations that carry status in the v1 form (moved with the status half of a write).
pub const STATUS_ANNOTATIONS: [&str; 2] = [METRIC_STATUSES_ANNOTATION, CONDITIONS_ANNOTATION];

pub const ROUND_TRIP_ANNOTATIONS: [&str; 4] = [
    METRIC_SPECS_ANNOTATION,
    BEHAVIOR_SPECS_ANNOTATION,
    METRIC_STATUSES_ANNOTATION,
    CONDITIONS_ANNOTATION,
];

/// v1 used to leave the target to the controller, which assumed 80% CPU; since v2
/// spells every metric out, upstream writes that assumption in when converting.
const DEFAULT_CPU_UTILIZATION: i32 = 80;

const CPU: &str = "cpu";
const RESOURCE_METRIC: &str = "Resource";

/// Upstream's `DropRoundTripHorizontalPodAutoscalerAnnotations`: removes the four
/// round-trip annotations. A map that only held them goes away entirely, as Go's
/// `omitempty` would not print it.
pub fn drop_round_trip_annotations(meta: &mut ObjectMeta) {
    let Some(annotations) = meta.annotations.as_mut() else {
        return;
    };
    let before = annotations.len();
    for key in ROUND_TRIP_ANNOTATIONS {
        annotations.remove(key);
    }
    if annotations.len() != before && annotations.is_empty() {
        meta.annotations = None;
    }
}

/// An `autoscaling/v2` HPA as `autoscaling/v1` shows it.
pub fn hpa_v2_to_v1(hpa: v2::HorizontalPodAutoscaler) -> v1::HorizontalPodAutoscaler {
    let mut metadata = hpa.metadata;
    // Stale copies must not survive next to the ones produced below.
    drop_round_trip_annotations(&mut metadata);
    let mut produced: Vec<(&str, Option<String>)> = Vec::new();

    let spec = hpa.spec.map(|spec| {
        let metrics = spec.metrics.unwrap_or_default();
        let target_cpu = metrics.iter().find_map(cpu_target_utilization);
        let others: Vec<GoMetricSpec> = metrics
            .into_iter()
            .filter(|m| cpu_target_utilization(m).is_none())
            .map(metric_spec_to_go)
            .collect();
        if !others.is_empty() {
            produced.push((METRIC_SPECS_ANNOTATION, go_json(&others)));
        }
        if let Some(behavior) = spec.behavior {
            produced.push((
                BEHAVIOR_SPECS_ANNOTATION,
                go_json(&behavior_to_go(behavior)),
            ));
        }
        v1::HorizontalPodAutoscalerSpec {
            scale_target_ref: v1::CrossVersionObjectReference {
                api_version: spec.scale_target_ref.api_version,
                kind: spec.scale_target_ref.kind,
                name: spec.scale_target_ref.name,
            },
            min_replicas: spec.min_replicas,
            max_replicas: spec.max_replicas,
            target_cpu_utilization_percentage: target_cpu,
        }
    });

    let status = hpa.status.map(|status| {
        let metrics = status.current_metrics.unwrap_or_default();
        // Upstream does not stop at the first match here, so the last one wins.
        let current_cpu = metrics.iter().rev().find_map(cpu_current_utilization);
        // The CPU entry is kept too: its raw value has no v1 field.
        if !metrics.is_empty() {
            let all: Vec<GoMetricStatus> = metrics.into_iter().map(metric_status_to_go).collect();
            produced.push((METRIC_STATUSES_ANNOTATION, go_json(&all)));
        }
        let conditions = status.conditions.unwrap_or_default();
        if !conditions.is_empty() {
            let all: Vec<GoCondition> = conditions.into_iter().map(condition_to_go).collect();
            produced.push((CONDITIONS_ANNOTATION, go_json(&all)));
        }
        v1::HorizontalPodAutoscalerStatus {
            observed_generation: status.observed_generation,
            last_scale_time: status.last_scale_time,
            current_replicas: status.current_replicas.unwrap_or(0),
            desired_replicas: status.desired_replicas,
            current_cpu_utilization_percentage: current_cpu,
        }
    });

    for (key, text) in produced {
        if let Some(text) = text {
            metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(key.to_owned(), text);
        }
    }

    v1::HorizontalPodAutoscaler {
        metadata,
        spec,
        status,
    }
}

/// An `autoscaling/v1` HPA in its `autoscaling/v2` (stored) form.
///
/// A missing spec or status stays missing unless an annotation has something to put
/// in it; Go has no missing structs, but v1 objects without a spec are invalid anyway.
pub fn hpa_v1_to_v2(hpa: v1::HorizontalPodAutoscaler) -> v2::HorizontalPodAutoscaler {
    let mut metadata = hpa.metadata;
    let mut spec = hpa.spec.map(spec_to_v2);
    let mut status = hpa.status.map(status_to_v2);

    let annotation = |key: &str| {
        metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .map(String::as_str)
    };
    let other_metrics = annotation(METRIC_SPECS_ANNOTATION)
        .and_then(parse_go::<Option<Vec<GoMetricSpec>>>)
        .map(|m| m.unwrap_or_default());
    let behavior = annotation(BEHAVIOR_SPECS_ANNOTATION).and_then(parse_go::<GoBehavior>);
    let current_metrics = annotation(METRIC_STATUSES_ANNOTATION)
        .and_then(parse_go::<Option<Vec<GoMetricStatus>>>)
        .map(|m| m.unwrap_or_default());
    let conditions = annotation(CONDITIONS_ANNOTATION)
        .and_then(parse_go::<Option<Vec<GoCondition>>>)
        .map(|c| c.unwrap_or_default());

    if let Some(others) = other_metrics
        && let Some(spec) = section(&mut spec, !others.is_empty())
    {
        // The CPU target from the spec field goes after the annotation's metrics.
        let cpu = spec.metrics.take().unwrap_or_default();
        let metrics: Vec<_> = others
            .into_iter()
            .map(metric_spec_from_go)
            .chain(cpu)
            .collect();
        spec.metrics = (!metrics.is_empty()).then_some(metrics);
    }

    // Upstream keeps the annotation's behavior only when it says something.
    if let Some(behavior) = behavior
        && (behavior.scale_up.is_some() || behavior.scale_down.is_some())
        && let Some(spec) = section(&mut spec, true)
    {
        spec.behavior = Some(behavior_from_go(behavior));
    }

    // These replace what currentCPUUtilizationPercentage gave: they hold the raw
    // values as well.
    if let Some(metrics) = current_metrics
        && let Some(status) = section(&mut status, !metrics.is_empty())
    {
        let metrics: Vec<_> = metrics.into_iter().map(metric_status_from_go).collect();
        status.current_metrics = (!metrics.is_empty()).then_some(metrics);
    }

    if let Some(spec) = spec.as_mut()
        && spec.metrics.as_ref().is_none_or(Vec::is_empty)
    {
        spec.metrics = Some(vec![cpu_utilization_metric(DEFAULT_CPU_UTILIZATION)]);
    }

    if let Some(conditions) = conditions
        && let Some(status) = section(&mut status, !conditions.is_empty())
    {
        let conditions: Vec<_> = conditions.into_iter().map(condition_from_go).collect();
        status.conditions = (!conditions.is_empty()).then_some(conditions);
    }

    drop_round_trip_annotations(&mut metadata);

    v2::HorizontalPodAutoscaler {
        metadata,
        spec,
        status,
    }
}

/// The part to write an annotation's content into; made when missing only if the
/// content is not empty.
fn section<T: Default>(part: &mut Option<T>, create: bool) -> Option<&mut T> {
    if create {
        Some(part.get_or_insert_with(T::default))
    } else {
        part.as_mut()
    }
}

fn spec_to_v2(spec: v1::HorizontalPodAutoscalerSpec) -> v2::HorizontalPodAutoscalerSpec {
    v2::HorizontalPodAutoscalerSpec {
        scale_target_ref: v2::CrossVersionObjectReference {
            api_version: spec.scale_target_ref.api_version,
            kind: spec.scale_target_ref.kind,
            name: spec.scale_target_ref.name,
        },
        min_replicas: spec.min_replicas,
        max_replicas: spec.max_replicas,
        metrics: spec
            .target_cpu_utilization_percentage
            .map(|n| vec![cpu_utilization_metric(n)]),
        behavior: None,
    }
}

fn status_to_v2(status: v1::HorizontalPodAutoscalerStatus) -> v2::HorizontalPodAutoscalerStatus {
    v2::HorizontalPodAutoscalerStatus {
        observed_generation: status.observed_generation,
        last_scale_time: status.last_scale_time,
        // v2's currentReplicas is omitempty in Go: a zero is not printed.
        current_replicas: (status.current_replicas != 0).then_some(status.current_replicas),
        desired_replicas: status.desired_replicas,
        current_metrics: status.current_cpu_utilization_percentage.map(|n| {
            vec![v2::MetricStatus {
                type_: RESOURCE_METRIC.into(),
                resource: Some(v2::ResourceMetricStatus {
                    name: CPU.into(),
                    current: v2::MetricValueStatus {
                        average_utilization: Some(n),
                        ..Default::default()
                    },
                }),
                ..Default::default()
            }]
        }),
        conditions: None,
    }
}

fn cpu_utilization_metric(percent: i32) -> v2::MetricSpec {
    v2::MetricSpec {
        type_: RESOURCE_METRIC.into(),
        resource: Some(v2::ResourceMetricSource {
            name: CPU.into(),
            target: v2::MetricTarget {
                type_: "Utilization".into(),
                average_utilization: Some(percent),
                ..Default::default()
            },
        }),
        ..Default::default()
    }
}

/// The utilization of a CPU resource metric, the one kind of target v1 has a field for.
fn cpu_target_utilization(metric: &v2::MetricSpec) -> Option<i32> {
    let resource = metric.resource.as_ref()?;
    if metric.type_ != RESOURCE_METRIC || resource.name != CPU {
        return None;
    }
    resource.target.average_utilization
}

fn cpu_current_utilization(metric: &v2::MetricStatus) -> Option<i32> {
    let resource = metric.resource.as_ref()?;
    if metric.type_ != RESOURCE_METRIC || resource.name != CPU {
        return None;
    }
    resource.current.average_utilization
}

// ---------------------------------------------------------------------------------
// The annotation forms: Go's k8s.io/api/autoscaling/v1 metric and condition types, and
// the internal behavior type. Member order is Go's declaration order, which is the
// order json.Marshal prints. `default` everywhere because Go leaves a missing member at
// its zero value; a non-pointer Quantity's zero value prints as "0".
// ---------------------------------------------------------------------------------

fn zero_quantity() -> Quantity {
    Quantity("0".into())
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct GoCrossVersionObjectReference {
    kind: String,
    name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    api_version: String,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct GoLabelSelector {
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    match_labels: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    match_expressions: Vec<GoLabelSelectorRequirement>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct GoLabelSelectorRequirement {
    key: String,
    operator: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    values: Vec<String>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct GoMetricSpec {
    #[serde(rename = "type")]
    type_: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    object: Option<GoObjectMetricSource>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pods: Option<GoPodsMetricSource>,
    #[serde(skip_serializing_if = "Option::is_none")]
    resource: Option<GoResourceMetricSource>,
    #[serde(skip_serializing_if = "Option::is_none")]
    container_resource: Option<GoContainerResourceMetricSource>,
    #[serde(skip_serializing_if = "Option::is_none")]
    external: Option<GoExternalMetricSource>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct GoObjectMetricSource {
    target: GoCrossVersionObjectReference,
    metric_name: String,
    #[serde(default = "zero_quantity")]
    target_value: Quantity,
    #[serde(skip_serializing_if = "Option::is_none")]
    selector: Option<GoLabelSelector>,
    #[serde(skip_serializing_if = "Option::is_none")]
    average_value: Option<Quantity>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct GoPodsMetricSource {
    metric_name: String,
    #[serde(default = "zero_quantity")]
    target_average_value: Quantity,
    #[serde(skip_serializing_if = "Option::is_none")]
    selector: Option<GoLabelSelector>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct GoResourceMetricSource {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    target_average_utilization: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    target_average_value: Option<Quantity>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct GoContainerResourceMetricSource {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    target_average_utilization: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    target_average_value: Option<Quantity>,
    container: String,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct GoExternalMetricSource {
    metric_name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    metric_selector: Option<GoLabelSelector>,
    #[serde(skip_serializing_if = "Option::is_none")]
    target_value: Option<Quantity>,
    #[serde(skip_serializing_if = "Option::is_none")]
    target_average_value: Option<Quantity>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct GoMetricStatus {
    #[serde(rename = "type")]
    type_: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    object: Option<GoObjectMetricStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pods: Option<GoPodsMetricStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    resource: Option<GoResourceMetricStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    container_resource: Option<GoContainerResourceMetricStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    external: Option<GoExternalMetricStatus>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct GoObjectMetricStatus {
    target: GoCrossVersionObjectReference,
    metric_name: String,
    #[serde(default = "zero_quantity")]
    current_value: Quantity,
    #[serde(skip_serializing_if = "Option::is_none")]
    selector: Option<GoLabelSelector>,
    #[serde(skip_serializing_if = "Option::is_none")]
    average_value: Option<Quantity>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct GoPodsMetricStatus {
    metric_name: String,
    #[serde(default = "zero_quantity")]
    current_average_value: Quantity,
    #[serde(skip_serializing_if = "Option::is_none")]
    selector: Option<GoLabelSelector>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct GoResourceMetricStatus {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    current_average_utilization: Option<i32>,
    #[serde(default = "zero_quantity")]
    current_average_value: Quantity,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct GoContainerResourceMetricStatus {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    current_average_utilization: Option<i32>,
    #[serde(default = "zero_quantity")]
    current_average_value: Quantity,
    container: String,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct GoExternalMetricStatus {
    metric_name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    metric_selector: Option<GoLabelSelector>,
    #[serde(default = "zero_quantity")]
    current_value: Quantity,
    #[serde(skip_serializing_if = "Option::is_none")]
    current_average_value: Option<Quantity>,
}

/// A zero `metav1.Time` prints as `null` despite its `omitempty` (Go never omits a
/// struct), hence no skip on `last_transition_time`.
#[derive(Serialize, Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct GoCondition {
    #[serde(rename = "type")]
    type_: String,
    status: String,
    last_transition_time: Option<Time>,
    #[serde(skip_serializing_if = "String::is_empty")]
    reason: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    message: String,
}

/// The internal Go type has no json tags: members are named after the Go fields and
/// nil pointers and slices print as `null`.
#[derive(Serialize, Deserialize, Default)]
#[serde(default, rename_all = "PascalCase")]
struct GoBehavior {
    scale_up: Option<GoScalingRules>,
    scale_down: Option<GoScalingRules>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default, rename_all = "PascalCase")]
struct GoScalingRules {
    stabilization_window_seconds: Option<i32>,
    select_policy: Option<String>,
    policies: Option<Vec<GoScalingPolicy>>,
    tolerance: Option<Quantity>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default, rename_all = "PascalCase")]
struct GoScalingPolicy {
    #[serde(rename = "Type")]
    type_: String,
    value: i32,
    period_seconds: i32,
}

// ---------------------------------------------------------------------------------
// v2 <-> annotation forms.
// ---------------------------------------------------------------------------------

fn non_empty(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

fn object_ref_to_go(r: v2::CrossVersionObjectReference) -> GoCrossVersionObjectReference {
    GoCrossVersionObjectReference {
        kind: r.kind,
        name: r.name,
        api_version: r.api_version.unwrap_or_default(),
    }
}

fn object_ref_from_go(r: GoCrossVersionObjectReference) -> v2::CrossVersionObjectReference {
    v2::CrossVersionObjectReference {
        kind: r.kind,
        name: r.name,
        api_version: non_empty(r.api_version),
    }
}

fn selector_to_go(s: LabelSelector) -> GoLabelSelector {
    GoLabelSelector {
        match_labels: s.match_labels.unwrap_or_default(),
        match_expressions: s
            .match_expressions
            .unwrap_or_default()
            .into_iter()
            .map(|r| GoLabelSelectorRequirement {
                key: r.key,
                operator: r.operator,
                values: r.values.unwrap_or_default(),
            })
            .collect(),
    }
}

fn selector_from_go(s: GoLabelSelector) -> LabelSelector {
    let expressions: Vec<_> = s
        .match_expressions
        .into_iter()
        .map(|r| LabelSelectorRequirement {
            key: r.key,
            operator: r.operator,
            values: (!r.values.is_empty()).then_some(r.values),
        })
        .collect();
    LabelSelector {
        match_labels: (!s.match_labels.is_empty()).then_some(s.match_labels),
        match_expressions: (!expressions.is_empty()).then_some(expressions),
    }
}

fn metric_spec_to_go(m: v2::MetricSpec) -> GoMetricSpec {
    GoMetricSpec {
        type_: m.type_,
        object: m.object.map(|o| GoObjectMetricSource {
            target: object_ref_to_go(o.described_object),
            metric_name: o.metric.name,
            target_value: o.target.value.unwrap_or_else(zero_quantity),
            selector: o.metric.selector.map(selector_to_go),
            average_value: o.target.average_value,
        }),
        pods: m.pods.map(|p| GoPodsMetricSource {
            metric_name: p.metric.name,
            target_average_value: p.target.average_value.unwrap_or_else(zero_quantity),
            selector: p.metric.selector.map(selector_to_go),
        }),
        resource: m.resource.map(|r| GoResourceMetricSource {
            name: r.name,
            target_average_utilization: r.target.average_utilization,
            target_average_value: r.target.average_value,
        }),
        container_resource: m
            .container_resource
            .map(|r| GoContainerResourceMetricSource {
                name: r.name,
                target_average_utilization: r.target.average_utilization,
                target_average_value: r.target.average_value,
                container: r.container,
            }),
        external: m.external.map(|e| GoExternalMetricSource {
            metric_name: e.metric.name,
            metric_selector: e.metric.selector.map(selector_to_go),
            target_value: e.target.value,
            target_average_value: e.target.average_value,
        }),
    }
}

/// v1 has no target type; upstream infers it from which values are set.
fn metric_spec_from_go(m: GoMetricSpec) -> v2::MetricSpec {
    v2::MetricSpec {
        type_: m.type_,
        object: m.object.map(|o| v2::ObjectMetricSource {
            described_object: object_ref_from_go(o.target),
            metric: v2::MetricIdentifier {
                name: o.metric_name,
                selector: o.selector.map(selector_from_go),
            },
            target: v2::MetricTarget {
                type_: if o.average_value.is_none() {
                    "Value"
                } else {
                    "AverageValue"
                }
                .into(),
                value: Some(o.target_value),
                average_value: o.average_value,
                average_utilization: None,
            },
        }),
        pods: m.pods.map(|p| v2::PodsMetricSource {
            metric: v2::MetricIdentifier {
                name: p.metric_name,
                selector: p.selector.map(selector_from_go),
            },
            target: v2::MetricTarget {
                type_: "AverageValue".into(),
                average_value: Some(p.target_average_value),
                ..Default::default()
            },
        }),
        resource: m.resource.map(|r| v2::ResourceMetricSource {
            name: r.name,
            target: resource_target(r.target_average_utilization, r.target_average_value),
        }),
        container_resource: m
            .container_resource
            .map(|r| v2::ContainerResourceMetricSource {
                name: r.name,
                container: r.container,
                target: resource_target(r.target_average_utilization, r.target_average_value),
            }),
        external: m.external.map(|e| v2::ExternalMetricSource {
            metric: v2::MetricIdentifier {
                name: e.metric_name,
                selector: e.metric_selector.map(selector_from_go),
            },
            target: v2::MetricTarget {
                type_: if e.target_value.is_none() {
                    "AverageValue"
                } else {
                    "Value"
                }
                .into(),
                value: e.target_value,
                average_value: e.target_average_value,
                average_utilization: None,
            },
        }),
    }
}

fn resource_target(utilization: Option<i32>, average_value: Option<Quantity>) -> v2::MetricTarget {
    v2::MetricTarget {
        type_: if utilization.is_none() {
            "AverageValue"
        } else {
            "Utilization"
        }
        .into(),
        average_utilization: utilization,
        average_value,
        value: None,
    }
}

fn metric_status_to_go(m: v2::MetricStatus) -> GoMetricStatus {
    GoMetricStatus {
        type_: m.type_,
        object: m.object.map(|o| GoObjectMetricStatus {
            target: object_ref_to_go(o.described_object),
            metric_name: o.metric.name,
            current_value: o.current.value.unwrap_or_else(zero_quantity),
            selector: o.metric.selector.map(selector_to_go),
            average_value: o.current.average_value,
        }),
        pods: m.pods.map(|p| GoPodsMetricStatus {
            metric_name: p.metric.name,
            current_average_value: p.current.average_value.unwrap_or_else(zero_quantity),
            selector: p.metric.selector.map(selector_to_go),
        }),
        resource: m.resource.map(|r| GoResourceMetricStatus {
            name: r.name,
            current_average_utilization: r.current.average_utilization,
            current_average_value: r.current.average_value.unwrap_or_else(zero_quantity),
        }),
        container_resource: m
            .container_resource
            .map(|r| GoContainerResourceMetricStatus {
                name: r.name,
                current_average_utilization: r.current.average_utilization,
                current_average_value: r.current.average_value.unwrap_or_else(zero_quantity),
                container: r.container,
            }),
        external: m.external.map(|e| GoExternalMetricStatus {
            metric_name: e.metric.name,
            metric_selector: e.metric.selector.map(selector_to_go),
            current_value: e.current.value.unwrap_or_else(zero_quantity),
            current_average_value: e.current.average_value,
        }),
    }
}

fn metric_status_from_go(m: GoMetricStatus) -> v2::MetricStatus {
    v2::MetricStatus {
        type_: m.type_,
        object: m.object.map(|o| v2::ObjectMetricStatus {
            described_object: object_ref_from_go(o.target),
            metric: v2::MetricIdentifier {
                name: o.metric_name,
                selector: o.selector.map(selector_from_go),
            },
            current: v2::MetricValueStatus {
                value: Some(o.current_value),
                average_value: o.average_value,
                average_utilization: None,
            },
        }),
        pods: m.pods.map(|p| v2::PodsMetricStatus {
            metric: v2::MetricIdentifier {
                name: p.metric_name,
                selector: p.selector.map(selector_from_go),
            },
            current: v2::MetricValueStatus {
                average_value: Some(p.current_average_value),
                ..Default::default()
            },
        }),
        resource: m.resource.map(|r| v2::ResourceMetricStatus {
            name: r.name,
            current: v2::MetricValueStatus {
                average_value: Some(r.current_average_value),
                average_utilization: r.current_average_utilization,
                value: None,
            },
        }),
        container_resource: m
            .container_resource
            .map(|r| v2::ContainerResourceMetricStatus {
                name: r.name,
                container: r.container,
                current: v2::MetricValueStatus {
                    average_value: Some(r.current_average_value),
                    average_utilization: r.current_average_utilization,
                    value: None,
                },
            }),
        external: m.external.map(|e| v2::ExternalMetricStatus {
            metric: v2::MetricIdentifier {
                name: e.metric_name,
                selector: e.metric_selector.map(selector_from_go),
            },
            current: v2::MetricValueStatus {
                value: Some(e.current_value),
                average_value: e.current_average_value,
                average_utilization: None,
            },
        }),
    }
}

fn condition_to_go(c: v2::HorizontalPodAutoscalerCondition) -> GoCondition {
    GoCondition {
        type_: c.type_,
        status: c.status,
        last_transition_time: c.last_transition_time,
        reason: c.reason.unwrap_or_default(),
        message: c.message.unwrap_or_default(),
    }
}

fn condition_from_go(c: GoCondition) -> v2::HorizontalPodAutoscalerCondition {
    v2::HorizontalPodAutoscalerCondition {
        type_: c.type_,
        status: c.status,
        last_transition_time: c.last_transition_time,
        reason: non_empty(c.reason),
        message: non_empty(c.message),
    }
}

fn behavior_to_go(b: v2::HorizontalPodAutoscalerBehavior) -> GoBehavior {
    let rules = |r: v2::HPAScalingRules| GoScalingRules {
        stabilization_window_seconds: r.stabilization_window_seconds,
        select_policy: r.select_policy,
        policies: r.policies.map(|ps| {
            ps.into_iter()
                .map(|p| GoScalingPolicy {
                    type_: p.type_,
                    value: p.value,
                    period_seconds: p.period_seconds,
                })
                .collect()
        }),
        tolerance: r.tolerance,
    };
    GoBehavior {
        scale_up: b.scale_up.map(rules),
        scale_down: b.scale_down.map(rules),
    }
}

fn behavior_from_go(b: GoBehavior) -> v2::HorizontalPodAutoscalerBehavior {
    let rules = |r: GoScalingRules| v2::HPAScalingRules {
        stabilization_window_seconds: r.stabilization_window_seconds,
        select_policy: r.select_policy,
        policies: r.policies.map(|ps| {
            ps.into_iter()
                .map(|p| v2::HPAScalingPolicy {
                    type_: p.type_,
                    value: p.value,
                    period_seconds: p.period_seconds,
                })
                .collect()
        }),
        tolerance: r.tolerance,
    };
    v2::HorizontalPodAutoscalerBehavior {
        scale_up: b.scale_up.map(rules),
        scale_down: b.scale_down.map(rules),
    }
}

// ---------------------------------------------------------------------------------
// Go's encoding/json, as far as these annotations need it.
// ---------------------------------------------------------------------------------

/// `json.Marshal`'s text: compact, and with the HTML-sensitive characters and the two
/// JavaScript line separators escaped as Go escapes them. Those characters can only
/// occur inside strings, so replacing them in the finished text is safe.
fn go_json<T: Serialize>(value: &T) -> Option<String> {
    let text = serde_json::to_string(value).ok()?;
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    Some(out)
}

/// `json.Unmarshal` into `T`; None where Go would return an error.
fn parse_go<T: DeserializeOwned>(text: &str) -> Option<T> {
    let doc: Doc = serde_json::from_str(text).ok()?;
    T::deserialize(doc).ok()
}

/// A parsed JSON value that keeps object members in document order, because Go
/// resolves repeated members (`"scaleUp"` then `"ScaleUp"`) by position. Deserializing
/// a struct from it matches member names the way Go does (see [`go_members`]).
enum Doc {
    Null,
    Bool(bool),
    I64(i64),
    U64(u64),
    F64(f64),
    Str(String),
    Array(Vec<Doc>),
    Object(Vec<(String, Doc)>),
}

impl<'de> Deserialize<'de> for Doc {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct DocVisitor;

        impl<'de> Visitor<'de> for DocVisitor {
            type Value = Doc;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_unit<E>(self) -> Result<Doc, E> {
                Ok(Doc::Null)
            }
            fn visit_none<E>(self) -> Result<Doc, E> {
                Ok(Doc::Null)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Doc, D::Error> {
                Doc::deserialize(d)
            }
            fn visit_bool<E>(self, v: bool) -> Result<Doc, E> {
                Ok(Doc::Bool(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Doc, E> {
                Ok(Doc::I64(v))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Doc, E> {
                Ok(Doc::U64(v))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Doc, E> {
                Ok(Doc::F64(v))
            }
            fn visit_str<E>(self, v: &str) -> Result<Doc, E> {
                Ok(Doc::Str(v.to_owned()))
            }
            fn visit_string<E>(self, v: String) -> Result<Doc, E> {
                Ok(Doc::Str(v))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Doc, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Doc::Array(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Doc, A::Error> {
                let mut members = Vec::new();
                while let Some(member) = map.next_entry::<String, Doc>()? {
                    members.push(member);
                }
                Ok(Doc::Object(members))
            }
        }

        deserializer.deserialize_any(DocVisitor)
    }
}

type DocError = de::value::Error;

impl<'de> IntoDeserializer<'de, DocError> for Doc {
    type Deserializer = Doc;

    fn into_deserializer(self) -> Doc {
        self
    }
}

impl<'de> Deserializer<'de> for Doc {
    type Error = DocError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DocError> {
        match self {
            Doc::Null => visitor.visit_unit(),
            Doc::Bool(v) => visitor.visit_bool(v),
            Doc::I64(v) => visitor.visit_i64(v),
            Doc::U64(v) => visitor.visit_u64(v),
            Doc::F64(v) => visitor.visit_f64(v),
            Doc::Str(v) => visitor.visit_string(v),
            Doc::Array(items) => visitor.visit_seq(SeqDeserializer::new(items.into_iter())),
            // Maps (matchLabels) keep every key; a repeated one ends up with its last value, as in Go.
            Doc::Object(members) => visitor.visit_map(MapDeserializer::new(members.into_iter())),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DocError> {
        match self {
            Doc::Null => visitor.visit_none(),
            doc => visitor.visit_some(doc),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DocError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DocError> {
        match self {
            Doc::Object(members) => visitor.visit_map(MapDeserializer::new(
                go_members(members, fields).into_iter(),
            )),
            // Go leaves a struct alone on null, i.e. at its zero value.
            Doc::Null => {
                visitor.visit_map(MapDeserializer::new(std::iter::empty::<(String, Doc)>()))
            }
            doc => doc.deserialize_any(visitor),
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

/// encoding/json's member matching for a struct with `fields`: the field of that exact
/// name, else one whose name is equal under case folding; members naming no field are
/// skipped, a later member overrides an earlier one for the same field, and `null`
/// leaves the field unset (what nil is for pointers, and the zero value otherwise).
fn go_members(members: Vec<(String, Doc)>, fields: &'static [&'static str]) -> Vec<(String, Doc)> {
    let mut out: Vec<(String, Doc)> = Vec::new();
    for (key, value) in members {
        let field = fields
            .iter()
            .find(|f| **f == key)
            .or_else(|| fields.iter().find(|f| go_fold_eq(f, &key)));
        let Some(field) = field else {
            continue;
        };
        out.retain(|(k, _)| k != field);
        if !matches!(value, Doc::Null) {
            out.push(((*field).to_owned(), value));
        }
    }
    out
}

/// Whether `key` equals the ASCII `field` under Unicode simple case folding, as Go's
/// `bytes.EqualFold`: besides ASCII case, the Kelvin sign folds to `k` and the long s
/// to `s`.
fn go_fold_eq(field: &str, key: &str) -> bool {
    let fold = |c: char| match c {
        '\u{212A}' => 'k',
        '\u{17F}' => 's',
        c => c.to_ascii_lowercase(),
    };
    let mut key_chars = key.chars();
    field.chars().all(|f| {
        key_chars
            .next()
            .is_some_and(|k| fold(k) == f.to_ascii_lowercase())
    }) && key_chars.next().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn time(s: &str) -> Time {
        serde_json::from_value(serde_json::Value::String(s.into())).unwrap()
    }

    fn q(s: &str) -> Option<Quantity> {
        Some(Quantity(s.into()))
    }

    fn target_ref() -> v2::CrossVersionObjectReference {
        v2::CrossVersionObjectReference {
            api_version: Some("apps/v1".into()),
            kind: "Deployment".into(),
            name: "web".into(),
        }
    }

    fn v1_hpa(target_cpu: Option<i32>) -> v1::HorizontalPodAutoscaler {
        v1::HorizontalPodAutoscaler {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("prod".into()),
                ..Default::default()
            },
            spec: Some(v1::HorizontalPodAutoscalerSpec {
                scale_target_ref: v1::CrossVersionObjectReference {
                    api_version: Some("apps/v1".into()),
                    kind: "Deployment".into(),
                    name: "web".into(),
                },
                min_replicas: Some(1),
                max_replicas: 5,
                target_cpu_utilization_percentage: target_cpu,
            }),
            status: Some(v1::HorizontalPodAutoscalerStatus {
                observed_generation: Some(2),
                current_replicas: 2,
                desired_replicas: 2,
                current_cpu_utilization_percentage: Some(40),
                ..Default::default()
            }),
        }
    }

    fn pods_metric() -> v2::MetricSpec {
        v2::MetricSpec {
            type_: "Pods".into(),
            pods: Some(v2::PodsMetricSource {
                metric: v2::MetricIdentifier {
                    name: "packets".into(),
                    selector: None,
                },
                target: v2::MetricTarget {
                    type_: "AverageValue".into(),
                    average_value: q("1k"),
                    ..Default::default()
                },
            }),
            ..Default::default()
        }
    }

    fn external_metric() -> v2::MetricSpec {
        v2::MetricSpec {
            type_: "External".into(),
            external: Some(v2::ExternalMetricSource {
                metric: v2::MetricIdentifier {
                    name: "queue".into(),
                    selector: Some(LabelSelector {
                        match_labels: Some(BTreeMap::from([("q".into(), "jobs".into())])),
                        match_expressions: None,
                    }),
                },
                target: v2::MetricTarget {
                    type_: "Value".into(),
                    value: q("10"),
                    ..Default::default()
                },
            }),
            ..Default::default()
        }
    }

    fn full_v2() -> v2::HorizontalPodAutoscaler {
        v2::HorizontalPodAutoscaler {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("prod".into()),
                annotations: Some(BTreeMap::from([("team".into(), "payments".into())])),
                ..Default::default()
            },
            spec: Some(v2::HorizontalPodAutoscalerSpec {
                scale_target_ref: target_ref(),
                min_replicas: Some(2),
                max_replicas: 10,
                metrics: Some(vec![
                    pods_metric(),
                    external_metric(),
                    cpu_utilization_metric(60),
                ]),
                behavior: Some(v2::HorizontalPodAutoscalerBehavior {
                    scale_up: Some(v2::HPAScalingRules {
                        policies: Some(vec![v2::HPAScalingPolicy {
                            type_: "Pods".into(),
                            value: 4,
                            period_seconds: 15,
                        }]),
                        tolerance: q("50m"),
                        ..Default::default()
                    }),
                    scale_down: Some(v2::HPAScalingRules {
                        stabilization_window_seconds: Some(60),
                        select_policy: Some("Max".into()),
                        policies: Some(vec![v2::HPAScalingPolicy {
                            type_: "Percent".into(),
                            value: 100,
                            period_seconds: 15,
                        }]),
                        tolerance: None,
                    }),
                }),
            }),
            status: Some(v2::HorizontalPodAutoscalerStatus {
                observed_generation: Some(3),
                last_scale_time: Some(time("2024-05-01T09:58:00Z")),
                current_replicas: Some(2),
                desired_replicas: 3,
                current_metrics: Some(vec![
                    v2::MetricStatus {
                        type_: "Resource".into(),
                        resource: Some(v2::ResourceMetricStatus {
                            name: "cpu".into(),
                            current: v2::MetricValueStatus {
                                average_utilization: Some(55),
                                average_value: q("250m"),
                                value: None,
                            },
                        }),
                        ..Default::default()
                    },
                    v2::MetricStatus {
                        type_: "Pods".into(),
                        pods: Some(v2::PodsMetricStatus {
                            metric: v2::MetricIdentifier {
                                name: "packets".into(),
                                selector: None,
                            },
                            current: v2::MetricValueStatus {
                                average_value: q("900"),
                                ..Default::default()
                            },
                        }),
                        ..Default::default()
                    },
                ]),
                conditions: Some(vec![v2::HorizontalPodAutoscalerCondition {
                    type_: "AbleToScale".into(),
                    status: "True".into(),
                    last_transition_time: Some(time("2024-05-01T10:00:00Z")),
                    reason: Some("SucceededRescale".into()),
                    message: Some(
                        "the HPA controller was able to update the target scale to 3".into(),
                    ),
                }]),
            }),
        }
    }

    fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
        meta.annotations.as_ref()?.get(key).map(String::as_str)
    }

    #[test]
    fn a_v1_cpu_target_round_trips_without_annotations() {
        let mut original = v1_hpa(Some(50));
        original
            .status
            .as_mut()
            .unwrap()
            .current_cpu_utilization_percentage = None;
        let v2 = hpa_v1_to_v2(original.clone());
        let spec = v2.spec.as_ref().unwrap();
        assert_eq!(spec.metrics, Some(vec![cpu_utilization_metric(50)]));
        assert_eq!(spec.behavior, None);
        assert_eq!(v2.status.as_ref().unwrap().current_replicas, Some(2));
        assert_eq!(v2.metadata.annotations, None);

        assert_eq!(hpa_v2_to_v1(v2), original);
    }

    #[test]
    fn a_v1_current_cpu_comes_back_with_its_raw_status_annotation() {
        let original = v1_hpa(Some(50));
        let v2 = hpa_v1_to_v2(original.clone());
        let current = v2.status.as_ref().unwrap().current_metrics.clone().unwrap();
        assert_eq!(current.len(), 1);
        let cpu = current[0].resource.as_ref().unwrap();
        assert_eq!(
            (cpu.name.as_str(), cpu.current.average_utilization),
            ("cpu", Some(40))
        );

        // Upstream records every current metric, the CPU one included, since v1's
        // field cannot hold its raw value.
        let back = hpa_v2_to_v1(v2);
        assert_eq!(back.spec, original.spec);
        assert_eq!(back.status, original.status);
        assert_eq!(
            annotation(&back.metadata, METRIC_STATUSES_ANNOTATION),
            Some(
                r#"[{"type":"Resource","resource":{"name":"cpu","currentAverageUtilization":40,"currentAverageValue":"0"}}]"#
            )
        );
        assert_eq!(back.metadata.annotations.map(|a| a.len()), Some(1));
    }

    #[test]
    fn a_v1_hpa_without_target_gets_the_80_percent_default() {
        let v2 = hpa_v1_to_v2(v1_hpa(None));
        assert_eq!(
            v2.spec.unwrap().metrics,
            Some(vec![cpu_utilization_metric(80)])
        );
    }

    #[test]
    fn v2_extras_travel_in_annotations_and_come_back() {
        let original = full_v2();
        let v1 = hpa_v2_to_v1(original.clone());

        let spec = v1.spec.as_ref().unwrap();
        assert_eq!(spec.target_cpu_utilization_percentage, Some(60));
        assert_eq!((spec.min_replicas, spec.max_replicas), (Some(2), 10));
        assert_eq!(spec.scale_target_ref.kind, "Deployment");
        let status = v1.status.as_ref().unwrap();
        assert_eq!(status.current_cpu_utilization_percentage, Some(55));
        assert_eq!((status.current_replicas, status.desired_replicas), (2, 3));
        assert_eq!(status.observed_generation, Some(3));

        let meta = &v1.metadata;
        assert_eq!(annotation(meta, "team"), Some("payments"));
        assert_eq!(
            annotation(meta, METRIC_SPECS_ANNOTATION),
            Some(concat!(
                r#"[{"type":"Pods","pods":{"metricName":"packets","targetAverageValue":"1k"}},"#,
                r#"{"type":"External","external":{"metricName":"queue","#,
                r#""metricSelector":{"matchLabels":{"q":"jobs"}},"targetValue":"10"}}]"#,
            ))
        );
        assert_eq!(
            annotation(meta, METRIC_STATUSES_ANNOTATION),
            Some(concat!(
                r#"[{"type":"Resource","resource":{"name":"cpu","#,
                r#""currentAverageUtilization":55,"currentAverageValue":"250m"}},"#,
                r#"{"type":"Pods","pods":{"metricName":"packets","currentAverageValue":"900"}}]"#,
            ))
        );
        assert_eq!(
            annotation(meta, BEHAVIOR_SPECS_ANNOTATION),
            Some(concat!(
                r#"{"ScaleUp":{"StabilizationWindowSeconds":null,"SelectPolicy":null,"#,
                r#""Policies":[{"Type":"Pods","Value":4,"PeriodSeconds":15}],"Tolerance":"50m"},"#,
                r#""ScaleDown":{"StabilizationWindowSeconds":60,"SelectPolicy":"Max","#,
                r#""Policies":[{"Type":"Percent","Value":100,"PeriodSeconds":15}],"Tolerance":null}}"#,
            ))
        );
        assert_eq!(
            annotation(meta, CONDITIONS_ANNOTATION),
            Some(concat!(
                r#"[{"type":"AbleToScale","status":"True","lastTransitionTime":"2024-05-01T10:00:00Z","#,
                r#""reason":"SucceededRescale","#,
                r#""message":"the HPA controller was able to update the target scale to 3"}]"#,
            ))
        );
        assert_eq!(meta.annotations.as_ref().unwrap().len(), 5);

        assert_eq!(hpa_v1_to_v2(v1), original);
    }

    #[test]
    fn a_cpu_metric_listed_first_comes_back_last() {
        let mut original = full_v2();
        let spec = original.spec.as_mut().unwrap();
        spec.metrics = Some(vec![
            cpu_utilization_metric(60),
            pods_metric(),
            external_metric(),
        ]);

        let back = hpa_v1_to_v2(hpa_v2_to_v1(original));
        assert_eq!(
            back.spec.unwrap().metrics,
            Some(vec![
                pods_metric(),
                external_metric(),
                cpu_utilization_metric(60)
            ])
        );
    }

    #[test]
    fn only_the_first_cpu_utilization_target_becomes_the_v1_field() {
        let mut original = full_v2();
        let spec = original.spec.as_mut().unwrap();
        spec.metrics = Some(vec![cpu_utilization_metric(70), cpu_utilization_metric(60)]);
        let v1 = hpa_v2_to_v1(original);
        assert_eq!(v1.spec.unwrap().target_cpu_utilization_percentage, Some(70));
        // Both are CPU utilization targets, so neither is carried as an "other" metric.
        assert_eq!(annotation(&v1.metadata, METRIC_SPECS_ANNOTATION), None);
    }

    #[test]
    fn the_last_current_cpu_utilization_becomes_the_v1_field() {
        let cpu_now = |percent| v2::MetricStatus {
            type_: "Resource".into(),
            resource: Some(v2::ResourceMetricStatus {
                name: "cpu".into(),
                current: v2::MetricValueStatus {
                    average_utilization: Some(percent),
                    ..Default::default()
                },
            }),
            ..Default::default()
        };
        let mut original = full_v2();
        original.status.as_mut().unwrap().current_metrics = Some(vec![cpu_now(10), cpu_now(20)]);
        let v1 = hpa_v2_to_v1(original);
        assert_eq!(
            v1.status.unwrap().current_cpu_utilization_percentage,
            Some(20)
        );
    }

    #[test]
    fn behavior_member_names_match_regardless_of_case() {
        let mut hpa = v1_hpa(Some(50));
        hpa.metadata.annotations = Some(BTreeMap::from([(
            BEHAVIOR_SPECS_ANNOTATION.to_owned(),
            concat!(
                r#"{"scaleup":{"stabilizationWindowSeconds":30,"POLICIES":[{"type":"Pods","value":2,"periodseconds":60}]},"#,
                r#""scaleDown":{"SelectPolicy":"Disabled","tolerance":"1","unknown":true}}"#,
            )
            .to_owned(),
        )]));
        let behavior = hpa_v1_to_v2(hpa).spec.unwrap().behavior.unwrap();
        assert_eq!(
            behavior,
            v2::HorizontalPodAutoscalerBehavior {
                scale_up: Some(v2::HPAScalingRules {
                    stabilization_window_seconds: Some(30),
                    policies: Some(vec![v2::HPAScalingPolicy {
                        type_: "Pods".into(),
                        value: 2,
                        period_seconds: 60,
                    }]),
                    ..Default::default()
                }),
                scale_down: Some(v2::HPAScalingRules {
                    select_policy: Some("Disabled".into()),
                    tolerance: q("1"),
                    ..Default::default()
                }),
            }
        );
    }

    #[test]
    fn a_repeated_member_takes_the_last_value() {
        let behavior: GoBehavior =
            parse_go(r#"{"scaleUp":{"Policies":null},"ScaleUp":{"StabilizationWindowSeconds":5}}"#)
                .unwrap();
        let up = behavior.scale_up.unwrap();
        assert_eq!(up.stabilization_window_seconds, Some(5));
        assert!(up.policies.is_none());
        assert!(go_fold_eq("ScaleUp", "\u{17F}caleUp"));
        assert!(!go_fold_eq("ScaleUp", "ScaleUpX"));
    }

    #[test]
    fn annotations_that_do_not_parse_are_ignored_and_dropped() {
        let mut hpa = v1_hpa(Some(50));
        hpa.metadata.annotations = Some(BTreeMap::from([
            ("team".to_owned(), "payments".to_owned()),
            (BEHAVIOR_SPECS_ANNOTATION.to_owned(), "{not json".to_owned()),
            (
                METRIC_SPECS_ANNOTATION.to_owned(),
                r#"{"type":"Pods"}"#.to_owned(),
            ),
            (METRIC_STATUSES_ANNOTATION.to_owned(), "[1]".to_owned()),
            (
                CONDITIONS_ANNOTATION.to_owned(),
                r#"[{"lastTransitionTime":"yesterday"}]"#.to_owned(),
            ),
        ]));
        let v2 = hpa_v1_to_v2(hpa);
        let spec = v2.spec.unwrap();
        assert_eq!(spec.behavior, None);
        assert_eq!(spec.metrics, Some(vec![cpu_utilization_metric(50)]));
        let status = v2.status.unwrap();
        assert_eq!(status.current_metrics.map(|m| m.len()), Some(1));
        assert_eq!(status.conditions, None);
        assert_eq!(
            v2.metadata.annotations,
            Some(BTreeMap::from([("team".to_owned(), "payments".to_owned())]))
        );
    }

    #[test]
    fn a_behavior_annotation_with_both_rules_null_sets_nothing() {
        let mut hpa = v1_hpa(Some(50));
        hpa.metadata.annotations = Some(BTreeMap::from([(
            BEHAVIOR_SPECS_ANNOTATION.to_owned(),
            r#"{"ScaleUp":null,"ScaleDown":null}"#.to_owned(),
        )]));
        let v2 = hpa_v1_to_v2(hpa);
        assert_eq!(v2.spec.unwrap().behavior, None);
        assert_eq!(v2.metadata.annotations, None);
    }

    #[test]
    fn missing_v1_members_take_go_zero_values() {
        let mut hpa = v1_hpa(None);
        hpa.metadata.annotations = Some(BTreeMap::from([
            (
                METRIC_SPECS_ANNOTATION.to_owned(),
                r#"[{"type":"Object","object":{"metricName":"rps"}}]"#.to_owned(),
            ),
            (
                CONDITIONS_ANNOTATION.to_owned(),
                r#"[{"type":"ScalingActive","status":"False","lastTransitionTime":null}]"#
                    .to_owned(),
            ),
        ]));
        let v2 = hpa_v1_to_v2(hpa);
        let metrics = v2.spec.unwrap().metrics.unwrap();
        assert_eq!(
            metrics.len(),
            1,
            "an annotation metric means no 80% default"
        );
        let object = metrics[0].object.as_ref().unwrap();
        assert_eq!(object.target.type_, "Value");
        assert_eq!(object.target.value, q("0"));
        assert_eq!(object.described_object.kind, "");
        let conditions = v2.status.unwrap().conditions.unwrap();
        assert_eq!(conditions[0].last_transition_time, None);
        assert_eq!(conditions[0].reason, None);
    }

    #[test]
    fn stale_round_trip_annotations_are_replaced_by_fresh_ones() {
        let mut original = full_v2();
        original.spec.as_mut().unwrap().behavior = None;
        original.status.as_mut().unwrap().conditions = None;
        let annotations = original.metadata.annotations.as_mut().unwrap();
        for key in ROUND_TRIP_ANNOTATIONS {
            annotations.insert(key.to_owned(), "stale".to_owned());
        }

        let v1 = hpa_v2_to_v1(original);
        let meta = &v1.metadata;
        assert_eq!(annotation(meta, BEHAVIOR_SPECS_ANNOTATION), None);
        assert_eq!(annotation(meta, CONDITIONS_ANNOTATION), None);
        assert!(annotation(meta, METRIC_SPECS_ANNOTATION).is_some_and(|a| a.starts_with('[')));
        assert!(annotation(meta, METRIC_STATUSES_ANNOTATION).is_some_and(|a| a.starts_with('[')));
        assert_eq!(annotation(meta, "team"), Some("payments"));
    }

    #[test]
    fn drop_round_trip_annotations_keeps_others_and_removes_an_emptied_map() {
        let mut meta = ObjectMeta {
            annotations: Some(BTreeMap::from([
                ("team".to_owned(), "payments".to_owned()),
                (METRIC_SPECS_ANNOTATION.to_owned(), "[]".to_owned()),
                (CONDITIONS_ANNOTATION.to_owned(), "[]".to_owned()),
            ])),
            ..Default::default()
        };
        drop_round_trip_annotations(&mut meta);
        assert_eq!(
            meta.annotations,
            Some(BTreeMap::from([("team".to_owned(), "payments".to_owned())]))
        );

        let mut meta = ObjectMeta {
            annotations: Some(BTreeMap::from([
                (BEHAVIOR_SPECS_ANNOTATION.to_owned(), "{}".to_owned()),
                (METRIC_STATUSES_ANNOTATION.to_owned(), "[]".to_owned()),
            ])),
            ..Default::default()
        };
        drop_round_trip_annotations(&mut meta);
        assert_eq!(meta.annotations, None);
    }

    #[test]
    fn a_v2_status_without_status_stays_without() {
        let mut original = full_v2();
        original.status = None;
        let v1 = hpa_v2_to_v1(original.clone());
        assert_eq!(v1.status, None);
        assert_eq!(annotation(&v1.metadata, METRIC_STATUSES_ANNOTATION), None);
        assert_eq!(hpa_v1_to_v2(v1), original);
    }

    #[test]
    fn annotation_text_escapes_like_go() {
        let mut original = full_v2();
        let status = original.status.as_mut().unwrap();
        status.current_metrics = None;
        status.conditions = Some(vec![v2::HorizontalPodAutoscalerCondition {
            type_: "ScalingLimited".into(),
            status: "True".into(),
            last_transition_time: None,
            reason: None,
            message: Some("desired <= max & \"quoted\"".into()),
        }]);
        let v1 = hpa_v2_to_v1(original.clone());
        assert_eq!(
            annotation(&v1.metadata, CONDITIONS_ANNOTATION),
            Some(
                r#"[{"type":"ScalingLimited","status":"True","lastTransitionTime":null,"message":"desired \u003c= max \u0026 \"quoted\""}]"#
            )
        );
        assert_eq!(hpa_v1_to_v2(v1), original);
    }
}
