//! `--event-ttl`: Events are deleted once their last write is older than the TTL,
//! over the embedded SQLite backend, with a clock the tests move forward instead of
//! waiting.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use ferrokube_registry::{
    Clock, EventType, ListParams, Part, PatchType, Registry, RegistryConfig, Store, UpdateInput,
    WatchItem, WatchParams, WriteOptions,
};
use ferrokube_storage_sqlite::{SqliteOptions, SqliteStorage};
use serde_json::{Value, json};

const TTL: Duration = Duration::from_secs(3600);

/// The system clock moved by a settable number of seconds.
#[derive(Default)]
struct ShiftedClock(AtomicI64);

impl ShiftedClock {
    fn set(&self, seconds: i64) {
        self.0.store(seconds, Ordering::SeqCst);
    }
}

impl Clock for ShiftedClock {
    fn now(&self) -> jiff::Timestamp {
        jiff::Timestamp::now() + jiff::SignedDuration::from_secs(self.0.load(Ordering::SeqCst))
    }
}

fn open(dir: &tempfile::TempDir) -> Arc<SqliteStorage> {
    Arc::new(SqliteStorage::open(&dir.path().join("db.sqlite"), SqliteOptions::default()).unwrap())
}

async fn apiserver(
    storage: Arc<SqliteStorage>,
    clock: Arc<ShiftedClock>,
    ttl: Duration,
) -> Registry {
    let config = RegistryConfig {
        clock,
        event_ttl: ttl,
        ..RegistryConfig::default()
    };
    Registry::new(storage, config).await.unwrap()
}

fn core(reg: &Registry) -> &Arc<Store> {
    reg.store("", "v1", "events").unwrap()
}

fn events_v1(reg: &Registry) -> &Arc<Store> {
    reg.store("events.k8s.io", "v1", "events").unwrap()
}

fn time(clock: &ShiftedClock, micros: bool) -> String {
    let t = clock.now();
    if micros {
        t.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string()
    } else {
        t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
    }
}

/// A kubelet-style core Event last seen at `last`.
async fn create_core(store: &Store, name: &str, last: &str) -> Value {
    store
        .create(
            Some("default"),
            json!({
                "metadata": {"name": name},
                "involvedObject": {"kind": "Pod", "namespace": "default", "name": "web"},
                "reason": "Pulling", "message": format!("event {name}"), "type": "Normal",
                "source": {"component": "kubelet", "host": "n1"},
                "count": 1, "firstTimestamp": last, "lastTimestamp": last,
            }),
            &WriteOptions::default(),
        )
        .await
        .unwrap()
        .object
}

/// An `events.k8s.io/v1` Event (the scheduler's shape) at `event_time`.
async fn create_v1(store: &Store, name: &str, event_time: &str) -> Value {
    store
        .create(
            Some("default"),
            json!({
                "apiVersion": "events.k8s.io/v1", "kind": "Event",
                "metadata": {"name": name},
                "eventTime": event_time,
                "reportingController": "default-scheduler", "reportingInstance": "sched-1",
                "action": "Binding", "reason": "Scheduled", "type": "Normal",
                "note": format!("event {name}"),
                "regarding": {"kind": "Pod", "namespace": "default", "name": "web"},
            }),
            &WriteOptions::default(),
        )
        .await
        .unwrap()
        .object
}

/// The names of the events in `default` through `store`, sorted.
async fn names(store: &Store) -> Vec<String> {
    let listed = store
        .list(Some("default"), &ListParams::default())
        .await
        .unwrap();
    let mut names: Vec<String> = listed
        .items
        .iter()
        .map(|e| e["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
}

async fn next_object(rx: &mut tokio::sync::mpsc::Receiver<WatchItem>) -> (EventType, Value) {
    loop {
        let item = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .unwrap()
            .unwrap();
        match item {
            WatchItem::Event(e) => return (e.kind, (*e.object).clone()),
            WatchItem::Synthetic(kind, obj) => return (kind, (*obj).clone()),
            WatchItem::Bookmark { .. } => continue,
            WatchItem::Error(e) => panic!("watch error {e:?}"),
        }
    }
}

#[tokio::test]
async fn an_event_is_deleted_once_its_last_write_is_older_than_the_ttl() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ShiftedClock::default());
    let reg = apiserver(open(&dir), clock.clone(), TTL).await;
    create_core(core(&reg), "first", &time(&clock, false)).await;
    // A sweep also brings the record of writes up to date: every test does one
    // before it moves the clock, so a write is dated when it happened, not when the
    // expiry task next ran.
    assert_eq!(reg.expire_events().await.unwrap(), 0);
    clock.set(1800);
    let second = create_v1(events_v1(&reg), "second", &time(&clock, true)).await;
    assert_eq!(reg.expire_events().await.unwrap(), 0);
    let mut watch = events_v1(&reg)
        .watch(
            Some("default"),
            &WatchParams {
                resource_version: second["metadata"]["resourceVersion"]
                    .as_str()
                    .map(String::from),
                ..Default::default()
            },
        )
        .await
        .unwrap();

    // An hour after the first write, not yet after the second.
    clock.set(3610);
    assert_eq!(reg.expire_events().await.unwrap(), 1);
    assert_eq!(names(core(&reg)).await, ["second"]);
    assert_eq!(names(events_v1(&reg)).await, ["second"]);
    let gone = events_v1(&reg)
        .get(Some("default"), "first")
        .await
        .unwrap_err();
    assert_eq!(gone.code, 404);
    // Watchers see an ordinary delete, in their API's form.
    let (kind, obj) = next_object(&mut watch).await;
    assert_eq!(kind, EventType::Deleted);
    assert_eq!(
        (&obj["apiVersion"], &obj["metadata"]["name"], &obj["note"]),
        (
            &json!("events.k8s.io/v1"),
            &json!("first"),
            &json!("event first")
        )
    );
    // Nothing more is due until the second one's hour is up.
    assert_eq!(reg.expire_events().await.unwrap(), 0);
    clock.set(5410);
    assert_eq!(reg.expire_events().await.unwrap(), 1);
    assert!(names(core(&reg)).await.is_empty());
}

