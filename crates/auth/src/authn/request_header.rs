//! Front-proxy (request-header) authentication, upstream's
//! `request/headerrequest` wrapped in `request/x509`'s `Verifier`: a request whose TLS
//! client certificate chains to `--requestheader-client-ca-file` (clientAuth EKU, at
//! the current time) and, when `--requestheader-allowed-names` is non-empty, whose
//! leaf CN is one of those names, is the user its headers name:
//!
//! * name: the first non-empty of the `--requestheader-username-headers` (the first
//!   value of each header, as Go's `Header.Get`);
//! * uid: the same over `--requestheader-uid-headers`;
//! * groups: every non-empty value of every `--requestheader-group-headers`;
//! * extra: for each `--requestheader-extra-headers-prefix`, every header starting with
//!   it (case-insensitively) gives key = the rest of its name, lower-cased and then
//!   `%`-unescaped (`url.PathUnescape`; kept as it is when malformed), with all of its
//!   values.
//!
//! Without a username header this authenticator has no opinion. The order of the
//! checks differs from upstream (which verifies the certificate first) only in the
//! error it returns for requests without a username header; the union's outcome is
//! the same (the x509 authenticator judges such a certificate anyway), and requests
//! not coming from a front proxy cost no chain verification here.
//!
//! The certificate is verified here, not assumed verified by the TLS layer (which
//! accepts certificates of the client CA and of the request-header CA alike); a chain
//! that verified and passed the allowed-names check is remembered as in
//! [`super::X509Authenticator`].

use std::sync::Arc;

use http::HeaderMap;
use rustls_pki_types::UnixTime;
use x509_parser::prelude::{FromDer as _, X509Certificate};

use super::x509::{ClientCa, VerifiedChains, chain_digest, verify_chain};
use super::{AuthError, AuthRequest, Authenticator};
use crate::user::UserInfo;

pub use ferrokube_apimachinery::request_header::RequestHeaderConfig;

/// The user `config` finds in `headers`, or `None` without a username header.
fn user_from_headers(config: &RequestHeaderConfig, headers: &HeaderMap) -> Option<UserInfo> {
    config.user_from_headers(headers).map(|u| UserInfo {
        name: u.name,
        uid: u.uid,
        groups: u.groups,
        extra: u.extra,
    })
}

/// Authenticates requests from a front proxy (the aggregator of another apiserver, an
/// authenticating proxy) by the user they name in headers; see the module docs.
pub struct RequestHeaderAuthenticator {
    ca: Arc<ClientCa>,
    config: RequestHeaderConfig,
    /// Chains that verified and whose CN is allowed (forgotten when `ca` is
    /// replaced).
    verified: VerifiedChains<()>,
}

impl std::fmt::Debug for RequestHeaderAuthenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestHeaderAuthenticator")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl RequestHeaderAuthenticator {
    /// From the PEM bundle of `--requestheader-client-ca-file` and the header settings
    /// (header names trimmed, as upstream's `trimHeaders`).
    pub fn new(client_ca_pem: &str, config: RequestHeaderConfig) -> Result<Self, AuthError> {
        config.validate().map_err(AuthError::Config)?;
        Self::with_ca(ClientCa::new(client_ca_pem)?, config)
    }

    /// [`RequestHeaderAuthenticator::new`] over a request-header CA bundle that may be
    /// replaced while this authenticator is in use.
    pub fn with_ca(ca: Arc<ClientCa>, config: RequestHeaderConfig) -> Result<Self, AuthError> {
        config.validate().map_err(AuthError::Config)?;
        let trim = |v: &[String]| v.iter().map(|s| s.trim().to_string()).collect();
        let config = RequestHeaderConfig {
            username_headers: trim(&config.username_headers),
            uid_headers: trim(&config.uid_headers),
            group_headers: trim(&config.group_headers),
            extra_header_prefixes: trim(&config.extra_header_prefixes),
            allowed_names: config.allowed_names,
        };
        Ok(RequestHeaderAuthenticator {
            ca,
            config,
            verified: VerifiedChains::new(),
        })
    }

    pub fn config(&self) -> &RequestHeaderConfig {
        &self.config
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
        let Some(user) = user_from_headers(&self.config, request.headers) else {
            return Ok(None);
        };
        let ca = self.ca.current();
        let digest = chain_digest(chain);
        if self
            .verified
            .get(&digest, now.as_secs(), ca.generation)
            .is_none()
        {
            verify_chain(ca.verifier.as_ref(), chain, now)?;
            self.verify_subject(leaf)?;
            self.verified.insert(chain, digest, (), ca.generation);
        }
        Ok(Some(user))
    }

    /// Upstream's `Verifier.verifySubject`: with allowed names, the leaf's CN must be
    /// one of them.
    fn verify_subject(&self, leaf: &rustls_pki_types::CertificateDer<'_>) -> Result<(), AuthError> {
        if self.config.allowed_names.is_empty() {
            return Ok(());
        }
        let (_, cert) = X509Certificate::from_der(leaf.as_ref())
            .map_err(|e| AuthError::X509Subject(e.to_string()))?;
        let common_name = cert
            .subject()
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
            .unwrap_or_default();
        if self.config.allowed_names.iter().any(|n| n == common_name) {
            Ok(())
        } else {
            Err(AuthError::ProxyNotAllowed(common_name.to_string()))
        }
    }
}

