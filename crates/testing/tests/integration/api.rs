//! The apiserver through kube-rs, over real HTTPS, on the embedded store.

use std::time::Duration;

use ferrokube_testing::TestApiServer;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Service};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, VersionMatch, WatchEvent,
    WatchParams,
};
use serde_json::json;

fn cm(name: &str, labels: serde_json::Value) -> ConfigMap {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}),
    )
    .unwrap()
}

fn status_code(e: &kube::Error) -> u16 {
    match e {
        kube::Error::Api(s) => s.code,
        other => panic!("not an API error: {other:?}"),
    }
}

#[tokio::test]
async fn crud_errors_and_builtins() {
    let srv = TestApiServer::start().await.unwrap();
    let c = srv.client.clone();
    let ns: Api<Namespace> = Api::all(c.clone());
    let names: Vec<String> = ns
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|n| n.metadata.name.unwrap())
        .collect();
    assert_eq!(
        names,
        ["default", "kube-node-lease", "kube-public", "kube-system"]
    );
    // NamespaceLifecycle keeps the immortal ones (kube-node-lease may go).
    for immortal in ["default", "kube-system", "kube-public"] {
        let e = ns
            .delete(immortal, &DeleteParams::default())
            .await
            .unwrap_err();
        assert_eq!(status_code(&e), 403);
        let kube::Error::Api(status) = e else {
            unreachable!()
        };
        assert_eq!(
            status.message,
            format!("namespaces \"{immortal}\" is forbidden: this namespace may not be deleted")
        );
        assert!(
            ns.get(immortal)
                .await
                .unwrap()
                .metadata
                .deletion_timestamp
                .is_none()
        );
    }
    let svc: Api<Service> = Api::namespaced(c.clone(), "default");
    assert_eq!(
        svc.get("kubernetes")
            .await
            .unwrap()
            .spec
            .unwrap()
            .cluster_ip
            .as_deref(),
        Some("10.96.0.1")
    );

    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    let created = cms
        .create(&PostParams::default(), &cm("a", json!({"app": "x"})))
        .await
        .unwrap();
    assert!(created.metadata.uid.is_some());
    assert!(created.metadata.creation_timestamp.is_some());
    // 409 AlreadyExists, 404 NotFound, 404 missing namespace, 422 Invalid.
    let e = cms
        .create(&PostParams::default(), &cm("a", json!({})))
        .await
        .unwrap_err();
    assert_eq!(status_code(&e), 409);
    let e = cms.get("nope").await.unwrap_err();
    match &e {
        kube::Error::Api(s) => assert_eq!(
            (s.code, s.reason.as_str(), s.message.as_str()),
            (404, "NotFound", "configmaps \"nope\" not found")
        ),
        _ => panic!(),
    }
    let missing: Api<ConfigMap> = Api::namespaced(c.clone(), "missing");
    assert_eq!(
        status_code(
            &missing
                .create(&PostParams::default(), &cm("a", json!({})))
                .await
                .unwrap_err()
        ),
        404
    );
    let e = cms
        .create(&PostParams::default(), &cm("", json!({})))
        .await
        .unwrap_err();
    assert_eq!(status_code(&e), 422);

    // Stale update: 409; fresh update bumps the resourceVersion.
    let mut upd = created.clone();
    upd.data = Some([("k".to_string(), "v2".to_string())].into());
    let updated = cms
        .replace("a", &PostParams::default(), &upd)
        .await
        .unwrap();
    assert_ne!(
        updated.metadata.resource_version,
        created.metadata.resource_version
    );
    assert_eq!(
        status_code(
            &cms.replace("a", &PostParams::default(), &upd)
                .await
                .unwrap_err()
        ),
        409
    );

    // Dry run writes nothing.
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    cms.create(&dry, &cm("dry", json!({}))).await.unwrap();
    assert_eq!(status_code(&cms.get("dry").await.unwrap_err()), 404);

    // Selectors.
    cms.create(&PostParams::default(), &cm("b", json!({"app": "y"})))
        .await
        .unwrap();
    let sel = |s: &str| ListParams::default().labels(s);
    assert_eq!(cms.list(&sel("app=x")).await.unwrap().items.len(), 1);
    assert_eq!(cms.list(&sel("app in (x,y)")).await.unwrap().items.len(), 2);
    assert_eq!(cms.list(&sel("app!=x")).await.unwrap().items.len(), 1);
    assert_eq!(
        cms.list(&ListParams::default().fields("metadata.name=b"))
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    let all: Api<ConfigMap> = Api::all(c.clone());
    assert_eq!(all.list(&sel("app")).await.unwrap().items.len(), 2);

    // A ConfigMap's DELETE answers with upstream's Status naming it, not the object.
    let uid = cms.get("a").await.unwrap().metadata.uid;
    let status = cms
        .delete("a", &DeleteParams::default())
        .await
        .unwrap()
        .right()
        .expect("a Status");
    assert_eq!(
        status.status,
        Some(kube::core::response::StatusSummary::Success)
    );
    let details = status.details.expect("details");
    assert_eq!(
        (
            details.name.as_str(),
            details.kind.as_str(),
            Some(details.uid)
        ),
        ("a", "configmaps", uid)
    );
    assert_eq!(status_code(&cms.get("a").await.unwrap_err()), 404);
    srv.stop().await;
}

