//! The event recorder (both event APIs) against the real in-process apiserver.

use std::time::Duration;

use ferrokube_client::events::{EventApi, EventBroadcaster, EventBroadcasterOptions, EventType};
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::core::v1::{self as core, ConfigMap};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

async fn configmap(c: &kube::Client, name: &str) -> ConfigMap {
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<ConfigMap>::namespaced(c.clone(), "default")
        .create(&PostParams::default(), &cm)
        .await
        .unwrap()
}

async fn events(c: &kube::Client) -> Vec<Event> {
    let mut v = Api::<Event>::namespaced(c.clone(), "default")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    v.sort_by_key(|e| e.reason.clone());
    v
}

async fn eventually<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..100 {
        if cond().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test]
async fn repeats_aggregate_into_a_series() {
    let srv = TestApiServer::start().await.unwrap();
    let c = srv.client.clone();
    let cm = configmap(&c, "target").await;
    let b = EventBroadcaster::new(
        c.clone(),
        EventBroadcasterOptions {
            refresh_interval: Duration::from_millis(700),
            ..Default::default()
        },
    );
    let rec = b.new_recorder_with_instance("test-controller", "test-host");
    rec.event_for(&cm, EventType::Warning, "FailedSync", "Syncing", "boom 1");
    eventually("the first event", || async { events(&c).await.len() == 1 }).await;
    let first = events(&c).await.remove(0);
    assert_eq!(
        first.reporting_controller.as_deref(),
        Some("test-controller")
    );
    assert_eq!(first.reporting_instance.as_deref(), Some("test-host"));
    assert_eq!(first.action.as_deref(), Some("Syncing"));
    assert_eq!(first.reason.as_deref(), Some("FailedSync"));
    assert_eq!(first.note.as_deref(), Some("boom 1"));
    assert_eq!(first.type_.as_deref(), Some("Warning"));
    assert!(first.event_time.is_some());
    assert!(first.series.is_none());
    let regarding = first.regarding.clone().unwrap();
    assert_eq!(regarding.kind.as_deref(), Some("ConfigMap"));
    assert_eq!(regarding.name.as_deref(), Some("target"));
    assert_eq!(regarding.uid, cm.metadata.uid);
    assert!(first.metadata.name.unwrap().starts_with("target."));

    // Nine repeats (notes may differ): still one Event; the second turns it into a
    // series at once, the rest reach the API with the periodic refresh.
    for i in 2..=10 {
        rec.event_for(
            &cm,
            EventType::Warning,
            "FailedSync",
            "Syncing",
            &format!("boom {i}"),
        );
    }
    eventually("a series", || async {
        events(&c).await[0].series.is_some()
    })
    .await;
    eventually("the refreshed count", || async {
        events(&c).await[0].series.as_ref().map(|s| s.count) == Some(10)
    })
    .await;
    let evs = events(&c).await;
    assert_eq!(evs.len(), 1);
    let series = evs[0].series.clone().unwrap();
    assert!(series.last_observed_time.0 >= first.event_time.unwrap().0);
    let s = b.stats();
    assert_eq!(s.created, 1);
    assert_eq!(s.aggregated, 8);
    assert!(s.patched >= 2, "{s:?}");

    // Another reason is another event.
    rec.event_for(&cm, EventType::Normal, "Synced", "Syncing", "ok");
    tokio::time::timeout(Duration::from_secs(10), b.shutdown())
        .await
        .unwrap();
    let evs = events(&c).await;
    assert_eq!(evs.len(), 2);
    assert_eq!(evs[1].reason.as_deref(), Some("Synced"));
    assert_eq!(evs[1].type_.as_deref(), Some("Normal"));
    // After shutdown, recording is a counted no-op.
    rec.event_for(&cm, EventType::Normal, "Late", "Syncing", "dropped");
    assert_eq!(b.stats().dropped_queue_full, 1);
    srv.stop().await;
}

