//! The storage conformance suite: the contract of [`Storage`] as tests every backend
//! must pass. A backend runs it with
//!
//! ```text
//! async fn new_store() -> ferrokube_storage::conformance::TestStore { ... }
//! ferrokube_storage::storage_conformance_tests!(new_store);
//! ```
//!
//! which expands to one `#[tokio::test]` per case, each on a fresh, empty store.
//! Every loop here is bounded in count and time.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;

use crate::*;

/// A fresh, empty store for one test case, plus whatever keeps it alive (a temp dir,
/// a child etcd process), dropped after the case.
pub struct TestStore {
    pub storage: Arc<dyn Storage>,
    pub guard: Box<dyn std::any::Any + Send>,
}

/// How long any single wait in the suite may take before the case fails.
const WAIT: Duration = Duration::from_secs(20);

#[macro_export]
macro_rules! storage_conformance_tests {
    ($factory:path) => {
        $crate::storage_conformance_tests!(@cases $factory;
            create_then_get,
            create_existing_is_already_exists,
            get_missing_is_not_found,
            revisions_strictly_increase,
            get_at_old_revision,
            list_prefix_in_key_order,
            list_limit_of_any_size_is_one_page,
            list_pagination_at_fixed_revision_while_writing,
            list_exact_and_not_older_than,
            list_bad_continue_token_is_invalid,
            list_after_compaction_is_expired,
            guaranteed_update_creates_updates_and_keeps,
            guaranteed_update_abort_is_returned,
            guaranteed_update_preconditions,
            concurrent_guaranteed_updates_lose_nothing,
            compare_and_swap_conflict,
            delete_returns_previous_and_checks_preconditions,
            delete_missing_is_not_found,
            watch_from_every_retained_revision_replays_later_events,
            watch_from_now_sees_new_events_only,
            watch_prefix_isolation,
            watch_after_compaction_is_expired,
            compact_bounds,
            slow_watcher_does_not_stall_writers,
            stats_report_keys_and_revisions
        );
    };
    (@cases $factory:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                let store: $crate::conformance::TestStore = $factory().await;
                $crate::conformance::$case(store.storage.clone()).await;
                drop(store);
            }
        )*
    };
}

