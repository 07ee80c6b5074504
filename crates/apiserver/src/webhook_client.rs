//! The client the apiserver calls webhooks with (upstream `k8s.io/apiserver/pkg/util/webhook`):
//! admission webhooks ([`crate::admission`]) and CustomResourceDefinition conversion
//! webhooks ([`crate::conversion`]). A `clientConfig` is reached at its `url`, or at
//! its `service` through the Service's endpoints (upstream's
//! `--enable-aggregator-routing` resolver, not the ClusterIP), over HTTPS verified
//! against its `caBundle` with the name `<service>.<namespace>.svc`; one POST of JSON
//! within a timeout, which the URL carries as `?timeout=<n>s` as upstream's REST
//! client does. Without a caBundle nothing is trusted, so such calls fail (upstream
//! falls back to the system roots).

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
        let url = target.url(timeout);
        tokio::time::timeout(timeout, post(&target, &url, body))
            .await
            .map_err(|_| format!("Post {url:?}: context deadline exceeded"))?
            .map_err(|e| format!("Post {url:?}: {e}"))
    }

    /// Where a webhook is reached: `url`, or the first ready endpoint of `service`.
    async fn target(&self, config: &ClientConfig<'_>) -> Result<Target, String> {
        let roots = roots(config.ca_bundle)?;
        if let Some(url) = config.url {
            let uri: http::Uri = url
                .parse()
                .map_err(|e| format!("invalid webhook URL {url:?}: {e}"))?;
            let host = uri
                .host()
                .ok_or_else(|| format!("webhook URL {url:?} has no host"))?
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string();
            return Ok(Target {
                server_name: host.clone(),
                host: host.clone(),
                url_host: uri.authority().map(|a| a.to_string()).unwrap_or(host),
                port: uri.port_u16().unwrap_or(443),
                path: uri.path().to_string(),
                roots,
            });
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
}

impl Target {
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

/// POSTs the body over HTTPS and returns the 200 response's body.
async fn post(target: &Target, url: &str, body: Vec<u8>) -> Result<Vec<u8>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(target.roots.clone())
        .with_no_client_auth();
    let addr = if target.host.contains(':') {
        format!("[{}]:{}", target.host, target.port)
    } else {
        format!("{}:{}", target.host, target.port)
    };
    let tcp = tokio::net::TcpStream::connect(&addr)
        .await
        .map_err(|e| format!("dial tcp {addr}: {e}"))?;
    let name = rustls_pki_types::ServerName::try_from(target.server_name.clone())
        .map_err(|e| format!("server name {:?}: {e}", target.server_name))?;
    let stream = tokio_rustls::TlsConnector::from(Arc::new(tls))
        .connect(name, tcp)
        .await
        .map_err(|e| format!("tls: {e}"))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let path_and_query = url
        .strip_prefix("https://")
        .and_then(|rest| rest.find('/').map(|i| &rest[i..]))
        .unwrap_or("/");
    let req = http::Request::post(path_and_query)
        .header(http::header::HOST, &target.url_host)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
    let status = resp.status();
    let body = Limited::new(resp.into_body(), MAX_RESPONSE_BYTES)
        .collect()
        .await
        .map_err(|e| format!("reading the response: {e}"))?
        .to_bytes();
    if !status.is_success() {
        return Err(format!(
            "the server responded with the status code {} ({})",
            status.as_u16(),
            String::from_utf8_lossy(&body)
                .chars()
                .take(200)
                .collect::<String>()
        ));
    }
    Ok(body.to_vec())
}
