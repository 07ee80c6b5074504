//! Service account tokens: TokenRequest, the JWT authenticator, bound objects,
//! expiry, TokenReview and the issuer discovery documents.

use std::time::Duration;

use ferrokube_auth::authn::serviceaccount::{Claims, KubernetesClaim, Ref, TokenIssuer, now_unix};
use ferrokube_testing::{SERVICE_ACCOUNT_ISSUER, TestApiServer};
use serde_json::{Value, json};

async fn call(
    client: &kube::Client,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let (code, _, bytes) = TestApiServer::raw(
        client,
        method,
        path,
        &[("content-type", "application/json")],
        body.map(|b| serde_json::to_vec(&b).unwrap())
            .unwrap_or_default(),
    )
    .await
    .unwrap();
    (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

async fn token_for(admin: &kube::Client, sa: &str, spec: Value) -> (u16, Value) {
    call(
        admin,
        "POST",
        &format!("/api/v1/namespaces/default/serviceaccounts/{sa}/token"),
        Some(
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}),
        ),
    )
    .await
}

/// A JWT's claims, unverified.
fn token_claims(token: &str) -> Value {
    use base64::Engine;
    let payload = token.split('.').nth(1).unwrap();
    serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .unwrap(),
    )
    .unwrap()
}

async fn whoami(server: &TestApiServer, token: &str) -> (u16, Value) {
    let client = server.client_with_token(token).await.unwrap();
    call(
        &client,
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        Some(json!({})),
    )
    .await
}

