//! Kubelet TLS bootstrapping (`--bootstrap-kubeconfig`, `--cert-dir`), the way
//! `kubeadm join` brings a node in: the kubelet starts with a bootstrap token, asks the
//! cluster for a client certificate of its own through a CertificateSigningRequest, and
//! from then on talks to the apiserver as `system:node:<nodeName>` in `system:nodes`.
//!
//! Upstream followed: `pkg/kubelet/certificate/bootstrap/bootstrap.go` (`LoadClientCert`,
//! `isClientConfigStillValid`, `requestNodeCertificate`, `digestedName`,
//! `writeKubeconfigFromBootstrapping`), client-go's `util/certificate/csr`
//! (`RequestCertificate`, `ensureCompatible`, `WaitForCertificate`) and the file store
//! of `util/certificate/certificate_store.go`:
//!
//! - A `--kubeconfig` whose current user has a client certificate that loads with its
//!   key and has not expired is used as it is; nothing is requested.
//! - Otherwise the key is the one of `<cert-dir>/kubelet-client-current.pem` when that
//!   pair still loads, else `<cert-dir>/kubelet-client.key.tmp` (created once, an ECDSA
//!   P-256 key): a kubelet that restarts before its request is answered asks again with
//!   the same key. The request's name is upstream's digest of the public key, subject
//!   and usages (`node-csr-…`), so asking again finds the request already there and
//!   waits on it instead of leaving one more behind.
//! - The request: subject `CN=system:node:<nodeName>, O=system:nodes`, signer
//!   `kubernetes.io/kube-apiserver-client-kubelet`, usages `digital signature` and
//!   `client auth` (client-go's `DefaultKubeletClientGetUsages` for a non-RSA key), no
//!   `expirationSeconds`. It is watched until Approved and issued (Denied or Failed is
//!   an error with the condition's reason and message), for at most
//!   [`CERTIFICATE_WAIT`] (upstream's hour) unless the caller bounds it otherwise.
//! - The certificate and key are written to `<cert-dir>/kubelet-client-<timestamp>.pem`
//!   (0600) and the symlink `kubelet-client-current.pem` is switched to it through
//!   `kubelet-client-updated.pem`, as upstream's file store; the temporary key is then
//!   removed. `--kubeconfig` is written (0600) with the bootstrap kubeconfig's server,
//!   CA and TLS verification setting and `client-certificate`/`client-key` both naming
//!   the current pem, under upstream's names (`default-cluster`, `default-auth`,
//!   `default-context`, namespace `default`).
//!
//! Renewing the certificate before it expires (`rotateCertificates`,
//! `--rotate-certificates`) is [`crate::cert_rotation`], which reuses this module's
//! request, wait and file store; without it the certificate obtained here is used until
//! it expires, and a restart after that bootstraps again.
//!
//! The request, its wait and the file store take a [`CsrTemplate`], so the serving
//! certificate of `serverTLSBootstrap` ([`crate::cert_rotation::ServingCertManager`])
//! goes through the same code with its own signer, usages, SANs and store prefix.
//!
//! Left out: keys found on disk are
//! reused only as PKCS#8 (`PRIVATE KEY`), the only form `ring` signs with; an upstream
//! kubelet's SEC1 (`EC PRIVATE KEY`) or RSA key is replaced by a new P-256 key, and an
//! unreadable temporary key is replaced rather than being the error upstream makes it.
//! The `<cert-dir>/kubelet-client.crt`/`.key` fallback pair of upstream's file store
//! is not consulted.

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use ferrokube_pki::CertInfo;
use futures::StreamExt as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher;
use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, PublicKeyData as _};
use rustls_pki_types::pem::{PemObject as _, SectionKind};
use rustls_pki_types::{CertificateDer, CertificateSigningRequestDer, PrivateKeyDer};
use serde::{Deserialize, Serialize};

/// `--cert-dir`'s default.
pub const DEFAULT_CERT_DIR: &str = "/var/lib/kubelet/pki";

/// The file store's pair prefix: `kubelet-client-current.pem`, `kubelet-client-<ts>.pem`.
pub const PAIR_PREFIX: &str = "kubelet-client";

/// Where the key waits until its certificate is issued (upstream's `tmpPrivateKeyFile`).
pub const TMP_PRIVATE_KEY_FILE: &str = "kubelet-client.key.tmp";

/// The signer of kubelet client certificates.
pub const KUBELET_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";

/// The usages requested for an ECDSA key.
pub const CLIENT_USAGES: [&str; 2] = ["digital signature", "client auth"];

/// The nodes' group.
pub const NODES_GROUP: &str = "system:nodes";

/// The serving certificate store's pair prefix (`serverTLSBootstrap`):
/// `kubelet-server-current.pem`.
pub const SERVING_PAIR_PREFIX: &str = "kubelet-server";

/// The signer of kubelet serving certificates; kube-controller-manager never approves
/// these by itself, so an administrator must.
pub const KUBELET_SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";

/// The serving usages requested for an ECDSA key (an RSA key would add `key
/// encipherment`, but this module only makes P-256 keys).
pub const SERVING_USAGES: [&str; 2] = ["digital signature", "server auth"];

/// What a request asks for and which store keeps the answer: upstream's
/// `x509.CertificateRequest` template together with the manager's signer, usages and
/// file-store prefix, so the client and serving managers differ only in this value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsrTemplate {
    pub common_name: String,
    pub organizations: Vec<String>,
    pub dns_names: Vec<String>,
    pub ips: Vec<std::net::IpAddr>,
    pub signer_name: String,
    pub usages: Vec<String>,
    pub store_prefix: String,
}

impl CsrTemplate {
    /// Upstream `NewKubeletClientCertificateManager`'s template.
    pub fn client(node_name: &str) -> Self {
        let (common_name, organizations) = node_subject(node_name);
        CsrTemplate {
            common_name,
            organizations,
            dns_names: Vec::new(),
            ips: Vec::new(),
            signer_name: KUBELET_CLIENT_SIGNER.into(),
            usages: CLIENT_USAGES.iter().map(|u| u.to_string()).collect(),
            store_prefix: PAIR_PREFIX.into(),
        }
    }

    /// Upstream `newGetTemplateFn`: `None` without an IP address, as upstream then
    /// requests nothing (a DNS-only request needs the `AllowDNSOnlyNodeCSR` gate, off
    /// by default and not offered here).
    pub fn serving(
        node_name: &str,
        dns_names: Vec<String>,
        ips: Vec<std::net::IpAddr>,
    ) -> Option<Self> {
        if ips.is_empty() {
            return None;
        }
        let (common_name, organizations) = node_subject(node_name);
        Some(CsrTemplate {
            common_name,
            organizations,
            dns_names,
            ips,
            signer_name: KUBELET_SERVING_SIGNER.into(),
            usages: SERVING_USAGES.iter().map(|u| u.to_string()).collect(),
            store_prefix: SERVING_PAIR_PREFIX.into(),
        })
    }
}

/// How long upstream waits for the request to be approved and issued.
pub const CERTIFICATE_WAIT: Duration = Duration::from_secs(3600);

/// How long upstream waits for the apiserver's `/healthz` before requesting anyway.
pub const SERVER_WAIT: Duration = Duration::from_secs(60);

/// What [`load_client_cert`] needs.
#[derive(Debug, Clone)]
pub struct BootstrapOptions {
    /// `--kubeconfig`: checked, and written when a certificate is obtained.
    pub kubeconfig: PathBuf,
    /// `--bootstrap-kubeconfig`: the credentials the request is made with.
    pub bootstrap_kubeconfig: PathBuf,
    /// `--cert-dir`.
    pub cert_dir: PathBuf,
    /// The node's name (the certificate's CN is `system:node:<node_name>`).
    pub node_name: String,
    /// How long to wait for the request to be approved and issued.
    pub certificate_wait: Duration,
    /// How long to wait for the apiserver's `/healthz` before requesting anyway.
    pub server_wait: Duration,
}

