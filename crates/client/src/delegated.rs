//! Delegated authentication and authorization of a component's own HTTPS endpoint, as
//! upstream's `DelegatingAuthenticationOptions`/`DelegatingAuthorizationOptions` do it
//! for kube-scheduler and kube-controller-manager: the apiserver says who a bearer token
//! belongs to (TokenReview) and whether that user may do what it asks (a
//! SubjectAccessReview of the non-resource path), both cached for a short while. A
//! client certificate signed by `--client-ca-file` names its user directly. Paths in
//! `--authorization-always-allow-paths` (the health checks) need nothing.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrokube_apimachinery::ApiError;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
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
    authn: Option<kube::Client>,
    authz: Option<kube::Client>,
    ttl: CacheTtl,
    tokens: Expiring<Option<User>>,
    decisions: Expiring<Result<(), String>>,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("always_allow", &self.always_allow)
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
            authn,
            authz,
            ttl,
            tokens: Mutex::default(),
            decisions: Mutex::default(),
        }
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
        let user = match (certificate_user, bearer) {
            (Some(user), _) => user,
            (None, Some(token)) => self.review_token(token).await?,
            (None, None) => User::anonymous(),
        };
        if user.groups.iter().any(|g| g == "system:masters") {
            return Ok(());
        }
        self.authorize(&user, verb, path).await
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

    async fn authorize(&self, user: &User, verb: &str, path: &str) -> Result<(), ApiError> {
        // Upstream's message for a non-resource path, and the authorizer's reason.
        let forbidden = |reason: &str| {
            let mut err = format!("User {:?} cannot {verb} path {path:?}", user.name);
            if !reason.is_empty() {
                err.push_str(": ");
                err.push_str(reason);
            }
            ApiError::forbidden("", "", "", err)
        };
        let Some(client) = &self.authz else {
            return Err(forbidden(""));
        };
        let key = format!("{user:?}\u{0}{verb}\u{0}{path}");
        if let Some(decision) = cached(&self.decisions, &key) {
            return decision.map_err(|r| forbidden(&r));
        }
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                uid: (!user.uid.is_empty()).then(|| user.uid.clone()),
                groups: Some(user.groups.clone()),
                extra: (!user.extra.is_empty()).then(|| user.extra.clone()),
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.to_string()),
                    verb: Some(verb.to_string()),
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = Api::<SubjectAccessReview>::all(client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| {
                tracing::warn!(error = %e, "SubjectAccessReview failed");
                forbidden("the authorization check failed")
            })?;
        let status = answer.status.unwrap_or_default();
        let decision = if status.allowed {
            Ok(())
        } else {
            Err(status.reason.unwrap_or_default())
        };
        let ttl = if decision.is_ok() {
            self.ttl.allowed
        } else {
            self.ttl.denied
        };
        remember(&self.decisions, &key, decision.clone(), ttl);
        decision.map_err(|r| forbidden(&r))
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
