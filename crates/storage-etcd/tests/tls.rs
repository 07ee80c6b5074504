//! etcd over TLS with client certificates (upstream's `--etcd-cafile`,
//! `--etcd-certfile`, `--etcd-keyfile`): the store works with the right client
//! certificate, and does not connect without one or when etcd's certificate does not
//! chain to the CA it trusts.

use std::net::IpAddr;
use std::time::Duration;

use bytes::Bytes;
use ferrokube_pki::{CertificateAuthority, Validity};
use ferrokube_storage::Storage;
use ferrokube_storage_etcd::testing::{EtcdProcess, ServerTls};
use ferrokube_storage_etcd::{EtcdOptions, EtcdStorage, EtcdTls};

struct Pki {
    ca: CertificateAuthority,
    server: (String, String),
    client: (String, String),
}

fn pki() -> Pki {
    let ca = CertificateAuthority::generate("etcd-test-ca").unwrap();
    let server = ca
        .issue_peer_cert(
            "etcd",
            &["localhost".into()],
            &[IpAddr::from([127, 0, 0, 1])],
            Validity::leaf_default(),
        )
        .unwrap();
    let client = ca
        .issue_client_cert("kube-apiserver-etcd-client", &[], Validity::leaf_default())
        .unwrap();
    Pki {
        server: (server.cert_pem, server.key_pem),
        client: (client.cert_pem, client.key_pem),
        ca,
    }
}

fn options(tls: EtcdTls) -> EtcdOptions {
    EtcdOptions {
        connect_timeout: Duration::from_secs(2),
        request_timeout: Duration::from_secs(5),
        tls: Some(tls),
        ..EtcdOptions::default()
    }
}

#[tokio::test]
async fn tls_with_client_certificates() {
    let pki = pki();
    let etcd = EtcdProcess::start_tls(ServerTls::new(
        pki.server.0.clone(),
        pki.server.1.clone(),
        pki.ca.cert_pem().to_string(),
    ))
    .await
    .unwrap();
    assert!(etcd.endpoint().starts_with("https://"));

    let store = EtcdStorage::connect(
        &etcd.endpoints(),
        options(EtcdTls {
            ca_pem: pki.ca.cert_pem().to_string(),
            client: Some(pki.client.clone()),
        }),
    )
    .await
    .unwrap();
    let rev = store
        .create("/tls/a", Bytes::from_static(b"v"))
        .await
        .unwrap();
    let got = store.get("/tls/a", None).await.unwrap();
    assert_eq!(got.value, Bytes::from_static(b"v"));
    assert_eq!(got.mod_revision, rev);

    // No client certificate: etcd refuses the handshake.
    let without = EtcdStorage::connect(
        &etcd.endpoints(),
        options(EtcdTls {
            ca_pem: pki.ca.cert_pem().to_string(),
            client: None,
        }),
    )
    .await;
    assert!(without.is_err(), "connected without a client certificate");

    // etcd's certificate from a CA this client does not trust.
    let other = CertificateAuthority::generate("another-ca").unwrap();
    let untrusted = EtcdStorage::connect(
        &etcd.endpoints(),
        options(EtcdTls {
            ca_pem: other.cert_pem().to_string(),
            client: Some(pki.client.clone()),
        }),
    )
    .await;
    assert!(untrusted.is_err(), "connected to an etcd it cannot verify");
}
