//! An in-process apiserver (the production Options -> Config -> Server path, as
//! `cmd/kube-apiserver` wires it) over SQLite wrapped by [`EncryptedStorage`], for the
//! end-to-end tests of encryption at rest. The raw store underneath stays reachable so
//! that tests can read what was stored.
//!
//! The server is built here rather than with `ferrokube-testing`'s `TestApiServer`,
//! which opens its own store and has no place to put a decorator in between.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::path::Path;
use std::sync::Arc;

use ferrokube_apiserver::{Options, Server};
use ferrokube_storage::Storage;
use ferrokube_storage_encryption::{
    EncryptedStorage, Encryption, EncryptionInUse, EncryptionMetrics, KmsTimings,
};
use ferrokube_storage_sqlite::{SqliteOptions, SqliteStorage};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::ObjectMeta;

pub const PASSWORD: &str = "correct-horse-battery-staple";

pub struct Running {
    pub server: Server,
    pub client: kube::Client,
    pub raw: Arc<SqliteStorage>,
}

/// Encryption's `kms-providers` check, as the binary adds it.
#[derive(Debug)]
struct KmsCheck(EncryptionInUse);

#[async_trait::async_trait]
impl ferrokube_apiserver::HealthCheck for KmsCheck {
    fn name(&self) -> &str {
        ferrokube_storage_encryption::KMS_HEALTH_CHECK
    }

    async fn check(&self) -> Result<(), String> {
        self.0.check_kms().await
    }
}

/// `--encryption-provider-config-automatic-reload`, as the binary wires it.
struct Reload(EncryptionInUse, KmsTimings);

#[async_trait::async_trait]
impl ferrokube_apiserver::ApplyConfig for Reload {
    async fn apply(&self, text: String) -> Result<(), String> {
        self.0.replace(&text, self.1).await
    }
}

/// Whether the server follows the encryption configuration file.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Follow {
    No,
    AutomaticReload,
}

/// Starts a server with the encryption configuration `config`, its store under `dir`
/// (a second start on the same `dir` finds the first one's data).
pub async fn start(dir: &Path, config: &str, kms: KmsTimings, follow: Follow) -> Running {
    // A concurrent test can take the port between our probe and the bind: retry.
    let mut last = String::new();
    for _ in 0..5 {
        match try_start(dir, config, kms, follow).await {
            Ok(running) => return running,
            Err(e) => last = e,
        }
    }
    panic!("apiserver did not start: {last}");
}

async fn try_start(
    dir: &Path,
    config: &str,
    kms: KmsTimings,
    follow: Follow,
) -> Result<Running, String> {
    let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    let url = format!("https://127.0.0.1:{port}");
    let mut pki_opts = ferrokube_pki::ClusterPkiOptions::new(url);
    pki_opts.advertise_address = Some(IpAddr::V4(Ipv4Addr::LOCALHOST));
    pki_opts.node_name = "test-node".into();
    let pki_dir = dir.join(format!("pki-{port}"));
    let pki = ferrokube_pki::write_cluster_pki(&pki_dir, &pki_opts).map_err(|e| e.to_string())?;

    let config_file = dir.join("encryption.yaml");
    std::fs::write(&config_file, config).map_err(|e| e.to_string())?;
    let apiserver_id = ferrokube_apiserver::new_apiserver_id();
    let metrics = Arc::new(EncryptionMetrics::new(&apiserver_id));
    let encryption = Encryption::load(&config_file, metrics.clone()).map_err(|e| e.to_string())?;
    encryption.start_kms(kms).await;
    let has_kms = encryption.kms_health().is_some();
    let raw = Arc::new(
        SqliteStorage::open(&dir.join("data/state.db"), SqliteOptions::default())
            .map_err(|e| e.to_string())?,
    );
    let encrypted = EncryptedStorage::new(raw.clone(), encryption, "");
    let in_use = encrypted.in_use();
    let storage: Arc<dyn Storage> = Arc::new(encrypted);

    let mut opts = Options::new(pki.apiserver_cert.clone(), pki.apiserver_key.clone());
    opts.apiserver_id = apiserver_id;
    opts.metrics_collectors.push(metrics);
    opts.bind_address = IpAddr::V4(Ipv4Addr::LOCALHOST);
    opts.secure_port = port;
    opts.client_ca_file = Some(pki.ca_cert.clone());
    opts.service_account_issuers = vec!["https://kubernetes.default.svc.cluster.local".into()];
    opts.service_account_key_files = vec![pki_dir.join("sa.pub")];
    opts.service_account_signing_key_file = Some(pki_dir.join("sa.key"));
    opts.admission_plugins.set("ServiceAccount", false)?;
    if follow == Follow::AutomaticReload || has_kms {
        opts.health_checks.push(Arc::new(KmsCheck(in_use.clone())));
    }
    if follow == Follow::AutomaticReload {
        opts.encryption_config_reload = Some(ferrokube_apiserver::FollowedConfig {
            path: config_file.clone(),
            text: config.to_string(),
            apply: Arc::new(Reload(in_use, kms)),
        });
    }
    let config = opts.into_config(storage).await.map_err(|e| e.to_string())?;
    let server = Server::start(config).await.map_err(|e| e.to_string())?;

    let kubeconfig =
        kube::config::Kubeconfig::read_from(&pki.admin_kubeconfig).map_err(|e| e.to_string())?;
    let client_config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .map_err(|e| e.to_string())?;
    let client = kube::Client::try_from(client_config).map_err(|e| e.to_string())?;
    Ok(Running {
        server,
        client,
        raw,
    })
}

pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

pub fn secret(name: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            "password".to_string(),
            ByteString(PASSWORD.as_bytes().to_vec()),
        )])),
        ..Default::default()
    }
}

pub fn password(s: &Secret) -> Option<&[u8]> {
    s.data.as_ref()?.get("password").map(|b| b.0.as_slice())
}
