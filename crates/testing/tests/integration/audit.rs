//! The audit log on the test apiserver (`--audit-policy-file`, `--audit-log-path`):
//! a policy with Metadata for secrets (no secret data in the log) and RequestResponse
//! for configmaps, None rules and omitted stages suppressing events, the `Audit-Id`
//! response header matching the event, a watch's ResponseStarted/ResponseComplete,
//! a failure's responseStatus, impersonation, a denial, a failed authentication,
//! PodSecurity's audit annotations, ValidatingAdmissionPolicy's Audit action and
//! auditAnnotations in the event, and a malformed policy stopping the start.

use std::path::PathBuf;
use std::time::Duration;

use ferrokube_testing::TestApiServer;
use serde_json::{Value, json};

/// A directory of this test process (the options hook is a plain `fn`).
fn dir(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("ferrokube-audit-{}-{name}", std::process::id()))
}

const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: None
    nonResourceURLs: ["/version", "/healthz*"]
  - level: None
    resources: [{group: "", resources: ["events"]}]
  - level: Metadata
    resources: [{group: "", resources: ["secrets"]}]
  - level: RequestResponse
    resources: [{group: "", resources: ["configmaps"]}]
  - level: Request
    resources: [{group: "apps", resources: ["deployments"]}]
    omitStages: ["ResponseComplete"]
  - level: Metadata
    resources: [{group: "admissionregistration.k8s.io"}]
  - level: Metadata
    resources: [{group: "", resources: ["pods"]}]
"#;

fn with_audit(o: &mut ferrokube_apiserver::Options) {
    let d = dir("main");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("policy.yaml"), POLICY).unwrap();
    o.audit_policy_file = Some(d.join("policy.yaml"));
    o.audit_log.path = Some(d.join("audit.log"));
}

