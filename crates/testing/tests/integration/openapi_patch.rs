//! OpenAPI endpoints (content types, ETag, caching headers) and strategic merge
//! patch, through kube-rs.

use ferrokube_testing::TestApiServer;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const V2_PB: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
const V2_PB_RESPONSE: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

fn header<'a>(h: &'a http::HeaderMap, k: &str) -> &'a str {
    h.get(k).and_then(|v| v.to_str().ok()).unwrap_or("")
}

#[tokio::test]
async fn openapi_v2_and_v3() {
    let srv = TestApiServer::start().await.unwrap();
    let c = &srv.client;
    let get = |path: &'static str, accept: &'static str| async move {
        let h: Vec<(&str, &str)> = if accept.is_empty() {
            vec![]
        } else {
            vec![("Accept", accept)]
        };
        TestApiServer::raw(c, "GET", path, &h, Vec::new())
            .await
            .unwrap()
    };

    // v2 JSON.
    let (code, h, body) = get("/openapi/v2", "application/json").await;
    assert_eq!(code, 200);
    assert_eq!(header(&h, "content-type"), "application/json");
    let etag = header(&h, "etag").to_string();
    assert!(etag.starts_with('"') && etag.len() == 130, "{etag}");
    assert!(!header(&h, "last-modified").is_empty());
    assert_eq!(header(&h, "vary"), "Accept");
    let doc: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["swagger"], "2.0");
    let dep = &doc["definitions"]["io.k8s.api.apps.v1.Deployment"];
    assert_eq!(
        dep["x-kubernetes-group-version-kind"][0]["kind"],
        "Deployment"
    );
    let containers = &doc["definitions"]["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
    assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
    assert_eq!(containers["x-kubernetes-patch-strategy"], "merge");

    // If-None-Match with the ETag: 304.
    let (code, _, body) = TestApiServer::raw(
        c,
        "GET",
        "/openapi/v2",
        &[("Accept", "application/json"), ("If-None-Match", &etag)],
        Vec::new(),
    )
    .await
    .unwrap();
    assert_eq!((code, body.len()), (304, 0));

    // v2 protobuf, both spellings, answered with the dotted Content-Type.
    for accept in [V2_PB, V2_PB_RESPONSE] {
        let (code, h, body) = get("/openapi/v2", accept).await;
        assert_eq!(code, 200);
        assert_eq!(header(&h, "content-type"), V2_PB_RESPONSE);
        assert!(body.len() > 1000);
        assert_ne!(body[0], b'{');
    }
    // kubectl's Accept: protobuf first, JSON as a lower-q fallback.
    let (_, h, _) = get(
        "/openapi/v2",
        "application/com.github.proto-openapi.spec.v2@v1.0+protobuf, application/json;q=0.9",
    )
    .await;
    assert_eq!(header(&h, "content-type"), V2_PB_RESPONSE);
    let (code, h, _) = get("/swagger-2.0.0.pb-v1", "").await;
    assert_eq!(code, 200);
    assert_eq!(header(&h, "content-type"), "application/octet-stream");
    let (code, _, _) = get("/openapi/v2", "text/html").await;
    assert_eq!(code, 406);

    // v3 index -> per group-version documents with ?hash.
    let (code, h, body) = get("/openapi/v3", "").await;
    assert_eq!(code, 200);
    assert_eq!(header(&h, "content-type"), "application/json");
    let index: Value = serde_json::from_slice(&body).unwrap();
    let url = index["paths"]["apis/apps/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(url.starts_with("/openapi/v3/apis/apps/v1?hash="), "{url}");
    assert!(index["paths"]["api/v1"].is_object());
    let hash = url.split("hash=").nth(1).unwrap().to_string();
    let (code, h, body) = TestApiServer::raw(c, "GET", &url, &[], Vec::new())
        .await
        .unwrap();
    assert_eq!(code, 200);
    assert_eq!(header(&h, "etag"), format!("\"{hash}\""));
    assert_eq!(header(&h, "cache-control"), "public, immutable");
    assert!(header(&h, "expires").ends_with(" GMT"));
    let doc: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["openapi"], "3.0.0");
    assert!(doc["components"]["schemas"]["io.k8s.api.apps.v1.Deployment"].is_object());
    // Without a hash: no immutable caching. A stale hash: redirected to the current.
    let (code, h, _) = get("/openapi/v3/apis/apps/v1", "").await;
    assert_eq!(code, 200);
    assert_eq!(header(&h, "cache-control"), "");
    let (code, h, _) = get("/openapi/v3/apis/apps/v1?hash=STALE", "").await;
    assert_eq!(code, 301);
    assert_eq!(header(&h, "location"), url);
    let (code, _, _) = get("/openapi/v3/apis/nope/v1", "").await;
    assert_eq!(code, 404);
}

