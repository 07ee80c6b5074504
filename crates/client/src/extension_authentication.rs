//! The apiserver's `kube-system/extension-apiserver-authentication` ConfigMap: the CA
//! it accepts client certificates of (`client-ca-file`) and its front proxy's settings
//! (`requestheader-*`). A component whose flags leave a CA out reads it there, as
//! upstream's `DelegatingAuthenticationOptions` do unless `--authentication-skip-lookup`:
//! kubeadm starts kube-scheduler with no CA flag at all, and metrics-server never has
//! any, yet both must know the cluster's client certificates and the aggregator.
//!
//! As upstream: the client CA is read once at start (upstream copies it to a file it
//! never rewrites); the request-header part is followed as the ConfigMap changes
//! (upstream's dynamic request-header controller), so a rotated front-proxy CA is taken
//! without a restart. CA files the flags name are read again as they change too
//! (upstream's dynamic CA file content; here every [`FILE_CHECK_INTERVAL`]). A ConfigMap that does not exist leaves the missing CAs unset
//! (with a warning); a lookup that fails (forbidden, unreachable, malformed) stops the
//! start unless the component tolerates it (kube-scheduler does by default,
//! kube-controller-manager and metrics-server do not; `--authentication-tolerate-lookup-failure`
//! overrides).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ferrokube_pki::reload::FollowedFiles;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::runtime::{WatchStreamExt as _, watcher};
use parking_lot::Mutex;

use crate::delegated::{
    CaBundles, ClientCertificates, DelegatedAuthOptions, LiveClientCertificates,
    RequestHeaderConfig,
};

pub const NAMESPACE: &str = "kube-system";
pub const NAME: &str = "extension-apiserver-authentication";
/// The Role upstream's bootstrap policy gives readers of the ConfigMap.
const READER_ROLE: &str = "extension-apiserver-authentication-reader";

/// What a component does when the lookup fails, unless the flag says otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LookupFailure {
    /// Warn and go on without the missing CAs (requests may be anonymous).
    Tolerate,
    /// Refuse to start.
    Fatal,
}

/// The bundles the ConfigMap's data names (lists are JSON arrays of strings, as the
/// apiserver writes them; an empty value is an empty list). A CA key that is absent
/// or blank is not published.
pub fn published(data: &BTreeMap<String, String>) -> Result<CaBundles, String> {
    let list = |key: &str| -> Result<Vec<String>, String> {
        match data.get(key).map(String::as_str) {
            None | Some("") => Ok(Vec::new()),
            Some(v) => serde_json::from_str(v).map_err(|e| format!("{key}: {e}")),
        }
    };
    let ca = |key: &str| data.get(key).filter(|pem| !pem.trim().is_empty()).cloned();
    let request_header = match ca("requestheader-client-ca-file") {
        Some(pem) => Some((
            pem,
            RequestHeaderConfig {
                username_headers: list("requestheader-username-headers")?,
                uid_headers: list("requestheader-uid-headers")?,
                group_headers: list("requestheader-group-headers")?,
                extra_header_prefixes: list("requestheader-extra-headers-prefix")?,
                allowed_names: list("requestheader-allowed-names")?,
            },
        )),
        None => None,
    };
    Ok(CaBundles {
        client_ca: ca("client-ca-file"),
        request_header,
    })
}

/// Why a lookup failed.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    #[error("reading configmap/{NAME} in {NAMESPACE}: {0}")]
    Api(#[from] kube::Error),
    #[error("configmap/{NAME} in {NAMESPACE}: {0}")]
    Malformed(String),
}

/// The bundles the cluster publishes; a ConfigMap that does not exist publishes none.
pub async fn lookup(client: &kube::Client) -> Result<CaBundles, LookupError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    match api.get_opt(NAME).await {
        Ok(Some(cm)) => published(&cm.data.unwrap_or_default()).map_err(LookupError::Malformed),
        Ok(None) => Ok(CaBundles::default()),
        Err(e) => {
            if matches!(&e, kube::Error::Api(s) if s.code == 403) {
                tracing::warn!(
                    "unable to get configmap/{NAME} in {NAMESPACE}. Usually fixed by 'kubectl create rolebinding -n {NAMESPACE} ROLE_NAME --role={READER_ROLE} --serviceaccount=YOUR_NS:YOUR_SA'"
                );
            }
            Err(LookupError::Api(e))
        }
    }
}

