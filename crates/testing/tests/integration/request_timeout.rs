//! `--request-timeout`, `?timeout=` and `--min-request-timeout`: a request that is not
//! long-running is answered 504 once its time is up, a malformed `?timeout=` is a 400,
//! and a watch without `timeoutSeconds` ends after a time drawn above the minimum.

use std::time::{Duration, Instant};

use ferrokube_testing::{TestApiServer, webhook_server::WebhookServer};
use serde_json::{Value, json};

/// How long the webhook keeps a create waiting: longer than the timeouts tested.
const WEBHOOK_DELAY: Duration = Duration::from_secs(4);

fn configmap(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}})
}

#[tokio::test]
async fn slow_requests_are_answered_504_and_bad_timeouts_400() {
    let server = TestApiServer::start_with(|o| o.request_timeout = Duration::from_secs(2))
        .await
        .unwrap();
    let c = server.client_without_retries().await.unwrap();
    let _hook = WebhookServer::holding_configmap_creates(&c, WEBHOOK_DELAY)
        .await
        .unwrap();

    // --request-timeout (2 s) ends a create the webhook holds for 4 s.
    let path = "/api/v1/namespaces/default/configmaps";
    let (code, _, v) = TestApiServer::send_json(&c, "POST", path, &configmap("by-server"))
        .await
        .unwrap();
    assert_eq!(code, 504, "{v}");
    assert_eq!(v["kind"], "Status");
    assert_eq!(v["reason"], "Timeout");
    assert_eq!(
        v["message"],
        "Timeout: request did not complete within requested timeout - context deadline exceeded"
    );

    // A shorter ?timeout= wins; a longer one is held to the server's.
    let started = Instant::now();
    let (code, _, v) = TestApiServer::send_json(
        &c,
        "POST",
        &format!("{path}?timeout=500ms"),
        &configmap("by-client"),
    )
    .await
    .unwrap();
    assert_eq!(code, 504, "{v}");
    assert!(
        started.elapsed() < WEBHOOK_DELAY,
        "the create waited for the webhook"
    );
    let (code, _, v) = TestApiServer::send_json(
        &c,
        "POST",
        &format!("{path}?timeout=1h"),
        &configmap("held"),
    )
    .await
    .unwrap();
    assert_eq!(code, 504, "{v}");

    // A malformed timeout is the client's error; requests without a webhook are served.
    let (code, _, v) =
        TestApiServer::send_json(&c, "GET", &format!("{path}?timeout=soon"), &Value::Null)
            .await
            .unwrap();
    assert_eq!(code, 400, "{v}");
    assert_eq!(
        v["message"],
        "invalid timeout specified in the request URL - time: invalid duration \"soon\""
    );
    let (code, _, v) =
        TestApiServer::send_json(&c, "GET", &format!("{path}?timeout=1s"), &Value::Null)
            .await
            .unwrap();
    assert_eq!(code, 200, "{v}");
    server.stop().await;
}

#[tokio::test]
async fn a_watch_without_timeout_seconds_ends_after_the_minimum_and_before_twice_it() {
    let server = TestApiServer::start_with(|o| o.min_request_timeout = Duration::from_secs(1))
        .await
        .unwrap();
    let started = Instant::now();
    // The whole stream, read until the server ends it (bounded by the test's own limit).
    let (code, _, body) = tokio::time::timeout(
        Duration::from_secs(30),
        TestApiServer::raw(
            &server.client,
            "GET",
            "/api/v1/namespaces/default/configmaps?watch=true",
            &[],
            Vec::new(),
        ),
    )
    .await
    .expect("the watch did not end")
    .unwrap();
    let lasted = started.elapsed();
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    assert!(lasted >= Duration::from_secs(1), "ended after {lasted:?}");
    server.stop().await;
}
