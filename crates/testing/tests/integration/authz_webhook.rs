//! `--authorization-mode=RBAC,Webhook` with `--authorization-webhook-config-file` end
//! to end: a fake policy service served by the test over HTTPS on loopback, named by
//! a kubeconfig (its CA, and a bearer token the apiserver presents to it). What RBAC
//! allows never reaches it; what RBAC does not allow is its decision (allowed,
//! denied with a reason, or no opinion); answers are cached; it decides
//! impersonation and SubjectAccessReviews too; rules reviews say they are
//! incomplete. A Webhook mode without a config file stops the start.

use std::path::PathBuf;
use std::sync::OnceLock;

use ferrokube_apiserver::{AuthorizationMode, Options, ReviewVersion};
use ferrokube_testing::{RecordingWebhook, TestApiServer};
use serde_json::{Value, json};

/// What the apiserver presents to the policy service (the kubeconfig's user).
const CALLER_TOKEN: &str = "apiserver-to-policy";

static CONFIG: OnceLock<PathBuf> = OnceLock::new();

fn with_webhook(o: &mut Options) {
    if let Some(path) = CONFIG.get() {
        o.authorization_modes = vec![AuthorizationMode::Rbac, AuthorizationMode::Webhook];
        o.authorization_webhook.config_file = Some(path.clone());
        o.authorization_webhook.version = ReviewVersion::V1;
    }
}

/// The fake policy service's answer: `jane` may list configmaps, impersonate `bob`,
/// create rolebindings and bind the `admin` ClusterRole; secrets are denied to her
/// with a reason; everything else gets no opinion.
fn policy_service(review: &Value) -> Value {
    let spec = &review["spec"];
    let ra = &spec["resourceAttributes"];
    let status = match (
        spec["user"].as_str(),
        ra["verb"].as_str(),
        ra["resource"].as_str(),
        ra["name"].as_str(),
    ) {
        (Some("jane"), Some("list"), Some("configmaps"), _) => json!({"allowed": true}),
        (Some("jane"), Some("impersonate"), Some("users"), Some("bob"))
        | (Some("jane"), Some("create"), Some("rolebindings"), _)
        | (Some("jane"), Some("bind"), Some("clusterroles"), Some("admin")) => {
            json!({"allowed": true})
        }
        (Some("jane"), _, Some("secrets"), _) => {
            json!({"allowed": false, "denied": true, "reason": "secrets are off limits"})
        }
        _ => json!({"allowed": false}),
    };
    json!({"apiVersion": review["apiVersion"], "kind": "SubjectAccessReview", "status": status})
}

async fn get(client: &kube::Client, path: &str) -> (u16, Value) {
    let req = http::Request::get(path).body(Vec::new()).unwrap();
    match client.request_text(req).await {
        Ok(body) => (200, serde_json::from_str(&body).unwrap_or(Value::Null)),
        Err(kube::Error::Api(status)) => (status.code, json!({"message": status.message})),
        Err(e) => panic!("GET {path}: {e}"),
    }
}