/// The client certificates of an endpoint: the flags' CA files, and for each one they
/// leave out what the cluster publishes (through `client`, the
/// `--authentication-kubeconfig` one), unless `--authentication-skip-lookup`. When the
/// request-header part came from the cluster, it is followed until the process ends.
pub async fn client_certificates(
    opts: &DelegatedAuthOptions,
    client: Option<&kube::Client>,
    failure: LookupFailure,
) -> Result<LiveClientCertificates, crate::Error> {
    let mut bundles = CaBundles::from_flag_files(opts)?;
    let missing_client_ca = bundles.client_ca.is_none();
    let missing_request_header = bundles.request_header.is_none();
    let mut follow = None;
    if !opts.skip_lookup && (missing_client_ca || missing_request_header) {
        match client {
            None => warn_unprovided(
                missing_client_ca,
                missing_request_header,
                "No authentication-kubeconfig provided in order to lookup",
            ),
            Some(client) => match lookup(client).await {
                Ok(found) => {
                    if missing_client_ca {
                        bundles.client_ca = found.client_ca;
                    }
                    if missing_request_header {
                        bundles.request_header = found.request_header;
                        follow = Some(client.clone());
                    }
                    warn_unprovided(
                        bundles.client_ca.is_none(),
                        bundles.request_header.is_none(),
                        "Cluster doesn't provide",
                    );
                }
                Err(e) => {
                    let tolerate = opts
                        .tolerate_lookup_failure
                        .unwrap_or(failure == LookupFailure::Tolerate);
                    if !tolerate {
                        return Err(crate::Error::Config(format!(
                            "unable to load configmap based client CA or request-header configuration: {e}"
                        )));
                    }
                    tracing::warn!(error = %e, "error looking up in-cluster authentication configuration");
                    tracing::warn!(
                        "continuing without authentication configuration. This may treat all requests as anonymous."
                    );
                    tracing::warn!(
                        "to require authentication configuration lookup to succeed, set --authentication-tolerate-lookup-failure=false"
                    );
                }
            },
        }
    }
    let live = LiveClientCertificates::new(
        ClientCertificates::from_bundles(&bundles).map_err(crate::Error::Config)?,
    );
    let followed = Followed {
        bundles: Arc::new(Mutex::new(bundles.clone())),
        live: live.clone(),
    };
    if let Some(client) = follow {
        tokio::spawn(follow_request_header(client, followed.clone()));
    }
    if opts.client_ca_file.is_some() || opts.request_header.client_ca_file.is_some() {
        tokio::spawn(follow_files(opts.clone(), followed, bundles));
    }
    Ok(live)
}

/// How often the CA files the flags name are read again. Upstream watches them (and
/// reads them again every minute); a poll this short takes a replaced bundle about as
/// soon, for two small reads.
pub const FILE_CHECK_INTERVAL: Duration = ferrokube_pki::reload::CHECK_INTERVAL;

/// The bundles behind an endpoint's [`LiveClientCertificates`], changed part by part
/// by the followers of the ConfigMap and of the files.
#[derive(Clone)]
struct Followed {
    bundles: Arc<Mutex<CaBundles>>,
    live: LiveClientCertificates,
}

impl Followed {
    /// Applies `change`: the endpoint takes the result when it loads, else keeps what it
    /// has. Answers whether the bundles in use changed.
    fn apply(&self, change: impl FnOnce(&mut CaBundles)) -> Result<bool, String> {
        let mut bundles = self.bundles.lock();
        let mut next = bundles.clone();
        change(&mut next);
        if next == *bundles {
            return Ok(false);
        }
        self.live.replace(ClientCertificates::from_bundles(&next)?);
        *bundles = next;
        Ok(true)
    }

    /// [`Followed::apply`], logged as a change of `what`.
    fn update(&self, what: &str, change: impl FnOnce(&mut CaBundles)) {
        match self.apply(change) {
            Ok(true) => {
                tracing::info!("{what} changed; client certificates are checked against it now")
            }
            Ok(false) => {}
            Err(e) => {
                tracing::error!(
                    error = e,
                    "{what} changed but does not load; keeping the last one"
                )
            }
        }
    }
}