impl BootstrapOptions {
    /// Options with upstream's waits.
    pub fn new(
        kubeconfig: impl Into<PathBuf>,
        bootstrap_kubeconfig: impl Into<PathBuf>,
        cert_dir: impl Into<PathBuf>,
        node_name: impl Into<String>,
    ) -> Self {
        BootstrapOptions {
            kubeconfig: kubeconfig.into(),
            bootstrap_kubeconfig: bootstrap_kubeconfig.into(),
            cert_dir: cert_dir.into(),
            node_name: node_name.into(),
            certificate_wait: CERTIFICATE_WAIT,
            server_wait: SERVER_WAIT,
        }
    }
}

/// What [`load_client_cert`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// `--kubeconfig` already had a usable client certificate.
    KubeconfigValid,
    /// A certificate was requested, issued and stored; `--kubeconfig` was written.
    Bootstrapped {
        /// The CertificateSigningRequest's name.
        csr_name: String,
        /// The `kubelet-client-<timestamp>.pem` written.
        pem_file: PathBuf,
    },
}

/// Errors of the bootstrap; the texts of the request's outcomes are upstream's.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("unable to load bootstrap kubeconfig {path}: {message}")]
    BootstrapKubeconfig { path: PathBuf, message: String },
    #[error("unable to create certificates signing request client: {0}")]
    Client(String),
    #[error("invalid private key for certificate request: {0}")]
    Key(String),
    #[error("unable to generate certificate request: {0}")]
    Request(String),
    #[error("cannot create certificate signing request: {0}")]
    Create(#[source] kube::Error),
    #[error("cannot retrieve certificate signing request: {0}")]
    Get(#[source] kube::Error),
    #[error("retrieved csr is not compatible: {0}")]
    Incompatible(String),
    #[error("certificate signing request is denied, reason: {reason}, message: {message}")]
    Denied { reason: String, message: String },
    #[error("certificate signing request failed, reason: {reason}, message: {message}")]
    Failed { reason: String, message: String },
    #[error("csr {0:?} was deleted")]
    Deleted(String),
    #[error("csr {0:?} changed UIDs")]
    UidChanged(String),
    #[error(
        "timed out after {waited:?} waiting for certificate signing request {name:?} to be approved and issued"
    )]
    Timeout { name: String, waited: Duration },
    #[error("invalid certificate data: {0}")]
    Certificate(String),
    #[error("{0}")]
    Store(String),
    #[error("the node name is empty")]
    NoNodeName,
}

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> BootstrapError + '_ {
    move |source| BootstrapError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Upstream `LoadClientCert`: makes sure `opts.kubeconfig` holds a usable client
/// certificate, requesting one with the bootstrap kubeconfig's credentials if not.
pub async fn load_client_cert(opts: &BootstrapOptions) -> Result<Outcome, BootstrapError> {
    if kubeconfig_still_valid(&opts.kubeconfig, SystemTime::now())? {
        tracing::info!(path = %opts.kubeconfig.display(), "kubeconfig exists and is valid, skipping bootstrap");
        return Ok(Outcome::KubeconfigValid);
    }
    if opts.node_name.is_empty() {
        return Err(BootstrapError::NoNodeName);
    }
    tracing::info!(
        bootstrap = %opts.bootstrap_kubeconfig.display(),
        "using the bootstrap kubeconfig to request a client certificate"
    );
    let cluster = bootstrap_cluster(&opts.bootstrap_kubeconfig)?;
    let client = bootstrap_client(&opts.bootstrap_kubeconfig).await?;

    // The symlink must name an absolute file whatever the working directory.
    let cert_dir = std::path::absolute(&opts.cert_dir).map_err(io_err(&opts.cert_dir))?;
    recover_store(&cert_dir)?;
    let tmp_key = cert_dir.join(TMP_PRIVATE_KEY_FILE);
    let key_pem = match current_pair_key(&cert_dir) {
        Some(k) => k,
        None => load_or_generate_key(&tmp_key)?,
    };

    wait_for_server(&client, opts.server_wait).await;

    let (csr_name, cert_pem) = request_certificate(
        &client,
        &key_pem,
        &CsrTemplate::client(&opts.node_name),
        CsrName::Digested,
        opts.certificate_wait,
    )
    .await?;
    let now = jiff::Zoned::now();
    let pem_file = store_update(&cert_dir, &cert_pem, &key_pem, &timestamp(&now))?;
    if let Err(e) = std::fs::remove_file(&tmp_key)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(path = %tmp_key.display(), error = %e, "failed cleaning up the private key file");
    }
    let current = cert_dir.join(current_file_name());
    write_file(
        &opts.kubeconfig,
        kubeconfig_yaml(&cluster, &current).as_bytes(),
        0o600,
    )?;
    tracing::info!(csr = %csr_name, certificate = %pem_file.display(), kubeconfig = %opts.kubeconfig.display(), "client certificate bootstrapped");
    Ok(Outcome::Bootstrapped { csr_name, pem_file })
}

// ---------------------------------------------------------------------------------
// Kubeconfig files
// ---------------------------------------------------------------------------------

