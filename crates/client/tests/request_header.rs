//! Front-proxy (request-header) authentication on a component's secure port, wired as
//! kube-controller-manager and kube-scheduler wire it from kubeadm's flags: the port
//! accepts client certificates of both CAs; a front-proxy certificate with an allowed
//! CN is the user its X-Remote-* headers name, one with another CN is refused, and an
//! ordinary client certificate is its own CN whatever headers it sends.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use ferrokube_client::delegated::DelegatedAuthOptions;
use ferrokube_client::serving::{Respond, SecureServingOptions, endpoint, serve};
use ferrokube_pki::{CertificateAuthority, Issued, Validity};
use http_body_util::BodyExt;
use hyper::body::Bytes;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
struct Flags {
    #[command(flatten)]
    auth: DelegatedAuthOptions,
}

/// A directory of its own under the system temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir = std::env::temp_dir().join(format!(
            "ferrokube-request-header-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn write(&self, name: &str, contents: &str) -> String {
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

fn free_addr() -> SocketAddr {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn client_cert(ca: &CertificateAuthority, cn: &str, groups: &[&str]) -> Issued {
    let groups: Vec<String> = groups.iter().map(|g| g.to_string()).collect();
    ca.issue_client_cert(cn, &groups, Validity::leaf_default())
        .unwrap()
}

/// GET `path` over HTTPS (any server certificate) presenting `identity`'s client
/// certificate and `headers`. `Err` when the connection or the request fails.
async fn get(
    addr: SocketAddr,
    path: &str,
    identity: Option<&Issued>,
    headers: &[(&str, &str)],
) -> Result<(u16, String), String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(ferrokube_pki::insecure::AcceptAnyServerCert(
            provider,
        )));
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

fn message(body: &str) -> String {
    let status: serde_json::Value = serde_json::from_str(body).unwrap();
    status["message"].as_str().unwrap_or_default().to_string()
}

#[tokio::test]
async fn front_proxy_users_on_the_secure_port() {
    let client_ca = CertificateAuthority::generate("kubernetes").unwrap();
    let proxy_ca = CertificateAuthority::generate("front-proxy-ca").unwrap();
    let dir = TempDir::new();
    let ca_file = dir.write("ca.crt", client_ca.cert_pem());
    let proxy_ca_file = dir.write("front-proxy-ca.crt", proxy_ca.cert_pem());

    // kubeadm's flags (the kubeconfigs left out: no reviews, so only system:masters
    // passes the gate).
    let auth = Flags::try_parse_from([
        "kube-controller-manager".to_string(),
        format!("--client-ca-file={ca_file}"),
        format!("--requestheader-client-ca-file={proxy_ca_file}"),
        "--requestheader-allowed-names=front-proxy-client".to_string(),
    ])
    .unwrap()
    .auth;
    let addr = free_addr();
    let (tls, gate) = endpoint(&SecureServingOptions::default(), &auth, "test", addr.ip())
        .await
        .unwrap();
    let respond: Respond = Arc::new(|path| match path {
        "/healthz" => (200, "ok".into()),
        "/metrics" => (200, "up 1\n".into()),
        _ => (404, "404 page not found".into()),
    });
    let cancel = CancellationToken::new();
    let server = tokio::spawn(serve(addr, tls, respond, Some(gate), cancel.clone()));

    let proxy = client_cert(&proxy_ca, "front-proxy-client", &[]);
    let as_alice_admin = [
        ("X-Remote-User", "alice"),
        ("X-Remote-Group", "system:masters"),
    ];

    // The aggregator's request for alice in system:masters.
    assert_eq!(
        get(addr, "/metrics", Some(&proxy), &as_alice_admin).await,
        Ok((200, "up 1\n".into()))
    );
    // alice without system:masters: her own name, and no review to allow her.
    let (code, body) = get(
        addr,
        "/metrics",
        Some(&proxy),
        &[("X-Remote-User", "alice")],
    )
    .await
    .unwrap();
    assert_eq!(code, 403);
    assert_eq!(
        message(&body),
        r#"forbidden: User "alice" cannot get path "/metrics""#
    );
    // The front proxy's certificate names no user of its own: a 401, as upstream.
    assert_eq!(
        get(addr, "/metrics", Some(&proxy), &[]).await.unwrap().0,
        401
    );

    // A front-proxy certificate whose CN is not in --requestheader-allowed-names.
    let intruder = client_cert(&proxy_ca, "intruder", &[]);
    let (code, body) = get(addr, "/metrics", Some(&intruder), &as_alice_admin)
        .await
        .unwrap();
    assert_eq!(code, 401, "{body}");
    // Health stays open to it, as to everyone.
    assert_eq!(
        get(addr, "/healthz", Some(&intruder), &as_alice_admin).await,
        Ok((200, "ok".into()))
    );

    // An ordinary client certificate: the headers are ignored, the user is its CN.
    let bob = client_cert(&client_ca, "bob", &[]);
    let (code, body) = get(addr, "/metrics", Some(&bob), &as_alice_admin)
        .await
        .unwrap();
    assert_eq!(code, 403);
    assert_eq!(
        message(&body),
        r#"forbidden: User "bob" cannot get path "/metrics""#
    );
    let admin = client_cert(&client_ca, "kubernetes-admin", &["system:masters"]);
    assert_eq!(
        get(addr, "/metrics", Some(&admin), &[]).await,
        Ok((200, "up 1\n".into()))
    );

    // Headers without any certificate: anonymous.
    let (code, body) = get(addr, "/metrics", None, &as_alice_admin).await.unwrap();
    assert_eq!(code, 403);
    assert_eq!(
        message(&body),
        r#"forbidden: User "system:anonymous" cannot get path "/metrics""#
    );

    // A certificate of neither CA does not get through the handshake.
    let stranger_ca = CertificateAuthority::generate("stranger").unwrap();
    let stranger = client_cert(&stranger_ca, "front-proxy-client", &[]);
    assert!(
        get(addr, "/metrics", Some(&stranger), &as_alice_admin)
            .await
            .is_err()
    );

    cancel.cancel();
    server.await.unwrap().unwrap();
}
