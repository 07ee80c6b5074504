//! etcd goes away and comes back under a live store: requests fail as unavailable
//! (no hang), a running watch ends with `Unavailable`, and once etcd is back the same
//! store reads and writes again.

use std::time::{Duration, Instant};

use bytes::Bytes;
use ferrokube_storage::{Preconditions, Storage, StorageError, WatchEvent, WatchStream};
use ferrokube_storage_etcd::testing::EtcdProcess;
use ferrokube_storage_etcd::{EtcdOptions, EtcdStorage};
use futures::StreamExt;

/// The bound on every wait in this file.
const WAIT: Duration = Duration::from_secs(30);

fn options() -> EtcdOptions {
    EtcdOptions {
        connect_timeout: Duration::from_secs(1),
        request_timeout: Duration::from_secs(5),
        ..EtcdOptions::default()
    }
}

async fn next_change(watch: &mut WatchStream) -> Option<Result<WatchEvent, StorageError>> {
    loop {
        let item = tokio::time::timeout(WAIT, watch.next())
            .await
            .expect("the watch neither delivered nor ended");
        if !matches!(item, Some(Ok(WatchEvent::Progress(_)))) {
            return item;
        }
    }
}

/// Retries `op` on `Unavailable` until it succeeds or `WAIT` passes.
async fn eventually<T, F, Fut>(what: &str, mut op: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, StorageError>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        match op().await {
            Ok(value) => return value,
            Err(StorageError::Unavailable(why)) if Instant::now() < deadline => {
                eprintln!("{what}: still unavailable: {why}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(err) => panic!("{what}: {err}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_ends_and_store_recovers_after_etcd_restart() {
    let mut etcd = EtcdProcess::start().await.unwrap_or_else(|e| panic!("{e}"));
    let store = EtcdStorage::connect(&etcd.endpoints(), options())
        .await
        .unwrap();
    let before = store
        .create("/r/a", Bytes::from_static(b"1"))
        .await
        .unwrap();
    let mut watch = store.watch("/r/", 0).await.unwrap();
    let rev = store
        .create("/r/b", Bytes::from_static(b"2"))
        .await
        .unwrap();
    let event = next_change(&mut watch).await.unwrap().unwrap();
    assert_eq!(event.revision(), rev);

    etcd.restart().await.unwrap_or_else(|e| panic!("{e}"));

    match next_change(&mut watch).await {
        Some(Err(StorageError::Unavailable(_))) => {}
        other => panic!("a watch broken by an etcd restart should end unavailable: {other:?}"),
    }
    assert!(watch.next().await.is_none(), "an error is the last item");

    // The same store works again: writes, reads of data from before, watches.
    let rev = eventually("create after restart", || {
        store.create("/r/c", Bytes::from_static(b"3"))
    })
    .await;
    assert!(rev > before);
    assert_eq!(
        store.get("/r/a", None).await.unwrap().create_revision,
        before
    );
    let mut watch = store.watch("/r/", rev).await.unwrap();
    let deleted = store
        .delete("/r/c", &Preconditions::default())
        .await
        .unwrap();
    let event = next_change(&mut watch).await.unwrap().unwrap();
    assert!(matches!(event, WatchEvent::Deleted { .. }), "{event:?}");
    assert_eq!(event.revision(), deleted.revision);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_fail_unavailable_while_etcd_is_down() {
    let mut etcd = EtcdProcess::start().await.unwrap_or_else(|e| panic!("{e}"));
    let store = EtcdStorage::connect(&etcd.endpoints(), options())
        .await
        .unwrap();
    store
        .create("/r/a", Bytes::from_static(b"1"))
        .await
        .unwrap();
    etcd.stop();

    let started = Instant::now();
    let err = tokio::time::timeout(WAIT, store.get("/r/a", None))
        .await
        .expect("a read while etcd is down hangs")
        .unwrap_err();
    assert!(matches!(err, StorageError::Unavailable(_)), "{err}");
    let err = tokio::time::timeout(WAIT, store.create("/r/b", Bytes::new()))
        .await
        .expect("a write while etcd is down hangs")
        .unwrap_err();
    assert!(matches!(err, StorageError::Unavailable(_)), "{err}");
    let err = tokio::time::timeout(WAIT, store.watch("/r/", 0))
        .await
        .expect("a watch while etcd is down hangs")
        .err()
        .expect("a watch while etcd is down");
    assert!(matches!(err, StorageError::Unavailable(_)), "{err}");
    assert!(started.elapsed() < WAIT);

    etcd.restart().await.unwrap_or_else(|e| panic!("{e}"));
    let kv = eventually("read after restart", || store.get("/r/a", None)).await;
    assert_eq!(kv.value, Bytes::from_static(b"1"));
    eventually("write after restart", || {
        store.create("/r/b", Bytes::from_static(b"2"))
    })
    .await;
}

#[tokio::test]
async fn connect_to_nothing_is_unavailable() {
    // A port nobody listens on: bind one and let it go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let endpoints = vec![format!("http://127.0.0.1:{port}")];
    let err = tokio::time::timeout(WAIT, EtcdStorage::connect(&endpoints, options()))
        .await
        .expect("connect to a dead endpoint hangs")
        .unwrap_err();
    assert!(matches!(err, StorageError::Unavailable(_)), "{err}");
    let err = EtcdStorage::connect(&[], options()).await.unwrap_err();
    assert!(matches!(err, StorageError::InvalidArgument(_)), "{err}");
}
