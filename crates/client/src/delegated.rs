//! Delegated authentication and authorization of a component's own HTTPS endpoint, as
//! upstream's `DelegatingAuthenticationOptions`/`DelegatingAuthorizationOptions` do it
//! for kube-scheduler and kube-controller-manager: the apiserver says who a bearer token
//! belongs to (TokenReview) and whether that user may do what it asks (a
//! SubjectAccessReview of the non-resource path), both cached for a short while. A
//! client certificate signed by `--client-ca-file` names its user directly. A client
//! certificate signed by `--requestheader-client-ca-file` (a front proxy: the
//! apiserver's aggregator, kubeadm's `front-proxy-client`) is no user itself: the
//! request is the user its `X-Remote-*` headers name. Paths in
//! `--authorization-always-allow-paths` (the health checks) need nothing.
//!
//! As upstream's `DelegatingAuthenticatorConfig`, authenticators are tried in order
//! (front proxy, client certificate, bearer token); the first that names a user wins,
//! and a request that one of them refused and none accepted is a 401 rather than
//! anonymous. The TLS layer accepts certificates of both CAs, so each check verifies
//! the chain against its own CA ([`ClientCertificates`]). The bundles may change while
//! the endpoint runs ([`LiveClientCertificates`]): CAs the flags leave out come from the
//! apiserver's ConfigMap (its request-header part followed there), and CA files are
//! read again ([`crate::extension_authentication`]).
//!
//! The kubelet uses the same gate for its API (upstream's `authentication.webhook` and
//! `authorization.mode: Webhook`): [`Gate::authenticate`], then
//! [`Gate::authorize_any`] with resource attributes (`nodes/<subresource>`).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrokube_apimachinery::ApiError;
use http::HeaderMap;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use parking_lot::Mutex;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::ClientCertVerifier;

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
    #[command(flatten)]
    pub request_header: RequestHeaderOptions,
    /// If false, the authentication-kubeconfig will be used to lookup missing
    /// authentication configuration from the cluster.
    #[arg(long = "authentication-skip-lookup", num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false")]
    pub skip_lookup: bool,
    /// If true, failures to look up missing authentication configuration from the
    /// cluster are not considered fatal. Note that this can result in authentication
    /// that treats all requests as anonymous. [default: the component's]
    #[arg(long = "authentication-tolerate-lookup-failure", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub tolerate_lookup_failure: Option<bool>,
}

impl Default for DelegatedAuthOptions {
    fn default() -> Self {
        DelegatedAuthOptions {
            authentication_kubeconfig: None,
            authorization_kubeconfig: None,
            always_allow_paths: vec!["/healthz".into(), "/readyz".into(), "/livez".into()],
            client_ca_file: None,
            request_header: RequestHeaderOptions::default(),
            skip_lookup: false,
            tolerate_lookup_failure: None,
        }
    }
}

