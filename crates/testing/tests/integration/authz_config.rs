//! `--authorization-config` end to end: an AuthorizationConfiguration chaining RBAC
//! and three webhooks served by the test over HTTPS on loopback. Match conditions
//! choose which webhooks a request reaches; a webhook that denies ends the chain; a
//! webhook that cannot be reached denies under `failurePolicy: Deny`, and the
//! failure makes the request's answer a 500 (an access review's evaluation error).
//! A file with mistakes stops the start with every one of them named.

use std::path::PathBuf;
use std::sync::OnceLock;

use ferrokube_testing::{RecordingWebhook, TestApiServer};
use serde_json::{Value, json};

static CONFIG: OnceLock<PathBuf> = OnceLock::new();

fn with_config(o: &mut ferrokube_apiserver::Options) {
    if let Some(path) = CONFIG.get() {
        o.authorization_config_file = Some(path.clone());
    }
}

/// A SubjectAccessReview answer.
fn answer(review: &Value, status: Value) -> Value {
    json!({"apiVersion": review["apiVersion"], "kind": "SubjectAccessReview", "status": status})
}

async fn list(client: &kube::Client, namespace: &str) -> (u16, String) {
    let path = format!("/api/v1/namespaces/{namespace}/configmaps");
    let req = http::Request::get(&path).body(Vec::new()).unwrap();
    match client.request_text(req).await {
        Ok(_) => (200, String::new()),
        Err(kube::Error::Api(status)) => (status.code, status.message),
        Err(e) => panic!("GET {path}: {e}"),
    }
}

/// A kubeconfig for `hook` in a directory of its own.
fn kubeconfig(hook: &RecordingWebhook, dir: &std::path::Path, name: &str) -> PathBuf {
    let dir = dir.join(name);
    std::fs::create_dir(&dir).unwrap();
    hook.write_kubeconfig(&dir, "/authorize", "apiserver")
        .unwrap()
}

#[tokio::test]
async fn match_conditions_and_failure_policies_shape_the_chain() {
    // Denies everything it is asked.
    let guard = RecordingWebhook::start(|r| {
        answer(
            r,
            json!({"allowed": false, "denied": true, "reason": "restricted is closed"}),
        )
    })
    .await
    .unwrap();
    // Allows listing configmaps.
    let allow = RecordingWebhook::start(|r| {
        let ra = &r["spec"]["resourceAttributes"];
        let ok = ra["verb"] == "list" && ra["resource"] == "configmaps";
        answer(r, json!({"allowed": ok}))
    })
    .await
    .unwrap();
    // Stopped before the server starts: every call to it fails.
    let mut broken = RecordingWebhook::start(|r| answer(r, json!({"allowed": true})))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (guard_kc, allow_kc, broken_kc) = (
        kubeconfig(&guard, dir.path(), "guard"),
        kubeconfig(&allow, dir.path(), "allow"),
        kubeconfig(&broken, dir.path(), "broken"),
    );
    broken.server.stop().await;
    let webhook = |kc: &PathBuf, policy: &str, conditions: Value| {
        json!({"timeout": "3s", "subjectAccessReviewVersion": "v1",
            "matchConditionSubjectAccessReviewVersion": "v1", "failurePolicy": policy,
            "connectionInfo": {"type": "KubeConfigFile", "kubeConfigFile": kc},
            "matchConditions": conditions})
    };
    let in_namespace = |ns: &str| {
        json!([{"expression": "has(request.resourceAttributes)"},
            {"expression": format!("request.resourceAttributes.namespace == '{ns}'")}])
    };
    let config = json!({
    "apiVersion": "apiserver.config.k8s.io/v1", "kind": "AuthorizationConfiguration",
    "authorizers": [
        {"type": "RBAC", "name": "rbac"},
        {"type": "Webhook", "name": "guard",
            "webhook": webhook(&guard_kc, "NoOpinion", in_namespace("restricted"))},
        {"type": "Webhook", "name": "broken",
            "webhook": webhook(&broken_kc, "Deny", in_namespace("broken"))},
        {"type": "Webhook", "name": "allow", "webhook": webhook(&allow_kc, "NoOpinion", json!([]))},
    ]});
    let path = dir.path().join("authz.yaml");
    std::fs::write(&path, serde_json::to_string(&config).unwrap()).unwrap();
    CONFIG.set(path).unwrap();
    let server = TestApiServer::start_with(with_config).await.unwrap();
    let jane = server.client_as("jane", &["devs"]).await.unwrap();

    // Not in `restricted` nor `broken`: only the last webhook is asked, and allows.
    assert_eq!(list(&jane, "default").await, (200, String::new()));
    assert_eq!((guard.calls(), allow.calls()), (0, 1));

    // In `restricted`: the guard is asked and its denial ends the chain.
    let (code, message) = list(&jane, "restricted").await;
    assert_eq!(code, 403, "{message}");
    assert!(message.contains("restricted is closed"), "{message}");
    assert_eq!((guard.calls(), allow.calls()), (1, 1));
    assert_eq!(
        guard.requests()[0].1["spec"]["resourceAttributes"]["namespace"],
        "restricted"
    );

    // In `broken`: the webhook that cannot be reached denies (failurePolicy Deny)
    // and, as upstream's chain, the failure makes the answer a 500.
    let (code, message) = list(&jane, "broken").await;
    assert_eq!(code, 500, "{message}");
    assert!(
        message.starts_with("Internal error occurred: Post \"https://127.0.0.1:")
            && message.contains("dial tcp"),
        "{message}"
    );
    assert_eq!(allow.calls(), 1);
    // An access review shows the failure as its evaluation error.
    let (code, _, review) = TestApiServer::send_json(
        &server.client,
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        &json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": "jane", "groups": ["devs"], "resourceAttributes":
                {"namespace": "broken", "verb": "list", "resource": "configmaps"}}}),
    )
    .await
    .unwrap();
    assert_eq!(code, 201, "{review}");
    assert_eq!(review["status"]["allowed"], false);
    assert_eq!(review["status"]["denied"], true);
    assert!(
        review["status"]["evaluationError"]
            .as_str()
            .unwrap_or("")
            .contains("dial tcp"),
        "{review}"
    );

    // What RBAC allows reaches no webhook.
    let (code, _) = list(&server.client, "restricted").await;
    assert_eq!(code, 200);
    assert_eq!((guard.calls(), allow.calls()), (1, 1));

    server.stop().await;
}