/// Retries until the status is `want` (the authenticator reads the watch cache).
async fn eventually_status(server: &TestApiServer, token: &str, want: u16) -> Value {
    for _ in 0..100 {
        let (code, v) = whoami(server, token).await;
        if code == want {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("token never got status {want}");
}

#[tokio::test]
async fn token_requests_issue_bound_tokens_that_authenticate_until_unbound() {
    let server = TestApiServer::start().await.unwrap();
    let admin = server.client.clone();
    let (code, _) = call(
        &admin,
        "POST",
        "/api/v1/namespaces/default/serviceaccounts",
        Some(json!({"metadata": {"name": "robot"}})),
    )
    .await;
    assert_eq!(code, 201);

    let (code, v) = token_for(&admin, "robot", json!({})).await;
    assert_eq!(code, 201, "{v}");
    // client-go's JSON carries the Go struct's empty status; it is the answer's.
    let (code, sent_with_status) = call(
        &admin,
        "POST",
        "/api/v1/namespaces/default/serviceaccounts/robot/token",
        Some(json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "metadata": {"creationTimestamp": null}, "spec": {"audiences": null, "boundObjectRef": null},
            "status": {"token": "", "expirationTimestamp": null}})),
    )
    .await;
    assert_eq!(code, 201, "{sent_with_status}");
    assert!(
        sent_with_status["status"]["token"]
            .as_str()
            .unwrap()
            .starts_with("eyJ")
    );
    assert_eq!(v["kind"], "TokenRequest");
    assert_eq!(v["spec"]["expirationSeconds"], 3600);
    assert_eq!(v["spec"]["audiences"], json!([SERVICE_ACCOUNT_ISSUER]));
    let token = v["status"]["token"].as_str().unwrap().to_string();
    assert!(
        v["status"]["expirationTimestamp"]
            .as_str()
            .unwrap()
            .ends_with('Z')
    );
    let me = eventually_status(&server, &token, 201).await;
    assert_eq!(
        me["status"]["userInfo"]["username"],
        "system:serviceaccount:default:robot"
    );
    assert_eq!(
        me["status"]["userInfo"]["groups"],
        json!([
            "system:serviceaccounts",
            "system:serviceaccounts:default",
            "system:authenticated"
        ])
    );
    // RBAC applies to service accounts: no pods until a binding grants them.
    let robot = server.client_with_token(&token).await.unwrap();
    let (code, _) = call(&robot, "GET", "/api/v1/namespaces/default/pods", None).await;
    assert_eq!(code, 403);
    let (code, _) = call(&admin, "POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
        Some(json!({"metadata": {"name": "robot-view"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "ServiceAccount", "name": "robot", "namespace": "default"}]}))).await;
    assert_eq!(code, 201);
    let mut listed = 0;
    for _ in 0..100 {
        listed = call(&robot, "GET", "/api/v1/namespaces/default/pods", None)
            .await
            .0;
        if listed == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(listed, 200);

    // TokenReview says the same.
    let (_, v) = call(
        &admin,
        "POST",
        "/apis/authentication.k8s.io/v1/tokenreviews",
        Some(json!({"spec": {"token": token}})),
    )
    .await;
    assert_eq!(v["status"]["authenticated"], true);
    assert_eq!(
        v["status"]["user"]["username"],
        "system:serviceaccount:default:robot"
    );

    // Bound to a pod: valid while the pod exists.
    let (code, pod) = call(&admin, "POST", "/api/v1/namespaces/default/pods",
        Some(json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}))).await;
    assert_eq!(code, 201);
    let uid = pod["metadata"]["uid"].as_str().unwrap();
    let (code, v) = token_for(
        &admin,
        "robot",
        json!({"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "p", "uid": uid}}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    let pod_token = v["status"]["token"].as_str().unwrap().to_string();
    let me = eventually_status(&server, &pod_token, 201).await;
    assert_eq!(
        me["status"]["userInfo"]["extra"]["authentication.kubernetes.io/pod-name"],
        json!(["p"])
    );
    // The kubelet's 1h7s asks for upstream's --service-account-extend-token-expiration
    // (on by default): valid for a year, warned about after the hour. The status
    // shows the hour asked for.
    for (seconds, bound_to_pod, extended) in [
        (3607, true, true),
        (3600, true, false),
        (3607, false, false),
    ] {
        let mut spec = json!({"expirationSeconds": seconds});
        if bound_to_pod {
            spec["boundObjectRef"] =
                json!({"kind": "Pod", "apiVersion": "v1", "name": "p", "uid": uid});
        }
        let (code, v) = token_for(&admin, "robot", spec).await;
        assert_eq!(code, 201, "{v}");
        let claims = token_claims(v["status"]["token"].as_str().unwrap());
        let valid_for = claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap();
        let expires: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time =
            serde_json::from_value(v["status"]["expirationTimestamp"].clone()).unwrap();
        let shown = expires.0.as_second() - claims["iat"].as_i64().unwrap();
        assert!((shown - seconds).abs() <= 1, "{v}");
        if extended {
            assert_eq!(valid_for, 365 * 24 * 3600, "{claims}");
            assert_eq!(
                claims["kubernetes.io"]["warnafter"].as_i64().unwrap()
                    - claims["iat"].as_i64().unwrap(),
                3607
            );
        } else {
            assert_eq!(valid_for, seconds, "{claims}");
            assert!(
                claims["kubernetes.io"].get("warnafter").is_none(),
                "{claims}"
            );
        }
    }
    let (code, v) = token_for(
        &admin,
        "robot",
        json!({"boundObjectRef": {"kind": "Pod", "name": "p", "uid": "other"}}),
    )
    .await;
    assert_eq!(code, 409, "{v}");
    let (code, _) = call(
        &admin,
        "DELETE",
        "/api/v1/namespaces/default/pods/p?gracePeriodSeconds=0",
        None,
    )
    .await;
    assert_eq!(code, 200);
    eventually_status(&server, &pod_token, 401).await;
    // The unbound token still works; deleting the service account ends it.
    assert_eq!(whoami(&server, &token).await.0, 201);
    call(
        &admin,
        "DELETE",
        "/api/v1/namespaces/default/serviceaccounts/robot",
        None,
    )
    .await;
    eventually_status(&server, &token, 401).await;

    // A kubelet gets tokens only for service accounts of its pods, bound to them, for
    // an audience the pod's projected token volumes name (or none).
    let projected = json!([{"name": "tok", "projected": {"sources": [
        {"serviceAccountToken": {"path": "token"}},
        {"serviceAccountToken": {"path": "vault", "audience": "vault"}}]}}]);
    let (_, pod) = call(&admin, "POST", "/api/v1/namespaces/default/pods",
        Some(json!({"metadata": {"name": "on-a"}, "spec": {"nodeName": "node-a", "serviceAccountName": "robot",
            "volumes": projected, "containers": [{"name": "c", "image": "busybox"}]}}))).await;
    call(
        &admin,
        "POST",
        "/api/v1/namespaces/default/serviceaccounts",
        Some(json!({"metadata": {"name": "robot"}})),
    )
    .await;
    let node_a = server
        .client_as("system:node:node-a", &["system:nodes"])
        .await
        .unwrap();
    let node_b = server
        .client_as("system:node:node-b", &["system:nodes"])
        .await
        .unwrap();
    let bound = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "on-a", "uid": pod["metadata"]["uid"]}}});
    let path = "/api/v1/namespaces/default/serviceaccounts/robot/token";
    let mut got = 0;
    for _ in 0..100 {
        got = call(&node_a, "POST", path, Some(bound.clone())).await.0;
        if got == 201 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(got, 201);
    assert_eq!(
        call(&node_b, "POST", path, Some(bound.clone())).await.0,
        403
    );
    let (code, v) = call(&node_a, "POST", path, Some(json!({"spec": {}}))).await;
    assert_eq!(code, 403);
    assert_eq!(
        v["message"],
        "serviceaccounts \"robot\" is forbidden: node requested token not bound to a pod"
    );
    let with_audiences = |audiences: serde_json::Value| {
        let mut request = bound.clone();
        request["spec"]["audiences"] = audiences;
        request
    };
    assert_eq!(
        call(
            &node_a,
            "POST",
            path,
            Some(with_audiences(json!(["vault"])))
        )
        .await
        .0,
        201
    );
    for (audiences, message) in [
        (
            json!(["elsewhere"]),
            "audience \"elsewhere\" not found in pod spec volume, system:node:node-a is not authorized to request tokens for this audience",
        ),
        (
            json!(["vault", "elsewhere"]),
            "node may only request 0 or 1 audiences",
        ),
    ] {
        let (code, v) = call(&node_a, "POST", path, Some(with_audiences(audiences))).await;
        assert_eq!(code, 403, "{v}");
        assert_eq!(
            v["message"],
            format!("serviceaccounts \"robot\" is forbidden: {message}")
        );
    }
    call(
        &admin,
        "DELETE",
        "/api/v1/namespaces/default/serviceaccounts/robot",
        None,
    )
    .await;

    // Bad requests.
    let (code, _) = token_for(&admin, "nobody", json!({})).await;
    assert_eq!(code, 404);
    call(
        &admin,
        "POST",
        "/api/v1/namespaces/default/serviceaccounts",
        Some(json!({"metadata": {"name": "robot"}})),
    )
    .await;
    let (code, v) = token_for(&admin, "robot", json!({"expirationSeconds": 60})).await;
    assert_eq!(code, 422);
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("may not specify a duration less than 10 minutes")
    );
    server.stop().await;
}

