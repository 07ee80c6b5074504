//! RBAC, the Node authorizer, escalation prevention, aggregation, the bootstrap
//! policy and NodeRestriction, through real clients with their own certificates.

use std::time::Duration;

use ferrokube_testing::TestApiServer;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::api::rbac::v1::{ClusterRole, Role, RoleBinding};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

/// Retries `f` until it returns true: RBAC changes reach the authorizer through the
/// watch cache, a moment after the write.
async fn eventually<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..100 {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

fn code<T>(r: Result<T, kube::Error>) -> u16 {
    match r {
        Ok(_) => 200,
        Err(kube::Error::Api(s)) => s.code,
        Err(e) => panic!("unexpected error {e}"),
    }
}

async fn bind(admin: &kube::Client, ns: &str, name: &str, role_kind: &str, role: &str, user: &str) {
    let rb: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &rb)
        .await
        .unwrap();
}

fn config_map(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}})).unwrap()
}

#[tokio::test]
async fn view_reads_but_cannot_write_or_read_secrets_and_edit_cannot_bind() {
    let server = TestApiServer::start().await.unwrap();
    let admin = server.client.clone();
    Api::<Secret>::namespaced(admin.clone(), "default")
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "s"}, "stringData": {"a": "b"}}))
                .unwrap(),
        )
        .await
        .unwrap();

    let viewer = server.client_as("viewer", &[]).await.unwrap();
    let pods = Api::<Pod>::namespaced(viewer.clone(), "default");
    assert_eq!(code(pods.list(&ListParams::default()).await), 403);
    bind(
        &admin,
        "default",
        "viewer-view",
        "ClusterRole",
        "view",
        "viewer",
    )
    .await;
    eventually("view to apply", || async {
        pods.list(&ListParams::default()).await.is_ok()
    })
    .await;
    let cms = Api::<ConfigMap>::namespaced(viewer.clone(), "default");
    assert_eq!(
        code(cms.create(&PostParams::default(), &config_map("x")).await),
        403
    );
    let secrets = Api::<Secret>::namespaced(viewer.clone(), "default");
    assert_eq!(code(secrets.get("s").await), 403);
    // Only in the bound namespace.
    assert_eq!(
        code(
            Api::<Pod>::namespaced(viewer.clone(), "kube-system")
                .list(&ListParams::default())
                .await
        ),
        403
    );
    let err = Api::<Pod>::namespaced(viewer, "kube-system")
        .list(&ListParams::default())
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(s) => assert_eq!(
            s.message,
            "pods is forbidden: User \"viewer\" cannot list resource \"pods\" in API group \"\" in the namespace \"kube-system\""
        ),
        e => panic!("{e}"),
    }

    let editor = server.client_as("editor", &[]).await.unwrap();
    bind(
        &admin,
        "default",
        "editor-edit",
        "ClusterRole",
        "edit",
        "editor",
    )
    .await;
    let cms = Api::<ConfigMap>::namespaced(editor.clone(), "default");
    eventually("edit to apply", || async {
        cms.create(&PostParams::default(), &config_map("y"))
            .await
            .is_ok()
    })
    .await;
    assert_eq!(
        code(
            Api::<Secret>::namespaced(editor.clone(), "default")
                .get("s")
                .await
        ),
        200
    );
    let rb: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "sneaky"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"kind": "User", "name": "friend"}]
    }))
    .unwrap();
    assert_eq!(
        code(
            Api::<RoleBinding>::namespaced(editor, "default")
                .create(&PostParams::default(), &rb)
                .await
        ),
        403
    );
    server.stop().await;
}

