//! The `--secure-port` endpoint of kube-scheduler and kube-controller-manager:
//! `/healthz`, `/livez`, `/readyz` and `/metrics` over HTTPS, as upstream serves them.
//! The serving certificate comes from `--tls-cert-file`/`--tls-private-key-file`, or,
//! as upstream does without them, is self-signed at start (kept in memory), so a probe
//! that skips verification (the apiserver's `componentstatuses`, `curl -k`) reaches it.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::Bytes;
use tokio_util::sync::CancellationToken;

use crate::delegated::Gate;
use crate::extension_authentication::{LookupFailure, client_certificates};

/// Upstream's secure serving flags (the certificate and TLS parts).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct SecureServingOptions {
    /// File containing the default x509 certificate for HTTPS (CA cert, if any,
    /// concatenated after server cert). Without it (and --tls-private-key-file), a
    /// self-signed certificate is generated for the public address.
    #[arg(long = "tls-cert-file")]
    pub tls_cert_file: Option<PathBuf>,
    /// File containing the default x509 private key matching --tls-cert-file.
    #[arg(long = "tls-private-key-file")]
    pub tls_private_key_file: Option<PathBuf>,
    #[command(flatten)]
    pub tls: ferrokube_pki::tls_options::TlsFlags,
}

#[derive(Debug, thiserror::Error)]
pub enum ServingError {
    #[error("reading {0}: {1}")]
    Read(PathBuf, std::io::Error),
    #[error("--tls-cert-file and --tls-private-key-file go together")]
    HalfPair,
    #[error("self-signed serving certificate: {0}")]
    SelfSigned(String),
    #[error("serving certificate: {0}")]
    Tls(String),
    #[error("binding {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
    #[error("delegated authentication: {0}")]
    Auth(String),
}

/// What a path answers: status code and plain-text body.
pub type Respond = Arc<dyn Fn(&str) -> (u16, String) + Send + Sync>;

impl SecureServingOptions {
    /// The TLS configuration: the given pair, or a fresh self-signed one for
    /// `localhost`, the bind address and loopback (named `component` in its subject).
    /// `client_verifier`: what client certificates must chain to (clients without one
    /// are still served); which user a certificate names is the gate's decision.
    pub fn tls_config(
        &self,
        component: &str,
        bind: IpAddr,
        verifier: Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>,
    ) -> Result<Arc<rustls::ServerConfig>, ServingError> {
        let (cert_pem, key_pem) = match (&self.tls_cert_file, &self.tls_private_key_file) {
            (Some(c), Some(k)) => (read(c)?, read(k)?),
            (None, None) => self_signed(component, bind)?,
            _ => return Err(ServingError::HalfPair),
        };
        let tls = self
            .tls
            .options_logged()
            .map_err(|e| ServingError::Tls(e.to_string()))?;
        ferrokube_pki::serving::server_config(
            &cert_pem,
            &key_pem,
            verifier,
            ferrokube_pki::serving::ALPN_H2_HTTP1,
            &tls,
        )
        .map_err(|e| ServingError::Tls(e.to_string()))
    }
}

/// The TLS configuration and the gate of a component's endpoint, from its serving and
/// delegated-auth flags; CAs the flags leave out are looked up in the cluster
/// ([`crate::extension_authentication`]), a failed lookup handled as `failure` says
/// unless the flag does.
pub async fn endpoint(
    serving: &SecureServingOptions,
    auth: &crate::delegated::DelegatedAuthOptions,
    component: &str,
    bind: IpAddr,
    failure: LookupFailure,
) -> Result<(Arc<rustls::ServerConfig>, Arc<Gate>), ServingError> {
    let auth_error = |e: crate::Error| ServingError::Auth(e.to_string());
    let gate = Gate::reviewing(auth).await.map_err(auth_error)?;
    let certificates = client_certificates(auth, gate.authentication_client(), failure)
        .await
        .map_err(auth_error)?;
    let tls = serving.tls_config(component, bind, Some(certificates.tls_verifier()))?;
    Ok((
        tls,
        Arc::new(gate.with_live_client_certificates(certificates)),
    ))
}

fn read(path: &PathBuf) -> Result<String, ServingError> {
    std::fs::read_to_string(path).map_err(|e| ServingError::Read(path.clone(), e))
}

