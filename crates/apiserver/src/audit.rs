//! The audit log (upstream `k8s.io/apiserver/pkg/audit`, the `WithAudit*` filters of
//! `pkg/endpoints/filters`, and `plugin/pkg/audit/log`).
//!
//! Layer: HTTP (part of the apiserver's request pipeline). It sees requests and
//! responses, never storage or the registry.
//!
//! Every request gets an audit ID (the client's `Audit-ID` header, else a new UUID),
//! sent back in the `Audit-Id` response header whether or not auditing is on. With
//! `--audit-policy-file` and a backend (`--audit-log-path`, `--audit-webhook-config-file`
//! or both), the policy ([`policy`]) decides each
//! request's level after authentication, and the request's [`RequestAudit`] writes one
//! event per stage it does not omit ([`event`]): `RequestReceived` once authenticated,
//! `ResponseStarted` when a long-running request (watch, proxy, exec, attach,
//! portforward, log) answers, `ResponseComplete` when its answer ends, `Panic` instead
//! when the handler panicked; a request that fails authentication gets one
//! `ResponseStarted` event. Events leave the request path through each backend's
//! bounded queue and task ([`buffered`]), which batches, throttles and truncates them
//! as the backend's flags say: the log ([`log`]) writes JSON lines, the webhook
//! ([`webhook`]) POSTs EventLists.
//!
//! Deviations: an upgraded request (exec,
//! attach, portforward) gets its ResponseComplete when the 101 answer is sent, not
//! when the stream ends.

mod buffered;
mod event;
mod log;
mod policy;
mod webhook;

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use ferrokube_auth::{Attributes, UserInfo};
use http::{HeaderValue, Request, Response};
use http_body_util::BodyExt;

pub use buffered::{
    AuditBatchOptions, AuditMode, Throttle as AuditThrottle, Truncate as AuditTruncate,
};
pub use log::{AuditLogOptions, check_format};
pub use webhook::AuditWebhookOptions;

use event::{Event, ObjectRef, RawBody, RequestFacts};
use policy::{Level, Policy, RequestAuditConfig, Stage};

/// The response header carrying the request's audit ID (upstream `Audit-ID`).
pub(crate) const AUDIT_ID_HEADER: &str = "Audit-Id";

/// A request's audit annotations (upstream `audit.AddAuditAnnotation` and
/// `admission.Attributes.AddAnnotation`), shared by every stage that adds some: the
/// authorizer's decision and admission plugins. As upstream, a key keeps its first
/// value: a later, different value for the same key is ignored.
#[derive(Clone, Debug, Default)]
pub(crate) struct AuditAnnotations(Arc<parking_lot::Mutex<Vec<(String, String)>>>);

impl AuditAnnotations {
    pub(crate) fn add(&self, key: impl Into<String>, value: impl Into<String>) {
        let key = key.into();
        let mut annotations = self.0.lock();
        if annotations.iter().all(|(k, _)| *k != key) {
            annotations.push((key, value.into()));
        }
    }

    /// The annotations added so far, in the order they were added.
    pub(crate) fn snapshot(&self) -> Vec<(String, String)> {
        self.0.lock().clone()
    }
}

/// The policy and the backends: auditing is on when the policy and at least one
/// backend are configured.
#[derive(Debug)]
pub(crate) struct Auditor {
    policy: Policy,
    /// The log's and the webhook's, each with its own queue.
    backends: Vec<buffered::Backend>,
}

