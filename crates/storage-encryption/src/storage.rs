//! [`EncryptedStorage`]: the decorator itself.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use ferrokube_storage::{
    AbortError, Backend, Deleted, KeyValue, ListOptions, ListResult, Preconditions, Result,
    Revision, Storage, StorageError, StorageStats, Update, UpdateFn, WatchEvent, WatchStream,
};
use futures::StreamExt;

use crate::config::Encryption;
use crate::kms::DekRequest;
use crate::providers::{Chain, Location, ReadError, TransformError, check_unencrypted};

/// How many times a read asks a KMS plugin for a seed before giving up: one fetch
/// is enough unless the cache lost the seed in between.
const DEK_FETCHES: usize = 3;

/// A [`Storage`] that encrypts the values of configured resources on every write and
/// decrypts them on every read, list and watch event; other keys pass as they are.
pub struct EncryptedStorage {
    inner: Arc<dyn Storage>,
    shared: Arc<Shared>,
}

/// What the decorator and its watch streams share.
struct Shared {
    encryption: Encryption,
    backend_prefix: String,
}

impl std::fmt::Debug for EncryptedStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EncryptedStorage")
            .field("backend_prefix", &self.shared.backend_prefix)
            .field("encryption", &self.shared.encryption)
            .finish_non_exhaustive()
    }
}

impl EncryptedStorage {
    /// Wraps `inner`. `backend_prefix` is what the backend puts before every key in
    /// its store (etcd's `--etcd-prefix`; empty for SQLite): AES-GCM authenticates the
    /// full etcd key, as upstream does, so values stay readable by either apiserver.
    pub fn new(inner: Arc<dyn Storage>, encryption: Encryption, backend_prefix: &str) -> Self {
        EncryptedStorage {
            inner,
            shared: Arc::new(Shared {
                encryption,
                backend_prefix: backend_prefix.to_string(),
            }),
        }
    }
}

fn transform_error(key: &str, err: TransformError) -> StorageError {
    StorageError::Internal(format!("unable to transform key {key:?}: {err}"))
}

impl Shared {
    fn location<'a>(&'a self, key: &'a str) -> Location<'a> {
        Location {
            backend_prefix: &self.backend_prefix,
            key,
        }
    }

    fn chain(&self, key: &str) -> Option<&Chain> {
        self.encryption.resolver.resolve(key).map(Arc::as_ref)
    }

    /// Whether stored values of `key` may be encrypted, so that the backend cannot
    /// look inside them (for the uid precondition).
    fn transforms(&self, key: &str) -> bool {
        self.chain(key).is_some_and(Chain::transforms)
    }

    fn encrypt(&self, key: &str, plain: Bytes) -> Result<Bytes> {
        match self.chain(key) {
            Some(chain) => chain
                .encrypt(&plain, self.location(key))
                .map_err(|e| transform_error(key, e)),
            None => Ok(plain),
        }
    }

    /// The plain value and whether it is stale (see [`Chain::decrypt`]), with what
    /// this server holds: a KMS seed it has not seen is a [`ReadError::MissingDek`].
    fn decrypt_held(
        &self,
        key: &str,
        stored: &Bytes,
    ) -> std::result::Result<(Bytes, bool), ReadError> {
        match self.chain(key) {
            Some(chain) => chain.decrypt(stored, self.location(key)),
            None => {
                check_unencrypted(stored)?;
                Ok((stored.clone(), false))
            }
        }
    }

    /// [`Self::decrypt_held`], asking KMS plugins for the seeds it lacks.
    async fn decrypt(&self, key: &str, stored: &Bytes) -> Result<(Bytes, bool)> {
        for _ in 0..DEK_FETCHES {
            match self.decrypt_held(key, stored) {
                Ok(plain) => return Ok(plain),
                Err(ReadError::Failed(e)) => return Err(transform_error(key, e)),
                Err(ReadError::MissingDek(request)) => {
                    request.fetch().await.map_err(|e| transform_error(key, e))?
                }
            }
        }
        Err(transform_error(
            key,
            TransformError::new("the KMS plugin's DEK was not kept"),
        ))
    }

