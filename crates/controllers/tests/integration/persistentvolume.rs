//! The persistentvolume-binder controller on the test apiserver, under its own
//! ServiceAccount (`persistent-volume-binder`), run directly with `run_controller`
//! next to the pvc-protection controller (the StorageObjectInUseProtection admission
//! plugin puts the finalizers on; deleted claims go once unused). Events are written
//! as core v1 Events by a real broadcaster and read back from the apiserver. The sync
//! period is shortened so resyncs happen within the bounded waits; "stays" is checked
//! after more than two sync periods.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use ferrokube_client::events::{EventApi, EventBroadcaster, EventBroadcasterOptions};
use ferrokube_client::informer::SharedInformerFactory;
use ferrokube_client::workqueue::WorkQueue;
use ferrokube_controllers::clientbuilder::ServiceAccountClients;
use ferrokube_controllers::events::EventSink;
use ferrokube_controllers::hostpath::HostPathPlugin;
use ferrokube_controllers::persistentvolume::{
    PersistentVolumeController, PersistentVolumeOptions,
};
use ferrokube_controllers::pvcprotection::PvcProtectionController;
use ferrokube_controllers::{Controller, run_controller};
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::core::v1::{Event, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::wait_for;
use tokio_util::sync::CancellationToken;

const SYNC: Duration = Duration::from_secs(2);
/// Longer than two sync periods: what has not happened by then stays so.
const SETTLE: Duration = Duration::from_secs(5);

struct Running {
    cancel: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    factory: SharedInformerFactory,
    broadcaster: EventBroadcaster,
}

impl Running {
    async fn start(srv: &TestApiServer) -> anyhow::Result<Running> {
        Self::start_with(srv, HostPathPlugin::new(false)).await
    }

    async fn start_with(srv: &TestApiServer, hostpath: HostPathPlugin) -> anyhow::Result<Running> {
        let manager = srv.client_as("system:kube-controller-manager", &[]).await?;
        let accounts = ServiceAccountClients::new(srv.kube_config().await?, manager.clone(), None);
        let factory = SharedInformerFactory::new(manager.clone());
        let broadcaster = EventBroadcaster::new(
            manager.clone(),
            EventBroadcasterOptions {
                api: EventApi::CoreV1,
                ..Default::default()
            },
        );
        let recorder: Arc<dyn EventSink> =
            Arc::new(broadcaster.new_recorder("persistentvolume-controller"));
        let binder = PersistentVolumeController::with_options(
            &factory,
            accounts.client("persistent-volume-binder").await?,
            recorder,
            PersistentVolumeOptions {
                sync_period: SYNC,
                hostpath,
            },
        )?;
        let protection = PvcProtectionController::new(
            &factory,
            accounts.client("pvc-protection-controller").await?,
        )?;
        let controllers: Vec<Arc<dyn Controller>> = vec![binder, protection];
        let mut queues = Vec::new();
        for c in &controllers {
            let q = WorkQueue::new(c.name());
            c.clone().watch(&factory, &q);
            queues.push(q);
        }
        factory.start();
        factory.wait_for_cache_sync(Duration::from_secs(30)).await?;
        let cancel = CancellationToken::new();
        let tasks = controllers
            .into_iter()
            .zip(queues)
            .map(|(c, q)| tokio::spawn(run_controller(c, q, 1, cancel.clone())))
            .collect();
        Ok(Running {
            cancel,
            tasks,
            factory,
            broadcaster,
        })
    }

    async fn stop(self) {
        self.cancel.cancel();
        for t in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(10), t).await;
        }
        let _ = tokio::time::timeout(Duration::from_secs(10), self.factory.shutdown()).await;
        let _ = tokio::time::timeout(Duration::from_secs(10), self.broadcaster.shutdown()).await;
    }
}

/// `extra` merged over `base` (a JSON merge patch).
fn merge(base: &mut Value, extra: Value) {
    *base = ferrokube_apimachinery::patch::merge_patch_value(base, &extra)
        .expect("a merge of JSON objects");
}