impl Auditor {
    /// Reads and validates the policy file and opens the log and the webhook
    /// (upstream: no policy file, or no backend, means no audit events). The error
    /// says what is wrong.
    pub(crate) fn new(
        policy_file: Option<&std::path::Path>,
        log: &AuditLogOptions,
        webhook: Option<(
            &AuditWebhookOptions,
            crate::webhook_client::KubeconfigWebhook,
        )>,
    ) -> Result<Option<Arc<Auditor>>, String> {
        let policy = match policy_file {
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .map_err(|e| format!("--audit-policy-file: reading {}: {e}", p.display()))?;
                Some(
                    Policy::parse(&text)
                        .map_err(|e| format!("--audit-policy-file {}: {e}", p.display()))?,
                )
            }
            None => None,
        };
        let Some(policy) = policy else {
            if log.path.is_some() || webhook.is_some() {
                tracing::info!("no --audit-policy-file: no audit events will be recorded");
            }
            return Ok(None);
        };
        let mut backends = Vec::new();
        if let Some(path) = log.path.as_deref() {
            backends.push(log::start(log, path)?);
        }
        if let Some((opts, webhook)) = webhook {
            backends.push(webhook::start(opts, webhook));
        }
        if backends.is_empty() {
            return Ok(None);
        }
        Ok(Some(Arc::new(Auditor { policy, backends })))
    }

    /// Hands `event` to every backend, as its mode says. False: a blocking-strict
    /// backend could not store it.
    async fn emit(&self, event: Event) -> bool {
        let mut stored = true;
        if let Some((last, others)) = self.backends.split_last() {
            for backend in others {
                stored &= backend.emit(event.clone()).await;
            }
            stored &= last.emit(event).await;
        }
        stored
    }

    /// Writes and sends what every backend has queued, waiting at most `limit`: at
    /// shutdown, once no request is left, so that its last events are not lost.
    pub(crate) async fn flush(&self, limit: std::time::Duration) {
        let all = futures::future::join_all(self.backends.iter().map(buffered::Backend::flush));
        if tokio::time::timeout(limit, all).await.is_err() {
            tracing::warn!(?limit, "audit events still unsent at shutdown");
        }
    }

    /// [`Auditor::emit`] from code that cannot wait.
    fn emit_detached(&self, event: Event) {
        if let Some((last, others)) = self.backends.split_last() {
            for backend in others {
                backend.emit_detached(event.clone());
            }
            last.emit_detached(event);
        }
    }
}

/// Upstream `BasicLongRunningRequestCheck` of kube-apiserver: verbs watch and proxy,
/// subresources attach, exec, proxy, log and portforward.
pub(crate) fn is_long_running(attrs: &Attributes) -> bool {
    attrs.resource_request
        && (matches!(attrs.verb.as_str(), "watch" | "proxy")
            || matches!(
                attrs.subresource.as_str(),
                "attach" | "exec" | "proxy" | "log" | "portforward"
            ))
}

/// Upstream `utilnet.SourceIPs`: X-Forwarded-For, X-Real-Ip when not already there,
/// then the peer unless it is already the last.
fn source_ips(headers: &http::HeaderMap, peer: SocketAddr) -> Vec<String> {
    let mut ips: Vec<std::net::IpAddr> = Vec::new();
    if let Some(v) = headers.get("x-forwarded-for").and_then(|v| v.to_str().ok()) {
        ips.extend(
            v.split(',')
                .filter_map(|p| p.trim().parse::<std::net::IpAddr>().ok()),
        );
    }
    if let Some(ip) = headers
        .get("x-real-ip")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
        && !ips.contains(&ip)
    {
        ips.push(ip);
    }
    let remote = peer.ip().to_canonical();
    if ips.last() != Some(&remote) {
        ips.push(remote);
    }
    ips.iter().map(ToString::to_string).collect()
}

/// What is known of a request before its user.
#[derive(Debug)]
struct Received {
    request_uri: String,
    source_ips: Vec<String>,
    user_agent: Option<String>,
    attrs: Attributes,
    has_token: bool,
    has_basic: bool,
    has_certificate: bool,
}

#[derive(Debug, Default)]
struct Progress {
    /// Set once the policy chose a level above None.
    facts: Option<Arc<RequestFacts>>,
    config: Option<RequestAuditConfig>,
    impersonated: Option<UserInfo>,
    request_body: Option<RawBody>,
    /// Authentication failed with this message (one ResponseStarted event).
    auth_failed: Option<String>,
}

