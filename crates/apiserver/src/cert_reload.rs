//! The serving certificate and the client CA bundles followed while the apiserver
//! runs (upstream's `dynamiccertificates`: `DynamicServingCertificateController`,
//! `DynamicFileCAContent`), so rotating them needs no restart.
//!
//! Every [`CHECK_INTERVAL`] the files are read again ([`FollowedFiles`]). A changed
//! serving pair is installed only when both files load and the key is the
//! certificate's; a changed CA bundle only when it loads. Otherwise what is installed
//! stays and a warning names the file. New handshakes and new authentications use what
//! is installed; connections already made keep their certificate.
//!
//! A changed client or request-header CA is published again in
//! `kube-system/extension-apiserver-authentication`, as upstream's
//! ClusterAuthenticationTrust controller does, merged as at start (so the replaced CA
//! stays listed there, for other apiservers that may still use it, until it expires).

use std::path::PathBuf;
use std::sync::Arc;

use ferrokube_auth::{ClientCa, RequestHeaderConfig};
use ferrokube_pki::reload::{CHECK_INTERVAL, FollowedFiles, ServingFiles};
use ferrokube_registry::Registry;
use tokio::sync::watch;

use crate::authentication_info::{self, AuthenticationInfo};

/// The files behind the serving certificate and the client CAs, with what was
/// installed from them.
pub(crate) struct CertificateFiles {
    serving: ServingFiles,
    /// The `--tls-sni-cert-key` pairs.
    sni: Vec<ServingFiles>,
    client_ca: Option<CaFile>,
    request_header: Option<(CaFile, RequestHeaderConfig)>,
}

/// A CA bundle file (`--client-ca-file`, `--requestheader-client-ca-file`).
pub(crate) struct CaFile {
    file: FollowedFiles,
    ca: Arc<ClientCa>,
}

impl CaFile {
    /// The bundle `flag` names at `path`, as read at start (`pem`).
    pub(crate) fn new(
        flag: &'static str,
        path: PathBuf,
        pem: &str,
    ) -> Result<Self, ferrokube_auth::AuthError> {
        Ok(CaFile {
            file: FollowedFiles::new(flag, [(flag, path, pem.to_string())]),
            ca: ClientCa::new(pem)?,
        })
    }

    /// The bundle in use, for the verifiers built over it.
    pub(crate) fn ca(&self) -> &Arc<ClientCa> {
        &self.ca
    }

    /// Installs the file's content if it changed and loads: whether the bundle in
    /// use changed.
    fn check(&mut self) -> bool {
        let ca = &self.ca;
        self.file
            .check(|pem| ca.replace(pem[0]).map_err(|e| e.to_string()))
    }
}

impl CertificateFiles {
    pub(crate) fn new(
        serving: ServingFiles,
        sni: Vec<ServingFiles>,
        client_ca: Option<CaFile>,
        request_header: Option<(CaFile, RequestHeaderConfig)>,
    ) -> Self {
        CertificateFiles {
            serving,
            sni,
            client_ca,
            request_header,
        }
    }

    /// Installs what changed: whether a CA bundle in use changed.
    fn check(&mut self) -> bool {
        self.serving.check();
        for pair in &mut self.sni {
            pair.check();
        }
        let mut ca_changed = false;
        if let Some(ca) = &mut self.client_ca {
            ca_changed |= ca.check();
        }
        if let Some((ca, _)) = &mut self.request_header {
            ca_changed |= ca.check();
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
        publish_pending |= files.check();
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
