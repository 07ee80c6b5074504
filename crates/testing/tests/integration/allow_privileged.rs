//! `--allow-privileged`: off (upstream's default), a privileged container is a 422 in a
//! pod and in every pod template, on create and on update, with upstream's message;
//! status writes of such a pod are not held to it; on (kubeadm's setting, and the test
//! server's), privileged pods are stored.

use ferrokube_testing::TestApiServer;
use serde_json::{Value, json};

async fn send(client: &kube::Client, method: &str, path: &str, body: Value) -> (u16, Value) {
    let (code, _, v) = TestApiServer::send_json(client, method, path, &body)
        .await
        .unwrap();
    (code, v)
}

fn spec(privileged: bool) -> Value {
    json!({
        "initContainers": [{"name": "init", "image": "busybox"}],
        "containers": [
            {"name": "plain", "image": "nginx"},
            {"name": "root", "image": "nginx", "securityContext": {"privileged": privileged}},
        ],
    })
}

fn pod(name: &str, privileged: bool) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec(privileged)})
}

fn template(privileged: bool) -> Value {
    json!({"metadata": {"labels": {"app": "a"}}, "spec": spec(privileged)})
}

#[tokio::test]
async fn privileged_containers_are_refused_unless_allowed() {
    let server = TestApiServer::start_with(|o| o.allow_privileged = false)
        .await
        .unwrap();
    let c = server.client.clone();

    let (code, status) = send(
        &c,
        "POST",
        "/api/v1/namespaces/default/pods",
        pod("p", true),
    )
    .await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(
        status["message"],
        "Pod \"p\" is invalid: spec.containers[1].securityContext.privileged: Forbidden: disallowed by cluster policy"
    );
    assert_eq!(
        status["details"]["causes"][0]["reason"],
        "FieldValueForbidden"
    );
    assert_eq!(
        status["details"]["causes"][0]["field"],
        "spec.containers[1].securityContext.privileged"
    );

    // Pod templates: upstream validates them with the same rule.
    let cases = [
        (
            "/apis/apps/v1/namespaces/default/deployments",
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                "spec": {"selector": {"matchLabels": {"app": "a"}}, "template": template(true)}}),
            "Deployment.apps \"d\" is invalid: spec.template.spec.containers[1].securityContext.privileged: Forbidden: disallowed by cluster policy",
        ),
        (
            "/apis/batch/v1/namespaces/default/cronjobs",
            json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "cj"},
                "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {
                    "spec": {"restartPolicy": "Never", "containers": [
                        {"name": "root", "image": "busybox", "securityContext": {"privileged": true}}]}}}}}}),
            "CronJob.batch \"cj\" is invalid: spec.jobTemplate.spec.template.spec.containers[0].securityContext.privileged: Forbidden: disallowed by cluster policy",
        ),
        (
            "/api/v1/namespaces/default/podtemplates",
            json!({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"},
                "template": template(true)}),
            "PodTemplate \"t\" is invalid: template.spec.containers[1].securityContext.privileged: Forbidden: disallowed by cluster policy",
        ),
    ];
    for (path, body, message) in cases {
        let (code, status) = send(&c, "POST", path, body).await;
        assert_eq!(code, 422, "{path}: {status}");
        assert_eq!(status["message"], message);
    }

    // privileged: false and no securityContext are fine; turning it on in an update
    // is refused like a create.
    let (code, created) = send(
        &c,
        "POST",
        "/api/v1/namespaces/default/pods",
        pod("q", false),
    )
    .await;
    assert_eq!(code, 201, "{created}");
    let mut changed = created.clone();
    changed["spec"]["containers"][1]["securityContext"]["privileged"] = json!(true);
    let (code, status) = send(&c, "PUT", "/api/v1/namespaces/default/pods/q", changed).await;
    assert_eq!(code, 422, "{status}");
    // The status subresource does not validate the spec's containers.
    let mut with_status = created.clone();
    with_status["status"] = json!({"phase": "Running"});
    let (code, status) = send(
        &c,
        "PUT",
        "/api/v1/namespaces/default/pods/q/status",
        with_status,
    )
    .await;
    assert_eq!(code, 200, "{status}");

    // A privileged ephemeral container is refused on its subresource.
    let (_, current) = send(&c, "GET", "/api/v1/namespaces/default/pods/q", Value::Null).await;
    let mut debug = current.clone();
    debug["spec"]["ephemeralContainers"] = json!([{"name": "debug", "image": "busybox",
        "securityContext": {"privileged": true}}]);
    let (code, status) = send(
        &c,
        "PUT",
        "/api/v1/namespaces/default/pods/q/ephemeralcontainers",
        debug,
    )
    .await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(
        status["details"]["causes"][0]["field"],
        "spec.ephemeralContainers[0].securityContext.privileged"
    );
}

#[tokio::test]
async fn privileged_containers_are_stored_when_allowed() {
    // The test server runs as kubeadm configures kube-apiserver: --allow-privileged=true.
    let server = TestApiServer::start().await.unwrap();
    let (code, created) = send(
        &server.client,
        "POST",
        "/api/v1/namespaces/default/pods",
        pod("p", true),
    )
    .await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(
        created["spec"]["containers"][1]["securityContext"]["privileged"],
        true
    );
}
