//! Access and rules reviews, SelfSubjectReview, TokenReview and impersonation.

use ferrokube_testing::TestApiServer;
use serde_json::{Value, json};

async fn post(client: &kube::Client, path: &str, body: Value) -> (u16, Value) {
    let (code, _, bytes) = TestApiServer::raw(
        client,
        "POST",
        path,
        &[("content-type", "application/json")],
        serde_json::to_vec(&body).unwrap(),
    )
    .await
    .unwrap();
    (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

#[tokio::test]
async fn reviews_answer_from_the_authorizers() {
    let server = TestApiServer::start().await.unwrap();
    let admin = server.client.clone();
    let alice = server.client_as("alice", &["devs"]).await.unwrap();

    // SelfSubjectAccessReview: basic-user lets anyone ask; alice may not list secrets.
    let ssar = |verb: &str, resource: &str| {
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"namespace": "default", "verb": verb, "resource": resource}}})
    };
    let (code, v) = post(
        &alice,
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        ssar("list", "secrets"),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    assert_eq!(v["status"]["allowed"], false);
    assert_eq!(v["kind"], "SelfSubjectAccessReview");
    let (_, v) = post(
        &admin,
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        ssar("list", "secrets"),
    )
    .await;
    assert_eq!(v["status"]["allowed"], true);

    // SubjectAccessReview for someone else: admin may ask, alice may not.
    let sar = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": "system:kube-scheduler", "groups": ["system:authenticated"],
                 "resourceAttributes": {"verb": "create", "resource": "pods", "subresource": "binding", "namespace": "x"}}});
    let (code, v) = post(
        &admin,
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        sar.clone(),
    )
    .await;
    assert_eq!(code, 201);
    assert_eq!(v["status"]["allowed"], true);
    let (code, _) = post(
        &alice,
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        sar,
    )
    .await;
    assert_eq!(code, 403);
    let (code, v) = post(
        &admin,
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        json!({"spec": {"resourceAttributes": {"verb": "get", "resource": "pods"}}}),
    )
    .await;
    assert_eq!(code, 422, "{v}");

    // LocalSubjectAccessReview: the namespace must match the URL's.
    let lsar = |ns: &str| json!({"spec": {"user": "alice", "resourceAttributes": {"namespace": ns, "verb": "get", "resource": "pods"}}});
    let local = "/apis/authorization.k8s.io/v1/namespaces/default/localsubjectaccessreviews";
    let (code, v) = post(&admin, local, lsar("default")).await;
    assert_eq!((code, v["status"]["allowed"].clone()), (201, json!(false)));
    let (code, v) = post(&admin, local, lsar("other")).await;
    assert_eq!(code, 422);
    assert_eq!(
        v["message"],
        "LocalSubjectAccessReview.authorization.k8s.io \"\" is invalid: \
         spec.resourceAttributes.namespace: Invalid value: \"other\": must match metadata.namespace"
    );
    let mut elsewhere = lsar("default");
    elsewhere["metadata"] = json!({"namespace": "other"});
    let (code, v) = post(&admin, local, elsewhere).await;
    assert_eq!(code, 400, "{v}");
    let (code, v) = post(
        &admin,
        local,
        json!({"spec": {"user": "alice", "nonResourceAttributes": {"path": "/x", "verb": "get"}}}),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        v["message"],
        "LocalSubjectAccessReview.authorization.k8s.io \"\" is invalid: \
         spec.nonResourceAttributes: Invalid value: \
         authorization.NonResourceAttributes{Path:\"/x\", Verb:\"get\"}: disallowed on this kind of request"
    );

    // Selectors are validated as upstream, all errors at once; unknown operators pass.
    let with_selectors = |selectors: Value| {
        let mut attributes = json!({"namespace": "default", "verb": "list", "resource": "pods"});
        attributes
            .as_object_mut()
            .unwrap()
            .extend(selectors.as_object().unwrap().clone());
        json!({"spec": {"user": "alice", "resourceAttributes": attributes}})
    };
    let sar_path = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
    let (code, v) = post(
        &admin,
        sar_path,
        with_selectors(json!({
            "fieldSelector": {"rawSelector": "a=b", "requirements": [{"key": "", "operator": "In"}]},
            "labelSelector": {},
        })),
    )
    .await;
    assert_eq!(code, 422, "{v}");
    assert_eq!(
        v["message"],
        "SubjectAccessReview.authorization.k8s.io \"\" is invalid: [\
         spec.resourceAttributes.fieldSelector.rawSelector: Invalid value: \"a=b\": may not specified at the same time as requirements, \
         spec.resourceAttributes.fieldSelector.requirements[0].key: Required value: must be specified, \
         spec.resourceAttributes.fieldSelector.requirements[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn', \
         spec.resourceAttributes.labelSelector.requirements: Required value: when spec.resourceAttributes.labelSelector is specified, requirements or rawSelector is required]"
    );
    let (code, v) = post(
        &admin,
        sar_path,
        with_selectors(json!({"labelSelector": {"requirements": [
            {"key": "bad key", "operator": "Exists", "values": ["x"]},
            {"key": "tier", "operator": "Matches", "values": ["-web"]}]}})),
    )
    .await;
    assert_eq!(code, 422, "{v}");
    let causes: Vec<&str> = v["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        causes,
        [
            "spec.resourceAttributes.labelSelector.requirements[0].values",
            "spec.resourceAttributes.labelSelector.requirements[0].key",
            "spec.resourceAttributes.labelSelector.requirements[1].values[0]",
        ]
    );
    let (code, v) = post(
        &admin,
        sar_path,
        with_selectors(json!({"fieldSelector": {"requirements": [
            {"key": "spec.nodeName", "operator": "Near", "values": ["n"]}]},
            "labelSelector": {"rawSelector": "tier=web"}})),
    )
    .await;
    assert_eq!(code, 201, "{v}");

    // Rules review: what alice holds is basic-user, discovery and public info.
    let (code, v) = post(
        &alice,
        "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
        json!({"spec": {"namespace": "default"}}),
    )
    .await;
    assert_eq!(code, 201);
    let resources: Vec<String> = v["status"]["resourceRules"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| {
            r["resources"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_str().unwrap().to_string())
        })
        .collect();
    assert!(
        resources.contains(&"selfsubjectaccessreviews".to_string()),
        "{resources:?}"
    );
    assert!(!resources.contains(&"pods".to_string()));
    assert!(
        v["status"]["nonResourceRules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["nonResourceURLs"]
                .as_array()
                .unwrap()
                .contains(&json!("/healthz")))
    );

    // An admin's rules are cluster-admin's, each once: system:masters' own authorizer
    // resolves none upstream.
    let (code, v) = post(
        &admin,
        "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
        json!({"spec": {"namespace": "default"}}),
    )
    .await;
    assert_eq!(code, 201);
    let everything = |key: &str| {
        v["status"][key]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["verbs"] == json!(["*"]))
            .count()
    };
    assert_eq!(
        (everything("resourceRules"), everything("nonResourceRules")),
        (1, 1),
        "{v}"
    );

    // Who am I.
    let (code, v) = post(
        &alice,
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        json!({}),
    )
    .await;
    assert_eq!(code, 201);
    assert_eq!(v["status"]["userInfo"]["username"], "alice");
    assert_eq!(
        v["status"]["userInfo"]["groups"],
        json!(["devs", "system:authenticated"])
    );

    // TokenReview of a token nobody issued.
    let (code, v) = post(
        &admin,
        "/apis/authentication.k8s.io/v1/tokenreviews",
        json!({"spec": {"token": "nope"}}),
    )
    .await;
    assert_eq!(code, 201);
    assert_eq!(v["status"]["authenticated"], false);
    server.stop().await;
}

