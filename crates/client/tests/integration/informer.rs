//! Shared informers against the real in-process apiserver.

use std::sync::Arc;
use std::time::Duration;

use ferrokube_client::informer::{
    InformerConfig, InitialListMode, Notification, SharedInformerFactory, owner_uid_index,
    pod_node_name_index,
};
use ferrokube_testing::TestApiServer;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::mpsc;

fn cm(name: &str, labels: serde_json::Value) -> ConfigMap {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}),
    )
    .unwrap()
}

/// The sum of `family`'s series for this verb and resource (over codes and scopes).
async fn series_sum(client: &kube::Client, family: &str, verb: &str, resource: &str) -> u64 {
    let text = client
        .request_text(http::Request::get("/metrics").body(Vec::new()).unwrap())
        .await
        .unwrap();
    let want_res = format!("resource=\"{resource}\"");
    let want_verb = format!("verb=\"{verb}\"");
    text.lines()
        .filter(|l| l.starts_with(&format!("{family}{{")))
        .filter(|l| l.contains(&want_res) && l.contains(&want_verb))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// `apiserver_request_total` for this verb and resource: the requests that ended.
async fn requests(client: &kube::Client, verb: &str, resource: &str) -> u64 {
    series_sum(client, "apiserver_request_total", verb, resource).await
}

/// Watches of this resource open now (`apiserver_longrunning_requests`).
async fn open_watches(client: &kube::Client, resource: &str) -> u64 {
    series_sum(client, "apiserver_longrunning_requests", "WATCH", resource).await
}

fn describe(n: &Notification<ConfigMap>) -> String {
    let name = |c: &ConfigMap| c.metadata.name.clone().unwrap_or_default();
    let data = |c: &ConfigMap| {
        c.data
            .as_ref()
            .and_then(|d| d.get("k").cloned())
            .unwrap_or_default()
    };
    match n {
        Notification::Added { obj, .. } => format!("add {}", name(obj)),
        Notification::Updated { old, new } => {
            format!("update {} {}->{}", name(new), data(old), data(new))
        }
        Notification::Deleted {
            obj,
            final_state_unknown,
        } => format!("delete {} {final_state_unknown}", name(obj)),
    }
}

/// Whether a notification is about the test's own namespace (kube-system has the
/// apiserver's extension-apiserver-authentication ConfigMap).
fn in_default(n: &Notification<ConfigMap>) -> bool {
    let obj = match n {
        Notification::Added { obj, .. } | Notification::Deleted { obj, .. } => obj,
        Notification::Updated { new, .. } => new,
    };
    obj.metadata.namespace.as_deref() == Some("default")
}

/// Receives until `want` items arrived or 10 s passed.
async fn collect(rx: &mut mpsc::UnboundedReceiver<String>, want: usize) -> Vec<String> {
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while out.len() < want {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(s)) => out.push(s),
            _ => break,
        }
    }
    out
}

async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..200 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

