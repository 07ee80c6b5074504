//! Tables, partial metadata, gzip, duplicate fields, 410s and the bad-input statuses,
//! through kube-rs.

use std::io::Read;

use ferrokube_testing::TestApiServer;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{
    Api, DeleteParams, ListParams, PostParams, PostParams as Pp, WatchEvent, WatchParams,
};
use serde_json::{Value, json};

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": {"app": "x"}},
        "data": {"k": "v"}}))
    .unwrap()
}

fn header<'a>(h: &'a http::HeaderMap, k: &str) -> &'a str {
    h.get(k).and_then(|v| v.to_str().ok()).unwrap_or("")
}

const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";

fn column_names(table: &Value) -> Vec<&str> {
    table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn tables_and_partial_metadata() {
    let srv = TestApiServer::start().await.unwrap();
    let c = &srv.client;
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "p", "labels": {"a": "b"}},
            "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}))
        .unwrap(),
    )
    .await
    .unwrap();
    let get = |path: String, accept: &'static str| async move {
        let (code, h, body) = TestApiServer::raw(c, "GET", &path, &[("Accept", accept)], vec![])
            .await
            .unwrap();
        assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
        (h, serde_json::from_slice::<Value>(&body).unwrap())
    };

    // A list as a Table: upstream's pod columns, cells per column, metadata objects.
    // Upstream writes a transformed answer's media type as its serializer's, without
    // the `as`, `g` and `v` asked for.
    let (h, t) = get("/api/v1/namespaces/default/pods".into(), TABLE).await;
    assert_eq!(header(&h, "content-type"), "application/json");
    assert_eq!(
        (t["kind"].as_str(), t["apiVersion"].as_str()),
        (Some("Table"), Some("meta.k8s.io/v1"))
    );
    let cols = column_names(&t);
    assert_eq!(
        cols,
        [
            "Name",
            "Ready",
            "Status",
            "Restarts",
            "Age",
            "IP",
            "Node",
            "Nominated Node",
            "Readiness Gates"
        ]
    );
    assert!(t["metadata"]["resourceVersion"].as_str().is_some());
    let row = &t["rows"][0];
    assert_eq!(row["cells"].as_array().unwrap().len(), cols.len());
    assert_eq!(
        row["cells"].as_array().unwrap()[..3],
        json!(["p", "0/1", "Pending"]).as_array().unwrap()[..]
    );
    assert_eq!(row["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(row["object"]["metadata"]["labels"]["a"], "b");
    assert!(row["object"].get("spec").is_none());

    // meta.k8s.io/v1beta1, which clients older than v1 ask for: the same Table in that
    // version, its rows' partial metadata too; and partial metadata lists.
    const TABLE_V1BETA1: &str = "application/json;as=Table;v=v1beta1;g=meta.k8s.io";
    let (h, t) = get("/api/v1/namespaces/default/pods".into(), TABLE_V1BETA1).await;
    assert_eq!(header(&h, "content-type"), "application/json");
    assert_eq!(t["apiVersion"], "meta.k8s.io/v1beta1");
    assert_eq!(column_names(&t), cols);
    assert_eq!(t["rows"][0]["object"]["apiVersion"], "meta.k8s.io/v1beta1");
    let (h, m) = get(
        "/api/v1/namespaces/default/pods".into(),
        "application/json;as=PartialObjectMetadataList;v=v1beta1;g=meta.k8s.io",
    )
    .await;
    assert_eq!(header(&h, "content-type"), "application/json");
    assert_eq!(
        (&m["kind"], &m["apiVersion"]),
        (
            &json!("PartialObjectMetadataList"),
            &json!("meta.k8s.io/v1beta1")
        )
    );
    assert_eq!(m["items"][0]["apiVersion"], "meta.k8s.io/v1beta1");
    assert_eq!(m["items"][0]["metadata"]["name"], "p");

    // includeObject=None and =Object.
    let (_, t) = get(
        "/api/v1/namespaces/default/pods?includeObject=None".into(),
        TABLE,
    )
    .await;
    assert!(t["rows"][0]["object"].is_null());
    let (_, t) = get(
        "/api/v1/namespaces/default/pods?includeObject=Object".into(),
        TABLE,
    )
    .await;
    assert_eq!(t["rows"][0]["object"]["kind"], "Pod");
    assert_eq!(t["rows"][0]["object"]["spec"]["containers"][0]["name"], "c");
    let (code, _, _) = TestApiServer::raw(
        c,
        "GET",
        "/api/v1/namespaces/default/pods?includeObject=All",
        &[("Accept", TABLE)],
        vec![],
    )
    .await
    .unwrap();
    assert_eq!(code, 400);

    // One object as a Table; a kind without a printer gets Name + Created At.
    let (_, t) = get("/api/v1/namespaces/default/pods/p".into(), TABLE).await;
    assert_eq!(t["rows"].as_array().unwrap().len(), 1);
    let (_, t) = get("/apis/scheduling.k8s.io/v1/priorityclasses".into(), TABLE).await;
    assert_eq!(t["columnDefinitions"][1]["name"], "Value");

    // A scale subresource as a Table: upstream's Scale columns.
    let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "rs"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"a": "b"}},
            "template": {"metadata": {"labels": {"a": "b"}},
                "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}}});
    let (code, _, _) = TestApiServer::raw(
        c,
        "POST",
        "/apis/apps/v1/namespaces/default/replicasets",
        &[("Content-Type", "application/json")],
        rs.to_string().into_bytes(),
    )
    .await
    .unwrap();
    assert_eq!(code, 201);
    let (h, t) = get(
        "/apis/apps/v1/namespaces/default/replicasets/rs/scale".into(),
        TABLE,
    )
    .await;
    assert_eq!(header(&h, "content-type"), "application/json");
    let cols = column_names(&t);
    assert_eq!(cols, ["Name", "Desired", "Available", "Age"]);
    assert_eq!(
        t["rows"][0]["cells"].as_array().unwrap()[..3],
        json!(["rs", 3, 0]).as_array().unwrap()[..]
    );
    let (_, scale) = get(
        "/apis/apps/v1/namespaces/default/replicasets/rs/scale".into(),
        "application/json",
    )
    .await;
    assert_eq!(scale["kind"], "Scale");

    // PartialObjectMetadata(List).
    let (h, l) = get(
        "/api/v1/namespaces/default/pods".into(),
        "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io",
    )
    .await;
    assert_eq!(header(&h, "content-type"), "application/json");
    assert_eq!(l["kind"], "PartialObjectMetadataList");
    assert_eq!(l["items"][0]["kind"], "PartialObjectMetadata");
    assert!(l["items"][0].get("spec").is_none());
    // Tables and partial metadata in YAML, as upstream's `AllowsMediaTypeTransform`
    // allows; a watch of them is a 406 (YAML has no stream serializer).
    for (accept, kind) in [
        ("application/yaml;as=Table;v=v1;g=meta.k8s.io", "Table"),
        (
            "application/yaml;as=PartialObjectMetadataList;v=v1beta1;g=meta.k8s.io",
            "PartialObjectMetadataList",
        ),
    ] {
        let path = "/api/v1/namespaces/default/pods";
        let (code, h, body) = TestApiServer::raw(c, "GET", path, &[("Accept", accept)], vec![])
            .await
            .unwrap();
        assert_eq!(code, 200);
        assert_eq!(header(&h, "content-type"), "application/yaml");
        let v: Value = serde_yaml_ng::from_slice(&body).unwrap();
        assert_eq!(v["kind"], kind, "{v}");
        let watch = format!("{path}?watch=true&timeoutSeconds=1");
        let (code, _, _) = TestApiServer::raw(c, "GET", &watch, &[("Accept", accept)], vec![])
            .await
            .unwrap();
        assert_eq!(code, 406, "{accept}");
    }

    // Through kube-rs' metadata API.
    let meta = pods.get_metadata("p").await.unwrap();
    assert_eq!(meta.metadata.labels.unwrap()["a"], "b");
    let metas = pods.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(metas.items.len(), 1);
}

