//! The HTTPS endpoint: the metrics.k8s.io API ([`crate::api`]) behind upstream's
//! delegated authentication and authorization, and `/healthz`, `/livez`, `/readyz`.
//!
//! Authentication, in upstream's order: a client certificate of the request-header CA
//! (the aggregator's front-proxy client, with an allowed CN) names the user in
//! `X-Remote-User`/`X-Remote-Group`/`X-Remote-Extra-*` (the header names the
//! ConfigMap `kube-system/extension-apiserver-authentication` gives); a client
//! certificate of its `client-ca-file` is its CN/O; a bearer token is reviewed
//! (TokenReview); anything else is `system:anonymous`. A certificate or token that
//! does not verify is a 401. Authorization: a SubjectAccessReview (`get`/`list`
//! `nodes`/`pods` in `metrics.k8s.io`, or the discovery path as a non-resource URL;
//! `system:masters` needs none), cached briefly; a denial is a 403 Status. Health
//! paths need neither.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrokube_apimachinery::errors::ApiError;
use ferrokube_apimachinery::pretty;
use ferrokube_client::delegated::{
    Attributes, Decision, Gate, LiveClientCertificates, ResourceRequest, User, bearer_token,
};
use ferrokube_client::serving::accept_until;
use http_body_util::Full;
use hyper::body::Bytes;
use parking_lot::{Mutex, RwLock};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::api::{self, GROUP, Meta, Target, VERSION};
use crate::storage::Storage;

/// Who a request is and whether it may proceed.
#[derive(Debug)]
pub struct Auth {
    gate: Gate,
}

impl Auth {
    /// Client certificates judged by `certificates`; tokens are reviewed and requests
    /// authorized with `client` (the server's own credentials, as upstream's in-cluster
    /// delegation).
    pub fn new(certificates: LiveClientCertificates, client: Option<kube::Client>) -> Auth {
        Auth {
            gate: Gate::new(vec![], client.clone(), client, Default::default())
                .with_live_client_certificates(certificates),
        }
    }

    /// The request's user, or 401.
    pub async fn authenticate(
        &self,
        headers: &http::HeaderMap,
        peer: &[rustls_pki_types::CertificateDer<'static>],
    ) -> Result<User, ApiError> {
        self.gate
            .authenticate_request(bearer_token(headers), peer, headers)
            .await
    }

    /// Whether `user` may `GET` `target` (`path` for discovery), or 403.
    pub async fn authorize(
        &self,
        user: &User,
        target: &Target,
        path: &str,
        watch: bool,
    ) -> Result<(), ApiError> {
        let (attrs, forbidden) = match target.resource_attributes(watch) {
            Some((verb, resource, namespace, name)) => {
                let scope = if namespace.is_empty() {
                    "at the cluster scope".to_string()
                } else {
                    format!("in the namespace {namespace:?}")
                };
                let message = format!(
                    "User {:?} cannot {verb} resource {resource:?} in API group {GROUP:?} {scope}",
                    user.name
                );
                (
                    Attributes::Resource(ResourceRequest {
                        verb: verb.into(),
                        group: GROUP.into(),
                        version: VERSION.into(),
                        resource: resource.into(),
                        subresource: String::new(),
                        namespace,
                        name: name.clone(),
                    }),
                    ApiError::forbidden(GROUP, resource, &name, message),
                )
            }
            None => (
                Attributes::NonResource {
                    verb: "get".into(),
                    path: path.into(),
                },
                ApiError::forbidden(
                    "",
                    "",
                    "",
                    format!("User {:?} cannot get path {path:?}", user.name),
                ),
            ),
        };
        match self.gate.authorize(user, &attrs).await {
            Ok(Decision::Allow) => Ok(()),
            Ok(Decision::Deny(_)) => Err(forbidden),
            Err(e) => {
                tracing::warn!(error = e, "authorization failed");
                Err(forbidden)
            }
        }
    }
}

/// What the endpoint serves from: the metric storage, the nodes' and pods' metadata
/// (from informers), and the collection's health.
pub struct State {
    pub storage: RwLock<Storage>,
    /// Every node's metadata.
    pub nodes: Box<dyn Fn() -> Vec<Meta> + Send + Sync>,
    /// Every pod's metadata.
    pub pods: Box<dyn Fn() -> Vec<Meta> + Send + Sync>,
    /// Whether the informers have synced.
    pub synced: Box<dyn Fn() -> bool + Send + Sync>,
    /// When the last collection ended; `/livez` fails when it is older than this
    /// much.
    pub last_tick: Mutex<Instant>,
    pub live_within: Duration,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State").finish_non_exhaustive()
    }
}

