//! The ephemeral volume controller on the test apiserver, under its own
//! ServiceAccount (`system:controller:ephemeral-volume-controller`), with the garbage
//! collector and PVC protection: a pod's ephemeral volume gets its claim from the
//! template, owned by the pod; a deleted claim comes back; a claim of that name the pod
//! does not own is refused with upstream's event; deleting the pod deletes the claim.
//! No scheduler or kubelet runs: the pods stay unscheduled. Every wait is bounded.

use crate::support;

use ferrokube_controllers::manager::{Manager, ManagerConfig};
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;
use support::wait_for;
use tokio_util::sync::CancellationToken;

fn pod(name: &str) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "containers": [{"name": "c", "image": "busybox",
                            "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}],
            "volumes": [
                {"name": "cfg", "emptyDir": {}},
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {
                    "metadata": {"labels": {"app": name}, "annotations": {"note": "from the template"}},
                    "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "",
                             "resources": {"requests": {"storage": "1Gi"}}}}}}]
        }
    }))?)
}

async fn claim_of(
    claims: &Api<PersistentVolumeClaim>,
    name: &str,
) -> anyhow::Result<PersistentVolumeClaim> {
    wait_for(30, &format!("claim {name}"), || async {
        Ok(claims.get_opt(name).await?)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ephemeral_volumes_get_claims_owned_by_their_pods() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let c = srv.client.clone();
    let cancel = CancellationToken::new();
    let cfg = ManagerConfig {
        controllers: vec![
            "ephemeral-volume".into(),
            "garbagecollector".into(),
            "pvc-protection".into(),
        ],
        connection: Some(srv.kube_config().await?),
        use_service_account_credentials: true,
        ..Default::default()
    };
    let manager_client = srv.client_as("system:kube-controller-manager", &[]).await?;
    let manager = Manager::start(manager_client, &cfg, cancel.clone()).await?;
    assert!(manager.enabled.contains(&"ephemeral-volume-controller"));
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.clone(), "default");
    let pp = PostParams::default();

    // The claim, from the template, controlled by the pod.
    let web = pods.create(&pp, &pod("web")?).await?;
    let claim = claim_of(&claims, "web-scratch").await?;
    let owners = claim.metadata.owner_references.clone().unwrap_or_default();
    assert_eq!(owners.len(), 1);
    assert_eq!(
        (
            owners[0].kind.as_str(),
            owners[0].name.as_str(),
            Some(owners[0].uid.as_str())
        ),
        ("Pod", "web", web.metadata.uid.as_deref())
    );
    assert_eq!(owners[0].controller, Some(true));
    assert_eq!(owners[0].block_owner_deletion, Some(true));
    assert_eq!(claim.metadata.labels.unwrap_or_default()["app"], "web");
    assert_eq!(
        claim.metadata.annotations.unwrap_or_default()["note"],
        "from the template"
    );
    let spec = claim.spec.unwrap_or_default();
    assert_eq!(spec.access_modes.unwrap_or_default(), ["ReadWriteOnce"]);
    assert_eq!(spec.storage_class_name.as_deref(), Some(""));
    // Only the ephemeral volume has a claim.
    assert!(claims.get_opt("web-cfg").await?.is_none());

    // Deleted while the pod lives: made again (a new object). The pod is not
    // scheduled, so PVC protection lets the first one go at once.
    claims
        .delete("web-scratch", &DeleteParams::default())
        .await?;
    let first_uid = claim.metadata.uid.clone();
    wait_for(30, "web-scratch recreated", || async {
        Ok(claims
            .get_opt("web-scratch")
            .await?
            .filter(|c| c.metadata.uid != first_uid && c.metadata.deletion_timestamp.is_none()))
    })
    .await?;

    // A claim of the generated name made by someone else is never used.
    let foreign: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "squatter-scratch"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "",
                 "resources": {"requests": {"storage": "1Gi"}}}
    }))?;
    let foreign = claims.create(&pp, &foreign).await?;
    pods.create(&pp, &pod("squatter")?).await?;
    let events: Api<Event> = Api::namespaced(c.clone(), "default");
    let want = "ephemeral volume scratch: PVC default/squatter-scratch was not created for pod default/squatter (pod is not owner)";
    let event = wait_for(30, "the FailedBinding event", || async {
        let list = events
            .list(&ListParams::default().fields("involvedObject.name=squatter"))
            .await?;
        Ok(list.items.into_iter().find(|e| {
            e.reason.as_deref() == Some("FailedBinding") && e.message.as_deref() == Some(want)
        }))
    })
    .await?;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(
        event.source.and_then(|s| s.component).as_deref(),
        Some("ephemeral_volume")
    );
    let still = claims.get("squatter-scratch").await?;
    assert_eq!(still.metadata.uid, foreign.metadata.uid);
    assert!(
        still
            .metadata
            .owner_references
            .unwrap_or_default()
            .is_empty()
    );

    // Upstream's counters: two claims made, none failed (the refusal is not a create).
    let metrics = manager.metrics();
    assert!(
        metrics.contains("\nephemeral_volume_controller_create_total 2\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("\nephemeral_volume_controller_create_failures_total 0\n"),
        "{metrics}"
    );

    // The pods deleted: the garbage collector deletes the claim the pod owns (PVC
    // protection lets it go) and leaves the one it does not. The squatter goes first,
    // so that its claim would be gone by the time the other is, were it taken.
    pods.delete("squatter", &DeleteParams::default()).await?;
    pods.delete("web", &DeleteParams::default()).await?;
    wait_for(60, "web-scratch deleted with its pod", || async {
        Ok(claims.get_opt("web-scratch").await?.is_none().then_some(()))
    })
    .await?;
    assert!(claims.get_opt("squatter-scratch").await?.is_some());

    cancel.cancel();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), manager.wait()).await;
    srv.stop().await;
    Ok(())
}