/// The part of a kubeconfig file read here (client-go's `clientcmd/api/v1`).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct KubeconfigFile {
    clusters: Vec<NamedCluster>,
    users: Vec<NamedUser>,
    contexts: Vec<NamedContext>,
    #[serde(rename = "current-context")]
    current_context: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct NamedCluster {
    name: String,
    cluster: ClusterEntry,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ClusterEntry {
    server: String,
    #[serde(rename = "certificate-authority")]
    certificate_authority: Option<String>,
    #[serde(rename = "certificate-authority-data")]
    certificate_authority_data: Option<String>,
    #[serde(rename = "insecure-skip-tls-verify")]
    insecure_skip_tls_verify: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct NamedUser {
    name: String,
    user: UserEntry,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct UserEntry {
    #[serde(rename = "client-certificate")]
    client_certificate: Option<String>,
    #[serde(rename = "client-certificate-data")]
    client_certificate_data: Option<String>,
    #[serde(rename = "client-key")]
    client_key: Option<String>,
    #[serde(rename = "client-key-data")]
    client_key_data: Option<String>,
}

impl std::fmt::Debug for UserEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserEntry")
            .field("client_certificate", &self.client_certificate)
            .field("client_key", &self.client_key)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct NamedContext {
    name: String,
    context: ContextEntry,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ContextEntry {
    cluster: String,
    user: String,
}

impl KubeconfigFile {
    fn read(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
        serde_yaml_ng::from_str(&text).map_err(|e| e.to_string())
    }

    fn current(&self) -> Result<&ContextEntry, String> {
        if self.current_context.is_empty() {
            return Err("no current-context".into());
        }
        self.contexts
            .iter()
            .find(|c| c.name == self.current_context)
            .map(|c| &c.context)
            .ok_or_else(|| format!("context {:?} not found", self.current_context))
    }

    fn cluster(&self) -> Result<&ClusterEntry, String> {
        let name = &self.current()?.cluster;
        self.clusters
            .iter()
            .find(|c| &c.name == name)
            .map(|c| &c.cluster)
            .ok_or_else(|| format!("cluster {name:?} not found"))
    }

    fn user(&self) -> Result<&UserEntry, String> {
        let name = &self.current()?.user;
        self.users
            .iter()
            .find(|u| &u.name == name)
            .map(|u| &u.user)
            .ok_or_else(|| format!("user {name:?} not found"))
    }
}

/// A `*-data` field (base64) or a file (relative to the kubeconfig's directory), the
/// data winning as in client-go.
fn load_data_or_file(
    data: Option<&str>,
    file: Option<&str>,
    dir: &Path,
) -> Result<Option<Vec<u8>>, String> {
    if let Some(d) = data.filter(|d| !d.is_empty()) {
        return base64::engine::general_purpose::STANDARD
            .decode(d.trim())
            .map(Some)
            .map_err(|e| format!("invalid base64: {e}"));
    }
    match file.filter(|f| !f.is_empty()) {
        Some(f) => {
            let path = dir.join(f);
            std::fs::read(&path)
                .map(Some)
                .map_err(|e| format!("{}: {e}", path.display()))
        }
        None => Ok(None),
    }
}

/// Upstream `isClientConfigStillValid`: whether the kubeconfig at `path` exists and
/// its current user has a client certificate that loads with its key and none of
/// whose certificates has expired at `now`. Only a failure to look at the file (other
/// than its absence) is an error; anything wrong inside it means "bootstrap again".
pub fn kubeconfig_still_valid(path: &Path, now: SystemTime) -> Result<bool, BootstrapError> {
    match std::fs::metadata(path) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(source) => {
            return Err(BootstrapError::Io {
                path: path.to_path_buf(),
                source,
            });
        }
    }
    match client_certificate_problem(path, now) {
        None => Ok(true),
        Some(why) => {
            tracing::warn!(path = %path.display(), "existing kubeconfig is not usable, bootstrapping: {why}");
            Ok(false)
        }
    }
}

/// Why the kubeconfig's client certificate is not usable, if it is not.
fn client_certificate_problem(path: &Path, now: SystemTime) -> Option<String> {
    let kc = match KubeconfigFile::read(path) {
        Ok(kc) => kc,
        Err(e) => return Some(format!("unable to read it: {e}")),
    };
    let user = match kc.user() {
        Ok(u) => u,
        Err(e) => return Some(e),
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let cert = load_data_or_file(
        user.client_certificate_data.as_deref(),
        user.client_certificate.as_deref(),
        dir,
    );
    let key = load_data_or_file(
        user.client_key_data.as_deref(),
        user.client_key.as_deref(),
        dir,
    );
    let (cert, key) = match (cert, key) {
        (Ok(Some(c)), Ok(Some(k))) => (c, k),
        (Err(e), _) | (_, Err(e)) => return Some(e),
        _ => return Some("no client certificate and key".into()),
    };
    check_pair(&cert, &key).err().or_else(|| {
        let certs = CertificateDer::pem_slice_iter(&cert)
            .collect::<Result<Vec<_>, _>>()
            .ok()?;
        certs.iter().find_map(|c| match CertInfo::from_der(c) {
            Err(e) => Some(e.to_string()),
            Ok(info) if now > info.not_after => Some(format!(
                "part of the client certificate expired at {}",
                rfc3339(info.not_after)
            )),
            Ok(_) => None,
        })
    })
}

/// The current user's client credentials in a kubeconfig, as client-go's rest config
/// holds them: the `client-certificate`/`client-key` files (read, relative to the
/// kubeconfig's directory) and the inline `*-data`, each only when both halves are set.
#[derive(Default)]
pub(crate) struct KubeconfigClientCert {
    /// The files' contents, or why they could not be read.
    pub files: Option<Result<PemPair, String>>,
    pub data: Option<PemPair>,
}

/// A certificate (chain) and its key, PEM.
pub(crate) type PemPair = (Vec<u8>, Vec<u8>);

/// Reads [`KubeconfigClientCert`] from the kubeconfig at `path`.
pub(crate) fn kubeconfig_client_cert(path: &Path) -> Result<KubeconfigClientCert, String> {
    let kc = KubeconfigFile::read(path)?;
    let user = kc.user()?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let set = |s: &Option<String>| s.as_deref().filter(|s| !s.is_empty()).is_some();
    let files = (set(&user.client_certificate) && set(&user.client_key)).then(|| {
        let read = |f: &Option<String>| load_data_or_file(None, f.as_deref(), dir);
        match (read(&user.client_certificate), read(&user.client_key)) {
            (Ok(Some(c)), Ok(Some(k))) => Ok((c, k)),
            (Err(e), _) | (_, Err(e)) => Err(e),
            _ => Err("no client certificate and key".into()),
        }
    });
    let data = if set(&user.client_certificate_data) && set(&user.client_key_data) {
        let decode = |d: &Option<String>| load_data_or_file(d.as_deref(), None, dir);
        match (
            decode(&user.client_certificate_data),
            decode(&user.client_key_data),
        ) {
            (Ok(Some(c)), Ok(Some(k))) => Some((c, k)),
            (Err(e), _) | (_, Err(e)) => return Err(e),
            _ => None,
        }
    } else {
        None
    };
    Ok(KubeconfigClientCert { files, data })
}

pub(crate) fn rfc3339(t: SystemTime) -> String {
    jiff::Timestamp::try_from(t)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| format!("{t:?}"))
}

/// Go's `tls.X509KeyPair`: at least one certificate, a private key, and the key the
/// first certificate's. Returns the certificates.
pub(crate) fn check_pair(
    cert_pem: &[u8],
    key_pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, String> {
    certified_key(cert_pem, key_pem).map(|k| k.cert)
}

/// [`check_pair`]'s pair, ready for TLS handshakes.
pub(crate) fn certified_key(
    cert_pem: &[u8],
    key_pem: &[u8],
) -> Result<rustls::sign::CertifiedKey, String> {
    let certs = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("unable to parse the certificates: {e}"))?;
    if certs.is_empty() {
        return Err("no certificate found".into());
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| format!("unable to parse the private key: {e}"))?;
    let provider = rustls::crypto::ring::default_provider();
    rustls::sign::CertifiedKey::from_der(certs, key, &provider)
        .map_err(|e| format!("the certificate and key do not form a pair: {e}"))
}

/// The bootstrap kubeconfig's cluster, CA paths made absolute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootstrapCluster {
    pub server: String,
    /// `certificate-authority`: a file, written as a file.
    pub ca_file: Option<PathBuf>,
    /// `certificate-authority-data` (base64, as in the file) when there is no file.
    pub ca_data: Option<String>,
    pub insecure_skip_tls_verify: bool,
}

/// The current context's cluster of the bootstrap kubeconfig.
pub fn bootstrap_cluster(path: &Path) -> Result<BootstrapCluster, BootstrapError> {
    let bad = |message: String| BootstrapError::BootstrapKubeconfig {
        path: path.to_path_buf(),
        message,
    };
    let kc = KubeconfigFile::read(path).map_err(bad)?;
    let cluster = kc.cluster().map_err(bad)?;
    if cluster.server.is_empty() {
        return Err(bad("the cluster has no server".into()));
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let ca_file = cluster
        .certificate_authority
        .as_deref()
        .filter(|f| !f.is_empty())
        .map(|f| dir.join(f));
    let ca_file = match ca_file {
        Some(f) => Some(std::path::absolute(&f).map_err(io_err(&f))?),
        None => None,
    };
    let ca_data = if ca_file.is_some() {
        None
    } else {
        cluster
            .certificate_authority_data
            .clone()
            .filter(|d| !d.is_empty())
    };
    Ok(BootstrapCluster {
        server: cluster.server.clone(),
        ca_file,
        ca_data,
        insecure_skip_tls_verify: cluster.insecure_skip_tls_verify,
    })
}

pub(crate) async fn bootstrap_client(path: &Path) -> Result<kube::Client, BootstrapError> {
    let bad = |message: String| BootstrapError::BootstrapKubeconfig {
        path: path.to_path_buf(),
        message,
    };
    let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| bad(e.to_string()))?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .map_err(|e| bad(e.to_string()))?;
    ferrokube_client::config::build_client(cfg).map_err(|e| BootstrapError::Client(e.to_string()))
}

/// The kubeconfig written after bootstrapping (clientcmd's v1 `Config`, its fields in
/// the order `clientcmd.WriteToFile` writes them).
#[derive(Debug, Serialize)]
struct OutKubeconfig<'a> {
    #[serde(rename = "apiVersion")]
    api_version: &'a str,
    clusters: Vec<OutNamedCluster<'a>>,
    contexts: Vec<OutNamedContext<'a>>,
    #[serde(rename = "current-context")]
    current_context: &'a str,
    kind: &'a str,
    preferences: std::collections::BTreeMap<String, String>,
    users: Vec<OutNamedUser<'a>>,
}

#[derive(Debug, Serialize)]
struct OutNamedCluster<'a> {
    cluster: OutCluster<'a>,
    name: &'a str,
}

#[derive(Debug, Serialize)]
struct OutCluster<'a> {
    #[serde(
        rename = "certificate-authority",
        skip_serializing_if = "Option::is_none"
    )]
    certificate_authority: Option<String>,
    #[serde(
        rename = "certificate-authority-data",
        skip_serializing_if = "Option::is_none"
    )]
    certificate_authority_data: Option<&'a str>,
    #[serde(rename = "insecure-skip-tls-verify", skip_serializing_if = "is_false")]
    insecure_skip_tls_verify: bool,
    server: &'a str,
}

