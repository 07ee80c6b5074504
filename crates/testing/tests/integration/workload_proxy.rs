//! `pods/proxy` and `services/proxy` through kube-rs: the apiserver forwards to an HTTP
//! server this test runs on loopback, standing in for the pod (whose status says its
//! IP is 127.0.0.1).

use std::convert::Infallible;

use bytes::Bytes;
use ferrokube_testing::TestApiServer;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::websocket;
use websocket::{websocket_echo, websocket_round_trip};

/// Answers `<method> <path?query> auth=<whether an Authorization header came> <body>`;
/// a WebSocket upgrade to a path under `/ws` is accepted (with the first subprotocol
/// offered) and echoes each message as `<path>: <message>`.
async fn workload() -> Result<u16, Box<dyn std::error::Error>> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(|req: hyper::Request<Incoming>| async move {
                    if req.uri().path().starts_with("/ws") {
                        return Ok::<_, Infallible>(websocket_echo(req));
                    }
                    let head = format!(
                        "{} {} auth={}",
                        req.method(),
                        req.uri(),
                        req.headers().contains_key("authorization")
                    );
                    let body = req.into_body().collect().await.map(|b| b.to_bytes());
                    let body = String::from_utf8_lossy(&body.unwrap_or_default()).to_string();
                    Ok::<_, Infallible>(
                        hyper::Response::builder()
                            .header("x-workload", "yes")
                            .body(Full::new(Bytes::from(format!("{head} {body}"))))
                            .unwrap(),
                    )
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), svc)
                    .with_upgrades()
                    .await;
            });
        }
    });
    Ok(port)
}

fn code(e: &kube::Error) -> u16 {
    match e {
        kube::Error::Api(s) => s.code,
        other => panic!("not an API error: {other:?}"),
    }
}

async fn get(c: &kube::Client, path: &str) -> Result<String, kube::Error> {
    c.request_text(http::Request::get(path).body(vec![]).unwrap())
        .await
}

