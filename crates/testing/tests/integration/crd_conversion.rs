//! CustomResourceDefinitions with `spec.conversion.strategy: Webhook` on the test
//! apiserver, against a conversion webhook in the test (the shared HTTPS
//! [`WebhookServer`], reached through a Service's endpoints): objects are stored in
//! v1 and served in v2 with a renamed field (`spec.colour` in v1, `spec.color` in
//! v2); create, get, list, watch and patch in v2; a webhook that answers wrongly or
//! is down.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferrokube_testing::{TestApiServer, WebhookServer, crd_established, eventually};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
    WatchEvent, WatchParams,
};
use serde_json::{Value, json};

const GROUP: &str = "conv.example.com";
const CRD_NAME: &str = "widgets.conv.example.com";

/// How the test webhook answers.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Convert,
    WrongApiVersion,
    Rename,
}

/// What the webhook saw and how it answers.
#[derive(Default)]
struct Seen {
    /// `(desiredAPIVersion, number of objects)` of every review.
    reviews: Mutex<Vec<(String, usize)>>,
    mode: AtomicUsize,
}

impl Seen {
    fn mode(&self) -> Mode {
        [Mode::Convert, Mode::WrongApiVersion, Mode::Rename][self.mode.load(Ordering::SeqCst)]
    }

    fn set(&self, mode: Mode) {
        let i = [Mode::Convert, Mode::WrongApiVersion, Mode::Rename]
            .iter()
            .position(|m| *m == mode)
            .unwrap();
        self.mode.store(i, Ordering::SeqCst);
    }

    fn count(&self) -> usize {
        self.reviews.lock().unwrap().len()
    }
}

/// v1 `spec.colour` <-> v2 `spec.color`.
fn convert(mut obj: Value, desired: &str, mode: Mode) -> Value {
    if let Some(spec) = obj["spec"].as_object_mut() {
        let (from, to) = if desired.ends_with("/v2") {
            ("colour", "color")
        } else {
            ("color", "colour")
        };
        if let Some(v) = spec.remove(from) {
            spec.insert(to.into(), v);
        }
    }
    obj["apiVersion"] = json!(desired);
    match mode {
        Mode::Convert => {}
        Mode::WrongApiVersion => obj["apiVersion"] = json!(format!("{GROUP}/v9")),
        Mode::Rename => obj["metadata"]["name"] = json!("renamed"),
    }
    obj
}

async fn conversion_webhook(seen: Arc<Seen>) -> WebhookServer {
    WebhookServer::start(move |_path: String, review: Value| {
        let seen = seen.clone();
        async move {
            let request = &review["request"];
            let desired = request["desiredAPIVersion"].as_str().unwrap_or("");
            let objects: Vec<Value> = request["objects"].as_array().cloned().unwrap_or_default();
            seen.reviews
                .lock()
                .unwrap()
                .push((desired.to_string(), objects.len()));
            let mode = seen.mode();
            let converted: Vec<Value> = objects
                .into_iter()
                .map(|o| convert(o, desired, mode))
                .collect();
            json!({"apiVersion": review["apiVersion"], "kind": "ConversionReview",
                "response": {"uid": request["uid"], "result": {"status": "Success"},
                    "convertedObjects": converted}})
        }
    })
    .await
    .unwrap()
}

fn definition(ca_bundle: &str) -> CustomResourceDefinition {
    let schema = |field: &str| {
        json!({"openAPIV3Schema": {"type": "object", "properties": {
            "spec": {"type": "object", "properties": {field: {"type": "string"}}}}}})
    };
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {"name": "v1", "served": true, "storage": true, "schema": schema("colour")},
                {"name": "v2", "served": true, "storage": false, "schema": schema("color")},
            ],
            "conversion": {"strategy": "Webhook", "webhook": {
                "clientConfig": {
                    "service": {"namespace": "default", "name": "webhook", "path": "/convert"},
                    "caBundle": ca_bundle},
                "conversionReviewVersions": ["v1", "v1beta1"]}}
        }
    }))
    .unwrap()
}

fn widgets(client: &kube::Client, version: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(GROUP, version, "Widget");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "widgets");
    Api::namespaced_with(client.clone(), "default", &ar)
}

fn widget(version: &str, name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": format!("{GROUP}/{version}"), "kind": "Widget",
        "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap()
}

fn spec(o: &DynamicObject) -> Value {
    o.data["spec"].clone()
}

