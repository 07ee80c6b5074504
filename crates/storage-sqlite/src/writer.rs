//! The single writer: one OS thread owns the write connection and assigns every
//! revision. It drains all queued requests, applies them in ONE transaction (each
//! checked before it writes, so one failing request does not fail the others),
//! commits once (one fsync), publishes the events, then answers each request.
//! Between batches it removes compacted history in small transactions.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use ferrokube_storage::{Deleted, KeyValue, Result, Revision, StorageError, WatchEvent};
use rusqlite::{Connection, OptionalExtension, params};
use tokio::sync::oneshot;

use crate::Shared;
use crate::schema::Persisted;
use crate::util::sql_error;

/// What a put expects of the key's current state.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Expect {
    /// The key must not exist (a create).
    Absent,
    /// The key must exist with this `mod_revision`.
    Revision(Revision),
}

pub(crate) enum Op {
    Put {
        key: String,
        value: Bytes,
        expect: Expect,
    },
    Delete {
        key: String,
        /// Only if the key's `mod_revision` is this.
        expect: Option<Revision>,
    },
    Compact {
        revision: Revision,
    },
}

pub(crate) enum Reply {
    Put(KeyValue),
    Deleted(Deleted),
    Compacted,
}

pub(crate) struct Request {
    pub op: Op,
    pub reply: oneshot::Sender<Result<Reply>>,
}

pub(crate) enum Msg {
    Write(Request),
    Shutdown,
}

/// How long the writer waits for work before doing housekeeping.
const IDLE_TICK: Duration = Duration::from_millis(500);
/// How often an idle writer truncates the WAL, at most.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(5);

pub(crate) struct Writer {
    conn: Connection,
    shared: Arc<Shared>,
    state: Persisted,
    /// Commits since the last explicit checkpoint.
    dirty: bool,
    last_checkpoint: Instant,
    /// After a failed purge step, none before this.
    purge_not_before: Option<Instant>,
}

/// The state one batch builds before it commits.
struct Batch {
    rev: Revision,
    compacted: Revision,
    live_keys: i64,
    results: Vec<Result<Reply>>,
    events: Vec<WatchEvent>,
}

impl Writer {
    pub fn new(conn: Connection, shared: Arc<Shared>, state: Persisted) -> Writer {
        Writer {
            conn,
            shared,
            state,
            dirty: false,
            last_checkpoint: Instant::now(),
            purge_not_before: None,
        }
    }

    pub fn run(mut self, rx: Receiver<Msg>) {
        let max_batch = self.shared.options.max_batch.max(1);
        loop {
            let purge_due = self.purge_due();
            let wait = if purge_due { Duration::ZERO } else { IDLE_TICK };
            let first = match rx.recv_timeout(wait) {
                Ok(Msg::Write(request)) => Some(request),
                Ok(Msg::Shutdown) | Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => None,
            };
            match first {
                Some(first) => {
                    let mut batch = Vec::with_capacity(16);
                    batch.push(first);
                    let mut shutdown = false;
                    while batch.len() < max_batch {
                        match rx.try_recv() {
                            Ok(Msg::Write(request)) => batch.push(request),
                            Ok(Msg::Shutdown) => {
                                shutdown = true;
                                break;
                            }
                            Err(_) => break,
                        }
                    }
                    self.run_batch(batch);
                    if shutdown {
                        break;
                    }
                }
                None if !purge_due => self.maybe_checkpoint(),
                None => {}
            }
            if self.purge_due() {
                self.purge_step();
            }
        }
        self.shared.hub.close();
        if self.dirty {
            self.checkpoint();
        }
    }

    fn run_batch(&mut self, requests: Vec<Request>) {
        match self.try_batch(&requests) {
            Ok(batch) => {
                self.state.rev = batch.rev;
                self.state.compacted = batch.compacted;
                self.state.live_keys = batch.live_keys;
                self.dirty = true;
                self.shared.current.store(batch.rev, Ordering::Release);
                self.shared
                    .compacted
                    .store(batch.compacted, Ordering::Release);
                self.shared
                    .live_keys
                    .store(batch.live_keys, Ordering::Release);
                self.shared.hub.publish(&batch.events, batch.rev);
                for (request, result) in requests.into_iter().zip(batch.results) {
                    let _ = request.reply.send(result);
                }
            }
            Err(err) => {
                let _ = self.conn.execute_batch("ROLLBACK");
                if requests.len() > 1 {
                    // Find the culprit: every request on its own.
                    for request in requests {
                        self.run_batch(vec![request]);
                    }
                } else {
                    tracing::warn!(error = %err, "storage write failed");
                    let err = sql_error(err);
                    for request in requests {
                        let _ = request.reply.send(Err(clone_error(&err)));
                    }
                }
            }
        }
    }

