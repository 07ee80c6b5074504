//! Authentication: who made a request.
//!
//! Result convention, as upstream's `authenticator.Request` `(resp, ok, err)`:
//! `Ok(Some(user))` authenticated; `Ok(None)` this authenticator found no credential
//! it handles; `Err(_)` a credential was presented and is invalid. The apiserver
//! answers 401 to `Ok(None)` and `Err(_)` from its top-level authenticator.

pub mod legacy;
pub mod oidc;
mod request_header;
pub mod serviceaccount;
mod token;
mod x509;

pub use oidc::{OidcAuthenticator, OidcConfig};
pub use request_header::{RequestHeaderAuthenticator, RequestHeaderConfig};
pub use serviceaccount::ServiceAccountTokenAuthenticator;
pub use token::{Bearer, TokenFileAuthenticator, bearer_token};
pub use x509::{
    ClientCa, X509Authenticator, client_cert_verifier, dynamic_client_cert_verifier,
    write_client_certificate_metrics,
};

use http::HeaderMap;
use rustls_pki_types::CertificateDer;

use crate::user::UserInfo;

/// What an authenticator may look at.
#[derive(Debug, Clone, Copy)]
pub struct AuthRequest<'a> {
    pub headers: &'a HeaderMap,
    /// The TLS peer chain as presented: leaf first, then intermediates. Empty for
    /// plain HTTP or when the client sent no certificate.
    pub peer_certificates: &'a [CertificateDer<'static>],
    /// The request's URL path, without the query ("" when the credential did not
    /// come with a request, as a TokenReview's token).
    pub path: &'a str,
}

/// Authentication errors.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// A bearer token was presented that no token authenticator accepts.
    #[error("invalid bearer token")]
    InvalidBearerToken,
    /// A service account JWT of ours that does not verify or whose objects are gone.
    #[error("invalid service account token: {0}")]
    InvalidServiceAccountToken(String),
    /// A client certificate was presented that does not verify.
    #[error("verifying certificate {certificate} failed: {reason}")]
    X509Verification { certificate: String, reason: String },
    /// The verified client certificate could not be mapped to a user.
    #[error("client certificate subject: {0}")]
    X509Subject(String),
    /// A request-header CA certificate whose CN `--requestheader-allowed-names` does
    /// not list (upstream's message).
    #[error("x509: subject with cn={0} is not in the allowed list")]
    ProxyNotAllowed(String),
    /// An OpenID Connect ID token of the configured issuer that does not verify, or
    /// that arrived before the issuer's keys (upstream's `oidc: ...` messages).
    #[error("{0}")]
    Oidc(String),
    /// The token webhook failed, or answered with an error (upstream's message).
    #[error("{0}")]
    Webhook(String),
    /// Bad configuration (CA bundle, token file).
    #[error("authentication configuration: {0}")]
    Config(String),
    /// Several authenticators in a union failed.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))]
    Aggregate(Vec<AuthError>),
}

/// Authenticates a request.
pub trait Authenticator: Send + Sync {
    fn authenticate(&self, request: &AuthRequest<'_>) -> Result<Option<UserInfo>, AuthError>;

    /// Removes, once a request is authenticated, the headers that carried identity for
    /// this authenticator, so that nothing the request reaches later (a proxied pod, an
    /// extension apiserver) can read them as an identity the server vouched for.
    fn clear_credentials(&self, _headers: &mut HeaderMap) {}
}

impl<T: Authenticator + ?Sized> Authenticator for Box<T> {
    fn authenticate(&self, request: &AuthRequest<'_>) -> Result<Option<UserInfo>, AuthError> {
        (**self).authenticate(request)
    }

    fn clear_credentials(&self, headers: &mut HeaderMap) {
        (**self).clear_credentials(headers)
    }
}

impl<T: Authenticator + ?Sized> Authenticator for std::sync::Arc<T> {
    fn authenticate(&self, request: &AuthRequest<'_>) -> Result<Option<UserInfo>, AuthError> {
        (**self).authenticate(request)
    }

