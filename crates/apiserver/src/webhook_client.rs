//! The client the apiserver calls webhooks with (upstream `k8s.io/apiserver/pkg/util/webhook`):
//! admission webhooks ([`crate::admission`]) and CustomResourceDefinition conversion
//! webhooks ([`crate::conversion`]). A `clientConfig` is reached at its `url`, or at
//! its `service` through the Service's endpoints (upstream's
//! `--enable-aggregator-routing` resolver, not the ClusterIP), over HTTPS verified
//! against its `caBundle` with the name `<service>.<namespace>.svc`; one POST of JSON
//! within a timeout, which the URL carries as `?timeout=<n>s` as upstream's REST
//! client does. Without a caBundle nothing is trusted, so such calls fail (upstream
//! falls back to the system roots).
//!
//! The token authentication, authorization and audit webhooks are reached as
//! upstream's `GenericWebhook` reaches them: through a kubeconfig file
//! ([`KubeconfigWebhook`]), whose cluster gives the URL and CA and whose user the
//! client certificate or bearer token.
//!
//! Connections are kept between calls ([`crate::https_pool`]), as upstream's clients
//! keep theirs.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use ferrokube_apimachinery::errors::ApiError;
use ferrokube_registry::{Registry, Store};
use http_body_util::{BodyExt, Limited};
use k8s_openapi::api::admissionregistration::v1 as ar;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiext;
use serde_json::Value;

use crate::https_pool::{HttpsPool, HttpsPools, full_body};

/// Largest response read from a webhook.
const MAX_RESPONSE_BYTES: usize = 3 * 1024 * 1024;

/// Where a webhook is, whichever API declared it (admission and conversion webhooks
/// have the same `clientConfig` shape in different types).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ClientConfig<'a> {
    pub url: Option<&'a str>,
    pub service: Option<ServiceRef<'a>>,
    pub ca_bundle: Option<&'a [u8]>,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct ServiceRef<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub path: Option<&'a str>,
    pub port: Option<i32>,
}

impl<'a> From<&'a ar::WebhookClientConfig> for ClientConfig<'a> {
    fn from(c: &'a ar::WebhookClientConfig) -> Self {
        ClientConfig {
            url: c.url.as_deref(),
            service: c.service.as_ref().map(|s| ServiceRef {
                namespace: &s.namespace,
                name: &s.name,
                path: s.path.as_deref(),
                port: s.port,
            }),
            ca_bundle: c.ca_bundle.as_ref().map(|b| b.0.as_slice()),
        }
    }
}

impl<'a> From<&'a apiext::WebhookClientConfig> for ClientConfig<'a> {
    fn from(c: &'a apiext::WebhookClientConfig) -> Self {
        ClientConfig {
            url: c.url.as_deref(),
            service: c.service.as_ref().map(|s| ServiceRef {
                namespace: &s.namespace,
                name: &s.name,
                path: s.path.as_deref(),
                port: s.port,
            }),
            ca_bundle: c.ca_bundle.as_ref().map(|b| b.0.as_slice()),
        }
    }
}

/// One object of `store` as its watch cache has it once the cache has applied this
/// apiserver's own writes; a live read when the cache does not have it (e.g. another
/// apiserver created it a moment ago), as upstream's listers fall back to a live GET
/// for namespaces. `None`: not found.
pub(crate) async fn fresh_get(
    store: &Store,
    ns: Option<&str>,
    name: &str,
) -> Result<Option<Arc<Value>>, ApiError> {
    store.cache().sync_own_writes().await;
    if let Some(cached) = store.cache().get(&store.key(ns, name)) {
        return Ok(Some(cached.value().clone()));
    }
    match store.get(ns, name).await {
        Ok(v) => Ok(Some(Arc::new(v))),
        Err(e) if e.code == 404 => Ok(None),
        Err(e) => Err(e),
    }
}

/// Calls webhooks: resolves their Services through the registry's Services and
/// Endpoints.
pub(crate) struct WebhookClient {
    services: Arc<Store>,
    endpoints: Arc<Store>,
    /// A pool per (caBundle, server name).
    pools: HttpsPools,
}

/// Webhook configurations whose connections are kept at once.
const WEBHOOK_POOLS: NonZeroUsize = NonZeroUsize::new(64).unwrap();

impl WebhookClient {
    pub(crate) fn new(registry: &Registry) -> Result<Self, String> {
        let store = |plural: &str| {
            registry
                .store("", "v1", plural)
                .cloned()
                .ok_or_else(|| format!("no store for {plural}"))
        };
        Ok(WebhookClient {
            services: store("services")?,
            endpoints: store("endpoints")?,
            pools: HttpsPools::new(WEBHOOK_POOLS),
        })
    }

