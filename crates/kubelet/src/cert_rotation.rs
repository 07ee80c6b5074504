//! Kubelet client certificate rotation (`rotateCertificates`, `--rotate-certificates`):
//! the kubelet renews its `system:node:<nodeName>` client certificate before it
//! expires and goes on with the new one without a restart.
//!
//! Upstream followed: client-go's `util/certificate/certificate_manager.go` (the
//! manager: `getCurrentCertificateOrBootstrap`, `nextRotationDeadline`,
//! `jitteryDuration`, `certSatisfiesTemplateLocked`, `rotateCerts`, `Start`'s loop,
//! `updateServerError`), `pkg/kubelet/certificate/kubelet.go`
//! (`NewKubeletClientCertificateManager`: the store and the template),
//! `cmd/kubelet/app/server.go` (`buildKubeletClientConfig`,
//! `buildClientCertificateManager`) and `pkg/kubelet/certificate/transport.go`
//! (`UpdateTransport`, whose client is [`crate::rotating_transport`]):
//!
//! - The first certificate is the file store's current one: `<cert-dir>/
//!   kubelet-client-current.pem`, else the kubeconfig's `client-certificate` and
//!   `client-key` files; used unless it has expired. Otherwise the kubeconfig's inline
//!   `client-certificate-data`/`client-key-data` (kubeadm's "high powered" initial
//!   certificate) is written to the store, used, and rotated at once. Without any, the
//!   first request is made with `--bootstrap-kubeconfig`'s credentials.
//! - The rotation deadline is notBefore plus 70 to 90 % of the certificate's lifetime,
//!   uniformly at random (`wait.Jitter(total, 0.2) - 0.3·total`), so nodes that joined
//!   together do not renew together; it is now when the certificate's CN is not
//!   `system:node:<nodeName>` or its O lacks `system:nodes`.
//! - At the deadline: a new ECDSA P-256 key, a CertificateSigningRequest named
//!   `csr-<random>` (`generateName`) with the bootstrap's subject, signer
//!   (`kubernetes.io/kube-apiserver-client-kubelet`) and usages, made with the current
//!   certificate (so kube-controller-manager's csrapproving controller recognizes a
//!   node renewing itself, `selfnodeclient`), or with the bootstrap kubeconfig when the
//!   current certificate is missing or expired; waited on for at most 15 minutes.
//! - The issued pair is written through the bootstrap's file store
//!   (`kubelet-client-<timestamp>.pem`, the `kubelet-client-current.pem` symlink
//!   switched) and installed in the client, which closes every connection made with
//!   the old certificate. The kubeconfig is not rewritten: it names the symlink.
//! - A failed attempt is retried after 2, 4, 8 and 16 s (each +0–10 %), then every
//!   32 s until one succeeds; a second after a success the next deadline is computed.
//! - [`ClientCertManager::wait_unusable`] is upstream's `exitAfter`: no valid
//!   certificate for 5 minutes while the server answers, and the kubelet exits so its
//!   supervisor restarts it into the bootstrap.
//!
//! The serving certificate (`serverTLSBootstrap`, upstream
//! `NewKubeletServerCertificateManager`) is [`ServingCertManager`], driven by the same
//! loop (`Rotation`) with the same request, wait and file store, through a
//! [`CsrTemplate`]:
//!
//! - Subject `CN=system:node:<nodeName>, O=system:nodes`, signer
//!   `kubernetes.io/kubelet-serving`, usages `digital signature` and `server auth`
//!   (the key is P-256, so no `key encipherment`), SANs from the node's addresses as
//!   upstream's `addressesToHostnamesAndIPs`; nothing is requested without an IP.
//! - kube-controller-manager does not approve these requests; until an administrator
//!   does (`kubectl certificate approve`) the slot is empty and the HTTPS server's
//!   handshakes fail. The pair is stored as `<cert-dir>/kubelet-server-<ts>.pem` with
//!   the `kubelet-server-current.pem` symlink, and installed in the
//!   [`ServingCertSlot`] that the server resolves at each handshake.
//! - The deadline is the client's (70–90 % of the lifetime), or now when the
//!   certificate lacks a name, address or O the template asks for; while waiting, a
//!   changed template (new addresses) rotates at once, as upstream's dynamic template.
//!
//! Metrics (upstream's, in [`CertificateMetrics`], registered by each manager as it is
//! built): the client manager's `kubelet_certificate_manager_client_ttl_seconds` and
//! `kubelet_certificate_manager_client_expiration_renew_errors` (each failed attempt),
//! the serving manager's `kubelet_certificate_manager_server_ttl_seconds`,
//! `kubelet_certificate_manager_server_rotation_seconds` (the age of the certificate a
//! new one replaces) and `kubelet_server_expiration_renew_errors`.
//!
//! Left out: requesting `expirationSeconds`, the serving
//! store's `tlsCertFile`/`tlsPrivateKeyFile` fallback (those files disable the
//! bootstrap instead), addresses read from the node's last status (the kubelet
//! binary passes the addresses its node status reports: `--node-ip` or the default
//! IP, and the hostname), and rotation without any client certificate or bootstrap kubeconfig (upstream then
//! asks with the kubeconfig's other credentials; here the kubelet keeps its plain
//! client). With rotation on, upstream runs the bootstrap itself in the background;
//! here [`crate::bootstrap::load_client_cert`] still runs before, in the foreground.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use ferrokube_pki::CertInfo;
use k8s_openapi::api::core::v1::NodeAddress;
use tokio_util::sync::CancellationToken;

use crate::bootstrap::{
    self, BootstrapError, CsrName, CsrTemplate, SERVING_PAIR_PREFIX, current_file_name,
    kubeconfig_client_cert, prefixed_file_name,
};
use ferrokube_client::config::ClientLimits;

use crate::metrics::{CertificateExpiry, CertificateMetrics};
use crate::rotating_transport::{CertifiedPair, ClientCertSlot, TransportError, rotating_client};
use crate::server::ServingCertSlot;

/// How long one attempt waits for its request to be approved and issued (upstream's
/// `certificateWaitTimeout`).
pub const CERTIFICATE_WAIT: Duration = Duration::from_secs(15 * 60);

/// How long the kubelet may be without a valid client certificate before it exits
/// (upstream's `exitAfter`).
pub const EXIT_AFTER: Duration = Duration::from_secs(5 * 60);

