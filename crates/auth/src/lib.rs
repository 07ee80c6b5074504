//! Ferrokube authentication and authorization: the decisions the apiserver's authn and
//! authz filters make, mirroring `k8s.io/apiserver/pkg/authentication`,
//! `k8s.io/apiserver/pkg/authorization` and `k8s.io/apiserver/pkg/endpoints/request`.
//!
//! * [`user`]: [`UserInfo`] and the well-known user and group names.
//! * [`authn`]: the [`Authenticator`] trait over an [`AuthRequest`] (headers + peer
//!   certificates), and the authenticators: [`X509Authenticator`] (client
//!   certificates: CN → name, O → groups), [`TokenFileAuthenticator`]
//!   (`--token-auth-file`, `Authorization: Bearer`), [`UnionAuthenticator`] (the
//!   upstream chain: first success wins, adds `system:authenticated`, an invalid
//!   credential is an error rather than a fall-through to anonymous) and
//!   [`AnonymousAuthenticator`], [`ServiceAccountTokenAuthenticator`] (bound service
//!   account JWTs, ES256 via jsonwebtoken, with [`authn::serviceaccount::TokenIssuer`]),
//!   [`RequestHeaderAuthenticator`] (front proxies: a client certificate of
//!   `--requestheader-client-ca-file` with an allowed CN, then the user named by the
//!   `X-Remote-User`/`-Uid`/`-Group`/`-Extra-*` headers), [`OidcAuthenticator`]
//!   (`--oidc-*`: ID tokens of an OpenID Connect issuer, its keys supplied by the
//!   apiserver, which fetches them); plus [`client_cert_verifier`]
//!   for the apiserver's rustls `ServerConfig`, and [`ClientCa`], a CA bundle that
//!   may be replaced while it is in use, with [`dynamic_client_cert_verifier`] over
//!   such bundles.
//! * [`authz`]: the [`Authorizer`] trait over [`Attributes`], [`Decision`], and
//!   always-allow, always-deny, authenticated-only, privileged-groups and union
//!   authorizers (`--authorization-mode` chain semantics), [`AuthorizationMode`].
//! * [`rbac`]: RBAC with upstream semantics over an [`rbac::RbacSnapshot`] of roles
//!   and bindings: rule matching, rules of a user, the authorizer, escalation checks.
//! * [`node`]: the Node authorizer over a [`node::NodeGraph`] of pods.
//! * [`bootstrap`]: upstream's bootstrap RBAC policy (roles and bindings).
//! * [`request_info`]: `RequestInfo` from method + path + query, as upstream's
//!   `RequestInfoFactory` (verb, API group/version, namespace, resource, subresource,
//!   name), and [`request_attributes`].
//!
//! Layer: server side; used by the apiserver only. This crate has no HTTP server, no
//! sockets and no async: the apiserver calls it from its tower layers. It must not
//! depend on storage, registry, admission or apiserver crates, and knows no URL routing
//! beyond the generic RequestInfo parsing (no resource tables, no handlers).
//!
//! Where the x509 chain is verified: twice, on purpose. The apiserver's TLS layer
//! uses [`client_cert_verifier`] (verifies a presented chain against the client CA
//! but also admits clients without a certificate, like Go's
//! `VerifyClientCertIfGiven`), and [`X509Authenticator`] verifies the peer chain
//! again against its own CA, as upstream's x509 authenticator does, so it is correct
//! even behind a TLS layer configured differently (or none, in tests). This matters:
//! the TLS layer admits certificates of the client CA *and* of the request-header
//! (front-proxy) CA, and only [`RequestHeaderAuthenticator`], which verifies against
//! the latter, may accept a front-proxy certificate; [`X509Authenticator`] rejects it.

pub mod authn;
pub mod authz;
pub mod bootstrap;
pub mod node;
pub mod rbac;
pub mod request_info;
pub mod user;

mod csv;

pub use authn::{
    AnonymousAuthenticator, AuthError, AuthRequest, Authenticator, Bearer, ClientCa,
    OidcAuthenticator, OidcConfig, RequestHeaderAuthenticator, RequestHeaderConfig,
    ServiceAccountTokenAuthenticator, TokenFileAuthenticator, UnionAuthenticator,
    X509Authenticator, bearer_token, client_cert_verifier, dynamic_client_cert_verifier,
};
pub use authz::{
    AlwaysAllowAuthorizer, AlwaysDenyAuthorizer, Attributes, AuthenticatedOnlyAuthorizer,
    AuthorizationMode, Authorizer, Decision, PrivilegedGroupsAuthorizer, UnionAuthorizer,
};
pub use request_info::{
    FieldRequirement, RequestInfo, RequestInfoError, field_requirements, label_requirements,
    request_attributes, request_info,
};
pub use user::UserInfo;