/// Upstream's `RequestHeaderAuthenticationOptions` with the defaults of
/// `NewDelegatingAuthenticationOptions` (the headers the apiserver's aggregator sends;
/// no uid header, as upstream 1.33). Each argument has its own id: clap's default, the
/// field name, would clash with `--client-ca-file`'s.
#[derive(clap::Args, Debug, Clone)]
pub struct RequestHeaderOptions {
    /// Root certificate bundle to use to verify client certificates on incoming
    /// requests before trusting usernames in headers specified by
    /// --requestheader-username-headers. Without it, no front proxy is trusted.
    #[arg(
        long = "requestheader-client-ca-file",
        id = "requestheader-client-ca-file"
    )]
    pub client_ca_file: Option<PathBuf>,
    /// List of client certificate common names to allow to provide usernames in
    /// headers specified by --requestheader-username-headers. If empty, any client
    /// certificate validated by the authorities in --requestheader-client-ca-file is
    /// allowed.
    #[arg(
        long = "requestheader-allowed-names",
        id = "requestheader-allowed-names",
        value_delimiter = ','
    )]
    pub allowed_names: Vec<String>,
    /// List of request headers to inspect for usernames. X-Remote-User is common.
    #[arg(
        long = "requestheader-username-headers",
        id = "requestheader-username-headers",
        value_delimiter = ',',
        default_value = "x-remote-user"
    )]
    pub username_headers: Vec<String>,
    /// List of request headers to inspect for UIDs. X-Remote-Uid is suggested.
    #[arg(
        long = "requestheader-uid-headers",
        id = "requestheader-uid-headers",
        value_delimiter = ','
    )]
    pub uid_headers: Vec<String>,
    /// List of request headers to inspect for groups. X-Remote-Group is suggested.
    #[arg(
        long = "requestheader-group-headers",
        id = "requestheader-group-headers",
        value_delimiter = ',',
        default_value = "x-remote-group"
    )]
    pub group_headers: Vec<String>,
    /// List of request header prefixes to inspect. X-Remote-Extra- is suggested.
    #[arg(
        long = "requestheader-extra-headers-prefix",
        id = "requestheader-extra-headers-prefix",
        value_delimiter = ',',
        default_value = "x-remote-extra-"
    )]
    pub extra_headers_prefix: Vec<String>,
}

impl Default for RequestHeaderOptions {
    fn default() -> Self {
        RequestHeaderOptions {
            client_ca_file: None,
            allowed_names: Vec::new(),
            username_headers: vec!["x-remote-user".into()],
            uid_headers: Vec::new(),
            group_headers: vec!["x-remote-group".into()],
            extra_headers_prefix: vec!["x-remote-extra-".into()],
        }
    }
}

impl RequestHeaderOptions {
    /// The header settings, checked as upstream's `Validate` (no blank names; a
    /// warning when a list leaves out the header the aggregator sends).
    pub fn config(&self) -> Result<RequestHeaderConfig, String> {
        // pflag reads `--flag=` as an empty list; clap gives one empty value.
        let list = |v: &[String]| -> Vec<String> {
            match v {
                [only] if only.is_empty() => Vec::new(),
                _ => v.to_vec(),
            }
        };
        let config = RequestHeaderConfig {
            username_headers: list(&self.username_headers),
            uid_headers: list(&self.uid_headers),
            group_headers: list(&self.group_headers),
            extra_header_prefixes: list(&self.extra_headers_prefix),
            allowed_names: list(&self.allowed_names),
        };
        config.validate()?;
        for (flag, values, standard) in [
            (
                "username-headers",
                &config.username_headers,
                "X-Remote-User",
            ),
            ("uid-headers", &config.uid_headers, "X-Remote-Uid"),
            ("group-headers", &config.group_headers, "X-Remote-Group"),
            (
                "extra-headers-prefix",
                &config.extra_header_prefixes,
                "X-Remote-Extra-",
            ),
        ] {
            if !values.is_empty() && !values.iter().any(|v| v.eq_ignore_ascii_case(standard)) {
                tracing::warn!(
                    "--requestheader-{flag} is set without specifying the standard {standard} header - API aggregation will not work"
                );
            }
        }
        Ok(config)
    }
}

pub use ferrokube_apimachinery::request_header::RequestHeaderConfig;

/// The user `config` finds in `headers`, or `None` without a username header.
fn header_user(config: &RequestHeaderConfig, headers: &HeaderMap) -> Option<User> {
    config.user_from_headers(headers).map(|u| User {
        name: u.name,
        uid: u.uid,
        groups: u.groups,
        extra: u.extra,
    })
}

/// A CA bundle and the verifier of client certificates against it alone.
#[derive(Clone)]
struct CaPool {
    pem: String,
    verifier: Arc<dyn ClientCertVerifier>,
}

impl CaPool {
    fn new(pem: &str) -> Result<CaPool, String> {
        Ok(CaPool {
            pem: pem.to_string(),
            verifier: optional_client_verifier(pem)?,
        })
    }

