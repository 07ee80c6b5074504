//! Encryption at rest end to end (see `common`), with secrets configured for aescbc.
//! The test reads the raw store underneath: secrets are ciphertext there, while GET,
//! LIST and WATCH through the API return them plain; ConfigMaps, not configured, are
//! stored plain.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine as _;
use common::{Follow, PASSWORD, contains, password, secret, start};
use ferrokube_storage::Storage as _;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ListParams, ObjectMeta, PostParams, WatchEvent, WatchParams};

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
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start(dir.path(), &config, Default::default(), Follow::No).await;
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