fn claim(name: &str, size: &str, extra: Value) -> anyhow::Result<PersistentVolumeClaim> {
    let mut v = json!({"metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "",
                 "resources": {"requests": {"storage": size}}}});
    merge(&mut v, extra);
    Ok(serde_json::from_value(v)?)
}

fn volume(name: &str, size: &str, extra: Value) -> anyhow::Result<PersistentVolume> {
    let mut v = json!({"metadata": {"name": name},
        "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                 "hostPath": {"path": format!("/tmp/ferrokube-pv-test/{name}")}}});
    merge(&mut v, extra);
    Ok(serde_json::from_value(v)?)
}

fn annotation<'a, K: kube::Resource>(o: &'a K, key: &str) -> Option<&'a str> {
    o.meta().annotations.as_ref()?.get(key).map(String::as_str)
}

fn claim_phase(c: &PersistentVolumeClaim) -> &str {
    c.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn volume_phase(v: &PersistentVolume) -> &str {
    v.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

async fn wait_claim(
    api: &Api<PersistentVolumeClaim>,
    name: &str,
    phase: &str,
) -> anyhow::Result<PersistentVolumeClaim> {
    wait_for(30, &format!("claim {name} {phase}"), || async {
        let c = api.get(name).await?;
        Ok((claim_phase(&c) == phase).then_some(c))
    })
    .await
}

async fn wait_volume(
    api: &Api<PersistentVolume>,
    name: &str,
    phase: &str,
) -> anyhow::Result<PersistentVolume> {
    wait_for(30, &format!("volume {name} {phase}"), || async {
        let v = api.get(name).await?;
        Ok((volume_phase(&v) == phase).then_some(v))
    })
    .await
}

/// Waits for an event about `object` (in `default`, where cluster-scoped objects'
/// events go too) with this reason and message.
async fn wait_event(
    c: &Client,
    object: &str,
    reason: &str,
    message: &str,
) -> anyhow::Result<Event> {
    let events: Api<Event> = Api::namespaced(c.clone(), "default");
    wait_for(30, &format!("event {reason} on {object}"), || async {
        let list = events.list(&ListParams::default()).await?;
        Ok(list.items.into_iter().find(|e| {
            e.involved_object.name.as_deref() == Some(object)
                && e.reason.as_deref() == Some(reason)
                && e.message.as_deref() == Some(message)
        }))
    })
    .await
}

async fn events_about(c: &Client, object: &str) -> anyhow::Result<Vec<String>> {
    let events: Api<Event> = Api::namespaced(c.clone(), "default");
    Ok(events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(object))
        .filter_map(|e| e.reason)
        .collect())
}

/// Removes the pv-protection finalizer (no pv-protection controller runs here).
async fn unprotect(volumes: &Api<PersistentVolume>, name: &str) -> anyhow::Result<()> {
    volumes
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await?;
    Ok(())
}

#[tokio::test]
async fn static_volumes_bind_by_size_and_selector_and_are_released() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let c = srv.client.clone();
    let running = Running::start(&srv).await?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.clone(), "default");
    let volumes: Api<PersistentVolume> = Api::all(c.clone());
    let pp = PostParams::default();
    volumes
        .create(&pp, &volume("small", "1Gi", json!({}))?)
        .await?;
    volumes
        .create(&pp, &volume("big", "5Gi", json!({}))?)
        .await?;
    claims
        .create(&pp, &claim("data", "1Gi", json!({}))?)
        .await?;

    // The smallest volume that fits, both sides filled in as upstream.
    let data = wait_claim(&claims, "data", "Bound").await?;
    let spec = data.spec.clone().unwrap_or_default();
    assert_eq!(spec.volume_name.as_deref(), Some("small"));
    assert_eq!(
        annotation(&data, "pv.kubernetes.io/bind-completed"),
        Some("yes")
    );
    assert_eq!(
        annotation(&data, "pv.kubernetes.io/bound-by-controller"),
        Some("yes")
    );
    let status = data.status.clone().unwrap_or_default();
    assert_eq!(status.access_modes, Some(vec!["ReadWriteOnce".to_string()]));
    assert_eq!(status.capacity.unwrap_or_default()["storage"].0, "1Gi");
    let small = wait_volume(&volumes, "small", "Bound").await?;
    let r = small
        .spec
        .as_ref()
        .and_then(|s| s.claim_ref.clone())
        .expect("claimRef");
    assert_eq!(r.kind.as_deref(), Some("PersistentVolumeClaim"));
    assert_eq!(r.api_version.as_deref(), Some("v1"));
    assert_eq!(r.namespace.as_deref(), Some("default"));
    assert_eq!(r.name.as_deref(), Some("data"));
    assert_eq!(r.uid, data.metadata.uid);
    assert!(r.resource_version.is_some());
    assert_eq!(
        annotation(&small, "pv.kubernetes.io/bound-by-controller"),
        Some("yes")
    );
    assert!(
        small
            .status
            .as_ref()
            .and_then(|s| s.last_phase_transition_time.as_ref())
            .is_some()
    );
    wait_volume(&volumes, "big", "Available").await?;

    // Too large a request, and a selector nothing matches: Pending, with the event.
    claims
        .create(&pp, &claim("huge", "10Gi", json!({}))?)
        .await?;
    claims
        .create(
            &pp,
            &claim(
                "picky",
                "1Gi",
                json!({"spec": {"selector": {"matchLabels": {"tier": "gold"}}}}),
            )?,
        )
        .await?;
    let no_volume = "no persistent volumes available for this claim and no storage class is set";
    wait_event(&c, "huge", "FailedBinding", no_volume).await?;
    wait_event(&c, "picky", "FailedBinding", no_volume).await?;
    assert_eq!(claim_phase(&claims.get("huge").await?), "Pending");
    assert_eq!(claim_phase(&claims.get("picky").await?), "Pending");
    assert_eq!(volume_phase(&volumes.get("big").await?), "Available");

    // A volume that matches the selector appears: the next resync binds it.
    volumes
        .create(
            &pp,
            &volume(
                "gold",
                "2Gi",
                json!({"metadata": {"labels": {"tier": "gold"}}}),
            )?,
        )
        .await?;
    let picky = wait_claim(&claims, "picky", "Bound").await?;
    assert_eq!(
        picky.spec.and_then(|s| s.volume_name).as_deref(),
        Some("gold")
    );
    tokio::time::sleep(SETTLE).await;
    assert_eq!(claim_phase(&claims.get("huge").await?), "Pending");

    // The claim goes (pvc-protection lets it): the volume is Released and, with
    // Retain, stays so, still naming its claim.
    claims.delete("data", &DeleteParams::default()).await?;
    wait_for(30, "claim data deleted", || async {
        Ok(claims.get_opt("data").await?.is_none().then_some(()))
    })
    .await?;
    wait_volume(&volumes, "small", "Released").await?;
    tokio::time::sleep(SETTLE).await;
    let small = volumes.get("small").await?;
    assert_eq!(volume_phase(&small), "Released");
    assert_eq!(
        small
            .spec
            .and_then(|s| s.claim_ref)
            .and_then(|r| r.name)
            .as_deref(),
        Some("data")
    );

    running.stop().await;
    srv.stop().await;
    Ok(())
}