impl State {
    /// `/healthz`, `/livez`, `/readyz`: status and text, as upstream's checks
    /// (`metric-collection-timely`, `metric-storage-ready`, `metric-informer-sync`).
    pub fn health(&self, check: &str) -> (u16, String) {
        let timely = self.last_tick.lock().elapsed() <= self.live_within;
        let storage_ready = self.storage.read().ready();
        let synced = (self.synced)();
        let checks: Vec<(&str, bool)> = match check {
            "livez" => vec![("ping", true), ("metric-collection-timely", timely)],
            "readyz" => vec![
                ("ping", true),
                ("metric-storage-ready", storage_ready),
                ("metric-informer-sync", synced),
            ],
            _ => vec![("ping", true)],
        };
        if checks.iter().all(|(_, ok)| *ok) {
            return (200, "ok".into());
        }
        let mut text = String::new();
        for (name, ok) in &checks {
            let mark = if *ok { "+" } else { "-" };
            let status = if *ok { "ok" } else { "failed: reason withheld" };
            text.push_str(&format!("[{mark}]{name} {status}\n"));
        }
        text.push_str(&format!("{check} check failed\n"));
        (500, text)
    }
}

fn status_body(e: &ApiError) -> (u16, &'static str, Vec<u8>) {
    (
        e.code,
        "application/json",
        serde_json::to_vec(&e.to_status()).unwrap_or_default(),
    )
}

