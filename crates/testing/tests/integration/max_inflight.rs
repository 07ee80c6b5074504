//! `--max-requests-inflight` and `--max-mutating-requests-inflight`: without priority
//! and fairness, the max-in-flight filter refuses a mutating request beyond the limit
//! with 429 while reads and `system:masters` go on; with it, the two limits' sum is the
//! concurrency the priority levels share.
//!
//! A create is held in flight by a validating webhook the test serves, which answers
//! only when the test releases it.

use std::time::Duration;

use ferrokube_testing::{TestApiServer, WebhookServer};
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

use crate::support::hold;

const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";
/// Bound of every wait of the tests (the webhook's own timeout is 10 s).
const WAIT: Duration = Duration::from_secs(15);

/// A webhook server that reports each review on the channel and answers it (allowed)
/// once the release is set.
async fn holding_webhook() -> (
    WebhookServer,
    mpsc::UnboundedReceiver<()>,
    watch::Sender<bool>,
) {
    let (arrived_tx, arrived_rx) = mpsc::unbounded_channel();
    let (release_tx, release_rx) = watch::channel(false);
    let hooks = WebhookServer::start(move |_path: String, review: Value| {
        let arrived = arrived_tx.clone();
        let mut release = release_rx.clone();
        async move {
            let _ = arrived.send(());
            let _ = tokio::time::timeout(WAIT, release.wait_for(|go| *go)).await;
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "response": {"uid": review["request"]["uid"], "allowed": true}})
        }
    })
    .await
    .unwrap();
    (hooks, arrived_rx, release_tx)
}

async fn send(client: &kube::Client, method: &str, path: &str, body: Value) -> (u16, Value) {
    let (code, _, v) = TestApiServer::send_json(client, method, path, &body)
        .await
        .unwrap();
    (code, v)
}

/// A client of `user` on a connection of its own, without kube-rs's retries of a 429.
async fn client_of(srv: &TestApiServer, user: &str) -> kube::Client {
    let mut config = srv
        .config_as(user, &["system:authenticated"])
        .await
        .unwrap();
    config.default_retry = false;
    kube::Client::try_from(config).unwrap()
}

/// A configmap create: the status, the headers and the decoded body.
async fn create(client: &kube::Client, name: &str, hold: bool) -> (u16, http::HeaderMap, Value) {
    let mut body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
    if hold {
        body["metadata"]["labels"] = json!({"hold": "yes"});
    }
    let (code, headers, bytes) = tokio::time::timeout(
        WAIT,
        TestApiServer::raw(
            client,
            "POST",
            CONFIGMAPS,
            &[("content-type", "application/json")],
            serde_json::to_vec(&body).unwrap(),
        ),
    )
    .await
    .expect("the create is answered in time")
    .unwrap();
    (
        code,
        headers,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// Starts a held create of `name` by `client` and waits until it waits on the webhook.
async fn hold_create(
    client: &kube::Client,
    name: &str,
    arrived: &mut mpsc::UnboundedReceiver<()>,
) -> tokio::task::JoinHandle<(u16, http::HeaderMap, Value)> {
    let held = tokio::spawn({
        let (client, name) = (client.clone(), name.to_owned());
        async move { create(&client, &name, true).await }
    });
    tokio::time::timeout(WAIT, arrived.recv())
        .await
        .expect("the held create reaches the webhook")
        .expect("the webhook server runs");
    held
}

fn assert_too_many_requests(code: u16, headers: &http::HeaderMap, body: &Value) {
    assert_eq!(code, 429, "{body}");
    assert_eq!(body["kind"], "Status", "{body}");
    assert_eq!(body["reason"], "TooManyRequests", "{body}");
    assert_eq!(
        body["message"], "Too many requests, please try again later.",
        "{body}"
    );
    assert_eq!(
        headers.get("retry-after").and_then(|v| v.to_str().ok()),
        Some("1")
    );
}

/// `apiserver_current_inflight_requests` of `kind` as /metrics has it now.
async fn inflight_metric(admin: &kube::Client, kind: &str) -> Option<i64> {
    let (code, _, bytes) = TestApiServer::raw(admin, "GET", "/metrics", &[], vec![])
        .await
        .ok()?;
    let prefix = format!("apiserver_current_inflight_requests{{request_kind=\"{kind}\"}} ");
    (code == 200)
        .then(|| String::from_utf8_lossy(&bytes).into_owned())?
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()).map(str::to_owned))?
        .parse()
        .ok()
}