#[tokio::test]
async fn patches_generation_and_status() {
    let srv = TestApiServer::start().await.unwrap();
    let deps: Api<Deployment> = Api::namespaced(srv.client.clone(), "default");
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}},
        "status": {"replicas": 7}
    })).unwrap();
    let d = deps.create(&PostParams::default(), &d).await.unwrap();
    assert_eq!(d.metadata.generation, Some(1));
    assert_eq!(
        d.status.as_ref().and_then(|s| s.replicas),
        None,
        "status is reset on create"
    );
    let pp = PatchParams::default();
    let d = deps
        .patch("web", &pp, &Patch::Merge(json!({"spec": {"replicas": 2}})))
        .await
        .unwrap();
    assert_eq!(d.metadata.generation, Some(2));
    let d = deps
        .patch(
            "web",
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
        )
        .await
        .unwrap();
    assert_eq!(
        d.metadata.generation,
        Some(2),
        "metadata changes do not bump generation"
    );
    let d = deps
        .patch(
            "web",
            &pp,
            &Patch::<()>::Json(
                serde_json::from_value(
                    json!([{"op": "replace", "path": "/spec/replicas", "value": 3}]),
                )
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(d.spec.unwrap().replicas, Some(3));
    let d = deps
        .patch(
            "web",
            &pp,
            &Patch::Strategic(json!({"spec": {"replicas": 4}})),
        )
        .await
        .unwrap();
    assert_eq!(d.spec.as_ref().unwrap().replicas, Some(4));
    // Status writes go through the status subresource only and leave spec alone.
    let d = deps
        .patch_status(
            "web",
            &pp,
            &Patch::Merge(json!({"spec": {"replicas": 9}, "status": {"replicas": 4}})),
        )
        .await
        .unwrap();
    assert_eq!(d.status.unwrap().replicas, Some(4));
    assert_eq!(d.spec.unwrap().replicas, Some(4));
    assert_eq!(
        d.metadata.generation,
        Some(4),
        "status writes do not bump generation"
    );
    // Scale subresource.
    let s = deps.get_scale("web").await.unwrap();
    assert_eq!(s.spec.unwrap().replicas, Some(4));
    deps.patch_scale("web", &pp, &Patch::Merge(json!({"spec": {"replicas": 5}})))
        .await
        .unwrap();
    assert_eq!(
        deps.get("web").await.unwrap().spec.unwrap().replicas,
        Some(5)
    );
    // A Scale that is not one, a replica count that is no number, another object's
    // name: 400s, never a scale to 0.
    let bad_puts = [
        json!({"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "web"},
            "spec": {"replicas": "x"}}),
        json!({"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "other"},
            "spec": {"replicas": 1}}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": 1}}),
    ];
    for body in bad_puts {
        let (code, _, answer) = TestApiServer::raw(
            &srv.client,
            "PUT",
            "/apis/apps/v1/namespaces/default/deployments/web/scale",
            &[("Content-Type", "application/json")],
            body.to_string().into_bytes(),
        )
        .await
        .unwrap();
        assert_eq!(code, 400, "{}", String::from_utf8_lossy(&answer));
    }
    let e = deps
        .patch_scale(
            "web",
            &pp,
            &Patch::Merge(json!({"spec": {"replicas": "x"}})),
        )
        .await
        .unwrap_err();
    assert_eq!(status_code(&e), 400, "{e}");
    assert_eq!(
        deps.get("web").await.unwrap().spec.unwrap().replicas,
        Some(5)
    );
    // Server-side apply: tests/server_side_apply.rs.
    srv.stop().await;
}

#[tokio::test]
async fn pagination_and_watch() {
    let srv = TestApiServer::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(srv.client.clone(), "default");
    for i in 0..5 {
        cms.create(&PostParams::default(), &cm(&format!("c{i}"), json!({})))
            .await
            .unwrap();
    }
    let p1 = cms.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(p1.items.len(), 2);
    assert_eq!(p1.metadata.remaining_item_count, Some(3));
    let token = p1.metadata.continue_.clone().unwrap();
    // A write between pages does not show up in the same list.
    cms.create(&PostParams::default(), &cm("c9", json!({})))
        .await
        .unwrap();
    let p2 = cms
        .list(&ListParams::default().limit(10).continue_token(&token))
        .await
        .unwrap();
    let names: Vec<_> = p2
        .items
        .iter()
        .map(|c| c.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["c2", "c3", "c4"]);

    // Watch from a resourceVersion replays later events.
    let rv = p1.metadata.resource_version.clone().unwrap();
    let mut stream = cms
        .watch(&WatchParams::default().timeout(10), &rv)
        .await
        .unwrap()
        .boxed();
    let first = tokio::time::timeout(Duration::from_secs(5), stream.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    match first {
        WatchEvent::Added(c) => assert_eq!(c.metadata.name.as_deref(), Some("c9")),
        other => panic!("unexpected {other:?}"),
    }
    cms.delete("c0", &DeleteParams::default()).await.unwrap();
    let next = tokio::time::timeout(Duration::from_secs(5), stream.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(matches!(next, WatchEvent::Deleted(c) if c.metadata.name.as_deref() == Some("c0")));

    // The kube-runtime watcher (list + watch, or streaming list) sees everything.
    let w = kube::runtime::watcher(cms.clone(), kube::runtime::watcher::Config::default());
    let objs = kube::runtime::WatchStreamExt::applied_objects(w).take(5);
    let got: Vec<_> = tokio::time::timeout(Duration::from_secs(10), objs.collect::<Vec<_>>())
        .await
        .unwrap();
    assert_eq!(got.len(), 5);
    assert!(got.iter().all(|r| r.is_ok()));
    srv.stop().await;
}

/// List and watch options are checked as upstream's `ValidateListOptions` (422 on
/// `ListOptions`), and a watch starts where upstream's cacher starts it: with
/// `sendInitialEvents=false` at the current state without replaying it, with
/// `sendInitialEvents=true` after the state, its end bookmark only when bookmarks are
/// allowed.
#[tokio::test]
async fn list_and_watch_options_as_upstream() {
    let srv = TestApiServer::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(srv.client.clone(), "default");
    cms.create(&PostParams::default(), &cm("here", json!({})))
        .await
        .unwrap();
    let collection = "/api/v1/namespaces/default/configmaps";
    let get = |query: String| {
        let client = srv.client.clone();
        async move {
            let path = format!("{collection}?{query}");
            let (code, _, body) = TestApiServer::raw(&client, "GET", &path, &[], vec![])
                .await
                .unwrap();
            (code, String::from_utf8(body.to_vec()).unwrap())
        }
    };
    for (query, cause) in [
        (
            "resourceVersionMatch=Exact",
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
        ),
        (
            "resourceVersion=0&resourceVersionMatch=Bogus",
            "resourceVersionMatch: Unsupported value: \"Bogus\": supported values: \"Exact\", \"NotOlderThan\", \"\"",
        ),
        (
            "sendInitialEvents=true",
            "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list",
        ),
        (
            "watch=true&resourceVersionMatch=NotOlderThan",
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
        ),
    ] {
        let (code, body) = get(query.into()).await;
        assert_eq!(code, 422, "{query}: {body}");
        let status: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            status["message"],
            format!("ListOptions.meta.k8s.io \"\" is invalid: {cause}"),
            "{query}"
        );
    }

    let watch = "watch=true&timeoutSeconds=1&resourceVersionMatch=NotOlderThan";
    for rv in ["", "&resourceVersion=0"] {
        let (code, body) = get(format!("{watch}&sendInitialEvents=false{rv}")).await;
        assert_eq!(code, 200);
        assert_eq!(body, "", "no state replayed ({rv})");
    }
    let (code, body) = get(format!("{watch}&sendInitialEvents=true")).await;
    assert_eq!(code, 200, "{body}");
    let types: Vec<String> = body
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["type"].to_string())
        .collect();
    assert!(!types.is_empty(), "{body}");
    assert!(types.iter().all(|t| t == "\"ADDED\""), "{body}");
    let (_, body) = get(format!(
        "{watch}&sendInitialEvents=true&allowWatchBookmarks=true"
    ))
    .await;
    let last: serde_json::Value = serde_json::from_str(body.lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "BOOKMARK");
    assert_eq!(
        last["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    srv.stop().await;
}

/// A list not older than a resourceVersion is read from the watch cache and, unless the
/// version is 0, paged as upstream's cache pages it: each page ends at the limit's last
/// match, the next ones come at the same revision (writes in between stay out), and the
/// remaining count is given without a selector only.
#[tokio::test]
async fn lists_not_older_than_a_version_are_paged_from_the_cache() {
    let srv = TestApiServer::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(srv.client.clone(), "default");
    let mut created = None;
    for i in 0..5 {
        let mut c = cm(&format!("p{i}"), json!({}));
        c.metadata.labels = Some([("odd".to_owned(), (i % 2).to_string())].into());
        created = Some(cms.create(&PostParams::default(), &c).await.unwrap());
    }
    let rv = created.unwrap().metadata.resource_version.unwrap();
    let names = |l: &kube::core::ObjectList<ConfigMap>| -> Vec<String> {
        l.items
            .iter()
            .filter_map(|c| c.metadata.name.clone())
            .filter(|n| n.starts_with('p'))
            .collect()
    };
    let not_older = |limit: u32| {
        ListParams::default()
            .limit(limit)
            .at(&rv)
            .matching(VersionMatch::NotOlderThan)
    };
    let p1 = cms.list(&not_older(2)).await.unwrap();
    assert_eq!(names(&p1), ["p0", "p1"]);
    // Whatever else the namespace holds (its root CA configmap) is counted too.
    let total = cms.list(&ListParams::default()).await.unwrap().items.len();
    assert_eq!(
        p1.metadata.remaining_item_count,
        Some(i64::try_from(total).unwrap() - 2)
    );
    let token = p1.metadata.continue_.clone().expect("a continue token");
    cms.create(&PostParams::default(), &cm("p5", json!({})))
        .await
        .unwrap();
    let rest = cms
        .list(&ListParams::default().limit(100).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(
        names(&rest),
        ["p2", "p3", "p4"],
        "read at the first page's revision"
    );
    assert_eq!(rest.metadata.resource_version, p1.metadata.resource_version);
    assert!(rest.metadata.continue_.is_none());

    // With a selector: the page ends at its second match, with no remaining count.
    let odd = cms.list(&not_older(2).labels("odd=1")).await.unwrap();
    assert_eq!(names(&odd), ["p1", "p3"]);
    assert!(odd.metadata.remaining_item_count.is_none());
    let token = odd.metadata.continue_.clone().expect("a continue token");
    let rest = cms
        .list(
            &ListParams::default()
                .limit(100)
                .labels("odd=1")
                .continue_token(&token),
        )
        .await
        .unwrap();
    assert!(names(&rest).is_empty(), "{:?}", names(&rest));

    // At resourceVersion 0 the limit is ignored, as upstream ignores it there (kube-rs
    // leaves such a version out, so the request is made by hand).
    let (code, _, body) = TestApiServer::raw(
        &srv.client,
        "GET",
        "/api/v1/namespaces/default/configmaps?limit=2&resourceVersion=0",
        &[],
        vec![],
    )
    .await
    .unwrap();
    assert_eq!(code, 200);
    let all: kube::core::ObjectList<ConfigMap> = serde_json::from_slice(&body).unwrap();
    assert_eq!(names(&all), ["p0", "p1", "p2", "p3", "p4", "p5"]);
    assert!(all.metadata.continue_.is_none());
    srv.stop().await;
}

/// Upstream's deprecated watch paths are still served (and documented in OpenAPI): a
/// `/watch/` path watches the collection, or with a name the one object.
#[tokio::test]
async fn deprecated_watch_paths_watch_a_collection_or_one_object() {
    let srv = TestApiServer::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(srv.client.clone(), "default");
    for name in ["w1", "w2"] {
        cms.create(&PostParams::default(), &cm(name, json!({})))
            .await
            .unwrap();
    }
    let watched = |path: &'static str| {
        let client = srv.client.clone();
        async move {
            let (code, _, body) = TestApiServer::raw(&client, "GET", path, &[], vec![])
                .await
                .unwrap();
            assert_eq!(code, 200, "{path}: {}", String::from_utf8_lossy(&body));
            String::from_utf8_lossy(&body)
                .lines()
                .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
                .map(|e| {
                    format!(
                        "{} {}",
                        e["type"].as_str().unwrap(),
                        e["object"]["metadata"]["name"].as_str().unwrap_or_default()
                    )
                })
                .filter(|e| e.ends_with('1') || e.ends_with('2') || e.ends_with("default"))
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        watched("/api/v1/watch/namespaces/default/configmaps?timeoutSeconds=1").await,
        ["ADDED w1", "ADDED w2"]
    );
    assert_eq!(
        watched("/api/v1/watch/namespaces/default/configmaps/w2?timeoutSeconds=1").await,
        ["ADDED w2"]
    );
    // A field selector of the request's own narrows it further.
    assert!(
        watched(
            "/api/v1/watch/namespaces/default/configmaps/w2?timeoutSeconds=1&fieldSelector=metadata.namespace%3Dother"
        )
        .await
        .is_empty()
    );
    assert_eq!(
        watched("/api/v1/watch/namespaces/default?timeoutSeconds=1").await,
        ["ADDED default"]
    );
    // No subresource is watched.
    let (code, _, _) = TestApiServer::raw(
        &srv.client,
        "GET",
        "/api/v1/watch/namespaces/default/configmaps/w2/status",
        &[],
        vec![],
    )
    .await
    .unwrap();
    assert_eq!(code, 404);
    srv.stop().await;
}

/// What a delete does with an object's dependents when it says nothing, as upstream's
/// resources default it: core/v1 ReplicationControllers and batch/v1 Jobs orphan them
/// (the `orphan` finalizer, left for the garbage collector), the others delete them in
/// the background (gone at once); Events never get the collector's finalizers; the
/// deprecated `orphanDependents` is honoured; a background delete takes the
/// collector's finalizers off an object that has them.
#[tokio::test]
async fn deletes_follow_each_resources_garbage_collection_default() {
    let srv = TestApiServer::start().await.unwrap();
    let client = srv.client.clone();
    let send = |method: &'static str, path: String, body: serde_json::Value| {
        let client = client.clone();
        async move {
            let (code, _, v) = TestApiServer::send_json(&client, method, &path, &body)
                .await
                .unwrap();
            (code, v)
        }
    };
    let template = json!({"metadata": {"labels": {"app": "x"}},
        "spec": {"containers": [{"name": "c", "image": "i"}]}});
    let objects = [
        (
            "/api/v1/namespaces/default/replicationcontrollers",
            json!({"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "rc"},
                "spec": {"replicas": 0, "selector": {"app": "x"}, "template": template}}),
        ),
        (
            "/apis/batch/v1/namespaces/default/jobs",
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "job"},
                "spec": {"suspend": true, "template": {"metadata": {}, "spec": {
                    "restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}}),
        ),
        (
            "/apis/apps/v1/namespaces/default/replicasets",
            json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "rs"},
                "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "x"}}, "template": template}}),
        ),
        (
            "/api/v1/namespaces/default/events",
            json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "ev"},
                "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
                "reason": "R", "message": "m", "type": "Normal"}),
        ),
    ];
    for (path, body) in &objects {
        let (code, v) = send("POST", path.to_string(), body.clone()).await;
        assert_eq!(code, 201, "{v}");
    }
    // No options: the RC and the Job are kept for the collector to orphan their pods.
    for (path, name) in [
        ("/api/v1/namespaces/default/replicationcontrollers", "rc"),
        ("/apis/batch/v1/namespaces/default/jobs", "job"),
    ] {
        let (code, v) = send("DELETE", format!("{path}/{name}"), json!(null)).await;
        assert_eq!(code, 200, "{v}");
        let (code, v) = send("GET", format!("{path}/{name}"), json!(null)).await;
        assert_eq!(code, 200, "{name} is kept: {v}");
        assert_eq!(v["metadata"]["finalizers"], json!(["orphan"]), "{name}");
        assert!(v["metadata"]["deletionTimestamp"].is_string());
        // A background delete takes the finalizer off, and the object goes.
        let (code, v) = send(
            "DELETE",
            format!("{path}/{name}"),
            json!({"propagationPolicy": "Background"}),
        )
        .await;
        assert_eq!(code, 200, "{v}");
        let (code, _) = send("GET", format!("{path}/{name}"), json!(null)).await;
        assert_eq!(code, 404, "{name}");
    }
    let rs = "/apis/apps/v1/namespaces/default/replicasets/rs";
    let (code, v) = send("DELETE", rs.into(), json!(null)).await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(send("GET", rs.into(), json!(null)).await.0, 404);
    // Foreground on an Event: no finalizer, gone at once.
    let ev = "/api/v1/namespaces/default/events/ev";
    let (code, v) = send(
        "DELETE",
        ev.into(),
        json!({"propagationPolicy": "Foreground"}),
    )
    .await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(send("GET", ev.into(), json!(null)).await.0, 404);

    // The deprecated orphanDependents, and never with a propagation policy.
    let cms = "/api/v1/namespaces/default/configmaps";
    let (code, v) = send(
        "POST",
        cms.into(),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    let (code, v) = send(
        "DELETE",
        format!("{cms}/cm?orphanDependents=true&propagationPolicy=Orphan"),
        json!(null),
    )
    .await;
    assert_eq!(code, 422, "{v}");
    assert_eq!(v["details"]["kind"], "DeleteOptions");
    let (code, v) = send(
        "DELETE",
        format!("{cms}/cm?orphanDependents=true"),
        json!(null),
    )
    .await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["metadata"]["finalizers"], json!(["orphan"]));
    srv.stop().await;
}

/// A collection DELETE removes what its selector matches (nothing under `dryRun`) and
/// answers the deleted objects' list encoded as the client asked (YAML, protobuf),
/// as upstream's `transformResponseObject` encodes it.
#[tokio::test]
async fn delete_collection_answers_in_the_asked_encoding() {
    let srv = TestApiServer::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(srv.client.clone(), "default");
    for (name, app) in [("a", "gone"), ("b", "gone"), ("c", "kept")] {
        cms.create(&PostParams::default(), &cm(name, json!({"app": app})))
            .await
            .unwrap();
    }
    let collection = "/api/v1/namespaces/default/configmaps?labelSelector=app%3Dgone";
    let names = |list: &serde_json::Value| -> Vec<String> {
        let mut names: Vec<String> = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        names.sort();
        names
    };

    let (code, content_type, dry) = TestApiServer::send_decoded(
        &srv.client,
        "DELETE",
        &format!("{collection}&dryRun=All"),
        &[("accept", ferrokube_protobuf::MEDIA_TYPE)],
        vec![],
    )
    .await
    .unwrap();
    assert_eq!(
        (code, content_type.as_str()),
        (200, ferrokube_protobuf::MEDIA_TYPE)
    );
    assert_eq!(dry["kind"], "ConfigMapList");
    assert_eq!(names(&dry), ["a", "b"]);
    assert_eq!(
        cms.list(&ListParams::default()).await.unwrap().items.len(),
        3
    );

    let (code, headers, body) = TestApiServer::raw(
        &srv.client,
        "DELETE",
        collection,
        &[("accept", "application/yaml")],
        vec![],
    )
    .await
    .unwrap();
    assert_eq!(code, 200);
    assert_eq!(headers["content-type"], "application/yaml");
    let deleted: serde_json::Value = serde_yaml_ng::from_slice(&body).unwrap();
    assert_eq!(deleted["kind"], "ConfigMapList");
    assert_eq!(names(&deleted), ["a", "b"]);
    let left = cms.list(&ListParams::default()).await.unwrap();
    let left: Vec<_> = left
        .items
        .iter()
        .map(|c| c.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(left, ["c"]);
}

/// An update keeps the stored system metadata as upstream's `BeforeUpdate` keeps it:
/// the creation time silently; a replacing body's uid is a precondition (409 when it
/// names another object); a patch that changes the uid, or sets a deletion time on a
/// live object, is refused as an immutable change (422), not silently undone.
#[tokio::test]
async fn updates_keep_system_metadata_as_upstream() {
    let srv = TestApiServer::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(srv.client.clone(), "default");
    let created = cms
        .create(&PostParams::default(), &cm("m", json!({})))
        .await
        .unwrap();
    let uid = created.metadata.uid.clone().unwrap();
    let path = "/api/v1/namespaces/default/configmaps/m";
    let send = |method: &'static str, content_type: &'static str, body: serde_json::Value| {
        let client = srv.client.clone();
        async move {
            let (code, _, bytes) = TestApiServer::raw(
                &client,
                method,
                path,
                &[("content-type", content_type)],
                serde_json::to_vec(&body).unwrap(),
            )
            .await
            .unwrap();
            (
                code,
                serde_json::from_slice::<serde_json::Value>(&bytes).unwrap(),
            )
        }
    };

    // The body must name the URL's object (upstream's `checkName`), after its
    // namespace.
    for (metadata, message) in [
        (
            json!({}),
            "the name of the object () does not match the name on the URL (m)",
        ),
        (
            json!({"name": "n"}),
            "the name of the object (n) does not match the name on the URL (m)",
        ),
        (
            json!({"name": "n", "namespace": "kube-system"}),
            "the namespace of the provided object does not match the namespace sent on the request",
        ),
    ] {
        let (code, v) = send("PUT", "application/json", json!({"metadata": metadata})).await;
        assert_eq!((code, v["message"].as_str()), (400, Some(message)), "{v}");
    }
    let (code, v) = send(
        "PUT",
        "application/json",
        json!({"metadata": {"name": "m", "uid": "another", "creationTimestamp": "2001-01-01T00:00:00Z"}}),
    )
    .await;
    assert_eq!(code, 409, "{v}");
    assert_eq!(
        v["message"],
        format!(
            "Operation cannot be fulfilled on configmaps \"m\": Precondition failed: UID in precondition: another, UID in object meta: {uid}"
        )
    );
    let (code, v) = send(
        "PUT",
        "application/json",
        json!({"metadata": {"name": "m", "uid": uid, "creationTimestamp": "2001-01-01T00:00:00Z"}, "data": {"a": "b"}}),
    )
    .await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(
        v["metadata"]["creationTimestamp"],
        json!(created.metadata.creation_timestamp)
    );
    assert_eq!(v["data"]["a"], "b");

    for (patch, field) in [
        (json!({"metadata": {"uid": "another"}}), "metadata.uid"),
        (
            json!({"metadata": {"deletionTimestamp": "2030-01-01T00:00:00Z"}}),
            "metadata.deletionTimestamp",
        ),
    ] {
        let (code, v) = send("PATCH", "application/merge-patch+json", patch).await;
        assert_eq!(code, 422, "{v}");
        assert_eq!(v["details"]["causes"][0]["field"], field, "{v}");
        assert_eq!(
            v["details"]["causes"][0]["reason"], "FieldValueInvalid",
            "{v}"
        );
    }
    let kept = cms.get("m").await.unwrap();
    assert_eq!(kept.metadata.uid.as_deref(), Some(uid.as_str()));
    assert!(kept.metadata.deletion_timestamp.is_none());

    // A create naming a version is refused (upstream's storage error), but for a dry
    // run or a version that is not a number other than 0.
    let collection = "/api/v1/namespaces/default/configmaps";
    for (rv, query, code) in [("7", "", 400), ("7", "?dryRun=All", 201), ("0", "", 201)] {
        let body =
            json!({"metadata": {"name": format!("rv-{rv}{}", query.len()), "resourceVersion": rv}});
        let (got, _, bytes) = TestApiServer::raw(
            &srv.client,
            "POST",
            &format!("{collection}{query}"),
            &[("content-type", "application/json")],
            serde_json::to_vec(&body).unwrap(),
        )
        .await
        .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(got, code, "rv {rv}{query}: {v}");
        if code == 400 {
            assert_eq!(
                v["message"],
                "resourceVersion should not be set on objects to be created"
            );
        }
    }

    // A kind that does not track generation keeps the client's (upstream's
    // strategies leave it alone); one that does starts at 1; a negative one is invalid.
    let deployment_spec = json!({"selector": {"matchLabels": {"a": "b"}},
        "template": {"metadata": {"labels": {"a": "b"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}});
    for (path, spec, want) in [
        (collection, None, 7),
        (
            "/apis/apps/v1/namespaces/default/deployments",
            Some(deployment_spec),
            1,
        ),
    ] {
        let mut body = json!({"metadata": {"name": "gen", "generation": 7}});
        if let Some(spec) = spec {
            body["spec"] = spec;
        }
        let (code, _, v) = TestApiServer::send_json(&srv.client, "POST", path, &body)
            .await
            .unwrap();
        assert_eq!(code, 201, "{v}");
        assert_eq!(v["metadata"]["generation"], want, "{path}");
    }
    let body = json!({"metadata": {"name": "neg", "generation": -1}});
    let (code, _, v) = TestApiServer::send_json(&srv.client, "POST", collection, &body)
        .await
        .unwrap();
    assert_eq!(code, 422, "{v}");
    assert_eq!(v["details"]["causes"][0]["field"], "metadata.generation");
}

/// A PUT of a missing object creates it (201) for the kinds upstream allows it
/// (`AllowCreateOnUpdate`: Endpoints, Leases, RBAC roles, ...), whatever version the
/// body names, but not when it names a uid; other kinds answer 404. Kinds that are
/// not updated unconditionally (Leases, custom resources, ...) refuse an update of an
/// existing object that names no resourceVersion (422).
#[tokio::test]
async fn puts_create_where_upstream_creates_and_name_versions_where_it_must() {
    let srv = TestApiServer::start().await.unwrap();
    let put = |path: &'static str, body: serde_json::Value| {
        let client = srv.client.clone();
        async move {
            let (code, _, v) = TestApiServer::send_json(&client, "PUT", path, &body)
                .await
                .unwrap();
            (code, v)
        }
    };
    let endpoints = "/api/v1/namespaces/default/endpoints/made";
    let body = json!({"apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": "made", "resourceVersion": "12345", "labels": {"a": "b"}}});
    let (code, v) = put(endpoints, body).await;
    assert_eq!(code, 201, "{v}");
    assert_eq!(v["metadata"]["labels"]["a"], "b");
    let created_version = v["metadata"]["resourceVersion"].clone();
    assert_ne!(created_version, json!("12345"));
    let (code, v) = put(
        endpoints,
        json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "made"}}),
    )
    .await;
    assert_eq!(code, 200, "{v}");
    let (code, v) = put(
        "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles/stale",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "stale", "uid": "0d6f5c7e-0000-4000-8000-000000000000"}}),
    )
    .await;
    assert_eq!(code, 409, "{v}");
    let (code, v) = put(
        "/api/v1/namespaces/default/configmaps/missing",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "missing"}}),
    )
    .await;
    assert_eq!(code, 404, "{v}");

    let lease = "/apis/coordination.k8s.io/v1/namespaces/default/leases/held";
    let body = |rv: Option<&serde_json::Value>| {
        let mut b = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "held"}, "spec": {"holderIdentity": "me"}});
        if let Some(rv) = rv {
            b["metadata"]["resourceVersion"] = rv.clone();
        }
        b
    };
    let (code, v) = put(lease, body(None)).await;
    assert_eq!(code, 201, "{v}");
    let (code, v) = put(lease, body(None)).await;
    assert_eq!(code, 422, "{v}");
    assert_eq!(
        v["message"],
        "leases.coordination.k8s.io \"held\" is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update"
    );
    let (_, _, current) = TestApiServer::raw(&srv.client, "GET", lease, &[], vec![])
        .await
        .unwrap();
    let current: serde_json::Value = serde_json::from_slice(&current).unwrap();
    let (code, v) = put(lease, body(Some(&current["metadata"]["resourceVersion"]))).await;
    assert_eq!(code, 200, "{v}");
}

