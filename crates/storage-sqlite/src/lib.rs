//! The embedded storage backend of Ferrokube: [`SqliteStorage`] implements
//! [`ferrokube_storage::Storage`] on one SQLite database file (WAL mode), with
//! MVCC history, in-process watch fan-out and compaction that always completes.
//!
//! Layer: server side, below `registry`. Only the apiserver (`cmd/kube-apiserver`)
//! and `testing` choose a backend; everything else sees `dyn Storage`. This crate
//! must not depend on any other Ferrokube crate but `ferrokube-storage`.
//!
//! # Design
//! * **One writer.** A dedicated OS thread owns the only write connection and assigns
//!   every revision. Requests reach it over a channel; it drains all that are queued,
//!   applies them in one transaction (each checked before it writes, so a failed
//!   create does not fail its neighbours), commits once (`synchronous=FULL`: one
//!   fsync for the whole group), publishes the events, then answers each request.
//! * **Readers** use a small pool of read connections on blocking threads; WAL lets
//!   them read a consistent snapshot while the writer writes.
//! * **History** lives in `kv_log` (one row per write), live keys in `kv_current`;
//!   see the `schema` module. Reads at any retained revision, lists with
//!   continue tokens, and watch replay all come from it.
//! * **Watch** is fan-out in process: no polling. A watch subscribes, replays
//!   history from the database, then switches to live events without gap or
//!   duplicate. A watcher that does not keep up is ended with `Unavailable`.
//! * **Compaction** records the compacted revision at once, then removes superseded
//!   rows in small transactions between write batches, and checkpoints the WAL.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use ferrokube_storage::{
    Deleted, KeyValue, ListOptions, ListResult, Preconditions, Result, Revision, Storage,
    StorageError, StorageStats, Update, UpdateFn, WatchStream,
};
use parking_lot::Mutex;
use rusqlite::Transaction;
use tokio::sync::oneshot;

mod read;
mod schema;
mod util;
mod watch;
mod writer;

use read::ReadPool;
use watch::Hub;
use writer::{Expect, Msg, Op, Reply, Request, Writer};

/// Tuning of a [`SqliteStorage`]; the defaults suit the apiserver.
#[derive(Clone, Debug)]
pub struct SqliteOptions {
    /// Read connections kept open between reads.
    pub read_connections: usize,
    /// Events a watcher may leave unread before it is ended as too slow.
    pub watch_buffer: usize,
    /// Most write requests committed in one transaction.
    pub max_batch: usize,
    /// Most history rows examined per compaction transaction.
    pub compaction_batch: usize,
    /// How long a connection waits on a lock before giving up.
    pub busy_timeout: Duration,
    /// When set, an idle watch sends a progress event (bookmark) this often.
    pub progress_interval: Option<Duration>,
    /// Largest value accepted, in bytes.
    pub max_value_bytes: usize,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            read_connections: 8,
            watch_buffer: 4096,
            max_batch: 1024,
            compaction_batch: 500,
            busy_timeout: Duration::from_secs(5),
            progress_interval: Some(Duration::from_secs(5)),
            max_value_bytes: 128 * 1024 * 1024,
        }
    }
}

/// What the store's handle, its watches and its writer share.
pub(crate) struct Shared {
    options: SqliteOptions,
    path: PathBuf,
    pool: ReadPool,
    hub: Hub,
    /// The newest committed revision.
    current: AtomicI64,
    compacted: AtomicI64,
    /// History superseded at or below this revision has been removed from disk.
    purged: AtomicI64,
    live_keys: AtomicI64,
}

impl Shared {
    /// Runs a read on a blocking thread with a pooled connection, in one snapshot.
    async fn read<T, F>(self: &Arc<Self>, read: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Transaction<'_>) -> Result<T> + Send + 'static,
    {
        let shared = self.clone();
        tokio::task::spawn_blocking(move || shared.pool.read(read))
            .await
            .map_err(|err| StorageError::Internal(format!("read task failed: {err}")))?
    }
}

/// The embedded backend. Dropping it (or [`SqliteStorage::close`]) stops the writer
/// thread after the batch in hand; open watches then end with `Unavailable`.
pub struct SqliteStorage {
    shared: Arc<Shared>,
    requests: mpsc::Sender<Msg>,
    writer: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for SqliteStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStorage")
            .field("path", &self.shared.path)
            .finish_non_exhaustive()
    }
}

