//! [`EncryptedStorage`]: the decorator itself.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use ferrokube_storage::{
    AbortError, Backend, Deleted, KeyValue, ListOptions, ListResult, Preconditions, Result,
    Revision, Storage, StorageError, StorageStats, Update, UpdateFn, WatchEvent, WatchStream,
};
use futures::StreamExt;
use tokio_stream::wrappers::WatchStream as WatchChanges;

use crate::config::{Encryption, EncryptionConfiguration};
use crate::kms::{DekRequest, KmsTimings};
use crate::providers::{Chain, Location, ReadError, TransformError, check_unencrypted};

/// What every value a KMS provider wrote starts with, whatever its version.
const KMS_PREFIX: &str = "k8s:enc:kms:";

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
    /// Replaced whole when `--encryption-provider-config-automatic-reload` sees the
    /// file change; each operation resolves its chain once.
    encryption: RwLock<Arc<Encryption>>,
    backend_prefix: String,
    /// Bumped when the configuration in use is replaced.
    replaced: tokio::sync::watch::Sender<u64>,
    /// The keys lists and watches left out because their values could not be
    /// decrypted, each with `1 +` the [`Shared::epoch`] at the time; a key leaves
    /// when a list or watch reads it.
    skipped: Mutex<HashMap<String, u64>>,
    /// How many keys `skipped` holds, so that reads look at it only when needed.
    skipped_count: AtomicUsize,
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
                encryption: RwLock::new(Arc::new(encryption)),
                backend_prefix: backend_prefix.to_string(),
                replaced: tokio::sync::watch::Sender::new(0),
                skipped: Mutex::new(HashMap::new()),
                skipped_count: AtomicUsize::new(0),
            }),
        }
    }

    /// How many keys are recorded as left out of lists and watches.
    #[cfg(test)]
    pub(crate) fn left_out(&self) -> usize {
        self.shared.skipped_count.load(Ordering::SeqCst)
    }

    /// The configuration in use: to check its KMS plugins and to replace it when its
    /// file changes.
    pub fn in_use(&self) -> EncryptionInUse {
        EncryptionInUse {
            shared: self.shared.clone(),
        }
    }
}

/// Upstream's floor for how long a reloaded configuration's KMS plugins may take to
/// become healthy (`validateNewTransformersHealth`).
const RELOAD_HEALTH_TIMEOUT_MIN: Duration = Duration::from_secs(10);
const RELOAD_HEALTH_POLL: Duration = Duration::from_millis(100);

/// The configuration an [`EncryptedStorage`] uses (see [`EncryptedStorage::in_use`]).
#[derive(Clone)]
pub struct EncryptionInUse {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for EncryptionInUse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.current().fmt(f)
    }
}

impl EncryptionInUse {
    pub fn current(&self) -> Arc<Encryption> {
        self.shared.current()
    }

    /// The `kms-providers` check of the configuration in use (healthy without KMS
    /// providers): with automatic reload the check is always served, as upstream.
    pub async fn check_kms(&self) -> Result<(), String> {
        match self.current().kms_health() {
            Some(health) => health.check().await,
            None => Ok(()),
        }
    }

    /// Upstream's automatic reload of a changed file: the new configuration is
    /// decoded, validated and built, its KMS plugins started and given until they
    /// are healthy (twice their timeouts, at least 10 s), and only then put in use.
    /// Reads and writes under way finish with the configuration they started with.
    /// On any failure the configuration in use stays.
    pub async fn replace(
        &self,
        text: &str,
        timings: KmsTimings,
    ) -> std::result::Result<(), String> {
        if text.is_empty() {
            return Err("encryption provider configuration file is empty".into());
        }
        let config = EncryptionConfiguration::parse(text.as_bytes()).map_err(|e| e.to_string())?;
        let metrics = self.current().metrics.clone();
        let encryption = Encryption::with_metrics(&config, metrics).map_err(|e| e.to_string())?;
        for warning in encryption.warnings() {
            tracing::warn!("--encryption-provider-config: {warning}");
        }
        encryption.start_kms(timings).await;
        if let Some(health) = encryption.kms_health() {
            let timeout = (2 * encryption.kms_timeout_sum()).max(RELOAD_HEALTH_TIMEOUT_MIN);
            let deadline = tokio::time::Instant::now() + timeout;
            loop {
                let checked = health.check().await;
                match checked {
                    Ok(()) => break,
                    Err(e) if tokio::time::Instant::now() >= deadline => {
                        return Err(format!("health check for new transformers failed: {e}"));
                    }
                    Err(_) => tokio::time::sleep(RELOAD_HEALTH_POLL).await,
                }
            }
        }
        *self
            .shared
            .encryption
            .write()
            .unwrap_or_else(|e| e.into_inner()) = Arc::new(encryption);
        self.shared.replaced.send_modify(|n| *n += 1);
        Ok(())
    }
}

/// Ends a watch so that its consumer lists again (see [`Shared::relist_when_readable`]).
fn relist_error() -> StorageError {
    StorageError::Internal(
        "encryption at rest: values left out may be readable now; list again".into(),
    )
}

