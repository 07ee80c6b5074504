//! Reads: a small pool of read connections, each read one consistent WAL snapshot
//! (a deferred transaction that reads `meta` first), never touching the writer.

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use ferrokube_storage::{
    ContinueToken, KeyValue, ListOptions, ListResult, Result, Revision, RevisionMatch,
    StorageError, WatchEvent,
};
use parking_lot::Mutex;
use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior};

use crate::schema::open_reader;
use crate::util::{KeyRange, key_from_blob, sql_error};

/// Idle read connections, opened on demand; at most `max_idle` are kept.
pub(crate) struct ReadPool {
    path: PathBuf,
    busy_timeout: Duration,
    max_idle: usize,
    idle: Mutex<Vec<Connection>>,
}

impl ReadPool {
    pub fn new(path: PathBuf, busy_timeout: Duration, max_idle: usize) -> ReadPool {
        ReadPool {
            path,
            busy_timeout,
            max_idle: max_idle.max(1),
            idle: Mutex::new(Vec::new()),
        }
    }

    /// Runs `read` in one read transaction (one snapshot) on a pooled connection.
    /// Blocking: call it from `spawn_blocking`.
    pub fn read<T>(&self, read: impl FnOnce(&Transaction<'_>) -> Result<T>) -> Result<T> {
        let popped = self.idle.lock().pop();
        let mut conn = match popped {
            Some(conn) => conn,
            None => open_reader(&self.path, self.busy_timeout).map_err(sql_error)?,
        };
        let result = (|| {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Deferred)
                .map_err(sql_error)?;
            let out = read(&tx)?;
            tx.finish().map_err(sql_error)?;
            Ok(out)
        })();
        let mut idle = self.idle.lock();
        if idle.len() < self.max_idle {
            idle.push(conn);
        }
        result
    }
}

/// The revisions a snapshot sees.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Snapshot {
    pub current: Revision,
    pub compacted: Revision,
}

impl Snapshot {
    pub fn load(tx: &Transaction<'_>) -> Result<Snapshot> {
        // The newest log row is the current revision unless compaction removed it;
        // then `meta.rev` has it (see the schema module).
        tx.prepare_cached(
            "SELECT MAX(rev, COALESCE((SELECT MAX(rev) FROM kv_log), 0)), compacted \
             FROM meta WHERE id = 0",
        )
        .and_then(|mut st| {
            st.query_row([], |row| {
                Ok(Snapshot {
                    current: row.get(0)?,
                    compacted: row.get(1)?,
                })
            })
        })
        .map_err(sql_error)
    }

    /// Checks that `revision` can be read here: retained and not in the future.
    pub fn check(&self, revision: Revision) -> Result<()> {
        if revision > self.current {
            return Err(StorageError::FutureRevision {
                requested: revision,
                current: self.current,
            });
        }
        if revision < self.compacted {
            return Err(StorageError::Expired {
                requested: revision,
                compacted: self.compacted,
            });
        }
        Ok(())
    }
}

/// A key's live row: (mod_revision, create_revision, value). A subquery, not a join:
/// this SQLite build re-prepares the equivalent `kv_current JOIN kv_log ... WHERE
/// c.key = ?1` on every step (its plan is marked as depending on the bound key),
/// which cost the writer about a tenth of its CPU.
pub(crate) const LATEST_ROW: &str = "SELECT rev, create_rev, value FROM kv_log \
     WHERE rev = (SELECT rev FROM kv_current WHERE key = ?1)";

/// The newest value of `key`, if it is live.
pub(crate) fn latest(tx: &Transaction<'_>, key: &str) -> Result<Option<KeyValue>> {
    let mut st = tx.prepare_cached(LATEST_ROW).map_err(sql_error)?;
    st.query_row([key.as_bytes()], |row| {
        Ok(KeyValue {
            key: key.to_string(),
            mod_revision: row.get(0)?,
            create_revision: row.get(1)?,
            value: Bytes::from(row.get::<_, Vec<u8>>(2)?),
        })
    })
    .optional()
    .map_err(sql_error)
}