#[tokio::test]
async fn a_file_with_mistakes_stops_the_start() {
    let err = TestApiServer::start_with(|o| {
        let dir = std::env::temp_dir().join(format!("authz-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bad.yaml");
        std::fs::write(
            &path,
            "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthorizationConfiguration\n\
             authorizers:\n- {type: RBAC, name: rbac}\n- {type: Webhook, name: w}\n",
        )
        .unwrap();
        o.authorization_config_file = Some(path);
    })
    .await
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("authorizers[1].webhook: Required value: required when type=Webhook"),
        "{err}"
    );
}

static RELOADED_CONFIG: OnceLock<PathBuf> = OnceLock::new();

fn with_reloaded_config(o: &mut ferrokube_apiserver::Options) {
    o.authorization_config_file = RELOADED_CONFIG.get().cloned();
}

/// The server's `/metrics` line for reloads of the authorization file with `status`.
async fn reloads(server: &TestApiServer, status: &str) -> Option<String> {
    let (code, _, body) = TestApiServer::raw(&server.client, "GET", "/metrics", &[], vec![])
        .await
        .unwrap();
    assert_eq!(code, 200);
    String::from_utf8(body).unwrap().lines().find_map(|l| {
        (l.starts_with("apiserver_authorization_config_controller_automatic_reloads_total{")
            && l.contains(&format!("status=\"{status}\"")))
        .then(|| l.rsplit(' ').next().unwrap_or_default().to_string())
    })
}

#[tokio::test]
async fn a_changed_file_replaces_the_chain_while_the_server_runs() {
    // The file is read again every 5 s; each wait below allows several reads.
    const DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);
    let file = |authorizers: &str| {
        format!(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthorizationConfiguration\n\
             authorizers:\n{authorizers}"
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("authz.yaml");
    std::fs::write(
        &path,
        file("- {type: Node, name: node}\n- {type: RBAC, name: rbac}\n"),
    )
    .unwrap();
    RELOADED_CONFIG.set(path.clone()).unwrap();
    let server = TestApiServer::start_with(with_reloaded_config)
        .await
        .unwrap();
    let alice = server.client_as("alice", &[]).await.unwrap();
    assert_eq!(list(&alice, "default").await.0, 403);

    // AlwaysAllow after RBAC: alice may list, once the server has read the file.
    std::fs::write(
        &path,
        file(
            "- {type: Node, name: node}\n- {type: RBAC, name: rbac}\n\
             - {type: AlwaysAllow, name: alwaysallow}\n",
        ),
    )
    .unwrap();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while list(&alice, "default").await.0 != 200 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the changed file was not put in use"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(reloads(&server, "success").await.as_deref(), Some("1"));

    // A file without the authorizers the server started with is refused, and the
    // chain in use stays.
    std::fs::write(&path, file("- {type: AlwaysDeny, name: alwaysdeny}\n")).unwrap();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while reloads(&server, "failure").await.is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the refused file was not tried"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(list(&alice, "default").await.0, 200);
    assert_eq!(reloads(&server, "success").await.as_deref(), Some("1"));
    server.stop().await;
}
