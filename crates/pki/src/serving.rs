//! TLS serving: the rustls server configuration of an HTTPS port from PEM, and
//! upstream's self-signed serving pair for a server started without one. The
//! apiserver, the kubelet, the scheduler and the controller manager all build their
//! serving TLS here; they differ only in how clients are verified and in ALPN.
//!
//! [`ServingCertificate`] is the replaceable serving pair (upstream's
//! `DynamicServingCertificateController`): a port configured with
//! [`server_config_with_resolver`] over it serves whatever pair was last installed,
//! so a renewed certificate is taken at the next handshake without a restart.
//! [`SniCertificates`] chooses among several such pairs by the server name a client
//! asks for (`--tls-sni-cert-key`).

use std::net::IpAddr;
use std::sync::Arc;

use rustls::server::danger::ClientCertVerifier;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::tls_options::TlsOptions;
use crate::{CertificateAuthority, Issued, PkiError, Result, Validity};

/// ALPN for a port that serves HTTP/2 and HTTP/1.1.
pub const ALPN_H2_HTTP1: &[&[u8]] = &[b"h2", b"http/1.1"];
/// ALPN for a port that must stay on HTTP/1.1 (upgrades: exec, attach, port-forward).
pub const ALPN_HTTP1: &[&[u8]] = &[b"http/1.1"];

/// The rustls configuration of an HTTPS port: the serving certificate (PEM, chain
/// allowed) and its key, the client verification (`None`: no client certificates
/// asked for), the ALPN protocols offered and the versions and suites allowed
/// (`--tls-min-version`, `--tls-cipher-suites`).
pub fn server_config(
    cert_pem: &str,
    key_pem: &str,
    client_verifier: Option<Arc<dyn ClientCertVerifier>>,
    alpn: &[&[u8]],
    tls: &TlsOptions,
) -> Result<Arc<rustls::ServerConfig>> {
    server_config_with_resolver(
        ServingCertificate::new(cert_pem, key_pem)?,
        client_verifier,
        alpn,
        tls,
    )
}

/// [`server_config`] with the certificate chosen by `resolver` at each handshake
/// (e.g. a [`ServingCertificate`]), for ports whose certificate changes while they
/// serve.
pub fn server_config_with_resolver(
    resolver: Arc<dyn ResolvesServerCert>,
    client_verifier: Option<Arc<dyn ClientCertVerifier>>,
    alpn: &[&[u8]],
    tls: &TlsOptions,
) -> Result<Arc<rustls::ServerConfig>> {
    let (provider, versions) = tls.provider_and_versions();
    let builder = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .map_err(|e| PkiError::InvalidOption(e.to_string()))?;
    let builder = match client_verifier {
        Some(v) => builder.with_client_cert_verifier(v),
        None => builder.with_no_client_auth(),
    };
    let mut cfg = builder.with_cert_resolver(resolver);
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(cfg))
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A serving certificate (PEM, chain allowed) and its key as rustls signs with them.
/// Fails unless both parse and the key is the certificate's (upstream's
/// `tls.X509KeyPair` check), so a half-replaced pair is never served.
pub fn certified_key(cert_pem: &str, key_pem: &str) -> Result<CertifiedKey> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| PkiError::Pem(format!("certificate: {e}")))?;
    if certs.is_empty() {
        return Err(PkiError::Pem("no certificate in the PEM".into()));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| PkiError::Pem(format!("private key: {e}")))?;
    let signing_key = provider()
        .key_provider
        .load_private_key(key)
        .map_err(|e| PkiError::Certificate(format!("private key: {e}")))?;
    let certified = CertifiedKey::new(certs, signing_key);
    match certified.keys_match() {
        // Unknown: the key cannot give its public half; rustls's own
        // `with_single_cert` accepts such a pair too.
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {
            Ok(certified)
        }
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            Err(PkiError::KeyMismatch)
        }
        Err(e) => Err(PkiError::Certificate(e.to_string())),
    }
}