    /// POSTs `body` (JSON) to the webhook within `timeout` and returns the 200
    /// answer's body. `Err`: upstream's REST client error, `Post "<url>": <why>`.
    pub(crate) async fn post_json(
        &self,
        config: &ClientConfig<'_>,
        timeout: Duration,
        body: Vec<u8>,
    ) -> Result<Vec<u8>, String> {
        let target = self.target(config).await?;
        post_within(&target, timeout, body)
            .await
            .map_err(|e| e.to_string())
    }

    /// Where a webhook is reached: `url`, or the first ready endpoint of `service`.
    async fn target(&self, config: &ClientConfig<'_>) -> Result<Target, String> {
        let pool = |server_name: &str| {
            let ca_bundle = config.ca_bundle.unwrap_or_default();
            self.pools
                .get_or_build(&[ca_bundle, server_name.as_bytes()], || {
                    Ok(HttpsPool::new(tls(roots(ca_bundle)?, None)?, server_name))
                })
        };
        if let Some(url) = config.url {
            let uri: http::Uri = url
                .parse()
                .map_err(|e| format!("invalid webhook URL {url:?}: {e}"))?;
            let host = host_of(&uri).ok_or_else(|| format!("webhook URL {url:?} has no host"))?;
            return Ok(Target::at(&uri, host, pool(host)?));
        }
        let Some(svc) = &config.service else {
            return Err("webhook has neither url nor service".into());
        };
        let port = svc.port.unwrap_or(443);
        let server_name = format!("{}.{}.svc", svc.name, svc.namespace);
        let not_found = || {
            format!(
                "service {:?} not found",
                format!("{}/{}", svc.namespace, svc.name)
            )
        };
        let service = fresh_get(&self.services, Some(svc.namespace), svc.name)
            .await
            .ok()
            .flatten()
            .ok_or_else(not_found)?;
        let service_port = service["spec"]["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["port"].as_i64() == Some(port.into()))
            .cloned()
            .ok_or_else(|| format!("service {server_name} has no port {port}"))?;
        let endpoints = fresh_get(&self.endpoints, Some(svc.namespace), svc.name)
            .await
            .ok()
            .flatten()
            .ok_or_else(|| format!("no endpoints for service {server_name}"))?;
        let (ip, target_port) = endpoints["subsets"]
            .as_array()
            .into_iter()
            .flatten()
            .find_map(|subset| {
                let ip = subset["addresses"][0]["ip"].as_str()?;
                let ports = subset["ports"].as_array()?;
                let p = ports
                    .iter()
                    .find(|p| {
                        p["name"].as_str().unwrap_or("")
                            == service_port["name"].as_str().unwrap_or("")
                    })
                    .or_else(|| (ports.len() == 1).then(|| &ports[0]))?;
                Some((ip.to_string(), p["port"].as_u64()? as u16))
            })
            .ok_or_else(|| format!("no ready endpoints for service {server_name}"))?;
        Ok(Target {
            pool: pool(&server_name)?,
            host: ip,
            url_host: format!("{server_name}:{port}"),
            port: target_port,
            path: svc.path.unwrap_or("/").to_string(),
            bearer_token: None,
        })
    }
}

/// The resolved address of one webhook call.
struct Target {
    /// The connections, verifying the name the serving certificate must carry (and
    /// presenting a kubeconfig user's client certificate).
    pool: HttpsPool,
    /// Where to connect.
    host: String,
    port: u16,
    /// `host[:port]` for the URL in messages and the `Host` header.
    url_host: String,
    path: String,
    /// A kubeconfig user's bearer token.
    bearer_token: Option<String>,
}

/// A client certificate and its key.
type ClientCert = (
    Vec<rustls_pki_types::CertificateDer<'static>>,
    rustls_pki_types::PrivateKeyDer<'static>,
);

/// Why a webhook call failed; Display is upstream's REST client error.
#[derive(Debug)]
pub(crate) struct PostError {
    url: String,
    /// The answer's status code, when the webhook answered.
    status: Option<u16>,
    why: String,
}

impl PostError {
    /// Upstream's `DefaultShouldRetry`: a reset connection, or 429, 500 or 504.
    fn retryable(&self) -> bool {
        match self.status {
            Some(code) => matches!(code, 429 | 500 | 504),
            None => self.why.contains("reset"),
        }
    }
}

impl std::fmt::Display for PostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Post {:?}: {}", self.url, self.why)
    }
}

/// One POST to `target` within `timeout`.
async fn post_within(
    target: &Target,
    timeout: Duration,
    body: Vec<u8>,
) -> Result<Vec<u8>, PostError> {
    let url = target.url(timeout);
    let failed = |status, why| PostError {
        url: url.clone(),
        status,
        why,
    };
    match tokio::time::timeout(timeout, post(target, &url, body)).await {
        Err(_) => Err(failed(None, "context deadline exceeded".into())),
        Ok(Err((status, why))) => Err(failed(status, why)),
        Ok(Ok(body)) => Ok(body),
    }
}