#[tokio::test]
async fn hot_loop_is_bounded() {
    let srv = TestApiServer::start().await.unwrap();
    let c = srv.client.clone();
    let cm = configmap(&c, "hot").await;
    let other = configmap(&c, "other").await;
    let b = EventBroadcaster::new(
        c.clone(),
        EventBroadcasterOptions {
            queue_size: 100,
            ..Default::default()
        },
    );
    let rec = b.new_recorder("hot-controller");
    // A hot loop of distinct events about one object: the queue takes 100 (the
    // writer task cannot run during this synchronous loop on this runtime), and
    // the per-object filter lets 25 through to the API.
    for i in 0..1000 {
        rec.event_for(
            &cm,
            EventType::Warning,
            &format!("Reason{i}"),
            "Loop",
            "spam",
        );
    }
    assert_eq!(b.stats().dropped_queue_full, 900);
    // Another object has its own budget.
    tokio::time::sleep(Duration::from_millis(10)).await;
    eventually("the queue drained", || async {
        let s = b.stats();
        s.created + s.dropped_spam == 100
    })
    .await;
    rec.event_for(&other, EventType::Normal, "Other", "Loop", "fine");
    tokio::time::timeout(Duration::from_secs(10), b.shutdown())
        .await
        .unwrap();
    let s = b.stats();
    assert_eq!(s.created, 26, "{s:?}");
    assert_eq!(s.dropped_spam, 75, "{s:?}");
    assert_eq!(events(&c).await.len(), 26);
    srv.stop().await;
}

async fn core_events(c: &kube::Client) -> Vec<core::Event> {
    let mut v = Api::<core::Event>::namespaced(c.clone(), "default")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    v.sort_by_key(|e| e.reason.clone());
    v
}

/// A broadcaster writing core v1 Events with upstream's defaults (the kubelet's).
fn core_v1_broadcaster(c: &kube::Client) -> EventBroadcaster {
    EventBroadcaster::new(
        c.clone(),
        EventBroadcasterOptions {
            api: EventApi::CoreV1,
            ..Default::default()
        },
    )
}

/// The kubelet's sink: events land as core v1 Events (what `kubectl describe` and
/// `kubectl get events` read), repeats raise `count` and `lastTimestamp`.
#[tokio::test]
async fn core_v1_sink_writes_core_events() {
    let srv = TestApiServer::start().await.unwrap();
    let c = srv.client.clone();
    let cm = configmap(&c, "pod-like").await;
    let b = core_v1_broadcaster(&c);
    let rec = b.new_recorder_with_instance("kubelet", "node-a");
    rec.event_for(
        &cm,
        EventType::Normal,
        "Pulling",
        "Pulling",
        "Pulling image",
    );
    eventually("the core event", || async {
        core_events(&c).await.len() == 1
    })
    .await;
    let first = core_events(&c).await.remove(0);
    assert_eq!(first.reason.as_deref(), Some("Pulling"));
    assert_eq!(first.message.as_deref(), Some("Pulling image"));
    assert_eq!(first.type_.as_deref(), Some("Normal"));
    assert_eq!(first.involved_object.kind.as_deref(), Some("ConfigMap"));
    assert_eq!(first.involved_object.name.as_deref(), Some("pod-like"));
    assert_eq!(first.involved_object.uid, cm.metadata.uid);
    let source = first.source.clone().unwrap();
    assert_eq!(source.component.as_deref(), Some("kubelet"));
    assert_eq!(source.host.as_deref(), Some("node-a"));
    assert_eq!(first.reporting_component.as_deref(), Some("kubelet"));
    assert_eq!(first.reporting_instance.as_deref(), Some("node-a"));
    assert_eq!(first.count, Some(1));
    assert!(first.first_timestamp.is_some());
    assert_eq!(first.first_timestamp, first.last_timestamp);
    assert!(first.event_time.is_none());
    assert!(
        first
            .metadata
            .name
            .clone()
            .unwrap()
            .starts_with("pod-like.")
    );

    // Repeats fold into the same Event's count as they come (no periodic refresh),
    // as the legacy correlator's.
    for _ in 0..4 {
        rec.event_for(
            &cm,
            EventType::Normal,
            "Pulling",
            "Pulling",
            "Pulling image",
        );
    }
    eventually("the refreshed count", || async {
        core_events(&c).await[0].count == Some(5)
    })
    .await;
    tokio::time::timeout(Duration::from_secs(10), b.shutdown())
        .await
        .unwrap();
    let evs = core_events(&c).await;
    assert_eq!(evs.len(), 1);
    assert!(evs[0].last_timestamp.as_ref().unwrap().0 >= first.first_timestamp.unwrap().0);
    assert_eq!(evs[0].first_timestamp, first.last_timestamp);
    let s = b.stats();
    assert_eq!((s.created, s.patched, s.failed), (1, 4, 0), "{s:?}");
    srv.stop().await;
}