    /// Whether `chain` (leaf first) chains to this bundle now, for client
    /// authentication.
    fn verify(&self, chain: &[CertificateDer<'_>]) -> Result<(), String> {
        let Some((leaf, intermediates)) = chain.split_first() else {
            return Err("no certificate".into());
        };
        self.verifier
            .verify_client_cert(leaf, intermediates, UnixTime::now())
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

/// The PEM bundles client certificates are judged by: `--client-ca-file`'s, and
/// `--requestheader-client-ca-file`'s with its header settings; from files or from
/// the apiserver's ConfigMap ([`crate::extension_authentication`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CaBundles {
    pub client_ca: Option<String>,
    pub request_header: Option<(String, RequestHeaderConfig)>,
}

impl CaBundles {
    /// The files the flags name (those set), read now.
    pub fn from_flag_files(opts: &DelegatedAuthOptions) -> Result<CaBundles, crate::Error> {
        let read = |flag: &str, path: &PathBuf| {
            std::fs::read_to_string(path).map_err(|e| {
                crate::Error::Config(format!("reading --{flag} {}: {e}", path.display()))
            })
        };
        let client_ca = opts
            .client_ca_file
            .as_ref()
            .map(|p| read("client-ca-file", p))
            .transpose()?;
        let request_header = match &opts.request_header.client_ca_file {
            Some(p) => Some((
                read("requestheader-client-ca-file", p)?,
                opts.request_header.config().map_err(crate::Error::Config)?,
            )),
            None => None,
        };
        Ok(CaBundles {
            client_ca,
            request_header,
        })
    }
}

/// What client certificates mean on an endpoint: `--client-ca-file` names users,
/// `--requestheader-client-ca-file` names front proxies. The TLS layer accepts both
/// ([`ClientCertificates::tls_client_cas`]), so each is verified here against its own
/// bundle: a front proxy's certificate is never a user, and a user's certificate never
/// makes its headers count.
#[derive(Clone, Default)]
pub struct ClientCertificates {
    client_ca: Option<CaPool>,
    request_header: Option<(CaPool, RequestHeaderConfig)>,
    /// The TLS layer's check: chains to either bundle ([`Self::tls_client_cas`]).
    tls: Option<Arc<dyn ClientCertVerifier>>,
}

impl std::fmt::Debug for ClientCertificates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCertificates")
            .field("client_ca", &self.client_ca.is_some())
            .field(
                "request_header",
                &self.request_header.as_ref().map(|(_, c)| c),
            )
            .finish()
    }
}

impl ClientCertificates {
    /// From the PEM bundles of `--client-ca-file` and `--requestheader-client-ca-file`
    /// (with its header settings).
    pub fn new(
        client_ca_pem: Option<&str>,
        request_header: Option<(&str, RequestHeaderConfig)>,
    ) -> Result<ClientCertificates, String> {
        let client_ca = client_ca_pem
            .map(CaPool::new)
            .transpose()
            .map_err(|e| format!("--client-ca-file: {e}"))?;
        let request_header = match request_header {
            Some((pem, config)) => {
                config.validate()?;
                let pool =
                    CaPool::new(pem).map_err(|e| format!("--requestheader-client-ca-file: {e}"))?;
                let trim = |v: &[String]| v.iter().map(|s| s.trim().to_string()).collect();
                let config = RequestHeaderConfig {
                    username_headers: trim(&config.username_headers),
                    uid_headers: trim(&config.uid_headers),
                    group_headers: trim(&config.group_headers),
                    extra_header_prefixes: trim(&config.extra_header_prefixes),
                    allowed_names: config.allowed_names,
                };
                Some((pool, config))
            }
            None => None,
        };
        let mut certificates = ClientCertificates {
            client_ca,
            request_header,
            tls: None,
        };
        certificates.tls = certificates
            .tls_client_cas()
            .map(|pem| optional_client_verifier(&pem))
            .transpose()?;
        Ok(certificates)
    }

    /// The CA files the flags name, read now.
    pub fn from_options(opts: &DelegatedAuthOptions) -> Result<ClientCertificates, crate::Error> {
        ClientCertificates::from_bundles(&CaBundles::from_flag_files(opts)?)
            .map_err(crate::Error::Config)
    }

