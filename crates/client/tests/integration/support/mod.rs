//! What the tests of a component's secure port share: a temporary directory, a free
//! loopback port, client certificates, and an HTTPS GET presenting one.

// Not every helper is used by a test today.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ferrokube_pki::{CertificateAuthority, Issued, Validity};
use http_body_util::BodyExt;
use hyper::body::Bytes;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// A directory of its own under the system temporary directory, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new() -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir = std::env::temp_dir().join(format!(
            "ferrokube-client-test-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn write(&self, name: &str, contents: &str) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, contents).unwrap();
        path.display().to_string()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn free_addr() -> SocketAddr {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    SocketAddr::from(([127, 0, 0, 1], port))
}

pub fn client_cert(ca: &CertificateAuthority, cn: &str, groups: &[&str]) -> Issued {
    let groups: Vec<String> = groups.iter().map(|g| g.to_string()).collect();
    ca.issue_client_cert(cn, &groups, Validity::leaf_default())
        .unwrap()
}

/// GET `path` over HTTPS (any server certificate) presenting `identity`'s client
/// certificate and `headers`. `Err` when the connection or the request fails.
pub async fn get(
    addr: SocketAddr,
    path: &str,
    identity: Option<&Issued>,
    headers: &[(&str, &str)],
) -> Result<(u16, String), String> {
    let builder = ferrokube_pki::insecure::client_config_builder();
    let cfg = match identity {
        Some(issued) => {
            let chain = vec![CertificateDer::from_pem_slice(issued.cert_pem.as_bytes()).unwrap()];
            let key = PrivateKeyDer::from_pem_slice(issued.key_pem.as_bytes()).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
    let mut tcp = None;
    for _ in 0..50 {
        if let Ok(stream) = tokio::net::TcpStream::connect(addr).await {
            tcp = Some(stream);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let tcp = tcp.ok_or("never accepted a connection")?;
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let tls = connector
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let mut req = hyper::Request::get(path).header("host", "localhost");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = send
        .send_request(req.body(http_body_util::Empty::<Bytes>::new()).unwrap())
        .await
        .map_err(|e| e.to_string())?;
    let code = resp.status().as_u16();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((code, String::from_utf8_lossy(&body).into_owned()))
}

pub fn message(body: &str) -> String {
    let status: serde_json::Value = serde_json::from_str(body).unwrap();
    status["message"].as_str().unwrap_or_default().to_string()
}
