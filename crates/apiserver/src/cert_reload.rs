//! The serving certificate and the client CA bundles followed while the apiserver
//! runs (upstream's `dynamiccertificates`: `DynamicServingCertificateController`,
//! `DynamicFileCAContent`), so rotating them needs no restart.
//!
//! Every [`CHECK_INTERVAL`] the files are read again and compared by content (an
//! atomic rename or a rewrite within the same second changes no mtime one can rely
//! on). A changed serving pair is installed only when both files load and the key is
//! the certificate's; a changed CA bundle only when it loads. Otherwise what is
//! installed stays and a warning names the file; the same content is not tried again
//! until it changes, so a half-written pair is retried as soon as its other half
//! lands. New handshakes and new authentications use what is installed; connections
//! already made keep their certificate.
//!
//! A changed client or request-header CA is published again in
//! `kube-system/extension-apiserver-authentication`, as upstream's
//! ClusterAuthenticationTrust controller does, merged as at start (so the replaced CA
//! stays listed there, for other apiservers that may still use it, until it expires).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ferrokube_auth::{ClientCa, RequestHeaderConfig};
use ferrokube_pki::serving::ServingCertificate;
use ferrokube_registry::Registry;
use tokio::sync::watch;

use crate::authentication_info::{self, AuthenticationInfo};

/// How often the files are read again (upstream re-reads them every minute and on
/// file events; a short poll of a few small files does without the events).
pub(crate) const CHECK_INTERVAL: Duration = Duration::from_secs(5);

/// The files behind the serving certificate and the client CAs, with what was
/// installed from them.
pub(crate) struct CertificateFiles {
    serving: ServingFiles,
    client_ca: Option<CaFile>,
    request_header: Option<(CaFile, RequestHeaderConfig)>,
}

/// `--tls-cert-file` and `--tls-private-key-file`.
pub(crate) struct ServingFiles {
    cert: PathBuf,
    key: PathBuf,
    certificate: Arc<ServingCertificate>,
    /// The contents last tried, loaded or not.
    tried: (Vec<u8>, Vec<u8>),
}

/// A CA bundle file (`--client-ca-file`, `--requestheader-client-ca-file`).
pub(crate) struct CaFile {
    flag: &'static str,
    path: PathBuf,
    ca: Arc<ClientCa>,
    /// The content last tried, loaded or not.
    tried: Vec<u8>,
}

impl CaFile {
    /// The bundle `flag` names at `path`, as read at start (`pem`).
    pub(crate) fn new(
        flag: &'static str,
        path: PathBuf,
        pem: &str,
    ) -> Result<Self, ferrokube_auth::AuthError> {
        Ok(CaFile {
            flag,
            path,
            ca: ClientCa::new(pem)?,
            tried: pem.as_bytes().to_vec(),
        })
    }

    /// The bundle in use, for the verifiers built over it.
    pub(crate) fn ca(&self) -> &Arc<ClientCa> {
        &self.ca
    }

    /// Installs the file's content if it changed and loads: whether the bundle in
    /// use changed.
    async fn check(&mut self) -> bool {
        let Some(content) = read(self.flag, &self.path).await else {
            return false;
        };
        if content == self.tried {
            return false;
        }
        let installed = match std::str::from_utf8(&content) {
            Ok(pem) => self.ca.replace(pem).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        self.tried = content;
        match installed {
            Ok(changed) => {
                if changed {
                    tracing::info!(
                        path = %self.path.display(),
                        "{} changed; client certificates are verified against it now",
                        self.flag
                    );
                }
                changed
            }
            Err(e) => {
                tracing::warn!(
                    path = %self.path.display(),
                    error = %e,
                    "{} changed but does not load; keeping the CA bundle in use",
                    self.flag
                );
                false
            }
        }
    }
}

impl CertificateFiles {
    pub(crate) fn new(
        serving: ServingFiles,
        client_ca: Option<CaFile>,
        request_header: Option<(CaFile, RequestHeaderConfig)>,
    ) -> Self {
        CertificateFiles {
            serving,
            client_ca,
            request_header,
        }
    }

    /// Installs what changed: whether a CA bundle in use changed.
    async fn check(&mut self) -> bool {
        self.serving.check().await;
        let mut ca_changed = false;
        if let Some(ca) = &mut self.client_ca {
            ca_changed |= ca.check().await;
        }
        if let Some((ca, _)) = &mut self.request_header {
            ca_changed |= ca.check().await;
        }
        ca_changed
    }

    /// What `kube-system/extension-apiserver-authentication` is told now.
    fn authentication_info(&self) -> AuthenticationInfo {
        AuthenticationInfo {
            client_ca: self.client_ca.as_ref().map(|f| f.ca.pem()),
            request_header: self
                .request_header
                .as_ref()
                .map(|(f, config)| (f.ca.pem(), config.clone())),
        }
    }
}

impl ServingFiles {
    /// `cert_pem` and `key_pem` are what `certificate` was built from at start.
    pub(crate) fn new(
        (cert, cert_pem): (PathBuf, &str),
        (key, key_pem): (PathBuf, &str),
        certificate: Arc<ServingCertificate>,
    ) -> Self {
        ServingFiles {
            cert,
            key,
            certificate,
            tried: (cert_pem.as_bytes().to_vec(), key_pem.as_bytes().to_vec()),
        }
    }

    async fn check(&mut self) {
        let (Some(cert), Some(key)) = (
            read("--tls-cert-file", &self.cert).await,
            read("--tls-private-key-file", &self.key).await,
        ) else {
            return;
        };
        if (&cert, &key) == (&self.tried.0, &self.tried.1) {
            return;
        }
        let installed = match (std::str::from_utf8(&cert), std::str::from_utf8(&key)) {
            (Ok(cert_pem), Ok(key_pem)) => self
                .certificate
                .replace(cert_pem, key_pem)
                .map_err(|e| e.to_string()),
            (Err(e), _) | (_, Err(e)) => Err(e.to_string()),
        };
        self.tried = (cert, key);
        match installed {
            Ok(()) => tracing::info!(
                cert = %self.cert.display(),
                key = %self.key.display(),
                "serving certificate changed; new connections are served with it"
            ),
            Err(e) => tracing::warn!(
                cert = %self.cert.display(),
                key = %self.key.display(),
                error = %e,
                "serving certificate or key changed but does not load; keeping the one in use"
            ),
        }
    }
}

async fn read(flag: &str, path: &Path) -> Option<Vec<u8>> {
    match tokio::fs::read(path).await {
        Ok(content) => Some(content),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "reading {flag}");
            None
        }
    }
}

/// Follows `files` until shutdown, publishing changed CAs through `registry`.
pub(crate) async fn run(
    mut files: CertificateFiles,
    registry: Arc<Registry>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut ticker = tokio::time::interval(CHECK_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The files were read at start.
    ticker.tick().await;
    // Kept until a write succeeds, so a failed one is tried again at the next check.
    let mut publish_pending = false;
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = shutdown.changed() => return,
        }
        publish_pending |= files.check().await;
        if publish_pending {
            match authentication_info::publish(&registry, &files.authentication_info()).await {
                Ok(()) => publish_pending = false,
                Err(e) => tracing::warn!(
                    error = %e,
                    "publishing the changed client CA in {}/{} failed",
                    authentication_info::NAMESPACE,
                    authentication_info::NAME
                ),
            }
        }
    }
}