/// The serving pair of a port whose certificate may be replaced while it serves; it
/// resolves every handshake to the pair installed last. Connections already made
/// keep the certificate they were made with.
pub struct ServingCertificate {
    current: parking_lot::RwLock<Installed>,
}

/// A pair as served, with the names its certificate is chosen by under SNI, read
/// once when the pair is installed rather than at each handshake.
#[derive(Clone)]
struct Installed {
    key: Arc<CertifiedKey>,
    names: Arc<[String]>,
}

impl Installed {
    fn load(cert_pem: &str, key_pem: &str) -> Result<Self> {
        let key = certified_key(cert_pem, key_pem)?;
        let names = certificate_names(&key).into();
        Ok(Installed {
            key: Arc::new(key),
            names,
        })
    }
}

impl std::fmt::Debug for ServingCertificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServingCertificate").finish_non_exhaustive()
    }
}

impl ServingCertificate {
    /// From the first pair; an error when it does not load (see [`certified_key`]).
    pub fn new(cert_pem: &str, key_pem: &str) -> Result<Arc<Self>> {
        Ok(Arc::new(ServingCertificate {
            current: parking_lot::RwLock::new(Installed::load(cert_pem, key_pem)?),
        }))
    }

    /// Serves `cert_pem`/`key_pem` from the next handshake on. When the pair does not
    /// load, the error is returned and the pair served so far stays.
    pub fn replace(&self, cert_pem: &str, key_pem: &str) -> Result<()> {
        let next = Installed::load(cert_pem, key_pem)?;
        *self.current.write() = next;
        Ok(())
    }

    /// The pair served now.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current.read().key.clone()
    }

    /// The pair served now and its certificate's names (see [`certificate_names`]).
    fn current_with_names(&self) -> (Arc<CertifiedKey>, Arc<[String]>) {
        let installed = self.current.read();
        (installed.key.clone(), installed.names.clone())
    }
}

impl ResolvesServerCert for ServingCertificate {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// One `--tls-sni-cert-key` value: a serving pair's files and the server names it is
/// chosen for (empty: the names in the certificate).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedCertKey {
    pub cert_file: std::path::PathBuf,
    pub key_file: std::path::PathBuf,
    pub names: Vec<String>,
}

impl std::str::FromStr for NamedCertKey {
    type Err = String;

    /// Upstream's syntax and errors: `cert,key` or `cert,key:name1,name2`.
    fn from_str(value: &str) -> std::result::Result<Self, String> {
        let (files, names) = match value.split_once(':') {
            Some((files, names)) => {
                let names = names.trim();
                if names.is_empty() {
                    return Err("empty names list is not allowed".into());
                }
                (
                    files,
                    names.split(',').map(|n| n.trim().to_string()).collect(),
                )
            }
            None => (value, Vec::new()),
        };
        match files.trim().split(',').collect::<Vec<_>>()[..] {
            [cert, key] => Ok(NamedCertKey {
                cert_file: cert.trim().into(),
                key_file: key.trim().into(),
                names,
            }),
            _ => Err("expected comma separated certificate and key file paths".into()),
        }
    }
}

/// The serving pairs of a port with `--tls-sni-cert-key` values: a handshake that
/// names a server (SNI) gets the first pair with that name, else the first with the
/// wildcard of its parent domain (`*.example.com` for `api.example.com`), else the
/// default pair. Names given with a pair count before names read from certificates;
/// a pair given names is chosen only for those. Each pair may be replaced while the
/// port serves (see [`ServingCertificate`]), its certificate's names with it.
///
/// A pair named by an IP address is for a client that sends no name and reaches the
/// server on that address; rustls's hello does not carry the address, so the server
/// chooses that pair before the handshake (ferrokube-apiserver's `Handshake`), and
/// here such a client gets the default pair.
#[derive(Debug)]
pub struct SniCertificates {
    default: Arc<ServingCertificate>,
    named: Vec<(Arc<ServingCertificate>, Vec<String>)>,
}