async fn shared_watch(mode: InitialListMode) {
    let srv = TestApiServer::start().await.unwrap();
    let c = srv.client.clone();
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    cms.create(&PostParams::default(), &cm("pre", json!({})))
        .await
        .unwrap();
    let watches_before = open_watches(&c, "configmaps").await;
    let lists_before = requests(&c, "LIST", "configmaps").await;

    let factory = SharedInformerFactory::with_config(
        c.clone(),
        InformerConfig {
            initial_list: mode,
            ..Default::default()
        },
    );
    // Two consumers ask for the same informer.
    let inf_a = factory.informer::<ConfigMap>();
    let inf_b = factory.informer::<ConfigMap>();
    assert_eq!(factory.len(), 1);
    let (tx_a, mut rx_a) = mpsc::unbounded_channel();
    let (tx_b, mut rx_b) = mpsc::unbounded_channel();
    let reg_a = inf_a.add_event_handler(
        move |n: Notification<ConfigMap>| {
            if in_default(&n) {
                let _ = tx_a.send(describe(&n));
            }
        },
        None,
    );
    let reg_b = inf_b.add_event_handler(
        move |n: Notification<ConfigMap>| {
            if in_default(&n) {
                let _ = tx_b.send(describe(&n));
            }
        },
        None,
    );
    assert!(!inf_a.has_synced());
    factory.start();
    factory
        .wait_for_cache_sync(Duration::from_secs(10))
        .await
        .unwrap();
    assert!(inf_b.has_synced());
    assert_eq!(factory.sync_status().values().collect::<Vec<_>>(), [&true]);
    let store = inf_b.store();
    assert!(store.get("default/pre").is_some());
    assert_eq!(store.list_namespace("default").len(), 1);
    // kube-system holds only the apiserver's own ConfigMaps: extension-apiserver-authentication
    // and the legacy token tracking day.
    assert!(store.list_namespace("kube-system").iter().all(|c| {
        matches!(
            c.metadata.name.as_deref(),
            Some(
                "extension-apiserver-authentication"
                    | "kube-apiserver-legacy-service-account-token-tracking"
            )
        )
    }));

    cms.create(&PostParams::default(), &cm("x", json!({})))
        .await
        .unwrap();
    cms.patch(
        "x",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "v2"}})),
    )
    .await
    .unwrap();
    cms.delete("x", &DeleteParams::default()).await.unwrap();

    let want = ["add pre", "add x", "update x v->v2", "delete x false"];
    assert_eq!(collect(&mut rx_a, 4).await, want);
    assert_eq!(collect(&mut rx_b, 4).await, want);
    eventually("handlers synced", || {
        reg_a.has_synced() && reg_b.has_synced()
    })
    .await;
    assert!(store.get("default/x").is_none());

    // A consumer arriving late gets the cache, then live changes.
    let mut late = factory.informer::<ConfigMap>().subscribe();
    let first = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match late.next().await {
                Some(n) if !in_default(&n) => continue,
                other => break other,
            }
        }
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(describe(&first), "add pre");

    // One watch for everyone; a LIST only in list+watch mode.
    assert_eq!(open_watches(&c, "configmaps").await - watches_before, 1);
    let lists = requests(&c, "LIST", "configmaps").await - lists_before;
    match mode {
        InitialListMode::StreamingList => assert_eq!(lists, 0),
        InitialListMode::ListWatch => assert_eq!(lists, 1),
    }
    assert_eq!(inf_a.list_count(), 1);

    factory.shutdown().await;
    assert!(inf_a.is_stopped());
    // Streams end once the informer stops.
    let rest = tokio::time::timeout(Duration::from_secs(5), late.collect::<Vec<_>>())
        .await
        .unwrap();
    assert!(rest.len() <= 3, "{rest:?}");
    srv.stop().await;
}

#[tokio::test]
async fn shared_informer_streaming_list_one_watch() {
    shared_watch(InitialListMode::StreamingList).await;
}

#[tokio::test]
async fn shared_informer_list_watch_one_list_one_watch() {
    shared_watch(InitialListMode::ListWatch).await;
}

fn pod(name: &str, node: Option<&str>, owner_uid: &str) -> Pod {
    let mut spec = json!({"containers": [{"name": "c", "image": "busybox"}]});
    if let Some(n) = node {
        spec["nodeName"] = json!(n);
    }
    serde_json::from_value(json!({
        "metadata": {"name": name, "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": owner_uid}
        ]},
        "spec": spec,
    }))
    .unwrap()
}