    async fn read(&self, mut kv: KeyValue) -> Result<KeyValue> {
        kv.value = self.decrypt(&kv.key, &kv.value).await?.0;
        Ok(kv)
    }

    /// For lists and watches, which the registry's one watch cache makes of every
    /// resource at once: a value no provider can read is logged and handed on empty,
    /// which the cache (and any reader that decodes) skips as undecodable. Failing
    /// the whole list or watch instead would stop the cache of every resource, not
    /// only this object's (upstream fails only that resource's cacher); a get of the
    /// object itself still fails with the error.
    async fn read_or_skip(&self, mut kv: KeyValue) -> KeyValue {
        match self.decrypt(&kv.key, &kv.value).await {
            Ok((plain, _)) => kv.value = plain,
            Err(err) => {
                tracing::error!(error = %err, "stored value left out: it cannot be decrypted");
                kv.value = Bytes::new();
            }
        }
        kv
    }

    async fn read_event(&self, event: WatchEvent) -> WatchEvent {
        match event {
            WatchEvent::Added(kv) => WatchEvent::Added(self.read_or_skip(kv).await),
            WatchEvent::Modified { current, previous } => WatchEvent::Modified {
                current: self.read_or_skip(current).await,
                previous: self.read_or_skip(previous).await,
            },
            WatchEvent::Deleted { previous, revision } => WatchEvent::Deleted {
                previous: self.read_or_skip(previous).await,
                revision,
            },
            WatchEvent::Progress(revision) => WatchEvent::Progress(revision),
        }
    }
}

/// A storage error raised inside the update function, carried through the backend's
/// `Aborted` and handed back as itself.
#[derive(Debug)]
struct Passthrough(StorageError);

impl std::fmt::Display for Passthrough {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Passthrough {}

fn pass(err: StorageError) -> AbortError {
    Box::new(Passthrough(err))
}

/// A current value sealed with a KMS seed the update function could not wait for:
/// the update is run again once the plugin has decrypted it.
#[derive(Debug)]
struct NeedsDek(Box<DekRequest>);

impl std::fmt::Display for NeedsDek {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl std::error::Error for NeedsDek {}

impl EncryptedStorage {
    /// One backend update with the KMS seeds this server holds; a current value whose
    /// seed it lacks aborts with [`NeedsDek`] for the caller to fetch and retry.
    async fn update_with_held_deks(
        &self,
        key: &str,
        preconditions: &Preconditions,
        backend_preconditions: &Preconditions,
        own_uid: bool,
        update: &mut UpdateFn<'_>,
    ) -> Result<KeyValue> {
        let shared = self.shared.as_ref();
        // The stored and plain form of the last value handed to the backend.
        let mut written: Option<(Bytes, Bytes)> = None;
        let mut wrapped = |current: Option<&KeyValue>| -> std::result::Result<Update, AbortError> {
            let plain = match current {
                Some(kv) => {
                    let (value, stale) = match shared.decrypt_held(&kv.key, &kv.value) {
                        Ok(plain) => plain,
                        Err(ReadError::Failed(e)) => return Err(pass(transform_error(key, e))),
                        Err(ReadError::MissingDek(request)) => {
                            return Err(Box::new(NeedsDek(request)));
                        }
                    };
                    Some((
                        KeyValue {
                            value,
                            ..kv.clone()
                        },
                        stale,
                    ))
                }
                None => None,
            };
            if own_uid {
                match &plain {
                    Some((kv, _)) => preconditions.check(kv).map_err(pass)?,
                    None => {
                        return Err(pass(StorageError::NotFound {
                            key: key.to_string(),
                        }));
                    }
                }
            }
            let value = match update(plain.as_ref().map(|(kv, _)| kv))? {
                Update::Write(value) => value,
                // Upstream writes a stale value back even when the update changes
                // nothing: that is how rewriting objects moves them to the new key.
                Update::Keep => match plain {
                    Some((kv, true)) => kv.value,
                    _ => return Ok(Update::Keep),
                },
            };
            let stored = shared.encrypt(key, value.clone()).map_err(pass)?;
            written = Some((stored.clone(), value));
            Ok(Update::Write(stored))
        };
        let result = self
            .inner
            .guaranteed_update(key, backend_preconditions, &mut wrapped)
            .await;
        match result {
            Ok(mut kv) => match written {
                Some((stored, plain)) if stored == kv.value => {
                    kv.value = plain;
                    Ok(kv)
                }
                _ => shared.read(kv).await,
            },
            Err(StorageError::Aborted(err)) => Err(match err.downcast::<Passthrough>() {
                Ok(passed) => passed.0,
                Err(err) => StorageError::Aborted(err),
            }),
            Err(err) => Err(err),
        }
    }
}

#[async_trait]
impl Storage for EncryptedStorage {
    async fn create(&self, key: &str, value: Bytes) -> Result<Revision> {
        let stored = self.shared.encrypt(key, value)?;
        self.inner.create(key, stored).await
    }

