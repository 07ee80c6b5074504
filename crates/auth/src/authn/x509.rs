//! Client certificates (upstream `request/x509`): verify the presented chain against
//! the client CA with the clientAuth EKU, then map the leaf's subject: CN → user
//! name, each O → a group (upstream's `CommonNameUserConversion`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, UnixTime};
use x509_parser::prelude::{FromDer as _, X509Certificate};

use super::{AuthError, AuthRequest, Authenticator};
use crate::user::{CREDENTIAL_ID_KEY, UserInfo};

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn root_store(client_ca_pem: &str) -> Result<Arc<RootCertStore>, AuthError> {
    let certs = CertificateDer::pem_slice_iter(client_ca_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| AuthError::Config(format!("client CA bundle: {e}")))?;
    if certs.is_empty() {
        return Err(AuthError::Config(
            "client CA bundle contains no CERTIFICATE".into(),
        ));
    }
    let mut roots = RootCertStore::empty();
    for cert in certs {
        roots
            .add(cert)
            .map_err(|e| AuthError::Config(format!("client CA bundle: {e}")))?;
    }
    Ok(Arc::new(roots))
}

/// The client-certificate verifier for the apiserver's rustls `ServerConfig`
/// (`.with_client_cert_verifier(..)`): requests a client certificate, verifies one
/// if presented (chain to `client_ca_pem`, clientAuth EKU, validity), and admits
/// clients that present none so bearer-token and anonymous requests still work
/// (Go's `tls.VerifyClientCertIfGiven`, what kube-apiserver uses).
pub fn client_cert_verifier(client_ca_pem: &str) -> Result<Arc<dyn ClientCertVerifier>, AuthError> {
    WebPkiClientVerifier::builder_with_provider(root_store(client_ca_pem)?, provider())
        .allow_unauthenticated()
        .build()
        .map_err(|e| AuthError::Config(format!("client certificate verifier: {e}")))
}

/// Authenticates by TLS client certificate against `--client-ca-file`.
///
/// The chain in [`AuthRequest::peer_certificates`] is verified here (not assumed
/// verified by the TLS layer), at the current time, with the clientAuth EKU. A
/// verified leaf without a CN is "no opinion" (`Ok(None)`), as upstream. The user gets
/// extra `authentication.kubernetes.io/credential-id: X509SHA256=<hex of the leaf>`.
///
/// A chain that verified is remembered with the time window in which every one of
/// its certificates is valid, so the next requests on the connection (the same chain)
/// skip the signature checks (an ECDSA verification per request was about 6 % of the
/// apiserver's CPU under pod creates) but still fail outside that window.
pub struct X509Authenticator {
    verifier: Arc<dyn ClientCertVerifier>,
    verified: VerifiedChains<Option<UserInfo>>,
}

/// Most chains remembered; the map is emptied when full (clients are few).
const VERIFIED_CHAINS: usize = 1024;

#[derive(Clone)]
struct VerifiedChain<T> {
    value: T,
    /// Seconds since the epoch: the latest notBefore and earliest notAfter of the
    /// presented certificates.
    valid_from: u64,
    valid_until: u64,
}

/// Chains that verified against one CA bundle, each with what was derived from it and
/// the time window in which every one of its certificates is valid (see
/// [`X509Authenticator`]). Shared with the request-header authenticator.
pub(super) struct VerifiedChains<T> {
    chains: Mutex<HashMap<[u8; 32], VerifiedChain<T>>>,
}

impl<T: Clone> VerifiedChains<T> {
    pub(super) fn new() -> Self {
        VerifiedChains {
            chains: Mutex::new(HashMap::new()),
        }
    }

    /// What was remembered for the chain of `digest`, if `now_secs` is inside its
    /// window.
    pub(super) fn get(&self, digest: &[u8; 32], now_secs: u64) -> Option<T> {
        self.chains
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(digest)
            .filter(|v| (v.valid_from..=v.valid_until).contains(&now_secs))
            .map(|v| v.value.clone())
    }