#[tokio::test]
async fn gzip_for_large_responses() {
    let srv = TestApiServer::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(srv.client.clone(), "default");
    let big = "x".repeat(100 * 1024);
    for i in 0..3 {
        let mut m = cm(&format!("big-{i}"));
        m.data = Some([("k".to_string(), big.clone())].into());
        cms.create(&Pp::default(), &m).await.unwrap();
    }
    // A client that does not decompress sees the gzip encoding.
    let mut cfg = srv.kube_config().await.unwrap();
    cfg.disable_compression = true;
    let raw = kube::Client::try_from(cfg).unwrap();
    let path = "/api/v1/namespaces/default/configmaps";
    let (code, h, body) =
        TestApiServer::raw(&raw, "GET", path, &[("Accept-Encoding", "gzip")], vec![])
            .await
            .unwrap();
    assert_eq!(code, 200);
    assert_eq!(header(&h, "content-encoding"), "gzip");
    let mut json = Vec::new();
    flate2::read::GzDecoder::new(&body[..])
        .read_to_end(&mut json)
        .unwrap();
    let list: Value = serde_json::from_slice(&json).unwrap();
    assert_eq!(list["items"].as_array().unwrap().len(), 3);
    assert!(body.len() < json.len() / 10);
    // Small responses and clients without gzip: plain.
    let (_, h, _) = TestApiServer::raw(
        &raw,
        "GET",
        "/api/v1/namespaces/default/configmaps/big-0",
        &[("Accept-Encoding", "gzip")],
        vec![],
    )
    .await
    .unwrap();
    assert_eq!(header(&h, "content-encoding"), "");
    let (_, h, body) = TestApiServer::raw(&raw, "GET", path, &[], vec![])
        .await
        .unwrap();
    assert_eq!(header(&h, "content-encoding"), "");
    assert!(serde_json::from_slice::<Value>(&body).is_ok());
    // The default kube-rs client (decompressing) reads it transparently.
    assert_eq!(
        cms.list(&ListParams::default()).await.unwrap().items.len(),
        3
    );
}