#[tokio::test]
async fn impersonation_is_checked_with_the_impersonate_verb() {
    let server = TestApiServer::start().await.unwrap();
    let admin = server.client.clone();
    let alice = server.client_as("alice", &[]).await.unwrap();
    let whoami = |client: kube::Client, headers: Vec<(&'static str, &'static str)>| async move {
        let mut h = vec![("content-type", "application/json")];
        h.extend(headers);
        let (code, _, body) = TestApiServer::raw(
            &client,
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            &h,
            b"{}".to_vec(),
        )
        .await
        .unwrap();
        (code, serde_json::from_slice::<Value>(&body).unwrap())
    };
    let (code, v) = whoami(alice.clone(), vec![("Impersonate-User", "bob")]).await;
    assert_eq!(code, 403);
    assert_eq!(
        v["message"],
        "users \"bob\" is forbidden: User \"alice\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"
    );
    let (code, v) = whoami(
        admin.clone(),
        vec![("Impersonate-User", "bob"), ("Impersonate-Group", "team")],
    )
    .await;
    assert_eq!(code, 201);
    assert_eq!(v["status"]["userInfo"]["username"], "bob");
    assert_eq!(
        v["status"]["userInfo"]["groups"],
        json!(["team", "system:authenticated"])
    );
    // The impersonated user is the one authorized: bob may not list pods.
    let (code, _, _) = TestApiServer::raw(
        &admin,
        "GET",
        "/api/v1/namespaces/default/pods",
        &[("Impersonate-User", "bob")],
        vec![],
    )
    .await
    .unwrap();
    assert_eq!(code, 403);
    server.stop().await;
}