#[tokio::test]
async fn pre_bound_claims_and_volumes_bind_to_each_other() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let c = srv.client.clone();
    let running = Running::start(&srv).await?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.clone(), "default");
    let volumes: Api<PersistentVolume> = Api::all(c.clone());
    let pp = PostParams::default();
    volumes
        .create(&pp, &volume("wanted", "1Gi", json!({}))?)
        .await?;
    volumes
        .create(&pp, &volume("decoy", "1Gi", json!({}))?)
        .await?;
    volumes
        .create(&pp, &volume("cheaper", "1Gi", json!({}))?)
        .await?;
    volumes
        .create(
            &pp,
            &volume(
                "reserved",
                "3Gi",
                json!({"spec": {"claimRef": {"namespace": "default", "name": "reserver"}}}),
            )?,
        )
        .await?;
    // A volume reserved for a claim is Available until the claim comes.
    wait_volume(&volumes, "reserved", "Available").await?;

    // A claim naming its volume.
    claims
        .create(
            &pp,
            &claim("pinned", "1Gi", json!({"spec": {"volumeName": "wanted"}}))?,
        )
        .await?;
    let pinned = wait_claim(&claims, "pinned", "Bound").await?;
    assert_eq!(
        annotation(&pinned, "pv.kubernetes.io/bind-completed"),
        Some("yes")
    );
    // The user bound the claim; the controller bound the volume.
    assert_eq!(
        annotation(&pinned, "pv.kubernetes.io/bound-by-controller"),
        None
    );
    let wanted = wait_volume(&volumes, "wanted", "Bound").await?;
    assert_eq!(
        annotation(&wanted, "pv.kubernetes.io/bound-by-controller"),
        Some("yes")
    );
    let r = wanted.spec.and_then(|s| s.claim_ref).expect("claimRef");
    assert_eq!(
        (r.name.as_deref(), r.uid.as_ref()),
        (Some("pinned"), pinned.metadata.uid.as_ref())
    );

    // A volume naming its claim wins over a smaller free one.
    claims
        .create(&pp, &claim("reserver", "1Gi", json!({}))?)
        .await?;
    let reserver = wait_claim(&claims, "reserver", "Bound").await?;
    assert_eq!(
        reserver
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.as_deref()),
        Some("reserved")
    );
    assert_eq!(
        annotation(&reserver, "pv.kubernetes.io/bound-by-controller"),
        Some("yes")
    );
    assert_eq!(
        reserver
            .status
            .clone()
            .unwrap_or_default()
            .capacity
            .unwrap_or_default()["storage"]
            .0,
        "3Gi"
    );
    let reserved = wait_volume(&volumes, "reserved", "Bound").await?;
    assert_eq!(
        annotation(&reserved, "pv.kubernetes.io/bound-by-controller"),
        None
    );
    assert_eq!(
        reserved.spec.and_then(|s| s.claim_ref).and_then(|r| r.uid),
        reserver.metadata.uid
    );

    // A claim naming a volume too small for it waits, with the reason.
    claims
        .create(
            &pp,
            &claim("too-big", "5Gi", json!({"spec": {"volumeName": "decoy"}}))?,
        )
        .await?;
    wait_event(
        &c,
        "too-big",
        "VolumeMismatch",
        "Cannot bind to requested volume \"decoy\": requested PV is too small",
    )
    .await?;
    assert_eq!(claim_phase(&claims.get("too-big").await?), "Pending");
    assert_eq!(volume_phase(&volumes.get("decoy").await?), "Available");
    assert_eq!(volume_phase(&volumes.get("cheaper").await?), "Available");

    // The bound volume vanishes: its claim is Lost.
    unprotect(&volumes, "wanted").await?;
    volumes.delete("wanted", &DeleteParams::default()).await?;
    wait_claim(&claims, "pinned", "Lost").await?;
    wait_event(
        &c,
        "pinned",
        "ClaimLost",
        "Bound claim has lost its PersistentVolume. Data on the volume is lost!",
    )
    .await?;
    let lost = claims.get("pinned").await?.status.unwrap_or_default();
    assert_eq!((lost.capacity, lost.access_modes), (None, None));

    running.stop().await;
    srv.stop().await;
    Ok(())
}