/// The complete events in the log: a last line without its newline is one the
/// apiserver is still writing, and is left for the next read.
fn events(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .split_inclusive('\n')
        .filter_map(|l| l.strip_suffix('\n'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Waits (at most 10 s) for an event matching `want` (events are written off the
/// request path).
async fn wait_for(path: &std::path::Path, want: impl Fn(&Value) -> bool) -> Value {
    for _ in 0..200 {
        if let Some(e) = events(path).into_iter().find(|e| want(e)) {
            return e;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no such audit event in {:#?}", events(path));
}

async fn send(c: &kube::Client, method: &str, path: &str, body: Value) -> (u16, Value) {
    let (code, _, v) = TestApiServer::send_json(c, method, path, &body)
        .await
        .unwrap();
    (code, v)
}

#[tokio::test]
async fn policy_levels_stages_and_annotations() {
    let _ = std::fs::remove_dir_all(dir("main"));
    let server = TestApiServer::start_with(with_audit).await.unwrap();
    let c = server.client.clone();
    let log = dir("main").join("audit.log");

    // A secret at Metadata: named, answered, but none of its data in the log.
    let (code, v) = send(
        &c,
        "POST",
        "/api/v1/namespaces/default/secrets",
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s1"},
            "stringData": {"password": "hunter2-very-secret"}}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    let e = wait_for(&log, |e| {
        e["objectRef"]["resource"] == "secrets" && e["verb"] == "create"
    })
    .await;
    assert_eq!(e["kind"], "Event");
    assert_eq!(e["apiVersion"], "audit.k8s.io/v1");
    assert_eq!(e["level"], "Metadata");
    assert_eq!(e["stage"], "ResponseComplete");
    assert_eq!(e["requestURI"], "/api/v1/namespaces/default/secrets");
    assert_eq!(e["objectRef"]["name"], "s1");
    assert_eq!(e["objectRef"]["namespace"], "default");
    assert_eq!(e["objectRef"]["apiVersion"], "v1");
    assert_eq!(e["responseStatus"]["code"], 201);
    assert_eq!(e["sourceIPs"][0], "127.0.0.1");
    assert!(
        e["user"]["groups"]
            .as_array()
            .unwrap()
            .contains(&json!("system:masters")),
        "{e}"
    );
    assert_eq!(e["annotations"]["authorization.k8s.io/decision"], "allow");
    assert!(e.get("requestObject").is_none() && e.get("responseObject").is_none());
    let micro = e["stageTimestamp"].as_str().unwrap();
    assert_eq!(micro.len(), "2026-01-02T03:04:05.123456Z".len(), "{micro}");

    // A configmap at RequestResponse, through a raw request to see Audit-Id.
    let (code, headers, body) = TestApiServer::raw(
        &c,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &[("content-type", "application/json")],
        serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cm1"}, "data": {"k": "v"}}))
        .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(code, 201, "{}", String::from_utf8_lossy(&body));
    let audit_id = headers
        .get("audit-id")
        .expect("Audit-Id header")
        .to_str()
        .unwrap()
        .to_string();
    let e = wait_for(&log, |e| e["auditID"] == audit_id.as_str()).await;
    assert_eq!(e["level"], "RequestResponse");
    assert_eq!(e["verb"], "create");
    assert_eq!(e["requestObject"]["data"]["k"], "v");
    assert_eq!(e["responseObject"]["metadata"]["name"], "cm1");
    assert!(e["responseObject"]["metadata"]["uid"].is_string(), "{e}");

    // A failure carries upstream's Status fields.
    let (code, _) = send(
        &c,
        "GET",
        "/api/v1/namespaces/default/configmaps/nope",
        Value::Null,
    )
    .await;
    assert_eq!(code, 404);
    let e = wait_for(&log, |e| e["objectRef"]["name"] == "nope").await;
    assert_eq!(e["verb"], "get");
    assert_eq!(e["responseStatus"]["code"], 404);
    assert_eq!(e["responseStatus"]["reason"], "NotFound");
    assert_eq!(e["responseStatus"]["status"], "Failure");

    // A watch: ResponseStarted, then ResponseComplete when it ends.
    let (code, _, _) = TestApiServer::raw(
        &c,
        "GET",
        "/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=1",
        &[],
        Vec::new(),
    )
    .await
    .unwrap();
    assert_eq!(code, 200);
    let started = wait_for(&log, |e| {
        e["verb"] == "watch" && e["stage"] == "ResponseStarted"
    })
    .await;
    let complete = wait_for(&log, |e| {
        e["verb"] == "watch" && e["stage"] == "ResponseComplete"
    })
    .await;
    assert_eq!(started["auditID"], complete["auditID"]);
    assert_eq!(started["responseStatus"]["code"], 200);

    // ValidatingAdmissionPolicy's Audit action and auditAnnotations.
    let (code, v) = send(
        &c,
        "POST",
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "no-bad"},
            "spec": {"failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                    "operations": ["CREATE"], "resources": ["configmaps"]}]},
                "validations": [{"expression": "object.data.k != 'bad'", "message": "k is bad"}],
                "auditAnnotations": [{"key": "seen", "valueExpression": "'cm-' + object.metadata.name"}]}}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    let (code, v) = send(
        &c,
        "POST",
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": "no-bad-audit"},
            "spec": {"policyName": "no-bad", "validationActions": ["Audit"]}}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    let (code, v) = send(
        &c,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm-bad"},
            "data": {"k": "bad"}}),
    )
    .await;
    assert_eq!(code, 201, "Audit does not deny: {v}");
    let e = wait_for(&log, |e| e["objectRef"]["name"] == "cm-bad").await;
    assert_eq!(e["annotations"]["no-bad/seen"], "cm-cm-bad");
    let failure: Value = serde_json::from_str(
        e["annotations"]["validation.policy.admission.k8s.io/validation_failure"]
            .as_str()
            .expect("validation_failure annotation"),
    )
    .unwrap();
    assert_eq!(
        failure,
        json!([{"message": "k is bad", "policy": "no-bad", "binding": "no-bad-audit",
            "expressionIndex": 0, "validationActions": ["Audit"]}])
    );

    // Impersonation: the event's user is who authenticated, impersonatedUser whom
    // the request acts as; the denial carries the forbid decision.
    let (code, _, _) = TestApiServer::raw(
        &c,
        "GET",
        "/api/v1/namespaces/default/configmaps/cm1",
        &[("impersonate-user", "bob")],
        Vec::new(),
    )
    .await
    .unwrap();
    assert_eq!(code, 403);
    let e = wait_for(&log, |e| e["impersonatedUser"]["username"] == "bob").await;
    assert!(
        e["user"]["groups"]
            .as_array()
            .unwrap()
            .contains(&json!("system:masters"))
    );
    assert_eq!(e["responseStatus"]["code"], 403);
    assert_eq!(e["responseStatus"]["reason"], "Forbidden");
    assert_eq!(e["annotations"]["authorization.k8s.io/decision"], "forbid");

    // A failed authentication: one ResponseStarted event, with upstream's message.
    let bad = server.client_with_token("not-a-token").await.unwrap();
    let (code, _, _) = TestApiServer::raw(
        &bad,
        "GET",
        "/api/v1/namespaces/default/secrets",
        &[],
        Vec::new(),
    )
    .await
    .unwrap();
    assert_eq!(code, 401);
    let e = wait_for(&log, |e| e["responseStatus"]["code"] == 401).await;
    assert_eq!(e["stage"], "ResponseStarted");
    assert_eq!(
        e["responseStatus"]["message"],
        "Authentication failed, attempted: token"
    );
    assert_eq!(e["user"], json!({}));

    // PodSecurity's audit mode: the verdict lands in the event, the pod is admitted.
    let (code, v) = send(
        &c,
        "POST",
        "/api/v1/namespaces",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "pss-audit",
            "labels": {"pod-security.kubernetes.io/audit": "restricted"}}}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    let (code, v) = send(
        &c,
        "POST",
        "/api/v1/namespaces/pss-audit/pods",
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "privileged"},
            "spec": {"containers": [{"name": "c", "image": "busybox",
                "securityContext": {"privileged": true}}]}}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    let e = wait_for(&log, |e| {
        e["objectRef"]["name"] == "privileged" && e["verb"] == "create"
    })
    .await;
    assert_eq!(
        e["annotations"]["pod-security.kubernetes.io/enforce-policy"],
        "privileged:latest"
    );
    let violations = e["annotations"]["pod-security.kubernetes.io/audit-violations"]
        .as_str()
        .unwrap_or_default();
    assert!(
        violations.starts_with("would violate PodSecurity \"restricted:latest\": privileged"),
        "{e}"
    );

    // None rules and omitted stages: no events for /version, events, deployments
    // (ResponseComplete omitted), and no RequestReceived at all (omitted globally).
    let (code, _) = send(&c, "GET", "/version", Value::Null).await;
    assert_eq!(code, 200);
    let (code, _) = send(&c, "GET", "/api/v1/namespaces/default/events", Value::Null).await;
    assert_eq!(code, 200);
    let (code, _) = send(
        &c,
        "GET",
        "/apis/apps/v1/namespaces/default/deployments",
        Value::Null,
    )
    .await;
    assert_eq!(code, 200);
    // A last audited request, written after the ones above (one writer, in order).
    let (code, _) = send(
        &c,
        "GET",
        "/api/v1/namespaces/default/secrets/s1",
        Value::Null,
    )
    .await;
    assert_eq!(code, 200);
    wait_for(&log, |e| {
        e["objectRef"]["name"] == "s1" && e["verb"] == "get"
    })
    .await;
    let all = events(&log);
    for e in &all {
        assert_ne!(e["stage"], "RequestReceived", "{e}");
        assert_ne!(e["requestURI"], "/version", "{e}");
        assert_ne!(e["objectRef"]["resource"], "events", "{e}");
        assert_ne!(e["objectRef"]["resource"], "deployments", "{e}");
    }
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains("hunter2"), "secret data in the audit log");
    assert!(!text.contains(&base64_of("hunter2-very-secret")));

    server.stop().await;
    let _ = std::fs::remove_dir_all(dir("main"));
}

fn base64_of(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn with_bad_policy(o: &mut ferrokube_apiserver::Options) {
    let d = dir("bad");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(
        d.join("policy.yaml"),
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Everything\n",
    )
    .unwrap();
    o.audit_policy_file = Some(d.join("policy.yaml"));
    o.audit_log.path = Some(d.join("audit.log"));
}

#[tokio::test]
async fn a_malformed_policy_stops_the_start() {
    let err = TestApiServer::start_with(with_bad_policy)
        .await
        .expect_err("the start must fail");
    let text = err.to_string();
    assert!(
        text.contains("rules[0].level: Unsupported value: \"Everything\""),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(dir("bad"));
}

fn with_truncating_batch_log(o: &mut ferrokube_apiserver::Options) {
    let d = dir("truncate");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("policy.yaml"), POLICY).unwrap();
    o.audit_policy_file = Some(d.join("policy.yaml"));
    o.audit_log.path = Some(d.join("audit.log"));
    o.audit_log.batch = ferrokube_apiserver::AuditBatchOptions {
        mode: ferrokube_apiserver::AuditMode::Batch,
        max_batch_size: 50,
        max_batch_wait: Duration::from_millis(100),
        ..ferrokube_apiserver::AuditBatchOptions::log_default()
    };
    o.audit_log.truncate = Some(ferrokube_apiserver::AuditTruncate {
        max_event_size: 8 * 1024,
        max_batch_size: 64 * 1024,
    });
}

#[tokio::test]
async fn the_log_in_batch_mode_truncates_events_over_the_limit() {
    let _ = std::fs::remove_dir_all(dir("truncate"));
    let server = TestApiServer::start_with(with_truncating_batch_log)
        .await
        .unwrap();
    let c = server.client.clone();
    let log = dir("truncate").join("audit.log");

    // RequestResponse for configmaps: 20 KiB of data twice (request and response)
    // is over 8 KiB, so the event loses both objects.
    let big = "x".repeat(20 * 1024);
    let (code, v) = send(
        &c,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"},
            "data": {"k": big}}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    let small = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "small"},
        "data": {"k": "v"}});
    let (code, v) = send(&c, "POST", "/api/v1/namespaces/default/configmaps", small).await;
    assert_eq!(code, 201, "{v}");

    let e = wait_for(&log, |e| {
        e["objectRef"]["name"] == "big" && e["stage"] == "ResponseComplete"
    })
    .await;
    assert_eq!(e["annotations"]["audit.k8s.io/truncated"], "true", "{e}");
    assert!(e.get("requestObject").is_none() && e.get("responseObject").is_none());
    assert_eq!(e["responseStatus"]["code"], 201);
    // One under the limit is whole.
    let e = wait_for(&log, |e| {
        e["objectRef"]["name"] == "small" && e["stage"] == "ResponseComplete"
    })
    .await;
    assert!(
        e["annotations"].get("audit.k8s.io/truncated").is_none(),
        "{e}"
    );
    assert_eq!(e["requestObject"]["data"]["k"], "v");
    assert!(
        std::fs::read_to_string(&log)
            .unwrap()
            .lines()
            .all(|l| l.len() <= 8 * 1024),
        "an event over the limit was written"
    );
    let _ = std::fs::remove_dir_all(dir("truncate"));
}

