//! Read-your-writes through the watch cache: after a write through a store,
//! `ResourceCache::sync_own_writes` makes the cache show it (what admission relies on
//! when it reads webhook configurations, policies, quotas and namespaces from the
//! cache), on both backends.

use std::sync::Arc;

use ferrokube_registry::{
    DeleteOptions, Part, PatchType, Registry, RegistryConfig, UpdateInput, WriteOptions,
};
use ferrokube_storage::Storage;
use ferrokube_storage_etcd::testing::EtcdProcess;
use ferrokube_storage_etcd::{EtcdOptions, EtcdStorage};
use ferrokube_storage_sqlite::{SqliteOptions, SqliteStorage};
use serde_json::json;

/// Rounds of create, update and delete, each checked in the cache at once.
const ROUNDS: usize = 100;

async fn each_write_is_visible_in_the_cache_at_once(storage: Arc<dyn Storage>) {
    let reg = Registry::new(storage, RegistryConfig::default())
        .await
        .unwrap();
    let store = reg
        .store(
            "admissionregistration.k8s.io",
            "v1",
            "validatingadmissionpolicies",
        )
        .unwrap();
    let cache = store.cache();
    for i in 0..ROUNDS {
        let name = format!("p{i}");
        let key = store.key(None, &name);
        let policy = json!({
            "metadata": {"name": name},
            "spec": {
                "matchConstraints": {"resourceRules": [{
                    "apiGroups": [""], "apiVersions": ["v1"],
                    "operations": ["CREATE"], "resources": ["configmaps"]}]},
                "validations": [{"expression": "true"}]
            }
        });
        store
            .create(None, policy, &WriteOptions::default())
            .await
            .unwrap();
        cache.sync_own_writes().await;
        assert!(
            cache.get(&key).is_some(),
            "round {i}: created policy not in the cache"
        );

        let patch = json!({"metadata": {"labels": {"round": i.to_string()}}});
        store
            .update(
                None,
                &name,
                UpdateInput::Patch(PatchType::Merge, patch),
                Part::Main,
                &WriteOptions::default(),
            )
            .await
            .unwrap();
        cache.sync_own_writes().await;
        let cached = cache.get(&key).expect("updated policy in the cache");
        assert_eq!(
            cached["metadata"]["labels"]["round"],
            i.to_string(),
            "round {i}"
        );

        store
            .delete(None, &name, &DeleteOptions::default())
            .await
            .unwrap();
        cache.sync_own_writes().await;
        assert!(
            cache.get(&key).is_none(),
            "round {i}: deleted policy still in the cache"
        );
    }
}

#[tokio::test]
async fn sqlite_reads_its_own_writes_from_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let storage =
        SqliteStorage::open(&dir.path().join("db.sqlite"), SqliteOptions::default()).unwrap();
    each_write_is_visible_in_the_cache_at_once(Arc::new(storage)).await;
}

#[tokio::test]
async fn etcd_reads_its_own_writes_from_the_cache() {
    let etcd = EtcdProcess::start().await.unwrap();
    let storage = EtcdStorage::connect(&etcd.endpoints(), EtcdOptions::default())
        .await
        .unwrap();
    each_write_is_visible_in_the_cache_at_once(Arc::new(storage)).await;
}
