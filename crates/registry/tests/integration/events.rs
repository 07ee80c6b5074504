//! Core `v1` and `events.k8s.io/v1` Events are one stored resource (as upstream):
//! written through either API, read, patched and watched through the other with
//! upstream's field mapping.

use std::sync::Arc;
use std::time::Duration;

use ferrokube_registry::{
    DeleteOptions, EventType, ListParams, Part, PatchType, Registry, RegistryConfig, Store,
    UpdateInput, WatchItem, WatchParams, WriteOptions,
};
use ferrokube_storage_sqlite::{SqliteOptions, SqliteStorage};
use serde_json::{Value, json};

async fn registry(dir: &tempfile::TempDir) -> Registry {
    let storage =
        SqliteStorage::open(&dir.path().join("db.sqlite"), SqliteOptions::default()).unwrap();
    Registry::new(Arc::new(storage), RegistryConfig::default())
        .await
        .unwrap()
}

async fn next_object(rx: &mut tokio::sync::mpsc::Receiver<WatchItem>) -> (EventType, Value) {
    let item = tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .unwrap()
        .unwrap();
    match item {
        WatchItem::Event(e) => (e.kind, (*e.object).clone()),
        WatchItem::Synthetic(kind, obj) => (kind, (*obj).clone()),
        other => panic!("unexpected {other:?}"),
    }
}

async fn watch_from(store: &Store, rv: &str) -> tokio::sync::mpsc::Receiver<WatchItem> {
    store
        .watch(
            Some("default"),
            &WatchParams {
                resource_version: Some(rv.to_string()),
                ..Default::default()
            },
        )
        .await
        .unwrap()
}