/// The value `key` had at `revision` (already checked against the snapshot).
pub(crate) fn at_revision(
    tx: &Transaction<'_>,
    key: &str,
    revision: Revision,
) -> Result<Option<KeyValue>> {
    let mut st = tx
        .prepare_cached(
            "SELECT rev, create_rev, value, deleted FROM kv_log \
             WHERE key = ?1 AND rev <= ?2 ORDER BY rev DESC LIMIT 1",
        )
        .map_err(sql_error)?;
    let row = st
        .query_row(rusqlite::params![key.as_bytes(), revision], |row| {
            Ok((
                row.get::<_, Revision>(0)?,
                row.get::<_, Revision>(1)?,
                row.get::<_, Vec<u8>>(2)?,
                row.get::<_, bool>(3)?,
            ))
        })
        .optional()
        .map_err(sql_error)?;
    Ok(match row {
        Some((rev, create_rev, value, false)) => Some(KeyValue {
            key: key.to_string(),
            value: Bytes::from(value),
            create_revision: create_rev,
            mod_revision: rev,
        }),
        _ => None,
    })
}

/// `get`: latest (`None`, or a revision <= 0) or at a retained revision.
pub(crate) fn get(tx: &Transaction<'_>, key: &str, revision: Option<Revision>) -> Result<KeyValue> {
    let found = match revision {
        Some(revision) if revision > 0 => {
            Snapshot::load(tx)?.check(revision)?;
            at_revision(tx, key, revision)?
        }
        _ => latest(tx, key)?,
    };
    found.ok_or_else(|| StorageError::NotFound {
        key: key.to_string(),
    })
}

const LIST_LATEST: &str = "SELECT l.key, l.rev, l.create_rev, l.value FROM kv_current c \
     JOIN kv_log l ON l.rev = c.rev WHERE c.key >= ?1 AND c.key < ?2 ORDER BY c.key LIMIT ?3";
const COUNT_LATEST: &str = "SELECT COUNT(*) FROM kv_current WHERE key >= ?1 AND key < ?2";
const LIST_AT: &str = "SELECT l.key, l.rev, l.create_rev, l.value FROM \
     (SELECT key AS k, MAX(rev) AS r FROM kv_log \
      WHERE key >= ?1 AND key < ?2 AND rev <= ?4 GROUP BY key) m \
     JOIN kv_log l ON l.rev = m.r WHERE l.deleted = 0 ORDER BY m.k LIMIT ?3";
const COUNT_AT: &str = "SELECT COUNT(*) FROM \
     (SELECT key AS k, MAX(rev) AS r FROM kv_log \
      WHERE key >= ?1 AND key < ?2 AND rev <= ?3 GROUP BY key) m \
     JOIN kv_log l ON l.rev = m.r WHERE l.deleted = 0";

/// `list`: one page of the keys under `prefix`, at one revision for all pages.
pub(crate) fn list(
    tx: &Transaction<'_>,
    prefix: &str,
    options: &ListOptions,
) -> Result<ListResult> {
    let snapshot = Snapshot::load(tx)?;
    let whole = KeyRange::prefix(prefix);
    let (revision, range) = match &options.continue_token {
        Some(token) => {
            let token = ContinueToken::decode(token, prefix)?;
            snapshot.check(token.revision)?;
            (token.revision, whole.starting_at(&token.start_key))
        }
        None => {
            let revision = match options.revision {
                RevisionMatch::Latest => snapshot.current,
                RevisionMatch::Exact(revision) if revision <= 0 => snapshot.current,
                RevisionMatch::Exact(revision) => {
                    snapshot.check(revision)?;
                    revision
                }
                RevisionMatch::NotOlderThan(revision) => {
                    if revision > snapshot.current {
                        return Err(StorageError::FutureRevision {
                            requested: revision,
                            current: snapshot.current,
                        });
                    }
                    snapshot.current
                }
            };
            (revision, whole)
        }
    };
    let latest = revision == snapshot.current;
    // One row more than asked tells whether another page follows.
    let fetch: i64 = match options.limit {
        0 => -1,
        limit => i64::try_from(limit).map_or(i64::MAX, |limit| limit.saturating_add(1)),
    };
    let mut items = Vec::new();
    {
        let mut st = tx
            .prepare_cached(if latest { LIST_LATEST } else { LIST_AT })
            .map_err(sql_error)?;
        let map = |row: &rusqlite::Row<'_>| {
            Ok((
                row.get::<_, Vec<u8>>(0)?,
                row.get::<_, Revision>(1)?,
                row.get::<_, Revision>(2)?,
                row.get::<_, Vec<u8>>(3)?,
            ))
        };
        let rows = if latest {
            st.query_map(rusqlite::params![range.start, range.end, fetch], map)
        } else {
            st.query_map(
                rusqlite::params![range.start, range.end, fetch, revision],
                map,
            )
        }
        .map_err(sql_error)?;
        for row in rows {
            let (key, mod_revision, create_revision, value) = row.map_err(sql_error)?;
            items.push(KeyValue {
                key: key_from_blob(key)?,
                value: Bytes::from(value),
                create_revision,
                mod_revision,
            });
        }
    }
    let (continue_token, remaining) = if options.limit > 0 && items.len() > options.limit {
        let next = items.truncate_to(options.limit);
        let rest = range.starting_at(&next);
        let remaining: i64 = if latest {
            tx.prepare_cached(COUNT_LATEST).and_then(|mut st| {
                st.query_row(rusqlite::params![rest.start, rest.end], |row| row.get(0))
            })
        } else {
            tx.prepare_cached(COUNT_AT).and_then(|mut st| {
                st.query_row(rusqlite::params![rest.start, rest.end, revision], |row| {
                    row.get(0)
                })
            })
        }
        .map_err(sql_error)?;
        let token = ContinueToken {
            revision,
            start_key: next,
        };
        (
            Some(token.encode(prefix)),
            u64::try_from(remaining).unwrap_or(0),
        )
    } else {
        (None, 0)
    };
    Ok(ListResult {
        items,
        revision,
        continue_token,
        remaining,
    })
}

