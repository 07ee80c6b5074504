//! PodNodeSelector and PodTolerationRestriction (both off by default) on the test
//! apiserver: namespace annotations merged into new pods, and upstream's refusals.

use std::time::Duration;

use ferrokube_testing::TestApiServer;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};

fn typed<T: k8s_openapi::serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap()
}

async fn namespace(client: &kube::Client, name: &str, annotations: Value) {
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &typed(json!({"metadata": {"name": name, "annotations": annotations}})),
        )
        .await
        .unwrap();
}

/// Dry-run creates of `probe` until `ready` holds for the result: the namespace reaches
/// the plugins through the watch cache, a moment after it is written.
async fn until_admitted<F>(pods: &Api<Pod>, probe: &Pod, ready: F)
where
    F: Fn(&Pod) -> bool,
{
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    for _ in 0..100 {
        if let Ok(p) = pods.create(&dry, probe).await
            && ready(&p)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the plugin never saw its namespace");
}

fn status_of<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> (u16, String, String) {
    match r {
        Err(kube::Error::Api(s)) => (s.code, s.reason, s.message),
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn pod_node_selector_merges_and_refuses_conflicts() {
    let server = TestApiServer::start_with(|o| {
        o.admission_plugins
            .set("PodNodeSelector", true)
            .expect("a known plugin")
    })
    .await
    .unwrap();
    let client = server.client.clone();
    namespace(
        &client,
        "pinned",
        json!({"scheduler.alpha.kubernetes.io/node-selector": "env=prod,zone=a"}),
    )
    .await;
    let pods = Api::<Pod>::namespaced(client.clone(), "pinned");
    let pod = |name: &str, selector: Value| -> Pod {
        typed(json!({"metadata": {"name": name}, "spec": {
            "nodeSelector": selector,
            "containers": [{"name": "c", "image": "busybox"}]}}))
    };
    let probe = pod("probe", json!({}));
    until_admitted(&pods, &probe, |p| {
        p.spec
            .as_ref()
            .and_then(|s| s.node_selector.as_ref())
            .is_some()
    })
    .await;

    let created = pods
        .create(
            &PostParams::default(),
            &pod("merged", json!({"disk": "ssd", "zone": "a"})),
        )
        .await
        .unwrap();
    let selector = created.spec.unwrap().node_selector.unwrap();
    assert_eq!(selector.len(), 3, "{selector:?}");
    assert_eq!(selector["env"], "prod");
    assert_eq!(selector["zone"], "a");
    assert_eq!(selector["disk"], "ssd");

    let (code, reason, message) = status_of(
        pods.create(
            &PostParams::default(),
            &pod("conflict", json!({"env": "dev"})),
        )
        .await,
    );
    assert_eq!((code, reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        message,
        "pods \"conflict\" is forbidden: pod node label selector conflicts with its namespace node label selector"
    );

    // A namespace without the annotation imposes nothing.
    let plain = Api::<Pod>::namespaced(client.clone(), "default")
        .create(
            &PostParams::default(),
            &pod("plain", json!({"disk": "ssd"})),
        )
        .await
        .unwrap();
    assert_eq!(plain.spec.unwrap().node_selector.unwrap().len(), 1);
    server.stop().await;
}

#[tokio::test]
async fn pod_toleration_restriction_defaults_and_whitelist() {
    let server = TestApiServer::start_with(|o| {
        o.admission_plugins
            .set("PodTolerationRestriction", true)
            .expect("a known plugin")
    })
    .await
    .unwrap();
    let client = server.client.clone();
    let defaults = json!([{"key": "dedicated", "operator": "Equal", "value": "team-a",
        "effect": "NoSchedule"}]);
    // DefaultTolerationSeconds (on by default) runs first: its tolerations must pass too.
    let whitelist = json!([
        {"key": "dedicated", "operator": "Exists"},
        {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    ]);
    namespace(
        &client,
        "team-a",
        json!({
            "scheduler.alpha.kubernetes.io/defaultTolerations": defaults.to_string(),
            "scheduler.alpha.kubernetes.io/tolerationsWhitelist": whitelist.to_string(),
        }),
    )
    .await;
    let pods = Api::<Pod>::namespaced(client.clone(), "team-a");
    let pod = |name: &str, resources: Value, tolerations: Value| -> Pod {
        typed(json!({"metadata": {"name": name}, "spec": {
            "tolerations": tolerations,
            "containers": [{"name": "c", "image": "busybox", "resources": resources}]}}))
    };
    let keys = |p: &Pod| -> Vec<String> {
        p.spec
            .as_ref()
            .and_then(|s| s.tolerations.clone())
            .unwrap_or_default()
            .into_iter()
            .filter_map(|t| t.key)
            .collect()
    };
    let probe = pod("probe", json!({}), json!([]));
    until_admitted(&pods, &probe, |p| keys(p).iter().any(|k| k == "dedicated")).await;

    // Burstable: the namespace default and memory pressure are added.
    let created = pods
        .create(
            &PostParams::default(),
            &pod("burstable", json!({"requests": {"cpu": "100m"}}), json!([])),
        )
        .await
        .unwrap();
    let k = keys(&created);
    assert!(k.iter().any(|k| k == "dedicated"), "{k:?}");
    assert!(
        k.iter().any(|k| k == "node.kubernetes.io/memory-pressure"),
        "{k:?}"
    );
    // BestEffort: no memory-pressure toleration.
    let best_effort = pods
        .create(
            &PostParams::default(),
            &pod("best-effort", json!({}), json!([])),
        )
        .await
        .unwrap();
    let k = keys(&best_effort);
    assert!(k.iter().any(|k| k == "dedicated"), "{k:?}");
    assert!(
        !k.iter().any(|k| k == "node.kubernetes.io/memory-pressure"),
        "{k:?}"
    );

    // A toleration outside the whitelist: upstream's plain error (500, no reason).
    let (code, reason, message) = status_of(
        pods.create(
            &PostParams::default(),
            &pod(
                "gpu",
                json!({}),
                json!([{"key": "gpu", "operator": "Exists"}]),
            ),
        )
        .await,
    );
    assert_eq!((code, reason.as_str()), (500, ""));
    assert_eq!(
        message,
        "pod tolerations (possibly merged with namespace default tolerations) conflict with its namespace whitelist"
    );
    server.stop().await;
}