#[tokio::test]
async fn without_priority_and_fairness_a_mutating_request_beyond_the_limit_is_refused() {
    let srv = TestApiServer::start_with(|o| {
        o.enable_priority_and_fairness = false;
        o.max_mutating_requests_inflight = 1;
    })
    .await
    .unwrap();
    let admin = srv.client.clone();
    let (hooks, mut arrived, release) = holding_webhook().await;
    hold::hold_labelled_configmap_creates(&admin, &hooks, "limited-user").await;
    let (first, second) = (
        client_of(&srv, "limited-user").await,
        client_of(&srv, "limited-user").await,
    );

    // The only mutating slot is taken by a create waiting on the webhook.
    let held = hold_create(&first, "held", &mut arrived).await;

    // Another mutating request is refused at once, as upstream words it...
    let (code, headers, body) = create(&second, "refused", false).await;
    assert_too_many_requests(code, &headers, &body);
    // ...a delete as well (every verb but get, list and watch is mutating),
    let (code, headers, bytes) =
        TestApiServer::raw(&second, "DELETE", &format!("{CONFIGMAPS}/x"), &[], vec![])
            .await
            .unwrap();
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    assert_too_many_requests(code, &headers, &body);
    // (no priority-and-fairness headers: that filter is off)
    assert!(!headers.contains_key("X-Kubernetes-PF-PriorityLevel-UID"));
    // ...while reads have their own limit,
    let (code, v) = send(&second, "GET", CONFIGMAPS, Value::Null).await;
    assert_eq!(code, 200, "{v}");
    // ...and system:masters is never refused.
    let (code, _, v) = create(&admin, "by-a-master", false).await;
    assert_eq!(code, 201, "{v}");

    // The held create shows in the in-flight gauge (the high mark of the last whole
    // second).
    assert!(
        ferrokube_testing::eventually(|| async {
            inflight_metric(&admin, "mutating").await >= Some(1)
        })
        .await,
        "apiserver_current_inflight_requests{{request_kind=\"mutating\"}} stayed below 1"
    );
    assert!(inflight_metric(&admin, "readOnly").await.is_some());

    // Once the held create is done, its slot is free again.
    release.send_replace(true);
    let (code, _, v) = tokio::time::timeout(WAIT, held).await.unwrap().unwrap();
    assert_eq!(code, 201, "{v}");
    let (code, _, v) = create(&second, "after", false).await;
    assert_eq!(code, 201, "{v}");
}

/// Creates a priority level of one share that rejects rather than queues and neither
/// lends nor borrows seats, and a flow schema sending everything of `user` to it.
async fn one_share_level(admin: &kube::Client, user: &str) -> String {
    let (code, level) = send(
        admin,
        "POST",
        "/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations",
        json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
            "metadata": {"name": "fk-one-share"},
            "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 1,
                "lendablePercent": 0, "borrowingLimitPercent": 0,
                "limitResponse": {"type": "Reject"}}}}),
    )
    .await;
    assert_eq!(code, 201, "{level}");
    let (code, v) = send(
        admin,
        "POST",
        "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas",
        json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
            "metadata": {"name": "fk-one-share"},
            "spec": {"matchingPrecedence": 100, "priorityLevelConfiguration": {"name": "fk-one-share"},
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [{"subjects": [{"kind": "User", "user": {"name": user}}],
                    "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                        "namespaces": ["*"], "clusterScope": true}]}]}}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    level["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// With one create of a one-share level held: the code of a second create of the same
/// level, and the level the answer names.
async fn second_create_beside_a_held_one(srv: &TestApiServer) -> (u16, Option<String>, Value) {
    let admin = srv.client.clone();
    let (hooks, mut arrived, release) = holding_webhook().await;
    hold::hold_labelled_configmap_creates(&admin, &hooks, "one-share-user").await;
    let level_uid = one_share_level(&admin, "one-share-user").await;
    let (first, second) = (
        client_of(srv, "one-share-user").await,
        client_of(srv, "one-share-user").await,
    );
    let held = hold_create(&first, "held", &mut arrived).await;
    let (code, headers, body) = create(&second, "beside", false).await;
    let level = headers
        .get("X-Kubernetes-PF-PriorityLevel-UID")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    assert_eq!(level.as_deref(), Some(level_uid.as_str()), "{body}");
    release.send_replace(true);
    let (code_held, _, v) = tokio::time::timeout(WAIT, held).await.unwrap().unwrap();
    assert_eq!(code_held, 201, "{v}");
    (code, level, body)
}

#[tokio::test]
async fn with_priority_and_fairness_the_levels_share_the_sum_of_the_limits() {
    // 1 + 1: the one-share level's nominal limit is ceil(2 * 1 / all shares) = 1 seat,
    // so a second create beside the held one is refused.
    let srv = TestApiServer::start_with(|o| {
        o.max_requests_inflight = 1;
        o.max_mutating_requests_inflight = 1;
    })
    .await
    .unwrap();
    let (code, _, body) = second_create_beside_a_held_one(&srv).await;
    assert_eq!(code, 429, "{body}");
    assert_eq!(body["reason"], "TooManyRequests", "{body}");
    srv.stop().await;

    // The defaults, 400 + 200, give the same level more than one seat.
    let srv = TestApiServer::start().await.unwrap();
    let (code, _, body) = second_create_beside_a_held_one(&srv).await;
    assert_eq!(code, 201, "{body}");
    srv.stop().await;
}