#[tokio::test]
async fn storage_classes_wait_for_a_consumer_or_an_external_provisioner() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let c = srv.client.clone();
    let running = Running::start(&srv).await?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.clone(), "default");
    let volumes: Api<PersistentVolume> = Api::all(c.clone());
    let classes: Api<StorageClass> = Api::all(c.clone());
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    let pp = PostParams::default();
    for (name, mode) in [("late", "WaitForFirstConsumer"), ("fast", "Immediate")] {
        classes
            .create(
                &pp,
                &serde_json::from_value(json!({"metadata": {"name": name},
                    "provisioner": format!("example.com/{name}"), "reclaimPolicy": "Delete",
                    "volumeBindingMode": mode}))?,
            )
            .await?;
    }
    // A static volume of the delayed class: binding it is the scheduler's, not ours.
    volumes
        .create(
            &pp,
            &volume(
                "late-static",
                "1Gi",
                json!({"spec": {"storageClassName": "late"}}),
            )?,
        )
        .await?;
    claims
        .create(
            &pp,
            &claim(
                "waiting",
                "1Gi",
                json!({"spec": {"storageClassName": "late"}}),
            )?,
        )
        .await?;
    wait_event(
        &c,
        "waiting",
        "WaitForFirstConsumer",
        "waiting for first consumer to be created before binding",
    )
    .await?;
    // A pod that uses it, not scheduled yet.
    pods.create(
        &pp,
        &serde_json::from_value(json!({"metadata": {"name": "web"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}],
                     "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "waiting"}}]}}))?,
    )
    .await?;
    wait_event(
        &c,
        "waiting",
        "WaitForPodScheduled",
        "waiting for pod web to be scheduled",
    )
    .await?;
    let waiting = claims.get("waiting").await?;
    assert_eq!(claim_phase(&waiting), "Pending");
    assert_eq!(
        annotation(&waiting, "volume.kubernetes.io/storage-provisioner"),
        None
    );
    assert_eq!(
        volume_phase(&volumes.get("late-static").await?),
        "Available"
    );

    // The scheduler picked a node: the external provisioner is asked.
    claims
        .patch(
            "waiting",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                "volume.kubernetes.io/selected-node": "node-a"}}})),
        )
        .await?;
    let waiting = wait_for(30, "provisioner annotations", || async {
        let w = claims.get("waiting").await?;
        Ok(annotation(&w, "volume.kubernetes.io/storage-provisioner")
            .is_some()
            .then_some(w))
    })
    .await?;
    assert_eq!(
        annotation(&waiting, "volume.kubernetes.io/storage-provisioner"),
        Some("example.com/late")
    );
    assert_eq!(
        annotation(&waiting, "volume.beta.kubernetes.io/storage-provisioner"),
        Some("example.com/late")
    );
    let provisioning = "Waiting for a volume to be created either by the external provisioner 'example.com/late' or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered.";
    wait_event(&c, "waiting", "ExternalProvisioning", provisioning).await?;

    // The provisioner creates a volume pre-bound to the claim: the binding completes.
    let uid = waiting.metadata.uid.clone().unwrap_or_default();
    let provisioned = format!("pvc-{uid}");
    volumes
        .create(
            &pp,
            &volume(
                &provisioned,
                "1Gi",
                json!({"metadata": {"annotations": {"pv.kubernetes.io/provisioned-by": "example.com/late"}},
                       "spec": {"storageClassName": "late", "persistentVolumeReclaimPolicy": "Delete",
                                "claimRef": {"namespace": "default", "name": "waiting", "uid": uid}}}),
            )?,
        )
        .await?;
    let waiting = wait_claim(&claims, "waiting", "Bound").await?;
    assert_eq!(
        waiting.spec.as_ref().and_then(|s| s.volume_name.as_deref()),
        Some(provisioned.as_str())
    );
    assert_eq!(
        annotation(&waiting, "pv.kubernetes.io/bind-completed"),
        Some("yes")
    );
    wait_volume(&volumes, &provisioned, "Bound").await?;
    assert_eq!(
        volume_phase(&volumes.get("late-static").await?),
        "Available"
    );

    // An Immediate class without a volume: provisioning is asked for at once.
    claims
        .create(
            &pp,
            &claim("auto", "1Gi", json!({"spec": {"storageClassName": "fast"}}))?,
        )
        .await?;
    let auto = wait_for(30, "provisioner annotation on auto", || async {
        let a = claims.get("auto").await?;
        Ok(annotation(&a, "volume.kubernetes.io/storage-provisioner")
            .is_some()
            .then_some(a))
    })
    .await?;
    assert_eq!(
        annotation(&auto, "volume.kubernetes.io/storage-provisioner"),
        Some("example.com/fast")
    );
    assert_eq!(
        annotation(&auto, "volume.beta.kubernetes.io/storage-provisioner"),
        Some("example.com/fast")
    );
    wait_event(
        &c,
        "auto",
        "ExternalProvisioning",
        &provisioning.replace("example.com/late", "example.com/fast"),
    )
    .await?;

    // The provisioned volume's claim goes: Released, and left to its provisioner
    // to delete (no Failed phase, no VolumeFailedDelete).
    pods.delete("web", &DeleteParams::default()).await?;
    claims.delete("waiting", &DeleteParams::default()).await?;
    wait_volume(&volumes, &provisioned, "Released").await?;
    tokio::time::sleep(SETTLE).await;
    assert_eq!(volume_phase(&volumes.get(&provisioned).await?), "Released");
    assert!(
        !events_about(&c, &provisioned)
            .await?
            .iter()
            .any(|r| r == "VolumeFailedDelete")
    );

    running.stop().await;
    srv.stop().await;
    Ok(())
}

