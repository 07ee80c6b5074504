//! The request pipeline and the REST handlers.
//!
//! Pipeline, outermost first: panic recovery (a panic answers 500, the process
//! lives), metrics and the audit record -> request info -> authentication (401) ->
//! audit policy -> impersonation -> priority and fairness or max-in-flight (429) ->
//! authorization (403) -> body limit (413) -> routing -> registry call -> encoding
//! (indented for `?pretty` and people's tools, then gzip from 128 KiB).

use std::collections::HashMap;
use std::convert::Infallible;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ferrokube_api::resources::{self, ResourceInfo};
use ferrokube_apimachinery::errors::{
    ApiError, FieldError, FieldErrorKind, FieldPath, go_is_print, go_quote,
};
use ferrokube_apimachinery::pretty;
use ferrokube_apimachinery::resource_version::query_bool;
use ferrokube_auth::{AuthRequest, Authenticator, request_attributes};
use ferrokube_registry::cache::CachedObject;
use ferrokube_registry::custom::CustomResource;
use ferrokube_registry::store::ScaleView;
use ferrokube_registry::{
    DeleteOptions, FieldValidation, ListParams, Part, PatchType, Registry, Resolved, UpdateInput,
    WatchItem, WatchParams, WriteOptions, Written,
};
use futures::FutureExt;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited, StreamBody};
use hyper::body::{Frame, Incoming};
use rustls_pki_types::CertificateDer;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::discovery;
use crate::metrics::Metrics;
use crate::output::{self, Printed, Target};

pub type Body = UnsyncBoxBody<Bytes, Infallible>;

pub(crate) struct State {
    pub registry: Arc<Registry>,
    pub authenticator: Arc<dyn Authenticator>,
    /// `--authentication-token-webhook-config-file`, asked after `authenticator`.
    pub token_webhook: Option<Arc<crate::token_webhook::TokenWebhook>>,
    pub authorizer: Arc<crate::authz_webhook::Authorization>,
    pub kubelet: Arc<crate::proxy::KubeletClient>,
    pub security: Arc<crate::security::ClusterState>,
    pub admission: Arc<crate::admission::Chain>,
    pub tokens: Option<Arc<crate::tokens::Tokens>>,
    pub advertise: String,
    pub max_body: usize,
    pub request_timeout: Duration,
    pub min_request_timeout: Duration,
    pub metrics: Arc<Metrics>,
    /// Turns true when the server is told to stop: watches end.
    pub shutdown: watch::Receiver<bool>,
    /// Turns true on SIGTERM, before the shutdown delay: `/readyz` fails.
    pub shutdown_initiated: watch::Receiver<bool>,
    pub lifecycle: Arc<crate::lifecycle::Lifecycle>,
    /// `--strict-transport-security-directives` as a header value (None: no header).
    pub strict_transport_security: Option<HeaderValue>,
    /// `--cors-allowed-origins`.
    pub cors: crate::cors::CorsOrigins,
    pub storage_check_timeouts: crate::health::StorageCheckTimeouts,
    /// Health checks added by the binary (`kms-providers`).
    pub health_checks: Vec<Arc<dyn crate::health::HealthCheck>>,
    /// The post-start hooks the health endpoints list.
    pub post_start_hooks: crate::health::PostStartHooks,
    pub openapi: crate::openapi::OpenApi,
    /// The audit policy and log (None: no audit events).
    pub audit: Option<Arc<crate::audit::Auditor>>,
    /// Remote APIServices: proxied group-versions and their discovery.
    pub aggregator: Arc<crate::aggregator::Aggregator>,
    /// API Priority and Fairness (None: off).
    pub flow_control: Option<Arc<crate::flowcontrol::Apf>>,
    /// The max-in-flight limits, used instead when priority and fairness is off (None:
    /// it is on, or both limits are 0).
    pub max_in_flight: Option<crate::maxinflight::MaxInFlight>,
    /// `--runtime-config`: the built-in APIs served.
    pub enablement: Arc<crate::ApiEnablement>,
}

impl State {
    /// The aggregated discovery version the client asked for, if this server serves it.
    pub(crate) fn aggregated_discovery(&self, accept: Option<&str>) -> Option<&'static str> {
        discovery::wants_aggregated(accept, !self.security.features.remove_discovery_beta)
    }

    /// Who made a request: the authenticator chain, then the token webhook.
    pub(crate) async fn authenticate(
        &self,
        request: &AuthRequest<'_>,
    ) -> Result<Option<ferrokube_auth::UserInfo>, ferrokube_auth::AuthError> {
        crate::token_webhook::authenticate(
            self.authenticator.as_ref(),
            self.token_webhook.as_ref(),
            request,
        )
        .await
    }
}

fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).boxed_unsync()
}

pub(crate) fn respond(
    code: StatusCode,
    content_type: &str,
    body: impl Into<Bytes>,
) -> Response<Body> {
    respond_body(code, content_type, full(body))
}

pub(crate) fn respond_body(code: StatusCode, content_type: &str, body: Body) -> Response<Body> {
    let mut r = Response::new(body);
    *r.status_mut() = code;
    if let Ok(v) = HeaderValue::from_str(content_type) {
        r.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    r
}

fn json_response(code: StatusCode, v: &Value) -> Response<Body> {
    respond(
        code,
        "application/json",
        serde_json::to_vec(v).unwrap_or_default(),
    )
}

/// The Status an error answer carries, kept with the answer so that [`serve`] can write
/// it in the form the client asked for ([`in_error_form`]).
#[derive(Clone)]
struct ErrorStatus(Value);

pub(crate) fn error_response(e: &ApiError) -> Response<Body> {
    let code = StatusCode::from_u16(e.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let status = output::status_value(e);
    let mut r = json_response(code, &status);
    r.extensions_mut().insert(ErrorStatus(status));
    if let Some(secs) = e.details.as_ref().and_then(|d| d.retry_after_seconds)
        && let Ok(v) = HeaderValue::from_str(&secs.to_string())
    {
        r.headers_mut().insert(header::RETRY_AFTER, v);
    }
    r
}

/// Entry point of every request: panic recovery and metrics around [`handle`].
/// The answer to a HEAD request: its headers, without the body (HTTP/1 leaves the
/// body out itself; an HTTP/2 stream that sends one is reset as a protocol error).
pub(crate) fn headers_only(response: Response<Body>) -> Response<Body> {
    let (parts, _) = response.into_parts();
    Response::from_parts(parts, full(Bytes::new()))
}

pub(crate) async fn serve(
    state: Arc<State>,
    peer: std::net::SocketAddr,
    peer_certs: Arc<Vec<CertificateDer<'static>>>,
    mut req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    if let Some(refused) = state.lifecycle.refusal(req.uri().path(), req.headers()) {
        return Ok(with_hsts(&state, refused));
    }
    let cors = state.cors.headers_for(req.headers());
    if let Some(answer) = cors
        .as_ref()
        .and_then(|h| crate::cors::preflight(req.method(), h))
    {
        return Ok(with_hsts(&state, answer));
    }
    let start = Instant::now();
    let attrs = request_attributes(req.method().as_str(), req.uri().path(), req.uri().query());
    let audit = crate::audit::RequestAudit::begin(
        state.audit.as_ref(),
        &req,
        &attrs,
        peer,
        !peer_certs.is_empty(),
    );
    req.extensions_mut().insert(audit.clone());
    let long_running = crate::audit::is_long_running(&attrs);
    let labels = crate::metrics::RequestLabels::of(
        &attrs,
        req.method().as_str(),
        req.headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok()),
        // Only discovery's roots can be aggregated: no Accept parse on other requests.
        matches!(attrs.path.as_str(), "/api" | "/apis")
            && state
                .aggregated_discovery(
                    req.headers()
                        .get(header::ACCEPT)
                        .and_then(|v| v.to_str().ok()),
                )
                .is_some(),
        req.uri().query(),
    );
    // What a termination of a request the request metrics leave out is counted under.
    let uninstrumented = labels.is_none().then(|| {
        crate::metrics::RequestLabels::non_resource_path(&attrs.path, req.method().as_str())
    });
    let accepts_gzip = accepts_gzip(req.headers());
    // Read only if the answer is an error.
    let accept = req.headers().get(header::ACCEPT).cloned();
    // Streams (watches, logs, proxied connections) are never re-encoded.
    let pretty_path = (!long_running
        && pretty::wants_pretty(
            req.uri().query(),
            req.headers()
                .get(header::USER_AGENT)
                .and_then(|v| v.to_str().ok()),
        ))
    .then(|| req.uri().path().to_string());
    let deadline = if long_running {
        Ok(None)
    } else {
        request_timeout(req.uri().query(), state.request_timeout)
    };
    let handled = async {
        let deadline = deadline?;
        // Boxed once: the request's state machine is large (every route's futures), and
        // each wrapper below would otherwise copy it whole as it moves it.
        let handled = AssertUnwindSafe(Box::pin(handle(&state, &peer_certs, req, attrs, &audit)))
            .catch_unwind();
        match deadline {
            Some(timeout) => tokio::time::timeout(timeout, handled).await.map_err(|_| {
                ApiError::timeout(
                    "request did not complete within requested timeout - context deadline exceeded",
                    0,
                )
            }),
            None => Ok(handled.await),
        }
    };
    let (handled, excluded) = crate::metrics::with_excluded_latency(handled).await;
    // Its own request timeout (504), or a refused seat or slot (429).
    let terminated = match &handled {
        Err(e) => e.code == 504,
        Ok(Ok(r)) => r.extensions().get::<crate::metrics::Terminated>().is_some(),
        Ok(Err(_)) => false,
    };
    let resp = match handled {
        Err(e) => {
            let r = in_error_form(error_response(&e), accept.as_ref());
            audit.finish(r, long_running, None).await
        }
        Ok(Ok(r)) => {
            audit
                .finish(in_error_form(r, accept.as_ref()), long_running, None)
                .await
        }
        Ok(Err(panic)) => {
            let msg = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            tracing::error!(panic = %msg, "request handler panicked");
            let r = in_error_form(
                error_response(&ApiError::internal(format!(
                    "an internal error occurred: {msg}"
                ))),
                accept.as_ref(),
            );
            audit.finish(r, long_running, Some(&msg)).await
        }
    };
    let resp = match &pretty_path {
        Some(path) => pretty_response(resp, path).await,
        None => resp,
    };
    let resp = if accepts_gzip {
        gzip_response(resp).await
    } else {
        resp
    };
    if terminated && let Some(l) = labels.as_ref().or(uninstrumented.as_ref()) {
        state.metrics.terminated(l, resp.status().as_u16());
    }
    let resp = match labels {
        // Streams (watches, logs, connections) count when they end, with their whole
        // duration, as upstream's handlers return only then.
        Some(labels) if long_running => {
            let end = crate::metrics::ObservedAtEnd::begin(
                state.metrics.clone(),
                labels,
                start,
                resp.status().as_u16(),
            );
            resp.map(|body| end.around(body))
        }
        Some(labels) => {
            state.metrics.observe(
                &labels,
                crate::metrics::RequestOutcome {
                    code: resp.status().as_u16(),
                    seconds: start.elapsed().as_secs_f64(),
                    excluded_seconds: excluded.as_secs_f64(),
                    response_bytes: hyper::body::Body::size_hint(resp.body()).exact(),
                },
            );
            resp
        }
        None => resp,
    };
    let mut resp = with_hsts(&state, resp);
    if let Some(cors) = cors {
        resp.headers_mut().extend(cors);
    }
    Ok(resp)
}

/// An error answer in the form the client's `Accept` names first (protobuf for
/// client-go's typed clients), as upstream writes every error (`ErrorNegotiated`);
/// other answers as they are.
fn in_error_form(mut resp: Response<Body>, accept: Option<&HeaderValue>) -> Response<Body> {
    if resp.extensions().get::<ErrorStatus>().is_none() {
        return resp;
    }
    let form = output::error_form(accept.and_then(|v| v.to_str().ok()));
    if form == Target::Json {
        return resp;
    }
    let Some(ErrorStatus(status)) = resp.extensions_mut().remove::<ErrorStatus>() else {
        return resp;
    };
    let (written, body) = output::encode(form, &status);
    let (mut parts, _) = resp.into_parts();
    if let Ok(v) = HeaderValue::from_str(output::content_type(written)) {
        parts.headers.insert(header::CONTENT_TYPE, v);
    }
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, full(body))
}