/// The legacy correlator's two bounds: the tenth distinct message of one reason
/// becomes a single "(combined from similar events)" Event, and the per-object spam
/// filter counts repeats too (burst 25), remembering the count it did not write.
#[tokio::test]
async fn core_v1_sink_combines_similar_events_and_filters_repeats() {
    let srv = TestApiServer::start().await.unwrap();
    let c = srv.client.clone();
    let cm = configmap(&c, "flaky").await;
    let b = core_v1_broadcaster(&c);
    let rec = b.new_recorder_with_instance("kubelet", "node-a");
    for i in 0..11 {
        let note = format!("volume v{i} not found");
        rec.event_for(&cm, EventType::Warning, "FailedMount", "Mount", &note);
    }
    for _ in 0..20 {
        rec.event_for(&cm, EventType::Normal, "Pulling", "Pull", "Pulling image");
    }
    tokio::time::timeout(Duration::from_secs(20), b.shutdown())
        .await
        .unwrap();

    let evs = core_events(&c).await;
    let failed: Vec<_> = evs
        .iter()
        .filter(|e| e.reason.as_deref() == Some("FailedMount"))
        .collect();
    // Nine events of their own, then one combined event counting the tenth and
    // eleventh and showing the latest message.
    assert_eq!(failed.len(), 10, "{failed:#?}");
    let combined: Vec<_> = failed
        .iter()
        .filter(|e| e.count != Some(1))
        .map(|e| (e.count, e.message.as_deref()))
        .collect();
    assert_eq!(
        combined,
        [(
            Some(2),
            Some("(combined from similar events): volume v10 not found")
        )]
    );
    for i in 0..9 {
        let note = format!("volume v{i} not found");
        assert!(
            failed.iter().any(|e| e.message.as_deref() == Some(&note)),
            "{note}"
        );
    }
    // 11 writes for FailedMount, then the first Pulling and 13 of its repeats make
    // the object's 25; the other 6 repeats are counted but not written.
    let pulling: Vec<_> = evs
        .iter()
        .filter(|e| e.reason.as_deref() == Some("Pulling"))
        .collect();
    assert_eq!(pulling.len(), 1);
    assert_eq!(pulling[0].count, Some(14), "{:?}", pulling[0]);
    let s = b.stats();
    assert_eq!(
        (s.created, s.patched, s.dropped_spam, s.failed),
        (11, 14, 6, 0),
        "{s:?}"
    );
    srv.stop().await;
}

/// Both APIs show one stored resource: what the events.k8s.io recorder writes,
/// `kubectl describe` (core v1) sees, and the reverse.
#[tokio::test]
async fn both_event_apis_show_the_same_events() {
    let srv = TestApiServer::start().await.unwrap();
    let c = srv.client.clone();
    let cm = configmap(&c, "shared").await;
    let new_api = EventBroadcaster::new(c.clone(), Default::default());
    let core_api = EventBroadcaster::new(
        c.clone(),
        EventBroadcasterOptions {
            api: EventApi::CoreV1,
            ..Default::default()
        },
    );
    new_api
        .new_recorder_with_instance("scheduler", "s1")
        .event_for(&cm, EventType::Normal, "Scheduled", "Binding", "bound");
    core_api
        .new_recorder_with_instance("kubelet", "n1")
        .event_for(
            &cm,
            EventType::Warning,
            "Unhealthy",
            "Probing",
            "probe failed",
        );
    for b in [&new_api, &core_api] {
        tokio::time::timeout(Duration::from_secs(10), b.shutdown())
            .await
            .unwrap();
    }
    let core = core_events(&c).await;
    let reasons: Vec<_> = core.iter().map(|e| e.reason.as_deref()).collect();
    assert_eq!(reasons, [Some("Scheduled"), Some("Unhealthy")]);
    assert_eq!(core[0].message.as_deref(), Some("bound"));
    assert_eq!(core[0].reporting_component.as_deref(), Some("scheduler"));
    assert_eq!(core[0].involved_object.name.as_deref(), Some("shared"));
    let new = events(&c).await;
    assert_eq!(new.len(), 2);
    assert_eq!(new[1].note.as_deref(), Some("probe failed"));
    assert_eq!(new[1].reporting_controller.as_deref(), Some("kubelet"));
    assert_eq!(new[1].deprecated_count, Some(1));
    assert_eq!(
        new[1].regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some("shared")
    );
    srv.stop().await;
}
