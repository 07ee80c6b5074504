//! PodSecurity admission on the test apiserver: `restricted` rejects a privileged pod
//! with upstream's message, `baseline` admits a plain pod, warn mode admits with a
//! `Warning` header, and pod controllers are warned about, never rejected.

use ferrokube_testing::TestApiServer;
use serde_json::{Value, json};

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

async fn namespace(client: &kube::Client, name: &str, labels: Value) {
    let (code, _, v) = send(
        client,
        "POST",
        "/api/v1/namespaces",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
}

fn pod(name: &str, security_context: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "nginx", "securityContext": security_context}]}})
}

const RESTRICTED_PRIVILEGED: &str = "pods \"p\" is forbidden: violates PodSecurity \"restricted:latest\": \
privileged (container \"c\" must not set securityContext.privileged=true), \
allowPrivilegeEscalation != false (container \"c\" must set securityContext.allowPrivilegeEscalation=false), \
unrestricted capabilities (container \"c\" must set securityContext.capabilities.drop=[\"ALL\"]), \
runAsNonRoot != true (pod or container \"c\" must set securityContext.runAsNonRoot=true), \
seccompProfile (pod or container \"c\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")";

#[tokio::test]
async fn namespace_labels_enforce_warn_and_spare_pod_controllers() {
    let server = TestApiServer::start().await.unwrap();
    let c = server.client.clone();
    namespace(
        &c,
        "strict",
        json!({"pod-security.kubernetes.io/enforce": "restricted"}),
    )
    .await;
    namespace(
        &c,
        "base",
        json!({"pod-security.kubernetes.io/enforce": "baseline"}),
    )
    .await;
    namespace(
        &c,
        "warned",
        json!({"pod-security.kubernetes.io/warn": "restricted"}),
    )
    .await;

    // restricted: a privileged pod is 403 with upstream's exact message.
    let (code, warnings, v) = send(
        &c,
        "POST",
        "/api/v1/namespaces/strict/pods",
        pod("p", json!({"privileged": true})),
    )
    .await;
    assert_eq!(code, 403, "{v}");
    assert_eq!(v["reason"], "Forbidden");
    assert_eq!(v["message"], RESTRICTED_PRIVILEGED);
    assert!(warnings.is_empty(), "{warnings:?}");
    // A pod that follows the restricted profile is admitted.
    let (code, _, v) = send(
        &c,
        "POST",
        "/api/v1/namespaces/strict/pods",
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "ok"},
            "spec": {"securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{"name": "c", "image": "nginx", "securityContext": {
                    "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]}}),
    )
    .await;
    assert_eq!(code, 201, "{v}");

    // baseline: a plain pod is admitted, a hostNetwork one is not.
    let (code, warnings, v) = send(
        &c,
        "POST",
        "/api/v1/namespaces/base/pods",
        pod("plain", json!({})),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    assert!(warnings.is_empty(), "{warnings:?}");
    let mut host = pod("host", json!({}));
    host["spec"]["hostNetwork"] = json!(true);
    let (code, _, v) = send(&c, "POST", "/api/v1/namespaces/base/pods", host).await;
    assert_eq!(code, 403, "{v}");
    assert_eq!(
        v["message"],
        "pods \"host\" is forbidden: violates PodSecurity \"baseline:latest\": host namespaces (hostNetwork=true)"
    );

    // warn: admitted, with upstream's warning text.
    let (code, warnings, v) = send(
        &c,
        "POST",
        "/api/v1/namespaces/warned/pods",
        pod("p", json!({"privileged": true})),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let expected =
        RESTRICTED_PRIVILEGED.replace("pods \"p\" is forbidden: violates", "would violate");
    assert_eq!(
        warnings[0],
        format!("299 - {}", serde_json::to_string(&expected).unwrap())
    );

    // A Deployment with a privileged template in the enforcing namespace: admitted,
    // with a warning (warn follows the enforce level).
    let (code, warnings, v) = send(
        &c,
        "POST",
        "/apis/apps/v1/namespaces/strict/deployments",
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
            "spec": {"selector": {"matchLabels": {"app": "d"}},
                "template": {"metadata": {"labels": {"app": "d"}},
                    "spec": {"containers": [{"name": "c", "image": "nginx", "securityContext": {"privileged": true}}]}}}}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with(
            "299 - \"would violate PodSecurity \\\"restricted:latest\\\": privileged (container \\\"c\\\""
        ),
        "{warnings:?}"
    );

    // Relabelling a namespace (here as a server-side dry run) warns about the pods the
    // new enforce level would reject; an invalid level is 422.
    let (code, headers, bytes) = TestApiServer::raw(
        &c,
        "PATCH",
        "/api/v1/namespaces/base?dryRun=All",
        &[("content-type", "application/merge-patch+json")],
        serde_json::to_vec(
            &json!({"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}),
        )
        .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&bytes));
    let warnings: Vec<&str> = headers
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert_eq!(
        warnings,
        [
            "299 - \"existing pods in namespace \\\"base\\\" violate the new PodSecurity enforce level \\\"restricted:latest\\\"\"",
            "299 - \"plain: allowPrivilegeEscalation != false, unrestricted capabilities, runAsNonRoot != true, seccompProfile\"",
        ]
    );
    let (code, _, bytes) = TestApiServer::raw(
        &c,
        "PATCH",
        "/api/v1/namespaces/base",
        &[("content-type", "application/merge-patch+json")],
        serde_json::to_vec(
            &json!({"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "strict"}}}),
        )
        .unwrap(),
    )
    .await
    .unwrap();
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(code, 422, "{v}");
    assert_eq!(
        v["message"],
        "Namespace \"base\" is invalid: metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: \"strict\": must be one of privileged, baseline, restricted"
    );
    server.stop().await;
}

fn with_pod_security_config(o: &mut ferrokube_apiserver::Options) {
    ferrokube_testing::with_admission_config(o, "podsecurity-valid", POD_SECURITY_CONFIG);
}

fn with_invalid_pod_security_config(o: &mut ferrokube_apiserver::Options) {
    ferrokube_testing::with_admission_config(
        o,
        "podsecurity-invalid",
        &POD_SECURITY_CONFIG.replace("enforce: baseline", "enforce: strict"),
    );
}

const POD_SECURITY_CONFIG: &str = r#"apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    kind: PodSecurityConfiguration
    defaults:
      enforce: baseline
      warn: restricted
    exemptions:
      usernames: [alice]
      namespaces: [exempt]
      runtimeClasses: [kata]
"#;

/// `--admission-control-config-file` with a PodSecurityConfiguration: its defaults
/// apply to namespaces without labels, and exempt namespaces, users and runtime classes
/// are admitted unchecked.
#[tokio::test]
async fn admission_configuration_sets_defaults_and_exemptions() {
    let server = TestApiServer::start_with(with_pod_security_config)
        .await
        .unwrap();
    let c = server.client.clone();
    namespace(&c, "plain", json!({})).await;
    let privileged = pod("p", json!({"privileged": true}));

    // The default policy: baseline enforced, restricted warned about.
    let (code, _, v) = send(
        &c,
        "POST",
        "/api/v1/namespaces/plain/pods",
        privileged.clone(),
    )
    .await;
    assert_eq!(code, 403, "{v}");
    assert!(
        v["message"].as_str().unwrap().starts_with(
            "pods \"p\" is forbidden: violates PodSecurity \"baseline:latest\": privileged"
        ),
        "{v}"
    );
    let (code, warnings, v) = send(
        &c,
        "POST",
        "/api/v1/namespaces/plain/pods",
        pod("ok", json!({})),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    assert!(
        warnings
            .iter()
            .any(|w| w.starts_with("299 - \"would violate PodSecurity \\\"restricted:latest\\\"")),
        "{warnings:?}"
    );

    // An exempt namespace: admitted; a policy set on it is said to be ignored.
    let (code, warnings, v) = send(
        &c,
        "POST",
        "/api/v1/namespaces",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "exempt",
            "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    let expected = "namespace \"exempt\" is exempt from Pod Security, and the policy \
                    (enforce=restricted:latest) will be ignored";
    assert_eq!(
        warnings,
        vec![format!(
            "299 - {}",
            serde_json::to_string(expected).unwrap()
        )]
    );
    let (code, warnings, v) = send(
        &c,
        "POST",
        "/api/v1/namespaces/exempt/pods",
        privileged.clone(),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    assert!(warnings.is_empty(), "{warnings:?}");

    // An exempt user (impersonated by the admin).
    let (code, _, body) = TestApiServer::raw(
        &c,
        "POST",
        "/api/v1/namespaces/plain/pods",
        &[
            ("content-type", "application/json"),
            ("impersonate-user", "alice"),
            ("impersonate-group", "system:masters"),
        ],
        pod("alice", json!({"privileged": true}))
            .to_string()
            .into_bytes(),
    )
    .await
    .unwrap();
    assert_eq!(code, 201, "{}", String::from_utf8_lossy(&body));

    // An exempt runtime class.
    let (code, _, v) = send(
        &c,
        "POST",
        "/apis/node.k8s.io/v1/runtimeclasses",
        json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
            "metadata": {"name": "kata"}, "handler": "kata"}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    let mut kata = pod("kata", json!({"privileged": true}));
    kata["spec"]["runtimeClassName"] = json!("kata");
    let (code, _, v) = send(&c, "POST", "/api/v1/namespaces/plain/pods", kata).await;
    assert_eq!(code, 201, "{v}");
}

#[tokio::test]
async fn an_invalid_pod_security_configuration_stops_the_start() {
    let Err(err) = TestApiServer::start_with(with_invalid_pod_security_config).await else {
        panic!("the server started with an invalid configuration");
    };
    let err = err.to_string();
    assert!(
        err.contains("PodSecurity: defaults.enforce: Unsupported value: \"strict\""),
        "{err}"
    );
}
