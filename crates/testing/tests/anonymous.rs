//! `--anonymous-auth`: without credentials a request is `system:anonymous`, which RBAC
//! lets see only health and version (system:public-info-viewer); with it off, 401.

use ferrokube_testing::TestApiServer;

async fn get(client: &kube::Client, path: &str) -> u16 {
    TestApiServer::raw(client, "GET", path, &[], vec![])
        .await
        .unwrap()
        .0
}

#[tokio::test]
async fn anonymous_gets_public_info_only() {
    let server = TestApiServer::start().await.unwrap();
    let anonymous = server.anonymous_client().await.unwrap();
    for path in ["/healthz", "/livez", "/readyz", "/version"] {
        assert_eq!(get(&anonymous, path).await, 200, "{path}");
    }
    for path in [
        "/api",
        "/apis",
        "/api/v1/namespaces/default/pods",
        "/openapi/v2",
        "/metrics",
    ] {
        assert_eq!(get(&anonymous, path).await, 403, "{path}");
    }
    // An invalid credential is never downgraded to anonymous.
    let bad = server.client_with_token("not-a-token").await.unwrap();
    assert_eq!(get(&bad, "/healthz").await, 401);
    // Authenticated users get discovery too (system:discovery).
    let alice = server.client_as("alice", &[]).await.unwrap();
    assert_eq!(get(&alice, "/api").await, 200);
    assert_eq!(get(&alice, "/api/v1/namespaces/default/pods").await, 403);
    server.stop().await;
}

#[tokio::test]
async fn without_anonymous_auth_everything_needs_credentials() {
    let server = TestApiServer::start_with(|o| o.anonymous_auth = false)
        .await
        .unwrap();
    let anonymous = server.anonymous_client().await.unwrap();
    for path in ["/healthz", "/version", "/api"] {
        assert_eq!(get(&anonymous, path).await, 401, "{path}");
    }
    assert_eq!(get(&server.client, "/healthz").await, 200);
    server.stop().await;
}
