//! API Priority and Fairness end to end: the bootstrap configuration at start, the
//! `X-Kubernetes-PF-*` response headers naming the schema and level a request was
//! classified into, a level with one seat that queues one request and refuses the next
//! with 429, and the FlowSchemas' `Dangling` condition.

use std::time::Duration;

use ferrokube_testing::{TestApiServer, WebhookServer};
use serde_json::{Value, json};

#[path = "support/hold.rs"]
mod hold;

const FS: &str = "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas";
const PL: &str = "/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations";
/// How long the webhook holds each create of the slow user.
const HOLD: Duration = Duration::from_secs(2);

async fn send(client: &kube::Client, method: &str, path: &str, body: Value) -> (u16, Value) {
    let (code, _, v) = TestApiServer::send_json(client, method, path, &body)
        .await
        .unwrap();
    (code, v)
}

async fn get(client: &kube::Client, path: &str) -> Value {
    let (code, v) = send(client, "GET", path, Value::Null).await;
    assert_eq!(code, 200, "GET {path}: {v}");
    v
}

/// The status, the flow-control headers and the body of a configmap create by `client`.
async fn create_configmap(client: &kube::Client, name: &str) -> (u16, Option<String>, Value) {
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"hold": "yes"}}});
    let (code, headers, bytes) = TestApiServer::raw(
        client,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &[("content-type", "application/json")],
        serde_json::to_vec(&body).unwrap(),
    )
    .await
    .unwrap();
    let level = headers
        .get("X-Kubernetes-PF-PriorityLevel-UID")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    (
        code,
        level,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn requests_are_classified_queued_and_refused_by_their_priority_level() {
    let srv = TestApiServer::start().await.unwrap();
    let admin = srv.client.clone();

    // Upstream's bootstrap configuration is there at start.
    for name in [
        "exempt",
        "catch-all",
        "global-default",
        "system-nodes",
        "probes",
    ] {
        get(&admin, &format!("{FS}/{name}")).await;
    }
    for name in [
        "exempt",
        "catch-all",
        "global-default",
        "workload-low",
        "system",
    ] {
        get(&admin, &format!("{PL}/{name}")).await;
    }
    // The admin (system:masters) is exempt, and the response says so.
    let exempt_fs = get(&admin, &format!("{FS}/exempt")).await["metadata"]["uid"].clone();
    let exempt_pl = get(&admin, &format!("{PL}/exempt")).await["metadata"]["uid"].clone();
    let (_, headers, _) = TestApiServer::raw(&admin, "GET", "/api/v1/namespaces", &[], vec![])
        .await
        .unwrap();
    assert_eq!(
        headers["X-Kubernetes-PF-FlowSchema-UID"].to_str().unwrap(),
        exempt_fs.as_str().unwrap()
    );
    assert_eq!(
        headers["X-Kubernetes-PF-PriorityLevel-UID"]
            .to_str()
            .unwrap(),
        exempt_pl.as_str().unwrap()
    );

    // A level with a single seat and a single queue of one, for one user.
    let (code, level) = send(
        &admin,
        "POST",
        PL,
        json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
            "metadata": {"name": "fk-one-seat"},
            "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 0,
                "limitResponse": {"type": "Queue",
                    "queuing": {"queues": 1, "handSize": 1, "queueLengthLimit": 1}}}}}),
    )
    .await;
    assert_eq!(code, 201, "{level}");
    let level_uid = level["metadata"]["uid"].as_str().unwrap().to_owned();
    let (code, v) = send(
        &admin,
        "POST",
        FS,
        json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
            "metadata": {"name": "fk-slow-user"},
            "spec": {"matchingPrecedence": 100, "priorityLevelConfiguration": {"name": "fk-one-seat"},
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [{"subjects": [{"kind": "User", "user": {"name": "slow-user"}}],
                    "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                        "namespaces": ["*"], "clusterScope": true}]}]}}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    let (code, v) = send(
        &admin,
        "POST",
        FS,
        json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
            "metadata": {"name": "fk-dangling"},
            "spec": {"matchingPrecedence": 200, "priorityLevelConfiguration": {"name": "fk-missing"},
                "rules": [{"subjects": [{"kind": "User", "user": {"name": "nobody"}}],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}]}}),
    )
    .await;
    assert_eq!(code, 201, "{v}");

    // The Dangling conditions: found for one, not for the other.
    let dangling = |fs: Value| {
        fs["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Dangling").cloned())
    };
    let mut conditions = (None, None);
    for _ in 0..100 {
        conditions = (
            dangling(get(&admin, &format!("{FS}/fk-slow-user")).await),
            dangling(get(&admin, &format!("{FS}/fk-dangling")).await),
        );
        if conditions.0.is_some() && conditions.1.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (found, missing) = (conditions.0.unwrap(), conditions.1.unwrap());
    assert_eq!(
        (&found["status"], &found["reason"]),
        (&json!("False"), &json!("Found"))
    );
    assert_eq!(
        (&missing["status"], &missing["reason"]),
        (&json!("True"), &json!("NotFound"))
    );
    assert_eq!(
        missing["message"],
        "This FlowSchema references the PriorityLevelConfiguration object named \"fk-missing\" but there is no such object"
    );

    // The slow user's creates wait on a webhook, each holding the level's only seat.
    let hooks = WebhookServer::start(|_path: String, review: Value| async move {
        tokio::time::sleep(HOLD).await;
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"uid": review["request"]["uid"], "allowed": true}})
    })
    .await
    .unwrap();
    hold::hold_labelled_configmap_creates(&admin, &hooks, "slow-user").await;
    // A client (and connection) per request, so that nothing on the client's side
    // orders them, and without kube-rs's retries of a 429.
    let mut clients = Vec::new();
    for _ in 0..3 {
        let mut config = srv
            .config_as("slow-user", &["system:authenticated"])
            .await
            .unwrap();
        config.default_retry = false;
        clients.push(kube::Client::try_from(config).unwrap());
    }
    // Three at once: one runs, one waits in the queue, the third finds it full.
    let started = std::time::Instant::now();
    let results = futures::future::join_all(
        clients
            .iter()
            .zip(["held-1", "held-2", "held-3"])
            .map(|(client, name)| create_configmap(client, name)),
    )
    .await;
    let elapsed = started.elapsed();
    let mut codes: Vec<u16> = results.iter().map(|r| r.0).collect();
    codes.sort_unstable();
    assert_eq!(codes, [201, 201, 429], "{results:?}");
    for (code, level, body) in &results {
        assert_eq!(level.as_deref(), Some(level_uid.as_str()), "{code} {body}");
        if *code == 429 {
            assert_eq!(body["reason"], "TooManyRequests", "{body}");
            assert_eq!(
                body["message"],
                "Too many requests, please try again later."
            );
        }
    }
    // The queued create ran after the first, not beside it.
    assert!(
        elapsed >= HOLD * 2,
        "two creates of one seat took {elapsed:?}"
    );
}
