//! Certificate signing requests (PKCS#10), for the controller-manager's CSR signer
//! (upstream `pkg/controller/certificates/authority`): [`parse_request_pem`] reads
//! and verifies a `CERTIFICATE REQUEST`, and [`CertificateAuthority::sign_request`]
//! issues the certificate it asks for.
//!
//! As upstream's `CertificateAuthority.Sign` with its permissive policy, the issued
//! certificate keeps the request's subject byte for byte (every O, in order) and its
//! DNS, email, IP and URI SANs; the request's other extensions are dropped; key
//! usages come from the caller (the CSR's `spec.usages`, not the request); the
//! serial is 128 random bits; basicConstraints is CA:FALSE.

use std::net::IpAddr;
use std::time::SystemTime;

use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, KeyUsagePurpose,
    PublicKeyData, SanType, SerialNumber, SignatureAlgorithm,
};
use rustls_pki_types::CertificateSigningRequestDer;
use rustls_pki_types::pem::PemObject as _;
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::prelude::FromDer as _;

use crate::pem::ip_from_bytes;
use crate::{CertInfo, CertificateAuthority, PkiError, Result, der, pem};

const OID_RSA_ENCRYPTION: &str = "1.2.840.113549.1.1.1";
const OID_EC_PUBLIC_KEY: &str = "1.2.840.10045.2.1";
const OID_ED25519: &str = "1.3.101.112";
const OID_P256: &str = "1.2.840.10045.3.1.7";
const OID_P384: &str = "1.3.132.0.34";

/// What a verified certificate request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateRequest {
    /// The subject Name, DER, as the requester encoded it.
    pub subject_der: Vec<u8>,
    /// The subject's last CN (Go's `pkix.Name.CommonName`), empty when none.
    pub common_name: String,
    /// Every subject O, in order.
    pub organizations: Vec<String>,
    pub dns_names: Vec<String>,
    pub email_addresses: Vec<String>,
    pub ip_addresses: Vec<IpAddr>,
    pub uris: Vec<String>,
    public_key: RequestPublicKey,
}

/// The request's public key: its bits and the rcgen algorithm that writes its
/// SubjectPublicKeyInfo back.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RequestPublicKey {
    raw: Vec<u8>,
    algorithm: &'static SignatureAlgorithm,
}

impl PublicKeyData for RequestPublicKey {
    fn der_bytes(&self) -> &[u8] {
        &self.raw
    }

    fn algorithm(&self) -> &'static SignatureAlgorithm {
        self.algorithm
    }
}

/// Upstream `capihelper.ParseCSR` plus `CheckSignature`: the first PEM block must
/// be a `CERTIFICATE REQUEST` whose self-signature verifies.
pub fn parse_request_pem(pem_bytes: &[u8]) -> Result<CertificateRequest> {
    let der = CertificateSigningRequestDer::from_pem_slice(pem_bytes)
        .map_err(|_| PkiError::Pem("PEM block type must be CERTIFICATE REQUEST".into()))?;
    parse_request_der(der.as_ref())
}

