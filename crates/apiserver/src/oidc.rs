//! `--oidc-*`: fetching the OpenID Connect issuer's keys for
//! [`ferrokube_auth::OidcAuthenticator`], which verifies the ID tokens.
//!
//! Follows upstream `k8s.io/apiserver/plugin/pkg/authenticator/token/oidc` (`New`:
//! the HTTPS client trusting `--oidc-ca-file` or the host's roots, 30 s timeout; the
//! initialization polled every 10 s until it succeeds, the authenticator refusing
//! tokens meanwhile) and go-oidc v2 (`NewProvider`: the discovery document at
//! `<issuer>/.well-known/openid-configuration`, whose `issuer` must be the issuer URL
//! exactly, gives `jwks_uri`; `remoteKeySet`: keys fetched again when a token verifies
//! with none of them).
//!
//! Differences, on purpose: the keys are fetched at start rather than at the first
//! token (the authenticator only counts as initialized once it has keys); a re-fetch
//! asked for by a token happens in the background, at most once per
//! [`MIN_REFETCH_INTERVAL`], and that token is refused (authentication is synchronous
//! here, go-oidc fetches inside the request); the keys are also fetched again every
//! [`REFRESH_INTERVAL`] so a key the issuer dropped stops verifying; a key set that
//! fails to arrive keeps the previous one, and the discovery document is read again.
//!
//! The JWT authenticators of `--authentication-config` ([`crate::authn_config`]) are
//! fetched for the same way ([`build_jwt`]), each with its own CA and, when given, its
//! discovery URL.
//!
//! Left out: CA reloading, egress selection, distributed claims, HTTP proxies from
//! the environment, redirects, the authenticator's health check and metrics.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ferrokube_auth::authn::oidc::{KeySet, WELL_KNOWN_PATH, jwks_uri_from_discovery};
use ferrokube_auth::{
    AuthError, AuthRequest, Authenticator, OidcAuthenticator, OidcConfig, UserInfo,
};
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::rt::TokioIo;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::ConfigError;

/// Upstream polls the issuer this often until the authenticator is initialized.
const INIT_RETRY_INTERVAL: Duration = Duration::from_secs(10);
/// How often the keys are fetched again without being asked.
pub(crate) const REFRESH_INTERVAL: Duration = Duration::from_secs(10 * 60);
/// The least time between two fetches a token asked for, so that tokens with
/// made-up key ids cannot make the apiserver hammer the issuer.
pub(crate) const MIN_REFETCH_INTERVAL: Duration = Duration::from_secs(5);
/// Upstream's `http.Client` timeout.
const HTTP_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest discovery document or key set read.
const MAX_BODY_BYTES: usize = 1024 * 1024;

/// Where Go's `crypto/x509` looks for the host's roots on Linux, in its order (the
/// first that exists is used); `SSL_CERT_FILE` replaces the list, as in Go.
const SYSTEM_CA_FILES: [&str; 6] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/pki/tls/cacert.pem",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// The background half of the OIDC authenticator: fetches the issuer's keys into it.
pub(crate) struct KeyFetcher {
    authenticator: Arc<OidcAuthenticator>,
    tls: Arc<rustls::ClientConfig>,
    /// Signalled by the authenticator when a token verifies with none of its keys.
    wanted: Arc<Notify>,
    /// Where the discovery document is, when not below the issuer URL.
    discovery_url: Option<String>,
}

impl KeyFetcher {
    /// The authenticator to put in the chain.
    pub(crate) fn authenticator(&self) -> Arc<OidcAuthenticator> {
        self.authenticator.clone()
    }
}

/// The authenticator and its fetcher for the `--oidc-*` options, `None` when no
/// issuer is configured. `service_account_issuers` may not be the OIDC issuer (as
/// upstream: the service account authenticator owns those tokens).
pub(crate) fn build(
    config: &OidcConfig,
    ca_file: Option<&Path>,
    service_account_issuers: &[String],
) -> Result<Option<KeyFetcher>, ConfigError> {
    if config.issuer_url.is_empty() && config.client_id.is_empty() {
        if config.any_set() || ca_file.is_some() {
            return Err(together());
        }
        return Ok(None);
    }
    if config.issuer_url.is_empty() || config.client_id.is_empty() {
        return Err(together());
    }
    let roots = match ca_file {
        Some(path) => {
            let pem = std::fs::read(path)
                .map_err(|e| ConfigError::Read(path.display().to_string(), e))?;
            ca_file_roots(&pem)
                .map_err(|e| ConfigError::Auth(format!("--oidc-ca-file {}: {e}", path.display())))?
        }
        None => {
            tracing::info!("OIDC: No x509 certificates provided, will use host's root CA set");
            system_roots()
        }
    };
    let wanted = Arc::new(Notify::new());
    let hook = wanted.clone();
    let authenticator = OidcAuthenticator::new(config, service_account_issuers)
        .map_err(|e| ConfigError::Auth(e.to_string()))?
        // `notify_one` keeps a permit when the fetcher is busy, so no ask is lost.
        .with_refresh_hook(move || hook.notify_one());
    if authenticator.signing_algs().iter().any(|a| a == "ES512") {
        tracing::warn!(
            "--oidc-signing-algs: ES512 is accepted but this server cannot verify it; such tokens are refused"
        );
    }
    Ok(Some(KeyFetcher {
        authenticator: Arc::new(authenticator),
        tls: client_tls(roots)?,
        wanted,
        discovery_url: None,
    }))
}