/// The first retry's delay; each later one doubles (upstream's `wait.Backoff`).
pub const BACKOFF_INITIAL: Duration = Duration::from_secs(2);

/// Attempts before the backoff gives way to [`RETRY_PERIOD`].
pub const BACKOFF_STEPS: u32 = 5;

/// The backoff's jitter: each delay is lengthened by up to this fraction.
pub const BACKOFF_JITTER: f64 = 0.1;

/// How often a rotation is retried once the backoff is spent.
pub const RETRY_PERIOD: Duration = Duration::from_secs(32);

/// The pause between a rotation and computing the next deadline (`wait.Until`'s period).
pub const LOOP_PERIOD: Duration = Duration::from_secs(1);

/// What [`ClientCertManager::new`] needs.
#[derive(Debug, Clone)]
pub struct RotationOptions {
    /// `--kubeconfig`: its server and CA, and its client certificate as a fallback.
    pub kubeconfig: PathBuf,
    /// `--bootstrap-kubeconfig`: the credentials used while no valid certificate exists.
    pub bootstrap_kubeconfig: Option<PathBuf>,
    /// `--cert-dir`.
    pub cert_dir: PathBuf,
    /// The node's name (the certificate's CN is `system:node:<node_name>`).
    pub node_name: String,
    /// How long one attempt waits for its request ([`CERTIFICATE_WAIT`]).
    pub certificate_wait: Duration,
    /// Where the manager registers its metrics ([`CertificateMetrics::global`]).
    pub metrics: &'static CertificateMetrics,
}

impl RotationOptions {
    /// Options with upstream's wait and no bootstrap kubeconfig.
    pub fn new(
        kubeconfig: impl Into<PathBuf>,
        cert_dir: impl Into<PathBuf>,
        node_name: impl Into<String>,
    ) -> Self {
        RotationOptions {
            kubeconfig: kubeconfig.into(),
            bootstrap_kubeconfig: None,
            cert_dir: cert_dir.into(),
            node_name: node_name.into(),
            certificate_wait: CERTIFICATE_WAIT,
            metrics: CertificateMetrics::global(),
        }
    }
}

/// Errors of the rotation.
#[derive(Debug, thiserror::Error)]
pub enum RotationError {
    #[error(transparent)]
    Transport(#[from] TransportError),
    #[error(transparent)]
    Bootstrap(#[from] BootstrapError),
    #[error("unable to load kubeconfig {path}: {message}")]
    Kubeconfig { path: PathBuf, message: String },
    #[error("unable to create a csr, no template available")]
    NoTemplate,
    #[error(
        "client certificate rotation needs a client certificate (in the cert dir or the kubeconfig) or a bootstrap kubeconfig"
    )]
    NoCertificate,
}

/// Where the first certificate came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitialSource {
    /// `<cert-dir>/kubelet-client-current.pem`.
    Store,
    /// The kubeconfig's `client-certificate`/`client-key` files.
    KubeconfigFiles,
    /// The kubeconfig's inline data, now written to the store and rotated at once.
    KubeconfigData,
    /// Nothing valid: the bootstrap kubeconfig asks for one at once.
    None,
}

/// The kubelet's client certificate manager and the client that uses its certificate.
pub struct ClientCertManager {
    opts: RotationOptions,
    slot: Arc<ClientCertSlot>,
    client: kube::Client,
    /// The kubeconfig's server and TLS settings, for more clients on the slot.
    config: kube::Config,
    source: InitialSource,
    force: AtomicBool,
    server_healthy: AtomicBool,
}