/// `--strict-transport-security-directives` on every answer, as upstream's `WithHSTS`.
fn with_hsts(state: &State, mut resp: Response<Body>) -> Response<Body> {
    if let Some(v) = &state.strict_transport_security {
        resp.headers_mut()
            .insert(header::STRICT_TRANSPORT_SECURITY, v.clone());
    }
    resp
}

/// `/`: every path this server lists, sorted, as upstream's index (always indented,
/// `WriteRawJSON`). Authorization decides who sees it: no default role grants `/`.
fn root_paths(state: &State) -> Vec<u8> {
    let mut paths = discovery::api_paths(
        &state.enablement,
        &state.registry.custom().served(),
        &state.aggregator.discovery_groups(true),
    );
    paths.extend(crate::health::listed_paths(
        &state.health_checks,
        &state.post_start_hooks,
    ));
    paths.extend(
        [
            "/metrics",
            "/openapi/v2",
            "/openapi/v3",
            "/openapi/v3/",
            "/version",
        ]
        .map(String::from),
    );
    if let Some(tokens) = &state.tokens {
        paths.push("/openid/v1/jwks".into());
        if crate::tokens::openid_configuration(tokens).is_some() {
            paths.push("/.well-known/openid-configuration".into());
        }
    }
    paths.sort();
    paths.dedup();
    serde_json::to_vec_pretty(&json!({ "paths": paths })).unwrap_or_default()
}

/// Marks an answer relayed from another server (an aggregated API, a proxied service or
/// pod): its body is passed on as it came, never re-encoded here.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Relayed;

/// Documents upstream writes as they are stored, pretty or not: the OpenAPI documents,
/// the service-account issuer's discovery and keys, and `/version` (always indented).
fn served_as_stored(path: &str) -> bool {
    path.starts_with("/openapi/")
        || path.starts_with("/.well-known/")
        || path.starts_with("/openid/")
        || path == "/version"
        || path == "/version/"
}

/// This server's JSON answer indented for a person's tool ([`pretty::wants_pretty`]):
/// objects, lists, tables, discovery and `Status` errors, as upstream's serializer
/// does. A relayed or compressed body, and a document served as stored, stay as they
/// are.
async fn pretty_response(resp: Response<Body>, path: &str) -> Response<Body> {
    let json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| output::media_essence(ct).eq_ignore_ascii_case("application/json"));
    if !json
        || (resp.status().is_success() && served_as_stored(path))
        || resp.extensions().get::<Relayed>().is_some()
        || resp.headers().contains_key(header::CONTENT_ENCODING)
    {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let Ok(collected) = body.collect().await;
    let bytes = collected.to_bytes();
    let body = pretty::indent_json(&bytes).map_or(bytes, Bytes::from);
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, full(body))
}

/// Upstream compresses responses of at least 128 KiB when the client accepts gzip
/// (`defaultGzipThresholdBytes`), at level 1; streams (watches) are never compressed.
const GZIP_THRESHOLD: u64 = 128 * 1024;

pub(crate) fn accepts_gzip(headers: &http::HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|enc| {
            let mut parts = enc.split(';');
            let name = parts.next().unwrap_or("").trim();
            let q_zero = parts.any(|p| {
                p.trim()
                    .strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    == Some(0.0)
            });
            name.eq_ignore_ascii_case("gzip") && !q_zero
        })
}

async fn gzip_response(resp: Response<Body>) -> Response<Body> {
    use hyper::body::Body as _;
    let big = resp
        .body()
        .size_hint()
        .exact()
        .is_some_and(|n| n >= GZIP_THRESHOLD);
    if !big || resp.headers().contains_key(header::CONTENT_ENCODING) {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let Ok(collected) = body.collect().await;
    let bytes = collected.to_bytes();
    let compressed = tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let mut enc = flate2::write::GzEncoder::new(
            Vec::with_capacity(bytes.len() / 4),
            flate2::Compression::new(1),
        );
        enc.write_all(&bytes).and_then(|_| enc.finish())
    })
    .await;
    match compressed {
        Ok(Ok(gz)) => {
            parts
                .headers
                .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
            parts.headers.remove(header::CONTENT_LENGTH);
            parts
                .headers
                .append(header::VARY, HeaderValue::from_static("Accept-Encoding"));
            Response::from_parts(parts, full(gz))
        }
        _ => {
            let mut r = error_response(&ApiError::internal("compressing the response failed"));
            *r.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
            r
        }
    }
}

/// How long a request that is not long-running may take: `?timeout=` (a Go duration)
/// when it is positive and shorter than `--request-timeout`, else `--request-timeout`
/// (upstream's `WithRequestDeadline`); `None`: no limit (both zero). A malformed
/// `?timeout=` is a 400.
fn request_timeout(query: Option<&str>, server: Duration) -> Result<Option<Duration>, ApiError> {
    let Some(value) = form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .find(|(k, _)| k == "timeout")
        .map(|(_, v)| v.into_owned())
        .filter(|v| !v.is_empty())
    else {
        return Ok(Some(server).filter(|t| !t.is_zero()));
    };
    // Go reads a negative duration too; it asks for no timeout of the client's own.
    let negative = value.starts_with('-');
    let asked = ferrokube_apimachinery::duration::parse_go_duration(
        value.strip_prefix('-').unwrap_or(&value),
    )
    .map_err(|e| {
        ApiError::bad_request(format!(
            "invalid timeout specified in the request URL - time: {e}"
        ))
    })?;
    let asked = Some(asked).filter(|t| !negative && !t.is_zero());
    Ok(match asked {
        Some(asked) if server.is_zero() || asked < server => Some(asked),
        _ => Some(server).filter(|t| !t.is_zero()),
    })
}

/// How long a watch runs: `timeoutSeconds` when positive, no time at all when negative
/// (upstream's timer fires at once), else a random time between `--min-request-timeout`
/// and twice that, so that watches begun together do not all end together (upstream's
/// `GetTimeoutForWatch`); `None` when both are zero.
pub(crate) fn watch_timeout(
    q: &HashMap<String, String>,
    min_request_timeout: Duration,
) -> Option<Duration> {
    // A malformed value was refused before, as a 400.
    match q.get("timeoutSeconds").and_then(|t| t.parse::<i64>().ok()) {
        Some(t) if t > 0 => Some(Duration::from_secs(t.unsigned_abs())),
        Some(t) if t < 0 => Some(Duration::ZERO),
        _ if min_request_timeout.is_zero() => None,
        _ => Some(min_request_timeout.mul_f64(1.0 + random_fraction())),
    }
}

/// A random number in [0, 1), from std's per-process hash keys (no RNG crate for the
/// few draws the server makes: watch timeouts, `--goaway-chance`).
pub(crate) fn random_fraction() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    (random >> 11) as f64 / (1u64 << 53) as f64
}

