//! Ferrokube PKI: the certificates and kubeconfigs a cluster needs, generated in-process
//! so nobody has to drive `openssl` by hand.
//!
//! * [`CertificateAuthority`]: generate or load a CA (ECDSA P-256, via `rcgen` on
//!   `ring`), issue serving certificates (server-auth EKU, DNS and IP SANs) and client
//!   certificates (client-auth EKU; CN = user name, O = groups, which is how upstream's
//!   x509 authenticator maps a certificate to a user).
//! * [`kubeconfig`]: kubeconfig documents (`apiVersion: v1`, `kind: Config`) with inline
//!   base64 credentials, for client-certificate and bearer-token users.
//! * [`cluster`]: [`write_cluster_pki`], the idempotent on-disk layout a single-node
//!   cluster uses (CA, apiserver serving cert, admin and per-component client certs,
//!   kubeconfigs, service-account signing key, etcd's CA and certs, the front-proxy CA
//!   and its `front-proxy-client` cert).
//! * [`csr`]: certificate signing requests parsed and verified, and signed by a
//!   [`CertificateAuthority`] (the controller-manager's CSR signer).
//! * [`pem`]: small PEM helpers and certificate inspection ([`CertInfo`]).
//! * [`insecure`]: [`insecure::AcceptAnyServerCert`], the rustls verifier for the places
//!   upstream skips server verification (kubelet dialing without a CA, HTTPS probes).
//! * [`serving`]: the rustls server configuration of an HTTPS port from PEM, and
//!   upstream's self-signed serving pair, for every component that serves TLS;
//!   [`serving::ServingCertificate`], a serving pair replaced while the port serves.
//! * [`tls_options`]: upstream's `--tls-min-version` and `--tls-cipher-suites`, the
//!   versions and suites [`serving`] lets a port negotiate.
//! * [`reload`]: [`reload::FollowedFiles`], certificate and CA files read again while a
//!   server runs and installed when their content changes (apiserver, kubelet).
//!
//! Layer: server side and tooling. The apiserver uses it (serving certs, client CA);
//! `cmd/ferrokube-pki` and the hack/cluster scripts use it to lay out a cluster. It does
//! file IO only in [`cluster`] and [`reload`]. It must not depend on storage, registry, admission,
//! apiserver or any client crate, and knows nothing about HTTP (only rustls's configuration
//! and certificate-verifier interfaces).
//!
//! Key type: every key this crate generates is ECDSA P-256 (PKCS#8 `PRIVATE KEY` PEM);
//! kubectl, client-go, rustls and the upstream apiserver all accept it. With the `ring`
//! backend, [`CertificateAuthority::load`] reads PKCS#8 keys only (not PKCS#1
//! `RSA PRIVATE KEY` or SEC1 `EC PRIVATE KEY`).

pub mod cluster;
pub mod csr;
mod der;
pub mod insecure;
pub mod kubeconfig;
pub mod pem;
pub mod reload;
pub mod serving;
pub mod tls_options;

use std::net::IpAddr;
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

pub use cluster::{
    ClusterPkiOptions, FRONT_PROXY_CLIENT, PkiPaths, first_service_ip, write_cluster_pki,
};
pub use kubeconfig::{Kubeconfig, kubeconfig_token_yaml, kubeconfig_yaml};
pub use pem::CertInfo;

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("certificate generation failed: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("invalid PEM: {0}")]
    Pem(String),
    #[error("invalid certificate: {0}")]
    Certificate(String),
    #[error("the private key does not match the certificate's public key")]
    KeyMismatch,
    #[error("not a CA certificate (basicConstraints CA:TRUE missing)")]
    NotCa,
    #[error("invalid option: {0}")]
    InvalidOption(String),
    #[error("{path}: {source}")]
    Io {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// `Result` with [`PkiError`].
pub type Result<T, E = PkiError> = std::result::Result<T, E>;

/// How far back `not_before` is set, so peers with a slightly slow clock accept a
/// certificate issued a moment ago (client-go's cert helpers backdate the same way).
pub const CLOCK_SKEW_BACKDATE: Duration = Duration::from_secs(5 * 60);

/// Default CA lifetime: 10 years, as kubeadm.
pub const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// Default leaf lifetime: 1 year, as kubeadm.
pub const LEAF_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);

/// A certificate's validity window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    pub not_before: SystemTime,
    pub not_after: SystemTime,
}