impl SniCertificates {
    /// `named`: each pair with the names given for it, in flag order.
    pub fn new(
        default: Arc<ServingCertificate>,
        named: Vec<(Arc<ServingCertificate>, Vec<String>)>,
    ) -> Arc<Self> {
        let named = named
            .into_iter()
            .map(|(pair, names)| (pair, names.iter().map(|n| n.to_ascii_lowercase()).collect()))
            .collect();
        Arc::new(SniCertificates { default, named })
    }

    /// The pair for a handshake naming `server_name`.
    pub fn choose(&self, server_name: Option<&str>) -> Arc<CertifiedKey> {
        let Some(name) = server_name.map(str::to_ascii_lowercase) else {
            return self.default.current();
        };
        // Go's: the first label replaced by `*` (a single label becomes `*`).
        let wildcard = match name.split_once('.') {
            Some((_, parent)) => format!("*.{parent}"),
            None => "*".to_string(),
        };
        for wanted in [&name, &wildcard] {
            let given = self
                .named
                .iter()
                .find(|(_, names)| names.contains(wanted))
                .map(|(pair, _)| pair.current());
            let read = || {
                self.named
                    .iter()
                    .filter(|(_, names)| names.is_empty())
                    .map(|(pair, _)| pair.current_with_names())
                    .find(|(_, names)| names.contains(wanted))
                    .map(|(key, _)| key)
            };
            if let Some(key) = given.or_else(read) {
                return key;
            }
        }
        self.default.current()
    }
}

impl ResolvesServerCert for SniCertificates {
    fn resolve(&self, client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.choose(client_hello.server_name()))
    }
}

/// Upstream's `getCertificateNames`: the subject's common name when it is a DNS name
/// (a wildcard allowed) and not an IP address, then the DNS subject alternative names,
/// lower-cased. IP addresses are left out: SNI never carries one.
fn certificate_names(key: &CertifiedKey) -> Vec<String> {
    use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};
    let Some(Ok((_, cert))) = key
        .end_entity_cert()
        .ok()
        .map(|der| X509Certificate::from_der(der.as_ref()))
    else {
        return Vec::new();
    };
    let mut names = Vec::new();
    if let Some(cn) = cert
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
    {
        let is_dns_subdomain = cn == "*"
            || ferrokube_apimachinery::validation::is_dns1123_subdomain(
                cn.strip_prefix("*.").unwrap_or(cn),
            )
            .is_empty();
        if cn.parse::<IpAddr>().is_err() && is_dns_subdomain {
            names.push(cn.to_string());
        }
    }
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            if let GeneralName::DNSName(dns) = name {
                names.push(dns.to_ascii_lowercase());
            }
        }
    }
    names
}

/// Where a [`CurrentClientVerifier`] finds the client-certificate checks in force at
/// a handshake (bundles a server replaces while it serves).
pub trait ClientVerifierSource: Send + Sync + std::fmt::Debug {
    /// The checks in force now; a chain is accepted when one of them accepts it.
    /// Empty: no client CA, so no client certificate is asked for.
    fn current(&self) -> Vec<Arc<dyn ClientCertVerifier>>;
}

/// The TLS layer's client-certificate check over CA bundles that may be replaced
/// between handshakes: each handshake uses what `source` has then. Clients without a
/// certificate are admitted (authentication decides what they may do).
///
/// Its certificate requests name no CAs: the names would have to outlive a bundle's
/// replacement. Clients then offer their certificate whatever its issuer, which is
/// what Go's, curl's and rustls's clients do with one configured certificate.
#[derive(Debug)]
pub struct CurrentClientVerifier<S> {
    source: S,
    algorithms: rustls::crypto::WebPkiSupportedAlgorithms,
}

