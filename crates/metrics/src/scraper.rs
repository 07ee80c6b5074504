//! Scraping kubelets (upstream metrics-server's `pkg/scraper`): every node's
//! `https://<address>:<kubelet port>/metrics/resource`, the address chosen by
//! `--kubelet-preferred-address-types`, with this server's credentials (the pod's
//! ServiceAccount token, re-read for every scrape since it rotates; or the kubeconfig's
//! token or client certificate). The kubelet authorizes `get nodes/metrics` through a
//! SubjectAccessReview. Each scrape is bounded by the request timeout; a node that
//! fails is left out of the batch (and so loses its stored points), as upstream.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use k8s_openapi::api::core::v1::Node;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use crate::decode::{Batch, decode};

/// Upstream's default `--kubelet-preferred-address-types`.
pub const DEFAULT_ADDRESS_TYPES: &str = "Hostname,InternalDNS,InternalIP,ExternalDNS,ExternalIP";

/// The largest `/metrics/resource` page read.
const MAX_PAGE: usize = 64 << 20;

/// How the kubelets are reached.
#[derive(Debug, Clone)]
pub struct KubeletOptions {
    /// `--kubelet-port`.
    pub port: u16,
    /// `--kubelet-use-node-status-port`: the node's `daemonEndpoints` port instead.
    pub use_node_status_port: bool,
    /// `--kubelet-preferred-address-types`, in order.
    pub address_types: Vec<String>,
    /// `--kubelet-insecure-tls`: do not verify the kubelets' serving certificates.
    pub insecure_tls: bool,
    /// `--kubelet-certificate-authority` (PEM); else the API's CA.
    pub ca_pem: Option<String>,
    /// `--kubelet-request-timeout`.
    pub timeout: Duration,
}

impl Default for KubeletOptions {
    fn default() -> Self {
        KubeletOptions {
            port: 10250,
            use_node_status_port: false,
            address_types: DEFAULT_ADDRESS_TYPES
                .split(',')
                .map(str::to_string)
                .collect(),
            insecure_tls: false,
            ca_pem: None,
            timeout: Duration::from_secs(10),
        }
    }
}

/// The bearer token sent to kubelets.
#[derive(Debug, Clone, Default)]
pub enum Token {
    #[default]
    None,
    Static(String),
    /// Re-read for every scrape (projected ServiceAccount tokens rotate).
    File(PathBuf),
}

impl Token {
    fn get(&self) -> Option<String> {
        match self {
            Token::None => None,
            Token::Static(t) => Some(t.clone()),
            Token::File(p) => std::fs::read_to_string(p)
                .map(|t| t.trim().to_string())
                .map_err(|e| tracing::warn!(path = %p.display(), error = %e, "reading the token"))
                .ok(),
        }
    }
}

/// Scrapes kubelets.
#[derive(Clone)]
pub struct KubeletClient {
    opts: KubeletOptions,
    tls: Arc<rustls::ClientConfig>,
    token: Token,
}

impl std::fmt::Debug for KubeletClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeletClient")
            .field("opts", &self.opts)
            .finish_non_exhaustive()
    }
}

fn read_pem(inline_b64: Option<&str>, file: Option<&str>) -> Result<Option<Vec<u8>>, String> {
    use base64::Engine as _;
    if let Some(data) = inline_b64 {
        return base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map(Some)
            .map_err(|e| format!("base64: {e}"));
    }
    file.map(|f| std::fs::read(f).map_err(|e| format!("{f}: {e}")))
        .transpose()
}