/// The authenticator and its fetcher for one `jwt` entry of `--authentication-config`.
pub(crate) fn build_jwt(
    jwt: crate::authn_config::JwtAuthenticator,
) -> Result<KeyFetcher, ConfigError> {
    let roots = jwt.certificate_authority.unwrap_or_else(system_roots);
    let wanted = Arc::new(Notify::new());
    let hook = wanted.clone();
    let authenticator =
        OidcAuthenticator::structured(&jwt.issuer, jwt.audiences, Box::new(jwt.mapper))
            .with_refresh_hook(move || hook.notify_one());
    Ok(KeyFetcher {
        authenticator: Arc::new(authenticator),
        tls: client_tls(roots)?,
        wanted,
        discovery_url: jwt.discovery_url,
    })
}

fn together() -> ConfigError {
    ConfigError::Auth(
        "oidc-issuer-url and oidc-client-id must be specified together when any oidc-* flags are set"
            .into(),
    )
}

/// The certificates of `--oidc-ca-file` (or of a JWT issuer's `certificateAuthority`):
/// every one must parse, and there must be
/// one (upstream's `certutil.NewPoolFromBytes`).
pub(crate) fn ca_file_roots(pem: &[u8]) -> Result<rustls::RootCertStore, String> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| e.to_string())?;
        roots.add(cert).map_err(|e| e.to_string())?;
    }
    if roots.is_empty() {
        return Err("data does not contain any valid RSA or ECDSA certificates".into());
    }
    Ok(roots)
}

/// The host's roots, found as Go finds them (`SSL_CERT_FILE`, else the first
/// bundle of [`SYSTEM_CA_FILES`]; plus the files of the `SSL_CERT_DIR` directories).
/// Certificates webpki cannot use are skipped, as a system bundle may hold some.
fn system_roots() -> rustls::RootCertStore {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let mut files: Vec<std::path::PathBuf> = match std::env::var_os("SSL_CERT_FILE") {
        Some(file) => vec![file.into()],
        None => SYSTEM_CA_FILES
            .iter()
            .map(std::path::PathBuf::from)
            .find(|p| p.is_file())
            .into_iter()
            .collect(),
    };
    if let Some(dirs) = std::env::var_os("SSL_CERT_DIR") {
        for dir in std::env::split_paths(&dirs) {
            if let Ok(entries) = std::fs::read_dir(&dir) {
                files.extend(entries.flatten().map(|e| e.path()).filter(|p| p.is_file()));
            }
        }
    }
    let mut roots = rustls::RootCertStore::empty();
    for file in files {
        let Ok(pem) = std::fs::read(&file) else {
            continue;
        };
        let certs = CertificateDer::pem_slice_iter(&pem).filter_map(Result::ok);
        roots.add_parsable_certificates(certs);
    }
    if roots.is_empty() {
        tracing::warn!(
            "OIDC: the host has no root certificates; the issuer cannot be reached without --oidc-ca-file"
        );
    }
    roots
}

