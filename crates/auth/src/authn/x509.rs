//! Client certificates (upstream `request/x509`): verify the presented chain against
//! the client CA with the clientAuth EKU, then map the leaf's subject: CN → user
//! name, each O → a group (upstream's `CommonNameUserConversion`).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, RwLock};

use ferrokube_component_base::metrics::HistogramVec;

use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, UnixTime};
use x509_parser::prelude::{FromDer as _, X509Certificate};

use super::{AuthError, AuthRequest, Authenticator};
use crate::user::{CREDENTIAL_ID_KEY, UserInfo};

/// `apiserver_client_certificate_expiration_seconds` (upstream's x509 authenticator):
/// the remaining lifetime of the leaf certificate of every request that presents one,
/// before it is verified. Process-wide, as upstream's; the apiserver writes it on
/// `/metrics` with [`write_client_certificate_metrics`].
static CLIENT_CERTIFICATE_EXPIRATION: LazyLock<HistogramVec<0>> = LazyLock::new(|| {
    HistogramVec::histogram(
        "apiserver_client_certificate_expiration_seconds",
        "[ALPHA] Distribution of the remaining lifetime on the certificate used to authenticate a request.",
        [],
        &[
            0.0, 1800.0,     // 30 minutes
            3600.0,     // 1 hour
            7200.0,     // 2 hours
            21600.0,    // 6 hours
            43200.0,    // 12 hours
            86400.0,    // 1 day
            172800.0,   // 2 days
            345600.0,   // 4 days
            604800.0,   // 1 week
            2592000.0,  // 1 month
            7776000.0,  // 3 months
            15552000.0, // 6 months
            31104000.0, // 1 year
        ],
    )
});

/// Writes the client certificate metrics (for the apiserver's `/metrics`).
pub fn write_client_certificate_metrics(out: &mut String) {
    CLIENT_CERTIFICATE_EXPIRATION.render(out);
}

fn observe_remaining_lifetime(leaf_not_after: Option<i64>, now: UnixTime) {
    if let Some(not_after) = leaf_not_after {
        let now = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
        CLIENT_CERTIFICATE_EXPIRATION.observe([], not_after.saturating_sub(now) as f64);
    }
}

/// The leaf's notAfter, in seconds since the epoch (`None`: it does not parse).
fn not_after(leaf: &CertificateDer<'_>) -> Option<i64> {
    let (_, cert) = X509Certificate::from_der(leaf.as_ref()).ok()?;
    Some(cert.validity().not_after.timestamp())
}

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

/// A client CA bundle that may be replaced while the server runs (upstream's
/// `DynamicFileCAContent`): the authenticators and the TLS verifier built over it
/// check every new chain against the bundle installed last.
pub struct ClientCa {
    current: RwLock<Arc<CaBundle>>,
}

/// One installed bundle. `generation` grows with every replacement, so what was
/// remembered about chains verified against an earlier bundle can be told apart.
pub(super) struct CaBundle {
    pem: String,
    pub(super) verifier: Arc<dyn ClientCertVerifier>,
    pub(super) generation: u64,
}

impl std::fmt::Debug for ClientCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCa")
            .field("generation", &self.current().generation)
            .finish_non_exhaustive()
    }
}

impl ClientCa {
    /// From a PEM bundle of one or more CA certificates.
    pub fn new(pem: &str) -> Result<Arc<Self>, AuthError> {
        Ok(Arc::new(ClientCa {
            current: RwLock::new(Arc::new(CaBundle {
                pem: pem.to_string(),
                verifier: client_cert_verifier(pem)?,
                generation: 0,
            })),
        }))
    }

    /// Installs `pem` for the chains verified from now on: `Ok(true)` when it differs
    /// from the bundle installed, `Ok(false)` when it is the same. A bundle that does
    /// not load is an error and the installed one stays.
    pub fn replace(&self, pem: &str) -> Result<bool, AuthError> {
        if self.current().pem == pem {
            return Ok(false);
        }
        let verifier = client_cert_verifier(pem)?;
        let mut current = self
            .current
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let generation = current.generation + 1;
        *current = Arc::new(CaBundle {
            pem: pem.to_string(),
            verifier,
            generation,
        });
        Ok(true)
    }

    /// The bundle installed, as PEM.
    pub fn pem(&self) -> String {
        self.current().pem.clone()
    }