/// A JSON patch operation of an unknown kind, or without a field it needs, fails when
/// its turn comes, as evanphx/json-patch fails it: a 422 whose one cause says why.
#[tokio::test]
async fn json_patch_operations_fail_in_turn() {
    let srv = TestApiServer::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(srv.client.clone(), "default");
    cms.create(&PostParams::default(), &cm("p", json!({})))
        .await
        .unwrap();
    for (ops, cause) in [
        (
            json!([{"op": "frobnicate", "path": "/data/k"}]),
            "Unexpected kind: frobnicate",
        ),
        (
            json!([{"op": "add", "value": "x"}]),
            "operation missing path field: missing value",
        ),
        (
            json!([{"op": "move", "path": "/data/x"}]),
            "operation, missing from field: missing value",
        ),
    ] {
        let (code, _, bytes) = TestApiServer::raw(
            &srv.client,
            "PATCH",
            "/api/v1/namespaces/default/configmaps/p",
            &[("content-type", "application/json-patch+json")],
            serde_json::to_vec(&ops).unwrap(),
        )
        .await
        .unwrap();
        let status: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(code, 422, "{status}");
        assert_eq!(status["details"]["causes"][0]["message"], cause, "{status}");
    }
    // The operations before an unknown one are applied in turn: a failing `test`
    // before it is what is reported.
    let (code, _, bytes) = TestApiServer::raw(
        &srv.client,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/p",
        &[("content-type", "application/json-patch+json")],
        br#"[{"op":"test","path":"/data/k","value":"w"},{"op":"nope"}]"#.to_vec(),
    )
    .await
    .unwrap();
    let status: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(code, 422, "{status}");
    let cause = status["details"]["causes"][0]["message"].as_str().unwrap();
    assert!(!cause.contains("Unexpected kind"), "{status}");
    assert_eq!(cms.get("p").await.unwrap().data.unwrap()["k"], "v");
}

