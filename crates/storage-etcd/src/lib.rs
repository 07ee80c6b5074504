//! The etcd v3 backend of Ferrokube's storage contract: [`EtcdStorage`] implements
//! [`ferrokube_storage::Storage`] on a real etcd cluster through `etcd-client`.
//!
//! Layer: server side, below `registry`. Only the apiserver (and the `testing` crate)
//! choose a backend; nothing else names this crate. It must not depend on any other
//! Ferrokube crate but `ferrokube-storage`.
//!
//! # Design
//! * Revisions are etcd's own: every write is one etcd revision, and the key's
//!   `create_revision`/`mod_revision` are passed through as they are.
//! * Writes are single etcd transactions: create is `create_revision == 0 → put`;
//!   updates and deletes compare `mod_revision` against the value the caller's
//!   preconditions were checked on, and carry a `get` in the failure branch so a lost
//!   race is retried without another round trip.
//! * Keys may live under a storage prefix ([`EtcdOptions::prefix`], like upstream's
//!   `--etcd-prefix`); by default keys are used as given.
//! * Compaction is recorded in one global internal key (upstream keeps
//!   `compact_rev_key`; ours starts with the byte `0xff`, outside every range of
//!   UTF-8 keys), written before etcd compacts, so every process sharing the etcd
//!   knows the compacted revision: for [`StorageError::Expired`] on watches and for
//!   [`StorageStats`]. Writing it takes a revision of its own.
//! * Watches read etcd's stream on a task of their own and hand events over through a
//!   bounded channel: a watcher that does not read is ended with
//!   [`StorageError::Unavailable`] ("watcher fell behind") once its buffer is full,
//!   and never slows etcd or other watchers down. Dropping the stream cancels the
//!   etcd watch.
//! * Transport failures are [`StorageError::Unavailable`]; the gRPC channel reconnects
//!   on its own, so a request after etcd is back succeeds.
//! * Requests go over [`EtcdOptions::connections`] HTTP/2 connections in turn, and
//!   watches over one more of their own, so a burst of watch events does not queue in
//!   front of writes on one connection's flow-control window and framing task.
//!
//! The feature `testing` adds [`testing::EtcdProcess`], a throwaway etcd server for
//! tests and benchmarks.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, DeleteOptions, GetOptions, GetResponse, KvClient,
    MaintenanceClient, PutOptions, Txn, TxnOp, TxnOpResponse, TxnResponse, WatchClient,
};
use ferrokube_storage::{
    ContinueToken, Deleted, KeyValue, ListOptions, ListResult, Preconditions, Result, Revision,
    RevisionMatch, Storage, StorageError, StorageStats, Update, UpdateFn, WatchStream,
};

mod error;
mod keys;
mod watch;

#[cfg(feature = "testing")]
pub mod testing;

use error::{Kind, kind_of, plain};
use keys::{COMPACT_KEY, full_key, range_end, range_start, user_key};

/// The largest response accepted from etcd.
const MAX_MESSAGE: usize = i32::MAX as usize;

/// How to reach etcd and how this store uses it.
#[derive(Clone, Debug)]
pub struct EtcdOptions {
    /// Prepended to every key (upstream's `--etcd-prefix`, e.g. `/registry`); keys
    /// come back without it. Empty: keys are used as given.
    pub prefix: String,
    /// How long to wait for a TCP connection to an endpoint.
    pub connect_timeout: Duration,
    /// How long one request may take before it fails as unavailable.
    pub request_timeout: Duration,
    /// HTTP/2 keep-alive (interval, timeout), so a dead connection is noticed even
    /// when only watches use it. `None` disables it.
    pub keep_alive: Option<(Duration, Duration)>,
    /// Events a watch buffers for a slow reader before it is ended.
    pub watch_buffer: usize,
    /// HTTP/2 connections for requests (reads and writes), used in turn; watches have
    /// a connection of their own besides. One connection's framing runs on one task,
    /// which caps the requests it carries per second; more of them spread the gRPC
    /// work over the runtime's threads (upstream's apiserver likewise holds several
    /// etcd clients).
    pub connections: usize,
    /// TLS towards etcd (`https://` endpoints); `None`: plain HTTP/2.
    pub tls: Option<EtcdTls>,
}