#[tokio::test]
async fn escalation_is_prevented_unless_escalate_or_bind_is_granted() {
    let server = TestApiServer::start().await.unwrap();
    let admin = server.client.clone();
    // `admin` in the namespace may manage roles and bindings there.
    bind(&admin, "default", "nsadmin", "ClusterRole", "admin", "boss").await;
    let boss = server.client_as("boss", &[]).await.unwrap();
    let roles = Api::<Role>::namespaced(boss.clone(), "default");
    let role = |name: &str, resource: &str| -> Role {
        serde_json::from_value(json!({"metadata": {"name": name},
            "rules": [{"apiGroups": [""], "resources": [resource], "verbs": ["get"]}]}))
        .unwrap()
    };
    eventually("admin to apply", || async {
        roles
            .create(&PostParams::default(), &role("ok", "pods"))
            .await
            .is_ok()
    })
    .await;
    // Nodes are not in `admin`: granting them is an escalation.
    let err = roles
        .create(&PostParams::default(), &role("grab", "nodes"))
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 403);
            assert!(
                s.message.starts_with("roles.rbac.authorization.k8s.io \"grab\" is forbidden: user \"boss\" (groups=[\"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:"),
                "{}",
                s.message
            );
        }
        e => panic!("{e}"),
    }
    // Binding cluster-admin in the namespace is an escalation too.
    let rb = |name: &str, role: &str| -> RoleBinding {
        serde_json::from_value(json!({"metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "User", "name": "boss"}]}))
        .unwrap()
    };
    let bindings = Api::<RoleBinding>::namespaced(boss.clone(), "default");
    assert_eq!(
        code(
            bindings
                .create(&PostParams::default(), &rb("up", "cluster-admin"))
                .await
        ),
        403
    );
    // Binding what one holds is fine.
    assert_eq!(
        code(
            bindings
                .create(&PostParams::default(), &rb("down", "view"))
                .await
        ),
        200
    );
    // With `escalate` and `bind` granted, both go through.
    let grant: ClusterRole = serde_json::from_value(json!({"metadata": {"name": "escalator"},
        "rules": [{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "clusterroles"],
                   "verbs": ["escalate", "bind"]}]}))
    .unwrap();
    Api::<ClusterRole>::all(admin.clone())
        .create(&PostParams::default(), &grant)
        .await
        .unwrap();
    bind(
        &admin,
        "default",
        "escalator",
        "ClusterRole",
        "escalator",
        "boss",
    )
    .await;
    eventually("escalate to apply", || async {
        roles
            .create(&PostParams::default(), &role("grab", "nodes"))
            .await
            .is_ok()
    })
    .await;
    assert_eq!(
        code(
            bindings
                .create(&PostParams::default(), &rb("up", "cluster-admin"))
                .await
        ),
        200
    );
    server.stop().await;
}

#[tokio::test]
async fn aggregated_roles_follow_labelled_cluster_roles_and_bootstrap_is_reconciled() {
    let mut server = TestApiServer::start().await.unwrap();
    let admin = server.client.clone();
    let crs = Api::<ClusterRole>::all(admin.clone());
    let view = crs.get("view").await.unwrap();
    assert!(view.aggregation_rule.is_some());
    let has = |name: &'static str, resource: &'static str| {
        let crs = crs.clone();
        async move {
            crs.get(name)
                .await
                .unwrap()
                .rules
                .unwrap_or_default()
                .iter()
                .any(|r| {
                    r.resources
                        .as_deref()
                        .unwrap_or_default()
                        .contains(&resource.to_string())
                })
        }
    };
    eventually("view aggregated at start", || has("view", "pods")).await;
    let cluster_admin = crs.get("cluster-admin").await.unwrap();
    assert_eq!(
        cluster_admin.metadata.annotations.unwrap()["rbac.authorization.kubernetes.io/autoupdate"],
        "true"
    );
    let widget: ClusterRole = serde_json::from_value(json!({"metadata": {"name": "widgets-view",
            "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
        "rules": [{"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["get"]}]}))
    .unwrap();
    crs.create(&PostParams::default(), &widget).await.unwrap();
    // view, and through view's label edit and admin.
    for role in ["view", "edit", "admin"] {
        eventually(role, || has(role, "widgets")).await;
    }
    crs.delete("widgets-view", &Default::default())
        .await
        .unwrap();
    eventually("widgets gone", || async { !has("view", "widgets").await }).await;

    // A removed bootstrap rule comes back on restart; an opted-out role is left alone.
    crs.patch(
        "system:discovery",
        &PatchParams::default(),
        &Patch::Merge(json!({"rules": [{"nonResourceURLs": ["/api"], "verbs": ["get"]}]})),
    )
    .await
    .unwrap();
    crs.patch(
        "system:monitoring",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"rbac.authorization.kubernetes.io/autoupdate": "false"}},
            "rules": []})),
    )
    .await
    .unwrap();
    server.restart().await.unwrap();
    let urls = |r: ClusterRole| -> Vec<String> {
        r.rules
            .unwrap_or_default()
            .into_iter()
            .flat_map(|r| r.non_resource_urls.unwrap_or_default())
            .collect()
    };
    let discovery = urls(crs.get("system:discovery").await.unwrap());
    assert!(discovery.contains(&"/healthz".to_string()), "{discovery:?}");
    assert!(urls(crs.get("system:monitoring").await.unwrap()).is_empty());
    server.stop().await;
}

#[tokio::test]
async fn node_authorizer_and_node_restriction() {
    let server = TestApiServer::start().await.unwrap();
    let admin = server.client.clone();
    for name in ["mine", "other"] {
        Api::<Secret>::namespaced(admin.clone(), "default")
            .create(
                &PostParams::default(),
                &serde_json::from_value(
                    json!({"metadata": {"name": name}, "stringData": {"a": "b"}}),
                )
                .unwrap(),
            )
            .await
            .unwrap();
    }
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p"},
        "spec": {"nodeName": "node-a", "containers": [{"name": "c", "image": "busybox",
            "env": [{"name": "S", "valueFrom": {"secretKeyRef": {"name": "mine", "key": "a"}}}]}]}}))
    .unwrap();
    Api::<Pod>::namespaced(admin.clone(), "default")
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
    let node_a = server
        .client_as("system:node:node-a", &["system:nodes"])
        .await
        .unwrap();
    let node_b = server
        .client_as("system:node:node-b", &["system:nodes"])
        .await
        .unwrap();
    let secrets_a = Api::<Secret>::namespaced(node_a.clone(), "default");
    eventually("the pod to reach the cache", || async {
        secrets_a.get("mine").await.is_ok()
    })
    .await;
    assert_eq!(code(secrets_a.get("other").await), 403);
    assert_eq!(code(secrets_a.list(&ListParams::default()).await), 403);
    assert_eq!(
        code(
            Api::<Secret>::namespaced(node_b.clone(), "default")
                .get("mine")
                .await
        ),
        403
    );
    // Pods (AuthorizeNodeWithSelectors, on in 1.33): a node reads only its own,
    // and lists or watches them only by a spec.nodeName selector naming it; status
    // only for its own pods.
    let pods_b = Api::<Pod>::namespaced(node_b.clone(), "default");
    assert_eq!(code(pods_b.get("p").await), 403);
    let pods_a = Api::<Pod>::namespaced(node_a.clone(), "default");
    assert_eq!(code(pods_a.get("p").await), 200);
    let all_pods_a = Api::<Pod>::all(node_a.clone());
    for (selector, want) in [
        ("spec.nodeName=node-a", 200),
        ("spec.nodeName==node-a,status.phase!=Failed", 200),
        ("spec.nodeName=node-b", 403),
        ("spec.nodeName!=node-a", 403),
        ("", 403),
    ] {
        let list = ListParams::default().fields(selector);
        assert_eq!(code(all_pods_a.list(&list).await), want, "{selector}");
    }
    let watch = kube::api::WatchParams::default()
        .fields("spec.nodeName=node-a")
        .timeout(1);
    assert!(all_pods_a.watch(&watch, "0").await.is_ok());
    let unscoped = kube::api::WatchParams::default().timeout(1);
    assert!(all_pods_a.watch(&unscoped, "0").await.is_err());
    // An access review asks with the selector too (a raw one, or requirements).
    for (selector, allowed) in [
        (json!({"rawSelector": "spec.nodeName=node-a"}), true),
        (
            json!({"requirements": [{"key": "spec.nodeName", "operator": "In", "values": ["node-a"]}]}),
            true,
        ),
        (json!({"rawSelector": "spec.nodeName=node-b"}), false),
        (json!(null), false),
    ] {
        let review = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": "system:node:node-a", "groups": ["system:nodes"],
                "resourceAttributes": {"verb": "list", "resource": "pods", "fieldSelector": selector}}});
        let (status, _, answer) = TestApiServer::send_json(
            &admin,
            "POST",
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            &review,
        )
        .await
        .unwrap();
        assert_eq!(status, 201, "{answer}");
        assert_eq!(answer["status"]["allowed"], allowed, "{selector}: {answer}");
    }
    let status = Patch::Merge(json!({"status": {"message": "hi"}}));
    assert_eq!(
        code(
            pods_b
                .patch_status("p", &PatchParams::default(), &status)
                .await
        ),
        403
    );
    assert_eq!(
        code(
            pods_a
                .patch_status("p", &PatchParams::default(), &status)
                .await
        ),
        200
    );
    assert_eq!(code(pods_b.delete("p", &Default::default()).await), 403);
    // Nodes: only its own, to write and to read (a list or watch names it by a
    // metadata.name selector).
    let nodes_b = Api::<k8s_openapi::api::core::v1::Node>::all(node_b.clone());
    assert_eq!(code(nodes_b.list(&ListParams::default()).await), 403);
    let own_node = ListParams::default().fields("metadata.name=node-b");
    assert_eq!(code(nodes_b.list(&own_node).await), 200);
    let other_node = ListParams::default().fields("metadata.name=node-a");
    assert_eq!(code(nodes_b.list(&other_node).await), 403);
    assert_eq!(code(nodes_b.get("node-a").await), 403);
    let node = |n: &str| -> k8s_openapi::api::core::v1::Node {
        serde_json::from_value(json!({"metadata": {"name": n}})).unwrap()
    };
    assert_eq!(
        code(
            nodes_b
                .create(&PostParams::default(), &node("node-a"))
                .await
        ),
        403
    );
    assert_eq!(
        code(
            nodes_b
                .create(&PostParams::default(), &node("node-b"))
                .await
        ),
        200
    );
    // Not a mirror pod: a node may not create it.
    let mut own = pod.clone();
    own.metadata.name = Some("q".into());
    own.spec.as_mut().unwrap().node_name = Some("node-b".into());
    assert_eq!(code(pods_b.create(&PostParams::default(), &own).await), 403);
    server.stop().await;
}

