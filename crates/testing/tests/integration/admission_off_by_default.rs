//! Three admission plugins upstream leaves off, each turned on by
//! `--enable-admission-plugins`: NamespaceAutoProvision (a create into a missing
//! namespace makes it), LimitPodHardAntiAffinityTopology (required pod anti-affinity
//! only per host) and AlwaysDeny (every write refused, reads still served).

use ferrokube_testing::TestApiServer;
use serde_json::{Value, json};

fn enable(o: &mut ferrokube_apiserver::Options, name: &str) {
    o.admission_plugins.set(name, true).expect("a known plugin");
}

async fn post(server: &TestApiServer, path: &str, body: &Value) -> (u16, Value) {
    let (code, _, answer) = TestApiServer::send_json(&server.client, "POST", path, body)
        .await
        .unwrap();
    (code, answer)
}

async fn get(server: &TestApiServer, path: &str) -> (u16, Value) {
    let (code, _, body) = TestApiServer::raw(&server.client, "GET", path, &[], vec![])
        .await
        .unwrap();
    (code, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

fn configmap(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}})
}

#[tokio::test]
async fn namespace_autoprovision_creates_the_missing_namespace() {
    let server = TestApiServer::start_with(|o| enable(o, "NamespaceAutoProvision"))
        .await
        .unwrap();
    let (code, answer) = post(
        &server,
        "/api/v1/namespaces/made-on-demand/configmaps",
        &configmap("c"),
    )
    .await;
    assert_eq!(code, 201, "{answer}");
    let (code, namespace) = get(&server, "/api/v1/namespaces/made-on-demand").await;
    assert_eq!(code, 200, "{namespace}");
    assert_eq!(namespace["status"]["phase"], "Active");

    // A dry run makes nothing, so the namespace is still missing for it.
    let (code, answer) = post(
        &server,
        "/api/v1/namespaces/dry-only/configmaps?dryRun=All",
        &configmap("c"),
    )
    .await;
    assert_eq!(code, 404, "{answer}");
    assert_eq!(get(&server, "/api/v1/namespaces/dry-only").await.0, 404);
    server.stop().await;
}

fn pod_with_anti_affinity(name: &str, topology_key: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "nginx"}],
            "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "a"}}, "topologyKey": topology_key}]}}}})
}

#[tokio::test]
async fn hard_anti_affinity_is_limited_to_the_host() {
    let server = TestApiServer::start_with(|o| enable(o, "LimitPodHardAntiAffinityTopology"))
        .await
        .unwrap();
    let pods = "/api/v1/namespaces/default/pods";
    let (code, answer) = post(
        &server,
        pods,
        &pod_with_anti_affinity("per-host", "kubernetes.io/hostname"),
    )
    .await;
    assert_eq!(code, 201, "{answer}");
    let (code, status) = post(
        &server,
        pods,
        &pod_with_anti_affinity("per-zone", "topology.kubernetes.io/zone"),
    )
    .await;
    assert_eq!(code, 403, "{status}");
    assert_eq!(
        status["message"],
        "pods \"per-zone\" is forbidden: affinity.PodAntiAffinity.RequiredDuringScheduling has TopologyKey topology.kubernetes.io/zone but only key kubernetes.io/hostname is allowed"
    );
    server.stop().await;
}

#[tokio::test]
async fn always_deny_refuses_writes_and_serves_reads() {
    let server = TestApiServer::start_with(|o| enable(o, "AlwaysDeny"))
        .await
        .unwrap();
    let (code, status) = post(
        &server,
        "/api/v1/namespaces/default/configmaps",
        &configmap("refused"),
    )
    .await;
    assert_eq!(code, 403, "{status}");
    assert_eq!(
        status["message"],
        "configmaps \"refused\" is forbidden: admission control is denying all modifications"
    );
    let (code, _, _) = TestApiServer::raw(
        &server.client,
        "DELETE",
        "/api/v1/namespaces/default",
        &[],
        vec![],
    )
    .await
    .unwrap();
    assert_eq!(code, 403);
    assert_eq!(get(&server, "/api/v1/namespaces/default").await.0, 200);
    server.stop().await;
}
