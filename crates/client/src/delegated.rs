//! Delegated authentication and authorization of a component's own HTTPS endpoint, as
//! upstream's `DelegatingAuthenticationOptions`/`DelegatingAuthorizationOptions` do it
//! for kube-scheduler and kube-controller-manager: the apiserver says who a bearer token
//! belongs to (TokenReview) and whether that user may do what it asks (a
//! SubjectAccessReview of the non-resource path), both cached for a short while. A
//! client certificate signed by `--client-ca-file` names its user directly. Paths in
//! `--authorization-always-allow-paths` (the health checks) need nothing.
//!
//! The kubelet uses the same gate for its API (upstream's `authentication.webhook` and
//! `authorization.mode: Webhook`): [`Gate::authenticate`], then
//! [`Gate::authorize_any`] with resource attributes (`nodes/<subresource>`).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrokube_apimachinery::ApiError;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use parking_lot::Mutex;

/// Upstream's delegated authentication and authorization flags.
#[derive(clap::Args, Debug, Clone)]
pub struct DelegatedAuthOptions {
    /// kubeconfig file pointing at the 'core' kubernetes server with enough rights to
    /// create tokenreviews.authentication.k8s.io. Without it, bearer tokens are not
    /// accepted.
    #[arg(long = "authentication-kubeconfig")]
    pub authentication_kubeconfig: Option<PathBuf>,
    /// kubeconfig file pointing at the 'core' kubernetes server with enough rights to
    /// create subjectaccessreviews.authorization.k8s.io. Without it, only the always
    /// allowed paths and the system:masters group are authorized.
    #[arg(long = "authorization-kubeconfig")]
    pub authorization_kubeconfig: Option<PathBuf>,
    /// HTTP paths that need no authorization ("/prefix*" matches a prefix).
    #[arg(
        long = "authorization-always-allow-paths",
        value_delimiter = ',',
        default_value = "/healthz,/readyz,/livez"
    )]
    pub always_allow_paths: Vec<String>,
    /// A request presenting a client certificate signed by one of the authorities in
    /// this file is authenticated as the certificate's CommonName (groups: its
    /// Organizations).
    #[arg(long = "client-ca-file")]
    pub client_ca_file: Option<PathBuf>,
}

impl Default for DelegatedAuthOptions {
    fn default() -> Self {
        DelegatedAuthOptions {
            authentication_kubeconfig: None,
            authorization_kubeconfig: None,
            always_allow_paths: vec!["/healthz".into(), "/readyz".into(), "/livez".into()],
            client_ca_file: None,
        }
    }
}

/// Who made a request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct User {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl User {
    fn anonymous() -> User {
        User {
            name: "system:anonymous".into(),
            uid: String::new(),
            groups: vec!["system:unauthenticated".into()],
            extra: BTreeMap::new(),
        }
    }
}

fn unauthorized() -> ApiError {
    ApiError::unauthorized("Unauthorized")
}

/// A resource request's attributes: a SubjectAccessReview's `resourceAttributes`
/// (empty strings are left out of the review).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ResourceRequest {
    pub verb: String,
    pub group: String,
    pub version: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
}

/// What a request asks for, as an authorizer sees it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Attributes {
    /// A verb on a path outside the API (`/metrics`).
    NonResource { verb: String, path: String },
    /// A verb on a resource (the kubelet API: `nodes/proxy`, `nodes/stats`, ...).
    Resource(ResourceRequest),
}

/// An authorizer's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// Not allowed, with the authorizer's reason (may be empty).
    Deny(String),
}

fn opt(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

/// How long reviews are remembered (upstream's defaults: 10 s each).
#[derive(Debug, Clone, Copy)]
pub struct CacheTtl {
    pub token: Duration,
    pub allowed: Duration,
    pub denied: Duration,
}

impl Default for CacheTtl {
    fn default() -> Self {
        CacheTtl {
            token: Duration::from_secs(10),
            allowed: Duration::from_secs(10),
            denied: Duration::from_secs(10),
        }
    }
}

/// Entries a cache holds before it starts over (tokens are attacker-chosen keys).
const CACHE_LIMIT: usize = 4096;

type Expiring<T> = Mutex<HashMap<String, (Instant, T)>>;

/// The authentication and authorization of one endpoint.
pub struct Gate {
    always_allow: Vec<String>,
    anonymous: bool,
    authn: Option<kube::Client>,
    authz: Option<kube::Client>,
    ttl: CacheTtl,
    tokens: Expiring<Option<User>>,
    decisions: Expiring<Decision>,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("always_allow", &self.always_allow)
            .field("anonymous", &self.anonymous)
            .field("authn", &self.authn.is_some())
            .field("authz", &self.authz.is_some())
            .finish_non_exhaustive()
    }
}