/// One request's answer: status, content type and body; JSON indented for `?pretty`
/// and people's tools, as upstream's metrics-server (a generic API server) writes it.
pub async fn handle(
    auth: &Auth,
    state: &State,
    method: &http::Method,
    uri: &http::Uri,
    headers: &http::HeaderMap,
    peer: &[rustls_pki_types::CertificateDer<'static>],
) -> (u16, &'static str, Vec<u8>) {
    let (code, content_type, body) = answer(auth, state, method, uri, headers, peer).await;
    let user_agent = headers
        .get(http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok());
    let body =
        if content_type == "application/json" && pretty::wants_pretty(uri.query(), user_agent) {
            pretty::indent_json(&body).unwrap_or(body)
        } else {
            body
        };
    (code, content_type, body)
}

async fn answer(
    auth: &Auth,
    state: &State,
    method: &http::Method,
    uri: &http::Uri,
    headers: &http::HeaderMap,
    peer: &[rustls_pki_types::CertificateDer<'static>],
) -> (u16, &'static str, Vec<u8>) {
    let path = uri.path();
    let target = Target::of(path);
    if let Target::Health(check) = target {
        let (code, text) = state.health(check);
        return (code, "text/plain; charset=utf-8", text.into_bytes());
    }
    let user = match auth.authenticate(headers, peer).await {
        Ok(u) => u,
        Err(e) => return status_body(&e),
    };
    let watch = uri
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
    if let Err(e) = auth.authorize(&user, &target, path, watch).await {
        return status_body(&e);
    }
    if method != http::Method::GET && method != http::Method::HEAD {
        let resource = match &target {
            Target::Nodes(_) => "nodes",
            Target::Pods { .. } => "pods",
            _ => "",
        };
        let verb = method.as_str().to_ascii_lowercase();
        return status_body(&ApiError::method_not_supported(GROUP, resource, &verb));
    }
    let (nodes, pods) = match &target {
        Target::Nodes(_) => ((state.nodes)(), vec![]),
        Target::Pods { .. } => (vec![], (state.pods)()),
        _ => (vec![], vec![]),
    };
    let answer = {
        let storage = state.storage.read();
        api::get(&target, uri.query(), &storage, &nodes, &pods)
    };
    match answer {
        Ok(v) => (200, "application/json", to_vec(&v)),
        Err(e) => status_body(&e),
    }
}

fn to_vec(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap_or_default()
}

/// Binds `addr` and serves until `cancel`; returns the bound address and the task.
pub async fn serve(
    addr: SocketAddr,
    tls: Arc<rustls::ServerConfig>,
    auth: Arc<Auth>,
    state: Arc<State>,
    cancel: CancellationToken,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tracing::info!(addr = %bound, "serving metrics.k8s.io/v1beta1 over HTTPS");
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let task = tokio::spawn(accept_until(listener, cancel.clone(), move |stream| {
        let (acceptor, auth, state) = (acceptor.clone(), auth.clone(), state.clone());
        let cancel = cancel.clone();
        async move {
            let Ok(Ok(stream)) =
                tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream)).await
            else {
                return;
            };
            let peer: Arc<Vec<rustls_pki_types::CertificateDer<'static>>> = Arc::new(
                stream
                    .get_ref()
                    .1
                    .peer_certificates()
                    .map(|c| c.to_vec())
                    .unwrap_or_default(),
            );
            let svc =
                hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let (auth, state, peer) = (auth.clone(), state.clone(), peer.clone());
                    async move {
                        let (code, content_type, body) =
                            handle(&auth, &state, req.method(), req.uri(), req.headers(), &peer)
                                .await;
                        hyper::Response::builder()
                            .status(code)
                            .header("content-type", content_type)
                            .header("x-content-type-options", "nosniff")
                            .body(Full::new(Bytes::from(body)))
                    }
                });
            let conn =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
            let serving = conn.serve_connection(hyper_util::rt::TokioIo::new(stream), svc);
            tokio::select! {
                _ = serving => {}
                _ = cancel.cancelled() => {}
            }
        }
    }));
    Ok((bound, task))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> State {
        State {
            storage: RwLock::new(Storage::new(Duration::from_secs(15))),
            nodes: Box::new(Vec::new),
            pods: Box::new(Vec::new),
            synced: Box::new(|| true),
            last_tick: Mutex::new(Instant::now()),
            live_within: Duration::from_secs(30),
        }
    }

    #[tokio::test]
    async fn health_needs_no_credentials_and_the_api_needs_them() {
        let auth = Auth::new(LiveClientCertificates::default(), None);
        let st = state();
        let get = |path: &str| -> http::Uri { path.parse().unwrap() };
        let headers = http::HeaderMap::new();
        let (code, _, body) = handle(
            &auth,
            &st,
            &http::Method::GET,
            &get("/livez"),
            &headers,
            &[],
        )
        .await;
        assert_eq!((code, body.as_slice()), (200, &b"ok"[..]));
        // Nothing stored yet: not ready.
        let (code, _, body) = handle(
            &auth,
            &st,
            &http::Method::GET,
            &get("/readyz"),
            &headers,
            &[],
        )
        .await;
        assert_eq!(code, 500);
        assert!(String::from_utf8_lossy(&body).contains("[-]metric-storage-ready"));
        st.storage.write().store(Default::default());
        let (code, _, _) = handle(
            &auth,
            &st,
            &http::Method::GET,
            &get("/readyz"),
            &headers,
            &[],
        )
        .await;
        assert_eq!(code, 200);
        // Anonymous, and no client to ask: forbidden, with a Status.
        let (code, ct, body) = handle(
            &auth,
            &st,
            &http::Method::GET,
            &get("/apis/metrics.k8s.io/v1beta1/nodes"),
            &headers,
            &[],
        )
        .await;
        assert_eq!((code, ct), (403, "application/json"));
        let status: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(status["kind"], "Status");
        assert_eq!(
            status["message"],
            "nodes.metrics.k8s.io is forbidden: User \"system:anonymous\" cannot list resource \"nodes\" in API group \"metrics.k8s.io\" at the cluster scope"
        );
        assert!(body.starts_with(b"{\""));
        // The same answer indented for curl, and for ?pretty=true.
        let mut curl = http::HeaderMap::new();
        curl.insert(http::header::USER_AGENT, "curl/8.5.0".parse().unwrap());
        for (path, headers) in [
            ("/apis/metrics.k8s.io/v1beta1/nodes", &curl),
            ("/apis/metrics.k8s.io/v1beta1/nodes?pretty=true", &headers),
        ] {
            let (code, _, pretty) =
                handle(&auth, &st, &http::Method::GET, &get(path), headers, &[]).await;
            assert_eq!(code, 403);
            assert!(pretty.starts_with(b"{\n  \""), "{path}");
            assert_eq!(serde_json::from_slice::<Value>(&pretty).unwrap(), status);
        }
    }
}
