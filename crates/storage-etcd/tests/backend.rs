//! What the conformance suite cannot see from one store: compaction recorded for every
//! process on the same etcd, the storage prefix and the hidden bookkeeping key, and
//! etcd-side cleanup of watches that are dropped or fall behind.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ferrokube_storage::{ListOptions, Storage, StorageError, WatchEvent};
use ferrokube_storage_etcd::testing::EtcdProcess;
use ferrokube_storage_etcd::{EtcdOptions, EtcdStorage};
use futures::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const WAIT: Duration = Duration::from_secs(20);

async fn etcd() -> EtcdProcess {
    EtcdProcess::start().await.unwrap_or_else(|e| panic!("{e}"))
}

async fn store(etcd: &EtcdProcess, options: EtcdOptions) -> Arc<EtcdStorage> {
    Arc::new(
        EtcdStorage::connect(&etcd.endpoints(), options)
            .await
            .unwrap(),
    )
}

fn v(s: &'static str) -> Bytes {
    Bytes::from_static(s.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_is_known_to_every_store_on_the_etcd() {
    let etcd = etcd().await;
    let a = store(&etcd, EtcdOptions::default()).await;
    let b = store(&etcd, EtcdOptions::default()).await;
    let r1 = a.create("/r/x", v("1")).await.unwrap();
    let r2 = a.create("/r/y", v("2")).await.unwrap();
    a.compact(r2).await.unwrap();

    assert_eq!(b.stats().await.unwrap().compacted_revision, r2);
    match b.watch("/r/", r1).await {
        Err(StorageError::Expired {
            requested,
            compacted,
        }) => assert_eq!((requested, compacted), (r1, r2)),
        Err(err) => panic!("expected Expired, got {err}"),
        Ok(_) => panic!("a watch from a compacted revision started"),
    }
    match b.get("/r/x", Some(r1)).await {
        Err(StorageError::Expired { compacted, .. }) => assert_eq!(compacted, r2),
        other => panic!("expected Expired, got {other:?}"),
    }
    // b compacting at or below what a recorded is a no-op, above the current an error.
    b.compact(r1).await.unwrap();
    let current = b.current_revision().await.unwrap();
    let err = b.compact(current + 1).await.unwrap_err();
    assert!(matches!(err, StorageError::FutureRevision { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_prefix_and_the_hidden_compaction_key() {
    let etcd = etcd().await;
    let registry = store(
        &etcd,
        EtcdOptions {
            prefix: "/registry".into(),
            ..EtcdOptions::default()
        },
    )
    .await;
    let raw = store(&etcd, EtcdOptions::default()).await;
    assert_eq!(registry.prefix(), "/registry");

    let mut everything = raw.watch("", 0).await.unwrap();
    let rev = registry.create("/pods/a", v("a")).await.unwrap();
    // Stored under the prefix, handed out without it.
    assert_eq!(
        raw.get("/registry/pods/a", None).await.unwrap().value,
        v("a")
    );
    assert_eq!(registry.get("/pods/a", None).await.unwrap().key, "/pods/a");
    assert!(raw.get("/pods/a", None).await.unwrap_err().is_not_found());

    // Compaction writes the bookkeeping key; no list, count or watch shows it.
    registry.compact(rev).await.unwrap();
    let after = registry.create("/pods/b", v("b")).await.unwrap();
    let keys = |list: ferrokube_storage::ListResult| -> Vec<String> {
        list.items.into_iter().map(|kv| kv.key).collect()
    };
    let all = raw.list("", &ListOptions::default()).await.unwrap();
    assert_eq!(keys(all), ["/registry/pods/a", "/registry/pods/b"]);
    let pods = registry
        .list("/pods/", &ListOptions::default())
        .await
        .unwrap();
    assert_eq!(keys(pods), ["/pods/a", "/pods/b"]);
    assert_eq!(raw.stats().await.unwrap().keys, 2);
    assert_eq!(registry.stats().await.unwrap().keys, 2);
    let mut seen = Vec::new();
    while seen.len() < 2 {
        match tokio::time::timeout(WAIT, everything.next()).await {
            Ok(Some(Ok(WatchEvent::Progress(_)))) => {}
            Ok(Some(Ok(event))) => seen.push((event.key().map(str::to_owned), event.revision())),
            other => panic!("watch of everything: {other:?}"),
        }
    }
    assert_eq!(
        seen,
        [
            (Some("/registry/pods/a".to_owned()), rev),
            (Some("/registry/pods/b".to_owned()), after)
        ]
    );
}

/// etcd's gauge of open watchers, from its metrics endpoint.
async fn etcd_watchers(etcd: &EtcdProcess) -> u64 {
    let addr = etcd.endpoint().trim_start_matches("http://").to_owned();
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut body = String::new();
    conn.read_to_string(&mut body).await.unwrap();
    body.lines()
        .find_map(|line| line.strip_prefix("etcd_debugging_mvcc_watcher_total "))
        .and_then(|n| n.trim().parse::<f64>().ok())
        .map(|n| n as u64)
        .expect("etcd reports etcd_debugging_mvcc_watcher_total")
}

async fn wait_for_watchers(etcd: &EtcdProcess, want: u64) {
    let deadline = Instant::now() + WAIT;
    loop {
        let have = etcd_watchers(etcd).await;
        if have == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{have} etcd watchers, want {want}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_and_fallen_behind_watches_are_cancelled_in_etcd() {
    let etcd = etcd().await;
    let s = store(
        &etcd,
        EtcdOptions {
            watch_buffer: 4,
            ..EtcdOptions::default()
        },
    )
    .await;
    let base = etcd_watchers(&etcd).await;
    let mut watches = Vec::new();
    for _ in 0..3 {
        watches.push(s.watch("/r/", 0).await.unwrap());
    }
    wait_for_watchers(&etcd, base + 3).await;
    drop(watches);
    wait_for_watchers(&etcd, base).await;

    // A watcher that never reads: ended (and its etcd watch cancelled) once 4 events
    // are buffered, while writes go on.
    let mut stalled = s.watch("/r/", 0).await.unwrap();
    wait_for_watchers(&etcd, base + 1).await;
    for i in 0..20 {
        s.create(&format!("/r/{i:02}"), v("x")).await.unwrap();
    }
    wait_for_watchers(&etcd, base).await;
    let mut events = 0;
    loop {
        match tokio::time::timeout(WAIT, stalled.next()).await.unwrap() {
            Some(Ok(WatchEvent::Progress(_))) => {}
            Some(Ok(_)) => events += 1,
            Some(Err(StorageError::Unavailable(why))) => {
                assert!(why.contains("fell behind"), "{why}");
                break;
            }
            other => panic!("stalled watch: {other:?}"),
        }
    }
    assert_eq!(events, 4);
    assert!(stalled.next().await.is_none());
}

/// Bad input gets an error, never a panic or a silent write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_input_is_an_error_not_a_panic() {
    use ferrokube_storage::{ContinueToken, Preconditions, RevisionMatch};
    let etcd = etcd().await;
    let s = store(&etcd, EtcdOptions::default()).await;
    let rev = s.create("/r/a", v("1")).await.unwrap();
    let invalid =
        |err: StorageError| assert!(matches!(err, StorageError::InvalidArgument(_)), "{err}");

    invalid(s.create("", v("x")).await.unwrap_err());
    invalid(s.get("/r/a", Some(0)).await.unwrap_err());
    invalid(s.get("/r/a", Some(-7)).await.unwrap_err());
    invalid(s.watch("/r/", -1).await.err().unwrap());
    let at = |revision| ListOptions {
        revision,
        ..ListOptions::default()
    };
    invalid(
        s.list("/r/", &at(RevisionMatch::Exact(-5)))
            .await
            .unwrap_err(),
    );
    // etcd refuses requests over its size limit (1.5 MiB by default).
    let huge = Bytes::from(vec![b'x'; 4 << 20]);
    invalid(s.create("/r/huge", huge).await.unwrap_err());

    // A token for a revision etcd has not reached yet.
    let future = ContinueToken {
        revision: rev + 100,
        start_key: "/r/a".into(),
    }
    .encode("/r/");
    let err = s
        .list(
            "/r/",
            &ListOptions {
                continue_token: Some(future),
                ..ListOptions::default()
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::FutureRevision { .. }), "{err}");

    // Limits past etcd's range, odd keys, compare-and-swap against "no revision".
    let list = s
        .list(
            "/r/",
            &ListOptions {
                limit: usize::MAX,
                ..ListOptions::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1);
    // A list far over gRPC's default 4 MiB message limit.
    let mib = Bytes::from(vec![b'm'; 1 << 20]);
    for i in 0..6 {
        s.create(&format!("/big/{i}"), mib.clone()).await.unwrap();
    }
    let big = s.list("/big/", &ListOptions::default()).await.unwrap();
    assert_eq!(big.items.len(), 6);
    s.create("/r/\u{0}nul/é", v("odd")).await.unwrap();
    assert_eq!(s.get("/r/\u{0}nul/é", None).await.unwrap().value, v("odd"));
    let err = s.compare_and_swap("/r/a", 0, v("2")).await.unwrap_err();
    assert!(err.is_conflict(), "{err}");
    let err = s.compare_and_swap("/r/none", 0, v("2")).await.unwrap_err();
    assert!(err.is_not_found(), "{err}");
    s.compact(-3).await.unwrap();
    let err = s
        .delete("/r/none", &Preconditions::revision(rev))
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "{err}");
    assert_eq!(s.get("/r/a", None).await.unwrap().value, v("1"));
}
