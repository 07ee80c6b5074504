//! The kubelet API's resource check through `delegated::Gate` against a real apiserver:
//! `nodes/<subresource>` SubjectAccessReviews decided by RBAC, any of several attributes
//! enough, anonymous requests refused when disabled, a failed review an error.

use std::time::Duration;

use ferrokube_client::delegated::{CacheTtl, Gate, User};
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, PostParams};
use serde_json::json;

/// The resource check the kubelet makes: `nodes/<subresource>` reviewed against RBAC,
/// any of several attributes enough, anonymous requests refused when disabled, and a
/// failed review an error (not a denial).
#[tokio::test]
async fn resource_attributes_are_reviewed() {
    use ferrokube_client::delegated::{Attributes, Decision, ResourceRequest};
    use k8s_openapi::api::rbac::v1::ClusterRole;

    let srv = TestApiServer::start().await.unwrap();
    let ttl = CacheTtl {
        denied: Duration::ZERO,
        ..CacheTtl::default()
    };
    let gate = Gate::new(
        vec![],
        Some(srv.client.clone()),
        Some(srv.client.clone()),
        ttl,
    )
    .with_anonymous(false);
    assert_eq!(gate.authenticate(None, None).await.unwrap_err().code, 401);
    let alice = User {
        name: "alice".into(),
        uid: String::new(),
        groups: vec!["system:authenticated".into()],
        extra: Default::default(),
    };
    assert_eq!(
        gate.authenticate(None, Some(alice.clone())).await,
        Ok(alice.clone())
    );
    let node = |verb: &str, sub: &str| {
        Attributes::Resource(ResourceRequest {
            verb: verb.into(),
            version: "v1".into(),
            resource: "nodes".into(),
            subresource: sub.into(),
            name: "node-a".into(),
            ..Default::default()
        })
    };
    let pods_then_proxy = [node("get", "pods"), node("get", "proxy")];
    assert!(matches!(
        gate.authorize_any(&alice, &pods_then_proxy).await,
        Ok(Decision::Deny(_))
    ));

    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": "node-proxy-reader"},
        "rules": [{"apiGroups": [""], "resources": ["nodes/proxy"], "verbs": ["get"]}]
    }))
    .unwrap();
    Api::<ClusterRole>::all(srv.client.clone())
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "alice-node-proxy"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
            "name": "node-proxy-reader"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}]
    }))
    .unwrap();
    Api::<ClusterRoleBinding>::all(srv.client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    // nodes/pods is still denied; nodes/proxy, asked next, allows.
    assert!(matches!(
        gate.authorize(&alice, &pods_then_proxy[0]).await,
        Ok(Decision::Deny(_))
    ));
    assert_eq!(
        gate.authorize_any(&alice, &pods_then_proxy).await,
        Ok(Decision::Allow)
    );
    // The verb and the subresource count.
    assert!(matches!(
        gate.authorize_any(&alice, &[node("create", "proxy")]).await,
        Ok(Decision::Deny(_))
    ));
    assert!(matches!(
        gate.authorize_any(&alice, &[node("get", "stats")]).await,
        Ok(Decision::Deny(_))
    ));
    // system:masters without a review, even with no client for reviews.
    let offline = Gate::new(vec![], None, None, CacheTtl::default());
    let admin = User {
        groups: vec!["system:masters".into()],
        ..alice.clone()
    };
    assert_eq!(
        offline.authorize_any(&admin, &pods_then_proxy).await,
        Ok(Decision::Allow)
    );
    assert_eq!(
        offline.authorize_any(&alice, &pods_then_proxy).await,
        Ok(Decision::Deny(String::new()))
    );
    // Without a client for token reviews, a token is ignored (anonymous by default).
    assert_eq!(
        offline
            .authenticate(Some("whatever"), None)
            .await
            .unwrap()
            .name,
        "system:anonymous"
    );
    // A review that cannot be made is an error.
    srv.stop().await;
    let dead =
        kube::Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().unwrap())).unwrap();
    let failing = Gate::new(vec![], None, Some(dead), CacheTtl::default());
    assert!(
        failing
            .authorize_any(&alice, &pods_then_proxy)
            .await
            .is_err()
    );
}
