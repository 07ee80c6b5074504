//! The clients controllers write through: one per controller with the manager's
//! credentials ([`ControllerClients::PerController`], upstream's
//! `SimpleControllerClientBuilder`), or, with `--use-service-account-credentials`, one
//! per controller authenticated as the ServiceAccount `kube-system/<controller>`
//! (upstream's `DynamicControllerClientBuilder`). Either way each controller's client
//! has a `--kube-api-qps`/`--kube-api-burst` bucket of its own, as each client-go
//! clientset has, so one busy controller does not hold back the others, and names
//! itself at the end of its User-Agent (the controller, or the ServiceAccount's user
//! name, as upstream's builders add with `rest.AddUserAgent`).
//!
//! A per-controller client carries no credentials of the manager (upstream's
//! `AnonymousClientConfig`): a [`BearerTokenLayer`] on its kube-rs service stack puts
//! a token from the TokenRequest API (`serviceaccounts/<sa>/token`) on every request.
//! The manager's own client creates the ServiceAccount when it is missing and
//! requests the tokens; a token is replaced once 80 % of its lifetime has passed
//! (upstream's 20 % leeway) or as soon as the apiserver answers 401.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use ferrokube_client::config::{ClientLimits, build_client, client_with_limits};
use ferrokube_client::metrics::RequestMetricsLayer;
use http::{HeaderValue, Request, Response};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{Api, PostParams};
use kube::client::{Body, ClientBuilder};
use kube::{Client, Config};
use parking_lot::Mutex;
use tower::util::option_layer;
use tower::{BoxError, Layer, Service};

use crate::{Error, Result};

/// Upstream `defaultExpirationSeconds`: the lifetime asked for each token.
pub const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;
/// Upstream `defaultLeewayPercent`: the share of a token's lifetime left when it is
/// replaced.
pub const DEFAULT_LEEWAY_PERCENT: u32 = 20;
/// Upstream pins shorter lifetimes (clock skew) to ten minutes.
const MIN_TOKEN_LIFETIME: Duration = Duration::from_secs(600);
/// Upstream's backoff when getting a token: 0.5 s, doubling, four attempts.
const TOKEN_ATTEMPTS: u32 = 4;
const TOKEN_FIRST_BACKOFF: Duration = Duration::from_millis(500);

/// Where each controller's client comes from.
#[derive(Clone)]
pub enum ControllerClients {
    /// Every controller uses this client, and so its limit (tests, which build
    /// no configuration).
    Shared(Client),
    /// Each controller gets a client of its own over the manager's configuration
    /// (upstream without `--use-service-account-credentials`).
    PerController {
        config: Box<Config>,
        limits: Option<ClientLimits>,
    },
    /// Each controller uses its own ServiceAccount's tokens.
    ServiceAccounts(Arc<ServiceAccountClients>),
}

impl std::fmt::Debug for ControllerClients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ControllerClients::Shared(_) => f.write_str("Shared"),
            ControllerClients::PerController { limits, .. } => f
                .debug_struct("PerController")
                .field("limits", limits)
                .finish(),
            ControllerClients::ServiceAccounts(b) => f
                .debug_tuple("ServiceAccounts")
                .field(&b.namespace)
                .finish(),
        }
    }
}

impl ControllerClients {
    /// The client of the controller whose ServiceAccount is `service_account`.
    pub async fn client(&self, service_account: &str) -> Result<Client> {
        match self {
            ControllerClients::Shared(c) => Ok(c.clone()),
            ControllerClients::PerController { config, limits } => {
                // Upstream's SimpleControllerClientBuilder names the controller in the
                // User-Agent.
                let mut config = (**config).clone();
                ferrokube_client::config::add_user_agent(&mut config, service_account);
                client_of_its_own(&config, *limits)
            }
            ControllerClients::ServiceAccounts(b) => b.client(service_account).await,
        }
    }
}

/// A client over `config` with a bucket of `limits` that no other client shares.
pub fn client_of_its_own(config: &Config, limits: Option<ClientLimits>) -> Result<Client> {
    Ok(match limits {
        Some(l) => client_with_limits(config.clone(), l.qps, l.burst)?,
        None => build_client(config.clone())?,
    })
}

/// Upstream `DynamicControllerClientBuilder`.
pub struct ServiceAccountClients {
    /// Server and CA of the manager's configuration, without its credentials.
    config: Config,
    /// Each controller's bucket (`--kube-api-qps`, `--kube-api-burst`); `None`: none.
    limits: Option<ClientLimits>,
    /// The manager's own client: creates the ServiceAccounts, requests the tokens.
    core: Client,
    namespace: String,
    expiration_seconds: i64,
    leeway_percent: u32,
    /// One token source per ServiceAccount, shared by its clients.
    sources: Mutex<HashMap<String, Arc<TokenSource>>>,
}

