//! Delegated authentication and authorization against a real apiserver: health paths
//! need nothing, anonymous requests are refused with upstream's message, a bad token is a
//! 401, a service account token is reviewed and its user authorized by RBAC, and the
//! HTTPS endpoint answers with the gate's decisions.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ferrokube_client::delegated::{CacheTtl, Gate, User};
use ferrokube_client::serving::{Respond, SecureServingOptions, serve};
use ferrokube_testing::TestApiServer;
use http_body_util::BodyExt;
use hyper::body::Bytes;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, PostParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;

async fn token_of(srv: &TestApiServer, sa: &str) -> String {
    let sas: Api<ServiceAccount> = Api::namespaced(srv.client.clone(), "default");
    let account: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": sa}})).unwrap();
    sas.create(&PostParams::default(), &account).await.unwrap();
    let request: TokenRequest = serde_json::from_value(json!({"spec": {"audiences": []}})).unwrap();
    sas.create_token_request(sa, &PostParams::default(), &request)
        .await
        .unwrap()
        .status
        .unwrap()
        .token
}

/// GET `path` over HTTPS (any server certificate), with an optional bearer token.
async fn get(addr: SocketAddr, path: &str, token: Option<&str>) -> (u16, String) {
    let cfg = ferrokube_pki::insecure::client_config_builder().with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
    for _ in 0..50 {
        let Ok(tcp) = tokio::net::TcpStream::connect(addr).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
        let tls = connector.connect(name, tcp).await.unwrap();
        let (mut send, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
                .await
                .unwrap();
        tokio::spawn(conn);
        let mut req = hyper::Request::get(path).header("host", "localhost");
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let resp = send
            .send_request(req.body(http_body_util::Empty::<Bytes>::new()).unwrap())
            .await
            .unwrap();
        let code = resp.status().as_u16();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        return (code, String::from_utf8_lossy(&body).into_owned());
    }
    panic!("the endpoint at {addr} never accepted a connection");
}

#[tokio::test]
async fn delegated_authentication_and_authorization() {
    let srv = TestApiServer::start().await.unwrap();
    // Denials are not cached, so the binding below takes effect at once.
    let ttl = CacheTtl {
        denied: Duration::ZERO,
        ..CacheTtl::default()
    };
    let gate = Arc::new(Gate::new(
        vec!["/healthz".into(), "/readyz*".into()],
        Some(srv.client.clone()),
        Some(srv.client.clone()),
        ttl,
    ));

    assert_eq!(gate.check("get", "/healthz", None, None).await, Ok(()));
    assert_eq!(gate.check("get", "/readyz/ping", None, None).await, Ok(()));
    let anonymous = gate.check("get", "/metrics", None, None).await.unwrap_err();
    assert_eq!(anonymous.code, 403);
    assert_eq!(
        anonymous.message,
        r#"forbidden: User "system:anonymous" cannot get path "/metrics""#
    );
    let bad = gate
        .check("get", "/metrics", Some("not-a-token"), None)
        .await
        .unwrap_err();
    assert_eq!((bad.code, bad.reason.as_str()), (401, "Unauthorized"));

    let token = token_of(&srv, "prom").await;
    let denied = gate
        .check("get", "/metrics", Some(&token), None)
        .await
        .unwrap_err();
    assert_eq!(denied.code, 403);
    assert!(
        denied.message.starts_with(
            r#"forbidden: User "system:serviceaccount:default:prom" cannot get path "/metrics""#
        ),
        "{}",
        denied.message
    );
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "prom-monitoring"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
            "name": "system:monitoring"},
        "subjects": [{"kind": "ServiceAccount", "name": "prom", "namespace": "default"}]
    }))
    .unwrap();
    Api::<ClusterRoleBinding>::all(srv.client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    assert_eq!(
        gate.check("get", "/metrics", Some(&token), None).await,
        Ok(())
    );
    // Allowed is about the verb too.
    assert_eq!(
        gate.check("post", "/metrics", Some(&token), None)
            .await
            .unwrap_err()
            .code,
        403
    );
    // A verified client certificate in system:masters needs no review.
    let admin = User {
        name: "someone".into(),
        uid: String::new(),
        groups: vec!["system:masters".into()],
        extra: Default::default(),
    };
    assert_eq!(
        gate.check("get", "/metrics", None, Some(admin)).await,
        Ok(())
    );

    // Through the HTTPS endpoint.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let tls = SecureServingOptions::default()
        .tls_config("test", addr.ip(), None)
        .unwrap();
    let respond: Respond = Arc::new(|path| match path {
        "/healthz" => (200, "ok".into()),
        "/metrics" => (200, "up 1\n".into()),
        _ => (404, "404 page not found".into()),
    });
    let cancel = CancellationToken::new();
    let server = tokio::spawn(serve(addr, tls, respond, Some(gate), cancel.clone()));
    assert_eq!(get(addr, "/healthz", None).await, (200, "ok".into()));
    assert_eq!(
        get(addr, "/metrics", Some(&token)).await,
        (200, "up 1\n".into())
    );
    let (code, body) = get(addr, "/metrics", None).await;
    assert_eq!(code, 403);
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "Forbidden");
    assert_eq!(get(addr, "/metrics", Some("bad")).await.0, 401);
    cancel.cancel();
    server.await.unwrap().unwrap();
    srv.stop().await;
}
