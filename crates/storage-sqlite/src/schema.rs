//! The on-disk schema and how connections are opened.
//!
//! ```text
//! kv_log      one row per write, the MVCC history:
//!             rev (INTEGER PRIMARY KEY, the global revision), key (BLOB), create_rev,
//!             prev_rev (the key's previous row, 0 for a creation), value (BLOB),
//!             deleted (1 for a tombstone; its prev_rev is the deleted value's row).
//!             Index (key, rev): point reads and lists at any retained revision.
//! kv_current  live keys only: key -> rev of its newest kv_log row (latest reads).
//! meta        one row: rev (current revision), compacted (compacted revision),
//!             purged (how far compaction has removed history; purged <= compacted).
//! ```
//!
//! Like etcd, an empty store is at revision 1 and its first write gets revision 2, so
//! "watch from the revision the store had when I started" is never 0 ("from now").
//!
//! The current revision is the larger of `meta.rev` and the newest `kv_log` row.
//! Only compaction removes rows, and every compaction transaction (and the batch that
//! records a compaction) writes the current revision to `meta.rev` first, so
//! revisions never repeat after a restart even when the newest rows were deleted and
//! compacted away, while ordinary write batches skip the extra page write.

use std::path::Path;
use std::time::Duration;

use ferrokube_storage::{Revision, StorageError};
use rusqlite::{Connection, OpenFlags};

use crate::util::sql_error;

const SCHEMA_VERSION: i64 = 1;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS kv_log (
    rev        INTEGER PRIMARY KEY,
    key        BLOB    NOT NULL,
    create_rev INTEGER NOT NULL,
    prev_rev   INTEGER NOT NULL,
    value      BLOB    NOT NULL,
    deleted    INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS kv_log_key_rev ON kv_log (key, rev);
CREATE TABLE IF NOT EXISTS kv_current (
    key BLOB    PRIMARY KEY,
    rev INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (
    id        INTEGER PRIMARY KEY CHECK (id = 0),
    rev       INTEGER NOT NULL,
    compacted INTEGER NOT NULL,
    purged    INTEGER NOT NULL
);
INSERT OR IGNORE INTO meta (id, rev, compacted, purged) VALUES (0, 1, 0, 0);
";

/// What the writer needs to resume where the last process stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Persisted {
    pub rev: Revision,
    pub compacted: Revision,
    pub purged: Revision,
    pub live_keys: i64,
}

fn common_pragmas(conn: &Connection, busy_timeout: Duration) -> rusqlite::Result<()> {
    conn.busy_timeout(busy_timeout)?;
    conn.set_prepared_statement_cache_capacity(64);
    Ok(())
}

/// Opens (creating if needed) the database with the write connection: WAL, every
/// commit synced (`synchronous=FULL`; the workspace builds SQLite to sync with
/// `fdatasync`, see `.cargo/config.toml`), schema in place. Returns the persisted state.
pub(crate) fn open_writer(
    path: &Path,
    busy_timeout: Duration,
) -> Result<(Connection, Persisted), StorageError> {
    open_writer_sql(path, busy_timeout).map_err(sql_error)?
}

fn open_writer_sql(
    path: &Path,
    busy_timeout: Duration,
) -> rusqlite::Result<Result<(Connection, Persisted), StorageError>> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    common_pragmas(&conn, busy_timeout)?;
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Ok(Err(StorageError::Internal(format!(
            "cannot switch {} to WAL mode (got {mode})",
            path.display()
        ))));
    }
    conn.pragma_update(None, "synchronous", "FULL")?;
    // Keep the WAL from growing without bound: truncate it to this size whenever it
    // restarts after a checkpoint.
    conn.pragma_update(None, "journal_size_limit", 16 * 1024 * 1024)?;
    conn.pragma_update(None, "wal_autocheckpoint", 1000)?;
    let version: i64 = conn.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    if version > SCHEMA_VERSION {
        return Ok(Err(StorageError::Internal(format!(
            "database schema version {version} is newer than this build ({SCHEMA_VERSION})"
        ))));
    }
    conn.execute_batch(&format!(
        "BEGIN IMMEDIATE; {SCHEMA} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
    ))?;
    let (rev, compacted, purged): (Revision, Revision, Revision) = conn.query_row(
        "SELECT rev, compacted, purged FROM meta WHERE id = 0",
        [],
        |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
    )?;
    // Belt and braces: never hand out a revision at or below one already in the log.
    let max_logged: Revision =
        conn.query_row("SELECT COALESCE(MAX(rev), 0) FROM kv_log", [], |row| {
            row.get(0)
        })?;
    let live_keys: i64 = conn.query_row("SELECT COUNT(*) FROM kv_current", [], |row| row.get(0))?;
    Ok(Ok((
        conn,
        Persisted {
            rev: rev.max(max_logged),
            compacted,
            purged: purged.min(compacted),
            live_keys,
        },
    )))
}

/// A read connection. WAL lets it read while the writer writes; it never writes.
pub(crate) fn open_reader(path: &Path, busy_timeout: Duration) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    common_pragmas(&conn, busy_timeout)?;
    conn.pragma_update(None, "query_only", true)?;
    Ok(conn)
}