#[tokio::test]
async fn an_update_keeps_an_event_a_full_ttl_longer() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ShiftedClock::default());
    let reg = apiserver(open(&dir), clock.clone(), TTL).await;
    let created = create_core(core(&reg), "pulling", &time(&clock, false)).await;
    assert_eq!(reg.expire_events().await.unwrap(), 0);

    // A write that leaves the timestamps alone (only the count moves): the write,
    // not the object's times, restarts the TTL.
    clock.set(3000);
    core(&reg)
        .update(
            Some("default"),
            "pulling",
            UpdateInput::Patch(PatchType::Merge, json!({"count": 2})),
            Part::Main,
            &WriteOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(reg.expire_events().await.unwrap(), 0);

    clock.set(3700);
    assert_eq!(reg.expire_events().await.unwrap(), 0);
    let kept = core(&reg).get(Some("default"), "pulling").await.unwrap();
    assert_eq!(kept["count"], 2);
    assert_eq!(kept["lastTimestamp"], created["lastTimestamp"]);

    clock.set(6610);
    assert_eq!(reg.expire_events().await.unwrap(), 1);
    assert!(names(events_v1(&reg)).await.is_empty());
}

#[tokio::test]
async fn events_stored_before_a_restart_are_dated_by_their_own_times() {
    let dir = tempfile::tempdir().unwrap();
    let storage = open(&dir);
    {
        // A previous run, two hours ago (and a writer whose clock runs a day ahead).
        let clock = Arc::new(ShiftedClock::default());
        let before = apiserver(storage.clone(), clock.clone(), TTL).await;
        clock.set(-7200);
        create_core(core(&before), "old", &time(&clock, false)).await;
        create_v1(events_v1(&before), "old-v1", &time(&clock, true)).await;
        clock.set(86_400);
        let ahead = time(&clock, false);
        clock.set(-7200);
        create_core(core(&before), "skewed", &ahead).await;
        clock.set(-60);
        create_core(core(&before), "recent", &time(&clock, false)).await;
    }

    let clock = Arc::new(ShiftedClock::default());
    let reg = apiserver(storage, clock.clone(), TTL).await;
    assert_eq!(
        names(core(&reg)).await,
        ["old", "old-v1", "recent", "skewed"]
    );
    assert_eq!(reg.expire_events().await.unwrap(), 2);
    assert_eq!(names(core(&reg)).await, ["recent", "skewed"]);
    assert_eq!(names(events_v1(&reg)).await, ["recent", "skewed"]);
    let gone = events_v1(&reg)
        .get(Some("default"), "old-v1")
        .await
        .unwrap_err();
    assert_eq!(gone.code, 404);

    // A time ahead of the clock counts as now: the skewed one lives an hour from the
    // restart, the recent one an hour from its own time.
    clock.set(3580);
    assert_eq!(reg.expire_events().await.unwrap(), 1);
    assert_eq!(names(events_v1(&reg)).await, ["skewed"]);
    clock.set(3610);
    assert_eq!(reg.expire_events().await.unwrap(), 1);
    assert!(names(core(&reg)).await.is_empty());
}

#[tokio::test]
async fn apiservers_sharing_the_store_each_sweep_without_error() {
    let dir = tempfile::tempdir().unwrap();
    let storage = open(&dir);
    let clock = Arc::new(ShiftedClock::default());
    let a = apiserver(storage.clone(), clock.clone(), TTL).await;
    let b = apiserver(storage, clock.clone(), TTL).await;
    for i in 0..40 {
        let store = if i % 2 == 0 { core(&a) } else { core(&b) };
        create_core(store, &format!("ev-{i}"), &time(&clock, false)).await;
    }
    assert_eq!(a.expire_events().await.unwrap(), 0);
    assert_eq!(b.expire_events().await.unwrap(), 0);
    clock.set(3610);
    let (from_a, from_b) = tokio::join!(a.expire_events(), b.expire_events());
    assert_eq!(from_a.unwrap() + from_b.unwrap(), 40);
    assert!(names(core(&a)).await.is_empty());
    assert_eq!(a.expire_events().await.unwrap(), 0);
    assert_eq!(b.expire_events().await.unwrap(), 0);
}

#[tokio::test]
async fn a_ttl_of_zero_keeps_events() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ShiftedClock::default());
    // Upstream's TTL is whole seconds: under one second is 0, no expiry at all.
    let reg = apiserver(open(&dir), clock.clone(), Duration::from_millis(900)).await;
    clock.set(-86_400);
    create_core(core(&reg), "kept", &time(&clock, false)).await;
    clock.set(0);
    assert_eq!(reg.expire_events().await.unwrap(), 0);
    assert_eq!(names(core(&reg)).await, ["kept"]);
}
