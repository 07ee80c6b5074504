//! Upstream's admission metrics (`apiserver_admission_*`): each step's, each plugin's
//! and each webhook call's latency, and the webhooks' answers, rejections and
//! failures opened. Process-wide, as upstream's (its legacy registry).

use std::sync::LazyLock;
use std::time::Duration;

use ferrokube_component_base::metrics::{CounterVec, HistogramVec};

use super::Operation;

/// Upstream's buckets of the step and plugin latencies.
const STEP_BUCKETS: &[f64] = &[0.005, 0.025, 0.1, 0.5, 1.0, 2.5];
/// Upstream's buckets of a webhook call's latency.
const WEBHOOK_BUCKETS: &[f64] = &[0.005, 0.025, 0.1, 0.5, 1.0, 2.5, 10.0, 25.0];

/// Which half of admission: mutation (`admit`) or validation (`validate`); a
/// validating webhook's calls are typed `validating`, as upstream's dispatcher does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    Admit,
    Validate,
}

impl Step {
    fn as_str(self) -> &'static str {
        match self {
            Step::Admit => "admit",
            Step::Validate => "validate",
        }
    }

    fn webhook_type(self) -> &'static str {
        match self {
            Step::Admit => "admit",
            Step::Validate => "validating",
        }
    }
}

/// Why a webhook call rejected the request (upstream's `WebhookRejectionErrorType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rejection {
    /// The webhook answered and denied.
    Denied,
    /// The call failed (under `failurePolicy: Fail`).
    CallFailed,
}

impl Rejection {
    fn as_str(self) -> &'static str {
        match self {
            Rejection::Denied => "no_error",
            Rejection::CallFailed => "calling_webhook_error",
        }
    }
}

/// One webhook call as the metrics see it.
pub(crate) struct WebhookCall<'a> {
    pub name: &'a str,
    pub step: Step,
    pub operation: Operation,
    pub elapsed: Duration,
    /// The answer's HTTP code (200 for an answer, the rejection's code, 503 for a
    /// call that failed without one).
    pub code: u16,
    pub rejection: Option<Rejection>,
}

struct AdmissionMetrics {
    step: HistogramVec<3>,
    controller: HistogramVec<4>,
    webhook: HistogramVec<4>,
    webhook_requests: CounterVec<5>,
    webhook_rejections: CounterVec<5>,
    webhook_fail_open: CounterVec<2>,
}

static METRICS: LazyLock<AdmissionMetrics> = LazyLock::new(|| AdmissionMetrics {
    step: HistogramVec::histogram(
        "apiserver_admission_step_admission_duration_seconds",
        "[STABLE] Admission sub-step latency histogram in seconds, broken out for each operation and API resource and step type (validate or admit).",
        ["operation", "rejected", "type"],
        STEP_BUCKETS,
    ),
    controller: HistogramVec::histogram(
        "apiserver_admission_controller_admission_duration_seconds",
        "[STABLE] Admission controller latency histogram in seconds, identified by name and broken out for each operation and API resource and type (validate or admit).",
        ["name", "operation", "rejected", "type"],
        STEP_BUCKETS,
    ),
    webhook: HistogramVec::histogram(
        "apiserver_admission_webhook_admission_duration_seconds",
        "[STABLE] Admission webhook latency histogram in seconds, identified by name and broken out for each operation and API resource and type (validate or admit).",
        ["name", "operation", "rejected", "type"],
        WEBHOOK_BUCKETS,
    ),
    webhook_requests: CounterVec::new(
        "apiserver_admission_webhook_request_total",
        "[ALPHA] Admission webhook request total, identified by name and broken out for each admission type (validating or mutating) and operation. Additional labels specify whether the request was rejected or not and an HTTP status code. Codes greater than 600 are truncated to 600, to keep the metrics cardinality bounded.",
        ["code", "name", "operation", "rejected", "type"],
    ),
    webhook_rejections: CounterVec::new(
        "apiserver_admission_webhook_rejection_count",
        "[ALPHA] Admission webhook rejection count, identified by name and broken out for each admission type (validating or admit) and operation. Additional labels specify an error type (calling_webhook_error or apiserver_internal_error if an error occurred; no_error otherwise) and optionally a non-zero rejection code if the webhook rejects the request with an HTTP status code (honored by the apiserver when the code is greater or equal to 400). Codes greater than 600 are truncated to 600, to keep the metrics cardinality bounded.",
        ["error_type", "name", "operation", "rejection_code", "type"],
    ),
    webhook_fail_open: CounterVec::new(
        "apiserver_admission_webhook_fail_open_count",
        "[ALPHA] Admission webhook fail open count, identified by name and broken out for each admission type (validating or admit).",
        ["name", "type"],
    ),
});

fn rejected(r: bool) -> &'static str {
    if r { "true" } else { "false" }
}

/// A whole step (every plugin of the chain) for one request.
pub(crate) fn observe_step(step: Step, operation: Operation, elapsed: Duration, rejected_: bool) {
    METRICS.step.observe(
        [operation.as_str(), rejected(rejected_), step.as_str()],
        elapsed.as_secs_f64(),
    );
}

/// One plugin's part of a step.
pub(crate) fn observe_plugin(
    name: &str,
    step: Step,
    operation: Operation,
    elapsed: Duration,
    rejected_: bool,
) {
    METRICS.controller.observe(
        [name, operation.as_str(), rejected(rejected_), step.as_str()],
        elapsed.as_secs_f64(),
    );
}

/// One webhook call.
pub(crate) fn observe_webhook(call: &WebhookCall<'_>) {
    let ty = call.step.webhook_type();
    let op = call.operation.as_str();
    let code = call.code.min(600).to_string();
    let is_rejected = rejected(call.rejection.is_some());
    METRICS
        .webhook_requests
        .inc([&code, call.name, op, is_rejected, ty]);
    METRICS
        .webhook
        .observe([call.name, op, is_rejected, ty], call.elapsed.as_secs_f64());
    if let Some(r) = call.rejection {
        METRICS
            .webhook_rejections
            .inc([r.as_str(), call.name, op, &code, ty]);
    }
}

/// A webhook call that failed and was ignored (`failurePolicy: Ignore`).
pub(crate) fn observe_fail_open(name: &str, step: Step) {
    METRICS.webhook_fail_open.inc([name, step.webhook_type()]);
}

/// The families, for the apiserver's `/metrics`.
pub(crate) fn render(out: &mut String) {
    let m = &*METRICS;
    m.controller.render(out);
    m.step.render(out);
    m.webhook.render(out);
    m.webhook_fail_open.render(out);
    m.webhook_rejections.render(out);
    m.webhook_requests.render(out);
}