fn is_false(b: &bool) -> bool {
    !*b
}

#[derive(Debug, Serialize)]
struct OutNamedContext<'a> {
    context: OutContext<'a>,
    name: &'a str,
}

#[derive(Debug, Serialize)]
struct OutContext<'a> {
    cluster: &'a str,
    namespace: &'a str,
    user: &'a str,
}

#[derive(Debug, Serialize)]
struct OutNamedUser<'a> {
    name: &'a str,
    user: OutUser,
}

#[derive(Debug, Serialize)]
struct OutUser {
    #[serde(rename = "client-certificate")]
    client_certificate: String,
    #[serde(rename = "client-key")]
    client_key: String,
}

/// Upstream `writeKubeconfigFromBootstrapping`'s document: the bootstrap cluster, and
/// `pem_path` as both the client certificate and the key.
pub fn kubeconfig_yaml(cluster: &BootstrapCluster, pem_path: &Path) -> String {
    let pem = pem_path.display().to_string();
    let doc = OutKubeconfig {
        api_version: "v1",
        clusters: vec![OutNamedCluster {
            cluster: OutCluster {
                certificate_authority: cluster.ca_file.as_ref().map(|p| p.display().to_string()),
                certificate_authority_data: cluster.ca_data.as_deref(),
                insecure_skip_tls_verify: cluster.insecure_skip_tls_verify,
                server: &cluster.server,
            },
            name: "default-cluster",
        }],
        contexts: vec![OutNamedContext {
            context: OutContext {
                cluster: "default-cluster",
                namespace: "default",
                user: "default-auth",
            },
            name: "default-context",
        }],
        current_context: "default-context",
        kind: "Config",
        preferences: Default::default(),
        users: vec![OutNamedUser {
            name: "default-auth",
            user: OutUser {
                client_certificate: pem.clone(),
                client_key: pem,
            },
        }],
    };
    // Plain structs of strings and booleans always serialize.
    serde_yaml_ng::to_string(&doc).unwrap_or_default()
}

// ---------------------------------------------------------------------------------
// Keys and the request
// ---------------------------------------------------------------------------------

/// The request's subject: (CN, O).
pub fn node_subject(node_name: &str) -> (String, Vec<String>) {
    (
        format!("system:node:{node_name}"),
        vec![NODES_GROUP.to_string()],
    )
}

/// A fresh ECDSA P-256 key, PKCS#8 PEM.
pub fn generate_key() -> Result<String, BootstrapError> {
    KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .map(|k| k.serialize_pem())
        .map_err(|e| BootstrapError::Key(e.to_string()))
}

/// Upstream `certutil.MakeCSR` for a node: a PKCS#10 request, PEM, with the subject
/// `O=system:nodes, CN=system:node:<node_name>` and no extensions.
pub fn make_csr_pem(key: &KeyPair, node_name: &str) -> Result<String, BootstrapError> {
    make_request_pem(key, &CsrTemplate::client(node_name))
}

/// Upstream `x509.CreateCertificateRequest` of a template: its subject and, when it
/// has any, a subjectAltName extension with its DNS names and IP addresses.
pub fn make_request_pem(key: &KeyPair, template: &CsrTemplate) -> Result<String, BootstrapError> {
    let (cn, orgs) = (&template.common_name, &template.organizations);
    let mut params = CertificateParams::default();
    for d in &template.dns_names {
        let name = d
            .as_str()
            .try_into()
            .map_err(|e: rcgen::Error| BootstrapError::Request(e.to_string()))?;
        params.subject_alt_names.push(rcgen::SanType::DnsName(name));
    }
    for ip in &template.ips {
        params
            .subject_alt_names
            .push(rcgen::SanType::IpAddress(*ip));
    }
    params.distinguished_name = DistinguishedName::new();
    for o in orgs {
        params
            .distinguished_name
            .push(DnType::OrganizationName, o.as_str());
    }
    params
        .distinguished_name
        .push(DnType::CommonName, cn.as_str());
    params
        .serialize_request(key)
        .and_then(|csr| csr.pem())
        .map_err(|e| BootstrapError::Request(e.to_string()))
}

/// Upstream `digestedName`: `node-csr-` and the unpadded base64url SHA-512/256 of the
/// public key (SubjectPublicKeyInfo DER), the CN, each O and each usage, each written
/// as unpadded base64url followed by `|` (outside that alphabet, so no two inputs
/// write the same stream).
pub fn digested_name(spki_der: &[u8], cn: &str, orgs: &[String], usages: &[&str]) -> String {
    let encode = |d: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(d);
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA512_256);
    let mut write = |d: &[u8]| {
        ctx.update(encode(d).as_bytes());
        ctx.update(b"|");
    };
    write(spki_der);
    write(cn.as_bytes());
    for o in orgs {
        write(o.as_bytes());
    }
    for u in usages {
        write(u.as_bytes());
    }
    format!("node-csr-{}", encode(ctx.finish().as_ref()))
}

/// The CertificateSigningRequest object for `request_pem`.
pub fn csr_object(name: &str, request_pem: &str) -> CertificateSigningRequest {
    template_csr_object(name, request_pem, &CsrTemplate::client(""))
}

/// The CertificateSigningRequest object for `request_pem` with the template's signer
/// and usages.
pub fn template_csr_object(
    name: &str,
    request_pem: &str,
    template: &CsrTemplate,
) -> CertificateSigningRequest {
    CertificateSigningRequest {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(request_pem.as_bytes().to_vec()),
            signer_name: template.signer_name.clone(),
            usages: Some(template.usages.clone()),
            expiration_seconds: None,
            ..Default::default()
        },
        status: None,
    }
}

/// Upstream `keyutil.LoadOrGenerateKeyFile`: the PKCS#8 key at `path`, or a new one
/// written there (0600) so a later attempt asks with the same key.
pub fn load_or_generate_key(path: &Path) -> Result<String, BootstrapError> {
    match std::fs::read_to_string(path) {
        Ok(pem) if KeyPair::from_pem(&pem).is_ok() => return Ok(pem),
        Ok(_) => {
            tracing::warn!(path = %path.display(), "the cached private key is not a usable PKCS#8 key, replacing it")
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(BootstrapError::Io {
                path: path.to_path_buf(),
                source,
            });
        }
    }
    let pem = generate_key()?;
    write_file(path, pem.as_bytes(), 0o600)?;
    Ok(pem)
}

/// The key of `<cert_dir>/kubelet-client-current.pem` when the pair there still
/// loads (expired or not) and the key is one this module can sign with.
fn current_pair_key(cert_dir: &Path) -> Option<String> {
    let data = std::fs::read(cert_dir.join(current_file_name())).ok()?;
    check_pair(&data, &data).ok()?;
    let key = first_key_block(&data)?;
    KeyPair::from_pem(&key).ok().map(|_| key)
}

/// The first private-key block of a PEM document, re-encoded.
pub(crate) fn first_key_block(pem: &[u8]) -> Option<String> {
    let mut reader = std::io::Cursor::new(pem);
    while let Ok(Some((kind, der))) = rustls_pki_types::pem::from_buf(&mut reader) {
        let label = match kind {
            SectionKind::PrivateKey => "PRIVATE KEY",
            SectionKind::EcPrivateKey => "EC PRIVATE KEY",
            SectionKind::RsaPrivateKey => "RSA PRIVATE KEY",
            _ => continue,
        };
        return Some(ferrokube_pki::pem::encode_pem(label, &der));
    }
    None
}

