//! OwnerReferencesPermissionEnforcement through a real client: changing an
//! object's ownerReferences on update needs `delete` on it, and a blocking
//! ownerReference needs `update` on the owner's `finalizers`, with upstream's 403
//! messages.

use std::time::Duration;

use ferrokube_testing::TestApiServer;
use serde_json::{Value, json};

const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

async fn send(client: &kube::Client, method: &str, path: &str, body: &Value) -> (u16, Value) {
    let (code, _, body) = TestApiServer::send_json(client, method, path, body)
        .await
        .unwrap();
    (code, body)
}

async fn admin_create(admin: &kube::Client, path: &str, body: Value) -> Value {
    let (code, body) = send(admin, "POST", path, &body).await;
    assert_eq!(code, 201, "{body}");
    body
}

/// A Role in `default` with `verbs` on `resources` (core group), bound to alice.
async fn grant(admin: &kube::Client, name: &str, resources: &[&str], verbs: &[&str]) {
    let rbac = "/apis/rbac.authorization.k8s.io/v1/namespaces/default";
    admin_create(
        admin,
        &format!("{rbac}/roles"),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": name}, "rules": [{"apiGroups": [""],
            "resources": resources, "verbs": verbs}]}),
    )
    .await;
    admin_create(
        admin,
        &format!("{rbac}/rolebindings"),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": name}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role", "name": name},
            "subjects": [{"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}]}),
    )
    .await;
}

fn config_map(name: &str, refs: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "ownerReferences": refs}, "data": {"k": "v"}})
}

/// Sends until the answer is not a 403 other than `message`: RBAC changes reach the
/// authorizer through the watch cache, a moment after the write.
async fn until(
    client: &kube::Client,
    method: &str,
    path: &str,
    body: &Value,
    done: impl Fn(u16, &Value) -> bool,
) -> (u16, Value) {
    let mut last = (0, Value::Null);
    for _ in 0..100 {
        last = send(client, method, path, body).await;
        if done(last.0, &last.1) {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out; last answer {} {}", last.0, last.1);
}

fn message(body: &Value) -> &str {
    body["message"].as_str().unwrap_or("")
}

#[tokio::test]
async fn owner_references_need_delete_and_blocking_needs_owner_finalizers() {
    let server = TestApiServer::start_with(|o| {
        o.admission_plugins
            .set("OwnerReferencesPermissionEnforcement", true)
            .expect("a known plugin")
    })
    .await
    .unwrap();
    let admin = server.client.clone();
    let owner = admin_create(&admin, CONFIGMAPS, config_map("owner", json!([]))).await;
    let uid = owner["metadata"]["uid"].as_str().unwrap().to_string();
    let owner_ref = |block: Option<bool>| {
        let mut r = json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid});
        if let Some(b) = block {
            r["blockOwnerDeletion"] = json!(b);
        }
        r
    };
    grant(
        &admin,
        "cm-writer",
        &["configmaps"],
        &["get", "create", "update"],
    )
    .await;
    let alice = server.client_as("alice", &["devs"]).await.unwrap();

    // Creating an object with an ownerReference needs no delete (upstream: the
    // creator could as well not have created it).
    let (code, child) = until(
        &alice,
        "POST",
        CONFIGMAPS,
        &config_map("child", json!([owner_ref(None)])),
        |code, _| code != 403,
    )
    .await;
    assert_eq!(code, 201, "{child}");

    // Changing the ownerReferences on update needs delete on the object.
    let (code, mut plain) = send(&alice, "POST", CONFIGMAPS, &config_map("plain", json!([]))).await;
    assert_eq!(code, 201, "{plain}");
    plain["metadata"]["ownerReferences"] = json!([owner_ref(None)]);
    let plain_path = format!("{CONFIGMAPS}/plain");
    let (code, body) = send(&alice, "PUT", &plain_path, &plain).await;
    assert_eq!(code, 403, "{body}");
    assert_eq!(body["reason"], "Forbidden");
    assert_eq!(
        message(&body),
        "configmaps \"plain\" is forbidden: cannot set an ownerRef on a resource you can't delete: , <nil>"
    );
    // Updates leaving the ownerReferences alone are not checked.
    let mut edited = child.clone();
    edited["data"]["k"] = json!("w");
    let (code, body) = send(&alice, "PUT", &format!("{CONFIGMAPS}/child"), &edited).await;
    assert_eq!(code, 200, "{body}");

    // A blocking ownerReference needs update on the owner's finalizers.
    let blocked = config_map("blocked", json!([owner_ref(Some(true))]));
    let (code, body) = send(&alice, "POST", CONFIGMAPS, &blocked).await;
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        message(&body),
        "configmaps \"blocked\" is forbidden: cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers on: , <nil>"
    );
    // A blocking reference to a kind nothing serves is refused whatever the rights.
    let widget = config_map(
        "widget",
        json!([{"apiVersion": "example.com/v1", "kind": "Widget", "name": "w",
            "uid": "0d6c1f7e-5a57-4d0e-9f3f-3b7d1c1f0a11", "blockOwnerDeletion": true}]),
    );
    let (code, body) = send(&admin, "POST", CONFIGMAPS, &widget).await;
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        message(&body),
        "configmaps \"widget\" is forbidden: cannot set blockOwnerDeletion in this case because cannot find RESTMapping for APIVersion example.com/v1 Kind Widget: no matches for kind \"Widget\" in version \"example.com/v1\""
    );
    // A non-blocking one to it is fine.
    let (code, body) = send(
        &admin,
        "POST",
        CONFIGMAPS,
        &config_map(
            "widget",
            json!([{"apiVersion": "example.com/v1", "kind": "Widget", "name": "w",
                "uid": "0d6c1f7e-5a57-4d0e-9f3f-3b7d1c1f0a11"}]),
        ),
    )
    .await;
    assert_eq!(code, 201, "{body}");

    grant(
        &admin,
        "cm-finalizers",
        &["configmaps/finalizers"],
        &["update"],
    )
    .await;
    let (code, body) = until(&alice, "POST", CONFIGMAPS, &blocked, |code, _| code != 403).await;
    assert_eq!(code, 201, "{body}");

    grant(&admin, "cm-deleter", &["configmaps"], &["delete"]).await;
    let (code, body) = until(&alice, "PUT", &plain_path, &plain, |code, _| code != 403).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["metadata"]["ownerReferences"][0]["uid"], json!(uid));

    // Turning blockOwnerDeletion on for an existing reference is checked too:
    // without finalizers rights on the owner (a Secret here), it is refused.
    let secret = admin_create(
        &admin,
        "/api/v1/namespaces/default/secrets",
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}),
    )
    .await;
    let secret_ref = json!({"apiVersion": "v1", "kind": "Secret", "name": "s",
        "uid": secret["metadata"]["uid"]});
    let (code, mut body) = send(&alice, "GET", &plain_path, &Value::Null).await;
    assert_eq!(code, 200, "{body}");
    body["metadata"]["ownerReferences"] = json!([secret_ref]);
    let (code, mut body) = send(&alice, "PUT", &plain_path, &body).await;
    assert_eq!(code, 200, "{body}");
    body["metadata"]["ownerReferences"][0]["blockOwnerDeletion"] = json!(true);
    let (code, body) = send(&alice, "PUT", &plain_path, &body).await;
    assert_eq!(code, 403, "{body}");
    assert!(message(&body).contains("can't set finalizers on"), "{body}");
}