#[tokio::test]
async fn finalizers_and_graceful_pods() {
    let srv = TestApiServer::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(srv.client.clone(), "default");
    let mut c = cm("f", json!({}));
    c.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    cms.create(&PostParams::default(), &c).await.unwrap();
    cms.delete("f", &DeleteParams::default()).await.unwrap();
    let marked = cms.get("f").await.unwrap();
    assert!(marked.metadata.deletion_timestamp.is_some());
    cms.patch(
        "f",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert_eq!(status_code(&cms.get("f").await.unwrap_err()), 404);

    let pods: Api<Pod> = Api::namespaced(srv.client.clone(), "default");
    let pod = |name: &str, node: Option<&str>| -> Pod {
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]}})).unwrap()
    };
    let p = pods
        .create(&PostParams::default(), &pod("unscheduled", None))
        .await
        .unwrap();
    assert_eq!(p.status.unwrap().phase.as_deref(), Some("Pending"));
    // A pod's DELETE answers with the pod, as upstream's (ReturnDeletedObject).
    let gone = pods
        .delete("unscheduled", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .expect("the deleted pod");
    assert_eq!(gone.metadata.name.as_deref(), Some("unscheduled"));
    assert_eq!(
        status_code(&pods.get("unscheduled").await.unwrap_err()),
        404
    );
    pods.create(&PostParams::default(), &pod("running", Some("n1")))
        .await
        .unwrap();
    pods.delete("running", &DeleteParams::default())
        .await
        .unwrap();
    let p = pods.get("running").await.unwrap();
    assert_eq!(p.metadata.deletion_grace_period_seconds, Some(30));
    pods.delete(
        "running",
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(status_code(&pods.get("running").await.unwrap_err()), 404);

    // With a finalizer, the kubelet's last delete (grace 0) shortens the pending
    // graceful one; the pod goes once the finalizer is removed.
    let mut held = pod("held", Some("n1"));
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    pods.create(&PostParams::default(), &held).await.unwrap();
    pods.delete("held", &DeleteParams::default()).await.unwrap();
    let p = pods.get("held").await.unwrap();
    assert_eq!(p.metadata.deletion_grace_period_seconds, Some(30));
    let last = DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    pods.delete("held", &last).await.unwrap();
    let p = pods.get("held").await.unwrap();
    assert_eq!(p.metadata.deletion_grace_period_seconds, Some(0));
    pods.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert_eq!(status_code(&pods.get("held").await.unwrap_err()), 404);

    // The largest grace period a client can send ends the deletion in year 9999
    // instead of overflowing the timestamp (it was a 500).
    pods.create(&PostParams::default(), &pod("forever", Some("n1")))
        .await
        .unwrap();
    let deleted = srv
        .client
        .request::<serde_json::Value>(
            http::Request::delete("/api/v1/namespaces/default/pods/forever")
                .header("Content-Type", "application/json")
                .body(serde_json::to_vec(&json!({"gracePeriodSeconds": i64::MAX})).unwrap())
                .unwrap(),
        )
        .await;
    assert!(deleted.is_ok(), "{deleted:?}");
    let p = pods.get("forever").await.unwrap();
    assert_eq!(p.metadata.deletion_grace_period_seconds, Some(i64::MAX));
    let at = serde_json::to_value(p.metadata.deletion_timestamp).unwrap();
    assert!(at.as_str().is_some_and(|t| t.starts_with("9999-")), "{at}");
    pods.delete("forever", &last).await.unwrap();
    assert_eq!(status_code(&pods.get("forever").await.unwrap_err()), 404);
    srv.stop().await;
}

#[tokio::test]
async fn field_validation_and_http_edges() {
    let srv = TestApiServer::start().await.unwrap();
    let c = srv.client.clone();
    let req = |method: &str, path: &str, ct: &str, body: Vec<u8>| {
        http::Request::builder()
            .method(method)
            .uri(path)
            .header("Content-Type", ct)
            .body(body)
            .unwrap()
    };
    let body = serde_json::to_vec(
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "u"}, "bogus": 1}),
    )
    .unwrap();
    let e = c
        .request::<ConfigMap>(req(
            "POST",
            "/api/v1/namespaces/default/configmaps?fieldValidation=Strict",
            "application/json",
            body.clone(),
        ))
        .await
        .unwrap_err();
    // A body's strict decoding error is worded as upstream's body decoder words it; a
    // patch's is the bare strict decoding error, as upstream's patcher returns it.
    let strict_message = |e: &kube::Error| match e {
        kube::Error::Api(s) if s.code == 400 => s.message.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        strict_message(&e),
        "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: \
         strict decoding error: unknown field \"bogus\""
    );
    c.request::<ConfigMap>(req(
        "POST",
        "/api/v1/namespaces/default/configmaps?fieldValidation=Ignore",
        "application/json",
        body.clone(),
    ))
    .await
    .unwrap();
    let e = c
        .request::<ConfigMap>(req(
            "PUT",
            "/api/v1/namespaces/default/configmaps/u?fieldValidation=Strict",
            "application/json",
            body,
        ))
        .await
        .unwrap_err();
    assert_eq!(
        strict_message(&e),
        "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: \
         strict decoding error: unknown field \"bogus\""
    );
    let e = c
        .request::<ConfigMap>(req(
            "PATCH",
            "/api/v1/namespaces/default/configmaps/u?fieldValidation=Strict",
            "application/merge-patch+json",
            br#"{"bogus": 2}"#.to_vec(),
        ))
        .await
        .unwrap_err();
    assert_eq!(
        strict_message(&e),
        "strict decoding error: unknown field \"bogus\""
    );
    // A patch whose result has a member of the wrong type: upstream's patcher's 422,
    // showing the patched object for a merge (or JSON) patch, the patch for a
    // strategic one.
    let wrong_type = |content_type: &'static str| {
        c.request::<ConfigMap>(req(
            "PATCH",
            "/api/v1/namespaces/default/configmaps/u",
            content_type,
            br#"{"data": {"a": 1}}"#.to_vec(),
        ))
    };
    let why = "data.a: invalid type: integer `1`, expected a string";
    match wrong_type("application/merge-patch+json")
        .await
        .unwrap_err()
    {
        kube::Error::Api(s) => {
            assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
            let shown = s
                .message
                .strip_prefix(" \"\" is invalid: patch: Invalid value: \"")
                .and_then(|m| m.strip_suffix(&format!("\": {why}")))
                .unwrap_or_else(|| panic!("{}", s.message));
            let patched: serde_json::Value =
                serde_json::from_str(&shown.replace("\\\"", "\"")).unwrap();
            assert_eq!(patched["metadata"]["name"], "u");
            assert_eq!(patched["data"]["a"], 1);
        }
        other => panic!("{other:?}"),
    }
    match wrong_type("application/strategic-merge-patch+json")
        .await
        .unwrap_err()
    {
        kube::Error::Api(s) => assert_eq!(
            s.message,
            format!(
                " \"\" is invalid: patch: Invalid value: \"{{\\\"data\\\":{{\\\"a\\\":1}}}}\": {why}"
            )
        ),
        other => panic!("{other:?}"),
    }
    // Kind mismatch, malformed JSON, YAML in, too large.
    let e = c
        .request::<ConfigMap>(req(
            "POST",
            "/api/v1/namespaces/default/configmaps",
            "application/json",
            br#"{"kind":"Secret","apiVersion":"v1","metadata":{"name":"x"}}"#.to_vec(),
        ))
        .await
        .unwrap_err();
    assert_eq!(status_code(&e), 400);
    let e = c
        .request::<ConfigMap>(req(
            "POST",
            "/api/v1/namespaces/default/configmaps",
            "application/json",
            b"{nope".to_vec(),
        ))
        .await
        .unwrap_err();
    assert_eq!(status_code(&e), 400);
    // Upstream's `transformDecodeError`: the kind wanted, the parser's error, the body's
    // start (in hex unless it opens an object).
    let kube::Error::Api(status) = e else {
        unreachable!()
    };
    assert!(
        status.message.starts_with(
            "the object provided is unrecognized (must be of type ConfigMap): couldn't get version/kind; json parse error: "
        ) && status.message.ends_with(" ({nope)"),
        "{}",
        status.message
    );
    let y = c
        .request::<ConfigMap>(req(
            "POST",
            "/api/v1/namespaces/default/configmaps",
            "application/yaml",
            b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: yml\ndata:\n  a: b\n".to_vec(),
        ))
        .await
        .unwrap();
    assert_eq!(y.metadata.name.as_deref(), Some("yml"));
    let big = vec![b' '; 3 * 1024 * 1024 + 10];
    let e = c
        .request::<ConfigMap>(req(
            "POST",
            "/api/v1/namespaces/default/configmaps",
            "application/json",
            big,
        ))
        .await
        .unwrap_err();
    assert_eq!(status_code(&e), 413);
    let e = c
        .request::<serde_json::Value>(req("GET", "/api/v1/nothings", "application/json", vec![]))
        .await
        .unwrap_err();
    assert_eq!(status_code(&e), 404);
    // Discovery.
    let v = c.apiserver_version().await.unwrap();
    assert_eq!((v.major.as_str(), v.minor.as_str()), ("1", "33"));
    // Upstream writes /version as indented JSON, its fields in version.Info's order.
    let text = c
        .request_text(http::Request::get("/version").body(vec![]).unwrap())
        .await
        .unwrap();
    assert!(
        text.starts_with("{\n  \"major\": \"1\",\n  \"minor\": \"33\",\n  \"emulationMajor\""),
        "{text}"
    );
    let groups = c.list_api_groups().await.unwrap();
    assert!(groups.groups.iter().any(|g| g.name == "apps"));
    let core = c.list_core_api_resources("v1").await.unwrap();
    let pods = core.resources.iter().find(|r| r.name == "pods").unwrap();
    assert_eq!(pods.short_names.as_deref(), Some(&["po".to_string()][..]));
    assert_eq!(pods.categories.as_deref(), Some(&["all".to_string()][..]));
    let d = kube::Discovery::new(c.clone()).run().await.unwrap();
    assert!(d.has_group("apps"));
    srv.stop().await;
}