/// A PUT that creates (a kind upstream creates on update) needs `create` as well as
/// `update`, as upstream's update handler asks the authorizer for both.
#[tokio::test]
async fn a_put_that_creates_needs_create_permission() {
    let server = TestApiServer::start().await.unwrap();
    let admin = server.client.clone();
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "update-endpoints", "namespace": "default"},
        "rules": [{"apiGroups": [""], "resources": ["endpoints"], "verbs": ["get", "update"]}]
    }))
    .unwrap();
    Api::<Role>::namespaced(admin.clone(), "default")
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    bind(
        &admin,
        "default",
        "updater",
        "Role",
        "update-endpoints",
        "updater",
    )
    .await;
    let updater = server.client_as("updater", &[]).await.unwrap();
    let put = |client: kube::Client, name: &'static str| async move {
        let body = json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": name}});
        let (code, _, _) = TestApiServer::send_json(
            &client,
            "PUT",
            &format!("/api/v1/namespaces/default/endpoints/{name}"),
            &body,
        )
        .await
        .unwrap();
        code
    };
    // The role reaches the authorizer through the watch cache.
    let (code, _, _) = TestApiServer::send_json(
        &admin,
        "PUT",
        "/api/v1/namespaces/default/endpoints/existing",
        &json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "existing"}}),
    )
    .await
    .unwrap();
    assert_eq!(code, 201);
    eventually("the role to allow updates", || {
        let updater = updater.clone();
        async move { put(updater, "existing").await == 200 }
    })
    .await;
    assert_eq!(put(updater.clone(), "missing").await, 403);
    assert_eq!(put(admin.clone(), "missing").await, 201);
    assert_eq!(put(updater, "missing").await, 200);
}