/// How this client verifies etcd and proves itself to it (upstream's `--etcd-cafile`,
/// `--etcd-certfile`, `--etcd-keyfile`).
#[derive(Clone)]
pub struct EtcdTls {
    /// PEM of the CA(s) etcd's serving certificate must chain to.
    pub ca_pem: String,
    /// PEM client certificate and key, for an etcd that requires client certificates.
    pub client: Option<(String, String)>,
}

impl std::fmt::Debug for EtcdTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("EtcdTls")
            .field("client_certificate", &self.client.is_some())
            .finish_non_exhaustive()
    }
}

impl Default for EtcdOptions {
    fn default() -> Self {
        EtcdOptions {
            prefix: String::new(),
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
            keep_alive: Some((Duration::from_secs(10), Duration::from_secs(5))),
            watch_buffer: 1024,
            connections: 2,
            tls: None,
        }
    }
}

/// [`Storage`] on etcd v3. Cheap to share behind an `Arc`; all methods take `&self`.
pub struct EtcdStorage {
    /// Keep the balanced channels' endpoint sets alive.
    _clients: Vec<Client>,
    /// One per request connection, used in turn ([`EtcdStorage::kv`]).
    kvs: Vec<KvClient>,
    next_kv: std::sync::atomic::AtomicUsize,
    watch: WatchClient,
    maintenance: MaintenanceClient,
    prefix: String,
    request_timeout: Duration,
    watch_buffer: usize,
    /// The newest compaction this process has seen recorded (a lower bound).
    compacted: Arc<AtomicI64>,
}