trait TruncateTo {
    /// Cuts the list to `len` items and returns the key of the first item cut.
    fn truncate_to(&mut self, len: usize) -> String;
}

impl TruncateTo for Vec<KeyValue> {
    fn truncate_to(&mut self, len: usize) -> String {
        let next = self[len].key.clone();
        self.truncate(len);
        next
    }
}

/// How many history rows one replay read returns.
pub(crate) const REPLAY_PAGE: usize = 512;

/// Events under `range` with revision `> after`, in revision order, at most
/// [`REPLAY_PAGE`]; `Expired` once compaction passed `after`.
pub(crate) fn replay_page(
    tx: &Transaction<'_>,
    range: &KeyRange,
    after: Revision,
) -> Result<Vec<WatchEvent>> {
    let snapshot = Snapshot::load(tx)?;
    if after < snapshot.compacted {
        return Err(StorageError::Expired {
            requested: after,
            compacted: snapshot.compacted,
        });
    }
    let mut st = tx
        .prepare_cached(
            "SELECT l.rev, l.key, l.create_rev, l.value, l.deleted, \
                    p.rev, p.create_rev, p.value \
             FROM kv_log l LEFT JOIN kv_log p ON p.rev = l.prev_rev AND l.prev_rev > 0 \
             WHERE l.rev > ?1 AND l.key >= ?2 AND l.key < ?3 ORDER BY l.rev LIMIT ?4",
        )
        .map_err(sql_error)?;
    let rows = st
        .query_map(
            rusqlite::params![after, range.start, range.end, REPLAY_PAGE as i64],
            |row| {
                Ok((
                    row.get::<_, Revision>(0)?,
                    row.get::<_, Vec<u8>>(1)?,
                    row.get::<_, Revision>(2)?,
                    row.get::<_, Vec<u8>>(3)?,
                    row.get::<_, bool>(4)?,
                    row.get::<_, Option<Revision>>(5)?,
                    row.get::<_, Option<Revision>>(6)?,
                    row.get::<_, Option<Vec<u8>>>(7)?,
                ))
            },
        )
        .map_err(sql_error)?;
    let mut events = Vec::new();
    for row in rows {
        let (rev, key, create_rev, value, deleted, prev_rev, prev_create, prev_value) =
            row.map_err(sql_error)?;
        let key = key_from_blob(key)?;
        let previous = match (prev_rev, prev_create, prev_value) {
            (Some(mod_revision), Some(create_revision), Some(value)) => Some(KeyValue {
                key: key.clone(),
                value: Bytes::from(value),
                create_revision,
                mod_revision,
            }),
            _ => None,
        };
        let current = KeyValue {
            key,
            value: Bytes::from(value),
            create_revision: create_rev,
            mod_revision: rev,
        };
        let event = match (deleted, previous) {
            (true, Some(previous)) => WatchEvent::Deleted {
                previous,
                revision: rev,
            },
            (false, _) if create_rev == rev => WatchEvent::Added(current),
            (false, Some(previous)) => WatchEvent::Modified { current, previous },
            // The previous value is gone: compaction ran past this point meanwhile.
            _ => {
                return Err(StorageError::Expired {
                    requested: after,
                    compacted: snapshot.compacted.max(after + 1),
                });
            }
        };
        events.push(event);
    }
    Ok(events)
}
