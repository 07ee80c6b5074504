//! The backend-independent storage conformance suite, on a fresh database per case.

use std::sync::Arc;

use ferrokube_storage::conformance::TestStore;
use ferrokube_storage_sqlite::{SqliteOptions, SqliteStorage};

async fn new_store() -> TestStore {
    let dir = tempfile::tempdir().expect("temp dir");
    let storage = SqliteStorage::open(
        &dir.path().join("db/store.sqlite"),
        SqliteOptions::default(),
    )
    .expect("open store");
    TestStore {
        storage: Arc::new(storage),
        guard: Box::new(dir),
    }
}

ferrokube_storage::storage_conformance_tests!(new_store);