    fn try_batch(&mut self, requests: &[Request]) -> rusqlite::Result<Batch> {
        let conn = &self.conn;
        conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
        let mut batch = Batch {
            rev: self.state.rev,
            compacted: self.state.compacted,
            live_keys: self.state.live_keys,
            results: Vec::with_capacity(requests.len()),
            events: Vec::with_capacity(requests.len()),
        };
        for request in requests {
            let result = apply(conn, &mut batch, &request.op)?;
            batch.results.push(result);
        }
        // The revision itself is persisted by the log's newest row; `meta.rev` only
        // has to cover rows compaction removes, so it is written with the compacted
        // revision and by every compaction step, not by every batch.
        if batch.compacted != self.state.compacted {
            conn.prepare_cached("UPDATE meta SET rev = ?1, compacted = ?2 WHERE id = 0")?
                .execute(params![batch.rev, batch.compacted])?;
        }
        conn.prepare_cached("COMMIT")?.execute([])?;
        Ok(batch)
    }

    fn purge_due(&self) -> bool {
        self.state.purged < self.state.compacted
            && self.purge_not_before.is_none_or(|at| Instant::now() >= at)
    }

    /// Removes one small batch of history superseded at the compacted revision: for
    /// each row up to it, the row it replaced, and tombstones themselves.
    fn purge_step(&mut self) {
        match self.try_purge_step() {
            Ok(purged) => {
                self.state.purged = purged;
                self.purge_not_before = None;
                self.dirty = true;
                if purged >= self.state.compacted {
                    self.checkpoint();
                }
                self.shared.purged.store(purged, Ordering::Release);
            }
            Err(err) => {
                let _ = self.conn.execute_batch("ROLLBACK");
                tracing::warn!(error = %err, "storage compaction step failed; retrying");
                self.purge_not_before = Some(Instant::now() + Duration::from_secs(1));
            }
        }
    }

    fn try_purge_step(&mut self) -> rusqlite::Result<Revision> {
        let conn = &self.conn;
        let target = self.state.compacted;
        let limit = self.shared.options.compaction_batch.max(1);
        conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
        let rows: Vec<(Revision, Revision, bool)> = conn
            .prepare_cached(
                "SELECT rev, prev_rev, deleted FROM kv_log \
                 WHERE rev > ?1 AND rev <= ?2 ORDER BY rev LIMIT ?3",
            )?
            .query_map(params![self.state.purged, target, limit as i64], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?))
            })?
            .collect::<rusqlite::Result<_>>()?;
        {
            let mut delete = conn.prepare_cached("DELETE FROM kv_log WHERE rev = ?1")?;
            for &(rev, prev_rev, deleted) in &rows {
                if prev_rev > 0 {
                    delete.execute([prev_rev])?;
                }
                if deleted {
                    delete.execute([rev])?;
                }
            }
        }
        let purged = if rows.len() < limit {
            target
        } else {
            rows.last().map_or(target, |row| row.0)
        };
        conn.prepare_cached("UPDATE meta SET purged = ?1, rev = ?2 WHERE id = 0")?
            .execute([purged, self.state.rev])?;
        conn.prepare_cached("COMMIT")?.execute([])?;
        Ok(purged)
    }

    fn maybe_checkpoint(&mut self) {
        if self.dirty && self.last_checkpoint.elapsed() >= CHECKPOINT_EVERY {
            self.checkpoint();
        }
    }

    /// Copies the WAL into the database and truncates it, waiting only briefly for
    /// readers; if they hold it, the next attempt will do.
    fn checkpoint(&mut self) {
        self.last_checkpoint = Instant::now();
        let busy = self.shared.options.busy_timeout;
        let _ = self.conn.busy_timeout(Duration::from_millis(20));
        let result = self
            .conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| {
                row.get::<_, i64>(0)
            });
        let _ = self.conn.busy_timeout(busy);
        match result {
            Ok(0) => self.dirty = false,
            Ok(_) => {}
            Err(err) => tracing::debug!(error = %err, "wal checkpoint did not complete"),
        }
    }
}

/// The key's live row: (mod_revision, create_revision, value).
fn lookup(conn: &Connection, key: &str) -> rusqlite::Result<Option<(Revision, Revision, Vec<u8>)>> {
    conn.prepare_cached(crate::read::LATEST_ROW)?
        .query_row([key.as_bytes()], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })
        .optional()
}

