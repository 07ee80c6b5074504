//! `--authentication-config` and `--authorization-config` followed while the server
//! runs, as upstream re-reads both files, so that changing an issuer or a webhook
//! needs no restart.
//!
//! Every [`CHECK_INTERVAL`] each file is read again ([`FollowedFiles`]). A changed
//! file is decoded and validated as at start, then built, then put in use whole; if
//! any step fails, what is in use stays, a warning says why, and the same content is
//! not tried again until the file changes. Each attempt is counted in
//! `apiserver_{authentication,authorization}_config_controller_automatic_reloads_total`.
//!
//! - Authentication: the JWT authenticators are replaced once every new one has its
//!   issuer's keys (upstream waits on their health checks the same way), so a typo in
//!   an issuer URL never locks its users out; `anonymous` is set at start only.
//! - Authorization: the whole chain is replaced; the new file must keep the
//!   non-webhook authorizers the server started with and may not bring in Node or
//!   RBAC ([`authz_config::check_reload`]). Webhooks start with empty caches.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ferrokube_auth::AuthorizationMode;
use ferrokube_pki::reload::{CHECK_INTERVAL, FollowedFiles};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::authn_config::{self, Anonymous};
use crate::authz_config;
use crate::authz_webhook::Authorization;
use crate::metrics::{Metrics, ReloadedConfig};
use crate::oidc::{self, JwtAuthenticators, KeyFetcher};
use crate::security::ClusterState;

/// How long new JWT authenticators may take to fetch their issuers' keys before the
/// reload is given up.
const KEYS_TIMEOUT: Duration = Duration::from_secs(60);
/// How often new JWT authenticators are checked for their keys.
const KEYS_POLL: Duration = Duration::from_millis(100);

/// What a followed configuration file configures.
pub(crate) trait Reloadable: Send {
    const CONFIG: ReloadedConfig;
    const FLAG: &'static str;

    /// Starts what the configuration in use needs in the background.
    fn start(&mut self) {}

    /// Puts the file's new `text` in use, or says why not (what is in use stays).
    fn apply(&mut self, text: String) -> impl Future<Output = Result<(), String>> + Send;
}

/// A configuration file, as read at start, and what it configures.
pub(crate) struct Followed<R> {
    file: FollowedFiles,
    reloadable: R,
}

impl<R: Reloadable> Followed<R> {
    pub(crate) fn new(path: PathBuf, text: String, reloadable: R) -> Self {
        Followed {
            file: FollowedFiles::new(R::FLAG, [(R::FLAG, path, text)]),
            reloadable,
        }
    }
}

/// Follows the file until shutdown.
pub(crate) async fn run<R: Reloadable>(
    mut followed: Followed<R>,
    metrics: Arc<Metrics>,
    mut shutdown: watch::Receiver<bool>,
) {
    followed.reloadable.start();
    let mut ticker = tokio::time::interval(CHECK_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The file was read at start.
    ticker.tick().await;
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = shutdown.changed() => return,
        }
        let Some(changed) = followed.file.changed() else {
            continue;
        };
        let applied = match changed {
            Ok(mut texts) => {
                let text = texts.pop().unwrap_or_default();
                tokio::select! {
                    applied = followed.reloadable.apply(text) => applied,
                    _ = shutdown.changed() => return,
                }
            }
            Err(e) => Err(e),
        };
        match &applied {
            Ok(()) => tracing::info!("{} changed; the new configuration is in use", R::FLAG),
            Err(e) => tracing::warn!(
                error = %e,
                "{} changed but does not load; keeping the configuration in use",
                R::FLAG
            ),
        }
        metrics.config_reloaded(R::CONFIG, applied.is_ok());
    }
}

/// The JWT authenticators of `--authentication-config`, with their key fetchers.
pub(crate) struct Authentication {
    authenticators: Arc<JwtAuthenticators>,
    service_account_issuers: Vec<String>,
    /// `anonymous` as the server started with it.
    anonymous: Option<Anonymous>,
    /// The fetchers of the authenticators in use, until [`Reloadable::start`].
    pending: Vec<KeyFetcher>,
    fetching: Fetching,
}

impl Authentication {
    pub(crate) fn new(
        authenticators: Arc<JwtAuthenticators>,
        fetchers: Vec<KeyFetcher>,
        service_account_issuers: Vec<String>,
        anonymous: Option<Anonymous>,
    ) -> Self {
        Authentication {
            authenticators,
            service_account_issuers,
            anonymous,
            pending: fetchers,
            fetching: Fetching::default(),
        }
    }
}

