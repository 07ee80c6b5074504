//! The Kubernetes REST API over HTTPS.
//!
//! Layer: HTTP only. Routing, discovery, content negotiation (JSON, YAML, Table),
//! watch streaming, and the request pipeline (panic recovery, request info,
//! authentication, audit, authorization, body limit, metrics) over TLS (rustls). All
//! store logic is the registry's; this crate turns requests into registry calls and
//! results into responses. It never chooses a storage backend: [`Config`] takes the
//! registry built over one. Options -> [`Config`] -> [`Server`] is the one path for
//! tests and production.

mod admission;
mod aggregator;
mod audit;
mod authentication_info;
mod authn_config;
mod authz_config;
mod authz_webhook;
mod bootstrap_token;
mod cert_reload;
mod componentstatus;
mod config_file;
mod config_reload;
mod conversion;
mod cors;
mod discovery;
mod dupes;
mod enablement;
mod eviction;
pub mod features;
mod flowcontrol;
mod handler;
mod health;
mod https_pool;
mod identity;
mod legacy_token_tracking;
mod lifecycle;
mod maxinflight;
mod metrics;
mod oidc;
mod openapi;
mod output;
mod proxy;
mod reviews;
mod security;
mod token_webhook;
mod tokens;
mod warning_headers;
mod webhook_client;
mod workload_proxy;
mod yaml_nesting;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ferrokube_auth::Authenticator;
use ferrokube_component_base::metrics::Collector;
use ferrokube_registry::Registry;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use admission::AdmissionPlugins;
pub use aggregator::AggregatorConfig;
pub use audit::{
    AuditBatchOptions, AuditLogOptions, AuditMode, AuditThrottle, AuditTruncate,
    AuditWebhookOptions, check_format as check_audit_log_format,
};
pub use authz_webhook::AuthorizationWebhookOptions;
pub use config_reload::{ApplyConfig, FollowedConfig};
pub use cors::CorsOrigins;
pub use enablement::ApiEnablement;
pub use ferrokube_auth::AuthorizationMode;
pub use ferrokube_auth::OidcConfig;
pub use ferrokube_registry::api_endpoints::EndpointReconciler;
pub use health::{HealthCheck, StorageCheckTimeouts};
pub use lifecycle::{ShutdownOptions, strict_transport_security};
pub use metrics::{Metrics, new_apiserver_id};
pub use proxy::{KubeletClient, KubeletClientError};
pub use webhook_client::ReviewVersion;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("binding {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("TLS configuration: {0}")]
    Tls(String),
}

/// Everything the server needs, built by the caller (cmd or testing).
pub struct Config {
    pub bind: SocketAddr,
    /// `--permit-port-sharing`: SO_REUSEPORT on the listener.
    pub permit_port_sharing: bool,
    /// `--http2-max-streams-per-connection` (0: upstream's 100).
    pub http2_max_streams_per_connection: u32,
    /// `--goaway-chance`: the fraction of HTTP/2 requests after which their connection
    /// is sent a GOAWAY (0 to 0.02).
    pub goaway_chance: f64,
    pub registry: Arc<Registry>,
    pub tls: Arc<rustls::ServerConfig>,
    /// The TLS configuration for a client that sends no server name, by the address
    /// it reached: each `--tls-sni-cert-key` pair named by an IP address.
    pub tls_by_local_ip: Vec<(std::net::IpAddr, Arc<rustls::ServerConfig>)>,
    pub authenticator: Arc<dyn Authenticator>,
    /// The `--authorization-mode` chain.
    pub(crate) authorizer: Arc<authz_webhook::Authorization>,
    /// How pods/log, exec, attach and portforward reach kubelets.
    pub kubelet: Arc<KubeletClient>,
    /// `host:port` clients are told in `/api`'s serverAddressByClientCIDRs.
    pub advertise: String,
    /// Largest request body (upstream: 3 MiB).
    pub max_body_bytes: usize,
    /// `--request-timeout`: the longest a request that is not long-running may take
    /// (a shorter `?timeout=` wins) before it is answered 504.
    pub request_timeout: Duration,
    /// `--min-request-timeout`: a watch without `timeoutSeconds` ends after a random
    /// time between this and twice this (zero: never).
    pub min_request_timeout: Duration,
    /// How the server shuts down (`--shutdown-*`).
    pub shutdown: ShutdownOptions,
    /// `Strict-Transport-Security` on every response (None: not sent).
    pub strict_transport_security: Option<http::HeaderValue>,
    /// Origins whose cross-origin requests are allowed (`--cors-allowed-origins`).
    pub cors: CorsOrigins,
    /// How long the health checks wait for the storage.
    pub storage_check_timeouts: StorageCheckTimeouts,
    /// Health checks added by the binary.
    pub health_checks: Vec<Arc<dyn HealthCheck>>,
    /// The post-start hooks the health endpoints list.
    pub(crate) post_start_hooks: health::PostStartHooks,
    /// This apiserver's identity: the name of the Lease it renews in kube-system.
    pub(crate) apiserver_id: String,
    /// Roles, bindings and pods as the authorizers and admission checks see them.
    pub(crate) security: Arc<security::ClusterState>,
    /// Service account token issuing and discovery (None without an issuer).
    pub(crate) tokens: Option<Arc<tokens::Tokens>>,
    /// The admission chain (`--enable-admission-plugins`).
    pub(crate) admission: Arc<admission::Chain>,
    /// The audit policy and log backend (None: auditing off).
    pub(crate) audit: Option<Arc<audit::Auditor>>,
    /// Shared with the storage under the registry, which reports its latencies here.
    pub(crate) metrics: Arc<Metrics>,
    /// How requests for remote APIServices reach extension apiservers.
    pub aggregator: AggregatorConfig,
    /// API Priority and Fairness (None: `--enable-priority-and-fairness=false`).
    pub(crate) flow_control: Option<Arc<flowcontrol::Apf>>,
    /// `--max-requests-inflight` / `--max-mutating-requests-inflight` limits, when
    /// priority and fairness is off (None: it is on, or both limits are 0).
    pub(crate) max_in_flight: Option<maxinflight::MaxInFlight>,
    /// Fetch the JWT issuers' keys into their authenticators (`--oidc-issuer-url`'s,
    /// or `--authentication-config`'s; none without an issuer).
    pub(crate) oidc: Vec<oidc::KeyFetcher>,
    /// `--authentication-token-webhook-config-file`'s authenticator (None: unset).
    pub(crate) token_webhook: Option<Arc<token_webhook::TokenWebhook>>,
    /// The serving certificate and client CA files, followed while the server runs
    /// (`tls` resolves the certificate and verifies clients through them).
    pub(crate) certificate_files: cert_reload::CertificateFiles,
    /// `--authentication-config`, followed while the server runs (None: unset).
    pub(crate) authn_reload: Option<config_reload::Followed<config_reload::Authentication>>,
    /// `--authorization-config`, followed while the server runs (None: unset).
    pub(crate) authz_reload: Option<config_reload::Followed<config_reload::Authorizers>>,
    /// `--encryption-provider-config` with automatic reload (None: not followed).
    pub(crate) encryption_reload: Option<config_reload::Followed<config_reload::Encryption>>,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config").field("bind", &self.bind).finish()
    }
}