/// A client from `path`, as `--kubeconfig` loads one. Reviews are cached, so no
/// client-side rate limit is put on them.
async fn client_from(path: &std::path::Path) -> Result<kube::Client, crate::Error> {
    crate::config::ClientOptions {
        kubeconfig: Some(path.to_path_buf()),
        qps: -1.0,
        ..Default::default()
    }
    .client()
    .await
}

impl Gate {
    /// The gate the flags describe (kubeconfigs loaded now; a missing one only warns,
    /// as upstream's optional remote kubeconfigs do).
    pub async fn from_options(opts: &DelegatedAuthOptions) -> Result<Gate, crate::Error> {
        let authn = match &opts.authentication_kubeconfig {
            Some(p) => Some(client_from(p).await?),
            None => {
                tracing::warn!(
                    "no --authentication-kubeconfig: bearer tokens cannot be reviewed, so requests without a client certificate are anonymous"
                );
                None
            }
        };
        let authz = match &opts.authorization_kubeconfig {
            Some(p) => Some(client_from(p).await?),
            None => {
                tracing::warn!(
                    "no --authorization-kubeconfig: only {:?} and system:masters are authorized",
                    opts.always_allow_paths
                );
                None
            }
        };
        Ok(Gate::new(
            opts.always_allow_paths.clone(),
            authn,
            authz,
            CacheTtl::default(),
        ))
    }

    pub fn new(
        always_allow: Vec<String>,
        authn: Option<kube::Client>,
        authz: Option<kube::Client>,
        ttl: CacheTtl,
    ) -> Gate {
        Gate {
            always_allow,
            anonymous: true,
            authn,
            authz,
            ttl,
            tokens: Mutex::default(),
            decisions: Mutex::default(),
        }
    }

    /// Whether requests without credentials are `system:anonymous` (the default, as
    /// upstream's delegated authentication) or refused with 401 (the kubelet's
    /// `authentication.anonymous.enabled: false`).
    pub fn with_anonymous(mut self, enabled: bool) -> Gate {
        self.anonymous = enabled;
        self
    }

