//! PEM helpers and certificate inspection.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject as _;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer as _, X509Certificate};

use crate::{PkiError, Result};

/// All `CERTIFICATE` blocks of a PEM bundle, in order. Other block types are skipped;
/// a bundle with no certificate is an error.
pub fn parse_cert_pem_bundle(pem: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| PkiError::Pem(e.to_string()))?;
    if certs.is_empty() {
        return Err(PkiError::Pem("no CERTIFICATE block found".into()));
    }
    Ok(certs)
}

/// The first `CERTIFICATE` block of a PEM document.
pub fn parse_cert_pem(pem: &str) -> Result<CertificateDer<'static>> {
    CertificateDer::from_pem_slice(pem.as_bytes()).map_err(|e| PkiError::Pem(e.to_string()))
}

/// Encodes DER as a `CERTIFICATE` PEM block (64-column base64, trailing newline).
pub fn encode_cert_pem(der: &[u8]) -> String {
    encode_pem("CERTIFICATE", der)
}

/// Encodes DER as a PEM block with the given label.
pub fn encode_pem(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        // base64 output is ASCII, so every chunk is valid UTF-8.
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// What this project needs to know about one certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertInfo {
    /// The first subject CN, if any.
    pub common_name: Option<String>,
    /// Subject O attributes, in order (groups, for client certificates).
    pub organizations: Vec<String>,
    /// The first issuer CN, if any.
    pub issuer_common_name: Option<String>,
    pub dns_sans: Vec<String>,
    pub ip_sans: Vec<IpAddr>,
    pub not_before: SystemTime,
    pub not_after: SystemTime,
    /// basicConstraints CA:TRUE.
    pub is_ca: bool,
    /// extendedKeyUsage contains serverAuth.
    pub server_auth: bool,
    /// extendedKeyUsage contains clientAuth.
    pub client_auth: bool,
    /// The subjectPublicKey bits (for ECDSA, the uncompressed point).
    pub public_key_raw: Vec<u8>,
    /// The whole certificate, DER.
    pub der: Vec<u8>,
}

impl CertInfo {
    /// Parses the first certificate of a PEM document.
    pub fn from_pem(pem: &str) -> Result<Self> {
        let der = parse_cert_pem(pem)?;
        Self::from_der(&der)
    }

    /// Parses a DER certificate. Strings that are not valid in their ASN.1 type are
    /// an error rather than being skipped.
    pub fn from_der(der: &[u8]) -> Result<Self> {
        let (_, cert) =
            X509Certificate::from_der(der).map_err(|e| PkiError::Certificate(e.to_string()))?;
        let bad = |e: x509_parser::error::X509Error| PkiError::Certificate(e.to_string());

        let common_name = match cert.subject().iter_common_name().next() {
            Some(attr) => Some(attr.as_str().map_err(bad)?.to_owned()),
            None => None,
        };
        let organizations = cert
            .subject()
            .iter_organization()
            .map(|attr| attr.as_str().map(str::to_owned))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(bad)?;
        let issuer_common_name = match cert.issuer().iter_common_name().next() {
            Some(attr) => Some(attr.as_str().map_err(bad)?.to_owned()),
            None => None,
        };

        let mut dns_sans = Vec::new();
        let mut ip_sans = Vec::new();
        if let Some(san) = cert.subject_alternative_name().map_err(bad)? {
            for name in &san.value.general_names {
                match name {
                    GeneralName::DNSName(d) => dns_sans.push((*d).to_owned()),
                    GeneralName::IPAddress(bytes) => {
                        if let Some(ip) = ip_from_bytes(bytes) {
                            ip_sans.push(ip);
                        }
                    }
                    _ => {}
                }
            }
        }
        let (server_auth, client_auth) = match cert.extended_key_usage().map_err(bad)? {
            Some(eku) => (eku.value.server_auth, eku.value.client_auth),
            None => (false, false),
        };

        Ok(CertInfo {
            common_name,
            organizations,
            issuer_common_name,
            dns_sans,
            ip_sans,
            not_before: to_system_time(cert.validity().not_before.timestamp()),
            not_after: to_system_time(cert.validity().not_after.timestamp()),
            is_ca: cert.is_ca(),
            server_auth,
            client_auth,
            public_key_raw: cert.public_key().subject_public_key.data.to_vec(),
            der: der.to_vec(),
        })
    }

    /// Whether `at` lies inside `[not_before, not_after]`.
    pub fn is_valid_at(&self, at: SystemTime) -> bool {
        self.not_before <= at && at <= self.not_after
    }

    /// Whether this certificate's signature verifies with the public key of the CA
    /// certificate `ca_cert_pem` (the signature only: no validity or EKU checks).
    pub fn is_signed_by(&self, ca_cert_pem: &str) -> Result<bool> {
        let ca_der = parse_cert_pem(ca_cert_pem)?;
        let (_, ca) =
            X509Certificate::from_der(&ca_der).map_err(|e| PkiError::Certificate(e.to_string()))?;
        let (_, me) = X509Certificate::from_der(&self.der)
            .map_err(|e| PkiError::Certificate(e.to_string()))?;
        Ok(me.verify_signature(Some(ca.public_key())).is_ok())
    }

    /// Whether the PKCS#8 private key PEM `key_pem` belongs to this certificate.
    /// Unparseable keys do not match.
    pub fn matches_key(&self, key_pem: &str) -> bool {
        rcgen::KeyPair::from_pem(key_pem)
            .map(|k| k.public_key_raw() == self.public_key_raw.as_slice())
            .unwrap_or(false)
    }
}

pub(crate) fn ip_from_bytes(bytes: &[u8]) -> Option<IpAddr> {
    match bytes.len() {
        4 => {
            let a: [u8; 4] = bytes.try_into().ok()?;
            Some(IpAddr::V4(Ipv4Addr::from(a)))
        }
        16 => {
            let a: [u8; 16] = bytes.try_into().ok()?;
            Some(IpAddr::V6(Ipv6Addr::from(a)))
        }
        _ => None,
    }
}

fn to_system_time(unix: i64) -> SystemTime {
    if unix >= 0 {
        UNIX_EPOCH + Duration::from_secs(unix.unsigned_abs())
    } else {
        UNIX_EPOCH
            .checked_sub(Duration::from_secs(unix.unsigned_abs()))
            .unwrap_or(UNIX_EPOCH)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_encoding_round_trips() {
        let ca = crate::CertificateAuthority::generate("x").unwrap();
        let der = parse_cert_pem(ca.cert_pem()).unwrap();
        let again = encode_cert_pem(&der);
        assert_eq!(parse_cert_pem(&again).unwrap(), der);
        for line in again.lines() {
            assert!(line.len() <= 64, "{line}");
        }
        let bundle = format!("{}{}", ca.cert_pem(), again);
        assert_eq!(parse_cert_pem_bundle(&bundle).unwrap().len(), 2);
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(parse_cert_pem("").is_err());
        assert!(parse_cert_pem_bundle("hello").is_err());
        assert!(
            parse_cert_pem("-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n")
                .is_err()
        );
        assert!(CertInfo::from_der(b"\x30\x03\x02\x01\x01").is_err());
        assert!(CertInfo::from_der(&[]).is_err());
    }
}