fn query_map(q: Option<&str>) -> HashMap<String, String> {
    form_urlencoded::parse(q.unwrap_or("").as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// `attrs` are the request's authorization attributes as [`serve`] worked them out from
/// the method, path and query, still without the user.
async fn handle(
    state: &State,
    peer_certs: &[CertificateDer<'static>],
    mut req: Request<Incoming>,
    mut attrs: ferrokube_auth::Attributes,
    audit: &crate::audit::RequestAudit,
) -> Response<Body> {
    let path = req.uri().path().to_string();
    let q = query_map(req.uri().query());
    // Authentication (anonymous requests, when allowed, are authorized like any
    // other: RBAC grants health and version through system:public-info-viewer).
    let user = match state
        .authenticate(&AuthRequest {
            headers: req.headers(),
            peer_certificates: peer_certs,
            path: &path,
        })
        .await
    {
        Ok(Some(u)) => u,
        Ok(None) | Err(_) => {
            audit.authentication_failed();
            return error_response(&ApiError::unauthorized("Unauthorized"));
        }
    };
    // As upstream's authentication filter: credentials are not needed past this point,
    // and no handler that forwards the request (proxies) should carry them on.
    state.authenticator.clear_credentials(req.headers_mut());
    req.headers_mut().remove(header::AUTHORIZATION);
    // The policy sees the authenticated user, as upstream's audit filter runs before
    // impersonation.
    if !audit.authenticated(&user).await {
        // Upstream's error when a blocking-strict backend fails the first stage, as a
        // Status.
        return error_response(&ApiError::internal("failed to store audit event"));
    }
    let user = match crate::reviews::impersonate(&state.authorizer, req.headers(), &user).await {
        Ok(Some(impersonated)) => {
            audit.impersonated(&impersonated);
            impersonated
        }
        Ok(None) => user,
        Err(e) => return error_response(&e),
    };
    attrs.user = user;
    // Priority and fairness, or else max-in-flight, between authentication and
    // authorization as upstream's filter chain has them: the request waits here for a
    // seat of its priority level (or takes a slot of its kind), which it holds until
    // its response starts.
    let long_running = crate::audit::is_long_running(&attrs);
    let (flow_headers, _seat, _slot) = if let Some(apf) = &state.flow_control {
        match crate::metrics::exclude_from_sli(apf.admit(&attrs, req.uri().query(), long_running))
            .await
        {
            crate::flowcontrol::Admission::Unlimited => (None, None, None),
            crate::flowcontrol::Admission::Admitted {
                flow_schema_uid,
                priority_level_uid,
                seat,
            } => (
                Some((flow_schema_uid, priority_level_uid)),
                Some(seat),
                None,
            ),
            crate::flowcontrol::Admission::Rejected {
                flow_schema_uid,
                priority_level_uid,
            } => {
                let mut r = error_response(&crate::flowcontrol::too_many_requests());
                flow_control_headers(&mut r, &flow_schema_uid, &priority_level_uid);
                r.extensions_mut().insert(crate::metrics::Terminated);
                return r;
            }
        }
    } else if let Some(limits) = &state.max_in_flight {
        match limits.admit(&attrs, long_running) {
            crate::maxinflight::Admission::Unlimited => (None, None, None),
            crate::maxinflight::Admission::Admitted(slot) => (None, None, slot),
            // Upstream's max-in-flight and priority-and-fairness filters answer a
            // refused request alike.
            crate::maxinflight::Admission::Rejected => {
                let mut r = error_response(&crate::flowcontrol::too_many_requests());
                r.extensions_mut().insert(crate::metrics::Terminated);
                return r;
            }
        }
    } else {
        (None, None, None)
    };
    let _executing = (!long_running).then(|| {
        state
            .metrics
            .executing(crate::maxinflight::is_mutating(&attrs.verb))
    });
    // An admitted watch counts, while it streams, toward the seats of the writes whose
    // events it will get.
    let watch = match (&state.flow_control, &_seat) {
        (Some(apf), Some(_)) => apf.track_watch(&attrs, req.uri().query()),
        _ => None,
    };
    let mut response = authorized(state, req, attrs, path, &q, audit).await;
    if let Some((fs, pl)) = &flow_headers {
        flow_control_headers(&mut response, fs, pl);
    }
    match watch {
        Some(watch) => response.map(|body| {
            ferrokube_component_base::metrics::held_body::HeldBody::new(body, watch).boxed_unsync()
        }),
        None => response,
    }
}

/// Upstream's `X-Kubernetes-PF-FlowSchema-UID` and `X-Kubernetes-PF-PriorityLevel-UID`.
fn flow_control_headers(r: &mut Response<Body>, flow_schema_uid: &str, priority_level_uid: &str) {
    for (name, value) in [
        (crate::flowcontrol::FLOW_SCHEMA_UID_HEADER, flow_schema_uid),
        (
            crate::flowcontrol::PRIORITY_LEVEL_UID_HEADER,
            priority_level_uid,
        ),
    ] {
        if let Ok(v) = HeaderValue::from_str(value) {
            r.headers_mut().insert(name, v);
        }
    }
}

/// Authorization and then the request itself.
async fn authorized(
    state: &State,
    mut req: Request<Incoming>,
    attrs: ferrokube_auth::Attributes,
    path: String,
    q: &HashMap<String, String>,
    audit: &crate::audit::RequestAudit,
) -> Response<Body> {
    let crate::authz_webhook::Verdict { decision, error } = state.authorizer.verdict(&attrs).await;
    // A failure on the way and nothing that allowed: 500, as upstream's filter.
    if let Some(error) = error.filter(|_| !decision.is_allowed()) {
        audit
            .annotations()
            .add("authorization.k8s.io/reason", "internal error");
        return error_response(&ApiError::internal(error));
    }
    // Upstream's `authorization.k8s.io/decision` and `/reason` annotations.
    let verdict = if decision.is_allowed() {
        "allow"
    } else {
        "forbid"
    };
    audit
        .annotations()
        .add("authorization.k8s.io/decision", verdict);
    audit
        .annotations()
        .add("authorization.k8s.io/reason", decision.reason());
    if !decision.is_allowed() {
        return error_response(&crate::security::forbidden(&attrs, &decision));
    }
    // The user reaches admission checks through the request.
    req.extensions_mut().insert(attrs.user);
    if crate::health::is_health_path(&path) {
        return match crate::health::serve(state, &path, req.uri().query()).await {
            Some(r) => r,
            None => error_response(&not_found_path(&path)),
        };
    }
    if let "/version" | "/version/" = path.as_str() {
        return respond(
            StatusCode::OK,
            "application/json",
            discovery::version_document(),
        );
    }
    if req.method() == Method::GET
        && let Some(r) = state
            .openapi
            .serve(&path, req.uri().query(), req.headers())
            .await
    {
        return r.unwrap_or_else(|e| error_response(&e));
    }
    match route(state, req, &path, q).await {
        Ok(r) => r,
        Err(e) => error_response(&e),
    }
}

async fn route(
    state: &State,
    req: Request<Incoming>,
    path: &str,
    q: &HashMap<String, String>,
) -> Result<Response<Body>, ApiError> {
    let accept = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    if let ["apis", g, v, ..] = segs.as_slice()
        && let Some(remote) = state.aggregator.remote(g, v)
    {
        return state.aggregator.proxy(&state.registry, &remote, req).await;
    }
    if let Some((ns, name, kind)) = crate::proxy::proxied_pod_subresource(&segs) {
        if !state.enablement.serves_resource("", "v1", "pods") {
            return Err(not_found_path(path));
        }
        return crate::proxy::pod_subresource(state, req, ns, name, kind).await;
    }
    if let Some((group, kind, ns)) = crate::reviews::review_path(&segs) {
        let plural = segs.last().copied().unwrap_or_default();
        if !state.enablement.serves_resource(group, "v1", plural) {
            return Err(not_found_path(path));
        }
        if req.method() != Method::POST {
            // Discovery lists the reviews as create-only; upstream answers 405.
            return Err(ApiError::method_not_supported(
                group,
                plural,
                &request_verb(&req),
            ));
        }
        return review(state, req, group, kind, ns, accept.as_deref()).await;
    }
    if let Some(name) = crate::componentstatus::componentstatus_path(&segs)
        && state
            .enablement
            .serves_resource("", "v1", "componentstatuses")
    {
        let verb = request_verb(&req);
        return crate::componentstatus::serve(state, &verb, name, q, accept.as_deref()).await;
    }
    if let Some((ns, name)) = crate::tokens::token_request_path(req.method(), &segs)
        && state
            .enablement
            .serves_resource("", "v1", "serviceaccounts")
    {
        let tokens = state.tokens.clone().ok_or_else(|| not_found_path(path))?;
        let target = output::negotiate(accept.as_deref(), true)?;
        let headers = req.headers().clone();
        let user = req
            .extensions()
            .get::<ferrokube_auth::UserInfo>()
            .cloned()
            .unwrap_or_default();
        let (body, _) = read_body(state, req).await?;
        let answer =
            crate::tokens::create(&tokens, &state.authorizer, &user, ns, name, &headers, &body)
                .await?;
        return Ok(unstored_answer(target, StatusCode::CREATED, &answer));
    }
    if req.method() == Method::GET
        && let Some(tokens) = &state.tokens
    {
        match segs.as_slice() {
            [".well-known", "openid-configuration"] => {
                return crate::tokens::openid_configuration(tokens)
                    .map(|v| json_response(StatusCode::OK, &v))
                    .ok_or_else(|| not_found_path(path));
            }
            ["openid", "v1", "jwks"] => {
                let mut r = json_response(StatusCode::OK, &tokens.authenticator.jwks());
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/jwk-set+json"),
                );
                return Ok(r);
            }
            _ => {}
        }
    }
    // Upstream's flow-control dumps, unlisted handlers that answer any method.
    if let Some(apf) = &state.flow_control
        && let Some(table) = apf.debug_dump(path, req.uri().query())
    {
        return Ok(respond(
            StatusCode::OK,
            "text/plain; charset=utf-8",
            table.into_bytes(),
        ));
    }
    let get = req.method() == Method::GET;
    match segs.as_slice() {
        [] | ["index.html"] if get => {
            return Ok(respond(
                StatusCode::OK,
                "application/json",
                root_paths(state),
            ));
        }
        ["metrics"] if get => {
            let mut page = state.metrics.render();
            crate::metrics::render_storage_objects(&state.registry, &mut page);
            state.aggregator.render_metrics(&mut page);
            if let Some(apf) = &state.flow_control {
                apf.render_metrics(&mut page);
            }
            return Ok(respond(StatusCode::OK, "text/plain; version=0.0.4", page));
        }
        // Upstream installs `/api` only with the core group, so turning core/v1 off
        // through --runtime-config leaves nothing there.
        ["api"] if get && !state.enablement.serves_group_version("", "v1") => {
            return Err(not_found_path(path));
        }
        ["api"] if get => {
            return Ok(match state.aggregated_discovery(accept.as_deref()) {
                Some(version) => aggregated(state, true, version),
                None => json_response(StatusCode::OK, &discovery::api_versions(&state.advertise)),
            });
        }
        ["apis"] if get => {
            return Ok(match state.aggregated_discovery(accept.as_deref()) {
                Some(version) => aggregated(state, false, version),
                None => json_response(
                    StatusCode::OK,
                    &discovery::api_group_list(
                        &state.enablement,
                        &state.registry.custom().served(),
                        &state.aggregator.discovery_groups(true),
                    ),
                ),
            });
        }
        ["api", "v1"] if get => {
            return discovery::resource_list(
                &state.enablement,
                "",
                "v1",
                &state.registry.custom().served(),
                state.security.features.storage_version_hash,
            )
            .map(|v| json_response(StatusCode::OK, &v))
            .ok_or_else(|| not_found_path(path));
        }
        ["apis", g] if get => {
            let remote = state.aggregator.discovery_groups(true);
            return discovery::api_group(
                &state.enablement,
                g,
                &state.registry.custom().served(),
                &remote,
            )
            .map(|v| json_response(StatusCode::OK, &v))
            .ok_or_else(|| not_found_path(path));
        }
        ["apis", g, v] if get => {
            return discovery::resource_list(
                &state.enablement,
                g,
                v,
                &state.registry.custom().served(),
                state.security.features.storage_version_hash,
            )
            .map(|v| json_response(StatusCode::OK, &v))
            .ok_or_else(|| not_found_path(path));
        }
        ["api", "v1", "watch", rest @ ..] if get => {
            return deprecated_watch(state, req, ("", "v1"), rest, q, accept.as_deref(), path)
                .await;
        }
        ["apis", g, v, "watch", rest @ ..] if get => {
            return deprecated_watch(state, req, (g, v), rest, q, accept.as_deref(), path).await;
        }
        ["api", "v1", rest @ ..] => {
            let r = parse_resource_path("", "v1", rest, |g, v, p| resolve_info(state, g, v, p))
                .ok_or_else(|| not_found_path(path))?;
            return resource(state, req, r, q, accept.as_deref()).await;
        }
        ["apis", g, v, rest @ ..] => {
            let r = parse_resource_path(g, v, rest, |g, v, p| resolve_info(state, g, v, p))
                .ok_or_else(|| not_found_path(path))?;
            return resource(state, req, r, q, accept.as_deref()).await;
        }
        _ => {}
    }
    Err(not_found_path(path))
}

/// A served resource, built-in or custom.
fn resolve_info(
    state: &State,
    group: &str,
    version: &str,
    plural: &str,
) -> Option<&'static ResourceInfo> {
    match resources::lookup(group, version, plural) {
        Some(builtin) => state
            .enablement
            .serves_resource(group, version, plural)
            .then_some(builtin),
        None => Some(state.registry.resolve(group, version, plural)?.info),
    }
}

/// The request's verb as authorization saw it (`list`, `watch`, `deletecollection`...).
fn request_verb(req: &Request<Incoming>) -> String {
    request_attributes(req.method().as_str(), req.uri().path(), req.uri().query()).verb
}

async fn review(
    state: &State,
    req: Request<Incoming>,
    group: &str,
    kind: &str,
    ns: Option<&str>,
    accept: Option<&str>,
) -> Result<Response<Body>, ApiError> {
    let target = output::negotiate(accept, true)?;
    let user = req
        .extensions()
        .get::<ferrokube_auth::UserInfo>()
        .cloned()
        .unwrap_or_default();
    let headers = req.headers().clone();
    let (body, _) = read_body(state, req).await?;
    let answer = crate::reviews::answer(state, kind, group, ns, &user, &headers, &body).await?;
    Ok(unstored_answer(target, StatusCode::CREATED, &answer))
}

fn aggregated(state: &State, legacy: bool, version: &str) -> Response<Body> {
    let mut r = json_response(
        StatusCode::OK,
        &discovery::aggregated(
            &state.enablement,
            legacy,
            version,
            &state.registry.custom().served(),
            &state.aggregator.discovery_groups(false),
        ),
    );
    let content_type = if version == "v2" {
        discovery::AGGREGATED_V2
    } else {
        discovery::AGGREGATED_V2BETA1
    };
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r.headers_mut()
        .insert(header::VARY, HeaderValue::from_static("Accept"));
    r
}

fn not_found_path(path: &str) -> ApiError {
    ApiError {
        code: 404,
        reason: "NotFound".into(),
        message: format!("the server could not find the requested resource ({path})"),
        details: None,
    }
}

struct ResourcePath {
    info: &'static ResourceInfo,
    ns: Option<String>,
    name: Option<String>,
    sub: Option<String>,
}

/// The resource a path under `/api/v1` or `/apis/<group>/<version>` names; `lookup`
/// finds a resource by group, version and plural.
fn parse_resource_path(
    group: &str,
    version: &str,
    segs: &[&str],
    lookup: impl Fn(&str, &str, &str) -> Option<&'static ResourceInfo>,
) -> Option<ResourcePath> {
    // The legacy `bindings` collection (`kubectl create -f` of a Binding) is the pod's
    // `binding` subresource with the pod named in the body.
    if let ("", "v1", ["namespaces", ns, "bindings"]) = (group, version, segs) {
        return Some(ResourcePath {
            info: lookup("", "v1", "pods")?,
            ns: Some(ns.to_string()),
            name: None,
            sub: Some("binding".to_string()),
        });
    }
    if segs.len() >= 3
        && segs[0] == "namespaces"
        && let Some(info) = lookup(group, version, segs[2]).filter(|i| i.namespaced)
    {
        if segs.len() > 5 {
            return None;
        }
        return Some(ResourcePath {
            info,
            ns: Some(segs[1].to_string()),
            name: segs.get(3).map(|s| s.to_string()),
            sub: segs.get(4).map(|s| s.to_string()),
        });
    }
    let info = lookup(group, version, segs.first()?)?;
    if segs.len() > 3 {
        return None;
    }
    Some(ResourcePath {
        info,
        ns: None,
        name: segs.get(1).map(|s| s.to_string()),
        sub: segs.get(2).map(|s| s.to_string()),
    })
}

/// Upstream's deprecated watch paths (`/api/v1/watch/namespaces/default/pods` and
/// `.../pods/web`, still served and documented): a watch of the collection, narrowed to
/// the named object by a `metadata.name` field selector, as upstream's list handler
/// narrows it.
async fn deprecated_watch(
    state: &State,
    req: Request<Incoming>,
    (group, version): (&str, &str),
    segs: &[&str],
    q: &HashMap<String, String>,
    accept: Option<&str>,
    path: &str,
) -> Result<Response<Body>, ApiError> {
    let mut r = parse_resource_path(group, version, segs, |g, v, p| resolve_info(state, g, v, p))
        .filter(|r| r.sub.is_none())
        .ok_or_else(|| not_found_path(path))?;
    let mut q = q.clone();
    q.insert("watch".into(), "true".into());
    if let Some(name) = r.name.take() {
        let by_name = format!(
            "metadata.name={}",
            ferrokube_apimachinery::fields::escape_value(&name)
        );
        let selector = match q.get("fieldSelector").filter(|s| !s.trim().is_empty()) {
            Some(given) => format!("{given},{by_name}"),
            None => by_name,
        };
        q.insert("fieldSelector".into(), selector);
    }
    resource(state, req, r, &q, accept).await
}

fn method_not_supported(info: &ResourceInfo, verb: &str) -> ApiError {
    ApiError::method_not_supported(info.group, info.plural, verb)
}

async fn read_body(state: &State, req: Request<Incoming>) -> Result<(Bytes, String), ApiError> {
    let ct = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_string();
    let audit = req
        .extensions()
        .get::<crate::audit::RequestAudit>()
        .cloned();
    let too_large = || ApiError::request_entity_too_large("limit is 3145728");
    if let Some(len) = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        && len > state.max_body
    {
        return Err(too_large());
    }
    let body = Limited::new(req.into_body(), state.max_body)
        .collect()
        .await
        .map_err(|e| {
            if e.downcast_ref::<LengthLimitError>().is_some() {
                too_large()
            } else {
                ApiError::bad_request(format!("reading the request body: {e}"))
            }
        })?
        .to_bytes();
    if let Some(audit) = audit {
        audit.request_body(&body, &ct);
    }
    Ok((body, ct))
}

pub(crate) fn decode_body(body: &[u8], content_type: &str, kind: &str) -> Result<Value, ApiError> {
    decode_body_noting_duplicates(body, content_type, kind).map(|(object, _)| object)
}

/// The body's object of `kind`, and (for JSON and YAML, for `fieldValidation`) the keys
/// it has twice.
fn decode_body_noting_duplicates(
    body: &[u8],
    content_type: &str,
    kind: &str,
) -> Result<(Value, Vec<String>), ApiError> {
    // Upstream's `transformDecodeError` for a body whose kind could not be read.
    let unrecognized = |e: String| {
        ApiError::bad_request(format!(
            "the object provided is unrecognized (must be of type {kind}): {e} ({})",
            summarize_data(body, 30)
        ))
    };
    let essence = output::media_essence(content_type);
    match essence {
        "application/yaml" => crate::dupes::parse_yaml_noting_duplicates(body)
            .map_err(|e| unrecognized(format!("error converting YAML to JSON: yaml: {e}"))),
        _ if is_json(content_type) => crate::dupes::parse_noting_duplicates(body)
            .map_err(|e| unrecognized(format!("couldn't get version/kind; json parse error: {e}"))),
        // Typed built-in objects from kubectl and client-go controllers.
        ferrokube_protobuf::MEDIA_TYPE => ferrokube_protobuf::decode(body)
            .map(|(_, object)| (object, Vec::new()))
            .map_err(|e| unrecognized(e.to_string())),
        _ => Err(ApiError::unsupported_media_type(&[
            "application/json",
            "application/yaml",
            ferrokube_protobuf::MEDIA_TYPE,
        ])),
    }
}

/// The start of a body as an error message shows it (upstream's `summarizeData`): as
/// text when it opens a JSON object, else in hex; cut at `max` bytes.
fn summarize_data(data: &[u8], max: usize) -> String {
    let (shown, more) = match data.len() > max {
        true => (&data[..max], " ..."),
        false => (data, ""),
    };
    match data.first() {
        None => "<empty>".into(),
        Some(b'{') => format!("{}{more}", String::from_utf8_lossy(shown)),
        Some(_) => {
            let hex: String = shown.iter().map(|b| format!("{b:02x}")).collect();
            format!("{hex}{more}")
        }
    }
}

/// Whether a request body of this `Content-Type` is read as JSON.
fn is_json(content_type: &str) -> bool {
    matches!(
        output::media_essence(content_type),
        "application/json" | "" | "*/*"
    )
}

/// Which write a request's options belong to (upstream's `CreateOptions`,
/// `UpdateOptions` and `PatchOptions`), as their errors name it.
#[derive(Clone, Copy)]
enum WriteKind {
    Create,
    Update,
    Patch { apply: bool },
}

/// A write's options, checked as upstream's `ValidateCreateOptions`,
/// `ValidateUpdateOptions` and `ValidatePatchOptions` check them: every problem in one
/// 422 (an apply needs a manager and only an apply may force; a manager of at most 128
/// bytes, all printable; `dryRun` only `All`; a known `fieldValidation`).
fn write_options(q: &HashMap<String, String>, kind: WriteKind) -> Result<WriteOptions, ApiError> {
    let mut errs = Vec::new();
    let field_manager = q.get("fieldManager").map(String::as_str).unwrap_or("");
    let manager_path = FieldPath::new("fieldManager");
    if let WriteKind::Patch { apply } = kind {
        if apply && field_manager.is_empty() {
            errs.push(FieldError::required(
                &manager_path,
                "is required for apply patch",
            ));
        } else if !apply && q.contains_key("force") {
            errs.push(FieldError::forbidden(
                &FieldPath::new("force"),
                "may not be specified for non-apply patch",
            ));
        }
    }
    if field_manager.len() > 128 {
        errs.push(FieldError::too_long(&manager_path, Some(128)));
    }
    for (at, c) in field_manager.char_indices() {
        if !go_is_print(c) {
            errs.push(FieldError::invalid(
                &manager_path,
                field_manager,
                format!(
                    "invalid character U+{:04X} (at position {at})",
                    u32::from(c)
                ),
            ));
        }
    }
    let dry_run = q.get("dryRun").map(String::as_str);
    errs.extend(dry_run.and_then(|v| unsupported_dry_run(&[v])));
    let field_validation = q.get("fieldValidation").map(String::as_str);
    let parsed_validation = FieldValidation::parse(field_validation);
    if let (Some(v), Err(_)) = (field_validation, &parsed_validation) {
        errs.push(FieldError::not_supported(
            &FieldPath::new("fieldValidation"),
            v,
            &["", "Ignore", "Strict", "Warn"],
        ));
    }
    if !errs.is_empty() {
        let kind = match kind {
            WriteKind::Create => "CreateOptions",
            WriteKind::Update => "UpdateOptions",
            WriteKind::Patch { .. } => "PatchOptions",
        };
        return Err(ApiError::invalid("meta.k8s.io", kind, "", errs));
    }
    Ok(WriteOptions {
        dry_run: dry_run.is_some(),
        field_validation: parsed_validation?,
        duplicate_fields: Vec::new(),
        admit: None,
        field_manager: Some(field_manager.to_owned()).filter(|m| !m.is_empty()),
        warnings: None,
        ..WriteOptions::default()
    })
}

/// Upstream `ValidateDryRun`: `All` is the one value (an empty one included).
fn unsupported_dry_run(values: &[&str]) -> Option<FieldError> {
    let quoted: Vec<String> = values.iter().map(|v| go_quote(v)).collect();
    // Upstream prints the list with Go's `%#v`.
    values.iter().any(|v| *v != "All").then(|| FieldError {
        field: "dryRun".into(),
        kind: FieldErrorKind::NotSupported,
        value: None,
        detail: format!(
            "[]string{{{}}}: supported values: \"All\"",
            quoted.join(", ")
        ),
    })
}

/// The `details` of the Status a DELETE answers with: name, group, the resource (in
/// `kind`, as upstream sets it) and uid.
fn deleted_details(info: &ResourceInfo, obj: &Value) -> Value {
    let mut details = json!({
        "name": obj["metadata"]["name"],
        "kind": info.plural,
        "uid": obj["metadata"]["uid"],
    });
    if !info.group.is_empty() {
        details["group"] = json!(info.group);
    }
    details
}

/// An integer query parameter; empty or absent is `None`, anything else not an integer
/// a 400 (upstream fails decoding the options).
fn query_int(q: &HashMap<String, String>, key: &str) -> Result<Option<i64>, ApiError> {
    match q.get(key) {
        Some(v) if !v.is_empty() => v
            .parse::<i64>()
            .map(Some)
            .map_err(|_| ApiError::bad_request(format!("invalid {key} {v:?}"))),
        _ => Ok(None),
    }
}

fn list_params(q: &HashMap<String, String>) -> Result<ListParams, ApiError> {
    let limit = query_int(q, "limit")?.unwrap_or(0);
    query_int(q, "timeoutSeconds")?;
    Ok(ListParams {
        label_selector: q.get("labelSelector").cloned(),
        field_selector: q.get("fieldSelector").cloned(),
        limit,
        continue_token: q.get("continue").cloned(),
        resource_version: q.get("resourceVersion").cloned(),
        resource_version_match: q.get("resourceVersionMatch").cloned(),
        send_initial_events: q.get("sendInitialEvents").map(|v| query_bool(v)),
    })
}

/// A boolean query parameter: absent is false, else upstream's conversion.
pub(crate) fn boolean(q: &HashMap<String, String>, k: &str) -> bool {
    q.get(k).is_some_and(|v| query_bool(v))
}

fn with_warnings(mut r: Response<Body>, warnings: &[String]) -> Response<Body> {
    for header in crate::warning_headers::warning_headers(warnings.iter().map(String::as_str)) {
        r.headers_mut().append("Warning", header);
    }
    r
}

fn encoded(t: Target, printed: Printed<'_>, code: StatusCode, obj: &Value) -> Response<Body> {
    respond_encoded(
        t,
        code,
        &output::object(t, printed, obj, jiff::Timestamp::now()),
    )
}

/// `v`, already in the form `t` asks for, encoded for it.
fn respond_encoded(t: Target, code: StatusCode, v: &Value) -> Response<Body> {
    let (t, body) = output::encode(t, v);
    respond(code, output::content_type(t), body)
}

/// An answer that is no stored object (the `Status` of a delete, a binding or an
/// eviction; a review; a TokenRequest) in the asked form where it has one: YAML or
/// protobuf, else JSON (never a table or partial metadata).
fn unstored_answer(t: Target, code: StatusCode, v: &Value) -> Response<Body> {
    let t = if matches!(t, Target::Yaml | Target::Protobuf) {
        t
    } else {
        Target::Json
    };
    respond_encoded(t, code, v)
}

/// A written object in the asked form; as JSON, the serialization the write made when
/// it has one.
fn encoded_written(
    t: Target,
    printed: Printed<'_>,
    code: StatusCode,
    w: &Written,
) -> Response<Body> {
    match (t, &w.json) {
        (Target::Json, Some(json)) => respond(code, output::content_type(t), json.clone()),
        _ => encoded(t, printed, code, &w.object),
    }
}

async fn resource(
    state: &State,
    req: Request<Incoming>,
    r: ResourcePath,
    q: &HashMap<String, String>,
    accept: Option<&str>,
) -> Result<Response<Body>, ApiError> {
    let warnings = crate::admission::Warnings::default();
    let result = resource_request(state, req, r, q, accept, &warnings).await;
    // Warnings (admission's, field validation's) go out with the answer, a denial
    // included (as upstream).
    let warnings = warnings.take();
    if warnings.is_empty() {
        return result;
    }
    Ok(with_warnings(
        result.unwrap_or_else(|e| error_response(&e)),
        &warnings,
    ))
}

/// [`resource`] without the admission warnings, which plugins add to `warnings`.
async fn resource_request(
    state: &State,
    mut req: Request<Incoming>,
    r: ResourcePath,
    q: &HashMap<String, String>,
    accept: Option<&str>,
    warnings: &crate::admission::Warnings,
) -> Result<Response<Body>, ApiError> {
    let Resolved {
        info,
        store,
        custom,
    } = state
        .registry
        .resolve(r.info.group, r.info.version, r.info.plural)
        .ok_or_else(|| not_found_path(r.info.plural))?;
    let printed = Printed {
        info,
        columns: custom.as_ref().map(|c| &c.columns),
    };
    if let Some(custom) = &custom
        && custom.terminating
        && req.method() == Method::POST
        && r.sub.is_none()
    {
        // Upstream's crdHandler: no new objects while the definition's are deleted.
        let mut e = method_not_supported(info, "create");
        e.message = "create not allowed while custom resource definition is terminating".into();
        return Err(e);
    }
    let target = match output::negotiate(accept, custom.is_none())? {
        Target::Table(_, version, wire) => Target::Table(
            output::IncludeObject::parse(q.get("includeObject").map(String::as_str))?,
            version,
            wire,
        ),
        t => t,
    };
    let ns = r.ns.as_deref();
    if info.namespaced && ns.is_none() && !(req.method() == Method::GET && r.name.is_none()) {
        return Err(not_found_path(&format!("/{}", info.plural)));
    }
    if let Some(sub) = &r.sub
        && !(info.has_subresource(sub)
            && state
                .enablement
                .serves_subresource(info.group, info.plural, sub))
    {
        return Err(not_found_path(sub));
    }
    // Nothing after this reads the user from the request; admission has its own.
    let user = req
        .extensions_mut()
        .remove::<ferrokube_auth::UserInfo>()
        .unwrap_or_default();
    // Admission for the writes below: one chain per request; the store sets the
    // operation and runs it (see `crate::admission`).
    let attributes = {
        let mut a =
            crate::admission::Attributes::new(user, crate::admission::Operation::Create, info)
                .in_namespace(ns)
                .named(r.name.as_deref().unwrap_or(""));
        a.subresource = r.sub.clone().unwrap_or_default();
        a.dry_run = q.get("dryRun").is_some_and(|v| v == "All");
        a.warnings = warnings.clone();
        if let Some(audit) = req.extensions().get::<crate::audit::RequestAudit>() {
            a.audit_annotations = audit.annotations().clone();
        }
        a
    };
    let admission = state.admission.request(attributes.clone());
    // Upstream's default field manager, worked out for writes only: the User-Agent up
    // to its first '/'.
    let user_agent = req.headers().get(header::USER_AGENT).cloned();
    let req_path = req.uri().path().to_string();
    let admitted = |o: WriteOptions| WriteOptions {
        admit: Some(admission.clone()),
        warnings: Some(warnings.clone()),
        field_manager: o.field_manager.or_else(|| {
            let ua = user_agent.as_ref().and_then(|ua| ua.to_str().ok());
            Some(
                ua.unwrap_or("")
                    .split('/')
                    .next()
                    .unwrap_or("")
                    .chars()
                    .take(128)
                    .collect(),
            )
        }),
        ..o
    };
    let method = req.method().clone();
    match (method, r.name.as_deref(), r.sub.as_deref()) {
        (Method::GET, None, None) => {
            // The options are decoded (and refused when malformed) for a watch too.
            let p = list_params(q)?;
            if boolean(q, "watch") {
                return watch(state, &store, custom, ns, q, target).await;
            }
            let listed = store.list(ns, &p).await?;
            let mut meta = json!({"resourceVersion": listed.resource_version});
            if let Some(c) = &listed.continue_token {
                meta["continue"] = json!(c);
            }
            if let Some(n) = listed.remaining_item_count {
                meta["remainingItemCount"] = json!(n);
            }
            let (t, body) =
                output::list(target, printed, &listed.items, meta, jiff::Timestamp::now());
            Ok(respond_body(
                StatusCode::OK,
                output::content_type(t),
                body.boxed_unsync(),
            ))
        }
        (
            Method::GET,
            Some(name),
            None | Some("status" | "approval" | "ephemeralcontainers" | "resize"),
        ) => {
            let rv = q.get("resourceVersion").map(String::as_str);
            let obj = store.get_at(ns, name, rv).await?;
            Ok(encoded(target, printed, StatusCode::OK, &obj))
        }
        (Method::GET, Some(name), Some("scale")) => {
            let rv = q.get("resourceVersion").map(String::as_str);
            let obj = store.get_at(ns, name, rv).await?;
            let scale = ScalePaths::of(state, info).to_scale(&obj);
            Ok(scale_answer(target, &scale))
        }
        (Method::POST, None, None) => {
            let mut opts = admitted(write_options(q, WriteKind::Create)?);
            let (body, ct) = read_body(state, req).await?;
            let (obj, duplicates) = decode_body_noting_duplicates(&body, &ct, info.kind)?;
            opts.duplicate_fields = duplicates;
            opts.json_body = is_json(&ct).then(|| body.clone());
            let w = store.create(ns, obj, &opts).await?;
            Ok(with_warnings(
                encoded_written(target, printed, StatusCode::CREATED, &w),
                &w.warnings,
            ))
        }
        (Method::POST, name, Some("binding")) => {
            let (body, ct) = read_body(state, req).await?;
            let mut binding = decode_body(&body, &ct, "Binding")?;
            ApiError::check_decodes_as::<k8s_openapi::api::core::v1::Binding>(
                &binding, "Binding", "v1",
            )?;
            let mut attributes = attributes;
            let name = match name {
                Some(name) => name.to_string(),
                None => {
                    let named = binding["metadata"]["name"].as_str().unwrap_or_default();
                    if named.is_empty() {
                        return Err(ApiError::bad_request(
                            "a Binding posted to bindings must name its pod in metadata.name",
                        ));
                    }
                    attributes.name = named.to_string();
                    named.to_string()
                }
            };
            // Upstream: a CREATE of pods/binding with the Binding as the object.
            state
                .admission
                .admit_request(&attributes, &mut binding)
                .await?;
            store
                .bind(ns, &name, &binding, &write_options(q, WriteKind::Create)?)
                .await?;
            Ok(unstored_answer(
                target,
                StatusCode::CREATED,
                &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
            ))
        }
        (Method::POST, Some(name), Some("eviction")) => {
            let (body, ct) = read_body(state, req).await?;
            let mut ev = decode_body(&body, &ct, "Eviction")?;
            ApiError::check_decodes_as::<k8s_openapi::api::policy::v1::Eviction>(
                &ev, "Eviction", "v1",
            )?;
            let opts = delete_options(q, Some(&ev["deleteOptions"]))?;
            // Upstream: a CREATE of pods/eviction with the Eviction as the object.
            state.admission.admit_request(&attributes, &mut ev).await?;
            let pdbs = resources::lookup("policy", "v1", "poddisruptionbudgets")
                .and_then(|i| state.registry.store_for(i));
            let ns = ns.unwrap_or("default");
            let e = crate::eviction::evict(&store, pdbs, ns, name, &ev, opts).await?;
            let code = StatusCode::from_u16(e.code).unwrap_or(StatusCode::CREATED);
            Ok(unstored_answer(target, code, &e.status))
        }
        (Method::PUT, Some(name), sub) => {
            let mut opts = admitted(write_options(q, WriteKind::Update)?);
            let (body, ct) = read_body(state, req).await?;
            let (obj, duplicates) = decode_body_noting_duplicates(&body, &ct, info.kind)?;
            // Upstream's update handler: the body names the URL's object, or the PUT is
            // refused, a body without a name too (a Scale is checked as a Scale).
            let body_namespace = ferrokube_registry::meta::namespace(&obj);
            if info.namespaced && !body_namespace.is_empty() && Some(body_namespace) != ns {
                return Err(ferrokube_registry::store::namespace_mismatch());
            }
            let body_name = ferrokube_registry::meta::name(&obj);
            if sub != Some("scale") && body_name != name {
                return Err(ferrokube_registry::store::name_mismatch(body_name, name));
            }
            opts.duplicate_fields = duplicates;
            opts.json_body = is_json(&ct).then(|| body.clone());
            let w = match sub {
                Some("scale") => {
                    ferrokube_registry::store::check_scale(&obj, name)?;
                    let paths = ScalePaths::of(state, info);
                    let patch = paths.patch(&obj);
                    opts.via_subresource = Some("scale");
                    let w = store
                        .update(
                            ns,
                            name,
                            UpdateInput::Patch(PatchType::Merge, patch),
                            Part::Main,
                            &opts,
                        )
                        .await?;
                    return Ok(scale_answer(target, &paths.to_scale(&w.object)));
                }
                Some("status") => {
                    store
                        .update(ns, name, UpdateInput::Replace(obj), Part::Status, &opts)
                        .await?
                }
                Some("finalize") => {
                    store
                        .update(ns, name, UpdateInput::Replace(obj), Part::Finalize, &opts)
                        .await?
                }
                Some("ephemeralcontainers") => {
                    store
                        .update(
                            ns,
                            name,
                            UpdateInput::Replace(obj),
                            Part::EphemeralContainers,
                            &opts,
                        )
                        .await?
                }
                Some("resize") => {
                    store
                        .update(ns, name, UpdateInput::Replace(obj), Part::Resize, &opts)
                        .await?
                }
                Some("approval") => {
                    store
                        .update(ns, name, UpdateInput::Replace(obj), Part::Approval, &opts)
                        .await?
                }
                Some(_) => return Err(method_not_supported(info, "update")),
                None if store.strategy().hooks().create_on_update => {
                    let creator = CreateOnUpdate {
                        state,
                        user: &attributes.user,
                        path: req_path.as_str(),
                    };
                    creator.replace(&store, ns, name, obj, &opts).await?
                }
                None => {
                    store
                        .update(ns, name, UpdateInput::Replace(obj), Part::Main, &opts)
                        .await?
                }
            };
            let code = if w.created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            Ok(with_warnings(
                encoded_written(target, printed, code, &w),
                &w.warnings,
            ))
        }
        (Method::PATCH, Some(name), sub) => {
            let ct = req
                .headers()
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_string();
            const PATCH_TYPES: [&str; 4] = [
                "application/json-patch+json",
                "application/merge-patch+json",
                "application/strategic-merge-patch+json",
                "application/apply-patch+yaml",
            ];
            let ty = match ct.as_str() {
                "application/json-patch+json" => Some(PatchType::Json),
                "application/merge-patch+json" => Some(PatchType::Merge),
                // Custom resources have no patch strategies to merge by (upstream).
                "application/strategic-merge-patch+json" if custom.is_some() => {
                    return Err(ApiError::unsupported_media_type(&[
                        PATCH_TYPES[0],
                        PATCH_TYPES[1],
                        PATCH_TYPES[3],
                    ]));
                }
                "application/strategic-merge-patch+json" => Some(PatchType::StrategicMerge),
                "application/apply-patch+yaml" => None,
                _ => return Err(ApiError::unsupported_media_type(&PATCH_TYPES)),
            };
            let opts = admitted(write_options(
                q,
                WriteKind::Patch {
                    apply: ty.is_none(),
                },
            )?);
            let (body, _) = read_body(state, req).await?;
            let Some(ty) = ty else {
                let (config, duplicates) = crate::dupes::parse_yaml_noting_duplicates(&body)
                    .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
                if !config.is_object() {
                    return Err(ApiError::bad_request(
                        "error decoding YAML: an apply configuration must be an object",
                    ));
                }
                if config["metadata"]
                    .get("managedFields")
                    .is_some_and(|m| !m.is_null())
                {
                    return Err(ApiError::bad_request(
                        "metadata.managedFields must be nil in an apply configuration",
                    ));
                }
                for field in ["apiVersion", "kind"] {
                    if config
                        .get(field)
                        .and_then(Value::as_str)
                        .is_none_or(str::is_empty)
                    {
                        return Err(ApiError::bad_request(format!(
                            "invalid object: {field} must be set in an apply configuration"
                        )));
                    }
                }
                let opts = WriteOptions {
                    duplicate_fields: duplicates,
                    ..opts
                };
                let part = match sub {
                    None => Part::Main,
                    Some("status") => Part::Status,
                    Some("scale") => {
                        let paths = ScalePaths::of(state, info);
                        let w = store
                            .apply_through_scale(
                                ns,
                                name,
                                (&config, boolean(q, "force")),
                                &paths,
                                &opts,
                            )
                            .await?;
                        return Ok(scale_answer(target, &paths.to_scale(&w.object)));
                    }
                    _ => return Err(ApiError::unsupported_media_type(&PATCH_TYPES[..3])),
                };
                let w = store
                    .apply(ns, name, config, boolean(q, "force"), part, &opts)
                    .await?;
                let code = if w.created {
                    StatusCode::CREATED
                } else {
                    StatusCode::OK
                };
                return Ok(with_warnings(
                    encoded_written(target, printed, code, &w),
                    &w.warnings,
                ));
            };
            let patch: Value = serde_json::from_slice(&body)
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
            let part = match sub {
                None => Part::Main,
                Some("status") => Part::Status,
                Some("approval") => Part::Approval,
                Some("ephemeralcontainers") => Part::EphemeralContainers,
                Some("resize") => Part::Resize,
                Some("scale") => {
                    let current = store.get(ns, name).await?;
                    let paths = ScalePaths::of(state, info);
                    let scale = paths.to_scale(&current);
                    let patched =
                        ferrokube_registry::store::default_patch(info, ty, &scale, &patch)?;
                    ferrokube_registry::store::check_scale(&patched, name)?;
                    let opts = WriteOptions {
                        via_subresource: Some("scale"),
                        ..opts
                    };
                    let w = store
                        .update(
                            ns,
                            name,
                            UpdateInput::Patch(PatchType::Merge, paths.patch(&patched)),
                            Part::Main,
                            &opts,
                        )
                        .await?;
                    return Ok(scale_answer(target, &paths.to_scale(&w.object)));
                }
                Some(_) => return Err(method_not_supported(info, "patch")),
            };
            let w = store
                .update(ns, name, UpdateInput::Patch(ty, patch), part, &opts)
                .await?;
            Ok(with_warnings(
                encoded_written(target, printed, StatusCode::OK, &w),
                &w.warnings,
            ))
        }
        (Method::DELETE, Some(name), None) => {
            let (body, ct) = read_body(state, req).await?;
            let body_opts = if body.iter().all(u8::is_ascii_whitespace) {
                None
            } else {
                Some(decode_body(&body, &ct, "DeleteOptions")?)
            };
            let opts = DeleteOptions {
                admit: Some(admission.clone()),
                ..delete_options(q, body_opts.as_ref())?
            };
            let d = store.delete(ns, name, &opts).await?;
            if d.gone && !info.returns_deleted_object() {
                // Upstream's `finalizeDelete`: a Status that names what went (its
                // `kind` is the resource, as upstream writes it), never made a table.
                let status = json!({
                    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                    "details": deleted_details(info, &d.object),
                });
                return Ok(unstored_answer(target, StatusCode::OK, &status));
            }
            Ok(encoded(target, printed, StatusCode::OK, &d.object))
        }
        (Method::DELETE, None, None) => {
            if !info.supports("deletecollection") {
                return Err(method_not_supported(info, "deletecollection"));
            }
            let (body, ct) = read_body(state, req).await?;
            let body_opts = if body.iter().all(u8::is_ascii_whitespace) {
                None
            } else {
                Some(decode_body(&body, &ct, "DeleteOptions")?)
            };
            let opts = DeleteOptions {
                admit: Some(admission.clone()),
                ..delete_options(q, body_opts.as_ref())?
            };
            let p = list_params(q)?;
            let items = store.delete_collection(ns, &p, &opts).await?;
            let items: Vec<CachedObject> = items.into_iter().map(CachedObject::new).collect();
            // Encoded as the client asked, as upstream's `transformResponseObject` does.
            let (t, body) =
                output::list(target, printed, &items, json!({}), jiff::Timestamp::now());
            Ok(respond_body(
                StatusCode::OK,
                output::content_type(t),
                body.boxed_unsync(),
            ))
        }
        (m, _, _) => Err(method_not_supported(info, &m.as_str().to_ascii_lowercase())),
    }
}

/// A PUT of a kind upstream creates on update (`AllowCreateOnUpdate`): an update, or,
/// when nothing of that name exists, a create (201) that the user must also be
/// allowed, as upstream's update handler asks the authorizer for `create`.
struct CreateOnUpdate<'a> {
    state: &'a State,
    user: &'a ferrokube_auth::UserInfo,
    path: &'a str,
}