fn client_tls(roots: rustls::RootCertStore) -> Result<Arc<rustls::ClientConfig>, ConfigError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ConfigError::Auth(format!("OIDC client TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(tls))
}

/// Keeps the authenticator's keys current until shutdown: the first fetch at once
/// (then every [`INIT_RETRY_INTERVAL`] until it succeeds), then every
/// [`REFRESH_INTERVAL`], or sooner when a token asks, at most once per
/// [`MIN_REFETCH_INTERVAL`].
pub(crate) async fn run(fetcher: KeyFetcher, mut shutdown: watch::Receiver<bool>) {
    let mut jwks_uri: Option<String> = None;
    loop {
        tokio::select! {
            _ = fetcher.refresh(&mut jwks_uri) => {}
            _ = shutdown.changed() => return,
        }
        let fetched = Instant::now();
        let wait = if fetcher.authenticator.is_initialized() {
            REFRESH_INTERVAL
        } else {
            INIT_RETRY_INTERVAL
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = fetcher.wanted.notified() => {
                tokio::select! {
                    _ = tokio::time::sleep_until(fetched + MIN_REFETCH_INTERVAL) => {}
                    _ = shutdown.changed() => return,
                }
            }
            _ = shutdown.changed() => return,
        }
    }
}

impl KeyFetcher {
    fn issuer(&self) -> &str {
        self.authenticator.issuer_url()
    }

    /// One round: the discovery document when its `jwks_uri` is not known (yet, or
    /// since the last key set failed to arrive), then the key set.
    async fn refresh(&self, jwks_uri: &mut Option<String>) {
        let uri = match jwks_uri {
            Some(uri) => uri.clone(),
            None => match self.discover().await {
                Ok(uri) => jwks_uri.insert(uri).clone(),
                Err(e) => {
                    tracing::error!(issuer = %self.issuer(), "oidc authenticator: initializing plugin: {e}");
                    return;
                }
            },
        };
        let keys = get(&self.tls, &uri)
            .await
            .and_then(|body| KeySet::from_json(&body).map_err(|e| format!("{uri}: {e}")));
        match keys {
            Ok(keys) => {
                tracing::debug!(issuer = %self.issuer(), key_ids = ?keys.key_ids(), "oidc authenticator: fetched the issuer's keys");
                self.authenticator.set_keys(keys);
            }
            Err(e) => {
                tracing::error!(issuer = %self.issuer(), "oidc authenticator: fetching keys: {e}");
                *jwks_uri = None;
            }
        }
    }

    /// go-oidc's `NewProvider`: the discovery document's `jwks_uri`.
    async fn discover(&self) -> Result<String, String> {
        let url = match &self.discovery_url {
            Some(url) => url.clone(),
            None => format!("{}{WELL_KNOWN_PATH}", self.issuer().trim_end_matches('/')),
        };
        let body = get(&self.tls, &url).await?;
        jwks_uri_from_discovery(self.issuer(), &body)
    }
}

/// An HTTPS GET of `url` within [`HTTP_TIMEOUT`]: the body of a 200 answer. Errors
/// read as Go's client's (`Get "<url>": <why>`).
async fn get(tls: &Arc<rustls::ClientConfig>, url: &str) -> Result<Vec<u8>, String> {
    match tokio::time::timeout(HTTP_TIMEOUT, get_once(tls, url)).await {
        Ok(result) => result.map_err(|e| format!("Get {url:?}: {e}")),
        Err(_) => Err(format!(
            "Get {url:?}: context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
        )),
    }
}

async fn get_once(tls: &Arc<rustls::ClientConfig>, url: &str) -> Result<Vec<u8>, String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("invalid URL: {e}"))?;
    if uri.scheme_str() != Some("https") {
        return Err(format!(
            "unsupported protocol scheme {:?}",
            uri.scheme_str().unwrap_or("")
        ));
    }
    let authority = uri.authority().ok_or("no host in request URL")?;
    if authority.as_str().contains('@') {
        return Err("user information in the URL is not supported".into());
    }
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = authority.port_u16().unwrap_or(443);
    let (tcp, addr) = crate::proxy::connect_tcp(&host, port).await?;
    let stream = crate::proxy::connect_tls(tls.clone(), &host, &addr, tcp).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let req = http::Request::get(path)
        .header(http::header::HOST, authority.as_str())
        .header(http::header::ACCEPT, "application/json")
        .body(Empty::<Bytes>::new())
        .map_err(|e| e.to_string())?;
    let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
    let status = resp.status();
    let body = Limited::new(resp.into_body(), MAX_BODY_BYTES)
        .collect()
        .await
        .map_err(|e| format!("reading the response: {e}"))?
        .to_bytes();
    if status != http::StatusCode::OK {
        // go-oidc's `"<status>: <body>"`.
        return Err(format!(
            "{status}: {}",
            String::from_utf8_lossy(&body)
                .chars()
                .take(200)
                .collect::<String>()
        ));
    }
    Ok(body.to_vec())
}

/// The JWT authenticators of `--authentication-config`, in the authenticator chain as
/// one, so that a changed file replaces them all at once ([`JwtAuthenticators::replace`]).
/// The first to know a token answers; failures are kept only when none does.
#[derive(Default)]
pub(crate) struct JwtAuthenticators {
    current: parking_lot::RwLock<Arc<Vec<Arc<OidcAuthenticator>>>>,
}