impl std::fmt::Debug for ClientCertManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCertManager")
            .field("opts", &self.opts)
            .field("slot", &self.slot)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl ClientCertManager {
    /// Loads the first certificate and builds the client on `config`'s server and TLS
    /// settings (upstream `buildKubeletClientConfig` with rotation on). Nothing is
    /// requested until [`Self::run`].
    pub fn new(config: &kube::Config, opts: RotationOptions) -> Result<Arc<Self>, RotationError> {
        let mut opts = opts;
        opts.cert_dir = std::path::absolute(&opts.cert_dir)
            .map_err(bootstrap::io_err(&opts.cert_dir))
            .map_err(RotationError::Bootstrap)?;
        let (pair, source) = initial_pair(&opts, SystemTime::now())?;
        if pair.is_none() && opts.bootstrap_kubeconfig.is_none() {
            return Err(RotationError::NoCertificate);
        }
        let force = matches!(source, InitialSource::KubeconfigData | InitialSource::None);
        let slot = ClientCertSlot::new(pair);
        let client = rotating_client(config, slot.clone(), None)?;
        let current = Arc::downgrade(&slot);
        opts.metrics.register_client(Arc::new(move || {
            Some(current.upgrade()?.get()?.info.not_after)
        }));
        tracing::info!(source = ?source, "client certificate rotation is enabled");
        Ok(Arc::new(ClientCertManager {
            opts,
            slot,
            client,
            config: config.clone(),
            source,
            force: AtomicBool::new(force),
            server_healthy: AtomicBool::new(false),
        }))
    }

    /// The client presenting the current certificate.
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// Another client presenting the current certificate, with a bucket of `limits`
    /// of its own.
    pub fn client_with_limits(&self, limits: ClientLimits) -> Result<kube::Client, RotationError> {
        Ok(rotating_client(
            &self.config,
            self.slot.clone(),
            Some(limits),
        )?)
    }

    /// The certificate the client presents.
    pub fn slot(&self) -> &Arc<ClientCertSlot> {
        &self.slot
    }

    /// Where the first certificate came from.
    pub fn initial_source(&self) -> InitialSource {
        self.source
    }

    /// Upstream `ServerHealthy`: whether the last answer to a request of ours came from
    /// a working apiserver.
    pub fn server_healthy(&self) -> bool {
        self.server_healthy.load(Ordering::Relaxed)
    }

    /// Upstream `nextRotationDeadline`: now when a rotation is forced (once) or the
    /// certificate is missing or not the node's, else the jittered deadline.
    pub fn next_rotation_deadline(&self, now: SystemTime) -> SystemTime {
        if self.force.swap(false, Ordering::Relaxed) {
            return now;
        }
        let Some(pair) = self.slot.get() else {
            return now;
        };
        if let Err(why) = satisfies_template(&pair.info, &self.opts.node_name) {
            tracing::info!("kubelet client certificate: {why}");
            return now;
        }
        let deadline = rotation_deadline(pair.info.not_before, pair.info.not_after, random_unit());
        tracing::info!(
            expiration = %bootstrap::rfc3339(pair.info.not_after),
            deadline = %bootstrap::rfc3339(deadline),
            "kubelet client certificate rotation deadline"
        );
        deadline
    }

    /// Upstream `rotateCerts`, one attempt: a new key, a request, the issued pair
    /// stored and installed. Returns the pair file written. A failure counts in
    /// `kubelet_certificate_manager_client_expiration_renew_errors`.
    pub async fn rotate(&self) -> Result<PathBuf, RotationError> {
        let rotated = self.try_rotate().await;
        if rotated.is_err() {
            self.opts.metrics.client_renew_failed();
        }
        rotated
    }

    async fn try_rotate(&self) -> Result<PathBuf, RotationError> {
        tracing::info!("rotating the kubelet client certificate");
        let key_pem = bootstrap::generate_key()?;
        let client = self.request_client().await?;
        let requested = bootstrap::request_certificate(
            &client,
            &key_pem,
            &CsrTemplate::client(&self.opts.node_name),
            CsrName::Generated,
            self.opts.certificate_wait,
        )
        .await;
        let (csr, cert_pem) = match requested {
            Ok(r) => r,
            Err(BootstrapError::Create(e)) => {
                self.server_healthy
                    .store(server_healthy_after(&e), Ordering::Relaxed);
                return Err(BootstrapError::Create(e).into());
            }
            Err(e) => return Err(e.into()),
        };
        let pair = CertifiedPair::from_pem(&cert_pem, key_pem.as_bytes())?;
        let ts = bootstrap::timestamp(&jiff::Zoned::now());
        let file = bootstrap::store_update(&self.opts.cert_dir, &cert_pem, &key_pem, &ts)?;
        self.server_healthy.store(true, Ordering::Relaxed);
        self.slot.set(pair);
        tracing::info!(csr = %csr, certificate = %file.display(), "kubelet client certificate rotated");
        Ok(file)
    }

    /// Upstream `clientsetFn`: the rotating client while the certificate is valid,
    /// else the bootstrap kubeconfig's (when there is one).
    async fn request_client(&self) -> Result<kube::Client, RotationError> {
        if self.slot.current(SystemTime::now()).is_some() {
            return Ok(self.client.clone());
        }
        match &self.opts.bootstrap_kubeconfig {
            Some(b) => Ok(bootstrap::bootstrap_client(b).await?),
            None => Ok(self.client.clone()),
        }
    }

    /// One attempt, its failure logged.
    async fn attempt_once(&self) -> bool {
        match self.rotate().await {
            Ok(_) => true,
            Err(e) => {
                tracing::error!(error = %e, "failed to rotate the kubelet client certificate");
                false
            }
        }
    }

    /// Upstream `Start`'s loop: waits for each deadline and rotates, retrying as
    /// upstream does, until `cancel`.
    pub async fn run(self: Arc<Self>, cancel: CancellationToken) {
        run_rotation(&*self, cancel).await
    }

    /// Upstream `UpdateTransport`'s `exitAfter` check, every `period`: resolves once no
    /// valid certificate has been available for `exit_after` while the server was
    /// answering (without an answering server it only logs, as upstream).
    pub async fn wait_unusable(&self, exit_after: Duration, period: Duration) {
        let mut last_available = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(period).await;
            if self.slot.current(SystemTime::now()).is_some() {
                last_available = tokio::time::Instant::now();
                continue;
            }
            if last_available.elapsed() <= exit_after {
                continue;
            }
            if self.server_healthy() {
                tracing::error!(
                    "it has been {exit_after:?} since a valid client cert was found and the server is responsive, exiting"
                );
                return;
            }
            tracing::error!(
                "it has been {exit_after:?} since a valid client cert was found, but the server is not responsive; a restart may be necessary to retrieve new initial credentials"
            );
        }
    }
}

/// One certificate manager as the rotation loop drives it: the client and serving
/// managers differ in their template, store and what holds the pair, not in when
/// and how often they ask.
pub(crate) trait Rotation: Sync {
    /// Which certificate, for the logs.
    fn what(&self) -> &'static str;
    /// Upstream `nextRotationDeadline`.
    fn next_rotation_deadline(&self, now: SystemTime) -> SystemTime;
    /// One `rotateCerts` attempt, its failure logged.
    fn attempt(&self) -> impl std::future::Future<Output = bool> + Send;
    /// Upstream's dynamic-template check (`Start`'s `templateChanged`): the template
    /// now asks for more than the certificate holds and differs from the last request.
    fn template_changed(&self) -> bool {
        false
    }
}

/// Waits `wait`, checking the template every [`LOOP_PERIOD`]; false when cancelled.
async fn wait_deadline(r: &impl Rotation, wait: Duration, cancel: &CancellationToken) -> bool {
    let until = tokio::time::Instant::now() + wait;
    loop {
        let now = tokio::time::Instant::now();
        if now >= until {
            return true;
        }
        let step = (until - now).min(LOOP_PERIOD);
        tokio::select! {
            _ = cancel.cancelled() => return false,
            _ = tokio::time::sleep(step) => {}
        }
        if r.template_changed() {
            tracing::info!("the {} template changed, rotating now", r.what());
            return true;
        }
    }
}

/// Upstream `Start`'s loop for any manager.
pub(crate) async fn run_rotation(r: &impl Rotation, cancel: CancellationToken) {
    let sleep = |d: Duration| {
        let cancel = cancel.clone();
        async move {
            tokio::select! {
                _ = cancel.cancelled() => false,
                _ = tokio::time::sleep(d) => true,
            }
        }
    };
    loop {
        let now = SystemTime::now();
        let wait = r
            .next_rotation_deadline(now)
            .duration_since(now)
            .unwrap_or_default();
        if !wait.is_zero() {
            tracing::info!(wait = ?wait, "waiting for the next {} rotation", r.what());
            if !wait_deadline(r, wait, &cancel).await {
                return;
            }
        }
        let mut rotated = false;
        let mut delays = backoff_delays();
        for _ in 0..BACKOFF_STEPS {
            let attempt = tokio::select! {
                _ = cancel.cancelled() => return,
                ok = r.attempt() => ok,
            };
            if attempt {
                rotated = true;
                break;
            }
            if let Some(delay) = delays.next()
                && !sleep(jitter(delay, BACKOFF_JITTER, random_unit())).await
            {
                return;
            }
        }
        if !rotated {
            tracing::error!(
                "reached the backoff limit, still unable to rotate the {}",
                r.what()
            );
            loop {
                if !sleep(RETRY_PERIOD).await {
                    return;
                }
                let attempt = tokio::select! {
                    _ = cancel.cancelled() => return,
                    ok = r.attempt() => ok,
                };
                if attempt {
                    break;
                }
            }
        }
        if !sleep(LOOP_PERIOD).await {
            return;
        }
    }
}

