//! The generic store over the embedded SQLite backend.

use std::sync::Arc;
use std::time::Duration;

use ferrokube_registry::{
    DeleteOptions, ListParams, Part, PatchType, Registry, RegistryConfig, UpdateInput, WatchItem,
    WatchParams, WriteOptions,
};
use ferrokube_storage_sqlite::{SqliteOptions, SqliteStorage};
use serde_json::json;

async fn registry(dir: &tempfile::TempDir) -> Registry {
    let storage =
        SqliteStorage::open(&dir.path().join("db.sqlite"), SqliteOptions::default()).unwrap();
    Registry::new(Arc::new(storage), RegistryConfig::default())
        .await
        .unwrap()
}

#[tokio::test]
async fn crud_and_builtins() {
    let dir = tempfile::tempdir().unwrap();
    let reg = registry(&dir).await;
    let ns = reg.store("", "v1", "namespaces").unwrap();
    let listed = ns.list(None, &ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 4);
    let svc = reg
        .store("", "v1", "services")
        .unwrap()
        .get(Some("default"), "kubernetes")
        .await
        .unwrap();
    assert_eq!(svc["spec"]["clusterIP"], "10.96.0.1");

    let cm = reg.store("", "v1", "configmaps").unwrap();
    let w = cm
        .create(
            Some("default"),
            json!({"metadata": {"name": "a", "labels": {"x": "1"}}, "data": {"k": "v"}}),
            &WriteOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(w.object["kind"], "ConfigMap");
    assert!(!w.object["metadata"]["uid"].as_str().unwrap().is_empty());
    let rv = w.object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let err = cm
        .create(
            Some("default"),
            json!({"metadata": {"name": "a"}}),
            &WriteOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, 409);
    let err = cm
        .create(
            Some("nope"),
            json!({"metadata": {"name": "a"}}),
            &WriteOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, 404);

    // Stale update conflicts; a fresh one bumps the RV.
    let mut upd = w.object.clone();
    upd["data"]["k"] = json!("v2");
    let w2 = cm
        .update(
            Some("default"),
            "a",
            UpdateInput::Replace(upd.clone()),
            Part::Main,
            &WriteOptions::default(),
        )
        .await
        .unwrap();
    assert_ne!(w2.object["metadata"]["resourceVersion"], json!(rv));
    let err = cm
        .update(
            Some("default"),
            "a",
            UpdateInput::Replace(upd),
            Part::Main,
            &WriteOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, 409);

    let p = cm
        .update(
            Some("default"),
            "a",
            UpdateInput::Patch(PatchType::Merge, json!({"data": {"z": "1"}})),
            Part::Main,
            &WriteOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(p.object["data"], json!({"k": "v2", "z": "1"}));

    let sel = ListParams {
        label_selector: Some("x=1".into()),
        ..Default::default()
    };
    assert_eq!(cm.list(Some("default"), &sel).await.unwrap().items.len(), 1);
    let sel = ListParams {
        label_selector: Some("x=2".into()),
        ..Default::default()
    };
    assert_eq!(cm.list(None, &sel).await.unwrap().items.len(), 0);

    cm.delete(Some("default"), "a", &DeleteOptions::default())
        .await
        .unwrap();
    assert_eq!(cm.get(Some("default"), "a").await.unwrap_err().code, 404);
}

#[tokio::test]
async fn watch_from_revision_and_gone() {
    let dir = tempfile::tempdir().unwrap();
    let reg = registry(&dir).await;
    let cm = reg.store("", "v1", "configmaps").unwrap();
    let w = cm
        .create(
            Some("default"),
            json!({"metadata": {"name": "a"}}),
            &WriteOptions::default(),
        )
        .await
        .unwrap();
    let rv = w.object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    cm.create(
        Some("default"),
        json!({"metadata": {"name": "b"}}),
        &WriteOptions::default(),
    )
    .await
    .unwrap();
    let mut rx = cm
        .watch(
            Some("default"),
            &WatchParams {
                resource_version: Some(rv),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let item = tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .unwrap()
        .unwrap();
    match item {
        WatchItem::Event(e) => assert_eq!(e.object["metadata"]["name"], "b"),
        other => panic!("unexpected {other:?}"),
    }
    cm.delete(Some("default"), "a", &DeleteOptions::default())
        .await
        .unwrap();
    let item = tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .unwrap()
        .unwrap();
    match item {
        WatchItem::Event(e) => assert_eq!(e.kind, ferrokube_registry::EventType::Deleted),
        other => panic!("unexpected {other:?}"),
    }
    drop(rx);
    drop(reg);
    // After a restart the cache's window starts at the restart: older is 410 Gone.
    let reg = registry(&dir).await;
    let cm = reg.store("", "v1", "configmaps").unwrap();
    let err = cm
        .watch(
            Some("default"),
            &WatchParams {
                resource_version: Some("1".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, 410);
}

/// The `kubernetes` Service's Endpoints and EndpointSlice follow the advertise address
/// across restarts, so kube-proxy never routes pods to an old apiserver address.
/// (Several apiservers: `tests/api_endpoints.rs`.)
#[tokio::test]
async fn api_endpoints_follow_the_advertise_address() {
    let dir = tempfile::tempdir().unwrap();
    let open = |ip: [u8; 4], port: u16| {
        let path = dir.path().join("db.sqlite");
        async move {
            let storage = SqliteStorage::open(&path, SqliteOptions::default()).unwrap();
            let config = RegistryConfig {
                advertise_address: ip.into(),
                secure_port: port,
                ..RegistryConfig::default()
            };
            Registry::new(Arc::new(storage), config).await.unwrap()
        }
    };
    let endpoints_of = |reg: &Registry| {
        let eps = reg.store("", "v1", "endpoints").unwrap().clone();
        let slices = reg
            .store("discovery.k8s.io", "v1", "endpointslices")
            .unwrap()
            .clone();
        async move {
            let ep = eps.get(Some("default"), "kubernetes").await.unwrap();
            let slice = slices.get(Some("default"), "kubernetes").await.unwrap();
            (ep, slice)
        }
    };

    let reg = open([127, 0, 0, 1], 6443).await;
    let (ep, slice) = endpoints_of(&reg).await;
    assert_eq!(ep["subsets"][0]["addresses"][0]["ip"], "127.0.0.1");
    assert_eq!(
        slice["metadata"]["labels"]["kubernetes.io/service-name"],
        "kubernetes"
    );
    assert_eq!(slice["addressType"], "IPv4");
    assert_eq!(slice["endpoints"][0]["addresses"], json!(["127.0.0.1"]));
    assert_eq!(slice["endpoints"][0]["conditions"]["ready"], true);
    assert_eq!(slice["ports"][0]["port"], 6443);
    let slice_rv = slice["metadata"]["resourceVersion"].clone();
    drop(reg);

    // Same address again: nothing is rewritten.
    let reg = open([127, 0, 0, 1], 6443).await;
    let (_, slice) = endpoints_of(&reg).await;
    assert_eq!(slice["metadata"]["resourceVersion"], slice_rv);
    // A graceful shutdown takes the address out (a crashed apiserver's goes when its
    // lease expires).
    reg.remove_api_endpoint().await.unwrap();
    let (ep, slice) = endpoints_of(&reg).await;
    assert!(ep.get("subsets").is_none(), "{ep}");
    assert_eq!(slice["endpoints"], json!([]));
    drop(reg);

    let reg = open([172, 18, 0, 1], 7443).await;
    let (ep, slice) = endpoints_of(&reg).await;
    assert_eq!(ep["subsets"][0]["addresses"][0]["ip"], "172.18.0.1");
    assert_eq!(ep["subsets"][0]["ports"][0]["port"], 7443);
    assert_eq!(slice["endpoints"][0]["addresses"], json!(["172.18.0.1"]));
    assert_eq!(slice["ports"][0]["port"], 7443);
}

/// `--endpoint-reconciler-type=master-count`: each apiserver adds itself, the list is
/// trimmed to `--apiserver-count`, a leaving one takes itself out; `none` writes
/// nothing, though the `kubernetes` Service is there.
#[tokio::test]
async fn master_count_and_none_endpoint_reconcilers() {
    use ferrokube_registry::api_endpoints::EndpointReconciler;
    let dir = tempfile::tempdir().unwrap();
    let open = |ip: [u8; 4], reconciler: EndpointReconciler| {
        let path = dir.path().join("db.sqlite");
        async move {
            let storage = SqliteStorage::open(&path, SqliteOptions::default()).unwrap();
            let config = RegistryConfig {
                advertise_address: ip.into(),
                endpoint_reconciler: reconciler,
                ..RegistryConfig::default()
            };
            Registry::new(Arc::new(storage), config).await.unwrap()
        }
    };
    let addresses = |reg: &Registry| {
        let eps = reg.store("", "v1", "endpoints").unwrap().clone();
        async move {
            let ep = eps.get(Some("default"), "kubernetes").await.unwrap();
            ep["subsets"][0]["addresses"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|a| a["ip"].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        }
    };

    // One apiserver at a time over the same store: each start reconciles.
    let two = EndpointReconciler::MasterCount(2);
    let a = open([10, 0, 0, 2], two).await;
    assert_eq!(addresses(&a).await, ["10.0.0.2"]);
    drop(a);
    let b = open([10, 0, 0, 1], two).await;
    assert_eq!(addresses(&b).await, ["10.0.0.1", "10.0.0.2"]);
    drop(b);
    // A third apiserver while the count says two: it replaces the one after it.
    let c = open([10, 0, 0, 3], two).await;
    assert_eq!(addresses(&c).await, ["10.0.0.2", "10.0.0.3"]);
    c.remove_api_endpoint().await.unwrap();
    assert_eq!(addresses(&c).await, ["10.0.0.2"]);
    drop(c);
    // An apiserver already listed leaves the list alone.
    let a = open([10, 0, 0, 2], two).await;
    a.reconcile_api_endpoints().await.unwrap();
    assert_eq!(addresses(&a).await, ["10.0.0.2"]);
    drop(a);

    let dir = tempfile::tempdir().unwrap();
    let storage =
        SqliteStorage::open(&dir.path().join("db.sqlite"), SqliteOptions::default()).unwrap();
    let reg = Registry::new(
        Arc::new(storage),
        RegistryConfig {
            endpoint_reconciler: EndpointReconciler::None,
            ..RegistryConfig::default()
        },
    )
    .await
    .unwrap();
    reg.reconcile_api_endpoints().await.unwrap();
    let svc = reg.store("", "v1", "services").unwrap();
    assert!(svc.get(Some("default"), "kubernetes").await.is_ok());
    let eps = reg.store("", "v1", "endpoints").unwrap();
    assert_eq!(
        eps.get(Some("default"), "kubernetes")
            .await
            .unwrap_err()
            .code,
        404
    );
}

/// Lists without a resourceVersion are consistent (they see every acknowledged write)
/// and, on a backend whose every revision the watch cache sees, served from the cache:
/// an object version is serialized once and that JSON is shared by every list and by
/// the watch event that carried it.
#[tokio::test]
async fn consistent_lists_see_every_write_and_share_one_serialization() {
    let dir = tempfile::tempdir().unwrap();
    let reg = registry(&dir).await;
    let cm = reg.store("", "v1", "configmaps").unwrap();
    let namespaces = reg.store("", "v1", "namespaces").unwrap();
    let mut rx = cm
        .watch(Some("default"), &WatchParams::default())
        .await
        .unwrap();
    let consistent = ListParams::default();
    let any = ListParams {
        resource_version: Some("0".into()),
        ..Default::default()
    };
    for i in 0..40 {
        let w = cm
            .create(
                Some("default"),
                json!({"metadata": {"name": format!("cm-{i}")}}),
                &WriteOptions::default(),
            )
            .await
            .unwrap();
        let written: i64 = w.object["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        let listed = cm.list(Some("default"), &consistent).await.unwrap();
        assert_eq!(listed.items.len(), i + 1, "read after the create of cm-{i}");
        assert!(listed.resource_version.parse::<i64>().unwrap() >= written);
    }
    let first = cm.list(Some("default"), &consistent).await.unwrap();
    let second = cm.list(Some("default"), &any).await.unwrap();
    assert_eq!(first.items.len(), 40);
    for (a, b) in first.items.iter().zip(&second.items) {
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(a.json()).unwrap(),
            **a
        );
        assert_eq!(a.json().as_ptr(), b.json().as_ptr(), "one serialization");
    }
    // The watch events carried the same object versions.
    for i in 0..40 {
        let item = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .unwrap()
            .unwrap();
        let WatchItem::Event(e) = item else {
            panic!("unexpected {item:?}")
        };
        assert_eq!(e.object["metadata"]["name"], format!("cm-{i}"));
        let listed = first
            .items
            .iter()
            .find(|o| o["metadata"]["name"] == e.object["metadata"]["name"])
            .unwrap();
        assert_eq!(e.object.json().as_ptr(), listed.json().as_ptr());
        let line: serde_json::Value = serde_json::from_slice(&e.json_line()).unwrap();
        assert_eq!(
            line,
            json!({"type": "ADDED", "object": *e.object.value().clone()})
        );
    }
    // Deletes and a label change are seen by the next consistent list at once.
    cm.delete(Some("default"), "cm-0", &DeleteOptions::default())
        .await
        .unwrap();
    cm.update(
        Some("default"),
        "cm-1",
        UpdateInput::Patch(
            PatchType::Merge,
            json!({"metadata": {"labels": {"x": "y"}}}),
        ),
        Part::Main,
        &WriteOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(
        cm.list(Some("default"), &consistent)
            .await
            .unwrap()
            .items
            .len(),
        39
    );
    let sel = ListParams {
        label_selector: Some("x=y".into()),
        ..Default::default()
    };
    let labelled = cm.list(None, &sel).await.unwrap();
    assert_eq!(labelled.items.len(), 1);
    assert_eq!(labelled.items[0]["metadata"]["name"], "cm-1");

    // A namespace created just now admits creates (the cache may not have it yet),
    // and one being deleted refuses them.
    namespaces
        .create(
            None,
            json!({"metadata": {"name": "fresh"}}),
            &WriteOptions::default(),
        )
        .await
        .unwrap();
    cm.create(
        Some("fresh"),
        json!({"metadata": {"name": "a"}}),
        &WriteOptions::default(),
    )
    .await
    .unwrap();
    namespaces
        .delete(None, "fresh", &DeleteOptions::default())
        .await
        .unwrap();
    let mut refused = None;
    for _ in 0..200 {
        match cm
            .create(
                Some("fresh"),
                json!({"metadata": {"name": "b"}}),
                &WriteOptions::default(),
            )
            .await
        {
            Err(e) => {
                refused = Some(e);
                break;
            }
            Ok(_) => {
                cm.delete(Some("fresh"), "b", &DeleteOptions::default())
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    assert_eq!(
        refused
            .expect("a terminating namespace refuses creates")
            .code,
        403
    );
}

/// Field selectors see a field the object leaves out as upstream's typed zero value
/// (`false`, `0`), and upstream's `name` field of namespaces, PVs and PVCs.
#[tokio::test]
async fn field_selectors_on_left_out_fields() {
    let dir = tempfile::tempdir().unwrap();
    let reg = registry(&dir).await;
    let names = |listed: ferrokube_registry::Listed| -> Vec<String> {
        listed
            .items
            .iter()
            .map(|o| o.value()["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    let select = |fields: &str| ListParams {
        field_selector: Some(fields.to_string()),
        ..Default::default()
    };

    let nodes = reg.store("", "v1", "nodes").unwrap();
    for (name, spec) in [
        ("open", json!({})),
        ("cordoned", json!({"unschedulable": true})),
    ] {
        nodes
            .create(
                None,
                json!({"metadata": {"name": name}, "spec": spec}),
                &WriteOptions::default(),
            )
            .await
            .unwrap();
    }
    let listed = nodes
        .list(None, &select("spec.unschedulable=false"))
        .await
        .unwrap();
    assert_eq!(names(listed), ["open"]);
    let listed = nodes
        .list(None, &select("spec.unschedulable!=false"))
        .await
        .unwrap();
    assert_eq!(names(listed), ["cordoned"]);

    // A Job's `status.successful` is its `status.succeeded`, 0 until one has.
    let jobs = reg.store("batch", "v1", "jobs").unwrap();
    let job = |name: &str| {
        json!({"metadata": {"name": name}, "spec": {"template": {
            "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}})
    };
    for name in ["done", "new"] {
        jobs.create(Some("default"), job(name), &WriteOptions::default())
            .await
            .unwrap();
    }
    jobs.update(
        Some("default"),
        "done",
        UpdateInput::Patch(PatchType::Merge, json!({"status": {"succeeded": 1}})),
        Part::Status,
        &WriteOptions::default(),
    )
    .await
    .unwrap();
    let listed = jobs
        .list(Some("default"), &select("status.successful=1"))
        .await
        .unwrap();
    assert_eq!(names(listed), ["done"]);
    let listed = jobs
        .list(Some("default"), &select("status.successful=0"))
        .await
        .unwrap();
    assert_eq!(names(listed), ["new"]);

    let ns = reg.store("", "v1", "namespaces").unwrap();
    let listed = ns.list(None, &select("name=kube-system")).await.unwrap();
    assert_eq!(names(listed), ["kube-system"]);
    let err = reg
        .store("", "v1", "configmaps")
        .unwrap()
        .list(None, &select("name=x"))
        .await
        .unwrap_err();
    assert_eq!(err.code, 400);
}