struct RequestInner {
    audit_id: String,
    auditor: Option<Arc<Auditor>>,
    received: Option<Received>,
    received_at: jiff::Timestamp,
    progress: parking_lot::Mutex<Progress>,
    annotations: AuditAnnotations,
}

/// One request's audit record, reachable from its extensions. Cheap to clone.
#[derive(Clone)]
pub(crate) struct RequestAudit(Arc<RequestInner>);

impl std::fmt::Debug for RequestAudit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("RequestAudit")
            .field(&self.0.audit_id)
            .finish()
    }
}

impl RequestAudit {
    /// Upstream `WithAuditInit`: the audit ID; with an auditor, the request's facts.
    pub(crate) fn begin<B>(
        auditor: Option<&Arc<Auditor>>,
        req: &Request<B>,
        attrs: &Attributes,
        peer: SocketAddr,
        client_certificate: bool,
    ) -> RequestAudit {
        let audit_id = req
            .headers()
            .get("audit-id")
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty())
            .map(str::to_string)
            .unwrap_or_else(ferrokube_registry::meta::new_uid);
        let received = auditor.map(|_| {
            let auth = req
                .headers()
                .get(http::header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            Received {
                request_uri: req
                    .uri()
                    .path_and_query()
                    .map(|p| p.as_str().to_string())
                    .unwrap_or_else(|| req.uri().path().to_string()),
                source_ips: source_ips(req.headers(), peer),
                user_agent: req
                    .headers()
                    .get(http::header::USER_AGENT)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string),
                attrs: attrs.clone(),
                has_token: auth.len() > 7
                    && auth
                        .get(..7)
                        .is_some_and(|s| s.eq_ignore_ascii_case("bearer ")),
                has_basic: auth.len() > 6
                    && auth
                        .get(..6)
                        .is_some_and(|s| s.eq_ignore_ascii_case("basic ")),
                has_certificate: client_certificate,
            }
        });
        RequestAudit(Arc::new(RequestInner {
            audit_id,
            auditor: auditor.cloned(),
            received,
            received_at: jiff::Timestamp::now(),
            progress: Default::default(),
            annotations: AuditAnnotations::default(),
        }))
    }

    /// The sink for annotations (authorization, admission).
    pub(crate) fn annotations(&self) -> &AuditAnnotations {
        &self.0.annotations
    }

    fn facts_for(&self, user: &UserInfo) -> Option<(Arc<RequestFacts>, RequestAuditConfig)> {
        let auditor = self.0.auditor.as_ref()?;
        let r = self.0.received.as_ref()?;
        let a = &r.attrs;
        let config = auditor.policy.evaluate(&policy::RequestFacts {
            user: &user.name,
            groups: &user.groups,
            verb: &a.verb,
            resource_request: a.resource_request,
            namespace: &a.namespace,
            api_group: &a.api_group,
            resource: &a.resource,
            subresource: &a.subresource,
            name: &a.name,
            path: &a.path,
        });
        if config.level == Level::None {
            return None;
        }
        let facts = Arc::new(RequestFacts {
            audit_id: self.0.audit_id.clone(),
            level: config.level,
            omit_managed_fields: config.omit_managed_fields,
            request_uri: r.request_uri.clone(),
            verb: a.verb.clone(),
            user: user.clone(),
            source_ips: r.source_ips.clone(),
            user_agent: r.user_agent.clone(),
            object_ref: a.resource_request.then(|| ObjectRef {
                resource: a.resource.clone(),
                namespace: a.namespace.clone(),
                name: a.name.clone(),
                api_group: a.api_group.clone(),
                api_version: a.api_version.clone(),
                subresource: a.subresource.clone(),
                ..Default::default()
            }),
            received: self.0.received_at,
        });
        Some((facts, config))
    }

    fn event(&self, p: &Progress, stage: Stage) -> Option<Event> {
        let facts = p.facts.clone()?;
        Some(Event {
            facts,
            stage,
            stage_timestamp: jiff::Timestamp::now(),
            impersonated_user: p.impersonated.clone(),
            code: None,
            status: None,
            request_body: None,
            response_body: None,
            annotations: Vec::new(),
        })
    }

    /// Upstream `WithAudit` after authentication: the policy's level for `user`, and
    /// the `RequestReceived` event. False: a blocking-strict backend could not store
    /// that event, and the request must fail.
    #[must_use]
    pub(crate) async fn authenticated(&self, user: &UserInfo) -> bool {
        let Some((facts, config)) = self.facts_for(user) else {
            return true;
        };
        let event = {
            let mut p = self.0.progress.lock();
            p.facts = Some(facts);
            let records = config.records(Stage::RequestReceived);
            p.config = Some(config);
            if records {
                self.event(&p, Stage::RequestReceived)
            } else {
                None
            }
        };
        match (event, &self.0.auditor) {
            (Some(event), Some(auditor)) => auditor.emit(event).await,
            _ => true,
        }
    }

    /// Upstream `WithFailedAuthenticationAudit`: the request is audited as its
    /// (unauthenticated) self, with upstream's message.
    pub(crate) fn authentication_failed(&self) {
        let Some(r) = &self.0.received else { return };
        let Some((facts, config)) = self.facts_for(&UserInfo::default()) else {
            return;
        };
        let mut methods = Vec::new();
        if r.has_basic {
            methods.push("basic");
        }
        if r.has_token {
            methods.push("token");
        }
        if r.has_certificate {
            methods.push("certificate");
        }
        let message = if methods.is_empty() {
            "Authentication failed, no credentials provided".to_string()
        } else {
            format!("Authentication failed, attempted: {}", methods.join(", "))
        };
        let mut p = self.0.progress.lock();
        p.facts = Some(facts);
        p.config = Some(config);
        p.auth_failed = Some(message);
    }

    /// Upstream `WithImpersonation`: the user the request acts as.
    pub(crate) fn impersonated(&self, user: &UserInfo) {
        let mut p = self.0.progress.lock();
        if p.facts.is_some() {
            p.impersonated = Some(user.clone());
        }
    }

    /// Whether the request is audited at `level` or above.
    fn at_least(&self, level: Level) -> bool {
        self.0
            .progress
            .lock()
            .facts
            .as_ref()
            .is_some_and(|f| f.level >= level)
    }

    /// The request's body as read (upstream `LogRequestObject` / `LogRequestPatch`):
    /// kept from Metadata up, since the object names what objectRef leaves out.
    pub(crate) fn request_body(&self, bytes: &Bytes, content_type: &str) {
        let mut p = self.0.progress.lock();
        if p.facts.is_none() {
            return;
        }
        let essence = crate::output::media_essence(content_type);
        p.request_body = Some(RawBody {
            bytes: bytes.clone(),
            content_type: content_type.to_string(),
            is_patch: essence.ends_with("patch+json") || essence == "application/apply-patch+yaml",
        });
    }

    /// After the handler: the `Audit-Id` header, then the response's events. A
    /// long-running answer gets `ResponseStarted` now and `ResponseComplete` when its
    /// body ends; `panic` is the handler's panic message, if it panicked.
    pub(crate) async fn finish(
        &self,
        mut resp: Response<crate::handler::Body>,
        long_running: bool,
        panic: Option<&str>,
    ) -> Response<crate::handler::Body> {
        if let Ok(v) = HeaderValue::from_str(&self.0.audit_id) {
            resp.headers_mut().insert(AUDIT_ID_HEADER, v);
        }
        let Some(auditor) = &self.0.auditor else {
            return resp;
        };
        let Some(config) = self.0.progress.lock().config.clone() else {
            return resp;
        };
        let code = resp.status().as_u16();
        let annotations = self.0.annotations.snapshot();
        let base = |stage: Stage| {
            let p = self.0.progress.lock();
            let mut e = self.event(&p, stage)?;
            e.code = Some(code);
            e.request_body = p.request_body.clone();
            e.annotations = annotations.clone();
            Some(e)
        };
        let auth_failed = self.0.progress.lock().auth_failed.clone();
        if let Some(message) = auth_failed {
            // Upstream's failed-authentication event ignores omitStages.
            if let Some(mut e) = base(Stage::ResponseStarted) {
                e.status = Some(serde_json::json!({ "message": message }));
                auditor.emit(e).await;
            }
            return resp;
        }
        if let Some(message) = panic {
            if config.records(Stage::Panic)
                && let Some(mut e) = base(Stage::Panic)
            {
                e.code = Some(500);
                e.status = Some(serde_json::json!({
                    "status": "Failure",
                    "reason": "InternalError",
                    "message": format!("APIServer panic'd: {message}"),
                }));
                auditor.emit(e).await;
            }
            return resp;
        }
        if long_running {
            if config.records(Stage::ResponseStarted)
                && let Some(e) = base(Stage::ResponseStarted)
            {
                auditor.emit(e).await;
            }
            if !config.records(Stage::ResponseComplete) {
                return resp;
            }
            let Some(complete) = base(Stage::ResponseComplete) else {
                return resp;
            };
            let guard = CompleteOnDrop {
                auditor: auditor.clone(),
                event: Some(complete),
            };
            let (parts, body) = resp.into_parts();
            let body = body
                .map_frame(move |frame| {
                    let _keep_until_the_body_ends = &guard;
                    frame
                })
                .boxed_unsync();
            return Response::from_parts(parts, body);
        }
        if !config.records(Stage::ResponseComplete) {
            return resp;
        }
        let Some(mut e) = base(Stage::ResponseComplete) else {
            return resp;
        };
        // The answer is kept for the writer when it is logged (RequestResponse) or
        // may be a Status whose fields responseStatus copies (a failure).
        if self.at_least(Level::RequestResponse) || code >= 400 {
            let content_type = resp
                .headers()
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            let (parts, body) = resp.into_parts();
            let Ok(collected) = body.collect().await;
            let bytes = collected.to_bytes();
            e.response_body = Some(RawBody {
                bytes: bytes.clone(),
                content_type,
                is_patch: false,
            });
            resp = Response::from_parts(parts, http_body_util::Full::new(bytes).boxed_unsync());
        }
        auditor.emit(e).await;
        resp
    }
}