#[tokio::test]
async fn released_volumes_without_a_deleter_or_recycler_fail() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let c = srv.client.clone();
    let running = Running::start(&srv).await?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.clone(), "default");
    let volumes: Api<PersistentVolume> = Api::all(c.clone());
    let pp = PostParams::default();
    // A local volume has no deleter in the controller manager (a hostPath one has).
    let local = json!({"hostPath": null, "local": {"path": "/mnt/del"},
        "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-a"]}]}]}}});
    for (name, policy, source) in [("del", "Delete", local), ("rec", "Recycle", json!({}))] {
        let mut spec = json!({"persistentVolumeReclaimPolicy": policy});
        // Inserted, not merged: the null has to reach `volume`'s merge to drop hostPath.
        for (k, v) in source.as_object().into_iter().flatten() {
            spec[k] = v.clone();
        }
        volumes
            .create(&pp, &volume(name, "1Gi", json!({ "spec": spec }))?)
            .await?;
        let claim_name = format!("c-{name}");
        claims
            .create(
                &pp,
                &claim(&claim_name, "1Gi", json!({"spec": {"volumeName": name}}))?,
            )
            .await?;
        wait_claim(&claims, &claim_name, "Bound").await?;
        claims.delete(&claim_name, &DeleteParams::default()).await?;
    }
    let deleted =
        "error getting deleter volume plugin for volume \"del\": no volume plugin matched";
    let del = wait_volume(&volumes, "del", "Failed").await?;
    assert_eq!(del.status.and_then(|s| s.message).as_deref(), Some(deleted));
    wait_event(&c, "del", "VolumeFailedDelete", deleted).await?;
    let recycled = "No recycler plugin found for the volume!";
    let rec = wait_volume(&volumes, "rec", "Failed").await?;
    assert_eq!(
        rec.status.and_then(|s| s.message).as_deref(),
        Some(recycled)
    );
    wait_event(&c, "rec", "VolumeFailedRecycle", recycled).await?;
    // Failed stays Failed (the controller keeps retrying underneath).
    tokio::time::sleep(SETTLE).await;
    assert_eq!(volume_phase(&volumes.get("del").await?), "Failed");
    assert_eq!(volume_phase(&volumes.get("rec").await?), "Failed");

    running.stop().await;
    srv.stop().await;
    Ok(())
}