/// A DER certificate request, signature verified.
pub fn parse_request_der(der_bytes: &[u8]) -> Result<CertificateRequest> {
    let bad = |e: String| PkiError::Certificate(format!("certificate request: {e}"));
    let (_, csr) = X509CertificationRequest::from_der(der_bytes).map_err(|e| bad(e.to_string()))?;
    csr.verify_signature()
        .map_err(|e| bad(format!("signature does not verify: {e}")))?;
    let info = &csr.certification_request_info;
    let text = |attr: &x509_parser::x509::AttributeTypeAndValue<'_>| {
        attr.as_str()
            .map(str::to_owned)
            .map_err(|e| bad(e.to_string()))
    };
    let common_name = match info.subject.iter_common_name().last() {
        Some(attr) => text(attr)?,
        None => String::new(),
    };
    let organizations = info
        .subject
        .iter_organization()
        .map(text)
        .collect::<Result<Vec<_>>>()?;
    let (mut dns_names, mut email_addresses, mut ip_addresses, mut uris) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for ext in csr.requested_extensions().into_iter().flatten() {
        let ParsedExtension::SubjectAlternativeName(san) = ext else {
            continue;
        };
        for name in &san.general_names {
            match name {
                GeneralName::DNSName(d) => dns_names.push((*d).to_owned()),
                GeneralName::RFC822Name(e) => email_addresses.push((*e).to_owned()),
                GeneralName::URI(u) => uris.push((*u).to_owned()),
                GeneralName::IPAddress(bytes) => {
                    ip_addresses.push(ip_from_bytes(bytes).ok_or_else(|| bad("bad IP SAN".into()))?)
                }
                _ => {}
            }
        }
    }
    let spki = &info.subject_pki;
    let curve = spki
        .algorithm
        .parameters
        .as_ref()
        .and_then(|p| p.as_oid().ok())
        .map(|o| o.to_id_string());
    let algorithm: &'static SignatureAlgorithm = match (
        spki.algorithm.algorithm.to_id_string().as_str(),
        curve.as_deref(),
    ) {
        (OID_RSA_ENCRYPTION, _) => &rcgen::PKCS_RSA_SHA256,
        (OID_EC_PUBLIC_KEY, Some(OID_P256)) => &rcgen::PKCS_ECDSA_P256_SHA256,
        (OID_EC_PUBLIC_KEY, Some(OID_P384)) => &rcgen::PKCS_ECDSA_P384_SHA384,
        (OID_ED25519, _) => &rcgen::PKCS_ED25519,
        (oid, curve) => {
            return Err(bad(format!(
                "unsupported public key algorithm {oid} (curve {curve:?})"
            )));
        }
    };
    Ok(CertificateRequest {
        subject_der: info.subject.as_raw().to_vec(),
        common_name,
        organizations,
        dns_names,
        email_addresses,
        ip_addresses,
        uris,
        public_key: RequestPublicKey {
            raw: spki.subject_public_key.data.to_vec(),
            algorithm,
        },
    })
}

/// Upstream `keyUsagesFromStrings`: the certificates API's usage names as key
/// usages and extended key usages (in Go's `x509.ExtKeyUsage` order); an unknown
/// name is an error naming every unknown one.
pub fn key_usages_from_strings(
    usages: &[String],
) -> Result<(Vec<KeyUsagePurpose>, Vec<ExtendedKeyUsagePurpose>)> {
    // Go's x509.ExtKeyUsage numbering, which upstream sorts by.
    const IPSEC_END_SYSTEM: &[u64] = &[1, 3, 6, 1, 5, 5, 7, 3, 5];
    const IPSEC_TUNNEL: &[u64] = &[1, 3, 6, 1, 5, 5, 7, 3, 6];
    const IPSEC_USER: &[u64] = &[1, 3, 6, 1, 5, 5, 7, 3, 7];
    const MICROSOFT_SGC: &[u64] = &[1, 3, 6, 1, 4, 1, 311, 10, 3, 3];
    const NETSCAPE_SGC: &[u64] = &[2, 16, 840, 1, 113730, 4, 1];
    let mut key_usages = Vec::new();
    let mut extended: Vec<(u8, ExtendedKeyUsagePurpose)> = Vec::new();
    let mut unrecognized = Vec::new();
    for usage in usages {
        let ku = match usage.as_str() {
            "signing" | "digital signature" => Some(KeyUsagePurpose::DigitalSignature),
            "content commitment" => Some(KeyUsagePurpose::ContentCommitment),
            "key encipherment" => Some(KeyUsagePurpose::KeyEncipherment),
            "key agreement" => Some(KeyUsagePurpose::KeyAgreement),
            "data encipherment" => Some(KeyUsagePurpose::DataEncipherment),
            "cert sign" => Some(KeyUsagePurpose::KeyCertSign),
            "crl sign" => Some(KeyUsagePurpose::CrlSign),
            "encipher only" => Some(KeyUsagePurpose::EncipherOnly),
            "decipher only" => Some(KeyUsagePurpose::DecipherOnly),
            _ => None,
        };
        if let Some(ku) = ku {
            if !key_usages.contains(&ku) {
                key_usages.push(ku);
            }
            continue;
        }
        let other = |oid: &[u64]| ExtendedKeyUsagePurpose::Other(oid.to_vec());
        let eku = match usage.as_str() {
            "any" => (0, ExtendedKeyUsagePurpose::Any),
            "server auth" => (1, ExtendedKeyUsagePurpose::ServerAuth),
            "client auth" => (2, ExtendedKeyUsagePurpose::ClientAuth),
            "code signing" => (3, ExtendedKeyUsagePurpose::CodeSigning),
            "email protection" | "s/mime" => (4, ExtendedKeyUsagePurpose::EmailProtection),
            "ipsec end system" => (5, other(IPSEC_END_SYSTEM)),
            "ipsec tunnel" => (6, other(IPSEC_TUNNEL)),
            "ipsec user" => (7, other(IPSEC_USER)),
            "timestamping" => (8, ExtendedKeyUsagePurpose::TimeStamping),
            "ocsp signing" => (9, ExtendedKeyUsagePurpose::OcspSigning),
            "microsoft sgc" => (10, other(MICROSOFT_SGC)),
            "netscape sgc" => (11, other(NETSCAPE_SGC)),
            _ => {
                unrecognized.push(format!("{usage:?}"));
                continue;
            }
        };
        if !extended.iter().any(|(rank, _)| *rank == eku.0) {
            extended.push(eku);
        }
    }
    if !unrecognized.is_empty() {
        return Err(PkiError::InvalidOption(format!(
            "unrecognized usage values: [{}]",
            unrecognized.join(" ")
        )));
    }
    extended.sort_by_key(|(rank, _)| *rank);
    Ok((key_usages, extended.into_iter().map(|(_, e)| e).collect()))
}

