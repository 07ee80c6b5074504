//! The kubelet's API client over a client certificate that changes while it runs
//! (upstream `pkg/kubelet/certificate/transport.go` `UpdateTransport` and client-go's
//! `util/connrotation` dialer), for [`crate::cert_rotation`].
//!
//! - The certificate is read from a [`ClientCertSlot`] at every TLS handshake (a rustls
//!   `ResolvesClientCert`, upstream's `GetClientCertificate`); an expired one is not
//!   presented (upstream's manager `Current()` returns nil and the handshake sends an
//!   empty certificate).
//! - Every connection is dialed through [`ClientCertSlot`]'s current close token. When
//!   a new certificate is installed, the token is cancelled (connrotation's `CloseAll`):
//!   idle pooled connections and the ones carrying watches fail their next read and
//!   are dropped, so requests and re-established watches handshake again with the new
//!   certificate. Upstream notices the change by polling the manager every 10 s; here
//!   the install itself closes them.
//! - The client is anonymous apart from the certificate, as upstream's
//!   `AnonymousClientConfig`: the kubeconfig's server, CA (or insecure-skip-tls-verify)
//!   and TLS server name are kept; tokens, impersonation and extra headers are not.
//! - TLS sessions are not resumed: a resumed session would carry the identity of the
//!   handshake that made it (Go's client, without a session cache, resumes none).
//! - Dialing as upstream's kubelet dialer: TCP keep-alive 30 s, a 10 s TLS handshake
//!   timeout, the kubeconfig's connect timeout.
//!
//! Left out: proxies (an `https`/`socks5` proxy URL is refused rather than bypassed),
//! kube-rs's read/write timeouts and gzip decompression of responses; `http://`
//! servers (nothing to rotate there).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use ferrokube_client::config::ClientLimits;
use ferrokube_pki::CertInfo;
use hyper::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::{TokioExecutor, TokioIo};
use kube::client::ConfigExt as _;
use parking_lot::{Mutex, RwLock};
use rustls::client::ResolvesClientCert;
use rustls::sign::CertifiedKey;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tower::{BoxError, Service, ServiceBuilder};

/// Upstream's `TLSHandshakeTimeout` of the rotating transport.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Upstream's dialer `KeepAlive`.
pub const TCP_KEEPALIVE: Duration = Duration::from_secs(30);

/// Errors building the client.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("client certificate rotation needs an https server, not {0:?}")]
    NotHttps(String),
    #[error("client certificate rotation does not support a proxy ({0})")]
    Proxy(String),
    #[error("unable to configure TLS for the rest client: {0}")]
    Tls(String),
    #[error("invalid client certificate: {0}")]
    Certificate(String),
    #[error("invalid request headers (impersonation, user agent): {0}")]
    Headers(String),
}

/// A certificate (with its chain) and key ready for handshakes (the client's or the
/// serving one), and the leaf's fields the rotation reads.
#[derive(Clone)]
pub struct CertifiedPair {
    pub certified: Arc<CertifiedKey>,
    pub info: Arc<CertInfo>,
}

impl std::fmt::Debug for CertifiedPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertifiedPair")
            .field("common_name", &self.info.common_name)
            .field("organizations", &self.info.organizations)
            .field("not_before", &self.info.not_before)
            .field("not_after", &self.info.not_after)
            .finish_non_exhaustive()
    }
}

impl CertifiedPair {
    /// The pair from PEM: the certificates of `cert_pem`, the first key of `key_pem`
    /// (the two may be one combined file), which must be the first certificate's.
    pub fn from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<Self, TransportError> {
        let certified = crate::bootstrap::certified_key(cert_pem, key_pem)
            .map_err(TransportError::Certificate)?;
        let info = certified
            .cert
            .first()
            .ok_or_else(|| TransportError::Certificate("no certificate found".into()))
            .and_then(|c| {
                CertInfo::from_der(c).map_err(|e| TransportError::Certificate(e.to_string()))
            })?;
        Ok(CertifiedPair {
            certified: Arc::new(certified),
            info: Arc::new(info),
        })
    }

    /// Whether the leaf has expired at `now` (after notAfter, as Go's `After`).
    pub fn expired(&self, now: SystemTime) -> bool {
        now > self.info.not_after
    }
}

/// The certificate the client presents, shared by its handshakes and whoever rotates
/// it, and the close token of the connections dialed since it was last changed.
pub struct ClientCertSlot {
    current: RwLock<Option<CertifiedPair>>,
    connections: Mutex<CancellationToken>,
}

impl std::fmt::Debug for ClientCertSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCertSlot")
            .field("current", &*self.current.read())
            .finish_non_exhaustive()
    }
}