#[tokio::test]
async fn duplicate_fields_by_field_validation() {
    let srv = TestApiServer::start().await.unwrap();
    let c = &srv.client;
    let body = br#"{"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "d", "name": "d"}, "data": {"a": "1", "a": "2"}}"#
        .to_vec();
    let post_as = |content_type: &'static str, body: Vec<u8>, q: &'static str| async move {
        TestApiServer::raw(
            c,
            "POST",
            &format!("/api/v1/namespaces/default/configmaps{q}"),
            &[("Content-Type", content_type)],
            body,
        )
        .await
        .unwrap()
    };
    let post = |q: &'static str| post_as("application/json", body.clone(), q);
    let (code, _, b) = post("?fieldValidation=Strict").await;
    assert_eq!(code, 400);
    let s: Value = serde_json::from_slice(&b).unwrap();
    assert_eq!(
        s["message"],
        "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: \
         duplicate field \"metadata.name\", duplicate field \"data.a\""
    );
    let (code, h, _) = post("?fieldValidation=Warn&dryRun=All").await;
    assert_eq!(code, 201);
    let warnings: Vec<&str> = h
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert_eq!(
        warnings,
        [
            "299 - \"duplicate field \\\"metadata.name\\\"\"",
            "299 - \"duplicate field \\\"data.a\\\"\""
        ]
    );
    let (code, h, b) = post("?fieldValidation=Ignore").await;
    assert_eq!(code, 201);
    assert!(h.get("warning").is_none());
    let created: Value = serde_json::from_slice(&b).unwrap();
    assert_eq!(created["data"]["a"], "2");

    // The same checks for a YAML body.
    let yaml =
        b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: y\ndata:\n  a: '1'\n  a: '2'\n";
    let post_yaml = |q: &'static str| post_as("application/yaml", yaml.to_vec(), q);
    let (code, _, b) = post_yaml("?fieldValidation=Strict").await;
    assert_eq!(code, 400, "{}", String::from_utf8_lossy(&b));
    let s: Value = serde_json::from_slice(&b).unwrap();
    assert_eq!(
        s["message"],
        "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: \
         duplicate field \"data.a\""
    );
    let (code, h, _) = post_yaml("?fieldValidation=Warn&dryRun=All").await;
    assert_eq!(code, 201);
    assert_eq!(
        h.get("warning").unwrap(),
        "299 - \"duplicate field \\\"data.a\\\"\""
    );
    // A write refused after decoding still reports what Warn found, as upstream's
    // recorder does.
    let invalid = br#"{"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "Bad_Name"}, "bogus": 1}"#
        .to_vec();
    let (code, h, _) = post_as("application/json", invalid, "?fieldValidation=Warn").await;
    assert_eq!(code, 422);
    assert_eq!(
        h.get("warning").unwrap(),
        "299 - \"unknown field \\\"bogus\\\"\""
    );
}