impl Authenticator for RequestHeaderAuthenticator {
    fn authenticate(&self, request: &AuthRequest<'_>) -> Result<Option<UserInfo>, AuthError> {
        self.authenticate_at(request, UnixTime::now())
    }

    /// Upstream clears them only after the proxy's own certificate verified; clearing
    /// them after any authentication also keeps a plain client's `X-Remote-User` from
    /// reaching a proxied pod as if this server had vouched for it.
    fn clear_credentials(&self, headers: &mut http::HeaderMap) {
        self.config.clear_headers(headers);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    use ferrokube_pki::{CertificateAuthority, Validity};
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject as _;

    use crate::authn::{AnonymousAuthenticator, UnionAuthenticator, X509Authenticator};
    use crate::user::ALL_AUTHENTICATED;

    fn der(pem: &str) -> CertificateDer<'static> {
        CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
    }

    fn kubeadm() -> RequestHeaderConfig {
        RequestHeaderConfig {
            username_headers: vec!["X-Remote-User".into()],
            uid_headers: vec!["X-Remote-Uid".into()],
            group_headers: vec!["X-Remote-Group".into()],
            extra_header_prefixes: vec!["X-Remote-Extra-".into()],
            allowed_names: vec!["front-proxy-client".into()],
        }
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    struct Pki {
        client_ca: CertificateAuthority,
        proxy_ca: CertificateAuthority,
        proxy: CertificateDer<'static>,
    }

    fn pki() -> Pki {
        let client_ca = CertificateAuthority::generate("client-ca").unwrap();
        let proxy_ca = CertificateAuthority::generate("front-proxy-ca").unwrap();
        let proxy = proxy_ca
            .issue_client_cert("front-proxy-client", &[], Validity::leaf_default())
            .unwrap();
        Pki {
            client_ca,
            proxy: der(&proxy.cert_pem),
            proxy_ca,
        }
    }

    fn auth(
        a: &dyn Authenticator,
        chain: &[CertificateDer<'static>],
        h: &HeaderMap,
    ) -> Result<Option<UserInfo>, AuthError> {
        a.authenticate(&AuthRequest {
            headers: h,
            peer_certificates: chain,
            path: "",
        })
    }

    #[test]
    fn the_headers_name_the_user() {
        let p = pki();
        let a = RequestHeaderAuthenticator::new(p.proxy_ca.cert_pem(), kubeadm()).unwrap();
        let h = headers(&[
            ("x-remote-user", "alice"),
            ("x-remote-uid", "u-1"),
            ("x-remote-group", "dev"),
            ("x-remote-group", ""),
            ("x-remote-group", "ops"),
            ("x-remote-extra-scopes", "a"),
            ("x-remote-extra-scopes", "b"),
            ("x-remote-extra-Acme.com%2Fproject", "p"),
            ("x-remote-extra-bad%zz", "v"),
            ("x-remote-extra-empty", ""),
            ("x-remote-user-not-extra", "x"),
        ]);
        let user = auth(&a, std::slice::from_ref(&p.proxy), &h)
            .unwrap()
            .unwrap();
        assert_eq!(user.name, "alice");
        assert_eq!(user.uid, "u-1");
        assert_eq!(user.groups, vec!["dev", "ops"]);
        let extra: Vec<(&str, Vec<&str>)> = user
            .extra
            .iter()
            .map(|(k, v)| (k.as_str(), v.iter().map(String::as_str).collect()))
            .collect();
        assert_eq!(
            extra,
            vec![
                ("acme.com/project", vec!["p"]),
                ("bad%zz", vec!["v"]),
                ("empty", vec![""]),
                ("scopes", vec!["a", "b"]),
            ]
        );
        // Cached: the same again.
        assert_eq!(
            auth(&a, std::slice::from_ref(&p.proxy), &h)
                .unwrap()
                .unwrap(),
            user
        );
    }

    #[test]
    fn first_non_empty_username_header_wins_and_no_username_is_no_opinion() {
        let p = pki();
        let mut config = kubeadm();
        config.username_headers = vec![" X-First ".into(), "X-Second".into()];
        let a = RequestHeaderAuthenticator::new(p.proxy_ca.cert_pem(), config).unwrap();
        let chain = std::slice::from_ref(&p.proxy);
        let h = headers(&[("x-first", ""), ("x-second", "bob")]);
        assert_eq!(auth(&a, chain, &h).unwrap().unwrap().name, "bob");
        let h = headers(&[("x-first", "carol"), ("x-second", "bob")]);
        let carol = auth(&a, chain, &h).unwrap().unwrap();
        assert_eq!(carol.name, "carol");
        assert!(carol.uid.is_empty() && carol.groups.is_empty() && carol.extra.is_empty());
        assert!(
            auth(&a, chain, &headers(&[("x-first", "")]))
                .unwrap()
                .is_none()
        );
        assert!(auth(&a, chain, &HeaderMap::new()).unwrap().is_none());
        // No certificate: no opinion, whatever the headers say.
        assert!(
            auth(&a, &[], &headers(&[("x-first", "carol")]))
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn the_certificate_must_chain_to_the_request_header_ca_with_an_allowed_name() {
        let p = pki();
        let a = RequestHeaderAuthenticator::new(p.proxy_ca.cert_pem(), kubeadm()).unwrap();
        let h = headers(&[
            ("x-remote-user", "mallory"),
            ("x-remote-group", "system:masters"),
        ]);
        let now = SystemTime::now();
        let day = Duration::from_secs(86_400);
        let client = p
            .client_ca
            .issue_client_cert("front-proxy-client", &[], Validity::leaf_default())
            .unwrap();
        let other_name = p
            .proxy_ca
            .issue_client_cert("someone-else", &[], Validity::leaf_default())
            .unwrap();
        let expired = p
            .proxy_ca
            .issue_client_cert(
                "front-proxy-client",
                &[],
                Validity {
                    not_before: now - 3 * day,
                    not_after: now - day,
                },
            )
            .unwrap();
        let serving = p
            .proxy_ca
            .issue_serving_cert(
                "front-proxy-client",
                &["localhost".into()],
                &[],
                Validity::leaf_default(),
            )
            .unwrap();
        for (what, cert) in [
            ("client CA", &client),
            ("expired", &expired),
            ("serverAuth only", &serving),
        ] {
            match auth(&a, &[der(&cert.cert_pem)], &h) {
                Err(AuthError::X509Verification { .. }) => {}
                other => panic!("{what}: {other:?}"),
            }
        }
        match auth(&a, &[der(&other_name.cert_pem)], &h) {
            Err(e @ AuthError::ProxyNotAllowed(_)) => assert_eq!(
                e.to_string(),
                "x509: subject with cn=someone-else is not in the allowed list"
            ),
            other => panic!("{other:?}"),
        }
        // Without allowed names, any certificate of the CA may act as a proxy.
        let mut any = kubeadm();
        any.allowed_names.clear();
        let a = RequestHeaderAuthenticator::new(p.proxy_ca.cert_pem(), any).unwrap();
        let user = auth(&a, &[der(&other_name.cert_pem)], &h).unwrap().unwrap();
        assert_eq!(user.name, "mallory");
    }

    #[test]
    fn a_remembered_chain_still_expires() {
        let p = pki();
        let a = RequestHeaderAuthenticator::new(p.proxy_ca.cert_pem(), kubeadm()).unwrap();
        let h = headers(&[("x-remote-user", "alice")]);
        let chain = [p.proxy.clone()];
        let req = AuthRequest {
            headers: &h,
            peer_certificates: &chain,
            path: "",
        };
        assert!(a.authenticate(&req).unwrap().is_some());
        let later = UnixTime::since_unix_epoch(Duration::from_secs(
            UnixTime::now().as_secs() + 10 * 365 * 86_400,
        ));
        assert!(matches!(
            a.authenticate_at(&req, later),
            Err(AuthError::X509Verification { .. })
        ));
    }

    #[test]
    fn a_replaced_request_header_ca_no_longer_admits_the_old_proxy() {
        let p = pki();
        let ca = ClientCa::new(p.proxy_ca.cert_pem()).unwrap();
        let a = RequestHeaderAuthenticator::with_ca(ca.clone(), kubeadm()).unwrap();
        let h = headers(&[("x-remote-user", "alice")]);
        let old_proxy = std::slice::from_ref(&p.proxy);
        // Remembered once it verified.
        assert!(auth(&a, old_proxy, &h).unwrap().is_some());
        assert!(auth(&a, old_proxy, &h).unwrap().is_some());

        let new_proxy_ca = CertificateAuthority::generate("new-front-proxy-ca").unwrap();
        let new_proxy = new_proxy_ca
            .issue_client_cert("front-proxy-client", &[], Validity::leaf_default())
            .unwrap();
        assert!(ca.replace(new_proxy_ca.cert_pem()).unwrap());
        assert!(matches!(
            auth(&a, old_proxy, &h),
            Err(AuthError::X509Verification { .. })
        ));
        let user = auth(&a, &[der(&new_proxy.cert_pem)], &h).unwrap().unwrap();
        assert_eq!(user.name, "alice");
    }

    /// The apiserver's chain: request-header first, then x509 against the client CA
    /// only. A front-proxy certificate never authenticates as its CN, and a client
    /// certificate never lends its connection to header-named users.
    #[test]
    fn in_the_union_with_x509() {
        let p = pki();
        let union = UnionAuthenticator::new(vec![
            Box::new(RequestHeaderAuthenticator::new(p.proxy_ca.cert_pem(), kubeadm()).unwrap()),
            Box::new(X509Authenticator::new(p.client_ca.cert_pem()).unwrap()),
        ])
        .with_anonymous(AnonymousAuthenticator::everywhere());
        let as_alice = headers(&[("x-remote-user", "alice"), ("x-remote-group", "dev")]);
        let proxied = auth(&union, std::slice::from_ref(&p.proxy), &as_alice)
            .unwrap()
            .unwrap();
        assert_eq!(proxied.name, "alice");
        assert_eq!(proxied.groups, vec!["dev", ALL_AUTHENTICATED]);
        // The proxy's certificate without headers: a 401 (x509 rejects it), not
        // anonymous and not `front-proxy-client`.
        assert!(auth(&union, std::slice::from_ref(&p.proxy), &HeaderMap::new()).is_err());
        // A client-CA certificate with the headers is its own CN.
        let bob = p
            .client_ca
            .issue_client_cert("bob", &[], Validity::leaf_default())
            .unwrap();
        let user = auth(&union, &[der(&bob.cert_pem)], &as_alice)
            .unwrap()
            .unwrap();
        assert_eq!(user.name, "bob");
    }

    #[test]
    fn configuration_checks_and_header_clearing() {
        let p = pki();
        let mut bad = kubeadm();
        bad.group_headers.push("  ".into());
        match RequestHeaderAuthenticator::new(p.proxy_ca.cert_pem(), bad) {
            Err(e) => assert_eq!(
                e.to_string(),
                "authentication configuration: empty value in \"requestheader-group-headers\""
            ),
            Ok(_) => panic!("accepted"),
        }
        assert!(RequestHeaderAuthenticator::new("", kubeadm()).is_err());

        let mut h = headers(&[
            ("x-remote-user", "a"),
            ("x-remote-uid", "u"),
            ("x-remote-group", "g"),
            ("x-remote-extra-k", "v"),
            ("X-REMOTE-EXTRA-other", "v"),
            ("accept", "application/json"),
        ]);
        kubeadm().clear_headers(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key("accept"));
    }
}
