//! The raw SQLite baseline of the storage issue, shared by the benchmark drivers
//! (bench-storage, and bench-apiserver's reference row): what SQLite itself does with
//! the store's durability and no store around it. A benchmark helper, not a layer of
//! the system: nothing outside `hack/` may depend on it.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;

/// Inserts/s of raw rusqlite into a fresh WAL database at `path` with the store's
/// durability (`synchronous=FULL`: one commit, and so one sync, per insert): `creates`
/// rows of `value` under distinct keys, spread over `writers` threads with a
/// connection each.
pub fn raw_sqlite_inserts(
    path: &Path,
    writers: usize,
    creates: usize,
    value: &[u8],
) -> Result<f64> {
    {
        let conn = rusqlite::Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.execute_batch("CREATE TABLE kv (key TEXT PRIMARY KEY, value BLOB NOT NULL)")?;
    }
    let writers = writers.max(1);
    let per_writer = creates / writers;
    let start = Instant::now();
    std::thread::scope(|scope| -> Result<()> {
        let handles: Vec<_> = (0..writers)
            .map(|w| {
                scope.spawn(move || -> Result<()> {
                    let conn = rusqlite::Connection::open(path)?;
                    conn.pragma_update(None, "synchronous", "FULL")?;
                    conn.busy_timeout(Duration::from_secs(30))?;
                    let mut insert = conn.prepare("INSERT INTO kv (key, value) VALUES (?1, ?2)")?;
                    for i in 0..per_writer {
                        insert.execute((format!("/bench/raw/{w}/{i}"), value))?;
                    }
                    Ok(())
                })
            })
            .collect();
        for handle in handles {
            handle.join().expect("raw writer panicked")?;
        }
        Ok(())
    })?;
    Ok((per_writer * writers) as f64 / start.elapsed().as_secs_f64())
}
