//! `--use-service-account-credentials`: each controller writes as its own
//! ServiceAccount `kube-system/<controller>`, authorized by the bootstrap policy's
//! `system:controller:<controller>` binding, while the manager itself runs as
//! `system:kube-controller-manager` (which Ferrokube also binds to every controller
//! role, so a controller falling back to the manager's client would not be denied).
//! Every wait is bounded in time.

use crate::support;

use std::time::Duration;

use ferrokube_controllers::manager::{Manager, ManagerConfig};
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::{FakeNode, wait_for};
use tokio_util::sync::CancellationToken;

const BINDING: &str = "system:controller:deployment-controller";

async fn ready_pods(c: &kube::Client, app: &str) -> anyhow::Result<usize> {
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    Ok(pods
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await?
        .items
        .iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .count())
}

#[tokio::test]
async fn controllers_write_as_their_service_accounts() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let admin = srv.client.clone();
    let cancel = CancellationToken::new();
    FakeNode::start(&admin, "node-a", true, cancel.clone()).await?;

    // The deployment controller's own binding goes; the manager's stays.
    let bindings: Api<ClusterRoleBinding> = Api::all(admin.clone());
    let saved = bindings.get(BINDING).await?;
    bindings.delete(BINDING, &DeleteParams::default()).await?;

    let manager_client = srv.client_as("system:kube-controller-manager", &[]).await?;
    let cfg = ManagerConfig {
        controllers: vec!["deployment".into(), "replicaset".into()],
        connection: Some(srv.kube_config().await?),
        use_service_account_credentials: true,
        ..Default::default()
    };
    let manager = Manager::start(manager_client, &cfg, cancel.clone()).await?;

    // The manager created the controllers' ServiceAccounts.
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), "kube-system");
    sas.get("deployment-controller").await?;
    sas.get("replicaset-controller").await?;

    let deps: Api<Deployment> = Api::namespaced(admin.clone(), "default");
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "nginx:1"}]}
            }
        }
    }))?;
    deps.create(&PostParams::default(), &d).await?;

    // Denied: the deployment controller's reconciles fail and are retried, and no
    // ReplicaSet appears.
    wait_for(30, "a failed deployment reconcile", || async {
        Ok((manager.retries().get("deployment").copied().unwrap_or(0) >= 2).then_some(()))
    })
    .await?;
    let rss: Api<ReplicaSet> = Api::namespaced(admin.clone(), "default");
    assert!(
        rss.list(&ListParams::default()).await?.items.is_empty(),
        "the deployment controller wrote without its ServiceAccount's binding"
    );

    // With the binding back, the rollout completes (the ReplicaSet controller
    // creating the pods as its own ServiceAccount).
    let mut restored = saved.clone();
    restored.metadata.resource_version = None;
    restored.metadata.uid = None;
    restored.metadata.creation_timestamp = None;
    restored.metadata.managed_fields = None;
    bindings.create(&PostParams::default(), &restored).await?;
    wait_for(60, "2 ready pods of web", || async {
        Ok((ready_pods(&admin, "web").await? == 2).then_some(()))
    })
    .await?;

    // A rejected token (its ServiceAccount deleted) is dropped, and the next one is
    // requested after the ServiceAccount is created again.
    sas.delete("deployment-controller", &DeleteParams::default())
        .await?;
    deps.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 3}})),
    )
    .await?;
    wait_for(60, "3 ready pods of web", || async {
        Ok((ready_pods(&admin, "web").await? == 3).then_some(()))
    })
    .await?;
    let recreated = sas.get("deployment-controller").await?;
    assert!(recreated.metadata.deletion_timestamp.is_none());

    cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), manager.wait()).await;
    srv.stop().await;
    Ok(())
}

/// `--kube-api-qps`/`--kube-api-burst`: each controller's client has a bucket of its
/// own, with the manager's credentials and with ServiceAccount ones alike. One client
/// that has spent its burst waits; another, asked for at the same time, does not.
#[tokio::test]
async fn each_controller_client_has_a_rate_limit_of_its_own() -> anyhow::Result<()> {
    use ferrokube_client::config::ClientLimits;
    use ferrokube_controllers::clientbuilder::{ControllerClients, ServiceAccountClients};
    use k8s_openapi::api::core::v1::Namespace;
    use std::sync::Arc;
    use std::time::Instant;

    let srv = TestApiServer::start().await?;
    let config = srv.kube_config().await?;
    // One request at once, then one every two seconds.
    let limits = Some(ClientLimits { qps: 0.5, burst: 1 });
    let builders = [
        ControllerClients::PerController {
            config: Box::new(config.clone()),
            limits,
        },
        ControllerClients::ServiceAccounts(Arc::new(ServiceAccountClients::new(
            config,
            srv.client.clone(),
            limits,
        ))),
    ];
    for builder in builders {
        let first = builder.client("deployment-controller").await?;
        let second = builder.client("replicaset-controller").await?;
        // Any answer of the apiserver will do: a controller's ServiceAccount may be
        // refused the read, but the request went through its client's bucket.
        let get = |c: &kube::Client| {
            let api: Api<Namespace> = Api::all(c.clone());
            async move {
                match api.get("default").await {
                    Ok(_) | Err(kube::Error::Api(_)) => Ok(()),
                    Err(e) => Err(e),
                }
            }
        };
        get(&first).await?;
        let start = Instant::now();
        get(&second).await?;
        let unthrottled = start.elapsed();
        get(&first).await?;
        let throttled = start.elapsed();
        assert!(
            unthrottled < Duration::from_millis(1500),
            "{builder:?}: the second client's first request waited {unthrottled:?}"
        );
        assert!(
            throttled >= Duration::from_millis(1500),
            "{builder:?}: the first client's second request came after {throttled:?}"
        );
    }
    Ok(())
}