/// Key fetchers at work; they stop when this is dropped.
#[derive(Default)]
struct Fetching {
    _tasks: JoinSet<()>,
    /// Dropped with this, which ends the fetchers' loops.
    _stop: Option<watch::Sender<bool>>,
}

impl Fetching {
    fn start(fetchers: Vec<KeyFetcher>) -> Fetching {
        let (stop, stopped) = watch::channel(false);
        let mut tasks = JoinSet::new();
        for fetcher in fetchers {
            tasks.spawn(oidc::run(fetcher, stopped.clone()));
        }
        Fetching {
            _tasks: tasks,
            _stop: Some(stop),
        }
    }
}

impl Reloadable for Authentication {
    const CONFIG: ReloadedConfig = ReloadedConfig::Authentication;
    const FLAG: &'static str = "--authentication-config";

    fn start(&mut self) {
        self.fetching = Fetching::start(std::mem::take(&mut self.pending));
    }

    async fn apply(&mut self, text: String) -> Result<(), String> {
        let config = authn_config::parse(&text, &self.service_account_issuers)?;
        if config.anonymous != self.anonymous {
            tracing::warn!(
                "{}: anonymous changed; it is set at start, the change takes effect at the next",
                Self::FLAG
            );
        }
        let fetchers = config
            .jwt
            .into_iter()
            .map(oidc::build_jwt)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?;
        let authenticators: Vec<_> = fetchers.iter().map(KeyFetcher::authenticator).collect();
        let fetching = Fetching::start(fetchers);
        let deadline = tokio::time::Instant::now() + KEYS_TIMEOUT;
        while let Some(waiting) = authenticators.iter().find(|a| !a.is_initialized()) {
            if tokio::time::Instant::now() >= deadline {
                return Err(format!(
                    "jwt authenticator for issuer {:?} has no keys after {KEYS_TIMEOUT:?}",
                    waiting.issuer_url()
                ));
            }
            tokio::time::sleep(KEYS_POLL).await;
        }
        self.authenticators.replace(authenticators);
        // The old fetchers stop; requests under way keep the authenticators they hold.
        self.fetching = fetching;
        Ok(())
    }
}

/// What puts a new version of a configuration file that the binary owns in use (e.g.
/// `--encryption-provider-config`, whose configuration the storage decorator holds).
#[async_trait::async_trait]
pub trait ApplyConfig: Send + Sync {
    /// Puts the file's new `text` in use, or says why not (what is in use stays).
    async fn apply(&self, text: String) -> Result<(), String>;
}

/// A file to follow: its path, its text as the binary read it at start, and what
/// applies a change.
#[derive(Clone)]
pub struct FollowedConfig {
    pub path: PathBuf,
    pub text: String,
    pub apply: Arc<dyn ApplyConfig>,
}

impl std::fmt::Debug for FollowedConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FollowedConfig")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// `--encryption-provider-config` with `--encryption-provider-config-automatic-reload`.
pub(crate) struct Encryption(Arc<dyn ApplyConfig>);

impl Encryption {
    pub(crate) fn new(apply: Arc<dyn ApplyConfig>) -> Self {
        Encryption(apply)
    }
}

impl Reloadable for Encryption {
    const CONFIG: ReloadedConfig = ReloadedConfig::Encryption;
    const FLAG: &'static str = "--encryption-provider-config";

    async fn apply(&mut self, text: String) -> Result<(), String> {
        self.0.apply(text).await
    }
}

/// The authorizer chain of `--authorization-config`.
pub(crate) struct Authorizers {
    authorization: Arc<Authorization>,
    state: Arc<ClusterState>,
    /// The modes the server started with.
    started_with: Vec<AuthorizationMode>,
}

impl Authorizers {
    pub(crate) fn new(
        authorization: Arc<Authorization>,
        state: Arc<ClusterState>,
        started_with: Vec<AuthorizationMode>,
    ) -> Self {
        Authorizers {
            authorization,
            state,
            started_with,
        }
    }
}

impl Reloadable for Authorizers {
    const CONFIG: ReloadedConfig = ReloadedConfig::Authorization;
    const FLAG: &'static str = "--authorization-config";

    async fn apply(&mut self, text: String) -> Result<(), String> {
        let configured = authz_config::parse(&text)?;
        authz_config::check_reload(&self.started_with, &configured)?;
        let chain = authz_config::build(configured, &self.state, true).await?;
        self.authorization.replace(chain);
        Ok(())
    }
}