fn with_strict_log_on_a_full_disk(o: &mut ferrokube_apiserver::Options) {
    let d = dir("strict");
    std::fs::create_dir_all(&d).unwrap();
    // RequestReceived recorded: the stage whose failure fails the request.
    let policy = POLICY.replace("omitStages: [\"RequestReceived\"]\n", "");
    std::fs::write(d.join("policy.yaml"), policy).unwrap();
    o.audit_policy_file = Some(d.join("policy.yaml"));
    // Every write to /dev/full fails with ENOSPC.
    o.audit_log.path = Some("/dev/full".into());
    o.audit_log.batch.mode = ferrokube_apiserver::AuditMode::BlockingStrict;
}

fn with_blocking_log_on_a_full_disk(o: &mut ferrokube_apiserver::Options) {
    with_strict_log_on_a_full_disk(o);
    o.audit_log.batch.mode = ferrokube_apiserver::AuditMode::Blocking;
}

#[tokio::test]
async fn blocking_strict_fails_a_request_whose_event_cannot_be_written() {
    let strict: fn(&mut ferrokube_apiserver::Options) = with_strict_log_on_a_full_disk;
    let blocking: fn(&mut ferrokube_apiserver::Options) = with_blocking_log_on_a_full_disk;
    for (options, want) in [(strict, 500), (blocking, 200)] {
        let server = TestApiServer::start_with(options).await.unwrap();
        let (code, v) = send(
            &server.client,
            "GET",
            "/api/v1/namespaces/default/pods",
            Value::Null,
        )
        .await;
        assert_eq!(code, want, "{v}");
        if want == 500 {
            assert_eq!(v["kind"], "Status");
            assert_eq!(
                v["message"],
                "Internal error occurred: failed to store audit event"
            );
        }
        // A request the policy does not audit is served either way.
        let (code, _) = send(&server.client, "GET", "/version", Value::Null).await;
        assert_eq!(code, 200);
    }
    let _ = std::fs::remove_dir_all(dir("strict"));
}