impl JwtAuthenticators {
    pub(crate) fn new(authenticators: Vec<Arc<OidcAuthenticator>>) -> JwtAuthenticators {
        JwtAuthenticators {
            current: parking_lot::RwLock::new(Arc::new(authenticators)),
        }
    }

    /// Puts `authenticators` in place of the ones in use, for the requests that come
    /// next.
    pub(crate) fn replace(&self, authenticators: Vec<Arc<OidcAuthenticator>>) {
        *self.current.write() = Arc::new(authenticators);
    }
}

impl Authenticator for JwtAuthenticators {
    fn authenticate(&self, request: &AuthRequest<'_>) -> Result<Option<UserInfo>, AuthError> {
        let current = self.current.read().clone();
        let mut errors = Vec::new();
        for authenticator in current.iter() {
            match authenticator.authenticate(request) {
                Ok(Some(user)) => return Ok(Some(user)),
                Ok(None) => {}
                Err(e) => errors.push(e),
            }
        }
        match errors.len() {
            0 => Ok(None),
            1 => Err(errors.remove(0)),
            _ => Err(AuthError::Aggregate(errors)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(issuer: &str, client: &str) -> OidcConfig {
        OidcConfig {
            issuer_url: issuer.into(),
            client_id: client.into(),
            ..OidcConfig::default()
        }
    }

    #[test]
    fn issuer_and_client_id_go_together() {
        assert!(build(&OidcConfig::default(), None, &[]).unwrap().is_none());
        for c in [
            config("https://issuer.example", ""),
            config("", "kubernetes"),
            OidcConfig {
                groups_claim: "groups".into(),
                ..OidcConfig::default()
            },
        ] {
            let err = build(&c, None, &[]).err().map(|e| e.to_string());
            assert_eq!(
                err.as_deref(),
                Some(
                    "authentication: oidc-issuer-url and oidc-client-id must be specified together when any oidc-* flags are set"
                ),
                "{c:?}"
            );
        }
        assert!(build(&OidcConfig::default(), Some(Path::new("/ca.crt")), &[]).is_err());
    }

    #[test]
    fn the_issuer_is_validated_and_the_ca_file_read() {
        let err = |c: OidcConfig, ca: Option<&Path>, sa: &[String]| {
            build(&c, ca, sa)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        assert!(
            err(config("http://issuer.example", "k"), None, &[])
                .contains("URL scheme must be https")
        );
        assert!(
            err(
                config("https://kubernetes.default.svc", "k"),
                None,
                &["https://kubernetes.default.svc".into()]
            )
            .contains("must not overlap with disallowed issuers")
        );
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.crt");
        assert!(
            err(config("https://issuer.example", "k"), Some(&missing), &[]).starts_with("reading ")
        );
        let empty = dir.path().join("empty.crt");
        std::fs::write(&empty, "not a certificate").unwrap();
        assert!(
            err(config("https://issuer.example", "k"), Some(&empty), &[])
                .contains("does not contain any valid")
        );
        let ca = ferrokube_pki::CertificateAuthority::generate("oidc-ca").unwrap();
        let good = dir.path().join("ca.crt");
        std::fs::write(&good, ca.cert_pem()).unwrap();
        let fetcher = build(&config("https://issuer.example", "k"), Some(&good), &[])
            .unwrap()
            .unwrap();
        assert_eq!(
            fetcher.authenticator().issuer_url(),
            "https://issuer.example"
        );
        assert!(!fetcher.authenticator().is_initialized());
    }

    #[tokio::test]
    async fn an_unreachable_issuer_leaves_the_authenticator_uninitialized() {
        // A port nothing listens on: the connection is refused at once.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap();
        let fetcher = build(
            &config(&format!("https://127.0.0.1:{port}"), "k"),
            None,
            &[],
        )
        .unwrap()
        .unwrap();
        let mut uri = None;
        fetcher.refresh(&mut uri).await;
        assert!(uri.is_none());
        assert!(!fetcher.authenticator().is_initialized());
        let err = get(&fetcher.tls, &format!("https://127.0.0.1:{port}/x"))
            .await
            .unwrap_err();
        assert!(
            err.starts_with(&format!("Get \"https://127.0.0.1:{port}/x\": dial tcp")),
            "{err}"
        );
        assert!(
            get(&fetcher.tls, "http://127.0.0.1/")
                .await
                .unwrap_err()
                .contains("unsupported protocol scheme")
        );
        // Shut down while waiting for the next attempt: the task ends.
        let (tx, rx) = watch::channel(false);
        let task = tokio::spawn(run(fetcher, rx));
        let _ = tx.send(true);
        assert!(
            tokio::time::timeout(Duration::from_secs(5), task)
                .await
                .is_ok()
        );
    }
}