#[tokio::test]
async fn what_rbac_does_not_allow_the_webhook_decides() {
    let policy = RecordingWebhook::start(policy_service).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = policy
        .write_kubeconfig(dir.path(), "/authorize", CALLER_TOKEN)
        .unwrap();
    CONFIG.set(config).unwrap();
    let server = TestApiServer::start_with(with_webhook).await.unwrap();
    let jane = server.client_as("jane", &["devs"]).await.unwrap();

    // RBAC lets every authenticated user discover the API: no call for that.
    let (code, _) = get(&jane, "/version").await;
    assert_eq!(code, 200);
    assert_eq!(policy.calls(), 0);

    // RBAC has nothing for jane on configmaps: the webhook allows the list.
    let (code, body) = get(&jane, "/api/v1/namespaces/default/configmaps").await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["kind"], "ConfigMapList");
    assert_eq!(policy.calls(), 1);
    {
        let reviews = policy.requests();
        let (caller, sent) = &reviews[0];
        assert_eq!(caller, &format!("Bearer {CALLER_TOKEN}"));
        assert_eq!(sent["apiVersion"], "authorization.k8s.io/v1");
        assert_eq!(sent["spec"]["user"], "jane");
        assert_eq!(
            sent["spec"]["groups"],
            json!(["devs", "system:authenticated"])
        );
        assert_eq!(
            sent["spec"]["resourceAttributes"],
            json!({"namespace": "default", "verb": "list", "group": "", "version": "v1",
                "resource": "configmaps", "subresource": "", "name": ""})
        );
    }
    // The allowed answer is cached.
    let (code, _) = get(&jane, "/api/v1/namespaces/default/configmaps").await;
    assert_eq!(code, 200);
    assert_eq!(policy.calls(), 1);
    // A list's selectors go with the review (AuthorizeWithSelectors).
    let (code, body) = get(
        &jane,
        "/api/v1/namespaces/default/configmaps?labelSelector=tier%3Dweb,!canary&fieldSelector=metadata.namespace%3Ddefault",
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(policy.calls(), 2);
    {
        let reviews = policy.requests();
        let attributes = &reviews[1].1["spec"]["resourceAttributes"];
        assert_eq!(
            attributes["fieldSelector"],
            json!({"requirements": [{"key": "metadata.namespace", "operator": "In", "values": ["default"]}]})
        );
        assert_eq!(
            attributes["labelSelector"],
            json!({"requirements": [{"key": "canary", "operator": "DoesNotExist"},
                {"key": "tier", "operator": "In", "values": ["web"]}]})
        );
    }

    // Denied with a reason, and no opinion: both 403.
    let (code, body) = get(&jane, "/api/v1/namespaces/default/secrets").await;
    assert_eq!(code, 403, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap_or("")
            .contains("secrets are off limits"),
        "{body}"
    );
    let (code, _) = get(&jane, "/api/v1/namespaces/default/pods").await;
    assert_eq!(code, 403);

    // Impersonation is asked of the whole chain.
    let mut cfg = server.config_as("jane", &["devs"]).await.unwrap();
    cfg.auth_info.impersonate = Some("bob".into());
    let as_bob = kube::Client::try_from(cfg).unwrap();
    let (code, body) = TestApiServer::send_json(
        &as_bob,
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}),
    )
    .await
    .map(|(code, _, body)| (code, body))
    .unwrap();
    assert_eq!(code, 201, "{body}");
    assert_eq!(body["status"]["userInfo"]["username"], "bob");

    // A SubjectAccessReview by the admin gets the webhook's answer.
    let (code, _, review) = TestApiServer::send_json(
        &server.client,
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        &json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": "jane", "groups": ["devs"], "resourceAttributes":
                {"namespace": "default", "verb": "get", "resource": "secrets", "name": "x"}}}),
    )
    .await
    .unwrap();
    assert_eq!(code, 201, "{review}");
    assert_eq!(review["status"]["allowed"], false);
    assert_eq!(review["status"]["denied"], true);
    assert_eq!(review["status"]["reason"], "secrets are off limits");

    // Rules reviews cannot list the webhook's rules.
    let (code, _, rules) = TestApiServer::send_json(
        &jane,
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
        &json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
            "spec": {"namespace": "default"}}),
    )
    .await
    .unwrap();
    assert_eq!(code, 201, "{rules}");
    assert_eq!(rules["status"]["incomplete"], true);

    // RBAC's escalation check asks the webhook too (not only its cache): jane may
    // bind `admin`, which she does not hold, and not `cluster-admin`.
    let binding = |name: &str, role: &str| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "User", "name": "bob", "apiGroup": "rbac.authorization.k8s.io"}]})
    };
    let bindings = "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings";
    let (code, _, body) =
        TestApiServer::send_json(&jane, "POST", bindings, &binding("bob-admin", "admin"))
            .await
            .unwrap();
    assert_eq!(code, 201, "{body}");
    let (code, _, body) = TestApiServer::send_json(
        &jane,
        "POST",
        bindings,
        &binding("bob-cluster-admin", "cluster-admin"),
    )
    .await
    .unwrap();
    assert_eq!(code, 403, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap_or("")
            .contains("attempting to grant RBAC permissions not currently held"),
        "{body}"
    );

    server.stop().await;
}

#[tokio::test]
async fn the_webhook_mode_without_a_config_file_stops_the_start() {
    let err = TestApiServer::start_with(|o| {
        o.authorization_modes = vec![AuthorizationMode::Rbac, AuthorizationMode::Webhook];
    })
    .await
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("authorization-mode Webhook's authorization config file not passed"),
        "{err}"
    );
}