#[tokio::test]
async fn many_claims_and_volumes_pair_up_one_to_one() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let c = srv.client.clone();
    let running = Running::start(&srv).await?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.clone(), "default");
    let volumes: Api<PersistentVolume> = Api::all(c.clone());
    let pp = PostParams::default();
    const N: usize = 8;
    for i in 0..N {
        volumes
            .create(
                &pp,
                &volume(&format!("pv-{i}"), &format!("{}Gi", i + 1), json!({}))?,
            )
            .await?;
    }
    for i in 0..N {
        claims
            .create(&pp, &claim(&format!("claim-{i}"), "1Gi", json!({}))?)
            .await?;
    }
    let bound = wait_for(60, "every claim Bound", || async {
        let list = claims.list(&ListParams::default()).await?.items;
        Ok((list.len() == N && list.iter().all(|c| claim_phase(c) == "Bound")).then_some(list))
    })
    .await?;
    let mut taken: Vec<String> = bound
        .iter()
        .filter_map(|c| c.spec.as_ref().and_then(|s| s.volume_name.clone()))
        .collect();
    taken.sort();
    taken.dedup();
    assert_eq!(taken.len(), N, "each claim has a volume of its own");
    for claim in &bound {
        let name = claim
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.clone())
            .unwrap_or_default();
        let v = wait_volume(&volumes, &name, "Bound").await?;
        let r = v.spec.and_then(|s| s.claim_ref).expect("claimRef");
        assert_eq!(r.name, claim.metadata.name);
        assert_eq!(r.uid, claim.metadata.uid);
    }

    running.stop().await;
    srv.stop().await;
    Ok(())
}

