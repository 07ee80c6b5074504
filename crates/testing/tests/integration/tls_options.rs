//! `--tls-min-version` and `--tls-cipher-suites` on the apiserver's port: a client is
//! served only with a version and (for TLS 1.2) a suite the flags allow.

use std::sync::Arc;
use std::time::Duration;

use ferrokube_pki::tls_options::TlsOptions;
use ferrokube_testing::TestApiServer;
use rustls::crypto::ring::cipher_suite as suites;
use rustls::version::{TLS12, TLS13};
use rustls::{SupportedCipherSuite, SupportedProtocolVersion};
use rustls_pki_types::ServerName;

/// A handshake with a client limited to `versions` and `suites`; the version agreed.
async fn handshake(
    server: &TestApiServer,
    versions: &[&'static SupportedProtocolVersion],
    suites: &[SupportedCipherSuite],
) -> Result<rustls::ProtocolVersion, String> {
    let mut provider = rustls::crypto::ring::default_provider();
    provider.cipher_suites = suites.to_vec();
    let provider = Arc::new(provider);
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(ferrokube_pki::insecure::AcceptAnyServerCert(
            provider,
        )))
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(server.url.trim_start_matches("https://"))
        .await
        .map_err(|e| e.to_string())?;
    let name = ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into());
    let tls = tokio::time::timeout(
        Duration::from_secs(5),
        tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp),
    )
    .await
    .map_err(|_| "handshake timed out".to_string())?
    .map_err(|e| e.to_string())?;
    Ok(tls.get_ref().1.protocol_version().unwrap())
}

#[tokio::test]
async fn the_minimum_version_refuses_older_clients() {
    let server = TestApiServer::start_with(|o| {
        o.tls = TlsOptions::parse("VersionTLS13", &[]).unwrap().0;
    })
    .await
    .unwrap();
    let all = rustls::crypto::ring::DEFAULT_CIPHER_SUITES;
    let refused = handshake(&server, &[&TLS12], all).await;
    assert!(refused.is_err(), "a TLS 1.2 client was served: {refused:?}");
    assert_eq!(
        handshake(&server, &[&TLS13, &TLS12], all).await.unwrap(),
        rustls::ProtocolVersion::TLSv1_3
    );
    // kube-rs (TLS 1.3) works as before.
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(server.client.clone());
    namespaces.get("default").await.unwrap();
    server.stop().await;
}

#[tokio::test]
async fn the_cipher_suites_limit_tls12() {
    let server = TestApiServer::start_with(|o| {
        let listed = ["TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384".to_string()];
        o.tls = TlsOptions::parse("", &listed).unwrap().0;
    })
    .await
    .unwrap();
    let unlisted = handshake(
        &server,
        &[&TLS12],
        &[suites::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256],
    )
    .await;
    assert!(
        unlisted.is_err(),
        "an unlisted suite was agreed: {unlisted:?}"
    );
    assert_eq!(
        handshake(
            &server,
            &[&TLS12],
            &[
                suites::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
                suites::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
            ],
        )
        .await
        .unwrap(),
        rustls::ProtocolVersion::TLSv1_2
    );
    // TLS 1.3's suites are not configurable (as in Go).
    assert_eq!(
        handshake(
            &server,
            &[&TLS13],
            rustls::crypto::ring::DEFAULT_CIPHER_SUITES
        )
        .await
        .unwrap(),
        rustls::ProtocolVersion::TLSv1_3
    );
    server.stop().await;
}