fn api_error(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("not an API error: {other:?}"),
    }
}

/// The Service and Endpoints the webhook is reached through.
async fn webhook_service(client: &kube::Client, port: u16) {
    for (path, body) in [
        (
            "/api/v1/namespaces/default/services",
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "webhook"},
                "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port}]}}),
        ),
        (
            "/api/v1/namespaces/default/endpoints",
            json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "webhook"},
                "subsets": [{"addresses": [{"ip": "127.0.0.1"}],
                    "ports": [{"name": "https", "port": port}]}]}),
        ),
    ] {
        let (code, _, v) = TestApiServer::send_json(client, "POST", path, &body)
            .await
            .unwrap();
        assert_eq!(code, 201, "{v}");
    }
}

/// The next watch event within 10 s.
async fn next_event<S>(stream: &mut S) -> WatchEvent<DynamicObject>
where
    S: futures::Stream<Item = kube::Result<WatchEvent<DynamicObject>>> + Unpin,
{
    tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("no watch event within 10 s")
        .expect("the watch ended")
        .expect("a watch error")
}

/// The next ADDED/MODIFIED object, skipping bookmarks (at most 10 events).
async fn next_object<S>(stream: &mut S) -> (String, DynamicObject)
where
    S: futures::Stream<Item = kube::Result<WatchEvent<DynamicObject>>> + Unpin,
{
    for _ in 0..10 {
        match next_event(stream).await {
            WatchEvent::Added(o) => return ("ADDED".into(), o),
            WatchEvent::Modified(o) => return ("MODIFIED".into(), o),
            WatchEvent::Deleted(o) => return ("DELETED".into(), o),
            WatchEvent::Bookmark(_) => continue,
            WatchEvent::Error(e) => panic!("watch error: {e:?}"),
        }
    }
    panic!("no object event in 10 events");
}

async fn setup() -> (TestApiServer, WebhookServer, Arc<Seen>) {
    let seen = Arc::new(Seen::default());
    let hook = conversion_webhook(seen.clone()).await;
    let server = TestApiServer::start().await.unwrap();
    let client = server.client.clone();
    webhook_service(&client, hook.port).await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let created = crds
        .create(&PostParams::default(), &definition(&hook.ca_bundle()))
        .await
        .unwrap();
    // The service port defaults to 443.
    let port = created.spec.conversion.as_ref().and_then(|c| {
        c.webhook
            .as_ref()?
            .client_config
            .as_ref()?
            .service
            .as_ref()?
            .port
    });
    assert_eq!(port, Some(443));
    assert!(
        eventually(|| crd_established(&client, CRD_NAME)).await,
        "never established"
    );
    (server, hook, seen)
}

