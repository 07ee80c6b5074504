//! Kubernetes protobuf (`application/vnd.kubernetes.protobuf`) through the real HTTPS
//! apiserver: request bodies as kubectl and client-go controllers send them, and
//! objects, lists, partial metadata and watch streams answered in it.

use std::collections::BTreeMap;

use ferrokube_testing::{TestApiServer, crd_established, eventually};
use http::HeaderValue;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::serde::de::DeserializeOwned;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

const PB: &str = ferrokube_protobuf::MEDIA_TYPE;
/// What kubectl's and client-go's typed clients ask for.
const PB_THEN_JSON: &str = "application/vnd.kubernetes.protobuf,application/json";

/// An answer: its code, `Content-Type` and body read by that type (protobuf or JSON).
struct Answer {
    code: u16,
    content_type: String,
    body: Value,
}

impl Answer {
    fn typed<T: DeserializeOwned>(self) -> T {
        assert!(self.code < 300, "{} {}", self.code, self.body);
        serde_json::from_value(self.body).unwrap()
    }
}

async fn send(
    c: &kube::Client,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> Answer {
    let (code, content_type, body) = TestApiServer::send_decoded(c, method, path, headers, body)
        .await
        .unwrap();
    Answer {
        code,
        content_type,
        body,
    }
}

/// A protobuf body sent as kubectl sends it.
async fn send_pb(c: &kube::Client, method: &str, path: &str, body: Vec<u8>) -> Answer {
    send(
        c,
        method,
        path,
        &[("content-type", PB), ("accept", PB_THEN_JSON)],
        body,
    )
    .await
}

fn pb(obj: Value) -> Vec<u8> {
    ferrokube_protobuf::encode_object(&obj).unwrap()
}

#[tokio::test]
async fn protobuf_bodies_create_and_update_objects() {
    let srv = TestApiServer::start().await.unwrap();
    let c = srv.client.clone();

    let created = send_pb(
        &c,
        "POST",
        "/api/v1/namespaces",
        pb(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "pb"}})),
    )
    .await;
    // Answered in protobuf, as kubectl asked first.
    assert_eq!(created.content_type, PB);
    let created: Namespace = created.typed();
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
    let d: Deployment = send_pb(
        &c,
        "POST",
        "/apis/apps/v1/namespaces/pb/deployments",
        pb(deploy),
    )
    .await
    .typed();
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
    let s: Secret = send_pb(
        &c,
        "POST",
        "/api/v1/namespaces/pb/secrets",
        pb(
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
                  "type": "Opaque", "data": {"bin": "AAH/", "a": "Yg=="}}),
        ),
    )
    .await
    .typed();
    let data = s.data.unwrap();
    assert_eq!(data["bin"].0, vec![0, 1, 255]);
    assert_eq!(data["a"].0, b"b");

    // PUT with a protobuf body.
    let cm: ConfigMap = send_pb(
        &c,
        "POST",
        "/api/v1/namespaces/pb/configmaps",
        pb(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "b"}})),
    )
    .await
    .typed();
    let rv = cm.metadata.resource_version.unwrap();
    let updated: ConfigMap = send_pb(
        &c,
        "PUT",
        "/api/v1/namespaces/pb/configmaps/c",
        pb(json!({"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": {"name": "c", "resourceVersion": rv}, "data": {"a": "c"}})),
    )
    .await
    .typed();
    assert_eq!(updated.data.unwrap()["a"], "c");

    // The kind/apiVersion checks of JSON bodies apply to protobuf ones.
    let e = send_pb(
        &c,
        "POST",
        "/api/v1/namespaces/pb/secrets",
        pb(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})),
    )
    .await;
    assert_eq!(e.code, 400);
    assert_eq!(e.body["kind"], "Status");

    // Malformed protobuf is a 400 Status, not a crash.
    for body in [
        b"k8s\0\x0a\xff".to_vec(),
        b"{\"kind\": \"Secret\"}".to_vec(),
        Vec::new(),
    ] {
        let e = send_pb(&c, "POST", "/api/v1/namespaces/pb/secrets", body).await;
        assert_eq!(e.code, 400, "{}", e.body);
    }
    // The server is still serving.
    Api::<Namespace>::all(c.clone()).get("pb").await.unwrap();
    srv.stop().await;
}

fn frames(mut bytes: &[u8]) -> Vec<(String, Value)> {
    let mut events = Vec::new();
    while let Some((kind, object, used)) = ferrokube_protobuf::decode_watch_frame(bytes).unwrap() {
        events.push((kind, object));
        bytes = &bytes[used..];
    }
    assert!(bytes.is_empty(), "a partial frame is left: {bytes:?}");
    events
}