impl CreateOnUpdate<'_> {
    async fn replace(
        &self,
        store: &ferrokube_registry::Store,
        ns: Option<&str>,
        name: &str,
        obj: Value,
        opts: &WriteOptions,
    ) -> Result<ferrokube_registry::store::Written, ApiError> {
        // Once more after a create that lost the race to another create.
        for _ in 0..2 {
            let update = UpdateInput::Replace(obj.clone());
            match store.update(ns, name, update, Part::Main, opts).await {
                Err(e) if e.is_not_found() => {}
                other => return other,
            }
            // A uid names the object replaced: a precondition nothing meets.
            let uid = ferrokube_registry::meta::uid(&obj);
            if !uid.is_empty() {
                return Err(ferrokube_registry::store::uid_precondition_failed(
                    store.info(),
                    name,
                    uid,
                    "",
                ));
            }
            self.authorize_create(store.info(), ns, name).await?;
            let mut created = obj.clone();
            ferrokube_registry::meta::set_meta(&mut created, "name", json!(name));
            // The version an update names means nothing to a create here: upstream's
            // storage writes it away.
            ferrokube_registry::meta::set_meta(&mut created, "resourceVersion", Value::Null);
            match store.create(ns, created, opts).await {
                Err(e) if e.is_already_exists() => continue,
                other => return other,
            }
        }
        Err(ApiError::conflict(
            store.info().group,
            store.info().plural,
            name,
            "created and deleted again while being written; please retry",
        ))
    }

    async fn authorize_create(
        &self,
        info: &ResourceInfo,
        ns: Option<&str>,
        name: &str,
    ) -> Result<(), ApiError> {
        let attrs = ferrokube_auth::Attributes {
            user: self.user.clone(),
            verb: "create".into(),
            namespace: ns.unwrap_or("").into(),
            api_group: info.group.into(),
            api_version: info.version.into(),
            resource: info.plural.into(),
            name: name.into(),
            resource_request: true,
            path: self.path.into(),
            ..ferrokube_auth::Attributes::default()
        };
        let verdict = self.state.authorizer.verdict(&attrs).await;
        if verdict.decision.is_allowed() {
            return Ok(());
        }
        Err(match verdict.error {
            Some(error) => ApiError::internal(error),
            None => crate::security::forbidden(&attrs, &verdict.decision),
        })
    }
}

