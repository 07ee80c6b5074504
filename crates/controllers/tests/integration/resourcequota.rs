//! The resourcequota controller against a real in-process apiserver with the
//! ResourceQuota admission plugin: status.hard follows spec.hard, status.used counts
//! the namespace's objects (and drops when they go), and admission refuses what would
//! exceed it. Every wait is bounded in time.

use std::time::{Duration, Instant};

use anyhow::bail;
use ferrokube_controllers::manager::{Manager, ManagerConfig};
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, ResourceQuota};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// Polls until the quota's status.used has `used` configmaps, for at most 30 s.
async fn wait_used(quotas: &Api<ResourceQuota>, used: &str) -> anyhow::Result<ResourceQuota> {
    wait_used_of(quotas, "objects", "configmaps", used).await
}

/// Polls until quota `name`'s status.used has `used` of `resource`, for at most 30 s.
async fn wait_used_of(
    quotas: &Api<ResourceQuota>,
    name: &str,
    resource: &str,
    used: &str,
) -> anyhow::Result<ResourceQuota> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let q = quotas.get(name).await?;
        let got = q
            .status
            .as_ref()
            .and_then(|s| s.used.as_ref())
            .and_then(|u| u.get(resource))
            .map(|q| q.0.clone());
        if got.as_deref() == Some(used) {
            return Ok(q);
        }
        if Instant::now() > deadline {
            bail!("status.used.{resource} is {got:?}, not {used}, after 30s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Starts the resourcequota controller alone against `client`.
async fn start_controller(
    client: &kube::Client,
    cancel: &CancellationToken,
) -> anyhow::Result<Manager> {
    let cfg = ManagerConfig {
        controllers: vec!["resourcequota".into()],
        ..Default::default()
    };
    let manager = Manager::start(client.clone(), &cfg, cancel.clone()).await?;
    assert_eq!(manager.enabled, vec!["resourcequota-controller"]);
    Ok(manager)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keeps_status_used_right_and_admission_enforces_it() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let c = srv.client.clone();
    let cancel = CancellationToken::new();
    let _manager = start_controller(&c, &cancel).await?;

    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    let cm = |name: &str| -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": name}})).unwrap()
    };
    // kube-root-ca.crt is not published here (no root CA): the namespace starts empty.
    cms.create(&PostParams::default(), &cm("before")).await?;
    let quotas: Api<ResourceQuota> = Api::namespaced(c.clone(), "default");
    quotas
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "objects"},
                "spec": {"hard": {"configmaps": "2", "pods": "3"}}}))?,
        )
        .await?;
    let q = wait_used(&quotas, "1").await?;
    let status = q.status.unwrap();
    assert_eq!(status.hard.unwrap()["configmaps"].0, "2");
    assert_eq!(status.used.unwrap()["pods"].0, "0");

    // Admission charges the second; the third is refused.
    cms.create(&PostParams::default(), &cm("second")).await?;
    wait_used(&quotas, "2").await?;
    match cms.create(&PostParams::default(), &cm("third")).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403);
            assert_eq!(
                s.message,
                "configmaps \"third\" is forbidden: exceeded quota: objects, requested: configmaps=1, used: configmaps=2, limited: configmaps=2"
            );
        }
        other => bail!("over quota: {other:?}"),
    }
    // Deletes are not charged back by admission: the controller recounts.
    cms.delete("before", &DeleteParams::default()).await?;
    wait_used(&quotas, "1").await?;
    // Admission reads quotas from the watch cache, a moment behind.
    let deadline = Instant::now() + Duration::from_secs(10);
    while let Err(e) = cms.create(&PostParams::default(), &cm("third")).await {
        if Instant::now() > deadline {
            bail!("third configmap still refused after the recount: {e}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    cancel.cancel();
    Ok(())
}

/// `count/deployments.apps`: no typed informer here counts deployments; the
/// controller finds the resource through discovery and watches it, so the count is
/// in `status.used` (admission refused every deployment with "status unknown" before)
/// and goes down when one is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_any_resource_named_by_count() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let c = srv.client.clone();
    let cancel = CancellationToken::new();
    let _manager = start_controller(&c, &cancel).await?;

    let deployments: Api<Deployment> = Api::namespaced(c.clone(), "default");
    let deployment = |name: &str| -> Deployment {
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}))
        .unwrap()
    };
    deployments
        .create(&PostParams::default(), &deployment("before"))
        .await?;
    let quotas: Api<ResourceQuota> = Api::namespaced(c.clone(), "default");
    quotas
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "workloads"},
                "spec": {"hard": {"count/deployments.apps": "2", "count/nosuch.example.com": "1"}}}))?,
        )
        .await?;
    let q = wait_used_of(&quotas, "workloads", "count/deployments.apps", "1").await?;
    // A resource nobody serves has no count, as upstream (no evaluator for it).
    let used = q.status.unwrap().used.unwrap();
    assert!(!used.contains_key("count/nosuch.example.com"), "{used:?}");

    // Admission reads quotas from the watch cache, a moment behind the status write.
    let deadline = Instant::now() + Duration::from_secs(10);
    while let Err(e) = deployments
        .create(&PostParams::default(), &deployment("second"))
        .await
    {
        if Instant::now() > deadline {
            bail!("second deployment refused with the count in status.used: {e}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_used_of(&quotas, "workloads", "count/deployments.apps", "2").await?;
    match deployments
        .create(&PostParams::default(), &deployment("third"))
        .await
    {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403);
            assert!(
                s.message.contains("exceeded quota: workloads"),
                "{}",
                s.message
            );
        }
        other => bail!("over quota: {other:?}"),
    }
    // The monitor sees the delete and the controller counts one less.
    deployments
        .delete("before", &DeleteParams::default())
        .await?;
    wait_used_of(&quotas, "workloads", "count/deployments.apps", "1").await?;

    cancel.cancel();
    Ok(())
}
