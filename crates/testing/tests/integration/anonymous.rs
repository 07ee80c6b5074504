//! `--anonymous-auth`: without credentials a request is `system:anonymous`, which RBAC
//! lets see only health and version (system:public-info-viewer); with it off, 401.
//! An AuthenticationConfiguration's `anonymous` may limit it to some paths.

use std::path::PathBuf;
use std::sync::OnceLock;

use ferrokube_apiserver::Options;
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
    let server = TestApiServer::start_with(|o| o.anonymous_auth = Some(false))
        .await
        .unwrap();
    let anonymous = server.anonymous_client().await.unwrap();
    for path in ["/healthz", "/version", "/api"] {
        assert_eq!(get(&anonymous, path).await, 401, "{path}");
    }
    assert_eq!(get(&server.client, "/healthz").await, 200);
    server.stop().await;
}

/// The `--authentication-config` file of the conditions test.
static AUTHENTICATION_CONFIG: OnceLock<PathBuf> = OnceLock::new();

fn with_authentication_config(o: &mut Options) {
    o.authentication_config_file = AUTHENTICATION_CONFIG.get().cloned();
}

#[tokio::test]
async fn anonymous_conditions_allow_anonymous_requests_on_their_paths_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("authn.yaml");
    std::fs::write(
        &path,
        "apiVersion: apiserver.config.k8s.io/v1beta1\n\
         kind: AuthenticationConfiguration\n\
         anonymous:\n  enabled: true\n  conditions: [{path: /livez}, {path: /readyz}]\n",
    )
    .unwrap();
    AUTHENTICATION_CONFIG.set(path).unwrap();
    let server = TestApiServer::start_with(with_authentication_config)
        .await
        .unwrap();
    let anonymous = server.anonymous_client().await.unwrap();
    for path in ["/livez", "/readyz"] {
        assert_eq!(get(&anonymous, path).await, 200, "{path}");
    }
    // Paths that RBAC would let anonymous see, but that the conditions leave out.
    for path in ["/healthz", "/version", "/livez/ping", "/api"] {
        assert_eq!(get(&anonymous, path).await, 401, "{path}");
    }
    assert_eq!(get(&server.client, "/healthz").await, 200);
    server.stop().await;

    // The flag and the file's `anonymous` exclude each other, as upstream.
    let err = TestApiServer::start_with(|o| {
        with_authentication_config(o);
        o.anonymous_auth = Some(true);
    })
    .await
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("--anonynous-auth flag cannot be set when anonymous field is configured"),
        "{err}"
    );
}