impl ClientCertSlot {
    pub fn new(pair: Option<CertifiedPair>) -> Arc<Self> {
        Arc::new(ClientCertSlot {
            current: RwLock::new(pair),
            connections: Mutex::new(CancellationToken::new()),
        })
    }

    /// The pair as installed, expired or not.
    pub fn get(&self) -> Option<CertifiedPair> {
        self.current.read().clone()
    }

    /// Upstream's manager `Current()`: the pair unless it has expired at `now`.
    pub fn current(&self, now: SystemTime) -> Option<CertifiedPair> {
        self.get().filter(|p| !p.expired(now))
    }

    /// Installs `pair`, then closes every connection dialed before, so none keeps
    /// the identity of the old certificate.
    pub fn set(&self, pair: CertifiedPair) {
        *self.current.write() = Some(pair);
        tracing::info!(
            "certificate rotation detected, shutting down client connections to start using new credentials"
        );
        self.close_all();
    }

    /// connrotation's `CloseAll`: every connection dialed so far fails its next read or
    /// write and is dropped; later dials get a new token.
    pub fn close_all(&self) {
        let old = std::mem::take(&mut *self.connections.lock());
        old.cancel();
    }

    /// The token a new connection is closed with. Taken before the handshake reads
    /// the certificate: a dial racing an install either gets the old token (and is
    /// closed) or handshakes with the new certificate.
    fn connection_token(&self) -> CancellationToken {
        self.connections.lock().clone()
    }
}

/// The handshake's client certificate: the slot's current one.
#[derive(Debug)]
struct SlotResolver(Arc<ClientCertSlot>);

impl ResolvesClientCert for SlotResolver {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        self.0
            .current(SystemTime::now())
            .map(|p| p.certified.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// A kube client whose TLS client certificate is `slot`'s, on `config`'s server, CA and
/// TLS settings (its credentials are ignored), with a bucket of `limits` of its own if
/// given.
pub fn rotating_client(
    config: &kube::Config,
    slot: Arc<ClientCertSlot>,
    limits: Option<ClientLimits>,
) -> Result<kube::Client, TransportError> {
    if config.cluster_url.scheme() != Some(&hyper::http::uri::Scheme::HTTPS) {
        return Err(TransportError::NotHttps(config.cluster_url.to_string()));
    }
    if let Some(proxy) = &config.proxy_url {
        return Err(TransportError::Proxy(proxy.to_string()));
    }
    let mut anonymous = config.clone();
    anonymous.auth_info = Default::default();
    let mut tls = anonymous
        .rustls_client_config()
        .map_err(|e| TransportError::Tls(e.to_string()))?;
    tls.client_auth_cert_resolver = Arc::new(SlotResolver(slot.clone()));
    tls.resumption = rustls::client::Resumption::disabled();
    let server_name = match &config.tls_server_name {
        Some(n) => Some(
            ServerName::try_from(n.clone())
                .map_err(|e| TransportError::Tls(format!("invalid TLS server name: {e}")))?,
        ),
        None => None,
    };
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(config.connect_timeout);
    http.set_keepalive(Some(TCP_KEEPALIVE));
    http.set_nodelay(true);
    let connector = RotatingConnector {
        http,
        tls: tokio_rustls::TlsConnector::from(Arc::new(tls)),
        server_name,
        slot,
    };
    let hyper_client = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .build::<_, kube::client::Body>(connector);
    let mut with_agent = config.clone();
    ferrokube_client::config::add_default_user_agent(&mut with_agent);
    let headers = with_agent
        .extra_headers_layer()
        .map_err(|e| TransportError::Headers(e.to_string()))?;
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .layer(headers)
        .option_layer(config.default_retry.then(|| {
            tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry())
        }))
        .map_err(BoxError::from)
        .service(hyper_client);
    Ok(
        kube::client::ClientBuilder::new(service, config.default_namespace.clone())
            .with_layer(&ferrokube_client::metrics::RequestMetricsLayer::for_config(
                config,
            ))
            .with_layer(&tower::util::option_layer(limits.map(|l| l.layer(config))))
            .build(),
    )
}

/// Dials TCP, then TLS with the slot's certificate, under the slot's close token.
#[derive(Clone)]
struct RotatingConnector {
    http: HttpConnector,
    tls: tokio_rustls::TlsConnector,
    /// The kubeconfig's `tls-server-name`, else the URL's host.
    server_name: Option<ServerName<'static>>,
    slot: Arc<ClientCertSlot>,
}

impl Service<Uri> for RotatingConnector {
    type Response = TokioIo<ClosableStream>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.http.poll_ready(cx).map_err(std::io::Error::other)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let token = self.slot.connection_token();
        let tls = self.tls.clone();
        let name = self.server_name.clone();
        let dial = self.http.call(uri.clone());
        Box::pin(async move {
            let name = match name {
                Some(n) => n,
                None => host_server_name(&uri)?,
            };
            let tcp = dial.await.map_err(std::io::Error::other)?.into_inner();
            let stream = tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, tls.connect(name, tcp))
                .await
                .map_err(|_| {
                    std::io::Error::new(std::io::ErrorKind::TimedOut, "TLS handshake timeout")
                })??;
            Ok(TokioIo::new(ClosableStream::new(stream, token)))
        })
    }
}