#[tokio::test]
async fn objects_lists_metadata_and_watches_are_answered_in_protobuf() {
    let srv = TestApiServer::start().await.unwrap();
    let c = srv.client.clone();
    let pb_accept = [("accept", PB_THEN_JSON)];
    Api::<Namespace>::all(c.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "pbl"}})).unwrap(),
        )
        .await
        .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "pbl");
    let configmap = |name: &str| ConfigMap {
        metadata: kube::core::ObjectMeta {
            name: Some(name.into()),
            labels: Some(BTreeMap::from([("app".to_string(), "pb".to_string())])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("k".to_string(), name.to_string())])),
        ..Default::default()
    };
    for name in ["a", "b", "c"] {
        cms.create(&PostParams::default(), &configmap(name))
            .await
            .unwrap();
    }

    // One object: what JSON says, in protobuf.
    let path = "/api/v1/namespaces/pbl/configmaps/a";
    let one = send(&c, "GET", path, &pb_accept, vec![]).await;
    assert_eq!((one.code, one.content_type.as_str()), (200, PB));
    let as_json = send(&c, "GET", path, &[], vec![]).await;
    assert_eq!(as_json.content_type, "application/json");
    assert_eq!(one.body, as_json.body);

    // A page of a list, with its continue token and remaining count.
    let path = "/api/v1/namespaces/pbl/configmaps?limit=2";
    let page = send(&c, "GET", path, &pb_accept, vec![]).await;
    assert_eq!((page.code, page.content_type.as_str()), (200, PB));
    assert_eq!(page.body["kind"], "ConfigMapList");
    assert_eq!(page.body["metadata"]["remainingItemCount"], 1);
    let token = page.body["metadata"]["continue"].as_str().unwrap();
    let json_page = send(&c, "GET", path, &[], vec![]).await;
    let mut items = json_page.body["items"].as_array().unwrap().clone();
    for item in &mut items {
        // A list's items carry no type of their own in protobuf.
        item.as_object_mut().unwrap().remove("apiVersion");
        item.as_object_mut().unwrap().remove("kind");
    }
    assert_eq!(page.body["items"], Value::Array(items));
    let rest = send(
        &c,
        "GET",
        &format!("/api/v1/namespaces/pbl/configmaps?limit=2&continue={token}"),
        &pb_accept,
        vec![],
    )
    .await;
    assert_eq!(rest.body["items"][0]["metadata"]["name"], "c");
    let list_rv = page.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();

    // Partial metadata, as client-go's metadata informers ask for it.
    let metadata = send(
        &c,
        "GET",
        "/api/v1/namespaces/pbl/configmaps",
        &[("accept", "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json")],
        vec![],
    )
    .await;
    assert_eq!(metadata.content_type, "application/vnd.kubernetes.protobuf");
    assert_eq!(metadata.body["kind"], "PartialObjectMetadataList");
    assert_eq!(metadata.body["items"][1]["metadata"]["name"], "b");
    assert_eq!(metadata.body["items"][1]["metadata"]["labels"]["app"], "pb");
    assert!(metadata.body["items"][1].get("data").is_none());

    // A delete's Status, and an error (a JSON Status, which clients read by its type).
    cms.create(&PostParams::default(), &configmap("d"))
        .await
        .unwrap();
    let deleted = send(
        &c,
        "DELETE",
        "/api/v1/namespaces/pbl/configmaps/b",
        &pb_accept,
        vec![],
    )
    .await;
    assert_eq!((deleted.code, deleted.content_type.as_str()), (200, PB));
    assert_eq!(deleted.body["kind"], "Status");
    assert_eq!(deleted.body["details"]["name"], "b");
    let missing = send(
        &c,
        "GET",
        "/api/v1/namespaces/pbl/configmaps/b",
        &pb_accept,
        vec![],
    )
    .await;
    assert_eq!(
        (missing.code, missing.body["reason"].as_str()),
        (404, Some("NotFound"))
    );

    // A binding's Status.
    let json_in = |body: Value| serde_json::to_vec(&body).unwrap();
    let headers = [
        ("content-type", "application/json"),
        ("accept", PB_THEN_JSON),
    ];
    Api::<k8s_openapi::api::core::v1::Pod>::namespaced(c.clone(), "pbl")
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "p"},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]}}))
            .unwrap(),
        )
        .await
        .unwrap();
    let bound = send(
        &c,
        "POST",
        "/api/v1/namespaces/pbl/pods/p/binding",
        &headers,
        json_in(
            json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"},
                       "target": {"kind": "Node", "name": "n1"}}),
        ),
    )
    .await;
    assert_eq!(
        (bound.code, bound.content_type.as_str()),
        (201, PB),
        "{}",
        bound.body
    );
    assert_eq!(bound.body["status"], "Success");

    // A review and a TokenRequest sent and answered in protobuf, as kubectl's
    // `auth can-i` and `create token` do.
    let review = send_pb(
        &c,
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        pb(
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "metadata": {}, "spec": {"resourceAttributes": {"verb": "list", "resource": "pods",
            "namespace": "pbl"}}}),
        ),
    )
    .await;
    assert_eq!(
        (review.code, review.content_type.as_str()),
        (201, PB),
        "{}",
        review.body
    );
    assert_eq!(review.body["kind"], "SelfSubjectAccessReview");
    assert_eq!(review.body["status"]["allowed"], true);
    assert_eq!(
        review.body["spec"]["resourceAttributes"]["namespace"],
        "pbl"
    );
    let robot = send(
        &c,
        "POST",
        "/api/v1/namespaces/pbl/serviceaccounts",
        &headers,
        json_in(
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "robot"}}),
        ),
    )
    .await;
    assert_eq!(robot.code, 201, "{}", robot.body);
    let token = send_pb(
        &c,
        "POST",
        "/api/v1/namespaces/pbl/serviceaccounts/robot/token",
        pb(
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "metadata": {}, "spec": {"audiences": [], "expirationSeconds": 600},
            // kubectl's body carries the empty status of a Go struct.
            "status": {"token": ""}}),
        ),
    )
    .await;
    assert_eq!(
        (token.code, token.content_type.as_str()),
        (201, PB),
        "{}",
        token.body
    );
    assert_eq!(token.body["spec"]["expirationSeconds"], 600);
    assert!(
        token.body["status"]["token"]
            .as_str()
            .unwrap()
            .starts_with("eyJ")
    );
    // A malformed protobuf review is a 400.
    let bad = send_pb(
        &c,
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        b"k8s\0\x0a\xff".to_vec(),
    )
    .await;
    assert_eq!(bad.code, 400, "{}", bad.body);

    // A watch from the list's resourceVersion: the changes since, as protobuf frames.
    let watch = |query: String| {
        let c = c.clone();
        async move {
            let path =
                format!("/api/v1/namespaces/pbl/configmaps?watch=true&timeoutSeconds=1&{query}");
            let (code, headers, bytes) = TestApiServer::raw(&c, "GET", &path, &pb_accept, vec![])
                .await
                .unwrap();
            assert_eq!(code, 200);
            assert_eq!(
                headers["content-type"],
                "application/vnd.kubernetes.protobuf;stream=watch"
            );
            frames(&bytes)
        }
    };
    let events: Vec<(String, Value)> = watch(format!("resourceVersion={list_rv}"))
        .await
        .into_iter()
        .filter(|(kind, _)| kind != "BOOKMARK")
        .collect();
    let seen: Vec<(&str, &str)> = events
        .iter()
        .map(|(k, o)| (k.as_str(), o["metadata"]["name"].as_str().unwrap()))
        .collect();
    assert_eq!(seen, [("ADDED", "d"), ("DELETED", "b")]);
    assert_eq!(events[0].1["data"]["k"], "d");
    assert_eq!(events[0].1["kind"], "ConfigMap");

    // A streaming list: the initial events, then the bookmark that ends them.
    let events = watch(
        "sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true".into(),
    )
    .await;
    let names: Vec<&str> = events
        .iter()
        .take(3)
        .map(|(k, o)| {
            assert_eq!(k, "ADDED");
            o["metadata"]["name"].as_str().unwrap()
        })
        .collect();
    assert_eq!(names, ["a", "c", "d"]);
    let (kind, bookmark) = &events[3];
    assert_eq!(kind, "BOOKMARK");
    assert_eq!(bookmark["kind"], "ConfigMap");
    assert_eq!(
        bookmark["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );

    // A custom resource has no protobuf form: JSON when the client takes it, else a
    // 406; its partial metadata is served in protobuf.
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    });
    let (code, _, _) = TestApiServer::send_json(
        &c,
        "POST",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &crd,
    )
    .await
    .unwrap();
    assert_eq!(code, 201);
    assert!(eventually(|| crd_established(&c, "widgets.example.com")).await);
    let widgets = "/apis/example.com/v1/namespaces/pbl/widgets";
    let (code, _, _) = TestApiServer::send_json(
        &c,
        "POST",
        widgets,
        &json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}),
    )
    .await
    .unwrap();
    assert_eq!(code, 201);
    let listed = send(&c, "GET", widgets, &pb_accept, vec![]).await;
    assert_eq!(
        (listed.code, listed.content_type.as_str()),
        (200, "application/json")
    );
    assert_eq!(listed.body["items"][0]["metadata"]["name"], "w");
    let refused = send(&c, "GET", widgets, &[("accept", PB)], vec![]).await;
    assert_eq!(refused.code, 406);
    assert_eq!(
        refused.body["message"],
        "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf"
    );
    let metadata = send(
        &c,
        "GET",
        &format!("{widgets}/w"),
        &[(
            "accept",
            "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
        )],
        vec![],
    )
    .await;
    assert_eq!(metadata.code, 200);
    assert_eq!(metadata.body["kind"], "PartialObjectMetadata");
    assert_eq!(metadata.body["metadata"]["name"], "w");
    // A metadata watch of it, as client-go's metadata informers stream a list: every
    // frame partial metadata, the bookmark that ends the initial events too.
    let (code, headers, bytes) = TestApiServer::raw(
        &c,
        "GET",
        &format!("{widgets}?watch=true&timeoutSeconds=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"),
        &[("accept", "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json")],
        vec![],
    )
    .await
    .unwrap();
    assert_eq!(code, 200);
    assert_eq!(
        headers["content-type"],
        "application/vnd.kubernetes.protobuf;stream=watch"
    );
    let events = frames(&bytes);
    let seen: Vec<(&str, &str)> = events
        .iter()
        .map(|(k, o)| (k.as_str(), o["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(
        seen,
        [
            ("ADDED", "PartialObjectMetadata"),
            ("BOOKMARK", "PartialObjectMetadata")
        ]
    );
    assert_eq!(events[0].1["metadata"]["name"], "w");
    assert_eq!(
        events[1].1["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    srv.stop().await;
}

/// Errors are answered in the form the client's `Accept` names first, as upstream
/// negotiates every error's Status: a typed client-go client reads protobuf ones.
#[tokio::test]
async fn errors_are_answered_in_the_form_asked() {
    let srv = TestApiServer::start().await.unwrap();
    let c = srv.client.clone();
    let missing = "/api/v1/namespaces/default/configmaps/missing";
    let status_of = |a: &Answer| {
        (
            a.code,
            a.body["kind"].as_str().unwrap_or_default().to_string(),
            a.body["reason"].as_str().unwrap_or_default().to_string(),
            a.body["code"].as_u64().unwrap_or_default() as u16,
        )
    };
    let not_found = (404, "Status".to_string(), "NotFound".to_string(), 404);

    let protobuf = send(&c, "GET", missing, &[("accept", PB_THEN_JSON)], vec![]).await;
    assert_eq!(protobuf.content_type, PB);
    assert_eq!(status_of(&protobuf), not_found);
    assert_eq!(protobuf.body["message"], "configmaps \"missing\" not found");

    // kubectl get's Table ranges are passed over for an error: its JSON fallback.
    let table = send(
        &c,
        "GET",
        missing,
        &[(
            "accept",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json",
        )],
        vec![],
    )
    .await;
    assert_eq!(table.content_type, "application/json");
    assert_eq!(status_of(&table), not_found);

    let (code, headers, bytes) = TestApiServer::raw(
        &c,
        "GET",
        missing,
        &[("accept", "application/yaml")],
        vec![],
    )
    .await
    .unwrap();
    assert_eq!(
        (code, &headers["content-type"]),
        (404, &HeaderValue::from_static("application/yaml"))
    );
    let yaml = String::from_utf8(bytes.to_vec()).unwrap();
    assert!(yaml.contains("\nreason: NotFound\n"), "{yaml}");

    // No form the server has: JSON.
    let html = send(&c, "GET", missing, &[("accept", "text/html")], vec![]).await;
    assert_eq!(html.content_type, "application/json");

    // An invalid object sent in protobuf: its 422 in protobuf, causes and all.
    let invalid = send_pb(
        &c,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        pb(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "Not_A_Name"},
        })),
    )
    .await;
    assert_eq!(invalid.content_type, PB);
    assert_eq!(
        (invalid.code, invalid.body["reason"].as_str()),
        (422, Some("Invalid"))
    );
    assert_eq!(
        invalid.body["details"]["causes"][0]["field"],
        "metadata.name"
    );

    // Refused before any handler: the anonymous user's answer.
    let anonymous = srv.anonymous_client().await.unwrap();
    let refused = send(
        &anonymous,
        "GET",
        "/api/v1/namespaces/default/configmaps",
        &[("accept", PB_THEN_JSON)],
        vec![],
    )
    .await;
    assert_eq!(refused.content_type, PB);
    assert_eq!(refused.body["kind"], "Status");
    assert_eq!(refused.body["code"].as_u64(), Some(refused.code as u64));
    assert!(matches!(refused.code, 401 | 403), "{}", refused.code);
}