/// The version of the review API a kubeconfig webhook speaks
/// (`--authentication-token-webhook-version`, `--authorization-webhook-version`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReviewVersion {
    V1,
    V1beta1,
}

impl ReviewVersion {
    /// Upstream's parsing, `webhook` naming it in the message (`authentication`,
    /// `authorization`).
    pub fn parse(webhook: &str, s: &str) -> Result<ReviewVersion, String> {
        match s {
            "v1" => Ok(ReviewVersion::V1),
            "v1beta1" => Ok(ReviewVersion::V1beta1),
            other => Err(format!(
                "unsupported {webhook} webhook version {other:?}, supported versions are \"v1\", \"v1beta1\""
            )),
        }
    }

    /// The review's `apiVersion` in `group`.
    pub(crate) fn api_version(self, group: &str) -> String {
        match self {
            ReviewVersion::V1 => format!("{group}/v1"),
            ReviewVersion::V1beta1 => format!("{group}/v1beta1"),
        }
    }
}

/// A webhook a kubeconfig file describes (upstream `GenericWebhook`): its current
/// context's cluster (`server`, `certificate-authority[-data]`, `tls-server-name`)
/// and user (`client-certificate[-data]` with `client-key[-data]`, `token` or
/// `tokenFile`). The request goes to the exact URL of `server`.
pub(crate) struct KubeconfigWebhook {
    target: Target,
}

impl KubeconfigWebhook {
    pub(crate) async fn from_file(path: &std::path::Path) -> Result<Self, String> {
        use secrecy::ExposeSecret;
        let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(|e| e.to_string())?;
        let config = kube::Config::from_custom_kubeconfig(
            kubeconfig,
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .map_err(|e| e.to_string())?;
        let uri = &config.cluster_url;
        if uri.scheme_str() != Some("https") {
            return Err(format!("server {uri}: only https webhooks are supported"));
        }
        let mut roots = rustls::RootCertStore::empty();
        for der in config.root_cert.iter().flatten() {
            roots
                .add(rustls_pki_types::CertificateDer::from(der.clone()))
                .map_err(|e| format!("certificate-authority: {e}"))?;
        }
        if roots.is_empty() {
            return Err("the cluster has no certificate-authority[-data]".into());
        }
        let user = &config.auth_info;
        let load = |data: Option<&str>,
                    file: &Option<String>,
                    what: &str|
         -> Result<Option<Vec<u8>>, String> {
            use base64::Engine;
            match (data, file) {
                (Some(data), _) => base64::engine::general_purpose::STANDARD
                    .decode(data.trim())
                    .map(Some)
                    .map_err(|e| format!("{what}-data: {e}")),
                (None, Some(file)) => std::fs::read(file)
                    .map(Some)
                    .map_err(|e| format!("{what} {file}: {e}")),
                (None, None) => Ok(None),
            }
        };
        let cert = load(
            user.client_certificate_data.as_deref(),
            &user.client_certificate,
            "client-certificate",
        )?;
        let key = load(
            user.client_key_data.as_ref().map(|k| k.expose_secret()),
            &user.client_key,
            "client-key",
        )?;
        let cert = match (cert, key) {
            (Some(cert), Some(key)) => {
                use rustls_pki_types::pem::PemObject;
                let certs = rustls_pki_types::CertificateDer::pem_slice_iter(&cert)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| format!("client-certificate: {e}"))?;
                let key = rustls_pki_types::PrivateKeyDer::from_pem_slice(&key)
                    .map_err(|e| format!("client-key: {e}"))?;
                Some((certs, key))
            }
            (None, None) => None,
            _ => return Err("client-certificate and client-key go together".into()),
        };
        let bearer_token = match (&user.token, &user.token_file) {
            (Some(token), _) => Some(token.expose_secret().to_string()),
            (None, Some(file)) => Some(
                std::fs::read_to_string(file)
                    .map_err(|e| format!("tokenFile {file}: {e}"))?
                    .trim()
                    .to_string(),
            ),
            (None, None) => None,
        };
        let host = host_of(uri).ok_or_else(|| format!("server {uri} has no host"))?;
        let server_name = config.tls_server_name.as_deref().unwrap_or(host);
        let pool = HttpsPool::new(tls(roots, cert)?, server_name);
        let mut target = Target::at(uri, host, pool);
        target.bearer_token = bearer_token;
        Ok(KubeconfigWebhook { target })
    }

