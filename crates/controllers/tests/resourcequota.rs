//! The resourcequota controller against a real in-process apiserver with the
//! ResourceQuota admission plugin: status.hard follows spec.hard, status.used counts
//! the namespace's objects (and drops when they go), and admission refuses what would
//! exceed it. Every wait is bounded in time.

use std::time::{Duration, Instant};

use anyhow::bail;
use ferrokube_controllers::manager::{Manager, ManagerConfig};
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::core::v1::{ConfigMap, ResourceQuota};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// Polls until the quota's status.used has `used` configmaps, for at most 30 s.
async fn wait_used(quotas: &Api<ResourceQuota>, used: &str) -> anyhow::Result<ResourceQuota> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let q = quotas.get("objects").await?;
        let got = q
            .status
            .as_ref()
            .and_then(|s| s.used.as_ref())
            .and_then(|u| u.get("configmaps"))
            .map(|q| q.0.clone());
        if got.as_deref() == Some(used) {
            return Ok(q);
        }
        if Instant::now() > deadline {
            bail!("status.used.configmaps is {got:?}, not {used}, after 30s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keeps_status_used_right_and_admission_enforces_it() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let c = srv.client.clone();
    let cancel = CancellationToken::new();
    let cfg = ManagerConfig {
        controllers: vec!["resourcequota".into()],
        ..Default::default()
    };
    let manager = Manager::start(c.clone(), &cfg, cancel.clone()).await?;
    assert_eq!(manager.enabled, vec!["resourcequota-controller"]);

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
