//! `apiregistration.k8s.io/v1` APIServices as a built-in resource, through kube-rs and
//! raw requests: create/get/list/update/patch/delete, upstream's defaulting and
//! validation messages, the status subresource (the main resource keeps the status,
//! `/status` keeps the spec), local APIServices Available on create, the Table
//! columns, discovery and the OpenAPI v3 document `kubectl explain` reads.
//!
//! The aggregator creates its own local APIServices (`v1.apps`, ...) at start, so the
//! objects here have names of their own and no list is counted whole.

use ferrokube_testing::TestApiServer;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const REMOTE: &str = "v1alpha1.widgets.example.com";
const LOCAL: &str = "v1beta1.gadgets.example.com";
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";
const COLLECTION: &str = "/apis/apiregistration.k8s.io/v1/apiservices";

fn api_service(v: Value) -> APIService {
    serde_json::from_value(v).expect("an APIService")
}

fn remote() -> Value {
    json!({
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": REMOTE, "labels": {"app": "widgets"}},
        "spec": {"group": "widgets.example.com", "version": "v1alpha1",
            "groupPriorityMinimum": 1000, "versionPriority": 15,
            "service": {"namespace": "widgets", "name": "api"}},
    })
}

fn local() -> Value {
    json!({
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": LOCAL},
        "spec": {"group": "gadgets.example.com", "version": "v1beta1",
            "groupPriorityMinimum": 2000, "versionPriority": 10},
    })
}

/// The JSON of a typed object, for comparisons by path.
fn value(svc: &APIService) -> Value {
    serde_json::to_value(svc).unwrap()
}

/// The code and message of a refused request.
fn refusal<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> (u16, String) {
    match r {
        Err(kube::Error::Api(s)) => (s.code, s.message),
        other => panic!("expected an API error, got {other:?}"),
    }
}

async fn get_json(client: &kube::Client, path: &str) -> Value {
    let req = http::Request::get(path).body(Vec::new()).unwrap();
    client.request::<Value>(req).await.unwrap()
}

