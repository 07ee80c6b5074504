//! Every acknowledged write survives a `kill -9`, and revisions never repeat.
//!
//! The test binary runs twice: as the parent (the test), and re-executed as the child
//! (`FERROKUBE_DURABILITY_CHILD=<db path>`), which writes as fast as it can with
//! several concurrent writers and prints `<revision> <key>` for each acknowledged
//! write. The parent kills the child with SIGKILL mid-stream, reopens the database
//! and checks every acknowledged write. (`harness = false`: this file's `main`.)

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ferrokube_storage::{Preconditions, Revision, Storage, Update};
use ferrokube_storage_sqlite::{SqliteOptions, SqliteStorage};

const CHILD_ENV: &str = "FERROKUBE_DURABILITY_CHILD";
const WRITERS: usize = 8;
const TEST_NAME: &str = "acknowledged_writes_survive_kill_9";

fn value_for(key: &str) -> Bytes {
    Bytes::from(format!("value of {key}"))
}

fn main() {
    match std::env::var_os(CHILD_ENV) {
        Some(path) => child(Path::new(&path)),
        None => {
            // Behave like the libtest harness for `--list` and name filters.
            let args: Vec<String> = std::env::args().skip(1).collect();
            if args.iter().any(|arg| arg == "--list") {
                println!("{TEST_NAME}: test");
                return;
            }
            let filters: Vec<&String> = args.iter().filter(|arg| !arg.starts_with('-')).collect();
            if !filters.is_empty() && !filters.iter().any(|f| TEST_NAME.contains(f.as_str())) {
                println!("running 0 tests (filtered out: {TEST_NAME})");
                return;
            }
            parent();
            println!("test {TEST_NAME} ... ok");
        }
    }
}

/// Writes until killed: creates, and instead of creating key 9 of every 10 it deletes
/// key 8 (so the newest revisions are sometimes deletions); prints each acknowledged
/// write.
fn child(path: &Path) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let store = Arc::new(SqliteStorage::open(path, SqliteOptions::default()).expect("open"));
        let out = Arc::new(std::sync::Mutex::new(std::io::stdout()));
        let mut tasks = Vec::new();
        for writer in 0..WRITERS {
            let store = store.clone();
            let out = out.clone();
            tasks.push(tokio::spawn(async move {
                // Bounded in case nobody kills us.
                let deadline = Instant::now() + Duration::from_secs(30);
                let mut i = 0u64;
                while Instant::now() < deadline {
                    let key = format!("/d/{writer}/{i:08}");
                    let line = if i % 10 == 9 {
                        let prev = format!("/d/{writer}/{:08}", i - 1);
                        let deleted = store.delete(&prev, &Preconditions::default()).await;
                        let deleted = deleted.expect("delete");
                        format!("D {} {prev}\n", deleted.revision)
                    } else {
                        let kv = store
                            .guaranteed_update(&key, &Preconditions::default(), &mut |_| {
                                Ok(Update::Write(value_for(&key)))
                            })
                            .await
                            .expect("create");
                        format!("C {} {key}\n", kv.mod_revision)
                    };
                    let mut out = out.lock().expect("stdout");
                    out.write_all(line.as_bytes()).expect("write");
                    out.flush().expect("flush");
                    i += 1;
                }
            }));
        }
        for task in tasks {
            task.await.expect("writer");
        }
    });
}

fn parent() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("store.sqlite");
    let mut child = Command::new(std::env::current_exe().expect("current exe"))
        .env(CHILD_ENV, &db)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn child");
    let stdout = child.stdout.take().expect("child stdout");
    let (lines_tx, lines_rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            match line {
                Ok(line) => {
                    if lines_tx.send(line).is_err() {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
    });
    // Let it write for a while, then kill it mid-stream.
    let started = Instant::now();
    let mut acked: Vec<String> = Vec::new();
    while started.elapsed() < Duration::from_millis(1500) {
        match lines_rx.recv_timeout(Duration::from_millis(100)) {
            Ok(line) => acked.push(line),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                panic!("child exited early: {:?}", child.wait())
            }
        }
    }
    child.kill().expect("SIGKILL the child");
    let status = child.wait().expect("wait for child");
    assert!(!status.success(), "child was not killed: {status}");
    // Lines already in the pipe were acknowledged before the kill, too.
    reader.join().expect("reader thread");
    acked.extend(lines_rx.try_iter());
    assert!(
        acked.len() > 100,
        "only {} writes acknowledged in 1.5 s",
        acked.len()
    );

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let store = SqliteStorage::open(&db, SqliteOptions::default()).expect("reopen");
        let mut max_acked: Revision = 0;
        let mut deleted = std::collections::HashSet::new();
        let mut created = Vec::new();
        for line in &acked {
            // A line cut short by the kill has no key yet; it may be ignored.
            let mut parts = line.splitn(3, ' ');
            let (Some(kind), Some(rev), Some(key)) = (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let Ok(rev) = rev.parse::<Revision>() else {
                continue;
            };
            max_acked = max_acked.max(rev);
            match kind {
                "C" => created.push((rev, key.to_string())),
                "D" => {
                    deleted.insert(key.to_string());
                }
                other => panic!("bad line kind {other:?} in {line:?}"),
            }
        }
        let current = store.current_revision().await.expect("current revision");
        assert!(
            current >= max_acked,
            "current revision {current} below acknowledged {max_acked}"
        );
        for (rev, key) in &created {
            // The child deletes key 8 of every 10 right after creating key 9... of
            // which the acknowledgement may have been cut off by the kill.
            let may_be_deleted = key.ends_with('8');
            let live = store.get(key, None).await;
            if deleted.contains(key)
                || (may_be_deleted && live.as_ref().is_err_and(|err| err.is_not_found()))
            {
                let err = store.get(key, None).await.expect_err("deleted key");
                assert!(err.is_not_found(), "{key}: {err}");
                // Its creation is still in the (uncompacted) history.
                let kv = store.get(key, Some(*rev)).await.expect("at creation");
                assert_eq!(kv.mod_revision, *rev);
                assert_eq!(kv.value, value_for(key), "{key}");
            } else {
                let kv =
                    live.unwrap_or_else(|err| panic!("acknowledged {key} at {rev} lost: {err}"));
                assert_eq!(kv.mod_revision, *rev, "{key}");
                assert_eq!(kv.value, value_for(key), "{key}");
            }
        }
        // Compact everything (so the newest rows may be gone), reopen, write again.
        store.compact(current).await.expect("compact");
        drop(store);
        let store = SqliteStorage::open(&db, SqliteOptions::default()).expect("reopen again");
        let rev = store
            .create("/d/after", Bytes::from_static(b"x"))
            .await
            .expect("create after restart");
        assert!(
            rev > current && rev > max_acked,
            "revision {rev} reused (current was {current}, acknowledged up to {max_acked})"
        );
        eprintln!(
            "durability: {} acknowledged writes checked, revisions up to {max_acked}",
            acked.len()
        );
    });
}