    fn clear_credentials(&self, headers: &mut HeaderMap) {
        (**self).clear_credentials(headers)
    }
}

/// The anonymous user (`system:anonymous`, group `system:unauthenticated`), on every
/// path or only on some.
/// Put it in the chain only when anonymous auth is enabled
/// (`--anonymous-auth`, or `anonymous` in an AuthenticationConfiguration), via
/// [`UnionAuthenticator::with_anonymous`].
#[derive(Debug, Clone, Default)]
pub struct AnonymousAuthenticator {
    /// `anonymous.conditions`' paths: when some are given, a request on any other path
    /// is not anonymous (upstream compares the whole path, with no prefix or pattern).
    allowed_paths: Vec<String>,
}

impl AnonymousAuthenticator {
    /// Anonymous on every path (`--anonymous-auth=true`).
    pub fn everywhere() -> Self {
        Self::default()
    }

    /// Anonymous only on these exact paths (an empty list: every path).
    pub fn on_paths(paths: impl IntoIterator<Item = String>) -> Self {
        AnonymousAuthenticator {
            allowed_paths: paths.into_iter().collect(),
        }
    }
}

impl Authenticator for AnonymousAuthenticator {
    fn authenticate(&self, request: &AuthRequest<'_>) -> Result<Option<UserInfo>, AuthError> {
        if !self.allowed_paths.is_empty() && !self.allowed_paths.iter().any(|p| p == request.path) {
            return Ok(None);
        }
        Ok(Some(UserInfo::anonymous()))
    }
}

/// The apiserver's authenticator chain, as upstream builds it:
/// `union.NewFailOnError(group.NewAuthenticatedGroupAdder(union.New(authenticators...)), anonymous)`.
///
/// * The authenticators are tried in order; the first `Ok(Some(user))` wins, and
///   `system:authenticated` is added to that user.
/// * An authenticator's error does not stop the others (a bad client certificate
///   next to a valid token authenticates by the token). If none succeeds, the errors
///   are returned together.
/// * Only when no authenticator succeeded *and none errored* does the anonymous
///   fallback (if enabled) apply: an invalid credential is a 401, never anonymous.
#[derive(Default)]
pub struct UnionAuthenticator {
    authenticators: Vec<Box<dyn Authenticator>>,
    anonymous: Option<AnonymousAuthenticator>,
}

impl std::fmt::Debug for UnionAuthenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnionAuthenticator")
            .field("authenticators", &self.authenticators.len())
            .field("anonymous", &self.anonymous.is_some())
            .finish()
    }
}

impl UnionAuthenticator {
    pub fn new(authenticators: Vec<Box<dyn Authenticator>>) -> Self {
        UnionAuthenticator {
            authenticators,
            anonymous: None,
        }
    }

    /// Appends an authenticator to the chain.
    pub fn push(mut self, authenticator: impl Authenticator + 'static) -> Self {
        self.authenticators.push(Box::new(authenticator));
        self
    }

    /// Enables the anonymous fallback for requests with no credentials at all.
    pub fn with_anonymous(mut self, anonymous: AnonymousAuthenticator) -> Self {
        self.anonymous = Some(anonymous);
        self
    }
}

impl Authenticator for UnionAuthenticator {
    fn authenticate(&self, request: &AuthRequest<'_>) -> Result<Option<UserInfo>, AuthError> {
        let mut errors = Vec::new();
        for authenticator in &self.authenticators {
            match authenticator.authenticate(request) {
                Ok(Some(user)) => return Ok(Some(user.with_authenticated_group())),
                Ok(None) => {}
                Err(e) => errors.push(e),
            }
        }
        // Upstream's bearer token authenticator turns "no token authenticator knows
        // this token" into an error: a presented token is never anonymous.
        if errors.is_empty() && !matches!(token::bearer_token(request.headers), token::Bearer::None)
        {
            errors.push(AuthError::InvalidBearerToken);
        }
        if !errors.is_empty() {
            return Err(if errors.len() == 1 {
                errors.remove(0)
            } else {
                AuthError::Aggregate(errors)
            });
        }
        match &self.anonymous {
            Some(anonymous) => anonymous.authenticate(request),
            None => Ok(None),
        }
    }