impl CertificateAuthority {
    /// When the CA certificate expires.
    pub fn not_after(&self) -> Result<SystemTime> {
        Ok(CertInfo::from_pem(self.cert_pem())?.not_after)
    }

    /// Issues the certificate `request` asks for, with `usages` (the certificates
    /// API's names) and the validity window given; returns it as PEM.
    pub fn sign_request(
        &self,
        request: &CertificateRequest,
        usages: &[String],
        not_before: SystemTime,
        not_after: SystemTime,
    ) -> Result<String> {
        let (key_usages, extended_key_usages) = key_usages_from_strings(usages)?;
        let mut params = CertificateParams::default();
        // rcgen cannot write every subject (several O's); the request's own subject
        // replaces this placeholder below. An empty one stays empty, so that rcgen
        // marks the SAN extension critical as RFC 5280 wants.
        params.distinguished_name = DistinguishedName::new();
        if !request.subject_der.is_empty() && request.subject_der != [0x30, 0x00] {
            params.distinguished_name.push(DnType::CommonName, "-");
        }
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = key_usages;
        params.extended_key_usages = extended_key_usages;
        params.not_before = not_before.into();
        params.not_after = not_after.into();
        params.use_authority_key_identifier_extension = true;
        params.serial_number = Some(random_serial()?);
        let ia5 = |s: &str| {
            s.to_owned().try_into().map_err(|e| {
                PkiError::InvalidOption(format!("subjectAltName {s:?} is not IA5: {e}"))
            })
        };
        for d in &request.dns_names {
            params.subject_alt_names.push(SanType::DnsName(ia5(d)?));
        }
        for e in &request.email_addresses {
            params.subject_alt_names.push(SanType::Rfc822Name(ia5(e)?));
        }
        for ip in &request.ip_addresses {
            params.subject_alt_names.push(SanType::IpAddress(*ip));
        }
        for u in &request.uris {
            params.subject_alt_names.push(SanType::URI(ia5(u)?));
        }
        let cert = params.signed_by(&request.public_key, &self.issuer)?;
        let der =
            der::replace_subject_and_resign(cert.der(), &request.subject_der, self.issuer.key())?;
        Ok(pem::encode_cert_pem(&der))
    }
}