    pub fn from_bundles(bundles: &CaBundles) -> Result<ClientCertificates, String> {
        ClientCertificates::new(
            bundles.client_ca.as_deref(),
            bundles
                .request_header
                .as_ref()
                .map(|(pem, c)| (pem.as_str(), c.clone())),
        )
    }

    /// The bundle the TLS layer verifies client certificates against: both CAs, as
    /// upstream's serving pool; `None` when neither is set (no certificate asked for).
    pub fn tls_client_cas(&self) -> Option<String> {
        let pems: Vec<&str> = self
            .client_ca
            .iter()
            .chain(self.request_header.as_ref().map(|(pool, _)| pool))
            .map(|pool| pool.pem.as_str())
            .collect();
        (!pems.is_empty()).then(|| pems.join("\n"))
    }

    /// The front-proxy check (upstream's request-header authenticator behind its CA
    /// verifier): `Err` for a certificate that does not chain to the request-header CA
    /// or whose CN is not allowed, `Ok(None)` without a certificate or a username
    /// header.
    fn front_proxy_user(
        &self,
        chain: &[CertificateDer<'_>],
        headers: &HeaderMap,
    ) -> Result<Option<User>, String> {
        let (Some((pool, config)), Some(leaf)) = (&self.request_header, chain.first()) else {
            return Ok(None);
        };
        pool.verify(chain)
            .map_err(|e| format!("front-proxy certificate: {e}"))?;
        if !config.allowed_names.is_empty() {
            let cn = ferrokube_pki::CertInfo::from_der(leaf)
                .ok()
                .and_then(|info| info.common_name)
                .unwrap_or_default();
            if !config.allowed_names.contains(&cn) {
                return Err(format!(
                    "x509: subject with cn={cn} is not in the allowed list"
                ));
            }
        }
        Ok(header_user(config, headers))
    }

    /// The client-certificate check: `Err` for a certificate that does not chain to
    /// the client CA, `Ok(None)` without one (or without a CN, as upstream).
    fn certificate_user(&self, chain: &[CertificateDer<'_>]) -> Result<Option<User>, String> {
        let (Some(pool), Some(leaf)) = (&self.client_ca, chain.first()) else {
            return Ok(None);
        };
        pool.verify(chain)
            .map_err(|e| format!("client certificate: {e}"))?;
        Ok(certificate_user(leaf))
    }
}

/// [`ClientCertificates`] that may change while the endpoint runs (the request-header
/// part followed in the apiserver's ConfigMap, as upstream's dynamic request-header
/// controller): the gate and the TLS layer ([`LiveClientCertificates::tls_verifier`])
/// both read the current value at each use.
#[derive(Debug, Clone, Default)]
pub struct LiveClientCertificates(Arc<parking_lot::RwLock<ClientCertificates>>);

impl LiveClientCertificates {
    pub fn new(certificates: ClientCertificates) -> LiveClientCertificates {
        LiveClientCertificates(Arc::new(parking_lot::RwLock::new(certificates)))
    }

    pub fn replace(&self, certificates: ClientCertificates) {
        *self.0.write() = certificates;
    }

    /// The TLS layer's client-certificate check, always against the current bundles:
    /// a certificate is asked for only while there is a CA, and clients without one
    /// are served (to the token and anonymous checks).
    pub fn tls_verifier(&self) -> Arc<dyn ClientCertVerifier> {
        ferrokube_pki::serving::CurrentClientVerifier::new(CurrentTlsBundle(self.clone()))
    }
}

/// The check [`LiveClientCertificates::tls_verifier`] builds over.
#[derive(Debug)]
struct CurrentTlsBundle(LiveClientCertificates);

impl ferrokube_pki::serving::ClientVerifierSource for CurrentTlsBundle {
    fn current(&self) -> Vec<Arc<dyn ClientCertVerifier>> {
        self.0.0.read().tls.iter().cloned().collect()
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
    /// `None`: the TLS layer verified client certificates against the client CA alone,
    /// so a presented certificate is its user ([`Gate::new`], the kubelet).
    certificates: Option<LiveClientCertificates>,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("always_allow", &self.always_allow)
            .field("anonymous", &self.anonymous)
            .field("authn", &self.authn.is_some())
            .field("authz", &self.authz.is_some())
            .field("certificates", &self.certificates)
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
    /// The gate the flags describe (kubeconfigs and CA files loaded now; a missing
    /// kubeconfig only warns, as upstream's optional remote kubeconfigs do).
    pub async fn from_options(opts: &DelegatedAuthOptions) -> Result<Gate, crate::Error> {
        let certificates = ClientCertificates::from_options(opts)?;
        Ok(Gate::reviewing(opts)
            .await?
            .with_client_certificates(certificates))
    }

    /// The gate of the flags' kubeconfigs, without client certificates.
    pub(crate) async fn reviewing(opts: &DelegatedAuthOptions) -> Result<Gate, crate::Error> {
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
            certificates: None,
        }
    }

    /// Client certificates judged by [`Gate::authenticate_request`] against their own
    /// CAs, the TLS layer accepting [`ClientCertificates::tls_client_cas`].
    pub fn with_client_certificates(self, certificates: ClientCertificates) -> Gate {
        self.with_live_client_certificates(LiveClientCertificates::new(certificates))
    }

    /// [`Gate::with_client_certificates`] of a value that may change (the TLS layer
    /// verifying with [`LiveClientCertificates::tls_verifier`]).
    pub fn with_live_client_certificates(mut self, certificates: LiveClientCertificates) -> Gate {
        self.certificates = Some(certificates);
        self
    }

    /// The client that reviews tokens (`--authentication-kubeconfig`'s), if any.
    pub fn authentication_client(&self) -> Option<&kube::Client> {
        self.authn.as_ref()
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
        self.authorize_path(&user, verb, path).await
    }

    /// [`Gate::check`] of an HTTP request: its bearer token, the client certificate
    /// chain its connection presented (leaf first) and its headers.
    pub async fn check_request(
        &self,
        verb: &str,
        path: &str,
        bearer: Option<&str>,
        peer_certificates: &[CertificateDer<'_>],
        headers: &HeaderMap,
    ) -> Result<(), ApiError> {
        if self.always_allowed(path) {
            return Ok(());
        }
        let user = self
            .authenticate_request(bearer, peer_certificates, headers)
            .await?;
        self.authorize_path(&user, verb, path).await
    }

    /// Who an HTTP request is, as upstream's delegating authenticator union: a front
    /// proxy's named user, else the client certificate's, else the bearer token's;
    /// 401 when one of them refused the request and none accepted it, else anonymous
    /// (when enabled). Authenticated users are in `system:authenticated`. Without
    /// [`Gate::with_client_certificates`], the certificate is trusted as verified by
    /// the TLS layer ([`Gate::authenticate`]).
    pub async fn authenticate_request(
        &self,
        bearer: Option<&str>,
        peer_certificates: &[CertificateDer<'_>],
        headers: &HeaderMap,
    ) -> Result<User, ApiError> {
        let Some(certificates) = &self.certificates else {
            let user = peer_certificates
                .first()
                .and_then(|leaf| certificate_user(leaf));
            return self.authenticate(bearer, user).await;
        };
        let found = {
            let current = certificates.0.read();
            [
                current.front_proxy_user(peer_certificates, headers),
                current.certificate_user(peer_certificates),
            ]
        };
        let mut refusals = Vec::new();
        for found in found {
            match found {
                Ok(Some(user)) => return Ok(with_authenticated_group(user)),
                Ok(None) => {}
                Err(reason) => refusals.push(reason),
            }
        }
        if let Some(token) = bearer.filter(|_| self.authn.is_some()) {
            match self.review_token(token).await {
                Ok(user) => return Ok(with_authenticated_group(user)),
                Err(_) => refusals.push("invalid bearer token".into()),
            }
        }
        match (refusals.is_empty(), self.anonymous) {
            (true, true) => Ok(User::anonymous()),
            (true, false) => Err(unauthorized()),
            (false, _) => {
                tracing::warn!(reasons = ?refusals, "unable to authenticate the request");
                Err(unauthorized())
            }
        }
    }

    /// Whether `user` may `verb` the non-resource `path` (403 with upstream's message
    /// otherwise).
    async fn authorize_path(&self, user: &User, verb: &str, path: &str) -> Result<(), ApiError> {
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
        match self.authorize(user, &attrs).await {
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

/// Upstream's `AuthenticatedGroupAdder`: every authenticated user is in
/// `system:authenticated`.
fn with_authenticated_group(mut user: User) -> User {
    if user.name != "system:anonymous"
        && !user
            .groups
            .iter()
            .any(|g| g == "system:authenticated" || g == "system:unauthenticated")
    {
        user.groups.push("system:authenticated".into());
    }
    user
}

/// The bearer token of a request's `Authorization` header, if it has one.
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use ferrokube_pki::{CertificateAuthority, Validity};

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        auth: DelegatedAuthOptions,
    }

    fn flags(args: &[&str]) -> DelegatedAuthOptions {
        Flags::try_parse_from(std::iter::once("test").chain(args.iter().copied()))
            .unwrap()
            .auth
    }

    #[test]
    fn request_header_flags_default_as_upstream_delegating_options() {
        let defaults = flags(&[]).request_header;
        assert_eq!(defaults.username_headers, ["x-remote-user"]);
        assert_eq!(defaults.group_headers, ["x-remote-group"]);
        assert_eq!(defaults.extra_headers_prefix, ["x-remote-extra-"]);
        assert!(defaults.uid_headers.is_empty() && defaults.allowed_names.is_empty());
        assert!(defaults.client_ca_file.is_none());
        let default_impl = RequestHeaderOptions::default();
        assert_eq!(default_impl.config(), defaults.config());

        let set = flags(&[
            "--requestheader-client-ca-file=/etc/kubernetes/pki/front-proxy-ca.crt",
            "--requestheader-allowed-names=front-proxy-client,aggregator",
            "--requestheader-uid-headers=X-Remote-Uid",
            "--requestheader-username-headers=X-Remote-User",
        ])
        .request_header;
        let config = set.config().unwrap();
        assert_eq!(config.allowed_names, ["front-proxy-client", "aggregator"]);
        assert_eq!(config.uid_headers, ["X-Remote-Uid"]);
        assert_eq!(config.username_headers, ["X-Remote-User"]);
        // `--flag=` is an empty list, as pflag reads it; a blank name is an error.
        let empty = flags(&["--requestheader-allowed-names="]).request_header;
        assert!(empty.config().unwrap().allowed_names.is_empty());
        let blank = flags(&["--requestheader-group-headers=a, "]).request_header;
        assert_eq!(
            blank.config().unwrap_err(),
            r#"empty value in "requestheader-group-headers""#
        );
    }

    #[test]
    fn lookup_flags_are_pflag_bools() {
        let defaults = flags(&[]);
        assert!(!defaults.skip_lookup);
        assert_eq!(defaults.tolerate_lookup_failure, None);
        let set = flags(&[
            "--authentication-skip-lookup",
            "--authentication-tolerate-lookup-failure=false",
        ]);
        assert!(set.skip_lookup);
        assert_eq!(set.tolerate_lookup_failure, Some(false));
        assert!(!flags(&["--authentication-skip-lookup=false"]).skip_lookup);
        assert_eq!(
            flags(&["--authentication-tolerate-lookup-failure"]).tolerate_lookup_failure,
            Some(true)
        );
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                http::HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    struct Pki {
        client_ca: CertificateAuthority,
        proxy_ca: CertificateAuthority,
    }

    impl Pki {
        fn new() -> Pki {
            Pki {
                client_ca: CertificateAuthority::generate("kubernetes").unwrap(),
                proxy_ca: CertificateAuthority::generate("front-proxy-ca").unwrap(),
            }
        }

        fn chain(
            ca: &CertificateAuthority,
            cn: &str,
            groups: &[&str],
        ) -> Vec<CertificateDer<'static>> {
            let groups: Vec<String> = groups.iter().map(|g| g.to_string()).collect();
            let issued = ca
                .issue_client_cert(cn, &groups, Validity::leaf_default())
                .unwrap();
            vec![ferrokube_pki::pem::parse_cert_pem(&issued.cert_pem).unwrap()]
        }

        fn gate(&self) -> Gate {
            let config = RequestHeaderOptions {
                allowed_names: vec!["front-proxy-client".into()],
                ..Default::default()
            }
            .config()
            .unwrap();
            let certificates = ClientCertificates::new(
                Some(self.client_ca.cert_pem()),
                Some((self.proxy_ca.cert_pem(), config)),
            )
            .unwrap();
            let pool = certificates.tls_client_cas().unwrap();
            assert!(pool.contains(self.client_ca.cert_pem().trim()));
            assert!(pool.contains(self.proxy_ca.cert_pem().trim()));
            Gate::new(vec![], None, None, CacheTtl::default())
                .with_client_certificates(certificates)
        }
    }

    #[tokio::test]
    async fn each_certificate_is_judged_against_its_own_ca() {
        let pki = Pki::new();
        let gate = pki.gate();
        let alice = headers(&[("x-remote-user", "alice"), ("x-remote-group", "dev")]);
        let proxy = Pki::chain(&pki.proxy_ca, "front-proxy-client", &[]);

        let user = gate
            .authenticate_request(None, &proxy, &alice)
            .await
            .unwrap();
        assert_eq!(user.name, "alice");
        assert_eq!(user.groups, ["dev", "system:authenticated"]);
        // The proxy's certificate alone is no user: the client CA refuses it.
        let err = gate
            .authenticate_request(None, &proxy, &HeaderMap::new())
            .await
            .unwrap_err();
        assert_eq!(err.code, 401);
        // A front proxy whose name is not allowed.
        let other = Pki::chain(&pki.proxy_ca, "someone-else", &[]);
        assert_eq!(
            gate.authenticate_request(None, &other, &alice)
                .await
                .unwrap_err()
                .code,
            401
        );
        // A client certificate's headers do not count: it is its own CN.
        let bob = Pki::chain(&pki.client_ca, "bob", &["ops"]);
        let user = gate.authenticate_request(None, &bob, &alice).await.unwrap();
        assert_eq!(user.name, "bob");
        assert_eq!(user.groups, ["ops", "system:authenticated"]);
        // Nothing presented: anonymous.
        let user = gate.authenticate_request(None, &[], &alice).await.unwrap();
        assert_eq!(user, User::anonymous());
        // Without client certificates set, the TLS layer's verification is trusted.
        let trusting = Gate::new(vec![], None, None, CacheTtl::default());
        let user = trusting
            .authenticate_request(None, &bob, &alice)
            .await
            .unwrap();
        assert_eq!((user.name.as_str(), user.groups.len()), ("bob", 1));
    }

    #[test]
    fn without_a_request_header_ca_no_front_proxy_is_trusted() {
        let pki = Pki::new();
        let certificates = ClientCertificates::new(Some(pki.client_ca.cert_pem()), None).unwrap();
        assert_eq!(
            certificates.tls_client_cas().as_deref(),
            Some(pki.client_ca.cert_pem())
        );
        let proxy = Pki::chain(&pki.proxy_ca, "front-proxy-client", &[]);
        let alice = headers(&[("x-remote-user", "alice")]);
        assert_eq!(certificates.front_proxy_user(&proxy, &alice), Ok(None));
        assert!(ClientCertificates::default().tls_client_cas().is_none());
        assert!(ClientCertificates::new(None, Some(("", RequestHeaderConfig::default()))).is_err());
    }
}
