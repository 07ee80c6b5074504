//! Admission webhooks on the test apiserver against a small HTTPS webhook server in the
//! test (a test CA from the pki crate): a validating webhook that denies, a mutating
//! one that patches (reached through a Service's endpoints), and a webhook that times
//! out under `failurePolicy: Fail` and under `Ignore`.

use std::time::Duration;

use base64::Engine;
use ferrokube_testing::{TestApiServer, WebhookServer};
use serde_json::{Value, json};

const SLOW_SECONDS: u64 = 3;

/// The webhook's answer to one AdmissionReview, by request path.
fn answer(path: &str, review: &Value) -> Value {
    let uid = review["request"]["uid"].clone();
    let response = match path {
        "/deny" => json!({"uid": uid, "allowed": false, "warnings": ["deny warning"],
            "status": {"code": 403, "message": "denied by test"}}),
        "/patch" => {
            let patch = json!([{"op": "add", "path": "/metadata/labels/patched", "value": "yes"}]);
            json!({"uid": uid, "allowed": true, "patchType": "JSONPatch",
                "patch": base64::engine::general_purpose::STANDARD.encode(patch.to_string())})
        }
        _ => json!({"uid": uid, "allowed": true}),
    };
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

/// Starts the webhook server (the shared test webhook server answering with
/// [`answer`]; `/slow` answers after [`SLOW_SECONDS`]).
async fn webhook_server() -> WebhookServer {
    WebhookServer::start(|path: String, review: Value| async move {
        if path == "/slow" {
            tokio::time::sleep(Duration::from_secs(SLOW_SECONDS)).await;
        }
        answer(&path, &review)
    })
    .await
    .unwrap()
}

async fn send(
    client: &kube::Client,
    method: &str,
    path: &str,
    body: Value,
) -> (u16, Vec<String>, Value) {
    TestApiServer::send_json(client, method, path, &body)
        .await
        .unwrap()
}

/// A webhook on configmap creation, for objects labelled `webhook: <label>`.
fn hook(
    name: &str,
    label: &str,
    client_config: Value,
    failure_policy: &str,
    timeout: i64,
) -> Value {
    json!({
        "name": name,
        "clientConfig": client_config,
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
        "objectSelector": {"matchLabels": {"webhook": label}},
        "failurePolicy": failure_policy,
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": timeout,
    })
}

fn configmap(name: &str, label: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"webhook": label}}, "data": {"a": "b"}})
}