/// 128 random bits as a positive serial (upstream: `rand.Int(rand.Reader, 2^128)`).
fn random_serial() -> Result<SerialNumber> {
    let mut bytes = [0u8; 16];
    rustls::crypto::ring::default_provider()
        .secure_random
        .fill(&mut bytes)
        .map_err(|_| PkiError::InvalidOption("no randomness for a serial number".into()))?;
    // A leading 0 bit keeps the INTEGER positive; a non-zero first byte keeps it
    // minimal and never zero.
    bytes[0] = (bytes[0] & 0x7f) | 0x01;
    Ok(SerialNumber::from_slice(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Validity;
    use rcgen::KeyPair;

    fn request(cn: &str, orgs: &[&str], dns: &[&str]) -> (String, KeyPair) {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        if let Some(o) = orgs.first() {
            params.distinguished_name.push(DnType::OrganizationName, *o);
        }
        params.distinguished_name.push(DnType::CommonName, cn);
        params.subject_alt_names = dns
            .iter()
            .map(|d| SanType::DnsName(d.to_string().try_into().unwrap()))
            .collect();
        let csr = params.serialize_request(&key).unwrap();
        (csr.pem().unwrap(), key)
    }

    #[test]
    fn parses_and_verifies_a_request() {
        let (pem, _) = request("system:node:n1", &["system:nodes"], &["n1.example"]);
        let r = parse_request_pem(pem.as_bytes()).unwrap();
        assert_eq!(r.common_name, "system:node:n1");
        assert_eq!(r.organizations, ["system:nodes"]);
        assert_eq!(r.dns_names, ["n1.example"]);
        assert!(r.ip_addresses.is_empty() && r.uris.is_empty());

        let cert_pem = pem.replace("CERTIFICATE REQUEST", "CERTIFICATE");
        let e = parse_request_pem(cert_pem.as_bytes()).unwrap_err();
        assert!(
            e.to_string()
                .contains("PEM block type must be CERTIFICATE REQUEST")
        );
        assert!(parse_request_pem(b"garbage").is_err());
        // A flipped byte in the signed part no longer verifies.
        let mut der = CertificateSigningRequestDer::from_pem_slice(pem.as_bytes())
            .unwrap()
            .as_ref()
            .to_vec();
        let at = der.len() / 3;
        der[at] ^= 0x01;
        assert!(parse_request_der(&der).is_err());
    }

    #[test]
    fn signs_with_the_request_subject_sans_and_given_usages() {
        let ca = CertificateAuthority::generate("csr-ca").unwrap();
        let (pem, key) = request("system:node:n1", &["system:nodes"], &["n1.example"]);
        let r = parse_request_pem(pem.as_bytes()).unwrap();
        let validity = Validity::starting_now(std::time::Duration::from_secs(3600));
        let usages = ["digital signature".to_string(), "server auth".to_string()];
        let cert = ca
            .sign_request(&r, &usages, validity.not_before, validity.not_after)
            .unwrap();
        let info = CertInfo::from_pem(&cert).unwrap();
        assert!(info.is_signed_by(ca.cert_pem()).unwrap());
        assert_eq!(info.common_name.as_deref(), Some("system:node:n1"));
        assert_eq!(info.organizations, ["system:nodes"]);
        assert_eq!(info.dns_sans, ["n1.example"]);
        assert!(info.server_auth && !info.client_auth && !info.is_ca);
        assert!(info.matches_key(&key.serialize_pem()));
        let secs = |t: SystemTime| t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
        assert_eq!(secs(info.not_after), secs(validity.not_after));

        let bad = ["client auth".to_string(), "flying".to_string()];
        let e = ca
            .sign_request(&r, &bad, validity.not_before, validity.not_after)
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("unrecognized usage values: [\"flying\"]"),
            "{e}"
        );
    }

    #[test]
    fn usages_map_as_upstream() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let (ku, eku) = key_usages_from_strings(&s(&[
            "client auth",
            "key encipherment",
            "server auth",
            "signing",
        ]))
        .unwrap();
        assert_eq!(
            ku,
            [
                KeyUsagePurpose::KeyEncipherment,
                KeyUsagePurpose::DigitalSignature
            ]
        );
        assert_eq!(
            eku,
            [
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth
            ]
        );
    }
}