/// Unknown and duplicate fields of a JSON body are reported in the body's order, as
/// upstream's decoder meets them, whatever order the names sort in.
#[tokio::test]
async fn strict_decoding_problems_in_the_bodys_order() {
    let srv = TestApiServer::start().await.unwrap();
    let body = br#"{"apiVersion": "v1", "kind": "ConfigMap", "zzz": 1,
        "metadata": {"name": "order", "name": "order"}, "data": {"b": "1", "a": "2", "b": "3"},
        "spec": {"containers": [{"x": 1}]}, "aaa": 2}"#;
    let c = &srv.client;
    let post = |q: &'static str| async move {
        TestApiServer::raw(
            c,
            "POST",
            &format!("/api/v1/namespaces/default/configmaps{q}"),
            &[("Content-Type", "application/json")],
            body.to_vec(),
        )
        .await
    };
    let problems = [
        r#"unknown field \"zzz\""#,
        r#"duplicate field \"metadata.name\""#,
        r#"duplicate field \"data.b\""#,
        r#"unknown field \"spec\""#,
        r#"unknown field \"aaa\""#,
    ];
    let (code, _, b) = post("?fieldValidation=Strict").await.unwrap();
    assert_eq!(code, 400);
    let status: Value = serde_json::from_slice(&b).unwrap();
    assert_eq!(
        status["message"],
        format!(
            "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: {}",
            problems.join(", ").replace("\\\"", "\"")
        )
    );
    let (code, h, _) = post("?fieldValidation=Warn&dryRun=All").await.unwrap();
    assert_eq!(code, 201);
    let warnings: Vec<String> = h
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect();
    let expected: Vec<String> = problems.iter().map(|p| format!("299 - \"{p}\"")).collect();
    assert_eq!(warnings, expected);
}

