//! `--runtime-config`: a disabled group-version or resource is answered 404 and left
//! out of discovery (legacy and aggregated), of the local APIServices and of OpenAPI,
//! while the rest is served as before.

use ferrokube_apiserver::ApiEnablement;
use ferrokube_testing::{TestApiServer, eventually};
use serde_json::{Value, json};

fn batch_and_daemonsets_off(opts: &mut ferrokube_apiserver::Options) {
    opts.api_enablement = ApiEnablement::parse("batch/v1=false,apps/v1/daemonsets=false")
        .expect("valid --runtime-config")
        .0;
}

async fn get(srv: &TestApiServer, path: &str, accept: &str) -> (u16, Value) {
    let (code, _, body) =
        TestApiServer::raw(&srv.client, "GET", path, &[("accept", accept)], vec![])
            .await
            .unwrap();
    (code, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

fn names(list: &Value, field: &str, key: &str) -> Vec<String> {
    list[field]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|item| item[key].as_str().map(str::to_string))
        .collect()
}

#[tokio::test]
async fn disabled_apis_are_neither_served_nor_discovered() {
    let srv = TestApiServer::start_with(batch_and_daemonsets_off)
        .await
        .unwrap();
    let json_accept = "application/json";

    // Requests for what is off find nothing; the rest of its group is served.
    let (code, status) = get(&srv, "/apis/batch/v1/namespaces/default/jobs", json_accept).await;
    assert_eq!(code, 404, "{status}");
    assert_eq!(status["kind"], "Status");
    let (code, _) = get(
        &srv,
        "/apis/apps/v1/namespaces/default/daemonsets",
        json_accept,
    )
    .await;
    assert_eq!(code, 404);
    let (code, _) = get(
        &srv,
        "/apis/apps/v1/namespaces/default/deployments",
        json_accept,
    )
    .await;
    assert_eq!(code, 200);
    let (code, _, created) = TestApiServer::send_json(
        &srv.client,
        "POST",
        "/apis/batch/v1/namespaces/default/cronjobs",
        &json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c"}}),
    )
    .await
    .unwrap();
    assert_eq!(code, 404, "{created}");

    // Legacy discovery.
    let (_, groups) = get(&srv, "/apis", json_accept).await;
    let listed = names(&groups, "groups", "name");
    assert!(!listed.contains(&"batch".to_string()), "{listed:?}");
    assert!(listed.contains(&"apps".to_string()), "{listed:?}");
    assert_eq!(get(&srv, "/apis/batch", json_accept).await.0, 404);
    assert_eq!(get(&srv, "/apis/batch/v1", json_accept).await.0, 404);
    let (_, apps) = get(&srv, "/apis/apps/v1", json_accept).await;
    let resources = names(&apps, "resources", "name");
    assert!(
        resources.contains(&"deployments".to_string()),
        "{resources:?}"
    );
    assert!(
        !resources.contains(&"daemonsets".to_string()),
        "{resources:?}"
    );
    assert!(
        !resources.contains(&"daemonsets/status".to_string()),
        "{resources:?}"
    );

    // Aggregated discovery (what kubectl asks for).
    let (_, aggregated) = get(
        &srv,
        "/apis",
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
    )
    .await;
    let items = aggregated["items"].as_array().expect("items");
    assert!(items.iter().all(|g| g["metadata"]["name"] != "batch"));
    let apps = items
        .iter()
        .find(|g| g["metadata"]["name"] == "apps")
        .expect("apps is served");
    let apps_resources = names(&apps["versions"][0], "resources", "resource");
    assert!(apps_resources.contains(&"statefulsets".to_string()));
    assert!(!apps_resources.contains(&"daemonsets".to_string()));

    // OpenAPI (kubectl explain, apply): no document and no paths for batch/v1.
    let (_, index) = get(&srv, "/openapi/v3", json_accept).await;
    assert!(index["paths"].get("apis/batch/v1").is_none(), "{index}");
    assert!(index["paths"].get("apis/apps/v1").is_some(), "{index}");
    assert_eq!(
        get(&srv, "/openapi/v3/apis/batch/v1", json_accept).await.0,
        404
    );
    let (_, v2) = get(&srv, "/openapi/v2", json_accept).await;
    let paths = v2["paths"].as_object().expect("v2 paths");
    assert!(paths.keys().all(|p| !p.starts_with("/apis/batch/v1/")));
    assert!(paths.keys().any(|p| p.starts_with("/apis/apps/v1/")));
    assert!(paths.keys().all(|p| !p.contains("/daemonsets")));

    // The aggregator keeps local APIServices for what is served only.
    let apiservices = "/apis/apiregistration.k8s.io/v1/apiservices";
    let listed = eventually(|| async {
        let (_, list) = get(&srv, apiservices, json_accept).await;
        let names: Vec<String> = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["metadata"]["name"].as_str().map(str::to_string))
            .collect();
        names.contains(&"v1.apps".to_string())
    })
    .await;
    assert!(listed, "no local APIService v1.apps");
    let (_, list) = get(&srv, apiservices, json_accept).await;
    let services: Vec<&str> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["metadata"]["name"].as_str())
        .collect();
    assert!(!services.contains(&"v1.batch"), "{services:?}");
    srv.stop().await;
}

#[tokio::test]
async fn core_turned_off_leaves_nothing_at_api() {
    let srv = TestApiServer::start_with(|opts| {
        opts.api_enablement = ApiEnablement::parse("v1=false").expect("valid").0;
    })
    .await
    .unwrap();
    let json_accept = "application/json";
    let aggregated = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
    for accept in [json_accept, aggregated] {
        let (code, status) = get(&srv, "/api", accept).await;
        assert_eq!(code, 404, "{accept}: {status}");
        assert_eq!(status["kind"], "Status", "{accept}");
    }
    assert_eq!(get(&srv, "/api/v1", json_accept).await.0, 404);
    assert_eq!(get(&srv, "/api/v1/namespaces", json_accept).await.0, 404);
    // The groups are still there.
    let (code, groups) = get(&srv, "/apis", json_accept).await;
    assert_eq!(code, 200);
    assert!(names(&groups, "groups", "name").contains(&"apps".to_string()));
    srv.stop().await;
}
