//! The OpenAPI documents follow the served custom resources: a definition's versions
//! appear in `/openapi/v2` and `/openapi/v3` (index and group-version document) once
//! it is established, with upstream's names, schema and paths, and go when it does.

use std::io::Read;

use ferrokube_testing::{TestApiServer, crd_established, eventually};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};

const CRD_NAME: &str = "crontabs.stable.example.com";
const GV: &str = "apis/stable.example.com/v1";
const KIND: &str = "com.example.stable.v1.CronTab";

fn crontab_definition() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME},
        "spec": {
            "group": "stable.example.com",
            "scope": "Namespaced",
            "names": {"plural": "crontabs", "singular": "crontab", "kind": "CronTab"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {
                            "type": "object",
                            "description": "The schedule.",
                            "properties": {
                                "cronSpec": {"type": "string", "description": "When to run."},
                                "replicas": {"type": "integer"},
                            },
                        },
                        "status": {
                            "type": "object",
                            "properties": {"replicas": {"type": "integer"}},
                        },
                    },
                }},
                "subresources": {"status": {}, "scale": {
                    "specReplicasPath": ".spec.replicas",
                    "statusReplicasPath": ".status.replicas"}},
            }],
        },
    }))
    .unwrap()
}

/// GETs an OpenAPI document as JSON, with its `ETag`.
async fn get(client: &kube::Client, path: &str) -> (Value, String) {
    let (code, headers, body) = TestApiServer::raw(
        client,
        "GET",
        path,
        &[("accept", "application/json")],
        Vec::new(),
    )
    .await
    .unwrap();
    assert_eq!(code, 200, "{path}: {}", String::from_utf8_lossy(&body));
    let gzipped = headers.get("content-encoding").is_some_and(|v| v == "gzip")
        && body.starts_with(&[0x1f, 0x8b]);
    let body = if gzipped {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&body[..])
            .read_to_end(&mut out)
            .unwrap();
        out
    } else {
        body
    };
    let etag = headers
        .get("etag")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    (serde_json::from_slice(&body).unwrap(), etag)
}

fn parameter_names(op: &Value) -> Vec<&str> {
    op["parameters"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["name"].as_str())
        .collect()
}

#[tokio::test]
async fn custom_resources_are_in_the_openapi_documents() {
    let server = TestApiServer::start().await.unwrap();
    let client = server.client.clone();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());

    let (index, index_etag) = get(&client, "/openapi/v3").await;
    assert!(index["paths"].get(GV).is_none());
    assert!(index["paths"].get("apis/apps/v1").is_some());

    crds.create(&PostParams::default(), &crontab_definition())
        .await
        .unwrap();
    assert!(
        eventually(|| crd_established(&client, CRD_NAME)).await,
        "never established"
    );

    // The index lists the custom group-version (the served set changed when the
    // definition was established, so the next request sees it).
    let (index, etag) = get(&client, "/openapi/v3").await;
    assert_ne!(etag, index_etag);
    let url = index["paths"][GV]["serverRelativeURL"]
        .as_str()
        .unwrap_or_else(|| panic!("no {GV} in {index}"))
        .to_string();
    assert!(url.starts_with(&format!("/openapi/v3/{GV}?hash=")), "{url}");

    let (doc, _) = get(&client, &url).await;
    assert_eq!(doc["openapi"], "3.0.0");
    let schemas = &doc["components"]["schemas"];
    let kind = &schemas[KIND];
    assert_eq!(
        kind["x-kubernetes-group-version-kind"],
        json!([{"group": "stable.example.com", "kind": "CronTab", "version": "v1"}])
    );
    assert_eq!(kind["properties"]["apiVersion"]["type"], "string");
    assert_eq!(kind["properties"]["kind"]["type"], "string");
    assert_eq!(
        kind["properties"]["metadata"]["$ref"],
        "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    );
    assert_eq!(
        kind["properties"]["spec"]["properties"]["cronSpec"],
        json!({"type": "string", "description": "When to run."})
    );
    assert_eq!(
        schemas[format!("{KIND}List")]["properties"]["items"]["items"]["$ref"],
        format!("#/components/schemas/{KIND}")
    );
    assert!(
        schemas
            .get("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")
            .is_some()
    );

    let paths = &doc["paths"];
    let collection = &paths["/apis/stable.example.com/v1/namespaces/{namespace}/crontabs"];
    for method in ["get", "post", "delete"] {
        assert!(collection.get(method).is_some(), "collection {method}");
    }
    let post = parameter_names(&collection["post"]);
    assert!(post.contains(&"fieldValidation"), "{post:?}");
    assert!(post.contains(&"dryRun"), "{post:?}");
    let item = &paths["/apis/stable.example.com/v1/namespaces/{namespace}/crontabs/{name}"];
    for method in ["get", "put", "patch", "delete"] {
        assert!(item.get(method).is_some(), "item {method}");
    }
    let patch_types: Vec<&String> = item["patch"]["requestBody"]["content"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(
        patch_types,
        [
            "application/apply-patch+yaml",
            "application/json-patch+json",
            "application/merge-patch+json"
        ]
    );
    assert!(parameter_names(&item["patch"]).contains(&"fieldValidation"));
    assert_eq!(
        item["get"]["x-kubernetes-group-version-kind"],
        json!({"group": "stable.example.com", "kind": "CronTab", "version": "v1"})
    );
    let status =
        &paths["/apis/stable.example.com/v1/namespaces/{namespace}/crontabs/{name}/status"];
    assert!(status.get("patch").is_some());
    let scale = &paths["/apis/stable.example.com/v1/namespaces/{namespace}/crontabs/{name}/scale"];
    assert_eq!(
        scale["get"]["x-kubernetes-group-version-kind"]["kind"],
        "Scale"
    );

    // v2 carries the definitions and paths next to the built-in ones.
    let (v2, _) = get(&client, "/openapi/v2").await;
    let def = &v2["definitions"][KIND];
    assert_eq!(
        def["properties"]["metadata"]["$ref"],
        "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    );
    assert_eq!(
        def["properties"]["spec"]["properties"]["cronSpec"]["type"],
        "string"
    );
    assert!(v2["definitions"].get(format!("{KIND}List")).is_some());
    assert!(v2["definitions"].get("io.k8s.api.core.v1.Pod").is_some());
    assert!(
        v2["paths"]
            .get("/apis/stable.example.com/v1/namespaces/{namespace}/crontabs")
            .is_some()
    );

    // Deleted, the group-version leaves the index.
    crds.delete(CRD_NAME, &DeleteParams::default())
        .await
        .unwrap();
    let gone = eventually(|| async {
        let (index, _) = get(&client, "/openapi/v3").await;
        index["paths"].get(GV).is_none()
    })
    .await;
    assert!(gone, "{GV} still in the v3 index");
    let (code, _, _) = TestApiServer::raw(&client, "GET", &url, &[], Vec::new())
        .await
        .unwrap();
    assert_eq!(code, 404);
    let (v2, _) = get(&client, "/openapi/v2").await;
    assert!(v2["definitions"].get(KIND).is_none());

    server.stop().await;
}