#[tokio::test]
async fn webhook_conversion_serves_every_version_from_the_storage_version() {
    let (server, _hook, seen) = setup().await;
    let client = server.client.clone();
    let (v1, v2) = (widgets(&client, "v1"), widgets(&client, "v2"));

    // Both versions are discovered.
    let (code, _, group) =
        TestApiServer::send_json(&client, "GET", &format!("/apis/{GROUP}"), &Value::Null)
            .await
            .unwrap();
    assert_eq!(code, 200, "{group}");
    let versions: Vec<&str> = group["versions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["version"].as_str())
        .collect();
    assert_eq!(versions, ["v2", "v1"]);

    // Created in v2: answered in v2, stored in v1.
    let created = v2
        .create(
            &PostParams::default(),
            &widget("v2", "a", json!({"color": "red"})),
        )
        .await
        .unwrap();
    assert_eq!(
        created.types.as_ref().unwrap().api_version,
        format!("{GROUP}/v2")
    );
    assert_eq!(spec(&created), json!({"color": "red"}));
    assert!(seen.count() >= 1);
    assert_eq!(seen.reviews.lock().unwrap()[0], (format!("{GROUP}/v1"), 1));

    // Read in v1: the stored shape, no webhook call (nothing to convert).
    let before = seen.count();
    let stored = v1.get("a").await.unwrap();
    assert_eq!(seen.count(), before);
    assert_eq!(
        stored.types.as_ref().unwrap().api_version,
        format!("{GROUP}/v1")
    );
    assert_eq!(spec(&stored), json!({"colour": "red"}));
    assert_eq!(stored.metadata.uid, created.metadata.uid);

    // Read in v2: converted.
    let got = v2.get("a").await.unwrap();
    assert_eq!(
        got.types.as_ref().unwrap().api_version,
        format!("{GROUP}/v2")
    );
    assert_eq!(spec(&got), json!({"color": "red"}));
    assert_eq!(
        got.metadata.resource_version,
        stored.metadata.resource_version
    );
    assert_eq!(got.metadata.uid, stored.metadata.uid);

    // A list in v2 converts its items in one review.
    v1.create(
        &PostParams::default(),
        &widget("v1", "b", json!({"colour": "blue"})),
    )
    .await
    .unwrap();
    let before = seen.count();
    let listed = v2.list(&ListParams::default()).await.unwrap();
    assert_eq!(seen.count(), before + 1);
    assert_eq!(
        seen.reviews.lock().unwrap().last().cloned(),
        Some((format!("{GROUP}/v2"), 2))
    );
    let mut items: Vec<(String, Value)> = listed
        .items
        .iter()
        .map(|o| (o.metadata.name.clone().unwrap(), spec(o)))
        .collect();
    items.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        items,
        [
            ("a".to_string(), json!({"color": "red"})),
            ("b".to_string(), json!({"color": "blue"}))
        ]
    );
    // A paged list from storage too.
    let page = v2.list(&ListParams::default().limit(1)).await.unwrap();
    assert_eq!(page.items.len(), 1);
    assert!(spec(&page.items[0])["color"].is_string());

    // A watch in v2 sees the v2 shape, for the initial objects and for changes.
    let mut watch = v2
        .watch(&WatchParams::default().timeout(30), "0")
        .await
        .unwrap()
        .boxed();
    let mut initial = Vec::new();
    for _ in 0..2 {
        let (kind, o) = next_object(&mut watch).await;
        assert_eq!(kind, "ADDED");
        assert_eq!(o.types.as_ref().unwrap().api_version, format!("{GROUP}/v2"));
        initial.push(spec(&o));
    }
    assert!(initial.contains(&json!({"color": "red"})), "{initial:?}");

    // Patched through v2: the patch applies to the v2 shape and is stored in v1.
    let patched = v2
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"color": "green"}, "metadata": {"labels": {"l": "1"}}})),
        )
        .await
        .unwrap();
    assert_eq!(spec(&patched), json!({"color": "green"}));
    assert_eq!(
        patched.metadata.labels.as_ref().unwrap().get("l").unwrap(),
        "1"
    );
    let (kind, o) = next_object(&mut watch).await;
    assert_eq!(kind, "MODIFIED");
    assert_eq!(spec(&o), json!({"color": "green"}));
    assert_eq!(
        o.metadata.resource_version,
        patched.metadata.resource_version
    );
    assert_eq!(
        spec(&v1.get("a").await.unwrap()),
        json!({"colour": "green"})
    );

    // Replaced through v2 (PUT) as well.
    let mut current = v2.get("a").await.unwrap();
    current.data["spec"] = json!({"color": "yellow"});
    let replaced = v2
        .replace("a", &PostParams::default(), &current)
        .await
        .unwrap();
    assert_eq!(spec(&replaced), json!({"color": "yellow"}));
    assert_eq!(
        spec(&v1.get("a").await.unwrap()),
        json!({"colour": "yellow"})
    );

    // Deleted through v2: the answer is upstream's Status naming it (custom resources
    // do not answer with the deleted object); the watch's DELETED event is in v2.
    let deleted = v2.delete("b", &Default::default()).await.unwrap();
    let status = deleted.right().expect("deleted at once");
    assert_eq!(status.details.map(|d| d.name), Some("b".to_string()));
    let (kind, o) = next_object(&mut watch).await;
    assert_eq!(kind, "MODIFIED");
    assert_eq!(spec(&o), json!({"color": "yellow"}));
    let (kind, o) = next_object(&mut watch).await;
    assert_eq!(kind, "DELETED");
    assert_eq!(spec(&o), json!({"color": "blue"}));
    server.stop().await;
}

