//! `--authentication-token-webhook-config-file` end to end: a fake token service
//! served by the test over HTTPS on loopback, named by a kubeconfig (its CA, and a
//! bearer token the apiserver presents to it). A token the service accepts is its
//! user, seen through SelfSubjectReviews and TokenReviews; answers are cached; a
//! token it refuses, or refuses with an error, is a 401; the apiserver's own
//! credentials still authenticate without asking it. A config file that cannot be
//! read stops the start.

use std::path::PathBuf;
use std::sync::OnceLock;

use ferrokube_apiserver::{Options, ReviewVersion};
use ferrokube_testing::{RecordingWebhook, TestApiServer};
use serde_json::{Value, json};

const TOKEN_REVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";
/// What the apiserver presents to the token service (the kubeconfig's user).
const CALLER_TOKEN: &str = "apiserver-to-webhook";

/// The kubeconfig naming the fake service; the options hook is a plain `fn`.
static CONFIG: OnceLock<PathBuf> = OnceLock::new();

fn with_webhook(o: &mut Options) {
    if let Some(path) = CONFIG.get() {
        o.authentication_token_webhook_config_file = Some(path.clone());
        o.authentication_token_webhook_version = ReviewVersion::V1;
    }
}

/// The fake token service's answer to a review: `jane-token` is jane,
/// `expired-token` is refused with an error, anything else is refused.
fn token_service(review: &Value) -> Value {
    let status = match review["spec"]["token"].as_str() {
        Some("jane-token") => json!({
            "authenticated": true,
            "user": {"username": "jane", "uid": "42", "groups": ["devs"],
                "extra": {"team": ["storage"]}},
        }),
        Some("expired-token") => json!({"authenticated": false, "error": "token expired"}),
        _ => json!({"authenticated": false}),
    };
    json!({"apiVersion": review["apiVersion"], "kind": "TokenReview", "status": status})
}

async fn whoami(server: &TestApiServer, token: &str) -> (u16, Value) {
    server.review_self_with_token(token).await.unwrap()
}

#[tokio::test]
async fn tokens_the_webhook_accepts_authenticate_and_its_answers_are_cached() {
    let service = RecordingWebhook::start(token_service).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = service
        .write_kubeconfig(dir.path(), "/authenticate", CALLER_TOKEN)
        .unwrap();
    CONFIG.set(config).unwrap();
    let server = TestApiServer::start_with(with_webhook).await.unwrap();

    let (code, review) = whoami(&server, "jane-token").await;
    assert_eq!(code, 201, "{review}");
    let user = &review["status"]["userInfo"];
    assert_eq!(user["username"], "jane");
    assert_eq!(user["uid"], "42");
    assert_eq!(user["groups"], json!(["devs", "system:authenticated"]));
    assert_eq!(user["extra"], json!({"team": ["storage"]}));
    assert_eq!(service.calls(), 1);
    {
        let reviews = service.requests();
        let (caller, sent) = &reviews[0];
        assert_eq!(caller, &format!("Bearer {CALLER_TOKEN}"));
        assert_eq!(sent["apiVersion"], "authentication.k8s.io/v1");
        assert_eq!(sent["kind"], "TokenReview");
        assert_eq!(sent["spec"]["token"], "jane-token");
        // The API audiences (the service account issuer when none are set).
        assert!(
            sent["spec"]["audiences"]
                .as_array()
                .is_some_and(|a| !a.is_empty()),
            "{sent}"
        );
    }

    // The answer is cached: the same token again asks no one.
    let (code, _) = whoami(&server, "jane-token").await;
    assert_eq!(code, 201);
    assert_eq!(service.calls(), 1);

    // Refused tokens, with and without an error of the service's.
    for token in ["nobody-token", "expired-token"] {
        let (code, body) = whoami(&server, token).await;
        assert_eq!(code, 401, "{token}: {body}");
        assert_eq!(body["reason"], "Unauthorized", "{token}");
    }
    assert_eq!(service.calls(), 3);
    // The three calls, one after another, shared one kept connection.
    assert_eq!(service.server.connections(), 1);

    // A TokenReview through the API asks the same chain.
    let (code, _, review) = TestApiServer::send_json(
        &server.client,
        "POST",
        TOKEN_REVIEWS,
        &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
            "spec": {"token": "jane-token"}}),
    )
    .await
    .unwrap();
    assert_eq!(code, 201, "{review}");
    assert_eq!(review["status"]["authenticated"], true);
    assert_eq!(review["status"]["user"]["username"], "jane");

    // The admin's client certificate is not a bearer token: no call for it.
    let calls = service.calls();
    let (code, review) = {
        let (code, _, body) = TestApiServer::send_json(
            &server.client,
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}),
        )
        .await
        .unwrap();
        (code, body)
    };
    assert_eq!(code, 201, "{review}");
    assert_ne!(review["status"]["userInfo"]["username"], "jane");
    assert_eq!(service.calls(), calls);

    server.stop().await;
}

#[tokio::test]
async fn a_webhook_config_file_that_cannot_be_read_stops_the_start() {
    let err = TestApiServer::start_with(|o| {
        o.authentication_token_webhook_config_file =
            Some("/nonexistent/token-webhook.kubeconfig".into());
    })
    .await
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("--authentication-token-webhook-config-file"),
        "{err}"
    );
}