#[tokio::test]
async fn anonymous_requests_are_forbidden_but_health_is_public() {
    // --anonymous-auth defaults to true, as upstream: a request without credentials is
    // system:anonymous, which RBAC grants only health, version and discovery.
    let srv = TestApiServer::start().await.unwrap();
    let mut cfg = kube::Config::new(srv.url.parse().unwrap());
    cfg.accept_invalid_certs = true;
    let anon = kube::Client::try_from(cfg).unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(anon.clone(), "default");
    let err = cms.list(&ListParams::default()).await.unwrap_err();
    assert_eq!(status_code(&err), 403);
    assert!(
        err.to_string()
            .contains(r#"User "system:anonymous" cannot list resource "configmaps""#),
        "{err}"
    );
    let text = anon
        .request_text(
            http::Request::builder()
                .uri("/readyz?verbose")
                .body(vec![])
                .unwrap(),
        )
        .await
        .unwrap();
    assert!(text.contains("[+]etcd ok"), "{text}");
    assert!(text.contains("readyz check passed"));
    anon.apiserver_version().await.unwrap();

    // One check at its own path, and exclusions (as upstream; the checks' own paths
    // are not public, so the admin asks).
    let admin = srv.client.clone();
    let get_text = |path: &'static str| {
        let admin = admin.clone();
        async move {
            admin
                .request_text(http::Request::builder().uri(path).body(vec![]).unwrap())
                .await
        }
    };
    assert_eq!(get_text("/readyz/etcd").await.unwrap(), "ok");
    assert_eq!(get_text("/livez/ping").await.unwrap(), "ok");
    let text = get_text("/readyz?verbose&exclude=etcd&exclude=nope")
        .await
        .unwrap();
    assert!(text.contains("[+]etcd excluded: ok\n"), "{text}");
    assert!(text.contains("no matches for \"nope\""), "{text}");
    assert!(get_text("/readyz/nope").await.is_err());
    // Upstream's post-start hooks and readiness-only checks are listed and answer.
    for path in [
        "/readyz/poststarthook/rbac/bootstrap-roles",
        "/readyz/informer-sync",
        "/healthz/autoregister-completion",
        "/livez/poststarthook/start-kube-apiserver-identity-lease-controller",
    ] {
        assert_eq!(get_text(path).await.unwrap(), "ok", "{path}");
    }
    assert!(get_text("/livez/etcd-readiness").await.is_err());

    // The identity lease (APIServerIdentity): named after the host, labelled, held for
    // an hour and renewed.
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(admin.clone(), "kube-system");
    let listed = leases
        .list(&ListParams::default().labels("apiserver.kubernetes.io/identity=kube-apiserver"))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
    let lease = &listed.items[0];
    let name = lease.metadata.name.clone().unwrap();
    assert!(name.starts_with("apiserver-") && name.len() == 36, "{name}");
    let spec = lease.spec.clone().unwrap();
    assert!(
        spec.holder_identity
            .unwrap()
            .starts_with(&format!("{name}_"))
    );
    assert_eq!(spec.lease_duration_seconds, Some(3600));
    assert!(spec.renew_time.is_some());
    assert!(!lease.metadata.labels.as_ref().unwrap()["kubernetes.io/hostname"].is_empty());
    srv.stop().await;
}