impl ServiceAccountClients {
    /// Clients over `config`'s server and CA (its credentials are dropped), with
    /// ServiceAccounts in `kube-system` provisioned through `core`.
    pub fn new(mut config: Config, core: Client, limits: Option<ClientLimits>) -> Self {
        config.auth_info = Default::default();
        ServiceAccountClients {
            config,
            limits,
            core,
            namespace: "kube-system".to_string(),
            expiration_seconds: DEFAULT_EXPIRATION_SECONDS,
            leeway_percent: DEFAULT_LEEWAY_PERCENT,
            sources: Mutex::new(HashMap::new()),
        }
    }

    /// A client authenticated as `system:serviceaccount:<namespace>:<name>`; creates the
    /// ServiceAccount first if it is missing, as upstream.
    pub async fn client(&self, name: &str) -> Result<Client> {
        get_or_create_service_account(&self.core, &self.namespace, name).await?;
        let source = self
            .sources
            .lock()
            .entry(name.to_string())
            .or_insert_with(|| {
                Arc::new(TokenSource {
                    core: self.core.clone(),
                    namespace: self.namespace.clone(),
                    name: name.to_string(),
                    expiration_seconds: self.expiration_seconds,
                    leeway_percent: self.leeway_percent,
                    cached: Mutex::new(None),
                })
            })
            .clone();
        let limit = self.limits.map(|l| l.layer(&self.config));
        let metrics = RequestMetricsLayer::for_config(&self.config);
        let mut config = self.config.clone();
        // Upstream's constructClient: the agent ends with the ServiceAccount's user name.
        let user = format!("system:serviceaccount:{}:{name}", self.namespace);
        ferrokube_client::config::add_user_agent(&mut config, &user);
        let builder = ClientBuilder::try_from(config)?;
        Ok(builder
            .with_layer(&BearerTokenLayer { source })
            .with_layer(&metrics)
            .with_layer(&option_layer(limit))
            .build())
    }
}

/// Upstream `getOrCreateServiceAccount`: get, else create (the namespace too if it is
/// missing, tolerating errors there); an AlreadyExists race re-reads.
async fn get_or_create_service_account(
    core: &Client,
    namespace: &str,
    name: &str,
) -> Result<ServiceAccount> {
    let api: Api<ServiceAccount> = Api::namespaced(core.clone(), namespace);
    match api.get(name).await {
        Ok(sa) => return Ok(sa),
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    let namespaces: Api<Namespace> = Api::all(core.clone());
    if let Err(kube::Error::Api(s)) = namespaces.get(namespace).await
        && s.code == 404
    {
        let ns = Namespace {
            metadata: kube::api::ObjectMeta {
                name: Some(namespace.to_string()),
                ..Default::default()
            },
            ..Default::default()
        };
        if let Err(e) = namespaces.create(&PostParams::default(), &ns).await {
            tracing::warn!(%namespace, error = %e, "creating the missing namespace failed");
        }
    }
    let sa = ServiceAccount {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            ..Default::default()
        },
        ..Default::default()
    };
    match api.create(&PostParams::default(), &sa).await {
        Ok(sa) => Ok(sa),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(api.get(name).await?),
        Err(e) => Err(e.into()),
    }
}

/// When a token whose remaining lifetime is `lifetime` should be replaced (upstream
/// `tokenSourceImpl.Token`): lifetimes under ten minutes count as ten, and the last
/// `leeway_percent` of it is not used.
pub fn refresh_after(lifetime: Duration, leeway_percent: u32) -> Duration {
    let lifetime = lifetime.max(MIN_TOKEN_LIFETIME);
    lifetime - lifetime * leeway_percent.min(100) / 100
}

/// The cached token of one ServiceAccount (upstream's `cachedTokenSource` over
/// `tokenSourceImpl`).
pub struct TokenSource {
    core: Client,
    namespace: String,
    name: String,
    expiration_seconds: i64,
    leeway_percent: u32,
    cached: Mutex<Option<(String, Instant)>>,
}

impl TokenSource {
    /// The cached token if it is not due for replacement.
    fn current(&self) -> Option<String> {
        match &*self.cached.lock() {
            Some((token, until)) if Instant::now() < *until => Some(token.clone()),
            _ => None,
        }
    }

    /// Forgets the cached token (the apiserver rejected it).
    fn reset(&self) {
        *self.cached.lock() = None;
    }

    /// Requests a new token, retrying with upstream's backoff; caches it.
    async fn fetch(self: Arc<Self>) -> Result<String> {
        let mut backoff = TOKEN_FIRST_BACKOFF;
        let mut last = None;
        for attempt in 1..=TOKEN_ATTEMPTS {
            match self.request().await {
                Ok((token, lifetime)) => {
                    let until = Instant::now() + refresh_after(lifetime, self.leeway_percent);
                    *self.cached.lock() = Some((token.clone(), until));
                    return Ok(token);
                }
                Err(e) => {
                    tracing::warn!(serviceaccount = %self.name, attempt, error = %e, "getting a token failed");
                    last = Some(e);
                }
            }
            if attempt < TOKEN_ATTEMPTS {
                tokio::time::sleep(backoff).await;
                backoff *= 2;
            }
        }
        Err(last.unwrap_or_else(|| Error::Invalid("no token".into())))
    }

