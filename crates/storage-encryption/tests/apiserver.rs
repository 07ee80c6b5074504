//! Encryption at rest end to end: an in-process apiserver (the production Options ->
//! Config -> Server path, as `cmd/kube-apiserver` wires it) over SQLite wrapped by
//! [`EncryptedStorage`], with secrets configured for aescbc. The test reads the raw
//! store underneath: secrets are ciphertext there, while GET, LIST and WATCH through
//! the API return them plain; ConfigMaps, not configured, are stored plain.
//!
//! The server is built here rather than with `ferrokube-testing`'s `TestApiServer`,
//! which opens its own store and has no place to put a decorator in between.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use ferrokube_apiserver::{Options, Server};
use ferrokube_storage::Storage;
use ferrokube_storage_encryption::{EncryptedStorage, Encryption};
use ferrokube_storage_sqlite::{SqliteOptions, SqliteStorage};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ListParams, ObjectMeta, PostParams, WatchEvent, WatchParams};

const PASSWORD: &str = "correct-horse-battery-staple";

struct Running {
    server: Server,
    client: kube::Client,
    raw: Arc<SqliteStorage>,
    _dir: tempfile::TempDir,
}

async fn start(config: &str) -> Running {
    // A concurrent test can take the port between our probe and the bind: retry.
    let mut last = String::new();
    for _ in 0..5 {
        match try_start(config).await {
            Ok(running) => return running,
            Err(e) => last = e,
        }
    }
    panic!("apiserver did not start: {last}");
}

async fn try_start(config: &str) -> Result<Running, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    let url = format!("https://127.0.0.1:{port}");
    let mut pki_opts = ferrokube_pki::ClusterPkiOptions::new(url);
    pki_opts.advertise_address = Some(IpAddr::V4(Ipv4Addr::LOCALHOST));
    pki_opts.node_name = "test-node".into();
    let pki_dir = dir.path().join("pki");
    let pki = ferrokube_pki::write_cluster_pki(&pki_dir, &pki_opts).map_err(|e| e.to_string())?;

    let config_file = dir.path().join("encryption.yaml");
    std::fs::write(&config_file, config).map_err(|e| e.to_string())?;
    let encryption = Encryption::load(&config_file).map_err(|e| e.to_string())?;
    let raw = Arc::new(
        SqliteStorage::open(&dir.path().join("data/state.db"), SqliteOptions::default())
            .map_err(|e| e.to_string())?,
    );
    let storage: Arc<dyn Storage> = Arc::new(EncryptedStorage::new(raw.clone(), encryption, ""));

    let mut opts = Options::new(pki.apiserver_cert.clone(), pki.apiserver_key.clone());
    opts.bind_address = IpAddr::V4(Ipv4Addr::LOCALHOST);
    opts.secure_port = port;
    opts.client_ca_file = Some(pki.ca_cert.clone());
    opts.service_account_issuers = vec!["https://kubernetes.default.svc.cluster.local".into()];
    opts.service_account_key_files = vec![pki_dir.join("sa.pub")];
    opts.service_account_signing_key_file = Some(pki_dir.join("sa.key"));
    opts.admission_plugins.set("ServiceAccount", false)?;
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
        _dir: dir,
    })
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn secret(name: &str) -> Secret {
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

fn password(s: &Secret) -> Option<&[u8]> {
    s.data.as_ref()?.get("password").map(|b| b.0.as_slice())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn secrets_are_encrypted_in_storage_and_plain_through_the_api() {
    let key = base64::engine::general_purpose::STANDARD.encode([42u8; 32]);
    let config = format!(
        "apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources: [secrets]
    providers:
      - aescbc:
          keys:
            - name: key1
              secret: {key}
      - identity: {{}}
"
    );
    let running = start(&config).await;
    let secrets: Api<Secret> = Api::namespaced(running.client.clone(), "default");

    secrets
        .create(&PostParams::default(), &secret("s1"))
        .await
        .expect("create secret");

    // Underneath: upstream's aescbc layout, and no trace of the value.
    let stored = running
        .raw
        .get("/registry/secrets/default/s1", None)
        .await
        .expect("raw read")
        .value;
    assert!(
        stored.starts_with(b"k8s:enc:aescbc:v1:key1:"),
        "stored as {:?}",
        String::from_utf8_lossy(&stored[..stored.len().min(40)])
    );
    let encoded = base64::engine::general_purpose::STANDARD.encode(PASSWORD);
    assert!(!contains(&stored, PASSWORD.as_bytes()));
    assert!(!contains(&stored, encoded.as_bytes()));
    assert!(
        !contains(&stored, b"\"s1\""),
        "not even the metadata is readable"
    );

    // Through the API: plain.
    let got = secrets.get("s1").await.expect("get");
    assert_eq!(password(&got), Some(PASSWORD.as_bytes()));
    let listed = secrets.list(&ListParams::default()).await.expect("list");
    let s1 = listed
        .items
        .iter()
        .find(|s| s.metadata.name.as_deref() == Some("s1"))
        .expect("s1 listed");
    assert_eq!(password(s1), Some(PASSWORD.as_bytes()));

    // A watch sees new secrets plain, too.
    let rv = listed.metadata.resource_version.clone().unwrap_or_default();
    let mut events = secrets
        .watch(&WatchParams::default().timeout(30), &rv)
        .await
        .expect("watch")
        .boxed();
    secrets
        .create(&PostParams::default(), &secret("s2"))
        .await
        .expect("create s2");
    let added = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(event) = events.try_next().await.expect("watch event") {
            if let WatchEvent::Added(s) = event
                && s.metadata.name.as_deref() == Some("s2")
            {
                return s;
            }
        }
        panic!("watch ended before s2");
    })
    .await
    .expect("s2 seen in time");
    assert_eq!(password(&added), Some(PASSWORD.as_bytes()));

    // An update (read, modify, compare-and-swap below) keeps the value encrypted.
    let mut changed = got.clone();
    changed
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("rotated".into(), "yes".into());
    secrets
        .replace("s1", &PostParams::default(), &changed)
        .await
        .expect("replace");
    let stored = running
        .raw
        .get("/registry/secrets/default/s1", None)
        .await
        .expect("raw read")
        .value;
    assert!(stored.starts_with(b"k8s:enc:aescbc:v1:key1:"));
    assert!(!contains(&stored, b"rotated"));

    // ConfigMaps are not configured: stored as they are.
    let configmaps: Api<ConfigMap> = Api::namespaced(running.client.clone(), "default");
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some("c1".into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            "greeting".to_string(),
            "hello-plain".to_string(),
        )])),
        ..Default::default()
    };
    configmaps
        .create(&PostParams::default(), &cm)
        .await
        .expect("create configmap");
    let stored = running
        .raw
        .get("/registry/configmaps/default/c1", None)
        .await
        .expect("raw read")
        .value;
    assert!(!stored.starts_with(b"k8s:enc:"));
    assert!(contains(&stored, b"hello-plain"));

    // Deleting an encrypted secret works and leaves nothing behind.
    secrets
        .delete("s2", &Default::default())
        .await
        .expect("delete");
    assert!(
        running
            .raw
            .get("/registry/secrets/default/s2", None)
            .await
            .expect_err("deleted")
            .is_not_found()
    );

    running.server.shutdown(Duration::from_secs(5)).await;
}