fn bytes(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn object(uid: &str, n: i64) -> Bytes {
    Bytes::from(format!(r#"{{"metadata":{{"uid":"{uid}"}},"n":{n}}}"#).into_bytes())
}

async fn next_event(watch: &mut WatchStream) -> WatchEvent {
    loop {
        let item = tokio::time::timeout(WAIT, watch.next())
            .await
            .expect("timed out waiting for a watch event")
            .expect("watch ended early")
            .expect("watch failed");
        if !matches!(item, WatchEvent::Progress(_)) {
            return item;
        }
    }
}

pub async fn create_then_get(s: Arc<dyn Storage>) {
    assert_eq!(
        s.current_revision().await.unwrap(),
        1,
        "a fresh store is at revision 1"
    );
    let rev = s.create("/r/a", bytes("one")).await.unwrap();
    assert_eq!(rev, 2);
    let kv = s.get("/r/a", None).await.unwrap();
    assert_eq!(kv.key, "/r/a");
    assert_eq!(kv.value, bytes("one"));
    assert_eq!(kv.mod_revision, rev);
    assert_eq!(kv.create_revision, rev);
    assert_eq!(s.current_revision().await.unwrap(), rev);
}

pub async fn create_existing_is_already_exists(s: Arc<dyn Storage>) {
    s.create("/r/a", bytes("one")).await.unwrap();
    let err = s.create("/r/a", bytes("two")).await.unwrap_err();
    assert!(matches!(err, StorageError::AlreadyExists { .. }), "{err}");
    assert_eq!(s.get("/r/a", None).await.unwrap().value, bytes("one"));
}

pub async fn get_missing_is_not_found(s: Arc<dyn Storage>) {
    let err = s.get("/r/missing", None).await.unwrap_err();
    assert!(err.is_not_found(), "{err}");
    let rev = s.create("/r/a", bytes("x")).await.unwrap();
    s.delete("/r/a", &Preconditions::default()).await.unwrap();
    assert!(s.get("/r/a", None).await.unwrap_err().is_not_found());
    // ...but it is there at the revision it was created.
    assert_eq!(s.get("/r/a", Some(rev)).await.unwrap().value, bytes("x"));
}

pub async fn revisions_strictly_increase(s: Arc<dyn Storage>) {
    let mut last = s.current_revision().await.unwrap();
    for i in 0..20 {
        let key = format!("/r/k{}", i % 5);
        let rev = if i < 5 {
            s.create(&key, bytes("v")).await.unwrap()
        } else if i < 15 {
            s.guaranteed_update(&key, &Preconditions::default(), &mut |_| {
                Ok(Update::Write(Bytes::from(format!("v{i}"))))
            })
            .await
            .unwrap()
            .mod_revision
        } else {
            s.delete(&key, &Preconditions::default())
                .await
                .unwrap()
                .revision
        };
        assert!(rev > last, "revision {rev} after {last}");
        last = rev;
    }
    assert_eq!(s.current_revision().await.unwrap(), last);
}

pub async fn get_at_old_revision(s: Arc<dyn Storage>) {
    let r1 = s.create("/r/a", bytes("v1")).await.unwrap();
    let r2 = s
        .compare_and_swap("/r/a", r1, bytes("v2"))
        .await
        .unwrap()
        .mod_revision;
    assert_eq!(s.get("/r/a", Some(r1)).await.unwrap().value, bytes("v1"));
    let now = s.get("/r/a", Some(r2)).await.unwrap();
    assert_eq!((now.value.clone(), now.create_revision), (bytes("v2"), r1));
    let err = s.get("/r/a", Some(r2 + 100)).await.unwrap_err();
    assert!(matches!(err, StorageError::FutureRevision { .. }), "{err}");
    s.compact(r2).await.unwrap();
    let err = s.get("/r/a", Some(r1)).await.unwrap_err();
    assert!(err.is_expired(), "{err}");
    assert_eq!(s.get("/r/a", Some(r2)).await.unwrap().value, bytes("v2"));
}

pub async fn list_prefix_in_key_order(s: Arc<dyn Storage>) {
    for key in [
        "/r/pods/b",
        "/r/pods/a",
        "/r/pods/c",
        "/r/podsx/a",
        "/r/pod",
        "/q/pods/a",
    ] {
        s.create(key, bytes(key)).await.unwrap();
    }
    let list = s.list("/r/pods/", &ListOptions::default()).await.unwrap();
    let keys: Vec<_> = list.items.iter().map(|kv| kv.key.as_str()).collect();
    assert_eq!(keys, ["/r/pods/a", "/r/pods/b", "/r/pods/c"]);
    assert_eq!(list.revision, s.current_revision().await.unwrap());
    assert_eq!((list.continue_token, list.remaining), (None, 0));
    let empty = s.list("/r/none/", &ListOptions::default()).await.unwrap();
    assert!(empty.items.is_empty());
    assert_eq!(empty.revision, list.revision);
}

/// A limit larger than what is stored, up to the largest a client can send
/// (`limit=9223372036854775807`) and beyond, is one whole page.
pub async fn list_limit_of_any_size_is_one_page(s: Arc<dyn Storage>) {
    for key in ["/r/pods/a", "/r/pods/b"] {
        s.create(key, bytes(key)).await.unwrap();
    }
    for limit in [3, i64::MAX as usize - 1, i64::MAX as usize, usize::MAX] {
        let options = ListOptions {
            limit,
            ..ListOptions::default()
        };
        let list = s.list("/r/pods/", &options).await.unwrap();
        assert_eq!(list.items.len(), 2, "limit {limit}");
        assert_eq!((list.continue_token, list.remaining), (None, 0));
    }
}

pub async fn list_pagination_at_fixed_revision_while_writing(s: Arc<dyn Storage>) {
    for i in 0..25 {
        s.create(&format!("/r/items/{i:03}"), object("u", i))
            .await
            .unwrap();
    }
    let first = s
        .list(
            "/r/items/",
            &ListOptions {
                limit: 10,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(first.items.len(), 10);
    assert_eq!(first.remaining, 15);
    let fixed = first.revision;
    let mut seen: Vec<KeyValue> = first.items;
    let mut token = first.continue_token.expect("a second page");
    // Writes that must not show up in the pages that follow.
    let mut writes = 0;
    loop {
        s.create(&format!("/r/items/{:03}", 100 + writes), object("new", 0))
            .await
            .unwrap();
        s.delete(
            &format!("/r/items/{:03}", 20 + writes),
            &Preconditions::default(),
        )
        .await
        .unwrap();
        writes += 1;
        let page = s
            .list(
                "/r/items/",
                &ListOptions {
                    limit: 10,
                    continue_token: Some(token),
                    // Ignored when a token is given.
                    revision: RevisionMatch::Latest,
                },
            )
            .await
            .unwrap();
        assert_eq!(page.revision, fixed);
        seen.extend(page.items);
        match page.continue_token {
            Some(next) => {
                assert_eq!(page.remaining, 5);
                token = next;
            }
            None => {
                assert_eq!(page.remaining, 0);
                break;
            }
        }
        assert!(writes < 10, "pagination does not end");
    }
    let keys: Vec<String> = seen.iter().map(|kv| kv.key.clone()).collect();
    let want: Vec<String> = (0..25).map(|i| format!("/r/items/{i:03}")).collect();
    assert_eq!(keys, want);
    assert!(seen.iter().all(|kv| kv.mod_revision <= fixed));
}

pub async fn list_exact_and_not_older_than(s: Arc<dyn Storage>) {
    let r1 = s.create("/r/x/a", bytes("1")).await.unwrap();
    let r2 = s.create("/r/x/b", bytes("2")).await.unwrap();
    s.delete("/r/x/a", &Preconditions::default()).await.unwrap();
    let at = |revision| ListOptions {
        revision,
        ..Default::default()
    };
    let old = s
        .list("/r/x/", &at(RevisionMatch::Exact(r1)))
        .await
        .unwrap();
    assert_eq!(old.revision, r1);
    assert_eq!(old.items.len(), 1);
    assert_eq!(old.items[0].key, "/r/x/a");
    let mid = s
        .list("/r/x/", &at(RevisionMatch::Exact(r2)))
        .await
        .unwrap();
    assert_eq!(mid.items.len(), 2);
    let now = s
        .list("/r/x/", &at(RevisionMatch::NotOlderThan(r1)))
        .await
        .unwrap();
    assert!(now.revision >= r1);
    assert_eq!(now.items.len(), 1);
    assert_eq!(now.items[0].key, "/r/x/b");
    let current = s.current_revision().await.unwrap();
    let err = s
        .list("/r/x/", &at(RevisionMatch::Exact(current + 5)))
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::FutureRevision { .. }), "{err}");
    let err = s
        .list("/r/x/", &at(RevisionMatch::NotOlderThan(current + 5)))
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::FutureRevision { .. }), "{err}");
}

pub async fn list_bad_continue_token_is_invalid(s: Arc<dyn Storage>) {
    s.create("/r/x/a", bytes("1")).await.unwrap();
    let options = ListOptions {
        continue_token: Some("not a token".into()),
        ..Default::default()
    };
    let err = s.list("/r/x/", &options).await.unwrap_err();
    assert!(matches!(err, StorageError::InvalidArgument(_)), "{err}");
}

pub async fn list_after_compaction_is_expired(s: Arc<dyn Storage>) {
    for i in 0..4 {
        s.create(&format!("/r/x/{i}"), bytes("v")).await.unwrap();
    }
    let page = s
        .list(
            "/r/x/",
            &ListOptions {
                limit: 2,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let r_page = page.revision;
    s.guaranteed_update("/r/x/0", &Preconditions::default(), &mut |_| {
        Ok(Update::Write(bytes("w")))
    })
    .await
    .unwrap();
    let now = s.current_revision().await.unwrap();
    s.compact(now).await.unwrap();
    let err = s
        .list(
            "/r/x/",
            &ListOptions {
                limit: 2,
                continue_token: page.continue_token,
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(err.is_expired(), "continue after compaction: {err}");
    let err = s
        .list(
            "/r/x/",
            &ListOptions {
                revision: RevisionMatch::Exact(r_page),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(err.is_expired(), "exact list after compaction: {err}");
    let ok = s
        .list(
            "/r/x/",
            &ListOptions {
                revision: RevisionMatch::Exact(now),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(ok.items.len(), 4);
}

pub async fn guaranteed_update_creates_updates_and_keeps(s: Arc<dyn Storage>) {
    let none = Preconditions::default();
    let created = s
        .guaranteed_update("/r/g", &none, &mut |current| {
            assert!(current.is_none());
            Ok(Update::Write(bytes("1")))
        })
        .await
        .unwrap();
    assert_eq!(created.value, bytes("1"));
    assert_eq!(created.create_revision, created.mod_revision);
    let updated = s
        .guaranteed_update("/r/g", &none, &mut |current| {
            assert_eq!(current.unwrap().value, bytes("1"));
            Ok(Update::Write(bytes("2")))
        })
        .await
        .unwrap();
    assert!(updated.mod_revision > created.mod_revision);
    assert_eq!(updated.create_revision, created.create_revision);
    let kept = s
        .guaranteed_update("/r/g", &none, &mut |_| Ok(Update::Keep))
        .await
        .unwrap();
    assert_eq!(kept, updated);
    assert_eq!(s.current_revision().await.unwrap(), updated.mod_revision);
}

pub async fn guaranteed_update_abort_is_returned(s: Arc<dyn Storage>) {
    s.create("/r/g", bytes("1")).await.unwrap();
    let before = s.current_revision().await.unwrap();
    let err = s
        .guaranteed_update("/r/g", &Preconditions::default(), &mut |_| {
            Err("invalid object".into())
        })
        .await
        .unwrap_err();
    match err {
        StorageError::Aborted(inner) => assert_eq!(inner.to_string(), "invalid object"),
        other => panic!("expected Aborted, got {other}"),
    }
    assert_eq!(s.current_revision().await.unwrap(), before);
    assert_eq!(s.get("/r/g", None).await.unwrap().value, bytes("1"));
}

pub async fn guaranteed_update_preconditions(s: Arc<dyn Storage>) {
    let rev = s.create("/r/g", object("uid-1", 1)).await.unwrap();
    let write = |n| move |_: Option<&KeyValue>| Ok(Update::Write(object("uid-1", n)));
    let stale = Preconditions::revision(rev - 1);
    let err = s
        .guaranteed_update("/r/g", &stale, &mut write(2))
        .await
        .unwrap_err();
    assert!(err.is_conflict(), "{err}");
    let wrong_uid = Preconditions {
        uid: Some("uid-2".into()),
        revision: None,
    };
    let err = s
        .guaranteed_update("/r/g", &wrong_uid, &mut write(2))
        .await
        .unwrap_err();
    assert!(err.is_conflict(), "{err}");
    let right = Preconditions {
        uid: Some("uid-1".into()),
        revision: Some(rev),
    };
    let kv = s
        .guaranteed_update("/r/g", &right, &mut write(3))
        .await
        .unwrap();
    assert_eq!(kv.value, object("uid-1", 3));
    let err = s
        .guaranteed_update("/r/missing", &right, &mut write(3))
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "{err}");
}

/// 16 writers increment one counter 1,000 times in total; no increment may be lost.
pub async fn concurrent_guaranteed_updates_lose_nothing(s: Arc<dyn Storage>) {
    s.create("/r/counter", bytes("0")).await.unwrap();
    let start = s.current_revision().await.unwrap();
    let mut tasks = Vec::new();
    for writer in 0..16 {
        let s = s.clone();
        let increments = 1000 / 16 + usize::from(writer < 1000 % 16);
        tasks.push(tokio::spawn(async move {
            for _ in 0..increments {
                s.guaranteed_update("/r/counter", &Preconditions::default(), &mut |current| {
                    let n: u64 = std::str::from_utf8(&current.unwrap().value)?.parse()?;
                    Ok(Update::Write(Bytes::from((n + 1).to_string())))
                })
                .await
                .unwrap();
            }
        }));
    }
    tokio::time::timeout(Duration::from_secs(120), futures::future::join_all(tasks))
        .await
        .expect("1,000 concurrent updates took over 120 s")
        .into_iter()
        .for_each(|joined| joined.unwrap());
    let kv = s.get("/r/counter", None).await.unwrap();
    assert_eq!(kv.value, bytes("1000"));
    assert_eq!(kv.mod_revision, start + 1000);
}

pub async fn compare_and_swap_conflict(s: Arc<dyn Storage>) {
    let r1 = s.create("/r/c", bytes("1")).await.unwrap();
    let kv = s.compare_and_swap("/r/c", r1, bytes("2")).await.unwrap();
    assert!(kv.mod_revision > r1);
    let err = s
        .compare_and_swap("/r/c", r1, bytes("3"))
        .await
        .unwrap_err();
    assert!(err.is_conflict(), "{err}");
    assert_eq!(s.get("/r/c", None).await.unwrap().value, bytes("2"));
    let err = s
        .compare_and_swap("/r/none", r1, bytes("3"))
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "{err}");
}

pub async fn delete_returns_previous_and_checks_preconditions(s: Arc<dyn Storage>) {
    let rev = s.create("/r/d", object("uid-1", 1)).await.unwrap();
    let err = s
        .delete("/r/d", &Preconditions::revision(rev + 1))
        .await
        .unwrap_err();
    assert!(err.is_conflict(), "{err}");
    let err = s
        .delete(
            "/r/d",
            &Preconditions {
                uid: Some("other".into()),
                revision: None,
            },
        )
        .await
        .unwrap_err();
    assert!(err.is_conflict(), "{err}");
    let deleted = s
        .delete(
            "/r/d",
            &Preconditions {
                uid: Some("uid-1".into()),
                revision: Some(rev),
            },
        )
        .await
        .unwrap();
    assert_eq!(deleted.previous.value, object("uid-1", 1));
    assert_eq!(deleted.previous.mod_revision, rev);
    assert!(deleted.revision > rev);
    assert_eq!(s.current_revision().await.unwrap(), deleted.revision);
    // A key can be created again after its deletion, with a fresh create revision.
    let again = s.create("/r/d", bytes("2")).await.unwrap();
    assert_eq!(s.get("/r/d", None).await.unwrap().create_revision, again);
}

pub async fn delete_missing_is_not_found(s: Arc<dyn Storage>) {
    let err = s
        .delete("/r/none", &Preconditions::default())
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "{err}");
}

/// Writes a known history, then watches from every revision in it and checks each
/// watch replays exactly the events after that revision, in order.
pub async fn watch_from_every_retained_revision_replays_later_events(s: Arc<dyn Storage>) {
    let start = s.current_revision().await.unwrap();
    let mut history: Vec<(Revision, &str, char)> = Vec::new();
    for i in 0..6 {
        let key = ["/r/w/a", "/r/w/b", "/r/w/c"][i % 3];
        let rev = if i < 3 {
            s.create(key, Bytes::from(format!("v{i}"))).await.unwrap()
        } else {
            s.guaranteed_update(key, &Preconditions::default(), &mut |_| {
                Ok(Update::Write(Bytes::from(format!("v{i}"))))
            })
            .await
            .unwrap()
            .mod_revision
        };
        history.push((rev, key, if i < 3 { 'A' } else { 'M' }));
    }
    // An event outside the prefix, interleaved.
    s.create("/r/other", bytes("x")).await.unwrap();
    let deleted = s.delete("/r/w/b", &Preconditions::default()).await.unwrap();
    history.push((deleted.revision, "/r/w/b", 'D'));

    for from in start..deleted.revision {
        let mut watch = s.watch("/r/w/", from).await.unwrap();
        let expected: Vec<_> = history.iter().filter(|(rev, ..)| *rev > from).collect();
        for (rev, key, kind) in expected {
            let event = next_event(&mut watch).await;
            assert_eq!(event.revision(), *rev, "watch from {from}: {event:?}");
            assert_eq!(event.key(), Some(*key));
            match (kind, &event) {
                ('A', WatchEvent::Added(_)) => {}
                ('M', WatchEvent::Modified { current, previous }) => {
                    assert!(previous.mod_revision < current.mod_revision);
                    assert_eq!(previous.key, current.key);
                }
                ('D', WatchEvent::Deleted { previous, .. }) => {
                    assert_eq!(previous.value, bytes("v4"));
                }
                _ => panic!("watch from {from}: expected {kind} at {rev}, got {event:?}"),
            }
        }
    }
}

pub async fn watch_from_now_sees_new_events_only(s: Arc<dyn Storage>) {
    s.create("/r/w/old", bytes("1")).await.unwrap();
    let mut watch = s.watch("/r/w/", 0).await.unwrap();
    let rev = s.create("/r/w/new", bytes("2")).await.unwrap();
    let event = next_event(&mut watch).await;
    assert_eq!(event.key(), Some("/r/w/new"));
    assert_eq!(event.revision(), rev);
}

pub async fn watch_prefix_isolation(s: Arc<dyn Storage>) {
    let mut pods = s.watch("/r/pods/", 0).await.unwrap();
    s.create("/r/podsx/a", bytes("no")).await.unwrap();
    s.create("/r/pod", bytes("no")).await.unwrap();
    let rev = s.create("/r/pods/a", bytes("yes")).await.unwrap();
    let event = next_event(&mut pods).await;
    assert_eq!((event.key(), event.revision()), (Some("/r/pods/a"), rev));
}

pub async fn watch_after_compaction_is_expired(s: Arc<dyn Storage>) {
    let r1 = s.create("/r/w/a", bytes("1")).await.unwrap();
    let r2 = s.create("/r/w/b", bytes("2")).await.unwrap();
    let r3 = s.create("/r/w/c", bytes("3")).await.unwrap();
    s.compact(r2).await.unwrap();
    match s.watch("/r/w/", r1).await {
        Err(err) => assert!(err.is_expired(), "{err}"),
        Ok(mut watch) => {
            // A backend may report expiry as the stream's first item instead.
            let first = tokio::time::timeout(WAIT, watch.next())
                .await
                .expect("no answer from an expired watch");
            match first {
                Some(Err(err)) => assert!(err.is_expired(), "{err}"),
                other => panic!("watch from compacted revision {r1}: {other:?}"),
            }
        }
    }
    let mut watch = s.watch("/r/w/", r2).await.unwrap();
    assert_eq!(next_event(&mut watch).await.revision(), r3);
}

pub async fn compact_bounds(s: Arc<dyn Storage>) {
    let r1 = s.create("/r/a", bytes("1")).await.unwrap();
    let r2 = s.create("/r/b", bytes("2")).await.unwrap();
    s.compact(r2).await.unwrap();
    // Compacting again, or below, is a no-op.
    s.compact(r2).await.unwrap();
    s.compact(r1).await.unwrap();
    let err = s.compact(r2 + 10).await.unwrap_err();
    assert!(
        matches!(
            err,
            StorageError::FutureRevision { .. } | StorageError::InvalidArgument(_)
        ),
        "{err}"
    );
    assert_eq!(s.stats().await.unwrap().compacted_revision, r2);
    // Live data survives compaction.
    assert_eq!(s.get("/r/a", None).await.unwrap().value, bytes("1"));
    let list = s.list("/r/", &ListOptions::default()).await.unwrap();
    assert_eq!(list.items.len(), 2);
}

/// A watcher that never reads must not stall writers or other watchers; it is ended
/// with an error instead.
pub async fn slow_watcher_does_not_stall_writers(s: Arc<dyn Storage>) {
    let mut stalled = s.watch("/r/slow/", 0).await.unwrap();
    let mut live = s.watch("/r/slow/", 0).await.unwrap();
    let value = Bytes::from(vec![b'x'; 1024]);
    let writes = 5_000;
    let reader = tokio::spawn(async move {
        let mut seen = 0;
        while seen < writes {
            match tokio::time::timeout(WAIT, live.next()).await {
                Ok(Some(Ok(WatchEvent::Progress(_)))) => {}
                Ok(Some(Ok(_))) => seen += 1,
                other => panic!("live watcher failed after {seen} events: {other:?}"),
            }
        }
        seen
    });
    let writer = {
        let s = s.clone();
        tokio::spawn(async move {
            for i in 0..writes {
                s.create(&format!("/r/slow/{i:05}"), value.clone())
                    .await
                    .unwrap();
            }
        })
    };
    tokio::time::timeout(Duration::from_secs(180), writer)
        .await
        .expect("writers stalled behind a watcher that does not read")
        .unwrap();
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(60), reader)
            .await
            .expect("the reading watcher fell behind")
            .unwrap(),
        writes
    );
    // The stalled watcher: it may hold a bounded backlog, but it must end with an error
    // before having delivered every event (so its buffer was bounded), or deliver them all.
    let mut delivered = 0;
    let ended_with_error = loop {
        match tokio::time::timeout(WAIT, stalled.next()).await {
            Ok(Some(Ok(WatchEvent::Progress(_)))) => {}
            Ok(Some(Ok(_))) => {
                delivered += 1;
                if delivered == writes {
                    break false;
                }
            }
            Ok(Some(Err(_))) | Ok(None) => break true,
            Err(_) => panic!("stalled watcher neither delivers nor ends"),
        }
    };
    assert!(
        ended_with_error || delivered == writes,
        "delivered {delivered} of {writes}"
    );
}

pub async fn stats_report_keys_and_revisions(s: Arc<dyn Storage>) {
    for i in 0..10 {
        s.create(&format!("/r/s/{i}"), bytes("v")).await.unwrap();
    }
    s.delete("/r/s/0", &Preconditions::default()).await.unwrap();
    let stats = s.stats().await.unwrap();
    assert_eq!(stats.keys, 9);
    assert_eq!(stats.current_revision, s.current_revision().await.unwrap());
    assert!(stats.size_bytes > 0);
}