    /// POSTs `body` (JSON), each try within `timeout`; the 200 answer's body. As
    /// upstream's `WithExponentialBackoff` with `DefaultShouldRetry`: a call answered
    /// 429, 500 or 504, or whose connection was reset, is tried again after
    /// `first_backoff` (upstream's authentication and authorization webhooks: 0.5 s),
    /// then 1.5 times longer each time, five tries in all.
    pub(crate) async fn post_json_retrying(
        &self,
        timeout: Duration,
        first_backoff: Duration,
        body: Vec<u8>,
    ) -> Result<Vec<u8>, PostError> {
        const TRIES: u32 = 5;
        let mut backoff = first_backoff;
        let mut tries = 0;
        loop {
            tries += 1;
            match post_within(&self.target, timeout, body.clone()).await {
                Err(e) if tries < TRIES && e.retryable() => {
                    tokio::time::sleep(backoff).await;
                    backoff = backoff.mul_f64(1.5);
                }
                answer => return answer,
            }
        }
    }
}

/// An https URL's host, without an IPv6 address's brackets.
fn host_of(uri: &http::Uri) -> Option<&str> {
    Some(uri.host()?.trim_start_matches('[').trim_end_matches(']'))
}

impl Target {
    /// The target an https URL names: `host` (its [`host_of`]) through `pool`.
    fn at(uri: &http::Uri, host: &str, pool: HttpsPool) -> Target {
        Target {
            pool,
            url_host: uri
                .authority()
                .map(|a| a.to_string())
                .unwrap_or(host.to_string()),
            host: host.to_string(),
            port: uri.port_u16().unwrap_or(443),
            path: uri.path().to_string(),
            bearer_token: None,
        }
    }

    /// As upstream, the URL carries the timeout for the webhook's own use.
    fn url(&self, timeout: Duration) -> String {
        format!(
            "https://{}{}?timeout={}s",
            self.url_host,
            self.path,
            timeout.as_secs()
        )
    }
}

/// The CA bundle's certificates (none: nothing verifies, so every call fails, which
/// beats trusting anything).
fn roots(ca_bundle: &[u8]) -> Result<rustls::RootCertStore, String> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_bundle) {
        let c = c.map_err(|e| format!("invalid caBundle: {e}"))?;
        roots.add(c).map_err(|e| format!("invalid caBundle: {e}"))?;
    }
    Ok(roots)
}

#[cfg(test)]
impl KubeconfigWebhook {
    /// A webhook on a port nothing listens on, for tests that never call it.
    pub(crate) fn unreachable_for_tests() -> Self {
        KubeconfigWebhook {
            target: Target {
                pool: HttpsPool::new(
                    tls(rustls::RootCertStore::empty(), None).expect("a TLS client without roots"),
                    "localhost",
                ),
                host: "127.0.0.1".into(),
                port: 1,
                url_host: "127.0.0.1:1".into(),
                path: "/".into(),
                bearer_token: None,
            },
        }
    }
}

/// The TLS client of a webhook: `roots` trusted, `client_cert` presented.
fn tls(
    roots: rustls::RootCertStore,
    client_cert: Option<ClientCert>,
) -> Result<Arc<rustls::ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    let tls = match client_cert {
        Some((certs, key)) => tls
            .with_client_auth_cert(certs, key)
            .map_err(|e| format!("client certificate: {e}"))?,
        None => tls.with_no_client_auth(),
    };
    Ok(Arc::new(tls))
}

/// POSTs the body over HTTPS and returns the 200 response's body; an error carries
/// the answer's status code when there was one.
async fn post(target: &Target, url: &str, body: Vec<u8>) -> Result<Vec<u8>, (Option<u16>, String)> {
    let transport = |e: String| (None, e);
    let path_and_query = url
        .strip_prefix("https://")
        .and_then(|rest| rest.find('/').map(|i| &rest[i..]))
        .unwrap_or("/");
    let mut req = http::Request::post(path_and_query)
        .header(http::header::HOST, &target.url_host)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json");
    if let Some(token) = &target.bearer_token {
        req = req.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let req = req
        .body(full_body(body))
        .map_err(|e| transport(e.to_string()))?;
    let resp = target
        .pool
        .send(&target.host, target.port, req)
        .await
        .map_err(transport)?;
    let status = resp.status();
    let body = Limited::new(resp.into_body(), MAX_RESPONSE_BYTES)
        .collect()
        .await
        .map_err(|e| transport(format!("reading the response: {e}")))?
        .to_bytes();
    if !status.is_success() {
        return Err((
            Some(status.as_u16()),
            format!(
                "the server responded with the status code {} ({})",
                status.as_u16(),
                String::from_utf8_lossy(&body)
                    .chars()
                    .take(200)
                    .collect::<String>()
            ),
        ));
    }
    Ok(body.to_vec())
}
