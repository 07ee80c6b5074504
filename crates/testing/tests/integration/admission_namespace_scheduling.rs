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

/// Both plugins with an AdmissionConfiguration (`--admission-control-config-file`):
/// the cluster's default node selector and default tolerations apply to namespaces
/// without annotations, and the configured whitelists are enforced.
fn with_cluster_configuration(o: &mut ferrokube_apiserver::Options) {
    o.admission_plugins
        .set("PodNodeSelector", true)
        .expect("a known plugin");
    o.admission_plugins
        .set("PodTolerationRestriction", true)
        .expect("a known plugin");
    ferrokube_testing::with_admission_config(
        o,
        "namespace-scheduling",
        r#"apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodNodeSelector
  configuration:
    podNodeSelectorPluginConfig:
      clusterDefaultNodeSelector: zone=a
      limited: env=dev,zone=a
- name: PodTolerationRestriction
  configuration:
    apiVersion: podtolerationrestriction.admission.k8s.io/v1alpha1
    kind: Configuration
    default:
    - {key: dedicated, operator: Equal, value: shared, effect: NoSchedule}
    whitelist:
    - {key: dedicated, operator: Exists}
    - {key: node.kubernetes.io/memory-pressure, operator: Exists, effect: NoSchedule}
    - {key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute}
    - {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute}
"#,
    );
}

#[tokio::test]
async fn cluster_defaults_and_whitelists_from_the_admission_configuration() {
    let server = TestApiServer::start_with(with_cluster_configuration)
        .await
        .unwrap();
    let client = server.client.clone();
    let pod = |name: &str, spec: Value| -> Pod {
        let mut spec = spec;
        spec["containers"] = json!([{"name": "c", "image": "busybox"}]);
        typed(json!({"metadata": {"name": name}, "spec": spec}))
    };

    // A namespace without annotations: the cluster's selector and tolerations.
    let pods = Api::<Pod>::namespaced(client.clone(), "default");
    let created = pods
        .create(&PostParams::default(), &pod("plain", json!({})))
        .await
        .unwrap();
    let spec = created.spec.unwrap();
    assert_eq!(
        spec.node_selector.unwrap(),
        [("zone".to_string(), "a".to_string())].into()
    );
    let tolerations = spec.tolerations.unwrap();
    assert!(
        tolerations
            .iter()
            .any(|t| t.key.as_deref() == Some("dedicated") && t.value.as_deref() == Some("shared")),
        "{tolerations:?}"
    );
    // A toleration outside the cluster's whitelist.
    let (code, _, message) = status_of(
        pods.create(
            &PostParams::default(),
            &pod(
                "gpu",
                json!({"tolerations": [{"key": "gpu", "operator": "Exists"}]}),
            ),
        )
        .await,
    );
    assert_eq!(code, 500, "{message}");
    assert_eq!(
        message,
        "pod tolerations (possibly merged with namespace default tolerations) conflict with its namespace whitelist"
    );

    // A namespace with a whitelist of node labels (and the cluster default selector,
    // zone=a, since it has no annotation, merged in): env=dev passes, env=prod does not.
    namespace(&client, "limited", json!({})).await;
    let limited = Api::<Pod>::namespaced(client.clone(), "limited");
    let probe = pod("probe", json!({"nodeSelector": {"env": "dev"}}));
    until_admitted(&limited, &probe, |_| true).await;
    let (code, _, message) = status_of(
        limited
            .create(
                &PostParams::default(),
                &pod("prod", json!({"nodeSelector": {"env": "prod"}})),
            )
            .await,
    );
    assert_eq!(code, 403, "{message}");
    assert_eq!(
        message,
        "pods \"prod\" is forbidden: pod node label selector labels conflict with its namespace whitelist"
    );
    server.stop().await;
}