/// The reviews are discovered like any resource (kubectl maps `kind:
/// SubjectAccessReview` in a file through discovery).
#[tokio::test]
async fn reviews_are_discovered() {
    use kube::discovery::{Discovery, Scope, verbs};

    let server = TestApiServer::start().await.unwrap();
    let client = server.client.clone();

    let discovery = Discovery::new(client.clone()).run().await.unwrap();
    let authz = discovery.get("authorization.k8s.io").unwrap();
    let (sar, caps) = authz
        .recommended_resources()
        .into_iter()
        .find(|(r, _)| r.plural == "subjectaccessreviews")
        .unwrap();
    assert_eq!(sar.kind, "SubjectAccessReview");
    assert_eq!(caps.scope, Scope::Cluster);
    assert!(caps.supports_operation(verbs::CREATE));
    assert!(!caps.supports_operation(verbs::LIST));
    let authn = discovery.get("authentication.k8s.io").unwrap();
    assert!(
        authn
            .recommended_resources()
            .iter()
            .any(|(r, _)| r.plural == "tokenreviews")
    );

    // Create-only: any other method is 405, as upstream.
    let (code, _, body) = TestApiServer::raw(
        &client,
        "GET",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        &[],
        Vec::new(),
    )
    .await
    .unwrap();
    assert_eq!(code, 405, "{}", String::from_utf8_lossy(&body));

    server.stop().await;
}

/// `componentstatuses` probe the scheduler and the controller manager on this machine
/// (whatever listens there or not: each gets one `Healthy` condition) and, on the
/// embedded store, nothing else; reads only, with upstream's deprecation warning.
#[tokio::test]
async fn componentstatuses_are_probed_on_read() {
    use k8s_openapi::api::core::v1::ComponentStatus;
    use kube::api::{Api, ListParams};

    let server = TestApiServer::start().await.unwrap();
    let client = server.client.clone();
    let statuses: Api<ComponentStatus> = Api::all(client.clone());

    let list = statuses.list(&ListParams::default()).await.unwrap();
    let names: Vec<_> = list
        .items
        .iter()
        .map(|s| s.metadata.name.clone().unwrap_or_default())
        .collect();
    assert_eq!(names, ["controller-manager", "scheduler"]);
    for s in &list.items {
        let conditions = s.conditions.as_deref().unwrap_or_default();
        assert_eq!(conditions.len(), 1, "{s:?}");
        assert_eq!(conditions[0].type_, "Healthy");
        assert!(["True", "False"].contains(&conditions[0].status.as_str()));
    }
    let one = statuses
        .list(&ListParams::default().fields("metadata.name=scheduler"))
        .await
        .unwrap();
    assert_eq!(one.items.len(), 1);
    let scheduler = statuses.get("scheduler").await.unwrap();
    assert_eq!(scheduler.metadata.name.as_deref(), Some("scheduler"));
    // No etcd behind this server.
    let err = statuses.get("etcd-0").await.unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 404),
        "{err:?}"
    );
    let err = statuses
        .list(&ListParams::default().fields("status.phase=x"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 400),
        "{err:?}"
    );

    let path = "/api/v1/componentstatuses";
    let (code, headers, body) = TestApiServer::raw(
        &client,
        "GET",
        path,
        &[("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")],
        Vec::new(),
    )
    .await
    .unwrap();
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(
        headers["warning"],
        "299 - \"v1 ComponentStatus is deprecated in v1.19+\""
    );
    let table: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let columns: Vec<_> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(columns, ["Name", "Status", "Message", "Error"]);
    assert_eq!(table["rows"][1]["cells"][0], "scheduler");
    assert!(["Healthy", "Unhealthy"].contains(&table["rows"][1]["cells"][1].as_str().unwrap()));
    for (method, path) in [
        ("POST", path),
        ("DELETE", "/api/v1/componentstatuses/scheduler"),
        ("GET", "/api/v1/componentstatuses?watch=true"),
    ] {
        let (code, _, body) = TestApiServer::raw(&client, method, path, &[], b"{}".to_vec())
            .await
            .unwrap();
        assert_eq!(
            code,
            405,
            "{method} {path}: {}",
            String::from_utf8_lossy(&body)
        );
    }
    server.stop().await;
}