impl Validity {
    /// Valid from now (backdated by [`CLOCK_SKEW_BACKDATE`]) for `duration`.
    pub fn starting_now(duration: Duration) -> Self {
        let now = SystemTime::now();
        Validity {
            not_before: now.checked_sub(CLOCK_SKEW_BACKDATE).unwrap_or(now),
            not_after: now + duration,
        }
    }

    /// The default leaf validity ([`LEAF_VALIDITY`]) starting now.
    pub fn leaf_default() -> Self {
        Self::starting_now(LEAF_VALIDITY)
    }

    /// The default CA validity ([`CA_VALIDITY`]) starting now.
    pub fn ca_default() -> Self {
        Self::starting_now(CA_VALIDITY)
    }

    fn apply(&self, params: &mut CertificateParams) -> Result<()> {
        if self.not_after <= self.not_before {
            return Err(PkiError::InvalidOption(
                "validity: not_after must be after not_before".into(),
            ));
        }
        params.not_before = self.not_before.into();
        params.not_after = self.not_after.into();
        Ok(())
    }
}

/// A certificate and its private key, both PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for Issued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issued")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"[elided]")
            .finish()
    }
}

/// A certificate authority that can issue serving and client certificates.
pub struct CertificateAuthority {
    cert_pem: String,
    key_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for CertificateAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertificateAuthority")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"[elided]")
            .finish()
    }
}

impl CertificateAuthority {
    /// A new self-signed CA with a fresh P-256 key, valid for [`CA_VALIDITY`].
    pub fn generate(common_name: &str) -> Result<Self> {
        Self::generate_with_validity(common_name, Validity::ca_default())
    }

    /// A new self-signed CA with a fresh P-256 key and the given validity.
    pub fn generate_with_validity(common_name: &str, validity: Validity) -> Result<Self> {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
        let mut params = CertificateParams::default();
        params.distinguished_name = dn(common_name, &[]);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
        ];
        validity.apply(&mut params)?;
        let cert = params.self_signed(&key)?;
        let key_pem = key.serialize_pem();
        Ok(CertificateAuthority {
            cert_pem: cert.pem(),
            key_pem,
            issuer: Issuer::new(params, key),
        })
    }

    /// Loads a CA from its certificate and PKCS#8 private key. Checks that the
    /// certificate is a CA and that the key belongs to it; does not check the
    /// validity window (see [`CertInfo::is_valid_at`]).
    pub fn load(cert_pem: &str, key_pem: &str) -> Result<Self> {
        let der = pem::parse_cert_pem(cert_pem)?;
        let info = CertInfo::from_der(&der)?;
        if !info.is_ca {
            return Err(PkiError::NotCa);
        }
        let key = KeyPair::from_pem(key_pem)
            .map_err(|e| PkiError::Pem(format!("CA private key: {e}")))?;
        if key.public_key_raw() != info.public_key_raw.as_slice() {
            return Err(PkiError::KeyMismatch);
        }
        let issuer = Issuer::from_ca_cert_der(&der, key)?;
        Ok(CertificateAuthority {
            cert_pem: pem::encode_cert_pem(&der),
            key_pem: key_pem.to_owned(),
            issuer,
        })
    }

    /// The CA certificate and key as PEM.
    pub fn to_pem(&self) -> Issued {
        Issued {
            cert_pem: self.cert_pem.clone(),
            key_pem: self.key_pem.clone(),
        }
    }

    /// The CA certificate as PEM (what clients trust, e.g. `certificate-authority-data`).
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// Issues a TLS serving certificate (EKU serverAuth) with a fresh key.
    pub fn issue_serving_cert(
        &self,
        common_name: &str,
        dns_sans: &[String],
        ip_sans: &[IpAddr],
        validity: Validity,
    ) -> Result<Issued> {
        let sans = san_list(dns_sans, ip_sans)?;
        self.issue(
            common_name,
            &[],
            sans,
            &[ExtendedKeyUsagePurpose::ServerAuth],
            validity,
        )
    }

    /// Issues a certificate for both sides of TLS (EKU serverAuth and clientAuth) with
    /// a fresh key, as an etcd member's: it serves clients and dials its peers.
    pub fn issue_peer_cert(
        &self,
        common_name: &str,
        dns_sans: &[String],
        ip_sans: &[IpAddr],
        validity: Validity,
    ) -> Result<Issued> {
        let sans = san_list(dns_sans, ip_sans)?;
        self.issue(
            common_name,
            &[],
            sans,
            &[
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
            validity,
        )
    }

    /// Issues a TLS client certificate (EKU clientAuth) with a fresh key: the
    /// subject's CN is the user name and each group is an O attribute.
    pub fn issue_client_cert(
        &self,
        user_cn: &str,
        groups_as_o: &[String],
        validity: Validity,
    ) -> Result<Issued> {
        self.issue(
            user_cn,
            groups_as_o,
            Vec::new(),
            &[ExtendedKeyUsagePurpose::ClientAuth],
            validity,
        )
    }

    fn issue(
        &self,
        common_name: &str,
        organizations: &[String],
        sans: Vec<SanType>,
        eku: &[ExtendedKeyUsagePurpose],
        validity: Validity,
    ) -> Result<Issued> {
        if common_name.is_empty() {
            return Err(PkiError::InvalidOption(
                "common name must not be empty".into(),
            ));
        }
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
        let mut params = CertificateParams::default();
        params.distinguished_name = dn(common_name, organizations);
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = eku.to_vec();
        params.subject_alt_names = sans;
        params.use_authority_key_identifier_extension = true;
        validity.apply(&mut params)?;
        let cert = params.signed_by(&key, &self.issuer)?;
        let cert_pem = if organizations.len() > 1 {
            // rcgen keeps one value per attribute type; put every O in by hand.
            let subject = der::encode_subject(common_name, organizations);
            let der = der::replace_subject_and_resign(cert.der(), &subject, self.issuer.key())?;
            pem::encode_cert_pem(&der)
        } else {
            cert.pem()
        };
        Ok(Issued {
            cert_pem,
            key_pem: key.serialize_pem(),
        })
    }
}