/// Appends a live (non-tombstone) row to the history.
fn insert_log_row(
    conn: &Connection,
    rev: Revision,
    key: &str,
    create_rev: Revision,
    prev_rev: Revision,
    value: &Bytes,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO kv_log (rev, key, create_rev, prev_rev, value, deleted) \
         VALUES (?1, ?2, ?3, ?4, ?5, 0)",
    )?
    .execute(params![
        rev,
        key.as_bytes(),
        create_rev,
        prev_rev,
        &value[..]
    ])?;
    Ok(())
}

/// Applies one request inside the batch's transaction. The outer error is SQLite's
/// (the batch is rolled back); the inner one is the request's own answer.
fn apply(conn: &Connection, batch: &mut Batch, op: &Op) -> rusqlite::Result<Result<Reply>> {
    match op {
        Op::Put {
            key,
            value,
            expect: Expect::Absent,
        } => {
            // A create claims the key in `kv_current` first: the claim fails exactly
            // when the key is live, which saves a lookup of the live row per create.
            let rev = batch.rev + 1;
            let claimed = conn
                .prepare_cached(
                    "INSERT INTO kv_current (key, rev) VALUES (?1, ?2) \
                     ON CONFLICT (key) DO NOTHING",
                )?
                .execute(params![key.as_bytes(), rev])?;
            if claimed == 0 {
                return Ok(Err(StorageError::AlreadyExists { key: key.clone() }));
            }
            insert_log_row(conn, rev, key, rev, 0, value)?;
            batch.rev = rev;
            batch.live_keys += 1;
            let kv = KeyValue {
                key: key.clone(),
                value: value.clone(),
                create_revision: rev,
                mod_revision: rev,
            };
            batch.events.push(WatchEvent::Added(kv.clone()));
            Ok(Ok(Reply::Put(kv)))
        }
        Op::Put {
            key,
            value,
            expect: Expect::Revision(want),
        } => {
            let Some((have, create_rev, previous)) = lookup(conn, key)? else {
                return Ok(Err(StorageError::NotFound { key: key.clone() }));
            };
            if *want != have {
                return Ok(Err(StorageError::Conflict {
                    key: key.clone(),
                    message: format!("revision is {have}, expected {want}"),
                }));
            }
            let rev = batch.rev + 1;
            insert_log_row(conn, rev, key, create_rev, have, value)?;
            conn.prepare_cached("UPDATE kv_current SET rev = ?2 WHERE key = ?1")?
                .execute(params![key.as_bytes(), rev])?;
            batch.rev = rev;
            let kv = KeyValue {
                key: key.clone(),
                value: value.clone(),
                create_revision: create_rev,
                mod_revision: rev,
            };
            batch.events.push(WatchEvent::Modified {
                current: kv.clone(),
                previous: KeyValue {
                    key: key.clone(),
                    value: Bytes::from(previous),
                    create_revision: create_rev,
                    mod_revision: have,
                },
            });
            Ok(Ok(Reply::Put(kv)))
        }
        Op::Delete { key, expect } => {
            let Some((mod_revision, create_revision, value)) = lookup(conn, key)? else {
                return Ok(Err(StorageError::NotFound { key: key.clone() }));
            };
            if let Some(want) = expect
                && *want != mod_revision
            {
                return Ok(Err(StorageError::Conflict {
                    key: key.clone(),
                    message: format!("revision is {mod_revision}, expected {want}"),
                }));
            }
            let rev = batch.rev + 1;
            conn.prepare_cached(
                "INSERT INTO kv_log (rev, key, create_rev, prev_rev, value, deleted) \
                 VALUES (?1, ?2, ?3, ?4, x'', 1)",
            )?
            .execute(params![rev, key.as_bytes(), create_revision, mod_revision])?;
            conn.prepare_cached("DELETE FROM kv_current WHERE key = ?1")?
                .execute([key.as_bytes()])?;
            batch.rev = rev;
            batch.live_keys -= 1;
            let deleted = Deleted {
                previous: KeyValue {
                    key: key.clone(),
                    value: Bytes::from(value),
                    create_revision,
                    mod_revision,
                },
                revision: rev,
            };
            batch.events.push(WatchEvent::Deleted {
                previous: deleted.previous.clone(),
                revision: rev,
            });
            Ok(Ok(Reply::Deleted(deleted)))
        }
        Op::Compact { revision } => {
            if *revision > batch.rev {
                return Ok(Err(StorageError::FutureRevision {
                    requested: *revision,
                    current: batch.rev,
                }));
            }
            batch.compacted = batch.compacted.max(*revision);
            Ok(Ok(Reply::Compacted))
        }
    }
}