#[tokio::test]
async fn gone_for_old_watches_and_expired_continue_tokens() {
    let mut srv = TestApiServer::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(srv.client.clone(), "default");
    let first = cms.create(&Pp::default(), &cm("a")).await.unwrap();
    let old_rv = first.metadata.resource_version.unwrap();
    for n in ["b", "c"] {
        cms.create(&Pp::default(), &cm(n)).await.unwrap();
    }
    // A page, then compaction past its revision: the continue token has expired.
    let page = cms.list(&ListParams::default().limit(1)).await.unwrap();
    let token = page.metadata.continue_.unwrap();
    cms.create(&Pp::default(), &cm("d")).await.unwrap();
    srv.compact_storage().await.unwrap();
    match cms
        .list(&ListParams::default().limit(1).continue_token(&token))
        .await
        .unwrap_err()
    {
        kube::Error::Api(s) => {
            assert_eq!((s.code, s.reason.as_str()), (410, "Expired"));
            assert!(
                s.message
                    .starts_with("The provided continue parameter is too old")
            );
        }
        e => panic!("{e:?}"),
    }
    // Tokens are unpadded URL-safe base64, as upstream's; one that is not a token is a
    // 400 with upstream's message.
    assert!(
        token
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
        "{token}"
    );
    match cms
        .list(&ListParams::default().limit(1).continue_token("e30"))
        .await
        .unwrap_err()
    {
        kube::Error::Api(s) => assert_eq!(
            (s.code, s.message.as_str()),
            (
                400,
                "invalid continue token: continue key is not valid: server does not recognize this encoded version "
            )
        ),
        e => panic!("{e:?}"),
    }

    // After a restart the watch cache starts at the current revision: a watch from
    // before it ends with an ERROR event carrying a 410 Status.
    srv.restart().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(srv.client.clone(), "default");
    let mut w = cms
        .watch(&WatchParams::default().timeout(5), &old_rv)
        .await
        .unwrap()
        .boxed();
    let ev = tokio::time::timeout(std::time::Duration::from_secs(10), w.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    match ev {
        WatchEvent::Error(e) => {
            assert_eq!((e.code, e.reason.as_str()), (410, "Expired"));
            assert!(
                e.message.contains("too old resource version"),
                "{}",
                e.message
            );
        }
        other => panic!("{other:?}"),
    }
    // The data survived the restart.
    assert_eq!(
        cms.list(&ListParams::default()).await.unwrap().items.len(),
        4
    );
}

#[tokio::test]
async fn bad_input_statuses() {
    let srv = TestApiServer::start().await.unwrap();
    let c = &srv.client;
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    cms.create(&Pp::default(), &cm("a")).await.unwrap();
    let req = |method: &'static str, path: &'static str, body: Value| async move {
        let (code, _, b) = TestApiServer::raw(
            c,
            method,
            path,
            &[("Content-Type", "application/json")],
            serde_json::to_vec(&body).unwrap(),
        )
        .await
        .unwrap();
        (
            code,
            serde_json::from_slice::<Value>(&b).unwrap_or(Value::Null),
        )
    };
    // Name in the body differs from the URL's: 400.
    let (code, s) = req(
        "PUT",
        "/api/v1/namespaces/default/configmaps/a",
        json!({"metadata": {"name": "b"}, "data": {}}),
    )
    .await;
    assert_eq!(code, 400);
    assert_eq!(
        s["message"],
        "the name of the object (b) does not match the name on the URL (a)"
    );
    // Namespace in the body differs from the URL's: 400.
    let (code, s) = req(
        "POST",
        "/api/v1/namespaces/default/configmaps",
        json!({"metadata": {"name": "n", "namespace": "other"}}),
    )
    .await;
    assert_eq!(code, 400);
    assert_eq!(
        s["message"],
        "the namespace of the provided object does not match the namespace sent on the request"
    );
    // Unknown resource 404; known resource, unsupported verb 405.
    let (code, s) = req("GET", "/api/v1/namespaces/default/widgets", Value::Null).await;
    assert_eq!((code, s["reason"].as_str()), (404, Some("NotFound")));
    let (code, s) = req("POST", "/api/v1/namespaces/default/configmaps/a", json!({})).await;
    assert_eq!(
        (code, s["reason"].as_str()),
        (405, Some("MethodNotAllowed"))
    );

    // Creating into a terminating namespace: 403 with upstream's message and cause.
    let nss: Api<Namespace> = Api::all(c.clone());
    nss.create(
        &Pp::default(),
        &serde_json::from_value(json!({"metadata": {"name": "doomed"}})).unwrap(),
    )
    .await
    .unwrap();
    nss.delete("doomed", &DeleteParams::default())
        .await
        .unwrap();
    let doomed: Api<ConfigMap> = Api::namespaced(c.clone(), "doomed");
    match doomed
        .create(&Pp::default(), &cm("late"))
        .await
        .unwrap_err()
    {
        kube::Error::Api(s) => {
            assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"));
            assert_eq!(
                s.message,
                "configmaps \"late\" is forbidden: unable to create new content in namespace doomed because it is being terminated"
            );
            let cause = &s.details.unwrap().causes[0];
            assert_eq!(
                (cause.reason.as_str(), cause.field.as_str()),
                ("NamespaceTerminating", "metadata.namespace")
            );
        }
        e => panic!("{e:?}"),
    }
    // A missing namespace: 404.
    let missing: Api<ConfigMap> = Api::namespaced(c.clone(), "missing");
    match missing.create(&Pp::default(), &cm("x")).await.unwrap_err() {
        kube::Error::Api(s) => assert_eq!(s.code, 404),
        e => panic!("{e:?}"),
    }
    // A subresource's body with a field of the wrong type: 400, not read as left out.
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    pods.create(
        &Pp::default(),
        &serde_json::from_value(json!({"metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}))
        .unwrap(),
    )
    .await
    .unwrap();
    let (code, _) = req(
        "POST",
        "/api/v1/namespaces/default/serviceaccounts",
        json!({"metadata": {"name": "sa"}}),
    )
    .await;
    assert_eq!(code, 201);
    for (path, body, kind) in [
        (
            "/api/v1/namespaces/default/pods/p/binding",
            json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"}, "target": 5}),
            "Binding",
        ),
        (
            "/api/v1/namespaces/default/pods/p/eviction",
            json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p"},
                "deleteOptions": {"gracePeriodSeconds": "x"}}),
            "Eviction",
        ),
        (
            "/api/v1/namespaces/default/serviceaccounts/sa/token",
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "spec": {"expirationSeconds": "x"}}),
            "TokenRequest",
        ),
        (
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                "spec": {"user": "u", "groups": "system:masters",
                    "resourceAttributes": {"verb": "get", "resource": "pods"}}}),
            "SubjectAccessReview",
        ),
    ] {
        let (code, s) = req("POST", path, body).await;
        assert_eq!(code, 400, "{path}: {s}");
        let message = s["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with(&format!(
                "{kind} in version \"v1\" cannot be handled as a {kind}"
            )),
            "{path}: {message}"
        );
    }
    // The message names the member that does not fit, as upstream's names the Go field.
    for (path, body, want) in [
        (
            "/api/v1/namespaces/default/pods",
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bad"},
                "spec": {"containers": [{"name": "c", "image": "busybox:1.36",
                    "ports": [{"containerPort": "80"}]}]}}),
            "Pod in version \"v1\" cannot be handled as a Pod: \
             spec.containers[0].ports[0].containerPort: invalid type: string \"80\", expected i32",
        ),
        (
            "/api/v1/namespaces/default/configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "bad", "labels": {"a": 1}}}),
            "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: \
             metadata.labels.a: invalid type: integer `1`, expected a string",
        ),
        (
            "/api/v1/namespaces/default/serviceaccounts/sa/token",
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "spec": {"expirationSeconds": "x"}}),
            "TokenRequest in version \"v1\" cannot be handled as a TokenRequest: \
             spec.expirationSeconds: invalid type: string \"x\", expected i64",
        ),
    ] {
        let (code, s) = req("POST", path, body).await;
        assert_eq!(code, 400, "{path}: {s}");
        assert_eq!(s["message"], want, "{path}");
    }
    assert!(
        pods.get("p")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_none()
    );
    // The check is of the fields: an Eviction of the older version is still taken.
    let (code, s) = req(
        "POST",
        "/api/v1/namespaces/default/pods/p/eviction",
        json!({"apiVersion": "policy/v1beta1", "kind": "Eviction", "metadata": {"name": "p"}}),
    )
    .await;
    assert_eq!(code, 201, "{s}");
}