#[tokio::test]
async fn pods_and_services_are_proxied() -> Result<(), Box<dyn std::error::Error>> {
    let port = workload().await?;
    let srv = TestApiServer::start().await?;
    // kube-rs retries a 503 with back-off by default; the 503s here are the answers.
    let mut cfg = srv.kube_config().await?;
    cfg.default_retry = false;
    let c = kube::Client::try_from(cfg)?;
    let pp = PostParams::default();
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    pods.create(
        &pp,
        &serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"containers": [
            {"name": "c", "image": "busybox", "ports": [{"containerPort": port}]}]}}))?,
    )
    .await?;
    pods.patch_status(
        "p",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running", "podIP": "127.0.0.1",
                                        "podIPs": [{"ip": "127.0.0.1"}]}})),
    )
    .await?;

    // The first container port, the path and query after /proxy; no credentials passed.
    let out = get(&c, "/api/v1/namespaces/default/pods/p/proxy/hello?x=1").await?;
    assert_eq!(out, "GET /hello?x=1 auth=false ");
    // A POST with a body, the port in the name.
    let out = c
        .request_text(
            http::Request::post(format!(
                "/api/v1/namespaces/default/pods/p:{port}/proxy/echo"
            ))
            .body(b"payload".to_vec())
            .unwrap(),
        )
        .await?;
    assert_eq!(out, "POST /echo auth=false payload");
    let err = get(&c, "/api/v1/namespaces/default/pods/missing/proxy/")
        .await
        .unwrap_err();
    assert_eq!(code(&err), 404);
    let err = get(&c, "/api/v1/namespaces/default/pods/ftp:p:21/proxy/")
        .await
        .unwrap_err();
    assert_eq!(code(&err), 400);

    // A Service: its port by number or name, to an endpoint that is the pod.
    let services: Api<Service> = Api::namespaced(c.clone(), "default");
    services
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": {
                "ports": [{"name": "http", "port": 80, "targetPort": port}]}}))?,
        )
        .await?;
    let endpoints: Api<Endpoints> = Api::namespaced(c.clone(), "default");
    endpoints
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": "web"}, "subsets": [{
                "addresses": [{"ip": "127.0.0.1", "targetRef": {"kind": "Pod", "name": "p",
                                                                 "namespace": "default"}}],
                "ports": [{"name": "http", "port": port}]}]}))?,
        )
        .await?;
    for name in ["web:80", "web:http", "http:web:80"] {
        let out = get(
            &c,
            &format!("/api/v1/namespaces/default/services/{name}/proxy/s"),
        )
        .await?;
        assert_eq!(out, "GET /s auth=false ", "{name}");
    }
    let err = get(&c, "/api/v1/namespaces/default/services/web:81/proxy/")
        .await
        .unwrap_err();
    assert_eq!(code(&err), 503);

    // An address may be any of the pod's IPs (a dual-stack pod's second one here; the
    // first is never dialled).
    pods.create(
        &pp,
        &serde_json::from_value(
            json!({"metadata": {"name": "dual"}, "spec": {"containers": [
            {"name": "c", "image": "busybox"}]}}),
        )?,
    )
    .await?;
    pods.patch_status(
        "dual",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running", "podIP": "fd00::9",
            "podIPs": [{"ip": "fd00::9"}, {"ip": "127.0.0.1"}]}})),
    )
    .await?;
    services
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": "dual"}, "spec": {
                "ports": [{"port": 80, "targetPort": port}]}}))?,
        )
        .await?;
    endpoints
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": "dual"}, "subsets": [{
                "addresses": [{"ip": "127.0.0.1", "targetRef": {"kind": "Pod", "name": "dual",
                                                                 "namespace": "default"}}],
                "ports": [{"port": port}]}]}))?,
        )
        .await?;
    let out = get(&c, "/api/v1/namespaces/default/services/dual:80/proxy/d").await?;
    assert_eq!(out, "GET /d auth=false ");

    // An address that is not a pod's is never dialled.
    endpoints
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": "elsewhere"}, "subsets": [{
                "addresses": [{"ip": "127.0.0.1"}], "ports": [{"port": port}]}]}))?,
        )
        .await?;
    services
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": "elsewhere"}, "spec": {
                "ports": [{"port": 80, "targetPort": port}]}}))?,
        )
        .await?;
    let err = get(
        &c,
        "/api/v1/namespaces/default/services/http:elsewhere:/proxy/",
    )
    .await
    .unwrap_err();
    assert_eq!(code(&err), 503);
    // Upstream names the service as the path gave it.
    let kube::Error::Api(status) = &err else {
        unreachable!()
    };
    assert_eq!(
        status.message,
        r#"no endpoints available for service "http:elsewhere:""#
    );

    // Connection upgrades: a WebSocket through pods/proxy and services/proxy reaches
    // the workload, and its messages come back.
    let out = websocket_round_trip(
        &c,
        "/api/v1/namespaces/default/pods/p/proxy/ws/pod",
        "hello",
    )
    .await?;
    assert_eq!(out, "/ws/pod: hello");
    let out = websocket_round_trip(
        &c,
        "/api/v1/namespaces/default/services/web:http/proxy/ws/svc?x=1",
        "there",
    )
    .await?;
    assert_eq!(out, "/ws/svc: there");
    // A target that does not switch protocols answers as it is.
    let err = c
        .connect(http::Request::get("/api/v1/namespaces/default/pods/p/proxy/plain").body(vec![])?)
        .await
        .err()
        .ok_or("an upgrade the workload refused succeeded")?;
    assert!(
        matches!(
            &err,
            kube::Error::UpgradeConnection(
                kube::client::UpgradeConnectionError::ProtocolSwitch(s)
            ) if s.as_u16() == 200
        ),
        "{err:?}"
    );
    Ok(())
}
