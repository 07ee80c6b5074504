//! `--enable-bootstrap-token-auth` end to end: a `bootstrap.kubernetes.io/token`
//! Secret in kube-system makes its token `<id>.<secret>` authenticate as
//! `system:bootstrap:<id>` (upstream `plugin/pkg/auth/authenticator/token/bootstrap`),
//! seen through a SelfSubjectReview; every token the Secret does not accept, and any
//! bootstrap token with the option off, is a 401.

use ferrokube_testing::TestApiServer;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};

const EXTRA_GROUP: &str = "system:bootstrappers:kubeadm:default-node-token";

/// Creates `bootstrap-token-<id>` in kube-system with `string_data` (written as
/// stringData, which the apiserver stores base64-encoded under data, as kubeadm's).
async fn create_token_secret(client: &kube::Client, id: &str, string_data: Value) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "kube-system");
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": format!("bootstrap-token-{id}"), "namespace": "kube-system"},
        "type": "bootstrap.kubernetes.io/token",
        "stringData": string_data,
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

/// A SelfSubjectReview with `token`: the status code and the body.
async fn whoami(server: &TestApiServer, token: &str) -> (u16, Value) {
    server.review_self_with_token(token).await.unwrap()
}

fn in_future() -> String {
    (k8s_openapi::jiff::Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_hours(1))
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

fn in_past() -> String {
    (k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_hours(1))
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

#[tokio::test]
async fn bootstrap_tokens_authenticate_as_their_bootstrap_user() {
    let server = TestApiServer::start_with(|o| o.enable_bootstrap_token_auth = true)
        .await
        .unwrap();
    let admin = server.client.clone();

    // The rejected ones first: once the valid token (created last) authenticates, the
    // watch cache has every one of them.
    create_token_secret(
        &admin,
        "exp123",
        json!({"token-id": "exp123", "token-secret": "0123456789abcdef",
               "usage-bootstrap-authentication": "true", "expiration": in_past()}),
    )
    .await;
    create_token_secret(
        &admin,
        "nouse1",
        json!({"token-id": "nouse1", "token-secret": "0123456789abcdef",
               "usage-bootstrap-signing": "true"}),
    )
    .await;
    create_token_secret(
        &admin,
        "abcdef",
        json!({"token-id": "abcdef", "token-secret": "0123456789abcdef",
               "usage-bootstrap-authentication": "true",
               "usage-bootstrap-signing": "true",
               "expiration": in_future(),
               "auth-extra-groups": EXTRA_GROUP}),
    )
    .await;

    let good = "abcdef.0123456789abcdef";
    assert!(
        ferrokube_testing::eventually(|| async { whoami(&server, good).await.0 == 201 }).await,
        "the bootstrap token never authenticated"
    );
    let (code, review) = whoami(&server, good).await;
    assert_eq!(code, 201, "{review}");
    let user = &review["status"]["userInfo"];
    assert_eq!(user["username"], "system:bootstrap:abcdef");
    assert_eq!(
        user["groups"],
        json!(["system:bootstrappers", EXTRA_GROUP, "system:authenticated"])
    );

    for (token, why) in [
        ("abcdef.0123456789abcdee", "wrong secret part"),
        ("exp123.0123456789abcdef", "expired"),
        (
            "nouse1.0123456789abcdef",
            "usage-bootstrap-authentication absent",
        ),
        ("zzzzzz.0123456789abcdef", "no such Secret"),
    ] {
        let (code, body) = whoami(&server, token).await;
        assert_eq!(code, 401, "{why}: {body}");
        assert_eq!(body["reason"], "Unauthorized", "{why}");
    }

    // Deleted: the token stops working.
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), "kube-system");
    secrets
        .delete("bootstrap-token-abcdef", &DeleteParams::default())
        .await
        .unwrap();
    assert!(
        ferrokube_testing::eventually(|| async { whoami(&server, good).await.0 == 401 }).await,
        "the token still authenticates after its Secret was deleted"
    );
    server.stop().await;
}

#[tokio::test]
async fn without_the_option_bootstrap_tokens_are_unauthorized() {
    let server = TestApiServer::start().await.unwrap();
    let admin = server.client.clone();
    create_token_secret(
        &admin,
        "abcdef",
        json!({"token-id": "abcdef", "token-secret": "0123456789abcdef",
               "usage-bootstrap-authentication": "true"}),
    )
    .await;
    // The Secret is there (and soon in the watch cache), yet the token is refused.
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), "kube-system");
    secrets.get("bootstrap-token-abcdef").await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let (code, body) = whoami(&server, "abcdef.0123456789abcdef").await;
    assert_eq!(code, 401, "{body}");
    server.stop().await;
}
