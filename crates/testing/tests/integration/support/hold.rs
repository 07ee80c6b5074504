//! Configmap creates held in flight: a validating webhook (served by the test) that
//! gets every create of a configmap labelled `hold: yes`, and a user allowed to do
//! anything, for tests of what the apiserver does while requests are executing.

use ferrokube_testing::{TestApiServer, WebhookServer};
use serde_json::json;

/// Registers `hooks` (at its `/hold` path) for creates of configmaps labelled
/// `hold: yes`, and binds `user` to cluster-admin.
pub async fn hold_labelled_configmap_creates(
    admin: &kube::Client,
    hooks: &WebhookServer,
    user: &str,
) {
    let webhook = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "hold"},
        "webhooks": [{"name": "hold.example.com",
            "clientConfig": {"url": format!("https://127.0.0.1:{}/hold", hooks.port),
                "caBundle": hooks.ca_bundle()},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                "resources": ["configmaps"]}],
            "objectSelector": {"matchLabels": {"hold": "yes"}},
            "failurePolicy": "Fail", "sideEffects": "None",
            "admissionReviewVersions": ["v1"], "timeoutSeconds": 10}]});
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": format!("{user}-admin")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]});
    for (path, body) in [
        (
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
            webhook,
        ),
        (
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            binding,
        ),
    ] {
        let (code, _, v) = TestApiServer::send_json(admin, "POST", path, &body)
            .await
            .unwrap();
        assert_eq!(code, 201, "{path}: {v}");
    }
}