/// The addresses the serving certificate is for (upstream's `getAddresses`: the
/// addresses of the node's last status).
pub type AddressSource = Arc<dyn Fn() -> Vec<NodeAddress> + Send + Sync>;

/// The kubelet's serving certificate manager (`serverTLSBootstrap`, upstream
/// `NewKubeletServerCertificateManager`): the same rotation as the client's, with
/// the serving template, the `kubelet-server` store and the HTTPS server's slot.
pub struct ServingCertManager {
    client: kube::Client,
    cert_dir: PathBuf,
    node_name: String,
    addresses: AddressSource,
    slot: Arc<ServingCertSlot>,
    certificate_wait: Duration,
    last_request: parking_lot::Mutex<Option<CsrTemplate>>,
    metrics: &'static CertificateMetrics,
}

impl std::fmt::Debug for ServingCertManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServingCertManager")
            .field("cert_dir", &self.cert_dir)
            .field("node_name", &self.node_name)
            .field("slot", &self.slot)
            .finish_non_exhaustive()
    }
}

impl ServingCertManager {
    /// Loads `<cert_dir>/kubelet-server-current.pem` when there is one (a pair that
    /// does not load is an error, as upstream's store) into a new slot; requests are
    /// made with `client` (the node's own credentials) from [`Self::run`] on.
    pub fn new(
        client: kube::Client,
        cert_dir: impl Into<PathBuf>,
        node_name: impl Into<String>,
        addresses: AddressSource,
    ) -> Result<Self, RotationError> {
        let cert_dir = cert_dir.into();
        let cert_dir = std::path::absolute(&cert_dir).map_err(bootstrap::io_err(&cert_dir))?;
        bootstrap::recover_store_prefixed(&cert_dir, SERVING_PAIR_PREFIX)?;
        let current = cert_dir.join(prefixed_file_name(SERVING_PAIR_PREFIX, "current"));
        let pair = match std::fs::read(&current) {
            Ok(pem) => Some(CertifiedPair::from_pem(&pem, &pem)?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => {
                return Err(BootstrapError::Io {
                    path: current,
                    source,
                }
                .into());
            }
        };
        tracing::info!(
            stored = pair.is_some(),
            "kubelet serving certificate bootstrap is enabled"
        );
        let m = ServingCertManager {
            client,
            cert_dir,
            node_name: node_name.into(),
            addresses,
            slot: ServingCertSlot::new(pair),
            certificate_wait: CERTIFICATE_WAIT,
            last_request: parking_lot::Mutex::new(None),
            metrics: CertificateMetrics::global(),
        };
        m.metrics.register_server(m.expiry());
        Ok(m)
    }

    /// Bounds one attempt's wait ([`CERTIFICATE_WAIT`] by default).
    pub fn set_certificate_wait(&mut self, wait: Duration) {
        self.certificate_wait = wait;
    }

    /// Registers its metrics in `metrics` instead ([`CertificateMetrics::global`] by
    /// default).
    pub fn set_metrics(&mut self, metrics: &'static CertificateMetrics) {
        self.metrics = metrics;
        metrics.register_server(self.expiry());
    }

    /// The served certificate's expiry, as the metrics read it.
    fn expiry(&self) -> CertificateExpiry {
        let current = Arc::downgrade(&self.slot);
        Arc::new(move || Some(current.upgrade()?.get()?.info.not_after))
    }

    /// The slot the HTTPS server resolves its certificate from.
    pub fn slot(&self) -> &Arc<ServingCertSlot> {
        &self.slot
    }

    /// The template for the node's current addresses (`None` without an IP).
    pub fn template(&self) -> Option<CsrTemplate> {
        let (dns, ips) = addresses_to_hostnames_and_ips(&(self.addresses)());
        CsrTemplate::serving(&self.node_name, dns, ips)
    }

    /// Upstream `certSatisfiesTemplateLocked` with the current template.
    fn satisfied(&self) -> Result<(), String> {
        let Some(pair) = self.slot.get() else {
            return Err("no serving certificate".into());
        };
        match self.template() {
            Some(t) => satisfies(&pair.info, &t),
            None => Ok(()),
        }
    }

    /// Upstream `rotateCerts`, one attempt: a new key, a request for the current
    /// template, the issued pair stored and served. Returns the pair file written. A
    /// failure counts in `kubelet_server_expiration_renew_errors`; a certificate
    /// replaced has its age observed in
    /// `kubelet_certificate_manager_server_rotation_seconds`.
    pub async fn rotate(&self) -> Result<PathBuf, RotationError> {
        let rotated = self.try_rotate().await;
        if rotated.is_err() {
            self.metrics.server_renew_failed();
        }
        rotated
    }

    async fn try_rotate(&self) -> Result<PathBuf, RotationError> {
        let template = self.template();
        *self.last_request.lock() = template.clone();
        let Some(template) = template else {
            return Err(RotationError::NoTemplate);
        };
        tracing::info!(dns = ?template.dns_names, ips = ?template.ips, "requesting a kubelet serving certificate");
        let key_pem = bootstrap::generate_key()?;
        let (csr, cert_pem) = bootstrap::request_certificate(
            &self.client,
            &key_pem,
            &template,
            CsrName::Generated,
            self.certificate_wait,
        )
        .await?;
        let pair = CertifiedPair::from_pem(&cert_pem, key_pem.as_bytes())?;
        let ts = bootstrap::timestamp(&jiff::Zoned::now());
        let file = bootstrap::store_update_prefixed(
            &self.cert_dir,
            SERVING_PAIR_PREFIX,
            &cert_pem,
            &key_pem,
            &ts,
        )?;
        if let Some(previous) = self.slot.get() {
            self.metrics
                .server_rotated(previous.info.not_before, SystemTime::now());
        }
        self.slot.set(pair);
        tracing::info!(csr = %csr, certificate = %file.display(), "kubelet serving certificate rotated");
        Ok(file)
    }

    /// Waits for each deadline and rotates, as [`ClientCertManager::run`].
    pub async fn run(self: Arc<Self>, cancel: CancellationToken) {
        run_rotation(&*self, cancel).await
    }
}

impl Rotation for ServingCertManager {
    fn what(&self) -> &'static str {
        "kubelet serving certificate"
    }

