//! `--audit-webhook-config-file` end to end: a fake audit sink served by the test over
//! HTTPS on loopback, named by a kubeconfig (its CA, and a bearer token the apiserver
//! presents to it). Events the policy records arrive there as `audit.k8s.io/v1`
//! EventLists, batched within `--audit-webhook-batch-max-wait`; with the log backend
//! on as well, each event goes to both.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use ferrokube_testing::{RecordingWebhook, TestApiServer};
use serde_json::{Value, json};

const CALLER_TOKEN: &str = "apiserver-to-audit-sink";
/// Longest wait for a batch to reach the sink.
const DEADLINE: Duration = Duration::from_secs(20);

const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    resources: [{group: "", resources: ["configmaps"]}]
  - level: None
"#;

/// The sink's kubeconfig and a directory for the policy and the log.
static FILES: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();

fn with_audit_webhook(o: &mut ferrokube_apiserver::Options) {
    let Some((kubeconfig, dir)) = FILES.get() else {
        return;
    };
    std::fs::write(dir.join("policy.yaml"), POLICY).unwrap();
    o.audit_policy_file = Some(dir.join("policy.yaml"));
    o.audit_log.path = Some(dir.join("audit.log"));
    o.audit_webhook.config_file = Some(kubeconfig.clone());
    o.audit_webhook.batch.max_batch_wait = Duration::from_millis(200);
}

#[tokio::test]
async fn recorded_events_reach_the_webhook_as_event_lists() {
    let sink = RecordingWebhook::start(|_| json!({})).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = sink
        .write_kubeconfig(dir.path(), "/events", CALLER_TOKEN)
        .unwrap();
    FILES.set((kubeconfig, dir.path().to_path_buf())).unwrap();
    let server = TestApiServer::start_with(with_audit_webhook).await.unwrap();

    let (code, _, _) = TestApiServer::send_json(
        &server.client,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "audited"}}),
    )
    .await
    .unwrap();
    assert_eq!(code, 201);

    let is_the_create = |e: &Value| {
        e["verb"] == "create"
            && e["objectRef"]["resource"] == "configmaps"
            && e["objectRef"]["name"] == "audited"
    };
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let (caller, list, event) = loop {
        let found = sink.requests().into_iter().find_map(|(caller, list)| {
            list["items"]
                .as_array()
                .and_then(|items| items.iter().find(|e| is_the_create(e)))
                .map(|e| (caller.clone(), list.clone(), e.clone()))
        });
        if let Some(found) = found {
            break found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no event for the create reached the sink: {:?}",
            sink.requests()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(caller, format!("Bearer {CALLER_TOKEN}"));
    assert_eq!(list["kind"], "EventList");
    assert_eq!(list["apiVersion"], "audit.k8s.io/v1");
    assert_eq!(event["level"], "Metadata");
    assert_eq!(event["stage"], "ResponseComplete");
    assert_eq!(event["responseStatus"]["code"], 201);
    // Nothing the policy leaves at None is sent.
    for (_, list) in sink.requests() {
        for e in list["items"].as_array().unwrap() {
            assert_eq!(e["objectRef"]["resource"], "configmaps", "{e}");
        }
    }

    // The log backend got the same event.
    let log = dir.path().join("audit.log");
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .any(|e| e["auditID"] == event["auditID"] && e["stage"] == "ResponseComplete")
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the event is not in the log"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    server.stop().await;
}

/// The sink's kubeconfig for the shutdown test.
static FLUSH_KUBECONFIG: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();

/// The webhook backend alone, waiting upstream's 30 s for a batch to fill.
fn with_slow_batches(o: &mut ferrokube_apiserver::Options) {
    let Some((kubeconfig, dir)) = FLUSH_KUBECONFIG.get() else {
        return;
    };
    std::fs::write(dir.join("policy.yaml"), POLICY).unwrap();
    o.audit_policy_file = Some(dir.join("policy.yaml"));
    o.audit_webhook.config_file = Some(kubeconfig.clone());
    o.audit_webhook.batch.max_batch_wait = Duration::from_secs(30);
}

#[tokio::test]
async fn queued_events_are_sent_at_shutdown() {
    let sink = RecordingWebhook::start(|_| json!({})).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = sink
        .write_kubeconfig(dir.path(), "/events", CALLER_TOKEN)
        .unwrap();
    FLUSH_KUBECONFIG
        .set((kubeconfig, dir.path().to_path_buf()))
        .unwrap();
    let server = TestApiServer::start_with(with_slow_batches).await.unwrap();
    let (code, _, _) = TestApiServer::send_json(
        &server.client,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "last-words"}}),
    )
    .await
    .unwrap();
    assert_eq!(code, 201);
    // The batch is far from full and its 30 s are far from over.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(sink.calls(), 0);

    // Shutting down sends it before the server is gone.
    server.stop().await;
    let sent: Vec<Value> = sink
        .requests()
        .into_iter()
        .flat_map(|(_, list)| list["items"].as_array().cloned().unwrap_or_default())
        .collect();
    assert!(
        sent.iter().any(|e| e["verb"] == "create"
            && e["objectRef"]["name"] == "last-words"
            && e["stage"] == "ResponseComplete"),
        "{sent:?}"
    );
}
