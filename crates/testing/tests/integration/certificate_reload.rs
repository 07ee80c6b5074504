//! The apiserver follows `--tls-cert-file`/`--tls-private-key-file`,
//! `--client-ca-file` and `--requestheader-client-ca-file` while it runs (checked
//! every 5 s): a replaced serving pair is served to new connections, a replaced client
//! or front-proxy CA decides who is authenticated (and is published in
//! `kube-system/extension-apiserver-authentication`), and files that do not load
//! leave what is installed in use.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrokube_pki::{CertificateAuthority, Issued, Validity};
use ferrokube_testing::TestApiServer;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, ServerName};
use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// Three checks of the files, and then some.
const DEADLINE: Duration = Duration::from_secs(15);
/// Longer than one check interval: a change written before it has been looked at.
const ONE_CHECK: Duration = Duration::from_secs(7);

use crate::support::front_proxy;
use front_proxy::{front_proxy, published_data};

const WHOAMI: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";

fn pki_file(server: &TestApiServer, file: &str) -> PathBuf {
    server.dir().join("pki").join(file)
}

fn read(server: &TestApiServer, file: &str) -> String {
    std::fs::read_to_string(pki_file(server, file)).unwrap()
}

/// Replaces the file at once, as a rotation tool does (write aside, then rename).
fn replace(server: &TestApiServer, file: &str, content: &str) {
    let path = pki_file(server, file);
    let aside = path.with_extension("new");
    std::fs::write(&aside, content).unwrap();
    std::fs::rename(&aside, &path).unwrap();
}

fn cluster_ca(server: &TestApiServer) -> CertificateAuthority {
    CertificateAuthority::load(&read(server, "ca.crt"), &read(server, "ca.key")).unwrap()
}

fn serving_pair(ca: &CertificateAuthority) -> Issued {
    ca.issue_serving_cert(
        "kube-apiserver",
        &["localhost".into()],
        &[[127, 0, 0, 1].into()],
        Validity::leaf_default(),
    )
    .unwrap()
}

type Tls = tokio_rustls::client::TlsStream<tokio::net::TcpStream>;

/// A TLS connection to the server trusting only `ca_pem` (no client certificate).
async fn handshake(server: &TestApiServer, ca_pem: &str) -> Result<Tls, String> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap())
        .unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(server.url.trim_start_matches("https://"))
        .await
        .map_err(|e| e.to_string())?;
    let name = ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into());
    tokio::time::timeout(
        Duration::from_secs(5),
        tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp),
    )
    .await
    .map_err(|_| "handshake timed out".to_string())?
    .map_err(|e| e.to_string())
}

/// Whether `check` comes true before [`DEADLINE`], asked every 250 ms.
async fn within_deadline<F, Fut>(mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + DEADLINE;
    while Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    false
}

/// A new client (its own connections) trusting `server_ca` and presenting `cert`.
async fn client(server: &TestApiServer, server_ca: &str, cert: &Issued) -> kube::Client {
    let yaml = ferrokube_pki::kubeconfig_yaml(
        "test",
        &server.url,
        server_ca,
        "user",
        &cert.cert_pem,
        &cert.key_pem,
    );
    let kc = kube::config::Kubeconfig::from_yaml(&yaml).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(cfg).unwrap()
}

/// The user name a SelfSubjectReview reports, or why there is none (a refused
/// connection or a status code other than 201).
async fn whoami(client: &kube::Client) -> Result<String, String> {
    let (code, _, body) = TestApiServer::raw(
        client,
        "POST",
        WHOAMI,
        &[("content-type", "application/json")],
        b"{}".to_vec(),
    )
    .await
    .map_err(|e| e.to_string())?;
    if code != 201 {
        return Err(format!("status {code}"));
    }
    let v: Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
    v["status"]["userInfo"]["username"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| format!("no user name in {v}"))
}