    fn clear_credentials(&self, headers: &mut HeaderMap) {
        for authenticator in &self.authenticators {
            authenticator.clear_credentials(headers);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::user::{ALL_AUTHENTICATED, ALL_UNAUTHENTICATED, ANONYMOUS};

    struct Fixed(Result<Option<UserInfo>, &'static str>);

    impl Authenticator for Fixed {
        fn authenticate(&self, _: &AuthRequest<'_>) -> Result<Option<UserInfo>, AuthError> {
            match &self.0 {
                Ok(u) => Ok(u.clone()),
                Err(m) => Err(AuthError::Config((*m).to_string())),
            }
        }
    }

    fn req(headers: &HeaderMap) -> AuthRequest<'_> {
        AuthRequest {
            headers,
            peer_certificates: &[],
            path: "",
        }
    }

    fn user(name: &str) -> Fixed {
        Fixed(Ok(Some(UserInfo::new(name, ["g"]))))
    }

    #[test]
    fn first_success_wins_and_gets_authenticated_group() {
        let h = HeaderMap::new();
        let u = UnionAuthenticator::new(vec![])
            .push(Fixed(Ok(None)))
            .push(user("a"))
            .push(user("b"));
        let got = u.authenticate(&req(&h)).unwrap().unwrap();
        assert_eq!(got.name, "a");
        assert_eq!(got.groups, vec!["g", ALL_AUTHENTICATED]);
    }

    #[test]
    fn errors_do_not_stop_later_authenticators() {
        let h = HeaderMap::new();
        let u = UnionAuthenticator::new(vec![
            Box::new(Fixed(Err("bad cert"))),
            Box::new(user("tok")),
        ]);
        assert_eq!(u.authenticate(&req(&h)).unwrap().unwrap().name, "tok");
    }

    #[test]
    fn invalid_credentials_never_fall_through_to_anonymous() {
        let h = HeaderMap::new();
        let u = UnionAuthenticator::new(vec![
            Box::new(Fixed(Err("bad token"))),
            Box::new(Fixed(Ok(None))),
        ])
        .with_anonymous(AnonymousAuthenticator::everywhere());
        let err = u.authenticate(&req(&h)).unwrap_err();
        assert_eq!(err.to_string(), "authentication configuration: bad token");

        let two =
            UnionAuthenticator::new(vec![Box::new(Fixed(Err("x"))), Box::new(Fixed(Err("y")))])
                .with_anonymous(AnonymousAuthenticator::everywhere());
        match two.authenticate(&req(&h)) {
            Err(AuthError::Aggregate(v)) => assert_eq!(v.len(), 2),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_unknown_bearer_token_is_an_error_not_anonymous() {
        let mut h = HeaderMap::new();
        h.insert(
            http::header::AUTHORIZATION,
            "Bearer nobody-knows-me".parse().unwrap(),
        );
        let u = UnionAuthenticator::new(vec![Box::new(Fixed(Ok(None)))])
            .with_anonymous(AnonymousAuthenticator::everywhere());
        assert!(matches!(
            u.authenticate(&req(&h)),
            Err(AuthError::InvalidBearerToken)
        ));
        h.insert(http::header::AUTHORIZATION, "Basic eDp5".parse().unwrap());
        assert_eq!(u.authenticate(&req(&h)).unwrap().unwrap().name, ANONYMOUS);
    }

    #[test]
    fn anonymous_only_when_enabled_and_without_the_authenticated_group() {
        let h = HeaderMap::new();
        let off = UnionAuthenticator::new(vec![Box::new(Fixed(Ok(None)))]);
        assert!(off.authenticate(&req(&h)).unwrap().is_none());
        let on = UnionAuthenticator::new(vec![Box::new(Fixed(Ok(None)))])
            .with_anonymous(AnonymousAuthenticator::everywhere());
        let anon = on.authenticate(&req(&h)).unwrap().unwrap();
        assert_eq!(anon.name, ANONYMOUS);
        assert_eq!(anon.groups, vec![ALL_UNAUTHENTICATED]);
        assert!(
            UnionAuthenticator::default()
                .authenticate(&req(&h))
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn anonymous_on_paths_is_anonymous_on_those_paths_only() {
        let h = HeaderMap::new();
        let on = UnionAuthenticator::new(vec![Box::new(Fixed(Ok(None)))]).with_anonymous(
            AnonymousAuthenticator::on_paths(["/livez".to_string(), "/readyz".into()]),
        );
        let at = |path| on.authenticate(&AuthRequest { path, ..req(&h) });
        assert_eq!(at("/livez").unwrap().unwrap().name, ANONYMOUS);
        assert_eq!(at("/readyz").unwrap().unwrap().name, ANONYMOUS);
        // The whole path, not a prefix of it.
        assert!(at("/livez/ping").unwrap().is_none());
        assert!(at("/healthz").unwrap().is_none());
        assert!(at("/api/v1/pods").unwrap().is_none());
        assert!(at("").unwrap().is_none());
    }
}
