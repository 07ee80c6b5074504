//! A lean HTTPS client for the pre-encoded create phases: one TLS connection and one
//! hyper HTTP/1 handshake per writer, owned by that writer's task.
//!
//! `kube::Client` sends each request through a `tower::buffer` worker task and hyper's
//! pooled client, whose connection tasks talk to callers over channels: several task
//! hand-offs per request, each a possible wake-up of a parked tokio worker. On a
//! machine whose two cores the driver shares with the server, that client CPU is taken
//! from the server. This client does the same HTTPS work (TLS 1.3 with the admin
//! client certificate, keep-alive HTTP/1.1, every answer read whole) with one
//! hand-off per request, so the phase it drives measures the server more than the
//! client. The raw baseline has no client at all.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use bytes::Bytes;
use http_body_util::Full;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// How to reach the server as the admin user.
#[derive(Clone)]
pub struct Connector {
    port: u16,
    tls: tokio_rustls::TlsConnector,
}

impl Connector {
    /// The cluster CA to trust and the admin client certificate to present.
    pub fn new(port: u16, pki: &ferrokube_pki::PkiPaths) -> Result<Connector> {
        Self::from_files(port, &pki.ca_cert, &pki.admin_cert, &pki.admin_key)
    }

    fn from_files(port: u16, ca: &Path, cert: &Path, key: &Path) -> Result<Connector> {
        let read = |p: &Path| std::fs::read(p).with_context(|| format!("reading {}", p.display()));
        let mut roots = rustls::RootCertStore::empty();
        for ca in CertificateDer::pem_slice_iter(&read(ca)?) {
            roots.add(ca.context("CA certificate")?)?;
        }
        let chain = CertificateDer::pem_slice_iter(&read(cert)?)
            .collect::<Result<Vec<_>, _>>()
            .context("client certificate")?;
        let key = PrivateKeyDer::from_pem_slice(&read(key)?).context("client key")?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Connector {
            port,
            tls: tokio_rustls::TlsConnector::from(Arc::new(config)),
        })
    }

    /// One keep-alive connection. hyper's connection future runs as its own task; the
    /// caller sends on the returned handle, one request at a time.
    pub async fn connect(&self) -> Result<SendRequest<Full<Bytes>>> {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await?;
        tcp.set_nodelay(true)?;
        let tls = self
            .tls
            .connect(ServerName::try_from("127.0.0.1")?.to_owned(), tcp)
            .await?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
        tokio::spawn(connection);
        Ok(sender)
    }
}

/// POSTs `body` as JSON to `path` and reads the answer whole; anything but 201 is an
/// error carrying the server's answer.
pub async fn post_created(
    sender: &mut SendRequest<Full<Bytes>>,
    path: &str,
    body: Bytes,
) -> Result<()> {
    sender.ready().await?;
    let req = http::Request::post(path)
        .header(http::header::HOST, "127.0.0.1")
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json")
        .body(Full::new(body))?;
    crate::expect_created(sender.send_request(req).await?).await
}