    fn next_rotation_deadline(&self, now: SystemTime) -> SystemTime {
        let Some(pair) = self.slot.get() else {
            return now;
        };
        if let Err(why) = self.satisfied() {
            tracing::info!("kubelet serving certificate: {why}");
            return now;
        }
        rotation_deadline(pair.info.not_before, pair.info.not_after, random_unit())
    }

    async fn attempt(&self) -> bool {
        match self.rotate().await {
            Ok(_) => true,
            Err(e) => {
                tracing::error!(error = %e, "failed to rotate the kubelet serving certificate");
                false
            }
        }
    }

    fn template_changed(&self) -> bool {
        self.satisfied().is_err() && *self.last_request.lock() != self.template()
    }
}

/// Upstream `addressesToHostnamesAndIPs`: hostname and DNS addresses as names (a
/// hostname that parses as an IP as an IP), internal and external IPs as IPs, empty
/// ones skipped; each set deduplicated and sorted (IPs by their text, as upstream).
pub fn addresses_to_hostnames_and_ips(addresses: &[NodeAddress]) -> (Vec<String>, Vec<IpAddr>) {
    let mut names = std::collections::BTreeSet::new();
    let mut ips = std::collections::BTreeMap::new();
    for a in addresses.iter().filter(|a| !a.address.is_empty()) {
        let ip = a.address.parse::<IpAddr>().ok();
        match (a.type_.as_str(), ip) {
            ("Hostname", Some(ip)) | ("InternalIP" | "ExternalIP", Some(ip)) => {
                ips.insert(ip.to_string(), ip);
            }
            ("Hostname", None) | ("InternalDNS" | "ExternalDNS", _) => {
                names.insert(a.address.clone());
            }
            _ => {}
        }
    }
    (names.into_iter().collect(), ips.into_values().collect())
}

/// Upstream `certSatisfiesTemplateLocked`: the CN is the template's and the
/// certificate holds every DNS name, IP address and O the template asks for (more
/// are fine).
pub fn satisfies(info: &CertInfo, template: &CsrTemplate) -> Result<(), String> {
    let cn = &template.common_name;
    let have = info.common_name.as_deref().unwrap_or_default();
    if have != cn {
        return Err(format!(
            "current certificate CN ({have}) does not match requested CN ({cn})"
        ));
    }
    fn all_in<T: PartialEq + std::fmt::Debug>(
        what: &str,
        want: &[T],
        have: &[T],
    ) -> Result<(), String> {
        let missing: Vec<&T> = want.iter().filter(|w| !have.contains(w)).collect();
        if missing.is_empty() {
            return Ok(());
        }
        Err(format!(
            "current certificate is missing requested {what} {missing:?}"
        ))
    }
    all_in("DNS names", &template.dns_names, &info.dns_sans)?;
    all_in("IP addresses", &template.ips, &info.ip_sans)?;
    all_in("orgs", &template.organizations, &info.organizations)
}

impl Rotation for ClientCertManager {
    fn what(&self) -> &'static str {
        "kubelet client certificate"
    }

    fn next_rotation_deadline(&self, now: SystemTime) -> SystemTime {
        ClientCertManager::next_rotation_deadline(self, now)
    }

    async fn attempt(&self) -> bool {
        self.attempt_once().await
    }
}

/// Upstream `getCurrentCertificateOrBootstrap` over the kubelet's file store: the
/// first certificate (`None` when there is no valid one) and where it came from.
fn initial_pair(
    opts: &RotationOptions,
    now: SystemTime,
) -> Result<(Option<CertifiedPair>, InitialSource), RotationError> {
    let cert_dir = &opts.cert_dir;
    bootstrap::recover_store(cert_dir)?;
    let kubeconfig =
        kubeconfig_client_cert(&opts.kubeconfig).map_err(|message| RotationError::Kubeconfig {
            path: opts.kubeconfig.clone(),
            message,
        });
    let current = cert_dir.join(current_file_name());
    let stored = match std::fs::read(&current) {
        Ok(pem) => Some((CertifiedPair::from_pem(&pem, &pem)?, InitialSource::Store)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(source) => {
            return Err(BootstrapError::Io {
                path: current,
                source,
            }
            .into());
        }
    };
    let stored = match stored {
        Some(s) => Some(s),
        None => match kubeconfig.as_ref().ok().and_then(|k| k.files.as_ref()) {
            Some(Ok((cert, key))) => Some((
                CertifiedPair::from_pem(cert, key)?,
                InitialSource::KubeconfigFiles,
            )),
            Some(Err(e)) => {
                tracing::warn!(error = %e, "the kubeconfig's client certificate files are not usable");
                None
            }
            None => None,
        },
    };
    if let Some((pair, source)) = stored {
        if !pair.expired(now) {
            return Ok((Some(pair), source));
        }
        tracing::warn!(
            expired = %bootstrap::rfc3339(pair.info.not_after),
            "the current kubelet client certificate has expired"
        );
    }
    let data = match kubeconfig {
        Ok(k) => k.data,
        Err(e) => {
            tracing::warn!(error = %e, "no client certificate data from the kubeconfig");
            None
        }
    };
    let Some((cert, key)) = data else {
        return Ok((None, InitialSource::None));
    };
    let pair = CertifiedPair::from_pem(&cert, &key)?;
    let key_pem = String::from_utf8_lossy(&key);
    let ts = bootstrap::timestamp(&jiff::Zoned::now());
    if let Err(e) = bootstrap::store_update(cert_dir, &cert, &key_pem, &ts) {
        tracing::error!(error = %e, "unable to set the cert/key pair to the bootstrap certificate");
    }
    Ok((Some(pair), InitialSource::KubeconfigData))
}

/// Upstream `certSatisfiesTemplateLocked` for the kubelet's client template: the CN is
/// the node's and the O attributes include `system:nodes` (more are fine).
pub fn satisfies_template(info: &CertInfo, node_name: &str) -> Result<(), String> {
    satisfies(info, &CsrTemplate::client(node_name))
}

/// Upstream `jitteryDuration` from notBefore: `wait.Jitter(total, 0.2) - 0.3·total`,
/// i.e. `not_before + total·(0.7 + 0.2·r)` for `r` in [0, 1). A certificate whose
/// notAfter is not after its notBefore is due at notBefore.
pub fn rotation_deadline(not_before: SystemTime, not_after: SystemTime, r: f64) -> SystemTime {
    let total = not_after.duration_since(not_before).unwrap_or_default();
    not_before + total.mul_f64(0.7 + 0.2 * r.clamp(0.0, 1.0))
}

/// `wait.Jitter(d, factor)`: `d + r·factor·d` for `r` in [0, 1).
pub fn jitter(d: Duration, factor: f64, r: f64) -> Duration {
    d + d.mul_f64(factor * r.clamp(0.0, 1.0))
}

/// The delays between the backoff's attempts, before jitter: 2, 4, 8, 16 s (the last
/// attempt's failure ends the backoff without one).
pub fn backoff_delays() -> impl Iterator<Item = Duration> {
    (0..BACKOFF_STEPS - 1).map(|i| BACKOFF_INITIAL * 2u32.pow(i))
}

/// Upstream `updateServerError`: whether an error answer to our request still means
/// a working apiserver (401 may come from a TLS-terminating proxy, 403 and 404 are
/// ordinary answers; a 5xx or no answer is not).
fn server_healthy_after(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => matches!(s.code, 401 | 403 | 404),
        _ => false,
    }
}

