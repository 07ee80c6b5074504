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

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrokube_apimachinery::errors::ApiError;
use ferrokube_auth::{
    AuthRequest, Authenticator, RequestHeaderAuthenticator, RequestHeaderConfig, X509Authenticator,
};
use ferrokube_client::delegated::{Attributes, Decision, Gate, ResourceRequest, User};
use http_body_util::Full;
use hyper::body::Bytes;
use parking_lot::{Mutex, RwLock};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::api::{self, GROUP, Meta, Target, VERSION};
use crate::storage::Storage;

/// How extension apiservers authenticate callers: the ConfigMap
/// `kube-system/extension-apiserver-authentication`'s data.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthConfig {
    /// `requestheader-client-ca-file` and the `requestheader-*` lists.
    pub request_header: Option<(String, RequestHeaderConfig)>,
    /// `client-ca-file`.
    pub client_ca: Option<String>,
}

impl AuthConfig {
    /// From the ConfigMap's data (lists are JSON arrays of strings).
    pub fn from_configmap_data(data: &BTreeMap<String, String>) -> AuthConfig {
        let list = |key: &str| -> Vec<String> {
            data.get(key)
                .and_then(|v| serde_json::from_str(v).ok())
                .unwrap_or_default()
        };
        let request_header = data
            .get("requestheader-client-ca-file")
            .filter(|ca| !ca.trim().is_empty())
            .map(|ca| {
                (
                    ca.clone(),
                    RequestHeaderConfig {
                        username_headers: list("requestheader-username-headers"),
                        uid_headers: list("requestheader-uid-headers"),
                        group_headers: list("requestheader-group-headers"),
                        extra_header_prefixes: list("requestheader-extra-headers-prefix"),
                        allowed_names: list("requestheader-allowed-names"),
                    },
                )
            });
        AuthConfig {
            request_header,
            client_ca: data
                .get("client-ca-file")
                .filter(|ca| !ca.trim().is_empty())
                .cloned(),
        }
    }

    /// Reads the ConfigMap through the API (the `extension-apiserver-authentication-reader`
    /// Role lets the ServiceAccount do so).
    pub async fn from_cluster(client: &kube::Client) -> Result<AuthConfig, kube::Error> {
        let cms: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
            kube::Api::namespaced(client.clone(), "kube-system");
        let cm = cms.get("extension-apiserver-authentication").await?;
        Ok(AuthConfig::from_configmap_data(
            &cm.data.unwrap_or_default(),
        ))
    }

    /// Every CA whose client certificates the TLS layer should ask for (verified again
    /// by the authenticators).
    pub fn client_cas_pem(&self) -> Option<String> {
        let mut pem = String::new();
        for ca in self
            .request_header
            .as_ref()
            .map(|(ca, _)| ca)
            .into_iter()
            .chain(self.client_ca.as_ref())
        {
            pem.push_str(ca.trim_end());
            pem.push('\n');
        }
        (!pem.is_empty()).then_some(pem)
    }
}

/// Who a request is and whether it may proceed.
pub struct Auth {
    request_header: Option<RequestHeaderAuthenticator>,
    x509: Option<X509Authenticator>,
    gate: Gate,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("request_header", &self.request_header.is_some())
            .field("x509", &self.x509.is_some())
            .finish_non_exhaustive()
    }
}

impl Auth {
    /// `config`'s authenticators; tokens are reviewed and requests authorized with
    /// `client` (the server's own credentials, as upstream's in-cluster delegation).
    pub fn new(config: &AuthConfig, client: Option<kube::Client>) -> Result<Auth, String> {
        let request_header = config
            .request_header
            .as_ref()
            .map(|(ca, c)| RequestHeaderAuthenticator::new(ca, c.clone()))
            .transpose()
            .map_err(|e| format!("request-header authentication: {e}"))?;
        let x509 = config
            .client_ca
            .as_deref()
            .map(X509Authenticator::new)
            .transpose()
            .map_err(|e| format!("client-ca-file: {e}"))?;
        Ok(Auth {
            request_header,
            x509,
            gate: Gate::new(vec![], client.clone(), client, Default::default()),
        })
    }