#[tokio::test]
async fn a_watch_is_a_long_running_request_until_it_ends_and_counted_then() {
    let srv = TestApiServer::start().await.unwrap();
    let client = srv.client.clone();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let metrics = || async {
        client
            .request_text(http::Request::get("/metrics").body(vec![]).unwrap())
            .await
            .unwrap()
    };
    let open = r#"apiserver_longrunning_requests{component="apiserver",group="",resource="configmaps",scope="namespace",subresource="",verb="WATCH",version="v1"}"#;
    let counted = r#"apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="configmaps",scope="namespace",subresource="",verb="WATCH",version="v1"}"#;
    let stream = cms
        .watch(&WatchParams::default().timeout(2), "0")
        .await
        .unwrap();
    let mut stream = Box::pin(stream);
    let text = metrics().await;
    assert!(text.contains(&format!("{open} 1")), "{text}");
    assert!(!text.contains(counted), "{text}");
    // The server ends the watch after its 2 s.
    tokio::time::timeout(Duration::from_secs(10), async {
        while stream.next().await.is_some() {}
    })
    .await
    .expect("the watch ends at its timeout");
    let mut text = String::new();
    for _ in 0..50 {
        text = metrics().await;
        if text.contains(&format!("{counted} 1")) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(text.contains(&format!("{counted} 1")), "{text}");
    assert!(text.contains(&format!("{open} 0")), "{text}");
    srv.stop().await;
}

#[tokio::test]
async fn metrics_report_request_and_storage_latency() {
    let srv = TestApiServer::start().await.unwrap();
    let client = srv.client.clone();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.create(&PostParams::default(), &cm("timed", json!({})))
        .await
        .unwrap();
    cms.get("timed").await.unwrap();
    // Non-resource requests: /readyz is one of upstream's instrumented handlers, /version
    // is not and counts nowhere.
    for path in ["/readyz", "/version"] {
        client
            .request_text(http::Request::get(path).body(vec![]).unwrap())
            .await
            .unwrap();
    }
    let text = client
        .request_text(http::Request::get("/metrics").body(vec![]).unwrap())
        .await
        .unwrap();
    let count = |series: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {series} in\n{text}"))
    };
    // Upstream's labels: a create is a POST on one object (scope "resource").
    assert!(
        count(
            r#"apiserver_request_duration_seconds_count{component="apiserver",dry_run="",group="",resource="configmaps",scope="resource",subresource="",verb="POST",version="v1"}"#
        ) >= 1
    );
    assert!(
        count(
            r#"apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="configmaps",scope="resource",subresource="",verb="POST",version="v1"}"#
        ) >= 1
    );
    assert!(
        count(
            r#"apiserver_request_total{code="200",component="",dry_run="",group="",resource="",scope="",subresource="/readyz",verb="GET",version=""}"#
        ) >= 1
    );
    assert!(
        !text.contains(r#"subresource="/version""#)
            && !text.contains(r#"subresource="",verb="GET",version=""}"#),
        "{text}"
    );
    // The SLI latency of both, and the size of the read's answer (upstream measures reads
    // only: the create has none).
    let sli =
        r#"component="apiserver",group="",resource="configmaps",scope="resource",subresource="""#;
    for verb in ["POST", "GET"] {
        assert!(
            count(&format!(
                r#"apiserver_request_sli_duration_seconds_count{{{sli},verb="{verb}",version="v1"}}"#
            )) >= 1
        );
    }
    assert!(
        count(&format!(
            r#"apiserver_response_sizes_count{{{sli},verb="GET",version="v1"}}"#
        )) >= 1
    );
    assert!(!text.contains(&format!(
        r#"apiserver_response_sizes_count{{{sli},verb="POST""#
    )));
    // The test client authenticates with a certificate: its remaining lifetime is
    // observed (process-wide, as upstream's x509 authenticator does).
    assert!(count("apiserver_client_certificate_expiration_seconds_count") >= 1);
    // The create went to storage once, under the configmaps prefix.
    assert!(
        count(
            r#"etcd_request_duration_seconds_count{operation="create",type="/registry/configmaps/"}"#
        ) >= 1
    );
    assert!(text.contains(
        r#"etcd_request_duration_seconds_bucket{operation="create",type="/registry/configmaps/",le="+Inf"}"#
    ));
    // The process collector every upstream component serves: this test process has
    // file descriptors open and memory resident.
    assert!(count("process_open_fds") >= 1);
    assert!(count("process_resident_memory_bytes") >= 1);
    // Objects per resource, upstream's `resource` label: the four namespaces and two
    // priority classes made at start, and every ConfigMap (the watch cache counts
    // them, so the new one may take a moment).
    assert_eq!(
        count(r#"apiserver_storage_objects{resource="namespaces"}"#),
        4
    );
    assert_eq!(
        count(r#"apiserver_storage_objects{resource="priorityclasses.scheduling.k8s.io"}"#),
        2
    );
    let all_cms: Api<ConfigMap> = Api::all(client.clone());
    let stored = all_cms.list(&Default::default()).await.unwrap().items.len() as u64;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let text = client
            .request_text(http::Request::get("/metrics").body(vec![]).unwrap())
            .await
            .unwrap();
        let counted = text.lines().find_map(|l| {
            l.strip_prefix(r#"apiserver_storage_objects{resource="configmaps"}"#)?
                .trim()
                .parse::<u64>()
                .ok()
        });
        if counted == Some(stored) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "configmaps counted {counted:?}, stored {stored}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    srv.stop().await;
}

#[tokio::test]
async fn shutdown_ends_watches_and_stops_accepting() {
    let srv = TestApiServer::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(srv.client.clone(), "default");
    let mut events = cms
        .watch(&WatchParams::default().timeout(290), "0")
        .await
        .unwrap()
        .boxed();
    cms.create(&PostParams::default(), &cm("before-shutdown", json!({})))
        .await
        .unwrap();
    let first = tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .expect("no event in 10 s");
    assert!(matches!(first, Some(Ok(WatchEvent::Added(_)))), "{first:?}");

    // An open watch must not hold the shutdown for its grace period (5 s here).
    let started = std::time::Instant::now();
    srv.stop().await;
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "shutdown took {:?}: the open watch held it",
        started.elapsed()
    );
    // The watch ends cleanly: its stream closes, without an error event.
    let end = tokio::time::timeout(Duration::from_secs(5), events.next())
        .await
        .expect("the watch stayed open after shutdown");
    assert!(end.is_none(), "the watch ended with {end:?}");
    // Nothing accepts connections any more.
    assert!(cms.list(&ListParams::default()).await.is_err());
}

#[tokio::test]
async fn shutdown_finishes_a_response_in_flight() {
    use http_body_util::BodyExt;
    let srv = TestApiServer::start().await.unwrap();
    let client = srv.client.clone();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    // 64 configmaps of ~1 MB of random letters, listed without gzip: more than loopback's
    // socket buffers hold (here up to 4 + 32 MiB), so the server is still writing the
    // LIST when the shutdown starts.
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut blob = || -> String {
        (0..1000 * 1024)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                char::from(b'a' + (seed % 26) as u8)
            })
            .collect()
    };
    for i in 0..64 {
        let mut c = cm(&format!("big-{i}"), json!({}));
        c.data = Some([("blob".to_string(), blob())].into());
        cms.create(&PostParams::default(), &c).await.unwrap();
    }
    let req = http::Request::get("/api/v1/namespaces/default/configmaps")
        .header("Accept-Encoding", "identity")
        .body(kube::client::Body::empty())
        .unwrap();
    let resp = client.send(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let stopping = tokio::spawn(srv.stop());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !stopping.is_finished(),
        "the shutdown did not wait for the response in flight"
    );
    let body = tokio::time::timeout(Duration::from_secs(30), resp.into_body().collect())
        .await
        .expect("the body did not finish in 30 s")
        .expect("the shutdown cut the response short")
        .to_bytes();
    let list: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(list["items"].as_array().map(Vec::len), Some(64));
    stopping.await.unwrap();
}

/// `POST /api/v1/namespaces/{ns}/bindings` (what `kubectl create -f` of a Binding
/// sends) binds the pod the body names, as `pods/{name}/binding` does.
#[tokio::test]
async fn bindings_collection_binds_the_pod_named_in_the_body() {
    let server = TestApiServer::start().await.unwrap();
    let client = server.client.clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "bindme"},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();

    let post = |body: serde_json::Value| {
        let client = client.clone();
        async move {
            let (code, _, bytes) = TestApiServer::raw(
                &client,
                "POST",
                "/api/v1/namespaces/default/bindings",
                &[("content-type", "application/json")],
                serde_json::to_vec(&body).unwrap(),
            )
            .await
            .unwrap();
            (code, String::from_utf8_lossy(&bytes).into_owned())
        }
    };
    let target = json!({"apiVersion": "v1", "kind": "Node", "name": "n1"});
    let (code, body) = post(json!({
        "apiVersion": "v1", "kind": "Binding", "metadata": {}, "target": target
    }))
    .await;
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("metadata.name"), "{body}");
    let (code, body) = post(json!({
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "bindme"}, "target": target
    }))
    .await;
    assert_eq!(code, 201, "{body}");
    let bound = pods.get("bindme").await.unwrap();
    assert_eq!(bound.spec.unwrap().node_name.as_deref(), Some("n1"));
    let (code, body) = post(json!({
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "bindme"}, "target": target
    }))
    .await;
    assert_eq!(code, 409, "{body}");
    server.stop().await;
}