/// A uniform random number in [0, 1) (`rand.Float64`).
fn random_unit() -> f64 {
    use ring::rand::SecureRandom as _;
    let mut bytes = [0u8; 8];
    if ring::rand::SystemRandom::new().fill(&mut bytes).is_err() {
        return 0.5;
    }
    (u64::from_le_bytes(bytes) >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::NODES_GROUP;
    use ferrokube_pki::{CertificateAuthority, Validity};
    use std::path::Path;

    const HOUR: Duration = Duration::from_secs(3600);

    /// Equal to within a millisecond (the lifetime is scaled in floating point).
    fn assert_near(a: SystemTime, b: SystemTime) {
        let diff = a.duration_since(b).unwrap_or_else(|e| e.duration());
        assert!(diff < Duration::from_millis(1), "{a:?} vs {b:?}");
    }

    #[test]
    fn the_deadline_is_70_to_90_percent_of_the_lifetime() {
        let nb = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let na = nb + 1000 * HOUR;
        assert_near(rotation_deadline(nb, na, 0.0), nb + 700 * HOUR);
        assert_near(rotation_deadline(nb, na, 0.5), nb + 800 * HOUR);
        let top = rotation_deadline(nb, na, 0.999_999);
        assert!(top < nb + 900 * HOUR && top > nb + 899 * HOUR, "{top:?}");
        // Out-of-range randomness is clamped; a backwards window is due at once.
        assert_near(rotation_deadline(nb, na, 7.0), nb + 900 * HOUR);
        assert_near(rotation_deadline(nb, na, -1.0), nb + 700 * HOUR);
        assert_eq!(rotation_deadline(na, nb, 0.5), na);
        // A year, as kubeadm's certificates: between 255.5 and 328.5 days.
        let year = 365 * 24 * HOUR;
        for _ in 0..1000 {
            let d = rotation_deadline(nb, nb + year, random_unit());
            let after = d.duration_since(nb).unwrap();
            assert!(
                after >= year.mul_f64(0.7) && after < year.mul_f64(0.9),
                "{after:?}"
            );
        }
    }

    #[test]
    fn randomness_is_spread_over_the_unit_interval() {
        let samples: Vec<f64> = (0..2000).map(|_| random_unit()).collect();
        assert!(samples.iter().all(|r| (0.0..1.0).contains(r)));
        let low = samples.iter().filter(|r| **r < 0.5).count();
        assert!((800..1200).contains(&low), "{low} of 2000 below 0.5");
    }

    #[test]
    fn backoff_is_upstreams() {
        let delays: Vec<u64> = backoff_delays().map(|d| d.as_secs()).collect();
        assert_eq!(delays, [2, 4, 8, 16]);
        assert_eq!(
            jitter(Duration::from_secs(2), BACKOFF_JITTER, 0.0),
            Duration::from_secs(2)
        );
        let j = jitter(Duration::from_secs(2), BACKOFF_JITTER, 0.5);
        assert!(j.abs_diff(Duration::from_millis(2100)) < Duration::from_micros(1));
        let j = jitter(Duration::from_secs(16), BACKOFF_JITTER, 0.999);
        assert!(j < Duration::from_millis(17_600), "{j:?}");
    }

    fn info(cn: &str, orgs: &[&str]) -> CertInfo {
        let ca = CertificateAuthority::generate("test-ca").unwrap();
        let groups: Vec<String> = orgs.iter().map(|o| o.to_string()).collect();
        let issued = ca
            .issue_client_cert(cn, &groups, Validity::leaf_default())
            .unwrap();
        CertInfo::from_pem(&issued.cert_pem).unwrap()
    }

    #[test]
    fn the_template_is_the_nodes() {
        satisfies_template(&info("system:node:a", &["system:nodes"]), "a").unwrap();
        // Extra organizations do not trigger a renewal.
        satisfies_template(&info("system:node:a", &["system:nodes", "extra"]), "a").unwrap();
        let e = satisfies_template(&info("system:node:b", &["system:nodes"]), "a").unwrap_err();
        assert!(e.contains("does not match requested CN"), "{e}");
        let e = satisfies_template(&info("system:node:a", &["other"]), "a").unwrap_err();
        assert!(e.contains("missing requested orgs"), "{e}");
        let e = satisfies_template(&info("kubernetes-admin", &["system:masters"]), "a");
        assert!(e.is_err());
    }

    fn kubeconfig(dir: &Path, user: &str) -> PathBuf {
        let p = dir.join("kubelet.conf");
        std::fs::write(
            &p,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:6443\n\
                 users:\n- name: u\n  user:\n{user}\ncontexts:\n- name: ctx\n  context:\n    cluster: c\n    user: u\n\
                 current-context: ctx\n"
            ),
        )
        .unwrap();
        p
    }

    #[test]
    fn the_first_certificate_follows_the_store() {
        use base64::Engine as _;
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let cert_dir = d.join("pki");
        let ca = CertificateAuthority::generate("test-ca").unwrap();
        let now = SystemTime::now();
        let issue =
            |cn: &str, v: Validity| ca.issue_client_cert(cn, &[NODES_GROUP.into()], v).unwrap();
        let valid = Validity::leaf_default();
        let expired = Validity {
            not_before: now - 2 * HOUR,
            not_after: now - HOUR,
        };
        let opts = |kc: PathBuf| RotationOptions::new(kc, &cert_dir, "a");

        // Nothing at all.
        let kc = kubeconfig(d, "    token: abc");
        let (pair, source) = initial_pair(&opts(kc), now).unwrap();
        assert!(pair.is_none());
        assert_eq!(source, InitialSource::None);

        // The kubeconfig's files.
        let files = issue("system:node:files", valid);
        std::fs::write(d.join("c.crt"), &files.cert_pem).unwrap();
        std::fs::write(d.join("c.key"), &files.key_pem).unwrap();
        let kc = kubeconfig(d, "    client-certificate: c.crt\n    client-key: c.key");
        let (pair, source) = initial_pair(&opts(kc.clone()), now).unwrap();
        assert_eq!(source, InitialSource::KubeconfigFiles);
        assert_eq!(
            pair.unwrap().info.common_name.as_deref(),
            Some("system:node:files")
        );

        // The store's current pair wins over the kubeconfig's files.
        let stored = issue("system:node:stored", valid);
        std::fs::create_dir_all(&cert_dir).unwrap();
        let pem = format!("{}{}", stored.cert_pem, stored.key_pem);
        std::fs::write(cert_dir.join("kubelet-client-x.pem"), &pem).unwrap();
        std::os::unix::fs::symlink(
            cert_dir.join("kubelet-client-x.pem"),
            cert_dir.join(current_file_name()),
        )
        .unwrap();
        let (pair, source) = initial_pair(&opts(kc), now).unwrap();
        assert_eq!(source, InitialSource::Store);
        assert_eq!(
            pair.unwrap().info.common_name.as_deref(),
            Some("system:node:stored")
        );

        // Expired in the store, inline data in the kubeconfig: the data is stored and used.
        let old = issue("system:node:stored", expired);
        std::fs::write(
            cert_dir.join("kubelet-client-x.pem"),
            format!("{}{}", old.cert_pem, old.key_pem),
        )
        .unwrap();
        let inline = issue("kubernetes-admin", valid);
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let kc = kubeconfig(
            d,
            &format!(
                "    client-certificate-data: {}\n    client-key-data: {}",
                b64(&inline.cert_pem),
                b64(&inline.key_pem)
            ),
        );
        let (pair, source) = initial_pair(&opts(kc.clone()), now).unwrap();
        assert_eq!(source, InitialSource::KubeconfigData);
        assert_eq!(
            pair.unwrap().info.common_name.as_deref(),
            Some("kubernetes-admin")
        );
        let written = std::fs::read_to_string(cert_dir.join(current_file_name())).unwrap();
        assert_eq!(
            CertInfo::from_pem(&written).unwrap().common_name.as_deref(),
            Some("kubernetes-admin")
        );

        // A store pair that does not load is an error, as upstream's store.
        std::fs::remove_file(cert_dir.join(current_file_name())).unwrap();
        std::fs::write(cert_dir.join("kubelet-client-y.pem"), "garbage").unwrap();
        std::os::unix::fs::symlink(
            cert_dir.join("kubelet-client-y.pem"),
            cert_dir.join(current_file_name()),
        )
        .unwrap();
        assert!(initial_pair(&opts(kc), now).is_err());
    }

    fn addr(type_: &str, a: &str) -> NodeAddress {
        NodeAddress {
            type_: type_.into(),
            address: a.into(),
        }
    }

    #[test]
    fn serving_names_and_ips_are_upstreams() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let (dns, ips) = addresses_to_hostnames_and_ips(&[
            addr("InternalIP", "10.0.0.9"),
            addr("ExternalIP", "192.168.1.1"),
            addr("InternalIP", "not-an-ip"),
            addr("Hostname", "node-b"),
            addr("Hostname", "10.0.0.10"),
            addr("InternalDNS", "node-b.internal"),
            addr("ExternalDNS", "a.example.com"),
            addr("InternalIP", "10.0.0.9"),
            addr("InternalIP", "fd00::1"),
            addr("Hostname", ""),
            addr("Something", "node-c"),
        ]);
        assert_eq!(dns, ["a.example.com", "node-b", "node-b.internal"]);
        // Sorted by their text as upstream, not numerically: "10.0.0.10" < "10.0.0.9".
        assert_eq!(
            ips,
            [
                ip("10.0.0.10"),
                ip("10.0.0.9"),
                ip("192.168.1.1"),
                ip("fd00::1")
            ]
        );
        let (dns, ips) = addresses_to_hostnames_and_ips(&crate::node::node_addresses(
            "node-a",
            &["10.1.1.1".into(), "fd00::2".into()],
        ));
        assert_eq!(dns, ["node-a"]);
        assert_eq!(ips, [ip("10.1.1.1"), ip("fd00::2")]);
    }

    #[test]
    fn the_serving_template_needs_an_ip() {
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        assert_eq!(CsrTemplate::serving("a", vec!["a".into()], vec![]), None);
        let t = CsrTemplate::serving("a", vec!["a".into()], vec![ip]).unwrap();
        assert_eq!(t.common_name, "system:node:a");
        assert_eq!(t.organizations, [NODES_GROUP]);
        assert_eq!(t.signer_name, "kubernetes.io/kubelet-serving");
        assert_eq!(t.usages, ["digital signature", "server auth"]);
        assert_eq!(t.store_prefix, "kubelet-server");
        let c = CsrTemplate::client("a");
        assert_eq!(c.signer_name, "kubernetes.io/kube-apiserver-client-kubelet");
        assert_eq!(c.usages, ["digital signature", "client auth"]);
        assert_eq!(c.store_prefix, "kubelet-client");
        assert!(c.dns_names.is_empty() && c.ips.is_empty());
    }

    #[test]
    fn the_serving_request_carries_the_sans() {
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let t =
            CsrTemplate::serving("a", vec!["a".into(), "a.example.com".into()], vec![ip]).unwrap();
        let key = rcgen::KeyPair::from_pem(&bootstrap::generate_key().unwrap()).unwrap();
        let pem = bootstrap::make_request_pem(&key, &t).unwrap();
        let req = ferrokube_pki::csr::parse_request_pem(pem.as_bytes()).unwrap();
        assert_eq!(req.common_name, "system:node:a");
        assert_eq!(req.organizations, [NODES_GROUP]);
        assert_eq!(req.dns_names, ["a", "a.example.com"]);
        assert_eq!(req.ip_addresses, [ip]);
        let obj = bootstrap::template_csr_object("", &pem, &t);
        assert_eq!(obj.spec.signer_name, "kubernetes.io/kubelet-serving");
        assert_eq!(
            obj.spec.usages.unwrap(),
            ["digital signature", "server auth"]
        );
        // The client request is unchanged: no SANs at all.
        let client = bootstrap::make_csr_pem(&key, "a").unwrap();
        let req = ferrokube_pki::csr::parse_request_pem(client.as_bytes()).unwrap();
        assert!(req.dns_names.is_empty() && req.ip_addresses.is_empty());
    }

    #[test]
    fn a_serving_certificate_must_hold_the_templates_sans() {
        let ca = CertificateAuthority::generate("test-ca").unwrap();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let issued = ca
            .issue_serving_cert(
                "system:node:a",
                &["a".into(), "extra".into()],
                &[ip("10.0.0.1")],
                Validity::leaf_default(),
            )
            .unwrap();
        let info = CertInfo::from_pem(&issued.cert_pem).unwrap();
        let mut t = CsrTemplate::serving("a", vec!["a".into()], vec![ip("10.0.0.1")]).unwrap();
        // issue_serving_cert sets no O: drop it from the template for the SAN checks.
        t.organizations.clear();
        satisfies(&info, &t).unwrap();
        t.ips.push(ip("10.0.0.2"));
        let e = satisfies(&info, &t).unwrap_err();
        assert!(e.contains("missing requested IP addresses"), "{e}");
        t.ips.pop();
        t.dns_names.push("b".into());
        let e = satisfies(&info, &t).unwrap_err();
        assert!(e.contains("missing requested DNS names"), "{e}");
        t.dns_names.pop();
        t.organizations.push(NODES_GROUP.into());
        let e = satisfies(&info, &t).unwrap_err();
        assert!(e.contains("missing requested orgs"), "{e}");
    }

    #[test]
    fn the_serving_store_has_its_own_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let ca = CertificateAuthority::generate("test-ca").unwrap();
        let issued = ca
            .issue_serving_cert(
                "system:node:a",
                &["a".into()],
                &["10.0.0.1".parse().unwrap()],
                Validity::leaf_default(),
            )
            .unwrap();
        let file = bootstrap::store_update_prefixed(
            d,
            SERVING_PAIR_PREFIX,
            issued.cert_pem.as_bytes(),
            &issued.key_pem,
            "2024-01-01-00-00-00",
        )
        .unwrap();
        assert_eq!(file, d.join("kubelet-server-2024-01-01-00-00-00.pem"));
        assert_eq!(
            std::fs::read_link(d.join("kubelet-server-current.pem")).unwrap(),
            file
        );
        assert!(
            !d.join(current_file_name()).exists(),
            "the client store is untouched"
        );
    }

    #[tokio::test]
    async fn the_serving_deadline_follows_the_stored_pair_and_the_addresses() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let ca = CertificateAuthority::generate("test-ca").unwrap();
        let now = SystemTime::now();
        let validity = Validity {
            not_before: now - HOUR,
            not_after: now + 99 * HOUR,
        };
        // A serving pair as the signer issues it: the node's subject and its SANs.
        let params = {
            let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
            let t = CsrTemplate::serving("a", vec!["a".into()], vec!["10.0.0.1".parse().unwrap()])
                .unwrap();
            let req = bootstrap::make_request_pem(&key, &t).unwrap();
            let parsed = ferrokube_pki::csr::parse_request_pem(req.as_bytes()).unwrap();
            (key, parsed)
        };
        let usages: Vec<String> = bootstrap::SERVING_USAGES.map(String::from).to_vec();
        let cert = ca
            .sign_request(&params.1, &usages, validity.not_before, validity.not_after)
            .unwrap();
        bootstrap::store_update_prefixed(
            d,
            SERVING_PAIR_PREFIX,
            cert.as_bytes(),
            &params.0.serialize_pem(),
            "2024-01-01-00-00-00",
        )
        .unwrap();
        let client =
            kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap()))
                .unwrap();
        let addresses = Arc::new(parking_lot::Mutex::new(crate::node::node_addresses(
            "a",
            &["10.0.0.1".into()],
        )));
        let source = addresses.clone();
        let m = ServingCertManager::new(client, d, "a", Arc::new(move || source.lock().clone()))
            .unwrap();
        assert!(m.slot().get().is_some(), "the stored pair is loaded");
        let deadline = Rotation::next_rotation_deadline(&m, now);
        let after = deadline.duration_since(now - HOUR).unwrap();
        assert!(
            after >= 70 * HOUR - Duration::from_secs(2) && after <= 90 * HOUR,
            "{after:?}"
        );
        assert!(!m.template_changed());
        // A new address the certificate lacks: due now, and the wait is interrupted.
        addresses.lock().insert(0, addr("InternalIP", "10.0.0.2"));
        assert_eq!(Rotation::next_rotation_deadline(&m, now), now);
        assert!(m.template_changed());
        // Without any IP there is no template: nothing to request.
        addresses.lock().clear();
        assert_eq!(m.template(), None);
        assert!(matches!(m.rotate().await, Err(RotationError::NoTemplate)));
    }

    #[test]
    fn server_health_from_answers() {
        let api = |code: u16| {
            kube::Error::Api(Box::new(
                serde_json::from_value(serde_json::json!({
                    "status": "Failure", "message": "m", "reason": "r", "code": code
                }))
                .unwrap(),
            ))
        };
        assert!(server_healthy_after(&api(401)));
        assert!(server_healthy_after(&api(403)));
        assert!(server_healthy_after(&api(404)));
        assert!(!server_healthy_after(&api(500)));
        assert!(!server_healthy_after(&api(409)));
    }
}