/// The URL's host as the name the server's certificate is checked against (an IP
/// address too, without its brackets).
fn host_server_name(uri: &Uri) -> std::io::Result<ServerName<'static>> {
    let host = uri.host().unwrap_or_default();
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_string()).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("invalid server name {host:?}: {e}"),
        )
    })
}

/// A TLS connection that fails every read and write once its close token is cancelled.
/// The pending read of an idle or streaming connection is woken by the cancellation,
/// so hyper drops the connection at once rather than on its next use.
pub struct ClosableStream {
    inner: TlsStream<TcpStream>,
    token: CancellationToken,
    closed: Pin<Box<WaitForCancellationFutureOwned>>,
}

impl ClosableStream {
    fn new(inner: TlsStream<TcpStream>, token: CancellationToken) -> Self {
        let closed = Box::pin(token.clone().cancelled_owned());
        ClosableStream {
            inner,
            token,
            closed,
        }
    }
}

fn closed_error() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::ConnectionAborted,
        "connection closed: the client certificate was rotated",
    )
}

impl AsyncRead for ClosableStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.closed.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(closed_error()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for ClosableStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if self.token.is_cancelled() {
            return Poll::Ready(Err(closed_error()));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if self.token.is_cancelled() {
            return Poll::Ready(Err(closed_error()));
        }
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl Connection for ClosableStream {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrokube_pki::{CertificateAuthority, Validity};

    fn pair(cn: &str, validity: Validity) -> CertifiedPair {
        let ca = CertificateAuthority::generate("test-ca").unwrap();
        let issued = ca
            .issue_client_cert(cn, &["system:nodes".into()], validity)
            .unwrap();
        CertifiedPair::from_pem(issued.cert_pem.as_bytes(), issued.key_pem.as_bytes()).unwrap()
    }

    #[test]
    fn an_expired_pair_is_not_presented() {
        let now = SystemTime::now();
        let hour = Duration::from_secs(3600);
        let slot = ClientCertSlot::new(Some(pair(
            "system:node:a",
            Validity {
                not_before: now - 2 * hour,
                not_after: now + hour,
            },
        )));
        let resolver = SlotResolver(slot.clone());
        assert!(resolver.resolve(&[], &[]).is_some());
        assert!(slot.current(now + 2 * hour).is_none());
        assert!(slot.get().is_some(), "still installed");
        slot.set(pair(
            "system:node:b",
            Validity {
                not_before: now - 2 * hour,
                not_after: now - hour,
            },
        ));
        assert!(resolver.resolve(&[], &[]).is_none());
        assert_eq!(
            slot.get().unwrap().info.common_name.as_deref(),
            Some("system:node:b")
        );
    }

    #[test]
    fn installing_closes_the_connections_dialed_before() {
        let slot = ClientCertSlot::new(None);
        let before = slot.connection_token();
        slot.set(pair("system:node:a", Validity::leaf_default()));
        assert!(before.is_cancelled());
        let after = slot.connection_token();
        assert!(!after.is_cancelled());
        slot.close_all();
        assert!(after.is_cancelled());
        assert!(!slot.connection_token().is_cancelled());
    }

    #[test]
    fn a_pair_must_match() {
        let ca = CertificateAuthority::generate("test-ca").unwrap();
        let a = ca
            .issue_client_cert("a", &[], Validity::leaf_default())
            .unwrap();
        let b = ca
            .issue_client_cert("b", &[], Validity::leaf_default())
            .unwrap();
        assert!(CertifiedPair::from_pem(a.cert_pem.as_bytes(), b.key_pem.as_bytes()).is_err());
        let combined = format!("{}{}", a.cert_pem, a.key_pem);
        let p = CertifiedPair::from_pem(combined.as_bytes(), combined.as_bytes()).unwrap();
        assert_eq!(p.info.common_name.as_deref(), Some("a"));
    }

    #[test]
    fn server_names_from_urls() {
        let n = host_server_name(&"https://[::1]:6443".parse().unwrap()).unwrap();
        assert!(matches!(n, ServerName::IpAddress(_)));
        let n = host_server_name(&"https://127.0.0.1:6443".parse().unwrap()).unwrap();
        assert!(matches!(n, ServerName::IpAddress(_)));
        let n = host_server_name(&"https://api.example:6443".parse().unwrap()).unwrap();
        assert!(matches!(n, ServerName::DnsName(_)));
    }
}