/// A read that fetched a KMS seed [`DEK_FETCHES`] times and still found none cached.
fn dek_not_kept(key: &str) -> StorageError {
    transform_error(
        key,
        TransformError::new("the KMS plugin's DEK was not kept"),
    )
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

    fn current(&self) -> Arc<Encryption> {
        self.encryption
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// How many times the configuration was replaced or a KMS plugin of the one in
    /// use became healthy: when it grows, values left out before may read now.
    fn epoch(&self) -> u64 {
        *self.replaced.borrow()
            + self
                .current()
                .kms_recoveries()
                .iter()
                .map(|r| *r.borrow())
                .sum::<u64>()
    }

    fn skip(&self, key: &str, epoch: u64) {
        let mut skipped = self.skipped.lock().unwrap_or_else(|e| e.into_inner());
        if skipped.insert(key.to_string(), epoch + 1).is_none() {
            self.skipped_count.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn readable_again(&self, key: &str) {
        if self.skipped_count.load(Ordering::SeqCst) == 0 {
            return;
        }
        let mut skipped = self.skipped.lock().unwrap_or_else(|e| e.into_inner());
        if skipped.remove(key).is_some() {
            self.skipped_count.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Whether a value left out under `prefix` may read now (the epoch grew since).
    /// `claim` marks those values as left out at this epoch, so that a key that is
    /// gone (and so never read again) makes one list again, not one per watch.
    fn may_read_under(&self, prefix: &str, claim: bool) -> bool {
        if self.skipped_count.load(Ordering::SeqCst) == 0 {
            return false;
        }
        let epoch = self.epoch();
        let mut skipped = self.skipped.lock().unwrap_or_else(|e| e.into_inner());
        let mut found = false;
        for (key, at) in skipped.iter_mut() {
            if key.starts_with(prefix) && epoch >= *at {
                found = true;
                if claim {
                    *at = epoch + 1;
                }
            }
        }
        found
    }

    /// A stream that fails, once, when values this watch's prefix left out of lists
    /// and watches may have become readable: the registry's cache then lists
    /// everything again (upstream's cacher of the resource retries its list the same
    /// way) and reads them. A replaced configuration always fails it, so that the
    /// next watch follows the new configuration's plugins.
    fn relist_when_readable(self: &Arc<Self>, prefix: &str) -> WatchStream {
        // Readable already: a plugin recovered between the list and this watch.
        if self.may_read_under(prefix, true) {
            return futures::stream::once(std::future::ready(Err(relist_error()))).boxed();
        }
        let mut signals: Vec<futures::stream::BoxStream<'static, bool>> = self
            .current()
            .kms_recoveries()
            .into_iter()
            .map(|r| WatchChanges::from_changes(r).map(|_| false).boxed())
            .collect();
        signals.push(
            WatchChanges::from_changes(self.replaced.subscribe())
                .map(|_| true)
                .boxed(),
        );
        let shared = self.clone();
        let prefix = prefix.to_string();
        futures::stream::select_all(signals)
            .filter_map(move |replaced| {
                let relist = replaced || shared.may_read_under(&prefix, false);
                std::future::ready(relist.then(|| Err(relist_error())))
            })
            .take(1)
            .boxed()
    }

    fn chain(&self, key: &str) -> Option<Arc<Chain>> {
        self.current().resolver.resolve(key).cloned()
    }

    /// Whether stored values of `key` may be encrypted, so that the backend cannot
    /// look inside them (for the uid precondition).
    fn transforms(&self, key: &str) -> bool {
        self.chain(key).is_some_and(|c| c.transforms())
    }

    fn encrypt(&self, key: &str, plain: Bytes) -> Result<Bytes> {
        let encryption = self.current();
        match encryption.resolver.resolve(key) {
            Some(chain) => chain
                .encrypt(&plain, self.location(key), &encryption.metrics)
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
        let encryption = self.current();
        match encryption.resolver.resolve(key) {
            Some(chain) => chain.decrypt(stored, self.location(key), &encryption.metrics),
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
        Err(dek_not_kept(key))
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
        // A KMS plugin may recover while its value is being read: take the epoch
        // first (only for such values, as it costs a lock and an allocation).
        let epoch_before = kv
            .value
            .starts_with(KMS_PREFIX.as_bytes())
            .then(|| self.epoch());
        match self.decrypt(&kv.key, &kv.value).await {
            Ok((plain, _)) => {
                self.readable_again(&kv.key);
                kv.value = plain;
            }
            Err(err) => {
                let epoch = epoch_before.unwrap_or_else(|| self.epoch());
                self.skip(&kv.key, epoch);
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
            WatchEvent::Deleted { previous, revision } => {
                let previous = self.read_or_skip(previous).await;
                // Gone: nothing is left out any more, readable or not.
                self.readable_again(&previous.key);
                WatchEvent::Deleted { previous, revision }
            }
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
        Err(dek_not_kept(key))
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
        let events = events
            .then(move |item| {
                let shared = shared.clone();
                async move {
                    match item {
                        Ok(event) => Ok(shared.read_event(event).await),
                        Err(e) => Err(e),
                    }
                }
            })
            .boxed();
        let mut events = events;
        let mut relist = self.shared.relist_when_readable(prefix);
        // Ends with the backend's watch; the relist signal only interrupts it.
        Ok(futures::stream::poll_fn(move |cx| {
            if let std::task::Poll::Ready(Some(relist)) = relist.poll_next_unpin(cx) {
                return std::task::Poll::Ready(Some(relist));
            }
            events.poll_next_unpin(cx)
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