fn delete_options(
    q: &HashMap<String, String>,
    body: Option<&Value>,
) -> Result<DeleteOptions, ApiError> {
    let b = body.unwrap_or(&Value::Null);
    let grace = match q.get("gracePeriodSeconds") {
        Some(g) => Some(
            g.parse::<i64>()
                .map_err(|_| ApiError::bad_request(format!("invalid gracePeriodSeconds {g:?}")))?,
        ),
        None => b["gracePeriodSeconds"].as_i64(),
    };
    let policy = q
        .get("propagationPolicy")
        .cloned()
        .or_else(|| b["propagationPolicy"].as_str().map(str::to_string));
    let orphan = match q.get("orphanDependents") {
        Some(o) => Some(query_bool(o)),
        None => b["orphanDependents"].as_bool(),
    };
    // Upstream `ValidateDeleteOptions`.
    let path = FieldPath::new("propagationPolicy");
    let mut errs = Vec::new();
    let dry_run = q.get("dryRun").map(String::as_str);
    if let Some(p) = &policy {
        if orphan.is_some() {
            errs.push(FieldError::invalid(
                &path,
                p.as_str(),
                "orphanDependents and deletionPropagation cannot be both set",
            ));
        }
        if !matches!(p.as_str(), "Orphan" | "Background" | "Foreground") {
            errs.push(FieldError::not_supported(
                &path,
                p.as_str(),
                &["Foreground", "Background", "Orphan", "nil"],
            ));
        }
    }
    errs.extend(dry_run.and_then(|v| unsupported_dry_run(&[v])));
    let body_dry_run: Vec<&str> = b["dryRun"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    errs.extend(unsupported_dry_run(&body_dry_run));
    if !errs.is_empty() {
        return Err(ApiError::invalid("meta.k8s.io", "DeleteOptions", "", errs));
    }
    Ok(DeleteOptions {
        // Validated: every value given is `All`.
        dry_run: dry_run.is_some() || !body_dry_run.is_empty(),
        grace_period_seconds: grace,
        propagation_policy: policy,
        orphan_dependents: orphan,
        precondition_uid: b["preconditions"]["uid"].as_str().map(str::to_string),
        precondition_resource_version: b["preconditions"]["resourceVersion"]
            .as_str()
            .map(str::to_string),
        admit: None,
    })
}

/// The kind `scale` answers with, as its answers are printed (upstream's Scale
/// table: name, desired and available replicas, age).
static SCALE_KIND: ResourceInfo = ResourceInfo {
    group: "autoscaling",
    version: "v1",
    kind: "Scale",
    plural: "scale",
    singular: "scale",
    short_names: &[],
    categories: &[],
    namespaced: true,
    verbs: &[],
    subresources: &[],
    storage_prefix: "",
};

/// A `scale` answer in the form the request asked for.
fn scale_answer(target: Target, scale: &Value) -> Response<Body> {
    encoded(target, Printed::from(&SCALE_KIND), StatusCode::OK, scale)
}

/// Where a resource keeps what its `scale` subresource shows: `spec.replicas`,
/// `status.replicas` and the selector of `spec.selector` for the built-in kinds; the
/// paths its definition names for a custom resource.
struct ScalePaths {
    spec_replicas: Vec<String>,
    status_replicas: Vec<String>,
    /// A custom resource's label selector path (a string in the serialized form).
    label_selector: Option<Vec<String>>,
}

impl ScalePaths {
    fn of(state: &State, info: &ResourceInfo) -> ScalePaths {
        let split = |p: &str| -> Vec<String> {
            p.split('.')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        };
        let served = state.registry.custom().served();
        let custom = served
            .get(info.group, info.version, info.plural)
            .and_then(|r| r.version_spec()?.subresources.as_ref()?.scale.clone());
        match custom {
            Some(scale) => ScalePaths {
                spec_replicas: split(&scale.spec_replicas_path),
                status_replicas: split(&scale.status_replicas_path),
                label_selector: Some(
                    scale
                        .label_selector_path
                        .as_deref()
                        .map(split)
                        .unwrap_or_default(),
                ),
            },
            None => ScalePaths {
                spec_replicas: vec!["spec".into(), "replicas".into()],
                status_replicas: vec!["status".into(), "replicas".into()],
                label_selector: None,
            },
        }
    }

    fn at<'a>(obj: &'a Value, path: &[String]) -> &'a Value {
        path.iter().fold(obj, |v, p| &v[p.as_str()])
    }

    /// The merge patch of the object that sets what `scale` asks for.
    fn patch(&self, scale: &Value) -> Value {
        let mut p = self.replicas_patch(scale["spec"]["replicas"].as_i64().unwrap_or(0));
        if let Some(rv) = scale["metadata"]["resourceVersion"]
            .as_str()
            .filter(|s| !s.is_empty())
        {
            p["metadata"] = json!({"resourceVersion": rv});
        }
        p
    }
}