#[tokio::test]
async fn api_services_are_served_with_upstreams_semantics() {
    let server = TestApiServer::start().await.unwrap();
    let client = server.client.clone();
    let api: Api<APIService> = Api::all(client.clone());
    let pp = PostParams::default();

    // Create: the service port defaulted, a remote one's status empty, a local one
    // Available at once; a status sent on create is dropped.
    let mut with_status = remote();
    with_status["status"] = json!({"conditions": [{"type": "Available", "status": "True"}]});
    let created = value(&api.create(&pp, &api_service(with_status)).await.unwrap());
    assert_eq!(created["spec"]["service"]["port"], 443);
    assert_eq!(created["status"], json!({}));
    assert!(created["metadata"].get("generation").is_none());
    let created_local = value(&api.create(&pp, &api_service(local())).await.unwrap());
    let conditions = &created_local["status"]["conditions"];
    assert_eq!(conditions.as_array().map(Vec::len), Some(1), "{conditions}");
    assert_eq!(conditions[0]["type"], "Available");
    assert_eq!(conditions[0]["status"], "True");
    assert_eq!(conditions[0]["reason"], "Local");
    assert_eq!(
        conditions[0]["message"],
        "Local APIServices are always available"
    );
    assert!(conditions[0]["lastTransitionTime"].is_string());
    let (code, _) = refusal(api.create(&pp, &api_service(local())).await);
    assert_eq!(code, 409);

    // Get and list (the aggregator's own APIServices may be listed too).
    let got = value(&api.get(REMOTE).await.unwrap());
    assert_eq!(got["spec"], created["spec"]);
    let names: Vec<String> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|s| s.metadata.name)
        .collect();
    assert!(names.iter().any(|n| n == REMOTE) && names.iter().any(|n| n == LOCAL));
    let selected = api
        .list(&ListParams::default().labels("app=widgets"))
        .await
        .unwrap();
    assert_eq!(selected.items.len(), 1);
    let by_name = api
        .list(&ListParams::default().fields(&format!("metadata.name={LOCAL}")))
        .await
        .unwrap();
    assert_eq!(by_name.items.len(), 1);

    // The apiserver's availability check writes its verdict on the remote APIService
    // (its Service does not exist); the test's own status writes below say the same,
    // so the check leaves them alone.
    let verdict = "service/api in \"widgets\" is not present";
    let mut checked = Value::Null;
    for _ in 0..100 {
        checked = value(&api.get(REMOTE).await.unwrap());
        if checked["status"]["conditions"][0]["message"] == verdict {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let got = checked;

    // A main-resource update changes the spec and keeps the status.
    let mut update = got.clone();
    update["spec"]["versionPriority"] = json!(20);
    update["status"] = json!({"conditions": [{"type": "Available", "status": "True"}]});
    let updated = value(
        &api.replace(REMOTE, &pp, &api_service(update))
            .await
            .unwrap(),
    );
    assert_eq!(updated["spec"]["versionPriority"], 20);
    assert_eq!(updated["status"], got["status"]);

    // A status update changes the status and keeps the spec and labels.
    let mut status_update = updated.clone();
    status_update["spec"]["versionPriority"] = json!(99);
    status_update["metadata"]["labels"] = json!({"app": "other"});
    status_update["status"] = json!({"conditions": [{"type": "Available", "status": "False",
        "lastTransitionTime": "2025-01-01T00:00:00Z", "reason": "ServiceNotFound",
        "message": verdict}]});
    let after = value(
        &api.replace_status(REMOTE, &pp, &api_service(status_update))
            .await
            .unwrap(),
    );
    assert_eq!(after["spec"]["versionPriority"], 20);
    assert_eq!(after["metadata"]["labels"], json!({"app": "widgets"}));
    assert_eq!(
        after["status"]["conditions"][0]["lastTransitionTime"],
        "2025-01-01T00:00:00Z"
    );
    // ... and a merge patch of /status too.
    let patched = value(
        &api.patch_status(
            LOCAL,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"versionPriority": 1},
                "status": {"conditions": [{"type": "Available", "status": "True",
                    "lastTransitionTime": "2025-01-01T00:00:00Z", "reason": "Local"}]}})),
        )
        .await
        .unwrap(),
    );
    assert_eq!(patched["spec"]["versionPriority"], 10);
    assert_eq!(patched["status"]["conditions"][0]["reason"], "Local");
    // A condition status that is not True/False/Unknown.
    let (code, message) = refusal(
        api.patch_status(
            LOCAL,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [
                {"type": "Available", "status": "Maybe"}]}})),
        )
        .await,
    );
    assert_eq!(code, 422);
    assert_eq!(
        message,
        format!(
            "APIService.apiregistration.k8s.io \"{LOCAL}\" is invalid: status.conditions[0].status: \
             Unsupported value: \"Maybe\": supported values: \"True\", \"False\", \"Unknown\""
        )
    );

    // Patches of the main resource: merge patch and server-side apply.
    let merged = value(
        &api.patch(
            REMOTE,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"insecureSkipTLSVerify": true}})),
        )
        .await
        .unwrap(),
    );
    assert_eq!(merged["spec"]["insecureSkipTLSVerify"], true);
    assert_eq!(
        merged["status"]["conditions"][0]["lastTransitionTime"],
        "2025-01-01T00:00:00Z"
    );
    let applied = value(
        &api.patch(
            LOCAL,
            &PatchParams::apply("apiservices-test").force(),
            &Patch::Apply(json!({
                "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                "metadata": {"name": LOCAL},
                "spec": {"group": "gadgets.example.com", "version": "v1beta1",
                    "groupPriorityMinimum": 2500, "versionPriority": 10}})),
        )
        .await
        .unwrap(),
    );
    assert_eq!(applied["spec"]["groupPriorityMinimum"], 2500);

    // Table: upstream's columns and cells.
    let (code, _, body) =
        TestApiServer::raw(&client, "GET", COLLECTION, &[("accept", TABLE)], Vec::new())
            .await
            .unwrap();
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    let table: Value = serde_json::from_slice(&body).unwrap();
    let columns: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(columns, ["Name", "Service", "Available", "Age"]);
    let row = |name: &str| {
        table["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["cells"][0] == name)
            .unwrap_or_else(|| panic!("no row for {name}"))["cells"]
            .clone()
    };
    let remote_row = row(REMOTE);
    assert_eq!(remote_row[1], "widgets/api");
    assert_eq!(remote_row[2], "False (ServiceNotFound)");
    assert!(remote_row[3].is_string());
    let local_row = row(LOCAL);
    assert_eq!(local_row[1], "Local");
    assert_eq!(local_row[2], "True");

    // Delete.
    api.delete(REMOTE, &DeleteParams::default()).await.unwrap();
    let (code, _) = refusal(api.get(REMOTE).await);
    assert_eq!(code, 404);
    api.delete(LOCAL, &DeleteParams::default()).await.unwrap();
    let (code, _) = refusal(api.get(LOCAL).await);
    assert_eq!(code, 404);
}