impl<S: ClientVerifierSource> CurrentClientVerifier<S> {
    pub fn new(source: S) -> Arc<Self> {
        Arc::new(CurrentClientVerifier {
            source,
            algorithms: provider().signature_verification_algorithms,
        })
    }
}

impl<S: ClientVerifierSource> ClientCertVerifier for CurrentClientVerifier<S> {
    fn offer_client_auth(&self) -> bool {
        !self.source.current().is_empty()
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: rustls_pki_types::UnixTime,
    ) -> std::result::Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
        let mut failure = None;
        for verifier in self.source.current() {
            match verifier.verify_client_cert(end_entity, intermediates, now) {
                Ok(verified) => return Ok(verified),
                // Another bundle's "unknown issuer" says less than, say, "expired"
                // from the bundle that issued it.
                Err(rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer))
                    if failure.is_some() => {}
                Err(e) => failure = Some(e),
            }
        }
        Err(failure.unwrap_or_else(|| {
            rustls::Error::General("no client CA: client certificates are not accepted".into())
        }))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algorithms.supported_schemes()
    }
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
        let cfg = server_config(
            &pair.cert_pem,
            &pair.key_pem,
            None,
            ALPN_HTTP1,
            &TlsOptions::default(),
        )
        .unwrap();
        assert_eq!(cfg.alpn_protocols, [b"http/1.1".to_vec()]);
        let cfg = server_config(
            &pair.cert_pem,
            &pair.key_pem,
            None,
            ALPN_H2_HTTP1,
            &TlsOptions::default(),
        )
        .unwrap();
        assert_eq!(cfg.alpn_protocols.len(), 2);
        assert!(matches!(
            server_config("", &pair.key_pem, None, ALPN_HTTP1, &TlsOptions::default()),
            Err(PkiError::Pem(_))
        ));
        assert!(
            server_config(
                &pair.cert_pem,
                "junk",
                None,
                ALPN_HTTP1,
                &TlsOptions::default()
            )
            .is_err()
        );
    }

    fn serving_pair(ca_name: &str) -> Issued {
        CertificateAuthority::generate(ca_name)
            .unwrap()
            .issue_serving_cert(
                "kube-apiserver",
                &["localhost".into()],
                &[IpAddr::from([127, 0, 0, 1])],
                Validity::leaf_default(),
            )
            .unwrap()
    }

    fn served_leaf(serving: &ServingCertificate) -> Vec<u8> {
        serving
            .current()
            .end_entity_cert()
            .unwrap()
            .as_ref()
            .to_vec()
    }

    fn leaf_der(pair: &Issued) -> Vec<u8> {
        crate::pem::parse_cert_pem(&pair.cert_pem).unwrap().to_vec()
    }

    #[test]
    fn a_replaced_pair_is_served_and_a_bad_one_keeps_the_old() {
        let first = serving_pair("first-ca");
        let second = serving_pair("second-ca");
        let serving = ServingCertificate::new(&first.cert_pem, &first.key_pem).unwrap();
        assert_eq!(served_leaf(&serving), leaf_der(&first));

        for (what, cert, key) in [
            ("garbage certificate", "garbage", first.key_pem.as_str()),
            ("garbage key", first.cert_pem.as_str(), "garbage"),
            ("empty certificate", "", first.key_pem.as_str()),
            // A certificate with another pair's key: a half-replaced pair.
            (
                "mismatched key",
                second.cert_pem.as_str(),
                first.key_pem.as_str(),
            ),
        ] {
            assert!(serving.replace(cert, key).is_err(), "{what}");
            assert_eq!(served_leaf(&serving), leaf_der(&first), "{what}");
        }
        assert!(matches!(
            serving.replace(&second.cert_pem, &first.key_pem),
            Err(PkiError::KeyMismatch)
        ));

        serving.replace(&second.cert_pem, &second.key_pem).unwrap();
        assert_eq!(served_leaf(&serving), leaf_der(&second));
        assert!(ServingCertificate::new("garbage", &second.key_pem).is_err());
    }

    fn named_pair(ca_name: &str, common_name: &str, dns: &[&str]) -> Issued {
        CertificateAuthority::generate(ca_name)
            .unwrap()
            .issue_serving_cert(
                common_name,
                &dns.iter().map(|d| d.to_string()).collect::<Vec<_>>(),
                &[IpAddr::from([10, 0, 0, 1])],
                Validity::leaf_default(),
            )
            .unwrap()
    }

    #[test]
    fn sni_cert_key_values_parse_as_upstream() {
        let parsed: NamedCertKey = "foo.crt, foo.key : *.foo.com, Foo.com".parse().unwrap();
        assert_eq!(
            parsed,
            NamedCertKey {
                cert_file: "foo.crt".into(),
                key_file: "foo.key".into(),
                names: vec!["*.foo.com".into(), "Foo.com".into()],
            }
        );
        let bare: NamedCertKey = "example.crt,example.key".parse().unwrap();
        assert!(bare.names.is_empty());
        assert_eq!(
            "a.crt,a.key:".parse::<NamedCertKey>().unwrap_err(),
            "empty names list is not allowed"
        );
        assert_eq!(
            "a.crt".parse::<NamedCertKey>().unwrap_err(),
            "expected comma separated certificate and key file paths"
        );
    }

    #[test]
    fn a_server_name_chooses_its_pair_exact_before_wildcard_given_before_read() {
        let leaf = |key: Arc<CertifiedKey>| key.end_entity_cert().unwrap().as_ref().to_vec();
        let serving =
            |pair: &Issued| ServingCertificate::new(&pair.cert_pem, &pair.key_pem).unwrap();
        let default = serving_pair("default-ca");
        // Names read from the certificate: its CN (a DNS name) and DNS SANs.
        let read = named_pair(
            "read-ca",
            "api.example.com",
            &["Other.Example.com", "*.apps.example.com"],
        );
        // Names given on the flag: only those count for this pair.
        let given = named_pair("given-ca", "ignored.example.com", &["ignored.example.com"]);
        let wildcard = named_pair("wild-ca", "10.0.0.9", &["*.example.com"]);
        let sni = SniCertificates::new(
            serving(&default),
            vec![
                (serving(&read), vec![]),
                (
                    serving(&given),
                    vec!["API.example.com".into(), "given.example.com".into()],
                ),
                (serving(&wildcard), vec![]),
            ],
        );
        let chosen = |name: Option<&str>| leaf(sni.choose(name));
        assert_eq!(chosen(None), leaf_der(&default));
        assert_eq!(chosen(Some("elsewhere.org")), leaf_der(&default));
        // A name both given and read: the given one wins.
        assert_eq!(chosen(Some("api.example.com")), leaf_der(&given));
        assert_eq!(chosen(Some("GIVEN.example.com")), leaf_der(&given));
        assert_eq!(chosen(Some("other.example.com")), leaf_der(&read));
        assert_eq!(chosen(Some("shop.apps.example.com")), leaf_der(&read));
        // A given pair is not chosen for the names in its certificate.
        assert_eq!(chosen(Some("ignored.example.com")), leaf_der(&wildcard));
        assert_eq!(chosen(Some("db.example.com")), leaf_der(&wildcard));
        // An IP common name is not a name; nor is a name two labels down.
        assert_eq!(chosen(Some("a.b.example.com")), leaf_der(&default));

        // A replaced pair is chosen by its new certificate's names.
        let renamed = named_pair("read-ca-2", "renamed.example.org", &[]);
        sni.named[0]
            .0
            .replace(&renamed.cert_pem, &renamed.key_pem)
            .unwrap();
        assert_eq!(chosen(Some("renamed.example.org")), leaf_der(&renamed));
        assert_eq!(chosen(Some("other.example.com")), leaf_der(&wildcard));
    }

    #[test]
    fn a_resolver_config_offers_the_alpn_asked_for() {
        let pair = serving_pair("ca");
        let serving = ServingCertificate::new(&pair.cert_pem, &pair.key_pem).unwrap();
        let cfg = server_config_with_resolver(serving, None, ALPN_H2_HTTP1, &TlsOptions::default())
            .unwrap();
        assert_eq!(cfg.alpn_protocols, [b"h2".to_vec(), b"http/1.1".to_vec()]);
    }

    /// Drives a handshake between `server` and a client limited to `versions` and
    /// `suites`, in memory; what it negotiated, or the error that ended it.
    fn handshake(
        server: Arc<rustls::ServerConfig>,
        versions: &[&'static rustls::SupportedProtocolVersion],
        suites: &[rustls::SupportedCipherSuite],
    ) -> std::result::Result<(rustls::ProtocolVersion, rustls::CipherSuite), rustls::Error> {
        let mut provider = rustls::crypto::ring::default_provider();
        provider.cipher_suites = suites.to_vec();
        let client = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
            .with_protocol_versions(versions)
            .unwrap()
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(crate::insecure::AcceptAnyServerCert(
                Arc::new(rustls::crypto::ring::default_provider()),
            )))
            .with_no_client_auth();
        let mut c =
            rustls::ClientConnection::new(Arc::new(client), "localhost".try_into().unwrap())
                .unwrap();
        let mut s = rustls::ServerConnection::new(server).unwrap();
        for _ in 0..10 {
            let mut buf = Vec::new();
            while c.wants_write() {
                c.write_tls(&mut buf).unwrap();
            }
            s.read_tls(&mut buf.as_slice()).unwrap();
            s.process_new_packets()?;
            let mut buf = Vec::new();
            while s.wants_write() {
                s.write_tls(&mut buf).unwrap();
            }
            c.read_tls(&mut buf.as_slice()).unwrap();
            c.process_new_packets()?;
            if !c.is_handshaking() && !s.is_handshaking() {
                return Ok((
                    c.protocol_version().unwrap(),
                    c.negotiated_cipher_suite().unwrap().suite(),
                ));
            }
        }
        panic!("the handshake did not finish");
    }

    #[test]
    fn a_port_negotiates_only_the_versions_and_suites_allowed() {
        use rustls::crypto::ring::cipher_suite as cs;
        use rustls::version::{TLS12, TLS13};
        let pair = serving_pair("ca");
        let config = |min: &str, suites: &[&str]| {
            let suites: Vec<String> = suites.iter().map(|s| s.to_string()).collect();
            let (tls, _) = TlsOptions::parse(min, &suites).unwrap();
            server_config(&pair.cert_pem, &pair.key_pem, None, ALPN_HTTP1, &tls).unwrap()
        };
        let all = rustls::crypto::ring::DEFAULT_CIPHER_SUITES;
        let gcm128 = cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256;
        let gcm256 = cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384;

        // Defaults: TLS 1.3 when the client has it, TLS 1.2 otherwise.
        assert_eq!(
            handshake(config("", &[]), &[&TLS13, &TLS12], all)
                .unwrap()
                .0,
            rustls::ProtocolVersion::TLSv1_3
        );
        assert_eq!(
            handshake(config("", &[]), &[&TLS12], all).unwrap().0,
            rustls::ProtocolVersion::TLSv1_2
        );

        // VersionTLS13: a TLS 1.2 client is refused.
        assert!(handshake(config("VersionTLS13", &[]), &[&TLS12], all).is_err());

        // A suite list: a TLS 1.2 client gets a listed suite, or nothing.
        let listed = config("", &["TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"]);
        assert_eq!(
            handshake(listed.clone(), &[&TLS12], &[gcm128, gcm256])
                .unwrap()
                .1,
            rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
        );
        assert!(handshake(listed.clone(), &[&TLS12], &[gcm128]).is_err());
        // TLS 1.3's suites stay as they are.
        assert!(handshake(listed, &[&TLS13], all).is_ok());
    }
}