    fn always_allowed(&self, path: &str) -> bool {
        self.always_allow.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => path.starts_with(prefix),
            None => path == p,
        })
    }

    /// Whether a `verb` (the lowercased HTTP method) request for `path` may proceed,
    /// from its bearer token or its verified client certificate's user.
    pub async fn check(
        &self,
        verb: &str,
        path: &str,
        bearer: Option<&str>,
        certificate_user: Option<User>,
    ) -> Result<(), ApiError> {
        if self.always_allowed(path) {
            return Ok(());
        }
        let user = self.authenticate(bearer, certificate_user).await?;
        // Upstream's message for a non-resource path, and the authorizer's reason.
        let forbidden = |reason: &str| {
            let mut err = format!("User {:?} cannot {verb} path {path:?}", user.name);
            if !reason.is_empty() {
                err.push_str(": ");
                err.push_str(reason);
            }
            ApiError::forbidden("", "", "", err)
        };
        let attrs = Attributes::NonResource {
            verb: verb.to_string(),
            path: path.to_string(),
        };
        match self.authorize(&user, &attrs).await {
            Ok(Decision::Allow) => Ok(()),
            Ok(Decision::Deny(reason)) => Err(forbidden(&reason)),
            Err(_) => Err(forbidden("the authorization check failed")),
        }
    }

    /// Who a request is: its verified client certificate's user, else its bearer
    /// token's (a TokenReview; without a client for reviews the token is ignored, as
    /// upstream leaves token authentication out), else `system:anonymous` when
    /// anonymous requests are enabled. 401 otherwise, and for a token the apiserver
    /// does not know.
    pub async fn authenticate(
        &self,
        bearer: Option<&str>,
        certificate_user: Option<User>,
    ) -> Result<User, ApiError> {
        let bearer = bearer.filter(|_| self.authn.is_some());
        match (certificate_user, bearer) {
            (Some(user), _) => Ok(user),
            (None, Some(token)) => self.review_token(token).await,
            (None, None) if self.anonymous => Ok(User::anonymous()),
            (None, None) => Err(unauthorized()),
        }
    }

    /// Whether `user` may do what any of `attrs` describes, asked in order (the
    /// kubelet's fine-grained check: `nodes/pods`, then `nodes/proxy`). `Err` when a
    /// review could not be made (the error, for the log; such answers are not cached).
    pub async fn authorize_any(
        &self,
        user: &User,
        attrs: &[Attributes],
    ) -> Result<Decision, String> {
        let mut last = Decision::Deny(String::new());
        for a in attrs {
            last = self.authorize(user, a).await?;
            if last == Decision::Allow {
                break;
            }
        }
        Ok(last)
    }

    async fn review_token(&self, token: &str) -> Result<User, ApiError> {
        let Some(client) = &self.authn else {
            return Err(unauthorized());
        };
        if let Some(user) = cached(&self.tokens, token) {
            return user.ok_or_else(unauthorized);
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = Api::<TokenReview>::all(client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| {
                tracing::warn!(error = %e, "TokenReview failed");
                unauthorized()
            })?;
        let status = answer.status.unwrap_or_default();
        let user = match (status.authenticated, status.user) {
            (Some(true), Some(u)) => Some(User {
                name: u.username.unwrap_or_default(),
                uid: u.uid.unwrap_or_default(),
                groups: u.groups.unwrap_or_default(),
                extra: u.extra.unwrap_or_default(),
            }),
            _ => None,
        };
        remember(&self.tokens, token, user.clone(), self.ttl.token);
        user.ok_or_else(unauthorized)
    }

    /// One authorization: system:masters without a review (its RBAC allows everything),
    /// otherwise a SubjectAccessReview (denied without a client for reviews), cached.
    pub async fn authorize(&self, user: &User, attrs: &Attributes) -> Result<Decision, String> {
        if user.groups.iter().any(|g| g == "system:masters") {
            return Ok(Decision::Allow);
        }
        let Some(client) = &self.authz else {
            return Ok(Decision::Deny(String::new()));
        };
        let key = format!("{user:?}\u{0}{attrs:?}");
        if let Some(decision) = cached(&self.decisions, &key) {
            return Ok(decision);
        }
        let (non_resource_attributes, resource_attributes) = match attrs {
            Attributes::NonResource { verb, path } => (
                Some(NonResourceAttributes {
                    path: Some(path.clone()),
                    verb: Some(verb.clone()),
                }),
                None,
            ),
            Attributes::Resource(r) => (
                None,
                Some(ResourceAttributes {
                    verb: opt(&r.verb),
                    group: Some(r.group.clone()),
                    version: opt(&r.version),
                    resource: opt(&r.resource),
                    subresource: opt(&r.subresource),
                    namespace: opt(&r.namespace),
                    name: opt(&r.name),
                    ..Default::default()
                }),
            ),
        };
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                uid: opt(&user.uid),
                groups: Some(user.groups.clone()),
                extra: (!user.extra.is_empty()).then(|| user.extra.clone()),
                non_resource_attributes,
                resource_attributes,
            },
            ..Default::default()
        };
        let answer = Api::<SubjectAccessReview>::all(client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| {
                tracing::warn!(error = %e, "SubjectAccessReview failed");
                e.to_string()
            })?;
        let status = answer.status.unwrap_or_default();
        let (decision, ttl) = if status.allowed {
            (Decision::Allow, self.ttl.allowed)
        } else {
            (
                Decision::Deny(status.reason.unwrap_or_default()),
                self.ttl.denied,
            )
        };
        remember(&self.decisions, &key, decision.clone(), ttl);
        Ok(decision)
    }
}

fn cached<T: Clone>(cache: &Expiring<T>, key: &str) -> Option<T> {
    let cache = cache.lock();
    cache
        .get(key)
        .filter(|(until, _)| Instant::now() < *until)
        .map(|(_, v)| v.clone())
}

fn remember<T>(cache: &Expiring<T>, key: &str, value: T, ttl: Duration) {
    if ttl.is_zero() {
        return;
    }
    let mut cache = cache.lock();
    if cache.len() >= CACHE_LIMIT {
        let now = Instant::now();
        cache.retain(|_, (until, _)| now < *until);
        if cache.len() >= CACHE_LIMIT {
            cache.clear();
        }
    }
    cache.insert(key.to_string(), (Instant::now() + ttl, value));
}

/// The user a verified client certificate names: CN, and O as groups.
pub fn certificate_user(der: &[u8]) -> Option<User> {
    let info = ferrokube_pki::CertInfo::from_der(der).ok()?;
    Some(User {
        name: info.common_name?,
        uid: String::new(),
        groups: info.organizations,
        extra: BTreeMap::new(),
    })
}

/// A rustls verifier that checks client certificates against `ca_pem` when a client
/// sends one, and lets clients without one through (to token or anonymous checks).
pub fn optional_client_verifier(
    ca_pem: &str,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in
        ferrokube_pki::pem::parse_cert_pem_bundle(ca_pem).map_err(|e| format!("client CA: {e}"))?
    {
        roots.add(cert).map_err(|e| format!("client CA: {e}"))?;
    }
    if roots.is_empty() {
        return Err("client CA: no certificate found".into());
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .allow_unauthenticated()
        .build()
        .map_err(|e| format!("client CA: {e}"))
}