    /// The request's user, or 401.
    pub async fn authenticate(
        &self,
        headers: &http::HeaderMap,
        peer: &[rustls_pki_types::CertificateDer<'static>],
    ) -> Result<User, ApiError> {
        let request = AuthRequest {
            headers,
            peer_certificates: peer,
        };
        let unauthorized = |e: &dyn std::fmt::Display| {
            tracing::debug!(error = %e, "authentication failed");
            ApiError::unauthorized("Unauthorized")
        };
        // A union, as upstream's: the first authenticator that knows the request wins;
        // an error counts only when none does (a cluster client certificate sent with
        // X-Remote-* headers is its own user, not the headers').
        let mut failure = None;
        for authn in [
            self.request_header
                .as_ref()
                .map(|a| a as &dyn Authenticator),
            self.x509.as_ref().map(|a| a as &dyn Authenticator),
        ]
        .into_iter()
        .flatten()
        {
            match authn.authenticate(&request) {
                Ok(Some(u)) => {
                    return Ok(User {
                        name: u.name,
                        uid: u.uid,
                        groups: u.groups,
                        extra: u.extra,
                    });
                }
                Ok(None) => {}
                Err(e) => failure = Some(e),
            }
        }
        if let Some(e) = failure {
            return Err(unauthorized(&e));
        }
        let bearer = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        self.gate.authenticate(bearer, None).await
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

/// One request's answer: status, content type and body.
pub async fn handle(
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
    let task = tokio::spawn(async move {
        loop {
            let stream = tokio::select! {
                _ = cancel.cancelled() => return,
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => stream,
                    Err(_) => continue,
                },
            };
            let (acceptor, auth, state) = (acceptor.clone(), auth.clone(), state.clone());
            let cancel = cancel.clone();
            tokio::spawn(async move {
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
                let svc = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let (auth, state, peer) = (auth.clone(), state.clone(), peer.clone());
                        async move {
                            let (code, content_type, body) = handle(
                                &auth,
                                &state,
                                req.method(),
                                req.uri(),
                                req.headers(),
                                &peer,
                            )
                            .await;
                            hyper::Response::builder()
                                .status(code)
                                .header("content-type", content_type)
                                .header("x-content-type-options", "nosniff")
                                .body(Full::new(Bytes::from(body)))
                        }
                    },
                );
                let conn = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                );
                let serving = conn.serve_connection(hyper_util::rt::TokioIo::new(stream), svc);
                tokio::select! {
                    _ = serving => {}
                    _ = cancel.cancelled() => {}
                }
            });
        }
    });
    Ok((bound, task))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configmap_names_the_request_header_settings() {
        let data = BTreeMap::from([
            ("client-ca-file".to_string(), "CLIENT".to_string()),
            ("requestheader-client-ca-file".into(), "RH".into()),
            (
                "requestheader-username-headers".into(),
                r#"["X-Remote-User"]"#.into(),
            ),
            (
                "requestheader-group-headers".into(),
                r#"["X-Remote-Group"]"#.into(),
            ),
            (
                "requestheader-extra-headers-prefix".into(),
                r#"["X-Remote-Extra-"]"#.into(),
            ),
            (
                "requestheader-allowed-names".into(),
                r#"["front-proxy-client"]"#.into(),
            ),
            ("requestheader-uid-headers".into(), "[]".into()),
        ]);
        let cfg = AuthConfig::from_configmap_data(&data);
        let (ca, rh) = cfg.request_header.clone().unwrap();
        assert_eq!(ca, "RH");
        assert_eq!(rh.username_headers, vec!["X-Remote-User"]);
        assert_eq!(rh.group_headers, vec!["X-Remote-Group"]);
        assert_eq!(rh.allowed_names, vec!["front-proxy-client"]);
        assert!(rh.uid_headers.is_empty());
        assert_eq!(cfg.client_ca.as_deref(), Some("CLIENT"));
        assert_eq!(cfg.client_cas_pem().unwrap(), "RH\nCLIENT\n");
        let empty = AuthConfig::from_configmap_data(&BTreeMap::new());
        assert_eq!(empty, AuthConfig::default());
        assert_eq!(empty.client_cas_pem(), None);
    }

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
        let auth = Auth::new(&AuthConfig::default(), None).unwrap();
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
    }
}