#[tokio::test]
async fn ephemeral_containers_only_through_their_subresource() {
    let srv = TestApiServer::start().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(srv.client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "app", "image": "nginx"}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let debugger = json!({"name": "debugger", "image": "busybox", "stdin": true, "tty": true,
        "targetContainerName": "app"});

    // The main resource leaves them alone.
    let p = pods
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"ephemeralContainers": [debugger.clone()]}})),
        )
        .await
        .unwrap();
    assert!(p.spec.unwrap().ephemeral_containers.is_none());

    // The subresource adds one (kubectl debug sends a strategic merge patch).
    let p = pods
        .patch_subresource(
            "ephemeralcontainers",
            "p",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"ephemeralContainers": [debugger.clone()]}})),
        )
        .await
        .unwrap();
    let spec = p.spec.unwrap();
    let ec = spec.ephemeral_containers.as_ref().unwrap();
    assert_eq!(ec[0].name, "debugger");
    assert_eq!(ec[0].target_container_name.as_deref(), Some("app"));
    assert_eq!(spec.containers[0].image.as_deref(), Some("nginx"));
    let got: Pod = pods
        .get_subresource("ephemeralcontainers", "p")
        .await
        .unwrap();
    assert_eq!(got.spec.unwrap().ephemeral_containers.unwrap().len(), 1);

    // An existing one may not change or go; ports are not allowed; the target must exist.
    let status = |e: kube::Error| match e {
        kube::Error::Api(s) => *s,
        other => panic!("not an API error: {other:?}"),
    };
    let mut changed = debugger.clone();
    changed["image"] = json!("alpine");
    let e = status(
        pods.patch_subresource(
            "ephemeralcontainers",
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"ephemeralContainers": [changed]}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(e.code, 422);
    assert!(
        e.message
            .contains(r#"existing ephemeral containers "debugger" may not be changed"#),
        "{}",
        e.message
    );
    let e = status(
        pods.patch_subresource(
            "ephemeralcontainers",
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"ephemeralContainers": []}})),
        )
        .await
        .unwrap_err(),
    );
    assert!(e.message.contains("may not be removed"), "{}", e.message);
    let e = status(
        pods.patch_subresource(
            "ephemeralcontainers",
            "p",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"ephemeralContainers": [
                {"name": "d2", "image": "busybox", "ports": [{"containerPort": 80}],
                 "targetContainerName": "nope"}]}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(e.code, 422);
    // Upstream's strategic merge puts the patch's new item first.
    assert!(
        e.message
            .contains("spec.ephemeralContainers[0].ports: Forbidden"),
        "{}",
        e.message
    );
    assert!(
        e.message
            .contains(r#"spec.ephemeralContainers[0].targetContainerName: Not found: "nope""#),
        "{}",
        e.message
    );
    srv.stop().await;
}

#[tokio::test]
async fn pod_resources_change_only_through_resize() {
    let srv = TestApiServer::start().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(srv.client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p"},
        "spec": {
            "initContainers": [{"name": "init", "image": "busybox",
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                              "limits": {"cpu": "100m", "memory": "64Mi"}}}],
            "containers": [{"name": "app", "image": "nginx",
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                              "limits": {"cpu": "200m", "memory": "128Mi"}}}]}
    }))
    .unwrap();
    let created = pods.create(&PostParams::default(), &pod).await.unwrap();
    let status = |e: kube::Error| match e {
        kube::Error::Api(s) => *s,
        other => panic!("not an API error: {other:?}"),
    };
    let resize = |patch: serde_json::Value| {
        let pods = pods.clone();
        async move {
            pods.patch_subresource(
                "resize",
                "p",
                &PatchParams::default(),
                &Patch::Strategic(patch),
            )
            .await
        }
    };

    // The main resource refuses a change of resources.
    let more_cpu = json!({"spec": {"containers": [{"name": "app",
        "resources": {"requests": {"cpu": "150m"}, "limits": {"cpu": "300m"}}}]}});
    let e = status(
        pods.patch(
            "p",
            &PatchParams::default(),
            &Patch::Strategic(more_cpu.clone()),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(e.code, 422, "{}", e.message);

    // The subresource takes it (kubectl patch --subresource resize), and bumps the
    // generation; the rest of the spec stays.
    let p = resize(more_cpu).await.unwrap();
    let spec = p.spec.clone().unwrap();
    let res = spec.containers[0].resources.clone().unwrap();
    assert_eq!(res.requests.unwrap()["cpu"].0, "150m");
    assert_eq!(res.limits.as_ref().unwrap()["cpu"].0, "300m");
    assert_eq!(res.limits.unwrap()["memory"].0, "128Mi");
    assert_eq!(spec.containers[0].image.as_deref(), Some("nginx"));
    assert_eq!(
        p.metadata.generation,
        created.metadata.generation.map(|g| g + 1)
    );
    let got: Pod = pods.get_subresource("resize", "p").await.unwrap();
    assert_eq!(got.metadata.resource_version, p.metadata.resource_version);

    // Only cpu and memory, no removal, no lower memory limit without a restart, the
    // same QoS class, and no init container but sidecars.
    let cases = [
        (
            json!({"spec": {"containers": [{"name": "app",
                "resources": {"limits": {"ephemeral-storage": "1Gi"}}}]}}),
            "spec: Forbidden: only cpu and memory resources are mutable",
        ),
        (
            json!({"spec": {"containers": [{"name": "app",
                "resources": {"limits": {"memory": "100Mi"}}}]}}),
            "spec.containers[0].resources.limits[memory]: Forbidden: memory limits cannot be decreased unless resizePolicy is RestartContainer",
        ),
        (
            json!({"spec": {"containers": [{"name": "app",
                "resources": {"limits": {"cpu": null, "memory": null}}}]}}),
            "spec.containers[0].resources.limits: Forbidden: resource limits cannot be removed",
        ),
        (
            json!({"spec": {"containers": [{"name": "app", "resources": {
                "requests": {"cpu": "300m", "memory": "128Mi"}}}]}}),
            "Pod QOS Class may not change as a result of resizing",
        ),
        (
            json!({"spec": {"initContainers": [{"name": "init",
                "resources": {"requests": {"cpu": "200m"}, "limits": {"cpu": "200m"}}}]}}),
            "spec: Forbidden: resources for non-sidecar init containers are immutable",
        ),
    ];
    for (patch, want) in cases {
        let e = status(resize(patch.clone()).await.unwrap_err());
        assert_eq!(e.code, 422, "{patch}: {}", e.message);
        assert!(e.message.contains(want), "{patch}: {}", e.message);
    }
    // Other changes are dropped, as upstream's dropNonResizeUpdates does.
    let p = resize(json!({"spec": {"containers": [{"name": "app", "image": "nginx:1.22"}]}}))
        .await
        .unwrap();
    assert_eq!(
        p.spec.unwrap().containers[0].image.as_deref(),
        Some("nginx")
    );
    // resizePolicy is set when the pod is made: a resize may not change it.
    let p = resize(json!({"spec": {"containers": [{"name": "app",
        "resizePolicy": [{"resourceName": "memory", "restartPolicy": "RestartContainer"}],
        "resources": {"limits": {"memory": "100Mi"}}}]}}))
    .await;
    let e = status(p.unwrap_err());
    assert!(
        e.message
            .contains("only cpu and memory resources are mutable"),
        "{}",
        e.message
    );
    srv.stop().await;
}
