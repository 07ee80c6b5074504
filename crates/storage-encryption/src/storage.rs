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
use crate::providers::{Chain, Location, TransformError, check_unencrypted};

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

    /// The plain value and whether it is stale (see [`Chain::decrypt`]).
    fn decrypt(&self, key: &str, stored: &Bytes) -> Result<(Bytes, bool)> {
        match self.chain(key) {
            Some(chain) => chain
                .decrypt(stored, self.location(key))
                .map_err(|e| transform_error(key, e)),
            None => {
                check_unencrypted(stored).map_err(|e| transform_error(key, e))?;
                Ok((stored.clone(), false))
            }
        }
    }

    fn read(&self, mut kv: KeyValue) -> Result<KeyValue> {
        kv.value = self.decrypt(&kv.key, &kv.value)?.0;
        Ok(kv)
    }

    /// For lists and watches, which the registry's one watch cache makes of every
    /// resource at once: a value no provider can read is logged and handed on empty,
    /// which the cache (and any reader that decodes) skips as undecodable. Failing
    /// the whole list or watch instead would stop the cache of every resource, not
    /// only this object's (upstream fails only that resource's cacher); a get of the
    /// object itself still fails with the error.
    fn read_or_skip(&self, mut kv: KeyValue) -> KeyValue {
        match self.decrypt(&kv.key, &kv.value) {
            Ok((plain, _)) => kv.value = plain,
            Err(err) => {
                tracing::error!(error = %err, "stored value left out: it cannot be decrypted");
                kv.value = Bytes::new();
            }
        }
        kv
    }

    fn read_event(&self, event: WatchEvent) -> WatchEvent {
        match event {
            WatchEvent::Added(kv) => WatchEvent::Added(self.read_or_skip(kv)),
            WatchEvent::Modified { current, previous } => WatchEvent::Modified {
                current: self.read_or_skip(current),
                previous: self.read_or_skip(previous),
            },
            WatchEvent::Deleted { previous, revision } => WatchEvent::Deleted {
                previous: self.read_or_skip(previous),
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

#[async_trait]
impl Storage for EncryptedStorage {
    async fn create(&self, key: &str, value: Bytes) -> Result<Revision> {
        let stored = self.shared.encrypt(key, value)?;
        self.inner.create(key, stored).await
    }

    async fn get(&self, key: &str, revision: Option<Revision>) -> Result<KeyValue> {
        self.shared.read(self.inner.get(key, revision).await?)
    }

    async fn list(&self, prefix: &str, options: &ListOptions) -> Result<ListResult> {
        let mut listed = self.inner.list(prefix, options).await?;
        listed.items = listed
            .items
            .into_iter()
            .map(|kv| self.shared.read_or_skip(kv))
            .collect();
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
        // The stored and plain form of the last value handed to the backend.
        let mut written: Option<(Bytes, Bytes)> = None;
        let mut wrapped = |current: Option<&KeyValue>| -> std::result::Result<Update, AbortError> {
            let plain = match current {
                Some(kv) => {
                    let (value, stale) = shared.decrypt(&kv.key, &kv.value).map_err(pass)?;
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
            .guaranteed_update(key, &backend_preconditions, &mut wrapped)
            .await;
        match result {
            Ok(mut kv) => match written {
                Some((stored, plain)) if stored == kv.value => {
                    kv.value = plain;
                    Ok(kv)
                }
                _ => shared.read(kv),
            },
            Err(StorageError::Aborted(err)) => Err(match err.downcast::<Passthrough>() {
                Ok(passed) => passed.0,
                Err(err) => StorageError::Aborted(err),
            }),
            Err(err) => Err(err),
        }
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
            deleted.previous = self.shared.read(deleted.previous)?;
            return Ok(deleted);
        }
        // The uid is inside the encrypted value: check it on the plain value, then
        // delete only if the key has not changed since.
        loop {
            let current = self.shared.read(self.inner.get(key, None).await?)?;
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
            .map(move |item| item.map(|event| shared.read_event(event)))
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