/// The sorted names of the events `store` lists in `default` with `field_selector`.
async fn names(store: &Store, field_selector: &str) -> Result<Vec<String>, String> {
    let listed = store
        .list(
            Some("default"),
            &ListParams {
                field_selector: Some(field_selector.into()),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| e.to_string())?;
    let mut names: Vec<String> = listed
        .items
        .iter()
        .map(|e| {
            e["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    names.sort();
    Ok(names)
}

#[tokio::test]
async fn an_events_v1_event_is_a_core_event() {
    let dir = tempfile::tempdir().unwrap();
    let reg = registry(&dir).await;
    let core = reg.store("", "v1", "events").unwrap();
    let new = reg.store("events.k8s.io", "v1", "events").unwrap();
    let start = core
        .list(Some("default"), &ListParams::default())
        .await
        .unwrap()
        .resource_version;
    let mut core_watch = watch_from(core, &start).await;
    let mut new_watch = watch_from(new, &start).await;

    let created = new
        .create(
            Some("default"),
            json!({
                "apiVersion": "events.k8s.io/v1", "kind": "Event",
                "metadata": {"name": "web.1"},
                "eventTime": "2026-01-02T03:04:05.000000Z",
                "reportingController": "default-scheduler",
                "reportingInstance": "sched-1",
                "action": "Binding", "reason": "Scheduled", "type": "Normal",
                "note": "assigned default/web to n1",
                "regarding": {"kind": "Pod", "namespace": "default", "name": "web"},
                "related": {"kind": "Node", "name": "n1"},
                "deprecatedSource": {"component": "default-scheduler"},
            }),
            &WriteOptions::default(),
        )
        .await
        .unwrap()
        .object;
    assert_eq!(created["apiVersion"], "events.k8s.io/v1");
    assert_eq!(created["note"], "assigned default/web to n1");

    let seen = core.get(Some("default"), "web.1").await.unwrap();
    assert_eq!(seen["apiVersion"], "v1");
    assert_eq!(seen["message"], "assigned default/web to n1");
    assert_eq!(seen["involvedObject"]["name"], "web");
    assert_eq!(seen["related"]["name"], "n1");
    assert_eq!(seen["reportingComponent"], "default-scheduler");
    assert_eq!(seen["reportingInstance"], "sched-1");
    assert_eq!(seen["source"]["component"], "default-scheduler");
    assert_eq!(seen["eventTime"], "2026-01-02T03:04:05.000000Z");
    assert_eq!(
        (&seen["action"], &seen["reason"], &seen["type"]),
        (&json!("Binding"), &json!("Scheduled"), &json!("Normal"))
    );
    assert_eq!(
        seen["metadata"]["resourceVersion"],
        created["metadata"]["resourceVersion"]
    );
    assert!(seen.get("note").is_none() && seen.get("regarding").is_none());
    // In Go's form of a core Event: its unset times null.
    assert_eq!(
        (seen.get("firstTimestamp"), seen.get("lastTimestamp")),
        (Some(&Value::Null), Some(&Value::Null))
    );
    assert_eq!(
        (
            created.get("deprecatedFirstTimestamp"),
            created.get("deprecatedLastTimestamp")
        ),
        (Some(&Value::Null), Some(&Value::Null))
    );
    // Unset as in the kind's zero value: no manager owns them.
    let owned = &created["metadata"]["managedFields"][0]["fieldsV1"];
    assert!(owned.get("f:eventTime").is_some(), "{owned}");
    assert!(owned.get("f:deprecatedFirstTimestamp").is_none(), "{owned}");
    // The field selectors of core events work on it.
    let by_object = core
        .list(
            Some("default"),
            &ListParams {
                field_selector: Some("involvedObject.name=web,reason=Scheduled".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(by_object.items.len(), 1);

    let (kind, obj) = next_object(&mut core_watch).await;
    assert_eq!(
        (kind, &obj["message"]),
        (EventType::Added, &json!("assigned default/web to n1"))
    );
    let (kind, obj) = next_object(&mut new_watch).await;
    assert_eq!(
        (kind, &obj["note"]),
        (EventType::Added, &json!("assigned default/web to n1"))
    );
    assert_eq!(obj["apiVersion"], "events.k8s.io/v1");
    assert_eq!(obj["regarding"]["name"], "web");

    // A legacy core event (the kubelet's shape) through events.k8s.io.
    core.create(
        Some("default"),
        json!({
            "metadata": {"name": "web.2"},
            "involvedObject": {"kind": "Pod", "namespace": "default", "name": "web"},
            "reason": "Pulling", "message": "Pulling image \"nginx\"", "type": "Normal",
            "source": {"component": "kubelet", "host": "n1"},
            "count": 1,
            "firstTimestamp": "2026-01-02T03:04:05Z",
            "lastTimestamp": "2026-01-02T03:04:05Z",
        }),
        &WriteOptions::default(),
    )
    .await
    .unwrap();
    let listed = new
        .list(Some("default"), &ListParams::default())
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 2);
    let legacy = listed
        .items
        .iter()
        .find(|e| e["metadata"]["name"] == "web.2")
        .unwrap();
    assert_eq!(legacy["apiVersion"], "events.k8s.io/v1");
    assert_eq!(legacy["note"], "Pulling image \"nginx\"");
    assert_eq!(legacy["regarding"]["name"], "web");
    assert_eq!(legacy["deprecatedSource"]["host"], "n1");
    assert_eq!(legacy["deprecatedCount"], 1);
    assert_eq!(legacy["deprecatedFirstTimestamp"], "2026-01-02T03:04:05Z");
    assert_eq!(legacy["deprecatedLastTimestamp"], "2026-01-02T03:04:05Z");
    assert_eq!(legacy.get("eventTime"), Some(&Value::Null));
    // events.k8s.io's own field labels select (upstream maps them to the core ones);
    // the core spellings are not its labels.
    assert_eq!(
        names(new, "regarding.name=web,regarding.kind=Pod")
            .await
            .unwrap(),
        ["web.1", "web.2"]
    );
    assert_eq!(
        names(new, "reportingController=default-scheduler")
            .await
            .unwrap(),
        ["web.1"]
    );
    assert_eq!(
        names(new, "source=kubelet,reason=Pulling,type=Normal")
            .await
            .unwrap(),
        ["web.2"]
    );
    assert_eq!(
        names(new, "regarding.name!=web").await.unwrap(),
        Vec::<String>::new()
    );
    let refused = names(new, "involvedObject.name=web").await.unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("field label not supported: involvedObject.name"),
        "{refused}"
    );
    let (_, obj) = next_object(&mut new_watch).await;
    assert_eq!(obj["note"], "Pulling image \"nginx\"");
    let (_, obj) = next_object(&mut core_watch).await;
    assert_eq!(obj["message"], "Pulling image \"nginx\"");

    // A merge patch in the events.k8s.io shape (the recorder's series update) lands
    // in the core form; a patch through core shows through events.k8s.io.
    let patched = new
        .update(
            Some("default"),
            "web.1",
            UpdateInput::Patch(
                PatchType::Merge,
                json!({"series": {"count": 2, "lastObservedTime": "2026-01-02T03:05:00.000000Z"}}),
            ),
            Part::Main,
            &WriteOptions::default(),
        )
        .await
        .unwrap()
        .object;
    assert_eq!(patched["series"]["count"], 2);
    let seen = core.get(Some("default"), "web.1").await.unwrap();
    assert_eq!(seen["series"]["count"], 2);
    assert_eq!(
        seen["series"]["lastObservedTime"],
        "2026-01-02T03:05:00.000000Z"
    );
    core.update(
        Some("default"),
        "web.2",
        UpdateInput::Patch(PatchType::Merge, json!({"count": 3})),
        Part::Main,
        &WriteOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(
        new.get(Some("default"), "web.2").await.unwrap()["deprecatedCount"],
        3
    );
    let (kind, obj) = next_object(&mut new_watch).await;
    assert_eq!(
        (kind, &obj["series"]["count"]),
        (EventType::Modified, &json!(2))
    );
    let (kind, obj) = next_object(&mut new_watch).await;
    assert_eq!(
        (kind, &obj["deprecatedCount"]),
        (EventType::Modified, &json!(3))
    );

    // Deleting through one API removes it from both.
    let gone = new
        .delete(Some("default"), "web.2", &DeleteOptions::default())
        .await
        .unwrap();
    assert_eq!(gone.object["note"], "Pulling image \"nginx\"");
    assert_eq!(
        core.get(Some("default"), "web.2").await.unwrap_err().code,
        404
    );
    for _ in 0..2 {
        next_object(&mut core_watch).await;
    }
    let (kind, obj) = next_object(&mut core_watch).await;
    assert_eq!(
        (kind, &obj["message"]),
        (EventType::Deleted, &json!("Pulling image \"nginx\""))
    );
    let (kind, obj) = next_object(&mut new_watch).await;
    assert_eq!(
        (kind, &obj["note"]),
        (EventType::Deleted, &json!("Pulling image \"nginx\""))
    );
    // Lists served from the watch cache convert too.
    let cached = new
        .list(
            Some("default"),
            &ListParams {
                resource_version: Some("0".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(cached.items.len(), 1);
    assert_eq!(cached.items[0]["note"], "assigned default/web to n1");
}
