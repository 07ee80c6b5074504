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
//! Left out: the serving certificate (`serverTLSBootstrap`, the `kubelet-server-*`
//! pairs), the template-change interrupt of a dynamic template (the client template
//! never changes), the rotation metrics, requesting `expirationSeconds`, and
//! rotation without any client certificate or bootstrap kubeconfig (upstream then
//! asks with the kubeconfig's other credentials; here the kubelet keeps its plain
//! client). With rotation on, upstream runs the bootstrap itself in the background;
//! here [`crate::bootstrap::load_client_cert`] still runs before, in the foreground.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use ferrokube_pki::CertInfo;
use tokio_util::sync::CancellationToken;

use crate::bootstrap::{self, BootstrapError, CsrName, current_file_name, kubeconfig_client_cert};
use crate::rotating_transport::{ClientCertSlot, ClientPair, TransportError, rotating_client};

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
        let client = rotating_client(config, slot.clone())?;
        tracing::info!(source = ?source, "client certificate rotation is enabled");
        Ok(Arc::new(ClientCertManager {
            opts,
            slot,
            client,
            source,
            force: AtomicBool::new(force),
            server_healthy: AtomicBool::new(false),
        }))
    }

    /// The client presenting the current certificate.
    pub fn client(&self) -> kube::Client {
        self.client.clone()
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
    /// stored and installed. Returns the pair file written.
    pub async fn rotate(&self) -> Result<PathBuf, RotationError> {
        tracing::info!("rotating the kubelet client certificate");
        let key_pem = bootstrap::generate_key()?;
        let client = self.request_client().await?;
        let requested = bootstrap::request_certificate(
            &client,
            &key_pem,
            &self.opts.node_name,
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
        let pair = ClientPair::from_pem(&cert_pem, key_pem.as_bytes())?;
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
    async fn attempt(&self) -> bool {
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
            let wait = self
                .next_rotation_deadline(now)
                .duration_since(now)
                .unwrap_or_default();
            if !wait.is_zero() {
                tracing::info!(wait = ?wait, "waiting for the next kubelet client certificate rotation");
                if !sleep(wait).await {
                    return;
                }
            }
            let mut rotated = false;
            let mut delays = backoff_delays();
            for _ in 0..BACKOFF_STEPS {
                let attempt = tokio::select! {
                    _ = cancel.cancelled() => return,
                    ok = self.attempt() => ok,
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
                    "reached the backoff limit, still unable to rotate the kubelet client certificate"
                );
                loop {
                    if !sleep(RETRY_PERIOD).await {
                        return;
                    }
                    let attempt = tokio::select! {
                        _ = cancel.cancelled() => return,
                        ok = self.attempt() => ok,
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

/// Upstream `getCurrentCertificateOrBootstrap` over the kubelet's file store: the
/// first certificate (`None` when there is no valid one) and where it came from.
fn initial_pair(
    opts: &RotationOptions,
    now: SystemTime,
) -> Result<(Option<ClientPair>, InitialSource), RotationError> {
    let cert_dir = &opts.cert_dir;
    bootstrap::recover_store(cert_dir)?;
    let kubeconfig =
        kubeconfig_client_cert(&opts.kubeconfig).map_err(|message| RotationError::Kubeconfig {
            path: opts.kubeconfig.clone(),
            message,
        });
    let current = cert_dir.join(current_file_name());
    let stored = match std::fs::read(&current) {
        Ok(pem) => Some((ClientPair::from_pem(&pem, &pem)?, InitialSource::Store)),
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
                ClientPair::from_pem(cert, key)?,
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
    let pair = ClientPair::from_pem(&cert, &key)?;
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
    let (cn, orgs) = bootstrap::node_subject(node_name);
    let have = info.common_name.as_deref().unwrap_or_default();
    if have != cn {
        return Err(format!(
            "current certificate CN ({have}) does not match requested CN ({cn})"
        ));
    }
    let missing: Vec<&String> = orgs
        .iter()
        .filter(|o| !info.organizations.contains(*o))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "current certificate is missing requested orgs {missing:?}"
        ));
    }
    Ok(())
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