/// Upstream's `ObjectMeta` maps and lists are `omitempty`: an empty one is neither
/// stored nor served, so `kubectl diff`'s patch (`"annotations": {}`) of an unchanged
/// object changes nothing.
#[tokio::test]
async fn empty_metadata_maps_and_lists_are_left_out() {
    use kube::api::{Patch, PatchParams};
    let srv = TestApiServer::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(srv.client.clone(), "default");
    let created = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "e", "annotations": {},
                "finalizers": [], "labels": {"a": "b"}}}))
            .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(created.metadata.annotations, None);
    assert_eq!(created.metadata.finalizers, None);
    let rv = created.metadata.resource_version.clone();

    let diff_patch = json!({"metadata": {"annotations": {}}});
    let dry = cms
        .patch(
            "e",
            &PatchParams::default().dry_run(),
            &Patch::Strategic(&diff_patch),
        )
        .await
        .unwrap();
    assert_eq!(dry.metadata.annotations, None);
    let patched = cms
        .patch("e", &PatchParams::default(), &Patch::Strategic(&diff_patch))
        .await
        .unwrap();
    assert_eq!(patched.metadata.annotations, None);
    assert_eq!(patched.metadata.resource_version, rv, "nothing changed");

    // Emptied by a patch: gone, not `{}`.
    let emptied = cms
        .patch(
            "e",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"a": null}}})),
        )
        .await
        .unwrap();
    assert_eq!(emptied.metadata.labels, None);
    let (_, _, body) = TestApiServer::raw(
        &srv.client,
        "GET",
        "/api/v1/namespaces/default/configmaps/e",
        &[],
        vec![],
    )
    .await
    .unwrap();
    let served: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(served["metadata"].get("labels"), None, "{served}");
}