/// `--enable-hostpath-provisioner`: a claim of a `kubernetes.io/host-path` class gets a
/// directory under /tmp and a volume bound to it; deleting the claim deletes both
/// (the `Delete` policy), the in-tree finalizer going with the directory.
#[tokio::test]
async fn the_hostpath_provisioner_makes_and_deletes_volumes() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let c = srv.client.clone();
    let base = format!("ferrokube-pv-hostpath-test-{}", std::process::id());
    let running = Running::start_with(&srv, HostPathPlugin::new(true).with_base(&base)).await?;
    let classes: Api<StorageClass> = Api::all(c.clone());
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.clone(), "default");
    let volumes: Api<PersistentVolume> = Api::all(c.clone());
    let pp = PostParams::default();
    classes
        .create(
            &pp,
            &serde_json::from_value(
                json!({"metadata": {"name": "standard"}, "provisioner": "kubernetes.io/host-path"}),
            )?,
        )
        .await?;
    let created = claims
        .create(
            &pp,
            &claim(
                "data",
                "2Gi",
                json!({"spec": {"storageClassName": "standard"}}),
            )?,
        )
        .await?;
    let bound = wait_claim(&claims, "data", "Bound").await?;
    let name = format!("pvc-{}", created.metadata.uid.unwrap_or_default());
    assert_eq!(
        bound.spec.as_ref().and_then(|s| s.volume_name.as_deref()),
        Some(name.as_str())
    );
    assert_eq!(
        annotation(&bound, "volume.kubernetes.io/storage-provisioner"),
        Some("kubernetes.io/host-path")
    );
    wait_event(
        &c,
        "data",
        "ProvisioningSucceeded",
        &format!("Successfully provisioned volume {name} using kubernetes.io/host-path"),
    )
    .await?;
    let v = wait_volume(&volumes, &name, "Bound").await?;
    assert_eq!(
        annotation(&v, "pv.kubernetes.io/provisioned-by"),
        Some("kubernetes.io/host-path")
    );
    assert_eq!(
        annotation(&v, "kubernetes.io/createdby"),
        Some("hostpath-dynamic-provisioner")
    );
    let finalizers = v.metadata.finalizers.clone().unwrap_or_default();
    assert!(
        finalizers.contains(&"kubernetes.io/pv-controller".to_string()),
        "{finalizers:?}"
    );
    let spec = v.spec.clone().unwrap_or_default();
    assert_eq!(spec.storage_class_name.as_deref(), Some("standard"));
    assert_eq!(
        spec.persistent_volume_reclaim_policy.as_deref(),
        Some("Delete")
    );
    assert_eq!(
        spec.capacity
            .and_then(|c| c.get("storage").cloned())
            .map(|q| q.0),
        Some("2Gi".to_string())
    );
    let path = spec.host_path.map(|h| h.path).unwrap_or_default();
    assert!(path.starts_with(&format!("/tmp/{base}/")), "{path}");
    assert!(std::path::Path::new(&path).is_dir(), "{path} was not made");
    std::fs::write(format!("{path}/data"), b"written by a pod")?;

    // The claim goes: the directory, the in-tree finalizer, then the object (which
    // only the pv-protection finalizer the admission plugin added keeps here).
    claims.delete("data", &DeleteParams::default()).await?;
    let deleting = wait_for(30, "the provisioned volume deleted", || async {
        let v = volumes.get(&name).await?;
        Ok(v.metadata.deletion_timestamp.is_some().then_some(v))
    })
    .await?;
    assert_eq!(
        deleting.metadata.finalizers,
        Some(vec!["kubernetes.io/pv-protection".to_string()])
    );
    assert!(
        !std::path::Path::new(&path).exists(),
        "{path} is still there"
    );
    unprotect(&volumes, &name).await?;
    wait_for(30, "the volume gone", || async {
        Ok(volumes.get_opt(&name).await?.is_none().then_some(()))
    })
    .await?;

    // A Retain class: the directory stays with the Released volume, no finalizer.
    classes
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": "kept"},
                "provisioner": "kubernetes.io/host-path", "reclaimPolicy": "Retain"}))?,
        )
        .await?;
    let kept = claims
        .create(
            &pp,
            &claim("kept", "1Gi", json!({"spec": {"storageClassName": "kept"}}))?,
        )
        .await?;
    wait_claim(&claims, "kept", "Bound").await?;
    let kept_name = format!("pvc-{}", kept.metadata.uid.unwrap_or_default());
    claims.delete("kept", &DeleteParams::default()).await?;
    let released = wait_volume(&volumes, &kept_name, "Released").await?;
    assert_eq!(
        released.metadata.finalizers,
        Some(vec!["kubernetes.io/pv-protection".to_string()])
    );
    let kept_path = released
        .spec
        .and_then(|s| s.host_path)
        .map(|h| h.path)
        .unwrap_or_default();
    assert!(
        std::path::Path::new(&kept_path).is_dir(),
        "{kept_path} went"
    );

    running.stop().await;
    srv.stop().await;
    std::fs::remove_dir_all(format!("/tmp/{base}"))?;
    Ok(())
}