#[tokio::test]
async fn webhooks_deny_patch_and_follow_their_failure_policy() {
    let hooks = webhook_server().await;
    let (port, ca_bundle) = (hooks.port, hooks.ca_bundle());
    let server = TestApiServer::start().await.unwrap();
    let c = server.client.clone();
    let url = |path: &str| json!({"url": format!("https://127.0.0.1:{port}{path}"), "caBundle": ca_bundle});

    // The mutating webhook is reached through a Service without a selector and its
    // Endpoints, verified as webhook.default.svc.
    let (code, _, v) = send(
        &c,
        "POST",
        "/api/v1/namespaces/default/services",
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "webhook"},
            "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port}]}}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    let (code, _, v) = send(&c, "POST", "/api/v1/namespaces/default/endpoints",
        json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "webhook"},
            "subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"name": "https", "port": port}]}]})).await;
    assert_eq!(code, 201, "{v}");
    let service = json!({"service": {"namespace": "default", "name": "webhook", "path": "/patch"},
        "caBundle": ca_bundle});
    let (code, _, v) = send(&c, "POST", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "patcher"},
            "webhooks": [hook("patch.example.com", "patch", service, "Fail", 10)]})).await;
    assert_eq!(code, 201, "{v}");
    assert_eq!(v["webhooks"][0]["reinvocationPolicy"], "Never");
    assert_eq!(v["webhooks"][0]["matchPolicy"], "Equivalent");
    let mut ns_deny = hook("ns-deny.example.com", "ns-deny", url("/deny"), "Fail", 10);
    ns_deny["namespaceSelector"] = json!({"matchLabels": {"webhooks": "on"}});
    let (code, _, v) = send(&c, "POST", "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "checks"},
            "webhooks": [
                hook("deny.example.com", "deny", url("/deny"), "Fail", 10),
                hook("slow-fail.example.com", "slow-fail", url("/slow"), "Fail", 1),
                hook("slow-ignore.example.com", "slow-ignore", url("/slow"), "Ignore", 1),
                ns_deny,
            ]})).await;
    assert_eq!(code, 201, "{v}");

    let create = |name: &str, label: &str| {
        let c = c.clone();
        let body = configmap(name, label);
        async move { send(&c, "POST", "/api/v1/namespaces/default/configmaps", body).await }
    };

    // Denied with the webhook's code and message; its warning reaches the client.
    let (code, warnings, v) = create("a", "deny").await;
    assert_eq!(code, 403, "{v}");
    assert_eq!(
        v["message"],
        "admission webhook \"deny.example.com\" denied the request: denied by test"
    );
    assert_eq!(warnings, ["299 - \"deny warning\""]);

    // Patched: the stored object carries the webhook's label.
    let (code, _, v) = create("b", "patch").await;
    assert_eq!(code, 201, "{v}");
    assert_eq!(v["metadata"]["labels"]["patched"], "yes");
    let (code, _, v) = send(
        &c,
        "GET",
        "/api/v1/namespaces/default/configmaps/b",
        Value::Null,
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(v["metadata"]["labels"]["patched"], "yes");

    // A webhook that does not answer in time: 500 under Fail, admitted under Ignore.
    let (code, _, v) = create("c", "slow-fail").await;
    assert_eq!(code, 500, "{v}");
    let message = v["message"].as_str().unwrap();
    assert!(
        message.starts_with("Internal error occurred: failed calling webhook \"slow-fail.example.com\": failed to call webhook: Post \"https://127.0.0.1:")
            && message.ends_with("/slow?timeout=1s\": context deadline exceeded"),
        "{message}"
    );
    let (code, _, v) = create("d", "slow-ignore").await;
    assert_eq!(code, 201, "{v}");
    // A request timeout shorter than the webhook's wait: the server ends the request
    // itself (504), which upstream counts as a termination.
    // (Without kube-rs's retries of 504s.)
    let once = server.client_without_retries().await.unwrap();
    let (code, _, v) = send(
        &once,
        "POST",
        "/api/v1/namespaces/default/configmaps?timeout=300ms",
        configmap("t", "slow-ignore"),
    )
    .await;
    assert_eq!(code, 504, "{v}");

    // Their waits for the webhook (1 s each, the timeout) are in the creates' latency
    // and left out of the SLI latency, as upstream's apiserver_request_sli_duration_seconds.
    let metrics = c
        .request_text(http::Request::get("/metrics").body(vec![]).unwrap())
        .await
        .unwrap();
    let sum = |series: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {series} in\n{metrics}"))
    };
    let labels = r#"group="",resource="configmaps",scope="resource",subresource="",verb="POST",version="v1"}"#;
    let latency = sum(&format!(
        r#"apiserver_request_duration_seconds_sum{{component="apiserver",dry_run="",{labels}"#
    ));
    let sli = sum(&format!(
        r#"apiserver_request_sli_duration_seconds_sum{{component="apiserver",{labels}"#
    ));
    assert!(
        latency - sli >= 2.0,
        "the webhooks' 2 s are not left out of the SLI: latency {latency}, SLI {sli}"
    );
    assert_eq!(
        sum(&format!(
            r#"apiserver_request_terminations_total{{code="504",component="apiserver",dry_run="",{labels}"#
        )),
        1.0
    );
    // Upstream's admission metrics: every webhook call by its answer, the rejections
    // by kind, the failures opened, each plugin's and each step's latency.
    for (series, at_least) in [
        (
            r#"apiserver_admission_webhook_request_total{code="200",name="patch.example.com",operation="CREATE",rejected="false",type="admit"}"#,
            1.0,
        ),
        (
            r#"apiserver_admission_webhook_rejection_count{error_type="no_error",name="deny.example.com",operation="CREATE",rejection_code="403",type="validating"}"#,
            1.0,
        ),
        (
            r#"apiserver_admission_webhook_rejection_count{error_type="calling_webhook_error",name="slow-fail.example.com",operation="CREATE",rejection_code="503",type="validating"}"#,
            1.0,
        ),
        (
            r#"apiserver_admission_webhook_fail_open_count{name="slow-ignore.example.com",type="validating"}"#,
            1.0,
        ),
        (
            r#"apiserver_admission_webhook_admission_duration_seconds_bucket{name="slow-fail.example.com",operation="CREATE",rejected="true",type="validating",le="+Inf"}"#,
            1.0,
        ),
        (
            r#"apiserver_admission_controller_admission_duration_seconds_count{name="ValidatingAdmissionWebhook",operation="CREATE",rejected="true",type="validate"}"#,
            2.0,
        ),
        (
            r#"apiserver_admission_controller_admission_duration_seconds_count{name="MutatingAdmissionWebhook",operation="CREATE",rejected="false",type="admit"}"#,
            1.0,
        ),
        (
            r#"apiserver_admission_step_admission_duration_seconds_count{operation="CREATE",rejected="true",type="validate"}"#,
            2.0,
        ),
    ] {
        assert!(sum(series) >= at_least, "{series} below {at_least}");
    }
    // A webhook's 1 s wait lands in the upper buckets only.
    assert_eq!(
        sum(
            r#"apiserver_admission_webhook_admission_duration_seconds_bucket{name="slow-fail.example.com",operation="CREATE",rejected="true",type="validating",le="0.5"}"#
        ),
        0.0
    );

    // A namespace selector: only namespaces labelled webhooks=on see the webhook.
    for (ns, labels) in [("hooked", json!({"webhooks": "on"})), ("plain", json!({}))] {
        let (code, _, v) = send(&c, "POST", "/api/v1/namespaces",
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}})).await;
        assert_eq!(code, 201, "{v}");
    }
    let (code, _, v) = send(
        &c,
        "POST",
        "/api/v1/namespaces/hooked/configmaps",
        configmap("n", "ns-deny"),
    )
    .await;
    assert_eq!(code, 403, "{v}");
    assert_eq!(
        v["message"],
        "admission webhook \"ns-deny.example.com\" denied the request: denied by test"
    );
    let (code, _, v) = send(
        &c,
        "POST",
        "/api/v1/namespaces/plain/configmaps",
        configmap("n", "ns-deny"),
    )
    .await;
    assert_eq!(code, 201, "{v}");

    // Objects no webhook selects are not sent anywhere.
    let (code, warnings, v) = create("e", "none").await;
    assert_eq!(code, 201, "{v}");
    assert!(warnings.is_empty());
    assert!(v["metadata"]["labels"]["patched"].is_null());
    server.stop().await;
}