/// Writes a long-running request's `ResponseComplete` when its body is dropped (it
/// ended, or the client went away).
struct CompleteOnDrop {
    auditor: Arc<Auditor>,
    event: Option<Event>,
}

impl Drop for CompleteOnDrop {
    fn drop(&mut self) {
        if let Some(mut e) = self.event.take() {
            e.stage_timestamp = jiff::Timestamp::now();
            if tokio::runtime::Handle::try_current().is_ok() {
                self.auditor.emit_detached(e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_keeps_its_first_value() {
        let annotations = AuditAnnotations::default();
        let shared = annotations.clone();
        annotations.add("a", "1");
        shared.add("a", "2");
        shared.add("b", "3");
        assert_eq!(
            annotations.snapshot(),
            vec![("a".into(), "1".into()), ("b".into(), "3".into())]
        );
    }

    #[test]
    fn source_ips_as_upstream() {
        let peer: SocketAddr = "10.0.0.9:5555".parse().unwrap();
        let mut h = http::HeaderMap::new();
        assert_eq!(source_ips(&h, peer), vec!["10.0.0.9"]);
        h.insert("x-forwarded-for", "1.1.1.1, bad, 2.2.2.2".parse().unwrap());
        h.insert("x-real-ip", "2.2.2.2".parse().unwrap());
        assert_eq!(source_ips(&h, peer), vec!["1.1.1.1", "2.2.2.2", "10.0.0.9"]);
        h.insert("x-forwarded-for", "10.0.0.9".parse().unwrap());
        h.remove("x-real-ip");
        assert_eq!(source_ips(&h, peer), vec!["10.0.0.9"]);
    }

    /// Events in the log once `count` are there (at most 10 s).
    async fn logged(path: &std::path::Path, count: usize) -> Vec<serde_json::Value> {
        for _ in 0..200 {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            if text.lines().count() >= count {
                return text
                    .lines()
                    .map(|l| serde_json::from_str(l).unwrap())
                    .collect();
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        panic!("fewer than {count} events in {}", path.display());
    }

    #[tokio::test]
    async fn stages_of_a_watch_and_of_a_panic() {
        let dir =
            std::env::temp_dir().join(format!("ferrokube-audit-stages-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let policy = dir.join("policy.yaml");
        std::fs::write(
            &policy,
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n",
        )
        .unwrap();
        let log = dir.join("audit.log");
        let options = AuditLogOptions {
            path: Some(log.clone()),
            ..Default::default()
        };
        let auditor = Auditor::new(Some(&policy), &options, None)
            .unwrap()
            .unwrap();
        let peer: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        let alice = UserInfo::new("alice", ["devs".to_string()]);
        let body = || http_body_util::Full::new(Bytes::from_static(b"{}")).boxed_unsync();

        // A watch: RequestReceived, ResponseStarted with the answer, ResponseComplete
        // when its body is gone; the client's audit ID is kept.
        let req = Request::builder()
            .uri("/api/v1/namespaces/d/pods?watch=true")
            .header("audit-id", "client-chosen-id")
            .body(())
            .unwrap();
        let attrs = ferrokube_auth::request_attributes(
            "GET",
            "/api/v1/namespaces/d/pods",
            Some("watch=true"),
        );
        let watch = RequestAudit::begin(Some(&auditor), &req, &attrs, peer, false);
        assert!(watch.authenticated(&alice).await);
        let resp = watch.finish(Response::new(body()), true, None).await;
        assert_eq!(resp.headers()[AUDIT_ID_HEADER], "client-chosen-id");
        let events = logged(&log, 2).await;
        assert_eq!(events[0]["stage"], "RequestReceived");
        assert_eq!(events[1]["stage"], "ResponseStarted");
        assert_eq!(events[1]["verb"], "watch");
        drop(resp);
        let events = logged(&log, 3).await;
        assert_eq!(events[2]["stage"], "ResponseComplete");
        assert_eq!(events[2]["auditID"], "client-chosen-id");

        // A panic: a Panic event with upstream's status, no ResponseComplete.
        let req = Request::builder().uri("/api/v1/pods").body(()).unwrap();
        let attrs = ferrokube_auth::request_attributes("GET", "/api/v1/pods", None);
        let panicked = RequestAudit::begin(Some(&auditor), &req, &attrs, peer, false);
        assert!(panicked.authenticated(&alice).await);
        let mut resp = Response::new(body());
        *resp.status_mut() = http::StatusCode::INTERNAL_SERVER_ERROR;
        let resp = panicked.finish(resp, false, Some("boom")).await;
        let id = resp.headers()[AUDIT_ID_HEADER]
            .to_str()
            .unwrap()
            .to_string();
        let events = logged(&log, 5).await;
        assert_eq!(events[3]["stage"], "RequestReceived");
        assert_eq!(events[4]["stage"], "Panic");
        assert_eq!(events[4]["auditID"], id.as_str());
        assert_eq!(events[4]["responseStatus"]["code"], 500);
        assert_eq!(events[4]["responseStatus"]["reason"], "InternalError");
        assert_eq!(
            events[4]["responseStatus"]["message"],
            "APIServer panic'd: boom"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn long_running_requests() {
        let a = |method: &str, path: &str, q: Option<&str>| {
            is_long_running(&ferrokube_auth::request_attributes(method, path, q))
        };
        assert!(a("GET", "/api/v1/pods", Some("watch=true")));
        assert!(a("GET", "/api/v1/namespaces/d/pods/p/log", None));
        assert!(a("POST", "/api/v1/namespaces/d/pods/p/exec", None));
        assert!(!a("GET", "/api/v1/pods", None));
        assert!(!a("GET", "/healthz", None));
    }
}