    /// One TokenRequest: the token and its remaining lifetime.
    async fn request(&self) -> Result<(String, Duration)> {
        get_or_create_service_account(&self.core, &self.namespace, &self.name).await?;
        let api: Api<ServiceAccount> = Api::namespaced(self.core.clone(), &self.namespace);
        let request = TokenRequest {
            spec: TokenRequestSpec {
                expiration_seconds: Some(self.expiration_seconds),
                ..Default::default()
            },
            ..Default::default()
        };
        let issued = api
            .create_token_request(&self.name, &PostParams::default(), &request)
            .await?;
        let status = issued.status.ok_or_else(|| {
            Error::Invalid(format!("TokenRequest for {} without status", self.name))
        })?;
        let left_ms = status.expiration_timestamp.0.as_millisecond()
            - k8s_openapi::jiff::Timestamp::now().as_millisecond();
        let left = Duration::from_millis(left_ms.max(0).unsigned_abs());
        Ok((status.token, left))
    }
}

/// A tower layer putting the [`TokenSource`]'s current token on every request as
/// `Authorization: Bearer`.
#[derive(Clone)]
pub struct BearerTokenLayer {
    source: Arc<TokenSource>,
}

impl<S> Layer<S> for BearerTokenLayer {
    type Service = BearerToken<S>;

    fn layer(&self, inner: S) -> BearerToken<S> {
        BearerToken {
            inner,
            source: self.source.clone(),
            fetching: None,
            ready: None,
        }
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// The service of [`BearerTokenLayer`]. A token is fetched in `poll_ready`, so the
/// client's request buffer waits for it. A failed fetch fails the next request only
/// (an error from `poll_ready` would close kube's buffer for good).
pub struct BearerToken<S> {
    inner: S,
    source: Arc<TokenSource>,
    fetching: Option<BoxFuture<Result<String>>>,
    ready: Option<std::result::Result<String, String>>,
}

impl<S, B> Service<Request<Body>> for BearerToken<S>
where
    S: Service<Request<Body>, Response = Response<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    B: 'static,
{
    type Response = Response<B>;
    type Error = BoxError;
    type Future = BoxFuture<std::result::Result<Response<B>, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<std::result::Result<(), BoxError>> {
        if self.ready.is_none() {
            if let Some(token) = self.source.current() {
                self.ready = Some(Ok(token));
            } else {
                let source = self.source.clone();
                let fetching = self
                    .fetching
                    .get_or_insert_with(|| Box::pin(source.fetch()));
                match fetching.as_mut().poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(r) => {
                        self.fetching = None;
                        self.ready = Some(r.map_err(|e| e.to_string()));
                    }
                }
            }
        }
        if matches!(self.ready, Some(Err(_))) {
            return Poll::Ready(Ok(()));
        }
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut req: Request<Body>) -> Self::Future {
        let token = match self.ready.take() {
            Some(Ok(token)) => token,
            Some(Err(e)) => {
                return Box::pin(async move {
                    Err(format!("no token for the controller's ServiceAccount: {e}").into())
                });
            }
            None => return Box::pin(async { Err("BearerToken called before ready".into()) }),
        };
        match HeaderValue::from_str(&format!("Bearer {token}")) {
            Ok(mut value) => {
                value.set_sensitive(true);
                req.headers_mut().insert(http::header::AUTHORIZATION, value);
            }
            Err(e) => return Box::pin(async move { Err(e.into()) }),
        }
        let source = self.source.clone();
        let response = self.inner.call(req);
        Box::pin(async move {
            let response = response.await.map_err(Into::into)?;
            if response.status() == http::StatusCode::UNAUTHORIZED {
                source.reset();
            }
            Ok(response)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_replaced_with_a_fifth_of_their_lifetime_left() {
        let hour = Duration::from_secs(3600);
        assert_eq!(refresh_after(hour, 20), Duration::from_secs(2880));
        assert_eq!(refresh_after(hour, 0), hour);
        assert_eq!(refresh_after(hour, 100), Duration::ZERO);
        assert_eq!(refresh_after(hour, 250), Duration::ZERO);
        // Short (or already expired, clock skew) lifetimes count as ten minutes.
        assert_eq!(refresh_after(Duration::ZERO, 20), Duration::from_secs(480));
        assert_eq!(
            refresh_after(Duration::from_secs(60), 20),
            Duration::from_secs(480)
        );
    }
}
