//! The kubelet's HTTPS port follows its certificate files, as the binary assembles
//! it: `--tls-cert-file`/`--tls-private-key-file` (upstream's
//! `ReloadKubeletServerCertificateFile`) and `--client-ca-file` (upstream's dynamic CA
//! file content) are read again while the port serves, so a rewritten serving pair is
//! presented and a replaced client CA is the one client certificates are checked
//! against, from the next handshake on, without a restart. Every wait is bounded.

mod tls_answer;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use ferrokube_client::delegated::DelegatedAuthOptions;
use ferrokube_client::extension_authentication::{LookupFailure, client_certificates};
use ferrokube_kubelet::server::{followed_serving_certificate, tls_config_resolving};
use ferrokube_pki::reload::CHECK_INTERVAL;
use ferrokube_pki::{CertificateAuthority, Issued, Validity};
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::AsyncReadExt as _;
use tokio_util::sync::CancellationToken;

fn serving(ca: &CertificateAuthority) -> Issued {
    ca.issue_serving_cert(
        "kubelet",
        &["localhost".to_string()],
        &[IpAddr::V4(Ipv4Addr::LOCALHOST)],
        Validity::leaf_default(),
    )
    .expect("serving certificate")
}

fn client(ca: &CertificateAuthority, user: &str) -> Issued {
    ca.issue_client_cert(user, &[], Validity::leaf_default())
        .expect("client certificate")
}

fn write_pair(dir: &Path, pair: &Issued) {
    std::fs::write(dir.join("kubelet.crt"), &pair.cert_pem).unwrap();
    std::fs::write(dir.join("kubelet.key"), &pair.key_pem).unwrap();
}

fn der(pem: &str) -> Vec<u8> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()
        .expect("a certificate")
        .expect("PEM")
        .to_vec()
}

/// What a client trusting `server_ca` and presenting `certificate` gets: the leaf the
/// server presented, and whether the server took the client's certificate (it then
/// answers; a refused certificate ends the connection with an alert instead).
async fn connect(
    addr: SocketAddr,
    server_ca: &str,
    certificate: &Issued,
) -> anyhow::Result<(Vec<u8>, bool)> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(der(server_ca)))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_client_auth_cert(
            vec![CertificateDer::from(der(&certificate.cert_pem))],
            PrivateKeyDer::from_pem_slice(certificate.key_pem.as_bytes())?,
        )?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = ServerName::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST).into());
    let mut tls = tokio::time::timeout(Duration::from_secs(5), connector.connect(name, tcp))
        .await
        .context("the handshake timed out")??;
    let leaf = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .context("the server presented no certificate")?
        .to_vec();
    let mut answer = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(5), tls.read(&mut answer))
        .await
        .context("no answer and no alert")?;
    Ok((
        leaf,
        matches!(read, Ok(1)) && answer == [tls_answer::ANSWER],
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewritten_certificate_files_are_used_without_a_restart() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let server_ca = CertificateAuthority::generate("kubelet-ca")?;
    let (old_client_ca, new_client_ca) = (
        CertificateAuthority::generate("client-ca-1")?,
        CertificateAuthority::generate("client-ca-2")?,
    );
    let (old_pair, new_pair) = (serving(&server_ca), serving(&server_ca));
    let (old_user, new_user) = (client(&old_client_ca, "old"), client(&new_client_ca, "new"));
    write_pair(dir.path(), &old_pair);
    let ca_file = dir.path().join("client-ca.crt");
    std::fs::write(&ca_file, old_client_ca.cert_pem())?;

    // As cmd/kubelet assembles the HTTPS port.
    let cancel = CancellationToken::new();
    let certificate = followed_serving_certificate(
        &dir.path().join("kubelet.crt"),
        &dir.path().join("kubelet.key"),
        cancel.clone(),
    )?;
    let clients = client_certificates(
        &DelegatedAuthOptions {
            client_ca_file: Some(ca_file.clone()),
            skip_lookup: true,
            ..Default::default()
        },
        None,
        LookupFailure::Tolerate,
    )
    .await?;
    let tls = tls_config_resolving(
        certificate,
        Some(clients.tls_verifier()),
        &Default::default(),
    )?;
    let addr = tls_answer::serve(tls, cancel.clone()).await?;

    let server_ca_pem = server_ca.cert_pem().to_string();
    assert_eq!(
        connect(addr, &server_ca_pem, &old_user).await?,
        (der(&old_pair.cert_pem), true),
        "at start: the first pair, and the first client CA's users"
    );
    assert!(
        !connect(addr, &server_ca_pem, &new_user).await?.1,
        "a client certificate of a CA not in the file is refused"
    );

    // A half-written pair (the new certificate with the old key) is not served.
    std::fs::write(dir.path().join("kubelet.crt"), &new_pair.cert_pem)?;
    tokio::time::sleep(CHECK_INTERVAL + Duration::from_millis(500)).await;
    assert_eq!(
        connect(addr, &server_ca_pem, &old_user).await?.0,
        der(&old_pair.cert_pem),
        "a certificate without its key is not served"
    );

    write_pair(dir.path(), &new_pair);
    std::fs::write(&ca_file, new_client_ca.cert_pem())?;
    let deadline = tokio::time::Instant::now() + 3 * CHECK_INTERVAL;
    loop {
        let (leaf, new_accepted) = connect(addr, &server_ca_pem, &new_user).await?;
        if leaf == der(&new_pair.cert_pem) && new_accepted {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            bail!(
                "after {:?}: new pair served {}, new CA's user accepted {new_accepted}",
                3 * CHECK_INTERVAL,
                leaf == der(&new_pair.cert_pem)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        !connect(addr, &server_ca_pem, &old_user).await?.1,
        "the replaced client CA's users are refused"
    );
    cancel.cancel();
    Ok(())
}