/// The subject (CN, O), SubjectPublicKeyInfo DER and verified self-signature of a
/// PEM request.
fn parse_request(pem: &[u8]) -> Result<(String, Vec<String>, Vec<u8>), String> {
    use x509_parser::prelude::FromDer as _;
    let der = CertificateSigningRequestDer::from_pem_slice(pem)
        .map_err(|_| "PEM block type must be CERTIFICATE REQUEST".to_string())?;
    let (_, csr) =
        x509_parser::certification_request::X509CertificationRequest::from_der(der.as_ref())
            .map_err(|e| e.to_string())?;
    csr.verify_signature().map_err(|e| e.to_string())?;
    let info = &csr.certification_request_info;
    let text = |a: &x509_parser::x509::AttributeTypeAndValue<'_>| {
        a.as_str().map(str::to_owned).map_err(|e| e.to_string())
    };
    let cn = match info.subject.iter_common_name().last() {
        Some(a) => text(a)?,
        None => String::new(),
    };
    let orgs = info
        .subject
        .iter_organization()
        .map(text)
        .collect::<Result<Vec<_>, _>>()?;
    Ok((cn, orgs, info.subject_pki.raw.to_vec()))
}

/// Upstream `ensureCompatible`: a request found under our name must be ours: the same
/// subject and signer, signed by our key, and no expired certificate issued.
pub fn ensure_compatible(
    existing: &CertificateSigningRequest,
    wanted: &CertificateSigningRequest,
    spki_der: &[u8],
    now: SystemTime,
) -> Result<(), BootstrapError> {
    let bad = BootstrapError::Incompatible;
    let (cn, orgs, spki) = parse_request(&existing.spec.request.0)
        .map_err(|e| bad(format!("unable to parse new csr: {e}")))?;
    let (want_cn, want_orgs, _) = parse_request(&wanted.spec.request.0)
        .map_err(|e| bad(format!("unable to parse original csr: {e}")))?;
    if (&cn, &orgs) != (&want_cn, &want_orgs) {
        return Err(bad(format!(
            "csr subjects differ: new: CN={cn:?} O={orgs:?}, orig: CN={want_cn:?} O={want_orgs:?}"
        )));
    }
    let (new_signer, orig_signer) = (&existing.spec.signer_name, &wanted.spec.signer_name);
    if !new_signer.is_empty() && !orig_signer.is_empty() && new_signer != orig_signer {
        return Err(bad(format!(
            "csr signerNames differ: new {new_signer:?}, orig: {orig_signer:?}"
        )));
    }
    if spki != spki_der {
        return Err(bad(
            "error validating signature new CSR against old key: the public keys differ".into(),
        ));
    }
    let issued = existing
        .status
        .as_ref()
        .and_then(|s| s.certificate.as_ref())
        .filter(|c| !c.0.is_empty());
    if let Some(cert) = issued {
        let certs = CertificateDer::pem_slice_iter(&cert.0)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad(format!("error parsing signed certificate for CSR: {e}")))?;
        for c in &certs {
            let info = CertInfo::from_der(c)
                .map_err(|e| bad(format!("error parsing signed certificate for CSR: {e}")))?;
            if now > info.not_after {
                return Err(bad(format!(
                    "one of the certificates for the CSR has expired: {}",
                    rfc3339(info.not_after)
                )));
            }
        }
    }
    Ok(())
}

/// Where a request stands, as upstream's `WaitForCertificate` reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CsrState {
    /// Neither decided nor issued, or approved and not issued yet.
    Pending {
        approved: bool,
    },
    /// Approved, with this certificate (PEM).
    Issued(Vec<u8>),
    Denied {
        reason: String,
        message: String,
    },
    Failed {
        reason: String,
        message: String,
    },
}

/// The request's state: Denied and Failed win over Approved, and an approved request
/// is issued once `status.certificate` is not empty.
pub fn csr_state(csr: &CertificateSigningRequest) -> CsrState {
    let status = csr.status.as_ref();
    let mut approved = false;
    for c in status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
    {
        let reason = c.reason.clone().unwrap_or_default();
        let message = c.message.clone().unwrap_or_default();
        match c.type_.as_str() {
            "Denied" => return CsrState::Denied { reason, message },
            "Failed" => return CsrState::Failed { reason, message },
            "Approved" => approved = true,
            _ => {}
        }
    }
    match status.and_then(|s| s.certificate.as_ref()) {
        Some(cert) if approved && !cert.0.is_empty() => CsrState::Issued(cert.0.clone()),
        _ => CsrState::Pending { approved },
    }
}

/// How a request is named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CsrName {
    /// The bootstrap's [`digested_name`], so asking again finds the same request.
    Digested,
    /// `generateName: csr-`: the certificate manager's renewals, each with a new key.
    Generated,
}

/// Upstream `requestNodeCertificate` (or, with [`CsrName::Generated`], the
/// certificate manager's request) with `csr.RequestCertificate` and
/// `csr.WaitForCertificate`: the request's name and the issued certificate (PEM).
pub(crate) async fn request_certificate(
    client: &kube::Client,
    key_pem: &str,
    template: &CsrTemplate,
    naming: CsrName,
    wait: Duration,
) -> Result<(String, Vec<u8>), BootstrapError> {
    let key = KeyPair::from_pem(key_pem).map_err(|e| BootstrapError::Key(e.to_string()))?;
    let request_pem = make_request_pem(&key, template)?;
    let spki = key.subject_public_key_info();
    let (cn, orgs) = (&template.common_name, &template.organizations);
    let mut wanted = template_csr_object("", &request_pem, template);
    match naming {
        CsrName::Digested => {
            let usages: Vec<&str> = template.usages.iter().map(String::as_str).collect();
            wanted.metadata.name = Some(digested_name(&spki, cn, orgs, &usages));
        }
        CsrName::Generated => {
            wanted.metadata.name = None;
            wanted.metadata.generate_name = Some("csr-".into());
        }
    }
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    let req = match api.create(&PostParams::default(), &wanted).await {
        Ok(created) => created,
        Err(kube::Error::Api(s))
            if s.code == 409 && s.reason == "AlreadyExists" && naming == CsrName::Digested =>
        {
            let name = wanted.metadata.name.clone().unwrap_or_default();
            tracing::info!(csr = %name, "csr for this node already exists, reusing");
            let existing = api.get(&name).await.map_err(BootstrapError::Get)?;
            ensure_compatible(&existing, &wanted, &spki, SystemTime::now())?;
            existing
        }
        Err(e) => return Err(BootstrapError::Create(e)),
    };
    let name = req.metadata.name.clone().unwrap_or_default();
    let uid = req.metadata.uid.clone().unwrap_or_default();
    tracing::info!(csr = %name, signer = %template.signer_name, "waiting for the certificate to be issued");
    let cert = tokio::time::timeout(wait, wait_for_certificate(&api, &name, &uid))
        .await
        .map_err(|_| BootstrapError::Timeout {
            name: name.clone(),
            waited: wait,
        })??;
    Ok((name, cert))
}

/// Watches the request `name` (from a list, so a decision made before the watch
/// started counts) until it is issued, denied, failed or gone.
async fn wait_for_certificate(
    api: &Api<CertificateSigningRequest>,
    name: &str,
    uid: &str,
) -> Result<Vec<u8>, BootstrapError> {
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let stream = watcher(api.clone(), cfg).default_backoff();
    let mut stream = std::pin::pin!(stream);
    let mut listed = false;
    while let Some(event) = stream.next().await {
        let csr = match event {
            Err(e) => {
                tracing::warn!(csr = %name, error = %e, "watching the certificate signing request");
                continue;
            }
            Ok(watcher::Event::Init) => {
                listed = false;
                continue;
            }
            Ok(watcher::Event::InitDone) if !listed => {
                return Err(BootstrapError::Deleted(name.to_string()));
            }
            Ok(watcher::Event::InitDone) => continue,
            Ok(watcher::Event::Delete(_)) => {
                return Err(BootstrapError::Deleted(name.to_string()));
            }
            Ok(watcher::Event::InitApply(csr) | watcher::Event::Apply(csr)) => csr,
        };
        listed = true;
        if !uid.is_empty() && csr.metadata.uid.as_deref() != Some(uid) {
            return Err(BootstrapError::UidChanged(name.to_string()));
        }
        match csr_state(&csr) {
            CsrState::Issued(cert) => {
                tracing::info!(csr = %name, "certificate signing request is issued");
                return Ok(cert);
            }
            CsrState::Denied { reason, message } => {
                return Err(BootstrapError::Denied { reason, message });
            }
            CsrState::Failed { reason, message } => {
                return Err(BootstrapError::Failed { reason, message });
            }
            CsrState::Pending { approved: true } => {
                tracing::info!(csr = %name, "certificate signing request is approved, waiting to be issued");
            }
            CsrState::Pending { approved: false } => {}
        }
    }
    // The watcher retries forever; only the caller's timeout ends a silent wait.
    Err(BootstrapError::Deleted(name.to_string()))
}