/// Reads the flags' CA files every [`FILE_CHECK_INTERVAL`] (upstream's dynamic CA file
/// content). `bundles` are what was installed at start.
async fn follow_files(opts: DelegatedAuthOptions, followed: Followed, bundles: CaBundles) {
    let follow = |flag: &'static str, path: &Option<std::path::PathBuf>, pem: Option<String>| {
        Some(FollowedFiles::new(
            flag,
            [(flag, path.clone()?, pem.unwrap_or_default())],
        ))
    };
    let mut client_ca = follow("--client-ca-file", &opts.client_ca_file, bundles.client_ca);
    let mut request_header = follow(
        "--requestheader-client-ca-file",
        &opts.request_header.client_ca_file,
        bundles.request_header.map(|(pem, _)| pem),
    );
    loop {
        tokio::time::sleep(FILE_CHECK_INTERVAL).await;
        if let Some(file) = &mut client_ca {
            file.check(|pem| followed.apply(|b| b.client_ca = Some(pem[0].to_string())));
        }
        if let Some(file) = &mut request_header {
            file.check(|pem| {
                followed.apply(|b| {
                    if let Some((ca, _)) = &mut b.request_header {
                        *ca = pem[0].to_string();
                    }
                })
            });
        }
    }
}

fn warn_unprovided(client_ca: bool, request_header: bool, why: &str) {
    if client_ca {
        tracing::warn!(
            "{why} client-ca-file in configmap/{NAME} in {NAMESPACE}, so client certificate authentication won't work."
        );
    }
    if request_header {
        tracing::warn!(
            "{why} requestheader-client-ca-file in configmap/{NAME} in {NAMESPACE}, so request-header client certificate authentication won't work."
        );
    }
}

/// Takes each new request-header part of the ConfigMap. A value that does not parse is
/// logged and the last good one kept; so is a deleted ConfigMap (the apiserver writes it
/// again).
async fn follow_request_header(client: kube::Client, followed: Followed) {
    let api: Api<ConfigMap> = Api::namespaced(client, NAMESPACE);
    let config = watcher::Config::default().fields(&format!("metadata.name={NAME}"));
    let mut changes = watcher(api, config)
        .default_backoff()
        .applied_objects()
        .boxed();
    while let Some(change) = changes.next().await {
        let cm = match change {
            Ok(cm) => cm,
            Err(e) => {
                tracing::debug!(error = %e, "watching configmap/{NAME}");
                continue;
            }
        };
        match published(&cm.data.unwrap_or_default()) {
            Ok(found) => followed.update(
                &format!("the request-header configuration in configmap/{NAME}"),
                |b| b.request_header = found.request_header,
            ),
            Err(e) => tracing::error!(
                error = e,
                "configmap/{NAME} in {NAMESPACE}: keeping the last request-header configuration"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configmap_names_the_bundles_and_the_header_settings() {
        let data = BTreeMap::from([
            ("client-ca-file".to_string(), "CLIENT".to_string()),
            ("requestheader-client-ca-file".into(), "RH".into()),
            (
                "requestheader-username-headers".into(),
                r#"["X-Remote-User"]"#.into(),
            ),
            (
                "requestheader-group-headers".into(),
                r#"["X-Remote-Group"]"#.into(),
            ),
            (
                "requestheader-extra-headers-prefix".into(),
                r#"["X-Remote-Extra-"]"#.into(),
            ),
            (
                "requestheader-allowed-names".into(),
                r#"["front-proxy-client"]"#.into(),
            ),
            ("requestheader-uid-headers".into(), "[]".into()),
        ]);
        let found = published(&data).unwrap();
        let (ca, rh) = found.request_header.clone().unwrap();
        assert_eq!(ca, "RH");
        assert_eq!(rh.username_headers, ["X-Remote-User"]);
        assert_eq!(rh.group_headers, ["X-Remote-Group"]);
        assert_eq!(rh.extra_header_prefixes, ["X-Remote-Extra-"]);
        assert_eq!(rh.allowed_names, ["front-proxy-client"]);
        assert!(rh.uid_headers.is_empty());
        assert_eq!(found.client_ca.as_deref(), Some("CLIENT"));

        assert_eq!(published(&BTreeMap::new()).unwrap(), CaBundles::default());
        // A blank CA is not published; its lists are then not read.
        let blank = BTreeMap::from([
            ("client-ca-file".to_string(), " \n".to_string()),
            ("requestheader-client-ca-file".into(), "".into()),
            ("requestheader-allowed-names".into(), "not json".into()),
        ]);
        assert_eq!(published(&blank).unwrap(), CaBundles::default());
        // A malformed list of a published CA is an error naming the key, as upstream's
        // deserializeStrings.
        let bad = BTreeMap::from([
            ("requestheader-client-ca-file".to_string(), "RH".to_string()),
            (
                "requestheader-allowed-names".into(),
                "front-proxy-client".into(),
            ),
        ]);
        let err = published(&bad).unwrap_err();
        assert!(err.starts_with("requestheader-allowed-names: "), "{err}");
    }
}