/// A GET's `resourceVersion` as api-concepts has it: unset and `0` any recent object,
/// a reached revision the object, a revision the store has not reached a 504 after the
/// watch cache's wait (upstream's "Too large resource version"), garbage a 400.
#[tokio::test]
async fn get_with_a_resource_version() {
    let server = TestApiServer::start().await.unwrap();
    let c = &server.client;
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    let made = cms.create(&PostParams::default(), &cm("rv")).await.unwrap();
    let rv: u64 = made.metadata.resource_version.unwrap().parse().unwrap();
    let path = "/api/v1/namespaces/default/configmaps/rv";
    let get = |client: &kube::Client, query: String| {
        let client = client.clone();
        async move {
            TestApiServer::raw(&client, "GET", &format!("{path}{query}"), &[], vec![])
                .await
                .unwrap()
        }
    };
    for query in ["", "?resourceVersion=", "?resourceVersion=0"] {
        let (code, _, body) = get(c, query.to_string()).await;
        assert_eq!(code, 200, "{query}: {}", String::from_utf8_lossy(&body));
    }
    let (code, _, _) = get(c, format!("?resourceVersion={rv}")).await;
    assert_eq!(code, 200);
    let ahead = rv + 1000;
    // kube-rs would retry the 504.
    let once = server.client_without_retries().await.unwrap();
    let started = std::time::Instant::now();
    let (code, headers, body) = get(&once, format!("?resourceVersion={ahead}")).await;
    let status: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(code, 504, "{status}");
    assert_eq!(status["reason"], "Timeout");
    assert!(
        status["message"].as_str().unwrap().starts_with(&format!(
            "Timeout: Too large resource version: {ahead}, current: "
        )),
        "{status}"
    );
    assert_eq!(header(&headers, "retry-after"), "1");
    // It waited for the store first.
    assert!(started.elapsed() >= std::time::Duration::from_secs(2));
    let (code, _, _) = get(c, "?resourceVersion=abc".to_string()).await;
    assert_eq!(code, 400);
}

/// Query parameters decode as upstream's: a boolean is true unless `false` or `0` (the
/// Python client sends `watch=True`), and a malformed number is a 400 before any
/// watch starts.
#[tokio::test]
async fn query_parameters_decode_as_upstream() {
    let srv = TestApiServer::start().await.unwrap();
    let c = &srv.client;
    let get = |path: &'static str| async move {
        let (code, _, body) = TestApiServer::raw(c, "GET", path, &[], vec![])
            .await
            .unwrap();
        (code, String::from_utf8_lossy(&body).into_owned())
    };
    for watch in ["True", "yes", ""] {
        let path: &'static str = format!(
            "/api/v1/namespaces?watch={watch}&timeoutSeconds=1&fieldSelector=metadata.name%3Ddefault"
        )
        .leak();
        let (code, body) = get(path).await;
        assert_eq!(code, 200, "{path}: {body}");
        let event: Value = serde_json::from_str(body.lines().next().unwrap_or("")).unwrap();
        assert_eq!(event["type"], "ADDED", "watch={watch}: {body}");
    }
    for list in ["FALSE", "0"] {
        let path: &'static str = format!("/api/v1/namespaces?watch={list}").leak();
        let (code, body) = get(path).await;
        assert_eq!(code, 200);
        assert_eq!(
            serde_json::from_str::<Value>(&body).unwrap()["kind"],
            "NamespaceList",
            "watch={list}"
        );
    }
    for bad in [
        "/api/v1/namespaces?timeoutSeconds=abc",
        "/api/v1/namespaces?watch=true&timeoutSeconds=abc",
        "/api/v1/namespaces?watch=true&limit=x",
    ] {
        let (code, body) = tokio::time::timeout(std::time::Duration::from_secs(10), get(bad))
            .await
            .unwrap_or_else(|_| panic!("{bad}: no answer"));
        assert_eq!(code, 400, "{bad}: {body}");
    }
}

/// A watch is answered in its stream serializer's media type, as upstream's
/// `serveWatchHandler` sets it: plain JSON for a watch of Tables; YAML has no stream
/// serializer, so a watch asking for it first is a 406, not a JSON stream.
#[tokio::test]
async fn watch_media_types_are_the_stream_serializers() {
    let srv = TestApiServer::start().await.unwrap();
    let path =
        "/api/v1/namespaces?watch=true&timeoutSeconds=1&fieldSelector=metadata.name%3Ddefault";
    let (code, headers, body) =
        TestApiServer::raw(&srv.client, "GET", path, &[("Accept", TABLE)], vec![])
            .await
            .unwrap();
    assert_eq!(code, 200);
    assert_eq!(header(&headers, "content-type"), "application/json");
    let body = String::from_utf8_lossy(&body);
    let event: Value = serde_json::from_str(body.lines().next().unwrap_or("")).unwrap();
    assert_eq!(
        (&event["type"], &event["object"]["kind"]),
        (&json!("ADDED"), &json!("Table")),
        "{body}"
    );
    for accept in ["application/yaml", "application/yaml, application/json"] {
        let (code, _, body) =
            TestApiServer::raw(&srv.client, "GET", path, &[("Accept", accept)], vec![])
                .await
                .unwrap();
        assert_eq!(code, 406, "{accept}: {}", String::from_utf8_lossy(&body));
    }
}