#[tokio::test]
async fn failed_conversions_answer_errors_and_change_nothing() {
    let (server, mut hook, seen) = setup().await;
    let client = server.client.clone();
    let (v1, v2) = (widgets(&client, "v1"), widgets(&client, "v2"));
    v1.create(
        &PostParams::default(),
        &widget("v1", "a", json!({"colour": "red"})),
    )
    .await
    .unwrap();
    let stored = v1.get("a").await.unwrap();

    // A watch in v2 opened while the webhook works.
    let mut watch = v2
        .watch(&WatchParams::default().timeout(30), "0")
        .await
        .unwrap()
        .boxed();
    let (kind, _) = next_object(&mut watch).await;
    assert_eq!(kind, "ADDED");

    // A converted object in the wrong version.
    seen.set(Mode::WrongApiVersion);
    let e = api_error(v2.get("a").await.unwrap_err());
    assert_eq!(e.code, 500);
    assert_eq!(e.reason, "InternalError");
    assert_eq!(
        e.message,
        format!(
            "Internal error occurred: conversion webhook for {GROUP}/v1, Kind=Widget returned invalid object at index 0: invalid groupVersion (expected {GROUP}/v2, received {GROUP}/v9)"
        )
    );
    let e = api_error(
        v2.create(
            &PostParams::default(),
            &widget("v2", "c", json!({"color": "red"})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(e.code, 500, "{e:?}");
    assert!(
        e.message.starts_with(&format!(
            "Internal error occurred: conversion webhook for {GROUP}/v2, Kind=Widget returned invalid object at index 0: invalid groupVersion"
        )),
        "{}",
        e.message
    );
    assert_eq!(api_error(v1.get("c").await.unwrap_err()).code, 404);

    // An event the webhook cannot convert ends the v2 watch with an ERROR event.
    v1.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"colour": "pink"}})),
    )
    .await
    .unwrap();
    let mut ended = None;
    for _ in 0..5 {
        match next_event(&mut watch).await {
            WatchEvent::Bookmark(_) => continue,
            WatchEvent::Error(e) => {
                ended = Some(e);
                break;
            }
            other => panic!("expected an ERROR event, got {other:?}"),
        }
    }
    let e = ended.expect("no ERROR event");
    assert_eq!(e.code, 500);
    assert!(
        e.message.contains("conversion webhook for"),
        "{}",
        e.message
    );
    let rest: Vec<_> = tokio::time::timeout(Duration::from_secs(10), watch.try_collect::<Vec<_>>())
        .await
        .expect("the watch did not end")
        .unwrap_or_default();
    assert!(rest.is_empty(), "{rest:?}");

    // A converted object with another name.
    seen.set(Mode::Rename);
    let e = api_error(v2.list(&ListParams::default()).await.unwrap_err());
    assert_eq!(e.code, 500);
    assert_eq!(
        e.message,
        format!(
            "Internal error occurred: conversion webhook for {GROUP}/v1, Kind=Widget returned invalid converted object at index 1: must have the same name: a != renamed"
        )
    );

    // The webhook is down: reads and writes through v2 fail with upstream's message
    // and the stored object stays as it was; v1 needs no conversion.
    seen.set(Mode::Convert);
    let current = v1.get("a").await.unwrap();
    hook.stop().await;
    let e = api_error(v2.get("a").await.unwrap_err());
    assert_eq!(e.code, 500);
    assert_eq!(e.reason, "InternalError");
    let prefix = format!(
        "Internal error occurred: conversion webhook for {GROUP}/v1, Kind=Widget failed: Post \"https://webhook.default.svc:443/convert?timeout=30s\": dial tcp 127.0.0.1:{}: ",
        hook.port
    );
    assert!(e.message.starts_with(&prefix), "{}", e.message);
    let e = api_error(
        v2.patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"color": "black"}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(e.code, 500);
    assert!(e.message.starts_with(&prefix), "{}", e.message);
    let e = api_error(
        v2.create(
            &PostParams::default(),
            &widget("v2", "d", json!({"color": "red"})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(e.code, 500);
    assert!(
        e.message.starts_with(&format!(
            "Internal error occurred: conversion webhook for {GROUP}/v2, Kind=Widget failed: Post "
        )),
        "{}",
        e.message
    );
    let after = v1.get("a").await.unwrap();
    assert_eq!(
        after.metadata.resource_version,
        current.metadata.resource_version
    );
    assert_eq!(spec(&after), json!({"colour": "pink"}));
    assert_ne!(
        after.metadata.resource_version,
        stored.metadata.resource_version
    );
    assert_eq!(api_error(v1.get("d").await.unwrap_err()).code, 404);
    let e = api_error(v2.list(&ListParams::default()).await.unwrap_err());
    assert_eq!(e.code, 500);
    assert_eq!(
        v1.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );
    server.stop().await;
}