/// The user a SelfSubjectReview reports when `proxy` names `user` in its headers.
async fn proxied_whoami(proxy: &kube::Client, user: &str) -> Result<String, String> {
    let (code, _, body) = TestApiServer::raw(
        proxy,
        "POST",
        WHOAMI,
        &[
            ("content-type", "application/json"),
            ("X-Remote-User", user),
        ],
        b"{}".to_vec(),
    )
    .await
    .map_err(|e| e.to_string())?;
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    match v["status"]["userInfo"]["username"].as_str() {
        Some(name) if code == 201 => Ok(name.to_string()),
        _ => Err(format!("status {code}: {v}")),
    }
}

async fn published(client: &kube::Client, key: &str) -> String {
    published_data(client).await[key]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

async fn published_client_ca(client: &kube::Client) -> String {
    published(client, "client-ca-file").await
}

#[tokio::test]
async fn a_replaced_serving_certificate_is_served_to_new_connections() {
    let server = TestApiServer::start().await.unwrap();
    let old_ca = read(&server, "ca.crt");
    let mut existing = handshake(&server, &old_ca).await.unwrap();

    let new_ca = CertificateAuthority::generate("rotated-serving-ca").unwrap();
    let pair = serving_pair(&new_ca);
    assert!(handshake(&server, new_ca.cert_pem()).await.is_err());
    replace(&server, "apiserver.key", &pair.key_pem);
    replace(&server, "apiserver.crt", &pair.cert_pem);

    assert!(
        within_deadline(|| async { handshake(&server, new_ca.cert_pem()).await.is_ok() }).await,
        "the new serving certificate is not served"
    );
    let refused = handshake(&server, &old_ca).await;
    assert!(refused.is_err(), "the old certificate is still served");

    // A connection made before keeps working.
    existing
        .write_all(b"GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut response = Vec::new();
    // The end may come without a TLS close_notify; what was read is what counts.
    let _ = tokio::time::timeout(Duration::from_secs(5), existing.read_to_end(&mut response)).await;
    assert!(
        response.starts_with(b"HTTP/1.1 "),
        "{}",
        String::from_utf8_lossy(&response)
    );

    // Requests over the new certificate, with the unchanged client CA.
    let admin = cluster_ca(&server)
        .issue_client_cert(
            "rotation-admin",
            &["system:masters".into()],
            Validity::leaf_default(),
        )
        .unwrap();
    let admin = client(&server, new_ca.cert_pem(), &admin).await;
    assert_eq!(whoami(&admin).await.as_deref(), Ok("rotation-admin"));
    server.stop().await;
}

#[tokio::test]
async fn a_replaced_client_ca_decides_who_is_authenticated() {
    let server = TestApiServer::start().await.unwrap();
    let serving_ca = read(&server, "ca.crt");
    let old_client_ca = cluster_ca(&server);
    let new_client_ca = CertificateAuthority::generate("rotated-client-ca").unwrap();
    let carol = new_client_ca
        .issue_client_cert("carol", &[], Validity::leaf_default())
        .unwrap();
    let dave = old_client_ca
        .issue_client_cert("dave", &[], Validity::leaf_default())
        .unwrap();
    let erin = old_client_ca
        .issue_client_cert("erin", &[], Validity::leaf_default())
        .unwrap();
    // erin's connection and chain are known to the server before the change.
    let erin = client(&server, &serving_ca, &erin).await;
    assert_eq!(whoami(&erin).await.as_deref(), Ok("erin"));
    assert!(
        whoami(&client(&server, &serving_ca, &carol).await)
            .await
            .is_err()
    );

    replace(&server, "ca.crt", new_client_ca.cert_pem());

    let authenticated = within_deadline(|| async {
        whoami(&client(&server, &serving_ca, &carol).await)
            .await
            .as_deref()
            == Ok("carol")
    })
    .await;
    assert!(
        authenticated,
        "a certificate of the new client CA is refused"
    );
    let dave = whoami(&client(&server, &serving_ca, &dave).await).await;
    assert!(
        dave.is_err(),
        "a certificate of the old client CA: {dave:?}"
    );
    let erin = whoami(&erin).await;
    assert!(
        erin.is_err(),
        "a remembered chain of the old client CA: {erin:?}"
    );

    // Extension apiservers are told of the new CA (read by an admin of the new CA:
    // the test's admin certificate is of the old one).
    let admin = new_client_ca
        .issue_client_cert(
            "rotation-admin",
            &["system:masters".into()],
            Validity::leaf_default(),
        )
        .unwrap();
    let admin = client(&server, &serving_ca, &admin).await;
    assert!(
        within_deadline(|| async {
            published_client_ca(&admin)
                .await
                .contains(new_client_ca.cert_pem())
        })
        .await,
        "the new client CA is not published"
    );
    server.stop().await;
}

#[tokio::test]
async fn files_that_do_not_load_leave_the_installed_ones_in_use() {
    let server = TestApiServer::start().await.unwrap();
    let serving_ca = read(&server, "ca.crt");
    let admin = cluster_ca(&server)
        .issue_client_cert("admin-before", &[], Validity::leaf_default())
        .unwrap();
    let new_ca = CertificateAuthority::generate("rotated-serving-ca").unwrap();
    let pair = serving_pair(&new_ca);

    // Half a pair (the new certificate, the old key) and a garbage client CA.
    replace(&server, "apiserver.crt", &pair.cert_pem);
    replace(&server, "ca.crt", "not a certificate\n");
    tokio::time::sleep(ONE_CHECK).await;
    assert!(handshake(&server, &serving_ca).await.is_ok());
    assert!(handshake(&server, new_ca.cert_pem()).await.is_err());
    assert_eq!(
        whoami(&client(&server, &serving_ca, &admin).await)
            .await
            .as_deref(),
        Ok("admin-before")
    );
    replace(&server, "apiserver.crt", "garbage");
    tokio::time::sleep(ONE_CHECK).await;
    assert!(handshake(&server, &serving_ca).await.is_ok());

    // The pair completed later is taken: the files are still followed.
    replace(&server, "apiserver.key", &pair.key_pem);
    replace(&server, "apiserver.crt", &pair.cert_pem);
    assert!(
        within_deadline(|| async { handshake(&server, new_ca.cert_pem()).await.is_ok() }).await,
        "the completed pair is not served"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_replaced_front_proxy_ca_decides_which_proxies_are_trusted() {
    let server = TestApiServer::start_with(front_proxy).await.unwrap();
    let serving_ca = read(&server, "ca.crt");
    let old_proxy = Issued {
        cert_pem: read(&server, "front-proxy-client.crt"),
        key_pem: read(&server, "front-proxy-client.key"),
    };
    let old_proxy = client(&server, &serving_ca, &old_proxy).await;
    assert_eq!(
        proxied_whoami(&old_proxy, "alice").await.as_deref(),
        Ok("alice")
    );
    let new_proxy_ca = CertificateAuthority::generate("rotated-front-proxy-ca").unwrap();
    let new_proxy = new_proxy_ca
        .issue_client_cert("front-proxy-client", &[], Validity::leaf_default())
        .unwrap();

    replace(&server, "front-proxy-ca.crt", new_proxy_ca.cert_pem());

    let trusted = within_deadline(|| async {
        let proxy = client(&server, &serving_ca, &new_proxy).await;
        proxied_whoami(&proxy, "bob").await.as_deref() == Ok("bob")
    })
    .await;
    assert!(trusted, "a proxy of the new front-proxy CA is refused");
    // The old proxy's remembered chain is not trusted any more.
    let refused = proxied_whoami(&old_proxy, "alice").await;
    assert!(refused.is_err(), "the old front proxy: {refused:?}");
    assert!(
        within_deadline(|| async {
            published(&server.client, "requestheader-client-ca-file")
                .await
                .contains(new_proxy_ca.cert_pem())
        })
        .await,
        "the new front-proxy CA is not published"
    );
    server.stop().await;
}