/// A subject DN: organizations first, then the common name (the order
/// `openssl req -subj "/O=system:masters/CN=kubernetes-admin"` produces).
fn dn(common_name: &str, organizations: &[String]) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    for o in organizations {
        dn.push(DnType::OrganizationName, o.as_str());
    }
    dn.push(DnType::CommonName, common_name);
    dn
}

/// DNS and IP SANs for rcgen; a DNS name that is not IA5 is an invalid option.
fn san_list(dns_sans: &[String], ip_sans: &[IpAddr]) -> Result<Vec<SanType>> {
    let mut sans = Vec::with_capacity(dns_sans.len() + ip_sans.len());
    for name in dns_sans {
        let ia5 = name
            .clone()
            .try_into()
            .map_err(|e| PkiError::InvalidOption(format!("DNS SAN {name:?} is not valid: {e}")))?;
        sans.push(SanType::DnsName(ia5));
    }
    sans.extend(ip_sans.iter().copied().map(SanType::IpAddress));
    Ok(sans)
}

/// A fresh ECDSA P-256 key pair as (PKCS#8 private key PEM, SPKI public key PEM):
/// the service-account token signing pair (`--service-account-signing-key-file` /
/// `--service-account-key-file`).
pub fn generate_signing_key_pair() -> Result<(String, String)> {
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    Ok((key.serialize_pem(), key.public_key_pem()))
}

