//! The `--feature-gates` the apiserver acts on, turned off: each behaviour as it was
//! before its gate (the defaults, on, are what the other modules test).

use std::time::Duration;

use ferrokube_apiserver::Options;
use ferrokube_apiserver::features::Features;
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::{Value, json};

fn every_gate_off(o: &mut Options) {
    o.features = Features {
        apiserver_identity: false,
        remove_discovery_beta: false,
        uid_from_client_certificate: false,
        authorize_node_with_selectors: false,
        authorize_with_selectors: false,
        node_token_audiences: false,
        storage_version_hash: false,
    };
}

async fn get(client: &kube::Client, path: &str, accept: &str) -> (u16, http::HeaderMap, Value) {
    let (code, headers, body) =
        TestApiServer::raw(client, "GET", path, &[("accept", accept)], Vec::new())
            .await
            .unwrap();
    let body = serde_json::from_slice(&body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
    (code, headers, body)
}

#[tokio::test]
async fn gates_turned_off_bring_back_the_behaviour_before_them() {
    let server = TestApiServer::start_with(every_gate_off).await.unwrap();
    let admin = server.client.clone();

    // AuthorizeNodeWithSelectors off: the system:node rules let a kubelet read all pods.
    let node_a = server
        .client_as("system:node:node-a", &["system:nodes"])
        .await
        .unwrap();
    let pods = Api::<Pod>::all(node_a.clone());
    assert!(pods.list(&ListParams::default()).await.is_ok());

    // StorageVersionHash off: discovery gives none.
    let (code, _, core) = get(&admin, "/api/v1", "application/json").await;
    assert_eq!(code, 200);
    let resources = core["resources"].as_array().unwrap();
    assert!(resources.iter().any(|r| r["name"] == "pods"));
    assert!(
        resources
            .iter()
            .all(|r| r.get("storageVersionHash").is_none())
    );

    // AggregatedDiscoveryRemoveBetaType off: v2beta1 is served.
    let beta = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";
    let (code, headers, list) = get(&admin, "/apis", &format!("{beta},application/json")).await;
    assert_eq!(code, 200);
    assert_eq!(list["apiVersion"], "apidiscovery.k8s.io/v2beta1");
    assert_eq!(headers["content-type"], beta);

    // APIServerIdentity off: no identity lease, and no hooks of its controllers.
    let (_, _, readyz) = get(&admin, "/readyz?verbose", "text/plain").await;
    let readyz = readyz.as_str().unwrap_or_default().to_string();
    assert!(readyz.contains("poststarthook/start-legacy-token-tracking-controller"));
    assert!(!readyz.contains("identity-lease"), "{readyz}");
    let (_, _, leases) = get(
        &admin,
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases?labelSelector=apiserver.kubernetes.io%2Fidentity",
        "application/json",
    )
    .await;
    assert_eq!(leases["items"], json!([]));

    // ServiceAccountNodeAudienceRestriction off: a kubelet's token for its pod may name
    // any audiences.
    let call = |client: kube::Client, method: &'static str, path: &'static str, body: Value| async move {
        let (code, _, body) = TestApiServer::send_json(&client, method, path, &body)
            .await
            .unwrap();
        (code, body)
    };
    let (code, _) = call(
        admin.clone(),
        "POST",
        "/api/v1/namespaces/default/serviceaccounts",
        json!({"metadata": {"name": "robot"}}),
    )
    .await;
    assert_eq!(code, 201);
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "on-a"},
        "spec": {"nodeName": "node-a", "serviceAccountName": "robot",
            "containers": [{"name": "c", "image": "busybox"}]}}))
    .unwrap();
    let pod = Api::<Pod>::namespaced(admin.clone(), "default")
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
    let request = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"audiences": ["vault", "elsewhere"], "boundObjectRef": {"kind": "Pod",
            "apiVersion": "v1", "name": "on-a", "uid": pod.metadata.uid}}});
    let mut answer = (0, Value::Null);
    for _ in 0..100 {
        answer = call(
            node_a.clone(),
            "POST",
            "/api/v1/namespaces/default/serviceaccounts/robot/token",
            request.clone(),
        )
        .await;
        if answer.0 == 201 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(answer.0, 201, "{}", answer.1);
    server.stop().await;
}
