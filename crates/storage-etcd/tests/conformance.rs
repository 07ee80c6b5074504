//! The storage conformance suite on a real etcd: a fresh etcd process per case, once
//! with keys used as given and once under a storage prefix.

use std::sync::Arc;

use ferrokube_storage::conformance::TestStore;
use ferrokube_storage_etcd::testing::EtcdProcess;
use ferrokube_storage_etcd::{EtcdOptions, EtcdStorage};

async fn store_with(options: EtcdOptions) -> TestStore {
    let etcd = EtcdProcess::start().await.unwrap_or_else(|e| panic!("{e}"));
    let storage = EtcdStorage::connect(&etcd.endpoints(), options)
        .await
        .expect("connect to the test etcd");
    TestStore {
        storage: Arc::new(storage),
        guard: Box::new(etcd),
    }
}

async fn new_store() -> TestStore {
    store_with(EtcdOptions::default()).await
}

ferrokube_storage::storage_conformance_tests!(new_store);

/// The same contract with every key stored under upstream's default `--etcd-prefix`.
mod prefixed {
    use super::*;

    async fn new_store() -> TestStore {
        store_with(EtcdOptions {
            prefix: "/registry".into(),
            ..EtcdOptions::default()
        })
        .await
    }

    ferrokube_storage::storage_conformance_tests!(new_store);
}