/// A fresh self-signed pair for `localhost`, loopback and the bind address, as upstream
/// makes one for a component started without `--tls-cert-file`.
fn self_signed(component: &str, bind: IpAddr) -> Result<(String, String), ServingError> {
    let mut ips = vec![IpAddr::from([127, 0, 0, 1])];
    if !bind.is_unspecified() && !ips.contains(&bind) {
        ips.push(bind);
    }
    let issued = ferrokube_pki::serving::self_signed_serving(
        "localhost",
        component,
        &["localhost".to_string()],
        &ips,
    )
    .map_err(|e| ServingError::SelfSigned(e.to_string()))?;
    Ok((issued.cert_pem, issued.key_pem))
}

/// Binds `addr` (so a taken port fails the caller at once), then serves each HTTPS
/// request with `respond` until `cancel`, once `gate` lets it through (`None`: every
/// request is served).
pub async fn serve(
    addr: SocketAddr,
    tls: Arc<rustls::ServerConfig>,
    respond: Respond,
    gate: Option<Arc<Gate>>,
    cancel: CancellationToken,
) -> Result<(), ServingError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| ServingError::Bind(addr, e))?;
    tracing::info!(%addr, "serving /healthz, /livez, /readyz and /metrics over HTTPS");
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    accept_until(listener, cancel, move |stream| {
        let (acceptor, respond, gate) = (acceptor.clone(), respond.clone(), gate.clone());
        async move {
            let Ok(Ok(stream)) =
                tokio::time::timeout(std::time::Duration::from_secs(10), acceptor.accept(stream))
                    .await
            else {
                return;
            };
            // The gate verifies the chain against each CA; the handshake only checked
            // it chains to one of them.
            let peer: Arc<[rustls::pki_types::CertificateDer<'static>]> = stream
                .get_ref()
                .1
                .peer_certificates()
                .map(Arc::from)
                .unwrap_or_else(|| Arc::from(Vec::new()));
            let svc =
                hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let (respond, gate, peer) = (respond.clone(), gate.clone(), peer.clone());
                    async move {
                        let path = req.uri().path().to_string();
                        let allowed = match &gate {
                            None => Ok(()),
                            Some(gate) => {
                                let bearer = crate::delegated::bearer_token(req.headers());
                                let verb = req.method().as_str().to_ascii_lowercase();
                                gate.check_request(&verb, &path, bearer, &peer, req.headers())
                                    .await
                            }
                        };
                        let (code, body, content_type) = match allowed {
                            Ok(()) => {
                                let (code, body) = respond(&path);
                                (code, body, "text/plain; charset=utf-8")
                            }
                            Err(refusal) => (
                                refusal.code,
                                serde_json::to_string(&refusal.to_status()).unwrap_or_default(),
                                "application/json",
                            ),
                        };
                        hyper::Response::builder()
                            .status(code)
                            .header("content-type", content_type)
                            .header("x-content-type-options", "nosniff")
                            .body(Full::new(Bytes::from(body)))
                    }
                });
            let _ =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new())
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
        }
    })
    .await;
    Ok(())
}

