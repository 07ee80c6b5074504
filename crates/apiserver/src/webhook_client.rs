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

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ferrokube_apimachinery::errors::ApiError;
use ferrokube_registry::{Registry, Store};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::admissionregistration::v1 as ar;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiext;
use serde_json::Value;

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
}

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
        let roots = roots(config.ca_bundle)?;
        if let Some(url) = config.url {
            let uri: http::Uri = url
                .parse()
                .map_err(|e| format!("invalid webhook URL {url:?}: {e}"))?;
            return Target::at(&uri, roots)
                .ok_or_else(|| format!("webhook URL {url:?} has no host"));
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
            server_name: server_name.clone(),
            host: ip,
            url_host: format!("{server_name}:{port}"),
            port: target_port,
            path: svc.path.unwrap_or("/").to_string(),
            roots,
            client_auth: None,
        })
    }
}

/// The resolved address of one webhook call.
struct Target {
    /// The name the serving certificate must carry.
    server_name: String,
    /// Where to connect.
    host: String,
    port: u16,
    /// `host[:port]` for the URL in messages.
    url_host: String,
    path: String,
    roots: rustls::RootCertStore,
    client_auth: Option<ClientAuth>,
}

/// Who the apiserver is to a webhook a kubeconfig names: its user's client
/// certificate, or bearer token, or both.
#[derive(Default)]
struct ClientAuth {
    cert: Option<(
        Vec<rustls_pki_types::CertificateDer<'static>>,
        rustls_pki_types::PrivateKeyDer<'static>,
    )>,
    bearer_token: Option<String>,
}

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
        let mut target =
            Target::at(uri, roots).ok_or_else(|| format!("server {uri} has no host"))?;
        if let Some(name) = &config.tls_server_name {
            target.server_name = name.clone();
        }
        target.client_auth = Some(ClientAuth { cert, bearer_token });
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

impl Target {
    /// The target an https URL names, its host the name the certificate must carry
    /// (None: the URL has no host).
    fn at(uri: &http::Uri, roots: rustls::RootCertStore) -> Option<Target> {
        let host = uri
            .host()?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        Some(Target {
            server_name: host.clone(),
            url_host: uri
                .authority()
                .map(|a| a.to_string())
                .unwrap_or(host.clone()),
            host,
            port: uri.port_u16().unwrap_or(443),
            path: uri.path().to_string(),
            roots,
            client_auth: None,
        })
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
fn roots(ca_bundle: Option<&[u8]>) -> Result<rustls::RootCertStore, String> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_bundle.unwrap_or_default()) {
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
                server_name: "localhost".into(),
                host: "127.0.0.1".into(),
                port: 1,
                url_host: "127.0.0.1:1".into(),
                path: "/".into(),
                roots: rustls::RootCertStore::empty(),
                client_auth: None,
            },
        }
    }
}

/// POSTs the body over HTTPS and returns the 200 response's body; an error carries
/// the answer's status code when there was one.
async fn post(target: &Target, url: &str, body: Vec<u8>) -> Result<Vec<u8>, (Option<u16>, String)> {
    let transport = |e: String| (None, e);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| transport(e.to_string()))?
        .with_root_certificates(target.roots.clone());
    let client_cert = target.client_auth.as_ref().and_then(|a| a.cert.as_ref());
    let tls = match client_cert {
        Some((certs, key)) => tls
            .with_client_auth_cert(certs.clone(), key.clone_key())
            .map_err(|e| transport(format!("client certificate: {e}")))?,
        None => tls.with_no_client_auth(),
    };
    let addr = if target.host.contains(':') {
        format!("[{}]:{}", target.host, target.port)
    } else {
        format!("{}:{}", target.host, target.port)
    };
    let tcp = tokio::net::TcpStream::connect(&addr)
        .await
        .map_err(|e| transport(format!("dial tcp {addr}: {e}")))?;
    let name = rustls_pki_types::ServerName::try_from(target.server_name.clone())
        .map_err(|e| transport(format!("server name {:?}: {e}", target.server_name)))?;
    let stream = tokio_rustls::TlsConnector::from(Arc::new(tls))
        .connect(name, tcp)
        .await
        .map_err(|e| transport(format!("tls: {e}")))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| transport(e.to_string()))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let path_and_query = url
        .strip_prefix("https://")
        .and_then(|rest| rest.find('/').map(|i| &rest[i..]))
        .unwrap_or("/");
    let mut req = http::Request::post(path_and_query)
        .header(http::header::HOST, &target.url_host)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json");
    if let Some(token) = target
        .client_auth
        .as_ref()
        .and_then(|a| a.bearer_token.as_ref())
    {
        req = req.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let req = req
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| transport(e.to_string()))?;
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| transport(e.to_string()))?;
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
