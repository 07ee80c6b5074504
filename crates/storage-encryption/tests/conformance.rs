//! The storage conformance suite through the decorator, with every key of the suite
//! under `/registry/secrets/` and secrets encrypted: the decorator keeps the whole
//! contract (preconditions, pagination, watch replay...) while values are ciphertext
//! in the store. A second run covers keys no rule touches.

use std::sync::Arc;

use async_trait::async_trait;
use base64::Engine as _;
use bytes::Bytes;
use ferrokube_storage::conformance::TestStore;
use ferrokube_storage::{
    Backend, Deleted, KeyValue, ListOptions, ListResult, Preconditions, Result, Revision, Storage,
    StorageStats, UpdateFn, WatchEvent, WatchStream,
};
use ferrokube_storage_encryption::{EncryptedStorage, Encryption, EncryptionConfiguration};
use ferrokube_storage_sqlite::{SqliteOptions, SqliteStorage};
use futures::StreamExt;

/// Puts every key of the suite under `root`, and takes it off again on the way out.
struct Rooted {
    inner: Arc<dyn Storage>,
    root: &'static str,
}

impl Rooted {
    fn full(&self, key: &str) -> String {
        format!("{}{key}", self.root)
    }

    fn strip(root: &str, mut kv: KeyValue) -> KeyValue {
        if let Some(short) = kv.key.strip_prefix(root) {
            kv.key = short.to_string();
        }
        kv
    }

    fn short(&self, kv: KeyValue) -> KeyValue {
        Rooted::strip(self.root, kv)
    }
}

#[async_trait]
impl Storage for Rooted {
    async fn create(&self, key: &str, value: Bytes) -> Result<Revision> {
        self.inner.create(&self.full(key), value).await
    }

    async fn get(&self, key: &str, revision: Option<Revision>) -> Result<KeyValue> {
        Ok(self.short(self.inner.get(&self.full(key), revision).await?))
    }

    async fn list(&self, prefix: &str, options: &ListOptions) -> Result<ListResult> {
        let mut listed = self.inner.list(&self.full(prefix), options).await?;
        listed.items = listed.items.into_iter().map(|kv| self.short(kv)).collect();
        Ok(listed)
    }

    async fn guaranteed_update(
        &self,
        key: &str,
        preconditions: &Preconditions,
        update: &mut UpdateFn<'_>,
    ) -> Result<KeyValue> {
        let root = self.root;
        let mut shortened = |current: Option<&KeyValue>| {
            update(current.cloned().map(|kv| Rooted::strip(root, kv)).as_ref())
        };
        let kv = self
            .inner
            .guaranteed_update(&self.full(key), preconditions, &mut shortened)
            .await?;
        Ok(self.short(kv))
    }

    async fn compare_and_swap(
        &self,
        key: &str,
        expected_revision: Revision,
        value: Bytes,
    ) -> Result<KeyValue> {
        let kv = self
            .inner
            .compare_and_swap(&self.full(key), expected_revision, value)
            .await?;
        Ok(self.short(kv))
    }

    async fn delete(&self, key: &str, preconditions: &Preconditions) -> Result<Deleted> {
        let mut deleted = self.inner.delete(&self.full(key), preconditions).await?;
        deleted.previous = self.short(deleted.previous);
        Ok(deleted)
    }

    async fn watch(&self, prefix: &str, from_revision: Revision) -> Result<WatchStream> {
        let root = self.root;
        let events = self.inner.watch(&self.full(prefix), from_revision).await?;
        Ok(events
            .map(move |item| {
                item.map(|event| match event {
                    WatchEvent::Added(kv) => WatchEvent::Added(Rooted::strip(root, kv)),
                    WatchEvent::Modified { current, previous } => WatchEvent::Modified {
                        current: Rooted::strip(root, current),
                        previous: Rooted::strip(root, previous),
                    },
                    WatchEvent::Deleted { previous, revision } => WatchEvent::Deleted {
                        previous: Rooted::strip(root, previous),
                        revision,
                    },
                    WatchEvent::Progress(r) => WatchEvent::Progress(r),
                })
            })
            .boxed())
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.inner.compact(revision).await
    }

    async fn current_revision(&self) -> Result<Revision> {
        self.inner.current_revision().await
    }

    fn watch_sees_every_revision(&self) -> bool {
        self.inner.watch_sees_every_revision()
    }

    async fn stats(&self) -> Result<StorageStats> {
        self.inner.stats().await
    }

    fn backend(&self) -> Backend {
        self.inner.backend()
    }
}

fn encryption() -> Encryption {
    let secret = base64::engine::general_purpose::STANDARD.encode([7u8; 32]);
    let text = format!(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - aesgcm: {{keys: [{{name: key1, secret: \"{secret}\"}}]}}\n"
    );
    let config = EncryptionConfiguration::parse(text.as_bytes()).expect("decodes");
    Encryption::new(&config).expect("valid")
}

async fn store_under(root: &'static str) -> TestStore {
    let dir = tempfile::tempdir().expect("temp dir");
    let sqlite = SqliteStorage::open(&dir.path().join("store.db"), SqliteOptions::default())
        .expect("open store");
    let encrypted = EncryptedStorage::new(Arc::new(sqlite), encryption(), "");
    TestStore {
        storage: Arc::new(Rooted {
            inner: Arc::new(encrypted),
            root,
        }),
        guard: Box::new(dir),
    }
}

mod encrypted {
    async fn new_store() -> ferrokube_storage::conformance::TestStore {
        super::store_under("/registry/secrets").await
    }

    ferrokube_storage::storage_conformance_tests!(new_store);

    /// The values really are ciphertext underneath.
    #[tokio::test]
    async fn values_are_encrypted_in_the_store() {
        let dir = tempfile::tempdir().expect("temp dir");
        let sqlite = std::sync::Arc::new(
            ferrokube_storage_sqlite::SqliteStorage::open(
                &dir.path().join("store.db"),
                Default::default(),
            )
            .expect("open"),
        );
        let s = ferrokube_storage_encryption::EncryptedStorage::new(
            sqlite.clone(),
            super::encryption(),
            "",
        );
        use ferrokube_storage::Storage as _;
        s.create("/registry/secrets/r/a", bytes::Bytes::from_static(b"one"))
            .await
            .expect("create");
        let raw = sqlite
            .get("/registry/secrets/r/a", None)
            .await
            .expect("raw");
        assert!(raw.value.starts_with(b"k8s:enc:aesgcm:v1:key1:"));
    }
}

mod unconfigured {
    async fn new_store() -> ferrokube_storage::conformance::TestStore {
        super::store_under("/registry/configmaps").await
    }

    ferrokube_storage::storage_conformance_tests!(new_store);
}