#[tokio::test]
async fn namespaced_informer_with_indexers() {
    let srv = TestApiServer::start().await.unwrap();
    let c = srv.client.clone();
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    let other: Api<Pod> = Api::namespaced(c.clone(), "kube-system");
    pods.create(&PostParams::default(), &pod("a", Some("n1"), "u1"))
        .await
        .unwrap();
    other
        .create(&PostParams::default(), &pod("elsewhere", Some("n1"), "u1"))
        .await
        .unwrap();

    let factory = SharedInformerFactory::new(c.clone());
    let inf = factory.namespaced_informer::<Pod>("default");
    inf.add_indexer("nodeName", pod_node_name_index()).unwrap();
    factory.start();
    factory
        .wait_for_cache_sync(Duration::from_secs(10))
        .await
        .unwrap();
    // Added after sync: indexes what is cached.
    inf.add_indexer("owner", owner_uid_index()).unwrap();
    // A different namespace is a different informer.
    let all = factory.informer::<Pod>();
    assert_eq!(factory.len(), 2);
    assert!(all.wait_for_sync(Duration::from_secs(10)).await);
    assert_eq!(all.store().len(), 2);

    pods.create(&PostParams::default(), &pod("b", Some("n2"), "u1"))
        .await
        .unwrap();
    pods.create(&PostParams::default(), &pod("c", None, "u2"))
        .await
        .unwrap();
    let store = inf.store();
    eventually("pods cached", || store.len() == 3).await;
    let names = |v: Vec<Arc<Pod>>| {
        let mut n: Vec<String> = v.iter().map(|p| p.metadata.name.clone().unwrap()).collect();
        n.sort();
        n
    };
    assert_eq!(names(store.by_index("nodeName", "n1").unwrap()), ["a"]);
    assert_eq!(names(store.by_index("nodeName", "n2").unwrap()), ["b"]);
    assert_eq!(names(store.by_index("owner", "u1").unwrap()), ["a", "b"]);
    assert_eq!(names(store.by_index("owner", "u2").unwrap()), ["c"]);
    assert!(
        store
            .get_by_name(Some("kube-system"), "elsewhere")
            .is_none()
    );

    pods.delete("a", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    eventually("pod a gone from the index", || {
        store.by_index("nodeName", "n1").unwrap().is_empty()
    })
    .await;
    factory.shutdown().await;
    srv.stop().await;
}

/// A watch resumed from a resourceVersion the server no longer has gets 410 Gone;
/// the informer relists and its cache converges. The informer watches a label
/// selector (so its resourceVersion stands still while other objects change) with
/// 1 s watches, while more configmap events than the server's event window (10,000)
/// happen elsewhere; its next watch then starts from a compacted-away version.
#[tokio::test]
async fn relist_after_410_converges() {
    let srv = TestApiServer::start().await.unwrap();
    let c = srv.client.clone();
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    for name in ["watched-1", "watched-2"] {
        cms.create(&PostParams::default(), &cm(name, json!({"w": "y"})))
            .await
            .unwrap();
    }
    let factory = SharedInformerFactory::with_config(
        c.clone(),
        InformerConfig {
            label_selector: Some("w=y".into()),
            watch_timeout_secs: Some(1),
            initial_list: InitialListMode::ListWatch,
            ..Default::default()
        },
    );
    let inf = factory.informer::<ConfigMap>();
    let mut stream = inf.subscribe();
    factory.start();
    assert!(inf.wait_for_sync(Duration::from_secs(10)).await);
    cms.delete("watched-1", &DeleteParams::default())
        .await
        .unwrap();
    cms.create(&PostParams::default(), &cm("watched-3", json!({"w": "y"})))
        .await
        .unwrap();
    let store = inf.store();
    eventually("live changes", || {
        store.len() == 2 && store.get("default/watched-3").is_some()
    })
    .await;

    // 10,050 events on unwatched configmaps: creates then deletes.
    let n = 5025;
    let started = std::time::Instant::now();
    for delete in [false, true] {
        futures::stream::iter(0..n)
            .map(|i| {
                let cms = cms.clone();
                async move {
                    let name = format!("noise-{i}");
                    if delete {
                        cms.delete(&name, &DeleteParams::default())
                            .await
                            .map(|_| ())
                    } else {
                        cms.create(&PostParams::default(), &cm(&name, json!({})))
                            .await
                            .map(|_| ())
                    }
                    .unwrap();
                }
            })
            .buffer_unordered(16)
            .collect::<Vec<_>>()
            .await;
    }
    assert!(
        started.elapsed() < Duration::from_secs(50),
        "noise took {:?}; a bookmark (every 60 s) could have hidden the 410",
        started.elapsed()
    );

    eventually("a relist", || inf.list_count() >= 2).await;
    assert!(inf.error_count() >= 1, "the 410 is reported");
    let mut keys = store.list_keys();
    keys.sort();
    assert_eq!(keys, ["default/watched-2", "default/watched-3"]);
    // After the relist the informer watches again: a new change arrives.
    cms.create(&PostParams::default(), &cm("watched-4", json!({"w": "y"})))
        .await
        .unwrap();
    eventually("watching after relist", || store.len() == 3).await;

    let mut seen = Vec::new();
    while let Ok(Some(n)) = tokio::time::timeout(Duration::from_millis(300), stream.next()).await {
        seen.push(describe(&n));
    }
    seen[..2].sort();
    seen[4..6].sort();
    // Initial list, live changes, the relist (objects still there are updates, as
    // upstream's Replace), then live again.
    assert_eq!(
        seen,
        [
            "add watched-1",
            "add watched-2",
            "delete watched-1 false",
            "add watched-3",
            "update watched-2 v->v",
            "update watched-3 v->v",
            "add watched-4",
        ],
        "{seen:?}"
    );
    factory.shutdown().await;
    srv.stop().await;
}
