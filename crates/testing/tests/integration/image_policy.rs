//! The ImagePolicyWebhook admission plugin end to end: a fake image policy service
//! served by the test over HTTPS on loopback, named by the kubeconfig the plugin's
//! AdmissionConfiguration entry points at. Pods whose images it allows are created;
//! the others are refused with its reason; answers are cached; a webhook that cannot
//! be reached refuses pods unless `defaultAllow` says otherwise, in which case they are
//! marked `alpha.image-policy.k8s.io/failed-open`.

use std::path::PathBuf;
use std::sync::OnceLock;

use ferrokube_apiserver::Options;
use ferrokube_testing::{RecordingWebhook, TestApiServer};
use serde_json::{Value, json};

/// The AdmissionConfiguration of the test, written once its webhook has a port.
static ADMISSION_CONFIG: OnceLock<String> = OnceLock::new();

/// The plugin on, configured by `config` once its test has written it.
fn enable_image_policy(o: &mut Options, name: &str, config: &OnceLock<String>) {
    o.admission_plugins
        .set("ImagePolicyWebhook", true)
        .expect("a known plugin");
    let yaml = config.get().expect("the test wrote its configuration");
    ferrokube_testing::with_admission_config(o, name, yaml);
}

fn with_image_policy(o: &mut Options) {
    enable_image_policy(o, "image-policy", &ADMISSION_CONFIG);
}

fn admission_config(kubeconfig: &std::path::Path, default_allow: bool) -> String {
    format!(
        r#"apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: ImagePolicyWebhook
  configuration:
    imagePolicy:
      kubeConfigFile: {}
      allowTTL: 50
      denyTTL: 50
      retryBackoff: 1
      defaultAllow: {default_allow}
"#,
        kubeconfig.display()
    )
}

/// Images from `registry.example/` are allowed, with an audit annotation; the rest
/// are denied with a reason.
fn image_policy(review: &Value) -> Value {
    let images: Vec<&str> = review["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["image"].as_str())
        .collect();
    let status = if images.iter().all(|i| i.starts_with("registry.example/")) {
        json!({"allowed": true, "auditAnnotations": {"checked": "yes"}})
    } else {
        json!({"allowed": false, "reason": "images must come from registry.example"})
    };
    json!({"apiVersion": "imagepolicy.k8s.io/v1alpha1", "kind": "ImageReview", "status": status})
}

fn pod(name: &str, image: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": {
            "team.image-policy.k8s.io/ticket": "42", "unrelated.example.com/x": "y"}},
        "spec": {"containers": [{"name": "c", "image": image}]}})
}

async fn create(server: &TestApiServer, body: &Value) -> (u16, Value) {
    let (code, _, answer) = TestApiServer::send_json(
        &server.client,
        "POST",
        "/api/v1/namespaces/default/pods",
        body,
    )
    .await
    .unwrap();
    (code, answer)
}