    /// Remembers `value` for a chain that just verified (nothing when a certificate
    /// of it does not parse).
    pub(super) fn insert(&self, chain: &[CertificateDer<'_>], digest: [u8; 32], value: T) {
        let Some((valid_from, valid_until)) = validity_window(chain) else {
            return;
        };
        let mut chains = self
            .chains
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if chains.len() >= VERIFIED_CHAINS {
            chains.clear();
        }
        chains.insert(
            digest,
            VerifiedChain {
                value,
                valid_from,
                valid_until,
            },
        );
    }
}

/// Verifies `chain` (leaf first) with `verifier` at `now`: upstream's
/// `verifying certificate ... failed` error when it does not verify.
pub(super) fn verify_chain(
    verifier: &dyn ClientCertVerifier,
    chain: &[CertificateDer<'_>],
    now: UnixTime,
) -> Result<(), AuthError> {
    let Some((leaf, intermediates)) = chain.split_first() else {
        return Err(AuthError::X509Verification {
            certificate: String::new(),
            reason: "no certificate".into(),
        });
    };
    verifier
        .verify_client_cert(leaf, intermediates, now)
        .map(|_| ())
        .map_err(|e| AuthError::X509Verification {
            certificate: certificate_identifier(leaf),
            reason: e.to_string(),
        })
}

/// A digest of the whole presented chain (leaf and intermediates, length-prefixed).
pub(super) fn chain_digest(chain: &[CertificateDer<'_>]) -> [u8; 32] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for cert in chain {
        ctx.update(&(cert.as_ref().len() as u64).to_be_bytes());
        ctx.update(cert.as_ref());
    }
    let mut out = [0; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    out
}

/// The window in which every certificate of `chain` is valid; `None` when one does
/// not parse (then nothing is remembered).
fn validity_window(chain: &[CertificateDer<'_>]) -> Option<(u64, u64)> {
    let mut from = 0u64;
    let mut until = u64::MAX;
    for cert in chain {
        let (_, parsed) = X509Certificate::from_der(cert.as_ref()).ok()?;
        let validity = parsed.validity();
        from = from.max(u64::try_from(validity.not_before.timestamp()).unwrap_or(0));
        until = until.min(u64::try_from(validity.not_after.timestamp()).ok()?);
    }
    Some((from, until))
}

impl std::fmt::Debug for X509Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("X509Authenticator").finish_non_exhaustive()
    }
}

impl X509Authenticator {
    /// From a PEM bundle of one or more CA certificates.
    pub fn new(client_ca_pem: &str) -> Result<Self, AuthError> {
        Ok(X509Authenticator {
            verifier: client_cert_verifier(client_ca_pem)?,
            verified: VerifiedChains::new(),
        })
    }

    /// [`Authenticator::authenticate`] at a given time (tests, clock injection).
    pub fn authenticate_at(
        &self,
        request: &AuthRequest<'_>,
        now: UnixTime,
    ) -> Result<Option<UserInfo>, AuthError> {
        let chain = request.peer_certificates;
        let Some(leaf) = chain.first() else {
            return Ok(None);
        };
        let digest = chain_digest(chain);
        if let Some(user) = self.verified.get(&digest, now.as_secs()) {
            return Ok(user);
        }
        // Outside the remembered window (or never seen): the full verification, which
        // also gives the precise error.
        verify_chain(self.verifier.as_ref(), chain, now)?;
        let user = user_from_leaf(leaf)?;
        self.verified.insert(chain, digest, user.clone());
        Ok(user)
    }
}

impl Authenticator for X509Authenticator {
    fn authenticate(&self, request: &AuthRequest<'_>) -> Result<Option<UserInfo>, AuthError> {
        self.authenticate_at(request, UnixTime::now())
    }
}

fn user_from_leaf(leaf: &CertificateDer<'_>) -> Result<Option<UserInfo>, AuthError> {
    let (_, cert) = X509Certificate::from_der(leaf.as_ref())
        .map_err(|e| AuthError::X509Subject(e.to_string()))?;
    let subject = cert.subject();
    let common_name = match subject.iter_common_name().next() {
        Some(attr) => attr
            .as_str()
            .map_err(|e| AuthError::X509Subject(format!("CN: {e}")))?,
        None => return Ok(None),
    };
    if common_name.is_empty() {
        return Ok(None);
    }
    let groups = subject
        .iter_organization()
        .map(|attr| attr.as_str().map(str::to_string))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| AuthError::X509Subject(format!("O: {e}")))?;
    let digest = ring::digest::digest(&ring::digest::SHA256, leaf.as_ref());
    let mut user = UserInfo {
        name: common_name.to_string(),
        uid: String::new(),
        groups,
        extra: Default::default(),
    };
    user.extra.insert(
        CREDENTIAL_ID_KEY.to_string(),
        vec![format!("X509SHA256={}", hex(digest.as_ref()))],
    );
    Ok(Some(user))
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    s
}

/// Upstream's `certificateIdentifier` for error messages: serial (decimal there,
/// hex here) and key identifiers when the certificate parses.
fn certificate_identifier(leaf: &CertificateDer<'_>) -> String {
    match X509Certificate::from_der(leaf.as_ref()) {
        Ok((_, cert)) => {
            let skid = cert
                .extensions()
                .iter()
                .find_map(|ext| match ext.parsed_extension() {
                    x509_parser::extensions::ParsedExtension::SubjectKeyIdentifier(k) => {
                        Some(colon_hex(k.0))
                    }
                    _ => None,
                })
                .unwrap_or_default();
            let akid = cert
                .extensions()
                .iter()
                .find_map(|ext| match ext.parsed_extension() {
                    x509_parser::extensions::ParsedExtension::AuthorityKeyIdentifier(k) => {
                        k.key_identifier.as_ref().map(|k| colon_hex(k.0))
                    }
                    _ => None,
                })
                .unwrap_or_default();
            format!(
                "SN={}, SKID={skid}, AKID={akid}",
                cert.raw_serial_as_string()
            )
        }
        Err(_) => "<unparseable certificate>".to_string(),
    }
}

fn colon_hex(bytes: &[u8]) -> String {
    let h = hex(bytes).to_uppercase();
    let mut out = String::with_capacity(h.len() * 3 / 2);
    for (i, c) in h.chars().enumerate() {
        if i > 0 && i % 2 == 0 {
            out.push(':');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_helpers() {
        assert_eq!(hex(&[0x00, 0xab, 0x0f]), "00ab0f");
        assert_eq!(colon_hex(&[0xde, 0xad, 0x01]), "DE:AD:01");
        assert_eq!(colon_hex(&[]), "");
    }

    #[test]
    fn bad_ca_bundles_are_config_errors() {
        for bad in [
            "",
            "not pem",
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        ] {
            assert!(X509Authenticator::new(bad).is_err(), "{bad:?}");
            assert!(client_cert_verifier(bad).is_err(), "{bad:?}");
        }
    }
}
