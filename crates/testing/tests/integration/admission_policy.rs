//! ValidatingAdmissionPolicy on the test apiserver: upstream's documentation example
//! (Deployments with more than 5 replicas denied in namespaces labelled
//! `environment: test`), a policy with parameters from a ConfigMap, the Warn action's
//! `Warning` header, and a policy whose expression does not compile refused at create.

use ferrokube_testing::TestApiServer;
use serde_json::{Value, json};

const POLICIES: &str = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies";
const BINDINGS: &str = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings";

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

fn policy(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name}, "spec": spec})
}

fn binding(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name}, "spec": spec})
}

fn deployments_rule() -> Value {
    json!({"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
        "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]})
}

fn deployment(name: &str, replicas: i64) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})
}

async fn namespace(c: &kube::Client, name: &str, labels: Value) {
    let (code, _, v) = send(
        c,
        "POST",
        "/api/v1/namespaces",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
}

async fn create_deployment(
    c: &kube::Client,
    ns: &str,
    name: &str,
    replicas: i64,
) -> (u16, Vec<String>, Value) {
    send(
        c,
        "POST",
        &format!("/apis/apps/v1/namespaces/{ns}/deployments"),
        deployment(name, replicas),
    )
    .await
}

#[tokio::test]
async fn policies_deny_warn_take_params_and_must_compile() {
    let server = TestApiServer::start().await.unwrap();
    let c = server.client.clone();

    // A policy that does not compile is refused with the compiler's message.
    let (code, _, v) = send(
        &c,
        "POST",
        POLICIES,
        policy(
            "broken.example.com",
            json!({
        "matchConstraints": deployments_rule(),
        "validations": [{"expression": "object.spec.replicas <="}]}),
        ),
    )
    .await;
    assert_eq!(code, 422, "{v}");
    let message = v["message"].as_str().unwrap();
    assert!(
        message.starts_with("ValidatingAdmissionPolicy.admissionregistration.k8s.io \"broken.example.com\" is invalid: spec.validations[0].expression: Invalid value: \"object.spec.replicas <=\": compilation failed: "),
        "{message}"
    );
    let (code, _, v) = send(
        &c,
        "POST",
        POLICIES,
        policy(
            "undeclared.example.com",
            json!({
        "matchConstraints": deployments_rule(),
        "validations": [{"expression": "objekt.spec.replicas < 5"}]}),
        ),
    )
    .await;
    assert_eq!(code, 422, "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("undeclared reference to 'objekt'"),
        "{v}"
    );

    // Upstream's compile environment: `request` is typed, and a validation must be a
    // bool (a field of `object`, which is dyn here, is not).
    for (name, expression, wanted) in [
        (
            "typo.example.com",
            "request.operaton == 'CREATE'",
            "compilation failed: ERROR: <input>:1:8: undefined field 'operaton'",
        ),
        (
            "dyn.example.com",
            "object.spec.paused",
            "Invalid value: \"object.spec.paused\": must evaluate to bool but got dyn",
        ),
        (
            "params.example.com",
            "params.max > 1",
            "undeclared reference to 'params'",
        ),
    ] {
        let (code, _, v) = send(
            &c,
            "POST",
            POLICIES,
            policy(
                name,
                json!({"matchConstraints": deployments_rule(),
                    "validations": [{"expression": expression}]}),
            ),
        )
        .await;
        assert_eq!(code, 422, "{v}");
        assert!(v["message"].as_str().unwrap().contains(wanted), "{v}");
    }

    // An expression whose tree would be thousands of levels deep is refused as cel-go
    // refuses it; compiling it used to overflow a worker's stack and abort the server.
    let chain = vec!["1"; 20_000].join("+");
    let (code, _, v) = send(
        &c,
        "POST",
        POLICIES,
        policy(
            "deep.example.com",
            json!({
        "matchConstraints": deployments_rule(),
        "validations": [{"expression": format!("{chain} > 0")}]}),
        ),
    )
    .await;
    assert_eq!(code, 422, "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .ends_with("compilation failed: ERROR: <input>:-1:0: max recursion depth exceeded"),
        "{v}"
    );

    // Upstream's documentation example.
    let (code, _, v) = send(
        &c,
        "POST",
        POLICIES,
        policy(
            "demo-policy.example.com",
            json!({
        "failurePolicy": "Fail",
        "matchConstraints": deployments_rule(),
        "validations": [{"expression": "object.spec.replicas <= 5"}]}),
        ),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    assert_eq!(v["spec"]["matchConstraints"]["matchPolicy"], "Equivalent");
    assert_eq!(v["metadata"]["generation"], 1);
    let (code, _, v) = send(
        &c,
        "POST",
        BINDINGS,
        binding(
            "demo-binding-test.example.com",
            json!({
        "policyName": "demo-policy.example.com",
        "validationActions": ["Deny"],
        "matchResources": {"namespaceSelector": {"matchLabels": {"environment": "test"}}}}),
        ),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    let (code, _, v) = send(
        &c,
        "GET",
        &format!("{POLICIES}/demo-policy.example.com/status"),
        Value::Null,
    )
    .await;
    assert_eq!(code, 200, "{v}");

    namespace(&c, "test", json!({"environment": "test"})).await;
    namespace(&c, "prod", json!({"environment": "prod"})).await;
    let (code, _, v) = create_deployment(&c, "test", "nginx", 6).await;
    assert_eq!(code, 422, "{v}");
    assert_eq!(v["reason"], "Invalid");
    assert_eq!(
        v["message"],
        "deployments.apps \"nginx\" is forbidden: ValidatingAdmissionPolicy 'demo-policy.example.com' with binding 'demo-binding-test.example.com' denied request: failed expression: object.spec.replicas <= 5"
    );
    assert_eq!(
        v["details"]["causes"][0]["message"],
        "ValidatingAdmissionPolicy 'demo-policy.example.com' with binding 'demo-binding-test.example.com' denied request: failed expression: object.spec.replicas <= 5"
    );
    let (code, _, v) = create_deployment(&c, "test", "nginx", 3).await;
    assert_eq!(code, 201, "{v}");
    // Scaling past the limit is an UPDATE the policy also sees.
    let mut over = v.clone();
    over["spec"]["replicas"] = json!(7);
    let (code, _, v) = send(
        &c,
        "PUT",
        "/apis/apps/v1/namespaces/test/deployments/nginx",
        over,
    )
    .await;
    assert_eq!(code, 422, "{v}");
    // Outside the binding's namespaces the policy does not apply.
    let (code, _, v) = create_deployment(&c, "prod", "nginx", 6).await;
    assert_eq!(code, 201, "{v}");

    // A changed policy applies from the next request on.
    let path = format!("{POLICIES}/demo-policy.example.com");
    let (code, _, mut current) = send(&c, "GET", &path, Value::Null).await;
    assert_eq!(code, 200, "{current}");
    current["spec"]["validations"][0]["expression"] = json!("object.spec.replicas <= 6");
    let (code, _, v) = send(&c, "PUT", &path, current).await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["metadata"]["generation"], 2);
    let (code, _, v) = create_deployment(&c, "test", "six", 6).await;
    assert_eq!(code, 201, "{v}");
    let (code, _, v) = create_deployment(&c, "test", "seven", 7).await;
    assert_eq!(code, 422, "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .ends_with("denied request: failed expression: object.spec.replicas <= 6"),
        "{v}"
    );

    // Parameters from a ConfigMap, by name, in the namespace of the request.
    namespace(&c, "limited", json!({"limits": "on"})).await;
    let (code, _, v) = send(
        &c,
        "POST",
        POLICIES,
        policy(
            "max-replicas.example.com",
            json!({
        "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
        "matchConstraints": deployments_rule(),
        "variables": [{"name": "max", "expression": "int(params.data.maxReplicas)"}],
        "validations": [{"expression": "object.spec.replicas <= variables.max",
            "messageExpression": "'replicas must be at most ' + string(variables.max)",
            "reason": "Forbidden"}]}),
        ),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    let (code, _, v) = send(
        &c,
        "POST",
        BINDINGS,
        binding(
            "max-replicas-binding",
            json!({
        "policyName": "max-replicas.example.com",
        "validationActions": ["Deny"],
        "paramRef": {"name": "replica-limits", "parameterNotFoundAction": "Deny"},
        "matchResources": {"namespaceSelector": {"matchLabels": {"limits": "on"}}}}),
        ),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    // No parameter object yet: the binding denies.
    let (code, _, v) = create_deployment(&c, "limited", "web", 1).await;
    assert_eq!(code, 422, "{v}");
    assert_eq!(
        v["message"],
        "deployments.apps \"web\" is forbidden: ValidatingAdmissionPolicy 'max-replicas.example.com' with binding 'max-replicas-binding' denied request: failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"
    );
    let (code, _, v) = send(
        &c,
        "POST",
        "/api/v1/namespaces/limited/configmaps",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "replica-limits"},
            "data": {"maxReplicas": "2"}}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    let (code, _, v) = create_deployment(&c, "limited", "web", 3).await;
    assert_eq!(code, 403, "{v}");
    assert_eq!(v["reason"], "Forbidden");
    assert_eq!(
        v["message"],
        "deployments.apps \"web\" is forbidden: ValidatingAdmissionPolicy 'max-replicas.example.com' with binding 'max-replicas-binding' denied request: replicas must be at most 2"
    );
    let (code, _, v) = create_deployment(&c, "limited", "web", 2).await;
    assert_eq!(code, 201, "{v}");

    // Warn: admitted, with the failure as a Warning header.
    namespace(&c, "warned", json!({"warn": "on"})).await;
    let (code, _, v) = send(&c, "POST", POLICIES, policy("no-latest.example.com", json!({
        "matchConstraints": deployments_rule(),
        "matchConditions": [{"name": "not-system", "expression": "!request.userInfo.username.startsWith('system:node:')"}],
        "validations": [{"expression": "object.spec.template.spec.containers.all(c, !c.image.endsWith(':latest') && c.image.contains(':'))",
            "message": "images must be pinned"}]}))).await;
    assert_eq!(code, 201, "{v}");
    let (code, _, v) = send(
        &c,
        "POST",
        BINDINGS,
        binding(
            "no-latest-warn",
            json!({
        "policyName": "no-latest.example.com",
        "validationActions": ["Warn"],
        "matchResources": {"namespaceSelector": {"matchLabels": {"warn": "on"}}}}),
        ),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    let (code, warnings, v) = create_deployment(&c, "warned", "web", 1).await;
    assert_eq!(code, 201, "{v}");
    assert_eq!(
        warnings,
        [
            "299 - \"Validation failed for ValidatingAdmissionPolicy 'no-latest.example.com' with binding 'no-latest-warn': images must be pinned\""
        ]
    );
    let mut pinned = deployment("pinned", 1);
    pinned["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.27");
    let (code, warnings, v) = send(
        &c,
        "POST",
        "/apis/apps/v1/namespaces/warned/deployments",
        pinned,
    )
    .await;
    assert_eq!(code, 201, "{v}");
    assert!(warnings.is_empty(), "{warnings:?}");

    // Deleting the binding lifts the policy.
    let (code, _, v) = send(
        &c,
        "DELETE",
        &format!("{BINDINGS}/demo-binding-test.example.com"),
        Value::Null,
    )
    .await;
    assert_eq!(code, 200, "{v}");
    let (code, _, v) = create_deployment(&c, "test", "big", 6).await;
    assert_eq!(code, 201, "{v}");
    server.stop().await;
}

/// Binds `user` to a new ClusterRole granting `verbs` on `resources` in `namespace`.
async fn grant(c: &kube::Client, namespace: &str, user: &str, resources: &[&str], verbs: &[&str]) {
    let role = format!("{user}-{}", resources.join("-"));
    let (code, _, v) = send(
        c,
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": role},
            "rules": [{"apiGroups": [""], "resources": resources, "verbs": verbs}]}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    let (code, _, v) = send(
        c,
        "POST",
        &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings"),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
}

fn config_map(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})
}

fn config_maps_rule() -> Value {
    json!({"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
        "operations": ["CREATE"], "resources": ["configmaps"]}]})
}

#[tokio::test]
async fn the_authorizer_variable_asks_rbac_for_the_requesting_user() {
    let server = TestApiServer::start().await.unwrap();
    let c = server.client.clone();
    namespace(&c, "authz", json!({})).await;
    // Both may create ConfigMaps; only alice may update Secrets.
    for user in ["alice", "bob"] {
        grant(&c, "authz", user, &["configmaps"], &["create"]).await;
    }
    grant(&c, "authz", "alice", &["secrets"], &["update"]).await;

    let (code, _, v) = send(&c, "POST", POLICIES, policy("secret-updaters-only.example.com", json!({
        "matchConstraints": config_maps_rule(),
        "validations": [
            {"expression": "authorizer.group('').resource('secrets').namespace(object.metadata.namespace).check('update').allowed()",
             "messageExpression": "request.userInfo.username + ' may not update secrets'",
             "reason": "Forbidden"},
            // The request's own resource: granted to both, so never the reason.
            {"expression": "authorizer.requestResource.check('create').allowed() && !authorizer.requestResource.check('create').errored()"},
            // Nobody here may read /metrics.
            {"expression": "!authorizer.path('/metrics').check('get').allowed()"}]}))).await;
    assert_eq!(code, 201, "{v}");
    let (code, _, v) = send(
        &c,
        "POST",
        BINDINGS,
        binding(
            "secret-updaters-only",
            json!({"policyName": "secret-updaters-only.example.com", "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "authz"}}}}),
        ),
    )
    .await;
    assert_eq!(code, 201, "{v}");

    let alice = server.client_as("alice", &[]).await.unwrap();
    let bob = server.client_as("bob", &[]).await.unwrap();
    let path = "/api/v1/namespaces/authz/configmaps";
    let (code, _, v) = send(&alice, "POST", path, config_map("by-alice", json!({}))).await;
    assert_eq!(code, 201, "{v}");
    let (code, _, v) = send(&bob, "POST", path, config_map("by-bob", json!({}))).await;
    assert_eq!(code, 403, "{v}");
    assert_eq!(
        v["message"],
        "configmaps \"by-bob\" is forbidden: ValidatingAdmissionPolicy 'secret-updaters-only.example.com' with binding 'secret-updaters-only' denied request: bob may not update secrets"
    );
    // Once RBAC grants bob the verb, the policy admits him too.
    grant(&c, "authz", "bob", &["secrets"], &["update"]).await;
    let mut admitted = false;
    for _ in 0..50 {
        let (code, _, _) = send(&bob, "POST", path, config_map("by-bob", json!({}))).await;
        if code == 201 {
            admitted = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(admitted, "bob was not admitted after the grant");
    server.stop().await;
}

#[tokio::test]
async fn an_expression_past_the_cost_limit_fails_under_the_failure_policy() {
    let server = TestApiServer::start().await.unwrap();
    let c = server.client.clone();
    namespace(&c, "costly", json!({})).await;
    // Every pair of the comma-separated items: quadratic in their number.
    let expression = "object.data.items.split(',').all(x, object.data.items.split(',').all(y, x == y || x != y))";
    for (name, failure_policy) in [("strict", "Fail"), ("lenient", "Ignore")] {
        let (code, _, v) = send(
            &c,
            "POST",
            POLICIES,
            policy(
                &format!("{name}.example.com"),
                json!({"failurePolicy": failure_policy,
                    "matchConstraints": config_maps_rule(),
                    "matchConditions": [{"name": "targeted", "expression": format!("object.metadata.name.startsWith('{name}')")}],
                    "validations": [{"expression": expression}]}),
            ),
        )
        .await;
        assert_eq!(code, 201, "{v}");
        let (code, _, v) = send(
            &c,
            "POST",
            BINDINGS,
            binding(
                name,
                json!({"policyName": format!("{name}.example.com"), "validationActions": ["Deny"]}),
            ),
        )
        .await;
        assert_eq!(code, 201, "{v}");
    }
    let path = "/api/v1/namespaces/costly/configmaps";
    let few = (0..10).map(|i| i.to_string()).collect::<Vec<_>>().join(",");
    let many = (0..2000)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let (code, _, v) = send(
        &c,
        "POST",
        path,
        config_map("strict-few", json!({"items": few})),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    let (code, _, v) = send(
        &c,
        "POST",
        path,
        config_map("strict-many", json!({"items": many})),
    )
    .await;
    assert_eq!(code, 422, "{v}");
    assert_eq!(
        v["message"],
        format!(
            "configmaps \"strict-many\" is forbidden: ValidatingAdmissionPolicy 'strict.example.com' with binding 'strict' denied request: expression '{expression}' resulted in error: operation cancelled: actual cost limit exceeded"
        )
    );
    // Under Ignore the same evaluation admits.
    let (code, _, v) = send(
        &c,
        "POST",
        path,
        config_map("lenient-many", json!({"items": many})),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    server.stop().await;
}