#[tokio::test]
async fn match_conditions_choose_webhooks_and_must_compile() {
    let hooks = webhook_server().await;
    let (port, ca_bundle) = (hooks.port, hooks.ca_bundle());
    let server = TestApiServer::start().await.unwrap();
    let c = server.client.clone();
    let url = |path: &str| json!({"url": format!("https://127.0.0.1:{port}{path}"), "caBundle": ca_bundle});
    let config = |webhooks: Vec<Value>| {
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "conditional"}, "webhooks": webhooks})
    };
    const CONFIGS: &str = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations";

    // A condition that does not compile is refused at create.
    let mut broken = hook("broken.example.com", "cond", url("/deny"), "Fail", 10);
    broken["matchConditions"] = json!([{"name": "bad", "expression": "object.metadata.name =="}]);
    let (code, _, v) = send(&c, "POST", CONFIGS, config(vec![broken])).await;
    assert_eq!(code, 422, "{v}");
    assert!(
        v["message"].as_str().unwrap().contains(
            "webhooks[0].matchConditions[0].expression: Invalid value: \"object.metadata.name ==\": compilation failed"
        ),
        "{v}"
    );

    let mut only_x = hook("only-x.example.com", "cond", url("/deny"), "Fail", 10);
    only_x["matchConditions"] = json!([
        {"name": "x-names", "expression": "object.metadata.name.startsWith('x')"},
        {"name": "creates", "expression": "request.operation == 'CREATE' && oldObject == null"}]);
    let mut erring_fail = hook(
        "err-fail.example.com",
        "err-fail",
        url("/allow"),
        "Fail",
        10,
    );
    erring_fail["matchConditions"] =
        json!([{"name": "missing", "expression": "object.data.missing == 'a'"}]);
    let mut erring_ignore = hook(
        "err-ignore.example.com",
        "err-ignore",
        url("/deny"),
        "Ignore",
        10,
    );
    erring_ignore["matchConditions"] =
        json!([{"name": "missing", "expression": "object.data.missing == 'a'"}]);
    let (code, _, v) = send(
        &c,
        "POST",
        CONFIGS,
        config(vec![only_x, erring_fail, erring_ignore]),
    )
    .await;
    assert_eq!(code, 201, "{v}");

    let create = |name: &str, label: &str| {
        let c = c.clone();
        let body = configmap(name, label);
        async move { send(&c, "POST", "/api/v1/namespaces/default/configmaps", body).await }
    };
    // The conditions hold: the webhook is called and denies.
    let (code, _, v) = create("x1", "cond").await;
    assert_eq!(code, 403, "{v}");
    assert_eq!(
        v["message"],
        "admission webhook \"only-x.example.com\" denied the request: denied by test"
    );
    // A false condition skips the webhook.
    let (code, _, v) = create("y1", "cond").await;
    assert_eq!(code, 201, "{v}");
    // A condition that fails to evaluate: an error under Fail, skipped under Ignore.
    let (code, _, v) = create("e1", "err-fail").await;
    assert_eq!(code, 500, "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("matchConditions of webhook \"err-fail.example.com\""),
        "{v}"
    );
    let (code, _, v) = create("e2", "err-ignore").await;
    assert_eq!(code, 201, "{v}");

    // `authorizer` asks the authorizer chain: the service account has no grants.
    let mut granted = hook("sa-granted.example.com", "authz", url("/deny"), "Fail", 10);
    granted["matchConditions"] = json!([{"name": "sa-may-delete-secrets", "expression":
        "authorizer.serviceAccount('default', 'nobody').group('').resource('secrets').check('delete').allowed()"}]);
    let mut not_granted = hook(
        "sa-not-granted.example.com",
        "authz-not",
        url("/deny"),
        "Fail",
        10,
    );
    not_granted["matchConditions"] = json!([{"name": "sa-may-not-delete-secrets", "expression":
        "!authorizer.serviceAccount('default', 'nobody').group('').resource('secrets').check('delete').allowed() && authorizer.requestResource.check('create').allowed()"}]);
    let mut authz_config = config(vec![granted, not_granted]);
    authz_config["metadata"]["name"] = json!("conditional-authz");
    let (code, _, v) = send(&c, "POST", CONFIGS, authz_config).await;
    assert_eq!(code, 201, "{v}");
    let (code, _, v) = create("a1", "authz").await;
    assert_eq!(code, 201, "{v}");
    let (code, _, v) = create("a2", "authz-not").await;
    assert_eq!(code, 403, "{v}");
    assert_eq!(
        v["message"],
        "admission webhook \"sa-not-granted.example.com\" denied the request: denied by test"
    );
    server.stop().await;
}

#[tokio::test]
async fn webhook_connections_are_kept_between_calls() {
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = calls.clone();
    let hooks = WebhookServer::start(move |path: String, review: Value| {
        seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        async move { answer(&path, &review) }
    })
    .await
    .unwrap();
    let server = TestApiServer::start().await.unwrap();
    let c = server.client.clone();
    let client_config = json!({"url": hooks.url("/allow"), "caBundle": hooks.ca_bundle()});
    let (code, _, v) = send(&c, "POST", "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "allow"},
            "webhooks": [hook("allow.example.com", "allow", client_config, "Fail", 10)]})).await;
    assert_eq!(code, 201, "{v}");

    // Sequential creates, each admitted by the webhook: one connection carries them
    // all, as upstream's webhook client keeps its connections.
    for i in 0..5 {
        let (code, _, v) = send(
            &c,
            "POST",
            "/api/v1/namespaces/default/configmaps",
            configmap(&format!("kept-{i}"), "allow"),
        )
        .await;
        assert_eq!(code, 201, "{v}");
    }
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 5);
    assert_eq!(hooks.connections(), 1);
    server.stop().await;
}