/// The public key PEM of a PKCS#8 private key PEM.
pub fn public_key_pem_of(private_key_pem: &str) -> Result<String> {
    let key = KeyPair::from_pem(private_key_pem)
        .map_err(|e| PkiError::Pem(format!("private key: {e}")))?;
    Ok(key.public_key_pem())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ca_round_trips_through_pem_and_issues() {
        let ca = CertificateAuthority::generate("test-ca").unwrap();
        let pem = ca.to_pem();
        let loaded = CertificateAuthority::load(&pem.cert_pem, &pem.key_pem).unwrap();
        assert_eq!(loaded.cert_pem(), ca.cert_pem());
        let info = CertInfo::from_pem(ca.cert_pem()).unwrap();
        assert!(info.is_ca);
        assert_eq!(info.common_name.as_deref(), Some("test-ca"));

        let leaf = loaded
            .issue_client_cert(
                "alice",
                &["dev".into(), "ops".into()],
                Validity::leaf_default(),
            )
            .unwrap();
        let leaf_info = CertInfo::from_pem(&leaf.cert_pem).unwrap();
        assert!(leaf_info.is_signed_by(ca.cert_pem()).unwrap());
        assert_eq!(leaf_info.issuer_common_name.as_deref(), Some("test-ca"));
        assert_eq!(leaf_info.common_name.as_deref(), Some("alice"));
        assert_eq!(
            leaf_info.organizations,
            vec!["dev".to_string(), "ops".to_string()]
        );
        assert!(leaf_info.client_auth && leaf_info.matches_key(&leaf.key_pem));
        assert!(leaf_info.is_valid_at(SystemTime::now()));
        let other = CertificateAuthority::generate("test-ca").unwrap();
        assert!(!leaf_info.is_signed_by(other.cert_pem()).unwrap());
    }

    #[test]
    fn client_cert_maps_cn_and_o_with_client_auth_eku() {
        let ca = CertificateAuthority::generate("ca").unwrap();
        let issued = ca
            .issue_client_cert(
                "kubernetes-admin",
                &["system:masters".into()],
                Validity::leaf_default(),
            )
            .unwrap();
        let info = CertInfo::from_pem(&issued.cert_pem).unwrap();
        assert_eq!(info.common_name.as_deref(), Some("kubernetes-admin"));
        assert_eq!(info.organizations, vec!["system:masters".to_string()]);
        assert!(info.client_auth && !info.server_auth && !info.is_ca);
        assert!(issued.key_pem.contains("BEGIN PRIVATE KEY"));
        assert!(public_key_pem_of(&issued.key_pem).is_ok());
        assert!(info.matches_key(&issued.key_pem));
        assert!(!info.matches_key(&ca.to_pem().key_pem));
    }

    #[test]
    fn serving_cert_has_sans_and_server_auth_eku() {
        let ca = CertificateAuthority::generate("ca").unwrap();
        let ip: IpAddr = "10.96.0.1".parse().unwrap();
        let issued = ca
            .issue_serving_cert(
                "kube-apiserver",
                &["kubernetes.default.svc".into(), "localhost".into()],
                &[ip],
                Validity::leaf_default(),
            )
            .unwrap();
        let info = CertInfo::from_pem(&issued.cert_pem).unwrap();
        assert!(info.server_auth && !info.client_auth);
        assert_eq!(info.dns_sans, vec!["kubernetes.default.svc", "localhost"]);
        assert_eq!(info.ip_sans, vec![ip]);
    }

    #[test]
    fn load_rejects_mismatched_key_and_non_ca() {
        let a = CertificateAuthority::generate("a").unwrap().to_pem();
        let b = CertificateAuthority::generate("b").unwrap().to_pem();
        assert!(matches!(
            CertificateAuthority::load(&a.cert_pem, &b.key_pem),
            Err(PkiError::KeyMismatch)
        ));
        let ca = CertificateAuthority::load(&a.cert_pem, &a.key_pem).unwrap();
        let leaf = ca
            .issue_client_cert("u", &[], Validity::leaf_default())
            .unwrap();
        assert!(matches!(
            CertificateAuthority::load(&leaf.cert_pem, &leaf.key_pem),
            Err(PkiError::NotCa)
        ));
        assert!(CertificateAuthority::load("garbage", &a.key_pem).is_err());
        assert!(CertificateAuthority::load(&a.cert_pem, "garbage").is_err());
    }

    #[test]
    fn invalid_inputs_are_errors() {
        let ca = CertificateAuthority::generate("ca").unwrap();
        let now = SystemTime::now();
        let backwards = Validity {
            not_before: now,
            not_after: now - Duration::from_secs(1),
        };
        assert!(ca.issue_client_cert("u", &[], backwards).is_err());
        assert!(
            ca.issue_client_cert("", &[], Validity::leaf_default())
                .is_err()
        );
        assert!(
            ca.issue_serving_cert(
                "s",
                &["bad\u{e9}name".into()],
                &[],
                Validity::leaf_default()
            )
            .is_err()
        );
    }

    #[test]
    fn expired_validity_is_reported() {
        let ca = CertificateAuthority::generate("ca").unwrap();
        let now = SystemTime::now();
        let day = Duration::from_secs(86_400);
        let issued = ca
            .issue_client_cert(
                "u",
                &[],
                Validity {
                    not_before: now - 2 * day,
                    not_after: now - day,
                },
            )
            .unwrap();
        let info = CertInfo::from_pem(&issued.cert_pem).unwrap();
        assert!(!info.is_valid_at(now));
        assert!(info.is_valid_at(now - day - day / 2));
    }
}