#[tokio::test]
async fn invalid_api_services_are_refused_with_upstreams_messages() {
    let server = TestApiServer::start().await.unwrap();
    let api: Api<APIService> = Api::all(server.client.clone());
    let pp = PostParams::default();
    let refused = |name: &str, field_errors: &str| {
        format!("APIService.apiregistration.k8s.io \"{name}\" is invalid: {field_errors}")
    };

    let mut bad_name = remote();
    bad_name["metadata"]["name"] = json!("widgets");
    let (code, message) = refusal(api.create(&pp, &api_service(bad_name)).await);
    assert_eq!(code, 422);
    assert_eq!(
        message,
        refused(
            "widgets",
            "metadata.name: Invalid value: \"widgets\": must be `spec.version+\".\"+spec.group`: \
             \"v1alpha1.widgets.example.com\""
        )
    );

    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "priorities",
            json!({"groupPriorityMinimum": 20001, "versionPriority": 0}),
            "[spec.groupPriorityMinimum: Invalid value: 20001: must be positive and less than 20000, \
             spec.versionPriority: Invalid value: 0: must be positive and less than 1000]",
        ),
        (
            "service reference",
            json!({"service": {"port": 70000}}),
            "[spec.service.namespace: Required value, spec.service.name: Required value, \
             spec.service.port: Invalid value: 70000: port is not valid: must be between 1 and 65535, inclusive]",
        ),
        (
            "insecure with a CA bundle",
            json!({"insecureSkipTLSVerify": true, "caBundle": "Y2E="}),
            "spec.insecureSkipTLSVerify: Invalid value: true: may not be true if caBundle is present",
        ),
        (
            "local with TLS settings",
            json!({"service": null, "insecureSkipTLSVerify": true, "caBundle": "Y2E="}),
            "[spec.caBundle: Invalid value: \"2 bytes\": local APIServices may not have a caBundle, \
             spec.insecureSkipTLSVerify: Invalid value: true: local APIServices may not have insecureSkipTLSVerify]",
        ),
        (
            "version",
            json!({"version": "V1"}),
            "[metadata.name: Invalid value: \"v1alpha1.widgets.example.com\": must be \
             `spec.version+\".\"+spec.group`: \"V1.widgets.example.com\", spec.version: Invalid value: \
             \"V1\": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start \
             with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or \
             'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')]",
        ),
    ];
    for (case, spec_changes, field_errors) in cases {
        let mut svc = remote();
        for (k, v) in spec_changes.as_object().unwrap() {
            if v.is_null() {
                svc["spec"].as_object_mut().unwrap().remove(k);
            } else {
                svc["spec"][k] = v.clone();
            }
        }
        let (code, message) = refusal(api.create(&pp, &api_service(svc)).await);
        assert_eq!(code, 422, "{case}");
        assert_eq!(message, refused(REMOTE, field_errors), "{case}");
    }

    // Updates are validated too.
    api.create(&pp, &api_service(remote())).await.unwrap();
    // The availability check writes the new APIService's status meanwhile; an update
    // that loses that race is a 409 before it is validated, so it reads and tries again.
    let mut attempts = 0;
    let (code, message) = loop {
        let mut update = value(&api.get(REMOTE).await.unwrap());
        update["spec"]["groupPriorityMinimum"] = json!(0);
        let answer = refusal(api.replace(REMOTE, &pp, &api_service(update)).await);
        attempts += 1;
        if answer.0 != 409 || attempts == 10 {
            break answer;
        }
    };
    assert_eq!(code, 422, "{message}");
    assert_eq!(
        message,
        refused(
            REMOTE,
            "spec.groupPriorityMinimum: Invalid value: 0: must be positive and less than 20000"
        )
    );
    // The object is cluster-scoped: no namespaced path serves it.
    let (code, _, _) = TestApiServer::send_json(
        &server.client,
        "POST",
        "/apis/apiregistration.k8s.io/v1/namespaces/default/apiservices",
        &local(),
    )
    .await
    .unwrap();
    assert_eq!(code, 404);
}

#[tokio::test]
async fn api_services_are_discovered_and_documented() {
    let server = TestApiServer::start().await.unwrap();
    let client = server.client.clone();

    let list = get_json(&client, "/apis/apiregistration.k8s.io/v1").await;
    let resources = list["resources"].as_array().unwrap();
    let main = resources
        .iter()
        .find(|r| r["name"] == "apiservices")
        .unwrap();
    assert_eq!(main["kind"], "APIService");
    assert_eq!(main["singularName"], "apiservice");
    assert_eq!(main["namespaced"], false);
    assert_eq!(main["categories"], json!(["api-extensions"]));
    assert!(main.get("shortNames").is_none());
    let status = resources
        .iter()
        .find(|r| r["name"] == "apiservices/status")
        .unwrap();
    assert_eq!(status["verbs"], json!(["get", "patch", "update"]));
    let groups = get_json(&client, "/apis").await;
    assert!(
        groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "apiregistration.k8s.io"
                && g["preferredVersion"]["version"] == "v1")
    );

    // `kubectl explain apiservice.spec` reads the group-version's OpenAPI v3 document.
    let index = get_json(&client, "/openapi/v3").await;
    let url = index["paths"]["apis/apiregistration.k8s.io/v1"]["serverRelativeURL"]
        .as_str()
        .expect("the group-version is in the OpenAPI v3 index")
        .to_string();
    let doc = get_json(&client, &url).await;
    let schemas = &doc["components"]["schemas"];
    let kind = &schemas["io.k8s.kube-aggregator.pkg.apis.apiregistration.v1.APIService"];
    assert_eq!(
        kind["x-kubernetes-group-version-kind"],
        json!([{"group": "apiregistration.k8s.io", "kind": "APIService", "version": "v1"}])
    );
    let spec = &schemas["io.k8s.kube-aggregator.pkg.apis.apiregistration.v1.APIServiceSpec"];
    for field in [
        "group",
        "version",
        "groupPriorityMinimum",
        "versionPriority",
        "service",
    ] {
        assert!(spec["properties"].get(field).is_some(), "spec.{field}");
    }
    assert!(doc["paths"].get(COLLECTION).is_some());
    assert!(
        doc["paths"]
            .get(format!("{COLLECTION}/{{name}}/status"))
            .is_some()
    );
}