#[tokio::test]
async fn expired_and_foreign_tokens_are_rejected_and_discovery_is_served() {
    let server = TestApiServer::start().await.unwrap();
    let admin = server.client.clone();
    let (_, sa) = call(
        &admin,
        "POST",
        "/api/v1/namespaces/default/serviceaccounts",
        Some(json!({"metadata": {"name": "robot"}})),
    )
    .await;
    let pki = server.dir().join("pki");
    let key = std::fs::read_to_string(pki.join("sa.key")).unwrap();
    let public = std::fs::read_to_string(pki.join("sa.pub")).unwrap();
    let issuer = TokenIssuer::new(&key, &public, SERVICE_ACCOUNT_ISSUER).unwrap();
    let claims = |exp: i64, aud: &str| Claims {
        aud: vec![aud.into()],
        exp,
        iat: now_unix() - 7200,
        iss: String::new(),
        jti: "x".into(),
        kubernetes: KubernetesClaim {
            namespace: "default".into(),
            serviceaccount: Ref {
                name: "robot".into(),
                uid: sa["metadata"]["uid"].as_str().unwrap().into(),
            },
            ..KubernetesClaim::default()
        },
        nbf: now_unix() - 7200,
        sub: "system:serviceaccount:default:robot".into(),
    };
    let fresh = issuer
        .sign(claims(now_unix() + 600, SERVICE_ACCOUNT_ISSUER))
        .unwrap();
    eventually_status(&server, &fresh, 201).await;
    let expired = issuer
        .sign(claims(now_unix() - 3600, SERVICE_ACCOUNT_ISSUER))
        .unwrap();
    assert_eq!(whoami(&server, &expired).await.0, 401);
    let other_audience = issuer.sign(claims(now_unix() + 600, "vault")).unwrap();
    assert_eq!(whoami(&server, &other_audience).await.0, 401);
    let mut tampered = fresh.clone();
    tampered.pop();
    tampered.push(if fresh.ends_with('A') { 'B' } else { 'A' });
    assert_eq!(whoami(&server, &tampered).await.0, 401);

    let (code, v) = call(&admin, "GET", "/.well-known/openid-configuration", None).await;
    assert_eq!(code, 200);
    assert_eq!(v["issuer"], SERVICE_ACCOUNT_ISSUER);
    assert!(v["jwks_uri"].as_str().unwrap().ends_with("/openid/v1/jwks"));
    let (code, v) = call(&admin, "GET", "/openid/v1/jwks", None).await;
    assert_eq!(code, 200);
    assert_eq!(v["keys"][0]["kty"], "EC");
    // Service accounts may read the discovery documents (system:service-account-issuer-discovery).
    let robot = server.client_with_token(&fresh).await.unwrap();
    assert_eq!(call(&robot, "GET", "/openid/v1/jwks", None).await.0, 200);
    server.stop().await;
}