    async fn get(&self, key: &str, revision: Option<Revision>) -> Result<KeyValue> {
        self.shared.read(self.inner.get(key, revision).await?).await
    }

    async fn list(&self, prefix: &str, options: &ListOptions) -> Result<ListResult> {
        let mut listed = self.inner.list(prefix, options).await?;
        let mut items = Vec::with_capacity(listed.items.len());
        for kv in listed.items {
            items.push(self.shared.read_or_skip(kv).await);
        }
        listed.items = items;
        Ok(listed)
    }

    async fn guaranteed_update(
        &self,
        key: &str,
        preconditions: &Preconditions,
        update: &mut UpdateFn<'_>,
    ) -> Result<KeyValue> {
        let shared = self.shared.as_ref();
        // The backend would compare the uid with the encrypted value: check it here,
        // on the plain one, and leave only the revision to the backend.
        let own_uid = preconditions.uid.is_some() && shared.transforms(key);
        let backend_preconditions = if own_uid {
            Preconditions {
                revision: preconditions.revision,
                uid: None,
            }
        } else {
            preconditions.clone()
        };
        for _ in 0..DEK_FETCHES {
            match self
                .update_with_held_deks(key, preconditions, &backend_preconditions, own_uid, update)
                .await
            {
                Err(StorageError::Aborted(err)) => match err.downcast::<NeedsDek>() {
                    Ok(needs) => needs.0.fetch().await.map_err(|e| transform_error(key, e))?,
                    Err(err) => return Err(StorageError::Aborted(err)),
                },
                other => return other,
            }
        }
        Err(transform_error(
            key,
            TransformError::new("the KMS plugin's DEK was not kept"),
        ))
    }

    async fn compare_and_swap(
        &self,
        key: &str,
        expected_revision: Revision,
        value: Bytes,
    ) -> Result<KeyValue> {
        let stored = self.shared.encrypt(key, value.clone())?;
        let mut kv = self
            .inner
            .compare_and_swap(key, expected_revision, stored)
            .await?;
        kv.value = value;
        Ok(kv)
    }

    async fn delete(&self, key: &str, preconditions: &Preconditions) -> Result<Deleted> {
        if preconditions.uid.is_none() || !self.shared.transforms(key) {
            // An undecryptable previous value is an error although the key is gone;
            // the registry reads (so decrypts) an object before it deletes it.
            let mut deleted = self.inner.delete(key, preconditions).await?;
            deleted.previous = self.shared.read(deleted.previous).await?;
            return Ok(deleted);
        }
        // The uid is inside the encrypted value: check it on the plain value, then
        // delete only if the key has not changed since.
        loop {
            let current = self.shared.read(self.inner.get(key, None).await?).await?;
            preconditions.check(&current)?;
            let exact = Preconditions::revision(current.mod_revision);
            match self.inner.delete(key, &exact).await {
                Ok(deleted) => {
                    return Ok(Deleted {
                        previous: current,
                        revision: deleted.revision,
                    });
                }
                Err(StorageError::Conflict { .. }) => continue,
                Err(err) => return Err(err),
            }
        }
    }

    async fn watch(&self, prefix: &str, from_revision: Revision) -> Result<WatchStream> {
        let events = self.inner.watch(prefix, from_revision).await?;
        let shared = self.shared.clone();
        Ok(events
            .then(move |item| {
                let shared = shared.clone();
                async move {
                    match item {
                        Ok(event) => Ok(shared.read_event(event).await),
                        Err(e) => Err(e),
                    }
                }
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
