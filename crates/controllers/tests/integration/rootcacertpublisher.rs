//! The root CA publisher against a real in-process apiserver: every namespace gets
//! `kube-root-ca.crt`, recreated when deleted and restored when edited. Every wait is
//! bounded in time.

use std::time::{Duration, Instant};

use anyhow::bail;
use ferrokube_controllers::manager::{Manager, ManagerConfig};
use ferrokube_controllers::rootcacertpublisher::{DESCRIPTION, DESCRIPTION_ANNOTATION};
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n";

/// Polls until the namespace's kube-root-ca.crt holds exactly the CA and the
/// description, for at most `secs` seconds.
async fn wait_published(cms: &Api<ConfigMap>, secs: u64) -> anyhow::Result<ConfigMap> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(cm) = cms.get_opt("kube-root-ca.crt").await? {
            let data = cm.data.clone().unwrap_or_default();
            let described = cm
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(DESCRIPTION_ANNOTATION))
                .map(String::as_str)
                == Some(DESCRIPTION);
            if data.len() == 1 && data.get("ca.crt").map(String::as_str) == Some(CA) && described {
                return Ok(cm);
            }
        }
        if Instant::now() > deadline {
            bail!("kube-root-ca.crt not published within {secs}s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishes_recreates_and_restores_kube_root_ca() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let c = srv.client.clone();
    let cancel = CancellationToken::new();
    let cfg = ManagerConfig {
        controllers: vec!["root-ca-cert-publisher".into()],
        root_ca: Some(CA.into()),
        ..Default::default()
    };
    let manager = Manager::start(c.clone(), &cfg, cancel.clone()).await?;
    assert_eq!(
        manager.enabled,
        vec!["root-ca-certificate-publisher-controller"]
    );

    // Namespaces that existed before the controller, and a new one.
    wait_published(&Api::namespaced(c.clone(), "default"), 30).await?;
    wait_published(&Api::namespaced(c.clone(), "kube-system"), 30).await?;
    let nss: Api<Namespace> = Api::all(c.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "fresh"}}))?,
    )
    .await?;
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "fresh");
    let first = wait_published(&cms, 30).await?;

    // Deleted: recreated (a new object).
    cms.delete("kube-root-ca.crt", &DeleteParams::default())
        .await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let cm = wait_published(&cms, 30).await?;
        if cm.metadata.uid != first.metadata.uid {
            break;
        }
        if Instant::now() > deadline {
            bail!("kube-root-ca.crt not recreated within 30s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Edited (data tampered, extra key, description dropped): restored.
    cms.patch(
        "kube-root-ca.crt",
        &PatchParams::default(),
        &Patch::Merge(json!({
            "metadata": {"annotations": {DESCRIPTION_ANNOTATION: null}},
            "data": {"ca.crt": "tampered", "extra": "x"}
        })),
    )
    .await?;
    wait_published(&cms, 30).await?;

    cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), manager.wait()).await;
    srv.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_root_ca_the_publisher_does_not_run() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let cancel = CancellationToken::new();
    let cfg = ManagerConfig {
        controllers: vec!["root-ca-cert-publisher".into()],
        ..Default::default()
    };
    let manager = Manager::start(srv.client.clone(), &cfg, cancel.clone()).await?;
    assert!(manager.depths().is_empty());
    cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), manager.wait()).await;
    srv.stop().await;
    Ok(())
}