/// The documents are held gzip-compressed: a client that accepts gzip gets those bytes
/// (`Content-Encoding: gzip`), any other the same document inflated, with its exact
/// `Content-Length`; both carry the same `ETag` and `Vary: Accept, Accept-Encoding`.
#[tokio::test]
async fn openapi_gzip_and_identity() {
    use std::io::Read;
    let srv = TestApiServer::start().await.unwrap();
    // A client that does not decompress, to see the encoding.
    let mut cfg = srv.kube_config().await.unwrap();
    cfg.disable_compression = true;
    let raw = kube::Client::try_from(cfg).unwrap();
    let (_, _, index) = TestApiServer::raw(&raw, "GET", "/openapi/v3", &[], vec![])
        .await
        .unwrap();
    let index: Value = serde_json::from_slice(&index).unwrap();
    let core = index["paths"]["api/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .to_string();
    for (path, accept) in [
        ("/openapi/v2", "application/json"),
        ("/openapi/v2", V2_PB),
        ("/swagger-2.0.0.pb-v1", ""),
        ("/openapi/v3", ""),
        (core.as_str(), "application/json"),
    ] {
        let mut gzip_headers = vec![("Accept-Encoding", "gzip")];
        let mut plain_headers = vec![];
        if !accept.is_empty() {
            gzip_headers.push(("Accept", accept));
            plain_headers.push(("Accept", accept));
        }
        let (code, gz_h, gz) = TestApiServer::raw(&raw, "GET", path, &gzip_headers, vec![])
            .await
            .unwrap();
        assert_eq!(code, 200, "{path}");
        assert_eq!(header(&gz_h, "content-encoding"), "gzip", "{path}");
        let (code, h, plain) = TestApiServer::raw(&raw, "GET", path, &plain_headers, vec![])
            .await
            .unwrap();
        assert_eq!(code, 200, "{path}");
        assert_eq!(header(&h, "content-encoding"), "", "{path}");
        assert_eq!(
            header(&h, "content-length"),
            plain.len().to_string(),
            "{path}"
        );
        let mut inflated = Vec::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_end(&mut inflated)
            .unwrap();
        assert_eq!(inflated, plain, "{path}");
        assert_eq!(header(&gz_h, "etag"), header(&h, "etag"), "{path}");
        assert_eq!(header(&gz_h, "content-type"), header(&h, "content-type"));
        let vary: Vec<&str> = h
            .get_all("vary")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        assert_eq!(vary, ["Accept", "Accept-Encoding"], "{path}");
    }
    // The v2 JSON is large and compresses well.
    let (_, _, gz) = TestApiServer::raw(
        &raw,
        "GET",
        "/openapi/v2",
        &[("Accept-Encoding", "gzip"), ("Accept", "application/json")],
        vec![],
    )
    .await
    .unwrap();
    let (_, _, plain) = TestApiServer::raw(&raw, "GET", "/openapi/v2", &[], vec![])
        .await
        .unwrap();
    assert!(plain.len() > 1 << 20 && gz.len() * 5 < plain.len());
    assert_eq!(
        serde_json::from_slice::<Value>(&plain).unwrap()["swagger"],
        "2.0"
    );
}

fn deployment() -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [
                    {"name": "web", "image": "nginx:1", "env": [{"name": "A", "value": "1"}]},
                    {"name": "sidecar", "image": "busybox:1"},
                    {"name": "logger", "image": "fluentd:1"}
                ]}
            }
        }
    }))
    .unwrap()
}

fn names(d: &Deployment) -> Vec<(String, String)> {
    d.spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers
        .iter()
        .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default()))
        .collect()
}

#[tokio::test]
async fn strategic_merge_patch_of_builtin_types() {
    let srv = TestApiServer::start().await.unwrap();
    let deps: Api<Deployment> = Api::namespaced(srv.client.clone(), "default");
    deps.create(&PostParams::default(), &deployment())
        .await
        .unwrap();
    let pp = PatchParams::default();

    // Containers merge by name: the others are kept; env merges by name too.
    let d = deps
        .patch(
            "web",
            &pp,
            &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [
                {"name": "web", "image": "nginx:2", "env": [{"name": "B", "value": "2"}]}
            ]}}}})),
        )
        .await
        .unwrap();
    let want = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    };
    assert_eq!(
        names(&d),
        want(&[
            ("web", "nginx:2"),
            ("sidecar", "busybox:1"),
            ("logger", "fluentd:1")
        ])
    );
    let env: Vec<String> = d
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
        .env
        .as_ref()
        .unwrap()
        .iter()
        .map(|e| e.name.clone())
        .collect();
    assert_eq!(env, ["B", "A"]);

    // `$patch: delete` removes one container.
    let d = deps
        .patch(
            "web",
            &pp,
            &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [
                {"name": "sidecar", "$patch": "delete"}
            ]}}}})),
        )
        .await
        .unwrap();
    assert_eq!(
        names(&d),
        want(&[("web", "nginx:2"), ("logger", "fluentd:1")])
    );

    // `$setElementOrder` reorders while merging.
    let d = deps
        .patch(
            "web",
            &pp,
            &Patch::Strategic(json!({"spec": {"template": {"spec": {
                "$setElementOrder/containers": [{"name": "logger"}, {"name": "web"}],
                "containers": [{"name": "logger", "image": "fluentd:2"}]
            }}}})),
        )
        .await
        .unwrap();
    assert_eq!(
        names(&d),
        want(&[("logger", "fluentd:2"), ("web", "nginx:2")])
    );

    // The same patch as a merge patch replaces the list.
    let d = deps
        .patch(
            "web",
            &pp,
            &Patch::Merge(json!({"spec": {"template": {"spec": {"containers": [
                {"name": "only", "image": "x:1"}
            ]}}}})),
        )
        .await
        .unwrap();
    assert_eq!(names(&d), want(&[("only", "x:1")]));

    // A directive of the wrong type: upstream's patch handler passes this engine
    // error through as a 500 with Go's message; the patch is what is wrong, so this
    // server answers 400 with the same message.
    let e = deps
        .patch(
            "web",
            &pp,
            &Patch::Strategic(json!({"spec": {"template": {"spec": {
                "$setElementOrder/containers": "nope"
            }}}})),
        )
        .await
        .unwrap_err();
    match e {
        kube::Error::Api(s) => assert_eq!(
            (s.code, s.message.as_str()),
            (400, "expected a []interface {}, but received a string")
        ),
        other => panic!("{other:?}"),
    }
}