#[tokio::test]
async fn service_account_admission_when_enabled() {
    let server = TestApiServer::start_with(|o| {
        o.admission_plugins
            .set("ServiceAccount", true)
            .expect("a known plugin")
    })
    .await
    .unwrap();
    let admin = server.client.clone();
    let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
    let (code, v) = call(
        &admin,
        "POST",
        "/api/v1/namespaces/default/pods",
        Some(pod.clone()),
    )
    .await;
    assert_eq!(code, 403, "{v}");
    assert_eq!(
        v["message"],
        "pods \"p\" is forbidden: error looking up service account default/default: serviceaccount \"default\" not found"
    );
    call(
        &admin,
        "POST",
        "/api/v1/namespaces/default/serviceaccounts",
        Some(json!({"metadata": {"name": "default"}})),
    )
    .await;
    let mut created = (0, Value::Null);
    for _ in 0..100 {
        created = call(
            &admin,
            "POST",
            "/api/v1/namespaces/default/pods",
            Some(pod.clone()),
        )
        .await;
        if created.0 == 201 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (code, v) = created;
    assert_eq!(code, 201, "{v}");
    assert_eq!(v["spec"]["serviceAccountName"], "default");
    let volume = v["spec"]["volumes"][0]["name"].as_str().unwrap();
    assert!(volume.starts_with("kube-api-access-"), "{volume}");
    assert_eq!(
        v["spec"]["containers"][0]["volumeMounts"][0]["mountPath"],
        "/var/run/secrets/kubernetes.io/serviceaccount"
    );
    // The plugin adds the mount and nothing else: no `initContainers: null` for a pod
    // without init containers, in the answer or as stored.
    assert_eq!(null_members(&v), Vec::<String>::new(), "{v}");
    let (_, stored) = call(&admin, "GET", "/api/v1/namespaces/default/pods/p", None).await;
    assert_eq!(null_members(&stored), Vec::<String>::new(), "{stored}");
    assert!(v["spec"]["imagePullSecrets"].is_null(), "{v}");

    // A pod without pull secrets gets its account's; one with its own keeps them.
    let (code, v) = call(
        &admin,
        "POST",
        "/api/v1/namespaces/default/serviceaccounts",
        Some(json!({"metadata": {"name": "puller"},
            "imagePullSecrets": [{"name": "regcred"}, {"name": "other"}]})),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    let puller_pod = |name: &str, secrets: Value| {
        json!({"metadata": {"name": name}, "spec": {"serviceAccountName": "puller",
            "imagePullSecrets": secrets,
            "containers": [{"name": "c", "image": "127.0.0.1:5001/private/busybox"}]}})
    };
    let mut created = (0, Value::Null);
    for _ in 0..100 {
        created = call(
            &admin,
            "POST",
            "/api/v1/namespaces/default/pods",
            Some(puller_pod("pulls", json!([]))),
        )
        .await;
        if created.0 == 201 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (code, v) = created;
    assert_eq!(code, 201, "{v}");
    assert_eq!(
        v["spec"]["imagePullSecrets"],
        json!([{"name": "regcred"}, {"name": "other"}])
    );
    let (code, v) = call(
        &admin,
        "POST",
        "/api/v1/namespaces/default/pods",
        Some(puller_pod("own", json!([{"name": "mine"}]))),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    assert_eq!(v["spec"]["imagePullSecrets"], json!([{"name": "mine"}]));
    server.stop().await;
}

/// The paths of the members whose value is null (`spec.initContainers`), which a Go
/// server, writing from typed objects, never serves.
fn null_members(v: &Value) -> Vec<String> {
    fn walk(v: &Value, path: &str, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    if x.is_null() {
                        out.push(p);
                    } else {
                        walk(x, &p, out);
                    }
                }
            }
            Value::Array(a) => {
                for (i, x) in a.iter().enumerate() {
                    walk(x, &format!("{path}[{i}]"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(v, "", &mut out);
    out
}

/// What discovery (legacy and aggregated) and OpenAPI say of `serviceaccounts/token`.
async fn token_subresource_as_published(
    client: &kube::Client,
) -> (Option<Value>, Option<Value>, Option<Value>) {
    let (code, list) = call(client, "GET", "/api/v1", None).await;
    assert_eq!(code, 200);
    let listed = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "serviceaccounts/token")
        .cloned();
    let (code, _, body) = TestApiServer::raw(
        client,
        "GET",
        "/api",
        &[(
            "accept",
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
        )],
        Vec::new(),
    )
    .await
    .unwrap();
    assert_eq!(code, 200);
    let aggregated: Value = serde_json::from_slice(&body).unwrap();
    let serviceaccounts = aggregated["items"][0]["versions"][0]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["resource"] == "serviceaccounts")
        .cloned()
        .unwrap();
    let aggregated_sub = serviceaccounts["subresources"]
        .as_array()
        .and_then(|subs| subs.iter().find(|s| s["subresource"] == "token").cloned());
    let (code, v3) = call(client, "GET", "/openapi/v3/api/v1", None).await;
    assert_eq!(code, 200);
    let path = v3["paths"]
        .get("/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token")
        .cloned();
    (listed, aggregated_sub, path)
}

#[tokio::test]
async fn the_token_subresource_is_published_only_when_tokens_can_be_issued() {
    let server = TestApiServer::start().await.unwrap();
    let (listed, aggregated, path) = token_subresource_as_published(&server.client).await;
    assert_eq!(
        listed,
        Some(
            json!({"name": "serviceaccounts/token", "singularName": "", "namespaced": true,
            "group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest",
            "verbs": ["create"]})
        )
    );
    assert_eq!(
        aggregated,
        Some(json!({"subresource": "token", "verbs": ["create"],
            "responseKind": {"group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest"}}))
    );
    let post = &path.expect("the token path is documented")["post"];
    assert_eq!(
        post["operationId"],
        "createCoreV1NamespacedServiceAccountToken"
    );
    assert_eq!(post["description"], "create token of a ServiceAccount");
    assert_eq!(
        post["x-kubernetes-group-version-kind"],
        json!({"group": "authentication.k8s.io", "kind": "TokenRequest", "version": "v1"})
    );
    // Other verbs of the subresource are not allowed.
    let (code, _) = call(
        &server.client,
        "GET",
        "/api/v1/namespaces/default/serviceaccounts/default/token",
        None,
    )
    .await;
    assert_eq!(code, 405);
    server.stop().await;

    // Without a signing key there is no token issuer: upstream then registers no
    // token subresource, so it is neither listed nor served.
    let server = TestApiServer::start_with(|o| {
        o.service_account_issuers.clear();
        o.service_account_signing_key_file = None;
    })
    .await
    .unwrap();
    assert_eq!(
        token_subresource_as_published(&server.client).await,
        (None, None, None)
    );
    for method in ["GET", "POST"] {
        let (code, status) = call(
            &server.client,
            method,
            "/api/v1/namespaces/default/serviceaccounts/default/token",
            Some(json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}})),
        )
        .await;
        assert_eq!(code, 404, "{method}: {status}");
    }
    server.stop().await;
}