/// Accepts connections on `listener` until `cancel`, each served by `handle` on a task
/// of its own. A failed accept (out of file descriptors, most often) is retried after
/// a short pause instead of at once, which would spin a core until descriptors free up.
pub async fn accept_until<H, F>(
    listener: tokio::net::TcpListener,
    cancel: CancellationToken,
    handle: H,
) where
    H: Fn(tokio::net::TcpStream) -> F,
    F: std::future::Future<Output = ()> + Send + 'static,
{
    loop {
        let stream = tokio::select! {
            _ = cancel.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::debug!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        tokio::spawn(handle(stream));
    }
}

/// What a plain-HTTP path answers: status code, content type and body.
pub type PlainRespond = Arc<dyn Fn(&str) -> (u16, &'static str, String) + Send + Sync>;

/// A plain answer with headers of its own besides `content-type` and `nosniff`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlainReply {
    pub code: u16,
    pub content_type: &'static str,
    pub headers: Vec<(&'static str, String)>,
    pub body: String,
}

/// [`PlainRespond`] for answers that carry headers (kube-proxy's service health
/// checks).
pub type PlainRespondWithHeaders = Arc<dyn Fn(&str) -> PlainReply + Send + Sync>;

/// Binds `addr` (so a taken port fails the caller at once) and serves plain HTTP/1.1
/// with `respond` by path until `cancel`: the unauthenticated `--healthz-bind-address`
/// and `--metrics-bind-address` endpoints of kube-proxy and cluster DNS. Returns the
/// bound address (a port 0 is chosen by the kernel) and the serving task.
pub async fn serve_plain(
    addr: SocketAddr,
    respond: PlainRespond,
    cancel: CancellationToken,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let with_headers: PlainRespondWithHeaders = Arc::new(move |path: &str| {
        let (code, content_type, body) = respond(path);
        PlainReply {
            code,
            content_type,
            headers: Vec::new(),
            body,
        }
    });
    serve_plain_with_headers(addr, with_headers, cancel).await
}

/// [`serve_plain`] with the answer's own headers.
pub async fn serve_plain_with_headers(
    addr: SocketAddr,
    respond: PlainRespondWithHeaders,
    cancel: CancellationToken,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let task = tokio::spawn(accept_until(listener, cancel, move |stream| {
        let respond = respond.clone();
        async move {
            let svc =
                hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let reply = respond(req.uri().path());
                    async move {
                        let mut answer = hyper::Response::builder()
                            .status(reply.code)
                            .header("content-type", reply.content_type)
                            .header("x-content-type-options", "nosniff");
                        for (name, value) in reply.headers {
                            answer = answer.header(name, value);
                        }
                        answer.body(Full::new(Bytes::from(reply.body)))
                    }
                });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                .await;
        }
    }));
    Ok((bound, task))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_half_pair_is_refused_and_none_is_self_signed() {
        let half = SecureServingOptions {
            tls_cert_file: Some("/nonexistent.crt".into()),
            ..Default::default()
        };
        assert!(matches!(
            half.tls_config("kube-scheduler", IpAddr::from([0, 0, 0, 0]), None),
            Err(ServingError::HalfPair)
        ));
        let cfg = SecureServingOptions::default()
            .tls_config("kube-scheduler", IpAddr::from([127, 0, 0, 1]), None)
            .unwrap();
        assert_eq!(cfg.alpn_protocols[1], b"http/1.1");
    }

    #[test]
    fn the_tls_flags_are_checked() {
        let mut opts = SecureServingOptions::default();
        opts.tls.tls_min_version = "VersionTLS14".into();
        let err = opts
            .tls_config("kube-scheduler", IpAddr::from([127, 0, 0, 1]), None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("unknown tls version \"VersionTLS14\""),
            "{err}"
        );
        opts.tls.tls_min_version = "VersionTLS13".into();
        opts.tls.tls_cipher_suites = vec!["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256".into()];
        assert!(
            opts.tls_config("kube-scheduler", IpAddr::from([127, 0, 0, 1]), None)
                .is_ok()
        );
    }

    #[tokio::test]
    async fn serves_https_with_the_answers_given() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let tls = SecureServingOptions::default()
            .tls_config("test", addr.ip(), None)
            .unwrap();
        let cancel = CancellationToken::new();
        let respond: Respond = Arc::new(|path| match path {
            "/healthz" => (200, "ok".into()),
            _ => (404, "404 page not found".into()),
        });
        let server = tokio::spawn(serve(addr, tls, respond, None, cancel.clone()));
        let client = {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let cfg = rustls::ClientConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .unwrap()
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(
                    ferrokube_pki::insecure::AcceptAnyServerCert(provider),
                ))
                .with_no_client_auth();
            tokio_rustls::TlsConnector::from(Arc::new(cfg))
        };
        let mut answer = None;
        for _ in 0..50 {
            if let Ok(tcp) = tokio::net::TcpStream::connect(addr).await {
                let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
                let tls = client.connect(name, tcp).await.unwrap();
                let (mut send, conn) =
                    hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
                        .await
                        .unwrap();
                tokio::spawn(conn);
                let req = hyper::Request::get("/healthz")
                    .header("host", "localhost")
                    .body(http_body_util::Empty::<Bytes>::new())
                    .unwrap();
                let resp = send.send_request(req).await.unwrap();
                let code = resp.status().as_u16();
                let body = http_body_util::BodyExt::collect(resp.into_body())
                    .await
                    .unwrap()
                    .to_bytes();
                answer = Some((code, body));
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert_eq!(answer, Some((200, Bytes::from("ok"))));
        cancel.cancel();
        server.await.unwrap().unwrap();
    }
}