    pub(super) fn current(&self) -> Arc<CaBundle> {
        self.current
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

/// The TLS layer's client-certificate check over bundles that may be replaced: a
/// presented chain is accepted when it verifies against the bundle installed now in
/// any of `cas` (the union of their pools), and clients without a certificate are
/// admitted, as [`client_cert_verifier`].
///
/// Its certificate requests name no CAs: the names would have to outlive a bundle's
/// replacement. Clients then offer their certificate whatever its issuer, which is
/// what Go's, rustls's and OpenSSL's clients do with one configured certificate.
pub fn dynamic_client_cert_verifier(cas: Vec<Arc<ClientCa>>) -> Arc<dyn ClientCertVerifier> {
    ferrokube_pki::serving::CurrentClientVerifier::new(CurrentBundles(cas))
}

#[derive(Debug)]
struct CurrentBundles(Vec<Arc<ClientCa>>);

impl ferrokube_pki::serving::ClientVerifierSource for CurrentBundles {
    fn current(&self) -> Vec<Arc<dyn ClientCertVerifier>> {
        self.0
            .iter()
            .map(|ca| ca.current().verifier.clone())
            .collect()
    }
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
/// apiserver's CPU under pod creates) but still fail outside that window. Over a
/// [`ClientCa`] that is replaced, what was remembered is forgotten, so a chain of a
/// CA no longer in the bundle is not admitted again.
pub struct X509Authenticator {
    ca: Arc<ClientCa>,
    /// The user of each remembered chain, and its leaf's notAfter.
    verified: VerifiedChains<(Option<UserInfo>, Option<i64>)>,
    /// Whether the subject's UID attribute is read (AllowParsingUserUIDFromCertAuth).
    parse_uid: bool,
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
///
/// Everything remembered belongs to one generation of the bundle; asking with a
/// later generation forgets it all, and a chain verified against an earlier one
/// (a replacement raced the verification) is not remembered.
pub(super) struct VerifiedChains<T> {
    remembered: Mutex<Remembered<T>>,
}

struct Remembered<T> {
    generation: u64,
    chains: HashMap<[u8; 32], VerifiedChain<T>>,
}

impl<T> Remembered<T> {
    /// Whether what is remembered was verified against `generation`, forgetting it
    /// all when `generation` is newer.
    fn is_generation(&mut self, generation: u64) -> bool {
        if generation > self.generation {
            self.chains.clear();
            self.generation = generation;
        }
        generation == self.generation
    }
}

impl<T: Clone> VerifiedChains<T> {
    pub(super) fn new() -> Self {
        VerifiedChains {
            remembered: Mutex::new(Remembered {
                generation: 0,
                chains: HashMap::new(),
            }),
        }
    }

    /// What was remembered for the chain of `digest` under the bundle's `generation`,
    /// if `now_secs` is inside its window.
    pub(super) fn get(&self, digest: &[u8; 32], now_secs: u64, generation: u64) -> Option<T> {
        let mut remembered = self
            .remembered
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if !remembered.is_generation(generation) {
            return None;
        }
        remembered
            .chains
            .get(digest)
            .filter(|v| (v.valid_from..=v.valid_until).contains(&now_secs))
            .map(|v| v.value.clone())
    }

    /// Remembers `value` for a chain that just verified against the bundle's
    /// `generation` (nothing when a certificate of it does not parse).
    pub(super) fn insert(
        &self,
        chain: &[CertificateDer<'_>],
        digest: [u8; 32],
        value: T,
        generation: u64,
    ) {
        let Some((valid_from, valid_until)) = validity_window(chain) else {
            return;
        };
        let mut remembered = self
            .remembered
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if !remembered.is_generation(generation) {
            return;
        }
        let chains = &mut remembered.chains;
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
        Ok(Self::with_ca(ClientCa::new(client_ca_pem)?))
    }

    /// Over a bundle that may be replaced while this authenticator is in use.
    pub fn with_ca(ca: Arc<ClientCa>) -> Self {
        X509Authenticator {
            ca,
            verified: VerifiedChains::new(),
            parse_uid: true,
        }
    }

    /// Whether the subject's `1.3.6.1.4.1.57683.2` attribute is the user's UID
    /// (upstream's AllowParsingUserUIDFromCertAuth gate, on by default in 1.33).
    pub fn parsing_uid(mut self, parse_uid: bool) -> Self {
        self.parse_uid = parse_uid;
        self
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
        let ca = self.ca.current();
        let digest = chain_digest(chain);
        if let Some((user, leaf_not_after)) =
            self.verified.get(&digest, now.as_secs(), ca.generation)
        {
            observe_remaining_lifetime(leaf_not_after, now);
            return Ok(user);
        }
        let leaf_not_after = not_after(leaf);
        observe_remaining_lifetime(leaf_not_after, now);
        // Outside the remembered window (or never seen): the full verification, which
        // also gives the precise error.
        verify_chain(ca.verifier.as_ref(), chain, now)?;
        let user = user_from_leaf(leaf, self.parse_uid)?;
        self.verified
            .insert(chain, digest, (user.clone(), leaf_not_after), ca.generation);
        Ok(user)
    }
}

impl Authenticator for X509Authenticator {
    fn authenticate(&self, request: &AuthRequest<'_>) -> Result<Option<UserInfo>, AuthError> {
        self.authenticate_at(request, UnixTime::now())
    }
}

fn user_from_leaf(
    leaf: &CertificateDer<'_>,
    parse_uid: bool,
) -> Result<Option<UserInfo>, AuthError> {
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
    let uid = if parse_uid {
        uid_of(subject)?
    } else {
        String::new()
    };
    let digest = ring::digest::digest(&ring::digest::SHA256, leaf.as_ref());
    let mut user = UserInfo {
        name: common_name.to_string(),
        uid,
        groups,
        extra: Default::default(),
    };
    user.extra.insert(
        CREDENTIAL_ID_KEY.to_string(),
        vec![format!("X509SHA256={}", hex(digest.as_ref()))],
    );
    Ok(Some(user))
}

/// The subject attribute that names the user's UID (upstream's `asn1util.X509UID`).
const UID_OID: &[u64] = &[1, 3, 6, 1, 4, 1, 57683, 2];

/// The user's UID from the subject, as upstream's `parseUIDFromCert` (the
/// AllowParsingUserUIDFromCertAuth gate, on in 1.33): none is no UID; more than one, an
/// empty one or one that is not a string fail the authentication.
fn uid_of(subject: &x509_parser::x509::X509Name<'_>) -> Result<String, AuthError> {
    let oid = x509_parser::der_parser::Oid::from(UID_OID)
        .map_err(|e| AuthError::X509Subject(format!("UID OID: {e:?}")))?;
    let uids = subject
        .iter_by_oid(&oid)
        .map(|attr| {
            attr.as_str()
                .map(str::to_string)
                .map_err(|_| AuthError::X509Subject("unable to parse UID into a string".into()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    match uids.as_slice() {
        [] => Ok(String::new()),
        [uid] if uid.is_empty() => Err(AuthError::X509Subject(
            "UID cannot be an empty string".into(),
        )),
        [uid] => Ok(uid.clone()),
        many => Err(AuthError::X509Subject(format!(
            "expected 1 UID, but found multiple: [{}]",
            many.join(" ")
        ))),
    }
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

    use ferrokube_pki::{CertificateAuthority, Validity};

    fn client_cert(ca: &CertificateAuthority, user: &str) -> CertificateDer<'static> {
        let issued = ca
            .issue_client_cert(user, &[], Validity::leaf_default())
            .unwrap();
        CertificateDer::from_pem_slice(issued.cert_pem.as_bytes()).unwrap()
    }

    fn user_of(a: &X509Authenticator, cert: &CertificateDer<'static>) -> Option<String> {
        let headers = http::HeaderMap::new();
        a.authenticate(&AuthRequest {
            headers: &headers,
            peer_certificates: std::slice::from_ref(cert),
            path: "",
        })
        .ok()
        .flatten()
        .map(|u| u.name)
    }

    /// A self-signed certificate with `attributes` in its subject after its CN.
    fn cert_with_subject(attributes: &[(rcgen::DnType, &str)]) -> CertificateDer<'static> {
        let mut params = rcgen::CertificateParams::default();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "alice");
        for (ty, value) in attributes {
            params.distinguished_name.push(ty.clone(), *value);
        }
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().clone()
    }

    #[test]
    fn the_subject_names_the_user_its_groups_and_uid() {
        let uid = || rcgen::DnType::CustomDnType(UID_OID.to_vec());
        let org = rcgen::DnType::OrganizationName;
        let user = user_from_leaf(
            &cert_with_subject(&[(org.clone(), "devs"), (uid(), "u-1")]),
            true,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (user.name.as_str(), user.uid.as_str(), user.groups),
            ("alice", "u-1", vec!["devs".to_string()])
        );
        assert!(user.extra[CREDENTIAL_ID_KEY][0].starts_with("X509SHA256="));
        let plain = user_from_leaf(&cert_with_subject(&[]), true)
            .unwrap()
            .unwrap();
        assert_eq!(plain.uid, "");
        // As upstream: an empty UID or several fail the authentication.
        // With AllowParsingUserUIDFromCertAuth off the attribute is not read.
        let unread = user_from_leaf(&cert_with_subject(&[(uid(), "")]), false).unwrap();
        assert_eq!(unread.unwrap().uid, "");
        let err = user_from_leaf(&cert_with_subject(&[(uid(), "")]), true).unwrap_err();
        assert_eq!(
            err.to_string(),
            "client certificate subject: UID cannot be an empty string"
        );
        // rcgen keeps one value per attribute type: a name with two UIDs by hand, each
        // RDN `SET { SEQUENCE { OID, UTF8String } }`.
        let oid = [0x2b, 0x06, 0x01, 0x04, 0x01, 0x83, 0xc2, 0x53, 0x02];
        let rdn = |value: &str| {
            let mut pair = vec![0x06, oid.len() as u8];
            pair.extend(oid);
            pair.extend([0x0c, value.len() as u8]);
            pair.extend(value.bytes());
            let mut set = vec![0x31, pair.len() as u8 + 2, 0x30, pair.len() as u8];
            set.extend(pair);
            set
        };
        let rdns: Vec<u8> = [rdn("a"), rdn("b")].concat();
        let mut name = vec![0x30, rdns.len() as u8];
        name.extend(rdns);
        let (_, name) = x509_parser::x509::X509Name::from_der(&name).unwrap();
        assert_eq!(
            uid_of(&name).unwrap_err().to_string(),
            "client certificate subject: expected 1 UID, but found multiple: [a b]"
        );
    }

    #[test]
    fn a_replaced_bundle_forgets_the_chains_of_the_old_one() {
        let old = CertificateAuthority::generate("old-ca").unwrap();
        let new = CertificateAuthority::generate("new-ca").unwrap();
        let ca = ClientCa::new(old.cert_pem()).unwrap();
        let a = X509Authenticator::with_ca(ca.clone());
        let alice = client_cert(&old, "alice");
        let bob = client_cert(&new, "bob");
        // alice's chain is now remembered.
        assert_eq!(user_of(&a, &alice).as_deref(), Some("alice"));
        assert_eq!(user_of(&a, &alice).as_deref(), Some("alice"));
        assert_eq!(user_of(&a, &bob), None);

        assert!(!ca.replace(old.cert_pem()).unwrap(), "the same bundle");
        assert!(ca.replace(new.cert_pem()).unwrap());
        assert_eq!(ca.pem(), new.cert_pem());
        assert_eq!(user_of(&a, &alice), None);
        assert_eq!(user_of(&a, &bob).as_deref(), Some("bob"));

        // A bundle that does not load leaves the installed one in use.
        assert!(ca.replace("garbage").is_err());
        assert_eq!(ca.pem(), new.cert_pem());
        assert_eq!(user_of(&a, &bob).as_deref(), Some("bob"));
        assert_eq!(user_of(&a, &alice), None);
    }

    #[test]
    fn the_dynamic_verifier_accepts_any_current_bundle() {
        let client = CertificateAuthority::generate("client-ca").unwrap();
        let proxy = CertificateAuthority::generate("proxy-ca").unwrap();
        let replacement = CertificateAuthority::generate("replacement-ca").unwrap();
        let client_ca = ClientCa::new(client.cert_pem()).unwrap();
        let proxy_ca = ClientCa::new(proxy.cert_pem()).unwrap();
        let verifier = dynamic_client_cert_verifier(vec![client_ca.clone(), proxy_ca]);
        assert!(verifier.offer_client_auth() && !verifier.client_auth_mandatory());
        let verifies = |cert: &CertificateDer<'static>| {
            verifier
                .verify_client_cert(cert, &[], UnixTime::now())
                .is_ok()
        };
        let (alice, proxied, carol) = (
            client_cert(&client, "alice"),
            client_cert(&proxy, "front-proxy-client"),
            client_cert(&replacement, "carol"),
        );
        assert!(verifies(&alice) && verifies(&proxied) && !verifies(&carol));
        client_ca.replace(replacement.cert_pem()).unwrap();
        assert!(!verifies(&alice) && verifies(&proxied) && verifies(&carol));
    }
}