impl std::fmt::Debug for EtcdStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStorage")
            .field("prefix", &self.prefix)
            .field("compacted", &self.compacted.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// What the compaction key says, read together with the store's current revision.
#[derive(Clone, Copy, Debug)]
struct CompactState {
    compacted: Revision,
    /// `mod_revision` of the compaction key (0: never written).
    key_revision: Revision,
    current: Revision,
}

fn header_revision(header: Option<&etcd_client::ResponseHeader>) -> Result<Revision> {
    header
        .map(|h| h.revision())
        .ok_or_else(|| StorageError::Internal("etcd response without a header".into()))
}

/// The range response of the `index`-th operation of a transaction.
fn txn_get(resp: &TxnResponse, index: usize) -> Result<GetResponse> {
    match resp.op_responses().into_iter().nth(index) {
        Some(TxnOpResponse::Get(get)) => Ok(get),
        _ => Err(StorageError::Internal(
            "etcd transaction answered with unexpected responses".into(),
        )),
    }
}

impl EtcdStorage {
    /// Connects to the etcd cluster at `endpoints` (`http://host:port` or `host:port`)
    /// and checks it answers.
    pub async fn connect(endpoints: &[String], options: EtcdOptions) -> Result<EtcdStorage> {
        let mut connect = ConnectOptions::new()
            .with_connect_timeout(options.connect_timeout)
            .with_timeout(options.request_timeout);
        if let Some((interval, timeout)) = options.keep_alive {
            connect = connect
                .with_keep_alive(interval, timeout)
                .with_keep_alive_while_idle(true);
        }
        if let Some(tls) = &options.tls {
            let mut config = etcd_client::TlsOptions::new()
                .ca_certificate(etcd_client::Certificate::from_pem(&tls.ca_pem));
            if let Some((cert, key)) = &tls.client {
                config = config.identity(etcd_client::Identity::from_pem(cert, key));
            }
            connect = connect.with_tls(config);
        }
        // The first connection carries watches; the others requests.
        let mut clients = Vec::new();
        for _ in 0..=options.connections.max(1) {
            clients.push(
                Client::connect(endpoints, Some(connect.clone()))
                    .await
                    .map_err(plain)?,
            );
        }
        let store = EtcdStorage {
            // Lists and watch batches may be far larger than gRPC's default 4 MiB
            // (upstream's client lifts the limit the same way).
            kvs: clients[1..]
                .iter()
                .map(|c| c.kv_client().max_decoding_message_size(MAX_MESSAGE))
                .collect(),
            next_kv: Default::default(),
            watch: clients[0]
                .watch_client()
                .max_decoding_message_size(MAX_MESSAGE),
            maintenance: clients[0].maintenance_client(),
            _clients: clients,
            prefix: options.prefix,
            request_timeout: options.request_timeout,
            watch_buffer: options.watch_buffer.max(1),
            compacted: Arc::new(AtomicI64::new(0)),
        };
        store.compact_state().await?;
        Ok(store)
    }

    /// A request client, the connections taken in turn.
    fn kv(&self) -> KvClient {
        let i = self.next_kv.fetch_add(1, Ordering::Relaxed) % self.kvs.len();
        self.kvs[i].clone()
    }

    /// The storage prefix keys are stored under.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn key(&self, key: &str) -> Vec<u8> {
        full_key(&self.prefix, key)
    }

    /// Converts an etcd key-value, taking its buffers.
    fn convert(&self, kv: etcd_client::KeyValue) -> Result<KeyValue> {
        let (create_revision, mod_revision) = (kv.create_revision(), kv.mod_revision());
        let (key, value) = kv.into_key_value();
        let key = user_key(&self.prefix, &key).ok_or_else(|| {
            StorageError::Internal(format!(
                "etcd key {:?} is outside the storage prefix or not UTF-8",
                String::from_utf8_lossy(&key)
            ))
        })?;
        Ok(KeyValue {
            key,
            value: Bytes::from(value),
            create_revision,
            mod_revision,
        })
    }

    /// The only key-value of a single-key range response, if any.
    fn single(&self, mut resp: GetResponse) -> Result<Option<KeyValue>> {
        resp.take_kvs()
            .into_iter()
            .next()
            .map(|kv| self.convert(kv))
            .transpose()
    }

    async fn read(&self, key: &[u8]) -> Result<Option<KeyValue>> {
        let resp = self.kv().get(key, None).await.map_err(plain)?;
        self.single(resp)
    }

    fn note_compacted(&self, revision: Revision) -> Revision {
        self.compacted
            .fetch_max(revision, Ordering::Relaxed)
            .max(revision)
    }

    /// Reads the compaction key; its header is the current revision.
    async fn compact_state(&self) -> Result<CompactState> {
        let resp = self.kv().get(COMPACT_KEY, None).await.map_err(plain)?;
        let current = header_revision(resp.header())?;
        let (compacted, key_revision) = match resp.kvs().first() {
            Some(kv) => (
                keys::parse_compact_value(kv.value()).unwrap_or(0),
                kv.mod_revision(),
            ),
            None => (0, 0),
        };
        Ok(CompactState {
            compacted: self.note_compacted(compacted),
            key_revision,
            current,
        })
    }

    /// Turns an etcd error on a read at `requested` into the contract's error, reading
    /// the compacted and current revisions for its message when it is about them.
    async fn revision_error(&self, err: etcd_client::Error, requested: Revision) -> StorageError {
        let kind = kind_of(&err);
        if !matches!(kind, Kind::Compacted | Kind::FutureRevision) {
            return plain(err);
        }
        let state = self.compact_state().await.ok();
        error::to_storage_error(
            &err,
            error::Context {
                requested,
                compacted: state.map_or(self.compacted.load(Ordering::Relaxed), |s| s.compacted),
                current: state.map_or(0, |s| s.current),
            },
        )
    }

    /// One page of `[start, end)` at `revision` (0: latest).
    async fn range_page(
        &self,
        start: Vec<u8>,
        end: Vec<u8>,
        revision: Revision,
        limit: usize,
    ) -> Result<GetResponse> {
        let mut options = GetOptions::new().with_range(end);
        if revision > 0 {
            options = options.with_revision(revision);
        }
        if limit > 0 {
            options = options.with_limit(i64::try_from(limit).unwrap_or(i64::MAX));
        }
        match self.kv().get(start, Some(options)).await {
            Ok(resp) => Ok(resp),
            Err(err) => Err(self.revision_error(err, revision).await),
        }
    }

    /// The write half of a read-modify-write: `put` if the key is still as read.
    fn conditional_put(key: &[u8], read: Option<&KeyValue>, value: Vec<u8>) -> Txn {
        let unchanged = match read {
            Some(kv) => Compare::mod_revision(key, CompareOp::Equal, kv.mod_revision),
            None => Compare::create_revision(key, CompareOp::Equal, 0),
        };
        Txn::new()
            .when([unchanged])
            .and_then([TxnOp::put(key, value, None)])
            .or_else([TxnOp::get(key, None)])
    }
}