impl ScaleView for ScalePaths {
    fn replicas_path(&self) -> &[String] {
        &self.spec_replicas
    }

    fn to_scale(&self, obj: &Value) -> Value {
        let selector = match &self.label_selector {
            Some(path) if !path.is_empty() => {
                Self::at(obj, path).as_str().unwrap_or_default().to_string()
            }
            Some(_) => String::new(),
            None => obj["spec"]["selector"]["matchLabels"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .unwrap_or_default(),
        };
        json!({
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": {
                "name": obj["metadata"]["name"],
                "namespace": obj["metadata"]["namespace"],
                "uid": obj["metadata"]["uid"],
                "resourceVersion": obj["metadata"]["resourceVersion"],
                "creationTimestamp": obj["metadata"]["creationTimestamp"],
            },
            "spec": {"replicas": Self::at(obj, &self.spec_replicas).as_i64().unwrap_or(0)},
            "status": {
                "replicas": Self::at(obj, &self.status_replicas).as_i64().unwrap_or(0),
                "selector": selector,
            },
        })
    }
}

fn bookmark_line(info: &ResourceInfo, t: Target, revision: i64, initial_end: bool) -> Bytes {
    let mut meta = json!({"resourceVersion": revision.to_string()});
    if initial_end {
        meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    let bookmark = json!({"kind": info.kind, "apiVersion": info.api_version(), "metadata": meta});
    // A metadata watch's bookmarks are partial metadata too, as upstream transforms
    // every object of the stream (and a custom kind has no protobuf form of its own).
    if let Target::PartialMetadata(_, version) = t {
        return watch_event(t, "BOOKMARK", &output::partial_metadata(&bookmark, version));
    }
    watch_event(t, "BOOKMARK", &bookmark)
}

/// One watch event in the stream's encoding: a JSON line, or a protobuf frame. An
/// object protobuf cannot encode (not expected of a served built-in kind) becomes an
/// ERROR event, since a protobuf stream cannot switch to JSON midway.
fn watch_event(t: Target, kind: &str, object: &Value) -> Bytes {
    if !output::is_protobuf(t) {
        return ferrokube_registry::cache::watch_line(kind, object);
    }
    protobuf_frame_or_error(kind, ferrokube_protobuf::encode_watch_frame(kind, object))
}

/// A protobuf watch frame of a cached object, transcoded from its JSON.
fn protobuf_watch_event(info: &ResourceInfo, kind: &str, object: &CachedObject) -> Bytes {
    let frame = ferrokube_protobuf::encode_watch_frame_json(
        kind,
        &info.api_version(),
        info.kind,
        object.json(),
    );
    protobuf_frame_or_error(kind, frame)
}

fn protobuf_frame_or_error(
    kind: &str,
    frame: Result<Vec<u8>, ferrokube_protobuf::ProtobufError>,
) -> Bytes {
    frame
        .or_else(|e| {
            tracing::warn!(error = %e, "a watch event without a protobuf form");
            let status = output::status_value(&ApiError::internal(format!(
                "the {kind} event's object has no protobuf form: {e}"
            )));
            ferrokube_protobuf::encode_watch_frame("ERROR", &status)
        })
        .map(Bytes::from)
        .unwrap_or_default()
}

fn item_line(printed: Printed<'_>, t: Target, item: &WatchItem) -> Bytes {
    let info = printed.info;
    let json = t == Target::Json || t == Target::Yaml;
    let (kind, obj) = match item {
        WatchItem::Event(e) if json => return e.json_line(),
        WatchItem::Synthetic(k, o) if json => {
            return ferrokube_registry::cache::watch_line_json(k.as_str(), o.json());
        }
        WatchItem::Event(e) if t == Target::Protobuf => {
            return e.protobuf_frame(|e| protobuf_watch_event(info, e.kind.as_str(), &e.object));
        }
        WatchItem::Synthetic(k, o) if t == Target::Protobuf => {
            return protobuf_watch_event(info, k.as_str(), o);
        }
        WatchItem::Event(e) => (e.kind.as_str(), e.object.value().clone()),
        WatchItem::Synthetic(k, o) => (k.as_str(), o.value().clone()),
        WatchItem::Bookmark {
            revision,
            initial_events_end,
        } => return bookmark_line(info, t, *revision, *initial_events_end),
        WatchItem::Error(e) => return watch_event(t, "ERROR", &output::status_value(e)),
    };
    let obj = output::object(t, printed, &obj, jiff::Timestamp::now());
    watch_event(t, kind, &obj)
}

async fn watch(
    state: &State,
    store: &Arc<ferrokube_registry::Store>,
    custom: Option<Arc<CustomResource>>,
    ns: Option<&str>,
    q: &HashMap<String, String>,
    target: Target,
) -> Result<Response<Body>, ApiError> {
    // YAML has no stream serializer: upstream's `NegotiateOutputMediaTypeStream`
    // refuses it rather than fall back to a later range.
    if output::wire(target) == output::Wire::Yaml {
        return Err(output::not_acceptable());
    }
    let info = store.info();
    let p = WatchParams {
        label_selector: q.get("labelSelector").cloned(),
        field_selector: q.get("fieldSelector").cloned(),
        resource_version: q.get("resourceVersion").cloned(),
        resource_version_match: q.get("resourceVersionMatch").cloned(),
        allow_bookmarks: boolean(q, "allowWatchBookmarks"),
        send_initial_events: q.get("sendInitialEvents").map(|v| query_bool(v)),
    };
    match store.watch(ns, &p).await {
        Ok(rx) => Ok(watch_response(state, info, custom, q, target, rx, None)),
        Err(e) if e.code == 410 => {
            let line = watch_event(target, "ERROR", &output::status_value(&e));
            Ok(respond(StatusCode::OK, watch_content_type(target), line))
        }
        Err(e) => Err(e),
    }
}

/// A watch's media type is its stream serializer's, as upstream's `serveWatchHandler`
/// sets it: plain JSON for transformed events (Tables, partial metadata) too.
fn watch_content_type(target: Target) -> &'static str {
    if output::is_protobuf(target) {
        ferrokube_protobuf::WATCH_MEDIA_TYPE
    } else {
        "application/json"
    }
}