/// Upstream `waitForServer`: polls `/healthz` every 2 s for up to `deadline`; not
/// reaching it is only logged (the request then reports the real error).
async fn wait_for_server(client: &kube::Client, deadline: Duration) {
    let start = tokio::time::Instant::now();
    loop {
        let req = hyper::http::Request::get("/healthz").body(Vec::new());
        let answer = match req {
            Ok(req) => tokio::time::timeout(Duration::from_secs(1), client.request_text(req)).await,
            Err(_) => return,
        };
        match answer {
            Ok(Ok(_)) => return,
            Ok(Err(e)) => tracing::info!(error = %e, "failed to connect to apiserver"),
            Err(_) => tracing::info!("failed to connect to apiserver: timed out"),
        }
        if start.elapsed() >= deadline {
            tracing::info!("timed out waiting to connect to apiserver");
            return;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

// ---------------------------------------------------------------------------------
// The file store
// ---------------------------------------------------------------------------------

/// `kubelet-client-current.pem`.
pub fn current_file_name() -> String {
    pair_file_name("current")
}

/// `kubelet-client-<qualifier>.pem` (upstream `fileStore.filename`).
pub fn pair_file_name(qualifier: &str) -> String {
    prefixed_file_name(PAIR_PREFIX, qualifier)
}

/// `<prefix>-<qualifier>.pem`, the file store of any pair prefix.
pub fn prefixed_file_name(prefix: &str, qualifier: &str) -> String {
    format!("{prefix}-{qualifier}.pem")
}

/// Go's `2006-01-02-15-04-05` layout of a local time, the pair files' qualifier.
pub fn timestamp(t: &jiff::Zoned) -> String {
    t.strftime("%Y-%m-%d-%H-%M-%S").to_string()
}

/// The pair file's content (upstream `fileStore.Update`): every certificate of
/// `cert_pem`, then the first block of `key_pem`; the two must form a pair.
pub fn pair_pem(cert_pem: &[u8], key_pem: &str) -> Result<String, BootstrapError> {
    let certs = check_pair(cert_pem, key_pem.as_bytes()).map_err(BootstrapError::Certificate)?;
    let key = first_key_block(key_pem.as_bytes())
        .ok_or_else(|| BootstrapError::Certificate("invalid key data".into()))?;
    let mut out: String = certs
        .iter()
        .map(|c| ferrokube_pki::pem::encode_cert_pem(c))
        .collect();
    out.push_str(&key);
    Ok(out)
}

/// Writes `<cert_dir>/kubelet-client-<ts>.pem` and points `kubelet-client-current.pem`
/// at it; returns the pair file.
pub(crate) fn store_update(
    cert_dir: &Path,
    cert_pem: &[u8],
    key_pem: &str,
    ts: &str,
) -> Result<PathBuf, BootstrapError> {
    store_update_prefixed(cert_dir, PAIR_PREFIX, cert_pem, key_pem, ts)
}

/// [`store_update`] for the store of `prefix`.
pub(crate) fn store_update_prefixed(
    cert_dir: &Path,
    prefix: &str,
    cert_pem: &[u8],
    key_pem: &str,
    ts: &str,
) -> Result<PathBuf, BootstrapError> {
    let content = pair_pem(cert_pem, key_pem)?;
    let pem_file = cert_dir.join(prefixed_file_name(prefix, ts));
    write_file(&pem_file, content.as_bytes(), 0o600)?;
    update_symlink(cert_dir, prefix, &pem_file)?;
    Ok(pem_file)
}

/// Upstream `fileStore.recover`: a switch interrupted between creating
/// `kubelet-client-updated.pem` and renaming it finishes now.
pub(crate) fn recover_store(cert_dir: &Path) -> Result<(), BootstrapError> {
    recover_store_prefixed(cert_dir, PAIR_PREFIX)
}

/// [`recover_store`] for the store of `prefix`.
pub(crate) fn recover_store_prefixed(cert_dir: &Path, prefix: &str) -> Result<(), BootstrapError> {
    let current = cert_dir.join(prefixed_file_name(prefix, "current"));
    if current.exists() {
        return Ok(());
    }
    let updated = cert_dir.join(prefixed_file_name(prefix, "updated"));
    match std::fs::symlink_metadata(&updated) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(BootstrapError::Io {
            path: updated,
            source,
        }),
        Ok(m) if !m.file_type().is_symlink() => Err(BootstrapError::Store(format!(
            "expected {} to be a symlink but it is a file",
            updated.display()
        ))),
        Ok(_) => std::fs::rename(&updated, &current).map_err(io_err(&updated)),
    }
}

/// Upstream `fileStore.updateSymlink`: `updated` is made to point at `target`, then
/// renamed over `current`, so `current` always names a whole pair.
fn update_symlink(cert_dir: &Path, prefix: &str, target: &Path) -> Result<(), BootstrapError> {
    let current = cert_dir.join(prefixed_file_name(prefix, "current"));
    let updated = cert_dir.join(prefixed_file_name(prefix, "updated"));
    for link in [&current, &updated] {
        match std::fs::symlink_metadata(link) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(BootstrapError::Io {
                    path: link.to_path_buf(),
                    source,
                });
            }
            Ok(m) if !m.file_type().is_symlink() => {
                return Err(BootstrapError::Store(format!(
                    "expected {} to be a symlink but it is a file",
                    link.display()
                )));
            }
            Ok(_) if link == &updated => {
                std::fs::remove_file(link).map_err(io_err(link))?;
            }
            Ok(_) => {}
        }
    }
    if !target.exists() {
        return Err(BootstrapError::Store(format!(
            "file {} does not exist so it can not be used as the currently selected cert/key",
            target.display()
        )));
    }
    let target = std::path::absolute(target).map_err(io_err(target))?;
    std::os::unix::fs::symlink(&target, &updated).map_err(io_err(&updated))?;
    // rename(2) replaces an existing symlink atomically.
    std::fs::rename(&updated, &current).map_err(io_err(&updated))
}