#[async_trait]
impl Storage for EtcdStorage {
    async fn create(&self, key: &str, value: Bytes) -> Result<Revision> {
        let k = self.key(key);
        let txn = Txn::new()
            .when([Compare::create_revision(k.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(k, Vec::from(value), None)]);
        let resp = self.kv().txn(txn).await.map_err(plain)?;
        if !resp.succeeded() {
            return Err(StorageError::AlreadyExists { key: key.into() });
        }
        header_revision(resp.header())
    }

    async fn get(&self, key: &str, revision: Option<Revision>) -> Result<KeyValue> {
        let mut options = GetOptions::new();
        let requested = revision.unwrap_or(0);
        if let Some(revision) = revision {
            if revision <= 0 {
                return Err(StorageError::InvalidArgument(format!(
                    "revision {revision} is not a revision"
                )));
            }
            options = options.with_revision(revision);
        }
        let resp = match self.kv().get(self.key(key), Some(options)).await {
            Ok(resp) => resp,
            Err(err) => return Err(self.revision_error(err, requested).await),
        };
        self.single(resp)?
            .ok_or_else(|| StorageError::NotFound { key: key.into() })
    }

    async fn list(&self, prefix: &str, options: &ListOptions) -> Result<ListResult> {
        let full_prefix = self.key(prefix);
        let end = range_end(&full_prefix);
        // Where to start, at which revision (0: latest), and the least acceptable one.
        let (start, revision, at_least) = match &options.continue_token {
            Some(token) => {
                let token = ContinueToken::decode(token, prefix)?;
                (self.key(&token.start_key), token.revision, 0)
            }
            None => match options.revision {
                RevisionMatch::Latest => (range_start(&full_prefix), 0, 0),
                RevisionMatch::Exact(revision) if revision <= 0 => {
                    return Err(StorageError::InvalidArgument(format!(
                        "revision {revision} is not a revision"
                    )));
                }
                RevisionMatch::Exact(revision) => (range_start(&full_prefix), revision, 0),
                RevisionMatch::NotOlderThan(revision) => (range_start(&full_prefix), 0, revision),
            },
        };
        let mut resp = self.range_page(start, end, revision, options.limit).await?;
        let current = header_revision(resp.header())?;
        if current < at_least {
            return Err(StorageError::FutureRevision {
                requested: at_least,
                current,
            });
        }
        let read_at = if revision > 0 { revision } else { current };
        let (more, count) = (resp.more(), resp.count());
        let items = resp
            .take_kvs()
            .into_iter()
            .map(|kv| self.convert(kv))
            .collect::<Result<Vec<_>>>()?;
        let (continue_token, remaining) = match items.last() {
            Some(last) if more => {
                // The next page starts right after the last key of this one.
                let token = ContinueToken {
                    revision: read_at,
                    start_key: format!("{}\0", last.key),
                };
                let remaining = u64::try_from(count).unwrap_or(0);
                (
                    Some(token.encode(prefix)),
                    remaining.saturating_sub(items.len() as u64),
                )
            }
            _ => (None, 0),
        };
        Ok(ListResult {
            items,
            revision: read_at,
            continue_token,
            remaining,
        })
    }

    async fn guaranteed_update(
        &self,
        key: &str,
        preconditions: &Preconditions,
        update: &mut UpdateFn<'_>,
    ) -> Result<KeyValue> {
        let k = self.key(key);
        let mut current = self.read(&k).await?;
        loop {
            match &current {
                Some(kv) => preconditions.check(kv)?,
                None if *preconditions != Preconditions::default() => {
                    return Err(StorageError::NotFound { key: key.into() });
                }
                None => {}
            }
            let value = match update(current.as_ref()).map_err(StorageError::Aborted)? {
                Update::Keep => {
                    return current.ok_or_else(|| StorageError::NotFound { key: key.into() });
                }
                Update::Write(value) => value,
            };
            let txn = Self::conditional_put(&k, current.as_ref(), value.to_vec());
            let resp = self.kv().txn(txn).await.map_err(plain)?;
            if resp.succeeded() {
                let revision = header_revision(resp.header())?;
                return Ok(KeyValue {
                    key: key.into(),
                    value,
                    create_revision: current.map_or(revision, |kv| kv.create_revision),
                    mod_revision: revision,
                });
            }
            // Someone wrote in between: start over from what they wrote.
            current = self.single(txn_get(&resp, 0)?)?;
        }
    }

    async fn compare_and_swap(
        &self,
        key: &str,
        expected_revision: Revision,
        value: Bytes,
    ) -> Result<KeyValue> {
        let k = self.key(key);
        let conflict = |have: Revision| StorageError::Conflict {
            key: key.into(),
            message: format!("revision is {have}, expected {expected_revision}"),
        };
        if expected_revision <= 0 {
            // etcd compares a missing key's mod_revision as 0; no write may match.
            return match self.read(&k).await? {
                Some(kv) => Err(conflict(kv.mod_revision)),
                None => Err(StorageError::NotFound { key: key.into() }),
            };
        }
        let txn = Txn::new()
            .when([Compare::mod_revision(
                k.clone(),
                CompareOp::Equal,
                expected_revision,
            )])
            .and_then([TxnOp::put(
                k.clone(),
                value.to_vec(),
                Some(PutOptions::new().with_prev_key()),
            )])
            .or_else([TxnOp::get(k, Some(GetOptions::new().with_keys_only()))]);
        let resp = self.kv().txn(txn).await.map_err(plain)?;
        if !resp.succeeded() {
            return match txn_get(&resp, 0)?.kvs().first() {
                Some(kv) => Err(conflict(kv.mod_revision())),
                None => Err(StorageError::NotFound { key: key.into() }),
            };
        }
        let revision = header_revision(resp.header())?;
        let create_revision = match resp.op_responses().into_iter().next() {
            Some(TxnOpResponse::Put(put)) => put.prev_key().map(|kv| kv.create_revision()),
            _ => None,
        }
        .ok_or_else(|| StorageError::Internal("etcd put without its previous value".into()))?;
        Ok(KeyValue {
            key: key.into(),
            value,
            create_revision,
            mod_revision: revision,
        })
    }

    async fn delete(&self, key: &str, preconditions: &Preconditions) -> Result<Deleted> {
        let k = self.key(key);
        let not_found = || StorageError::NotFound { key: key.into() };
        if *preconditions == Preconditions::default() {
            let options = DeleteOptions::new().with_prev_key();
            let mut resp = self.kv().delete(k, Some(options)).await.map_err(plain)?;
            let revision = header_revision(resp.header())?;
            let previous = resp
                .take_prev_kvs()
                .into_iter()
                .next()
                .ok_or_else(not_found)?;
            return Ok(Deleted {
                previous: self.convert(previous)?,
                revision,
            });
        }
        let mut current = self.read(&k).await?;
        loop {
            let kv = current.ok_or_else(not_found)?;
            preconditions.check(&kv)?;
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    k.clone(),
                    CompareOp::Equal,
                    kv.mod_revision,
                )])
                .and_then([TxnOp::delete(k.clone(), None)])
                .or_else([TxnOp::get(k.clone(), None)]);
            let resp = self.kv().txn(txn).await.map_err(plain)?;
            if resp.succeeded() {
                // The compare pinned the value: what was deleted is what was checked.
                return Ok(Deleted {
                    previous: kv,
                    revision: header_revision(resp.header())?,
                });
            }
            current = self.single(txn_get(&resp, 0)?)?;
        }
    }

    async fn watch(&self, prefix: &str, from_revision: Revision) -> Result<WatchStream> {
        if from_revision < 0 {
            return Err(StorageError::InvalidArgument(format!(
                "cannot watch from revision {from_revision}"
            )));
        }
        let state = self.compact_state().await?;
        if from_revision > 0 && from_revision < state.compacted {
            return Err(StorageError::Expired {
                requested: from_revision,
                compacted: state.compacted,
            });
        }
        let start = if from_revision == 0 {
            state.current + 1
        } else {
            from_revision + 1
        };
        let full_prefix = self.key(prefix);
        watch::start(
            self.watch.clone(),
            watch::Params {
                start_key: range_start(&full_prefix),
                end_key: range_end(&full_prefix),
                storage_prefix: self.prefix.clone(),
                from_revision,
                start_revision: start,
                buffer: self.watch_buffer,
                create_timeout: self.request_timeout,
            },
        )
        .await
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        loop {
            let state = self.compact_state().await?;
            if revision <= state.compacted {
                return Ok(());
            }
            if revision > state.current {
                return Err(StorageError::FutureRevision {
                    requested: revision,
                    current: state.current,
                });
            }
            // Record first, so nobody trusts history this compaction is about to drop.
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    COMPACT_KEY,
                    CompareOp::Equal,
                    state.key_revision,
                )])
                .and_then([TxnOp::put(COMPACT_KEY, revision.to_string(), None)]);
            if self.kv().txn(txn).await.map_err(plain)?.succeeded() {
                break;
            }
            // Another compaction was recorded concurrently; look again.
        }
        self.note_compacted(revision);
        match self.kv().compact(revision, None).await {
            Ok(_) => Ok(()),
            // etcd is already compacted further (by another process): nothing to do.
            Err(err) if kind_of(&err) == Kind::Compacted => Ok(()),
            Err(err) => Err(plain(err)),
        }
    }

    async fn current_revision(&self) -> Result<Revision> {
        let options = GetOptions::new().with_count_only();
        let resp = self
            .kv()
            .get(COMPACT_KEY, Some(options))
            .await
            .map_err(plain)?;
        header_revision(resp.header())
    }

    fn backend(&self) -> ferrokube_storage::Backend {
        ferrokube_storage::Backend::Etcd3
    }

    async fn stats(&self) -> Result<StorageStats> {
        let full_prefix = self.key("");
        let count = GetOptions::new()
            .with_range(range_end(&full_prefix))
            .with_count_only();
        let txn = Txn::new().and_then([
            TxnOp::get(COMPACT_KEY, None),
            TxnOp::get(range_start(&full_prefix), Some(count)),
        ]);
        let resp = self.kv().txn(txn).await.map_err(plain)?;
        let current_revision = header_revision(resp.header())?;
        let recorded = txn_get(&resp, 0)?
            .kvs()
            .first()
            .and_then(|kv| keys::parse_compact_value(kv.value()))
            .unwrap_or(0);
        let keys = u64::try_from(txn_get(&resp, 1)?.count()).unwrap_or(0);
        let status = self.maintenance.clone().status().await.map_err(plain)?;
        Ok(StorageStats {
            size_bytes: u64::try_from(status.db_size()).unwrap_or(0),
            keys,
            current_revision,
            compacted_revision: self.note_compacted(recorded),
        })
    }
}