/// Builds the rustls server config: serving cert and key (PEM), optional client CA
/// (client certificates verified if given), ALPN h2 and http/1.1.
pub fn tls_config(
    cert_pem: &str,
    key_pem: &str,
    client_ca_pem: Option<&str>,
) -> Result<Arc<rustls::ServerConfig>, ServerError> {
    let verifier = match client_ca_pem {
        Some(ca) => Some(
            ferrokube_auth::client_cert_verifier(ca)
                .map_err(|e| ServerError::Tls(e.to_string()))?,
        ),
        None => None,
    };
    ferrokube_pki::serving::server_config(
        cert_pem,
        key_pem,
        verifier,
        ferrokube_pki::serving::ALPN_H2_HTTP1,
        &Default::default(),
    )
    .map_err(|e| ServerError::Tls(e.to_string()))
}

/// A running server.
pub struct Server {
    addr: SocketAddr,
    /// ShutdownInitiated: `/readyz` fails, the endpoint lease is given up.
    initiated: watch::Sender<bool>,
    lifecycle: Arc<lifecycle::Lifecycle>,
    shutdown_options: ShutdownOptions,
    /// Stop listening, end watches and the loops in `background`.
    shutdown: watch::Sender<bool>,
    task: JoinHandle<()>,
    /// Loops that write through the registry (ClusterRole aggregation); they end
    /// on shutdown and are waited for, so no write follows a shutdown.
    background: Vec<JoinHandle<()>>,
    metrics: Arc<Metrics>,
    /// Flushed last, after the requests in flight.
    audit: Option<Arc<audit::Auditor>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("addr", &self.addr).finish()
    }
}