/// Writes `data` to `path` with `mode` (the directory made 0755 if missing), replacing
/// what was there.
fn write_file(path: &Path, data: &[u8], mode: u32) -> Result<(), BootstrapError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)
            .map_err(io_err(dir))?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .map_err(io_err(path))?;
    f.write_all(data).map_err(io_err(path))?;
    f.sync_all().map_err(io_err(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrokube_pki::{CertificateAuthority, Validity};

    fn ca() -> CertificateAuthority {
        CertificateAuthority::generate("test-ca").unwrap()
    }

    #[test]
    fn the_request_has_the_node_subject_and_no_extensions() {
        let key = KeyPair::from_pem(&generate_key().unwrap()).unwrap();
        let pem = make_csr_pem(&key, "node-a").unwrap();
        let req = ferrokube_pki::csr::parse_request_pem(pem.as_bytes()).unwrap();
        assert_eq!(req.common_name, "system:node:node-a");
        assert_eq!(req.organizations, ["system:nodes"]);
        assert!(req.dns_names.is_empty() && req.ip_addresses.is_empty());
        let (cn, orgs, spki) = parse_request(pem.as_bytes()).unwrap();
        assert_eq!(
            (cn.as_str(), orgs),
            ("system:node:node-a", vec![NODES_GROUP.to_string()])
        );
        assert_eq!(spki, key.subject_public_key_info());
        // A P-256 key, as upstream's keyutil makes.
        assert_eq!(key.algorithm(), &rcgen::PKCS_ECDSA_P256_SHA256);
    }

    #[test]
    fn the_csr_object_is_upstreams() {
        let obj = csr_object("node-csr-x", "PEM");
        let v = serde_json::to_value(&obj).unwrap();
        assert_eq!(v["metadata"]["name"], "node-csr-x");
        assert_eq!(v["spec"]["signerName"], KUBELET_CLIENT_SIGNER);
        assert_eq!(
            v["spec"]["usages"],
            serde_json::json!(["digital signature", "client auth"])
        );
        assert!(v["spec"].get("expirationSeconds").is_none());
    }

    #[test]
    fn digested_names_depend_on_every_input_and_are_stable() {
        let orgs = vec![NODES_GROUP.to_string()];
        let a = digested_name(b"key", "system:node:a", &orgs, &CLIENT_USAGES);
        assert_eq!(
            a,
            digested_name(b"key", "system:node:a", &orgs, &CLIENT_USAGES)
        );
        assert!(a.starts_with("node-csr-"));
        // 32 bytes of SHA-512/256, unpadded base64url.
        assert_eq!(a.len(), "node-csr-".len() + 43);
        assert!(
            a["node-csr-".len()..]
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        );
        assert_ne!(
            a,
            digested_name(b"key2", "system:node:a", &orgs, &CLIENT_USAGES)
        );
        assert_ne!(
            a,
            digested_name(b"key", "system:node:b", &orgs, &CLIENT_USAGES)
        );
        assert_ne!(
            a,
            digested_name(b"key", "system:node:a", &[], &CLIENT_USAGES)
        );
        assert_ne!(
            a,
            digested_name(b"key", "system:node:a", &orgs, &["client auth"])
        );
        // The delimiter keeps "CN:foo,O:bar" apart from "CN:foob,O:ar".
        assert_ne!(
            digested_name(b"k", "foo", &["bar".into()], &[]),
            digested_name(b"k", "foob", &["ar".into()], &[])
        );
    }

    #[test]
    fn digest_matches_a_hand_computed_stream() {
        // The stream upstream hashes for key "k", CN "c", O "o", usage "u":
        // base64url("k")|base64url("c")|base64url("o")|base64url("u")|
        let stream = b"aw|Yw|bw|dQ|";
        let sum = ring::digest::digest(&ring::digest::SHA512_256, stream);
        let want = format!(
            "node-csr-{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sum.as_ref())
        );
        assert_eq!(digested_name(b"k", "c", &["o".into()], &["u"]), want);
    }

    #[test]
    fn file_names_follow_the_store() {
        assert_eq!(current_file_name(), "kubelet-client-current.pem");
        let t: jiff::Zoned = "2024-03-05T07:08:09[UTC]".parse().unwrap();
        assert_eq!(timestamp(&t), "2024-03-05-07-08-09");
        assert_eq!(
            pair_file_name(&timestamp(&t)),
            "kubelet-client-2024-03-05-07-08-09.pem"
        );
    }

    #[test]
    fn csr_states() {
        let with = |conds: serde_json::Value, cert: Option<&str>| -> CertificateSigningRequest {
            let mut v = serde_json::json!({"metadata": {"name": "x"},
                "spec": {"request": "", "signerName": KUBELET_CLIENT_SIGNER},
                "status": {"conditions": conds}});
            if let Some(c) = cert {
                v["status"]["certificate"] =
                    serde_json::json!(base64::engine::general_purpose::STANDARD.encode(c));
            }
            serde_json::from_value(v).unwrap()
        };
        let cond = |t: &str, r: &str| serde_json::json!({"type": t, "status": "True", "reason": r, "message": format!("{r} msg")});
        assert_eq!(
            csr_state(&with(serde_json::json!([]), None)),
            CsrState::Pending { approved: false }
        );
        assert_eq!(
            csr_state(&with(serde_json::json!([cond("Approved", "A")]), None)),
            CsrState::Pending { approved: true }
        );
        assert_eq!(
            csr_state(&with(
                serde_json::json!([cond("Approved", "A")]),
                Some("CERT")
            )),
            CsrState::Issued(b"CERT".to_vec())
        );
        // A certificate without approval is not taken.
        assert_eq!(
            csr_state(&with(serde_json::json!([]), Some("CERT"))),
            CsrState::Pending { approved: false }
        );
        assert_eq!(
            csr_state(&with(
                serde_json::json!([
                    cond("Approved", "A"),
                    cond("Failed", "SignerValidationFailure")
                ]),
                None
            )),
            CsrState::Failed {
                reason: "SignerValidationFailure".into(),
                message: "SignerValidationFailure msg".into()
            }
        );
        let denied = csr_state(&with(serde_json::json!([cond("Denied", "NotYou")]), None));
        assert_eq!(
            denied,
            CsrState::Denied {
                reason: "NotYou".into(),
                message: "NotYou msg".into()
            }
        );
        let e = BootstrapError::Denied {
            reason: "NotYou".into(),
            message: "NotYou msg".into(),
        };
        assert_eq!(
            e.to_string(),
            "certificate signing request is denied, reason: NotYou, message: NotYou msg"
        );
    }

    #[test]
    fn an_existing_request_must_be_ours() {
        let key = KeyPair::from_pem(&generate_key().unwrap()).unwrap();
        let spki = key.subject_public_key_info();
        let ours = csr_object("n", &make_csr_pem(&key, "a").unwrap());
        let now = SystemTime::now();
        ensure_compatible(&ours, &ours, &spki, now).unwrap();

        let other_key = KeyPair::from_pem(&generate_key().unwrap()).unwrap();
        let theirs = csr_object("n", &make_csr_pem(&other_key, "a").unwrap());
        let e = ensure_compatible(&theirs, &ours, &spki, now).unwrap_err();
        assert!(e.to_string().contains("against old key"), "{e}");

        let other_node = csr_object("n", &make_csr_pem(&key, "b").unwrap());
        let e = ensure_compatible(&other_node, &ours, &spki, now).unwrap_err();
        assert!(e.to_string().contains("csr subjects differ"), "{e}");

        let mut other_signer = ours.clone();
        other_signer.spec.signer_name = "example.com/other".into();
        let e = ensure_compatible(&other_signer, &ours, &spki, now).unwrap_err();
        assert!(e.to_string().contains("signerNames differ"), "{e}");

        let mut expired = ours.clone();
        let hour = Duration::from_secs(3600);
        let old = ca()
            .issue_client_cert(
                "system:node:a",
                &[],
                Validity {
                    not_before: now - 2 * hour,
                    not_after: now - hour,
                },
            )
            .unwrap();
        expired.status = Some(Default::default());
        if let Some(s) = expired.status.as_mut() {
            s.certificate = Some(ByteString(old.cert_pem.into_bytes()));
        }
        let e = ensure_compatible(&expired, &ours, &spki, now).unwrap_err();
        assert!(e.to_string().contains("has expired"), "{e}");

        let mut garbage = ours.clone();
        garbage.spec.request = ByteString(b"nope".to_vec());
        let e = ensure_compatible(&garbage, &ours, &spki, now).unwrap_err();
        assert!(e.to_string().contains("unable to parse new csr"), "{e}");
    }

    fn write(dir: &Path, name: &str, data: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, data).unwrap();
        p
    }

    fn kubeconfig_with_user(user: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:6443\n\
             users:\n- name: u\n  user:\n{user}\ncontexts:\n- name: ctx\n  context:\n    cluster: c\n    user: u\n\
             current-context: ctx\n"
        )
    }

    #[test]
    fn existing_kubeconfig_validity() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let now = SystemTime::now();
        let ca = ca();
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);

        // Absent: bootstrap, no error.
        assert!(!kubeconfig_still_valid(&d.join("missing"), now).unwrap());

        // A valid pair inline.
        let good = ca
            .issue_client_cert(
                "system:node:a",
                &[NODES_GROUP.into()],
                Validity::leaf_default(),
            )
            .unwrap();
        let inline = write(
            d,
            "inline.conf",
            &kubeconfig_with_user(&format!(
                "    client-certificate-data: {}\n    client-key-data: {}",
                b64(&good.cert_pem),
                b64(&good.key_pem)
            )),
        );
        assert!(kubeconfig_still_valid(&inline, now).unwrap());
        // Not valid any more once past notAfter.
        assert!(
            !kubeconfig_still_valid(&inline, now + Duration::from_secs(2 * 365 * 86400)).unwrap()
        );

        // The store's layout: one combined file named (relatively) for both.
        write(d, "pair.pem", &format!("{}{}", good.cert_pem, good.key_pem));
        let files = write(
            d,
            "files.conf",
            &kubeconfig_with_user("    client-certificate: pair.pem\n    client-key: pair.pem"),
        );
        assert!(kubeconfig_still_valid(&files, now).unwrap());

        // Expired.
        let hour = Duration::from_secs(3600);
        let old = ca
            .issue_client_cert(
                "system:node:a",
                &[],
                Validity {
                    not_before: now - 2 * hour,
                    not_after: now - hour,
                },
            )
            .unwrap();
        let expired = write(
            d,
            "expired.conf",
            &kubeconfig_with_user(&format!(
                "    client-certificate-data: {}\n    client-key-data: {}",
                b64(&old.cert_pem),
                b64(&old.key_pem)
            )),
        );
        assert!(!kubeconfig_still_valid(&expired, now).unwrap());

        // A key that is not the certificate's.
        let mismatched = write(
            d,
            "mismatch.conf",
            &kubeconfig_with_user(&format!(
                "    client-certificate-data: {}\n    client-key-data: {}",
                b64(&good.cert_pem),
                b64(&old.key_pem)
            )),
        );
        assert!(!kubeconfig_still_valid(&mismatched, now).unwrap());

        // A token user, a missing file, garbage: all mean "bootstrap".
        let token = write(d, "token.conf", &kubeconfig_with_user("    token: abc.def"));
        assert!(!kubeconfig_still_valid(&token, now).unwrap());
        let missing = write(
            d,
            "missing-file.conf",
            &kubeconfig_with_user("    client-certificate: nope.pem\n    client-key: nope.pem"),
        );
        assert!(!kubeconfig_still_valid(&missing, now).unwrap());
        let garbage = write(d, "garbage.conf", "{{{{ not yaml");
        assert!(!kubeconfig_still_valid(&garbage, now).unwrap());
        let no_context = write(
            d,
            "nocontext.conf",
            &kubeconfig_with_user("    token: x").replace("current-context: ctx", ""),
        );
        assert!(!kubeconfig_still_valid(&no_context, now).unwrap());
    }

    #[test]
    fn bootstrap_cluster_and_written_kubeconfig() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let data = write(
            d,
            "data.conf",
            &ferrokube_pki::kubeconfig_token_yaml(
                "c",
                "https://10.0.0.1:6443",
                "CA PEM",
                "tls-bootstrap-token-user",
                "abcdef.0123456789abcdef",
            ),
        );
        let cluster = bootstrap_cluster(&data).unwrap();
        assert_eq!(cluster.server, "https://10.0.0.1:6443");
        assert_eq!(
            cluster.ca_data.as_deref(),
            Some(
                base64::engine::general_purpose::STANDARD
                    .encode("CA PEM")
                    .as_str()
            )
        );
        assert_eq!(cluster.ca_file, None);

        let yaml = kubeconfig_yaml(
            &cluster,
            Path::new("/var/lib/kubelet/pki/kubelet-client-current.pem"),
        );
        let v: serde_yaml_ng::Value = serde_yaml_ng::from_str(&yaml).unwrap();
        assert_eq!(v["current-context"].as_str(), Some("default-context"));
        let c = &v["clusters"][0];
        assert_eq!(c["name"].as_str(), Some("default-cluster"));
        assert_eq!(
            c["cluster"]["server"].as_str(),
            Some("https://10.0.0.1:6443")
        );
        assert_eq!(
            c["cluster"]["certificate-authority-data"].as_str(),
            cluster.ca_data.as_deref()
        );
        assert!(c["cluster"].get("insecure-skip-tls-verify").is_none());
        let ctx = &v["contexts"][0];
        assert_eq!(ctx["name"].as_str(), Some("default-context"));
        assert_eq!(ctx["context"]["namespace"].as_str(), Some("default"));
        assert_eq!(ctx["context"]["user"].as_str(), Some("default-auth"));
        let u = &v["users"][0];
        assert_eq!(u["name"].as_str(), Some("default-auth"));
        for f in ["client-certificate", "client-key"] {
            assert_eq!(
                u["user"][f].as_str(),
                Some("/var/lib/kubelet/pki/kubelet-client-current.pem")
            );
        }

        // A CA file is kept as a file, made absolute against the kubeconfig's directory.
        let file = write(
            d,
            "file.conf",
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://h:6443\n    certificate-authority: pki/ca.crt\n    insecure-skip-tls-verify: true\n\
             users:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n",
        );
        let cluster = bootstrap_cluster(&file).unwrap();
        assert_eq!(
            cluster.ca_file,
            Some(std::path::absolute(d.join("pki/ca.crt")).unwrap())
        );
        assert_eq!(cluster.ca_data, None);
        assert!(cluster.insecure_skip_tls_verify);
        let yaml = kubeconfig_yaml(&cluster, Path::new("/p.pem"));
        assert!(yaml.contains("certificate-authority: "), "{yaml}");
        assert!(yaml.contains("insecure-skip-tls-verify: true"), "{yaml}");

        let e = bootstrap_cluster(&d.join("absent.conf")).unwrap_err();
        assert!(
            e.to_string()
                .contains("unable to load bootstrap kubeconfig"),
            "{e}"
        );
    }

    #[test]
    fn keys_are_kept_until_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/kubelet-client.key.tmp");
        let first = load_or_generate_key(&path).unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(load_or_generate_key(&path).unwrap(), first);
        std::fs::write(&path, "garbage").unwrap();
        let replaced = load_or_generate_key(&path).unwrap();
        assert_ne!(replaced, first);
        assert!(KeyPair::from_pem(&replaced).is_ok());
    }

    #[test]
    fn the_store_writes_pairs_and_switches_current() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let ca = ca();
        let key_pem = generate_key().unwrap();
        let key = KeyPair::from_pem(&key_pem).unwrap();
        let req =
            ferrokube_pki::csr::parse_request_pem(make_csr_pem(&key, "a").unwrap().as_bytes())
                .unwrap();
        let v = Validity::leaf_default();
        let usages = CLIENT_USAGES.map(String::from);
        let cert = ca
            .sign_request(&req, &usages, v.not_before, v.not_after)
            .unwrap();

        // A certificate for another key is refused.
        let e = pair_pem(cert.as_bytes(), &generate_key().unwrap()).unwrap_err();
        assert!(e.to_string().contains("do not form a pair"), "{e}");
        assert!(pair_pem(b"", &key_pem).is_err());

        let first = store_update(d, cert.as_bytes(), &key_pem, "2024-01-01-00-00-00").unwrap();
        assert_eq!(first, d.join("kubelet-client-2024-01-01-00-00-00.pem"));
        let current = d.join(current_file_name());
        assert_eq!(std::fs::read_link(&current).unwrap(), first);
        let content = std::fs::read_to_string(&current).unwrap();
        assert!(content.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(content.contains("-----BEGIN PRIVATE KEY-----"));
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(
            std::fs::metadata(&first).unwrap().permissions().mode() & 0o777,
            0o600
        );
        // The current pair's key is the one reused for the next request.
        assert_eq!(current_pair_key(d), first_key_block(key_pem.as_bytes()));

        let second = store_update(d, cert.as_bytes(), &key_pem, "2024-01-02-00-00-00").unwrap();
        assert_eq!(std::fs::read_link(&current).unwrap(), second);
        assert!(first.exists(), "older pairs stay");
        assert!(!d.join(pair_file_name("updated")).exists());

        // An interrupted switch is finished by recover.
        std::fs::remove_file(&current).unwrap();
        std::os::unix::fs::symlink(&first, d.join(pair_file_name("updated"))).unwrap();
        recover_store(d).unwrap();
        assert_eq!(std::fs::read_link(&current).unwrap(), first);

        // A regular file where the symlink belongs is not overwritten.
        std::fs::remove_file(&current).unwrap();
        std::fs::write(&current, "x").unwrap();
        let e = store_update(d, cert.as_bytes(), &key_pem, "2024-01-03-00-00-00").unwrap_err();
        assert!(e.to_string().contains("to be a symlink"), "{e}");
    }
}