impl SqliteStorage {
    /// Opens the database at `path`, creating it and its directory when missing.
    pub fn open(path: &Path, options: SqliteOptions) -> Result<SqliteStorage> {
        if let Some(dir) = path.parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir).map_err(|err| {
                StorageError::Internal(format!("cannot create {}: {err}", dir.display()))
            })?;
        }
        let (conn, persisted) = schema::open_writer(path, options.busy_timeout)?;
        let shared = Arc::new(Shared {
            pool: ReadPool::new(
                path.to_path_buf(),
                options.busy_timeout,
                options.read_connections,
            ),
            hub: Hub::new(persisted.rev, options.watch_buffer),
            path: path.to_path_buf(),
            current: AtomicI64::new(persisted.rev),
            compacted: AtomicI64::new(persisted.compacted),
            purged: AtomicI64::new(persisted.purged),
            live_keys: AtomicI64::new(persisted.live_keys),
            options,
        });
        let (requests, rx) = mpsc::channel();
        let writer = Writer::new(conn, shared.clone(), persisted);
        let handle = std::thread::Builder::new()
            .name("sqlite-writer".to_string())
            .spawn(move || writer.run(rx))
            .map_err(|err| StorageError::Internal(format!("cannot start writer: {err}")))?;
        Ok(SqliteStorage {
            shared,
            requests,
            writer: Mutex::new(Some(handle)),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// How far compaction has removed history from disk. It trails the compacted
    /// revision while the writer works through the backlog in small batches.
    pub fn purged_revision(&self) -> Revision {
        self.shared.purged.load(Ordering::Acquire)
    }

    /// Stops the writer thread and waits for it; the same as dropping the store.
    pub fn close(self) {
        drop(self);
    }

    fn shutdown(&self) {
        let _ = self.requests.send(Msg::Shutdown);
        if let Some(handle) = self.writer.lock().take() {
            let _ = handle.join();
        }
    }

    async fn write(&self, op: Op) -> Result<Reply> {
        let (reply, answer) = oneshot::channel();
        self.requests
            .send(Msg::Write(Request { op, reply }))
            .map_err(|_| StorageError::Unavailable("the store is closed".to_string()))?;
        answer.await.map_err(|_| {
            StorageError::Unavailable("the store closed before answering".to_string())
        })?
    }

    async fn put(&self, key: &str, value: Bytes, expect: Expect) -> Result<KeyValue> {
        check_key(key)?;
        if value.len() > self.shared.options.max_value_bytes {
            return Err(StorageError::InvalidArgument(format!(
                "value of {} bytes is larger than the limit of {} bytes",
                value.len(),
                self.shared.options.max_value_bytes
            )));
        }
        let op = Op::Put {
            key: key.to_string(),
            value,
            expect,
        };
        match self.write(op).await? {
            Reply::Put(kv) => Ok(kv),
            _ => Err(unexpected_reply()),
        }
    }

    async fn latest(&self, key: &str) -> Result<Option<KeyValue>> {
        let key = key.to_string();
        self.shared.read(move |tx| read::latest(tx, &key)).await
    }
}

impl Drop for SqliteStorage {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn check_key(key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(StorageError::InvalidArgument("empty key".to_string()));
    }
    Ok(())
}

fn unexpected_reply() -> StorageError {
    StorageError::Internal("unexpected reply from the writer".to_string())
}

fn has_preconditions(preconditions: &Preconditions) -> bool {
    preconditions.revision.is_some() || preconditions.uid.is_some()
}

#[async_trait]
impl Storage for SqliteStorage {
    async fn create(&self, key: &str, value: Bytes) -> Result<Revision> {
        Ok(self.put(key, value, Expect::Absent).await?.mod_revision)
    }

    async fn get(&self, key: &str, revision: Option<Revision>) -> Result<KeyValue> {
        let key = key.to_string();
        self.shared
            .read(move |tx| read::get(tx, &key, revision))
            .await
    }

    async fn list(&self, prefix: &str, options: &ListOptions) -> Result<ListResult> {
        let prefix = prefix.to_string();
        let options = options.clone();
        self.shared
            .read(move |tx| read::list(tx, &prefix, &options))
            .await
    }

    async fn guaranteed_update(
        &self,
        key: &str,
        preconditions: &Preconditions,
        update: &mut UpdateFn<'_>,
    ) -> Result<KeyValue> {
        check_key(key)?;
        loop {
            let current = self.latest(key).await?;
            match &current {
                Some(kv) => preconditions.check(kv)?,
                None if has_preconditions(preconditions) => {
                    return Err(StorageError::NotFound {
                        key: key.to_string(),
                    });
                }
                None => {}
            }
            let value = match update(current.as_ref()).map_err(StorageError::Aborted)? {
                Update::Keep => {
                    return current.ok_or_else(|| StorageError::NotFound {
                        key: key.to_string(),
                    });
                }
                Update::Write(value) => value,
            };
            let expect = match &current {
                Some(kv) => Expect::Revision(kv.mod_revision),
                None => Expect::Absent,
            };
            match self.put(key, value, expect).await {
                // Somebody wrote the key in between: start over.
                Err(
                    StorageError::Conflict { .. }
                    | StorageError::NotFound { .. }
                    | StorageError::AlreadyExists { .. },
                ) => continue,
                other => return other,
            }
        }
    }

    async fn compare_and_swap(
        &self,
        key: &str,
        expected_revision: Revision,
        value: Bytes,
    ) -> Result<KeyValue> {
        self.put(key, value, Expect::Revision(expected_revision))
            .await
    }

    async fn delete(&self, key: &str, preconditions: &Preconditions) -> Result<Deleted> {
        loop {
            let expect = if has_preconditions(preconditions) {
                let current = self
                    .latest(key)
                    .await?
                    .ok_or_else(|| StorageError::NotFound {
                        key: key.to_string(),
                    })?;
                preconditions.check(&current)?;
                Some(current.mod_revision)
            } else {
                None
            };
            let op = Op::Delete {
                key: key.to_string(),
                expect,
            };
            match self.write(op).await {
                Ok(Reply::Deleted(deleted)) => return Ok(deleted),
                Ok(_) => return Err(unexpected_reply()),
                // Changed since we checked the preconditions: check again.
                Err(StorageError::Conflict { .. }) if expect.is_some() => continue,
                Err(err) => return Err(err),
            }
        }
    }

    async fn watch(&self, prefix: &str, from_revision: Revision) -> Result<WatchStream> {
        let compacted = self.shared.compacted.load(Ordering::Acquire);
        if from_revision > 0 && from_revision < compacted {
            return Err(StorageError::Expired {
                requested: from_revision,
                compacted,
            });
        }
        Ok(watch::watch(self.shared.clone(), prefix, from_revision))
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        if revision <= self.shared.compacted.load(Ordering::Acquire) {
            return Ok(());
        }
        match self.write(Op::Compact { revision }).await? {
            Reply::Compacted => Ok(()),
            _ => Err(unexpected_reply()),
        }
    }

    async fn current_revision(&self) -> Result<Revision> {
        Ok(self.shared.current.load(Ordering::Acquire))
    }

    /// The file is this process's alone, and only writes (each an event) make
    /// revisions; compaction does not.
    fn watch_sees_every_revision(&self) -> bool {
        true
    }

    fn backend(&self) -> ferrokube_storage::Backend {
        ferrokube_storage::Backend::Sqlite
    }

    async fn stats(&self) -> Result<StorageStats> {
        let path = self.shared.path.clone();
        let size_bytes = tokio::task::spawn_blocking(move || {
            let mut wal = path.clone().into_os_string();
            wal.push("-wal");
            [path, PathBuf::from(wal)]
                .iter()
                .filter_map(|file| std::fs::metadata(file).ok())
                .map(|meta| meta.len())
                .sum::<u64>()
        })
        .await
        .map_err(|err| StorageError::Internal(format!("stats task failed: {err}")))?;
        Ok(StorageStats {
            size_bytes,
            keys: u64::try_from(self.shared.live_keys.load(Ordering::Acquire)).unwrap_or(0),
            current_revision: self.shared.current.load(Ordering::Acquire),
            compacted_revision: self.shared.compacted.load(Ordering::Acquire),
        })
    }
}