#[tokio::test]
async fn the_webhook_decides_which_images_pods_may_run() {
    let mut policy = RecordingWebhook::start(image_policy).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig: PathBuf = policy
        .write_kubeconfig(dir.path(), "/imagereview", "apiserver-to-policy")
        .unwrap();
    ADMISSION_CONFIG
        .set(admission_config(&kubeconfig, false))
        .unwrap();
    let server = TestApiServer::start_with(with_image_policy).await.unwrap();

    // An allowed image: created, after one review naming the images, the policy
    // annotations and the namespace.
    let (code, created) = create(&server, &pod("allowed", "registry.example/app:1")).await;
    assert_eq!(code, 201, "{created}");
    let requests = policy.requests();
    assert_eq!(requests.len(), 1);
    let (caller, review) = &requests[0];
    assert_eq!(caller, "Bearer apiserver-to-policy");
    assert_eq!(review["apiVersion"], "imagepolicy.k8s.io/v1alpha1");
    assert_eq!(review["kind"], "ImageReview");
    assert_eq!(
        review["spec"],
        json!({"containers": [{"image": "registry.example/app:1"}],
            "annotations": {"team.image-policy.k8s.io/ticket": "42"},
            "namespace": "default"})
    );

    // The same review again is answered from the cache.
    let (code, _) = create(&server, &pod("allowed-again", "registry.example/app:1")).await;
    assert_eq!(code, 201);
    assert_eq!(policy.calls(), 1);

    // A denied image: 403 with the webhook's reason; nothing is stored.
    let (code, status) = create(&server, &pod("denied", "docker.io/library/nginx")).await;
    assert_eq!(code, 403, "{status}");
    assert_eq!(status["reason"], "Forbidden");
    assert_eq!(
        status["message"],
        "pods \"denied\" is forbidden: image policy webhook backend denied one or more images: images must come from registry.example"
    );
    let (code, _, _) = TestApiServer::raw(
        &server.client,
        "GET",
        "/api/v1/namespaces/default/pods/denied",
        &[],
        vec![],
    )
    .await
    .unwrap();
    assert_eq!(code, 404);

    // Other resources and the status subresource are not reviewed.
    let calls = policy.calls();
    let (code, _, _) = TestApiServer::send_json(
        &server.client,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
    )
    .await
    .unwrap();
    assert_eq!(code, 201);
    assert_eq!(policy.calls(), calls);

    // With the webhook gone and defaultAllow false, a pod it never reviewed is refused.
    policy.server.stop().await;
    let (code, status) = create(&server, &pod("unreviewed", "registry.example/other:2")).await;
    assert_eq!(code, 403, "{status}");
    let message = status["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("pods \"unreviewed\" is forbidden: Post \"https://127.0.0.1:"),
        "{message}"
    );
    server.stop().await;
}

/// The configuration of the fail-open test, whose webhook is gone.
static FAIL_OPEN_CONFIG: OnceLock<String> = OnceLock::new();

fn with_failing_open_policy(o: &mut Options) {
    enable_image_policy(o, "image-policy-fail-open", &FAIL_OPEN_CONFIG);
}

#[tokio::test]
async fn a_pod_admitted_without_an_answer_is_marked_failed_open() {
    let mut policy = RecordingWebhook::start(image_policy).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig: PathBuf = policy
        .write_kubeconfig(dir.path(), "/imagereview", "apiserver-to-policy")
        .unwrap();
    policy.server.stop().await;
    FAIL_OPEN_CONFIG
        .set(admission_config(&kubeconfig, true))
        .unwrap();
    let server = TestApiServer::start_with(with_failing_open_policy)
        .await
        .unwrap();

    // defaultAllow admits the pod, marks it as upstream does, and keeps the
    // annotations it came with.
    let (code, created) = create(&server, &pod("unreviewed", "docker.io/library/nginx")).await;
    assert_eq!(code, 201, "{created}");
    let annotations = &created["metadata"]["annotations"];
    assert_eq!(annotations["alpha.image-policy.k8s.io/failed-open"], "true");
    assert_eq!(annotations["team.image-policy.k8s.io/ticket"], "42");
    let (code, _, stored) = TestApiServer::raw(
        &server.client,
        "GET",
        "/api/v1/namespaces/default/pods/unreviewed",
        &[],
        vec![],
    )
    .await
    .unwrap();
    assert_eq!(code, 200);
    let stored: Value = serde_json::from_slice(&stored).unwrap();
    assert_eq!(
        stored["metadata"]["annotations"]["alpha.image-policy.k8s.io/failed-open"],
        "true"
    );
    // Resources the plugin does not review are not marked.
    let (code, _, cm) = TestApiServer::send_json(
        &server.client,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
    )
    .await
    .unwrap();
    assert_eq!(code, 201);
    assert!(cm["metadata"]["annotations"].is_null(), "{cm}");
    server.stop().await;
}

fn with_plugin_but_no_configuration(o: &mut Options) {
    o.admission_plugins
        .set("ImagePolicyWebhook", true)
        .expect("a known plugin");
}

#[tokio::test]
async fn the_plugin_without_a_configuration_stops_the_start() {
    let Err(err) = TestApiServer::start_with(with_plugin_but_no_configuration).await else {
        panic!("the server started without ImagePolicyWebhook's configuration");
    };
    let err = err.to_string();
    assert!(err.contains("no imagePolicy configuration"), "{err}");
}