fn forbidden_message<T>(r: Result<T, kube::Error>) -> String {
    match r {
        Err(kube::Error::Api(s)) if s.code == 403 => s.message,
        Err(e) => panic!("not a 403: {e}"),
        Ok(_) => panic!("allowed"),
    }
}

/// Upstream's authorizers say why: a refusal's reasons end the 403 message (the Node
/// authorizer's, RBAC's unresolvable roles), an access review carries the reason of
/// each decision (RBAC names the binding that allowed), and a rules review says when
/// an authorizer cannot list its rules.
#[tokio::test]
async fn authorizers_give_their_reasons() {
    let server = TestApiServer::start().await.unwrap();
    let admin = server.client.clone();
    let node_a = server
        .client_as("system:node:node-a", &["system:nodes"])
        .await
        .unwrap();
    assert_eq!(
        forbidden_message(
            Api::<Pod>::all(node_a.clone())
                .list(&ListParams::default())
                .await
        ),
        "pods is forbidden: User \"system:node:node-a\" cannot list resource \"pods\" in API \
         group \"\" at the cluster scope: can only list/watch pods with spec.nodeName field \
         selector"
    );
    assert_eq!(
        forbidden_message(
            Api::<k8s_openapi::api::core::v1::Node>::all(node_a.clone())
                .get("node-b")
                .await
        ),
        "nodes \"node-b\" is forbidden: User \"system:node:node-a\" cannot get resource \
         \"nodes\" in API group \"\" at the cluster scope: node 'node-a' cannot read \
         'node-b', only its own Node object"
    );

    // A binding to a role that does not exist: RBAC's reason.
    bind(&admin, "default", "dangling", "Role", "absent", "bob").await;
    let bob = server.client_as("bob", &[]).await.unwrap();
    let bobs_config_maps = Api::<ConfigMap>::namespaced(bob.clone(), "default");
    let want = "configmaps \"x\" is forbidden: User \"bob\" cannot get resource \"configmaps\" \
                in API group \"\" in the namespace \"default\": RBAC: \
                role.rbac.authorization.k8s.io \"absent\" not found";
    let mut last = String::new();
    for _ in 0..100 {
        last = forbidden_message(bobs_config_maps.get("x").await);
        if last == want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(last, want);
    // What looks like HTML stays out of the message.
    let (status, _, answer) =
        TestApiServer::send_json(&bob, "GET", "/healthz%3Cb%3E/x&y", &json!(null))
            .await
            .unwrap();
    assert_eq!(status, 403, "{answer}");
    assert_eq!(
        answer["message"],
        "forbidden: User \"bob\" cannot get path \"/healthz&lt;b&gt;/x&amp;y\""
    );

    // Access reviews: the allowing binding, and a refusal's reason.
    bind(&admin, "default", "reads", "ClusterRole", "view", "bob").await;
    let review = |user: &str, groups: &[&str], verb: &str, resource: &str| {
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": user, "groups": groups,
                "resourceAttributes": {"namespace": "default", "verb": verb, "resource": resource}}})
    };
    let mut answer = json!(null);
    for _ in 0..100 {
        answer = TestApiServer::send_json(
            &admin,
            "POST",
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            &review("bob", &[], "list", "pods"),
        )
        .await
        .unwrap()
        .2;
        if answer["status"]["allowed"] == true {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        answer["status"],
        json!({"allowed": true,
            "reason": "RBAC: allowed by RoleBinding \"reads/default\" of ClusterRole \"view\" to User \"bob\""})
    );
    let (_, _, answer) = TestApiServer::send_json(
        &admin,
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        &review("system:node:node-a", &["system:nodes"], "get", "secrets"),
    )
    .await
    .unwrap();
    assert_eq!(
        answer["status"],
        json!({"allowed": false, "reason": "No Object name found"})
    );

    // The RBAC storage reads roles through the registry: its wording is the plural's.
    let role: Role = serde_json::from_value(json!({"metadata": {"name": "binder"},
        "rules": [{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["rolebindings", "roles"],
            "verbs": ["create"]}]}))
    .unwrap();
    Api::<Role>::namespaced(admin.clone(), "default")
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    bind(&admin, "default", "binds", "Role", "binder", "bob").await;
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "to-nothing"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "nothing-here"},
        "subjects": [{"kind": "User", "name": "carol", "apiGroup": "rbac.authorization.k8s.io"}]});
    let bindings = "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings";
    let mut answer = (0, json!(null));
    for _ in 0..100 {
        let (code, _, body) = TestApiServer::send_json(&bob, "POST", bindings, &binding)
            .await
            .unwrap();
        answer = (code, body);
        if code != 403 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(answer.0, 404, "{}", answer.1);
    assert_eq!(
        answer.1["message"],
        "roles.rbac.authorization.k8s.io \"nothing-here\" not found"
    );
    let grab = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "grab"},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]});
    let (code, _, body) = TestApiServer::send_json(
        &bob,
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles",
        &grab,
    )
    .await
    .unwrap();
    assert_eq!(code, 403, "{body}");
    assert!(
        body["message"].as_str().unwrap().ends_with(
            "; resolution errors: [roles.rbac.authorization.k8s.io \"absent\" not found]"
        ),
        "{body}"
    );

    // A VolumeAttachment is read only by the node it attaches to.
    let attachment = json!({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
        "metadata": {"name": "va-b"},
        "spec": {"attacher": "csi.example.com", "nodeName": "node-b",
            "source": {"persistentVolumeName": "pv-1"}}});
    let (code, _, body) = TestApiServer::send_json(
        &admin,
        "POST",
        "/apis/storage.k8s.io/v1/volumeattachments",
        &attachment,
    )
    .await
    .unwrap();
    assert_eq!(code, 201, "{body}");
    let node_b = server
        .client_as("system:node:node-b", &["system:nodes"])
        .await
        .unwrap();
    let va = "/apis/storage.k8s.io/v1/volumeattachments/va-b";
    let mut code = 0;
    for _ in 0..100 {
        code = TestApiServer::send_json(&node_b, "GET", va, &json!(null))
            .await
            .unwrap()
            .0;
        if code == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(code, 200);
    let (code, _, body) = TestApiServer::send_json(&node_a, "GET", va, &json!(null))
        .await
        .unwrap();
    assert_eq!(code, 403);
    assert_eq!(
        body["message"],
        "volumeattachments.storage.k8s.io \"va-b\" is forbidden: User \"system:node:node-a\" \
         cannot get resource \"volumeattachments\" in API group \"storage.k8s.io\" at the \
         cluster scope: no relationship found between node 'node-a' and this object"
    );

    // Rules reviews: a node's rules are not listed by the Node authorizer.
    let rules_review = json!({"apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectRulesReview", "spec": {"namespace": "default"}});
    let path = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews";
    let (status, _, answer) = TestApiServer::send_json(&node_a, "POST", path, &rules_review)
        .await
        .unwrap();
    assert_eq!(status, 201, "{answer}");
    assert_eq!(answer["status"]["incomplete"], true);
    assert_eq!(
        answer["status"]["evaluationError"],
        "node authorizer does not support user rule resolution"
    );
    let (_, _, answer) = TestApiServer::send_json(&bob, "POST", path, &rules_review)
        .await
        .unwrap();
    assert_eq!(answer["status"]["incomplete"], false);
    assert_eq!(
        answer["status"]["evaluationError"],
        "role.rbac.authorization.k8s.io \"absent\" not found"
    );
    server.stop().await;
}
