//! Request bodies in Kubernetes protobuf (`application/vnd.kubernetes.protobuf`), as
//! kubectl and client-go controllers send them, through the real HTTPS apiserver.

use ferrokube_testing::TestApiServer;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::Api;
use serde_json::{Value, json};

const PB: &str = ferrokube_protobuf::MEDIA_TYPE;

fn req(method: &str, path: &str, body: Vec<u8>) -> http::Request<Vec<u8>> {
    http::Request::builder()
        .method(method)
        .uri(path)
        .header("Content-Type", PB)
        // What kubectl asks for: protobuf first, anything else as a fallback.
        .header("Accept", "application/vnd.kubernetes.protobuf, */*")
        .body(body)
        .unwrap()
}

fn pb(obj: Value) -> Vec<u8> {
    ferrokube_protobuf::encode_object(&obj).unwrap()
}

fn api_error(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("not an API error: {other:?}"),
    }
}

#[tokio::test]
async fn protobuf_bodies_create_and_update_objects() {
    let srv = TestApiServer::start().await.unwrap();
    let c = srv.client.clone();

    let created: Namespace = c
        .request(req(
            "POST",
            "/api/v1/namespaces",
            pb(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "pb"}})),
        ))
        .await
        .unwrap();
    assert_eq!(created.metadata.name.as_deref(), Some("pb"));
    assert!(created.metadata.uid.is_some());

    // A Deployment as `kubectl create deployment` builds it; replicas 0 is a pointer
    // zero and must survive.
    let deploy = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "nginx", "image": "nginx", "resources": {},
                    "ports": [{"containerPort": 80}],
                    "readinessProbe": {"httpGet": {"path": "/", "port": "http"}}}]}
            },
            "strategy": {}
        },
        "status": {}
    });
    let d: Deployment = c
        .request(req(
            "POST",
            "/apis/apps/v1/namespaces/pb/deployments",
            pb(deploy),
        ))
        .await
        .unwrap();
    let spec = d.spec.unwrap();
    assert_eq!(spec.replicas, Some(0));
    let pod = spec.template.spec.unwrap();
    assert_eq!(pod.containers[0].image.as_deref(), Some("nginx"));
    // Defaulting ran on the decoded object.
    assert_eq!(pod.restart_policy.as_deref(), Some("Always"));
    let stored = Api::<Deployment>::namespaced(c.clone(), "pb")
        .get("web")
        .await
        .unwrap();
    assert_eq!(stored.metadata.uid, d.metadata.uid);

    // Binary secret data travels as bytes.
    let s: Secret = c
        .request(req(
            "POST",
            "/api/v1/namespaces/pb/secrets",
            pb(
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
                      "type": "Opaque", "data": {"bin": "AAH/", "a": "Yg=="}}),
            ),
        ))
        .await
        .unwrap();
    let data = s.data.unwrap();
    assert_eq!(data["bin"].0, vec![0, 1, 255]);
    assert_eq!(data["a"].0, b"b");

    // PUT with a protobuf body.
    let cm: ConfigMap = c
        .request(req(
            "POST",
            "/api/v1/namespaces/pb/configmaps",
            pb(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "b"}})),
        ))
        .await
        .unwrap();
    let rv = cm.metadata.resource_version.unwrap();
    let updated: ConfigMap = c
        .request(req(
            "PUT",
            "/api/v1/namespaces/pb/configmaps/c",
            pb(json!({"apiVersion": "v1", "kind": "ConfigMap",
                      "metadata": {"name": "c", "resourceVersion": rv}, "data": {"a": "c"}})),
        ))
        .await
        .unwrap();
    assert_eq!(updated.data.unwrap()["a"], "c");

    // The kind/apiVersion checks of JSON bodies apply to protobuf ones.
    let e = c
        .request::<Value>(req(
            "POST",
            "/api/v1/namespaces/pb/secrets",
            pb(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})),
        ))
        .await
        .unwrap_err();
    assert_eq!(api_error(e).code, 400);

    // Malformed protobuf is a 400 Status, not a crash.
    for body in [
        b"k8s\0\x0a\xff".to_vec(),
        b"{\"kind\": \"Secret\"}".to_vec(),
        Vec::new(),
    ] {
        let e = c
            .request::<Value>(req("POST", "/api/v1/namespaces/pb/secrets", body))
            .await
            .unwrap_err();
        let e = api_error(e);
        assert_eq!(e.code, 400, "{}", e.message);
    }
    // The server is still serving.
    Api::<Namespace>::all(c.clone()).get("pb").await.unwrap();
    srv.stop().await;
}