impl Server {
    /// Binds and starts serving.
    pub async fn start(config: Config) -> Result<Server, ServerError> {
        let listener = listen(config.bind, config.permit_port_sharing).map_err(|source| {
            ServerError::Bind {
                addr: config.bind,
                source,
            }
        })?;
        let addr = listener.local_addr().map_err(|source| ServerError::Bind {
            addr: config.bind,
            source,
        })?;
        let (shutdown, shutdown_rx) = watch::channel(false);
        let (initiated, initiated_rx) = watch::channel(false);
        let lifecycle = Arc::new(lifecycle::Lifecycle::default());
        let metrics = config.metrics;
        let mut background = Vec::new();
        if let Some(cluster_roles) =
            config
                .registry
                .store("rbac.authorization.k8s.io", "v1", "clusterroles")
        {
            background.push(tokio::spawn(security::run_aggregation(
                cluster_roles.clone(),
                shutdown_rx.clone(),
            )));
        }
        if let Some(configmaps) = config.registry.store("", "v1", "configmaps") {
            background.push(tokio::spawn(legacy_token_tracking::run(
                configmaps.clone(),
                shutdown_rx.clone(),
            )));
        }
        if let Some(apf) = &config.flow_control {
            background.push(tokio::spawn(flowcontrol::run_status_writer(
                apf.clone(),
                shutdown_rx.clone(),
            )));
            background.push(tokio::spawn(flowcontrol::run_borrowing(
                apf.clone(),
                shutdown_rx.clone(),
            )));
        }
        for fetcher in config.oidc {
            background.push(tokio::spawn(oidc::run(fetcher, shutdown_rx.clone())));
        }
        if let Some(followed) = config.authn_reload {
            background.push(tokio::spawn(config_reload::run(
                followed,
                metrics.clone(),
                shutdown_rx.clone(),
            )));
        }
        if let Some(followed) = config.authz_reload {
            background.push(tokio::spawn(config_reload::run(
                followed,
                metrics.clone(),
                shutdown_rx.clone(),
            )));
        }
        if let Some(followed) = config.encryption_reload {
            background.push(tokio::spawn(config_reload::run(
                followed,
                metrics.clone(),
                shutdown_rx.clone(),
            )));
        }
        background.push(tokio::spawn(cert_reload::run(
            config.certificate_files,
            config.registry.clone(),
            shutdown_rx.clone(),
        )));
        background.push(tokio::spawn(run_endpoint_lease(
            config.registry.clone(),
            initiated_rx.clone(),
        )));
        background.push(tokio::spawn(run_system_namespaces(
            config.registry.clone(),
            shutdown_rx.clone(),
        )));
        if let Some(leases) = config
            .registry
            .store("coordination.k8s.io", "v1", "leases")
            .filter(|_| config.security.features.apiserver_identity)
        {
            background.push(tokio::spawn(identity::run_lease(
                leases.clone(),
                config.apiserver_id.clone(),
                shutdown_rx.clone(),
            )));
            background.push(tokio::spawn(identity::run_lease_gc(
                leases.clone(),
                shutdown_rx.clone(),
            )));
        }
        let enablement = config.aggregator.enablement.clone();
        let aggregator = Arc::new(aggregator::Aggregator::new(config.aggregator));
        background.push(tokio::spawn(aggregator::run(
            aggregator.clone(),
            config.registry.clone(),
            shutdown_rx.clone(),
        )));
        let state = Arc::new(handler::State {
            openapi: openapi::OpenApi::start(
                config.registry.custom().clone(),
                aggregator.openapi_documents(),
                &enablement,
            ),
            aggregator,
            registry: config.registry,
            authenticator: config.authenticator,
            token_webhook: config.token_webhook,
            authorizer: config.authorizer,
            kubelet: config.kubelet,
            security: config.security,
            admission: config.admission,
            tokens: config.tokens,
            advertise: config.advertise,
            max_body: config.max_body_bytes,
            request_timeout: config.request_timeout,
            min_request_timeout: config.min_request_timeout,
            metrics: metrics.clone(),
            shutdown: shutdown_rx.clone(),
            shutdown_initiated: initiated_rx,
            lifecycle: lifecycle.clone(),
            strict_transport_security: config.strict_transport_security,
            cors: config.cors,
            storage_check_timeouts: config.storage_check_timeouts,
            health_checks: config.health_checks.clone(),
            post_start_hooks: config.post_start_hooks,
            audit: config.audit.clone(),
            flow_control: config.flow_control,
            max_in_flight: config.max_in_flight,
            enablement,
        });
        let acceptor = Handshake {
            config: config.tls,
            by_local_ip: Arc::new(config.tls_by_local_ip),
        };
        let task = tokio::spawn(accept_loop(
            listener,
            acceptor,
            state,
            shutdown_rx,
            config.http2_max_streams_per_connection,
            config.goaway_chance,
        ));
        Ok(Server {
            addr,
            initiated,
            lifecycle,
            shutdown_options: config.shutdown,
            shutdown,
            task,
            background,
            metrics,
            audit: config.audit,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Shuts down as upstream does (see [`lifecycle`]): `/readyz` fails at once; after
    /// the shutdown delay the server stops accepting, ends watches and waits for the
    /// requests in flight, at most `grace` (with `--shutdown-send-retry-after`, it
    /// refuses new requests while those in flight drain, at most `grace`, first).
    pub async fn shutdown(self, grace: Duration) {
        let _ = self.initiated.send(true);
        let options = self.shutdown_options;
        tokio::time::sleep(options.delay).await;
        if options.send_retry_after {
            self.lifecycle.stop_accepting();
            until_none_left(|| self.metrics.executing_now(), grace).await;
        }
        let _ = self.shutdown.send(true);
        until_none_left(
            || self.metrics.watches_now(),
            options.watch_termination_grace_period,
        )
        .await;
        let _ = tokio::time::timeout(grace, self.task).await;
        for task in self.background {
            let _ = tokio::time::timeout(grace, task).await;
        }
        if let Some(audit) = &self.audit {
            audit.flush(grace).await;
        }
    }
}

/// Waits until `count` reads zero, at most `limit`.
async fn until_none_left(count: impl Fn() -> i64, limit: Duration) {
    let none_left = async {
        while count() > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let _ = tokio::time::timeout(limit, none_left).await;
}

/// The listening socket: SO_REUSEADDR as Go's listeners (and `--permit-address-sharing`)
/// have it, SO_REUSEPORT with `--permit-port-sharing`, so that several apiservers can
/// share a port.
fn listen(addr: SocketAddr, permit_port_sharing: bool) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.set_reuseport(permit_port_sharing)?;
    socket.bind(addr)?;
    // Go asks for the kernel's somaxconn; 4096 is Linux's default, and the kernel
    // caps the backlog at somaxconn anyway.
    socket.listen(4096)
}

/// Keeps this apiserver in the `kubernetes` Service's endpoints while it runs (its
/// lease renewed every interval) and takes it out as its shutdown begins, before the
/// shutdown delay and the listener's stop, so in-cluster clients move to the other
/// apiservers at once.
async fn run_endpoint_lease(registry: Arc<Registry>, mut shutdown: watch::Receiver<bool>) {
    let mut ticker = tokio::time::interval(ferrokube_registry::api_endpoints::ENDPOINT_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The registry reconciled at start.
    ticker.tick().await;
    loop {
        tokio::select! {
            _ = ticker.tick() => {
                if let Err(e) = registry.reconcile_api_endpoints().await {
                    tracing::warn!(error = %e, "reconciling the kubernetes Service's endpoints failed");
                }
            }
            _ = shutdown.changed() => {
                if let Err(e) = registry.remove_api_endpoint().await {
                    tracing::warn!(error = %e, "removing this apiserver from the kubernetes Service's endpoints failed");
                }
                return;
            }
        }
    }
}

/// Runs `work` every `period` until `shutdown` turns: at once, or first after a period
/// when start-up did it already (`at_start` false). The shape of the apiserver's own
/// periodic controllers.
pub(crate) async fn every<F, Fut>(
    period: Duration,
    at_start: bool,
    mut shutdown: watch::Receiver<bool>,
    mut work: F,
) where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    if !at_start {
        ticker.tick().await;
    }
    loop {
        tokio::select! {
            _ = ticker.tick() => work().await,
            _ = shutdown.changed() => return,
        }
    }
}

/// Upstream's system namespaces controller: the namespaces the apiserver made at start
/// are made again, within a minute, when they go (kube-node-lease may be deleted).
async fn run_system_namespaces(registry: Arc<Registry>, shutdown: watch::Receiver<bool>) {
    every(Duration::from_secs(60), false, shutdown, || async {
        if let Err(e) = registry.ensure_system_namespaces().await {
            tracing::warn!(error = %e, "making the system namespaces failed");
        }
    })
    .await;
}

/// Upstream's SETTINGS_MAX_CONCURRENT_STREAMS when the flag is 0 (Go's HTTP/2 clients'
/// own limit, so that a client cannot open more streams than it would use).
const DEFAULT_HTTP2_MAX_STREAMS: u32 = 100;

/// The TLS handshake of a connection: the server's configuration, or, for a client
/// that sends no server name to an address a `--tls-sni-cert-key` pair is named by,
/// that pair's (upstream's `GetConfigForClient`).
#[derive(Clone)]
struct Handshake {
    config: Arc<rustls::ServerConfig>,
    by_local_ip: Arc<Vec<(std::net::IpAddr, Arc<rustls::ServerConfig>)>>,
}

impl Handshake {
    async fn accept(
        &self,
        tcp: tokio::net::TcpStream,
    ) -> std::io::Result<tokio_rustls::server::TlsStream<tokio::net::TcpStream>> {
        if self.by_local_ip.is_empty() {
            return tokio_rustls::TlsAcceptor::from(self.config.clone())
                .accept(tcp)
                .await;
        }
        let local = tcp.local_addr()?.ip().to_canonical();
        let start =
            tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), tcp).await?;
        let config = match start.client_hello().server_name() {
            Some(_) => None,
            None => self
                .by_local_ip
                .iter()
                .find(|(ip, _)| *ip == local)
                .map(|(_, config)| config.clone()),
        };
        start
            .into_stream(config.unwrap_or_else(|| self.config.clone()))
            .await
    }
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: Handshake,
    state: Arc<handler::State>,
    mut shutdown: watch::Receiver<bool>,
    http2_max_streams: u32,
    goaway_chance: f64,
) {
    let http2_max_streams = match http2_max_streams {
        0 => DEFAULT_HTTP2_MAX_STREAMS,
        n => n,
    };
    // Every connection task holds a sender; once the listener stops, the receiver
    // sees the channel close when the last connection has ended.
    let (connection_alive, mut connections_ended) = tokio::sync::mpsc::channel::<()>(1);
    loop {
        let (tcp, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => break,
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let state = state.clone();
        let alive = connection_alive.clone();
        let mut server_shutdown = shutdown.clone();
        tokio::spawn(async move {
            let _alive = alive;
            let tls =
                match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await {
                    Ok(Ok(tls)) => tls,
                    Ok(Err(e)) => {
                        tracing::debug!(%peer, error = %e, "TLS handshake failed");
                        return;
                    }
                    Err(_) => return,
                };
            let peer_certs: Arc<Vec<rustls_pki_types::CertificateDer<'static>>> = Arc::new(
                tls.get_ref()
                    .1
                    .peer_certificates()
                    .map(|c| c.iter().map(|c| c.clone().into_owned()).collect())
                    .unwrap_or_default(),
            );
            // `--goaway-chance`: an HTTP/2 request may ask for its connection's GOAWAY,
            // so the client's next requests open a new connection, which a load
            // balancer may send to another apiserver. Streams in flight finish.
            let goaway = Arc::new(tokio::sync::Notify::new());
            let decide_goaway = goaway.clone();
            let service = hyper::service::service_fn(move |req: hyper::Request<_>| {
                if goaway_chance > 0.0
                    && req.version() == http::Version::HTTP_2
                    && handler::random_fraction() < goaway_chance
                {
                    decide_goaway.notify_one();
                }
                let head = req.method() == http::Method::HEAD;
                let answer = handler::serve(state.clone(), peer, peer_certs.clone(), req);
                async move {
                    answer
                        .await
                        .map(|r| if head { handler::headers_only(r) } else { r })
                }
            });
            let mut builder = auto::Builder::new(TokioExecutor::new());
            builder.http2().max_concurrent_streams(http2_max_streams);
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(tls), service);
            let mut conn = std::pin::pin!(conn);
            let mut closing = false;
            let ended = loop {
                tokio::select! {
                    ended = conn.as_mut() => break ended,
                    _ = server_shutdown.changed(), if !closing => {
                        closing = true;
                        conn.as_mut().graceful_shutdown();
                    }
                    _ = goaway.notified(), if !closing => {
                        closing = true;
                        conn.as_mut().graceful_shutdown();
                    }
                }
            };
            if let Err(e) = ended {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    drop(connection_alive);
    let _ = tokio::time::timeout(Duration::from_secs(30), connections_ended.recv()).await;
}

/// The apiserver's options, named as upstream's flags. [`Options::into_config`]
/// turns them into a [`Config`] over a storage backend the caller chose.
#[derive(Clone, Debug)]
pub struct Options {
    pub bind_address: std::net::IpAddr,
    pub secure_port: u16,
    pub tls_cert_file: std::path::PathBuf,
    /// `--tls-sni-cert-key`: serving pairs chosen by the server name a client asks for.
    pub tls_sni_cert_keys: Vec<ferrokube_pki::serving::NamedCertKey>,
    pub tls_private_key_file: std::path::PathBuf,
    /// `--tls-min-version` and `--tls-cipher-suites`: what the port may negotiate.
    pub tls: ferrokube_pki::tls_options::TlsOptions,
    pub client_ca_file: Option<std::path::PathBuf>,
    pub token_auth_file: Option<std::path::PathBuf>,
    /// `--kubelet-client-certificate` / `--kubelet-client-key`: how the apiserver
    /// authenticates to kubelets.
    pub kubelet_client_certificate: Option<std::path::PathBuf>,
    pub kubelet_client_key: Option<std::path::PathBuf>,
    /// `--kubelet-certificate-authority`: the CA kubelet serving certificates chain to
    /// (unset: not verified, as upstream).
    pub kubelet_certificate_authority: Option<std::path::PathBuf>,
    /// `--enable-admission-plugins` / `--disable-admission-plugins` applied.
    pub admission_plugins: AdmissionPlugins,
    /// `--anonymous-auth` (None: not given, which means true): requests without
    /// credentials are `system:anonymous` (and then authorized like any other)
    /// instead of 401.
    pub anonymous_auth: Option<bool>,
    /// `--authorization-mode`: the authorizer chain after `system:masters`, in order.
    pub authorization_modes: Vec<AuthorizationMode>,
    /// `--service-account-issuer`: the first issues tokens, all are accepted.
    pub service_account_issuers: Vec<String>,
    /// `--service-account-key-file`: public keys verifying service account tokens.
    pub service_account_key_files: Vec<std::path::PathBuf>,
    /// `--service-account-signing-key-file`: the private key signing new tokens.
    pub service_account_signing_key_file: Option<std::path::PathBuf>,
    /// `--service-account-max-token-expiration` in seconds.
    pub service_account_max_token_expiration: Option<i64>,
    /// `--service-account-lookup`: legacy tokens need their Secret and ServiceAccount.
    pub service_account_lookup: bool,
    /// `--service-account-extend-token-expiration`: the kubelet's 1h7s pod tokens are
    /// valid for a year, with a `warnafter` claim at the hour.
    pub service_account_extend_token_expiration: bool,
    /// `--api-audiences` (default: the issuers).
    pub api_audiences: Vec<String>,
    pub service_cluster_ip_range: String,
    pub service_node_port_range: String,
    pub advertise_address: Option<std::net::IpAddr>,
    /// `--audit-policy-file`: audit.k8s.io/v1 Policy (YAML or JSON).
    pub audit_policy_file: Option<std::path::PathBuf>,
    /// `--audit-log-*`: where and how audit events are written.
    pub audit_log: AuditLogOptions,
    /// `--audit-webhook-*`: the webhook backend (off without a config file).
    pub audit_webhook: AuditWebhookOptions,
    /// `--proxy-client-cert-file` / `--proxy-client-key-file`: the client certificate
    /// the aggregator presents to extension apiservers.
    pub proxy_client_cert_file: Option<std::path::PathBuf>,
    pub proxy_client_key_file: Option<std::path::PathBuf>,
    /// `--enable-aggregator-routing`: reach extension apiservers at their Service's
    /// endpoints rather than its cluster IP.
    pub enable_aggregator_routing: bool,
    /// `--requestheader-client-ca-file`: front proxies (an aggregator) present client
    /// certificates of this CA and name the user in headers. Unset: no request-header
    /// authentication (the other `--requestheader-*` options are then unused).
    pub requestheader_client_ca_file: Option<std::path::PathBuf>,
    /// `--requestheader-allowed-names`: CNs a front proxy's certificate may have
    /// (empty: any certificate of the CA).
    pub requestheader_allowed_names: Vec<String>,
    /// `--requestheader-username-headers` (upstream kube-apiserver default: none;
    /// kubeadm: `X-Remote-User`).
    pub requestheader_username_headers: Vec<String>,
    /// `--requestheader-uid-headers` (kubeadm: none; `X-Remote-Uid` is suggested).
    pub requestheader_uid_headers: Vec<String>,
    /// `--requestheader-group-headers` (kubeadm: `X-Remote-Group`).
    pub requestheader_group_headers: Vec<String>,
    /// `--requestheader-extra-headers-prefix` (kubeadm: `X-Remote-Extra-`).
    pub requestheader_extra_headers_prefix: Vec<String>,
    /// `--enable-priority-and-fairness` (default true): requests are classified by
    /// the FlowSchemas and limited by their priority levels.
    pub enable_priority_and_fairness: bool,
    /// `--max-requests-inflight` (default 400) and `--max-mutating-requests-inflight`
    /// (default 200): with priority and fairness, their sum is the server's
    /// concurrency limit shared by the priority levels; without it, the limits of
    /// read-only and mutating requests in flight, beyond which requests get 429.
    pub max_requests_inflight: u32,
    pub max_mutating_requests_inflight: u32,
    /// `--allow-privileged` (default false, as upstream; kubeadm passes true): whether
    /// a pod (or a pod template) may have a privileged container.
    pub allow_privileged: bool,
    /// `--enable-bootstrap-token-auth`: bearer tokens of `bootstrap.kubernetes.io/token`
    /// Secrets in kube-system authenticate as `system:bootstrap:<token id>`.
    pub enable_bootstrap_token_auth: bool,
    /// `--kubelet-preferred-address-types`: the Node address types tried, in order,
    /// to reach a kubelet (logs, exec, port-forward, proxy).
    pub kubelet_preferred_address_types: Vec<String>,
    /// `--event-ttl` (default 1h): how long an Event is kept after its last write.
    pub event_ttl: Duration,
    /// `--oidc-issuer-url`, `--oidc-client-id`, `--oidc-username-claim`,
    /// `--oidc-username-prefix`, `--oidc-groups-claim`, `--oidc-groups-prefix`,
    /// `--oidc-required-claim`, `--oidc-signing-algs`: ID tokens of an OpenID Connect
    /// issuer authenticate (off while the issuer URL is empty).
    pub oidc: OidcConfig,
    /// `--authentication-config`: structured authentication (JWT issuers with claim
    /// rules and mappings, `anonymous` with its conditions), instead of the `--oidc-*` flags
    /// (see [`authn_config`]).
    pub authentication_config_file: Option<std::path::PathBuf>,
    /// `--oidc-ca-file`: the CA of the issuer's serving certificate (unset: the
    /// host's roots).
    pub oidc_ca_file: Option<std::path::PathBuf>,
    /// `--authentication-token-webhook-config-file`: a kubeconfig naming the service
    /// that bearer tokens no other authenticator knows are sent to as TokenReviews.
    pub authentication_token_webhook_config_file: Option<std::path::PathBuf>,
    /// `--authentication-token-webhook-cache-ttl` (default 2m0s).
    pub authentication_token_webhook_cache_ttl: Duration,
    /// `--authentication-token-webhook-version` (default v1beta1).
    pub authentication_token_webhook_version: ReviewVersion,
    /// `--authorization-webhook-*`: the service the `Webhook` authorization mode asks.
    pub authorization_webhook: AuthorizationWebhookOptions,
    /// `--authorization-config`: the structured authorizer chain, instead of
    /// `authorization_modes` and `authorization_webhook` (see [`authz_config`]).
    pub authorization_config_file: Option<std::path::PathBuf>,
    /// `--request-timeout` (default 1m0s): see [`Config::request_timeout`].
    pub request_timeout: Duration,
    /// `--min-request-timeout` (default 1800 s): see [`Config::min_request_timeout`].
    pub min_request_timeout: Duration,
    /// `--shutdown-delay-duration`, `--shutdown-send-retry-after`,
    /// `--shutdown-watch-termination-grace-period`.
    pub shutdown: ShutdownOptions,
    /// `--strict-transport-security-directives` (empty: no header).
    pub strict_transport_security_directives: Vec<String>,
    /// `--endpoint-reconciler-type` (with `--apiserver-count`): who keeps the
    /// `kubernetes` Service's endpoints.
    pub endpoint_reconciler: EndpointReconciler,
    /// `--etcd-compaction-interval` (default 5m; zero: never): how often the store's
    /// history is compacted, on either backend.
    pub compaction_interval: Duration,
    /// `--permit-port-sharing`: see [`Config::permit_port_sharing`].
    pub permit_port_sharing: bool,
    /// `--http2-max-streams-per-connection`: see
    /// [`Config::http2_max_streams_per_connection`].
    pub http2_max_streams_per_connection: u32,
    /// `--goaway-chance`: see [`Config::goaway_chance`].
    pub goaway_chance: f64,
    /// `--cors-allowed-origins`: regular expressions of the origins allowed.
    pub cors_allowed_origins: Vec<String>,
    /// `--service-account-jwks-uri`: the `jwks_uri` of the issuer's discovery
    /// document (unset: `https://<external address>/openid/v1/jwks`).
    pub service_account_jwks_uri: Option<String>,
    /// `--external-hostname`: the host in URLs this apiserver hands out (unset: the
    /// advertise address).
    pub external_hostname: Option<String>,
    /// `--etcd-healthcheck-timeout` and `--etcd-readycheck-timeout`.
    pub storage_check_timeouts: StorageCheckTimeouts,
    /// Checks `/healthz`, `/readyz` (and, if they ask, `/livez`) run besides the
    /// server's own, e.g. the KMS plugins' `kms-providers`.
    pub health_checks: Vec<Arc<dyn HealthCheck>>,
    /// Metrics `/metrics` shows besides the server's own, e.g. encryption at rest's.
    pub metrics_collectors: Vec<Arc<dyn Collector>>,
    /// `--runtime-config`: the built-in APIs served.
    pub api_enablement: ApiEnablement,
    /// This apiserver's identity (upstream's `apiserver-<uuid>`): metrics label their
    /// series with its hash. Give the same one to anything else that labels with it.
    pub apiserver_id: String,
    /// `--feature-gates`, as far as this server acts on them.
    pub features: features::Features,
    /// `--encryption-provider-config` when `--encryption-provider-config-automatic-reload`
    /// is set: the binary built the storage from it; the server follows the file.
    pub encryption_config_reload: Option<FollowedConfig>,
}

/// Upstream's default `--kubelet-preferred-address-types`.
pub const DEFAULT_KUBELET_PREFERRED_ADDRESS_TYPES: [&str; 5] = [
    "Hostname",
    "InternalDNS",
    "InternalIP",
    "ExternalDNS",
    "ExternalIP",
];

impl Options {
    /// The authorizer chain as configured: `--authorization-config` (with the file's
    /// text), or `--authorization-mode` with the `--authorization-webhook-*` flags.
    fn configured_authorizers(
        &self,
    ) -> Result<(Vec<authz_config::ConfiguredAuthorizer>, Option<String>), ConfigError> {
        use authz_config::ConfiguredAuthorizer;
        if let Some(path) = &self.authorization_config_file {
            if self.authorization_webhook.config_file.is_some() {
                return Err(ConfigError::Auth(
                    "--authorization-config cannot be used with --authorization-webhook-config-file: the file configures the webhooks"
                        .into(),
                ));
            }
            let loaded = authz_config::load(path).map_err(ConfigError::Auth)?;
            return Ok((loaded.config, Some(loaded.text)));
        }
        let has_webhook_mode = self
            .authorization_modes
            .contains(&AuthorizationMode::Webhook);
        match (&self.authorization_webhook.config_file, has_webhook_mode) {
            (Some(_), true) | (None, false) => {}
            // Upstream's messages.
            (None, true) => {
                return Err(ConfigError::Auth(
                    "authorization-mode Webhook's authorization config file not passed".into(),
                ));
            }
            (Some(_), false) => {
                return Err(ConfigError::Auth(
                    "cannot specify --authorization-webhook-config-file without mode Webhook"
                        .into(),
                ));
            }
        }
        let configured = self
            .authorization_modes
            .iter()
            .map(
                |&mode| match (&self.authorization_webhook.config_file, mode) {
                    (Some(kubeconfig), AuthorizationMode::Webhook) => {
                        ConfiguredAuthorizer::Webhook {
                            kubeconfig: kubeconfig.clone(),
                            settings: self.authorization_webhook.settings(),
                        }
                    }
                    _ => ConfiguredAuthorizer::Mode(mode),
                },
            )
            .collect();
        Ok((configured, None))
    }

    pub fn new(
        tls_cert_file: std::path::PathBuf,
        tls_private_key_file: std::path::PathBuf,
    ) -> Self {
        Options {
            bind_address: std::net::IpAddr::from([0, 0, 0, 0]),
            secure_port: 6443,
            tls_cert_file,
            tls_sni_cert_keys: Vec::new(),
            tls_private_key_file,
            tls: Default::default(),
            client_ca_file: None,
            token_auth_file: None,
            kubelet_client_certificate: None,
            kubelet_client_key: None,
            kubelet_certificate_authority: None,
            admission_plugins: AdmissionPlugins::default(),
            anonymous_auth: None,
            authorization_modes: vec![AuthorizationMode::Node, AuthorizationMode::Rbac],
            service_account_issuers: Vec::new(),
            service_account_key_files: Vec::new(),
            service_account_signing_key_file: None,
            service_account_max_token_expiration: None,
            service_account_lookup: true,
            service_account_extend_token_expiration: true,
            api_audiences: Vec::new(),
            service_cluster_ip_range: "10.96.0.0/12".into(),
            service_node_port_range: "30000-32767".into(),
            advertise_address: None,
            audit_policy_file: None,
            audit_log: AuditLogOptions::default(),
            audit_webhook: AuditWebhookOptions::default(),
            proxy_client_cert_file: None,
            proxy_client_key_file: None,
            enable_aggregator_routing: false,
            requestheader_client_ca_file: None,
            requestheader_allowed_names: Vec::new(),
            requestheader_username_headers: Vec::new(),
            requestheader_uid_headers: Vec::new(),
            requestheader_group_headers: Vec::new(),
            requestheader_extra_headers_prefix: Vec::new(),
            enable_priority_and_fairness: true,
            max_requests_inflight: 400,
            max_mutating_requests_inflight: 200,
            allow_privileged: false,
            enable_bootstrap_token_auth: false,
            kubelet_preferred_address_types: DEFAULT_KUBELET_PREFERRED_ADDRESS_TYPES
                .map(String::from)
                .to_vec(),
            event_ttl: Duration::from_secs(3600),
            oidc: OidcConfig::default(),
            oidc_ca_file: None,
            authentication_config_file: None,
            authentication_token_webhook_config_file: None,
            authentication_token_webhook_cache_ttl: Duration::from_secs(120),
            authentication_token_webhook_version: ReviewVersion::V1beta1,
            authorization_webhook: AuthorizationWebhookOptions::default(),
            authorization_config_file: None,
            request_timeout: Duration::from_secs(60),
            min_request_timeout: Duration::from_secs(1800),
            shutdown: ShutdownOptions::default(),
            strict_transport_security_directives: Vec::new(),
            endpoint_reconciler: EndpointReconciler::Lease,
            compaction_interval: Duration::from_secs(300),
            permit_port_sharing: false,
            http2_max_streams_per_connection: 0,
            goaway_chance: 0.0,
            cors_allowed_origins: Vec::new(),
            service_account_jwks_uri: None,
            external_hostname: None,
            storage_check_timeouts: StorageCheckTimeouts::default(),
            health_checks: Vec::new(),
            metrics_collectors: Vec::new(),
            api_enablement: ApiEnablement::default(),
            apiserver_id: new_apiserver_id(),
            features: features::Features::default(),
            encryption_config_reload: None,
        }
    }

    /// Reads the files, builds the registry over `storage` (filling the watch cache
    /// and creating built-in objects) and the authn/authz chain.
    pub async fn into_config(
        self,
        storage: Arc<dyn ferrokube_storage::Storage>,
    ) -> Result<Config, ConfigError> {
        let read = |p: &std::path::Path| {
            std::fs::read_to_string(p).map_err(|e| ConfigError::Read(p.display().to_string(), e))
        };
        let cert = read(&self.tls_cert_file)?;
        let key = read(&self.tls_private_key_file)?;
        let ca = match &self.client_ca_file {
            Some(p) => Some(read(p)?),
            None => None,
        };
        let request_header = match &self.requestheader_client_ca_file {
            Some(p) => Some((
                read(p)?,
                ferrokube_auth::RequestHeaderConfig {
                    username_headers: self.requestheader_username_headers.clone(),
                    uid_headers: self.requestheader_uid_headers.clone(),
                    group_headers: self.requestheader_group_headers.clone(),
                    extra_header_prefixes: self.requestheader_extra_headers_prefix.clone(),
                    allowed_names: self.requestheader_allowed_names.clone(),
                },
            )),
            None => None,
        };
        // Each bundle may be replaced while the server runs (cert_reload.rs); the TLS
        // layer and the authenticators all verify against the one installed then.
        let client_ca_file = match (&self.client_ca_file, &ca) {
            (Some(path), Some(pem)) => Some(
                cert_reload::CaFile::new("--client-ca-file", path.clone(), pem)
                    .map_err(|e| ConfigError::Auth(format!("--client-ca-file: {e}")))?,
            ),
            _ => None,
        };
        let request_header_file = match (&self.requestheader_client_ca_file, &request_header) {
            (Some(path), Some((pem, config))) => Some((
                cert_reload::CaFile::new("--requestheader-client-ca-file", path.clone(), pem)
                    .map_err(|e| {
                        ConfigError::Auth(format!("--requestheader-client-ca-file: {e}"))
                    })?,
                config.clone(),
            )),
            _ => None,
        };
        let client_ca = client_ca_file.as_ref().map(|f| f.ca().clone());
        let request_header_ca = request_header_file.as_ref().map(|(f, _)| f.ca().clone());
        // The TLS layer accepts client certificates of both CAs (upstream's union of
        // the client CA and request-header CA pools); each authenticator verifies the
        // chain again against its own CA only.
        let tls_client_cas: Vec<_> = client_ca
            .iter()
            .chain(request_header_ca.iter())
            .cloned()
            .collect();
        let tls_client_verifier = (!tls_client_cas.is_empty())
            .then(|| ferrokube_auth::dynamic_client_cert_verifier(tls_client_cas));
        let serving = ferrokube_pki::serving::ServingCertificate::new(&cert, &key)
            .map_err(|e| ServerError::Tls(e.to_string()))?;
        let mut sni_pairs = Vec::new();
        let mut sni_files = Vec::new();
        for (i, named) in self.tls_sni_cert_keys.iter().enumerate() {
            let (cert, key) = (read(&named.cert_file)?, read(&named.key_file)?);
            let pair =
                ferrokube_pki::serving::ServingCertificate::new(&cert, &key).map_err(|e| {
                    ServerError::Tls(format!(
                        "invalid SNI cert keypair [{i}/\"{},{}\"]: {e}",
                        named.cert_file.display(),
                        named.key_file.display()
                    ))
                })?;
            sni_files.push(ferrokube_pki::reload::ServingFiles::sni(
                (named.cert_file.clone(), &cert),
                (named.key_file.clone(), &key),
                pair.clone(),
            ));
            sni_pairs.push((pair, named.names.clone()));
        }
        // Pairs named by an address: upstream serves them to clients that send no
        // server name and reach the apiserver on that address.
        let by_local_ip: Vec<(
            std::net::IpAddr,
            Arc<ferrokube_pki::serving::ServingCertificate>,
        )> = sni_pairs
            .iter()
            .flat_map(|(pair, names): &(Arc<_>, Vec<String>)| {
                names
                    .iter()
                    .filter_map(|n| n.parse::<std::net::IpAddr>().ok())
                    .map(move |ip| (ip.to_canonical(), pair.clone()))
            })
            .collect();
        let resolver: Arc<dyn rustls::server::ResolvesServerCert> = if sni_pairs.is_empty() {
            serving.clone()
        } else {
            ferrokube_pki::serving::SniCertificates::new(serving.clone(), sni_pairs)
        };
        let tls = ferrokube_pki::serving::server_config_with_resolver(
            resolver,
            tls_client_verifier,
            ferrokube_pki::serving::ALPN_H2_HTTP1,
            &self.tls,
        )
        .map_err(|e| ServerError::Tls(e.to_string()))?;
        let tls_by_local_ip = by_local_ip
            .into_iter()
            .map(|(ip, pair)| {
                let mut config = (*tls).clone();
                config.cert_resolver = pair;
                (ip, Arc::new(config))
            })
            .collect();
        let certificate_files = cert_reload::CertificateFiles::new(
            ferrokube_pki::reload::ServingFiles::new(
                (self.tls_cert_file.clone(), &cert),
                (self.tls_private_key_file.clone(), &key),
                serving,
            ),
            sni_files,
            client_ca_file,
            request_header_file,
        );
        // The policy is checked before the store is touched: a bad file stops the start.
        let audit_webhook = match &self.audit_webhook.config_file {
            Some(path) => Some((
                &self.audit_webhook,
                webhook_client::KubeconfigWebhook::from_file(path)
                    .await
                    .map_err(|e| {
                        ConfigError::Audit(format!(
                            "--audit-webhook-config-file {}: {e}",
                            path.display()
                        ))
                    })?,
            )),
            None => None,
        };
        let audit = audit::Auditor::new(
            self.audit_policy_file.as_deref(),
            &self.audit_log,
            audit_webhook,
        )
        .map_err(ConfigError::Audit)?;
        let mut authenticators: Vec<Box<dyn Authenticator>> = Vec::new();
        // First, as upstream: a front proxy's request is the user its headers name.
        if let (Some(front_proxy_ca), Some((_, config))) = (&request_header_ca, &request_header) {
            authenticators.push(Box::new(
                ferrokube_auth::RequestHeaderAuthenticator::with_ca(
                    front_proxy_ca.clone(),
                    config.clone(),
                )
                .map_err(|e| ConfigError::Auth(format!("--requestheader-*: {e}")))?,
            ));
        }
        if let Some(client_ca) = &client_ca {
            authenticators.push(Box::new(
                ferrokube_auth::X509Authenticator::with_ca(client_ca.clone())
                    .parsing_uid(self.features.uid_from_client_certificate),
            ));
        }
        if let Some(p) = &self.token_auth_file {
            authenticators.push(Box::new(
                ferrokube_auth::TokenFileAuthenticator::from_csv_file(p)
                    .map_err(|e| ConfigError::Auth(e.to_string()))?,
            ));
        }
        let advertise_ip = self.advertise_address.unwrap_or(match self.bind_address {
            ip if ip.is_unspecified() => std::net::IpAddr::from([127, 0, 0, 1]),
            ip => ip,
        });
        let metrics = Arc::new(Metrics::new(
            &self.apiserver_id,
            self.metrics_collectors.clone(),
        ));
        let storage: Arc<dyn ferrokube_storage::Storage> =
            Arc::new(metrics::MeteredStorage::new(storage, metrics.clone()));
        let registry = Registry::new(
            storage,
            ferrokube_registry::RegistryConfig {
                service_cluster_ip_range: self.service_cluster_ip_range.clone(),
                service_node_port_range: self.service_node_port_range.clone(),
                advertise_address: advertise_ip,
                secure_port: self.secure_port,
                patch: ferrokube_registry::store::builtin_patch,
                allow_privileged: self.allow_privileged,
                event_ttl: self.event_ttl,
                endpoint_reconciler: self.endpoint_reconciler,
                compaction_interval: self.compaction_interval,
                ..Default::default()
            },
        )
        .await
        .map_err(|e| ConfigError::Registry(e.to_string()))?;
        security::reconcile_bootstrap_policy(&registry)
            .await
            .map_err(|e| ConfigError::Registry(format!("bootstrap RBAC policy: {e}")))?;
        // Upstream's priority-and-fairness-config-producer: whether or not the filter
        // is on, the API serves the bootstrap configuration.
        flowcontrol::bootstrap::ensure(&registry)
            .await
            .map_err(|e| ConfigError::Registry(format!("bootstrap flow control: {e}")))?;
        let (flow_control, max_in_flight) = if self.enable_priority_and_fairness {
            // As upstream: the two limits together are what the priority levels share.
            let server_limit = self
                .max_requests_inflight
                .saturating_add(self.max_mutating_requests_inflight);
            let apf =
                flowcontrol::Apf::new(&registry, server_limit).map_err(ConfigError::Registry)?;
            (Some(apf), None)
        } else {
            let limits = maxinflight::MaxInFlight::new(
                self.max_requests_inflight,
                self.max_mutating_requests_inflight,
            );
            (None, limits)
        };
        authentication_info::publish(
            &registry,
            &authentication_info::AuthenticationInfo {
                client_ca: ca.clone(),
                request_header,
            },
        )
        .await
        .map_err(|e| {
            ConfigError::Registry(format!(
                "{}/{}: {e}",
                authentication_info::NAMESPACE,
                authentication_info::NAME
            ))
        })?;
        let (configured, authorization_config_text) = self.configured_authorizers()?;
        let state = Arc::new(
            security::ClusterState::new(&registry, self.features)
                .map_err(|e| ConfigError::Registry(e.to_string()))?,
        );
        let started_with: Vec<AuthorizationMode> = configured.iter().map(|c| c.mode()).collect();
        let authorizer = Arc::new(
            authz_config::build(configured, &state, authorization_config_text.is_some())
                .await
                .map_err(ConfigError::Auth)?,
        );
        let authz_reload = match (&self.authorization_config_file, authorization_config_text) {
            (Some(path), Some(text)) => Some(config_reload::Followed::new(
                path.clone(),
                text,
                config_reload::Authorizers::new(authorizer.clone(), state.clone(), started_with),
            )),
            _ => None,
        };
        let registry = Arc::new(registry);
        // Custom resources with a conversion webhook convert through this client.
        registry
            .custom()
            .set_conversion_webhook(Arc::new(conversion::ConversionWebhooks::new(
                webhook_client::WebhookClient::new(&registry).map_err(ConfigError::Registry)?,
            )));
        let admission = admission::Chain::new(&admission::PluginInit {
            registry: &registry,
            authorizer: &authorizer,
            security: &state,
            options: &self.admission_plugins,
        })
        .map_err(ConfigError::Admission)?;
        let tokens = self.service_account_tokens(&registry, &advertise_ip)?;
        let mut enablement = self.api_enablement.clone();
        // Without a signing key there is no issuer, and upstream registers no
        // TokenRequest subresource.
        if tokens.as_ref().is_none_or(|t| t.issuer.is_none()) {
            enablement = enablement.without_subresource("", "serviceaccounts", "token");
        }
        if let Some(t) = &tokens {
            authenticators.push(Box::new(t.authenticator.clone()));
        }
        if self.enable_bootstrap_token_auth {
            authenticators.push(Box::new(
                bootstrap_token::BootstrapTokenAuthenticator::new(&registry)
                    .ok_or_else(|| ConfigError::Registry("no store for secrets".into()))?,
            ));
        }
        // After the bootstrap tokens, as upstream's token authenticator order.
        let mut anonymous = ferrokube_auth::AnonymousAuthenticator::everywhere();
        let mut anonymous_enabled = self.anonymous_auth.unwrap_or(true);
        let mut authn_reload = None;
        let oidc = match &self.authentication_config_file {
            Some(path) => {
                if self.oidc.any_set() || self.oidc_ca_file.is_some() {
                    return Err(ConfigError::Auth(
                        "authentication-config file and oidc-* flags are mutually exclusive".into(),
                    ));
                }
                let loaded = authn_config::load(path, &self.service_account_issuers)
                    .map_err(ConfigError::Auth)?;
                let file = loaded.config;
                if let Some(a) = &file.anonymous {
                    if self.anonymous_auth.is_some() {
                        // Upstream's message, with its spelling.
                        return Err(ConfigError::Auth(
                            "anonymous: Forbidden: --anonynous-auth flag cannot be set when anonymous field is configured in authentication configuration file".into(),
                        ));
                    }
                    anonymous_enabled = a.enabled;
                    anonymous = ferrokube_auth::AnonymousAuthenticator::on_paths(a.paths.clone());
                }
                let fetchers = file
                    .jwt
                    .into_iter()
                    .map(oidc::build_jwt)
                    .collect::<Result<Vec<_>, _>>()?;
                // One place in the chain, whose authenticators a changed file replaces;
                // their fetchers run under the file's follower.
                let jwt = Arc::new(oidc::JwtAuthenticators::new(
                    fetchers
                        .iter()
                        .map(oidc::KeyFetcher::authenticator)
                        .collect(),
                ));
                authenticators.push(Box::new(jwt.clone()));
                authn_reload = Some(config_reload::Followed::new(
                    path.clone(),
                    loaded.text,
                    config_reload::Authentication::new(
                        jwt,
                        fetchers,
                        self.service_account_issuers.clone(),
                        file.anonymous,
                    ),
                ));
                Vec::new()
            }
            None => oidc::build(
                &self.oidc,
                self.oidc_ca_file.as_deref(),
                &self.service_account_issuers,
            )?
            .into_iter()
            .collect(),
        };
        for fetcher in &oidc {
            authenticators.push(Box::new(fetcher.authenticator()));
        }
        // Last of the token authenticators, as upstream orders them.
        let token_webhook = match &self.authentication_token_webhook_config_file {
            Some(path) => Some(Arc::new(
                token_webhook::TokenWebhook::from_file(
                    path,
                    self.authentication_token_webhook_version,
                    match &tokens {
                        Some(t) => t.api_audiences.clone(),
                        None => self.api_audiences.clone(),
                    },
                    self.authentication_token_webhook_cache_ttl,
                )
                .await
                .map_err(|e| {
                    ConfigError::Auth(format!("--authentication-token-webhook-config-file: {e}"))
                })?,
            )),
            None => None,
        };
        let kubelet_cert_key = match (&self.kubelet_client_certificate, &self.kubelet_client_key) {
            (Some(c), Some(k)) => Some((read(c)?, read(k)?)),
            (None, None) => None,
            _ => {
                return Err(ConfigError::Kubelet(
                    "--kubelet-client-certificate and --kubelet-client-key go together".into(),
                ));
            }
        };
        let kubelet_ca = match &self.kubelet_certificate_authority {
            Some(p) => Some(read(p)?),
            None => None,
        };
        let kubelet = KubeletClient::new(
            kubelet_cert_key
                .as_ref()
                .map(|(c, k)| (c.as_str(), k.as_str())),
            kubelet_ca.as_deref(),
        )
        .map_err(|e| ConfigError::Kubelet(e.to_string()))?
        .with_preferred_address_types(self.kubelet_preferred_address_types.clone());
        let proxy_client = match (&self.proxy_client_cert_file, &self.proxy_client_key_file) {
            (Some(c), Some(k)) => Some((read(c)?, read(k)?)),
            (None, None) => None,
            _ => {
                return Err(ConfigError::Aggregator(
                    "--proxy-client-cert-file and --proxy-client-key-file go together".into(),
                ));
            }
        };
        Ok(Config {
            bind: SocketAddr::new(self.bind_address, self.secure_port),
            permit_port_sharing: self.permit_port_sharing,
            http2_max_streams_per_connection: self.http2_max_streams_per_connection,
            goaway_chance: self.goaway_chance,
            registry,
            tls,
            tls_by_local_ip,
            authenticator: Arc::new(if anonymous_enabled {
                ferrokube_auth::UnionAuthenticator::new(authenticators).with_anonymous(anonymous)
            } else {
                ferrokube_auth::UnionAuthenticator::new(authenticators)
            }),
            tokens,
            kubelet: Arc::new(kubelet),
            authorizer,
            security: state,
            admission: Arc::new(admission),
            audit,
            metrics,
            advertise: SocketAddr::new(advertise_ip, self.secure_port).to_string(),
            max_body_bytes: 3 * 1024 * 1024,
            request_timeout: self.request_timeout,
            min_request_timeout: self.min_request_timeout,
            shutdown: self.shutdown,
            strict_transport_security: strict_transport_security(
                &self.strict_transport_security_directives,
            )
            .map_err(ConfigError::Flag)?,
            cors: CorsOrigins::parse(&self.cors_allowed_origins).map_err(ConfigError::Flag)?,
            storage_check_timeouts: self.storage_check_timeouts,
            health_checks: self.health_checks,
            post_start_hooks: health::PostStartHooks::new(health::HookConfig {
                priority_and_fairness: flow_control.is_some(),
                proxy_client_cert: proxy_client.is_some(),
                core: enablement.serves_group_version("", "v1"),
                scheduling: enablement.serves_group_version("scheduling.k8s.io", "v1"),
                flowcontrol: enablement.serves_group_version("flowcontrol.apiserver.k8s.io", "v1"),
                rbac: enablement.serves_group_version("rbac.authorization.k8s.io", "v1"),
                apiserver_identity: self.features.apiserver_identity,
            }),
            apiserver_id: self.apiserver_id,
            aggregator: AggregatorConfig {
                proxy_client,
                route_to_endpoints: self.enable_aggregator_routing,
                enablement: Arc::new(enablement),
            },
            flow_control,
            max_in_flight,
            oidc,
            token_webhook,
            certificate_files,
            authn_reload,
            authz_reload,
            encryption_reload: self.encryption_config_reload.map(|followed| {
                config_reload::Followed::new(
                    followed.path,
                    followed.text,
                    config_reload::Encryption::new(followed.apply),
                )
            }),
        })
    }
}

impl Options {
    /// `--service-account-jwks-uri` (an https URL), or this apiserver's own
    /// `/openid/v1/jwks` at `--external-hostname` or the advertise address.
    fn jwks_uri(&self, advertise_ip: &std::net::IpAddr) -> Result<String, ConfigError> {
        if let Some(uri) = &self.service_account_jwks_uri {
            return match uri.parse::<http::Uri>() {
                Ok(parsed) if parsed.scheme_str() == Some("https") && parsed.host().is_some() => {
                    Ok(uri.clone())
                }
                _ => Err(ConfigError::Flag(format!(
                    "service-account-jwks-uri requires https scheme, parsed as: {uri}"
                ))),
            };
        }
        let host = match &self.external_hostname {
            Some(host) if !host.is_empty() => {
                // An IPv6 literal is bracketed, as Go's JoinHostPort does.
                if host.contains(':') && !host.starts_with('[') {
                    format!("[{host}]:{}", self.secure_port)
                } else {
                    format!("{host}:{}", self.secure_port)
                }
            }
            _ => SocketAddr::new(*advertise_ip, self.secure_port).to_string(),
        };
        Ok(format!("https://{host}/openid/v1/jwks"))
    }

    /// The service account token authenticator and issuer, when an issuer and keys
    /// are configured (upstream requires both for the TokenRequest API).
    fn service_account_tokens(
        &self,
        registry: &Registry,
        advertise_ip: &std::net::IpAddr,
    ) -> Result<Option<Arc<tokens::Tokens>>, ConfigError> {
        let read = |p: &std::path::Path| {
            std::fs::read_to_string(p).map_err(|e| ConfigError::Read(p.display().to_string(), e))
        };
        if self.service_account_issuers.is_empty() {
            return Ok(None);
        }
        let mut public = String::new();
        for p in &self.service_account_key_files {
            public.push_str(&read(p)?);
            public.push('\n');
        }
        let signing = match &self.service_account_signing_key_file {
            Some(p) => Some(read(p)?),
            None => None,
        };
        if public.trim().is_empty() {
            return Err(ConfigError::Auth(
                "--service-account-key-file is required with --service-account-issuer".into(),
            ));
        }
        let sa_err =
            |e: ferrokube_auth::authn::serviceaccount::TokenError| ConfigError::Auth(e.to_string());
        let issuer = match &signing {
            Some(key) => Some(
                ferrokube_auth::authn::serviceaccount::TokenIssuer::new(
                    key,
                    &public,
                    &self.service_account_issuers[0],
                )
                .map_err(sa_err)?,
            ),
            None => None,
        };
        let store = |group: &str, plural: &str| {
            registry
                .store(group, "v1", plural)
                .cloned()
                .ok_or_else(|| ConfigError::Registry(format!("no store for {plural}")))
        };
        let audiences = if self.api_audiences.is_empty() {
            self.service_account_issuers.clone()
        } else {
            self.api_audiences.clone()
        };
        let objects = tokens::CachedObjects {
            service_accounts: store("", "serviceaccounts")?,
            pods: store("", "pods")?,
            secrets: store("", "secrets")?,
        };
        let authenticator = ferrokube_auth::ServiceAccountTokenAuthenticator::new(
            &public,
            self.service_account_issuers.clone(),
            audiences.clone(),
            objects,
        )
        .map_err(sa_err)?
        .with_legacy_lookup(self.service_account_lookup);
        Ok(Some(Arc::new(tokens::Tokens {
            issuer,
            authenticator: Arc::new(authenticator),
            api_audiences: audiences,
            max_expiration: self.service_account_max_token_expiration,
            extend_expiration: self.service_account_extend_token_expiration,
            jwks_uri: self.jwks_uri(advertise_ip)?,
            service_accounts: store("", "serviceaccounts")?,
            pods: store("", "pods")?,
            secrets: store("", "secrets")?,
            nodes: store("", "nodes")?,
            node_audiences_restricted: self.features.node_token_audiences,
        })))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading {0}: {1}")]
    Read(String, std::io::Error),
    #[error(transparent)]
    Server(#[from] ServerError),
    #[error("authentication: {0}")]
    Auth(String),
    #[error("registry: {0}")]
    Registry(String),
    #[error("{0}")]
    Kubelet(String),
    #[error("admission: {0}")]
    Admission(String),
    #[error("audit: {0}")]
    Audit(String),
    #[error("{0}")]
    Aggregator(String),
    /// A flag's value that does not parse (the message names the flag).
    #[error("{0}")]
    Flag(String),
}
