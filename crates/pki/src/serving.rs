//! TLS serving: the rustls server configuration of an HTTPS port from PEM, and
//! upstream's self-signed serving pair for a server started without one. The
//! apiserver, the kubelet, the scheduler and the controller manager all build their
//! serving TLS here; they differ only in how clients are verified and in ALPN.

use std::net::IpAddr;
use std::sync::Arc;

use rustls::server::danger::ClientCertVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::{CertificateAuthority, Issued, PkiError, Result, Validity};

/// ALPN for a port that serves HTTP/2 and HTTP/1.1.
pub const ALPN_H2_HTTP1: &[&[u8]] = &[b"h2", b"http/1.1"];
/// ALPN for a port that must stay on HTTP/1.1 (upgrades: exec, attach, port-forward).
pub const ALPN_HTTP1: &[&[u8]] = &[b"http/1.1"];

/// The rustls configuration of an HTTPS port: the serving certificate (PEM, chain
/// allowed) and its key, the client verification (`None`: no client certificates
/// asked for) and the ALPN protocols offered.
pub fn server_config(
    cert_pem: &str,
    key_pem: &str,
    client_verifier: Option<Arc<dyn ClientCertVerifier>>,
    alpn: &[&[u8]],
) -> Result<Arc<rustls::ServerConfig>> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| PkiError::Pem(format!("certificate: {e}")))?;
    if certs.is_empty() {
        return Err(PkiError::Pem("no certificate in the PEM".into()));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| PkiError::Pem(format!("private key: {e}")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| PkiError::InvalidOption(e.to_string()))?;
    let builder = match client_verifier {
        Some(v) => builder.with_client_cert_verifier(v),
        None => builder.with_no_client_auth(),
    };
    let mut cfg = builder
        .with_single_cert(certs, key)
        .map_err(|e| PkiError::Certificate(e.to_string()))?;
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(cfg))
}

/// Upstream's `GenerateSelfSignedCertKey`: a CA made for the purpose
/// (`<host>-ca@<unix time>`) and a serving certificate it signs (`<subject>@<unix
/// time>`) for `dns` names and `ips`. The returned certificate PEM holds the chain
/// (serving certificate, then the CA).
pub fn self_signed_serving(
    host: &str,
    subject: &str,
    dns: &[String],
    ips: &[IpAddr],
) -> Result<Issued> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let ca = CertificateAuthority::generate(&format!("{host}-ca@{stamp}"))?;
    let issued = ca.issue_serving_cert(
        &format!("{subject}@{stamp}"),
        dns,
        ips,
        Validity::leaf_default(),
    )?;
    Ok(Issued {
        cert_pem: format!("{}{}", issued.cert_pem, ca.cert_pem()),
        key_pem: issued.key_pem,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_self_signed_pair_serves_with_the_alpn_asked_for() {
        let pair = self_signed_serving(
            "localhost",
            "kube-scheduler",
            &["localhost".into()],
            &[IpAddr::from([127, 0, 0, 1])],
        )
        .unwrap();
        assert_eq!(pair.cert_pem.matches("BEGIN CERTIFICATE").count(), 2);
        let cfg = server_config(&pair.cert_pem, &pair.key_pem, None, ALPN_HTTP1).unwrap();
        assert_eq!(cfg.alpn_protocols, [b"http/1.1".to_vec()]);
        let cfg = server_config(&pair.cert_pem, &pair.key_pem, None, ALPN_H2_HTTP1).unwrap();
        assert_eq!(cfg.alpn_protocols.len(), 2);
        assert!(matches!(
            server_config("", &pair.key_pem, None, ALPN_HTTP1),
            Err(PkiError::Pem(_))
        ));
        assert!(server_config(&pair.cert_pem, "junk", None, ALPN_HTTP1).is_err());
    }
}