/// Streams what `rx` receives as watch events until the watch's timeout
/// ([`watch_timeout`]), the server's shutdown, or the end
/// of `rx`. `hold_open` keeps a source with nothing to send from ending the stream at
/// once (its sender lives as long as the stream).
pub(crate) fn watch_response(
    state: &State,
    info: &'static ResourceInfo,
    custom: Option<Arc<CustomResource>>,
    q: &HashMap<String, String>,
    target: Target,
    rx: tokio::sync::mpsc::Receiver<WatchItem>,
    hold_open: Option<tokio::sync::mpsc::Sender<WatchItem>>,
) -> Response<Body> {
    let timeout = watch_timeout(q, state.min_request_timeout);
    let ct = watch_content_type(target);
    state.metrics.watch_started();
    let metrics = state.metrics.clone();
    // A timeout past what a clock can represent is no deadline at all.
    let deadline = timeout.and_then(|t| tokio::time::Instant::now().checked_add(t));
    let shutdown = state.shutdown.clone();
    struct Guard(Arc<Metrics>);
    impl Drop for Guard {
        fn drop(&mut self) {
            self.0.watch_ended();
        }
    }
    let guard = Guard(metrics);
    let stream = futures::stream::unfold(
        (rx, shutdown, (guard, hold_open)),
        move |(mut rx, mut shutdown, guard)| {
            let custom = custom.clone();
            async move {
                if *shutdown.borrow() {
                    return None;
                }
                tokio::select! {
                    item = rx.recv() => {
                        let item = item?;
                        let printed = Printed {
                            info,
                            columns: custom.as_ref().map(|c| &c.columns),
                        };
                        let line = item_line(printed, target, &item);
                        Some((Ok::<_, Infallible>(Frame::data(line)), (rx, shutdown, guard)))
                    }
                    _ = async {
                        match deadline {
                            Some(at) => tokio::time::sleep_until(at).await,
                            None => std::future::pending().await,
                        }
                    } => None,
                    _ = shutdown.changed() => None,
                }
            }
        },
    );
    let mut r = Response::new(StreamBody::new(stream).boxed_unsync());
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_summarized_as_upstream_summarizes_them() {
        assert_eq!(summarize_data(b"", 30), "<empty>");
        assert_eq!(summarize_data(b"{\"a\":1}", 30), "{\"a\":1}");
        assert_eq!(summarize_data(b"{\"abcdef\"}", 4), "{\"ab ...");
        assert_eq!(summarize_data(b"\x1f\x8b\x08", 30), "1f8b08");
        assert_eq!(summarize_data(b"kind: X", 2), "6b69 ...");
    }

    #[test]
    fn request_timeouts_as_upstream() {
        let minute = Duration::from_secs(60);
        let t = |q: &str| request_timeout(Some(q), minute);
        assert_eq!(t(""), Ok(Some(minute)));
        assert_eq!(t("timeout=10s"), Ok(Some(Duration::from_secs(10))));
        assert_eq!(t("timeout=1h"), Ok(Some(minute)), "held to the server's");
        assert_eq!(t("timeout=0s"), Ok(Some(minute)));
        assert_eq!(t("timeout=-5s"), Ok(Some(minute)));
        let err = t("timeout=5").unwrap_err();
        assert_eq!(err.code, 400);
        assert!(
            err.message.contains("time: missing unit in duration \"5\""),
            "{}",
            err.message
        );
        // --request-timeout=0: only the client's own limit.
        assert_eq!(request_timeout(Some(""), Duration::ZERO), Ok(None));
        assert_eq!(
            request_timeout(Some("timeout=3s"), Duration::ZERO),
            Ok(Some(Duration::from_secs(3)))
        );
    }

    #[test]
    fn watch_timeouts_are_spread_above_the_minimum() {
        let min = Duration::from_secs(1800);
        let q = |s: &str| query_map(Some(s));
        assert_eq!(
            watch_timeout(&q("timeoutSeconds=5"), min),
            Some(Duration::from_secs(5))
        );
        assert_eq!(
            watch_timeout(&q("timeoutSeconds=7200"), min),
            Some(Duration::from_secs(7200)),
            "not capped"
        );
        let drawn: Vec<Duration> = (0..50)
            .map(|_| watch_timeout(&q(""), min).unwrap())
            .collect();
        assert!(drawn.iter().all(|d| *d >= min && *d < 2 * min), "{drawn:?}");
        assert!(
            drawn.iter().any(|d| *d != drawn[0]),
            "not spread: {drawn:?}"
        );
        assert_eq!(watch_timeout(&q("timeoutSeconds=0"), Duration::ZERO), None);
        assert_eq!(
            watch_timeout(&q("timeoutSeconds=-1"), min),
            Some(Duration::ZERO)
        );
        assert_eq!(
            watch_timeout(&q("timeoutSeconds=-9223372036854775808"), Duration::ZERO),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn resource_paths() {
        let r = parse_resource_path(
            "",
            "v1",
            &["namespaces", "default", "pods", "p", "status"],
            resources::lookup,
        )
        .unwrap();
        assert_eq!(r.info.plural, "pods");
        assert_eq!(r.ns.as_deref(), Some("default"));
        assert_eq!(r.name.as_deref(), Some("p"));
        assert_eq!(r.sub.as_deref(), Some("status"));
        let r =
            parse_resource_path("", "v1", &["namespaces", "default"], resources::lookup).unwrap();
        assert_eq!(r.info.plural, "namespaces");
        assert_eq!(r.name.as_deref(), Some("default"));
        let r = parse_resource_path(
            "",
            "v1",
            &["namespaces", "x", "finalize"],
            resources::lookup,
        )
        .unwrap();
        assert_eq!(r.sub.as_deref(), Some("finalize"));
        let r = parse_resource_path("apps", "v1", &["deployments"], resources::lookup).unwrap();
        assert!(r.ns.is_none() && r.name.is_none());
        assert!(parse_resource_path("", "v1", &["nope"], resources::lookup).is_none());
        assert!(
            parse_resource_path("", "v1", &["pods", "a", "b", "c"], resources::lookup).is_none()
        );
    }

    #[test]
    fn write_options_are_checked_as_upstream_checks_them() {
        let q = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let message = |pairs: &[(&str, &str)], kind| write_options(&q(pairs), kind).unwrap_err();
        let long = "m".repeat(129);
        let e = message(
            &[
                ("fieldManager", &long),
                ("dryRun", "Some"),
                ("fieldValidation", "Bogus"),
            ],
            WriteKind::Create,
        );
        assert_eq!(e.code, 422);
        assert_eq!(
            e.message,
            "CreateOptions.meta.k8s.io \"\" is invalid: [fieldManager: Too long: may not be more than 128 bytes, dryRun: Unsupported value: []string{\"Some\"}: supported values: \"All\", fieldValidation: Unsupported value: \"Bogus\": supported values: \"\", \"Ignore\", \"Strict\", \"Warn\"]"
        );
        assert_eq!(
            message(&[("fieldManager", "a\u{1}b")], WriteKind::Update).message,
            "UpdateOptions.meta.k8s.io \"\" is invalid: fieldManager: Invalid value: \"a\\x01b\": invalid character U+0001 (at position 1)"
        );
        assert_eq!(
            message(&[("dryRun", "")], WriteKind::Patch { apply: false }).message,
            "PatchOptions.meta.k8s.io \"\" is invalid: dryRun: Unsupported value: []string{\"\"}: supported values: \"All\""
        );
        let ok = write_options(
            &q(&[("fieldManager", "kubectl édit"), ("dryRun", "All")]),
            WriteKind::Patch { apply: true },
        )
        .unwrap();
        assert!(ok.dry_run);
        assert_eq!(ok.field_manager.as_deref(), Some("kubectl édit"));
    }

    #[test]
    fn delete_options_from_body_and_query() {
        let q: HashMap<String, String> =
            [("gracePeriodSeconds".to_string(), "0".to_string())].into();
        let o = delete_options(
            &q,
            Some(&json!({"propagationPolicy": "Foreground", "preconditions": {"uid": "u"}})),
        )
        .unwrap();
        assert_eq!(o.grace_period_seconds, Some(0));
        assert_eq!(o.propagation_policy.as_deref(), Some("Foreground"));
        assert_eq!(o.precondition_uid.as_deref(), Some("u"));
        let q: HashMap<String, String> =
            [("propagationPolicy".to_string(), "x".to_string())].into();
        let e = delete_options(&q, None).unwrap_err();
        assert_eq!(e.code, 422);
        assert_eq!(
            e.message,
            "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: \"x\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
        );
        // The deprecated orphanDependents, from the query (any value but false or 0 is
        // true) or the body, and never with a propagation policy.
        let q: HashMap<String, String> =
            [("orphanDependents".to_string(), "True".to_string())].into();
        assert_eq!(
            delete_options(&q, None).unwrap().orphan_dependents,
            Some(true)
        );
        let body = json!({"orphanDependents": false});
        assert_eq!(
            delete_options(&HashMap::new(), Some(&body))
                .unwrap()
                .orphan_dependents,
            Some(false)
        );
        let body = json!({"orphanDependents": true, "propagationPolicy": "Orphan"});
        let e = delete_options(&HashMap::new(), Some(&body)).unwrap_err();
        assert_eq!(
            e.message,
            "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Invalid value: \"Orphan\": orphanDependents and deletionPropagation cannot be both set"
        );
    }
}
