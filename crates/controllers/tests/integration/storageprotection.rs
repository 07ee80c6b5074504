//! The pvc-protection and pv-protection controllers on the test apiserver, under
//! their own ServiceAccounts, with the StorageObjectInUseProtection admission plugin
//! putting the finalizers on. No kubelet and no PV controller run: the test sets
//! pods' nodes and volumes' phases itself. Every wait is bounded.
//!
//! "Stays" is shown against a control object deleted after it: the controllers run
//! one worker, so once the later, unused object is gone the earlier one was decided.

use crate::support;

use std::time::Duration;

use ferrokube_controllers::manager::{Manager, ManagerConfig};
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::wait_for;
use tokio_util::sync::CancellationToken;

fn claim(name: &str) -> anyhow::Result<PersistentVolumeClaim> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "",
                 "resources": {"requests": {"storage": "1Gi"}}}
    }))?)
}

fn volume(name: &str) -> anyhow::Result<PersistentVolume> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "hostPath": {"path": format!("/tmp/{name}")}}
    }))?)
}

async fn start(srv: &TestApiServer, cancel: &CancellationToken) -> anyhow::Result<Manager> {
    let cfg = ManagerConfig {
        controllers: vec!["pvc-protection".into(), "pv-protection".into()],
        connection: Some(srv.kube_config().await?),
        use_service_account_credentials: true,
        ..Default::default()
    };
    let manager_client = srv.client_as("system:kube-controller-manager", &[]).await?;
    Ok(Manager::start(manager_client, &cfg, cancel.clone()).await?)
}

fn finalizers<K: kube::Resource>(o: &K) -> Vec<String> {
    o.meta().finalizers.clone().unwrap_or_default()
}

#[tokio::test]
async fn claims_in_use_by_a_pod_wait_for_it() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let c = srv.client.clone();
    let cancel = CancellationToken::new();
    let manager = start(&srv, &cancel).await?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    let pp = PostParams::default();
    for name in ["data", "free", "bare"] {
        let created = claims.create(&pp, &claim(name)?).await?;
        assert_eq!(finalizers(&created), ["kubernetes.io/pvc-protection"]);
    }
    pods.create(
        &pp,
        &serde_json::from_value(json!({
            "metadata": {"name": "user"},
            "spec": {"nodeName": "node-a",
                     "containers": [{"name": "c", "image": "busybox"}],
                     "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "data"}}]}
        }))?,
    )
    .await?;
    pods.patch_status(
        "user",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running"}})),
    )
    .await?;

    // A claim that lost its finalizer (created before the plugin was on) gets it back.
    claims
        .patch(
            "bare",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await?;
    wait_for(30, "the finalizer put back on \"bare\"", || async {
        let c = claims.get("bare").await?;
        Ok((finalizers(&c) == ["kubernetes.io/pvc-protection"]).then_some(()))
    })
    .await?;

    claims.delete("data", &DeleteParams::default()).await?;
    claims.delete("free", &DeleteParams::default()).await?;
    wait_for(30, "the unused claim deleted", || async {
        Ok(claims.get_opt("free").await?.is_none().then_some(()))
    })
    .await?;
    let data = claims.get("data").await?;
    assert!(data.metadata.deletion_timestamp.is_some());
    assert_eq!(finalizers(&data), ["kubernetes.io/pvc-protection"]);

    // The pod goes: the claim follows.
    pods.delete(
        "user",
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        },
    )
    .await?;
    wait_for(30, "the claim deleted after its pod", || async {
        Ok(claims.get_opt("data").await?.is_none().then_some(()))
    })
    .await?;

    cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), manager.wait()).await;
    srv.stop().await;
    Ok(())
}

#[tokio::test]
async fn bound_volumes_stay_released_ones_go() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let c = srv.client.clone();
    let cancel = CancellationToken::new();
    let manager = start(&srv, &cancel).await?;
    let volumes: Api<PersistentVolume> = Api::all(c.clone());
    let pp = PostParams::default();
    for (name, phase) in [("bound", "Bound"), ("released", "Released")] {
        let created = volumes.create(&pp, &volume(name)?).await?;
        assert_eq!(finalizers(&created), ["kubernetes.io/pv-protection"]);
        volumes
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"phase": phase}})),
            )
            .await?;
    }
    volumes.delete("bound", &DeleteParams::default()).await?;
    volumes.delete("released", &DeleteParams::default()).await?;
    wait_for(30, "the released volume deleted", || async {
        Ok(volumes.get_opt("released").await?.is_none().then_some(()))
    })
    .await?;
    let bound = volumes.get("bound").await?;
    assert!(bound.metadata.deletion_timestamp.is_some());
    assert_eq!(finalizers(&bound), ["kubernetes.io/pv-protection"]);

    // Once the claim lets it go, it goes too.
    volumes
        .patch_status(
            "bound",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Released"}})),
        )
        .await?;
    wait_for(30, "the volume deleted once released", || async {
        Ok(volumes.get_opt("bound").await?.is_none().then_some(()))
    })
    .await?;

    cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), manager.wait()).await;
    srv.stop().await;
    Ok(())
}