/// `StorageError` is not `Clone` (it can carry an update function's error); the
/// writer only ever fails requests with these two kinds.
fn clone_error(err: &StorageError) -> StorageError {
    match err {
        StorageError::Unavailable(message) => StorageError::Unavailable(message.clone()),
        other => StorageError::Internal(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::StatementStatus;

    /// The writer's per-request key lookup (updates and deletes; a create claims its
    /// key instead) must be prepared once and reused: a plan SQLite re-prepares on
    /// every step costs the writer a tenth of its CPU.
    #[test]
    fn key_lookup_is_not_re_prepared_between_batches() {
        let dir = tempfile::tempdir().unwrap();
        let (conn, state) =
            crate::schema::open_writer(&dir.path().join("db"), Duration::from_secs(1)).unwrap();
        let mut rev = state.rev;
        for i in 0..20 {
            conn.execute_batch("BEGIN IMMEDIATE").unwrap();
            let mut batch = Batch {
                rev,
                compacted: state.compacted,
                live_keys: 0,
                results: Vec::new(),
                events: Vec::new(),
            };
            let key = format!("/registry/pods/default/p{i}");
            let put = |expect| Op::Put {
                key: key.clone(),
                value: Bytes::from_static(b"{}"),
                expect,
            };
            let Reply::Put(created) = apply(&conn, &mut batch, &put(Expect::Absent))
                .unwrap()
                .unwrap()
            else {
                panic!("a create answers with the written key");
            };
            let again = apply(&conn, &mut batch, &put(Expect::Absent)).unwrap();
            assert!(matches!(again, Err(StorageError::AlreadyExists { .. })));
            let updated = apply(
                &conn,
                &mut batch,
                &put(Expect::Revision(created.mod_revision)),
            )
            .unwrap();
            assert!(updated.is_ok());
            let stale = apply(
                &conn,
                &mut batch,
                &put(Expect::Revision(created.mod_revision)),
            )
            .unwrap();
            assert!(matches!(stale, Err(StorageError::Conflict { .. })));
            conn.execute_batch("COMMIT").unwrap();
            rev = batch.rev;
        }
        let lookup = conn.prepare_cached(crate::read::LATEST_ROW).unwrap();
        assert_eq!(lookup.get_status(StatementStatus::Run), 40);
        assert_eq!(lookup.get_status(StatementStatus::RePrepare), 0);
    }

    /// A create of a key that is live fails without writing; once the key is
    /// deleted, the create succeeds again and starts a new life (its own
    /// create revision), as in etcd.
    #[test]
    fn create_claims_only_a_key_that_is_not_live() {
        let dir = tempfile::tempdir().unwrap();
        let (conn, state) =
            crate::schema::open_writer(&dir.path().join("db"), Duration::from_secs(1)).unwrap();
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        let mut batch = Batch {
            rev: state.rev,
            compacted: state.compacted,
            live_keys: 0,
            results: Vec::new(),
            events: Vec::new(),
        };
        let create = Op::Put {
            key: "/registry/configmaps/default/a".into(),
            value: Bytes::from_static(b"{}"),
            expect: Expect::Absent,
        };
        let first = apply(&conn, &mut batch, &create).unwrap().unwrap();
        let Reply::Put(first) = first else { panic!() };
        assert_eq!(first.create_revision, first.mod_revision);
        let rev_after_first = batch.rev;
        assert!(matches!(
            apply(&conn, &mut batch, &create).unwrap(),
            Err(StorageError::AlreadyExists { .. })
        ));
        assert_eq!(
            batch.rev, rev_after_first,
            "a failed create takes no revision"
        );
        assert_eq!(batch.live_keys, 1);
        let delete = Op::Delete {
            key: "/registry/configmaps/default/a".into(),
            expect: None,
        };
        apply(&conn, &mut batch, &delete).unwrap().unwrap();
        assert_eq!(batch.live_keys, 0);
        let Reply::Put(second) = apply(&conn, &mut batch, &create).unwrap().unwrap() else {
            panic!()
        };
        assert!(second.create_revision > first.create_revision);
        assert_eq!(second.create_revision, second.mod_revision);
        assert_eq!(batch.live_keys, 1);
        let rows: i64 = conn
            .query_row("SELECT COUNT(*) FROM kv_log", [], |row| row.get(0))
            .unwrap();
        assert_eq!(rows, 3, "two lives and a tombstone");
        conn.execute_batch("COMMIT").unwrap();
    }
}