impl KubeletClient {
    /// A client with `config`'s credentials (token, token file or client
    /// certificate) and, unless `opts` says otherwise, its CA.
    pub fn new(opts: KubeletOptions, config: &kube::Config) -> Result<KubeletClient, String> {
        use secrecy::ExposeSecret as _;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?;
        let builder = if opts.insecure_tls {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(
                    ferrokube_pki::insecure::AcceptAnyServerCert(provider),
                ))
        } else {
            let mut roots = rustls::RootCertStore::empty();
            match &opts.ca_pem {
                Some(pem) => {
                    for c in CertificateDer::pem_slice_iter(pem.as_bytes()) {
                        roots
                            .add(c.map_err(|e| format!("kubelet CA: {e}"))?)
                            .map_err(|e| format!("kubelet CA: {e}"))?;
                    }
                }
                None => {
                    for der in config.root_cert.iter().flatten() {
                        roots
                            .add(CertificateDer::from(der.clone()))
                            .map_err(|e| format!("API CA: {e}"))?;
                    }
                }
            }
            if roots.is_empty() {
                return Err("no CA to verify kubelets with (--kubelet-certificate-authority or --kubelet-insecure-tls)".into());
            }
            builder.with_root_certificates(roots)
        };
        let auth = &config.auth_info;
        let cert = read_pem(
            auth.client_certificate_data.as_deref(),
            auth.client_certificate.as_deref(),
        )?;
        let key_data = auth
            .client_key_data
            .as_ref()
            .map(|k| k.expose_secret().to_string());
        let key = read_pem(key_data.as_deref(), auth.client_key.as_deref())?;
        let mut tls = match (cert, key) {
            (Some(cert), Some(key)) => {
                let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert)
                    .collect::<Result<_, _>>()
                    .map_err(|e| format!("client certificate: {e}"))?;
                let key =
                    PrivateKeyDer::from_pem_slice(&key).map_err(|e| format!("client key: {e}"))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| format!("client certificate: {e}"))?
            }
            _ => builder.with_no_client_auth(),
        };
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        let token = if let Some(t) = &auth.token {
            Token::Static(t.expose_secret().to_string())
        } else if let Some(f) = &auth.token_file {
            Token::File(f.into())
        } else {
            Token::None
        };
        Ok(KubeletClient {
            opts,
            tls: Arc::new(tls),
            token,
        })
    }

    /// `--kubelet-request-timeout`.
    pub fn timeout(&self) -> Duration {
        self.opts.timeout
    }

    /// `node`'s kubelet address (host, port) per the preferred address types.
    pub fn address(&self, node: &Node) -> Option<(String, u16)> {
        let status = node.status.as_ref()?;
        let addresses = status.addresses.as_deref().unwrap_or_default();
        let host = self.opts.address_types.iter().find_map(|t| {
            addresses
                .iter()
                .find(|a| &a.type_ == t && !a.address.is_empty())
                .map(|a| a.address.clone())
        })?;
        let status_port = status
            .daemon_endpoints
            .as_ref()
            .and_then(|d| d.kubelet_endpoint.as_ref())
            .map(|e| e.port)
            .and_then(|p| u16::try_from(p).ok())
            .filter(|p| *p != 0);
        let port = match (self.opts.use_node_status_port, status_port) {
            (true, Some(p)) => p,
            _ => self.opts.port,
        };
        Some((host, port))
    }

    /// Scrapes `node`: its batch, stamped with the scrape's start where the page has
    /// no timestamps.
    pub async fn scrape(&self, node: &Node) -> Result<Batch, String> {
        let name = node.metadata.name.clone().unwrap_or_default();
        let (host, port) = self
            .address(node)
            .ok_or_else(|| format!("node {name:?} has no address of the preferred types"))?;
        let start = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or_default();
        let page = tokio::time::timeout(self.opts.timeout, self.get(&host, port))
            .await
            .map_err(|_| {
                format!("request to https://{host}:{port}/metrics/resource timed out")
            })??;
        decode(&page, start, &name).map_err(|e| e.to_string())
    }

    async fn get(&self, host: &str, port: u16) -> Result<String, String> {
        let url = format!("https://{}/metrics/resource", join_host_port(host, port));
        let failing = |e: &dyn std::fmt::Display| format!("GET {url}: {e}");
        let tcp = tokio::net::TcpStream::connect((host, port))
            .await
            .map_err(|e| failing(&e))?;
        let server_name = ServerName::try_from(host.to_string()).map_err(|e| failing(&e))?;
        let stream = tokio_rustls::TlsConnector::from(self.tls.clone())
            .connect(server_name, tcp)
            .await
            .map_err(|e| failing(&e))?;
        let (mut send, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|e| failing(&e))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut req = hyper::Request::get("/metrics/resource")
            .header(hyper::header::HOST, join_host_port(host, port))
            .header(hyper::header::ACCEPT, "text/plain");
        if let Some(token) = self.token.get() {
            req = req.header(hyper::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let req = req.body(Empty::<Bytes>::new()).map_err(|e| failing(&e))?;
        let resp = send.send_request(req).await.map_err(|e| failing(&e))?;
        let code = resp.status();
        let body = http_body_util::Limited::new(resp.into_body(), MAX_PAGE)
            .collect()
            .await
            .map_err(|e| failing(&e))?
            .to_bytes();
        if !code.is_success() {
            let text = String::from_utf8_lossy(&body[..body.len().min(256)]).into_owned();
            return Err(failing(&format!(
                "status {}: {}",
                code.as_u16(),
                text.trim()
            )));
        }
        String::from_utf8(body.to_vec()).map_err(|e| failing(&e))
    }
}

fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(addresses: &[(&str, &str)], status_port: i32) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n"},
            "status": {
                "addresses": addresses.iter().map(|(t, a)| serde_json::json!({"type": t, "address": a})).collect::<Vec<_>>(),
                "daemonEndpoints": {"kubeletEndpoint": {"Port": status_port}}
            }
        }))
        .unwrap()
    }

    fn client(types: &str, use_status_port: bool) -> KubeletClient {
        let opts = KubeletOptions {
            address_types: types.split(',').map(str::to_string).collect(),
            use_node_status_port: use_status_port,
            insecure_tls: true,
            ..Default::default()
        };
        let config = kube::Config::new("https://127.0.0.1:6443".parse().unwrap());
        KubeletClient::new(opts, &config).unwrap()
    }

    #[test]
    fn the_preferred_address_type_wins() {
        let n = node(&[("Hostname", "node-a"), ("InternalIP", "10.0.0.5")], 10255);
        assert_eq!(
            client("InternalIP,ExternalIP,Hostname", false).address(&n),
            Some(("10.0.0.5".into(), 10250))
        );
        assert_eq!(
            client(DEFAULT_ADDRESS_TYPES, false).address(&n),
            Some(("node-a".into(), 10250))
        );
        assert_eq!(
            client("InternalIP", true).address(&n),
            Some(("10.0.0.5".into(), 10255))
        );
        assert_eq!(client("ExternalIP", false).address(&n), None);
        assert_eq!(join_host_port("fd00::1", 10250), "[fd00::1]:10250");
    }
}