/// Without `--enable-hostpath-provisioner` the claim names its provisioner and stays
/// Pending, with upstream's event.
#[tokio::test]
async fn the_hostpath_provisioner_is_off_by_default() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let c = srv.client.clone();
    let running = Running::start(&srv).await?;
    let classes: Api<StorageClass> = Api::all(c.clone());
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.clone(), "default");
    let pp = PostParams::default();
    classes
        .create(
            &pp,
            &serde_json::from_value(
                json!({"metadata": {"name": "standard"}, "provisioner": "kubernetes.io/host-path"}),
            )?,
        )
        .await?;
    claims
        .create(
            &pp,
            &claim(
                "data",
                "1Gi",
                json!({"spec": {"storageClassName": "standard"}}),
            )?,
        )
        .await?;
    wait_event(
        &c,
        "data",
        "ProvisioningFailed",
        "Failed to create provisioner: provisioning in volume plugin \"kubernetes.io/host-path\" is disabled",
    )
    .await?;
    let pending = claims.get("data").await?;
    assert_eq!(claim_phase(&pending), "Pending");
    assert_eq!(
        annotation(&pending, "volume.kubernetes.io/storage-provisioner"),
        Some("kubernetes.io/host-path")
    );
    let volumes: Api<PersistentVolume> = Api::all(c.clone());
    assert!(volumes.list(&ListParams::default()).await?.items.is_empty());

    running.stop().await;
    srv.stop().await;
    Ok(())
}
